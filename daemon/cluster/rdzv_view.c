/*
 * rdzv_view: the JSON views of the coordinator's state (see rdzv.h): a
 * job's round as published, a member's assignment, the node table (with
 * the job each node runs). Read only;
 * the state is owned by rdzv.c (rdzv_impl.h). Single-threaded.
 */
#include <inttypes.h>
#include <stdio.h>

#include "rdzv.h"
#include "nvml.h"
#include "rdzv_impl.h"

json_t *rdzv_member_json(const struct rdzv_cnode *nd)
{
    char inc[32];
    snprintf(inc, sizeof(inc), "%" PRIx64, nd->inc);
    return json_pack("{s:s, s:s, s:i, s:i, s:s}", "id", nd->id, "inc", inc, "rank_base",
                     nd->rank_base, "workers", nd->workers, "addr", nd->addr);
}

size_t rdzv_coord_node_count(const struct rdzv_coord *c)
{
    return c->n;
}

json_t *rdzv_jrun_json(const struct rdzv_coord *c, const struct rdzv_jrun *j, bool with_nodes)
{
    char gen[32], prefix[128];
    int64_t job = j ? j->job : 0, round = j ? j->round : c->round_seq;
    int phase = j ? j->phase : RDZV_IDLE;
    snprintf(gen, sizeof(gen), "%" PRIx64, c->gen);
    snprintf(prefix, sizeof(prefix), "j%" PRId64 "/%s/r%" PRId64 "/", job, gen, round);
    json_t *o =
        json_pack("{s:s, s:I, s:s, s:I, s:s, s:I, s:i, s:s}", "gen", gen, "round",
                  (json_int_t)round, "phase", rdzv_phase_name(phase), "job", (json_int_t)job,
                  "stop", j && j->stop_snapshot ? "snapshot" : "abort", "run_id",
                  (json_int_t)(j ? j->run_id : 0), "world", j ? j->world : 0, "prefix", prefix);
    if (!o || !j)
        return o;
    json_object_set_new(o, "spec", json_string(j->spec_json));
    json_object_set_new(o, "uid", json_integer((json_int_t)j->owner_uid));
    if (j->token) { /* hex: a JSON integer cannot hold 64 bits */
        char tok[17];
        snprintf(tok, sizeof(tok), "%016" PRIx64, j->token);
        json_object_set_new(o, "token", json_string(tok));
    }
    if (j->pin_step >= 0)
        json_object_set_new(o, "resume_step", json_integer(j->pin_step));
    bool world = j->phase == RDZV_RUNNING || j->phase == RDZV_STOPPING;
    if (world && j->close_why[0])
        json_object_set_new(o, "closed", json_string(j->close_why));
    if (!with_nodes)
        return o;
    json_t *nodes = json_array();
    if (world)
        for (size_t i = 0; i < c->n; i++)
            if (c->nodes[i].jr == j && c->nodes[i].member)
                json_array_append_new(nodes, rdzv_member_json(&c->nodes[i]));
    json_object_set_new(o, "nodes", nodes);
    return o;
}

json_t *rdzv_coord_round_json(const struct rdzv_coord *c, bool with_nodes)
{
    return rdzv_jrun_json(c, c->njobs ? c->jobs[0] : NULL, with_nodes);
}

json_t *rdzv_coord_nodes_json(const struct rdzv_coord *c, double now)
{
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    for (size_t i = 0; i < c->n; i++) {
        const struct rdzv_cnode *nd = &c->nodes[i];
        const char *state = nd->left       ? "left"
                            : !nd->alive   ? "dead"
                            : nd->state[0] ? nd->state
                                           : "idle";
        json_t *o = json_pack("{s:s, s:s, s:f, s:i, s:s, s:s, s:b}", "node", nd->id, "state", state,
                              "heartbeat_age_s", now - nd->last_hb, "workers", nd->workers,
                              "version", nd->version, "addr", nd->addr, "member", nd->member);
        if (o)
            json_object_set_new(o, "devices", json_string(nd->devices[0] ? nd->devices : "cpu"));
        if (o)
            json_object_set_new(o, "gpus", nvml_gpus_json(nd->gpus));
        if (!o)
            continue;
        json_object_set_new(o, "job", nd->jr ? json_integer(nd->jr->job) : json_null());
        if (nd->member) {
            char ranks[48];
            snprintf(ranks, sizeof(ranks), "%d-%d", nd->rank_base, nd->rank_base + nd->workers - 1);
            json_object_set_new(o, "ranks", json_string(ranks));
        } else {
            json_object_set_new(o, "ranks", json_null());
        }
        json_array_append_new(arr, o);
    }
    return arr;
}
