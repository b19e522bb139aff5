/*
 * test_gpu_ops: every slot of the CUDA backend against the CPU backend on
 * the same seeded random inputs, over several shapes including sizes that
 * are not multiples of any block size (and odd widths that force the
 * cuBLAS fallback of the matrix products). Attention runs both ways: the
 * batched-GEMM path (whose att holds probabilities, compared too) and the
 * fused flash kernels (out and dqkv), on shapes whose T is not a multiple
 * of the tiles and head sizes from 4 to 128. Then the bf16 mode: matrix
 * products, attention, LayerNorm, GELU and AdamW against the fp32 CPU ops,
 * a weight update written to the bf16 copy, rounded to nearest (and
 * reproducible), a bf16 copy made stale by an upload, and the bf16-only
 * outputs (products with a bf16 D, LayerNorm's output, GELU_AUX and DGELU,
 * the classifier's dlogits): read by the next products, converted back for
 * an fp32 reader, and written in fp32 from then on there; the tensor-core
 * flash kernels (head sizes 32 to 128, T from 65 to 4096, taken for
 * certain and bit-reproducible); the residual stream and its gradient in
 * bf16 only (the encoder's output, the skip connection's product with a
 * bf16 C and D, LayerNorm reading it as bf16, LayerNorm's backward
 * accumulating the gradient in bf16 after a bf16 memzero, the encoder's
 * backward reading it); LayerNorm's backward at GPT-2's shape (its many
 * blocks, and blocks capped by the backend's scratch) and bit-identical
 * when repeated; the token-embedding gradient bit for bit the sequential
 * sum of each token's rows in position order. The error of an
 * op is max |gpu - cpu| / max |cpu| over its outputs; the tolerances of
 * all ops and precisions are in the one table of gpu_ops_common.c. Prints
 * one line per check; exits 77 without a GPU. One program of three files:
 * this one (the checks but attention's, and main), gpu_ops_attn.c (the
 * attention checks) and gpu_ops_common.c (report, the buffers on both
 * backends and their comparison).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_probe.h"
#include "flash_tc.h"
#include "gpu/gpu_gate.h"
#include "gpu/gpu_ops_common.h"
#include "rng.h"

/* ---- the ops ---------------------------------------------------------- */

static const struct shape shapes[] = {
    {1, 1, 4, 1, 3, 3},       {2, 5, 12, 3, 17, 32},       {3, 33, 48, 4, 100, 128},
    {4, 64, 64, 4, 257, 320}, {1, 129, 96, 6, 1000, 1024}, {2, 100, 36, 12, 65, 65},
    {5, 17, 8, 2, 50, 64}, /* B > NH: batched over b */
};

/* Shapes for the flash kernels: T around and between the 64-row and
 * 32-row tiles, head sizes 4..128 (128 needs the shared-memory opt-in). */
static const struct shape flash_shapes[] = {
    {2, 100, 256, 4, 0, 0}, {1, 1000, 768, 12, 0, 0}, {3, 37, 64, 4, 0, 0}, {2, 129, 512, 4, 0, 0},
    {1, 65, 96, 3, 0, 0},   {4, 64, 48, 4, 0, 0},     {2, 31, 8, 2, 0, 0},  {1, 257, 384, 6, 0, 0},
};

static void test_memory(void)
{
    size_t n = 1000003;
    struct pair p = pair_new(n, -1, 1);
    check("transfer", "upload/download 1000003", &p);
    struct pair q = pair_new(n, -1, 1);
    gpt_backend_copy(cpu, q.c + 1, p.c + 3, (n - 3) * sizeof(float));
    gpt_backend_copy(gpu, q.g + 1, p.g + 3, (n - 3) * sizeof(float));
    check("copy", "copy, odd offsets", &q);
    gpt_backend_memzero(cpu, q.c + 5, 777 * sizeof(float));
    gpt_backend_memzero(gpu, q.g + 5, 777 * sizeof(float));
    check("memzero", "memzero, odd offset", &q);
    /* alloc must zero. */
    float *z, hz[3] = {1, 1, 1};
    check_rc(gpt_backend_alloc(gpu, 12, (void **)&z), "alloc");
    check_rc(gpt_backend_download(gpu, hz, z, 12), "download");
    report("memzero", "alloc is zeroed", fabs(hz[0]) + fabs(hz[1]) + fabs(hz[2]));
    gpt_backend_mem_free(gpu, z);
    pair_free(&p);
    pair_free(&q);
}

static void test_encoder(const struct shape *s, const char *tag)
{
    size_t BT = s->B * s->T;
    int *tok = malloc(BT * sizeof(int)), *tc, *tg;
    for (size_t i = 0; i < BT; i++)
        tok[i] = (int)gpt_rng_below(&rng, s->V > 4 ? 4 : s->V); /* many repeats */
    ints_new(tok, BT, &tc, &tg);
    struct pair wte = pair_new(s->Vp * s->C, -1, 1), wpe = pair_new(s->T * s->C, -1, 1);
    struct pair out = pair_new(BT * s->C, 0, 0);
    gpt_backend_encoder_forward(cpu, out.c, tc, wte.c, wpe.c, s->B, s->T, s->C);
    gpt_backend_encoder_forward(gpu, out.g, tg, wte.g, wpe.g, s->B, s->T, s->C);
    check("encoder_forward", tag, &out);
    struct pair dout = pair_new(BT * s->C, -1, 1);
    gpt_backend_encoder_backward(cpu, wte.c, wpe.c, dout.c, tc, s->B, s->T, s->C);
    gpt_backend_encoder_backward(gpu, wte.g, wpe.g, dout.g, tg, s->B, s->T, s->C);
    check("encoder_backward", tag, &wte);
    check("encoder_backward", tag, &wpe);
    pair_free(&wte);
    pair_free(&wpe);
    pair_free(&out);
    pair_free(&dout);
    gpt_backend_mem_free(cpu, tc);
    gpt_backend_mem_free(gpu, tg);
    free(tok);
}

/* The token-embedding gradient at GPT-2's shape (B 8, T 1024, C 768,
 * vocabulary 50304): tokens drawn from the whole vocabulary (most
 * distinct, some repeated) and from 64 (long segments of the same token);
 * then B 7, T 1000 (27 chunks of the order's 256 positions and a partly
 * filled one, four count slices, the last partial) with one token at a
 * quarter of the positions and in a run of 1300 (~2700 in all), the rest
 * once each. Against the CPU; two GPU passes into zeroed buffers give the
 * same bits (deterministic: no atomics), and those bits are the
 * sequential sum of each token's rows in position order, added to dwte
 * once (the kernels' order since they were written: a change of kernels
 * must keep it). */
static void test_encoder_wte(void)
{
    static const struct {
        size_t B, T;
        int mode; /* 0: any of 50257 tokens, 1: of 64, 2: a frequent token and runs */
        const char *tag;
    } rounds[] = {
        {8, 1024, 0, "B8 T1024 C768, 50257 tokens"},
        {8, 1024, 1, "B8 T1024 C768, 64 tokens"},
        {7, 1000, 2, "B7 T1000 C768, one token x ~2700"},
    };
    const size_t C = 768, Vp = 50304;
    for (size_t round = 0; round < sizeof(rounds) / sizeof(rounds[0]); round++) {
        size_t B = rounds[round].B, T = rounds[round].T, BT = B * T;
        const char *tag = rounds[round].tag;
        int *tok = malloc(BT * sizeof(int));
        if (!tok)
            abort();
        for (size_t i = 0; i < BT; i++) {
            if (rounds[round].mode == 2)
                tok[i] = (i >= 1000 && i < 2300) || gpt_rng_below(&rng, 4) == 0
                             ? 7
                             : (int)(100 + i); /* 100 + i < 50257 */
            else
                tok[i] = (int)gpt_rng_below(&rng, rounds[round].mode == 0 ? 50257 : 64);
        }
        int *tc, *tg;
        ints_new(tok, BT, &tc, &tg);
        struct pair wte = pair_new(Vp * C, -1, 1), wpe = pair_new(T * C, -1, 1);
        struct pair dout = pair_new(BT * C, -1, 1);
        gpt_backend_encoder_backward(cpu, wte.c, wpe.c, dout.c, tc, B, T, C);
        gpt_backend_encoder_backward(gpu, wte.g, wpe.g, dout.g, tg, B, T, C);
        check("encoder_backward", tag, &wte);
        check("encoder_backward", tag, &wpe);
        float *z[2], *zp[2], *h[2];
        for (int k = 0; k < 2; k++) {
            check_rc(gpt_backend_alloc(gpu, Vp * C * sizeof(float), (void **)&z[k]), "alloc");
            check_rc(gpt_backend_alloc(gpu, T * C * sizeof(float), (void **)&zp[k]), "alloc");
            gpt_backend_encoder_backward(gpu, z[k], zp[k], dout.g, tg, B, T, C);
            h[k] = malloc(Vp * C * sizeof(float));
            if (!h[k])
                abort();
            check_rc(gpt_backend_download(gpu, h[k], z[k], Vp * C * sizeof(float)), "download");
        }
        report("encoder_wte_deterministic", tag,
               memcmp(h[0], h[1], Vp * C * sizeof(float)) != 0 ? 1.0 : 0.0);
        /* The sequential sums on the host (fp32 adds in position order). */
        float *hd = malloc(BT * C * sizeof(float)), *acc = calloc(Vp * C, sizeof(float));
        if (!hd || !acc)
            abort();
        check_rc(gpt_backend_download(cpu, hd, dout.c, BT * C * sizeof(float)), "download");
        for (size_t q = 0; q < BT; q++)
            for (size_t c = 0; c < C; c++)
                acc[(size_t)tok[q] * C + c] += hd[q * C + c];
        for (size_t i = 0; i < Vp * C; i++)
            acc[i] = 0.0f + acc[i]; /* the one add into the zeroed dwte */
        report("encoder_wte_exact", tag,
               memcmp(h[0], acc, Vp * C * sizeof(float)) != 0 ? 1.0 : 0.0);
        free(hd);
        free(acc);
        for (int k = 0; k < 2; k++) {
            gpt_backend_mem_free(gpu, z[k]);
            gpt_backend_mem_free(gpu, zp[k]);
            free(h[k]);
        }
        pair_free(&wte);
        pair_free(&wpe);
        pair_free(&dout);
        gpt_backend_mem_free(cpu, tc);
        gpt_backend_mem_free(gpu, tg);
        free(tok);
    }
}

