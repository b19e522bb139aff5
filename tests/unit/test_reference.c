/*
 * test_reference: the C model against the PyTorch reference in
 * tests/reference/golden_tiny.bin (written by tests/reference/gen_golden.py,
 * float64 torch from float32 weights; torch is NOT needed to run this).
 * Checks logits, loss, every parameter gradient and the losses of 10 AdamW
 * steps with clipping and the warmup+cosine schedule.
 *
 * Error measure: per tensor, ||c - ref||_2 / max(||ref||_2, 1e-12) (norm-
 * relative), and |c - ref| / |ref| for scalars; all must be <= 1e-4.
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
#include "optim.h"

#ifndef GPTD_GOLDEN_PATH
#define GPTD_GOLDEN_PATH "tests/reference/golden_tiny.bin"
#endif

#define REF_TOL 1e-4

struct golden {
    int32_t cfg[9]; /* L, NH, C, block, V, Vp, B, T, steps */
    double opt[9];  /* lr, min_lr, warmup, max_steps, wd, beta1, beta2, eps, clip */
    int64_t n_params;
    float *params, *logits, *grads, *losses, *norms;
    int32_t *inputs, *targets;
    float loss;
};

static int read_exact(FILE *f, void *p, size_t bytes)
{
    return fread(p, 1, bytes, f) == bytes ? 0 : -EIO;
}

static void *read_array(FILE *f, size_t n, size_t elem)
{
    void *p = malloc(n * elem);
    assert_non_null(p);
    assert_int_equal(read_exact(f, p, n * elem), 0);
    return p;
}

static void golden_load(struct golden *g)
{
    const char *path = getenv("GPTD_GOLDEN");
    if (!path)
        path = GPTD_GOLDEN_PATH;
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    char magic[8];
    assert_int_equal(read_exact(f, magic, 8), 0);
    assert_memory_equal(magic, "GPTGOLD1", 8);
    assert_int_equal(read_exact(f, g->cfg, sizeof g->cfg), 0);
    assert_int_equal(read_exact(f, g->opt, sizeof g->opt), 0);
    assert_int_equal(read_exact(f, &g->n_params, sizeof g->n_params), 0);
    size_t BT = (size_t)g->cfg[6] * (size_t)g->cfg[7], V = (size_t)g->cfg[4];
    size_t steps = (size_t)g->cfg[8];
    g->params = read_array(f, (size_t)g->n_params, sizeof(float));
    g->inputs = read_array(f, BT, sizeof(int32_t));
    g->targets = read_array(f, BT, sizeof(int32_t));
    g->logits = read_array(f, BT * V, sizeof(float));
    assert_int_equal(read_exact(f, &g->loss, sizeof g->loss), 0);
    g->grads = read_array(f, (size_t)g->n_params, sizeof(float));
    g->losses = read_array(f, steps, sizeof(float));
    g->norms = read_array(f, steps, sizeof(float));
    fclose(f);
}

static void golden_free(struct golden *g)
{
    free(g->params), free(g->inputs), free(g->targets), free(g->logits), free(g->grads);
    free(g->losses), free(g->norms);
}

static double norm_rel(const float *c, const float *ref, size_t n)
{
    double d2 = 0.0, r2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        d2 += ((double)c[i] - ref[i]) * ((double)c[i] - ref[i]);
        r2 += (double)ref[i] * ref[i];
    }
    return sqrt(d2) / fmax(sqrt(r2), 1e-12);
}

struct ref_state {
    struct golden g;
    struct gpt_backend *be;
    struct gpt_model m;
};

static int setup(void **state)
{
    struct ref_state *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    golden_load(&s->g);
    struct gpt_err err;
    assert_int_equal(gpt_backend_cpu_new(1, &s->be, &err), 0);
    struct gpt_model_config cfg = {.n_layer = s->g.cfg[0],
                                   .n_head = s->g.cfg[1],
                                   .n_embd = s->g.cfg[2],
                                   .block_size = s->g.cfg[3],
                                   .vocab_size = s->g.cfg[4]};
    assert_int_equal(gpt_model_init(&s->m, &cfg, s->be, (size_t)s->g.cfg[6], &err), 0);
    assert_int_equal(s->m.Vp, s->g.cfg[5]);
    assert_int_equal(s->m.n_params, s->g.n_params);
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    struct ref_state *s = *state;
    gpt_model_done(&s->m);
    gpt_backend_free(s->be);
    golden_free(&s->g);
    free(s);
    return 0;
}

static void load_params(struct ref_state *s)
{
    assert_int_equal(
        gpt_backend_upload(s->be, s->m.params, s->g.params, s->m.n_params * sizeof(float)), 0);
}

