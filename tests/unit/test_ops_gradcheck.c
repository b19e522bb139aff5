/*
 * test_ops_gradcheck: every case of the op table (op_cases.h) on the CPU
 * backend. Outputs against the plain references (op_cases.c, double
 * arithmetic) within the row's bound; gradients by finite differences of
 * the op's forward: the scalar loss (the descriptor's: sum(dout * out)
 * in double, or the classifier's mean loss) at x + e and x - e, e = 1e-3,
 * (f(x+e) - f(x-e)) / 2e against the backward's element, for every input
 * element (about 400 spread elements of a big tensor) where the row asks,
 * else along one random direction v of +-1 per element (one pair of
 * evaluations: GPT-2's shapes). Error of a gradient: ||num - ana||_2 /
 * max(||num||_2, 1e-6), or along v |num - ana.v| / ||ana||_2 (ana.v's
 * typical size), at most 1e-2. Also: every stream op of
 * backend_ops.def has a case; attention is causal; the threaded paths
 * give the one-thread results; the classifier's one-pass dlogits are the
 * two-pass ones bit for bit.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "rng.h"
#include "unit/op_cases.h"

#define FD_EPS   1e-3f
#define FD_BOUND 1e-2

static struct gpt_rng test_rng;

static float *rand_buf(size_t n, double sd)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(sd * gpt_rng_normal(&test_rng));
    return p;
}

static float *zero_buf(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    assert_non_null(p);
    return p;
}

static struct gpt_backend *new_cpu(void)
{
    struct gpt_backend *be = NULL;
    struct gpt_err err;
    assert_int_equal(gpt_backend_cpu_new(1, &be, &err), 0);
    return be;
}

/* Every stream op of the list has a descriptor (else the link fails) and
 * at least one case; every row names a stream op and a precision, and a
 * row that asks for the element-wise gradient check has a gradient. */
static void test_every_op_has_cases(void **state)
{
    (void)state;
    size_t rows[GPT_BACKEND_OP_COUNT] = {0};
    for (size_t i = 0; i < opc_n_cases; i++) {
        const struct opc_case *c = &opc_cases[i];
        assert_true((unsigned)c->op < GPT_BACKEND_OP_COUNT);
        assert_true(c->dtypes & (OPC_FP32 | OPC_BF16));
        assert_non_null(opc_op_of(c->op));
        if (c->grad)
            assert_non_null(opc_op_of(c->op)->loss);
        rows[c->op]++;
    }
    int missing = 0;
    for (int op = 0; op < GPT_BACKEND_OP_COUNT; op++) {
        assert_non_null(opc_op_of((enum gpt_backend_op)op));
        if (rows[op] == 0) {
            print_message("no case for %s: add its row to tests/unit/op_cases.c\n",
                          gpt_backend_op_name((enum gpt_backend_op)op));
            missing++;
        }
    }
    print_message("%zu cases of %d ops\n", opc_n_cases, (int)GPT_BACKEND_OP_COUNT);
    assert_int_equal(missing, 0);
}

/* One case's buffers on the CPU backend: b[] the op's, init[] their
 * initial contents (host copies). */
struct cpu_case {
    const struct opc_case *c;
    const struct opc_op *o;
    struct gpt_backend *be;
    struct opc_tensor t[OPC_MAX_TENSORS];
    void *b[OPC_MAX_TENSORS], *init[OPC_MAX_TENSORS];
    int nt;
    int failures;
};

static void case_setup(struct cpu_case *k, const struct opc_case *c, struct gpt_backend *be)
{
    memset(k, 0, sizeof(*k));
    k->c = c;
    k->o = opc_op_of(c->op);
    k->be = be;
    gpt_rng_seed(&test_rng, opc_seed(c));
    k->nt = k->o->tensors(c, be, k->t);
    assert_true(k->nt > 0 && k->nt <= OPC_MAX_TENSORS);
    for (int i = 0; i < k->nt; i++) {
        size_t bytes = k->t[i].n * opc_type_size(k->t[i].type);
        if (bytes == 0)
            continue;
        k->init[i] = malloc(bytes);
        assert_non_null(k->init[i]);
        opc_fill(&k->t[i], &test_rng, k->init[i]);
        assert_int_equal(gpt_backend_alloc(be, bytes, &k->b[i]), 0);
        assert_int_equal(gpt_backend_upload(be, k->b[i], k->init[i], bytes), 0);
    }
}

static void case_free(struct cpu_case *k)
{
    for (int i = 0; i < k->nt; i++) {
        gpt_backend_mem_free(k->be, k->b[i]);
        free(k->init[i]);
    }
}

