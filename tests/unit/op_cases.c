/*
 * op_cases: the descriptors of the backend's stream ops (how to lay out,
 * run and differentiate each), their plain references, and the one table
 * of their cases (op_cases.h): everything a new op adds to the tests.
 * Test code; single-threaded.
 */
#include "unit/op_cases.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_plan.h"

/* Tensor layouts (indices into b[] and h[]); a forward's case stops where
 * its backward's own tensors start. */
enum { EN_OUT, EN_INP, EN_WTE, EN_WPE, EN_DOUT, EN_DWTE, EN_DWPE };
enum { LN_OUT, LN_MEAN, LN_RSTD, LN_INP, LN_W, LN_B, LN_DOUT, LN_DINP, LN_DW, LN_DB };
enum { RLN_RES, RLN_SKIP, RLN_W, RLN_B, RLN_OUT, RLN_MEAN, RLN_RSTD };
enum { MM_OUT, MM_INP, MM_W, MM_BIAS, MM_DOUT, MM_DINP, MM_DW, MM_DB };
enum { MMR_OUT, MMR_INP, MMR_W, MMR_BIAS, MMR_RES };
enum { MMG_OUT, MMG_PRE, MMG_INP, MMG_W, MMG_BIAS };
enum { DG_PRE, DG_INP, DG_W, DG_BIAS, DG_OUT, DG_DOUT, DG_DINP, DG_DW, DG_DB };
enum { AT_OUT, AT_ATT, AT_QKV, AT_DOUT, AT_SCRATCH, AT_DQKV };
enum { GE_INP, GE_OUT, GE_DOUT, GE_DINP };
enum { XE_LOGITS, XE_TARGETS, XE_LOSSES, XE_WORK };
enum { AW_P, AW_G, AW_M, AW_V, AW_SUMSQ };

/* The scale case's factor and the optimizer cases' arguments (three
 * steps, t = 1..3). */
#define OPC_SCALE         0.37f
#define OPC_AW_LR         1e-3f
#define OPC_AW_B1         0.9f
#define OPC_AW_B2         0.95f
#define OPC_AW_EPS        1e-8f
#define OPC_AW_WD         0.1f
#define OPC_AW_GRAD_SCALE 0.5f
#define OPC_AW_CLIP       1.0

/* The spans of an adamw_multi* case (d: spans, start) into sp (NULL: only
 * counted); returns the end of the last. */
static size_t opc_spans(const struct opc_case *c, struct gpt_adamw_span *sp);

/* ---- tensors ------------------------------------------------------------ */

static struct opc_tensor in_f(const char *name, size_t n, double lo, double hi)
{
    return (struct opc_tensor){
        .name = name, .n = n, .type = OPC_F32, .role = OPC_IN, .lo = lo, .hi = hi, .of = -1};
}

static struct opc_tensor out_f(const char *name, size_t n, double lo, double hi)
{
    return (struct opc_tensor){
        .name = name, .n = n, .type = OPC_F32, .role = OPC_OUT, .lo = lo, .hi = hi, .of = -1};
}

static struct opc_tensor state_f(const char *name, size_t n)
{
    return (struct opc_tensor){
        .name = name, .n = n, .type = OPC_F32, .role = OPC_STATE, .lo = 0, .hi = 0, .of = -1};
}

/* d loss / d t[of]; acc: the op adds to it (random start), else it
 * overwrites it (start 7, which a missed element would keep). */
static struct opc_tensor grad_f(const char *name, size_t n, int of, int acc)
{
    return (struct opc_tensor){.name = name,
                               .n = n,
                               .type = OPC_F32,
                               .role = OPC_GRAD,
                               .lo = acc ? -1 : 7,
                               .hi = acc ? 1 : 7,
                               .of = of,
                               .acc = acc};
}

/* A forward's outputs: compared in the forward's own cases, the saved
 * state the backward reads in the backward's. */
static struct opc_tensor fwd_out(const struct opc_case *c, enum gpt_backend_op fwd,
                                 const char *name, size_t n)
{
    return c->op == fwd ? out_f(name, n, 0, 0) : state_f(name, n);
}

static double opc_dot(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * (double)b[i];
    return s;
}

#define F(i)        ((float *)b[i])
#define I(i)        ((int *)b[i])
#define D(i)        ((double *)b[i])
#define OP_IS(name) (c->op == GPT_BACKEND_OP_##name)

/* ---- memory ------------------------------------------------------------- */

/* alloc: a new buffer reads as zeros. mem_free: so does one allocated
 * after a written one was freed. d: n. */
static int mem_tensors(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t)
{
    (void)be;
    t[0] = in_f("src", c->d[0], -1, 1);
    t[1] = out_f("new buffer", c->d[0], 5, 5);
    return 2;
}

static int mem_run(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    size_t bytes = c->d[0] * sizeof(float);
    void *p;
    int rc = gpt_backend_alloc(be, bytes, &p);
    if (rc < 0)
        return rc;
    if (OP_IS(mem_free)) {
        gpt_backend_copy(be, p, b[0], bytes);
        gpt_backend_mem_free(be, p);
        rc = gpt_backend_alloc(be, bytes, &p);
        if (rc < 0)
            return rc;
    }
    gpt_backend_copy(be, b[1], p, bytes);
    gpt_backend_mem_free(be, p);
    return 0;
}

/* upload, download: through the host, at an offset into the destination
 * (upload) or the source (download). d: n, offset. */
static int xfer_tensors(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t)
{
    (void)be;
    t[0] = in_f("src", c->d[0], -1, 1);
    t[1] = out_f("dst", c->d[0], 0, 0);
    return 2;
}

static int xfer_run(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    size_t n = c->d[0] - c->d[1], off = c->d[1];
    float *h = malloc(n * sizeof(float) + 1);
    if (!h)
        return -ENOMEM;
    int up = OP_IS(upload);
    int rc = gpt_backend_download(be, h, F(0) + (up ? 0 : off), n * sizeof(float));
    if (rc == 0)
        rc = gpt_backend_upload(be, F(1) + (up ? off : 0), h, n * sizeof(float));
    free(h);
    return rc;
}

/* copy: d: n, destination offset, source offset. memzero: d: n, offset,
 * count. */
static int span_tensors(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t)
{
    (void)be;
    t[0] = in_f("src", c->d[0], -1, 1);
    t[1] = out_f("dst", c->d[0], -1, 1);
    return 2;
}

static int span_run(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    if (OP_IS(memzero)) {
        gpt_backend_memzero(be, F(1) + c->d[1], c->d[2] * sizeof(float));
        return 0;
    }
    size_t skip = c->d[1] > c->d[2] ? c->d[1] : c->d[2];
    gpt_backend_copy(be, F(1) + c->d[1], F(0) + c->d[2], (c->d[0] - skip) * sizeof(float));
    return 0;
}

/* ---- encoder: d B, T, C, Vp --------------------------------------------- */

static int enc_tensors(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t)
{
    (void)be;
    size_t B = c->d[0], T = c->d[1], C = c->d[2], Vp = c->d[3];
    t[EN_OUT] = fwd_out(c, GPT_BACKEND_OP_encoder_forward, "out", B * T * C);
    /* A few distinct tokens: many repeats, which the GPU's backward sums. */
    t[EN_INP] = (struct opc_tensor){.name = "inp",
                                    .n = B * T,
                                    .type = OPC_I32,
                                    .role = OPC_IN,
                                    .lo = 0,
                                    .hi = Vp < 6 ? Vp : 6,
                                    .of = -1};
    t[EN_WTE] = in_f("wte", Vp * C, -1, 1);
    t[EN_WPE] = in_f("wpe", T * C, -1, 1);
    if (OP_IS(encoder_forward))
        return EN_DOUT;
    t[EN_DOUT] = in_f("dout", B * T * C, -1, 1);
    t[EN_DWTE] = grad_f("dwte", Vp * C, EN_WTE, 1);
    t[EN_DWPE] = grad_f("dwpe", T * C, EN_WPE, 1);
    return EN_DWPE + 1;
}

