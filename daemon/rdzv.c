/*
 * rdzv: the coordinator's round protocol (see rdzv.h). Owns the node table
 * and the round state (rdzv_impl.h); talks only through its hooks. The
 * JSON views of that state are in rdzv_view.c. Single-threaded.
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

static const char *const rdzv_phase_names[] = {"idle", "forming", "running", "waiting", "stopping"};

const char *rdzv_phase_name(int phase)
{
    return phase >= 0 && phase <= RDZV_STOPPING ? rdzv_phase_names[phase] : "unknown";
}

int rdzv_phase_parse(const char *name)
{
    for (int i = 0; i <= RDZV_STOPPING; i++)
        if (strcmp(name, rdzv_phase_names[i]) == 0)
            return i;
    return -1;
}

/* ---- helpers ---- */

static void rdzv_event(struct rdzv_coord *c, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void rdzv_event(struct rdzv_coord *c, const char *kind, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (c->h.event)
        c->h.event(c->h.ctx, c->job, kind, msg);
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

static int rdzv_alive_count(const struct rdzv_coord *c)
{
    int n = 0;
    for (size_t i = 0; i < c->n; i++)
        n += c->nodes[i].alive;
    return n;
}

static void rdzv_publish_json(struct rdzv_coord *c, const char *key, json_t *o)
{
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (text)
        c->h.publish(c->h.ctx, key, text);
    free(text);
}

/* A closed round: each member's assignment, and the whole world. The
 * previous round's keys go. */
static void rdzv_publish_world(struct rdzv_coord *c, int64_t prev_round)
{
    if (!c->h.publish)
        return;
    char key[RDZV_NODE_ID_MAX + 64];
    for (size_t i = 0; i < c->n; i++) {
        const struct rdzv_cnode *nd = &c->nodes[i];
        if (nd->prev_member && prev_round > 0) {
            snprintf(key, sizeof(key), "rdzv/%" PRId64 "/node/%s", prev_round, nd->id);
            c->h.publish(c->h.ctx, key, NULL);
        }
        if (nd->member) {
            snprintf(key, sizeof(key), "rdzv/%" PRId64 "/node/%s", c->round, nd->id);
            rdzv_publish_json(c, key, rdzv_member_json(nd));
        }
    }
    if (prev_round > 0) {
        snprintf(key, sizeof(key), "rdzv/%" PRId64 "/world", prev_round);
        c->h.publish(c->h.ctx, key, NULL);
    }
    snprintf(key, sizeof(key), "rdzv/%" PRId64 "/world", c->round);
    rdzv_publish_json(c, key, rdzv_coord_round_json(c, true));
}

static void rdzv_publish(struct rdzv_coord *c)
{
    c->version++;
    c->dirty = false;
    if (!c->h.publish)
        return;
    json_t *o = rdzv_coord_round_json(c, false);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text)
        return; /* republished on the next change; nodes keep polling */
    c->h.publish(c->h.ctx, RDZV_KEY_CUR, text);
    free(text);
}

static void rdzv_open_round(struct rdzv_coord *c, double now, bool snapshot, const char *why)
{
    c->round++;
    c->close_why[0] = '\0';
    c->phase = RDZV_FORMING;
    c->opened_at = now;
    c->stop_snapshot = snapshot;
    c->failure = false;
    c->failure_final = false;
    for (size_t i = 0; i < c->n; i++) {
        struct rdzv_cnode *nd = &c->nodes[i];
        nd->prev_member = nd->member && nd->alive;
        nd->member = false;
        nd->joined_round = -1;
    }
    rdzv_event(c, "round", "round %" PRId64 " opened: %s", c->round, why);
    rdzv_publish(c);
}

static void rdzv_finish(struct rdzv_coord *c, int rc, int64_t step, const char *error)
{
    int64_t job = c->job;
    c->phase = RDZV_IDLE;
    for (size_t i = 0; i < c->n; i++) {
        c->nodes[i].member = c->nodes[i].prev_member = false;
        c->nodes[i].joined_round = -1;
    }
    c->job = 0;
    c->pin_step = -1;
    free(c->spec_json);
    c->spec_json = NULL;
    c->world = 0;
    c->run_id = 0;
    c->round++;
    rdzv_publish(c);
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

/* Closes the forming round with the joined nodes (at most nodes_max);
 * `why` says which rule closed it (in the event and the round JSON). */
static void rdzv_close_round(struct rdzv_coord *c, const char *reason)
{
    struct rdzv_cnode **j = malloc(c->n * sizeof(*j));
    if (!j)
        return; /* tried again on the next tick */
    size_t nj = 0;
    for (size_t i = 0; i < c->n; i++)
        if (c->nodes[i].alive && c->nodes[i].joined_round == c->round)
            j[nj++] = &c->nodes[i];
    qsort(j, nj, sizeof(*j), rdzv_cmp_rank);
    if (nj > (size_t)c->nodes_max)
        nj = (size_t)c->nodes_max;
    /* Joins name the pinned step when they hold it, so its holders rank
     * first; global rank 0 must be one. */
    if (c->pin_step >= 0 && (nj == 0 || j[0]->snap_step != c->pin_step)) {
        free(j);
        if (c->pin_chosen) {
            char why[300];
            snprintf(why, sizeof(why),
                     "cannot resume from %s: no node of the world holds its file (step %" PRId64
                     "); resume from another snapshot or bring back a node that has it",
                     c->pin_what, c->pin_step);
            rdzv_event(c, "failure", "%s", why);
            rdzv_finish(c, -ENOENT, c->last_step, why);
            return;
        }
        /* A snapshot of this run that nobody kept: the nodes join again,
         * naming their newest snapshot. */
        char why[200];
        snprintf(why, sizeof(why), "no node holds %s; resuming from the newest snapshot",
                 c->pin_what);
        c->pin_step = -1;
        rdzv_open_round(c, c->opened_at, c->stop_snapshot, why);
        return;
    }
    int base = 0;
    char names[512] = "";
    size_t off = 0;
    for (size_t i = 0; i < nj; i++) {
        j[i]->member = true;
        j[i]->rank_base = base;
        j[i]->exit_round = -1;
        base += j[i]->workers;
        if (off < sizeof(names))
            off +=
                (size_t)snprintf(names + off, sizeof(names) - off, "%s%s", i ? ", " : "", j[i]->id);
    }
    int64_t snap = nj ? j[0]->snap_step : -1;
    snprintf(c->close_why, sizeof(c->close_why), "%s", reason);
    c->world = base;
    c->phase = RDZV_RUNNING;
    c->run_id = 0;
    int64_t prev = c->last_world_round;
    c->last_world_round = c->round;
    if (c->h.world)
        c->h.world(c->h.ctx, c->job, c->world, (int)nj, &c->run_id);
    if (snap >= 0)
        rdzv_event(c, "world",
                   "round %" PRId64 " closed (%s): %zu node%s (%s), world size %d; resuming from "
                   "the step %" PRId64 " snapshot on %s",
                   c->round, reason, nj, nj == 1 ? "" : "s", names, c->world, snap, j[0]->id);
    else
        rdzv_event(c, "world", "round %" PRId64 " closed (%s): %zu node%s (%s), world size %d",
                   c->round, reason, nj, nj == 1 ? "" : "s", names, c->world);
    free(j);
    /* Assignments first: a node that sees the round closed reads its own. */
    rdzv_publish_world(c, prev);
    rdzv_publish(c);
}

/* ---- inputs ---- */

static void rdzv_node_lost(struct rdzv_coord *c, struct rdzv_cnode *nd, const char *why)
{
    if (c->job && nd->member && (c->phase == RDZV_RUNNING || c->phase == RDZV_STOPPING) &&
        !c->failure) {
        c->failure = true;
        snprintf(c->failure_why, sizeof(c->failure_why), "node %.64s %.64s", nd->id, why);
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
    rdzv_event(c, "node_left", "node %s is stopping and leaves the cluster", nd->id);
    if (c->job && nd->member && c->phase == RDZV_RUNNING && !c->failure) {
        char why[128];
        snprintf(why, sizeof(why), "node %.64s left", nd->id);
        rdzv_open_round(c, now, true, why);
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
        rdzv_event(c, "node", "node %s registered (%s, %d worker%s)", m->node,
                   m->addr[0] ? m->addr : "?", m->workers, m->workers == 1 ? "" : "s");
    } else if (nd->inc != m->inc) {
        /* The node's process restarted: the old one is gone for good. */
        if (nd->alive)
            rdzv_event(c, "node", "node %s restarted", m->node);
        else
            rdzv_event(c, "node", "node %s is back", m->node);
        rdzv_node_lost(c, nd, "restarted");
        nd->inc = m->inc;
        nd->left = false;
        nd->member = nd->prev_member = false;
        nd->joined_round = -1;
        nd->exit_round = -1;
    } else if (!nd->alive) {
        rdzv_event(c, "node", "node %s is back", m->node);
    }
    nd->alive = true;
    nd->last_hb = now;
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

    if (m->type == CLUSTER_MSG_JOIN || strcmp(m->state, "joined") == 0) {
        if (c->phase == RDZV_FORMING && m->gen == c->gen && m->round == c->round &&
            m->job == c->job && nd->joined_round != c->round) {
            nd->joined_round = c->round;
            nd->snap_step = m->snap_step;
        }
        return;
    }
    /* A heartbeat carries the node's last worker exit until the next round. */
    if (c->job && m->gen == c->gen && m->job == c->job && m->exit_round == c->round && nd->member &&
        nd->exit_round != c->round) {
        nd->exit_round = m->exit_round;
        nd->exit_rc = m->exit_rc;
        nd->exit_step = m->exit_step;
        snprintf(nd->exit_msg, sizeof(nd->exit_msg), "%s", m->exit_msg);
        if (c->phase == RDZV_RUNNING)
            failure_note(&c->failure, &c->failure_final, c->failure_why, sizeof(c->failure_why),
                         nd->id, m->exit_rc, m->exit_msg);
    }
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

void rdzv_coord_progress(struct rdzv_coord *c, int64_t step, int64_t snapshot)
{
    if (step > c->last_step)
        c->last_step = step;
    if (snapshot > c->last_snap)
        c->last_snap = snapshot;
    /* A resumed run's own snapshot is what its later worlds resume from,
     * not a newer one left by the run before the chosen snapshot. */
    if (snapshot >= 0 && c->pin_step >= 0 && snapshot != c->pin_step) {
        c->pin_step = snapshot;
        c->pin_chosen = false;
        snprintf(c->pin_what, sizeof(c->pin_what), "the step %" PRId64 " snapshot", snapshot);
    }
    if (snapshot > c->want_snap)
        c->want_snap = snapshot;
}

int rdzv_coord_job_start(struct rdzv_coord *c, double now, const struct rdzv_job *job,
                         struct gpt_err *err)
{
    if (c->job)
        return gpt_err_set(err, -EBUSY, NULL, "job %" PRId64 " is running", c->job);
    char *spec = strdup(job->spec_json);
    if (!spec)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    c->job = job->id;
    c->owner_uid = job->owner_uid;
    c->token = job->token;
    c->spec_json = spec;
    c->nodes_min = job->nodes_min > 0 ? job->nodes_min : 1;
    c->nodes_max = job->nodes_max >= c->nodes_min ? job->nodes_max : c->nodes_min;
    c->max_restarts = job->max_restarts;
    c->wait_timeout_s = job->wait_timeout_s;
    c->restarts = job->restarts > 0 ? job->restarts : 0;
    c->stop_requested = false;
    c->last_step = 0;
    c->last_snap = -1;
    c->pin_step = job->resume_chosen && job->resume_step >= 0 ? job->resume_step : -1;
    c->pin_chosen = c->pin_step >= 0;
    snprintf(c->pin_what, sizeof(c->pin_what), "%s",
             job->resume_what ? job->resume_what : "the chosen snapshot");
    c->want_snap = c->pin_chosen ? -1 : job->newest_snap;
    for (size_t i = 0; i < c->n; i++)
        c->nodes[i].member = c->nodes[i].prev_member = false;
    rdzv_open_round(c, now, false, "job started");
    return 0;
}

void rdzv_coord_job_stop(struct rdzv_coord *c, double now)
{
    (void)now;
    if (!c->job || c->stop_requested)
        return;
    c->stop_requested = true;
    if (c->phase == RDZV_RUNNING) {
        c->phase = RDZV_STOPPING;
        rdzv_event(c, "stop", "stopping the world at the next step boundary");
        rdzv_publish(c);
    } else {
        rdzv_finish(c, GPT_TRAIN_STOPPED, c->last_step, NULL);
    }
}

int64_t rdzv_coord_job(const struct rdzv_coord *c)
{
    return c->job;
}

/* ---- decisions ---- */

static void rdzv_tick_liveness(struct rdzv_coord *c, double now)
{
    for (size_t i = 0; i < c->n; i++) {
        struct rdzv_cnode *nd = &c->nodes[i];
        if (!nd->alive || now - nd->last_hb <= c->o.dead_after_s)
            continue;
        nd->alive = false;
        rdzv_event(c, "node_dead", "node %s silent for %.1f s: declared dead", nd->id,
                   now - nd->last_hb);
        rdzv_node_lost(c, nd, "died");
    }
}

static void rdzv_tick_running(struct rdzv_coord *c, double now)
{
    int members = 0, done = 0, exited = 0, running = 0, waiting = 0;
    int64_t done_step = 0;
    for (size_t i = 0; i < c->n; i++) {
        struct rdzv_cnode *nd = &c->nodes[i];
        if (nd->member) {
            members++;
            if (nd->exit_round == c->round) {
                exited++;
                if (nd->exit_rc == GPT_TRAIN_DONE) {
                    done++;
                    done_step = nd->exit_step;
                }
            } else if (nd->alive && nd->gen == c->gen && nd->round == c->round &&
                       strcmp(nd->state, "running") == 0) {
                running++;
            }
        } else if (nd->alive && nd->gen == c->gen && nd->job == c->job &&
                   strcmp(nd->state, "waiting") == 0) {
            waiting++;
        }
    }
    if (done > 0) {
        rdzv_finish(c, GPT_TRAIN_DONE, done_step, NULL);
        return;
    }
    if (c->phase == RDZV_STOPPING) {
        int pending = 0;
        for (size_t i = 0; i < c->n; i++)
            pending +=
                c->nodes[i].member && c->nodes[i].alive && c->nodes[i].exit_round != c->round;
        if (pending == 0)
            rdzv_finish(c, GPT_TRAIN_STOPPED, c->last_step, NULL);
        return;
    }
    if (c->failure || (exited > 0 && exited == members)) {
        if (!c->failure)
            snprintf(c->failure_why, sizeof(c->failure_why), "the world stopped unexpectedly");
        if (!c->failure_final) { /* an error no restart heals uses up none */
            c->restarts++;
            if (c->h.restarts)
                c->h.restarts(c->h.ctx, c->job, c->restarts);
        }
        if (c->restarts > c->max_restarts || c->failure_final) {
            char why[400];
            if (c->failure_final)
                snprintf(why, sizeof(why), "%s; not restarted (retrying cannot heal it)",
                         c->failure_why);
            else
                snprintf(why, sizeof(why), "%s; %d restart%s used up (distributed.max_restarts)",
                         c->failure_why, c->max_restarts, c->max_restarts == 1 ? "" : "s");
            rdzv_event(c, "failure", "%s", why);
            rdzv_finish(c, -ECONNABORTED, c->last_step, why);
            return;
        }
        rdzv_event(c, "failure", "%s: restart %d of %d from the newest snapshot", c->failure_why,
                   c->restarts, c->max_restarts);
        rdzv_open_round(c, now, false, c->failure_why);
        return;
    }
    /* Take waiting nodes in once the whole world is up (stopping a world
     * whose members are still connecting would strand the late ones). */
    if (waiting > 0 && members < c->nodes_max && running == members) {
        bool fresh =
            c->last_snap >= 0 && c->last_step - c->last_snap <= (int64_t)c->o.admit_snapshot_steps;
        rdzv_open_round(c, now, !fresh, "admitting waiting nodes");
    }
}

static void rdzv_tick_forming(struct rdzv_coord *c, double now)
{
    int alive = rdzv_alive_count(c), joined = 0, pending_prev = 0, joining = 0;
    bool has_newest = c->want_snap < 0;
    for (size_t i = 0; i < c->n; i++) {
        const struct rdzv_cnode *nd = &c->nodes[i];
        if (!nd->alive)
            continue;
        if (nd->joined_round == c->round) {
            joined++;
            has_newest |= nd->snap_step >= c->want_snap;
            continue;
        }
        if (nd->prev_member)
            pending_prev++;
        else if (nd->gen == c->gen && nd->round == c->round && nd->job == c->job &&
                 strcmp(nd->state, "joining") == 0)
            joining++;
    }
    double age = now - c->opened_at;
    /* A coordinator that just started gives the nodes one last call to
     * register before it calls the job short of nodes. */
    if (alive < c->nodes_min && age < c->o.last_call_s)
        return;
    if (alive < c->nodes_min) {
        c->phase = RDZV_WAITING;
        c->waiting_since = now;
        rdzv_event(c, "waiting", "waiting for nodes: %d of at least %d alive", alive, c->nodes_min);
        if (c->h.waiting)
            c->h.waiting(c->h.ctx, c->job, true);
        rdzv_publish(c);
        return;
    }
    bool timed_out = pending_prev > 0 && age > RDZV_JOIN_TIMEOUT_S;
    if (timed_out)
        pending_prev = 0;
    /* Resuming from an older snapshot than one the job recorded would redo
     * steps (and their metrics): give its holders time to come back. */
    if (!has_newest && age < RDZV_SNAP_WAIT_S && joined < c->nodes_max)
        return;
    char why[160];
    if (joined >= c->nodes_max) {
        snprintf(why, sizeof(why), "max: %d of %d nodes joined", joined, c->nodes_max);
    } else if (joined < c->nodes_min || pending_prev > 0) {
        return; /* never short of min, nor without the previous world's members */
    } else if (joined == alive) {
        snprintf(why, sizeof(why), "every alive node joined: %d (min %d, max %d)", joined,
                 c->nodes_min, c->nodes_max);
    } else if (age >= c->o.last_call_s) {
        /* Nodes that already answer for this round (scanning their
         * snapshots before they join) are still coming: wait for them,
         * up to the join time-out. */
        if (joining > 0 && age < RDZV_JOIN_TIMEOUT_S)
            return;
        snprintf(why, sizeof(why), "last call after %.1f s: %d of %d alive joined (min %d)%s", age,
                 joined, alive, c->nodes_min, timed_out ? ", previous members timed out" : "");
    } else {
        return;
    }
    rdzv_close_round(c, why);
}

static void rdzv_tick_waiting(struct rdzv_coord *c, double now)
{
    int alive = rdzv_alive_count(c);
    if (alive >= c->nodes_min) {
        if (c->h.waiting)
            c->h.waiting(c->h.ctx, c->job, false);
        rdzv_open_round(c, now, false, "enough nodes are alive again");
        return;
    }
    if (c->wait_timeout_s > 0 && now - c->waiting_since > c->wait_timeout_s) {
        char why[256];
        snprintf(why, sizeof(why),
                 "waiting for nodes: only %d of at least %d alive for %d s"
                 " (distributed.wait_timeout_s)",
                 alive, c->nodes_min, c->wait_timeout_s);
        rdzv_event(c, "failure", "%s", why);
        rdzv_finish(c, -ETIMEDOUT, c->last_step, why);
    }
}

void rdzv_coord_tick(struct rdzv_coord *c, double now)
{
    rdzv_tick_liveness(c, now);
    switch (c->phase) {
    case RDZV_RUNNING:
    case RDZV_STOPPING:
        rdzv_tick_running(c, now);
        break;
    case RDZV_FORMING:
        rdzv_tick_forming(c, now);
        break;
    case RDZV_WAITING:
        rdzv_tick_waiting(c, now);
        break;
    default:
        break;
    }
    if (c->dirty)
        rdzv_publish(c);
}

void rdzv_coord_republish(struct rdzv_coord *c)
{
    if (c->phase == RDZV_RUNNING || c->phase == RDZV_STOPPING)
        rdzv_publish_world(c, 0);
    rdzv_publish(c);
}

/* ---- life cycle and views ---- */

struct rdzv_coord *rdzv_coord_new(uint64_t gen, const struct rdzv_opts *o,
                                  const struct rdzv_hooks *h)
{
    struct rdzv_coord *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->gen = gen;
    c->o = *o;
    c->h = *h;
    c->phase = RDZV_IDLE;
    c->last_snap = -1;
    c->pin_step = -1;
    c->want_snap = -1;
    rdzv_publish(c);
    return c;
}

void rdzv_coord_free(struct rdzv_coord *c)
{
    if (!c)
        return;
    free(c->spec_json);
    free(c->nodes);
    free(c->idx);
    free(c);
}
