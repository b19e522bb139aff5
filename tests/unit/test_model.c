/*
 * test_model: the GPT model on the CPU backend: layout and spans, config
 * validation, initialisation, a finite-difference check of the gradient of
 * the whole model (tiny config with vocab padding), causality, padded vocab
 * rows, the grads_ready order, gradient accumulation, and the parameter
 * units of sharded training.
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
#include "model.h"
#include "rng.h"

/* L=2, NH=2, C=16, T=8, V=11 (Vp=16, so padding is exercised). */
static const struct gpt_model_config tiny_cfg = {
    .n_layer = 2, .n_head = 2, .n_embd = 16, .block_size = 8, .vocab_size = 11};

struct tm_state {
    struct gpt_backend *be;
    struct gpt_model m;
    float *host; /* (n_params) */
};

static int setup(void **state)
{
    struct tm_state *s = calloc(1, sizeof(*s));
    struct gpt_err err;
    assert_non_null(s);
    assert_int_equal(gpt_backend_cpu_new(1, &s->be, &err), 0);
    assert_int_equal(gpt_model_init(&s->m, &tiny_cfg, s->be, 3, &err), 0);
    s->host = calloc(s->m.n_params, sizeof(float));
    assert_non_null(s->host);
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    struct tm_state *s = *state;
    gpt_model_done(&s->m);
    gpt_model_done(&s->m); /* twice is safe */
    gpt_backend_free(s->be);
    free(s->host);
    free(s);
    return 0;
}

/* Random parameters large enough for clear gradients; padded wte rows 0. */
static void random_params(struct tm_state *s, uint64_t seed)
{
    struct gpt_rng r;
    gpt_rng_seed(&r, seed);
    for (size_t i = 0; i < s->m.n_tensors; i++) {
        const struct gpt_tensor_info *t = &s->m.tensors[i];
        for (size_t j = 0; j < t->count; j++)
            s->host[t->offset + j] =
                (float)((t->ndim == 2 ? 0.3 : 0.2) * gpt_rng_normal(&r) + (t->ndim == 1 ? 0.5 : 0));
    }
    size_t C = (size_t)s->m.cfg.n_embd, V = (size_t)s->m.cfg.vocab_size;
    memset(s->host + V * C, 0, (s->m.Vp - V) * C * sizeof(float));
    gpt_backend_upload(s->be, s->m.params, s->host, s->m.n_params * sizeof(float));
}

static const int tok_a[16] = {1, 5, 10, 0, 3, 3, 7, 2, 9, 4, 6, 8, 0, 1, 2, 10};
static const int tgt_a[16] = {5, 10, 0, 3, -1, 7, 2, 9, 4, 6, 8, -1, 1, 2, 10, 4};

static void test_layout(void **state)
{
    struct tm_state *s = *state;
    const struct gpt_model *m = &s->m;
    size_t C = 16, L = 2;
    assert_int_equal(m->Vp, 16);
    size_t expect = m->Vp * C + 8 * C + L * (12 * C * C + 13 * C) + 2 * C;
    assert_int_equal(m->n_params, expect);
    assert_int_equal(m->n_tensors, 2 + 12 * L + 2);
    size_t off = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        assert_int_equal(m->tensors[i].offset, off);
        off += m->tensors[i].count;
    }
    assert_int_equal(off, m->n_params);
    assert_string_equal(m->tensors[0].name, "wte");
    assert_string_equal(m->tensors[1].name, "wpe");
    assert_string_equal(m->tensors[2 + 12 + 2].name, "h.1.attn.qkvw");
    assert_int_equal(m->tensors[2 + 12 + 2].ndim, 2);
    assert_int_equal(m->tensors[2 + 12 + 3].ndim, 1);
    assert_string_equal(m->tensors[m->n_tensors - 1].name, "lnfb");
    assert_int_equal(m->tensors[m->n_tensors - 1].layer, 2);
    size_t o0, c0, o1, c1;
    gpt_model_block_span(m, 0, &o0, &c0);
    gpt_model_block_span(m, 1, &o1, &c1);
    assert_int_equal(o0, (m->Vp + 8) * C);
    assert_int_equal(o0 + c0, o1);
    assert_int_equal(c0, c1);
    assert_int_equal(o1 + c1 + 2 * C, m->n_params);
    assert_true(m->act_bytes > 0);
    /* llm.c's count: 6 N + 6 L C T, N every parameter. */
    assert_true(gpt_model_flops_per_token(m, 8) == 6.0 * (double)m->n_params + 6.0 * L * C * 8);
}

