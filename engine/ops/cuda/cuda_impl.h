/*
 * cuda_impl: private declarations shared by the CUDA backend's translation
 * units (cuda_backend.cu: lifecycle, memory, the vtable; cuda_matmul.cu:
 * the products; cuda_shadow.cu: the bf16 shadow cache; cuda_kernels.cu,
 * cuda_layernorm.cu and cuda_xent.cu: our own kernels; cuda_attention.cu:
 * fused attention).
 * C++ (nvcc) only; not part of the
 * engine API. Every launcher enqueues on the stream it is given and never
 * synchronises; the caller checks cudaGetLastError() afterwards.
 */
#ifndef GPT_CUDA_IMPL_H
#define GPT_CUDA_IMPL_H

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime.h>

/* The engine's headers are C; gpt_err.h spells the C11 _Noreturn. */
#ifndef _Noreturn
#define _Noreturn __attribute__((noreturn))
#endif
extern "C" {
#include "backend.h"
#include "cuda_plan.h"
}
#include "cuda_blas.h" /* cuBLAS(Lt), loaded at the first backend */

/* --- the backend's state (cuda_backend.cu, cuda_matmul.cu, cuda_shadow.cu) -- */

#define LT_WORKSPACE_BYTES ((size_t)32 << 20)
#define SCRATCH_FLOATS     GPT_CUDA_SCRATCH_FLOATS /* cuda_plan.h */
#define LT_CACHE_SIZE      64
#define LT_KEY_INTS        16
#define LT_USABLE          1 /* lt_cache_ent.valid: algo holds the heuristic's choice */
#define LT_REFUSED         2 /* no algorithm (or the epilogue refused): fall back */
#define ERR_MSG_MAX        256
#define AW_CAP             1024 /* spans of one adamw_multi launch (more: one per span) */

/* One cuBLASLt algorithm choice, keyed by everything the heuristic saw. */
struct lt_cache_ent {
    int valid;
    int key[LT_KEY_INTS];
    cublasLtMatmulAlgo_t algo;
};

/* bf16 copy of one whole device allocation, the floats [base, base + n);
 * `st` says where it is current, where it is the only copy (owned: the
 * fp32 floats are stale) and where fp32 readers wanted the floats. */
struct shadow {
    uintptr_t base;
    size_t n;
    uint16_t *bf;
    struct gpt_cuda_shd_state st;
};

struct alloc_ent {
    void *ptr;
    size_t bytes;
};

struct gpt_cuda_backend {
    struct gpt_backend head; /* must stay first */
    int device;
    cudaStream_t compute;
    cudaStream_t comm;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *ws; /* cuBLAS(Lt) workspace, LT_WORKSPACE_BYTES */
    float *scratch;
    double *sumsq_dev; /* GPT_CUDA_SUMSQ_MAX_BLOCKS partials, then the result */
    double *sumsq_host;
    uint64_t host_syncs; /* cuda_sync calls (download and sumsq too): gpt_cuda_backend_host_syncs */
    int tf32;
    int lt_tune;      /* GPT_BACKEND_PREC_GEMM_TUNE: time cuBLASLt's candidates */
    int gelu_unfused; /* GPT_BACKEND_PREC_GELU_UNFUSED: no GELU epilogues */
    int err_code;
    char err_msg[ERR_MSG_MAX];
    struct alloc_ent *allocs;
    size_t n_allocs, cap_allocs;
    size_t bytes, peak;
    struct lt_cache_ent cache[LT_CACHE_SIZE];
    unsigned cache_next;
    size_t smem_optin;                 /* shared memory a block may opt into */
    enum gpt_cuda_attn_kind attn_want; /* FLASH (when the plan allows) or GEMM */
    int attn_fwd, attn_bwd;            /* enum gpt_attn_fwd/_bwd: the plans' (cu_attn_plan) */
    /* bf16 mode. The shadow table is also touched by the communication
     * thread (note_write), hence the mutex; everything else is the owner's. */
    int bf16;
    pthread_mutex_t shd_mu;
    struct shadow *shd;
    size_t n_shd, cap_shd;
    size_t shd_lo[GPT_CUDA_SPANS_MAX], shd_hi[GPT_CUDA_SPANS_MAX]; /* shd_read_f32's */
    /* adamw_multi's span table: on the device (ends, then decay flags,
     * AW_CAP each, allocated with the backend), the host copy of what is
     * there (uploaded again only when a call's table differs), and the
     * incoming table. */
    uint64_t *aw_dev_ends;
    uint32_t *aw_dev_decay;
    size_t aw_n;
    uint64_t aw_ends[AW_CAP], aw_new_ends[AW_CAP];
    uint32_t aw_decay[AW_CAP], aw_new_decay[AW_CAP];
    /* Per-op profile (gpt_cuda_backend_profile_start): prof_cap events
     * made beforehand, the first prof_n recorded at ops' entries, with the
     * op each starts, prof_made made (prof_cap + 1: the end mark too).
     * prof_cap 0: off. */
    cudaEvent_t *prof_ev;
    const char **prof_op;
    size_t prof_n, prof_cap, prof_made;
};

