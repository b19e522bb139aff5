/*
 * cuda_flash_tc.cuh: what the tensor-core flash attention kernels share:
 * the mma.sync kernels and the launchers (cuda_attention.cu) and the
 * warpgroup (wgmma, sm_90a) kernels (cuda_attention_wg.cu, a file of its
 * own because only it is built as sm_90a code). Tiling, spans and the
 * softmax recurrence are engine/include/flash_tc.h; this header has the
 * device side: fragment packing, cp.async, quad reductions, stores, the
 * dQ pass's row terms and stores, and the shared-memory opt-in. C++ and
 * CUDA only; private to those two files.
 */
#ifndef GPT_CUDA_FLASH_TC_CUH
#define GPT_CUDA_FLASH_TC_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "cuda_impl.h" /* first: it makes the engine's C headers C++-safe */
#include "cuda_backend.h"
#include "flash_tc.h"

#define FA_WARP 32
#define FA_FULL 0xffffffffu
/* Dynamic shared memory above this needs an explicit opt-in per kernel. */
#define FA_SMEM_DEFAULT (48u * 1024u)

/*
 * Fragment layouts (PTX ISA, "mma.m16n8k16", for lane l, g = l / 4 the
 * row group, c = 2 * (l % 4) the column pair):
 *   A (16 x 16, row-major) 4 regs of 2 bf16: a0 (g, c..c+1), a1 (g+8, c..),
 *     a2 (g, c+8..), a3 (g+8, c+8..);
 *   B (16 x 8, k x n) 2 regs: b0 (k = c..c+1, n = g), b1 (k = c+8.., n = g);
 *   C (16 x 8, fp32) 4 floats: c0, c1 (g, c..c+1), c2, c3 (g+8, c..c+1).
 * The low 16 bits of a register hold the lower column. Two C tiles side by
 * side (columns n0 .. n0+15) are therefore exactly one A fragment of the
 * next product over those columns (tc_pack_a): P and dS never leave the
 * registers.
 *
 * Shared-memory tiles are row-major bf16 with rows of hs + PAD elements.
 * ldmatrix .x4 reads four 8x8 matrices; lane l gives the address of row
 * l % 8 of matrix l / 8 and receives, of matrix i, register i (its row g,
 * columns c..c+1; transposed with .trans). The four address patterns
 * (offsets in flash_tc.h, replayed by test_flash_tc's fragment test):
 *   tc_ld_a   A operand from a (rows m, cols k) tile: matrix order
 *             (m0, k0) (m0+8, k0) (m0, k0+8) (m0+8, k0+8) = a0 a1 a2 a3;
 *   tc_ld_b   B operands of two n-tiles from an (n, k) tile (K for Q K^T):
 *             (n0, k0) (n0, k0+8) (n0+8, k0) (n0+8, k0+8) = b0 b1 of n-tile
 *             n0, then b0 b1 of n-tile n0 + 8;
 *   tc_ld_bt  the same two n-tiles from a (k, n) tile (V for P V), with
 *             .trans: (k0, n0) (k0+8, n0) (k0, n0+8) (k0+8, n0+8);
 *   tc_ld_at  A from a (k, m) tile with .trans (dS from the dS^T that the
 *             backward stores, gpt_flash_tc_st_a_off).
 */

#define TC_THREADS     (GPT_FLASH_TC_WARPS * FA_WARP) /* backward */
#define TC_BR          GPT_FLASH_TC_BR
#define TC_FWD_THREADS (GPT_FLASH_TC_FWD_WARPS * FA_WARP)
#define TC_FWD_BR      GPT_FLASH_TC_FWD_BR
#define TC_BC          GPT_FLASH_TC_BC
#define TC_WR          GPT_FLASH_TC_WROWS

__device__ __forceinline__ uint32_t tc_saddr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void tc_ldsm(uint32_t r[4], const uint16_t *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(tc_saddr(p)));
}

__device__ __forceinline__ void tc_ldsm_t(uint32_t r[4], const uint16_t *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(tc_saddr(p)));
}

/* A fragment of rows m0..m0+15, columns k0..k0+15 of tile s (row stride ld). */
__device__ __forceinline__ void tc_ld_a(uint32_t a[4], const uint16_t *s, int ld, int m0, int k0)
{
    const int l = threadIdx.x % FA_WARP;
    tc_ldsm(a, s + gpt_flash_tc_ld_a_off(l, ld, m0, k0));
}

