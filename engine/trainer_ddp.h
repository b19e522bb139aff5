/*
 * trainer_ddp: data-parallel gradient all-reduce for the trainer (private to
 * engine/trainer*.c). On the last micro-batch of a step the model reports
 * finished gradient spans (its grads_ready hook); a communication thread
 * all-reduces (averages) them in the order they come while the backward carries
 * on with earlier layers. On a device the hook marks the compute stream as each
 * span is enqueued (gpt_comm_mark_ready) and the span's collective waits for
 * that mark only, so buckets reduce while the backward still runs; the
 * optimizer waits once, in trainer_ddp_wait. Between trainer_ddp_arm and the
 * matching trainer_ddp_wait the communication thread owns the communicator;
 * otherwise the worker thread does.
 */
#ifndef GPT_TRAINER_DDP_H
#define GPT_TRAINER_DDP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "model.h"

#define TRAINER_DDP_QUEUE_MAX (2 * GPT_MAX_TENSORS)

/* Gradient buckets waiting for the communication thread. Embedded in the
 * trainer; zeroed before trainer_ddp_start. */
struct trainer_ddp {
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct gpt_comm *comm;
    enum gpt_comm_dtype dtype; /* what the all-reduce carries (distributed.grad_reduce) */
    float *grads;
    bool armed; /* true during the last micro-batch's backward */
    bool quit;
    size_t head, tail; /* queue of spans [head, tail) */
    size_t off[TRAINER_DDP_QUEUE_MAX], count[TRAINER_DDP_QUEUE_MAX];
    bool busy; /* the thread is reducing a span */
    int error;
};

/* One rank's part of an optimizer step of trainer.global_batch sequences:
 * samples [first, first + count) of the step's global batch
 * (gpt_data_rank_range: whole sequences, counts differ by at most one), run
 * as `accum` micro-batches. accum is the same on every rank, since full
 * sharding runs collectives in every micro-batch and data parallelism arms
 * the all-reduce on the last one: ceil(ceil(global / world) / micro). */
struct trainer_batch {
    uint64_t first, count;
    int accum;
};

/* Plans rank `rank` of `world`. Returns 0, or -EINVAL when global < world
 * (a rank would have no sequence) or an argument is out of range. Pure. */
int trainer_batch_plan(int global, int micro, int world, int rank, struct trainer_batch *ret);

/* Micro-batch k (0 <= k < accum) of the plan: its size and, in
 * *ret_first, its first sample in the step's global batch. The rank's
 * count is split as evenly as it goes, so every size is at most
 * micro_batch and may be smaller; it is 0 only with micro_batch 1 on a
 * rank one sequence short (see trainer_batch_scale). Pure. */
size_t trainer_batch_micro(const struct trainer_batch *b, int k, uint64_t *ret_first);

/* The backward's loss scale of a micro-batch of `size` sequences, whose
 * loss is the mean over them: size x world / global, so that after the
 * world-average all-reduce the gradient is the mean over the global batch
 * (each sequence weighs 1/global whatever rank ran it). Pure. */
float trainer_batch_scale(size_t size, int world, int global);

/* The ready slot (gpt_comm_mark_ready) of the seq-th span queued since
 * start, and how many spans may be queued and not yet reduced at once
 * (the hook waits beyond that). Pure; exposed for the unit test. */
unsigned trainer_ddp_slot(size_t seq);
size_t trainer_ddp_in_flight_max(void);

/* The all-reduce's wire dtype for distributed.grad_reduce (enum
 * gpt_grad_reduce) on a backend named `backend_name`: auto is bf16 on
 * "cuda", fp32 elsewhere. Pure. */
enum gpt_comm_dtype trainer_ddp_dtype(int grad_reduce, const char *backend_name);

/* Starts the communication thread over `comm` (borrowed), reducing in
 * `dtype`, and hooks it to `model`'s grads_ready. Returns 0 or -EAGAIN (no
 * thread; nothing to stop). Worker thread. */
int trainer_ddp_start(struct trainer_ddp *d, struct gpt_comm *comm, enum gpt_comm_dtype dtype,
                      struct gpt_model *model);

/* From now until trainer_ddp_wait, spans the model reports are reduced.
 * Worker thread, before the last micro-batch's backward. */
void trainer_ddp_arm(struct trainer_ddp *d);

/* Blocks until every queued span is reduced (the collectives issued, then
 * waited for together: gpt_comm_wait_after) and disarms; returns 0 or the
 * first collective error (sticky: later spans are not reduced). Worker
 * thread. */
int trainer_ddp_wait(struct trainer_ddp *d);

/* Ends and joins the communication thread; no-op when not started. Worker
 * thread. */
void trainer_ddp_stop(struct trainer_ddp *d);

#endif
