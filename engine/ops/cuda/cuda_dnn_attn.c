/*
 * cuda_dnn_attn: cuDNN's fused attention graph (see cuda_dnn_attn.h).
 */
#include "cuda_dnn_attn.h"

#include <errno.h>
#include <float.h>
#include <stdbool.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* The values this file passes to cuDNN, from cuDNN 9's cudnn_graph_v9.h
 * (9.19; the backend API keeps them stable across 9.x). Defined here so
 * the build needs no cuDNN header. */
enum {
    DNN_OK = 0,
    DNN_NOT_SUPPORTED = 3000,
    /* cudnnDataType_t */
    DT_FLOAT = 0,
    DT_INT32 = 4,
    DT_BF16 = 9,
    DT_BOOL = 11,
    /* cudnnBackendAttributeType_t */
    AT_HANDLE = 0,
    AT_DATA_TYPE = 1,
    AT_BOOLEAN = 2,
    AT_INT64 = 3,
    AT_VOID_PTR = 6,
    AT_HEUR_MODE = 8,
    AT_NUMERICAL_NOTE = 11,
    AT_POINTWISE_MODE = 14,
    AT_DESCRIPTOR = 15,
    AT_REDUCTION_OP = 18,
    /* cudnnBackendDescriptorType_t */
    D_POINTWISE = 0,
    D_ENGINE = 2,
    D_ENGINECFG = 3,
    D_ENGINEHEUR = 4,
    D_PLAN = 5,
    D_OP_POINTWISE = 13,
    D_GRAPH = 15,
    D_VARIANT_PACK = 16,
    D_TENSOR = 17,
    D_MATMUL = 18,
    D_OP_MATMUL = 19,
    D_REDUCTION = 21,
    D_OP_REDUCTION = 22,
    D_OP_RESHAPE = 31,
    /* cudnnBackendAttributeName_t */
    A_PW_MODE = 0,
    A_PW_MATH_PREC = 1,
    A_PW_AXIS = 9,
    A_HEUR_MODE = 200,
    A_HEUR_GRAPH = 201,
    A_HEUR_RESULTS = 202,
    A_CFG_ENGINE = 300,
    A_PLAN_HANDLE = 400,
    A_PLAN_CFG = 401,
    A_PLAN_WORKSPACE = 402,
    A_OP_PW_DESC = 750,
    A_OP_PW_X = 751,
    A_OP_PW_B = 752,
    A_OP_PW_Y = 753,
    A_OP_PW_T = 758,
    A_GRAPH_HANDLE = 800,
    A_GRAPH_OPS = 801,
    A_T_ALIGN = 900,
    A_T_DTYPE = 901,
    A_T_DIMS = 902,
    A_T_STRIDES = 903,
    A_T_UID = 906,
    A_T_VIRTUAL = 907,
    A_T_BY_VALUE = 908,
    A_VP_UIDS = 1000,
    A_VP_PTRS = 1001,
    A_VP_WORKSPACE = 1003,
    A_ENGINE_NOTE = 1303,
    A_MM_COMP = 1500,
    A_OP_MM_A = 1520,
    A_OP_MM_B = 1521,
    A_OP_MM_C = 1522,
    A_OP_MM_DESC = 1523,
    A_RED_OP = 1600,
    A_RED_COMP = 1601,
    A_OP_RED_X = 1610,
    A_OP_RED_Y = 1611,
    A_OP_RED_DESC = 1612,
    A_OP_RESHAPE_X = 2200,
    A_OP_RESHAPE_Y = 2201,
    /* cudnnPointwiseMode_t */
    PW_ADD = 0,
    PW_MUL = 1,
    PW_DIV = 6,
    PW_SUB = 9,
    PW_EXP = 13,
    PW_LOG = 15,
    PW_CMP_GE = 303,
    PW_GEN_INDEX = 501,
    PW_BINARY_SELECT = 601,
    /* cudnnReduceTensorOp_t */
    RED_ADD = 0,
    RED_MAX = 3,
    /* cudnnBackendHeurMode_t, cudnnBackendNumericalNote_t */
    HEUR_MODE_A = 3,
    NOTE_NONDETERMINISTIC = 4,
};

/* Engine configurations the heuristics may offer that are tried. */
#define DNN_CONFIGS_MAX  8
#define DNN_VIRTUAL_UID0 100

/* ---- layouts --------------------------------------------------------------- */

