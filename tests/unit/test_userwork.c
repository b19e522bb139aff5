/*
 * Unit tests of daemon/base/userwork, the pool of work users ask for:
 * each user runs at most user_work_per_uid items at once while another
 * user's item takes a free thread; waiting items run oldest first; the
 * queue bounds refuse naming their key; a next step goes first and past
 * the bounds; cancelling an owner ends its waiting items and flags its
 * running one; the memory a user's running items take is bounded and
 * given back when they end; a stop ends everything waiting, flags what
 * runs and refuses new items, and the close waits for the running ones.
 * Items block on a gate the test opens, so every state is observed, not
 * raced.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "userwork.h"

struct job {
    struct userwork_item it;
    int id;
    bool released;   /* under gate_mu: the work may end */
    bool started;    /* under gate_mu */
    bool saw_cancel; /* the work ended because it was cancelled */
    int done_status;
    int done_calls;
    int order; /* when its done ran (1, 2, ...) */
};

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int done_seq;
static bool closed;

/* Holds until released or cancelled. */
static void job_work(struct userwork_item *it)
{
    struct job *j = it->data;
    pthread_mutex_lock(&gate_mu);
    j->started = true;
    pthread_cond_broadcast(&gate_cv);
    while (!j->released && !userwork_cancelled(it)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 2000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&gate_cv, &gate_mu, &ts);
    }
    j->saw_cancel = !j->released;
    pthread_mutex_unlock(&gate_mu);
}

static void job_done(struct userwork_item *it, int status)
{
    struct job *j = it->data;
    j->done_status = status;
    j->done_calls++;
    j->order = ++done_seq;
}

static void job_init(struct job *j, int id, uid_t uid, void *owner)
{
    memset(j, 0, sizeof(*j));
    j->id = id;
    j->it.work = job_work;
    j->it.done = job_done;
    j->it.data = j;
    j->it.uid = uid;
    j->it.owner = owner;
}

static bool job_started(struct job *j)
{
    pthread_mutex_lock(&gate_mu);
    bool s = j->started;
    pthread_mutex_unlock(&gate_mu);
    return s;
}

static void job_release(struct job *j)
{
    pthread_mutex_lock(&gate_mu);
    j->released = true;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

/* Runs the loop until cond(arg) holds (at most about 5 s). */
static void loop_until(uv_loop_t *loop, bool (*cond)(void *), void *arg)
{
    for (int i = 0; i < 5000 && !cond(arg); i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        if (!cond(arg))
            usleep(1000);
    }
    assert_true(cond(arg));
}

static bool is_done(void *arg)
{
    return ((struct job *)arg)->done_calls > 0;
}

static bool is_started(void *arg)
{
    return job_started(arg);
}

static bool is_closed(void *arg)
{
    (void)arg;
    return closed;
}

static void on_closed(void *ctx)
{
    (void)ctx;
    closed = true;
}

struct fixture {
    uv_loop_t loop;
    struct config cfg;
    struct userwork *uw;
};

static void fixture_start(struct fixture *f, int threads, int per_uid, int queue_max,
                          int queue_per_uid, int64_t max_memory)
{
    memset(f, 0, sizeof(*f));
    assert_int_equal(uv_loop_init(&f->loop), 0);
    config_defaults(&f->cfg);
    f->cfg.user_work_threads = threads;
    f->cfg.user_work_per_uid = per_uid;
    f->cfg.user_work_queue_max = queue_max;
    f->cfg.user_work_queue_per_uid = queue_per_uid;
    f->cfg.user_work_max_memory = max_memory;
    struct gpt_err err;
    assert_int_equal(userwork_new(&f->loop, &f->cfg, &f->uw, &err), 0);
    done_seq = 0;
    closed = false;
}

static void fixture_close(struct fixture *f)
{
    userwork_close(f->uw, on_closed, NULL);
    loop_until(&f->loop, is_closed, NULL);
    assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&f->loop), 0);
}

static int submit(struct fixture *f, struct job *j, struct userwork_wait *w)
{
    struct gpt_err err = {0};
    return userwork_submit(f->uw, &j->it, w, &err);
}

/* One user's items wait for its share while another user's run; the
 * waiting ones run oldest first. */
