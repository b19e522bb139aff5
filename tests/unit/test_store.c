/*
 * test_store: the rendezvous store server and its clients over loopback.
 * Each test runs a store_server on its own libuv loop in a thread (port 0 on
 * 127.0.0.1) and talks to it with the blocking client from test threads, the
 * asynchronous client on a second loop, or raw sockets. Every wait is bounded
 * (client timeouts, deadlines when polling the server's counters, alarm()).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "store.h"
#include "store_client.h"
#include "store_kv.h"
#include "store_server.h"
#include "store_harness.h"

#define TIMEOUT_MS 10000
/* The secret of every harness that names none (a store always has one). */
#define SECRET STORE_HARNESS_SECRET

static struct store_server_stats harness_stats(struct harness *h)
{
    struct store_server_stats st;

    store_server_stats(h->srv, &st);
    return st;
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Polls the server's pending-wait count until it equals `want` (bounded). */
static void await_waits(struct harness *h, size_t want)
{
    int64_t deadline = now_ms() + TIMEOUT_MS;

    while (harness_stats(h).waits != want && now_ms() < deadline)
        usleep(2000);
    assert_int_equal(harness_stats(h).waits, want);
}

static struct store_client *client_connect(struct harness *h, const char *secret)
{
    struct store_client_opts o = {.host = "127.0.0.1",
                                  .port = h->port,
                                  .secret = secret ? secret : SECRET,
                                  .secret_len = strlen(secret ? secret : SECRET),
                                  .timeout_ms = TIMEOUT_MS};
    struct store_client *c = NULL;
    struct gpt_err err;
    int rc = store_client_connect(&o, &c, &err);

