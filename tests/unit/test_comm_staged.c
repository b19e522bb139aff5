/*
 * test_comm_staged: the host-staged communicator and the fallback to it
 * when the device communicator (NCCL) does not form (engine/comm_staged.c;
 * issue 34's "NCCL refuses" case), on CPUs.
 *
 * "Device" memory here is a shim stager's: in the collective checks a
 * device pointer points into a PROT_NONE mapping (any read or write by the
 * host communicator would crash the test) and its bytes live in a shadow
 * at the same offset; the staged results must equal the inner
 * communicator's on host buffers bit for bit. The fallback checks hand
 * gpt_comm_fallback_new a fake device attempt: one rank refuses while the
 * other waits for its peer as NCCL's init does, or forms and must give its
 * communicator back, or the world is aborted. Last, a world of two trains
 * through the real fallback (rank 1 refusing) with every backend buffer
 * registered as device memory, against the same job over the plain
 * tcp/shm communicator: every step's loss and gradient norm equal bit for
 * bit, with bytes staged both ways.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "backend.h"
#include "comm.h"
#include "jobspec.h"
#include "monotime.h"
#include "tiny_job.h"
#include "trainer.h"

#define WORLD_MAX 3

/* ---- a device arena the host cannot touch ---- */

struct arena {
    char *dev;    /* PROT_NONE */
    char *shadow; /* the bytes */
    size_t bytes;
};

static void arena_init(struct arena *a, size_t bytes)
{
    a->bytes = bytes;
    a->dev = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(a->dev != MAP_FAILED);
    a->shadow = calloc(1, bytes);
    assert_non_null(a->shadow);
}

static void arena_done(struct arena *a)
{
    munmap(a->dev, a->bytes);
    free(a->shadow);
}

static int arena_is_device(void *ctx, const void *p)
{
    struct arena *a = ctx;
    return (const char *)p >= a->dev && (const char *)p < a->dev + a->bytes;
}

static char *arena_real(struct arena *a, const void *dev, size_t bytes)
{
    size_t off = (size_t)((const char *)dev - a->dev);
    assert_true(arena_is_device(a, dev) && off + bytes <= a->bytes);
    return a->shadow + off;
}

static int arena_to_host(void *ctx, void *host, const void *dev, size_t bytes)
{
    memcpy(host, arena_real(ctx, dev, bytes), bytes);
    return 0;
}

static int arena_to_device(void *ctx, void *dev, const void *host, size_t bytes)
{
    memcpy(arena_real(ctx, dev, bytes), host, bytes);
    return 0;
}

/* ---- worlds of threads ---- */

struct rank {
    int rank, world;
    struct gpt_kv *kv;
    const char *prefix;
    int rc;
    void *arg;
};

static void run_world(int world, void *(*fn)(void *), struct rank *r, void *arg)
{
    struct gpt_kv kv;
    struct gpt_err err;
    assert_int_equal(gpt_kv_mem_new(&kv, &err), 0);
    pthread_t th[WORLD_MAX];
    for (int i = 0; i < world; i++) {
        r[i] = (struct rank){.rank = i, .world = world, .kv = &kv, .prefix = "t/", .arg = arg};
        assert_int_equal(pthread_create(&th[i], NULL, fn, &r[i]), 0);
    }
    for (int i = 0; i < world; i++)
        pthread_join(th[i], NULL);
    gpt_kv_mem_free(&kv);
}

/* ---- the collectives on device memory ---- */

#define N 1001 /* odd: uneven slices at worlds 2 and 3 */

/* Each collective on host memory and on the arena; both results kept. */
struct coll_out {
    float host[5][N], dev[5][N];
};

static void fill(float *v, int rank, int salt)
{
    for (int i = 0; i < N; i++)
        v[i] = (float)(rank + 1) * 0.37f + (float)i * 1e-3f * (float)(salt + 1) - 0.5f;
}

/* Collective k on buf (host or the arena's view `dev` of `real`). */
static void coll_run(struct gpt_comm *c, int k, float *buf)
{
    switch (k) {
    case 0:
        assert_int_equal(gpt_comm_allreduce(c, buf, N, GPT_REDUCE_SUM), 0);
        break;
    case 1:
        assert_int_equal(gpt_comm_allreduce_dtype(c, buf, N, GPT_REDUCE_AVG, GPT_COMM_BF16), 0);
        break;
    case 2:
        assert_int_equal(gpt_comm_reduce_scatter(c, buf, N, GPT_REDUCE_AVG), 0);
        break;
    case 3:
        assert_int_equal(gpt_comm_allgather(c, buf, N), 0);
        break;
    default:
        assert_int_equal(gpt_comm_broadcast(c, buf, N * sizeof(float), c->world - 1), 0);
    }
}

