/*
 * test_comm: the tcp collective backend against a serial reference, with
 * ranks as threads (in-memory kv) and as forked processes (directory kv):
 * every op at world sizes 1-5 and odd element counts, 16 MiB at worlds 2
 * and 4, results compared bit for bit (the ring's summation order is fixed,
 * so the reference sums in the same order); abort, timeout, a closed or
 * killed peer, a stray connection, mismatched calls, and a set-up that
 * its owner cancels. The bf16 gradient all-reduce (gpt_comm_allreduce_dtype)
 * against its reference: inputs rounded to bf16, the ring's fp32 sum,
 * the result rounded to bf16; a world of one unchanged; fp32 as before.
 *
 * Every test runs twice: over shared memory (all ranks are on this host,
 * so the communicator must pick it: ops->name "shm") and over the socket
 * ring (opts.shm = -1). Both must give the same bits. Then the ways shm is
 * turned off: one rank with it off (GPTD_COMM_SHM=0 in the environment
 * no longer is one), ranks that look like
 * different hosts (network namespaces), and no segment left behind.
 *
 * Rank code runs on its own thread or process and reports by return value;
 * only the main thread uses cmocka's asserts.
 */
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <math.h>
#include <netdb.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../engine/ops/cuda/gpt_bf16.h"

#include "comm.h"
#include "comm_shm.h"

#define WORLD_MAX  5
#define BIG_N      (4u * 1024u * 1024u) /* 16 MiB of floats */
#define TIMEOUT_MS 20000

/* 3: fewer elements than ranks; 70001 (prime): above the size where an
 * allreduce reduces slices instead of the whole buffer. */
static const size_t small_counts[] = {0, 1, 3, 7, 1023, 70001};

/* The transport the current test asks for (opts.shm) and the
 * communicator name it must get in a world of more than one. */
static int shm_mode;
static int mode_shm = 1, mode_ring = -1;

static void set_mode(void **state)
{
    shm_mode = *(int *)*state;
}

static const char *want_name(int world)
{
    return world > 1 && shm_mode > 0 ? "shm" : "tcp";
}

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

/* Values of varied magnitude and sign, so the summation order shows in the
 * bits. */
static float value(uint32_t seed, int rank, size_t i)
{
    uint64_t h = (seed * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)rank << 40) ^ i;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    float m = (float)(h & 0xffffff) / 16777216.0f - 0.5f;
    return ldexpf(m, (int)((h >> 24) % 16) - 6);
}

/* What every rank needs to check its results, computed once before the
 * ranks start. */
struct ref {
    int world;
    size_t n;
    float *x;           /* (world, n): each rank's input */
    float *sum;         /* (n) */
    float *avg;         /* (n) */
    float *bsum, *bavg; /* (n): the bf16 all-reduce's results */
};

static float round_bf16(float v)
{
    return gpt_bf16_to_float(gpt_bf16_from_float_rne(v));
}

static void ref_init(struct ref *r, int world, size_t n, uint32_t seed)
{
    r->world = world;
    r->n = n;
    r->x = malloc((size_t)world * n * sizeof(float) + 1);
    r->sum = malloc(n * sizeof(float) + 1);
    r->avg = malloc(n * sizeof(float) + 1);
    r->bsum = malloc(n * sizeof(float) + 1);
    r->bavg = malloc(n * sizeof(float) + 1);
    assert_non_null(r->bsum);
    assert_non_null(r->bavg);
    assert_non_null(r->x);
    assert_non_null(r->sum);
    assert_non_null(r->avg);
    for (int k = 0; k < world; k++)
        for (size_t i = 0; i < n; i++)
            r->x[(size_t)k * n + i] = value(seed, k, i);
    /* Slice j is summed along the ring starting at rank j+1 and ends at its
     * owner j, which divides for AVG. */
    for (int j = 0; j < world; j++) {
        size_t off, len;
        gpt_comm_slice(n, world, j, &off, &len);
        for (size_t i = off; i < off + len; i++) {
            float acc = r->x[(size_t)((j + 1) % world) * n + i];
            for (int k = 2; k <= world; k++)
                acc = acc + r->x[(size_t)((j + k) % world) * n + i];
            r->sum[i] = acc;
            r->avg[i] = world == 1 ? acc : acc / (float)world;
            /* bf16: the same sum of rounded inputs, rounded; a world of
             * one reduces nothing. */
            float b = round_bf16(r->x[(size_t)((j + 1) % world) * n + i]);
            for (int k = 2; k <= world; k++)
                b = b + round_bf16(r->x[(size_t)((j + k) % world) * n + i]);
            r->bsum[i] = world == 1 ? acc : round_bf16(b);
            r->bavg[i] = world == 1 ? acc : round_bf16(b / (float)world);
        }
    }
}

