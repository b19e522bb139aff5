/*
 * fmt: model files in and out of gptd. Hugging Face GPT-2 folders
 * (config.json + model.safetensors), llm.c checkpoints and GGUF, read into
 * and written from gptd's parameter layout (gpt_model_layout: one flat fp32
 * array, tensors in the order and shapes of engine/model.c). A library of
 * its own (gptfmt) above the engine and the tokenizer: it parses JSON
 * headers with jansson, which the engine does not link.
 *
 * Every reader treats its file as hostile: sizes, dtypes, header lengths and
 * offsets are checked against the file before any byte is used.
 */
#ifndef GPT_FMT_H
#define GPT_FMT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpt_err.h"

enum gpt_fmt_kind {
    GPT_FMT_NONE = 0,
    GPT_FMT_GPTS, /* gptd's own snapshot (.gpts, gptd-snapshot(5)) */
    GPT_FMT_HF,   /* Hugging Face GPT2LMHeadModel folder */
    GPT_FMT_LLMC, /* llm.c checkpoint (magic 20240326) */
    GPT_FMT_GGUF, /* GGUF v3, llama.cpp's gpt2 architecture */
};

/* "gpts", "hf", "llmc" or "gguf" to its kind; GPT_FMT_NONE (and a message
 * in err naming the accepted names) for anything else. */
enum gpt_fmt_kind gpt_fmt_kind_parse(const char *name, struct gpt_err *err);

/* The kind's name as gpt_fmt_kind_parse takes it ("?" when out of range). */
const char *gpt_fmt_kind_name(enum gpt_fmt_kind kind);

struct gpt_model;

/* A reader's check, at probe, that a header's model fits its file: the
 * tensors of layout m (wte of vocab_size rows, as files store it) at
 * elem_bytes each (the narrowest type the reader takes) against `have`
 * bytes of tensor data in `file`. 0, or -GPT_E_CORRUPT with err naming
 * the file, what made the claim (`claim`: "its header", "config.json"),
 * the model and both sizes: a reader refuses a file this way before it
 * allocates the claimed model. Pure. */
int gpt_fmt_check_data_size(const char *file, const char *claim, const struct gpt_model *m,
                            unsigned elem_bytes, uint64_t have, struct gpt_err *err);

/* Whether `cancel` (may be NULL) asks to stop. The writers check it between
 * tensors. Any thread. */
static inline bool gpt_fmt_cancelled(const atomic_int *cancel)
{
    return cancel && atomic_load_explicit(cancel, memory_order_relaxed) != 0;
}

#endif
