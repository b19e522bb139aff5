/*
 * handlers: the one dispatcher of control ops (see handlers.h), its table of
 * handlers, and the handlers of every op but `sample` (handlers_sample.c),
 * `export` (handlers_export.c) and submit's --resume-from
 * (handlers_resume_from.c); submit's spec checks are handlers_spec.c's.
 *
 * Most ops are a `result` function: the answer from the queue of record,
 * used both for this node's clients and, on the coordinator, for the reads
 * members forward (handler_read), so the owner check, the stopping check and
 * the answer are the same code either way. The others (`logs`, `sample`,
 * `export`, `submit`) reply themselves, and have a member path of their
 * own.
 *
 * Loop thread only.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices.h"
#include "fdlimit.h"
#include "log.h"
#include "rdzv.h"
#include "handlers.h"
#include "snapshot.h"

#define HANDLER_LIST_MAX    1000 /* jobs in one `list` reply */
#define HANDLER_HISTORY_MAX 1000 /* metrics in one history chunk for a member */

/* The answer of an op from this node's own queue and state, for a client
 * with `uid`: a new result object (merged into the reply), or an error. */
typedef int (*handler_result_fn)(struct daemon_ctx *d, const struct gpt_ctl_request *req, uid_t uid,
                                 json_t **ret, struct gpt_err *err);

static json_t *handler_real_or_null(double v)
{
    return v == v ? json_real(v) : json_null();
}

/* A job as list and status show it. A held job (its --resume-from copy
 * under way) is recorded failed, so that it never starts if gptd dies
 * before the copy is done; until then it shows "copying", without the
 * error that stands for that case. */
static json_t *handler_job_json(const struct jobs *js, const struct db_job *j)
{
    bool held = jobs_is_held(js, j->id);
    json_t *o = json_pack("{s:I, s:s, s:I, s:s, s:I, s:I, s:I, s:f}", "id", (json_int_t)j->id,
                          "name", j->name, "owner_uid", (json_int_t)j->owner_uid, "state",
                          held ? "copying" : db_job_state_name(j->state), "priority",
                          (json_int_t)j->priority, "step", (json_int_t)j->step, "max_steps",
                          (json_int_t)j->max_steps, "created", j->created);
    if (!o)
        return NULL;
    json_object_set_new(o, "loss", handler_real_or_null(j->loss));
    json_object_set_new(o, "started", j->started > 0 ? json_real(j->started) : json_null());
    json_object_set_new(o, "finished", j->finished > 0 ? json_real(j->finished) : json_null());
    if (j->error[0] && !held)
        json_object_set_new(o, "error", json_string(j->error));
    if (j->parent_job > 0)
        json_object_set_new(o, "parent_job", json_integer(j->parent_job));
    json_t *over = j->overrides[0] ? json_loads(j->overrides, 0, NULL) : NULL;
    if (over)
        json_object_set_new(o, "overrides", over);
    return o;
}

/* What a job's metrics add up to: best and newest validation loss (null
 * before the first eval) and tokens seen. */
static void handler_job_summary(struct db *db, int64_t id, json_t *o)
{
    struct db_job_summary sum;
    struct gpt_err err;
    if (db_job_summary(db, id, &sum, &err) < 0)
        return; /* the row stays without them; the database logged nothing fatal */
    json_object_set_new(o, "best_val_loss", handler_real_or_null(sum.best_val_loss));
    json_object_set_new(o, "val_loss", handler_real_or_null(sum.val_loss));
    json_object_set_new(o, "tokens", json_integer(sum.tokens));
}

/* A submit's "overrides" (what sets a sweep's job apart) as the text the
 * job row keeps: an object of strings, at most DB_OVERRIDES_MAX - 1 bytes. */
static int handler_overrides_text(const json_t *over, char *buf, size_t cap, struct gpt_err *err)
{
    const char *key;
    const json_t *v;
    buf[0] = '\0';
    if (!over)
        return 0;
    json_object_foreach((json_t *)over, key, v)
    {
        if (!json_is_string(v))
            return gpt_err_set(err, -EINVAL, "overrides", "%s: the value must be a string", key);
    }
    char *text = json_dumps(over, JSON_COMPACT);
    int rc = 0;
    if (!text)
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    else if (strlen(text) >= cap)
        rc = gpt_err_set(err, -EINVAL, "overrides", "at most %zu bytes", cap - 1);
    else
        memcpy(buf, text, strlen(text) + 1);
    free(text);
    return rc;
}

/* A submit on a node that is not the coordinator travels to the
 * coordinator, whose queue is the one of record; the reply waits for its
 * answer. */
struct handler_forward {
    struct control_client *cl;
    json_t *id;
};

