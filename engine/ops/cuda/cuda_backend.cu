/*
 * cuda_backend: the CUDA backend's lifecycle, memory (with accounting),
 * transfers, attention's dispatch and the GEMM path of attention, the thin
 * wrappers over cuda_kernels.cu, and its vtable. The matrix products are
 * cuda_matmul.cu, the bf16 shadow cache cuda_shadow.cu, the fused
 * attention kernels cuda_attention.cu. A backend belongs to one worker thread
 * and owns: two streams (compute, comm), a cuBLAS and a cuBLASLt handle
 * sharing one workspace, a scratch buffer for two-pass column sums, the
 * sumsq partials and a pinned host word for its result.
 *
 * Matrix products: cuda_matmul.cu (cuBLASLt with epilogues, else cuBLAS).
 * Attention: the fused flash kernels of cuda_attention.cu whenever
 * gpt_cuda_plan_attention allows (then `att` holds the logsumexp, not
 * probabilities, and the backward takes its row terms from the output the
 * caller passes back); otherwise, or when the GEMM path is
 * requested, QK^T and att V (and the four backward products) are cuBLAS
 * strided-batched GEMMs straight on the strided views of qkv, batched over
 * heads (or batches, whichever is larger) and looped over the other, with
 * the causal softmax fused in one kernel; the full (T, T) product is
 * computed and the upper triangle zeroed (the CPU backend skips it).
 *
 * Errors: ops cannot return; a failing launch or cuBLAS call records the
 * first error (sticky) and the rest of the ops still run on the stream;
 * sync, download and sumsq report it as -GPT_E_CUDA.
 *
 * bf16 mode (set_precision): the vtable and every buffer stay fp32 (the
 * fp32 master weights, fp32 AdamW moments, fp32 gradients, LayerNorm
 * statistics, softmax and loss), and the backend keeps bf16 SHADOWS of the
 * fp32 ranges that matrix products read: a shadow is a bf16 copy of a
 * range [p, p + n) of floats with the sub-range where it is current. The
 * products read their operands from shadows (cuBLASLt, bf16 A/B, fp32
 * accumulation CUBLAS_COMPUTE_32F, fp32 D, bias epilogue), the fused
 * attention reads q, k, v from the shadow of qkv. A reader that finds no
 * current shadow converts (and the first time allocates the shadow, which
 * is counted in the memory statistics); producers whose output has a
 * shadow write the bf16 copy alongside (LayerNorm, GELU and its backward,
 * attention and its backward), and AdamW writes the weights' bf16 copy
 * rounded to nearest (a function of the fp32 weights alone: a resumed run
 * reads the bits the run that wrote the snapshot read). Every
 * other write to device memory (ops, upload, copy, memzero, collectives via
 * gpt_cuda_backend_note_write) takes the written range out of the shadows
 * that cover it, so a stale bf16 value is never read. A shadow covers one
 * whole device allocation and is indexed by element offset (the plan and
 * its current-span set are engine/ops/cuda_plan.c, unit-tested): it is
 * created once, at the first read of its allocation, so after the first
 * step nothing is allocated whatever the batch shape, and no forward
 * operand is converted.
 *
 * bf16-only outputs: where an output's allocation has a shadow, the
 * producers whose readers are products write it as bf16 ONLY, straight
 * into the shadow (the range is "owned": its fp32 floats are stale):
 * matrix products (cuBLASLt with a bf16 D, the bias in bf16 from the
 * weights' shadow; GELU_AUX with its pre-activation as bf16 aux, DGELU
 * reading it), LayerNorm's normalised output and the classifier's dlogits
 * (written in place over the bf16 logits the head's product wrote). The
 * products' dinp that the tensor-core attention backward and LayerNorm's
 * backward read (the model's a->dc) is bf16 only too: both read its
 * current bf16 copy (cu_shd_cur) instead of asking cu_f32. Every
 * op that reads device floats as fp32 (and copy) first asks cu_f32,
 * which converts owned floats back and LEARNS the range: its producer
 * writes fp32 (with the bf16 copy where it can) there from then on. A
 * download converts back without learning (a trainer sampling from the
 * logits now and then keeps the head's bf16 output).
 *
 * The residual stream and its gradient are bf16 only as well (llm.c's
 * way): the encoder writes the stream's start as bf16, the skip
 * connection's products (matmul_residual_forward) read it as their bf16
 * C and write the sum as a bf16 D (beta 1, fp32 accumulation, one
 * rounding), LayerNorm's forward and backward read it as bf16 (statistics
 * fp32), memzero zeroes the gradient (a->dres) in bf16, LayerNorm's
 * backward accumulates into it in bf16 (read, added to in fp32, rounded
 * once; no separate copy), the products' backward read it as their bf16
 * dout and the encoder's backward reads it as bf16. These readers take
 * either copy: they read the bf16 one where a range is held in bf16 only
 * (cu_shd_held), the fp32 floats elsewhere (more exact where both are
 * current). So the steady state converts nothing either way: qkv, the
 * MLP's hidden activations and their gradient, the LayerNorm outputs,
 * the logits/dlogits, the residual stream and its gradient live in bf16
 * only; fp32 stay the master weights, the moments, the weights'
 * gradients, LayerNorm's statistics, softmax and the loss. The rules are
 * gpt_cuda_shd_state (engine/ops/cuda_plan.c, unit-tested against a host
 * model).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_impl.h"
#include "flash_tc.h"

extern "C" {
#include "cuda_backend.h"
#include "cuda_probe.h"
}

/* ---- memory ---------------------------------------------------------------- */

static int cu_track(struct gpt_cuda_backend *cb, void *ptr, size_t bytes)
{
    if (cb->n_allocs == cb->cap_allocs) {
        size_t cap = cb->cap_allocs ? cb->cap_allocs * 2 : 64;
        struct alloc_ent *a = (struct alloc_ent *)realloc(cb->allocs, cap * sizeof(*a));
        if (!a)
            return -ENOMEM;
        cb->allocs = a;
        cb->cap_allocs = cap;
    }
    cb->allocs[cb->n_allocs].ptr = ptr;
    cb->allocs[cb->n_allocs].bytes = bytes;
    cb->n_allocs++;
    cb->bytes += bytes;
    if (cb->bytes > cb->peak)
        cb->peak = cb->bytes;
    return 0;
}

/* Device allocation that is counted; zeroed on the compute stream. Out of
 * memory is the caller's to handle, so it is returned, not made sticky. */
static int cu_malloc(struct gpt_cuda_backend *cb, size_t bytes, void **ret_ptr)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return e == cudaErrorMemoryAllocation ? -ENOMEM : -GPT_E_CUDA;
    }
    int rc = cu_ret(cb, cudaMemsetAsync(p, 0, bytes, cb->compute), "cudaMemsetAsync");
    if (rc == 0)
        rc = cu_track(cb, p, bytes);
    if (rc < 0) {
        cudaFree(p);
        return rc;
    }
    *ret_ptr = p;
    return 0;
}

static void cu_untrack_free(struct gpt_cuda_backend *cb, void *ptr)
{
    for (size_t i = cb->n_allocs; i-- > 0;) {
        if (cb->allocs[i].ptr == ptr) {
            cb->bytes -= cb->allocs[i].bytes;
            cu_shd_drop(cb, ptr, cb->allocs[i].bytes);
            cb->allocs[i] = cb->allocs[--cb->n_allocs];
            break;
        }
    }
    /* cudaFree waits for the device; freeing is rare (teardown). */
    cudaError_t e = cudaFree(ptr);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cu_record(cb, "cudaFree", cudaGetErrorString(e));
    }
}

