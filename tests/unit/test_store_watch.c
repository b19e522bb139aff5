/*
 * test_store_watch: the store's WATCH and HEARTBEAT (proto/store.h) through
 * the real server and asynchronous client, both on this thread's loop:
 * a watch fires once per change (with the version and value), at once when
 * the key is already past what the client saw, NOT_FOUND on a delete;
 * times out; does not hold back the connection's other requests; ends with
 * its client (the server's count drops, later changes touch nothing freed);
 * is bounded per connection. The heartbeat table keeps one entry per node,
 * overwritten in place, and reports changed and unchanged reports. Every
 * wait is bounded by a deadline.
 */
#include <errno.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <uv.h>

#include "store_client.h"
#include "store_server.h"

#define SECRET "test-store-watch-secret-0123456789"

struct fx {
    uv_loop_t loop;
    struct store_server *srv;
    int port;
};

struct note {
    int calls;
    int status;
    uint64_t version;
    char val[64];
};

static void on_note(void *arg, const struct store_reply *r)
{
    struct note *n = arg;

    n->calls++;
    n->status = r->status;
    n->version = r->version;
    snprintf(n->val, sizeof(n->val), "%.*s", (int)r->len, r->data ? (const char *)r->data : "");
}

static void on_reply(void *arg, const struct store_reply *r)
{
    struct note *n = arg;

    n->calls++;
    n->status = r->status;
}

static void on_closed(void *arg)
{
    (*(int *)arg)++;
}

/* Runs the loop until *count reaches want or 5 s pass; returns *count. */
static int run_until(struct fx *f, const int *count, int want)
{
    uint64_t end = uv_hrtime() + 5000000000ull;

    while (*count < want && uv_hrtime() < end)
        uv_run(&f->loop, UV_RUN_ONCE);
    return *count;
}

/* Runs the loop for about ms milliseconds (to see that nothing comes). */
static void run_for(struct fx *f, int ms)
{
    uint64_t end = uv_hrtime() + (uint64_t)ms * 1000000ull;

    while (uv_hrtime() < end) {
        uv_run(&f->loop, UV_RUN_NOWAIT);
        uv_sleep(1);
    }
}

static struct fx *fx_new(size_t max_client_watches)
{
    struct fx *f = calloc(1, sizeof(*f));
    struct store_server_opts o = {
        .secret = SECRET, .secret_len = strlen(SECRET), .max_client_watches = max_client_watches};
    struct gpt_err err;

    assert_non_null(f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    assert_int_equal(store_server_new(&f->loop, &o, &f->srv, &err), 0);
    assert_int_equal(store_server_start(f->srv, "127.0.0.1", 0, &f->port, &err), 0);
    return f;
}

static struct store_client_async *client_new(struct fx *f)
{
    struct store_client_async_opts o = {
        .host = "127.0.0.1", .port = f->port, .secret = SECRET, .secret_len = strlen(SECRET)};
    struct store_client_async *a;
    struct gpt_err err;

