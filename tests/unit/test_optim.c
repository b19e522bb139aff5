/*
 * test_optim: learning-rate schedule values, the clip factor, the gradient
 * sum of squares over spans, and AdamW on a small model against a double
 * precision transcription of torch.optim.AdamW (decay only on ndim >= 2).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "model.h"
#include "optim.h"
#include "rng.h"

static struct gpt_optim_spec spec(void)
{
    struct gpt_optim_spec o = {.lr = 1e-3,
                               .min_lr = 1e-4,
                               .warmup_steps = 10,
                               .schedule = GPT_SCHED_COSINE,
                               .weight_decay = 0.1,
                               .beta1 = 0.9,
                               .beta2 = 0.95,
                               .eps = 1e-8};
    return o;
}

static void test_lr_schedule(void **state)
{
    (void)state;
    struct gpt_optim_spec o = spec();
    /* warmup: lr * (step+1) / warmup */
    assert_float_equal(gpt_lr_at(&o, 0, 110), 1e-4, 1e-15);
    assert_float_equal(gpt_lr_at(&o, 4, 110), 5e-4, 1e-15);
    assert_float_equal(gpt_lr_at(&o, 9, 110), 1e-3, 1e-15);
    /* cosine: starts at lr, midpoint halfway, ends at min_lr */
    assert_float_equal(gpt_lr_at(&o, 10, 110), 1e-3, 1e-15);
    assert_float_equal(gpt_lr_at(&o, 60, 110), 5.5e-4, 1e-15);
    assert_float_equal(gpt_lr_at(&o, 35, 110), 1e-4 + 0.5 * (1.0 + cos(M_PI * 0.25)) * 9e-4, 1e-15);
    assert_float_equal(gpt_lr_at(&o, 110, 110), 1e-4, 1e-15);
    assert_float_equal(gpt_lr_at(&o, 500, 110), 1e-4, 1e-15);
    assert_true(gpt_lr_at(&o, 109, 110) > 1e-4 && gpt_lr_at(&o, 109, 110) < 1.01e-4);
    for (int64_t s = 11; s < 110; s++)
        assert_true(gpt_lr_at(&o, s, 110) < gpt_lr_at(&o, s - 1, 110));
    /* constant after warmup */
    o.schedule = GPT_SCHED_CONSTANT;
    assert_float_equal(gpt_lr_at(&o, 3, 110), 4e-4, 1e-15);
    assert_float_equal(gpt_lr_at(&o, 50, 110), 1e-3, 0.0);
    assert_float_equal(gpt_lr_at(&o, 5000, 110), 1e-3, 0.0);
    /* no warmup; no horizon means constant */
    o = spec();
    o.warmup_steps = 0;
    assert_float_equal(gpt_lr_at(&o, 0, 100), 1e-3, 1e-15);
    assert_float_equal(gpt_lr_at(&o, 50, 100), 5.5e-4, 1e-15);
    assert_float_equal(gpt_lr_at(&o, 50, 0), 1e-3, 0.0);
}

static void test_clip_scale(void **state)
{
    (void)state;
    assert_float_equal(gpt_clip_scale(0.5, 1.0), 1.0f, 0.0f);
    assert_float_equal(gpt_clip_scale(4.0, 1.0), 1.0 / (4.0 + 1e-6), 1e-7);
    assert_float_equal(gpt_clip_scale(100.0, 0.0), 1.0f, 0.0f);
    assert_float_equal(gpt_clip_scale(1.0, 1.0), 1.0 / (1.0 + 1e-6), 1e-7);
}

struct opt_state {
    struct gpt_backend *be;
    struct gpt_model m;
};

static int setup(void **state)
{
    struct opt_state *s = calloc(1, sizeof(*s));
    struct gpt_err err;
    assert_non_null(s);
    assert_int_equal(gpt_backend_cpu_new(1, &s->be, &err), 0);
    struct gpt_model_config cfg = {
        .n_layer = 1, .n_head = 1, .n_embd = 4, .block_size = 2, .vocab_size = 3};
    assert_int_equal(gpt_model_init(&s->m, &cfg, s->be, 1, &err), 0);
    assert_int_equal(gpt_model_alloc_optim(&s->m, &err), 0);
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    struct opt_state *s = *state;
    gpt_model_done(&s->m);
    gpt_backend_free(s->be);
    free(s);
    return 0;
}

static void test_grad_sumsq(void **state)
{
    struct opt_state *s = *state;
    size_t n = s->m.n_params;
    float *g = calloc(n, sizeof(float));
    assert_non_null(g);
    double total = 0.0, head = 0.0;
    for (size_t i = 0; i < n; i++) {
        g[i] = (float)((double)(i % 13) - 6.0) * 0.25f;
        total += (double)g[i] * g[i];
        if (i < 100)
            head += (double)g[i] * g[i];
    }
    gpt_backend_upload(s->be, s->m.grads, g, n * sizeof(float));
    assert_float_equal(gpt_grad_sumsq(&s->m, 0, n), total, 1e-9 * total);
    assert_float_equal(gpt_grad_sumsq(&s->m, 0, 100) + gpt_grad_sumsq(&s->m, 100, n - 100), total,
                       1e-9 * total);
    assert_float_equal(gpt_grad_sumsq(&s->m, 0, 100), head, 1e-9 * head);
    free(g);
}