/* The outputs against the reference: from the initial contents, the
 * reference writes what each OPC_OUT tensor must hold. */
static void check_outputs(struct cpu_case *k, const char *tag)
{
    void *want[OPC_MAX_TENSORS] = {0};
    for (int i = 0; i < k->nt; i++) {
        size_t bytes = k->t[i].n * opc_type_size(k->t[i].type);
        if (!bytes)
            continue;
        want[i] = malloc(bytes);
        assert_non_null(want[i]);
        memcpy(want[i], k->init[i], bytes);
    }
    k->o->ref(want, k->c);
    for (int i = 0; i < k->nt; i++) {
        const struct opc_tensor *t = &k->t[i];
        if (t->role != OPC_OUT || !t->n)
            continue;
        size_t at;
        double e = opc_err(t->type, want[i], k->b[i], t->n, t->floor, &at);
        double bound = t->exact ? 0.0 : k->c->tol;
        int ok = e <= bound && !isnan(e);
        print_message("%-4s %-26s %-36s %-16s err %.3g (bound %.1g)\n", ok ? "ok" : "FAIL",
                      gpt_backend_op_name(k->c->op), tag, t->name, e, bound);
        k->failures += !ok;
    }
    for (int i = 0; i < k->nt; i++)
        free(want[i]);
}

/* Finite differences of the loss in x (n elements) against ana: every
 * element (about 400 spread ones when n > 600), or along v, a random +-1
 * per element. */
static double fd_error(struct cpu_case *k, float *x, size_t n, const float *ana)
{
    double num2 = 0.0, diff2 = 0.0;
    if (!k->c->grad) {
        float *keep = malloc(n * sizeof(float));
        signed char *v = malloc(n);
        assert_true(keep && v);
        memcpy(keep, x, n * sizeof(float));
        double dot = 0.0, ana2 = 0.0;
        for (size_t i = 0; i < n; i++) {
            v[i] = gpt_rng_below(&test_rng, 2) ? 1 : -1;
            dot += v[i] * (double)ana[i];
            ana2 += (double)ana[i] * ana[i];
            x[i] = keep[i] + v[i] * FD_EPS;
        }
        double fp = k->o->loss(k->be, k->b, k->c);
        for (size_t i = 0; i < n; i++)
            x[i] = keep[i] - v[i] * FD_EPS;
        double fm = k->o->loss(k->be, k->b, k->c);
        memcpy(x, keep, n * sizeof(float));
        free(keep);
        free(v);
        double num = (fp - fm) / (2.0 * (double)FD_EPS);
        /* Relative to the projection's typical size, ||ana||_2 (a chance
         * near-cancellation in num would magnify the rounding noise). */
        return fabs(num - dot) / fmax(sqrt(ana2), 1e-6);
    }
    size_t step = n > 600 ? n / 400 + (n / 400) % 2 + 1 : 1;
    for (size_t i = 0; i < n; i += step) {
        float keep = x[i];
        x[i] = keep + FD_EPS;
        double fp = k->o->loss(k->be, k->b, k->c);
        x[i] = keep - FD_EPS;
        double fm = k->o->loss(k->be, k->b, k->c);
        x[i] = keep;
        double num = (fp - fm) / (2.0 * (double)FD_EPS);
        num2 += num * num;
        diff2 += (num - ana[i]) * (num - ana[i]);
    }
    return sqrt(diff2) / fmax(sqrt(num2), 1e-6);
}

/* Each gradient the op wrote (less the initial contents where it adds)
 * against finite differences of the loss in its input. */
static void check_gradients(struct cpu_case *k, const char *tag)
{
    for (int i = 0; i < k->nt; i++) {
        const struct opc_tensor *t = &k->t[i];
        if (t->role != OPC_GRAD || !t->n)
            continue;
        float *ana = malloc(t->n * sizeof(float));
        assert_non_null(ana);
        for (size_t j = 0; j < t->n; j++)
            ana[j] = ((float *)k->b[i])[j] - (t->acc ? ((float *)k->init[i])[j] : 0.0f);
        assert_true(t->of >= 0 && k->t[t->of].n == t->n);
        double e = fd_error(k, k->b[t->of], t->n, ana);
        int ok = e <= FD_BOUND && !isnan(e);
        print_message("%-4s %-26s %-36s %-16s fd %-9s %.2e\n", ok ? "ok" : "FAIL",
                      gpt_backend_op_name(k->c->op), tag, t->name,
                      k->c->grad ? "elements" : "direction", e);
        k->failures += !ok;
        free(ana);
    }
}

