/*
 * test_model_mem: the memory estimate a submit is checked with (engine/
 * model_mem.c) against what the engine really allocates: gpt_model_init and
 * gpt_model_alloc_optim on the CPU backend for a few shapes; the sharding
 * modes divide what they should (full sharding's buffers as the shard
 * allocates them); absurd specs saturate instead of wrapping; the
 * activation slab holds every shape a forward may take, and a forward it
 * could not hold is refused.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "backend.h"
#include "comm.h"
#include "cuda_plan.h"
#include "model.h"
#include "model_mem.h"
#include "shard.h"

static void check_shape(int L, int NH, int C, int T, int V, int B)
{
    struct gpt_model_config cfg = {
        .n_layer = L, .n_head = NH, .n_embd = C, .block_size = T, .vocab_size = V};
    struct gpt_backend *be = NULL;
    struct gpt_err err;
    struct gpt_model m;
    assert_int_equal(gpt_backend_cpu_new(1, &be, &err), 0);
    assert_int_equal(gpt_model_init(&m, &cfg, be, (size_t)B, &err), 0);
    assert_int_equal(gpt_model_alloc_optim(&m, &err), 0);

    struct gpt_model_mem est;
    gpt_model_mem_estimate(&cfg, B, GPT_SHARD_NONE, 0, 1, 0, 0, &est);
    assert_int_equal(est.n_params, m.n_params);
    /* parameters, gradients and both AdamW moments: four buffers */
    double real = 4.0 * (double)m.n_params * sizeof(float);
    double mine = (double)(est.params + est.grads + est.optim);
    printf("L=%d NH=%d C=%d T=%d V=%d B=%d: params+optim %.0f (engine %.0f), acts %llu (engine "
           "%zu), total %llu\n",
           L, NH, C, T, V, B, mine, real, (unsigned long long)est.acts, m.act_bytes,
           (unsigned long long)est.total);
    assert_true(mine >= real * 0.9 && mine <= real * 1.1);
    /* activations: at least what the model carves, at most 10% more plus
     * the trainer's host copies of a batch (tokens and logits) */
    double host_batch = (double)B * T * (2 + m.Vp + 1) * 4.0 + B * 4.0;
    assert_true((double)est.acts >= (double)m.act_bytes);
    assert_true((double)est.acts <= (double)m.act_bytes * 1.1 + host_batch);
    /* on the CPU backend everything is host memory, including the initial
     * weights' host copy */
    assert_int_equal(est.device, 0);
    assert_true(est.total >= (uint64_t)(real + m.act_bytes + m.n_params * sizeof(float)));
    gpt_model_done(&m);
    gpt_backend_free(be);
}

/* The CUDA backend's answer to att_floats (flash where the plan allows),
 * on top of the CPU backend's ops: the model then carves what it would on
 * a GPU. */
static size_t flash_att_floats(struct gpt_backend *be, size_t B, size_t T, size_t C, size_t NH,
                               int scratch)
{
    (void)be;
    struct gpt_cuda_attn_plan p;
    gpt_cuda_plan_attention(&p, B, T, C, NH, (size_t)99 * 1024, GPT_CUDA_ATTN_FLASH);
    return gpt_cuda_plan_att_floats(&p, B, T, C, NH, scratch);
}

/* The GPU estimate against what the model carves with flash attention:
 * nothing of size T x T, so GPT-2 124M at B=16 T=1024 needs well under the
 * 10+ GB the full att/datt buffers took; bf16 shadows are half the
 * parameters plus half the activation slab. */
