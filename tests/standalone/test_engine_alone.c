/*
 * The engine is a library of its own: this program links gptengine (and
 * through it gptconfig, gpterr and the third-party libraries) but not
 * gptproto or jansson, and includes no proto header. It fills the engine's
 * configuration (gpt_config.h) by hand, as any embedder without the job
 * spec parser would, trains a tiny model for a few steps on the synthetic
 * addition task and checks the records the hooks received (gpt_record.h).
 * Linking it at all proves the engine needs nothing of proto; the run
 * proves the plain structs are all the engine reads.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gpt_config.h"
#include "gpt_record.h"
#include "model_mem.h"
#include "trainer.h"

struct seen {
    int metrics, events, started, done;
    int64_t last_step;
    double last_loss;
};

static void on_metric(void *ctx, const struct gpt_metric *m)
{
    struct seen *s = ctx;
    s->metrics++;
    s->last_step = m->step;
    s->last_loss = m->loss;
}

static void on_event(void *ctx, const struct gpt_event *e)
{
    struct seen *s = ctx;
    s->events++;
    if (strcmp(e->kind, "start") == 0)
        s->started++;
    if (strcmp(e->kind, "done") == 0)
        s->done++;
}

/* Every field the engine reads, set without gpt_jobspec_defaults. */
static void job_by_hand(struct gpt_job *job)
{
    memset(job, 0, sizeof(*job));
    snprintf(job->name, sizeof(job->name), "alone");
    job->model = (struct gpt_model_config){
        .n_layer = 1, .n_head = 2, .n_embd = 32, .block_size = 16, .vocab_size = 0};
    job->data.kind = GPT_DATA_SYNTHETIC;
    snprintf(job->data.task, sizeof(job->data.task), "addition");
    job->data.digits = 2;
    job->data.tokenizer = GPT_TOK_CHAR;
    job->data.train_split = 0.9;
    job->trainer = (struct gpt_trainer_spec){.max_steps = 6,
                                             .micro_batch = 2,
                                             .global_batch = 4,
                                             .grad_clip = 1.0,
                                             .log_every = 1,
                                             .eval_every = 0,
                                             .eval_batches = 1,
                                             .seed = 7,
                                             .precision = GPT_PREC_FP32,
                                             .tf32 = 1,
                                             .threads = 1,
                                             .peak_gflops = 1};
    job->optimizer = (struct gpt_optim_spec){.lr = 1e-3,
                                             .min_lr = 1e-4,
                                             .warmup_steps = 2,
                                             .schedule = GPT_SCHED_COSINE,
                                             .weight_decay = 0.1,
                                             .beta1 = 0.9,
                                             .beta2 = 0.95,
                                             .eps = 1e-8};
    job->distributed = (struct gpt_dist_spec){.nodes_min = 1,
                                              .nodes_max = 1,
                                              .backend = GPT_COMM_LOCAL,
                                              .sharding = GPT_SHARD_NONE,
                                              .max_restarts = 0,
                                              .wait_timeout_s = 10};
    job->snapshot.on_invalid = GPT_SNAPSHOT_ON_INVALID_FAIL; /* dir "": no snapshots */
}

static void test_train_without_proto(void **state)
{
    (void)state;
    struct gpt_job job;
    job_by_hand(&job);
    struct seen seen = {0};
    struct gpt_trainer_opts o = {
        .job = &job,
        .hooks = {.ctx = &seen, .metric = on_metric, .event = on_event},
    };
    struct gpt_train_result res;
    struct gpt_err err = {0};
    int rc = gpt_train(&o, &res, &err);
    if (rc < 0)
        print_message("gpt_train: %s: %s\n", err.path, err.msg);
    assert_int_equal(rc, GPT_TRAIN_DONE);
    assert_int_equal(res.step, 6);
    assert_true(isfinite(res.final_loss) && res.final_loss > 0);
    assert_int_equal(seen.started, 1);
    assert_int_equal(seen.done, 1);
    assert_true(seen.metrics >= 6); /* log_every = 1 */
    assert_int_equal(seen.last_step, 6);
    assert_true(isfinite(seen.last_loss));
    assert_string_equal(res.last_snapshot, "");
}

/* The memory estimate reads the same plain model config. */
static void test_mem_estimate_from_plain_config(void **state)
{
    (void)state;
    struct gpt_job job;
    job_by_hand(&job);
    job.model.vocab_size = 64;
    struct gpt_model_mem small, big;
    gpt_model_mem_estimate(&job.model, 2, GPT_SHARD_NONE, 0, 1, 0, 0, &small);
    job.model.n_layer = 4;
    gpt_model_mem_estimate(&job.model, 2, GPT_SHARD_NONE, 0, 1, 0, 0, &big);
    assert_true(small.n_params > 0 && small.total > 0);
    assert_true(big.n_params > small.n_params);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_without_proto),
        cmocka_unit_test(test_mem_estimate_from_plain_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
