/*
 * cpu_impl: private declarations shared by the CPU backend's files
 * (cpu_backend.c: lifecycle, memory, optimizer ops; cpu_ops.c: the
 * layer ops; cpu_attention.c: attention). Not part of the engine API.
 */
#ifndef GPT_CPU_IMPL_H
#define GPT_CPU_IMPL_H

#include <stdint.h>
#include <string.h>

#include "backend.h"

/* Element-wise kernels get an x86-64-v3 clone (AVX2 + FMA) picked at load
 * time (ifunc), so a generic -O2 build still runs 8-wide with fused
 * multiply-adds on the machines we train on. (Not "avx2" alone: it leaves
 * out FMA. Not "arch=haswell": its resolver tests the CPU model and AMD
 * never matches; gcc 12 resolves "arch=x86-64-v3" by feature bits.)
 * Sanitizer builds go without: their instrumented ifunc resolvers run
 * before the sanitizer runtime is ready. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define GPT_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define GPT_CPU_CLONES
#endif

/* Kernels hand-written for AVX2 + FMA (where a plain loop does not
 * vectorise) are picked at run time with gpt_cpu_has_avx2_fma(). */
#if defined(__x86_64__) && defined(__GNUC__)
#define GPT_CPU_X86_DISPATCH 1
#include <immintrin.h>
static inline int gpt_cpu_has_avx2_fma(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
#define GPT_CPU_X86_DISPATCH 0
#endif

/* Loops with clamps (a < b ? a : b on floats) only vectorise when the
 * compiler may ignore FP exception flags, which nothing here reads. This
 * applies to every function of the files that include this header. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

/* Minimum elements per thread before an element-wise loop goes parallel. */
#define GPT_CPU_PAR_MIN 16384

/* exp(x) for x in [-87, 88] with ~2 ulp error, branch-free so that loops
 * calling it vectorise (Cephes polynomial, 2^n built in the exponent bits). */
static inline float gpt_cpu_expf(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    /* Round to nearest by adding 1.5 * 2^23: no floorf call, which plain
     * SSE2 cannot vectorise. */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    return p * s;
}

/* tanh(x) = 1 - 2 / (exp(2x) + 1); absolute error ~1e-7. */
static inline float gpt_cpu_tanhf(float x)
{
    return 1.0f - 2.0f / (gpt_cpu_expf(2.0f * x) + 1.0f);
}

void gpt_cpu_encoder_forward(struct gpt_backend *be, float *out, const int *inp, const float *wte,
                             const float *wpe, size_t B, size_t T, size_t C);
void gpt_cpu_encoder_backward(struct gpt_backend *be, float *dwte, float *dwpe, const float *dout,
                              const int *inp, size_t B, size_t T, size_t C);
void gpt_cpu_layernorm_forward(struct gpt_backend *be, float *out, float *mean, float *rstd,
                               const float *inp, const float *weight, const float *bias, size_t N,
                               size_t C);
void gpt_cpu_layernorm_backward(struct gpt_backend *be, float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp, const float *weight,
                                const float *mean, const float *rstd, size_t N, size_t C);
void gpt_cpu_matmul_forward(struct gpt_backend *be, float *out, const float *inp,
                            const float *weight, const float *bias, size_t N, size_t C, size_t OC);
void gpt_cpu_matmul_backward(struct gpt_backend *be, float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *weight, size_t N,
                             size_t C, size_t OC);
void gpt_cpu_attention_forward(struct gpt_backend *be, float *out, float *att, const float *qkv,
                               size_t B, size_t T, size_t C, size_t NH);
void gpt_cpu_attention_backward(struct gpt_backend *be, float *dqkv, float *scratch,
                                const float *dout, const float *out, const float *qkv,
                                const float *att, size_t B, size_t T, size_t C, size_t NH);
void gpt_cpu_gelu_forward(struct gpt_backend *be, float *out, const float *inp, size_t n);
void gpt_cpu_gelu_backward(struct gpt_backend *be, float *dinp, const float *inp, const float *dout,
                           size_t n);
void gpt_cpu_residual_forward(struct gpt_backend *be, float *out, const float *a, const float *b,
                              size_t n);
void gpt_cpu_softmax_xent(struct gpt_backend *be, float *logits, float *losses, const int *targets,
                          size_t N, size_t V, size_t Vp, float dscale, int write_dlogits);

#endif