static void test_layernorm(size_t N, size_t C, const char *tag)
{
    struct pair inp = pair_new(N * C, -3, 5), w = pair_new(C, 0.5f, 1.5f), b = pair_new(C, -1, 1);
    struct pair out = pair_new(N * C, 0, 0), mean = pair_new(N, 0, 0), rstd = pair_new(N, 0, 0);
    gpt_backend_layernorm_forward(cpu, out.c, mean.c, rstd.c, inp.c, w.c, b.c, N, C);
    gpt_backend_layernorm_forward(gpu, out.g, mean.g, rstd.g, inp.g, w.g, b.g, N, C);
    check("layernorm_forward", tag, &out);
    check("layernorm_forward", tag, &mean);
    check("layernorm_forward", tag, &rstd);
    struct pair dinp = pair_new(N * C, -1, 1), dout = pair_new(N * C, -1, 1);
    struct pair dw = pair_new(C, -1, 1), db = pair_new(C, -1, 1);
    /* Each backend uses its own saved statistics, as in training. */
    gpt_backend_layernorm_backward(cpu, dinp.c, dw.c, db.c, dout.c, inp.c, w.c, mean.c, rstd.c, N,
                                   C);
    gpt_backend_layernorm_backward(gpu, dinp.g, dw.g, db.g, dout.g, inp.g, w.g, mean.g, rstd.g, N,
                                   C);
    check("layernorm_backward", tag, &dinp);
    check("layernorm_backward", tag, &dw);
    check("layernorm_backward", tag, &db);
    struct pair *all[] = {&inp, &w, &b, &out, &mean, &rstd, &dinp, &dout, &dw, &db};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pair_free(all[i]);
}

/* The fused residual + LayerNorm (in place, as the model calls it: res
 * aliases a) against the CPU backend's two ops. */
static void test_residual_layernorm(size_t N, size_t C, const char *tag)
{
    struct pair res = pair_new(N * C, -3, 3), skip = pair_new(N * C, -2, 2);
    struct pair w = pair_new(C, 0.5f, 1.5f), b = pair_new(C, -1, 1);
    struct pair out = pair_new(N * C, 0, 0), mean = pair_new(N, 0, 0), rstd = pair_new(N, 0, 0);
    gpt_backend_residual_layernorm_forward(cpu, res.c, out.c, mean.c, rstd.c, res.c, skip.c, w.c,
                                           b.c, N, C);
    gpt_backend_residual_layernorm_forward(gpu, res.g, out.g, mean.g, rstd.g, res.g, skip.g, w.g,
                                           b.g, N, C);
    check("residual_forward", tag, &res);
    check("layernorm_forward", tag, &out);
    check("layernorm_forward", tag, &mean);
    check("layernorm_forward", tag, &rstd);
    struct pair *all[] = {&res, &skip, &w, &b, &out, &mean, &rstd};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pair_free(all[i]);
}

static void test_matmul(size_t N, size_t C, size_t OC, int with_bias, int with_dinp)
{
    char tag[64];
    snprintf(tag, sizeof(tag), "N%zu C%zu OC%zu bias%d dinp%d", N, C, OC, with_bias, with_dinp);
    struct pair inp = pair_new(N * C, -1, 1), w = pair_new(OC * C, -0.5f, 0.5f);
    struct pair b = pair_new(OC, -1, 1), out = pair_new(N * OC, 0, 0);
    gpt_backend_matmul_forward(cpu, out.c, inp.c, w.c, with_bias ? b.c : NULL, N, C, OC);
    gpt_backend_matmul_forward(gpu, out.g, inp.g, w.g, with_bias ? b.g : NULL, N, C, OC);
    check("matmul_forward", tag, &out);
    struct pair dout = pair_new(N * OC, -1, 1), dinp = pair_new(N * C, 0, 0);
    struct pair dw = pair_new(OC * C, -1, 1), db = pair_new(OC, -1, 1);
    gpt_backend_matmul_backward(cpu, with_dinp ? dinp.c : NULL, dw.c, with_bias ? db.c : NULL,
                                dout.c, inp.c, w.c, N, C, OC);
    gpt_backend_matmul_backward(gpu, with_dinp ? dinp.g : NULL, dw.g, with_bias ? db.g : NULL,
                                dout.g, inp.g, w.g, N, C, OC);
    if (with_dinp)
        check("matmul_backward", tag, &dinp);
    check("matmul_backward", tag, &dw);
    check("matmul_backward", tag, &db);
    struct pair *all[] = {&inp, &w, &b, &out, &dout, &dinp, &dw, &db};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pair_free(all[i]);
}

/* A region [off, off + n) of a pair. */
static struct pair region(const struct pair *p, size_t off, size_t n)
{
    struct pair r = {p->c + off, p->g + off, n};
    return r;
}

/* Both copies of p set to NaN: what an overwrite must not read. */
static void pair_nan(struct pair *p)
{
    float *h = malloc(p->n * sizeof(float) + 1);
    if (!h)
        abort();
    for (size_t i = 0; i < p->n; i++)
        h[i] = NAN;
    check_rc(gpt_backend_upload(cpu, p->c, h, p->n * sizeof(float)), "cpu upload");
    check_rc(gpt_backend_upload(gpu, p->g, h, p->n * sizeof(float)), "gpu upload");
    free(h);
}

/* LayerNorm's backward twice on the same inputs, each time into a copy
 * of the same dinp and of the same dweight and dbias (added to): the same
 * bits, the blocks' partials being summed in a fixed order without
 * atomics. At GPT-2's shape (N 16384, C 768) that is 1024 blocks. */
static void test_layernorm_repeat(size_t N, size_t C, const char *tag)
{
    struct pair inp = pair_new(N * C, -3, 5), w = pair_new(C, 0.5f, 1.5f), b = pair_new(C, -1, 1);
    struct pair out = pair_new(N * C, 0, 0), mean = pair_new(N, 0, 0), rstd = pair_new(N, 0, 0);
    struct pair dout = pair_new(N * C, -1, 1), dinp = pair_new(N * C, -1, 1);
    struct pair dp = pair_new(2 * C, -1, 1);
    gpt_backend_layernorm_forward(gpu, out.g, mean.g, rstd.g, inp.g, w.g, b.g, N, C);
    const size_t n = N * C + 2 * C;
    float *h[2];
    for (int k = 0; k < 2; k++) {
        float *d, *p;
        check_rc(gpt_backend_alloc(gpu, N * C * sizeof(float), (void **)&d), "alloc");
        check_rc(gpt_backend_alloc(gpu, 2 * C * sizeof(float), (void **)&p), "alloc");
        gpt_backend_copy(gpu, d, dinp.g, N * C * sizeof(float));
        gpt_backend_copy(gpu, p, dp.g, 2 * C * sizeof(float));
        gpt_backend_layernorm_backward(gpu, d, p, p + C, dout.g, inp.g, w.g, mean.g, rstd.g, N, C);
        h[k] = malloc(n * sizeof(float));
        if (!h[k])
            abort();
        check_rc(gpt_backend_download(gpu, h[k], d, N * C * sizeof(float)), "download");
        check_rc(gpt_backend_download(gpu, h[k] + N * C, p, 2 * C * sizeof(float)), "download");
        gpt_backend_mem_free(gpu, d);
        gpt_backend_mem_free(gpu, p);
    }
    report("layernorm_deterministic", tag, memcmp(h[0], h[1], n * sizeof(float)) != 0 ? 1.0 : 0.0);
    free(h[0]);
    free(h[1]);
    struct pair *all[] = {&inp, &w, &b, &out, &mean, &rstd, &dout, &dinp, &dp};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pair_free(all[i]);
}

/* be->grad_assign (a step's first backward): the parameter gradients of
 * the products (dweight by a beta-0 product, dbias stored from the bias
 * epilogue's sums or the column sums) and of LayerNorm (its column sums
 * stored) overwrite what was there (NaN, which any read would spread),
 * then the same ops with the overwrite off add to them; each against the
 * CPU backend. The first product's dbias sits one float into its
 * allocation, so its epilogue's sums go through scratch and a copy; the
 * second's is aligned, so they are written there directly
 * (gpt_cuda_plan_bgrad_direct). LayerNorm is C wide: 768 takes the single-pass kernel, 2048
 * the row kernel with the column sums. */
