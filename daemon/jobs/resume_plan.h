/*
 * resume_plan: what resuming a finished job will do, decided before it is
 * queued again: the job's spec with the resume's overrides applied (only
 * keys that may change between runs: proto/jobspec_resume.h), the step it
 * continues from, a refusal when that step already reaches the (new) end,
 * and the learning rate before and after, so that an extension that
 * reshapes the schedule says so. Loop thread (reads the database).
 */
#ifndef GPTD_RESUME_PLAN_H
#define GPTD_RESUME_PLAN_H

#include <jansson.h>
#include <stdint.h>

#include "db.h"
#include "gpt_err.h"

struct resume_plan {
    char *spec_json;    /* the new spec (malloc'd); NULL when no key changed */
    int64_t from_step;  /* step of the snapshot it continues from; 0 = none */
    int64_t max_steps;  /* trainer.max_steps after the overrides; 0 = by epochs */
    double lr_last;     /* rate of the last step trained (old spec); NAN if none */
    double lr_next;     /* rate of the next step (new spec); NAN if unknown */
    double lr_end;      /* rate of the last step to come; NAN if unknown */
    char changes[1024]; /* "trainer.max_steps 300 -> 600, ..." ("" when none) */
};

/* Plans the resume of job `j` (its spec_json read with db_job_get) from
 * snapshot `snapshot_step` (-1: the newest recorded, if any) with
 * `overrides` (an object, or NULL). Refuses (-GPT_E_SPEC) a key that may
 * not change, and (-EALREADY) a resume with nothing left to train, saying
 * which step the snapshot is at and what to raise. */
int resume_plan_make(struct db *db, const struct db_job *j, int64_t snapshot_step,
                     const json_t *overrides, struct resume_plan *ret, struct gpt_err *err);
void resume_plan_done(struct resume_plan *p);

/* The plan as the resume reply's extra fields ("from_step", "max_steps",
 * "changes", "lr_last", "lr_next", "lr_end"); NULL on ENOMEM. */
json_t *resume_plan_json(const struct resume_plan *p);

#endif
