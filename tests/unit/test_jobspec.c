/*
 * test_jobspec: the job spec: defaults, a table of malformed specs and
 * overrides with the exact error path each must report, round trips through
 * gpt_jobspec_to_json, overrides before validation, YAML against JSON, data
 * path checks, the help output and the example jobs in etc/jobs/.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobspec.h"
#include "flash_tc.h"
#include "jobspec_int.h"

#define PATH_OK "\"data\": {\"path\": \"/nonexistent/input.txt\"}"

static int parse(const char *json, const char *override, struct gpt_job *job, struct gpt_err *err)
{
    const char *ov[1] = {override};
    gpt_err_clear(err);
    return gpt_jobspec_parse(json, strlen(json), ov, override ? 1 : 0, job, err);
}

/* Compares two jobs key by key through the table (padding is not compared). */
static void assert_jobs_equal(const struct gpt_job *a, const struct gpt_job *b)
{
    for (size_t k = 0; k < jobspec_n_entries; k++) {
        const struct jobspec_entry *e = &jobspec_entries[k];
        size_t n;
        switch (e->type) {
        case JOBSPEC_INT64:
        case JOBSPEC_UINT64:
        case JOBSPEC_DOUBLE:
        case JOBSPEC_BETAS:
            n = 8;
            break;
        case JOBSPEC_STRING:
            n = e->size;
            break;
        default:
            n = sizeof(int);
            break;
        }
        if (memcmp((const char *)a + e->off, (const char *)b + e->off, n) != 0 ||
            ((e->type == JOBSPEC_BETAS || e->type == JOBSPEC_NODES) &&
             memcmp((const char *)a + e->off2, (const char *)b + e->off2, n) != 0))
            fail_msg("%s differs", e->path);
    }
}

