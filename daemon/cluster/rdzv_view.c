/*
 * rdzv_view: the JSON views of the coordinator's state (see rdzv.h): a
 * job's round as published, a member's assignment, the node table (with
 * the job each node runs), each filled in as its proto/round_doc.h struct
 * and encoded by that table, and the phases' names. Read only; the state
 * is owned by rdzv.c (rdzv_impl.h), and nothing here calls back into it.
 * Single-threaded.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rdzv.h"
#include "nvml.h"
#include "rdzv_impl.h"
#include "round_doc.h"

/* The phases as the round documents spell them. */
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

static void rdzv_member_fill(const struct rdzv_cnode *nd, struct round_member *m)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->id, sizeof(m->id), "%s", nd->id);
    m->inc = nd->inc;
    m->rank_base = nd->rank_base;
    m->workers = nd->workers;
    snprintf(m->addr, sizeof(m->addr), "%s", nd->addr);
}

json_t *rdzv_member_json(const struct rdzv_cnode *nd)
{
    struct round_member m;
    rdzv_member_fill(nd, &m);
    return round_member_to_json(&m);
}

size_t rdzv_coord_node_count(const struct rdzv_coord *c)
{
    return c->n;
}

json_t *rdzv_jrun_json(const struct rdzv_coord *c, const struct rdzv_jrun *j, bool with_nodes)
{
    struct round_doc d;
    round_doc_init(&d);
    d.gen = c->gen;
    d.round = j ? j->round : c->round_seq;
    snprintf(d.phase, sizeof(d.phase), "%s", rdzv_phase_name(j ? j->phase : RDZV_IDLE));
    d.job = j ? j->job : 0;
    d.stop_snapshot = j && j->stop_snapshot;
    d.run_id = j ? j->run_id : 0;
    d.world = j ? j->world : 0;
    snprintf(d.prefix, sizeof(d.prefix), "j%" PRId64 "/%" PRIx64 "/r%" PRId64 "/", d.job, d.gen,
             d.round);
    if (!j)
        return round_doc_to_json(&d);
    d.spec = j->spec_json; /* borrowed: d is not freed */
    d.uid = (int64_t)j->owner_uid;
    d.token = j->token;
    d.resume_step = j->pin_step >= 0 ? j->pin_step : -1;
    bool world = j->phase == RDZV_RUNNING || j->phase == RDZV_STOPPING;
    if (world)
        snprintf(d.closed, sizeof(d.closed), "%s", j->close_why);
    struct round_member *members = NULL;
    if (with_nodes) {
        members = calloc(c->n ? c->n : 1, sizeof(*members));
        if (!members)
            return NULL;
        for (size_t i = 0; world && i < c->n; i++)
            if (c->nodes[i].jr == j && c->nodes[i].member)
                rdzv_member_fill(&c->nodes[i], &members[d.nodes.n++]);
        d.nodes = (struct round_members){members, d.nodes.n, true};
    }
    json_t *o = round_doc_to_json(&d);
    free(members);
    return o;
}

json_t *rdzv_coord_round_json(const struct rdzv_coord *c, bool with_nodes)
{
    return rdzv_jrun_json(c, c->njobs ? c->jobs[0] : NULL, with_nodes);
}

json_t *rdzv_coord_nodes_json(const struct rdzv_coord *c, double now)
{
    struct round_node *rows = calloc(c->n ? c->n : 1, sizeof(*rows));
    if (!rows)
        return NULL;
    for (size_t i = 0; i < c->n; i++) {
        const struct rdzv_cnode *nd = &c->nodes[i];
        struct round_node *r = &rows[i];
        bool quarantined = nd->quarantine_until > 0;
        const char *state = nd->left                 ? "left"
                            : !nd->alive             ? "dead"
                            : quarantined && !nd->jr ? "quarantined"
                            : nd->state[0]           ? nd->state
                                                     : "idle";
        if (quarantined) {
            struct tm tm;
            gmtime_r(&nd->quarantine_wall, &tm);
            strftime(r->quarantined_until, sizeof(r->quarantined_until), "%Y-%m-%dT%H:%M:%SZ", &tm);
            snprintf(r->quarantine, sizeof(r->quarantine), "%s", nd->quarantine_why);
        }
        snprintf(r->node, sizeof(r->node), "%s", nd->id);
        snprintf(r->state, sizeof(r->state), "%s", state);
        r->heartbeat_age_s = now - nd->last_hb;
        r->workers = nd->workers;
        snprintf(r->version, sizeof(r->version), "%s", nd->version);
        snprintf(r->addr, sizeof(r->addr), "%s", nd->addr);
        r->member = nd->member;
        snprintf(r->devices, sizeof(r->devices), "%s", nd->devices[0] ? nd->devices : "cpu");
        r->gpus = nvml_gpus_json(nd->gpus);
        if (json_is_null(r->gpus)) {
            json_decref(r->gpus);
            r->gpus = NULL;
        }
        r->job = nd->jr ? nd->jr->job : 0;
        if (nd->member)
            snprintf(r->ranks, sizeof(r->ranks), "%d-%d", nd->rank_base,
                     nd->rank_base + nd->workers - 1);
    }
    json_t *arr = round_nodes_to_json(rows, c->n);
    round_nodes_free(rows, c->n);
    return arr;
}
