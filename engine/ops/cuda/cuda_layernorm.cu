/*
 * cuda_layernorm: the CUDA backend's LayerNorm kernels: the forward (alone
 * or after the residual add), the single-pass backward with its blocks'
 * partial sums, and the two-pass fallback with the column sums that the
 * products' bias gradient uses too (cuk_colsum_add). One warp per row, a
 * 16-byte path for C a multiple of 8, rows held in registers where they
 * fit (gpt_cuda_plan_ln_chunks). Every sum has a fixed order that depends
 * only on the shapes and the plan: deterministic. Launchers enqueue on the
 * given stream and never synchronise.
 */
#include <math.h>
#include <stdint.h>

#include "cuda_kernels.cuh"
#include "gpt_bf16.h"

#define COLSUM_ROWS_Y   8 /* threadIdx.y extent of the column-sum kernels */
#define LNB_THREADS     (GPT_CUDA_LNB_WARPS * WARP) /* the fused LayerNorm backward's block */
#define LNB_SUM_COLS    8   /* columns of a layernorm_backward_sum_kernel block */
#define LNB_SUM_Y       128 /* its threadIdx.y extent */
#define LNB_SUM_GROUP   16  /* y sums each thread of its second stage adds */
#define LNB_SUM_THREADS (LNB_SUM_Y * LNB_SUM_COLS)

/* ---- LayerNorm --------------------------------------------------------- */

/* A row of the 16-byte LayerNorm paths, chunk by chunk: lane l's chunk k
 * is columns [8 l + 256 k, + 8) of the row at x0, and ln_for_chunks
 * visits a lane's chunks in k order, so both sources give the same sums
 * in the same order (the same bits).
 *  - ln_stream: reads the chunk (fp32, or the bf16 copy where bf is
 *    given) each time it is asked: any C, but a lane waits on each
 *    chunk's load in turn;
 *  - ln_held<N>: the N chunks of a bf16 row loaded into registers at
 *    once, every load in flight before the first is used, then handed out
 *    from there (C <= 256 N: gpt_cuda_plan_ln_chunks). */
struct ln_stream {
    static constexpr int NCH = 0;
    const float *f;
    const uint16_t *bf;
    size_t x0;
    __device__ __forceinline__ void get(float v[8], int, size_t c) const
    {
        ld8_f(v, f, bf, x0 + c);
    }
};

template <int N> struct ln_held {
    static constexpr int NCH = N;
    uint4 u[N];
    __device__ __forceinline__ ln_held(const uint16_t *bf, size_t x0, size_t C, unsigned lane)
    {
#pragma unroll
        for (int k = 0; k < N; k++) {
            const size_t c = 8 * (size_t)lane + 8 * WARP * (size_t)k;
            u[k] = c < C ? *(const uint4 *)(bf + x0 + c) : make_uint4(0, 0, 0, 0);
        }
    }
    __device__ __forceinline__ void get(float v[8], int k, size_t) const
    {
        bf16x8_f(v, u[k]);
    }
};

/* f(k, c) for each of a lane's chunks k of a C-column row (c its first
 * column), in k order: NCH of them unrolled (held rows), else while c < C. */
template <int NCH, typename F>
__device__ __forceinline__ void ln_for_chunks(size_t C, unsigned lane, F f)
{
    if constexpr (NCH > 0) {
#pragma unroll
        for (int k = 0; k < NCH; k++) {
            const size_t c = 8 * (size_t)lane + 8 * WARP * (size_t)k;
            if (c < C)
                f(k, c);
        }
    } else {
        int k = 0;
#pragma unroll 4
        for (size_t c = 8 * (size_t)lane; c < C; c += 8 * WARP)
            f(k++, c);
    }
}

/* LayerNorm of the row x (a source above) into out (fp32, may be NULL)
 * and out_bf (may be NULL) at x0: the mean, then the variance in a second
 * pass, like the CPU backend; returns the mean and 1 / std. */