static void test_share(void **state)
{
    (void)state;
    struct fixture f;
    struct job a[3], b;
    struct userwork_wait w;
    fixture_start(&f, 2, 1, 8, 8, 0);
    for (int i = 0; i < 3; i++)
        job_init(&a[i], i, 1000, NULL);
    job_init(&b, 9, 2000, NULL);
    assert_int_equal(submit(&f, &a[0], &w), 0);
    assert_int_equal(submit(&f, &a[1], &w), 1);
    assert_int_equal(w.ahead, 0);
    assert_int_equal(w.running_mine, 1);
    assert_int_equal(w.per_uid, 1);
    assert_int_equal(w.threads, 2);
    assert_int_equal(submit(&f, &a[2], &w), 1);
    assert_int_equal(w.ahead, 1);
    /* The other user takes the free thread at once. */
    assert_int_equal(submit(&f, &b, &w), 0);
    loop_until(&f.loop, is_started, &b);
    int running, waiting;
    userwork_counts(f.uw, &running, &waiting);
    assert_int_equal(running, 2);
    assert_int_equal(waiting, 2);
    assert_false(job_started(&a[1]));
    job_release(&b);
    loop_until(&f.loop, is_done, &b);
    assert_false(job_started(&a[1])); /* a free thread, but the user is at its share */
    job_release(&a[0]);
    loop_until(&f.loop, is_started, &a[1]);
    assert_false(job_started(&a[2]));
    job_release(&a[1]);
    loop_until(&f.loop, is_started, &a[2]);
    job_release(&a[2]);
    loop_until(&f.loop, is_done, &a[2]);
    assert_true(a[0].order < a[1].order && a[1].order < a[2].order);
    for (int i = 0; i < 3; i++)
        assert_int_equal(a[i].done_status, 0);
    fixture_close(&f);
}

/* The queue bounds refuse naming their key; a next step is neither
 * refused nor put behind the others. */
static void test_bounds_and_next(void **state)
{
    (void)state;
    struct fixture f;
    struct job a[4], b[2], next;
    struct userwork_wait w;
    struct gpt_err err = {0};
    fixture_start(&f, 1, 1, 3, 2, 0);
    for (int i = 0; i < 4; i++)
        job_init(&a[i], i, 1000, NULL);
    job_init(&b[0], 10, 2000, NULL);
    job_init(&b[1], 11, 2000, NULL);
    job_init(&next, 20, 1000, NULL);
    assert_int_equal(submit(&f, &a[0], &w), 0);
    assert_int_equal(submit(&f, &a[1], &w), 1);
    assert_int_equal(submit(&f, &a[2], &w), 1);
    assert_int_equal(userwork_submit(f.uw, &a[3].it, &w, &err), -GPT_E_LIMIT);
    assert_non_null(strstr(err.msg, "user_work_queue_per_uid"));
    assert_int_equal(submit(&f, &b[0], &w), 1); /* the one thread is busy */
    assert_int_equal(userwork_submit(f.uw, &b[1].it, &w, &err), -GPT_E_LIMIT);
    assert_non_null(strstr(err.msg, "user_work_queue_max"));
    /* a[0]'s next step: ahead of a[1], a[2] and b[0], past the bounds. */
    loop_until(&f.loop, is_started, &a[0]);
    assert_int_equal(userwork_submit_next(f.uw, &next.it, &err), 1);
    job_release(&a[0]);
    loop_until(&f.loop, is_started, &next);
    assert_false(job_started(&a[1]));
    job_release(&next);
    job_release(&a[1]);
    job_release(&a[2]);
    job_release(&b[0]);
    loop_until(&f.loop, is_done, &b[0]);
    loop_until(&f.loop, is_done, &a[2]);
    assert_true(next.order < a[1].order);
    fixture_close(&f);
}

/* An owner's going ends its waiting items (never run) and flags its
 * running one; another owner's items go on. */
