/*
 * cluster_feed: the coordinator's feed of job records (metrics, events,
 * ends of jobs) for the members' `logs` followers, through the store:
 * chunk n at CLUSTER_KEY_FEED_PREFIX<n> (proto/cluster_msg.h), the newest
 * named by CLUSTER_KEY_FEED_HEAD as "GEN:N"; only the newest
 * CLUSTER_FEED_KEEP chunks are kept. A member reads each chunk once, in
 * order, and starts over when a new coordinator generation appears. The
 * head is published only when it moves, and members WATCH it (no poll):
 * an idle cluster's feed costs nothing. Owns struct cluster's `feed` (see
 * cluster_impl.h).
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

#define CLUSTER_FEED_S        0.1   /* how often pending records are published */
#define CLUSTER_FEED_WATCH_MS 30000 /* a parked head watch is renewed this often */
#define CLUSTER_FEED_KEEP     64    /* feed chunks kept in the store */
#define CLUSTER_FEED_CHUNK    256   /* records in one chunk at most */
#define CLUSTER_FEED_PENDING  4096  /* unpublished records kept (oldest dropped) */

_Static_assert(CLUSTER_FEED_CHUNK <= CLUSTER_MSG_FEED_RECS, "a chunk fits the protocol's limit");

static void cluster_on_feed_chunk(void *arg, const struct store_reply *r);

void cluster_feed_push(struct cluster *c, int64_t job, json_t *rec)
{
    if (!rec)
        return;
    if (!c->coord) {
        json_decref(rec);
        return;
    }
    if (!c->feed.pending && !(c->feed.pending = json_array())) {
        json_decref(rec);
        return;
    }
    /* A coordinator that cannot reach its own store keeps the newest records. */
    if (json_array_size(c->feed.pending) >= CLUSTER_FEED_PENDING)
        json_array_remove(c->feed.pending, 0);
    json_t *e = cluster_msg_feed_rec_new(++c->feed.seq, job, rec);
    if (e)
        json_array_append_new(c->feed.pending, e);
}

uint64_t cluster_feed_seq(const struct cluster *c)
{
    return c->feed.seq;
}

/* Writes the pending records as the next chunks, moves the head, and trims
 * the chunk that fell out of the window. */
static void cluster_feed_publish(struct cluster *c)
{
    char key[64], head[64];
    while (c->feed.pending && json_array_size(c->feed.pending) > 0) {
        json_t *recs = json_array();
        if (!recs)
            return;
        while (json_array_size(c->feed.pending) > 0 && json_array_size(recs) < CLUSTER_FEED_CHUNK) {
            json_array_append(recs, json_array_get(c->feed.pending, 0));
            json_array_remove(c->feed.pending, 0);
        }
        char *text = NULL;
        size_t n = 0;
        int rc = cluster_msg_feed_encode(recs, &text, &n, NULL);
        json_decref(recs);
        if (rc < 0)
            return;
        c->feed.chunk++;
        snprintf(key, sizeof(key), CLUSTER_KEY_FEED_PREFIX "%" PRId64, c->feed.chunk);
        cluster_publish(c, key, text);
        free(text);
        if (c->feed.chunk > CLUSTER_FEED_KEEP) {
            snprintf(key, sizeof(key), CLUSTER_KEY_FEED_PREFIX "%" PRId64,
                     c->feed.chunk - CLUSTER_FEED_KEEP);
            cluster_publish(c, key, NULL);
        }
    }
    /* Every member watches the head: set it only when it moves (or after
     * the coordinator's store connection came back: published_chunk -1). */
    if (c->feed.chunk == c->feed.published_chunk)
        return;
    if (cluster_msg_feed_head_encode(head, sizeof(head), c->inc, c->feed.chunk) == 0) {
        cluster_publish(c, CLUSTER_KEY_FEED_HEAD, head);
        c->feed.published_chunk = c->feed.chunk;
    }
}

/* Member: reads the next chunk the head names, one at a time. */
static void cluster_feed_head(struct cluster *c, uint64_t gen, int64_t head);

