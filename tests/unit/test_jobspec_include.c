/*
 * Unit tests of proto/jobspec_include (gpt_jobspec_load's include chain):
 * a three-file chain merges in order (includes, then the file's own keys,
 * then overrides); Hydra's defaults list with {group: name}, extensions
 * left out and _self_ placed first; JSON files include YAML ones and back;
 * errors name the file and, for YAML, the line that set the bad key, and
 * "the command line" for an override; cycles, too deep chains, bad entries
 * and missing files are refused naming the file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "jobspec.h"

static char dir[64];

static void put(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    mkdir(path, 0700);
    *slash = '/';
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static const char *at(const char *name)
{
    static char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return path;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/test_jobspec_inc_XXXXXX");
    assert_non_null(mkdtemp(dir));
    put("base.yaml", "data: {kind: synthetic, task: addition, digits: 2}\n"
                     "trainer:\n"
                     "  max_steps: 30\n"
                     "  micro_batch: 4\n"
                     "  global_batch: 8\n"
                     "optimizer: {lr: 0.001}\n");
    put("model/tiny.yaml", "model:\n"
                           "  n_layer: 2\n"
                           "  n_head: 2\n"
                           "  n_embd: 32\n"
                           "  block_size: 6\n"
                           "  vocab_size: 10\n");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_chain(void **state)
{
    (void)state;
    struct gpt_job job;
    struct gpt_err err;
    put("job.yaml", "include: [base.yaml, model/tiny.yaml]\n"
                    "name: composed\n"
                    "trainer:\n"
                    "  max_steps: 40\n");
    const char *ov[] = {"optimizer.lr=0.002"};
    if (gpt_jobspec_load(at("job.yaml"), ov, 1, &job, &err) != 0)
        fail_msg("%s: %s", err.path, err.msg);
    assert_string_equal(job.name, "composed");
    assert_int_equal(job.trainer.max_steps, 40);  /* the file over its include */
    assert_int_equal(job.trainer.micro_batch, 4); /* kept from base.yaml */
    assert_int_equal(job.model.n_layer, 2);       /* from model/tiny.yaml */
    assert_true(job.optimizer.lr > 0.0019 && job.optimizer.lr < 0.0021); /* override last */

    /* A JSON file includes the YAML one (a chain of three levels). */
    put("top.json", "{\"include\": [\"job.yaml\"], \"trainer\": {\"max_steps\": 50}}");
    if (gpt_jobspec_load(at("top.json"), NULL, 0, &job, &err) != 0)
        fail_msg("%s: %s", err.path, err.msg);
    assert_int_equal(job.trainer.max_steps, 50);
    assert_string_equal(job.name, "composed");
}

static void test_defaults(void **state)
{
    (void)state;
    struct gpt_job job;
    struct gpt_err err;
    /* _self_ first: the included files win over the file's own keys. */
    put("hydra.yaml", "defaults:\n"
                      "  - _self_\n"
                      "  - base\n"
                      "  - model: tiny\n"
                      "trainer:\n"
                      "  max_steps: 99\n");
    if (gpt_jobspec_load(at("hydra.yaml"), NULL, 0, &job, &err) != 0)
        fail_msg("%s: %s", err.path, err.msg);
    assert_int_equal(job.trainer.max_steps, 30);
    assert_int_equal(job.model.n_embd, 32);
}

static void test_errors_name_origin(void **state)
{
    (void)state;
    struct gpt_job job;
    struct gpt_err err;
    put("typo.yaml", "include: [base.yaml, model/tiny.yaml]\n"
                     "trainer:\n"
                     "  max_stepz: 40\n");
    assert_int_equal(gpt_jobspec_load(at("typo.yaml"), NULL, 0, &job, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "trainer.max_stepz");
    assert_non_null(strstr(err.msg, "typo.yaml:3: "));

    /* A bad value in an included file names that file and line. */
    put("badmodel.yaml", "model:\n  n_layer: many\n");
    put("usebad.yaml", "include: [base.yaml, badmodel.yaml]\n");
    assert_int_equal(gpt_jobspec_load(at("usebad.yaml"), NULL, 0, &job, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "model.n_layer");
    assert_non_null(strstr(err.msg, "badmodel.yaml:2: "));
    assert_non_null(strstr(err.msg, "\"many\""));

    /* An override names the command line. */
    const char *ov[] = {"trainer.max_step=5"};
    assert_int_equal(gpt_jobspec_load(at("job.yaml"), ov, 1, &job, &err), -GPT_E_SPEC);
    assert_non_null(strstr(err.msg, "the command line: unknown key"));
}

static void test_refusals(void **state)
{
    (void)state;
    struct gpt_job job;
    struct gpt_err err;
    put("a.yaml", "include: [b.yaml]\n");
    put("b.yaml", "include: [a.yaml]\n");
    assert_int_equal(gpt_jobspec_load(at("a.yaml"), NULL, 0, &job, &err), -GPT_E_SPEC);
    assert_non_null(strstr(err.msg, "includes itself"));

    put("self.yaml", "include: [self.yaml]\n");
    assert_int_equal(gpt_jobspec_load(at("self.yaml"), NULL, 0, &job, &err), -GPT_E_SPEC);
    assert_non_null(strstr(err.msg, "includes itself"));

    put("missing.yaml", "include: [nothere.yaml]\n");
    assert_int_equal(gpt_jobspec_load(at("missing.yaml"), NULL, 0, &job, &err), -GPT_E_SPEC);
    assert_non_null(strstr(err.msg, "nothere.yaml"));

    put("notlist.yaml", "include: base.yaml\n");
    assert_int_equal(gpt_jobspec_load(at("notlist.yaml"), NULL, 0, &job, &err), -GPT_E_SPEC);
    assert_non_null(strstr(err.msg, "expected a list of files"));

    put("both.yaml", "include: [base.yaml]\ndefaults: [base]\n");
    assert_int_equal(gpt_jobspec_load(at("both.yaml"), NULL, 0, &job, &err), -GPT_E_SPEC);
    assert_non_null(strstr(err.msg, "not both"));

    put("num.yaml", "include: [3]\n");
    assert_int_equal(gpt_jobspec_load(at("num.yaml"), NULL, 0, &job, &err), -GPT_E_SPEC);
    assert_non_null(strstr(err.msg, "must be a file name"));

    /* A chain deeper than the limit: d0 -> d1 -> ... -> d12. */
    for (int i = 0; i < 12; i++) {
        char name[32], text[64];
        snprintf(name, sizeof(name), "d%d.yaml", i);
        snprintf(text, sizeof(text), "include: [d%d.yaml]\n", i + 1);
        put(name, text);
    }
    put("d12.yaml", "name: deep\n");
    assert_int_equal(gpt_jobspec_load(at("d0.yaml"), NULL, 0, &job, &err), -GPT_E_SPEC);
    assert_non_null(strstr(err.msg, "nest deeper"));
}

int main(void)
{
#ifndef GPTD_HAVE_YAML
    return 77; /* the chains are YAML files; install-deps.sh installs libyaml */
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_errors_name_origin),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
