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
#include <time.h>

#include "failure_class.h"
#include "rdzv.h"

struct rdzv_jrun;

struct rdzv_cnode {
    char id[RDZV_NODE_ID_MAX];
    uint64_t inc;
    uint64_t iid;         /* its instance (cluster_msg "iid"), 0 none */
    uint64_t refused_inc; /* the newest process refused this id (rdzv_coord_admit) */
    double last_hb;
    bool alive;
    int workers;
    char addr[RDZV_ADDR_MAX];
    char version[32];
    char devices[128];               /* backends and GPUs, as the node reported them */
    char gpus[CLUSTER_MSG_GPUS_MAX]; /* GPU readings of the last heartbeat (nvml.h) */
    char state[16];                  /* as the node reported it ("": no agent yet) */
    uint64_t gen;                    /* the generation and round the node last reported */
    int64_t round;
    int64_t job;
    /* placement: the job this node is given to (NULL: free). Only that
     * job's rounds count the node; it reads that job's round. */
    struct rdzv_jrun *jr;
    /* what RDZV_KEY_NODE_PREFIX<id> holds: (job id, round version) */
    bool pub_done;
    int64_t pub_job;
    uint64_t pub_ver;
    /* round bookkeeping, for the job it is placed on */
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
    /* Quarantine: the node failed what it claimed (failure_class.h
     * FAILURE_NODE); no job is placed on it until `quarantine_until`
     * (0: not quarantined). `strikes` counts such failures with the claim
     * (workers, devices) recorded at the last one; a new incarnation with
     * another claim starts afresh. */
    double quarantine_until;
    time_t quarantine_wall; /* the same end on the wall clock, for people */
    int strikes;
    int claim_workers;
    char claim_devices[128];
    char quarantine_why[200];
    /* Its own retryable failures, each the first of its world and before
     * that world trained a step: of how many different jobs in a row
     * (reset by an exit after a step), and the newest such job. */
    int early_jobs;
    int64_t early_job;
};

/* One job the coordinator runs: its rounds, world and failures. Nodes
 * point at it (rdzv_cnode.jr) while it is placed on them. */
struct rdzv_jrun {
    int64_t job;
    uid_t owner_uid;
    uint64_t token;
    char *spec_json;
    char *snap_nodes; /* rdzv_job.snap_nodes' copy, NULL none */
    int nodes_min, nodes_max, max_restarts, wait_timeout_s;
    int restarts;
    int phase;
    int64_t round;       /* this job's current round (numbers are unique per coordinator) */
    uint64_t version;    /* bumped on each publication of its round */
    char close_why[160]; /* why the newest round closed (in the round JSON) */
    double opened_at, waiting_since;
    bool stop_snapshot; /* how members stop their old workers for this round */
    bool stop_requested;
    int64_t run_id;
    int world;
    int64_t world_start; /* the step the current world started from (0: none) */
    int64_t last_step, last_snap;
    int64_t last_world_round;         /* the newest closed round (its keys are deleted later) */
    bool failure;                     /* a member failed or died in the running world */
    enum failure_class failure_class; /* ...of this class (failure_class.c) */
    char failure_why[256];
    /* the snapshot every world resumes from (rdzv_job.resume_chosen), -1 none */
    int64_t pin_step;
    bool pin_chosen; /* still the user's choice (not a snapshot of this run) */
    char pin_what[128];
    int64_t want_snap; /* the newest snapshot step recorded, -1 none */
    bool final_seen;   /* the current world's rank 0 sent its done event */
    bool final_lost;   /* ...and then a member was lost: the job is done all the same */
    int64_t max_steps; /* the spec's trainer.max_steps, 0 unknown (max_epochs) */
    /* The newest global rank 0 lost before its done event reached the
     * coordinator ("" none), and the last step recorded then: records of
     * the steps after it are gone with it. */
    char r0_lost[RDZV_NODE_ID_MAX];
    int64_t r0_lost_step;
};

struct rdzv_coord {
    uint64_t gen;
    struct rdzv_opts o;
    struct rdzv_hooks h;
    char self[RDZV_NODE_ID_MAX]; /* o.self_node, owned */
    struct rdzv_cnode *nodes;
    size_t n, cap;
    /* node id -> index + 1 (0: empty), open addressing; nodes are never
     * removed, so no tombstones. idx_cap is a power of two > 2 n. */
    uint32_t *idx;
    size_t idx_cap;
    int64_t round_seq; /* the newest round number given to any job */
    /* the running jobs, in the order they started */
    struct rdzv_jrun *jobs[RDZV_JOBS_MAX];
    int njobs;
    int queued; /* jobs the scheduler could not place yet: running jobs do not grow */
};

/* One member's assignment {id, inc, rank_base, workers, addr}: new JSON. */
json_t *rdzv_member_json(const struct rdzv_cnode *nd);
/* Job j's round as published (rdzv_coord_round_json); j NULL: the idle
 * document a free node reads. New JSON. */
json_t *rdzv_jrun_json(const struct rdzv_coord *c, const struct rdzv_jrun *j, bool with_nodes);
/* rdzv_place.c: placement and what each node reads. */
/* A node a job could be given now: alive, not leaving, on no job, not
 * quarantined, and reporting a state (an agent runs there). */
bool rdzv_node_free(const struct rdzv_cnode *nd);
/* Appends "; quarantined: ID, ID" (the alive nodes kept off placement) to
 * buf (a string of cap bytes) when there are any. */
void rdzv_quarantined_note(const struct rdzv_coord *c, char *buf, size_t cap);
/* Gives job j up to `want` free nodes (their rounds are published). */
void rdzv_place(struct rdzv_coord *c, struct rdzv_jrun *j, int want);
/* Takes node nd off its job: free, reading the idle round. */
void rdzv_unplace(struct rdzv_coord *c, struct rdzv_cnode *nd);
/* Alive nodes placed on j. */
int rdzv_placed_alive(const struct rdzv_coord *c, const struct rdzv_jrun *j);
/* Sets node nd's round key unless it holds what the node should read. */
void rdzv_publish_node(struct rdzv_coord *c, struct rdzv_cnode *nd);
/* Job j's round changed: a new version, read by each of its nodes. */
void rdzv_publish_job(struct rdzv_coord *c, struct rdzv_jrun *j);
/* Job j's round closed: rdzv/<r>/world; that of its round prev goes. */
void rdzv_publish_world(struct rdzv_coord *c, struct rdzv_jrun *j, int64_t prev_round);

#endif
