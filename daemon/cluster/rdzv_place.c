/*
 * rdzv_place: where the coordinator's jobs run (see rdzv.h): which free
 * nodes a job is given, and what each node reads, its own round key
 * RDZV_KEY_NODE_PREFIX<id> (its job's round, or an idle one). Part of the
 * round protocol (rdzv_impl.h): rdzv.c decides when; this file places and
 * publishes. Single-threaded.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv.h"
#include "rdzv_impl.h"

/* A node that can run jobs, on one now or not: alive, not leaving, and
 * reporting a state (an agent runs there). */
static bool rdzv_node_usable(const struct rdzv_cnode *nd)
{
    return nd->alive && !nd->left && nd->state[0];
}

bool rdzv_node_free(const struct rdzv_cnode *nd)
{
    return rdzv_node_usable(nd) && !nd->jr && nd->quarantine_until <= 0;
}

void rdzv_quarantined_note(const struct rdzv_coord *c, char *buf, size_t cap)
{
    size_t off = strlen(buf);
    int k = 0;
    for (size_t i = 0; i < c->n && off < cap; i++) {
        const struct rdzv_cnode *nd = &c->nodes[i];
        if (!rdzv_node_usable(nd) || nd->quarantine_until <= 0)
            continue;
        off +=
            (size_t)snprintf(buf + off, cap - off, "%s%s", k++ ? ", " : "; quarantined: ", nd->id);
    }
}

int rdzv_coord_free_nodes(const struct rdzv_coord *c)
{
    int n = 0;
    for (size_t i = 0; i < c->n; i++)
        n += rdzv_node_free(&c->nodes[i]);
    return n;
}

int rdzv_coord_alive_nodes(const struct rdzv_coord *c)
{
    int n = 0;
    for (size_t i = 0; i < c->n; i++)
        n += rdzv_node_usable(&c->nodes[i]);
    return n;
}

int rdzv_coord_job_fits(const struct rdzv_coord *c, int nodes_min, bool alone_short,
                        struct gpt_err *err)
{
    int nmin = nodes_min > 0 ? nodes_min : 1;
    if (alone_short && c->njobs == 0)
        return 0; /* it takes what there is and waits for more */
    /* More than the cluster has: no job's end makes room, only nodes
     * joining do, so the queue places the jobs behind it meanwhile. */
    int nalive = rdzv_coord_alive_nodes(c);
    if (nalive < nmin)
        return gpt_err_set(err, -ENOSPC, NULL, "needs %d node%s, cluster has %d", nmin,
                           nmin == 1 ? "" : "s", nalive);
    int nfree = rdzv_coord_free_nodes(c);
    if (nfree < nmin) {
        char quar[160] = "";
        rdzv_quarantined_note(c, quar, sizeof(quar));
        return gpt_err_set(err, -EAGAIN, NULL, "needs %d node%s, %d free%s", nmin,
                           nmin == 1 ? "" : "s", nfree, quar);
    }
    return 0;
}

int rdzv_placed_alive(const struct rdzv_coord *c, const struct rdzv_jrun *j)
{
    int n = 0;
    for (size_t i = 0; i < c->n; i++)
        n += c->nodes[i].jr == j && c->nodes[i].alive;
    return n;
}

/* Whether node `id` is a line of `lines` (one id a line). */
static bool rdzv_id_listed(const char *lines, const char *id)
{
    size_t n = strlen(id);
    for (const char *p = lines; p && *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && memcmp(p, id, n) == 0)
            return true;
        p = e ? e + 1 : p + len;
    }
    return false;
}

/* Free nodes that hold the job's snapshot first (j->snap_nodes), then any
 * free node in table order. */
void rdzv_place(struct rdzv_coord *c, struct rdzv_jrun *j, int want)
{
    for (int pass = j->snap_nodes ? 0 : 1; pass < 2; pass++) {
        for (size_t i = 0; i < c->n && want > 0; i++) {
            struct rdzv_cnode *nd = &c->nodes[i];
            if (!rdzv_node_free(nd) || (pass == 0 && !rdzv_id_listed(j->snap_nodes, nd->id)))
                continue;
            nd->jr = j;
            nd->member = nd->prev_member = false;
            nd->joined_round = -1;
            nd->exit_round = -1;
            rdzv_publish_node(c, nd);
            want--;
        }
    }
}

