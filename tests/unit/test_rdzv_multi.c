/*
 * Unit tests of daemon/rdzv with several jobs: each job is placed on free
 * nodes only (between its min and max), jobs run side by side on disjoint
 * nodes with rounds of their own numbers, each node reads its own job's
 * round (rdzv/n/<id>, with "me" once in a world); a job that does not fit
 * beside others is refused with how many nodes it needs and how many are
 * free, and one the cluster is too small for with how many it has; a node
 * that dies re-forms only the job on it; a job's end frees its nodes; a
 * running job short of max takes free nodes in only while no job waits in
 * the queue; finished workers complete a job only once global rank 0's last
 * records arrived.
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

#include "rdzv.h"
#include "trainer.h"

#define GEN   0x42
#define NODES 4

/* What the hooks saw. */
struct rec {
    json_t *doc[NODES]; /* the newest rdzv/n/<id> of nodes "a".."d" */
    int64_t finished[8];
    int finished_rc[8];
    char error[512]; /* of the newest end */
    int nfinished;
    int64_t restarted; /* the job of the newest restart */
    int worlds;
};

static struct rec rec;

static void h_publish(void *ctx, const char *key, const char *value)
{
    (void)ctx;
    if (strncmp(key, RDZV_KEY_NODE_PREFIX, strlen(RDZV_KEY_NODE_PREFIX)) != 0)
        return;
    int i = key[strlen(RDZV_KEY_NODE_PREFIX)] - 'a';
    assert_true(i >= 0 && i < NODES);
    json_decref(rec.doc[i]);
    rec.doc[i] = value ? json_loads(value, 0, NULL) : NULL;
}

static void h_event(void *ctx, int64_t job, int64_t step, const char *kind, const char *msg)
{
    (void)ctx, (void)job, (void)step, (void)kind, (void)msg;
}

static void h_world(void *ctx, int64_t job, int world_size, int nodes, int64_t *ret_run_id)
{
    (void)ctx, (void)job, (void)world_size, (void)nodes;
    *ret_run_id = ++rec.worlds;
}

static void h_waiting(void *ctx, int64_t job, bool waiting)
{
    (void)ctx, (void)job, (void)waiting;
}

static void h_finished(void *ctx, int64_t job, int rc, int64_t step, const char *error)
{
    (void)ctx, (void)step;
    rec.finished_rc[rec.nfinished % 8] = rc;
    rec.finished[rec.nfinished++ % 8] = job;
    snprintf(rec.error, sizeof(rec.error), "%s", error ? error : "");
}

static void h_restarts(void *ctx, int64_t job, int restarts)
{
    (void)ctx, (void)restarts;
    rec.restarted = job;
}

static int setup(void **state)
{
    memset(&rec, 0, sizeof(rec));
    struct rdzv_opts o = {.dead_after_s = 3, .last_call_s = 1, .admit_snapshot_steps = 100};
    struct rdzv_hooks h = {NULL, h_publish, h_event, h_world, h_waiting, h_finished, h_restarts};
    struct rdzv_coord *c = rdzv_coord_new(GEN, &o, &h);
    assert_non_null(c);
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    rdzv_coord_free(*state);
    for (int i = 0; i < NODES; i++)
        json_decref(rec.doc[i]);
    return 0;
}

static const json_t *doc(char node)
{
    return rec.doc[node - 'a'];
}

static int64_t doc_int(char node, const char *key)
{
    assert_non_null(doc(node));
    return json_integer_value(json_object_get(doc(node), key));
}

static const char *doc_phase(char node)
{
    assert_non_null(doc(node));
    return json_string_value(json_object_get(doc(node), "phase"));
}

/* A report of node `node` as its agent makes it: state, the round and job
 * it read; in state "exited", its workers of that round exited with
 * exit_rc. */
static void report(struct rdzv_coord *c, double now, char node, const char *state, int exit_rc)
{
    struct cluster_msg m;
    cluster_msg_init(&m, CLUSTER_MSG_HB);
    snprintf(m.node, sizeof(m.node), "%c", node);
    m.inc = (uint64_t)node;
    m.gen = GEN;
    m.round = doc(node) ? doc_int(node, "round") : -1;
    m.job = doc(node) ? doc_int(node, "job") : 0;
    m.snap_step = -1;
    m.workers = 1;
    bool exited = strcmp(state, "exited") == 0;
    m.exit_round = exited ? m.round : -1;
    m.exit_rc = exit_rc;
    snprintf(m.addr, sizeof(m.addr), "127.0.0.1:%d", 1000 + node);
    snprintf(m.state, sizeof(m.state), "%s", state);
    rdzv_coord_message(c, now, &m);
    rdzv_coord_tick(c, now);
}