/* B fragments of n-tiles n0 (b[0], b[1]) and n0 + 8 (b[2], b[3]), k0..k0+15,
 * from a tile stored (n, k). */
__device__ __forceinline__ void tc_ld_b(uint32_t b[4], const uint16_t *s, int ld, int n0, int k0)
{
    const int l = threadIdx.x % FA_WARP;
    tc_ldsm(b, s + gpt_flash_tc_ld_b_off(l, ld, n0, k0));
}

/* The same from a tile stored (k, n), transposed by ldmatrix. */
__device__ __forceinline__ void tc_ld_bt(uint32_t b[4], const uint16_t *s, int ld, int k0, int n0)
{
    const int l = threadIdx.x % FA_WARP;
    tc_ldsm_t(b, s + gpt_flash_tc_ld_bt_off(l, ld, k0, n0));
}

/* The A fragment of rows m0..m0+15, columns k0..k0+15 from a tile stored
 * (k, m) (dS^T for dQ = dS K), transposed by ldmatrix: matrices (k0, m0)
 * (k0, m0+8) (k0+8, m0) (k0+8, m0+8) = a0 a1 a2 a3. */
__device__ __forceinline__ void tc_ld_at(uint32_t a[4], const uint16_t *s, int ld, int m0, int k0)
{
    const int l = threadIdx.x % FA_WARP;
    tc_ldsm_t(a, s + gpt_flash_tc_ld_at_off(l, ld, m0, k0));
}

/* The dQ turn counters: an acquire load (this thread's later reads see
 * what the releasing block wrote before its release) and a release store,
 * both at GPU scope. */