static inline struct gpt_cuda_backend *cu(struct gpt_backend *be)
{
    return (struct gpt_cuda_backend *)be;
}

/* ---- device helpers -------------------------------------------------------- */

/* 2^x with MUFU.EX2 alone: exp2f adds a range test and two multiplies
 * per call to keep results below 2^-126 (subnormal) exact. The softmax
 * kernels (cross-entropy, the tensor-core attention) call it on x <= 0
 * relative to a row's largest term, which is 1: terms under 1e-38 of it
 * are flushed to 0, which changes neither a row sum of terms near 1, nor
 * an fp32 accumulator of P V, nor a bf16 gradient. */
static __device__ __forceinline__ float cu_exp2_ftz(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* ---- errors ------------------------------------------------------------- */

static inline void cu_record(struct gpt_cuda_backend *cb, const char *what, const char *detail)
{
    if (cb->err_code)
        return;
    cb->err_code = -GPT_E_CUDA;
    snprintf(cb->err_msg, sizeof(cb->err_msg), "%s: %s", what, detail);
}

/* Checks the launches just enqueued; records the first failure. */
static inline void cu_check(struct gpt_cuda_backend *cb, const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        cu_record(cb, what, cudaGetErrorString(e));
}

static inline void cu_check_blas(struct gpt_cuda_backend *cb, cublasStatus_t st, const char *what)
{
    if (st != CUBLAS_STATUS_SUCCESS)
        cu_record(cb, what, GPT_CUBLAS(cublasGetStatusString)(st));
}

/* Turns a runtime error of a fallible slot into a return code, clearing
 * the runtime's last-error so it is not blamed on the next launch. */
static inline int cu_ret(struct gpt_cuda_backend *cb, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    cu_record(cb, what, cudaGetErrorString(e));
    return e == cudaErrorMemoryAllocation ? -ENOMEM : -GPT_E_CUDA;
}

/* Every entry point makes the backend's device current for this thread
 * (cheap; a worker may have touched another device in between). */
/* Every op's first call: the device current, and, while profiling
 * (gpt_cuda_backend_profile_start), an event on the compute stream that
 * starts this op's time (`op` is the op function's name: cu_enter). */
static inline void cu_enter_op(struct gpt_cuda_backend *cb, const char *op)
{
    cudaError_t e = cudaSetDevice(cb->device);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cu_record(cb, "cudaSetDevice", cudaGetErrorString(e));
    }
    if (cb->prof_n < cb->prof_cap) {
        if (cudaEventRecord(cb->prof_ev[cb->prof_n], cb->compute) == cudaSuccess)
            cb->prof_op[cb->prof_n++] = op;
        else
            (void)cudaGetLastError();
    }
}
#define cu_enter(cb) cu_enter_op(cb, __func__)

/* --- cuda_shadow.cu: the bf16 shadow cache ------------------------------ */

/* Another thread (the communicator's) wrote the bytes [p, p + bytes) in
 * fp32: records it without launching (cuda_shadow.cu). Any thread. */
void cu_shd_wrote_foreign(struct gpt_cuda_backend *cb, const void *p, size_t bytes);
/* Frees every shadow overlapping the bytes [p, p + bytes). */
void cu_shd_drop(struct gpt_cuda_backend *cb, const void *p, size_t bytes);
/* An op writes the bytes [p, p + bytes) without a bf16 copy: the shadows
 * covering them become stale there. */
