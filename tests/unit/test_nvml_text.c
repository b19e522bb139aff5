/*
 * Unit tests of the GPU text a heartbeat carries (daemon/node/nvml_text.c):
 * formatting fake NVML samples, parsing them back, refusing malformed
 * texts with a message naming the entry, and the JSON the coordinator's
 * node table shows; and nvml_gpus_local through the stand-in library
 * (GPTD_NVML_LIBRARY) that test_metrics_text also loads.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cluster_msg.h"
#include "nvml.h"

#define GIB (UINT64_C(1) << 30)

static void fake_gpus(struct nvml_gpu g[3])
{
    memset(g, 0, 3 * sizeof(*g));
    g[0].index = 0;
    g[0].has_util = g[0].has_mem = true;
    g[0].util_ratio = 0.874; /* rounds to 87 */
    g[0].mem_used_bytes = 40 * GIB + 123;
    g[0].mem_total_bytes = 141 * GIB;
    g[1].index = 1; /* reports nothing */
    g[2].index = 7;
    g[2].has_util = true;
    g[2].util_ratio = 1.5; /* out of range: clamped to 100 */
}

static void test_format(void **state)
{
    (void)state;
    struct nvml_gpu g[3];
    fake_gpus(g);
    char buf[NVML_GPUS_TEXT_MAX];
    size_t n = nvml_gpus_format(g, 3, buf, sizeof(buf));
    assert_string_equal(buf, "0:87:40960:144384,1:-:-:-,7:100:-:-");
    assert_int_equal(n, strlen(buf));
    /* A small buffer keeps whole entries only. */
    char small[24];
    nvml_gpus_format(g, 3, small, sizeof(small));
    assert_string_equal(small, "0:87:40960:144384");
    nvml_gpus_format(g, 0, buf, sizeof(buf));
    assert_string_equal(buf, "");
    /* The largest text fits the heartbeat field. */
    struct nvml_gpu many[NVML_GPUS_MAX];
    memset(many, 0, sizeof(many));
    for (unsigned i = 0; i < NVML_GPUS_MAX; i++) {
        many[i].index = i;
        many[i].has_util = many[i].has_mem = true;
        many[i].util_ratio = 1;
        many[i].mem_used_bytes = many[i].mem_total_bytes = UINT64_C(1) << 40; /* 1 TiB */
    }
    n = nvml_gpus_format(many, NVML_GPUS_MAX, buf, sizeof(buf));
    assert_true(n < CLUSTER_MSG_GPUS_MAX);
    struct nvml_gpu back[NVML_GPUS_WIRE_MAX];
    size_t k = 0;
    struct gpt_err err;
    assert_int_equal(nvml_gpus_parse(buf, back, NVML_GPUS_WIRE_MAX, &k, &err), 0);
    assert_int_equal(k, NVML_GPUS_WIRE_MAX); /* the first 16 of 64 */
    assert_int_equal(back[15].index, 15);
    /* Absurd sizes: fewer, whole entries, still a valid text. */
    for (unsigned i = 0; i < NVML_GPUS_MAX; i++)
        many[i].mem_used_bytes = many[i].mem_total_bytes = UINT64_C(1) << 59;
    n = nvml_gpus_format(many, NVML_GPUS_MAX, buf, sizeof(buf));
    assert_true(n < CLUSTER_MSG_GPUS_MAX);
    assert_int_equal(nvml_gpus_parse(buf, back, NVML_GPUS_WIRE_MAX, &k, &err), 0);
    assert_true(k >= 14 && k < NVML_GPUS_WIRE_MAX);
}

