/*
 * gpu_ops_common: what test_gpu_ops's files share: the two backends and
 * the seeded generator, the tolerances of the checks outside the op
 * table, and report(), which prints one line per check and counts the
 * failures; pairs of buffers holding the same inputs on the CPU and the
 * GPU backend, and their comparison; the op table's runner (every case
 * of unit/op_cases.h on both backends). Single-threaded, like the whole
 * program.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda/cuda_backend.h"
#include "gpu/gpu_ops_common.h"
#include "rng.h"
#include "unit/op_cases.h"

/* Normalised error bounds of the checks outside the op table (whose rows,
 * unit/op_cases.c, carry their own), one per check and precision. GEMM-based
 * ops sum up to C products in a different order from OpenBLAS; in bf16 the
 * inputs of products and attention are rounded to 8 significant bits
 * (relative 2^-9 each); outputs of the other ops stay fp32 and keep their
 * fp32 bounds. */
static const struct {
    const char *op;
    const char *prec;
    double tol;
} tolerances[] = {
    {"memory", "bf16", 0.0},
    {"layernorm_backward", "bf16", 1e-4},
    {"matmul_forward", "bf16", 2e-2},
    {"matmul_backward", "bf16", 2e-2},
    {"flash_attention_forward", "bf16", 3e-2},
    {"flash_attention_backward", "bf16", 5e-2},
    /* DGELU's dinp: pre from a bf16 product, through gelu'' (bf16_only_dgelu
     * says how much that is). */
    {"matmul_backward_dgelu", "bf16", 5e-2},
    {"bf16_repeat", "bf16", 0.0},             /* the same updates twice: bit-identical */
    {"bf16_invalidate", "bf16", 2e-2},        /* a product after an upload of its weight */
    {"flash_tc_path", "bf16", 0.0},           /* 1 = the CUDA-core fallback ran */
    {"bf16_only", "bf16", 2e-2},              /* values written as bf16 only, downloaded */
    {"bf16_only_state", "bf16", 0.0},         /* 1 = a range not (or still) held in bf16 only */
    {"softmax_xent", "bf16", 3e-2},           /* the logits read as bf16 */
    {"flash_tc_deterministic", "bf16", 0.0},  /* 1 = two backward passes differ */
    {"flash_tc_variant_same", "bf16", 0.0},   /* 1 = a variant's bits differ from the fused */
    {"flash_tc_variant_close", "bf16", 1e-3}, /* twopass, k32, wg against fused, m16 */
    {"flash_wg_live", "bf16", 0.0},           /* 1 = the wg kernels' sm_90a code not loaded */
    {"attention_guard", "bf16", 0.0},         /* 1 = the guard did not check, or mismatched */
    {"cudnn_attention_path", "bf16", 0.0},    /* 1 = cuDNN refused GPT-2's shape */
    /* dout read from a product's bf16-only output: a product's bound. */
    {"layernorm_backward_bf16_dout", "bf16", 2e-2},
    /* The residual stream and its gradient held in bf16 only (rounded once
     * per write, 2^-9 relative) and read as bf16 by the encoder's backward,
     * LayerNorm both ways and the skip connection's product: within a
     * product's bound. */
    {"bf16_resid", "bf16", 2e-2},
    /* Everything downstream of bf16 logits (the classifier's dlogits and
     * the head's backward products reading them) carries the logits'
     * rounding: 2^-9 |z| absolute in the exponent, up to 0.06 at the
     * |z| ~ 20 of these tests, so p and the dlogits are off by up to ~6%
     * of p; relative to the largest dlogit that is 1.2-2.4% in an fp64
     * emulation of the bf16 ops at N 64, V 50257 (the H200 measured
     * 2.1%): softmax_xent's bound. */
    {"xent_backward", "bf16", 3e-2},
    /* The DGELU output (dy W2) * gelu'(pre) with pre from a bf16 product:
     * the forward product's error (~2^-9 sqrt(C) |ln| |w|, 0.08 at
     * C 768) meets gelu'' (up to 0.8 near 0) on a large |dy W2|: 3.3% of
     * the largest output in an fp64 emulation of the bf16 ops at N 1024,
     * C 768, OC 3072 (the H200 measured 2.8%; without the forward's
     * error it is 0.4%). */
    {"bf16_only_dgelu", "bf16", 5e-2},
    {"flash_attention_forward", "fp32", 1e-4},
    {"flash_attention_backward", "fp32", 2e-4},
    {"memory", "fp32", 0.0},
    {"encoder_backward", "fp32", 1e-5},
    {"encoder_wte_deterministic", "fp32", 0.0}, /* 1 = two backward passes differ */
    {"encoder_wte_exact", "fp32", 0.0},         /* 1 = not the sequential sum's bits */
    {"layernorm_deterministic", "fp32", 0.0},   /* 1 = two backward passes differ */
    {"layernorm_backward", "fp32", 1e-4},
    {"matmul_forward", "fp32", 1e-4},
    {"matmul_backward", "fp32", 1e-4},
    {"matmul_backward_dgelu", "fp32", 2e-4},
    {"softmax_xent", "fp32", 2e-5},
};