static void test_grad_assign(size_t N, size_t C, size_t OC)
{
    char tag[80];
    struct pair inp = pair_new(N * C, -1, 1), w = pair_new(OC * C, -0.5f, 0.5f);
    struct pair dout = pair_new(N * OC, -1, 1), dinp = pair_new(N * C, 0, 0);
    struct pair pre = pair_new(N * OC, -3, 3), w2 = pair_new(C * OC, -0.5f, 0.5f);
    struct pair dinp2 = pair_new(N * OC, 0, 0), dln = pair_new(N * C, -1, 1);
    struct pair dw = pair_new(OC * C, 0, 0), dbs = pair_new(OC + 1, 0, 0);
    struct pair db = region(&dbs, 1, OC);
    struct pair dw2 = pair_new(C * OC, 0, 0), db2 = pair_new(C, 0, 0);
    struct pair lw = pair_new(C, 0.5f, 1.5f), lb = pair_new(C, -1, 1), ln = pair_new(N * C, 0, 0);
    struct pair mean = pair_new(N, 0, 0), rstd = pair_new(N, 0, 0), dres = pair_new(N * C, -1, 1);
    struct pair dlw = pair_new(C, 0, 0), dlb = pair_new(C, 0, 0);
    struct pair *grads[] = {&dw, &db, &dw2, &db2, &dlw, &dlb};
    for (size_t i = 0; i < sizeof(grads) / sizeof(grads[0]); i++)
        pair_nan(grads[i]);
    struct gpt_backend *bes[2] = {cpu, gpu};
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < 2; k++) {
            struct gpt_backend *be = bes[k];
            int g = k == 1;
#define P(pr) (g ? (pr).g : (pr).c)
            check_rc(gpt_backend_set_grad_assign(be, pass == 0), "set_grad_assign");
            gpt_backend_matmul_backward(be, P(dinp), P(dw), P(db), P(dout), P(inp), P(w), N, C, OC);
            /* The MLP's second product: (N, OC) in, C out. */
            gpt_backend_matmul_backward_dgelu(be, P(dinp2), P(dw2), P(db2), P(inp), P(dout), P(w2),
                                              P(pre), N, OC, C);
            gpt_backend_layernorm_forward(be, P(ln), P(mean), P(rstd), P(inp), P(lw), P(lb), N, C);
            gpt_backend_layernorm_backward(be, P(dres), P(dlw), P(dlb), P(dln), P(inp), P(lw),
                                           P(mean), P(rstd), N, C);
            check_rc(gpt_backend_set_grad_assign(be, 0), "set_grad_assign");
#undef P
        }
        snprintf(tag, sizeof(tag), "N%zu C%zu OC%zu %s", N, C, OC,
                 pass == 0 ? "overwritten" : "then added to");
        check("matmul_backward", tag, &dw);
        check("matmul_backward", tag, &db);
        check("matmul_backward_dgelu", tag, &dw2);
        check("matmul_backward_dgelu", tag, &db2);
        check("layernorm_backward", tag, &dlw);
        check("layernorm_backward", tag, &dlb);
    }
    struct pair *all[] = {&inp, &w,  &dout, &dinp, &pre,  &w2,   &dinp2, &dw,  &dbs, &dw2,
                          &db2, &lw, &lb,   &ln,   &mean, &rstd, &dres,  &dlw, &dlb, &dln};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pair_free(all[i]);
}

/* The product with the skip connection as its beta term (cuBLASLt C =
 * res, D = out) against the CPU backend's separate ops; res is left
 * intact. */
static void test_matmul_residual(size_t N, size_t C, size_t OC, int with_bias)
{
    char tag[64];
    snprintf(tag, sizeof(tag), "N%zu C%zu OC%zu bias%d +res", N, C, OC, with_bias);
    struct pair inp = pair_new(N * C, -1, 1), w = pair_new(OC * C, -0.5f, 0.5f);
    struct pair b = pair_new(OC, -1, 1), res = pair_new(N * OC, -3, 3),
                out = pair_new(N * OC, 0, 0);
    gpt_backend_matmul_residual_forward(cpu, out.c, inp.c, w.c, with_bias ? b.c : NULL, res.c, N, C,
                                        OC);
    gpt_backend_matmul_residual_forward(gpu, out.g, inp.g, w.g, with_bias ? b.g : NULL, res.g, N, C,
                                        OC);
    check("matmul_forward", tag, &out);
    check("residual_forward", "skip connection intact", &res);
    struct pair *all[] = {&inp, &w, &b, &res, &out};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pair_free(all[i]);
}

/* The product fused with the GELU (cuBLASLt GELU_AUX_BIAS and DGELU
 * epilogues on the GPU) against the CPU backend's separate ops (its
 * front-end falls back): pre-GELU, GELU output, then the backward through
 * the product whose input was that GELU output (dinp multiplied by
 * gelu'(pre), dweight and dbias accumulated). */
static void test_matmul_gelu(size_t N, size_t C, size_t OC, int with_bias)
{
    char tag[64];
    snprintf(tag, sizeof(tag), "N%zu C%zu OC%zu bias%d", N, C, OC, with_bias);
    struct pair inp = pair_new(N * C, -1, 1), w = pair_new(OC * C, -0.5f, 0.5f);
    struct pair b = pair_new(OC, -1, 1), out = pair_new(N * OC, 0, 0), pre = pair_new(N * OC, 0, 0);
    gpt_backend_matmul_gelu_forward(cpu, out.c, pre.c, inp.c, w.c, with_bias ? b.c : NULL, N, C,
                                    OC);
    gpt_backend_matmul_gelu_forward(gpu, out.g, pre.g, inp.g, w.g, with_bias ? b.g : NULL, N, C,
                                    OC);
    check("matmul_gelu_forward", "pre-GELU", &pre);
    check("matmul_gelu_forward", tag, &out);
    /* The next product: y (N, C) = out (N, OC) @ w2 (C, OC)^T; backward
     * from dy through it and the GELU: d(pre) = (dy @ w2) * gelu'(pre). */
    struct pair w2 = pair_new(C * OC, -0.5f, 0.5f), dy = pair_new(N * C, -1, 1);
    struct pair dpre = pair_new(N * OC, 0, 0), dw2 = pair_new(C * OC, -1, 1);
    struct pair db2 = pair_new(C, -1, 1);
    gpt_backend_matmul_backward_dgelu(cpu, dpre.c, dw2.c, with_bias ? db2.c : NULL, dy.c, out.c,
                                      w2.c, pre.c, N, OC, C);
    gpt_backend_matmul_backward_dgelu(gpu, dpre.g, dw2.g, with_bias ? db2.g : NULL, dy.g, out.g,
                                      w2.g, pre.g, N, OC, C);
    check("matmul_backward_dgelu", tag, &dpre);
    check("matmul_backward_dgelu", "dweight", &dw2);
    check("matmul_backward_dgelu", "dbias", &db2);
    struct pair *all[] = {&inp, &w, &b, &out, &pre, &w2, &dy, &dpre, &dw2, &db2};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pair_free(all[i]);
}

/* bf16 mode: a weight that AdamW updates is written to its bf16 copy,
 * rounded to nearest; the next product must see the new weights (within
 * bf16 error), and the same updates must give the same bits. */
