/*
 * Unit tests of proto/ctl: request decoding (every op, field type and range
 * checks with paths), reply encoding, and the bounded line splitter.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ctl.h"

static int decode(const char *s, struct gpt_ctl_request *req, struct gpt_err *err)
{
    gpt_err_clear(err);
    return gpt_ctl_request_decode(s, strlen(s), req, err);
}

static void test_decode_ok(void **state)
{
    (void)state;
    struct gpt_ctl_request req;
    struct gpt_err err;
    assert_int_equal(
        decode("{\"id\":7,\"op\":\"logs\",\"job\":3,\"follow\":true,\"since\":40}", &req, &err), 0);
    assert_int_equal(req.op, GPT_CTL_OP_LOGS);
    assert_int_equal(json_integer_value(req.id), 7);
    assert_int_equal(req.job, 3);
    assert_true(req.follow);
    assert_int_equal(req.since, 40);
    assert_true(req.present & (1u << GPT_CTL_F_SINCE));
    assert_false(req.present & (1u << GPT_CTL_F_SNAPSHOT));
    gpt_ctl_request_done(&req);

    assert_int_equal(decode("{\"id\":\"a-1\",\"op\":\"sample\",\"job\":1,\"prompt\":\"12+34=\","
                            "\"tokens\":8,\"temperature\":0.5,\"top_k\":3}",
                            &req, &err),
                     0);
    assert_string_equal(json_string_value(req.id), "a-1");
    assert_string_equal(req.prompt, "12+34=");
    assert_true(req.temperature == 0.5);
    assert_int_equal(req.top_k, 3);
    gpt_ctl_request_done(&req);

    assert_int_equal(
        decode("{\"op\":\"submit\",\"id\":1,\"spec\":{\"name\":\"x\"},\"priority\":-5}", &req,
               &err),
        0);
    assert_non_null(req.spec);
    assert_int_equal(req.priority, -5);
    gpt_ctl_request_done(&req);

    /* Every op in the table decodes with its required fields. */
    for (int op = 0; op < GPT_CTL_OP_COUNT; op++) {
        char line[256];
        snprintf(line, sizeof(line),
                 "{\"id\":1,\"op\":\"%s\",\"job\":1,\"spec\":{},\"prompt\":\"\"}",
                 gpt_ctl_op_name(op));
        assert_int_equal(gpt_ctl_op_lookup(gpt_ctl_op_name(op)), op);
        int rc = decode(line, &req, &err);
        /* Extra fields are errors, so only check that the op was found. */
        assert_int_equal(req.op, op);
        assert_true(rc == 0 || rc == GPT_CTL_E_BAD_FIELD);
        gpt_ctl_request_done(&req);
    }
}

struct bad_case {
    const char *line;
    int rc;
    const char *path;
    int has_id;
};

