/*
 * static_rdzv: torchrun-style static rendezvous for `gptd run --world N
 * --rank R --rdzv HOST:PORT`. The process holding rank 0 serves the store
 * on its own libuv loop thread; every process (rank 0 included) connects a
 * blocking store client, retrying until the store is up, and hands the
 * workers a struct gpt_kv over it.
 *
 * The kv may be called from several worker threads at once: calls share
 * one client under a mutex, and a get polls (CHECK, then GET) instead of
 * holding the mutex through a blocking WAIT, so one waiting rank never
 * starves another's set.
 */
#include "static_rdzv.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uv.h>

#include "store_client.h"
#include "store_server.h"

struct static_rdzv {
    /* store host (rank 0 only) */
    uv_loop_t loop;
    bool loop_ready;
    uv_async_t stop_async;
    pthread_t thread;
    bool thread_started;
    struct store_server *server;
    /* client side */
    struct store_client *client;
    pthread_mutex_t mu;
    struct gpt_kv kv;
};

static double rdzv_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void rdzv_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int parse_hostport(const char *s, char *host, size_t cap, int *ret_port, struct gpt_err *err)
{
    const char *colon = strrchr(s, ':');
    char *end;
    if (!colon || colon == s || (size_t)(colon - s) >= cap)
        return gpt_err_set(err, -EINVAL, NULL, "--rdzv: expected HOST:PORT, got '%s'", s);
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 1 || port > 65535)
        return gpt_err_set(err, -EINVAL, NULL, "--rdzv: bad port in '%s'", s);
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    /* [::1]:port */
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = '\0';
    }
    *ret_port = (int)port;
    return 0;
}

/* ---- kv over the shared client ---- */

static int rdzv_kv_set(void *ctx, const char *key, const void *val, size_t len)
{
    struct static_rdzv *r = ctx;
    pthread_mutex_lock(&r->mu);
    int rc = store_client_set(r->client, key, val, len, NULL);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static int rdzv_kv_get(void *ctx, const char *key, void *buf, size_t cap, size_t *ret_len,
                       int timeout_ms)
{
    struct static_rdzv *r = ctx;
    double deadline = rdzv_now_s() + timeout_ms / 1e3;
    const char *keys[1] = {key};
    for (;;) {
        int all = 0, rc;
        void *val = NULL;
        size_t len = 0;
        pthread_mutex_lock(&r->mu);
        rc = store_client_check(r->client, keys, 1, &all, NULL);
        if (rc == 0 && all)
            rc = store_client_get(r->client, key, &val, &len, NULL);
        pthread_mutex_unlock(&r->mu);
        if (rc < 0)
            return rc;
        if (all) {
            size_t n = len < cap ? len : cap;
            memcpy(buf, val, n);
            *ret_len = n;
            free(val);
            return 0;
        }
        if (rdzv_now_s() > deadline)
            return -ETIMEDOUT;
        rdzv_sleep_ms(10);
    }
}

/* ---- the store host's loop thread ---- */

static void rdzv_stop_cb(uv_async_t *h)
{
    struct static_rdzv *r = h->data;
    store_server_close(r->server, NULL, NULL);
    r->server = NULL;
    uv_close((uv_handle_t *)&r->stop_async, NULL);
}

static void *rdzv_loop_main(void *arg)
{
    struct static_rdzv *r = arg;
    uv_run(&r->loop, UV_RUN_DEFAULT);
    return NULL;
}

static int start_store(struct static_rdzv *r, const char *host, int port, const void *secret,
                       size_t secret_len, struct gpt_err *err)
{
    int rc = uv_loop_init(&r->loop);
    if (rc < 0)
        return gpt_err_set(err, rc, NULL, "uv_loop_init: %s", uv_strerror(rc));
    r->loop_ready = true;
    struct store_server_opts so = {.secret = secret, .secret_len = secret_len};
    if ((rc = store_server_new(&r->loop, &so, &r->server, err)) < 0)
        return rc;
    int bound;
    if ((rc = store_server_start(r->server, host, port, &bound, err)) < 0)
        return rc;
    uv_async_init(&r->loop, &r->stop_async, rdzv_stop_cb);
    r->stop_async.data = r;
    if (pthread_create(&r->thread, NULL, rdzv_loop_main, r) != 0)
        return gpt_err_set(err, -EAGAIN, NULL, "cannot start the store thread");
    r->thread_started = true;
    return 0;
}

int static_rdzv_open(const char *hostport, int host_store, const void *secret, size_t secret_len,
                     int timeout_ms, struct static_rdzv **ret, struct gpt_err *err)
{
    char host[256];
    int port = 0, rc;
    if ((rc = parse_hostport(hostport, host, sizeof(host), &port, err)) < 0)
        return rc;
    struct static_rdzv *r = calloc(1, sizeof(*r));
    if (!r)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    pthread_mutex_init(&r->mu, NULL);
    if (host_store && (rc = start_store(r, host, port, secret, secret_len, err)) < 0)
        goto fail;

    /* The store host may start after us: retry with backoff. */
    struct store_client_opts co = {.host = host,
                                   .port = port,
                                   .secret = secret,
                                   .secret_len = secret_len,
                                   .timeout_ms = 10000};
    double deadline = rdzv_now_s() + timeout_ms / 1e3;
    int backoff_ms = 50;
    for (;;) {
        rc = store_client_connect(&co, &r->client, err);
        if (rc == 0)
            break;
        if (rc == -GPT_E_AUTH || rdzv_now_s() + backoff_ms / 1e3 > deadline)
            goto fail;
        rdzv_sleep_ms(backoff_ms);
        backoff_ms = backoff_ms < 1000 ? backoff_ms * 2 : 1000;
    }
    r->kv.ctx = r;
    r->kv.set = rdzv_kv_set;
    r->kv.get = rdzv_kv_get;
    *ret = r;
    return 0;
fail:
    static_rdzv_close(r);
    return rc;
}

const struct gpt_kv *static_rdzv_kv(struct static_rdzv *r)
{
    return &r->kv;
}

void static_rdzv_close(struct static_rdzv *r)
{
    if (!r)
        return;
    store_client_free(r->client);
    if (r->thread_started) {
        uv_async_send(&r->stop_async);
        pthread_join(r->thread, NULL);
    } else if (r->server) {
        store_server_close(r->server, NULL, NULL);
        uv_run(&r->loop, UV_RUN_DEFAULT);
    }
    if (r->loop_ready) {
        uv_run(&r->loop, UV_RUN_DEFAULT);
        (void)uv_loop_close(&r->loop);
    }
    pthread_mutex_destroy(&r->mu);
    free(r);
}
