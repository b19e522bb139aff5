/*
 * comm_staged: the host-staged communicator and the agreement that falls
 * back to it when a device communicator (NCCL) cannot form (see comm.h).
 *
 * Staged: one host buffer, grown to the largest collective seen and never
 * shrunk, holds what a collective on device memory needs: the whole buffer
 * for allreduce and reduce_scatter (every element takes part), this rank's
 * slice for allgather, the root's bytes for broadcast. The inner host
 * communicator runs there, and only what the collective defines is copied
 * back (reduce_scatter's own slice; the rest of the caller's buffer is
 * scratch by contract and keeps its old bytes). Nothing is chunked, so an
 * allreduce reduces the same spans in the same order as the inner
 * communicator would on host memory: the bits of a CPU run at any world.
 * A communicator is used by one thread at a time, so the buffer needs no
 * lock; abort goes straight to the inner communicator (any thread).
 *
 * Fallback: see gpt_comm_fallback_new in comm.h. The refusal key is read
 * at most every COMM_CANCEL_POLL_MS however often the device attempt polls
 * its `cancelled`, since with the daemon's store every read is a request
 * to the rendezvous.
 */
#include "comm.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "monotime.h"

#define STAGED_WHY_MAX 256
#define STAGED_KEY_MAX 256

struct comm_staged {
    struct gpt_comm base; /* must stay first */
    struct gpt_comm_ops ops;
    char name[32];
    struct gpt_comm *inner;
    struct gpt_comm_stager st;
    bool has_stager;
    void *host;
    size_t host_bytes;
    char why[STAGED_WHY_MAX];
};

static int staged_is_device(struct comm_staged *s, const void *p)
{
    return s->has_stager && s->st.is_device(s->st.ctx, p);
}

/* The host buffer, at least `bytes` long. */
static int staged_host(struct comm_staged *s, size_t bytes, void **ret)
{
    if (bytes > s->host_bytes) {
        void *p = realloc(s->host, bytes);
        if (!p)
            return -ENOMEM;
        s->host = p;
        s->host_bytes = bytes;
    }
    *ret = s->host;
    return 0;
}

/* Device floats [0, n) to host, the collective `fn` there, [out_off,
 * out_off + out_len) back: allreduce and reduce_scatter. */
static int staged_whole(struct comm_staged *s, float *buf, size_t n, size_t out_off, size_t out_len,
                        int (*fn)(struct comm_staged *s, float *h, size_t n, const void *arg),
                        const void *arg)
{
    if (!staged_is_device(s, buf) || n == 0)
        return fn(s, buf, n, arg);
    float *h;
    int rc = staged_host(s, n * sizeof(float), (void **)&h);
    if (rc == 0)
        rc = s->st.to_host(s->st.ctx, h, buf, n * sizeof(float));
    if (rc == 0)
        rc = fn(s, h, n, arg);
    if (rc == 0 && out_len > 0)
        rc = s->st.to_device(s->st.ctx, buf + out_off, h + out_off, out_len * sizeof(float));
    return rc;
}

struct staged_reduce {
    enum gpt_reduce_op op;
    enum gpt_comm_dtype dtype;
};

static int staged_inner_allreduce(struct comm_staged *s, float *h, size_t n, const void *arg)
{
    const struct staged_reduce *r = arg;
    return gpt_comm_allreduce_dtype(s->inner, h, n, r->op, r->dtype);
}

static int staged_inner_reduce_scatter(struct comm_staged *s, float *h, size_t n, const void *arg)
{
    const struct staged_reduce *r = arg;
    return gpt_comm_reduce_scatter(s->inner, h, n, r->op);
}

static int staged_allreduce_dtype(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op,
                                  enum gpt_comm_dtype dtype)
{
    struct comm_staged *s = (struct comm_staged *)c;
    struct staged_reduce r = {op, dtype};
    return staged_whole(s, buf, n, 0, n, staged_inner_allreduce, &r);
}

static int staged_allreduce(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op)
{
    return staged_allreduce_dtype(c, buf, n, op, GPT_COMM_FP32);
}

/* The bf16 wire's rounding happens on the host copy (comm.c would round
 * the caller's buffer in place, which may be device memory). */
static int staged_allreduce_bf16(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op)
{
    return staged_allreduce_dtype(c, buf, n, op, GPT_COMM_BF16);
}

static int staged_reduce_scatter(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op)
{
    struct comm_staged *s = (struct comm_staged *)c;
    size_t off, len;
    gpt_comm_slice(n, c->world, c->rank, &off, &len);
    struct staged_reduce r = {op, GPT_COMM_FP32};
    return staged_whole(s, buf, n, off, len, staged_inner_reduce_scatter, &r);
}

