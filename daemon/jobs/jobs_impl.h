/*
 * jobs_impl: what jobs.c (life cycle, a run's end, the cluster callbacks),
 * jobs_requests.c (submit, cancel, resume), jobs_sched.c (the queue: which
 * job starts when, and why the others wait) and jobs_run.c (the running
 * jobs, their records and followers) share; calls run in that order, never
 * back. Private to those files. Loop thread.
 */
#ifndef GPTD_JOBS_IMPL_H
#define GPTD_JOBS_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "jobs.h"
#include "mailbox.h"

enum jobs_stop { JOBS_STOP_NONE, JOBS_STOP_CANCEL, JOBS_STOP_SHUTDOWN };

struct jobs_run {
    struct jobs_run *next; /* the running jobs, oldest first */
    int64_t job_id, run_id;
    struct gpt_job spec;
    int64_t last_step; /* newest metric step seen */
    int32_t n_rank_ms; /* the newest record's per-rank step times (status JOB) */
    float rank_ms[GPT_METRIC_RANKS_MAX];
    int stop; /* enum jobs_stop */
    uid_t cancelled_by;
    /* records from the cluster not yet stored (oldest first); stored in
     * one transaction per loop turn (jobs.flush) */
    struct mailbox_msg *pend, *pend_tail;
};

/* Why a queued job has not started (the last scheduler pass). */
struct jobs_wait {
    int64_t job;
    int position;  /* 1: the next to start */
    int nodes_min; /* its distributed.nodes MIN */
    char why[96];  /* "needs 2 nodes, 1 free" */
};

#define JOBS_QUEUE_SCAN 1024 /* queued jobs the scheduler looks at per pass */

struct jobs {
    uv_loop_t *loop;
    struct db *db;
    const struct config *cfg;
    struct control *ctl;
    char state_dir[CONFIG_PATH_MAX];
    uv_timer_t flush; /* stores the runs' pending records, once per loop turn */
    uv_timer_t sched;
    int handles;
    struct jobs_run *runs; /* the running jobs, oldest first */
    int nruns;
    struct jobs_wait *waits; /* the queue as the last pass saw it */
    int nwaits;
    struct cluster *cluster; /* coordinator of a cluster: jobs run on its world */
    /* Submits checked on a work thread before they are queued
     * (--resume-from): each holds a queue slot (counted as queued by every
     * other submit) until it is queued or refused; those already recorded
     * are held (jobs_submit_held) until their snapshot is copied. */
    uid_t *resv; /* the owner of each slot */
    int reserved, resv_cap;
    struct jobs_held {
        int64_t id;
        uid_t owner;
    } * held;
    int nheld, held_cap;
    bool shutting_down;
    int shutdown_calls;
    void (*done)(void *ctx);
    void *done_ctx;
};

/* jobs_run.c, the layer the other jobs files call down to (it calls none
 * of them). Wall-clock seconds (the database's times). */
double jobs_now(void);

/* Records a daemon-side event (autocommit) and sends it to followers. */
void jobs_event(struct jobs *js, int64_t job, int64_t run_id, int64_t step, const char *kind,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Ends the followers of a job that has reached a final state. */
void jobs_fanout_end(struct jobs *js, int64_t job);

/* jobs_run.c: starts queued job `id` on the cluster. 0; -EAGAIN (too few
 * nodes free) or -ENOSPC (the cluster has fewer than its `min`), err
 * saying why, when it does not fit: the job stays queued (see
 * cluster_job_fits for `alone_short`); other errors mark the job failed. */
int jobs_start(struct jobs *js, int64_t id, bool alone_short, struct gpt_err *err);
/* The running job `job`, NULL when it does not run. */
struct jobs_run *jobs_find(const struct jobs *js, int64_t job);
/* Stores a run's pending records: one transaction for all of them, then
 * the followers. */
void jobs_store_records(struct jobs *js, struct jobs_run *run);
/* Queues a record of a running job (taken); stored within the loop turn. */
void jobs_record_add(struct jobs *js, struct jobs_run *run, struct mailbox_msg *msg);
/* Takes a run off the running ones. */
void jobs_unlink(struct jobs *js, struct jobs_run *run);

#endif
