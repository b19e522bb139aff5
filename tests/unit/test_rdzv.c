/*
 * Unit tests of daemon/rdzv's coordinator, a state machine driven by
 * messages and a clock: rounds close at MAX at once and at MIN after the
 * last call; ranks follow the newest snapshot; a round does not resume from
 * an older snapshot than the job recorded while a holder may still come back
 * (the coordinator-restart case), and does after the grace; a dead member
 * re-forms the world and counts a restart; the last call waits for nodes
 * still joining and never closes short of min; why a round closed is
 * published with it; a stop during a planned re-formation waits for the old
 * world's snapshot; a member's node fault quarantines it and re-forms the
 * world elsewhere without a restart.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "failure_class.h"
#include "rdzv.h"
#include "trainer.h"

#define GEN 0x42

struct rec {
    int worlds; /* world hook calls */
    int world_size, world_nodes;
    int restarts;
    int finished;
    int finished_rc;
    char finished_error[512];
    char last_event[512]; /* the newest "world" event */
};

static void h_publish(void *ctx, const char *key, const char *value)
{
    (void)ctx, (void)key, (void)value;
}

static void h_event(void *ctx, int64_t job, int64_t step, const char *kind, const char *msg)
{
    struct rec *r = ctx;
    (void)job, (void)step;
    if (strcmp(kind, "world") == 0)
        snprintf(r->last_event, sizeof(r->last_event), "%s", msg);
}

static void h_world(void *ctx, int64_t job, int world_size, int nodes, int64_t *ret_run_id)
{
    struct rec *r = ctx;
    (void)job;
    r->worlds++;
    r->world_size = world_size;
    r->world_nodes = nodes;
    *ret_run_id = r->worlds;
}

static void h_waiting(void *ctx, int64_t job, bool waiting)
{
    (void)ctx, (void)job, (void)waiting;
}

static void h_finished(void *ctx, int64_t job, int rc, int64_t step, const char *error)
{
    struct rec *r = ctx;
    (void)job, (void)step;
    r->finished++;
    r->finished_rc = rc;
    snprintf(r->finished_error, sizeof(r->finished_error), "%s", error ? error : "");
}

static void h_restarts(void *ctx, int64_t job, int restarts)
{
    struct rec *r = ctx;
    (void)job;
    r->restarts = restarts;
}

struct fx {
    struct rec rec;
    struct rdzv_coord *c;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    struct rdzv_opts o = {.dead_after_s = 3, .last_call_s = 1, .admit_snapshot_steps = 100};
    struct rdzv_hooks h = {&f->rec, h_publish, h_event, h_world, h_waiting, h_finished, h_restarts};
    f->c = rdzv_coord_new(GEN, &o, &h);
    assert_non_null(f->c);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    rdzv_coord_free(f->c);
    free(f);
    return 0;
}

static int64_t cur_round(struct rdzv_coord *c)
{
    json_t *o = rdzv_coord_round_json(c, false);
    assert_non_null(o);
    int64_t r = (int64_t)json_integer_value(json_object_get(o, "round"));
    json_decref(o);
    return r;
}

static const char *cur_phase(struct rdzv_coord *c)
{
    static char phase[16];
    json_t *o = rdzv_coord_round_json(c, false);
    assert_non_null(o);
    snprintf(phase, sizeof(phase), "%s", json_string_value(json_object_get(o, "phase")));
    json_decref(o);
    return phase;
}

/* Node `node`'s report of the current round, with no worker exit. */
static void node_msg(struct rdzv_coord *c, struct cluster_msg *m, int type, const char *node,
                     int64_t snap, const char *state)
{
    cluster_msg_init(m, type);
    snprintf(m->node, sizeof(m->node), "%s", node);
    m->inc = (uint64_t)node[0];
    m->gen = GEN;
    m->round = cur_round(c);
    m->job = rdzv_coord_job(c);
    m->snap_step = snap;
    m->workers = 1;
    m->exit_round = -1;
    snprintf(m->addr, sizeof(m->addr), "127.0.0.1:%d", 1000 + node[0]);
    snprintf(m->state, sizeof(m->state), "%s", state);
    m->present = CLUSTER_MSG_BIT(GEN) | CLUSTER_MSG_BIT(ROUND) | CLUSTER_MSG_BIT(JOB) |
                 CLUSTER_MSG_BIT(SNAP) | CLUSTER_MSG_BIT(WORKERS) | CLUSTER_MSG_BIT(ADDR) |
                 CLUSTER_MSG_BIT(STATE);
}