static void test_bf16_weights(size_t N, size_t C, size_t OC)
{
    char tag[64];
    snprintf(tag, sizeof(tag), "N%zu C%zu OC%zu", N, C, OC);
    struct pair inp = pair_new(N * C, -1, 1), w = pair_new(OC * C, -0.5f, 0.5f);
    struct pair g = pair_new(OC * C, -1, 1), m = pair_new(OC * C, 0, 0), v = pair_new(OC * C, 0, 0);
    struct pair out = pair_new(N * OC, 0, 0);
    float *first = malloc(N * OC * sizeof(float) + 1), *again = malloc(N * OC * sizeof(float) + 1);
    float *host_w = host_rand(OC * C, -0.5f, 0.5f);
    if (!first || !again)
        abort();
    for (int round = 0; round < 2; round++) {
        check_rc(gpt_backend_set_precision(gpu, 1, 4242), "set_precision");
        check_rc(gpt_backend_upload(gpu, w.g, host_w, OC * C * sizeof(float)), "upload");
        check_rc(gpt_backend_upload(cpu, w.c, host_w, OC * C * sizeof(float)), "upload");
        gpt_backend_memzero(gpu, m.g, OC * C * sizeof(float));
        gpt_backend_memzero(gpu, v.g, OC * C * sizeof(float));
        gpt_backend_memzero(cpu, m.c, OC * C * sizeof(float));
        gpt_backend_memzero(cpu, v.c, OC * C * sizeof(float));
        /* The first product creates the weight's bf16 copy. */
        gpt_backend_matmul_forward(gpu, out.g, inp.g, w.g, NULL, N, C, OC);
        for (int t = 1; t <= 3; t++) {
            float bc1 = 1.0f - powf(0.9f, (float)t), bc2 = 1.0f - powf(0.95f, (float)t);
            gpt_backend_adamw(cpu, w.c, g.c, m.c, v.c, OC * C, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f,
                              1.0f, bc1, bc2);
            gpt_backend_adamw(gpu, w.g, g.g, m.g, v.g, OC * C, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f,
                              1.0f, bc1, bc2);
        }
        gpt_backend_matmul_forward(cpu, out.c, inp.c, w.c, NULL, N, C, OC);
        gpt_backend_matmul_forward(gpu, out.g, inp.g, w.g, NULL, N, C, OC);
        check("matmul_forward", "after AdamW (bf16 copy rounded to nearest)", &out);
        check_rc(gpt_backend_download(gpu, round ? again : first, out.g, N * OC * sizeof(float)),
                 "download");
    }
    double diff = 0.0;
    for (size_t i = 0; i < N * OC; i++)
        diff = fmax(diff, fabs((double)first[i] - (double)again[i]));
    report("bf16_repeat", tag, diff);
    /* An upload makes the bf16 copy stale: the product must use the new
     * values. */
    float *h2 = host_rand(OC * C, -0.5f, 0.5f);
    check_rc(gpt_backend_upload(gpu, w.g, h2, OC * C * sizeof(float)), "upload");
    check_rc(gpt_backend_upload(cpu, w.c, h2, OC * C * sizeof(float)), "upload");
    gpt_backend_matmul_forward(cpu, out.c, inp.c, w.c, NULL, N, C, OC);
    gpt_backend_matmul_forward(gpu, out.g, inp.g, w.g, NULL, N, C, OC);
    report("bf16_invalidate", tag, pair_err(&out, NULL, NULL));
    free(h2);
    free(host_w);
    free(first);
    free(again);
    struct pair *all[] = {&inp, &w, &g, &m, &v, &out};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pair_free(all[i]);
}

static void test_elementwise(size_t n)
{
    char tag[64];
    snprintf(tag, sizeof(tag), "n %zu", n);
    struct pair x = pair_new(n, -6, 6), y = pair_new(n, 0, 0), d = pair_new(n, -1, 1);
    /* GELU's error relative to its inputs' scale (1): for n 1 the largest
     * output can be ~1e-6 (x near -6, where 1 + tanh cancels), and a one-ulp
     * tanhf difference is then 1e-4 of it (seen on an H200). */
    gpt_backend_gelu_forward(cpu, y.c, x.c, n);
    gpt_backend_gelu_forward(gpu, y.g, x.g, n);
    report("gelu_forward", tag, pair_err_floor(&y, NULL, NULL, 1.0));
    gpt_backend_gelu_backward(cpu, d.c, x.c, d.c, n); /* in place, as the model does */
    gpt_backend_gelu_backward(gpu, d.g, x.g, d.g, n);
    report("gelu_backward", tag, pair_err_floor(&d, NULL, NULL, 1.0));
    /* One IEEE operation each, on inputs both sides hold bit for bit (not
     * on GELU's outputs, which differ in the last bit): the same bits. */
    struct pair r = pair_new(n, -3, 3);
    gpt_backend_residual_forward(cpu, r.c, r.c, x.c, n);
    gpt_backend_residual_forward(gpu, r.g, r.g, x.g, n);
    check("residual_forward", tag, &r);
    gpt_backend_scale(cpu, r.c, 0.37f, n);
    gpt_backend_scale(gpu, r.g, 0.37f, n);
    check("scale", tag, &r);
    pair_free(&r);
    double sc = gpt_backend_sumsq(cpu, x.c, n), sg = gpt_backend_sumsq(gpu, x.g, n);
    report("sumsq", tag, fabs(sg - sc) / sc);
    /* Determinism: the same sum twice. */
    report("sumsq", "repeatable", fabs(gpt_backend_sumsq(gpu, x.g, n) - sg));
    pair_free(&x);
    pair_free(&y);
    pair_free(&d);
}

static void test_adamw(size_t n)
{
    char tag[64];
    snprintf(tag, sizeof(tag), "n %zu", n);
    struct pair p = pair_new(n, -1, 1), g = pair_new(n, -1, 1);
    struct pair m = pair_new(n, -0.1f, 0.1f), v = pair_new(n, 0, 0.01f);
    for (int t = 1; t <= 3; t++) {
        float bc1 = 1.0f - powf(0.9f, (float)t), bc2 = 1.0f - powf(0.95f, (float)t);
        gpt_backend_adamw(cpu, p.c, g.c, m.c, v.c, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, bc1,
                          bc2);
        gpt_backend_adamw(gpu, p.g, g.g, m.g, v.g, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, bc1,
                          bc2);
    }
    check("adamw", tag, &p);
    check("adamw", tag, &m);
    check("adamw", tag, &v);
    pair_free(&p);
    pair_free(&g);
    pair_free(&m);
    pair_free(&v);
}

/* AdamW over many spans with their own decay flags in one launch (the
 * GPU's adamw_multi: a span table and a binary search per element)
 * against the CPU backend's per-span adamw; `gap` leaves a hole between
 * two spans, which the GPU must handle by its per-span fallback (and
 * leave the hole untouched). The run starts `start` floats into the
 * buffers: 3 takes the scalar loop; 0 (with the last span stretched to
 * a multiple of 4 in all) the four-at-a-time one, where most spans end
 * inside a group of four. */
static void test_adamw_multi(size_t n_spans, int gap, size_t start)
{
    char tag[64];
    snprintf(tag, sizeof(tag), "%zu spans%s from %zu", n_spans, gap ? ", a gap" : "", start);
    struct gpt_adamw_span *sp = calloc(n_spans, sizeof(*sp));
    if (!sp)
        abort();
    size_t pos = start;
    for (size_t i = 0; i < n_spans; i++) {
        size_t n = 1 + (i * 7919) % 3000;
        if (gap && i == n_spans / 2)
            pos += 17;
        if (start % 4 == 0 && i == n_spans - 1)
            n += (4 - (pos + n - start) % 4) % 4;
        sp[i] = (struct gpt_adamw_span){pos, n, (int)(i % 2)};
        pos += n;
    }
    struct pair p = pair_new(pos + 5, -1, 1), g = pair_new(pos + 5, -1, 1);
    struct pair m = pair_new(pos + 5, -0.1f, 0.1f), v = pair_new(pos + 5, 0, 0.01f);
    for (int t = 1; t <= 3; t++) {
        float bc1 = 1.0f - powf(0.9f, (float)t), bc2 = 1.0f - powf(0.95f, (float)t);
        gpt_backend_adamw_multi(cpu, p.c, g.c, m.c, v.c, sp, n_spans, 1e-3f, 0.9f, 0.95f, 1e-8f,
                                0.1f, 0.5f, bc1, bc2);
        gpt_backend_adamw_multi(gpu, p.g, g.g, m.g, v.g, sp, n_spans, 1e-3f, 0.9f, 0.95f, 1e-8f,
                                0.1f, 0.5f, bc1, bc2);
    }
    /* Large decay differences would show at once: lr * wd = 1e-4 per step
     * on |p| up to 1, against a bound of 1e-5. */
    check("adamw", tag, &p);
    check("adamw", tag, &m);
    check("adamw", tag, &v);
    pair_free(&p);
    pair_free(&g);
    pair_free(&m);
    pair_free(&v);
    free(sp);
}

static void test_xent(size_t N, size_t V, size_t Vp)
{
    char tag[64];
    snprintf(tag, sizeof(tag), "N%zu V%zu Vp%zu", N, V, Vp);
    int *t = malloc(N * sizeof(int)), *tc, *tg;
    for (size_t i = 0; i < N; i++)
        t[i] = i % 5 == 3 ? -1 : (int)gpt_rng_below(&rng, V); /* some ignored */
    ints_new(t, N, &tc, &tg);
    struct pair logits = pair_new(N * Vp, -8, 8), losses = pair_new(N, 0, 0);
    gpt_backend_softmax_xent(cpu, logits.c, losses.c, tc, N, V, Vp, 0.0f, 0);
    gpt_backend_softmax_xent(gpu, logits.g, losses.g, tg, N, V, Vp, 0.0f, 0);
    check("softmax_xent", tag, &losses);
    check("softmax_xent", "logits intact without dlogits", &logits);
    gpt_backend_softmax_xent(cpu, logits.c, losses.c, tc, N, V, Vp, 1.0f / (float)N, 1);
    gpt_backend_softmax_xent(gpu, logits.g, losses.g, tg, N, V, Vp, 1.0f / (float)N, 1);
    check("softmax_xent", tag, &losses);
    check("softmax_xent", "dlogits (padded columns 0)", &logits);
    /* The model's way: a loss call, then dlogits from its losses in one
     * pass (GPT_XENT_AFTER_LOSS); losses keep their values. */
    struct pair l2 = pair_new(N * Vp, -8, 8);
    gpt_backend_softmax_xent(cpu, l2.c, losses.c, tc, N, V, Vp, 0.0f, 0);
    gpt_backend_softmax_xent(gpu, l2.g, losses.g, tg, N, V, Vp, 0.0f, 0);
    gpt_backend_softmax_xent(cpu, l2.c, losses.c, tc, N, V, Vp, 1.0f / (float)N,
                             GPT_XENT_AFTER_LOSS);
    gpt_backend_softmax_xent(gpu, l2.g, losses.g, tg, N, V, Vp, 1.0f / (float)N,
                             GPT_XENT_AFTER_LOSS);
    check("softmax_xent", "losses after the one-pass dlogits", &losses);
    check("softmax_xent", "dlogits after a loss call (one pass)", &l2);
    pair_free(&l2);
    pair_free(&logits);
    pair_free(&losses);
    gpt_backend_mem_free(cpu, tc);
    gpt_backend_mem_free(gpu, tg);
    free(t);
}