static int start(struct rdzv_coord *c, double now, int64_t id, int min, int max,
                 struct gpt_err *err)
{
    struct rdzv_job j = {.id = id,
                         .spec_json = "{}",
                         .nodes_min = min,
                         .nodes_max = max,
                         .max_restarts = 3,
                         .wait_timeout_s = 60,
                         .resume_step = -1,
                         .newest_snap = -1};
    return rdzv_coord_job_start(c, now, &j, err);
}

/* The job of each node in the node table ("" for none), as "a=1 b= ...". */
static const char *placement(struct rdzv_coord *c)
{
    static char out[128];
    size_t off = 0;
    json_t *arr = rdzv_coord_nodes_json(c, 0);
    size_t i;
    json_t *n;
    out[0] = '\0';
    json_array_foreach(arr, i, n)
    {
        const json_t *job = json_object_get(n, "job");
        off += (size_t)snprintf(out + off, sizeof(out) - off, "%s%s=", off ? " " : "",
                                json_string_value(json_object_get(n, "node")));
        if (json_is_integer(job))
            off += (size_t)snprintf(out + off, sizeof(out) - off, "%lld",
                                    (long long)json_integer_value(job));
    }
    json_decref(arr);
    return out;
}

/* Two 1-node jobs run at once on disjoint nodes, each node reading its
 * own job's round; a 2-node job does not fit beside them. */
static void test_side_by_side(void **state)
{
    struct rdzv_coord *c = *state;
    struct gpt_err err;
    report(c, 0, 'a', "idle", 0);
    report(c, 0, 'b', "idle", 0);
    report(c, 0, 'c', "idle", 0);
    assert_int_equal(rdzv_coord_free_nodes(c), 3);
    assert_string_equal(doc_phase('a'), "idle");

    assert_int_equal(start(c, 0.1, 1, 1, 1, &err), 0);
    assert_string_equal(placement(c), "a=1 b= c=");
    assert_string_equal(doc_phase('a'), "forming");
    assert_string_equal(doc_phase('b'), "idle");
    report(c, 0.2, 'a', "joined", 0);
    assert_string_equal(doc_phase('a'), "running");
    assert_non_null(json_object_get(doc('a'), "me"));

    assert_int_equal(start(c, 0.3, 2, 1, 1, &err), 0);
    assert_string_equal(placement(c), "a=1 b=2 c=");
    assert_int_equal(doc_int('b', "job"), 2);
    assert_true(doc_int('b', "round") > doc_int('a', "round")); /* one sequence */
    report(c, 0.4, 'b', "joined", 0);
    assert_string_equal(doc_phase('b'), "running");
    assert_string_equal(doc_phase('a'), "running");
    assert_int_equal(rec.worlds, 2);
    assert_int_equal(rdzv_coord_job_count(c), 2);

    assert_int_equal(start(c, 0.5, 3, 2, 2, &err), -EAGAIN);
    assert_string_equal(err.msg, "needs 2 nodes, 1 free");
    assert_int_equal(start(c, 0.5, 2, 1, 1, &err), -EEXIST);
}

/* A node that dies re-forms only the job on it; the other job's round
 * does not move. A job's end frees its nodes. */