static void test_parse(void **state)
{
    (void)state;
    struct nvml_gpu g[NVML_GPUS_WIRE_MAX];
    size_t n = 99;
    struct gpt_err err;
    assert_int_equal(nvml_gpus_parse("", g, NVML_GPUS_WIRE_MAX, &n, &err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(nvml_gpus_parse("0:87:40960:144384,1:-:-:-", g, NVML_GPUS_WIRE_MAX, &n, &err),
                     0);
    assert_int_equal(n, 2);
    assert_true(g[0].has_util && g[0].util_ratio == 0.87);
    assert_true(g[0].has_mem && g[0].mem_used_bytes == 40 * GIB &&
                g[0].mem_total_bytes == 144384 * (UINT64_C(1) << 20));
    assert_int_equal(g[1].index, 1);
    assert_false(g[1].has_util || g[1].has_mem);

    static const char *const bad[] = {",",
                                      "0:1:2",
                                      "0:1:2:3:4",
                                      "0:101:-:-",
                                      "-:1:-:-",
                                      "64:1:-:-",
                                      "0:01:-:-",
                                      "0: 1:-:-",
                                      "0:+1:-:-",
                                      "0:1:5:4",
                                      "0:1:5:-",
                                      "0:1:-:5",
                                      "0:1:-:-,",
                                      "0:1:-:-,,",
                                      "0:1:-:-;1:1:-:-",
                                      "0:1:1:1099511627777",
                                      "0:x:-:-",
                                      "0::-:-",
                                      "0:1:-:-,0:1:-:-,0:1:-:-,0:1:-:-,"
                                      "0:1:-:-,0:1:-:-,0:1:-:-,0:1:-:-,"
                                      "0:1:-:-,0:1:-:-,0:1:-:-,0:1:-:-,"
                                      "0:1:-:-,0:1:-:-,0:1:-:-,0:1:-:-,"
                                      "0:1:-:-"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        gpt_err_clear(&err);
        if (nvml_gpus_parse(bad[i], g, NVML_GPUS_WIRE_MAX, &n, &err) != -EINVAL)
            fail_msg("accepted \"%s\"", bad[i]);
        assert_string_equal(err.path, "gpu");
    }
    assert_int_equal(nvml_gpus_parse("0:1:5:4", g, NVML_GPUS_WIRE_MAX, &n, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "entry 0"));
    assert_int_equal(nvml_gpus_parse("0:1:-:-,1:x:-:-", g, NVML_GPUS_WIRE_MAX, &n, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "entry 1"));
}

static void test_json(void **state)
{
    (void)state;
    json_t *a = nvml_gpus_json("0:87:40960:144384,1:-:-:-");
    assert_int_equal(json_array_size(a), 2);
    json_t *g0 = json_array_get(a, 0), *g1 = json_array_get(a, 1);
    assert_int_equal(json_integer_value(json_object_get(g0, "index")), 0);
    assert_true(json_real_value(json_object_get(g0, "util_ratio")) == 0.87);
    assert_int_equal(json_integer_value(json_object_get(g0, "mem_used_bytes")), 40 * GIB);
    assert_int_equal(json_integer_value(json_object_get(g0, "mem_total_bytes")),
                     144384 * (UINT64_C(1) << 20));
    /* Unreported values are absent, not 0. */
    assert_null(json_object_get(g1, "util_ratio"));
    assert_null(json_object_get(g1, "mem_used_bytes"));
    json_decref(a);
    a = nvml_gpus_json(""); /* a CPU host */
    assert_true(json_is_array(a) && json_array_size(a) == 0);
    json_decref(a);
    a = nvml_gpus_json("garbage"); /* a node sending nonsense */
    assert_true(json_is_null(a));
    json_decref(a);
}

/* The heartbeat's sample through the stand-in library: two GPUs. */
static void test_local(void **state)
{
    (void)state;
    setenv("GPTD_NVML_LIBRARY", GPTD_FAKE_NVML, 1);
    char buf[NVML_GPUS_TEXT_MAX];
    nvml_gpus_local(buf, sizeof(buf));
    struct nvml_gpu g[NVML_GPUS_WIRE_MAX];
    size_t n = 0;
    struct gpt_err err;
    assert_int_equal(nvml_gpus_parse(buf, g, NVML_GPUS_WIRE_MAX, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_true(g[0].has_util && g[0].has_mem && g[0].mem_total_bytes > 0);
    assert_int_equal(g[1].index, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_local),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