int gpt_cudnn_sdpa_layout(const struct gpt_cudnn_sdpa_shape *s, int uid, int64_t dims[4],
                          int64_t strides[4])
{
    const int64_t B = s->B, T = s->T, C = s->C, NH = s->NH, hs = NH > 0 ? C / NH : 0;
    /* q, k and v: thirds of qkv (B, T, 3C); o, dO: (B, T, C); dq, dk, dv as q, k, v */
    const int64_t row = 3 * C, head = hs;
    switch (uid) {
    case GPT_CUDNN_Q:
    case GPT_CUDNN_DQ:
    case GPT_CUDNN_DK:
    case GPT_CUDNN_DV:
        dims[0] = B, dims[1] = NH, dims[2] = T, dims[3] = hs;
        strides[0] = T * row, strides[1] = head, strides[2] = row, strides[3] = 1;
        return 0;
    case GPT_CUDNN_V:
        if (!s->backward) {
            dims[0] = B, dims[1] = NH, dims[2] = T, dims[3] = hs;
            strides[0] = T * row, strides[1] = head, strides[2] = row, strides[3] = 1;
            return 0;
        }
        /* the backward reads V transposed, as K */
        __attribute__((fallthrough));
    case GPT_CUDNN_K:
        dims[0] = B, dims[1] = NH, dims[2] = hs, dims[3] = T;
        strides[0] = T * row, strides[1] = head, strides[2] = 1, strides[3] = row;
        return 0;
    case GPT_CUDNN_O:
    case GPT_CUDNN_DO:
        if (uid == GPT_CUDNN_DO && !s->backward)
            return -EINVAL;
        dims[0] = B, dims[1] = NH, dims[2] = T, dims[3] = hs;
        strides[0] = T * C, strides[1] = head, strides[2] = C, strides[3] = 1;
        return 0;
    case GPT_CUDNN_STATS:
    case GPT_CUDNN_DSUM:
        if (uid == GPT_CUDNN_DSUM && !s->backward)
            return -EINVAL;
        dims[0] = B, dims[1] = NH, dims[2] = T, dims[3] = 1;
        strides[0] = NH * T, strides[1] = T, strides[2] = 1, strides[3] = 1;
        return 0;
    default:
        return -EINVAL;
    }
}

/* ---- the builder ----------------------------------------------------------- */

/* One graph under construction: every descriptor made goes to p->descs;
 * the first failure is kept (status and step) and later calls do
 * nothing. */
struct bld {
    const struct gpt_cudnn_api *api;
    struct gpt_cudnn_sdpa_plan *p;
    void *ops[32];
    int nops;
    int64_t next_uid;
    int status;
    const char *step;
};

static int bad(struct bld *b, int status, const char *step)
{
    if (b->status == DNN_OK) {
        b->status = status;
        b->step = step;
    }
    return status;
}

static void *mk(struct bld *b, int type, const char *step)
{
    void *d = NULL;
    if (b->status != DNN_OK)
        return NULL;
    if (b->p->ndescs >= GPT_CUDNN_SDPA_DESCS) {
        bad(b, DNN_NOT_SUPPORTED, "too many descriptors");
        return NULL;
    }
    int st = b->api->cudnnBackendCreateDescriptor(type, &d);
    if (st != DNN_OK || !d) {
        bad(b, st != DNN_OK ? st : DNN_NOT_SUPPORTED, step);
        return NULL;
    }
    b->p->descs[b->p->ndescs++] = d;
    return d;
}

static void set(struct bld *b, void *d, int name, int type, int64_t n, const void *v,
                const char *step)
{
    if (b->status == DNN_OK)
        bad(b, b->api->cudnnBackendSetAttribute(d, name, type, n, v), step);
}

static void fin(struct bld *b, void *d, const char *step)
{
    if (b->status == DNN_OK)
        bad(b, b->api->cudnnBackendFinalize(d), step);
}

