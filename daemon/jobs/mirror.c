/*
 * mirror: a member's reads and `logs` streams of the coordinator's jobs
 * (see mirror.h). Owns the ring of the newest feed records; the streams'
 * state lives in each client's `logs` (remote = true). Loop thread only.
 */
#include "mirror.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "follow.h"
#include "log.h"

struct mirror_rec {
    uint64_t seq;
    int64_t job;
    json_t *rec;
};

struct mirror {
    struct cluster *cl;
    struct control *ctl;
    const struct config *cfg;
    struct mirror_rec ring[MIRROR_RING];
    size_t head, n; /* oldest at head */
};

/* A request in flight for one client (the client is referenced). */
struct mirror_req {
    struct mirror *m;
    struct control_client *cl;
    json_t *id;
};

static struct mirror_req *mirror_req_new(struct mirror *m, struct control_client *cl,
                                         const json_t *id)
{
    struct mirror_req *q = calloc(1, sizeof(*q));
    if (!q)
        return NULL;
    q->m = m;
    q->cl = cl;
    q->id = json_deep_copy(id);
    control_client_ref(cl);
    return q;
}

static void mirror_req_free(struct mirror_req *q)
{
    json_decref(q->id);
    control_client_unref(q->cl);
    free(q);
}

/* ---- reads ---- */

static void mirror_on_read(void *arg, int rc, const json_t *reply, const struct gpt_err *err)
{
    struct mirror_req *q = arg;
    struct control_client *cl = q->cl;
    if (!cl->closing) {
        if (rc < 0)
            control_reply_err(cl, q->id, rc, err);
        else
            control_reply_ok(cl, q->id, json_deep_copy(reply));
    }
    cl->busy--;
    control_client_idle_check(cl);
    mirror_req_free(q);
}

int mirror_read(struct mirror *m, struct control_client *cl, const struct gpt_ctl_request *req,
                struct gpt_err *err)
{
    /* The coordinator checks the client's uid against the job's owner. */
    struct cluster_msg_read_args args = {
        .job = req->job, .uid = cl->uid, .snapshot = req->snapshot, .limit = 0};
    struct mirror_req *q = mirror_req_new(m, cl, req->id);
    if (!q)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    int rc = cluster_read_op(m->cl, req->op, &args, mirror_on_read, q, err);
    if (rc < 0) {
        mirror_req_free(q);
        return rc;
    }
    cl->busy++;
    return 0;
}

/* ---- streams: the remote source of `logs` (daemon/follow.h) ---- */

/* Sends one record of the stream's job; false when the stream ended. */
static bool mirror_send(struct control_client *cl, const json_t *rec)
{
    const char *type = json_string_value(json_object_get(rec, "type"));
    int64_t step = json_integer_value(json_object_get(rec, "step"));
    switch (follow_filter(&cl->logs, type, step, true)) {
    case FOLLOW_END:
        follow_end(cl, json_deep_copy(rec));
        return false;
    case FOLLOW_SEND:
        follow_send(cl, json_deep_copy(rec));
        return true;
    default:
        return true;
    }
}

/* Live: the ring's records of the job past the stream's feed position. */
static void mirror_catch_up(struct mirror *m, struct control_client *cl)
{
    for (size_t i = 0; i < m->n && cl->logs.active; i++) {
        const struct mirror_rec *r = &m->ring[(m->head + i) % MIRROR_RING];
        if (r->seq <= cl->logs.feed_seq)
            continue;
        cl->logs.feed_seq = r->seq;
        if (r->job == cl->logs.job)
            mirror_send(cl, r->rec);
    }
}

static void mirror_pump(struct mirror *m, struct control_client *cl);

static void mirror_on_history(void *arg, int rc, const json_t *reply, const struct gpt_err *err)
{
    struct mirror_req *q = arg;
    struct mirror *m = q->m;
    struct control_client *cl = q->cl;
    bool mine = cl->logs.active && cl->logs.remote && cl->logs.pending && !cl->closing;
    if (mine)
        cl->logs.pending = false;
    if (!mine) {
        mirror_req_free(q);
        return;
    }
    if (rc < 0) {
        control_reply_err(cl, cl->logs.id, rc, err);
        follow_detach(cl);
        mirror_req_free(q);
        return;
    }
    size_t i;
    json_t *rec;
    json_array_foreach(json_object_get(reply, "recs"), i, rec) mirror_send(cl, rec);
    json_int_t last = json_integer_value(json_object_get(reply, "last"));
    if (last > cl->logs.cursor) /* a position (db_history_page), not a step */
        cl->logs.cursor = last;
    if (json_is_true(json_object_get(reply, "more"))) {
        mirror_req_free(q);
        mirror_pump(m, cl);
        return;
    }
    cl->logs.replaying = false;
    cl->logs.feed_seq = (uint64_t)json_integer_value(json_object_get(reply, "seq"));
    if (!cl->logs.follow || json_is_true(json_object_get(reply, "final"))) {
        follow_end(cl,
                   follow_end_json(cl->logs.job, json_string_value(json_object_get(reply, "state")),
                                   json_string_value(json_object_get(reply, "error"))));
    } else {
        mirror_catch_up(m, cl);
    }
    mirror_req_free(q);
}

