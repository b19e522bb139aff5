/*
 * bench_rdzv: the control plane against the number of nodes. A coordinator
 * (daemon/cluster/cluster.c: the store server, the heartbeat table, the inbox and
 * daemon/cluster/rdzv.c) runs on its own loop thread; N lightweight simulated
 * nodes, each one asynchronous store client, run in SIM_PROCS child
 * processes (one loop each: a process holds at most RLIMIT_NOFILE
 * descriptors, and the coordinator holds one per node already) and speak
 * the node side of the protocol as gptd's cluster and agent do: a
 * HEARTBEAT every second (the real cluster_msg encoder), the round key
 * watched (WATCH on rdzv/n/<id>, never polled), a join as a
 * heartbeat with state "joined" when a round forms, the node's assignment
 * taken from the closed round ("me"), its exit reported when the world
 * stops.
 *
 * Measured, one JSON line per N:
 *   register_s     connect + every node's first heartbeat acknowledged
 *   rendezvous_s   a job "N:N" starts -> every node has read the closed
 *                  world that lists it ("closed": why the round closed)
 *   steady_req_s   store requests per second (the store's own counter)
 *                  over STEADY_S with the world running and nothing changing
 *   fail_detect_s  one node stops (process gone: connection and
 *                  heartbeats) in a job "N/2:N" with restarts -> the
 *                  coordinator opens a new round (dead_after_s = 3)
 *   reform_s       that round opens -> every survivor has read the new
 *                  world that lists it ("reform_closed": why it closed)
 *   coord_cpu_*    CPU seconds of the coordinator's thread (registration,
 *                  rendezvous; the steady state's share of one core), and
 *   load1          the machine's load average when it started: on a shared
 *                  machine the wall times stretch with the load, CPU does not
 *
 * Usage: bench_rdzv [N...] (default 8 64 512 2048). Each process raises
 * its soft file-descriptor limit to the hard one.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "cluster.h"
#include "cluster_msg.h"
#include "rdzv.h"
#include "store_client.h"
#include "store_server.h"

/* Every store has a secret; the benchmark's nodes share this one. */
#define BENCH_SECRET "bench-rdzv-secret-0123456789abcdef"

#define SIM_PROCS       4
#define SIM_TICK_MS     50
#define SIM_CONNECT_MAX 128 /* connections started per loop and tick */
#define STEADY_S        5.0
#define DEAD_AFTER_S    3.0
#define GOAL_S          5.0

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the coordinator thread ---- */

enum { CMD_NONE, CMD_START, CMD_STOP_JOB, CMD_CLOSE };

struct coord {
    uv_loop_t loop;
    uv_async_t cmd;
    struct cluster *cl;
    int port;
    int command, job_min, job_max, job_restarts;
    int64_t job_id;
    atomic_int finished; /* jobs finished */
    pthread_t thread;
    pthread_mutex_t mu;
};

static void coord_finished(void *ctx, int64_t job, int rc, int64_t step, const char *error)
{
    struct coord *co = ctx;
    (void)job, (void)rc, (void)step, (void)error;
    atomic_fetch_add(&co->finished, 1);
}

