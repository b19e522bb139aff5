/*
 * jobs: the life cycle of the jobs object, a run's end, and the cluster's
 * callbacks (see jobs.h): the top of the jobs folder, which calls down to
 * jobs_requests.c (submit, cancel, resume), jobs_sched.c (which queued job
 * starts when) and jobs_run.c (the running jobs, their records and
 * followers). Records arrive from the cluster on the loop thread and are
 * stored once per loop turn, per job. Loop thread.
 */
#include "jobs.h"
#include "jobs_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "log.h"
#include "paths.h"
#include "trainer.h"

/* Records a job's end (rc: GPT_TRAIN_DONE, GPT_TRAIN_STOPPED or an error
 * described by err_in), ends the streams, schedules the next job. */
static void jobs_finish_outcome(struct jobs *js, struct jobs_run *run, int rc,
                                const struct gpt_train_result *res_in, const struct gpt_err *err_in)
{
    struct gpt_train_result res = *res_in;
    struct gpt_err err = *err_in;
    jobs_store_records(js, run); /* records still pending belong before the end */
    jobs_unlink(js, run);

    int state;
    const char *status;
    char error[DB_ERROR_MAX] = "";
    if (run->stop == JOBS_STOP_SHUTDOWN && (rc == GPT_TRAIN_STOPPED || rc == -ECANCELED)) {
        state = DB_JOB_QUEUED; /* resumes on the next start */
        status = "stopped";
    } else if (rc == GPT_TRAIN_DONE) {
        state = DB_JOB_COMPLETED;
        status = "completed";
    } else if (rc == GPT_TRAIN_STOPPED) {
        state = DB_JOB_CANCELLED;
        status = "cancelled";
    } else {
        state = DB_JOB_FAILED;
        status = "failed";
        snprintf(error, sizeof(error), "%s", err.msg[0] ? err.msg : gpt_strerror(rc));
    }
    double now = jobs_now();
    struct gpt_err dberr;
    int drc = db_begin(js->db, &dberr);
    if (drc == 0)
        drc = db_run_end(js->db, run->run_id, status, now, &dberr);
    if (drc == 0)
        drc = db_job_set_state(js->db, run->job_id, state, error, now, &dberr);
    if (drc == 0 && state == DB_JOB_QUEUED)
        drc = db_job_set_resume(js->db, run->job_id, 1, 0, &dberr);
    if (drc == 0)
        drc = db_commit(js->db, &dberr);
    else
        db_rollback(js->db);
    if (drc < 0)
        log_error("job %lld: cannot record its end: %s", (long long)run->job_id, dberr.msg);

    if (state == DB_JOB_FAILED)
        log_error("job %lld: failed: %s", (long long)run->job_id, error);
    else
        log_info("job %lld: run %lld %s at step %lld", (long long)run->job_id,
                 (long long)run->run_id, status, (long long)res.step);
    if (state == DB_JOB_QUEUED)
        jobs_event(js, run->job_id, run->run_id, res.step, "requeue",
                   "gptd is stopping; the job resumes from its snapshot on the next start");
    else if (state == DB_JOB_CANCELLED)
        jobs_event(js, run->job_id, run->run_id, res.step, "state",
                   "cancelled by uid %u at step %lld", (unsigned)run->cancelled_by,
                   (long long)res.step);
    else
        jobs_event(js, run->job_id, run->run_id, res.step, "state", "%s%s%s", status,
                   error[0] ? ": " : "", error);
    jobs_fanout_end(js, run->job_id);
    free(run);

    if (js->shutting_down) {
        if (!js->runs && js->done) {
            void (*done)(void *ctx) = js->done;
            js->done = NULL;
            done(js->done_ctx);
        }
    } else {
        jobs_schedule(js);
    }
}

int64_t jobs_running(const struct jobs *js)
{
    return js->runs ? js->runs->job_id : 0;
}

json_t *jobs_running_json(const struct jobs *js)
{
    json_t *arr = json_array();
    for (const struct jobs_run *r = js->runs; arr && r; r = r->next)
        json_array_append_new(arr, json_integer(r->job_id));
    return arr;
}

bool jobs_runs(const struct jobs *js, int64_t job)
{
    return jobs_find(js, job) != NULL;
}

/* --- life cycle --------------------------------------------------------- */