    if (rc < 0)
        fail_msg("connect: %s", err.msg);
    return c;
}

/* ---- semantics ---- */

static void test_ops(void **state)
{
    struct harness *h = harness_start(NULL);
    struct store_client *c = client_connect(h, NULL);
    const char *ab[] = {"a", "b"};
    struct gpt_err err;
    void *v = NULL;
    size_t len = 0;
    int64_t n = 0;
    int flag = -1;

    (void)state;
    /* SET / GET */
    assert_int_equal(store_client_set(c, "a", "hello", 5, &err), 0);
    assert_int_equal(store_client_get(c, "a", &v, &len, &err), 0);
    assert_int_equal(len, 5);
    assert_string_equal(v, "hello");
    free(v);
    assert_int_equal(store_client_set(c, "a", "", 0, &err), 0); /* empty values are values */
    assert_int_equal(store_client_get(c, "a", &v, &len, &err), 0);
    assert_int_equal(len, 0);
    free(v);
    assert_int_equal(store_client_get(c, "missing", &v, &len, &err), -ENOENT);
    /* ADD */
    assert_int_equal(store_client_add(c, "ctr", 5, &n, &err), 0);
    assert_int_equal(n, 5);
    assert_int_equal(store_client_add(c, "ctr", -7, &n, &err), 0);
    assert_int_equal(n, -2);
    assert_int_equal(store_client_get(c, "ctr", &v, &len, &err), 0);
    assert_string_equal(v, "-2");
    free(v);
    assert_int_equal(store_client_set(c, "text", "x1", 2, &err), 0);
    assert_int_equal(store_client_add(c, "text", 1, &n, &err), -EINVAL);
    assert_int_equal(store_client_set(c, "big", "9223372036854775807", 19, &err), 0);
    assert_int_equal(store_client_add(c, "big", 1, &n, &err), -EINVAL);
    /* COMPARE_SET */
    assert_int_equal(store_client_compare_set(c, "cas", "x", 1, "y", 1, &v, &len, &err), -ENOENT);
    assert_int_equal(store_client_compare_set(c, "cas", "", 0, "one", 3, &v, &len, &err), 0);
    assert_string_equal(v, "one");
    free(v);
    assert_int_equal(store_client_compare_set(c, "cas", "nope", 4, "two", 3, &v, &len, &err), 0);
    assert_string_equal(v, "one");
    free(v);
    assert_int_equal(store_client_compare_set(c, "cas", "one", 3, "two", 3, &v, &len, &err), 0);
    assert_string_equal(v, "two");
    free(v);
    /* CHECK / WAIT */
    assert_int_equal(store_client_check(c, ab, 2, &flag, &err), 0);
    assert_int_equal(flag, 0);
    assert_int_equal(store_client_wait(c, ab, 1, 1000, &err), 0);
    assert_int_equal(store_client_wait(c, ab, 2, 50, &err), -ETIMEDOUT);
    assert_int_equal(harness_stats(h).waits, 0);
    assert_int_equal(store_client_set(c, "b", "", 0, &err), 0);
    assert_int_equal(store_client_check(c, ab, 2, &flag, &err), 0);
    assert_int_equal(flag, 1);
    assert_int_equal(store_client_wait(c, ab, 2, 1000, &err), 0);
    /* NUM_KEYS / DELETE */
    assert_int_equal(store_client_num_keys(c, &n, &err), 0);
    assert_int_equal(n, 6); /* a ctr text big cas b */
    assert_int_equal(store_client_delete(c, "b", &flag, &err), 0);
    assert_int_equal(flag, 1);
    assert_int_equal(store_client_delete(c, "b", &flag, &err), 0);
    assert_int_equal(flag, 0);
    assert_int_equal(store_client_num_keys(c, &n, &err), 0);
    assert_int_equal(n, 5);
    /* APPEND */
    assert_int_equal(store_client_append(c, "log", "ab", 2, &err), 0);
    assert_int_equal(store_client_append(c, "log", "cd", 2, &err), 0);
    assert_int_equal(store_client_get(c, "log", &v, &len, &err), 0);
    assert_int_equal(len, 4);
    assert_string_equal(v, "abcd");
    free(v);
    /* Bad keys are refused by the client before anything is sent. */
    assert_int_equal(store_client_set(c, "", "x", 1, &err), -EINVAL);
    assert_int_equal(store_client_get(c, "still-works", &v, &len, &err), -ENOENT);
    assert_true(harness_stats(h).requests > 20);
    store_client_free(c);
    harness_stop(h);
}

static void test_limits(void **state)
{
    struct store_server_opts o = {.max_keys = 3, .max_value_bytes = 8};
    struct harness *h = harness_start(&o);
    struct store_client *c = client_connect(h, NULL);
    struct gpt_err err;
    int64_t n;

    (void)state;
    assert_int_equal(store_client_set(c, "k1", "12345678", 8, &err), 0);
    assert_int_equal(store_client_set(c, "k1", "123456789", 9, &err), -GPT_E_LIMIT);
    assert_int_equal(store_client_append(c, "k1", "9", 1, &err), -GPT_E_LIMIT);
    assert_int_equal(store_client_set(c, "k2", "", 0, &err), 0);
    assert_int_equal(store_client_add(c, "k3", 1, &n, &err), 0);
    assert_int_equal(store_client_set(c, "k4", "", 0, &err), -GPT_E_LIMIT);
    assert_int_equal(store_client_add(c, "k4", 1, &n, &err), -GPT_E_LIMIT);
    /* A failed creation leaves nothing behind; the connection still works. */
    assert_int_equal(store_client_num_keys(c, &n, &err), 0);
    assert_int_equal(n, 3);
    store_client_free(c);
    harness_stop(h);
}

/* ---- struct gpt_kv adapter ---- */

struct setter_arg {
    struct harness *h;
    const char *key;
    int delay_ms;
};

static void *setter_thread(void *arg)
{
    struct setter_arg *a = arg;
    struct store_client *c = client_connect(a->h, NULL);

    usleep((useconds_t)a->delay_ms * 1000);
    store_client_set(c, a->key, "10.0.0.1:2345", 13, NULL);
    store_client_free(c);
    return NULL;
}

static void test_kv_adapter(void **state)
{
    struct harness *h = harness_start(NULL);
    struct store_client *c = client_connect(h, NULL);
    struct store_kv *k = store_kv_over(c);
    struct gpt_kv kv = *store_kv_gpt(k);
    struct setter_arg sa = {h, "job/r1/addr", 100};
    char buf[64];
    size_t len = 0;
    pthread_t t;

    (void)state;
    assert_int_equal(kv.set(kv.ctx, "job/r0/addr", "127.0.0.1:1", 11), 0);
    assert_int_equal(kv.get(kv.ctx, "job/r0/addr", buf, sizeof(buf), &len, 1000), 0);
    assert_int_equal(len, 11);
    assert_memory_equal(buf, "127.0.0.1:1", 11);
    /* get waits for a key another thread sets later. */
    pthread_create(&t, NULL, setter_thread, &sa);
    assert_int_equal(kv.get(kv.ctx, "job/r1/addr", buf, sizeof(buf), &len, 5000), 0);
    assert_memory_equal(buf, "10.0.0.1:2345", 13);
    pthread_join(t, NULL);
    assert_int_equal(kv.get(kv.ctx, "job/r1/addr", buf, 4, &len, 1000), -EMSGSIZE);
    assert_int_equal(kv.get(kv.ctx, "job/none", buf, sizeof(buf), &len, 50), -ETIMEDOUT);
    /* The borrowed client outlives the kv and still works after it. */
    store_kv_free(k);
    assert_int_equal(store_client_set(c, "after", "x", 1, NULL), 0);
    store_client_free(c);
    harness_stop(h);
}

/* ---- 64 concurrent clients ---- */

#define N_CLIENTS   64
#define N_ADDS      50
#define N_CAS_INCRS 10

struct worker_arg {
    struct harness *h;
    int id;
    int rc;
};

/* Increments the counter at "cas" by one with a COMPARE_SET loop. Values are
 * "<count>/<writer id>" so that a reply equal to what we proposed proves our
 * swap happened (no other writer proposes the same bytes). */
static int cas_increment(struct store_client *c, int id)
{
    for (int tries = 0; tries < 100000; tries++) {
        char cur[32] = "", next[32];
        void *v = NULL;
        size_t len = 0;
        int rc = store_client_get(c, "cas", &v, &len, NULL);
        if (rc == 0) {
            snprintf(cur, sizeof(cur), "%s", (char *)v);
            free(v);
        } else if (rc != -ENOENT) {
            return rc;
        }
        snprintf(next, sizeof(next), "%ld/%d", atol(cur) + 1, id);
        rc = store_client_compare_set(c, "cas", cur, strlen(cur), next, strlen(next), &v, &len,
                                      NULL);
        if (rc == -ENOENT)
            continue;
        if (rc < 0)
            return rc;
        rc = len == strlen(next) && memcmp(v, next, len) == 0;
        free(v);
        if (rc)
            return 0;
    }
    return -EAGAIN;
}

static char done_names[N_CLIENTS][32];
static const char *done_keys[N_CLIENTS]; /* filled before the threads start */

static void *worker_thread(void *arg)
{
    struct worker_arg *w = arg;
    struct store_client *c = client_connect(w->h, NULL);
    char key[32];
    int64_t n;
    int rc = 0, i;

    /* Everyone waits for the start key first: all 64 WAITs pend together. */
    const char *start[] = {"start"};
    if ((rc = store_client_wait(c, start, 1, TIMEOUT_MS, NULL)) < 0)
        goto out;
    for (i = 0; i < N_ADDS && rc == 0; i++)
        rc = store_client_add(c, "adds", 1, &n, NULL);
    for (i = 0; i < N_CAS_INCRS && rc == 0; i++)
        rc = cas_increment(c, w->id);
    if (rc < 0)
        goto out;
    snprintf(key, sizeof(key), "done/%d", w->id);
    if ((rc = store_client_set(c, key, "1", 1, NULL)) < 0)
        goto out;
    /* A barrier: every client waits for all done keys. */
    rc = store_client_wait(c, done_keys, N_CLIENTS, TIMEOUT_MS, NULL);
out:
    w->rc = rc;
    store_client_free(c);
    return NULL;
}

static void test_concurrent_clients(void **state)
{
    struct harness *h = harness_start(NULL);
    struct worker_arg args[N_CLIENTS];
    pthread_t threads[N_CLIENTS];
    struct store_client *c;
    struct gpt_err err;
    void *v;
    size_t len;
    int64_t n;
    int i;

    (void)state;
    for (i = 0; i < N_CLIENTS; i++) {
        snprintf(done_names[i], sizeof(done_names[i]), "done/%d", i);
        done_keys[i] = done_names[i];
    }
    for (i = 0; i < N_CLIENTS; i++) {
        args[i] = (struct worker_arg){.h = h, .id = i};
        assert_int_equal(pthread_create(&threads[i], NULL, worker_thread, &args[i]), 0);
    }
    await_waits(h, N_CLIENTS);
    c = client_connect(h, NULL);
    assert_int_equal(store_client_set(c, "start", "", 0, &err), 0);
    for (i = 0; i < N_CLIENTS; i++) {
        pthread_join(threads[i], NULL);
        assert_int_equal(args[i].rc, 0);
    }
    assert_int_equal(store_client_add(c, "adds", 0, &n, &err), 0);
    assert_int_equal(n, N_CLIENTS * N_ADDS);
    assert_int_equal(store_client_get(c, "cas", &v, &len, &err), 0);
    assert_int_equal(atol(v), N_CLIENTS * N_CAS_INCRS);
    free(v);
    assert_int_equal(store_client_num_keys(c, &n, &err), 0);
    assert_int_equal(n, N_CLIENTS + 3); /* done/<i>, start, adds, cas */
    store_client_free(c);
    await_waits(h, 0);
    harness_stop(h);
}

/* ---- authentication ---- */

static void test_wrong_secret_dropped(void **state)
{
    struct store_server_opts o = {.secret = "s3cret-s3cret-s3cret", .secret_len = 20};
    struct harness *h = harness_start(&o);
    struct store_client_opts co = {.host = "127.0.0.1",
                                   .port = h->port,
                                   .secret = "wrong-wrong-wrong-wrong",
                                   .secret_len = 23,
                                   .timeout_ms = TIMEOUT_MS};
    struct store_client *c = NULL;
    struct gpt_err err;
    int64_t n;

    (void)state;
    assert_int_equal(store_client_connect(&co, &c, &err), -GPT_E_AUTH);
    assert_null(c);
    assert_true(harness_stats(h).auth_failures >= 1);
    co.secret = NULL; /* no secret at all: refused before connecting */
    co.secret_len = 0;
    assert_int_equal(store_client_connect(&co, &c, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "at least 16 bytes"));
    co.secret = "s3cret-s3cret-s"; /* 15 bytes: the right prefix, still too short */
    co.secret_len = 15;
    assert_int_equal(store_client_connect(&co, &c, &err), -EINVAL);
    assert_null(c);
    c = client_connect(h, "s3cret-s3cret-s3cret");
    assert_int_equal(store_client_num_keys(c, &n, &err), 0);
    assert_int_equal(n, 0);
    store_client_free(c);
    harness_stop(h);
}

static int raw_connect(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* Reads until EOF (or error) within the timeout; returns 1 if the peer
 * closed, 0 if it stayed open. Discards data. */
static int raw_closed_by_peer(int fd, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    char buf[256];

    while (now_ms() < deadline) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) > 0) {
            ssize_t n = recv(fd, buf, sizeof(buf), 0);
            if (n <= 0)
                return 1;
        }
    }
    return 0;
}

