/*
 * test_gpu_nccl: the NCCL communicator (engine/ops/cuda/comm_nccl.c).
 *  - world 1: every collective on device buffers and on host buffers
 *    (staged), uneven sizes;
 *  - world N (N = visible GPUs, when N >= 2): threads, one GPU each, every
 *    collective compared with the serial result, sizes not divisible by N;
 *  - failure handling on one GPU: a collective stuck behind a blocked
 *    compute stream returns -ECANCELED within one second of
 *    gpt_comm_abort, or -ETIMEDOUT after the timeout; a world whose second
 *    rank never comes fails with -ETIMEDOUT;
 *  - with N >= 2: a peer process killed during an all-reduce makes the
 *    survivor's next collective fail within the timeout.
 * Exits 77 without a GPU. Peer processes are this program re-executed
 * (never a fork after CUDA is initialised).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "backend.h"
#include "comm.h"
#include "cuda/comm_nccl.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_probe.h"
#include "gpu/gpu_gate.h"

#define MAX_WORLD 8

static int failures;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    nanosleep(&(struct timespec){.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000},
              NULL);
}

/* Small integers, so sums are exact in fp32 whatever the order. */
static float value(int rank, size_t i)
{
    return (float)((int)(i % 61) - 30 + rank * 7);
}

/* ---- one rank of an in-process world -------------------------------------- */

struct rank_arg {
    int rank, world;
    struct gpt_kv *kv;
    size_t n;
    int failures;
};

static int rank_check(struct rank_arg *a, struct gpt_backend *be, struct gpt_comm *c, float *dev,
                      float *h)
{
    int fails = 0;
    size_t n = a->n;
    /* allreduce sum and avg */
    for (size_t i = 0; i < n; i++)
        h[i] = value(a->rank, i);
    gpt_backend_upload(be, dev, h, n * sizeof(float));
    if (gpt_comm_allreduce(c, dev, n, GPT_REDUCE_SUM) < 0)
        return 1000;
    gpt_backend_download(be, h, dev, n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int r = 0; r < a->world; r++)
            want += value(r, i);
        fails += h[i] != want;
    }
    gpt_backend_upload(be, dev, h, n * sizeof(float));
    if (gpt_comm_allreduce(c, dev, n, GPT_REDUCE_AVG) < 0)
        return 1000;
    gpt_backend_download(be, h, dev, n * sizeof(float));
    for (size_t i = 0; i < n; i += 97) {
        float want = 0;
        for (int r = 0; r < a->world; r++)
            want += value(r, i);
        fails += fabsf(h[i] - want) > 1e-5f * (1 + fabsf(want)); /* sum of sums / world */
    }
    /* reduce_scatter with the uneven slice convention */
    for (size_t i = 0; i < n; i++)
        h[i] = value(a->rank, i);
    gpt_backend_upload(be, dev, h, n * sizeof(float));
    if (gpt_comm_reduce_scatter(c, dev, n, GPT_REDUCE_SUM) < 0)
        return 1000;
    gpt_backend_download(be, h, dev, n * sizeof(float));
    size_t off, len;
    gpt_comm_slice(n, a->world, a->rank, &off, &len);
    for (size_t i = off; i < off + len; i++) {
        float want = 0;
        for (int r = 0; r < a->world; r++)
            want += value(r, i);
        fails += h[i] != want;
    }
    /* allgather: each rank contributes its slice */
    for (size_t i = 0; i < n; i++)
        h[i] = i >= off && i < off + len ? value(a->rank, i) : -999.0f;
    gpt_backend_upload(be, dev, h, n * sizeof(float));
    if (gpt_comm_allgather(c, dev, n) < 0)
        return 1000;
    gpt_backend_download(be, h, dev, n * sizeof(float));
    for (int r = 0; r < a->world; r++) {
        size_t ro, rl;
        gpt_comm_slice(n, a->world, r, &ro, &rl);
        for (size_t i = ro; i < ro + rl; i++)
            fails += h[i] != value(r, i);
    }
    /* broadcast from the last rank, device then host memory */
    for (size_t i = 0; i < n; i++)
        h[i] = value(a->rank, i);
    gpt_backend_upload(be, dev, h, n * sizeof(float));
    if (gpt_comm_broadcast(c, dev, n * sizeof(float), a->world - 1) < 0)
        return 1000;
    gpt_backend_download(be, h, dev, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        fails += h[i] != value(a->world - 1, i);
    int64_t word[2] = {a->rank == 0 ? 12345 : 0, a->rank};
    if (gpt_comm_broadcast(c, word, sizeof(word), 0) < 0)
        return 1000;
    fails += word[0] != 12345 || word[1] != 0;
    /* host-memory allreduce (staged) and uneven host reduce_scatter */
    float hs[3] = {1, 2, (float)a->rank};
    if (gpt_comm_allreduce(c, hs, 3, GPT_REDUCE_SUM) < 0)
        return 1000;
    fails += hs[0] != (float)a->world || hs[2] != (float)(a->world * (a->world - 1) / 2);
    float hr[5];
    for (int i = 0; i < 5; i++)
        hr[i] = (float)(i + 1);
    if (gpt_comm_reduce_scatter(c, hr, 5, GPT_REDUCE_SUM) < 0)
        return 1000;
    gpt_comm_slice(5, a->world, a->rank, &off, &len);
    for (size_t i = off; i < off + len; i++)
        fails += hr[i] != (float)((i + 1) * (size_t)a->world);
    if (gpt_comm_barrier(c) < 0)
        return 1000;
    return fails;
}