/* Asks for the next history chunk once the previous one is written. */
static void mirror_pump(struct mirror *m, struct control_client *cl)
{
    if (!cl->logs.active || !cl->logs.replaying || cl->logs.pending || cl->closing ||
        cl->writes_pending > 0)
        return;
    struct gpt_err err;
    struct cluster_msg_read_args args = {.job = cl->logs.job,
                                         .uid = -1,
                                         .since = cl->logs.since,
                                         .after = cl->logs.cursor,
                                         .limit = MIRROR_HIST_CHUNK};
    struct mirror_req *q = mirror_req_new(m, cl, cl->logs.id);
    if (!q) {
        gpt_err_set(&err, -ENOMEM, NULL, "out of memory");
        control_reply_err(cl, cl->logs.id, -ENOMEM, &err);
        follow_detach(cl);
        return;
    }
    cl->logs.pending = true;
    int rc = cluster_read_op(m->cl, GPT_CTL_OP_LOGS, &args, mirror_on_history, q, &err);
    if (rc < 0) {
        cl->logs.pending = false;
        mirror_req_free(q);
        control_reply_err(cl, cl->logs.id, rc, &err);
        follow_detach(cl);
    }
}

int mirror_follow(struct mirror *m, struct control_client *cl, const json_t *id, int64_t job,
                  int64_t since, bool follow, struct gpt_err *err)
{
    int rc =
        follow_begin(m->ctl, m->cfg->max_followers_per_job, cl, id, job, since, follow, true, err);
    if (rc < 0)
        return rc;
    mirror_pump(m, cl);
    return 0;
}

void mirror_client_drained(struct mirror *m, struct control_client *cl)
{
    if (cl->logs.active && cl->logs.remote && cl->logs.replaying)
        mirror_pump(m, cl);
}

/* ---- the feed ---- */

struct mirror_live {
    struct mirror *m;
    const struct mirror_rec *r;
};

static void mirror_live_one(void *ctx, struct control_client *cl)
{
    struct mirror_live *l = ctx;
    if (!cl->logs.active || !cl->logs.remote || cl->logs.replaying ||
        l->r->seq <= cl->logs.feed_seq)
        return;
    cl->logs.feed_seq = l->r->seq;
    if (l->r->job == cl->logs.job)
        mirror_send(cl, l->r->rec);
}

static void mirror_on_record(void *ctx, uint64_t seq, int64_t job, const json_t *rec)
{
    struct mirror *m = ctx;
    struct mirror_rec *r;
    if (m->n == MIRROR_RING) {
        r = &m->ring[m->head];
        json_decref(r->rec);
        m->head = (m->head + 1) % MIRROR_RING;
        m->n--;
    }
    r = &m->ring[(m->head + m->n) % MIRROR_RING];
    r->seq = seq;
    r->job = job;
    r->rec = json_deep_copy(rec);
    if (!r->rec)
        return;
    m->n++;
    struct mirror_live l = {m, r};
    control_foreach(m->ctl, mirror_live_one, &l);
}

static void mirror_reset_one(void *ctx, struct control_client *cl)
{
    (void)ctx;
    if (cl->logs.active && cl->logs.remote && !cl->logs.replaying)
        cl->logs.feed_seq = 0;
}

/* A new coordinator: its feed counts from 1 again. */
static void mirror_on_reset(void *ctx)
{
    struct mirror *m = ctx;
    for (size_t i = 0; i < m->n; i++)
        json_decref(m->ring[(m->head + i) % MIRROR_RING].rec);
    m->head = m->n = 0;
    control_foreach(m->ctl, mirror_reset_one, NULL);
    log_debug("mirror: the coordinator's feed starts over");
}

/* ---- life cycle ---- */

struct mirror *mirror_new(struct cluster *cl, struct control *ctl, const struct config *cfg)
{
    struct mirror *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->cl = cl;
    m->ctl = ctl;
    m->cfg = cfg;
    struct cluster_feed_hooks h = {m, mirror_on_record, mirror_on_reset};
    cluster_set_feed_hooks(cl, &h);
    return m;
}

void mirror_free(struct mirror *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++)
        json_decref(m->ring[(m->head + i) % MIRROR_RING].rec);
    free(m);
}
