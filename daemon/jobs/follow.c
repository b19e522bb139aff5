/*
 * follow: a `logs` stream's start, filter and end, and the local source
 * (see follow.h). No state of its own: each stream's is in its client.
 */
#include "follow.h"

#include <errno.h>
#include <string.h>

#include "log.h"

int follow_filter(struct control_logs *l, const char *type, int64_t step, bool monotonic)
{
    if (!type)
        return FOLLOW_SKIP;
    if (strcmp(type, "end") == 0)
        return FOLLOW_END;
    if (strcmp(type, "metric") == 0) {
        if (step < l->since || (monotonic && step <= l->after))
            return FOLLOW_SKIP;
        if (monotonic)
            l->after = step;
        return FOLLOW_SEND;
    }
    if (strcmp(type, "event") == 0)
        return step < l->since ? FOLLOW_SKIP : FOLLOW_SEND;
    return FOLLOW_SKIP;
}

json_t *follow_end_json(int64_t job, const char *state, const char *error)
{
    json_t *o = json_pack("{s:s, s:I, s:s}", "type", "end", "job", (json_int_t)job, "state",
                          state ? state : "unknown");
    if (o && error && error[0] && json_object_set_new(o, "error", json_string(error)) < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

struct follow_count {
    int64_t job;
    int n;
};

static void follow_count_one(void *ctx, struct control_client *cl)
{
    struct follow_count *fc = ctx;
    if (cl->logs.active && cl->logs.follow && cl->logs.job == fc->job)
        fc->n++;
}

int follow_begin(struct control *ctl, int max_followers, struct control_client *cl,
                 const json_t *id, int64_t job, int64_t since, bool follow, bool remote,
                 struct gpt_err *err)
{
    /* One stream per connection: the dispatcher refused a second one
     * (handler_dispatch, the op's GPT_CTL_OPF_STREAM flag). */
    GPT_ASSERT(!cl->logs.active);
    struct follow_count fc = {job, 0};
    control_foreach(ctl, follow_count_one, &fc);
    if (follow && fc.n >= max_followers)
        return gpt_err_set(err, -GPT_E_LIMIT, NULL,
                           "job %lld already has %d followers (max_followers_per_job)",
                           (long long)job, fc.n);
    memset(&cl->logs, 0, sizeof(cl->logs));
    cl->logs.active = true;
    cl->logs.remote = remote;
    cl->logs.follow = follow;
    cl->logs.replaying = true;
    cl->logs.id = json_deep_copy(id);
    cl->logs.job = job;
    cl->logs.since = since;
    cl->logs.after = -1;
    cl->logs.cursor = -1;
    cl->logs.until = -1;
    return 0;
}

void follow_send(struct control_client *cl, json_t *rec)
{
    if (rec)
        control_reply_ok(cl, cl->logs.id, rec);
}

void follow_detach(struct control_client *cl)
{
    json_decref(cl->logs.id);
    memset(&cl->logs, 0, sizeof(cl->logs));
    control_client_idle_check(cl);
}

void follow_end(struct control_client *cl, json_t *end)
{
    control_reply_ok(cl, cl->logs.id, end);
    follow_detach(cl);
}

/* ---- the local source ---- */

json_t *follow_job_end_json(const struct db_job *j)
{
    return follow_end_json(j->id, db_job_state_name(j->state), j->error);
}

static void follow_send_metric(void *ctx, const struct gpt_metric *m)
{
    follow_send(ctx, gpt_metric_to_json(m));
}

static void follow_send_event(void *ctx, const struct gpt_event *e)
{
    follow_send(ctx, gpt_event_to_json(e));
}

/* Sends the next history chunk, or switches to live/ends when the history
 * is exhausted. The next chunk waits until this one has been written. */
void follow_local_pump(struct db *db, struct control_client *cl)
{
    struct gpt_err err;
    while (cl->logs.active && cl->logs.replaying && !cl->closing) {
        if (cl->writes_pending > 0)
            return; /* called again when the output drained */
        struct db_history_cb cb = {cl, follow_send_metric, follow_send_event};
        int64_t last;
        int more;
        int rc = db_history_page(db, cl->logs.job, cl->logs.since, cl->logs.cursor,
                                 FOLLOW_REPLAY_CHUNK, &cb, &last, &more, &err);
        if (rc < 0) {
            log_error("logs: job %lld: %s", (long long)cl->logs.job, err.msg);
            control_reply_err(cl, cl->logs.id, rc, &err);
            follow_detach(cl);
            return;
        }
        cl->logs.cursor = last;
        if (!more || (cl->logs.until >= 0 && last >= cl->logs.until))
            cl->logs.replaying = false;
    }
    if (!cl->logs.active || cl->closing)
        return;
    struct db_job j;
    if (db_job_get(db, cl->logs.job, &j, &err) < 0) {
        control_reply_err(cl, cl->logs.id, -ENOENT, &err);
        follow_detach(cl);
        return;
    }
    if (!cl->logs.follow || db_job_state_final(j.state))
        follow_end(cl, follow_job_end_json(&j));
    db_job_done(&j);
}

int follow_local_start(struct db *db, struct control *ctl, int max_followers,
                       struct control_client *cl, const json_t *id, int64_t job, int64_t since,
                       bool follow, struct gpt_err *err)
{
    struct db_job j;
    int rc = db_job_get(db, job, &j, err);
    if (rc < 0)
        return rc;
    bool final = db_job_state_final(j.state);
    db_job_done(&j);
    rc = follow_begin(ctl, max_followers, cl, id, job, since, follow, false, err);
    if (rc < 0)
        return rc;
    /* Without follow, a running job's history is read up to its newest
     * metric now: a job that logs faster than the client reads would
     * otherwise keep the replay going for as long as it trains. */
    if (!follow && !final && (rc = db_history_last_pos(db, job, &cl->logs.until, err)) < 0) {
        follow_detach(cl);
        return rc;
    }
    follow_local_pump(db, cl);
    return 0;
}

/* Live fan-out of one record to the job's followers that are past replay. */
struct follow_fanout {
    struct db *db;
    size_t lag_bytes;
    int64_t job;
    const struct mailbox_msg *msg;
    const struct db_job *end; /* set: send the end of the stream instead */
};

/* A follower that reads slower than the job writes: rather than queue the
 * live stream without end (or cut off a client that is reading), it goes
 * back to reading the database from metric `m` on, one chunk per drained
 * output (follow_local_pump), and rejoins the live stream when it has
 * caught up. Whether the metric was sent: false when it is now to come
 * from the database. */
static bool follow_fall_behind(struct db *db, struct control_client *cl, const struct gpt_metric *m)
{
    struct gpt_err err;
    int64_t pos;
    if (db_history_metric_pos(db, cl->logs.job, m->run_id, m->step, &pos, &err) < 0) {
        log_warn("logs: job %lld: %s", (long long)cl->logs.job, err.msg);
        return false;
    }
    log_debug("logs: client pid %d falls behind job %lld at step %lld (%zu bytes queued);"
              " it catches up from the database",
              (int)cl->pid, (long long)cl->logs.job, (long long)m->step, cl->bytes_pending);
    cl->logs.replaying = true;
    cl->logs.cursor = pos - 1;
    return true;
}

static void follow_fanout_one(void *ctx, struct control_client *cl)
{
    struct follow_fanout *f = ctx;
    if (!cl->logs.active || cl->logs.remote || cl->logs.replaying || cl->logs.job != f->job)
        return;
    if (f->end) {
        follow_end(cl, follow_job_end_json(f->end));
    } else if (f->msg->kind == MAILBOX_METRIC) {
        if (follow_filter(&cl->logs, "metric", f->msg->u.m.step, false) != FOLLOW_SEND)
            return;
        if (cl->bytes_pending > f->lag_bytes && follow_fall_behind(f->db, cl, &f->msg->u.m))
            return;
        follow_send_metric(cl, &f->msg->u.m);
    } else if (follow_filter(&cl->logs, "event", f->msg->u.e.step, false) == FOLLOW_SEND) {
        follow_send_event(cl, &f->msg->u.e);
    }
}

void follow_local_record(struct db *db, struct control *ctl, size_t lag_bytes, int64_t job,
                         const struct mailbox_msg *msg)
{
    struct follow_fanout f = {db, lag_bytes, job, msg, NULL};
    control_foreach(ctl, follow_fanout_one, &f);
}

void follow_local_end(struct control *ctl, const struct db_job *j)
{
    struct follow_fanout f = {NULL, 0, j->id, NULL, j};
    control_foreach(ctl, follow_fanout_one, &f);
}
