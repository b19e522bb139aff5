/*
 * cuda_impl: private declarations shared by the CUDA backend's translation
 * units (cuda_backend.cu: lifecycle, memory, GEMMs, the vtable;
 * cuda_kernels.cu: our own kernels). C++ (nvcc) only; not part of the
 * engine API. Every launcher enqueues on the stream it is given and never
 * synchronises; the caller checks cudaGetLastError() afterwards.
 */
#ifndef GPT_CUDA_IMPL_H
#define GPT_CUDA_IMPL_H

#include <stddef.h>

#include <cuda_runtime.h>

/* The engine's headers are C; gpt_err.h spells the C11 _Noreturn. */
#ifndef _Noreturn
#define _Noreturn __attribute__((noreturn))
#endif
extern "C" {
#include "backend.h"
#include "cuda_plan.h"
}

/* --- cuda_kernels.cu ---------------------------------------------------- */

void cuk_encoder_forward(cudaStream_t s, float *out, const int *inp, const float *wte,
                         const float *wpe, size_t B, size_t T, size_t C);
void cuk_encoder_backward(cudaStream_t s, float *dwte, float *dwpe, const float *dout,
                          const int *inp, size_t B, size_t T, size_t C);
void cuk_layernorm_forward(cudaStream_t s, float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, size_t N, size_t C);
/* `scratch` holds `scratch_floats` floats for the two-pass parameter
 * gradient sums. */
void cuk_layernorm_backward(cudaStream_t s, float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight,
                            const float *mean, const float *rstd, size_t N, size_t C,
                            float *scratch, size_t scratch_floats);
/* out[n, :] = bias for every row n. */
void cuk_bias_broadcast(cudaStream_t s, float *out, const float *bias, size_t N, size_t OC);
/* dst[c] += sum_n src[n, c] (deterministic, two passes through scratch). */
void cuk_colsum_add(cudaStream_t s, float *dst, const float *src, size_t N, size_t C,
                    float *scratch, size_t scratch_floats);
/* Causal softmax in place over `rows` = B*NH*T rows of a (T, T) matrix
 * already scaled by 1/sqrt(hs); entries j > i are written as 0. */
void cuk_att_softmax_forward(cudaStream_t s, float *att, size_t rows, size_t T);
/* datt = att * (datt - rowsum(att * datt)) for j <= i, 0 above. */
void cuk_att_softmax_backward(cudaStream_t s, float *datt, const float *att, size_t rows, size_t T);
void cuk_gelu_forward(cudaStream_t s, float *out, const float *inp, size_t n);
void cuk_gelu_backward(cudaStream_t s, float *dinp, const float *inp, const float *dout, size_t n);
void cuk_residual_forward(cudaStream_t s, float *out, const float *a, const float *b, size_t n);
void cuk_softmax_xent(cudaStream_t s, float *logits, float *losses, const int *targets, size_t N,
                      size_t V, size_t Vp, float dscale, int write_dlogits);
void cuk_adamw(cudaStream_t s, float *params, const float *grads, float *m, float *v, size_t n,
               float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
               float bc1, float bc2);
void cuk_scale(cudaStream_t s, float *x, float sc, size_t n);
/* *result = sum of x^2 in double; `partials` holds
 * gpt_cuda_plan_sumsq_blocks(n, GPT_CUDA_BLOCK) doubles. */
void cuk_sumsq(cudaStream_t s, const float *x, size_t n, double *partials, double *result);

#endif
