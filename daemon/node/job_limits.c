/*
 * job_limits: submit-time checks of a job against this node (see limits.h).
 *
 * The node is the one that takes the submit (a member checks before it
 * forwards to the coordinator); a cluster of unequal nodes is checked
 * against that one. Memory is the estimate of engine/model_mem.c for the
 * smallest world the job may run in (sharding divides by the world), times
 * the workers the job runs on one node, with full sharding's gathered unit
 * buffers as distributed.shard_buffers sets them. The global batch must
 * give every worker of the largest world one sequence
 * (gpt_jobspec_check_world).
 */
#include "job_limits.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "devices.h"
#include "gpu_plan.h"
#include "model_mem.h"
#include "workers.h"

static void limits_fmt(char *buf, size_t cap, uint64_t bytes)
{
    if (bytes >= GPT_MEM_HUGE)
        snprintf(buf, cap, "more than 4 EiB");
    else if (bytes >= (UINT64_C(1) << 30))
        snprintf(buf, cap, "%.1f GiB", (double)bytes / (double)(UINT64_C(1) << 30));
    else if (bytes >= (UINT64_C(1) << 20))
        snprintf(buf, cap, "%.1f MiB", (double)bytes / (double)(UINT64_C(1) << 20));
    else
        snprintf(buf, cap, "%.1f KiB", (double)bytes / 1024.0);
}

/* The vocabulary the engine will size the model with: the spec's, or what
 * the data gives (a text file's characters are at most 256). */
static int limits_vocab(const struct gpt_job *job)
{
    if (job->model.vocab_size > 0)
        return job->model.vocab_size;
    if (job->data.tokenizer == GPT_TOK_GPT2)
        return GPT_SHARD_VOCAB; /* GPT-2's; another data.vocab is seen when the job opens it */
    switch (job->data.kind) {
    case GPT_DATA_SYNTHETIC:
        return 10;
    case GPT_DATA_SHARDS:
        return GPT_SHARD_VOCAB;
    default:
        return GPT_VOCAB_MAX;
    }
}

/* GPUs the job would use here and the memory of the smallest, from the
 * devices probe (0 on CPU hosts and without CUDA). */
static int limits_gpus(const struct gpt_job *job, uint64_t *ret_min_bytes)
{
    int kind = job->distributed.backend;
    *ret_min_bytes = 0;
    if (kind != GPT_COMM_AUTO && kind != GPT_COMM_NCCL && kind != GPT_COMM_STAGED)
        return 0;
    json_t *dev = devices_json();
    json_t *gpus = json_object_get(dev, "gpus"), *g;
    size_t i;
    int n = 0;
    json_array_foreach(gpus, i, g)
    {
        uint64_t b = (uint64_t)json_integer_value(json_object_get(g, "memory_bytes"));
        if (n == 0 || b < *ret_min_bytes)
            *ret_min_bytes = b;
        n++;
    }
    json_decref(dev);
    return n;
}

/* A text file must hold one window of block_size + 1 tokens in each split
 * (engine/data.c: data_split_run, data_check_run); a token is a byte. Only
 * the size is looked at; a path that is not a regular file is left to the
 * checks that open it. */
static int limits_text_file(const char *key, const char *file, const struct gpt_job *job, int split,
                            struct gpt_err *err)
{
    struct stat st;
    if (stat(file, &st) < 0 || !S_ISREG(st.st_mode))
        return 0;
    uint64_t n = (uint64_t)st.st_size, need = (uint64_t)job->model.block_size + 1;
    if (n == 0)
        return gpt_err_set(err, -GPT_E_DATA, key, "%s is empty", file);
    if (!split) {
        if (n < need)
            return gpt_err_set(err, -GPT_E_DATA, key,
                               "%s holds %llu tokens, fewer than model.block_size + 1 = %llu", file,
                               (unsigned long long)n, (unsigned long long)need);
        return 0;
    }
    uint64_t n_train = (uint64_t)((double)n * job->data.train_split);
    if (n_train > n)
        n_train = n;
    if (n_train < need)
        return gpt_err_set(err, -GPT_E_DATA, key,
                           "%s: the train split holds %llu tokens, fewer than model.block_size + "
                           "1 = %llu",
                           file, (unsigned long long)n_train, (unsigned long long)need);
    if (n - n_train < need)
        return gpt_err_set(err, -GPT_E_DATA, "data.train_split",
                           "%s: the val split holds %llu tokens, fewer than model.block_size + 1 "
                           "= %llu (lower data.train_split or use a larger file)",
                           file, (unsigned long long)(n - n_train), (unsigned long long)need);
    return 0;
}