static void *coll_main(void *arg)
{
    struct rank *r = arg;
    struct coll_out *out = (struct coll_out *)r->arg + r->rank;
    struct gpt_err err;
    struct gpt_comm_opts o = {
        .rank = r->rank, .world = r->world, .prefix = r->prefix, .timeout_ms = 30000};
    struct gpt_comm *inner = NULL, *c = NULL;
    assert_int_equal(gpt_comm_tcp_new(&o, r->kv, &inner, &err), 0);
    struct arena a;
    arena_init(&a, N * sizeof(float) + 4096);
    struct gpt_comm_stager st = {&a, arena_is_device, arena_to_host, arena_to_device};
    assert_int_equal(gpt_comm_staged_new(inner, &st, "test", &c, &err), 0);
    assert_non_null(strstr(c->ops->name, "staged/"));
    assert_string_equal(gpt_comm_staged_why(c), "test");
    float *dev = (float *)(a.dev + 64), *real = (float *)(a.shadow + 64);
    for (int k = 0; k < 5; k++) {
        fill(out->host[k], r->rank, k);
        coll_run(c, k, out->host[k]);
        fill(real, r->rank, k);
        coll_run(c, k, dev);
        memcpy(out->dev[k], real, sizeof(out->dev[k]));
    }
    gpt_comm_free(c);
    arena_done(&a);
    return NULL;
}

/* Only the part a collective defines: reduce_scatter's own slice. */
static void coll_check(const struct coll_out *out, int world)
{
    for (int r = 0; r < world; r++)
        for (int k = 0; k < 5; k++) {
            size_t off = 0, len = N;
            if (k == 2)
                gpt_comm_slice(N, world, r, &off, &len);
            assert_memory_equal(out[r].host[k] + off, out[r].dev[k] + off, len * sizeof(float));
        }
    /* And they did reduce: rank 0 holds rank 1's contribution. */
    float mine[N];
    fill(mine, 0, 0);
    assert_true(out[0].dev[0][5] != mine[5]);
}

static void test_collectives(void **state)
{
    (void)state;
    static struct coll_out out[WORLD_MAX];
    struct rank r[WORLD_MAX];
    for (int world = 2; world <= 3; world++) {
        memset(out, 0, sizeof(out));
        run_world(world, coll_main, r, out);
        coll_check(out, world);
    }
}

/* ---- the fallback ---- */

enum fake_mode {
    FAKE_REFUSE,    /* fails at once, as a rank whose NCCL init errs */
    FAKE_WAIT,      /* waits for its peers until cancelled, as ncclCommInitRank */
    FAKE_FORM,      /* forms a world communicator (the tcp one) */
    FAKE_FORM_LONE, /* "forms" alone: a communicator that must be freed */
};

struct fake {
    enum fake_mode mode[WORLD_MAX];
    atomic_int cancelled_seen, lone_freed;
};

static struct fake *lone_owner;

static void lone_free(struct gpt_comm *c)
{
    atomic_fetch_add(&lone_owner->lone_freed, 1);
    free(c);
}

static const struct gpt_comm_ops lone_ops = {.name = "lone", .free = lone_free};

/* The device attempt; ctx is the rank (its arg the struct fake). */
static int fake_try(void *ctx, const struct gpt_comm_opts *o, struct gpt_comm **ret,
                    struct gpt_err *err)
{
    struct rank *r = ctx;
    struct fake *f = r->arg;
    switch (f->mode[o->rank]) {
    case FAKE_REFUSE:
        return gpt_err_set(err, -GPT_E_NCCL, NULL,
                           "nccl: ncclCommInitRankConfig: invalid usage (Duplicate GPU detected)");
    case FAKE_WAIT: {
        int64_t until = monotime_ms() + 20000;
        while (monotime_ms() < until) {
            if (o->cancelled && o->cancelled(o->cancel_ctx)) {
                atomic_fetch_add(&f->cancelled_seen, 1);
                return gpt_err_set(err, -ECANCELED, NULL, "nccl: init: aborted");
            }
            monotime_sleep_ms(1);
        }
        return gpt_err_set(err, -ETIMEDOUT, NULL, "nccl: init: timed out");
    }
    case FAKE_FORM:
        return gpt_comm_tcp_new(o, r->kv, ret, err);
    case FAKE_FORM_LONE: {
        struct gpt_comm *c = calloc(1, sizeof(*c));
        assert_non_null(c);
        *c = (struct gpt_comm){.ops = &lone_ops, .rank = o->rank, .world = o->world};
        *ret = c;
        return 0;
    }
    }
    return -EINVAL;
}

