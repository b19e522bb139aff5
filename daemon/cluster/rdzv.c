/*
 * rdzv: the coordinator's round protocol (see rdzv.h). Owns the node table,
 * the running jobs and their round state (rdzv_impl.h); talks only through
 * its hooks. Where jobs are placed and what each node reads is in
 * rdzv_place.c; the JSON views and the phases' names in rdzv_view.c, which
 * call nothing here. Single-threaded.
 */
#include "rdzv.h"
#include "rdzv_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "failure_class.h"
#include "nvml.h"
#include "trainer.h"

/* A previous member that neither joins nor dies holds a round open at most
 * this long (its workers may be stuck in a collective that times out). */
#define RDZV_JOIN_TIMEOUT_S 15.0
/* How long a round waits for a node holding the newest recorded snapshot
 * (rdzv_job.newest_snap) before it resumes from an older one. */
#define RDZV_SNAP_WAIT_S 12.0

/* ---- helpers ---- */

static void rdzv_event_v(struct rdzv_coord *c, const struct rdzv_jrun *j, int64_t step,
                         const char *kind, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (c->h.event)
        c->h.event(c->h.ctx, j ? j->job : 0, step, kind, msg);
}

static void rdzv_event(struct rdzv_coord *c, const struct rdzv_jrun *j, const char *kind,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* An event at the job's newest step. */
static void rdzv_event(struct rdzv_coord *c, const struct rdzv_jrun *j, const char *kind,
                       const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rdzv_event_v(c, j, -1, kind, fmt, ap);
    va_end(ap);
}

static void rdzv_event_at(struct rdzv_coord *c, const struct rdzv_jrun *j, int64_t step,
                          const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* An event at `step`: a world that resumes from a snapshot belongs to the
 * snapshot's step, where its run starts, not to the step the last run
 * reached (the job's history orders a run's records by step). */
static void rdzv_event_at(struct rdzv_coord *c, const struct rdzv_jrun *j, int64_t step,
                          const char *kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rdzv_event_v(c, j, step, kind, fmt, ap);
    va_end(ap);
}

static uint64_t rdzv_hash(const char *id)
{
    uint64_t h = 1469598103934665603ull;
    for (; *id; id++) {
        h ^= (uint8_t)*id;
        h *= 1099511628211ull;
    }
    return h;
}

/* The node table is looked up once per heartbeat: a hash index keeps that
 * O(1) at tens of thousands of nodes. */
static struct rdzv_cnode *rdzv_find(struct rdzv_coord *c, const char *id)
{
    if (!c->idx_cap)
        return NULL;
    for (size_t i = rdzv_hash(id) & (c->idx_cap - 1);; i = (i + 1) & (c->idx_cap - 1)) {
        uint32_t v = c->idx[i];
        if (!v)
            return NULL;
        if (strcmp(c->nodes[v - 1].id, id) == 0)
            return &c->nodes[v - 1];
    }
}

static void rdzv_index_put(struct rdzv_coord *c, size_t node)
{
    size_t i = rdzv_hash(c->nodes[node].id) & (c->idx_cap - 1);
    while (c->idx[i])
        i = (i + 1) & (c->idx_cap - 1);
    c->idx[i] = (uint32_t)node + 1;
}

/* Makes room in the index for one more node: 0 or -ENOMEM. */
static int rdzv_index_reserve(struct rdzv_coord *c)
{
    if (c->idx_cap > 2 * (c->n + 1))
        return 0;
    size_t cap = c->idx_cap ? c->idx_cap * 2 : 64;
    uint32_t *idx = calloc(cap, sizeof(*idx));
    if (!idx)
        return -ENOMEM;
    free(c->idx);
    c->idx = idx;
    c->idx_cap = cap;
    for (size_t i = 0; i < c->n; i++)
        rdzv_index_put(c, i);
    return 0;
}

static struct rdzv_cnode *rdzv_add(struct rdzv_coord *c, const char *id)
{
    if (rdzv_index_reserve(c) < 0)
        return NULL;
    if (c->n == c->cap) {
        if (c->cap >= RDZV_NODES_MAX)
            return NULL;
        size_t cap = c->cap ? c->cap * 2 : 16;
        struct rdzv_cnode *p = realloc(c->nodes, cap * sizeof(*p));
        if (!p)
            return NULL;
        c->nodes = p;
        c->cap = cap;
    }
    struct rdzv_cnode *nd = &c->nodes[c->n++];
    memset(nd, 0, sizeof(*nd));
    snprintf(nd->id, sizeof(nd->id), "%s", id);
    nd->joined_round = -1;
    nd->snap_step = -1;
    nd->exit_round = -1;
    nd->round = -1;
    rdzv_index_put(c, c->n - 1);
    return nd;
}

static struct rdzv_jrun *rdzv_job_find(const struct rdzv_coord *c, int64_t job)
{
    for (int i = 0; i < c->njobs; i++)
        if (c->jobs[i]->job == job)
            return c->jobs[i];
    return NULL;
}

int rdzv_coord_node_ranks(const struct rdzv_coord *c, const char *node, int64_t job,
                          struct rdzv_ranks *ret)
{
    const struct rdzv_jrun *j = rdzv_job_find(c, job);
    const struct rdzv_cnode *nd = rdzv_find((struct rdzv_coord *)c, node);
    if (!j)
        return -ESRCH;
    if (!nd || nd->jr != j)
        return -ENOENT;
    if (j->last_world_round <= 0)
        return -EAGAIN;
    bool world_current = j->round == j->last_world_round;
    if (!(world_current ? nd->member : nd->prev_member))
        return -ENOENT;
    *ret = (struct rdzv_ranks){
        .gen = c->gen, .round = j->last_world_round, .base = nd->rank_base, .count = nd->workers};
    return 0;
}

static void rdzv_open_round(struct rdzv_coord *c, struct rdzv_jrun *j, double now, bool snapshot,
                            const char *why)
{
    j->round = ++c->round_seq;
    j->close_why[0] = '\0';
    j->phase = RDZV_FORMING;
    j->opened_at = now;
    j->stop_snapshot = snapshot;
    j->failure = false;
    j->failure_class = FAILURE_RETRY;
    for (size_t i = 0; i < c->n; i++) {
        struct rdzv_cnode *nd = &c->nodes[i];
        if (nd->jr != j)
            continue;
        nd->prev_member = nd->member && nd->alive;
        nd->member = false;
        nd->joined_round = -1;
    }
    rdzv_event(c, j, "round", "round %" PRId64 " opened: %s", j->round, why);
    rdzv_publish_job(c, j);
}

/* The job ends: its nodes are free, its keys go, then the owner hears. */
static void rdzv_finish(struct rdzv_coord *c, struct rdzv_jrun *j, int rc, int64_t step,
                        const char *error)
{
    int64_t job = j->job;
    for (size_t i = 0; i < c->n; i++)
        if (c->nodes[i].jr == j)
            rdzv_unplace(c, &c->nodes[i]);
    if (j->last_world_round > 0 && c->h.publish) {
        char key[64];
        snprintf(key, sizeof(key), "rdzv/%" PRId64 "/world", j->last_world_round);
        c->h.publish(c->h.ctx, key, NULL);
    }
    for (int i = 0; i < c->njobs; i++) {
        if (c->jobs[i] != j)
            continue;
        memmove(&c->jobs[i], &c->jobs[i + 1], (size_t)(c->njobs - i - 1) * sizeof(c->jobs[0]));
        c->njobs--;
        break;
    }
    free(j->spec_json);
    free(j->snap_nodes);
    free(j);
    if (c->h.finished)
        c->h.finished(c->h.ctx, job, rc, step, error);
}

static int rdzv_cmp_rank(const void *a, const void *b)
{
    const struct rdzv_cnode *x = *(const struct rdzv_cnode *const *)a;
    const struct rdzv_cnode *y = *(const struct rdzv_cnode *const *)b;
    if (x->snap_step != y->snap_step)
        return x->snap_step > y->snap_step ? -1 : 1;
    return strcmp(x->id, y->id);
}

/* A world about to resume from the step `snap` snapshot on node `holder`,
 * after global rank 0 was lost with records on their way: when that
 * snapshot is the job's last step, the run that wrote it finished, but the
 * records of its last steps (metrics, the snapshot row, the done event)
 * are gone, and no new run would train a step to send them again. The job
 * fails saying so, instead of starting a world that finds nothing left to
 * train; a snapshot short of the end resumes and records from there.
 * Returns true when the job ended (j is freed). */
static bool rdzv_final_records_lost(struct rdzv_coord *c, struct rdzv_jrun *j, int64_t snap,
                                    const char *holder)
{
    if (!j->r0_lost[0] || j->max_steps <= 0 || snap < j->max_steps)
        return false;
    char lost[160];
    if (j->r0_lost_step >= j->max_steps)
        snprintf(lost, sizeof(lost),
                 "its snapshot row and done event never reached the coordinator");
    else
        snprintf(lost, sizeof(lost),
                 "the coordinator holds the job's metrics only up to step %" PRId64
                 ": the last metrics, the snapshot row and the done event never reached it",
                 j->r0_lost_step);
    char why[512];
    snprintf(why, sizeof(why),
             "node %s, which held global rank 0, was lost after the job's last step (%" PRId64
             "): the final snapshot is on node %s's disk (step %" PRId64
             "), but %s, and no step is left to train to send them again",
             j->r0_lost, j->max_steps, holder, snap, lost);
    rdzv_event(c, j, "failure", "%s", why);
    rdzv_finish(c, j, -EPROTO, j->last_step, why);
    return true;
}

/* Closes the forming round with the joined nodes (at most nodes_max);
 * `why` says which rule closed it (in the event and the round JSON). The
 * job's other nodes are free again. */
static void rdzv_close_round(struct rdzv_coord *c, struct rdzv_jrun *j, const char *reason)
{
    struct rdzv_cnode **jn = malloc(c->n * sizeof(*jn));
    if (!jn)
        return; /* tried again on the next tick */
    size_t nj = 0;
    for (size_t i = 0; i < c->n; i++)
        if (c->nodes[i].jr == j && c->nodes[i].alive && c->nodes[i].joined_round == j->round)
            jn[nj++] = &c->nodes[i];
    qsort(jn, nj, sizeof(*jn), rdzv_cmp_rank);
    if (nj > (size_t)j->nodes_max)
        nj = (size_t)j->nodes_max;
    /* Joins name the pinned step when they hold it, so its holders rank
     * first; global rank 0 must be one. */
    if (j->pin_step >= 0 && (nj == 0 || jn[0]->snap_step != j->pin_step)) {
        free(jn);
        if (j->pin_chosen) {
            char why[300];
            snprintf(why, sizeof(why),
                     "cannot resume from %s: no node of the world holds its file (step %" PRId64
                     "); resume from another snapshot or bring back a node that has it",
                     j->pin_what, j->pin_step);
            rdzv_event(c, j, "failure", "%s", why);
            rdzv_finish(c, j, -ENOENT, j->last_step, why);
            return;
        }
        /* A snapshot of this run that nobody kept: the nodes join again,
         * naming their newest snapshot. */
        char why[200];
        snprintf(why, sizeof(why), "no node holds %s; resuming from the newest snapshot",
                 j->pin_what);
        j->pin_step = -1;
        rdzv_open_round(c, j, j->opened_at, j->stop_snapshot, why);
        return;
    }
    if (nj && rdzv_final_records_lost(c, j, jn[0]->snap_step, jn[0]->id)) {
        free(jn);
        return;
    }
    int base = 0;
    char names[512] = "";
    size_t off = 0;
    for (size_t i = 0; i < nj; i++) {
        jn[i]->member = true;
        jn[i]->rank_base = base;
        jn[i]->exit_round = -1;
        base += jn[i]->workers;
        if (off < sizeof(names))
            off += (size_t)snprintf(names + off, sizeof(names) - off, "%s%s", i ? ", " : "",
                                    jn[i]->id);
    }
    int64_t snap = nj ? jn[0]->snap_step : -1;
    j->world_start = snap > 0 ? snap : 0;
    char first[RDZV_NODE_ID_MAX];
    snprintf(first, sizeof(first), "%s", nj ? jn[0]->id : "");
    free(jn);
    /* Placed nodes that are not in the world (joined past max, or never
     * joined) go back to the free ones. */
    for (size_t i = 0; i < c->n; i++)
        if (c->nodes[i].jr == j && !c->nodes[i].member)
            rdzv_unplace(c, &c->nodes[i]);
    snprintf(j->close_why, sizeof(j->close_why), "%s", reason);
    j->world = base;
    j->phase = RDZV_RUNNING;
    j->final_seen = false;
    j->final_lost = false;
    j->run_id = 0;
    int64_t prev = j->last_world_round;
    j->last_world_round = j->round;
    if (c->h.world)
        c->h.world(c->h.ctx, j->job, j->world, (int)nj, &j->run_id);
    if (snap >= 0)
        rdzv_event_at(c, j, snap, "world",
                      "round %" PRId64 " closed (%s): %zu node%s (%s), world size %d; resuming "
                      "from the step %" PRId64 " snapshot on %s",
                      j->round, reason, nj, nj == 1 ? "" : "s", names, j->world, snap, first);
    else
        rdzv_event(c, j, "world", "round %" PRId64 " closed (%s): %zu node%s (%s), world size %d",
                   j->round, reason, nj, nj == 1 ? "" : "s", names, j->world);
    rdzv_publish_world(c, j, prev);
    rdzv_publish_job(c, j);
}

/* ---- inputs ---- */

/* Node nd reported that it could not deliver what it claimed (its own
 * exit, class FAILURE_NODE; a peer's lost connection never lands here):
 * no job is placed on it for a back-off that doubles with each such
 * failure under the same claim. */
static void rdzv_quarantine(struct rdzv_coord *c, struct rdzv_cnode *nd, double now,
                            const char *why)
{
    bool same = nd->strikes > 0 && nd->claim_workers == nd->workers &&
                strcmp(nd->claim_devices, nd->devices) == 0;
    nd->strikes = same ? nd->strikes + 1 : 1;
    nd->claim_workers = nd->workers;
    snprintf(nd->claim_devices, sizeof(nd->claim_devices), "%s", nd->devices);
    snprintf(nd->quarantine_why, sizeof(nd->quarantine_why), "%.199s",
             why && why[0] ? why : "node fault");
    int secs = failure_quarantine_s(nd->strikes);
    nd->quarantine_until = now + secs;
    nd->quarantine_wall = time(NULL) + secs;
    rdzv_event(c, nd->jr, "node_quarantined",
               "node %s quarantined for %d s (node fault %d with this claim: %d worker%s, %s): %s",
               nd->id, secs, nd->strikes, nd->workers, nd->workers == 1 ? "" : "s",
               nd->devices[0] ? nd->devices : "cpu", nd->quarantine_why);
}

/* Node nd's own retryable failure was the first of j's world, before the
 * world trained a step. The same on FAILURE_EARLY_JOBS different jobs in
 * a row (no exit after a step between them) is the node's pattern, not
 * the jobs' bad luck: it is quarantined, and j forms again without it
 * spending a restart. A peer whose connection to it broke reports later
 * than the node that failed first, so it is not the one counted. */
static void rdzv_early_failure(struct rdzv_coord *c, struct rdzv_cnode *nd, struct rdzv_jrun *j,
                               double now, const char *msg)
{
    if (nd->early_job != j->job) {
        nd->early_job = j->job;
        nd->early_jobs++;
    }
    if (nd->early_jobs < FAILURE_EARLY_JOBS)
        return;
    char why[200];
    snprintf(why, sizeof(why),
             "failed rounds of %d different jobs before their first step (last: %.100s)",
             nd->early_jobs, msg && msg[0] ? msg : "no message");
    nd->early_jobs = 0;
    rdzv_quarantine(c, nd, now, why);
    j->failure_class = FAILURE_NODE;
    snprintf(j->failure_why, sizeof(j->failure_why), "node %.60s failed (node fault): %.160s",
             nd->id, why);
}

/* A new incarnation of a quarantined node that claims something else
 * (workers, devices) is placed again; the same claim stays quarantined. */
static void rdzv_quarantine_review(struct rdzv_coord *c, struct rdzv_cnode *nd,
                                   const struct cluster_msg *m)
{
    if (!nd->strikes)
        return;
    const char *dev = m->devices[0] ? m->devices : nd->devices;
    if (m->workers == nd->claim_workers && strcmp(dev, nd->claim_devices) == 0)
        return;
    if (nd->quarantine_until > 0)
        rdzv_event(c, NULL, "node",
                   "node %s is back with another claim (%d worker%s, %s): "
                   "its quarantine ends",
                   nd->id, m->workers, m->workers == 1 ? "" : "s", dev[0] ? dev : "cpu");
    nd->quarantine_until = 0;
    nd->strikes = 0;
    nd->quarantine_why[0] = '\0';
}

static void rdzv_node_lost(struct rdzv_coord *c, struct rdzv_cnode *nd, const char *why)
{
    (void)c;
    struct rdzv_jrun *j = nd->jr;
    if (!j || !nd->member || (j->phase != RDZV_RUNNING && j->phase != RDZV_STOPPING))
        return;
    /* Rank 0's done event came after its final metric and snapshot row:
     * the coordinator holds every record of the run, and the world
     * finished its last step. Re-forming would only find its final
     * snapshot and nothing left to train. */
    if (j->final_seen) {
        j->final_lost = true;
        return;
    }
    if (nd->rank_base == 0) {
        snprintf(j->r0_lost, sizeof(j->r0_lost), "%s", nd->id);
        j->r0_lost_step = j->last_step;
    }
    if (!j->failure) {
        j->failure = true;
        snprintf(j->failure_why, sizeof(j->failure_why), "node %.64s %.64s", nd->id, why);
    }
}

/* A node stopping on purpose: it is gone, and a world it was part of
 * re-forms at an agreed step boundary (each node writing its snapshot, the
 * leaving one included while it is still there). Not a failure, so no
 * restart is counted. */
static void rdzv_node_leave(struct rdzv_coord *c, double now, struct rdzv_cnode *nd)
{
    if (nd->left || !nd->alive)
        return;
    nd->left = true;
    nd->alive = false;
    struct rdzv_jrun *j = nd->jr;
    rdzv_event(c, j, "node_left", "node %s is stopping and leaves the cluster", nd->id);
    if (j && nd->member && j->phase == RDZV_RUNNING && !j->failure) {
        char why[128];
        snprintf(why, sizeof(why), "node %.64s left", nd->id);
        rdzv_open_round(c, j, now, true, why);
    }
}

void rdzv_coord_message(struct rdzv_coord *c, double now, const struct cluster_msg *m)
{
    if (m->type != CLUSTER_MSG_HB && m->type != CLUSTER_MSG_JOIN && m->type != CLUSTER_MSG_LEAVE)
        return;
    struct rdzv_cnode *nd = rdzv_find(c, m->node);
    if (m->type == CLUSTER_MSG_LEAVE) {
        if (nd && nd->inc == m->inc)
            rdzv_node_leave(c, now, nd);
        return;
    }
    /* What a leaving node still says (its workers stopping) changes nothing. */
    if (nd && nd->left && nd->inc == m->inc)
        return;
    if (!nd) {
        if (!(nd = rdzv_add(c, m->node)))
            return;
        nd->inc = m->inc;
        rdzv_event(c, NULL, "node", "node %s registered (%s, %d worker%s)", m->node,
                   m->addr[0] ? m->addr : "?", m->workers, m->workers == 1 ? "" : "s");
    } else if (nd->inc != m->inc) {
        /* The node's process restarted: the old one is gone for good. */
        if (nd->alive)
            rdzv_event(c, nd->jr, "node", "node %s restarted", m->node);
        else
            rdzv_event(c, nd->jr, "node", "node %s is back", m->node);
        rdzv_node_lost(c, nd, "restarted");
        rdzv_quarantine_review(c, nd, m);
        nd->inc = m->inc;
        nd->left = false;
        if (nd->jr && !nd->member)
            rdzv_unplace(c, nd); /* a member stays counted until its world re-forms */
        nd->member = nd->prev_member = false;
        nd->joined_round = -1;
        nd->exit_round = -1;
        nd->pub_done = false; /* the new process reads its round afresh */
    } else if (!nd->alive) {
        rdzv_event(c, nd->jr, "node", "node %s is back", m->node);
    }
    nd->alive = true;
    nd->last_hb = now;
    nd->iid = m->iid;
    nd->workers = m->workers;
    if (m->addr[0])
        snprintf(nd->addr, sizeof(nd->addr), "%s", m->addr);
    if (m->version[0])
        snprintf(nd->version, sizeof(nd->version), "%s", m->version);
    if (m->devices[0])
        snprintf(nd->devices, sizeof(nd->devices), "%s", m->devices);
    snprintf(nd->gpus, sizeof(nd->gpus), "%s", m->gpus);
    if (m->state[0])
        snprintf(nd->state, sizeof(nd->state), "%s", m->state);
    nd->gen = m->gen;
    nd->round = m->round;
    nd->job = m->job;
    if (!nd->pub_done)
        rdzv_publish_node(c, nd);

    struct rdzv_jrun *j = nd->jr;
    if (m->type == CLUSTER_MSG_JOIN || strcmp(m->state, "joined") == 0) {
        if (j && j->phase == RDZV_FORMING && m->gen == c->gen && m->round == j->round &&
            m->job == j->job && nd->joined_round != j->round) {
            nd->joined_round = j->round;
            nd->snap_step = m->snap_step;
        }
        return;
    }
    /* A heartbeat carries the node's last worker exit until the next round. */
    if (j && m->gen == c->gen && m->job == j->job && m->exit_round == j->round && nd->member &&
        nd->exit_round != j->round) {
        nd->exit_round = m->exit_round;
        nd->exit_rc = m->exit_rc;
        nd->exit_step = m->exit_step;
        snprintf(nd->exit_msg, sizeof(nd->exit_msg), "%s", m->exit_msg);
        bool first = !j->failure;
        bool noted = j->phase == RDZV_RUNNING &&
                     failure_note(&j->failure, &j->failure_class, j->failure_why,
                                  sizeof(j->failure_why), nd->id, m->exit_rc, m->exit_msg);
        if (m->exit_step > j->world_start || m->exit_rc >= 0)
            nd->early_jobs = 0;
        else if (noted && first && j->failure_class == FAILURE_RETRY)
            rdzv_early_failure(c, nd, j, now, m->exit_msg);
        /* Only the node's own report of its own resources blames it. */
        if (j->phase == RDZV_RUNNING && failure_class_of(m->exit_rc, NULL) == FAILURE_NODE)
            rdzv_quarantine(c, nd, now, m->exit_msg);
    }
}

int rdzv_coord_admit(struct rdzv_coord *c, double now, const struct cluster_msg *m,
                     const char *peer, const char *holder, char *why, size_t cap)
{
    struct rdzv_cnode *nd = rdzv_find(c, m->node);
    /* A new id, the holder itself, a holder gone (dead or left: the id is
     * free again), or the holder's state directory (a restart, however
     * soon): taken. Neither naming an instance reads as a restart too. */
    if (!nd || nd->inc == m->inc || !nd->alive || nd->left ||
        now - nd->last_hb > c->o.dead_after_s || nd->iid == m->iid)
        return 0;
    snprintf(why, cap,
             "node id \"%s\" is taken: node %s at %s (store connection from %s) is alive in the "
             "cluster, and the gptd at %s (store connection from %s) is another node (another "
             "state directory); start it with its own --node-name",
             m->node, nd->id, nd->addr[0] ? nd->addr : "?", holder[0] ? holder : "?",
             m->addr[0] ? m->addr : "?", peer[0] ? peer : "?");
    if (nd->refused_inc != m->inc) {
        nd->refused_inc = m->inc;
        rdzv_event(c, NULL, "node", "%s", why);
    }
    return -EEXIST;
}

bool rdzv_coord_node_alive(const struct rdzv_coord *c, double now, const char *node,
                           const char **ret_addr)
{
    const struct rdzv_cnode *nd = rdzv_find((struct rdzv_coord *)c, node);

    if (ret_addr)
        *ret_addr = nd ? nd->addr : "";
    return nd && nd->alive && !nd->left && now - nd->last_hb <= c->o.dead_after_s;
}

bool rdzv_coord_touch(struct rdzv_coord *c, double now, const char *node)
{
    struct rdzv_cnode *nd = rdzv_find(c, node);
    if (!nd || !nd->alive || nd->left)
        return false;
    if (now > nd->last_hb)
        nd->last_hb = now;
    return true;
}

void rdzv_coord_blind(struct rdzv_coord *c, double now, double blind_s)
{
    for (size_t i = 0; i < c->n; i++) {
        struct rdzv_cnode *nd = &c->nodes[i];
        if (!nd->alive)
            continue;
        nd->last_hb += blind_s;
        if (nd->last_hb > now)
            nd->last_hb = now;
    }
}

void rdzv_coord_job_progress(struct rdzv_coord *c, int64_t job, int64_t step, int64_t snapshot)
{
    struct rdzv_jrun *j = rdzv_job_find(c, job);
    if (!j)
        return;
    if (step > j->last_step)
        j->last_step = step;
    if (snapshot > j->last_snap)
        j->last_snap = snapshot;
    /* A resumed run's own snapshot is what its later worlds resume from,
     * not a newer one left by the run before the chosen snapshot. */
    if (snapshot >= 0 && j->pin_step >= 0 && snapshot != j->pin_step) {
        j->pin_step = snapshot;
        j->pin_chosen = false;
        snprintf(j->pin_what, sizeof(j->pin_what), "the step %" PRId64 " snapshot", snapshot);
    }
    if (snapshot > j->want_snap)
        j->want_snap = snapshot;
}

void rdzv_coord_job_final(struct rdzv_coord *c, int64_t job)
{
    struct rdzv_jrun *j = rdzv_job_find(c, job);
    if (j && (j->phase == RDZV_RUNNING || j->phase == RDZV_STOPPING))
        j->final_seen = true;
}

void rdzv_coord_progress(struct rdzv_coord *c, int64_t step, int64_t snapshot)
{
    rdzv_coord_job_progress(c, rdzv_coord_job(c), step, snapshot);
}

/* trainer.max_steps of a job's spec (the daemon's resolved JSON), 0 when
 * it has none (the job ends by max_epochs) or does not parse. */
static int64_t rdzv_spec_max_steps(const char *spec_json)
{
    json_t *spec = json_loads(spec_json, 0, NULL);
    json_t *v = json_object_get(json_object_get(spec, "trainer"), "max_steps");
    int64_t n = json_is_integer(v) ? (int64_t)json_integer_value(v) : 0;
    json_decref(spec);
    return n > 0 ? n : 0;
}

int rdzv_coord_job_start(struct rdzv_coord *c, double now, const struct rdzv_job *job,
                         struct gpt_err *err)
{
    if (rdzv_job_find(c, job->id))
        return gpt_err_set(err, -EEXIST, NULL, "job %" PRId64 " is running", job->id);
    if (c->njobs >= RDZV_JOBS_MAX)
        return gpt_err_set(err, -EBUSY, NULL, "%d jobs are running (the most at once)",
                           RDZV_JOBS_MAX);
    int nmin = job->nodes_min > 0 ? job->nodes_min : 1;
    int rc = rdzv_coord_job_fits(c, nmin, true, err);
    if (rc < 0)
        return rc;
    struct rdzv_jrun *j = calloc(1, sizeof(*j));
    char *spec = strdup(job->spec_json);
    if (!j || !spec) {
        free(j);
        free(spec);
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    }
    j->job = job->id;
    j->owner_uid = job->owner_uid;
    j->token = job->token;
    j->spec_json = spec;
    j->snap_nodes = job->snap_nodes ? strdup(job->snap_nodes) : NULL; /* NULL: no preference */
    j->nodes_min = nmin;
    j->nodes_max = job->nodes_max >= nmin ? job->nodes_max : nmin;
    j->max_restarts = job->max_restarts;
    j->wait_timeout_s = job->wait_timeout_s;
    j->restarts = job->restarts > 0 ? job->restarts : 0;
    j->last_step = 0;
    j->last_snap = -1;
    j->pin_step = job->resume_chosen && job->resume_step >= 0 ? job->resume_step : -1;
    j->pin_chosen = j->pin_step >= 0;
    snprintf(j->pin_what, sizeof(j->pin_what), "%s",
             job->resume_what ? job->resume_what : "the chosen snapshot");
    j->want_snap = j->pin_chosen ? -1 : job->newest_snap;
    j->max_steps = rdzv_spec_max_steps(spec);
    c->jobs[c->njobs++] = j;
    rdzv_place(c, j, j->nodes_max);
    rdzv_open_round(c, j, now, false, "job started");
    return 0;
}

static void rdzv_job_stop(struct rdzv_coord *c, struct rdzv_jrun *j)
{
    if (j->stop_requested)
        return;
    j->stop_requested = true;
    if (j->phase == RDZV_RUNNING) {
        j->phase = RDZV_STOPPING;
        rdzv_event(c, j, "stop", "stopping the world at the next step boundary");
        rdzv_publish_job(c, j);
    } else if (j->phase == RDZV_FORMING && j->stop_snapshot) {
        /* A planned re-formation (a node left): the old world is writing
         * its snapshot at the step boundary it agreed on. Ending the job now
         * would abort it mid-way and lose every step since the last
         * snapshot; the forming tick ends it once the old world is done. */
        rdzv_event(c, j, "stop", "stopping once the re-forming world has written its snapshot");
    } else {
        rdzv_finish(c, j, GPT_TRAIN_STOPPED, j->last_step, NULL);
    }
}

void rdzv_coord_job_stop(struct rdzv_coord *c, int64_t job, double now)
{
    (void)now;
    if (job) {
        struct rdzv_jrun *j = rdzv_job_find(c, job);
        if (j)
            rdzv_job_stop(c, j);
        return;
    }
    /* Every job: one may end inside the call, and leave the array. */
    for (int i = 0; i < c->njobs;) {
        struct rdzv_jrun *j = c->jobs[i];
        rdzv_job_stop(c, j);
        if (i < c->njobs && c->jobs[i] == j)
            i++;
    }
}

int64_t rdzv_coord_job(const struct rdzv_coord *c)
{
    return c->njobs ? c->jobs[0]->job : 0;
}

bool rdzv_coord_job_runs(const struct rdzv_coord *c, int64_t job)
{
    return job && rdzv_job_find(c, job) != NULL;
}

int rdzv_coord_job_count(const struct rdzv_coord *c)
{
    return c->njobs;
}

void rdzv_coord_set_queued(struct rdzv_coord *c, int queued)
{
    c->queued = queued > 0 ? queued : 0;
}

/* ---- decisions ---- */

static void rdzv_tick_liveness(struct rdzv_coord *c, double now)
{
    /* The coordinator's own heartbeat goes round through its own store on
     * the same loop: a loop held up past dead_after_s (a loaded host, a
     * slow disk) would find it stale and the coordinator would declare
     * itself dead. The process judging is alive; its node is, too. */
    if (c->self[0])
        rdzv_coord_touch(c, now, c->self);
    for (size_t i = 0; i < c->n; i++) {
        struct rdzv_cnode *nd = &c->nodes[i];
        if (nd->quarantine_until > 0 && now >= nd->quarantine_until) {
            nd->quarantine_until = 0;
            rdzv_event(c, NULL, "node", "node %s: its quarantine ended; placed again", nd->id);
        }
        if (!nd->alive || now - nd->last_hb <= c->o.dead_after_s)
            continue;
        nd->alive = false;
        rdzv_event(c, nd->jr, "node_dead", "node %s silent for %.1f s: declared dead", nd->id,
                   now - nd->last_hb);
        rdzv_node_lost(c, nd, "died");
    }
}

/* Free nodes that heard this coordinator and have nothing to stop: a
 * running job short of max may take them in. */
static int rdzv_grow_candidates(const struct rdzv_coord *c)
{
    int n = 0;
    for (size_t i = 0; i < c->n; i++) {
        const struct rdzv_cnode *nd = &c->nodes[i];
        n += rdzv_node_free(nd) && nd->gen == c->gen &&
             (strcmp(nd->state, "idle") == 0 || strcmp(nd->state, "waiting") == 0);
    }
    return n;
}

/* The member of j's world holding global rank 0, or NULL. */
static const struct rdzv_cnode *rdzv_rank0(const struct rdzv_coord *c, const struct rdzv_jrun *j)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->nodes[i].jr == j && c->nodes[i].member && c->nodes[i].rank_base == 0)
            return &c->nodes[i];
    return NULL;
}