template <typename S>
__device__ __forceinline__ void ln_forward_row(const S &x, float *out, uint16_t *out_bf, size_t x0,
                                               const float *weight, const float *bias, size_t C,
                                               unsigned lane, float *ret_mu, float *ret_rs)
{
    float sum = 0.0f, var = 0.0f;
    ln_for_chunks<S::NCH>(C, lane, [&](int k, size_t c) {
        float v[8];
        x.get(v, k, c);
#pragma unroll
        for (int e = 0; e < 8; e++)
            sum += v[e];
    });
    const float mu = warp_sum(sum) / (float)C;
    ln_for_chunks<S::NCH>(C, lane, [&](int k, size_t c) {
        float v[8];
        x.get(v, k, c);
#pragma unroll
        for (int e = 0; e < 8; e++)
            var += (v[e] - mu) * (v[e] - mu);
    });
    const float rs = 1.0f / sqrtf(warp_sum(var) / (float)C + 1e-5f);
    ln_for_chunks<S::NCH>(C, lane, [&](int k, size_t c) {
        float v[8], g[8], bb[8], y[8];
        x.get(v, k, c);
        ld8_f(g, weight, NULL, c);
        ld8_f(bb, bias, NULL, c);
#pragma unroll
        for (int e = 0; e < 8; e++)
            y[e] = (v[e] - mu) * rs * g[e] + bb[e];
        st8_f(out, out_bf, x0 + c, y);
    });
    *ret_mu = mu;
    *ret_rs = rs;
}

/* One warp per row; two passes for the variance, like the CPU backend.
 * out may be NULL (a bf16-only output: out_bf alone is written); so may
 * residual_layernorm_forward_kernel's. The input comes from inp, or from
 * inp_bf when that is non-NULL (the bf16-only residual stream); the
 * statistics are fp32 either way. VEC (C a multiple of 8, every pointer
 * 16-byte aligned: lnb_vec_ok): lane l owns columns [8 l + 256 k, + 8),
 * one 16-byte load per array and chunk, and the 16-byte bf16 store; the
 * scalar loop's 2-byte loads and stores of the bf16 residual stream ran
 * at ~1/5 of the memory rate on the first H200 run. NCH > 0 (VEC, inp_bf
 * given, C <= 256 NCH): the row held in registers (ln_held), else
 * streamed, its second and third reads L1 hits. */
template <bool VEC, int NCH = 0>
__global__ void layernorm_forward_kernel(float *out, uint16_t *out_bf, float *mean, float *rstd,
                                         const float *inp, const uint16_t *inp_bf,
                                         const float *weight, const float *bias, size_t N, size_t C)
{
    static_assert(VEC || NCH == 0, "held rows are 16-byte rows");
    const unsigned lane = threadIdx.x % WARP;
    size_t warps = (size_t)gridDim.x * (blockDim.x / WARP);
    for (size_t r = (size_t)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP; r < N;
         r += warps) {
        size_t x0 = r * C;
        float *o = out ? out + r * C : NULL;
        float sum = 0.0f, var = 0.0f, mu, rs;
        if constexpr (NCH > 0) {
            const ln_held<NCH> x(inp_bf, x0, C, lane);
            ln_forward_row(x, out, out_bf, x0, weight, bias, C, lane, &mu, &rs);
        } else if (VEC) {
            ln_forward_row(ln_stream{inp, inp_bf, x0}, out, out_bf, x0, weight, bias, C, lane, &mu,
                           &rs);
        } else {
            for (size_t c = lane; c < C; c += WARP)
                sum += ld_f(inp, inp_bf, x0 + c);
            mu = warp_sum(sum) / (float)C;
            for (size_t c = lane; c < C; c += WARP) {
                float d = ld_f(inp, inp_bf, x0 + c) - mu;
                var += d * d;
            }
            rs = 1.0f / sqrtf(warp_sum(var) / (float)C + 1e-5f);
            for (size_t c = lane; c < C; c += WARP) {
                float y = (ld_f(inp, inp_bf, x0 + c) - mu) * rs * weight[c] + bias[c];
                if (o)
                    o[c] = y;
                if (out_bf)
                    out_bf[r * C + c] = gpt_bf16_from_float_rne(y);
            }
        }
        if (lane == 0) {
            mean[r] = mu;
            rstd[r] = rs;
        }
    }
}

