/*
 * backend: the compute interface the model and the optimizer call, as a
 * vtable in the ggml style. A backend (cpu/, cuda/) fills a const struct
 * gpt_backend_ops and embeds a struct gpt_backend head as the first member
 * of its own state; callers only ever use the gpt_backend_* wrappers below,
 * which check their arguments with always-on asserts and then dispatch.
 *
 * Memory: every float/int pointer passed to an op is BACKEND memory, i.e.
 * obtained from gpt_backend_alloc() (host memory for cpu, device memory for
 * cuda). Host data crosses only through upload/download. Ops are enqueued
 * in call order on the backend's one compute stream; gpt_backend_sync()
 * waits for all of them. download() and the ops returning a value (sumsq)
 * synchronise implicitly; nothing else does.
 *
 * Synchronisations per training step: each one idles a GPU until the host
 * enqueues again, so a backend with the optional step-on-device ops
 * (loss_accum, sumsq_dev, adamw_multi_clip: gpt_backend_step_on_device)
 * keeps the step's loss, its gradient norm and the clip factor in device
 * memory, and the trainer reads them back with one download after the
 * update: one synchronisation per optimizer step (a DDP step also syncs
 * at the backward's end, for its compute time: see trainer.c). Without
 * those ops (cpu, which is synchronous anyway) the losses are downloaded
 * after each forward and sumsq returns the norm.
 *
 * Threads: a backend belongs to one worker thread; it is not shared.
 * Errors: only construction, alloc and transfers can fail; ops on valid
 * arguments cannot (a GPU backend records a sticky error that sync reports).
 *
 * Shape letters as in llm.c: B batch, T time, C channels, NH heads,
 * hs = C / NH, N = B*T rows, OC output channels, V vocab, Vp padded vocab.
 * Conventions for backward ops: PARAMETER gradients (dweight, dbias, dwte,
 * dwpe) are ACCUMULATED (+=), except while be->grad_assign is set (see
 * grads_assign below); activation gradients are overwritten unless the op
 * says "accumulates".
 */
#ifndef GPT_BACKEND_H
#define GPT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "gpt_err.h"

struct gpt_backend;

/* One piece of the flat parameter buffer for adamw_multi: elements
 * [off, off + n), decayed when `decay` is non-zero. */
struct gpt_adamw_span {
    size_t off, n;
    int decay;
};

struct gpt_backend_ops {
    const char *name;

    /* Lifecycle: frees the backend and everything it owns (not buffers the
     * caller allocated and has not freed). */
    void (*destroy)(struct gpt_backend *be);

    /* --- memory ------------------------------------------------------- */
    /* Zeroed, 64-byte aligned buffer of `bytes` (> 0). */
    int (*alloc)(struct gpt_backend *be, size_t bytes, void **ret_ptr);
    void (*mem_free)(struct gpt_backend *be, void *ptr);
    int (*upload)(struct gpt_backend *be, void *dst, const void *host_src, size_t bytes);
    int (*download)(struct gpt_backend *be, void *host_dst, const void *src, size_t bytes);
    void (*copy)(struct gpt_backend *be, void *dst, const void *src, size_t bytes);
    void (*memzero)(struct gpt_backend *be, void *ptr, size_t bytes);
    /* Optional (NULL = the backend is synchronous). */
    int (*sync)(struct gpt_backend *be);

    /* --- ops ---------------------------------------------------------- */
    /* out[b,t,:] = wte[inp[b,t],:] + wpe[t,:] */
    void (*encoder_forward)(struct gpt_backend *be, float *out /* (B,T,C) */,
                            const int *inp /* (B,T) */, const float *wte /* (Vp,C) */,
                            const float *wpe /* (maxT,C) */, size_t B, size_t T, size_t C);
    void (*encoder_backward)(struct gpt_backend *be, float *dwte /* (Vp,C) */,
                             float *dwpe /* (maxT,C) */, const float *dout /* (B,T,C) */,
                             const int *inp /* (B,T) */, size_t B, size_t T, size_t C);

