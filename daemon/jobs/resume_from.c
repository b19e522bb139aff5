/*
 * resume_from: a new job continuing another job's snapshot (see
 * resume_from.h). Owns the snapshot's buffers between read and done.
 * Loop thread, except resume_from_read and resume_from_write (work
 * threads), which touch neither the database nor the loop.
 */
#include "resume_from.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fsid.h"
#include "jobs.h"
#include "jobspec_resume.h"
#include "log.h"
#include "model.h"
#include "tok.h"
#include "paths.h"
#include "statedir.h"

/* Keys that may differ besides those a resume may change: the name, the
 * snapshot folder (the new job has its own) and model.init_from (the
 * snapshot's weights replace whatever it would load). */
static bool rf_key_free(const char *key)
{
    return strcmp(key, "name") == 0 || strcmp(key, "snapshot.dir") == 0 ||
           strcmp(key, "model.init_from") == 0 || gpt_jobspec_resume_key_ok(key);
}

#define RF_ONLY                                                                                    \
    "--resume-from continues that job, so only keys a resume may change may differ (length,"       \
    " learning rate and schedule, eval, log and snapshot cadence, node range, transport:"          \
    " gptctl(1))"

/* The first key whose value differs between the source's spec and the new
 * one and may not: -GPT_E_SPEC naming it and both values. Both specs are
 * canonical (gpt_jobspec_to_json): sections of scalars. */
static int rf_spec_compatible(const char *src_spec, const struct gpt_job *job, int64_t src,
                              struct gpt_err *err)
{
    /* The source's stored spec is parsed and written again, so that both
     * sides are this version's canonical form (a key added since it was
     * stored has its default on both). */
    struct gpt_job *sj = malloc(sizeof(*sj));
    json_t *a = NULL, *b = NULL;
    struct gpt_err why;
    int rc = sj ? gpt_jobspec_parse(src_spec, strlen(src_spec), NULL, 0, sj, &why) : -ENOMEM;
    if (rc < 0) {
        rc = rc == -ENOMEM ? gpt_err_set(err, rc, NULL, "out of memory")
                           : gpt_err_set(err, rc, "resume_from", "job %lld's spec: %s: %s",
                                         (long long)src, why.path, why.msg);
        goto out;
    }
    char *ta = gpt_jobspec_to_json(sj), *tb = gpt_jobspec_to_json(job);
    a = ta ? json_loads(ta, 0, NULL) : NULL;
    b = tb ? json_loads(tb, 0, NULL) : NULL;
    free(ta);
    free(tb);
    if (!a || !b) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        goto out;
    }
    const char *sect, *key;
    json_t *sa, *va;
    /* Every key of either side: a key one side lacks counts as differing. */
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        json_t *x = pass ? b : a, *y = pass ? a : b;
        json_object_foreach(x, sect, sa)
        {
            json_t *sb = json_object_get(y, sect);
            if (!json_is_object(sa) || !json_is_object(sb)) {
                if (!json_equal(sa, sb) && !rf_key_free(sect)) {
                    rc = gpt_err_set(err, -GPT_E_SPEC, sect, "differs from job %lld's; " RF_ONLY,
                                     (long long)src);
                    break;
                }
                continue;
            }
            json_object_foreach(sa, key, va)
            {
                json_t *vb = json_object_get(sb, key);
                char path[160];
                snprintf(path, sizeof(path), "%s.%s", sect, key);
                if (json_equal(va, vb) || rf_key_free(path))
                    continue;
                json_t *old = pass ? vb : va, *new = pass ? va : vb;
                char *os = old ? json_dumps(old, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
                char *ns = new ? json_dumps(new, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
                rc = gpt_err_set(err, -GPT_E_SPEC, path,
                                 "is %.60s in job %lld but %.60s here; " RF_ONLY, os ? os : "unset",
                                 (long long)src, ns ? ns : "unset");
                free(os);
                free(ns);
                break;
            }
            if (rc)
                break;
        }
    }
out:
    json_decref(a);
    json_decref(b);
    free(sj);
    return rc;
}

/* The largest vocabulary the job's data may give it when its spec leaves
 * model.vocab_size to the data (as the job would find it). */
static int rf_vocab_max(const struct gpt_job *job)
{
    if (job->data.tokenizer == GPT_TOK_GPT2 || job->data.kind == GPT_DATA_SHARDS)
        return GPT_TOK_VOCAB_MAX; /* GPT-2's 50257, or another data.vocab's */
    return GPT_VOCAB_MAX;
}

