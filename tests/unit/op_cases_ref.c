/*
 * op_cases_ref: the plain references of the op cases (op_cases.h): each
 * op's outputs computed on the host in double arithmetic from a case's
 * initial contents, straight from the op's definition in backend_ops.def,
 * sharing no code with a backend. test_ops_gradcheck compares the CPU
 * backend with them. Test code; single-threaded.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_plan.h"
#include "unit/op_cases_impl.h"

#define F(i) ((float *)h[i])
#define I(i) ((const int *)h[i])
#define D(i) ((double *)h[i])

void opc_ref_zero(void *const *h, const struct opc_case *c)
{
    memset(h[1], 0, c->d[0] * sizeof(float));
}

/* upload: src into dst from offset d[1]; download: src from offset d[1]
 * into dst; the rest of dst stays zero. */
void opc_ref_xfer(void *const *h, const struct opc_case *c)
{
    size_t n = c->d[0] - c->d[1], off = c->d[1];
    int up = c->op == GPT_BACKEND_OP_upload;
    memcpy(F(1) + (up ? off : 0), F(0) + (up ? 0 : off), n * sizeof(float));
}

/* copy: dst[d1 + i] = src[d2 + i]; memzero: dst[d1, d1 + d2) = 0. */
void opc_ref_span(void *const *h, const struct opc_case *c)
{
    if (c->op == GPT_BACKEND_OP_memzero) {
        memset(F(1) + c->d[1], 0, c->d[2] * sizeof(float));
        return;
    }
    size_t skip = c->d[1] > c->d[2] ? c->d[1] : c->d[2];
    memcpy(F(1) + c->d[1], F(0) + c->d[2], (c->d[0] - skip) * sizeof(float));
}

void opc_ref_encoder(void *const *h, const struct opc_case *c)
{
    size_t B = c->d[0], T = c->d[1], C = c->d[2];
    for (size_t bt = 0; bt < B * T; bt++)
        for (size_t k = 0; k < C; k++)
            F(EN_OUT)
            [bt * C + k] = (float)((double)F(EN_WTE)[(size_t)I(EN_INP)[bt] * C + k] +
                                   (double)F(EN_WPE)[(bt % T) * C + k]);
}

/* LayerNorm of N rows of C: eps 1e-5, biased variance. */
static void ln_rows(float *out, float *mean, float *rstd, const float *inp, const float *w,
                    const float *b, size_t N, size_t C)
{
    for (size_t r = 0; r < N; r++) {
        const float *x = inp + r * C;
        double mu = 0.0, var = 0.0;
        for (size_t k = 0; k < C; k++)
            mu += x[k];
        mu /= (double)C;
        for (size_t k = 0; k < C; k++)
            var += (x[k] - mu) * (x[k] - mu);
        double rs = 1.0 / sqrt(var / (double)C + 1e-5);
        for (size_t k = 0; k < C; k++)
            out[r * C + k] = (float)((x[k] - mu) * rs * w[k] + b[k]);
        mean[r] = (float)mu;
        rstd[r] = (float)rs;
    }
}

void opc_ref_layernorm(void *const *h, const struct opc_case *c)
{
    ln_rows(F(LN_OUT), F(LN_MEAN), F(LN_RSTD), F(LN_INP), F(LN_W), F(LN_B), c->d[0], c->d[1]);
}

void opc_ref_residual_layernorm(void *const *h, const struct opc_case *c)
{
    size_t n = c->d[0] * c->d[1];
    for (size_t i = 0; i < n; i++)
        F(RLN_RES)[i] = (float)((double)F(RLN_RES)[i] + (double)F(RLN_SKIP)[i]);
    ln_rows(F(RLN_OUT), F(RLN_MEAN), F(RLN_RSTD), F(RLN_RES), F(RLN_W), F(RLN_B), c->d[0], c->d[1]);
}

/* out (N,OC) = inp (N,C) @ w (OC,C)^T + bias (or none) + res (or none),
 * in double; four partial sums, so that the large cases stay quick. */
