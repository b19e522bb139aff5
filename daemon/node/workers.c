/*
 * workers: K training threads of one job in this process (see workers.h).
 *
 * Each worker thread owns its communicator and runs gpt_train(). The owner
 * thread talks to the workers only through atomics (stop, abort), the
 * join, and workers_abort's use of the communicators, which holds
 * comm_lock: a worker publishes and withdraws its communicator under that
 * lock, so one that an abort reached is not freed until the abort is done
 * with it. For a world that lives entirely in this process the ranks exchange
 * their ring addresses through the engine's in-memory key-value store.
 */
#include "workers.h"

#include "backend.h"
#include "data.h"
#include "factory.h"
#include "fsid.h"
#include "gpu_plan.h"
#include "log.h"
#include "init_from.h"
#include "paths.h"
#include "tokcache.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- workers ---- */

struct worker {
    struct workers *ws;
    pthread_t thread;
    bool started;
    int rank;              /* global */
    struct gpt_comm *comm; /* while the worker may use it; under ws->comm_lock */
    int rc;
    struct gpt_err err;
    struct gpt_train_result result;
};

struct workers {
    struct workers_opts o;
    struct gpt_job job;
    char snapdir[GPT_JOB_PATH_MAX];
    char resume_path[GPT_JOB_PATH_MAX];
    char prefix[256];
    char bind_host[64];
    /* access: the job owner's identity and the roots (when has_access) */
    bool has_access;
    uid_t uid;
    char data_roots[PATH_MAX], snapshot_roots[PATH_MAX], state_dir[PATH_MAX];
    int world;
    struct gpt_kv kv_local; /* in-process worlds; zeroed when unused */
    struct gpt_kv kv;
    atomic_int stop_how;
    atomic_bool aborted;
    atomic_int running;
    atomic_bool finished;
    pthread_mutex_t comm_lock; /* guards every w[i].comm */
    bool joined;
    int n;
    struct worker *w;
};

static int worker_should_stop(void *ctx)
{
    struct worker *wk = ctx;
    return atomic_load(&wk->ws->stop_how);
}

static void worker_metric(void *ctx, const struct gpt_metric *m)
{
    struct worker *wk = ctx;
    if (wk->ws->o.on_metric)
        wk->ws->o.on_metric(wk->ws->o.ctx, m);
}

static void worker_event(void *ctx, const struct gpt_event *e)
{
    struct worker *wk = ctx;
    if (wk->ws->o.on_event)
        wk->ws->o.on_event(wk->ws->o.ctx, e);
}

/* How many GPUs this job may use here: 0 on CPU hosts, when CUDA is not
 * built in, or when the job asks for a CPU collective backend. */
static int workers_gpu_count(const struct gpt_job *job)
{
    int kind = job->distributed.backend;
    if (kind != GPT_COMM_AUTO && kind != GPT_COMM_NCCL && kind != GPT_COMM_STAGED)
        return 0;
    /* Tests stand in a GPU count on CPU hosts (a node whose claim of
     * workers its GPUs cannot hold: tests/integration/elastic_quarantine.sh). */
    const char *fake = getenv("GPTD_TEST_GPU_COUNT");
    if (fake && *fake)
        return atoi(fake);
    return gpt_device_count();
}

int workers_default_count(const struct gpt_job *job, int cpu_default)
{
    if (job->distributed.workers_per_node > 0)
        return job->distributed.workers_per_node;
    int gpus = workers_gpu_count(job);
    return gpus > 0 ? gpus : cpu_default;
}

/* gpt_comm_opts.cancelled: an abort before the communicator exists. */
static int worker_cancelled(void *ctx)
{
    struct workers *ws = ctx;
    return atomic_load(&ws->aborted);
}

/* The compute backend and communicator of one worker: CUDA + NCCL on GPU
 * hosts (local worker i on GPU i; with distributed.backend auto, the
 * host-staged communicator on every rank when NCCL does not form, or
 * always with staged), CPU + TCP ring (or local) elsewhere (staged there
 * is the ring behind a stager with nothing to stage). */
