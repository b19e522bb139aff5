/*
 * test_step_dev: the trainer's step with its results on the device
 * (backend.h's step-on-device ops: loss_accum, sumsq_dev,
 * adamw_multi_clip), checked without a GPU. The CPU backend has no such
 * ops (its numerics stay as they are); here a copy of its vtable gains
 * host versions of them, with the CUDA kernels' contract, and counts the
 * calls that synchronise a real device (download, sumsq, sync):
 *  - gpt_cuda_clip_scale (what the device computes from the squared
 *    norm) gives optim.c's gpt_clip_scale bits, NaN and infinity included;
 *  - gpt_train on the wrapped backend, world of one with two
 *    micro-batches: every step's grad norm has the plain CPU run's bits,
 *    the loss agrees to 1e-6, and a step synchronises once;
 *  - the same in a world of two (DDP over TCP): the norm's bits, and two
 *    synchronisations per step (the last backward keeps its sync for the
 *    rank's compute time; see trainer.c);
 *  - a diverging run stops at the same step with the same error on both;
 *  - on a backend that says its buffers are device memory, the trainer
 *    writes a snapshot from a host copy (params, m and v downloaded whole)
 *    and resumes through one (uploaded whole), and the resumed run ends
 *    with the straight run's bits;
 *  - there it also settles the backend before the first step: two more
 *    forward passes, every step's loss and norm unchanged.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "comm.h"
#include "cuda_plan.h"
#include "jobspec.h"
#include "optim.h"
#include "snapshot.h"
#include "trainer.h"
#include "unit/tiny_job.h"

/* ---- the CPU backend with host step-on-device ops ---- */

struct dev_wrap {
    struct gpt_backend_ops ops;
    const struct gpt_backend_ops *cpu;
};

static struct dev_wrap wraps[2]; /* one per rank; rank r's backend uses wraps[r] */
static _Atomic long n_syncs[2];

/* Transfers of exactly `whole` bytes (the model's parameter count in
 * floats, set by the test), as the device-memory snapshot path makes. */
static size_t whole;
static long whole_downloads, whole_uploads;

static struct dev_wrap *wrap_of(struct gpt_backend *be)
{
    return (struct dev_wrap *)(uintptr_t)be->ops;
}

static int rank_of(struct gpt_backend *be)
{
    return wrap_of(be) == &wraps[1];
}

static int dev_download(struct gpt_backend *be, void *dst, const void *src, size_t bytes)
{
    n_syncs[rank_of(be)]++;
    whole_downloads += whole && bytes == whole;
    return wrap_of(be)->cpu->download(be, dst, src, bytes);
}

static int dev_upload(struct gpt_backend *be, void *dst, const void *src, size_t bytes)
{
    whole_uploads += whole && bytes == whole;
    return wrap_of(be)->cpu->upload(be, dst, src, bytes);
}

/* Forward passes (each starts with the encoder), per rank. */
static _Atomic long n_forwards[2];

static void dev_encoder_forward(struct gpt_backend *be, float *out, const int *inp,
                                const float *wte, const float *wpe, size_t B, size_t T, size_t C)
{
    n_forwards[rank_of(be)]++;
    wrap_of(be)->cpu->encoder_forward(be, out, inp, wte, wpe, B, T, C);
}

static double dev_sumsq(struct gpt_backend *be, const float *x, size_t n)
{
    n_syncs[rank_of(be)]++;
    return wrap_of(be)->cpu->sumsq(be, x, n);
}

static int dev_sync(struct gpt_backend *be)
{
    n_syncs[rank_of(be)]++;
    return 0;
}

static void dev_loss_accum(struct gpt_backend *be, double *acc, const float *losses, size_t N,
                           double weight, int reset)
{
    (void)be;
    double sum = 0.0;
    for (size_t i = 0; i < N; i++)
        sum += losses[i];
    *acc = (reset ? 0.0 : *acc) + weight * sum;
}

