/*
 * cluster_inbox: the messages between members and the coordinator
 * (proto/cluster_msg.h). The member's side: an outbox of JSON lines
 * appended to one store key (RDZV_KEY_INBOX), and its requests (forwarded
 * submits and reads) that wait for an answer at their reply key. The
 * coordinator's side: the inbox drain (the whole key taken in-process,
 * store_server_take, so no append is lost) that feeds heartbeats, joins and leaves to the round
 * protocol, global rank 0's records to the job queue, and answers the
 * requests. Owns struct cluster's `ob` (see cluster_impl.h).
 *
 * Loop thread only.
 */
#include "cluster_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "monotime.h"
#include "store_server.h"

#define CLUSTER_OUTBOX_MAX       (4u << 20) /* queued bytes to the coordinator */
#define CLUSTER_SUBMIT_TIMEOUT_S 15.0
#define CLUSTER_READ_TIMEOUT_S   5.0 /* a read proxied to the coordinator */
#define CLUSTER_SUBMITS_MAX      64

static void cluster_coord_metric(struct cluster *c, int64_t job, const struct gpt_metric *m);
static void cluster_coord_event_in(struct cluster *c, int64_t job, const struct gpt_event *e,
                                   const char *node);

/* ---- the member's outbox ---- */

static void cluster_on_append(void *arg, const struct store_reply *r)
{
    struct cluster *c = arg;
    c->ob.append_inflight = false;
    c->ob.answered = c->ob.sending;
    if (c->ob.hb_on_answer) {
        c->ob.hb_on_answer = false;
        cluster_heartbeat_soon(c);
    }
    if (c->leave_state == 2)
        c->leave_deadline = 0; /* the leave reached the store (or never will) */
    if (!cluster_reply_ok(c, r))
        return;
    if (r->status < 0)
        log_warn("cluster: message to the coordinator dropped: %s", gpt_strerror(r->status));
}

void cluster_flush(struct cluster *c)
{
    if (c->nc_state != CONN_READY || c->ob.append_inflight || c->ob.len == 0)
        return;
    int rc = store_client_async_append(c->nc, RDZV_KEY_INBOX, c->ob.buf, c->ob.len,
                                       cluster_on_append, c);
    if (rc < 0) {
        /* -EPIPE: the connection failed while nothing was pending. */
        if (rc == -EPIPE)
            cluster_conn_lost(c, "connection closed");
        return;
    }
    c->ob.append_inflight = true;
    c->ob.sending = c->ob.pushed;
    c->inflight++;
    c->ob.len = 0;
    if (c->leave_state == 1)
        c->leave_state = 2;
}

/* Appends one encoded line (taken) to the outbox. */
static void cluster_outbox_push(struct cluster *c, char *line, size_t n)
{
    if (c->ob.len + n + 1 > CLUSTER_OUTBOX_MAX) {
        free(line);
        return; /* the coordinator is unreachable: stale news is worthless */
    }
    if (c->ob.len + n + 1 > c->ob.cap) {
        size_t cap = c->ob.cap ? c->ob.cap : 4096;
        while (cap < c->ob.len + n + 1)
            cap *= 2;
        char *p = realloc(c->ob.buf, cap);
        if (!p) {
            free(line);
            return;
        }
        c->ob.buf = p;
        c->ob.cap = cap;
    }
    memcpy(c->ob.buf + c->ob.len, line, n);
    c->ob.buf[c->ob.len + n] = '\n';
    c->ob.len += n + 1;
    c->ob.pushed++;
    free(line);
    cluster_flush(c);
}

uint64_t cluster_outbox_mark(const struct cluster *c)
{
    return c->ob.pushed;
}

bool cluster_outbox_delivered(struct cluster *c, uint64_t mark)
{
    if (c->ob.answered >= mark)
        return true;
    c->ob.hb_on_answer = true;
    return false;
}

void cluster_send(struct cluster *c, const struct cluster_msg *msg)
{
    char *line = NULL;
    size_t n = 0;
    struct gpt_err err;
    if (cluster_msg_encode(msg, &line, &n, &err) < 0) {
        log_warn("cluster: a %s message not sent: %s", cluster_msg_type_name(msg->type), err.msg);
        return;
    }
    cluster_outbox_push(c, line, n);
}

void cluster_send_metric(struct cluster *c, int64_t job, const struct gpt_metric *m)
{
    if (c->coord) {
        cluster_coord_metric(c, job, m);
        return;
    }
    struct cluster_msg msg;
    cluster_start_msg(c, &msg, CLUSTER_MSG_METRIC);
    msg.job = job;
    msg.metric = *m;
    cluster_send(c, &msg);
}

