/*
 * test_job_limits_mem: the submit-time memory check (node/job_limits.c)
 * counts full sharding's gathered unit buffers as distributed.shard_buffers
 * sets them:
 *  - two blocks at world 1, where the automatic count is one buffer: with
 *    max_job_memory between the one- and the two-buffer estimates, a spec
 *    with shard_buffers 1 (or auto) is accepted and one with 2 is refused,
 *    the error naming distributed.shard_buffers (its key and its text);
 *  - a limit below even the one-buffer estimate names a model key instead.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "job_limits.h"
#include "jobspec.h"
#include "model_mem.h"
#include "unit/tiny_job.h"

/* A job one CPU worker trains with full sharding (no GPU is counted, on
 * any host: the ring is the communicator). */
static void sharded_job(struct gpt_job *job, int shard_buffers)
{
    tiny_job(job, 256, 10);
    job->distributed.sharding = GPT_SHARD_FULL;
    job->distributed.shard_buffers = shard_buffers;
    job->distributed.backend = GPT_COMM_TCP;
    job->distributed.workers_per_node = 1;
    assert_int_equal(tiny_job_check(job), 0);
}

/* The node-wide estimate of job_limits for `job` with `bufs` buffers (one
 * worker: the worker's total). */
static uint64_t estimate(const struct gpt_job *job, int bufs)
{
    struct gpt_model_config mc = job->model;
    mc.vocab_size = 10; /* the synthetic task's */
    struct gpt_model_mem m;
    gpt_model_mem_estimate(&mc, job->trainer.micro_batch, GPT_SHARD_FULL, bufs, 1, 0, 0, &m);
    assert_int_equal(m.shard_buffers, bufs);
    return m.total;
}

static void test_second_buffer_refused(void **state)
{
    (void)state;
    struct gpt_job job;
    sharded_job(&job, 2);
    uint64_t one = estimate(&job, 1), two = estimate(&job, 2);
    print_message("estimate: 1 buffer %llu bytes, 2 buffers %llu\n", (unsigned long long)one,
                  (unsigned long long)two);
    assert_true(two > one);

    struct config cfg;
    config_defaults(&cfg);
    cfg.max_job_memory = (int64_t)(one + (two - one) / 2);
    struct gpt_err err;
    memset(&err, 0, sizeof(err));
    assert_int_equal(job_limits_check(&job, &cfg, &err), -GPT_E_LIMIT);
    print_message("%s: %s\n", err.path, err.msg);
    assert_string_equal(err.path, "distributed.shard_buffers");
    assert_non_null(strstr(err.msg, "distributed.shard_buffers=2 (with 1 it fits)"));
    assert_non_null(strstr(err.msg, "(max_job_memory)"));

    sharded_job(&job, 1);
    assert_int_equal(job_limits_check(&job, &cfg, &err), 0);
    /* Auto picks one buffer for two blocks at world 1. */
    sharded_job(&job, 0);
    assert_int_equal(job_limits_check(&job, &cfg, &err), 0);
}

static void test_model_key_when_one_is_too_much(void **state)
{
    (void)state;
    struct gpt_job job;
    sharded_job(&job, 2);
    struct config cfg;
    config_defaults(&cfg);
    cfg.max_job_memory = (int64_t)(estimate(&job, 1) / 2);
    struct gpt_err err;
    memset(&err, 0, sizeof(err));
    assert_int_equal(job_limits_check(&job, &cfg, &err), -GPT_E_LIMIT);
    print_message("%s: %s\n", err.path, err.msg);
    assert_string_equal(err.path, "model.n_embd");
    assert_non_null(strstr(err.msg, "distributed.shard_buffers=2"));
    assert_null(strstr(err.msg, "with 1 it fits"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_second_buffer_refused),
        cmocka_unit_test(test_model_key_when_one_is_too_much),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
