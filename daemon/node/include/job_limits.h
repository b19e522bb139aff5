/*
 * job_limits: what a job needs against what this node has, checked when a spec
 * is submitted or validated, before anything is queued or allocated (issue
 * 14): the memory the engine will allocate (engine/model_mem.h) against the
 * node's physical memory, its GPUs' memory and max_job_memory; and what the
 * engine would refuse once it opens the data (a file too short for one
 * window of block_size + 1 tokens, a vocabulary below the data's).
 *
 * Loop thread (stat() of the data files, no reads); does not log.
 */
#ifndef GPTD_JOB_LIMITS_H
#define GPTD_JOB_LIMITS_H

#include "config.h"
#include "gpt_err.h"
#include "jobspec.h"

/* Returns 0, or -GPT_E_LIMIT (memory) / -GPT_E_SPEC / -GPT_E_DATA with err
 * naming the job key, the estimate and the limit. `job` is validated
 * (gpt_jobspec_validate). */
int job_limits_check(const struct gpt_job *job, const struct config *cfg, struct gpt_err *err);

#endif