static void send_state(struct rdzv_coord *c, double now, int type, const char *node, int64_t snap,
                       const char *state)
{
    struct cluster_msg m;
    node_msg(c, &m, type, node, snap, state);
    /* Through the wire, as the coordinator receives it. */
    char *line = NULL;
    size_t len = 0;
    struct gpt_err err;
    assert_int_equal(cluster_msg_encode(&m, &line, &len, &err), 0);
    struct cluster_msg d;
    assert_int_equal(cluster_msg_decode(line, len, &d, &err), 0);
    free(line);
    rdzv_coord_message(c, now, &d);
    cluster_msg_done(&d);
    rdzv_coord_tick(c, now);
}

/* A running member's heartbeat reporting its workers' exit in the
 * current round. */
static void send_exit(struct rdzv_coord *c, double now, const char *node, int rc, int64_t step)
{
    struct cluster_msg m;
    node_msg(c, &m, CLUSTER_MSG_HB, node, step, "exited");
    m.exit_round = m.round;
    m.exit_rc = rc;
    m.exit_step = step;
    m.present |=
        CLUSTER_MSG_BIT(EXIT_ROUND) | CLUSTER_MSG_BIT(EXIT_RC) | CLUSTER_MSG_BIT(EXIT_STEP);
    rdzv_coord_message(c, now, &m);
    rdzv_coord_tick(c, now);
}

static void send(struct rdzv_coord *c, double now, int type, const char *node, int64_t snap)
{
    send_state(c, now, type, node, snap, type == CLUSTER_MSG_JOIN ? "joined" : "idle");
}

static void start(struct rdzv_coord *c, double now, int min, int max, int64_t newest)
{
    struct rdzv_job j = {.id = 7,
                         .spec_json = "{}",
                         .nodes_min = min,
                         .nodes_max = max,
                         .max_restarts = 3,
                         .wait_timeout_s = 60,
                         .resume_step = -1,
                         .newest_snap = newest};
    struct gpt_err err;
    assert_int_equal(rdzv_coord_job_start(c, now, &j, &err), 0);
}

/* Nodes a and b alive, job 7 (1 to 2 nodes) started at 0, both joined at
 * 0.1: a world of two runs. */
static void run_pair(struct rdzv_coord *c)
{
    send(c, 0, CLUSTER_MSG_HB, "a", -1);
    send(c, 0, CLUSTER_MSG_HB, "b", -1);
    start(c, 0, 1, 2, -1);
    send(c, 0.1, CLUSTER_MSG_JOIN, "a", -1);
    send(c, 0.1, CLUSTER_MSG_JOIN, "b", -1);
}

static void test_close_at_max(void **state)
{
    struct fx *f = *state;
    send(f->c, 0, CLUSTER_MSG_HB, "a", -1);
    send(f->c, 0, CLUSTER_MSG_HB, "b", -1);
    start(f->c, 0.1, 1, 2, -1);
    assert_string_equal(cur_phase(f->c), "forming");
    send(f->c, 0.2, CLUSTER_MSG_JOIN, "a", -1);
    assert_string_equal(cur_phase(f->c), "forming"); /* b is alive, not joined yet */
    send(f->c, 0.3, CLUSTER_MSG_JOIN, "b", -1);
    assert_string_equal(cur_phase(f->c), "running");
    assert_int_equal(f->rec.worlds, 1);
    assert_int_equal(f->rec.world_size, 2);
}

/* What a node may write for a job (cluster_acl.c) follows the job's
 * newest closed world: no ranks before it closes (-EAGAIN for the nodes
 * placed on it); each member's own ranks while it runs; the previous
 * world's alive members while the next round forms (their last records
 * are on their way); nothing after the job (-ESRCH). */