static int staged_allgather(struct gpt_comm *c, float *buf, size_t n)
{
    struct comm_staged *s = (struct comm_staged *)c;
    if (!staged_is_device(s, buf) || n == 0)
        return gpt_comm_allgather(s->inner, buf, n);
    size_t off, len;
    gpt_comm_slice(n, c->world, c->rank, &off, &len);
    float *h;
    int rc = staged_host(s, n * sizeof(float), (void **)&h);
    if (rc == 0 && len > 0)
        rc = s->st.to_host(s->st.ctx, h + off, buf + off, len * sizeof(float));
    if (rc == 0)
        rc = gpt_comm_allgather(s->inner, h, n);
    if (rc == 0)
        rc = s->st.to_device(s->st.ctx, buf, h, n * sizeof(float));
    return rc;
}

static int staged_broadcast(struct gpt_comm *c, void *buf, size_t bytes, int root)
{
    struct comm_staged *s = (struct comm_staged *)c;
    if (!staged_is_device(s, buf) || bytes == 0)
        return gpt_comm_broadcast(s->inner, buf, bytes, root);
    void *h;
    int rc = staged_host(s, bytes, &h);
    if (rc == 0 && c->rank == root)
        rc = s->st.to_host(s->st.ctx, h, buf, bytes);
    if (rc == 0)
        rc = gpt_comm_broadcast(s->inner, h, bytes, root);
    if (rc == 0 && c->rank != root)
        rc = s->st.to_device(s->st.ctx, buf, h, bytes);
    return rc;
}

static int staged_barrier(struct gpt_comm *c)
{
    return gpt_comm_barrier(((struct comm_staged *)c)->inner);
}

static void staged_abort(struct gpt_comm *c)
{
    gpt_comm_abort(((struct comm_staged *)c)->inner);
}

static void staged_free(struct gpt_comm *c)
{
    struct comm_staged *s = (struct comm_staged *)c;
    gpt_comm_free(s->inner);
    free(s->host);
    free(s);
}

int gpt_comm_staged_new(struct gpt_comm *inner, const struct gpt_comm_stager *stager,
                        const char *why, struct gpt_comm **ret, struct gpt_err *err)
{
    GPT_ASSERT(inner && ret);
    GPT_ASSERT(!stager || (stager->is_device && stager->to_host && stager->to_device));
    struct comm_staged *s = calloc(1, sizeof(*s));
    if (!s) {
        gpt_comm_free(inner);
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory for the staged communicator");
    }
    snprintf(s->name, sizeof(s->name), "staged/%s", inner->ops->name);
    s->ops = (struct gpt_comm_ops){
        .name = s->name,
        .allreduce = staged_allreduce,
        .broadcast = staged_broadcast,
        .reduce_scatter = staged_reduce_scatter,
        .allgather = staged_allgather,
        .barrier = staged_barrier,
        .abort = staged_abort,
        .free = staged_free,
        .allreduce_bf16 = staged_allreduce_bf16,
    };
    s->base = (struct gpt_comm){.ops = &s->ops, .rank = inner->rank, .world = inner->world};
    s->inner = inner;
    if (stager) {
        s->st = *stager;
        s->has_stager = true;
    }
    snprintf(s->why, sizeof(s->why), "%s", why ? why : "");
    *ret = &s->base;
    return 0;
}

const char *gpt_comm_staged_why(const struct gpt_comm *c)
{
    if (!c || c->ops->free != staged_free)
        return NULL;
    return ((const struct comm_staged *)c)->why;
}

/* ---- falling back when the device communicator does not form ---- */

struct fallback {
    const struct gpt_comm_opts *o;
    const struct gpt_kv *kv;
    char refused_key[STAGED_KEY_MAX];
    int64_t next_poll_ms;
    bool refused; /* another rank's refusal was seen */
};

static int fallback_key(char *buf, size_t cap, const struct gpt_comm_opts *o, const char *what)
{
    int k = snprintf(buf, cap, "%s%s", o->prefix ? o->prefix : "", what);
    return k < 0 || (size_t)k >= cap ? -EINVAL : 0;
}

static int fallback_aborted(const struct fallback *f)
{
    return f->o->cancelled && f->o->cancelled(f->o->cancel_ctx);
}

/* The device attempt's `cancelled`: the caller's abort, or a refusal by
 * another rank (read at most every COMM_CANCEL_POLL_MS). */
static int fallback_cancelled(void *ctx)
{
    struct fallback *f = ctx;
    if (fallback_aborted(f))
        return 1;
    if (f->refused)
        return 1;
    int64_t now = monotime_ms();
    if (now < f->next_poll_ms)
        return 0;
    f->next_poll_ms = now + COMM_CANCEL_POLL_MS;
    char why[STAGED_WHY_MAX];
    size_t len = 0;
    if (f->kv->get(f->kv->ctx, f->refused_key, why, sizeof(why), &len, 0) == 0)
        f->refused = true;
    return f->refused;
}