static void handler_submit_forwarded(void *arg, int rc, int64_t job, const struct gpt_err *err)
{
    struct handler_forward *f = arg;
    struct control_client *cl = f->cl;
    if (rc < 0)
        control_reply_err(cl, f->id, rc, err);
    else
        control_reply_ok(cl, f->id,
                         json_pack("{s:I, s:s, s:b}", "job", (json_int_t)job, "state", "queued",
                                   "forwarded", 1));
    cl->busy--;
    control_client_idle_check(cl);
    control_client_unref(cl);
    json_decref(f->id);
    free(f);
}

static int handler_submit_forward(struct daemon_ctx *d, struct control_client *cl,
                                  const struct gpt_ctl_request *req, struct gpt_err *err)
{
    struct handler_forward *f = calloc(1, sizeof(*f));
    if (!f)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    f->cl = cl;
    f->id = json_deep_copy(req->id);
    int rc = cluster_submit(d->cluster, req->spec, cl->uid, req->priority, handler_submit_forwarded,
                            f, err);
    if (rc < 0) {
        json_decref(f->id);
        free(f);
        return rc;
    }
    control_client_ref(cl);
    cl->busy++;
    return 0;
}

static int op_submit(struct daemon_ctx *d, const struct gpt_ctl_request *req, uid_t uid,
                     json_t **ret, struct gpt_err *err)
{
    struct gpt_job *job = malloc(sizeof(*job));
    if (!job)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    int64_t id = 0;
    char over[DB_OVERRIDES_MAX];
    int rc = handler_submit_check(d, req, uid, job, err);
    if (rc == 0)
        rc = handler_overrides_text(req->overrides, over, sizeof(over), err);
    if (rc == 0 && (req->present & (1u << GPT_CTL_F_SWEEP_JOBS)))
        rc = jobs_room_for(d->jobs, uid, req->sweep_jobs, err);
    if (rc == 0)
        rc = jobs_submit(d->jobs, job, uid, req->priority, &id, err);
    if (rc == 0 && req->sweep)
        rc = db_job_set_sweep(d->db, id, req->sweep, err);
    if (rc == 0 && over[0])
        rc = db_job_set_overrides(d->db, id, over, err);
    if (rc == 0)
        *ret = json_pack("{s:I, s:s, s:s}", "job", (json_int_t)id, "name",
                         job->name[0] ? job->name : "job", "state", "queued");
    free(job);
    return rc;
}

/* submit: --resume-from reads a snapshot first, on a work thread
 * (handlers_resume_from.c); any other submit is answered at once. */
static int handler_submit_run(struct daemon_ctx *d, struct control_client *cl,
                              const struct gpt_ctl_request *req, struct gpt_err *err)
{
    if (req->present & (1u << GPT_CTL_F_RESUME_FROM))
        return handler_resume_from_run(d, cl, req, err);
    json_t *r = NULL;
    int rc = op_submit(d, req, cl->uid, &r, err);
    if (rc == 0 && !r)
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    if (rc == 0)
        control_reply_ok(cl, req->id, r);
    return rc;
}

/* A member checks the spec as fully as the coordinator would (its own
 * data_roots and paths), then forwards it. */
static int op_submit_member(struct daemon_ctx *d, struct control_client *cl,
                            const struct gpt_ctl_request *req, struct gpt_err *err)
{
    if (req->present & (1u << GPT_CTL_F_RESUME_FROM))
        return gpt_err_set(err, -EOPNOTSUPP, "resume_from",
                           "a member does not forward --resume-from yet: submit on the"
                           " coordinator's host");
    if (req->sweep) /* the cluster's submit message has no sweep field yet */
        return gpt_err_set(err, -EOPNOTSUPP, "sweep",
                           "a member does not forward sweeps yet: run gptctl submit -m on the"
                           " coordinator's host");
    struct gpt_job *job = malloc(sizeof(*job));
    if (!job)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    int rc = handler_parse_spec(d, req->spec, cl->uid, job, err);
    free(job);
    return rc < 0 ? rc : handler_submit_forward(d, cl, req, err);
}

static int op_validate(struct daemon_ctx *d, const struct gpt_ctl_request *req, uid_t uid,
                       json_t **ret, struct gpt_err *err)
{
    struct gpt_job *job = malloc(sizeof(*job));
    if (!job)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    int rc = handler_parse_spec(d, req->spec, uid, job, err);
    if (rc == 0) {
        char *canon = gpt_jobspec_to_json(job);
        json_t *spec = canon ? json_loads(canon, 0, NULL) : NULL;
        free(canon);
        if (!spec)
            rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        else
            *ret = json_pack("{s:b, s:o}", "valid", 1, "spec", spec);
    }
    free(job);
    return rc;
}

