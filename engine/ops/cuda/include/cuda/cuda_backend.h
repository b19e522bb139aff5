/*
 * cuda_backend: the GPU implementation of struct gpt_backend_ops (fp32
 * through the vtable). Matrix products go to cuBLASLt (bias fused as an
 * epilogue) with a cuBLAS fallback, attention to strided-batched cuBLAS
 * GEMMs around fused causal-softmax kernels, everything else to our own
 * kernels (cuda_kernels.cu). One compute stream (every op, in call order)
 * and one communication stream (for the NCCL communicator) per backend;
 * ops never synchronise the host except download, sync and sumsq, as
 * backend.h says (gpt_cuda_backend_host_syncs counts them); the
 * step-on-device ops keep a training step's loss, norm and clip factor
 * on the device. CUDA and cuBLAS failures inside ops are recorded as a
 * sticky error that gpt_backend_sync() (and download/sumsq) report.
 *
 * This header includes no CUDA header, so C code built without CUDA can
 * still see the declarations (the functions exist only when the gptcuda
 * target is linked, i.e. when GPTD_HAVE_CUDA is defined).
 *
 * Precision: fp32 storage and fp32 accumulation. Matrix products use full
 * fp32 until set_precision is called; set_precision(fp32) turns TF32
 * tensor cores on (10-bit mantissa inputs, fp32 accumulation) unless
 * GPT_BACKEND_PREC_NO_TF32 is or'd in (trainer.tf32: false). TF32 is off
 * at creation, so results track the CPU backend closely. In bf16 mode (the vtable's
 * set_precision with bf16 or auto, i.e. trainer.precision: bf16 or the
 * default auto) every buffer of the
 * interface stays fp32 (master weights, moments, gradients, statistics,
 * loss), and the backend keeps bf16 shadows of the weights and of the
 * activations that matrix products and attention read, which run on bf16
 * tensor cores with fp32 accumulation; AdamW refreshes the weights' bf16
 * copy, rounded to nearest. cuda_backend.cu's header comment
 * has the rules that keep the shadows current.
 *
 * Attention: the fused flash kernels when gpt_cuda_plan_attention allows
 * (the default), else batched GEMMs. With flash, the `att` buffer holds the
 * per-row logsumexp instead of probabilities, so the backward must get the
 * att and the out its own forward wrote (as the model does).
 * In bf16 mode with head size 32, 64, 96 or 128 the flash kernels run on tensor
 * cores (engine/ops/flash_tc.h), elsewhere on CUDA cores in fp32.
 */
#ifndef GPT_CUDA_BACKEND_H
#define GPT_CUDA_BACKEND_H

#include <stddef.h>

#include <stdint.h>

#include "backend.h"
#include "cuda_plan.h"
#include "gpt_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the CUDA backend on GPU `device` (0-based, CUDA_VISIBLE_DEVICES
 * respected): makes it the calling thread's current device, creates the two
 * streams, the cuBLAS/cuBLASLt handles and a workspace. Returns
 * -GPT_E_NODEVICE when the host has no usable GPU or driver (never
 * crashes), -EINVAL for a device index out of range, -GPT_E_CUDA for other
 * runtime failures. Returns new; free with gpt_backend_free. Any thread,
 * but the backend is then used by one thread at a time; blocks for the
 * context creation (up to seconds on the first call in a process). */
int gpt_backend_cuda_new(int device, const struct gpt_backend_opts *o, struct gpt_backend **ret,
                         struct gpt_err *err);

/* True when `be` is a CUDA backend. */
int gpt_backend_is_cuda(const struct gpt_backend *be);

/* Device memory this backend holds now and the most it held since
 * creation, in bytes (buffers from alloc plus its own workspaces). Owner
 * thread; does not block. */
void gpt_cuda_backend_mem_stats(const struct gpt_backend *be, size_t *ret_bytes,
                                size_t *ret_peak_bytes);

/* Per-op GPU times, to calibrate the step cost model (bench_gpu_train):
 * from _start until _stop, each op (at most max_ops of them) records a CUDA
 * event on the compute stream as it begins; an op's time is the gap to the
 * next op's event (to _stop's for the last), so it covers every kernel,
 * GEMM and memset the op enqueued, and any idle gap while the host was
 * late. The events are made in _start, so the profiled ops allocate
 * nothing. _stop synchronises, calls fn(ctx, op, ms) for each op in order
 * (op: the backend function's name, e.g. "cuda_matmul_forward") and frees
 * the events. Owner thread. Both return 0 or -GPT_E_CUDA (-EINVAL: _start
 * twice, or _stop without _start; -ENOMEM). */
