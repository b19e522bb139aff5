/*
 * cluster_round: what a node tells the coordinator and hears from it
 * without the inbox: its heartbeat (HEARTBEAT into the store's heartbeat
 * table, overwritten in place) and the round (a WATCH of its own round
 * key, RDZV_KEY_NODE_PREFIX<id>); on the coordinator, the drain of that table
 * into the round protocol. Owns struct cluster's round_watch, cur_version
 * and cur_seq (see cluster_impl.h).
 *
 * How a node's report travels: cluster_heartbeat() builds one "hb"
 * cluster_msg (proto/cluster_msg.h), the node hooks add the agent's
 * fields, and the whole JSON object is the HEARTBEAT value under the node
 * id (at most GPT_STORE_HB_VALUE_MAX bytes). The coordinator decodes a
 * report only when it differs from the node's previous one, so a field
 * that changes every second (telemetry) costs a decode per node and
 * second, nothing more.
 *
 * Loop thread only.
 */
#include "cluster_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices.h"
#include "log.h"
#include "monotime.h"
#include "nvml.h"
#include "store_server.h"

#define CLUSTER_WATCH_MS 30000 /* a parked round watch is renewed this often */

/* ---- heartbeats ---- */

static void cluster_on_hb_sent(void *arg, const struct store_reply *r)
{
    struct cluster *c = arg;
    if (!cluster_reply_ok(c, r))
        return;
    if (r->status == -EEXIST) {
        /* Another live node holds this id: this one takes no part until it
         * is gone (a heartbeat is taken again then). */
        if (!c->hb_refused) {
            snprintf(c->refused_msg, sizeof(c->refused_msg), "%.*s",
                     (int)(r->len < 2048 ? r->len : 2048), (const char *)r->data);
            log_error("cluster: the coordinator refused this node: %s", c->refused_msg);
            c->hb_refused = true;
            if (c->nh.lost)
                c->nh.lost(c->nh.ctx);
        }
        return;
    }
    if (r->status < 0) {
        log_warn("cluster: heartbeat refused by the store: %s", gpt_strerror(r->status));
        return;
    }
    if (c->hb_refused) {
        log_notice("cluster: the coordinator took this node in as %s", c->node_id);
        c->hb_refused = false;
        /* The rounds read meanwhile were the other node's: a WATCH from
         * version 0 replaces the parked one and answers at once. */
        c->cur_version = 0;
        c->round_watch = false;
        cluster_round_watch(c);
    }
}

void cluster_heartbeat(struct cluster *c)
{
    struct cluster_msg hb;
    cluster_start_msg(c, &hb, CLUSTER_MSG_HB);
    snprintf(hb.addr, sizeof(hb.addr), "%s", c->addr);
    snprintf(hb.version, sizeof(hb.version), "%s", c->version);
    devices_summary(hb.devices, sizeof(hb.devices));
    nvml_gpus_local(hb.gpus, sizeof(hb.gpus));
    hb.workers = c->o.workers;
    hb.present |= CLUSTER_MSG_BIT(ADDR) | CLUSTER_MSG_BIT(VER) | CLUSTER_MSG_BIT(WORKERS) |
                  CLUSTER_MSG_BIT(DEV) | CLUSTER_MSG_BIT(GPU);
    if (c->nh.heartbeat)
        c->nh.heartbeat(c->nh.ctx, &hb);
    /* The report goes to the store's heartbeat table under this node's id,
     * overwriting the last one (proto/store.h HEARTBEAT): O(1) on the
     * coordinator per node and interval, and a join (state "joined") is
     * simply the newest report. Only when connected: on connect a fresh
     * one goes at once. */
    char *line = NULL;
    size_t n = 0;
    struct gpt_err err;
    if (c->nc_state != CONN_READY)
        return;
    if (cluster_msg_encode(&hb, &line, &n, &err) < 0) {
        log_warn("cluster: heartbeat not sent: %s", err.msg);
        return;
    }
    int rc = store_client_async_heartbeat(c->nc, c->node_id, line, n, cluster_on_hb_sent, c);
    free(line);
    if (rc == 0)
        c->inflight++;
    else if (rc == -EPIPE)
        cluster_conn_lost(c, "connection closed");
    else
        log_warn("cluster: heartbeat not sent: %s", gpt_strerror(rc));
}

/* ---- the round, through a watch ----
 *
 * The node WATCHes its own round key (RDZV_KEY_NODE_PREFIX<id>: the round
 * of the job it is placed on, with its assignment "me" while it is in a
 * world, or an idle round) with the version it last saw: the store
 * answers once the coordinator publishes a newer one (or after
 * CLUSTER_WATCH_MS, to renew it), and the node watches again at once. No
 * node polls. A parked watch is not a request in flight: it does not count
 * towards the dead-store check (heartbeat replies do). */