static void enc_fwd(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    gpt_backend_encoder_forward(be, F(EN_OUT), I(EN_INP), F(EN_WTE), F(EN_WPE), c->d[0], c->d[1],
                                c->d[2]);
}

static int enc_run(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    if (OP_IS(encoder_forward))
        enc_fwd(be, b, c);
    else
        gpt_backend_encoder_backward(be, F(EN_DWTE), F(EN_DWPE), F(EN_DOUT), I(EN_INP), c->d[0],
                                     c->d[1], c->d[2]);
    return 0;
}

static double enc_loss(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    enc_fwd(be, b, c);
    return opc_dot(F(EN_OUT), F(EN_DOUT), c->d[0] * c->d[1] * c->d[2]);
}

/* ---- layernorm: d N, C --------------------------------------------------- */
static int ln_tensors(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t)
{
    (void)be;
    size_t N = c->d[0], C = c->d[1];
    enum gpt_backend_op fwd = GPT_BACKEND_OP_layernorm_forward;
    t[LN_OUT] = fwd_out(c, fwd, "out", N * C);
    t[LN_MEAN] = fwd_out(c, fwd, "mean", N);
    t[LN_RSTD] = fwd_out(c, fwd, "rstd", N);
    t[LN_INP] = in_f("inp", N * C, -3, 5); /* a mean away from 0 */
    t[LN_W] = in_f("weight", C, 0.5, 1.5);
    t[LN_B] = in_f("bias", C, -1, 1);
    if (OP_IS(layernorm_forward))
        return LN_DOUT;
    t[LN_DOUT] = in_f("dout", N * C, -1, 1);
    t[LN_DINP] = grad_f("dinp", N * C, LN_INP, 1); /* the residual stream's: accumulates */
    t[LN_DW] = grad_f("dweight", C, LN_W, 1);
    t[LN_DB] = grad_f("dbias", C, LN_B, 1);
    return LN_DB + 1;
}

static void ln_fwd(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    gpt_backend_layernorm_forward(be, F(LN_OUT), F(LN_MEAN), F(LN_RSTD), F(LN_INP), F(LN_W),
                                  F(LN_B), c->d[0], c->d[1]);
}

static int ln_run(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    ln_fwd(be, b, c);
    if (OP_IS(layernorm_backward))
        gpt_backend_layernorm_backward(be, F(LN_DINP), F(LN_DW), F(LN_DB), F(LN_DOUT), F(LN_INP),
                                       F(LN_W), F(LN_MEAN), F(LN_RSTD), c->d[0], c->d[1]);
    return 0;
}

static double ln_loss(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    ln_fwd(be, b, c);
    return opc_dot(F(LN_OUT), F(LN_DOUT), c->d[0] * c->d[1]);
}

/* residual_layernorm_forward: res = a + skip in place (res aliases a, as
 * the model calls it), then LayerNorm of res. d: N, C. */
static int rln_tensors(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t)
{
    (void)be;
    size_t N = c->d[0], C = c->d[1];
    t[RLN_RES] = out_f("res", N * C, -3, 3);
    t[RLN_RES].exact = 1; /* one IEEE add */
    t[RLN_SKIP] = in_f("skip", N * C, -2, 2);
    t[RLN_W] = in_f("weight", C, 0.5, 1.5);
    t[RLN_B] = in_f("bias", C, -1, 1);
    t[RLN_OUT] = out_f("out", N * C, 0, 0);
    t[RLN_MEAN] = out_f("mean", N, 0, 0);
    t[RLN_RSTD] = out_f("rstd", N, 0, 0);
    return RLN_RSTD + 1;
}

static int rln_run(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    gpt_backend_residual_layernorm_forward(be, F(RLN_RES), F(RLN_OUT), F(RLN_MEAN), F(RLN_RSTD),
                                           F(RLN_RES), F(RLN_SKIP), F(RLN_W), F(RLN_B), c->d[0],
                                           c->d[1]);
    return 0;
}

/* ---- matmul: d N, C, OC ------------------------------------------------- */
static int mm_tensors(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t)
{
    (void)be;
    size_t N = c->d[0], C = c->d[1], OC = c->d[2], nb = c->flags & OPC_BIAS ? OC : 0;
    t[MM_OUT] = fwd_out(c, GPT_BACKEND_OP_matmul_forward, "out", N * OC);
    t[MM_INP] = in_f("inp", N * C, -1, 1);
    t[MM_W] = in_f("weight", OC * C, -0.5, 0.5);
    t[MM_BIAS] = in_f("bias", nb, -1, 1);
    if (OP_IS(matmul_forward))
        return MM_DOUT;
    t[MM_DOUT] = in_f("dout", N * OC, -1, 1);
    t[MM_DINP] = grad_f("dinp", c->flags & OPC_DINP ? N * C : 0, MM_INP, 0);
    t[MM_DW] = grad_f("dweight", OC * C, MM_W, 1);
    t[MM_DB] = grad_f("dbias", nb, MM_BIAS, 1);
    return MM_DB + 1;
}

static void mm_fwd(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    gpt_backend_matmul_forward(be, F(MM_OUT), F(MM_INP), F(MM_W), F(MM_BIAS), c->d[0], c->d[1],
                               c->d[2]);
}

static int mm_run(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    if (OP_IS(matmul_forward))
        mm_fwd(be, b, c);
    else
        gpt_backend_matmul_backward(be, F(MM_DINP), F(MM_DW), F(MM_DB), F(MM_DOUT), F(MM_INP),
                                    F(MM_W), c->d[0], c->d[1], c->d[2]);
    return 0;
}

static double mm_loss(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    mm_fwd(be, b, c);
    return opc_dot(F(MM_OUT), F(MM_DOUT), c->d[0] * c->d[2]);
}

/* matmul_residual_forward: out = inp @ weight^T + bias + res; res stays
 * as it was (compared, bit for bit). d: N, C, OC. */
static int mmr_tensors(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t)
{
    (void)be;
    size_t N = c->d[0], C = c->d[1], OC = c->d[2];
    t[MMR_OUT] = out_f("out", N * OC, 0, 0);
    t[MMR_INP] = in_f("inp", N * C, -1, 1);
    t[MMR_W] = in_f("weight", OC * C, -0.5, 0.5);
    t[MMR_BIAS] = in_f("bias", c->flags & OPC_BIAS ? OC : 0, -1, 1);
    t[MMR_RES] = out_f("res (intact)", N * OC, -3, 3);
    t[MMR_RES].exact = 1;
    return MMR_RES + 1;
}

static int mmr_run(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    gpt_backend_matmul_residual_forward(be, F(MMR_OUT), F(MMR_INP), F(MMR_W), F(MMR_BIAS),
                                        F(MMR_RES), c->d[0], c->d[1], c->d[2]);
    return 0;
}

/* matmul_gelu_forward: pre = inp @ weight^T + bias, out = gelu(pre).
 * d: N, C, OC. */
