/*
 * cuda_kernels.cuh: what the CUDA backend's own kernels share: the files
 * cuda_kernels.cu (encoder, attention softmax, element-wise, AdamW, sums),
 * cuda_layernorm.cu (LayerNorm, column sums) and cuda_xent.cu (fused
 * softmax + cross-entropy). The grid-stride loop and the element-wise
 * grid, warp reductions and the online-softmax merge, and the loads and
 * stores of values held as fp32 or as their bf16 copy. Device code and
 * inline host helpers only; C++ (nvcc), private to those three files.
 */
#ifndef GPT_CUDA_KERNELS_CUH
#define GPT_CUDA_KERNELS_CUH

#include <math.h>
#include <stdint.h>

#include "cuda_impl.h" /* first: it makes the engine's C headers C++-safe */
#include "gpt_bf16.h"

#define WARP      32
#define ROW_WARPS 8 /* warps per block of row kernels */

/* Grid-stride index helpers (sizes may exceed 2^31). */
#define GRID_LOOP(i, n)                                                                            \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)blockDim.x * gridDim.x)

static inline unsigned ew_grid(size_t n)
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
static inline bool lnb_vec_ok(const void *const *p, int n, size_t C)
{
    if (C % 8 != 0)
        return false;
    for (int i = 0; i < n; i++)
        if ((uintptr_t)p[i] % 16 != 0)
            return false;
    return true;
}

#endif