struct gpt_backend *cpu, *gpu;
struct gpt_rng rng;
int failures, checks;
const char *prec = "fp32"; /* the GPU backend's precision now */

/* The op's bound in this precision; in bf16 an op with no bf16 entry
 * writes fp32 from fp32 inputs and keeps its fp32 bound. */
static double tol_of(const char *op)
{
    for (int pass = 0; pass < 2; pass++) {
        const char *want = pass == 0 ? prec : "fp32";
        for (size_t i = 0; i < sizeof(tolerances) / sizeof(tolerances[0]); i++)
            if (strcmp(tolerances[i].op, op) == 0 && strcmp(tolerances[i].prec, want) == 0)
                return tolerances[i].tol;
    }
    fprintf(stderr, "no tolerance for %s in %s\n", op, prec);
    abort();
}

/* The last pair_err's largest difference: where, the CPU's value, the
 * GPU's; report prints it beside a failure, then forgets it (valid 0:
 * the report was not of a pair_err). */
static struct worst {
    int valid;
    size_t i;
    float cpu, gpu;
} worst;

void report(const char *op, const char *what, double e)
{
    report_tol(op, what, e, tol_of(op));
}

void report_tol(const char *op, const char *what, double e, double tol)
{
    int ok = e <= tol && !isnan(e);
    checks++;
    failures += !ok;
    printf("%-4s %-4s %-24s %-40s err %.3g (tol %.1g)\n", ok ? "ok" : "FAIL", prec, op, what, e,
           tol);
    if (!ok && worst.valid)
        printf("     largest difference at element %zu: cpu %.9g, gpu %.9g\n", worst.i,
               (double)worst.cpu, (double)worst.gpu);
    worst.valid = 0;
}

float *host_rand(size_t n, float lo, float hi)
{
    float *h = malloc(n * sizeof(float) + 1);
    if (!h)
        abort();
    for (size_t i = 0; i < n; i++)
        h[i] = lo + (hi - lo) * (float)gpt_rng_uniform(&rng);
    return h;
}

void check_rc(int rc, const char *what)
{
    if (rc < 0) {
        fprintf(stderr, "%s failed: %d (%s) %s\n", what, rc, gpt_strerror(rc),
                gpt_cuda_backend_last_error(gpu));
        exit(1);
    }
}

struct pair pair_new(size_t n, float lo, float hi)
{
    struct pair p = {NULL, NULL, n};
    float *h = host_rand(n, lo, hi);
    check_rc(gpt_backend_alloc(cpu, n * sizeof(float) + 4, (void **)&p.c), "cpu alloc");
    check_rc(gpt_backend_alloc(gpu, n * sizeof(float) + 4, (void **)&p.g), "gpu alloc");
    check_rc(gpt_backend_upload(cpu, p.c, h, n * sizeof(float)), "cpu upload");
    check_rc(gpt_backend_upload(gpu, p.g, h, n * sizeof(float)), "gpu upload");
    free(h);
    return p;
}

void pair_free(struct pair *p)
{
    gpt_backend_mem_free(cpu, p->c);
    gpt_backend_mem_free(gpu, p->g);
}

