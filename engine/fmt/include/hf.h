/*
 * hf: Hugging Face GPT-2 checkpoint folders (GPT2LMHeadModel): config.json
 * with the GPT2Config fields, model.safetensors with the transformer.*
 * tensor names (Conv1D weights stored [in, out], lm_head tied to wte and
 * not stored), and for GPT-2-tokenized models vocab.json + merges.txt.
 *
 * gptd's layout (gpt_model_layout) pads wte to Vp rows; the file has
 * vocab_size rows: padding rows are dropped on export and zero on import.
 *
 * Blocking file I/O on the calling thread (as the caller's file-system
 * identity); any thread.
 */
#ifndef GPT_FMT_HF_H
#define GPT_FMT_HF_H

#include "export.h"

#define GPT_HF_CONFIG_MAX (1u << 20) /* bytes of config.json */

/* Reads dir/config.json into *ret_cfg (n_layer, n_head, n_embd,
 * n_positions as block_size, vocab_size), refusing what gptd's model
 * cannot represent (another activation or epsilon, n_inner != 4 n_embd),
 * naming the field. */
int gpt_hf_probe(const char *dir, struct gpt_model_config *ret_cfg, struct gpt_err *err);

/* Reads dir/model.safetensors into `params` (layout->n_params floats, the
 * layout of the config gpt_hf_probe gave): every tensor is checked for
 * name, shape and dtype (F32, F16, BF16). */
int gpt_hf_load(const char *dir, const struct gpt_model *layout, float *params,
                struct gpt_err *err);

/* Writes the folder `path` atomically (a temporary folder beside it, then
 * rename); an existing `path` is refused. */
int gpt_hf_write(const char *path, const struct gpt_fmt_src *src, struct gpt_err *err);

#endif
