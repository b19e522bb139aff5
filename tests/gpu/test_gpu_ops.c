/*
 * test_gpu_ops: the CUDA backend against the CPU backend on the same seeded
 * random inputs. First every case of the op table (tests/unit/op_cases.c,
 * the cases test_ops_gradcheck checks on the CPU): each stream op over
 * its shapes, sizes that are not multiples of any block size and odd
 * widths that force the cuBLAS fallback of the products; attention on
 * both GPU paths (the batched-GEMM path, whose att holds probabilities,
 * compared too, and the fused flash kernels); in fp32, and the rows that
 * say so in bf16. Then what the table cannot say: the token-embedding
 * gradient bit for bit the sequential sum of each token's rows in
 * position order, LayerNorm's backward bit-identical when repeated (GPT-2's
 * shape, its many blocks), parameter gradients overwritten by the first
 * backward (grad_assign); in bf16 the tensor-core flash kernels (head
 * sizes 32 to 128, T from 40 to 4096, taken for certain and
 * bit-reproducible, each variant against the fused pass), a weight update
 * written to the bf16 copy rounded to nearest (and reproducible), a bf16
 * copy made stale by an upload, the bf16-only outputs (products with a
 * bf16 D, LayerNorm's output, GELU_AUX and DGELU, the classifier's
 * dlogits): read by the next products, converted back for an fp32 reader,
 * and written in fp32 from then on there; the residual stream and its
 * gradient in bf16 only. The error of a check is max |gpu - cpu| /
 * max |cpu| over an output; the table's rows carry their bounds, the
 * other checks' are in gpu_ops_common.c. Prints one line per check; exits
 * 77 without a GPU. One program of three files and the table: this one
 * (main and the checks outside the table but attention's), gpu_ops_attn.c
 * (the tensor-core attention checks) and gpu_ops_common.c (report, the
 * buffers on both backends and their comparison, the table's runner).
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
#include "unit/op_cases.h"

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

/* The MLP's products as the model runs them (GELU fused forward, the
 * second product, DGELU backward, the first product's backward with its
 * bias) on one backend, from the host inputs h (x, w, b, w2, dy), into
 * the host outputs out (y, dw2, dx, dw, db). */
enum { LV_X, LV_W, LV_B, LV_W2, LV_DY, LV_IN };
enum { LV_Y, LV_DW2, LV_DX, LV_DW, LV_DB, LV_OUT };
static void lever_mlp(struct gpt_backend *be, float *const h[LV_IN], float *out[LV_OUT], size_t N,
                      size_t C, size_t OC)
{
    const size_t in_n[LV_IN] = {N * C, OC * C, OC, C * OC, N * C};
    const size_t out_n[LV_OUT] = {N * C, C * OC, N * C, OC * C, OC};
    float *in[LV_IN], *o[LV_OUT], *g, *pre, *dg;
    for (int i = 0; i < LV_IN; i++) {
        check_rc(gpt_backend_alloc(be, in_n[i] * sizeof(float), (void **)&in[i]), "alloc");
        check_rc(gpt_backend_upload(be, in[i], h[i], in_n[i] * sizeof(float)), "upload");
    }
    for (int i = 0; i < LV_OUT; i++) {
        check_rc(gpt_backend_alloc(be, out_n[i] * sizeof(float), (void **)&o[i]), "alloc");
        gpt_backend_memzero(be, o[i], out_n[i] * sizeof(float));
    }
    check_rc(gpt_backend_alloc(be, N * OC * sizeof(float), (void **)&g), "alloc");
    check_rc(gpt_backend_alloc(be, N * OC * sizeof(float), (void **)&pre), "alloc");
    check_rc(gpt_backend_alloc(be, N * OC * sizeof(float), (void **)&dg), "alloc");
    gpt_backend_matmul_gelu_forward(be, g, pre, in[LV_X], in[LV_W], in[LV_B], N, C, OC);
    gpt_backend_matmul_forward(be, o[LV_Y], g, in[LV_W2], NULL, N, OC, C);
    gpt_backend_matmul_backward_dgelu(be, dg, o[LV_DW2], NULL, in[LV_DY], g, in[LV_W2], pre, N, OC,
                                      C);
    gpt_backend_matmul_backward(be, o[LV_DX], o[LV_DW], o[LV_DB], dg, in[LV_X], in[LV_W], N, C, OC);
    for (int i = 0; i < LV_OUT; i++) {
        check_rc(gpt_backend_download(be, out[i], o[i], out_n[i] * sizeof(float)), "download");
        gpt_backend_mem_free(be, o[i]);
    }
    for (int i = 0; i < LV_IN; i++)
        gpt_backend_mem_free(be, in[i]);
    gpt_backend_mem_free(be, g);
    gpt_backend_mem_free(be, pre);
    gpt_backend_mem_free(be, dg);
}

