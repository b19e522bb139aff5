/*
 * test_peak: the device peak table (peak.h) and the trainer's MFU on a
 * device, without a GPU: a CPU backend whose vtable gains device_info
 * reports a GPU's name and compute capability (a fake device), and
 *  - the table finds each listed card by name and capability, variants
 *    (PCIe, NVL) before the plain name, and nothing for an unlisted name
 *    or a listed name with another capability;
 *  - gpt_train on the fake H100 with no trainer.peak_gflops reports an
 *    mfu over the table's peak for the math it runs (fp32 with TF32
 *    here: the CPU backend refuses bf16), on llm.c's count, and a "peak"
 *    event that names the device and the peak;
 *  - on a device the table lacks, mfu is NAN (left out of the record)
 *    and the "peak" event says the MFU is unknown and how to set it.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "jobspec.h"
#include "model.h"
#include "peak.h"
#include "trainer.h"
#include "unit/tiny_job.h"

static void test_table(void **state)
{
    (void)state;
    const struct {
        const char *name;
        int cc;
        double bf16, tf32;
    } want[] = {
        {"NVIDIA H100 80GB HBM3", 90, 989e12, 494.7e12},
        {"NVIDIA H100 PCIe", 90, 756e12, 378e12},
        {"NVIDIA H100 NVL", 90, 835e12, 418e12},
        {"NVIDIA H200", 90, 989e12, 494.7e12},
        {"NVIDIA H200 NVL", 90, 835e12, 418e12},
        {"NVIDIA A100-SXM4-80GB", 80, 312e12, 156e12},
        {"NVIDIA A100-PCIE-40GB", 80, 312e12, 156e12},
        {"NVIDIA L40S", 89, 362e12, 183e12},
        {"NVIDIA B200", 100, 2250e12, 1100e12},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const struct gpt_device_peak *p = gpt_peak_device_find(want[i].name, want[i].cc);
        if (!p)
            print_message("%s (cc %d): not found\n", want[i].name, want[i].cc);
        assert_non_null(p);
        assert_true(p->flops[GPT_PEAK_BF16] == want[i].bf16);
        assert_true(p->flops[GPT_PEAK_TF32] == want[i].tf32);
        assert_true(p->flops[GPT_PEAK_FP32] > 0 && p->flops[GPT_PEAK_FP32] < want[i].tf32);
    }
    assert_null(gpt_peak_device_find("NVIDIA GeForce RTX 3090", 86));
    assert_null(gpt_peak_device_find("NVIDIA H100 80GB HBM3", 80)); /* capability disagrees */
    assert_null(gpt_peak_device_find(NULL, 90));
    assert_string_equal(gpt_peak_math_name(GPT_PEAK_TF32), "tf32");
}

/* ---- the trainer on a fake device ---- */

struct fake_dev {
    struct gpt_backend_ops ops;
    const struct gpt_backend_ops *cpu;
    const char *name;
    int cc;
};

static struct fake_dev fake;

static int fake_device_info(struct gpt_backend *be, char *name, size_t cap, int *ret_cc)
{
    (void)be;
    snprintf(name, cap, "%s", fake.name);
    *ret_cc = fake.cc;
    return 0;
}

struct seen {
    double mfu, tokens_per_s, ms_per_step;
    int metrics;
    char peak[GPT_EVENT_MSG_MAX];
    size_t n_params;
};

static void hook_metric(void *ctx, const struct gpt_metric *m)
{
    struct seen *s = ctx;
    s->mfu = m->mfu;
    s->tokens_per_s = m->tokens_per_s;
    s->ms_per_step = m->ms_per_step;
    s->metrics++;
}

static void hook_event(void *ctx, const struct gpt_event *e)
{
    struct seen *s = ctx;
    if (strcmp(e->kind, "peak") == 0)
        snprintf(s->peak, sizeof(s->peak), "%s", e->message);
    if (strcmp(e->kind, "start") == 0)
        assert_int_equal(sscanf(e->message, "%*[^:]: %zu parameters", &s->n_params), 1);
}

/* Trains 3 steps of a tiny model on the fake device `name`/`cc`. */
static void run_fake(const char *name, int cc, struct seen *ret)
{
    struct gpt_job job;
    struct gpt_err err;
    tiny_job(&job, 32, 3);
    job.trainer.peak_gflops = 0; /* what this test is about: the peak found */
    job.trainer.precision = GPT_PREC_FP32;
    job.trainer.tf32 = 1;
    assert_int_equal(tiny_job_check(&job), 0);
    assert_true(job.trainer.peak_gflops == 0);

    struct gpt_backend *be = NULL;
    assert_int_equal(gpt_backend_cpu_new(1, &be, &err), 0);
    fake.cpu = be->ops;
    fake.ops = *be->ops;
    fake.ops.device_info = fake_device_info;
    fake.name = name;
    fake.cc = cc;
    be->ops = &fake.ops;

    memset(ret, 0, sizeof(*ret));
    struct gpt_trainer_opts to = {
        .job = &job,
        .backend = be,
        .hooks = {.ctx = ret, .metric = hook_metric, .event = hook_event},
    };
    struct gpt_train_result res;
    int rc = gpt_train(&to, &res, &err);
    if (rc < 0)
        print_message("gpt_train: %s\n", err.msg);
    assert_int_equal(rc, GPT_TRAIN_DONE);
    assert_true(ret->metrics > 0);
    be->ops = fake.cpu;
    gpt_backend_free(be);
}

static void test_trainer_known_device(void **state)
{
    (void)state;
    struct seen s;
    run_fake("NVIDIA H100 80GB HBM3", 90, &s);
    assert_non_null(strstr(s.peak, "NVIDIA H100 80GB HBM3"));
    assert_non_null(strstr(s.peak, "tf32 dense peak 495 TFLOP/s"));
    /* mfu = llm.c's FLOPs per token x tokens/s over the TF32 peak; T
     * (the synthetic task's row length) from the record: 2 rows a step */
    assert_true(s.n_params > 0 && s.tokens_per_s > 0 && isfinite(s.mfu) && s.mfu > 0);
    double T = round(s.tokens_per_s * s.ms_per_step / 1e3 / 2);
    assert_true(T >= 1 && T <= 16);
    double per_token = 6.0 * (double)s.n_params + 6.0 * 2 * 32 * T;
    double want = per_token * s.tokens_per_s / 494.7e12;
    if (fabs(s.mfu - want) > 1e-9 * want)
        print_message("mfu %.17g, want %.17g\n", s.mfu, want);
    assert_true(fabs(s.mfu - want) <= 1e-9 * want);
}

static void test_trainer_unknown_device(void **state)
{
    (void)state;
    struct seen s;
    run_fake("NVIDIA GeForce RTX 3090", 86, &s);
    assert_true(isnan(s.mfu));
    assert_non_null(strstr(s.peak, "MFU unknown"));
    assert_non_null(strstr(s.peak, "NVIDIA GeForce RTX 3090 (compute capability 8.6)"));
    assert_non_null(strstr(s.peak, "trainer.peak_gflops"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_trainer_known_device),
        cmocka_unit_test(test_trainer_unknown_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
