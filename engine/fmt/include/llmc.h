/*
 * llmc: llm.c's GPT-2 checkpoint format (train_gpt2.c / train_gpt2.py's
 * write_model), read into and written from gptd's parameter layout.
 *
 * File: a header of 256 little-endian int32
 *   [0] magic 20240326, [1] version (3: float32 parameters, 5: bfloat16),
 *   [2] maxT (block_size), [3] V (vocab_size), [4] L, [5] NH, [6] C,
 *   [7] Vp (the padded vocabulary, e.g. 50304), the rest unused (zero);
 * then the parameters, 16 tensors one after another, each holding ALL
 * layers of its kind (llm.c's order; gptd's flat layout is layer-major):
 *   wte (Vp, C), wpe (maxT, C), ln1w (L, C), ln1b (L, C),
 *   qkvw (L, 3C, C), qkvb (L, 3C), attprojw (L, C, C), attprojb (L, C),
 *   ln2w (L, C), ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C),
 *   fcprojw (L, C, 4C), fcprojb (L, C), lnfw (C), lnfb (C).
 * Matrices are (out, in), row-major, as in gptd. Rows of wte past V are
 * padding; gptd pads its own way (gpt_model_layout's Vp), so the reader
 * copies rows 0..V-1 and zeroes gptd's padding unless both Vp agree.
 *
 * Readers treat the file as hostile: every header field and the file size
 * are checked before any parameter is read. Blocking file I/O on the
 * calling thread; no state between calls; nothing logs.
 */
#ifndef GPT_FMT_LLMC_H
#define GPT_FMT_LLMC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpt_err.h"
#include "gpt_config.h"

#define GPT_LLMC_MAGIC        20240326
#define GPT_LLMC_VERSION_FP32 3
#define GPT_LLMC_VERSION_BF16 5
#define GPT_LLMC_HEADER_INTS  256
#define GPT_LLMC_HEADER_BYTES (GPT_LLMC_HEADER_INTS * 4)
#define GPT_LLMC_VP_MAX       ((1 << 24) + 4096) /* padded vocabularies past this are refused */

/* A checked header. */
struct gpt_llmc_header {
    int version;
    size_t maxT, V, L, NH, C, Vp;
    uint64_t n_params;   /* parameters in the file (its Vp) */
    uint64_t file_bytes; /* header + parameters: the file's exact size */
};

/* Parses and checks the header in buf[0, len) of a file of `file_size`
 * bytes (`name` goes into messages): magic, version, every dimension
 * against gptd's model limits, NH dividing C, V <= Vp, and file_size
 * against the parameter count. -GPT_E_CORRUPT / -GPT_E_VERSION /
 * -EINVAL (a model gptd cannot hold) with err naming the file and the
 * field. Pure; the fuzz target's entry. */
int gpt_llmc_parse_header(const void *buf, size_t len, uint64_t file_size, const char *name,
                          struct gpt_llmc_header *ret, struct gpt_err *err);

/* Reads an llm.c checkpoint (version 3 or 5; bfloat16 is widened to
 * float32 exactly). On success *ret_cfg is the model's configuration
 * (block_size = maxT, vocab_size = V), *ret_params a new malloc'd array
 * of *ret_n floats in gptd's layout (gpt_model_layout of *ret_cfg; the
 * caller frees it). On failure nothing is returned. Blocks. */
int gpt_llmc_read(const char *path, struct gpt_model_config *ret_cfg, float **ret_params,
                  size_t *ret_n, struct gpt_err *err);

/* The same from a file's bytes in memory (borrowed). Pure. */
int gpt_llmc_read_mem(const void *buf, size_t len, const char *name,
                      struct gpt_model_config *ret_cfg, float **ret_params, size_t *ret_n,
                      struct gpt_err *err);

struct gpt_model;

/* The export table's read slots (engine/fmt/export.h's struct
 * gpt_fmt_ops): probe gives the checkpoint's model config after checking
 * the header and the file size; load reads its parameters into params
 * (layout->n_params floats, caller's buffer) for `layout`, the
 * gpt_model_layout of probe's config (another config is -EINVAL). */
int gpt_llmc_probe(const char *path, struct gpt_model_config *ret_cfg, struct gpt_err *err);
int gpt_llmc_load(const char *path, const struct gpt_model *layout, float *params,
                  struct gpt_err *err);

struct gpt_llmc_write_opts {
    mode_t mode;              /* the file's permission bits; 0: 0644 */
    const char *tmp_prefix;   /* the temporary file's name (gpt_fmt_out_open); NULL: default */
    const atomic_int *cancel; /* NULL: none; checked between tensors (-ECANCELED) */
};

/* Writes params (gptd's layout for cfg, host memory, borrowed) as an llm.c
 * version 3 (float32) checkpoint at path, atomically (a temporary file
 * renamed into place). Vp in the file is gptd's padded vocabulary, with
 * gptd's padding rows. vocab_dir is unused (llm.c keeps no tokenizer in
 * its checkpoint) and may be NULL. opts gives the file's mode, temporary
 * name and a cancel flag checked between tensors (-ECANCELED, nothing
 * left behind); NULL: the defaults. */
int gpt_llmc_write_opts(const char *path, const struct gpt_model_config *cfg, const float *params,
                        const char *vocab_dir, const struct gpt_llmc_write_opts *opts,
                        struct gpt_err *err);

#endif