/* A member of j's world could not deliver what it claimed (rdzv_quarantine):
 * the world forms again without the quarantined nodes, on others if any
 * are free, spending none of the job's restarts; the fault was the node's. */
static void rdzv_replace_faulty(struct rdzv_coord *c, struct rdzv_jrun *j, double now)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->nodes[i].jr == j && c->nodes[i].quarantine_until > 0)
            rdzv_unplace(c, &c->nodes[i]);
    rdzv_event(c, j, "failure", "%s: placed again without the quarantined node (no restart used)",
               j->failure_why);
    rdzv_open_round(c, j, now, false, j->failure_why);
}

static void rdzv_tick_running(struct rdzv_coord *c, struct rdzv_jrun *j, double now)
{
    int members = 0, done = 0, exited = 0, running = 0;
    int64_t done_step = 0;
    for (size_t i = 0; i < c->n; i++) {
        struct rdzv_cnode *nd = &c->nodes[i];
        if (nd->jr != j || !nd->member)
            continue;
        members++;
        if (nd->exit_round == j->round) {
            exited++;
            if (nd->exit_rc == GPT_TRAIN_DONE) {
                done++;
                done_step = nd->exit_step;
            }
        } else if (nd->alive && nd->gen == c->gen && nd->round == j->round &&
                   strcmp(nd->state, "running") == 0) {
            running++;
        }
    }
    /* Finished workers end the job as completed only once the coordinator
     * holds global rank 0's last records (its final metric, snapshot row
     * and done event), which may still be on their way from a member. That
     * node reports its exit only after they reached the store, and the
     * inbox is read before the heartbeats: its exit without them means they
     * were lost. If it dies first, the failure below resumes the job. */
    if (done > 0 && j->final_seen) {
        rdzv_finish(c, j, GPT_TRAIN_DONE, done_step, NULL);
        return;
    }
    /* A member lost after rank 0's done event: the others finish (or
     * fail on the lost peer) at the last step; the job is complete. */
    if (j->final_lost && running == 0) {
        rdzv_finish(c, j, GPT_TRAIN_DONE, done > 0 ? done_step : j->last_step, NULL);
        return;
    }
    if (done > 0 && !j->failure) {
        const struct rdzv_cnode *r0 = rdzv_rank0(c, j);
        if (r0 && r0->exit_round != j->round)
            return;
        char why[300];
        snprintf(why, sizeof(why),
                 "the workers finished at step %" PRId64 ", but the last records of global rank 0 "
                 "(node %s) did not reach the coordinator",
                 done_step, r0 ? r0->id : "?");
        rdzv_event(c, j, "failure", "%s", why);
        rdzv_finish(c, j, -EPROTO, j->last_step, why);
        return;
    }
    if (j->phase == RDZV_STOPPING) {
        int pending = 0;
        for (size_t i = 0; i < c->n; i++) {
            const struct rdzv_cnode *nd = &c->nodes[i];
            pending += nd->jr == j && nd->member && nd->alive && nd->exit_round != j->round;
        }
        if (pending == 0)
            rdzv_finish(c, j, GPT_TRAIN_STOPPED, j->last_step, NULL);
        return;
    }
    if (j->failure && j->failure_class == FAILURE_NODE) {
        rdzv_replace_faulty(c, j, now);
        return;
    }
    bool final = failure_class_final(j->failure_class);
    if (j->failure || (exited > 0 && exited == members)) {
        if (!j->failure)
            snprintf(j->failure_why, sizeof(j->failure_why), "the world stopped unexpectedly");
        if (!final) { /* an error no restart heals uses up none */
            j->restarts++;
            if (c->h.restarts)
                c->h.restarts(c->h.ctx, j->job, j->restarts);
        }
        if (j->restarts > j->max_restarts || final) {
            char why[400];
            if (final)
                snprintf(why, sizeof(why), "%s; not restarted (retrying cannot heal it)",
                         j->failure_why);
            else
                snprintf(why, sizeof(why), "%s; %d restart%s used up (distributed.max_restarts)",
                         j->failure_why, j->max_restarts, j->max_restarts == 1 ? "" : "s");
            rdzv_event(c, j, "failure", "%s", why);
            rdzv_finish(c, j, -ECONNABORTED, j->last_step, why);
            return;
        }
        rdzv_event(c, j, "failure", "%s: restart %d of %d from the newest snapshot", j->failure_why,
                   j->restarts, j->max_restarts);
        rdzv_open_round(c, j, now, false, j->failure_why);
        return;
    }
    /* Take free nodes in once the whole world is up (stopping a world
     * whose members are still connecting would strand the late ones), and
     * only while no job waits in the queue for them. */
    if (members < j->nodes_max && running == members && c->queued == 0 &&
        rdzv_grow_candidates(c) > 0) {
        bool fresh =
            j->last_snap >= 0 && j->last_step - j->last_snap <= (int64_t)c->o.admit_snapshot_steps;
        rdzv_place(c, j, j->nodes_max - members);
        rdzv_open_round(c, j, now, !fresh, "admitting waiting nodes");
    }
}

