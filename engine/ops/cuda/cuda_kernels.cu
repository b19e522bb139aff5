/*
 * cuda_kernels: the CUDA backend's own kernels (everything that is not a GEMM):
 * encoder, LayerNorm, GELU, residual, the causal softmax of attention, fused
 * softmax + cross-entropy, AdamW, scale and the deterministic sum of squares,
 * and the bf16 pieces of the bf16 mode (conversion, optional bf16 copies of the
 * outputs that feed matrix products, the bf16 weights' copy rounded to nearest in
 * AdamW). fp32 storage, fp32 math (double for sumsq), no fast-math intrinsics,
 * so results track the CPU backend to a few ulp. Launchers enqueue on the given
 * stream and never synchronise.
 *
 * Determinism: every reduction has a fixed order that depends only on the
 * shapes (warp/block trees, two-pass column sums through scratch, sumsq
 * with a grid that depends only on n). The token-embedding gradient, where
 * tokens repeat across (b, t), uses no float atomics either: the block of a
 * token's first position sums every position holding that token in
 * position order, read from the positions sorted by (token, position)
 * (encoder_wte_*_kernel, wte_order.h: integer counts), so two runs give the
 * same bits.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "cuda_impl.h"
#include "flash_tc.h"
#include "gpt_bf16.h"
#include "wte_order.h"

#define WARP            32
#define ROW_WARPS       8 /* warps per block of row kernels */
#define XENT_THREADS    512
#define XENT_LOADS      4 /* 16-byte loads in flight per thread, softmax_xent_bf16_kernel */
#define COLSUM_ROWS_Y   8 /* threadIdx.y extent of the column-sum kernels */
#define LNB_THREADS     (GPT_CUDA_LNB_WARPS * WARP) /* the fused LayerNorm backward's block */
#define LNB_SUM_COLS    8   /* columns of a layernorm_backward_sum_kernel block */
#define LNB_SUM_Y       128 /* its threadIdx.y extent */
#define LNB_SUM_GROUP   16  /* y sums each thread of its second stage adds */
#define LNB_SUM_THREADS (LNB_SUM_Y * LNB_SUM_COLS)
#define GELU_SCALE      0.7978845608028654f
#define GELU_CUBE       0.044715f

/* Grid-stride index helpers (sizes may exceed 2^31). */
#define GRID_LOOP(i, n)                                                                            \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)blockDim.x * gridDim.x)