/* The profile's events (gpt_cuda_backend_profile_start), if any. */
static void cu_prof_free(struct gpt_cuda_backend *cb)
{
    for (size_t i = 0; i < cb->prof_made; i++)
        cudaEventDestroy(cb->prof_ev[i]);
    (void)cudaGetLastError();
    free(cb->prof_ev);
    free(cb->prof_op);
    cb->prof_ev = NULL;
    cb->prof_op = NULL;
    cb->prof_n = cb->prof_cap = cb->prof_made = 0;
}

static void cuda_destroy(struct gpt_backend *be)
{
    struct gpt_cuda_backend *cb = cu(be);
    cudaSetDevice(cb->device);
    if (cb->compute)
        cudaStreamSynchronize(cb->compute);
    cu_prof_free(cb);
    if (cb->comm)
        cudaStreamSynchronize(cb->comm);
    if (cb->lt)
        GPT_CUBLAS(cublasLtDestroy)(cb->lt);
    if (cb->blas)
        GPT_CUBLAS(cublasDestroy)(cb->blas);
    if (cb->ws)
        cudaFree(cb->ws);
    if (cb->scratch)
        cudaFree(cb->scratch);
    if (cb->sumsq_dev)
        cudaFree(cb->sumsq_dev);
    if (cb->sumsq_host)
        cudaFreeHost(cb->sumsq_host);
    if (cb->aw_dev_ends)
        cudaFree(cb->aw_dev_ends);
    if (cb->compute)
        cudaStreamDestroy(cb->compute);
    if (cb->comm)
        cudaStreamDestroy(cb->comm);
    for (size_t i = 0; i < cb->n_shd; i++)
        cudaFree(cb->shd[i].bf);
    (void)cudaGetLastError();
    pthread_mutex_destroy(&cb->shd_mu);
    free(cb->shd);
    free(cb->allocs);
    free(cb);
}

static int cuda_alloc(struct gpt_backend *be, size_t bytes, void **ret_ptr)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    /* cudaMalloc aligns to 256 bytes, more than the 64 backend.h promises. */
    return cu_malloc(cb, bytes, ret_ptr);
}

static void cuda_mem_free(struct gpt_backend *be, void *ptr)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    cu_untrack_free(cb, ptr);
}

static int cuda_upload(struct gpt_backend *be, void *dst, const void *host_src, size_t bytes)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    cu_shd_wrote(cb, dst, bytes);
    /* From pageable memory the runtime stages the data before returning, so
     * the caller may reuse host_src at once; the copy is ordered with the
     * ops on the compute stream. */
    return cu_ret(cb, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cb->compute),
                  "upload");
}

static int cuda_sync(struct gpt_backend *be)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    cb->host_syncs++;
    int rc = cu_ret(cb, cudaStreamSynchronize(cb->compute), "cudaStreamSynchronize");
    if (rc == 0)
        cu_check(cb, "kernel");
    return cb->err_code ? cb->err_code : rc;
}

static int cuda_download(struct gpt_backend *be, void *host_dst, const void *src, size_t bytes)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    cu_f32_learn(cb, src, bytes, 0); /* converted back, not learned */
    int rc = cu_ret(cb, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cb->compute),
                    "download");
    if (rc < 0)
        return rc;
    return cuda_sync(be);
}

static void cuda_copy(struct gpt_backend *be, void *dst, const void *src, size_t bytes)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    cu_f32(cb, src, bytes);
    cu_shd_wrote(cb, dst, bytes);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cb->compute);
    if (e != cudaSuccess)
        (void)cu_ret(cb, e, "copy");
}

/* In bf16 mode whole floats are zeroed in bf16 only where the shadow
 * rules allow (the residual gradient, zeroed before LayerNorm's backward
 * accumulates into it in bf16): +0 is all zero bits in both formats. */
static void cuda_memzero(struct gpt_backend *be, void *ptr, size_t bytes)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    size_t n = bytes / sizeof(float);
    uint16_t *own = bytes % sizeof(float) == 0 && (uintptr_t)ptr % sizeof(float) == 0
                        ? cu_shd_own(cb, (float *)ptr, n)
                        : NULL;
    if (own) {
        cudaError_t e = cudaMemsetAsync(own, 0, n * sizeof(uint16_t), cb->compute);
        if (e != cudaSuccess)
            (void)cu_ret(cb, e, "memzero");
        cu_shd_owned(cb, (float *)ptr, n);
        return;
    }
    cu_shd_wrote(cb, ptr, bytes);
    cudaError_t e = cudaMemsetAsync(ptr, 0, bytes, cb->compute);
    if (e != cudaSuccess)
        (void)cu_ret(cb, e, "memzero");
}

/* ---- attention -------------------------------------------------------------- */

/* Strided views of one (b, h) pair: the batched GEMMs run over the larger
 * of B and NH and loop over the smaller. */
struct att_geom {
    size_t T, C, hs, NH;
    int outer_is_b; /* loop over b, batch over h */
    size_t outer, inner;
};

static struct att_geom att_geom(size_t B, size_t T, size_t C, size_t NH)
{
    struct att_geom g = {T, C, C / NH, NH, B <= NH, 0, 0};
    g.outer = g.outer_is_b ? B : NH;
    g.inner = g.outer_is_b ? NH : B;
    return g;
}

/* Offsets (in floats) of (b, h) into a (B,T,ld) row buffer with head
 * columns h*hs, and into (B,NH,T,T). */
static void att_offsets(const struct att_geom *g, size_t o, size_t ld, size_t *ret_row,
                        size_t *ret_row_stride, size_t *ret_tt, size_t *ret_tt_stride)
{
    size_t T = g->T;
    if (g->outer_is_b) { /* o = b, batch over h */
        *ret_row = o * T * ld;
        *ret_row_stride = g->hs;
        *ret_tt = o * g->NH * T * T;
        *ret_tt_stride = T * T;
    } else { /* o = h, batch over b */
        *ret_row = o * g->hs;
        *ret_row_stride = T * ld;
        *ret_tt = o * T * T;
        *ret_tt_stride = g->NH * T * T;
    }
}

static void cu_attn_plan(const struct gpt_cuda_backend *cb, struct gpt_cuda_attn_plan *p, size_t B,
                         size_t T, size_t C, size_t NH)
{
    gpt_cuda_plan_attention(p, B, T, C, NH, cb->smem_optin, cb->attn_want);
    p->tc = cb->bf16; /* fp32 mode: no tensor-core backward, no scratch for it */
    p->attn_fwd = cb->attn_fwd;
    p->attn_bwd = cb->attn_bwd;
}