static void raw_send(int fd, const struct proto_store_out *o)
{
    assert_int_equal(send(fd, o->data, o->len, MSG_NOSIGNAL), (ssize_t)o->len);
}

static void test_no_handshake_dropped(void **state)
{
    struct harness *h = harness_start(NULL);
    uint8_t nonce[GPT_STORE_NONCE_BYTES] = {1};
    struct proto_store_out o;
    struct store_client *c;
    struct gpt_err err;
    int64_t n;
    int fd;

    (void)state;
    proto_store_out_init(&o);
    /* A command first. */
    fd = raw_connect(h->port);
    assert_int_equal(proto_store_put_key_value(&o, PROTO_STORE_SET, "evil", 4, "1", 1), 0);
    raw_send(fd, &o);
    assert_int_equal(raw_closed_by_peer(fd, TIMEOUT_MS), 1);
    close(fd);
    /* A wrong protocol version. */
    o.len = 0;
    fd = raw_connect(h->port);
    assert_int_equal(proto_store_put_hello(&o, GPT_STORE_PROTO_VERSION + 1, nonce, NULL), 0);
    raw_send(fd, &o);
    assert_int_equal(raw_closed_by_peer(fd, TIMEOUT_MS), 1);
    close(fd);
    /* HELLO, then a command instead of AUTH. */
    o.len = 0;
    fd = raw_connect(h->port);
    assert_int_equal(proto_store_put_hello(&o, GPT_STORE_PROTO_VERSION, nonce, NULL), 0);
    assert_int_equal(proto_store_put_key_value(&o, PROTO_STORE_SET, "evil", 4, "1", 1), 0);
    raw_send(fd, &o);
    assert_int_equal(raw_closed_by_peer(fd, TIMEOUT_MS), 1);
    close(fd);
    /* Garbage. */
    fd = raw_connect(h->port);
    assert_int_equal(send(fd, "GET / HTTP/1.0\r\n\r\n", 18, MSG_NOSIGNAL), 18);
    assert_int_equal(raw_closed_by_peer(fd, TIMEOUT_MS), 1);
    close(fd);
    proto_store_out_done(&o);

    c = client_connect(h, NULL);
    assert_int_equal(store_client_num_keys(c, &n, &err), 0);
    assert_int_equal(n, 0); /* no command of a dropped peer ran */
    assert_int_equal(harness_stats(h).requests, 1);
    assert_true(harness_stats(h).auth_failures >= 4);
    store_client_free(c);
    harness_stop(h);
}

