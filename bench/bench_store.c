/*
 * bench_store: throughput and latency of the rendezvous store over loopback.
 * A store_server runs on its own loop thread (port 0); clients issue a
 * SET / GET / ADD rotation on distinct keys, one request outstanding per
 * client (closed loop), and we report ops/s and p50/p99 request latency:
 *   - 1 and 64 clients: blocking store_client, one thread each;
 *   - 1024 clients: asynchronous clients multiplexed on one loop thread.
 * One JSON line per configuration on stdout.
 *
 * Usage: bench_store [seconds_per_config]   (default 2)
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <uv.h>

#include "log.h"
#include "store_client.h"
#include "store_server.h"

#define MAX_SAMPLES_PER_CLIENT 200000
/* Every store has a secret (and every frame a MAC under keys derived from
 * it): the benchmark measures that cost. */
#define BENCH_SECRET "bench-store-secret-0123456789abcdef"

struct server_thread {
    uv_loop_t loop;
    uv_async_t stop;
    struct store_server *srv;
    pthread_t thread;
    int port;
};

static void server_stop_cb(uv_async_t *a)
{
    struct server_thread *st = a->data;

    store_server_close(st->srv, NULL, NULL);
    uv_close((uv_handle_t *)&st->stop, NULL);
}

static void *server_run(void *arg)
{
    struct server_thread *st = arg;

    uv_run(&st->loop, UV_RUN_DEFAULT);
    return NULL;
}

static int server_start(struct server_thread *st)
{
    struct store_server_opts o = {.max_clients = 4096,
                                  .max_keys = 1u << 20,
                                  .secret = BENCH_SECRET,
                                  .secret_len = sizeof(BENCH_SECRET) - 1};
    struct gpt_err err;
    int rc;

    uv_loop_init(&st->loop);
    uv_async_init(&st->loop, &st->stop, server_stop_cb);
    st->stop.data = st;
    if ((rc = store_server_new(&st->loop, &o, &st->srv, &err)) < 0 ||
        (rc = store_server_start(st->srv, "127.0.0.1", 0, &st->port, &err)) < 0) {
        fprintf(stderr, "bench_store: %s\n", err.msg);
        return rc;
    }
    return pthread_create(&st->thread, NULL, server_run, st) == 0 ? 0 : -EAGAIN;
}

