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
#include "log.h"
#include "paths.h"
#include "snapshot.h"
#include "trainer.h"

#define OPS_LIST_MAX 1000 /* jobs in one `list` reply */

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
static int ops_parse_spec(const struct daemon_ctx *d, const json_t *spec, struct gpt_job *job,
                          struct gpt_err *err)
{
    char *text = json_dumps(spec, JSON_COMPACT);
    if (!text)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    int rc = gpt_jobspec_parse(text, strlen(text), NULL, 0, job, err);
    free(text);
    if (rc == 0)
        rc = gpt_jobspec_check_paths(job, err);
    if (rc == 0)
        rc = paths_check_job(job, d->cfg.data_roots, d->cfg.snapshot_roots, d->cfg.state_dir, err);
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
    int rc = ops_parse_spec(d, req->spec, job, err);
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
    int rc = ops_parse_spec(d, req->spec, job, err);
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

static int op_list(struct daemon_ctx *d, struct control_client *cl,
                   const struct gpt_ctl_request *req, struct gpt_err *err)
{
    json_t *arr = json_array();
    if (!arr)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    int rc = db_job_list(d->db, OPS_LIST_MAX, ops_list_add, arr, err);
    if (rc < 0) {
        json_decref(arr);
        return rc;
    }
    control_reply_ok(cl, req->id, json_pack("{s:o}", "jobs", arr));
    return 0;
}

static int op_status(struct daemon_ctx *d, struct control_client *cl,
                     const struct gpt_ctl_request *req, struct gpt_err *err)
{
    if (req->present & (1u << GPT_CTL_F_JOB)) {
        struct db_job j;
        int rc = db_job_get(d->db, req->job, &j, err);
        if (rc < 0)
            return rc;
        json_t *o = ops_job_json(&j);
        if (o) {
            json_object_set_new(o, "snapshot_dir", json_string(j.snapshot_dir));
            json_object_set_new(o, "spec", json_loads(j.spec_json, 0, NULL));
        }
        db_job_done(&j);
        control_reply_ok(cl, req->id, json_pack("{s:o}", "job", o));
        return 0;
    }
    int64_t queued = 0;
    int rc = db_job_count(d->db, DB_JOB_QUEUED, &queued, err);
    if (rc < 0)
        return rc;
    control_reply_ok(cl, req->id,
                     json_pack("{s:s, s:s, s:I, s:f, s:I, s:I, s:s, s:s, s:i}", "version",
                               GPTD_VERSION, "node", d->cfg.node_name, "pid", (json_int_t)getpid(),
                               "started", d->started, "running_job",
                               (json_int_t)jobs_running(d->jobs), "queued", (json_int_t)queued,
                               "state_dir", d->cfg.state_dir, "socket", d->cfg.socket, "clients",
                               control_client_count(d->ctl)));
    return 0;
}

static int op_logs(struct daemon_ctx *d, struct control_client *cl,
                   const struct gpt_ctl_request *req, struct gpt_err *err)
{
    return jobs_follow(d->jobs, cl, req->id, req->job, req->since, req->follow, err);
}

/* Replies with the job's state after a cancel/resume. */
static int ops_reply_state(struct daemon_ctx *d, struct control_client *cl,
                           const struct gpt_ctl_request *req, struct gpt_err *err)
{
    struct db_job j;
    int rc = db_job_get(d->db, req->job, &j, err);
    if (rc < 0)
        return rc;
    const char *state = db_job_state_name(j.state);
    if (jobs_running(d->jobs) == j.id && req->op == GPT_CTL_OP_CANCEL)
        state = "cancelling";
    control_reply_ok(cl, req->id, json_pack("{s:I, s:s}", "job", (json_int_t)j.id, "state", state));
    db_job_done(&j);
    return 0;
}

static int op_cancel(struct daemon_ctx *d, struct control_client *cl,
                     const struct gpt_ctl_request *req, struct gpt_err *err)
{
    int rc = jobs_cancel(d->jobs, req->job, cl->uid, err);
    return rc < 0 ? rc : ops_reply_state(d, cl, req, err);
}

static int op_resume(struct daemon_ctx *d, struct control_client *cl,
                     const struct gpt_ctl_request *req, struct gpt_err *err)
{
    int rc = jobs_resume(d->jobs, req->job, req->snapshot, cl->uid, err);
    return rc < 0 ? rc : ops_reply_state(d, cl, req, err);
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

static int op_snapshots(struct daemon_ctx *d, struct control_client *cl,
                        const struct gpt_ctl_request *req, struct gpt_err *err)
{
    struct db_job j;
    int rc = db_job_get(d->db, req->job, &j, err);
    if (rc < 0)
        return rc;
    db_job_done(&j);
    json_t *arr = json_array();
    if (!arr)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    rc = db_snapshot_list(d->db, req->job, ops_snapshot_add, arr, err);
    if (rc < 0) {
        json_decref(arr);
        return rc;
    }
    control_reply_ok(cl, req->id,
                     json_pack("{s:I, s:s, s:o}", "job", (json_int_t)req->job, "snapshot_dir",
                               j.snapshot_dir, "snapshots", arr));
    return 0;
}

/* A `sample` request on its way through a uv work thread. The work thread
 * touches only this struct; the client is referenced, not used, there. */
struct ops_sample {
    uv_work_t work;
    struct control_client *cl;
    json_t *id;
    char dir[DB_PATH_MAX];
    char path[DB_PATH_MAX];
    char prompt[GPT_CTL_PROMPT_MAX + 1];
    struct gpt_sample_opts o;
    char *text;
    int rc;
    struct gpt_err err;
};

static void ops_sample_work(uv_work_t *w)
{
    struct ops_sample *s = w->data;
    if (!s->path[0]) {
        struct gpt_snapshot_meta meta;
        s->rc = gpt_snapshot_newest(s->dir, s->path, sizeof(s->path), &meta, NULL, NULL, &s->err);
        if (s->rc < 0)
            return;
    }
    s->rc = gpt_sample_snapshot(s->path, &s->o, &s->text, &s->err);
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

static int op_sample(struct daemon_ctx *d, struct control_client *cl,
                     const struct gpt_ctl_request *req, struct gpt_err *err)
{
    int64_t tokens = req->present & (1u << GPT_CTL_F_TOKENS) ? req->tokens : 64;
    if (tokens > d->cfg.sample_max_tokens)
        return gpt_err_set(err, -GPT_E_LIMIT, "tokens", "at most %d tokens (sample_max_tokens)",
                           d->cfg.sample_max_tokens);
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
    snprintf(s->prompt, sizeof(s->prompt), "%s", req->prompt);
    s->o.prompt = s->prompt;
    s->o.tokens = (int)tokens;
    s->o.temperature = req->present & (1u << GPT_CTL_F_TEMPERATURE) ? req->temperature : 1.0;
    s->o.top_k = (int)req->top_k;
    s->o.seed = (uint64_t)time(NULL);
    s->o.threads = 1;
    s->cl = cl;
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
        control_reply_ok(cl, req->id,
                         json_pack("{s:o, s:s, s:b, s:s}", "nodes", nodes, "self", d->cfg.node_name,
                                   "coordinator", cluster_is_coordinator(d->cluster), "agent",
                                   agent_state(d->agent)));
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
