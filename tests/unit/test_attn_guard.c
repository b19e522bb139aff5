/*
 * test_attn_guard: the run-time guard of the first attention backward
 * (backend.h's attention_guard and attention_fallback, backend_guard.c),
 * without a GPU. A copy of the CPU backend's vtable plays a backend with
 * attention variants: its attention_backward is the CPU op with a
 * planted fault (dq scaled), its reference (attention_guard) the plain
 * CPU op, and attention_fallback takes the fault out. Checks:
 *  - a planted wrong backward is caught on the first call: the note says
 *    MISMATCH, the fallback runs once, and that call's dqkv already holds
 *    the reference's gradient, bit for bit, in every batch and head;
 *  - the guard runs once: later backwards are not recomputed;
 *  - a variant within the bound (another summation order: 1e-6 of the
 *    largest value) passes and keeps its own gradient;
 *  - while the backend answers that the reference is in use (-ENOTSUP
 *    to the probe) nothing is compared, and the guard still runs at the
 *    first backward that has a variant;
 *  - the comparison takes dq, dk and dv each against its own largest
 *    value, and fails on a value that is not finite;
 *  - gpt_train on the faulty backend emits an "attention_fallback" event
 *    and trains to the plain CPU run's losses, bit for bit;
 *  - the start event names the attention variants a backend says it was
 *    made with (attn_variants: the CUDA backend's trainer.attention_*),
 *    and says nothing of attention for the CPU backend, which has none.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "backend_guard.h"
#include "jobspec.h"
#include "trainer.h"
#include "unit/tiny_job.h"

/* ---- the fake backend ---- */

struct fake {
    struct gpt_backend_ops ops;
    const struct gpt_backend_ops *cpu;
    float fault;    /* dq's factor in the variant; 1: none */
    int reference;  /* the variant in use is the reference: the probe says -ENOTSUP */
    int guard_runs; /* attention_guard calls with a ref buffer */
    int fallbacks;  /* attention_fallback calls */
    int backwards;  /* attention_backward calls */
};

static struct fake fk;

static void fake_backward(struct gpt_backend *be, float *dqkv, float *scratch, const float *dout,
                          const float *out, const float *qkv, const float *att, size_t B, size_t T,
                          size_t C, size_t NH)
{
    fk.backwards++;
    fk.cpu->attention_backward(be, dqkv, scratch, dout, out, qkv, att, B, T, C, NH);
    if (fk.fault != 1.0f)
        for (size_t r = 0; r < B * T; r++)
            for (size_t j = 0; j < C; j++)
                dqkv[r * 3 * C + j] *= fk.fault; /* every head's dq */
}

static int fake_guard(struct gpt_backend *be, float *ref, float *scratch, const float *dout,
                      const float *out, const float *qkv, const float *att, size_t B, size_t T,
                      size_t C, size_t NH)
{
    if (fk.reference)
        return -ENOTSUP;
    if (!ref)
        return 0;
    fk.guard_runs++;
    float *all = calloc(B * T * 3 * C, sizeof(float));
    assert_non_null(all);
    fk.cpu->attention_backward(be, all, scratch, dout, out, qkv, att, B, T, C, NH);
    size_t hs = C / NH;
    for (size_t t = 0; t < T; t++) /* batch 0, head 0 only */
        for (size_t part = 0; part < 3; part++)
            memcpy(ref + t * 3 * C + part * C, all + t * 3 * C + part * C, hs * sizeof(float));
    free(all);
    return 0;
}

static void fake_fallback(struct gpt_backend *be)
{
    (void)be;
    fk.fallbacks++;
    fk.fault = 1.0f;
    fk.reference = 1;
}

static struct gpt_backend *fake_new(float fault, int reference)
{
    struct gpt_backend *be = NULL;
    struct gpt_err err;
    assert_int_equal(gpt_backend_cpu_new(1, &be, &err), 0);
    memset(&fk, 0, sizeof(fk));
    fk.cpu = be->ops;
    fk.ops = *be->ops;
    fk.ops.attention_backward = fake_backward;
    fk.ops.attention_guard = fake_guard;
    fk.ops.attention_fallback = fake_fallback;
    fk.fault = fault;
    fk.reference = reference;
    be->ops = &fk.ops;
    return be;
}

