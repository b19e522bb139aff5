/*
 * cuda_kernels: the CUDA backend's own kernels that are neither a GEMM nor
 * LayerNorm (cuda_layernorm.cu) nor the fused softmax + cross-entropy
 * (cuda_xent.cu): encoder, the products' bias broadcast, the causal
 * softmax of attention, GELU, residual, AdamW, scale, the deterministic
 * sum of squares and the loss sum, and the bf16 pieces of the bf16 mode
 * (conversion, optional bf16 copies of the outputs that feed matrix
 * products, the bf16 weights' copy rounded to nearest in AdamW). fp32
 * storage, fp32 math (double for sumsq), no fast-math intrinsics, so
 * results track the CPU backend to a few ulp. Launchers enqueue on the
 * given stream and never synchronise. The helpers the three files share
 * are in cuda_kernels.cuh.
 *
 * Determinism: every reduction has a fixed order that depends only on the
 * shapes (warp/block trees, sumsq with a grid that depends only on n; the
 * column sums: cuda_layernorm.cu). The token-embedding gradient, where
 * tokens repeat across (b, t), uses no float atomics either: the block of a
 * token's first position sums every position holding that token in
 * position order, read from the positions sorted by (token, position)
 * (encoder_wte_*_kernel, wte_order.h: integer counts), so two runs give the
 * same bits.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "cuda_kernels.cuh"
#include "gpt_bf16.h"
#include "wte_order.h"

#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBE  0.044715f

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

/* ---- bias broadcast (the products' bias without cuBLASLt's epilogue) ---------- */

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