    /* Row-wise LayerNorm (eps 1e-5) over N rows of C; saves mean and
     * 1/std per row for backward. */
    void (*layernorm_forward)(struct gpt_backend *be, float *out /* (N,C) */, float *mean /* (N) */,
                              float *rstd /* (N) */, const float *inp /* (N,C) */,
                              const float *weight /* (C) */, const float *bias /* (C) */, size_t N,
                              size_t C);
    /* dinp ACCUMULATES (it is the residual stream's gradient). */
    void (*layernorm_backward)(struct gpt_backend *be, float *dinp /* (N,C) */,
                               float *dweight /* (C) */, float *dbias /* (C) */,
                               const float *dout /* (N,C) */, const float *inp /* (N,C) */,
                               const float *weight /* (C) */, const float *mean /* (N) */,
                               const float *rstd /* (N) */, size_t N, size_t C);

    /* out = inp @ weight^T + bias; bias may be NULL. */
    void (*matmul_forward)(struct gpt_backend *be, float *out /* (N,OC) */,
                           const float *inp /* (N,C) */, const float *weight /* (OC,C) */,
                           const float *bias /* (OC) or NULL */, size_t N, size_t C, size_t OC);
    /* dinp = dout @ weight (overwritten; NULL = not needed);
     * dweight += dout^T @ inp; dbias += column sums of dout (NULL = none). */
    void (*matmul_backward)(struct gpt_backend *be, float *dinp /* (N,C) or NULL */,
                            float *dweight /* (OC,C) */, float *dbias /* (OC) or NULL */,
                            const float *dout /* (N,OC) */, const float *inp /* (N,C) */,
                            const float *weight /* (OC,C) */, size_t N, size_t C, size_t OC);

    /* Causal multi-head attention. qkv rows are [q | k | v], head h using
     * channels h*hs..(h+1)*hs of each. att is the backend's own record of
     * the forward for backward, in a buffer the model sizes (B,NH,T,T)
     * floats: the CPU backend and the CUDA GEMM path keep the softmax
     * probabilities there (only entries j <= i are defined); the CUDA flash
     * kernels never form them and keep the per-row log-sum-exp (B,NH,T) in
     * its first floats instead. Only the same backend's attention_backward
     * may read it. */
    void (*attention_forward)(struct gpt_backend *be, float *out /* (B,T,C) */,
                              float *att /* (B,NH,T,T) */, const float *qkv /* (B,T,3C) */,
                              size_t B, size_t T, size_t C, size_t NH);
    /* dqkv overwritten; scratch is caller-provided workspace of the same
     * size as att, clobbered. out is the forward's output, unchanged since
     * (the flash kernels take the rows' dout . out from it). */
    void (*attention_backward)(struct gpt_backend *be, float *dqkv /* (B,T,3C) */,
                               float *scratch /* (B,NH,T,T) */, const float *dout /* (B,T,C) */,
                               const float *out /* (B,T,C) */, const float *qkv /* (B,T,3C) */,
                               const float *att /* (B,NH,T,T) */, size_t B, size_t T, size_t C,
                               size_t NH);

    /* GELU, tanh approximation (GPT-2). dinp may alias dout. */
    void (*gelu_forward)(struct gpt_backend *be, float *out, const float *inp, size_t n);
    void (*gelu_backward)(struct gpt_backend *be, float *dinp, const float *inp, const float *dout,
                          size_t n);

    /* out = a + b (out may alias a or b). */
    void (*residual_forward)(struct gpt_backend *be, float *out, const float *a, const float *b,
                             size_t n);

    /* Fused softmax + cross-entropy over the first V of Vp columns of each
     * row. Positions with target < 0 are ignored (loss 0, zero gradient);
     * columns V..Vp never enter the softmax. If `losses` is non-NULL it
     * receives each row's loss. If `write_dlogits` is non-zero, `logits` is
     * overwritten IN PLACE by dloss/dlogits * dscale (padded columns and
     * ignored rows get 0); otherwise logits is left intact.
     * write_dlogits == GPT_XENT_AFTER_LOSS: as 1, and `losses` holds what a
     * call with losses made over these same logits and targets (nothing
     * wrote either since); a backend may derive each row's normaliser from
     * it (loss + logit of the target) instead of a reduction pass, and
     * losses keeps its values. */
    void (*softmax_xent)(struct gpt_backend *be, float *logits /* (N,Vp) */,
                         float *losses /* (N) or NULL */, const int *targets /* (N) */, size_t N,
                         size_t V, size_t Vp, float dscale, int write_dlogits);

