/*
 * Unit tests of daemon/store_kv, the workers' abortable gpt_kv over the
 * rendezvous store, against a real store server on a loop in a thread:
 * set/get, a get that waits for a later set, time-outs and size limits, a
 * refused secret that fails at once, and an abort from another thread that
 * ends a waiting get and every later call; the same over a borrowed client
 * (store_kv_over, as `gptd run --rdzv` uses it), which the kv never frees.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "monotime.h"
#include "store_client.h"
#include "store_kv.h"
#include "store_server.h"
#include "store_harness.h"

static const char secret[] = STORE_HARNESS_SECRET;

static void test_set_get(void **state)
{
    (void)state;
    struct harness *h = harness_start(NULL);
    struct store_kv *k = store_kv_new("127.0.0.1", h->port, secret, sizeof(secret) - 1, NULL);
    assert_non_null(k);
    struct gpt_kv *kv = store_kv_gpt(k);
    assert_int_equal(kv->set(kv->ctx, "w/0", "addr-0", 6), 0);
    char buf[16];
    size_t n = 0;
    assert_int_equal(kv->get(kv->ctx, "w/0", buf, sizeof(buf), &n, 5000), 0);
    assert_int_equal(n, 6);
    assert_memory_equal(buf, "addr-0", 6);
    /* A value larger than the caller's buffer is refused, not cut. */
    assert_int_equal(kv->get(kv->ctx, "w/0", buf, 3, &n, 5000), -EMSGSIZE);
    /* A key nobody sets: the get gives up at its time-out. */
    double t0 = monotime_s();
    assert_int_equal(kv->get(kv->ctx, "w/missing", buf, sizeof(buf), &n, 100), -ETIMEDOUT);
    assert_true(monotime_s() - t0 >= 0.09);
    store_kv_free(k);
    harness_stop(h);
}

struct setter {
    struct gpt_kv *kv;
    int delay_ms;
};

static void *setter_run(void *arg)
{
    struct setter *s = arg;
    monotime_sleep_ms(s->delay_ms);
    s->kv->set(s->kv->ctx, "w/late", "x", 1);
    return NULL;
}

static void test_get_waits(void **state)
{
    (void)state;
    struct harness *h = harness_start(NULL);
    struct store_kv *k = store_kv_new("127.0.0.1", h->port, secret, sizeof(secret) - 1, NULL);
    struct gpt_kv *kv = store_kv_gpt(k);
    struct setter s = {kv, 100};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, setter_run, &s), 0);
    char buf[4];
    size_t n = 0;
    assert_int_equal(kv->get(kv->ctx, "w/late", buf, sizeof(buf), &n, 5000), 0);
    assert_int_equal(n, 1);
    pthread_join(t, NULL);
    store_kv_free(k);
    harness_stop(h);
}

static void test_wrong_secret(void **state)
{
    (void)state;
    struct harness *h = harness_start(NULL);
    struct store_kv *k =
        store_kv_new("127.0.0.1", h->port, "another secret of 32 bytes.....", 31, NULL);
    struct gpt_kv *kv = store_kv_gpt(k);
    double t0 = monotime_s();
    assert_int_equal(kv->set(kv->ctx, "w/0", "x", 1), -GPT_E_AUTH);
    assert_true(monotime_s() - t0 < 5.0); /* no retries after a refusal */
    store_kv_free(k);
    harness_stop(h);
}

struct getter {
    struct gpt_kv *kv;
    int rc;
    double took_s;
};

static void *getter_run(void *arg)
{
    struct getter *g = arg;
    char buf[4];
    size_t n;
    double t0 = monotime_s();
    g->rc = g->kv->get(g->kv->ctx, "w/never", buf, sizeof(buf), &n, 20000);
    g->took_s = monotime_s() - t0;
    return NULL;
}

static void test_abort(void **state)
{
    (void)state;
    struct harness *h = harness_start(NULL);
    struct store_kv *k = store_kv_new("127.0.0.1", h->port, secret, sizeof(secret) - 1, NULL);
    struct gpt_kv *kv = store_kv_gpt(k);
    struct getter g = {kv, 0, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, getter_run, &g), 0);
    monotime_sleep_ms(200);
    store_kv_abort(k);
    pthread_join(t, NULL);
    assert_int_equal(g.rc, -ECANCELED);
    assert_true(g.took_s < 5.0);
    /* Every later call fails too. */
    assert_int_equal(kv->set(kv->ctx, "w/0", "x", 1), -ECANCELED);
    store_kv_free(k);
    store_kv_free(NULL);
    harness_stop(h);
}

/* A kv over a client the caller connected: two kvs over one client share
 * it (values set through one are read through the other), an abort ends a
 * waiting get at once, and freeing the kv leaves the client to the caller. */
static void test_over_client(void **state)
{
    (void)state;
    struct harness *h = harness_start(NULL);
    struct store_client_opts co = {.host = "127.0.0.1",
                                   .port = h->port,
                                   .secret = secret,
                                   .secret_len = sizeof(secret) - 1,
                                   .timeout_ms = 5000};
    struct store_client *c = NULL;
    struct gpt_err err;
    assert_int_equal(store_client_connect(&co, &c, &err), 0);
    struct store_kv *k = store_kv_over(c);
    struct store_kv *k2 = store_kv_over(c);
    assert_non_null(k);
    assert_non_null(k2);
    struct gpt_kv *kv = store_kv_gpt(k), *kv2 = store_kv_gpt(k2);
    char buf[16];
    size_t n = 0;
    assert_int_equal(kv->set(kv->ctx, "o/0", "10.0.0.2:9", 10), 0);
    assert_int_equal(kv2->get(kv2->ctx, "o/0", buf, sizeof(buf), &n, 1000), 0);
    assert_int_equal(n, 10);
    assert_memory_equal(buf, "10.0.0.2:9", 10);
    assert_int_equal(kv2->get(kv2->ctx, "o/0", buf, 4, &n, 1000), -EMSGSIZE);
    store_kv_free(k2); /* the client stays usable */
    void *val = NULL;
    size_t len = 0;
    assert_int_equal(store_client_get(c, "o/0", &val, &len, &err), 0);
    assert_int_equal(len, 10);
    free(val);

    struct getter g = {kv, 0, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, getter_run, &g), 0);
    monotime_sleep_ms(200);
    store_kv_abort(k);
    pthread_join(t, NULL);
    assert_int_equal(g.rc, -ECANCELED);
    assert_true(g.took_s < 5.0);
    assert_int_equal(kv->set(kv->ctx, "o/1", "x", 1), -ECANCELED);
    store_kv_free(k);
    store_client_free(c); /* the caller's, not the kv's: no double free */
    harness_stop(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_get),      cmocka_unit_test(test_get_waits),
        cmocka_unit_test(test_wrong_secret), cmocka_unit_test(test_abort),
        cmocka_unit_test(test_over_client),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
