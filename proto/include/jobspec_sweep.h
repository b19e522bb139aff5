/*
 * jobspec_sweep: Hydra's multirun for job overrides. With -m, an override
 * whose value lists several choices ("optimizer.lr=1e-3,3e-4") makes one
 * job per choice, and several such overrides make their cartesian product
 * (the first varies slowest). Commas inside [...] or quotes do not split
 * ("optimizer.betas=[0.9,0.95]" is one value). Pure.
 */
#ifndef GPT_JOBSPEC_SWEEP_H
#define GPT_JOBSPEC_SWEEP_H

#include <stddef.h>
#include <stdint.h>

#include "gpt_err.h"

#define GPT_SWEEP_JOBS_MAX 256 /* jobs one sweep may make */
#define GPT_SWEEP_ID_MAX   64  /* bytes of a sweep id, NUL included */

struct gpt_sweep {
    size_t n_jobs; /* combinations */
    size_t n_keys; /* overrides per job (one per override given) */
    char **assign; /* n_jobs x n_keys "a.b=value", row-major; owned */
};

/* Expands `n_over` overrides into jobs. An empty choice, a value with an
 * unclosed bracket or quote, or more than GPT_SWEEP_JOBS_MAX jobs is
 * -GPT_E_SPEC naming the key. On success free with gpt_sweep_free. */
int gpt_sweep_expand(const char *const *over, size_t n_over, struct gpt_sweep *ret,
                     struct gpt_err *err);
void gpt_sweep_free(struct gpt_sweep *s);

/* One run of a sweep, for its summary table. */
struct gpt_sweep_result {
    int64_t id;           /* the job (gptctl) or the run's index (gptd run -m) */
    double best_val_loss; /* NAN: no validation loss */
    double final_loss;    /* NAN: no training loss */
    int64_t steps, tokens;
    double time_s;     /* NAN: unknown */
    const char *label; /* its overrides, "lr=1e-3 n_embd=48" (borrowed) */
    const char *state; /* borrowed; may be NULL */
};

/* Sorts a sweep's runs best first: by best validation loss, then by final
 * training loss (a run without either comes after those with it), then by
 * id. */
void gpt_sweep_results_sort(struct gpt_sweep_result *r, size_t n);

/* The leaf names of overrides: "optimizer.lr=1e-3" -> "lr=1e-3", written
 * space-separated into buf (truncated to cap). */
void gpt_sweep_label(const char *const *assign, size_t n, char *buf, size_t cap);

/* Whether `id` is a valid sweep id: 1..GPT_SWEEP_ID_MAX-1 bytes of
 * [A-Za-z0-9_.-]. */
int gpt_sweep_id_ok(const char *id);

#endif