void cu_shd_wrote(struct gpt_cuda_backend *cb, const void *p, size_t bytes);
/* An op writes the floats [p, p + n): where to write their bf16 copy
 * (NULL when no shadow holds them or not in bf16 mode), marking the
 * shadows accordingly; *ret_index (optional) gets p's element offset in
 * that shadow. */
uint16_t *cu_shd_out(struct gpt_cuda_backend *cb, float *p, size_t n, uint64_t *ret_index);
/* A current bf16 view of the floats [p, p + n) for a reader, converting
 * on a miss and creating the allocation's shadow at its first read; NULL
 * when no tracked allocation holds them or the shadow cannot be allocated
 * (the caller then uses the fp32 data). Owner thread. */
const uint16_t *cu_shd_in(struct gpt_cuda_backend *cb, const float *p, size_t n);
/* Frees every shadow, converting owned ranges back to fp32 first;
 * cb->shd_mu held. */
void cu_shd_free_all_locked(struct gpt_cuda_backend *cb);
/* bf16-only outputs (owned ranges, see gpt_cuda_shd_state): where a
 * producer may write the floats [p, p + n) as bf16 only, or NULL (then it
 * writes fp32 as usual); cu_shd_owned marks them once the write is
 * enqueued. */
uint16_t *cu_shd_own(struct gpt_cuda_backend *cb, float *p, size_t n);
void cu_shd_owned(struct gpt_cuda_backend *cb, float *p, size_t n);
/* The bf16 copy of [p, p + n) when it is current there, else NULL; never
 * converts. */
const uint16_t *cu_shd_cur(struct gpt_cuda_backend *cb, const float *p, size_t n);
/* The bf16 copy of [p, p + n) when a reader that takes either copy should
 * read it (current there, some of it held in bf16 only), else NULL: then
 * cu_f32 and read fp32. Never converts. */
const uint16_t *cu_shd_held(struct gpt_cuda_backend *cb, const float *p, size_t n);
/* Every op that reads device floats as fp32 calls this first: owned
 * floats among the bytes [p, p + bytes) are converted back (and learned). */
void cu_f32(struct gpt_cuda_backend *cb, const void *p, size_t bytes);
/* cu_f32, learning the range or not (downloads: not). */
void cu_f32_learn(struct gpt_cuda_backend *cb, const void *p, size_t bytes, int learn);
/* 1 when some of the bytes [p, p + bytes) are owned (bf16 only). */
int cu_shd_is_owned(struct gpt_cuda_backend *cb, const void *p, size_t bytes);

/* --- cuda_matmul.cu: the products (ops slots of the vtable) -------------- */

void cuda_matmul_forward(struct gpt_backend *be, float *out, const float *inp, const float *weight,
                         const float *bias, size_t N, size_t C, size_t OC);
void cuda_matmul_backward(struct gpt_backend *be, float *dinp, float *dweight, float *dbias,
                          const float *dout, const float *inp, const float *weight, size_t N,
                          size_t C, size_t OC);
void cuda_matmul_residual_forward(struct gpt_backend *be, float *out, const float *inp,
                                  const float *weight, const float *bias, const float *res,
                                  size_t N, size_t C, size_t OC);
void cuda_matmul_gelu_forward(struct gpt_backend *be, float *out, float *pre, const float *inp,
                              const float *weight, const float *bias, size_t N, size_t C,
                              size_t OC);
void cuda_matmul_backward_dgelu(struct gpt_backend *be, float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp, const float *weight,
                                const float *pre_gelu, size_t N, size_t C, size_t OC);
/* Row-major, strided-batched fp32 C(M,N) = alpha op(A) op(B) + beta C
 * (cuBLAS SGEMM; attention's GEMM path). */
void cu_gemm_rm(struct gpt_cuda_backend *cb, bool ta, bool tb, int M, int N, int K, float alpha,
                const float *A, int lda, long long sa, const float *B, int ldb, long long sb,
                float beta, float *C, int ldc, long long sc, int batch);
