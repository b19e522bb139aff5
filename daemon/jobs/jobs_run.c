/*
 * jobs_run: the running jobs (see jobs_impl.h): starting a queued job on
 * the cluster, its records (stored once per loop turn), the snapshots its
 * events report, and the followers of its records (the local source of
 * `logs`). The layer of the jobs folder everything else calls down to:
 * jobs.c (life cycle, the cluster's callbacks), jobs_requests.c and
 * jobs_sched.c call it; it calls none of them. Loop thread.
 */
#include "jobs.h"
#include "jobs_impl.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "follow.h"
#include "log.h"
#include "paths.h"
#include "rdzv.h"
#include "statedir.h"

double jobs_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* --- followers: the local source of `logs` (daemon/follow.h) ----------- */

int jobs_follow(struct jobs *js, struct control_client *cl, const json_t *id, int64_t job,
                int64_t since, bool follow, struct gpt_err *err)
{
    return follow_local_start(js->db, js->ctl, js->cfg->max_followers_per_job, cl, id, job, since,
                              follow, err);
}

void jobs_client_drained(struct jobs *js, struct control_client *cl)
{
    if (cl->logs.active && !cl->logs.remote && cl->logs.replaying)
        follow_local_pump(js->db, cl);
}

static void jobs_fanout_msg(struct jobs *js, int64_t job, const struct mailbox_msg *msg)
{
    /* Half the output bound: a follower that reads catches up from the
     * database before its queue could reach the bound. */
    follow_local_record(js->db, js->ctl, (size_t)js->cfg->client_output_max_bytes / 2, job, msg);
    /* The members' followers get it through the cluster's feed. The record
     * is in the database already, so a member that read the history up to
     * cluster_feed_seq() misses nothing and gets nothing twice. */
    if (js->cluster)
        cluster_feed_push(js->cluster, job,
                          msg->kind == MAILBOX_METRIC ? gpt_metric_to_json(&msg->u.m)
                                                      : gpt_event_to_json(&msg->u.e));
}

/* Ends the streams of a job that reached a final state. */
void jobs_fanout_end(struct jobs *js, int64_t job)
{
    struct db_job j;
    struct gpt_err err;
    if (db_job_get(js->db, job, &j, &err) < 0)
        return;
    if (db_job_state_final(j.state)) {
        follow_local_end(js->ctl, &j);
        if (js->cluster)
            cluster_feed_push(js->cluster, job, follow_job_end_json(&j));
    }
    db_job_done(&j);
}

void jobs_event(struct jobs *js, int64_t job, int64_t run_id, int64_t step, const char *kind,
                const char *fmt, ...)
{
    struct mailbox_msg msg = {.kind = MAILBOX_EVENT};
    struct gpt_event *e = &msg.u.e;
    snprintf(e->kind, sizeof(e->kind), "%s", kind);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    e->step = step;
    e->run_id = run_id;
    e->time = jobs_now();
    struct gpt_err err;
    if (db_event_insert(js->db, job, e, &err) < 0)
        log_error("job %lld: cannot record event: %s", (long long)job, err.msg);
    jobs_fanout_msg(js, job, &msg);
}

/* --- snapshots seen in events ------------------------------------------ */

/* The trainer reports "step N written to PATH in T ms (B bytes)"; the path
 * and size go into the snapshots table. */
static void jobs_record_snapshot(struct jobs *js, int64_t job, const struct gpt_event *e,
                                 const char *node)
{
    const char *p = strstr(e->message, " written to ");
    if (!p)
        return;
    p += strlen(" written to ");
    const char *end = NULL;
    for (const char *q = strstr(p, " in "); q; q = strstr(q + 1, " in "))
        end = q;
    size_t n = end ? (size_t)(end - p) : strlen(p);
    struct db_snapshot s = {
        .job_id = job, .run_id = e->run_id, .step = e->step, .created = e->time};
    if (n >= sizeof(s.path))
        return;
    memcpy(s.path, p, n);
    s.path[n] = '\0';
    snprintf(s.node, sizeof(s.node), "%s", node && node[0] ? node : js->cfg->node_name);
    /* The size as the writer reported it ("... in T ms (N bytes)"); else,
     * for a file on this node, from stat. */
    long long bytes = -1;
    const char *paren = end ? strstr(end, " (") : NULL;
    struct stat st;
    if (paren && sscanf(paren, " (%lld bytes)", &bytes) == 1 && bytes >= 0)
        s.size = (int64_t)bytes;
    else if ((!node || !node[0] || strcmp(node, js->cfg->node_name) == 0) && stat(s.path, &st) == 0)
        s.size = (int64_t)st.st_size;
    struct gpt_err err;
    if (db_snapshot_insert(js->db, &s, NULL, &err) < 0)
        log_error("job %lld: cannot record snapshot: %s", (long long)job, err.msg);
}

/* --- the running jobs --------------------------------------------------- */