    assert_int_equal(store_client_async_new(&f->loop, &o, NULL, NULL, &a, &err), 0);
    return a;
}

static void client_close(struct fx *f, struct store_client_async *a)
{
    int closed = 0;

    store_client_async_close(a, on_closed, &closed);
    assert_int_equal(run_until(f, &closed, 1), 1);
}

static void fx_free(struct fx *f)
{
    int closed = 0;

    store_server_close(f->srv, on_closed, &closed);
    assert_int_equal(run_until(f, &closed, 1), 1);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    free(f);
}

static size_t server_watches(struct fx *f)
{
    struct store_server_stats st;

    store_server_stats(f->srv, &st);
    return st.watches;
}

static void set_key(struct fx *f, struct store_client_async *a, const char *key, const char *val)
{
    struct note r = {0};

    assert_int_equal(store_client_async_set(a, key, val, strlen(val), on_reply, &r), 0);
    assert_int_equal(run_until(f, &r.calls, 1), 1);
    assert_int_equal(r.status, 0);
}

/* One round trip on a: every request a sent before has run. */
static void sync_client(struct fx *f, struct store_client_async *a)
{
    struct note r = {0};

    assert_int_equal(store_client_async_num_keys(a, on_reply, &r), 0);
    assert_int_equal(run_until(f, &r.calls, 1), 1);
}

/* Fires once per change, with the version and value; a re-armed watch
 * whose key moved on meanwhile fires at once; a delete is NOT_FOUND. */
static void test_watch_fires_once_per_change(void **state)
{
    struct fx *f = fx_new(0);
    struct store_client_async *w = client_new(f), *s = client_new(f);
    struct note n = {0}, r = {0};
    uint64_t v1, v2;

    (void)state;
    /* Absent key, nothing seen: parks until it is created. */
    assert_int_equal(store_client_async_watch(w, "k", 0, 0, on_note, &n), 0);
    assert_int_equal(store_client_async_watch(w, "k", 0, 0, on_note, &n), -EBUSY);
    sync_client(f, w);
    assert_int_equal(n.calls, 0);
    assert_int_equal(server_watches(f), 1);
    set_key(f, s, "k", "one");
    assert_int_equal(run_until(f, &n.calls, 1), 1);
    assert_int_equal(n.status, 0);
    assert_string_equal(n.val, "one");
    assert_true(n.version > 0);
    v1 = n.version;
    assert_int_equal(server_watches(f), 0);

    /* Not re-armed: a second change notifies nobody. */
    set_key(f, s, "k", "two");
    run_for(f, 50);
    assert_int_equal(n.calls, 1);

    /* Re-armed with the version it saw: "two" is newer, so at once. */
    assert_int_equal(store_client_async_watch(w, "k", v1, 0, on_note, &n), 0);
    assert_int_equal(run_until(f, &n.calls, 2), 2);
    assert_string_equal(n.val, "two");
    assert_true(n.version > v1);
    v2 = n.version;

    /* Up to date: parks; a SET of the same bytes is a change too. */
    assert_int_equal(store_client_async_watch(w, "k", v2, 0, on_note, &n), 0);
    sync_client(f, w);
    assert_int_equal(n.calls, 2);
    set_key(f, s, "k", "two");
    assert_int_equal(run_until(f, &n.calls, 3), 3);
    assert_true(n.version > v2);

    /* A delete: NOT_FOUND, version 0; then seen 0 waits for the key again. */
    assert_int_equal(store_client_async_watch(w, "k", n.version, 0, on_note, &n), 0);
    assert_int_equal(store_client_async_delete(s, "k", on_reply, &r), 0);
    assert_int_equal(run_until(f, &n.calls, 4), 4);
    assert_int_equal(n.status, -ENOENT);
    assert_true(n.version == 0);
    /* A client that saw a version of a key that is gone hears so at once. */
    assert_int_equal(store_client_async_watch(w, "k", v2, 0, on_note, &n), 0);
    assert_int_equal(run_until(f, &n.calls, 5), 5);
    assert_int_equal(n.status, -ENOENT);
    assert_int_equal(store_client_async_watch(w, "k", 0, 0, on_note, &n), 0);
    sync_client(f, w);
    assert_int_equal(n.calls, 5);
    assert_int_equal(store_client_async_add(s, "k", 5, on_reply, &r), 0);
    assert_int_equal(run_until(f, &n.calls, 6), 6);
    assert_string_equal(n.val, "5");
    assert_true(n.version > v2);

    client_close(f, w);
    client_close(f, s);
    fx_free(f);
}

/* A parked watch holds back nothing: the same connection's GETs and
 * heartbeats are answered while it waits; and it times out. */
static void test_watch_timeout_and_no_pause(void **state)
{
    struct fx *f = fx_new(0);
    struct store_client_async *w = client_new(f);
    struct note n = {0}, r = {0};
    uint64_t t0;

    (void)state;
    t0 = uv_hrtime();
    assert_int_equal(store_client_async_watch(w, "quiet", 0, 200, on_note, &n), 0);
    assert_int_equal(store_client_async_get(w, "absent", on_reply, &r), 0);
    assert_int_equal(store_client_async_heartbeat(w, "node-a", "{}", 2, on_reply, &r), 0);
    assert_int_equal(run_until(f, &r.calls, 2), 2);
    assert_int_equal(n.calls, 0); /* both answered before the watch ended */
    assert_int_equal(run_until(f, &n.calls, 1), 1);
    assert_int_equal(n.status, -ETIMEDOUT);
    assert_true(n.version == 0);
    assert_true(uv_hrtime() - t0 >= 150000000ull);
    assert_int_equal(server_watches(f), 0);
    client_close(f, w);
    fx_free(f);
}

/* A client that goes away with parked watches: they end (the server's
 * count drops to zero, nothing leaks: the server closes with no handle
 * left), and later changes of their keys find nothing to notify. Its own
 * callbacks hear -ECANCELED once. */
static void test_watch_survives_client_going_away(void **state)
{
    struct fx *f = fx_new(0);
    struct store_client_async *w = client_new(f), *s = client_new(f);
    struct note n[3] = {{0}}, r = {0};
    struct store_server_stats st;
    const char *keys[3] = {"a", "b", "c"};
    int i;

    (void)state;
    for (i = 0; i < 3; i++)
        assert_int_equal(store_client_async_watch(w, keys[i], 0, 60000, on_note, &n[i]), 0);
    assert_int_equal(store_client_async_get(w, "a", on_reply, &r), 0);
    assert_int_equal(run_until(f, &r.calls, 1), 1);
    assert_int_equal(server_watches(f), 3);
    client_close(f, w);
    for (i = 0; i < 3; i++) {
        assert_int_equal(n[i].calls, 1);
        assert_int_equal(n[i].status, -ECANCELED);
    }
    /* The server notices the hang-up and ends the watches (and their timers). */
    uint64_t end = uv_hrtime() + 5000000000ull;
    while (server_watches(f) > 0 && uv_hrtime() < end)
        uv_run(&f->loop, UV_RUN_ONCE);
    assert_int_equal(server_watches(f), 0);
    for (i = 0; i < 3; i++)
        set_key(f, s, keys[i], "after");
    store_server_stats(f->srv, &st);
    assert_true(st.notifies == 0);
    client_close(f, s);
    fx_free(f); /* asserts the loop closes: every watch timer was closed */
}

/* At most max_client_watches parked per connection; a watch of the same
 * key again (after its notify) does not count twice; other connections
 * have their own allowance. */
static void test_watch_bounded_per_client(void **state)
{
    struct fx *f = fx_new(4);
    struct store_client_async *w = client_new(f), *x = client_new(f);
    struct note n[6] = {{0}}, extra = {0};
    char key[16];
    int i;

    (void)state;
    for (i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "key%d", i);
        assert_int_equal(store_client_async_watch(w, key, 0, 0, on_note, &n[i]), 0);
    }
    assert_int_equal(store_client_async_watch(w, "key4", 0, 0, on_note, &n[4]), 0);
    assert_int_equal(run_until(f, &n[4].calls, 1), 1);
    assert_int_equal(n[4].status, -GPT_E_LIMIT);
    assert_int_equal(server_watches(f), 4);
    /* Another connection is not limited by this one's watches. */
    assert_int_equal(store_client_async_watch(x, "key4", 0, 0, on_note, &extra), 0);
    sync_client(f, x);
    set_key(f, x, "key4", "v");
    assert_int_equal(run_until(f, &extra.calls, 1), 1);
    assert_int_equal(extra.status, 0);
    /* One fires: room for one more. */
    set_key(f, x, "key0", "v");
    assert_int_equal(run_until(f, &n[0].calls, 1), 1);
    assert_int_equal(store_client_async_watch(w, "key5", 0, 0, on_note, &n[5]), 0);
    sync_client(f, w);
    assert_int_equal(n[5].calls, 0);
    assert_int_equal(server_watches(f), 4);
    client_close(f, w);
    client_close(f, x);
    fx_free(f);
}