/* The count behind every MFU figure, pinned at GPT-2 124M, T 1024: N =
 * 124,475,904 (wpe and the vocabulary padded to 50,304 included), so 6 N
 * + 6 L C T = 803,478,528 FLOPs per token, llm.c's figure. */
static void test_flops_gpt2_124m(void **state)
{
    (void)state;
    struct gpt_model m;
    struct gpt_err err;
    struct gpt_model_config c = {
        .vocab_size = 50257, .block_size = 1024, .n_layer = 12, .n_head = 12, .n_embd = 768};
    assert_int_equal(gpt_model_layout(&m, &c, &err), 0);
    assert_int_equal(m.Vp, 50304);
    assert_int_equal(m.n_params, 124475904);
    assert_true(gpt_model_flops_per_token(&m, 1024) == 803478528.0);
}

static void test_config_validation(void **state)
{
    struct tm_state *s = *state;
    struct gpt_model m;
    struct gpt_err err;
    struct gpt_model_config c = tiny_cfg;
    c.n_head = 3;
    assert_int_equal(gpt_model_init(&m, &c, s->be, 2, &err), -EINVAL);
    assert_string_equal(err.path, "model.n_head");
    c = tiny_cfg;
    c.n_layer = 43;
    assert_int_equal(gpt_model_init(&m, &c, s->be, 2, &err), -EINVAL);
    c = tiny_cfg;
    c.vocab_size = 0;
    assert_int_equal(gpt_model_init(&m, &c, s->be, 2, &err), -EINVAL);
    assert_int_equal(gpt_model_init(&m, &tiny_cfg, s->be, 0, &err), -EINVAL);
    /* Vp rounding */
    c = tiny_cfg;
    c.vocab_size = 65;
    assert_int_equal(gpt_model_init(&m, &c, s->be, 1, &err), 0);
    assert_int_equal(m.Vp, 128);
    gpt_model_done(&m);
    /* bad forward arguments */
    int bad[2] = {0, 11};
    assert_int_equal(gpt_model_forward(&s->m, bad, NULL, 1, 2, NULL), -EINVAL);
    assert_int_equal(gpt_model_forward(&s->m, tok_a, NULL, 4, 2, NULL), -EINVAL);
    assert_int_equal(gpt_model_forward(&s->m, tok_a, NULL, 1, 9, NULL), -EINVAL);
    assert_int_equal(gpt_model_forward(&s->m, tok_a, bad, 1, 2, NULL), -EINVAL);
    /* backward needs a forward with targets */
    assert_int_equal(gpt_model_forward(&s->m, tok_a, NULL, 1, 2, NULL), 0);
    assert_int_equal(gpt_model_backward(&s->m, 1.0f), -EINVAL);
}

static void test_init_weights(void **state)
{
    struct tm_state *s = *state;
    gpt_model_init_weights(&s->m, 7);
    gpt_backend_download(s->be, s->host, s->m.params, s->m.n_params * sizeof(float));
    const struct gpt_model *m = &s->m;
    size_t C = 16;
    for (size_t i = 11 * C; i < m->Vp * C; i++)
        assert_float_equal(s->host[i], 0.0f, 0.0f);
    double ss = 0.0;
    for (size_t i = 0; i < 11 * C; i++)
        ss += (double)s->host[i] * s->host[i];
    double sd = sqrt(ss / (11.0 * C));
    assert_true(sd > 0.015 && sd < 0.025);
    for (size_t i = 2; i < m->n_tensors; i++) {
        const struct gpt_tensor_info *t = &m->tensors[i];
        const char *leaf = strrchr(t->name, '.');
        leaf = leaf ? leaf + 1 : t->name;
        if (t->ndim == 1) {
            float want = leaf[strlen(leaf) - 1] == 'w' ? 1.0f : 0.0f;
            for (size_t j = 0; j < t->count; j++)
                assert_float_equal(s->host[t->offset + j], want, 0.0f);
        }
    }
}

/* Whole-model finite-difference check: mean loss, eps 1e-3, up to 24
 * elements per tensor, norm-relative error per tensor. */
