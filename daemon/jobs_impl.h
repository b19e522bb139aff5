/*
 * jobs_impl: what jobs.c (queue, scheduler, the running job, followers,
 * the cluster callbacks) and jobs_requests.c (submit, cancel, resume)
 * share. Private to those two files. Loop thread.
 */
#ifndef GPTD_JOBS_IMPL_H
#define GPTD_JOBS_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "jobs.h"
#include "mailbox.h"

enum jobs_stop { JOBS_STOP_NONE, JOBS_STOP_CANCEL, JOBS_STOP_SHUTDOWN };

struct jobs_run {
    int64_t job_id, run_id;
    struct gpt_job spec;
    int64_t last_step; /* newest metric step seen */
    int32_t n_rank_ms; /* the newest record's per-rank step times (status JOB) */
    float rank_ms[GPT_METRIC_RANKS_MAX];
    int stop; /* enum jobs_stop */
    uid_t cancelled_by;
};

struct jobs {
    uv_loop_t *loop;
    struct db *db;
    const struct config *cfg;
    struct control *ctl;
    char state_dir[CONFIG_PATH_MAX];
    struct mailbox mb; /* records of the running job, from workers or the cluster */
    uv_timer_t sched;
    int handles;
    struct jobs_run *run;
    struct cluster *cluster; /* coordinator of a cluster: jobs run on its world */
    bool shutting_down;
    int shutdown_calls;
    void (*done)(void *ctx);
    void *done_ctx;
};

/* Wall-clock seconds (the database's times). */
double jobs_now(void);

/* Records a daemon-side event (autocommit) and sends it to followers. */
void jobs_event(struct jobs *js, int64_t job, int64_t run_id, int64_t step, const char *kind,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Ends the followers of a job that has reached a final state. */
void jobs_fanout_end(struct jobs *js, int64_t job);

#endif