/* A tensor; uid 0 makes a virtual one with the next free uid. */
static void *tensor(struct bld *b, int64_t uid, int dtype, const int64_t dims[4],
                    const int64_t strides[4], int by_value)
{
    void *t = mk(b, D_TENSOR, "tensor");
    int64_t align = 16, id = uid ? uid : b->next_uid++;
    bool virt = uid == 0, byv = by_value != 0;
    set(b, t, A_T_UID, AT_INT64, 1, &id, "tensor uid");
    set(b, t, A_T_DTYPE, AT_DATA_TYPE, 1, &dtype, "tensor data type");
    set(b, t, A_T_DIMS, AT_INT64, 4, dims, "tensor dims");
    set(b, t, A_T_STRIDES, AT_INT64, 4, strides, "tensor strides");
    set(b, t, A_T_ALIGN, AT_INT64, 1, &align, "tensor alignment");
    if (virt)
        set(b, t, A_T_VIRTUAL, AT_BOOLEAN, 1, &virt, "tensor virtual");
    if (byv)
        set(b, t, A_T_BY_VALUE, AT_BOOLEAN, 1, &byv, "tensor by value");
    fin(b, t, "tensor");
    return t;
}

/* The caller's tensor `uid` of shape s. */
static void *io(struct bld *b, const struct gpt_cudnn_sdpa_shape *s, int uid, int dtype)
{
    int64_t dims[4], strides[4];
    if (gpt_cudnn_sdpa_layout(s, uid, dims, strides) < 0) {
        bad(b, DNN_NOT_SUPPORTED, "layout");
        return NULL;
    }
    if (b->p->nuids < GPT_CUDNN_UIDS)
        b->p->uids[b->p->nuids++] = uid;
    return tensor(b, uid, dtype, dims, strides, 0);
}

static void *scalar(struct bld *b, int uid)
{
    static const int64_t one[4] = {1, 1, 1, 1};
    if (b->p->nuids < GPT_CUDNN_UIDS)
        b->p->uids[b->p->nuids++] = uid;
    return tensor(b, uid, DT_FLOAT, one, one, 1);
}

/* A virtual (B, NH, rows, cols) tensor, rows-major; t_cols 1: the
 * transposed strides (a view of a cols x rows matrix). */
static void *virt(struct bld *b, const struct gpt_cudnn_sdpa_shape *s, int dtype, int64_t rows,
                  int64_t cols, int t_cols)
{
    int64_t dims[4] = {s->B, s->NH, rows, cols};
    int64_t strides[4] = {s->NH * rows * cols, rows * cols, t_cols ? 1 : cols, t_cols ? rows : 1};
    return tensor(b, 0, dtype, dims, strides, 0);
}

static void add_op(struct bld *b, void *op)
{
    if (b->status != DNN_OK)
        return;
    if (b->nops >= (int)(sizeof(b->ops) / sizeof(b->ops[0]))) {
        bad(b, DNN_NOT_SUPPORTED, "too many operations");
        return;
    }
    b->ops[b->nops++] = op;
}

/* y = mode(x, in1, in2): in1 and in2 may be NULL; axis >= 0 for GEN_INDEX. */
static void pw(struct bld *b, int mode, int prec, void *x, void *in1, void *in2, void *y,
               int64_t axis)
{
    void *d = mk(b, D_POINTWISE, "pointwise");
    set(b, d, A_PW_MODE, AT_POINTWISE_MODE, 1, &mode, "pointwise mode");
    set(b, d, A_PW_MATH_PREC, AT_DATA_TYPE, 1, &prec, "pointwise precision");
    if (axis >= 0)
        set(b, d, A_PW_AXIS, AT_INT64, 1, &axis, "pointwise axis");
    fin(b, d, "pointwise");
    void *op = mk(b, D_OP_POINTWISE, "pointwise op");
    set(b, op, A_OP_PW_DESC, AT_DESCRIPTOR, 1, &d, "pointwise op desc");
    set(b, op, A_OP_PW_X, AT_DESCRIPTOR, 1, &x, "pointwise op x");
    if (in1)
        set(b, op, A_OP_PW_B, AT_DESCRIPTOR, 1, &in1, "pointwise op b");
    if (in2)
        set(b, op, A_OP_PW_T, AT_DESCRIPTOR, 1, &in2, "pointwise op t");
    set(b, op, A_OP_PW_Y, AT_DESCRIPTOR, 1, &y, "pointwise op y");
    fin(b, op, "pointwise op");
    add_op(b, op);
}

