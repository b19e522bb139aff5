/*
 * cpu_ops: the CPU backend's layer ops (encoder, LayerNorm, matmul, GELU,
 * residual, fused softmax + cross-entropy), in the llm.c style: plain
 * float arrays with shape comments, every matrix product through
 * cblas_sgemm, element-wise loops written to vectorise (omp simd) and
 * split over the backend's OpenMP threads when large enough. Runs on the
 * thread that owns the backend.
 */
#include <math.h>

#include <cblas.h>

#include "cpu_impl.h"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBE  0.044715f

static int cpu_nt(const struct gpt_backend *be, size_t work)
{
    return work >= GPT_CPU_PAR_MIN ? be->threads : 1;
}

void gpt_cpu_encoder_forward(struct gpt_backend *be, float *out, const int *inp, const float *wte,
                             const float *wpe, size_t B, size_t T, size_t C)
{
    /* out (B,T,C), inp (B,T), wte (Vp,C), wpe (maxT,C) */
#pragma omp parallel for num_threads(cpu_nt(be, B *T *C)) schedule(static)
    for (size_t bt = 0; bt < B * T; bt++) {
        float *restrict o = out + bt * C;
        const float *restrict te = wte + (size_t)inp[bt] * C;
        const float *restrict pe = wpe + (bt % T) * C;
#pragma omp simd
        for (size_t c = 0; c < C; c++)
            o[c] = te[c] + pe[c];
    }
}

void gpt_cpu_encoder_backward(struct gpt_backend *be, float *dwte, float *dwpe, const float *dout,
                              const int *inp, size_t B, size_t T, size_t C)
{
    /* Rows of dwte may repeat across (b,t), so threads split the channels,
     * not the positions: no races and a fixed summation order. */
    int nt = cpu_nt(be, B * T * C);
    size_t chunk = (C + (size_t)nt - 1) / (size_t)nt;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t c0 = 0; c0 < C; c0 += chunk) {
        size_t c1 = c0 + chunk < C ? c0 + chunk : C;
        for (size_t bt = 0; bt < B * T; bt++) {
            const float *restrict d = dout + bt * C;
            float *restrict te = dwte + (size_t)inp[bt] * C;
            float *restrict pe = dwpe + (bt % T) * C;
#pragma omp simd
            for (size_t c = c0; c < c1; c++) {
                te[c] += d[c];
                pe[c] += d[c];
            }
        }
    }
}

GPT_CPU_CLONES
static void ln_forward_rows(float *restrict out, float *restrict mean, float *restrict rstd,
                            const float *restrict inp, const float *restrict weight,
                            const float *restrict bias, size_t r0, size_t r1, size_t C)
{
    for (size_t r = r0; r < r1; r++) {
        const float *restrict x = inp + r * C;
        float *restrict o = out + r * C;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (size_t c = 0; c < C; c++)
            s += x[c];
        float mu = s / (float)C;
        float v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (size_t c = 0; c < C; c++)
            v += (x[c] - mu) * (x[c] - mu);
        float rs = 1.0f / sqrtf(v / (float)C + 1e-5f);
#pragma omp simd
        for (size_t c = 0; c < C; c++)
            o[c] = (x[c] - mu) * rs * weight[c] + bias[c];
        mean[r] = mu;
        rstd[r] = rs;
    }
}

void gpt_cpu_layernorm_forward(struct gpt_backend *be, float *out, float *mean, float *rstd,
                               const float *inp, const float *weight, const float *bias, size_t N,
                               size_t C)
{
    int nt = cpu_nt(be, N * C);
    size_t chunk = (N + (size_t)nt - 1) / (size_t)nt;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t r0 = 0; r0 < N; r0 += chunk)
        ln_forward_rows(out, mean, rstd, inp, weight, bias, r0, r0 + chunk < N ? r0 + chunk : N, C);
}

/* dinp += for rows [r0, r1); also dweight/dbias when they are non-NULL. */
GPT_CPU_CLONES
static void ln_backward_rows(float *restrict dinp, float *restrict dweight, float *restrict dbias,
                             const float *restrict dout, const float *restrict inp,
                             const float *restrict weight, const float *restrict mean,
                             const float *restrict rstd, size_t r0, size_t r1, size_t C)
{
    for (size_t r = r0; r < r1; r++) {
        const float *restrict x = inp + r * C;
        const float *restrict d = dout + r * C;
        float *restrict di = dinp + r * C;
        float mu = mean[r], rs = rstd[r];
        float m1 = 0.0f, m2 = 0.0f;
#pragma omp simd reduction(+ : m1, m2)
        for (size_t c = 0; c < C; c++) {
            float dn = weight[c] * d[c];
            m1 += dn;
            m2 += dn * (x[c] - mu) * rs;
        }
        m1 /= (float)C;
        m2 /= (float)C;
#pragma omp simd
        for (size_t c = 0; c < C; c++) {
            float norm = (x[c] - mu) * rs;
            di[c] += rs * (weight[c] * d[c] - m1 - norm * m2);
        }
        if (dweight) {
#pragma omp simd
            for (size_t c = 0; c < C; c++) {
                dweight[c] += d[c] * (x[c] - mu) * rs;
                dbias[c] += d[c];
            }
        }
    }
}