__device__ __forceinline__ int tc_ld_acquire(const int *p)
{
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void tc_st_release(int *p, int v)
{
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

/* c += a b, one m16n8k16 tile. Not volatile: a pure function of its
 * registers, so the compiler may schedule the (volatile, hence ordered
 * after each barrier) ldmatrix loads ahead of it. */
__device__ __forceinline__ void tc_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Zeroes N mma accumulator fragments (four floats each). */
template <int N> __device__ __forceinline__ void tc_zero(float (&c)[N][4])
{
#pragma unroll
    for (int n = 0; n < N; n++)
        c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.0f;
}

/* Two floats as bf16x2, round to nearest even; lo in the low half. */
__device__ __forceinline__ uint32_t tc_pack(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* The A fragment over columns 16 kk .. 16 kk + 15 of a row of C tiles. */
__device__ __forceinline__ void tc_pack_a(uint32_t a[4], const float (*c)[4], int kk)
{
    a[0] = tc_pack(c[2 * kk][0], c[2 * kk][1]);
    a[1] = tc_pack(c[2 * kk][2], c[2 * kk][3]);
    a[2] = tc_pack(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[3] = tc_pack(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

/* The dot product of two bf16 pairs (low halves first), in fp32. */
__device__ __forceinline__ float tc_dot2(uint32_t a, uint32_t b)
{
    return __uint_as_float(a << 16) * __uint_as_float(b << 16) +
           __uint_as_float(a & 0xffff0000u) * __uint_as_float(b & 0xffff0000u);
}

/* Rows t0 .. t0+rows-1 of a bf16 matrix (row t at src + t * stride,
 * columns 0 .. HS-1) into s (row stride HS + PAD) with cp.async, 16 bytes
 * per copy; rows at or past T are zero-filled (source size 0, the address
 * is then only formed, never read). */
template <int HS>
__device__ __forceinline__ void tc_load(uint16_t *s, const uint16_t *src, size_t stride, int t0,
                                        int rows, int T)
{
    constexpr int CH = HS / 8, LD = HS + GPT_FLASH_TC_PAD;
    for (int idx = threadIdx.x; idx < rows * CH; idx += blockDim.x) {
        int r = idx / CH, c = idx - r * CH, t = t0 + r;
        const uint16_t *g = src + (size_t)(t < T ? t : 0) * stride + c * 8;
        asm volatile(
            "cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(tc_saddr(s + r * LD + c * 8)),
            "l"(g), "r"(t < T ? 16 : 0)
            : "memory");
    }
}

__device__ __forceinline__ void tc_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Waits until at most N committed groups are still in flight. */
template <int N> __device__ __forceinline__ void tc_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ float tc_quad_max(float v)
{
    v = fmaxf(v, __shfl_xor_sync(FA_FULL, v, 1));
    return fmaxf(v, __shfl_xor_sync(FA_FULL, v, 2));
}

__device__ __forceinline__ float tc_quad_sum(float v)
{
    v += __shfl_xor_sync(FA_FULL, v, 1);
    return v + __shfl_xor_sync(FA_FULL, v, 2);
}

/* Stores one row pair (columns col, col + 1) of an fp32 result, and its
 * bf16 copy when bf is non-NULL. */
/* A pair of outputs to f (fp32; NULL: the output is bf16 only) and bf. */
__device__ __forceinline__ void tc_store2(float *f, uint16_t *bf, size_t at, float x, float y)
{
    if (f)
        *(float2 *)(f + at) = make_float2(x, y);
    if (bf)
        *(uint32_t *)(bf + at) = tc_pack(x, y);
}

/* The top of a key-tile loop (the forward's and the dQ pass's): tile kt's
 * K and V sit in stage (kt - kt0) & 1 of skv (K, then V, TILE = BC rows
 * each); this prefetches tile kt + 1 into the other stage with cp.async,
 * waits for tile kt's copies (the one group before the newest, or all at
 * the last tile) and for every thread's (__syncthreads), and returns tile
 * kt's K. The caller ends each tile with a barrier, so a stage is
 * consumed before it is refilled. */
template <int HS>
__device__ __forceinline__ const uint16_t *tc_kv_stage(uint16_t *skv, const uint16_t *gk,
                                                       const uint16_t *gv, size_t ld3, int kt,
                                                       int kt0, int nkt, int T)
{
    constexpr int TILE = TC_BC * (HS + GPT_FLASH_TC_PAD);
    const int st = (kt - kt0) & 1;
    if (kt + 1 < nkt) {
        uint16_t *nk = skv + 2 * (st ^ 1) * TILE;
        tc_load<HS>(nk, gk, ld3, (kt + 1) * TC_BC, TC_BC, T);
        tc_load<HS>(nk + TILE, gv, ld3, (kt + 1) * TC_BC, TC_BC, T);
        tc_commit();
        tc_wait<1>();
    } else {
        tc_wait<0>();
    }
    __syncthreads();
    return skv + 2 * st * TILE;
}

/* Whether the 16-key group at j0 holds a valid pair for any of the MT
 * m-tiles (16 rows from rt[t] each): the products of a K or V fragment
 * that no m-tile needs are skipped, its load with them. */
template <int MT> __device__ __forceinline__ bool tc_any_live(const int *rt, int j0, int T)
{
    bool any = false;
#pragma unroll
    for (int t = 0; t < MT; t++)
        any |= gpt_flash_tc_live(rt[t], j0, T);
    return any;
}

/* The dQ pass's row terms for the warp whose 16 rows start at w0 (lane
 * l holds rows ia = w0 + l / 4 and ib = ia + 8): D = dO . O of each row
 * (stored to Dg + at0 for the dK/dV pass; 0 past T) into dr, and the
 * logsumexp in log2 units into lr. Lane l sums half of row w0 + l / 2
 * (HS / 2 columns from (l % 2) HS / 2); rows ia and ib are then lanes
 * 2 (l / 4) and 2 (l / 4) + 16. The pointers are 16-byte aligned: dob
 * and out's copy are (tc_backward_ok), C and h HS are multiples of 32. */
template <int HS>
__device__ __forceinline__ void tc_dq_rows(float dr[2], float lr[2], float *Dg, const uint16_t *gdo,
                                           const uint16_t *go, const float *lse, size_t at0, int w0,
                                           int T, int C)
{
    const int lane = threadIdx.x % FA_WARP, i = w0 + lane / 2, ia = w0 + lane / 4, ib = ia + 8;
    float d = 0.0f;
    if (i < T) {
        const size_t at = (size_t)i * C + (lane % 2) * (HS / 2);
        const uint4 *x = (const uint4 *)(gdo + at), *y = (const uint4 *)(go + at);
#pragma unroll
        for (int c = 0; c < HS / 16; c++) {
            const uint4 u = x[c], v = y[c];
            d += tc_dot2(u.x, v.x) + tc_dot2(u.y, v.y) + tc_dot2(u.z, v.z) + tc_dot2(u.w, v.w);
        }
    }
    d += __shfl_xor_sync(FA_FULL, d, 1);
    if (lane % 2 == 0 && i < T)
        Dg[at0 + i] = d;
    dr[0] = __shfl_sync(FA_FULL, d, 2 * (lane / 4));
    dr[1] = __shfl_sync(FA_FULL, d, 2 * (lane / 4) + 16);
    lr[0] = ia < T ? lse[at0 + ia] * GPT_FLASH_LOG2E : 0.0f;
    lr[1] = ib < T ? lse[at0 + ib] * GPT_FLASH_LOG2E : 0.0f;
}

/* A dQ pass's rows ia and ia + 8 (those below T) into dq's columns of
 * head h (rows b T + i of dqkv, row stride ld3), times scale: acc holds
 * the lane's accumulators, 8-column block n at acc[4 n ..] (the mma and
 * the wgmma layouts alike: rows ia, ib in elements 0, 1 and 2, 3). NC
 * columns from the head's column c0 (a warp's share of them). */
template <int HS, int NC = HS>
__device__ __forceinline__ void tc_store_dq(float *dqkv, uint16_t *dqkv_bf, const float *acc,
                                            size_t row0, int ia, int T, size_t ld3, int h,
                                            float scale, int c0 = 0)
{
    const int lane = threadIdx.x % FA_WARP;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = ia + 8 * r;
        if (row >= T)
            continue;
        const size_t at = (row0 + row) * ld3 + (size_t)h * HS + c0 + 2 * (lane % 4);
#pragma unroll
        for (int n = 0; n < NC / 8; n++)
            tc_store2(dqkv, dqkv_bf, at + n * 8, acc[4 * n + 2 * r] * scale,
                      acc[4 * n + 2 * r + 1] * scale);
    }
}

/* A dK/dV pass's key rows ja and ja + 8 (those below T) into dk (times
 * scale) and dv, head h's columns, as tc_store_dq lays the
 * accumulators out. */
template <int HS>
__device__ __forceinline__ void tc_store_dkv(float *dqkv, uint16_t *dqkv_bf, const float *dk,
                                             const float *dv, size_t row0, int ja, int T,
                                             size_t ld3, int C, int h, float scale)
{
    const int lane = threadIdx.x % FA_WARP;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = ja + 8 * r;
        if (row >= T)
            continue;
        const size_t at = (row0 + row) * ld3 + (size_t)h * HS + 2 * (lane % 4);
#pragma unroll
        for (int n = 0; n < HS / 8; n++) {
            tc_store2(dqkv, dqkv_bf, at + C + n * 8, dk[4 * n + 2 * r] * scale,
                      dk[4 * n + 2 * r + 1] * scale);
            tc_store2(dqkv, dqkv_bf, at + 2 * (size_t)C + n * 8, dv[4 * n + 2 * r],
                      dv[4 * n + 2 * r + 1]);
        }
    }
}

/* Raises kernel's dynamic shared-memory limit to smem where that is above
 * the default; the error of a refusal. */
template <typename K> static cudaError_t fa_smem_optin(K *kernel, size_t smem)
{
    if (smem <= FA_SMEM_DEFAULT)
        return cudaSuccess;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
}

/* The warpgroup kernels' launchers (cuda_attention_wg.cu, head size 64;
 * the caller checks gpt_cuda_flash_wg_live first): the forward, and the
 * two-pass backward's dQ and dK/dV passes, for bh (batch x head) pairs.
 * The arguments are the mma.sync kernels'; dout non-NULL: dob is made
 * from it first (bf16, after the opt-ins). Each returns a refused
 * shared-memory opt-in's error with nothing launched; launch errors are
 * left for cudaGetLastError. */
cudaError_t cuk_flash_wg_forward(cudaStream_t s, unsigned bh, float *out, uint16_t *out_bf,
                                 float *lse, const uint16_t *qkv, int T, int C, int NH,
                                 float scale2);
cudaError_t cuk_flash_wg_backward(cudaStream_t s, unsigned bh, float *dqkv, uint16_t *dqkv_bf,
                                  float *Dv, uint16_t *dob, const float *dout,
                                  const uint16_t *out_bf, const uint16_t *qkv, const float *lse,
                                  int T, int C, int NH, float scale, float scale2);

#endif