struct handler_list {
    json_t *arr;
    const char *sweep; /* only this sweep's jobs; NULL all */
    int state;         /* only jobs in this state (enum db_job_state); -1 all */
    int64_t user;      /* only this uid's jobs; -1 all */
    const struct jobs *jobs;
    struct db *db; /* a sweep's list also sums up each job's metrics */
};

static void handler_list_add(void *ctx, const struct db_job *j)
{
    struct handler_list *l = ctx;
    if ((l->sweep && strcmp(l->sweep, j->sweep) != 0) || (l->state >= 0 && j->state != l->state) ||
        (l->user >= 0 && (int64_t)j->owner_uid != l->user))
        return;
    json_t *o = handler_job_json(l->jobs, j);
    if (o && j->sweep[0])
        json_object_set_new(o, "sweep", json_string(j->sweep));
    if (o && l->sweep)
        handler_job_summary(l->db, j->id, o);
    const char *why = NULL;
    int pos = o && j->state == DB_JOB_QUEUED ? jobs_queue_position(l->jobs, j->id, &why) : 0;
    if (pos > 0) { /* where it is in the queue, and what it waits for */
        json_object_set_new(o, "queue_position", json_integer(pos));
        json_object_set_new(o, "waiting_for", json_string(why));
    }
    json_array_append_new(l->arr, o);
}

static int op_list(struct daemon_ctx *d, const struct gpt_ctl_request *req, uid_t uid, json_t **ret,
                   struct gpt_err *err)
{
    (void)uid;
    json_t *arr = json_array();
    if (!arr)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    struct handler_list l = {.arr = arr,
                             .sweep = req->sweep,
                             .state = req->state ? db_job_state_parse(req->state) : -1,
                             .user = req->present & (1u << GPT_CTL_F_USER) ? req->user : -1,
                             .jobs = d->jobs,
                             .db = d->db};
    if (req->state && l.state < 0) {
        json_decref(arr);
        return gpt_err_set(err, -EINVAL, "state",
                           "\"%s\" is no job state (queued, waiting, running, completed, failed,"
                           " cancelled)",
                           req->state);
    }
    int rc = db_job_list(d->db, HANDLER_LIST_MAX, handler_list_add, &l, err);
    if (rc < 0) {
        json_decref(arr);
        return rc;
    }
    *ret = json_pack("{s:o}", "jobs", arr);
    return 0;
}

/* One run of `status JOB`: its world, outcome and the spec it trained with. */
static void handler_run_add(void *ctx, const struct db_run *r)
{
    json_t *o = json_pack("{s:I, s:f, s:i, s:s, s:s}", "id", (json_int_t)r->id, "started",
                          r->started, "world_size", r->world_size, "status", r->status,
                          "resumed_from", r->resumed_from);
    if (!o)
        return;
    json_object_set_new(o, "ended", r->ended > 0 ? json_real(r->ended) : json_null());
    json_t *spec = r->spec_json[0] ? json_loads(r->spec_json, 0, NULL) : NULL;
    json_object_set_new(o, "spec", spec ? spec : json_null());
    json_array_append_new(ctx, o);
}

/* status JOB: one job in full. */
static int handler_job_result(struct daemon_ctx *d, int64_t id, json_t **ret, struct gpt_err *err)
{
    struct db_job j;
    int rc = db_job_get(d->db, id, &j, err);
    if (rc < 0)
        return rc;
    json_t *o = handler_job_json(d->jobs, &j);
    if (o) {
        json_object_set_new(o, "snapshot_dir", json_string(j.snapshot_dir));
        json_object_set_new(o, "restarts", json_integer(j.restarts));
        if (j.sweep[0])
            json_object_set_new(o, "sweep", json_string(j.sweep));
        handler_job_summary(d->db, id, o);
        json_object_set_new(o, "spec", json_loads(j.spec_json, 0, NULL));
        json_t *runs = json_array();
        if (runs && db_run_list(d->db, id, handler_run_add, runs, err) == 0)
            json_object_set_new(o, "runs", runs);
        else
            json_decref(runs);
        float ms[GPT_METRIC_RANKS_MAX];
        int n = jobs_rank_step_ms(d->jobs, id, ms);
        json_t *a = n > 0 ? json_array() : NULL;
        for (int i = 0; a && i < n; i++)
            json_array_append_new(a, json_real(ms[i]));
        if (a)
            json_object_set_new(o, "rank_step_ms", a);
    }
    db_job_done(&j);
    *ret = json_pack("{s:o}", "job", o);
    return 0;
}