static int mmg_tensors(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t)
{
    (void)be;
    size_t N = c->d[0], C = c->d[1], OC = c->d[2];
    t[MMG_OUT] = out_f("out", N * OC, 0, 0);
    t[MMG_PRE] = out_f("pre", N * OC, 0, 0);
    t[MMG_INP] = in_f("inp", N * C, -1, 1);
    t[MMG_W] = in_f("weight", OC * C, -0.5, 0.5);
    t[MMG_BIAS] = in_f("bias", c->flags & OPC_BIAS ? OC : 0, -1, 1);
    return MMG_BIAS + 1;
}

static int mmg_run(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    gpt_backend_matmul_gelu_forward(be, F(MMG_OUT), F(MMG_PRE), F(MMG_INP), F(MMG_W), F(MMG_BIAS),
                                    c->d[0], c->d[1], c->d[2]);
    return 0;
}

/* matmul_backward_dgelu: the backward of y = gelu(pre) @ weight^T + bias
 * (the MLP's second product): inp = gelu(pre) (N, C), dinp = d/dpre.
 * d: N, C (the GELU's width, the product's input), OC. */

static int dg_tensors(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t)
{
    (void)be;
    size_t N = c->d[0], C = c->d[1], OC = c->d[2], nb = c->flags & OPC_BIAS ? OC : 0;
    t[DG_PRE] = in_f("pre_gelu", N * C, -3, 3);
    t[DG_INP] = state_f("inp", N * C);
    t[DG_W] = in_f("weight", OC * C, -0.5, 0.5);
    t[DG_BIAS] = in_f("bias", nb, -1, 1);
    t[DG_OUT] = state_f("out", N * OC);
    t[DG_DOUT] = in_f("dout", N * OC, -1, 1);
    t[DG_DINP] = grad_f("dinp", N * C, DG_PRE, 0);
    t[DG_DW] = grad_f("dweight", OC * C, DG_W, 1);
    t[DG_DB] = grad_f("dbias", nb, DG_BIAS, 1);
    return DG_DB + 1;
}

static int dg_run(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    size_t N = c->d[0], C = c->d[1], OC = c->d[2];
    gpt_backend_gelu_forward(be, F(DG_INP), F(DG_PRE), N * C);
    gpt_backend_matmul_backward_dgelu(be, F(DG_DINP), F(DG_DW), F(DG_DB), F(DG_DOUT), F(DG_INP),
                                      F(DG_W), F(DG_PRE), N, C, OC);
    return 0;
}

static double dg_loss(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    size_t N = c->d[0], C = c->d[1], OC = c->d[2];
    gpt_backend_gelu_forward(be, F(DG_INP), F(DG_PRE), N * C);
    gpt_backend_matmul_forward(be, F(DG_OUT), F(DG_INP), F(DG_W), F(DG_BIAS), N, C, OC);
    return opc_dot(F(DG_OUT), F(DG_DOUT), N * OC);
}

/* ---- attention: d B, T, C, NH ------------------------------------------- */

/* Floats of att (scratch 0) or of the backward's scratch: the CPU's
 * (B,NH,T,T), or what `be` asks where that is more. */
static size_t att_size(const struct opc_case *c, struct gpt_backend *be, int scratch)
{
    size_t B = c->d[0], T = c->d[1], C = c->d[2], NH = c->d[3], full = B * NH * T * T;
    size_t n = be ? gpt_backend_att_floats(be, B, T, C, NH, scratch) : full;
    return n > full ? n : full;
}

static int att_tensors(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t)
{
    size_t B = c->d[0], T = c->d[1], C = c->d[2];
    t[AT_OUT] = fwd_out(c, GPT_BACKEND_OP_attention_forward, "out", B * T * C);
    t[AT_ATT] = state_f("att", att_size(c, be, 0));
    t[AT_QKV] = in_f("qkv", B * T * 3 * C, -2, 2);
    if (OP_IS(attention_forward))
        return AT_DOUT;
    t[AT_DOUT] = in_f("dout", B * T * C, -1, 1);
    t[AT_SCRATCH] = state_f("scratch", att_size(c, be, 1));
    t[AT_DQKV] = grad_f("dqkv", B * T * 3 * C, AT_QKV, 0);
    return AT_DQKV + 1;
}

static void att_fwd(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    gpt_backend_attention_forward(be, F(AT_OUT), F(AT_ATT), F(AT_QKV), c->d[0], c->d[1], c->d[2],
                                  c->d[3]);
}

static int att_run(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    att_fwd(be, b, c);
    if (OP_IS(attention_backward))
        gpt_backend_attention_backward(be, F(AT_DQKV), F(AT_SCRATCH), F(AT_DOUT), F(AT_OUT),
                                       F(AT_QKV), F(AT_ATT), c->d[0], c->d[1], c->d[2], c->d[3]);
    return 0;
}

static double att_loss(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    att_fwd(be, b, c);
    return opc_dot(F(AT_OUT), F(AT_DOUT), c->d[0] * c->d[1] * c->d[2]);
}

/* ---- element-wise: d n ------------------------------------------------- */

/* gelu_backward runs in place (dinp aliases dout), as the model does. */
static int gelu_tensors(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t)
{
    (void)be;
    size_t n = c->d[0];
    t[GE_INP] = in_f("inp", n, -6, 6);
    t[GE_OUT] = fwd_out(c, GPT_BACKEND_OP_gelu_forward, "out", n);
    t[GE_OUT].floor = 1.0;
    if (OP_IS(gelu_forward))
        return GE_DOUT;
    t[GE_DOUT] = in_f("dout", n, -1, 1);
    t[GE_DINP] = grad_f("dinp", n, GE_INP, 0);
    t[GE_DINP].floor = 1.0;
    return GE_DINP + 1;
}

static int gelu_run(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    size_t n = c->d[0];
    if (OP_IS(gelu_forward)) {
        gpt_backend_gelu_forward(be, F(GE_OUT), F(GE_INP), n);
        return 0;
    }
    gpt_backend_copy(be, F(GE_DINP), F(GE_DOUT), n * sizeof(float));
    gpt_backend_gelu_backward(be, F(GE_DINP), F(GE_INP), F(GE_DINP), n);
    return 0;
}

static double gelu_loss(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    gpt_backend_gelu_forward(be, F(GE_OUT), F(GE_INP), c->d[0]);
    return opc_dot(F(GE_OUT), F(GE_DOUT), c->d[0]);
}

/* residual_forward: out = a + b, or in place (OPC_IN_PLACE: out holds a). */
static int res_tensors(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t)
{
    (void)be;
    t[0] = in_f("a", c->d[0], -3, 3);
    t[1] = in_f("b", c->d[0], -6, 6);
    t[2] = out_f("out", c->d[0], 0, 0);
    return 3;
}

static int res_run(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    size_t n = c->d[0];
    if (c->flags & OPC_IN_PLACE) {
        gpt_backend_copy(be, F(2), F(0), n * sizeof(float));
        gpt_backend_residual_forward(be, F(2), F(2), F(1), n);
    } else {
        gpt_backend_residual_forward(be, F(2), F(0), F(1), n);
    }
    return 0;
}

/* scale: x *= 0.37 in place. */
static int scale_tensors(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t)
{
    (void)be;
    t[0] = out_f("x", c->d[0], -3, 3);
    return 1;
}

static int scale_run(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    gpt_backend_scale(be, F(0), OPC_SCALE, c->d[0]);
    return 0;
}

/* sumsq twice (the same sum again), and sumsq_dev: into a double. The
 * host path of sumsq_dev (a backend without the step-on-device ops, as
 * the trainer takes it) is sumsq. */
