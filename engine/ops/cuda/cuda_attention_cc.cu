/*
 * cuda_attention_cc: the fallback flash attention kernels on CUDA cores
 * (FlashAttention-2 style, fp32 arithmetic), for what the tensor-core
 * kernels (cuda_attention.cu, which launches these through
 * cuk_flash_cc_forward and cuk_flash_cc_backward) do not take: fp32 mode,
 * head sizes other than 32, 64, 96 and 128, unaligned pointers. Nothing
 * of size T x T is materialised: the forward streams key/value tiles
 * through shared memory with an online softmax and keeps only each query
 * row's logsumexp; the backward recomputes the probabilities tile by tile
 * and takes the rows' D = dout . out from the output itself. Tiling is
 * planned on the host (gpt_cuda_plan_attention in cuda_plan.c).
 *
 * Layout of one block: GPT_CUDA_FLASH_WARPS warps, each owning
 * GPT_CUDA_FLASH_ROWS rows of one (b, h) pair, so a block owns BR rows.
 * The other side streams through shared memory BC = 32 rows at a time,
 * one row per lane: a lane computes whole dot products for "its" inner
 * row (float4 reads, row stride padded so lanes hit distinct banks), and
 * the weighted sums over the inner rows are accumulated with the weights
 * broadcast by shuffles while each lane owns head dimensions lane, lane +
 * 32, ... (at most GPT_CUDA_FLASH_MAX_HS / 32 of them).
 *
 *   forward   blocks over (query tile, b*h): out, lse
 *   D         one warp per (b, h, i): D_i = dout_i . out_i
 *   dq        blocks over (query tile, b*h), keys streamed: dq
 *   dk, dv    blocks over (key tile, b*h), queries streamed: dk, dv
 *
 * Two backward kernels instead of atomics keep the result deterministic
 * (each output element is written once, by one thread, in a fixed order).
 * Inputs q, k, v are fp32 or bf16 (template BF; the backend passes its bf16
 * shadow of qkv in bf16 mode); all arithmetic and accumulation is fp32 and
 * the outputs are fp32, with an optional bf16 copy written alongside.
 * Tiles wholly above the diagonal are skipped; inside a tile the mask is
 * j <= i (and rows past T are zero-padded, never written). The saved
 * state (the natural logsumexp) is the tensor-core kernels', so either
 * backward can follow either forward.
 */
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "cuda_impl.h"
#include "cuda_flash_tc.cuh" /* FA_WARP, FA_FULL, fa_smem_optin */
#include "gpt_bf16.h"

#define FA_THREADS (GPT_CUDA_FLASH_WARPS * FA_WARP)
#define FA_R       GPT_CUDA_FLASH_ROWS
#define FA_BR      GPT_CUDA_FLASH_BR
#define FA_BC      GPT_CUDA_FLASH_BC
#define FA_DPL     (GPT_CUDA_FLASH_MAX_HS / FA_WARP) /* head dims per lane */

static_assert(FA_BC == FA_WARP, "one inner row per lane");

__device__ __forceinline__ float fa_warp_sum(float v)
{
#pragma unroll
    for (int o = FA_WARP / 2; o > 0; o /= 2)
        v += __shfl_xor_sync(FA_FULL, v, o);
    return v;
}

__device__ __forceinline__ float fa_warp_max(float v)
{
#pragma unroll
    for (int o = FA_WARP / 2; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(FA_FULL, v, o));
    return v;
}

template <bool BF> __device__ __forceinline__ float fa_ld(const void *base, size_t i)
{
    if (BF)
        return gpt_bf16_to_float(((const uint16_t *)base)[i]);
    return ((const float *)base)[i];
}

/* Rows t0 .. t0+nrows-1 (zero past T) of a matrix whose element (t, d) is
 * src[off + t * stride + d], columns 0..hs-1, into sm[r * ld + d]. The
 * padding columns hs..ld-1 are never read. */
