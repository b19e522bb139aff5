/*
 * test_gpu_step: a training step's results on the device (backend.h's
 * step-on-device ops) on the CUDA backend:
 *  - loss_accum's sum equals the downloaded losses' sum (to 1e-12; the
 *    same bits on a second run), reset and accumulate both;
 *  - sumsq_dev writes sumsq's bits, at odd sizes;
 *  - adamw_multi_clip gives adamw_multi's bits when the host passes
 *    gpt_clip_scale(sqrt(sumsq), clip): clipping, not clipping, clip off,
 *    a NaN and an infinite norm, one launch and the per-span fallback;
 *  - gpt_train (world of one, two micro-batches, the default bf16) on the
 *    backend synchronises the host at most once per optimizer step
 *    (gpt_cuda_backend_host_syncs, 7 steps), and its losses and grad norms
 *    match a run whose backend lacks the three ops (the host path: same
 *    norms bit for bit, losses to 1e-6).
 * Exits 77 without a GPU.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_probe.h"
#include "gpu/gpu_gate.h"
#include "jobspec.h"
#include "optim.h"
#include "rng.h"
#include "trainer.h"
#include "unit/tiny_job.h"

static int fails;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            fails++;                                                                               \
        }                                                                                          \
    } while (0)

static void *dev_alloc(struct gpt_backend *be, size_t bytes)
{
    void *p = NULL;
    if (gpt_backend_alloc(be, bytes, &p) < 0) {
        fprintf(stderr, "alloc %zu: %s\n", bytes, gpt_cuda_backend_last_error(be));
        exit(1);
    }
    return p;
}

static void fill(struct gpt_rng *rng, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * (float)gpt_rng_uniform(rng);
}

/* ---- ops ---- */

static void test_loss_accum(struct gpt_backend *be, struct gpt_rng *rng)
{
    const size_t N = 4099;
    float *h = malloc(N * sizeof(float));
    fill(rng, h, N, 0.0f, 11.0f);
    for (size_t i = 0; i < N; i += 7)
        h[i] = 0.0f; /* ignored rows */
    float *d = dev_alloc(be, N * sizeof(float));
    double *acc = dev_alloc(be, sizeof(double));
    gpt_backend_upload(be, d, h, N * sizeof(float));
    double sum = 0, want, got[2];
    for (size_t i = 0; i < N; i++)
        sum += h[i];
    for (int run = 0; run < 2; run++) {
        gpt_backend_loss_accum(be, acc, d, N, 0.25, 1);
        gpt_backend_loss_accum(be, acc, d, 1000, 3.0, 0); /* a shorter batch, accumulated */
        CHECK(gpt_backend_download(be, &got[run], acc, sizeof(double)) == 0, "download: %s",
              gpt_cuda_backend_last_error(be));
    }
    double head = 0;
    for (size_t i = 0; i < 1000; i++)
        head += h[i];
    want = 0.25 * sum + 3.0 * head;
    printf("loss_accum: %.17g, host %.17g\n", got[0], want);
    CHECK(fabs(got[0] - want) <= 1e-12 * want, "loss_accum %.17g, host sum %.17g", got[0], want);
    CHECK(memcmp(&got[0], &got[1], sizeof(double)) == 0, "loss_accum not deterministic");
    gpt_backend_mem_free(be, d);
    gpt_backend_mem_free(be, acc);
    free(h);
}

static void test_sumsq_dev(struct gpt_backend *be, struct gpt_rng *rng)
{
    const size_t sizes[] = {1, 255, 4097, ((size_t)1 << 20) + 7, (size_t)25 << 20};
    double *out = dev_alloc(be, sizeof(double));
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        float *h = malloc(n * sizeof(float));
        fill(rng, h, n, -2.0f, 2.0f);
        float *d = dev_alloc(be, n * sizeof(float));
        gpt_backend_upload(be, d, h, n * sizeof(float));
        double ref = gpt_backend_sumsq(be, d, n), got = 0;
        gpt_backend_sumsq_dev(be, out, d, n);
        CHECK(gpt_backend_download(be, &got, out, sizeof(double)) == 0, "download");
        printf("sumsq_dev n=%zu: %.17g, sumsq %.17g\n", n, got, ref);
        CHECK(memcmp(&got, &ref, sizeof(double)) == 0, "sumsq_dev n=%zu: %.17g != %.17g", n, got,
              ref);
        gpt_backend_mem_free(be, d);
        free(h);
    }
    gpt_backend_mem_free(be, out);
}