static void test_model_gradcheck(void **state)
{
    struct tm_state *s = *state;
    struct gpt_model *m = &s->m;
    size_t B = 2, T = 8;
    random_params(s, 99);
    float *grads = calloc(m->n_params, sizeof(float));
    assert_non_null(grads);
    gpt_model_zero_grad(m);
    float loss;
    assert_int_equal(gpt_model_forward(m, tok_a, tgt_a, B, T, &loss), 0);
    assert_int_equal(gpt_model_backward(m, 1.0f), 0);
    gpt_backend_download(s->be, grads, m->grads, m->n_params * sizeof(float));
    const float eps = 1e-3f;
    double worst = 0.0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const struct gpt_tensor_info *t = &m->tensors[i];
        size_t count = t->count;
        if (i == 0)
            count = 11 * 16; /* padded rows have no gradient to check */
        size_t step = count > 24 ? count / 24 : 1;
        double d2 = 0.0, n2 = 0.0;
        for (size_t j = 0; j < count; j += step) {
            float *p = s->host + t->offset + j;
            float keep = *p;
            float lp, lm;
            *p = keep + eps;
            gpt_backend_upload(s->be, m->params, s->host, m->n_params * sizeof(float));
            assert_int_equal(gpt_model_forward(m, tok_a, tgt_a, B, T, &lp), 0);
            *p = keep - eps;
            gpt_backend_upload(s->be, m->params, s->host, m->n_params * sizeof(float));
            assert_int_equal(gpt_model_forward(m, tok_a, tgt_a, B, T, &lm), 0);
            *p = keep;
            double num = ((double)lp - lm) / (2.0 * eps);
            double ana = grads[t->offset + j];
            d2 += (num - ana) * (num - ana);
            n2 += num * num;
        }
        double rel = sqrt(d2) / fmax(sqrt(n2), 1e-4);
        worst = fmax(worst, rel);
        if (rel > 2e-2)
            print_message("  %s |num|=%.3e rel.err=%.2e\n", t->name, sqrt(n2), rel);
        assert_true(rel <= 2e-2);
    }
    gpt_backend_upload(s->be, m->params, s->host, m->n_params * sizeof(float));
    print_message("  model gradcheck worst tensor rel.err %.2e\n", worst);
    free(grads);
}

static void read_logits(struct tm_state *s, float *out, size_t n)
{
    gpt_backend_download(s->be, out, gpt_model_logits(&s->m), n * sizeof(float));
}

static void test_causality(void **state)
{
    struct tm_state *s = *state;
    size_t Vp = s->m.Vp;
    random_params(s, 5);
    for (size_t T = 3; T <= 8; T += 5) {
        for (size_t t = 0; t + 1 < T; t++) {
            int a[16], b[16];
            memcpy(a, tok_a, sizeof a);
            memcpy(b, tok_a, sizeof b);
            for (size_t bb = 0; bb < 2; bb++)
                for (size_t j = t + 1; j < T; j++)
                    b[bb * T + j] = (a[bb * T + j] + 1 + (int)j) % 11;
            float la[2 * 8 * 16], lb[2 * 8 * 16];
            assert_int_equal(gpt_model_forward(&s->m, a, NULL, 2, T, NULL), 0);
            read_logits(s, la, 2 * T * Vp);
            assert_int_equal(gpt_model_forward(&s->m, b, NULL, 2, T, NULL), 0);
            read_logits(s, lb, 2 * T * Vp);
            for (size_t bb = 0; bb < 2; bb++) {
                assert_memory_equal(la + bb * T * Vp, lb + bb * T * Vp,
                                    (t + 1) * Vp * sizeof(float));
                /* and the change does reach the later positions */
                assert_memory_not_equal(la + (bb * T + t + 1) * Vp, lb + (bb * T + t + 1) * Vp,
                                        (T - t - 1) * Vp * sizeof(float));
            }
        }
    }
}

