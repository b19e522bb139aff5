/*
 * Unit tests of proto/prompt_ids (the `--prompt-ids 15496,11` form: ids,
 * spaces, every malformed shape refused naming the id or byte, the limits)
 * and of the sample op's prompt_ids field and the job keys
 * data.tokenizer gpt2 / data.vocab (proto/jobspec: which combinations are
 * accepted, what a shards job with data.vocab becomes).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ctl.h"
#include "jobspec.h"
#include "prompt_ids.h"

static int parse(const char *s, int32_t *out, size_t cap, size_t *n, struct gpt_err *err)
{
    gpt_err_clear(err);
    return gpt_prompt_ids_parse(s, strlen(s), out, cap, n, err);
}

static void test_parse_ok(void **state)
{
    (void)state;
    int32_t ids[8];
    size_t n = 99;
    struct gpt_err err;
    assert_int_equal(parse("15496,11", ids, 8, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 15496);
    assert_int_equal(ids[1], 11);
    assert_int_equal(parse(" 0 , 50256 ,7 ", ids, 8, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 50256);
    assert_int_equal(ids[2], 7);
    assert_int_equal(parse("16777215", ids, 8, &n, &err), 0);
    assert_int_equal(ids[0], GPT_PROMPT_ID_MAX);
    assert_int_equal(parse("0000042", ids, 8, &n, &err), 0);
    assert_int_equal(ids[0], 42);
}

static void test_parse_errors(void **state)
{
    (void)state;
    static const struct {
        const char *in, *msg;
    } cases[] = {
        {"", "no token ids given"},
        {"   ", "no token ids given"},
        {",", "token id 1 is empty (at byte 0)"},
        {"1,", "token id 2 is empty (at byte 2)"},
        {"1,,2", "token id 2 is empty (at byte 2)"},
        {"-1", "unexpected '-' at byte 0"},
        {"12 34", "unexpected '3' at byte 3"},
        {"15496;11", "unexpected ';' at byte 5"},
        {"1.5", "unexpected '.' at byte 1"},
        {"7,\xff", "unexpected byte 0xff at byte 2"},
        {"1,16777216", "token id 2 (at byte 2) is larger than 16777215"},
        {"99999999999999999999999", "token id 1 (at byte 0) is larger than"},
        {"1,2,3,4,5", "more than 4 token ids"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int32_t ids[4] = {-1, -1, -1, -1};
        size_t n = 77;
        struct gpt_err err;
        int rc = parse(cases[i].in, ids, 4, &n, &err);
        if (rc != -EINVAL || !strstr(err.msg, cases[i].msg))
            fail_msg("'%s': rc %d, message '%s', expected '%s'", cases[i].in, rc, err.msg,
                     cases[i].msg);
        assert_string_equal(err.path, "prompt_ids");
        assert_int_equal(n, 77); /* written only on success */
    }
}

static void test_parse_limits(void **state)
{
    (void)state;
    size_t len = GPT_PROMPT_IDS_MAX * 2; /* "1," per id */
    char *s = malloc(len + 2);
    int32_t *ids = calloc(GPT_PROMPT_IDS_MAX + 1, sizeof(*ids));
    assert_non_null(s);
    assert_non_null(ids);
    for (size_t i = 0; i < GPT_PROMPT_IDS_MAX; i++)
        memcpy(s + 2 * i, "1,", 2);
    s[len - 1] = '\0'; /* exactly GPT_PROMPT_IDS_MAX ids */
    size_t n = 0;
    struct gpt_err err;
    assert_int_equal(parse(s, ids, GPT_PROMPT_IDS_MAX, &n, &err), 0);
    assert_int_equal(n, GPT_PROMPT_IDS_MAX);
    s[len - 1] = ',';
    s[len] = '2';
    s[len + 1] = '\0';
    assert_int_equal(parse(s, ids, GPT_PROMPT_IDS_MAX, &n, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "more than 4096 token ids"));
    free(s);
    /* the text form is bounded before it is read */
    char *big = malloc(GPT_PROMPT_IDS_TEXT_MAX + 2);
    assert_non_null(big);
    memset(big, ' ', GPT_PROMPT_IDS_TEXT_MAX + 1);
    big[GPT_PROMPT_IDS_TEXT_MAX + 1] = '\0';
    assert_int_equal(parse(big, ids, GPT_PROMPT_IDS_MAX, &n, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "bytes of token ids"));
    free(big);
    free(ids);
}