/* Whether the header describes the new job's model: the spec's shape, a
 * vocabulary the spec or its data allows, and the parameter count that
 * shape has. Checked before anything is allocated for the file, so that a
 * header planted in the source's folder (which its owner may write)
 * cannot claim more memory than the job was admitted with. */
static int rf_check_model(const struct resume_from *rf, const struct gpt_snapshot_meta *meta,
                          const char *path, struct gpt_err *err)
{
    const struct gpt_model_config *want = &rf->model, *got = &meta->cfg;
    if (got->n_layer != want->n_layer || got->n_head != want->n_head ||
        got->n_embd != want->n_embd || got->block_size != want->block_size)
        return gpt_err_set(err, -GPT_E_MODEL, "snapshot",
                           "%s holds a model of n_layer %d, n_head %d, n_embd %d, block_size %d;"
                           " the job's is %d, %d, %d, %d",
                           path, got->n_layer, got->n_head, got->n_embd, got->block_size,
                           want->n_layer, want->n_head, want->n_embd, want->block_size);
    if (want->vocab_size > 0 ? got->vocab_size != want->vocab_size
                             : got->vocab_size < 1 || got->vocab_size > rf->vocab_max)
        return gpt_err_set(
            err, -GPT_E_MODEL, "snapshot",
            want->vocab_size > 0 ? "%s holds a vocabulary of %d tokens; the job's model.vocab_size"
                                   " is %d"
                                 : "%s holds a vocabulary of %d tokens; the job's data gives it at"
                                   " most %d",
            path, got->vocab_size, want->vocab_size > 0 ? want->vocab_size : rf->vocab_max);
    struct gpt_model layout;
    struct gpt_err why;
    struct gpt_model_config cfg = *want;
    cfg.vocab_size = got->vocab_size;
    if (gpt_model_layout(&layout, &cfg, &why) < 0)
        return gpt_err_set(err, -GPT_E_MODEL, "snapshot", "%s: %s: %s", path, why.path, why.msg);
    if (meta->n_params != (uint64_t)layout.n_params)
        return gpt_err_set(err, -GPT_E_MODEL, "snapshot",
                           "%s claims %llu parameters, but the job's model (n_layer %d, n_head"
                           " %d, n_embd %d, block_size %d, vocab_size %d) has %zu",
                           path, (unsigned long long)meta->n_params, cfg.n_layer, cfg.n_head,
                           cfg.n_embd, cfg.block_size, cfg.vocab_size, layout.n_params);
    return 0;
}

/* Reads and verifies one snapshot file into rf (as the calling thread's
 * file-system identity). A file of another owner is -EPERM. The header is
 * checked before anything is allocated: its sizes against the file's
 * (gpt_snapshot_read_meta) and its model against the job's. */
static int rf_read_one(struct resume_from *rf, const char *path, struct gpt_err *err)
{
    struct gpt_snapshot_meta meta;
    int rc = gpt_snapshot_read_meta(path, &meta, err);
    if (rc < 0)
        return rc;
    if (meta.owner.token != 0 && meta.owner.token != rf->src_token)
        return gpt_err_set(err, -EPERM, "snapshot", "%s was not written by job %lld", path,
                           (long long)rf->src_job);
    if ((rc = rf_check_model(rf, &meta, path, err)) < 0)
        return rc;
    size_t n = (size_t)meta.n_params;
    rf->params = malloc(n * sizeof(float));
    if (meta.has_moments) {
        rf->m = malloc(n * sizeof(float));
        rf->v = malloc(n * sizeof(float));
    }
    if (!rf->params || (meta.has_moments && (!rf->m || !rf->v)))
        return gpt_err_set(err, -ENOMEM, "snapshot", "%s: out of memory for %zu parameters", path,
                           n);
    if ((rc = gpt_snapshot_read_sized(path, meta.n_params, &rf->meta, rf->params,
                                      meta.has_moments ? rf->m : NULL,
                                      meta.has_moments ? rf->v : NULL, err)) < 0)
        return rc;
    if (rf->meta.has_moments != meta.has_moments) /* replaced between the two reads */
        return gpt_err_set(err, -GPT_E_MODEL, "snapshot", "%s changed while it was read", path);
    snprintf(rf->src_path, sizeof(rf->src_path), "%s", path);
    return 0;
}

