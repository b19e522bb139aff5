/*
 * test_workers: workers_abort against the end of a job's worker threads
 * (issue 36, case 13). The daemon's loop aborts a job's workers when a
 * member loses its store connection, which can be the very moment the
 * workers finish and free their communicators; an abort that still uses a
 * communicator a worker freed is a use after free (and comm_tcp_abort then
 * writes to a descriptor number that may belong to someone else by now).
 *
 * Each round starts a world of two workers (a TCP ring over loopback, or
 * shared memory), waits until training started (both communicators exist),
 * then aborts from this thread and a second one in tight loops until the
 * last worker has finished. Whatever the interleaving, the job ends
 * aborted (or stopped, when the stop request won the race) and nothing is reported; under
 * AddressSanitizer, a load-then-use of the communicator shows as a
 * heap-use-after-free within a few rounds.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <pthread.h>

#include "jobspec.h"
#include "trainer.h"
#include "unit/tiny_job.h"
#include "workers.h"

#define ROUNDS 200

struct round {
    atomic_bool started; /* rank 0's "start" event went out */
    atomic_bool ended;   /* on_exit ran: every worker returned */
    struct workers *ws;
};

static void on_event(void *ctx, const struct gpt_event *e)
{
    struct round *r = ctx;
    if (strcmp(e->kind, "start") == 0)
        atomic_store(&r->started, true);
}

static void on_exit_cb(void *ctx)
{
    atomic_store(&((struct round *)ctx)->ended, true);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The second aborter: the same loop as the test thread's. */
static void *hammer_main(void *arg)
{
    struct round *r = arg;
    while (!atomic_load(&r->ended))
        workers_abort(r->ws);
    return NULL;
}

static void job_make(struct gpt_job *job)
{
    tiny_job(job, 16, 1000000);
    job->model.n_layer = 1;
    job->model.block_size = 8;
    job->trainer.micro_batch = 1;
    job->trainer.log_every = 1000000;
    assert_int_equal(tiny_job_check(job), 0);
}

static void test_abort_races_worker_end(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_workers.XXXXXX";
    assert_non_null(mkdtemp(dir));
    struct gpt_job job;
    job_make(&job);
    int cancelled = 0;
    for (int i = 0; i < ROUNDS; i++) {
        struct round r = {0};
        struct workers_opts o = {.job = &job,
                                 .n_workers = 2,
                                 .snapshot_dir = dir,
                                 .comm_timeout_ms = 30000,
                                 .ctx = &r,
                                 .on_event = on_event,
                                 .on_exit = on_exit_cb};
        struct gpt_err err;
        int rc = workers_start(&o, &r.ws, &err);
        if (rc < 0)
            print_message("round %d: start: %s\n", i, err.msg);
        assert_int_equal(rc, 0);
        double deadline = now_s() + 60;
        while (!atomic_load(&r.started) && !atomic_load(&r.ended)) {
            assert_true(now_s() < deadline);
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, hammer_main, &r), 0);
        while (!atomic_load(&r.ended))
            workers_abort(r.ws);
        assert_int_equal(pthread_join(th, NULL), 0);
        struct gpt_train_result res;
        rc = workers_join(r.ws, &res, &err);
        /* A rank whose ring the other's abort closed sees the peer lost. */
        bool aborted = rc == -ECANCELED || rc == -EPIPE || rc == -ECONNRESET;
        if (!aborted && rc != GPT_TRAIN_STOPPED)
            print_message("round %d: %d: %s\n", i, rc, err.msg);
        assert_true(aborted || rc == GPT_TRAIN_STOPPED);
        cancelled += aborted;
        workers_free(r.ws);
    }
    print_message("%d rounds, %d ended aborted\n", ROUNDS, cancelled);
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_abort_races_worker_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