/* bf16 mode: ops whose fp32 output feeds a product write its bf16 copy
 * alongside (the classifier's dlogits, LayerNorm backward's dinp), so the
 * product after them converts nothing. The first product creates the
 * output's bf16 copy (from the values before the op); if the op did not
 * refresh it, the second product would see the stale values and miss the
 * CPU result by far more than bf16 rounding. */
static void test_bf16_copies(size_t N, size_t C, size_t V, size_t Vp)
{
    char tag[64];
    snprintf(tag, sizeof(tag), "N%zu V%zu Vp%zu: dlogits bf16 copy", N, V, Vp);
    int *t = malloc(N * sizeof(int)), *tc, *tg;
    if (!t)
        abort();
    for (size_t i = 0; i < N; i++)
        t[i] = i % 7 == 2 ? -1 : (int)gpt_rng_below(&rng, V);
    ints_new(t, N, &tc, &tg);
    struct pair logits = pair_new(N * Vp, -8, 8), lnf = pair_new(N * C, -1, 1);
    struct pair wte = pair_new(Vp * C, -0.5f, 0.5f), dwte = pair_new(Vp * C, 0, 0);
    struct pair dc = pair_new(N * C, 0, 0);
    /* Prime: the head's backward reads the logits buffer as bf16. */
    gpt_backend_matmul_backward(cpu, dc.c, dwte.c, NULL, logits.c, lnf.c, wte.c, N, C, Vp);
    gpt_backend_matmul_backward(gpu, dc.g, dwte.g, NULL, logits.g, lnf.g, wte.g, N, C, Vp);
    gpt_backend_softmax_xent(cpu, logits.c, NULL, tc, N, V, Vp, 1.0f / (float)N, 1);
    gpt_backend_softmax_xent(gpu, logits.g, NULL, tg, N, V, Vp, 1.0f / (float)N, 1);
    gpt_backend_matmul_backward(cpu, dc.c, dwte.c, NULL, logits.c, lnf.c, wte.c, N, C, Vp);
    gpt_backend_matmul_backward(gpu, dc.g, dwte.g, NULL, logits.g, lnf.g, wte.g, N, C, Vp);
    check("matmul_backward", tag, &dc);

    snprintf(tag, sizeof(tag), "N%zu C%zu: LN dinp bf16 copy", N, C);
    struct pair inp = pair_new(N * C, -3, 5), w = pair_new(C, 0.5f, 1.5f), b = pair_new(C, -1, 1);
    struct pair out = pair_new(N * C, 0, 0), mean = pair_new(N, 0, 0), rstd = pair_new(N, 0, 0);
    struct pair dres = pair_new(N * C, -1, 1), dout = pair_new(N * C, -1, 1);
    struct pair dw = pair_new(C, 0, 0), db = pair_new(C, 0, 0);
    struct pair pw = pair_new(C * C, -0.5f, 0.5f), dpw = pair_new(C * C, 0, 0);
    gpt_backend_layernorm_forward(cpu, out.c, mean.c, rstd.c, inp.c, w.c, b.c, N, C);
    gpt_backend_layernorm_forward(gpu, out.g, mean.g, rstd.g, inp.g, w.g, b.g, N, C);
    gpt_backend_matmul_backward(cpu, dc.c, dpw.c, NULL, dres.c, inp.c, pw.c, N, C, C);
    gpt_backend_matmul_backward(gpu, dc.g, dpw.g, NULL, dres.g, inp.g, pw.g, N, C, C);
    gpt_backend_layernorm_backward(cpu, dres.c, dw.c, db.c, dout.c, inp.c, w.c, mean.c, rstd.c, N,
                                   C);
    gpt_backend_layernorm_backward(gpu, dres.g, dw.g, db.g, dout.g, inp.g, w.g, mean.g, rstd.g, N,
                                   C);
    check("layernorm_backward", tag, &dres);
    gpt_backend_matmul_backward(cpu, dc.c, dpw.c, NULL, dres.c, inp.c, pw.c, N, C, C);
    gpt_backend_matmul_backward(gpu, dc.g, dpw.g, NULL, dres.g, inp.g, pw.g, N, C, C);
    check("matmul_backward", tag, &dc);
    check("matmul_backward", tag, &dpw);
    struct pair *all[] = {&logits, &lnf,  &wte,  &dwte, &dc, &inp, &w,  &b,  &out,
                          &mean,   &rstd, &dres, &dout, &dw, &db,  &pw, &dpw};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pair_free(all[i]);
    gpt_backend_mem_free(cpu, tc);
    gpt_backend_mem_free(gpu, tg);
    free(t);
}

/* bf16 mode: outputs that only products read are written as bf16 only
 * once their allocation has a bf16 copy (the model's activation slab,
 * here one allocation holding every activation): LayerNorm's output, a
 * product's output (bias epilogue in bf16), GELU_AUX's output and
 * pre-activation, DGELU's output. Round 0 creates the copy (its first
 * bf16 reader); round 1 runs with every one of them bf16 only (checked
 * through the state and through the products that read them), then
 * downloads them (they come back converted); round 2 finds them bf16 only
 * again (a download does not teach), then an op reads the product's
 * output as fp32; round 3 finds that range written in fp32 (learned) and
 * the others still bf16 only. Every round's values match the fp32 CPU ops
 * within bf16 error. */
static void test_bf16_only(size_t N, size_t C, size_t OC)
{
    char tag[96];
    size_t nc = N * C, no = N * OC;
    /* The slab: x, ln, h, g, pre, y, dx. */
    size_t ox = 0, oln = nc, oh = 2 * nc, og = oh + no, op = og + no, oy = op + no, odx = oy + nc;
    struct pair act = pair_new(odx + no, 0, 0), x = pair_new(nc, -3, 3);
    struct pair lw = pair_new(C, 0.5f, 1.5f), lb = pair_new(C, -1, 1), mean = pair_new(N, 0, 0);
    struct pair rstd = pair_new(N, 0, 0), w = pair_new(OC * C, -0.5f, 0.5f),
                b = pair_new(OC, -1, 1);
    struct pair w2 = pair_new(C * OC, -0.5f, 0.5f), dy = pair_new(nc, -1, 1);
    struct pair dw2 = pair_new(C * OC, 0, 0), dln = pair_new(nc, 0, 0), dw = pair_new(OC * C, 0, 0);
    struct pair rx = region(&act, ox, nc), rln = region(&act, oln, nc), rh = region(&act, oh, no);
    struct pair rg = region(&act, og, no), rp = region(&act, op, no), ry = region(&act, oy, nc);
    struct pair rdx = region(&act, odx, no), sum = pair_new(no, 0, 0);
    struct pair *owned[] = {&rln, &rh, &rg, &rp, &rdx};
    const char *names[] = {"LayerNorm out", "product out", "GELU out", "pre-GELU", "DGELU out"};
    for (int round = 0; round < 4; round++) {
        gpt_backend_copy(cpu, rx.c, x.c, nc * sizeof(float));
        gpt_backend_copy(gpu, rx.g, x.g, nc * sizeof(float));
        struct gpt_backend *bes[2] = {cpu, gpu};
        for (int k = 0; k < 2; k++) {
            struct gpt_backend *be = bes[k];
            int g = k == 1;
#define P(pr) (g ? (pr).g : (pr).c)
            gpt_backend_layernorm_forward(be, P(rln), P(mean), P(rstd), P(rx), P(lw), P(lb), N, C);
            gpt_backend_matmul_forward(be, P(rh), P(rln), P(w), P(b), N, C, OC);
            gpt_backend_matmul_gelu_forward(be, P(rg), P(rp), P(rln), P(w), P(b), N, C, OC);
            gpt_backend_matmul_forward(be, P(ry), P(rg), P(w2), NULL, N, OC, C);
            gpt_backend_memzero(be, P(dw2), C * OC * sizeof(float));
            gpt_backend_memzero(be, P(dw), OC * C * sizeof(float));
            gpt_backend_matmul_backward_dgelu(be, P(rdx), P(dw2), NULL, P(dy), P(rg), P(w2), P(rp),
                                              N, OC, C);
            gpt_backend_matmul_backward(be, P(dln), P(dw), NULL, P(rdx), P(rln), P(w), N, C, OC);
#undef P
        }
        for (size_t i = 0; round > 0 && i < sizeof(owned) / sizeof(owned[0]); i++) {
            /* bf16 only from round 1 on, but the product's output (i 1),
             * which round 2's fp32 op taught the backend to write fp32. */
            int want = !(round == 3 && i == 1);
            snprintf(tag, sizeof(tag), "N%zu C%zu OC%zu round %d: %s %s", N, C, OC, round, names[i],
                     want ? "bf16 only" : "fp32 (learned)");
            int bo = gpt_cuda_backend_bf16_only(gpu, owned[i]->g, owned[i]->n * sizeof(float));
            report("bf16_only_state", tag, bo != want);
        }
        /* The readers of the bf16-only values, before any download. */
        snprintf(tag, sizeof(tag), "N%zu C%zu OC%zu round %d", N, C, OC, round);
        check("matmul_forward", tag, &ry);
        check("matmul_backward_dgelu", tag, &dw2);
        check("matmul_backward", tag, &dln);
        check("matmul_backward", tag, &dw);
        if (round == 2) { /* an op reading h as fp32 (h bf16 only again) */
            gpt_backend_residual_forward(cpu, sum.c, rh.c, rh.c, no);
            gpt_backend_residual_forward(gpu, sum.g, rh.g, rh.g, no);
            report("bf16_only", "an op's fp32 read of a bf16-only range",
                   pair_err(&sum, NULL, NULL));
        }
        /* Downloads (not in round 0: its ranges were not all owned yet):
         * owned values come back converted, and nothing is learned. */
        for (size_t i = 0; round > 0 && i < sizeof(owned) / sizeof(owned[0]); i++) {
            snprintf(tag, sizeof(tag), "N%zu C%zu OC%zu round %d: %s", N, C, OC, round, names[i]);
            report(owned[i] == &rdx ? "bf16_only_dgelu" : "bf16_only", tag,
                   pair_err(owned[i], NULL, NULL));
            report("bf16_only_state", tag,
                   gpt_cuda_backend_bf16_only(gpu, owned[i]->g, owned[i]->n * sizeof(float)));
        }
    }
    struct pair *all[] = {&act, &x,  &lw, &lb,  &mean, &rstd, &w,
                          &b,   &w2, &dy, &dw2, &dln,  &dw,   &sum};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pair_free(all[i]);
}

