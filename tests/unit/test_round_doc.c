/*
 * Unit tests of proto/round_doc (the round, world and node-table
 * documents): what the coordinator encodes decodes to the same struct, and
 * a missing or wrong-typed field is an error that names it.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "round_doc.h"

static char *dump(json_t *o)
{
    assert_non_null(o);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    assert_non_null(s);
    return s;
}

static void test_round_doc_round_trip(void **state)
{
    (void)state;
    struct round_doc d, got;
    struct gpt_err err;
    round_doc_init(&d);
    d.gen = 0xabc;
    d.round = 5;
    snprintf(d.phase, sizeof(d.phase), "running");
    d.job = 9;
    d.stop_snapshot = true;
    d.run_id = 3;
    d.world = 4;
    snprintf(d.prefix, sizeof(d.prefix), "j9/abc/r5/");
    d.spec = "{\"model\":{}}";
    d.uid = 1000;
    d.token = 0xfedcba9876543210ull;
    d.resume_step = 40;
    snprintf(d.closed, sizeof(d.closed), "2 nodes");
    d.has_me = true;
    d.me = (struct round_member){"node-a", 0x99, 2, 2, "10.0.0.1"};
    struct round_member two[2] = {{"node-b", 1, 0, 2, "10.0.0.2"}, d.me};
    d.nodes = (struct round_members){two, 2, true};
    char *text = dump(round_doc_to_json(&d));
    assert_int_equal(round_doc_decode(text, strlen(text), &got, &err), 0);
    assert_int_equal(got.gen, 0xabc);
    assert_int_equal(got.round, 5);
    assert_string_equal(got.phase, "running");
    assert_int_equal(got.job, 9);
    assert_true(got.stop_snapshot);
    assert_int_equal(got.run_id, 3);
    assert_int_equal(got.world, 4);
    assert_string_equal(got.prefix, "j9/abc/r5/");
    assert_string_equal(got.spec, d.spec);
    assert_int_equal(got.uid, 1000);
    assert_true(got.token == 0xfedcba9876543210ull);
    assert_int_equal(got.resume_step, 40);
    assert_string_equal(got.closed, "2 nodes");
    assert_true(got.has_me);
    assert_string_equal(got.me.id, "node-a");
    assert_int_equal(got.me.inc, 0x99);
    assert_int_equal(got.me.rank_base, 2);
    assert_int_equal(got.me.workers, 2);
    assert_true(got.nodes.present);
    assert_int_equal(got.nodes.n, 2);
    assert_string_equal(got.nodes.v[0].addr, "10.0.0.2");
    round_doc_done(&got);
    free(text);

    /* The idle round leaves every optional field out and reads back absent. */
    round_doc_init(&d);
    text = dump(round_doc_to_json(&d));
    assert_null(strstr(text, "uid"));
    assert_null(strstr(text, "me"));
    assert_int_equal(round_doc_decode(text, strlen(text), &got, &err), 0);
    assert_null(got.spec);
    assert_int_equal(got.uid, -1);
    assert_int_equal(got.resume_step, -1);
    assert_int_equal(got.token, 0);
    assert_false(got.has_me);
    assert_false(got.nodes.present);
    round_doc_done(&got);
    free(text);
}

/* Decodes text; expects failure with err.path == path and the path in
 * the message. */
static void refused(const char *text, int code, const char *path)
{
    struct round_doc d;
    struct gpt_err err;
    gpt_err_clear(&err);
    int rc = round_doc_decode(text, strlen(text), &d, &err);
    if (rc != code || strcmp(err.path, path) != 0)
        fail_msg("%s: rc %d path \"%s\" (%s), want %d \"%s\"", text, rc, err.path, err.msg, code,
                 path);
    assert_non_null(strstr(err.msg, path));
    assert_null(d.spec);
    assert_null(d.nodes.v);
}

#define HEAD                                                                                       \
    "\"gen\":\"1\",\"round\":1,\"phase\":\"running\",\"job\":1,\"stop\":\"abort\",\"run_id\":0"
#define ME "\"me\":{\"id\":\"a\",\"inc\":\"9\",\"rank_base\":0,\"addr\":\"\""