static void ref_done(struct ref *r)
{
    free(r->x);
    free(r->sum);
    free(r->avg);
    free(r->bsum);
    free(r->bavg);
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            rc = __LINE__;                                                                         \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* Every op once on one rank. Returns 0, a negative comm error, or the
 * line of the failed check. */
static int rank_suite(struct gpt_comm *c, const struct ref *r)
{
    size_t n = r->n, bytes = n * sizeof(float) + 3, off, len;
    int rank = c->rank, world = c->world, rc = 0;
    float *buf = malloc(n * sizeof(float) + 1);
    unsigned char *bb = malloc(bytes), *want = malloc(bytes);
    const float *mine = r->x + (size_t)rank * n;
    CHECK(buf && bb && want);
    gpt_comm_slice(n, world, rank, &off, &len);

    for (int rep = 0; rep < 2; rep++) { /* twice: same bits every run */
        memcpy(buf, mine, n * sizeof(float));
        if ((rc = gpt_comm_allreduce(c, buf, n, GPT_REDUCE_SUM)))
            goto out;
        CHECK(memcmp(buf, r->sum, n * sizeof(float)) == 0);
        memcpy(buf, mine, n * sizeof(float));
        if ((rc = gpt_comm_allreduce(c, buf, n, GPT_REDUCE_AVG)))
            goto out;
        CHECK(memcmp(buf, r->avg, n * sizeof(float)) == 0);
        memcpy(buf, mine, n * sizeof(float));
        if ((rc = gpt_comm_allreduce_dtype(c, buf, n, GPT_REDUCE_AVG, GPT_COMM_FP32)))
            goto out;
        CHECK(memcmp(buf, r->avg, n * sizeof(float)) == 0);
        memcpy(buf, mine, n * sizeof(float));
        if ((rc = gpt_comm_allreduce_dtype(c, buf, n, GPT_REDUCE_SUM, GPT_COMM_BF16)))
            goto out;
        CHECK(memcmp(buf, r->bsum, n * sizeof(float)) == 0);
        memcpy(buf, mine, n * sizeof(float));
        if ((rc = gpt_comm_allreduce_dtype(c, buf, n, GPT_REDUCE_AVG, GPT_COMM_BF16)))
            goto out;
        CHECK(memcmp(buf, r->bavg, n * sizeof(float)) == 0);
    }

    memcpy(buf, mine, n * sizeof(float));
    if ((rc = gpt_comm_reduce_scatter(c, buf, n, GPT_REDUCE_SUM)))
        goto out;
    CHECK(memcmp(buf + off, r->sum + off, len * sizeof(float)) == 0);
    memcpy(buf, mine, n * sizeof(float));
    if ((rc = gpt_comm_reduce_scatter(c, buf, n, GPT_REDUCE_AVG)))
        goto out;
    CHECK(memcmp(buf + off, r->avg + off, len * sizeof(float)) == 0);

    /* allgather: own slice in, garbage elsewhere; every slice out. */
    memset(buf, 0xff, n * sizeof(float));
    memcpy(buf + off, mine + off, len * sizeof(float));
    if ((rc = gpt_comm_allgather(c, buf, n)))
        goto out;
    for (int j = 0; j < world; j++) {
        size_t o, l;
        gpt_comm_slice(n, world, j, &o, &l);
        CHECK(memcmp(buf + o, r->x + (size_t)j * n + o, l * sizeof(float)) == 0);
    }

    /* broadcast from every root, an odd byte count. */
    for (int root = 0; root < world; root++) {
        for (size_t i = 0; i < bytes; i++)
            want[i] = (unsigned char)(i * 131 + (size_t)root * 7 + 1);
        if (rank == root)
            memcpy(bb, want, bytes);
        else
            memset(bb, 0, bytes);
        if ((rc = gpt_comm_broadcast(c, bb, bytes, root)))
            goto out;
        CHECK(memcmp(bb, want, bytes) == 0);
    }

    if ((rc = gpt_comm_barrier(c)))
        goto out;
out:
    free(buf);
    free(bb);
    free(want);
    return rc;
}

/* allreduce only (the 16 MiB case). */
static int rank_big(struct gpt_comm *c, const struct ref *r)
{
    int rc = 0;
    float *buf = malloc(r->n * sizeof(float));
    CHECK(buf);
    for (int op = 0; op < 2; op++) {
        memcpy(buf, r->x + (size_t)c->rank * r->n, r->n * sizeof(float));
        if ((rc = gpt_comm_allreduce(c, buf, r->n, op ? GPT_REDUCE_AVG : GPT_REDUCE_SUM)))
            goto out;
        CHECK(memcmp(buf, op ? r->avg : r->sum, r->n * sizeof(float)) == 0);
    }
out:
    free(buf);
    return rc;
}

/* ---- ranks as threads ---- */

static int prefix_seq;

struct world {
    int size;
    struct gpt_kv kv;
    char prefix[64];
    struct gpt_comm *c[WORLD_MAX];
};

struct rank_job {
    struct world *w;
    int rank;
    struct gpt_comm_opts opts;
    int (*fn)(struct gpt_comm *c, const struct ref *r);
    const struct ref *ref;
    int rc;
    int64_t took_ms;
    struct gpt_err err;
};

static void *rank_new_thread(void *arg)
{
    struct rank_job *j = arg;
    j->rc = gpt_comm_tcp_new(&j->opts, &j->w->kv, &j->w->c[j->rank], &j->err);
    return NULL;
}

static void *rank_fn_thread(void *arg)
{
    struct rank_job *j = arg;
    int64_t t0 = now_ms();
    j->rc = j->fn(j->w->c[j->rank], j->ref);
    j->took_ms = now_ms() - t0;
    return NULL;
}

static void world_opts(struct world *w, int rank, size_t chunk, int timeout_ms,
                       struct gpt_comm_opts *o)
{
    *o = (struct gpt_comm_opts){
        .rank = rank,
        .world = w->size,
        .prefix = w->prefix,
        .timeout_ms = timeout_ms,
        .chunk_bytes = chunk,
        .shm = shm_mode,
    };
}

/* Forms a world of `size` threads, rank r with opts.shm = shm[r] (NULL:
 * shm_mode for all); asserts that it worked and that every rank got the
 * transport `want` (NULL: want_name()). */
static void world_new_ex(struct world *w, int size, size_t chunk, int timeout_ms, const int *shm,
                         const char *want)
{
    struct rank_job jobs[WORLD_MAX];
    pthread_t th[WORLD_MAX];
    memset(w, 0, sizeof(*w));
    w->size = size;
    snprintf(w->prefix, sizeof(w->prefix), "test/%d/%d/", (int)getpid(), prefix_seq++);
    assert_int_equal(gpt_kv_mem_new(&w->kv, NULL), 0);
    for (int r = 0; r < size; r++) {
        jobs[r] = (struct rank_job){.w = w, .rank = r};
        world_opts(w, r, chunk, timeout_ms, &jobs[r].opts);
        if (shm)
            jobs[r].opts.shm = shm[r];
        assert_int_equal(pthread_create(&th[r], NULL, rank_new_thread, &jobs[r]), 0);
    }
    for (int r = 0; r < size; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < size; r++) {
        if (jobs[r].rc)
            print_error("rank %d: %s\n", r, jobs[r].err.msg);
        assert_int_equal(jobs[r].rc, 0);
        assert_non_null(w->c[r]);
        assert_int_equal(w->c[r]->rank, r);
        assert_int_equal(w->c[r]->world, size);
        assert_string_equal(w->c[r]->ops->name, want ? want : want_name(size));
    }
}

static void world_new(struct world *w, int size, size_t chunk, int timeout_ms)
{
    world_new_ex(w, size, chunk, timeout_ms, NULL, NULL);
}

static void world_free(struct world *w)
{
    for (int r = 0; r < w->size; r++)
        gpt_comm_free(w->c[r]);
    gpt_kv_mem_free(&w->kv);
}

/* Runs fn on every rank of w at once (only the ranks in mask); fills rcs. */
static void world_run(struct world *w, unsigned mask,
                      int (*fn)(struct gpt_comm *, const struct ref *), const struct ref *ref,
                      struct rank_job *jobs)
{
    pthread_t th[WORLD_MAX];
    for (int r = 0; r < w->size; r++) {
        jobs[r] = (struct rank_job){.w = w, .rank = r, .fn = fn, .ref = ref};
        if (mask & (1u << r))
            assert_int_equal(pthread_create(&th[r], NULL, rank_fn_thread, &jobs[r]), 0);
    }
    for (int r = 0; r < w->size; r++)
        if (mask & (1u << r))
            pthread_join(th[r], NULL);
}

static void world_run_all_ok(struct world *w, int (*fn)(struct gpt_comm *, const struct ref *),
                             const struct ref *ref)
{
    struct rank_job jobs[WORLD_MAX];
    world_run(w, (1u << w->size) - 1, fn, ref, jobs);
    for (int r = 0; r < w->size; r++) {
        if (jobs[r].rc)
            print_error("world %d n %zu rank %d: rc %d\n", w->size, ref->n, r, jobs[r].rc);
        assert_int_equal(jobs[r].rc, 0);
    }
}

static void test_threads_small(void **state)
{
    set_mode(state);
    for (int size = 1; size <= WORLD_MAX; size++) {
        struct world w;
        world_new(&w, size, 0, TIMEOUT_MS);
        for (size_t k = 0; k < sizeof(small_counts) / sizeof(small_counts[0]); k++) {
            struct ref ref;
            ref_init(&ref, size, small_counts[k], (uint32_t)(size * 100 + k));
            world_run_all_ok(&w, rank_suite, &ref);
            ref_done(&ref);
        }
        world_free(&w);
    }
}

/* Tiny chunks: many pipeline steps per segment, partial floats on the
 * wire; on shm, many steps through small staging slots, for both ways of
 * reducing. */
static void test_threads_tiny_chunks(void **state)
{
    set_mode(state);
    static const size_t chunks[] = {64, 4096};
    static const size_t counts[] = {4099, 70001};
    for (int size = 2; size <= WORLD_MAX; size += 3) {
        for (size_t k = 0; k < 2; k++) {
            struct world w;
            struct ref ref;
            world_new(&w, size, chunks[k], TIMEOUT_MS);
            ref_init(&ref, size, counts[k], 7);
            world_run_all_ok(&w, rank_suite, &ref);
            ref_done(&ref);
            world_free(&w);
        }
    }
}

static void test_threads_big(void **state)
{
    set_mode(state);
    for (int size = 2; size <= 4; size += 2) {
        struct world w;
        struct ref ref;
        world_new(&w, size, 0, TIMEOUT_MS);
        ref_init(&ref, size, BIG_N, 11);
        world_run_all_ok(&w, rank_big, &ref);
        ref_done(&ref);
        world_free(&w);
    }
}

static int rank_allreduce_1m(struct gpt_comm *c, const struct ref *r)
{
    (void)r;
    size_t n = 1u << 20;
    float *buf = calloc(n, sizeof(float));
    if (!buf)
        return -ENOMEM;
    int rc = gpt_comm_allreduce(c, buf, n, GPT_REDUCE_SUM);
    free(buf);
    return rc;
}

/* Rank 1 never joins the collective: abort must free rank 0 within 1 s. */
static void test_threads_abort(void **state)
{
    set_mode(state);
    struct world w;
    struct rank_job jobs[WORLD_MAX];
    world_new(&w, 2, 0, TIMEOUT_MS);
    jobs[0] = (struct rank_job){.w = &w, .rank = 0, .fn = rank_allreduce_1m};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, rank_fn_thread, &jobs[0]), 0);
    sleep_ms(300);
    int64_t t0 = now_ms();
    gpt_comm_abort(w.c[0]);
    pthread_join(th, NULL);
    int64_t took = now_ms() - t0;
    assert_int_equal(jobs[0].rc, -ECANCELED);
    assert_true(took < 1000);
    /* Sticky, and later calls fail at once. */
    float x = 1;
    assert_int_equal(gpt_comm_allreduce(w.c[0], &x, 1, GPT_REDUCE_SUM), -ECANCELED);
    assert_int_equal(gpt_comm_barrier(w.c[0]), -ECANCELED);
    /* The other rank learns through the shut-down sockets, not a timeout. */
    t0 = now_ms();
    assert_true(gpt_comm_barrier(w.c[1]) < 0);
    assert_true(now_ms() - t0 < 1000);
    world_free(&w);

    /* A world of one honours abort too. */
    struct gpt_comm_opts o = {.rank = 0, .world = 1};
    struct gpt_comm *c = NULL;
    assert_int_equal(gpt_comm_tcp_new(&o, NULL, &c, NULL), 0);
    assert_int_equal(gpt_comm_allreduce(c, &x, 1, GPT_REDUCE_AVG), 0);
    assert_true(x == 1.0f);
    gpt_comm_abort(c);
    assert_int_equal(gpt_comm_barrier(c), -ECANCELED);
    gpt_comm_free(c);
}

