/*
 * test_gpu_train: 20 optimizer steps of a tiny GPT (2 layers, 2 heads,
 * width 64, block 32, vocab 97 padded to 128) through gpt_model_* and the
 * optimizer, once on the CPU backend and once on the CUDA backend, from
 * the same weights and the same batches (a learnable sequence with some
 * ignored targets). The CUDA backend runs twice: fp32 (every step's loss
 * within 1e-3 relative of the CPU's) and bf16 (within 2e-2; and once more
 * on a backend with the GEMM autotune, the same bound), all with the
 * flash attention kernels (head size 32: in bf16 the tensor-core ones, the
 * trainer's default path). Even steps run the trainer's
 * gpt_model_forward_train (loss and dlogits in one classifier pass), odd
 * steps gpt_model_forward then the backward's own classifier pass; two
 * steps in three start from gpt_model_zero_grad_deferred (the first
 * backward overwrites the gradients), the third from a zeroing. The loss
 * must fall and the final parameters must stay close. Exits 77
 * without a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_probe.h"
#include "gpu/gpu_gate.h"
#include "model.h"
#include "optim.h"
#include "rng.h"

#define STEPS 20
#define B     4
#define T     32

/* Losses of STEPS steps and the final parameters (host copy, malloc'd). */
static int train(struct gpt_backend *be, float *losses, float **ret_params, size_t *ret_n)
{
    struct gpt_model_config cfg = {
        .n_layer = 2, .n_head = 2, .n_embd = 64, .block_size = T, .vocab_size = 97};
    struct gpt_optim_spec opt = {.lr = 1e-3,
                                 .min_lr = 1e-4,
                                 .warmup_steps = 0,
                                 .weight_decay = 0.1,
                                 .beta1 = 0.9,
                                 .beta2 = 0.95,
                                 .eps = 1e-8};
    struct gpt_model m;
    struct gpt_err err;
    memset(&m, 0, sizeof(m));
    if (gpt_model_init(&m, &cfg, be, B, &err) < 0 || gpt_model_alloc_optim(&m, &err) < 0) {
        fprintf(stderr, "%s: model: %s\n", be->name, err.msg);
        gpt_model_done(&m);
        return -1;
    }
    gpt_model_init_weights(&m, 1234);
    struct gpt_rng rng;
    gpt_rng_seed(&rng, 99);
    int x[B * T], y[B * T];
    int rc = 0;
    for (int step = 0; step < STEPS && rc == 0; step++) {
        /* x[t+1] = (3 x[t] + 1) mod 97 from a random start: learnable. */
        for (int b = 0; b < B; b++) {
            int tok = (int)gpt_rng_below(&rng, 97);
            for (int t = 0; t < T; t++) {
                x[b * T + t] = tok;
                tok = (3 * tok + 1) % 97;
                y[b * T + t] = (b + t) % 11 == 0 ? -1 : tok;
            }
        }
        if (step % 3 == 0)
            gpt_model_zero_grad(&m);
        else /* as the trainer: the backward overwrites the gradients */
            gpt_model_zero_grad_deferred(&m);
        rc = step % 2 == 0 ? gpt_model_forward_train(&m, x, y, B, T, 1.0f, &losses[step])
                           : gpt_model_forward(&m, x, y, B, T, &losses[step]);
        if (rc < 0 || (rc = gpt_model_backward(&m, 1.0f)) < 0)
            break;
        double norm = sqrt(gpt_grad_sumsq(&m, 0, m.n_params));
        float lr = (float)gpt_lr_at(&opt, step, STEPS);
        gpt_adamw_update(&m, &opt, lr, step + 1, gpt_clip_scale(norm, 1.0), 0, m.n_params);
    }
    if (rc == 0)
        rc = gpt_backend_sync(be);
    if (rc == 0) {
        *ret_n = m.n_params;
        *ret_params = malloc(m.n_params * sizeof(float));
        if (!*ret_params)
            rc = -1;
        else
            rc = gpt_backend_download(be, *ret_params, m.params, m.n_params * sizeof(float));
    }
    if (rc < 0)
        fprintf(stderr, "%s: training failed: %d (%s)\n", be->name, rc, gpt_strerror(rc));
    gpt_model_done(&m);
    return rc;
}

