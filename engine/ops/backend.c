/*
 * backend: the front-end wrappers of the backend vtable. Each checks its
 * arguments with always-on asserts (programmer errors only) and dispatches
 * to the backend's slot. Called on the thread that owns the backend.
 */
#include "backend.h"

#include <errno.h>
#include <stdint.h>

#include "backend_guard.h"

#define BE_CHECK(be, slot) GPT_ASSERT((be) != NULL && (be)->ops != NULL && (be)->ops->slot != NULL)

void gpt_backend_free(struct gpt_backend *be)
{
    if (!be)
        return;
    GPT_ASSERT(be->ops && be->ops->destroy);
    be->ops->destroy(be);
}

int gpt_backend_alloc(struct gpt_backend *be, size_t bytes, void **ret_ptr)
{
    BE_CHECK(be, alloc);
    GPT_ASSERT(bytes > 0 && ret_ptr);
    return be->ops->alloc(be, bytes, ret_ptr);
}

void gpt_backend_mem_free(struct gpt_backend *be, void *ptr)
{
    if (!ptr)
        return;
    BE_CHECK(be, mem_free);
    be->ops->mem_free(be, ptr);
}

int gpt_backend_upload(struct gpt_backend *be, void *dst, const void *host_src, size_t bytes)
{
    BE_CHECK(be, upload);
    if (bytes == 0)
        return 0;
    GPT_ASSERT(dst && host_src);
    return be->ops->upload(be, dst, host_src, bytes);
}

int gpt_backend_download(struct gpt_backend *be, void *host_dst, const void *src, size_t bytes)
{
    BE_CHECK(be, download);
    if (bytes == 0)
        return 0;
    GPT_ASSERT(host_dst && src);
    return be->ops->download(be, host_dst, src, bytes);
}

void gpt_backend_copy(struct gpt_backend *be, void *dst, const void *src, size_t bytes)
{
    BE_CHECK(be, copy);
    if (bytes == 0)
        return;
    GPT_ASSERT(dst && src);
    be->ops->copy(be, dst, src, bytes);
}

void gpt_backend_memzero(struct gpt_backend *be, void *ptr, size_t bytes)
{
    BE_CHECK(be, memzero);
    if (bytes == 0)
        return;
    GPT_ASSERT(ptr);
    be->ops->memzero(be, ptr, bytes);
}

int gpt_backend_sync(struct gpt_backend *be)
{
    GPT_ASSERT(be && be->ops);
    /* The optional slot: a synchronous backend has nothing to wait for. */
    if (!be->ops->sync)
        return 0;
    return be->ops->sync(be);
}

/* The GEN rows of backend_ops.def: assert the slot and the row's
 * preconditions, then dispatch. */
#define GPT_OP_WRAP_GEN(name, params, args, pre)                                                   \
    void gpt_backend_##name params                                                                 \
    {                                                                                              \
        BE_CHECK(be, name);                                                                        \
        GPT_ASSERT(pre);                                                                           \
        be->ops->name args;                                                                        \
    }
#define GPT_OP_WRAP_HAND(name, params, args, pre)
#define GPT_OP_WRAP_NONE(name, params, args, pre)
#define GPT_OP(wrap, group, ret, name, params, args, pre)                                          \
    GPT_OP_WRAP_##wrap(name, params, args, pre)
#include "backend_ops.def"

void gpt_backend_attention_backward(struct gpt_backend *be, float *dqkv, float *scratch,
                                    const float *dout, const float *out, const float *qkv,
                                    const float *att, size_t B, size_t T, size_t C, size_t NH)
{
    BE_CHECK(be, attention_backward);
    GPT_ASSERT(dqkv && scratch && dout && out && qkv && att && scratch != att);
    GPT_ASSERT(B > 0 && T > 0 && NH > 0 && C % NH == 0 && C > 0);
    be->ops->attention_backward(be, dqkv, scratch, dout, out, qkv, att, B, T, C, NH);
    if (!be->attn_guarded && be->ops->attention_guard &&
        be->ops->attention_guard(be, NULL, scratch, dout, out, qkv, att, B, T, C, NH) == 0) {
        be->attn_guarded = 1;
        gpt_backend_guard_attention(be, dqkv, scratch, dout, out, qkv, att, B, T, C, NH);
    }
}

