/* export_args: an export's shared argument checks (see export_args.h). */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "export_args.h"

static const char *const export_formats[] = {"hf", "llmc", "gguf", NULL};
static const char *const export_dtypes[] = {"f32", "f16", "bf16", NULL};

static int export_one_of(const char *v, const char *const *names)
{
    for (size_t i = 0; names[i]; i++)
        if (strcmp(v, names[i]) == 0)
            return 1;
    return 0;
}

int gpt_export_args_check(const struct gpt_export_args *a, struct gpt_err *err)
{
    if (a->n_operands != 1)
        return gpt_err_set(err, -EINVAL, NULL, "give exactly one %s", a->operand_name);
    if (!a->format)
        return gpt_err_set(err, -EINVAL, "format", "--format is required");
    if (!a->output || !a->output[0])
        return gpt_err_set(err, -EINVAL, "output", "-o PATH is required");
    return 0;
}

int gpt_export_values_check(const char *format, const char *dtype, struct gpt_err *err)
{
    if (!format || !export_one_of(format, export_formats))
        return gpt_err_set(err, -EINVAL, "format", "format must be hf, llmc or gguf, got \"%s\"",
                           format ? format : "");
    if (dtype && !export_one_of(dtype, export_dtypes))
        return gpt_err_set(err, -EINVAL, "dtype", "dtype must be f32, f16 or bf16, got \"%s\"",
                           dtype);
    return 0;
}
