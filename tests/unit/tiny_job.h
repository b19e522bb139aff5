/*
 * tiny_job: the job of unit tests that run gpt_train on the CPU or a fake
 * backend: two layers, two heads, width n_embd, the synthetic addition
 * task, `steps` steps of one micro-batch of 2 rows, a metric every step,
 * no evaluation before the last step, no snapshots, and a configured peak
 * (1 GFLOP/s) so that no run spends its start measuring the CPU's. A test
 * changes what it is about after the call, then checks the job with
 * tiny_job_check. Header-only.
 */
#ifndef GPT_TEST_TINY_JOB_H
#define GPT_TEST_TINY_JOB_H

#include <stdio.h>

#include "jobspec.h"

static inline void tiny_job(struct gpt_job *job, int n_embd, int steps)
{
    gpt_jobspec_defaults(job);
    job->data.kind = GPT_DATA_SYNTHETIC;
    snprintf(job->data.task, sizeof(job->data.task), "addition");
    job->data.digits = 2;
    job->model.n_layer = 2;
    job->model.n_head = 2;
    job->model.n_embd = n_embd;
    job->model.block_size = 16;
    job->trainer.max_steps = steps;
    job->trainer.micro_batch = 2;
    job->trainer.global_batch = 2;
    job->trainer.threads = 1;
    job->trainer.peak_gflops = 1;
    job->trainer.log_every = 1;
    job->trainer.eval_every = 0;
    job->snapshot.every = 0;
}

/* gpt_jobspec_validate's result for the job the test built; when it
 * fails, the key and the reason go to stderr. */
static inline int tiny_job_check(struct gpt_job *job)
{
    struct gpt_err err;
    int rc = gpt_jobspec_validate(job, &err);
    if (rc < 0)
        fprintf(stderr, "job: %s: %s\n", err.path, err.msg);
    return rc;
}

#endif