static void test_threads_timeout(void **state)
{
    set_mode(state);
    struct world w;
    struct rank_job jobs[WORLD_MAX];
    world_new(&w, 3, 0, 300);
    world_run(&w, 1u, rank_allreduce_1m, NULL, jobs);
    assert_int_equal(jobs[0].rc, -ETIMEDOUT);
    assert_true(jobs[0].took_ms >= 250 && jobs[0].took_ms < 2000);
    float x = 0;
    assert_int_equal(gpt_comm_allreduce(w.c[0], &x, 1, GPT_REDUCE_SUM), -ETIMEDOUT);
    world_free(&w);

    /* Setup alone: a missing rank times the others out. */
    struct gpt_kv kv;
    struct gpt_comm *c = NULL;
    struct gpt_err err = {0};
    assert_int_equal(gpt_kv_mem_new(&kv, NULL), 0);
    struct gpt_comm_opts o = {.rank = 0, .world = 2, .prefix = "lonely/", .timeout_ms = 200};
    int64_t t0 = now_ms();
    assert_int_equal(gpt_comm_tcp_new(&o, &kv, &c, &err), -ETIMEDOUT);
    assert_true(now_ms() - t0 < 2000);
    assert_null(c);
    assert_true(err.msg[0] != '\0');
    gpt_kv_mem_free(&kv);
}

