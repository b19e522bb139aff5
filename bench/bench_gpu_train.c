/*
 * bench_gpu_train: single-GPU training throughput of GPT-2 124M (12 layers,
 * 12 heads, width 768, vocab 50257, T 1024) on the CUDA backend.
 *
 *   bench_gpu_train [batch=16] [steps=10] [device=0] [modes=bf16,tf32]
 *   bench_gpu_train --plan [batch=16] [T=1024] [bf16|tf32|fp32]
 *                   [--world N[,N...]] [--link nvlink|ib400|eth100]
 *                   [--grad-reduce bf16|fp32]
 *   --attn-fwd NAME, --attn-bwd NAME (either form, anywhere): the attention
 *   variants, as the job spec's trainer.attention_forward and _backward
 *   (auto, or a name of flash_tc.h); every JSON line names what ran.
 *   bench_gpu_train --probe       (CUDA's view of this host, one line)
 *
 * --plan needs no GPU (any build): the cost model of one training step,
 * recorded by gpu_plan_rec.c (whose header says how) and priced here.
 * With --world, the data-parallel step of each world too (one JSON line
 * each, "bench":"gpu_train_ddp_plan"): the gradient buckets the model
 * reports during the recorded backward (its grads_ready spans), each
 * all-reduced over the link (cuda_plan.h's DDP model, default nvlink, in
 * bf16 by default as distributed.grad_reduce) back to back as soon as it
 * is ready; what is still running when the optimizer must start is
 * exposed. predicted_scaling_efficiency is the one-GPU step over the
 * world's (the per-GPU batch fixed).
 *
 * Runs the steps once per mode, after two warm-up steps each: bf16 (bf16
 * products and attention inputs, fp32 master weights; the trainer's
 * trainer.precision: bf16), tf32 (fp32 buffers, TF32 tensor cores) or fp32
 * (full fp32), all with the fused flash attention where the plan allows
 * it (it does for GPT-2: head size 64). Prints one JSON line per mode
 * (tokens/s, ms/step, achieved TFLOP/s, MFU on llm.c's count over the
 * device's dense peak for the mode from peak.h's table, "mfu": null for a
 * device the table lacks; peak device memory of the backend, the last loss
 * and step 2's: after one update, where backward variants that sum in
 * another order still agree closely), then
 * a short table. Exits 77 when there is no GPU (or when built without
 * CUDA).
 *
 * The step-time levers under test (backend.h's precision flags; the JSON
 * line names what ran): GPTD_GEMM_AUTOTUNE=1 (trainer.gemm_autotune: each
 * GEMM shape's cuBLASLt candidates timed on first use, the fastest kept);
 * GPTD_GEMM_GELU=unfused (the MLP's GELU as its own kernel, not a GEMM
 * epilogue).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cuda_plan.h"
#include "flash_tc.h"
#include "gpu_plan_rec.h"
#include "model.h"
#include "optim.h"
#include "peak.h"
#include "rng.h"

/* The attention variants the benchmark's backends are made with
 * (--attn-fwd, --attn-bwd: trainer.attention_forward and _backward's
 * values; zero: auto). */
static struct gpt_backend_opts bench_attn;

/* The backward variant a row ran, for the JSON lines: a row says what it
 * timed (ds runs twopass where not one of 124M's heads' dS tiles would
 * fit; cudnn the default's kernels where cuDNN refuses, said on stderr). */
static const char *flash_bwd_name(size_t B, size_t T)
{
    enum gpt_flash_bwd v = gpt_flash_tc_bwd_of_spec(bench_attn.attn_backward);
    if (v == GPT_FLASH_BWD_DS && gpt_flash_tc_ds_chunk(B * 12, (int)T, 64) == 0)
        v = GPT_FLASH_BWD_TWOPASS;
    return gpt_flash_tc_bwd_name(v);
}

static const char *flash_fwd_name(void)
{
    return gpt_flash_tc_fwd_name(gpt_flash_tc_fwd_of_spec(bench_attn.attn_forward));
}

/* Takes --attn-fwd NAME and --attn-bwd NAME (auto or a variant of
 * flash_tc.h) out of argv wherever they are, into bench_attn. 0, or -1
 * after saying what is wrong. */
static int take_attn_flags(int *argc, char **argv)
{
    int n = 1;
    for (int i = 1; i < *argc; i++) {
        int fwd = strcmp(argv[i], "--attn-fwd") == 0, bwd = strcmp(argv[i], "--attn-bwd") == 0;
        if (!fwd && !bwd) {
            argv[n++] = argv[i];
            continue;
        }
        const char *v = i + 1 < *argc ? argv[++i] : "";
        int auto_ = strcmp(v, "auto") == 0;
        int k = fwd ? gpt_flash_tc_fwd_variant(v) : gpt_flash_tc_bwd_variant(v);
        if (!auto_ && (!v[0] || k < 0)) {
            fprintf(stderr, "bench_gpu_train: %s '%s': one of %s\n", argv[i - 1], v,
                    fwd ? "auto, m16, m32, k32, wg, cudnn"
                        : "auto, fused, split, twopass, twopass4, wg, ds, cudnn");
            return -1;
        }
        if (fwd)
            bench_attn.attn_forward = auto_ ? 0 : k;
        else
            bench_attn.attn_backward = auto_ ? 0 : k + 1;
    }
    *argc = n;
    argv[n] = NULL;
    return 0;
}

static int gpu_main(int argc, char **argv);
static int probe_main(void);

