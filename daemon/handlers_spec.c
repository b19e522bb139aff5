/*
 * handlers_spec: the checks of a submitted spec, shared by `submit`
 * (handlers.c) and `submit --resume-from` (handlers_resume_from.c): both
 * call down to it, so neither handler file calls the other back.
 *
 * Loop thread only.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "init_from.h"
#include "job_limits.h"
#include "jobspec_sweep.h"
#include "paths.h"

int handler_parse_spec(const struct daemon_ctx *d, const json_t *spec, uid_t uid,
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
    if (rc == 0) /* model.init_from gives the model's shape (read as the client) */
        rc = init_from_submit(job, uid, d->cfg.data_roots, d->cfg.snapshot_roots, d->cfg.state_dir,
                              err);
    if (rc == 0) /* memory and data sizes (of files the client may open), before queueing */
        rc = job_limits_check(job, &d->cfg, err);
    if (rc == 0 && job->distributed.nodes_min > 1 && !d->cluster)
        rc = gpt_err_set(err, -GPT_E_SPEC, "distributed.nodes",
                         "this gptd is not in a cluster (no rdzv); nodes must be 1 (got min %d)",
                         job->distributed.nodes_min);
    return rc;
}

int handler_submit_check(struct daemon_ctx *d, const struct gpt_ctl_request *req, uid_t uid,
                         struct gpt_job *job, struct gpt_err *err)
{
    if (req->sweep && !gpt_sweep_id_ok(req->sweep))
        return gpt_err_set(err, -EINVAL, "sweep", "a sweep id is 1-63 of [A-Za-z0-9_.-]");
    if (!req->sweep && (req->present & (1u << GPT_CTL_F_SWEEP_JOBS)))
        return gpt_err_set(err, -EINVAL, "sweep_jobs", "sweep_jobs comes only with a sweep");
    int rc = handler_parse_spec(d, req->spec, uid, job, err);
    if (rc == 0 && !(req->present & (1u << GPT_CTL_F_RESUME_FROM)) &&
        (req->present & (1u << GPT_CTL_F_SNAPSHOT)))
        rc = gpt_err_set(err, -EINVAL, "snapshot",
                         "a submit takes a snapshot only with resume_from");
    return rc;
}