/* cuda_backend.cu's GELU wrappers (the fused products' fallback). */
void cuda_gelu_forward(struct gpt_backend *be, float *out, const float *inp, size_t n);
void cuda_gelu_backward(struct gpt_backend *be, float *dinp, const float *inp, const float *dout,
                        size_t n);

/* --- cuda_kernels.cu (LayerNorm: cuda_layernorm.cu; softmax_xent: cuda_xent.cu) */

/* Every launcher taking a `uint16_t *..._bf` may be given NULL; otherwise
 * it also writes that output as bf16 (round to nearest even) there, at the
 * same element offsets. A `const uint16_t *..._bf` input (optional) is
 * read instead of its fp32 twin (a range held in bf16 only: the residual
 * stream and its gradient in bf16 mode); the arithmetic stays fp32. Where
 * an fp32 output may be NULL (said below), only its bf16 copy is written.
 * The encoder's out may be NULL. */
void cuk_encoder_forward(cudaStream_t s, float *out, uint16_t *out_bf, const int *inp,
                         const float *wte, const float *wpe, size_t B, size_t T, size_t C);
/* scratch: scratch_ints ints for the positions' order by token and their
 * counts (4 B*T); B*T beyond a quarter of it takes a slower scan with the
 * same sums. */
void cuk_encoder_backward(cudaStream_t s, float *dwte, float *dwpe, const float *dout,
                          const uint16_t *dout_bf, const int *inp, int *scratch,
                          size_t scratch_ints, size_t B, size_t T, size_t C);
/* out may be NULL. */
void cuk_layernorm_forward(cudaStream_t s, float *out, uint16_t *out_bf, float *mean, float *rstd,
                           const float *inp, const uint16_t *inp_bf, const float *weight,
                           const float *bias, size_t N, size_t C);
/* res = a + b (res may alias a or b), then layernorm_forward of res. */
void cuk_residual_layernorm_forward(cudaStream_t s, float *res, float *out, uint16_t *out_bf,
                                    float *mean, float *rstd, const float *a, const float *b,
                                    const float *weight, const float *bias, size_t N, size_t C);
/* `scratch` holds `scratch_floats` floats for the parameter gradients'
 * partial sums. One pass over dout and inp when gpt_cuda_plan_lnb_blocks
 * allows (then one small kernel adds the blocks' partials), else a row
 * kernel and the two-pass column sums. dinp_bf as above (of the
 * accumulated dinp). */
/* dout_bf, inp_bf (optional): current bf16 copies, read instead of dout
 * and inp; dinp NULL: the accumulated gradient is bf16 only, dinp_bf read,
 * added to in fp32 and rounded once. All three only where
 * gpt_cuda_plan_lnb_blocks(N, C, scratch_floats) > 0 (the single-pass
 * kernel; the two-pass fallback is fp32 throughout). assign: dweight and
 * dbias are stored, not added to (not read). */
void cuk_layernorm_backward(cudaStream_t s, float *dinp, uint16_t *dinp_bf, float *dweight,
                            float *dbias, const float *dout, const uint16_t *dout_bf,
                            const float *inp, const uint16_t *inp_bf, const float *weight,
                            const float *mean, const float *rstd, size_t N, size_t C,
                            float *scratch, size_t scratch_floats, int assign);
/* out[n, :] = bias for every row n. */
void cuk_bias_broadcast(cudaStream_t s, float *out, const float *bias, size_t N, size_t OC);
/* dst[c] += sum_n src[n, c] (deterministic, two passes through scratch);
 * with assign dst[c] = the sum (dst not read). */
void cuk_colsum_add(cudaStream_t s, float *dst, const float *src, size_t N, size_t C,
                    float *scratch, size_t scratch_floats, int assign);
/* Causal softmax in place over `rows` = B*NH*T rows of a (T, T) matrix
 * already scaled by 1/sqrt(hs); entries j > i are written as 0. */
void cuk_att_softmax_forward(cudaStream_t s, float *att, size_t rows, size_t T);
/* datt = att * (datt - rowsum(att * datt)) for j <= i, 0 above. */
void cuk_att_softmax_backward(cudaStream_t s, float *datt, const float *att, size_t rows, size_t T);
void cuk_gelu_forward(cudaStream_t s, float *out, uint16_t *out_bf, const float *inp, size_t n);
void cuk_gelu_backward(cudaStream_t s, float *dinp, uint16_t *dinp_bf, const float *inp,
                       const float *dout, size_t n);
