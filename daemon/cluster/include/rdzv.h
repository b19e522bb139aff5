/*
 * rdzv: the coordinator's half of the elastic rendezvous (torchelastic's
 * dynamic rendezvous, decided by one authority instead of by store races).
 *
 * The coordinator keeps a table of nodes (from their heartbeats), opens a
 * round of a job whenever its world must change (job start, a member died
 * or failed, a free node can be taken in, nodes came back after waiting),
 * collects the joins of the nodes placed on the job (each names the newest
 * valid snapshot it holds), closes the round at `max` nodes, or at `min` or
 * more once every alive member of the previous world has joined and either
 * every alive node placed on the job joined or the last-call window passed,
 * and publishes the closed world: ranks assigned
 * deterministically (the node holding the newest snapshot first, then by
 * node id), each node's rank base, worker count and address.
 *
 * Several jobs run at once on disjoint sets of nodes: a job is placed on
 * between its `min` and `max` free nodes when it starts (all the free ones
 * up to `max`), its rounds count only the nodes placed on it, and a node
 * failure re-forms only the job on that node. Round numbers come from one
 * sequence per coordinator, so rounds (and their keys) of different jobs
 * never mix. A running job short of `max` takes free nodes in at its next
 * round (a snapshot boundary) while no job waits in the queue
 * (rdzv_coord_set_queued).
 *
 * Store keys (the layout nodes and benchmarks rely on; the three JSON
 * documents below are declared field by field in proto/round_doc.h):
 *   RDZV_KEY_INBOX      node -> coordinator messages, JSON lines (APPEND):
 *                       leaves, metrics, events, submits, reads
 *   (heartbeat table)   each node's heartbeat and join (a "hb" message with
 *                       state "joined"), HEARTBEAT under its node id,
 *                       overwritten in place (proto/store.h)
 *   rdzv/n/<id>         (RDZV_KEY_NODE_PREFIX) the round of the job node <id>
 *                       is placed on, as JSON (rdzv_coord_round_json), with
 *                       "me", its assignment {id, inc, rank_base, workers,
 *                       addr}, while it is a member of a running world; an
 *                       "idle" round (job 0) when it is on no job. Set when
 *                       that changes; the node WATCHes it (its version
 *                       passes the one the node saw), none polls. "closed"
 *                       says why a running round closed
 *   rdzv/<r>/world      the closed round r with every member, set when it closes
 *   RDZV_KEY_NODES      the node table as JSON, for `gptctl nodes` anywhere
 *
 * This module does no I/O: it is fed messages and the time, and reports
 * through hooks. One thread (the daemon's loop thread, or a benchmark's).
 */
#ifndef GPTD_RDZV_H
#define GPTD_RDZV_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cluster_msg.h"
#include "gpt_err.h"

#define RDZV_NODE_ID_MAX     64
#define RDZV_ADDR_MAX        64
#define RDZV_NODES_MAX       65536 /* nodes the coordinator tracks; more are refused */
#define RDZV_KEY_INBOX       "c/inbox"
#define RDZV_KEY_NODE_PREFIX "rdzv/n/" /* + node id: the node's round */
#define RDZV_JOBS_MAX        64        /* jobs running at once */
#define RDZV_KEY_NODES       "c/nodes"

enum rdzv_phase {
    RDZV_IDLE,     /* no job */
    RDZV_FORMING,  /* a round is open: nodes stop their workers and join */
    RDZV_RUNNING,  /* the round closed; its members train */
    RDZV_WAITING,  /* fewer than `min` nodes alive */
    RDZV_STOPPING, /* the world stops at the next step boundary (cancel, shutdown) */
};

/* The phase's name in JSON ("idle", "forming", ...), and back (-1 unknown). */
const char *rdzv_phase_name(int phase);
int rdzv_phase_parse(const char *name);

struct rdzv_opts {
    double dead_after_s;      /* a node silent this long is dead */
    double last_call_s;       /* how long a round waits for more than `min` nodes */
    int admit_snapshot_steps; /* growing the world snapshots first when the newest
                               * snapshot is more than this many steps old */
    /* The coordinator's own node id (copied; NULL or "" for none): that
     * node runs in the coordinator's process, so it is alive whenever the
     * liveness is judged, however late the loop got there. */
    const char *self_node;
};

/* What the coordinator tells its owner. All on the coordinator's thread. */
struct rdzv_hooks {
    void *ctx;
    /* Set a store key (rdzv/n/<id>, rdzv/<r>/world); a NULL
     * value deletes it. */
    void (*publish)(void *ctx, const char *key, const char *value);
    /* A membership change or failure worth an event in the job's history
     * (job 0: no job runs), at `step` (-1: the job's newest). */
    void (*event)(void *ctx, int64_t job, int64_t step, const char *kind, const char *msg);
    /* A world closed: record a run of `world_size` ranks; *ret_run_id gets
     * its id (0 when none is recorded). */
    void (*world)(void *ctx, int64_t job, int world_size, int nodes, int64_t *ret_run_id);
    /* The job waits for nodes (true) or runs again (false). */
    void (*waiting)(void *ctx, int64_t job, bool waiting);
    /* The job ended: rc is GPT_TRAIN_DONE, GPT_TRAIN_STOPPED or a negative
     * error with `error` saying why. Its nodes are free when this runs. */
    void (*finished)(void *ctx, int64_t job, int rc, int64_t step, const char *error);
    /* The job restarted from a failure; `restarts` counts them all, those
     * of earlier coordinators included (optional). */
    void (*restarts)(void *ctx, int64_t job, int restarts);
};