/* max |a - b| / max |b| over n floats. */
static double host_err(const float *a, const float *b, size_t n)
{
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - (double)b[i]), y = fabs((double)b[i]);
        d = isnan(x) || x > d ? (isnan(x) ? INFINITY : x) : d;
        m = y > m ? y : m;
    }
    return m > 0 ? d / m : d;
}

/* The step-time levers of the products (backend.h's precision flags
 * `lever`: GEMM_TUNE, GELU_UNFUSED), each on a CUDA backend of its own in
 * bf16, against this program's GPU backend (the default) on the same MLP
 * inputs: every output within `tol` of the default's (another algorithm
 * or a GELU rounded at another point sums or rounds differently), and the
 * lever's two runs of the same products the same bits (the autotune
 * chooses once per shape, on the first run, and keeps it). */
static void test_gemm_lever(int lever, const char *op, double tol, size_t N, size_t C, size_t OC)
{
    const size_t in_n[LV_IN] = {N * C, OC * C, OC, C * OC, N * C};
    const size_t out_n[LV_OUT] = {N * C, C * OC, N * C, OC * C, OC};
    const char *names[LV_OUT] = {"y", "dw2", "dx", "dw", "db"};
    const float lo[LV_IN] = {-2, -0.05f, -0.5f, -0.05f, -1};
    float *h[LV_IN], *def[LV_OUT], *run[2][LV_OUT];
    struct gpt_backend *lb = NULL;
    struct gpt_err err;
    char tag[96];
    if (gpt_backend_cuda_new(0, NULL, &lb, &err) < 0) {
        report(op, err.msg, INFINITY);
        return;
    }
    check_rc(gpt_backend_set_precision(lb, 1 | lever, 1), "set_precision lever");
    for (int i = 0; i < LV_IN; i++)
        h[i] = host_rand(in_n[i], lo[i], -lo[i]);
    for (int i = 0; i < LV_OUT; i++) {
        def[i] = malloc(out_n[i] * sizeof(float));
        run[0][i] = malloc(out_n[i] * sizeof(float));
        run[1][i] = malloc(out_n[i] * sizeof(float));
        if (!def[i] || !run[0][i] || !run[1][i])
            abort();
    }
    lever_mlp(gpu, h, def, N, C, OC);
    lever_mlp(lb, h, run[0], N, C, OC);
    lever_mlp(lb, h, run[1], N, C, OC);
    for (int i = 0; i < LV_OUT; i++) {
        snprintf(tag, sizeof(tag), "N%zu C%zu OC%zu %s vs default", N, C, OC, names[i]);
        report_tol(op, tag, host_err(run[0][i], def[i], out_n[i]), tol);
        snprintf(tag, sizeof(tag), "N%zu C%zu OC%zu %s repeated: same bits", N, C, OC, names[i]);
        report_tol(op, tag, memcmp(run[0][i], run[1][i], out_n[i] * sizeof(float)) != 0, 0);
        free(def[i]);
        free(run[0][i]);
        free(run[1][i]);
    }
    for (int i = 0; i < LV_IN; i++)
        free(h[i]);
    if (gpt_backend_sync(lb) < 0)
        report(op, gpt_cuda_backend_last_error(lb), INFINITY);
    gpt_backend_free(lb);
}

/* Parses test_gpu_ops' arguments: [--attention [--attn-fwd NAME]
 * [--attn-bwd NAME]]. The variants are the job spec's
 * trainer.attention_* (flash_tc.h's names), given to the GPU backend at
 * creation. 1 with --attention, 0 without, -1 for a usage error. */