static unsigned ew_grid(size_t n)
{
    return gpt_cuda_plan_grid(n, GPT_CUDA_BLOCK, GPT_CUDA_MAX_GRID);
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = WARP / 2; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_d(double v)
{
    for (int o = WARP / 2; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = WARP / 2; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Merges two online-softmax states (max m, sum s of exp(x - m)). */
__device__ __forceinline__ void online_merge(float &m, float &s, float m2, float s2)
{
    float mx = fmaxf(m, m2);
    if (mx == -INFINITY)
        return; /* both empty */
    s = s * expf(m - mx) + s2 * expf(m2 - mx);
    m = mx;
}

__device__ __forceinline__ void warp_online(float &m, float &s)
{
    for (int o = WARP / 2; o > 0; o /= 2) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        online_merge(m, s, m2, s2);
    }
}

/* x[i] of an input that comes as fp32 or, when x_bf is non-NULL, as its
 * bf16 copy (a range its producer wrote as bf16 only): fp32 math either
 * way. */
static __device__ __forceinline__ float ld_f(const float *x, const uint16_t *x_bf, size_t i)
{
    return x_bf ? gpt_bf16_to_float(x_bf[i]) : x[i];
}

/* The eight bf16 values of u (lowest address first) as floats. */
static __device__ __forceinline__ void bf16x8_f(float v[8], uint4 u)
{
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        v[2 * k] = gpt_bf16_to_float((uint16_t)(w[k] & 0xffffu));
        v[2 * k + 1] = gpt_bf16_to_float((uint16_t)(w[k] >> 16));
    }
}

/* Eight consecutive elements of x as ld_f reads them: from the bf16 copy
 * x_bf when it is given (the fp32 x may then be stale), else from x; with
 * 16-byte loads (i a multiple of 8, rows 16-byte aligned: lnb_vec_ok). */
static __device__ __forceinline__ void ld8_f(float v[8], const float *x, const uint16_t *x_bf,
                                             size_t i)
{
    if (!x_bf) {
        const float4 a = *(const float4 *)(x + i), b = *(const float4 *)(x + i + 4);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
        v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        return;
    }
    bf16x8_f(v, *(const uint4 *)(x_bf + i));
}

/* Eight consecutive results v at i: to f (fp32) and/or to bf (their bf16
 * copy, rounded to nearest), either may be NULL; 16-byte stores. */
static __device__ __forceinline__ void st8_f(float *f, uint16_t *bf, size_t i, const float v[8])
{
    if (f) {
        *(float4 *)(f + i) = make_float4(v[0], v[1], v[2], v[3]);
        *(float4 *)(f + i + 4) = make_float4(v[4], v[5], v[6], v[7]);
    }
    if (bf) {
        uint32_t w[4];
#pragma unroll
        for (int e = 0; e < 4; e++)
            w[e] = gpt_bf16x2_from_floats_rne(v[2 * e], v[2 * e + 1]);
        *(uint4 *)(bf + i) = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* The 16-byte paths (the encoder, LayerNorm): C a multiple of 8 and
 * every row pointer 16-byte aligned. */
static bool lnb_vec_ok(const void *const *p, int n, size_t C)
{
    if (C % 8 != 0)
        return false;
    for (int i = 0; i < n; i++)
        if ((uintptr_t)p[i] % 16 != 0)
            return false;
    return true;
}

/* ---- encoder ----------------------------------------------------------- */

/* out and/or out_bf (either may be NULL): the sum in fp32, rounded once
 * for the bf16 copy. VEC (lnb_vec_ok): a thread per 8 columns, 16-byte
 * loads and stores (the same values). */
template <bool VEC>
__global__ void encoder_forward_kernel(float *out, uint16_t *out_bf, const int *inp,
                                       const float *wte, const float *wpe, size_t T, size_t C,
                                       size_t n)
{
    if constexpr (VEC) {
        GRID_LOOP(q, n / 8)
        {
            const size_t i = 8 * q, bt = i / C, c = i % C;
            float a[8], p[8], v[8];
            ld8_f(a, wte, NULL, (size_t)inp[bt] * C + c);
            ld8_f(p, wpe, NULL, (bt % T) * C + c);
#pragma unroll
            for (int e = 0; e < 8; e++)
                v[e] = a[e] + p[e];
            st8_f(out, out_bf, i, v);
        }
    } else {
        GRID_LOOP(i, n)
        {
            size_t bt = i / C, c = i % C;
            float v = wte[(size_t)inp[bt] * C + c] + wpe[(bt % T) * C + c];
            if (out)
                out[i] = v;
            if (out_bf)
                out_bf[i] = gpt_bf16_from_float_rne(v);
        }
    }
}

void cuk_encoder_forward(cudaStream_t s, float *out, uint16_t *out_bf, const int *inp,
                         const float *wte, const float *wpe, size_t B, size_t T, size_t C)
{
    size_t n = B * T * C;
    const void *ptrs[] = {out, out_bf, wte, wpe};
    if (lnb_vec_ok(ptrs, 4, C))
        encoder_forward_kernel<true>
            <<<ew_grid(n / 8), GPT_CUDA_BLOCK, 0, s>>>(out, out_bf, inp, wte, wpe, T, C, n);
    else
        encoder_forward_kernel<false>
            <<<ew_grid(n), GPT_CUDA_BLOCK, 0, s>>>(out, out_bf, inp, wte, wpe, T, C, n);
}

/* dwpe[t, c] += sum over b, in b order: one thread per (t, c). */
__global__ void encoder_backward_wpe_kernel(float *dwpe, const float *dout, const uint16_t *dout_bf,
                                            size_t B, size_t T, size_t C)
{
    size_t n = T * C;
    GRID_LOOP(i, n)
    {
        float acc = 0.0f;
        for (size_t b = 0; b < B; b++)
            acc += ld_f(dout, dout_bf, b * n + i);
        dwpe[i] += acc;
    }
}

/* The token-embedding gradient through the stable order of the positions
 * by (token, position) (wte_order.h): each token's positions then sit in
 * one segment, in position order, and the block of its first position
 * adds their dout rows. Measured on an H200 (B*T = 16384, C 768) the
 * passes this replaces took 0.45 ms against 0.09 predicted: a links pass
 * of BT^2 compares on BT / 256 = 64 blocks (~100 us at low occupancy),
 * then a walk of a linked list per token, a chain of dependent loads
 * (~1 us a step) for a token with hundreds of positions. Here the ranks
 * cost about BT (256 + 18 BT / 256) steps (a chunk's compares, then two
 * binary searches per other chunk) on BT / 256 x BT / 2048 blocks, and
 * the sum reads a token's positions from the order, so its loads do not
 * wait on each other.
 *
 * Chunk pass, one block per chunk of GPT_WTE_CHUNK positions: the
 * chunk's tokens, sorted, to sorted[chunk start ..), and each position's
 * counts within its chunk (the other chunks' shares are added to them). */
__global__ void __launch_bounds__(GPT_WTE_CHUNK)
    encoder_wte_chunk_kernel(int *sorted, int *rank, int *earlier, int *same, const int *inp,
                             int BT)
{
    __shared__ int tok[GPT_WTE_CHUNK];
    int base = blockIdx.x * GPT_WTE_CHUNK, i = threadIdx.x;
    int n = BT - base < GPT_WTE_CHUNK ? BT - base : GPT_WTE_CHUNK;
    if (i < n)
        tok[i] = inp[base + i];
    __syncthreads();
    if (i >= n)
        return;
    struct gpt_wte_counts k = gpt_wte_chunk_counts(tok, n, i);
    sorted[base + k.rank] = tok[i];
    rank[base + i] = k.rank;
    earlier[base + i] = k.earlier;
    same[base + i] = k.same;
}

/* Count pass, a block per (position chunk x, slice y of GPT_WTE_SLICE
 * sorted chunks): the slice staged in shared memory, each position adds
 * two binary searches' worth per other chunk to its counts. Integer
 * atomics: exact, so the counts (and the order) are the same every run. */
__global__ void __launch_bounds__(GPT_WTE_CHUNK)
    encoder_wte_count_kernel(int *rank, int *earlier, int *same, const int *sorted, const int *inp,
                             int BT)
{
    __shared__ int a[GPT_WTE_SLICE * GPT_WTE_CHUNK];
    int chunks = (BT + GPT_WTE_CHUNK - 1) / GPT_WTE_CHUNK;
    int k0 = blockIdx.y * GPT_WTE_SLICE, a0 = k0 * GPT_WTE_CHUNK;
    int kn = chunks - k0 < GPT_WTE_SLICE ? chunks - k0 : GPT_WTE_SLICE;
    int an = BT - a0 < kn * GPT_WTE_CHUNK ? BT - a0 : kn * GPT_WTE_CHUNK;
    for (int j = threadIdx.x; j < an; j += blockDim.x)
        a[j] = sorted[a0 + j];
    __syncthreads();
    int own = blockIdx.x, p = own * GPT_WTE_CHUNK + threadIdx.x;
    if (p >= BT)
        return;
    int v = inp[p];
    struct gpt_wte_counts k = {0, 0, 0};
    for (int j = 0; j < kn; j++) {
        int n = an - j * GPT_WTE_CHUNK < GPT_WTE_CHUNK ? an - j * GPT_WTE_CHUNK : GPT_WTE_CHUNK;
        if (k0 + j != own)
            gpt_wte_chunk_add(&k, a + j * GPT_WTE_CHUNK, n, v, k0 + j < own);
    }
    if (k.rank)
        atomicAdd(&rank[p], k.rank);
    if (k.earlier)
        atomicAdd(&earlier[p], k.earlier);
    if (k.same)
        atomicAdd(&same[p], k.same);
}

/* Place pass: order[rank[p]] = p, the positions sorted by (token,
 * position). order may be the chunk pass's sorted (read only before). */
__global__ void encoder_wte_place_kernel(int *order, const int *rank, int BT)
{
    GRID_LOOP(p, (size_t)BT)
    {
        order[rank[p]] = (int)p;
    }
}

/* Sum pass, one block per position (grid-stride): the block of a token's
 * first position (earlier 0) stages the token's segment of the order in
 * shared memory and each thread adds the rows for WTE_COLS columns at a
 * time, in position order (the bits of a sequential sum), four rows'
 * loads issued before their adds. Each dwte row has one writer, no
 * atomics. All branches around __syncthreads depend only on
 * block-uniform values. */
#define WTE_COLS 4
#define WTE_ROWS 4

static __device__ __forceinline__ void wte_row_load(float x[WTE_COLS], const float *dout,
                                                    const uint16_t *dout_bf, size_t row, size_t c,
                                                    size_t C)
{
#pragma unroll
    for (int u = 0; u < WTE_COLS; u++) {
        size_t cu = c + (size_t)u * blockDim.x;
        x[u] = cu < C ? ld_f(dout, dout_bf, row + cu) : 0.0f;
    }
}

__global__ void encoder_wte_sum_kernel(float *dwte, const float *dout, const uint16_t *dout_bf,
                                       const int *inp, const int *order, const int *rank,
                                       const int *earlier, const int *same, int BT, size_t C)
{
    __shared__ int pos[GPT_CUDA_BLOCK];
    for (int p = blockIdx.x; p < BT; p += gridDim.x) {
        if (earlier[p] != 0)
            continue; /* an earlier position owns the token */
        int v = inp[p], start = rank[p], n = same[p];
        for (size_t c0 = 0; c0 < C; c0 += (size_t)WTE_COLS * blockDim.x) {
            size_t c = c0 + threadIdx.x;
            float acc[WTE_COLS] = {0.0f};
            for (int k0 = 0; k0 < n; k0 += blockDim.x) {
                int m = n - k0 < (int)blockDim.x ? n - k0 : (int)blockDim.x;
                __syncthreads(); /* the previous segment's reads are done */
                if ((int)threadIdx.x < m)
                    pos[threadIdx.x] = order[start + k0 + (int)threadIdx.x];
                __syncthreads();
                int j = 0;
                for (; j + WTE_ROWS <= m; j += WTE_ROWS) {
                    float x[WTE_ROWS][WTE_COLS];
#pragma unroll
                    for (int r = 0; r < WTE_ROWS; r++)
                        wte_row_load(x[r], dout, dout_bf, (size_t)pos[j + r] * C, c, C);
#pragma unroll
                    for (int r = 0; r < WTE_ROWS; r++)
#pragma unroll
                        for (int u = 0; u < WTE_COLS; u++)
                            acc[u] += x[r][u];
                }
                for (; j < m; j++) {
                    float x[WTE_COLS];
                    wte_row_load(x, dout, dout_bf, (size_t)pos[j] * C, c, C);
#pragma unroll
                    for (int u = 0; u < WTE_COLS; u++)
                        acc[u] += x[u];
                }
            }
#pragma unroll
            for (int u = 0; u < WTE_COLS; u++) {
                size_t cu = c + (size_t)u * blockDim.x;
                if (cu < C)
                    dwte[(size_t)v * C + cu] += acc[u];
            }
        }
    }
}

/* The fallback where B*T outgrows the order's scratch: the same sums, in
 * the same order, found by scanning. dwte[v, c] += sum of dout[q, c] over
 * the positions q (q < BT = B*T) holding token v, added in q order. One block
 * per position p (grid-stride); only the block of v's first position does
 * the work, so each dwte row has exactly one writer. The block scans the
 * positions in chunks of blockDim.x, marks the matches in shared memory,
 * and each thread (one column per pass) adds the marked rows in order.
 * All branches around __syncthreads depend only on block-uniform values. */
__global__ void encoder_wte_scan_kernel(float *dwte, const float *dout, const uint16_t *dout_bf,
                                        const int *inp, size_t BT, size_t C)
{
    __shared__ int hit[GPT_CUDA_BLOCK];
    for (size_t p = blockIdx.x; p < BT; p += gridDim.x) {
        int v = inp[p];
        int found = 0;
        for (size_t q = threadIdx.x; q < p; q += blockDim.x)
            found |= inp[q] == v;
        if (__syncthreads_or(found))
            continue; /* an earlier position owns token v */
        for (size_t c0 = 0; c0 < C; c0 += blockDim.x) {
            size_t c = c0 + threadIdx.x;
            float acc = 0.0f;
            for (size_t q0 = p; q0 < BT; q0 += blockDim.x) {
                size_t q = q0 + threadIdx.x;
                hit[threadIdx.x] = q < BT && inp[q] == v;
                __syncthreads();
                size_t m = BT - q0 < blockDim.x ? BT - q0 : blockDim.x;
                if (c < C)
                    for (size_t j = 0; j < m; j++)
                        if (hit[j])
                            acc += ld_f(dout, dout_bf, (q0 + j) * C + c);
                __syncthreads();
            }
            if (c < C)
                dwte[(size_t)v * C + c] += acc;
        }
    }
}

void cuk_encoder_backward(cudaStream_t s, float *dwte, float *dwpe, const float *dout,
                          const uint16_t *dout_bf, const int *inp, int *scratch,
                          size_t scratch_ints, size_t B, size_t T, size_t C)
{
    encoder_backward_wpe_kernel<<<ew_grid(T * C), GPT_CUDA_BLOCK, 0, s>>>(dwpe, dout, dout_bf, B, T,
                                                                          C);
    size_t chunks = (B * T + GPT_WTE_CHUNK - 1) / GPT_WTE_CHUNK;
    if (B * T > scratch_ints / 4 || B * T > (size_t)INT_MAX ||
        (chunks + GPT_WTE_SLICE - 1) / GPT_WTE_SLICE > GPT_CUDA_MAX_GRID) {
        encoder_wte_scan_kernel<<<gpt_cuda_plan_grid(B * T, 1, GPT_CUDA_MAX_GRID), GPT_CUDA_BLOCK,
                                  0, s>>>(dwte, dout, dout_bf, inp, B * T, C);
        return;
    }
    int BT = (int)(B * T);
    /* (BT) each: the chunks' sorted tokens, then the order (the place pass
     * overwrites them once the count pass has read them); the counts. */
    int *order = scratch, *rank = order + BT, *earlier = rank + BT, *same = earlier + BT;
    encoder_wte_chunk_kernel<<<(unsigned)chunks, GPT_WTE_CHUNK, 0, s>>>(order, rank, earlier, same,
                                                                        inp, BT);
    if (chunks > 1) {
        dim3 grid((unsigned)chunks, (unsigned)((chunks + GPT_WTE_SLICE - 1) / GPT_WTE_SLICE));
        encoder_wte_count_kernel<<<grid, GPT_WTE_CHUNK, 0, s>>>(rank, earlier, same, order, inp,
                                                                BT);
    }
    encoder_wte_place_kernel<<<ew_grid((size_t)BT), GPT_CUDA_BLOCK, 0, s>>>(order, rank, BT);
    encoder_wte_sum_kernel<<<gpt_cuda_plan_grid((size_t)BT, 1, GPT_CUDA_MAX_GRID), GPT_CUDA_BLOCK,
                             0, s>>>(dwte, dout, dout_bf, inp, order, rank, earlier, same, BT, C);
}

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

__global__ void bias_broadcast_kernel(float *out, const float *bias, size_t OC, size_t n)
{
    GRID_LOOP(i, n)
    {
        out[i] = bias[i % OC];
    }
}

void cuk_bias_broadcast(cudaStream_t s, float *out, const float *bias, size_t N, size_t OC)
{
    size_t n = N * OC;
    bias_broadcast_kernel<<<ew_grid(n), GPT_CUDA_BLOCK, 0, s>>>(out, bias, OC, n);
}

/* ---- attention softmax --------------------------------------------------- */

/* One warp per row i of a (T, T) matrix: softmax over j <= i (online max
 * and sum in one pass, then a write pass), zeros for j > i so that the
 * following att @ V product may run over all T keys. */
__global__ void att_softmax_forward_kernel(float *att, size_t rows, size_t T)
{
    int lane = threadIdx.x % WARP;
    size_t warps = (size_t)gridDim.x * (blockDim.x / WARP);
    for (size_t r = (size_t)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP; r < rows;
         r += warps) {
        size_t i = r % T;
        float *row = att + r * T;
        float m = -INFINITY, sum = 0.0f;
        for (size_t j = lane; j <= i; j += WARP) {
            float x = row[j];
            if (x > m) {
                sum = sum * expf(m - x) + 1.0f;
                m = x;
            } else {
                sum += expf(x - m);
            }
        }
        warp_online(m, sum);
        float inv = 1.0f / sum;
        for (size_t j = lane; j < T; j += WARP)
            row[j] = j <= i ? expf(row[j] - m) * inv : 0.0f;
    }
}

void cuk_att_softmax_forward(cudaStream_t s, float *att, size_t rows, size_t T)
{
    att_softmax_forward_kernel<<<gpt_cuda_plan_row_grid(rows, ROW_WARPS), ROW_WARPS * WARP, 0, s>>>(
        att, rows, T);
}

__global__ void att_softmax_backward_kernel(float *datt, const float *att, size_t rows, size_t T)
{
    int lane = threadIdx.x % WARP;
    size_t warps = (size_t)gridDim.x * (blockDim.x / WARP);
    for (size_t r = (size_t)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP; r < rows;
         r += warps) {
        size_t i = r % T;
        float *d = datt + r * T;
        const float *a = att + r * T;
        float acc = 0.0f;
        for (size_t j = lane; j <= i; j += WARP)
            acc += a[j] * d[j];
        acc = warp_sum(acc);
        for (size_t j = lane; j < T; j += WARP)
            d[j] = j <= i ? a[j] * (d[j] - acc) : 0.0f;
    }
}

void cuk_att_softmax_backward(cudaStream_t s, float *datt, const float *att, size_t rows, size_t T)
{
    att_softmax_backward_kernel<<<gpt_cuda_plan_row_grid(rows, ROW_WARPS), ROW_WARPS * WARP, 0,
                                  s>>>(datt, att, rows, T);
}

/* ---- element-wise -------------------------------------------------------- */

__global__ void gelu_forward_kernel(float *out, uint16_t *out_bf, const float *inp, size_t n)
{
    GRID_LOOP(i, n)
    {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
        float y = 0.5f * x * (1.0f + tanhf(u));
        out[i] = y;
        if (out_bf)
            out_bf[i] = gpt_bf16_from_float_rne(y);
    }
}

void cuk_gelu_forward(cudaStream_t s, float *out, uint16_t *out_bf, const float *inp, size_t n)
{
    gelu_forward_kernel<<<ew_grid(n), GPT_CUDA_BLOCK, 0, s>>>(out, out_bf, inp, n);
}

/* dinp may alias dout (each element is read before it is written). */
__global__ void gelu_backward_kernel(float *dinp, uint16_t *dinp_bf, const float *inp,
                                     const float *dout, size_t n)
{
    GRID_LOOP(i, n)
    {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
        float t = tanhf(u);
        float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
        float g = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
        float y = g * dout[i];
        dinp[i] = y;
        if (dinp_bf)
            dinp_bf[i] = gpt_bf16_from_float_rne(y);
    }
}

void cuk_gelu_backward(cudaStream_t s, float *dinp, uint16_t *dinp_bf, const float *inp,
                       const float *dout, size_t n)
{
    gelu_backward_kernel<<<ew_grid(n), GPT_CUDA_BLOCK, 0, s>>>(dinp, dinp_bf, inp, dout, n);
}

__global__ void f32_to_bf16_kernel(uint16_t *dst, const float *src, size_t n)
{
    GRID_LOOP(i, n)
    {
        dst[i] = gpt_bf16_from_float_rne(src[i]);
    }
}

void cuk_f32_to_bf16(cudaStream_t s, uint16_t *dst, const float *src, size_t n)
{
    f32_to_bf16_kernel<<<ew_grid(n), GPT_CUDA_BLOCK, 0, s>>>(dst, src, n);
}

__global__ void bf16_to_f32_kernel(float *dst, const uint16_t *src, size_t n)
{
    GRID_LOOP(i, n)
    {
        dst[i] = gpt_bf16_to_float(src[i]);
    }
}

void cuk_bf16_to_f32(cudaStream_t s, float *dst, const uint16_t *src, size_t n)
{
    bf16_to_f32_kernel<<<ew_grid(n), GPT_CUDA_BLOCK, 0, s>>>(dst, src, n);
}

__global__ void residual_kernel(float *out, const float *a, const float *b, size_t n)
{
    GRID_LOOP(i, n)
    {
        out[i] = a[i] + b[i];
    }
}

void cuk_residual_forward(cudaStream_t s, float *out, const float *a, const float *b, size_t n)
{
    residual_kernel<<<ew_grid(n), GPT_CUDA_BLOCK, 0, s>>>(out, a, b, n);
}

__global__ void scale_kernel(float *x, float sc, size_t n)
{
    GRID_LOOP(i, n)
    {
        x[i] *= sc;
    }
}

void cuk_scale(cudaStream_t s, float *x, float sc, size_t n)
{
    scale_kernel<<<ew_grid(n), GPT_CUDA_BLOCK, 0, s>>>(x, sc, n);
}

/* One element's AdamW update, in the CPU backend's operation order
 * (torch.optim.AdamW, foreach off): m and v updated in place, the new
 * parameter returned. dk is 1 - lr * weight_decay where the element
 * decays, else 1. */
static __device__ __forceinline__ float adamw_elem(float p, float g, float *m, float *v,
                                                   float beta1, float beta2, float eps, float dk,
                                                   float step_size, float bc2_sqrt)
{
    float mi = beta1 * *m + (1.0f - beta1) * g;
    float vi = beta2 * *v + (1.0f - beta2) * g * g;
    *m = mi;
    *v = vi;
    float denom = sqrtf(vi) / bc2_sqrt + eps;
    return p * dk - step_size * mi / denom;
}

/* clip_sumsq (optional): the factor is gpt_cuda_clip_scale(*clip_sumsq,
 * clip), read here, instead of grad_scale (the step's norm stays on the
 * device). */
__global__ void adamw_kernel(float *params, uint16_t *params_bf, const float *grads, float *m,
                             float *v, size_t n, float beta1, float beta2, float eps, float decay,
                             float step_size, float bc2_sqrt, float grad_scale,
                             const double *clip_sumsq, double clip)
{
    if (clip_sumsq)
        grad_scale = gpt_cuda_clip_scale(*clip_sumsq, clip);
    GRID_LOOP(i, n)
    {
        float p = adamw_elem(params[i], grads[i] * grad_scale, &m[i], &v[i], beta1, beta2, eps,
                             decay, step_size, bc2_sqrt);
        params[i] = p;
        if (params_bf)
            params_bf[i] = gpt_bf16_from_float_rne(p);
    }
}

void cuk_adamw(cudaStream_t s, float *params, uint16_t *params_bf, const float *grads, float *m,
               float *v, size_t n, float lr, float beta1, float beta2, float eps,
               float weight_decay, float grad_scale, const double *clip_sumsq, double clip,
               float bc1, float bc2)
{
    adamw_kernel<<<ew_grid(n), GPT_CUDA_BLOCK, 0, s>>>(
        params, params_bf, grads, m, v, n, beta1, beta2, eps, 1.0f - lr * weight_decay, lr / bc1,
        sqrtf(bc2), grad_scale, clip_sumsq, clip);
}

/* AdamW over a run of contiguous spans in one launch: element i of the
 * run belongs to span gpt_cuda_span_of(ends, n_spans, i) (the same binary
 * search the unit test checks), which says whether it decays; otherwise
 * exactly adamw_kernel's arithmetic (its clip_sumsq too). VEC (n a
 * multiple of 4, params, grads, m and v 16-byte aligned, params_bf 8):
 * four elements per thread with 16-byte loads and stores (8 for the bf16
 * copy), the span looked up once per four unless one ends among them;
 * each element's arithmetic unchanged, so the same bits as the scalar
 * loop. The scalar loop's 4-byte accesses ran AdamW at about half the
 * memory rate on the first H200 run. */
template <bool VEC>
__global__ void
adamw_multi_kernel(float *params, uint16_t *params_bf, const float *grads, float *m, float *v,
                   size_t n, const uint64_t *ends, const uint32_t *decay_flags, size_t n_spans,
                   float beta1, float beta2, float eps, float decay, float step_size,
                   float bc2_sqrt, float grad_scale, const double *clip_sumsq, double clip)
{
    if (clip_sumsq)
        grad_scale = gpt_cuda_clip_scale(*clip_sumsq, clip);
    if constexpr (VEC) {
        GRID_LOOP(q, n / 4)
        {
            const size_t i = 4 * q;
            const float4 p4 = ((const float4 *)params)[q], g4 = ((const float4 *)grads)[q];
            float4 m4 = ((float4 *)m)[q], v4 = ((float4 *)v)[q];
            float pk[4] = {p4.x, p4.y, p4.z, p4.w}, gk[4] = {g4.x, g4.y, g4.z, g4.w};
            float mk[4] = {m4.x, m4.y, m4.z, m4.w}, vk[4] = {v4.x, v4.y, v4.z, v4.w};
            size_t sp = gpt_cuda_span_of(ends, n_spans, (uint64_t)i);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                if (k > 0 && i + k >= ends[sp]) /* a span ends inside the four */
                    sp = gpt_cuda_span_of(ends, n_spans, (uint64_t)(i + k));
                pk[k] = adamw_elem(pk[k], gk[k] * grad_scale, &mk[k], &vk[k], beta1, beta2, eps,
                                   decay_flags[sp] ? decay : 1.0f, step_size, bc2_sqrt);
            }
            ((float4 *)params)[q] = make_float4(pk[0], pk[1], pk[2], pk[3]);
            ((float4 *)m)[q] = make_float4(mk[0], mk[1], mk[2], mk[3]);
            ((float4 *)v)[q] = make_float4(vk[0], vk[1], vk[2], vk[3]);
            if (params_bf)
                ((uint2 *)params_bf)[q] = make_uint2(gpt_bf16x2_from_floats_rne(pk[0], pk[1]),
                                                     gpt_bf16x2_from_floats_rne(pk[2], pk[3]));
        }
    } else {
        GRID_LOOP(i, n)
        {
            size_t sp = gpt_cuda_span_of(ends, n_spans, (uint64_t)i);
            float p = adamw_elem(params[i], grads[i] * grad_scale, &m[i], &v[i], beta1, beta2, eps,
                                 decay_flags[sp] ? decay : 1.0f, step_size, bc2_sqrt);
            params[i] = p;
            if (params_bf)
                params_bf[i] = gpt_bf16_from_float_rne(p);
        }
    }
}

void cuk_adamw_multi(cudaStream_t s, float *params, uint16_t *params_bf, const float *grads,
                     float *m, float *v, size_t n, const uint64_t *ends,
                     const uint32_t *decay_flags, size_t n_spans, float lr, float beta1,
                     float beta2, float eps, float weight_decay, float grad_scale,
                     const double *clip_sumsq, double clip, float bc1, float bc2)
{
    const bool vec = n % 4 == 0 && (uintptr_t)params % 16 == 0 && (uintptr_t)grads % 16 == 0 &&
                     (uintptr_t)m % 16 == 0 && (uintptr_t)v % 16 == 0 &&
                     (uintptr_t)params_bf % 8 == 0;
    const float decay = 1.0f - lr * weight_decay, step_size = lr / bc1, bc2_sqrt = sqrtf(bc2);
    if (vec)
        adamw_multi_kernel<true><<<ew_grid(n / 4), GPT_CUDA_BLOCK, 0, s>>>(
            params, params_bf, grads, m, v, n, ends, decay_flags, n_spans, beta1, beta2, eps, decay,
            step_size, bc2_sqrt, grad_scale, clip_sumsq, clip);
    else
        adamw_multi_kernel<false><<<ew_grid(n), GPT_CUDA_BLOCK, 0, s>>>(
            params, params_bf, grads, m, v, n, ends, decay_flags, n_spans, beta1, beta2, eps, decay,
            step_size, bc2_sqrt, grad_scale, clip_sumsq, clip);
}

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

/* ---- sum of squares (deterministic, two passes) ---------------------------- */

__device__ double block_sum_d(double v)
{
    __shared__ double sh[GPT_CUDA_BLOCK / WARP];
    v = warp_sum_d(v);
    int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, nw = blockDim.x / WARP;
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    return warp_sum_d(v);
}

__global__ void sumsq_pass1_kernel(const float *x, size_t n, double *partials)
{
    double acc = 0.0;
    GRID_LOOP(i, n)
    {
        double d = (double)x[i];
        acc += d * d;
    }
    acc = block_sum_d(acc);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = acc;
}

__global__ void sumsq_pass2_kernel(const double *partials, unsigned count, double *result)
{
    double acc = 0.0;
    for (unsigned i = threadIdx.x; i < count; i += blockDim.x)
        acc += partials[i];
    acc = block_sum_d(acc);
    if (threadIdx.x == 0)
        *result = acc;
}

void cuk_sumsq(cudaStream_t s, const float *x, size_t n, double *partials, double *result)
{
    unsigned g = gpt_cuda_plan_sumsq_blocks(n, GPT_CUDA_BLOCK);
    sumsq_pass1_kernel<<<g, GPT_CUDA_BLOCK, 0, s>>>(x, n, partials);
    sumsq_pass2_kernel<<<1, GPT_CUDA_BLOCK, 0, s>>>(partials, g, result);
}

/* ---- a step's loss on the device -------------------------------------------- */

/* One block: acc = (reset ? 0 : acc) + weight * sum(losses), the sum in
 * double over a fixed split (thread j takes rows j, j + blockDim, ...;
 * then block_sum_d's tree), so every run gives the same bits. N is B*T
 * rows, a few thousand: one block reads them in microseconds. */
__global__ void loss_accum_kernel(double *acc, const float *losses, size_t N, double weight,
                                  int reset)
{
    double sum = 0.0;
    for (size_t i = threadIdx.x; i < N; i += blockDim.x)
        sum += (double)losses[i];
    sum = block_sum_d(sum);
    if (threadIdx.x == 0)
        *acc = (reset ? 0.0 : *acc) + weight * sum;
}

void cuk_loss_accum(cudaStream_t s, double *acc, const float *losses, size_t N, double weight,
                    int reset)
{
    loss_accum_kernel<<<1, GPT_CUDA_BLOCK, 0, s>>>(acc, losses, N, weight, reset);
}
