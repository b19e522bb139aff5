/*
 * cluster: node identity, the store connection, heartbeats, the outbox to
 * the coordinator and, on the coordinator, the store server, the inbox
 * drain and the round protocol (see cluster.h). One periodic timer drives
 * everything, redis-cron style, with sub-periods per duty.
 *
 * Every store callback gets the cluster itself as its argument: the
 * cluster outlives its clients (cluster_close closes them first), and a
 * callback that reports a failure only clears its in-flight flag.
 *
 * Loop thread only.
 */
#include "cluster.h"

#include "devices.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "rdzv.h"
#include "store_client.h"
#include "store_server.h"

#define CLUSTER_TICK_MS        25
#define CLUSTER_POLL_S         0.1  /* how often the round key is read */
#define CLUSTER_DRAIN_S        0.05 /* how often the coordinator drains its inbox */
#define CLUSTER_NODES_S        1.0  /* how often the node table is published/read */
#define CLUSTER_CONNECT_S      2.0  /* a connect (and handshake) slower than this is retried */
#define CLUSTER_BACKOFF_MIN_MS 100
#define CLUSTER_BACKOFF_MAX_MS 1000
#define CLUSTER_OUTBOX_MAX     (4u << 20) /* queued bytes to the coordinator */
#define CLUSTER_SUBMIT_TIMEOUT 15.0
#define CLUSTER_READ_TIMEOUT   5.0 /* a read proxied to the coordinator */
#define CLUSTER_SUBMITS_MAX    64
#define CLUSTER_LEAVE_S        1.0  /* how long a leave waits to reach the store */
#define CLUSTER_FEED_S         0.1  /* how often the feed is published/polled */
#define CLUSTER_FEED_KEEP      64   /* feed chunks kept in the store */
#define CLUSTER_FEED_CHUNK     256  /* records in one chunk at most */
#define CLUSTER_FEED_PENDING   4096 /* unpublished records kept (oldest dropped) */

enum cluster_conn { CONN_NONE, CONN_CONNECTING, CONN_READY };

/* A request to the coordinator waiting for its answer: a submit (cb) or a
 * read (rcb). */
struct cluster_submit {
    struct cluster_submit *next;
    int64_t req;
    double deadline;
    bool inflight;
    char key[128];
    void (*cb)(void *arg, int rc, int64_t job, const struct gpt_err *err);
    cluster_reply_fn rcb;
    void *arg;
};

struct cluster {
    uv_loop_t *loop;
    struct cluster_opts o;
    char node_id[RDZV_NODE_ID_MAX];
    char host[CLUSTER_HOST_MAX];
    char addr[RDZV_ADDR_MAX];
    char version[32];
    uint8_t *secret;
    size_t secret_len;
    char secret_file[1024];
    char secret_hint[1024];
    /* The store refused this node's secret: forwarded requests fail at once
     * (with refused_msg) instead of waiting for a connection that will not
     * come; the error is logged once per streak of refusals. */
    bool refused;
    char refused_msg[2600];
    uint64_t inc;
    uv_timer_t timer;
    struct cluster_node_hooks nh;
    struct cluster_jobs_hooks jh;
    struct cluster_feed_hooks fh;
    cluster_read_fn read_fn;
    void *read_ctx;

    /* the node's connection */
    struct store_client_async *nc;
    int nc_state;
    double nc_since, last_progress, retry_at;
    int backoff_ms;
    int inflight;
    bool lost_reported;
    double next_hb;
    bool hb_soon;
    double next_poll;
    bool poll_inflight;
    char round_seen[96];
    double next_nodes;
    json_t *nodes_cache;
    char *out;
    size_t out_len, out_cap;
    bool append_inflight;
    struct cluster_submit *submits;
    int n_submits;
    int64_t next_req;
    int leave_state; /* 0, 1 queued, 2 in the append in flight */
    double leave_deadline;
    void (*leave_done)(void *arg);
    void *leave_arg;
    /* the feed, as a member reads it */
    double next_feed;
    bool feed_inflight;
    char feed_gen[24];
    int64_t feed_next, feed_head;

    /* the coordinator */
    struct store_server *server;
    struct store_client_async *cc;
    int cc_state;
    double cc_retry_at;
    struct rdzv_coord *coord;
    bool drain_inflight;
    char *drain_val;
    size_t drain_len;
    double next_drain, next_nodes_pub;
    /* the feed the coordinator publishes: chunk n at c/feed/<n>, the newest
     * named by RDZV_KEY_FEED_HEAD; records not yet in a chunk wait here */
    json_t *feed_pending;
    uint64_t feed_seq;
    int64_t feed_chunk;
    double next_feed_pub;

    int closing_handles;
    void (*done)(void *ctx);
    void *done_ctx;
    bool closing;
};

static double cluster_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool cluster_is_coordinator(const struct cluster *c)
{
    return c->o.coordinator;
}

const char *cluster_node_id(const struct cluster *c)
{
    return c->node_id;
}

uint64_t cluster_incarnation(const struct cluster *c)
{
    return c->inc;
}

bool cluster_connected(const struct cluster *c)
{
    return c->nc_state == CONN_READY;
}

const char *cluster_host(const struct cluster *c)
{
    return c->host;
}

int cluster_port(const struct cluster *c)
{
    return c->o.port;
}

void cluster_set_workers(struct cluster *c, int workers)
{
    if (workers > 0)
        c->o.workers = workers;
}

/* ---- the node's connection ---- */

static void cluster_conn_lost(struct cluster *c, const char *why)
{
    if (c->nc) {
        struct store_client_async *a = c->nc;
        c->nc = NULL;
        store_client_async_close(a, NULL, NULL); /* pending callbacks run now */
    }
    if (c->nc_state == CONN_READY)
        log_warn("cluster: lost the store at %s:%d: %s", c->host, c->o.port, why);
    c->nc_state = CONN_NONE;
    c->inflight = 0;
    c->poll_inflight = false;
    c->append_inflight = false;
    c->round_seen[0] = '\0';
    c->retry_at = cluster_now() + c->backoff_ms / 1e3;
    c->backoff_ms =
        c->backoff_ms * 2 > CLUSTER_BACKOFF_MAX_MS ? CLUSTER_BACKOFF_MAX_MS : c->backoff_ms * 2;
    for (struct cluster_submit *s = c->submits; s; s = s->next)
        s->inflight = false;
    c->feed_inflight = false;
    if (c->leave_state)
        c->leave_deadline = 0; /* nothing more can be sent: done at the next tick */
    if (!c->lost_reported && c->nh.lost) {
        c->lost_reported = true;
        c->nh.lost(c->nh.ctx);
    }
}