/* Kernels with the same name and shape, summed. */
struct plan_row {
    const struct gpt_cuda_kernel *k;
    int calls;
    double flops, bytes, s;
};

/* One optimizer step (AdamW step number t, clip 1) as the trainer runs it
 * in a world of one: on a backend with the step-on-device ops the loss and
 * the norm stay on the device and come back in one download after the
 * update (the step's one synchronisation); otherwise the host path, ending
 * with a sync. */
static int bench_step(struct gpt_model *m, const struct gpt_optim_spec *opt, const int *x,
                      const int *y, size_t B, size_t T, int64_t t, float *ret_loss)
{
    int rc;
    gpt_model_zero_grad_deferred(m); /* as the trainer */
    if (m->step_dev) {
        double loss_sum, sumsq;
        m->backward_async = 1;
        if ((rc = gpt_model_forward_train_acc(m, x, y, B, T, 1.0f, 1.0, 1)) < 0 ||
            (rc = gpt_model_backward(m, 1.0f)) < 0)
            return rc;
        gpt_grad_sumsq_dev(m, 0, m->n_params);
        gpt_adamw_update_clip_dev(m, opt, 3e-4f, t, 1.0, 0, m->n_params);
        if ((rc = gpt_model_step_fetch(m, &loss_sum, &sumsq)) < 0)
            return rc;
        *ret_loss = (float)loss_sum;
        return 0;
    }
    if ((rc = gpt_model_forward_train(m, x, y, B, T, 1.0f, ret_loss)) < 0 ||
        (rc = gpt_model_backward(m, 1.0f)) < 0)
        return rc;
    double norm = sqrt(gpt_grad_sumsq(m, 0, m->n_params));
    gpt_adamw_update(m, opt, 3e-4f, t, gpt_clip_scale(norm, 1.0), 0, m->n_params);
    return gpt_backend_sync(m->be);
}

/* The model's gradient spans of the recorded step, with the number of
 * kernels recorded when each was reported (it is ready after them). */
#define PLAN_SPANS_MAX (2 * GPT_MAX_TENSORS)
struct plan_spans {
    struct gpt_backend *be;
    size_t n;
    size_t count[PLAN_SPANS_MAX], at[PLAN_SPANS_MAX];
};

static void plan_grads_ready(void *ctx, size_t off, size_t count)
{
    struct plan_spans *p = ctx;
    (void)off;
    size_t nk = 0;
    (void)gpu_plan_rec_kernels(p->be, &nk);
    if (p->n < PLAN_SPANS_MAX) {
        p->count[p->n] = count;
        p->at[p->n++] = nk;
    }
}

struct plan_ddp {
    const int *worlds;
    size_t n_worlds;
    const struct gpt_link_spec *link;
    int wire_bytes; /* per gradient element: 2 (bf16) or 4 (fp32) */
};

/* One JSON line per world: the step with its buckets' all-reduces. */
static void plan_ddp_print(const struct plan_ddp *dd, const struct plan_spans *sp,
                           const struct gpt_cuda_kernel *ks, size_t nk, double total, size_t B,
                           size_t T, const char *mode)
{
    /* Kernel i starts at before[i]; the trainer waits for the buckets
     * before the gradient norm, the first optimizer-class kernel after the
     * backward. */
    double *before = calloc(nk + 1, sizeof(double));
    struct gpt_ddp_bucket *b = calloc(sp->n ? sp->n : 1, sizeof(*b));
    if (!before || !b) {
        free(before);
        free(b);
        return;
    }
    for (size_t i = 0; i < nk; i++)
        before[i + 1] = before[i] + gpt_cuda_kernel_seconds(&ks[i]);
    size_t last_at = sp->n ? sp->at[sp->n - 1] : 0, w = last_at;
    while (w < nk && ks[w].cls != GPT_KC_OPTIM)
        w++;
    double t_wait = before[w], bytes = 0;
    for (size_t i = 0; i < sp->n; i++) {
        b[i].ready_s = before[sp->at[i]];
        b[i].bytes = (double)sp->count[i] * dd->wire_bytes;
        bytes += b[i].bytes;
    }
    for (size_t k = 0; k < dd->n_worlds; k++) {
        int world = dd->worlds[k];
        double end = gpt_ddp_comm_end_s(b, sp->n, dd->link, world), comm = 0;
        for (size_t i = 0; i < sp->n; i++)
            comm += gpt_ddp_allreduce_seconds(dd->link, world, b[i].bytes);
        double exposed = end > t_wait ? end - t_wait : 0, step = total + exposed;
        double last = sp->n ? gpt_ddp_allreduce_seconds(dd->link, world, b[sp->n - 1].bytes) : 0;
        printf("{\"bench\":\"gpu_train_ddp_plan\",\"model\":\"gpt2-124M\",\"mode\":\"%s\","
               "\"B\":%zu,\"T\":%zu,\"world\":%d,\"link\":\"%s\",\"grad_reduce\":\"%s\","
               "\"buckets\":%zu,\"allreduce_mb_per_step\":%.1f,\"last_bucket_mb\":%.1f,"
               "\"compute_ms\":%.3f,\"backward_end_ms\":%.3f,\"comm_ms\":%.3f,"
               "\"last_bucket_ms\":%.3f,\"exposed_ms\":%.3f,\"predicted_ms_per_step\":%.3f,"
               "\"predicted_tokens_per_s\":%.0f,\"predicted_scaling_efficiency\":%.4f}\n",
               mode, B, T, world, dd->link->name, dd->wire_bytes == 2 ? "bf16" : "fp32", sp->n,
               bytes / 1e6, sp->n ? b[sp->n - 1].bytes / 1e6 : 0.0, total * 1e3, t_wait * 1e3,
               comm * 1e3, last * 1e3, exposed * 1e3, step * 1e3, (double)(B * T) * world / step,
               total / step);
    }
    free(before);
    free(b);
}