/* res = a + b, then LayerNorm of res: one warp per row, like
 * layernorm_forward_kernel; the row is written by its own lanes and read
 * back by the same lanes (lane l owns columns l, l + 32, ...), so no
 * barrier is needed. res may alias a or b (each element read once before
 * it is written). */
__global__ void residual_layernorm_forward_kernel(float *res, float *out, uint16_t *out_bf,
                                                  float *mean, float *rstd, const float *a,
                                                  const float *b, const float *weight,
                                                  const float *bias, size_t N, size_t C)
{
    int lane = threadIdx.x % WARP;
    size_t warps = (size_t)gridDim.x * (blockDim.x / WARP);
    for (size_t r = (size_t)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP; r < N;
         r += warps) {
        float *x = res + r * C;
        float sum = 0.0f;
        for (size_t c = lane; c < C; c += WARP) {
            float v = a[r * C + c] + b[r * C + c];
            x[c] = v;
            sum += v;
        }
        float mu = warp_sum(sum) / (float)C;
        float var = 0.0f;
        for (size_t c = lane; c < C; c += WARP) {
            float d = x[c] - mu;
            var += d * d;
        }
        float rs = 1.0f / sqrtf(warp_sum(var) / (float)C + 1e-5f);
        float *o = out ? out + r * C : NULL;
        for (size_t c = lane; c < C; c += WARP) {
            float y = (x[c] - mu) * rs * weight[c] + bias[c];
            if (o)
                o[c] = y;
            if (out_bf)
                out_bf[r * C + c] = gpt_bf16_from_float_rne(y);
        }
        if (lane == 0) {
            mean[r] = mu;
            rstd[r] = rs;
        }
    }
}

void cuk_residual_layernorm_forward(cudaStream_t s, float *res, float *out, uint16_t *out_bf,
                                    float *mean, float *rstd, const float *a, const float *b,
                                    const float *weight, const float *bias, size_t N, size_t C)
{
    residual_layernorm_forward_kernel<<<gpt_cuda_plan_row_grid(N, ROW_WARPS), ROW_WARPS * WARP, 0,
                                        s>>>(res, out, out_bf, mean, rstd, a, b, weight, bias, N,
                                             C);
}

typedef void (*ln_fwd_kernel_t)(float *, uint16_t *, float *, float *, const float *,
                                const uint16_t *, const float *, const float *, size_t, size_t);

void cuk_layernorm_forward(cudaStream_t s, float *out, uint16_t *out_bf, float *mean, float *rstd,
                           const float *inp, const uint16_t *inp_bf, const float *weight,
                           const float *bias, size_t N, size_t C)
{
    static_assert(GPT_CUDA_LN_HELD_CHUNKS == 4, "one kernel per held chunk count");
    static const ln_fwd_kernel_t held[] = {
        layernorm_forward_kernel<true, 0>, layernorm_forward_kernel<true, 1>,
        layernorm_forward_kernel<true, 2>, layernorm_forward_kernel<true, 3>,
        layernorm_forward_kernel<true, 4>};
    const void *ptrs[] = {out, out_bf, inp, inp_bf, weight, bias};
    ln_fwd_kernel_t k = layernorm_forward_kernel<false>;
    if (lnb_vec_ok(ptrs, 6, C))
        k = held[inp_bf ? gpt_cuda_plan_ln_chunks(C) : 0];
    k<<<gpt_cuda_plan_row_grid(N, ROW_WARPS), ROW_WARPS * WARP, 0, s>>>(
        out, out_bf, mean, rstd, inp, inp_bf, weight, bias, N, C);
}

/* dinp += for each row (one warp per row); the fallback of the fused
 * kernel below for rows too wide for its shared memory (fp32 dout only:
 * its column sums read dout again as fp32). */
