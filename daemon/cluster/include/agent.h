/*
 * agent: the elastic agent of one node (torchelastic's agent, on the loop).
 * It follows the round the coordinator publishes (daemon/cluster.h hands it
 * over) and runs this node's share of the world on local worker threads:
 *
 *   idle -> stopping (old workers stop: abort, or a snapshot for a planned
 *   re-formation) -> joining (the newest valid local snapshot is found on a
 *   work thread) -> joined -> running (workers of the closed round) ->
 *   exited | waiting (not in the world: taken in at the next re-formation).
 *
 * Workers exchange ring addresses through their own blocking store client
 * (connected lazily by a worker thread, never by the loop), under a key
 * prefix unique to the job, coordinator generation and round. Their metrics
 * and events (global rank 0 only) are forwarded to the coordinator. Worker
 * exits come back through a mailbox; the loop joins them only once every
 * worker has returned, so it never blocks.
 *
 * Loop thread, except the worker callbacks and the kv (worker threads).
 */
#ifndef GPTD_AGENT_H
#define GPTD_AGENT_H

#include <jansson.h>
#include <stdbool.h>
#include <uv.h>

#include "cluster.h"
#include "gpt_err.h"

struct agent_opts {
    const char *node_id;
    const char *state_dir; /* snapshots under state_dir/jobs/<id>/snapshots */
    const char *host;      /* the store, for the workers' own client */
    int port;
    const void *secret; /* copied */
    size_t secret_len;
    const char *bind_host; /* the workers' ring address */
    int workers;           /* when the job leaves workers_per_node at 0 */
    int comm_timeout_ms;
    /* The coordinator's node writes a job's snapshot.dir itself (where its
     * database says the snapshots are); other nodes a subdirectory named
     * after their node id, so that a shared filesystem holds every copy. */
    bool snapshot_dir_own;
    /* Where a job's files must lie at the time of use (borrowed: the
     * daemon's configuration, which outlives the agent). */
    const char *data_roots;
    const char *snapshot_roots;
};

struct agent;

/* Creates the agent and registers it with the cluster's node hooks. */
int agent_new(uv_loop_t *loop, struct cluster *cl, const struct agent_opts *o, struct agent **ret,
              struct gpt_err *err);

/* Stops any workers (abort) and frees once they have returned and every
 * handle is closed; then done(ctx). */
void agent_close(struct agent *a, void (*done)(void *ctx), void *ctx);

/* The node is stopping on purpose (SIGTERM): it joins no further round, and
 * workers of a running world stop at the step boundary the world agrees on
 * (with a snapshot) once the coordinator re-forms it without this node, or
 * are aborted after `timeout_s`. done(ctx) runs (from the loop) once no
 * worker is left; agent_close follows. Called again: abort at once. */
void agent_leave(struct agent *a, double timeout_s, void (*done)(void *ctx), void *ctx);

/* The default worker count (after a reload). */
void agent_set_workers(struct agent *a, int workers);

/* For `gptctl nodes` / status: "idle", "joining", "running", ... */
const char *agent_state(const struct agent *a);
/* The job this node works on, 0 none. */
int64_t agent_job(const struct agent *a);

#endif
