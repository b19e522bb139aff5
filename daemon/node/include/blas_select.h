/*
 * blas_select: gptd's choice of OpenBLAS core (blas_core.h) at start, and
 * how it reports the core that runs. OpenBLAS reads OPENBLAS_CORETYPE only
 * when it loads, so main() asks blas_select_env() first thing and, when it
 * changed the environment, re-executes itself (as it does for OpenMP's
 * wait policy). A value the operator set is always kept.
 *
 * The environment carries the decision across the exec, and so into every
 * process gptd starts itself:
 *   OPENBLAS_CORETYPE            the core asked for (OpenBLAS's variable)
 *   GPTD_OPENBLAS_PICKED         set by gptd with it: the generic core
 *                                OpenBLAS had picked on its own
 *   GPTD_TEST_OPENBLAS_FALLBACK  test hook only, documented in gptd(8):
 *                                where OPENBLAS_CORETYPE is unset, gptd
 *                                first runs itself on this core as if
 *                                OpenBLAS had fallen back to it
 *                                (GPTD_OPENBLAS_FALLBACK marks it), so a
 *                                test sees the correction on any CPU
 * Main thread before anything else for blas_select_env(); any thread for
 * the rest (they read the environment and the loaded library only).
 */
#ifndef GPTD_BLAS_SELECT_H
#define GPTD_BLAS_SELECT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Sets OPENBLAS_CORETYPE (and gptd's marks) when OpenBLAS fell back to a
 * core below what this CPU runs and the operator did not choose one, or
 * when the test hook asks for a fallback. True when it changed the
 * environment: the caller re-executes itself for the change to apply. */
bool blas_select_env(void);

/* One sentence for the start line: "OpenBLAS core SkylakeX (chosen by gptd:
 * OpenBLAS picked Prescott, a generic core, on a CPU with AVX-512)", or
 * with "set by OPENBLAS_CORETYPE", or the plain name. */
void blas_select_describe(char *buf, size_t cap);

/* The short form for `gptctl nodes`: "OpenBLAS SkylakeX" (with
 * " by gptd" when gptd chose it, " generic" when a slower core than the
 * CPU runs stays because the operator set it). */
void blas_select_summary(char *buf, size_t cap);

/* {"core", "chosen_by": "openblas"|"gptd"|"operator", "openblas_picked"?,
 * "cpu_isa", "better"?, "config"}; new reference, NULL on ENOMEM. */
json_t *blas_select_json(void);

#endif