/* status JOB, or without a job this daemon's own state (never forwarded). */
static int op_status(struct daemon_ctx *d, const struct gpt_ctl_request *req, uid_t uid,
                     json_t **ret, struct gpt_err *err)
{
    (void)uid;
    if (req->present & (1u << GPT_CTL_F_JOB))
        return handler_job_result(d, req->job, ret, err);
    int64_t queued = 0;
    int rc = db_job_count(d->db, DB_JOB_QUEUED, &queued, err);
    if (rc < 0)
        return rc;
    int64_t running = jobs_running(d->jobs);
    if (!running && d->agent)
        running = agent_job(d->agent);
    json_t *o = json_pack("{s:s, s:s, s:I, s:f, s:I, s:I, s:s, s:s, s:i}", "version", GPTD_VERSION,
                          "node", d->cfg.node_name, "pid", (json_int_t)getpid(), "started",
                          d->started, "running_job", (json_int_t)running, "queued",
                          (json_int_t)queued, "state_dir", d->cfg.state_dir, "socket",
                          d->cfg.socket, "clients", control_client_count(d->ctl));
    int uw_running, uw_waiting;
    userwork_counts(d->userwork, &uw_running, &uw_waiting);
    if (o) /* sample, export and --resume-from copies under way */
        json_object_set_new(o, "user_work",
                            json_pack("{s:i, s:i}", "running", uw_running, "waiting", uw_waiting));
    struct gpt_err gone;
    if (o && db_state_check(d->db, &gone) < 0) /* writes are refused: say why */
        json_object_set_new(o, "state_dir_error", json_string(gone.msg));
    if (o && jobs_running(d->jobs)) /* every job running here, oldest first */
        json_object_set_new(o, "running_jobs", jobs_running_json(d->jobs));
    if (o && d->cluster) {
        char ep[CLUSTER_HOST_MAX + 16];
        snprintf(ep, sizeof(ep), "%s:%d", cluster_host(d->cluster), cluster_port(d->cluster));
        json_object_set_new(o, "rdzv", json_string(ep));
        json_object_set_new(
            o, "role", json_string(cluster_is_coordinator(d->cluster) ? "coordinator" : "member"));
    }
    uint64_t fd_soft, fd_hard;
    if (o && fdlimit_get(&fd_soft, &fd_hard) == 0) {
        json_object_set_new(o, "open_files_max",
                            json_integer(fd_soft > INT64_MAX ? INT64_MAX : (json_int_t)fd_soft));
        json_object_set_new(o, "max_nodes",
                            json_integer((json_int_t)fdlimit_nodes(fd_soft, RDZV_NODES_MAX)));
    }
    *ret = o;
    return 0;
}

static int op_logs(struct daemon_ctx *d, struct control_client *cl,
                   const struct gpt_ctl_request *req, struct gpt_err *err)
{
    return jobs_follow(d->jobs, cl, req->id, req->job, req->since, req->follow, err);
}

static int op_logs_member(struct daemon_ctx *d, struct control_client *cl,
                          const struct gpt_ctl_request *req, struct gpt_err *err)
{
    return mirror_follow(d->mirror, cl, req->id, req->job, req->since, req->follow, err);
}

/* The job's state after a cancel/resume, as the reply's result. */
static int handler_state_result(struct daemon_ctx *d, int64_t job, bool cancel, json_t **ret,
                                struct gpt_err *err)
{
    struct db_job j;
    int rc = db_job_get(d->db, job, &j, err);
    if (rc < 0)
        return rc;
    const char *state = db_job_state_name(j.state);
    if (jobs_runs(d->jobs, j.id) && cancel)
        state = "cancelling";
    *ret = json_pack("{s:I, s:s}", "job", (json_int_t)j.id, "state", state);
    db_job_done(&j);
    return 0;
}

static int op_cancel(struct daemon_ctx *d, const struct gpt_ctl_request *req, uid_t uid,
                     json_t **ret, struct gpt_err *err)
{
    int rc = jobs_cancel(d->jobs, req->job, uid, err);
    return rc < 0 ? rc : handler_state_result(d, req->job, true, ret, err);
}

static int op_resume(struct daemon_ctx *d, const struct gpt_ctl_request *req, uid_t uid,
                     json_t **ret, struct gpt_err *err)
{
    int64_t snapshot = req->present & (1u << GPT_CTL_F_SNAPSHOT) ? req->snapshot : 0;
    json_t *plan = NULL;
    int rc = jobs_resume(d->jobs, req->job, snapshot, req->overrides, uid, &plan, err);
    if (rc == 0)
        rc = handler_state_result(d, req->job, false, ret, err);
    if (rc == 0 && plan)
        json_object_set(*ret, "plan", plan);
    json_decref(plan);
    return rc;
}