__global__ void layernorm_backward_dinp_kernel(float *dinp, uint16_t *dinp_bf, const float *dout,
                                               const float *inp, const float *weight,
                                               const float *mean, const float *rstd, size_t N,
                                               size_t C)
{
    int lane = threadIdx.x % WARP;
    size_t warps = (size_t)gridDim.x * (blockDim.x / WARP);
    for (size_t r = (size_t)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP; r < N;
         r += warps) {
        const float *x = inp + r * C, *d = dout + r * C;
        float mu = mean[r], rs = rstd[r];
        float m1 = 0.0f, m2 = 0.0f;
        for (size_t c = lane; c < C; c += WARP) {
            float dn = weight[c] * d[c];
            m1 += dn;
            m2 += dn * (x[c] - mu) * rs;
        }
        m1 = warp_sum(m1) / (float)C;
        m2 = warp_sum(m2) / (float)C;
        float *di = dinp + r * C;
        for (size_t c = lane; c < C; c += WARP) {
            float norm = (x[c] - mu) * rs;
            float v = di[c] + rs * (weight[c] * d[c] - m1 - norm * m2);
            di[c] = v;
            if (dinp_bf)
                dinp_bf[r * C + c] = gpt_bf16_from_float_rne(v);
        }
    }
}

/* Single-pass LayerNorm backward (llm.c-style): one read of dout and inp
 * gives dinp (accumulated, plus its optional bf16 copy) and the parameter
 * gradients. dout and inp come from their bf16 copies where dout_bf and
 * inp_bf are given. With dinp NULL the accumulated gradient is bf16 only:
 * dinp_bf is read, the term added in fp32 and the sum rounded once (the
 * bf16-only residual gradient); else dinp is read and written in fp32 and
 * dinp_bf (optional) gets the sum's copy. Block b owns rows [b * rows_per,
 * min(N, (b + 1) * rows_per)); warp w of it takes rows r0 + w, r0 + w + W,
 * ... in order and adds each row's dweight/dbias terms into its OWN shared
 * arrays (lane l owns columns l, l + 32, ...: no two threads touch one
 * slot, no atomics). Then the block sums its W warps in warp order per
 * column and writes the sums to part_w[b * C + c] and part_b[b * C + c];
 * layernorm_backward_sum_kernel adds the blocks in a fixed order (see
 * there). Every sum has a fixed order that depends only on (N, C) and the
 * plan (gpt_cuda_plan_lnb_blocks): deterministic. Dynamic shared memory:
 * GPT_CUDA_LNB_WARPS * 2 * C floats. */
/* One row of the single-pass backward's 16-byte path: dout d, inp x and
 * the accumulated gradient that acc_of() returns once the row's two sums
 * are taken (sources as for ln_forward_row; the accumulated fp32 dinp, or
 * the bf16-only dinp_bf: a held one is loaded then, not across the first
 * pass, for the registers) give dinp (written where non-NULL, and/or its
 * bf16 copy) and the row's dweight and dbias terms added into this
 * lane's own slots of sw and sb. */
template <typename D, typename X, typename A>
__device__ __forceinline__ void
lnb_row(const D &d, const X &x, A acc_of, float *dinp, uint16_t *dinp_bf, float *sw, float *sb,
        const float *weight, float mu, float rs, size_t x0, size_t C, unsigned lane)
{
    float m1 = 0.0f, m2 = 0.0f;
    ln_for_chunks<X::NCH>(C, lane, [&](int k, size_t c) {
        float dv[8], xv[8], g[8];
        d.get(dv, k, c);
        x.get(xv, k, c);
        ld8_f(g, weight, NULL, c);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float dn = g[e] * dv[e];
            m1 += dn;
            m2 += dn * (xv[e] - mu) * rs;
        }
    });
    m1 = warp_sum(m1) / (float)C;
    m2 = warp_sum(m2) / (float)C;
    const auto acc = acc_of();
    ln_for_chunks<X::NCH>(C, lane, [&](int k, size_t c) {
        float dv[8], xv[8], g[8], av[8];
        d.get(dv, k, c);
        x.get(xv, k, c);
        ld8_f(g, weight, NULL, c);
        acc.get(av, k, c);
        float4 *pw = (float4 *)(sw + c), *pb = (float4 *)(sb + c);
        const float4 w0 = pw[0], w1 = pw[1], b0 = pb[0], b1 = pb[1];
        float aw[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
        float ab[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float norm = (xv[e] - mu) * rs;
            av[e] += rs * (g[e] * dv[e] - m1 - norm * m2);
            aw[e] += dv[e] * norm; /* this lane's own slots */
            ab[e] += dv[e];
        }
        pw[0] = make_float4(aw[0], aw[1], aw[2], aw[3]);
        pw[1] = make_float4(aw[4], aw[5], aw[6], aw[7]);
        pb[0] = make_float4(ab[0], ab[1], ab[2], ab[3]);
        pb[1] = make_float4(ab[4], ab[5], ab[6], ab[7]);
        st8_f(dinp, dinp_bf, x0 + c, av);
    });
}