static void test_padded_vocab(void **state)
{
    struct tm_state *s = *state;
    struct gpt_model *m = &s->m;
    size_t C = 16, V = 11;
    random_params(s, 11);
    float loss0, loss1;
    gpt_model_zero_grad(m);
    assert_int_equal(gpt_model_forward(m, tok_a, tgt_a, 2, 8, &loss0), 0);
    assert_int_equal(gpt_model_backward(m, 1.0f), 0);
    float *g0 = calloc(m->n_params, sizeof(float));
    float *g1 = calloc(m->n_params, sizeof(float));
    assert_non_null(g0);
    assert_non_null(g1);
    gpt_backend_download(s->be, g0, m->grads, m->n_params * sizeof(float));
    /* Garbage in the padded rows of wte changes neither loss nor gradients. */
    for (size_t i = V * C; i < m->Vp * C; i++)
        s->host[i] = 50.0f * (float)((i % 7) - 3);
    gpt_backend_upload(s->be, m->params, s->host, m->n_params * sizeof(float));
    gpt_model_zero_grad(m);
    assert_int_equal(gpt_model_forward(m, tok_a, tgt_a, 2, 8, &loss1), 0);
    assert_int_equal(gpt_model_backward(m, 1.0f), 0);
    gpt_backend_download(s->be, g1, m->grads, m->n_params * sizeof(float));
    assert_float_equal(loss0, loss1, 0.0f);
    assert_memory_equal(g0 + V * C, g1 + V * C, (m->n_params - V * C) * sizeof(float));
    assert_memory_equal(g0, g1, V * C * sizeof(float));
    for (size_t i = V * C; i < m->Vp * C; i++)
        assert_float_equal(g1[i], 0.0f, 0.0f);
    free(g0), free(g1);
}

struct span_log {
    size_t n;
    size_t off[16], count[16];
};

static void log_span(void *ctx, size_t off, size_t count)
{
    struct span_log *l = ctx;
    assert_true(l->n < 16);
    l->off[l->n] = off;
    l->count[l->n] = count;
    l->n++;
}

static void test_grads_ready_order(void **state)
{
    struct tm_state *s = *state;
    struct gpt_model *m = &s->m;
    struct span_log log = {0};
    random_params(s, 3);
    m->grads_ready = log_span;
    m->grads_ready_ctx = &log;
    assert_int_equal(gpt_model_forward(m, tok_a, tgt_a, 2, 8, NULL), 0);
    assert_int_equal(gpt_model_backward(m, 1.0f), 0);
    m->grads_ready = NULL;
    m->grads_ready_ctx = NULL;
    assert_int_equal(log.n, 4); /* final LN, block 1, block 0, embeddings */
    size_t C = 16;
    assert_int_equal(log.off[0], m->n_params - 2 * C);
    assert_int_equal(log.count[0], 2 * C);
    for (int l = 1; l >= 0; l--) {
        size_t off, count;
        gpt_model_block_span(m, l, &off, &count);
        assert_int_equal(log.off[2 - l], off);
        assert_int_equal(log.count[2 - l], count);
    }
    assert_int_equal(log.off[3], 0);
    assert_int_equal(log.count[3], (m->Vp + 8) * C);
    /* The spans tile the whole buffer. */
    size_t total = 0;
    for (size_t i = 0; i < log.n; i++)
        total += log.count[i];
    assert_int_equal(total, m->n_params);
}

static void test_grad_accumulation(void **state)
{
    struct tm_state *s = *state;
    struct gpt_model *m = &s->m;
    random_params(s, 8);
    float *g1 = calloc(m->n_params, sizeof(float)), *g2 = calloc(m->n_params, sizeof(float));
    assert_non_null(g1);
    assert_non_null(g2);
    gpt_model_zero_grad(m);
    assert_int_equal(gpt_model_forward(m, tok_a, tgt_a, 2, 8, NULL), 0);
    assert_int_equal(gpt_model_backward(m, 1.0f), 0);
    gpt_backend_download(s->be, g1, m->grads, m->n_params * sizeof(float));
    /* Two micro-batches of one sequence each with loss_scale 1/2; the
     * per-micro-batch means equal the full mean here because both halves
     * have the same number of ignored targets. */
    gpt_model_zero_grad(m);
    for (int b = 0; b < 2; b++) {
        assert_int_equal(gpt_model_forward(m, tok_a + 8 * b, tgt_a + 8 * b, 1, 8, NULL), 0);
        assert_int_equal(gpt_model_backward(m, 0.5f), 0);
    }
    gpt_backend_download(s->be, g2, m->grads, m->n_params * sizeof(float));
    double d2 = 0.0, n2 = 0.0;
    for (size_t i = 0; i < m->n_params; i++) {
        d2 += ((double)g1[i] - g2[i]) * ((double)g1[i] - g2[i]);
        n2 += (double)g1[i] * g1[i];
    }
    assert_true(sqrt(d2) <= 1e-5 * sqrt(n2));
    free(g1), free(g2);
}