static void test_node_ranks(void **state)
{
    struct fx *f = *state;
    struct rdzv_ranks r;
    send(f->c, 0, CLUSTER_MSG_HB, "a", -1);
    send(f->c, 0, CLUSTER_MSG_HB, "b", -1);
    send(f->c, 0, CLUSTER_MSG_HB, "c", -1);
    start(f->c, 0, 1, 2, -1);
    assert_int_equal(rdzv_coord_node_ranks(f->c, "a", 7, &r), -EAGAIN); /* first world forms */
    send(f->c, 0.1, CLUSTER_MSG_JOIN, "a", -1);
    send(f->c, 0.1, CLUSTER_MSG_JOIN, "b", -1);
    assert_string_equal(cur_phase(f->c), "running");
    int64_t world = cur_round(f->c);
    assert_int_equal(rdzv_coord_node_ranks(f->c, "a", 7, &r), 0);
    assert_int_equal(r.base, 0);
    assert_int_equal(r.count, 1);
    assert_int_equal(r.round, world);
    assert_true(r.gen == GEN);
    assert_int_equal(rdzv_coord_node_ranks(f->c, "b", 7, &r), 0);
    assert_int_equal(r.base, 1);
    assert_int_equal(rdzv_coord_node_ranks(f->c, "c", 7, &r), -ENOENT);  /* not placed */
    assert_int_equal(rdzv_coord_node_ranks(f->c, "a", 8, &r), -ESRCH);   /* no such job */
    assert_int_equal(rdzv_coord_node_ranks(f->c, "zz", 7, &r), -ENOENT); /* unknown */
    /* b fails: a round forms; the world before it still holds its ranks. */
    send_exit(f->c, 0.2, "b", -ECONNRESET, 5);
    assert_string_equal(cur_phase(f->c), "forming");
    assert_int_equal(rdzv_coord_node_ranks(f->c, "a", 7, &r), 0);
    assert_int_equal(r.round, world);
    assert_int_equal(r.base, 0);
    /* The job ends: no node holds anything of it. */
    rdzv_coord_job_stop(f->c, 7, 0.3);
    rdzv_coord_tick(f->c, 30);
    assert_int_equal(f->rec.finished, 1);
    assert_int_equal(rdzv_coord_node_ranks(f->c, "a", 7, &r), -ESRCH);
}

static void test_close_at_min_after_last_call(void **state)
{
    struct fx *f = *state;
    send(f->c, 0, CLUSTER_MSG_HB, "a", -1);
    send(f->c, 0, CLUSTER_MSG_HB, "b", -1);
    start(f->c, 0, 1, 3, -1);
    send(f->c, 0.1, CLUSTER_MSG_JOIN, "a", -1);
    rdzv_coord_tick(f->c, 0.5);
    assert_string_equal(cur_phase(f->c), "forming");
    send(f->c, 0.6, CLUSTER_MSG_HB, "b", -1); /* alive, never joins */
    rdzv_coord_tick(f->c, 1.2);
    assert_string_equal(cur_phase(f->c), "running");
    assert_int_equal(f->rec.world_size, 1);
}

static const char *cur_closed(struct rdzv_coord *c)
{
    static char why[160];
    json_t *o = rdzv_coord_round_json(c, false);
    assert_non_null(o);
    const char *w = json_string_value(json_object_get(o, "closed"));
    snprintf(why, sizeof(why), "%s", w ? w : "");
    json_decref(o);
    return why;
}

/* A heartbeat naming this round in state "joining" (the node scans its
 * snapshots before it joins). */
static void send_joining(struct rdzv_coord *c, double now, const char *node)
{
    struct cluster_msg m;
    cluster_msg_init(&m, CLUSTER_MSG_HB);
    snprintf(m.node, sizeof(m.node), "%s", node);
    m.inc = (uint64_t)node[0];
    m.gen = GEN;
    m.round = cur_round(c);
    m.job = rdzv_coord_job(c);
    m.workers = 1;
    snprintf(m.state, sizeof(m.state), "joining");
    rdzv_coord_message(c, now, &m);
    rdzv_coord_tick(c, now);
}

/* The last call never closes a round short of min, nor while a node that
 * already answers for the round (joining) is still on its way: it closes
 * once that node joined; the reason is published with the round. A
 * repeated, identical heartbeat only refreshes a known node (touch). */