static void test_forward_backward(void **state)
{
    struct ref_state *s = *state;
    struct golden *g = &s->g;
    size_t B = (size_t)g->cfg[6], T = (size_t)g->cfg[7], V = (size_t)g->cfg[4];
    size_t Vp = s->m.Vp;
    load_params(s);
    gpt_model_zero_grad(&s->m);
    float loss = 0.0f;
    assert_int_equal(gpt_model_forward(&s->m, g->inputs, g->targets, B, T, &loss), 0);
    /* Logits (unpadded) before backward turns them into dlogits. */
    float *lg = malloc(B * T * V * sizeof(float));
    float *row = malloc(Vp * sizeof(float));
    assert_non_null(lg);
    assert_non_null(row);
    const float *dl = gpt_model_logits(&s->m);
    for (size_t i = 0; i < B * T; i++) {
        gpt_backend_download(s->be, row, dl + i * Vp, Vp * sizeof(float));
        memcpy(lg + i * V, row, V * sizeof(float));
    }
    double e_logits = norm_rel(lg, g->logits, B * T * V);
    double e_loss = fabs((double)loss - g->loss) / fabs((double)g->loss);
    print_message("  logits rel.err %.2e, loss %.7f vs %.7f rel.err %.2e\n", e_logits, loss,
                  g->loss, e_loss);
    assert_true(e_logits <= REF_TOL);
    assert_true(e_loss <= REF_TOL);

    assert_int_equal(gpt_model_backward(&s->m, 1.0f), 0);
    float *grads = malloc(s->m.n_params * sizeof(float));
    assert_non_null(grads);
    gpt_backend_download(s->be, grads, s->m.grads, s->m.n_params * sizeof(float));
    double worst = 0.0;
    const char *worst_name = "";
    for (size_t i = 0; i < s->m.n_tensors; i++) {
        const struct gpt_tensor_info *t = &s->m.tensors[i];
        double e = norm_rel(grads + t->offset, g->grads + t->offset, t->count);
        if (e > worst)
            worst = e, worst_name = t->name;
        if (e > REF_TOL)
            print_message("  grad %s rel.err %.2e\n", t->name, e);
        assert_true(e <= REF_TOL);
    }
    print_message("  grads: worst tensor %s rel.err %.2e\n", worst_name, worst);
    free(lg), free(row), free(grads);
}

static void test_adamw_steps(void **state)
{
    struct ref_state *s = *state;
    struct golden *g = &s->g;
    size_t B = (size_t)g->cfg[6], T = (size_t)g->cfg[7];
    int steps = g->cfg[8];
    struct gpt_optim_spec o = {.lr = g->opt[0],
                               .min_lr = g->opt[1],
                               .warmup_steps = (int)g->opt[2],
                               .schedule = GPT_SCHED_COSINE,
                               .weight_decay = g->opt[4],
                               .beta1 = g->opt[5],
                               .beta2 = g->opt[6],
                               .eps = g->opt[7]};
    int64_t max_steps = (int64_t)g->opt[3];
    double clip = g->opt[8];
    struct gpt_err err;
    load_params(s);
    assert_int_equal(gpt_model_alloc_optim(&s->m, &err), 0);
    gpt_backend_memzero(s->be, s->m.m, s->m.n_params * sizeof(float));
    gpt_backend_memzero(s->be, s->m.v, s->m.n_params * sizeof(float));
    double worst = 0.0;
    for (int step = 0; step < steps; step++) {
        gpt_model_zero_grad(&s->m);
        float loss = 0.0f;
        assert_int_equal(gpt_model_forward(&s->m, g->inputs, g->targets, B, T, &loss), 0);
        assert_int_equal(gpt_model_backward(&s->m, 1.0f), 0);
        double norm = sqrt(gpt_grad_sumsq(&s->m, 0, s->m.n_params));
        float scale = gpt_clip_scale(norm, clip);
        float lr = (float)gpt_lr_at(&o, step, max_steps);
        gpt_adamw_update(&s->m, &o, lr, step + 1, scale, 0, s->m.n_params);
        double e = fabs((double)loss - g->losses[step]) / fabs((double)g->losses[step]);
        double en = fabs(norm - g->norms[step]) / fabs((double)g->norms[step]);
        print_message("  step %d loss %.6f ref %.6f rel.err %.2e  norm rel.err %.2e\n", step, loss,
                      g->losses[step], e, en);
        worst = fmax(worst, e);
        assert_true(e <= REF_TOL);
        assert_true(en <= REF_TOL);
    }
    print_message("  10-step losses: worst rel.err %.2e\n", worst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_backward),
        cmocka_unit_test(test_adamw_steps),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
