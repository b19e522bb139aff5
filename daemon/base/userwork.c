/*
 * userwork: see userwork.h. The loop thread owns the queue and decides
 * what runs: it hands an item to the threads only when a thread is free
 * and the item's user is within its share, so a handed item never waits
 * behind another. Threads take handed items from `ready` and put finished
 * ones on `finished` (both under `mu`); a uv_async wakes the loop, which
 * drains the whole list (wakeups coalesce), calls each done and hands out
 * what may run next. An item's `next` links it into one list at a time:
 * waiting (loop), ready, then finished (both under `mu`). The memory each user's running work holds
 * is under `mu` too (threads take it, the loop gives it back).
 */
#include "userwork.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

#define USERWORK_THREADS_MAX 256
#define USERWORK_USERS_MAX   1024 /* distinct users with memory held at once */

struct userwork_mem {
    uid_t uid;
    uint64_t bytes;
};

struct userwork {
    uv_loop_t *loop;
    const struct config *cfg;
    uint64_t phys_bytes; /* the node's physical memory (0: unknown) */
    /* loop thread */
    struct userwork_item *wait_head, *wait_tail; /* oldest first */
    int n_wait;
    int n_running;
    bool stopping;
    void (*closed_cb)(void *ctx);
    void *closed_ctx;
    bool closing;
    /* the running items, one slot per thread (for shares and cancels) */
    struct userwork_item **running;
    /* shared with the threads */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct userwork_item *ready_head, *ready_tail;
    struct userwork_item *finished;
    bool quit;
    struct userwork_mem mem[USERWORK_USERS_MAX];
    size_t n_mem;
    uv_async_t async;
    pthread_t *tids;
    int n_threads;
};

static void *userwork_thread(void *arg)
{
    struct userwork *uw = arg;
    pthread_mutex_lock(&uw->mu);
    for (;;) {
        while (!uw->ready_head && !uw->quit)
            pthread_cond_wait(&uw->cv, &uw->mu);
        if (!uw->ready_head)
            break;
        struct userwork_item *it = uw->ready_head;
        uw->ready_head = it->next;
        if (!uw->ready_head)
            uw->ready_tail = NULL;
        pthread_mutex_unlock(&uw->mu);
        it->work(it);
        pthread_mutex_lock(&uw->mu);
        it->next = uw->finished;
        uw->finished = it;
        uv_async_send(&uw->async);
    }
    pthread_mutex_unlock(&uw->mu);
    return NULL;
}

/* The user's running items. Loop thread. */
static int userwork_running_of(const struct userwork *uw, uid_t uid)
{
    int n = 0;
    for (int i = 0; i < uw->n_threads; i++)
        if (uw->running[i] && uw->running[i]->uid == uid)
            n++;
    return n;
}

static void userwork_hand(struct userwork *uw, struct userwork_item *it)
{
    for (int i = 0; i < uw->n_threads; i++)
        if (!uw->running[i]) {
            uw->running[i] = it;
            break;
        }
    uw->n_running++;
    it->running = true;
    it->next = NULL;
    pthread_mutex_lock(&uw->mu);
    if (uw->ready_tail)
        uw->ready_tail->next = it;
    else
        uw->ready_head = it;
    uw->ready_tail = it;
    pthread_cond_signal(&uw->cv);
    pthread_mutex_unlock(&uw->mu);
}

/* Takes the waiting item at *pp out of the queue (prev: the item before
 * it, NULL at the head) and returns it. */
static struct userwork_item *userwork_unwait(struct userwork *uw, struct userwork_item **pp,
                                             struct userwork_item *prev)
{
    struct userwork_item *it = *pp;
    *pp = it->next;
    if (uw->wait_tail == it)
        uw->wait_tail = prev;
    uw->n_wait--;
    it->next = NULL;
    return it;
}

/* Hands out the oldest waiting items whose users are within their share,
 * while threads are free. */