static void cuda_attention_forward(struct gpt_backend *be, float *out, float *att, const float *qkv,
                                   size_t B, size_t T, size_t C, size_t NH)
{
    /* out (B,T,C), att (B,NH,T,T), qkv (B,T,3C) */
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    struct gpt_cuda_attn_plan plan;
    cu_attn_plan(cb, &plan, B, T, C, NH);
    if (plan.kind == GPT_CUDA_ATTN_FLASH) {
        const uint16_t *qb = cb->bf16 ? cu_shd_in(cb, qkv, B * T * 3 * C) : NULL;
        if (!qb) /* the kernels read qkv as fp32 only without its bf16 copy */
            cu_f32(cb, qkv, B * T * 3 * C * sizeof(float));
        /* The output feeds the projection's products and the backward's
         * D: bf16 only where the shadow rules allow, else fp32 with the
         * bf16 copy alongside. */
        size_t n = B * T * C;
        uint16_t *own = cu_shd_own(cb, out, n);
        uint16_t *ob = own ? own : cu_shd_out(cb, out, n, NULL);
        cu_shd_wrote(cb, att, plan.lse_floats * sizeof(float));
        cudaError_t e =
            cuk_flash_forward(cb->compute, &plan, own ? NULL : out, ob, att, qkv, qb, B, T, C, NH);
        if (e != cudaSuccess)
            (void)cu_ret(cb, e, "flash_forward smem");
        cu_check(cb, "flash_forward");
        if (own)
            cu_shd_owned(cb, out, n);
        return;
    }
    cu_f32(cb, qkv, B * T * 3 * C * sizeof(float));
    cu_shd_wrote(cb, out, B * T * C * sizeof(float));
    cu_shd_wrote(cb, att, B * NH * T * T * sizeof(float));
    struct att_geom g = att_geom(B, T, C, NH);
    int t = (int)T, hs = (int)g.hs, ld3 = (int)(3 * C), batch = (int)g.inner;
    float scale = 1.0f / sqrtf((float)g.hs);
    for (size_t o = 0; o < g.outer; o++) {
        size_t q0, qs, a0, as;
        att_offsets(&g, o, 3 * C, &q0, &qs, &a0, &as);
        const float *q = qkv + q0, *k = q + C;
        /* att (T,T) = scale * q (T,hs) @ k (T,hs)^T */
        cu_gemm_rm(cb, false, true, t, t, hs, scale, q, ld3, (long long)qs, k, ld3, (long long)qs,
                   0.0f, att + a0, t, (long long)as, batch);
    }
    cuk_att_softmax_forward(cb->compute, att, B * NH * T, T);
    cu_check(cb, "att_softmax_forward");
    for (size_t o = 0; o < g.outer; o++) {
        size_t q0, qs, a0, as, o0, os;
        att_offsets(&g, o, 3 * C, &q0, &qs, &a0, &as);
        att_offsets(&g, o, C, &o0, &os, &a0, &as);
        const float *v = qkv + q0 + 2 * C;
        /* out (T,hs) = att (T,T) @ v (T,hs) */
        cu_gemm_rm(cb, false, false, t, hs, t, 1.0f, att + a0, t, (long long)as, v, ld3,
                   (long long)qs, 0.0f, out + o0, (int)C, (long long)os, batch);
    }
}

/* The same plan as the attention calls, so the model sizes att and the
 * backward scratch for what the kernels write. */
static size_t cuda_att_floats(struct gpt_backend *be, size_t B, size_t T, size_t C, size_t NH,
                              int scratch)
{
    struct gpt_cuda_attn_plan plan;
    cu_attn_plan(cu(be), &plan, B, T, C, NH);
    return gpt_cuda_plan_att_floats(&plan, B, T, C, NH, scratch);
}

static void cuda_attention_backward(struct gpt_backend *be, float *dqkv, float *scratch,
                                    const float *dout, const float *out, const float *qkv,
                                    const float *att, size_t B, size_t T, size_t C, size_t NH)
{
    /* Relies on the zeros this backend's forward wrote above the diagonal
     * of att (the dv product runs over all T rows), or on the logsumexp
     * the flash forward wrote there (the plan is the same) and its out. */
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    struct gpt_cuda_attn_plan plan;
    cu_attn_plan(cb, &plan, B, T, C, NH);
    if (plan.kind == GPT_CUDA_ATTN_FLASH) {
        const uint16_t *qb = cb->bf16 ? cu_shd_in(cb, qkv, B * T * 3 * C) : NULL;
        if (!qb)
            cu_f32(cb, qkv, B * T * 3 * C * sizeof(float));
        /* The tensor-core backward reads dout's bf16 copy where it is
         * current (its producer, attproj's dinp, may then write bf16 only)
         * and out's (the forward's output, usually bf16 only), for D. */
        size_t n = B * T * C;
        const uint16_t *dob = NULL, *obf = NULL;
        if (qb && gpt_flash_tc_applies(plan.hs)) {
            dob = cu_shd_cur(cb, dout, n);
            obf = cu_shd_in(cb, out, n);
        }
        if (!dob)
            cu_f32(cb, dout, n * sizeof(float));
        if (!obf)
            cu_f32(cb, out, n * sizeof(float));
        uint16_t *db = cu_shd_out(cb, dqkv, B * T * 3 * C, NULL);
        cu_shd_wrote(cb, scratch, gpt_cuda_plan_att_floats(&plan, B, T, C, NH, 1) * sizeof(float));
        cudaError_t e = cuk_flash_backward(cb->compute, &plan, dqkv, db, scratch, dout, dob, out,
                                           obf, qkv, qb, att, B, T, C, NH);
        if (e == cudaErrorNotSupported && (dob || obf)) { /* not on tensor cores: fp32 */
            cu_f32(cb, dout, n * sizeof(float));
            cu_f32(cb, out, n * sizeof(float));
            e = cuk_flash_backward(cb->compute, &plan, dqkv, db, scratch, dout, NULL, out, NULL,
                                   qkv, qb, att, B, T, C, NH);
        }
        if (e != cudaSuccess)
            (void)cu_ret(cb, e, "flash_backward smem");
        cu_check(cb, "flash_backward");
        return;
    }
    cu_f32(cb, qkv, B * T * 3 * C * sizeof(float));
    cu_f32(cb, dout, B * T * C * sizeof(float));
    cu_shd_wrote(cb, dqkv, B * T * 3 * C * sizeof(float));
    cu_shd_wrote(cb, scratch, B * NH * T * T * sizeof(float));
    struct att_geom g = att_geom(B, T, C, NH);
    int t = (int)T, hs = (int)g.hs, ld3 = (int)(3 * C), ldc = (int)C, batch = (int)g.inner;
    float scale = 1.0f / sqrtf((float)g.hs);
    for (size_t o = 0; o < g.outer; o++) {
        size_t q0, qs, a0, as, d0, ds;
        att_offsets(&g, o, 3 * C, &q0, &qs, &a0, &as);
        att_offsets(&g, o, C, &d0, &ds, &a0, &as);
        const float *v = qkv + q0 + 2 * C, *d = dout + d0;
        float *dv = dqkv + q0 + 2 * C;
        /* datt (T,T) = d (T,hs) @ v (T,hs)^T */
        cu_gemm_rm(cb, false, true, t, t, hs, 1.0f, d, ldc, (long long)ds, v, ld3, (long long)qs,
                   0.0f, scratch + a0, t, (long long)as, batch);
        /* dv (T,hs) = att^T (T,T) @ d (T,hs) */
        cu_gemm_rm(cb, true, false, t, hs, t, 1.0f, att + a0, t, (long long)as, d, ldc,
                   (long long)ds, 0.0f, dv, ld3, (long long)qs, batch);
    }
    cuk_att_softmax_backward(cb->compute, scratch, att, B * NH * T, T);
    cu_check(cb, "att_softmax_backward");
    for (size_t o = 0; o < g.outer; o++) {
        size_t q0, qs, a0, as;
        att_offsets(&g, o, 3 * C, &q0, &qs, &a0, &as);
        const float *q = qkv + q0, *k = q + C;
        float *dq = dqkv + q0, *dk = dq + C;
        /* dq (T,hs) = scale * dpre (T,T) @ k (T,hs) */
        cu_gemm_rm(cb, false, false, t, hs, t, scale, scratch + a0, t, (long long)as, k, ld3,
                   (long long)qs, 0.0f, dq, ld3, (long long)qs, batch);
        /* dk (T,hs) = scale * dpre^T (T,T) @ q (T,hs) */
        cu_gemm_rm(cb, true, false, t, hs, t, scale, scratch + a0, t, (long long)as, q, ld3,
                   (long long)qs, 0.0f, dk, ld3, (long long)qs, batch);
    }
}