static void test_handshake_timeout(void **state)
{
    struct store_server_opts o = {.handshake_timeout_ms = 100};
    struct harness *h = harness_start(&o);
    int fd = raw_connect(h->port);

    (void)state;
    assert_int_equal(raw_closed_by_peer(fd, TIMEOUT_MS), 1);
    close(fd);
    harness_stop(h);
}

static void test_client_limit(void **state)
{
    struct store_server_opts o = {.max_clients = 2};
    struct harness *h = harness_start(&o);
    struct store_client *a = client_connect(h, NULL), *b = client_connect(h, NULL), *c = NULL;
    struct store_client_opts co = {.host = "127.0.0.1",
                                   .port = h->port,
                                   .secret = SECRET,
                                   .secret_len = strlen(SECRET),
                                   .timeout_ms = 2000};
    struct gpt_err err;

    (void)state;
    assert_true(store_client_connect(&co, &c, &err) < 0);
    store_client_free(b);
    /* The slot frees once the server has seen b go. */
    for (int64_t deadline = now_ms() + TIMEOUT_MS; harness_stats(h).clients > 1;)
        assert_true(now_ms() < deadline), usleep(2000);
    assert_int_equal(store_client_connect(&co, &c, &err), 0);
    store_client_free(c);
    store_client_free(a);
    harness_stop(h);
}

