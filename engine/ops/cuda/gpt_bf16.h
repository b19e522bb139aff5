/*
 * gpt_bf16: bfloat16 conversions shared by the CUDA kernels and the host
 * (unit tests, reference code). Plain C99 that nvcc also compiles as
 * __host__ __device__ inline functions, so the rounding a test checks on
 * the CPU is the very code the GPU runs. bf16 values travel as uint16_t
 * bit patterns (the C side has no __nv_bfloat16).
 *
 *   gpt_bf16_from_float_rne     round to nearest, ties to even (IEEE default)
 *   gpt_bf16x2_from_floats_rne  the same for a pair, packed (one instruction
 *                               on the device)
 *
 * NaN stays NaN (quietened, sign kept), +-Inf stays +-Inf, and finite
 * values that round past the largest finite bf16 become Inf, as in IEEE.
 * Pure functions; any thread.
 */
#ifndef GPT_BF16_H
#define GPT_BF16_H

#include <stdint.h>
#ifndef __CUDA_ARCH__
#include <string.h>
#endif

#ifdef __CUDACC__
#define GPT_BF16_FN static __host__ __device__ __forceinline__
#else
#define GPT_BF16_FN static inline
#endif

GPT_BF16_FN uint32_t gpt_bf16_f2u(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
#endif
}

GPT_BF16_FN float gpt_bf16_u2f(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
#endif
}

GPT_BF16_FN float gpt_bf16_to_float(uint16_t h)
{
    return gpt_bf16_u2f((uint32_t)h << 16);
}

GPT_BF16_FN int gpt_bf16_is_nan_bits(uint32_t u)
{
    return (u & 0x7fffffffu) > 0x7f800000u;
}

/* Round to nearest even: add 0x7fff plus the lowest kept bit, truncate.
 * Inf has zero low bits and stays Inf; NaN is made quiet explicitly so a
 * payload in the low bits cannot carry into the exponent. */
GPT_BF16_FN uint16_t gpt_bf16_from_float_rne(float f)
{
    uint32_t u = gpt_bf16_f2u(f);
    if (gpt_bf16_is_nan_bits(u))
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Two floats as a bf16 pair, lo in the low half, each rounded as
 * gpt_bf16_from_float_rne rounds it. On the device (sm_80 and later) one
 * cvt.rn.bf16x2.f32 (the upper half from its first operand) instead of
 * two software roundings of ~7 instructions each, which showed in the
 * compute-bound kernels (the cross-entropy's write pass): the same IEEE
 * round to nearest even, subnormals kept, so the same bits for every
 * input but NaN, which becomes the canonical quiet NaN there. */
GPT_BF16_FN uint32_t gpt_bf16x2_from_floats_rne(float lo, float hi)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return (uint32_t)gpt_bf16_from_float_rne(lo) | (uint32_t)gpt_bf16_from_float_rne(hi) << 16;
#endif
}

#endif