static void test_failure_isolated(void **state)
{
    struct rdzv_coord *c = *state;
    struct gpt_err err;
    report(c, 0, 'a', "idle", 0);
    report(c, 0, 'b', "idle", 0);
    assert_int_equal(start(c, 0.1, 1, 1, 1, &err), 0);
    report(c, 0.1, 'a', "joined", 0);
    assert_int_equal(start(c, 0.2, 2, 1, 1, &err), 0);
    report(c, 0.2, 'b', "joined", 0);
    int64_t round_a = doc_int('a', "round");
    /* b goes silent, a keeps reporting */
    double t = 0.3;
    for (; t < 5; t += 0.5)
        report(c, t, 'a', "running", 0);
    assert_int_equal(rec.restarted, 2);
    assert_int_equal(doc_int('a', "round"), round_a);
    assert_string_equal(doc_phase('a'), "running");
    assert_int_equal(rdzv_coord_free_nodes(c), 0);

    /* Job 1 completes: its node is free, and job 2, waiting for a node,
     * takes it in the same tick. */
    assert_string_equal(placement(c), "a=1 b=2");
    rdzv_coord_job_final(c, 1);
    report(c, t, 'a', "exited", GPT_TRAIN_DONE);
    assert_int_equal(rec.nfinished, 1);
    assert_int_equal(rec.finished[0], 1);
    assert_false(rdzv_coord_job_runs(c, 1));
    assert_true(rdzv_coord_job_runs(c, 2));
    assert_int_equal(doc_int('a', "job"), 2);
    assert_string_equal(doc_phase('a'), "forming");
    /* b, dead, stays counted by job 2 until its round closes without it. */
    report(c, t + 0.1, 'a', "joined", 0);
    assert_string_equal(doc_phase('a'), "running");
    assert_string_equal(placement(c), "a=2 b=");
}

/* Starts job `id` on nodes a and b (both idle) and closes its world: a,
 * first in id order, holds global rank 0. */
static void start_ab(struct rdzv_coord *c, double now, int64_t id)
{
    struct gpt_err err;
    assert_int_equal(start(c, now, id, 2, 2, &err), 0);
    report(c, now, 'a', "joined", 0);
    report(c, now, 'b', "joined", 0);
    assert_string_equal(doc_phase('a'), "running");
}

/* Finished workers end a job as completed only once global rank 0's last
 * records (its done event) reached the coordinator: another node's exit
 * waits for them; rank 0's own exit without them (it reports its exit only
 * after they reached the store) fails the job naming the node; rank 0
 * dying meanwhile is a failure the job restarts from. */
static void test_done_waits_for_rank0(void **state)
{
    struct rdzv_coord *c = *state;
    report(c, 0, 'a', "idle", 0);
    report(c, 0, 'b', "idle", 0);

    /* b finishes first; a's records follow. */
    start_ab(c, 0.1, 1);
    report(c, 0.2, 'b', "exited", GPT_TRAIN_DONE);
    report(c, 0.3, 'a', "running", 0);
    assert_int_equal(rec.nfinished, 0);
    rdzv_coord_job_final(c, 1);
    rdzv_coord_tick(c, 0.4);
    assert_int_equal(rec.nfinished, 1);
    assert_int_equal(rec.finished[0], 1);
    assert_int_equal(rec.finished_rc[0], GPT_TRAIN_DONE);

    /* Rank 0's exit with no done event before it: the records are lost. */
    start_ab(c, 0.5, 2);
    report(c, 0.6, 'a', "exited", GPT_TRAIN_DONE);
    assert_int_equal(rec.nfinished, 2);
    assert_int_equal(rec.finished[1], 2);
    assert_true(rec.finished_rc[1] < 0);
    assert_non_null(strstr(rec.error, "last records of global rank 0 (node a)"));

    /* Rank 0 dies after b finished, its records lost with it: restarted. */
    start_ab(c, 0.7, 3);
    for (double t = 0.8; t < 5; t += 0.5)
        report(c, t, 'b', "exited", GPT_TRAIN_DONE);
    assert_int_equal(rec.nfinished, 2);
    assert_int_equal(rec.restarted, 3);
    assert_true(rdzv_coord_job_runs(c, 3));
}

/* A node id held by a live node of another instance is refused, naming
 * both connections; the holder itself, a restart of the same instance and
 * a newcomer after the holder died are taken. */
static void test_admit(void **state)
{
    struct rdzv_coord *c = *state;
    report(c, 0, 'a', "idle", 0); /* inc 'a', iid 0: reported by report() */
    struct cluster_msg m;
    cluster_msg_init(&m, CLUSTER_MSG_HB);
    snprintf(m.node, sizeof(m.node), "a");
    snprintf(m.addr, sizeof(m.addr), "10.0.0.2");
    m.inc = 99;
    m.iid = 7;
    char why[512];
    assert_int_equal(rdzv_coord_admit(c, 1, &m, "10.0.0.2:4000", "10.0.0.1:3000", why, sizeof(why)),
                     -EEXIST);
    assert_non_null(strstr(why, "node id \"a\" is taken: node a at 127.0.0.1:1097 (store "
                                "connection from 10.0.0.1:3000)"));
    assert_non_null(strstr(why, "the gptd at 10.0.0.2 (store connection from 10.0.0.2:4000)"));
    m.iid = 0; /* the holder's instance: a restart */
    assert_int_equal(rdzv_coord_admit(c, 1, &m, "10.0.0.2:4000", "", why, sizeof(why)), 0);
    m.iid = 7;
    m.inc = 'a'; /* the holder itself */
    assert_int_equal(rdzv_coord_admit(c, 1, &m, "10.0.0.2:4000", "", why, sizeof(why)), 0);
    m.inc = 99; /* the holder silent for longer than dead_after_s */
    assert_int_equal(rdzv_coord_admit(c, 4, &m, "10.0.0.2:4000", "", why, sizeof(why)), 0);
}