/* dweight/dbias for channels [c0, c1) over all rows. */
static void ln_backward_params(float *restrict dweight, float *restrict dbias,
                               const float *restrict dout, const float *restrict inp,
                               const float *restrict mean, const float *restrict rstd, size_t N,
                               size_t C, size_t c0, size_t c1)
{
    for (size_t r = 0; r < N; r++) {
        const float *restrict x = inp + r * C;
        const float *restrict d = dout + r * C;
        float mu = mean[r], rs = rstd[r];
#pragma omp simd
        for (size_t c = c0; c < c1; c++) {
            dweight[c] += d[c] * (x[c] - mu) * rs;
            dbias[c] += d[c];
        }
    }
}

void gpt_cpu_layernorm_backward(struct gpt_backend *be, float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp, const float *weight,
                                const float *mean, const float *rstd, size_t N, size_t C)
{
    /* Overwriting is accumulating onto zeros: the sums below, in order. */
    if (be->grad_assign) {
        memset(dweight, 0, C * sizeof(float));
        memset(dbias, 0, C * sizeof(float));
    }
    int nt = cpu_nt(be, N * C);
    if (nt == 1) {
        ln_backward_rows(dinp, dweight, dbias, dout, inp, weight, mean, rstd, 0, N, C);
        return;
    }
    /* Parallel: rows for dinp, then channels for the parameter gradients
     * (a second read of dout/inp, but race-free and deterministic). */
    size_t chunk = (N + (size_t)nt - 1) / (size_t)nt;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t r0 = 0; r0 < N; r0 += chunk)
        ln_backward_rows(dinp, NULL, NULL, dout, inp, weight, mean, rstd, r0,
                         r0 + chunk < N ? r0 + chunk : N, C);
    size_t cchunk = (C + (size_t)nt - 1) / (size_t)nt;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t c0 = 0; c0 < C; c0 += cchunk)
        ln_backward_params(dweight, dbias, dout, inp, mean, rstd, N, C, c0,
                           c0 + cchunk < C ? c0 + cchunk : C);
}

void gpt_cpu_matmul_forward(struct gpt_backend *be, float *out, const float *inp,
                            const float *weight, const float *bias, size_t N, size_t C, size_t OC)
{
    /* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC): the bias is
     * broadcast into out first so sgemm adds onto it (beta = 1). */
    float beta = 0.0f;
    if (bias) {
#pragma omp parallel for num_threads(cpu_nt(be, N *OC)) schedule(static)
        for (size_t n = 0; n < N; n++)
            memcpy(out + n * OC, bias, OC * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, (int)OC, (int)C, 1.0f, inp, (int)C,
                weight, (int)C, beta, out, (int)OC);
}

void gpt_cpu_matmul_backward(struct gpt_backend *be, float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *weight, size_t N,
                             size_t C, size_t OC)
{
    /* dinp (N,C) = dout (N,OC) @ weight (OC,C) */
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)N, (int)C, (int)OC, 1.0f, dout,
                    (int)OC, weight, (int)C, 0.0f, dinp, (int)C);
    /* Overwriting is accumulating onto zeros (bitwise what a caller's
     * zeroing then accumulation gives). */
    if (be->grad_assign) {
        memset(dweight, 0, OC * C * sizeof(float));
        if (dbias)
            memset(dbias, 0, OC * sizeof(float));
    }
    /* dweight (OC,C) += dout^T (OC,N) @ inp (N,C) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)OC, (int)C, (int)N, 1.0f, dout,
                (int)OC, inp, (int)C, 1.0f, dweight, (int)C);
    if (dbias) {
        /* Column sums; threads split the columns so each sums in row order. */
        int nt = cpu_nt(be, N * OC);
        size_t chunk = (OC + (size_t)nt - 1) / (size_t)nt;
        chunk = (chunk + 15) & ~(size_t)15;
