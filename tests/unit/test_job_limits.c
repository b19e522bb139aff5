/*
 * test_job_limits: every engine limit a spec used to pass validate with
 * and then fail on at run time (issue 14) is refused by
 * gpt_jobspec_parse/validate, with the job key named in err.path and the
 * limit in the message; specs at the limits still pass.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "jobspec.h"

static const char *const base_text =
    "{\"model\": {\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 32, \"block_size\": 64},"
    " \"data\": {\"kind\": \"text\", \"path\": \"/tmp/x.txt\"},"
    " \"trainer\": {\"max_steps\": 10, \"micro_batch\": 4, \"global_batch\": 4}}";
static const char *const base_synth =
    "{\"model\": {\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 32, \"block_size\": 6},"
    " \"data\": {\"kind\": \"synthetic\", \"task\": \"addition\", \"digits\": 2},"
    " \"trainer\": {\"max_steps\": 10, \"micro_batch\": 4, \"global_batch\": 4}}";

static const char *const base_wide =
    "{\"model\": {\"n_layer\": 1, \"n_head\": 2, \"n_embd\": 128, \"block_size\": 64},"
    " \"data\": {\"kind\": \"text\", \"path\": \"/tmp/x.txt\"},"
    " \"trainer\": {\"max_steps\": 10, \"micro_batch\": 4, \"global_batch\": 4}}";

struct refusal {
    const char *spec;
    const char *override1, *override2, *override3;
    const char *path; /* the key named */
    const char *msg;  /* a part of the message */
};

static const struct refusal refusals[] = {
    {NULL, "model.n_layer=256", NULL, NULL, "model.n_layer", "1..42, got 256"},
    {NULL, "model.n_layer=43", NULL, NULL, "model.n_layer", "1..42, got 43"},
    {NULL, "model.vocab_size=1", NULL, NULL, "model.vocab_size", "at least 2"},
    {NULL, "data.train_split=1", NULL, NULL, "data.train_split", "must be below 1"},
    {"wide", "trainer.micro_batch=65536", "trainer.global_batch=65536", "model.block_size=65536",
     "trainer.micro_batch", "matrix size limit 2^40"},
    {"synth", "model.block_size=5", NULL, NULL, "model.block_size", "needs model.block_size >= 6"},
    {"synth", "data.digits=4", NULL, NULL, "model.block_size",
     "needs model.block_size >= 12, got 6"},
    {"synth", "model.vocab_size=1", NULL, NULL, "model.vocab_size", NULL},
};

static void test_refusals(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++) {
        const struct refusal *r = &refusals[i];
        const char *text = !r->spec                       ? base_text
                           : strcmp(r->spec, "wide") == 0 ? base_wide
                                                          : base_synth;
        const char *over[3] = {r->override1, r->override2, r->override3};
        size_t n_over = r->override3 ? 3 : r->override2 ? 2 : 1;
        struct gpt_job job;
        struct gpt_err err;
        gpt_err_clear(&err);
        int rc = gpt_jobspec_parse(text, strlen(text), over, n_over, &job, &err);
        print_message("%s %s: %s: %s\n", r->override1, r->override2 ? r->override2 : "", err.path,
                      err.msg);
        assert_int_equal(rc, -GPT_E_SPEC);
        assert_string_equal(err.path, r->path);
        if (r->msg)
            assert_non_null(strstr(err.msg, r->msg));
    }
}

static void test_limits_pass(void **state)
{
    (void)state;
    const char *over[] = {"model.n_layer=42", "model.vocab_size=2", "data.train_split=0.99",
                          "trainer.micro_batch=1024", "trainer.global_batch=1024"};
    struct gpt_job job;
    struct gpt_err err;
    assert_int_equal(gpt_jobspec_parse(base_text, strlen(base_text), over, 5, &job, &err), 0);
    assert_int_equal(job.model.n_layer, GPT_JOB_N_LAYER_MAX);
    const char *synth[] = {"data.digits=3", "model.block_size=9"};
    assert_int_equal(gpt_jobspec_parse(base_synth, strlen(base_synth), synth, 2, &job, &err), 0);
    /* micro_batch x block_size x 4 n_embd = 2^39, under the limit */
    const char *gemm[] = {"trainer.micro_batch=65536", "trainer.global_batch=65536",
                          "model.block_size=65536"};
    assert_int_equal(gpt_jobspec_parse(base_text, strlen(base_text), gemm, 3, &job, &err), 0);
    /* a text job with its own validation file may train on all of data.path */
    const char *val[] = {"data.train_split=1", "data.val_path=/tmp/v.txt"};
    assert_int_equal(gpt_jobspec_parse(base_text, strlen(base_text), val, 2, &job, &err), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_limits_pass),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