/* Integer buffers (tokens, targets) on both backends. */
void ints_new(const int *h, size_t n, int **ret_c, int **ret_g)
{
    check_rc(gpt_backend_alloc(cpu, n * sizeof(int), (void **)ret_c), "cpu alloc");
    check_rc(gpt_backend_alloc(gpu, n * sizeof(int), (void **)ret_g), "gpu alloc");
    check_rc(gpt_backend_upload(cpu, *ret_c, h, n * sizeof(int)), "cpu upload");
    check_rc(gpt_backend_upload(gpu, *ret_g, h, n * sizeof(int)), "gpu upload");
}

/* Normalised error of p (optionally only where mask(i) is true): the
 * largest difference over the largest reference value, or over `floor`
 * where that is larger. */
double pair_err_floor(const struct pair *p, int (*mask)(size_t i, const void *ctx), const void *ctx,
                      double floor)
{
    float *hc = malloc(p->n * sizeof(float) + 1), *hg = malloc(p->n * sizeof(float) + 1);
    if (!hc || !hg)
        abort();
    check_rc(gpt_backend_download(cpu, hc, p->c, p->n * sizeof(float)), "cpu download");
    check_rc(gpt_backend_download(gpu, hg, p->g, p->n * sizeof(float)), "gpu download");
    double maxref = 0.0, maxdiff = 0.0;
    for (size_t i = 0; i < p->n; i++) {
        if (mask && !mask(i, ctx))
            continue;
        double d = fabs((double)hg[i] - (double)hc[i]);
        if (isnan(hg[i]) != isnan(hc[i]))
            d = INFINITY;
        if (d > maxdiff || (i == 0 && d == 0.0)) {
            maxdiff = d;
            worst = (struct worst){1, i, hc[i], hg[i]};
        }
        maxref = fabs(hc[i]) > maxref ? fabs(hc[i]) : maxref;
    }
    free(hc);
    free(hg);
    maxref = maxref > floor ? maxref : floor;
    return maxref > 0.0 ? maxdiff / maxref : maxdiff;
}

double pair_err(const struct pair *p, int (*mask)(size_t i, const void *ctx), const void *ctx)
{
    return pair_err_floor(p, mask, ctx, 0.0);
}

void check(const char *op, const char *what, const struct pair *p)
{
    report(op, what, pair_err(p, NULL, NULL));
}

/* ---- the op table ------------------------------------------------------ */

/* One tensor of a case on both backends. */
struct case_buf {
    struct opc_tensor t;
    void *c, *g;
};

/* The causal entries (j <= i) of a (B,NH,T,T) att. */
static int causal_mask(size_t idx, const void *ctx)
{
    size_t T = *(const size_t *)ctx;
    return idx % T <= (idx / T) % T;
}

/* Tensor k of a case compared: both downloaded, the GPU's error against
 * the CPU's values within the row's bound in this precision (0 for an
 * exact tensor). */
static void case_compare(const struct opc_case *c, const struct case_buf *k, const char *tag)
{
    char what[200];
    snprintf(what, sizeof(what), "%s: %s", tag, k->t.name);
    double tol = k->t.exact ? 0.0 : strcmp(prec, "bf16") == 0 ? c->tol_bf16 : c->tol;
    if (k->t.type == OPC_F32) {
        struct pair p = {k->c, k->g, k->t.n};
        report_tol(gpt_backend_op_name(c->op), what, pair_err_floor(&p, NULL, NULL, k->t.floor),
                   tol);
        return;
    }
    size_t bytes = k->t.n * opc_type_size(k->t.type);
    void *hc = malloc(bytes), *hg = malloc(bytes);
    if (!hc || !hg)
        abort();
    check_rc(gpt_backend_download(cpu, hc, k->c, bytes), "cpu download");
    check_rc(gpt_backend_download(gpu, hg, k->g, bytes), "gpu download");
    report_tol(gpt_backend_op_name(c->op), what,
               opc_err(k->t.type, hc, hg, k->t.n, k->t.floor, NULL), tol);
    free(hc);
    free(hg);
}

/* One case on both backends: the same initial contents uploaded to each
 * (state sized for the larger of the two), the op run on each, every
 * output and gradient compared. `path`: the GPU's attention path ("gemm"
 * also compares the probabilities it keeps in att), or NULL. */