void gpt_backend_matmul_gelu_forward(struct gpt_backend *be, float *out, float *pre,
                                     const float *inp, const float *weight, const float *bias,
                                     size_t N, size_t C, size_t OC)
{
    GPT_ASSERT(be && out && pre && out != pre && out != inp && pre != inp);
    if (!be->ops->matmul_gelu_forward) {
        gpt_backend_matmul_forward(be, pre, inp, weight, bias, N, C, OC);
        gpt_backend_gelu_forward(be, out, pre, N * OC);
        return;
    }
    GPT_ASSERT(weight && N > 0 && C > 0 && OC > 0);
    GPT_ASSERT(N <= INT32_MAX && C <= INT32_MAX && OC <= INT32_MAX);
    be->ops->matmul_gelu_forward(be, out, pre, inp, weight, bias, N, C, OC);
}

void gpt_backend_matmul_backward_dgelu(struct gpt_backend *be, float *dinp, float *dweight,
                                       float *dbias, const float *dout, const float *inp,
                                       const float *weight, const float *pre_gelu, size_t N,
                                       size_t C, size_t OC)
{
    GPT_ASSERT(be && dinp && pre_gelu && dinp != pre_gelu);
    if (!be->ops->matmul_backward_dgelu) {
        gpt_backend_matmul_backward(be, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
        gpt_backend_gelu_backward(be, dinp, pre_gelu, dinp, N * C);
        return;
    }
    GPT_ASSERT(dweight && dout && inp && weight && N > 0 && C > 0 && OC > 0);
    GPT_ASSERT(dinp != dout && N <= INT32_MAX && C <= INT32_MAX && OC <= INT32_MAX);
    be->ops->matmul_backward_dgelu(be, dinp, dweight, dbias, dout, inp, weight, pre_gelu, N, C, OC);
}

void gpt_backend_residual_layernorm_forward(struct gpt_backend *be, float *res, float *out,
                                            float *mean, float *rstd, const float *a,
                                            const float *b, const float *weight, const float *bias,
                                            size_t N, size_t C)
{
    GPT_ASSERT(be && res && out && res != out && a && b);
    if (!be->ops->residual_layernorm_forward) {
        gpt_backend_residual_forward(be, res, a, b, N * C);
        gpt_backend_layernorm_forward(be, out, mean, rstd, res, weight, bias, N, C);
        return;
    }
    GPT_ASSERT(mean && rstd && weight && bias && C > 0);
    be->ops->residual_layernorm_forward(be, res, out, mean, rstd, a, b, weight, bias, N, C);
}

void gpt_backend_matmul_residual_forward(struct gpt_backend *be, float *out, const float *inp,
                                         const float *weight, const float *bias, const float *res,
                                         size_t N, size_t C, size_t OC)
{
    GPT_ASSERT(be && out && res && out != inp && out != res);
    if (!be->ops->matmul_residual_forward) {
        gpt_backend_matmul_forward(be, out, inp, weight, bias, N, C, OC);
        gpt_backend_residual_forward(be, out, out, res, N * OC);
        return;
    }
    GPT_ASSERT(inp && weight && N > 0 && C > 0 && OC > 0);
    GPT_ASSERT(N <= INT32_MAX && C <= INT32_MAX && OC <= INT32_MAX);
    be->ops->matmul_residual_forward(be, out, inp, weight, bias, res, N, C, OC);
}

void gpt_backend_adamw_multi(struct gpt_backend *be, float *params, const float *grads, float *m,
                             float *v, const struct gpt_adamw_span *spans, size_t n_spans, float lr,
                             float beta1, float beta2, float eps, float weight_decay,
                             float grad_scale, float bc1, float bc2)
{
    GPT_ASSERT(be && params && grads && m && v && (spans || n_spans == 0));
    for (size_t i = 1; i < n_spans; i++)
        GPT_ASSERT(spans[i].off >= spans[i - 1].off + spans[i - 1].n);
    if (be->ops->adamw_multi) {
        be->ops->adamw_multi(be, params, grads, m, v, spans, n_spans, lr, beta1, beta2, eps,
                             weight_decay, grad_scale, bc1, bc2);
        return;
    }
    for (size_t i = 0; i < n_spans; i++) {
        size_t o = spans[i].off;
        gpt_backend_adamw(be, params + o, grads + o, m + o, v + o, spans[i].n, lr, beta1, beta2,
                          eps, spans[i].decay ? weight_decay : 0.0f, grad_scale, bc1, bc2);
    }
}

double gpt_backend_sumsq(struct gpt_backend *be, const float *x, size_t n)
{
    BE_CHECK(be, sumsq);
    if (n == 0)
        return 0.0;
    GPT_ASSERT(x);
    return be->ops->sumsq(be, x, n);
}

int gpt_backend_step_on_device(const struct gpt_backend *be)
{
    GPT_ASSERT(be && be->ops);
    const struct gpt_backend_ops *o = be->ops;
    GPT_ASSERT(!o->loss_accum == !o->sumsq_dev && !o->sumsq_dev == !o->adamw_multi_clip);
    return o->loss_accum != NULL;
}

void gpt_backend_loss_accum(struct gpt_backend *be, double *acc, const float *losses, size_t N,
                            double weight, int reset)
{
    GPT_ASSERT(gpt_backend_step_on_device(be) && acc && losses && N > 0);
    be->ops->loss_accum(be, acc, losses, N, weight, reset);
}

void gpt_backend_sumsq_dev(struct gpt_backend *be, double *out, const float *x, size_t n)
{
    GPT_ASSERT(gpt_backend_step_on_device(be) && out && (x || n == 0));
    be->ops->sumsq_dev(be, out, x, n);
}

void gpt_backend_adamw_multi_clip(struct gpt_backend *be, float *params, const float *grads,
                                  float *m, float *v, const struct gpt_adamw_span *spans,
                                  size_t n_spans, float lr, float beta1, float beta2, float eps,
                                  float weight_decay, const double *sumsq, double clip, float bc1,
                                  float bc2)
{
    GPT_ASSERT(gpt_backend_step_on_device(be) && params && grads && m && v && sumsq);
    GPT_ASSERT(spans || n_spans == 0);
    for (size_t i = 1; i < n_spans; i++)
        GPT_ASSERT(spans[i].off >= spans[i - 1].off + spans[i - 1].n);
    be->ops->adamw_multi_clip(be, params, grads, m, v, spans, n_spans, lr, beta1, beta2, eps,
                              weight_decay, sumsq, clip, bc1, bc2);
}

void gpt_backend_scale(struct gpt_backend *be, float *x, float s, size_t n)
{
    BE_CHECK(be, scale);
    if (n == 0)
        return;
    GPT_ASSERT(x);
    be->ops->scale(be, x, s, n);
}

int gpt_backend_set_precision(struct gpt_backend *be, int precision, uint64_t seed)
{
    GPT_ASSERT(be && be->ops);
    if (!be->ops->set_precision)
        return (precision & GPT_BACKEND_PREC_MASK) == 0 ? 0 : -ENOTSUP;
    return be->ops->set_precision(be, precision, seed);
}

int gpt_backend_set_grad_assign(struct gpt_backend *be, int on)
{
    GPT_ASSERT(be && be->ops);
    if (on && !be->ops->grads_assign)
        return -ENOTSUP;
    be->grad_assign = on != 0;
    return 0;
}

int gpt_backend_device_info(struct gpt_backend *be, char *name, size_t cap, int *ret_cc)
{
    GPT_ASSERT(be && be->ops && name && cap > 0 && ret_cc);
    if (!be->ops->device_info)
        return -ENOTSUP;
    return be->ops->device_info(be, name, cap, ret_cc);
}

size_t gpt_backend_att_floats(struct gpt_backend *be, size_t B, size_t T, size_t C, size_t NH,
                              int scratch)
{
    GPT_ASSERT(be && be->ops);
    if (!be->ops->att_floats)
        return B * NH * T * T;
    return be->ops->att_floats(be, B, T, C, NH, scratch);
}