/* A job as the coordinator runs it. */
struct rdzv_job {
    int64_t id;
    uid_t owner_uid;       /* the submitter: every node opens the job's files as this uid */
    uint64_t token;        /* the job's snapshot-owner token (db.h); 0: none. Every node
                            * claims its snapshot folder with it (in the round, "token") */
    const char *spec_json; /* copied; travels to every node in the round */
    int nodes_min, nodes_max;
    int max_restarts;
    int restarts; /* failures already restarted from (a coordinator restart keeps them) */
    int wait_timeout_s;
    /* A snapshot the user chose to resume from (`gptctl resume --snapshot`):
     * the world resumes from the file of step `resume_step` on a node that
     * holds it (global rank 0 loads it and broadcasts the state), and fails
     * naming `resume_what` when no node does. Once the run writes a snapshot,
     * later worlds resume from that step. false: each world resumes from the
     * newest snapshot its nodes hold. */
    bool resume_chosen;
    int64_t resume_step;
    const char *resume_what; /* e.g. "snapshot 3 (step 20)"; copied */
    /* The newest snapshot step the job's history records (-1 none). A
     * round does not close at `min` nodes while no joined node holds it,
     * for a grace (RDZV_SNAP_WAIT_S): after a coordinator restart the
     * members that hold it reconnect later than the coordinator joins. */
    int64_t newest_snap;
    /* The nodes that recorded the snapshot the job resumes from, one id a
     * line (NULL: none known; copied): placement takes free ones of them
     * first, so a world does not form on nodes without it while they idle. */
    const char *snap_nodes;
};

/* Node -> coordinator messages are struct cluster_msg (proto/cluster_msg.h):
 * heartbeats, joins and leaves feed the round protocol. LEAVE: the node is
 * stopping on purpose (SIGTERM); the world re-forms without it, with a
 * snapshot, and that is no failure. */
_Static_assert(RDZV_NODE_ID_MAX == CLUSTER_MSG_NODE_MAX, "node ids have one limit");
_Static_assert(RDZV_ADDR_MAX == CLUSTER_MSG_ADDR_MAX, "addresses have one limit");

struct rdzv_coord;

/* A new coordinator of generation `gen` (unique per coordinator start).
 * Borrows hooks' ctx. Returns NULL on ENOMEM. */
struct rdzv_coord *rdzv_coord_new(uint64_t gen, const struct rdzv_opts *o,
                                  const struct rdzv_hooks *h);
/* NULL allowed. */
void rdzv_coord_free(struct rdzv_coord *c);

/* Feeds a heartbeat, join or leave (other messages are ignored). */
void rdzv_coord_message(struct rdzv_coord *c, double now, const struct cluster_msg *m);

/* A heartbeat identical to the node's last one arrived at `now`: true when
 * that was all there was to do (a known, alive node); false when the
 * report must be fed whole with rdzv_coord_message() (an unknown, dead or
 * leaving node). O(1). */
bool rdzv_coord_touch(struct rdzv_coord *c, double now, const char *node);
/* Whether `node` is alive now (heard from within dead_after_s, not left);
 * *ret_addr (may be NULL) gets its last advertised address ("" unknown),
 * valid until the next call into the coordinator. Unknown nodes: false,
 * with "". */
bool rdzv_coord_node_alive(const struct rdzv_coord *c, double now, const char *node,
                           const char **ret_addr);

/* The coordinator's loop was held up for `blind_s` seconds (a late tick),
 * up to `now`: no heartbeat could be read meanwhile, so that time does not
 * count towards any node's silence (each alive node's last heartbeat moves
 * forward by it, never past `now`). O(nodes). */
void rdzv_coord_blind(struct rdzv_coord *c, double now, double blind_s);

/* Whether heartbeat `m`, from store connection `peer`, may speak for its
 * node id: -EEXIST (why[0..cap) names the node holding it and both
 * addresses; a "node" event once per refused process) when a live node
 * of another instance (state directory) holds the id, else 0. `holder`:
 * the connection the holder's reports came from. O(1). */
int rdzv_coord_admit(struct rdzv_coord *c, double now, const struct cluster_msg *m,
                     const char *peer, const char *holder, char *why, size_t cap);

/* The ranks a node holds in a job's newest closed world (rdzv/<round>/world),
 * as rdzv_coord_node_ranks() reports them. */