static int worker_open(struct worker *wk, int local, struct gpt_backend **ret_be,
                       struct gpt_comm **ret_comm)
{
    struct workers *ws = wk->ws;
    int gpus = workers_gpu_count(&ws->job);
    struct gpt_comm_opts co = {
        .rank = wk->rank,
        .world = ws->world,
        .prefix = ws->prefix,
        .timeout_ms = ws->o.comm_timeout_ms,
        .bind_host = ws->bind_host[0] ? ws->bind_host : NULL,
        .cancelled = worker_cancelled,
        .cancel_ctx = ws,
        /* distributed.comm_shm; auto: shared memory */
        .shm = ws->job.distributed.comm_shm == GPT_COMM_SHM_ON    ? 1
               : ws->job.distributed.comm_shm == GPT_COMM_SHM_OFF ? -1
                                                                  : 0,
    };
    *ret_be = NULL;
    if (gpus == 0 && ws->job.distributed.backend == GPT_COMM_NCCL)
        return gpt_err_set(&wk->err, -GPT_E_NODEVICE, "distributed.backend",
                           "distributed.backend is nccl but this host has no usable GPU");
    /* On CPU hosts the trainer makes its own backend (be stays NULL);
     * workers_start refused more workers than GPUs. */
    int device = gpus > 0 ? local : -1;
    if (gpus > 0) {
        /* A GPU this node counted that does not open is the node's fault,
         * not the job's: the coordinator places the job elsewhere. */
        struct gpt_backend_opts bo = {
            .attn_forward = ws->job.trainer.attention_forward,
            .attn_backward = ws->job.trainer.attention_backward,
        };
        int rc = gpt_backend_new(GPT_BACKEND_CUDA, device, &bo, ret_be, &wk->err);
        if (rc < 0) {
            char why[GPT_ERR_MSG_MAX];
            snprintf(why, sizeof(why), "%s", wk->err.msg);
            return gpt_err_set(&wk->err, -GPT_E_NODE_FAULT, NULL,
                               "GPU %d of the %d this node reports does not open: %.300s", device,
                               gpus, why);
        }
    }
    enum gpt_comm_kind want = ws->job.distributed.backend;
    enum gpt_comm_kind kind = ws->world == 1                                     ? GPT_COMM_LOCAL
                              : want == GPT_COMM_STAGED || want == GPT_COMM_NCCL ? want
                              : gpus > 0                                         ? GPT_COMM_AUTO
                                                                                 : GPT_COMM_TCP;
    int rc = gpt_comm_new(kind, &co, &ws->kv, device, *ret_be, ret_comm, &wk->err);
    const char *why = rc == 0 ? gpt_comm_staged_why(*ret_comm) : NULL;
    /* One line per node (its first worker) for the operator; the job's
     * start event carries the same for its record. */
    if (why && kind == GPT_COMM_AUTO && wk == &ws->w[0])
        log_warn("world %s: NCCL did not form (%s); collectives go through host memory over %s",
                 ws->prefix, why, (*ret_comm)->ops->name);
    return rc;
}

/* Takes the job owner's file-system identity for this thread and opens
 * the snapshot folder as the owner (its resolved path goes to ret_snapdir).
 * From here on every file of the job is opened with the owner's rights. */
static int worker_enter_owner(struct worker *wk, struct fsid_user *u, struct fsid_saved *saved,
                              char *ret_snapdir, size_t cap)
{
    struct workers *ws = wk->ws;
    int rc = fsid_user_lookup(ws->uid, u, &wk->err);
    if (rc == 0)
        rc = fsid_enter(u, saved, &wk->err);
    /* gptd may not act as the owner (no such user, no CAP_SETUID): no
     * retry changes that, whatever errno said it (failure_class.h). */
    if (rc == -EPERM || rc == -EACCES || rc == -ENOENT)
        rc = wk->err.code = -GPT_E_PERM;
    if (rc < 0)
        return rc;
    const char *dir = ws->snapdir[0] ? ws->snapdir : ws->job.snapshot.dir;
    if (dir[0])
        rc = paths_snapshot_dir_open(dir, ws->snapshot_roots, ws->state_dir, ret_snapdir, cap,
                                     &wk->err);
    return rc;
}

/* data.tokenizer gpt2: the vocabulary, read as the owner, and the cache
 * of tokenized text (the state directory's, or `gptd run`'s user cache). */
static int worker_tokcache(struct worker *wk, const struct fsid_user *user,
                           struct fsid_saved *saved, struct tokcache **ret)
{
    struct workers *ws = wk->ws;
    char cache[PATH_MAX] = "";
    if (ws->has_access) {
        int k = snprintf(cache, sizeof(cache), "%s/" TOKCACHE_DIR_NAME, ws->state_dir);
        if (k < 0 || (size_t)k >= sizeof(cache))
            cache[0] = '\0'; /* no cache rather than a wrong folder */
    } else {
        tokcache_user_dir(cache, sizeof(cache));
    }
    struct tokcache_opts o = {.vocab_dir = ws->job.data.vocab,
                              .data_roots = ws->has_access ? ws->data_roots : NULL,
                              .cache_dir = cache,
                              .uid = ws->has_access ? ws->uid : geteuid(),
                              .user = ws->has_access ? user : NULL,
                              .saved = ws->has_access ? saved : NULL,
                              .threads = 0};
    return tokcache_new(&o, ret, &wk->err);
}

