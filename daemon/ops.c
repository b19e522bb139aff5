/*
 * ops: one small handler per control op, looked up in a const table by the
 * op number proto/ctl decoded. Handlers validate what only the daemon can
 * (job exists, owner, state), call into jobs/db, and reply. `sample` runs
 * the model on a uv work thread; everything else is loop thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "devices.h"
#include "fsid.h"
#include "log.h"
#include "paths.h"
#include "snapshot.h"
#include "trainer.h"

#define OPS_LIST_MAX    1000 /* jobs in one `list` reply */
#define OPS_HISTORY_MAX 1000 /* metrics in one history chunk for a member */

typedef int (*ops_fn)(struct daemon_ctx *d, struct control_client *cl,
                      const struct gpt_ctl_request *req, struct gpt_err *err);

static json_t *ops_real_or_null(double v)
{
    return v == v ? json_real(v) : json_null();
}

static json_t *ops_job_json(const struct db_job *j)
{
    json_t *o = json_pack("{s:I, s:s, s:I, s:s, s:I, s:I, s:I, s:f}", "id", (json_int_t)j->id,
                          "name", j->name, "owner_uid", (json_int_t)j->owner_uid, "state",
                          db_job_state_name(j->state), "priority", (json_int_t)j->priority, "step",
                          (json_int_t)j->step, "max_steps", (json_int_t)j->max_steps, "created",
                          j->created);
    if (!o)
        return NULL;
    json_object_set_new(o, "loss", ops_real_or_null(j->loss));
    json_object_set_new(o, "started", j->started > 0 ? json_real(j->started) : json_null());
    json_object_set_new(o, "finished", j->finished > 0 ? json_real(j->finished) : json_null());
    if (j->error[0])
        json_object_set_new(o, "error", json_string(j->error));
    return o;
}

/* Parses and fully validates a spec object (as `gptd run` would). */
static int ops_parse_spec(const struct daemon_ctx *d, const json_t *spec, uid_t uid,
                          struct gpt_job *job, struct gpt_err *err)
{
    char *text = json_dumps(spec, JSON_COMPACT);
    if (!text)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    int rc = gpt_jobspec_parse(text, strlen(text), NULL, 0, job, err);
    free(text);
    if (rc == 0)
        rc = paths_check_job(job, d->cfg.data_roots, d->cfg.snapshot_roots, d->cfg.state_dir, err);
    if (rc == 0) /* as the client: gptd's own rights prove nothing (paths.h) */
        rc = paths_check_access(job, uid, err);
    if (rc == 0 && job->distributed.nodes_min > 1 && !d->cluster)
        rc = gpt_err_set(err, -GPT_E_SPEC, "distributed.nodes",
                         "this gptd is not in a cluster (no rdzv); nodes must be 1 (got min %d)",
                         job->distributed.nodes_min);
    return rc;
}

/* A submit on a node that is not the coordinator travels to the
 * coordinator, whose queue is the one of record; the reply waits for its
 * answer. */
struct ops_forward {
    struct control_client *cl;
    json_t *id;
};