/* c = a @ bm (batched over the first two dims), fp32 accumulation. */
static void mm(struct bld *b, void *a, void *bm, void *c)
{
    int comp = DT_FLOAT;
    void *d = mk(b, D_MATMUL, "matmul");
    set(b, d, A_MM_COMP, AT_DATA_TYPE, 1, &comp, "matmul compute type");
    fin(b, d, "matmul");
    void *op = mk(b, D_OP_MATMUL, "matmul op");
    set(b, op, A_OP_MM_A, AT_DESCRIPTOR, 1, &a, "matmul op a");
    set(b, op, A_OP_MM_B, AT_DESCRIPTOR, 1, &bm, "matmul op b");
    set(b, op, A_OP_MM_C, AT_DESCRIPTOR, 1, &c, "matmul op c");
    set(b, op, A_OP_MM_DESC, AT_DESCRIPTOR, 1, &d, "matmul op desc");
    fin(b, op, "matmul op");
    add_op(b, op);
}

/* y (rows of 1) = reduce(x) over the last dim. */
static void red(struct bld *b, int how, void *x, void *y)
{
    int comp = DT_FLOAT;
    void *d = mk(b, D_REDUCTION, "reduction");
    set(b, d, A_RED_OP, AT_REDUCTION_OP, 1, &how, "reduction operator");
    set(b, d, A_RED_COMP, AT_DATA_TYPE, 1, &comp, "reduction compute type");
    fin(b, d, "reduction");
    void *op = mk(b, D_OP_REDUCTION, "reduction op");
    set(b, op, A_OP_RED_X, AT_DESCRIPTOR, 1, &x, "reduction op x");
    set(b, op, A_OP_RED_Y, AT_DESCRIPTOR, 1, &y, "reduction op y");
    set(b, op, A_OP_RED_DESC, AT_DESCRIPTOR, 1, &d, "reduction op desc");
    fin(b, op, "reduction op");
    add_op(b, op);
}

/* y: x seen through other dims and strides (a transpose). */
static void reshape(struct bld *b, void *x, void *y)
{
    void *op = mk(b, D_OP_RESHAPE, "reshape op");
    set(b, op, A_OP_RESHAPE_X, AT_DESCRIPTOR, 1, &x, "reshape op x");
    set(b, op, A_OP_RESHAPE_Y, AT_DESCRIPTOR, 1, &y, "reshape op y");
    fin(b, op, "reshape op");
    add_op(b, op);
}

/* s's scores, masked: rows (queries) keep the columns (keys) at or
 * before them; the rest become p->neg. Returns the masked tensor. */
static void *causal(struct bld *b, const struct gpt_cudnn_sdpa_shape *s, void *sc, void *neg)
{
    const int64_t T = s->T;
    void *row = virt(b, s, DT_INT32, T, T, 0), *col = virt(b, s, DT_INT32, T, T, 0);
    void *keep = virt(b, s, DT_BOOL, T, T, 0), *out = virt(b, s, DT_FLOAT, T, T, 0);
    pw(b, PW_GEN_INDEX, DT_INT32, sc, NULL, NULL, row, 2);
    pw(b, PW_GEN_INDEX, DT_INT32, sc, NULL, NULL, col, 3);
    pw(b, PW_CMP_GE, DT_BOOL, row, col, NULL, keep, -1);
    pw(b, PW_BINARY_SELECT, DT_FLOAT, sc, neg, keep, out, -1); /* keep ? sc : neg */
    return out;
}

/* O = softmax(mask(scale Q K^T)) V, Stats = max + log(sum exp). */
static void graph_forward(struct bld *b, const struct gpt_cudnn_sdpa_shape *s)
{
    const int64_t T = s->T;
    void *q = io(b, s, GPT_CUDNN_Q, DT_BF16), *k = io(b, s, GPT_CUDNN_K, DT_BF16);
    void *v = io(b, s, GPT_CUDNN_V, DT_BF16), *o = io(b, s, GPT_CUDNN_O, DT_BF16);
    void *stats = io(b, s, GPT_CUDNN_STATS, DT_FLOAT);
    void *scale = scalar(b, GPT_CUDNN_SCALE), *neg = scalar(b, GPT_CUDNN_NEG);
    void *sc = virt(b, s, DT_FLOAT, T, T, 0), *scs = virt(b, s, DT_FLOAT, T, T, 0);
    mm(b, q, k, sc);
    pw(b, PW_MUL, DT_FLOAT, sc, scale, NULL, scs, -1);
    void *m = causal(b, s, scs, neg);
    void *mx = virt(b, s, DT_FLOAT, T, 1, 0), *sub = virt(b, s, DT_FLOAT, T, T, 0);
    void *ex = virt(b, s, DT_FLOAT, T, T, 0), *sum = virt(b, s, DT_FLOAT, T, 1, 0);
    void *lg = virt(b, s, DT_FLOAT, T, 1, 0), *pr = virt(b, s, DT_BF16, T, T, 0);
    red(b, RED_MAX, m, mx);
    pw(b, PW_SUB, DT_FLOAT, m, mx, NULL, sub, -1);
    pw(b, PW_EXP, DT_FLOAT, sub, NULL, NULL, ex, -1);
    red(b, RED_ADD, ex, sum);
    pw(b, PW_LOG, DT_FLOAT, sum, NULL, NULL, lg, -1);
    pw(b, PW_ADD, DT_FLOAT, mx, lg, NULL, stats, -1);
    pw(b, PW_DIV, DT_FLOAT, ex, sum, NULL, pr, -1);
    mm(b, pr, v, o);
}