    /* PyTorch AdamW on n elements: g = grads*grad_scale;
     * m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     * p -= lr*wd*p; p -= lr * (m/bc1) / (sqrt(v/bc2) + eps),
     * with bc1 = 1-b1^t, bc2 = 1-b2^t given by the caller. */
    void (*adamw)(struct gpt_backend *be, float *params, const float *grads, float *m, float *v,
                  size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                  float grad_scale, float bc1, float bc2);

    /* Sum of squares of x[0..n) in double accumulation (synchronises). */
    double (*sumsq)(struct gpt_backend *be, const float *x, size_t n);
    /* x *= s. */
    void (*scale)(struct gpt_backend *be, float *x, float s, size_t n);

    /* Optional (NULL = fp32 only). The arithmetic behind this fp32
     * interface: 0 fp32, 1 bf16, 2 auto (the backend's fast default: bf16
     * on CUDA), as enum gpt_precision, optionally or'd with
     * GPT_BACKEND_PREC_NO_TF32; `seed` for a backend that rounds
     * stochastically (none does: rounding to nearest keeps a resumed run
     * bitwise). Every buffer stays fp32; see the backend's header for
     * what bf16 changes.
     * Returns 0 or -EINVAL. */
    int (*set_precision)(struct gpt_backend *be, int precision, uint64_t seed);

    /* Optional (NULL = the full (B,NH,T,T) for both). Floats of the `att`
     * buffer one attention_forward call at (B, T, C, NH) needs (scratch 0),
     * or of attention_backward's `scratch` (scratch 1). `att` is
     * backend-owned state between a forward and its backward: the model
     * only sizes and places it by this answer, never reads it. The answer
     * never grows when B shrinks. Any thread. */
    size_t (*att_floats)(struct gpt_backend *be, size_t B, size_t T, size_t C, size_t NH,
                         int scratch);

    /* Optional fusions of a product with the GELU after it (NULL = the
     * separate ops; the front-ends fall back). pre = inp @ weight^T + bias
     * (N,OC), out = gelu(pre): matmul_forward then gelu_forward.
     * matmul_backward_dgelu is matmul_backward whose dinp is then
     * multiplied by gelu'(pre_gelu) (pre_gelu (N,C): the input of the GELU
     * that produced inp): matmul_backward then gelu_backward in place. */
    void (*matmul_gelu_forward)(struct gpt_backend *be, float *out /* (N,OC) */,
                                float *pre /* (N,OC) */, const float *inp, const float *weight,
                                const float *bias, size_t N, size_t C, size_t OC);
    void (*matmul_backward_dgelu)(struct gpt_backend *be, float *dinp, float *dweight, float *dbias,
                                  const float *dout, const float *inp, const float *weight,
                                  const float *pre_gelu, size_t N, size_t C, size_t OC);
    /* Optional (NULL = one adamw per span). adamw over every span of the
     * flat buffers (the same offsets in params, grads, m and v), the
     * spans' own weight decay (weight_decay or 0 by span.decay), in as
     * few launches as the backend can: spans sorted and disjoint. */
    /* Optional (NULL = residual_forward then layernorm_forward).
     * res = a + b (res may alias a or b), then LayerNorm of res as
     * layernorm_forward, in one pass. */
    void (*residual_layernorm_forward)(struct gpt_backend *be, float *res /* (N,C) */,
                                       float *out /* (N,C) */, float *mean, float *rstd,
                                       const float *a, const float *b, const float *weight,
                                       const float *bias, size_t N, size_t C);
    void (*adamw_multi)(struct gpt_backend *be, float *params, const float *grads, float *m,
                        float *v, const struct gpt_adamw_span *spans, size_t n_spans, float lr,
                        float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                        float bc1, float bc2);
    /* Optional (NULL = matmul_forward then residual_forward(out, out, res)).
     * out (N,OC) = inp @ weight^T + bias + res (N,OC): the skip connection
     * added by the product itself (a GEMM epilogue). out must not alias
     * inp or res. */
    void (*matmul_residual_forward)(struct gpt_backend *be, float *out, const float *inp,
                                    const float *weight, const float *bias, const float *res,
                                    size_t N, size_t C, size_t OC);