struct fb_out {
    int rc;
    char name[32];
    char why[256];
    double s;
    float sum;
};

static struct fb_out fb[WORLD_MAX];
static atomic_int abort_flag;

static int test_cancelled(void *ctx)
{
    (void)ctx;
    return atomic_load(&abort_flag);
}

static void *fb_main(void *arg)
{
    struct rank *r = arg;
    struct gpt_err err;
    struct gpt_comm_opts o = {.rank = r->rank,
                              .world = r->world,
                              .prefix = r->prefix,
                              .timeout_ms = 30000,
                              .cancelled = test_cancelled};
    struct gpt_comm *c = NULL;
    double t0 = monotime_s();
    int rc = gpt_comm_fallback_new(&o, r->kv, fake_try, r, NULL, &c, &err);
    struct fb_out *out = &fb[r->rank];
    out->rc = rc;
    out->s = monotime_s() - t0;
    if (rc == 0) {
        snprintf(out->name, sizeof(out->name), "%s", c->ops->name);
        const char *why = gpt_comm_staged_why(c);
        snprintf(out->why, sizeof(out->why), "%s", why ? why : "(none)");
        float v = (float)(r->rank + 1);
        assert_int_equal(gpt_comm_allreduce(c, &v, 1, GPT_REDUCE_SUM), 0);
        out->sum = v;
    } else {
        print_message("rank %d: %s\n", r->rank, err.msg);
    }
    gpt_comm_free(c);
    return NULL;
}

static void fb_run(struct fake *f, int world)
{
    struct rank r[WORLD_MAX];
    memset(fb, 0, sizeof(fb));
    lone_owner = f;
    run_world(world, fb_main, r, f);
    for (int i = 0; i < world; i++)
        print_message("rank %d: rc %d, %s in %.2f s (%s)\n", i, fb[i].rc, fb[i].name, fb[i].s,
                      fb[i].why);
}

/* Every rank on the host-staged communicator, naming the refusal, and it
 * reduces. */
static void fb_expect_staged(int world)
{
    for (int i = 0; i < world; i++) {
        assert_int_equal(fb[i].rc, 0);
        assert_non_null(strstr(fb[i].name, "staged/"));
        assert_non_null(strstr(fb[i].why, "rank 1: "));
        assert_non_null(strstr(fb[i].why, "Duplicate GPU"));
        assert_true(fb[i].sum == (float)(world * (world + 1) / 2));
    }
}

/* Rank 1 refuses while rank 0 waits in its init (and rank 2, at world 3):
 * the waiters see the refusal within a poll, not at the timeout. */
static void test_fallback_refused(void **state)
{
    (void)state;
    atomic_store(&abort_flag, 0);
    for (int world = 2; world <= 3; world++) {
        struct fake f = {.mode = {FAKE_WAIT, FAKE_REFUSE, FAKE_WAIT}};
        fb_run(&f, world);
        fb_expect_staged(world);
        assert_int_equal(atomic_load(&f.cancelled_seen), world - 1);
        for (int i = 0; i < world; i++)
            assert_true(fb[i].s < 5.0);
    }
}

/* Rank 0 formed its side before rank 1 refused: it gives it back. */
static void test_fallback_formed_then_refused(void **state)
{
    (void)state;
    atomic_store(&abort_flag, 0);
    struct fake f = {.mode = {FAKE_FORM_LONE, FAKE_REFUSE}};
    fb_run(&f, 2);
    fb_expect_staged(2);
    assert_int_equal(atomic_load(&f.lone_freed), 1);
}

/* Every rank formed: the device communicator is kept. */
static void test_fallback_formed(void **state)
{
    (void)state;
    atomic_store(&abort_flag, 0);
    struct fake f = {.mode = {FAKE_FORM, FAKE_FORM}};
    fb_run(&f, 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(fb[i].rc, 0);
        assert_null(strstr(fb[i].name, "staged"));
        assert_string_equal(fb[i].why, "(none)");
        assert_true(fb[i].sum == 3.0f);
    }
}

