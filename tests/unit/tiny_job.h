/*
 * tiny_job: the job of unit tests that run gpt_train on a fake backend
 * (test_peak, test_attn_guard): two layers, two heads, width n_embd, the
 * synthetic addition task, `steps` steps of one micro-batch of 2 rows,
 * a metric every step, no evaluation, no snapshots. Header-only.
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
    job->trainer.log_every = 1;
    job->trainer.eval_every = 0;
    job->snapshot.every = 0;
}

#endif
