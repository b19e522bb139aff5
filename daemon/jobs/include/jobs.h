/*
 * jobs: the job queue, the scheduler and the running jobs.
 *
 * States: queued -> running -> completed | failed | cancelled; a resume
 * puts a finished job back to queued, and a job found running at start-up
 * (gptd died) is re-queued to resume from its newest snapshot. Several
 * jobs run at once, each on its own nodes of the cluster; the queue is
 * ordered by priority (higher first), then FIFO, and served in that order:
 * the head starts once its `min` nodes are free (or at once when nothing
 * runs), and the jobs behind it wait (no job passes a waiting one). A job
 * whose `min` is more than the cluster's alive nodes does not wait at the
 * head: the jobs behind it are served meanwhile (jobs_sched.c).
 *
 * Jobs run on the cluster's worlds (daemon/cluster.h, daemon/rdzv.h): on
 * the coordinator (every gptd is one, of its own loopback cluster, unless
 * it joins another) the scheduler hands the next job to the round
 * protocol; the nodes' agents run the workers. A member starts no job.
 * Global rank 0's metrics and events come back through the cluster into
 * the job's pending list; once per loop turn they are written to SQLite in
 * one transaction per job and then sent to every follower and to the feed.
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
#include <stdbool.h>
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

/* Starts the queued jobs that fit on the free nodes (deferred to the next
 * loop iteration); while jobs wait, looks again every second. */
void jobs_schedule(struct jobs *js);

/* Adds a validated job to the queue. Returns its id. Refuses (-EPERM) a
 * priority above user_max_priority unless `owner` is root, and
 * (-GPT_E_LIMIT) a job beyond max_queued_jobs or, unless `owner` is root,
 * beyond max_queued_jobs_per_uid. */
int jobs_submit(struct jobs *js, const struct gpt_job *job, uid_t owner, int64_t priority,
                int64_t *ret_id, struct gpt_err *err);

/* Whether `n` more jobs of `owner` fit in the queue now (max_queued_jobs,
 * and max_queued_jobs_per_uid unless `owner` is root): a sweep's first
 * submit asks for all of its jobs, so that a sweep that cannot fit is
 * refused whole instead of queued in part. -GPT_E_LIMIT naming the count
 * and the limit when not. */
int jobs_room_for(struct jobs *js, uid_t owner, int64_t n, struct gpt_err *err);

/* A queue slot for a submit that is checked on a work thread before it is
 * queued (--resume-from reads a snapshot first): until jobs_unreserve (or
 * jobs_release_held) every other submit counts it as a queued job, so
 * submits in flight together cannot pass max_queued_jobs nor the owner's
 * max_queued_jobs_per_uid. Refused (-EPERM, -GPT_E_LIMIT) as jobs_submit. */
int jobs_reserve(struct jobs *js, uid_t owner, int64_t priority, struct gpt_err *err);
/* Gives back a slot of jobs_reserve (of `owner`) whose submit was refused. */
void jobs_unreserve(struct jobs *js, uid_t owner);

/* jobs_submit for a reserved submit whose first run needs files that are
 * still being written (a --resume-from snapshot copied on a work thread):
 * the job is recorded failed with `held_msg` as its error, so that it
 * never starts, not even after gptd dies before jobs_release_held, and
 * is not scheduled; `gptctl resume` and `cancel` refuse it while it is
 * held. No room
 * check: the reservation holds its place. */
int jobs_submit_held(struct jobs *js, const struct gpt_job *job, uid_t owner, int64_t priority,
                     const char *held_msg, int64_t *ret_id, struct gpt_err *err);
/* How the error of a job submitted with --resume-from begins while its
 * copy is not recorded (held, or failed before the copy was): such a job
 * with no snapshot is not resumed (jobs_resume), which would start it
 * from scratch. */
#define JOBS_RESUME_FROM_ERROR "--resume-from: "
/* Ends the hold of job `id` and gives back its reservation. The caller
 * has already moved it to queued (then it is scheduled) or left it
 * failed with the reason. */
void jobs_release_held(struct jobs *js, int64_t id, bool queued);
/* Whether job `id` is held (its --resume-from copy under way): list and
 * status show it "copying", not as the failure it is recorded as. */
bool jobs_is_held(const struct jobs *js, int64_t id);

/* Cancels a queued or running job (a running one stops at the next step
 * boundary, writing a snapshot). The caller (handler_dispatch) has checked
 * that `who` is the owner or root. */
int jobs_cancel(struct jobs *js, int64_t id, uid_t who, struct gpt_err *err);

/* Queues a finished job again, to continue from snapshot `snapshot_id`
 * (0 = its newest valid snapshot), with `overrides` (an object of the keys
 * a resume may change, or NULL) applied to its spec; refuses a resume with
 * nothing left to train, and one beyond max_queued_jobs or, unless `who`
 * is root, the owner's max_queued_jobs_per_uid. *ret_plan (when non-NULL)
 * gets the plan (resume_plan_json) on success. The caller
 * (handler_dispatch) has checked that `who` is the owner or root. */
int jobs_resume(struct jobs *js, int64_t id, int64_t snapshot_id, const json_t *overrides,
                uid_t who, json_t **ret_plan, struct gpt_err *err);

/* The oldest running job's id, 0 when idle. */
int64_t jobs_running(const struct jobs *js);
/* The running jobs' ids, oldest first: a new JSON array. */
json_t *jobs_running_json(const struct jobs *js);
/* Whether job `job` runs. */
bool jobs_runs(const struct jobs *js, int64_t job);
/* A queued job's place in the queue (1: the next to start) and what it
 * waits for ("needs 2 nodes, 1 free", "needs 3 nodes, cluster has 2"), as
 * of the last scheduler pass: 0 and *why unset when the job is not known
 * to wait. */
int jobs_queue_position(const struct jobs *js, int64_t job, const char **why);

/* Starts a `logs` stream on a client (validated request fields). */
int jobs_follow(struct jobs *js, struct control_client *cl, const json_t *id, int64_t job,
                int64_t since, bool follow, struct gpt_err *err);
/* Control hook: the client's output drained. */
void jobs_client_drained(struct jobs *js, struct control_client *cl);

/* Graceful stop: the running jobs write a snapshot and stop, and are queued
 * to resume on the next start; then done(ctx) runs (on the loop). Calling
 * it a second time stops them at once, without a snapshot. */
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