static void check_gpu_shape(int L, int NH, int C, int T, int V, int B)
{
    struct gpt_model_config cfg = {
        .n_layer = L, .n_head = NH, .n_embd = C, .block_size = T, .vocab_size = V};
    struct gpt_backend *be = NULL;
    struct gpt_err err;
    struct gpt_model m;
    assert_int_equal(gpt_backend_cpu_new(1, &be, &err), 0);
    struct gpt_backend_ops ops = *be->ops;
    ops.att_floats = flash_att_floats;
    be->ops = &ops;
    assert_int_equal(gpt_model_init(&m, &cfg, be, (size_t)B, &err), 0);
    struct gpt_model_mem est, bf;
    gpt_model_mem_estimate(&cfg, B, GPT_SHARD_NONE, 0, 1, 1, 0, &est);
    gpt_model_mem_estimate(&cfg, B, GPT_SHARD_NONE, 0, 1, 1, 1, &bf);
    double host_batch = (double)B * T * (2 + m.Vp + 1) * 4.0 + B * 4.0;
    printf("gpu L=%d NH=%d C=%d T=%d B=%d: acts %llu (engine %zu), shadows %llu\n", L, NH, C, T, B,
           (unsigned long long)bf.acts, m.act_bytes, (unsigned long long)bf.bf16);
    /* the model carves the bf16 mode's attention scratch (flash_att_floats:
     * the tensor-core backward's state); fp32 mode's is smaller */
    assert_true((double)bf.acts >= (double)m.act_bytes);
    assert_true((double)bf.acts <= (double)m.act_bytes * 1.1 + host_batch);
    assert_true(est.acts <= bf.acts);
    double shadows = (double)m.n_params * 2.0 + (double)m.act_bytes / 2.0;
    assert_true((double)bf.bf16 >= shadows * 0.95 && (double)bf.bf16 <= shadows * 1.1);
    gpt_model_done(&m);
    gpt_backend_free(be);
}

static void test_gpu_flash(void **state)
{
    (void)state;
    check_gpu_shape(2, 2, 32, 64, 10, 4);
    check_gpu_shape(3, 4, 128, 256, 65, 2);
    /* T <= head size: the GEMM path's full buffers */
    check_gpu_shape(1, 2, 64, 16, 10, 2);
    /* GPT-2 124M, B=16 (the device part of the estimate, no allocation) */
    struct gpt_model_config cfg = {
        .n_layer = 12, .n_head = 12, .n_embd = 768, .block_size = 1024, .vocab_size = 50257};
    struct gpt_model_mem gpu;
    gpt_model_mem_estimate(&cfg, 16, GPT_SHARD_NONE, 0, 1, 1, 1, &gpu);
    printf("124M B=16 bf16 on a GPU: device %.2f GiB, acts %.2f GiB, shadows %.2f GiB\n",
           (double)gpu.device / (1u << 30), (double)gpu.acts / (1u << 30),
           (double)gpu.bf16 / (1u << 30));
    assert_true(gpu.device < (UINT64_C(40) << 30));
    assert_true(gpu.acts > (UINT64_C(8) << 30)); /* logits alone: 3.3 GB */
}

static void test_matches_engine(void **state)
{
    (void)state;
    check_shape(2, 2, 32, 6, 10, 16);
    check_shape(4, 4, 128, 64, 65, 4);
    check_shape(1, 8, 256, 128, 256, 2);
    check_shape(3, 6, 96, 33, 50257, 1);
}

static void test_sharding(void **state)
{
    (void)state;
    struct gpt_model_config cfg = {
        .n_layer = 12, .n_head = 12, .n_embd = 768, .block_size = 1024, .vocab_size = 50257};
    struct gpt_model_mem none, opt, full, gpu, bf16;
    gpt_model_mem_estimate(&cfg, 4, GPT_SHARD_NONE, 0, 8, 0, 0, &none);
    gpt_model_mem_estimate(&cfg, 4, GPT_SHARD_OPTIMIZER, 0, 8, 0, 0, &opt);
    gpt_model_mem_estimate(&cfg, 4, GPT_SHARD_FULL, 0, 8, 0, 0, &full);
    /* GPT-2 124M (with wpe and padded vocabulary) */
    assert_true(none.n_params > 124000000 && none.n_params < 125000000);
    assert_int_equal(opt.params, none.params);
    assert_true(opt.optim * 8 >= none.optim && opt.optim * 8 <= none.optim + 64);
    /* full: the shard plus the gathered embeddings (which dominate GPT-2) and unit buffers */
    assert_true(full.params < none.params * 6 / 10 && full.grads == full.params);
    assert_int_equal(full.optim, opt.optim);
    /* sharded ranks gather the full state (3 P) for the start and snapshots */
    assert_true(full.transient >= 3 * none.params);
    /* GPU: the training state lives on the device; bf16 adds mirrors */
    gpt_model_mem_estimate(&cfg, 4, GPT_SHARD_NONE, 0, 8, 1, 0, &gpu);
    gpt_model_mem_estimate(&cfg, 4, GPT_SHARD_NONE, 0, 8, 1, 1, &bf16);
    assert_true(gpu.device > 4 * none.params && gpu.host < gpu.device);
    assert_int_equal(gpu.bf16, 0);
    assert_true(bf16.bf16 >= none.params / 2 && bf16.device > gpu.device);
}