/* bf16 mode: the gradient a product writes into the slab (attproj's and
 * qkv's dinp, the model's a->dc) is read by the tensor-core attention
 * backward and by LayerNorm's backward from its bf16 copy, so it stays
 * bf16 only: no reader learns it as fp32. Per round: the attention
 * forward (its bf16 qkv read creates the slab's copy), LayerNorm's
 * forward for mean and rstd, the product's backward writing dc, then both
 * readers of dc; the state must be bf16 only after both readers, every
 * result must match the fp32 CPU ops within a product's bf16 error, and
 * both attention passes must run on tensor cores. The attention's output,
 * read only by the product (as bf16), is bf16 only as well. Last, dc and
 * the attention's output downloaded. */
static void test_bf16_only_dout(size_t B, size_t T, size_t C, size_t NH)
{
    char tag[96];
    size_t N = B * T, nc = N * C;
    size_t oq = 0, oy = 3 * nc, odc = oy + nc;
    struct pair act = pair_new(odc + nc, 0, 0), qkv0 = pair_new(3 * nc, -2, 2);
    struct pair x = pair_new(nc, -3, 3), lw = pair_new(C, 0.5f, 1.5f), lb = pair_new(C, -1, 1);
    struct pair mean = pair_new(N, 0, 0), rstd = pair_new(N, 0, 0), ln = pair_new(nc, 0, 0);
    struct pair w = pair_new(C * C, -0.5f, 0.5f), dy = pair_new(nc, -1, 1);
    struct pair dw = pair_new(C * C, 0, 0), dqkv = pair_new(3 * nc, 0, 0);
    struct pair dres = pair_new(nc, 0, 0), dlw = pair_new(C, 0, 0), dlb = pair_new(C, 0, 0);
    struct pair att = pair_new(gpt_backend_att_floats(gpu, B, T, C, NH, 0), 0, 0);
    struct pair scratch = pair_new(gpt_backend_att_floats(gpu, B, T, C, NH, 1), 0, 0);
    struct pair attc = pair_new(B * NH * T * T, 0, 0), scratchc = pair_new(B * NH * T * T, 0, 0);
    struct pair rq = region(&act, oq, 3 * nc), ry = region(&act, oy, nc);
    struct pair rdc = region(&act, odc, nc);
    for (int round = 0; round < 3; round++) {
        uint64_t before = gpt_cuda_flash_tc_launches();
        struct gpt_backend *bes[2] = {cpu, gpu};
        for (int k = 0; k < 2; k++) {
            struct gpt_backend *be = bes[k];
            int g = k == 1;
#define P(pr) (g ? (pr).g : (pr).c)
            float *a = g ? att.g : attc.c, *sc = g ? scratch.g : scratchc.c;
            gpt_backend_copy(be, P(rq), P(qkv0), 3 * nc * sizeof(float));
            gpt_backend_attention_forward(be, P(ry), a, P(rq), B, T, C, NH);
            gpt_backend_layernorm_forward(be, P(ln), P(mean), P(rstd), P(x), P(lw), P(lb), N, C);
            gpt_backend_memzero(be, P(dw), C * C * sizeof(float));
            gpt_backend_matmul_backward(be, P(rdc), P(dw), NULL, P(dy), P(ry), P(w), N, C, C);
            gpt_backend_attention_backward(be, P(dqkv), sc, P(rdc), P(ry), P(rq), a, B, T, C, NH);
            gpt_backend_memzero(be, P(dres), nc * sizeof(float));
            gpt_backend_memzero(be, P(dlw), C * sizeof(float));
            gpt_backend_memzero(be, P(dlb), C * sizeof(float));
            gpt_backend_layernorm_backward(be, P(dres), P(dlw), P(dlb), P(rdc), P(x), P(lw),
                                           P(mean), P(rstd), N, C);
#undef P
        }
        snprintf(tag, sizeof(tag), "B%zu T%zu C%zu NH%zu round %d", B, T, C, NH, round);
        report("flash_tc_path", tag, (double)(gpt_cuda_flash_tc_launches() - before != 2));
        report("bf16_only_state", tag, !gpt_cuda_backend_bf16_only(gpu, rdc.g, nc * sizeof(float)));
        snprintf(tag, sizeof(tag), "B%zu T%zu C%zu NH%zu round %d: attention out", B, T, C, NH,
                 round);
        report("bf16_only_state", tag, !gpt_cuda_backend_bf16_only(gpu, ry.g, nc * sizeof(float)));
        snprintf(tag, sizeof(tag), "B%zu T%zu C%zu NH%zu round %d", B, T, C, NH, round);
        check("flash_attention_backward", tag, &dqkv);
        check("layernorm_backward_bf16_dout", tag, &dres);
        check("layernorm_backward_bf16_dout", tag, &dlw);
        check("layernorm_backward_bf16_dout", tag, &dlb);
        check("matmul_backward", tag, &dw);
    }
    snprintf(tag, sizeof(tag), "B%zu T%zu C%zu NH%zu: dc downloaded", B, T, C, NH);
    report("bf16_only", tag, pair_err(&rdc, NULL, NULL));
    snprintf(tag, sizeof(tag), "B%zu T%zu C%zu NH%zu: attention out downloaded", B, T, C, NH);
    check("flash_attention_forward", tag, &ry); /* bf16 only, converted on the download */
    struct pair *all[] = {&act, &qkv0, &x,    &lw,  &lb,  &mean, &rstd,    &ln,   &w,       &dy,
                          &dw,  &dqkv, &dres, &dlw, &dlb, &att,  &scratch, &attc, &scratchc};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pair_free(all[i]);
}

/* bf16 mode, the classifier: logits written bf16 only by the head's
 * product, the loss and the one-pass dlogits read them as bf16 and write
 * the dlogits bf16 only in place, and the head's backward products read
 * those. Round 0 creates the slab's bf16 copy; round 1 checks the state,
 * then downloads the dlogits; both check the losses and the products.
 * fused: the training forward's way instead, one call that writes the
 * losses and the dlogits (the row kept in shared memory between its
 * passes where it fits). */