int jobs_new(uv_loop_t *loop, struct db *db, const struct config *cfg, struct control *ctl,
             const char *state_dir, struct jobs **ret, struct gpt_err *err)
{
    struct jobs *js = calloc(1, sizeof(*js));
    if (!js)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    js->loop = loop;
    js->db = db;
    js->cfg = cfg;
    js->ctl = ctl;
    snprintf(js->state_dir, sizeof(js->state_dir), "%s", state_dir);
    int rc = db_runs_close_open(db, jobs_now(), err);
    if (rc == 0)
        rc = db_jobs_requeue_running(db, jobs_now(), err);
    if (rc < 0) {
        free(js);
        return rc;
    }
    if (rc > 0)
        log_notice("%d job%s that %s running when gptd stopped will resume", rc, rc == 1 ? "" : "s",
                   rc == 1 ? "was" : "were");
    uv_timer_init(loop, &js->flush);
    js->flush.data = js;
    uv_timer_init(loop, &js->sched);
    js->sched.data = js;
    js->handles = 2;
    *ret = js;
    return 0;
}

void jobs_shutdown(struct jobs *js, void (*done)(void *ctx), void *ctx)
{
    js->shutting_down = true;
    js->shutdown_calls++;
    uv_timer_stop(&js->sched);
    if (!js->runs) {
        if (done)
            done(ctx);
        return;
    }
    js->done = done;
    js->done_ctx = ctx;
    if (js->shutdown_calls > 1) {
        /* The worlds go on without this coordinator's answer; the jobs
         * resume from their newest snapshots when it is back. The last
         * end calls done. */
        while (js->runs) {
            struct jobs_run *run = js->runs;
            log_notice("job %lld: stopping now, without a snapshot", (long long)run->job_id);
            struct gpt_train_result res = {.step = run->last_step};
            struct gpt_err err;
            gpt_err_clear(&err);
            run->stop = JOBS_STOP_SHUTDOWN;
            jobs_finish_outcome(js, run, GPT_TRAIN_STOPPED, &res, &err);
        }
        return;
    }
    for (struct jobs_run *run = js->runs; run; run = run->next) {
        if (run->stop == JOBS_STOP_NONE)
            run->stop = JOBS_STOP_SHUTDOWN;
        log_notice("job %lld: writing a snapshot before gptd stops", (long long)run->job_id);
    }
    /* A job with no world ends inside this call (and may call done). */
    cluster_job_stop(js->cluster, 0);
}

static void jobs_on_handle_closed(uv_handle_t *h)
{
    struct jobs *js = h->data;
    if (--js->handles == 0) {
        free(js->waits);
        free(js->held);
        free(js->resv);
        free(js);
    }
}

void jobs_free(struct jobs *js)
{
    if (!js)
        return;
    GPT_ASSERT(!js->runs);
    uv_close((uv_handle_t *)&js->flush, jobs_on_handle_closed);
    uv_close((uv_handle_t *)&js->sched, jobs_on_handle_closed);
}

/* --- the cluster (coordinator only) ------------------------------------- */

static int jobs_cluster_submit(void *ctx, const char *spec_json, uid_t uid, int64_t priority,
                               int64_t *ret_id, struct gpt_err *err)
{
    struct jobs *js = ctx;
    struct gpt_job *job = malloc(sizeof(*job));
    if (!job)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    int rc = gpt_jobspec_parse(spec_json, strlen(spec_json), NULL, 0, job, err);
    /* The coordinator's roots bound what any node may submit. */
    if (rc == 0)
        rc = paths_check_job(job, js->cfg->data_roots, js->cfg->snapshot_roots, js->state_dir, err);
    if (rc == 0)
        rc = paths_check_access(job, uid, err);
    if (rc == 0)
        rc = jobs_submit(js, job, uid, priority, ret_id, err);
    free(job);
    return rc;
}

static void jobs_cluster_metric(void *ctx, int64_t job, const struct gpt_metric *m)
{
    struct jobs *js = ctx;
    struct jobs_run *run = jobs_find(js, job);
    struct mailbox_msg *msg = run ? calloc(1, sizeof(*msg)) : NULL;
    if (!msg)
        return; /* a lost metric is better than a stalled loop */
    msg->kind = MAILBOX_METRIC;
    msg->u.m = *m;
    jobs_record_add(js, run, msg);
}