/* Every reply (or failure) of the node's client comes through here first. */
static bool cluster_reply_ok(struct cluster *c, const struct store_reply *r)
{
    if (r->status == -ECANCELED || !c->nc)
        return false; /* the connection is being torn down */
    if (c->inflight > 0)
        c->inflight--;
    c->last_progress = cluster_now();
    if (r->status == -ECONNRESET || r->status == -EPIPE || r->status == -GPT_E_PROTO) {
        cluster_conn_lost(c, gpt_strerror(r->status));
        return false;
    }
    return true;
}

static void cluster_on_connect(void *arg, int status)
{
    struct cluster *c = arg;
    if (!c->nc)
        return;
    if (status < 0) {
        if (status == -GPT_E_AUTH) {
            if (!c->secret_len)
                snprintf(c->refused_msg, sizeof(c->refused_msg),
                         "the store at %s:%d refused this node: it has no cluster secret. Start "
                         "gptd with --secret-file FILE (secret_file in gptd.conf), FILE a copy "
                         "(mode 0600) of the coordinator's secret%s%s",
                         c->host, c->o.port,
                         c->secret_hint[0] ? ", "
                                           : " (STATE_DIR/cluster.secret of a gptd "
                                             "without an endpoint)",
                         c->secret_hint);
            else
                snprintf(c->refused_msg, sizeof(c->refused_msg),
                         "the store at %s:%d refused this node's secret (%s): it must hold the "
                         "same bytes as the coordinator's (STATE_DIR/cluster.secret of a gptd "
                         "without an endpoint)",
                         c->host, c->o.port, c->secret_file[0] ? c->secret_file : "given");
            if (!c->refused)
                log_error("cluster: %s", c->refused_msg);
            else
                log_debug("cluster: refused again by %s:%d", c->host, c->o.port);
            c->refused = true;
        }
        c->nc_state = CONN_CONNECTING; /* reported as a loss below without the warning */
        cluster_conn_lost(c, gpt_strerror(status));
        return;
    }
    log_info("cluster: connected to the store at %s:%d as %s", c->host, c->o.port, c->node_id);
    c->refused = false;
    c->nc_state = CONN_READY;
    c->backoff_ms = CLUSTER_BACKOFF_MIN_MS;
    c->last_progress = cluster_now();
    c->lost_reported = false;
    c->hb_soon = true;
    c->next_poll = 0;
}

static void cluster_connect(struct cluster *c, double now)
{
    struct store_client_async_opts ao = {
        .host = c->host, .port = c->o.port, .secret = c->secret, .secret_len = c->secret_len};
    struct gpt_err err;
    c->nc_state = CONN_CONNECTING;
    c->nc_since = now;
    if (store_client_async_new(c->loop, &ao, cluster_on_connect, c, &c->nc, &err) < 0) {
        c->nc = NULL;
        c->nc_state = CONN_NONE;
        c->retry_at = now + CLUSTER_BACKOFF_MAX_MS / 1e3;
        log_warn("cluster: %s", err.msg);
    }
}

/* ---- outbox, heartbeats, polling ---- */

static void cluster_on_append(void *arg, const struct store_reply *r)
{
    struct cluster *c = arg;
    c->append_inflight = false;
    if (c->leave_state == 2)
        c->leave_deadline = 0; /* the leave reached the store (or never will) */
    if (!cluster_reply_ok(c, r))
        return;
    if (r->status < 0)
        log_warn("cluster: message to the coordinator dropped: %s", gpt_strerror(r->status));
}

static void cluster_flush(struct cluster *c)
{
    if (c->nc_state != CONN_READY || c->append_inflight || c->out_len == 0)
        return;
    int rc =
        store_client_async_append(c->nc, RDZV_KEY_INBOX, c->out, c->out_len, cluster_on_append, c);
    if (rc < 0) {
        /* -EPIPE: the connection failed while nothing was pending. */
        if (rc == -EPIPE)
            cluster_conn_lost(c, "connection closed");
        return;
    }
    c->append_inflight = true;
    c->inflight++;
    c->out_len = 0;
    if (c->leave_state == 1)
        c->leave_state = 2;
}

void cluster_send(struct cluster *c, json_t *msg)
{
    char *line = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
    json_decref(msg);
    if (!line)
        return;
    size_t n = strlen(line);
    if (c->out_len + n + 1 > CLUSTER_OUTBOX_MAX) {
        free(line);
        return; /* the coordinator is unreachable: stale news is worthless */
    }
    if (c->out_len + n + 1 > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < c->out_len + n + 1)
            cap *= 2;
        char *p = realloc(c->out, cap);
        if (!p) {
            free(line);
            return;
        }
        c->out = p;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, line, n);
    c->out[c->out_len + n] = '\n';
    c->out_len += n + 1;
    free(line);
    cluster_flush(c);
}

static void cluster_on_tick(uv_timer_t *t);

void cluster_heartbeat_soon(struct cluster *c)
{
    c->hb_soon = true;
    if (!c->closing)
        uv_timer_start(&c->timer, cluster_on_tick, 0, CLUSTER_TICK_MS);
}

static void cluster_heartbeat(struct cluster *c)
{
    char inc[32];
    snprintf(inc, sizeof(inc), "%" PRIx64, c->inc);
    char dev[128];
    devices_summary(dev, sizeof(dev));
    json_t *hb =
        json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:s}", "t", "hb", "node", c->node_id, "inc", inc,
                  "addr", c->addr, "ver", c->version, "workers", c->o.workers, "dev", dev);
    if (!hb)
        return;
    if (c->nh.heartbeat)
        c->nh.heartbeat(c->nh.ctx, hb);
    cluster_send(c, hb);
}

void cluster_leave(struct cluster *c, void (*done)(void *arg), void *arg)
{
    char inc[32];
    snprintf(inc, sizeof(inc), "%" PRIx64, c->inc);
    c->leave_done = done;
    c->leave_arg = arg;
    c->leave_state = 1;
    c->leave_deadline = c->nc_state == CONN_READY ? cluster_now() + CLUSTER_LEAVE_S : 0;
    cluster_send(c, json_pack("{s:s, s:s, s:s}", "t", "leave", "node", c->node_id, "inc", inc));
    if (!c->closing)
        uv_timer_start(&c->timer, cluster_on_tick, 0, CLUSTER_TICK_MS);
}