struct hb_seen {
    int n, changed;
    char last[64];
};

static void on_hb(void *arg, const struct store_server_hb *hb)
{
    struct hb_seen *s = arg;

    s->n++;
    s->changed += hb->changed;
    snprintf(s->last, sizeof(s->last), "%.*s=%.*s", (int)hb->key_len, hb->key, (int)hb->len,
             (const char *)hb->val);
}

/* HEARTBEAT overwrites one entry per node: a drain sees each touched node
 * once with its latest report, says whether it changed, and makes no key. */
static void test_heartbeat_table(void **state)
{
    struct fx *f = fx_new(0);
    struct store_client_async *a = client_new(f);
    struct note r = {0};
    struct hb_seen seen = {0};
    struct store_server_stats st;

    (void)state;
    for (int i = 0; i < 3; i++)
        assert_int_equal(store_client_async_heartbeat(a, "n1", "up", 2, on_reply, &r), 0);
    assert_int_equal(store_client_async_heartbeat(a, "n1", "joined", 6, on_reply, &r), 0);
    assert_int_equal(run_until(f, &r.calls, 4), 4);
    assert_int_equal(r.status, 0);
    assert_int_equal(store_server_hb_drain(f->srv, on_hb, &seen), 1);
    assert_int_equal(seen.changed, 1);
    assert_string_equal(seen.last, "n1=joined");
    /* Nothing new: nothing drained. The same report again: unchanged. */
    assert_int_equal(store_server_hb_drain(f->srv, on_hb, &seen), 0);
    assert_int_equal(store_client_async_heartbeat(a, "n1", "joined", 6, on_reply, &r), 0);
    assert_int_equal(store_client_async_heartbeat(a, "n2", "up", 2, on_reply, &r), 0);
    assert_int_equal(run_until(f, &r.calls, 6), 6);
    assert_int_equal(store_server_hb_drain(f->srv, on_hb, &seen), 2);
    assert_int_equal(seen.changed, 2); /* n2 is new; n1 was the same */
    store_server_stats(f->srv, &st);
    assert_int_equal(st.heartbeats, 2);
    assert_int_equal(st.keys, 0);
    client_close(f, a);
    fx_free(f);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as gptd: a hung-up peer is an error, not a signal */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_watch_fires_once_per_change),
        cmocka_unit_test(test_watch_timeout_and_no_pause),
        cmocka_unit_test(test_watch_survives_client_going_away),
        cmocka_unit_test(test_watch_bounded_per_client),
        cmocka_unit_test(test_heartbeat_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