static void jobs_cluster_event(void *ctx, int64_t job, const struct gpt_event *e, const char *node)
{
    struct jobs *js = ctx;
    struct jobs_run *run = jobs_find(js, job);
    struct mailbox_msg *msg = run ? calloc(1, sizeof(*msg)) : NULL;
    if (!msg)
        return;
    msg->kind = MAILBOX_EVENT;
    msg->u.e = *e;
    if (msg->u.e.step < 0)
        msg->u.e.step = run->last_step;
    if (msg->u.e.run_id == 0)
        msg->u.e.run_id = run->run_id;
    snprintf(msg->node, sizeof(msg->node), "%s", node ? node : "");
    jobs_record_add(js, run, msg);
}

static void jobs_cluster_world(void *ctx, int64_t job, int world_size, int nodes,
                               int64_t *ret_run_id)
{
    struct jobs *js = ctx;
    *ret_run_id = 0;
    struct jobs_run *run = jobs_find(js, job);
    if (!run)
        return;
    struct gpt_err err;
    double now = jobs_now();
    int rc = db_begin(js->db, &err);
    if (rc == 0 && run->run_id)
        rc = db_run_end(js->db, run->run_id, "reformed", now, &err);
    if (rc == 0)
        rc = db_run_insert(js->db, job, world_size, NULL, now, &run->run_id, &err);
    if (rc == 0)
        rc = db_commit(js->db, &err);
    else
        db_rollback(js->db);
    if (rc < 0) {
        log_error("job %lld: cannot record the new world: %s", (long long)job, err.msg);
        return;
    }
    *ret_run_id = run->run_id;
    log_info("job %lld: run %lld on %d node%s, world size %d", (long long)job,
             (long long)run->run_id, nodes, nodes == 1 ? "" : "s", world_size);
}

static void jobs_cluster_waiting(void *ctx, int64_t job, bool waiting)
{
    struct jobs *js = ctx;
    if (!jobs_find(js, job))
        return;
    struct gpt_err err;
    if (db_job_set_state(js->db, job, waiting ? DB_JOB_WAITING : DB_JOB_RUNNING, NULL, jobs_now(),
                         &err) < 0)
        log_error("job %lld: %s", (long long)job, err.msg);
}

static void jobs_cluster_finished(void *ctx, int64_t job, int rc, int64_t step, const char *error)
{
    struct jobs *js = ctx;
    struct jobs_run *run = jobs_find(js, job);
    if (!run)
        return;
    struct gpt_train_result res;
    memset(&res, 0, sizeof(res));
    res.step = step > run->last_step ? step : run->last_step;
    struct gpt_err err;
    gpt_err_clear(&err);
    if (rc < 0)
        gpt_err_set(&err, rc, NULL, "%s", error && error[0] ? error : gpt_strerror(rc));
    jobs_finish_outcome(js, run, rc, &res, &err);
}

static void jobs_cluster_restarts(void *ctx, int64_t job, int restarts)
{
    struct jobs *js = ctx;
    struct gpt_err err;
    if (db_job_set_restarts(js->db, job, restarts, &err) < 0)
        log_error("job %lld: cannot record its restarts: %s", (long long)job, err.msg);
}

/* A member's `sample` reply, kept as one made here (handlers_sample.c). */
static void jobs_cluster_sample(void *ctx, int64_t job, const json_t *o, const char *node)
{
    struct jobs *js = ctx;
    struct db_sample r;
    struct gpt_err err;
    int rc = db_sample_from_json(o, &r, &err);
    if (rc == 0) {
        r.job_id = job;
        rc = db_sample_insert(js->db, &r, js->cfg->sample_history, &err);
    }
    if (rc < 0)
        log_warn("job %lld: a sample from node %s not kept: %s", (long long)job, node, err.msg);
}

void jobs_set_cluster(struct jobs *js, struct cluster *cl)
{
    js->cluster = cl;
    struct cluster_jobs_hooks h = {js,
                                   jobs_cluster_submit,
                                   jobs_cluster_metric,
                                   jobs_cluster_event,
                                   jobs_cluster_world,
                                   jobs_cluster_waiting,
                                   jobs_cluster_finished,
                                   jobs_cluster_restarts,
                                   jobs_cluster_sample};
    cluster_set_jobs_hooks(cl, &h);
}