/* Every row: run, outputs against the reference, gradients by finite
 * differences. All rows run; the failures are counted at the end. */
static void test_cases(void **state)
{
    (void)state;
    struct gpt_backend *be = new_cpu();
    int failures = 0, checked = 0;
    for (size_t r = 0; r < opc_n_cases; r++) {
        struct cpu_case k;
        char tag[96];
        case_setup(&k, &opc_cases[r], be);
        opc_tag(k.c, tag, sizeof(tag));
        assert_int_equal(k.o->run(be, k.b, k.c), 0);
        if (k.o->ref)
            check_outputs(&k, tag);
        if (k.o->loss)
            check_gradients(&k, tag);
        failures += k.failures;
        checked++;
        case_free(&k);
    }
    gpt_backend_free(be);
    print_message("%d cases checked, %d checks failed\n", checked, failures);
    assert_int_equal(failures, 0);
}

/* The classifier's dlogits from one call equal, bit for bit, those of a
 * loss call followed by GPT_XENT_AFTER_LOSS, which keeps the losses. */
static void test_xent_after_loss_bits(void **state)
{
    (void)state;
    struct gpt_backend *be = new_cpu();
    size_t N = 6, V = 11, Vp = 16, n = N * Vp;
    int targets[6] = {3, -1, 0, 10, 7, -5};
    float *d = rand_buf(n, 2.0), *d2 = zero_buf(n), *l2 = zero_buf(N), *kept = zero_buf(N);
    memcpy(d2, d, n * sizeof(float));
    gpt_backend_softmax_xent(be, d, NULL, targets, N, V, Vp, 0.5f, 1);
    gpt_backend_softmax_xent(be, d2, l2, targets, N, V, Vp, 0.0f, 0);
    memcpy(kept, l2, N * sizeof(float));
    gpt_backend_softmax_xent(be, d2, l2, targets, N, V, Vp, 0.5f, GPT_XENT_AFTER_LOSS);
    assert_memory_equal(d2, d, n * sizeof(float));
    assert_memory_equal(l2, kept, N * sizeof(float));
    free(d), free(d2), free(l2), free(kept);
    gpt_backend_free(be);
}

/* Causality of the op itself: outputs at t do not depend on inputs after t. */
static void test_attention_causal(void **state)
{
    (void)state;
    size_t B = 1, T = 80, C = 8, NH = 2, n = B * T * 3 * C;
    struct gpt_backend *be = new_cpu();
    float *qkv = rand_buf(n, 1.0), *out1 = zero_buf(T * C), *out2 = zero_buf(T * C);
    float *att = zero_buf(NH * T * T);
    gpt_backend_attention_forward(be, out1, att, qkv, B, T, C, NH);
    size_t t0 = 40;
    for (size_t i = (t0 + 1) * 3 * C; i < n; i++)
        qkv[i] += 1.0f;
    gpt_backend_attention_forward(be, out2, att, qkv, B, T, C, NH);
    assert_memory_equal(out1, out2, (t0 + 1) * C * sizeof(float));
    free(qkv), free(out1), free(out2), free(att);
    gpt_backend_free(be);
}

/* --- threaded paths ------------------------------------------------------
 * The finite-difference checks above run on one thread (a threaded check
 * would start thousands of parallel regions, slow on a loaded machine).
 * Here each op runs once with 1 and with 2 threads on inputs big enough for
 * the parallel paths, and the results must agree. */
static double max_rel_diff(const float *a, const float *b, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)a[i] - b[i]) / (1.0 + fabs((double)a[i])));
    return worst;
}

