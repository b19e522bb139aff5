/*
 * Unit tests of proto/jobspec_sweep: the cartesian product of multirun
 * choices (first override slowest), single values kept in every job,
 * commas inside brackets and quotes not splitting, and refusals (empty
 * choice, unclosed bracket, no '=', too many jobs) naming the key; sweep
 * ids.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "jobspec_sweep.h"

static void test_product(void **state)
{
    (void)state;
    struct gpt_sweep sw;
    struct gpt_err err;
    const char *over[] = {"optimizer.lr=1e-3,3e-4", "trainer.max_steps=100", "model.n_layer=4,6,8"};
    assert_int_equal(gpt_sweep_expand(over, 3, &sw, &err), 0);
    assert_int_equal(sw.n_jobs, 6);
    assert_int_equal(sw.n_keys, 3);
    static const char *const want[6][3] = {
        {"optimizer.lr=1e-3", "trainer.max_steps=100", "model.n_layer=4"},
        {"optimizer.lr=1e-3", "trainer.max_steps=100", "model.n_layer=6"},
        {"optimizer.lr=1e-3", "trainer.max_steps=100", "model.n_layer=8"},
        {"optimizer.lr=3e-4", "trainer.max_steps=100", "model.n_layer=4"},
        {"optimizer.lr=3e-4", "trainer.max_steps=100", "model.n_layer=6"},
        {"optimizer.lr=3e-4", "trainer.max_steps=100", "model.n_layer=8"},
    };
    for (size_t j = 0; j < 6; j++)
        for (size_t k = 0; k < 3; k++)
            assert_string_equal(sw.assign[j * 3 + k], want[j][k]);
    gpt_sweep_free(&sw);
    assert_null(sw.assign);

    /* No overrides: one job with nothing to set. */
    assert_int_equal(gpt_sweep_expand(NULL, 0, &sw, &err), 0);
    assert_int_equal(sw.n_jobs, 1);
    assert_int_equal(sw.n_keys, 0);
    gpt_sweep_free(&sw);
}

static void test_brackets_quotes(void **state)
{
    (void)state;
    struct gpt_sweep sw;
    struct gpt_err err;
    const char *over[] = {"optimizer.betas=[0.9,0.95],[0.9,0.99]", "name=\"a,b\",c"};
    assert_int_equal(gpt_sweep_expand(over, 2, &sw, &err), 0);
    assert_int_equal(sw.n_jobs, 4);
    assert_string_equal(sw.assign[0], "optimizer.betas=[0.9,0.95]");
    assert_string_equal(sw.assign[1], "name=\"a,b\"");
    assert_string_equal(sw.assign[3], "name=c");
    assert_string_equal(sw.assign[6], "optimizer.betas=[0.9,0.99]");
    gpt_sweep_free(&sw);
}

static void test_refusals(void **state)
{
    (void)state;
    struct gpt_sweep sw;
    struct gpt_err err;
    const char *empty[] = {"optimizer.lr=1e-3,,3e-4"};
    assert_int_equal(gpt_sweep_expand(empty, 1, &sw, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "optimizer.lr");
    assert_non_null(strstr(err.msg, "empty choice"));
    const char *trailing[] = {"optimizer.lr=1e-3,"};
    assert_int_equal(gpt_sweep_expand(trailing, 1, &sw, &err), -GPT_E_SPEC);
    const char *open[] = {"optimizer.betas=[0.9,0.95"};
    assert_int_equal(gpt_sweep_expand(open, 1, &sw, &err), -GPT_E_SPEC);
    assert_non_null(strstr(err.msg, "unclosed bracket"));
    const char *quote[] = {"name=\"abc"};
    assert_int_equal(gpt_sweep_expand(quote, 1, &sw, &err), -GPT_E_SPEC);
    assert_non_null(strstr(err.msg, "unclosed quote"));
    const char *noeq[] = {"trainer.max_steps"};
    assert_int_equal(gpt_sweep_expand(noeq, 1, &sw, &err), -GPT_E_SPEC);
    /* 17 x 16 = 272 jobs > 256. */
    char a[256] = "a.b=0", b[256] = "c.d=0";
    for (int i = 1; i < 17; i++)
        snprintf(a + strlen(a), sizeof(a) - strlen(a), ",%d", i);
    for (int i = 1; i < 16; i++)
        snprintf(b + strlen(b), sizeof(b) - strlen(b), ",%d", i);
    const char *many[] = {a, b};
    assert_int_equal(gpt_sweep_expand(many, 2, &sw, &err), -GPT_E_SPEC);
    assert_non_null(strstr(err.msg, "more than 256 jobs"));
}

static void test_ids(void **state)
{
    (void)state;
    assert_true(gpt_sweep_id_ok("sw-01ab23cd"));
    assert_true(gpt_sweep_id_ok("lr_sweep.2"));
    assert_false(gpt_sweep_id_ok(""));
    assert_false(gpt_sweep_id_ok("a b"));
    assert_false(gpt_sweep_id_ok("x;rm"));
    char longid[80];
    memset(longid, 'a', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    assert_false(gpt_sweep_id_ok(longid));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_product),
        cmocka_unit_test(test_brackets_quotes),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