static int sumsq_tensors(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t)
{
    (void)be;
    t[0] = in_f("x", c->d[0], -6, 6);
    t[1] = (struct opc_tensor){.name = "sum",
                               .n = OP_IS(sumsq) ? 2 : 1,
                               .type = OPC_F64,
                               .role = OPC_OUT,
                               .lo = 0,
                               .hi = 0,
                               .of = -1};
    return 2;
}

static int sumsq_run(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    size_t n = c->d[0];
    if (OP_IS(sumsq_dev) && gpt_backend_step_on_device(be)) {
        gpt_backend_sumsq_dev(be, D(1), F(0), n);
        return 0;
    }
    double s[2] = {gpt_backend_sumsq(be, F(0), n), 0.0};
    if (OP_IS(sumsq))
        s[1] = gpt_backend_sumsq(be, F(0), n);
    return gpt_backend_upload(be, D(1), s, (OP_IS(sumsq) ? 2 : 1) * sizeof(double));
}

/* loss_accum: acc = 0.25 * sum(losses), then + 3 * the sum of the first
 * half (a shorter batch, accumulated). Host path: the trainer's sum of the
 * downloaded losses. d: N. */
static int lacc_tensors(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t)
{
    (void)be;
    t[0] = in_f("losses", c->d[0], 0, 5);
    t[1] = (struct opc_tensor){
        .name = "acc", .n = 1, .type = OPC_F64, .role = OPC_OUT, .lo = 7, .hi = 7, .of = -1};
    return 2;
}

static int lacc_run(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    size_t N = c->d[0], half = (N + 1) / 2;
    if (gpt_backend_step_on_device(be)) {
        gpt_backend_loss_accum(be, D(1), F(0), N, 0.25, 1);
        gpt_backend_loss_accum(be, D(1), F(0), half, 3.0, 0);
        return 0;
    }
    float *h = malloc(N * sizeof(float));
    if (!h)
        return -ENOMEM;
    int rc = gpt_backend_download(be, h, F(0), N * sizeof(float));
    double all = 0.0, first = 0.0;
    for (size_t i = 0; i < N; i++) {
        all += h[i];
        if (i + 1 == half)
            first = all;
    }
    double acc = 0.25 * all;
    acc += 3.0 * first;
    free(h);
    return rc < 0 ? rc : gpt_backend_upload(be, D(1), &acc, sizeof(acc));
}

/* ---- softmax + cross-entropy: d N, V, Vp -------------------------------- */

/* work: a copy of the logits the op runs on; after a loss-only call the
 * logits, intact; else the dlogits (d loss / d logits, loss = the mean of
 * the losses: dscale 1/N). */
static int xent_tensors(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t)
{
    (void)be;
    size_t N = c->d[0], V = c->d[1], Vp = c->d[2];
    t[XE_LOGITS] = in_f("logits", N * Vp, -8, 8);
    /* About a fifth of the targets negative: ignored. */
    t[XE_TARGETS] = (struct opc_tensor){.name = "targets",
                                        .n = N,
                                        .type = OPC_I32,
                                        .role = OPC_IN,
                                        .lo = -(double)(V / 4 + 1),
                                        .hi = (double)V,
                                        .of = -1};
    t[XE_LOSSES] = out_f("losses", N, 0, 0);
    t[XE_LOSSES].floor = 1.0;
    if (c->flags & (OPC_XENT_DL | OPC_XENT_AFTER))
        t[XE_WORK] = grad_f("dlogits", N * Vp, XE_LOGITS, 0);
    else
        t[XE_WORK] = out_f("logits (intact)", N * Vp, 0, 0);
    return XE_WORK + 1;
}

static float xent_dscale(const struct opc_case *c)
{
    return 1.0f / (float)c->d[0];
}

static int xent_run(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    size_t N = c->d[0], V = c->d[1], Vp = c->d[2];
    float *w = F(XE_WORK);
    gpt_backend_copy(be, w, F(XE_LOGITS), N * Vp * sizeof(float));
    if (c->flags & OPC_XENT_DL) {
        gpt_backend_softmax_xent(be, w, F(XE_LOSSES), I(XE_TARGETS), N, V, Vp, xent_dscale(c), 1);
        return 0;
    }
    gpt_backend_softmax_xent(be, w, F(XE_LOSSES), I(XE_TARGETS), N, V, Vp, 0.0f, 0);
    if (c->flags & OPC_XENT_AFTER)
        gpt_backend_softmax_xent(be, w, F(XE_LOSSES), I(XE_TARGETS), N, V, Vp, xent_dscale(c),
                                 GPT_XENT_AFTER_LOSS);
    return 0;
}

static double xent_loss(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    size_t N = c->d[0];
    gpt_backend_softmax_xent(be, F(XE_LOGITS), F(XE_LOSSES), I(XE_TARGETS), N, c->d[1], c->d[2],
                             0.0f, 0);
    double s = 0.0;
    for (size_t i = 0; i < N; i++)
        s += F(XE_LOSSES)[i];
    return s * xent_dscale(c);
}

/* ---- optimizer ----------------------------------------------------------- */

/* adamw: three steps on n elements. d: n. */
static int adamw_tensors(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t)
{
    (void)be;
    size_t n = c->d[0];
    if (OP_IS(adamw_multi) || OP_IS(adamw_multi_clip))
        n = opc_spans(c, NULL) + 5; /* and 5 past the last span, untouched */
    t[AW_P] = out_f("params", n, -1, 1);
    t[AW_G] = in_f("grads", n, -1, 1);
    t[AW_M] = out_f("m", n, -0.1, 0.1);
    t[AW_V] = out_f("v", n, 0, 0.01);
    if (!OP_IS(adamw_multi_clip))
        return AW_SUMSQ;
    /* A norm above the clip (1): the factor scales the update. */
    t[AW_SUMSQ] = (struct opc_tensor){
        .name = "sumsq", .n = 1, .type = OPC_F64, .role = OPC_IN, .lo = 2, .hi = 4, .of = -1};
    return AW_SUMSQ + 1;
}

static size_t opc_spans(const struct opc_case *c, struct gpt_adamw_span *sp)
{
    size_t n_spans = c->d[0], start = c->d[1], pos = start;
    for (size_t i = 0; i < n_spans; i++) {
        size_t n = 1 + (i * 7919) % 3000;
        if ((c->flags & OPC_GAP) && i == n_spans / 2)
            pos += 17;
        /* From an aligned start: the last span ends on a multiple of 4,
         * so the four-at-a-time loop runs to the end. */
        if (start % 4 == 0 && i == n_spans - 1)
            n += (4 - (pos + n - start) % 4) % 4;
        if (sp)
            sp[i] = (struct gpt_adamw_span){pos, n, (int)(i % 2)};
        pos += n;
    }
    return pos;
}

