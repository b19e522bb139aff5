/*
 * factory: makes the engine's compute backends and communicators by kind,
 * and probes the GPUs, so that callers (the daemon, gptd run) need no CUDA
 * header and no GPTD_HAVE_CUDA. A library of its own (gptfactory): it links
 * the engine and, when CUDA is built, the CUDA target, which itself links
 * the engine (see CMakeLists.txt); this file is the only place outside
 * engine/ops/cuda that knows whether CUDA was built in.
 */
#ifndef GPT_FACTORY_H
#define GPT_FACTORY_H

#include <stddef.h>

#include "backend.h"
#include "comm.h"
#include "gpt_config.h"
#include "gpt_err.h"

/* Non-zero when this build has the CUDA backend (whether or not the host
 * has a GPU). Any thread. */
int gpt_factory_has_cuda(void);

/* Number of usable GPUs (CUDA_VISIBLE_DEVICES respected): 0 when CUDA is
 * not built in, or the host has no driver or no device. Any thread; cheap
 * after the first call; never fails. */
int gpt_device_count(void);

/* The NCCL library's version code (22105 is 2.21.5); 0 without CUDA or
 * when NCCL cannot say. Any thread; does not block. */
int gpt_nccl_version(void);

/* cuDNN's version code (91400 is 9.14.0) when it loads, for the optional
 * cuDNN attention path; 0 without CUDA or without cuDNN. Any thread; the
 * first call loads it. */
int gpt_cudnn_version(void);

/* Name (at most cap - 1 bytes, NUL-terminated) and total memory of GPU `i`
 * (0-based). Returns 0, or -GPT_E_NODEVICE when there is no such device
 * (always, without CUDA); *ret_mem_bytes and name are written only on
 * success. Any thread. */
int gpt_device_info(int i, char *name, size_t cap, size_t *ret_mem_bytes);

/* A new compute backend (enum gpt_backend_kind of gpt_config.h) with the
 * choices in `o` (backend.h's struct gpt_backend_opts; NULL: every
 * default). AUTO: CUDA when the host has a GPU, else CPU. CPU: o->threads
 * OpenMP threads (< 1 = 1), `device` ignored. CUDA: GPU `device`, made the
 * calling thread's current device, with o's attention variants;
 * -GPT_E_NODEVICE without CUDA or without that GPU. Returns 0 and *ret
 * (new; gpt_backend_free), or a negative error with err filled and *ret
 * untouched. Blocks (a CUDA context takes seconds). */
int gpt_backend_new(enum gpt_backend_kind kind, int device, const struct gpt_backend_opts *o,
                    struct gpt_backend **ret, struct gpt_err *err);

/* A new communicator of `kind` for the world in `o`:
 *   GPT_COMM_LOCAL  world of one (o->world must be 1; `o` may be NULL);
 *   GPT_COMM_TCP    gpt_comm_tcp_new (ring, shared memory on one host);
 *   GPT_COMM_NCCL   NCCL on GPU `device`, ordered after CUDA backend `be`
 *                   when `be` is given; -GPT_E_NODEVICE without CUDA;
 *   GPT_COMM_STAGED the TCP one (shared memory on one host) behind
 *                   gpt_comm_staged_new, reaching `be`'s device memory
 *                   through the host (any backend; a CPU one stages nothing);
 *   GPT_COMM_AUTO   local for a world of one; when `be` is a CUDA backend,
 *                   NCCL, or STAGED on every rank if any rank's NCCL does not
 *                   form (gpt_comm_fallback_new; gpt_comm_staged_why says
 *                   why); else TCP.
 * `kv` exchanges addresses (TCP, NCCL); `be` is borrowed and must outlive
 * the communicator. Returns 0 and *ret (new; gpt_comm_free), or a negative
 * error with err filled. Blocks until the world has formed (bounded by
 * o->timeout_ms, ended early by o->cancelled); call it from the thread that
 * will use the communicator. */
int gpt_comm_new(enum gpt_comm_kind kind, const struct gpt_comm_opts *o, const struct gpt_kv *kv,
                 int device, struct gpt_backend *be, struct gpt_comm **ret, struct gpt_err *err);

#endif