static void test_last_call_waits_for_joining(void **state)
{
    struct fx *f = *state;
    send(f->c, 0, CLUSTER_MSG_HB, "a", -1);
    send(f->c, 0, CLUSTER_MSG_HB, "b", -1);
    send(f->c, 0, CLUSTER_MSG_HB, "c", -1);
    start(f->c, 0, 2, 4, -1);
    send(f->c, 0.1, CLUSTER_MSG_JOIN, "a", -1);
    rdzv_coord_tick(f->c, 2.0); /* past the last call, one joined: short of min */
    assert_string_equal(cur_phase(f->c), "forming");
    send_joining(f->c, 2.1, "c");
    send(f->c, 2.1, CLUSTER_MSG_JOIN, "b", -1);
    rdzv_coord_tick(f->c, 3.0); /* min reached, but c is joining */
    assert_string_equal(cur_phase(f->c), "forming");
    assert_true(rdzv_coord_touch(f->c, 3.0, "a")); /* its heartbeats, unchanged */
    assert_true(rdzv_coord_touch(f->c, 3.0, "c"));
    assert_false(rdzv_coord_touch(f->c, 3.0, "nobody"));
    send(f->c, 3.2, CLUSTER_MSG_JOIN, "c", -1);
    assert_string_equal(cur_phase(f->c), "running");
    assert_int_equal(f->rec.world_size, 3);
    assert_non_null(strstr(cur_closed(f->c), "every alive node joined: 3"));
    assert_non_null(strstr(f->rec.last_event, "every alive node joined"));
}

/* A round at max closes at once and says so. */
static void test_closed_reason_max(void **state)
{
    struct fx *f = *state;
    send(f->c, 0, CLUSTER_MSG_HB, "a", -1);
    send(f->c, 0, CLUSTER_MSG_HB, "b", -1);
    send(f->c, 0, CLUSTER_MSG_HB, "c", -1);
    start(f->c, 0, 1, 2, -1);
    send(f->c, 0.1, CLUSTER_MSG_JOIN, "a", -1);
    send(f->c, 0.2, CLUSTER_MSG_JOIN, "b", -1);
    assert_string_equal(cur_phase(f->c), "running");
    assert_string_equal(cur_closed(f->c), "max: 2 of 2 nodes joined");
}

/* The newest snapshot holder ranks first whatever the node ids. */
static void test_rank0_holds_newest(void **state)
{
    struct fx *f = *state;
    send(f->c, 0, CLUSTER_MSG_HB, "a", -1);
    send(f->c, 0, CLUSTER_MSG_HB, "b", -1);
    start(f->c, 0, 2, 2, -1);
    send(f->c, 0.1, CLUSTER_MSG_JOIN, "a", 100);
    send(f->c, 0.2, CLUSTER_MSG_JOIN, "b", 150);
    assert_string_equal(cur_phase(f->c), "running");
    assert_non_null(strstr(f->rec.last_event, "step 150 snapshot on b"));
    json_t *w = rdzv_coord_round_json(f->c, true);
    json_t *nodes = json_object_get(w, "nodes");
    assert_int_equal(json_array_size(nodes), 2);
    json_decref(w);
}

/* A restarted coordinator: the job recorded a step 450 snapshot, the first
 * node to join holds only 300. The round waits for the holder of 450 past
 * the last call, and closes as soon as it joins. */
static void test_waits_for_newest_holder(void **state)
{
    struct fx *f = *state;
    send(f->c, 0, CLUSTER_MSG_HB, "a", -1);
    start(f->c, 0, 1, 3, 450);
    send(f->c, 0.1, CLUSTER_MSG_JOIN, "a", 300);
    for (double t = 0.2; t < 2.0; t += 0.1) {
        send(f->c, t, CLUSTER_MSG_HB, "a", -1);
        assert_string_equal(cur_phase(f->c), "forming");
    }
    send(f->c, 2.1, CLUSTER_MSG_HB, "b", -1);
    send(f->c, 2.2, CLUSTER_MSG_JOIN, "b", 450);
    rdzv_coord_tick(f->c, 2.3);
    assert_string_equal(cur_phase(f->c), "running");
    assert_int_equal(f->rec.world_size, 2);
    assert_non_null(strstr(f->rec.last_event, "step 450 snapshot on b"));
}

