/*
 * test_cluster_256: the control plane with 256 nodes, end to end on one
 * loop: a real coordinator (daemon/cluster/cluster.c with its store server and
 * daemon/cluster/rdzv.c) and 256 real member clusters (each its own store
 * connection, heartbeats, round watch), each with a simulated agent that
 * joins rounds and takes its assignment as gptd's agent does. Asserts:
 * every node registers; a job "128:256" forms one world with every node,
 * ranks 0..255 each once, closed because max was reached (not at min,
 * not at the last call); every member
 * watches the round (one parked watch each, no polling) and the steady
 * load is about one heartbeat per node per second; a node that dies is
 * declared dead and the survivors of a job "128:256" re-form a world
 * without it. Bounded by deadlines; labelled integration.
 */
#include <errno.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <uv.h>

#include "cluster.h"
#include "store_server.h"

#define NODES  256
#define SECRET "test-cluster-256-secret-0123456789"

/* A simulated agent: the fields gptd's agent puts in heartbeats. */
struct sim {
    struct cluster *cl;
    char id[32];
    char state[16];
    uint64_t gen;
    int64_t round, job;
    int64_t world_round; /* the round whose assignment it holds, -1 none */
    int rank_base;
    bool dead;
};

static struct sim sims[NODES];
static uv_loop_t loop;
static struct cluster *coord;
static char closed_why[160];

static void sim_heartbeat(void *ctx, struct cluster_msg *hb)
{
    struct sim *s = ctx;
    snprintf(hb->state, sizeof(hb->state), "%s", s->state);
    hb->gen = s->gen;
    hb->round = s->round;
    hb->job = s->job;
    hb->present |= CLUSTER_MSG_BIT(STATE) | CLUSTER_MSG_BIT(GEN) | CLUSTER_MSG_BIT(ROUND) |
                   CLUSTER_MSG_BIT(JOB);
    if (strcmp(s->state, "joined") == 0) {
        hb->snap_step = -1;
        hb->present |= CLUSTER_MSG_BIT(SNAP);
    }
}

static void sim_round(void *ctx, struct round_doc *cur)
{
    struct sim *s = ctx;
    s->gen = cur->gen;
    if (strcmp(cur->phase, "forming") == 0 && cur->job && cur->round != s->round) {
        s->round = cur->round;
        s->job = cur->job;
        snprintf(s->state, sizeof(s->state), "joined");
        cluster_heartbeat_soon(s->cl);
    } else if (strcmp(cur->phase, "running") == 0 && cur->has_me && cur->round == s->round &&
               s->world_round != cur->round) {
        s->world_round = cur->round;
        s->rank_base = cur->me.rank_base;
        snprintf(s->state, sizeof(s->state), "running");
        snprintf(closed_why, sizeof(closed_why), "%s", cur->closed);
        cluster_heartbeat_soon(s->cl);
    }
    round_doc_done(cur);
}

static void sim_lost(void *ctx)
{
    (void)ctx;
}

static double now_s(void)
{
    return (double)uv_hrtime() / 1e9;
}

/* Runs the loop until cond() holds or limit_s passes. */
static bool run_until(bool (*cond)(int), int arg, double limit_s)
{
    double end = now_s() + limit_s;
    while (!cond(arg)) {
        if (now_s() > end)
            return false;
        uv_run(&loop, UV_RUN_ONCE);
    }
    return true;
}

static void run_for(double s)
{
    double end = now_s() + s;
    while (now_s() < end)
        uv_run(&loop, UV_RUN_ONCE);
}

/* The coordinator knows `want` alive nodes besides itself. */
static bool alive_nodes(int want)
{
    json_t *nodes = cluster_nodes_json(coord);
    size_t i;
    json_t *n;
    int alive = 0;
    json_array_foreach(nodes, i, n)
    {
        const char *st = json_string_value(json_object_get(n, "state"));
        const char *id = json_string_value(json_object_get(n, "node"));
        alive += st && strcmp(st, "dead") != 0 && id && strncmp(id, "sim-", 4) == 0;
    }
    json_decref(nodes);
    return alive == want;
}