static void test_cancel_owner(void **state)
{
    (void)state;
    struct fixture f;
    int me, other;
    struct job run, wait1, keep;
    struct userwork_wait w;
    fixture_start(&f, 1, 4, 8, 8, 0);
    job_init(&run, 1, 1000, &me);
    job_init(&wait1, 2, 1000, &me);
    job_init(&keep, 3, 1000, &other);
    assert_int_equal(submit(&f, &run, &w), 0);
    assert_int_equal(submit(&f, &wait1, &w), 1);
    assert_int_equal(submit(&f, &keep, &w), 1);
    loop_until(&f.loop, is_started, &run);
    userwork_cancel_owner(f.uw, &me);
    assert_int_equal(wait1.done_calls, 1); /* at once, on the loop */
    assert_int_equal(wait1.done_status, -ECANCELED);
    assert_false(userwork_stopped(&wait1.it));
    assert_int_equal(atomic_load(&wait1.it.cancel), USERWORK_CANCEL_CLIENT);
    loop_until(&f.loop, is_done, &run);
    assert_true(run.saw_cancel);
    assert_int_equal(run.done_status, 0);
    loop_until(&f.loop, is_started, &keep);
    assert_false(userwork_cancelled(&keep.it));
    job_release(&keep);
    loop_until(&f.loop, is_done, &keep);
    assert_false(keep.saw_cancel);
    assert_false(job_started(&wait1));
    fixture_close(&f);
}

/* Memory taken counts per user while its items run. */
static void test_memory(void **state)
{
    (void)state;
    struct fixture f;
    struct job a1, a2, b1;
    struct userwork_wait w;
    struct gpt_err err = {0};
    fixture_start(&f, 3, 3, 8, 8, 100);
    job_init(&a1, 1, 1000, NULL);
    job_init(&a2, 2, 1000, NULL);
    job_init(&b1, 3, 2000, NULL);
    assert_int_equal(submit(&f, &a1, &w), 0);
    assert_int_equal(submit(&f, &a2, &w), 0);
    assert_int_equal(submit(&f, &b1, &w), 0);
    loop_until(&f.loop, is_started, &a2);
    /* userwork_mem_take is called from work; any thread may, the pool locks. */
    assert_int_equal(userwork_mem_take(&a1.it, 60, "a1", &err), 0);
    assert_int_equal(userwork_mem_take(&a2.it, 60, "a2", &err), -GPT_E_LIMIT);
    assert_non_null(strstr(err.msg, "user_work_max_memory"));
    assert_non_null(strstr(err.msg, "a2 needs about"));
    assert_int_equal(userwork_mem_take(&b1.it, 60, "b1", &err), 0); /* another user's bound */
    assert_int_equal(userwork_mem_take(&b1.it, 101, "b1", &err), -GPT_E_LIMIT);
    job_release(&a1);
    loop_until(&f.loop, is_done, &a1);
    assert_int_equal(userwork_mem_take(&a2.it, 60, "a2", &err), 0); /* given back */
    job_release(&a2);
    job_release(&b1);
    loop_until(&f.loop, is_done, &a2);
    loop_until(&f.loop, is_done, &b1);
    fixture_close(&f);
}

/* A stop ends the waiting items, flags the running ones and refuses new
 * ones; the close waits for what runs, then joins the threads. */
static void test_stop(void **state)
{
    (void)state;
    struct fixture f;
    struct job run, waiting, late;
    struct userwork_wait w;
    struct gpt_err err = {0};
    fixture_start(&f, 1, 1, 8, 8, 0);
    job_init(&run, 1, 1000, NULL);
    job_init(&waiting, 2, 1000, NULL);
    job_init(&late, 3, 2000, NULL);
    assert_int_equal(submit(&f, &run, &w), 0);
    assert_int_equal(submit(&f, &waiting, &w), 1);
    loop_until(&f.loop, is_started, &run);
    userwork_stop(f.uw);
    assert_int_equal(waiting.done_status, -ECANCELED);
    assert_true(userwork_stopped(&waiting.it));
    assert_int_equal(userwork_submit(f.uw, &late.it, &w, &err), -EAGAIN);
    assert_non_null(strstr(err.msg, "stopping"));
    userwork_close(f.uw, on_closed, NULL);
    loop_until(&f.loop, is_closed, NULL);
    assert_int_equal(run.done_calls, 1);
    assert_true(run.saw_cancel);
    assert_true(userwork_stopped(&run.it));
    assert_int_equal(late.done_calls, 0);
    assert_int_equal(uv_run(&f.loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&f.loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_share),        cmocka_unit_test(test_bounds_and_next),
        cmocka_unit_test(test_cancel_owner), cmocka_unit_test(test_memory),
        cmocka_unit_test(test_stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