/* A forming or waiting job short of its nodes takes free ones: up to min
 * always (it was started), up to max while no job waits in the queue. */
static void rdzv_top_up(struct rdzv_coord *c, struct rdzv_jrun *j)
{
    int placed = rdzv_placed_alive(c, j);
    int want = (placed < j->nodes_min || c->queued == 0) ? j->nodes_max - placed : 0;
    if (placed < j->nodes_min && c->queued > 0)
        want = j->nodes_min - placed;
    if (want > 0)
        rdzv_place(c, j, want);
}

/* Members of the previous world whose workers still run: stopping at the
 * agreed step boundary and writing their snapshot. */
static int rdzv_prev_busy(const struct rdzv_coord *c, const struct rdzv_jrun *j)
{
    int busy = 0;
    for (size_t i = 0; i < c->n; i++) {
        const struct rdzv_cnode *nd = &c->nodes[i];
        busy += nd->jr == j && nd->alive && nd->prev_member && nd->joined_round != j->round &&
                (strcmp(nd->state, "running") == 0 || strcmp(nd->state, "stopping") == 0);
    }
    return busy;
}

static void rdzv_tick_forming(struct rdzv_coord *c, struct rdzv_jrun *j, double now)
{
    if (j->stop_requested) {
        if (rdzv_prev_busy(c, j) == 0 || now - j->opened_at > RDZV_JOIN_TIMEOUT_S)
            rdzv_finish(c, j, GPT_TRAIN_STOPPED, j->last_step, NULL);
        return;
    }
    rdzv_top_up(c, j);
    int alive = 0, joined = 0, pending_prev = 0, joining = 0;
    bool has_newest = j->want_snap < 0;
    for (size_t i = 0; i < c->n; i++) {
        const struct rdzv_cnode *nd = &c->nodes[i];
        if (nd->jr != j || !nd->alive)
            continue;
        alive++;
        if (nd->joined_round == j->round) {
            joined++;
            has_newest |= nd->snap_step >= j->want_snap;
            continue;
        }
        if (nd->prev_member)
            pending_prev++;
        else if (nd->gen == c->gen && nd->round == j->round && nd->job == j->job &&
                 strcmp(nd->state, "joining") == 0)
            joining++;
    }
    double age = now - j->opened_at;
    /* A coordinator that just started gives the nodes one last call to
     * register before it calls the job short of nodes. */
    if (alive < j->nodes_min && age < c->o.last_call_s)
        return;
    if (alive < j->nodes_min) {
        j->phase = RDZV_WAITING;
        j->waiting_since = now;
        char quar[160] = "";
        rdzv_quarantined_note(c, quar, sizeof(quar));
        rdzv_event(c, j, "waiting", "waiting for nodes: %d of at least %d alive%s", alive,
                   j->nodes_min, quar);
        if (c->h.waiting)
            c->h.waiting(c->h.ctx, j->job, true);
        rdzv_publish_job(c, j);
        return;
    }
    bool timed_out = pending_prev > 0 && age > RDZV_JOIN_TIMEOUT_S;
    if (timed_out)
        pending_prev = 0;
    /* Resuming from an older snapshot than one the job recorded would redo
     * steps (and their metrics): give its holders time to come back. */
    if (!has_newest && age < RDZV_SNAP_WAIT_S && joined < j->nodes_max)
        return;
    char why[160];
    if (joined >= j->nodes_max) {
        snprintf(why, sizeof(why), "max: %d of %d nodes joined", joined, j->nodes_max);
    } else if (joined < j->nodes_min || pending_prev > 0) {
        return; /* never short of min, nor without the previous world's members */
    } else if (joined == alive) {
        snprintf(why, sizeof(why), "every alive node joined: %d (min %d, max %d)", joined,
                 j->nodes_min, j->nodes_max);
    } else if (age >= c->o.last_call_s) {
        /* Nodes that already answer for this round (scanning their
         * snapshots before they join) are still coming: wait for them,
         * up to the join time-out. */
        if (joining > 0 && age < RDZV_JOIN_TIMEOUT_S)
            return;
        snprintf(why, sizeof(why), "last call after %.1f s: %d of %d alive joined (min %d)%s", age,
                 joined, alive, j->nodes_min, timed_out ? ", previous members timed out" : "");
    } else {
        return;
    }
    rdzv_close_round(c, j, why);
}

