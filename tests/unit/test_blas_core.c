/*
 * test_blas_core: gptd's choice of OpenBLAS core (blas_core.h,
 * blas_select.h) on made-up CPUs and core names:
 *  - a generic SSE core on a CPU with AVX-512, AVX2 (Intel and AMD) or
 *    AVX gets SkylakeX, Haswell, Zen or Sandybridge; a core that fits the
 *    CPU, a better one, or an unknown name on either side gets nothing;
 *  - names match case-insensitively and unknown names are unknown;
 *  - blas_select_env() leaves an OPENBLAS_CORETYPE the operator set, and
 *    turns the test hook into OPENBLAS_CORETYPE plus its mark, once.
 * The process's own OPENBLAS_CORETYPE is saved and put back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "blas_core.h"
#include "blas_select.h"

static void test_better(void **state)
{
    (void)state;
    const struct {
        const char *core;
        enum gpt_blas_isa isa;
        bool amd;
        const char *want;
    } cases[] = {
        {"Prescott", GPT_BLAS_ISA_AVX512, false, "SkylakeX"},
        {"Prescott", GPT_BLAS_ISA_AVX512, true, "SkylakeX"},
        {"prescott", GPT_BLAS_ISA_AVX2, false, "Haswell"},
        {"Nehalem", GPT_BLAS_ISA_AVX2, true, "Zen"},
        {"Core2", GPT_BLAS_ISA_AVX, false, "Sandybridge"},
        {"Sandybridge", GPT_BLAS_ISA_AVX512, false, "SkylakeX"},
        {"Haswell", GPT_BLAS_ISA_AVX512, false, "SkylakeX"},
        {"Haswell", GPT_BLAS_ISA_AVX2, false, NULL},
        {"Zen", GPT_BLAS_ISA_AVX2, true, NULL},
        {"SkylakeX", GPT_BLAS_ISA_AVX512, false, NULL},
        {"Cooperlake", GPT_BLAS_ISA_AVX512, false, NULL},
        {"Sapphirerapids", GPT_BLAS_ISA_AVX512, false, NULL},
        {"SkylakeX", GPT_BLAS_ISA_AVX2, false, NULL}, /* never downwards */
        {"Prescott", GPT_BLAS_ISA_SSE, false, NULL},
        {"Prescott", GPT_BLAS_ISA_UNKNOWN, false, NULL},
        {"Graniterapids", GPT_BLAS_ISA_AVX512, false, NULL}, /* newer than the table */
        {NULL, GPT_BLAS_ISA_AVX512, false, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct gpt_blas_cpu cpu = {cases[i].isa, cases[i].amd};
        const char *got = gpt_blas_core_better(cases[i].core, cpu);
        if (cases[i].want)
            assert_string_equal(got, cases[i].want);
        else
            assert_null(got);
    }
    assert_int_equal(gpt_blas_core_isa("SKYLAKEX"), GPT_BLAS_ISA_AVX512);
    assert_int_equal(gpt_blas_core_isa("Bulldozer"), GPT_BLAS_ISA_AVX);
    assert_int_equal(gpt_blas_core_isa("Excavator"), GPT_BLAS_ISA_AVX2);
    assert_int_equal(gpt_blas_core_isa(""), GPT_BLAS_ISA_UNKNOWN);
    assert_string_equal(gpt_blas_isa_name(GPT_BLAS_ISA_AVX512), "AVX-512");
    /* Whatever this host's CPU is, the core the library runs is named. */
    assert_true(strlen(gpt_blas_core_name()) > 0);
}

/* The environment the test changes, saved and restored around it. */
static const char *const env_names[] = {"OPENBLAS_CORETYPE", "GPTD_OPENBLAS_PICKED",
                                        "GPTD_TEST_OPENBLAS_FALLBACK", "GPTD_OPENBLAS_FALLBACK"};
#define N_ENV (sizeof(env_names) / sizeof(env_names[0]))

static void env_restore(char *const saved[N_ENV])
{
    for (size_t i = 0; i < N_ENV; i++) {
        if (saved[i])
            setenv(env_names[i], saved[i], 1);
        else
            unsetenv(env_names[i]);
        free(saved[i]);
    }
}

static void test_select_env(void **state)
{
    (void)state;
    if (!gpt_blas_core_dynamic())
        skip(); /* OPENBLAS_CORETYPE means nothing to a single-CPU build */
    char *saved[N_ENV];
    for (size_t i = 0; i < N_ENV; i++) {
        const char *v = getenv(env_names[i]);
        saved[i] = v ? strdup(v) : NULL;
        unsetenv(env_names[i]);
    }

    /* The operator's setting stands, hook or not. */
    setenv("OPENBLAS_CORETYPE", "Prescott", 1);
    setenv("GPTD_TEST_OPENBLAS_FALLBACK", "Core2", 1);
    assert_false(blas_select_env());
    assert_string_equal(getenv("OPENBLAS_CORETYPE"), "Prescott");
    assert_null(getenv("GPTD_OPENBLAS_PICKED"));
    json_t *j = blas_select_json();
    assert_string_equal(json_string_value(json_object_get(j, "chosen_by")), "operator");
    json_decref(j);

    /* The hook: a fallback stands in for OpenBLAS's, marked as such. */
    unsetenv("OPENBLAS_CORETYPE");
    assert_true(blas_select_env());
    assert_string_equal(getenv("OPENBLAS_CORETYPE"), "Core2");
    assert_string_equal(getenv("GPTD_OPENBLAS_FALLBACK"), "Core2");
    assert_null(getenv("GPTD_TEST_OPENBLAS_FALLBACK"));
    j = blas_select_json();
    assert_string_equal(json_string_value(json_object_get(j, "chosen_by")), "openblas");
    json_decref(j);

    /* Once gptd chose, it does not choose again. */
    setenv("GPTD_OPENBLAS_PICKED", "Core2", 1);
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    assert_false(blas_select_env());
    assert_string_equal(getenv("OPENBLAS_CORETYPE"), "SkylakeX");
    j = blas_select_json();
    assert_string_equal(json_string_value(json_object_get(j, "chosen_by")), "gptd");
    json_decref(j);
    env_restore(saved);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_better),
        cmocka_unit_test(test_select_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