/* torch.optim.AdamW, one element, in double. */
static void adamw_ref(double *p, double *m, double *v, double g, double lr, double wd,
                      const struct gpt_optim_spec *o, int64_t t)
{
    *p *= 1.0 - lr * wd;
    *m = o->beta1 * *m + (1.0 - o->beta1) * g;
    *v = o->beta2 * *v + (1.0 - o->beta2) * g * g;
    double bc1 = 1.0 - pow(o->beta1, (double)t), bc2 = 1.0 - pow(o->beta2, (double)t);
    *p -= lr / bc1 * *m / (sqrt(*v) / sqrt(bc2) + o->eps);
}

static void test_adamw(void **state)
{
    struct opt_state *s = *state;
    struct gpt_model *m = &s->m;
    size_t n = m->n_params;
    struct gpt_optim_spec o = spec();
    o.weight_decay = 0.5; /* large, so a wrong decay rule shows */
    float *p = calloc(n, sizeof(float)), *g = calloc(n, sizeof(float));
    double *rp = calloc(n, sizeof(double)), *rm = calloc(n, sizeof(double));
    double *rv = calloc(n, sizeof(double));
    assert_true(p && g && rp && rm && rv);
    struct gpt_rng r;
    gpt_rng_seed(&r, 42);
    for (size_t i = 0; i < n; i++) {
        p[i] = (float)gpt_rng_normal(&r);
        rp[i] = p[i];
    }
    gpt_backend_upload(s->be, m->params, p, n * sizeof(float));
    gpt_backend_memzero(s->be, m->m, n * sizeof(float));
    gpt_backend_memzero(s->be, m->v, n * sizeof(float));
    const float lr = 0.01f, gscale = 0.5f;
    for (int64_t t = 1; t <= 3; t++) {
        for (size_t i = 0; i < n; i++)
            g[i] = (float)gpt_rng_normal(&r);
        gpt_backend_upload(s->be, m->grads, g, n * sizeof(float));
        /* Two pieces split inside a tensor, as a sharded optimizer would. */
        size_t cut = m->tensors[2].offset + 3;
        gpt_adamw_update(m, &o, lr, t, gscale, 0, cut);
        gpt_adamw_update(m, &o, lr, t, gscale, cut, n - cut);
        for (size_t k = 0; k < m->n_tensors; k++) {
            const struct gpt_tensor_info *ti = &m->tensors[k];
            double wd = ti->ndim >= 2 ? o.weight_decay : 0.0;
            for (size_t j = ti->offset; j < ti->offset + ti->count; j++)
                adamw_ref(&rp[j], &rm[j], &rv[j], (double)g[j] * gscale, lr, wd, &o, t);
        }
    }
    gpt_backend_download(s->be, p, m->params, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        assert_float_equal(p[i], rp[i], 1e-6 * (1.0 + fabs(rp[i])));
    /* A hand-checked element: t=1 from m=v=0 moves p by lr*sign(g) (eps
     * aside) after decay. */
    float p0 = 2.0f, g0 = -3.0f, m0 = 0.0f, v0 = 0.0f;
    float *bp, *bg, *bm, *bv;
    assert_int_equal(gpt_backend_alloc(s->be, 4 * sizeof(float), (void **)&bp), 0);
    bg = bp + 1, bm = bp + 2, bv = bp + 3;
    gpt_backend_upload(s->be, bp, &p0, 4);
    gpt_backend_upload(s->be, bg, &g0, 4);
    gpt_backend_upload(s->be, bm, &m0, 4);
    gpt_backend_upload(s->be, bv, &v0, 4);
    gpt_backend_adamw(s->be, bp, bg, bm, bv, 1, 0.1f, 0.9f, 0.95f, 1e-8f, 0.5f, 1.0f, 0.1f, 0.05f);
    float out[4];
    gpt_backend_download(s->be, out, bp, sizeof out);
    assert_float_equal(out[0], 2.0 * (1.0 - 0.05) + 0.1, 1e-6);
    assert_float_equal(out[2], -0.3, 1e-7);       /* m = 0.1 * g */
    assert_float_equal(out[3], 0.05 * 9.0, 1e-6); /* v = 0.05 * g^2 */
    gpt_backend_mem_free(s->be, bp);
    free(p), free(g), free(rp), free(rm), free(rv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lr_schedule),
        cmocka_unit_test(test_clip_scale),
        cmocka_unit_test_setup_teardown(test_grad_sumsq, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adamw, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