/* dV = P^T dO, dS = P (dP - D) scale with dP = dO V^T and
 * D = rowsum(dO * O), dK = dS^T Q, dQ = dS K; P recomputed from the
 * statistics. dQ straight from its product (no fp32 accumulator in the
 * workspace): cuDNN's deterministic way. */
static void graph_backward(struct bld *b, const struct gpt_cudnn_sdpa_shape *s)
{
    const int64_t T = s->T, hs = s->C / s->NH;
    void *q = io(b, s, GPT_CUDNN_Q, DT_BF16), *kt = io(b, s, GPT_CUDNN_K, DT_BF16);
    void *vt = io(b, s, GPT_CUDNN_V, DT_BF16), *o = io(b, s, GPT_CUDNN_O, DT_BF16);
    void *stats = io(b, s, GPT_CUDNN_STATS, DT_FLOAT), *dO = io(b, s, GPT_CUDNN_DO, DT_BF16);
    void *dq = io(b, s, GPT_CUDNN_DQ, DT_BF16), *dk = io(b, s, GPT_CUDNN_DK, DT_BF16);
    void *dv = io(b, s, GPT_CUDNN_DV, DT_BF16), *dsum = io(b, s, GPT_CUDNN_DSUM, DT_FLOAT);
    void *scale = scalar(b, GPT_CUDNN_SCALE), *neg = scalar(b, GPT_CUDNN_NEG);
    void *one = scalar(b, GPT_CUDNN_ONE);
    /* D */
    void *dOo = virt(b, s, DT_FLOAT, T, hs, 0), *dr = virt(b, s, DT_FLOAT, T, 1, 0);
    pw(b, PW_MUL, DT_FLOAT, dO, o, NULL, dOo, -1);
    red(b, RED_ADD, dOo, dr);
    pw(b, PW_MUL, DT_FLOAT, dr, one, NULL, dsum, -1);
    /* P */
    void *sc = virt(b, s, DT_FLOAT, T, T, 0), *scs = virt(b, s, DT_FLOAT, T, T, 0);
    void *sub = virt(b, s, DT_FLOAT, T, T, 0), *p = virt(b, s, DT_FLOAT, T, T, 0);
    mm(b, q, kt, sc);
    pw(b, PW_MUL, DT_FLOAT, sc, scale, NULL, scs, -1);
    pw(b, PW_SUB, DT_FLOAT, scs, stats, NULL, sub, -1);
    void *m = causal(b, s, sub, neg);
    pw(b, PW_EXP, DT_FLOAT, m, NULL, NULL, p, -1);
    /* dV */
    void *pt = virt(b, s, DT_BF16, T, T, 1);
    reshape(b, p, pt);
    mm(b, pt, dO, dv);
    /* dS */
    void *dp = virt(b, s, DT_FLOAT, T, T, 0), *dpd = virt(b, s, DT_FLOAT, T, T, 0);
    void *ds0 = virt(b, s, DT_FLOAT, T, T, 0), *ds = virt(b, s, DT_FLOAT, T, T, 0);
    mm(b, dO, vt, dp);
    pw(b, PW_SUB, DT_FLOAT, dp, dsum, NULL, dpd, -1);
    pw(b, PW_MUL, DT_FLOAT, dpd, p, NULL, ds0, -1);
    pw(b, PW_MUL, DT_FLOAT, ds0, scale, NULL, ds, -1);
    /* dK, then dQ through K (K^T seen untransposed) */
    void *dst = virt(b, s, DT_BF16, T, T, 1);
    reshape(b, ds, dst);
    mm(b, dst, q, dk);
    int64_t kd[4], ks[4];
    (void)gpt_cudnn_sdpa_layout(s, GPT_CUDNN_Q, kd, ks); /* K's own layout is Q's */
    void *k = tensor(b, 0, DT_BF16, kd, ks, 0);
    reshape(b, kt, k);
    mm(b, ds, k, dq);
}