static void server_stop(struct server_thread *st)
{
    uv_async_send(&st->stop);
    pthread_join(st->thread, NULL);
    uv_loop_close(&st->loop);
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* Latency samples of all clients of one configuration. */
struct samples {
    pthread_mutex_t lock;
    uint64_t *ns;
    size_t n, cap;
};

static void samples_add(struct samples *s, const uint64_t *ns, size_t n)
{
    pthread_mutex_lock(&s->lock);
    if (s->n + n > s->cap) {
        size_t cap = (s->n + n) * 2;
        uint64_t *nn = realloc(s->ns, cap * sizeof(*nn));
        if (!nn) {
            pthread_mutex_unlock(&s->lock);
            return;
        }
        s->ns = nn;
        s->cap = cap;
    }
    memcpy(s->ns + s->n, ns, n * sizeof(*ns));
    s->n += n;
    pthread_mutex_unlock(&s->lock);
}

static void report(int clients, const char *mode, struct samples *s, double seconds, int errors)
{
    double p50 = 0, p99 = 0;

    if (s->n) {
        qsort(s->ns, s->n, sizeof(*s->ns), cmp_u64);
        p50 = (double)s->ns[s->n / 2] / 1000.0;
        p99 = (double)s->ns[(size_t)((double)s->n * 0.99)] / 1000.0;
    }
    printf("{\"bench\":\"store\",\"clients\":%d,\"client\":\"%s\",\"mix\":\"set/get/add\","
           "\"ops\":%zu,\"seconds\":%.3f,\"ops_per_s\":%.0f,\"p50_us\":%.1f,\"p99_us\":%.1f,"
           "\"errors\":%d}\n",
           clients, mode, s->n, seconds, (double)s->n / seconds, p50, p99, errors);
    fflush(stdout);
}

/* ---- blocking clients, one thread each ---- */

struct blocking_arg {
    int port;
    int id;
    uint64_t end_ns;
    struct samples *s;
    int errors;
};

static void *blocking_worker(void *arg)
{
    struct blocking_arg *b = arg;
    struct store_client_opts o = {.host = "127.0.0.1",
                                  .port = b->port,
                                  .secret = BENCH_SECRET,
                                  .secret_len = sizeof(BENCH_SECRET) - 1,
                                  .timeout_ms = 30000};
    uint64_t *lat = malloc(MAX_SAMPLES_PER_CLIENT * sizeof(*lat));
    struct store_client *c = NULL;
    char key[32], ctr[32];
    size_t n = 0;

    if (!lat || store_client_connect(&o, &c, NULL) < 0) {
        b->errors++;
        free(lat);
        return NULL;
    }
    snprintf(key, sizeof(key), "bench/%d", b->id);
    snprintf(ctr, sizeof(ctr), "ctr/%d", b->id);
    while (n < MAX_SAMPLES_PER_CLIENT) {
        uint64_t t0 = now_ns();
        void *v = NULL;
        size_t len;
        int rc;

        if (t0 >= b->end_ns)
            break;
        switch (n % 3) {
        case 0:
            rc = store_client_set(c, key, "0123456789abcdef", 16, NULL);
            break;
        case 1:
            rc = store_client_get(c, key, &v, &len, NULL);
            free(v);
            break;
        default:
            rc = store_client_add(c, ctr, 1, NULL, NULL);
            break;
        }
        if (rc < 0) {
            b->errors++;
            break;
        }
        lat[n++] = now_ns() - t0;
    }
    samples_add(b->s, lat, n);
    free(lat);
    store_client_free(c);
    return NULL;
}

static void run_blocking(int port, int clients, double seconds)
{
    struct blocking_arg *args = calloc((size_t)clients, sizeof(*args));
    pthread_t *threads = calloc((size_t)clients, sizeof(*threads));
    struct samples s = {.lock = PTHREAD_MUTEX_INITIALIZER};
    uint64_t t0 = now_ns(), end = t0 + (uint64_t)(seconds * 1e9);
    int errors = 0, i;

    for (i = 0; i < clients; i++) {
        args[i] = (struct blocking_arg){.port = port, .id = i, .end_ns = end, .s = &s};
        pthread_create(&threads[i], NULL, blocking_worker, &args[i]);
    }
    for (i = 0; i < clients; i++) {
        pthread_join(threads[i], NULL);
        errors += args[i].errors;
    }
    report(clients, "blocking", &s, (double)(now_ns() - t0) / 1e9, errors);
    free(s.ns);
    free(args);
    free(threads);
}

/* ---- asynchronous clients on one loop ---- */

struct async_bench;

struct async_one {
    struct async_bench *b;
    struct store_client_async *a;
    int id;
    uint64_t n;
    uint64_t t0;
    char key[32], ctr[32];
};

struct async_bench {
    uv_loop_t loop;
    struct async_one *clients;
    int nclients;
    int connected;
    int done;
    int closed;
    int errors;
    bool running;
    uint64_t end_ns;
    uint64_t *lat;
    size_t nlat, cap;
};

static void async_issue(struct async_one *o);

static void async_reply(void *arg, const struct store_reply *r)
{
    struct async_one *o = arg;
    struct async_bench *b = o->b;
    uint64_t t = now_ns();

    if (r->status < 0) {
        b->errors++;
        b->done++;
        return;
    }
    if (b->nlat < b->cap)
        b->lat[b->nlat++] = t - o->t0;
    o->n++;
    if (t >= b->end_ns) {
        b->done++;
        return;
    }
    async_issue(o);
}

static void async_issue(struct async_one *o)
{
    int rc;

    o->t0 = now_ns();
    switch (o->n % 3) {
    case 0:
        rc = store_client_async_set(o->a, o->key, "0123456789abcdef", 16, async_reply, o);
        break;
    case 1:
        rc = store_client_async_get(o->a, o->key, async_reply, o);
        break;
    default:
        rc = store_client_async_add(o->a, o->ctr, 1, async_reply, o);
        break;
    }
    if (rc < 0) {
        o->b->errors++;
        o->b->done++;
    }
}

static void async_connected(void *arg, int status)
{
    struct async_one *o = arg;

    if (status < 0)
        o->b->errors++;
    o->b->connected++;
}

static void async_closed(void *arg)
{
    ((struct async_bench *)arg)->closed++;
}

static void run_async(int port, int clients, double seconds)
{
    struct async_bench b = {.nclients = clients};
    struct samples s = {.lock = PTHREAD_MUTEX_INITIALIZER};
    struct store_client_async_opts opts = {.host = "127.0.0.1",
                                           .port = port,
                                           .secret = BENCH_SECRET,
                                           .secret_len = sizeof(BENCH_SECRET) - 1};
    uint64_t t0;
    int i;

    uv_loop_init(&b.loop);
    b.clients = calloc((size_t)clients, sizeof(*b.clients));
    b.cap = 20u << 20;
    b.lat = malloc(b.cap * sizeof(*b.lat));
    for (i = 0; i < clients; i++) {
        struct async_one *o = &b.clients[i];
        o->b = &b;
        o->id = i;
        snprintf(o->key, sizeof(o->key), "abench/%d", i);
        snprintf(o->ctr, sizeof(o->ctr), "actr/%d", i);
        if (store_client_async_new(&b.loop, &opts, async_connected, o, &o->a, NULL) < 0) {
            b.errors++;
            b.connected++;
        }
    }
    /* Connect everyone first so the handshakes are not measured. */
    while (b.connected < clients)
        uv_run(&b.loop, UV_RUN_ONCE);
    t0 = now_ns();
    b.end_ns = t0 + (uint64_t)(seconds * 1e9);
    for (i = 0; i < clients; i++) {
        if (b.clients[i].a)
            async_issue(&b.clients[i]);
        else
            b.done++;
    }
    while (b.done < clients)
        uv_run(&b.loop, UV_RUN_ONCE);
    seconds = (double)(now_ns() - t0) / 1e9;
    for (i = 0; i < clients; i++)
        if (b.clients[i].a)
            store_client_async_close(b.clients[i].a, async_closed, &b);
        else
            b.closed++;
    while (b.closed < clients)
        uv_run(&b.loop, UV_RUN_ONCE);
    uv_loop_close(&b.loop);
    s.ns = b.lat;
    s.n = b.nlat;
    report(clients, "async-1-loop", &s, seconds, b.errors);
    free(b.lat);
    free(b.clients);
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 2.0;
    struct server_thread st;
    struct rlimit rl;

    if (seconds <= 0)
        seconds = 2.0;
    log_set_level(LOG_LVL_WARN);
    /* 1024 clients and their server ends need ~2100 descriptors. */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 4096) {
        rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (server_start(&st) < 0)
        return 1;
    run_blocking(st.port, 1, seconds);
    run_blocking(st.port, 64, seconds);
    run_async(st.port, 64, seconds);
    run_async(st.port, 1024, seconds);
    server_stop(&st);
    return 0;
}