static void coord_on_cmd(uv_async_t *h)
{
    struct coord *co = h->data;
    pthread_mutex_lock(&co->mu);
    int cmd = co->command;
    co->command = CMD_NONE;
    pthread_mutex_unlock(&co->mu);
    struct gpt_err err;
    if (cmd == CMD_START) {
        if (cluster_job_start(co->cl, co->job_id, geteuid(), "{}", co->job_min, co->job_max,
                              co->job_restarts, 600, &err) < 0)
            fprintf(stderr, "bench_rdzv: job start: %s\n", err.msg);
    } else if (cmd == CMD_STOP_JOB) {
        cluster_job_stop(co->cl, 0);
    } else if (cmd == CMD_CLOSE) {
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

/* CPU seconds the coordinator's thread used so far: on a shared machine
 * the wall times stretch with the load, this does not. */
static double coord_cpu_s(struct coord *co)
{
    clockid_t cid;
    struct timespec ts;
    if (pthread_getcpuclockid(co->thread, &cid) != 0 || clock_gettime(cid, &ts) != 0)
        return -1;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t coord_requests(struct coord *co)
{
    struct store_server_stats st;
    store_server_stats(cluster_store_server(co->cl), &st);
    return st.requests;
}

/* ---- simulated nodes: SIM_LOOPS threads, each with its share ---- */

struct sim;

struct node {
    struct sim *s;
    char id[32];
    struct store_client_async *a;
    bool started, dead, hb_acked, watching;
    bool reconnect; /* the connection failed: a new one at the next tick, as gptd does */
    uint64_t cur_version;
    /* the round as this node follows it (the agent's part) */
    char state[16];
    uint64_t gen;
    int64_t round, job;
    int64_t world_round; /* the closed round whose world this node read, -1 none */
    int64_t exit_round;  /* the round whose workers "stopped", -1 none */
    bool me_inflight;
    char round_key[64]; /* RDZV_KEY_NODE_PREFIX + id */
};

/* Counters the parent reads, written by the sim processes; and the
 * parent's orders. In shared memory (the mutex is process-shared). */
struct sim_shared {
    atomic_int go, stop;
    atomic_int kill[SIM_PROCS]; /* >= 0: that node of that process dies */
    atomic_int acked, in_world, exited;
    atomic_int_fast64_t want_round; /* nodes count as in the world of this round or later */
    pthread_mutex_t mu;
    double t_world_last, t_forming_first; /* under mu */
    int64_t forming_round;                /* t_forming_first is of this round (under mu) */
    char closed[160];                     /* the newest world's "closed" (under mu) */
};

struct sim {
    uv_loop_t loop;
    uv_timer_t timer;
    struct sim_shared *sh;
    struct node *nodes;
    int idx, n, next_connect, port;
    double next_hb;
};

static void node_on_hb(void *arg, const struct store_reply *r)
{
    struct node *nd = arg;
    if (r->status == 0 && !nd->hb_acked) {
        nd->hb_acked = true;
        atomic_fetch_add(&nd->s->sh->acked, 1);
    }
}

/* The heartbeat gptd's cluster and agent would send in this state. */
static void node_heartbeat(struct node *nd)
{
    struct cluster_msg m;
    char *line = NULL;
    size_t len = 0;
    struct gpt_err err;

    if (nd->dead)
        return;
    cluster_msg_init(&m, CLUSTER_MSG_HB);
    snprintf(m.node, sizeof(m.node), "%s", nd->id);
    m.inc = 1;
    snprintf(m.addr, sizeof(m.addr), "127.0.0.1");
    snprintf(m.version, sizeof(m.version), "bench");
    snprintf(m.devices, sizeof(m.devices), "cpu");
    snprintf(m.state, sizeof(m.state), "%s", nd->state);
    m.workers = 1;
    m.gen = nd->gen;
    m.round = nd->round;
    m.job = nd->job;
    m.present |= CLUSTER_MSG_BIT(ADDR) | CLUSTER_MSG_BIT(VER) | CLUSTER_MSG_BIT(WORKERS) |
                 CLUSTER_MSG_BIT(DEV) | CLUSTER_MSG_BIT(STATE) | CLUSTER_MSG_BIT(GEN) |
                 CLUSTER_MSG_BIT(ROUND) | CLUSTER_MSG_BIT(JOB);
    if (strcmp(nd->state, "joined") == 0) {
        m.snap_step = -1;
        m.present |= CLUSTER_MSG_BIT(SNAP);
    }
    if (nd->exit_round >= 0) {
        m.exit_round = nd->exit_round;
        m.exit_rc = 1; /* GPT_TRAIN_STOPPED */
        m.exit_step = 0;
        m.present |= CLUSTER_MSG_BIT(EXIT_ROUND) | CLUSTER_MSG_BIT(EXIT_RC) |
                     CLUSTER_MSG_BIT(EXIT_STEP) | CLUSTER_MSG_BIT(EXIT_MSG);
    }
    if (cluster_msg_encode(&m, &line, &len, &err) < 0) {
        fprintf(stderr, "bench_rdzv: %s\n", err.msg);
        return;
    }
    if (store_client_async_heartbeat(nd->a, nd->id, line, len, node_on_hb, nd) == -EPIPE)
        nd->reconnect = true;
    free(line);
    cluster_msg_done(&m);
}

/* The node read a closed round with its own assignment ("me"). */
static void node_world(struct node *nd)
{
    struct sim_shared *sh = nd->s->sh;
    if (nd->world_round == nd->round)
        return;
    bool counted = nd->world_round >= atomic_load(&sh->want_round);
    nd->world_round = nd->round;
    snprintf(nd->state, sizeof(nd->state), "running");
    node_heartbeat(nd); /* as the agent does on every state change */
    if (!counted && nd->world_round >= atomic_load(&sh->want_round)) {
        atomic_fetch_add(&sh->in_world, 1);
        pthread_mutex_lock(&sh->mu);
        sh->t_world_last = mono_s();
        pthread_mutex_unlock(&sh->mu);
    }
}

/* A round as published: what gptd's agent does with it. */
static void node_round(struct node *nd, const void *data, size_t len)
{
    struct sim_shared *sh = nd->s->sh;
    json_t *cur = json_loadb(data, len, 0, NULL);
    const char *phase = json_string_value(json_object_get(cur, "phase"));
    const char *gen = json_string_value(json_object_get(cur, "gen"));
    int64_t round = json_integer_value(json_object_get(cur, "round"));
    int64_t job = json_integer_value(json_object_get(cur, "job"));

    if (!phase || !gen) {
        json_decref(cur);
        return;
    }
    nd->gen = strtoull(gen, NULL, 16);
    if (strcmp(phase, "forming") == 0 && job && round != nd->round) {
        nd->round = round;
        nd->job = job;
        nd->exit_round = -1;
        snprintf(nd->state, sizeof(nd->state), "joined");
        node_heartbeat(nd); /* the join */
        pthread_mutex_lock(&sh->mu);
        if (sh->forming_round != round) {
            sh->forming_round = round;
            sh->t_forming_first = mono_s();
        }
        pthread_mutex_unlock(&sh->mu);
    } else if (strcmp(phase, "running") == 0 && job && !nd->me_inflight &&
               nd->world_round != round && strcmp(nd->state, "joined") == 0 && nd->round == round) {
        const char *closed = json_string_value(json_object_get(cur, "closed"));
        if (closed) {
            pthread_mutex_lock(&sh->mu);
            snprintf(sh->closed, sizeof(sh->closed), "%s", closed);
            pthread_mutex_unlock(&sh->mu);
        }
        if (json_object_get(cur, "me"))
            node_world(nd);
    } else if (strcmp(phase, "stopping") == 0 && nd->world_round == round &&
               nd->exit_round != round) {
        nd->exit_round = round;
        snprintf(nd->state, sizeof(nd->state), "exited");
        node_heartbeat(nd);
        atomic_fetch_add(&sh->exited, 1);
    } else if (strcmp(phase, "idle") == 0 && nd->job) {
        nd->job = 0;
        nd->round = round;
        nd->exit_round = -1;
        snprintf(nd->state, sizeof(nd->state), "idle");
        node_heartbeat(nd);
    }
    json_decref(cur);
}

static void node_watch(struct node *nd);

static void node_on_watch(void *arg, const struct store_reply *r)
{
    struct node *nd = arg;
    nd->watching = false;
    if (r->status == -ECANCELED || nd->dead)
        return;
    if (r->status == 0) {
        nd->cur_version = r->version;
        node_round(nd, r->data, r->len);
    } else if (r->status == -ENOENT) {
        nd->cur_version = 0;
    } else if (r->status != -ETIMEDOUT) {
        if (r->status != -GPT_E_LIMIT)
            nd->reconnect = true; /* the connection failed */
        return;                   /* the tick tries again */
    }
    node_watch(nd);
}

static void node_watch(struct node *nd)
{
    if (!nd->watching && !nd->dead &&
        store_client_async_watch(nd->a, nd->round_key, nd->cur_version, 30000, node_on_watch, nd) ==
            0)
        nd->watching = true;
}

/* The parent's orders: a node dies, or everything closes. */
static bool sim_orders(struct sim *s)
{
    int k = atomic_exchange(&s->sh->kill[s->idx], -1);
    if (k >= 0 && k < s->n && !s->nodes[k].dead && s->nodes[k].a) {
        struct node *nd = &s->nodes[k];
        nd->dead = true;
        store_client_async_close(nd->a, NULL, NULL);
        nd->a = NULL;
    }
    if (!atomic_load(&s->sh->stop))
        return false;
    uv_timer_stop(&s->timer);
    uv_close((uv_handle_t *)&s->timer, NULL);
    for (int i = 0; i < s->n; i++)
        if (s->nodes[i].a)
            store_client_async_close(s->nodes[i].a, NULL, NULL);
    return true;
}

static void node_on_connect(void *arg, int status)
{
    struct node *nd = arg;
    if (status < 0)
        nd->reconnect = true; /* refused or timed out under load: again later */
}

/* Opens the node's connection, sends its heartbeat and parks its watch. */
static void node_connect(struct sim *s, struct node *nd)
{
    struct gpt_err err;
    struct store_client_async_opts ao = {.host = "127.0.0.1",
                                         .port = s->port,
                                         .secret = BENCH_SECRET,
                                         .secret_len = sizeof(BENCH_SECRET) - 1,
                                         .node = nd->id};
    if (nd->a)
        store_client_async_close(nd->a, NULL, NULL);
    nd->a = NULL;
    nd->reconnect = false;
    nd->watching = false;
    nd->me_inflight = false;
    nd->cur_version = 0;
    if (store_client_async_new(&s->loop, &ao, node_on_connect, nd, &nd->a, &err) < 0) {
        fprintf(stderr, "bench_rdzv: %s: %s\n", nd->id, err.msg);
        nd->reconnect = true;
        return;
    }
    nd->started = true;
    node_heartbeat(nd);
    node_watch(nd);
}

static void sim_on_tick(uv_timer_t *t)
{
    struct sim *s = t->data;
    double now = mono_s();
    bool hb = now >= s->next_hb;

    if (sim_orders(s))
        return;
    if (!atomic_load(&s->sh->go))
        return;
    /* Connect a batch per tick: a cluster's nodes do not all start within
     * one millisecond, and a SYN flood only measures the kernel. */
    int budget = SIM_CONNECT_MAX;
    for (; budget > 0 && s->next_connect < s->n; budget--)
        node_connect(s, &s->nodes[s->next_connect++]);
    for (int i = 0; i < s->n && budget > 0; i++)
        if (s->nodes[i].reconnect && !s->nodes[i].dead)
            node_connect(s, &s->nodes[i]), budget--;
    if (hb)
        s->next_hb = now + 1.0;
    for (int i = 0; i < s->n; i++) {
        struct node *nd = &s->nodes[i];
        if (!nd->started || nd->dead || nd->reconnect)
            continue;
        if (hb)
            node_heartbeat(nd);
        node_watch(nd);
    }
}

/* A child process: its share of the nodes, until the parent says stop. */
static void sim_child(int idx, int n, int port, struct sim_shared *sh)
{
    struct sim s;
    memset(&s, 0, sizeof(s));
    s.sh = sh;
    s.idx = idx;
    s.port = port;
    s.n = n / SIM_PROCS + (idx < n % SIM_PROCS);
    s.nodes = calloc((size_t)(s.n ? s.n : 1), sizeof(*s.nodes));
    for (int i = 0; i < s.n; i++) {
        struct node *nd = &s.nodes[i];
        nd->s = &s;
        snprintf(nd->id, sizeof(nd->id), "sim-%d-%05d", idx, i);
        snprintf(nd->round_key, sizeof(nd->round_key), RDZV_KEY_NODE_PREFIX "%s", nd->id);
        snprintf(nd->state, sizeof(nd->state), "idle");
        nd->round = nd->world_round = nd->exit_round = -1;
    }
    uv_loop_init(&s.loop);
    uv_timer_init(&s.loop, &s.timer);
    s.timer.data = &s;
    uv_timer_start(&s.timer, sim_on_tick, 0, SIM_TICK_MS);
    uv_run(&s.loop, UV_RUN_DEFAULT);
    uv_loop_close(&s.loop);
    free(s.nodes);
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

/* Waits until cond(sh, arg) holds or limit_s passes; returns whether it held. */
static bool wait_until(struct sim_shared *sh, bool (*cond)(struct sim_shared *, int), int arg,
                       double limit_s)
{
    double end = mono_s() + limit_s, next = mono_s() + 1.0;
    while (!cond(sh, arg)) {
        if (mono_s() > end)
            return false;
        if (getenv("BENCH_RDZV_TRACE") && mono_s() > next) {
            next += 1.0;
            fprintf(stderr, "bench_rdzv: acked %d in_world %d exited %d\n", atomic_load(&sh->acked),
                    atomic_load(&sh->in_world), atomic_load(&sh->exited));
        }
        usleep(2000);
    }
    return true;
}

static bool all_acked(struct sim_shared *sh, int n)
{
    return atomic_load(&sh->acked) >= n;
}

static bool all_in_world(struct sim_shared *sh, int n)
{
    return atomic_load(&sh->in_world) >= n;
}

static bool all_exited(struct sim_shared *sh, int n)
{
    return atomic_load(&sh->exited) >= n;
}

static void closed_copy(struct sim_shared *sh, char *buf, size_t cap)
{
    pthread_mutex_lock(&sh->mu);
    snprintf(buf, cap, "%s", sh->closed);
    for (char *p = buf; *p; p++)
        if (*p == '"' || *p == '\\')
            *p = '\'';
    pthread_mutex_unlock(&sh->mu);
}

static void coord_start_job(struct coord *co, int64_t id, int min, int max, int restarts)
{
    pthread_mutex_lock(&co->mu);
    co->job_id = id;
    co->job_min = min;
    co->job_max = max;
    co->job_restarts = restarts;
    pthread_mutex_unlock(&co->mu);
    coord_command(co, CMD_START);
}

static int trial(int n)
{
    struct coord co;
    memset(&co, 0, sizeof(co));
    co.port = free_port();
    /* The simulated nodes' processes start first, while this one has no
     * other thread, and wait for the word. */
    struct sim_shared *sh =
        mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    memset(sh, 0, sizeof(*sh));
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutex_init(&sh->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    sh->forming_round = -1;
    for (int l = 0; l < SIM_PROCS; l++)
        atomic_store(&sh->kill[l], -1);
    pid_t kids[SIM_PROCS];
    fflush(NULL);
    for (int l = 0; l < SIM_PROCS; l++) {
        kids[l] = fork();
        if (kids[l] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the benchmark */
            sim_child(l, n, co.port, sh);
            _exit(0);
        }
    }
    pthread_mutex_init(&co.mu, NULL);
    uv_loop_init(&co.loop);
    struct cluster_opts o = {.node_id = "bench-coordinator",
                             .host = "127.0.0.1",
                             .port = co.port,
                             .coordinator = true,
                             .heartbeat_s = 1,
                             .dead_after_s = DEAD_AFTER_S,
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
    struct cluster_jobs_hooks jh = {.ctx = &co, .finished = coord_finished};
    cluster_set_jobs_hooks(co.cl, &jh);
    uv_async_init(&co.loop, &co.cmd, coord_on_cmd);
    co.cmd.data = &co;

    pthread_create(&co.thread, NULL, coord_main, &co);
    atomic_store(&sh->go, 1);
    double t0 = mono_s();
    double load[1] = {-1};
    (void)getloadavg(load, 1);
    bool ok = wait_until(sh, all_acked, n, 600);
    double t_register = mono_s() - t0;
    double cpu_register = coord_cpu_s(&co);
    usleep(500000); /* the registrations drained, as a cluster idles before a job */

    /* Rendezvous of a job "N:N". */
    char closed1[160] = "", closed2[160] = "";
    atomic_store(&sh->want_round, 1);
    double t1 = mono_s(), c1 = coord_cpu_s(&co);
    coord_start_job(&co, 1, n, n, 0);
    bool ok_rdzv = wait_until(sh, all_in_world, n, 600);
    double t_rdzv = ok_rdzv ? sh->t_world_last - t1 : -1;
    double cpu_rdzv = coord_cpu_s(&co) - c1;
    closed_copy(sh, closed1, sizeof(closed1));

    /* Steady state: the world runs, nothing changes. */
    usleep(1500000);
    uint64_t r0 = coord_requests(&co);
    double ts0 = mono_s(), cs0 = coord_cpu_s(&co);
    usleep((useconds_t)(STEADY_S * 1e6));
    double steady = (double)(coord_requests(&co) - r0) / (mono_s() - ts0);
    double steady_cpu = (coord_cpu_s(&co) - cs0) / (mono_s() - ts0);

    /* The job stops (every node reports its workers' exit); then a job
     * "N/2:N" with restarts runs and one node dies. */
    coord_command(&co, CMD_STOP_JOB);
    bool ok_stop = wait_until(sh, all_exited, n, 60);
    double t_stop_wait = mono_s() + 30;
    while (atomic_load(&co.finished) < 1 && mono_s() < t_stop_wait)
        usleep(2000);
    ok_stop = ok_stop && atomic_load(&co.finished) >= 1;
    usleep(300000);
    atomic_store(&sh->in_world, 0);
    atomic_store(&sh->want_round, 0);
    pthread_mutex_lock(&sh->mu);
    int64_t base_round = sh->forming_round;
    pthread_mutex_unlock(&sh->mu);
    /* The new job's first round is the next one (one sequence for all jobs). */
    atomic_store(&sh->want_round, base_round + 1);
    coord_start_job(&co, 2, n / 2 > 0 ? n / 2 : 1, n, 3);
    bool ok_job2 = wait_until(sh, all_in_world, n, 600);
    double t_detect = -1, t_reform = -1, t_from_kill = -1;
    bool ok_fail = false;
    if (ok_job2 && n >= 2) {
        usleep(1500000);
        pthread_mutex_lock(&sh->mu);
        int64_t world_round = sh->forming_round;
        pthread_mutex_unlock(&sh->mu);
        atomic_store(&sh->in_world, 0);
        atomic_store(&sh->want_round, world_round + 1);
        double tk = mono_s();
        atomic_store(&sh->kill[0], 0);
        ok_fail = wait_until(sh, all_in_world, n - 1, 300);
        pthread_mutex_lock(&sh->mu);
        t_detect = sh->t_forming_first - tk;
        t_reform = sh->t_world_last - sh->t_forming_first;
        t_from_kill = sh->t_world_last - tk;
        pthread_mutex_unlock(&sh->mu);
        closed_copy(sh, closed2, sizeof(closed2));
    }
    ok = ok && ok_rdzv && ok_stop && ok_job2 && ok_fail;
    printf("{\"bench\":\"rdzv\",\"nodes\":%d,\"ok\":%s,\"register_s\":%.3f,\"rendezvous_s\":%.3f,"
           "\"closed\":\"%s\",\"steady_req_s\":%.0f,\"fail_detect_s\":%.3f,\"reform_s\":%.3f,"
           "\"reform_from_kill_s\":%.3f,\"reform_closed\":\"%s\",\"dead_after_s\":%.0f,"
           "\"coord_cpu_register_s\":%.3f,\"coord_cpu_rendezvous_s\":%.3f,"
           "\"coord_cpu_steady\":%.3f,\"load1\":%.1f,\"goal_s\":5,\"goal_req_s\":20000}\n",
           n, ok ? "true" : "false", t_register, t_rdzv, closed1, steady, t_detect, t_reform,
           t_from_kill, closed2, DEAD_AFTER_S, cpu_register, cpu_rdzv, steady_cpu, load[0]);
    if (!ok)
        fprintf(stderr,
                "bench_rdzv: %d nodes: registered %d, stop %s, job 2 %s, failure %s (in world "
                "%d)\n",
                n, atomic_load(&sh->acked), ok_stop ? "ok" : "FAILED", ok_job2 ? "ok" : "FAILED",
                ok_fail ? "ok" : "FAILED", atomic_load(&sh->in_world));
    fflush(stdout);

    atomic_store(&sh->stop, 1);
    for (int l = 0; l < SIM_PROCS; l++)
        waitpid(kids[l], NULL, 0);
    coord_command(&co, CMD_CLOSE);
    pthread_join(co.thread, NULL);
    uv_loop_close(&co.loop);
    pthread_mutex_destroy(&co.mu);
    pthread_mutex_destroy(&sh->mu);
    munmap(sh, sizeof(*sh));
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    struct rlimit rl;
    /* As gptd: a peer that hung up is an error return, not a signal. */
    signal(SIGPIPE, SIG_IGN);
    /* The coordinator holds a descriptor per node; each sim process one
     * per node of its share. */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            (void)setrlimit(RLIMIT_NOFILE, &rl);
        }
        getrlimit(RLIMIT_NOFILE, &rl);
        fprintf(stderr, "bench_rdzv: file descriptor limit %llu (room for about %llu nodes)\n",
                (unsigned long long)rl.rlim_cur, (unsigned long long)(rl.rlim_cur - 64));
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