static void dev_sumsq_dev(struct gpt_backend *be, double *out, const float *x, size_t n)
{
    *out = n ? wrap_of(be)->cpu->sumsq(be, x, n) : 0.0;
}

/* As the CUDA kernel: the factor from the squared norm, then exactly the
 * host path's update (gpt_backend_adamw_multi's per-span fallback). */
static void dev_adamw_multi_clip(struct gpt_backend *be, float *params, const float *grads,
                                 float *m, float *v, const struct gpt_adamw_span *spans,
                                 size_t n_spans, float lr, float beta1, float beta2, float eps,
                                 float weight_decay, const double *sumsq, double clip, float bc1,
                                 float bc2)
{
    float gs = gpt_cuda_clip_scale(*sumsq, clip);
    for (size_t i = 0; i < n_spans; i++) {
        size_t o = spans[i].off;
        wrap_of(be)->cpu->adamw(be, params + o, grads + o, m + o, v + o, spans[i].n, lr, beta1,
                                beta2, eps, spans[i].decay ? weight_decay : 0.0f, gs, bc1, bc2);
    }
}

/* A CPU backend whose ops are wraps[rank]: with step (the ops above) or
 * without (the plain CPU ops, counting the same calls). */
static struct gpt_backend *backend_new(int rank, int step, int device_memory)
{
    struct gpt_backend *be = NULL;
    struct gpt_err err;
    assert_int_equal(gpt_backend_cpu_new(1, &be, &err), 0);
    struct dev_wrap *w = &wraps[rank];
    w->cpu = be->ops;
    w->ops = *be->ops;
    w->ops.download = dev_download;
    w->ops.sumsq = dev_sumsq;
    w->ops.sync = dev_sync;
    w->ops.upload = dev_upload;
    w->ops.device_memory = device_memory;
    w->ops.encoder_forward = dev_encoder_forward;
    if (step) {
        w->ops.loss_accum = dev_loss_accum;
        w->ops.sumsq_dev = dev_sumsq_dev;
        w->ops.adamw_multi_clip = dev_adamw_multi_clip;
    }
    be->ops = &w->ops;
    n_syncs[rank] = 0;
    n_forwards[rank] = 0;
    return be;
}

static void backend_free(struct gpt_backend *be)
{
    be->ops = wrap_of(be)->cpu; /* its destroy */
    gpt_backend_free(be);
}

/* ---- the clip factor ---- */

static void check_clip(double sumsq, double clip)
{
    float host = gpt_clip_scale(sqrt(sumsq), clip);
    float dev = gpt_cuda_clip_scale(sumsq, clip);
    if (memcmp(&host, &dev, sizeof(float)) != 0)
        print_message("sumsq %.17g clip %g: host %.9g device %.9g\n", sumsq, clip, host, dev);
    assert_memory_equal(&host, &dev, sizeof(float));
}

static void test_clip_scale_bits(void **state)
{
    (void)state;
    const double special[] = {0.0, 1e-300, 1e-12, 0.25,     1.0, 1.0000001,
                              2.0, 1e6,    1e300, INFINITY, NAN};
    const double clips[] = {-1.0, 0.0, 1e-6, 0.5, 1.0, 3.0, 1e9};
    for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
        for (size_t j = 0; j < sizeof(clips) / sizeof(clips[0]); j++)
            check_clip(special[i], clips[j]);
    uint64_t x = 88172645463325252ull;
    for (int k = 0; k < 100000; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double s = ldexp((double)(x >> 11) / 9007199254740992.0, (int)(x % 80) - 40);
        check_clip(s, (k % 3) ? 1.0 : 0.25);
    }
    /* The rules themselves: NaN norm -> 1, infinite -> 0, clip off -> 1. */
    assert_true(gpt_cuda_clip_scale(NAN, 1.0) == 1.0f);
    assert_true(gpt_cuda_clip_scale(INFINITY, 1.0) == 0.0f);
    assert_true(gpt_cuda_clip_scale(1e12, 0.0) == 1.0f);
}