static int adamw_run(struct gpt_backend *be, void *const *b, const struct opc_case *c)
{
    struct gpt_adamw_span *sp = NULL;
    size_t ns = c->d[0];
    if (!OP_IS(adamw)) {
        sp = calloc(ns, sizeof(*sp));
        if (!sp)
            return -ENOMEM;
        opc_spans(c, sp);
    }
    int rc = 0;
    float gs = OPC_AW_GRAD_SCALE;
    int on_dev = OP_IS(adamw_multi_clip) && gpt_backend_step_on_device(be);
    if (OP_IS(adamw_multi_clip) && !on_dev) { /* the host path: the factor on the host */
        double s;
        rc = gpt_backend_download(be, &s, D(AW_SUMSQ), sizeof(s));
        gs = gpt_cuda_clip_scale(s, OPC_AW_CLIP);
    }
    for (int t = 1; t <= 3 && rc == 0; t++) {
        float bc1 = 1.0f - powf(OPC_AW_B1, (float)t), bc2 = 1.0f - powf(OPC_AW_B2, (float)t);
        if (OP_IS(adamw))
            gpt_backend_adamw(be, F(AW_P), F(AW_G), F(AW_M), F(AW_V), c->d[0], OPC_AW_LR, OPC_AW_B1,
                              OPC_AW_B2, OPC_AW_EPS, OPC_AW_WD, gs, bc1, bc2);
        else if (on_dev)
            gpt_backend_adamw_multi_clip(be, F(AW_P), F(AW_G), F(AW_M), F(AW_V), sp, ns, OPC_AW_LR,
                                         OPC_AW_B1, OPC_AW_B2, OPC_AW_EPS, OPC_AW_WD, D(AW_SUMSQ),
                                         OPC_AW_CLIP, bc1, bc2);
        else
            gpt_backend_adamw_multi(be, F(AW_P), F(AW_G), F(AW_M), F(AW_V), sp, ns, OPC_AW_LR,
                                    OPC_AW_B1, OPC_AW_B2, OPC_AW_EPS, OPC_AW_WD, gs, bc1, bc2);
    }
    free(sp);
    return rc;
}

/* ---- the plain references ---------------------------------------------------
 * Each op's outputs computed on the host in double arithmetic from a
 * case's initial contents, straight from the op's definition in
 * backend_ops.def, sharing no code with a backend (opc_op.ref): each
 * writes the OPC_OUT tensors of its op's cases into h. */
#undef F
#undef I
#undef D
#define F(i) ((float *)h[i])
#define I(i) ((const int *)h[i])
#define D(i) ((double *)h[i])

static void opc_ref_zero(void *const *h, const struct opc_case *c)
{
    memset(h[1], 0, c->d[0] * sizeof(float));
}

/* upload: src into dst from offset d[1]; download: src from offset d[1]
 * into dst; the rest of dst stays zero. */
static void opc_ref_xfer(void *const *h, const struct opc_case *c)
{
    size_t n = c->d[0] - c->d[1], off = c->d[1];
    int up = c->op == GPT_BACKEND_OP_upload;
    memcpy(F(1) + (up ? off : 0), F(0) + (up ? 0 : off), n * sizeof(float));
}

/* copy: dst[d1 + i] = src[d2 + i]; memzero: dst[d1, d1 + d2) = 0. */
static void opc_ref_span(void *const *h, const struct opc_case *c)
{
    if (c->op == GPT_BACKEND_OP_memzero) {
        memset(F(1) + c->d[1], 0, c->d[2] * sizeof(float));
        return;
    }
    size_t skip = c->d[1] > c->d[2] ? c->d[1] : c->d[2];
    memcpy(F(1) + c->d[1], F(0) + c->d[2], (c->d[0] - skip) * sizeof(float));
}

static void opc_ref_encoder(void *const *h, const struct opc_case *c)
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

static void opc_ref_layernorm(void *const *h, const struct opc_case *c)
{
    ln_rows(F(LN_OUT), F(LN_MEAN), F(LN_RSTD), F(LN_INP), F(LN_W), F(LN_B), c->d[0], c->d[1]);
}

static void opc_ref_residual_layernorm(void *const *h, const struct opc_case *c)
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

static void opc_ref_matmul(void *const *h, const struct opc_case *c)
{
    mm(F(MM_OUT), F(MM_INP), F(MM_W), F(MM_BIAS), NULL, c->d[0], c->d[1], c->d[2]);
}

static void opc_ref_matmul_residual(void *const *h, const struct opc_case *c)
{
    mm(F(MMR_OUT), F(MMR_INP), F(MMR_W), F(MMR_BIAS), F(MMR_RES), c->d[0], c->d[1], c->d[2]);
}

