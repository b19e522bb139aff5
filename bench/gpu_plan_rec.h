/*
 * gpu_plan_rec: a backend that records, instead of running, the kernels
 * and GEMMs the CUDA backend would launch for each op (name, class, unit,
 * FLOPs, DRAM bytes, shape), with the CUDA backend's own decisions (the
 * attention plan, the bf16 shadow rules). bench_gpu_train --plan runs the
 * real model code on it and prices the record on an H200 roofline
 * (cuda_plan.h). No device memory is touched: allocations are addresses in
 * a range that is never mapped.
 */
#ifndef GPTD_BENCH_GPU_PLAN_REC_H
#define GPTD_BENCH_GPU_PLAN_REC_H

#include <stddef.h>

#include "backend.h"
#include "cuda_plan.h"

#define REC_SMEM_OPTIN ((size_t)227 * 1024) /* H100/H200 opt-in shared memory per block */

/* A new recording backend (gpt_backend_destroy frees it), or NULL; it
 * records the attention backward `o` chooses (NULL: the default), as the
 * CUDA backend would run it. */
struct gpt_backend *gpu_plan_rec_new(const struct gpt_backend_opts *o);
/* The kernels recorded since the last clear, in launch order; NULL and
 * *ret_n 0 when recording ran out of memory. */
const struct gpt_cuda_kernel *gpu_plan_rec_kernels(struct gpt_backend *be, size_t *ret_n);
/* Forgets the kernels recorded so far (the allocations stay). */
void gpu_plan_rec_clear(struct gpt_backend *be);

#endif