/* Compares one CUDA run with the CPU run; returns 1 on failure. */
static int compare(const char *name, const float *lc, const float *lg, const float *pc,
                   const float *pg, size_t nc, size_t ng, double loss_tol, double param_tol)
{
    int fail = 0;
    for (int s = 0; s < STEPS; s++) {
        double rel = fabs((double)lg[s] - (double)lc[s]) / fabs((double)lc[s]);
        int ok = rel <= loss_tol;
        fail |= !ok;
        printf("%s step %2d  cpu %.6f  cuda %.6f  rel %.2e (tol %.0e) %s\n", name, s, lc[s], lg[s],
               rel, loss_tol, ok ? "" : "FAIL");
    }
    if (!(lg[STEPS - 1] < lg[0] - 0.1f)) {
        printf("FAIL %s: the loss did not fall (%.4f -> %.4f)\n", name, lg[0], lg[STEPS - 1]);
        fail = 1;
    }
    double maxdiff = 0, maxref = 0;
    for (size_t i = 0; i < nc && nc == ng; i++) {
        double d = fabs((double)pg[i] - (double)pc[i]);
        maxdiff = d > maxdiff ? d : maxdiff;
        maxref = fabs(pc[i]) > maxref ? fabs(pc[i]) : maxref;
    }
    printf("%s final parameters: max |cuda - cpu| %.3g (max |cpu| %.3g)\n", name, maxdiff, maxref);
    if (nc != ng || maxdiff > param_tol * maxref) {
        printf("FAIL %s: parameters diverged\n", name);
        fail = 1;
    }
    return fail;
}

int main(void)
{
    int probed = gpu_test_gate();
    if (probed <= 0)
        return -probed;
    struct gpt_backend *cpu = NULL, *gpu = NULL;
    struct gpt_err err;
    if (gpt_backend_cpu_new(1, &cpu, &err) < 0 || gpt_backend_cuda_new(0, NULL, &gpu, &err) < 0) {
        fprintf(stderr, "backend: %s\n", err.msg);
        return 1;
    }
    float lc[STEPS], lg[STEPS], lb[STEPS];
    float *pc = NULL, *pg = NULL, *pb = NULL;
    size_t nc = 0, ng = 0, nb = 0;
    struct gpt_cuda_attn_plan plan;
    gpt_cuda_backend_attention_plan(gpu, B, T, 64, 4, &plan);
    printf("attention: %s %s\n", plan.kind == GPT_CUDA_ATTN_FLASH ? "flash" : "gemm", plan.why);
    if (train(cpu, lc, &pc, &nc) < 0 || train(gpu, lg, &pg, &ng) < 0 ||
        gpt_backend_set_precision(gpu, 1, 1337) < 0 || train(gpu, lb, &pb, &nb) < 0) {
        if (gpt_backend_is_cuda(gpu))
            fprintf(stderr, "cuda: %s\n", gpt_cuda_backend_last_error(gpu));
        return 1;
    }
    int fail = compare("fp32", lc, lg, pc, pg, nc, ng, 1e-3, 1e-2);
    fail |= compare("bf16", lc, lb, pc, pb, nc, nb, 2e-2, 5e-2);
    /* The GEMM autotune (trainer.gemm_autotune) on a backend of its own:
     * the same bounds as bf16's, its timing runs leaving no trace in the
     * gradients that accumulate (the steps that zero them first). */
    struct gpt_backend *tuned = NULL;
    float lt[STEPS];
    float *pt = NULL;
    size_t nt = 0;
    if (gpt_backend_cuda_new(0, NULL, &tuned, &err) < 0 ||
        gpt_backend_set_precision(tuned, 1 | GPT_BACKEND_PREC_GEMM_TUNE, 1337) < 0 ||
        train(tuned, lt, &pt, &nt) < 0) {
        fprintf(stderr, "cuda gemm_autotune: %s\n",
                tuned ? gpt_cuda_backend_last_error(tuned) : err.msg);
        fail = 1;
    } else {
        fail |= compare("bf16 gemm_autotune", lc, lt, pc, pt, nc, nt, 2e-2, 5e-2);
    }
    free(pt);
    gpt_backend_free(tuned);
    size_t bytes, peak;
    gpt_cuda_backend_mem_stats(gpu, &bytes, &peak);
    printf("cuda peak device memory %.1f MiB\n", (double)peak / (1 << 20));
    free(pc);
    free(pg);
    free(pb);
    gpt_backend_free(gpu);
    gpt_backend_free(cpu);
    return fail;
}