static double gelu(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static void opc_ref_matmul_gelu(void *const *h, const struct opc_case *c)
{
    size_t n = c->d[0] * c->d[2];
    mm(F(MMG_PRE), F(MMG_INP), F(MMG_W), F(MMG_BIAS), NULL, c->d[0], c->d[1], c->d[2]);
    for (size_t i = 0; i < n; i++)
        F(MMG_OUT)[i] = (float)gelu(F(MMG_PRE)[i]);
}

static void opc_ref_gelu(void *const *h, const struct opc_case *c)
{
    for (size_t i = 0; i < c->d[0]; i++)
        F(GE_OUT)[i] = (float)gelu(F(GE_INP)[i]);
}

/* Causal attention: for query i of head h, softmax over keys j <= i of
 * q.k / sqrt(hs), then the weighted sum of the values. */
static void opc_ref_attention(void *const *h, const struct opc_case *c)
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

static void opc_ref_residual(void *const *h, const struct opc_case *c)
{
    for (size_t i = 0; i < c->d[0]; i++)
        F(2)[i] = (float)((double)F(0)[i] + (double)F(1)[i]);
}

static void opc_ref_scale(void *const *h, const struct opc_case *c)
{
    for (size_t i = 0; i < c->d[0]; i++)
        F(0)[i] = (float)((double)F(0)[i] * (double)OPC_SCALE);
}

static void opc_ref_sumsq(void *const *h, const struct opc_case *c)
{
    double s = 0.0;
    for (size_t i = 0; i < c->d[0]; i++)
        s += (double)F(0)[i] * (double)F(0)[i];
    D(1)[0] = s;
    if (c->op == GPT_BACKEND_OP_sumsq)
        D(1)[1] = s; /* the second call: the same */
}

static void opc_ref_loss_accum(void *const *h, const struct opc_case *c)
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
static void opc_ref_xent(void *const *h, const struct opc_case *c)
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

static void opc_ref_adamw(void *const *h, const struct opc_case *c)
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

#undef F
#undef I
#undef D

/* ---- the descriptors, one per stream op of backend_ops.def -------------- */

#define OPC_DESC(slot, dims_, tensors_, run_, ref_, loss_)                                         \
    const struct opc_op opc_desc_##slot = {dims_, tensors_, run_, ref_, loss_};

OPC_DESC(alloc, "n", mem_tensors, mem_run, opc_ref_zero, NULL)
OPC_DESC(mem_free, "n", mem_tensors, mem_run, opc_ref_zero, NULL)
OPC_DESC(upload, "n off", xfer_tensors, xfer_run, opc_ref_xfer, NULL)
OPC_DESC(download, "n off", xfer_tensors, xfer_run, opc_ref_xfer, NULL)
OPC_DESC(copy, "n dst src", span_tensors, span_run, opc_ref_span, NULL)
OPC_DESC(memzero, "n off count", span_tensors, span_run, opc_ref_span, NULL)
OPC_DESC(encoder_forward, "B T C Vp", enc_tensors, enc_run, opc_ref_encoder, NULL)
OPC_DESC(encoder_backward, "B T C Vp", enc_tensors, enc_run, NULL, enc_loss)
OPC_DESC(layernorm_forward, "N C", ln_tensors, ln_run, opc_ref_layernorm, NULL)
OPC_DESC(layernorm_backward, "N C", ln_tensors, ln_run, NULL, ln_loss)
OPC_DESC(matmul_forward, "N C OC", mm_tensors, mm_run, opc_ref_matmul, NULL)
OPC_DESC(matmul_backward, "N C OC", mm_tensors, mm_run, NULL, mm_loss)
OPC_DESC(attention_forward, "B T C NH", att_tensors, att_run, opc_ref_attention, NULL)
OPC_DESC(attention_backward, "B T C NH", att_tensors, att_run, NULL, att_loss)
OPC_DESC(gelu_forward, "n", gelu_tensors, gelu_run, opc_ref_gelu, NULL)
OPC_DESC(gelu_backward, "n", gelu_tensors, gelu_run, NULL, gelu_loss)
OPC_DESC(residual_forward, "n", res_tensors, res_run, opc_ref_residual, NULL)
OPC_DESC(softmax_xent, "N V Vp", xent_tensors, xent_run, opc_ref_xent, xent_loss)
OPC_DESC(adamw, "n", adamw_tensors, adamw_run, opc_ref_adamw, NULL)
OPC_DESC(sumsq, "n", sumsq_tensors, sumsq_run, opc_ref_sumsq, NULL)
OPC_DESC(scale, "n", scale_tensors, scale_run, opc_ref_scale, NULL)
OPC_DESC(matmul_gelu_forward, "N C OC", mmg_tensors, mmg_run, opc_ref_matmul_gelu, NULL)
OPC_DESC(matmul_backward_dgelu, "N C OC", dg_tensors, dg_run, NULL, dg_loss)
OPC_DESC(residual_layernorm_forward, "N C", rln_tensors, rln_run, opc_ref_residual_layernorm, NULL)
OPC_DESC(adamw_multi, "spans start", adamw_tensors, adamw_run, opc_ref_adamw, NULL)
OPC_DESC(matmul_residual_forward, "N C OC", mmr_tensors, mmr_run, opc_ref_matmul_residual, NULL)
OPC_DESC(loss_accum, "N", lacc_tensors, lacc_run, opc_ref_loss_accum, NULL)
OPC_DESC(sumsq_dev, "n", sumsq_tensors, sumsq_run, opc_ref_sumsq, NULL)
OPC_DESC(adamw_multi_clip, "spans start", adamw_tensors, adamw_run, opc_ref_adamw, NULL)

/* Generated from the list: a stream op without its opc_desc_<slot> above
 * fails to link. */
#define OPC_DESC_OP(name) extern const struct opc_op opc_desc_##name;
#define OPC_DESC_CTL(name)
#define GPT_OP(wrap, group, ret, name, params, args, pre) OPC_DESC_##group(name)
#include "backend_ops.def"
#undef OPC_DESC_OP
#undef OPC_DESC_CTL

static const struct opc_op *const opc_ops[GPT_BACKEND_OP_COUNT] = {
#define OPC_DESC_OP(name) [GPT_BACKEND_OP_##name] = &opc_desc_##name,
#define OPC_DESC_CTL(name)
#define GPT_OP(wrap, group, ret, name, params, args, pre) OPC_DESC_##group(name)
#include "backend_ops.def"
#undef OPC_DESC_OP
#undef OPC_DESC_CTL
};

const struct opc_op *opc_op_of(enum gpt_backend_op op)
{
    return (unsigned)op < GPT_BACKEND_OP_COUNT ? opc_ops[op] : NULL;
}

/* ---- helpers ------------------------------------------------------------- */

/* Moves *len past what snprintf wrote into buf (cap bytes), truncated. */
static void tag_adv(size_t cap, size_t *len, int k)
{
    if (k > 0)
        *len += (size_t)k < cap - *len ? (size_t)k : cap - *len - 1;
}

const char *opc_tag(const struct opc_case *c, char *buf, size_t cap)
{
    static const struct {
        unsigned flag;
        const char *word;
    } words[] = {{OPC_BIAS, "bias"},
                 {OPC_DINP, "dinp"},
                 {OPC_IN_PLACE, "in place"},
                 {OPC_XENT_DL, "dlogits"},
                 {OPC_XENT_AFTER, "dlogits after a loss call"},
                 {OPC_GAP, "a gap"}};
    const struct opc_op *o = opc_op_of(c->op);
    char names[32];
    size_t len = 0;
    buf[0] = '\0';
    snprintf(names, sizeof(names), "%s", o ? o->dims : "");
    char *save = NULL, *name = strtok_r(names, " ", &save);
    for (int i = 0; i < 4 && name; i++, name = strtok_r(NULL, " ", &save))
        tag_adv(cap, &len, snprintf(buf + len, cap - len, "%s%s%zu", i ? " " : "", name, c->d[i]));
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (c->flags & words[i].flag)
            tag_adv(cap, &len, snprintf(buf + len, cap - len, " %s", words[i].word));
    return buf;
}

uint64_t opc_seed(const struct opc_case *c)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the words */
    uint64_t words[6] = {(uint64_t)c->op, c->d[0], c->d[1], c->d[2], c->d[3], c->flags};
    for (int i = 0; i < 6; i++)
        for (int byte = 0; byte < 8; byte++)
            h = (h ^ ((words[i] >> (8 * byte)) & 0xff)) * 1099511628211ull;
    return h;
}

size_t opc_type_size(enum opc_type type)
{
    return type == OPC_F64 ? sizeof(double) : type == OPC_I32 ? sizeof(int) : sizeof(float);
}

void opc_fill(const struct opc_tensor *t, struct gpt_rng *rng, void *host)
{
    for (size_t i = 0; i < t->n; i++) {
        double u = t->lo == t->hi ? 0.0 : gpt_rng_uniform(rng);
        double x = t->lo + (t->hi - t->lo) * u;
        if (t->type == OPC_I32)
            ((int *)host)[i] = (int)floor(x);
        else if (t->type == OPC_F64)
            ((double *)host)[i] = x;
        else
            ((float *)host)[i] = (float)x;
    }
}

static double elem(enum opc_type type, const void *p, size_t i)
{
    return type == OPC_F64 ? ((const double *)p)[i] : (double)((const float *)p)[i];
}

double opc_err(enum opc_type type, const void *want, const void *got, size_t n, double floor_,
               size_t *ret_at)
{
    double maxref = 0.0, maxdiff = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double w = elem(type, want, i), g = elem(type, got, i);
        double d = isnan(w) != isnan(g) ? INFINITY : fabs(g - w);
        if (d > maxdiff) {
            maxdiff = d;
            at = i;
        }
        maxref = fabs(w) > maxref ? fabs(w) : maxref;
    }
    if (ret_at)
        *ret_at = at;
    maxref = maxref > floor_ ? maxref : floor_;
    return maxref > 0.0 ? maxdiff / maxref : maxdiff;
}

/* ---- the cases ------------------------------------------------------------
 * One row per case: op, shape (the descriptor's dims), flags, the GPU's
 * precisions, the fp32 and bf16 bounds, and 1 where the CPU checks every
 * input element's gradient by finite differences (else along one random
 * direction: the large shapes). Bounds: the largest difference over the
 * largest reference value. Products sum up to C terms in another order
 * than the CPU's OpenBLAS; element-wise ops differ in libm's last bit;
 * in bf16 the inputs of products and attention are rounded to 8
 * significant bits (2^-9 each), while the other ops' outputs stay fp32. */
#define ROW(op, d0, d1, d2, d3, flags, dtypes, tol, tol_bf16, grad)                                \
    {                                                                                              \
        GPT_BACKEND_OP_##op, {d0, d1, d2, d3}, flags, dtypes, tol, tol_bf16, grad                  \
    }
#define FP32 OPC_FP32
#define BOTH (OPC_FP32 | OPC_BF16)
/* matmul_forward / matmul_backward over the products' shapes: without a
 * bias (and with dinp: the bf16 run too where `even`), then with one
 * (dinp where `dinp`, the bf16 run where not `even`). */