/* Set-up cancelled by its owner (a peer died before the world formed):
 * rank 0 waits for a rank that never comes, first for its address in the
 * kv, then (a listener that never answers stands in for rank 1) for its
 * connection; both end with -ECANCELED well before the timeout. */
struct cancel_job {
    struct gpt_comm_opts opts;
    struct gpt_kv *kv;
    atomic_int flag;
    int rc;
    int64_t done_ms;
};

static int cancel_flag(void *ctx)
{
    return atomic_load(&((struct cancel_job *)ctx)->flag);
}

static void *cancel_thread(void *arg)
{
    struct cancel_job *j = arg;
    struct gpt_comm *c = NULL;
    j->rc = gpt_comm_tcp_new(&j->opts, j->kv, &c, NULL);
    j->done_ms = now_ms();
    gpt_comm_free(c);
    return NULL;
}

static void cancel_run(struct gpt_kv *kv, const char *prefix)
{
    struct cancel_job j = {.kv = kv};
    atomic_init(&j.flag, 0);
    j.opts = (struct gpt_comm_opts){.rank = 0,
                                    .world = 2,
                                    .prefix = prefix,
                                    .timeout_ms = TIMEOUT_MS,
                                    .shm = shm_mode,
                                    .cancelled = cancel_flag,
                                    .cancel_ctx = &j};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, cancel_thread, &j), 0);
    sleep_ms(300);
    int64_t t0 = now_ms();
    atomic_store(&j.flag, 1);
    pthread_join(th, NULL);
    assert_int_equal(j.rc, -ECANCELED);
    assert_true(j.done_ms - t0 < 1000);
}