int gpt_cuda_backend_profile_start(struct gpt_backend *be, size_t max_ops);
int gpt_cuda_backend_profile_stop(struct gpt_backend *be,
                                  void (*fn)(void *ctx, const char *op, double ms), void *ctx);

/* The device ordinal of the backend. */
int gpt_cuda_backend_device(const struct gpt_backend *be);

/* The backend's streams as cudaStream_t values (void * here so that this
 * header needs no CUDA include). Borrowed; valid until the backend is
 * freed. The communicator uses them to order collectives after compute. */
void *gpt_cuda_backend_compute_stream(const struct gpt_backend *be);
void *gpt_cuda_backend_comm_stream(const struct gpt_backend *be);

/* The first failure recorded by an op (empty when none): what failed and
 * the CUDA/cuBLAS message, for the detail of a -GPT_E_CUDA from sync.
 * Borrowed; valid until the backend is freed. Owner thread. */
const char *gpt_cuda_backend_last_error(const struct gpt_backend *be);

/* Host synchronisations with the compute stream so far: every sync,
 * download and sumsq (each waits for all the work enqueued). Tests count
 * them per training step. Owner thread; does not block. */
uint64_t gpt_cuda_backend_host_syncs(const struct gpt_backend *be);

/* GPT_CUDA_ATTN_FLASH (default: the fused kernels wherever the plan allows
 * them) or GPT_CUDA_ATTN_GEMM (always the batched GEMMs, whose att holds
 * the probabilities). Change it only between a backward and the next
 * forward. Owner thread; does not block. */
void gpt_cuda_backend_set_attention(struct gpt_backend *be, enum gpt_cuda_attn_kind want);

/* The plan attention of this shape runs with now. Any thread. */
void gpt_cuda_backend_attention_plan(const struct gpt_backend *be, size_t B, size_t T, size_t C,
                                     size_t NH, struct gpt_cuda_attn_plan *ret);

/* Tensor-core flash attention passes (a forward or a whole backward each)
 * launched in this process, by any backend: tests use it to know the bf16
 * fast path ran rather than the CUDA-core fallback. Any thread. */
uint64_t gpt_cuda_flash_tc_launches(void);
/* Of those, the passes cuDNN ran (trainer.attention_forward/_backward cudnn where
 * libcudnn.so.9 loaded and took the shape): tests tell a cuDNN pass from
 * the hand-written fallback by it. Any thread. */
uint64_t gpt_cuda_flash_dnn_launches(void);
/* For tests: the attention kernels' variants from now on, whatever the
 * backends were made with (enum gpt_flash_bwd and enum gpt_flash_fwd in
 * flash_tc.h); -1: each backend's own (trainer.attention_*). Not for use
 * while kernels are being launched from another thread. */
void gpt_cuda_flash_tc_set_variants(int bwd, int fwd);
/* For tests: at most `heads` (b, h) pairs per chunk of the dS backward
 * (attention_backward ds), as when their tiles pass the 1 GiB reserve; 0:
 * as many as the reserve holds. The same caveat. */
void gpt_cuda_flash_tc_set_ds_chunk(size_t heads);
/* 1 when the driver loaded the sm_90a build of the attention kernels, so
 * attention_forward wg runs the warpgroup (wgmma) forward; 0 and it runs the
 * default. Asked of the GPU once (a probe kernel and a synchronous copy
 * on the default stream). Any thread. */
int gpt_cuda_flash_wg_live(void);

/* 1 when some of the device floats [ptr, ptr + bytes) are held only in
 * bf16 now (bf16 mode: a product, LayerNorm or the classifier wrote them
 * as bf16 only; every fp32 reader, a download included, converts them
 * back first). Tests use it. Owner thread. */
int gpt_cuda_backend_bf16_only(const struct gpt_backend *be, const void *ptr, size_t bytes);

/* Device memory [ptr, ptr + bytes) was written other than by this
 * backend's ops (a collective): its bf16 shadows stop being current there.
 * Any thread (the communication thread does this); does not block. */
void gpt_cuda_backend_note_write(struct gpt_backend *be, const void *ptr, size_t bytes);

/* n device floats to bf16 (round to nearest even) and back, enqueued on
 * `stream` (a cudaStream_t): the communicator's bf16 all-reduce, on its
 * own stream. They touch no backend state. Return 0, or -GPT_E_CUDA when
 * the launch failed (the runtime's last error cleared). Any thread; do
 * not block. */
int gpt_cuda_f32_to_bf16(void *stream, uint16_t *dst, const float *src, size_t n);
int gpt_cuda_bf16_to_f32(void *stream, float *dst, const uint16_t *src, size_t n);

#ifdef __cplusplus
}
#endif

#endif
