/*
 * bench_train: single-worker training throughput of the CPU engine.
 *
 *   bench_train CONFIG [steps] [threads]
 *
 * CONFIG is tiny (4 layers, 4 heads, 128 wide, block 128, batch 32, vocab
 * 65), small (6/6/384, block 256, batch 8, vocab 65) or gpt2 (12/12/768,
 * vocab 50257, batch 4, T 64). Prints one JSON line: tokens/s, ms/step,
 * achieved GFLOP/s, MFU against the sgemm ceiling measured in the same
 * process on the model's matrix shapes, peak RSS, and the OpenBLAS kernel.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <cblas.h>

#include "backend.h"
#include "model.h"
#include "optim.h"
#include "peak.h"
#include "rng.h"

extern char *openblas_get_corename(void);

struct bench_cfg {
    const char *name;
    int L, NH, C, T, B, V;
};

static const struct bench_cfg configs[] = {
    {"tiny", 4, 4, 128, 128, 32, 65},
    {"small", 6, 6, 384, 256, 8, 65},
    {"gpt2", 12, 12, 768, 64, 4, 50257},
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Per-op profile (BENCH_PROFILE=1 in the environment): the backend's
 * vtable is copied and each op wrapped with a timer; totals go to stderr
 * as ms per step. */
enum prof_op {
    PROF_MEMZERO,
    PROF_ENC_F,
    PROF_ENC_B,
    PROF_LN_F,
    PROF_LN_B,
    PROF_MM_F,
    PROF_MM_B,
    PROF_ATT_F,
    PROF_ATT_B,
    PROF_GELU_F,
    PROF_GELU_B,
    PROF_RES_F,
    PROF_XENT,
    PROF_ADAMW,
    PROF_SUMSQ,
    PROF_COUNT
};
static const char *const prof_names[PROF_COUNT] = {
    "memzero",  "encoder_f",  "encoder_b",    "layernorm_f", "layernorm_b",
    "matmul_f", "matmul_b",   "attention_f",  "attention_b", "gelu_f",
    "gelu_b",   "residual_f", "softmax_xent", "adamw",       "sumsq"};
static double prof_s[PROF_COUNT];
static const struct gpt_backend_ops *prof_base;
static struct gpt_backend_ops prof_ops;

#define PROF_CALL(op, call)                                                                        \
    do {                                                                                           \
        double t0_ = now_s();                                                                      \
        call;                                                                                      \
        prof_s[op] += now_s() - t0_;                                                               \
    } while (0)

