/*
 * rdzv_impl: the coordinator's node table and round state, private to
 * daemon/rdzv.c (the protocol: the only writer) and daemon/rdzv_view.c
 * (its JSON views: read only). Single-threaded, like rdzv.h.
 */
#ifndef GPTD_RDZV_IMPL_H
#define GPTD_RDZV_IMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rdzv.h"

struct rdzv_cnode {
    char id[RDZV_NODE_ID_MAX];
    uint64_t inc;
    double last_hb;
    bool alive;
    int workers;
    char addr[RDZV_ADDR_MAX];
    char version[32];
    char devices[128];               /* backends and GPUs, as the node reported them */
    char gpus[CLUSTER_MSG_GPUS_MAX]; /* GPU readings of the last heartbeat (nvml.h) */
    char state[16];                  /* as the node reported it */
    uint64_t gen;                    /* the generation and round the node last reported */
    int64_t round;
    int64_t job;
    /* round bookkeeping */
    int64_t joined_round; /* the round this node joined, -1 none */
    int64_t snap_step;
    bool left;   /* this incarnation announced it is stopping */
    bool member; /* in the current (or forming round's previous) world */
    bool prev_member;
    int rank_base;
    int64_t exit_round; /* the last worker exit seen for the current job */
    int exit_rc;
    int64_t exit_step;
    char exit_msg[256];
};

struct rdzv_coord {
    uint64_t gen;
    struct rdzv_opts o;
    struct rdzv_hooks h;
    struct rdzv_cnode *nodes;
    size_t n, cap;
    /* node id -> index + 1 (0: empty), open addressing; nodes are never
     * removed, so no tombstones. idx_cap is a power of two > 2 n. */
    uint32_t *idx;
    size_t idx_cap;
    char close_why[160]; /* why the newest round closed (in the round JSON) */

    int phase;
    int64_t round;
    uint64_t version;
    bool dirty;

    /* the running job */
    int64_t job;
    uid_t owner_uid;
    uint64_t token;
    char *spec_json;
    int nodes_min, nodes_max, max_restarts, wait_timeout_s;
    int restarts;
    double opened_at, waiting_since;
    bool stop_snapshot; /* how members stop their old workers for this round */
    bool stop_requested;
    int64_t run_id;
    int world;
    int64_t last_step, last_snap;
    int64_t last_world_round; /* the newest closed round (its keys are deleted later) */
    bool failure;             /* a member failed or died in the running world */
    bool failure_final; /* ...with an error of the spec or the data: a restart cannot heal it */
    char failure_why[256];
    /* the snapshot every world resumes from (rdzv_job.resume_chosen), -1 none */
    int64_t pin_step;
    bool pin_chosen; /* still the user's choice (not a snapshot of this run) */
    char pin_what[128];
    int64_t want_snap; /* the newest snapshot step recorded, -1 none */
};

/* One member's assignment {id, inc, rank_base, workers, addr}: new JSON. */
json_t *rdzv_member_json(const struct rdzv_cnode *nd);

#endif