static void handler_snapshot_add(void *ctx, const struct db_snapshot *s)
{
    struct stat st;
    json_t *o = json_pack("{s:I, s:I, s:I, s:s, s:s, s:I, s:f, s:b}", "id", (json_int_t)s->id,
                          "step", (json_int_t)s->step, "run_id", (json_int_t)s->run_id, "node",
                          s->node, "path", s->path, "size", (json_int_t)s->size, "created",
                          s->created, "exists", stat(s->path, &st) == 0);
    json_array_append_new(ctx, o);
}

static int op_snapshots(struct daemon_ctx *d, const struct gpt_ctl_request *req, uid_t uid,
                        json_t **ret, struct gpt_err *err)
{
    (void)uid;
    struct db_job j;
    int rc = db_job_get(d->db, req->job, &j, err);
    if (rc < 0)
        return rc;
    json_t *arr = json_array();
    rc = arr ? db_snapshot_list(d->db, req->job, handler_snapshot_add, arr, err)
             : gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    if (rc == 0)
        *ret = json_pack("{s:I, s:s, s:o}", "job", (json_int_t)req->job, "snapshot_dir",
                         j.snapshot_dir, "snapshots", arr);
    else
        json_decref(arr);
    db_job_done(&j);
    return rc;
}

static void handler_sample_add(void *ctx, const struct db_sample *s)
{
    json_array_append_new(ctx, db_sample_json(s));
}

/* samples JOB: the job's kept `sample` replies, newest first. */
static int op_samples(struct daemon_ctx *d, const struct gpt_ctl_request *req, uid_t uid,
                      json_t **ret, struct gpt_err *err)
{
    (void)uid;
    struct db_job j;
    int rc = db_job_get(d->db, req->job, &j, err);
    if (rc < 0)
        return rc;
    db_job_done(&j);
    json_t *arr = json_array();
    rc = arr ? db_sample_list(d->db, req->job, DB_SAMPLES_MAX, handler_sample_add, arr, err)
             : gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    if (rc == 0)
        *ret = json_pack("{s:I, s:i, s:o}", "job", (json_int_t)req->job, "kept",
                         d->cfg.sample_history, "samples", arr);
    else
        json_decref(arr);
    return rc;
}

/* A history chunk for a member's `logs` stream (mirror.h): the records,
 * the cursor, whether more follow, the feed position it is complete up to,
 * and the job's state. */
static void handler_hist_metric(void *ctx, const struct gpt_metric *m)
{
    json_array_append_new(ctx, gpt_metric_to_json(m));
}

static void handler_hist_event(void *ctx, const struct gpt_event *e)
{
    json_array_append_new(ctx, gpt_event_to_json(e));
}

static int handler_history_result(struct daemon_ctx *d, const struct cluster_msg_read_args *args,
                                  json_t **ret, struct gpt_err *err)
{
    int64_t job = args->job;
    int64_t since = args->since;
    int64_t after = args->after;
    int limit = (int)args->limit;
    if (limit < 1 || limit > HANDLER_HISTORY_MAX)
        limit = HANDLER_HISTORY_MAX;
    struct db_job j;
    int rc = db_job_get(d->db, job, &j, err);
    if (rc < 0)
        return rc;
    json_t *recs = json_array();
    struct db_history_cb cb = {recs, handler_hist_metric, handler_hist_event};
    int64_t last = after;
    int more = 0;
    rc = recs ? db_history_page(d->db, job, since, after, limit, &cb, &last, &more, err)
              : gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    if (rc == 0) {
        *ret = json_pack("{s:o, s:I, s:b, s:I, s:s, s:b}", "recs", recs, "last", (json_int_t)last,
                         "more", more, "seq", (json_int_t)cluster_feed_seq(d->cluster), "state",
                         db_job_state_name(j.state), "final", db_job_state_final(j.state));
        if (*ret && j.error[0])
            json_object_set_new(*ret, "error", json_string(j.error));
    } else {
        json_decref(recs);
    }
    db_job_done(&j);
    return rc;
}

/* Where a member finds its copies of a job's snapshots: the spec's
 * snapshot.dir ("" for the default) and, for a chosen snapshot, its step. */
static int handler_locate_result(struct daemon_ctx *d, const struct cluster_msg_read_args *args,
                                 json_t **ret, struct gpt_err *err)
{
    int64_t job = args->job;
    int64_t snapshot = args->snapshot;
    struct db_job j;
    int rc = db_job_get(d->db, job, &j, err);
    if (rc < 0)
        return rc;
    json_t *spec = json_loads(j.spec_json, 0, NULL);
    const char *dir = json_string_value(json_object_get(json_object_get(spec, "snapshot"), "dir"));
    const char *vocab = json_string_value(json_object_get(json_object_get(spec, "data"), "vocab"));
    int64_t step = -1;
    if (snapshot > 0) {
        struct db_snapshot sn;
        rc = db_job_snapshot_get(d->db, job, snapshot, &sn, err);
        if (rc == 0)
            step = sn.step;
    }
    if (rc == 0)
        *ret = json_pack("{s:s, s:I, s:s}", "dir", dir ? dir : "", "step", (json_int_t)step,
                         "vocab", vocab ? vocab : "");
    json_decref(spec);
    db_job_done(&j);
    return rc;
}

