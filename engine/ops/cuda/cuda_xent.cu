/*
 * cuda_xent: the CUDA backend's fused classifier, softmax + cross-entropy
 * (cuk_softmax_xent): one block per row gives the row's loss and,
 * optionally, its dlogits (fp32 and/or bf16, in place or not), from fp32
 * or bf16 logits; a 16-byte bf16 kernel for the training case and the
 * row staged in shared memory where it fits (gpt_cuda_plan_xent_stage),
 * so the logits leave DRAM once. Deterministic: fixed block trees.
 * Launchers enqueue on the given stream and never synchronise.
 */
#include <math.h>
#include <stdint.h>

#include "cuda_kernels.cuh"
#include "flash_tc.h" /* GPT_FLASH_LOG2E */
#include "gpt_bf16.h"

#define XENT_THREADS 512
#define XENT_LOADS   4 /* 16-byte loads in flight per thread, softmax_xent_bf16_kernel */

/* ---- fused softmax + cross-entropy ---------------------------------------- */

/* Block-wide online-softmax reduction; every thread gets the result. */
__device__ void block_online(float &m, float &s)
{
    __shared__ float shm[XENT_THREADS / WARP], shs[XENT_THREADS / WARP];
    warp_online(m, s);
    int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, nw = blockDim.x / WARP;
    if (lane == 0) {
        shm[w] = m;
        shs[w] = s;
    }
    __syncthreads();
    m = lane < nw ? shm[lane] : -INFINITY;
    s = lane < nw ? shs[lane] : 0.0f;
    warp_online(m, s);
}

/* Logit j of a row held as fp32 (lf) or bf16 (lb, when lf is NULL). */
__device__ __forceinline__ float xent_in(const float *lf, const uint16_t *lb, size_t j)
{
    return lf ? lf[j] : gpt_bf16_to_float(lb[j]);
}

/* One block per row n: online max/sum over the first V columns (or, with
 * have_loss, the row's log-sum-exp recovered from the loss a previous
 * call wrote: lse = loss + z_t, no reduction pass), the loss from the
 * target logit (read before any write), then optionally dlogits, written
 * in place over all Vp columns as fp32 (of) and/or bf16 (ob). The logits
 * are read from lf (fp32) or, when it is NULL, from lb (bf16); of may be
 * lf and ob may be lb (each element is read before it is written, by the
 * same thread). Ignored rows (target < 0) get loss 0 and a zero row.
 * STAGE (write without have_loss; dynamic shared memory of V elements of
 * the input's type, gpt_cuda_plan_xent_stage): the reduction pass keeps
 * the row as read in shared memory and the write pass reads it from
 * there, the same values in the same order, so the logits leave DRAM
 * once. Each thread reads back only the elements it stored. */
template <bool STAGE>
__global__ void softmax_xent_kernel(const float *lf, const uint16_t *lb, float *of, uint16_t *ob,
                                    float *losses, const int *targets, size_t V, size_t Vp,
                                    float dscale, int write, int have_loss)
{
    size_t n = blockIdx.x;
    const float *rf = lf ? lf + n * Vp : NULL;
    const uint16_t *rb = lb ? lb + n * Vp : NULL;
    float *wf = of ? of + n * Vp : NULL;
    uint16_t *wb = ob ? ob + n * Vp : NULL;
    int t = targets[n];
    if (t < 0) {
        if (write)
            for (size_t j = threadIdx.x; j < Vp; j += blockDim.x) {
                if (wf)
                    wf[j] = 0.0f;
                if (wb)
                    wb[j] = 0; /* bf16 +0 */
            }
        if (losses && !have_loss && threadIdx.x == 0)
            losses[n] = 0.0f;
        return;
    }
    float zt = xent_in(rf, rb, (size_t)t);
    float m, s;
    if (have_loss) {
        m = losses[n] + zt; /* log-sum-exp: exp(x - m) sums to 1 */
        s = 1.0f;
        /* Every thread has read zt before any writes the row in place
         * (block-uniform branch: have_loss is an argument). */
        __syncthreads();
    } else {
        extern __shared__ __align__(16) unsigned char xent_row[];
        float *sf = STAGE && rf ? (float *)xent_row : NULL;
        uint16_t *sb = STAGE && !rf ? (uint16_t *)xent_row : NULL;
        m = -INFINITY;
        s = 0.0f;
        for (size_t j = threadIdx.x; j < V; j += blockDim.x) {
            float x;
            if (STAGE && rf) {
                x = rf[j];
                sf[j] = x;
            } else if (STAGE) {
                uint16_t h = rb[j];
                sb[j] = h;
                x = gpt_bf16_to_float(h);
            } else {
                x = xent_in(rf, rb, j);
            }
            if (x > m) {
                s = s * expf(m - x) + 1.0f;
                m = x;
            } else {
                s += expf(x - m);
            }
        }
        block_online(m, s);
        if (losses && threadIdx.x == 0)
            losses[n] = logf(s) - (zt - m);
        if (STAGE) {
            rf = sf;
            rb = sb;
        }
    }
    if (!write)
        return;
    /* Every thread has read what it needs (zt, the reduction) before the
     * __syncthreads above or inside block_online, so the row may now be
     * overwritten. */
    float k = dscale / s;
    for (size_t j = threadIdx.x; j < Vp; j += blockDim.x) {
        float d = 0.0f;
        if (j < V)
            d = expf(xent_in(rf, rb, j) - m) * k - (j == (size_t)t ? dscale : 0.0f);
        if (wf)
            wf[j] = d;
        if (wb)
            wb[j] = gpt_bf16_from_float_rne(d);
    }
}