static void *worker_main(void *arg)
{
    struct worker *wk = arg;
    struct workers *ws = wk->ws;
    struct gpt_comm *comm = NULL;
    struct gpt_backend *be = NULL;
    int rc;

    struct fsid_user user = {0};
    struct fsid_saved saved = {0};
    char snapdir[PATH_MAX] = "";
    struct gpt_data_policy policy = {.ctx = ws->data_roots, .check = paths_data_check};
    struct tokcache *tc = NULL;

    rc = worker_open(wk, (int)(wk - ws->w), &be, &comm);
    if (rc < 0)
        goto out;
    pthread_mutex_lock(&ws->comm_lock);
    wk->comm = comm;
    pthread_mutex_unlock(&ws->comm_lock);
    /* An abort that scanned the workers before the line above missed this
     * one, but set `aborted` first. */
    if (atomic_load(&ws->aborted))
        gpt_comm_abort(comm);
    if (ws->has_access &&
        (rc = worker_enter_owner(wk, &user, &saved, snapdir, sizeof(snapdir))) < 0)
        goto out;
    /* model.init_from shapes this worker's copy of the job (as the owner). */
    struct gpt_job job = ws->job;
    char roots[3 * PATH_MAX + 2];
    snprintf(roots, sizeof(roots), "%s:%s:%s", ws->data_roots, ws->snapshot_roots, ws->state_dir);
    if ((rc = init_from_resolve(&job, ws->has_access ? roots : NULL, &wk->err)) < 0)
        goto out;
    if (ws->job.data.tokenizer == GPT_TOK_GPT2) {
        if ((rc = worker_tokcache(wk, &user, &saved, &tc)) < 0)
            goto out;
        policy.bpe = tokcache_bpe(tc);
        if (!ws->has_access)
            policy.check = NULL;
    }

    struct gpt_trainer_opts to = {
        .job = &job,
        .comm = comm,
        .data_policy = ws->has_access || tc ? &policy : NULL,
        .snapshot_dir = snapdir[0]       ? snapdir
                        : ws->snapdir[0] ? ws->snapdir
                                         : NULL,
        .resume = ws->o.resume,
        .resume_path = ws->resume_path[0] ? ws->resume_path : NULL,
        .write_snapshots = ws->o.write_snapshots && wk == &ws->w[0],
        .run_id = ws->o.run_id,
        .backend = be,
        .hooks = {.ctx = wk,
                  .metric = worker_metric,
                  .event = worker_event,
                  .should_stop = worker_should_stop},
        .init_weights = job.model.init_from[0] ? init_from_weights : NULL,
        .init_weights_ctx = &job,
    };
    rc = gpt_train(&to, &wk->result, &wk->err);
out:
    tokcache_free(tc);
    fsid_leave(&saved);
    wk->rc = rc;
    /* The owner may free everything once `finished` is set and on_exit ran,
     * so the comm goes first and nothing of `wk` is touched afterwards. An
     * abort still using the comm holds comm_lock: withdrawing it waits for
     * that abort to finish. */
    pthread_mutex_lock(&ws->comm_lock);
    wk->comm = NULL;
    pthread_mutex_unlock(&ws->comm_lock);
    gpt_comm_free(comm);
    gpt_backend_free(be);
    if (atomic_fetch_sub(&ws->running, 1) == 1) {
        atomic_store(&ws->finished, true);
        if (ws->o.on_exit)
            ws->o.on_exit(ws->o.ctx);
    }
    return NULL;
}