struct jobs_run *jobs_find(const struct jobs *js, int64_t job)
{
    for (struct jobs_run *r = js->runs; r; r = r->next)
        if (r->job_id == job)
            return r;
    return NULL;
}

/* Stores a run's pending records: one transaction for all of them, then
 * the followers. */
void jobs_store_records(struct jobs *js, struct jobs_run *run)
{
    struct mailbox_msg *list = run->pend;
    run->pend = run->pend_tail = NULL;
    if (!list)
        return;
    int64_t job = run->job_id;

    struct gpt_err err;
    int rc = db_begin(js->db, &err);
    for (struct mailbox_msg *m = list; rc == 0 && m; m = m->next) {
        if (m->kind == MAILBOX_METRIC) {
            if (m->u.m.step > run->last_step)
                run->last_step = m->u.m.step;
            if (m->u.m.n_rank_step_ms > 0) {
                run->n_rank_ms = m->u.m.n_rank_step_ms;
                memcpy(run->rank_ms, m->u.m.rank_step_ms, sizeof(run->rank_ms));
            }
            rc = db_metric_insert(js->db, job, &m->u.m, &err);
        } else if (m->kind == MAILBOX_EVENT) {
            rc = db_event_insert(js->db, job, &m->u.e, &err);
            if (rc == 0 && strcmp(m->u.e.kind, "snapshot") == 0)
                jobs_record_snapshot(js, job, &m->u.e, m->node);
        }
    }
    if (rc == 0)
        rc = db_commit(js->db, &err);
    else
        db_rollback(js->db);
    if (rc < 0)
        log_error("job %lld: cannot store metrics: %s", (long long)job, err.msg);

    /* Only metrics and events come here: the cluster reports a job's end
     * (jobs_cluster_finished). */
    for (struct mailbox_msg *m = list; m; m = m->next)
        jobs_fanout_msg(js, job, m);
    mailbox_free_list(list);
}

static void jobs_on_flush(uv_timer_t *t)
{
    struct jobs *js = t->data;
    for (struct jobs_run *r = js->runs; r; r = r->next)
        jobs_store_records(js, r);
}

/* Queues a record of a running job (taken) for jobs_on_flush. */
void jobs_record_add(struct jobs *js, struct jobs_run *run, struct mailbox_msg *msg)
{
    msg->next = NULL;
    if (run->pend_tail)
        run->pend_tail->next = msg;
    else
        run->pend = msg;
    run->pend_tail = msg;
    if (!uv_is_active((uv_handle_t *)&js->flush))
        uv_timer_start(&js->flush, jobs_on_flush, 0, 0);
}

int jobs_rank_step_ms(const struct jobs *js, int64_t job, float *out)
{
    const struct jobs_run *r = js ? jobs_find(js, job) : NULL;
    if (!r)
        return 0;
    memcpy(out, r->rank_ms, sizeof(r->rank_ms));
    return r->n_rank_ms;
}

/* Marks a job failed before it ran (bad stored spec, workers not started). */
static void jobs_fail_start(struct jobs *js, int64_t id, const char *why)
{
    struct gpt_err err;
    log_error("job %lld: cannot start: %s", (long long)id, why);
    if (db_job_set_state(js->db, id, DB_JOB_FAILED, why, jobs_now(), &err) < 0)
        log_error("job %lld: %s", (long long)id, err.msg);
    jobs_event(js, id, 0, 0, "error", "cannot start: %s", why);
    jobs_fanout_end(js, id);
}

/* Takes a run off the running ones. */
void jobs_unlink(struct jobs *js, struct jobs_run *run)
{
    for (struct jobs_run **p = &js->runs; *p; p = &(*p)->next) {
        if (*p == run) {
            *p = run->next;
            js->nruns--;
            return;
        }
    }
}

/* db_snapshot_list's callback: the nodes that recorded step `step`. */
struct jobs_holders {
    int64_t step;
    char text[1024]; /* one node id a line */
    size_t len;
};

static void jobs_holder(void *ctx, const struct db_snapshot *s)
{
    struct jobs_holders *h = ctx;
    if (s->step != h->step)
        return;
    int n = snprintf(h->text + h->len, sizeof(h->text) - h->len, "%s\n", s->node);
    if (n > 0 && (size_t)n < sizeof(h->text) - h->len)
        h->len += (size_t)n; /* a list too long for the buffer just ends */
    else
        h->text[h->len] = '\0';
}

/* A job on a cluster: the coordinator's rendezvous forms the worlds; a run
 * row is written for each world (jobs_cluster_world). */
