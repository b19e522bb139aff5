/*
 * handlers_resume_from: `submit --resume-from JOB[:SNAPSHOT]` (see
 * handlers.h, resume_from.h). The snapshot is read and its copy written
 * on uv work threads, so that a large file (or one the source's owner
 * replaced with a sparse file whose header claims billions of
 * parameters) never stalls the loop: other clients are served meanwhile.
 * A queue slot is held from the first step to the answer (jobs_reserve),
 * so submits in flight together cannot pass max_queued_jobs; the new job
 * is recorded held (jobs_submit_held) until its copy is in its folder.
 * A copy holds the whole training state in memory, so copies run one at
 * a time (HANDLER_RF_AT_ONCE) and the others wait their turn in order:
 * gptd holds no more of them at once than it did when they ran on the
 * loop.
 * Owns the request's state on its way through. Loop thread, except
 * handler_rf_read and handler_rf_write.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "log.h"
#include "resume_from.h"

/* A held job's error until its copy is done; what stays if gptd stops
 * before that (the job never starts from scratch). */
#define HANDLER_RF_HELD                                                                            \
    JOBS_RESUME_FROM_ERROR                                                                         \
    "its snapshot is being copied (if gptd stopped meanwhile, the copy was not"                    \
    " finished: submit again)"

#define HANDLER_RF_AT_ONCE 1 /* copies under way at once (each holds a snapshot) */

struct handler_rf {
    uv_work_t work;
    struct handler_rf *next; /* waiting for its turn (daemon_ctx.rf_wait) */
    struct daemon_ctx *d;
    struct control_client *cl;
    json_t *id;
    struct gpt_job *job;
    uid_t uid;
    int64_t priority;
    char sweep[64]; /* "" none */
    int64_t job_id; /* the new job, once recorded (held) */
    bool queued;    /* its copy recorded and the job queued */
    struct resume_from rf;
    int rc;
    struct gpt_err err;
};

static void handler_rf_start(struct handler_rf *x);

static void handler_rf_free(struct handler_rf *x)
{
    resume_from_done(&x->rf);
    json_decref(x->id);
    free(x->job);
    free(x);
}

/* The answer, the client released, the slot given back (when the job was
 * not recorded: a recorded one's slot goes with its hold), x freed. */
static void handler_rf_answer(struct handler_rf *x)
{
    struct control_client *cl = x->cl;
    struct daemon_ctx *d = x->d;
    if (x->rc < 0) {
        if (x->rc != -GPT_E_SPEC && x->rc != -ENOENT && x->rc != -EPERM && x->rc != -EALREADY)
            log_info("request submit from uid %u failed: %s", (unsigned)x->uid, x->err.msg);
        control_reply_err(cl, x->id, x->rc, &x->err);
    } else {
        json_t *r = json_pack("{s:I, s:s, s:s}", "job", (json_int_t)x->job_id, "name",
                              x->job->name[0] ? x->job->name : "job", "state", "queued");
        if (r)
            json_object_set_new(r, "resumed_from",
                                json_pack("{s:I, s:I, s:I}", "job", (json_int_t)x->rf.src_job,
                                          "snapshot", (json_int_t)x->rf.src_snapshot, "step",
                                          (json_int_t)x->rf.meta.step));
        if (r)
            control_reply_ok(cl, x->id, r);
        else /* queued all the same: only the answer is lost */
            control_reply_err(cl, x->id, gpt_err_set(&x->err, -ENOMEM, NULL, "out of memory"),
                              &x->err);
    }
    if (d->jobs) { /* NULL once a stop has freed it: nothing is counted any more */
        if (x->job_id > 0)
            jobs_release_held(d->jobs, x->job_id, x->queued);
        else
            jobs_unreserve(d->jobs, x->uid);
    }
    cl->busy--;
    control_client_idle_check(cl);
    control_client_unref(cl);
    handler_rf_free(x);
}

/* A running request's end: answered, and the next one's turn. */
static void handler_rf_finish(struct handler_rf *x)
{
    struct daemon_ctx *d = x->d;
    handler_rf_answer(x);
    d->rf_running--;
    struct handler_rf *next = d->rf_wait;
    if (next) { /* its turn */
        d->rf_wait = next->next;
        if (!d->rf_wait)
            d->rf_wait_tail = NULL;
        handler_rf_start(next);
    }
}

static void handler_rf_write(uv_work_t *w)
{
    struct handler_rf *x = w->data;
    x->rc = resume_from_write(&x->rf, &x->err);
}