static void test_defaults(void **state)
{
    struct gpt_job job;
    struct gpt_err err;
    (void)state;

    gpt_jobspec_defaults(&job);
    assert_int_equal(job.model.n_layer, 4);
    assert_int_equal(job.model.n_head, 4);
    assert_int_equal(job.model.n_embd, 128);
    assert_int_equal(job.model.block_size, 128);
    assert_int_equal(job.model.vocab_size, 0);
    assert_int_equal(job.data.kind, GPT_DATA_TEXT);
    assert_int_equal(job.data.tokenizer, GPT_TOK_CHAR);
    assert_true(job.data.train_split == 0.9);
    assert_int_equal(job.trainer.micro_batch, 32);
    assert_int_equal(job.trainer.global_batch, 32);
    assert_int_equal(job.trainer.log_every, 10);
    assert_int_equal(job.trainer.eval_every, 100);
    assert_int_equal(job.trainer.eval_batches, 8);
    assert_true(job.trainer.grad_clip == 1.0);
    assert_true(job.trainer.max_steps > 0);
    assert_true(job.optimizer.lr == 3e-4);
    assert_true(job.optimizer.beta1 == 0.9 && job.optimizer.beta2 == 0.95);
    assert_true(job.optimizer.weight_decay == 0.1);
    assert_true(job.optimizer.eps == 1e-8);
    assert_int_equal(job.optimizer.warmup_steps, 100);
    assert_int_equal(job.optimizer.schedule, GPT_SCHED_COSINE);
    assert_int_equal(job.distributed.nodes_min, 1);
    assert_int_equal(job.distributed.nodes_max, 1);
    assert_int_equal(job.distributed.workers_per_node, 0);
    assert_int_equal(job.distributed.backend, GPT_COMM_AUTO);
    assert_string_equal(job.name, "");
    assert_int_equal(job.snapshot.on_invalid, GPT_SNAPSHOT_ON_INVALID_FAIL);
    /* bf16 on CUDA, fp32 on CPU; fp32 on CUDA uses TF32 unless told not to. */
    assert_int_equal(job.trainer.precision, GPT_PREC_AUTO);
    assert_int_equal(job.trainer.tf32, 1);
    assert_int_equal(job.trainer.gemm_autotune, 0); /* off: cuBLASLt's first pick */

    /* The defaults are valid once there is data. */
    assert_int_equal(gpt_jobspec_validate(&job, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "data.path");
    snprintf(job.data.path, sizeof(job.data.path), "x");
    assert_int_equal(gpt_jobspec_validate(&job, &err), 0);

    /* Parsing the smallest spec gives the defaults. */
    struct gpt_job parsed;
    assert_int_equal(parse("{" PATH_OK "}", NULL, &parsed, &err), 0);
    snprintf(job.data.path, sizeof(job.data.path), "/nonexistent/input.txt");
    assert_jobs_equal(&job, &parsed);
}

static void test_table_sane(void **state)
{
    (void)state;
    for (size_t k = 0; k < jobspec_n_entries; k++) {
        const struct jobspec_entry *e = &jobspec_entries[k];
        assert_non_null(e->help);
        if (e->type == JOBSPEC_INT || e->type == JOBSPEC_NODES || e->type == JOBSPEC_INTAUTO)
            assert_true(e->max <= INT_MAX && e->min >= INT_MIN);
        if (e->type == JOBSPEC_ENUM)
            assert_non_null(e->names);
        for (size_t j = 0; j < k; j++)
            assert_string_not_equal(e->path, jobspec_entries[j].path);
    }
    assert_string_equal(gpt_data_kind_name(GPT_DATA_SHARDS), "shards");
    assert_string_equal(gpt_sharding_name(GPT_SHARD_OPTIMIZER), "optimizer");
    assert_string_equal(gpt_comm_kind_name(GPT_COMM_NCCL), "nccl");
    assert_string_equal(gpt_comm_kind_name(99), "?");
}

struct bad_case {
    const char *json;
    const char *override; /* NULL: none */
    const char *path;     /* the error path expected */
    const char *msg;      /* a part of the message expected */
};

static const struct bad_case bad_cases[] = {
    /* syntax and shape */
    {"", NULL, "", "invalid JSON"},
    {"{", NULL, "", "invalid JSON"},
    {"[]", NULL, "", "expected a JSON object"},
    {"{" PATH_OK ", \"data\": {}}", NULL, "", "duplicate"},
    {"{\"model\": 5}", NULL, "model", "expected an object, got integer"},
    /* unknown keys, top level and nested */
    {"{\"modle\": {}}", NULL, "modle", "did you mean model?"},
    {"{\"max_steps\": 5}", NULL, "max_steps", "did you mean trainer.max_steps?"},
    {"{\"trainer\": {\"max_stpes\": 5}}", NULL, "trainer.max_stpes",
     "unknown key (did you mean trainer.max_steps?)"},
    {"{\"distributed\": {\"zzzzzzzz\": 1}}", NULL, "distributed.zzzzzzzz", "unknown key"},
    {"{\"model\": {\"n_layer\": {\"deep\": 1}}}", NULL, "model.n_layer", "expected an integer"},
    {"{\"foo\": {\"bar\": {\"baz\": 1}}}", NULL, "foo", "unknown key"},
    /* wrong JSON types */
    {"{\"model\": {\"n_layer\": \"4\"}}", NULL, "model.n_layer", "expected an integer, got string"},
    {"{\"model\": {\"n_layer\": 4.5}}", NULL, "model.n_layer", "expected an integer, got real"},
    {"{\"trainer\": {\"micro_batch\": \"32\"}}", NULL, "trainer.micro_batch",
     "expected an integer, got string"},
    {"{\"optimizer\": {\"lr\": \"fast\"}}", NULL, "optimizer.lr", "expected a number, got string"},
    {"{\"data\": {\"path\": 123}}", NULL, "data.path", "expected a string, got integer"},
    {"{\"name\": null}", NULL, "name", "expected a string, got null"},
    {"{\"trainer\": {\"seed\": -1}}", NULL, "trainer.seed", "non-negative"},
    {"{\"trainer\": {\"seed\": \"12x\"}}", NULL, "trainer.seed", "non-negative"},
    /* ranges and enums */
    {"{\"model\": {\"n_layer\": 0}}", NULL, "model.n_layer", "must be in 1..42, got 0"},
    {"{\"model\": {\"n_embd\": 99999999999}}", NULL, "model.n_embd", "must be in"},
    {"{\"trainer\": {\"max_steps\": -1}}", NULL, "trainer.max_steps", "must be in"},
    {"{\"optimizer\": {\"lr\": 0}}", NULL, "optimizer.lr", "(0, 10]"},
    {"{\"optimizer\": {\"eps\": -1e-8}}", NULL, "optimizer.eps", "must be in"},
    {"{\"data\": {\"path\": \"x\", \"train_split\": 0}}", NULL, "data.train_split", "(0, 1]"},
    {"{\"data\": {\"path\": \"x\", \"digits\": 10}}", NULL, "data.digits", "1..9"},
    {"{\"trainer\": {\"precision\": \"fp16\"}}", NULL, "trainer.precision",
     "expected one of fp32|bf16|auto, got \"fp16\""},
    {"{\"trainer\": {\"tf32\": \"yes\"}}", NULL, "trainer.tf32", "true or false"},
    {"{\"trainer\": {\"tf32\": 1}}", NULL, "trainer.tf32", "true or false"},
    {"{\"trainer\": {\"gemm_autotune\": 1}}", NULL, "trainer.gemm_autotune", "true or false"},
    {"{\"data\": {\"kind\": \"csv\"}}", NULL, "data.kind", "text|shards|synthetic"},
    {"{\"data\": {\"path\": \"x\", \"tokenizer\": \"bpe\"}}", NULL, "data.tokenizer", "char|byte"},
    {"{\"data\": {\"task\": \"multiply\"}}", NULL, "data.task", "one of addition"},
    {"{\"distributed\": {\"backend\": \"mpi\"}}", NULL, "distributed.backend", "auto|local"},
    {"{\"distributed\": {\"sharding\": 1}}", NULL, "distributed.sharding", "expected a string"},
    {"{\"trainer\": {\"attention_backward\": \"dsq\"}}", NULL, "trainer.attention_backward",
     "expected one of auto|fused|split|twopass|twopass4|wg|ds|cudnn, got \"dsq\""},
    {"{\"trainer\": {\"attention_forward\": \"M32\"}}", NULL, "trainer.attention_forward",
     "expected one of auto|m16|m32|k32|wg|cudnn, got \"M32\""},
    {"{\"distributed\": {\"comm_shm\": \"yes\"}}", NULL, "distributed.comm_shm",
     "expected one of auto|on|off"},
    {"{\"distributed\": {\"shard_buffers\": 3}}", NULL, "distributed.shard_buffers",
     "must be in 0..2"},
    {"{\"distributed\": {\"workers_per_node\": \"many\"}}", NULL, "distributed.workers_per_node",
     "an integer or \"auto\""},
    {"{\"snapshot\": {\"every\": -5}}", NULL, "snapshot.every", "must be in"},
    {"{\"snapshot\": {\"on_invalid\": \"maybe\"}}", NULL, "snapshot.on_invalid",
     "expected one of fail|restart, got \"maybe\""},
    {"{\"name\": "
     "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}",
     NULL, "name", "at most 127 bytes"},
    /* betas */
    {"{\"optimizer\": {\"betas\": [0.9]}}", NULL, "optimizer.betas", "two numbers"},
    {"{\"optimizer\": {\"betas\": [0.9, 0.95, 0.99]}}", NULL, "optimizer.betas", "two numbers"},
    {"{\"optimizer\": {\"betas\": [0.9, \"x\"]}}", NULL, "optimizer.betas", "two numbers"},
    {"{\"optimizer\": {\"betas\": 0.9}}", NULL, "optimizer.betas", "two numbers"},
    {"{\"optimizer\": {\"betas\": [0.9, 1.0]}}", NULL, "optimizer.betas", "[0, 1)"},
    {"{\"optimizer\": {\"betas\": [-0.1, 0.9]}}", NULL, "optimizer.betas", "[0, 1)"},
    /* nodes */
    {"{\"distributed\": {\"nodes\": \"4:2\"}}", NULL, "distributed.nodes", "MIN <= MAX"},
    {"{\"distributed\": {\"nodes\": \"a:b\"}}", NULL, "distributed.nodes", "\"MIN:MAX\""},
    {"{\"distributed\": {\"nodes\": \"1:\"}}", NULL, "distributed.nodes", "\"MIN:MAX\""},
    {"{\"distributed\": {\"nodes\": \":2\"}}", NULL, "distributed.nodes", "\"MIN:MAX\""},
    {"{\"distributed\": {\"nodes\": \"1:2:3\"}}", NULL, "distributed.nodes", "\"MIN:MAX\""},
    {"{\"distributed\": {\"nodes\": \" 1:2\"}}", NULL, "distributed.nodes", "\"MIN:MAX\""},
    {"{\"distributed\": {\"nodes\": \"0:2\"}}", NULL, "distributed.nodes", "1..4096"},
    {"{\"distributed\": {\"nodes\": \"1:99999999999\"}}", NULL, "distributed.nodes", "\"MIN:MAX\""},
    {"{\"distributed\": {\"nodes\": 0}}", NULL, "distributed.nodes", "1..4096"},
    {"{\"distributed\": {\"nodes\": true}}", NULL, "distributed.nodes", "got boolean"},
    {"{\"distributed\": {\"nodes\": [1, 2]}}", NULL, "distributed.nodes", "got array"},
    /* missing required and cross-field */
    {"{}", NULL, "data.path", "required when data.kind is text"},
    {"{\"data\": {\"kind\": \"shards\"}}", NULL, "data.path", "required when data.kind is shards"},
    {"{\"data\": {\"kind\": \"synthetic\"}}", NULL, "data.task", "required"},
    {"{" PATH_OK ", \"model\": {\"n_embd\": 100, \"n_head\": 3}}", NULL, "model.n_embd",
     "multiple of model.n_head"},
    {"{" PATH_OK ", \"trainer\": {\"global_batch\": 3}, \"distributed\": {\"nodes\": \"2:4\"}}",
     NULL, "trainer.global_batch",
     "(3) is smaller than the largest world of this job, 4 workers (distributed.nodes \"2:4\" x 1 "
     "worker per node)"},
    {"{" PATH_OK ", \"trainer\": {\"global_batch\": 5}, "
     "\"distributed\": {\"nodes\": 3, \"workers_per_node\": 2}}",
     NULL, "trainer.global_batch", "6 workers (distributed.nodes \"3:3\" x 2 workers per node)"},
    {"{" PATH_OK "}", "distributed.nodes=1:40", "trainer.global_batch", "smaller than the largest"},
    {"{" PATH_OK ", \"trainer\": {\"max_steps\": 0, \"max_epochs\": 0}}", NULL, "trainer.max_steps",
     "max_epochs"},
    {"{" PATH_OK ", \"optimizer\": {\"lr\": 1e-4, \"min_lr\": 1e-3}}", NULL, "optimizer.min_lr",
     "at most optimizer.lr"},
    {"{" PATH_OK ", \"data\": {\"path\": \"x\", \"tokenizer\": \"byte\"}, "
     "\"model\": {\"vocab_size\": 100}}",
     NULL, "", "duplicate"},
    {"{\"data\": {\"path\": \"x\", \"tokenizer\": \"byte\"}, \"model\": {\"vocab_size\": 100}}",
     NULL, "model.vocab_size", "at least 256"},
    /* overrides: syntax, unknown path, bad value, validation after them */
    {"{" PATH_OK "}", "trainer.max_steps", "trainer.max_steps", "KEY=VALUE"},
    {"{" PATH_OK "}", "=5", "", "no key"},
    {"{" PATH_OK "}", "trainer.max_stpes=5", "trainer.max_stpes",
     "did you mean trainer.max_steps?"},
    {"{" PATH_OK "}", "foo=1", "foo", "unknown key"},
    {"{" PATH_OK "}", "model=3", "model", "is a section"},
    {"{" PATH_OK "}", "trainer.max_steps=abc", "trainer.max_steps", "expected an integer"},
    {"{" PATH_OK "}", "trainer.max_steps=1.5", "trainer.max_steps", "expected an integer"},
    {"{" PATH_OK "}", "trainer.max_steps=", "trainer.max_steps", "expected an integer"},
    {"{" PATH_OK "}", "trainer.max_steps=-3", "trainer.max_steps", "must be in"},
    {"{" PATH_OK "}", "optimizer.lr=1e-3x", "optimizer.lr", "expected a number"},
    {"{" PATH_OK "}", "optimizer.betas=0.9", "optimizer.betas", "two numbers"},
    {"{" PATH_OK "}", "trainer.precision=fp16", "trainer.precision", "fp32|bf16|auto"},
    {"{" PATH_OK "}", "trainer.tf32=maybe", "trainer.tf32", "true or false"},
    {"{" PATH_OK "}", "distributed.nodes=3:1", "distributed.nodes", "MIN <= MAX"},
    {"{" PATH_OK "}", "distributed.nodes=x", "distributed.nodes", "\"MIN:MAX\""},
    {"{" PATH_OK "}", "optimizer.min_lr=1", "optimizer.min_lr", "at most optimizer.lr"},
    {"{" PATH_OK "}", "data.path=", "data.path", "required"},
    {"{" PATH_OK "}", "name=\xff\xfe", "name", "UTF-8"},
    {"{\"model\": {\"n_layer\": \"x\"}}", "model.n_layer=2", "model.n_layer",
     "expected an integer"},
};

static void test_bad_specs(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const struct bad_case *c = &bad_cases[i];
        struct gpt_job job, before;
        struct gpt_err err;
        int rc;

        memset(&job, 0xab, sizeof(job));
        before = job;
        rc = parse(c->json, c->override, &job, &err);
        if (rc != -GPT_E_SPEC || strcmp(err.path, c->path) != 0 || !strstr(err.msg, c->msg))
            fail_msg("case %zu (%s %s): rc %d path \"%s\" msg \"%s\"; expected path \"%s\" and "
                     "\"%s\"",
                     i, c->json, c->override ? c->override : "", rc, err.path, err.msg, c->path,
                     c->msg);
        assert_int_equal(err.code, -GPT_E_SPEC);
        assert_memory_equal(&job, &before, sizeof(job)); /* untouched on failure */
    }
}