/* ... but not forever: with no holder back, the older snapshot is used
 * after the grace. */
static void test_newest_holder_grace(void **state)
{
    struct fx *f = *state;
    send(f->c, 0, CLUSTER_MSG_HB, "a", -1);
    start(f->c, 0, 1, 3, 450);
    send(f->c, 0.1, CLUSTER_MSG_JOIN, "a", 300);
    double t = 0.2;
    for (; t < 30 && strcmp(cur_phase(f->c), "forming") == 0; t += 0.5)
        send(f->c, t, CLUSTER_MSG_HB, "a", -1);
    assert_string_equal(cur_phase(f->c), "running");
    assert_true(t > 10 && t < 15);
    assert_non_null(strstr(f->rec.last_event, "step 300 snapshot on a"));
}

/* A newer snapshot written while the world runs moves the mark: a later
 * round prefers its holders too. */
static void test_progress_moves_newest(void **state)
{
    struct fx *f = *state;
    run_pair(f->c);
    assert_string_equal(cur_phase(f->c), "running");
    rdzv_coord_progress(f->c, 50, 50);
    /* b goes silent: dead after 3 s, the world re-forms */
    double t = 0.2;
    for (; t < 5 && strcmp(cur_phase(f->c), "running") == 0; t += 0.2)
        send(f->c, t, CLUSTER_MSG_HB, "a", -1);
    assert_string_equal(cur_phase(f->c), "forming");
    assert_int_equal(f->rec.restarts, 1);
    send(f->c, t, CLUSTER_MSG_JOIN, "a", 40); /* a lost its copy of step 50 */
    rdzv_coord_tick(f->c, t + 2);
    assert_string_equal(cur_phase(f->c), "forming");
    send(f->c, t + 2.1, CLUSTER_MSG_HB, "b", -1);
    send(f->c, t + 2.2, CLUSTER_MSG_JOIN, "b", 50);
    assert_string_equal(cur_phase(f->c), "running");
    assert_int_equal(f->rec.worlds, 2);
    assert_non_null(strstr(f->rec.last_event, "step 50 snapshot on b"));
}

/* A member leaves (a planned re-formation: the old world stops at an agreed
 * step boundary, writing its snapshot), then the job is stopped (gptd on
 * the coordinator stopping too, as under `scontrol requeue`): the job ends
 * only once the old world's workers are done, never by aborting them. */
static void test_stop_waits_for_leave_snapshot(void **state)
{
    struct fx *f = *state;
    run_pair(f->c);
    assert_string_equal(cur_phase(f->c), "running");
    send_state(f->c, 0.2, CLUSTER_MSG_HB, "a", -1, "running");
    send(f->c, 0.3, CLUSTER_MSG_LEAVE, "b", -1);
    assert_string_equal(cur_phase(f->c), "forming");
    rdzv_coord_job_stop(f->c, 0, 0.3);
    send_state(f->c, 0.4, CLUSTER_MSG_HB, "a", -1, "stopping");
    rdzv_coord_tick(f->c, 1.0);
    assert_int_equal(f->rec.finished, 0);
    assert_int_equal(rdzv_coord_job(f->c), 7);
    /* a's workers wrote the snapshot and ended: the job stops, unrestarted */
    send_state(f->c, 1.5, CLUSTER_MSG_HB, "a", 120, "joining");
    assert_int_equal(f->rec.finished, 1);
    assert_int_equal(f->rec.restarts, 0);
    assert_int_equal(rdzv_coord_job(f->c), 0);
}

/* The same stop, with the old world's member never reporting back: the job
 * ends after the join time-out, so gptd's stop cannot hang on it. */
static void test_stop_after_leave_times_out(void **state)
{
    struct fx *f = *state;
    run_pair(f->c);
    send_state(f->c, 0.2, CLUSTER_MSG_HB, "a", -1, "stopping");
    send(f->c, 0.3, CLUSTER_MSG_LEAVE, "b", -1);
    rdzv_coord_job_stop(f->c, 0, 0.3);
    send_state(f->c, 2.0, CLUSTER_MSG_HB, "a", -1, "stopping");
    assert_int_equal(f->rec.finished, 0);
    send_state(f->c, 16.0, CLUSTER_MSG_HB, "a", -1, "stopping");
    assert_int_equal(f->rec.finished, 1);
}