/* ---- thin wrappers over cuda_kernels.cu ----------------------------------------- */

/* The residual stream's start: bf16 only where the shadow rules allow
 * (its readers, LayerNorm and the skip connection's product, read bf16),
 * else fp32 with the bf16 copy alongside where the slab has a shadow. */
static void cuda_encoder_forward(struct gpt_backend *be, float *out, const int *inp,
                                 const float *wte, const float *wpe, size_t B, size_t T, size_t C)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    size_t n = B * T * C;
    uint16_t *own = cu_shd_own(cb, out, n);
    uint16_t *ob = own ? own : cu_shd_out(cb, out, n, NULL);
    cuk_encoder_forward(cb->compute, own ? NULL : out, ob, inp, wte, wpe, B, T, C);
    cu_check(cb, "encoder_forward");
    if (own)
        cu_shd_owned(cb, out, n);
}

/* dout (the residual gradient) from its bf16 copy where it is held in
 * bf16 only (LayerNorm's backward keeps it so). */
static void cuda_encoder_backward(struct gpt_backend *be, float *dwte, float *dwpe,
                                  const float *dout, const int *inp, size_t B, size_t T, size_t C)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    const uint16_t *dob = cu_shd_held(cb, dout, B * T * C);
    if (!dob)
        cu_f32(cb, dout, B * T * C * sizeof(float));
    cu_shd_wrote(cb, dwte, SIZE_MAX); /* rows by token id: up to the vocabulary's end */
    cu_shd_wrote(cb, dwpe, T * C * sizeof(float));
    /* The scratch holds the positions' order by token and their counts
     * (it keeps nothing across ops: they run in stream order). */
    cuk_encoder_backward(cb->compute, dwte, dwpe, dout, dob, inp, (int *)cb->scratch,
                         SCRATCH_FLOATS, B, T, C);
    cu_check(cb, "encoder_backward");
}

static void cuda_layernorm_forward(struct gpt_backend *be, float *out, float *mean, float *rstd,
                                   const float *inp, const float *weight, const float *bias,
                                   size_t N, size_t C)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    /* The input (the residual stream) is read from its bf16 copy where
     * it is held in bf16 only (its producers write it so): no conversion;
     * elsewhere from the fp32 floats (more exact). */
    const uint16_t *ib = cu_shd_held(cb, inp, N * C);
    if (!ib)
        cu_f32(cb, inp, N * C * sizeof(float));
    /* The normalised output feeds products: bf16 only where the shadow
     * rules allow, else fp32 with the bf16 copy alongside. */
    uint16_t *own = cu_shd_own(cb, out, N * C);
    uint16_t *ob = own ? own : cu_shd_out(cb, out, N * C, NULL);
    cu_shd_wrote(cb, mean, N * sizeof(float));
    cu_shd_wrote(cb, rstd, N * sizeof(float));
    cuk_layernorm_forward(cb->compute, own ? NULL : out, ob, mean, rstd, inp, ib, weight, bias, N,
                          C);
    cu_check(cb, "layernorm_forward");
    if (own)
        cu_shd_owned(cb, out, N * C);
}

static void cuda_residual_layernorm_forward(struct gpt_backend *be, float *res, float *out,
                                            float *mean, float *rstd, const float *a,
                                            const float *b, const float *weight, const float *bias,
                                            size_t N, size_t C)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    cu_f32(cb, a, N * C * sizeof(float));
    cu_f32(cb, b, N * C * sizeof(float));
    cu_shd_wrote(cb, res, N * C * sizeof(float));
    uint16_t *own = cu_shd_own(cb, out, N * C);
    uint16_t *ob = own ? own : cu_shd_out(cb, out, N * C, NULL);
    cu_shd_wrote(cb, mean, N * sizeof(float));
    cu_shd_wrote(cb, rstd, N * sizeof(float));
    cuk_residual_layernorm_forward(cb->compute, res, own ? NULL : out, ob, mean, rstd, a, b, weight,
                                   bias, N, C);
    cu_check(cb, "residual_layernorm_forward");
    if (own)
        cu_shd_owned(cb, out, N * C);
}

static void cuda_layernorm_backward(struct gpt_backend *be, float *dinp, float *dweight,
                                    float *dbias, const float *dout, const float *inp,
                                    const float *weight, const float *mean, const float *rstd,
                                    size_t N, size_t C)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    /* Where the single-pass kernel runs, its inputs may come from their
     * bf16 copies: dout (a product's dinp) where that is current, inp (the
     * residual stream) where it is held in bf16 only, so their producers
     * may write them bf16 only. dinp (the residual stream's gradient)
     * accumulates here and feeds the next products' backward and the
     * encoder's: where it is held in bf16 only (memzero wrote it so) and
     * the shadow rules allow, it stays so (read, added to in fp32, rounded
     * once), else fp32 with its bf16 copy alongside. */
    int single = gpt_cuda_plan_lnb_blocks(N, C, SCRATCH_FLOATS) > 0;
    const uint16_t *dob = single ? cu_shd_cur(cb, dout, N * C) : NULL;
    if (!dob)
        cu_f32(cb, dout, N * C * sizeof(float));
    const uint16_t *ib = single ? cu_shd_held(cb, inp, N * C) : NULL;
    if (!ib)
        cu_f32(cb, inp, N * C * sizeof(float));
    cu_shd_wrote(cb, dweight, C * sizeof(float));
    cu_shd_wrote(cb, dbias, C * sizeof(float));
    uint16_t *own = single && cu_shd_held(cb, dinp, N * C) ? cu_shd_own(cb, dinp, N * C) : NULL;
    uint16_t *db = own;
    if (!own) {
        cu_f32(cb, dinp, N * C * sizeof(float)); /* accumulated */
        db = cu_shd_out(cb, dinp, N * C, NULL);
    }
    /* be->grad_assign: dweight and dbias stored, not added to. */
    cuk_layernorm_backward(cb->compute, own ? NULL : dinp, db, dweight, dbias, dout, dob, inp, ib,
                           weight, mean, rstd, N, C, cb->scratch, SCRATCH_FLOATS, be->grad_assign);
    cu_check(cb, "layernorm_backward");
    if (own)
        cu_shd_owned(cb, dinp, N * C);
}

void cuda_gelu_forward(struct gpt_backend *be, float *out, const float *inp, size_t n)
{
    struct gpt_cuda_backend *cb = cu(be);
    if (n == 0)
        return;
    cu_enter(cb);
    cu_f32(cb, inp, n * sizeof(float));
    uint16_t *ob = cu_shd_out(cb, out, n, NULL);
    cuk_gelu_forward(cb->compute, out, ob, inp, n);
    cu_check(cb, "gelu_forward");
}