int resume_from_read(struct resume_from *rf, struct gpt_err *err)
{
    struct fsid_user u;
    struct fsid_saved saved = {0};
    struct gpt_err why;
    /* The identity is this thread's (setfsuid): taken and given back here. */
    int rc = fsid_user_lookup(rf->src_owner, &u, err);
    if (rc < 0 || (rc = fsid_enter(&u, &saved, err)) < 0)
        return rc;
    gpt_err_clear(&why);
    rc = -ENOENT;
    for (size_t i = 0; i < rf->n_tries && rc < 0; i++) {
        resume_from_done(rf);
        rc = rf_read_one(rf, rf->try_path[i], &why);
        if (rc == 0)
            rf->src_snapshot = rf->try_id[i];
        else
            log_info("job %lld: snapshot %lld (%s) not usable for --resume-from: %s",
                     (long long)rf->src_job, (long long)rf->try_id[i], rf->try_path[i], why.msg);
    }
    fsid_leave(&saved);
    if (rc < 0) {
        resume_from_done(rf);
        /* A header that does not describe the job's model says so itself. */
        int code = rc == -ENOMEM || rc == -GPT_E_MODEL ? rc : -ENOENT;
        return gpt_err_set(err, code, "snapshot",
                           rf->by_id ? "job %lld's snapshot cannot be read: %s"
                                     : "job %lld has no snapshot that verifies: %s",
                           (long long)rf->src_job, why.msg);
    }
    int64_t step = rf->meta.step;
    if (rf->max_steps > 0 && step >= rf->max_steps) {
        resume_from_done(rf);
        return gpt_err_set(err, -EALREADY, "trainer.max_steps",
                           "job %lld's snapshot is at step %lld and trainer.max_steps is %lld:"
                           " nothing left to train; give trainer.max_steps=N for some N above %lld",
                           (long long)rf->src_job, (long long)step, (long long)rf->max_steps,
                           (long long)step);
    }
    return 0;
}

struct rf_list {
    struct resume_from *rf;
    const char *node;
};

static void rf_list_add(void *ctx, const struct db_snapshot *s)
{
    struct rf_list *l = ctx;
    struct resume_from *rf = l->rf;
    if (strcmp(s->node, l->node) != 0)
        return; /* another node's copy: not readable here */
    if (rf->n_tries == RESUME_FROM_TRIES)
        return; /* older ones: the newest that verify are enough */
    rf->try_id[rf->n_tries] = s->id;
    snprintf(rf->try_path[rf->n_tries], sizeof(rf->try_path[0]), "%s", s->path);
    rf->n_tries++;
}

/* The snapshots to read: the given one, or the newest ones (newest first). */
static int rf_pick(struct db *db, const char *node, const struct db_job *src, int64_t snapshot_id,
                   struct resume_from *rf, struct gpt_err *err)
{
    struct rf_list l = {.rf = rf, .node = node};
    int rc;
    if (snapshot_id > 0) {
        struct db_snapshot s;
        if ((rc = db_job_snapshot_get(db, src->id, snapshot_id, &s, err)) < 0)
            return gpt_err_set(err, -ENOENT, "snapshot", "job %lld has no snapshot %lld",
                               (long long)src->id, (long long)snapshot_id);
        rf_list_add(&l, &s);
        if (rf->n_tries == 0)
            return gpt_err_set(err, -ENOENT, "snapshot",
                               "snapshot %lld of job %lld was written on node %s, not on this"
                               " one; submit on that node's gptd",
                               (long long)snapshot_id, (long long)src->id, s.node);
        rf->by_id = true;
    } else if ((rc = db_snapshot_list(db, src->id, rf_list_add, &l, err)) < 0) {
        return rc;
    }
    if (rf->n_tries == 0)
        return gpt_err_set(err, -ENOENT, "snapshot", "job %lld has no snapshot (on this node) yet",
                           (long long)src->id);
    return 0;
}

int resume_from_prepare(struct db *db, const char *node, int64_t src, int64_t snapshot_id,
                        uid_t uid, const struct gpt_job *job, struct resume_from *ret,
                        struct gpt_err *err)
{
    struct db_job j;
    memset(ret, 0, sizeof(*ret));
    ret->src_job = src;
    int rc = db_job_get(db, src, &j, err);
    if (rc < 0)
        return gpt_err_set(err, rc, "resume_from", "--resume-from: no job %lld", (long long)src);
    /* The owner rule of init_from and of every op that changes a job. */
    if (uid != 0 && uid != j.owner_uid) {
        rc = gpt_err_set(err, -EPERM, "resume_from",
                         "--resume-from: job %lld belongs to uid %u, not to you (uid %u)",
                         (long long)src, (unsigned)j.owner_uid, (unsigned)uid);
        goto out;
    }
    if ((rc = rf_spec_compatible(j.spec_json, job, src, err)) < 0)
        goto out;
    if ((rc = rf_pick(db, node, &j, snapshot_id, ret, err)) < 0)
        goto out;
    ret->src_owner = j.owner_uid;
    ret->src_token = j.token;
    ret->model = job->model;
    ret->vocab_max = rf_vocab_max(job);
    ret->max_steps = job->trainer.max_steps;
out:
    db_job_done(&j);
    return rc;
}