static void userwork_schedule(struct userwork *uw)
{
    struct userwork_item **pp = &uw->wait_head, *prev = NULL;
    while (*pp && uw->n_running < uw->n_threads) {
        struct userwork_item *it = *pp;
        if (userwork_running_of(uw, it->uid) >= it->per_uid) {
            prev = it;
            pp = &it->next;
            continue;
        }
        userwork_hand(uw, userwork_unwait(uw, pp, prev));
    }
}

static void userwork_maybe_closed(struct userwork *uw);

static void userwork_on_async(uv_async_t *h)
{
    struct userwork *uw = h->data;
    pthread_mutex_lock(&uw->mu);
    struct userwork_item *list = uw->finished;
    uw->finished = NULL;
    pthread_mutex_unlock(&uw->mu);
    while (list) {
        struct userwork_item *it = list;
        list = it->next;
        for (int i = 0; i < uw->n_threads; i++)
            if (uw->running[i] == it)
                uw->running[i] = NULL;
        uw->n_running--;
        it->running = false;
        pthread_mutex_lock(&uw->mu);
        for (size_t i = 0; it->mem_bytes && i < uw->n_mem; i++)
            if (uw->mem[i].uid == it->uid) {
                uw->mem[i].bytes -= it->mem_bytes;
                if (uw->mem[i].bytes == 0)
                    uw->mem[i] = uw->mem[--uw->n_mem];
                break;
            }
        pthread_mutex_unlock(&uw->mu);
        it->mem_bytes = 0;
        it->done(it, 0);
    }
    if (!uw->stopping)
        userwork_schedule(uw);
    userwork_maybe_closed(uw);
}

int userwork_new(uv_loop_t *loop, const struct config *cfg, struct userwork **ret,
                 struct gpt_err *err)
{
    struct userwork *uw = calloc(1, sizeof(*uw));
    int n = cfg->user_work_threads;
    GPT_ASSERT(n >= 1 && n <= USERWORK_THREADS_MAX);
    if (uw) {
        uw->tids = calloc((size_t)n, sizeof(*uw->tids));
        uw->running = calloc((size_t)n, sizeof(*uw->running));
    }
    if (!uw || !uw->tids || !uw->running) {
        if (uw) {
            free(uw->tids);
            free(uw->running);
        }
        free(uw);
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    }
    uw->loop = loop;
    uw->cfg = cfg;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    uw->phys_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    pthread_mutex_init(&uw->mu, NULL);
    pthread_cond_init(&uw->cv, NULL);
    int rc = uv_async_init(loop, &uw->async, userwork_on_async);
    if (rc < 0) {
        pthread_cond_destroy(&uw->cv);
        pthread_mutex_destroy(&uw->mu);
        free(uw->tids);
        free(uw->running);
        free(uw);
        return gpt_err_set(err, rc, NULL, "user work pool: %s", uv_strerror(rc));
    }
    uw->async.data = uw;
    for (; uw->n_threads < n; uw->n_threads++) {
        if (pthread_create(&uw->tids[uw->n_threads], NULL, userwork_thread, uw) != 0)
            break;
    }
    if (uw->n_threads == 0) {
        userwork_stop(uw);
        userwork_close(uw, NULL, NULL);
        return gpt_err_set(err, -EAGAIN, NULL, "cannot start the user work threads");
    }
    if (uw->n_threads < n)
        log_warn("user work pool: started %d of %d threads", uw->n_threads, n);
    *ret = uw;
    return 0;
}

/* The user's items waiting. */
static int userwork_waiting_of(const struct userwork *uw, uid_t uid)
{
    int n = 0;
    for (const struct userwork_item *it = uw->wait_head; it; it = it->next)
        n += it->uid == uid;
    return n;
}