/* ---- training ---- */

#define MAX_STEPS 8

struct run {
    int rank, world, step_ops;
    int device_memory, resume;
    int64_t stop_after; /* a snapshot and GPT_TRAIN_STOPPED once this step is done */
    const char *snapdir;
    char last_snapshot[1024];
    struct gpt_kv *kv;
    const struct gpt_job *job;
    int rc;
    char err[512];
    int n;
    int64_t steps[MAX_STEPS + 1];
    double loss[MAX_STEPS + 1], norm[MAX_STEPS + 1];
    long syncs[MAX_STEPS + 1]; /* the counter at each step's metric */
};

static void hook_metric(void *ctx, const struct gpt_metric *m)
{
    struct run *r = ctx;
    if (r->n > MAX_STEPS)
        return;
    r->steps[r->n] = m->step;
    r->loss[r->n] = m->loss;
    r->norm[r->n] = m->grad_norm;
    r->syncs[r->n] = n_syncs[r->rank];
    r->n++;
}

static int hook_stop(void *ctx)
{
    const struct run *r = ctx;
    return r->stop_after > 0 && r->n > 0 && r->steps[r->n - 1] >= r->stop_after ? GPT_STOP_SNAPSHOT
                                                                                : GPT_STOP_NO;
}

static void *run_main(void *arg)
{
    struct run *r = arg;
    struct gpt_comm *c = NULL;
    struct gpt_err err;
    struct gpt_backend *be = backend_new(r->rank, r->step_ops, r->device_memory);
    if (r->world > 1) {
        struct gpt_comm_opts o = {
            .rank = r->rank, .world = r->world, .prefix = "sd/", .timeout_ms = 60000};
        r->rc = gpt_comm_tcp_new(&o, r->kv, &c, &err);
        if (r->rc < 0) {
            backend_free(be);
            return NULL;
        }
    }
    struct gpt_trainer_opts to = {
        .job = r->job,
        .comm = c,
        .backend = be,
        .snapshot_dir = r->snapdir,
        .resume = r->resume,
        .hooks = {.ctx = r, .metric = hook_metric, .should_stop = hook_stop},
    };
    struct gpt_train_result res;
    memset(&res, 0, sizeof(res));
    r->rc = gpt_train(&to, &res, &err);
    if (r->rc < 0)
        snprintf(r->err, sizeof(r->err), "%.500s", err.msg);
    snprintf(r->last_snapshot, sizeof(r->last_snapshot), "%s", res.last_snapshot);
    gpt_comm_free(c);
    backend_free(be);
    return NULL;
}

static void job_make(struct gpt_job *job, int steps, double lr)
{
    tiny_job(job, 32, steps);
    job->trainer.global_batch = 8; /* two micro-batches per rank in a world of two */
    job->trainer.eval_batches = 1;
    job->trainer.grad_clip = 0.5; /* clips: the factor matters */
    job->optimizer.lr = lr;
    job->optimizer.warmup_steps = 0;
    assert_int_equal(tiny_job_check(job), 0);
}

/* Runs a world of `world` ranks (threads) on the plain or the wrapped
 * backend; rank 0's record in *ret. */
static void run_world(const struct gpt_job *job, int world, int step_ops, struct run *ret)
{
    struct gpt_kv kv;
    struct gpt_err err;
    struct run r[2];
    pthread_t th[2];
    assert_true(world <= 2);
    assert_int_equal(gpt_kv_mem_new(&kv, &err), 0);
    for (int i = 0; i < world; i++) {
        memset(&r[i], 0, sizeof(r[i]));
        r[i] = (struct run){.rank = i, .world = world, .step_ops = step_ops, .kv = &kv, .job = job};
        assert_int_equal(pthread_create(&th[i], NULL, run_main, &r[i]), 0);
    }
    for (int i = 0; i < world; i++)
        pthread_join(th[i], NULL);
    gpt_kv_mem_free(&kv);
    *ret = r[0];
}