/* The first engine configuration the heuristics offer whose plan
 * finalizes (in the backward, none that says it is nondeterministic):
 * p->plan and p->workspace_bytes. */
static void pick_plan(struct bld *b, void *handle, void *graph, int deterministic)
{
    void *heur = mk(b, D_ENGINEHEUR, "heuristics");
    int mode = HEUR_MODE_A;
    set(b, heur, A_HEUR_GRAPH, AT_DESCRIPTOR, 1, &graph, "heuristics graph");
    set(b, heur, A_HEUR_MODE, AT_HEUR_MODE, 1, &mode, "heuristics mode");
    fin(b, heur, "heuristics");
    int64_t n = 0;
    if (b->status == DNN_OK)
        bad(b, b->api->cudnnBackendGetAttribute(heur, A_HEUR_RESULTS, AT_DESCRIPTOR, 0, &n, NULL),
            "heuristics count");
    if (n > DNN_CONFIGS_MAX)
        n = DNN_CONFIGS_MAX;
    void *cfg[DNN_CONFIGS_MAX] = {NULL};
    for (int64_t i = 0; i < n; i++)
        cfg[i] = mk(b, D_ENGINECFG, "engine config");
    if (b->status == DNN_OK && n > 0)
        bad(b, b->api->cudnnBackendGetAttribute(heur, A_HEUR_RESULTS, AT_DESCRIPTOR, n, &n, cfg),
            "heuristics results");
    int refused = DNN_NOT_SUPPORTED;
    for (int64_t i = 0; b->status == DNN_OK && i < n && !b->p->plan; i++) {
        void *eng = mk(b, D_ENGINE, "engine");
        int64_t got = 0;
        if (b->status != DNN_OK ||
            b->api->cudnnBackendGetAttribute(cfg[i], A_CFG_ENGINE, AT_DESCRIPTOR, 1, &got, &eng) !=
                DNN_OK)
            continue;
        int notes[16];
        int64_t nn = 0;
        int nondet = 0;
        if (b->api->cudnnBackendGetAttribute(eng, A_ENGINE_NOTE, AT_NUMERICAL_NOTE, 16, &nn,
                                             notes) == DNN_OK)
            for (int64_t j = 0; j < nn && j < 16; j++)
                nondet |= notes[j] == NOTE_NONDETERMINISTIC;
        if (deterministic && nondet)
            continue;
        void *plan = mk(b, D_PLAN, "plan");
        if (b->status != DNN_OK)
            break;
        int st = b->api->cudnnBackendSetAttribute(plan, A_PLAN_HANDLE, AT_HANDLE, 1, &handle);
        if (st == DNN_OK)
            st = b->api->cudnnBackendSetAttribute(plan, A_PLAN_CFG, AT_DESCRIPTOR, 1, &cfg[i]);
        if (st == DNN_OK)
            st = b->api->cudnnBackendFinalize(plan);
        if (st == DNN_OK)
            st = b->api->cudnnBackendGetAttribute(plan, A_PLAN_WORKSPACE, AT_INT64, 1, &got,
                                                  &b->p->workspace_bytes);
        if (st == DNN_OK)
            b->p->plan = plan;
        else
            refused = st;
    }
    if (b->status == DNN_OK && !b->p->plan)
        bad(b, refused, deterministic ? "no deterministic engine's plan" : "no engine's plan");
}