/* At most 64 registers a thread (the streaming 16-byte path takes 72
 * unbounded, with no spill at 64) so that an SM holds
 * GPT_CUDA_LNB_SM_BLOCKS blocks and GPT-2's 1024 blocks run in one wave
 * (cuda_plan.h). VEC: lane l owns columns [8 l + 256 k, + 8), one 16-byte
 * load per array and chunk (a scalar lane loop waits on ~2 C / 32 loads
 * in a row per row: latency-bound, ~0.4 ms per call at GPT-2's shape
 * whatever the batch). NCH > 0 (VEC, dout_bf and inp_bf given, C <= 256
 * NCH): a row's dout, inp and, when bf16 only, dinp are loaded into
 * registers at its start (ln_held), all in flight at once; else streamed
 * (each chunk's loads waited on in turn, twice). */
template <bool VEC, int NCH = 0>
__global__ void __launch_bounds__(LNB_THREADS, GPT_CUDA_LNB_SM_BLOCKS)
    layernorm_backward_fused_kernel(float *__restrict__ dinp, uint16_t *__restrict__ dinp_bf,
                                    float *__restrict__ part_w, float *__restrict__ part_b,
                                    const float *__restrict__ dout,
                                    const uint16_t *__restrict__ dout_bf,
                                    const float *__restrict__ inp,
                                    const uint16_t *__restrict__ inp_bf,
                                    const float *__restrict__ weight,
                                    const float *__restrict__ mean, const float *__restrict__ rstd,
                                    size_t N, size_t C, size_t rows_per)
{
    static_assert(VEC || NCH == 0, "held rows are 16-byte rows");
    extern __shared__ __align__(16) float lnb_sh[]; /* [warp][0..C) dweight, [warp][C..2C) dbias */
    const unsigned W = blockDim.x / WARP, w = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    float *sw = lnb_sh + (size_t)w * 2 * C, *sb = sw + C;
    for (size_t c = lane; c < C; c += WARP) {
        sw[c] = 0.0f;
        sb[c] = 0.0f;
    }
    __syncwarp(); /* the 16-byte path's lanes own other columns than they zeroed */
    size_t r0 = (size_t)blockIdx.x * rows_per;
    size_t r1 = r0 + rows_per < N ? r0 + rows_per : N;
    for (size_t r = r0 + w; VEC && r < r1; r += W) {
        const size_t x0 = r * C;
        const float mu = mean[r], rs = rstd[r];
        /* The accumulated gradient: fp32 when present, as the scalar loop. */
        const auto acc = [&] {
            return dinp ? ln_stream{dinp, NULL, x0} : ln_stream{NULL, dinp_bf, x0};
        };
        if constexpr (NCH > 0) {
            const ln_held<NCH> d(dout_bf, x0, C, lane), x(inp_bf, x0, C, lane);
            lnb_row(d, x, acc, dinp, dinp_bf, sw, sb, weight, mu, rs, x0, C, lane);
        } else {
            lnb_row(ln_stream{dout, dout_bf, x0}, ln_stream{inp, inp_bf, x0}, acc, dinp, dinp_bf,
                    sw, sb, weight, mu, rs, x0, C, lane);
        }
    }
    for (size_t r = r0 + w; !VEC && r < r1; r += W) {
        size_t x0 = r * C;
        float mu = mean[r], rs = rstd[r];
        float m1 = 0.0f, m2 = 0.0f;
        for (size_t c = lane; c < C; c += WARP) {
            float dn = weight[c] * ld_f(dout, dout_bf, x0 + c);
            m1 += dn;
            m2 += dn * (ld_f(inp, inp_bf, x0 + c) - mu) * rs;
        }
        m1 = warp_sum(m1) / (float)C;
        m2 = warp_sum(m2) / (float)C;
        for (size_t c = lane; c < C; c += WARP) {
            size_t i = x0 + c;
            float norm = (ld_f(inp, inp_bf, i) - mu) * rs, d = ld_f(dout, dout_bf, i);
            float v = (dinp ? dinp[i] : gpt_bf16_to_float(dinp_bf[i])) +
                      rs * (weight[c] * d - m1 - norm * m2);
            if (dinp)
                dinp[i] = v;
            if (dinp_bf)
                dinp_bf[i] = gpt_bf16_from_float_rne(v);
            sw[c] += d * norm; /* this lane's own slot */
            sb[c] += d;
        }
    }
    __syncthreads();
    for (size_t c = threadIdx.x; c < C; c += blockDim.x) {
        float aw = 0.0f, ab = 0.0f;
        for (unsigned k = 0; k < W; k++) { /* warp order */
            aw += lnb_sh[(size_t)k * 2 * C + c];
            ab += lnb_sh[(size_t)k * 2 * C + C + c];
        }
        part_w[(size_t)blockIdx.x * C + c] = aw;
        part_b[(size_t)blockIdx.x * C + c] = ab;
    }
}

