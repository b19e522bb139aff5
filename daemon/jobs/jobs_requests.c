/*
 * jobs_requests: the queue's requests (see jobs.h): submit, cancel and
 * resume, each checked and made durable before it is answered. Loop
 * thread.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobs.h"
#include "jobs_impl.h"
#include "cluster.h"
#include "fsid.h"
#include "log.h"
#include "resume_plan.h"
#include "statedir.h"

/* Room in the queue for `want` more jobs of `owner`, queued by `who`
 * (the owner, or root for someone else's resume): max_queued_jobs in all,
 * and max_queued_jobs_per_uid of the owner's own unless root queues them.
 * The errors name a sweep's count (want > 1). */
static int jobs_queue_room_n(struct jobs *js, uid_t owner, uid_t who, int64_t want,
                             struct gpt_err *err)
{
    char what[64] = "";
    if (want > 1)
        snprintf(what, sizeof(what), "a sweep of %lld jobs does not fit: ", (long long)want);
    int64_t n = 0;
    int rc = db_job_count(js->db, DB_JOB_QUEUED, &n, err);
    if (rc < 0)
        return rc;
    if (n + js->reserved + want > js->cfg->max_queued_jobs)
        return gpt_err_set(err, -GPT_E_LIMIT, NULL,
                           "%s%lld jobs are queued and %d more being submitted (max_queued_jobs"
                           " = %d)",
                           what, (long long)n, js->reserved, js->cfg->max_queued_jobs);
    if (who == 0)
        return 0;
    rc = db_job_count_owned(js->db, DB_JOB_QUEUED, owner, &n, err);
    if (rc < 0)
        return rc;
    for (int i = 0; i < js->reserved; i++)
        n += js->resv[i] == owner;
    if (n + want > js->cfg->max_queued_jobs_per_uid)
        return gpt_err_set(err, -GPT_E_LIMIT, NULL,
                           "%suid %u already has %lld jobs queued or being submitted"
                           " (max_queued_jobs_per_uid = %d)",
                           what, (unsigned)owner, (long long)n, js->cfg->max_queued_jobs_per_uid);
    return 0;
}

static int jobs_queue_room(struct jobs *js, uid_t owner, uid_t who, struct gpt_err *err)
{
    return jobs_queue_room_n(js, owner, who, 1, err);
}

int jobs_room_for(struct jobs *js, uid_t owner, int64_t n, struct gpt_err *err)
{
    return jobs_queue_room_n(js, owner, owner, n, err);
}

/* A priority above user_max_priority puts a job ahead of other users'
 * jobs: only root may ask for one. */
static int jobs_priority_check(const struct jobs *js, uid_t owner, int64_t priority,
                               struct gpt_err *err)
{
    if (owner == 0 || priority <= js->cfg->user_max_priority)
        return 0;
    return gpt_err_set(err, -EPERM, "priority",
                       "priority %lld is above user_max_priority (%d); only root may submit"
                       " above it",
                       (long long)priority, js->cfg->user_max_priority);
}

int jobs_reserve(struct jobs *js, uid_t owner, int64_t priority, struct gpt_err *err)
{
    int rc = jobs_priority_check(js, owner, priority, err);
    if (rc == 0)
        rc = jobs_queue_room(js, owner, owner, err);
    if (rc < 0)
        return rc;
    if (js->reserved == js->resv_cap) {
        int cap = js->resv_cap ? 2 * js->resv_cap : 8;
        uid_t *v = realloc(js->resv, (size_t)cap * sizeof(*v));
        if (!v)
            return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        js->resv = v;
        js->resv_cap = cap;
    }
    js->resv[js->reserved++] = owner;
    return 0;
}

void jobs_unreserve(struct jobs *js, uid_t owner)
{
    for (int i = 0; i < js->reserved; i++)
        if (js->resv[i] == owner) {
            js->resv[i] = js->resv[--js->reserved];
            return;
        }
    GPT_ASSERT(!"jobs_unreserve: no slot of this owner");
}

bool jobs_is_held(const struct jobs *js, int64_t id)
{
    for (int i = 0; i < js->nheld; i++)
        if (js->held[i].id == id)
            return true;
    return false;
}

void jobs_release_held(struct jobs *js, int64_t id, bool queued)
{
    for (int i = 0; i < js->nheld; i++)
        if (js->held[i].id == id) {
            uid_t owner = js->held[i].owner;
            js->held[i] = js->held[--js->nheld];
            jobs_unreserve(js, owner);
            if (queued)
                jobs_schedule(js);
            return;
        }
    GPT_ASSERT(!"jobs_release_held: job not held");
}

/* Records a checked job: queued, or held (failed with held_msg) when
 * held_msg is not NULL. */