int resume_from_stage(struct db *db, const char *state_dir, struct resume_from *rf, int64_t id,
                      struct gpt_err *err)
{
    int rc = db_job_get(db, id, &rf->dst, err);
    if (rc < 0) {
        rf->dst.id = id; /* resume_from_commit fails this job, not job 0 */
        return rc;
    }
    free(rf->dst.spec_json); /* not needed on the work thread */
    rf->dst.spec_json = NULL;
    return paths_snapshot_dir_prepare(state_dir, rf->dst.snapshot_dir, rf->dst.owner_uid, err);
}

int resume_from_write(struct resume_from *rf, struct gpt_err *err)
{
    const struct db_job *j = &rf->dst;
    struct gpt_snapshot_meta meta = rf->meta;
    struct fsid_user u;
    struct fsid_saved saved = {0};
    struct stat st;
    meta.owner = (struct gpt_snapshot_owner){j->token, j->id, (uint32_t)j->owner_uid};
    int rc = statedir_snapdir_claim(j, err); /* the folder is this job's */
    if (rc < 0 || (rc = fsid_user_lookup(j->owner_uid, &u, err)) < 0 ||
        (rc = fsid_enter(&u, &saved, err)) < 0)
        return rc;
    rc = gpt_snapshot_write(j->snapshot_dir, &meta, rf->params, rf->m, rf->v, rf->dst_path,
                            sizeof(rf->dst_path), err);
    if (rc == 0)
        rf->dst_size = stat(rf->dst_path, &st) == 0 ? (int64_t)st.st_size : 0;
    fsid_leave(&saved);
    return rc;
}

int resume_from_commit(struct db *db, const char *node, const struct resume_from *rf, int rc,
                       struct gpt_err *err)
{
    int64_t id = rf->dst.id;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double now = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    struct db_snapshot s = {
        .job_id = id, .step = rf->meta.step, .created = now, .size = rf->dst_size};
    snprintf(s.node, sizeof(s.node), "%s", node);
    snprintf(s.path, sizeof(s.path), "%s", rf->dst_path);
    if (rc < 0 || (rc = db_begin(db, err)) < 0)
        goto fail;
    rc = db_snapshot_insert(db, &s, NULL, err);
    if (rc == 0)
        rc = db_job_set_resume(db, id, 1, 0, err);
    if (rc == 0) /* out of its hold (jobs_submit_held) */
        rc = db_job_set_state(db, id, DB_JOB_QUEUED, NULL, now, err);
    if (rc == 0)
        rc = db_job_set_parent(db, id, rf->src_job, err);
    if (rc == 0) {
        struct gpt_event e = {.step = rf->meta.step, .time = now};
        snprintf(e.kind, sizeof(e.kind), "queued");
        int w =
            snprintf(e.message, sizeof(e.message),
                     "continues job %lld from its snapshot %lld (step %lld), copied from ",
                     (long long)rf->src_job, (long long)rf->src_snapshot, (long long)rf->meta.step);
        size_t room = sizeof(e.message) - (size_t)w, len = strlen(rf->src_path);
        memcpy(e.message + w, rf->src_path, len < room ? len + 1 : room); /* cut, not overrun */
        e.message[sizeof(e.message) - 1] = '\0';
        rc = db_event_insert(db, id, &e, err);
    }
    if (rc == 0)
        rc = db_commit(db, err);
    else
        db_rollback(db);
    if (rc < 0)
        goto fail;
    log_info("job %lld continues job %lld from step %lld (%s)", (long long)id,
             (long long)rf->src_job, (long long)rf->meta.step, s.path);
    return 0;
fail:;
    /* Held (failed) without its snapshot: it must not start from scratch. */
    struct gpt_err ignored;
    char msg[DB_ERROR_MAX];
    snprintf(msg, sizeof(msg), JOBS_RESUME_FROM_ERROR "%s", err->msg);
    if (db_job_set_state(db, id, DB_JOB_FAILED, msg, now, &ignored) < 0)
        log_error("job %lld: cannot mark failed: %s", (long long)id, ignored.msg);
    return rc;
}

void resume_from_done(struct resume_from *rf)
{
    if (!rf)
        return;
    free(rf->params);
    free(rf->m);
    free(rf->v);
    rf->params = rf->m = rf->v = NULL;
}
