/*
 * fmt_out: one output file of a model format written atomically: bytes go
 * through a buffer into a gpt_atomic_file (a temporary file beside the
 * target that commit syncs and renames over it), so a file under its final
 * name is always complete; gpt_fmt_out_abort (or a failed commit) removes
 * the temporary file.
 *
 * Private to engine/fmt (llmc.c, gguf.c). Blocking I/O on the calling
 * thread; one writer per struct.
 */
#ifndef GPT_FMT_OUT_H
#define GPT_FMT_OUT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpt_atomic_file.h"
#include "gpt_err.h"

struct gpt_fmt_out {
    struct gpt_atomic_file f;
    unsigned char *buf;
    size_t used;
    uint64_t written; /* bytes passed to gpt_fmt_out_write so far */
    int failed;       /* a write failed: commit refuses */
};

/* Creates the temporary file for `path` with permission bits `mode` (0:
 * 0644), named `tmp_prefix` and six random characters in the folder of
 * `path` (NULL: gpt_atomic_file's ".NAME.tmp-"). A symbolic link or
 * anything but a regular file at `path` is refused (-ELOOP, -EEXIST). */
int gpt_fmt_out_open(struct gpt_fmt_out *o, const char *path, mode_t mode, const char *tmp_prefix,
                     struct gpt_err *err);
/* Appends n bytes. */
int gpt_fmt_out_write(struct gpt_fmt_out *o, const void *p, size_t n, struct gpt_err *err);
/* Appends zero bytes up to the next multiple of `align`. */
int gpt_fmt_out_pad(struct gpt_fmt_out *o, size_t align, struct gpt_err *err);
/* Flushes, fsyncs and renames onto the target; the struct is closed after
 * it either way (a failure removes the temporary file). */
int gpt_fmt_out_commit(struct gpt_fmt_out *o, struct gpt_err *err);
/* Removes the temporary file; a no-op on a closed or zeroed struct. */
void gpt_fmt_out_abort(struct gpt_fmt_out *o);

/* IEEE half and bfloat16 from float, rounding to nearest even (NaN stays
 * NaN), and back. */
uint16_t gpt_fmt_f32_to_f16(float f);
uint16_t gpt_fmt_f32_to_bf16(float f);
float gpt_fmt_f16_to_f32(uint16_t h);
float gpt_fmt_bf16_to_f32(uint16_t h);

#endif