/* Column sums, pass 1. Block (32, COLSUM_ROWS_Y) covers 32 columns of the
 * rows of split blockIdx.y. LN = true sums d*(x-mu)*rs into out0 and d into
 * out1; LN = false sums d into out0. With one split the sums are added to
 * the destinations (stored, with assign); otherwise they go to scratch
 * rows [split * C]. */
template <bool LN>
__global__ void colsum_pass1_kernel(float *out0, float *out1, const float *dout, const float *inp,
                                    const float *mean, const float *rstd, size_t N, size_t C,
                                    unsigned splits, int assign)
{
    __shared__ float sh0[COLSUM_ROWS_Y][WARP + 1];
    __shared__ float sh1[COLSUM_ROWS_Y][WARP + 1];
    size_t c = (size_t)blockIdx.x * WARP + threadIdx.x;
    size_t rows_per = (N + splits - 1) / splits;
    size_t r0 = (size_t)blockIdx.y * rows_per;
    size_t r1 = r0 + rows_per < N ? r0 + rows_per : N;
    float a0 = 0.0f, a1 = 0.0f;
    if (c < C) {
        for (size_t r = r0 + threadIdx.y; r < r1; r += COLSUM_ROWS_Y) {
            float d = dout[r * C + c];
            if (LN) {
                a0 += d * (inp[r * C + c] - mean[r]) * rstd[r];
                a1 += d;
            } else {
                a0 += d;
            }
        }
    }
    sh0[threadIdx.y][threadIdx.x] = a0;
    sh1[threadIdx.y][threadIdx.x] = a1;
    __syncthreads();
    if (threadIdx.y != 0 || c >= C)
        return;
    for (int y = 1; y < COLSUM_ROWS_Y; y++) {
        a0 += sh0[y][threadIdx.x];
        a1 += sh1[y][threadIdx.x];
    }
    if (splits == 1) {
        out0[c] = assign ? a0 : out0[c] + a0;
        if (LN)
            out1[c] = assign ? a1 : out1[c] + a1;
    } else {
        out0[(size_t)blockIdx.y * C + c] = a0;
        if (LN)
            out1[(size_t)blockIdx.y * C + c] = a1;
    }
}

