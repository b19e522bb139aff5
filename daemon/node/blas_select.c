/*
 * blas_select: see blas_select.h.
 */
#include "blas_select.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "blas_core.h"

#define BLAS_ENV_CORE   "OPENBLAS_CORETYPE"
#define BLAS_ENV_PICKED "GPTD_OPENBLAS_PICKED"
#define BLAS_ENV_HOOK   "GPTD_TEST_OPENBLAS_FALLBACK"
#define BLAS_ENV_FORCED "GPTD_OPENBLAS_FALLBACK"

/* Who chose the core that runs. */
enum blas_by { BLAS_BY_OPENBLAS, BLAS_BY_GPTD, BLAS_BY_OPERATOR };

static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static enum blas_by blas_chosen_by(void)
{
    const char *set = env_nonempty(BLAS_ENV_CORE);
    const char *forced = env_nonempty(BLAS_ENV_FORCED);
    if (!set)
        return BLAS_BY_OPENBLAS;
    if (env_nonempty(BLAS_ENV_PICKED))
        return BLAS_BY_GPTD;
    /* The test hook's stand-in for OpenBLAS's own fallback. */
    if (forced && strcasecmp(forced, set) == 0)
        return BLAS_BY_OPENBLAS;
    return BLAS_BY_OPERATOR;
}

bool blas_select_env(void)
{
    if (!gpt_blas_core_dynamic())
        return false; /* a build for one CPU ignores OPENBLAS_CORETYPE */
    const char *hook = env_nonempty(BLAS_ENV_HOOK);
    if (hook && !env_nonempty(BLAS_ENV_CORE)) {
        if (setenv(BLAS_ENV_CORE, hook, 1) < 0 || setenv(BLAS_ENV_FORCED, hook, 1) < 0)
            return false;
        unsetenv(BLAS_ENV_HOOK);
        return true;
    }
    if (blas_chosen_by() != BLAS_BY_OPENBLAS)
        return false;
    const char *core = gpt_blas_core_name();
    const char *better = gpt_blas_core_better(core, gpt_blas_cpu_probe());
    if (!better)
        return false;
    if (setenv(BLAS_ENV_PICKED, core, 1) < 0)
        return false;
    if (setenv(BLAS_ENV_CORE, better, 1) < 0) {
        unsetenv(BLAS_ENV_PICKED);
        return false;
    }
    return true;
}

/* The core that runs and what could replace it, where a generic core runs
 * on a CPU that has more (only when the operator asked for it, or when the
 * library ignored gptd's request). */
static const char *blas_better_now(void)
{
    return gpt_blas_core_better(gpt_blas_core_name(), gpt_blas_cpu_probe());
}

void blas_select_describe(char *buf, size_t cap)
{
    const char *core = gpt_blas_core_name();
    const char *set = env_nonempty(BLAS_ENV_CORE);
    const char *better = blas_better_now();
    const char *isa = gpt_blas_isa_name(gpt_blas_cpu_probe().isa);
    switch (blas_chosen_by()) {
    case BLAS_BY_GPTD:
        if (strcasecmp(core, set) != 0)
            snprintf(buf, cap,
                     "OpenBLAS core %s (gptd asked for %s=%s on a CPU with %s; the "
                     "library did not take it)",
                     core, BLAS_ENV_CORE, set, isa);
        else
            snprintf(buf, cap,
                     "OpenBLAS core %s (chosen by gptd: OpenBLAS picked %s, a generic "
                     "core, on a CPU with %s)",
                     core, env_nonempty(BLAS_ENV_PICKED), isa);
        return;
    case BLAS_BY_OPERATOR:
        if (better)
            snprintf(buf, cap,
                     "OpenBLAS core %s (set by %s; this CPU has %s, where %s runs "
                     "faster)",
                     core, BLAS_ENV_CORE, isa, better);
        else
            snprintf(buf, cap, "OpenBLAS core %s (set by %s)", core, BLAS_ENV_CORE);
        return;
    case BLAS_BY_OPENBLAS:
        if (better) /* a build that ignores OPENBLAS_CORETYPE */
            snprintf(buf, cap, "OpenBLAS core %s (generic; this CPU has %s)", core, isa);
        else
            snprintf(buf, cap, "OpenBLAS core %s", core);
        return;
    }
}

void blas_select_summary(char *buf, size_t cap)
{
    enum blas_by by = blas_chosen_by();
    snprintf(buf, cap, "OpenBLAS %s%s", gpt_blas_core_name(),
             blas_better_now()    ? " generic"
             : by == BLAS_BY_GPTD ? " by gptd"
                                  : "");
}

json_t *blas_select_json(void)
{
    static const char *const by_name[] = {"openblas", "gptd", "operator"};
    enum blas_by by = blas_chosen_by();
    const char *config = openblas_get_config();
    json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "core", gpt_blas_core_name(), "chosen_by",
                          by_name[by], "cpu_isa", gpt_blas_isa_name(gpt_blas_cpu_probe().isa),
                          "config", config ? config : "");
    if (!o)
        return NULL;
    const char *picked = env_nonempty(BLAS_ENV_PICKED);
    const char *better = blas_better_now();
    if (by == BLAS_BY_GPTD && picked)
        json_object_set_new(o, "openblas_picked", json_string(picked));
    if (better)
        json_object_set_new(o, "better", json_string(better));
    return o;
}