static void cluster_leave_check(struct cluster *c, double now)
{
    if (!c->leave_state || now < c->leave_deadline)
        return;
    void (*done)(void *) = c->leave_done;
    c->leave_state = 0;
    c->leave_done = NULL;
    if (done)
        done(c->leave_arg);
}

static void cluster_coord_metric(struct cluster *c, int64_t job, const struct gpt_metric *m);
static void cluster_coord_event_in(struct cluster *c, int64_t job, const struct gpt_event *e,
                                   const char *node);

void cluster_send_metric(struct cluster *c, int64_t job, const struct gpt_metric *m)
{
    if (c->coord) {
        cluster_coord_metric(c, job, m);
        return;
    }
    json_t *o = gpt_metric_to_json(m);
    if (o)
        cluster_send(c, json_pack("{s:s, s:I, s:s, s:o}", "t", "metric", "job", (json_int_t)job,
                                  "node", c->node_id, "m", o));
}

void cluster_send_event(struct cluster *c, int64_t job, const struct gpt_event *e)
{
    if (c->coord) {
        cluster_coord_event_in(c, job, e, c->node_id);
        return;
    }
    json_t *o = gpt_event_to_json(e);
    if (o)
        cluster_send(c, json_pack("{s:s, s:I, s:s, s:o}", "t", "event", "job", (json_int_t)job,
                                  "node", c->node_id, "e", o));
}

/* A round with a world: this node's assignment, if it is a member. */
struct cluster_me_req {
    struct cluster *c;
    json_t *cur;
};

static void cluster_on_me(void *arg, const struct store_reply *r)
{
    struct cluster_me_req *q = arg;
    struct cluster *c = q->c;
    json_t *cur = q->cur;
    free(q);
    if (!cluster_reply_ok(c, r)) {
        json_decref(cur);
        return;
    }
    c->poll_inflight = false;
    if (r->status < 0 && r->status != -ENOENT) {
        c->round_seen[0] = '\0'; /* read again */
        json_decref(cur);
        return;
    }
    if (r->status == 0) {
        json_t *me = json_loadb(r->data, r->len, 0, NULL);
        if (me)
            json_object_set_new(cur, "me", me);
    }
    if (c->nh.round)
        c->nh.round(c->nh.ctx, cur);
    json_decref(cur);
}

static void cluster_on_cur(void *arg, const struct store_reply *r)
{
    struct cluster *c = arg;
    if (!cluster_reply_ok(c, r))
        return;
    if (r->status < 0) {
        c->poll_inflight = false;
        return;
    }
    json_t *cur = json_loadb(r->data, r->len, 0, NULL);
    if (!cur) {
        c->poll_inflight = false;
        c->round_seen[0] = '\0';
        return;
    }
    const char *phase = json_string_value(json_object_get(cur, "phase"));
    if (phase && (strcmp(phase, "running") == 0 || strcmp(phase, "stopping") == 0)) {
        struct cluster_me_req *q = malloc(sizeof(*q));
        char key[RDZV_NODE_ID_MAX + 64];
        snprintf(key, sizeof(key), "rdzv/%lld/node/%s",
                 (long long)json_integer_value(json_object_get(cur, "round")), c->node_id);
        if (q) {
            q->c = c;
            q->cur = cur;
            if (store_client_async_get(c->nc, key, cluster_on_me, q) == 0) {
                c->inflight++;
                return;
            }
            free(q);
        }
        c->poll_inflight = false;
        c->round_seen[0] = '\0';
        json_decref(cur);
        return;
    }
    c->poll_inflight = false;
    if (c->nh.round)
        c->nh.round(c->nh.ctx, cur);
    json_decref(cur);
}

static void cluster_on_round(void *arg, const struct store_reply *r)
{
    struct cluster *c = arg;
    if (!cluster_reply_ok(c, r))
        return;
    if (r->status < 0 || r->len == 0 || r->len >= sizeof(c->round_seen) ||
        (strlen(c->round_seen) == r->len && memcmp(c->round_seen, r->data, r->len) == 0)) {
        c->poll_inflight = false;
        return;
    }
    memcpy(c->round_seen, r->data, r->len);
    c->round_seen[r->len] = '\0';
    if (store_client_async_get(c->nc, RDZV_KEY_CUR, cluster_on_cur, c) < 0) {
        c->poll_inflight = false;
        c->round_seen[0] = '\0';
        return;
    }
    c->inflight++;
}

static void cluster_on_nodes(void *arg, const struct store_reply *r)
{
    struct cluster *c = arg;
    if (!cluster_reply_ok(c, r) || r->status < 0)
        return;
    json_t *n = json_loadb(r->data, r->len, 0, NULL);
    if (json_is_array(n)) {
        json_decref(c->nodes_cache);
        c->nodes_cache = n;
    } else {
        json_decref(n);
    }
}

static void cluster_on_publish(void *arg, const struct store_reply *r);

/* ---- forwarded submits (node side) ---- */

