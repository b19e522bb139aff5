/*
 * optim: the learning-rate schedule (linear warmup, then cosine or
 * constant), the global gradient norm and clip factor, and AdamW over a
 * span of the flat parameter buffer through the backend. Pure computation
 * on the worker thread that owns the model.
 *
 * Weight decay follows nanoGPT: a tensor is decayed iff it has ndim >= 2,
 * i.e. every weight matrix including the (tied) token embedding wte and the
 * position embedding wpe; biases and LayerNorm parameters are not.
 * (minGPT instead exempts both embeddings.)
 */
#include "optim.h"

#include <math.h>

#include "backend.h"
#include "model.h"

double gpt_lr_at(const struct gpt_optim_spec *o, int64_t step, int64_t max_steps)
{
    if (step < 0)
        step = 0;
    if (o->warmup_steps > 0 && step < o->warmup_steps)
        return o->lr * (double)(step + 1) / (double)o->warmup_steps;
    /* Without a known horizon (max_steps <= warmup) the cosine has nothing
     * to span, so the rate stays at lr. */
    if (o->schedule == GPT_SCHED_CONSTANT || max_steps <= o->warmup_steps)
        return o->lr;
    if (step >= max_steps)
        return o->min_lr;
    double ratio = (double)(step - o->warmup_steps) / (double)(max_steps - o->warmup_steps);
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return o->min_lr + coeff * (o->lr - o->min_lr);
}

double gpt_grad_sumsq(const struct gpt_model *m, size_t off, size_t len)
{
    GPT_ASSERT(m && m->grads && off <= m->n_params && len <= m->n_params - off);
    return gpt_backend_sumsq(m->be, m->grads + off, len);
}

void gpt_grad_sumsq_dev(const struct gpt_model *m, size_t off, size_t len)
{
    GPT_ASSERT(m && m->grads && m->step_dev && off <= m->n_params && len <= m->n_params - off);
    gpt_backend_sumsq_dev(m->be, m->step_dev + 1, m->grads + off, len);
}

float gpt_clip_scale(double norm, double clip)
{
    if (clip <= 0.0 || !(norm == norm))
        return 1.0f;
    double s = clip / (norm + 1e-6);
    return s < 1.0 ? (float)s : 1.0f;
}

/* The pieces of params[off, off+len) with their decay rule. The span may
 * start or end inside a tensor (sharded optimizer state); walk the tensors
 * it overlaps so each piece gets its rule, and hand all pieces to the
 * backend at once (one launch on a GPU). */
static size_t adamw_spans(const struct gpt_model *m, size_t off, size_t len,
                          struct gpt_adamw_span spans[GPT_MAX_TENSORS])
{
    size_t end = off + len, n = 0;
    for (size_t i = 0; i < m->n_tensors && n < GPT_MAX_TENSORS; i++) {
        const struct gpt_tensor_info *ti = &m->tensors[i];
        size_t a = ti->offset > off ? ti->offset : off;
        size_t b = ti->offset + ti->count < end ? ti->offset + ti->count : end;
        if (a >= b)
            continue;
        spans[n++] = (struct gpt_adamw_span){a, b - a, ti->ndim >= 2};
    }
    return n;
}

void gpt_adamw_update(struct gpt_model *m, const struct gpt_optim_spec *o, float lr, int64_t t,
                      float grad_scale, size_t off, size_t len)
{
    GPT_ASSERT(m && o && m->m && m->v && t >= 1);
    GPT_ASSERT(off <= m->n_params && len <= m->n_params - off);
    float bc1 = (float)(1.0 - pow(o->beta1, (double)t));
    float bc2 = (float)(1.0 - pow(o->beta2, (double)t));
    struct gpt_adamw_span spans[GPT_MAX_TENSORS];
    size_t n = adamw_spans(m, off, len, spans);
    gpt_backend_adamw_multi(m->be, m->params, m->grads, m->m, m->v, spans, n, lr, (float)o->beta1,
                            (float)o->beta2, (float)o->eps, (float)o->weight_decay, grad_scale, bc1,
                            bc2);
}

void gpt_adamw_update_clip_dev(struct gpt_model *m, const struct gpt_optim_spec *o, float lr,
                               int64_t t, double clip, size_t off, size_t len)
{
    GPT_ASSERT(m && o && m->m && m->v && m->step_dev && t >= 1);
    GPT_ASSERT(off <= m->n_params && len <= m->n_params - off);
    float bc1 = (float)(1.0 - pow(o->beta1, (double)t));
    float bc2 = (float)(1.0 - pow(o->beta2, (double)t));
    struct gpt_adamw_span spans[GPT_MAX_TENSORS];
    size_t n = adamw_spans(m, off, len, spans);
    gpt_backend_adamw_multi_clip(m->be, m->params, m->grads, m->m, m->v, spans, n, lr,
                                 (float)o->beta1, (float)o->beta2, (float)o->eps,
                                 (float)o->weight_decay, m->step_dev + 1, clip, bc1, bc2);
}
