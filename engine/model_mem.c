/*
 * model_mem: the memory estimate of a job (see model_mem.h). Doubles carry
 * the arithmetic so that no product of spec values can wrap; the result is
 * saturated at GPT_MEM_HUGE.
 */
#include "model_mem.h"

#include <string.h>

#include "cuda_plan.h"
#include "shard.h"

/* The smallest opt-in shared memory per block among the GPUs the CUDA
 * backend is built for (sm_86/89: 99 KiB; sm_80 163, sm_90 227): a flash
 * plan that fits it fits every one of them. */
#define MEM_SMEM_MIN_OPTIN ((size_t)99 * 1024)

/* Floats of attention's saved state (scratch 0: `att`, per layer) and of
 * the backward's scratch (1), as backend.h's att_floats answers them: the
 * full (B, NH, T, T) on the CPU; on a GPU the flash plan's logsumexp (and
 * the backward's per-row state), nothing of size T x T, wherever the plan
 * takes flash. */
static double mem_att_floats(int gpu, int bf16, double B, double T, double C, double NH,
                             int scratch)
{
    double full = B * NH * T * T;
    if (!gpu || NH < 1 || C < 1 || T < 1 || B < 1 || (uint64_t)C % (uint64_t)NH != 0 ||
        B * NH * T * (C + 1) > 1e18)
        return full;
    struct gpt_cuda_attn_plan p;
    gpt_cuda_plan_attention(&p, (size_t)B, (size_t)T, (size_t)C, (size_t)NH, MEM_SMEM_MIN_OPTIN,
                            GPT_CUDA_ATTN_FLASH);
    p.tc = bf16; /* as the backend's plan: the tensor-core backward's state in bf16 mode */
    return (double)gpt_cuda_plan_att_floats(&p, (size_t)B, (size_t)T, (size_t)C, (size_t)NH,
                                            scratch);
}

/* model.c pads every activation buffer to 16 floats and the vocabulary to
 * 64 (16 for vocabularies up to 64). */
static double mem_round_up(double x, double to)
{
    double q = x / to;
    double r = (double)(uint64_t)q;
    return (r < q ? r + 1 : r) * to;
}

/* Bytes of model_carve's slab at (B, T), buffer by buffer (each rounded
 * to 16 floats). */
static double mem_slab(int gpu, int bf16, double L, double B, double T, double C, double NH,
                       double Vp)
{
    double BT = B * T, att = mem_att_floats(gpu, bf16, B, T, C, NH, 0);
    double datt = mem_att_floats(gpu, bf16, B, T, C, NH, 1);
    double per_layer[] = {BT * C, BT, BT, BT * 3 * C, BT * C,     att,   BT * C,
                          BT * C, BT, BT, BT * 4 * C, BT * 4 * C, BT * C};
    double once[] = {BT * C, BT * C, BT, BT, BT * Vp, BT, BT * C, BT * C, BT * 4 * C, datt};
    double floats = 0;
    for (size_t i = 0; i < sizeof(per_layer) / sizeof(per_layer[0]); i++)
        floats += mem_round_up(L * per_layer[i], 16);
    for (size_t i = 0; i < sizeof(once) / sizeof(once[0]); i++)
        floats += mem_round_up(once[i], 16);
    return floats * sizeof(float);
}

static uint64_t mem_bytes(double x)
{
    return x >= (double)GPT_MEM_HUGE ? GPT_MEM_HUGE : (uint64_t)x;
}

void gpt_model_mem_estimate(const struct gpt_model_config *cfg, int micro_batch, int sharding,
                            int shard_buffers, int world, int gpu, int bf16,
                            struct gpt_model_mem *ret)
{
    double L = cfg->n_layer, C = cfg->n_embd, NH = cfg->n_head, T = cfg->block_size;
    double V = cfg->vocab_size > 0 ? cfg->vocab_size : 1, B = micro_batch > 0 ? micro_batch : 1;
    double W = world > 0 ? world : 1, f = sizeof(float);
    double Vp = V > 64 ? mem_round_up(V, 64) : mem_round_up(V, 16);

    /* model_layout: wte, wpe, L blocks of 12 C^2 + 13 C, the final LN. */
    double emb = Vp * C + T * C, block = 12 * C * C + 13 * C;
    double P = emb + L * block + 2 * C;

    /* model_alloc's slab: the larger of model_carve at block_size and at
     * the head size (where the GEMM path's scores peak). */
    double BT = B * T, hs = NH >= 1 ? C / NH : C;
    double slab = mem_slab(gpu, bf16, L, B, T, C, NH, Vp);
    if (hs < T) {
        double at_hs = mem_slab(gpu, bf16, L, B, hs, C, NH, Vp);
        slab = at_hs > slab ? at_hs : slab;
    }
    double acts = slab + 2 * BT * sizeof(int); /* tokens, targets */

    /* trainer.c: host batch buffers, the host copy of the logits, the
     * model's host losses. */
    double host_batch = (B * (T + 1) + BT) * sizeof(int) + BT * Vp * f + BT * f;

    /* Per-rank parameter state (shard.c: a slice is P / W rounded up). */
    double slice = mem_round_up(P / W, 1);
    double params, grads, optim;
    int n_bufs = 0;
    if (sharding == GPT_SHARD_FULL) {
        /* The shard, plus the embeddings and one or two unit buffers
         * gathered (model.h: a block's largest unit is its attention or
         * the MLP's first product, 4 C^2 + 6 C floats each): the spec's
         * count, or the one shard.c picks. */
        double unit = 4 * C * C + 6 * C;
        n_bufs = shard_buffers == 1 || shard_buffers == 2
                     ? shard_buffers
                     : gpt_shard_buffer_count((size_t)(unit < 1e18 ? unit : 1e18),
                                              (size_t)(slice < 1e18 ? slice : 1e18));
        double bufs = n_bufs;
        params = slice + emb + bufs * unit;
        grads = slice + emb + bufs * unit;
        optim = 2 * slice;
    } else {
        params = P;
        grads = P;
        optim = sharding == GPT_SHARD_OPTIMIZER ? 2 * slice : 2 * P;
    }
    params *= f;
    grads *= f;
    optim *= f;

    /* Rank 0 draws the initial weights into a host buffer of P floats;
     * sharded ranks hold the full state (params, m, v) while they start
     * and while a snapshot is taken. */
    double full_state = sharding != GPT_SHARD_NONE ? 3 * P * f : 0;
    double init_host = P * f;

    /* bf16 shadows (cuda_backend.cu): one per allocation a product reads,
     * covering all of it, 2 bytes a float: the parameters and the
     * activation slab. */
    double mirrors = gpu && bf16 ? params / 2 + slab / 2 : 0;

    double device = params + grads + optim + acts + mirrors + full_state;
    double host = host_batch + init_host;
    memset(ret, 0, sizeof(*ret));
    ret->n_params = mem_bytes(P);
    ret->params = mem_bytes(params);
    ret->grads = mem_bytes(grads);
    ret->optim = mem_bytes(optim);
    ret->acts = mem_bytes(acts + host_batch);
    ret->bf16 = mem_bytes(mirrors);
    ret->transient = mem_bytes(full_state + init_host);
    ret->shard_buffers = n_bufs;
    if (!gpu) {
        host += device;
        device = 0;
    }
    ret->device = mem_bytes(device);
    ret->host = mem_bytes(host);
    ret->total = mem_bytes(device + host);
}
