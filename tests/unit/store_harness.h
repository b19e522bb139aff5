/*
 * store_harness: a store server on its own libuv loop in a thread, for the
 * store's unit tests (test_store, test_store_auth, test_store_kv). Header
 * only: each test includes it once, after cmocka.h.
 */
#ifndef GPTD_TEST_STORE_HARNESS_H
#define GPTD_TEST_STORE_HARNESS_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "store_server.h"

/* The secret of every harness whose options name none (a store always has
 * one). */
#define STORE_HARNESS_SECRET "test-store-secret-0123456789"

struct harness {
    uv_loop_t loop;
    uv_async_t stop;
    struct store_server *srv;
    pthread_t thread;
    int port;
};

static void harness_stop_cb(uv_async_t *a)
{
    struct harness *h = a->data;

    store_server_close(h->srv, NULL, NULL);
    uv_close((uv_handle_t *)&h->stop, NULL);
}

static void *harness_run(void *arg)
{
    uv_run(&((struct harness *)arg)->loop, UV_RUN_DEFAULT);
    return NULL;
}

/* Starts a server on 127.0.0.1 at a port the kernel picks (h->port) with
 * `in` (NULL: defaults), STORE_HARNESS_SECRET when `in` names no secret. */
static struct harness *harness_start(const struct store_server_opts *in)
{
    struct harness *h = calloc(1, sizeof(*h));
    struct store_server_opts o = in ? *in : (struct store_server_opts){0};
    struct gpt_err err;

    if (!o.secret) {
        o.secret = STORE_HARNESS_SECRET;
        o.secret_len = strlen(STORE_HARNESS_SECRET);
    }
    assert_non_null(h);
    assert_int_equal(uv_loop_init(&h->loop), 0);
    assert_int_equal(uv_async_init(&h->loop, &h->stop, harness_stop_cb), 0);
    h->stop.data = h;
    /* The loop is not running yet, so this thread may act as its thread. */
    assert_int_equal(store_server_new(&h->loop, &o, &h->srv, &err), 0);
    assert_int_equal(store_server_start(h->srv, "127.0.0.1", 0, &h->port, &err), 0);
    assert_true(h->port > 0);
    assert_int_equal(pthread_create(&h->thread, NULL, harness_run, h), 0);
    return h;
}

static void harness_stop(struct harness *h)
{
    uv_async_send(&h->stop);
    pthread_join(h->thread, NULL);
    /* Every handle was closed and freed: the loop closes cleanly. */
    assert_int_equal(uv_loop_close(&h->loop), 0);
    free(h);
}

#endif