/* The training case of softmax_xent_kernel, bf16 logits in, bf16
 * dlogits out (in place or not), with 16-byte loads and stores of 8
 * columns and one online-softmax update per 8 (their max first), exp2
 * with the log2(e) scale folded in. The scalar kernel issues ~50
 * instructions per column and reads 2 bytes per load: 5x its memory time
 * on an H200 at GPT-2's vocabulary. This one measured 2x its memory time
 * there, compute-bound (76%): the padding test (column < V) and the
 * target test (column == t) now run only in the one chunk that needs
 * them, and exp2 is MUFU.EX2 alone (cu_exp2_ftz), ~20 instructions per
 * column down to ~12. Needs Vp % 8 == 0 and 16-byte aligned rows
 * (xent_vec_ok). STAGE: as softmax_xent_kernel, the row kept in shared
 * memory between the passes. */
template <bool STAGE>
__global__ void __launch_bounds__(XENT_THREADS)
    softmax_xent_bf16_kernel(const uint16_t *lb, uint16_t *ob, float *losses, const int *targets,
                             size_t V, size_t Vp, float dscale, int write)
{
    const size_t n = blockIdx.x, nq = Vp / 8;
    const uint4 *row = (const uint4 *)(lb + n * Vp);
    uint4 *wrow = ob ? (uint4 *)(ob + n * Vp) : NULL;
    const int t = targets[n];
    if (t < 0) {
        for (size_t q = threadIdx.x; write && wrow && q < nq; q += blockDim.x)
            wrow[q] = make_uint4(0, 0, 0, 0);
        if (losses && threadIdx.x == 0)
            losses[n] = 0.0f;
        return;
    }
    extern __shared__ __align__(16) unsigned char xent_row[];
    uint4 *srow = (uint4 *)xent_row;
    const float zt = gpt_bf16_to_float(lb[n * Vp + (size_t)t]);
    float m = -INFINITY, sum = 0.0f;
    /* A thread's chunks q, q + blockDim.x, ... in that order, XENT_LOADS
     * loads issued before the first is used (one in flight per thread
     * left the H200 at ~55% of its memory rate), the updates in q order
     * as one at a time would make them: the same bits. */
    for (size_t q0 = threadIdx.x; q0 < nq; q0 += XENT_LOADS * (size_t)blockDim.x) {
        uint4 u[XENT_LOADS];
#pragma unroll
        for (int i = 0; i < XENT_LOADS; i++) {
            const size_t q = q0 + i * (size_t)blockDim.x;
            u[i] = q < nq ? row[q] : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int i = 0; i < XENT_LOADS; i++) {
            const size_t q = q0 + i * (size_t)blockDim.x;
            if (q >= nq)
                break;
            if (STAGE)
                srow[q] = u[i];
            float x[8];
            bf16x8_f(x, u[i]);
            if (8 * q + 8 > V) { /* the chunk that holds padding */
#pragma unroll
                for (int k = 0; k < 8; k++)
                    if (8 * q + k >= V)
                        x[k] = -INFINITY;
            }
            float cm = x[0];
#pragma unroll
            for (int k = 1; k < 8; k++)
                cm = fmaxf(cm, x[k]);
            if (cm == -INFINITY)
                continue; /* padding only */
            if (cm > m) {
                sum *= cu_exp2_ftz((m - cm) * GPT_FLASH_LOG2E);
                m = cm;
            }
            const float ml = m * GPT_FLASH_LOG2E;
#pragma unroll
            for (int k = 0; k < 8; k++)
                sum += cu_exp2_ftz(fmaf(x[k], GPT_FLASH_LOG2E, -ml));
        }
    }
    block_online(m, sum);
    if (losses && threadIdx.x == 0)
        losses[n] = logf(sum) - (zt - m);
    if (!write || !wrow)
        return;
    /* Every thread read zt and its chunks before block_online's barrier. */
    const float k = dscale / sum, ml = m * GPT_FLASH_LOG2E;
    for (size_t q = threadIdx.x; q < nq; q += blockDim.x) {
        float x[8], e[8], d[8];
        bf16x8_f(x, STAGE ? srow[q] : row[q]);
#pragma unroll
        for (int c = 0; c < 8; c++) {
            e[c] = cu_exp2_ftz(fmaf(x[c], GPT_FLASH_LOG2E, -ml));
            d[c] = e[c] * k;
        }
        if (8 * q + 8 > V || (size_t)t - 8 * q < 8) { /* padding, or the target */
#pragma unroll
            for (int c = 0; c < 8; c++) {
                const size_t j = 8 * q + c;
                d[c] = j >= V ? 0.0f : j == (size_t)t ? fmaf(e[c], k, -dscale) : d[c];
            }
        }
        wrow[q] = make_uint4(
            gpt_bf16x2_from_floats_rne(d[0], d[1]), gpt_bf16x2_from_floats_rne(d[2], d[3]),
            gpt_bf16x2_from_floats_rne(d[4], d[5]), gpt_bf16x2_from_floats_rne(d[6], d[7]));
    }
}