static void ops_submit_forwarded(void *arg, int rc, int64_t job, const struct gpt_err *err)
{
    struct ops_forward *f = arg;
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

static int ops_submit_forward(struct daemon_ctx *d, struct control_client *cl,
                              const struct gpt_ctl_request *req, struct gpt_err *err)
{
    struct ops_forward *f = calloc(1, sizeof(*f));
    if (!f)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    f->cl = cl;
    f->id = json_deep_copy(req->id);
    int rc =
        cluster_submit(d->cluster, req->spec, cl->uid, req->priority, ops_submit_forwarded, f, err);
    if (rc < 0) {
        json_decref(f->id);
        free(f);
        return rc;
    }
    control_client_ref(cl);
    cl->busy++;
    return 0;
}

static int op_submit(struct daemon_ctx *d, struct control_client *cl,
                     const struct gpt_ctl_request *req, struct gpt_err *err)
{
    struct gpt_job *job = malloc(sizeof(*job));
    if (!job)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    int64_t id = 0;
    int rc = ops_parse_spec(d, req->spec, cl->uid, job, err);
    if (rc == 0 && d->cluster && !cluster_is_coordinator(d->cluster)) {
        free(job);
        return ops_submit_forward(d, cl, req, err);
    }
    if (rc == 0)
        rc = jobs_submit(d->jobs, job, cl->uid, req->priority, &id, err);
    if (rc == 0)
        control_reply_ok(cl, req->id,
                         json_pack("{s:I, s:s, s:s}", "job", (json_int_t)id, "name",
                                   job->name[0] ? job->name : "job", "state", "queued"));
    free(job);
    return rc;
}

static int op_validate(struct daemon_ctx *d, struct control_client *cl,
                       const struct gpt_ctl_request *req, struct gpt_err *err)
{
    struct gpt_job *job = malloc(sizeof(*job));
    if (!job)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    int rc = ops_parse_spec(d, req->spec, cl->uid, job, err);
    if (rc == 0) {
        char *canon = gpt_jobspec_to_json(job);
        json_t *spec = canon ? json_loads(canon, 0, NULL) : NULL;
        free(canon);
        if (!spec)
            rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        else
            control_reply_ok(cl, req->id, json_pack("{s:b, s:o}", "valid", 1, "spec", spec));
    }
    free(job);
    return rc;
}

static void ops_list_add(void *ctx, const struct db_job *j)
{
    json_array_append_new(ctx, ops_job_json(j));
}

/* The results of the read ops, shared by this node's clients and the reads
 * members forward to the coordinator (ops_read). */
static int ops_list_result(struct daemon_ctx *d, json_t **ret, struct gpt_err *err)
{
    json_t *arr = json_array();
    if (!arr)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    int rc = db_job_list(d->db, OPS_LIST_MAX, ops_list_add, arr, err);
    if (rc < 0) {
        json_decref(arr);
        return rc;
    }
    *ret = json_pack("{s:o}", "jobs", arr);
    return 0;
}

static int ops_job_result(struct daemon_ctx *d, int64_t id, json_t **ret, struct gpt_err *err)
{
    struct db_job j;
    int rc = db_job_get(d->db, id, &j, err);
    if (rc < 0)
        return rc;
    json_t *o = ops_job_json(&j);
    if (o) {
        json_object_set_new(o, "snapshot_dir", json_string(j.snapshot_dir));
        json_object_set_new(o, "restarts", json_integer(j.restarts));
        json_object_set_new(o, "spec", json_loads(j.spec_json, 0, NULL));
    }
    db_job_done(&j);
    *ret = json_pack("{s:o}", "job", o);
    return 0;
}

/* A member (not the coordinator): job reads go to the coordinator. */
static bool ops_is_member(const struct daemon_ctx *d)
{
    return d->cluster && !cluster_is_coordinator(d->cluster) && d->mirror;
}

static int op_list(struct daemon_ctx *d, struct control_client *cl,
                   const struct gpt_ctl_request *req, struct gpt_err *err)
{
    if (ops_is_member(d))
        return mirror_read(d->mirror, cl, req, err);
    json_t *r = NULL;
    int rc = ops_list_result(d, &r, err);
    if (rc == 0)
        control_reply_ok(cl, req->id, r);
    return rc;
}

static int op_status(struct daemon_ctx *d, struct control_client *cl,
                     const struct gpt_ctl_request *req, struct gpt_err *err)
{
    if (req->present & (1u << GPT_CTL_F_JOB)) {
        if (ops_is_member(d))
            return mirror_read(d->mirror, cl, req, err);
        json_t *r = NULL;
        int rc = ops_job_result(d, req->job, &r, err);
        if (rc == 0)
            control_reply_ok(cl, req->id, r);
        return rc;
    }
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
    if (o && d->cluster) {
        char ep[CLUSTER_HOST_MAX + 16];
        snprintf(ep, sizeof(ep), "%s:%d", cluster_host(d->cluster), cluster_port(d->cluster));
        json_object_set_new(o, "rdzv", json_string(ep));
        json_object_set_new(
            o, "role", json_string(cluster_is_coordinator(d->cluster) ? "coordinator" : "member"));
    }
    control_reply_ok(cl, req->id, o);
    return 0;
}

static int op_logs(struct daemon_ctx *d, struct control_client *cl,
                   const struct gpt_ctl_request *req, struct gpt_err *err)
{
    if (ops_is_member(d))
        return mirror_follow(d->mirror, cl, req->id, req->job, req->since, req->follow, err);
    return jobs_follow(d->jobs, cl, req->id, req->job, req->since, req->follow, err);
}

/* The job's state after a cancel/resume, as the reply's result. */
static int ops_state_result(struct daemon_ctx *d, int64_t job, bool cancel, json_t **ret,
                            struct gpt_err *err)
{
    struct db_job j;
    int rc = db_job_get(d->db, job, &j, err);
    if (rc < 0)
        return rc;
    const char *state = db_job_state_name(j.state);
    if (jobs_running(d->jobs) == j.id && cancel)
        state = "cancelling";
    *ret = json_pack("{s:I, s:s}", "job", (json_int_t)j.id, "state", state);
    db_job_done(&j);
    return 0;
}

/* Cancel and resume change the queue of record: on a member they are the
 * coordinator's to do (mirror_read), with the client's uid checked there as
 * it would be here. */
static int ops_cancel_result(struct daemon_ctx *d, int64_t job, uid_t uid, json_t **ret,
                             struct gpt_err *err)
{
    int rc = jobs_cancel(d->jobs, job, uid, err);
    return rc < 0 ? rc : ops_state_result(d, job, true, ret, err);
}

static int ops_resume_result(struct daemon_ctx *d, int64_t job, int64_t snapshot, uid_t uid,
                             json_t **ret, struct gpt_err *err)
{
    int rc = jobs_resume(d->jobs, job, snapshot, uid, err);
    return rc < 0 ? rc : ops_state_result(d, job, false, ret, err);
}

static int op_cancel(struct daemon_ctx *d, struct control_client *cl,
                     const struct gpt_ctl_request *req, struct gpt_err *err)
{
    if (ops_is_member(d))
        return mirror_read(d->mirror, cl, req, err);
    json_t *r = NULL;
    int rc = ops_cancel_result(d, req->job, cl->uid, &r, err);
    if (rc == 0)
        control_reply_ok(cl, req->id, r);
    return rc;
}

static int op_resume(struct daemon_ctx *d, struct control_client *cl,
                     const struct gpt_ctl_request *req, struct gpt_err *err)
{
    if (ops_is_member(d))
        return mirror_read(d->mirror, cl, req, err);
    json_t *r = NULL;
    int rc = ops_resume_result(d, req->job, req->snapshot, cl->uid, &r, err);
    if (rc == 0)
        control_reply_ok(cl, req->id, r);
    return rc;
}

static void ops_snapshot_add(void *ctx, const struct db_snapshot *s)
{
    struct stat st;
    json_t *o = json_pack("{s:I, s:I, s:I, s:s, s:s, s:I, s:f, s:b}", "id", (json_int_t)s->id,
                          "step", (json_int_t)s->step, "run_id", (json_int_t)s->run_id, "node",
                          s->node, "path", s->path, "size", (json_int_t)s->size, "created",
                          s->created, "exists", stat(s->path, &st) == 0);
    json_array_append_new(ctx, o);
}

static int ops_snapshots_result(struct daemon_ctx *d, int64_t job, json_t **ret,
                                struct gpt_err *err)
{
    struct db_job j;
    int rc = db_job_get(d->db, job, &j, err);
    if (rc < 0)
        return rc;
    db_job_done(&j);
    json_t *arr = json_array();
    if (!arr)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    rc = db_snapshot_list(d->db, job, ops_snapshot_add, arr, err);
    if (rc < 0) {
        json_decref(arr);
        return rc;
    }
    *ret = json_pack("{s:I, s:s, s:o}", "job", (json_int_t)job, "snapshot_dir", j.snapshot_dir,
                     "snapshots", arr);
    return 0;
}

static int op_snapshots(struct daemon_ctx *d, struct control_client *cl,
                        const struct gpt_ctl_request *req, struct gpt_err *err)
{
    if (ops_is_member(d))
        return mirror_read(d->mirror, cl, req, err);
    json_t *r = NULL;
    int rc = ops_snapshots_result(d, req->job, &r, err);
    if (rc == 0)
        control_reply_ok(cl, req->id, r);
    return rc;
}

/* A history chunk for a member's `logs` stream (mirror.h): the records,
 * the cursor, whether more follow, the feed position it is complete up to,
 * and the job's state. */
static void ops_hist_metric(void *ctx, const struct gpt_metric *m)
{
    json_array_append_new(ctx, gpt_metric_to_json(m));
}

static void ops_hist_event(void *ctx, const struct gpt_event *e)
{
    json_array_append_new(ctx, gpt_event_to_json(e));
}

static int ops_history_result(struct daemon_ctx *d, const json_t *args, json_t **ret,
                              struct gpt_err *err)
{
    int64_t job = json_integer_value(json_object_get(args, "job"));
    int64_t since = json_integer_value(json_object_get(args, "since"));
    int64_t after = json_integer_value(json_object_get(args, "after"));
    int limit = (int)json_integer_value(json_object_get(args, "limit"));
    if (limit < 1 || limit > OPS_HISTORY_MAX)
        limit = OPS_HISTORY_MAX;
    struct db_job j;
    int rc = db_job_get(d->db, job, &j, err);
    if (rc < 0)
        return rc;
    json_t *recs = json_array();
    struct db_history_cb cb = {recs, ops_hist_metric, ops_hist_event};
    int64_t last = after;
    int more = 0;
    rc = recs ? db_history(d->db, job, since, after, limit, &cb, &last, &more, err)
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
static int ops_locate_result(struct daemon_ctx *d, int64_t job, int64_t snapshot, json_t **ret,
                             struct gpt_err *err)
{
    struct db_job j;
    int rc = db_job_get(d->db, job, &j, err);
    if (rc < 0)
        return rc;
    json_t *spec = json_loads(j.spec_json, 0, NULL);
    const char *dir = json_string_value(json_object_get(json_object_get(spec, "snapshot"), "dir"));
    int64_t step = -1;
    if (snapshot > 0) {
        struct db_snapshot sn;
        rc = db_snapshot_get(d->db, snapshot, &sn, err);
        if (rc == 0 && sn.job_id != job)
            rc = gpt_err_set(err, -ENOENT, "snapshot", "snapshot %lld is not job %lld's",
                             (long long)snapshot, (long long)job);
        if (rc == 0)
            step = sn.step;
    }
    if (rc == 0)
        *ret = json_pack("{s:s, s:I}", "dir", dir ? dir : "", "step", (json_int_t)step);
    json_decref(spec);
    db_job_done(&j);
    return rc;
}

int ops_read(void *ctx, const char *op, const json_t *args, json_t **ret, struct gpt_err *err)
{
    struct daemon_ctx *d = ctx;
    int64_t job = json_integer_value(json_object_get(args, "job"));
    int64_t snapshot = json_integer_value(json_object_get(args, "snapshot"));
    const json_t *uid = json_object_get(args, "uid");
    json_t *r = NULL;
    int rc;
    if ((strcmp(op, "cancel") == 0 || strcmp(op, "resume") == 0) &&
        (!json_is_integer(uid) || json_integer_value(uid) < 0))
        rc = gpt_err_set(err, -EINVAL, "uid", "%s without the client's uid", op);
    else if (strcmp(op, "cancel") == 0)
        rc = ops_cancel_result(d, job, (uid_t)json_integer_value(uid), &r, err);
    else if (strcmp(op, "resume") == 0)
        rc = ops_resume_result(d, job, snapshot, (uid_t)json_integer_value(uid), &r, err);
    else if (strcmp(op, "locate") == 0)
        rc = ops_locate_result(d, job, snapshot, &r, err);
    else if (strcmp(op, "list") == 0)
        rc = ops_list_result(d, &r, err);
    else if (strcmp(op, "status") == 0)
        rc = ops_job_result(d, job, &r, err);
    else if (strcmp(op, "snapshots") == 0)
        rc = ops_snapshots_result(d, job, &r, err);
    else if (strcmp(op, "history") == 0)
        rc = ops_history_result(d, args, &r, err);
    else
        rc = gpt_err_set(err, -EINVAL, "op", "unknown read \"%.64s\"", op);
    if (rc == 0 && !r)
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    if (rc == 0)
        *ret = r;
    return rc;
}

/* A `sample` request on its way through a uv work thread. The work thread
 * touches only this struct; the client is referenced, not used, there. */
struct ops_sample {
    uv_work_t work;
    struct control_client *cl;
    json_t *id;
    char dir[DB_PATH_MAX];
    char path[DB_PATH_MAX];
    char fallback[DB_PATH_MAX]; /* the newest recorded snapshot present here */
    char prompt[GPT_CTL_PROMPT_MAX + 1];
    /* a member: the job and snapshot are the coordinator's, the files this
     * node's own copies (s->dir; s->path when one was chosen) */
    bool member;
    int64_t job, snapshot, step;
    char node[CONFIG_NAME_MAX];
    struct gpt_sample_opts o;
    char *text;
    int rc;
    struct gpt_err err;
    uid_t uid; /* the client: the snapshot is read with its rights */
};

/* A member samples its own copy: members keep one of every snapshot
 * written while they were in the world, the coordinator's own files are
 * on another host. */
static int ops_sample_member_path(struct ops_sample *s)
{
    struct stat st;
    if (s->path[0]) {
        if (stat(s->path, &st) == 0)
            return 0;
        return gpt_err_set(&s->err, -ENOENT, "snapshot",
                           "snapshot %lld (step %lld) of job %lld is not on node %s (no %s); "
                           "sample it on the coordinator or on a node that was in that world",
                           (long long)s->snapshot, (long long)s->step, (long long)s->job, s->node,
                           s->path);
    }
    struct gpt_snapshot_meta meta;
    int rc = gpt_snapshot_newest(s->dir, s->path, sizeof(s->path), &meta, NULL, NULL, &s->err);
    if (rc == -ENOENT)
        rc = gpt_err_set(&s->err, -ENOENT, NULL,
                         "job %lld has no snapshot on node %s (none valid in %s); sample it on "
                         "the coordinator or on a node that was in its world",
                         (long long)s->job, s->node, s->dir);
    return rc;
}

static void ops_sample_read(struct ops_sample *s)
{
    if (s->member) {
        s->rc = ops_sample_member_path(s);
        if (s->rc < 0)
            return;
    } else if (!s->path[0]) {
        struct gpt_snapshot_meta meta;
        s->rc = gpt_snapshot_newest(s->dir, s->path, sizeof(s->path), &meta, NULL, NULL, &s->err);
        /* A cluster node keeps its copies in a directory of its own. */
        if (s->rc < 0 && s->fallback[0]) {
            snprintf(s->path, sizeof(s->path), "%s", s->fallback);
            s->rc = 0;
        }
        if (s->rc < 0)
            return;
    }
    s->rc = gpt_sample_snapshot(s->path, &s->o, &s->text, &s->err);
}

/* A user samples what that user may read (a job's snapshots are its
 * owner's, 0600): the thread takes the client's file-system identity. */
static void ops_sample_work(uv_work_t *w)
{
    struct ops_sample *s = w->data;
    struct fsid_user u;
    struct fsid_saved saved = {0};
    if ((s->rc = fsid_user_lookup(s->uid, &u, &s->err)) < 0 ||
        (s->rc = fsid_enter(&u, &saved, &s->err)) < 0)
        return;
    ops_sample_read(s);
    fsid_leave(&saved);
}

static void ops_sample_done(uv_work_t *w, int status)
{
    struct ops_sample *s = w->data;
    struct control_client *cl = s->cl;
    if (status < 0)
        s->rc = gpt_err_set(&s->err, -ECANCELED, NULL, "cancelled");
    if (s->rc < 0)
        control_reply_err(cl, s->id, s->rc, &s->err);
    else
        control_reply_ok(cl, s->id, json_pack("{s:s, s:s?}", "snapshot", s->path, "text", s->text));
    cl->busy--;
    control_client_idle_check(cl);
    control_client_unref(cl);
    json_decref(s->id);
    free(s->text);
    free(s);
}

struct ops_newest {
    char *path;
    size_t cap;
};

/* The first (newest) listed snapshot whose file is on this node. */
static void ops_newest_here(void *ctx, const struct db_snapshot *sn)
{
    struct ops_newest *nw = ctx;
    struct stat st;
    if (!nw->path[0] && stat(sn->path, &st) == 0)
        snprintf(nw->path, nw->cap, "%s", sn->path);
}

static int ops_sample_queue(struct daemon_ctx *d, struct control_client *cl,
                            const struct gpt_ctl_request *req, int64_t tokens, struct ops_sample *s,
                            struct gpt_err *err);
static int ops_sample_member(struct daemon_ctx *d, struct control_client *cl,
                             const struct gpt_ctl_request *req, int64_t tokens,
                             struct gpt_err *err);

static int op_sample(struct daemon_ctx *d, struct control_client *cl,
                     const struct gpt_ctl_request *req, struct gpt_err *err)
{
    int64_t tokens = req->present & (1u << GPT_CTL_F_TOKENS) ? req->tokens : 64;
    if (tokens > d->cfg.sample_max_tokens)
        return gpt_err_set(err, -GPT_E_LIMIT, "tokens", "at most %d tokens (sample_max_tokens)",
                           d->cfg.sample_max_tokens);
    if (ops_is_member(d))
        return ops_sample_member(d, cl, req, tokens, err);
    struct db_job j;
    int rc = db_job_get(d->db, req->job, &j, err);
    if (rc < 0)
        return rc;
    struct ops_sample *s = calloc(1, sizeof(*s));
    if (!s) {
        db_job_done(&j);
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    }
    snprintf(s->dir, sizeof(s->dir), "%s", j.snapshot_dir);
    db_job_done(&j);
    if (req->present & (1u << GPT_CTL_F_SNAPSHOT)) {
        struct db_snapshot sn;
        rc = db_snapshot_get(d->db, req->snapshot, &sn, err);
        if (rc == 0 && sn.job_id != req->job)
            rc = gpt_err_set(err, -ENOENT, "snapshot", "snapshot %lld is not job %lld's",
                             (long long)req->snapshot, (long long)req->job);
        if (rc < 0) {
            free(s);
            return rc;
        }
        snprintf(s->path, sizeof(s->path), "%s", sn.path);
    }
    if (!s->path[0]) {
        struct ops_newest nw = {s->fallback, sizeof(s->fallback)};
        (void)db_snapshot_list(d->db, req->job, ops_newest_here, &nw, NULL);
    }
    return ops_sample_queue(d, cl, req, tokens, s, err);
}

/* A member's sample: where the copies are comes from the coordinator. */
struct ops_locating {
    struct daemon_ctx *d;
    struct control_client *cl;
    struct ops_sample *s;
    struct gpt_ctl_request req; /* what ops_sample_queue reads; prompt copied into s */
    int64_t tokens;
};

static void ops_sample_located(void *arg, int rc, const json_t *reply, const struct gpt_err *err)
{
    struct ops_locating *q = arg;
    struct ops_sample *s = q->s;
    struct control_client *cl = q->cl;
    struct gpt_err e;
    gpt_err_clear(&e);
    const char *dir = json_string_value(json_object_get(reply, "dir"));
    const json_t *step = json_object_get(reply, "step");
    if (rc < 0) {
        e = *err;
    } else if (!dir || !json_is_integer(step)) {
        rc = gpt_err_set(&e, -GPT_E_PROTO, NULL, "the coordinator's answer has no snapshot dir");
    } else {
        /* The agent's layout: a spec's snapshot.dir holds one subdirectory
         * per member; the default is under this node's state directory. */
        int k = dir[0] ? snprintf(s->dir, sizeof(s->dir), "%s/%s", dir, s->node)
                       : snprintf(s->dir, sizeof(s->dir), "%s/jobs/%lld/snapshots",
                                  q->d->cfg.state_dir, (long long)s->job);
        s->step = json_integer_value(step);
        if (k > 0 && (size_t)k < sizeof(s->dir) && s->snapshot > 0)
            k = snprintf(s->path, sizeof(s->path), "%s/snap-%012lld%s", s->dir, (long long)s->step,
                         GPT_SNAPSHOT_SUFFIX);
        if (k < 0 || (size_t)k >= sizeof(s->path))
            rc = gpt_err_set(&e, -ENAMETOOLONG, NULL, "snapshot directory too long");
    }
    if (rc == 0 && cl->closing)
        rc = -ECANCELED;
    if (rc < 0)
        free(s);
    else
        rc = ops_sample_queue(q->d, cl, &q->req, q->tokens, s, &e); /* takes s */
    if (rc < 0 && !cl->closing)
        control_reply_err(cl, q->req.id, rc, &e);
    json_decref(q->req.id);
    cl->busy--;
    control_client_idle_check(cl);
    control_client_unref(cl);
    free(q);
}

static int ops_sample_member(struct daemon_ctx *d, struct control_client *cl,
                             const struct gpt_ctl_request *req, int64_t tokens, struct gpt_err *err)
{
    struct ops_sample *s = calloc(1, sizeof(*s));
    struct ops_locating *q = calloc(1, sizeof(*q));
    bool chosen = req->present & (1u << GPT_CTL_F_SNAPSHOT);
    json_t *args = json_pack("{s:I, s:I}", "job", (json_int_t)req->job, "snapshot",
                             (json_int_t)(chosen ? req->snapshot : 0));
    if (!s || !q || !args) {
        free(s);
        free(q);
        json_decref(args);
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    }
    s->member = true;
    s->job = req->job;
    s->snapshot = chosen ? req->snapshot : 0;
    snprintf(s->node, sizeof(s->node), "%s", d->cfg.node_name);
    snprintf(s->prompt, sizeof(s->prompt), "%s", req->prompt);
    q->d = d;
    q->cl = cl;
    q->s = s;
    q->req = *req;
    q->req.id = json_deep_copy(req->id);
    q->req.prompt = NULL; /* borrowed from the request; copied into s already */
    q->req.root = NULL;
    q->req.spec = NULL;
    q->tokens = tokens;
    int rc = cluster_read(d->cluster, "locate", args, ops_sample_located, q, err);
    if (rc < 0) {
        json_decref(q->req.id);
        free(q);
        free(s);
        return rc;
    }
    control_client_ref(cl);
    cl->busy++;
    return 0;
}

/* Fills in the sampling options and runs it on a work thread (takes s). */
static int ops_sample_queue(struct daemon_ctx *d, struct control_client *cl,
                            const struct gpt_ctl_request *req, int64_t tokens, struct ops_sample *s,
                            struct gpt_err *err)
{
    int rc;
    if (req->prompt)
        snprintf(s->prompt, sizeof(s->prompt), "%s", req->prompt);
    s->o.prompt = s->prompt;
    s->o.tokens = (int)tokens;
    s->o.temperature = req->present & (1u << GPT_CTL_F_TEMPERATURE) ? req->temperature : 1.0;
    s->o.top_k = (int)req->top_k;
    s->o.seed = (uint64_t)time(NULL);
    s->o.threads = 1;
    s->cl = cl;
    s->uid = cl->uid;
    s->id = json_deep_copy(req->id);
    s->work.data = s;
    rc = uv_queue_work(d->loop, &s->work, ops_sample_work, ops_sample_done);
    if (rc < 0) {
        json_decref(s->id);
        free(s);
        return gpt_err_set(err, -EAGAIN, NULL, "cannot queue the work: %s", uv_strerror(rc));
    }
    control_client_ref(cl);
    cl->busy++;
    return 0;
}

static int op_nodes(struct daemon_ctx *d, struct control_client *cl,
                    const struct gpt_ctl_request *req, struct gpt_err *err)
{
    (void)err;
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
        control_reply_ok(cl, req->id,
                         json_pack("{s:o, s:s, s:b, s:s, s:s}", "nodes", nodes, "self",
                                   d->cfg.node_name, "coordinator",
                                   cluster_is_coordinator(d->cluster), "agent",
                                   agent_state(d->agent), "rdzv", ep));
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
    control_reply_ok(cl, req->id, json_pack("{s:[o]}", "nodes", node));
    return 0;
}

static int op_ping(struct daemon_ctx *d, struct control_client *cl,
                   const struct gpt_ctl_request *req, struct gpt_err *err)
{
    (void)d;
    (void)err;
    control_reply_ok(cl, req->id,
                     json_pack("{s:s, s:I}", "version", GPTD_VERSION, "uid", (json_int_t)cl->uid));
    return 0;
}

static const ops_fn ops_table[GPT_CTL_OP_COUNT] = {
    [GPT_CTL_OP_SUBMIT] = op_submit, [GPT_CTL_OP_VALIDATE] = op_validate,
    [GPT_CTL_OP_LIST] = op_list,     [GPT_CTL_OP_STATUS] = op_status,
    [GPT_CTL_OP_LOGS] = op_logs,     [GPT_CTL_OP_CANCEL] = op_cancel,
    [GPT_CTL_OP_RESUME] = op_resume, [GPT_CTL_OP_SNAPSHOTS] = op_snapshots,
    [GPT_CTL_OP_SAMPLE] = op_sample, [GPT_CTL_OP_NODES] = op_nodes,
    [GPT_CTL_OP_PING] = op_ping,
};

void ops_dispatch(struct daemon_ctx *d, struct control_client *cl, struct gpt_ctl_request *req)
{
    GPT_ASSERT(req->op >= 0 && req->op < GPT_CTL_OP_COUNT && ops_table[req->op]);
    struct gpt_err err;
    gpt_err_clear(&err);
    if (d->stopping && (req->op == GPT_CTL_OP_SUBMIT || req->op == GPT_CTL_OP_RESUME)) {
        gpt_err_set(&err, -EAGAIN, NULL, "gptd is stopping");
        control_reply_err(cl, req->id, -EAGAIN, &err);
        return;
    }
    int rc = ops_table[req->op](d, cl, req, &err);
    if (rc < 0) {
        if (rc != -GPT_E_SPEC && rc != -ENOENT && rc != -EPERM && rc != -EALREADY)
            log_info("request %s from uid %u failed: %s", gpt_ctl_op_name(req->op),
                     (unsigned)cl->uid, err.msg);
        control_reply_err(cl, req->id, rc, &err);
    }
}