int workers_start(const struct workers_opts *o, struct workers **ret, struct gpt_err *err)
{
    GPT_ASSERT(o && o->job && o->n_workers >= 1);
    /* Before any thread: worker i would share GPU i % gpus with another. */
    /* Named by whose count it is: the spec's, or this node's own (gptd.conf
     * `workers`, which it reported to the coordinator: a node fault). */
    int rc0 = gpu_plan_check_workers(
        o->n_workers, workers_gpu_count(o->job),
        o->job->distributed.workers_per_node > 0 ? "distributed.workers_per_node" : "workers", err);
    if (rc0 < 0)
        return rc0;
    struct workers *ws = calloc(1, sizeof(*ws));
    if (!ws)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory for workers");
    ws->o = *o;
    ws->job = *o->job;
    ws->o.job = &ws->job;
    snprintf(ws->snapdir, sizeof(ws->snapdir), "%s", o->snapshot_dir ? o->snapshot_dir : "");
    snprintf(ws->resume_path, sizeof(ws->resume_path), "%s", o->resume_path ? o->resume_path : "");
    snprintf(ws->prefix, sizeof(ws->prefix), "%s", o->kv_prefix ? o->kv_prefix : "local/");
    ws->o.snapshot_dir = NULL;
    ws->o.resume_path = NULL;
    ws->o.kv_prefix = NULL;
    snprintf(ws->bind_host, sizeof(ws->bind_host), "%s", o->bind_host ? o->bind_host : "");
    ws->o.bind_host = NULL;
    if (o->access) {
        ws->has_access = true;
        ws->uid = o->access->uid;
        snprintf(ws->data_roots, sizeof(ws->data_roots), "%s", o->access->data_roots);
        snprintf(ws->snapshot_roots, sizeof(ws->snapshot_roots), "%s", o->access->snapshot_roots);
        snprintf(ws->state_dir, sizeof(ws->state_dir), "%s", o->access->state_dir);
    }
    ws->o.access = NULL;
    ws->world = o->world > 0 ? o->world : o->n_workers;
    if (o->rank_base < 0 || o->rank_base + o->n_workers > ws->world) {
        int world = ws->world;
        free(ws);
        return gpt_err_set(err, -EINVAL, NULL, "ranks %d..%d do not fit a world of %d",
                           o->rank_base, o->rank_base + o->n_workers - 1, world);
    }
    if (o->kv) {
        ws->kv = *o->kv;
    } else {
        int rc = gpt_kv_mem_new(&ws->kv_local, err);
        if (rc < 0) {
            free(ws);
            return rc;
        }
        ws->kv = ws->kv_local;
    }
    atomic_init(&ws->stop_how, GPT_STOP_NO);
    atomic_init(&ws->aborted, false);
    atomic_init(&ws->finished, false);
    pthread_mutex_init(&ws->comm_lock, NULL);
    ws->n = o->n_workers;
    atomic_init(&ws->running, ws->n);
    ws->w = calloc((size_t)ws->n, sizeof(*ws->w));
    if (!ws->w) {
        pthread_mutex_destroy(&ws->comm_lock);
        gpt_kv_mem_free(&ws->kv_local);
        free(ws);
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory for workers");
    }
    for (int i = 0; i < ws->n; i++) {
        struct worker *wk = &ws->w[i];
        wk->ws = ws;
        wk->rank = o->rank_base + i;
    }
    for (int i = 0; i < ws->n; i++) {
        if (pthread_create(&ws->w[i].thread, NULL, worker_main, &ws->w[i]) != 0) {
            /* Threads already started would wait for peers that never come:
             * abort them and account for the ones never started. */
            atomic_fetch_sub(&ws->running, ws->n - i - 1);
            workers_abort(ws);
            for (int j = 0; j < i; j++)
                pthread_join(ws->w[j].thread, NULL);
            pthread_mutex_destroy(&ws->comm_lock);
            gpt_kv_mem_free(&ws->kv_local);
            free(ws->w);
            free(ws);
            return gpt_err_set(err, -EAGAIN, NULL, "cannot start worker thread %d", i);
        }
        ws->w[i].started = true;
    }
    *ret = ws;
    return 0;
}

void workers_request_stop(struct workers *ws, int how)
{
    atomic_store(&ws->stop_how, how);
}

void workers_abort(struct workers *ws)
{
    atomic_store(&ws->aborted, true);
    atomic_store(&ws->stop_how, GPT_STOP_NOW);
    /* Under the lock: a worker that ends meanwhile frees its comm only
     * after this loop is done with it. gpt_comm_abort does not block. */
    pthread_mutex_lock(&ws->comm_lock);
    for (int i = 0; i < ws->n; i++)
        if (ws->w[i].comm)
            gpt_comm_abort(ws->w[i].comm);
    pthread_mutex_unlock(&ws->comm_lock);
}

int workers_join(struct workers *ws, struct gpt_train_result *ret, struct gpt_err *err)
{
    int rc = GPT_TRAIN_DONE;
    struct worker *first_err = NULL;
    for (int i = 0; i < ws->n; i++) {
        if (ws->w[i].started && !ws->joined)
            pthread_join(ws->w[i].thread, NULL);
    }
    ws->joined = true;
    /* The root cause: a rank's own failure rather than the -ECANCELED its
     * peers see after it. */
    for (int i = 0; i < ws->n; i++) {
        struct worker *wk = &ws->w[i];
        if (wk->rc < 0 && (!first_err || (first_err->rc == -ECANCELED && wk->rc != -ECANCELED)))
            first_err = wk;
    }
    if (first_err) {
        if (err)
            *err = first_err->err;
        return first_err->rc;
    }
    for (int i = 0; i < ws->n; i++)
        if (ws->w[i].rc == GPT_TRAIN_STOPPED)
            rc = GPT_TRAIN_STOPPED;
    if (ret && ws->o.rank_base == 0)
        *ret = ws->w[0].result;
    return rc;
}

void workers_free(struct workers *ws)
{
    if (!ws)
        return;
    if (!ws->joined)
        (void)workers_join(ws, NULL, NULL);
    pthread_mutex_destroy(&ws->comm_lock);
    gpt_kv_mem_free(&ws->kv_local);
    free(ws->w);
    free(ws);
}