static void fake_free(struct gpt_backend *be)
{
    be->ops = fk.cpu;
    gpt_backend_free(be);
}

/* ---- one attention layer ---- */

#define B  2
#define T  7
#define C  12
#define NH 3

struct layer {
    float qkv[B * T * 3 * C], out[B * T * C], att[B * NH * T * T], dout[B * T * C];
    float scratch[B * NH * T * T], dqkv[B * T * 3 * C], want[B * T * 3 * C];
};

static void layer_init(struct layer *l, struct gpt_backend *be)
{
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < B * T * 3 * C; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        l->qkv[i] = (float)((double)(x >> 40) / (double)(1ull << 24) - 0.5);
    }
    for (size_t i = 0; i < B * T * C; i++)
        l->dout[i] = (float)sin(0.37 * (double)i);
    gpt_backend_attention_forward(be, l->out, l->att, l->qkv, B, T, C, NH);
    /* the reference's gradient, from the CPU op itself */
    fk.cpu->attention_backward(be, l->want, l->scratch, l->dout, l->out, l->qkv, l->att, B, T, C,
                               NH);
}

static void backward(struct layer *l, struct gpt_backend *be)
{
    memset(l->dqkv, 0, sizeof(l->dqkv));
    gpt_backend_attention_backward(be, l->dqkv, l->scratch, l->dout, l->out, l->qkv, l->att, B, T,
                                   C, NH);
}

static void test_planted_fault(void **state)
{
    (void)state;
    static struct layer l;
    struct gpt_backend *be = fake_new(1.5f, 0);
    layer_init(&l, be);
    int bad = 0;
    assert_string_equal(gpt_backend_attention_guard_note(be, &bad), "");
    backward(&l, be);
    const char *note = gpt_backend_attention_guard_note(be, &bad);
    assert_int_equal(bad, 1);
    assert_non_null(strstr(note, "MISMATCH"));
    assert_non_null(strstr(note, "fell back to the reference variant"));
    assert_int_equal(fk.guard_runs, 1);
    assert_int_equal(fk.fallbacks, 1);
    /* that call's gradient is the reference's, everywhere */
    assert_memory_equal(l.dqkv, l.want, sizeof(l.want));
    /* once: a second backward is neither recomputed nor checked again */
    backward(&l, be);
    assert_int_equal(fk.guard_runs, 1);
    assert_int_equal(fk.fallbacks, 1);
    assert_memory_equal(l.dqkv, l.want, sizeof(l.want));
    fake_free(be);
}

static void test_within_bound(void **state)
{
    (void)state;
    static struct layer l;
    struct gpt_backend *be = fake_new(1.0f + 1e-6f, 0);
    layer_init(&l, be);
    backward(&l, be);
    int bad = 1;
    const char *note = gpt_backend_attention_guard_note(be, &bad);
    assert_int_equal(bad, 0);
    assert_non_null(strstr(note, "checked against the reference variant"));
    assert_int_equal(fk.guard_runs, 1);
    assert_int_equal(fk.fallbacks, 0);
    /* the variant's own gradient stays */
    assert_true(l.dqkv[0] == l.want[0] * (1.0f + 1e-6f));
    /* a slightly larger fault (0.5% of dq, over the 1e-3 bound) is caught */
    fake_free(be);
    be = fake_new(1.005f, 0);
    layer_init(&l, be);
    backward(&l, be);
    (void)gpt_backend_attention_guard_note(be, &bad);
    assert_int_equal(bad, 1);
    assert_memory_equal(l.dqkv, l.want, sizeof(l.want));
    fake_free(be);
}

static void test_reference_in_use(void **state)
{
    (void)state;
    static struct layer l;
    struct gpt_backend *be = fake_new(1.5f, 1);
    layer_init(&l, be);
    backward(&l, be);
    assert_int_equal(fk.guard_runs, 0);
    assert_string_equal(gpt_backend_attention_guard_note(be, NULL), "");
    /* the first backward with a variant in use is still guarded */
    fk.reference = 0;
    backward(&l, be);
    assert_int_equal(fk.guard_runs, 1);
    assert_int_equal(fk.fallbacks, 1);
    assert_memory_equal(l.dqkv, l.want, sizeof(l.want));
    fake_free(be);
}

