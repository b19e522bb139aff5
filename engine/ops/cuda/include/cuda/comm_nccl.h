/*
 * comm_nccl: the NCCL implementation of struct gpt_comm_ops (engine/comm.h)
 * for the CUDA backend. Built into the gptcuda target only.
 */
#ifndef GPT_COMM_NCCL_H
#define GPT_COMM_NCCL_H

#include "backend.h"
#include "comm.h"

/* Joins the world described by `o` on GPU `device`: rank 0 creates the NCCL
 * unique id and publishes it under o->prefix + "nccl_id" through kv->set,
 * the others kv->get it (waiting up to the timeout; o->cancelled ends the
 * wait); then a non-blocking
 * communicator is created and polled until every rank has joined. Returns
 * -GPT_E_NODEVICE without a GPU, -ETIMEDOUT when the world did not form
 * within o->timeout_ms (0 = 300000), -GPT_E_NCCL / -GPT_E_CUDA on library
 * failures. Returns new; free with gpt_comm_free. Blocks; call it from the
 * worker thread that will use the communicator.
 *
 * Buffers may be device memory (the normal case) or host memory (small
 * control values such as the trainer's status words), which is staged
 * through a device buffer. Every collective blocks until the result is in
 * `buf`, polling NCCL's async error, the abort flag and the timeout (from
 * the start of the collective), backing off to GPT_NCCL_POLL_MAX_NS (50 us, cuda_plan.h). */
int gpt_comm_nccl_new(const struct gpt_comm_opts *o, const struct gpt_kv *kv, int device,
                      struct gpt_comm **ret, struct gpt_err *err);

/* Orders this communicator after the compute stream of CUDA backend `be`
 * and runs its collectives on be's communication stream: each collective
 * first records an event on the compute stream and makes the comm stream
 * wait for it, so gradients enqueued before the call are complete when
 * NCCL reads them, without a host sync. Without a binding a collective
 * synchronises the whole device first (correct, but no overlap). `be` must
 * be a CUDA backend on the same device and outlive the communicator.
 * Returns 0 or -EINVAL. Owner thread, no collective in flight. */
int gpt_comm_nccl_bind_backend(struct gpt_comm *c, struct gpt_backend *be);

/* The host-staged communicator's way into CUDA backend `be`'s memory
 * (comm.h's struct gpt_comm_stager), for when NCCL does not form: copies
 * on be's communication stream, device-to-host after a wait for the
 * compute stream, host-to-device finished before the call returns (and
 * the range's bf16 shadows marked stale). `be` must outlive the
 * communicator. Any thread; does not block. */
void gpt_cuda_stager(struct gpt_backend *be, struct gpt_comm_stager *ret);

/* The NCCL library's version code (ncclGetVersion: 22105 is 2.21.5), 0
 * when it cannot say. Any thread; does not block. */
int gpt_comm_nccl_version(void);

/* Detail of the failure that made the communicator unusable ("" when
 * none). Borrowed, valid until free. Owner thread. */
const char *gpt_comm_nccl_last_error(const struct gpt_comm *c);

#endif