/* ---- waits and disconnects ---- */

struct waiter_arg {
    struct store_client *c;
    const char *key;
    int rc;
};

static void *waiter_thread(void *arg)
{
    struct waiter_arg *w = arg;
    const char *keys[] = {w->key};

    w->rc = store_client_wait(w->c, keys, 1, 0, NULL);
    return NULL;
}

/* A client blocked in WAIT is aborted; its disconnect removes the server's
 * wait, and another client's WAIT over the limit is refused meanwhile. */
static void test_disconnect_cleans_waits(void **state)
{
    struct store_server_opts o = {.max_waits = 2};
    struct harness *h = harness_start(&o);
    struct waiter_arg w1 = {client_connect(h, NULL), "never", 0};
    struct waiter_arg w2 = {client_connect(h, NULL), "never", 0};
    struct store_client *c = client_connect(h, NULL);
    const char *keys[] = {"never"};
    struct gpt_err err;
    pthread_t t1, t2;
    int64_t t0;

    (void)state;
    pthread_create(&t1, NULL, waiter_thread, &w1);
    pthread_create(&t2, NULL, waiter_thread, &w2);
    await_waits(h, 2);
    assert_int_equal(store_client_wait(c, keys, 1, 1000, &err), -GPT_E_LIMIT);
    t0 = now_ms();
    store_client_abort(w1.c);
    pthread_join(t1, NULL);
    assert_int_equal(w1.rc, -ECANCELED);
    assert_true(now_ms() - t0 < 1000);
    store_client_free(w1.c);
    await_waits(h, 1);
    /* The other waiter is released by a SET as usual. */
    assert_int_equal(store_client_set(c, "never", "", 0, &err), 0);
    pthread_join(t2, NULL);
    assert_int_equal(w2.rc, 0);
    await_waits(h, 0);
    store_client_free(w2.c);
    store_client_free(c);
    harness_stop(h);
}

/* A pending WAIT holds back the same connection's later requests, whose
 * replies then come in order (raw pipelining). */
static void test_pipelined_order(void **state)
{
    struct harness *h = harness_start(NULL);
    struct store_client *c = client_connect(h, NULL);
    uint8_t mac[GPT_STORE_MAC_BYTES], nc[GPT_STORE_NONCE_BYTES] = {7};
    struct store_auth_session sess = {0};
    const char *keys[] = {"gate"};
    struct proto_store_parser p;
    struct proto_store_out o;
    struct proto_store_msg m;
    struct gpt_err err;
    int fd = raw_connect(h->port), got = 0, rc;
    char buf[4096];
    int want[] = {PROTO_STORE_CHALLENGE, PROTO_STORE_PROOF, PROTO_STORE_OK, PROTO_STORE_INT};

    (void)state;
    proto_store_out_init(&o);
    proto_store_parser_init(&p, GPT_STORE_FRAME_MAX);
    assert_int_equal(proto_store_put_hello(&o, GPT_STORE_PROTO_VERSION, nc, NULL), 0);
    raw_send(fd, &o);
    o.len = 0;
    while (got < 4) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        ssize_t n;
        assert_true(poll(&pf, 1, TIMEOUT_MS) > 0);
        n = recv(fd, buf, sizeof(buf), 0);
        assert_true(n > 0);
        assert_int_equal(proto_store_parser_feed(&p, buf, (size_t)n, &err), 0);
        while ((rc = proto_store_parser_next(&p, &m, &err)) == 1) {
            assert_int_equal(m.type, want[got]);
            if (got == 0) {
                /* Answer the challenge, then pipeline WAIT + NUM_KEYS,
                 * sealed, behind the AUTH (before the server's PROOF). */
                size_t mark;
                assert_int_equal(store_auth_proof(SECRET, strlen(SECRET), GPT_STORE_LABEL_CLIENT,
                                                  nc, m.nonce, NULL, mac),
                                 0);
                assert_int_equal(
                    store_auth_session_init(&sess, false, SECRET, strlen(SECRET), nc, m.nonce), 0);
                assert_int_equal(proto_store_put_auth(&o, mac, NULL), 0);
                mark = o.len;
                o.tag_bytes = GPT_STORE_TAG_BYTES;
                assert_int_equal(proto_store_put_keys(&o, PROTO_STORE_WAIT, 0, keys, 1), 0);
                assert_int_equal(proto_store_put_num_keys(&o), 0);
                assert_int_equal(store_auth_seal(&sess, &o, mark), 0);
                raw_send(fd, &o);
                o.len = 0;
            } else if (got == 1) {
                /* The server's replies are sealed from here on. */
                proto_store_parser_seal(&p, GPT_STORE_TAG_BYTES, store_auth_verify, &sess);
                await_waits(h, 1);
                assert_int_equal(store_client_set(c, "gate", "", 0, &err), 0);
            } else if (got == 3) {
                assert_int_equal(m.num, 1); /* NUM_KEYS ran after the WAIT */
            }
            got++;
        }
        assert_int_equal(rc, 0);
    }
    close(fd);
    proto_store_parser_done(&p);
    proto_store_out_done(&o);
    store_auth_session_done(&sess);
    store_client_free(c);
    harness_stop(h);
}