/* A job's end frees its nodes: they read an idle round. */
static void test_end_frees(void **state)
{
    struct rdzv_coord *c = *state;
    struct gpt_err err;
    report(c, 0, 'a', "idle", 0);
    report(c, 0, 'b', "idle", 0);
    assert_int_equal(start(c, 0.1, 1, 2, 2, &err), 0);
    report(c, 0.1, 'a', "joined", 0);
    report(c, 0.1, 'b', "joined", 0);
    assert_int_equal(rdzv_coord_free_nodes(c), 0);
    rdzv_coord_job_stop(c, 1, 0.2);
    assert_string_equal(doc_phase('a'), "stopping");
    report(c, 0.3, 'a', "exited", GPT_TRAIN_STOPPED);
    assert_int_equal(rec.nfinished, 0); /* b still stops */
    report(c, 0.3, 'b', "exited", GPT_TRAIN_STOPPED);
    assert_int_equal(rec.nfinished, 1);
    assert_string_equal(doc_phase('a'), "idle");
    assert_string_equal(doc_phase('b'), "idle");
    assert_int_equal(doc_int('b', "job"), 0);
    assert_int_equal(rdzv_coord_free_nodes(c), 2);
    assert_string_equal(placement(c), "a= b=");
}

/* A running job short of max grows into a free node at its next round,
 * only while no job waits in the queue. */
static void test_growth_yields_to_queue(void **state)
{
    struct rdzv_coord *c = *state;
    struct gpt_err err;
    report(c, 0, 'a', "idle", 0);
    assert_int_equal(start(c, 0.1, 1, 1, 2, &err), 0);
    report(c, 0.1, 'a', "joined", 0);
    assert_string_equal(doc_phase('a'), "running");
    report(c, 0.2, 'a', "running", 0);
    int64_t round = doc_int('a', "round");

    rdzv_coord_set_queued(c, 1);
    report(c, 0.3, 'b', "idle", 0);
    report(c, 0.4, 'a', "running", 0);
    assert_int_equal(doc_int('a', "round"), round); /* the queue comes first */
    assert_string_equal(placement(c), "a=1 b=");

    rdzv_coord_set_queued(c, 0);
    report(c, 0.5, 'a', "running", 0);
    assert_string_equal(doc_phase('a'), "forming");
    assert_string_equal(placement(c), "a=1 b=1");
    report(c, 0.6, 'a', "joined", 0);
    report(c, 0.6, 'b', "joined", 0);
    assert_string_equal(doc_phase('b'), "running");
    assert_int_equal(json_integer_value(json_object_get(doc('b'), "world")), 2);
}

/* Nothing runs: a job starts with fewer free nodes than its min and waits
 * for more (as on a single-job cluster). */
static void test_alone_starts_short(void **state)
{
    struct rdzv_coord *c = *state;
    struct gpt_err err;
    report(c, 0, 'a', "idle", 0);
    assert_int_equal(start(c, 0.1, 1, 2, 2, &err), 0);
    rdzv_coord_tick(c, 1.5);
    assert_string_equal(doc_phase('a'), "waiting");
    report(c, 1.6, 'b', "idle", 0);
    rdzv_coord_tick(c, 1.7);
    assert_string_equal(doc_phase('b'), "forming");
    assert_int_equal(doc_int('b', "job"), 1);
}

/* A job whose min is more than the cluster's alive nodes is refused with
 * -ENOSPC and how many the cluster has (the queue passes over it), not
 * -EAGAIN as one that waits for running jobs to end; a dead node does not
 * count; the smaller job behind it is placed at once. */