/* nodes --forget NODE: the coordinator drops NODE's node key, so that a
 * gptd whose state directory was wiped can join as NODE again. Only root:
 * the next gptd to join takes the id, with what that node may write. */
static int op_nodes_forget(struct daemon_ctx *d, const char *node, uid_t uid, json_t **ret,
                           struct gpt_err *err)
{
    if (uid != 0)
        return gpt_err_set(err, -EPERM, "forget",
                           "only root may forget a node: the next gptd to join as \"%s\" takes "
                           "its id and writes as it",
                           node);
    if (!d->cluster)
        return gpt_err_set(err, -EINVAL, "forget", "this gptd is not in a cluster");
    int rc = cluster_forget_node(d->cluster, node, err);
    if (rc == 0)
        *ret = json_pack("{s:s}", "forgot", node);
    return rc;
}

static int op_nodes(struct daemon_ctx *d, const struct gpt_ctl_request *req, uid_t uid,
                    json_t **ret, struct gpt_err *err)
{
    if (req->present & (1u << GPT_CTL_F_FORGET))
        return op_nodes_forget(d, req->forget, uid, ret, err);
    if (d->cluster) {
        json_t *nodes = cluster_nodes_json(d->cluster);
        if (!nodes)
            return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        /* This node's own entry carries its hardware in detail. */
        size_t i;
        json_t *n;
        json_array_foreach(nodes, i, n)
        {
            const char *id = json_string_value(json_object_get(n, "node"));
            if (!id || strcmp(id, d->cfg.node_name) != 0)
                continue;
            json_object_set_new(n, "hardware", devices_json());
            /* Its own state is known now, not only as of its last heartbeat:
             * with no job on the cluster, whatever its agent did is over. */
            const char *st = agent_state(d->agent);
            bool busy = strcmp(st, "running") == 0 || strcmp(st, "stopping") == 0;
            if (cluster_is_coordinator(d->cluster) && !jobs_running(d->jobs) && !busy)
                st = "idle";
            json_object_set_new(n, "state", json_string(st));
        }
        char ep[CLUSTER_HOST_MAX + 16];
        snprintf(ep, sizeof(ep), "%s:%d", cluster_host(d->cluster), cluster_port(d->cluster));
        *ret = json_pack("{s:o, s:s, s:b, s:s, s:s}", "nodes", nodes, "self", d->cfg.node_name,
                         "coordinator", cluster_is_coordinator(d->cluster), "agent",
                         agent_state(d->agent), "rdzv", ep);
        return 0;
    }
    int64_t running = jobs_running(d->jobs);
    json_t *node =
        json_pack("{s:s, s:s, s:i, s:s, s:I}", "node", d->cfg.node_name, "state",
                  d->stopping ? "stopping"
                  : running   ? "running"
                              : "idle",
                  "workers", d->cfg.workers, "version", GPTD_VERSION, "job", (json_int_t)running);
    char summary[128];
    devices_summary(summary, sizeof(summary));
    if (node) {
        json_object_set_new(node, "devices", json_string(summary));
        json_object_set_new(node, "hardware", devices_json());
    }
    *ret = json_pack("{s:[o]}", "nodes", node);
    return 0;
}

static int op_ping(struct daemon_ctx *d, const struct gpt_ctl_request *req, uid_t uid, json_t **ret,
                   struct gpt_err *err)
{
    (void)d, (void)req, (void)err;
    *ret = json_pack("{s:s, s:I}", "version", GPTD_VERSION, "uid", (json_int_t)uid);
    return 0;
}

/* ---- the tables and the dispatcher ---- */

/* One row per control op (indexed like proto's op table). `result` answers
 * from this node's queue; `run` replies itself. On a member, ops flagged
 * GPT_CTL_OPF_FORWARD(_JOB) go to the coordinator as reads (mirror_read)
 * and `member`, when set, replaces `run`/`result` for the others. */
