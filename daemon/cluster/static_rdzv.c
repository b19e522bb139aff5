/*
 * static_rdzv: torchrun-style static rendezvous for `gptd run --world N
 * --rank R --rdzv HOST:PORT`. The process holding rank 0 serves the store
 * on its own libuv loop thread; every process (rank 0 included) connects a
 * blocking store client, retrying until the store is up, and hands the
 * workers the daemon's one kv adapter over it (store_kv_over, store_kv.c:
 * shared by the worker threads under its mutex, a get polls instead of
 * holding it through a WAIT).
 */
#include "static_rdzv.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include <uv.h>

#include "hostport.h"
#include "monotime.h"
#include "store_client.h"
#include "store_kv.h"
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
    struct store_kv *kv; /* over client */
};

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
    if ((rc = hostport_parse(hostport, 1, "--rdzv", host, sizeof(host), &port, err)) < 0)
        return rc;
    struct static_rdzv *r = calloc(1, sizeof(*r));
    if (!r)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    if (host_store && (rc = start_store(r, host, port, secret, secret_len, err)) < 0)
        goto fail;

    /* The store host may start after us: retry with backoff. */
    struct store_client_opts co = {.host = host,
                                   .port = port,
                                   .secret = secret,
                                   .secret_len = secret_len,
                                   .timeout_ms = 10000};
    double deadline = monotime_s() + timeout_ms / 1e3;
    int backoff_ms = 50;
    for (;;) {
        rc = store_client_connect(&co, &r->client, err);
        if (rc == 0)
            break;
        if (rc == -GPT_E_AUTH || monotime_s() + backoff_ms / 1e3 > deadline)
            goto fail;
        monotime_sleep_ms(backoff_ms);
        backoff_ms = backoff_ms < 1000 ? backoff_ms * 2 : 1000;
    }
    if (!(r->kv = store_kv_over(r->client))) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        goto fail;
    }
    *ret = r;
    return 0;
fail:
    static_rdzv_close(r);
    return rc;
}

const struct gpt_kv *static_rdzv_kv(struct static_rdzv *r)
{
    return store_kv_gpt(r->kv);
}

void static_rdzv_close(struct static_rdzv *r)
{
    if (!r)
        return;
    store_kv_free(r->kv);
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
    free(r);
}
