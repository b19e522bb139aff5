/*
 * export: the one table of model formats gptd reads and writes (a row per
 * format: how to read its model config, load its weights, write it), the
 * detection of a checkpoint's format, and the atomic-write helpers the
 * writers share.
 *
 * Blocking file I/O with the calling thread's file-system identity; any
 * thread. Nothing here logs.
 */
#ifndef GPT_FMT_EXPORT_H
#define GPT_FMT_EXPORT_H

#include <stdatomic.h>
#include <stddef.h>
#include <sys/types.h>

#include "fmt.h"
#include "gpt_err.h"
#include "model.h"

/* A model to write: gptd's flat parameters (borrowed). */
struct gpt_fmt_src {
    struct gpt_model_config cfg;
    const float *params; /* n_params floats in gpt_model_layout's order (wte padded to Vp) */
    size_t n_params;
    const char *vocab_dir; /* GPT-2 tokenizer files to ship with it; NULL: none */
    const char *dtype;     /* matrices: "f32" (NULL too), "f16" or "bf16" (GGUF only) */
    const char *name;      /* the model's name (GGUF general.name); NULL: "gptd" */
    /* borrowed; NULL = none. Another thread sets it to stop the export: the
     * writers check it between tensors, fail with -ECANCELED and leave no
     * file behind. */
    const atomic_int *cancel;
    mode_t file_mode; /* permission bits of the files written; 0: 0644 */
    mode_t dir_mode;  /* of the folder written (hf); 0: 0755 */
    /* The temporary file's (hf: folder's) name beside the target: this and
     * six random characters. NULL: the writer's own (".NAME.tmp-", hf
     * "NAME.tmp-"). A caller that cleans up after a crash names it. */
    const char *tmp_prefix;
};

/* One format. Any slot may be NULL (not built in this binary). */
struct gpt_fmt_ops {
    enum gpt_fmt_kind kind;
    /* The model config stored in the checkpoint at path. */
    int (*probe)(const char *path, struct gpt_model_config *ret_cfg, struct gpt_err *err);
    /* Its weights into params (layout->n_params floats, layout of probe's config). */
    int (*load)(const char *path, const struct gpt_model *layout, float *params,
                struct gpt_err *err);
    /* Writes src to path atomically. */
    int (*write)(const char *path, const struct gpt_fmt_src *src, struct gpt_err *err);
};

/* The row of `kind`, or NULL when this build has none. */
const struct gpt_fmt_ops *gpt_fmt_ops_of(enum gpt_fmt_kind kind);

/* Writes src as `kind` to path. -ENOSYS ("not built") when this build has
 * no writer for it. */
int gpt_fmt_export(enum gpt_fmt_kind kind, const char *path, const struct gpt_fmt_src *src,
                   struct gpt_err *err);

/* The format of the checkpoint at path: a folder is hf, a file is told by
 * its magic (GPTDSNAP, llm.c's 20240326, GGUF). */
int gpt_fmt_detect(const char *path, enum gpt_fmt_kind *ret_kind, struct gpt_err *err);

/* A checkpoint read whole: its kind, config (vocab_size as stored) and
 * weights in gptd's layout. */
struct gpt_fmt_loaded {
    enum gpt_fmt_kind kind;
    struct gpt_model_config cfg;
    float *params; /* owned: n_params floats */
    size_t n_params;
};

/* Detects, probes and loads path. */
int gpt_fmt_load(const char *path, struct gpt_fmt_loaded *ret, struct gpt_err *err);
void gpt_fmt_loaded_done(struct gpt_fmt_loaded *l);

/* Reads only the config (and kind) of path. */
int gpt_fmt_probe(const char *path, enum gpt_fmt_kind *ret_kind, struct gpt_model_config *ret_cfg,
                  struct gpt_err *err);

/* Refuses a path whose final component exists as a symlink or a folder
 * (for files), or exists at all (for folders: dir nonzero). */
int gpt_fmt_check_target(const char *path, int dir, struct gpt_err *err);

#endif
