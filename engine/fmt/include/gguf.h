/*
 * gguf: GGUF version 3 files (ggml / llama.cpp) for llama.cpp's "gpt2"
 * architecture: a writer from gptd's parameter layout, and a small reader
 * back into it (for round trips and as a model.init_from source).
 *
 * What the writer puts in a file:
 *   general.architecture = "gpt2", general.name, general.file_type (0 all
 *   float32, 1 mostly float16, 32 mostly bfloat16), general.alignment = 32,
 *   gpt2.context_length (block_size), gpt2.embedding_length (C),
 *   gpt2.feed_forward_length (4C), gpt2.block_count (L),
 *   gpt2.attention.head_count (NH), gpt2.attention.layer_norm_epsilon
 *   (1e-5); with a GPT-2 vocabulary folder also tokenizer.ggml.model =
 *   "gpt2", tokenizer.ggml.pre = "gpt-2", tokenizer.ggml.tokens (the
 *   encoder.json strings by id), tokenizer.ggml.token_type (1 normal, 3
 *   control for <|endoftext|>), tokenizer.ggml.merges ("A B", by rank),
 *   tokenizer.ggml.bos_token_id / eos_token_id (<|endoftext|>, 50256).
 * Tensors (GGUF lists dimensions innermost first: ne[0] is the row length):
 *   token_embd.weight [C, V], position_embd.weight [C, maxT],
 *   blk.N.attn_norm.weight/bias [C], blk.N.attn_qkv.weight [C, 3C] / bias
 *   [3C], blk.N.attn_output.weight [C, C] / bias [C], blk.N.ffn_norm.weight
 *   /bias [C], blk.N.ffn_up.weight [C, 4C] / bias [4C], blk.N.ffn_down
 *   .weight [4C, C] / bias [C], output_norm.weight/bias [C], and
 *   output.weight [C, V] (the tied LM head, a copy of token_embd as
 *   llama.cpp's converter writes it). Only the V real vocabulary rows are
 *   written. Matrices are float32, float16 or bfloat16 (the dtype option);
 *   1-D tensors are always float32.
 *
 * The reader treats the file as hostile: every count, length, dimension
 * and offset is checked against named limits and the file's size.
 * Blocking file I/O on the calling thread; nothing logs.
 */
#ifndef GPT_FMT_GGUF_H
#define GPT_FMT_GGUF_H

#include <stdatomic.h>
#include <stddef.h>
#include <sys/types.h>

#include "gpt_err.h"
#include "gpt_config.h"

#define GPT_GGUF_VERSION     3
#define GPT_GGUF_ALIGNMENT   32
#define GPT_GGUF_TENSORS_MAX 4096       /* reader: more tensors are refused */
#define GPT_GGUF_KV_MAX      4096       /* reader: more metadata keys are refused */
#define GPT_GGUF_STRING_MAX  (1u << 20) /* reader: a longer key or string is refused */

/* Tensor element types (ggml's numbers). */
enum gpt_gguf_dtype {
    GPT_GGUF_F32 = 0,
    GPT_GGUF_F16 = 1,
    GPT_GGUF_BF16 = 30,
};

/* "f32", "f16" or "bf16" to the type; -EINVAL (err names the choices). */
int gpt_gguf_dtype_parse(const char *name, enum gpt_gguf_dtype *ret, struct gpt_err *err);

struct gpt_gguf_write_opts {
    enum gpt_gguf_dtype dtype; /* of the matrices; 1-D tensors stay float32 */
    const char *name;          /* general.name; NULL: "gptd" */
    const atomic_int *cancel;  /* NULL: none; checked between tensors (-ECANCELED) */
    mode_t mode;               /* the file's permission bits; 0: 0644 */
    const char *tmp_prefix;    /* the temporary file's name (gpt_fmt_out_open); NULL: default */
};

/* Writes params (gptd's layout for cfg, host, borrowed) as a GGUF v3 file
 * at path, atomically. vocab_dir: a GPT-2 vocabulary folder (engine/tok)
 * whose tokenizer metadata goes into the file (its size must be
 * cfg->vocab_size), or NULL for none. opts NULL: float32, "gptd". */
int gpt_gguf_write_opts(const char *path, const struct gpt_model_config *cfg, const float *params,
                        const char *vocab_dir, const struct gpt_gguf_write_opts *opts,
                        struct gpt_err *err);

/* Reads a gpt2-architecture GGUF file (float32, float16 or bfloat16
 * tensors, widened to float32) into a new malloc'd array of *ret_n floats
 * in gptd's layout for *ret_cfg (vocab_size = token_embd's rows). The
 * tokenizer metadata is checked for shape only, not used. Blocks. */
int gpt_gguf_read(const char *path, struct gpt_model_config *ret_cfg, float **ret_params,
                  size_t *ret_n, struct gpt_err *err);

/* The export table's read slots (engine/fmt/export.h's struct
 * gpt_fmt_ops): probe gives the file's model config after parsing the
 * metadata and tensor table; load reads the tensors into params
 * (layout->n_params floats, caller's buffer) for `layout`, the
 * gpt_model_layout of probe's config (another config is -EINVAL). */
struct gpt_model;
int gpt_gguf_probe(const char *path, struct gpt_model_config *ret_cfg, struct gpt_err *err);
int gpt_gguf_load(const char *path, const struct gpt_model *layout, float *params,
                  struct gpt_err *err);

/* The same as gpt_gguf_read from a file's bytes in memory (borrowed).
 * Pure; the fuzz target's entry. */
int gpt_gguf_read_mem(const void *buf, size_t len, const char *name,
                      struct gpt_model_config *ret_cfg, float **ret_params, size_t *ret_n,
                      struct gpt_err *err);

#endif
