/*
 * bench_gpu_train: single-GPU training throughput of GPT-2 124M (12 layers,
 * 12 heads, width 768, vocab 50257, T 1024) on the CUDA backend.
 *
 *   bench_gpu_train [batch=16] [steps=10] [device=0] [modes=bf16,tf32]
 *
 * Runs the steps once per mode, after two warm-up steps each: bf16 (bf16
 * products and attention inputs, fp32 master weights; the trainer's
 * trainer.precision: bf16), tf32 (fp32 buffers, TF32 tensor cores) or fp32
 * (full fp32), all with the fused flash attention where the plan allows
 * it (it does for GPT-2: head size 64). Prints one JSON line per mode
 * (tokens/s, ms/step, achieved TFLOP/s, MFU against the H200's dense bf16
 * rate of 989 TFLOP/s, peak device memory of the backend, last loss), then
 * a short table. Exits 77 when there is no GPU (or when built without
 * CUDA).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "model.h"
#include "optim.h"
#include "rng.h"

#ifdef GPTD_HAVE_CUDA
#include "cuda/cuda_backend.h"
#include "cuda/cuda_probe.h"

#define PEAK_FLOPS 989e12 /* H200 SXM dense bf16 */
#define WARMUP     2

#define MAX_MODES 3

struct bench_row {
    const char *mode;
    const char *attn;
    double ms, tokens_s, tflops, mfu, peak_gib;
    float loss;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int bench_mode(int device, const char *mode, size_t B, int steps, struct bench_row *row)
{
    int tf32 = strcmp(mode, "tf32") == 0, bf16 = strcmp(mode, "bf16") == 0;
    const size_t T = 1024;
    struct gpt_err err;
    struct gpt_backend *be = NULL;
    struct gpt_model m;
    memset(&m, 0, sizeof(m));
    int rc = gpt_backend_cuda_new(device, &be, &err);
    if (rc < 0) {
        fprintf(stderr, "bench_gpu_train: %s\n", err.msg);
        return rc;
    }
    gpt_cuda_backend_set_tf32(be, tf32);
    if ((rc = gpt_backend_set_precision(be, bf16, 1337)) < 0) {
        fprintf(stderr, "bench_gpu_train: set_precision: %s\n", gpt_strerror(rc));
        goto out;
    }
    struct gpt_cuda_attn_plan plan;
    gpt_cuda_backend_attention_plan(be, B, T, 768, 12, &plan);
    struct gpt_model_config cfg = {12, 12, 768, (int)T, 50257};
    if ((rc = gpt_model_init(&m, &cfg, be, B, &err)) < 0 ||
        (rc = gpt_model_alloc_optim(&m, &err)) < 0) {
        fprintf(stderr, "bench_gpu_train: %s\n", err.msg);
        goto out;
    }
    gpt_model_init_weights(&m, 1337);
    struct gpt_optim_spec opt = {.lr = 3e-4,
                                 .min_lr = 3e-5,
                                 .warmup_steps = 0,
                                 .weight_decay = 0.1,
                                 .beta1 = 0.9,
                                 .beta2 = 0.95,
                                 .eps = 1e-8};
    size_t BT = B * T;
    int *x = malloc(BT * sizeof(int)), *y = malloc(BT * sizeof(int));
    if (!x || !y) {
        free(x);
        free(y);
        rc = -1;
        goto out;
    }
    struct gpt_rng rng;
    gpt_rng_seed(&rng, 42);
    for (size_t i = 0; i < BT; i++) {
        x[i] = (int)gpt_rng_below(&rng, 50257);
        y[i] = (int)gpt_rng_below(&rng, 50257);
    }
    double total = 0;
    float loss = 0;
    for (int s = -WARMUP; s < steps && rc == 0; s++) {
        double t0 = now_s();
        gpt_model_zero_grad(&m);
        if ((rc = gpt_model_forward(&m, x, y, B, T, &loss)) < 0 ||
            (rc = gpt_model_backward(&m, 1.0f)) < 0)
            break;
        double norm = sqrt(gpt_grad_sumsq(&m, 0, m.n_params));
        gpt_adamw_update(&m, &opt, 3e-4f, s + WARMUP + 1, gpt_clip_scale(norm, 1.0), 0, m.n_params);
        rc = gpt_backend_sync(be);
        if (s >= 0)
            total += now_s() - t0;
    }
    free(x);
    free(y);
    if (rc < 0) {
        fprintf(stderr, "bench_gpu_train: step failed: %s (%s)\n", gpt_strerror(rc),
                gpt_cuda_backend_last_error(be));
        goto out;
    }
    double step_s = total / steps;
    double flops = gpt_model_flops_per_token(&m, T) * (double)BT;
    size_t bytes, peak;
    gpt_cuda_backend_mem_stats(be, &bytes, &peak);
    *row = (struct bench_row){mode,
                              plan.kind == GPT_CUDA_ATTN_FLASH ? "flash" : "gemm",
                              step_s * 1e3,
                              (double)BT / step_s,
                              flops / step_s / 1e12,
                              flops / step_s / PEAK_FLOPS,
                              (double)peak / (double)(1ull << 30),
                              loss};
    printf("{\"bench\":\"gpu_train\",\"model\":\"gpt2-124M\",\"mode\":\"%s\",\"attention\":"
           "\"%s\",\"batch\":%zu,"
           "\"T\":%zu,\"steps\":%d,\"ms_per_step\":%.1f,\"tokens_per_s\":%.0f,\"tflops\":%.1f,"
           "\"mfu_vs_989\":%.4f,\"peak_mem_gib\":%.2f,\"loss\":%.4f}\n",
           row->mode, row->attn, B, T, steps, row->ms, row->tokens_s, row->tflops, row->mfu,
           row->peak_gib, (double)loss);
    fflush(stdout);
out:
    gpt_model_done(&m);
    gpt_backend_free(be);
    return rc;
}

int main(int argc, char **argv)
{
    size_t B = argc > 1 ? (size_t)atoi(argv[1]) : 16;
    int steps = argc > 2 ? atoi(argv[2]) : 10;
    int device = argc > 3 ? atoi(argv[3]) : 0;
    char modes_arg[64];
    snprintf(modes_arg, sizeof(modes_arg), "%s", argc > 4 ? argv[4] : "bf16,tf32");
    const char *modes[MAX_MODES];
    int n_modes = 0, bad = 0;
    for (char *save = NULL, *tok = strtok_r(modes_arg, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n_modes == MAX_MODES ||
            (strcmp(tok, "bf16") != 0 && strcmp(tok, "tf32") != 0 && strcmp(tok, "fp32") != 0))
            bad = 1;
        else
            modes[n_modes++] = strcmp(tok, "bf16") == 0   ? "bf16"
                               : strcmp(tok, "tf32") == 0 ? "tf32"
                                                          : "fp32";
    }
    if (B < 1 || steps < 1 || device < 0 || bad || n_modes == 0) {
        fprintf(stderr, "usage: bench_gpu_train [batch] [steps] [device] [bf16,tf32,fp32]\n");
        return 2;
    }
    if (gpt_cuda_device_count() == 0) {
        printf("bench_gpu_train: no GPU, skipped\n");
        return 77;
    }
    struct bench_row rows[MAX_MODES];
    memset(rows, 0, sizeof(rows));
    int ok = 0;
    for (int i = 0; i < n_modes; i++)
        ok += bench_mode(device, modes[i], B, steps, &rows[i]) == 0;
    printf("\nGPT-2 124M, B=%zu, T=1024, %d timed steps, one GPU\n", B, steps);
    printf("%-5s %-6s %10s %12s %9s %8s %10s %8s\n", "mode", "attn", "ms/step", "tokens/s",
           "TFLOP/s", "MFU", "peak GiB", "loss");
    for (int i = 0; i < n_modes; i++)
        if (rows[i].mode)
            printf("%-5s %-6s %10.1f %12.0f %9.1f %7.2f%% %10.2f %8.4f\n", rows[i].mode,
                   rows[i].attn, rows[i].ms, rows[i].tokens_s, rows[i].tflops, rows[i].mfu * 100.0,
                   rows[i].peak_gib, (double)rows[i].loss);
    printf("MFU is against 989 TFLOP/s (H200 dense bf16).\n");
    return ok == n_modes ? 0 : 1;
}

#else

int main(void)
{
    printf("bench_gpu_train: built without CUDA, skipped\n");
    return 77;
}

#endif