/* The training forward (loss and dlogits in the classifier's one call)
 * gives the bits of a forward then the backward's own classifier pass:
 * the losses and the gradients accumulated over two micro-steps of other
 * shapes and scales. A backward at another scale than its forward's is
 * refused, and the forward it follows stays usable. */
static void test_forward_train(void **state)
{
    struct tm_state *s = *state;
    struct gpt_model *m = &s->m;
    size_t n = m->n_params;
    random_params(s, 21);
    float *g[2] = {calloc(n, sizeof(float)), calloc(n, sizeof(float))};
    float loss[2][2];
    assert_non_null(g[0]);
    assert_non_null(g[1]);
    static const float scale[2] = {0.75f, 0.3f};
    static const size_t Bs[2] = {2, 1}, Ts[2] = {8, 5};
    for (int train = 0; train < 2; train++) {
        gpt_model_zero_grad(m);
        for (int k = 0; k < 2; k++) {
            const int *x = tok_a + 3 * k, *y = tgt_a + 3 * k;
            float *l = &loss[train][k];
            if (train)
                assert_int_equal(gpt_model_forward_train(m, x, y, Bs[k], Ts[k], scale[k], l), 0);
            else
                assert_int_equal(gpt_model_forward(m, x, y, Bs[k], Ts[k], l), 0);
            assert_int_equal(gpt_model_backward(m, scale[k]), 0);
        }
        gpt_backend_download(s->be, g[train], m->grads, n * sizeof(float));
    }
    assert_true(loss[0][0] > 0.0f && loss[0][1] > 0.0f);
    assert_memory_equal(loss[0], loss[1], sizeof(loss[0]));
    assert_memory_equal(g[0], g[1], n * sizeof(float));
    double g2 = 0.0;
    for (size_t i = 0; i < n; i++)
        g2 += (double)g[0][i] * g[0][i];
    assert_true(g2 > 0.0);

    float l;
    assert_int_equal(gpt_model_forward_train(m, tok_a, tgt_a, 2, 8, 0.5f, &l), 0);
    assert_int_equal(gpt_model_backward(m, 1.0f), -EINVAL);
    gpt_model_zero_grad(m);
    assert_int_equal(gpt_model_backward(m, 0.5f), 0);
    assert_int_equal(gpt_model_backward(m, 0.5f), -EINVAL); /* consumed */
    /* An evaluation forward after a training one: the same loss. */
    assert_int_equal(gpt_model_forward(m, tok_a, tgt_a, 2, 8, &l), 0);
    assert_memory_equal(&l, &loss[0][0], sizeof(l));
    free(g[0]), free(g[1]);
}

/* Two micro-steps after a zeroing, at T 7 and 6 of the block size 8
 * (wpe's last row gets no gradient) and two scales; the gradients into g. */
static void two_micro_steps(struct tm_state *s, int deferred, float *g)
{
    struct gpt_model *m = &s->m;
    if (deferred)
        gpt_model_zero_grad_deferred(m);
    else
        gpt_model_zero_grad(m);
    assert_int_equal(gpt_model_forward_train(m, tok_a, tgt_a, 2, 7, 0.5f, NULL), 0);
    assert_int_equal(gpt_model_backward(m, 0.5f), 0);
    assert_int_equal(gpt_model_forward(m, tok_a + 8, tgt_a + 8, 1, 6, NULL), 0);
    assert_int_equal(gpt_model_backward(m, 0.25f), 0);
    assert_int_equal(s->be->grad_assign, 0); /* left off */
    gpt_backend_download(s->be, g, m->grads, m->n_params * sizeof(float));
}

/* gpt_model_zero_grad_deferred: the first backward overwrites the
 * gradients (the backend's grad_assign) instead of adding to zeros, so
 * whatever the buffer held (here garbage, NaN included) is gone and the
 * accumulation over micro-steps gives the bits of an eager zeroing; a
 * backend whose ops cannot overwrite gets the buffer zeroed instead. A
 * deferred zeroing whose backward was refused still applies to the next. */
