/*
 * Unit tests of base/hostport (the one HOST:PORT parser) and
 * base/monotime (the one monotonic clock).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "hostport.h"
#include "monotime.h"

static void test_hostport_ok(void **state)
{
    (void)state;
    char host[64];
    int port = -1;
    struct gpt_err err;
    assert_int_equal(hostport_parse("10.0.0.1:29500", 1, "rdzv", host, sizeof(host), &port, &err),
                     0);
    assert_string_equal(host, "10.0.0.1");
    assert_int_equal(port, 29500);
    assert_int_equal(hostport_parse("[::1]:65535", 1, "rdzv", host, sizeof(host), &port, &err), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 65535);
    /* The last colon splits: a bare v6 address keeps its colons. */
    assert_int_equal(hostport_parse("fe80::1:7", 1, "rdzv", host, sizeof(host), &port, &err), 0);
    assert_string_equal(host, "fe80::1");
    assert_int_equal(port, 7);
    assert_int_equal(hostport_parse("node-a.example:0", 0, "rdzv", host, sizeof(host), &port, &err),
                     0);
    assert_string_equal(host, "node-a.example");
    assert_int_equal(port, 0);
    /* A host of exactly cap - 1 bytes fits. */
    char small[4];
    assert_int_equal(hostport_parse("abc:1", 1, "rdzv", small, sizeof(small), &port, &err), 0);
    assert_string_equal(small, "abc");
}

static void refused(const char *s, int port_min, size_t cap)
{
    char host[64];
    int port = 42;
    struct gpt_err err;
    gpt_err_clear(&err);
    if (hostport_parse(s, port_min, "rdzv", host, cap, &port, &err) != -EINVAL)
        fail_msg("\"%s\" was accepted", s);
    assert_string_equal(err.path, "rdzv");
    assert_non_null(strstr(err.msg, "HOST:PORT"));
    assert_non_null(strstr(err.msg, s));
    assert_int_equal(port, 42); /* written only on success */
}

static void test_hostport_refused(void **state)
{
    (void)state;
    refused("", 1, 64);
    refused("host", 1, 64);
    refused(":80", 1, 64);
    refused("host:", 1, 64);
    refused("host:0", 1, 64); /* no ephemeral port here */
    refused("host:-1", 0, 64);
    refused("host:65536", 1, 64);
    refused("host:99999999999999999999", 1, 64);
    refused("host:80x", 1, 64);
    refused("host: 80x", 1, 64);
    refused("[]:80", 1, 64);
    refused("abcd:1", 1, 4); /* longer than the buffer */
}

static void test_monotime(void **state)
{
    (void)state;
    double s0 = monotime_s();
    int64_t ms0 = monotime_ms();
    monotime_sleep_ms(20);
    double s1 = monotime_s();
    int64_t ms1 = monotime_ms();
    assert_true(s1 - s0 >= 0.019);
    assert_true(ms1 - ms0 >= 19);
    /* Both read the same clock. */
    assert_true(ms1 / 1000 - (int64_t)s1 <= 1 && (int64_t)s1 - ms1 / 1000 <= 1);
    monotime_sleep_ms(0);
    monotime_sleep_ms(-5);
    assert_true(monotime_s() - s1 < 1.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostport_ok),
        cmocka_unit_test(test_hostport_refused),
        cmocka_unit_test(test_monotime),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