void cuk_residual_forward(cudaStream_t s, float *out, const float *a, const float *b, size_t n);
/* The fused classifier, one block per row: the logits are read from
 * `logits` (fp32) or, when it is NULL, from logits_bf (bf16); one online
 * max/sum pass over the first V of them gives the loss (written to
 * losses when non-NULL), or with have_loss the loss a previous call wrote
 * to losses gives the row's log-sum-exp (lse = loss + z_t: no reduction
 * pass); then (write_dlogits) dlogits over all Vp columns, as fp32 in
 * dlogits and/or bf16 in dlogits_bf (either may be NULL; each may be the
 * logits' own buffer: written in place). stage_bytes:
 * gpt_cuda_plan_xent_stage's answer for the logits' element size, or 0;
 * a call that writes dlogits without have_loss then reads each row from
 * DRAM once (an error of the shared-memory opt-in is returned, nothing
 * launched). */
cudaError_t cuk_softmax_xent(cudaStream_t s, const float *logits, const uint16_t *logits_bf,
                             float *dlogits, uint16_t *dlogits_bf, float *losses,
                             const int *targets, size_t N, size_t V, size_t Vp, float dscale,
                             int write_dlogits, int have_loss, size_t stage_bytes);
/* With params_bf non-NULL the new parameters are also written there as
 * bf16, rounded to nearest even: a function of the fp32 weights alone, so
 * a run resumed from a snapshot (fp32 weights) reads the same bf16 copy
 * as the run that wrote it. With clip_sumsq non-NULL
 * (one device double, the squared global norm) the gradient factor is
 * gpt_cuda_clip_scale(*clip_sumsq, clip), read when the kernel runs,
 * instead of grad_scale. */
void cuk_adamw(cudaStream_t s, float *params, uint16_t *params_bf, const float *grads, float *m,
               float *v, size_t n, float lr, float beta1, float beta2, float eps,
               float weight_decay, float grad_scale, const double *clip_sumsq, double clip,
               float bc1, float bc2);
/* cuk_adamw over a run of n contiguous elements made of n_spans spans
 * (gpt_cuda_adamw_table's device copy: ends, decay flags), each decayed
 * with weight_decay or not by its flag; one launch. */
void cuk_adamw_multi(cudaStream_t s, float *params, uint16_t *params_bf, const float *grads,
                     float *m, float *v, size_t n, const uint64_t *ends,
                     const uint32_t *decay_flags, size_t n_spans, float lr, float beta1,
                     float beta2, float eps, float weight_decay, float grad_scale,
                     const double *clip_sumsq, double clip, float bc1, float bc2);
/* dst[i] = bf16(src[i]), round to nearest even. */
void cuk_f32_to_bf16(cudaStream_t s, uint16_t *dst, const float *src, size_t n);
/* dst[i] = src[i] widened (exact). */
void cuk_bf16_to_f32(cudaStream_t s, float *dst, const uint16_t *src, size_t n);
void cuk_scale(cudaStream_t s, float *x, float sc, size_t n);
/* *result = sum of x^2 in double; `partials` holds
 * gpt_cuda_plan_sumsq_blocks(n, GPT_CUDA_BLOCK) doubles. */
void cuk_sumsq(cudaStream_t s, const float *x, size_t n, double *partials, double *result);
/* *acc = (reset ? 0 : *acc) + weight * sum of losses[0..N) in double, in
 * a fixed order (one block). */
void cuk_loss_accum(cudaStream_t s, double *acc, const float *losses, size_t N, double weight,
                    int reset);

/* --- cuda_attention.cu --------------------------------------------------- */