static void test_zero_grad_deferred(void **state)
{
    struct tm_state *s = *state;
    struct gpt_model *m = &s->m;
    size_t n = m->n_params;
    random_params(s, 33);
    float *want = calloc(n, sizeof(float)), *got = calloc(n, sizeof(float));
    float *junk = calloc(n, sizeof(float));
    assert_non_null(want);
    assert_non_null(got);
    assert_non_null(junk);
    for (size_t i = 0; i < n; i++)
        junk[i] = i % 97 == 5 ? NAN : (float)(i % 13) - 6.0f;
    two_micro_steps(s, 0, want);
    double g2 = 0.0;
    for (size_t i = 0; i < n; i++)
        g2 += (double)want[i] * want[i];
    assert_true(g2 > 0.0 && isfinite(g2));
    const struct gpt_tensor_info *wpe = &m->tensors[1];
    assert_string_equal(wpe->name, "wpe");
    for (size_t i = 7 * 16; i < 8 * 16; i++)
        assert_float_equal(want[wpe->offset + i], 0.0f, 0.0f);
    gpt_backend_upload(s->be, m->grads, junk, n * sizeof(float));
    two_micro_steps(s, 1, got);
    assert_memory_equal(want, got, n * sizeof(float));

    /* A backend without the overwrite: the same bits (zeroed first). */
    const struct gpt_backend_ops *ops = s->be->ops;
    struct gpt_backend_ops no_assign = *ops;
    no_assign.grads_assign = 0;
    s->be->ops = &no_assign;
    assert_int_equal(gpt_backend_set_grad_assign(s->be, 1), -ENOTSUP);
    assert_int_equal(gpt_backend_set_grad_assign(s->be, 0), 0);
    gpt_backend_upload(s->be, m->grads, junk, n * sizeof(float));
    two_micro_steps(s, 1, got);
    s->be->ops = ops;
    assert_memory_equal(want, got, n * sizeof(float));

    /* A refused backward (no forward with targets) keeps the deferral. */
    gpt_backend_upload(s->be, m->grads, junk, n * sizeof(float));
    gpt_model_zero_grad_deferred(m);
    assert_int_equal(gpt_model_forward(m, tok_a, NULL, 2, 8, NULL), 0);
    assert_int_equal(gpt_model_backward(m, 0.5f), -EINVAL);
    assert_int_equal(gpt_model_forward_train(m, tok_a, tgt_a, 2, 7, 0.5f, NULL), 0);
    assert_int_equal(gpt_model_backward(m, 0.5f), 0);
    assert_int_equal(gpt_model_forward(m, tok_a + 8, tgt_a + 8, 1, 6, NULL), 0);
    assert_int_equal(gpt_model_backward(m, 0.25f), 0);
    gpt_backend_download(s->be, got, m->grads, n * sizeof(float));
    assert_memory_equal(want, got, n * sizeof(float));
    free(want), free(got), free(junk);
}

/* A units provider over a flat copy of the parameters, as full sharding
 * uses the model: each fetch copies the unit into a buffer of its own,
 * each release poisons it (a read after release shows up as NaN), each
 * backward's gradients go to a buffer added into a flat total on release. */
struct fake_units {
    const struct gpt_model *m;
    const float *params; /* host copy (n_params) */
    float *grads;        /* flat total (n_params) */
    float *buf[GPT_MAX_UNITS], *gbuf[GPT_MAX_UNITS];
    int held, max_held; /* units held at once besides the embeddings */
    size_t max_count;   /* largest unit but the embeddings handed out */
    int order[4 * GPT_MAX_UNITS], n_order;
};

static const float *fake_fetch(void *ctx, int unit, int pass)
{
    struct fake_units *f = ctx;
    size_t off, count;
    gpt_model_unit_span(f->m, unit, &off, &count);
    if (!f->buf[unit] && !(f->buf[unit] = malloc(count * sizeof(float))))
        return NULL;
    memcpy(f->buf[unit], f->params + off, count * sizeof(float));
    if (unit > 0) {
        f->held++;
        f->max_held = f->held > f->max_held ? f->held : f->max_held;
        f->max_count = count > f->max_count ? count : f->max_count;
    }
    f->order[f->n_order++] = pass ? -unit - 1 : unit;
    return f->buf[unit];
}

static float *fake_grads(void *ctx, int unit)
{
    struct fake_units *f = ctx;
    size_t off, count;
    gpt_model_unit_span(f->m, unit, &off, &count);
    if (!f->gbuf[unit] && !(f->gbuf[unit] = malloc(count * sizeof(float))))
        return NULL;
    memset(f->gbuf[unit], 0, count * sizeof(float));
    return f->gbuf[unit];
}

