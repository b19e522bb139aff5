/*
 * Unit tests of proto/metric's per-rank step times ("rank_step_ms"): the
 * JSON round trip, absence when not measured, and the refusals of a
 * malformed array naming the key.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "metric.h"

static void test_round_trip(void **state)
{
    (void)state;
    struct gpt_metric m;
    memset(&m, 0, sizeof(m));
    m.step = 10;
    m.loss = 1.0;
    m.val_loss = m.accuracy = NAN;
    m.n_rank_step_ms = 3;
    m.rank_step_ms[0] = 12.5f;
    m.rank_step_ms[1] = 40.25f;
    m.rank_step_ms[2] = 0;
    json_t *o = gpt_metric_to_json(&m);
    assert_non_null(o);
    json_t *a = json_object_get(o, "rank_step_ms");
    assert_int_equal(json_array_size(a), 3);
    assert_true(json_real_value(json_array_get(a, 1)) == 40.25);
    struct gpt_metric back;
    struct gpt_err err;
    assert_int_equal(gpt_metric_from_json(o, &back, &err), 0);
    assert_int_equal(back.n_rank_step_ms, 3);
    assert_true(back.rank_step_ms[0] == 12.5f && back.rank_step_ms[1] == 40.25f);
    json_decref(o);

    /* Not measured: no key, and none read back. */
    m.n_rank_step_ms = 0;
    o = gpt_metric_to_json(&m);
    assert_null(json_object_get(o, "rank_step_ms"));
    assert_int_equal(gpt_metric_from_json(o, &back, &err), 0);
    assert_int_equal(back.n_rank_step_ms, 0);
    json_decref(o);
}

static void refused(const char *text)
{
    json_error_t je;
    json_t *o = json_loads(text, 0, &je);
    assert_non_null(o);
    struct gpt_metric m;
    struct gpt_err err;
    gpt_err_clear(&err);
    if (gpt_metric_from_json(o, &m, &err) != -EINVAL)
        fail_msg("accepted %s", text);
    assert_string_equal(err.path, "rank_step_ms");
    json_decref(o);
}

static void test_refused(void **state)
{
    (void)state;
    refused("{\"step\": 1, \"rank_step_ms\": 3}");
    refused("{\"step\": 1, \"rank_step_ms\": [1, \"x\"]}");
    refused("{\"step\": 1, \"rank_step_ms\": [-1]}");
    refused("{\"step\": 1, \"rank_step_ms\": [1e300]}");
    char big[1024] = "{\"rank_step_ms\": [";
    for (int i = 0; i <= GPT_METRIC_RANKS_MAX; i++)
        strcat(big, i ? ",1" : "1");
    strcat(big, "]}");
    refused(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
