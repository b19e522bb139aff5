/*
 * handlers_export: the `export` control op (see handlers.h). A job's
 * snapshot is written out as a Hugging Face folder, an llm.c checkpoint or
 * a GGUF file on a thread of the user work pool (userwork.h) that takes
 * the job owner's file-system identity: the kernel refuses what the owner
 * could not read or write, and the writers never follow a symlink at the
 * final name and write atomically (engine/fmt/export.h). The writers stop
 * between tensors when the client goes or gptd stops, leaving no file.
 * Owns the request's state on its way through the pool. Loop thread,
 * except handler_export_work.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "export.h"
#include "export_args.h"
#include "export_model.h"
#include "export_tmp.h"
#include "fsid.h"
#include "handlers.h"
#include "log.h"
#include "snapshot.h"

struct handler_export {
    struct userwork_item item;
    struct control_client *cl;
    json_t *id;
    enum gpt_fmt_kind kind;
    char dir[DB_PATH_MAX];       /* the job's snapshot folder */
    char path[DB_PATH_MAX];      /* the chosen snapshot; empty: the newest */
    char newest[8][DB_PATH_MAX]; /* the newest recorded snapshots, newest first */
    char out[GPT_CTL_OUTPUT_MAX + 1];
    char vocab[DB_PATH_MAX];     /* data.vocab of a gpt2-tokenized job; empty: none */
    char dtype[8];               /* "f32", "f16" or "bf16" */
    char name[128];              /* the job's name: GGUF general.name */
    char state_dir[DB_PATH_MAX]; /* where the temporary is recorded (export_tmp.h) */
    mode_t umask;                /* the client's; 077 when it sent none */
    uid_t owner;
    int rc;
    struct gpt_err err;
};

/* The snapshot to export: the one asked for, else the newest recorded one
 * present here, else the newest valid one in the folder. As the owner. */
static int handler_export_pick(struct handler_export *x)
{
    struct stat st;
    if (x->path[0])
        return 0;
    for (size_t i = 0; i < 8 && x->newest[i][0]; i++)
        if (stat(x->newest[i], &st) == 0) {
            snprintf(x->path, sizeof(x->path), "%s", x->newest[i]);
            return 0;
        }
    struct gpt_snapshot_meta meta;
    int rc = gpt_snapshot_newest(x->dir, x->path, sizeof(x->path), &meta, NULL, NULL, &x->err);
    if (rc == -ENOENT)
        rc = gpt_err_set(&x->err, -ENOENT, "snapshot", "the job has no snapshot in %s", x->dir);
    return rc;
}

/* An export holds the snapshot's weights (the writers convert them as
 * they stream out), counted against the user's memory bound before it
 * reads them. */
static int handler_export_reserve(struct handler_export *x)
{
    struct gpt_snapshot_meta meta;
    enum gpt_fmt_kind kind;
    int rc = gpt_fmt_detect(x->path, &kind, &x->err);
    if (rc < 0 || kind != GPT_FMT_GPTS)
        return rc; /* export_model says what it is not */
    if ((rc = gpt_snapshot_read_meta(x->path, &meta, &x->err)) < 0)
        return rc;
    return userwork_mem_take(&x->item, meta.n_params * sizeof(float), "exporting this model",
                             &x->err);
}

static void handler_export_work(struct userwork_item *it)
{
    struct handler_export *x = it->data;
    struct fsid_user u;
    struct fsid_saved saved = {0};
    struct export_tmp tmp;
    if ((x->rc = fsid_user_lookup(x->owner, &u, &x->err)) < 0)
        return;
    /* Recorded as gptd, before the user's temporary exists: a gptd killed
     * while it is written removes it at the next start. */
    if ((x->rc = export_tmp_begin(x->state_dir, x->owner, x->out, &tmp, &x->err)) < 0)
        return;
    if ((x->rc = fsid_enter(&u, &saved, &x->err)) == 0) {
        x->rc = handler_export_pick(x);
        if (x->rc == 0)
            x->rc = handler_export_reserve(x);
        if (x->rc == 0)
            x->rc = export_model(x->path, x->kind, x->out, x->vocab[0] ? x->vocab : NULL, x->dtype,
                                 x->name[0] ? x->name : NULL, x->umask, tmp.prefix, &it->cancel,
                                 &x->err);
        fsid_leave(&saved);
    }
    export_tmp_end(&tmp);
}