/* Column sums, pass 2: dst[c] += sum over splits in order (dst[c] = the
 * sum, with assign). */
__global__ void colsum_pass2_kernel(float *dst, const float *part, size_t C, unsigned splits,
                                    int assign)
{
    GRID_LOOP(c, C)
    {
        float acc = 0.0f;
#pragma unroll 8
        for (unsigned sp = 0; sp < splits; sp++) /* loads in flight, adds in order */
            acc += __ldg(part + (size_t)sp * C + c);
        dst[c] = assign ? acc : dst[c] + acc;
    }
}

/* Pass 2 of the single-pass LayerNorm backward: dweight[c] and dbias[c]
 * get the sums over the blocks' partials part_w[b * C + c] and
 * part_b[b * C + c] (blockIdx.y 0: dweight, 1: dbias; one launch for
 * both), stored with assign, else added. Block (LNB_SUM_COLS, LNB_SUM_Y)
 * covers LNB_SUM_COLS columns: thread (x, y) adds blocks y, y + LNB_SUM_Y,
 * ... in that order (loads in flight, adds in order), thread (x, g) for
 * g < LNB_SUM_Y / LNB_SUM_GROUP then adds the sums of y = g LNB_SUM_GROUP
 * .. + LNB_SUM_GROUP - 1 in y order, and thread (x, 0) those in g order.
 * The order depends only on (blocks, C): deterministic. Narrow blocks
 * spread GPT-2's 1024 partials of 768 columns (6.3 MB, mostly L2 hits)
 * over 192 blocks; 32-column blocks gave 48, two thirds of the SMs idle
 * and each of the others waiting on its loads. */
__global__ void __launch_bounds__(LNB_SUM_THREADS)
    layernorm_backward_sum_kernel(float *dweight, float *dbias, const float *part_w,
                                  const float *part_b, unsigned blocks, size_t C, int assign)
{
    constexpr int G = LNB_SUM_Y / LNB_SUM_GROUP;
    static_assert(G * LNB_SUM_GROUP == LNB_SUM_Y, "groups");
    __shared__ float sh[LNB_SUM_Y][LNB_SUM_COLS + 1];
    const size_t c = (size_t)blockIdx.x * LNB_SUM_COLS + threadIdx.x;
    const float *part = blockIdx.y == 0 ? part_w : part_b;
    float *dst = blockIdx.y == 0 ? dweight : dbias;
    float acc = 0.0f;
    if (c < C) {
#pragma unroll 8
        for (unsigned b = threadIdx.y; b < blocks; b += LNB_SUM_Y)
            acc += __ldg(part + (size_t)b * C + c);
    }
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    float group = 0.0f;
    if (threadIdx.y < G)
        for (int i = 0; i < LNB_SUM_GROUP; i++)
            group += sh[threadIdx.y * LNB_SUM_GROUP + i][threadIdx.x];
    __syncthreads(); /* every group read before row g is overwritten */
    if (threadIdx.y < G)
        sh[threadIdx.y][threadIdx.x] = group;
    __syncthreads();
    if (threadIdx.y != 0 || c >= C)
        return;
    float sum = 0.0f;
    for (int g = 0; g < G; g++)
        sum += sh[g][threadIdx.x];
    dst[c] = assign ? sum : dst[c] + sum;
}

typedef void (*lnb_kernel_t)(float *, uint16_t *, float *, float *, const float *, const uint16_t *,
                             const float *, const uint16_t *, const float *, const float *,
                             const float *, size_t, size_t, size_t);