static int plan_main(size_t B, size_t T, const char *mode, const struct plan_ddp *dd)
{
    struct gpt_backend *be = gpu_plan_rec_new(&bench_attn);
    if (!be)
        return 1;
    int bf16 = strcmp(mode, "bf16") == 0, tf32 = strcmp(mode, "tf32") == 0;
    gpt_backend_set_precision(be, bf16 ? 1 : tf32 ? 0 : GPT_BACKEND_PREC_NO_TF32, 1337);
    struct gpt_model m;
    memset(&m, 0, sizeof(m));
    struct gpt_err err;
    struct gpt_model_config cfg = {
        .n_layer = 12, .n_head = 12, .n_embd = 768, .block_size = (int)T, .vocab_size = 50257};
    int rc = gpt_model_init(&m, &cfg, be, B, &err);
    if (rc == 0)
        rc = gpt_model_alloc_optim(&m, &err);
    if (rc < 0) {
        fprintf(stderr, "bench_gpu_train --plan: %s\n", err.msg);
        gpt_model_done(&m);
        gpt_backend_free(be);
        return 1;
    }
    struct gpt_optim_spec opt = {
        .lr = 3e-4, .min_lr = 3e-5, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
    size_t BT = B * T;
    int *x = calloc(BT, sizeof(int)), *y = calloc(BT, sizeof(int));
    for (size_t i = 0; x && y && i < BT; i++) {
        x[i] = (int)((i * 7919u) % 50257u);
        y[i] = (int)((i * 104729u + 1u) % 50257u);
    }
    float loss = 0;
    static struct plan_spans spans;
    spans.be = be;
    m.grads_ready = plan_grads_ready;
    m.grads_ready_ctx = &spans;
    for (int s = 0; s < 3 && rc == 0 && x && y; s++) {
        gpu_plan_rec_clear(be); /* keep only the last (steady-state) step */
        spans.n = 0;
        rc = bench_step(&m, &opt, x, y, B, T, s + 1, &loss);
    }
    free(x);
    free(y);
    /* Model FLOPs per step, llm.c's count (model.h). */
    double n_params = (double)m.n_params;
    double model_flops = gpt_model_flops_per_token(&m, T) * (double)BT;
    size_t grad_bytes = m.n_params * sizeof(float);
    gpt_model_done(&m);
    size_t nk;
    const struct gpt_cuda_kernel *ks = gpu_plan_rec_kernels(be, &nk);
    if (rc < 0 || nk == 0) {
        fprintf(stderr, "bench_gpu_train --plan: the step did not record (%s)\n",
                rc < 0 ? gpt_strerror(rc)
                : !ks  ? "out of memory"
                       : "no launches");
        gpt_backend_free(be);
        return 1;
    }

    struct plan_row *rows = calloc(nk, sizeof(*rows));
    size_t n_rows = 0;
    double total = 0, by_class[GPT_KC_COUNT] = {0}, gemm_flops = 0, attn_flops = 0;
    double flash_tc_flops = 0;
    int broken = rows == NULL;
    for (size_t i = 0; rows && i < nk; i++) {
        const struct gpt_cuda_kernel *k = &ks[i];
        double s = gpt_cuda_kernel_seconds(k);
        if (!(s >= 0) || !isfinite(s))
            broken = 1;
        total += s;
        by_class[k->cls] += s;
        if (k->cls == GPT_KC_GEMM)
            gemm_flops += k->flops;
        if (k->cls == GPT_KC_ATTN)
            attn_flops += k->flops;
        if (k->unit == GPT_KU_TC_FLASH_FWD || k->unit == GPT_KU_TC_FLASH_BWD)
            flash_tc_flops += k->flops;
        size_t j = 0;
        while (j < n_rows &&
               !(strcmp(rows[j].k->name, k->name) == 0 && strcmp(rows[j].k->shape, k->shape) == 0 &&
                 rows[j].k->unit == k->unit))
            j++;
        if (j == n_rows)
            rows[n_rows++].k = k;
        rows[j].calls++;
        rows[j].flops += k->flops;
        rows[j].bytes += k->bytes;
        rows[j].s += s;
    }
    printf("GPT-2 124M, B=%zu, T=%zu, %s: one training step as the CUDA backend launches it\n", B,
           T, mode);
    printf("(recorded, not executed; roofline on one H200: bf16 tensor cores %.0f TFLOP/s, tf32 "
           "%.0f, CUDA-core fp32 %.0f, memory %.1f TB/s)\n",
           GPT_H200_TC_BF16_FLOPS / 1e12, GPT_H200_TC_TF32_FLOPS / 1e12, GPT_H200_FP32_FLOPS / 1e12,
           GPT_H200_MEM_BPS / 1e12);
    printf("%-22s %-8s %-5s %-3s %-34s %5s %10s %10s %9s %6s\n", "kernel", "class", "dtype", "TC",
           "shape", "calls", "GFLOP", "MB", "pred ms", "share");
    for (size_t j = 0; j < n_rows; j++) {
        const struct gpt_cuda_kernel *k = rows[j].k;
        printf("%-22s %-8s %-5s %-3s %-34s %5d %10.2f %10.1f %9.3f %5.1f%%\n", k->name,
               gpt_cuda_kclass_name(k->cls), k->dtype, k->unit == GPT_KU_FP32 ? "no" : "yes",
               k->shape, rows[j].calls, rows[j].flops / 1e9, rows[j].bytes / 1e6, rows[j].s * 1e3,
               total > 0 ? 100.0 * rows[j].s / total : 0.0);
    }
    double mfu = total > 0 ? model_flops / total / GPT_H200_PEAK_FLOPS : 0;
    printf("\nby class:");
    for (int c = 0; c < GPT_KC_COUNT; c++)
        if (by_class[c] > 0)
            printf(" %s %.2f ms (%.1f%%)", gpt_cuda_kclass_name((enum gpt_cuda_kclass)c),
                   by_class[c] * 1e3, 100.0 * by_class[c] / total);
    printf("\npredicted: %.2f ms/step, %.0f tokens/s, model %.2f TFLOP/step (6N + 6LCT), "
           "MFU %.1f%% of %.0f TFLOP/s\n",
           total * 1e3, (double)BT / total, model_flops / 1e12, 100.0 * mfu,
           GPT_H200_PEAK_FLOPS / 1e12);
    /* The plan is broken when the matrix products do not add up to the
     * model's 6 N FLOPs per token (forward 2N, backward 4N) or attention
     * is missing. */
    double want = 6.0 * n_params * (double)BT;
    if (!(gemm_flops > 0.97 * want && gemm_flops < 1.03 * want)) {
        fprintf(stderr, "plan broken: GEMM FLOPs %.4g, expected %.4g (6N per token)\n", gemm_flops,
                want);
        broken = 1;
    }
    if (!(attn_flops > 0)) {
        fprintf(stderr, "plan broken: no attention kernels\n");
        broken = 1;
    }
    /* The trainer's step (gpt_model_forward_train, then the backward)
     * runs the classifier once, reading the logits once, and zeroes no
     * gradient buffer (the first backward overwrites it). */
    size_t xent = 0, xent_twice = 0, grad_memset = 0;
    for (size_t i = 0; i < nk; i++) {
        const struct gpt_cuda_kernel *k = &ks[i];
        if (strcmp(k->name, "softmax_xent") == 0) {
            xent++;
            xent_twice += !strstr(k->shape, " 1-read");
        }
        grad_memset += strcmp(k->name, "memset") == 0 && k->bytes >= (double)grad_bytes;
    }
    if (xent != 1 || xent_twice > 0) {
        fprintf(stderr, "plan broken: %zu classifier launches, %zu reading the logits twice\n",
                xent, xent_twice);
        broken = 1;
    }
    if (grad_memset > 0) {
        fprintf(stderr, "plan broken: the step zeroes the whole gradient buffer\n");
        broken = 1;
    }
    /* The tensor-core flash kernels do 14 hs FLOPs per causal pair (4 in
     * the forward, 10 in the fused backward) over the T (T + 1) / 2 pairs
     * of each (layer, b, h), plus at most 8 T masked pairs (the diagonal
     * 16 x 16 groups' 120 each), and the backward's D, 2 hs per query row
     * of each visited tile: more means the kernels (or their entries here)
     * redo work, less that they miss some. With attention_backward twopass,
     * 18 hs per pair (4, then 6 in the dQ pass and 8 in the dK/dV pass)
     * and D once per row. attention_backward ds: the fused pass's FLOPs, its
     * dQ shares in a second pass. */
    /* cuDNN's kernels are not modelled: priced as the hand-written default */
    const enum gpt_flash_bwd bv0 = gpt_flash_tc_bwd_of_spec(bench_attn.attn_backward);
    const enum gpt_flash_bwd bv = bv0 == GPT_FLASH_BWD_CUDNN ? GPT_FLASH_BWD_DEFAULT : bv0;
    const size_t ds_chunk = gpt_flash_tc_ds_chunk(B * 12, (int)T, 64);
    const int ds = bv == GPT_FLASH_BWD_DS && ds_chunk > 0;
    const int twopass = gpt_flash_tc_bwd_twopass(bv) || (bv == GPT_FLASH_BWD_DS && !ds);
    /* backward launches per pass and layer: one, or the dS backward's chunks */
    const size_t per_layer = ds ? (B * 12 + ds_chunk - 1) / ds_chunk : 1;
    double pairs_min = 12.0 * B * 12 * (double)T * (T + 1) / 2, hs = 768 / 12;
    double per_pair = twopass ? 18.0 : 14.0;
    double d_flops = twopass ? 12.0 * B * T * 768 * 2.0
                             : 12.0 * B * 12 * gpt_flash_tc_tiles((int)T, 64, 0) *
                                   gpt_flash_tc_bcq(64) * 2.0 * hs;
    if (flash_tc_flops > 0 &&
        !(flash_tc_flops - d_flops >= per_pair * hs * pairs_min &&
          flash_tc_flops - d_flops <= per_pair * hs * (pairs_min + 12.0 * B * 12 * 8.0 * T))) {
        fprintf(stderr, "plan broken: flash FLOPs %.4g, causal pairs need %.4g\n", flash_tc_flops,
                per_pair * hs * pairs_min + d_flops);
        broken = 1;
    }
    /* With the tensor-core kernels each layer runs two attention kernels,
     * the forward and the fused backward (D inside it, no prep pass), or
     * three with two backward passes, and the forward writes out (bf16,
     * bf16 only in the steady state) and the logsumexp, nothing else: att
     * holds the logsumexp only, no copy of out. */
    if (flash_tc_flops > 0) {
        struct gpt_cuda_attn_plan ap;
        gpt_cuda_plan_attention(&ap, B, T, 768, 12, REC_SMEM_OPTIN, GPT_CUDA_ATTN_FLASH);
        size_t attn_launches = 0, fwd = 0, bwd = 0, bwd2 = 0;
        double fwd_bytes = 0, btc = (double)B * T * 768;
        for (size_t i = 0; i < nk; i++) {
            const struct gpt_cuda_kernel *k = &ks[i];
            attn_launches += k->cls == GPT_KC_ATTN;
            fwd += strcmp(k->name, "flash_tc_forward") == 0;
            bwd += strcmp(k->name, twopass ? "flash_tc_bwd_dq"
                                   : ds    ? "flash_tc_bwd_ds"
                                           : "flash_tc_bwd") == 0;
            bwd2 += strcmp(k->name, ds ? "flash_tc_dsq" : "flash_tc_bwd_dkv") == 0;
            if (strcmp(k->name, "flash_tc_forward") == 0)
                fwd_bytes += k->bytes;
        }
        const int two = twopass || ds; /* backward passes per layer, less one */
        if (attn_launches != 12 + (two ? 24u : 12u) * per_layer || fwd != 12 ||
            bwd != 12 * per_layer || bwd2 != (two ? 12u * per_layer : 0u)) {
            fprintf(stderr,
                    "plan broken: %zu attention kernels (%zu forward, %zu + %zu backward), want "
                    "one forward and %s per layer (in %zu chunks)\n",
                    attn_launches, fwd, bwd, bwd2,
                    two ? "the two backward passes" : "one fused backward", per_layer);
            broken = 1;
        }
        if (gpt_cuda_plan_att_floats(&ap, B, T, 768, 12, 0) != ap.lse_floats) {
            fprintf(stderr, "plan broken: att holds %zu floats per layer, the logsumexp %zu\n",
                    gpt_cuda_plan_att_floats(&ap, B, T, 768, 12, 0), ap.lse_floats);
            broken = 1;
        }
        if (strcmp(mode, "bf16") == 0 && fwd_bytes > 12.0 * (8.0 * btc + 4.0 * ap.lse_floats)) {
            fprintf(stderr,
                    "plan broken: the attention forwards move %.1f MB, more than q, k, v "
                    "read and out written as bf16 and the logsumexp\n",
                    fwd_bytes / 1e6);
            broken = 1;
        }
    }
    /* bf16: the steady-state step converts nothing (every bf16-only range
     * is read as bf16), and the gradient the products write into a->dc
     * stays bf16 only: the tensor-core attention backward and LayerNorm's
     * backward read it from its bf16 copy. The residual stream and its
     * gradient are bf16 only too: the encoder and the skip connection's
     * products write the stream as bf16, LayerNorm reads it as bf16 both
     * ways, its backward accumulates the gradient in bf16, and the
     * encoder's backward reads that. */
    if (strcmp(mode, "bf16") == 0) {
        size_t fp32_dout = 0, fp32_resid = 0;
        int lnb_single = gpt_cuda_plan_lnb_blocks(BT, 768, GPT_CUDA_SCRATCH_FLOATS) > 0;
        for (size_t i = 0; i < nk; i++) {
            const struct gpt_cuda_kernel *k = &ks[i];
            int lnb = strcmp(k->name, "layernorm_backward") == 0 && lnb_single;
            int dout_reader = strncmp(k->name, "flash_tc_bwd", 12) == 0 || lnb;
            fp32_dout += dout_reader && !strstr(k->shape, "bf16 dout");
            if (strcmp(k->name, "layernorm_forward") == 0)
                fp32_resid += !strstr(k->shape, " bf16 in");
            else if (strcmp(k->name, "gemm_fwd+bias+res") == 0 ||
                     strcmp(k->name, "gemm_fwd+res") == 0 ||
                     strcmp(k->name, "encoder_forward") == 0)
                fp32_resid += !strstr(k->shape, "->bf16");
            else if (strncmp(k->name, "encoder_backward", 16) == 0)
                fp32_resid += !strstr(k->shape, " bf16 dout");
            else if (lnb)
                fp32_resid += !strstr(k->shape, " inp") || !strstr(k->shape, " dinp");
        }
        if (fp32_resid > 0) {
            fprintf(stderr,
                    "plan broken: %zu kernels keep the residual stream or its gradient in fp32\n",
                    fp32_resid);
            broken = 1;
        }
        if (by_class[GPT_KC_CONVERT] > 0) {
            fprintf(stderr, "plan broken: conversion kernels in the steady-state bf16 step\n");
            broken = 1;
        }
        if (fp32_dout > 0) {
            fprintf(stderr, "plan broken: %zu backward kernels read a product's dinp as fp32\n",
                    fp32_dout);
            broken = 1;
        }
    }
    printf("{\"bench\":\"gpu_train_plan\",\"model\":\"gpt2-124M\",\"mode\":\"%s\",\"B\":%zu,"
           "\"T\":%zu,\"flash_bwd\":\"%s\",\"flash_fwd\":\"%s\",\"kernels\":%zu,"
           "\"predicted_ms_per_step\":%.3f,\"predicted_mfu\":%.4f,"
           "\"model_tflop_per_step\":%.3f,\"share\":{",
           mode, B, T, flash_bwd_name(B, T), flash_fwd_name(), nk, total * 1e3, mfu,
           model_flops / 1e12);
    for (int c = 0, first = 1; c < GPT_KC_COUNT; c++) {
        printf("%s\"%s\":%.4f", first ? "" : ",", gpt_cuda_kclass_name((enum gpt_cuda_kclass)c),
               total > 0 ? by_class[c] / total : 0.0);
        first = 0;
    }
    printf("},\"ms_by_class\":{");
    for (int c = 0, first = 1; c < GPT_KC_COUNT; c++) {
        printf("%s\"%s\":%.3f", first ? "" : ",", gpt_cuda_kclass_name((enum gpt_cuda_kclass)c),
               by_class[c] * 1e3);
        first = 0;
    }
    printf("},\"plan_ok\":%s}\n", broken ? "false" : "true");
    if (dd->n_worlds > 0) {
        if (spans.n == 0) {
            fprintf(stderr, "plan broken: the backward reported no gradient spans\n");
            broken = 1;
        }
        plan_ddp_print(dd, &spans, ks, nk, total, B, T, mode);
    }
    free(rows);
    gpt_backend_free(be);
    return broken ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (take_attn_flags(&argc, argv) < 0)
        return 2;
    if (argc > 1 && strcmp(argv[1], "--plan") == 0) {
        long B = 16, T = 1024;
        const char *mode = "bf16";
        static int worlds[64];
        struct plan_ddp dd = {worlds, 0, gpt_link_get(GPT_LINK_NVLINK), 2};
        int bad = 0, pos = 0;
        for (int i = 2; i < argc && !bad; i++) {
            const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
            if (strcmp(a, "--world") == 0 && v) {
                const char *p = v;
                while (*p && !bad) {
                    char *end;
                    long w = strtol(p, &end, 10);
                    bad = end == p || w < 1 || w > 65536 || (*end && *end != ',') ||
                          dd.n_worlds == sizeof(worlds) / sizeof(worlds[0]);
                    if (!bad)
                        worlds[dd.n_worlds++] = (int)w;
                    p = *end ? end + 1 : end;
                }
                i++;
            } else if (strcmp(a, "--link") == 0 && v) {
                bad = !(dd.link = gpt_link_find(v));
                i++;
            } else if (strcmp(a, "--grad-reduce") == 0 && v) {
                bad = strcmp(v, "bf16") && strcmp(v, "fp32");
                dd.wire_bytes = strcmp(v, "fp32") == 0 ? 4 : 2;
                i++;
            } else if (a[0] != '-' && pos < 3) {
                if (pos == 0)
                    B = atol(a);
                else if (pos == 1)
                    T = atol(a);
                else
                    mode = a;
                pos++;
            } else {
                bad = 1;
            }
        }
        if (bad || B < 1 || B > 4096 || T < 2 || T > 65536 ||
            (strcmp(mode, "bf16") && strcmp(mode, "tf32") && strcmp(mode, "fp32"))) {
            fprintf(stderr, "usage: bench_gpu_train --plan [batch=16] [T=1024] [bf16|tf32|fp32] "
                            "[--world N[,N...]] [--link nvlink|ib400|eth100] "
                            "[--grad-reduce bf16|fp32] [--attn-fwd NAME] [--attn-bwd NAME]\n");
            return 2;
        }
        return plan_main((size_t)B, (size_t)T, mode, &dd);
    }
    if (argc > 1 && strcmp(argv[1], "--probe") == 0)
        return probe_main();
    return gpu_main(argc, argv);
}

#ifdef GPTD_HAVE_CUDA
#include "cuda/cuda_backend.h"
#include "cuda/cuda_probe.h"

/* The GEMM levers this process runs (header), as set_precision flags. */
static int gemm_flags(void)
{
    const char *t = getenv("GPTD_GEMM_AUTOTUNE"), *g = getenv("GPTD_GEMM_GELU");
    return (t && strcmp(t, "1") == 0 ? GPT_BACKEND_PREC_GEMM_TUNE : 0) |
           (g && strcmp(g, "unfused") == 0 ? GPT_BACKEND_PREC_GELU_UNFUSED : 0);
}

#define WARMUP 2

#define MAX_MODES 3

struct bench_row {
    const char *mode;
    const char *attn;
    double ms, tokens_s, tflops, mfu, peak_gib; /* mfu NAN: the device's peak is unknown */
    float loss;
};

/* v with `digits` decimals, or null where it is not finite: a JSON
 * number. */
static const char *json_num(char *buf, size_t cap, int digits, double v)
{
    if (!isfinite(v))
        return "null";
    snprintf(buf, cap, "%.*f", digits, v);
    return buf;
}

/* The device's dense peak for `mode` (peak.h's table), NAN when the table
 * lacks the device; its name and capability to *gpu. */
static double mode_peak(struct gpt_backend *be, const char *mode, char *gpu, size_t cap)
{
    int cc = 0;
    if (gpt_backend_device_info(be, gpu, cap, &cc) < 0) {
        snprintf(gpu, cap, "?");
        return NAN;
    }
    const struct gpt_device_peak *p = gpt_peak_device_find(gpu, cc);
    size_t n = strlen(gpu);
    snprintf(gpu + n, cap - n, " (cc %d.%d)", cc / 10, cc % 10);
    enum gpt_peak_math math = strcmp(mode, "bf16") == 0   ? GPT_PEAK_BF16
                              : strcmp(mode, "tf32") == 0 ? GPT_PEAK_TF32
                                                          : GPT_PEAK_FP32;
    return p ? p->flops[math] : NAN;
}

/* One profiled step's time by backend op (gpt_cuda_backend_profile_*),
 * summed over the op's calls, and by the cost model's class. */
#define PROF_OPS_MAX  64
#define PROF_STEP_OPS 4096 /* events for one step (GPT-2 124M: ~350 ops) */

struct prof {
    const char *op[PROF_OPS_MAX];
    int calls[PROF_OPS_MAX];
    double ms[PROF_OPS_MAX];
    size_t n;
    double by_class[GPT_KC_COUNT];
};

/* The cost model's class of a backend op (engine/ops/cuda's function
 * names): the class of the kernels it launches. */
static enum gpt_cuda_kclass prof_class(const char *op)
{
    static const struct {
        const char *prefix;
        enum gpt_cuda_kclass cls;
    } map[] = {
        {"cuda_matmul_", GPT_KC_GEMM},         {"cuda_attention_", GPT_KC_ATTN},
        {"cuda_layernorm_", GPT_KC_NORM},      {"cuda_residual_layernorm_", GPT_KC_NORM},
        {"cuda_softmax_xent", GPT_KC_XENT},    {"cuda_encoder_", GPT_KC_EMBED},
        {"cuda_adamw", GPT_KC_OPTIM},          {"cuda_sumsq", GPT_KC_OPTIM},
        {"cuda_scale", GPT_KC_OPTIM},          {"cuda_gelu_", GPT_KC_ELT},
        {"cuda_residual_forward", GPT_KC_ELT}, {"cuda_loss_accum", GPT_KC_XENT},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (strncmp(op, map[i].prefix, strlen(map[i].prefix)) == 0)
            return map[i].cls;
    return GPT_KC_MEM; /* memzero, copy, upload, download, sync */
}

static void prof_add(void *ctx, const char *op, double ms)
{
    struct prof *p = ctx;
    p->by_class[prof_class(op)] += ms;
    size_t i = 0;
    while (i < p->n && strcmp(p->op[i], op) != 0)
        i++;
    if (i == p->n) {
        if (p->n == PROF_OPS_MAX)
            return;
        p->op[p->n++] = op;
    }
    p->calls[i]++;
    p->ms[i] += ms;
}

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
    int rc = gpt_backend_cuda_new(device, &bench_attn, &be, &err);
    if (rc < 0) {
        fprintf(stderr, "bench_gpu_train: %s\n", err.msg);
        return rc;
    }
    const int levers = gemm_flags();
    if ((rc = gpt_backend_set_precision(be, bf16 | (tf32 ? 0 : GPT_BACKEND_PREC_NO_TF32) | levers,
                                        1337)) < 0) {
        fprintf(stderr, "bench_gpu_train: set_precision: %s\n", gpt_strerror(rc));
        goto out;
    }
    struct gpt_cuda_attn_plan plan;
    gpt_cuda_backend_attention_plan(be, B, T, 768, 12, &plan);
    struct gpt_model_config cfg = {
        .n_layer = 12, .n_head = 12, .n_embd = 768, .block_size = (int)T, .vocab_size = 50257};
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
    float loss = 0, loss2 = 0; /* the last step's, step 2's (after one update) */
    /* Device memory held after step 2 and after the timed steps: the goal
     * is none allocated after step 2. */
    size_t bytes_step2 = 0, bytes_steps = 0, peak;
    /* host synchronisations in one timed step, at most (the first step's
     * attention guard, backend.h, adds its own) */
    uint64_t max_syncs = 0;
    for (int s = -WARMUP; s < steps && rc == 0; s++) {
        double t0 = now_s();
        uint64_t syncs0 = gpt_cuda_backend_host_syncs(be);
        if ((rc = bench_step(&m, &opt, x, y, B, T, s + WARMUP + 1, &loss)) < 0)
            break;
        if (s >= 0)
            total += now_s() - t0;
        if (s == 1 - WARMUP) {
            gpt_cuda_backend_mem_stats(be, &bytes_step2, &peak);
            loss2 = loss;
        }
        uint64_t syncs = gpt_cuda_backend_host_syncs(be) - syncs0;
        if (s >= 0)
            max_syncs = syncs > max_syncs ? syncs : max_syncs;
    }
    gpt_cuda_backend_mem_stats(be, &bytes_steps, &peak);
    /* One more step with each op's GPU time (CUDA events), for the cost
     * model's calibration: bench_gpu_train --plan B prints its prediction
     * by the same classes. */
    struct prof prof = {0};
    if (rc == 0 && (rc = gpt_cuda_backend_profile_start(be, PROF_STEP_OPS)) == 0) {
        rc = bench_step(&m, &opt, x, y, B, T, steps + WARMUP + 1, &loss);
        int prc = gpt_cuda_backend_profile_stop(be, prof_add, &prof);
        rc = rc < 0 ? rc : prc;
    }
    /* An eval at another shape (half the batch, forward only) must not
     * grow device memory: every shadow and buffer exists since step 1. */
    size_t bytes_train = 0, bytes_eval = 0;
    gpt_cuda_backend_mem_stats(be, &bytes_train, &peak);
    float eval_loss = 0;
    if (rc == 0 && B > 1 && (rc = gpt_model_forward(&m, x, y, B / 2, T, &eval_loss)) == 0)
        rc = gpt_backend_sync(be);
    gpt_cuda_backend_mem_stats(be, &bytes_eval, &peak);
    free(x);
    free(y);
    if (rc < 0) {
        fprintf(stderr, "bench_gpu_train: step failed: %s (%s)\n", gpt_strerror(rc),
                gpt_cuda_backend_last_error(be));
        goto out;
    }
    double step_s = total / steps;
    double flops = gpt_model_flops_per_token(&m, T) * (double)BT; /* llm.c's count */
    char gpu[300];
    double peak_flops = mode_peak(be, mode, gpu, sizeof(gpu));
    *row = (struct bench_row){mode,
                              plan.kind == GPT_CUDA_ATTN_FLASH ? "flash" : "gemm",
                              step_s * 1e3,
                              (double)BT / step_s,
                              flops / step_s / 1e12,
                              flops / step_s / peak_flops,
                              (double)peak / (double)(1ull << 30),
                              loss};
    char mfu_s[32], peak_s[32];
    printf("{\"bench\":\"gpu_train\",\"model\":\"gpt2-124M\",\"mode\":\"%s\",\"attention\":"
           "\"%s\",\"flash_bwd\":\"%s\",\"flash_fwd\":\"%s\",\"batch\":%zu,"
           "\"T\":%zu,\"steps\":%d,\"ms_per_step\":%.1f,\"tokens_per_s\":%.0f,\"tflops\":%.1f,"
           "\"mfu\":%s,\"peak_tflops\":%s,\"gpu\":\"%s\",\"peak_mem_gib\":%.2f,"
           "\"loss\":%.4f,\"loss_step2\":%.9g,\"host_syncs_per_step\":%llu,"
           "\"cudnn_passes\":%llu,\"gemm_autotune\":%d,\"gelu\":\"%s\"}\n",
           row->mode, row->attn, flash_bwd_name(B, T), flash_fwd_name(), B, T, steps, row->ms,
           row->tokens_s, row->tflops, json_num(mfu_s, sizeof(mfu_s), 4, row->mfu),
           json_num(peak_s, sizeof(peak_s), 1, peak_flops / 1e12), gpu, row->peak_gib, (double)loss,
           (double)loss2, (unsigned long long)max_syncs,
           /* attention passes cuDNN ran: 0 where it refused (the default ran) */
           (unsigned long long)gpt_cuda_flash_dnn_launches(),
           (levers & GPT_BACKEND_PREC_GEMM_TUNE) != 0,
           levers & GPT_BACKEND_PREC_GELU_UNFUSED ? "unfused" : "epilogue");
    /* The profiled step: ms by op and by the cost model's class. */
    printf("{\"bench\":\"gpu_train_ops\",\"mode\":\"%s\",\"batch\":%zu,\"T\":%zu,"
           "\"step2_grew_bytes\":%lld,\"eval_grew_bytes\":%lld,\"ms_by_class\":{",
           mode, B, T, (long long)bytes_steps - (long long)bytes_step2,
           (long long)bytes_eval - (long long)bytes_train);
    for (int c = 0; c < GPT_KC_COUNT; c++)
        printf("%s\"%s\":%.3f", c ? "," : "", gpt_cuda_kclass_name(c), prof.by_class[c]);
    printf("},\"ms_by_op\":{");
    for (size_t i = 0; i < prof.n; i++)
        printf("%s\"%s\":{\"calls\":%d,\"ms\":%.3f}", i ? "," : "", prof.op[i], prof.calls[i],
               prof.ms[i]);
    printf("}}\n");
    if (bytes_steps != bytes_step2)
        fprintf(stderr, "bench_gpu_train: steps 3 to %d grew device memory by %lld bytes\n",
                steps + WARMUP, (long long)bytes_steps - (long long)bytes_step2);
    if (bytes_eval != bytes_train)
        fprintf(stderr, "bench_gpu_train: an eval at batch %zu grew device memory by %lld bytes\n",
                B / 2, (long long)bytes_eval - (long long)bytes_train);
    fflush(stdout);
out:
    gpt_model_done(&m);
    gpt_backend_free(be);
    return rc;
}

/* --probe: what CUDA says about this host, in one line; 0 with a GPU, 77
 * without one, 1 when GPUs exist but CUDA cannot use them. */
static int probe_main(void)
{
    char msg[512];
    int n = gpt_cuda_probe(msg, sizeof(msg));
    printf("cuda probe: %s\n", msg);
    for (int i = 0; i < n; i++) {
        char name[256];
        size_t mem = 0;
        if (gpt_cuda_device_info(i, name, sizeof(name), &mem) == 0)
            printf("gpu %d: %s, %.1f GiB\n", i, name, (double)mem / (double)(1ull << 30));
    }
    return n > 0 ? 0 : n == 0 ? 77 : 1;
}

static int gpu_main(int argc, char **argv)
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
    char probe[512];
    int probed = gpt_cuda_probe(probe, sizeof(probe));
    if (probed < 0) {
        fprintf(stderr, "FAIL: %s\n", probe);
        return 1;
    }
    if (probed == 0) {
        printf("%s: skipped\n", probe);
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
    printf("MFU: llm.c's count (6N + 6LCT per token) over the device's dense peak for the "
           "mode (nan: a device the peak table lacks).\n");
    return ok == n_modes ? 0 : 1;
}

#else

static int probe_main(void)
{
    printf("cuda probe: built without CUDA\n");
    return 77;
}

static int gpu_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("bench_gpu_train: built without CUDA, skipped\n");
    return 77;
}

#endif