static void test_threads_cancel_setup(void **state)
{
    set_mode(state);
    struct gpt_kv kv;
    assert_int_equal(gpt_kv_mem_new(&kv, NULL), 0);
    cancel_run(&kv, "cancel-kv/");

    /* Rank 1's "address": a listener whose backlog takes the connection
     * and the hello, and that never connects to rank 0. */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(lfd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(lfd, 4), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(sa.sin_port));
    assert_int_equal(kv.set(kv.ctx, "cancel-accept/addr/1", addr, strlen(addr)), 0);
    cancel_run(&kv, "cancel-accept/");
    close(lfd);
    gpt_kv_mem_free(&kv);
}

/* A peer that goes away mid-collective: an error for the others, no hang. */
static void test_threads_peer_closed(void **state)
{
    set_mode(state);
    struct world w;
    struct rank_job jobs[WORLD_MAX];
    world_new(&w, 3, 0, TIMEOUT_MS);
    gpt_comm_free(w.c[1]);
    w.c[1] = NULL;
    world_run(&w, 5u, rank_allreduce_1m, NULL, jobs);
    for (int r = 0; r < 3; r += 2) {
        assert_true(jobs[r].rc < 0 && jobs[r].rc != -ETIMEDOUT);
        assert_true(jobs[r].took_ms < 5000);
    }
    world_free(&w);
}

static int rank_n7(struct gpt_comm *c, const struct ref *r)
{
    (void)r;
    float buf[8] = {0};
    return gpt_comm_allreduce(c, buf, c->rank == 0 ? 7 : 8, GPT_REDUCE_SUM);
}

/* Ranks that disagree on the call are told so instead of mixing streams. */
static void test_threads_mismatch(void **state)
{
    set_mode(state);
    struct world w;
    struct rank_job jobs[WORLD_MAX];
    world_new(&w, 2, 0, TIMEOUT_MS);
    world_run(&w, 3u, rank_n7, NULL, jobs);
    assert_int_equal(jobs[0].rc, -GPT_E_PROTO);
    assert_int_equal(jobs[1].rc, -GPT_E_PROTO);
    world_free(&w);
}

/* A connection to a rank's port that is not its left neighbour is refused
 * and the ring still forms. */