/* ---- asynchronous client ---- */

struct async_log {
    int n;
    int status[16];
    int64_t num[16];
    char data[16][32];
    int connect_status;
    int connected;
    int closed;
};

static void on_reply(void *arg, const struct store_reply *r)
{
    struct async_log *l = arg;
    int i = l->n++;

    assert_true(i < 16);
    l->status[i] = r->status;
    l->num[i] = r->num;
    snprintf(l->data[i], sizeof(l->data[i]), "%.*s", (int)r->len, (const char *)r->data);
}

static void on_connect(void *arg, int status)
{
    struct async_log *l = arg;

    l->connected = 1;
    l->connect_status = status;
}

static void on_close(void *arg)
{
    ((struct async_log *)arg)->closed = 1;
}

/* Runs `loop` until *flag >= want, bounded. */
static void run_until(uv_loop_t *loop, int *flag, int want)
{
    int64_t deadline = now_ms() + TIMEOUT_MS;

    while (*flag < want && now_ms() < deadline)
        uv_run(loop, UV_RUN_NOWAIT), usleep(500);
    assert_true(*flag >= want);
}

static void test_async_client(void **state)
{
    struct store_server_opts so = {0};
    struct harness *h = harness_start(&so);
    struct store_client_async_opts o = {
        .host = "127.0.0.1", .port = h->port, .secret = SECRET, .secret_len = strlen(SECRET)};
    struct store_client_async *a;
    const char *keys[] = {"x", "c"};
    struct async_log l = {0};
    struct gpt_err err;
    uv_loop_t loop;

    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(store_client_async_new(&loop, &o, on_connect, &l, &a, &err), 0);
    /* Queued before the handshake completes, pipelined after it. */
    assert_int_equal(store_client_async_set(a, "x", "val", 3, on_reply, &l), 0);
    assert_int_equal(store_client_async_get(a, "x", on_reply, &l), 0);
    assert_int_equal(store_client_async_add(a, "c", 3, on_reply, &l), 0);
    assert_int_equal(store_client_async_wait(a, keys, 2, 1000, on_reply, &l), 0);
    assert_int_equal(store_client_async_check(a, keys, 2, on_reply, &l), 0);
    assert_int_equal(store_client_async_compare_set(a, "x", "val", 3, "new", 3, on_reply, &l), 0);
    assert_int_equal(store_client_async_append(a, "x", "er", 2, on_reply, &l), 0);
    assert_int_equal(store_client_async_get(a, "x", on_reply, &l), 0);
    assert_int_equal(store_client_async_delete(a, "x", on_reply, &l), 0);
    assert_int_equal(store_client_async_num_keys(a, on_reply, &l), 0);
    assert_int_equal(store_client_async_get(a, "x", on_reply, &l), 0);
    assert_int_equal(l.n, 0); /* never called back from inside a request */
    run_until(&loop, &l.n, 11);
    assert_int_equal(l.connect_status, 0);
    for (int i = 0; i < 10; i++)
        assert_int_equal(l.status[i], 0);
    assert_string_equal(l.data[1], "val");
    assert_int_equal(l.num[2], 3);
    assert_int_equal(l.num[4], 1);
    assert_string_equal(l.data[5], "new");
    assert_string_equal(l.data[7], "newer");
    assert_int_equal(l.num[8], 1);
    assert_int_equal(l.num[9], 1);
    assert_int_equal(l.status[10], -ENOENT);
    /* Close with a request outstanding: it fails with -ECANCELED. */
    assert_int_equal(store_client_async_wait(a, keys, 1, 5000, on_reply, &l), 0);
    store_client_async_close(a, on_close, &l);
    assert_int_equal(l.status[11], -ECANCELED);
    run_until(&loop, &l.closed, 1);

    /* A wrong secret: the connect callback and pending requests fail. */
    memset(&l, 0, sizeof(l));
    o.secret = "bad-bad-bad-bad-bad";
    o.secret_len = 19;
    assert_int_equal(store_client_async_new(&loop, &o, on_connect, &l, &a, &err), 0);
    assert_int_equal(store_client_async_get(a, "x", on_reply, &l), 0);
    run_until(&loop, &l.n, 1);
    assert_int_equal(l.connect_status, -GPT_E_AUTH);
    assert_int_equal(l.status[0], -GPT_E_AUTH);
    assert_int_equal(store_client_async_get(a, "x", on_reply, &l), -EPIPE);
    store_client_async_close(a, on_close, &l);
    run_until(&loop, &l.closed, 1);
    assert_int_equal(uv_loop_close(&loop), 0);
    harness_stop(h);
}