void cuk_layernorm_backward(cudaStream_t s, float *dinp, uint16_t *dinp_bf, float *dweight,
                            float *dbias, const float *dout, const uint16_t *dout_bf,
                            const float *inp, const uint16_t *inp_bf, const float *weight,
                            const float *mean, const float *rstd, size_t N, size_t C,
                            float *scratch, size_t scratch_floats, int assign)
{
    static_assert(GPT_CUDA_LN_HELD_CHUNKS == 4, "one kernel per held chunk count");
    static const lnb_kernel_t held[] = {
        layernorm_backward_fused_kernel<true, 0>, layernorm_backward_fused_kernel<true, 1>,
        layernorm_backward_fused_kernel<true, 2>, layernorm_backward_fused_kernel<true, 3>,
        layernorm_backward_fused_kernel<true, 4>};
    unsigned blocks = gpt_cuda_plan_lnb_blocks(N, C, scratch_floats);
    /* dout_bf, inp_bf and a NULL dinp only come with blocks > 0
     * (cuda_impl.h): the fallback below reads and writes fp32. */
    if (blocks > 0) {
        /* Single pass, then the blocks' partial sums added in order. */
        size_t rows_per = (N + blocks - 1) / blocks;
        float *pw = scratch, *pb = scratch + (size_t)blocks * C;
        const void *ptrs[] = {dinp, dinp_bf, dout, dout_bf, inp, inp_bf, weight};
        const size_t smem = GPT_CUDA_LNB_WARPS * 2 * C * sizeof(float);
        lnb_kernel_t k = layernorm_backward_fused_kernel<false>;
        if (lnb_vec_ok(ptrs, 7, C))
            k = held[dout_bf && inp_bf ? gpt_cuda_plan_ln_chunks(C) : 0];
        k<<<blocks, LNB_THREADS, smem, s>>>(dinp, dinp_bf, pw, pb, dout, dout_bf, inp, inp_bf,
                                            weight, mean, rstd, N, C, rows_per);
        layernorm_backward_sum_kernel<<<dim3((unsigned)((C + LNB_SUM_COLS - 1) / LNB_SUM_COLS), 2),
                                        dim3(LNB_SUM_COLS, LNB_SUM_Y), 0, s>>>(
            dweight, dbias, pw, pb, blocks, C, assign);
        return;
    }
    layernorm_backward_dinp_kernel<<<gpt_cuda_plan_row_grid(N, ROW_WARPS), ROW_WARPS * WARP, 0,
                                     s>>>(dinp, dinp_bf, dout, inp, weight, mean, rstd, N, C);
    unsigned splits = gpt_cuda_plan_colsum_splits(N, C, scratch_floats / 2);
    dim3 grid((unsigned)((C + WARP - 1) / WARP), splits);
    dim3 block(WARP, COLSUM_ROWS_Y);
    if (splits == 1) {
        colsum_pass1_kernel<true>
            <<<grid, block, 0, s>>>(dweight, dbias, dout, inp, mean, rstd, N, C, 1, assign);
        return;
    }
    float *p0 = scratch, *p1 = scratch + (size_t)splits * C;
    colsum_pass1_kernel<true>
        <<<grid, block, 0, s>>>(p0, p1, dout, inp, mean, rstd, N, C, splits, 0);
    colsum_pass2_kernel<<<ew_grid(C), GPT_CUDA_BLOCK, 0, s>>>(dweight, p0, C, splits, assign);
    colsum_pass2_kernel<<<ew_grid(C), GPT_CUDA_BLOCK, 0, s>>>(dbias, p1, C, splits, assign);
}

void cuk_colsum_add(cudaStream_t s, float *dst, const float *src, size_t N, size_t C,
                    float *scratch, size_t scratch_floats, int assign)
{
    unsigned splits = gpt_cuda_plan_colsum_splits(N, C, scratch_floats);
    dim3 grid((unsigned)((C + WARP - 1) / WARP), splits);
    dim3 block(WARP, COLSUM_ROWS_Y);
    if (splits == 1) {
        colsum_pass1_kernel<false>
            <<<grid, block, 0, s>>>(dst, NULL, src, NULL, NULL, NULL, N, C, 1, assign);
        return;
    }
    colsum_pass1_kernel<false>
        <<<grid, block, 0, s>>>(scratch, NULL, src, NULL, NULL, NULL, N, C, splits, 0);
    colsum_pass2_kernel<<<ew_grid(C), GPT_CUDA_BLOCK, 0, s>>>(dst, scratch, C, splits, assign);
}