/* Nodes a and b, job 7 of 100 steps on both: a world of two running, a
 * (sorting first) global rank 0, the coordinator holding step 90. */
static void run_pair_100(struct rdzv_coord *c)
{
    send(c, 0, CLUSTER_MSG_HB, "a", -1);
    send(c, 0, CLUSTER_MSG_HB, "b", -1);
    struct rdzv_job j = {.id = 7,
                         .spec_json = "{\"trainer\": {\"max_steps\": 100}}",
                         .nodes_min = 2,
                         .nodes_max = 2,
                         .max_restarts = 3,
                         .wait_timeout_s = 60,
                         .resume_step = -1,
                         .newest_snap = -1};
    struct gpt_err err;
    assert_int_equal(rdzv_coord_job_start(c, 0, &j, &err), 0);
    send(c, 0.1, CLUSTER_MSG_JOIN, "a", -1);
    send(c, 0.1, CLUSTER_MSG_JOIN, "b", -1);
    assert_string_equal(cur_phase(c), "running");
    send_state(c, 0.2, CLUSTER_MSG_HB, "a", -1, "running");
    send_state(c, 0.2, CLUSTER_MSG_HB, "b", -1, "running");
    rdzv_coord_job_progress(c, 7, 90, -1);
}

/* Global rank 0 (a) is lost after writing the final snapshot, before its
 * last records reached the coordinator: the world formed again would find
 * nothing left to train. The job fails instead, saying that a, holding
 * rank 0, was lost after the last step, where the final snapshot is, and
 * since which step the records are missing. */
static void test_rank0_lost_after_last_step(void **state)
{
    struct fx *f = *state;
    run_pair_100(f->c);
    send_exit(f->c, 0.3, "b", GPT_TRAIN_DONE, 100);
    assert_int_equal(f->rec.finished, 0); /* rank 0's records are still due */
    /* a's process is killed, and comes back (a new incarnation) holding
     * the final snapshot. */
    struct cluster_msg m;
    node_msg(f->c, &m, CLUSTER_MSG_HB, "a", -1, "idle");
    m.inc = 99;
    rdzv_coord_message(f->c, 0.5, &m);
    rdzv_coord_tick(f->c, 0.5);
    assert_string_equal(cur_phase(f->c), "forming");
    send(f->c, 0.6, CLUSTER_MSG_JOIN, "b", -1);
    node_msg(f->c, &m, CLUSTER_MSG_JOIN, "a", 100, "joined");
    m.inc = 99;
    rdzv_coord_message(f->c, 0.7, &m);
    rdzv_coord_tick(f->c, 0.7);
    assert_int_equal(f->rec.finished, 1);
    assert_true(f->rec.finished_rc < 0);
    const char *e = f->rec.finished_error;
    assert_non_null(strstr(e, "node a, which held global rank 0, was lost after the job's last "
                              "step (100)"));
    assert_non_null(strstr(e, "the final snapshot is on node a's disk (step 100)"));
    assert_non_null(strstr(e, "the coordinator holds the job's metrics only up to step 90: the "
                              "last metrics, the snapshot row and the done event never reached"));
    assert_int_equal(f->rec.worlds, 1); /* no world was started to find nothing to train */
}

/* Global rank 0's done event reached the coordinator, then a was lost
 * before its exit report: every record is in, the job is completed. */
static void test_lost_after_final_records(void **state)
{
    struct fx *f = *state;
    run_pair_100(f->c);
    rdzv_coord_job_progress(f->c, 7, 100, 100);
    rdzv_coord_job_final(f->c, 7);
    /* a goes silent (dead after 3 s); b still runs its last step. */
    send_state(f->c, 3.5, CLUSTER_MSG_HB, "b", -1, "running");
    assert_int_equal(f->rec.finished, 0);
    assert_string_equal(cur_phase(f->c), "running");
    send_exit(f->c, 3.6, "b", GPT_TRAIN_DONE, 100);
    assert_int_equal(f->rec.finished, 1);
    assert_int_equal(f->rec.finished_rc, GPT_TRAIN_DONE);
    assert_int_equal(f->rec.restarts, 0);
}