void cuda_gelu_backward(struct gpt_backend *be, float *dinp, const float *inp, const float *dout,
                        size_t n)
{
    struct gpt_cuda_backend *cb = cu(be);
    if (n == 0)
        return;
    cu_enter(cb);
    cu_f32(cb, inp, n * sizeof(float));
    cu_f32(cb, dout, n * sizeof(float));
    uint16_t *db = cu_shd_out(cb, dinp, n, NULL);
    cuk_gelu_backward(cb->compute, dinp, db, inp, dout, n);
    cu_check(cb, "gelu_backward");
}

static void cuda_residual_forward(struct gpt_backend *be, float *out, const float *a,
                                  const float *b, size_t n)
{
    struct gpt_cuda_backend *cb = cu(be);
    if (n == 0)
        return;
    cu_enter(cb);
    cu_f32(cb, a, n * sizeof(float));
    cu_f32(cb, b, n * sizeof(float));
    cu_shd_wrote(cb, out, n * sizeof(float));
    cuk_residual_forward(cb->compute, out, a, b, n);
    cu_check(cb, "residual_forward");
}

/* The classifier's loss and dlogits. In bf16 mode the logits are read as
 * bf16 when their bf16 copy is current (the head's product wrote them
 * bf16 only), and the dlogits are written in place as bf16 only where the
 * shadow rules allow (the head's backward products read nothing else), so
 * no fp32 (N, Vp) tensor is read or written. With GPT_XENT_AFTER_LOSS the
 * losses of the forward call give each row's log-sum-exp: one pass. A
 * call that writes dlogits otherwise (the training forward's loss and
 * dlogits together) keeps each row in shared memory between its two
 * passes where it fits (gpt_cuda_plan_xent_stage): one read as well. */
static void cuda_softmax_xent(struct gpt_backend *be, float *logits, float *losses,
                              const int *targets, size_t N, size_t V, size_t Vp, float dscale,
                              int write_dlogits)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    size_t n = N * Vp;
    int have_loss = write_dlogits == GPT_XENT_AFTER_LOSS && losses != NULL;
    const uint16_t *lb = cu_shd_cur(cb, logits, n);
    if (!lb)
        cu_f32(cb, logits, n * sizeof(float));
    uint16_t *own = write_dlogits && lb ? cu_shd_own(cb, logits, n) : NULL;
    /* Otherwise dlogits are fp32 with the bf16 copy alongside. */
    uint16_t *db = own ? own : write_dlogits ? cu_shd_out(cb, logits, n, NULL) : NULL;
    if (have_loss)
        cu_f32(cb, losses, N * sizeof(float));
    else
        cu_shd_wrote(cb, losses, N * sizeof(float));
    size_t stage =
        write_dlogits && !have_loss ? gpt_cuda_plan_xent_stage(Vp, lb ? 2 : 4, cb->smem_optin) : 0;
    cudaError_t e =
        cuk_softmax_xent(cb->compute, lb ? NULL : logits, lb, own ? NULL : logits, db, losses,
                         targets, N, V, Vp, dscale, write_dlogits, have_loss, stage);
    if (e != cudaSuccess)
        (void)cu_ret(cb, e, "softmax_xent smem");
    cu_check(cb, "softmax_xent");
    if (own)
        cu_shd_owned(cb, logits, n);
}

/* adamw, with the clip factor read on the device from clip_sumsq when
 * that is non-NULL (adamw_multi_clip's fallback), else grad_scale. */
static void cu_adamw(struct gpt_backend *be, float *params, const float *grads, float *m, float *v,
                     size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                     float grad_scale, const double *clip_sumsq, double clip, float bc1, float bc2)
{
    struct gpt_cuda_backend *cb = cu(be);
    if (n == 0)
        return;
    /* The op's name for the profile (cu_enter would say cu_adamw). */
    cu_enter_op(cb, clip_sumsq ? "cuda_adamw_clip" : "cuda_adamw");
    /* In bf16 mode the weights' shadow (if a product has read them) gets
     * the new values, rounded to nearest. */
    cu_f32(cb, params, n * sizeof(float));
    cu_f32(cb, grads, n * sizeof(float));
    uint16_t *pb = cu_shd_out(cb, params, n, NULL);
    cu_shd_wrote(cb, m, n * sizeof(float));
    cu_shd_wrote(cb, v, n * sizeof(float));
    cuk_adamw(cb->compute, params, pb, grads, m, v, n, lr, beta1, beta2, eps, weight_decay,
              grad_scale, clip_sumsq, clip, bc1, bc2);
    cu_check(cb, "adamw");
}

static void cuda_adamw(struct gpt_backend *be, float *params, const float *grads, float *m,
                       float *v, size_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, float grad_scale, float bc1, float bc2)
{
    cu_adamw(be, params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, NULL, 0.0,
             bc1, bc2);
}

/* AdamW over all the spans in one launch when they are contiguous and at
 * most AW_CAP (the optimizer's usual call: every tensor of the model, or
 * of a shard), else one adamw per span. The span table goes to the device
 * only when it differs from the last one (in steady state: never). In
 * bf16 mode the weights' shadow gets the new values in the same pass,
 * rounded to nearest. */
static void cu_adamw_multi(struct gpt_backend *be, float *params, const float *grads, float *m,
                           float *v, const struct gpt_adamw_span *spans, size_t n_spans, float lr,
                           float beta1, float beta2, float eps, float weight_decay,
                           float grad_scale, const double *clip_sumsq, double clip, float bc1,
                           float bc2)
{
    struct gpt_cuda_backend *cb = cu(be);
    size_t total = 0;
    if (n_spans == 0)
        return;
    if (n_spans > AW_CAP ||
        gpt_cuda_adamw_table(spans, n_spans, cb->aw_new_ends, cb->aw_new_decay, &total) < 0) {
        for (size_t i = 0; i < n_spans; i++) {
            size_t o = spans[i].off;
            cu_adamw(be, params + o, grads + o, m + o, v + o, spans[i].n, lr, beta1, beta2, eps,
                     spans[i].decay ? weight_decay : 0.0f, grad_scale, clip_sumsq, clip, bc1, bc2);
        }
        return;
    }
    cu_enter_op(cb, clip_sumsq ? "cuda_adamw_multi_clip" : "cuda_adamw_multi");
    if (n_spans != cb->aw_n ||
        memcmp(cb->aw_ends, cb->aw_new_ends, n_spans * sizeof(uint64_t)) != 0 ||
        memcmp(cb->aw_decay, cb->aw_new_decay, n_spans * sizeof(uint32_t)) != 0) {
        memcpy(cb->aw_ends, cb->aw_new_ends, n_spans * sizeof(uint64_t));
        memcpy(cb->aw_decay, cb->aw_new_decay, n_spans * sizeof(uint32_t));
        /* Pageable sources: staged before the calls return, so the host
         * copies may change on the next call. */
        if (cu_ret(cb,
                   cudaMemcpyAsync(cb->aw_dev_ends, cb->aw_ends, n_spans * sizeof(uint64_t),
                                   cudaMemcpyHostToDevice, cb->compute),
                   "adamw table") < 0 ||
            cu_ret(cb,
                   cudaMemcpyAsync(cb->aw_dev_decay, cb->aw_decay, n_spans * sizeof(uint32_t),
                                   cudaMemcpyHostToDevice, cb->compute),
                   "adamw table") < 0) {
            cb->aw_n = 0;
            return;
        }
        cb->aw_n = n_spans;
    }
    size_t o = spans[0].off;
    cu_f32(cb, params + o, total * sizeof(float));
    cu_f32(cb, grads + o, total * sizeof(float));
    uint16_t *pb = cu_shd_out(cb, params + o, total, NULL);
    cu_shd_wrote(cb, m + o, total * sizeof(float));
    cu_shd_wrote(cb, v + o, total * sizeof(float));
    cuk_adamw_multi(cb->compute, params + o, pb, grads + o, m + o, v + o, total, cb->aw_dev_ends,
                    cb->aw_dev_decay, n_spans, lr, beta1, beta2, eps, weight_decay, grad_scale,
                    clip_sumsq, clip, bc1, bc2);
    cu_check(cb, "adamw_multi");
}

