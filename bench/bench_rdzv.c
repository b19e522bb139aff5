/*
 * bench_rdzv: rendezvous time against the number of nodes. A coordinator
 * (daemon/cluster.c: the store server, the inbox drain and daemon/rdzv.c)
 * runs on its own loop thread; N lightweight simulated nodes, each one
 * asynchronous store client on the main thread's loop, speak the node side
 * of the protocol exactly as gptd's agent does: heartbeats and joins
 * appended to the inbox, the round key polled every 100 ms, the round read
 * when it changes. Measured: registration (every node's first heartbeat
 * acknowledged) and rendezvous (the coordinator opens a round for a job of
 * "N:N" nodes -> every node has read the closed world that lists it).
 *
 * Usage: bench_rdzv [N...] (default 8 64 512 2048). One JSON line per N.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "cluster.h"
#include "rdzv.h"
#include "store_client.h"

/* Every store has a secret; the benchmark's nodes share this one. */
#define BENCH_SECRET "bench-rdzv-secret-0123456789abcdef"

#define SIM_POLL_MS 100

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the coordinator thread ---- */

struct coord {
    uv_loop_t loop;
    uv_async_t cmd;
    struct cluster *cl;
    int port, n;
    int command; /* 1: start the job, 2: stop */
    pthread_t thread;
    pthread_mutex_t mu;
};

static void coord_on_cmd(uv_async_t *h)
{
    struct coord *co = h->data;
    pthread_mutex_lock(&co->mu);
    int cmd = co->command;
    pthread_mutex_unlock(&co->mu);
    if (cmd == 1) {
        struct gpt_err err;
        if (cluster_job_start(co->cl, 1, geteuid(), "{}", co->n, co->n, 0, 600, &err) < 0)
            fprintf(stderr, "bench_rdzv: job start: %s\n", err.msg);
    } else if (cmd == 2) {
        cluster_close(co->cl, NULL, NULL);
        uv_close((uv_handle_t *)&co->cmd, NULL);
    }
}

static void *coord_main(void *arg)
{
    struct coord *co = arg;
    uv_run(&co->loop, UV_RUN_DEFAULT);
    return NULL;
}

static void coord_command(struct coord *co, int cmd)
{
    pthread_mutex_lock(&co->mu);
    co->command = cmd;
    pthread_mutex_unlock(&co->mu);
    uv_async_send(&co->cmd);
}

/* ---- simulated nodes (main thread) ---- */

struct sim;

struct node {
    struct sim *s;
    int idx;
    char id[32];
    struct store_client_async *a;
    bool hb_acked, in_world, busy;
    char round_seen[96];
    char joined[96]; /* "gen:round" joined */
};

struct sim {
    uv_loop_t loop;
    uv_timer_t timer;
    struct node *nodes;
    int n, acked, in_world;
    double t_world_last;
    double next_hb;
};

static void node_append(struct node *nd, json_t *msg,
                        void (*cb)(void *, const struct store_reply *))
{
    char *line = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    size_t len = strlen(line);
    line[len] = '\n'; /* json_dumps leaves room for the NUL: reuse it */
    (void)store_client_async_append(nd->a, RDZV_KEY_INBOX, line, len + 1, cb, nd);
    free(line);
}

static void node_on_hb(void *arg, const struct store_reply *r)
{
    struct node *nd = arg;
    if (r->status == 0 && !nd->hb_acked) {
        nd->hb_acked = true;
        nd->s->acked++;
    }
}

static void node_on_ignore(void *arg, const struct store_reply *r)
{
    (void)arg;
    (void)r;
}

static void node_heartbeat(struct node *nd)
{
    node_append(nd,
                json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:s}", "t", "hb", "node", nd->id, "inc",
                          "1", "addr", "127.0.0.1", "ver", "bench", "workers", 1, "state",
                          nd->in_world ? "running" : "idle"),
                node_on_hb);
}

static void node_on_me(void *arg, const struct store_reply *r)
{
    struct node *nd = arg;
    nd->busy = false;
    if (r->status == 0 && !nd->in_world) {
        nd->in_world = true;
        nd->s->in_world++;
        nd->s->t_world_last = mono_s();
    }
}

static void node_on_cur(void *arg, const struct store_reply *r)
{
    struct node *nd = arg;
    nd->busy = false;
    if (r->status < 0)
        return;
    json_t *cur = json_loadb(r->data, r->len, 0, NULL);
    const char *phase = json_string_value(json_object_get(cur, "phase"));
    const char *gen = json_string_value(json_object_get(cur, "gen"));
    json_int_t round = json_integer_value(json_object_get(cur, "round"));
    json_int_t job = json_integer_value(json_object_get(cur, "job"));
    if (phase && gen && strcmp(phase, "forming") == 0 && job) {
        char key[96];
        snprintf(key, sizeof(key), "%s:%lld", gen, (long long)round);
        if (strcmp(key, nd->joined) != 0) {
            snprintf(nd->joined, sizeof(nd->joined), "%s", key);
            node_append(nd,
                        json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:i, s:i, s:s, s:s}", "t", "join",
                                  "node", nd->id, "inc", "1", "gen", gen, "round",
                                  (json_int_t)round, "job", (json_int_t)job, "snap", -1, "workers",
                                  1, "state", "joined", "addr", "127.0.0.1"),
                        node_on_ignore);
        }
    } else if (phase && strcmp(phase, "running") == 0 && !nd->in_world) {
        /* As gptd's nodes do: read this node's own assignment. */
        char key[96];
        snprintf(key, sizeof(key), "rdzv/%lld/node/%s", (long long)round, nd->id);
        if (store_client_async_get(nd->a, key, node_on_me, nd) == 0)
            nd->busy = true;
    }
    json_decref(cur);
}