static const struct handler_entry {
    handler_result_fn result;
    handler_run_fn run;
    handler_run_fn member;
    /* A request field checked against a configuration limit (an int of
     * struct config at `limit_offset`); `limit_default` when absent. */
    int limit_field; /* enum gpt_ctl_field; 0 with limit_key NULL: none */
    size_t limit_offset;
    const char *limit_key;
    int64_t limit_default;
} handler_table[GPT_CTL_OP_COUNT] = {
    [GPT_CTL_OP_SUBMIT] = {.run = handler_submit_run, .member = op_submit_member},
    [GPT_CTL_OP_VALIDATE] = {.result = op_validate},
    [GPT_CTL_OP_LIST] = {.result = op_list},
    [GPT_CTL_OP_STATUS] = {.result = op_status},
    [GPT_CTL_OP_LOGS] = {.run = op_logs, .member = op_logs_member},
    [GPT_CTL_OP_CANCEL] = {.result = op_cancel},
    [GPT_CTL_OP_RESUME] = {.result = op_resume},
    [GPT_CTL_OP_SNAPSHOTS] = {.result = op_snapshots},
    [GPT_CTL_OP_SAMPLE] = {.run = handler_sample_run,
                           .member = handler_sample_member,
                           .limit_field = GPT_CTL_F_TOKENS,
                           .limit_offset = offsetof(struct config, sample_max_tokens),
                           .limit_key = "sample_max_tokens",
                           .limit_default = HANDLER_SAMPLE_TOKENS_DEFAULT},
    [GPT_CTL_OP_NODES] = {.result = op_nodes},
    [GPT_CTL_OP_PING] = {.result = op_ping},
    [GPT_CTL_OP_EXPORT] = {.run = handler_export_run, .member = handler_export_member},
    [GPT_CTL_OP_SAMPLES] = {.result = op_samples},
};

/* A member (not the coordinator): the queue of record is elsewhere. */
static bool handler_is_member(const struct daemon_ctx *d)
{
    return d->cluster && !cluster_is_coordinator(d->cluster) && d->mirror;
}

/* Whether a member hands this request to the coordinator as a read. */
static bool handler_forwarded(const struct gpt_ctl_request *req)
{
    return gpt_ctl_op_has(req->op, GPT_CTL_OPF_FORWARD) ||
           (gpt_ctl_op_has(req->op, GPT_CTL_OPF_FORWARD_JOB) &&
            (req->present & (1u << GPT_CTL_F_JOB)));
}

/* What every op is checked for before its handler, wherever the request
 * came from: refused while stopping, and the configuration limit. (A
 * stream op is also refused on a connection that already streams: that is
 * the client's, checked in handler_dispatch.) */
static int handler_admit(const struct daemon_ctx *d, const struct gpt_ctl_request *req,
                         struct gpt_err *err)
{
    const struct handler_entry *e = &handler_table[req->op];
    if (d->stopping && gpt_ctl_op_has(req->op, GPT_CTL_OPF_NOT_STOPPING))
        return gpt_err_set(err, -EAGAIN, NULL, "gptd is stopping");
    if (e->limit_key) {
        const struct gpt_ctl_field_info *fi = gpt_ctl_field_info(e->limit_field);
        int64_t v = req->present & (1u << e->limit_field)
                        ? *(const int64_t *)(const void *)((const char *)req + fi->offset)
                        : e->limit_default;
        int limit = *(const int *)(const void *)((const char *)&d->cfg + e->limit_offset);
        if (v > limit)
            return gpt_err_set(err, -GPT_E_LIMIT, fi->name, "at most %d %s (%s)", limit, fi->name,
                               e->limit_key);
    }
    return 0;
}

/* The owner check of ops that change a job, on the node with the queue of
 * record: only the owner, or uid 0. */
static int handler_check_owner(struct daemon_ctx *d, const struct gpt_ctl_request *req, uid_t uid,
                               struct gpt_err *err)
{
    if (!gpt_ctl_op_has(req->op, GPT_CTL_OPF_OWNER) || uid == 0)
        return 0;
    struct db_job j;
    int rc = db_job_get(d->db, req->job, &j, err);
    if (rc < 0)
        return rc;
    uid_t owner = j.owner_uid;
    db_job_done(&j);
    if (owner != uid)
        return gpt_err_set(err, -EPERM, "job", "job %lld belongs to uid %u", (long long)req->job,
                           (unsigned)owner);
    return 0;
}

/* The answer of a `result` op for a client with `uid`, local or forwarded. */
static int handler_answer(struct daemon_ctx *d, const struct gpt_ctl_request *req, uid_t uid,
                          json_t **ret, struct gpt_err *err)
{
    json_t *r = NULL;
    int rc = handler_check_owner(d, req, uid, err);
    if (rc == 0)
        rc = handler_table[req->op].result(d, req, uid, &r, err);
    if (rc == 0 && !r)
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    if (rc == 0)
        *ret = r;
    return rc;
}

/* Runs an admitted request where the tables say: the coordinator, the
 * op's member path, or this node. */
