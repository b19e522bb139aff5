/*
 * comm: front-end wrappers of the collective interface and the `local`
 * backend (a world of one: nothing to exchange, so nothing is copied).
 */
#include "comm.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "ops/cuda/gpt_bf16.h"

int gpt_comm_allreduce(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op)
{
    GPT_ASSERT(c && (buf || n == 0));
    return c->ops->allreduce(c, buf, n, op);
}

/* The floats as the bf16 wire would carry them: rounded to nearest even. */
static void comm_round_bf16(float *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = gpt_bf16_to_float(gpt_bf16_from_float_rne(buf[i]));
}

int gpt_comm_allreduce_dtype(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op,
                             enum gpt_comm_dtype dtype)
{
    GPT_ASSERT(c && (buf || n == 0));
    if (dtype == GPT_COMM_FP32 || c->world == 1)
        return c->ops->allreduce(c, buf, n, op);
    if (c->ops->allreduce_bf16)
        return c->ops->allreduce_bf16(c, buf, n, op);
    /* A transport of floats: what each rank contributes and what it gets
     * back are bf16 values; the sum in between stays fp32. */
    comm_round_bf16(buf, n);
    int rc = c->ops->allreduce(c, buf, n, op);
    if (rc == 0)
        comm_round_bf16(buf, n);
    return rc;
}

int gpt_comm_mark_ready(struct gpt_comm *c, unsigned slot)
{
    GPT_ASSERT(c && slot < GPT_COMM_READY_SLOTS);
    return c->ops->mark_ready ? c->ops->mark_ready(c, slot) : 0;
}

int gpt_comm_allreduce_after(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op,
                             unsigned slot, enum gpt_comm_dtype dtype)
{
    GPT_ASSERT(c && (buf || n == 0) && slot < GPT_COMM_READY_SLOTS);
    if (!c->ops->allreduce_after)
        return gpt_comm_allreduce_dtype(c, buf, n, op, dtype);
    return c->ops->allreduce_after(c, buf, n, op, slot, dtype);
}

int gpt_comm_wait_after(struct gpt_comm *c)
{
    GPT_ASSERT(c);
    return c->ops->wait_after ? c->ops->wait_after(c) : 0;
}

int gpt_comm_broadcast(struct gpt_comm *c, void *buf, size_t bytes, int root)
{
    GPT_ASSERT(c && (buf || bytes == 0) && root >= 0 && root < c->world);
    return c->ops->broadcast(c, buf, bytes, root);
}

int gpt_comm_reduce_scatter(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op)
{
    GPT_ASSERT(c && (buf || n == 0));
    return c->ops->reduce_scatter(c, buf, n, op);
}

int gpt_comm_allgather(struct gpt_comm *c, float *buf, size_t n)
{
    GPT_ASSERT(c && (buf || n == 0));
    return c->ops->allgather(c, buf, n);
}

int gpt_comm_barrier(struct gpt_comm *c)
{
    GPT_ASSERT(c);
    return c->ops->barrier(c);
}

void gpt_comm_abort(struct gpt_comm *c)
{
    if (c)
        c->ops->abort(c);
}

void gpt_comm_free(struct gpt_comm *c)
{
    if (c)
        c->ops->free(c);
}

/* local: the only state is the abort flag, so that a world of one behaves
 * like any other world when the agent aborts it. */
struct comm_local {
    struct gpt_comm base;
    atomic_bool aborted;
};

static int local_status(struct gpt_comm *c)
{
    struct comm_local *l = (struct comm_local *)c;
    return atomic_load(&l->aborted) ? -ECANCELED : 0;
}

static int local_allreduce(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op)
{
    (void)buf, (void)n, (void)op;
    return local_status(c);
}

static int local_broadcast(struct gpt_comm *c, void *buf, size_t bytes, int root)
{
    (void)buf, (void)bytes, (void)root;
    return local_status(c);
}

static int local_allgather(struct gpt_comm *c, float *buf, size_t n)
{
    (void)buf, (void)n;
    return local_status(c);
}

static void local_abort(struct gpt_comm *c)
{
    atomic_store(&((struct comm_local *)c)->aborted, true);
}

static void local_free(struct gpt_comm *c)
{
    free(c);
}

static const struct gpt_comm_ops local_ops = {
    .name = "local",
    .allreduce = local_allreduce,
    .broadcast = local_broadcast,
    .reduce_scatter = local_allreduce,
    .allgather = local_allgather,
    .barrier = local_status,
    .abort = local_abort,
    .free = local_free,
};

int gpt_comm_local_new(struct gpt_comm **ret, struct gpt_err *err)
{
    struct comm_local *l = calloc(1, sizeof(*l));
    if (!l)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory for the local communicator");
    l->base.ops = &local_ops;
    l->base.rank = 0;
    l->base.world = 1;
    atomic_init(&l->aborted, false);
    *ret = &l->base;
    return 0;
}