static void test_saturates(void **state)
{
    (void)state;
    /* issue 14's OOM loop, and absurd shapes that would wrap 64 bits */
    struct gpt_model_config big = {
        .n_layer = 1, .n_head = 256, .n_embd = 16384, .block_size = 128, .vocab_size = 65};
    struct gpt_model_mem m;
    gpt_model_mem_estimate(&big, 32, GPT_SHARD_NONE, 0, 1, 0, 0, &m);
    assert_true(m.total > (UINT64_C(50) << 30)); /* 3.2e9 params x 4 buffers x 4 bytes */
    struct gpt_model_config absurd = {
        .n_layer = 256, .n_head = 256, .n_embd = 16384, .block_size = 65536, .vocab_size = 1048576};
    gpt_model_mem_estimate(&absurd, 65536, GPT_SHARD_NONE, 0, 1, 0, 0, &m);
    assert_int_equal(m.total, GPT_MEM_HUGE);
    assert_int_equal(m.acts, GPT_MEM_HUGE);
}

/* Full sharding at world 1 (one local rank): the estimate's parameters and
 * gradients are what the shard allocates (shard, gathered embeddings and
 * unit buffers), with the spec's distributed.shard_buffers `spec` (0 auto,
 * 1, 2) and GPTD_SHARD_BUFFERS set to `bufs` (or unset), which must not
 * matter: it was a developer override, the spec's key replaced it.
 * Returns the shard's unit buffer count. */
static int check_full_shard(int L, const char *bufs, int spec)
{
    struct gpt_model_config cfg = {
        .n_layer = L, .n_head = 4, .n_embd = 64, .block_size = 16, .vocab_size = 65};
    struct gpt_backend *be;
    struct gpt_comm *comm;
    struct gpt_shard *sh;
    struct gpt_model m;
    struct gpt_err err;
    if (bufs)
        assert_int_equal(setenv("GPTD_SHARD_BUFFERS", bufs, 1), 0);
    else
        assert_int_equal(unsetenv("GPTD_SHARD_BUFFERS"), 0);
    assert_int_equal(gpt_backend_cpu_new(1, &be, &err), 0);
    assert_int_equal(gpt_comm_local_new(&comm, &err), 0);
    assert_int_equal(gpt_shard_new(GPT_SHARD_FULL, spec, comm, be, &sh, &err), 0);
    assert_int_equal(gpt_model_init_sharded(&m, &cfg, be, 1, gpt_shard_units(sh), &err), 0);
    assert_int_equal(gpt_shard_attach(sh, &m, &err), 0);
    struct gpt_shard_mem sm;
    gpt_shard_mem(sh, &sm);
    struct gpt_model_mem est;
    gpt_model_mem_estimate(&cfg, 1, GPT_SHARD_FULL, spec, 1, 0, 0, &est);
    uint64_t unit = (4 * 64 * 64 + 6 * 64) * sizeof(float);
    uint64_t emb = (m.Vp + 16) * 64 * sizeof(float); /* wte and wpe (T 16) */
    uint64_t n_bufs = (sm.work / 2 - emb) / unit;
    assert_int_equal(sm.work, 2 * (emb + n_bufs * unit));
    assert_int_equal(est.params + est.grads, sm.params + sm.grads + sm.work);
    assert_int_equal(est.optim, sm.optim);
    assert_int_equal(est.shard_buffers, (int)n_bufs);
    gpt_model_done(&m);
    gpt_shard_free(sh);
    gpt_comm_free(comm);
    gpt_backend_free(be);
    assert_int_equal(unsetenv("GPTD_SHARD_BUFFERS"), 0);
    return (int)n_bufs;
}

