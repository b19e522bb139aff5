/*
 * Unit tests of daemon/follow's pure parts: which records a `logs` stream
 * sends (since, the monotonic metric steps of the remote source, the end)
 * and the end record both sources send.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "follow.h"

static void test_filter_local(void **state)
{
    (void)state;
    struct control_logs l = {.active = true, .since = 10, .after = -1};
    assert_int_equal(follow_filter(&l, "metric", 9, false), FOLLOW_SKIP);
    assert_int_equal(follow_filter(&l, "metric", 10, false), FOLLOW_SEND);
    assert_int_equal(follow_filter(&l, "metric", 12, false), FOLLOW_SEND);
    /* A resumed run repeats steps: the local source sends them again. */
    assert_int_equal(follow_filter(&l, "metric", 11, false), FOLLOW_SEND);
    assert_int_equal(l.after, -1); /* the local source's cursor is the database's */
    assert_int_equal(follow_filter(&l, "event", 9, false), FOLLOW_SKIP);
    assert_int_equal(follow_filter(&l, "event", 10, false), FOLLOW_SEND);
    assert_int_equal(follow_filter(&l, "end", 0, false), FOLLOW_END);
    assert_int_equal(follow_filter(&l, NULL, 50, false), FOLLOW_SKIP);
    assert_int_equal(follow_filter(&l, "sample", 50, false), FOLLOW_SKIP);
}

static void test_filter_remote(void **state)
{
    (void)state;
    struct control_logs l = {.active = true, .remote = true, .since = 0, .after = -1};
    assert_int_equal(follow_filter(&l, "metric", 0, true), FOLLOW_SEND);
    assert_int_equal(l.after, 0);
    assert_int_equal(follow_filter(&l, "metric", 5, true), FOLLOW_SEND);
    assert_int_equal(l.after, 5);
    /* Steps sent to one client only increase. */
    assert_int_equal(follow_filter(&l, "metric", 5, true), FOLLOW_SKIP);
    assert_int_equal(follow_filter(&l, "metric", 3, true), FOLLOW_SKIP);
    assert_int_equal(l.after, 5);
    /* Events are not held to the metric cursor. */
    assert_int_equal(follow_filter(&l, "event", 3, true), FOLLOW_SEND);
    l.since = 20;
    assert_int_equal(follow_filter(&l, "metric", 19, true), FOLLOW_SKIP);
    assert_int_equal(l.after, 5);
    assert_int_equal(follow_filter(&l, "event", 19, true), FOLLOW_SKIP);
    assert_int_equal(follow_filter(&l, "end", -1, true), FOLLOW_END);
}

static void test_end_json(void **state)
{
    (void)state;
    json_t *o = follow_end_json(7, "failed", "worker 1: out of memory");
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "type")), "end");
    assert_int_equal(json_integer_value(json_object_get(o, "job")), 7);
    assert_string_equal(json_string_value(json_object_get(o, "state")), "failed");
    assert_string_equal(json_string_value(json_object_get(o, "error")), "worker 1: out of memory");
    json_decref(o);

    o = follow_end_json(8, "completed", "");
    assert_int_equal(json_object_size(o), 3); /* no empty error */
    json_decref(o);
    o = follow_end_json(8, "completed", NULL);
    assert_int_equal(json_object_size(o), 3);
    json_decref(o);
    o = follow_end_json(9, NULL, NULL); /* a reply without a state still ends the stream */
    assert_string_equal(json_string_value(json_object_get(o, "state")), "unknown");
    json_decref(o);

    struct db_job j;
    memset(&j, 0, sizeof(j));
    j.id = 3;
    j.state = DB_JOB_CANCELLED;
    o = follow_job_end_json(&j);
    assert_int_equal(json_integer_value(json_object_get(o, "job")), 3);
    assert_string_equal(json_string_value(json_object_get(o, "state")),
                        db_job_state_name(DB_JOB_CANCELLED));
    assert_null(json_object_get(o, "error"));
    json_decref(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filter_local),
        cmocka_unit_test(test_filter_remote),
        cmocka_unit_test(test_end_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