static void handler_rf_write_done(uv_work_t *w, int status)
{
    struct handler_rf *x = w->data;
    if (status < 0)
        x->rc = gpt_err_set(&x->err, -ECANCELED, NULL, "cancelled");
    x->rc = resume_from_commit(x->d->db, x->d->cfg.node_name, &x->rf, x->rc, &x->err);
    x->queued = x->rc == 0; /* even if the sweep tag below fails (as a plain submit) */
    if (x->rc == 0 && x->sweep[0])
        x->rc = db_job_set_sweep(x->d->db, x->job_id, x->sweep, &x->err);
    handler_rf_finish(x);
}

static void handler_rf_read(uv_work_t *w)
{
    struct handler_rf *x = w->data;
    x->rc = resume_from_read(&x->rf, &x->err);
}

/* The snapshot is read: record the job (held), then copy it into its
 * folder on a work thread again. */
static void handler_rf_read_done(uv_work_t *w, int status)
{
    struct handler_rf *x = w->data;
    struct daemon_ctx *d = x->d;
    if (status < 0)
        x->rc = gpt_err_set(&x->err, -ECANCELED, NULL, "cancelled");
    if (x->rc == 0 && (d->stopping || !d->jobs))
        x->rc = gpt_err_set(&x->err, -EAGAIN, NULL, "gptd is stopping");
    if (x->rc == 0)
        x->rc = jobs_submit_held(d->jobs, x->job, x->uid, x->priority, HANDLER_RF_HELD, &x->job_id,
                                 &x->err);
    if (x->rc < 0) {
        handler_rf_finish(x);
        return;
    }
    x->rc = resume_from_stage(d->db, d->cfg.state_dir, &x->rf, x->job_id, &x->err);
    if (x->rc == 0) {
        int rc = uv_queue_work(d->loop, &x->work, handler_rf_write, handler_rf_write_done);
        if (rc == 0)
            return;
        x->rc = gpt_err_set(&x->err, -EAGAIN, NULL, "cannot queue the work: %s", uv_strerror(rc));
    }
    /* Recorded but not copied: resume_from_commit leaves it failed. */
    x->rc = resume_from_commit(d->db, d->cfg.node_name, &x->rf, x->rc, &x->err);
    handler_rf_finish(x);
}

/* Reads the snapshot on a work thread; the request counts as running
 * until handler_rf_finish. */
static void handler_rf_start(struct handler_rf *x)
{
    struct daemon_ctx *d = x->d;
    d->rf_running++;
    if (d->stopping) {
        x->rc = gpt_err_set(&x->err, -EAGAIN, NULL, "gptd is stopping");
        handler_rf_finish(x);
        return;
    }
    int rc = uv_queue_work(d->loop, &x->work, handler_rf_read, handler_rf_read_done);
    if (rc < 0) {
        x->rc = gpt_err_set(&x->err, -EAGAIN, NULL, "cannot queue the work: %s", uv_strerror(rc));
        handler_rf_finish(x);
    }
}

int handler_resume_from_run(struct daemon_ctx *d, struct control_client *cl,
                            const struct gpt_ctl_request *req, struct gpt_err *err)
{
    struct handler_rf *x = calloc(1, sizeof(*x));
    if (x)
        x->job = malloc(sizeof(*x->job));
    if (!x || !x->job) {
        free(x);
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    }
    int rc = handler_submit_check(d, req, cl->uid, x->job, err);
    if (rc == 0)
        rc = resume_from_prepare(d->db, d->cfg.node_name, req->resume_from,
                                 req->present & (1u << GPT_CTL_F_SNAPSHOT) ? req->snapshot : 0,
                                 cl->uid, x->job, &x->rf, err);
    if (rc == 0) /* held until the answer: refused now when the queue is full */
        rc = jobs_reserve(d->jobs, cl->uid, req->priority, err);
    if (rc < 0) {
        handler_rf_free(x);
        return rc;
    }
    x->d = d;
    x->cl = cl;
    x->id = json_deep_copy(req->id);
    x->uid = cl->uid;
    x->priority = req->priority;
    snprintf(x->sweep, sizeof(x->sweep), "%s", req->sweep ? req->sweep : "");
    x->work.data = x;
    control_client_ref(cl);
    cl->busy++;
    if (d->rf_running < HANDLER_RF_AT_ONCE) {
        handler_rf_start(x); /* answers itself, even when it cannot start */
    } else {
        if (d->rf_wait_tail)
            d->rf_wait_tail->next = x;
        else
            d->rf_wait = x;
        d->rf_wait_tail = x;
    }
    return 0;
}

void handler_resume_from_stop(struct daemon_ctx *d)
{
    struct handler_rf *x;
    while ((x = d->rf_wait)) {
        d->rf_wait = x->next;
        if (!d->rf_wait)
            d->rf_wait_tail = NULL;
        x->rc = gpt_err_set(&x->err, -EAGAIN, NULL, "gptd is stopping");
        handler_rf_answer(x);
    }
}