/* ---- secret file ---- */

/* write_admit for test_write_admit: node "n1" writes keys under "n1/" and
 * its own heartbeat only; it records the node it was asked about. */
static char admit_seen[GPT_STORE_NODE_MAX + 1];

static int admit_own_prefix(void *arg, const char *node, const struct proto_store_msg *m, char *why,
                            size_t cap)
{
    size_t n = strlen(node);

    (void)arg;
    snprintf(admit_seen, sizeof(admit_seen), "%s", node);
    if (n && m->key_len >= n && memcmp(m->key, node, n) == 0 &&
        (m->key_len == n || m->key[n] == '/'))
        return 0;
    snprintf(why, cap, "test policy");
    return -EACCES;
}

/* Each connection is bound to the node id its handshake named: the owner's
 * write_admit sees it for every write (never for a read), a refusal is
 * ERROR(DENIED) naming the key and the node, changes nothing and counts. */
static void test_write_admit(void **state)
{
    struct store_server_opts so = {.write_admit = admit_own_prefix};
    struct harness *h = harness_start(&so);
    struct store_client_opts o = {.host = "127.0.0.1",
                                  .port = h->port,
                                  .secret = SECRET,
                                  .secret_len = strlen(SECRET),
                                  .timeout_ms = TIMEOUT_MS,
                                  .node = "n1"};
    struct store_client *c = NULL, *anon = NULL;
    struct gpt_err err;
    void *val = NULL;
    size_t len = 0;

    (void)state;
    assert_int_equal(store_client_connect(&o, &c, &err), 0);
    assert_int_equal(store_client_set(c, "n1/a", "x", 1, &err), 0);
    assert_string_equal(admit_seen, "n1");
    assert_int_equal(store_client_set(c, "n2/a", "y", 1, &err), -EACCES);
    assert_non_null(strstr(err.msg, "node \"n1\" may not SET \"n2/a\": test policy"));
    assert_int_equal(store_client_append(c, "n2/a", "y", 1, &err), -EACCES);
    assert_int_equal(store_client_delete(c, "n2/b", NULL, &err), -EACCES);
    assert_int_equal(store_client_add(c, "n2/c", 1, NULL, &err), -EACCES);
    assert_int_equal(store_client_get(c, "n2/a", &val, &len, &err), -ENOENT); /* nothing stored */
    assert_int_equal(harness_stats(h).refused_writes, 4);
    /* A client of no node is refused what n1 may write. */
    o.node = NULL;
    assert_int_equal(store_client_connect(&o, &anon, &err), 0);
    assert_int_equal(store_client_set(anon, "n1/b", "z", 1, &err), -EACCES);
    assert_non_null(strstr(err.msg, "node \"(none)\" may not SET \"n1/b\""));
    assert_int_equal(store_client_get(anon, "n1/a", &val, &len, &err), 0);
    free(val);
    assert_int_equal(harness_stats(h).refused_writes, 5);
    store_client_free(anon);
    store_client_free(c);
    harness_stop(h);
}

/* The node keys of test_node_keys: the server's owner (its loop thread
 * fills the table) and the client's keeper of an issued key. */
static struct {
    char node[GPT_STORE_NODE_MAX + 1];
    uint8_t key[GPT_STORE_MAC_BYTES];
} nk_table[4];
static int nk_count;
static uint8_t nk_kept[GPT_STORE_MAC_BYTES];
static int nk_kept_count;