/* Four buffers of n floats (params, grads, m, v) on the device. */
struct adam_state {
    float *p, *g, *m, *v;
};

static void adam_upload(struct gpt_backend *be, struct adam_state *s, float *const h[4], size_t n)
{
    float **d[4] = {&s->p, &s->g, &s->m, &s->v};
    for (int i = 0; i < 4; i++) {
        if (!*d[i])
            *d[i] = dev_alloc(be, n * sizeof(float));
        gpt_backend_upload(be, *d[i], h[i], n * sizeof(float));
    }
}

static int adam_same(struct gpt_backend *be, const struct adam_state *a, const struct adam_state *b,
                     size_t n)
{
    const float *pa[3] = {a->p, a->m, a->v}, *pb[3] = {b->p, b->m, b->v};
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    int same = 1;
    for (int i = 0; i < 3 && same; i++) {
        gpt_backend_download(be, x, pa[i], n * sizeof(float));
        gpt_backend_download(be, y, pb[i], n * sizeof(float));
        same = memcmp(x, y, n * sizeof(float)) == 0;
    }
    free(x);
    free(y);
    return same;
}

static void test_adamw_clip(struct gpt_backend *be, struct gpt_rng *rng)
{
    const size_t n = 300007;
    float *h[4];
    for (int i = 0; i < 4; i++)
        h[i] = malloc(n * sizeof(float));
    fill(rng, h[0], n, -1.0f, 1.0f);
    fill(rng, h[1], n, -3.0f, 3.0f);
    fill(rng, h[2], n, -0.1f, 0.1f);
    fill(rng, h[3], n, 0.0f, 0.01f);
    /* Contiguous spans (one launch) and spans with gaps (one per span). */
    const struct gpt_adamw_span joined[3] = {{0, 1000, 1}, {1000, 99007, 0}, {100007, 200000, 1}};
    const struct gpt_adamw_span gapped[2] = {{0, 1000, 1}, {2000, 298007, 1}};
    const double sums[] = {1e6, 1e-4, NAN, INFINITY, 0.0};
    const double clips[] = {1.0, 0.0};
    double *sq = dev_alloc(be, sizeof(double));
    struct adam_state a = {0}, b = {0};
    for (int layout = 0; layout < 2; layout++)
        for (size_t i = 0; i < sizeof(sums) / sizeof(sums[0]); i++)
            for (size_t j = 0; j < sizeof(clips) / sizeof(clips[0]); j++) {
                const struct gpt_adamw_span *sp = layout ? gapped : joined;
                size_t ns = layout ? 2 : 3;
                float gs = gpt_clip_scale(sqrt(sums[i]), clips[j]);
                adam_upload(be, &a, h, n);
                adam_upload(be, &b, h, n);
                gpt_backend_upload(be, sq, &sums[i], sizeof(double));
                for (int step = 0; step < 2; step++) {
                    gpt_backend_adamw_multi(be, a.p, a.g, a.m, a.v, sp, ns, 1e-3f, 0.9f, 0.95f,
                                            1e-8f, 0.1f, gs, 0.1f, 0.05f);
                    gpt_backend_adamw_multi_clip(be, b.p, b.g, b.m, b.v, sp, ns, 1e-3f, 0.9f, 0.95f,
                                                 1e-8f, 0.1f, sq, clips[j], 0.1f, 0.05f);
                }
                int same = adam_same(be, &a, &b, n);
                printf("adamw_multi_clip %s sumsq %g clip %g (factor %.9g): %s\n",
                       layout ? "gapped" : "joined", sums[i], clips[j], gs,
                       same ? "same bits" : "DIFFERENT");
                CHECK(same, "adamw_multi_clip differs from adamw_multi with the host factor");
            }
    float *bufs[8] = {a.p, a.g, a.m, a.v, b.p, b.g, b.m, b.v};
    for (int i = 0; i < 8; i++)
        gpt_backend_mem_free(be, bufs[i]);
    gpt_backend_mem_free(be, sq);
    for (int i = 0; i < 4; i++)
        free(h[i]);
}

/* ---- the trainer ---- */

#define STEPS 7

struct run {
    struct gpt_backend *be;
    const struct gpt_backend_ops *cuda_ops; /* to read the counter while wrapped */
    int n;
    double loss[STEPS], norm[STEPS];
    uint64_t syncs[STEPS];
};

static uint64_t host_syncs(struct run *r)
{
    const struct gpt_backend_ops *ops = r->be->ops;
    r->be->ops = r->cuda_ops; /* the accessor checks the vtable */
    uint64_t n = gpt_cuda_backend_host_syncs(r->be);
    r->be->ops = ops;
    return n;
}