static void cuda_adamw_multi(struct gpt_backend *be, float *params, const float *grads, float *m,
                             float *v, const struct gpt_adamw_span *spans, size_t n_spans, float lr,
                             float beta1, float beta2, float eps, float weight_decay,
                             float grad_scale, float bc1, float bc2)
{
    cu_adamw_multi(be, params, grads, m, v, spans, n_spans, lr, beta1, beta2, eps, weight_decay,
                   grad_scale, NULL, 0.0, bc1, bc2);
}

/* The step-on-device ops (backend.h): the update's clip factor comes from
 * the squared norm sumsq_dev left in device memory. */
static void cuda_adamw_multi_clip(struct gpt_backend *be, float *params, const float *grads,
                                  float *m, float *v, const struct gpt_adamw_span *spans,
                                  size_t n_spans, float lr, float beta1, float beta2, float eps,
                                  float weight_decay, const double *sumsq, double clip, float bc1,
                                  float bc2)
{
    cu_adamw_multi(be, params, grads, m, v, spans, n_spans, lr, beta1, beta2, eps, weight_decay,
                   1.0f, sumsq, clip, bc1, bc2);
}

/* sumsq's two passes (the same partials buffer, the same bits) into the
 * caller's device double instead of the pinned host word: no sync. */
static void cuda_sumsq_dev(struct gpt_backend *be, double *out, const float *x, size_t n)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    cu_shd_wrote(cb, out, sizeof(double));
    if (n == 0) {
        (void)cu_ret(cb, cudaMemsetAsync(out, 0, sizeof(double), cb->compute), "sumsq_dev");
        return;
    }
    cu_f32(cb, x, n * sizeof(float));
    cuk_sumsq(cb->compute, x, n, cb->sumsq_dev, out);
    cu_check(cb, "sumsq_dev");
}

static void cuda_loss_accum(struct gpt_backend *be, double *acc, const float *losses, size_t N,
                            double weight, int reset)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    cu_f32(cb, losses, N * sizeof(float));
    cu_shd_wrote(cb, acc, sizeof(double));
    cuk_loss_accum(cb->compute, acc, losses, N, weight, reset);
    cu_check(cb, "loss_accum");
}

static double cuda_sumsq(struct gpt_backend *be, const float *x, size_t n)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    cu_f32(cb, x, n * sizeof(float));
    double *result = cb->sumsq_dev + GPT_CUDA_SUMSQ_MAX_BLOCKS;
    cuk_sumsq(cb->compute, x, n, cb->sumsq_dev, result);
    cu_check(cb, "sumsq");
    if (cu_ret(cb,
               cudaMemcpyAsync(cb->sumsq_host, result, sizeof(double), cudaMemcpyDeviceToHost,
                               cb->compute),
               "sumsq copy") < 0 ||
        cuda_sync(be) < 0)
        return NAN; /* the error stays recorded for the next sync */
    return *cb->sumsq_host;
}

static void cuda_scale(struct gpt_backend *be, float *x, float s, size_t n)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    cu_f32(cb, x, n * sizeof(float));
    cu_shd_wrote(cb, x, n * sizeof(float));
    cuk_scale(cb->compute, x, s, n);
    cu_check(cb, "scale");
}

/* fp32 (0), bf16 (1) or auto (2, = bf16), enum gpt_precision, with
 * GPT_BACKEND_PREC_NO_TF32 or'd in to keep fp32 products strict; without
 * it fp32 products run on TF32 tensor cores (trainer.tf32, default true).
 * GPT_BACKEND_PREC_GEMM_TUNE and _GELU_UNFUSED: cuda_matmul.cu's levers.
 * Leaving bf16 frees the shadows. No rounding here is random: `seed` is
 * unused (the weights' bf16 copy is rounded to nearest, so that a resumed
 * run computes with the bits the interrupted one had). */

/* The Lt products read cb->tf32; the cuBLAS fallbacks (strided-batched
 * SGEMM) take the handle's math mode. Ops reach this through cb, not the
 * accessor, so a test may run the backend under a copy of its vtable. */
static void cu_set_tf32(struct gpt_cuda_backend *cb, int on)
{
    cb->tf32 = on != 0;
    cu_check_blas(cb,
                  GPT_CUBLAS(cublasSetMathMode)(cb->blas, on ? CUBLAS_TF32_TENSOR_OP_MATH
                                                             : CUBLAS_DEFAULT_MATH),
                  "cublasSetMathMode");
}

static int cuda_set_precision(struct gpt_backend *be, int precision, uint64_t seed)
{
    (void)seed;
    struct gpt_cuda_backend *cb = cu(be);
    int tf32 = !(precision & GPT_BACKEND_PREC_NO_TF32);
    if (precision & ~(GPT_BACKEND_PREC_MASK | GPT_BACKEND_PREC_NO_TF32 |
                      GPT_BACKEND_PREC_GEMM_TUNE | GPT_BACKEND_PREC_GELU_UNFUSED))
        return -EINVAL;
    int lt_tune = (precision & GPT_BACKEND_PREC_GEMM_TUNE) != 0;
    int gelu_unfused = (precision & GPT_BACKEND_PREC_GELU_UNFUSED) != 0;
    precision &= GPT_BACKEND_PREC_MASK;
    if (precision == 2)
        precision = 1; /* auto: bf16 is this backend's fast path */
    if (precision != 0 && precision != 1)
        return -EINVAL;
    cu_enter(cb);
    cu_set_tf32(cb, tf32);
    /* Shapes already cached keep their algorithm: set before the first product. */
    cb->lt_tune = lt_tune;
    cb->gelu_unfused = gelu_unfused;
    pthread_mutex_lock(&cb->shd_mu);
    if (!precision)
        cu_shd_free_all_locked(cb);
    cb->bf16 = precision;
    pthread_mutex_unlock(&cb->shd_mu);
    return 0;
}

/* backend.h's attention_guard: the reference of batch 0, head 0, where the
 * backward just run took the tensor-core path in another variant than the
 * reference (the fused pass), with the inputs it read. */