struct rdzv_ranks {
    uint64_t gen;  /* this coordinator's generation (in the workers' key prefix) */
    int64_t round; /* the world's round */
    int base;      /* its ranks: [base, base + count) */
    int count;
};

/* Which ranks node `node` holds in job `job`'s newest closed world, now:
 * its members while that world runs or stops, its members still alive
 * while the job's next round forms (their workers' last records are on
 * their way). What a node may write for a job is bounded by this
 * (cluster_acl.c). Returns 0 with *ret; -ESRCH: the job does not run
 * here; -EAGAIN: the node is placed on the job but no world of it has
 * closed under this coordinator yet (after a coordinator's start: its
 * ranks of the world before are not known); -ENOENT: the node holds no
 * rank of the job's world. O(1) but for the scan of the running jobs. */
int rdzv_coord_node_ranks(const struct rdzv_coord *c, const char *node, int64_t job,
                          struct rdzv_ranks *ret);

/* Global rank 0 of job `job` reached `step`; `snapshot` (>= 0) when a
 * snapshot was written. Ignored for a job that does not run. */
void rdzv_coord_job_progress(struct rdzv_coord *c, int64_t job, int64_t step, int64_t snapshot);
/* Global rank 0 of job `job`'s current world sent its last record (the
 * `done` event): everything it reported is stored. A world whose workers
 * finished ends the job as completed only after this; see
 * rdzv_tick_running. Ignored for a job that does not run. */
void rdzv_coord_job_final(struct rdzv_coord *c, int64_t job);
/* The same for the first running job (rdzv_coord_job). */
void rdzv_coord_progress(struct rdzv_coord *c, int64_t step, int64_t snapshot);

/* Starts running a job on free nodes: opens its first round, placed on
 * the free nodes up to `nodes_max`. When other jobs run it needs
 * `nodes_min` free nodes: -EAGAIN or -ENOSPC otherwise (as
 * rdzv_coord_job_fits). When no job runs it starts with what there is and
 * waits for more (distributed.wait_timeout_s). -EBUSY at RDZV_JOBS_MAX
 * jobs, -EEXIST when this job runs already. */
int rdzv_coord_job_start(struct rdzv_coord *c, double now, const struct rdzv_job *job,
                         struct gpt_err *err);
/* Stops job `job` (0: every job) at the next step boundary, with a
 * snapshot; the finished hook reports GPT_TRAIN_STOPPED. Immediate when no
 * world of it runs. */
void rdzv_coord_job_stop(struct rdzv_coord *c, int64_t job, double now);
/* Nodes known (alive or not). */
size_t rdzv_coord_node_count(const struct rdzv_coord *c);
/* Nodes a job could be placed on now (alive, on no job, an agent there). */
int rdzv_coord_free_nodes(const struct rdzv_coord *c);
/* Nodes that can run jobs, on one now or not (alive, not leaving, an agent
 * there): the most a job could be placed on once the others end. */
int rdzv_coord_alive_nodes(const struct rdzv_coord *c);
/* Whether a job of `nodes_min` nodes can be placed now: 0 when it can;
 * -ENOSPC when the cluster has fewer nodes than that (err: "needs 3 nodes,
 * cluster has 2"): no job's end makes room, so the queue places the jobs
 * behind it meanwhile; -EAGAIN when too few are free (err: "needs 2 nodes,
 * 1 free"): it waits for running jobs to end. With `alone_short`, 0 as
 * well whenever no job runs (rdzv_coord_job_start then starts it short, to
 * wait for more nodes). Err is set only on failure. */
int rdzv_coord_job_fits(const struct rdzv_coord *c, int nodes_min, bool alone_short,
                        struct gpt_err *err);
/* The first running job's id (the oldest), 0 when idle. */
int64_t rdzv_coord_job(const struct rdzv_coord *c);
/* Whether job `job` runs here. */
bool rdzv_coord_job_runs(const struct rdzv_coord *c, int64_t job);
/* Jobs running. */
int rdzv_coord_job_count(const struct rdzv_coord *c);
/* How many jobs wait in the queue for nodes (the scheduler says so after
 * each pass): while any does, running jobs do not grow into free nodes. */
void rdzv_coord_set_queued(struct rdzv_coord *c, int queued);

/* Liveness and round decisions; call every ~100 ms and after messages. */
void rdzv_coord_tick(struct rdzv_coord *c, double now);

/* Publishes every node's round again (after the store connection came up). */
void rdzv_coord_republish(struct rdzv_coord *c);

/* The node table for `gptctl nodes`: a new JSON array; each node's "job"
 * is the job placed on it (null: free). */
json_t *rdzv_coord_nodes_json(const struct rdzv_coord *c, double now);
/* The first running job's round (an idle one when none runs): a new JSON
 * object; what its nodes read without the members (with_nodes false),
 * rdzv/<r>/world with them. */
json_t *rdzv_coord_round_json(const struct rdzv_coord *c, bool with_nodes);

#endif