void run_op_case(const struct opc_case *c, const char *path)
{
    const struct opc_op *o = opc_op_of(c->op);
    struct opc_tensor tc[OPC_MAX_TENSORS], tg[OPC_MAX_TENSORS];
    struct case_buf k[OPC_MAX_TENSORS] = {0};
    void *bc[OPC_MAX_TENSORS] = {0}, *bg[OPC_MAX_TENSORS] = {0};
    char tag[160];
    int nt = o->tensors(c, cpu, tc);
    if (o->tensors(c, gpu, tg) != nt)
        abort();
    gpt_rng_seed(&rng, opc_seed(c)); /* the case draws the same inputs wherever it runs */
    opc_tag(c, tag, 128);
    if (path)
        snprintf(tag + strlen(tag), sizeof(tag) - strlen(tag), " %s", path);
    for (int i = 0; i < nt; i++) {
        k[i].t = tc[i];
        k[i].t.n = tc[i].n > tg[i].n ? tc[i].n : tg[i].n;
        size_t bytes = k[i].t.n * opc_type_size(k[i].t.type);
        if (!bytes)
            continue;
        void *h = malloc(bytes);
        if (!h)
            abort();
        opc_fill(&k[i].t, &rng, h);
        /* 4 bytes more, as pair_new allocates */
        check_rc(gpt_backend_alloc(cpu, bytes + 4, &k[i].c), "cpu alloc");
        check_rc(gpt_backend_alloc(gpu, bytes + 4, &k[i].g), "gpu alloc");
        check_rc(gpt_backend_upload(cpu, k[i].c, h, bytes), "cpu upload");
        check_rc(gpt_backend_upload(gpu, k[i].g, h, bytes), "gpu upload");
        bc[i] = k[i].c;
        bg[i] = k[i].g;
        free(h);
    }
    check_rc(o->run(cpu, bc, c), "cpu run");
    check_rc(o->run(gpu, bg, c), "gpu run");
    for (int i = 0; i < nt; i++)
        if (k[i].t.n && (k[i].t.role == OPC_OUT || k[i].t.role == OPC_GRAD))
            case_compare(c, &k[i], tag);
    if (path && strcmp(path, "gemm") == 0 && c->op == GPT_BACKEND_OP_attention_forward) {
        size_t T = c->d[1];
        struct pair att = {k[1].c, k[1].g, c->d[0] * c->d[3] * T * T};
        report_tol(gpt_backend_op_name(c->op), "att (probabilities)",
                   pair_err(&att, causal_mask, &T), c->tol);
    }
    for (int i = 0; i < nt; i++) {
        gpt_backend_mem_free(cpu, k[i].c);
        gpt_backend_mem_free(gpu, k[i].g);
    }
}

/* Every case of the table (op_cases.h) in this precision (OPC_FP32 or
 * OPC_BF16). Attention runs on each GPU path the row asks for and the
 * plan takes: the batched-GEMM path (whose att holds the probabilities)
 * and the fused flash kernels. */
void test_op_cases(unsigned dtype)
{
    for (size_t r = 0; r < opc_n_cases; r++) {
        const struct opc_case *c = &opc_cases[r];
        if (!(c->dtypes & dtype))
            continue;
        if (c->op != GPT_BACKEND_OP_attention_forward &&
            c->op != GPT_BACKEND_OP_attention_backward) {
            run_op_case(c, NULL);
            continue;
        }
        for (int flash = (c->flags & OPC_FLASH_ONLY) != 0; flash < 2; flash++) {
            enum gpt_cuda_attn_kind want = flash ? GPT_CUDA_ATTN_FLASH : GPT_CUDA_ATTN_GEMM;
            struct gpt_cuda_attn_plan plan;
            char tag[112];
            gpt_cuda_backend_set_attention(gpu, want);
            gpt_cuda_backend_attention_plan(gpu, c->d[0], c->d[1], c->d[2], c->d[3], &plan);
            if (plan.kind != want)
                printf("skip %-4s %s %s: %s\n", prec, gpt_backend_op_name(c->op),
                       opc_tag(c, tag, sizeof(tag)), plan.why);
            else
                run_op_case(c, flash ? "flash" : "gemm");
        }
        gpt_cuda_backend_set_attention(gpu, GPT_CUDA_ATTN_FLASH);
    }
}