static void *rank_main(void *p)
{
    struct rank_arg *a = p;
    struct gpt_backend *be = NULL;
    struct gpt_comm *c = NULL;
    struct gpt_err err;
    float *dev = NULL, *h = malloc(a->n * sizeof(float));
    a->failures = 1000;
    if (!h || gpt_backend_cuda_new(a->rank, NULL, &be, &err) < 0) {
        printf("rank %d: backend: %s\n", a->rank, err.msg);
        goto out;
    }
    struct gpt_comm_opts o = {
        .rank = a->rank, .world = a->world, .prefix = "w/", .timeout_ms = 60000};
    if (gpt_comm_nccl_new(&o, a->kv, a->rank, &c, &err) < 0) {
        printf("rank %d: nccl: %s\n", a->rank, err.msg);
        goto out;
    }
    if (gpt_comm_nccl_bind_backend(c, be) < 0 ||
        gpt_backend_alloc(be, a->n * sizeof(float), (void **)&dev) < 0)
        goto out;
    a->failures = rank_check(a, be, c, dev, h);
    if (a->failures >= 1000)
        printf("rank %d: collective failed: %s\n", a->rank, gpt_comm_nccl_last_error(c));
out:
    gpt_comm_free(c);
    gpt_backend_mem_free(be, dev);
    gpt_backend_free(be);
    free(h);
    return NULL;
}

static void test_world(int world, size_t n)
{
    struct gpt_kv kv;
    struct gpt_err err;
    if (gpt_kv_mem_new(&kv, &err) < 0)
        abort();
    struct rank_arg args[MAX_WORLD];
    pthread_t th[MAX_WORLD];
    for (int r = 0; r < world; r++) {
        args[r] = (struct rank_arg){.rank = r, .world = world, .kv = &kv, .n = n};
        pthread_create(&th[r], NULL, rank_main, &args[r]);
    }
    for (int r = 0; r < world; r++) {
        pthread_join(th[r], NULL);
        EXPECT(args[r].failures == 0, "world %d n %zu rank %d: %d mismatches", world, n, r,
               args[r].failures);
    }
    printf("world %d, n %zu: done\n", world, n);
    gpt_kv_mem_free(&kv);
}

/* ---- abort and timeout on one GPU ------------------------------------------ */

static atomic_int gate; /* 1 while the compute stream is held */

static void CUDART_CB hold_stream(void *arg)
{
    (void)arg;
    int64_t until = now_ms() + 5000; /* never hold forever */
    while (atomic_load(&gate) && now_ms() < until)
        sleep_ms(1);
}

struct abort_arg {
    struct gpt_comm *c;
    int delay_ms;
    int64_t at_ms;
};

static void *abort_later(void *p)
{
    struct abort_arg *a = p;
    sleep_ms(a->delay_ms);
    a->at_ms = now_ms();
    gpt_comm_abort(a->c);
    return NULL;
}

/* One rank, bound to a backend whose compute stream is held by a host
 * function, so the collective cannot start. */