static void handler_export_done(struct userwork_item *it, int status)
{
    struct handler_export *x = it->data;
    struct control_client *cl = x->cl;
    if (status < 0)
        x->rc = gpt_err_set(&x->err, -ECANCELED, NULL, "cancelled before it started");
    if (x->rc == -ECANCELED) {
        log_info("export for uid %u: %s", (unsigned)cl->uid, x->err.msg);
        if (userwork_stopped(it)) {
            struct gpt_err why = x->err;
            x->rc = gpt_err_set(&x->err, -EAGAIN, NULL, "gptd is stopping (%s)", why.msg);
        }
    }
    if (x->rc < 0)
        control_reply_err(cl, x->id, x->rc, &x->err);
    else
        control_reply_ok(cl, x->id,
                         json_pack("{s:s, s:s, s:s}", "snapshot", x->path, "format",
                                   gpt_fmt_kind_name(x->kind), "output", x->out));
    cl->busy--;
    control_client_idle_check(cl);
    control_client_unref(cl);
    json_decref(x->id);
    free(x);
}

static void handler_export_newest(void *ctx, const struct db_snapshot *sn)
{
    struct handler_export *x = ctx;
    for (size_t i = 0; i < 8; i++)
        if (!x->newest[i][0]) {
            snprintf(x->newest[i], sizeof(x->newest[i]), "%s", sn->path);
            return;
        }
}

/* The job's GPT-2 vocabulary folder, when its spec has one (data.vocab
 * with data.tokenizer gpt2, or shards named gpt2 by data.vocab). */
static void handler_export_vocab(struct handler_export *x, const char *spec_json)
{
    json_t *spec = spec_json ? json_loads(spec_json, 0, NULL) : NULL;
    const char *v = json_string_value(json_object_get(json_object_get(spec, "data"), "vocab"));
    if (v && v[0])
        snprintf(x->vocab, sizeof(x->vocab), "%s", v);
    json_decref(spec);
}

int handler_export_run(struct daemon_ctx *d, struct control_client *cl,
                       const struct gpt_ctl_request *req, struct gpt_err *err)
{
    int rc = gpt_export_values_check(req->format, req->dtype, err);
    if (rc < 0)
        return rc;
    enum gpt_fmt_kind kind = gpt_fmt_kind_parse(req->format, err);
    if (kind == GPT_FMT_NONE)
        return -EINVAL;
    if (req->output[0] != '/')
        return gpt_err_set(err, -EINVAL, "output", "output must be an absolute path");
    struct db_job j;
    rc = db_job_get(d->db, req->job, &j, err);
    if (rc < 0)
        return rc;
    if (cl->uid != 0 && j.owner_uid != cl->uid) {
        rc = gpt_err_set(err, -EPERM, "job", "job %lld belongs to uid %u", (long long)req->job,
                         (unsigned)j.owner_uid);
        db_job_done(&j);
        return rc;
    }
    struct handler_export *x = calloc(1, sizeof(*x));
    if (!x) {
        db_job_done(&j);
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    }
    x->kind = kind;
    snprintf(x->dtype, sizeof(x->dtype), "%s", req->dtype ? req->dtype : "f32");
    x->owner = j.owner_uid;
    /* The files are the user's: the client's umask when it sent one, else
     * as private as the snapshot they come from (0600, folders 0700). */
    x->umask = req->present & (1u << GPT_CTL_F_UMASK) ? (mode_t)req->umask : 077;
    snprintf(x->state_dir, sizeof(x->state_dir), "%s", d->cfg.state_dir);
    snprintf(x->dir, sizeof(x->dir), "%s", j.snapshot_dir);
    snprintf(x->name, sizeof(x->name), "%s", j.name);
    snprintf(x->out, sizeof(x->out), "%s", req->output);
    handler_export_vocab(x, j.spec_json);
    db_job_done(&j);
    if (req->present & (1u << GPT_CTL_F_SNAPSHOT)) {
        struct db_snapshot sn;
        rc = db_job_snapshot_get(d->db, req->job, req->snapshot, &sn, err);
        if (rc < 0) {
            free(x);
            return rc;
        }
        snprintf(x->path, sizeof(x->path), "%s", sn.path);
    } else {
        (void)db_snapshot_list(d->db, req->job, handler_export_newest, x, NULL);
    }
    x->cl = cl;
    x->id = json_deep_copy(req->id);
    x->item.work = handler_export_work;
    x->item.done = handler_export_done;
    x->item.data = x;
    rc = handler_userwork_submit(d, cl, x->id, &x->item, true, err);
    if (rc < 0) {
        json_decref(x->id);
        free(x);
        return rc;
    }
    control_client_ref(cl);
    cl->busy++;
    return 0;
}

int handler_export_member(struct daemon_ctx *d, struct control_client *cl,
                          const struct gpt_ctl_request *req, struct gpt_err *err)
{
    (void)cl;
    (void)req;
    return gpt_err_set(err, -ENOTSUP, NULL,
                       "node %s is a cluster member: run gptctl export on the coordinator, which "
                       "holds the job's records",
                       d->cfg.node_name);
}
