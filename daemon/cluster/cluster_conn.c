/*
 * cluster_conn: what the parts of the cluster (cluster_round.c,
 * cluster_inbox.c, cluster_feed.c) and cluster.c share about the node's
 * connection and the coordinator's documents: every reply's first check,
 * the loss of the connection, a heartbeat sooner, a message's header and
 * publishing a key. The layer they call down to: it calls none of them,
 * and reaches cluster.c only through the two callbacks cluster_new sets
 * (parts_disconnected, tick). Loop thread only.
 */
#include "cluster_impl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "monotime.h"
#include "store_server.h"

/* ---- the node's connection ---- */

void cluster_conn_lost(struct cluster *c, const char *why)
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
    c->ob.append_inflight = false;
    c->retry_at = monotime_s() + c->backoff_ms / 1e3;
    c->backoff_ms =
        c->backoff_ms * 2 > CLUSTER_BACKOFF_MAX_MS ? CLUSTER_BACKOFF_MAX_MS : c->backoff_ms * 2;
    c->parts_disconnected(c); /* the round watch, the requests, the feed */
    if (c->leave_state)
        c->leave_deadline = 0; /* nothing more can be sent: done at the next tick */
    if (!c->lost_reported && c->nh.lost) {
        c->lost_reported = true;
        c->nh.lost(c->nh.ctx);
    }
}

bool cluster_reply_ok(struct cluster *c, const struct store_reply *r)
{
    if (r->status == -ECANCELED || !c->nc)
        return false; /* the connection is being torn down */
    if (c->inflight > 0)
        c->inflight--;
    c->last_progress = monotime_s();
    if (r->status == -ECONNRESET || r->status == -EPIPE || r->status == -GPT_E_PROTO) {
        cluster_conn_lost(c, gpt_strerror(r->status));
        return false;
    }
    return true;
}

void cluster_heartbeat_soon(struct cluster *c)
{
    c->hb_soon = true;
    if (!c->closing)
        uv_timer_start(&c->timer, c->tick, 0, CLUSTER_TICK_MS);
}

void cluster_start_msg(struct cluster *c, struct cluster_msg *m, int type)
{
    cluster_msg_init(m, type);
    if ((type == CLUSTER_MSG_HB || type == CLUSTER_MSG_JOIN) && c->o.instance) {
        m->iid = c->o.instance;
        m->present |= CLUSTER_MSG_BIT(IID);
    }
    snprintf(m->node, sizeof(m->node), "%s", c->node_id);
    m->inc = c->inc;
}

/* ---- the coordinator's documents ---- */

void cluster_on_publish(void *arg, const struct store_reply *r)
{
    (void)arg;
    (void)r;
}

void cluster_publish(void *ctx, const char *key, const char *value)
{
    struct cluster *c = ctx;
    /* The coordinator owns the store: it writes its documents in-process
     * (a round's world is one SET per node), not through a connection to
     * itself. */
    if (c->server) {
        int rc = value ? store_server_set(c->server, key, value, strlen(value))
                       : store_server_delete(c->server, key);
        if (rc < 0)
            log_warn("cluster: cannot publish %s: %s", key, gpt_strerror(rc));
        return;
    }
    if (c->cc_state != CONN_READY)
        return;
    if (value)
        (void)store_client_async_set(c->cc, key, value, strlen(value), cluster_on_publish, c);
    else
        (void)store_client_async_delete(c->cc, key, cluster_on_publish, c);
}