static void test_bf16_only_xent(size_t N, size_t C, size_t V, size_t Vp, int fused)
{
    char tag[96];
    int *t = malloc(N * sizeof(int)), *tc, *tg;
    if (!t)
        abort();
    for (size_t i = 0; i < N; i++)
        t[i] = i % 7 == 2 ? -1 : (int)gpt_rng_below(&rng, V);
    ints_new(t, N, &tc, &tg);
    size_t olog = N * C;
    struct pair act = pair_new(olog + N * Vp, -1, 1), wte = pair_new(Vp * C, -0.5f, 0.5f);
    struct pair losses = pair_new(N, 0, 0), dc = pair_new(N * C, 0, 0);
    struct pair dwte = pair_new(Vp * C, 0, 0);
    struct pair lnf = region(&act, 0, N * C), lg = region(&act, olog, N * Vp);
    for (int round = 0; round < 2; round++) {
        struct gpt_backend *bes[2] = {cpu, gpu};
        for (int k = 0; k < 2; k++) {
            struct gpt_backend *be = bes[k];
            int g = k == 1;
#define P(pr) (g ? (pr).g : (pr).c)
            gpt_backend_matmul_forward(be, P(lg), P(lnf), P(wte), NULL, N, C, Vp);
            if (fused) {
                gpt_backend_softmax_xent(be, P(lg), P(losses), g ? tg : tc, N, V, Vp,
                                         1.0f / (float)N, 1);
            } else {
                gpt_backend_softmax_xent(be, P(lg), P(losses), g ? tg : tc, N, V, Vp, 0.0f, 0);
                gpt_backend_softmax_xent(be, P(lg), P(losses), g ? tg : tc, N, V, Vp,
                                         1.0f / (float)N, GPT_XENT_AFTER_LOSS);
            }
            gpt_backend_memzero(be, P(dwte), Vp * C * sizeof(float));
            gpt_backend_matmul_backward(be, P(dc), P(dwte), NULL, P(lg), P(lnf), P(wte), N, C, Vp);
#undef P
        }
        snprintf(tag, sizeof(tag), "N%zu V%zu round %d%s", N, V, round, fused ? " fused" : "");
        if (round == 1)
            report("bf16_only_state", "dlogits bf16 only",
                   !gpt_cuda_backend_bf16_only(gpu, lg.g, lg.n * sizeof(float)));
        check("softmax_xent", tag, &losses);
        check("xent_backward", tag, &dc);
        check("xent_backward", tag, &dwte);
        if (round == 1) {
            report("xent_backward", "dlogits downloaded", pair_err(&lg, NULL, NULL));
            report("bf16_only_state", "dlogits after the download",
                   gpt_cuda_backend_bf16_only(gpu, lg.g, lg.n * sizeof(float)));
        }
    }
    struct pair *all[] = {&act, &wte, &losses, &dc, &dwte};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pair_free(all[i]);
    gpt_backend_mem_free(cpu, tc);
    gpt_backend_mem_free(gpu, tg);
    free(t);
}

/* bf16 mode, the residual stream: in one slab (so it has a bf16 copy
 * once a product reads the slab) the encoder writes x0, LayerNorm reads it
 * (ln1), the skip connection's product writes x1 = ln1 W^T + b + x0, a
 * second LayerNorm reads x1 (ln2), and products of ln1 and ln2 write the
 * LayerNorms' output gradients dy1 and dy2; then the backward's way: dres
 * zeroed, LayerNorm's backward of ln2 and of ln1 accumulate into it
 * (inputs x1 and x0; dout, inp and dres all read from bf16 copies: the
 * kernels that hold a row in registers, as in training), and the
 * encoder's backward reads it. Round 0 creates the slab's copy
 * (its first product); from round 1 x0, x1 and dres are bf16 only (state
 * checked), read as bf16 by every reader, and every output matches the
 * fp32 CPU ops within bf16 error. Round 2 reads x1 with an fp32 op
 * (residual_forward) while it is bf16 only: round 3 finds x1 written in
 * fp32 (learned) and dres still bf16 only, with the same values. The
 * downloads convert the ranges back (no longer bf16 only) without
 * learning: the next round's producers write them bf16 only again. wpe is offset so the rows' means
 * stay away from 0 (the statistics are compared relative to their largest value). */
static void test_bf16_resid(size_t B, size_t T, size_t C, size_t V)
{
    char tag[96];
    size_t N = B * T, nc = N * C;
    int *tok = malloc(N * sizeof(int)), *tc, *tg;
    if (!tok)
        abort();
    for (size_t i = 0; i < N; i++)
        tok[i] = (int)gpt_rng_below(&rng, V);
    ints_new(tok, N, &tc, &tg);
    /* The slab: x0, ln1, x1, ln2, dres, dy1, dy2. */
    struct pair act = pair_new(7 * nc, 0, 0);
    struct pair x0 = region(&act, 0, nc), ln1 = region(&act, nc, nc), x1 = region(&act, 2 * nc, nc);
    struct pair ln2 = region(&act, 3 * nc, nc), dres = region(&act, 4 * nc, nc);
    struct pair dy1 = region(&act, 5 * nc, nc), dy2 = region(&act, 6 * nc, nc);
    struct pair wte = pair_new(V * C, -1, 1), wpe = pair_new(T * C, 0.5f, 1.5f);
    struct pair lw = pair_new(C, 0.5f, 1.5f), lb = pair_new(C, -1, 1);
    struct pair w = pair_new(C * C, -0.02f, 0.02f), b = pair_new(C, -0.2f, 0.2f);
    struct pair m1 = pair_new(N, 0, 0), r1 = pair_new(N, 0, 0), m2 = pair_new(N, 0, 0);
    struct pair r2 = pair_new(N, 0, 0);
    struct pair dlw1 = pair_new(C, 0, 0), dlb1 = pair_new(C, 0, 0), dlw2 = pair_new(C, 0, 0);
    struct pair dlb2 = pair_new(C, 0, 0), dwte = pair_new(V * C, 0, 0),
                dwpe = pair_new(T * C, 0, 0);
    struct pair sum = pair_new(nc, 0, 0);
    for (int round = 0; round < 4; round++) {
        struct gpt_backend *bes[2] = {cpu, gpu};
        for (int k = 0; k < 2; k++) {
            struct gpt_backend *be = bes[k];
            int g = k == 1;
#define P(pr) (g ? (pr).g : (pr).c)
            gpt_backend_encoder_forward(be, P(x0), g ? tg : tc, P(wte), P(wpe), B, T, C);
            gpt_backend_layernorm_forward(be, P(ln1), P(m1), P(r1), P(x0), P(lw), P(lb), N, C);
            gpt_backend_matmul_residual_forward(be, P(x1), P(ln1), P(w), P(b), P(x0), N, C, C);
            gpt_backend_layernorm_forward(be, P(ln2), P(m2), P(r2), P(x1), P(lw), P(lb), N, C);
            gpt_backend_matmul_forward(be, P(dy1), P(ln1), P(w), P(b), N, C, C);
            gpt_backend_matmul_forward(be, P(dy2), P(ln2), P(w), P(b), N, C, C);
            gpt_backend_memzero(be, P(dres), nc * sizeof(float));
            gpt_backend_layernorm_backward(be, P(dres), P(dlw2), P(dlb2), P(dy2), P(x1), P(lw),
                                           P(m2), P(r2), N, C);
            gpt_backend_layernorm_backward(be, P(dres), P(dlw1), P(dlb1), P(dy1), P(x0), P(lw),
                                           P(m1), P(r1), N, C);
            gpt_backend_memzero(be, P(dwte), V * C * sizeof(float));
            gpt_backend_memzero(be, P(dwpe), T * C * sizeof(float));
            gpt_backend_encoder_backward(be, P(dwte), P(dwpe), P(dres), g ? tg : tc, B, T, C);
#undef P
        }
        /* The state before any download: bf16 only from round 1 on, but
         * x1 in round 3 (learned by round 2's fp32 read). */
        struct pair *held[] = {&x0, &x1, &dres};
        const char *names[] = {"encoder out", "skip product out", "residual gradient"};
        for (size_t i = 0; round > 0 && i < 3; i++) {
            if (round == 3 && i == 0)
                continue; /* the fp32 skip product of round 3 read it as fp32 */
            int want = !(round == 3 && i == 1);
            snprintf(tag, sizeof(tag), "B%zu T%zu C%zu round %d: %s %s", B, T, C, round, names[i],
                     want ? "bf16 only" : "fp32 (learned)");
            int bo = gpt_cuda_backend_bf16_only(gpu, held[i]->g, held[i]->n * sizeof(float));
            report("bf16_only_state", tag, bo != want);
        }
        snprintf(tag, sizeof(tag), "B%zu T%zu C%zu round %d", B, T, C, round);
        struct pair *outs[] = {&m1, &r1, &m2, &r2, &dlw1, &dlb1, &dlw2, &dlb2, &dwte, &dwpe};
        for (size_t i = 0; i < sizeof(outs) / sizeof(outs[0]); i++)
            check("bf16_resid", tag, outs[i]);
        if (round == 2) { /* an op reading x1 as fp32 while it is bf16 only: learned */
            gpt_backend_residual_forward(cpu, sum.c, x1.c, x1.c, nc);
            gpt_backend_residual_forward(gpu, sum.g, x1.g, x1.g, nc);
            report("bf16_resid", "an op's fp32 read of the bf16-only stream",
                   pair_err(&sum, NULL, NULL));
        }
        /* The bf16-only ranges and the products' outputs, downloaded:
         * converted back (both copies current, so no longer bf16 only),
         * and not learned (round 2 and 3 find x0 and dres bf16 only). */
        struct pair *acts[] = {&x0, &ln1, &x1, &ln2, &dres, &dy1, &dy2};
        for (size_t i = 0; i < sizeof(acts) / sizeof(acts[0]); i++)
            check("bf16_resid", tag, acts[i]);
        for (size_t i = 0; round > 0 && round < 3 && i < 3; i++) {
            snprintf(tag, sizeof(tag), "B%zu T%zu C%zu round %d: %s after the download", B, T, C,
                     round, names[i]);
            report("bf16_only_state", tag,
                   gpt_cuda_backend_bf16_only(gpu, held[i]->g, held[i]->n * sizeof(float)));
        }
    }
    struct pair *all[] = {&act, &wte, &wpe,  &lw,   &lb,   &w,    &b,    &m1,   &r1,
                          &m2,  &r2,  &dlw1, &dlb1, &dlw2, &dlb2, &dwte, &dwpe, &sum};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pair_free(all[i]);
    gpt_backend_mem_free(cpu, tc);
    gpt_backend_mem_free(gpu, tg);
    free(tok);
}