static void cluster_round_key(const struct cluster *c, char *key, size_t size)
{
    snprintf(key, size, RDZV_KEY_NODE_PREFIX "%s", c->node_id);
}

/* A round as published: decoded (proto/round_doc.h) and handed to the
 * node hooks. A document that fails its table is logged once per version
 * and dropped: the node keeps the round it has. */
static void cluster_round_value(struct cluster *c, const void *data, size_t len)
{
    struct round_doc cur;
    struct gpt_err err;
    c->cur_seq++;
    if (c->hb_refused)
        return; /* the round of the node that holds this id */
    if (round_doc_decode(data, len, &cur, &err) < 0) {
        log_warn("cluster: round %s%s: %s", RDZV_KEY_NODE_PREFIX, c->node_id, err.msg);
        return;
    }
    if (c->nh.round)
        c->nh.round(c->nh.ctx, &cur);
    else
        round_doc_done(&cur);
}

static void cluster_on_round_watch(void *arg, const struct store_reply *r);

/* Parks the round watch unless one is; the tick retries a failed start. */
void cluster_round_watch(struct cluster *c)
{
    if (c->round_watch || c->nc_state != CONN_READY)
        return;
    char key[sizeof(RDZV_KEY_NODE_PREFIX) + RDZV_NODE_ID_MAX];
    cluster_round_key(c, key, sizeof(key));
    int rc = store_client_async_watch(c->nc, key, c->cur_version, CLUSTER_WATCH_MS,
                                      cluster_on_round_watch, c);
    if (rc == 0)
        c->round_watch = true;
    else if (rc == -EPIPE)
        cluster_conn_lost(c, "connection closed");
}

static void cluster_on_round_watch(void *arg, const struct store_reply *r)
{
    struct cluster *c = arg;
    c->round_watch = false;
    if (r->status == -ECANCELED || !c->nc)
        return;
    if (r->status == -ECONNRESET || r->status == -EPIPE || r->status == -GPT_E_PROTO) {
        cluster_conn_lost(c, gpt_strerror(r->status));
        return;
    }
    c->last_progress = monotime_s();
    if (r->status == -ENOENT)
        c->cur_version = 0;
    if (r->status == 0) {
        c->cur_version = r->version;
        cluster_round_value(c, r->data, r->len);
    }
    /* -ETIMEDOUT: renewed; -GPT_E_LIMIT: retried by the tick */
    if (r->status != -GPT_E_LIMIT && c->nc_state == CONN_READY)
        cluster_round_watch(c);
}

void cluster_round_disconnected(struct cluster *c)
{
    c->round_watch = false; /* ended with -ECANCELED by the close */
    c->cur_version = 0;
    c->cur_seq++;
}

/* ---- the coordinator: the heartbeat table ---- */

/* One node's heartbeat report from the store's table: the same report as
 * before only refreshes the node's time; a new one (or one of a node the
 * round protocol must look at) is decoded and fed whole. A report under
 * another node's name is dropped. */
static void cluster_on_hb_report(void *arg, const struct store_server_hb *hb)
{
    struct cluster *c = arg;
    double at = monotime_s() - (double)hb->age_ms / 1e3;
    if (!hb->changed && rdzv_coord_touch(c->coord, at, hb->key))
        return;
    struct cluster_msg m;
    struct gpt_err err;
    if (cluster_msg_decode((const char *)hb->val, hb->len, &m, &err) < 0) {
        log_debug("cluster: heartbeat of %s dropped: %s", hb->key, err.msg);
        return;
    }
    if ((m.type == CLUSTER_MSG_HB || m.type == CLUSTER_MSG_JOIN) && strcmp(m.node, hb->key) == 0)
        rdzv_coord_message(c->coord, at, &m);
    else
        log_debug("cluster: heartbeat table entry %s holds a %s of %s: dropped", hb->key,
                  cluster_msg_type_name(m.type), m.node);
    cluster_msg_done(&m);
}

int cluster_hb_admit(void *arg, const char *key, const void *val, size_t len, const char *peer,
                     const char *holder, char *why, size_t cap)
{
    struct cluster *c = arg;
    struct cluster_msg m;
    struct gpt_err err;
    if (!c->coord || cluster_msg_decode(val, len, &m, &err) < 0)
        return 0; /* the drain drops what does not decode */
    int rc = 0;
    if ((m.type == CLUSTER_MSG_HB || m.type == CLUSTER_MSG_JOIN) && strcmp(m.node, key) == 0)
        rc = rdzv_coord_admit(c->coord, monotime_s(), &m, peer, holder, why, cap);
    cluster_msg_done(&m);
    return rc;
}

void cluster_hb_drain(struct cluster *c, double now)
{
    if (store_server_hb_drain(c->server, cluster_on_hb_report, c) > 0)
        rdzv_coord_tick(c->coord, now);
}