#pragma omp parallel for num_threads(nt) schedule(static)
        for (size_t o0 = 0; o0 < OC; o0 += chunk) {
            size_t o1 = o0 + chunk < OC ? o0 + chunk : OC;
            float *restrict db = dbias;
            for (size_t n = 0; n < N; n++) {
                const float *restrict d = dout + n * OC;
#pragma omp simd
                for (size_t o = o0; o < o1; o++)
                    db[o] += d[o];
            }
        }
    }
}

GPT_CPU_CLONES
static void gelu_fwd_range(float *restrict out, const float *restrict inp, size_t i0, size_t i1)
{
#pragma omp simd
    for (size_t i = i0; i < i1; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
        out[i] = 0.5f * x * (1.0f + gpt_cpu_tanhf(u));
    }
}

void gpt_cpu_gelu_forward(struct gpt_backend *be, float *out, const float *inp, size_t n)
{
    int nt = cpu_nt(be, n);
    size_t chunk = (n + (size_t)nt - 1) / (size_t)nt;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i0 = 0; i0 < n; i0 += chunk)
        gelu_fwd_range(out, inp, i0, i0 + chunk < n ? i0 + chunk : n);
}

/* Through the logistic function: with s = 1/(1 + e^(-2u)),
 * 0.5 (1 + tanh(u)) = s and 1 - tanh(u)^2 = 4 s (1 - s), so
 * gelu'(x) = s + 2 x s (1 - s) du/dx: one exponential, one division.
 * e^(-2u) is clamped inside gpt_cpu_expf, so s is never NaN.
 * No restrict on dinp/dout: they may alias (element-wise, so it is safe). */
GPT_CPU_CLONES
static void gelu_bwd_range(float *dinp, const float *restrict inp, const float *dout, size_t i0,
                           size_t i1)
{
#pragma omp simd
    for (size_t i = i0; i < i1; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
        float sg = 1.0f / (1.0f + gpt_cpu_expf(-2.0f * u));
        float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
        float g = sg + 2.0f * x * sg * (1.0f - sg) * du;
        dinp[i] = g * dout[i];
    }
}

void gpt_cpu_gelu_backward(struct gpt_backend *be, float *dinp, const float *inp, const float *dout,
                           size_t n)
{
    int nt = cpu_nt(be, n);
    size_t chunk = (n + (size_t)nt - 1) / (size_t)nt;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i0 = 0; i0 < n; i0 += chunk)
        gelu_bwd_range(dinp, inp, dout, i0, i0 + chunk < n ? i0 + chunk : n);
}

void gpt_cpu_residual_forward(struct gpt_backend *be, float *out, const float *a, const float *b,
                              size_t n)
{
#pragma omp parallel for simd num_threads(cpu_nt(be, n)) schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

/* One row of the fused softmax + cross-entropy; returns the row's loss. */
GPT_CPU_CLONES
static float xent_row(float *restrict row, int target, size_t V, size_t Vp, float dscale, int write)
{
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (size_t j = 0; j < V; j++)
        mx = row[j] > mx ? row[j] : mx;
    float zt = row[target] - mx;
    float sum = 0.0f;
    if (write) {
        /* Keep the exponentials in the row, then turn them into dlogits. */
#pragma omp simd reduction(+ : sum)
        for (size_t j = 0; j < V; j++) {
            float e = gpt_cpu_expf(row[j] - mx);
            row[j] = e;
            sum += e;
        }
        float k = dscale / sum;
#pragma omp simd
        for (size_t j = 0; j < V; j++)
            row[j] *= k;
        row[target] -= dscale;
        for (size_t j = V; j < Vp; j++)
            row[j] = 0.0f;
    } else {
#pragma omp simd reduction(+ : sum)
        for (size_t j = 0; j < V; j++)
            sum += gpt_cpu_expf(row[j] - mx);
    }
    return logf(sum) - zt;
}

void gpt_cpu_softmax_xent(struct gpt_backend *be, float *logits, float *losses, const int *targets,
                          size_t N, size_t V, size_t Vp, float dscale, int write_dlogits)
{
    /* logits (N,Vp), losses (N), targets (N) */
#pragma omp parallel for num_threads(cpu_nt(be, N *V)) schedule(static)
    for (size_t n = 0; n < N; n++) {
        float *row = logits + n * Vp;
        int t = targets[n];
        float loss = 0.0f;
        if (t < 0) {
            if (write_dlogits)
                memset(row, 0, Vp * sizeof(float));
        } else {
            GPT_ASSERT((size_t)t < V);
            loss = xent_row(row, t, V, Vp, dscale, write_dlogits);
        }
        if (losses)
            losses[n] = loss;
    }
}