static const char full_json[] =
    "{\n"
    "  \"name\": \"full ünïcode\",\n"
    "  \"model\": {\"n_layer\": 6, \"n_head\": 6, \"n_embd\": 384, \"block_size\": 256,\n"
    "            \"vocab_size\": 65},\n"
    "  \"data\": {\"kind\": \"shards\", \"path\": \"/d/train_*.bin\", \"val_path\": "
    "\"/d/val.bin\",\n"
    "           \"tokenizer\": \"byte\", \"train_split\": 0.95, \"task\": \"addition\",\n"
    "           \"digits\": 3},\n"
    "  \"trainer\": {\"max_steps\": 5000000000, \"max_epochs\": 7, \"micro_batch\": 12,\n"
    "              \"global_batch\": 480, \"grad_clip\": 0.30000000000000004, \"log_every\": 1,\n"
    "              \"eval_every\": 0, \"eval_batches\": 20, \"seed\": \"18446744073709551615\",\n"
    "              \"precision\": \"bf16\", \"threads\": 3, \"peak_gflops\": 989.5},\n"
    "  \"optimizer\": {\"lr\": 6e-4, \"min_lr\": 6e-5, \"warmup_steps\": 700,\n"
    "                \"schedule\": \"constant\", \"weight_decay\": 0, \"betas\": [0.9, 0.99],\n"
    "                \"eps\": 1e-10},\n"
    "  \"distributed\": {\"nodes\": \"2:8\", \"workers_per_node\": 4, \"backend\": \"nccl\",\n"
    "                  \"sharding\": \"optimizer\", \"max_restarts\": 0, \"wait_timeout_s\": 60},\n"
    "  \"snapshot\": {\"dir\": \"/var/lib/gptd/snap\", \"every\": 0, \"keep\": 0}\n"
    "}\n";