/* Same norms bit for bit, same losses to rounding, `per_step` syncs in
 * each step but the last (its evaluation downloads logits). */
static void check_same(const struct run *host, const struct run *dev, int steps, long per_step)
{
    assert_int_equal(host->rc, GPT_TRAIN_DONE);
    assert_int_equal(dev->rc, GPT_TRAIN_DONE);
    assert_int_equal(host->n, steps);
    assert_int_equal(dev->n, steps);
    for (int i = 0; i < steps; i++) {
        print_message("step %lld: loss %.9g / %.9g, norm %.17g / %.17g, syncs %ld / %ld\n",
                      (long long)dev->steps[i], host->loss[i], dev->loss[i], host->norm[i],
                      dev->norm[i], i ? host->syncs[i] - host->syncs[i - 1] : host->syncs[i],
                      i ? dev->syncs[i] - dev->syncs[i - 1] : dev->syncs[i]);
        assert_int_equal(host->steps[i], dev->steps[i]);
        assert_memory_equal(&host->norm[i], &dev->norm[i], sizeof(double));
        assert_true(fabs(host->loss[i] - dev->loss[i]) <= 1e-6 * fabs(host->loss[i]));
        if (i > 0 && i < steps - 1)
            assert_int_equal(dev->syncs[i] - dev->syncs[i - 1], per_step);
    }
    /* The host path synchronised more: a download per micro-batch and
     * the norm (and, on CPU, nothing else). */
    assert_true(host->syncs[steps - 2] - host->syncs[0] > dev->syncs[steps - 2] - dev->syncs[0]);
}

static void test_train_world1(void **state)
{
    (void)state;
    struct gpt_job job;
    job_make(&job, 6, 3e-3);
    job.trainer.global_batch = 4; /* two micro-batches of two */
    static struct run host, dev;
    run_world(&job, 1, 0, &host);
    run_world(&job, 1, 1, &dev);
    check_same(&host, &dev, 6, 1);
}

static void test_train_ddp(void **state)
{
    (void)state;
    struct gpt_job job;
    job_make(&job, 5, 3e-3);
    static struct run host, dev;
    run_world(&job, 2, 0, &host);
    run_world(&job, 2, 1, &dev);
    check_same(&host, &dev, 5, 2);
}

/* A learning rate that blows the model up: both paths update, then stop
 * at the same step with the same error (no snapshot is written). */
static void test_diverge(void **state)
{
    (void)state;
    struct gpt_job job;
    job_make(&job, 60, 10.0);
    job.trainer.grad_clip = 0;
    job.optimizer.weight_decay = 10; /* p *= 1 - lr wd = -99 each step */
    job.optimizer.schedule = GPT_SCHED_CONSTANT;
    static struct run host, dev;
    run_world(&job, 1, 0, &host);
    run_world(&job, 1, 1, &dev);
    print_message("host: %d \"%s\" after %d steps; device: %d \"%s\" after %d steps\n", host.rc,
                  host.err, host.n, dev.rc, dev.err, dev.n);
    assert_int_equal(host.rc, -ERANGE);
    assert_int_equal(dev.rc, -ERANGE);
    assert_string_equal(host.err, dev.err);
    assert_int_equal(host.n, dev.n);
}

/* One rank on the device-memory wrapper with the step-on-device ops,
 * from `snapdir`'s newest snapshot (resume) or from the start, stopping
 * with a snapshot after step stop_after (0: at max_steps). */
static void run_dev(const struct gpt_job *job, const char *snapdir, int resume, int64_t stop_after,
                    struct run *r)
{
    memset(r, 0, sizeof(*r));
    *r = (struct run){.rank = 0,
                      .world = 1,
                      .step_ops = 1,
                      .device_memory = 1,
                      .resume = resume,
                      .snapdir = snapdir,
                      .stop_after = stop_after,
                      .job = job};
    run_main(r);
}