static int limits_data(const struct gpt_job *job, struct gpt_err *err)
{
    const struct gpt_data_spec *d = &job->data;
    if (d->kind == GPT_DATA_SHARDS && job->model.vocab_size > 0 &&
        job->model.vocab_size < GPT_SHARD_VOCAB)
        return gpt_err_set(err, -GPT_E_SPEC, "model.vocab_size",
                           "%d is below the %d tokens of llm.c shards; use 0 or at least %d",
                           job->model.vocab_size, GPT_SHARD_VOCAB, GPT_SHARD_VOCAB);
    if (d->kind != GPT_DATA_TEXT)
        return 0;
    int rc = limits_text_file("data.path", d->path, job, d->val_path[0] == '\0', err);
    if (rc == 0 && d->val_path[0])
        rc = limits_text_file("data.val_path", d->val_path, job, 0, err);
    return rc;
}

/* This node, as a job's memory is checked against it: the workers the job
 * runs here, its GPUs and the smallest one's memory, the physical memory. */
struct limits_node {
    int workers, gpus, per_gpu;
    uint64_t gpu_bytes, phys;
};

/* What the node must hold for the job with `shard_buffers` gathered unit
 * buffers under full sharding: every worker's share, host and device. */
struct limits_need {
    struct gpt_model_mem m;
    uint64_t node, host, device;
};