static void mm(float *out, const float *inp, const float *w, const float *bias, const float *res,
               size_t N, size_t C, size_t OC)
{
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * C;
        for (size_t o = 0; o < OC; o++) {
            const float *wr = w + o * C;
            double s[4] = {0, 0, 0, 0};
            size_t k = 0;
            for (; k + 4 <= C; k += 4)
                for (int j = 0; j < 4; j++)
                    s[j] += (double)x[k + j] * (double)wr[k + j];
            for (; k < C; k++)
                s[0] += (double)x[k] * (double)wr[k];
            double y = s[0] + s[1] + s[2] + s[3];
            y += bias ? bias[o] : 0.0;
            y += res ? res[n * OC + o] : 0.0;
            out[n * OC + o] = (float)y;
        }
    }
}

void opc_ref_matmul(void *const *h, const struct opc_case *c)
{
    mm(F(MM_OUT), F(MM_INP), F(MM_W), F(MM_BIAS), NULL, c->d[0], c->d[1], c->d[2]);
}

void opc_ref_matmul_residual(void *const *h, const struct opc_case *c)
{
    mm(F(MMR_OUT), F(MMR_INP), F(MMR_W), F(MMR_BIAS), F(MMR_RES), c->d[0], c->d[1], c->d[2]);
}