/* The item's bounds from the configuration as it is now. */
static void userwork_item_init(struct userwork *uw, struct userwork_item *it)
{
    const struct config *cfg = uw->cfg;
    it->pool = uw;
    it->per_uid = cfg->user_work_per_uid;
    it->mem_limit = (uint64_t)(cfg->user_work_max_memory ? cfg->user_work_max_memory
                               : cfg->max_job_memory > 0 ? cfg->max_job_memory
                                                         : 0);
    it->mem_bytes = 0;
    it->running = false;
    it->next = NULL;
    atomic_store(&it->cancel, 0);
    it->mem_key = cfg->user_work_max_memory ? "user_work_max_memory"
                  : cfg->max_job_memory > 0 ? "max_job_memory"
                                            : "this node's physical memory";
    if (!it->mem_limit)
        it->mem_limit = uw->phys_bytes;
}

int userwork_submit_next(struct userwork *uw, struct userwork_item *it, struct gpt_err *err)
{
    if (uw->stopping)
        return gpt_err_set(err, -EAGAIN, NULL, "gptd is stopping");
    userwork_item_init(uw, it);
    if (uw->n_running < uw->n_threads && userwork_running_of(uw, it->uid) < it->per_uid) {
        userwork_hand(uw, it);
        return 0;
    }
    it->next = uw->wait_head;
    uw->wait_head = it;
    if (!uw->wait_tail)
        uw->wait_tail = it;
    uw->n_wait++;
    return 1;
}

int userwork_submit(struct userwork *uw, struct userwork_item *it, struct userwork_wait *ret_wait,
                    struct gpt_err *err)
{
    const struct config *cfg = uw->cfg;
    if (uw->stopping)
        return gpt_err_set(err, -EAGAIN, NULL, "gptd is stopping");
    userwork_item_init(uw, it);
    /* Whatever waits while a thread is free is over its user's share. */
    int mine = userwork_running_of(uw, it->uid);
    if (uw->n_running < uw->n_threads && mine < it->per_uid) {
        userwork_hand(uw, it);
        return 0;
    }
    /* It waits, if there is room. */
    if (uw->n_wait >= cfg->user_work_queue_max)
        return gpt_err_set(err, -GPT_E_LIMIT, NULL,
                           "%d requests already wait for the user work pool (user_work_queue_max)",
                           uw->n_wait);
    int waiting_mine = userwork_waiting_of(uw, it->uid);
    if (waiting_mine >= cfg->user_work_queue_per_uid)
        return gpt_err_set(err, -GPT_E_LIMIT, NULL,
                           "uid %u already has %d requests waiting for the user work pool "
                           "(user_work_queue_per_uid)",
                           (unsigned)it->uid, waiting_mine);
    if (ret_wait)
        *ret_wait = (struct userwork_wait){.ahead = uw->n_wait,
                                           .running_mine = mine,
                                           .per_uid = it->per_uid,
                                           .threads = uw->n_threads};
    if (uw->wait_tail)
        uw->wait_tail->next = it;
    else
        uw->wait_head = it;
    uw->wait_tail = it;
    uw->n_wait++;
    return 1;
}

/* Ends the waiting items of `owner` (every one when `all`) with
 * -ECANCELED, `why` in their cancel flag. */
static void userwork_drop_waiting(struct userwork *uw, const void *owner, bool all, int why)
{
    struct userwork_item *gone = NULL, **gone_tail = &gone;
    struct userwork_item **pp = &uw->wait_head, *prev = NULL;
    while (*pp) {
        struct userwork_item *it = *pp;
        if (!all && it->owner != owner) {
            prev = it;
            pp = &it->next;
            continue;
        }
        userwork_unwait(uw, pp, prev);
        atomic_store(&it->cancel, why);
        *gone_tail = it;
        gone_tail = &it->next;
    }
    /* Done callbacks may submit again: the queue is consistent by now. */
    while (gone) {
        struct userwork_item *it = gone;
        gone = it->next;
        it->done(it, -ECANCELED);
    }
}

