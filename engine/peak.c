/*
 * peak: see peak.h.
 */
#include "monotime.h"
#include "peak.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double gpt_peak_sgemm_flops(size_t M, size_t K, size_t N, double budget_s)
{
    float *a = malloc(M * K * sizeof(float)), *b = malloc(K * N * sizeof(float));
    float *c = malloc(M * N * sizeof(float));
    double best = 0;
    if (!a || !b || !c)
        goto out;
    for (size_t i = 0; i < M * K; i++)
        a[i] = (float)(i % 7) * 0.01f;
    for (size_t i = 0; i < K * N; i++)
        b[i] = (float)(i % 5) * 0.01f;
    /* The same NT layout as the model's forward matmuls. */
    double start = monotime_s();
    for (int rep = 0; rep < 50; rep++) {
        double t0 = monotime_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, a,
                    (int)K, b, (int)K, 0.0f, c, (int)N);
        double dt = monotime_s() - t0;
        double rate = dt > 0 ? 2.0 * (double)M * (double)N * (double)K / dt : 0;
        if (rate > best)
            best = rate;
        if (rep >= 2 && monotime_s() - start > budget_s)
            break;
    }
out:
    free(a);
    free(b);
    free(c);
    return best;
}

/* Dense peaks from NVIDIA's datasheets (bf16 and TF32 tensor cores
 * without sparsity, fp32 on the CUDA cores), FLOP/s. Rows that share a
 * part of their names come most specific first. */
static const struct gpt_device_peak peak_devices[] = {
    {"H100 PCIe", 90, {756e12, 378e12, 51.2e12}},
    {"H100 NVL", 90, {835e12, 418e12, 60e12}},
    {"H200 NVL", 90, {835e12, 418e12, 60e12}},
    {"GH200", 90, {989e12, 494.7e12, 66.9e12}},
    {"H100", 90, {989e12, 494.7e12, 66.9e12}}, /* SXM5 ("H100 80GB HBM3") */
    {"H200", 90, {989e12, 494.7e12, 66.9e12}}, /* SXM */
    {"A100", 80, {312e12, 156e12, 19.5e12}},   /* SXM4 and PCIe alike */
    {"L40S", 89, {362e12, 183e12, 91.6e12}},
    {"B200", 100, {2250e12, 1100e12, 80e12}}, /* HGX, 1000 W */
};

const struct gpt_device_peak *gpt_peak_device_find(const char *name, int cc)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < sizeof(peak_devices) / sizeof(peak_devices[0]); i++)
        if (peak_devices[i].cc == cc && strstr(name, peak_devices[i].name))
            return &peak_devices[i];
    return NULL;
}

const char *gpt_peak_math_name(enum gpt_peak_math m)
{
    static const char *const names[GPT_PEAK_MATH_COUNT] = {"bf16", "tf32", "fp32"};
    return (unsigned)m < GPT_PEAK_MATH_COUNT ? names[m] : "?";
}