/* The sample op: prompt_ids is a string field of its own, prompt no longer
 * required. */
static void test_ctl_field(void **state)
{
    (void)state;
    struct gpt_ctl_request req;
    struct gpt_err err;
    const char *line = "{\"id\":1,\"op\":\"sample\",\"job\":3,\"prompt_ids\":\"15496,11\"}";
    gpt_err_clear(&err);
    assert_int_equal(gpt_ctl_request_decode(line, strlen(line), &req, &err), 0);
    assert_string_equal(req.prompt_ids, "15496,11");
    assert_null(req.prompt);
    assert_true(req.present & (1u << GPT_CTL_F_PROMPT_IDS));
    gpt_ctl_request_done(&req);
    line = "{\"id\":1,\"op\":\"sample\",\"job\":3,\"prompt_ids\":7}";
    assert_true(gpt_ctl_request_decode(line, strlen(line), &req, &err) < 0);
    assert_string_equal(err.path, "prompt_ids");
    gpt_ctl_request_done(&req);
    line = "{\"id\":1,\"op\":\"status\",\"job\":3,\"prompt_ids\":\"1\"}";
    assert_true(gpt_ctl_request_decode(line, strlen(line), &req, &err) < 0);
    gpt_ctl_request_done(&req);
}

static int spec(const char *data, struct gpt_job *job, struct gpt_err *err)
{
    char json[1024];
    snprintf(json, sizeof(json), "{\"trainer\": {\"max_steps\": 1}, \"data\": {%s}}", data);
    gpt_err_clear(err);
    return gpt_jobspec_parse(json, strlen(json), NULL, 0, job, err);
}

static void test_jobspec_keys(void **state)
{
    (void)state;
    struct gpt_job job;
    struct gpt_err err;
    assert_int_equal(spec("\"path\": \"/d/t.txt\"", &job, &err), 0);
    assert_int_equal(job.data.tokenizer, GPT_TOK_CHAR); /* the default */
    assert_string_equal(job.data.vocab, "");
    assert_int_equal(
        spec("\"path\": \"/d/t.txt\", \"tokenizer\": \"gpt2\", \"vocab\": \"/d/gpt2\"", &job, &err),
        0);
    assert_int_equal(job.data.tokenizer, GPT_TOK_GPT2);
    assert_string_equal(job.data.vocab, "/d/gpt2");
    /* a shards job with a vocabulary becomes gpt2 */
    assert_int_equal(
        spec("\"kind\": \"shards\", \"path\": \"/d/*.bin\", \"vocab\": \"/d/gpt2\"", &job, &err),
        0);
    assert_int_equal(job.data.tokenizer, GPT_TOK_GPT2);

    assert_true(spec("\"path\": \"/d/t.txt\", \"tokenizer\": \"gpt2\"", &job, &err) < 0);
    assert_string_equal(err.path, "data.vocab");
    assert_non_null(strstr(err.msg, "encoder.json"));
    assert_true(spec("\"path\": \"/d/t.txt\", \"vocab\": \"/d/gpt2\"", &job, &err) < 0);
    assert_string_equal(err.path, "data.vocab");
    assert_non_null(strstr(err.msg, "only used with data.tokenizer gpt2"));
    assert_true(
        spec("\"task\": \"addition\", \"tokenizer\": \"gpt2\", \"vocab\": \"/v\"", &job, &err) < 0);
    assert_string_equal(err.path, "data.tokenizer");
    assert_true(spec("\"path\": \"/d/t.txt\", \"tokenizer\": \"bpe\"", &job, &err) < 0);
    assert_string_equal(err.path, "data.tokenizer");
    assert_non_null(strstr(err.msg, "gpt2")); /* the accepted names are listed */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_ok),     cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_parse_limits), cmocka_unit_test(test_ctl_field),
        cmocka_unit_test(test_jobspec_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
