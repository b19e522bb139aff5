/*
 * Unit tests of daemon/http_conns (the HTTP listener's connection table),
 * on socket pairs: a connection the table closes is one whose peer end
 * reads end-of-stream.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "http_conns.h"

struct pair {
    int ours;   /* libmicrohttpd's end, which the table shuts down */
    int client; /* the peer */
};

static void pair_open(struct pair *p)
{
    int fds[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    p->ours = fds[0];
    p->client = fds[1];
}

static void pair_close(struct pair *p)
{
    close(p->ours);
    close(p->client);
}

/* Whether the table shut the connection down: its peer reads the end. */
static bool pair_shut(const struct pair *p)
{
    char b;
    return recv(p->client, &b, 1, 0) == 0;
}

/* Beyond the limit the oldest waiting connection goes, never a busy one;
 * with every other one busy the newcomer is over the limit (503), until
 * room comes. */
static void test_http_conns_limit(void **state)
{
    (void)state;
    struct http_conns *t = http_conns_new(2, 10000);
    assert_non_null(t);
    struct pair p[5];
    struct http_conn *c[5];
    for (int i = 0; i < 5; i++)
        pair_open(&p[i]);
    c[0] = http_conns_open(t, p[0].ours, 100);
    c[1] = http_conns_open(t, p[1].ours, 200);
    assert_int_equal(http_conns_live(t), 2);
    assert_false(pair_shut(&p[0]) || pair_shut(&p[1]));
    /* A third: the oldest waiting one (0) makes room. */
    c[2] = http_conns_open(t, p[2].ours, 300);
    assert_true(pair_shut(&p[0]));
    assert_false(pair_shut(&p[1]) || pair_shut(&p[2]));
    assert_int_equal(http_conns_live(t), 2);
    http_conns_close(t, c[0]);
    /* 1 busy: 2 waits and goes for the fourth, though 1 is older. */
    assert_false(http_conns_request(t, c[1]));
    c[3] = http_conns_open(t, p[3].ours, 400);
    assert_true(pair_shut(&p[2]));
    assert_false(pair_shut(&p[1]));
    http_conns_close(t, c[2]);
    /* 1 and 3 busy: the fifth is over the limit and nothing is shut. */
    assert_false(http_conns_request(t, c[3]));
    c[4] = http_conns_open(t, p[4].ours, 500);
    assert_int_equal(http_conns_live(t), 3);
    assert_false(pair_shut(&p[1]) || pair_shut(&p[3]) || pair_shut(&p[4]));
    assert_true(http_conns_request(t, c[4])); /* answered 503 */
    http_conns_close(t, c[4]);
    /* Once 1's reply ends it waits, and a newcomer displaces it. */
    http_conns_request_done(t, c[1], 600);
    struct pair q;
    pair_open(&q);
    struct http_conn *n = http_conns_open(t, q.ours, 700);
    assert_true(pair_shut(&p[1]));
    assert_false(http_conns_request(t, n));
    http_conns_free(t); /* frees the entries still there */
    for (int i = 0; i < 5; i++)
        pair_close(&p[i]);
    pair_close(&q);
}

/* A connection over the limit gets room when its request arrives if one
 * of the others waits by then. */
static void test_http_conns_room_later(void **state)
{
    (void)state;
    struct http_conns *t = http_conns_new(1, 10000);
    struct pair a, b;
    pair_open(&a);
    pair_open(&b);
    struct http_conn *ca = http_conns_open(t, a.ours, 0);
    assert_false(http_conns_request(t, ca));
    struct http_conn *cb = http_conns_open(t, b.ours, 1);
    http_conns_request_done(t, ca, 2);
    assert_false(http_conns_request(t, cb)); /* a waits now: a goes, b is served */
    assert_true(pair_shut(&a));
    assert_false(pair_shut(&b));
    http_conns_free(t);
    pair_close(&a);
    pair_close(&b);
}

/* The sweep closes what waited past the timeout, from the start or from
 * the end of the last reply; a busy connection is never swept. */
static void test_http_conns_sweep(void **state)
{
    (void)state;
    struct http_conns *t = http_conns_new(16, 1000);
    struct pair a, b, c;
    pair_open(&a);
    pair_open(&b);
    pair_open(&c);
    struct http_conn *ca = http_conns_open(t, a.ours, 0);
    struct http_conn *cb = http_conns_open(t, b.ours, 0);
    struct http_conn *cc = http_conns_open(t, c.ours, 0);
    assert_false(http_conns_request(t, cb));
    assert_false(http_conns_request(t, cc));
    http_conns_request_done(t, cc, 900);
    assert_int_equal(http_conns_sweep(t, 1000), 0);
    assert_int_equal(http_conns_sweep(t, 1001), 1); /* a: waited 1001 ms */
    assert_true(pair_shut(&a));
    assert_false(pair_shut(&b) || pair_shut(&c));
    assert_int_equal(http_conns_sweep(t, 1901), 1); /* c: 1001 ms since its reply */
    assert_true(pair_shut(&c));
    assert_int_equal(http_conns_sweep(t, 100000), 0); /* b is busy */
    assert_false(pair_shut(&b));
    assert_int_equal(http_conns_live(t), 1);
    http_conns_close(t, ca);
    http_conns_close(t, cc);
    http_conns_close(t, cb);
    assert_int_equal(http_conns_live(t), 0);
    http_conns_close(t, NULL);
    http_conns_free(t);
    http_conns_free(NULL);
    pair_close(&a);
    pair_close(&b);
    pair_close(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_http_conns_limit),
        cmocka_unit_test(test_http_conns_room_later),
        cmocka_unit_test(test_http_conns_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
