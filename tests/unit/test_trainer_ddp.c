/*
 * test_trainer_ddp: the bucket / ready-mark ordering of the trainer's
 * data-parallel overlap (engine/trainer_ddp.c) against a recording fake
 * communicator, no GPU: every span the model reports while armed gets a
 * ready mark on the reporting thread BEFORE its all-reduce, the all-reduce
 * waits on exactly that mark's slot, spans are reduced once each and in
 * order, a slot is never marked again while its collective has not run
 * (the hook waits when every slot is in flight), unarmed spans are not
 * reduced, the first error is sticky, and a communicator without the
 * optional slots (local) still reduces through plain allreduce. The fake's
 * all-reduces are only enqueued (their results land at wait_after, as on
 * a device): trainer_ddp_wait waits for them once per step, on the worker
 * thread, after the last was issued, and returns wait_after's error. Also
 * the batch plan of an uneven global batch (trainer_batch_*), and the
 * gradient all-reduce's wire dtype (distributed.grad_reduce) reaching every
 * bucket's collective.
 *
 * The fake runs its collectives on the trainer's communication thread; it
 * records into a table under its own mutex and the main thread asserts
 * after trainer_ddp_wait.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "comm.h"
#include "model.h"
#include "trainer_ddp.h"

#define SPANS_MAX 400

enum { SLOT_FREE, SLOT_MARKED };

struct fake {
    struct gpt_comm base; /* must stay first */
    pthread_mutex_t mu;
    pthread_t marker; /* the thread that must mark (the "worker") */
    int slot_state[GPT_COMM_READY_SLOTS];
    size_t marks, reduces;
    size_t red_off[SPANS_MAX], red_n[SPANS_MAX];
    unsigned red_slot[SPANS_MAX];
    int violations; /* protocol breaks seen by the fake */
    size_t max_in_flight;
    int slow_us;    /* each collective takes this long */
    size_t fail_at; /* the reduce with this index fails (0 = never) */
    size_t applied; /* reduces whose results wait_after has made visible */
    size_t waits;   /* wait_after calls */
    int wait_fail;  /* wait_after's result */
    float *grads_base;
    enum gpt_comm_dtype want_dtype; /* every reduce must carry this */
};

static int fake_mark(struct gpt_comm *c, unsigned slot)
{
    struct fake *f = (struct fake *)c;
    pthread_mutex_lock(&f->mu);
    if (!pthread_equal(pthread_self(), f->marker))
        f->violations++; /* must come from the thread enqueueing the backward */
    if (slot != f->marks % GPT_COMM_READY_SLOTS || f->slot_state[slot] != SLOT_FREE)
        f->violations++; /* out of order, or a pending mark overwritten */
    f->slot_state[slot] = SLOT_MARKED;
    f->marks++;
    size_t in_flight = f->marks - f->reduces;
    if (in_flight > f->max_in_flight)
        f->max_in_flight = in_flight;
    pthread_mutex_unlock(&f->mu);
    return 0;
}

