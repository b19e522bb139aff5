/*
 * cluster: node identity, the store connections, leaving, the node table
 * and, on the coordinator, the store server and the round protocol's hooks
 * (see cluster.h). Heartbeats and the round watch are in cluster_round.c,
 * the outbox, requests and inbox in cluster_inbox.c, the feed in
 * cluster_feed.c (see cluster_impl.h). One periodic timer drives
 * everything, redis-cron style, with sub-periods per duty.
 *
 * Every store callback gets the cluster itself as its argument: the
 * cluster outlives its clients (cluster_close closes them first), and a
 * callback that reports a failure only clears its in-flight flag.
 *
 * Loop thread only.
 */
#include "cluster_impl.h"

#include "devices.h"
#include "nvml.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "monotime.h"
#include "store_server.h"

#define CLUSTER_NODES_WANTED_S 30.0 /* a member reads the node table this long after a look */
#define CLUSTER_NODES_S        1.0  /* how often the node table is published/read */
#define CLUSTER_CONNECT_S      2.0  /* a connect (and handshake) slower than this is retried */
#define CLUSTER_LEAVE_S        1.0  /* how long a leave waits to reach the store */

bool cluster_is_coordinator(const struct cluster *c)
{
    return c->o.coordinator;
}

uint64_t cluster_incarnation(const struct cluster *c)
{
    return c->inc;
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
        if (status == -EACCES) {
            /* Another node holds this id's key (or this node lost its own). */
            snprintf(c->refused_msg, sizeof(c->refused_msg), "%s",
                     store_client_async_refusal(c->nc));
            if (!c->refused)
                log_error("cluster: the coordinator at %s:%d refused this node: %s", c->host,
                          c->o.port, c->refused_msg);
            c->refused = true;
        }
        c->nc_state = CONN_CONNECTING; /* reported as a loss below without the warning */
        cluster_conn_lost(c, gpt_strerror(status));
        return;
    }
    log_info("cluster: connected to the store at %s:%d as %s", c->host, c->o.port, c->node_id);
    if (c->refused)
        log_notice("cluster: the coordinator took this node in as %s", c->node_id);
    c->refused = false;
    c->nc_state = CONN_READY;
    c->backoff_ms = CLUSTER_BACKOFF_MIN_MS;
    c->last_progress = monotime_s();
    c->lost_reported = false;
    c->hb_soon = true;
    c->cur_version = 0;
    cluster_round_watch(c);
}