static void test_threads_stray(void **state)
{
    set_mode(state);
    struct world w;
    struct rank_job jobs[2];
    pthread_t th;
    memset(&w, 0, sizeof(w));
    w.size = 2;
    snprintf(w.prefix, sizeof(w.prefix), "stray/%d/", (int)getpid());
    assert_int_equal(gpt_kv_mem_new(&w.kv, NULL), 0);
    jobs[0] = (struct rank_job){.w = &w, .rank = 0};
    world_opts(&w, 0, 0, TIMEOUT_MS, &jobs[0].opts);
    assert_int_equal(pthread_create(&th, NULL, rank_new_thread, &jobs[0]), 0);

    char addr[128], key[128];
    size_t len = 0;
    snprintf(key, sizeof(key), "%saddr/0", w.prefix);
    assert_int_equal(w.kv.get(w.kv.ctx, key, addr, sizeof(addr) - 1, &len, 5000), 0);
    addr[len] = '\0';
    char *colon = strrchr(addr, ':');
    assert_non_null(colon);
    *colon = '\0';
    struct addrinfo *ai = NULL, hints = {.ai_socktype = SOCK_STREAM};
    assert_int_equal(getaddrinfo(addr, colon + 1, &hints, &ai), 0);
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, ai->ai_addr, ai->ai_addrlen), 0);
    freeaddrinfo(ai);
    char junk[24] = "not a gptd hello at all";
    assert_int_equal(send(fd, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));

    jobs[1] = (struct rank_job){.w = &w, .rank = 1};
    world_opts(&w, 1, 0, TIMEOUT_MS, &jobs[1].opts);
    rank_new_thread(&jobs[1]);
    pthread_join(th, NULL);
    assert_int_equal(jobs[0].rc, 0);
    assert_int_equal(jobs[1].rc, 0);
    char b;
    assert_int_equal(recv(fd, &b, 1, 0), 0); /* closed on us */
    close(fd);

    struct ref ref;
    ref_init(&ref, 2, 7, 3);
    world_run_all_ok(&w, rank_suite, &ref);
    ref_done(&ref);
    world_free(&w);
}

static void test_bad_args(void **state)
{
    (void)state;
    struct gpt_kv kv;
    struct gpt_comm *c = NULL;
    struct gpt_err err = {0};
    assert_int_equal(gpt_kv_mem_new(&kv, NULL), 0);
    struct gpt_comm_opts o = {.rank = 0, .world = 0, .prefix = "x/"};
    assert_int_equal(gpt_comm_tcp_new(&o, &kv, &c, &err), -EINVAL);
    o = (struct gpt_comm_opts){.rank = 2, .world = 2, .prefix = "x/"};
    assert_int_equal(gpt_comm_tcp_new(&o, &kv, &c, &err), -EINVAL);
    o = (struct gpt_comm_opts){.rank = 0, .world = 2, .prefix = "x/"};
    assert_int_equal(gpt_comm_tcp_new(&o, NULL, &c, &err), -EINVAL);
    o = (struct gpt_comm_opts){.rank = 0, .world = 2, .prefix = "x/", .bind_host = "localhost"};
    assert_int_equal(gpt_comm_tcp_new(&o, &kv, &c, &err), -EINVAL);
    assert_null(c);
    gpt_kv_mem_free(&kv);
}

/* ---- ranks as processes ---- */

struct proc_world {
    int size;
    char dir[64];
    pid_t pid[WORLD_MAX];
};

static void proc_dir_new(struct proc_world *pw, int size)
{
    pw->size = size;
    snprintf(pw->dir, sizeof(pw->dir), "/tmp/gptd-comm-XXXXXX");
    assert_non_null(mkdtemp(pw->dir));
}

static void proc_dir_done(struct proc_world *pw)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", pw->dir);
    assert_int_equal(system(cmd), 0);
}

/* Unique per world: the segment's name is derived from it. */
static void proc_prefix(const struct proc_world *pw, char *buf, size_t cap)
{
    snprintf(buf, cap, "proc/%s/", strrchr(pw->dir, '/') + 1);
}

/* Segments in /dev/shm that a world with this prefix made (comm_shm.c:
 * "gptd-" and the FNV-1a hash of the prefix): there must be none once
 * setup is over, whatever happens to the ranks. */
static int shm_leftovers(const char *prefix)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = prefix; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    char want[64];
    snprintf(want, sizeof(want), "gptd-%016llx-", (unsigned long long)h);
    int found = 0;
    DIR *d = opendir("/dev/shm");
    if (!d)
        return 0;
    for (struct dirent *e; (e = readdir(d));)
        found += strncmp(e->d_name, want, strlen(want)) == 0;
    closedir(d);
    return found;
}

/* Child: forms the world, runs fn, exits 0 on success, 100 + line or
 * 200 - errno otherwise (kept in 0..255). */