#define MATMUL(N, C, OC, even, dinp)                                                               \
    ROW(matmul_forward, N, C, OC, 0, 0, (even) ? BOTH : FP32, 1e-4, 2e-2, 0),                      \
        ROW(matmul_forward, N, C, OC, 0, OPC_BIAS, (even) ? FP32 : BOTH, 1e-4, 2e-2, 0),           \
        ROW(matmul_backward, N, C, OC, 0, OPC_DINP, (even) ? BOTH : FP32, 1e-4, 2e-2, 0),          \
        ROW(matmul_backward, N, C, OC, 0, OPC_BIAS | ((dinp) ? OPC_DINP : 0),                      \
            (even) ? FP32 : BOTH, 1e-4, 2e-2, 0)
/* The shapes a model has (B, T, C, NH, Vp, V): one row each for the
 * encoder, LayerNorm (N = B*T), attention (both GPU paths) and the
 * classifier's three ways. */
#define MODEL(B, T, C, NH, V, Vp)                                                                  \
    ROW(encoder_forward, B, T, C, Vp, 0, FP32, 1e-6, 0, 0),                                        \
        ROW(encoder_backward, B, T, C, Vp, 0, FP32, 1e-5, 0, 0),                                   \
        ROW(layernorm_forward, (B) * (T), C, 0, 0, 0, FP32, 2e-5, 2e-5, 0),                        \
        ROW(layernorm_backward, (B) * (T), C, 0, 0, 0, FP32, 1e-4, 1e-4, 0),                       \
        ROW(attention_forward, B, T, C, NH, 0, FP32, 1e-4, 3e-2, 0),                               \
        ROW(attention_backward, B, T, C, NH, 0, FP32, 2e-4, 5e-2, 0),                              \
        ROW(softmax_xent, (B) * (T), V, Vp, 0, 0, FP32, 2e-5, 3e-2, 0),                            \
        ROW(softmax_xent, (B) * (T), V, Vp, 0, OPC_XENT_DL, FP32, 2e-5, 3e-2, 0),                  \
        ROW(softmax_xent, (B) * (T), V, Vp, 0, OPC_XENT_AFTER, FP32, 2e-5, 3e-2, 0)
/* Attention on the GPU's flash kernels only: T around and between their
 * 64- and 32-row tiles, head sizes 4 to 128. */
#define FLASH(B, T, C, NH)                                                                         \
    ROW(attention_forward, B, T, C, NH, OPC_FLASH_ONLY, BOTH, 1e-4, 3e-2, 0),                      \
        ROW(attention_backward, B, T, C, NH, OPC_FLASH_ONLY, BOTH, 2e-4, 5e-2, 0)
/* The element-wise ops and AdamW over n elements. */
#define ELEMENTWISE(n)                                                                             \
    ROW(gelu_forward, n, 0, 0, 0, 0, BOTH, 1e-5, 1e-5, 0),                                         \
        ROW(gelu_backward, n, 0, 0, 0, 0, BOTH, 1e-5, 1e-5, 0),                                    \
        ROW(residual_forward, n, 0, 0, 0, OPC_IN_PLACE, FP32, 0, 0, 0),                            \
        ROW(scale, n, 0, 0, 0, 0, FP32, 0, 0, 0), ROW(sumsq, n, 0, 0, 0, 0, FP32, 1e-9, 1e-9, 0),  \
        ROW(sumsq_dev, n, 0, 0, 0, 0, FP32, 1e-9, 1e-9, 0),                                        \
        ROW(adamw, n, 0, 0, 0, 0, BOTH, 1e-5, 1e-5, 0)