/* Node `node`'s field `key` in the node table (NULL when absent). */
static const char *node_field(struct rdzv_coord *c, double now, const char *node, const char *key)
{
    static char val[256];
    json_t *arr = rdzv_coord_nodes_json(c, now);
    assert_non_null(arr);
    const char *got = NULL;
    size_t i;
    json_t *n;
    json_array_foreach(arr, i, n)
    {
        if (strcmp(json_string_value(json_object_get(n, "node")), node) != 0)
            continue;
        const char *v = json_string_value(json_object_get(n, key));
        if (v) {
            snprintf(val, sizeof(val), "%s", v);
            got = val;
        }
    }
    json_decref(arr);
    return got;
}

/* A member reporting that it could not deliver what it claimed is
 * quarantined: the world forms again on another node, spending no restart,
 * and the quarantined node is not placed until its back-off ends. A peer's
 * lost connection quarantines no one and counts a restart as before. */
static void test_node_fault_quarantines(void **state)
{
    struct fx *f = *state;
    send(f->c, 0, CLUSTER_MSG_HB, "a", -1);
    send(f->c, 0, CLUSTER_MSG_HB, "b", -1);
    send(f->c, 0, CLUSTER_MSG_HB, "c", -1);
    start(f->c, 0, 2, 2, -1);
    send(f->c, 0.1, CLUSTER_MSG_JOIN, "a", -1);
    send(f->c, 0.1, CLUSTER_MSG_JOIN, "b", -1);
    assert_int_equal(f->rec.worlds, 1);
    assert_string_equal(f->rec.last_event, "round 1 closed (max: 2 of 2 nodes joined): 2 nodes (a, "
                                           "b), world size 2");

    send_exit(f->c, 1.0, "b", -GPT_E_NODE_FAULT, 0);
    assert_int_equal(f->rec.restarts, 0);
    assert_int_equal(f->rec.finished, 0);
    assert_string_equal(cur_phase(f->c), "forming");
    assert_string_equal(node_field(f->c, 1.0, "b", "state"), "quarantined");
    assert_string_equal(node_field(f->c, 1.0, "b", "quarantine"), "node fault");
    assert_non_null(node_field(f->c, 1.0, "b", "quarantined_until"));
    assert_null(node_field(f->c, 1.0, "a", "quarantine"));

    /* c takes b's place; b, alive and idle, is not placed. */
    send(f->c, 1.1, CLUSTER_MSG_JOIN, "a", -1);
    send(f->c, 1.1, CLUSTER_MSG_JOIN, "c", -1);
    send(f->c, 1.1, CLUSTER_MSG_JOIN, "b", -1);
    assert_int_equal(f->rec.worlds, 2);
    assert_non_null(strstr(f->rec.last_event, "2 nodes (a, c), world size 2"));
    assert_int_equal(f->rec.restarts, 0);

    /* A peer's lost connection: a restart, and no quarantine. */
    send_exit(f->c, 2.0, "c", -ECONNRESET, 0);
    assert_int_equal(f->rec.restarts, 1);
    assert_null(node_field(f->c, 2.0, "c", "quarantine"));
    assert_null(node_field(f->c, 2.0, "a", "quarantine"));
    assert_string_equal(node_field(f->c, 2.0, "b", "state"), "quarantined");

    /* The back-off ends: b is free again (heartbeats keep everyone alive). */
    double later = 1.0 + FAILURE_QUARANTINE_BASE_S + 0.5;
    for (double t = 2.5; t < later; t += 2) {
        send(f->c, t, CLUSTER_MSG_HB, "a", -1);
        send(f->c, t, CLUSTER_MSG_HB, "b", -1);
        send(f->c, t, CLUSTER_MSG_HB, "c", -1);
    }
    send(f->c, later, CLUSTER_MSG_HB, "b", -1);
    assert_null(node_field(f->c, later, "b", "quarantine"));
    assert_string_not_equal(node_field(f->c, later, "b", "state"), "quarantined");
}

