/*
 * cluster: this gptd as a member of a cluster. Owns the node's identity
 * (node id, incarnation), its connection to the rendezvous store (async
 * client, reconnecting with backoff), heartbeats, the outbox of messages to
 * the coordinator (one APPEND key, RDZV_KEY_INBOX), and the polling of the
 * published round, which it hands to the elastic agent.
 *
 * On the coordinator it also serves the store, drains the inbox (GET, then
 * COMPARE_SET to empty, so no append is lost), feeds heartbeats and joins
 * to the round protocol (daemon/rdzv.h), and hands forwarded submits,
 * global rank 0's metrics and events, and the job's life cycle to the job
 * queue through struct cluster_jobs_hooks.
 *
 * Loop thread only.
 */
#ifndef GPTD_CLUSTER_H
#define GPTD_CLUSTER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "cluster_msg.h"
#include "gpt_err.h"
#include "metric.h"
#include "round_doc.h"

#define CLUSTER_HOST_MAX 256

/* The coordinator's feed of job records (metrics, events, ends of jobs) for
 * the members' followers: chunk n at "c/feed/<n>" ({"recs": [{"s": seq,
 * "j": job, "r": record}, ...]}), the newest named by the head key as
 * "GEN:N". Only the newest CLUSTER_FEED_KEEP chunks are kept. */
#define CLUSTER_KEY_FEED_HEAD   "c/feed/head"
#define CLUSTER_KEY_FEED_PREFIX "c/feed/"

/* The coordinator's answer to a request: rc 0 and the result object
 * (borrowed), or a negative rc with err. */
typedef void (*cluster_reply_fn)(void *arg, int rc, const json_t *reply, const struct gpt_err *err);

struct cluster_opts {
    const char *node_id;
    /* This node's instance, kept in its state directory (0: none): a node
     * id reported with another one while its holder is alive is refused. */
    uint64_t instance;
    const char *host;   /* the store's address (numeric) */
    int port;           /* 0 (coordinator only): an ephemeral port, see cluster_port */
    bool coordinator;   /* serve the store at host:port */
    const void *secret; /* copied */
    size_t secret_len;
    /* Where the secret came from ("" none), and where the coordinator's is
     * (the embedded one's STATE_DIR/cluster.secret, "" unknown): named in
     * the errors of a refused handshake. Copied. */
    const char *secret_file;
    const char *secret_hint;
    /* The state directory (NULL: none): node.key, this node's node key, and
     * on the coordinator node.keys, the keys it issued (cluster_keys.c). */
    const char *state_dir;
    double heartbeat_s;
    double dead_after_s;
    double last_call_s;
    int admit_snapshot_steps;
    const char *addr; /* the address this node's workers listen on (advertised) */
    int workers;
    const char *version;
};

/* What the node side (the agent) provides. */
struct cluster_node_hooks {
    void *ctx;
    /* The published round changed: a decoded proto/round_doc.h document
     * whose contents the hook takes (it calls round_doc_done on them). */
    void (*round)(void *ctx, struct round_doc *cur);
    /* The connection to the store is lost (the coordinator is gone or this
     * node is cut off): stop taking part in any world. */
    void (*lost)(void *ctx);
    /* Adds the agent's fields to a heartbeat (setting their bits in
     * hb->present). */
    void (*heartbeat)(void *ctx, struct cluster_msg *hb);
};

/* What the coordinator reports to the job queue. */
struct cluster_jobs_hooks {
    void *ctx;
    /* A submit forwarded from another node; returns the job id. */
    int (*submit)(void *ctx, const char *spec_json, uid_t uid, int64_t priority, int64_t *ret_id,
                  struct gpt_err *err);
    void (*metric)(void *ctx, int64_t job, const struct gpt_metric *m);
    void (*event)(void *ctx, int64_t job, const struct gpt_event *e, const char *node);
    void (*world)(void *ctx, int64_t job, int world_size, int nodes, int64_t *ret_run_id);
    void (*waiting)(void *ctx, int64_t job, bool waiting);
    void (*finished)(void *ctx, int64_t job, int rc, int64_t step, const char *error);
    /* The job restarted from a failure, `restarts` in all (persist it). */
    void (*restarts)(void *ctx, int64_t job, int restarts);
    /* A `sample` reply a member made of the job, to keep (`s` borrowed: the
     * record as db_sample_json writes it). */
    void (*sample)(void *ctx, int64_t job, const json_t *s, const char *node);
};