const struct opc_case opc_cases[] = {
    /* memory */
    ROW(alloc, 3, 0, 0, 0, 0, FP32, 0, 0, 0),
    ROW(alloc, 1000003, 0, 0, 0, 0, FP32, 0, 0, 0),
    ROW(mem_free, 257, 0, 0, 0, 0, FP32, 0, 0, 0),
    ROW(upload, 1000003, 0, 0, 0, 0, FP32, 0, 0, 0),
    ROW(upload, 31, 1, 0, 0, 0, FP32, 0, 0, 0),
    ROW(download, 1000003, 0, 0, 0, 0, FP32, 0, 0, 0),
    ROW(download, 31, 3, 0, 0, 0, FP32, 0, 0, 0),
    ROW(copy, 1000003, 1, 3, 0, 0, FP32, 0, 0, 0),
    ROW(memzero, 1000003, 5, 777, 0, 0, FP32, 0, 0, 0),

    /* small shapes with every gradient element checked */
    ROW(encoder_forward, 2, 5, 7, 6, 0, FP32, 1e-6, 0, 0),
    ROW(encoder_backward, 2, 5, 7, 6, 0, FP32, 1e-5, 0, 1),
    ROW(layernorm_forward, 6, 13, 0, 0, 0, FP32, 2e-5, 2e-5, 0),
    ROW(layernorm_backward, 6, 13, 0, 0, 0, FP32, 1e-4, 1e-4, 1),
    ROW(layernorm_forward, 40, 70, 0, 0, 0, FP32, 2e-5, 2e-5, 0),
    ROW(layernorm_backward, 40, 70, 0, 0, 0, FP32, 1e-4, 1e-4, 1),
    ROW(matmul_forward, 7, 5, 9, 0, OPC_BIAS, FP32, 1e-4, 2e-2, 0),
    ROW(matmul_backward, 7, 5, 9, 0, OPC_BIAS | OPC_DINP, FP32, 1e-4, 2e-2, 1),
    ROW(matmul_backward, 4, 6, 3, 0, OPC_DINP, FP32, 1e-4, 2e-2, 1),
    ROW(matmul_backward, 60, 17, 70, 0, OPC_BIAS | OPC_DINP, FP32, 1e-4, 2e-2, 1),
    ROW(attention_forward, 2, 5, 6, 2, 0, FP32, 1e-4, 3e-2, 0),
    ROW(attention_backward, 2, 5, 6, 2, 0, FP32, 2e-4, 5e-2, 1),
    /* T past one 64-row block, odd sizes */
    ROW(attention_backward, 2, 70, 6, 3, 0, FP32, 2e-4, 5e-2, 1),
    ROW(gelu_forward, 203, 0, 0, 0, 0, FP32, 1e-5, 1e-5, 0),
    ROW(gelu_backward, 203, 0, 0, 0, 0, FP32, 1e-5, 1e-5, 1),
    ROW(residual_forward, 37, 0, 0, 0, 0, FP32, 0, 0, 0),
    ROW(residual_forward, 37, 0, 0, 0, OPC_IN_PLACE, FP32, 0, 0, 0),
    ROW(softmax_xent, 6, 11, 16, 0, 0, FP32, 2e-5, 3e-2, 0),
    ROW(softmax_xent, 6, 11, 16, 0, OPC_XENT_DL, FP32, 2e-5, 3e-2, 1),
    ROW(softmax_xent, 6, 11, 16, 0, OPC_XENT_AFTER, FP32, 2e-5, 3e-2, 1),
    ROW(matmul_gelu_forward, 7, 5, 12, 0, 0, FP32, 2e-4, 2e-2, 0),
    ROW(matmul_backward_dgelu, 7, 12, 5, 0, 0, FP32, 2e-4, 5e-2, 1),
    ROW(matmul_backward_dgelu, 5, 9, 4, 0, OPC_BIAS, FP32, 2e-4, 5e-2, 1),
    ROW(matmul_residual_forward, 5, 7, 3, 0, OPC_BIAS, FP32, 1e-4, 2e-2, 0),
    ROW(sumsq, 40000, 0, 0, 0, 0, FP32, 1e-9, 1e-9, 0),
    ROW(scale, 40000, 0, 0, 0, 0, FP32, 0, 0, 0),

    /* a model's shapes: sizes of no block's multiple, B > NH (batched
     * over b), the vocabulary padded or not */
    MODEL(1, 1, 4, 1, 3, 3),
    MODEL(2, 5, 12, 3, 17, 32),
    MODEL(3, 33, 48, 4, 100, 128),
    MODEL(4, 64, 64, 4, 257, 320),
    MODEL(1, 129, 96, 6, 1000, 1024),
    MODEL(2, 100, 36, 12, 65, 65),
    MODEL(5, 17, 8, 2, 50, 64),
    FLASH(2, 100, 256, 4),
    FLASH(1, 1000, 768, 12),
    FLASH(3, 37, 64, 4),
    FLASH(2, 129, 512, 4),
    FLASH(1, 65, 96, 3),
    FLASH(4, 64, 48, 4),
    FLASH(2, 31, 8, 2),
    FLASH(1, 257, 384, 6),

    /* LayerNorm's kernels: the single pass (C 768), the row kernel
     * (C 2048), C % 8 (the scalar loops), GPT-2's 1024 blocks, blocks
     * capped by the backend's scratch (C 1536) */
    ROW(layernorm_forward, 4096, 768, 0, 0, 0, BOTH, 2e-5, 2e-5, 0),
    ROW(layernorm_backward, 4096, 768, 0, 0, 0, BOTH, 1e-4, 1e-4, 0),
    ROW(layernorm_forward, 100, 2048, 0, 0, 0, FP32, 2e-5, 2e-5, 0),
    ROW(layernorm_backward, 100, 2048, 0, 0, 0, FP32, 1e-4, 1e-4, 0),
    ROW(layernorm_forward, 37, 44, 0, 0, 0, BOTH, 2e-5, 2e-5, 0),
    ROW(layernorm_backward, 37, 44, 0, 0, 0, BOTH, 1e-4, 1e-4, 0),
    ROW(layernorm_forward, 33, 48, 0, 0, 0, BOTH, 2e-5, 2e-5, 0),
    ROW(layernorm_backward, 33, 48, 0, 0, 0, BOTH, 1e-4, 1e-4, 0),
    ROW(layernorm_forward, 16384, 768, 0, 0, 0, FP32, 2e-5, 2e-5, 0),
    ROW(layernorm_backward, 16384, 768, 0, 0, 0, FP32, 1e-4, 1e-4, 0),
    ROW(layernorm_forward, 16384, 1536, 0, 0, 0, FP32, 2e-5, 2e-5, 0),
    ROW(layernorm_backward, 16384, 1536, 0, 0, 0, FP32, 1e-4, 1e-4, 0),
    ROW(residual_layernorm_forward, 4096, 768, 0, 0, 0, FP32, 2e-5, 2e-5, 0),
    ROW(residual_layernorm_forward, 33, 48, 0, 0, 0, FP32, 2e-5, 2e-5, 0),

    /* the classifier at GPT-2's vocabulary, and fp32 rows past the GPU's
     * shared-memory stage (60032 * 4 bytes > 227 KiB) */
    ROW(softmax_xent, 64, 50257, 50304, 0, 0, FP32, 2e-5, 3e-2, 0),
    ROW(softmax_xent, 64, 50257, 50304, 0, OPC_XENT_DL, FP32, 2e-5, 3e-2, 0),
    ROW(softmax_xent, 64, 50257, 50304, 0, OPC_XENT_AFTER, FP32, 2e-5, 3e-2, 0),
    ROW(softmax_xent, 16, 60000, 60032, 0, 0, FP32, 2e-5, 3e-2, 0),
    ROW(softmax_xent, 16, 60000, 60032, 0, OPC_XENT_DL, FP32, 2e-5, 3e-2, 0),
    ROW(softmax_xent, 16, 60000, 60032, 0, OPC_XENT_AFTER, FP32, 2e-5, 3e-2, 0),

    /* products: 1, odd widths (cuBLAS's fallback), GPT-2's MLP */
    MATMUL(1, 1, 1, 1, 0),
    MATMUL(7, 5, 3, 0, 1),
    MATMUL(66, 48, 144, 1, 0),
    MATMUL(256, 64, 37, 0, 1),
    MATMUL(320, 96, 1000, 1, 0),
    MATMUL(1024, 768, 3072, 0, 1),
    ROW(matmul_gelu_forward, 64, 48, 192, 0, OPC_BIAS, FP32, 2e-4, 2e-2, 0),
    ROW(matmul_gelu_forward, 1024, 768, 3072, 0, OPC_BIAS, BOTH, 2e-4, 2e-2, 0),
    ROW(matmul_backward_dgelu, 64, 192, 48, 0, OPC_BIAS, FP32, 2e-4, 5e-2, 0),
    ROW(matmul_backward_dgelu, 1024, 3072, 768, 0, OPC_BIAS, BOTH, 2e-4, 5e-2, 0),
    /* unaligned: the GPU's separate ops */
    ROW(matmul_backward_dgelu, 7, 12, 5, 0, 0, FP32, 2e-4, 5e-2, 0),
    ROW(matmul_residual_forward, 1024, 3072, 768, 0, OPC_BIAS, BOTH, 1e-4, 2e-2, 0),
    ROW(matmul_residual_forward, 66, 48, 144, 0, 0, FP32, 1e-4, 2e-2, 0),
    ROW(matmul_residual_forward, 7, 5, 3, 0, OPC_BIAS, BOTH, 1e-4, 2e-2, 0),

    /* element-wise: 1, odd, past one block, past a grid's worth */
    ELEMENTWISE(1),
    ELEMENTWISE(31),
    ELEMENTWISE(257),
    ELEMENTWISE(100003),
    ELEMENTWISE(3000017),
    ROW(residual_forward, 100003, 0, 0, 0, 0, FP32, 0, 0, 0),

    /* AdamW over spans (d: spans, start): from float 3 the scalar loop,
     * from 0 the four-at-a-time one (spans ending inside a group of
     * four); 1500 spans: more than one launch's table */
    ROW(adamw_multi, 1, 3, 0, 0, 0, FP32, 1e-5, 1e-5, 0),
    ROW(adamw_multi, 148, 3, 0, 0, 0, BOTH, 1e-5, 1e-5, 0),
    ROW(adamw_multi, 148, 3, 0, 0, OPC_GAP, FP32, 1e-5, 1e-5, 0),
    ROW(adamw_multi, 1500, 3, 0, 0, 0, FP32, 1e-5, 1e-5, 0),
    ROW(adamw_multi, 1, 0, 0, 0, 0, FP32, 1e-5, 1e-5, 0),
    ROW(adamw_multi, 148, 0, 0, 0, 0, BOTH, 1e-5, 1e-5, 0),
    ROW(adamw_multi_clip, 1, 3, 0, 0, 0, FP32, 1e-5, 1e-5, 0),
    ROW(adamw_multi_clip, 148, 0, 0, 0, 0, FP32, 1e-5, 1e-5, 0),
    ROW(adamw_multi_clip, 148, 3, 0, 0, OPC_GAP, FP32, 1e-5, 1e-5, 0),
    /* the step's loss on the device: summed in another order */
    ROW(loss_accum, 1, 0, 0, 0, 0, FP32, 1e-12, 1e-12, 0),
    ROW(loss_accum, 1000, 0, 0, 0, 0, FP32, 1e-12, 1e-12, 0),
    ROW(loss_accum, 100003, 0, 0, 0, 0, FP32, 1e-12, 1e-12, 0),
};

const size_t opc_n_cases = sizeof(opc_cases) / sizeof(opc_cases[0]);
