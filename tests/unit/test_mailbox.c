/*
 * Unit tests of daemon/mailbox: records posted by many threads all reach
 * the loop, each thread's in order, however the wakeups coalesce; the
 * worker hooks post the right kinds; drain_now drains at once; messages
 * still queued at close are freed (ASan checks) and the closed callback
 * runs once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "mailbox.h"

#define THREADS    4
#define PER_THREAD 2000

struct sink {
    struct mailbox mb;
    int64_t next[THREADS]; /* the next step expected from each thread */
    int metrics, events, exits, drains;
    bool in_order;
    int closed;
};

static void sink_drain(void *ctx, struct mailbox_msg *list)
{
    struct sink *s = ctx;
    s->drains++;
    for (struct mailbox_msg *m = list; m; m = m->next) {
        if (m->kind == MAILBOX_METRIC) {
            int t = (int)(m->u.m.step / PER_THREAD);
            if (t < 0 || t >= THREADS || m->u.m.step != s->next[t])
                s->in_order = false;
            else
                s->next[t]++;
            s->metrics++;
        } else if (m->kind == MAILBOX_EVENT) {
            s->events++;
        } else {
            s->exits++;
        }
    }
    mailbox_free_list(list);
    if (s->exits == THREADS)
        uv_stop(s->mb.async.loop);
}

static void sink_closed(void *ctx)
{
    struct sink *s = ctx;
    s->closed++;
}

struct producer {
    struct sink *s;
    int t;
};

static void producer_run(void *arg)
{
    struct producer *p = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        struct gpt_metric m = {.step = (int64_t)p->t * PER_THREAD + i};
        mailbox_post_metric(&p->s->mb, &m);
        if (i % 500 == 0) {
            struct gpt_event e = {.step = i};
            snprintf(e.kind, sizeof(e.kind), "eval");
            mailbox_post_event(&p->s->mb, &e);
        }
    }
    mailbox_post_exit(&p->s->mb);
}

static void test_many_producers(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct sink s = {.in_order = true};
    for (int t = 0; t < THREADS; t++)
        s.next[t] = (int64_t)t * PER_THREAD;
    assert_int_equal(mailbox_init(&s.mb, &loop, sink_drain, &s), 0);
    uv_thread_t th[THREADS];
    struct producer p[THREADS];
    for (int t = 0; t < THREADS; t++) {
        p[t] = (struct producer){&s, t};
        assert_int_equal(uv_thread_create(&th[t], producer_run, &p[t]), 0);
    }
    uv_run(&loop, UV_RUN_DEFAULT); /* until every exit arrived */
    for (int t = 0; t < THREADS; t++)
        uv_thread_join(&th[t]);
    mailbox_drain_now(&s.mb); /* nothing can be left, but it must not hurt */
    assert_true(s.in_order);
    assert_int_equal(s.metrics, THREADS * PER_THREAD);
    assert_int_equal(s.events, THREADS * (PER_THREAD / 500));
    assert_int_equal(s.exits, THREADS);
    assert_true(s.drains >= 1);

    mailbox_close(&s.mb, sink_closed);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(s.closed, 1);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_drain_now_and_close(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct sink s = {.in_order = true};
    assert_int_equal(mailbox_init(&s.mb, &loop, sink_drain, &s), 0);
    struct gpt_metric m = {.step = 0};
    mailbox_post_metric(&s.mb, &m);
    m.step = 1;
    mailbox_post_metric(&s.mb, &m);
    /* Drained without running the loop, in order, in one call. */
    mailbox_drain_now(&s.mb);
    assert_int_equal(s.metrics, 2);
    assert_int_equal(s.drains, 1);
    assert_true(s.in_order);
    /* Nothing queued: no drain call. */
    mailbox_drain_now(&s.mb);
    assert_int_equal(s.drains, 1);

    /* Queued at close: freed by the mailbox, never drained. */
    mailbox_post_metric(&s.mb, &m);
    struct gpt_event e = {.step = 3};
    mailbox_post_event(&s.mb, &e);
    mailbox_post_exit(&s.mb);
    mailbox_close(&s.mb, sink_closed);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(s.closed, 1);
    assert_int_equal(s.metrics, 2);
    assert_int_equal(s.events, 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_producers),
        cmocka_unit_test(test_drain_now_and_close),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