    /* Optional, all three or none (NULL: the host path, whose losses are
     * downloaded and whose sumsq returns its sum): a training step's
     * results stay on the device until one download after the update.
     * `acc`, `out` and `sumsq` are doubles in backend memory.
     * loss_accum: acc[0] = (reset ? 0 : acc[0]) + weight * the sum of
     * losses[0..N), summed in double in a fixed order (the same bits on
     * every run). */
    void (*loss_accum)(struct gpt_backend *be, double *acc, const float *losses, size_t N,
                       double weight, int reset);
    /* out[0] = sumsq(x, n), the same arithmetic as sumsq, without a
     * synchronisation. */
    void (*sumsq_dev)(struct gpt_backend *be, double *out, const float *x, size_t n);
    /* adamw_multi with grad_scale = gpt_clip_scale(sqrt(sumsq[0]), clip)
     * (cuda_plan.h's gpt_cuda_clip_scale), read on the device when the
     * update runs: the same bits as adamw_multi given that factor. */
    void (*adamw_multi_clip)(struct gpt_backend *be, float *params, const float *grads, float *m,
                             float *v, const struct gpt_adamw_span *spans, size_t n_spans, float lr,
                             float beta1, float beta2, float eps, float weight_decay,
                             const double *sumsq, double clip, float bc1, float bc2);

    /* Non-zero when the ops honour be->grad_assign: while it is set,
     * matmul_backward's and matmul_backward_dgelu's dweight and dbias and
     * layernorm_backward's dweight and dbias are OVERWRITTEN with this
     * call's gradient instead of accumulated (the first backward of a
     * step need not zero them first). encoder_backward always
     * accumulates. */
    int grads_assign;
    /* Non-zero when buffers live in device memory that host code cannot
     * address (cuda): host code reaches them only through upload and
     * download (gpt_backend_device_memory). */
    int device_memory;

    /* Optional (GPU backends): the device's name as it reports it
     * (NUL-terminated, truncated to cap) and its compute capability as
     * major * 10 + minor, for the peak table (peak.h). 0 or a negative
     * error. Owner thread; does not block. */
    int (*device_info)(struct gpt_backend *be, char *name, size_t cap, int *ret_cc);

    /* Optional pair (backends whose attention backward has variants): the
     * guard of a backend's first attention backward that has a variant to
     * check (backend_guard.c). attention_guard recomputes one (batch,
     * head) slice, batch 0 and head 0, of the backward just run with the
     * same arguments, with the reference variant: dq, dk and dv of head 0
     * (columns [0, hs), [C, C + hs) and [2C, 2C + hs) of each of batch 0's
     * T rows) into ref (backend memory, (T, 3C) floats; other columns
     * untouched); scratch may be clobbered. 0, -ENOTSUP where the variant
     * in use is the reference or its path has no variants (nothing to
     * compare), or an error. With ref NULL it only answers 0 or -ENOTSUP,
     * cheaply (no launch, no synchronisation). attention_fallback: the
     * reference variant runs from now on (process-wide where the variant
     * choice is), saying so on stderr. */
    int (*attention_guard)(struct gpt_backend *be, float *ref /* (T,3C) */, float *scratch,
                           const float *dout, const float *out, const float *qkv,
                           const float *att, size_t B, size_t T, size_t C, size_t NH);
    void (*attention_fallback)(struct gpt_backend *be);
};

/* Or'd into set_precision's argument: fp32 matrix products stay strict
 * fp32 (trainer.tf32 false); without it a backend may use TF32. */
/* softmax_xent's write_dlogits after a loss call over the same logits. */
#define GPT_XENT_AFTER_LOSS 2

#define GPT_BACKEND_PREC_NO_TF32 0x100
#define GPT_BACKEND_PREC_MASK    0xff