static void proc_child(struct proc_world *pw, int rank, int timeout_ms,
                       int (*fn)(struct gpt_comm *, const struct ref *), const struct ref *ref)
{
    struct gpt_kv kv;
    struct gpt_comm *c = NULL;
    char prefix[64];
    int rc = gpt_kv_dir_new(&kv, pw->dir, NULL);
    proc_prefix(pw, prefix, sizeof(prefix));
    struct gpt_comm_opts o = {.rank = rank,
                              .world = pw->size,
                              .prefix = prefix,
                              .timeout_ms = timeout_ms,
                              .shm = shm_mode};
    if (rc == 0)
        rc = gpt_comm_tcp_new(&o, &kv, &c, NULL);
    if (rc == 0 && strcmp(c->ops->name, want_name(pw->size)) != 0)
        rc = __LINE__;
    if (rc == 0)
        rc = fn(c, ref);
    gpt_comm_free(c);
    gpt_kv_dir_free(&kv);
    _exit(rc == 0 ? 0 : rc > 0 ? 100 + rc % 100 : 200 - (-rc % 100));
}

static void proc_start(struct proc_world *pw, int timeout_ms,
                       int (*fn)(struct gpt_comm *, const struct ref *), const struct ref *ref)
{
    fflush(NULL);
    for (int r = 0; r < pw->size; r++) {
        pw->pid[r] = fork();
        assert_true(pw->pid[r] >= 0);
        if (pw->pid[r] == 0)
            proc_child(pw, r, timeout_ms, fn, ref);
    }
}

/* Waits for every child up to wait_ms (then kills the rest); returns each
 * exit status, or -1 for one killed by a signal or by us. */
static void proc_wait(struct proc_world *pw, int wait_ms, int *codes)
{
    int64_t deadline = now_ms() + wait_ms;
    int left = pw->size;
    for (int r = 0; r < pw->size; r++)
        codes[r] = -2;
    while (left > 0) {
        for (int r = 0; r < pw->size; r++) {
            int st;
            if (codes[r] != -2 || waitpid(pw->pid[r], &st, WNOHANG) != pw->pid[r])
                continue;
            codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            left--;
        }
        if (left > 0 && now_ms() > deadline) {
            for (int r = 0; r < pw->size; r++)
                if (codes[r] == -2) {
                    kill(pw->pid[r], SIGKILL);
                    waitpid(pw->pid[r], NULL, 0);
                    codes[r] = -3;
                }
            break;
        }
        sleep_ms(5);
    }
}

static void proc_run_ok(int size, int (*fn)(struct gpt_comm *, const struct ref *),
                        const struct ref *ref)
{
    struct proc_world pw;
    int codes[WORLD_MAX];
    char prefix[64];
    proc_dir_new(&pw, size);
    proc_prefix(&pw, prefix, sizeof(prefix));
    proc_start(&pw, TIMEOUT_MS, fn, ref);
    proc_wait(&pw, 60000, codes);
    proc_dir_done(&pw);
    assert_int_equal(shm_leftovers(prefix), 0);
    for (int r = 0; r < size; r++) {
        if (codes[r] != 0)
            print_error("world %d n %zu rank %d: exit %d\n", size, ref->n, r, codes[r]);
        assert_int_equal(codes[r], 0);
    }
}

static void test_procs_small(void **state)
{
    set_mode(state);
    for (int size = 1; size <= WORLD_MAX; size++) {
        for (size_t k = 0; k < sizeof(small_counts) / sizeof(small_counts[0]); k++) {
            struct ref ref;
            ref_init(&ref, size, small_counts[k], (uint32_t)(size * 1000 + k));
            proc_run_ok(size, rank_suite, &ref);
            ref_done(&ref);
        }
    }
}

static void test_procs_big(void **state)
{
    set_mode(state);
    for (int size = 2; size <= 4; size += 2) {
        struct ref ref;
        ref_init(&ref, size, BIG_N, 13);
        proc_run_ok(size, rank_big, &ref);
        ref_done(&ref);
    }
}

/* Loops on 16 MiB allreduces until one fails; writes a byte to the pipe
 * after the first one so the parent knows traffic is flowing. */
static int kill_pipe_fd = -1;

static int rank_loop(struct gpt_comm *c, const struct ref *r)
{
    (void)r;
    size_t n = BIG_N;
    float *buf = calloc(n, sizeof(float));
    if (!buf)
        return -ENOMEM;
    int rc;
    for (int it = 0;; it++) {
        rc = gpt_comm_allreduce(c, buf, n, GPT_REDUCE_AVG);
        if (rc)
            break;
        if (it == 0 && write(kill_pipe_fd, "x", 1) != 1)
            break;
    }
    free(buf);
    return rc;
}

