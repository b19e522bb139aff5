/*
 * cpu_attention: causal multi-head self-attention for the CPU backend.
 * Every product (Q K^T, att V and the four backward products) is a
 * cblas_sgemm over strided views of qkv, one (batch, head) pair per OpenMP
 * iteration. Causality is exploited by walking the queries in row blocks:
 * block [i0, i1) only meets keys [0, i1), which skips most of the masked
 * upper triangle (about 1/2 - ATT_RB/(2T) of the work) without ever
 * materialising it. The softmax (scale, mask, normalise) is fused between
 * the two products. The (batch, head) pairs are split over the OpenMP
 * threads with OpenBLAS held to one thread meanwhile: its own threads would
 * otherwise pile onto the same cores for products far too small to share.
 * Runs on the thread that owns the backend.
 */
#include <math.h>

#include <cblas.h>

#include "cpu_impl.h"

/* Query rows per block: big enough for efficient sgemm, small enough to
 * skip most of the masked triangle. */
#define ATT_RB 64

/* OpenBLAS threads while `nt` OpenMP threads each call sgemm: one each. */
static void att_blas_enter(const struct gpt_backend *be, int nt)
{
    if (nt > 1 && be->threads > 1)
        openblas_set_num_threads(1);
}

static void att_blas_leave(const struct gpt_backend *be, int nt)
{
    if (nt > 1 && be->threads > 1)
        openblas_set_num_threads(be->threads);
}

/* In-place causal softmax of rows [i0, i1) of one (T,T) score matrix; the
 * entries j in (i, i1) are set to 0 so block products may include them. */
GPT_CPU_CLONES
static void att_softmax_rows(float *restrict att, size_t T, size_t i0, size_t i1)
{
    for (size_t i = i0; i < i1; i++) {
        float *restrict row = att + i * T;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (size_t j = 0; j <= i; j++)
            mx = row[j] > mx ? row[j] : mx;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (size_t j = 0; j <= i; j++) {
            float e = gpt_cpu_expf(row[j] - mx);
            row[j] = e;
            sum += e;
        }
        float inv = 1.0f / sum;
#pragma omp simd
        for (size_t j = 0; j <= i; j++)
            row[j] *= inv;
        for (size_t j = i + 1; j < i1; j++)
            row[j] = 0.0f;
    }
}

void gpt_cpu_attention_forward(struct gpt_backend *be, float *out, float *att, const float *qkv,
                               size_t B, size_t T, size_t C, size_t NH)
{
    /* out (B,T,C), att (B,NH,T,T), qkv (B,T,3C) */
    size_t hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    int nt = B * NH >= 2 ? be->threads : 1;
    att_blas_enter(be, nt);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (size_t bh = 0; bh < B * NH; bh++) {
        size_t b = bh / NH, h = bh % NH;
        const float *q = qkv + b * T * 3 * C + h * hs; /* (T,hs), stride 3C */
        const float *k = q + C;
        const float *v = q + 2 * C;
        float *a = att + bh * T * T;         /* (T,T) */
        float *o = out + b * T * C + h * hs; /* (T,hs), stride C */
        for (size_t i0 = 0; i0 < T; i0 += ATT_RB) {
            size_t i1 = i0 + ATT_RB < T ? i0 + ATT_RB : T;
            int rows = (int)(i1 - i0), keys = (int)i1;
            /* a[i0:i1, 0:i1] = scale * q[i0:i1] @ k[0:i1]^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, (int)hs, scale,
                        q + i0 * 3 * C, (int)(3 * C), k, (int)(3 * C), 0.0f, a + i0 * T, (int)T);
            att_softmax_rows(a, T, i0, i1);
            /* o[i0:i1] = a[i0:i1, 0:i1] @ v[0:i1] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, (int)hs, keys, 1.0f,
                        a + i0 * T, (int)T, v, (int)(3 * C), 0.0f, o + i0 * C, (int)C);
        }
    }
    att_blas_leave(be, nt);
}

/* Softmax backward of rows [i0, i1), in place on datt:
 * dpre[i,j] = att[i,j] * (datt[i,j] - sum_k att[i,k] datt[i,k]). att is 0
 * for j > i inside the block, so those entries come out 0 as they must. */
GPT_CPU_CLONES
static void att_softmax_backward_rows(float *restrict datt, const float *restrict att, size_t T,
                                      size_t i0, size_t i1)
{
    for (size_t i = i0; i < i1; i++) {
        float *restrict d = datt + i * T;
        const float *restrict a = att + i * T;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (size_t j = 0; j <= i; j++)
            s += a[j] * d[j];
#pragma omp simd
        for (size_t j = 0; j <= i; j++)
            d[j] = a[j] * (d[j] - s);
        for (size_t j = i + 1; j < i1; j++)
            d[j] = 0.0f;
    }
}

void gpt_cpu_attention_backward(struct gpt_backend *be, float *dqkv, float *scratch,
                                const float *dout, const float *out, const float *qkv,
                                const float *att, size_t B, size_t T, size_t C, size_t NH)
{
    /* dqkv (B,T,3C) overwritten, scratch (B,NH,T,T), dout (B,T,C),
     * qkv (B,T,3C), att (B,NH,T,T); out is not needed (att holds the
     * probabilities) */
    (void)out;
    size_t hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    int ld3 = (int)(3 * C);
    int nt = B * NH >= 2 ? be->threads : 1;
    att_blas_enter(be, nt);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (size_t bh = 0; bh < B * NH; bh++) {
        size_t b = bh / NH, h = bh % NH;
        const float *q = qkv + b * T * 3 * C + h * hs;
        const float *k = q + C;
        const float *v = q + 2 * C;
        float *dq = dqkv + b * T * 3 * C + h * hs;
        float *dk = dq + C;
        float *dv = dq + 2 * C;
        const float *a = att + bh * T * T;
        float *da = scratch + bh * T * T;
        const float *d = dout + b * T * C + h * hs; /* (T,hs), stride C */
        /* Walk the blocks from the last one: it meets every key, so with
         * beta = 0 it initialises all of dk and dv; earlier blocks add. */
        size_t nblk = (T + ATT_RB - 1) / ATT_RB;
        for (size_t blk = nblk; blk-- > 0;) {
            size_t i0 = blk * ATT_RB;
            size_t i1 = i0 + ATT_RB < T ? i0 + ATT_RB : T;
            int rows = (int)(i1 - i0), keys = (int)i1;
            float beta = blk == nblk - 1 ? 0.0f : 1.0f;
            /* dv[0:i1] (+)= a[i0:i1, 0:i1]^T @ d[i0:i1] */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, (int)hs, rows, 1.0f,
                        a + i0 * T, (int)T, d + i0 * C, (int)C, beta, dv, ld3);
            /* da[i0:i1, 0:i1] = d[i0:i1] @ v[0:i1]^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, (int)hs, 1.0f,
                        d + i0 * C, (int)C, v, ld3, 0.0f, da + i0 * T, (int)T);
            att_softmax_backward_rows(da, a, T, i0, i1);
            /* dq[i0:i1] = scale * da[i0:i1, 0:i1] @ k[0:i1] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, (int)hs, keys, scale,
                        da + i0 * T, (int)T, k, ld3, 0.0f, dq + i0 * 3 * C, ld3);
            /* dk[0:i1] (+)= scale * da[i0:i1, 0:i1]^T @ q[i0:i1] */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, (int)hs, rows, scale,
                        da + i0 * T, (int)T, q + i0 * 3 * C, ld3, beta, dk, ld3);
        }
    }
    att_blas_leave(be, nt);
}