static bool xent_vec_ok(const void *a, const void *b, size_t Vp)
{
    return Vp % 8 == 0 && (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0;
}

cudaError_t cuk_softmax_xent(cudaStream_t s, const float *logits, const uint16_t *logits_bf,
                             float *dlogits, uint16_t *dlogits_bf, float *losses,
                             const int *targets, size_t N, size_t V, size_t Vp, float dscale,
                             int write_dlogits, int have_loss, size_t stage_bytes)
{
    /* N rows, one block each; grids beyond 2^31-1 blocks are not a concern
     * (N is B*T). */
    const uint16_t *lb = logits ? NULL : logits_bf;
    float *of = write_dlogits ? dlogits : NULL;
    uint16_t *ob = write_dlogits ? dlogits_bf : NULL;
    if (!logits && !of && !have_loss && xent_vec_ok(lb, ob, Vp)) {
        if (stage_bytes > 0 && write_dlogits) {
            cudaError_t e =
                cudaFuncSetAttribute(softmax_xent_bf16_kernel<true>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)stage_bytes);
            if (e != cudaSuccess)
                return e;
            softmax_xent_bf16_kernel<true><<<(unsigned)N, XENT_THREADS, stage_bytes, s>>>(
                lb, ob, losses, targets, V, Vp, dscale, write_dlogits);
        } else {
            softmax_xent_bf16_kernel<false><<<(unsigned)N, XENT_THREADS, 0, s>>>(
                lb, ob, losses, targets, V, Vp, dscale, write_dlogits);
        }
        return cudaSuccess;
    }
    if (stage_bytes > 0 && write_dlogits && !have_loss) {
        cudaError_t e =
            cudaFuncSetAttribute(softmax_xent_kernel<true>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)stage_bytes);
        if (e != cudaSuccess)
            return e;
        softmax_xent_kernel<true><<<(unsigned)N, XENT_THREADS, stage_bytes, s>>>(
            logits, lb, of, ob, losses, targets, V, Vp, dscale, write_dlogits, 0);
        return cudaSuccess;
    }
    softmax_xent_kernel<false><<<(unsigned)N, XENT_THREADS, 0, s>>>(
        logits, lb, of, ob, losses, targets, V, Vp, dscale, write_dlogits, have_loss);
    return cudaSuccess;
}