template <bool BF>
__device__ __forceinline__ void fa_load(float *sm, int ld, const void *src, size_t off,
                                        size_t stride, int t0, int nrows, int T, int hs)
{
    for (int idx = threadIdx.x; idx < nrows * hs; idx += blockDim.x) {
        int r = idx / hs, d = idx - r * hs, t = t0 + r;
        sm[r * ld + d] = t < T ? fa_ld<BF>(src, off + (size_t)t * stride + d) : 0.0f;
    }
}

__device__ __forceinline__ float fa_dot4(float4 a, float4 b)
{
    return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

/* ---- forward ------------------------------------------------------------ */

template <bool BF>
__global__ void __launch_bounds__(FA_THREADS)
    flash_forward_kernel(float *out, uint16_t *out_bf, float *lse, const void *qkv, int T, int C,
                         int NH, int hs, int ld, float scale)
{
    extern __shared__ float4 fa_smem[];
    float *sq = (float *)fa_smem, *sk = sq + FA_BR * ld, *sv = sk + FA_BC * ld;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, q0 = blockIdx.x * FA_BR;
    const int warp = threadIdx.x / FA_WARP, lane = threadIdx.x % FA_WARP, hs4 = hs / 4;
    const size_t ld3 = 3 * (size_t)C, qoff = (size_t)b * T * ld3 + (size_t)h * hs;
    fa_load<BF>(sq, ld, qkv, qoff, ld3, q0, FA_BR, T, hs);

    float m[FA_R], l[FA_R], o[FA_R][FA_DPL];
#pragma unroll
    for (int r = 0; r < FA_R; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int k = 0; k < FA_DPL; k++)
            o[r][k] = 0.0f;
    }
    /* Causal tile skipping: keys past the block's last query never enter. */
    const int qlast = q0 + FA_BR < T ? q0 + FA_BR : T;
    const int nkt = (qlast + FA_BC - 1) / FA_BC;
    for (int kt = 0; kt < nkt; kt++) {
        const int k0 = kt * FA_BC, j = k0 + lane;
        __syncthreads(); /* the previous tile is consumed */
        fa_load<BF>(sk, ld, qkv, qoff + C, ld3, k0, FA_BC, T, hs);
        fa_load<BF>(sv, ld, qkv, qoff + 2 * (size_t)C, ld3, k0, FA_BC, T, hs);
        __syncthreads();
        float s[FA_R];
#pragma unroll
        for (int r = 0; r < FA_R; r++)
            s[r] = 0.0f;
        const float4 *kr = (const float4 *)(sk + lane * ld);
        for (int d4 = 0; d4 < hs4; d4++) {
            float4 kv = kr[d4];
#pragma unroll
            for (int r = 0; r < FA_R; r++)
                s[r] += fa_dot4(((const float4 *)(sq + (warp * FA_R + r) * ld))[d4], kv);
        }
        float p[FA_R];
#pragma unroll
        for (int r = 0; r < FA_R; r++) {
            const int i = q0 + warp * FA_R + r;
            float x = (j <= i && j < T) ? s[r] * scale : -INFINITY;
            float mnew = fmaxf(m[r], fa_warp_max(x));
            float alpha = 1.0f, pr = 0.0f;
            if (mnew != -INFINITY) {
                alpha = expf(m[r] - mnew); /* 0 while m was -inf */
                pr = x == -INFINITY ? 0.0f : expf(x - mnew);
            }
            l[r] = l[r] * alpha + fa_warp_sum(pr);
            m[r] = mnew;
#pragma unroll
            for (int k = 0; k < FA_DPL; k++)
                o[r][k] *= alpha;
            p[r] = pr;
        }
        for (int jj = 0; jj < FA_BC; jj++) {
            float v[FA_DPL];
#pragma unroll
            for (int k = 0; k < FA_DPL; k++) {
                int d = lane + k * FA_WARP;
                v[k] = d < hs ? sv[jj * ld + d] : 0.0f;
            }
#pragma unroll
            for (int r = 0; r < FA_R; r++) {
                float pj = __shfl_sync(FA_FULL, p[r], jj);
#pragma unroll
                for (int k = 0; k < FA_DPL; k++)
                    o[r][k] += pj * v[k];
            }
        }
    }
#pragma unroll
    for (int r = 0; r < FA_R; r++) {
        const int i = q0 + warp * FA_R + r;
        if (i >= T)
            continue;
        float inv = 1.0f / l[r];
        size_t row = ((size_t)b * T + i) * C + (size_t)h * hs;
#pragma unroll
        for (int k = 0; k < FA_DPL; k++) {
            int d = lane + k * FA_WARP;
            if (d < hs) {
                float y = o[r][k] * inv;
                if (out) /* NULL: bf16 only */
                    out[row + d] = y;
                if (out_bf)
                    out_bf[row + d] = gpt_bf16_from_float_rne(y);
            }
        }
        if (lane == 0)
            lse[(size_t)bh * T + i] = m[r] + logf(l[r]);
    }
}

