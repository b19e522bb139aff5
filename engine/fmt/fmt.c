/* fmt: format names and the readers' shared size check (see fmt.h). */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "fmt.h"
#include "model.h"

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

int gpt_fmt_check_data_size(const char *file, const char *claim, const struct gpt_model *m,
                            unsigned elem_bytes, uint64_t have, struct gpt_err *err)
{
    const struct gpt_model_config *c = &m->cfg;
    /* Files hold wte's vocab_size rows, not gptd's padding to Vp. Under
     * gpt_model_layout's limits the product cannot wrap. */
    uint64_t n = (uint64_t)m->n_params - (uint64_t)(m->Vp - (size_t)c->vocab_size) * c->n_embd;
    uint64_t need = n * elem_bytes;
    if (need <= have)
        return 0;
    return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                       "%s: %s's model (n_layer %d, n_head %d, n_embd %d, block_size %d, "
                       "vocab_size %d) has %llu parameters, at least %llu bytes at %u bytes "
                       "each, but the file holds %llu bytes of tensor data",
                       file, claim, c->n_layer, c->n_head, c->n_embd, c->block_size, c->vocab_size,
                       (unsigned long long)n, (unsigned long long)need, elem_bytes,
                       (unsigned long long)have);
}