static int nk_get(void *arg, const char *node, uint8_t ret_key[GPT_STORE_MAC_BYTES])
{
    (void)arg;
    for (int i = 0; i < nk_count; i++)
        if (strcmp(nk_table[i].node, node) == 0) {
            memcpy(ret_key, nk_table[i].key, GPT_STORE_MAC_BYTES);
            return 1;
        }
    return 0;
}

static int nk_issued(void *arg, const char *node, const uint8_t key[GPT_STORE_MAC_BYTES])
{
    (void)arg;
    if (nk_count == 4)
        return -ENOSPC;
    snprintf(nk_table[nk_count].node, sizeof(nk_table[nk_count].node), "%s", node);
    memcpy(nk_table[nk_count++].key, key, GPT_STORE_MAC_BYTES);
    return 0;
}

static void nk_keep(void *arg, const char *node, const uint8_t key[GPT_STORE_MAC_BYTES])
{
    (void)arg;
    assert_string_equal(node, "n1");
    memcpy(nk_kept, key, sizeof(nk_kept));
    nk_kept_count++;
}

/* A node id's first connection is issued a key (delivered wrapped, so the
 * client holds what the server keeps); later connections naming that id
 * must prove it: none or a wrong one is refused with ERROR(DENIED) naming
 * the node, counted; the right one connects, and no second key is issued.
 * A client of no node needs none. */
static void test_node_keys(void **state)
{
    struct store_server_opts so = {.node_key = nk_get, .node_key_issued = nk_issued};
    struct harness *h = harness_start(&so);
    struct store_client_opts o = {.host = "127.0.0.1",
                                  .port = h->port,
                                  .secret = SECRET,
                                  .secret_len = strlen(SECRET),
                                  .timeout_ms = TIMEOUT_MS,
                                  .node = "n1",
                                  .node_key_issued = nk_keep};
    struct store_client *c = NULL;
    struct gpt_err err;
    uint8_t wrong[GPT_STORE_MAC_BYTES];

    (void)state;
    assert_int_equal(store_client_connect(&o, &c, &err), 0);
    store_client_free(c);
    assert_int_equal(nk_kept_count, 1);
    assert_int_equal(nk_count, 1);
    assert_memory_equal(nk_kept, nk_table[0].key, sizeof(nk_kept));
    assert_int_equal(store_client_connect(&o, &c, &err), -EACCES);
    assert_non_null(strstr(err.msg, "node \"n1\" did not prove its node key"));
    memcpy(wrong, nk_kept, sizeof(wrong));
    wrong[7] ^= 1;
    o.node_key = wrong;
    assert_int_equal(store_client_connect(&o, &c, &err), -EACCES);
    assert_non_null(strstr(err.msg, "node \"n1\" proved a wrong node key"));
    assert_int_equal(harness_stats(h).refused_nodes, 2);
    o.node_key = nk_kept;
    assert_int_equal(store_client_connect(&o, &c, &err), 0);
    assert_int_equal(store_client_set(c, "k", "v", 1, &err), 0);
    store_client_free(c);
    assert_int_equal(nk_kept_count, 1);
    assert_int_equal(nk_count, 1);
    o.node = NULL;
    o.node_key = NULL;
    assert_int_equal(store_client_connect(&o, &c, &err), 0);
    store_client_free(c);
    assert_int_equal(nk_count, 1);
    harness_stop(h);
}

static void test_secret_load(void **state)
{
    char path[] = "/tmp/test_store_secret_XXXXXX";
    char buf[STORE_SECRET_MAX];
    struct gpt_err err;
    size_t len = 0;
    int fd = mkstemp(path);

    (void)state;
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "topsecret-16bytes\n", 18), 18);
    close(fd);
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(store_secret_load(path, buf, sizeof(buf), &len, &err), 0);
    assert_int_equal(len, 17);
    assert_memory_equal(buf, "topsecret-16bytes", 17);
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(store_secret_load(path, buf, sizeof(buf), &len, &err), -EPERM);
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(store_secret_load(path, buf, 4, &len, &err), -EINVAL);
    unlink(path);
    assert_int_equal(store_secret_load(path, buf, sizeof(buf), &len, &err), -ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ops),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_kv_adapter),
        cmocka_unit_test(test_concurrent_clients),
        cmocka_unit_test(test_wrong_secret_dropped),
        cmocka_unit_test(test_no_handshake_dropped),
        cmocka_unit_test(test_handshake_timeout),
        cmocka_unit_test(test_client_limit),
        cmocka_unit_test(test_disconnect_cleans_waits),
        cmocka_unit_test(test_pipelined_order),
        cmocka_unit_test(test_async_client),
        cmocka_unit_test(test_write_admit),
        cmocka_unit_test(test_node_keys),
        cmocka_unit_test(test_secret_load),
    };

    alarm(240); /* a hang fails the run instead of stalling ctest */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
