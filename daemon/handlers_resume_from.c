/*
 * handlers_resume_from: `submit --resume-from JOB[:SNAPSHOT]` (see
 * handlers.h, resume_from.h). The snapshot is read and its copy written
 * on threads of the user work pool (userwork.h), so that a large file (or
 * one the source's owner replaced with a sparse file whose header claims
 * billions of parameters) never stalls the loop: other clients are served
 * meanwhile. A queue slot is held from the first step to the answer
 * (jobs_reserve), so submits in flight together cannot pass
 * max_queued_jobs; the new job is recorded held (jobs_submit_held) until
 * its copy is in its folder. A copy holds the whole training state in
 * memory: it counts against the user's memory bound, and the pool's share
 * per user runs one user's copies one after the other. A copy is a submit:
 * it goes on when its client goes (the job is recorded all the same), and
 * stops when gptd stops (before it is written; one being written is
 * finished and recorded).
 * Owns the request's state on its way through. Loop thread, except
 * handler_rf_read and handler_rf_write.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "log.h"
#include "model_mem.h"
#include "resume_from.h"

/* A held job's error until its copy is done; what stays if gptd stops
 * before that (the job never starts from scratch). */
#define HANDLER_RF_HELD                                                                            \
    JOBS_RESUME_FROM_ERROR                                                                         \
    "its snapshot is being copied (if gptd stopped meanwhile, the copy was not"                    \
    " finished: submit again)"

struct handler_rf {
    struct userwork_item item;
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

/* The training state a copy holds (parameters and both AdamW moments of
 * the new job's model, which the snapshot must match), counted against
 * the user's memory bound before it is read or written. */
static int handler_rf_reserve(struct handler_rf *x)
{
    struct gpt_model_config cfg = x->rf.model;
    if (cfg.vocab_size <= 0)
        cfg.vocab_size = x->rf.vocab_max;
    struct gpt_model_mem mm;
    gpt_model_mem_estimate(&cfg, 1, GPT_SHARD_NONE, 0, 1, 0, 0, &mm);
    return userwork_mem_take(&x->item, 3 * mm.n_params * sizeof(float),
                             "copying this training state", &x->err);
}

static void handler_rf_write(struct userwork_item *it)
{
    struct handler_rf *x = it->data;
    if (userwork_cancelled(it))
        x->rc = gpt_err_set(&x->err, -EAGAIN, NULL, "gptd is stopping");
    else if ((x->rc = handler_rf_reserve(x)) == 0)
        x->rc = resume_from_write(&x->rf, &x->err);
}

static void handler_rf_write_done(struct userwork_item *it, int status)
{
    struct handler_rf *x = it->data;
    if (status < 0)
        x->rc = gpt_err_set(&x->err, -EAGAIN, NULL, "gptd is stopping");
    x->rc = resume_from_commit(x->d->db, x->d->cfg.node_name, &x->rf, x->rc, &x->err);
    x->queued = x->rc == 0; /* even if the sweep tag below fails (as a plain submit) */
    if (x->rc == 0 && x->sweep[0])
        x->rc = db_job_set_sweep(x->d->db, x->job_id, x->sweep, &x->err);
    handler_rf_answer(x);
}

static void handler_rf_read(struct userwork_item *it)
{
    struct handler_rf *x = it->data;
    if ((x->rc = handler_rf_reserve(x)) == 0)
        x->rc = resume_from_read(&x->rf, &x->err);
}

/* The snapshot is read: record the job (held), then copy it into its
 * folder on a pool thread again. A request that never started, or whose
 * read gptd's stop cut short, records nothing. */
static void handler_rf_read_done(struct userwork_item *it, int status)
{
    struct handler_rf *x = it->data;
    struct daemon_ctx *d = x->d;
    if (status < 0 || (x->rc == 0 && (d->stopping || !d->jobs)))
        x->rc = gpt_err_set(&x->err, -EAGAIN, NULL, "gptd is stopping");
    if (x->rc == 0)
        x->rc = jobs_submit_held(d->jobs, x->job, x->uid, x->priority, HANDLER_RF_HELD, &x->job_id,
                                 &x->err);
    if (x->rc < 0) {
        handler_rf_answer(x);
        return;
    }
    x->rc = resume_from_stage(d->db, d->cfg.state_dir, &x->rf, x->job_id, &x->err);
    if (x->rc == 0) {
        x->item.work = handler_rf_write;
        x->item.done = handler_rf_write_done;
        if (userwork_submit_next(d->userwork, &x->item, &x->err) >= 0)
            return;
    }
    /* Recorded but not copied: resume_from_commit leaves it failed. */
    x->rc = resume_from_commit(d->db, d->cfg.node_name, &x->rf, x->rc, &x->err);
    handler_rf_answer(x);
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
    x->item.work = handler_rf_read;
    x->item.done = handler_rf_read_done;
    x->item.data = x;
    /* Not cancelled with its client: a submit stands once it is made. */
    rc = handler_userwork_submit(d, cl, x->id, &x->item, false, err);
    if (rc < 0) {
        jobs_unreserve(d->jobs, cl->uid);
        handler_rf_free(x);
        return rc;
    }
    control_client_ref(cl);
    cl->busy++;
    return 0;
}