static void test_round_doc_names_the_field(void **state)
{
    (void)state;
    /* missing: a world without "workers" in "me" no longer reads as 0 */
    refused("{" HEAD ",\"world\":1,\"prefix\":\"p\"," ME "}}", -EINVAL, "me.workers");
    refused("{" HEAD ",\"prefix\":\"p\"}", -EINVAL, "world");
    refused("{\"round\":1}", -EINVAL, "gen");
    /* wrong types */
    refused("{" HEAD ",\"world\":\"2\",\"prefix\":\"p\"}", -EINVAL, "world");
    refused("{" HEAD ",\"world\":1,\"prefix\":7}", -EINVAL, "prefix");
    refused("{" HEAD ",\"world\":1,\"prefix\":\"p\",\"uid\":\"0\"}", -EINVAL, "uid");
    refused("{" HEAD ",\"world\":1,\"prefix\":\"p\",\"token\":\"XY\"}", -EINVAL, "token");
    refused("{" HEAD ",\"world\":1,\"prefix\":\"p\",\"spec\":{}}", -EINVAL, "spec");
    refused("{" HEAD ",\"world\":1,\"prefix\":\"p\",\"me\":[]}", -EINVAL, "me");
    refused("{" HEAD ",\"world\":1,\"prefix\":\"p\"," ME ",\"workers\":true}}", -EINVAL,
            "me.workers");
    refused("{" HEAD ",\"world\":1,\"prefix\":\"p\",\"nodes\":[{\"id\":\"a\",\"inc\":\"1\","
            "\"rank_base\":0,\"workers\":1,\"addr\":\"\"},{\"id\":\"b\",\"inc\":1,"
            "\"rank_base\":1,\"workers\":1,\"addr\":\"\"}]}",
            -EINVAL, "nodes[1].inc");
    /* ranges and names */
    refused("{" HEAD ",\"world\":-1,\"prefix\":\"p\"}", -EINVAL, "world");
    refused("{\"gen\":\"1\",\"round\":1,\"phase\":\"dancing\",\"job\":1,\"stop\":\"abort\","
            "\"run_id\":0,\"world\":1,\"prefix\":\"p\"}",
            -EINVAL, "phase");
    refused("{\"gen\":\"1\",\"round\":1,\"phase\":\"idle\",\"job\":1,\"stop\":\"later\","
            "\"run_id\":0,\"world\":1,\"prefix\":\"p\"}",
            -EINVAL, "stop");
    refused("[1]", -EBADMSG, "");
    refused("{" HEAD ",\"world\":1,\"prefix\":\"p\",\"prefix\":\"q\"}", -EBADMSG, "");
    /* A field no table declares is ignored (a newer coordinator's). */
    struct round_doc d;
    const char *text = "{" HEAD ",\"world\":1,\"prefix\":\"p\",\"later\":[1]}";
    assert_int_equal(round_doc_decode(text, strlen(text), &d, NULL), 0);
    round_doc_done(&d);
}

static void test_round_nodes(void **state)
{
    (void)state;
    struct round_node rows[2] = {
        {.node = "a",
         .state = "running",
         .heartbeat_age_s = 0.5,
         .workers = 2,
         .version = "1",
         .addr = "10.0.0.1",
         .member = true,
         .devices = "cpu",
         .job = 7,
         .ranks = "0-1",
         .role = "coordinator"},
        {.node = "b",
         .state = "idle",
         .workers = 1,
         .devices = "cuda:0",
         .gpus = json_pack("[{s:i}]", "index", 0)},
    };
    char *text = dump(round_nodes_to_json(rows, 2));
    /* A node on no job and without ranks says so with null. */
    assert_non_null(strstr(text, "\"job\":null"));
    assert_non_null(strstr(text, "\"ranks\":null"));
    struct round_node *got;
    size_t n;
    struct gpt_err err;
    assert_int_equal(round_nodes_decode(text, strlen(text), &got, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(got[0].ranks, "0-1");
    assert_int_equal(got[0].job, 7);
    assert_true(got[0].member);
    assert_null(got[0].gpus);
    assert_string_equal(got[0].role, "coordinator");
    assert_int_equal(got[1].job, 0);
    assert_string_equal(got[1].ranks, "");
    assert_true(json_equal(got[1].gpus, rows[1].gpus));
    round_nodes_free(got, n);
    json_decref(rows[1].gpus);
    free(text);

    const char *bad = "[{\"node\":\"a\",\"state\":\"idle\"}]";
    assert_int_equal(round_nodes_decode(bad, strlen(bad), &got, &n, &err), -EINVAL);
    assert_string_equal(err.path, "[0].heartbeat_age_s");
    bad = "[{\"node\":\"a\",\"state\":\"idle\",\"heartbeat_age_s\":1,\"workers\":1,"
          "\"version\":\"\",\"addr\":\"\",\"member\":1,\"devices\":\"\",\"gpus\":null,"
          "\"job\":null,\"ranks\":null}]";
    assert_int_equal(round_nodes_decode(bad, strlen(bad), &got, &n, &err), -EINVAL);
    assert_string_equal(err.path, "[0].member");
    assert_non_null(strstr(err.msg, "member must be true or false"));
    bad = "{}";
    assert_int_equal(round_nodes_decode(bad, strlen(bad), &got, &n, &err), -EBADMSG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_doc_round_trip),
        cmocka_unit_test(test_round_doc_names_the_field),
        cmocka_unit_test(test_round_nodes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