static int cuda_attention_guard(struct gpt_backend *be, float *ref, float *scratch,
                                const float *dout, const float *out, const float *qkv,
                                const float *att, size_t B, size_t T, size_t C, size_t NH)
{
    struct gpt_cuda_backend *cb = cu(be);
    struct gpt_cuda_attn_plan plan;
    cu_attn_plan(cb, &plan, B, T, C, NH);
    if (plan.kind != GPT_CUDA_ATTN_FLASH || !plan.tc || !cb->bf16 ||
        !gpt_flash_tc_applies(plan.hs) || gpt_cuda_flash_tc_bwd_is_reference(&plan) ||
        gpt_cuda_flash_dnn_bwd_last())
        return -ENOTSUP; /* cuDNN's: bf16 outputs, checked against the CPU by test_gpu_ops */

    /* the bf16 copies the tensor-core backward read, still current */
    size_t n = B * T * C;
    const uint16_t *qb = cu_shd_cur(cb, qkv, B * T * 3 * C), *obf = cu_shd_cur(cb, out, n);
    if (!qb || !obf)
        return -ENOTSUP; /* the backward ran on the CUDA cores: no variants there */
    if (!ref)
        return 0;
    cu_enter(cb);
    const uint16_t *dob = cu_shd_cur(cb, dout, n);
    if (!dob)
        cu_f32(cb, dout, n * sizeof(float));
    cu_shd_wrote(cb, ref, T * 3 * C * sizeof(float));
    cu_shd_wrote(cb, scratch, gpt_cuda_plan_att_floats(&plan, B, T, C, NH, 1) * sizeof(float));
    cudaError_t e = cuk_flash_backward_ref(cb->compute, &plan, ref, scratch, dout, dob, obf, qb,
                                           att, B, T, C, NH);
    if (e == cudaErrorNotSupported) {
        (void)cudaGetLastError();
        return -ENOTSUP;
    }
    if (e != cudaSuccess)
        return cu_ret(cb, e, "attention guard");
    cu_check(cb, "attention guard");
    return 0;
}

static void cuda_attention_fallback(struct gpt_backend *be)
{
    (void)be;
    gpt_cuda_flash_tc_bwd_fall_back();
    fprintf(stderr, "gptd: the attention backward runs the reference variant (fused) from now "
                    "on in this process\n");
}

static int cuda_device_info(struct gpt_backend *be, char *name, size_t cap, int *ret_cc)
{
    struct gpt_cuda_backend *cb = cu(be);
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, cb->device);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return -GPT_E_CUDA;
    }
    snprintf(name, cap, "%s", prop.name);
    *ret_cc = prop.major * 10 + prop.minor;
    return 0;
}

/* C++ has no out-of-order designated initializers: the members in
 * backend_ops.def's order, each slot cuda_<slot>. */
static const struct gpt_backend_ops cuda_ops = {
    /* .name = */ "cuda",
#define GPT_OP(wrap, group, ret, name, params, args, pre) cuda_##name,
#include "backend_ops.def"
    /* .grads_assign = */ 1,
    /* .device_memory = */ 1,
};

/* ---- construction and accessors -------------------------------------------- */

static const struct gpt_cuda_backend *cu_const(const struct gpt_backend *be)
{
    GPT_ASSERT(be && be->ops == &cuda_ops);
    return (const struct gpt_cuda_backend *)be;
}

static int cu_fail_new(struct gpt_cuda_backend *cb, struct gpt_err *err, const char *what,
                       const char *detail)
{
    cuda_destroy(&cb->head);
    return gpt_err_set(err, -GPT_E_CUDA, NULL, "cuda backend: %s: %s", what, detail);
}

/* head.attn_variants: the variants o chose, and where one cannot run on
 * this build or host, what runs instead (a variant that does not take a
 * shape, e.g. wg at head size 128, also runs the default there). */
static void cu_attn_describe(struct gpt_cuda_backend *cb)
{
    enum gpt_flash_bwd bwd =
        cb->attn_bwd > 0 ? (enum gpt_flash_bwd)(cb->attn_bwd - 1) : GPT_FLASH_BWD_DEFAULT;
    int fwd = cb->attn_fwd > 0 ? cb->attn_fwd : GPT_FLASH_FWD_DEFAULT;
    const char *instead = "";
    bool wg = fwd == GPT_FLASH_FWD_WG || bwd == GPT_FLASH_BWD_WG;
    bool dnn = fwd == GPT_FLASH_FWD_CUDNN || bwd == GPT_FLASH_BWD_CUDNN;
    if (wg && !gpt_cuda_flash_wg_live())
        instead = " (no sm_90a kernels here: wg runs the defaults)";
    else if (dnn && gpt_cuda_cudnn_version() <= 0)
        instead = " (no libcudnn.so.9: cudnn runs the defaults)";
    snprintf(cb->head.attn_variants, sizeof(cb->head.attn_variants),
             "forward %s, backward %s%s", gpt_flash_tc_fwd_name(fwd), gpt_flash_tc_bwd_name(bwd),
             instead);
}

extern "C" int gpt_backend_cuda_new(int device, const struct gpt_backend_opts *o,
                                    struct gpt_backend **ret, struct gpt_err *err)
{
    char probe[512];
    int count = gpt_cuda_probe(probe, sizeof(probe));
    if (count < 0)
        return gpt_err_set(err, -GPT_E_CUDA, NULL, "cuda backend: %s", probe);
    if (count == 0)
        return gpt_err_set(err, -GPT_E_NODEVICE, NULL, "cuda backend: no GPU or no driver");
    if (device < 0 || device >= count)
        return gpt_err_set(err, -EINVAL, NULL, "cuda backend: device %d out of range (0..%d)",
                           device, count - 1);
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gpt_err_set(err, -GPT_E_CUDA, NULL, "cuda backend: cudaSetDevice(%d): %s", device,
                           cudaGetErrorString(e));
    }
    struct gpt_cuda_backend *cb = (struct gpt_cuda_backend *)calloc(1, sizeof(*cb));
    if (!cb)
        return gpt_err_set(err, -ENOMEM, NULL, "cuda backend: out of memory");
    cb->head.ops = &cuda_ops;
    cb->head.name = "cuda";
    cb->head.threads = 1;
    cb->device = device;
    cb->attn_want = GPT_CUDA_ATTN_FLASH;
    cb->attn_fwd = o ? o->attn_forward : 0;
    cb->attn_bwd = o ? o->attn_backward : 0;
    pthread_mutex_init(&cb->shd_mu, NULL);
    int optin = 0;
    if ((e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device)) !=
        cudaSuccess)
        return cu_fail_new(cb, err, "cudaDeviceGetAttribute", cudaGetErrorString(e));
    cb->smem_optin = (size_t)optin;
    if ((e = cudaStreamCreateWithFlags(&cb->compute, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&cb->comm, cudaStreamNonBlocking)) != cudaSuccess)
        return cu_fail_new(cb, err, "cudaStreamCreate", cudaGetErrorString(e));
    struct gpt_err blas_err;
    if (gpt_cublas_load(&blas_err) < 0) /* the first backend of the process loads it */
        return cu_fail_new(cb, err, "cuBLAS", blas_err.msg);
    cublasStatus_t st;
    if ((st = GPT_CUBLAS(cublasCreate)(&cb->blas)) != CUBLAS_STATUS_SUCCESS ||
        (st = GPT_CUBLAS(cublasSetStream)(cb->blas, cb->compute)) != CUBLAS_STATUS_SUCCESS ||
        (st = GPT_CUBLAS(cublasSetMathMode)(cb->blas, CUBLAS_DEFAULT_MATH)) !=
            CUBLAS_STATUS_SUCCESS)
        return cu_fail_new(cb, err, "cuBLAS", GPT_CUBLAS(cublasGetStatusString)(st));
    if ((st = GPT_CUBLAS(cublasLtCreate)(&cb->lt)) != CUBLAS_STATUS_SUCCESS)
        return cu_fail_new(cb, err, "cublasLtCreate", GPT_CUBLAS(cublasGetStatusString)(st));
    void *p;
    if (cu_malloc(cb, LT_WORKSPACE_BYTES, &p) < 0)
        return cu_fail_new(cb, err, "workspace", "cudaMalloc failed");
    cb->ws = p;
    /* cuBLAS and cuBLASLt run on the same stream, so they can share it. */
    if ((st = GPT_CUBLAS(cublasSetWorkspace)(cb->blas, cb->ws, LT_WORKSPACE_BYTES)) !=
        CUBLAS_STATUS_SUCCESS)
        return cu_fail_new(cb, err, "cublasSetWorkspace", GPT_CUBLAS(cublasGetStatusString)(st));
    if (cu_malloc(cb, SCRATCH_FLOATS * sizeof(float), &p) < 0)
        return cu_fail_new(cb, err, "scratch", "cudaMalloc failed");
    cb->scratch = (float *)p;
    if (cu_malloc(cb, (GPT_CUDA_SUMSQ_MAX_BLOCKS + 1) * sizeof(double), &p) < 0)
        return cu_fail_new(cb, err, "sumsq", "cudaMalloc failed");
    cb->sumsq_dev = (double *)p;
    if (cu_malloc(cb, AW_CAP * (sizeof(uint64_t) + sizeof(uint32_t)), &p) < 0)
        return cu_fail_new(cb, err, "adamw table", "cudaMalloc failed");
    cb->aw_dev_ends = (uint64_t *)p;
    cb->aw_dev_decay = (uint32_t *)(cb->aw_dev_ends + AW_CAP);
    if ((e = cudaMallocHost((void **)&cb->sumsq_host, sizeof(double))) != cudaSuccess)
        return cu_fail_new(cb, err, "cudaMallocHost", cudaGetErrorString(e));
    /* Untrack the internal buffers from the table (they are freed by
     * destroy) but keep them in the byte counts. */
    cb->n_allocs = 0;
    if ((e = cudaStreamSynchronize(cb->compute)) != cudaSuccess)
        return cu_fail_new(cb, err, "cudaStreamSynchronize", cudaGetErrorString(e));
    cu_attn_describe(cb);
    *ret = &cb->head;
    return 0;
}