/* The common head of every backend; the implementation's state follows. */
struct gpt_backend {
    const struct gpt_backend_ops *ops;
    const char *name; /* "cpu", "cuda" (static storage) */
    int threads;      /* host threads the backend uses (cpu), 1 otherwise */
    int grad_assign;  /* parameter gradients overwritten: gpt_backend_set_grad_assign */
    int attn_guarded; /* the first attention backward has been guarded */
    int attn_guard_bad; /* ... and its variant disagreed with the reference */
    /* what the guard found (empty until it ran and had something to
     * compare): gpt_backend_attention_guard_note */
    char attn_guard_note[256];
};

/* Creates the CPU backend using `threads` (>= 1) OpenMP threads for its own
 * loops and as many OpenBLAS threads. Returns new; the caller frees it with
 * gpt_backend_free. Any thread; does not block. */
int gpt_backend_cpu_new(int threads, struct gpt_backend **ret, struct gpt_err *err);

/* Frees a backend; NULL is a no-op. */
void gpt_backend_free(struct gpt_backend *be);

/* True when the backend's buffers are device memory: a host reader or
 * writer (the snapshot file's) needs host copies. */
static inline int gpt_backend_device_memory(const struct gpt_backend *be)
{
    return be->ops->device_memory;
}

/* --- front-end wrappers (assert arguments, then dispatch) --------------- */
int gpt_backend_alloc(struct gpt_backend *be, size_t bytes, void **ret_ptr);
/* NULL is a no-op. */
void gpt_backend_mem_free(struct gpt_backend *be, void *ptr);
int gpt_backend_upload(struct gpt_backend *be, void *dst, const void *host_src, size_t bytes);
int gpt_backend_download(struct gpt_backend *be, void *host_dst, const void *src, size_t bytes);
void gpt_backend_copy(struct gpt_backend *be, void *dst, const void *src, size_t bytes);
void gpt_backend_memzero(struct gpt_backend *be, void *ptr, size_t bytes);
int gpt_backend_sync(struct gpt_backend *be);

void gpt_backend_encoder_forward(struct gpt_backend *be, float *out, const int *inp,
                                 const float *wte, const float *wpe, size_t B, size_t T, size_t C);
void gpt_backend_encoder_backward(struct gpt_backend *be, float *dwte, float *dwpe,
                                  const float *dout, const int *inp, size_t B, size_t T, size_t C);
void gpt_backend_layernorm_forward(struct gpt_backend *be, float *out, float *mean, float *rstd,
                                   const float *inp, const float *weight, const float *bias,
                                   size_t N, size_t C);
void gpt_backend_layernorm_backward(struct gpt_backend *be, float *dinp, float *dweight,
                                    float *dbias, const float *dout, const float *inp,
                                    const float *weight, const float *mean, const float *rstd,
                                    size_t N, size_t C);
void gpt_backend_matmul_forward(struct gpt_backend *be, float *out, const float *inp,
                                const float *weight, const float *bias, size_t N, size_t C,
                                size_t OC);
void gpt_backend_matmul_backward(struct gpt_backend *be, float *dinp, float *dweight, float *dbias,
                                 const float *dout, const float *inp, const float *weight, size_t N,
                                 size_t C, size_t OC);
void gpt_backend_attention_forward(struct gpt_backend *be, float *out, float *att, const float *qkv,
                                   size_t B, size_t T, size_t C, size_t NH);
void gpt_backend_attention_backward(struct gpt_backend *be, float *dqkv, float *scratch,
                                    const float *dout, const float *out, const float *qkv,
                                    const float *att, size_t B, size_t T, size_t C, size_t NH);
/* The fused product + GELU (ops slots above), or the separate ops. */
void gpt_backend_matmul_gelu_forward(struct gpt_backend *be, float *out, float *pre,
                                     const float *inp, const float *weight, const float *bias,
                                     size_t N, size_t C, size_t OC);
void gpt_backend_matmul_backward_dgelu(struct gpt_backend *be, float *dinp, float *dweight,
                                       float *dbias, const float *dout, const float *inp,
                                       const float *weight, const float *pre_gelu, size_t N,
                                       size_t C, size_t OC);
