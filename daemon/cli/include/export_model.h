/*
 * export_model: a model checkpoint (a gptd snapshot, or any format gptfmt
 * reads) written out in another format; shared by `gptd export` (offline,
 * export.c) and the daemon's `export` op (handlers_export.c).
 */
#ifndef GPTD_EXPORT_MODEL_H
#define GPTD_EXPORT_MODEL_H

#include <stdatomic.h>
#include <sys/types.h>

#include "fmt.h"
#include "gpt_err.h"

/* Reads `in` (kind detected), writes it as `kind` to `out` atomically;
 * vocab_dir (may be NULL) ships GPT-2 tokenizer files with formats that
 * carry them; dtype (NULL: f32) is the matrices' type, f16 or bf16 for
 * gguf; name (NULL: "gptd") is the model's name where the format has one
 * (GGUF general.name). The files get mode 0666 and folders 0777 less `umask_bits`, set
 * exactly (the process's umask does not apply). tmp_prefix names the
 * temporary beside `out` (export_tmp.h); NULL: the writer's own. cancel
 * (may be NULL): another thread's request to stop, checked between tensors
 * (-ECANCELED, no file left). Blocks: a worker thread or gptd's main
 * thread, with the file-system identity that should open both paths. */
int export_model(const char *in, enum gpt_fmt_kind kind, const char *out, const char *vocab_dir,
                 const char *dtype, const char *name, mode_t umask_bits, const char *tmp_prefix,
                 const atomic_int *cancel, struct gpt_err *err);

/* `gptd export`: returns the process exit status. Main thread. */
int gptd_export_main(int argc, char **argv);

#endif
