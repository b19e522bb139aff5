/*
 * Unit tests of proto/jobspec_resume: which keys a resume may change, and
 * how a resume's overrides object becomes parser assignments: strings,
 * numbers and booleans become "key=value"; a key that may not change is
 * refused naming it; a key no job has gets the parser's "unknown key"; a
 * value of another JSON type and too many keys are refused; the
 * assignments, applied to a spec, give the extended job.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "jobspec.h"
#include "jobspec_resume.h"

static void test_keys(void **state)
{
    (void)state;
    assert_true(gpt_jobspec_resume_key_ok("trainer.max_steps"));
    assert_true(gpt_jobspec_resume_key_ok("optimizer.lr"));
    assert_true(gpt_jobspec_resume_key_ok("snapshot.keep"));
    /* Transports that give the same bits. */
    assert_true(gpt_jobspec_resume_key_ok("distributed.comm_shm"));
    assert_true(gpt_jobspec_resume_key_ok("distributed.shard_buffers"));
    assert_false(gpt_jobspec_resume_key_ok("distributed.sharding"));
    assert_false(gpt_jobspec_resume_key_ok("model.n_layer"));
    assert_false(gpt_jobspec_resume_key_ok("data.path"));
    assert_false(gpt_jobspec_resume_key_ok("trainer.micro_batch"));
    assert_false(gpt_jobspec_resume_key_ok("trainer.seed"));
    /* the attention variants may change the last bits: not on a resume */
    assert_false(gpt_jobspec_resume_key_ok("trainer.attention_forward"));
    assert_false(gpt_jobspec_resume_key_ok("trainer.attention_backward"));
    assert_false(gpt_jobspec_resume_key_ok("snapshot.dir"));
    assert_false(gpt_jobspec_resume_key_ok("trainer.max_steps.x"));
    assert_false(gpt_jobspec_resume_key_ok(""));
    /* The list function names the keys. */
    assert_non_null(strstr(gpt_jobspec_resume_keys(), "trainer.max_steps"));
    assert_non_null(strstr(gpt_jobspec_resume_keys(), "distributed.comm_shm"));
    assert_non_null(strstr(gpt_jobspec_resume_keys(), "distributed.shard_buffers"));
}

static void test_assignments(void **state)
{
    (void)state;
    struct gpt_err err;
    char **list;
    size_t n;
    json_t *o = json_pack("{s:s, s:i, s:f}", "trainer.max_steps", "600", "trainer.log_every", 7,
                          "optimizer.lr", 3e-4);
    assert_int_equal(gpt_jobspec_resume_assignments(o, &list, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_string_equal(list[0], "trainer.max_steps=600");
    assert_string_equal(list[1], "trainer.log_every=7");
    assert_int_equal(strncmp(list[2], "optimizer.lr=", 13), 0);
    double lr = strtod(list[2] + 13, NULL);
    assert_true(lr > 2.9999e-4 && lr < 3.0001e-4);

    const char *spec =
        "{\"model\": {\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 32,"
        " \"block_size\": 6, \"vocab_size\": 10},"
        " \"data\": {\"kind\": \"synthetic\", \"task\": \"addition\", \"digits\": 2},"
        " \"trainer\": {\"max_steps\": 300, \"micro_batch\": 4, \"global_batch\": 4}}";
    struct gpt_job job;
    assert_int_equal(
        gpt_jobspec_parse(spec, strlen(spec), (const char *const *)list, n, &job, &err), 0);
    assert_int_equal(job.trainer.max_steps, 600);
    assert_int_equal(job.trainer.log_every, 7);
    assert_true(job.optimizer.lr > 2.99e-4 && job.optimizer.lr < 3.01e-4);
    free(list);
    json_decref(o);

    /* No overrides: nothing allocated. */
    o = json_object();
    assert_int_equal(gpt_jobspec_resume_assignments(o, &list, &n, &err), 0);
    assert_null(list);
    assert_int_equal(n, 0);
    json_decref(o);
}

static void test_refusals(void **state)
{
    (void)state;
    struct gpt_err err;
    char **list = (char **)1;
    size_t n = 9;

    json_t *o = json_pack("{s:s, s:i}", "trainer.max_steps", "600", "model.n_layer", 4);
    assert_int_equal(gpt_jobspec_resume_assignments(o, &list, &n, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "model.n_layer");
    assert_non_null(strstr(err.msg, "cannot change when a job resumes"));
    assert_null(list);
    assert_int_equal(n, 0);
    json_decref(o);

    o = json_pack("{s:s}", "trainer.max_step", "600");
    assert_int_equal(gpt_jobspec_resume_assignments(o, &list, &n, &err), -GPT_E_SPEC);
    assert_non_null(strstr(err.msg, "unknown key"));
    json_decref(o);

    o = json_pack("{s:[i]}", "trainer.max_steps", 600);
    assert_int_equal(gpt_jobspec_resume_assignments(o, &list, &n, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "trainer.max_steps");
    json_decref(o);

    /* A value past the assignment's limit is refused, not truncated. */
    char big[2048];
    memset(big, '9', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    o = json_pack("{s:s}", "trainer.max_steps", big);
    assert_int_equal(gpt_jobspec_resume_assignments(o, &list, &n, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "trainer.max_steps");
    assert_non_null(strstr(err.msg, "longer than"));
    json_decref(o);

    o = json_object();
    for (int i = 0; i <= GPT_RESUME_OVERRIDES_MAX; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k%d", i);
        json_object_set_new(o, key, json_string("1"));
    }
    assert_int_equal(gpt_jobspec_resume_assignments(o, &list, &n, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "overrides");
    json_decref(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_assignments),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