static int handler_route(struct daemon_ctx *d, struct control_client *cl,
                         const struct gpt_ctl_request *req, struct gpt_err *err)
{
    const struct handler_entry *e = &handler_table[req->op];
    if (handler_is_member(d) && handler_forwarded(req))
        return mirror_read(d->mirror, cl, req, err); /* the coordinator checks the owner */
    if (handler_is_member(d) && e->member)
        return e->member(d, cl, req, err);
    if (!e->result)
        return e->run(d, cl, req, err);
    json_t *r = NULL;
    int rc = handler_answer(d, req, cl->uid, &r, err);
    if (rc == 0)
        control_reply_ok(cl, req->id, r);
    return rc;
}

void handler_dispatch(struct daemon_ctx *d, struct control_client *cl, struct gpt_ctl_request *req)
{
    GPT_ASSERT(req->op >= 0 && req->op < GPT_CTL_OP_COUNT);
    GPT_ASSERT(handler_table[req->op].result || handler_table[req->op].run);
    struct gpt_err err;
    gpt_err_clear(&err);
    int rc = handler_admit(d, req, &err);
    if (rc == 0 && gpt_ctl_op_has(req->op, GPT_CTL_OPF_STREAM) && cl->logs.active)
        rc = gpt_err_set(&err, -EBUSY, NULL, "this connection already streams logs");
    if (rc < 0) { /* refused before anything was done: not worth a log line */
        control_reply_err(cl, req->id, rc, &err);
        return;
    }
    rc = handler_route(d, cl, req, &err);
    if (rc < 0) {
        if (rc != -GPT_E_SPEC && rc != -ENOENT && rc != -EPERM && rc != -EALREADY)
            log_info("request %s from uid %u failed: %s", gpt_ctl_op_name(req->op),
                     (unsigned)cl->uid, err.msg);
        control_reply_err(cl, req->id, rc, &err);
    }
}

/* Reads only members ask for, with no control op of their own: they
 * travel as the control op whose member path needs them. */
static const struct {
    int op; /* enum gpt_ctl_op */
    int (*fn)(struct daemon_ctx *d, const struct cluster_msg_read_args *args, json_t **ret,
              struct gpt_err *err);
} handler_internal_reads[] = {
    {GPT_CTL_OP_LOGS, handler_history_result},  /* "history": a chunk of a member's logs stream */
    {GPT_CTL_OP_SAMPLE, handler_locate_result}, /* "locate": where a member's copy lies */
};

int handler_read(void *ctx, const struct cluster_msg *m, json_t **ret, struct gpt_err *err)
{
    struct daemon_ctx *d = ctx;
    const struct cluster_msg_read_args *args = &m->args;
    for (size_t i = 0; i < sizeof(handler_internal_reads) / sizeof(handler_internal_reads[0]); i++)
        if (m->op == handler_internal_reads[i].op) {
            json_t *r = NULL;
            int rc = handler_internal_reads[i].fn(d, args, &r, err);
            if (rc == 0 && !r)
                rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
            if (rc == 0)
                *ret = r;
            return rc;
        }
    /* A control op a member forwarded (mirror_read): the same admission,
     * owner check and answer as for this node's own clients. */
    struct gpt_ctl_request req = {.op = m->op};
    if (req.op < 0 || req.op >= GPT_CTL_OP_COUNT ||
        (!gpt_ctl_op_has(req.op, GPT_CTL_OPF_FORWARD) &&
         !gpt_ctl_op_has(req.op, GPT_CTL_OPF_FORWARD_JOB)))
        return gpt_err_set(err, -EINVAL, "op", "unknown read %d", m->op);
    const char *name = gpt_ctl_op_name(req.op);
    if (args->job > 0) {
        req.job = args->job;
        req.present |= 1u << GPT_CTL_F_JOB;
    }
    if (args->snapshot > 0) {
        req.snapshot = args->snapshot;
        req.present |= 1u << GPT_CTL_F_SNAPSHOT;
    }
    uint32_t missing = gpt_ctl_op_info(req.op)->required & ~req.present;
    if (missing)
        return gpt_err_set(err, -EINVAL, gpt_ctl_field_info(__builtin_ctz(missing))->name,
                           "%s without it", name);
    /* The client's uid matters to owner-only ops, which need it. */
    bool uid_ok = args->uid >= 0 && args->uid < (int64_t)UINT32_MAX;
    if (!uid_ok && gpt_ctl_op_has(req.op, GPT_CTL_OPF_OWNER))
        return gpt_err_set(err, -EINVAL, "uid", "%s without the client's uid", name);
    int rc = handler_admit(d, &req, err);
    return rc < 0 ? rc : handler_answer(d, &req, uid_ok ? (uid_t)args->uid : (uid_t)-1, ret, err);
}
