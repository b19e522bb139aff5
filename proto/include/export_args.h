/*
 * export_args: the checks every front end of an export shares (`gptd
 * export` offline, `gptctl export` and the daemon's `export` op), so the
 * three refuse the same command lines with the same words: one operand
 * (the snapshot or the job), --format and -o given, the format one that
 * can be written (hf, llmc, gguf) and the dtype one GGUF stores (f32,
 * f16, bf16). Whether a dtype other than f32 suits the format is the
 * writer's to say (engine/fmt).
 *
 * Pure; any thread.
 */
#ifndef GPT_EXPORT_ARGS_H
#define GPT_EXPORT_ARGS_H

#include "gpt_err.h"

/* An export's command line as its front end parsed it. */
struct gpt_export_args {
    const char *operand_name; /* "SNAPSHOT" or "JOB": for the error */
    int n_operands;
    const char *format, *output, *dtype; /* NULL: not given */
};

/* The command line's shape: exactly one operand, --format given, -o
 * given and not empty. 0, or -EINVAL with err->msg saying what is
 * missing ("--format is required") and err->path the option. */
int gpt_export_args_check(const struct gpt_export_args *a, struct gpt_err *err);

/* The values: format hf, llmc or gguf; dtype (NULL: the default) f32, f16
 * or bf16. 0, or -EINVAL with err->path "format" or "dtype" and err->msg
 * "format must be hf, llmc or gguf, got \"onnx\"". */
int gpt_export_values_check(const char *format, const char *dtype, struct gpt_err *err);

#endif