/* The first failure of a world, before its first step, reported by the
 * same node on FAILURE_EARLY_JOBS different jobs in a row: a pattern of
 * the node's. The jobs before that one spend their restart as before; the
 * one that shows the pattern forms again without the node, spending none.
 * The peer that failed later is never counted. */
static void test_early_failure_pattern(void **state)
{
    struct fx *f = *state;
    send(f->c, 0, CLUSTER_MSG_HB, "a", -1);
    send(f->c, 0, CLUSTER_MSG_HB, "b", -1);
    send(f->c, 0, CLUSTER_MSG_HB, "c", -1);
    double t = 0.1;
    for (int k = 1; k <= FAILURE_EARLY_JOBS; k++, t += 1) {
        struct rdzv_job j = {.id = 100 + k,
                             .spec_json = "{}",
                             .nodes_min = 2,
                             .nodes_max = 2,
                             .max_restarts = 0,
                             .wait_timeout_s = 60,
                             .resume_step = -1,
                             .newest_snap = -1};
        struct gpt_err err;
        assert_int_equal(rdzv_coord_job_start(f->c, t, &j, &err), 0);
        send(f->c, t, CLUSTER_MSG_JOIN, "a", -1);
        send(f->c, t, CLUSTER_MSG_JOIN, "b", -1);
        assert_int_equal(f->rec.worlds, k);
        f->rec.restarts = 0;
        send_exit(f->c, t + 0.5, "b", -EIO, 0);
        send_exit(f->c, t + 0.5, "a", -ECONNRESET, 0);
        assert_null(node_field(f->c, t, "a", "quarantine"));
        if (k < FAILURE_EARLY_JOBS) {
            assert_int_equal(f->rec.finished, k); /* max_restarts 0: failed */
            assert_int_equal(f->rec.restarts, 1);
            assert_null(node_field(f->c, t, "b", "quarantine"));
        }
    }
    assert_int_equal(f->rec.finished, FAILURE_EARLY_JOBS - 1);
    assert_int_equal(f->rec.restarts, 0);
    assert_string_equal(cur_phase(f->c), "forming");
    const char *why = node_field(f->c, t, "b", "quarantine");
    assert_non_null(why);
    assert_non_null(strstr(why, "failed rounds of 3 different jobs before their first step"));
}

/* A node whose world trained a step between its early failures starts
 * its count again: no quarantine. */
static void test_early_failure_reset(void **state)
{
    struct fx *f = *state;
    send(f->c, 0, CLUSTER_MSG_HB, "a", -1);
    send(f->c, 0, CLUSTER_MSG_HB, "b", -1);
    double t = 0.1;
    for (int k = 1; k <= 2 * FAILURE_EARLY_JOBS; k++, t += 1) {
        struct rdzv_job j = {.id = 200 + k,
                             .spec_json = "{}",
                             .nodes_min = 2,
                             .nodes_max = 2,
                             .max_restarts = 0,
                             .wait_timeout_s = 60,
                             .resume_step = -1,
                             .newest_snap = -1};
        struct gpt_err err;
        assert_int_equal(rdzv_coord_job_start(f->c, t, &j, &err), 0);
        send(f->c, t, CLUSTER_MSG_JOIN, "a", -1);
        send(f->c, t, CLUSTER_MSG_JOIN, "b", -1);
        /* every other job trains before b fails */
        send_exit(f->c, t + 0.5, "b", -EIO, k % 2 ? 0 : 5);
        send_exit(f->c, t + 0.5, "a", -ECONNRESET, 0);
        assert_null(node_field(f->c, t, "b", "quarantine"));
    }
    assert_int_equal(f->rec.finished, 2 * FAILURE_EARLY_JOBS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_close_at_max, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_at_min_after_last_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_node_ranks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rank0_holds_newest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_last_call_waits_for_joining, setup, teardown),
        cmocka_unit_test_setup_teardown(test_closed_reason_max, setup, teardown),
        cmocka_unit_test_setup_teardown(test_waits_for_newest_holder, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newest_holder_grace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_progress_moves_newest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_waits_for_leave_snapshot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_after_leave_times_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rank0_lost_after_last_step, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost_after_final_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_node_fault_quarantines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_early_failure_pattern, setup, teardown),
        cmocka_unit_test_setup_teardown(test_early_failure_reset, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
