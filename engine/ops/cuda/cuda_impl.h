/*
 * cuda_impl: private declarations shared by the CUDA backend's translation
 * units (cuda_backend.cu: lifecycle, memory, GEMMs, the vtable;
 * cuda_kernels.cu: our own kernels; cuda_attention.cu: fused attention).
 * C++ (nvcc) only; not part of the
 * engine API. Every launcher enqueues on the stream it is given and never
 * synchronises; the caller checks cudaGetLastError() afterwards.
 */
#ifndef GPT_CUDA_IMPL_H
#define GPT_CUDA_IMPL_H

#include <stddef.h>
#include <stdint.h>

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
/* Every launcher taking a `uint16_t *..._bf` may be given NULL; otherwise
 * it also writes that output as bf16 (round to nearest even) there, at the
 * same element offsets. */
void cuk_layernorm_forward(cudaStream_t s, float *out, uint16_t *out_bf, float *mean, float *rstd,
                           const float *inp, const float *weight, const float *bias, size_t N,
                           size_t C);
/* `scratch` holds `scratch_floats` floats for the parameter gradients'
 * partial sums. One pass over dout and inp when gpt_cuda_plan_lnb_blocks
 * allows (then two tiny kernels add the blocks' partials), else a row
 * kernel and the two-pass column sums. dinp_bf as above (of the
 * accumulated dinp). */
void cuk_layernorm_backward(cudaStream_t s, float *dinp, uint16_t *dinp_bf, float *dweight,
                            float *dbias, const float *dout, const float *inp, const float *weight,
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
void cuk_gelu_forward(cudaStream_t s, float *out, uint16_t *out_bf, const float *inp, size_t n);
void cuk_gelu_backward(cudaStream_t s, float *dinp, uint16_t *dinp_bf, const float *inp,
                       const float *dout, size_t n);
void cuk_residual_forward(cudaStream_t s, float *out, const float *a, const float *b, size_t n);
/* The fused classifier: per row one online max/sum pass over the first V
 * logits, the loss, then (write_dlogits) dlogits in place over all Vp
 * columns, and their bf16 copy in dlogits_bf when it is non-NULL (the
 * operand the head's backward products read: no conversion pass). */
void cuk_softmax_xent(cudaStream_t s, float *logits, uint16_t *dlogits_bf, float *losses,
                      const int *targets, size_t N, size_t V, size_t Vp, float dscale,
                      int write_dlogits);
/* With params_bf non-NULL the new parameters are also written there as
 * bf16 with stochastic rounding, element i using the random bits
 * gpt_bf16_sr_bits(seed, stream, index0 + i). */
void cuk_adamw(cudaStream_t s, float *params, uint16_t *params_bf, const float *grads, float *m,
               float *v, size_t n, float lr, float beta1, float beta2, float eps,
               float weight_decay, float grad_scale, float bc1, float bc2, uint64_t seed,
               uint64_t stream, uint64_t index0);
/* cuk_adamw over a run of n contiguous elements made of n_spans spans
 * (gpt_cuda_adamw_table's device copy: ends, decay flags), each decayed
 * with weight_decay or not by its flag; one launch. */
void cuk_adamw_multi(cudaStream_t s, float *params, uint16_t *params_bf, const float *grads,
                     float *m, float *v, size_t n, const uint64_t *ends,
                     const uint32_t *decay_flags, size_t n_spans, float lr, float beta1,
                     float beta2, float eps, float weight_decay, float grad_scale, float bc1,
                     float bc2, uint64_t seed, uint64_t stream, uint64_t index0);
/* dst[i] = bf16(src[i]), round to nearest even. */
void cuk_f32_to_bf16(cudaStream_t s, uint16_t *dst, const float *src, size_t n);
void cuk_scale(cudaStream_t s, float *x, float sc, size_t n);
/* *result = sum of x^2 in double; `partials` holds
 * gpt_cuda_plan_sumsq_blocks(n, GPT_CUDA_BLOCK) doubles. */
void cuk_sumsq(cudaStream_t s, const float *x, size_t n, double *partials, double *result);

/* --- cuda_attention.cu --------------------------------------------------- */

/* Fused causal attention with the plan of gpt_cuda_plan_attention (kind
 * FLASH). The forward reads q, k, v from qkv_bf (bf16) when it is non-NULL,
 * else from qkv; writes out (and out_bf if non-NULL), and in att the
 * logsumexp per row followed by a copy of out. The backward needs the att
 * its forward wrote, overwrites every element of dqkv (and dqkv_bf if
 * non-NULL) and uses scratch[0 .. B*NH*T) for the rows' dout . out.
 * Return the error of the shared-memory opt-in (launch errors are left for
 * cudaGetLastError). */
cudaError_t cuk_flash_forward(cudaStream_t s, const struct gpt_cuda_attn_plan *p, float *out,
                              uint16_t *out_bf, float *att, const float *qkv,
                              const uint16_t *qkv_bf, size_t B, size_t T, size_t C, size_t NH);
cudaError_t cuk_flash_backward(cudaStream_t s, const struct gpt_cuda_attn_plan *p, float *dqkv,
                               uint16_t *dqkv_bf, float *scratch, const float *dout,
                               const float *qkv, const uint16_t *qkv_bf, const float *att, size_t B,
                               size_t T, size_t C, size_t NH);

#endif
