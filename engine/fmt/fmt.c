/* fmt: format names (see fmt.h). */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "fmt.h"

static const char *const fmt_names[] = {
    [GPT_FMT_GPTS] = "gpts",
    [GPT_FMT_HF] = "hf",
    [GPT_FMT_LLMC] = "llmc",
    [GPT_FMT_GGUF] = "gguf",
};

enum gpt_fmt_kind gpt_fmt_kind_parse(const char *name, struct gpt_err *err)
{
    for (size_t i = 1; name && i < sizeof(fmt_names) / sizeof(fmt_names[0]); i++)
        if (fmt_names[i] && strcmp(name, fmt_names[i]) == 0)
            return (enum gpt_fmt_kind)i;
    gpt_err_set(err, -EINVAL, "format", "unknown model format \"%s\" (give gpts, hf, llmc or gguf)",
                name ? name : "");
    return GPT_FMT_NONE;
}

const char *gpt_fmt_kind_name(enum gpt_fmt_kind kind)
{
    if ((size_t)kind >= sizeof(fmt_names) / sizeof(fmt_names[0]) || !fmt_names[kind])
        return "?";
    return fmt_names[kind];
}