static void test_stuck(int use_abort)
{
    struct gpt_backend *be = NULL;
    struct gpt_comm *c = NULL;
    struct gpt_kv kv;
    struct gpt_err err;
    float *dev = NULL;
    if (gpt_kv_mem_new(&kv, &err) < 0 || gpt_backend_cuda_new(0, NULL, &be, &err) < 0)
        abort();
    struct gpt_comm_opts o = {.rank = 0,
                              .world = 1,
                              .prefix = use_abort ? "a/" : "t/",
                              .timeout_ms = use_abort ? 60000 : 1500};
    int rc = gpt_comm_nccl_new(&o, &kv, 0, &c, &err);
    EXPECT(rc == 0, "nccl_new: %s", err.msg);
    if (rc < 0)
        goto out;
    gpt_comm_nccl_bind_backend(c, be);
    gpt_backend_alloc(be, 4096 * sizeof(float), (void **)&dev);
    atomic_store(&gate, 1);
    cudaLaunchHostFunc((cudaStream_t)gpt_cuda_backend_compute_stream(be), hold_stream, NULL);
    struct abort_arg aa = {c, 300, 0};
    pthread_t th;
    if (use_abort)
        pthread_create(&th, NULL, abort_later, &aa);
    int64_t t0 = now_ms();
    rc = gpt_comm_allreduce(c, dev, 4096, GPT_REDUCE_SUM);
    int64_t t1 = now_ms();
    atomic_store(&gate, 0);
    if (use_abort) {
        pthread_join(th, NULL);
        EXPECT(rc == -ECANCELED, "abort: got %d", rc);
        EXPECT(t1 - aa.at_ms <= 1000, "abort took %lld ms", (long long)(t1 - aa.at_ms));
        printf("abort: returned %d, %lld ms after gpt_comm_abort\n", rc,
               (long long)(t1 - aa.at_ms));
    } else {
        EXPECT(rc == -ETIMEDOUT, "timeout: got %d", rc);
        EXPECT(t1 - t0 >= 1400 && t1 - t0 <= 3000, "timeout after %lld ms", (long long)(t1 - t0));
        printf("timeout: returned %d after %lld ms (timeout 1500)\n", rc, (long long)(t1 - t0));
    }
    /* Sticky: the communicator stays failed. */
    EXPECT(gpt_comm_barrier(c) == rc, "failure not sticky");
out:
    gpt_comm_free(c);
    gpt_backend_sync(be);
    gpt_backend_mem_free(be, dev);
    gpt_backend_free(be);
    gpt_kv_mem_free(&kv);
}

/* DDP overlap: a bucket's all-reduce waits for its ready mark only. Two
 * marks are taken, then the compute stream is held (the backward still
 * running); the two buckets' allreduce_after (enqueued back to back) and
 * the one wait_after for both must finish while it is held, with the right
 * values, where a plain allreduce would wait for the hold. */
static void test_overlap(void)
{
    struct gpt_backend *be = NULL;
    struct gpt_comm *c = NULL;
    struct gpt_kv kv;
    struct gpt_err err;
    float *dev = NULL, h[4096];
    if (gpt_kv_mem_new(&kv, &err) < 0 || gpt_backend_cuda_new(0, NULL, &be, &err) < 0)
        abort();
    struct gpt_comm_opts o = {.rank = 0, .world = 1, .prefix = "o/", .timeout_ms = 10000};
    int rc = gpt_comm_nccl_new(&o, &kv, 0, &c, &err);
    EXPECT(rc == 0, "nccl_new: %s", err.msg);
    if (rc < 0)
        goto out;
    gpt_comm_nccl_bind_backend(c, be);
    gpt_backend_alloc(be, sizeof(h), (void **)&dev);
    for (size_t i = 0; i < 4096; i++)
        h[i] = (float)i;
    gpt_backend_upload(be, dev, h, sizeof(h));
    EXPECT(gpt_comm_mark_ready(c, 5) == 0, "mark_ready failed");
    EXPECT(gpt_comm_mark_ready(c, 6) == 0, "mark_ready failed");
    atomic_store(&gate, 1);
    cudaLaunchHostFunc((cudaStream_t)gpt_cuda_backend_compute_stream(be), hold_stream, NULL);
    int64_t t0 = now_ms();
    rc = gpt_comm_allreduce_after(c, dev, 2048, GPT_REDUCE_SUM, 5, GPT_COMM_FP32);
    if (rc == 0)
        rc = gpt_comm_allreduce_after(c, dev + 2048, 2048, GPT_REDUCE_SUM, 6, GPT_COMM_FP32);
    if (rc == 0)
        rc = gpt_comm_wait_after(c);
    int64_t t1 = now_ms();
    int held = atomic_load(&gate);
    atomic_store(&gate, 0);
    EXPECT(rc == 0 && held && t1 - t0 < 2000,
           "overlap: the buckets waited for later compute work (rc %d, held %d, %lld ms)", rc, held,
           (long long)(t1 - t0));
    gpt_backend_download(be, h, dev, sizeof(h));
    int bad = 0;
    for (size_t i = 0; i < 4096; i++)
        bad += h[i] != (float)i; /* world 1: the sum is the value */
    EXPECT(bad == 0, "overlap: %d wrong values", bad);
    printf("overlap: two buckets reduced in %lld ms while the compute stream was held\n",
           (long long)(t1 - t0));
out:
    gpt_comm_free(c);
    gpt_backend_sync(be);
    gpt_backend_mem_free(be, dev);
    gpt_backend_free(be);
    gpt_kv_mem_free(&kv);
}