int gpt_cudnn_sdpa_build(const struct gpt_cudnn_api *api, void *handle,
                         const struct gpt_cudnn_sdpa_shape *s, struct gpt_cudnn_sdpa_plan *ret,
                         char *why, size_t why_cap)
{
    memset(ret, 0, sizeof(*ret));
    if (s->B < 1 || s->T < 1 || s->NH < 1 || s->C % s->NH != 0 || (s->C / s->NH) % 8 != 0 ||
        s->C / s->NH > 128) {
        snprintf(why, why_cap, "cuDNN attention: shape B %lld T %lld C %lld NH %lld not taken",
                 (long long)s->B, (long long)s->T, (long long)s->C, (long long)s->NH);
        return -EINVAL;
    }
    struct bld b = {api, ret, {NULL}, 0, DNN_VIRTUAL_UID0, DNN_OK, NULL};
    ret->scale = 1.0f / sqrtf((float)(s->C / s->NH));
    ret->neg = -FLT_MAX;
    ret->one = 1.0f;
    if (s->backward)
        graph_backward(&b, s);
    else
        graph_forward(&b, s);
    void *graph = mk(&b, D_GRAPH, "graph");
    set(&b, graph, A_GRAPH_HANDLE, AT_HANDLE, 1, &handle, "graph handle");
    set(&b, graph, A_GRAPH_OPS, AT_DESCRIPTOR, b.nops, b.ops, "graph ops");
    fin(&b, graph, "graph");
    pick_plan(&b, handle, graph, s->backward);
    if (b.status == DNN_OK)
        return 0;
    const char *text = api->cudnnGetErrorString ? api->cudnnGetErrorString(b.status) : NULL;
    snprintf(why, why_cap, "cuDNN attention %s B %lld T %lld C %lld NH %lld: %s: status %d (%s)",
             s->backward ? "backward" : "forward", (long long)s->B, (long long)s->T,
             (long long)s->C, (long long)s->NH, b.step, b.status, text ? text : "?");
    gpt_cudnn_sdpa_plan_done(api, ret);
    return -ENOTSUP;
}

void gpt_cudnn_sdpa_plan_done(const struct gpt_cudnn_api *api, struct gpt_cudnn_sdpa_plan *p)
{
    for (int i = p->ndescs - 1; i >= 0; i--)
        api->cudnnBackendDestroyDescriptor(p->descs[i]);
    memset(p, 0, sizeof(*p));
}

/* ---- the cache ------------------------------------------------------------- */

#define DNN_ENTRIES_MAX 64
#define DNN_DEVICES_MAX 16

static pthread_mutex_t dnn_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gpt_cudnn_sdpa_entry dnn_entries[DNN_ENTRIES_MAX];
static int dnn_nentries;
static struct {
    int device;
    void *handle;
} dnn_handles[DNN_DEVICES_MAX];
static int dnn_nhandles;

/* The calling thread's device's handle (made now if need be), or NULL. */
static void *dnn_handle_locked(const struct gpt_cudnn_api *api, int device)
{
    for (int i = 0; i < dnn_nhandles; i++)
        if (dnn_handles[i].device == device)
            return dnn_handles[i].handle;
    void *h = NULL;
    if (dnn_nhandles >= DNN_DEVICES_MAX || api->cudnnCreate(&h) != DNN_OK || !h)
        return NULL;
    dnn_handles[dnn_nhandles].device = device;
    dnn_handles[dnn_nhandles++].handle = h;
    return h;
}

static void *dnn_handle_of_locked(int device)
{
    for (int i = 0; i < dnn_nhandles; i++)
        if (dnn_handles[i].device == device)
            return dnn_handles[i].handle;
    return NULL;
}

/* What the caller gets beyond cuDNN's workspace: one bf16 output. */
static size_t dnn_extra_bytes(const struct gpt_cudnn_sdpa_shape *s)
{
    return (size_t)(s->B * s->T * s->C * (s->backward ? 3 : 1)) * 2;
}

static void dnn_build_locked(const struct gpt_cudnn_api *api, struct gpt_cudnn_sdpa_entry *e,
                             int (*alloc)(size_t, void **))
{
    char why[GPT_ERR_MSG_MAX];
    void *h = dnn_handle_locked(api, e->device);
    if (!h) {
        e->rc = -ENOTSUP;
        fprintf(stderr,
                "gptd: cuDNN attention: no cuDNN handle on device %d: running the "
                "hand-written kernels\n",
                e->device);
        return;
    }
    e->rc = gpt_cudnn_sdpa_build(api, h, &e->key, &e->plan, why, sizeof(why));
    if (e->rc == 0) {
        e->extra_off = ((size_t)e->plan.workspace_bytes + 255) & ~(size_t)255;
        e->extra_bytes = dnn_extra_bytes(&e->key);
        if (alloc(e->extra_off + e->extra_bytes, &e->workspace) < 0) {
            snprintf(why, sizeof(why), "cuDNN attention: no memory for its %zu-byte workspace",
                     e->extra_off + e->extra_bytes);
            gpt_cudnn_sdpa_plan_done(api, &e->plan);
            e->workspace = NULL;
            e->rc = -ENOMEM;
        }
    }
    if (e->rc < 0)
        fprintf(stderr, "gptd: %s: running the hand-written kernels for this shape\n", why);
}

