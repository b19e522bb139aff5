/*
 * jobs: the job queue, the scheduler and the one running job.
 *
 * States: queued -> running -> completed | failed | cancelled; a resume
 * puts a finished job back to queued, and a job found running at start-up
 * (gptd died) is re-queued to resume from its newest snapshot. One job
 * runs at a time; the queue is ordered by priority (higher first), then
 * FIFO.
 *
 * Jobs run on the cluster's worlds (daemon/cluster.h, daemon/rdzv.h): on
 * the coordinator (every gptd is one, of its own loopback cluster, unless
 * it joins another) the scheduler hands the next job to the round
 * protocol; the nodes' agents run the workers. A member starts no job.
 * Global rank 0's metrics and events come back through the cluster into
 * the mailbox (daemon/mailbox.h); each drain writes them to SQLite in one
 * transaction and then sends them to every follower and to the feed.
 *
 * Followers (`logs`, daemon/follow.h): history is replayed from SQLite in
 * chunks, the next chunk only once the previous one has been written to
 * the socket; then live records follow until the job ends.
 *
 * Loop thread only.
 */
#ifndef GPTD_JOBS_H
#define GPTD_JOBS_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "config.h"
#include "control.h"
#include "db.h"
#include "gpt_err.h"
#include "jobspec.h"

struct jobs;

/* Creates the scheduler. Jobs that were running when gptd last stopped are
 * re-queued to resume. Borrows everything; call jobs_schedule to start. */
int jobs_new(uv_loop_t *loop, struct db *db, const struct config *cfg, struct control *ctl,
             const char *state_dir, struct jobs **ret, struct gpt_err *err);

/* Starts the next queued job if none is running (deferred to the next loop
 * iteration). */
void jobs_schedule(struct jobs *js);

/* Adds a validated job to the queue. Returns its id. */
int jobs_submit(struct jobs *js, const struct gpt_job *job, uid_t owner, int64_t priority,
                int64_t *ret_id, struct gpt_err *err);

/* Cancels a queued or running job (a running one stops at the next step
 * boundary, writing a snapshot). The caller (handler_dispatch) has checked
 * that `who` is the owner or root. */
int jobs_cancel(struct jobs *js, int64_t id, uid_t who, struct gpt_err *err);

/* Queues a finished job again, to continue from snapshot `snapshot_id`
 * (0 = its newest valid snapshot), with `overrides` (an object of the keys
 * a resume may change, or NULL) applied to its spec; refuses a resume with
 * nothing left to train. *ret_plan (when non-NULL) gets the plan
 * (resume_plan_json) on success. The caller (handler_dispatch) has checked
 * that `who` is the owner or root. */
int jobs_resume(struct jobs *js, int64_t id, int64_t snapshot_id, const json_t *overrides,
                uid_t who, json_t **ret_plan, struct gpt_err *err);

/* The running job's id, 0 when idle. */
int64_t jobs_running(const struct jobs *js);

/* Starts a `logs` stream on a client (validated request fields). */
int jobs_follow(struct jobs *js, struct control_client *cl, const json_t *id, int64_t job,
                int64_t since, bool follow, struct gpt_err *err);
/* Control hook: the client's output drained. */
void jobs_client_drained(struct jobs *js, struct control_client *cl);

/* Graceful stop: a running job writes a snapshot and stops, and is queued
 * to resume on the next start; then done(ctx) runs (on the loop). Calling
 * it a second time stops the job at once, without a snapshot. */
void jobs_shutdown(struct jobs *js, void (*done)(void *ctx), void *ctx);

struct cluster;
/* On a cluster's coordinator: every job runs on the cluster's world (the
 * rendezvous of daemon/rdzv.h) instead of on local workers, and forwarded
 * submits, metrics and events come in through the cluster. Borrows cl. */
void jobs_set_cluster(struct jobs *js, struct cluster *cl);

/* Frees (after jobs_shutdown's done). Closes the loop handles; NULL ok. */
void jobs_free(struct jobs *js);

/* The running job's newest per-rank step times (gpt_metric.rank_step_ms,
 * not stored in the database): their count, copied into
 * out[GPT_METRIC_RANKS_MAX]; 0 when `job` is not running or none came yet.
 * NULL js allowed. Loop thread. */
int jobs_rank_step_ms(const struct jobs *js, int64_t job, float *out);

#endif