/* The batch geometry: any global batch of at least the largest world is
 * valid (no multiple of micro_batch or of the world), and the world check
 * takes the worker count a daemon resolves "auto" to. */
static void test_batch_world(void **state)
{
    (void)state;
    struct gpt_job job;
    struct gpt_err err;
    assert_int_equal(parse("{" PATH_OK ", \"trainer\": {\"micro_batch\": 4, \"global_batch\": 7}, "
                           "\"distributed\": {\"nodes\": \"2:3\"}}",
                           NULL, &job, &err),
                     0);
    assert_int_equal(gpt_jobspec_check_world(&job, 0, &err), 0); /* auto: 1 per node */
    assert_int_equal(gpt_jobspec_check_world(&job, 2, &err), 0); /* 6 <= 7 */
    gpt_err_clear(&err);
    assert_int_equal(gpt_jobspec_check_world(&job, 3, &err), -GPT_E_SPEC); /* 9 > 7 */
    assert_string_equal(err.path, "trainer.global_batch");
    assert_non_null(strstr(err.msg, "(7) is smaller than the largest world of this job, 9 workers "
                                    "(distributed.nodes \"2:3\" x 3 workers per node)"));
    assert_int_equal(parse("{" PATH_OK
                           ", \"trainer\": {\"micro_batch\": 32, \"global_batch\": 48}}",
                           NULL, &job, &err),
                     0);
    assert_int_equal(parse("{" PATH_OK ", \"trainer\": {\"micro_batch\": 8, \"global_batch\": 1}}",
                           NULL, &job, &err),
                     0);
}