static void prof_memzero(struct gpt_backend *be, void *ptr, size_t bytes)
{
    PROF_CALL(PROF_MEMZERO, prof_base->memzero(be, ptr, bytes));
}
static void prof_enc_f(struct gpt_backend *be, float *out, const int *inp, const float *wte,
                       const float *wpe, size_t B, size_t T, size_t C)
{
    PROF_CALL(PROF_ENC_F, prof_base->encoder_forward(be, out, inp, wte, wpe, B, T, C));
}
static void prof_enc_b(struct gpt_backend *be, float *dwte, float *dwpe, const float *dout,
                       const int *inp, size_t B, size_t T, size_t C)
{
    PROF_CALL(PROF_ENC_B, prof_base->encoder_backward(be, dwte, dwpe, dout, inp, B, T, C));
}
static void prof_ln_f(struct gpt_backend *be, float *out, float *mean, float *rstd,
                      const float *inp, const float *w, const float *b, size_t N, size_t C)
{
    PROF_CALL(PROF_LN_F, prof_base->layernorm_forward(be, out, mean, rstd, inp, w, b, N, C));
}
static void prof_ln_b(struct gpt_backend *be, float *dinp, float *dw, float *db, const float *dout,
                      const float *inp, const float *w, const float *mean, const float *rstd,
                      size_t N, size_t C)
{
    PROF_CALL(PROF_LN_B,
              prof_base->layernorm_backward(be, dinp, dw, db, dout, inp, w, mean, rstd, N, C));
}
static void prof_mm_f(struct gpt_backend *be, float *out, const float *inp, const float *w,
                      const float *b, size_t N, size_t C, size_t OC)
{
    PROF_CALL(PROF_MM_F, prof_base->matmul_forward(be, out, inp, w, b, N, C, OC));
}
static void prof_mm_b(struct gpt_backend *be, float *dinp, float *dw, float *db, const float *dout,
                      const float *inp, const float *w, size_t N, size_t C, size_t OC)
{
    PROF_CALL(PROF_MM_B, prof_base->matmul_backward(be, dinp, dw, db, dout, inp, w, N, C, OC));
}
static void prof_att_f(struct gpt_backend *be, float *out, float *att, const float *qkv, size_t B,
                       size_t T, size_t C, size_t NH)
{
    PROF_CALL(PROF_ATT_F, prof_base->attention_forward(be, out, att, qkv, B, T, C, NH));
}
static void prof_att_b(struct gpt_backend *be, float *dqkv, float *scratch, const float *dout,
                       const float *out, const float *qkv, const float *att, size_t B, size_t T,
                       size_t C, size_t NH)
{
    PROF_CALL(PROF_ATT_B,
              prof_base->attention_backward(be, dqkv, scratch, dout, out, qkv, att, B, T, C, NH));
}
static void prof_gelu_f(struct gpt_backend *be, float *out, const float *inp, size_t n)
{
    PROF_CALL(PROF_GELU_F, prof_base->gelu_forward(be, out, inp, n));
}
static void prof_gelu_b(struct gpt_backend *be, float *dinp, const float *inp, const float *dout,
                        size_t n)
{
    PROF_CALL(PROF_GELU_B, prof_base->gelu_backward(be, dinp, inp, dout, n));
}
static void prof_res_f(struct gpt_backend *be, float *out, const float *a, const float *b, size_t n)
{
    PROF_CALL(PROF_RES_F, prof_base->residual_forward(be, out, a, b, n));
}
static void prof_xent(struct gpt_backend *be, float *logits, float *losses, const int *targets,
                      size_t N, size_t V, size_t Vp, float dscale, int write)
{
    PROF_CALL(PROF_XENT,
              prof_base->softmax_xent(be, logits, losses, targets, N, V, Vp, dscale, write));
}
static void prof_adamw(struct gpt_backend *be, float *p, const float *g, float *m, float *v,
                       size_t n, float lr, float b1, float b2, float eps, float wd, float gs,
                       float bc1, float bc2)
{
    PROF_CALL(PROF_ADAMW, prof_base->adamw(be, p, g, m, v, n, lr, b1, b2, eps, wd, gs, bc1, bc2));
}
static double prof_sumsq(struct gpt_backend *be, const float *x, size_t n)
{
    double t0 = now_s();
    double r = prof_base->sumsq(be, x, n);
    prof_s[PROF_SUMSQ] += now_s() - t0;
    return r;
}

static void prof_install(struct gpt_backend *be)
{
    prof_base = be->ops;
    prof_ops = *be->ops;
    prof_ops.memzero = prof_memzero;
    prof_ops.encoder_forward = prof_enc_f;
    prof_ops.encoder_backward = prof_enc_b;
    prof_ops.layernorm_forward = prof_ln_f;
    prof_ops.layernorm_backward = prof_ln_b;
    prof_ops.matmul_forward = prof_mm_f;
    prof_ops.matmul_backward = prof_mm_b;
    prof_ops.attention_forward = prof_att_f;
    prof_ops.attention_backward = prof_att_b;
    prof_ops.gelu_forward = prof_gelu_f;
    prof_ops.gelu_backward = prof_gelu_b;
    prof_ops.residual_forward = prof_res_f;
    prof_ops.softmax_xent = prof_xent;
    prof_ops.adamw = prof_adamw;
    prof_ops.sumsq = prof_sumsq;
    be->ops = &prof_ops;
}

