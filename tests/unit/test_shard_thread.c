/*
 * test_shard_thread: under full sharding the shard's communication thread
 * runs collectives only; every backend call comes from the worker thread
 * that owns the backend (issue 34: the shard thread used to copy, add and
 * synchronise on the CUDA backend while the worker ran the model, and the
 * backend's per-op state is not thread-safe).
 *
 * A world of two ranks as threads (TCP or shared-memory communicator over
 * an in-memory store, as `gptd run --workers 2`), each training a tiny
 * model with distributed.sharding full on its own CPU backend whose
 * copy, memzero, sync and residual_forward slots are wrapped: a call from
 * any thread but the rank's is counted as a violation. The run must
 * finish, use the wrapped slots, and count no violation; then the same
 * with one gathered-unit buffer (distributed.shard_buffers: 1) and with
 * the count left to the rule (0, auto); ranks given different counts must
 * refuse to train together.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "comm.h"
#include "jobspec.h"
#include "trainer.h"
#include "unit/tiny_job.h"

/* The CPU backend's slots, and the checking copy every rank's backend
 * points at. */
static struct gpt_backend_ops orig_ops, check_ops;

/* Which thread owns which backend (two ranks). */
static struct {
    struct gpt_backend *be;
    pthread_t owner;
} owners[2];
static atomic_int violations, calls;

static void check_owner(struct gpt_backend *be)
{
    atomic_fetch_add(&calls, 1);
    for (int i = 0; i < 2; i++)
        if (owners[i].be == be && !pthread_equal(owners[i].owner, pthread_self()))
            atomic_fetch_add(&violations, 1);
}

static void check_copy(struct gpt_backend *be, void *dst, const void *src, size_t bytes)
{
    check_owner(be);
    orig_ops.copy(be, dst, src, bytes);
}

static void check_memzero(struct gpt_backend *be, void *ptr, size_t bytes)
{
    check_owner(be);
    orig_ops.memzero(be, ptr, bytes);
}

static int check_sync(struct gpt_backend *be)
{
    check_owner(be);
    return orig_ops.sync ? orig_ops.sync(be) : 0;
}

static void check_residual(struct gpt_backend *be, float *out, const float *a, const float *b,
                           size_t n)
{
    check_owner(be);
    orig_ops.residual_forward(be, out, a, b, n);
}

struct rank {
    int rank;
    struct gpt_kv *kv;
    const struct gpt_job *job;
    int rc;
    char msg[sizeof(((struct gpt_err *)0)->msg)];
};

static void *rank_main(void *arg)
{
    struct rank *r = arg;
    struct gpt_err err;
    struct gpt_backend *be = NULL;
    struct gpt_comm *c = NULL;
    struct gpt_comm_opts o = {.rank = r->rank, .world = 2, .prefix = "st/", .timeout_ms = 60000};
    if ((r->rc = gpt_backend_cpu_new(1, &be, &err)) < 0)
        return NULL;
    be->ops = &check_ops;
    owners[r->rank].be = be;
    owners[r->rank].owner = pthread_self();
    if ((r->rc = gpt_comm_tcp_new(&o, r->kv, &c, &err)) == 0) {
        struct gpt_trainer_opts to = {.job = r->job, .comm = c, .backend = be};
        struct gpt_train_result res;
        r->rc = gpt_train(&to, &res, &err);
        if (r->rc != 0) {
            print_message("rank %d: %s\n", r->rank, err.msg);
            snprintf(r->msg, sizeof(r->msg), "%s", err.msg);
        }
    }
    gpt_comm_free(c);
    be->ops = &orig_ops;
    gpt_backend_free(be);
    return NULL;
}

/* Trains the world, rank r with distributed.shard_buffers = bufs[r], into
 * r[]; checks that no backend call came from another thread. */
static void run_world_into(const int bufs[2], struct rank r[2])
{
    struct gpt_job job;
    tiny_job(&job, 32, 3);
    job.model.block_size = 6;
    job.trainer.global_batch = 8;
    job.distributed.sharding = GPT_SHARD_FULL;
    assert_int_equal(tiny_job_check(&job), 0);
    struct gpt_err err;
    struct gpt_kv kv;
    assert_int_equal(gpt_kv_mem_new(&kv, &err), 0);
    atomic_store(&violations, 0);
    atomic_store(&calls, 0);
    struct gpt_job jobs[2] = {job, job};
    for (int i = 0; i < 2; i++) {
        jobs[i].distributed.shard_buffers = bufs[i];
        r[i] = (struct rank){.rank = i, .kv = &kv, .job = &jobs[i]};
    }
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, rank_main, &r[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    gpt_kv_mem_free(&kv);
    print_message("backend calls %d, from another thread %d\n", atomic_load(&calls),
                  atomic_load(&violations));
    assert_int_equal(atomic_load(&violations), 0);
}

static void run_world(int bufs)
{
    struct rank r[2];
    run_world_into((const int[2]){bufs, bufs}, r);
    for (int i = 0; i < 2; i++)
        assert_int_equal(r[i].rc, 0);
    assert_true(atomic_load(&calls) > 0);
}

static void setup_ops(void)
{
    struct gpt_backend *be = NULL;
    struct gpt_err err;
    assert_int_equal(gpt_backend_cpu_new(1, &be, &err), 0);
    orig_ops = *be->ops;
    gpt_backend_free(be);
    check_ops = orig_ops;
    check_ops.copy = check_copy;
    check_ops.memzero = check_memzero;
    check_ops.sync = check_sync;
    check_ops.residual_forward = check_residual;
}

static void test_two_buffers(void **state)
{
    (void)state;
    setup_ops();
    run_world(2);
}

static void test_one_buffer(void **state)
{
    (void)state;
    setup_ops();
    run_world(1);
}

/* distributed.shard_buffers auto: the rule's count, the same on both. */
static void test_auto_buffers(void **state)
{
    (void)state;
    setup_ops();
    run_world(0);
}

/* The spec's count is the one used: ranks given different counts issue
 * their collectives in different orders, so the run must refuse to start
 * and say which key to set alike (a count the trainer ignored would let
 * both ranks pick the same and train). */
static void test_spec_buffers_disagree(void **state)
{
    (void)state;
    setup_ops();
    struct rank r[2];
    run_world_into((const int[2]){1, 2}, r);
    assert_int_not_equal(r[0].rc, 0);
    assert_int_not_equal(r[1].rc, 0);
    assert_non_null(strstr(r[1].msg, "distributed.shard_buffers"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_buffers),
        cmocka_unit_test(test_one_buffer),
        cmocka_unit_test(test_auto_buffers),
        cmocka_unit_test(test_spec_buffers_disagree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