/* ---- backward: D_i = dout_i . out_i ---------------------------------------- */

__global__ void flash_d_kernel(float *Dv, const float *dout, const float *out, size_t rows, int T,
                               int C, int NH, int hs)
{
    int lane = threadIdx.x % FA_WARP;
    size_t warps = (size_t)gridDim.x * (blockDim.x / FA_WARP);
    for (size_t r = (size_t)blockIdx.x * (blockDim.x / FA_WARP) + threadIdx.x / FA_WARP; r < rows;
         r += warps) {
        size_t bh = r / (size_t)T, i = r % (size_t)T, b = bh / (size_t)NH, h = bh % (size_t)NH;
        size_t off = (b * T + i) * C + h * hs;
        float acc = 0.0f;
        for (int d = lane; d < hs; d += FA_WARP)
            acc += dout[off + d] * out[off + d];
        acc = fa_warp_sum(acc);
        if (lane == 0)
            Dv[r] = acc;
    }
}

/* ---- backward: dq (query blocks, keys streamed) ------------------------------ */

template <bool BF>
__global__ void __launch_bounds__(FA_THREADS)
    flash_dq_kernel(float *dqkv, uint16_t *dqkv_bf, const float *dout, const void *qkv,
                    const float *lse, const float *Dv, int T, int C, int NH, int hs, int ld,
                    float scale)
{
    extern __shared__ float4 fa_smem[];
    float *sq = (float *)fa_smem, *sdo = sq + FA_BR * ld, *sk = sdo + FA_BR * ld;
    float *sv = sk + FA_BC * ld;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, q0 = blockIdx.x * FA_BR;
    const int warp = threadIdx.x / FA_WARP, lane = threadIdx.x % FA_WARP, hs4 = hs / 4;
    const size_t ld3 = 3 * (size_t)C, qoff = (size_t)b * T * ld3 + (size_t)h * hs;
    fa_load<BF>(sq, ld, qkv, qoff, ld3, q0, FA_BR, T, hs);
    fa_load<false>(sdo, ld, dout, (size_t)b * T * C + (size_t)h * hs, C, q0, FA_BR, T, hs);

    float lr[FA_R], Dr[FA_R], dq[FA_R][FA_DPL];
#pragma unroll
    for (int r = 0; r < FA_R; r++) {
        const int i = q0 + warp * FA_R + r;
        lr[r] = i < T ? lse[(size_t)bh * T + i] : 0.0f;
        Dr[r] = i < T ? Dv[(size_t)bh * T + i] : 0.0f;
#pragma unroll
        for (int k = 0; k < FA_DPL; k++)
            dq[r][k] = 0.0f;
    }
    const int qlast = q0 + FA_BR < T ? q0 + FA_BR : T;
    const int nkt = (qlast + FA_BC - 1) / FA_BC;
    for (int kt = 0; kt < nkt; kt++) {
        const int k0 = kt * FA_BC, j = k0 + lane;
        __syncthreads();
        fa_load<BF>(sk, ld, qkv, qoff + C, ld3, k0, FA_BC, T, hs);
        fa_load<BF>(sv, ld, qkv, qoff + 2 * (size_t)C, ld3, k0, FA_BC, T, hs);
        __syncthreads();
        float s[FA_R], dp[FA_R];
#pragma unroll
        for (int r = 0; r < FA_R; r++)
            s[r] = dp[r] = 0.0f;
        const float4 *kr = (const float4 *)(sk + lane * ld), *vr = (const float4 *)(sv + lane * ld);
        for (int d4 = 0; d4 < hs4; d4++) {
            float4 kv = kr[d4], vv = vr[d4];
#pragma unroll
            for (int r = 0; r < FA_R; r++) {
                s[r] += fa_dot4(((const float4 *)(sq + (warp * FA_R + r) * ld))[d4], kv);
                dp[r] += fa_dot4(((const float4 *)(sdo + (warp * FA_R + r) * ld))[d4], vv);
            }
        }
        float ds[FA_R];
#pragma unroll
        for (int r = 0; r < FA_R; r++) {
            const int i = q0 + warp * FA_R + r;
            float p = (j <= i && j < T && i < T) ? expf(s[r] * scale - lr[r]) : 0.0f;
            ds[r] = p * (dp[r] - Dr[r]);
        }
        for (int jj = 0; jj < FA_BC; jj++) {
            float kv[FA_DPL];
#pragma unroll
            for (int k = 0; k < FA_DPL; k++) {
                int d = lane + k * FA_WARP;
                kv[k] = d < hs ? sk[jj * ld + d] : 0.0f;
            }
#pragma unroll
            for (int r = 0; r < FA_R; r++) {
                float w = __shfl_sync(FA_FULL, ds[r], jj);
#pragma unroll
                for (int k = 0; k < FA_DPL; k++)
                    dq[r][k] += w * kv[k];
            }
        }
    }
#pragma unroll
    for (int r = 0; r < FA_R; r++) {
        const int i = q0 + warp * FA_R + r;
        if (i >= T)
            continue;
        size_t row = ((size_t)b * T + i) * ld3 + (size_t)h * hs;
#pragma unroll
        for (int k = 0; k < FA_DPL; k++) {
            int d = lane + k * FA_WARP;
            if (d < hs) {
                float g = dq[r][k] * scale;
                dqkv[row + d] = g;
                if (dqkv_bf)
                    dqkv_bf[row + d] = gpt_bf16_from_float_rne(g);
            }
        }
    }
}