/* The coordinator answers a read forwarded by a member: `m` is the
 * decoded read message (borrowed): m->op its control op (enum gpt_ctl_op,
 * one cluster_msg_read_name() names), m->args its validated arguments;
 * *ret gets the result object (new). */
typedef int (*cluster_read_fn)(void *ctx, const struct cluster_msg *m, json_t **ret,
                               struct gpt_err *err);

/* A member receives the coordinator's feed: each record once, in order
 * (borrowed); reset when a new coordinator generation starts its feed. */
struct cluster_feed_hooks {
    void *ctx;
    void (*record)(void *ctx, uint64_t seq, int64_t job, const json_t *rec);
    void (*reset)(void *ctx);
};

struct cluster;

/* Starts (serving the store first when coordinator; binding errors are
 * returned). Borrows the hooks' contexts. */
int cluster_new(uv_loop_t *loop, const struct cluster_opts *o, struct cluster **ret,
                struct gpt_err *err);
void cluster_set_node_hooks(struct cluster *c, const struct cluster_node_hooks *h);
void cluster_set_jobs_hooks(struct cluster *c, const struct cluster_jobs_hooks *h);
void cluster_set_read_hook(struct cluster *c, cluster_read_fn fn, void *ctx);
void cluster_set_feed_hooks(struct cluster *c, const struct cluster_feed_hooks *h);

/* Closes everything; done(ctx) runs once every handle is closed. */
void cluster_close(struct cluster *c, void (*done)(void *ctx), void *ctx);

bool cluster_is_coordinator(const struct cluster *c);
/* This node's node key (GPT_STORE_MAC_BYTES; NULL while it holds none),
 * for its workers' store connections. Loop thread; borrowed until the
 * next loop iteration. */
const uint8_t *cluster_node_key_own(const struct cluster *c);
/* Coordinator: drops the node key issued to `node`, so that the next gptd
 * to join as it takes the id (a node whose state directory was wiped).
 * Loop thread; blocks on a file rewrite. 0, -ENOENT (no key kept), -EINVAL
 * (not the coordinator, or its own id) or -errno, with err. */
int cluster_forget_node(struct cluster *c, const char *node, struct gpt_err *err);
uint64_t cluster_incarnation(const struct cluster *c);
/* The store's endpoint: its host and port (the bound one when it was 0). */
const char *cluster_host(const struct cluster *c);
int cluster_port(const struct cluster *c);
/* The worker count heartbeats advertise (after a reload). */
void cluster_set_workers(struct cluster *c, int workers);

/* Node side: tells the coordinator that this node is stopping on purpose
 * (no failure); done(arg) runs once the message reached the store, or
 * after CLUSTER_LEAVE_S, or at once when not connected (never inside this
 * call). */
void cluster_leave(struct cluster *c, void (*done)(void *arg), void *arg);

/* Node side: queue one message for the coordinator (borrowed; encoded
 * here, dropped with a warning when it does not encode). */
void cluster_send(struct cluster *c, const struct cluster_msg *msg);
/* Sends a heartbeat at the next loop iteration. */
void cluster_heartbeat_soon(struct cluster *c);
/* Forwards global rank 0's records to the coordinator. */
void cluster_send_metric(struct cluster *c, int64_t job, const struct gpt_metric *m);
void cluster_send_event(struct cluster *c, int64_t job, const struct gpt_event *e);
/* A member hands a `sample` reply it made (the record, borrowed) to the
 * coordinator, which keeps it with the job. The coordinator: nothing. */
void cluster_send_sample(struct cluster *c, int64_t job, const json_t *sample);
/* Node side: a mark of everything queued for the coordinator so far, and
 * whether all of it is delivered: in the store (or refused by it, or
 * dropped with a warning; nothing more will come of it). While it is not,
 * the next answer to an APPEND sends a heartbeat, so a report held back
 * until then (a worker exit after its records) goes at once. On the
 * coordinator records go in-process: always delivered. */