void rdzv_unplace(struct rdzv_coord *c, struct rdzv_cnode *nd)
{
    nd->jr = NULL;
    nd->member = nd->prev_member = false;
    nd->joined_round = -1;
    nd->exit_round = -1;
    rdzv_publish_node(c, nd);
}

static void rdzv_publish_json(struct rdzv_coord *c, const char *key, json_t *o)
{
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (text)
        c->h.publish(c->h.ctx, key, text);
    free(text);
}

/* The round text of nd's job (or the idle one): a new string, NULL on
 * ENOMEM (published on the next change). */
static char *rdzv_round_text(struct rdzv_coord *c, const struct rdzv_jrun *j)
{
    json_t *o = rdzv_jrun_json(c, j, false);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}

/* Sets nd's round key to `base` (its job's round text, a JSON object),
 * with its assignment "me" spliced in while it is in a world. */
static void rdzv_publish_text(struct rdzv_coord *c, struct rdzv_cnode *nd, const char *base)
{
    const struct rdzv_jrun *j = nd->jr;
    char key[sizeof(RDZV_KEY_NODE_PREFIX) + RDZV_NODE_ID_MAX];
    snprintf(key, sizeof(key), RDZV_KEY_NODE_PREFIX "%s", nd->id);
    if (j && nd->member && (j->phase == RDZV_RUNNING || j->phase == RDZV_STOPPING)) {
        json_t *me = rdzv_member_json(nd);
        char *mt = me ? json_dumps(me, JSON_COMPACT) : NULL;
        json_decref(me);
        size_t blen = strlen(base), n = blen + (mt ? strlen(mt) : 0) + 8;
        char *buf = mt && blen > 1 ? malloc(n) : NULL;
        if (!buf) {
            free(mt);
            return; /* published on the next change */
        }
        snprintf(buf, n, "%.*s,\"me\":%s}", (int)(blen - 1), base, mt);
        c->h.publish(c->h.ctx, key, buf);
        free(buf);
        free(mt);
    } else {
        c->h.publish(c->h.ctx, key, base);
    }
    nd->pub_done = true;
    nd->pub_job = j ? j->job : 0;
    nd->pub_ver = j ? j->version : 0;
}

static bool rdzv_node_current(const struct rdzv_cnode *nd)
{
    const struct rdzv_jrun *j = nd->jr;
    return nd->pub_done && nd->pub_job == (j ? j->job : 0) && nd->pub_ver == (j ? j->version : 0);
}

void rdzv_publish_node(struct rdzv_coord *c, struct rdzv_cnode *nd)
{
    if (rdzv_node_current(nd) || !c->h.publish)
        return;
    char *base = rdzv_round_text(c, nd->jr);
    if (base)
        rdzv_publish_text(c, nd, base);
    free(base);
}

void rdzv_publish_job(struct rdzv_coord *c, struct rdzv_jrun *j)
{
    j->version++;
    if (!c->h.publish)
        return;
    /* One text for every node of the job; members add their assignment. */
    char *base = rdzv_round_text(c, j);
    if (!base)
        return;
    for (size_t i = 0; i < c->n; i++)
        if (c->nodes[i].jr == j && !rdzv_node_current(&c->nodes[i]))
            rdzv_publish_text(c, &c->nodes[i], base);
    free(base);
}

void rdzv_publish_world(struct rdzv_coord *c, struct rdzv_jrun *j, int64_t prev_round)
{
    if (!c->h.publish)
        return;
    char key[64];
    if (prev_round > 0) {
        snprintf(key, sizeof(key), "rdzv/%" PRId64 "/world", prev_round);
        c->h.publish(c->h.ctx, key, NULL);
    }
    snprintf(key, sizeof(key), "rdzv/%" PRId64 "/world", j->round);
    rdzv_publish_json(c, key, rdzv_jrun_json(c, j, true));
}

void rdzv_coord_republish(struct rdzv_coord *c)
{
    for (int i = 0; i < c->njobs; i++)
        if (c->jobs[i]->phase == RDZV_RUNNING || c->jobs[i]->phase == RDZV_STOPPING)
            rdzv_publish_world(c, c->jobs[i], 0);
    for (size_t i = 0; i < c->n; i++) {
        c->nodes[i].pub_done = false;
        rdzv_publish_node(c, &c->nodes[i]);
    }
}