static void cluster_feed_next(struct cluster *c)
{
    if (c->feed.next > c->feed.head || c->nc_state != CONN_READY) {
        c->feed.inflight = false;
        if (c->feed.pend && c->nc_state == CONN_READY) {
            c->feed.pend = false;
            cluster_feed_head(c, c->feed.pend_gen, c->feed.pend_head);
        }
        return;
    }
    char key[64];
    snprintf(key, sizeof(key), CLUSTER_KEY_FEED_PREFIX "%" PRId64, c->feed.next);
    if (store_client_async_get(c->nc, key, cluster_on_feed_chunk, c) == 0) {
        c->feed.inflight = true;
        c->inflight++;
    } else {
        c->feed.inflight = false;
    }
}

static void cluster_on_feed_chunk(void *arg, const struct store_reply *r)
{
    struct cluster *c = arg;
    if (!cluster_reply_ok(c, r))
        return;
    if (r->status < 0 && r->status != -ENOENT) {
        c->feed.inflight = false;
        return;
    }
    c->feed.next++; /* a trimmed chunk (-ENOENT) is skipped */
    if (r->status == 0) {
        struct cluster_msg_feed *f = malloc(sizeof(*f));
        struct gpt_err err;
        if (f && cluster_msg_feed_decode(r->data, r->len, f, &err) == 0) {
            for (size_t i = 0; i < f->n; i++)
                if (c->feed.h.record)
                    c->feed.h.record(c->feed.h.ctx, f->recs[i].seq, f->recs[i].job, f->recs[i].rec);
            cluster_msg_feed_done(f);
        } else if (f) {
            log_debug("cluster: feed chunk %" PRId64 " skipped: %s", c->feed.next - 1, err.msg);
        }
        free(f);
    }
    cluster_feed_next(c);
}

/* The head moved to `head` of generation `gen`: read the chunks up to it
 * (after the chunks being read, when a read is in flight). */
static void cluster_feed_head(struct cluster *c, uint64_t gen, int64_t head)
{
    if (c->feed.inflight) {
        if (c->feed.gen_known && gen == c->feed.gen) {
            if (head > c->feed.head)
                c->feed.head = head; /* the chain in flight goes on to it */
        } else {
            c->feed.pend = true;
            c->feed.pend_gen = gen;
            c->feed.pend_head = head;
        }
        return;
    }
    if (!c->feed.gen_known || gen != c->feed.gen) {
        /* A new coordinator: its feed starts over. Only the newest chunks
         * matter to a member (its followers have the rest as history). */
        c->feed.gen = gen;
        c->feed.gen_known = true;
        c->feed.next = head > 4 ? head - 3 : 1;
        if (c->feed.h.reset)
            c->feed.h.reset(c->feed.h.ctx);
    }
    c->feed.head = head;
    c->feed.inflight = true;
    cluster_feed_next(c);
}

static void cluster_on_feed_watch(void *arg, const struct store_reply *r)
{
    struct cluster *c = arg;
    uint64_t gen = 0;
    int64_t head = 0;
    c->feed.watching = false;
    if (r->status == -ECANCELED || !c->nc)
        return;
    if (r->status == -ECONNRESET || r->status == -EPIPE || r->status == -GPT_E_PROTO) {
        cluster_conn_lost(c, gpt_strerror(r->status));
        return;
    }
    if (r->status == -ENOENT)
        c->feed.head_version = 0;
    if (r->status == 0) {
        c->feed.head_version = r->version;
        if (cluster_msg_feed_head_decode(r->data, r->len, &gen, &head, NULL) == 0)
            cluster_feed_head(c, gen, head);
    }
    if (r->status != -GPT_E_LIMIT && c->nc_state == CONN_READY)
        cluster_feed_poll(c, 0);
}

void cluster_feed_duty(struct cluster *c, double now)
{
    if (now < c->feed.next_pub)
        return;
    c->feed.next_pub = now + CLUSTER_FEED_S;
    cluster_feed_publish(c);
}

void cluster_feed_poll(struct cluster *c, double now)
{
    (void)now;
    if (c->coord || !c->feed.h.record || c->feed.watching || c->nc_state != CONN_READY)
        return;
    int rc = store_client_async_watch(c->nc, CLUSTER_KEY_FEED_HEAD, c->feed.head_version,
                                      CLUSTER_FEED_WATCH_MS, cluster_on_feed_watch, c);
    if (rc == 0)
        c->feed.watching = true;
}

void cluster_feed_disconnected(struct cluster *c)
{
    c->feed.inflight = false;
    c->feed.watching = false;
    c->feed.head_version = 0;
    c->feed.pend = false;
}

void cluster_feed_done(struct cluster *c)
{
    json_decref(c->feed.pending);
    c->feed.pending = NULL;
}