void cluster_send_event(struct cluster *c, int64_t job, const struct gpt_event *e)
{
    if (c->coord) {
        cluster_coord_event_in(c, job, e, c->node_id);
        return;
    }
    struct cluster_msg msg;
    cluster_start_msg(c, &msg, CLUSTER_MSG_EVENT);
    msg.job = job;
    msg.event = *e;
    cluster_send(c, &msg);
}

void cluster_send_sample(struct cluster *c, int64_t job, const json_t *sample)
{
    if (c->coord)
        return;
    struct cluster_msg msg;
    cluster_start_msg(c, &msg, CLUSTER_MSG_SAMPLE);
    msg.job = job;
    msg.sample = (json_t *)sample; /* borrowed for the encode */
    cluster_send(c, &msg);
}

/* ---- the member's requests ---- */

static void cluster_submit_end(struct cluster *c, struct cluster_submit *s, int rc, int64_t job,
                               const json_t *reply, const struct gpt_err *err)
{
    for (struct cluster_submit **pp = &c->ob.submits; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    c->ob.n_submits--;
    if (s->rcb)
        s->rcb(s->arg, rc, reply, err);
    else
        s->cb(s->arg, rc, job, err);
    free(s);
}

struct cluster_submit_poll {
    struct cluster *c;
    int64_t req;
};

static void cluster_on_submit_reply(void *arg, const struct store_reply *r)
{
    struct cluster_submit_poll *p = arg;
    struct cluster *c = p->c;
    int64_t req = p->req;
    free(p);
    if (!cluster_reply_ok(c, r))
        return;
    struct cluster_submit *s = c->ob.submits;
    while (s && s->req != req)
        s = s->next;
    if (!s)
        return;
    s->inflight = false;
    if (r->status < 0)
        return; /* not answered yet */
    struct cluster_msg_reply o;
    struct gpt_err err;
    gpt_err_clear(&err);
    int rc = cluster_msg_reply_decode(r->data, r->len, &o, &err);
    if (rc < 0) {
        rc = gpt_err_set(&err, -EPROTO, err.path, "the coordinator's answer is malformed: %s",
                         err.msg);
    } else if (o.ok) {
        if (s->rcb && !o.result)
            rc = gpt_err_set(&err, -EPROTO, NULL, "the coordinator's answer has no result");
    } else {
        rc = o.code;
        gpt_err_set(&err, rc, o.path, "%s",
                    o.message[0] ? o.message : "the coordinator refused the job");
    }
    (void)store_client_async_delete(c->nc, s->key, cluster_on_publish, c);
    cluster_submit_end(c, s, rc, o.job, o.result, &err);
    cluster_msg_reply_done(&o);
}

void cluster_poll_submits(struct cluster *c, double now)
{
    struct cluster_submit *s = c->ob.submits;
    while (s) {
        struct cluster_submit *next = s->next;
        if (now > s->deadline) {
            struct gpt_err err;
            gpt_err_set(&err, -ETIMEDOUT, NULL, "the coordinator did not answer within %.0f s",
                        s->rcb ? CLUSTER_READ_TIMEOUT_S : CLUSTER_SUBMIT_TIMEOUT_S);
            cluster_submit_end(c, s, -ETIMEDOUT, 0, NULL, &err);
        } else if (!s->inflight && c->nc_state == CONN_READY) {
            struct cluster_submit_poll *p = malloc(sizeof(*p));
            if (p) {
                p->c = c;
                p->req = s->req;
                if (store_client_async_get(c->nc, s->key, cluster_on_submit_reply, p) == 0) {
                    s->inflight = true;
                    c->inflight++;
                } else {
                    free(p);
                }
            }
        }
        s = next;
    }
}

/* Queues request `m` (borrowed; its "req" is set here) whose answer the
 * coordinator publishes at its reply key (cluster_msg_reply_key). */
static int cluster_request(struct cluster *c, struct cluster_msg *m, double timeout_s,
                           void (*cb)(void *arg, int rc, int64_t job, const struct gpt_err *err),
                           cluster_reply_fn rcb, void *arg, struct gpt_err *err)
{
    if (c->refused && c->nc_state != CONN_READY)
        return gpt_err_set(err, -GPT_E_AUTH, NULL, "this node is not in the cluster: %s",
                           c->refused_msg);
    if (c->hb_refused)
        return gpt_err_set(err, -EEXIST, NULL, "this node is not in the cluster: %s",
                           c->refused_msg);
    if (c->ob.n_submits >= CLUSTER_SUBMITS_MAX)
        return gpt_err_set(err, -GPT_E_LIMIT, NULL, "too many requests to the coordinator");
    struct cluster_submit *s = calloc(1, sizeof(*s));
    if (!s)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    s->req = ++c->ob.next_req;
    s->deadline = monotime_s() + timeout_s;
    s->cb = cb;
    s->rcb = rcb;
    s->arg = arg;
    m->req = s->req;
    if (cluster_msg_reply_key(s->key, sizeof(s->key), c->node_id, c->inc, s->req) < 0) {
        free(s);
        return gpt_err_set(err, -EINVAL, NULL, "node id \"%s\" cannot name a reply key",
                           c->node_id);
    }
    char *line = NULL;
    size_t n = 0;
    int rc = cluster_msg_encode(m, &line, &n, err);
    if (rc < 0) {
        free(s);
        return rc;
    }
    s->next = c->ob.submits;
    c->ob.submits = s;
    c->ob.n_submits++;
    cluster_outbox_push(c, line, n);
    return 0;
}

int cluster_submit(struct cluster *c, const json_t *spec, uid_t uid, int64_t priority,
                   void (*cb)(void *arg, int rc, int64_t job, const struct gpt_err *err), void *arg,
                   struct gpt_err *err)
{
    struct cluster_msg m;
    cluster_start_msg(c, &m, CLUSTER_MSG_SUBMIT);
    m.uid = uid;
    m.priority = priority;
    m.spec = (json_t *)spec;
    m.present |= CLUSTER_MSG_BIT(PRIO);
    return cluster_request(c, &m, CLUSTER_SUBMIT_TIMEOUT_S, cb, NULL, arg, err);
}

int cluster_read_op(struct cluster *c, int op, const struct cluster_msg_read_args *args,
                    cluster_reply_fn cb, void *arg, struct gpt_err *err)
{
    struct cluster_msg m;
    cluster_start_msg(c, &m, CLUSTER_MSG_READ);
    m.op = op;
    if (args) {
        m.args = *args;
        m.present |= CLUSTER_MSG_BIT(ARGS);
    }
    return cluster_request(c, &m, CLUSTER_READ_TIMEOUT_S, NULL, cb, arg, err);
}

void cluster_requests_disconnected(struct cluster *c)
{
    for (struct cluster_submit *s = c->ob.submits; s; s = s->next)
        s->inflight = false;
}

void cluster_requests_cancel(struct cluster *c)
{
    while (c->ob.submits) {
        struct gpt_err err;
        gpt_err_set(&err, -ECANCELED, NULL, "gptd is stopping");
        cluster_submit_end(c, c->ob.submits, -ECANCELED, 0, NULL, &err);
    }
}

/* ---- the coordinator's inbox ---- */

/* Publishes the answer to request `m` at the asking node's reply key: rc
 * 0 with `job` or `result` (taken), or rc < 0 with err. */
static void cluster_answer(struct cluster *c, const struct cluster_msg *m, int rc, int64_t job,
                           json_t *result, const struct gpt_err *err)
{
    struct cluster_msg_reply r = {.ok = rc == 0, .job = job, .result = result, .code = rc};
    if (rc < 0) {
        snprintf(r.message, sizeof(r.message), "%s", err->msg);
        snprintf(r.path, sizeof(r.path), "%s", err->path);
    }
    char key[CLUSTER_MSG_KEY_MAX];
    char *text = NULL;
    size_t n = 0;
    struct gpt_err e;
    if (cluster_msg_reply_key(key, sizeof(key), m->node, m->inc, m->req) == 0 &&
        cluster_msg_reply_encode(&r, &text, &n, &e) == 0)
        cluster_publish(c, key, text);
    free(text);
    json_decref(result);
}

/* A submit forwarded by a member. */
static void cluster_answer_submit(struct cluster *c, const struct cluster_msg *m)
{
    struct gpt_err err;
    gpt_err_clear(&err);
    int64_t id = 0;
    int rc;
    char *text = json_dumps(m->spec, JSON_COMPACT);
    if (!text)
        rc = gpt_err_set(&err, -ENOMEM, NULL, "out of memory");
    else if (!c->jh.submit)
        rc = gpt_err_set(&err, -EAGAIN, NULL, "the coordinator takes no jobs yet");
    else
        rc = c->jh.submit(c->jh.ctx, text, (uid_t)m->uid, m->priority, &id, &err);
    free(text);
    cluster_answer(c, m, rc, id, NULL, &err);
}

/* A read forwarded by a member: the same result its own socket would give. */
static void cluster_answer_read(struct cluster *c, const struct cluster_msg *m)
{
    struct gpt_err err;
    gpt_err_clear(&err);
    json_t *result = NULL;
    int rc;
    if (!c->read_fn)
        rc = gpt_err_set(&err, -EAGAIN, NULL, "the coordinator answers no reads yet");
    else
        rc = c->read_fn(c->read_ctx, m, &result, &err);
    cluster_answer(c, m, rc, 0, rc == 0 ? result : NULL, &err);
}

/* Global rank 0's records, from the inbox or, on the coordinator's own
 * node, directly (so they reach the database as soon as on a single gptd:
 * a snapshot on disk is never newer than the metrics recorded before it by
 * more than a loop iteration). */
static void cluster_coord_metric(struct cluster *c, int64_t job, const struct gpt_metric *m)
{
    if (!rdzv_coord_job_runs(c->coord, job))
        return;
    rdzv_coord_job_progress(c->coord, job, m->step, -1);
    if (c->jh.metric)
        c->jh.metric(c->jh.ctx, job, m);
}

static void cluster_coord_event_in(struct cluster *c, int64_t job, const struct gpt_event *e,
                                   const char *node)
{
    if (!rdzv_coord_job_runs(c->coord, job))
        return;
    if (strcmp(e->kind, "snapshot") == 0)
        rdzv_coord_job_progress(c->coord, job, e->step, e->step);
    if (c->jh.event)
        c->jh.event(c->jh.ctx, job, e, node);
    if (strcmp(e->kind, "done") == 0)
        rdzv_coord_job_final(c->coord, job);
}

static void cluster_coord_line(struct cluster *c, double now, const char *line, size_t len)
{
    struct cluster_msg m;
    struct gpt_err err;
    if (cluster_msg_decode(line, len, &m, &err) < 0) {
        log_debug("cluster: inbox message dropped: %s", err.msg);
        goto out;
    }
    switch (m.type) {
    case CLUSTER_MSG_HB:
    case CLUSTER_MSG_JOIN:
    case CLUSTER_MSG_LEAVE:
        rdzv_coord_message(c->coord, now, &m);
        break;
    case CLUSTER_MSG_METRIC:
    case CLUSTER_MSG_EVENT: {
        /* The store let the line in in its sender's name; whether that
         * node still holds the job's rank 0 is decided now, at use (a
         * job that does not run here, -ESRCH, takes no record anyway). */
        char why[192];
        int rc = cluster_acl_record(c, m.node, m.job, why, sizeof(why));
        if (rc == -EACCES)
            cluster_acl_record_refused(c, &m, why);
        else if (rc == 0 && m.type == CLUSTER_MSG_METRIC)
            cluster_coord_metric(c, m.job, &m.metric);
        else if (rc == 0)
            cluster_coord_event_in(c, m.job, &m.event, m.node);
        break;
    }
    case CLUSTER_MSG_SUBMIT:
        cluster_answer_submit(c, &m);
        break;
    case CLUSTER_MSG_READ:
        cluster_answer_read(c, &m);
        break;
    case CLUSTER_MSG_SAMPLE:
        if (c->jh.sample)
            c->jh.sample(c->jh.ctx, m.job, m.sample, m.node);
        break;
    }
out:
    cluster_msg_done(&m);
}

/* Takes the whole inbox in-process (the coordinator owns the store) and
 * hands its lines on. It runs before the heartbeat table is drained
 * (cluster_coord_duty), and a member reports its workers' exit only once
 * the APPEND carrying their last records was answered (agent.c): so the
 * round protocol hears of an exit only after the records before it. */
void cluster_inbox_drain(struct cluster *c, double now)
{
    void *val = NULL;
    size_t len = 0;
    int rc = store_server_take(c->server, RDZV_KEY_INBOX, &val, &len);
    if (rc < 0) {
        log_warn("cluster: cannot read the inbox: %s", gpt_strerror(rc));
        return; /* the lines stay in the store: taken at the next tick */
    }
    const char *text = val;
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\n') {
            if (i > start)
                cluster_coord_line(c, now, text + start, i - start);
            start = i + 1;
        }
    }
    free(val);
    rdzv_coord_tick(c->coord, now);
}

void cluster_inbox_done(struct cluster *c)
{
    free(c->ob.buf);
    c->ob.buf = NULL;
}
