/*
 * test_factory: engine/factory makes backends and communicators by kind
 * for callers that include no CUDA header. Without a GPU (always in a
 * build without CUDA) the probe says 0 devices, a CUDA backend or an NCCL
 * communicator is refused with -GPT_E_NODEVICE and the detail filled, and
 * the CPU backend, the local and the TCP communicators work through it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>

#include "factory.h"

static void test_probe(void **state)
{
    (void)state;
    int n = gpt_device_count();
    assert_true(n >= 0);
    if (!gpt_factory_has_cuda())
        assert_int_equal(n, 0);
    char name[64] = "untouched";
    size_t mem = 42;
    assert_int_equal(gpt_device_info(n, name, sizeof(name), &mem), -GPT_E_NODEVICE);
    assert_int_equal(gpt_device_info(-1, name, sizeof(name), &mem), -GPT_E_NODEVICE);
    assert_string_equal(name, "untouched");
    assert_int_equal(mem, 42);
}

static void test_cpu_backend(void **state)
{
    (void)state;
    struct gpt_backend *be = NULL;
    struct gpt_err err;
    /* the attention variants are the CUDA backend's: the CPU's ignores them */
    const struct gpt_backend_opts o = {
        .threads = 2, .attn_forward = GPT_ATTN_FWD_M32, .attn_backward = GPT_ATTN_BWD_FUSED};
    assert_int_equal(gpt_backend_new(GPT_BACKEND_CPU, -1, &o, &be, &err), 0);
    assert_non_null(be);
    assert_int_equal(be->threads, 2);
    assert_string_equal(be->attn_variants, "");
    float *x;
    assert_int_equal(gpt_backend_alloc(be, 4 * sizeof(float), (void **)&x), 0);
    float h[4] = {1, 2, 3, 4};
    assert_int_equal(gpt_backend_upload(be, x, h, sizeof(h)), 0);
    assert_true(gpt_backend_sumsq(be, x, 4) == 30.0);
    gpt_backend_mem_free(be, x);
    gpt_backend_free(be);
    if (gpt_device_count() == 0) {
        /* AUTO on a host without a GPU is the CPU. */
        be = NULL;
        assert_int_equal(gpt_backend_new(GPT_BACKEND_AUTO, 0, NULL, &be, &err), 0);
        assert_non_null(be);
        gpt_backend_free(be);
    }
}

static void test_gpu_refused_without_gpu(void **state)
{
    (void)state;
    if (gpt_device_count() > 0)
        skip();                                         /* covered by the gpu tests */
    struct gpt_backend *be = (struct gpt_backend *)&be; /* must stay untouched */
    struct gpt_err err;
    memset(&err, 0, sizeof(err));
    assert_int_equal(gpt_backend_new(GPT_BACKEND_CUDA, 0, NULL, &be, &err), -GPT_E_NODEVICE);
    assert_ptr_equal(be, (struct gpt_backend *)&be);
    assert_int_equal(err.code, -GPT_E_NODEVICE);
    assert_true(strlen(err.msg) > 0);

    struct gpt_kv kv;
    assert_int_equal(gpt_kv_mem_new(&kv, &err), 0);
    struct gpt_comm_opts o = {.rank = 0, .world = 2, .prefix = "f/", .timeout_ms = 1000};
    struct gpt_comm *c = NULL;
    memset(&err, 0, sizeof(err));
    assert_int_equal(gpt_comm_new(GPT_COMM_NCCL, &o, &kv, 0, NULL, &c, &err), -GPT_E_NODEVICE);
    assert_null(c);
    assert_true(strlen(err.msg) > 0);
    gpt_kv_mem_free(&kv);
}

static void test_local(void **state)
{
    (void)state;
    struct gpt_comm *c = NULL;
    struct gpt_err err;
    assert_int_equal(gpt_comm_new(GPT_COMM_LOCAL, NULL, NULL, -1, NULL, &c, &err), 0);
    assert_non_null(c);
    assert_int_equal(c->world, 1);
    float v[2] = {3, 4};
    assert_int_equal(gpt_comm_allreduce(c, v, 2, GPT_REDUCE_SUM), 0);
    assert_true(v[0] == 3 && v[1] == 4);
    gpt_comm_free(c);
    c = NULL;
    struct gpt_comm_opts one = {.rank = 0, .world = 1};
    assert_int_equal(gpt_comm_new(GPT_COMM_AUTO, &one, NULL, -1, NULL, &c, &err), 0);
    assert_string_equal(c->ops->name, "local");
    gpt_comm_free(c);
    /* A local communicator cannot serve a world of two. */
    struct gpt_comm_opts two = {.rank = 0, .world = 2};
    c = NULL;
    assert_int_equal(gpt_comm_new(GPT_COMM_LOCAL, &two, NULL, -1, NULL, &c, &err), -EINVAL);
    assert_null(c);
    assert_string_equal(err.path, "distributed.backend");
}

struct rank_job {
    enum gpt_comm_kind kind;
    struct gpt_kv *kv;
    int rank;
    int rc;
    float sum;
    char name[16];
};

static void *rank_thread(void *arg)
{
    struct rank_job *j = arg;
    struct gpt_comm_opts o = {.rank = j->rank, .world = 2, .prefix = "ft/", .timeout_ms = 20000};
    struct gpt_comm *c = NULL;
    struct gpt_err err;
    j->rc = gpt_comm_new(j->kind, &o, j->kv, -1, NULL, &c, &err);
    if (j->rc < 0)
        return NULL;
    snprintf(j->name, sizeof(j->name), "%s", c->ops->name);
    float v = (float)(j->rank + 1);
    j->rc = gpt_comm_allreduce(c, &v, 1, GPT_REDUCE_SUM);
    j->sum = v;
    gpt_comm_free(c);
    return NULL;
}

/* AUTO without a CUDA backend is the TCP ring (shared memory on one host). */
static void test_tcp_world_of_two(void **state)
{
    (void)state;
    struct gpt_kv kv;
    struct gpt_err err;
    assert_int_equal(gpt_kv_mem_new(&kv, &err), 0);
    struct rank_job jobs[2] = {{.kind = GPT_COMM_AUTO, .kv = &kv, .rank = 0},
                               {.kind = GPT_COMM_TCP, .kv = &kv, .rank = 1}};
    pthread_t th[2];
    for (int r = 0; r < 2; r++)
        assert_int_equal(pthread_create(&th[r], NULL, rank_thread, &jobs[r]), 0);
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(jobs[r].rc, 0);
        assert_true(jobs[r].sum == 3.0f);
        assert_true(strcmp(jobs[r].name, "tcp") == 0 || strcmp(jobs[r].name, "shm") == 0);
    }
    gpt_kv_mem_free(&kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe),
        cmocka_unit_test(test_cpu_backend),
        cmocka_unit_test(test_gpu_refused_without_gpu),
        cmocka_unit_test(test_local),
        cmocka_unit_test(test_tcp_world_of_two),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
