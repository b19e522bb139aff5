/*
 * trainer_ddp: see trainer_ddp.h. ddp_thread_main runs on the
 * communication thread; everything else on the worker thread (and
 * ddp_grads_ready on whichever thread runs the model's backward).
 */
#include "trainer_ddp.h"

#include <errno.h>
#include <string.h>

#include "data.h"
#include "gpt_err.h"

int trainer_batch_plan(int global, int micro, int world, int rank, struct trainer_batch *ret)
{
    if (global < 1 || micro < 1 || world < 1 || rank < 0 || rank >= world || global < world)
        return -EINVAL;
    uint64_t largest = ((uint64_t)global + (uint64_t)world - 1) / (uint64_t)world;
    gpt_data_rank_range((uint64_t)global, world, rank, &ret->first, &ret->count);
    ret->accum = (int)((largest + (uint64_t)micro - 1) / (uint64_t)micro);
    return 0;
}

size_t trainer_batch_micro(const struct trainer_batch *b, int k, uint64_t *ret_first)
{
    GPT_ASSERT(b->accum > 0 && k >= 0 && k < b->accum);
    uint64_t a = (uint64_t)b->accum, q = b->count / a, rem = b->count % a, kk = (uint64_t)k;
    *ret_first = b->first + kk * q + (kk < rem ? kk : rem);
    return (size_t)(q + (kk < rem ? 1 : 0));
}

float trainer_batch_scale(size_t size, int world, int global)
{
    /* One correctly rounded division of integers (exact below 2^24): 1/accum
     * bit for bit, as before, when micro x world divides global. */
    return (float)(size * (size_t)world) / (float)global;
}

static void *ddp_thread_main(void *arg)
{
    struct trainer_ddp *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->quit && d->head == d->tail)
            pthread_cond_wait(&d->cv, &d->mu);
        if (d->quit)
            break;
        size_t i = d->head % TRAINER_DDP_QUEUE_MAX;
        size_t off = d->off[i], count = d->count[i];
        unsigned slot = trainer_ddp_slot(d->head);
        d->busy = true;
        pthread_mutex_unlock(&d->mu);
        /* After this bucket's own ready mark, not after the whole backward
         * enqueued by now; on a device it returns once enqueued, and the
         * next bucket follows at once (trainer_ddp_wait waits for all). */
        int rc = d->error ? 0
                          : gpt_comm_allreduce_after(d->comm, d->grads + off, count, GPT_REDUCE_AVG,
                                                     slot, d->dtype);
        pthread_mutex_lock(&d->mu);
        if (rc < 0 && !d->error)
            d->error = rc;
        d->head++;
        d->busy = false;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

unsigned trainer_ddp_slot(size_t seq)
{
    return (unsigned)(seq % GPT_COMM_READY_SLOTS);
}

size_t trainer_ddp_in_flight_max(void)
{
    return TRAINER_DDP_QUEUE_MAX < GPT_COMM_READY_SLOTS ? TRAINER_DDP_QUEUE_MAX
                                                        : GPT_COMM_READY_SLOTS;
}

/* grads_ready hook of the model, on the thread that runs the backward
 * (the one enqueueing on the compute stream): when armed, marks the
 * stream's end as the span's ready point and queues the span. Bucket
 * `tail` uses ready slot tail % GPT_COMM_READY_SLOTS; when every slot
 * belongs to a bucket not yet reduced the hook waits for the oldest, so a
 * mark is never overwritten before its collective has used it. */
static void ddp_grads_ready(void *ctx, size_t off, size_t count)
{
    struct trainer_ddp *d = ctx;
    pthread_mutex_lock(&d->mu);
    while (d->armed && count > 0 && !d->quit && d->tail - d->head >= trainer_ddp_in_flight_max())
        pthread_cond_wait(&d->cv, &d->mu);
    if (d->armed && count > 0 && !d->quit) {
        GPT_ASSERT(d->tail - d->head < trainer_ddp_in_flight_max());
        int rc = gpt_comm_mark_ready(d->comm, trainer_ddp_slot(d->tail));
        if (rc < 0 && !d->error)
            d->error = rc;
        size_t i = d->tail % TRAINER_DDP_QUEUE_MAX;
        d->off[i] = off;
        d->count[i] = count;
        d->tail++;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
}

void trainer_ddp_arm(struct trainer_ddp *d)
{
    pthread_mutex_lock(&d->mu);
    d->armed = true;
    pthread_mutex_unlock(&d->mu);
}

int trainer_ddp_wait(struct trainer_ddp *d)
{
    pthread_mutex_lock(&d->mu);
    while (d->head != d->tail || d->busy)
        pthread_cond_wait(&d->cv, &d->mu);
    d->armed = false;
    int rc = d->error;
    pthread_mutex_unlock(&d->mu);
    /* The communicator is this thread's again: the buckets' collectives,
     * issued back to back, are waited for once, here. */
    int w = gpt_comm_wait_after(d->comm);
    return rc < 0 ? rc : w;
}

enum gpt_comm_dtype trainer_ddp_dtype(int grad_reduce, const char *backend_name)
{
    if (grad_reduce == GPT_GRAD_REDUCE_AUTO)
        return backend_name && strcmp(backend_name, "cuda") == 0 ? GPT_COMM_BF16 : GPT_COMM_FP32;
    return grad_reduce == GPT_GRAD_REDUCE_BF16 ? GPT_COMM_BF16 : GPT_COMM_FP32;
}

int trainer_ddp_start(struct trainer_ddp *d, struct gpt_comm *comm, enum gpt_comm_dtype dtype,
                      struct gpt_model *model)
{
    d->comm = comm;
    d->dtype = dtype;
    d->grads = model->grads;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    if (pthread_create(&d->thread, NULL, ddp_thread_main, d) != 0) {
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->cv);
        return -EAGAIN;
    }
    d->started = true;
    model->grads_ready = ddp_grads_ready;
    model->grads_ready_ctx = d;
    return 0;
}

void trainer_ddp_stop(struct trainer_ddp *d)
{
    if (!d->started)
        return;
    pthread_mutex_lock(&d->mu);
    d->quit = true;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    d->started = false;
}