static void test_full_shard_buffers(void **state)
{
    (void)state;
    /* Eight blocks at world 1: a unit pair is cheap next to the state. */
    assert_int_equal(check_full_shard(8, NULL, 0), 2);
    /* One block: the second pair would cost more than 1/32 of it. */
    assert_int_equal(check_full_shard(1, NULL, 0), 1);
    /* The environment is not read. */
    assert_int_equal(check_full_shard(8, "1", 0), 2);
    assert_int_equal(check_full_shard(1, "2", 0), 1);
    /* The spec's count, against the rule. */
    assert_int_equal(check_full_shard(1, NULL, 2), 2);
    assert_int_equal(check_full_shard(8, NULL, 1), 1);
    assert_int_equal(check_full_shard(8, "2", 1), 1);
    /* The rule, at the bench's model (8 blocks of C = 512) over 2 to 4
     * ranks: one buffer; over 1 rank: two. */
    size_t unit = 4 * 512 * 512 + 6 * 512, P = 8 * (12 * 512 * 512 + 13 * 512);
    for (size_t w = 2; w <= 4; w++)
        assert_int_equal(gpt_shard_buffer_count(unit, (P + w - 1) / w), 1);
    assert_int_equal(gpt_shard_buffer_count(unit, P), 2);
}

/* flash_att_floats in fp32 mode: no tensor-core backward state. */
static size_t flash_att_floats_fp32(struct gpt_backend *be, size_t B, size_t T, size_t C, size_t NH,
                                    int scratch)
{
    (void)be;
    struct gpt_cuda_attn_plan p;
    gpt_cuda_plan_attention(&p, B, T, C, NH, (size_t)99 * 1024, GPT_CUDA_ATTN_FLASH);
    p.tc = 0;
    return gpt_cuda_plan_att_floats(&p, B, T, C, NH, scratch);
}

/* A backend whose attention buffers do not grow with B (here: larger
 * for the smaller batch): the model must refuse the forward it has no
 * room for, not write past its slab. */
static size_t shrinking_att_floats(struct gpt_backend *be, size_t B, size_t T, size_t C, size_t NH,
                                   int scratch)
{
    (void)be;
    (void)C;
    (void)scratch;
    return B < 4 ? (size_t)1 << 22 : B * NH * T * T;
}

static void test_carve_bound(void **state)
{
    (void)state;
    struct gpt_model_config cfg = {
        .n_layer = 1, .n_head = 2, .n_embd = 32, .block_size = 16, .vocab_size = 64};
    struct gpt_backend *be = NULL;
    struct gpt_err err;
    struct gpt_model m;
    assert_int_equal(gpt_backend_cpu_new(1, &be, &err), 0);
    struct gpt_backend_ops ops = *be->ops;
    ops.att_floats = shrinking_att_floats;
    be->ops = &ops;
    assert_int_equal(gpt_model_init(&m, &cfg, be, 4, &err), 0);
    gpt_model_init_weights(&m, 1);
    int tok[4 * 16];
    for (int i = 0; i < 4 * 16; i++)
        tok[i] = i % 64;
    float loss = 0;
    assert_int_equal(gpt_model_forward(&m, tok, tok, 4, 16, &loss), 0);
    assert_int_equal(gpt_model_forward(&m, tok, tok, 2, 16, &loss), -EOVERFLOW);
    gpt_model_done(&m);
    /* The flash plan in fp32 mode (gpt_cuda_plan_attention: the GEMM
     * path's (B,NH,T,T) scores at T up to the head size, the logsumexp
     * above it) with the block one past the head size, 16 heads of 64:
     * at T 64 the scores need more than all T 65 saves; the model sizes
     * its slab for both, so every T runs. */
    ops.att_floats = flash_att_floats_fp32;
    cfg.n_embd = 1024;
    cfg.n_head = 16;
    cfg.block_size = 65;
    assert_int_equal(gpt_model_init(&m, &cfg, be, 4, &err), 0);
    gpt_model_init_weights(&m, 1);
    int tok65[4 * 65];
    for (int i = 0; i < 4 * 65; i++)
        tok65[i] = i % 64;
    struct gpt_model_mem est; /* the estimate sizes the slab the same way */
    gpt_model_mem_estimate(&cfg, 4, GPT_SHARD_NONE, 0, 1, 1, 0, &est);
    assert_true((double)est.acts >= (double)m.act_bytes);
    static const size_t Ts[] = {1, 33, 63, 64, 65};
    for (size_t i = 0; i < sizeof(Ts) / sizeof(Ts[0]); i++)
        assert_int_equal(gpt_model_forward(&m, tok65, tok65, 4, Ts[i], &loss), 0);
    gpt_model_done(&m);
    gpt_backend_free(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_engine), cmocka_unit_test(test_gpu_flash),
        cmocka_unit_test(test_sharding),       cmocka_unit_test(test_full_shard_buffers),
        cmocka_unit_test(test_saturates),      cmocka_unit_test(test_carve_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