/* An abort is not a refusal: no fallback, -ECANCELED at once. */
static void test_fallback_aborted(void **state)
{
    (void)state;
    atomic_store(&abort_flag, 1);
    struct fake f = {.mode = {FAKE_WAIT, FAKE_WAIT}};
    fb_run(&f, 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(fb[i].rc, -ECANCELED);
        assert_true(fb[i].s < 5.0);
    }
    atomic_store(&abort_flag, 0);
}

/* ---- training through the fallback ---- */

/* Every buffer the shim backends allocate counts as device memory. */
#define SHIM_ALLOCS 4096
static struct {
    pthread_mutex_t mu;
    struct {
        char *p;
        size_t bytes;
    } a[SHIM_ALLOCS];
    int n;
} shim = {.mu = PTHREAD_MUTEX_INITIALIZER};
static struct gpt_backend_ops cpu_ops, shim_ops;
static atomic_ullong staged_in, staged_out;

static int shim_alloc(struct gpt_backend *be, size_t bytes, void **ret_ptr)
{
    int rc = cpu_ops.alloc(be, bytes, ret_ptr);
    if (rc == 0) {
        pthread_mutex_lock(&shim.mu);
        assert_true(shim.n < SHIM_ALLOCS);
        shim.a[shim.n].p = *ret_ptr;
        shim.a[shim.n].bytes = bytes;
        shim.n++;
        pthread_mutex_unlock(&shim.mu);
    }
    return rc;
}

static void shim_mem_free(struct gpt_backend *be, void *ptr)
{
    pthread_mutex_lock(&shim.mu);
    for (int i = 0; i < shim.n; i++)
        if (shim.a[i].p == ptr) {
            shim.a[i] = shim.a[--shim.n];
            break;
        }
    pthread_mutex_unlock(&shim.mu);
    cpu_ops.mem_free(be, ptr);
}

static int shim_is_device(void *ctx, const void *p)
{
    (void)ctx;
    int found = 0;
    pthread_mutex_lock(&shim.mu);
    for (int i = 0; i < shim.n && !found; i++)
        found = (const char *)p >= shim.a[i].p && (const char *)p < shim.a[i].p + shim.a[i].bytes;
    pthread_mutex_unlock(&shim.mu);
    return found;
}

static int shim_to_host(void *ctx, void *host, const void *dev, size_t bytes)
{
    (void)ctx;
    assert_true(shim_is_device(NULL, dev) && !shim_is_device(NULL, host));
    memcpy(host, dev, bytes);
    atomic_fetch_add(&staged_in, bytes);
    return 0;
}

static int shim_to_device(void *ctx, void *dev, const void *host, size_t bytes)
{
    (void)ctx;
    assert_true(shim_is_device(NULL, dev) && !shim_is_device(NULL, host));
    memcpy(dev, host, bytes);
    atomic_fetch_add(&staged_out, bytes);
    return 0;
}

#define STEPS 4

struct train_out {
    double loss[STEPS + 1], norm[STEPS + 1];
    char start[512];
};

struct train_arg {
    const struct gpt_job *job;
    bool staged;
    struct fake fake;
    struct train_out out;
};

static void train_metric(void *ctx, const struct gpt_metric *m)
{
    struct train_out *o = ctx;
    if (m->step >= 1 && m->step <= STEPS && o->loss[m->step] == 0) {
        o->loss[m->step] = m->loss;
        o->norm[m->step] = m->grad_norm;
    }
}

static void train_event(void *ctx, const struct gpt_event *e)
{
    struct train_out *o = ctx;
    if (strcmp(e->kind, "start") == 0)
        snprintf(o->start, sizeof(o->start), "%s", e->message);
}