static void test_absent_peer(void)
{
    struct gpt_kv kv;
    struct gpt_err err;
    struct gpt_comm *c = NULL;
    if (gpt_kv_mem_new(&kv, &err) < 0)
        abort();
    struct gpt_comm_opts o = {.rank = 0, .world = 2, .prefix = "x/", .timeout_ms = 2000};
    int64_t t0 = now_ms();
    int rc = gpt_comm_nccl_new(&o, &kv, 0, &c, &err);
    int64_t dt = now_ms() - t0;
    EXPECT(rc == -ETIMEDOUT, "absent peer: got %d (%s)", rc, err.msg);
    EXPECT(dt <= 5000, "absent peer took %lld ms", (long long)dt);
    printf("absent peer: %d after %lld ms: %s\n", rc, (long long)dt, err.msg);
    gpt_kv_mem_free(&kv);
}

/* ---- a peer process killed during an all-reduce (N >= 2 GPUs) ------------- */

/* Peer mode: `test_gpu_nccl --peer RANK DIR`: joins world 2, does one
 * all-reduce, then dies without a word. */
static int peer_main(int rank, const char *dir)
{
    struct gpt_kv kv;
    struct gpt_err err;
    struct gpt_comm *c = NULL;
    float *dev;
    if (gpt_kv_dir_new(&kv, dir, &err) < 0)
        return 2;
    struct gpt_comm_opts o = {.rank = rank, .world = 2, .prefix = "k/", .timeout_ms = 30000};
    if (gpt_comm_nccl_new(&o, &kv, rank, &c, &err) < 0) {
        printf("peer: %s\n", err.msg);
        return 2;
    }
    cudaMalloc((void **)&dev, 1 << 20);
    if (gpt_comm_allreduce(c, dev, (1 << 20) / 4, GPT_REDUCE_SUM) < 0)
        return 2;
    _exit(0); /* gone, mid-job */
}

static void test_killed_peer(const char *self)
{
    char dir[] = "/tmp/gptd_nccl_XXXXXX";
    if (!mkdtemp(dir))
        abort();
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", self, "--peer", "1", dir, (char *)NULL);
        _exit(127);
    }
    struct gpt_kv kv;
    struct gpt_err err;
    struct gpt_comm *c = NULL;
    float *dev;
    if (gpt_kv_dir_new(&kv, dir, &err) < 0)
        abort();
    struct gpt_comm_opts o = {.rank = 0, .world = 2, .prefix = "k/", .timeout_ms = 5000};
    int rc = gpt_comm_nccl_new(&o, &kv, 0, &c, &err);
    EXPECT(rc == 0, "killed peer: init: %s", err.msg);
    if (rc == 0) {
        cudaSetDevice(0);
        cudaMalloc((void **)&dev, 1 << 20);
        rc = gpt_comm_allreduce(c, dev, (1 << 20) / 4, GPT_REDUCE_SUM);
        EXPECT(rc == 0, "killed peer: first allreduce %d", rc);
        waitpid(pid, NULL, 0);
        pid = 0;
        int64_t t0 = now_ms();
        rc = gpt_comm_allreduce(c, dev, (1 << 20) / 4, GPT_REDUCE_SUM);
        int64_t dt = now_ms() - t0;
        EXPECT(rc == -ETIMEDOUT || rc == -EPIPE || rc == -GPT_E_NCCL,
               "killed peer: second allreduce %d", rc);
        EXPECT(dt <= 7000, "killed peer detected after %lld ms", (long long)dt);
        printf("killed peer: %d after %lld ms (%s)\n", rc, (long long)dt,
               gpt_comm_nccl_last_error(c));
        cudaFree(dev);
    }
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    gpt_comm_free(c);
    gpt_kv_dir_free(&kv);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        printf("cannot remove %s\n", dir);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--peer") == 0)
        return peer_main(atoi(argv[2]), argv[3]);
    int n = gpu_test_gate();
    if (n <= 0)
        return -n;
    static const size_t sizes[] = {1, 7, 1000003};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        test_world(1, sizes[i]);
    int world = n > MAX_WORLD ? MAX_WORLD : n;
    if (world >= 2)
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
            test_world(world, sizes[i] + (size_t)world - 1);
    test_stuck(1);
    test_stuck(0);
    test_overlap();
    test_absent_peer();
    if (world >= 2)
        test_killed_peer(argv[0]);
    else
        printf("one GPU: the killed-peer test needs two (skipped)\n");
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