/* Every live sim holds the assignment of round `round` or later. */
static bool all_in_world(int round)
{
    for (int i = 0; i < NODES; i++)
        if (!sims[i].dead && sims[i].world_round < round)
            return false;
    return true;
}

static void on_closed(void *arg)
{
    (*(int *)arg)++;
}

static void test_cluster_256(void **state)
{
    struct gpt_err err;
    struct cluster_opts co = {.node_id = "coordinator",
                              .host = "127.0.0.1",
                              .port = 0,
                              .coordinator = true,
                              .secret = SECRET,
                              .secret_len = strlen(SECRET),
                              .heartbeat_s = 1,
                              .dead_after_s = 3,
                              .last_call_s = 5,
                              .addr = "127.0.0.1",
                              .workers = 1,
                              .version = "test"};
    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(cluster_new(&loop, &co, &coord, &err), 0);
    for (int i = 0; i < NODES; i++) {
        struct sim *s = &sims[i];
        snprintf(s->id, sizeof(s->id), "sim-%03d", i);
        snprintf(s->state, sizeof(s->state), "idle");
        s->round = s->world_round = -1;
        struct cluster_opts mo = co;
        mo.node_id = s->id;
        mo.coordinator = false;
        mo.port = cluster_port(coord);
        assert_int_equal(cluster_new(&loop, &mo, &s->cl, &err), 0);
        struct cluster_node_hooks h = {
            .ctx = s, .round = sim_round, .lost = sim_lost, .heartbeat = sim_heartbeat};
        cluster_set_node_hooks(s->cl, &h);
    }

    /* Registration. */
    assert_true(run_until(alive_nodes, NODES, 20));

    /* A job "128:256": one world with every node, each rank once. */
    assert_int_equal(cluster_job_start(coord, 1, geteuid(), "{}", NODES / 2, NODES, 3, 60, &err),
                     0);
    assert_true(run_until(all_in_world, 1, 15));
    static bool seen[NODES];
    for (int i = 0; i < NODES; i++) {
        assert_true(sims[i].rank_base >= 0 && sims[i].rank_base < NODES);
        assert_false(seen[sims[i].rank_base]);
        seen[sims[i].rank_base] = true;
    }
    assert_true(strncmp(closed_why, "max: 256 of 256", 15) == 0);

    /* Steady state: one parked round watch per member, about one request
     * per node per second (heartbeats), no polling. */
    struct store_server_stats st0, st1;
    run_for(1.0);
    store_server_stats(cluster_store_server(coord), &st0);
    assert_true(st0.watches >= NODES);
    double t0 = now_s();
    run_for(2.0);
    store_server_stats(cluster_store_server(coord), &st1);
    double per_node_s = (double)(st1.requests - st0.requests) / (now_s() - t0) / NODES;
    print_message("steady: %.2f requests per node per second\n", per_node_s);
    assert_true(per_node_s < 1.6);
    assert_true(st1.heartbeats >= NODES);

    /* A node dies (its process gone: connection and heartbeats). The job
     * lost a member: a new round without it, every survivor in it. */
    int closed = 0;
    sims[7].dead = true;
    cluster_close(sims[7].cl, on_closed, &closed);
    int64_t round = sims[0].world_round;
    assert_true(run_until(all_in_world, (int)round + 1, 15));
    assert_int_equal(closed, 1);
    assert_true(run_until(alive_nodes, NODES - 1, 1));
    assert_true(strncmp(closed_why, "every alive node joined: 255", 28) == 0);
    memset(seen, 0, sizeof(seen));
    for (int i = 0; i < NODES; i++) {
        if (sims[i].dead)
            continue;
        assert_true(sims[i].rank_base >= 0 && sims[i].rank_base < NODES - 1);
        assert_false(seen[sims[i].rank_base]);
        seen[sims[i].rank_base] = true;
    }

    /* Everything closes and frees (ASan sees any leak of a watch). */
    for (int i = 0; i < NODES; i++)
        if (!sims[i].dead)
            cluster_close(sims[i].cl, on_closed, &closed);
    cluster_close(coord, on_closed, &closed);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(closed, NODES + 1);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as gptd: a hung-up peer is an error, not a signal */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_256),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