static int parse_args(int argc, char **argv, struct gpt_backend_opts *o)
{
    if (argc == 1)
        return 0;
    if (strcmp(argv[1], "--attention") != 0)
        return -1;
    for (int i = 2; i < argc; i += 2) {
        int fwd = strcmp(argv[i], "--attn-fwd") == 0, bwd = strcmp(argv[i], "--attn-bwd") == 0;
        int v = i + 1 >= argc ? -1
                : fwd         ? gpt_flash_tc_fwd_variant(argv[i + 1])
                : bwd         ? gpt_flash_tc_bwd_variant(argv[i + 1])
                              : -1;
        if (v < 0)
            return -1;
        if (fwd)
            o->attn_forward = v;
        else
            o->attn_backward = v + 1;
    }
    return 1;
}

/* test_gpu_ops [--attention [--attn-fwd NAME] [--attn-bwd NAME]]: every
 * op but the wg and cuDNN attention variants, or (--attention, for the
 * acceptance run's variant rows) the bf16 attention checks only, on a
 * backend made with the variants named: with the wg variants when one is
 * wg, or cuDNN's checks alone when either is cudnn. */
int main(int argc, char **argv)
{
    struct gpt_backend_opts attn = {0};
    int only_attention = parse_args(argc, argv, &attn);
    if (only_attention < 0) {
        fprintf(stderr, "usage: %s [--attention [--attn-fwd NAME] [--attn-bwd NAME]]\n", argv[0]);
        return 2;
    }
    int probed = gpu_test_gate();
    if (probed <= 0)
        return -probed;
    struct gpt_err err;
    if (gpt_backend_cpu_new(1, &cpu, &err) < 0 || gpt_backend_cuda_new(0, &attn, &gpu, &err) < 0) {
        fprintf(stderr, "backend: %s\n", err.msg);
        return 1;
    }
    gpt_rng_seed(&rng, 20261202);
    size_t bytes0, bytes, peak;
    gpt_cuda_backend_mem_stats(gpu, &bytes0, &peak);
    if (only_attention) {
        check_rc(gpt_backend_set_precision(gpu, 1, 1), "set_precision bf16");
        prec = "bf16";
        /* The wg variants where the arguments chose one (the acceptance
         * run's wg rows), so that a fault in them shows in those rows
         * only; cuDNN's (its cudnn_ops rows) on their own. */
        int fv = attn.attn_forward, bv = attn.attn_backward - 1;
        if (fv == GPT_FLASH_FWD_CUDNN || bv == GPT_FLASH_BWD_CUDNN)
            test_attention_cudnn();
        else
            test_attention_bf16(fv == GPT_FLASH_FWD_WG || bv == GPT_FLASH_BWD_WG,
                                attn.attn_backward);
        goto done;
    }
    /* The op table in fp32, then what it cannot say: determinism, the
     * exact order of the token-embedding sums, gradients overwritten. */
    test_op_cases(OPC_FP32);
    test_encoder_wte();
    test_layernorm_repeat(16384, 768, "N16384 C768");
    test_layernorm_repeat(100, 2048, "N100 C2048 (row kernel fallback)");
    test_grad_assign(4096, 768, 3072);
    test_grad_assign(100, 2048, 64);
    test_grad_assign(33, 48, 144);

    /* bf16 mode: the table's bf16 cases against the same fp32 CPU ops,
     * then the tensor-core attention and the bf16 copies and shadows. */
    check_rc(gpt_backend_set_precision(gpu, 1, 1), "set_precision bf16");
    prec = "bf16";
    test_op_cases(OPC_BF16);
    test_attention_bf16(0, 0);
    test_layernorm_repeat(16384, 768, "N16384 C768");
    test_grad_assign(4096, 768, 3072);
    test_grad_assign(33, 48, 144);
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
    /* The levers the acceptance run times (rows gemm_tune_ops,
     * gelu_unfused_ops): GPT-2's MLP at 4 sequences, and an odd width. */
    test_gemm_lever(GPT_BACKEND_PREC_GEMM_TUNE, "gemm_autotune", 2e-2, 4096, 768, 3072);
    test_gemm_lever(GPT_BACKEND_PREC_GEMM_TUNE, "gemm_autotune", 2e-2, 200, 64, 256);
    test_gemm_lever(GPT_BACKEND_PREC_GELU_UNFUSED, "gelu_unfused", 2e-2, 4096, 768, 3072);
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