/* ---- backward: dk, dv (key blocks, queries streamed) -------------------------- */

template <bool BF>
__global__ void __launch_bounds__(FA_THREADS)
    flash_dkv_kernel(float *dqkv, uint16_t *dqkv_bf, const float *dout, const void *qkv,
                     const float *lse, const float *Dv, int T, int C, int NH, int hs, int ld,
                     float scale)
{
    extern __shared__ float4 fa_smem[];
    float *sk = (float *)fa_smem, *sv = sk + FA_BR * ld, *sq = sv + FA_BR * ld;
    float *sdo = sq + FA_BC * ld, *slse = sdo + FA_BC * ld, *sD = slse + FA_BC;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, k0 = blockIdx.x * FA_BR;
    const int warp = threadIdx.x / FA_WARP, lane = threadIdx.x % FA_WARP, hs4 = hs / 4;
    const size_t ld3 = 3 * (size_t)C, qoff = (size_t)b * T * ld3 + (size_t)h * hs;
    const size_t doff = (size_t)b * T * C + (size_t)h * hs;
    fa_load<BF>(sk, ld, qkv, qoff + C, ld3, k0, FA_BR, T, hs);
    fa_load<BF>(sv, ld, qkv, qoff + 2 * (size_t)C, ld3, k0, FA_BR, T, hs);

    float dk[FA_R][FA_DPL], dv[FA_R][FA_DPL];
#pragma unroll
    for (int r = 0; r < FA_R; r++)
#pragma unroll
        for (int k = 0; k < FA_DPL; k++)
            dk[r][k] = dv[r][k] = 0.0f;
    /* Causal tile skipping: queries before the block's first key never
     * attend to it. */
    const int first = k0 / FA_BC, end = (T + FA_BC - 1) / FA_BC;
    for (int qt = first; qt < end; qt++) {
        const int q0 = qt * FA_BC, i = q0 + lane;
        __syncthreads();
        fa_load<BF>(sq, ld, qkv, qoff, ld3, q0, FA_BC, T, hs);
        fa_load<false>(sdo, ld, dout, doff, C, q0, FA_BC, T, hs);
        if (threadIdx.x < FA_BC) {
            int t = q0 + threadIdx.x;
            slse[threadIdx.x] = t < T ? lse[(size_t)bh * T + t] : 0.0f;
            sD[threadIdx.x] = t < T ? Dv[(size_t)bh * T + t] : 0.0f;
        }
        __syncthreads();
        float s[FA_R], dp[FA_R];
#pragma unroll
        for (int r = 0; r < FA_R; r++)
            s[r] = dp[r] = 0.0f;
        const float4 *qr = (const float4 *)(sq + lane * ld),
                     *dr = (const float4 *)(sdo + lane * ld);
        for (int d4 = 0; d4 < hs4; d4++) {
            float4 qv = qr[d4], dov = dr[d4];
#pragma unroll
            for (int r = 0; r < FA_R; r++) {
                s[r] += fa_dot4(((const float4 *)(sk + (warp * FA_R + r) * ld))[d4], qv);
                dp[r] += fa_dot4(((const float4 *)(sv + (warp * FA_R + r) * ld))[d4], dov);
            }
        }
        float p[FA_R], ds[FA_R];
        const float li = slse[lane], Di = sD[lane];
#pragma unroll
        for (int r = 0; r < FA_R; r++) {
            const int j = k0 + warp * FA_R + r;
            p[r] = (j <= i && i < T && j < T) ? expf(s[r] * scale - li) : 0.0f;
            ds[r] = p[r] * (dp[r] - Di);
        }
        for (int jj = 0; jj < FA_BC; jj++) {
            float qv[FA_DPL], dov[FA_DPL];
#pragma unroll
            for (int k = 0; k < FA_DPL; k++) {
                int d = lane + k * FA_WARP;
                qv[k] = d < hs ? sq[jj * ld + d] : 0.0f;
                dov[k] = d < hs ? sdo[jj * ld + d] : 0.0f;
            }
#pragma unroll
            for (int r = 0; r < FA_R; r++) {
                float pj = __shfl_sync(FA_FULL, p[r], jj);
                float dsj = __shfl_sync(FA_FULL, ds[r], jj);
#pragma unroll
                for (int k = 0; k < FA_DPL; k++) {
                    dv[r][k] += pj * dov[k];
                    dk[r][k] += dsj * qv[k];
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < FA_R; r++) {
        const int j = k0 + warp * FA_R + r;
        if (j >= T)
            continue;
        size_t row = ((size_t)b * T + j) * ld3 + (size_t)h * hs;
#pragma unroll
        for (int k = 0; k < FA_DPL; k++) {
            int d = lane + k * FA_WARP;
            if (d < hs) {
                float gk = dk[r][k] * scale, gv = dv[r][k];
                dqkv[row + C + d] = gk;
                dqkv[row + 2 * (size_t)C + d] = gv;
                if (dqkv_bf) {
                    dqkv_bf[row + C + d] = gpt_bf16_from_float_rne(gk);
                    dqkv_bf[row + 2 * (size_t)C + d] = gpt_bf16_from_float_rne(gv);
                }
            }
        }
    }
}

cudaError_t cuk_flash_cc_forward(cudaStream_t s, const struct gpt_cuda_attn_plan *p, float *out,
                                 uint16_t *out_bf, float *lse, const float *qkv,
                                 const uint16_t *qkv_bf, size_t T, size_t C, size_t NH)
{
    dim3 grid(p->q_tiles, p->bh);
    float scale = 1.0f / sqrtf((float)p->hs);
    int t = (int)T, c = (int)C, nh = (int)NH, hs = (int)p->hs, ld = (int)p->ld;
    cudaError_t e;
    if (qkv_bf) {
        if ((e = fa_smem_optin(flash_forward_kernel<true>, p->smem_fwd)) != cudaSuccess)
            return e;
        flash_forward_kernel<true><<<grid, FA_THREADS, p->smem_fwd, s>>>(out, out_bf, lse, qkv_bf,
                                                                         t, c, nh, hs, ld, scale);
    } else {
        if ((e = fa_smem_optin(flash_forward_kernel<false>, p->smem_fwd)) != cudaSuccess)
            return e;
        flash_forward_kernel<false>
            <<<grid, FA_THREADS, p->smem_fwd, s>>>(out, out_bf, lse, qkv, t, c, nh, hs, ld, scale);
    }
    return cudaSuccess;
}

cudaError_t cuk_flash_cc_backward(cudaStream_t s, const struct gpt_cuda_attn_plan *p, float *dqkv,
                                  uint16_t *dqkv_bf, float *Dv, const float *dout, const float *out,
                                  const float *qkv, const uint16_t *qkv_bf, const float *lse,
                                  size_t T, size_t C, size_t NH)
{
    int t = (int)T, c = (int)C, nh = (int)NH, hs = (int)p->hs, ld = (int)p->ld;
    float scale = 1.0f / sqrtf((float)p->hs);
    flash_d_kernel<<<gpt_cuda_plan_row_grid(p->lse_floats, GPT_CUDA_FLASH_WARPS), FA_THREADS, 0,
                     s>>>(Dv, dout, out, p->lse_floats, t, c, nh, hs);
    dim3 gq(p->q_tiles, p->bh), gk(p->k_tiles, p->bh);
    cudaError_t e;
    if (qkv_bf) {
        if ((e = fa_smem_optin(flash_dq_kernel<true>, p->smem_dq)) != cudaSuccess ||
            (e = fa_smem_optin(flash_dkv_kernel<true>, p->smem_dkv)) != cudaSuccess)
            return e;
        flash_dq_kernel<true><<<gq, FA_THREADS, p->smem_dq, s>>>(dqkv, dqkv_bf, dout, qkv_bf, lse,
                                                                 Dv, t, c, nh, hs, ld, scale);
        flash_dkv_kernel<true><<<gk, FA_THREADS, p->smem_dkv, s>>>(dqkv, dqkv_bf, dout, qkv_bf, lse,
                                                                   Dv, t, c, nh, hs, ld, scale);
    } else {
        if ((e = fa_smem_optin(flash_dq_kernel<false>, p->smem_dq)) != cudaSuccess ||
            (e = fa_smem_optin(flash_dkv_kernel<false>, p->smem_dkv)) != cudaSuccess)
            return e;
        flash_dq_kernel<false><<<gq, FA_THREADS, p->smem_dq, s>>>(dqkv, dqkv_bf, dout, qkv, lse, Dv,
                                                                  t, c, nh, hs, ld, scale);
        flash_dkv_kernel<false><<<gk, FA_THREADS, p->smem_dkv, s>>>(dqkv, dqkv_bf, dout, qkv, lse,
                                                                    Dv, t, c, nh, hs, ld, scale);
    }
    return cudaSuccess;
}
