/*
 * cluster_impl: the state of struct cluster, private to the cluster's
 * files, and the few functions they share. The cluster is one object,
 * split along its duties:
 *
 *   cluster.c        identity, the store connections, leave, the node
 *                    table, the coordinator's rdzv hooks, the timer and
 *                    the life cycle; it calls into the others once per tick
 *   cluster_round.c  heartbeats (the store's heartbeat table), the round
 *                    watch and the node's assignment; the coordinator's
 *                    drain of the heartbeat table
 *   cluster_inbox.c  the member's outbox (one APPEND key) and its
 *                    requests to the coordinator (forwarded submits and
 *                    reads), and the coordinator's inbox drain that answers
 *                    them and feeds the round protocol
 *   cluster_feed.c   the coordinator's feed of job records and the
 *                    members' reading of it
 *
 * Each part owns its sub-struct (ob, feed) and touches the others'
 * state only through the functions below. Loop thread only.
 */
#ifndef GPTD_CLUSTER_IMPL_H
#define GPTD_CLUSTER_IMPL_H

#include "cluster.h"

#include "cluster_msg.h"
#include "rdzv.h"
#include "store_client.h"

#define CLUSTER_KEYS_FILE "node.keys" /* the coordinator's issued node keys, in STATE_DIR */
#define CLUSTER_KEY_FILE  "node.key"  /* this node's own key, in STATE_DIR */

/* A node key the coordinator issued (proto/store.h, "Node keys"). */
struct cluster_key {
    char node[GPT_STORE_NODE_MAX + 1];
    uint8_t key[GPT_STORE_MAC_BYTES];
};

#define CLUSTER_TICK_MS        25
#define CLUSTER_STALL_S        0.5 /* a tick this late means the loop was held up */
#define CLUSTER_BACKOFF_MIN_MS 100
#define CLUSTER_BACKOFF_MAX_MS 1000

enum cluster_conn { CONN_NONE, CONN_CONNECTING, CONN_READY };

/* A request to the coordinator waiting for its answer: a submit (cb) or a
 * read (rcb). */
struct cluster_submit {
    struct cluster_submit *next;
    int64_t req;
    double deadline;
    bool inflight;
    char key[CLUSTER_MSG_KEY_MAX];
    void (*cb)(void *arg, int rc, int64_t job, const struct gpt_err *err);
    cluster_reply_fn rcb;
    void *arg;
};

/* The member's outbox and requests (cluster_inbox.c). */
struct cluster_outbox {
    char *buf; /* JSON lines not yet appended to RDZV_KEY_INBOX */
    size_t len, cap;
    bool append_inflight;
    /* lines pushed, lines in the APPEND in flight (up to that count), and
     * lines whose APPEND was answered (stored, or refused and dropped):
     * what cluster_outbox_mark and cluster_outbox_delivered compare */
    uint64_t pushed, sending, answered;
    bool hb_on_answer; /* someone waits for `answered` to pass a mark */
    struct cluster_submit *submits;
    int n_submits;
    int64_t next_req;
};

/* The feed (cluster_feed.c). */
struct cluster_feed {
    struct cluster_feed_hooks h;
    /* as a member reads it: the head watched, the chunks read in a chain */
    bool watching;
    uint64_t head_version;
    bool pend; /* a head of another generation came while reading: next */
    uint64_t pend_gen;
    int64_t pend_head;
    bool inflight;
    uint64_t gen; /* the coordinator generation whose feed is read */
    bool gen_known;
    int64_t next, head; /* the next chunk to read, the newest published */
    /* as the coordinator publishes it: chunk n at c/feed/<n>, the newest
     * named by CLUSTER_KEY_FEED_HEAD; records not yet in a chunk wait in
     * `pending` */
    json_t *pending;
    uint64_t seq;
    int64_t chunk;
    int64_t published_chunk; /* the head last set (-1: set it again) */
    double next_pub;
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
    char state_dir[1024]; /* "" none: node keys in memory only */
    bool has_node_key;    /* this node's key (node.key), proved on each connection */
    uint8_t node_key[GPT_STORE_MAC_BYTES];
    struct cluster_key *keys; /* coordinator: the issued keys (node.keys) */
    size_t nkeys, keys_cap;
    /* The store refused this node's secret: forwarded requests fail at once
     * (with refused_msg) instead of waiting for a connection that will not
     * come; the error is logged once per streak of refusals. */
    bool refused;
    char refused_msg[2600];
    /* The coordinator refused this node's heartbeats (its id is another
     * live node's): no part in any world, requests fail with refused_msg,
     * and heartbeats go on until one is taken. */
    bool hb_refused;
    uint64_t inc;
    uv_timer_t timer;
    struct cluster_node_hooks nh;
    struct cluster_jobs_hooks jh;
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
    bool round_watch;     /* the watch of this node's round key is parked */
    uint64_t cur_version; /* the version of the round last seen (0: none) */
    uint64_t cur_seq;     /* rounds seen: an older round's late answer is dropped */
    double next_nodes;
    double nodes_wanted_until; /* a member reads RDZV_KEY_NODES until then */
    json_t *nodes_cache;
    struct cluster_outbox ob;
    int leave_state; /* 0, 1 queued, 2 in the append in flight */
    double leave_deadline;
    void (*leave_done)(void *arg);
    void *leave_arg;
    struct cluster_feed feed;

