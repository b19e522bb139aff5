/*
 * init_from: a job's initial weights from a checkpoint (see init_from.h).
 * Owns nothing; worker threads.
 */
#include "init_from.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "export.h"
#include "fsid.h"
#include "model.h"
#include "paths.h"

/* One model key: the job's value against the checkpoint's. */
static int init_from_key(const char *key, int *job_v, int def_v, int ck_v, const char *path,
                         struct gpt_err *err)
{
    if (*job_v != ck_v && *job_v != def_v)
        return gpt_err_set(err, -GPT_E_SPEC, key,
                           "%s is %d but model.init_from (%s) has %d; leave it out or give %d", key,
                           *job_v, path, ck_v, ck_v);
    *job_v = ck_v;
    return 0;
}

int init_from_resolve(struct gpt_job *job, const char *roots, struct gpt_err *err)
{
    const char *path = job->model.init_from;
    struct gpt_model_config ck;
    enum gpt_fmt_kind kind;
    struct gpt_job def;
    int rc;

    if (!path[0])
        return 0;
    if (roots) {
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
            return gpt_err_set(err, -errno, "model.init_from", "cannot open %s: %s", path,
                               strerror(errno));
        rc = paths_check_fd(fd, path, "model.init_from", roots, err);
        close(fd);
        if (rc < 0)
            return rc;
    }
    if ((rc = gpt_fmt_probe(path, &kind, &ck, err)) < 0) {
        snprintf(err->path, sizeof(err->path), "model.init_from");
        return rc;
    }
    gpt_jobspec_defaults(&def);
    struct gpt_model_config *m = &job->model;
    if ((rc = init_from_key("model.n_layer", &m->n_layer, def.model.n_layer, ck.n_layer, path,
                            err)) < 0 ||
        (rc = init_from_key("model.n_head", &m->n_head, def.model.n_head, ck.n_head, path, err)) <
            0 ||
        (rc = init_from_key("model.n_embd", &m->n_embd, def.model.n_embd, ck.n_embd, path, err)) <
            0 ||
        (rc = init_from_key("model.block_size", &m->block_size, def.model.block_size, ck.block_size,
                            path, err)) < 0 ||
        (rc = init_from_key("model.vocab_size", &m->vocab_size, 0, ck.vocab_size, path, err)) < 0)
        return rc;
    return 0;
}

int init_from_submit(struct gpt_job *job, uid_t uid, const char *data_roots,
                     const char *snapshot_roots, const char *state_dir, struct gpt_err *err)
{
    char roots[3 * PATH_MAX + 2];
    struct fsid_user u;
    struct fsid_saved saved;
    if (!job->model.init_from[0])
        return 0;
    snprintf(roots, sizeof(roots), "%s:%s:%s", data_roots, snapshot_roots, state_dir);
    int rc = fsid_user_lookup(uid, &u, err);
    if (rc == 0)
        rc = fsid_enter(&u, &saved, err);
    if (rc < 0)
        return rc;
    rc = init_from_resolve(job, roots, err);
    fsid_leave(&saved);
    return rc;
}

int init_from_weights(void *ctx, const struct gpt_model *m, float *host, struct gpt_err *err)
{
    const struct gpt_job *job = ctx;
    const char *path = job->model.init_from;
    struct gpt_model_config ck;
    enum gpt_fmt_kind kind;
    /* Probed again: the file is read now, and must still be what the
     * model was shaped after. */
    int rc = gpt_fmt_probe(path, &kind, &ck, err);
    if (rc < 0)
        return rc;
    if (ck.n_layer != m->cfg.n_layer || ck.n_head != m->cfg.n_head || ck.n_embd != m->cfg.n_embd ||
        ck.block_size != m->cfg.block_size || ck.vocab_size != m->cfg.vocab_size)
        return gpt_err_set(err, -GPT_E_SPEC, "model.init_from",
                           "%s changed: it now has %d layers, %d heads, %d wide, block %d, "
                           "vocab %d; the model has %d, %d, %d, %d, %d",
                           path, ck.n_layer, ck.n_head, ck.n_embd, ck.block_size, ck.vocab_size,
                           m->cfg.n_layer, m->cfg.n_head, m->cfg.n_embd, m->cfg.block_size,
                           m->cfg.vocab_size);
    rc = gpt_fmt_ops_of(kind)->load(path, m, host, err);
    if (rc < 0 && !err->path[0])
        snprintf(err->path, sizeof(err->path), "model.init_from");
    return rc;
}
