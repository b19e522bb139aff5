/*
 * peak: see peak.h.
 */
#include "peak.h"

#include <cblas.h>
#include <stdlib.h>
#include <time.h>

static double peak_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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
    double start = peak_now_s();
    for (int rep = 0; rep < 50; rep++) {
        double t0 = peak_now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, a,
                    (int)K, b, (int)K, 0.0f, c, (int)N);
        double dt = peak_now_s() - t0;
        double rate = dt > 0 ? 2.0 * (double)M * (double)N * (double)K / dt : 0;
        if (rate > best)
            best = rate;
        if (rep >= 2 && peak_now_s() - start > budget_s)
            break;
    }
out:
    free(a);
    free(b);
    free(c);
    return best;
}