    /* the coordinator */
    struct store_server *server;
    struct store_client_async *cc;
    int cc_state;
    double cc_retry_at;
    struct rdzv_coord *coord;
    double next_nodes_pub;
    double last_tick; /* when the timer last ran, 0 before the first tick */

    /* inbox records refused when read (cluster_acl.c), and its log's pace */
    uint64_t records_refused;
    uint64_t records_unlogged;
    double records_logged_at;

    int closing_handles;
    void (*done)(void *ctx);
    void *done_ctx;
    bool closing;
    /* cluster.c's, set by cluster_new: cluster_conn.c, which the parts call
     * down to, reaches the top only through these (the parts' reset when
     * the node's connection is lost; the tick a heartbeat sooner starts). */
    void (*parts_disconnected)(struct cluster *c);
    uv_timer_cb tick;
};

/* cluster_round.c: the store's admission of a heartbeat (store_server_opts
 * hb_admit): a node id another live node holds is refused. */
int cluster_hb_admit(void *arg, const char *key, const void *val, size_t len, const char *peer,
                     const char *holder, char *why, size_t cap);

/* cluster_acl.c: the store's admission of every write (store_server_opts
 * write_admit): what node `node` may write. */
int cluster_write_admit(void *arg, const char *node, const struct proto_store_msg *m, char *why,
                        size_t cap);
/* Whether node `node` may send job `job`'s records (metrics, events) now:
 * 0; -ESRCH when the job does not run here (its records are dropped, no
 * lie is known); -EACCES with why[0..cap) saying why not. */
int cluster_acl_record(struct cluster *c, const char *node, int64_t job, char *why, size_t cap);
/* Counts a record refused when the inbox was read, and logs it (at most
 * once a minute). */
void cluster_acl_record_refused(struct cluster *c, const struct cluster_msg *m, const char *why);

/* cluster_conn.c: what cluster.c and the parts below share; it calls no
 * part. Every reply (or failure) of the node's client comes through here first:
 * false when the reply is to be ignored (the connection is gone). */
bool cluster_reply_ok(struct cluster *c, const struct store_reply *r);
void cluster_conn_lost(struct cluster *c, const char *why);
/* Coordinator: sets (value) or deletes (NULL) a store key, fire and forget. */
void cluster_publish(void *ctx, const char *key, const char *value);
void cluster_on_publish(void *arg, const struct store_reply *r);
/* Starts message `m` of `type` from this node (node id, incarnation). */
void cluster_start_msg(struct cluster *c, struct cluster_msg *m, int type);

/* cluster_round.c */
/* Sends this node's heartbeat now (when connected). */
void cluster_heartbeat(struct cluster *c);
/* Parks the watch of the round unless one is. */
void cluster_round_watch(struct cluster *c);
/* The connection is gone: the watch with it; the round is read afresh. */
void cluster_round_disconnected(struct cluster *c);
/* Coordinator: feeds the heartbeats that came since the last call to the
 * round protocol. */
void cluster_hb_drain(struct cluster *c, double now);

/* cluster_inbox.c */
/* Appends the outbox when connected and no append is in flight. */
void cluster_flush(struct cluster *c);
/* Requests: time-outs, and polls of their reply keys when connected. */
void cluster_poll_submits(struct cluster *c, double now);
/* The connection is gone: no request poll is in flight any more. */
void cluster_requests_disconnected(struct cluster *c);
/* Ends every request with -ECANCELED (cluster_close). */
void cluster_requests_cancel(struct cluster *c);
/* Coordinator: reads and empties the inbox when it is time. */
void cluster_inbox_drain(struct cluster *c, double now);
void cluster_inbox_done(struct cluster *c);

/* cluster_feed.c */
/* Coordinator: publishes the pending records when it is time. */
void cluster_feed_duty(struct cluster *c, double now);
/* Member: watches the feed head (parks the watch when none is). */
void cluster_feed_poll(struct cluster *c, double now);
void cluster_feed_disconnected(struct cluster *c);
void cluster_feed_done(struct cluster *c);

/* cluster_keys.c. init loads STATE_DIR/node.key and, on the coordinator,
 * node.keys (and makes the coordinator's own key); 0 or a negative errno
 * with err. The store server's node_key and node_key_issued callbacks (arg:
 * the cluster), and the clients' node_key_issued for this node's own key. */
int cluster_keys_init(struct cluster *c, struct gpt_err *err);
void cluster_keys_done(struct cluster *c);
int cluster_node_key(void *arg, const char *node, uint8_t ret_key[GPT_STORE_MAC_BYTES]);
int cluster_node_key_issued(void *arg, const char *node, const uint8_t key[GPT_STORE_MAC_BYTES]);
void cluster_own_key_issued(void *arg, const char *node, const uint8_t key[GPT_STORE_MAC_BYTES]);
void cluster_node_refused(void *arg, const char *node, const char *peer, char *why, size_t cap);

#endif