void gpt_backend_gelu_forward(struct gpt_backend *be, float *out, const float *inp, size_t n);
void gpt_backend_gelu_backward(struct gpt_backend *be, float *dinp, const float *inp,
                               const float *dout, size_t n);
void gpt_backend_residual_forward(struct gpt_backend *be, float *out, const float *a,
                                  const float *b, size_t n);
void gpt_backend_softmax_xent(struct gpt_backend *be, float *logits, float *losses,
                              const int *targets, size_t N, size_t V, size_t Vp, float dscale,
                              int write_dlogits);
void gpt_backend_adamw(struct gpt_backend *be, float *params, const float *grads, float *m,
                       float *v, size_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, float grad_scale, float bc1, float bc2);
/* ops->residual_layernorm_forward, or the two separate ops. */
void gpt_backend_residual_layernorm_forward(struct gpt_backend *be, float *res, float *out,
                                            float *mean, float *rstd, const float *a,
                                            const float *b, const float *weight, const float *bias,
                                            size_t N, size_t C);
/* ops->matmul_residual_forward, or the two separate ops. */
void gpt_backend_matmul_residual_forward(struct gpt_backend *be, float *out, const float *inp,
                                         const float *weight, const float *bias, const float *res,
                                         size_t N, size_t C, size_t OC);
/* ops->adamw_multi, or gpt_backend_adamw per span. */
void gpt_backend_adamw_multi(struct gpt_backend *be, float *params, const float *grads, float *m,
                             float *v, const struct gpt_adamw_span *spans, size_t n_spans, float lr,
                             float beta1, float beta2, float eps, float weight_decay,
                             float grad_scale, float bc1, float bc2);
double gpt_backend_sumsq(struct gpt_backend *be, const float *x, size_t n);
/* True when the backend has the step-on-device ops (loss_accum, sumsq_dev,
 * adamw_multi_clip); the three wrappers below may be called only then.
 * Any thread. */
int gpt_backend_step_on_device(const struct gpt_backend *be);
void gpt_backend_loss_accum(struct gpt_backend *be, double *acc, const float *losses, size_t N,
                            double weight, int reset);
void gpt_backend_sumsq_dev(struct gpt_backend *be, double *out, const float *x, size_t n);
void gpt_backend_adamw_multi_clip(struct gpt_backend *be, float *params, const float *grads,
                                  float *m, float *v, const struct gpt_adamw_span *spans,
                                  size_t n_spans, float lr, float beta1, float beta2, float eps,
                                  float weight_decay, const double *sumsq, double clip, float bc1,
                                  float bc2);
void gpt_backend_scale(struct gpt_backend *be, float *x, float s, size_t n);
/* 0 when done; -ENOTSUP for bf16 or auto on a backend without the slot
 * (cpu), which then keeps computing in fp32. Owner thread, before the
 * first op. */
int gpt_backend_set_precision(struct gpt_backend *be, int precision, uint64_t seed);
/* Sets be->grad_assign (ops->grads_assign above): 0, or -ENOTSUP (and
 * nothing set) for on != 0 on a backend whose ops always accumulate.
 * Owner thread, between ops. */
int gpt_backend_set_grad_assign(struct gpt_backend *be, int on);
/* The first attention backward's guard: "" until it compared (none on a
 * backend without attention_guard, or where the variant in use is the
 * reference); then one line: passed, with the largest difference, or
 * "MISMATCH ... fell back to the reference variant". *ret_bad (may be
 * NULL) is 1 on a mismatch. Borrowed; owner thread. */
const char *gpt_backend_attention_guard_note(const struct gpt_backend *be, int *ret_bad);
/* ops->device_info: 0 and the device's name and compute capability, or
 * -ENOTSUP on a backend without a device (cpu). */
int gpt_backend_device_info(struct gpt_backend *be, char *name, size_t cap, int *ret_cc);
/* Size of attention's att (scratch 0) or backward scratch (1), in floats:
 * ops->att_floats, or B*NH*T*T without the slot. */
size_t gpt_backend_att_floats(struct gpt_backend *be, size_t B, size_t T, size_t C, size_t NH,
                              int scratch);

#endif