static void test_cluster_too_small(void **state)
{
    struct rdzv_coord *c = *state;
    struct gpt_err err;
    report(c, 0, 'a', "idle", 0);
    report(c, 0, 'b', "idle", 0);
    report(c, 0, 'c', "idle", 0);
    assert_int_equal(start(c, 0.1, 1, 1, 1, &err), 0);
    report(c, 0.1, 'a', "joined", 0);
    assert_int_equal(rdzv_coord_alive_nodes(c), 3);
    assert_int_equal(start(c, 0.2, 2, 4, 4, &err), -ENOSPC);
    assert_string_equal(err.msg, "needs 4 nodes, cluster has 3");
    assert_string_equal(placement(c), "a=1 b= c=");

    /* c goes silent: dead, it no longer counts. */
    for (double t = 0.5; t < 5; t += 0.5) {
        report(c, t, 'a', "running", 0);
        report(c, t, 'b', "idle", 0);
    }
    assert_int_equal(rdzv_coord_alive_nodes(c), 2);
    assert_int_equal(rdzv_coord_free_nodes(c), 1);
    assert_int_equal(start(c, 5, 2, 3, 3, &err), -ENOSPC);
    assert_string_equal(err.msg, "needs 3 nodes, cluster has 2");
    assert_false(rdzv_coord_job_runs(c, 2));
    /* Within the cluster's size it waits for free nodes, as before. */
    assert_int_equal(rdzv_coord_job_fits(c, 2, false, &err), -EAGAIN);
    assert_string_equal(err.msg, "needs 2 nodes, 1 free");
    /* The job behind the one passed over is placed on the free node. */
    assert_int_equal(rdzv_coord_job_fits(c, 1, false, &err), 0);
    assert_int_equal(start(c, 5, 3, 1, 1, &err), 0);
    assert_string_equal(placement(c), "a=1 b=3 c=");
    assert_int_equal(rdzv_coord_job_count(c), 2);
}

/* Nothing runs: a job the cluster is too small for is -ENOSPC to the
 * queue's pass (so the jobs behind it go first), and still starts short,
 * to wait for more nodes, when asked to alone. */
static void test_alone_too_small(void **state)
{
    struct rdzv_coord *c = *state;
    struct gpt_err err;
    report(c, 0, 'a', "idle", 0);
    assert_int_equal(rdzv_coord_job_fits(c, 2, false, &err), -ENOSPC);
    assert_string_equal(err.msg, "needs 2 nodes, cluster has 1");
    assert_int_equal(rdzv_coord_job_fits(c, 1, false, &err), 0);
    assert_int_equal(rdzv_coord_job_fits(c, 2, true, &err), 0);
    assert_int_equal(start(c, 0.1, 1, 2, 2, &err), 0);
    rdzv_coord_tick(c, 1.5);
    assert_string_equal(doc_phase('a'), "waiting");
}

/* A job is placed first on the free nodes that recorded the snapshot it
 * resumes from (each node resumes from its own copy), then on any: a job
 * of 2 nodes whose snapshot c and d hold takes c and d, not a and b. */
static void test_snapshot_holders_first(void **state)
{
    struct rdzv_coord *c = *state;
    struct gpt_err err;
    for (char n = 'a'; n <= 'd'; n++)
        report(c, 0, n, "idle", 0);
    struct rdzv_job j = {.id = 7,
                         .spec_json = "{}",
                         .nodes_min = 1,
                         .nodes_max = 2,
                         .max_restarts = 3,
                         .wait_timeout_s = 60,
                         .resume_step = -1,
                         .newest_snap = 40,
                         .snap_nodes = "d\nx\nc\n"};
    assert_int_equal(rdzv_coord_job_start(c, 0.1, &j, &err), 0);
    assert_string_equal(placement(c), "a= b= c=7 d=7");
    /* One holder busy or gone: the rest come from the others. */
    struct rdzv_job k = j;
    k.id = 8;
    k.nodes_max = 2;
    k.snap_nodes = "c\nb\n";
    assert_int_equal(rdzv_coord_job_start(c, 0.2, &k, &err), 0);
    assert_string_equal(placement(c), "a=8 b=8 c=7 d=7");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_side_by_side, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failure_isolated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_end_frees, setup, teardown),
        cmocka_unit_test_setup_teardown(test_done_waits_for_rank0, setup, teardown),
        cmocka_unit_test_setup_teardown(test_admit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_growth_yields_to_queue, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alone_starts_short, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_holders_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cluster_too_small, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alone_too_small, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