static void test_threads_match(void **state)
{
    (void)state;
    struct gpt_backend *be[2];
    struct gpt_err err;
    assert_int_equal(gpt_backend_cpu_new(1, &be[0], &err), 0);
    assert_int_equal(gpt_backend_cpu_new(2, &be[1], &err), 0);
    size_t B = 3, T = 70, C = 96, NH = 3, N = B * T, Vp = 128, V = 100;
    float *inp = rand_buf(N * C, 1.0), *w = rand_buf(C, 1.0), *bias = rand_buf(3 * C, 1.0);
    float *dout = rand_buf(N * 3 * C, 1.0), *W = rand_buf(3 * C * C, 0.2);
    float *qkv = rand_buf(N * 3 * C, 1.0), *logits0 = rand_buf(N * Vp, 2.0);
    int *targets = calloc(N, sizeof(int)), *tokens = calloc(N, sizeof(int));
    assert_non_null(targets);
    assert_non_null(tokens);
    for (size_t i = 0; i < N; i++) {
        targets[i] = i % 17 == 0 ? -1 : (int)((i * 7) % V);
        tokens[i] = (int)((i * 5) % V);
    }
    float *out[2], *o2[2], *o3[2], *o4[2], *o5[2];
    for (int k = 0; k < 2; k++) {
        out[k] = zero_buf(N * 3 * C);
        o2[k] = zero_buf(3 * C * C);
        o3[k] = zero_buf(B * NH * T * T);
        o4[k] = zero_buf(B * NH * T * T);
        o5[k] = zero_buf(N * Vp);
    }
#define BOTH(call)                                                                                 \
    for (int k = 0; k < 2; k++) {                                                                  \
        memset(out[k], 0, N * 3 * C * sizeof(float));                                              \
        memset(o2[k], 0, 3 * C * C * sizeof(float));                                               \
        call;                                                                                      \
    }
    float mean[2][210], rstd[2][210];
    BOTH(gpt_backend_layernorm_forward(be[k], out[k], mean[k], rstd[k], inp, w, bias, N, C));
    assert_true(max_rel_diff(out[0], out[1], N * C) < 1e-6);
    BOTH(gpt_backend_layernorm_backward(be[k], out[k], o2[k], o2[k] + C, dout, inp, w, mean[0],
                                        rstd[0], N, C));
    assert_true(max_rel_diff(out[0], out[1], N * C) < 1e-6);
    assert_true(max_rel_diff(o2[0], o2[1], 2 * C) < 1e-5);
    BOTH(gpt_backend_matmul_forward(be[k], out[k], inp, W, bias, N, C, 3 * C));
    assert_true(max_rel_diff(out[0], out[1], N * 3 * C) < 1e-5);
    BOTH(gpt_backend_matmul_backward(be[k], out[k], o2[k], o3[k], dout, inp, W, N, C, 3 * C));
    assert_true(max_rel_diff(out[0], out[1], N * C) < 1e-5);
    assert_true(max_rel_diff(o2[0], o2[1], 3 * C * C) < 1e-5);
    assert_true(max_rel_diff(o3[0], o3[1], 3 * C) < 1e-5);
    BOTH(gpt_backend_attention_forward(be[k], out[k], o3[k], qkv, B, T, C, NH));
    assert_true(max_rel_diff(out[0], out[1], N * C) < 1e-5);
    for (int k = 0; k < 2; k++) /* the forward's output, which BOTH clears in out */
        memcpy(o5[k], out[k], N * C * sizeof(float));
    BOTH(
        gpt_backend_attention_backward(be[k], out[k], o4[k], dout, o5[k], qkv, o3[0], B, T, C, NH));
    assert_true(max_rel_diff(out[0], out[1], N * 3 * C) < 1e-5);
    BOTH(gpt_backend_gelu_forward(be[k], out[k], dout, N * 3 * C));
    assert_true(max_rel_diff(out[0], out[1], N * 3 * C) < 1e-6);
    BOTH(gpt_backend_gelu_backward(be[k], out[k], qkv, dout, N * 3 * C));
    assert_true(max_rel_diff(out[0], out[1], N * 3 * C) < 1e-6);
    BOTH(gpt_backend_encoder_backward(be[k], o2[k], o2[k] + V * C, inp, tokens, B, T, C));
    assert_true(max_rel_diff(o2[0], o2[1], V * C + T * C) < 1e-6);
    for (int k = 0; k < 2; k++) {
        memcpy(o5[k], logits0, N * Vp * sizeof(float));
        gpt_backend_softmax_xent(be[k], o5[k], out[k], targets, N, V, Vp, 0.01f, 1);
    }
    assert_true(max_rel_diff(out[0], out[1], N) < 1e-6);
    assert_true(max_rel_diff(o5[0], o5[1], N * Vp) < 1e-6);
    double ss0 = gpt_backend_sumsq(be[0], dout, N * 3 * C);
    assert_true(fabs(ss0 - gpt_backend_sumsq(be[1], dout, N * 3 * C)) < 1e-9 * ss0);
#undef BOTH
    for (int k = 0; k < 2; k++) {
        free(out[k]), free(o2[k]), free(o3[k]), free(o4[k]), free(o5[k]);
        gpt_backend_free(be[k]);
    }
    free(inp), free(w), free(bias), free(dout), free(W), free(qkv), free(logits0);
    free(targets), free(tokens);
}

int main(void)
{
    gpt_rng_seed(&test_rng, 1234);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_op_has_cases), cmocka_unit_test(test_cases),
        cmocka_unit_test(test_attention_causal),   cmocka_unit_test(test_xent_after_loss_bits),
        cmocka_unit_test(test_threads_match),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