static void test_compare(void **state)
{
    (void)state;
    /* T 2, C 4, hs 2: head 0 is columns 0-1 (dq), 4-5 (dk), 8-9 (dv) */
    float got[2 * 3 * 4], ref[2 * 3 * 4];
    for (size_t i = 0; i < sizeof(ref) / sizeof(ref[0]); i++)
        got[i] = ref[i] = (float)i - 5.0f;
    double ratio;
    int part;
    assert_int_equal(gpt_backend_guard_compare(got, ref, 2, 4, 2, &ratio, &part), 0);
    assert_true(ratio == 0);
    got[2] = 1e9f; /* head 1: not compared */
    assert_int_equal(gpt_backend_guard_compare(got, ref, 2, 4, 2, &ratio, &part), 0);
    got[12 + 8] += 0.01f; /* row 1's dv: 0.01 of dv's largest, 16 */
    assert_int_equal(gpt_backend_guard_compare(got, ref, 2, 4, 2, &ratio, &part), 0);
    assert_true(fabs(ratio - 0.01 / 16) < 1e-6 && part == 2);
    got[12] += 0.01f; /* row 1's dq: 0.01 of dq's largest, 8 (over 1e-3 of dq, not of dv) */
    assert_int_equal(gpt_backend_guard_compare(got, ref, 2, 4, 2, &ratio, &part), -1);
    assert_int_equal(part, 0);
    got[12] = ref[12];
    got[4 + 1] = NAN; /* row 0's dk */
    assert_int_equal(gpt_backend_guard_compare(got, ref, 2, 4, 2, &ratio, &part), -1);
    assert_true(isnan(ratio) && part == 1);
}

/* ---- through the trainer ---- */

#define STEPS 4

struct run {
    double loss[STEPS];
    int n;
    char fallback[GPT_EVENT_MSG_MAX];
    char start[GPT_EVENT_MSG_MAX];
};

static void hook_metric(void *ctx, const struct gpt_metric *m)
{
    struct run *r = ctx;
    if (r->n < STEPS)
        r->loss[r->n++] = m->loss;
}

static void hook_event(void *ctx, const struct gpt_event *e)
{
    struct run *r = ctx;
    if (strcmp(e->kind, "attention_fallback") == 0)
        snprintf(r->fallback, sizeof(r->fallback), "%s", e->message);
    if (strcmp(e->kind, "start") == 0)
        snprintf(r->start, sizeof(r->start), "%s", e->message);
}

static void train(struct gpt_backend *be, struct run *r)
{
    struct gpt_job job;
    struct gpt_err err;
    tiny_job(&job, 16, STEPS);
    assert_int_equal(tiny_job_check(&job), 0);
    memset(r, 0, sizeof(*r));
    struct gpt_trainer_opts to = {
        .job = &job,
        .backend = be,
        .hooks = {.ctx = r, .metric = hook_metric, .event = hook_event},
    };
    struct gpt_train_result res;
    int rc = gpt_train(&to, &res, &err);
    if (rc < 0)
        print_message("gpt_train: %s\n", err.msg);
    assert_int_equal(rc, GPT_TRAIN_DONE);
    assert_int_equal(r->n, STEPS);
}

static void test_trainer(void **state)
{
    (void)state;
    struct gpt_backend *cpu = NULL;
    struct gpt_err err;
    struct run plain, guarded;
    assert_int_equal(gpt_backend_cpu_new(1, &cpu, &err), 0);
    train(cpu, &plain);
    gpt_backend_free(cpu);
    assert_null(strstr(plain.start, "attention"));
    struct gpt_backend *be = fake_new(1.5f, 0);
    snprintf(be->attn_variants, sizeof(be->attn_variants), "forward m32, backward fused");
    train(be, &guarded);
    print_message("start: %s\n", guarded.start);
    assert_non_null(strstr(guarded.start, ", attention forward m32, backward fused"));
    assert_int_equal(fk.fallbacks, 1);
    assert_true(fk.backwards > 1);
    fake_free(be);
    assert_non_null(strstr(guarded.fallback, "MISMATCH"));
    for (int i = 0; i < STEPS; i++)
        assert_memory_equal(&plain.loss[i], &guarded.loss[i], sizeof(double));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_planted_fault),    cmocka_unit_test(test_within_bound),
        cmocka_unit_test(test_reference_in_use), cmocka_unit_test(test_compare),
        cmocka_unit_test(test_trainer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