static int jobs_insert(struct jobs *js, const struct gpt_job *job, uid_t owner, int64_t priority,
                       const char *held_msg, int64_t *ret_id, struct gpt_err *err)
{
    int rc;
    if (!fsid_can_act_as(owner)) /* the job's files are opened as `owner` (fsid.h) */
        return gpt_err_set(err, -EPERM, NULL,
                           "gptd runs as uid %u without CAP_SETUID and CAP_SETGID, so it cannot "
                           "open files as uid %u; only uid %u may submit to it",
                           (unsigned)geteuid(), (unsigned)owner, (unsigned)geteuid());
    char *spec = gpt_jobspec_to_json(job);
    if (!spec)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    struct db_job j = {
        .owner_uid = owner,
        .priority = priority,
        .spec_json = spec,
        .created = jobs_now(),
        .max_steps = job->trainer.max_steps,
    };
    snprintf(j.name, sizeof(j.name), "%s", job->name[0] ? job->name : "job");
    int64_t id = 0;
    rc = db_begin(js->db, err);
    if (rc == 0)
        rc = db_job_insert(js->db, &j, &id, err);
    if (rc == 0) {
        /* The snapshot directory names the id, which exists only now. */
        int k;
        if (job->snapshot.dir[0])
            k = snprintf(j.snapshot_dir, sizeof(j.snapshot_dir), "%s", job->snapshot.dir);
        else
            k = snprintf(j.snapshot_dir, sizeof(j.snapshot_dir), "%s/jobs/%lld/snapshots",
                         js->state_dir, (long long)id);
        if (k < 0 || (size_t)k >= sizeof(j.snapshot_dir))
            rc = gpt_err_set(err, -ENAMETOOLONG, "snapshot.dir", "snapshot directory too long");
        else
            rc = db_job_set_snapshot_dir(js->db, id, j.snapshot_dir, err);
        if (rc == 0)
            rc = statedir_snapdir_free(j.snapshot_dir, !job->snapshot.dir[0], owner, err);
    }
    if (rc == 0 && held_msg) /* in the same transaction: never queued without its files */
        rc = db_job_set_state(js->db, id, DB_JOB_FAILED, held_msg, j.created, err);
    if (rc == 0)
        rc = db_commit(js->db, err);
    else
        db_rollback(js->db);
    free(spec);
    if (rc < 0)
        return rc;
    log_info("job %lld (%s) queued by uid %u, priority %lld", (long long)id, j.name,
             (unsigned)owner, (long long)priority);
    jobs_event(js, id, 0, 0, "queued", "submitted by uid %u with priority %lld", (unsigned)owner,
               (long long)priority);
    *ret_id = id;
    return 0;
}

int jobs_submit(struct jobs *js, const struct gpt_job *job, uid_t owner, int64_t priority,
                int64_t *ret_id, struct gpt_err *err)
{
    int rc = jobs_priority_check(js, owner, priority, err);
    if (rc == 0)
        rc = jobs_queue_room(js, owner, owner, err);
    if (rc == 0)
        rc = jobs_insert(js, job, owner, priority, NULL, ret_id, err);
    if (rc == 0)
        jobs_schedule(js);
    return rc;
}

int jobs_submit_held(struct jobs *js, const struct gpt_job *job, uid_t owner, int64_t priority,
                     const char *held_msg, int64_t *ret_id, struct gpt_err *err)
{
    GPT_ASSERT(js->reserved > js->nheld && held_msg);
    if (js->nheld == js->held_cap) {
        int cap = js->held_cap ? 2 * js->held_cap : 8;
        struct jobs_held *v = realloc(js->held, (size_t)cap * sizeof(*v));
        if (!v)
            return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        js->held = v;
        js->held_cap = cap;
    }
    int rc = jobs_insert(js, job, owner, priority, held_msg, ret_id, err);
    if (rc == 0)
        js->held[js->nheld++] = (struct jobs_held){*ret_id, owner};
    return rc;
}