static int jobs_start_elastic(struct jobs *js, struct jobs_run *run, const struct db_job *j,
                              const struct db_snapshot *chosen, struct gpt_err *err)
{
    const struct gpt_dist_spec *d = &run->spec.distributed;
    double now = jobs_now();
    int rc = db_begin(js->db, err);
    if (rc == 0)
        rc = db_job_set_state(js->db, j->id, DB_JOB_RUNNING, NULL, now, err);
    if (rc == 0)
        rc = db_job_set_resume(js->db, j->id, 0, 0, err);
    if (rc == 0)
        rc = db_commit(js->db, err);
    else
        db_rollback(js->db);
    if (rc < 0)
        return rc;
    run->last_step = j->step;
    /* A chosen snapshot travels as its step: each node keeps its own copy
     * under its own directory, so the path recorded here means nothing on
     * the others. */
    char what[128] = "", how[192] = "";
    if (chosen) {
        snprintf(what, sizeof(what), "snapshot %lld (step %lld)", (long long)chosen->id,
                 (long long)chosen->step);
        snprintf(how, sizeof(how), " (resume from %s)", what);
    } else if (j->resume) {
        snprintf(how, sizeof(how), " (resume from the newest snapshot)");
    }
    /* Listed before its first round opens: that round's event is its. */
    run->next = NULL;
    struct jobs_run **tail = &js->runs;
    while (*tail)
        tail = &(*tail)->next;
    *tail = run;
    js->nruns++;
    /* The nodes that recorded the snapshot it resumes from are placed
     * first (free ones): each node resumes from its own copy. */
    int64_t newest = -1;
    if (!chosen && j->resume)
        (void)db_snapshot_newest_step(js->db, j->id, &newest, NULL);
    struct jobs_holders holders = {.step = chosen ? chosen->step : newest};
    if (holders.step >= 0)
        (void)db_snapshot_list(js->db, j->id, jobs_holder, &holders, NULL);
    rc = cluster_job_resume(js->cluster, j->id, j->owner_uid, j->token, j->spec_json, d->nodes_min,
                            d->nodes_max, d->max_restarts, j->restarts, d->wait_timeout_s,
                            chosen ? chosen->step : -1, chosen ? what : NULL, newest,
                            holders.len ? holders.text : NULL, err);
    if (rc < 0) {
        jobs_unlink(js, run);
        return rc;
    }
    log_info("job %lld (%s): running on the cluster, %d to %d node%s%s", (long long)j->id, j->name,
             d->nodes_min, d->nodes_max, d->nodes_max == 1 ? "" : "s", how);
    jobs_event(js, j->id, 0, j->step, "run", "job started on the cluster: %d to %d node%s%s",
               d->nodes_min, d->nodes_max, d->nodes_max == 1 ? "" : "s", how);
    return 0;
}

int jobs_start(struct jobs *js, int64_t id, bool alone_short, struct gpt_err *ret_err)
{
    struct gpt_err err;
    gpt_err_clear(&err);
    struct db_job j;
    int rc = db_job_get(js->db, id, &j, &err);
    if (rc < 0) {
        log_error("job %lld: %s", (long long)id, err.msg);
        *ret_err = err;
        return rc;
    }
    struct jobs_run *run = calloc(1, sizeof(*run));
    struct db_snapshot chosen;
    memset(&chosen, 0, sizeof(chosen));
    if (!run) {
        rc = gpt_err_set(&err, -ENOMEM, NULL, "out of memory");
        goto fail;
    }
    run->job_id = id;
    rc = gpt_jobspec_parse(j.spec_json, strlen(j.spec_json), NULL, 0, &run->spec, &err);
    if (rc < 0)
        goto fail;
    /* Beside other jobs it needs its `min` free nodes; alone (when
     * alone_short) it takes what there is and waits for more
     * (distributed.wait_timeout_s). Checked before anything is prepared: a
     * job that does not fit stays queued, unchanged. */
    if (js->nruns >= RDZV_JOBS_MAX)
        rc = gpt_err_set(ret_err, -EAGAIN, NULL, "%d jobs run (the most at once)", js->nruns);
    else
        rc = cluster_job_fits(js->cluster, run->spec.distributed.nodes_min, alone_short, ret_err);
    if (rc < 0) {
        free(run);
        db_job_done(&j);
        return rc;
    }
    if (j.resume_snapshot > 0) {
        rc = db_snapshot_get(js->db, j.resume_snapshot, &chosen, &err);
        if (rc < 0)
            goto fail;
    }
    if ((rc = paths_snapshot_dir_prepare(js->state_dir, j.snapshot_dir, j.owner_uid, &err)) < 0 ||
        (rc = statedir_snapdir_claim(&j, &err)) < 0) /* the folder is this job's */
        goto fail;
    rc = jobs_start_elastic(js, run, &j, j.resume_snapshot > 0 ? &chosen : NULL, &err);
    if (rc < 0)
        goto fail;
    db_job_done(&j);
    return 0;
fail:
    jobs_fail_start(js, id, err.msg[0] ? err.msg : gpt_strerror(rc));
    *ret_err = err;
    free(run);
    db_job_done(&j);
    return rc;
}