/* Fused causal attention with the plan of gpt_cuda_plan_attention (kind
 * FLASH). The forward reads q, k, v from qkv_bf (bf16) when it is non-NULL,
 * else from qkv; writes out (and out_bf if non-NULL; out NULL: out_bf
 * only), and in att the logsumexp per row. The backward needs the att
 * and the out its forward wrote, overwrites every element of dqkv (and
 * dqkv_bf if non-NULL) and uses scratch (gpt_cuda_plan_att_floats(p, ...,
 * 1) floats) for the rows' dout . out on the CUDA-core path, and on the
 * tensor-core path (bf16 q, k, v and out, a head size of
 * engine/include/flash_tc.h) for a bf16 copy of dout (when dout_bf is
 * NULL) and the fused kernel's dQ turn counters.
 * Return the error of the shared-memory opt-in (launch errors are left for
 * cudaGetLastError). */
cudaError_t cuk_flash_forward(cudaStream_t s, const struct gpt_cuda_attn_plan *p, float *out,
                              uint16_t *out_bf, float *att, const float *qkv,
                              const uint16_t *qkv_bf, size_t B, size_t T, size_t C, size_t NH);
/* dout_bf (optional): dout's current bf16 copy, which the tensor-core
 * backward reads instead of dout (no bf16 copy of its own). out_bf: out's
 * current bf16 copy, which the tensor-core backward needs (NULL: the
 * CUDA-core kernels, reading out). Where the tensor-core path does not
 * run and dout_bf or out_bf was given, nothing is launched and the result
 * is cudaErrorNotSupported: the caller makes dout's and out's fp32
 * current and calls again without either. */
cudaError_t cuk_flash_backward(cudaStream_t s, const struct gpt_cuda_attn_plan *p, float *dqkv,
                               uint16_t *dqkv_bf, float *scratch, const float *dout,
                               const uint16_t *dout_bf, const float *out, const uint16_t *out_bf,
                               const float *qkv, const uint16_t *qkv_bf, const float *att, size_t B,
                               size_t T, size_t C, size_t NH);
/* The attention guard's reference (backend.h's attention_guard): the
 * fused tensor-core backward of batch 0, head 0 only, with the arguments
 * cuk_flash_backward took (dout_bf and out_bf as there; scratch's parts
 * at the whole backward's offsets), into ref's head-0 columns of batch
 * 0's T rows (fp32 only). cudaErrorNotSupported where the tensor-core
 * path does not apply (nothing launched). */
cudaError_t cuk_flash_backward_ref(cudaStream_t s, const struct gpt_cuda_attn_plan *p, float *ref,
                                   float *scratch, const float *dout, const uint16_t *dout_bf,
                                   const uint16_t *out_bf, const uint16_t *qkv_bf, const float *att,
                                   size_t B, size_t T, size_t C, size_t NH);
/* 1 when the tensor-core backward in use is the reference (the fused
 * pass, which test_gpu_ops compares every variant with); fall_back makes
 * it so for the rest of the process. Any thread. */
#ifdef __cplusplus
extern "C" {
#endif
int gpt_cuda_flash_tc_bwd_is_reference(const struct gpt_cuda_attn_plan *p);
void gpt_cuda_flash_tc_bwd_fall_back(void);
/* 1 when the last attention backward ran through cuDNN (its outputs are
 * bf16 values, so the guard's fp32 bound does not apply). Any thread. */
int gpt_cuda_flash_dnn_bwd_last(void);
#ifdef __cplusplus
}
#endif
/* The CUDA-core fallback kernels (cuda_attention_cc.cu) that those two
 * launch where the tensor-core ones do not apply: the forward (out, its
 * bf16 copy if out_bf, the logsumexp lse; q, k, v from qkv_bf if
 * non-NULL, else qkv), and the backward (D = dout . out into Dv, then dq
 * and dk, dv; dout and out as fp32). The error of a refused opt-in. */
cudaError_t cuk_flash_cc_forward(cudaStream_t s, const struct gpt_cuda_attn_plan *p, float *out,
                                 uint16_t *out_bf, float *lse, const float *qkv,
                                 const uint16_t *qkv_bf, size_t T, size_t C, size_t NH);
cudaError_t cuk_flash_cc_backward(cudaStream_t s, const struct gpt_cuda_attn_plan *p, float *dqkv,
                                  uint16_t *dqkv_bf, float *Dv, const float *dout, const float *out,
                                  const float *qkv, const uint16_t *qkv_bf, const float *lse,
                                  size_t T, size_t C, size_t NH);

#endif