static void cluster_submit_end(struct cluster *c, struct cluster_submit *s, int rc, int64_t job,
                               const json_t *reply, const struct gpt_err *err)
{
    for (struct cluster_submit **pp = &c->submits; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    c->n_submits--;
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
    struct cluster_submit *s = c->submits;
    while (s && s->req != req)
        s = s->next;
    if (!s)
        return;
    s->inflight = false;
    if (r->status < 0)
        return; /* not answered yet */
    json_t *o = json_loadb(r->data, r->len, 0, NULL);
    struct gpt_err err;
    gpt_err_clear(&err);
    int rc;
    int64_t job = 0;
    if (json_is_true(json_object_get(o, "ok"))) {
        rc = 0;
        job = json_integer_value(json_object_get(o, "job"));
        if (s->rcb && !json_is_object(json_object_get(o, "r")))
            rc = gpt_err_set(&err, -EPROTO, NULL, "the coordinator's answer has no result");
    } else {
        rc = (int)json_integer_value(json_object_get(o, "code"));
        if (rc >= 0)
            rc = -EPROTO;
        const char *path = json_string_value(json_object_get(o, "path"));
        const char *msg = json_string_value(json_object_get(o, "message"));
        gpt_err_set(&err, rc, path, "%s", msg ? msg : "the coordinator refused the job");
    }
    (void)store_client_async_delete(c->nc, s->key, cluster_on_publish, c);
    cluster_submit_end(c, s, rc, job, json_object_get(o, "r"), &err);
    json_decref(o);
}

static void cluster_poll_submits(struct cluster *c, double now)
{
    struct cluster_submit *s = c->submits;
    while (s) {
        struct cluster_submit *next = s->next;
        if (now > s->deadline) {
            struct gpt_err err;
            gpt_err_set(&err, -ETIMEDOUT, NULL, "the coordinator did not answer within %.0f s",
                        s->rcb ? CLUSTER_READ_TIMEOUT : CLUSTER_SUBMIT_TIMEOUT);
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

/* Queues request `m` (taken; "node", "inc" and "req" are added) whose
 * answer the coordinator publishes at c/reply/<node>/<inc>/<req>. */
static int cluster_request(struct cluster *c, json_t *m, double timeout_s,
                           void (*cb)(void *arg, int rc, int64_t job, const struct gpt_err *err),
                           cluster_reply_fn rcb, void *arg, struct gpt_err *err)
{
    if (!m)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    if (c->refused && c->nc_state != CONN_READY) {
        json_decref(m);
        return gpt_err_set(err, -GPT_E_AUTH, NULL, "this node is not in the cluster: %s",
                           c->refused_msg);
    }
    if (c->n_submits >= CLUSTER_SUBMITS_MAX) {
        json_decref(m);
        return gpt_err_set(err, -GPT_E_LIMIT, NULL, "too many requests to the coordinator");
    }
    struct cluster_submit *s = calloc(1, sizeof(*s));
    if (!s) {
        json_decref(m);
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    }
    s->req = ++c->next_req;
    s->deadline = cluster_now() + timeout_s;
    s->cb = cb;
    s->rcb = rcb;
    s->arg = arg;
    snprintf(s->key, sizeof(s->key), "c/reply/%s/%" PRIx64 "/%" PRId64, c->node_id, c->inc, s->req);
    char inc[32];
    snprintf(inc, sizeof(inc), "%" PRIx64, c->inc);
    if (json_object_set_new(m, "node", json_string(c->node_id)) < 0 ||
        json_object_set_new(m, "inc", json_string(inc)) < 0 ||
        json_object_set_new(m, "req", json_integer(s->req)) < 0) {
        json_decref(m);
        free(s);
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    }
    s->next = c->submits;
    c->submits = s;
    c->n_submits++;
    cluster_send(c, m);
    return 0;
}

int cluster_submit(struct cluster *c, const json_t *spec, uid_t uid, int64_t priority,
                   void (*cb)(void *arg, int rc, int64_t job, const struct gpt_err *err), void *arg,
                   struct gpt_err *err)
{
    json_t *m = json_pack("{s:s, s:I, s:I, s:O}", "t", "submit", "uid", (json_int_t)uid, "prio",
                          (json_int_t)priority, "spec", spec);
    return cluster_request(c, m, CLUSTER_SUBMIT_TIMEOUT, cb, NULL, arg, err);
}

int cluster_read(struct cluster *c, const char *op, json_t *args, cluster_reply_fn cb, void *arg,
                 struct gpt_err *err)
{
    json_t *m =
        json_pack("{s:s, s:s, s:o}", "t", "read", "op", op, "args", args ? args : json_object());
    return cluster_request(c, m, CLUSTER_READ_TIMEOUT, NULL, cb, arg, err);
}

/* ---- the coordinator ---- */

static double cluster_coord_now(void)
{
    return cluster_now();
}

static void cluster_on_publish(void *arg, const struct store_reply *r)
{
    (void)arg;
    (void)r;
}

static void cluster_publish(void *ctx, const char *key, const char *value)
{
    struct cluster *c = ctx;
    if (c->cc_state != CONN_READY)
        return;
    if (value)
        (void)store_client_async_set(c->cc, key, value, strlen(value), cluster_on_publish, c);
    else
        (void)store_client_async_delete(c->cc, key, cluster_on_publish, c);
}

static void cluster_coord_event(void *ctx, int64_t job, const char *kind, const char *msg)
{
    struct cluster *c = ctx;
    log_notice("cluster: %s: %s", kind, msg);
    if (!job || !c->jh.event)
        return;
    struct gpt_event e;
    memset(&e, 0, sizeof(e));
    snprintf(e.kind, sizeof(e.kind), "%s", kind);
    snprintf(e.message, sizeof(e.message), "%s", msg);
    e.step = -1; /* the job's newest step (filled in by the job queue) */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    e.time = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    c->jh.event(c->jh.ctx, job, &e, c->node_id);
}

static void cluster_coord_world(void *ctx, int64_t job, int world_size, int nodes,
                                int64_t *ret_run_id)
{
    struct cluster *c = ctx;
    if (c->jh.world)
        c->jh.world(c->jh.ctx, job, world_size, nodes, ret_run_id);
}

static void cluster_coord_waiting(void *ctx, int64_t job, bool waiting)
{
    struct cluster *c = ctx;
    if (c->jh.waiting)
        c->jh.waiting(c->jh.ctx, job, waiting);
}

static void cluster_coord_finished(void *ctx, int64_t job, int rc, int64_t step, const char *error)
{
    struct cluster *c = ctx;
    if (c->jh.finished)
        c->jh.finished(c->jh.ctx, job, rc, step, error);
}

static void cluster_answer_submit(struct cluster *c, const json_t *o)
{
    const char *node = json_string_value(json_object_get(o, "node"));
    const char *inc = json_string_value(json_object_get(o, "inc"));
    json_int_t req = json_integer_value(json_object_get(o, "req"));
    const json_t *spec = json_object_get(o, "spec");
    if (!node || !inc || strlen(node) >= RDZV_NODE_ID_MAX || strlen(inc) > 16)
        return;
    struct gpt_err err;
    gpt_err_clear(&err);
    int64_t id = 0;
    int rc;
    char *text = json_is_object(spec) ? json_dumps(spec, JSON_COMPACT) : NULL;
    if (!text)
        rc = gpt_err_set(&err, -EINVAL, "spec", "no job spec");
    else if (!c->jh.submit)
        rc = gpt_err_set(&err, -EAGAIN, NULL, "the coordinator takes no jobs yet");
    else
        rc = c->jh.submit(c->jh.ctx, text, (uid_t)json_integer_value(json_object_get(o, "uid")),
                          json_integer_value(json_object_get(o, "prio")), &id, &err);
    free(text);
    json_t *reply = rc == 0 ? json_pack("{s:b, s:I}", "ok", 1, "job", (json_int_t)id)
                            : json_pack("{s:b, s:i, s:s, s:s}", "ok", 0, "code", rc, "message",
                                        err.msg, "path", err.path);
    char *r = reply ? json_dumps(reply, JSON_COMPACT) : NULL;
    json_decref(reply);
    if (r) {
        char key[128];
        snprintf(key, sizeof(key), "c/reply/%s/%s/%lld", node, inc, (long long)req);
        cluster_publish(c, key, r);
        free(r);
    }
}

static void cluster_coord_restarts(void *ctx, int64_t job, int restarts)
{
    struct cluster *c = ctx;
    if (c->jh.restarts)
        c->jh.restarts(c->jh.ctx, job, restarts);
}

/* Publishes an answer at the asking node's reply key (checked names). */
static void cluster_answer(struct cluster *c, const json_t *o, json_t *reply)
{
    const char *node = json_string_value(json_object_get(o, "node"));
    const char *inc = json_string_value(json_object_get(o, "inc"));
    json_int_t req = json_integer_value(json_object_get(o, "req"));
    char *r = reply ? json_dumps(reply, JSON_COMPACT) : NULL;
    json_decref(reply);
    if (r && node && inc && strlen(node) < RDZV_NODE_ID_MAX && strlen(inc) <= 16) {
        char key[128];
        snprintf(key, sizeof(key), "c/reply/%s/%s/%lld", node, inc, (long long)req);
        cluster_publish(c, key, r);
    }
    free(r);
}

/* A read forwarded by a member: the same result its own socket would give. */
static void cluster_answer_read(struct cluster *c, const json_t *o)
{
    const char *op = json_string_value(json_object_get(o, "op"));
    struct gpt_err err;
    gpt_err_clear(&err);
    json_t *result = NULL;
    int rc;
    if (!op)
        rc = gpt_err_set(&err, -EINVAL, "op", "no op");
    else if (!c->read_fn)
        rc = gpt_err_set(&err, -EAGAIN, NULL, "the coordinator answers no reads yet");
    else
        rc = c->read_fn(c->read_ctx, op, json_object_get(o, "args"), &result, &err);
    if (rc == 0)
        cluster_answer(c, o, json_pack("{s:b, s:o}", "ok", 1, "r", result));
    else
        cluster_answer(c, o,
                       json_pack("{s:b, s:i, s:s, s:s}", "ok", 0, "code", rc, "message", err.msg,
                                 "path", err.path));
}

/* Global rank 0's records, from the inbox or, on the coordinator's own
 * node, directly (so they reach the database as soon as on a single gptd:
 * a snapshot on disk is never newer than the metrics recorded before it by
 * more than a loop iteration). */
static void cluster_coord_metric(struct cluster *c, int64_t job, const struct gpt_metric *m)
{
    if (job != rdzv_coord_job(c->coord))
        return;
    rdzv_coord_progress(c->coord, m->step, -1);
    if (c->jh.metric)
        c->jh.metric(c->jh.ctx, job, m);
}

static void cluster_coord_event_in(struct cluster *c, int64_t job, const struct gpt_event *e,
                                   const char *node)
{
    if (job != rdzv_coord_job(c->coord))
        return;
    if (strcmp(e->kind, "snapshot") == 0)
        rdzv_coord_progress(c->coord, e->step, e->step);
    if (c->jh.event)
        c->jh.event(c->jh.ctx, job, e, node);
}

static void cluster_coord_line(struct cluster *c, double now, const char *line, size_t len)
{
    json_t *o = json_loadb(line, len, 0, NULL);
    if (!o)
        return;
    struct rdzv_msg m;
    if (rdzv_msg_parse(o, &m) < 0)
        goto out;
    if (m.type != RDZV_MSG_OTHER) {
        rdzv_coord_message(c->coord, now, &m);
        goto out;
    }
    const char *t = json_string_value(json_object_get(o, "t"));
    int64_t job = json_integer_value(json_object_get(o, "job"));
    const char *node = json_string_value(json_object_get(o, "node"));
    struct gpt_err err;
    if (strcmp(t, "metric") == 0) {
        struct gpt_metric mm;
        if (gpt_metric_from_json(json_object_get(o, "m"), &mm, &err) == 0)
            cluster_coord_metric(c, job, &mm);
    } else if (strcmp(t, "event") == 0) {
        struct gpt_event e;
        if (gpt_event_from_json(json_object_get(o, "e"), &e, &err) == 0)
            cluster_coord_event_in(c, job, &e, node ? node : "");
    } else if (strcmp(t, "submit") == 0) {
        cluster_answer_submit(c, o);
    } else if (strcmp(t, "read") == 0) {
        cluster_answer_read(c, o);
    }
out:
    json_decref(o);
}

static void cluster_on_drain_cas(void *arg, const struct store_reply *r)
{
    struct cluster *c = arg;
    char *val = c->drain_val;
    size_t len = c->drain_len;
    c->drain_val = NULL;
    c->drain_inflight = false;
    if (r->status == 0 && r->len == 0 && val) {
        /* The inbox was emptied exactly as read: the lines are ours. */
        double now = cluster_now();
        size_t start = 0;
        for (size_t i = 0; i < len; i++) {
            if (val[i] == '\n') {
                if (i > start)
                    cluster_coord_line(c, now, val + start, i - start);
                start = i + 1;
            }
        }
        rdzv_coord_tick(c->coord, now);
    } else if (r->status == 0) {
        c->next_drain = 0; /* appended meanwhile: read again at once */
    }
    free(val);
}

static void cluster_on_drain_get(void *arg, const struct store_reply *r)
{
    struct cluster *c = arg;
    if (r->status == -ECONNRESET || r->status == -EPIPE || r->status == -GPT_E_PROTO) {
        c->cc_state = CONN_NONE; /* reconnected by cluster_coord_duty */
        c->cc_retry_at = cluster_now();
    }
    if (r->status < 0 || r->len == 0 || c->cc_state != CONN_READY) {
        c->drain_inflight = false;
        return;
    }
    c->drain_val = malloc(r->len);
    if (!c->drain_val) {
        c->drain_inflight = false;
        return;
    }
    memcpy(c->drain_val, r->data, r->len);
    c->drain_len = r->len;
    if (store_client_async_compare_set(c->cc, RDZV_KEY_INBOX, c->drain_val, c->drain_len, "", 0,
                                       cluster_on_drain_cas, c) < 0) {
        free(c->drain_val);
        c->drain_val = NULL;
        c->drain_inflight = false;
    }
}

static void cluster_on_cc_connect(void *arg, int status)
{
    struct cluster *c = arg;
    if (status < 0) {
        log_error("cluster: the coordinator cannot reach its own store: %s", gpt_strerror(status));
        c->cc_state = CONN_NONE;
        c->cc_retry_at = cluster_now() + 1.0;
        return;
    }
    c->cc_state = CONN_READY;
    /* What was decided before the connection was up (the generation, a job
     * reloaded from the database) reaches the store now. */
    rdzv_coord_republish(c->coord);
    rdzv_coord_tick(c->coord, cluster_now());
}

static void cluster_on_cc_closed(void *arg);
static void cluster_feed_publish(struct cluster *c);
static json_t *cluster_mark_coordinator(struct cluster *c, json_t *nodes);

static void cluster_coord_duty(struct cluster *c, double now)
{
    if (c->cc_state == CONN_NONE && now >= c->cc_retry_at) {
        if (c->cc) {
            struct store_client_async *a = c->cc;
            c->cc = NULL;
            c->closing_handles++;
            store_client_async_close(a, cluster_on_cc_closed, c);
        }
        struct store_client_async_opts ao = {
            .host = c->host, .port = c->o.port, .secret = c->secret, .secret_len = c->secret_len};
        struct gpt_err err;
        c->cc_state = CONN_CONNECTING;
        if (store_client_async_new(c->loop, &ao, cluster_on_cc_connect, c, &c->cc, &err) < 0) {
            c->cc = NULL;
            c->cc_state = CONN_NONE;
            c->cc_retry_at = now + 1.0;
        }
        return;
    }
    if (c->cc_state != CONN_READY)
        return;
    if (!c->drain_inflight && now >= c->next_drain) {
        c->next_drain = now + CLUSTER_DRAIN_S;
        if (store_client_async_get(c->cc, RDZV_KEY_INBOX, cluster_on_drain_get, c) == 0)
            c->drain_inflight = true;
        rdzv_coord_tick(c->coord, now);
    }
    if (now >= c->next_feed_pub) {
        c->next_feed_pub = now + CLUSTER_FEED_S;
        cluster_feed_publish(c);
    }
    if (now >= c->next_nodes_pub) {
        c->next_nodes_pub = now + CLUSTER_NODES_S;
        json_t *n = cluster_mark_coordinator(c, rdzv_coord_nodes_json(c->coord, now));
        char *text = n ? json_dumps(n, JSON_COMPACT) : NULL;
        json_decref(n);
        if (text) {
            cluster_publish(c, RDZV_KEY_NODES, text);
            free(text);
        }
    }
}

/* ---- the feed ---- */

void cluster_feed_push(struct cluster *c, int64_t job, json_t *rec)
{
    if (!rec)
        return;
    if (!c->coord) {
        json_decref(rec);
        return;
    }
    if (!c->feed_pending && !(c->feed_pending = json_array())) {
        json_decref(rec);
        return;
    }
    /* A coordinator that cannot reach its own store keeps the newest records. */
    if (json_array_size(c->feed_pending) >= CLUSTER_FEED_PENDING)
        json_array_remove(c->feed_pending, 0);
    json_t *e = json_pack("{s:I, s:I, s:o}", "s", (json_int_t)++c->feed_seq, "j", (json_int_t)job,
                          "r", rec);
    if (e)
        json_array_append_new(c->feed_pending, e);
}

uint64_t cluster_feed_seq(const struct cluster *c)
{
    return c->feed_seq;
}

/* Writes the pending records as the next chunks, moves the head, and trims
 * the chunk that fell out of the window. */
static void cluster_feed_publish(struct cluster *c)
{
    char key[64], head[64], gen[24];
    snprintf(gen, sizeof(gen), "%" PRIx64, c->inc);
    while (c->feed_pending && json_array_size(c->feed_pending) > 0) {
        json_t *recs = json_array();
        if (!recs)
            return;
        while (json_array_size(c->feed_pending) > 0 && json_array_size(recs) < CLUSTER_FEED_CHUNK) {
            json_array_append(recs, json_array_get(c->feed_pending, 0));
            json_array_remove(c->feed_pending, 0);
        }
        json_t *chunk = json_pack("{s:o}", "recs", recs);
        char *text = chunk ? json_dumps(chunk, JSON_COMPACT) : NULL;
        json_decref(chunk);
        if (!text)
            return;
        c->feed_chunk++;
        snprintf(key, sizeof(key), CLUSTER_KEY_FEED_PREFIX "%" PRId64, c->feed_chunk);
        cluster_publish(c, key, text);
        free(text);
        if (c->feed_chunk > CLUSTER_FEED_KEEP) {
            snprintf(key, sizeof(key), CLUSTER_KEY_FEED_PREFIX "%" PRId64,
                     c->feed_chunk - CLUSTER_FEED_KEEP);
            cluster_publish(c, key, NULL);
        }
    }
    snprintf(head, sizeof(head), "%s:%" PRId64, gen, c->feed_chunk);
    cluster_publish(c, CLUSTER_KEY_FEED_HEAD, head);
}

static void cluster_on_feed_chunk(void *arg, const struct store_reply *r);

/* Member: reads the next chunk the head names, one at a time. */
static void cluster_feed_next(struct cluster *c)
{
    if (c->feed_next > c->feed_head || c->nc_state != CONN_READY) {
        c->feed_inflight = false;
        return;
    }
    char key[64];
    snprintf(key, sizeof(key), CLUSTER_KEY_FEED_PREFIX "%" PRId64, c->feed_next);
    if (store_client_async_get(c->nc, key, cluster_on_feed_chunk, c) == 0) {
        c->feed_inflight = true;
        c->inflight++;
    } else {
        c->feed_inflight = false;
    }
}

static void cluster_on_feed_chunk(void *arg, const struct store_reply *r)
{
    struct cluster *c = arg;
    if (!cluster_reply_ok(c, r))
        return;
    if (r->status < 0 && r->status != -ENOENT) {
        c->feed_inflight = false;
        return;
    }
    c->feed_next++; /* a trimmed chunk (-ENOENT) is skipped */
    json_t *o = r->status == 0 ? json_loadb(r->data, r->len, 0, NULL) : NULL;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(o, "recs"), i, e)
    {
        const json_t *rec = json_object_get(e, "r");
        json_int_t seq = json_integer_value(json_object_get(e, "s"));
        if (c->fh.record && json_is_object(rec) && seq > 0)
            c->fh.record(c->fh.ctx, (uint64_t)seq, json_integer_value(json_object_get(e, "j")),
                         rec);
    }
    json_decref(o);
    cluster_feed_next(c);
}

static void cluster_on_feed_head(void *arg, const struct store_reply *r)
{
    struct cluster *c = arg;
    if (!cluster_reply_ok(c, r))
        return;
    char text[64] = "";
    if (r->status == 0 && r->len < sizeof(text)) {
        memcpy(text, r->data, r->len);
        text[r->len] = '\0';
    }
    char *colon = strchr(text, ':');
    if (!colon || colon - text >= (ptrdiff_t)sizeof(c->feed_gen)) {
        c->feed_inflight = false;
        return;
    }
    *colon = '\0';
    int64_t head = strtoll(colon + 1, NULL, 10);
    if (strcmp(text, c->feed_gen) != 0) {
        /* A new coordinator: its feed starts over. Only the newest chunks
         * matter to a member (its followers have the rest as history). */
        snprintf(c->feed_gen, sizeof(c->feed_gen), "%s", text);
        c->feed_next = head > 4 ? head - 3 : 1;
        if (c->fh.reset)
            c->fh.reset(c->fh.ctx);
    }
    c->feed_head = head;
    cluster_feed_next(c);
}

/* Marks the coordinator's own entry in a node table. */
static json_t *cluster_mark_coordinator(struct cluster *c, json_t *nodes)
{
    size_t i;
    json_t *n;
    json_array_foreach(nodes, i, n)
    {
        const char *id = json_string_value(json_object_get(n, "node"));
        json_object_set_new(
            n, "role", json_string(id && strcmp(id, c->node_id) == 0 ? "coordinator" : "member"));
    }
    return nodes;
}

int cluster_job_start(struct cluster *c, int64_t job, uid_t owner, const char *spec_json,
                      int nodes_min, int nodes_max, int max_restarts, int wait_timeout_s,
                      struct gpt_err *err)
{
    return cluster_job_resume(c, job, owner, spec_json, nodes_min, nodes_max, max_restarts, 0,
                              wait_timeout_s, -1, NULL, -1, err);
}

int cluster_job_resume(struct cluster *c, int64_t job, uid_t owner, const char *spec_json,
                       int nodes_min, int nodes_max, int max_restarts, int restarts,
                       int wait_timeout_s, int64_t resume_step, const char *resume_what,
                       int64_t newest_snap, struct gpt_err *err)
{
    if (!c->coord)
        return gpt_err_set(err, -EINVAL, NULL, "not the coordinator");
    struct rdzv_job j = {.id = job,
                         .owner_uid = owner,
                         .spec_json = spec_json,
                         .nodes_min = nodes_min,
                         .nodes_max = nodes_max,
                         .max_restarts = max_restarts,
                         .restarts = restarts,
                         .wait_timeout_s = wait_timeout_s,
                         .resume_chosen = resume_step >= 0,
                         .resume_step = resume_step,
                         .resume_what = resume_what,
                         .newest_snap = resume_step >= 0 ? -1 : newest_snap};
    return rdzv_coord_job_start(c->coord, cluster_coord_now(), &j, err);
}

void cluster_job_stop(struct cluster *c)
{
    if (c->coord)
        rdzv_coord_job_stop(c->coord, cluster_coord_now());
}

json_t *cluster_nodes_json(struct cluster *c)
{
    if (c->coord)
        return cluster_mark_coordinator(c, rdzv_coord_nodes_json(c->coord, cluster_now()));
    return c->nodes_cache ? json_deep_copy(c->nodes_cache) : json_array();
}

/* ---- the timer ---- */

static void cluster_on_tick(uv_timer_t *t)
{
    struct cluster *c = t->data;
    double now = cluster_now();
    if (c->closing)
        return;
    if (c->coord)
        cluster_coord_duty(c, now);
    cluster_leave_check(c, now);
    /* Requests time out while no connection carries them too. */
    if (c->nc_state != CONN_READY)
        cluster_poll_submits(c, now);

    if (c->nc_state == CONN_NONE && now >= c->retry_at) {
        cluster_connect(c, now);
        return;
    }
    if (c->nc_state == CONN_CONNECTING) {
        if (now - c->nc_since > CLUSTER_CONNECT_S)
            cluster_conn_lost(c, "connect timed out");
        return;
    }
    if (c->nc_state != CONN_READY)
        return;
    /* A store that stops answering is as gone as one that hung up: this is
     * how a partitioned node notices. */
    if (c->inflight > 0 && now - c->last_progress > c->o.dead_after_s) {
        cluster_conn_lost(c, "no reply");
        return;
    }
    if (c->hb_soon || now >= c->next_hb) {
        c->hb_soon = false;
        c->next_hb = now + c->o.heartbeat_s;
        cluster_heartbeat(c);
    }
    cluster_flush(c);
    /* Sending may have found the connection gone (and closed it). */
    if (c->nc_state != CONN_READY)
        return;
    if (!c->poll_inflight && now >= c->next_poll) {
        c->next_poll = now + CLUSTER_POLL_S;
        int rc = store_client_async_get(c->nc, RDZV_KEY_ROUND, cluster_on_round, c);
        if (rc == 0) {
            c->poll_inflight = true;
            c->inflight++;
        } else if (rc == -EPIPE) {
            cluster_conn_lost(c, "connection closed");
            return;
        }
    }
    if (!c->coord && c->nc_state == CONN_READY && now >= c->next_nodes) {
        c->next_nodes = now + CLUSTER_NODES_S;
        if (store_client_async_get(c->nc, RDZV_KEY_NODES, cluster_on_nodes, c) == 0)
            c->inflight++;
    }
    if (!c->coord && c->fh.record && !c->feed_inflight && now >= c->next_feed) {
        c->next_feed = now + CLUSTER_FEED_S;
        if (store_client_async_get(c->nc, CLUSTER_KEY_FEED_HEAD, cluster_on_feed_head, c) == 0) {
            c->feed_inflight = true;
            c->inflight++;
        }
    }
    cluster_poll_submits(c, now);
}

/* ---- life cycle ---- */

int cluster_new(uv_loop_t *loop, const struct cluster_opts *o, struct cluster **ret,
                struct gpt_err *err)
{
    struct cluster *c = calloc(1, sizeof(*c));
    if (!c)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    c->loop = loop;
    c->o = *o;
    snprintf(c->node_id, sizeof(c->node_id), "%s", o->node_id);
    snprintf(c->host, sizeof(c->host), "%s", o->host);
    snprintf(c->addr, sizeof(c->addr), "%s", o->addr ? o->addr : "127.0.0.1");
    snprintf(c->version, sizeof(c->version), "%s", o->version ? o->version : "");
    c->o.node_id = c->node_id;
    c->o.host = c->host;
    c->o.addr = c->addr;
    c->o.version = c->version;
    c->o.secret = NULL;
    snprintf(c->secret_file, sizeof(c->secret_file), "%s", o->secret_file ? o->secret_file : "");
    snprintf(c->secret_hint, sizeof(c->secret_hint), "%s", o->secret_hint ? o->secret_hint : "");
    c->o.secret_file = c->secret_file;
    c->o.secret_hint = c->secret_hint;
    if (o->secret_len) {
        c->secret = malloc(o->secret_len);
        if (!c->secret) {
            free(c);
            return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        }
        memcpy(c->secret, o->secret, o->secret_len);
        c->secret_len = o->secret_len;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    c->inc = ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 40);
    c->backoff_ms = CLUSTER_BACKOFF_MIN_MS;
    int rc;
    if (o->coordinator) {
        /* Every node holds one connection, and one more while its workers
         * exchange ring addresses. */
        struct store_server_opts so = {.secret = c->secret,
                                       .secret_len = c->secret_len,
                                       .secret_hint = c->secret_hint,
                                       .max_clients = 2 * RDZV_NODES_MAX + 64};
        if ((rc = store_server_new(loop, &so, &c->server, err)) < 0)
            goto fail;
        if ((rc = store_server_start(c->server, c->host, o->port, &c->o.port, err)) < 0) {
            store_server_close(c->server, NULL, NULL);
            c->server = NULL;
            goto fail;
        }
        struct rdzv_opts ro = {.dead_after_s = o->dead_after_s,
                               .last_call_s = o->last_call_s,
                               .admit_snapshot_steps = o->admit_snapshot_steps};
        struct rdzv_hooks rh = {c,
                                cluster_publish,
                                cluster_coord_event,
                                cluster_coord_world,
                                cluster_coord_waiting,
                                cluster_coord_finished,
                                cluster_coord_restarts};
        uint64_t gen = c->inc ^ ((uint64_t)ts.tv_nsec << 32);
        c->coord = rdzv_coord_new(gen ? gen : 1, &ro, &rh);
        if (!c->coord) {
            rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
            store_server_close(c->server, NULL, NULL);
            c->server = NULL;
            goto fail;
        }
        /* The coordinator lists itself at once, before its first heartbeat
         * has gone round through its own store. */
        struct rdzv_msg self = {.type = RDZV_MSG_HB,
                                .inc = c->inc,
                                .round = -1,
                                .workers = o->workers > 0 ? o->workers : 1,
                                .exit_round = -1};
        snprintf(self.node, sizeof(self.node), "%s", c->node_id);
        snprintf(self.addr, sizeof(self.addr), "%s", c->addr);
        snprintf(self.version, sizeof(self.version), "%s", c->version);
        snprintf(self.state, sizeof(self.state), "idle");
        devices_summary(self.devices, sizeof(self.devices));
        rdzv_coord_message(c->coord, cluster_now(), &self);
        log_info("cluster: coordinator serving the store at %s:%d", c->host, c->o.port);
    }
    uv_timer_init(loop, &c->timer);
    c->timer.data = c;
    uv_timer_start(&c->timer, cluster_on_tick, 0, CLUSTER_TICK_MS);
    *ret = c;
    return 0;
fail:
    free(c->secret);
    free(c);
    return rc;
}

void cluster_set_node_hooks(struct cluster *c, const struct cluster_node_hooks *h)
{
    c->nh = *h;
}

void cluster_set_jobs_hooks(struct cluster *c, const struct cluster_jobs_hooks *h)
{
    c->jh = *h;
}

void cluster_set_read_hook(struct cluster *c, cluster_read_fn fn, void *ctx)
{
    c->read_fn = fn;
    c->read_ctx = ctx;
}

void cluster_set_feed_hooks(struct cluster *c, const struct cluster_feed_hooks *h)
{
    c->fh = *h;
}

static void cluster_maybe_done(struct cluster *c)
{
    if (c->closing_handles > 0)
        return;
    void (*done)(void *) = c->done;
    void *ctx = c->done_ctx;
    rdzv_coord_free(c->coord);
    json_decref(c->nodes_cache);
    json_decref(c->feed_pending);
    free(c->out);
    free(c->drain_val);
    free(c->secret);
    free(c);
    if (done)
        done(ctx);
}

static void cluster_on_cc_closed(void *arg)
{
    struct cluster *c = arg;
    c->closing_handles--;
    if (c->closing)
        cluster_maybe_done(c);
}

static void cluster_on_handle_closed(uv_handle_t *h)
{
    struct cluster *c = h->data;
    c->closing_handles--;
    cluster_maybe_done(c);
}

static void cluster_on_server_closed(void *arg)
{
    struct cluster *c = arg;
    c->closing_handles--;
    cluster_maybe_done(c);
}

void cluster_close(struct cluster *c, void (*done)(void *ctx), void *ctx)
{
    c->closing = true;
    c->done = done;
    c->done_ctx = ctx;
    c->nh.lost = NULL;
    c->nh.round = NULL;
    while (c->submits) {
        struct gpt_err err;
        gpt_err_set(&err, -ECANCELED, NULL, "gptd is stopping");
        cluster_submit_end(c, c->submits, -ECANCELED, 0, NULL, &err);
    }
    if (c->nc) {
        struct store_client_async *a = c->nc;
        c->nc = NULL;
        c->closing_handles++;
        store_client_async_close(a, cluster_on_cc_closed, c);
    }
    if (c->cc) {
        struct store_client_async *a = c->cc;
        c->cc = NULL;
        c->cc_state = CONN_NONE;
        c->closing_handles++;
        store_client_async_close(a, cluster_on_cc_closed, c);
    }
    if (c->server) {
        c->closing_handles++;
        store_server_close(c->server, cluster_on_server_closed, c);
        c->server = NULL;
    }
    c->closing_handles++;
    uv_close((uv_handle_t *)&c->timer, cluster_on_handle_closed);
}