/* kill -9 of one rank mid-allreduce: the others fail, none hangs. */
static void killed_peer(int size, int victim)
{
    struct proc_world pw;
    int codes[WORLD_MAX], p[2];
    char prefix[64];
    assert_int_equal(pipe(p), 0);
    kill_pipe_fd = p[1];
    proc_dir_new(&pw, size);
    proc_prefix(&pw, prefix, sizeof(prefix));
    proc_start(&pw, 60000, rank_loop, NULL);
    close(p[1]);
    char b[WORLD_MAX];
    int got = 0;
    while (got < size) {
        ssize_t k = read(p[0], b, (size_t)(size - got));
        assert_true(k > 0);
        got += (int)k;
    }
    close(p[0]);
    sleep_ms(50);
    int64_t t0 = now_ms();
    kill(pw.pid[victim], SIGKILL);
    proc_wait(&pw, 10000, codes);
    int64_t took = now_ms() - t0;
    proc_dir_done(&pw);
    assert_int_equal(codes[victim], -1);
    for (int r = 0; r < size; r++) {
        if (r == victim)
            continue;
        /* 200 - errno: a comm error (EPIPE, ECONNRESET), not a timeout or a kill. */
        if (!(codes[r] > 100 && codes[r] != 200 - ETIMEDOUT % 100))
            print_error("world %d victim %d rank %d: exit %d\n", size, victim, r, codes[r]);
        assert_true(codes[r] > 100 && codes[r] != 200 - ETIMEDOUT % 100);
    }
    assert_true(took < 5000);
    /* The segment was unlinked once every rank had mapped it. */
    assert_int_equal(shm_leftovers(prefix), 0);
}

static void test_procs_killed_peer(void **state)
{
    set_mode(state);
    killed_peer(4, 1);
    killed_peer(2, 0); /* the rank that made the segment */
}

/* ---- when shared memory is not used ---- */

static void fake_other_host(int rank, char *id, size_t cap)
{
    /* What a rank in another network namespace would publish. */
    if (rank == 2)
        snprintf(id + strlen(id), cap - strlen(id), "/elsewhere");
}

static void test_shm_off(void **state)
{
    (void)state;
    shm_mode = 0; /* auto */
    struct world w;
    struct ref ref;
    ref_init(&ref, 3, 1023, 5);

    /* Auto, all on this host: shm. */
    world_new_ex(&w, 3, 0, TIMEOUT_MS, NULL, "shm");
    world_run_all_ok(&w, rank_suite, &ref);
    world_free(&w);

    /* GPTD_COMM_SHM=0, once a developer override, is not read: auto and
     * on are shm. */
    assert_int_equal(setenv("GPTD_COMM_SHM", "0", 1), 0);
    world_new_ex(&w, 3, 0, TIMEOUT_MS, NULL, "shm");
    world_run_all_ok(&w, rank_suite, &ref);
    world_free(&w);
    static const int on[] = {1, 1, 1};
    world_new_ex(&w, 3, 0, TIMEOUT_MS, on, "shm");
    world_run_all_ok(&w, rank_suite, &ref);
    world_free(&w);
    assert_int_equal(unsetenv("GPTD_COMM_SHM"), 0);

    /* One rank with it off: the whole world uses the ring. */
    static const int one_off[] = {1, 1, -1};
    world_new_ex(&w, 3, 0, TIMEOUT_MS, one_off, "tcp");
    world_run_all_ok(&w, rank_suite, &ref);
    world_free(&w);
    static const int first_off[] = {-1, 0, 0};
    world_new_ex(&w, 3, 0, TIMEOUT_MS, first_off, "tcp");
    world_run_all_ok(&w, rank_suite, &ref);
    world_free(&w);

    /* A rank that looks like another host (its own network namespace). */
    gpt_comm_shm_test_host_hook = fake_other_host;
    world_new_ex(&w, 3, 0, TIMEOUT_MS, on, "tcp");
    gpt_comm_shm_test_host_hook = NULL;
    world_run_all_ok(&w, rank_suite, &ref);
    world_free(&w);
    ref_done(&ref);
}

/* Each transport test twice, named after the transport. */
#define TEST_IN(f, mode)                                                                           \
    {                                                                                              \
        .name = #f "/" #mode, .test_func = f, .initial_state = &mode_##mode                        \
    }
#define BOTH(f) TEST_IN(f, shm), TEST_IN(f, ring)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_args), BOTH(test_threads_small),
        BOTH(test_threads_tiny_chunks),  BOTH(test_threads_big),
        BOTH(test_threads_abort),        BOTH(test_threads_timeout),
        BOTH(test_threads_cancel_setup), BOTH(test_threads_peer_closed),
        BOTH(test_threads_mismatch),     BOTH(test_threads_stray),
        BOTH(test_procs_small),          BOTH(test_procs_big),
        BOTH(test_procs_killed_peer),    cmocka_unit_test(test_shm_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