/* test_gpu_ops [--attention]: every op but the wg attention variants,
 * or (--attention, for the acceptance run's variant rows) the bf16
 * attention checks only, with the wg variants when GPTD_FLASH_FWD or
 * GPTD_FLASH_BWD chooses one. */
int main(int argc, char **argv)
{
    int only_attention = argc == 2 && strcmp(argv[1], "--attention") == 0;
    if (argc > 2 || (argc == 2 && !only_attention)) {
        fprintf(stderr, "usage: %s [--attention]\n", argv[0]);
        return 2;
    }
    int probed = gpu_test_gate();
    if (probed <= 0)
        return -probed;
    struct gpt_err err;
    if (gpt_backend_cpu_new(1, &cpu, &err) < 0 || gpt_backend_cuda_new(0, &gpu, &err) < 0) {
        fprintf(stderr, "backend: %s\n", err.msg);
        return 1;
    }
    gpt_rng_seed(&rng, 20261202);
    size_t bytes0, bytes, peak;
    gpt_cuda_backend_mem_stats(gpu, &bytes0, &peak);
    if (only_attention) {
        check_rc(gpt_backend_set_precision(gpu, 1, 1), "set_precision bf16");
        prec = "bf16";
        /* The wg variants where the environment chose one (the
         * acceptance run's wg rows), so that a fault in them shows in
         * those rows only. */
        test_attention_bf16(gpt_flash_tc_fwd_variant(getenv("GPTD_FLASH_FWD")) ==
                                GPT_FLASH_FWD_WG ||
                            gpt_flash_tc_bwd_variant(getenv("GPTD_FLASH_BWD")) == GPT_FLASH_BWD_WG);
        goto done;
    }
    test_memory();
    test_encoder_wte();
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        const struct shape *s = &shapes[i];
        char tag[64];
        snprintf(tag, sizeof(tag), "B%zu T%zu C%zu NH%zu", s->B, s->T, s->C, s->NH);
        test_encoder(s, tag);
        test_layernorm(s->B * s->T, s->C, tag);
        test_attention(s, tag);
        test_xent(s->B * s->T, s->V, s->Vp);
    }
    for (size_t i = 0; i < sizeof(flash_shapes) / sizeof(flash_shapes[0]); i++) {
        const struct shape *s = &flash_shapes[i];
        char tag[64];
        snprintf(tag, sizeof(tag), "B%zu T%zu C%zu NH%zu", s->B, s->T, s->C, s->NH);
        test_attention_as(s, tag, GPT_CUDA_ATTN_FLASH);
    }
    test_layernorm(4096, 768, "N4096 C768 (single pass)");
    test_layernorm(100, 2048, "N100 C2048 (row kernel fallback)");
    test_layernorm(37, 44, "N37 C44 (C % 8: the scalar LayerNorm loops)");
    test_layernorm(16384, 768, "N16384 C768 (GPT-2: 1024 blocks)");
    test_layernorm(16384, 1536, "N16384 C1536 (blocks capped by the scratch)");
    test_layernorm_repeat(16384, 768, "N16384 C768");
    test_layernorm_repeat(100, 2048, "N100 C2048 (row kernel fallback)");
    test_residual_layernorm(4096, 768, "residual+LN N4096 C768");
    test_residual_layernorm(33, 48, "residual+LN N33 C48");
    test_xent(64, 50257, 50304);
    /* fp32 rows past the shared-memory stage (60032 * 4 bytes > 227 KiB):
     * dlogits without a loss call read the row twice. */
    test_xent(16, 60000, 60032);
    static const size_t mm[][3] = {{1, 1, 1},     {7, 5, 3},       {66, 48, 144},
                                   {256, 64, 37}, {320, 96, 1000}, {1024, 768, 3072}};
    for (size_t i = 0; i < sizeof(mm) / sizeof(mm[0]); i++)
        for (int bias = 0; bias < 2; bias++)
            test_matmul(mm[i][0], mm[i][1], mm[i][2], bias, 1 - bias || i % 2);
    test_adamw_multi(1, 0, 3);
    test_adamw_multi(148, 0, 3);
    test_adamw_multi(148, 1, 3);
    test_adamw_multi(1500, 0, 3); /* more than one launch's table: per span */
    test_adamw_multi(1, 0, 0);
    test_adamw_multi(148, 0, 0);
    test_matmul_gelu(64, 48, 192, 1);
    test_matmul_gelu(1024, 768, 3072, 1);
    test_matmul_gelu(7, 5, 12, 0); /* unaligned: the separate ops */
    test_matmul_residual(1024, 3072, 768, 1);
    test_matmul_residual(66, 48, 144, 0);
    test_matmul_residual(7, 5, 3, 1); /* unaligned: the separate ops */
    static const size_t ns[] = {1, 31, 257, 100003, 3000017};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        test_elementwise(ns[i]);
        test_adamw(ns[i]);
    }
    test_grad_assign(4096, 768, 3072);
    test_grad_assign(100, 2048, 64);
    test_grad_assign(33, 48, 144);

    /* bf16 mode: the same ops against the same fp32 CPU ops. */
    check_rc(gpt_backend_set_precision(gpu, 1, 1), "set_precision bf16");
    prec = "bf16";
    for (size_t i = 0; i < sizeof(mm) / sizeof(mm[0]); i++)
        test_matmul(mm[i][0], mm[i][1], mm[i][2], (int)(i % 2), 1);
    for (size_t i = 0; i < sizeof(flash_shapes) / sizeof(flash_shapes[0]); i++) {
        const struct shape *s = &flash_shapes[i];
        char tag[64];
        snprintf(tag, sizeof(tag), "B%zu T%zu C%zu NH%zu", s->B, s->T, s->C, s->NH);
        test_attention_as(s, tag, GPT_CUDA_ATTN_FLASH);
    }
    test_attention_bf16(0);
    test_layernorm(4096, 768, "N4096 C768");
    test_layernorm(33, 48, "N33 C48");
    test_layernorm(37, 44, "N37 C44 (C % 8: the scalar LayerNorm loops)");
    test_layernorm_repeat(16384, 768, "N16384 C768");
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        char tag[64];
        snprintf(tag, sizeof(tag), "n %zu", ns[i]);
        struct pair x = pair_new(ns[i], -6, 6), y = pair_new(ns[i], 0, 0);
        struct pair d = pair_new(ns[i], -1, 1);
        gpt_backend_gelu_forward(cpu, y.c, x.c, ns[i]);
        gpt_backend_gelu_forward(gpu, y.g, x.g, ns[i]);
        report("gelu_forward", tag, pair_err_floor(&y, NULL, NULL, 1.0)); /* test_elementwise */
        gpt_backend_gelu_backward(cpu, d.c, x.c, d.c, ns[i]);
        gpt_backend_gelu_backward(gpu, d.g, x.g, d.g, ns[i]);
        report("gelu_backward", tag, pair_err_floor(&d, NULL, NULL, 1.0));
        pair_free(&x);
        pair_free(&y);
        pair_free(&d);
        test_adamw(ns[i]);
    }
    test_matmul_gelu(1024, 768, 3072, 1);
    test_matmul_residual(1024, 3072, 768, 1);
    test_matmul_residual(7, 5, 3, 1);
    test_grad_assign(4096, 768, 3072);
    test_grad_assign(33, 48, 144);
    test_adamw_multi(148, 0, 3);
    test_adamw_multi(148, 0, 0);
    test_bf16_copies(256, 64, 1000, 1024);
    test_bf16_copies(64, 768, 50257, 50304);
    test_bf16_weights(256, 64, 96);
    test_bf16_weights(1024, 768, 3072);
    test_bf16_only(256, 64, 192);
    test_bf16_only(1024, 768, 3072);
    test_bf16_only_xent(256, 64, 1000, 1024, 0);
    test_bf16_only_xent(256, 64, 1000, 1024, 1);
    test_bf16_only_dout(2, 256, 384, 6);
    test_bf16_only_dout(1, 200, 256, 2);
    test_bf16_only_xent(64, 768, 50257, 50304, 0);
    test_bf16_only_xent(64, 768, 50257, 50304, 1);
    test_bf16_resid(2, 64, 64, 50);
    test_bf16_resid(4, 256, 768, 1000);
    check_rc(gpt_backend_set_precision(gpu, GPT_BACKEND_PREC_NO_TF32, 0), "set_precision fp32");
    prec = "fp32";

done:;
    int rc = gpt_backend_sync(gpu);
    if (rc < 0) {
        fprintf(stderr, "sticky error: %s\n", gpt_cuda_backend_last_error(gpu));
        failures++;
    }
    gpt_cuda_backend_mem_stats(gpu, &bytes, &peak);
    printf("device memory: %zu bytes held (%zu at start), peak %zu\n", bytes, bytes0, peak);
    report("memory", "accounting: every buffer freed", (double)(bytes != bytes0));
    gpt_backend_free(gpu);
    gpt_backend_free(cpu);
    printf("%d of %d checks failed\n", failures, checks);
    return failures ? 1 : 0;
}