uint64_t cluster_outbox_mark(const struct cluster *c);
bool cluster_outbox_delivered(struct cluster *c, uint64_t mark);

/* Forwards a submit to the coordinator; cb(arg, rc, job, err) runs once
 * (from the loop, never inside this call) with the coordinator's answer. */
int cluster_submit(struct cluster *c, const json_t *spec, uid_t uid, int64_t priority,
                   void (*cb)(void *arg, int rc, int64_t job, const struct gpt_err *err), void *arg,
                   struct gpt_err *err);

/* Node side: the coordinator computes the answer of control op `op` (enum
 * gpt_ctl_op, one cluster_msg_read_name() names) with `args` (borrowed;
 * NULL: defaults); cb runs once, from the loop. -EINVAL naming the field
 * when the request would not encode. */
int cluster_read_op(struct cluster *c, int op, const struct cluster_msg_read_args *args,
                    cluster_reply_fn cb, void *arg, struct gpt_err *err);

/* Coordinator: appends a record of job `job` to the feed (takes `rec`);
 * cluster_feed_seq is the newest record's sequence number. */
void cluster_feed_push(struct cluster *c, int64_t job, json_t *rec);
uint64_t cluster_feed_seq(const struct cluster *c);

/* Coordinator: runs / stops a job on the cluster (see rdzv_coord_job_*):
 * several run at once on disjoint nodes; -EAGAIN (err: "needs N nodes, M
 * free") when other jobs run and too few nodes are free, -ENOSPC (err:
 * "needs N nodes, cluster has M") when the cluster has fewer than N. */
int cluster_job_start(struct cluster *c, int64_t job, uid_t owner, const char *spec_json,
                      int nodes_min, int nodes_max, int max_restarts, int wait_timeout_s,
                      struct gpt_err *err);
/* The same for a job that already restarted from `restarts` failures (under
 * an earlier coordinator): they count against max_restarts; `token` is the
 * job's snapshot-owner token, published with the round (cluster_job_start
 * publishes none). `resume_step`
 * >= 0: the world resumes from the snapshot of that step, which
 * `resume_what` names in errors (see rdzv_job); -1: from the newest, of
 * which `newest_snap` is the step the job's history records (-1 none).
 * `snap_nodes` (NULL: none known): the ids of the nodes that recorded the
 * snapshot the job resumes from, one per line; placement prefers them. */
int cluster_job_resume(struct cluster *c, int64_t job, uid_t owner, uint64_t token,
                       const char *spec_json, int nodes_min, int nodes_max, int max_restarts,
                       int restarts, int wait_timeout_s, int64_t resume_step,
                       const char *resume_what, int64_t newest_snap, const char *snap_nodes,
                       struct gpt_err *err);
/* Stops job `job` (0: every job) at its next step boundary. */
void cluster_job_stop(struct cluster *c, int64_t job);
/* Coordinator: nodes a job could be placed on now (0 on a member). */
int cluster_free_nodes(const struct cluster *c);
/* Coordinator: whether a job of `nodes_min` nodes can start now, as
 * rdzv_coord_job_fits: 0, -ENOSPC (more than the cluster has) or -EAGAIN
 * (too few free; on a member always), err saying why. */
int cluster_job_fits(const struct cluster *c, int nodes_min, bool alone_short, struct gpt_err *err);
/* Coordinator: jobs waiting in the queue for nodes (running jobs do not
 * grow while any does). */
void cluster_set_queued(struct cluster *c, int queued);

/* The node table (a new JSON array): the coordinator's own view there, the
 * last one the coordinator published elsewhere. The coordinator's entry has
 * "role": "coordinator". */
json_t *cluster_nodes_json(struct cluster *c);

struct store_server;
/* The store this coordinator serves (for its counters); NULL on a member. */
struct store_server *cluster_store_server(const struct cluster *c);
/* Records (metrics, events) from the inbox the coordinator refused when it
 * read them: their sender no longer held the job's global rank 0 (the
 * store refuses the rest as it is written: store_server_stats'
 * refused_writes). Loop thread. */
uint64_t cluster_records_refused(const struct cluster *c);

#endif