static double gelu(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

void opc_ref_matmul_gelu(void *const *h, const struct opc_case *c)
{
    size_t n = c->d[0] * c->d[2];
    mm(F(MMG_PRE), F(MMG_INP), F(MMG_W), F(MMG_BIAS), NULL, c->d[0], c->d[1], c->d[2]);
    for (size_t i = 0; i < n; i++)
        F(MMG_OUT)[i] = (float)gelu(F(MMG_PRE)[i]);
}

void opc_ref_gelu(void *const *h, const struct opc_case *c)
{
    for (size_t i = 0; i < c->d[0]; i++)
        F(GE_OUT)[i] = (float)gelu(F(GE_INP)[i]);
}

/* Causal attention: for query i of head h, softmax over keys j <= i of
 * q.k / sqrt(hs), then the weighted sum of the values. */
void opc_ref_attention(void *const *h, const struct opc_case *c)
{
    size_t B = c->d[0], T = c->d[1], C = c->d[2], NH = c->d[3], hs = C / NH;
    const float *qkv = F(AT_QKV);
    double *p = malloc(T * sizeof(double)), scale = 1.0 / sqrt((double)hs);
    if (!p)
        abort();
    for (size_t b = 0; b < B; b++)
        for (size_t hd = 0; hd < NH; hd++)
            for (size_t i = 0; i < T; i++) {
                const float *q = qkv + (b * T + i) * 3 * C + hd * hs;
                double mx = -INFINITY, sum = 0.0;
                for (size_t j = 0; j <= i; j++) {
                    const float *k = qkv + (b * T + j) * 3 * C + C + hd * hs;
                    double s = 0.0;
                    for (size_t e = 0; e < hs; e++)
                        s += (double)q[e] * (double)k[e];
                    p[j] = s * scale;
                    mx = p[j] > mx ? p[j] : mx;
                }
                for (size_t j = 0; j <= i; j++)
                    sum += p[j] = exp(p[j] - mx);
                float *o = F(AT_OUT) + (b * T + i) * C + hd * hs;
                for (size_t e = 0; e < hs; e++) {
                    double y = 0.0;
                    for (size_t j = 0; j <= i; j++)
                        y += p[j] * (double)qkv[(b * T + j) * 3 * C + 2 * C + hd * hs + e];
                    o[e] = (float)(y / sum);
                }
            }
    free(p);
}

void opc_ref_residual(void *const *h, const struct opc_case *c)
{
    for (size_t i = 0; i < c->d[0]; i++)
        F(2)[i] = (float)((double)F(0)[i] + (double)F(1)[i]);
}

void opc_ref_scale(void *const *h, const struct opc_case *c)
{
    for (size_t i = 0; i < c->d[0]; i++)
        F(0)[i] = (float)((double)F(0)[i] * (double)OPC_SCALE);
}

void opc_ref_sumsq(void *const *h, const struct opc_case *c)
{
    double s = 0.0;
    for (size_t i = 0; i < c->d[0]; i++)
        s += (double)F(0)[i] * (double)F(0)[i];
    D(1)[0] = s;
    if (c->op == GPT_BACKEND_OP_sumsq)
        D(1)[1] = s; /* the second call: the same */
}

void opc_ref_loss_accum(void *const *h, const struct opc_case *c)
{
    size_t N = c->d[0], half = (N + 1) / 2;
    double all = 0.0, first = 0.0;
    for (size_t i = 0; i < N; i++) {
        all += F(0)[i];
        first += i < half ? F(0)[i] : 0.0;
    }
    D(1)[0] = 0.25 * all + 3.0 * first;
}

/* Each row's loss over its first V columns (0 for a negative target); a
 * loss-only call leaves the logits as they were. */
void opc_ref_xent(void *const *h, const struct opc_case *c)
{
    size_t N = c->d[0], V = c->d[1], Vp = c->d[2];
    for (size_t r = 0; r < N; r++) {
        const float *z = F(XE_LOGITS) + r * Vp;
        int t = I(XE_TARGETS)[r];
        double mx = -INFINITY, se = 0.0;
        for (size_t j = 0; j < V; j++)
            mx = z[j] > mx ? z[j] : mx;
        for (size_t j = 0; j < V; j++)
            se += exp(z[j] - mx);
        F(XE_LOSSES)[r] = t < 0 ? 0.0f : (float)(log(se) + mx - z[t]);
    }
    if (!(c->flags & (OPC_XENT_DL | OPC_XENT_AFTER)))
        memcpy(F(XE_WORK), F(XE_LOGITS), N * Vp * sizeof(float));
}

/* Three AdamW steps of elements [off, off + n) with decay wd; the moments
 * and parameters kept in fp32 between steps, as every backend keeps them. */
static void adamw_span(void *const *h, size_t off, size_t n, float wd, float gs)
{
    for (int t = 1; t <= 3; t++) {
        double bc1 = 1.0f - powf(OPC_AW_B1, (float)t), bc2 = 1.0f - powf(OPC_AW_B2, (float)t);
        for (size_t i = off; i < off + n; i++) {
            double g = (double)F(AW_G)[i] * gs, p = F(AW_P)[i];
            double m = OPC_AW_B1 * (double)F(AW_M)[i] + (1.0 - OPC_AW_B1) * g;
            double v = OPC_AW_B2 * (double)F(AW_V)[i] + (1.0 - OPC_AW_B2) * g * g;
            p -= (double)OPC_AW_LR * wd * p;
            p -= OPC_AW_LR * (m / bc1) / (sqrt(v / bc2) + OPC_AW_EPS);
            F(AW_M)[i] = (float)m;
            F(AW_V)[i] = (float)v;
            F(AW_P)[i] = (float)p;
        }
    }
}

void opc_ref_adamw(void *const *h, const struct opc_case *c)
{
    if (c->op == GPT_BACKEND_OP_adamw) {
        adamw_span(h, 0, c->d[0], OPC_AW_WD, OPC_AW_GRAD_SCALE);
        return;
    }
    float gs = c->op == GPT_BACKEND_OP_adamw_multi_clip
                   ? gpt_cuda_clip_scale(D(AW_SUMSQ)[0], OPC_AW_CLIP)
                   : OPC_AW_GRAD_SCALE;
    struct gpt_adamw_span *sp = calloc(c->d[0], sizeof(*sp));
    if (!sp)
        abort();
    opc_spans(c, sp);
    for (size_t s = 0; s < c->d[0]; s++)
        adamw_span(h, sp[s].off, sp[s].n, sp[s].decay ? OPC_AW_WD : 0.0f, gs);
    free(sp);
}