int jobs_cancel(struct jobs *js, int64_t id, uid_t who, struct gpt_err *err)
{
    if (jobs_is_held(js, id)) /* its copy would queue it again */
        return gpt_err_set(err, -EAGAIN, "job",
                           "job %lld is being submitted (its --resume-from snapshot is being"
                           " copied); cancel it once it is queued",
                           (long long)id);
    struct db_job j;
    int rc = db_job_get(js->db, id, &j, err); /* handler_dispatch checked the owner */
    if (rc < 0)
        return rc;
    int state = j.state;
    int64_t step = j.step;
    db_job_done(&j);
    struct jobs_run *run = jobs_find(js, id);
    if (run) {
        /* Durable before it is acknowledged: a restart ends the job cancelled. */
        if ((rc = db_job_request_cancel(js->db, id, who, err)) < 0)
            return rc;
        if (run->stop == JOBS_STOP_NONE) {
            run->stop = JOBS_STOP_CANCEL;
            run->cancelled_by = who;
            jobs_event(js, id, run->run_id, step, "cancel",
                       "cancel requested by uid %u; stopping at the next step", (unsigned)who);
            /* A job with no world yet ends inside this call. */
            cluster_job_stop(js->cluster, id);
        }
        return 0;
    }
    if (state == DB_JOB_QUEUED || state == DB_JOB_WAITING) {
        rc = db_job_set_state(js->db, id, DB_JOB_CANCELLED, NULL, jobs_now(), err);
        if (rc < 0)
            return rc;
        jobs_event(js, id, 0, step, "state", "cancelled by uid %u before it ran", (unsigned)who);
        jobs_fanout_end(js, id);
        return 0;
    }
    return gpt_err_set(err, -EALREADY, "job", "job %lld is already %s", (long long)id,
                       db_job_state_name(state));
}

int jobs_resume(struct jobs *js, int64_t id, int64_t snapshot_id, const json_t *overrides,
                uid_t who, json_t **ret_plan, struct gpt_err *err)
{
    struct db_job j;
    struct resume_plan plan = {0};
    int rc = db_job_get(js->db, id, &j, err); /* handler_dispatch checked the owner */
    if (rc < 0)
        return rc;
    if (jobs_is_held(js, id)) {
        rc = gpt_err_set(err, -EALREADY, "job",
                         "job %lld is being submitted (its --resume-from snapshot is being"
                         " copied); it is queued once the copy is done",
                         (long long)id);
        goto out;
    }
    if (!db_job_state_final(j.state)) {
        rc = gpt_err_set(err, -EALREADY, "job",
                         "job %lld is %s; only a completed, failed"
                         " or cancelled job can be resumed",
                         (long long)id, db_job_state_name(j.state));
        goto out;
    }
    if (j.state == DB_JOB_FAILED &&
        strncmp(j.error, JOBS_RESUME_FROM_ERROR, strlen(JOBS_RESUME_FROM_ERROR)) == 0) {
        /* Its --resume-from copy was never recorded (gptd died during it,
         * or it failed): with no snapshot of its own it would start fresh. */
        int64_t newest = -1;
        if ((rc = db_snapshot_newest_step(js->db, id, &newest, err)) < 0)
            goto out;
        if (newest < 0) {
            rc = gpt_err_set(err, -ENOENT, "snapshot",
                             "job %lld has no snapshot: its --resume-from copy was not finished,"
                             " and a resume would start it from scratch; submit it again with"
                             " --resume-from",
                             (long long)id);
            goto out;
        }
    }
    int64_t from = -1;
    if (snapshot_id > 0) {
        struct db_snapshot s;
        if ((rc = db_job_snapshot_get(js->db, id, snapshot_id, &s, err)) < 0)
            goto out;
        from = s.step;
    }
    if ((rc = resume_plan_make(js->db, &j, from, overrides, &plan, err)) < 0 ||
        (rc = jobs_queue_room(js, j.owner_uid, who, err)) < 0)
        goto out;
    rc = db_begin(js->db, err);
    if (rc == 0 && plan.spec_json)
        rc = db_job_set_spec(js->db, id, plan.spec_json, err);
    if (rc == 0)
        rc = db_job_set_state(js->db, id, DB_JOB_QUEUED, NULL, jobs_now(), err);
    if (rc == 0)
        rc = db_job_set_resume(js->db, id, 1, snapshot_id, err);
    if (rc == 0)
        rc = db_job_set_restarts(js->db, id, 0, err); /* a fresh budget of restarts */
    if (rc == 0)
        rc = db_commit(js->db, err);
    else
        db_rollback(js->db);
    if (rc < 0)
        goto out;
    if (snapshot_id > 0)
        jobs_event(js, id, 0, plan.from_step, "queued",
                   "resume from snapshot %lld requested by uid %u", (long long)snapshot_id,
                   (unsigned)who);
    else
        jobs_event(js, id, 0, plan.from_step, "queued",
                   "resume from the newest snapshot requested by uid %u", (unsigned)who);
    if (plan.changes[0])
        jobs_event(js, id, 0, plan.from_step, "spec", "resume changes %s", plan.changes);
    if (ret_plan)
        *ret_plan = resume_plan_json(&plan);
    jobs_schedule(js);
out:
    resume_plan_done(&plan);
    db_job_done(&j);
    return rc;
}