void userwork_cancel_owner(struct userwork *uw, const void *owner)
{
    if (!uw || !owner)
        return;
    for (int i = 0; i < uw->n_threads; i++)
        if (uw->running[i] && uw->running[i]->owner == owner)
            atomic_store(&uw->running[i]->cancel, USERWORK_CANCEL_CLIENT);
    userwork_drop_waiting(uw, owner, false, USERWORK_CANCEL_CLIENT);
    if (!uw->stopping)
        userwork_schedule(uw);
}

void userwork_stop(struct userwork *uw)
{
    if (!uw || uw->stopping)
        return;
    uw->stopping = true;
    for (int i = 0; i < uw->n_threads; i++)
        if (uw->running[i])
            atomic_store(&uw->running[i]->cancel, USERWORK_CANCEL_STOP);
    userwork_drop_waiting(uw, NULL, true, USERWORK_CANCEL_STOP);
}

static void userwork_on_closed(uv_handle_t *h)
{
    struct userwork *uw = h->data;
    void (*cb)(void *) = uw->closed_cb;
    void *ctx = uw->closed_ctx;
    pthread_cond_destroy(&uw->cv);
    pthread_mutex_destroy(&uw->mu);
    free(uw->tids);
    free(uw->running);
    free(uw);
    if (cb)
        cb(ctx);
}

static void userwork_maybe_closed(struct userwork *uw)
{
    if (!uw->closing || uw->n_running > 0 || uv_is_closing((uv_handle_t *)&uw->async))
        return;
    pthread_mutex_lock(&uw->mu);
    uw->quit = true;
    pthread_cond_broadcast(&uw->cv);
    pthread_mutex_unlock(&uw->mu);
    for (int i = 0; i < uw->n_threads; i++)
        pthread_join(uw->tids[i], NULL);
    uv_close((uv_handle_t *)&uw->async, userwork_on_closed);
}

void userwork_close(struct userwork *uw, void (*cb)(void *ctx), void *ctx)
{
    if (!uw) {
        if (cb)
            cb(ctx);
        return;
    }
    userwork_stop(uw);
    uw->closing = true;
    uw->closed_cb = cb;
    uw->closed_ctx = ctx;
    userwork_maybe_closed(uw);
}

static double userwork_mib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

int userwork_mem_take(struct userwork_item *it, uint64_t bytes, const char *what,
                      struct gpt_err *err)
{
    struct userwork *uw = it->pool;
    uint64_t limit = it->mem_limit;
    int rc = 0;
    pthread_mutex_lock(&uw->mu);
    size_t i = 0;
    while (i < uw->n_mem && uw->mem[i].uid != it->uid)
        i++;
    uint64_t held = i < uw->n_mem ? uw->mem[i].bytes : 0;
    if (limit && (bytes > limit || held > limit - bytes)) {
        rc = gpt_err_set(err, -GPT_E_LIMIT, NULL,
                         "%s needs about %.1f MiB; uid %u's running work holds %.1f MiB of at "
                         "most %.1f MiB (%s)",
                         what, userwork_mib(bytes), (unsigned)it->uid, userwork_mib(held),
                         userwork_mib(limit), it->mem_key);
    } else if (i == uw->n_mem && uw->n_mem == USERWORK_USERS_MAX) {
        rc = gpt_err_set(err, -EAGAIN, NULL, "too many users' work at once; try again");
    } else {
        if (i == uw->n_mem)
            uw->mem[uw->n_mem++] = (struct userwork_mem){.uid = it->uid, .bytes = 0};
        uw->mem[i].bytes += bytes;
        it->mem_bytes += bytes;
    }
    pthread_mutex_unlock(&uw->mu);
    return rc;
}

void userwork_counts(const struct userwork *uw, int *ret_running, int *ret_waiting)
{
    *ret_running = uw ? uw->n_running : 0;
    *ret_waiting = uw ? uw->n_wait : 0;
}