static void *train_main(void *arg)
{
    struct rank *r = arg;
    struct train_arg *ta = r->arg;
    struct gpt_err err;
    struct gpt_backend *be = NULL;
    struct gpt_comm *c = NULL;
    struct gpt_comm_opts o = {
        .rank = r->rank, .world = r->world, .prefix = r->prefix, .timeout_ms = 60000};
    assert_int_equal(gpt_backend_cpu_new(1, &be, &err), 0);
    if (ta->staged) {
        be->ops = &shim_ops;
        struct gpt_comm_stager st = {NULL, shim_is_device, shim_to_host, shim_to_device};
        struct rank fr = *r;
        fr.arg = &ta->fake;
        r->rc = gpt_comm_fallback_new(&o, r->kv, fake_try, &fr, &st, &c, &err);
    } else {
        r->rc = gpt_comm_tcp_new(&o, r->kv, &c, &err);
    }
    if (r->rc == 0) {
        struct gpt_trainer_opts to = {
            .job = ta->job,
            .comm = c,
            .backend = be,
            .hooks = {.ctx = &ta->out, .metric = train_metric, .event = train_event}};
        struct gpt_train_result res;
        r->rc = gpt_train(&to, &res, &err);
    }
    if (r->rc != 0)
        print_message("rank %d: %s\n", r->rank, err.msg);
    gpt_comm_free(c);
    gpt_backend_free(be);
    return NULL;
}

/* tiny_job at world 2: a global batch of 8 in micro-batches of 2. */
static void train_job(struct gpt_job *job, int sharding, int grad_reduce)
{
    tiny_job(job, 32, STEPS);
    job->model.block_size = 6;
    job->trainer.global_batch = 8;
    job->distributed.sharding = sharding;
    job->distributed.grad_reduce = grad_reduce;
    assert_int_equal(tiny_job_check(job), 0);
}

static void train_world(struct train_arg *ta)
{
    struct rank r[2];
    run_world(2, train_main, r, ta);
    for (int i = 0; i < 2; i++)
        assert_int_equal(r[i].rc, 0);
}

/* The same job at world 2, through the fallback with every backend
 * buffer on the "device", and over the plain communicator. */
static void train_compare(int sharding, int grad_reduce)
{
    struct gpt_backend *be = NULL;
    struct gpt_err err;
    assert_int_equal(gpt_backend_cpu_new(1, &be, &err), 0);
    cpu_ops = *be->ops;
    gpt_backend_free(be);
    shim_ops = cpu_ops;
    shim_ops.alloc = shim_alloc;
    shim_ops.mem_free = shim_mem_free;

    struct gpt_job job;
    train_job(&job, sharding, grad_reduce);
    static struct train_arg staged, plain;
    staged =
        (struct train_arg){.job = &job, .staged = true, .fake = {.mode = {FAKE_WAIT, FAKE_REFUSE}}};
    plain = (struct train_arg){.job = &job};
    atomic_store(&staged_in, 0);
    atomic_store(&staged_out, 0);
    train_world(&staged);
    train_world(&plain);
    print_message("sharding %d, grad_reduce %d: %llu bytes staged in, %llu out; start: %s\n",
                  sharding, grad_reduce, (unsigned long long)atomic_load(&staged_in),
                  (unsigned long long)atomic_load(&staged_out), staged.out.start);
    assert_true(atomic_load(&staged_in) > 0 && atomic_load(&staged_out) > 0);
    assert_non_null(strstr(staged.out.start, "over comm staged/"));
    assert_non_null(strstr(staged.out.start, "Duplicate GPU"));
    assert_null(strstr(plain.out.start, "staged"));
    for (int s = 1; s <= STEPS; s++) {
        print_message("step %d: loss %.9g / %.9g, norm %.9g / %.9g\n", s, staged.out.loss[s],
                      plain.out.loss[s], staged.out.norm[s], plain.out.norm[s]);
        assert_true(staged.out.loss[s] > 0);
        assert_memory_equal(&staged.out.loss[s], &plain.out.loss[s], sizeof(double));
        assert_memory_equal(&staged.out.norm[s], &plain.out.norm[s], sizeof(double));
    }
}

static void test_train_ddp(void **state)
{
    (void)state;
    train_compare(GPT_SHARD_NONE, GPT_GRAD_REDUCE_FP32);
}

static void test_train_ddp_bf16(void **state)
{
    (void)state;
    train_compare(GPT_SHARD_NONE, GPT_GRAD_REDUCE_BF16);
}

static void test_train_full(void **state)
{
    (void)state;
    train_compare(GPT_SHARD_FULL, GPT_GRAD_REDUCE_FP32);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_collectives),
        cmocka_unit_test(test_fallback_refused),
        cmocka_unit_test(test_fallback_formed_then_refused),
        cmocka_unit_test(test_fallback_formed),
        cmocka_unit_test(test_fallback_aborted),
        cmocka_unit_test(test_train_ddp),
        cmocka_unit_test(test_train_ddp_bf16),
        cmocka_unit_test(test_train_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
