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
 * vtable is copied and each stream op it has (backend_ops.def, group OP)
 * wrapped with a timer; totals go to stderr as ms per step. */
static double prof_s[GPT_BACKEND_OP_COUNT];
static const struct gpt_backend_ops *prof_base;
static struct gpt_backend_ops prof_ops;

/* A pass-through keeps the slot's result across the timer: the value
 * holder and the return by the slot's type (void has neither). */
#define PROF_KEEP_void
#define PROF_KEEP_int    int r_ =
#define PROF_KEEP_double double r_ =
#define PROF_GIVE_void
#define PROF_GIVE_int    return r_;
#define PROF_GIVE_double return r_;
#define GPT_OP_PROF_OP(ret, name, params, args)                                                    \
    static ret prof_##name params                                                                  \
    {                                                                                              \
        double t0_ = now_s();                                                                      \
        PROF_KEEP_##ret prof_base->name args;                                                      \
        prof_s[GPT_BACKEND_OP_##name] += now_s() - t0_;                                            \
        PROF_GIVE_##ret                                                                            \
    }
#define GPT_OP_PROF_CTL(ret, name, params, args)
#define GPT_OP(wrap, group, ret, name, params, args, pre)                                          \
    GPT_OP_PROF_##group(ret, name, params, args)
#include "backend_ops.def"

static void prof_install(struct gpt_backend *be)
{
    prof_base = be->ops;
    prof_ops = *be->ops;
    /* Only the slots the backend fills: an empty optional slot keeps the
     * wrapper's fallback, whose separate ops are timed instead. */
#define GPT_OP_INSTALL_OP(name)                                                                    \
    if (prof_base->name)                                                                           \
        prof_ops.name = prof_##name;
#define GPT_OP_INSTALL_CTL(name)
#define GPT_OP(wrap, group, ret, name, params, args, pre) GPT_OP_INSTALL_##group(name)
#include "backend_ops.def"
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
        for (int i = 0; i < GPT_BACKEND_OP_COUNT; i++) {
            if (prof_s[i] == 0.0)
                continue; /* not called in the timed steps */
            fprintf(stderr, "  %-26s %8.2f ms/step\n", gpt_backend_op_name((enum gpt_backend_op)i),
                    prof_s[i] * 1e3 / steps);
            sum += prof_s[i];
        }
        fprintf(stderr, "  %-26s %8.2f ms/step (step %.2f)\n", "ops total", sum * 1e3 / steps, ms);
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