static int fake_release(void *ctx, int unit, int pass)
{
    struct fake_units *f = ctx;
    size_t off, count;
    gpt_model_unit_span(f->m, unit, &off, &count);
    for (size_t i = 0; i < count; i++)
        f->buf[unit][i] = NAN;
    if (unit > 0)
        f->held--;
    if (pass == 1)
        for (size_t i = 0; i < count; i++)
            f->grads[off + i] += f->gbuf[unit][i];
    return 0;
}

/* The units of a sharded model: three per block of about 4 C^2 floats,
 * tiling the layout; forward and backward through them hold one unit at a
 * time besides the embeddings and give the flat model's loss and
 * gradients. */
static void test_units(void **state)
{
    struct tm_state *s = *state;
    struct gpt_model *m = &s->m;
    size_t C = 16, L = 2;
    random_params(s, 11);
    assert_int_equal(gpt_model_num_units(m), GPT_BLOCK_UNITS * L + 2);
    size_t at = 0;
    for (int u = 0; u < gpt_model_num_units(m); u++) {
        size_t off, count;
        gpt_model_unit_span(m, u, &off, &count);
        assert_int_equal(off, at);
        if (u > 0 && u < gpt_model_num_units(m) - 1)
            assert_true(count <= 4 * C * C + 6 * C && count >= 4 * C * C);
        at += count;
    }
    assert_int_equal(at, m->n_params);

    float loss_flat, loss_units;
    float *g_flat = calloc(m->n_params, sizeof(float));
    struct fake_units f = {.m = m, .params = s->host, .grads = calloc(m->n_params, sizeof(float))};
    assert_non_null(g_flat);
    assert_non_null(f.grads);
    gpt_model_zero_grad(m);
    assert_int_equal(gpt_model_forward(m, tok_a, tgt_a, 2, 8, &loss_flat), 0);
    assert_int_equal(gpt_model_backward(m, 1.0f), 0);
    gpt_backend_download(s->be, g_flat, m->grads, m->n_params * sizeof(float));

    struct gpt_model sm;
    struct gpt_err err;
    const struct gpt_model_units units = {
        .ctx = &f, .fetch = fake_fetch, .grads = fake_grads, .release = fake_release};
    assert_int_equal(gpt_model_init_sharded(&sm, &tiny_cfg, s->be, 3, &units, &err), 0);
    assert_int_equal(gpt_model_forward(&sm, tok_a, tgt_a, 2, 8, &loss_units), 0);
    assert_int_equal(gpt_model_backward(&sm, 1.0f), 0);
    assert_true(fabsf(loss_units - loss_flat) <= 1e-6f * fabsf(loss_flat));
    double d2 = 0.0, n2 = 0.0;
    for (size_t i = 0; i < m->n_params; i++) {
        d2 += ((double)g_flat[i] - f.grads[i]) * ((double)g_flat[i] - f.grads[i]);
        n2 += (double)g_flat[i] * g_flat[i];
    }
    assert_true(sqrt(d2) <= 1e-6 * sqrt(n2));
    assert_int_equal(f.max_held, 1);
    assert_true(f.max_count <= 4 * C * C + 6 * C); /* a third of a block, not 12 C^2 */
    /* Forward 0, 1..N-1, 0; backward 0, N-1..1 (the embeddings stay held). */
    int N = gpt_model_num_units(m), k = 0;
    assert_int_equal(f.n_order, 2 * N + 1);
    for (int u = 0; u < N; u++)
        assert_int_equal(f.order[k++], u);
    assert_int_equal(f.order[k++], 0);
    assert_int_equal(f.order[k++], -1);
    for (int u = N - 1; u >= 1; u--)
        assert_int_equal(f.order[k++], -u - 1);
    gpt_model_done(&sm);
    for (int u = 0; u < GPT_MAX_UNITS; u++)
        free(f.buf[u]), free(f.gbuf[u]);
    free(f.grads);
    free(g_flat);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_flops_gpt2_124m),
        cmocka_unit_test(test_config_validation),
        cmocka_unit_test(test_init_weights),
        cmocka_unit_test(test_model_gradcheck),
        cmocka_unit_test(test_causality),
        cmocka_unit_test(test_padded_vocab),
        cmocka_unit_test(test_grads_ready_order),
        cmocka_unit_test(test_grad_accumulation),
        cmocka_unit_test(test_forward_train),
        cmocka_unit_test(test_zero_grad_deferred),
        cmocka_unit_test(test_units),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