static void test_decode_errors(void **state)
{
    (void)state;
    static const struct bad_case cases[] = {
        {"not json", GPT_CTL_E_BAD_JSON, "", 0},
        {"", GPT_CTL_E_BAD_JSON, "", 0},
        {"[1,2]", GPT_CTL_E_BAD_JSON, "", 0},
        {"{\"id\":1,\"op\":\"list\"", GPT_CTL_E_BAD_JSON, "", 0},
        {"{\"op\":\"list\"}", GPT_CTL_E_BAD_FIELD, "id", 0},
        {"{\"id\":-1,\"op\":\"list\"}", GPT_CTL_E_BAD_FIELD, "id", 0},
        {"{\"id\":1.5,\"op\":\"list\"}", GPT_CTL_E_BAD_FIELD, "id", 0},
        {"{\"id\":1}", GPT_CTL_E_BAD_FIELD, "op", 1},
        {"{\"id\":1,\"op\":7}", GPT_CTL_E_BAD_FIELD, "op", 1},
        {"{\"id\":1,\"op\":\"frobnicate\"}", GPT_CTL_E_UNKNOWN_OP, "op", 1},
        {"{\"id\":1,\"op\":\"cancel\"}", GPT_CTL_E_BAD_FIELD, "job", 1},
        {"{\"id\":1,\"op\":\"cancel\",\"job\":\"3\"}", GPT_CTL_E_BAD_FIELD, "job", 1},
        {"{\"id\":1,\"op\":\"cancel\",\"job\":0}", GPT_CTL_E_BAD_FIELD, "job", 1},
        {"{\"id\":1,\"op\":\"cancel\",\"job\":2,\"jbo\":1}", GPT_CTL_E_BAD_FIELD, "jbo", 1},
        {"{\"id\":1,\"op\":\"list\",\"job\":1}", GPT_CTL_E_BAD_FIELD, "job", 1},
        {"{\"id\":1,\"op\":\"logs\",\"job\":1,\"follow\":1}", GPT_CTL_E_BAD_FIELD, "follow", 1},
        {"{\"id\":1,\"op\":\"submit\",\"spec\":[]}", GPT_CTL_E_BAD_FIELD, "spec", 1},
        {"{\"id\":1,\"op\":\"sample\",\"job\":1,\"prompt\":\"a\",\"temperature\":0}",
         GPT_CTL_E_BAD_FIELD, "temperature", 1},
        /* jansson refuses \u0000 unless asked, so a NUL never reaches a field. */
        {"{\"id\":1,\"op\":\"sample\",\"job\":1,\"prompt\":\"a\\u0000b\"}", GPT_CTL_E_BAD_JSON, "",
         0},
        {"{\"id\":1,\"op\":\"list\",\"op\":\"list\"}", GPT_CTL_E_BAD_JSON, "", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct gpt_ctl_request req;
        struct gpt_err err;
        int rc = decode(cases[i].line, &req, &err);
        if (rc != cases[i].rc)
            fail_msg("case %zu (%s): rc %d, want %d", i, cases[i].line, rc, cases[i].rc);
        assert_string_equal(err.path, cases[i].path);
        assert_true(err.msg[0] != '\0');
        assert_int_equal(json_is_integer(req.id), cases[i].has_id);
        gpt_ctl_request_done(&req);
    }
}

static void test_decode_too_long(void **state)
{
    (void)state;
    size_t n = GPT_CTL_LINE_MAX + 1;
    char *big = malloc(n);
    assert_non_null(big);
    memset(big, ' ', n);
    struct gpt_ctl_request req;
    struct gpt_err err;
    assert_int_equal(gpt_ctl_request_decode(big, n, &req, &err), GPT_CTL_E_TOO_LONG);
    assert_string_equal(gpt_ctl_errname(GPT_CTL_E_TOO_LONG), "line_too_long");
    gpt_ctl_request_done(&req);
    free(big);
}

static void test_reply_encoding(void **state)
{
    (void)state;
    json_t *id = json_integer(42);
    json_t *res = json_pack("{s:I, s:s, s:b}", "job", (json_int_t)9, "id", "shadow", "ok", 0);
    size_t n;
    char *line = gpt_ctl_reply_ok(id, res, &n);
    assert_non_null(line);
    assert_int_equal(line[n - 1], '\n');
    assert_int_equal(strlen(line), n);
    json_t *o = json_loads(line, 0, NULL);
    assert_non_null(o);
    assert_int_equal(json_integer_value(json_object_get(o, "id")), 42);
    assert_true(json_is_true(json_object_get(o, "ok")));
    assert_int_equal(json_integer_value(json_object_get(o, "job")), 9);
    json_decref(o);
    free(line);

    struct gpt_err err;
    gpt_err_set(&err, -ENOENT, "job", "no job %d", 5);
    line = gpt_ctl_reply_from_err(NULL, -ENOENT, &err, &n);
    o = json_loads(line, 0, NULL);
    assert_non_null(o);
    assert_true(json_is_null(json_object_get(o, "id")));
    assert_true(json_is_false(json_object_get(o, "ok")));
    json_t *e = json_object_get(o, "error");
    assert_string_equal(json_string_value(json_object_get(e, "code")), "not_found");
    assert_string_equal(json_string_value(json_object_get(e, "message")), "no job 5");
    assert_string_equal(json_string_value(json_object_get(e, "path")), "job");
    json_decref(o);
    free(line);

    /* Invalid UTF-8 in a message still gives a valid line. */
    line = gpt_ctl_reply_error(id, "bad_json", "\xff\xfe", NULL, &n);
    assert_non_null(line);
    o = json_loads(line, 0, NULL);
    assert_non_null(o);
    assert_null(json_object_get(json_object_get(o, "error"), "path"));
    json_decref(o);
    free(line);
    json_decref(id);
}

static void test_linebuf(void **state)
{
    (void)state;
    struct gpt_ctl_linebuf lb;
    const char *line;
    size_t n;
    gpt_ctl_linebuf_init(&lb, 8);
    assert_int_equal(gpt_ctl_linebuf_push(&lb, "ab", 2), 0);
    assert_int_equal(gpt_ctl_linebuf_next(&lb, &line, &n), 0);
    assert_int_equal(gpt_ctl_linebuf_push(&lb, "c\nde\n\nfg", 8), 0);
    assert_int_equal(gpt_ctl_linebuf_next(&lb, &line, &n), 1);
    assert_int_equal(n, 3);
    assert_memory_equal(line, "abc", 3);
    assert_int_equal(gpt_ctl_linebuf_next(&lb, &line, &n), 1);
    assert_memory_equal(line, "de", 2);
    assert_int_equal(gpt_ctl_linebuf_next(&lb, &line, &n), 1);
    assert_int_equal(n, 0);
    assert_int_equal(gpt_ctl_linebuf_next(&lb, &line, &n), 0);
    assert_int_equal(gpt_ctl_linebuf_pending(&lb), 2);
    /* "fg" + 7 more bytes without a newline passes the bound of 8. */
    assert_int_equal(gpt_ctl_linebuf_push(&lb, "1234567", 7), GPT_CTL_E_TOO_LONG);
    /* A complete line over the bound inside one push is caught by next. */
    gpt_ctl_linebuf_done(&lb);
    gpt_ctl_linebuf_init(&lb, 4);
    assert_int_equal(gpt_ctl_linebuf_push(&lb, "123456\nok\n", 10), 0);
    assert_int_equal(gpt_ctl_linebuf_next(&lb, &line, &n), GPT_CTL_E_TOO_LONG);
    assert_int_equal(gpt_ctl_linebuf_next(&lb, &line, &n), 1);
    assert_memory_equal(line, "ok", 2);
    gpt_ctl_linebuf_done(&lb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_ok),       cmocka_unit_test(test_decode_errors),
        cmocka_unit_test(test_decode_too_long), cmocka_unit_test(test_reply_encoding),
        cmocka_unit_test(test_linebuf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