static void rdzv_tick_waiting(struct rdzv_coord *c, struct rdzv_jrun *j, double now)
{
    rdzv_top_up(c, j);
    int alive = rdzv_placed_alive(c, j);
    if (alive >= j->nodes_min) {
        if (c->h.waiting)
            c->h.waiting(c->h.ctx, j->job, false);
        rdzv_open_round(c, j, now, false, "enough nodes are alive again");
        return;
    }
    if (j->wait_timeout_s > 0 && now - j->waiting_since > j->wait_timeout_s) {
        char why[256];
        snprintf(why, sizeof(why),
                 "waiting for nodes: only %d of at least %d alive for %d s"
                 " (distributed.wait_timeout_s)",
                 alive, j->nodes_min, j->wait_timeout_s);
        rdzv_event(c, j, "failure", "%s", why);
        rdzv_finish(c, j, -ETIMEDOUT, j->last_step, why);
    }
}

void rdzv_coord_tick(struct rdzv_coord *c, double now)
{
    rdzv_tick_liveness(c, now);
    /* A job may end inside its tick and leave the array. */
    for (int i = 0; i < c->njobs;) {
        struct rdzv_jrun *j = c->jobs[i];
        switch (j->phase) {
        case RDZV_RUNNING:
        case RDZV_STOPPING:
            rdzv_tick_running(c, j, now);
            break;
        case RDZV_FORMING:
            rdzv_tick_forming(c, j, now);
            break;
        case RDZV_WAITING:
            rdzv_tick_waiting(c, j, now);
            break;
        default:
            break;
        }
        if (i < c->njobs && c->jobs[i] == j)
            i++;
    }
}

/* ---- life cycle ---- */

struct rdzv_coord *rdzv_coord_new(uint64_t gen, const struct rdzv_opts *o,
                                  const struct rdzv_hooks *h)
{
    struct rdzv_coord *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->gen = gen;
    c->o = *o;
    c->h = *h;
    snprintf(c->self, sizeof(c->self), "%s", o->self_node ? o->self_node : "");
    c->o.self_node = c->self;
    return c;
}

void rdzv_coord_free(struct rdzv_coord *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->njobs; i++) {
        free(c->jobs[i]->spec_json);
        free(c->jobs[i]->snap_nodes);
        free(c->jobs[i]);
    }
    free(c->nodes);
    free(c->idx);
    free(c);
}