static void test_device_memory_snapshot(void **state)
{
    (void)state;
    char root[] = "/tmp/test_step_dev.XXXXXX", a[64], b[64];
    assert_non_null(mkdtemp(root));
    snprintf(a, sizeof(a), "%s/a", root);
    snprintf(b, sizeof(b), "%s/b", root);
    struct gpt_job job;
    job_make(&job, 4, 3e-3);
    job.trainer.global_batch = 4;
    static struct run straight, first, second;

    /* Straight: 4 steps and the final snapshot, from a host copy. */
    run_dev(&job, a, 0, 0, &straight);
    assert_int_equal(straight.rc, GPT_TRAIN_DONE);
    struct gpt_snapshot_meta meta;
    struct gpt_err err;
    assert_int_equal(gpt_snapshot_read_meta(straight.last_snapshot, &meta, &err), 0);
    assert_true(meta.has_moments);

    /* Stopped after 2 steps with a snapshot: params, m and v each
     * downloaded whole. */
    whole = meta.n_params * sizeof(float);
    whole_downloads = whole_uploads = 0;
    run_dev(&job, b, 0, 2, &first);
    assert_int_equal(first.rc, GPT_TRAIN_STOPPED);
    assert_int_equal(whole_downloads, 3);
    assert_int_equal(whole_uploads, 1); /* the initial weights */

    /* Resumed to 4: the three arrays uploaded whole, then its own final
     * snapshot; the last step's loss and norm are the straight run's. */
    whole_downloads = whole_uploads = 0;
    run_dev(&job, b, 1, 0, &second);
    whole = 0;
    print_message("resumed: rc %d \"%s\", %d metrics, uploads %ld, downloads %ld\n", second.rc,
                  second.err, second.n, whole_uploads, whole_downloads);
    assert_int_equal(second.rc, GPT_TRAIN_DONE);
    assert_int_equal(whole_uploads, 1 + 3);
    assert_int_equal(whole_downloads, 3);
    assert_int_equal(straight.n, 4);
    assert_int_equal(second.n, 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(second.steps[i], straight.steps[2 + i]);
        assert_memory_equal(&second.loss[i], &straight.loss[2 + i], sizeof(double));
        assert_memory_equal(&second.norm[i], &straight.norm[2 + i], sizeof(double));
    }

    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

/* On a backend that says its buffers are device memory the trainer
 * settles it first (trainer_settle: two discarded forward and backward
 * passes before the process's first step, for the CUDA backend's bf16
 * state): exactly two more forwards than on the same backend without the
 * flag, and every step's loss and norm bit for bit the same (the passes
 * move no data cursor, leave no gradient behind and update nothing). */
static void test_settle(void **state)
{
    (void)state;
    struct gpt_job job;
    job_make(&job, 3, 3e-3);
    static struct run host, dev;
    long forwards[2];
    for (int k = 0; k < 2; k++) {
        struct run *r = k ? &dev : &host;
        *r = (struct run){.rank = 0, .world = 1, .step_ops = 1, .device_memory = k, .job = &job};
        run_main(r);
        forwards[k] = n_forwards[0];
        assert_int_equal(r->rc, GPT_TRAIN_DONE);
        assert_int_equal(r->n, 3);
    }
    print_message("forwards: %ld plain, %ld on device memory\n", forwards[0], forwards[1]);
    assert_int_equal(forwards[1] - forwards[0], 2);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(host.steps[i], dev.steps[i]);
        assert_memory_equal(&host.loss[i], &dev.loss[i], sizeof(double));
        assert_memory_equal(&host.norm[i], &dev.norm[i], sizeof(double));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clip_scale_bits),
        cmocka_unit_test(test_train_world1),
        cmocka_unit_test(test_train_ddp),
        cmocka_unit_test(test_diverge),
        cmocka_unit_test(test_device_memory_snapshot),
        cmocka_unit_test(test_settle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
