/*
 * test_ops_gradcheck: finite-difference checks of every backward op of the
 * CPU backend. Each op is wrapped in a scalar loss f(x) = sum(g * op(x))
 * with fixed random g (accumulated in double); the analytic gradient from
 * the backward op is compared with the central difference
 * (f(x+e) - f(x-e)) / 2e, e = 1e-3, over every input element (about 400
 * spread elements for big tensors). Error
 * measure: ||num - ana||_2 / max(||num||_2, 1e-6), per tensor.
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

#define FD_EPS 1e-3f

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

static double dot_d(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * (double)b[i];
    return s;
}

/* f re-evaluates the loss from the current contents of the inputs. */
typedef double (*loss_fn)(void *ctx);

/* Checks every element when n is small, else about 400 spread over x. */
static double grad_error(const char *what, float *x, size_t n, const float *ana, loss_fn f,
                         void *ctx)
{
    double num2 = 0.0, diff2 = 0.0;
    size_t step = n > 600 ? n / 400 + (n / 400) % 2 + 1 : 1;
    for (size_t i = 0; i < n; i += step) {
        float keep = x[i];
        x[i] = keep + FD_EPS;
        double fp = f(ctx);
        x[i] = keep - FD_EPS;
        double fm = f(ctx);
        x[i] = keep;
        double num = (fp - fm) / (2.0 * (double)FD_EPS);
        num2 += num * num;
        diff2 += (num - ana[i]) * (num - ana[i]);
    }
    double rel = sqrt(diff2) / fmax(sqrt(num2), 1e-6);
    print_message("  %-28s n=%-6zu |num|=%.3e  rel.err=%.2e\n", what, n, sqrt(num2), rel);
    return rel;
}

static struct gpt_backend *new_cpu(void)
{
    struct gpt_backend *be = NULL;
    struct gpt_err err;
    assert_int_equal(gpt_backend_cpu_new(1, &be, &err), 0);
    return be;
}

/* --- encoder ------------------------------------------------------------ */
struct enc_ctx {
    struct gpt_backend *be;
    float *out, *wte, *wpe, *g;
    int *inp;
    size_t B, T, C;
};

static double enc_loss(void *p)
{
    struct enc_ctx *c = p;
    gpt_backend_encoder_forward(c->be, c->out, c->inp, c->wte, c->wpe, c->B, c->T, c->C);
    return dot_d(c->out, c->g, c->B * c->T * c->C);
}

static void test_encoder(void **state)
{
    (void)state;
    struct enc_ctx c = {.be = new_cpu(), .B = 2, .T = 5, .C = 7};
    size_t Vp = 6, N = c.B * c.T;
    c.wte = rand_buf(Vp * c.C, 1.0);
    c.wpe = rand_buf(c.T * c.C, 1.0);
    c.out = zero_buf(N * c.C);
    c.g = rand_buf(N * c.C, 1.0);
    int inp[10] = {0, 3, 3, 1, 5, 2, 2, 4, 0, 3};
    c.inp = inp;
    float *dwte = zero_buf(Vp * c.C), *dwpe = zero_buf(c.T * c.C);
    gpt_backend_encoder_backward(c.be, dwte, dwpe, c.g, c.inp, c.B, c.T, c.C);
    assert_true(grad_error("encoder dwte", c.wte, Vp * c.C, dwte, enc_loss, &c) < 1e-3);
    assert_true(grad_error("encoder dwpe", c.wpe, c.T * c.C, dwpe, enc_loss, &c) < 1e-3);
    free(c.wte), free(c.wpe), free(c.out), free(c.g), free(dwte), free(dwpe);
    gpt_backend_free(c.be);
}

/* --- layernorm ---------------------------------------------------------- */
struct ln_ctx {
    struct gpt_backend *be;
    float *out, *mean, *rstd, *inp, *w, *b, *g;
    size_t N, C;
};