int main(int argc, char **argv)
{
    const struct bench_cfg *c = NULL;
    int steps = argc > 2 ? atoi(argv[2]) : 5;
    int threads = argc > 3 ? atoi(argv[3]) : 1;
    for (size_t i = 0; argc > 1 && i < sizeof(configs) / sizeof(configs[0]); i++)
        if (strcmp(argv[1], configs[i].name) == 0)
            c = &configs[i];
    if (!c || steps < 1 || threads < 1) {
        fprintf(stderr, "usage: bench_train tiny|small|gpt2 [steps] [threads]\n");
        return 2;
    }

    struct gpt_err err;
    struct gpt_backend *be;
    if (gpt_backend_cpu_new(threads, &be, &err) < 0) {
        fprintf(stderr, "bench_train: %s\n", err.msg);
        return 1;
    }
    const char *prof_env = getenv("BENCH_PROFILE");
    int prof = prof_env && *prof_env && strcmp(prof_env, "0") != 0;
    if (prof)
        prof_install(be);
    struct gpt_model_config cfg = {
        .n_layer = c->L, .n_head = c->NH, .n_embd = c->C, .block_size = c->T, .vocab_size = c->V};
    struct gpt_model m;
    memset(&m, 0, sizeof(m));
    if (gpt_model_init(&m, &cfg, be, (size_t)c->B, &err) < 0 ||
        gpt_model_alloc_optim(&m, &err) < 0) {
        fprintf(stderr, "bench_train: %s\n", err.msg);
        return 1;
    }
    gpt_model_init_weights(&m, 1337);
    struct gpt_optim_spec opt = {.lr = 3e-4,
                                 .min_lr = 3e-5,
                                 .warmup_steps = 0,
                                 .weight_decay = 0.1,
                                 .beta1 = 0.9,
                                 .beta2 = 0.95,
                                 .eps = 1e-8};
    size_t BT = (size_t)c->B * (size_t)c->T;
    int *x = malloc(BT * sizeof(int)), *y = malloc(BT * sizeof(int));
    struct gpt_rng rng;
    gpt_rng_seed(&rng, 42);
    for (size_t i = 0; i < BT; i++) {
        x[i] = (int)gpt_rng_below(&rng, (uint64_t)c->V);
        y[i] = (int)gpt_rng_below(&rng, (uint64_t)c->V);
    }

    double best = INFINITY, total = 0;
    float loss = 0;
    for (int s = -1; s < steps; s++) { /* step -1 warms up */
        double t0 = now_s();
        gpt_model_zero_grad(&m);
        gpt_model_forward(&m, x, y, (size_t)c->B, (size_t)c->T, &loss);
        gpt_model_backward(&m, 1.0f);
        double norm = sqrt(gpt_grad_sumsq(&m, 0, m.n_params));
        gpt_adamw_update(&m, &opt, 3e-4f, s + 2, gpt_clip_scale(norm, 1.0), 0, m.n_params);
        double dt = now_s() - t0;
        if (s < 0 && prof)
            memset(prof_s, 0, sizeof(prof_s));
        if (s >= 0) {
            total += dt;
            if (dt < best)
                best = dt;
        }
    }
    double ms = total / steps * 1e3;
    double flops_step = gpt_model_flops_per_token(&m, (size_t)c->T) * (double)BT;
    /* The ceiling: sgemm on the model's own largest forward shape. */
    double peak = gpt_peak_sgemm_flops(BT, (size_t)c->C, 4 * (size_t)c->C, 1.0);
    if (c->V > 1000) {
        double p2 = gpt_peak_sgemm_flops(BT, (size_t)c->C, (size_t)m.Vp, 1.0);
        peak = p2 > peak ? p2 : peak;
    }
    if (prof) {
        double sum = 0;
        for (int i = 0; i < PROF_COUNT; i++) {
            fprintf(stderr, "  %-13s %8.2f ms/step\n", prof_names[i], prof_s[i] * 1e3 / steps);
            sum += prof_s[i];
        }
        fprintf(stderr, "  %-13s %8.2f ms/step (step %.2f)\n", "ops total", sum * 1e3 / steps, ms);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"bench\":\"train\",\"impl\":\"gptd\",\"config\":\"%s\",\"threads\":%d,"
           "\"openblas_core\":\"%s\",\"params\":%zu,\"batch\":%d,\"T\":%d,\"steps\":%d,"
           "\"ms_per_step\":%.1f,\"best_ms_per_step\":%.1f,\"tokens_per_s\":%.1f,"
           "\"gflops\":%.1f,\"sgemm_ceiling_gflops\":%.1f,\"mfu\":%.3f,\"peak_rss_mb\":%.1f,"
           "\"loss\":%.4f}\n",
           c->name, threads, openblas_get_corename(), m.n_params, c->B, c->T, steps, ms, best * 1e3,
           (double)BT / (total / steps), flops_step / (total / steps) / 1e9, peak / 1e9,
           flops_step / (total / steps) / peak, (double)ru.ru_maxrss / 1024.0, loss);
    gpt_model_done(&m);
    gpt_backend_free(be);
    free(x);
    free(y);
    return 0;
}