static void limits_node_probe(const struct gpt_job *job, const struct config *cfg,
                              struct limits_node *ret)
{
    ret->gpus = limits_gpus(job, &ret->gpu_bytes);
    ret->workers = workers_default_count(job, cfg->workers);
    ret->per_gpu = ret->gpus > 0 ? (ret->workers + ret->gpus - 1) / ret->gpus : 0;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    ret->phys = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

static void limits_estimate(const struct gpt_job *job, const struct gpt_model_config *mc,
                            const struct limits_node *nd, int shard_buffers,
                            struct limits_need *ret)
{
    uint64_t w = (uint64_t)nd->workers;
    int world = (job->distributed.nodes_min > 0 ? job->distributed.nodes_min : 1) * nd->workers;
    gpt_model_mem_estimate(mc, job->trainer.micro_batch, job->distributed.sharding, shard_buffers,
                           world, nd->gpus > 0, job->trainer.precision != GPT_PREC_FP32, &ret->m);
    const struct gpt_model_mem *m = &ret->m;
    ret->node = m->total >= GPT_MEM_HUGE / w ? GPT_MEM_HUGE : m->total * w;
    ret->host = m->host >= GPT_MEM_HUGE / w ? GPT_MEM_HUGE : m->host * w;
    ret->device = m->device >= GPT_MEM_HUGE / 64 ? GPT_MEM_HUGE : m->device * (uint64_t)nd->per_gpu;
}

/* The first limit `n` passes: 1 with the need, the limit and its name
 * in what; 0 when it fits them all. */
static int limits_over(const struct limits_need *n, const struct config *cfg,
                       const struct limits_node *nd, uint64_t *ret_need, uint64_t *ret_limit,
                       char *what, size_t cap)
{
    if (cfg->max_job_memory > 0 && n->node > (uint64_t)cfg->max_job_memory) {
        *ret_need = n->node;
        *ret_limit = (uint64_t)cfg->max_job_memory;
        snprintf(what, cap, "max_job_memory");
    } else if (nd->phys > 0 && n->host > nd->phys) {
        *ret_need = n->host;
        *ret_limit = nd->phys;
        snprintf(what, cap, "this node's physical memory");
    } else if (nd->gpus > 0 && n->device > nd->gpu_bytes) {
        *ret_need = n->device;
        *ret_limit = nd->gpu_bytes;
        snprintf(what, cap, "one GPU's memory, for %d worker%s", nd->per_gpu,
                 nd->per_gpu == 1 ? "" : "s");
    } else {
        return 0;
    }
    return 1;
}

static int limits_memory(const struct gpt_job *job, const struct config *cfg, struct gpt_err *err)
{
    struct gpt_model_config mc = job->model;
    mc.vocab_size = limits_vocab(job);
    struct limits_node nd;
    limits_node_probe(job, cfg, &nd);
    struct limits_need n;
    limits_estimate(job, &mc, &nd, job->distributed.shard_buffers, &n);
    uint64_t need, limit;
    char what[160];
    if (!limits_over(&n, cfg, &nd, &need, &limit, what, sizeof(what)))
        return 0;
    const struct gpt_model_mem *m = &n.m;
    /* The key to change first: the second gathered unit buffer when one
     * would fit, else whichever term dominates. */
    const char *key =
        m->acts > m->params + m->grads + m->optim ? "model.block_size" : "model.n_embd";
    char bufs[96] = "";
    if (m->shard_buffers > 0) {
        struct limits_need one;
        uint64_t need1, limit1;
        char what1[160];
        limits_estimate(job, &mc, &nd, 1, &one);
        int fits1 = m->shard_buffers == 2 &&
                    !limits_over(&one, cfg, &nd, &need1, &limit1, what1, sizeof(what1));
        if (fits1)
            key = "distributed.shard_buffers";
        snprintf(bufs, sizeof(bufs), ", distributed.shard_buffers=%d%s%s",
                 job->distributed.shard_buffers,
                 job->distributed.shard_buffers ? ""
                 : m->shard_buffers == 2        ? " (auto: 2)"
                                                : " (auto: 1)",
                 fits1 ? " (with 1 it fits)" : "");
    }
    char s_need[32], s_limit[32], s_p[32], s_g[32], s_o[32], s_a[32], s_b[32], s_t[32];
    limits_fmt(s_need, sizeof(s_need), need);
    limits_fmt(s_limit, sizeof(s_limit), limit);
    limits_fmt(s_p, sizeof(s_p), m->params);
    limits_fmt(s_g, sizeof(s_g), m->grads);
    limits_fmt(s_o, sizeof(s_o), m->optim);
    limits_fmt(s_a, sizeof(s_a), m->acts);
    limits_fmt(s_b, sizeof(s_b), m->bf16);
    limits_fmt(s_t, sizeof(s_t), m->transient);
    char bf16[48] = "";
    if (m->bf16)
        snprintf(bf16, sizeof(bf16), ", bf16 mirrors %s", s_b);
    return gpt_err_set(err, -GPT_E_LIMIT, key,
                       "the job needs an estimated %s, more than %s (%s): %d worker%s x "
                       "(%.2fG parameters %s, gradients %s, AdamW %s, activations %s%s, set-up %s);"
                       " driven by model.n_layer=%d n_embd=%d n_head=%d block_size=%d "
                       "vocab_size=%d, trainer.micro_batch=%d, distributed.sharding=%s%s",
                       s_need, s_limit, what, nd.workers, nd.workers == 1 ? "" : "s",
                       (double)m->n_params / 1e9, s_p, s_g, s_o, s_a, bf16, s_t, mc.n_layer,
                       mc.n_embd, mc.n_head, mc.block_size, mc.vocab_size, job->trainer.micro_batch,
                       gpt_sharding_name(job->distributed.sharding), bufs);
}

/* One NCCL rank per GPU: a worker count above this node's GPUs is
 * refused at submit, not when NCCL finds two ranks on one GPU. */
static int limits_workers(const struct gpt_job *job, const struct config *cfg, struct gpt_err *err)
{
    uint64_t gpu_bytes = 0;
    int gpus = limits_gpus(job, &gpu_bytes);
    return gpu_plan_check_workers(workers_default_count(job, cfg->workers), gpus,
                                  "distributed.workers_per_node", err);
}

int job_limits_check(const struct gpt_job *job, const struct config *cfg, struct gpt_err *err)
{
    /* The batch geometry at the largest world, with this node's worker
     * count (what "auto" resolves to here), before anything is opened. */
    int rc = gpt_jobspec_check_world(job, workers_default_count(job, cfg->workers), err);
    if (rc == 0)
        rc = limits_workers(job, cfg, err);
    if (rc == 0)
        rc = limits_data(job, err);
    if (rc == 0)
        rc = limits_memory(job, cfg, err);
    return rc;
}