static double ln_loss(void *p)
{
    struct ln_ctx *c = p;
    gpt_backend_layernorm_forward(c->be, c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
    return dot_d(c->out, c->g, c->N * c->C);
}

static void check_layernorm(int threads, size_t N, size_t C)
{
    struct ln_ctx c = {.N = N, .C = C};
    struct gpt_err err;
    assert_int_equal(gpt_backend_cpu_new(threads, &c.be, &err), 0);
    c.inp = rand_buf(N * C, 1.0);
    for (size_t i = 0; i < N * C; i++)
        c.inp[i] += 0.5f; /* a non-zero mean */
    c.w = rand_buf(C, 1.0);
    c.b = rand_buf(C, 1.0);
    c.g = rand_buf(N * C, 1.0);
    c.out = zero_buf(N * C);
    c.mean = zero_buf(N);
    c.rstd = zero_buf(N);
    ln_loss(&c);
    /* Start the accumulators at 1 to check that the op adds. */
    float *dinp = zero_buf(N * C), *dw = zero_buf(C), *db = zero_buf(C);
    for (size_t i = 0; i < N * C; i++)
        dinp[i] = 1.0f;
    for (size_t i = 0; i < C; i++)
        dw[i] = db[i] = 1.0f;
    gpt_backend_layernorm_backward(c.be, dinp, dw, db, c.g, c.inp, c.w, c.mean, c.rstd, N, C);
    for (size_t i = 0; i < N * C; i++)
        dinp[i] -= 1.0f;
    for (size_t i = 0; i < C; i++)
        dw[i] -= 1.0f, db[i] -= 1.0f;
    assert_true(grad_error("layernorm dinp", c.inp, N * C, dinp, ln_loss, &c) < 1e-2);
    assert_true(grad_error("layernorm dweight", c.w, C, dw, ln_loss, &c) < 1e-2);
    assert_true(grad_error("layernorm dbias", c.b, C, db, ln_loss, &c) < 1e-2);
    free(c.inp), free(c.w), free(c.b), free(c.g), free(c.out), free(c.mean), free(c.rstd);
    free(dinp), free(dw), free(db);
    gpt_backend_free(c.be);
}

static void test_layernorm(void **state)
{
    (void)state;
    check_layernorm(1, 6, 13);
    check_layernorm(1, 40, 70);
}

/* --- matmul ------------------------------------------------------------- */
struct mm_ctx {
    struct gpt_backend *be;
    float *out, *inp, *w, *bias, *g;
    size_t N, C, OC;
};

static double mm_loss(void *p)
{
    struct mm_ctx *c = p;
    gpt_backend_matmul_forward(c->be, c->out, c->inp, c->w, c->bias, c->N, c->C, c->OC);
    return dot_d(c->out, c->g, c->N * c->OC);
}

static void check_matmul(int threads, size_t N, size_t C, size_t OC, int with_bias)
{
    struct mm_ctx c = {.N = N, .C = C, .OC = OC};
    struct gpt_err err;
    assert_int_equal(gpt_backend_cpu_new(threads, &c.be, &err), 0);
    c.inp = rand_buf(N * C, 1.0);
    c.w = rand_buf(OC * C, 1.0);
    c.bias = with_bias ? rand_buf(OC, 1.0) : NULL;
    c.g = rand_buf(N * OC, 1.0);
    c.out = zero_buf(N * OC);
    float *dinp = rand_buf(N * C, 1.0); /* garbage: must be overwritten */
    float *dw = zero_buf(OC * C), *db = zero_buf(OC);
    for (size_t i = 0; i < OC * C; i++)
        dw[i] = 2.0f;
    for (size_t i = 0; i < OC; i++)
        db[i] = 2.0f;
    gpt_backend_matmul_backward(c.be, dinp, dw, with_bias ? db : NULL, c.g, c.inp, c.w, N, C, OC);
    for (size_t i = 0; i < OC * C; i++)
        dw[i] -= 2.0f;
    for (size_t i = 0; i < OC; i++)
        db[i] -= 2.0f;
    assert_true(grad_error("matmul dinp", c.inp, N * C, dinp, mm_loss, &c) < 1e-2);
    assert_true(grad_error("matmul dweight", c.w, OC * C, dw, mm_loss, &c) < 1e-2);
    if (with_bias)
        assert_true(grad_error("matmul dbias", c.bias, OC, db, mm_loss, &c) < 1e-2);
    free(c.inp), free(c.w), free(c.bias), free(c.g), free(c.out), free(dinp), free(dw), free(db);
    gpt_backend_free(c.be);
}

static void test_matmul(void **state)
{
    (void)state;
    check_matmul(1, 7, 5, 9, 1);
    check_matmul(1, 4, 6, 3, 0);
    check_matmul(1, 60, 17, 70, 1);
}

/* --- attention ---------------------------------------------------------- */
struct att_ctx {
    struct gpt_backend *be;
    float *out, *att, *qkv, *g;
    size_t B, T, C, NH;
};

static double att_loss(void *p)
{
    struct att_ctx *c = p;
    gpt_backend_attention_forward(c->be, c->out, c->att, c->qkv, c->B, c->T, c->C, c->NH);
    return dot_d(c->out, c->g, c->B * c->T * c->C);
}

static void check_attention(int threads, size_t B, size_t T, size_t C, size_t NH)
{
    struct att_ctx c = {.B = B, .T = T, .C = C, .NH = NH};
    struct gpt_err err;
    assert_int_equal(gpt_backend_cpu_new(threads, &c.be, &err), 0);
    size_t n = B * T * 3 * C;
    c.qkv = rand_buf(n, 1.0);
    c.g = rand_buf(B * T * C, 1.0);
    c.out = zero_buf(B * T * C);
    c.att = zero_buf(B * NH * T * T);
    float *scratch = zero_buf(B * NH * T * T);
    float *dqkv = rand_buf(n, 1.0); /* garbage: must be overwritten */
    att_loss(&c);
    gpt_backend_attention_backward(c.be, dqkv, scratch, c.g, c.out, c.qkv, c.att, B, T, C, NH);
    assert_true(grad_error("attention dqkv", c.qkv, n, dqkv, att_loss, &c) < 1e-2);
    free(c.qkv), free(c.g), free(c.out), free(c.att), free(scratch), free(dqkv);
    gpt_backend_free(c.be);
}

static void test_attention(void **state)
{
    (void)state;
    check_attention(1, 2, 5, 6, 2);
    /* T past one 64-row block, odd sizes. */
    check_attention(1, 2, 70, 6, 3);
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

/* --- gelu --------------------------------------------------------------- */
struct gelu_ctx {
    struct gpt_backend *be;
    float *out, *inp, *g;
    size_t n;
};

static double gelu_loss(void *p)
{
    struct gelu_ctx *c = p;
    gpt_backend_gelu_forward(c->be, c->out, c->inp, c->n);
    return dot_d(c->out, c->g, c->n);
}

static void test_gelu(void **state)
{
    (void)state;
    struct gelu_ctx c = {.be = new_cpu(), .n = 203};
    c.inp = rand_buf(c.n, 2.0);
    c.inp[0] = 9.0f, c.inp[1] = -9.0f, c.inp[2] = 0.0f;
    c.g = rand_buf(c.n, 1.0);
    c.out = zero_buf(c.n);
    gelu_loss(&c);
    /* Values against the formula in double. */
    for (size_t i = 0; i < c.n; i++) {
        double x = c.inp[i];
        double ref = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
        assert_true(fabs(ref - c.out[i]) <= 2e-6 * (1.0 + fabs(ref)));
    }
    /* In place: dinp aliases dout. */
    float *d = zero_buf(c.n);
    memcpy(d, c.g, c.n * sizeof(float));
    gpt_backend_gelu_backward(c.be, d, c.inp, d, c.n);
    assert_true(grad_error("gelu dinp", c.inp, c.n, d, gelu_loss, &c) < 1e-2);
    free(c.inp), free(c.g), free(c.out), free(d);
    gpt_backend_free(c.be);
}

/* --- residual ----------------------------------------------------------- */
static void test_residual(void **state)
{
    (void)state;
    struct gpt_backend *be = new_cpu();
    size_t n = 37;
    float *a = rand_buf(n, 1.0), *b = rand_buf(n, 1.0), *o = zero_buf(n);
    gpt_backend_residual_forward(be, o, a, b, n);
    for (size_t i = 0; i < n; i++)
        assert_float_equal(o[i], a[i] + b[i], 0.0f);
    gpt_backend_residual_forward(be, a, a, b, n); /* in place */
    assert_memory_equal(a, o, n * sizeof(float));
    free(a), free(b), free(o);
    /* The product with the skip connection: the two ops' exact result
     * (the front-end's fallback on this backend), the skip left intact. */
    size_t N = 5, C = 7, OC = 3;
    float *x = rand_buf(N * C, 1.0), *w = rand_buf(OC * C, 1.0), *bias = rand_buf(OC, 1.0);
    float *res = rand_buf(N * OC, 1.0), *res0 = zero_buf(N * OC), *want = zero_buf(N * OC);
    float *got = zero_buf(N * OC);
    memcpy(res0, res, N * OC * sizeof(float));
    gpt_backend_matmul_forward(be, want, x, w, bias, N, C, OC);
    gpt_backend_residual_forward(be, want, want, res, N * OC);
    gpt_backend_matmul_residual_forward(be, got, x, w, bias, res, N, C, OC);
    assert_memory_equal(got, want, N * OC * sizeof(float));
    assert_memory_equal(res, res0, N * OC * sizeof(float));
    free(x), free(w), free(bias), free(res), free(res0), free(want), free(got);
    gpt_backend_free(be);
}

/* --- softmax + cross-entropy -------------------------------------------- */
struct xent_ctx {
    struct gpt_backend *be;
    float *logits, *tmp, *losses;
    int *targets;
    size_t N, V, Vp;
};

static double xent_loss(void *p)
{
    struct xent_ctx *c = p;
    gpt_backend_softmax_xent(c->be, c->logits, c->losses, c->targets, c->N, c->V, c->Vp, 0.0f, 0);
    double s = 0.0;
    for (size_t i = 0; i < c->N; i++)
        s += c->losses[i];
    return s;
}

static void test_softmax_xent(void **state)
{
    (void)state;
    struct xent_ctx c = {.be = new_cpu(), .N = 6, .V = 11, .Vp = 16};
    size_t n = c.N * c.Vp;
    c.logits = rand_buf(n, 2.0);
    c.losses = zero_buf(c.N);
    int targets[6] = {3, -1, 0, 10, 7, -5};
    c.targets = targets;
    double loss0 = xent_loss(&c);
    /* Logits are intact after a loss-only call; check one row by hand. */
    double mx = -1e30, se = 0.0;
    for (size_t j = 0; j < c.V; j++)
        mx = fmax(mx, c.logits[j]);
    for (size_t j = 0; j < c.V; j++)
        se += exp(c.logits[j] - mx);
    assert_true(fabs(c.losses[0] - (log(se) + mx - c.logits[3])) < 1e-5);
    assert_float_equal(c.losses[1], 0.0f, 0.0f);
    assert_float_equal(c.losses[5], 0.0f, 0.0f);
    /* Padded columns never enter the loss. */
    float *saved = zero_buf(n);
    memcpy(saved, c.logits, n * sizeof(float));
    for (size_t i = 0; i < c.N; i++)
        for (size_t j = c.V; j < c.Vp; j++)
            c.logits[i * c.Vp + j] = 1000.0f;
    assert_true(fabs(xent_loss(&c) - loss0) < 1e-6);
    /* dlogits in place, scaled. */
    float *d = zero_buf(n);
    memcpy(d, c.logits, n * sizeof(float));
    gpt_backend_softmax_xent(c.be, d, NULL, c.targets, c.N, c.V, c.Vp, 0.5f, 1);
    for (size_t i = 0; i < n; i++)
        d[i] *= 2.0f;
    for (size_t i = 0; i < c.N; i++)
        for (size_t j = 0; j < c.Vp; j++)
            if (j >= c.V || c.targets[i] < 0)
                assert_float_equal(d[i * c.Vp + j], 0.0f, 0.0f);
    assert_true(grad_error("softmax_xent dlogits", c.logits, n, d, xent_loss, &c) < 1e-2);
    /* After a loss call (the model's way): the same dlogits, losses kept. */
    float *d2 = zero_buf(n), *l2 = zero_buf(c.N);
    memcpy(d, c.logits, n * sizeof(float));
    memcpy(d2, c.logits, n * sizeof(float));
    gpt_backend_softmax_xent(c.be, d, NULL, c.targets, c.N, c.V, c.Vp, 0.5f, 1);
    gpt_backend_softmax_xent(c.be, d2, l2, c.targets, c.N, c.V, c.Vp, 0.0f, 0);
    memcpy(saved, l2, c.N * sizeof(float));
    gpt_backend_softmax_xent(c.be, d2, l2, c.targets, c.N, c.V, c.Vp, 0.5f, GPT_XENT_AFTER_LOSS);
    assert_memory_equal(d2, d, n * sizeof(float));
    assert_memory_equal(l2, saved, c.N * sizeof(float));
    free(d2), free(l2);
    free(c.logits), free(c.losses), free(saved), free(d);
    gpt_backend_free(c.be);
}

/* --- adamw / sumsq / scale ---------------------------------------------- */
static void test_adamw_sumsq_scale(void **state)
{
    (void)state;
    struct gpt_backend *be = new_cpu();
    size_t n = 40000; /* the threaded path */
    float *x = rand_buf(n, 1.0);
    double ref = 0.0;
    for (size_t i = 0; i < n; i++)
        ref += (double)x[i] * x[i];
    assert_true(fabs(gpt_backend_sumsq(be, x, n) - ref) < 1e-9 * ref);
    gpt_backend_scale(be, x, 0.5f, n);
    assert_true(fabs(gpt_backend_sumsq(be, x, n) - ref / 4) < 1e-9 * ref);
    free(x);
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
        cmocka_unit_test(test_encoder),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_causal),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_residual),
        cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_adamw_sumsq_scale),
        cmocka_unit_test(test_threads_match),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