static void test_round_trip(void **state)
{
    struct gpt_job a, b, c;
    struct gpt_err err;
    char *text, *text2;
    (void)state;

    assert_int_equal(parse(full_json, NULL, &a, &err), 0);
    assert_int_equal(a.data.kind, GPT_DATA_SHARDS);
    assert_true(a.trainer.seed == UINT64_MAX);
    assert_true(a.trainer.max_steps == 5000000000LL);
    assert_int_equal(a.distributed.nodes_min, 2);
    assert_int_equal(a.distributed.nodes_max, 8);
    assert_true(a.optimizer.beta2 == 0.99);
    assert_true(a.trainer.grad_clip == 0.30000000000000004);

    text = gpt_jobspec_to_json(&a);
    assert_non_null(text);
    assert_int_equal(parse(text, NULL, &b, &err), 0);
    assert_jobs_equal(&a, &b);
    text2 = gpt_jobspec_to_json(&b);
    assert_string_equal(text, text2); /* canonical */
    free(text);
    free(text2);

    /* Defaults print short numbers and every key. */
    gpt_jobspec_defaults(&c);
    snprintf(c.data.path, sizeof(c.data.path), "in.txt");
    text = gpt_jobspec_to_json(&c);
    assert_non_null(text);
    assert_non_null(strstr(text, "\"lr\": 0.0003,"));
    assert_non_null(strstr(text, "\"betas\": [\n      0.9,\n      0.95\n    ]"));
    assert_non_null(strstr(text, "\"nodes\": \"1:1\""));
    assert_non_null(strstr(text, "\"workers_per_node\": \"auto\""));
    for (size_t k = 0; k < jobspec_n_entries; k++) {
        const char *p = jobspec_entries[k].path, *dot = strchr(p, '.');
        char key[80];
        snprintf(key, sizeof(key), "\"%s\":", dot ? dot + 1 : p);
        if (!strstr(text, key))
            fail_msg("%s missing from to_json", p);
    }
    assert_int_equal(parse(text, NULL, &b, &err), 0);
    assert_jobs_equal(&c, &b);
    free(text);
}