static int fake_after(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op,
                      unsigned slot, enum gpt_comm_dtype dtype)
{
    struct fake *f = (struct fake *)c;
    if (f->slow_us) {
        struct timespec ts = {0, (long)f->slow_us * 1000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&f->mu);
    size_t k = f->reduces;
    if (op != GPT_REDUCE_AVG || pthread_equal(pthread_self(), f->marker) || dtype != f->want_dtype)
        f->violations++;
    /* The k-th collective waits on the k-th mark, which must exist. */
    if (k >= f->marks || slot != k % GPT_COMM_READY_SLOTS || f->slot_state[slot] != SLOT_MARKED)
        f->violations++;
    f->slot_state[slot] = SLOT_FREE;
    if (k < SPANS_MAX) {
        f->red_off[k] = (size_t)(buf - f->grads_base);
        f->red_n[k] = n;
        f->red_slot[k] = slot;
    }
    f->reduces++;
    pthread_mutex_unlock(&f->mu);
    return f->fail_at && k + 1 == f->fail_at ? -EPIPE : 0;
}

/* Completes every enqueued reduce: only now are the results visible
 * (each element reduced exactly once: + 1). */
static int fake_wait(struct gpt_comm *c)
{
    struct fake *f = (struct fake *)c;
    pthread_mutex_lock(&f->mu);
    if (!pthread_equal(pthread_self(), f->marker))
        f->violations++; /* the worker's, once the comm thread is done */
    for (; f->applied < f->reduces && f->applied < SPANS_MAX; f->applied++)
        for (size_t i = 0; i < f->red_n[f->applied]; i++)
            f->grads_base[f->red_off[f->applied] + i] += 1.0f;
    f->waits++;
    pthread_mutex_unlock(&f->mu);
    return f->wait_fail;
}

static int fake_plain(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op)
{
    (void)buf;
    (void)n;
    (void)op;
    ((struct fake *)c)->violations++; /* the overlap path must not use it */
    return 0;
}

static void fake_free(struct gpt_comm *c)
{
    (void)c;
}

static const struct gpt_comm_ops fake_ops = {
    .name = "fake",
    .allreduce = fake_plain,
    .free = fake_free,
    .mark_ready = fake_mark,
    .allreduce_after = fake_after,
    .wait_after = fake_wait,
};

struct rig {
    struct fake f;
    struct gpt_model *m;
    struct trainer_ddp d;
};

static void rig_init_dtype(struct rig *r, size_t n_grads, enum gpt_comm_dtype dtype)
{
    memset(r, 0, sizeof(*r));
    r->f.base.ops = &fake_ops;
    r->f.base.world = 2;
    pthread_mutex_init(&r->f.mu, NULL);
    r->f.marker = pthread_self();
    r->m = calloc(1, sizeof(*r->m));
    assert_non_null(r->m);
    r->m->grads = calloc(n_grads, sizeof(float));
    assert_non_null(r->m->grads);
    r->f.grads_base = r->m->grads;
    r->f.want_dtype = dtype;
    assert_int_equal(trainer_ddp_start(&r->d, &r->f.base, dtype, r->m), 0);
    assert_true(r->m->grads_ready != NULL);
}

static void rig_init(struct rig *r, size_t n_grads)
{
    rig_init_dtype(r, n_grads, GPT_COMM_FP32);
}

static void rig_done(struct rig *r)
{
    trainer_ddp_stop(&r->d);
    free(r->m->grads);
    free(r->m);
    pthread_mutex_destroy(&r->f.mu);
}

/* Reports `n` spans of `len` floats, back to front like the backward. */
static void report_spans(struct rig *r, size_t n, size_t len)
{
    for (size_t i = 0; i < n; i++)
        r->m->grads_ready(r->m->grads_ready_ctx, (n - 1 - i) * len, len);
}

static void test_slot_math(void **state)
{
    (void)state;
    assert_int_equal(trainer_ddp_slot(0), 0);
    assert_int_equal(trainer_ddp_slot(GPT_COMM_READY_SLOTS - 1), GPT_COMM_READY_SLOTS - 1);
    assert_int_equal(trainer_ddp_slot(GPT_COMM_READY_SLOTS), 0);
    assert_int_equal(trainer_ddp_slot(3 * GPT_COMM_READY_SLOTS + 5), 5);
    assert_true(trainer_ddp_in_flight_max() >= 1);
    assert_true(trainer_ddp_in_flight_max() <= GPT_COMM_READY_SLOTS);
    assert_true(trainer_ddp_in_flight_max() <= TRAINER_DDP_QUEUE_MAX);
}

/* A GPT-2-like step: 14 spans, each marked then reduced, in order. */
static void test_order(void **state)
{
    (void)state;
    struct rig r;
    const size_t spans = 14, len = 1000;
    rig_init(&r, spans * len);
    trainer_ddp_arm(&r.d);
    report_spans(&r, spans, len);
    assert_int_equal(trainer_ddp_wait(&r.d), 0);
    assert_int_equal(r.f.violations, 0);
    assert_int_equal(r.f.marks, spans);
    assert_int_equal(r.f.reduces, spans);
    assert_int_equal(r.f.waits, 1); /* once, after the last was issued */
    for (size_t k = 0; k < spans; k++) {
        assert_int_equal(r.f.red_off[k], (spans - 1 - k) * len); /* report order */
        assert_int_equal(r.f.red_n[k], len);
        assert_int_equal(r.f.red_slot[k], k % GPT_COMM_READY_SLOTS);
    }
    for (size_t i = 0; i < spans * len; i++)
        assert_true(r.m->grads[i] == 1.0f);
    /* Not armed: nothing marked or reduced. */
    report_spans(&r, 3, len);
    assert_int_equal(r.f.marks, spans);
    /* A second step continues the slot sequence. */
    trainer_ddp_arm(&r.d);
    report_spans(&r, 2, len);
    assert_int_equal(trainer_ddp_wait(&r.d), 0);
    assert_int_equal(r.f.reduces, spans + 2);
    assert_int_equal(r.f.waits, 2);
    assert_int_equal(r.f.red_slot[spans], spans % GPT_COMM_READY_SLOTS);
    assert_int_equal(r.f.violations, 0);
    rig_done(&r);
}

/* More spans than slots with a slow communicator: the hook must wait
 * rather than overwrite a pending mark; the slots wrap around. */
static void test_wraparound(void **state)
{
    (void)state;
    struct rig r;
    const size_t spans = 3 * GPT_COMM_READY_SLOTS + 7, len = 16;
    rig_init(&r, spans * len);
    r.f.slow_us = 200;
    trainer_ddp_arm(&r.d);
    report_spans(&r, spans, len);
    assert_int_equal(trainer_ddp_wait(&r.d), 0);
    assert_int_equal(r.f.violations, 0);
    assert_int_equal(r.f.reduces, spans);
    assert_true(r.f.max_in_flight <= trainer_ddp_in_flight_max());
    assert_true(r.f.max_in_flight > 1); /* the overlap happened */
    for (size_t k = 0; k < spans; k++)
        assert_int_equal(r.f.red_slot[k], k % GPT_COMM_READY_SLOTS);
    for (size_t i = 0; i < spans * len; i++)
        assert_true(r.m->grads[i] == 1.0f);
    rig_done(&r);
}

/* The first error is returned by wait; later spans are not reduced. */
static void test_error_sticky(void **state)
{
    (void)state;
    struct rig r;
    const size_t spans = 10, len = 8;
    rig_init(&r, spans * len);
    r.f.fail_at = 4;
    trainer_ddp_arm(&r.d);
    report_spans(&r, spans, len);
    assert_int_equal(trainer_ddp_wait(&r.d), -EPIPE);
    assert_int_equal(r.f.reduces, 4);
    assert_int_equal(r.f.violations, 0);
    rig_done(&r);
}

/* An error of the collectives that only surfaces when they are waited
 * for (a timeout, a peer lost mid-reduce) is the step's error. */
static void test_wait_error(void **state)
{
    (void)state;
    struct rig r;
    const size_t spans = 6, len = 8;
    rig_init(&r, spans * len);
    r.f.wait_fail = -ETIMEDOUT;
    trainer_ddp_arm(&r.d);
    report_spans(&r, spans, len);
    assert_int_equal(trainer_ddp_wait(&r.d), -ETIMEDOUT);
    assert_int_equal(r.f.reduces, spans);
    assert_int_equal(r.f.waits, 1);
    assert_int_equal(r.f.violations, 0);
    rig_done(&r);
}

/* Without the optional slots (local communicator): plain allreduce. */
static void test_fallback_local(void **state)
{
    (void)state;
    struct gpt_comm *c = NULL;
    struct gpt_err err;
    assert_int_equal(gpt_comm_local_new(&c, &err), 0);
    assert_int_equal(gpt_comm_mark_ready(c, 3), 0);
    float x[5] = {1, 2, 3, 4, 5};
    assert_int_equal(gpt_comm_allreduce_after(c, x, 5, GPT_REDUCE_AVG, 3, GPT_COMM_FP32), 0);
    assert_true(x[4] == 5.0f);
    struct gpt_model *m = calloc(1, sizeof(*m));
    assert_non_null(m);
    m->grads = x;
    struct trainer_ddp d;
    memset(&d, 0, sizeof(d));
    assert_int_equal(trainer_ddp_start(&d, c, GPT_COMM_BF16, m), 0);
    trainer_ddp_arm(&d);
    m->grads_ready(m->grads_ready_ctx, 0, 5);
    assert_int_equal(trainer_ddp_wait(&d), 0);
    trainer_ddp_stop(&d);
    free(m);
    gpt_comm_free(c);
}

/* distributed.grad_reduce: auto is bf16 on the CUDA backend only, and the
 * dtype chosen reaches every bucket's collective. */
static void test_grad_reduce_dtype(void **state)
{
    (void)state;
    assert_int_equal(trainer_ddp_dtype(GPT_GRAD_REDUCE_AUTO, "cuda"), GPT_COMM_BF16);
    assert_int_equal(trainer_ddp_dtype(GPT_GRAD_REDUCE_AUTO, "cpu"), GPT_COMM_FP32);
    assert_int_equal(trainer_ddp_dtype(GPT_GRAD_REDUCE_FP32, "cuda"), GPT_COMM_FP32);
    assert_int_equal(trainer_ddp_dtype(GPT_GRAD_REDUCE_BF16, "cpu"), GPT_COMM_BF16);
    struct rig r;
    rig_init_dtype(&r, 64, GPT_COMM_BF16);
    trainer_ddp_arm(&r.d);
    report_spans(&r, 4, 16);
    assert_int_equal(trainer_ddp_wait(&r.d), 0);
    assert_int_equal(r.f.reduces, 4);
    assert_int_equal(r.f.violations, 0);
    rig_done(&r);
}

/* The batch plan: for every global batch, micro_batch and world, the
 * ranks' micro-batches tile the global batch exactly once in order, every
 * rank runs the same number of micro-batches, none is larger than
 * micro_batch, one is empty only with micro_batch 1, the loss scales sum
 * (after the world average) to one, and a world that divides evenly gets
 * 1/accum bit for bit as before. A global batch below the world is
 * refused. */
static void test_batch_plan(void **state)
{
    (void)state;
    struct trainer_batch b;
    for (int global = 1; global <= 40; global++)
        for (int micro = 1; micro <= 6; micro++)
            for (int world = 1; world <= global && world <= 9; world++) {
                uint64_t next = 0;
                int accum = -1;
                double weight = 0;
                for (int rank = 0; rank < world; rank++) {
                    assert_int_equal(trainer_batch_plan(global, micro, world, rank, &b), 0);
                    assert_true(b.count >= 1);
                    if (accum < 0)
                        accum = b.accum;
                    assert_int_equal(b.accum, accum);
                    for (int k = 0; k < b.accum; k++) {
                        uint64_t first;
                        size_t n = trainer_batch_micro(&b, k, &first);
                        assert_true(n <= (size_t)micro);
                        assert_true(n > 0 || micro == 1);
                        assert_int_equal(first, next);
                        next += n;
                        float scale = trainer_batch_scale(n, world, global);
                        weight += (double)scale / world;
                        if (global % (micro * world) == 0) {
                            assert_int_equal(n, (size_t)micro);
                            assert_true(scale == 1.0f / (float)(global / (micro * world)));
                        }
                    }
                }
                assert_int_equal(next, (uint64_t)global);
                assert_true(fabs(weight - 1.0) < 1e-6);
            }
    assert_int_equal(trainer_batch_plan(3, 4, 4, 0, &b), -EINVAL);
    assert_int_equal(trainer_batch_plan(12, 4, 3, 3, &b), -EINVAL);
    /* global 7, micro 4: world 1 runs 4 + 3; world 5 runs 2, 2, 1, 1, 1 */
    uint64_t f;
    assert_int_equal(trainer_batch_plan(7, 4, 1, 0, &b), 0);
    assert_int_equal(b.accum, 2);
    assert_int_equal(trainer_batch_micro(&b, 0, &f), 4);
    assert_int_equal(trainer_batch_micro(&b, 1, &f), 3);
    assert_int_equal(f, 4);
    assert_int_equal(trainer_batch_plan(7, 4, 5, 4, &b), 0);
    assert_int_equal(b.accum, 1);
    assert_int_equal(trainer_batch_micro(&b, 0, &f), 1);
    assert_int_equal(f, 6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slot_math),  cmocka_unit_test(test_order),
        cmocka_unit_test(test_wraparound), cmocka_unit_test(test_error_sticky),
        cmocka_unit_test(test_wait_error), cmocka_unit_test(test_fallback_local),
        cmocka_unit_test(test_batch_plan), cmocka_unit_test(test_grad_reduce_dtype),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
