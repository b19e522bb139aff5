/*
 * rdzv_view: the JSON views of the coordinator's state (see rdzv.h): the
 * round as published, a member's assignment, the node table. Read only;
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

json_t *rdzv_coord_round_json(const struct rdzv_coord *c, bool with_nodes)
{
    char gen[32], prefix[128];
    snprintf(gen, sizeof(gen), "%" PRIx64, c->gen);
    snprintf(prefix, sizeof(prefix), "j%" PRId64 "/%s/r%" PRId64 "/", c->job, gen, c->round);
    json_t *o = json_pack("{s:s, s:I, s:s, s:I, s:s, s:I, s:i, s:s}", "gen", gen, "round",
                          (json_int_t)c->round, "phase", rdzv_phase_name(c->phase), "job",
                          (json_int_t)c->job, "stop", c->stop_snapshot ? "snapshot" : "abort",
                          "run_id", (json_int_t)c->run_id, "world", c->world, "prefix", prefix);
    if (!o)
        return NULL;
    if (c->spec_json)
        json_object_set_new(o, "spec", json_string(c->spec_json));
    if (c->spec_json)
        json_object_set_new(o, "uid", json_integer((json_int_t)c->owner_uid));
    if (c->spec_json && c->token) { /* hex: a JSON integer cannot hold 64 bits */
        char tok[17];
        snprintf(tok, sizeof(tok), "%016" PRIx64, c->token);
        json_object_set_new(o, "token", json_string(tok));
    }
    if (c->job && c->pin_step >= 0)
        json_object_set_new(o, "resume_step", json_integer(c->pin_step));
    if ((c->phase == RDZV_RUNNING || c->phase == RDZV_STOPPING) && c->close_why[0])
        json_object_set_new(o, "closed", json_string(c->close_why));
    if (!with_nodes)
        return o;
    json_t *nodes = json_array();
    if (c->phase == RDZV_RUNNING || c->phase == RDZV_STOPPING)
        for (size_t i = 0; i < c->n; i++)
            if (c->nodes[i].member)
                json_array_append_new(nodes, rdzv_member_json(&c->nodes[i]));
    json_object_set_new(o, "nodes", nodes);
    return o;
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
