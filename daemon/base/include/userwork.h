/*
 * userwork: the pool that runs work a user asks for (`sample`, `export`,
 * the copy of `submit --resume-from`) on threads of its own, so that no
 * amount of it can delay a job's start (the agent's snapshot scan keeps
 * libuv's pool to itself) and no user can take every thread.
 *
 * Bounds, each a gptd.conf key read at submit (gptd.conf(5)):
 *  - user_work_threads: the pool's threads (work running at once);
 *  - user_work_per_uid: work items one user may have running at once; the
 *    others wait, oldest first, while other users' work runs;
 *  - user_work_queue_max / user_work_queue_per_uid: items waiting, in all
 *    and per user; one more is refused with -GPT_E_LIMIT naming the key;
 *  - user_work_max_memory: memory one user's running work may hold, taken
 *    (userwork_mem_take) before the work allocates.
 * Work is cancelled through an atomic flag the work checks between its
 * steps (tokens of a sample, tensors of an export): when its client goes
 * (userwork_cancel_owner) and when gptd stops (userwork_stop).
 *
 * Loop thread, except where a function says otherwise. Items are the
 * caller's (embedded in its request state); the pool holds them from
 * userwork_submit until it calls their done callback, on the loop thread.
 */
#ifndef GPTD_USERWORK_H
#define GPTD_USERWORK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "config.h"
#include "gpt_err.h"

struct userwork;
struct userwork_item;

/* Why an item was cancelled (userwork_item.cancel; 0: it was not). */
enum userwork_cancel {
    USERWORK_CANCEL_CLIENT = 1, /* its client went */
    USERWORK_CANCEL_STOP = 2,   /* gptd is stopping */
};

/* Runs on a pool thread; checks item->cancel between its steps. */
typedef void (*userwork_fn)(struct userwork_item *it);
/* Loop thread, once per item: status 0 after `work` ran, -ECANCELED when
 * it never started (item->cancel says why). */
typedef void (*userwork_done_fn)(struct userwork_item *it, int status);

struct userwork_item {
    userwork_fn work;
    userwork_done_fn done;
    void *data;        /* the caller's */
    uid_t uid;         /* whose share it counts against */
    void *owner;       /* what cancels it when it goes (the client); may be NULL */
    atomic_int cancel; /* enum userwork_cancel, set by the loop: stop at the next step */
    /* the pool's */
    struct userwork *pool;
    uint64_t mem_limit;  /* the user's memory bound when submitted (0: none known) */
    const char *mem_key; /* the key (or node memory) that set it */
    int per_uid;         /* the user's share when submitted */
    uint64_t mem_bytes;  /* taken by userwork_mem_take, given back at the end */
    bool running;
    struct userwork_item *next;
};

/* Why an item waits, for the client (userwork_submit's *ret_wait). */
struct userwork_wait {
    int ahead;        /* items queued before it */
    int running_mine; /* the user's items running */
    int per_uid;      /* user_work_per_uid */
    int threads;      /* user_work_threads */
};

/* Starts cfg->user_work_threads threads. `cfg` is borrowed and read live
 * (the other bounds are reloadable). 0 or a negative errno, err set. */
int userwork_new(uv_loop_t *loop, const struct config *cfg, struct userwork **ret,
                 struct gpt_err *err);

/* Queues `it` (its work, done, data, uid and owner set; the rest zeroed).
 * Returns 0 when it runs now, 1 when it waits (*ret_wait says behind
 * what), -GPT_E_LIMIT when the queue is full (err names the key) or
 * -EAGAIN ("gptd is stopping") after userwork_stop. On failure the item is the caller's
 * again and done is not called. */
int userwork_submit(struct userwork *uw, struct userwork_item *it, struct userwork_wait *ret_wait,
                    struct gpt_err *err);

/* The next step of a request whose previous item has just ended (from
 * that item's done callback): it goes before every waiting item and is
 * not refused for the queue limits, so a request once admitted runs to
 * its end without holding its state in memory behind others. 0 when it
 * runs now, 1 when it waits, -EAGAIN ("gptd is stopping") after userwork_stop. */
int userwork_submit_next(struct userwork *uw, struct userwork_item *it, struct gpt_err *err);

/* Cancels every item of `owner`: those waiting end now (done with
 * -ECANCELED), those running are told to stop. */
void userwork_cancel_owner(struct userwork *uw, const void *owner);

/* The start of gptd's stop: every item waiting ends now (-ECANCELED),
 * every one running is told to stop, and submits are refused. NULL ok. */
void userwork_stop(struct userwork *uw);

/* After userwork_stop: once the running items have ended (their done
 * called), joins the threads, closes the loop handle and frees the pool;
 * then calls cb(ctx) (may be NULL). NULL uw: cb at once. */
void userwork_close(struct userwork *uw, void (*cb)(void *ctx), void *ctx);

/* Pool thread, from `work`, before it allocates: counts `bytes` against
 * the user's memory bound (user_work_max_memory, else max_job_memory, and
 * the node's physical memory). -GPT_E_LIMIT when the user's running work
 * would hold more, err naming `what`, the sizes and the key; the item
 * holds the bytes until it ends. */
int userwork_mem_take(struct userwork_item *it, uint64_t bytes, const char *what,
                      struct gpt_err *err);

/* Whether the item should stop (pool thread). */
static inline bool userwork_cancelled(const struct userwork_item *it)
{
    return atomic_load_explicit(&it->cancel, memory_order_relaxed) != 0;
}

/* Whether gptd's stop cancelled it (loop thread, in done). */
static inline bool userwork_stopped(const struct userwork_item *it)
{
    return atomic_load_explicit(&it->cancel, memory_order_relaxed) == USERWORK_CANCEL_STOP;
}

/* Items running and waiting (`gptctl status`, metrics). */
void userwork_counts(const struct userwork *uw, int *ret_running, int *ret_waiting);

#endif
