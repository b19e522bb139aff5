/*
 * shard_init: the model's fresh weights as a stream, for sharded runs
 * that never hold a full-size copy (see shard.h). The values are those of
 * gpt_model_init_weights_host (engine/model.c) bit for bit: the same rule
 * (N(0, 0.02) for matrices, N(0, 0.02 / sqrt(2 L)) for the residual
 * projections, 1 for LayerNorm weights, 0 for the rest and for wte's
 * padding rows) and the same random sequence, drawn in tensor order.
 * test_snapshot_shard compares the two, so a change of the rule there
 * fails here first.
 *
 * Pure computation on the caller's thread; no allocation.
 */
#include <math.h>
#include <string.h>

#include "model.h"
#include "rng.h"
#include "shard.h"

void gpt_shard_init_begin(struct gpt_shard_init *s, const struct gpt_model *m, uint64_t seed)
{
    memset(s, 0, sizeof(*s));
    s->m = m;
    gpt_rng_seed(&s->rng, seed);
    s->resid_std = 0.02 / sqrt(2.0 * m->cfg.n_layer);
}

/* What tensor i holds at its index j (drawing from the stream when it is
 * random). */
static float init_value(struct gpt_shard_init *s, size_t i, size_t j)
{
    const struct gpt_tensor_info *t = &s->m->tensors[i];
    const char *dot = strrchr(t->name, '.');
    const char *leaf = dot ? dot + 1 : t->name;
    if (t->ndim == 2) {
        size_t count = t->count;
        if (strcmp(t->name, "wte") == 0) /* padded rows stay 0 */
            count = (size_t)s->m->cfg.vocab_size * (size_t)s->m->cfg.n_embd;
        if (j >= count)
            return 0.0f;
        double sd = strcmp(leaf, "projw") == 0 ? s->resid_std : 0.02;
        return (float)(sd * gpt_rng_normal(&s->rng));
    }
    if (strcmp(leaf, "ln1w") == 0 || strcmp(leaf, "ln2w") == 0 || strcmp(leaf, "lnfw") == 0)
        return 1.0f;
    return 0.0f;
}

void gpt_shard_init_next(struct gpt_shard_init *s, float *dst, size_t count)
{
    const struct gpt_model *m = s->m;
    for (size_t k = 0; k < count; k++, s->pos++) {
        while (s->tensor < m->n_tensors &&
               s->pos >= m->tensors[s->tensor].offset + m->tensors[s->tensor].count)
            s->tensor++;
        if (s->tensor >= m->n_tensors || s->pos < m->tensors[s->tensor].offset) {
            dst[k] = 0.0f; /* between tensors, or past the last */
            continue;
        }
        dst[k] = init_value(s, s->tensor, s->pos - m->tensors[s->tensor].offset);
    }
}