int gpt_cudnn_sdpa_get(const struct gpt_cudnn_api *api, int device,
                       const struct gpt_cudnn_sdpa_shape *s, int (*alloc)(size_t, void **),
                       struct gpt_cudnn_sdpa_entry **ret)
{
    struct gpt_cudnn_sdpa_entry *e = NULL;
    int rc;
    pthread_mutex_lock(&dnn_mu);
    for (int i = 0; i < dnn_nentries && !e; i++)
        if (dnn_entries[i].device == device && dnn_entries[i].key.B == s->B &&
            dnn_entries[i].key.T == s->T && dnn_entries[i].key.C == s->C &&
            dnn_entries[i].key.NH == s->NH && dnn_entries[i].key.backward == s->backward)
            e = &dnn_entries[i];
    if (!e) {
        if (dnn_nentries >= DNN_ENTRIES_MAX) {
            rc = -ENOSPC; /* more shapes than any model runs: the rest go hand-written */
            goto out;
        }
        e = &dnn_entries[dnn_nentries++];
        memset(e, 0, sizeof(*e));
        e->key = *s;
        e->device = device;
        dnn_build_locked(api, e, alloc);
    }
    rc = e->rc;
    if (rc == 0)
        *ret = e;
out:
    pthread_mutex_unlock(&dnn_mu);
    return rc;
}

int gpt_cudnn_sdpa_exec(const struct gpt_cudnn_api *api, struct gpt_cudnn_sdpa_entry *e,
                        void *stream, const struct gpt_cudnn_sdpa_io *io)
{
    const void *ptrs[GPT_CUDNN_UIDS];
    void *vp = NULL;
    int st = DNN_NOT_SUPPORTED, rc = 0;
    const char *step = "variant pack";
    pthread_mutex_lock(&dnn_mu);
    void *h = dnn_handle_of_locked(e->device);
    if (e->rc < 0 || !h) {
        rc = e->rc < 0 ? e->rc : -ENOTSUP;
        goto out;
    }
    for (int i = 0; i < e->plan.nuids; i++) {
        int64_t uid = e->plan.uids[i];
        ptrs[i] = uid == GPT_CUDNN_SCALE ? &e->plan.scale
                  : uid == GPT_CUDNN_NEG ? &e->plan.neg
                  : uid == GPT_CUDNN_ONE ? &e->plan.one
                                         : io->ptr[uid];
    }
    if ((st = api->cudnnBackendCreateDescriptor(D_VARIANT_PACK, &vp)) == DNN_OK &&
        (st = api->cudnnBackendSetAttribute(vp, A_VP_UIDS, AT_INT64, e->plan.nuids,
                                            e->plan.uids)) == DNN_OK &&
        (st = api->cudnnBackendSetAttribute(vp, A_VP_PTRS, AT_VOID_PTR, e->plan.nuids, ptrs)) ==
            DNN_OK &&
        (st = api->cudnnBackendSetAttribute(vp, A_VP_WORKSPACE, AT_VOID_PTR, 1, &e->workspace)) ==
            DNN_OK &&
        (st = api->cudnnBackendFinalize(vp)) == DNN_OK) {
        step = "stream";
        if ((st = api->cudnnSetStream(h, stream)) == DNN_OK) {
            step = "execute";
            st = api->cudnnBackendExecute(h, e->plan.plan, vp);
        }
    }
    if (st != DNN_OK) {
        const char *text = api->cudnnGetErrorString ? api->cudnnGetErrorString(st) : NULL;
        fprintf(stderr,
                "gptd: cuDNN attention %s B %lld T %lld C %lld NH %lld: %s: status %d (%s): "
                "running the hand-written kernels for this shape\n",
                e->key.backward ? "backward" : "forward", (long long)e->key.B, (long long)e->key.T,
                (long long)e->key.C, (long long)e->key.NH, step, st, text ? text : "?");
        e->rc = rc = -ENOTSUP;
    }
out:
    if (vp)
        api->cudnnBackendDestroyDescriptor(vp);
    pthread_mutex_unlock(&dnn_mu);
    return rc;
}