static void test_overrides(void **state)
{
    static const char *const ov[] = {
        "trainer.global_batch=64", "optimizer.betas=[0.8,0.9]",
        "distributed.nodes=3",     "name=a=b",
        "optimizer.lr=1e-3",       "distributed.workers_per_node=auto",
        "trainer.seed=7",
    };
    const char *json = "{" PATH_OK ", \"trainer\": {\"micro_batch\": 32, \"global_batch\": 4},"
                       " \"distributed\": {\"nodes\": 3, \"workers_per_node\": 2}}";
    struct gpt_job job;
    struct gpt_err err;
    (void)state;

    /* Invalid as written (4 < 3 nodes x 2 workers), valid after the overrides: they come
     * first. */
    assert_int_equal(gpt_jobspec_parse(json, strlen(json), NULL, 0, &job, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "trainer.global_batch");
    assert_int_equal(gpt_jobspec_parse(json, strlen(json), ov, 7, &job, &err), 0);
    assert_int_equal(job.trainer.global_batch, 64);
    assert_true(job.optimizer.beta1 == 0.8 && job.optimizer.beta2 == 0.9);
    assert_int_equal(job.distributed.nodes_min, 3);
    assert_int_equal(job.distributed.nodes_max, 3);
    assert_string_equal(job.name, "a=b");
    assert_true(job.optimizer.lr == 1e-3);
    assert_int_equal(job.distributed.workers_per_node, 0);
    assert_true(job.trainer.seed == 7);

    /* gpt_jobspec_override on a struct, without validation. */
    assert_int_equal(gpt_jobspec_override(&job, "optimizer.betas=0.7,0.75", &err), 0);
    assert_true(job.optimizer.beta1 == 0.7 && job.optimizer.beta2 == 0.75);
    assert_int_equal(gpt_jobspec_override(&job, "distributed.nodes=2:6", &err), 0);
    assert_int_equal(job.distributed.nodes_max, 6);
    assert_int_equal(gpt_jobspec_override(&job, "snapshot.on_invalid=restart", &err), 0);
    assert_int_equal(job.snapshot.on_invalid, GPT_SNAPSHOT_ON_INVALID_RESTART);
    assert_int_equal(gpt_jobspec_override(&job, "data.kind=synthetic", &err), 0);
    assert_int_equal(job.data.kind, GPT_DATA_SYNTHETIC);
    assert_int_equal(gpt_jobspec_override(&job, "model.n_head=3", &err), 0);
    assert_int_equal(gpt_jobspec_validate(&job, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "model.n_embd");
    assert_int_equal(gpt_jobspec_override(&job, "trainer.max_steps=x", &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "trainer.max_steps");
    /* The precision keys. */
    assert_int_equal(gpt_jobspec_override(&job, "trainer.tf32=false", &err), 0);
    assert_int_equal(job.trainer.tf32, 0);
    assert_int_equal(gpt_jobspec_override(&job, "trainer.tf32=true", &err), 0);
    assert_int_equal(job.trainer.tf32, 1);
    assert_int_equal(gpt_jobspec_override(&job, "trainer.gemm_autotune=true", &err), 0);
    assert_int_equal(job.trainer.gemm_autotune, 1);
    assert_int_equal(gpt_jobspec_override(&job, "trainer.precision=fp32", &err), 0);
    assert_int_equal(job.trainer.precision, GPT_PREC_FP32);
    assert_int_equal(gpt_jobspec_override(&job, "trainer.precision=auto", &err), 0);
    assert_int_equal(job.trainer.precision, GPT_PREC_AUTO);
    const char *spec = "{" PATH_OK ", \"trainer\": {\"precision\": \"fp32\", \"tf32\": false}}";
    assert_int_equal(gpt_jobspec_parse(spec, strlen(spec), NULL, 0, &job, &err), 0);
    assert_int_equal(job.trainer.precision, GPT_PREC_FP32);
    assert_int_equal(job.trainer.tf32, 0);
    /* The transport knobs (once environment variables only). */
    assert_int_equal(job.distributed.comm_shm, GPT_COMM_SHM_AUTO);
    assert_int_equal(job.distributed.shard_buffers, 0);
    assert_int_equal(gpt_jobspec_override(&job, "distributed.comm_shm=off", &err), 0);
    assert_int_equal(job.distributed.comm_shm, GPT_COMM_SHM_OFF);
    assert_int_equal(gpt_jobspec_override(&job, "distributed.shard_buffers=2", &err), 0);
    assert_int_equal(job.distributed.shard_buffers, 2);
    spec = "{" PATH_OK ", \"distributed\": {\"comm_shm\": \"on\", \"shard_buffers\": 1}}";
    assert_int_equal(gpt_jobspec_parse(spec, strlen(spec), NULL, 0, &job, &err), 0);
    assert_int_equal(job.distributed.comm_shm, GPT_COMM_SHM_ON);
    assert_int_equal(job.distributed.shard_buffers, 1);
}

/* The attention variants (once GPTD_FLASH_FWD and GPTD_FLASH_BWD): auto by
 * default, and every name the table lists stored as the value the CUDA
 * backend reads as the variant flash_tc.h gives that name. */
static void test_attention_keys(void **state)
{
    (void)state;
    struct gpt_job job;
    struct gpt_err err;
    gpt_jobspec_defaults(&job);
    assert_int_equal(job.trainer.attention_forward, GPT_ATTN_FWD_AUTO);
    assert_int_equal(job.trainer.attention_backward, GPT_ATTN_BWD_AUTO);
    assert_int_equal(gpt_flash_tc_fwd_of_spec(GPT_ATTN_FWD_AUTO), GPT_FLASH_FWD_DEFAULT);
    assert_int_equal(gpt_flash_tc_bwd_of_spec(GPT_ATTN_BWD_AUTO), GPT_FLASH_BWD_DEFAULT);
    int seen = 0;
    for (size_t i = 0; i < jobspec_n_entries; i++) {
        const struct jobspec_entry *e = &jobspec_entries[i];
        int fwd = strcmp(e->path, "trainer.attention_forward") == 0;
        if (!fwd && strcmp(e->path, "trainer.attention_backward") != 0)
            continue;
        seen++;
        for (size_t k = 1; e->names[k]; k++) {
            char set[96];
            snprintf(set, sizeof(set), "%s=%s", e->path, e->names[k]);
            assert_int_equal(gpt_jobspec_override(&job, set, &err), 0);
            if (fwd)
                assert_int_equal(gpt_flash_tc_fwd_of_spec(job.trainer.attention_forward),
                                 gpt_flash_tc_fwd_variant(e->names[k]));
            else
                assert_int_equal(gpt_flash_tc_bwd_of_spec(job.trainer.attention_backward),
                                 gpt_flash_tc_bwd_variant(e->names[k]));
        }
    }
    assert_int_equal(seen, 2);
    assert_int_equal(gpt_jobspec_override(&job, "trainer.attention_backward=auto", &err), 0);
    assert_int_equal(job.trainer.attention_backward, GPT_ATTN_BWD_AUTO);
}

static void test_kind_inference(void **state)
{
    struct gpt_job job;
    struct gpt_err err;
    (void)state;

    assert_int_equal(parse("{\"data\": {\"task\": \"addition\"}}", NULL, &job, &err), 0);
    assert_int_equal(job.data.kind, GPT_DATA_SYNTHETIC);
    assert_int_equal(parse("{}", "data.task=addition", &job, &err), 0);
    assert_int_equal(job.data.kind, GPT_DATA_SYNTHETIC);
    assert_int_equal(parse("{" PATH_OK "}", NULL, &job, &err), 0);
    assert_int_equal(job.data.kind, GPT_DATA_TEXT);
    /* An explicit kind wins. */
    assert_int_equal(
        parse("{\"data\": {\"kind\": \"text\", \"task\": \"addition\"}}", NULL, &job, &err),
        -GPT_E_SPEC);
    assert_string_equal(err.path, "data.path");
}

static void test_limits(void **state)
{
    struct gpt_job job;
    struct gpt_err err;
    size_t n = GPT_JOB_JSON_MAX + 1;
    char *big = malloc(n), deep[64];
    (void)state;

    assert_non_null(big);
    memset(big, ' ', n);
    big[0] = '{';
    big[n - 1] = '}';
    assert_int_equal(gpt_jobspec_parse(big, n, NULL, 0, &job, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "");
    assert_non_null(strstr(err.msg, "at most"));
    free(big);

    memset(deep, 0, sizeof(deep));
    for (int i = 0; i < GPT_JOB_DEPTH_MAX + 1; i++)
        deep[i] = '[', deep[GPT_JOB_DEPTH_MAX * 2 + 1 - i] = ']';
    assert_int_equal(gpt_jobspec_parse(deep, strlen(deep), NULL, 0, &job, &err), -GPT_E_SPEC);
    assert_non_null(strstr(err.msg, "nested"));
    /* Brackets inside strings do not count. */
    assert_int_equal(
        parse("{\"name\": \"[[[[[[[[[[[[[[[[[[[[[[[[[\", " PATH_OK "}", NULL, &job, &err), 0);
}

/* Writes `text` to a new file named /tmp/test_jobspec_XXXXXX<suffix>. */
static void write_tmp(char *path, size_t n, const char *suffix, const char *text)
{
    int fd;
    snprintf(path, n, "/tmp/test_jobspec_XXXXXX%s", suffix);
    fd = mkstemps(path, (int)strlen(suffix));
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

#ifdef GPTD_HAVE_YAML
static const char equiv_json[] =
    "{\"name\": \"yes\", \"model\": {\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 64},\n"
    " \"data\": {\"path\": \"/tmp/in.txt\", \"tokenizer\": \"byte\", \"train_split\": 0.8},\n"
    " \"trainer\": {\"max_steps\": 300, \"seed\": 42, \"grad_clip\": 0},\n"
    " \"optimizer\": {\"lr\": 1e-3, \"betas\": [0.9, 0.99]},\n"
    " \"distributed\": {\"nodes\": \"1:4\", \"workers_per_node\": \"auto\"},\n"
    " \"snapshot\": {\"dir\": \"\"}}\n";

static const char equiv_yaml[] = "# the same job as equiv_json\n"
                                 "name: yes\n"
                                 "model:\n"
                                 "  n_layer: 2\n"
                                 "  n_head: 2\n"
                                 "  n_embd: 64\n"
                                 "data:\n"
                                 "  path: /tmp/in.txt\n"
                                 "  tokenizer: byte\n"
                                 "  train_split: 0.8\n"
                                 "trainer:\n"
                                 "  max_steps: 300\n"
                                 "  seed: 42\n"
                                 "  grad_clip: 0\n"
                                 "optimizer:\n"
                                 "  lr: 1e-3\n"
                                 "  betas: [0.9, 0.99]\n"
                                 "distributed:\n"
                                 "  nodes: 1:4\n"
                                 "  workers_per_node: auto\n"
                                 "snapshot:\n"
                                 "  dir:\n";

#endif

static void test_yaml(void **state)
{
#ifdef GPTD_HAVE_YAML
    struct gpt_job a, b;
    struct gpt_err err;
    char fj[64], fy[64];
    static const struct {
        const char *yaml, *path, *msg;
    } bad[] = {
        {"trainer:\n  max_stpes: 5\n", "trainer.max_stpes", "did you mean trainer.max_steps?"},
        {"trainer:\n  micro_batch: \"32\"\n", "trainer.micro_batch", "expected an integer"},
        {"trainer:\n  micro_batch: many\n", "trainer.micro_batch", "expected an integer"},
        {"model: 5\n", "model", "expected an object"},
        {"- 1\n- 2\n", "", "expected a JSON object"},
        {"data:\n  path: x\n  path: y\n", "data.path", "duplicate key"},
        {"optimizer:\n  betas: [0.9]\n", "optimizer.betas", "two numbers"},
        {"distributed:\n  nodes: 3:1\n", "distributed.nodes", "MIN <= MAX"},
        {"data: {path: x}\nmodel: {n_layer: }\n", "model.n_layer", "got null"},
        {"a: &a [*a, *a]\n", "a", ""},
        {"model: {n_layer: [[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]}\n", "model.n_layer", "nested"},
        {"data:\n  path: [unclosed\n", "", "invalid YAML"},
        {"? [1, 2]\n: 3\n", "", "string key"},
    };
    (void)state;

    write_tmp(fj, sizeof(fj), ".json", equiv_json);
    write_tmp(fy, sizeof(fy), ".yaml", equiv_yaml);
    assert_int_equal(gpt_jobspec_load(fj, NULL, 0, &a, &err), 0);
    if (gpt_jobspec_load(fy, NULL, 0, &b, &err) != 0)
        fail_msg("%s: %s", err.path, err.msg);
    assert_jobs_equal(&a, &b);
    assert_string_equal(b.name, "yes"); /* a string key reads "yes" as a string */
    assert_int_equal(b.distributed.nodes_max, 4);

    /* Errors keep the path and name where the bad value came from: here
     * the command line, not the file. */
    {
        const char *ov[] = {"trainer.max_steps=zero"};
        assert_int_equal(gpt_jobspec_load(fy, ov, 1, &b, &err), -GPT_E_SPEC);
        assert_string_equal(err.path, "trainer.max_steps");
        assert_non_null(strstr(err.msg, "the command line: "));
        assert_non_null(strstr(err.msg, "\"zero\""));
    }
    unlink(fj);
    unlink(fy);

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = gpt_jobspec_parse_yaml(bad[i].yaml, strlen(bad[i].yaml), NULL, 0, &b, &err);
        if (rc != -GPT_E_SPEC || strcmp(err.path, bad[i].path) != 0 || !strstr(err.msg, bad[i].msg))
            fail_msg("yaml case %zu: rc %d path \"%s\" msg \"%s\"", i, rc, err.path, err.msg);
    }
    /* An empty document is all defaults (and so needs data.path). */
    assert_int_equal(gpt_jobspec_parse_yaml("", 0, NULL, 0, &b, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "data.path");
#else
    (void)state;
    skip();
#endif
}

static void test_load_errors(void **state)
{
    struct gpt_job job;
    struct gpt_err err;
    (void)state;

    assert_int_equal(gpt_jobspec_load("/nonexistent/job.json", NULL, 0, &job, &err), -GPT_E_SPEC);
    assert_non_null(strstr(err.msg, "/nonexistent/job.json"));
}

static void test_check_paths(void **state)
{
    struct gpt_job job;
    struct gpt_err err;
    char file[64], dir[] = "/tmp/test_jobspec_dirXXXXXX", glob_ok[128];
    (void)state;

    write_tmp(file, sizeof(file), ".txt", "hello\n");
    assert_non_null(mkdtemp(dir));
    gpt_jobspec_defaults(&job);

    snprintf(job.data.path, sizeof(job.data.path), "%s", file);
    assert_int_equal(gpt_jobspec_check_paths(&job, &err), 0);
    snprintf(job.data.path, sizeof(job.data.path), "/nonexistent/input.txt");
    assert_int_equal(gpt_jobspec_check_paths(&job, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "data.path");
    snprintf(job.data.path, sizeof(job.data.path), "%s", dir);
    assert_int_equal(gpt_jobspec_check_paths(&job, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "data.path");
    assert_non_null(strstr(err.msg, "directory"));

    job.data.kind = GPT_DATA_SHARDS;
    snprintf(glob_ok, sizeof(glob_ok), "/tmp/test_jobspec_*.txt");
    snprintf(job.data.path, sizeof(job.data.path), "%s", glob_ok);
    assert_int_equal(gpt_jobspec_check_paths(&job, &err), 0);
    snprintf(job.data.path, sizeof(job.data.path), "/nonexistent/train_*.bin");
    assert_int_equal(gpt_jobspec_check_paths(&job, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "data.path");
    assert_non_null(strstr(err.msg, "no file matches"));
    snprintf(job.data.path, sizeof(job.data.path), "%s", glob_ok);
    snprintf(job.data.val_path, sizeof(job.data.val_path), "/nonexistent/val_*.bin");
    assert_int_equal(gpt_jobspec_check_paths(&job, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "data.val_path");

    job.data.kind = GPT_DATA_SYNTHETIC;
    assert_int_equal(gpt_jobspec_check_paths(&job, &err), 0);

    unlink(file);
    rmdir(dir);
}

static void test_help(void **state)
{
    char *text = gpt_jobspec_help(0), *man = gpt_jobspec_help(1);
    (void)state;

    assert_non_null(text);
    assert_non_null(man);
    assert_memory_equal(man, ".TH GPTD\\-JOB 5", 15);
    for (size_t k = 0; k < jobspec_n_entries; k++) {
        const char *p = jobspec_entries[k].path;
        char line[96];
        snprintf(line, sizeof(line), "\n%s\n", p);
        if (!strstr(text, line))
            fail_msg("%s missing from the text help", p);
        snprintf(line, sizeof(line), "\n.B %s\n", p);
        if (!strstr(man, line))
            fail_msg("%s missing from the man page", p);
    }
    assert_non_null(strstr(text, "default 0.0003"));
    assert_non_null(strstr(text, "text|shards|synthetic"));
    assert_non_null(strstr(man, "default 0.0003"));
    assert_null(strstr(man, "\n'")); /* no line that roff would take for a request */
    free(text);
    free(man);
}

/* The example jobs: all validate; those whose data is here pass the path check. */
static void test_examples(void **state)
{
    static const struct {
        const char *file;
        int data_here;
    } jobs[] = {
        {"default.json", 1},    {"adder.json", 1},     {"shakespeare_char.json", 0},
        {"mingpt_ddp.json", 0}, {"gpt2_124m.json", 0},
    };
    char dir[PATH_MAX], path[PATH_MAX + 64];
    const char *slash;
    (void)state;

    slash = strrchr(__FILE__, '/');
    assert_non_null(slash);
    snprintf(dir, sizeof(dir), "%.*s/../../etc/jobs", (int)(slash - __FILE__), __FILE__);
    for (size_t i = 0; i < sizeof(jobs) / sizeof(jobs[0]); i++) {
        struct gpt_job job;
        struct gpt_err err;
        snprintf(path, sizeof(path), "%s/%s", dir, jobs[i].file);
        if (gpt_jobspec_load(path, NULL, 0, &job, &err) != 0)
            fail_msg("%s: %s: %s", jobs[i].file, err.path, err.msg);
        if (jobs[i].data_here && access("/usr/share/games/fortunes/cookie", R_OK) == 0 &&
            gpt_jobspec_check_paths(&job, &err) != 0)
            fail_msg("%s: %s: %s", jobs[i].file, err.path, err.msg);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),       cmocka_unit_test(test_table_sane),
        cmocka_unit_test(test_bad_specs),      cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_overrides),      cmocka_unit_test(test_attention_keys),
        cmocka_unit_test(test_kind_inference), cmocka_unit_test(test_limits),
        cmocka_unit_test(test_yaml),           cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_check_paths),    cmocka_unit_test(test_help),
        cmocka_unit_test(test_examples),       cmocka_unit_test(test_batch_world),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