/* A get that the caller's abort ends within COMM_CANCEL_POLL_MS. */
static int fallback_get(const struct fallback *f, const char *key, void *buf, size_t cap,
                        size_t *ret_len, int64_t deadline_ms)
{
    for (;;) {
        if (fallback_aborted(f))
            return -ECANCELED;
        int64_t left = deadline_ms - monotime_ms();
        if (left <= 0)
            return -ETIMEDOUT;
        int wait = left > COMM_CANCEL_POLL_MS ? COMM_CANCEL_POLL_MS : (int)left;
        int rc = f->kv->get(f->kv->ctx, key, buf, cap, ret_len, wait);
        if (rc != -ETIMEDOUT)
            return rc;
    }
}

/* Publishes this rank's vote and reads every other's: 1 when all formed
 * the device communicator, 0 when one did not, or a negative error. */
static int fallback_vote(const struct fallback *f, bool mine, int64_t deadline_ms)
{
    char key[STAGED_KEY_MAX], tag[32];
    snprintf(tag, sizeof(tag), "vote%d", f->o->rank);
    int rc = fallback_key(key, sizeof(key), f->o, tag);
    char v = mine ? 'y' : 'n';
    if (rc == 0)
        rc = f->kv->set(f->kv->ctx, key, &v, 1);
    bool all = mine;
    for (int r = 0; rc == 0 && r < f->o->world; r++) {
        if (r == f->o->rank)
            continue;
        snprintf(tag, sizeof(tag), "vote%d", r);
        size_t len = 0;
        if ((rc = fallback_key(key, sizeof(key), f->o, tag)) == 0 &&
            (rc = fallback_get(f, key, &v, 1, &len, deadline_ms)) == 0)
            all = all && len == 1 && v == 'y';
    }
    return rc < 0 ? rc : all ? 1 : 0;
}

/* The host-staged communicator over tcp/shm, its keys apart from the
 * device attempt's. */
static int fallback_staged(const struct gpt_comm_opts *o, const struct gpt_kv *kv,
                           const struct gpt_comm_stager *stager, const char *why,
                           struct gpt_comm **ret, struct gpt_err *err)
{
    char prefix[STAGED_KEY_MAX];
    if (fallback_key(prefix, sizeof(prefix), o, "staged/") < 0)
        return gpt_err_set(err, -EINVAL, NULL, "comm: key prefix too long");
    struct gpt_comm_opts io = *o;
    io.prefix = prefix;
    struct gpt_comm *inner = NULL;
    int rc = gpt_comm_tcp_new(&io, kv, &inner, err);
    if (rc < 0)
        return rc;
    return gpt_comm_staged_new(inner, stager, why, ret, err);
}

int gpt_comm_fallback_new(const struct gpt_comm_opts *o, const struct gpt_kv *kv,
                          gpt_comm_try_fn first, void *first_ctx,
                          const struct gpt_comm_stager *stager, struct gpt_comm **ret,
                          struct gpt_err *err)
{
    GPT_ASSERT(o && kv && first && ret);
    struct fallback f = {.o = o, .kv = kv};
    if (fallback_key(f.refused_key, sizeof(f.refused_key), o, "refused") < 0)
        return gpt_err_set(err, -EINVAL, NULL, "comm: key prefix too long");
    int64_t deadline = monotime_ms() + (o->timeout_ms > 0 ? o->timeout_ms : 300000);
    struct gpt_comm_opts fo = *o;
    fo.cancelled = fallback_cancelled;
    fo.cancel_ctx = &f;
    struct gpt_comm *dev = NULL;
    struct gpt_err derr = {0};
    int rc = first(first_ctx, &fo, &dev, &derr);
    if (rc < 0 && fallback_aborted(&f))
        return gpt_err_set(err, -ECANCELED, NULL, "aborted while the world formed");
    if (rc < 0 && !f.refused) {
        /* This rank's own refusal: the others learn it from here. */
        char why[STAGED_WHY_MAX];
        /* Cut to fit: the head of NCCL's message says what failed. */
        snprintf(why, sizeof(why), "rank %d: %.*s", o->rank, STAGED_WHY_MAX - 32, derr.msg);
        int src = kv->set(kv->ctx, f.refused_key, why, strlen(why));
        if (src < 0)
            return gpt_err_set(err, src, NULL, "%s (and the other ranks cannot be told: %s)",
                               derr.msg, gpt_strerror(src));
    }
    int all = fallback_vote(&f, rc == 0, deadline);
    if (all == 1) {
        *ret = dev;
        return 0;
    }
    gpt_comm_free(dev);
    if (all < 0)
        return gpt_err_set(err, all, NULL, "comm: the ranks could not agree on a communicator: %s",
                           gpt_strerror(all));
    char why[STAGED_WHY_MAX] = "";
    size_t len = 0;
    rc = fallback_get(&f, f.refused_key, why, sizeof(why) - 1, &len, deadline);
    if (rc < 0)
        return gpt_err_set(err, rc, NULL, "comm: reading why the device communicator failed: %s",
                           gpt_strerror(rc));
    why[len] = '\0';
    return fallback_staged(o, kv, stager, why, ret, err);
}
