/*
 * test_cluster_self: a loop held up past dead_after_s (a loaded host) makes
 * nobody dead. The coordinator's own heartbeat goes round through its own
 * store on that loop, and a member's heartbeats wait unread in their
 * sockets meanwhile, so both would look as stale as a silent node's. A
 * real coordinator (daemon/cluster/cluster.c with its store server and
 * rdzv.c) and a member on one loop; a timer callback holds the loop for
 * twice dead_after_s; both rows must stay alive through the sweeps that
 * follow. Bounded by deadlines.
 *
 * The other way round, a member whose own loop is held up past
 * dead_after_s does not take the store's replies, waiting unread in its
 * socket, for the coordinator's silence: the member on a loop of its own
 * sends a heartbeat the coordinator has not read yet, its loop is held,
 * and it must not report the store lost (leave its world) afterwards.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <jansson.h>
#include <uv.h>

#include "cluster.h"

#define SECRET       "test-cluster-self-secret-0123456789"
#define HEARTBEAT_S  0.25
#define DEAD_AFTER_S 1.0 /* four heartbeats: a loop that runs never misses it */

static uv_loop_t loop, member_loop;
static struct cluster *coord, *member;
static int lost; /* times the member reported the store lost */

static double now_s(void)
{
    return (double)uv_hrtime() / 1e9;
}

/* Node `node`'s row in the coordinator's node table: "" when absent. */
static void node_state(const char *node, char *out, size_t size)
{
    json_t *nodes = cluster_nodes_json(coord);
    size_t i;
    json_t *n;
    out[0] = '\0';
    json_array_foreach(nodes, i, n)
    {
        const char *id = json_string_value(json_object_get(n, "node"));
        const char *st = json_string_value(json_object_get(n, "state"));
        if (id && st && strcmp(id, node) == 0)
            snprintf(out, size, "%s", st);
    }
    json_decref(nodes);
}

/* Holds the loop it runs on, as a burst of work on the loop thread of a
 * loaded host does: no tick, no read of a socket, for the whole time. */
static void on_stall(uv_timer_t *t)
{
    (void)t;
    struct timespec ts = {.tv_sec = (time_t)(2 * DEAD_AFTER_S), .tv_nsec = 200 * 1000 * 1000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

static void on_closed(void *arg)
{
    (*(int *)arg)++;
}

static void on_stall_closed(uv_handle_t *h)
{
    (void)h;
}

static struct cluster_opts coord_opts(void)
{
    return (struct cluster_opts){.node_id = "coordinator",
                                 .host = "127.0.0.1",
                                 .port = 0,
                                 .coordinator = true,
                                 .secret = SECRET,
                                 .secret_len = strlen(SECRET),
                                 .heartbeat_s = HEARTBEAT_S,
                                 .dead_after_s = DEAD_AFTER_S,
                                 .last_call_s = 5,
                                 .addr = "127.0.0.1",
                                 .workers = 1,
                                 .version = "test"};
}

static void on_lost(void *ctx)
{
    (void)ctx;
    lost++;
}

/* One pass of each loop, the coordinator's first. */
static void pump(void)
{
    uv_run(&loop, UV_RUN_NOWAIT);
    uv_run(&member_loop, UV_RUN_NOWAIT);
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 1000 * 1000}; /* a pass, not a wait */
    nanosleep(&ts, NULL);
}

static void test_cluster_stalled_loop(void **state)
{
    struct gpt_err err;
    struct cluster_opts co = coord_opts();
    char st[32], mst[32];
    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(cluster_new(&loop, &co, &coord, &err), 0);
    struct cluster_opts mo = co;
    mo.node_id = "member";
    mo.coordinator = false;
    mo.port = cluster_port(coord);
    assert_int_equal(cluster_new(&loop, &mo, &member, &err), 0);

    /* Heartbeats flow through the store for a while: both alive. */
    double end = now_s() + 1.5;
    while (now_s() < end)
        uv_run(&loop, UV_RUN_ONCE);
    node_state("coordinator", st, sizeof(st));
    node_state("member", mst, sizeof(mst));
    assert_string_equal(st, "idle");
    assert_string_equal(mst, "idle");

    /* The loop is held for more than dead_after_s, then runs its sweeps:
     * the first ones judge by heartbeats older than dead_after_s, until
     * the store has read fresh ones. */
    uv_timer_t stall;
    uv_timer_init(&loop, &stall);
    uv_timer_start(&stall, on_stall, 0, 0);
    end = now_s() + 2 * DEAD_AFTER_S + 2.0;
    while (now_s() < end) {
        uv_run(&loop, UV_RUN_ONCE);
        node_state("coordinator", st, sizeof(st));
        node_state("member", mst, sizeof(mst));
        if (strcmp(st, "idle") != 0 || strcmp(mst, "idle") != 0)
            break;
    }
    assert_string_equal(st, "idle");
    assert_string_equal(mst, "idle");

    int closed = 0;
    uv_close((uv_handle_t *)&stall, on_stall_closed);
    cluster_close(member, on_closed, &closed);
    cluster_close(coord, on_closed, &closed);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(closed, 2);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_cluster_member_stalled_loop(void **state)
{
    struct gpt_err err;
    struct cluster_opts co = coord_opts();
    char st[32];
    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(uv_loop_init(&member_loop), 0);
    assert_int_equal(cluster_new(&loop, &co, &coord, &err), 0);
    struct cluster_opts mo = co;
    mo.node_id = "member";
    mo.coordinator = false;
    mo.port = cluster_port(coord);
    assert_int_equal(cluster_new(&member_loop, &mo, &member, &err), 0);
    struct cluster_node_hooks hooks = {.lost = on_lost};
    cluster_set_node_hooks(member, &hooks);

    /* The member joins: its row is on the coordinator. */
    double end = now_s() + 10.0;
    do {
        pump();
        node_state("member", st, sizeof(st));
    } while (strcmp(st, "idle") != 0 && now_s() < end);
    assert_string_equal(st, "idle");
    assert_int_equal(lost, 0);

    /* Only the member runs for longer than a heartbeat: it sends one the
     * coordinator does not read yet, so a reply is due while it stalls. */
    end = now_s() + HEARTBEAT_S + 0.1;
    while (now_s() < end)
        uv_run(&member_loop, UV_RUN_NOWAIT);

    /* The member's loop is held past dead_after_s; then both run, the
     * coordinator first, so the reply waits in the member's socket when
     * the member's late tick judges the store's silence. */
    uv_timer_t stall;
    uv_timer_init(&member_loop, &stall);
    uv_timer_start(&stall, on_stall, 0, 0);
    uv_run(&member_loop, UV_RUN_NOWAIT);
    end = now_s() + 2 * DEAD_AFTER_S + 1.0;
    while (now_s() < end && lost == 0)
        pump();
    assert_int_equal(lost, 0);

    int closed = 0;
    uv_close((uv_handle_t *)&stall, on_stall_closed);
    cluster_close(member, on_closed, &closed);
    cluster_close(coord, on_closed, &closed);
    end = now_s() + 10.0;
    while (closed < 2 && now_s() < end)
        pump();
    assert_int_equal(closed, 2);
    uv_run(&member_loop, UV_RUN_DEFAULT);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&member_loop), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as gptd: a hung-up peer is an error, not a signal */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_stalled_loop),
        cmocka_unit_test(test_cluster_member_stalled_loop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