extern "C" int gpt_backend_is_cuda(const struct gpt_backend *be)
{
    return be && be->ops == &cuda_ops;
}

extern "C" void gpt_cuda_backend_mem_stats(const struct gpt_backend *be, size_t *ret_bytes,
                                           size_t *ret_peak_bytes)
{
    const struct gpt_cuda_backend *cb = cu_const(be);
    if (ret_bytes)
        *ret_bytes = cb->bytes;
    if (ret_peak_bytes)
        *ret_peak_bytes = cb->peak;
}

extern "C" int gpt_cuda_backend_profile_start(struct gpt_backend *be, size_t max_ops)
{
    struct gpt_cuda_backend *cb = cu(be);
    if (cb->prof_cap || max_ops == 0)
        return -EINVAL;
    if (cudaSetDevice(cb->device) != cudaSuccess) {
        (void)cudaGetLastError();
        return -GPT_E_CUDA;
    }
    /* One more than the ops: _stop's end mark. */
    cb->prof_ev = (cudaEvent_t *)calloc(max_ops + 1, sizeof(*cb->prof_ev));
    cb->prof_op = (const char **)calloc(max_ops + 1, sizeof(*cb->prof_op));
    if (!cb->prof_ev || !cb->prof_op) {
        cu_prof_free(cb);
        return -ENOMEM;
    }
    for (size_t i = 0; i <= max_ops; i++) {
        if (cudaEventCreate(&cb->prof_ev[i]) != cudaSuccess) {
            cu_prof_free(cb); /* the prof_made made so far */
            return -GPT_E_CUDA;
        }
        cb->prof_made = i + 1;
    }
    cb->prof_cap = max_ops; /* the last event is _stop's */
    cb->prof_n = 0;
    return 0;
}

extern "C" int gpt_cuda_backend_profile_stop(struct gpt_backend *be,
                                             void (*fn)(void *ctx, const char *op, double ms),
                                             void *ctx)
{
    struct gpt_cuda_backend *cb = cu(be);
    if (!cb->prof_cap)
        return -EINVAL;
    size_t n = cb->prof_n;
    cb->prof_cap = 0; /* no more marks, whatever follows */
    int rc = 0;
    if (cudaSetDevice(cb->device) != cudaSuccess ||
        cudaEventRecord(cb->prof_ev[n], cb->compute) != cudaSuccess ||
        cudaEventSynchronize(cb->prof_ev[n]) != cudaSuccess)
        rc = -GPT_E_CUDA;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, cb->prof_ev[i], cb->prof_ev[i + 1]) != cudaSuccess)
            rc = -GPT_E_CUDA;
        else
            fn(ctx, cb->prof_op[i], ms);
    }
    cu_prof_free(cb);
    return rc;
}

extern "C" int gpt_cuda_backend_device(const struct gpt_backend *be)
{
    return cu_const(be)->device;
}

extern "C" void *gpt_cuda_backend_compute_stream(const struct gpt_backend *be)
{
    return (void *)cu_const(be)->compute;
}

extern "C" void *gpt_cuda_backend_comm_stream(const struct gpt_backend *be)
{
    return (void *)cu_const(be)->comm;
}

extern "C" const char *gpt_cuda_backend_last_error(const struct gpt_backend *be)
{
    return cu_const(be)->err_msg;
}

extern "C" uint64_t gpt_cuda_backend_host_syncs(const struct gpt_backend *be)
{
    return cu_const(be)->host_syncs;
}

extern "C" void gpt_cuda_backend_set_attention(struct gpt_backend *be, enum gpt_cuda_attn_kind want)
{
    struct gpt_cuda_backend *cb = (struct gpt_cuda_backend *)cu_const(be);
    cb->attn_want = want;
}

extern "C" void gpt_cuda_backend_attention_plan(const struct gpt_backend *be, size_t B, size_t T,
                                                size_t C, size_t NH, struct gpt_cuda_attn_plan *ret)
{
    cu_attn_plan(cu_const(be), ret, B, T, C, NH);
}

extern "C" void gpt_cuda_backend_note_write(struct gpt_backend *be, const void *ptr, size_t bytes)
{
    struct gpt_cuda_backend *cb = (struct gpt_cuda_backend *)cu_const(be);
    cu_shd_wrote_foreign(cb, ptr, bytes);
}

/* Launch errors are returned, never recorded in a backend: these run on
 * the communication thread. */
static int cu_launch_rc(void)
{
    return cudaGetLastError() == cudaSuccess ? 0 : -GPT_E_CUDA;
}

extern "C" int gpt_cuda_f32_to_bf16(void *stream, uint16_t *dst, const float *src, size_t n)
{
    if (n == 0)
        return 0;
    cuk_f32_to_bf16((cudaStream_t)stream, dst, src, n);
    return cu_launch_rc();
}

extern "C" int gpt_cuda_bf16_to_f32(void *stream, float *dst, const uint16_t *src, size_t n)
{
    if (n == 0)
        return 0;
    cuk_bf16_to_f32((cudaStream_t)stream, dst, src, n);
    return cu_launch_rc();
}

extern "C" int gpt_cuda_backend_bf16_only(const struct gpt_backend *be, const void *ptr,
                                          size_t bytes)
{
    return cu_shd_is_owned((struct gpt_cuda_backend *)cu_const(be), ptr, bytes);
}