static void cluster_connect(struct cluster *c, double now)
{
    struct store_client_async_opts ao = {.host = c->host,
                                         .port = c->o.port,
                                         .secret = c->secret,
                                         .secret_len = c->secret_len,
                                         .node = c->node_id,
                                         .node_key = cluster_node_key_own(c),
                                         .node_key_issued = cluster_own_key_issued,
                                         .node_key_arg = c};
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

static void cluster_on_tick(uv_timer_t *t);

/* The node's connection is gone (cluster_conn_lost): each part forgets
 * what was in flight on it. */
static void cluster_parts_disconnected(struct cluster *c)
{
    cluster_round_disconnected(c);
    cluster_requests_disconnected(c);
    cluster_feed_disconnected(c);
}

void cluster_leave(struct cluster *c, void (*done)(void *arg), void *arg)
{
    c->leave_done = done;
    c->leave_arg = arg;
    c->leave_state = 1;
    c->leave_deadline = c->nc_state == CONN_READY ? monotime_s() + CLUSTER_LEAVE_S : 0;
    struct cluster_msg m;
    cluster_start_msg(c, &m, CLUSTER_MSG_LEAVE);
    cluster_send(c, &m);
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

static void cluster_on_nodes(void *arg, const struct store_reply *r)
{
    struct cluster *c = arg;
    if (!cluster_reply_ok(c, r) || r->status < 0)
        return;
    /* Checked against its table (proto/round_doc.h) and kept as encoded
     * from the rows, so a reply never passes on what the table refuses. */
    struct round_node *rows;
    size_t n;
    struct gpt_err err;
    if (round_nodes_decode(r->data, r->len, &rows, &n, &err) < 0) {
        log_warn("cluster: %s: %s", RDZV_KEY_NODES, err.msg);
        return;
    }
    json_t *table = round_nodes_to_json(rows, n);
    round_nodes_free(rows, n);
    if (table) {
        json_decref(c->nodes_cache);
        c->nodes_cache = table;
    }
}

/* ---- the coordinator ---- */

static void cluster_coord_event(void *ctx, int64_t job, int64_t step, const char *kind,
                                const char *msg)
{
    struct cluster *c = ctx;
    log_notice("cluster: %s: %s", kind, msg);
    if (!job || !c->jh.event)
        return;
    struct gpt_event e;
    memset(&e, 0, sizeof(e));
    snprintf(e.kind, sizeof(e.kind), "%s", kind);
    snprintf(e.message, sizeof(e.message), "%s", msg);
    e.step = step; /* -1: the job's newest step (filled in by the job queue) */
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

static void cluster_coord_restarts(void *ctx, int64_t job, int restarts)
{
    struct cluster *c = ctx;
    if (c->jh.restarts)
        c->jh.restarts(c->jh.ctx, job, restarts);
}

static void cluster_on_cc_connect(void *arg, int status)
{
    struct cluster *c = arg;
    if (status < 0) {
        log_error("cluster: the coordinator cannot reach its own store: %s", gpt_strerror(status));
        c->cc_state = CONN_NONE;
        c->cc_retry_at = monotime_s() + 1.0;
        return;
    }
    c->cc_state = CONN_READY;
    c->feed.published_chunk = -1; /* the feed head is set again */
    /* What was decided before the connection was up (the generation, a job
     * reloaded from the database) reaches the store now. */
    rdzv_coord_republish(c->coord);
    rdzv_coord_tick(c->coord, monotime_s());
}

static void cluster_on_cc_closed(void *arg);
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
        struct store_client_async_opts ao = {.host = c->host,
                                             .port = c->o.port,
                                             .secret = c->secret,
                                             .secret_len = c->secret_len,
                                             .node = c->node_id,
                                             .node_key = cluster_node_key_own(c),
                                             .node_key_issued = cluster_own_key_issued,
                                             .node_key_arg = c};
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
    /* The inbox first: a member reports its workers' exit only after the
     * records they sent reached the store, so those are stored before the
     * round protocol hears of the exit and ends the job. */
    cluster_inbox_drain(c, now);
    cluster_hb_drain(c, now);
    cluster_feed_duty(c, now);
    if (now >= c->next_nodes_pub) {
        /* The table grows with the cluster: published less often when
         * large (every 16 s at 16,384 nodes), members read it on demand. */
        c->next_nodes_pub =
            now + CLUSTER_NODES_S * (1.0 + (double)rdzv_coord_node_count(c->coord) / 1024.0);
        json_t *n = cluster_mark_coordinator(c, rdzv_coord_nodes_json(c->coord, now));
        char *text = n ? json_dumps(n, JSON_COMPACT) : NULL;
        json_decref(n);
        if (text) {
            cluster_publish(c, RDZV_KEY_NODES, text);
            free(text);
        }
    }
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
    return cluster_job_resume(c, job, owner, 0, spec_json, nodes_min, nodes_max, max_restarts, 0,
                              wait_timeout_s, -1, NULL, -1, NULL, err);
}

int cluster_job_resume(struct cluster *c, int64_t job, uid_t owner, uint64_t token,
                       const char *spec_json, int nodes_min, int nodes_max, int max_restarts,
                       int restarts, int wait_timeout_s, int64_t resume_step,
                       const char *resume_what, int64_t newest_snap, const char *snap_nodes,
                       struct gpt_err *err)
{
    if (!c->coord)
        return gpt_err_set(err, -EINVAL, NULL, "not the coordinator");
    struct rdzv_job j = {.id = job,
                         .owner_uid = owner,
                         .token = token,
                         .spec_json = spec_json,
                         .nodes_min = nodes_min,
                         .nodes_max = nodes_max,
                         .max_restarts = max_restarts,
                         .restarts = restarts,
                         .wait_timeout_s = wait_timeout_s,
                         .resume_chosen = resume_step >= 0,
                         .resume_step = resume_step,
                         .resume_what = resume_what,
                         .newest_snap = resume_step >= 0 ? -1 : newest_snap,
                         .snap_nodes = snap_nodes};
    return rdzv_coord_job_start(c->coord, monotime_s(), &j, err);
}

void cluster_job_stop(struct cluster *c, int64_t job)
{
    if (c->coord)
        rdzv_coord_job_stop(c->coord, job, monotime_s());
}

int cluster_free_nodes(const struct cluster *c)
{
    return c->coord ? rdzv_coord_free_nodes(c->coord) : 0;
}

int cluster_job_fits(const struct cluster *c, int nodes_min, bool alone_short, struct gpt_err *err)
{
    if (!c->coord)
        return gpt_err_set(err, -EAGAIN, NULL, "this gptd is not the cluster's coordinator");
    return rdzv_coord_job_fits(c->coord, nodes_min, alone_short, err);
}

void cluster_set_queued(struct cluster *c, int queued)
{
    if (c->coord)
        rdzv_coord_set_queued(c->coord, queued);
}

struct store_server *cluster_store_server(const struct cluster *c)
{
    return c->server;
}

json_t *cluster_nodes_json(struct cluster *c)
{
    if (c->coord)
        return cluster_mark_coordinator(c, rdzv_coord_nodes_json(c->coord, monotime_s()));
    /* A member reads the table only while someone asks for it (the first
     * look gets what it has, the next ones are fresh), not all the time: at
     * thousands of nodes the table is megabytes and every member would read
     * it every second. */
    double now = monotime_s();
    if (now >= c->nodes_wanted_until)
        c->next_nodes = 0; /* read at the next tick */
    c->nodes_wanted_until = now + CLUSTER_NODES_WANTED_S;
    return c->nodes_cache ? json_deep_copy(c->nodes_cache) : json_array();
}

/* ---- the timer ---- */

/* The loop could read nothing for `blind_s` up to `now`: the clocks that
 * judge silence (the nodes' heartbeats on the coordinator, this node's wait
 * for the store's replies and for its connect) move forward by it, never
 * past `now`. */
static void cluster_blind(struct cluster *c, double now, double blind_s)
{
    if (c->coord)
        rdzv_coord_blind(c->coord, now, blind_s);
    c->last_progress = c->last_progress + blind_s < now ? c->last_progress + blind_s : now;
    c->nc_since = c->nc_since + blind_s < now ? c->nc_since + blind_s : now;
}

static void cluster_on_tick(uv_timer_t *t)
{
    struct cluster *c = t->data;
    double now = monotime_s();
    if (c->closing)
        return;
    /* A tick this late means the loop was held up (a loaded host, a slow
     * disk): the heartbeats and store replies that came meanwhile wait
     * unread in their sockets, so nobody's silence is counted for that
     * time, the store's included (timers run before the loop reads). */
    if (c->last_tick > 0 && now - c->last_tick > CLUSTER_STALL_S)
        cluster_blind(c, now, now - c->last_tick);
    c->last_tick = now;
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
     * how a partitioned node notices. With nothing in flight (between
     * heartbeats; a parked watch is not a request) the clock starts over,
     * so a request is given dead_after_s from when it was sent. */
    if (c->inflight == 0)
        c->last_progress = now;
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
    cluster_round_watch(c);
    if (c->nc_state != CONN_READY)
        return;
    if (!c->coord && c->nc_state == CONN_READY && now >= c->next_nodes &&
        now < c->nodes_wanted_until) {
        c->next_nodes = now + CLUSTER_NODES_S;
        if (store_client_async_get(c->nc, RDZV_KEY_NODES, cluster_on_nodes, c) == 0)
            c->inflight++;
    }
    cluster_feed_poll(c, now);
    cluster_poll_submits(c, now);
}

/* ---- life cycle ---- */

/* Copies the options' strings and secret into c (c->o then points at the
 * copies). */
static int cluster_keep_opts(struct cluster *c, const struct cluster_opts *o, struct gpt_err *err)
{
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
    snprintf(c->state_dir, sizeof(c->state_dir), "%s", o->state_dir ? o->state_dir : "");
    c->o.state_dir = c->state_dir;
    if (o->secret_len) {
        c->secret = malloc(o->secret_len);
        if (!c->secret)
            return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        memcpy(c->secret, o->secret, o->secret_len);
        c->secret_len = o->secret_len;
    }
    return 0;
}

/* The coordinator's part: its store server, its round protocol, and its
 * own row in the node table. */
static int cluster_coord_start(struct cluster *c, const struct cluster_opts *o, uint64_t nsec,
                               struct gpt_err *err)
{
    int rc;
    /* Every node holds one connection, and one more while its workers
     * exchange ring addresses. */
    struct store_server_opts so = {.secret = c->secret,
                                   .secret_len = c->secret_len,
                                   .secret_hint = c->secret_hint,
                                   .max_clients = 2 * RDZV_NODES_MAX + 64,
                                   .max_keys = 4 * RDZV_NODES_MAX,
                                   .hb_admit = cluster_hb_admit,
                                   .hb_arg = c,
                                   .write_admit = cluster_write_admit,
                                   .write_arg = c,
                                   .node_key = cluster_node_key,
                                   .node_key_issued = cluster_node_key_issued,
                                   .node_refused = cluster_node_refused,
                                   .node_key_arg = c};
    if ((rc = store_server_new(c->loop, &so, &c->server, err)) < 0)
        return rc;
    if ((rc = store_server_start(c->server, c->host, o->port, &c->o.port, err)) < 0)
        goto fail;
    struct rdzv_opts ro = {.dead_after_s = o->dead_after_s,
                           .last_call_s = o->last_call_s,
                           .admit_snapshot_steps = o->admit_snapshot_steps,
                           .self_node = c->node_id};
    struct rdzv_hooks rh = {c,
                            cluster_publish,
                            cluster_coord_event,
                            cluster_coord_world,
                            cluster_coord_waiting,
                            cluster_coord_finished,
                            cluster_coord_restarts};
    uint64_t gen = c->inc ^ (nsec << 32);
    c->coord = rdzv_coord_new(gen ? gen : 1, &ro, &rh);
    if (!c->coord) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        goto fail;
    }
    /* The coordinator lists itself at once, before its first heartbeat
     * has gone round through its own store. */
    struct cluster_msg self;
    cluster_msg_init(&self, CLUSTER_MSG_HB);
    self.inc = c->inc;
    self.iid = o->instance;
    self.workers = o->workers > 0 ? o->workers : 1;
    snprintf(self.node, sizeof(self.node), "%s", c->node_id);
    snprintf(self.addr, sizeof(self.addr), "%s", c->addr);
    snprintf(self.version, sizeof(self.version), "%s", c->version);
    /* No state yet: a job is placed on this node once its agent
     * reports one (its first heartbeat through the store). */
    devices_summary(self.devices, sizeof(self.devices));
    rdzv_coord_message(c->coord, monotime_s(), &self);
    log_info("cluster: coordinator serving the store at %s:%d", c->host, c->o.port);
    return 0;
fail:
    store_server_close(c->server, NULL, NULL);
    c->server = NULL;
    return rc;
}

int cluster_new(uv_loop_t *loop, const struct cluster_opts *o, struct cluster **ret,
                struct gpt_err *err)
{
    struct cluster *c = calloc(1, sizeof(*c));
    if (!c)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    c->loop = loop;
    c->parts_disconnected = cluster_parts_disconnected;
    c->tick = cluster_on_tick;
    int rc;
    if ((rc = cluster_keep_opts(c, o, err)) < 0 || (rc = cluster_keys_init(c, err)) < 0)
        goto fail;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    c->inc = ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 40);
    c->backoff_ms = CLUSTER_BACKOFF_MIN_MS;
    if (o->coordinator && (rc = cluster_coord_start(c, o, (uint64_t)ts.tv_nsec, err)) < 0)
        goto fail;
    uv_timer_init(loop, &c->timer);
    c->timer.data = c;
    uv_timer_start(&c->timer, cluster_on_tick, 0, CLUSTER_TICK_MS);
    *ret = c;
    return 0;
fail:
    cluster_keys_done(c);
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
    c->feed.h = *h;
}

static void cluster_maybe_done(struct cluster *c)
{
    if (c->closing_handles > 0)
        return;
    void (*done)(void *) = c->done;
    void *ctx = c->done_ctx;
    rdzv_coord_free(c->coord);
    json_decref(c->nodes_cache);
    cluster_feed_done(c);
    cluster_inbox_done(c);
    cluster_keys_done(c);
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
    cluster_requests_cancel(c);
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