static void hook_metric(void *ctx, const struct gpt_metric *m)
{
    struct run *r = ctx;
    if (r->n >= STEPS)
        return;
    r->loss[r->n] = m->loss;
    r->norm[r->n] = m->grad_norm;
    r->syncs[r->n] = host_syncs(r);
    r->n++;
}

/* gpt_train on a fresh CUDA backend, with its step-on-device ops or with
 * them removed (host: the host path on the same device). */
static int train(int host, struct run *r)
{
    struct gpt_job job;
    struct gpt_err err;
    tiny_job(&job, 64, STEPS);
    job.trainer.micro_batch = 4;
    job.trainer.global_batch = 8;
    job.trainer.threads = 0;     /* the default: the host's OpenMP threads */
    job.trainer.peak_gflops = 0; /* the device table's peak */
    job.trainer.eval_batches = 1;
    job.trainer.grad_clip = 0.5;
    job.optimizer.lr = 3e-3;
    job.optimizer.warmup_steps = 0;
    if (tiny_job_check(&job) < 0)
        return -1;
    memset(r, 0, sizeof(*r));
    if (gpt_backend_cuda_new(0, NULL, &r->be, &err) < 0) {
        fprintf(stderr, "backend: %s\n", err.msg);
        return -1;
    }
    r->cuda_ops = r->be->ops;
    struct gpt_backend_ops plain = *r->be->ops;
    if (host) {
        plain.loss_accum = NULL;
        plain.sumsq_dev = NULL;
        plain.adamw_multi_clip = NULL;
        r->be->ops = &plain;
    }
    struct gpt_trainer_opts to = {
        .job = &job, .backend = r->be, .hooks = {.ctx = r, .metric = hook_metric}};
    struct gpt_train_result res;
    int rc = gpt_train(&to, &res, &err);
    r->be->ops = r->cuda_ops;
    if (rc != GPT_TRAIN_DONE)
        fprintf(stderr, "train (%s path): %d %s (%s)\n", host ? "host" : "device", rc, err.msg,
                gpt_cuda_backend_last_error(r->be));
    gpt_backend_free(r->be);
    return rc == GPT_TRAIN_DONE && r->n == STEPS ? 0 : -1;
}

static void test_train(void)
{
    static struct run dev, host;
    if (train(0, &dev) < 0 || train(1, &host) < 0) {
        CHECK(0, "training failed");
        return;
    }
    for (int i = 0; i < STEPS; i++) {
        uint64_t sd = i ? dev.syncs[i] - dev.syncs[i - 1] : 0;
        uint64_t sh = i ? host.syncs[i] - host.syncs[i - 1] : 0;
        printf("step %d: loss %.9g / host %.9g, norm %.17g / host %.17g, host syncs %llu / host "
               "path %llu\n",
               i + 1, dev.loss[i], host.loss[i], dev.norm[i], host.norm[i], (unsigned long long)sd,
               (unsigned long long)sh);
        CHECK(memcmp(&dev.norm[i], &host.norm[i], sizeof(double)) == 0, "step %d: norm differs",
              i + 1);
        CHECK(fabs(dev.loss[i] - host.loss[i]) <= 1e-6 * fabs(host.loss[i]),
              "step %d: loss differs", i + 1);
        /* Steps 2..STEPS-1: the first includes set-up, the last evaluates. */
        if (i > 0 && i < STEPS - 1)
            CHECK(sd <= 1, "step %d synchronised the host %llu times", i + 1,
                  (unsigned long long)sd);
    }
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* the log keeps what came before an abort */
    int probed = gpu_test_gate();
    if (probed <= 0)
        return -probed;
    struct gpt_backend *be = NULL;
    struct gpt_err err;
    if (gpt_backend_cuda_new(0, NULL, &be, &err) < 0) {
        fprintf(stderr, "backend: %s\n", err.msg);
        return 1;
    }
    CHECK(gpt_backend_step_on_device(be), "the CUDA backend lacks the step-on-device ops");
    struct gpt_rng rng;
    gpt_rng_seed(&rng, 7);
    test_loss_accum(be, &rng);
    test_sumsq_dev(be, &rng);
    test_adamw_clip(be, &rng);
    CHECK(gpt_backend_sync(be) == 0, "sync: %s", gpt_cuda_backend_last_error(be));
    gpt_backend_free(be);
    test_train();
    if (fails)
        printf("FAILED: %d check(s)\n", fails);
    else
        printf("ok\n");
    return fails != 0;
}