static void node_on_round(void *arg, const struct store_reply *r)
{
    struct node *nd = arg;
    if (r->status < 0 || r->len >= sizeof(nd->round_seen) ||
        (strlen(nd->round_seen) == r->len && memcmp(nd->round_seen, r->data, r->len) == 0)) {
        nd->busy = false;
        return;
    }
    memcpy(nd->round_seen, r->data, r->len);
    nd->round_seen[r->len] = '\0';
    if (store_client_async_get(nd->a, RDZV_KEY_CUR, node_on_cur, nd) < 0)
        nd->busy = false;
}

static void sim_on_tick(uv_timer_t *t)
{
    struct sim *s = t->data;
    double now = mono_s();
    bool hb = now >= s->next_hb;
    if (hb)
        s->next_hb = now + 1.0;
    for (int i = 0; i < s->n; i++) {
        struct node *nd = &s->nodes[i];
        if (hb)
            node_heartbeat(nd);
        if (!nd->busy && !nd->in_world) {
            if (store_client_async_get(nd->a, RDZV_KEY_ROUND, node_on_round, nd) == 0)
                nd->busy = true;
        }
    }
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        return -1;
    close(fd);
    return ntohs(a.sin_port);
}

/* Runs the loop until cond(s) holds or `limit_s` passes; returns the time. */
static double sim_run_until(struct sim *s, bool (*cond)(const struct sim *), double limit_s)
{
    double t0 = mono_s();
    while (!cond(s) && mono_s() - t0 < limit_s)
        uv_run(&s->loop, UV_RUN_ONCE);
    return mono_s() - t0;
}

static bool sim_all_acked(const struct sim *s)
{
    return s->acked == s->n;
}

static bool sim_all_in_world(const struct sim *s)
{
    return s->in_world == s->n;
}

static void sim_on_closed(void *arg)
{
    (void)arg;
}

static int trial(int n)
{
    struct coord co;
    memset(&co, 0, sizeof(co));
    co.n = n;
    co.port = free_port();
    pthread_mutex_init(&co.mu, NULL);
    uv_loop_init(&co.loop);
    struct cluster_opts o = {.node_id = "bench-coordinator",
                             .host = "127.0.0.1",
                             .port = co.port,
                             .coordinator = true,
                             .heartbeat_s = 1,
                             .dead_after_s = 30,
                             .last_call_s = 1,
                             .addr = "127.0.0.1",
                             .workers = 1,
                             .version = "bench",
                             .secret = BENCH_SECRET,
                             .secret_len = sizeof(BENCH_SECRET) - 1};
    struct gpt_err err;
    if (cluster_new(&co.loop, &o, &co.cl, &err) < 0) {
        fprintf(stderr, "bench_rdzv: %s\n", err.msg);
        return 1;
    }
    uv_async_init(&co.loop, &co.cmd, coord_on_cmd);
    co.cmd.data = &co;
    pthread_create(&co.thread, NULL, coord_main, &co);

    struct sim s;
    memset(&s, 0, sizeof(s));
    s.n = n;
    uv_loop_init(&s.loop);
    s.nodes = calloc((size_t)n, sizeof(*s.nodes));
    double t0 = mono_s();
    for (int i = 0; i < n; i++) {
        struct node *nd = &s.nodes[i];
        nd->s = &s;
        nd->idx = i;
        snprintf(nd->id, sizeof(nd->id), "sim-%05d", i);
        struct store_client_async_opts ao = {.host = "127.0.0.1",
                                             .port = co.port,
                                             .secret = BENCH_SECRET,
                                             .secret_len = sizeof(BENCH_SECRET) - 1};
        if (store_client_async_new(&s.loop, &ao, NULL, NULL, &nd->a, &err) < 0) {
            fprintf(stderr, "bench_rdzv: node %d: %s\n", i, err.msg);
            return 1;
        }
    }
    uv_timer_init(&s.loop, &s.timer);
    s.timer.data = &s;
    uv_timer_start(&s.timer, sim_on_tick, 0, SIM_POLL_MS);
    sim_run_until(&s, sim_all_acked, 60);
    double t_register = mono_s() - t0;
    /* Let the coordinator drain the registrations, as a real cluster idles
     * before a job arrives. */
    double settle = mono_s() + 0.5;
    while (mono_s() < settle)
        uv_run(&s.loop, UV_RUN_NOWAIT), usleep(1000);
    double t1 = mono_s();
    coord_command(&co, 1);
    sim_run_until(&s, sim_all_in_world, 120);
    double t_rdzv = s.t_world_last - t1;
    bool ok = s.in_world == n;
    printf("{\"bench\":\"rdzv\",\"nodes\":%d,\"ok\":%s,\"register_s\":%.3f,\"rendezvous_s\":%.3f,"
           "\"goal_s\":5}\n",
           n, ok ? "true" : "false", t_register, ok ? t_rdzv : -1.0);
    fflush(stdout);

    uv_timer_stop(&s.timer);
    uv_close((uv_handle_t *)&s.timer, NULL);
    for (int i = 0; i < n; i++)
        store_client_async_close(s.nodes[i].a, sim_on_closed, NULL);
    uv_run(&s.loop, UV_RUN_DEFAULT);
    uv_loop_close(&s.loop);
    free(s.nodes);
    coord_command(&co, 2);
    pthread_join(co.thread, NULL);
    uv_loop_close(&co.loop);
    pthread_mutex_destroy(&co.mu);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    static const int dflt[] = {8, 64, 512, 2048};
    int rc = 0;
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            rc |= trial(atoi(argv[i]));
    } else {
        for (size_t i = 0; i < sizeof(dflt) / sizeof(dflt[0]); i++)
            rc |= trial(dflt[i]);
    }
    return rc;
}
