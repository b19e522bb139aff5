/*
 * handlers_sample: the `sample` control op (see handlers.h). Owns the
 * request's state on its way through the user work pool (userwork.h),
 * whose thread loads a snapshot and runs the model, stopping between
 * tokens when the client goes or gptd stops; on a cluster member it first
 * asks the coordinator where this node's copy of the snapshot is. Loop
 * thread, except handler_sample_work. A reply on the node with the queue
 * of record is also kept with the job (db_sample_insert, the newest
 * sample_history of them) for `gptctl samples` and the dashboard.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fsid.h"
#include "model_mem.h"
#include "handlers.h"
#include "log.h"
#include "snapshot.h"
#include "tokcache.h"
#include "trainer.h"

/* A `sample` request on its way through the pool. The work thread
 * touches only this struct; the client is referenced, not used, there. */
struct handler_sample {
    struct userwork_item item;
    struct daemon_ctx *d;
    struct control_client *cl;
    json_t *id;
    char dir[DB_PATH_MAX];
    char path[DB_PATH_MAX];
    char fallback[8][DB_PATH_MAX]; /* the newest recorded snapshots, newest first; the work
                                    * thread takes the first present here (as the client) */
    char prompt[GPT_CTL_PROMPT_MAX + 1];
    char *prompt_ids;                 /* owned; NULL: the prompt is text */
    char vocab[GPT_JOB_PATH_MAX];     /* the job's data.vocab ("" none) */
    char data_roots[CONFIG_PATH_MAX]; /* the vocabulary folder must lie under them */
    /* a member: the job and snapshot are the coordinator's, the files this
     * node's own copies (s->dir; s->path when one was chosen) */
    bool member;
    int64_t job, snapshot, step; /* step: the sampled snapshot's (the work thread reads it) */
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
static int handler_sample_member_path(struct handler_sample *s)
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

/* What sampling the snapshot allocates (the model with its gradients
 * and activations for one sequence, the logits' host copy), from its
 * header, counted against the user's memory bound before any of it is. */
static int handler_sample_reserve(struct handler_sample *s)
{
    struct gpt_snapshot_meta meta;
    int rc = gpt_snapshot_read_meta(s->path, &meta, &s->err);
    if (rc < 0)
        return rc;
    s->step = meta.step;
    struct gpt_model_mem mm;
    gpt_model_mem_estimate(&meta.cfg, 1, GPT_SHARD_NONE, 0, 1, 0, 0, &mm);
    uint64_t vp = ((uint64_t)meta.cfg.vocab_size + 127) / 128 * 128;
    uint64_t bytes = mm.params + mm.grads + mm.acts + (uint64_t)meta.cfg.block_size * vp * 4;
    return userwork_mem_take(&s->item, bytes, "sampling this model", &s->err);
}

static void handler_sample_read(struct handler_sample *s)
{
    if (s->member) {
        s->rc = handler_sample_member_path(s);
        if (s->rc < 0)
            return;
    } else if (!s->path[0]) {
        struct gpt_snapshot_meta meta;
        s->rc = gpt_snapshot_newest(s->dir, s->path, sizeof(s->path), &meta, NULL, NULL, &s->err);
        /* A cluster node keeps its copies in a directory of its own. */
        struct stat st;
        for (size_t i = 0; s->rc < 0 && i < 8 && s->fallback[i][0]; i++)
            if (stat(s->fallback[i], &st) == 0) {
                snprintf(s->path, sizeof(s->path), "%s", s->fallback[i]);
                s->rc = 0;
            }
        if (s->rc < 0)
            return;
    }
    s->rc = handler_sample_reserve(s);
    if (s->rc < 0)
        return;
    s->rc =
        tokcache_sample(s->path, s->vocab, s->data_roots, s->prompt_ids, &s->o, &s->text, &s->err);
}

/* A user samples what that user may read (a job's snapshots are its
 * owner's, 0600): the thread takes the client's file-system identity. */
static void handler_sample_work(struct userwork_item *it)
{
    struct handler_sample *s = it->data;
    struct fsid_user u;
    struct fsid_saved saved = {0};
    if ((s->rc = fsid_user_lookup(s->uid, &u, &s->err)) < 0 ||
        (s->rc = fsid_enter(&u, &saved, &s->err)) < 0)
        return;
    handler_sample_read(s);
    fsid_leave(&saved);
}

/* Keeps the reply with the job, in the database of the queue of record: a
 * member sends it to the coordinator. A failure to keep it is logged, not
 * the client's: the text was made. */
static void handler_sample_record(struct handler_sample *s)
{
    struct daemon_ctx *d = s->d;
    struct gpt_err err;
    /* What gptctl sample prints after its separator: the text after the
     * prompt, or all of it when it does not begin with the prompt as given. */
    size_t pl = strlen(s->prompt);
    const char *text = s->text ? s->text : "";
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct db_sample r = {
        .job_id = s->job,
        .time = (double)ts.tv_sec + ts.tv_nsec * 1e-9,
        .uid = s->uid,
        .snapshot_id = s->snapshot, /* the one asked for; else found by its path */
        .step = s->step,
        .snapshot = s->path,
        .prompt = s->prompt,
        .prompt_ids = s->prompt_ids ? s->prompt_ids : "",
        .completion = strncmp(text, s->prompt, pl) == 0 ? text + pl : text,
        .tokens = s->o.tokens,
        .temperature = s->o.temperature,
        .top_k = s->o.top_k,
        .seed = s->o.seed,
    };
    if (s->member) {
        json_t *o = db_sample_json(&r);
        if (o)
            cluster_send_sample(d->cluster, s->job, o);
        json_decref(o);
    } else if (db_sample_insert(d->db, &r, d->cfg.sample_history, &err) < 0) {
        log_warn("sample of job %lld not kept: %s", (long long)s->job, err.msg);
    }
}

static void handler_sample_done(struct userwork_item *it, int status)
{
    struct handler_sample *s = it->data;
    struct control_client *cl = s->cl;
    if (status < 0)
        s->rc = gpt_err_set(&s->err, -ECANCELED, NULL, "cancelled before it started");
    if (s->rc == -ECANCELED) {
        log_info("sample for uid %u: %s", (unsigned)s->uid, s->err.msg);
        if (userwork_stopped(it)) {
            struct gpt_err why = s->err;
            s->rc = gpt_err_set(&s->err, -EAGAIN, NULL, "gptd is stopping (%s)", why.msg);
        }
    }
    if (s->rc < 0) {
        control_reply_err(cl, s->id, s->rc, &s->err);
    } else {
        handler_sample_record(s);
        control_reply_ok(cl, s->id, json_pack("{s:s, s:s?}", "snapshot", s->path, "text", s->text));
    }
    cl->busy--;
    control_client_idle_check(cl);
    control_client_unref(cl);
    json_decref(s->id);
    free(s->text);
    free(s->prompt_ids);
    free(s);
}

/* The newest listed snapshots; which is on this node is for the work
 * thread to find, as the client (the loop never touches a job's files). */
static void handler_newest_here(void *ctx, const struct db_snapshot *sn)
{
    struct handler_sample *s = ctx;
    for (size_t i = 0; i < 8; i++)
        if (!s->fallback[i][0]) {
            snprintf(s->fallback[i], sizeof(s->fallback[i]), "%s", sn->path);
            return;
        }
}

static int handler_sample_queue(struct daemon_ctx *d, struct control_client *cl,
                                const struct gpt_ctl_request *req, int64_t tokens,
                                struct handler_sample *s, struct gpt_err *err);

/* The job's tokenizer for prompts and output: its spec's data.vocab
 * (validated at submit: set only for gpt2 jobs). */
static void handler_sample_vocab(struct handler_sample *s, const char *spec_json)
{
    json_t *spec = spec_json ? json_loads(spec_json, 0, NULL) : NULL;
    const char *v = json_string_value(json_object_get(json_object_get(spec, "data"), "vocab"));
    snprintf(s->vocab, sizeof(s->vocab), "%s", v ? v : "");
    json_decref(spec);
}

/* The tokens asked for; the dispatcher checked them against
 * sample_max_tokens. */
static int64_t handler_sample_tokens(const struct gpt_ctl_request *req)
{
    return req->present & (1u << GPT_CTL_F_TOKENS) ? req->tokens : HANDLER_SAMPLE_TOKENS_DEFAULT;
}

int handler_sample_run(struct daemon_ctx *d, struct control_client *cl,
                       const struct gpt_ctl_request *req, struct gpt_err *err)
{
    int64_t tokens = handler_sample_tokens(req);
    struct db_job j;
    int rc = db_job_get(d->db, req->job, &j, err);
    if (rc < 0)
        return rc;
    struct handler_sample *s = calloc(1, sizeof(*s));
    if (!s) {
        db_job_done(&j);
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    }
    s->job = req->job;
    snprintf(s->dir, sizeof(s->dir), "%s", j.snapshot_dir);
    handler_sample_vocab(s, j.spec_json);
    db_job_done(&j);
    if (req->present & (1u << GPT_CTL_F_SNAPSHOT)) {
        struct db_snapshot sn;
        rc = db_job_snapshot_get(d->db, req->job, req->snapshot, &sn, err);
        if (rc < 0) {
            free(s);
            return rc;
        }
        snprintf(s->path, sizeof(s->path), "%s", sn.path);
    }
    if (!s->path[0]) {
        (void)db_snapshot_list(d->db, req->job, handler_newest_here, s, NULL);
    }
    return handler_sample_queue(d, cl, req, tokens, s, err);
}

/* A member's sample: where the copies are comes from the coordinator. */
struct handler_locating {
    struct daemon_ctx *d;
    struct control_client *cl;
    struct handler_sample *s;
    struct gpt_ctl_request req; /* what handler_sample_queue reads; prompt copied into s */
    int64_t tokens;
};

static void handler_sample_located(void *arg, int rc, const json_t *reply,
                                   const struct gpt_err *err)
{
    struct handler_locating *q = arg;
    struct handler_sample *s = q->s;
    struct control_client *cl = q->cl;
    struct gpt_err e;
    gpt_err_clear(&e);
    const char *dir = json_string_value(json_object_get(reply, "dir"));
    const char *vocab = json_string_value(json_object_get(reply, "vocab"));
    const json_t *step = json_object_get(reply, "step");
    snprintf(s->vocab, sizeof(s->vocab), "%s", vocab ? vocab : "");
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
    if (rc < 0) {
        free(s->prompt_ids);
        free(s);
    } else {
        rc = handler_sample_queue(q->d, cl, &q->req, q->tokens, s, &e); /* takes s */
    }
    if (rc < 0 && !cl->closing)
        control_reply_err(cl, q->req.id, rc, &e);
    json_decref(q->req.id);
    cl->busy--;
    control_client_idle_check(cl);
    control_client_unref(cl);
    free(q);
}

int handler_sample_member(struct daemon_ctx *d, struct control_client *cl,
                          const struct gpt_ctl_request *req, struct gpt_err *err)
{
    int64_t tokens = handler_sample_tokens(req);
    struct handler_sample *s = calloc(1, sizeof(*s));
    struct handler_locating *q = calloc(1, sizeof(*q));
    bool chosen = req->present & (1u << GPT_CTL_F_SNAPSHOT);
    struct cluster_msg_read_args args = {
        .job = req->job, .uid = -1, .snapshot = chosen ? req->snapshot : 0};
    if (!s || !q) {
        free(s);
        free(q);
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    }
    s->member = true;
    s->job = req->job;
    s->snapshot = chosen ? req->snapshot : 0;
    snprintf(s->node, sizeof(s->node), "%s", d->cfg.node_name);
    snprintf(s->prompt, sizeof(s->prompt), "%s", req->prompt ? req->prompt : "");
    q->d = d;
    q->cl = cl;
    q->s = s;
    q->req = *req;
    q->req.id = json_deep_copy(req->id);
    q->req.prompt = NULL; /* borrowed from the request; copied into s already */
    if (req->prompt_ids && !(s->prompt_ids = strdup(req->prompt_ids))) {
        json_decref(q->req.id);
        free(q);
        free(s);
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    }
    q->req.prompt_ids = NULL; /* copied into s */
    q->req.root = NULL;
    q->req.spec = NULL;
    q->tokens = tokens;
    int rc = cluster_read_op(d->cluster, GPT_CTL_OP_SAMPLE, &args, handler_sample_located, q, err);
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
static int handler_sample_queue(struct daemon_ctx *d, struct control_client *cl,
                                const struct gpt_ctl_request *req, int64_t tokens,
                                struct handler_sample *s, struct gpt_err *err)
{
    int rc;
    if (req->prompt)
        snprintf(s->prompt, sizeof(s->prompt), "%s", req->prompt);
    if (req->prompt_ids && !s->prompt_ids && !(s->prompt_ids = strdup(req->prompt_ids))) {
        free(s);
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    }
    if (s->prompt_ids && s->prompt[0]) {
        free(s->prompt_ids);
        free(s);
        return gpt_err_set(err, -EINVAL, "prompt_ids",
                           "give a prompt as text (--prompt) or as token ids (--prompt-ids), not "
                           "both");
    }
    snprintf(s->data_roots, sizeof(s->data_roots), "%s", d->cfg.data_roots);
    s->o.prompt = s->prompt;
    s->o.tokens = (int)tokens;
    s->o.temperature = req->present & (1u << GPT_CTL_F_TEMPERATURE)
                           ? req->temperature
                           : GPT_SAMPLE_TEMPERATURE_DEFAULT;
    s->o.top_k = (int)req->top_k;
    s->o.seed = (uint64_t)time(NULL);
    s->o.threads = 1;
    s->o.cancel = &s->item.cancel;
    s->d = d;
    s->cl = cl;
    s->uid = cl->uid;
    s->id = json_deep_copy(req->id);
    s->item.work = handler_sample_work;
    s->item.done = handler_sample_done;
    s->item.data = s;
    rc = handler_userwork_submit(d, cl, s->id, &s->item, true, err);
    if (rc < 0) {
        json_decref(s->id);
        free(s->prompt_ids);
        free(s);
        return rc;
    }
    control_client_ref(cl);
    cl->busy++;
    return 0;
}
