/*
 * gpu_plan_rec: the recording backend of `bench_gpu_train --plan` (see
 * gpu_plan_rec.h). Owns its recorded kernels and its fake allocations;
 * one thread.
 */
#include "gpu_plan_rec.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flash_tc.h"
#include "wte_order.h"

/* ---- --plan: one training step's launches, recorded, not executed --------
 *
 * A recording backend stands in for the CUDA backend under the real model code
 * (engine/model.c, the trainer's AdamW and grad-norm calls), so the sequence of
 * ops and their shapes is the code's own. Each op records the kernels and GEMMs
 * that engine/ops/cuda/cuda_backend.cu's implementation of that op launches,
 * with the same decisions: the attention plan is gpt_cuda_plan_attention
 * (shared), and the bf16 operand conversions follow the backend's shadow rules,
 * with the same state machine (gpt_cuda_shd_state, one per allocation): a bf16
 * reader converts on a miss; LayerNorm, GELU, attention and AdamW write the
 * bf16 copy alongside; products, LayerNorm's output, the dlogits and the
 * residual stream and its gradient (the encoder, the skip connection's
 * products, memzero, LayerNorm's backward) are written as bf16 only (owned)
 * where no fp32 reader wanted them, readers that take either copy read the bf16
 * one where a range is held in bf16 only, an fp32 reader of an owned range
 * converts it back (bf16_to_f32) and the range is learned; every other write
 * makes the bf16 copy stale. Device memory is never touched: allocations are
 * addresses in an unmapped range, so a host dereference would crash the plan
 * instead of hiding. Three steps run (the first creates the shadows, the second
 * learns which owned ranges fp32 readers want); the third (steady state) is the
 * one reported. The per-op kernel lists below must change with the launchers in
 * cuda_backend.cu. */

#define REC_MAX_ALLOCS 64
#define REC_BASE       ((uintptr_t)0x7e0000000000ull) /* never mapped: fake device addresses */

struct rec_alloc {
    uintptr_t base;
    size_t bytes;
    struct gpt_cuda_shd_state *st; /* the shadow's state; NULL = no shadow yet */
};

struct rec_be {
    struct gpt_backend head; /* must stay first */
    int bf16, tf32;
    int attn_bwd; /* enum gpt_attn_bwd, as the CUDA backend's */
    struct gpt_cuda_kernel *k;
    size_t n, cap;
    int oom;
    struct rec_alloc allocs[REC_MAX_ALLOCS];
    size_t n_allocs;
    uintptr_t next;
};

static struct rec_be *rec(struct gpt_backend *be)
{
    return (struct rec_be *)be;
}

static void rec_add(struct rec_be *r, const char *name, enum gpt_cuda_kclass cls,
                    enum gpt_cuda_kunit unit, double flops, double bytes, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

static void rec_add(struct rec_be *r, const char *name, enum gpt_cuda_kclass cls,
                    enum gpt_cuda_kunit unit, double flops, double bytes, const char *fmt, ...)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 1024;
        struct gpt_cuda_kernel *t = realloc(r->k, cap * sizeof(*t));
        if (!t) {
            r->oom = 1;
            return;
        }
        r->k = t;
        r->cap = cap;
    }
    struct gpt_cuda_kernel *k = &r->k[r->n++];
    k->name = name;
    k->cls = cls;
    k->unit = unit;
    k->dtype = unit == GPT_KU_TC_TF32 ? "tf32" : unit == GPT_KU_FP32 ? "fp32" : "bf16";
    k->flops = flops;
    k->bytes = bytes;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->shape, sizeof(k->shape), fmt, ap);
    va_end(ap);
}

static struct rec_alloc *rec_find(struct rec_be *r, const void *p, size_t n)
{
    size_t off;
    for (size_t i = 0; i < r->n_allocs; i++)
        if (gpt_cuda_shadow_index(r->allocs[i].base, r->allocs[i].bytes, (uintptr_t)p, n, &off))
            return &r->allocs[i];
    return NULL;
}

static void rec_to_f32(struct rec_be *r, size_t lo, size_t hi)
{
    rec_add(r, "bf16_to_f32", GPT_KC_CONVERT, GPT_KU_FP32, 0, 6.0 * (double)(hi - lo), "n=%zu",
            hi - lo);
}

/* As cuda_shadow.cu's shd_ready_locked: crowded span sets give every
 * owned span back to fp32 first. */
static void rec_ready(struct rec_be *r, struct rec_alloc *a)
{
    if (!gpt_cuda_shd_crowded(a->st))
        return;
    for (size_t i = 0; i < a->st->own.n; i++)
        rec_to_f32(r, a->st->own.lo[i], a->st->own.hi[i]);
    gpt_cuda_shd_flushed(a->st);
}

/* As shd_read_f32_locked: an fp32 reader of the elements [lo, hi) of a. */
static void rec_read_f32(struct rec_be *r, struct rec_alloc *a, size_t lo, size_t hi, int learn)
{
    static size_t rlo[GPT_CUDA_SPANS_MAX], rhi[GPT_CUDA_SPANS_MAX];
    if (!gpt_cuda_spans_meets(&a->st->own, lo, hi))
        return;
    rec_ready(r, a);
    size_t k = gpt_cuda_shd_read_f32(a->st, lo, hi, learn, rlo, rhi);
    for (size_t i = 0; i < k; i++)
        rec_to_f32(r, rlo[i], rhi[i]);
}

/* The elements of a that the bytes [p, p + bytes) touch; 0 when none. */
static int rec_overlap(const struct rec_alloc *a, const void *p, size_t bytes, size_t *lo,
                       size_t *hi)
{
    /* As cuda_shadow.cu's shd_overlap. */
    uintptr_t q = (uintptr_t)p, me = a->base + a->bytes / sizeof(float) * sizeof(float);
    uintptr_t pe = bytes > UINTPTR_MAX - q ? UINTPTR_MAX : q + bytes;
    uintptr_t s0 = q > a->base ? q : a->base, e0 = pe < me ? pe : me;
    if (!a->st || s0 >= e0)
        return 0;
    *lo = (size_t)(s0 - a->base) / sizeof(float);
    *hi = ((size_t)(e0 - a->base) + sizeof(float) - 1) / sizeof(float);
    return 1;
}

/* cu_f32_learn: an fp32 reader of the bytes [p, p + bytes). */
static void rec_f32_learn(struct rec_be *r, const void *p, size_t bytes, int learn)
{
    if (!p)
        return;
    for (size_t i = 0; i < r->n_allocs; i++) {
        size_t lo, hi;
        if (rec_overlap(&r->allocs[i], p, bytes, &lo, &hi))
            rec_read_f32(r, &r->allocs[i], lo, hi, learn);
    }
}

/* cu_f32: an op's fp32 read (learned). */
static void rec_f32(struct rec_be *r, const void *p, size_t bytes)
{
    rec_f32_learn(r, p, bytes, 1);
}

/* shd_in: a reader of the floats [p, p + n); 1 = read as bf16. */
static int rec_in(struct rec_be *r, const float *p, size_t n)
{
    if (!r->bf16)
        return 0;
    struct rec_alloc *a = rec_find(r, p, n);
    if (!a)
        return 0;
    if (!a->st && !(a->st = calloc(1, sizeof(*a->st)))) {
        r->oom = 1;
        return 0;
    }
    size_t lo = ((uintptr_t)p - a->base) / sizeof(float);
    if (!gpt_cuda_spans_covers(&a->st->cur, lo, lo + n)) {
        rec_ready(r, a);
        rec_read_f32(r, a, lo, lo + n, 1);
        if (gpt_cuda_shd_read_bf16(a->st, lo, lo + n))
            rec_add(r, "f32_to_bf16", GPT_KC_CONVERT, GPT_KU_FP32, 0, 6.0 * (double)n, "n=%zu", n);
    }
    return 1;
}

/* shd_cur: 1 when the bf16 copy of [p, p + n) is current (no conversion). */
static int rec_cur(struct rec_be *r, const float *p, size_t n)
{
    struct rec_alloc *a = r->bf16 ? rec_find(r, p, n) : NULL;
    if (!a || !a->st)
        return 0;
    size_t lo = ((uintptr_t)p - a->base) / sizeof(float);
    return gpt_cuda_spans_covers(&a->st->cur, lo, lo + n);
}

/* shd_held: 1 when a reader that takes either copy reads the bf16 one
 * (current, some of it held in bf16 only). */
static int rec_held(struct rec_be *r, const float *p, size_t n)
{
    struct rec_alloc *a = r->bf16 ? rec_find(r, p, n) : NULL;
    if (!a || !a->st)
        return 0;
    size_t lo = ((uintptr_t)p - a->base) / sizeof(float);
    return gpt_cuda_shd_held(a->st, lo, lo + n);
}

/* shd_out: a producer that writes the bf16 copy when a shadow exists. */
static int rec_out(struct rec_be *r, const float *p, size_t n)
{
    if (!r->bf16)
        return 0;
    struct rec_alloc *a = rec_find(r, p, n);
    if (!a || !a->st)
        return 0;
    size_t lo = ((uintptr_t)p - a->base) / sizeof(float);
    rec_ready(r, a);
    gpt_cuda_shd_wrote_both(a->st, lo, lo + n);
    return 1;
}

/* shd_own: 1 when a producer may write [p, p + n) as bf16 only; nothing
 * is marked until rec_owned. */
static int rec_own(struct rec_be *r, const float *p, size_t n)
{
    struct rec_alloc *a = r->bf16 ? rec_find(r, p, n) : NULL;
    if (!a || !a->st)
        return 0;
    size_t lo = ((uintptr_t)p - a->base) / sizeof(float);
    rec_ready(r, a);
    return gpt_cuda_shd_may_own(a->st, lo, lo + n);
}

/* As cu_shd_owned (rules changed in between: converted back at once). */
static void rec_owned(struct rec_be *r, const float *p, size_t n)
{
    struct rec_alloc *a = rec_find(r, p, n);
    size_t lo = ((uintptr_t)p - a->base) / sizeof(float);
    rec_ready(r, a);
    if (gpt_cuda_shd_may_own(a->st, lo, lo + n)) {
        gpt_cuda_shd_wrote_bf16(a->st, lo, lo + n);
    } else {
        rec_to_f32(r, lo, lo + n);
        gpt_cuda_shd_wrote_both(a->st, lo, lo + n);
    }
}

/* shd_wrote: any other write makes the covered bf16 values stale. */
static void rec_wrote(struct rec_be *r, const void *p, size_t bytes)
{
    if (!r->bf16 || !p)
        return;
    for (size_t i = 0; i < r->n_allocs; i++) {
        size_t lo, hi;
        struct rec_alloc *a = &r->allocs[i];
        if (!rec_overlap(a, p, bytes, &lo, &hi))
            continue;
        rec_ready(r, a);
        gpt_cuda_shd_wrote_f32(a->st, lo, hi);
    }
}

static enum gpt_cuda_kunit rec_f32_gemm_unit(const struct rec_be *r)
{
    return r->tf32 ? GPT_KU_TC_TF32 : GPT_KU_FP32;
}

static void rec_destroy(struct gpt_backend *be)
{
    struct rec_be *r = rec(be);
    for (size_t i = 0; i < r->n_allocs; i++)
        free(r->allocs[i].st);
    free(r->k);
    free(r);
}

static int rec_alloc(struct gpt_backend *be, size_t bytes, void **ret)
{
    struct rec_be *r = rec(be);
    if (r->n_allocs == REC_MAX_ALLOCS)
        return -ENOMEM;
    struct rec_alloc *a = &r->allocs[r->n_allocs++];
    a->base = r->next;
    a->bytes = bytes;
    a->st = NULL;
    r->next += (bytes + 4095) & ~(size_t)4095;
    *ret = (void *)a->base;
    return 0;
}

static void rec_mem_free(struct gpt_backend *be, void *ptr)
{
    struct rec_be *r = rec(be);
    for (size_t i = 0; i < r->n_allocs; i++)
        if (r->allocs[i].base == (uintptr_t)ptr) {
            free(r->allocs[i].st);
            r->allocs[i] = r->allocs[--r->n_allocs];
            return;
        }
}

static int rec_upload(struct gpt_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)src;
    rec_wrote(rec(be), dst, bytes);
    return 0;
}

static int rec_download(struct gpt_backend *be, void *dst, const void *src, size_t bytes)
{
    rec_f32_learn(rec(be), src, bytes, 0);
    memset(dst, 0, bytes);
    return 0;
}

static void rec_copy(struct gpt_backend *be, void *dst, const void *src, size_t bytes)
{
    rec_f32(rec(be), src, bytes);
    rec_wrote(rec(be), dst, bytes);
    rec_add(rec(be), "memcpy_d2d", GPT_KC_MEM, GPT_KU_FP32, 0, 2.0 * (double)bytes, "bytes=%zu",
            bytes);
}

/* As cuda_memzero: whole floats zeroed in bf16 only where allowed. */
static void rec_memzero(struct gpt_backend *be, void *ptr, size_t bytes)
{
    struct rec_be *r = rec(be);
    size_t n = bytes / sizeof(float);
    if (bytes % sizeof(float) == 0 && (uintptr_t)ptr % sizeof(float) == 0 && rec_own(r, ptr, n)) {
        rec_owned(r, ptr, n);
        rec_add(r, "memset", GPT_KC_MEM, GPT_KU_FP32, 0, 2.0 * n, "bytes=%zu bf16", bytes);
        return;
    }
    rec_wrote(r, ptr, bytes);
    rec_add(r, "memset", GPT_KC_MEM, GPT_KU_FP32, 0, (double)bytes, "bytes=%zu", bytes);
}

/* As cuda_encoder_forward: the residual stream's start, bf16 only where
 * allowed, else fp32 with the bf16 copy where the slab has a shadow. */
static void rec_encoder_forward(struct gpt_backend *be, float *out, const int *inp,
                                const float *wte, const float *wpe, size_t B, size_t T, size_t C)
{
    (void)inp;
    (void)wte;
    (void)wpe;
    struct rec_be *r = rec(be);
    size_t n = B * T * C;
    double btc = (double)n;
    int own = rec_own(r, out, n);
    int ob = own || rec_out(r, out, n);
    if (own)
        rec_owned(r, out, n);
    /* wte and wpe rows read, the tokens read, out written. */
    rec_add(r, "encoder_forward", GPT_KC_EMBED, GPT_KU_FP32, btc,
            8.0 * btc + (own ? 0 : 4.0 * btc) + (ob ? 2.0 * btc : 0) + 4.0 * B * T,
            "B=%zu T=%zu C=%zu%s", B, T, C,
            own  ? " ->bf16"
            : ob ? " +bf16"
                 : "");
}

/* As cuda_encoder_backward: dout (the residual gradient) from its bf16
 * copy where held in bf16 only. */
static void rec_encoder_backward(struct gpt_backend *be, float *dwte, float *dwpe,
                                 const float *dout, const int *inp, size_t B, size_t T, size_t C)
{
    (void)inp;
    struct rec_be *r = rec(be);
    double btc = (double)(B * T * C), bt = (double)(B * T);
    int dob = rec_held(r, dout, B * T * C);
    if (!dob)
        rec_f32(r, dout, B * T * C * sizeof(float));
    rec_wrote(r, dwte, SIZE_MAX);
    rec_wrote(r, dwpe, T * C * sizeof(float));
    double es = dob ? 2.0 : 4.0;
    rec_add(r, "encoder_backward_wpe", GPT_KC_EMBED, GPT_KU_FP32, btc, es * btc + 8.0 * T * C,
            "B=%zu T=%zu C=%zu%s", B, T, C, dob ? " bf16 dout" : "");
    /* Deterministic, as cuk_encoder_backward (where 4 B*T fits the
     * scratch, GPT_CUDA_SCRATCH_FLOATS ints): the positions sorted by
     * (token, position) through integer counts (wte_order.h), then each
     * token's rows summed in position order from its first position.
     * Integer steps priced at the CUDA-core rate. Chunk pass: each
     * position counted against its chunk's GPT_WTE_CHUNK tokens (~6
     * instructions a compare; tokens read, the sorted tokens and three
     * counts written). Count pass: two binary searches of log2(CHUNK) + 1
     * steps per position and other chunk (~4 instructions a step; the
     * tokens and sorted tokens read, the counts read and written once in
     * DRAM: the slices' atomics meet in L2). Place pass: the ranks read,
     * the order written. Sum pass: dout read once, dwte rows read and
     * written once (at most B*T of them), each position's counts and
     * token and the order read. This replaced a links pass of BT^2
     * compares on 64 blocks and a walk of a linked list per token, which
     * took 0.45 ms on an H200 at B 16, T 1024 (0.09 predicted). */
    double chunk = bt < GPT_WTE_CHUNK ? bt : GPT_WTE_CHUNK;
    double others = ceil(bt / GPT_WTE_CHUNK) - 1.0;
    double steps = 2.0 * (log2(GPT_WTE_CHUNK) + 1.0);
    rec_add(r, "encoder_wte_chunk", GPT_KC_EMBED, GPT_KU_FP32, 6.0 * bt * chunk, 20.0 * bt,
            "BT=%zu", B * T);
    if (others > 0)
        rec_add(r, "encoder_wte_count", GPT_KC_EMBED, GPT_KU_FP32, 4.0 * steps * bt * others,
                32.0 * bt, "BT=%zu", B * T);
    rec_add(r, "encoder_wte_place", GPT_KC_EMBED, GPT_KU_FP32, 0, 8.0 * bt, "BT=%zu", B * T);
    rec_add(r, "encoder_wte_sum", GPT_KC_EMBED, GPT_KU_FP32, btc, es * btc + 8.0 * btc + 20.0 * bt,
            "B=%zu T=%zu C=%zu%s", B, T, C, dob ? " bf16 dout" : "");
}

static void rec_layernorm_forward(struct gpt_backend *be, float *out, float *mean, float *rstd,
                                  const float *inp, const float *w, const float *b, size_t N,
                                  size_t C)
{
    (void)w;
    (void)b;
    struct rec_be *r = rec(be);
    /* As cuda_layernorm_forward: the input from its bf16 copy where held
     * in bf16 only; the output bf16 only where allowed, else both. */
    int ib = rec_held(r, inp, N * C);
    if (!ib)
        rec_f32(r, inp, N * C * sizeof(float));
    int own = rec_own(r, out, N * C);
    int ob = own || rec_out(r, out, N * C);
    rec_wrote(r, mean, N * sizeof(float));
    rec_wrote(r, rstd, N * sizeof(float));
    if (own)
        rec_owned(r, out, N * C);
    double nc = (double)(N * C);
    rec_add(r, "layernorm_forward", GPT_KC_NORM, GPT_KU_FP32, 8.0 * nc,
            (ib ? 2.0 : 4.0) * nc + (own ? 0 : 4.0 * nc) + (ob ? 2.0 * nc : 0) + 8.0 * N,
            "N=%zu C=%zu%s%s", N, C, ib ? " bf16 in" : "",
            own  ? " ->bf16"
            : ob ? " +bf16"
                 : "");
}

/* As cuda_residual_layernorm_forward: one row kernel for res = a + b and
 * its LayerNorm (a and b read, res and out written, out's bf16 copy). */
static void rec_residual_layernorm_forward(struct gpt_backend *be, float *res, float *out,
                                           float *mean, float *rstd, const float *a, const float *b,
                                           const float *w, const float *bias, size_t N, size_t C)
{
    (void)w;
    (void)bias;
    struct rec_be *r = rec(be);
    rec_f32(r, a, N * C * sizeof(float));
    rec_f32(r, b, N * C * sizeof(float));
    rec_wrote(r, res, N * C * sizeof(float));
    int own = rec_own(r, out, N * C);
    int ob = own || rec_out(r, out, N * C);
    rec_wrote(r, mean, N * sizeof(float));
    rec_wrote(r, rstd, N * sizeof(float));
    if (own)
        rec_owned(r, out, N * C);
    double nc = (double)(N * C);
    rec_add(r, "residual_layernorm_fwd", GPT_KC_NORM, GPT_KU_FP32, 9.0 * nc,
            12.0 * nc + (own ? 0 : 4.0 * nc) + (ob ? 2.0 * nc : 0) + 8.0 * N, "N=%zu C=%zu%s", N, C,
            own  ? " bf16"
            : ob ? " +bf16"
                 : "");
}

static void rec_layernorm_backward(struct gpt_backend *be, float *dinp, float *dweight,
                                   float *dbias, const float *dout, const float *inp,
                                   const float *weight, const float *mean, const float *rstd,
                                   size_t N, size_t C)
{
    (void)weight;
    (void)mean;
    (void)rstd;
    struct rec_be *r = rec(be);
    /* As cuk_layernorm_backward, with the backend's scratch. */
    unsigned blocks = gpt_cuda_plan_lnb_blocks(N, C, GPT_CUDA_SCRATCH_FLOATS);
    /* As cuda_layernorm_backward: where the single-pass kernel runs, dout
     * from its current bf16 copy, inp from its bf16 copy where held in
     * bf16 only, and dinp accumulated in bf16 only where so held and
     * allowed. */
    int dob = blocks > 0 && rec_cur(r, dout, N * C);
    if (!dob)
        rec_f32(r, dout, N * C * sizeof(float));
    int ib = blocks > 0 && rec_held(r, inp, N * C);
    if (!ib)
        rec_f32(r, inp, N * C * sizeof(float));
    rec_wrote(r, dweight, C * sizeof(float));
    rec_wrote(r, dbias, C * sizeof(float));
    int own = blocks > 0 && rec_held(r, dinp, N * C) && rec_own(r, dinp, N * C), db = own;
    if (!own) {
        rec_f32(r, dinp, N * C * sizeof(float));
        db = rec_out(r, dinp, N * C);
    }
    if (own)
        rec_owned(r, dinp, N * C);
    double nc = (double)(N * C);
    if (blocks > 0) {
        /* One pass: dout and inp read (bf16 or fp32); dinp read and
         * written (it accumulates): bf16 only, or fp32 plus its bf16
         * copy; the blocks' partials. The shape names what is read or
         * written as bf16: " bf16 dout inp dinp" in the steady state. */
        rec_add(r, "layernorm_backward", GPT_KC_NORM, GPT_KU_FP32, 14.0 * nc,
                (dob ? 2.0 : 4.0) * nc + (ib ? 2.0 : 4.0) * nc + (own ? 4.0 : 8.0) * nc +
                    (db && !own ? 2.0 * nc : 0) + 8.0 * N + 8.0 * blocks * C,
                "N=%zu C=%zu%s%s%s%s%s", N, C, dob || ib || own ? " bf16" : "", dob ? " dout" : "",
                ib ? " inp" : "", own ? " dinp" : "", db && !own ? " +bf16" : "");
        /* The partials summed into dweight and dbias by one launch
         * (stored, without a read, under be->grad_assign). */
        rec_add(r, "layernorm_backward_sum", GPT_KC_NORM, GPT_KU_FP32, 2.0 * blocks * C,
                8.0 * blocks * C + (be->grad_assign ? 8.0 : 16.0) * C, "blocks=%u C=%zu", blocks,
                C);
        return;
    }
    /* dout, inp read; dinp read and written; the two-pass column sums
     * read dout and inp again. */
    rec_add(r, "layernorm_backward", GPT_KC_NORM, GPT_KU_FP32, 12.0 * nc,
            24.0 * nc + (db ? 2.0 * nc : 0) + 8.0 * N, "N=%zu C=%zu", N, C);
}

/* One product: (M, N) output, K deep; operands bf16 (bf) or fp32, output
 * written as bf16 (out_bf: an owned range) or fp32. */
static void rec_gemm(struct rec_be *r, const char *name, int bf, int out_bf, size_t M, size_t N,
                     size_t K, double extra_bytes)
{
    double es = bf ? 2.0 : 4.0;
    rec_add(r, name, GPT_KC_GEMM, bf ? GPT_KU_TC_BF16 : rec_f32_gemm_unit(r),
            2.0 * (double)M * (double)N * (double)K,
            es * ((double)M * K + (double)N * K) + (out_bf ? 2.0 : 4.0) * (double)M * N +
                extra_bytes,
            "M=%zu N=%zu K=%zu%s", M, N, K, out_bf ? " ->bf16" : "");
}

/* As cuda_matmul.cu's gemm_bf16_own: 1 when the product writes `out`
 * (count floats; and aux_out, the GELU pre-activation) as bf16 only,
 * its bias (OC floats) and aux input read as bf16; assumes cuBLASLt takes
 * the bf16 D (it does for llm.c's same calls). */
static int rec_gemm_own(struct rec_be *r, const float *out, size_t count, const float *bias,
                        size_t OC, const float *aux_out, const float *aux_in)
{
    if (!rec_own(r, out, count) || (aux_out && !rec_own(r, aux_out, count)))
        return 0;
    if ((bias && !rec_in(r, bias, OC)) || (aux_in && !rec_in(r, aux_in, count)))
        return 0;
    rec_owned(r, out, count);
    if (aux_out)
        rec_owned(r, aux_out, count);
    return 1;
}

static void rec_matmul_forward(struct gpt_backend *be, float *out, const float *inp,
                               const float *weight, const float *bias, size_t N, size_t C,
                               size_t OC)
{
    struct rec_be *r = rec(be);
    int bf = 0, own = 0;
    if (bias)
        rec_f32(r, bias, OC * sizeof(float));
    if (r->bf16) {
        int wb = rec_in(r, weight, OC * C), ib = rec_in(r, inp, N * C);
        bf = wb && ib;
        own = bf && rec_gemm_own(r, out, N * OC, bias, OC, NULL, NULL);
    }
    if (!bf) {
        rec_f32(r, inp, N * C * sizeof(float));
        rec_f32(r, weight, OC * C * sizeof(float));
    }
    if (!own)
        rec_wrote(r, out, N * OC * sizeof(float));
    rec_gemm(r, bias ? "gemm_fwd+bias" : "gemm_fwd", bf, own, OC, N, C,
             bias ? (own ? 2.0 : 4.0) * OC : 0);
}

static void rec_matmul_backward(struct gpt_backend *be, float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp, const float *weight, size_t N,
                                size_t C, size_t OC)
{
    struct rec_be *r = rec(be);
    int wb = 0, db = 0, ib = 0, own = 0;
    if (r->bf16) {
        wb = dinp ? rec_in(r, weight, OC * C) : 0;
        db = rec_in(r, dout, N * OC);
        ib = rec_in(r, inp, N * C);
    }
    rec_f32(r, dweight, OC * C * sizeof(float));
    rec_wrote(r, dweight, OC * C * sizeof(float));
    if (dbias) {
        rec_f32(r, dbias, OC * sizeof(float));
        rec_wrote(r, dbias, OC * sizeof(float));
    }
    if (dinp && wb && db) {
        own = rec_gemm_own(r, dinp, N * C, NULL, 0, NULL, NULL);
        if (!own)
            rec_wrote(r, dinp, N * C * sizeof(float));
    } else if (dinp) {
        rec_f32(r, dout, N * OC * sizeof(float));
        rec_f32(r, weight, OC * C * sizeof(float));
        rec_wrote(r, dinp, N * C * sizeof(float));
    }
    if (dinp)
        rec_gemm(r, "gemm_bwd_dinp", wb && db, own, C, N, OC, 0);
    if (!(ib && db)) {
        rec_f32(r, dout, N * OC * sizeof(float));
        rec_f32(r, inp, N * C * sizeof(float));
    }
    /* dweight accumulates (beta 1): read once more, unless overwritten
     * (be->grad_assign: beta 0). With a bias, the BGRADB epilogue sums
     * dout's columns in the same pass (the plan assumes cuBLASLt accepts
     * it, as it does for llm.c's same call; the backend falls back to
     * colsum_dbias where it refuses), then a tiny kernel adds them to
     * dbias, or where they are stored the epilogue writes dbias itself
     * (a copy follows only for an unaligned dbias). */
    double acc = be->grad_assign ? 0.0 : 4.0 * (double)OC * C;
    if (!dbias) {
        rec_gemm(r, "gemm_bwd_dweight", ib && db, 0, C, OC, N, acc);
        return;
    }
    rec_gemm(r, "gemm_bwd_dweight+bgrad", ib && db, 0, C, OC, N, acc + 4.0 * OC);
    if (gpt_cuda_plan_bgrad_direct(dbias, be->grad_assign))
        return;
    if (be->grad_assign)
        rec_add(r, "dbias_copy", GPT_KC_MEM, GPT_KU_FP32, 0, 8.0 * OC, "OC=%zu", OC);
    else
        rec_add(r, "dbias_add", GPT_KC_ELT, GPT_KU_FP32, (double)OC, 12.0 * OC, "OC=%zu", OC);
}

/* As cuda_matmul_residual_forward: one product whose beta term is the
 * skip connection (C = res read once), assuming cuBLASLt takes it; in
 * bf16 mode C and D bf16 (the residual stream bf16 only) where res is
 * held in bf16 only and the shadow rules allow, else out written fp32. */
static void rec_matmul_residual_forward(struct gpt_backend *be, float *out, const float *inp,
                                        const float *weight, const float *bias, const float *res,
                                        size_t N, size_t C, size_t OC)
{
    struct rec_be *r = rec(be);
    int bf = 0;
    if (bias)
        rec_f32(r, bias, OC * sizeof(float));
    if (r->bf16) {
        int wb = rec_in(r, weight, OC * C), ib = rec_in(r, inp, N * C);
        bf = wb && ib;
    }
    if (bf && rec_held(r, res, N * OC) && rec_gemm_own(r, out, N * OC, bias, OC, NULL, NULL)) {
        rec_gemm(r, bias ? "gemm_fwd+bias+res" : "gemm_fwd+res", 1, 1, OC, N, C,
                 2.0 * (double)N * OC + (bias ? 2.0 * OC : 0));
        return;
    }
    rec_f32(r, res, N * OC * sizeof(float));
    if (!bf) {
        rec_f32(r, inp, N * C * sizeof(float));
        rec_f32(r, weight, OC * C * sizeof(float));
    }
    rec_wrote(r, out, N * OC * sizeof(float));
    rec_gemm(r, bias ? "gemm_fwd+bias+res" : "gemm_fwd+res", bf, 0, OC, N, C,
             4.0 * (double)N * OC + (bias ? 4.0 * OC : 0));
}

/* As cuda_matmul_gelu_forward: one product with the GELU_AUX_BIAS
 * epilogue (it also writes the pre-GELU aux), assuming cuBLASLt takes it;
 * in bf16 mode both outputs bf16 only where the shadow rules allow. */
static void rec_matmul_gelu_forward(struct gpt_backend *be, float *out, float *pre,
                                    const float *inp, const float *weight, const float *bias,
                                    size_t N, size_t C, size_t OC)
{
    struct rec_be *r = rec(be);
    int bf = 0, own = 0;
    if (r->bf16) {
        int wb = rec_in(r, weight, OC * C), ib = rec_in(r, inp, N * C);
        bf = wb && ib;
        own = bf && rec_gemm_own(r, out, N * OC, bias, OC, pre, NULL);
    }
    if (!own) {
        if (bias)
            rec_f32(r, bias, OC * sizeof(float));
        if (!bf) {
            rec_f32(r, inp, N * C * sizeof(float));
            rec_f32(r, weight, OC * C * sizeof(float));
        }
        rec_wrote(r, out, N * OC * sizeof(float));
        rec_wrote(r, pre, N * OC * sizeof(float));
    }
    rec_gemm(r, bias ? "gemm_fwd+bias+gelu" : "gemm_fwd+gelu", bf, own, OC, N, C,
             (own ? 2.0 : 4.0) * ((double)N * OC + (bias ? (double)OC : 0)));
}

/* As cuda_matmul_backward_dgelu: the dinp product with the DGELU
 * epilogue (reads the pre-GELU aux, bf16 with a bf16 dinp), then the
 * weight and bias gradients. */
static void rec_matmul_backward_dgelu(struct gpt_backend *be, float *dinp, float *dweight,
                                      float *dbias, const float *dout, const float *inp,
                                      const float *weight, const float *pre_gelu, size_t N,
                                      size_t C, size_t OC)
{
    struct rec_be *r = rec(be);
    int bf = 0, own = 0;
    if (r->bf16) {
        int wb = rec_in(r, weight, OC * C), db = rec_in(r, dout, N * OC);
        bf = wb && db;
        own = bf && rec_gemm_own(r, dinp, N * C, NULL, 0, NULL, pre_gelu);
    }
    if (!own) {
        rec_f32(r, pre_gelu, N * C * sizeof(float));
        if (!bf) {
            rec_f32(r, weight, OC * C * sizeof(float));
            rec_f32(r, dout, N * OC * sizeof(float));
        }
        rec_wrote(r, dinp, N * C * sizeof(float));
    }
    rec_gemm(r, "gemm_bwd_dinp+dgelu", bf, own, C, N, OC, (own ? 2.0 : 4.0) * (double)N * C);
    rec_matmul_backward(be, NULL, dweight, dbias, dout, inp, weight, N, C, OC);
}

static void rec_attention_forward(struct gpt_backend *be, float *out, float *att, const float *qkv,
                                  size_t B, size_t T, size_t C, size_t NH)
{
    struct rec_be *r = rec(be);
    struct gpt_cuda_attn_plan p;
    gpt_cuda_plan_attention(&p, B, T, C, NH, REC_SMEM_OPTIN, GPT_CUDA_ATTN_FLASH);
    double bh = (double)(B * NH), hs = (double)p.hs, btc = (double)(B * T * C);
    if (p.kind == GPT_CUDA_ATTN_FLASH) {
        int qb = r->bf16 ? rec_in(r, qkv, B * T * 3 * C) : 0;
        if (!qb)
            rec_f32(r, qkv, B * T * 3 * C * sizeof(float));
        /* As cuda_attention_forward: out bf16 only where allowed. */
        int own = rec_own(r, out, B * T * C);
        int ob = own || rec_out(r, out, B * T * C);
        rec_wrote(r, att, p.lse_floats * sizeof(float));
        if (own)
            rec_owned(r, out, B * T * C);
        double ow = own ? 0 : 4.0 * btc; /* out as fp32, unless bf16 only */
        if (qb && gpt_flash_tc_applies(p.hs)) {
            /* Tensor cores: S = q k^T and o += P v, 2 hs FLOPs each per
             * computed pair (the live 16 x 16 groups). Bytes are DRAM
             * bytes: q, k and v read once (bf16); out written (bf16, and
             * fp32 unless bf16 only) and the logsumexp (fp32). The re-reads
             * of k and v (once per visited tile, per 128 query rows) hit
             * L2: the blocks of one head are adjacent in the grid and run
             * together, a head's k and v are 2 T hs bf16 (256 KiB at T
             * 1024), the resident heads' a few MiB of the 50 MiB L2. */
            double pairs = gpt_flash_tc_pairs((int)T, p.hs, 1);
            rec_add(r, "flash_tc_forward", GPT_KC_ATTN, GPT_KU_TC_FLASH_FWD, bh * pairs * 4.0 * hs,
                    6.0 * btc + ow + (ob ? 2.0 * btc : 0) + 4.0 * p.lse_floats,
                    "B=%zu NH=%zu T=%zu hs=%zu%s", B, NH, T, p.hs, own ? " ->bf16" : "");
            return;
        }
        double es = qb ? 2.0 : 4.0, pairs = gpt_cuda_plan_flash_pairs(T, 1);
        /* S = q k^T and o += p v (2 hs each), exp and rescale per pair;
         * K and V re-read once per query tile. */
        rec_add(r, "flash_forward", GPT_KC_ATTN, GPT_KU_FP32, bh * pairs * (4.0 * hs + 6.0),
                es * btc + bh * pairs / GPT_CUDA_FLASH_BR * hs * 2.0 * es + ow +
                    (ob ? 2.0 * btc : 0) + 4.0 * p.lse_floats,
                "B=%zu NH=%zu T=%zu hs=%zu%s", B, NH, T, p.hs, own ? " ->bf16" : "");
        return;
    }
    rec_f32(r, qkv, B * T * 3 * C * sizeof(float));
    rec_wrote(r, out, B * T * C * sizeof(float));
    rec_wrote(r, att, B * NH * T * T * sizeof(float));
    double tt = bh * (double)T * (double)T;
    rec_add(r, "gemm_att_qk", GPT_KC_ATTN, rec_f32_gemm_unit(r), 2.0 * tt * hs,
            8.0 * bh * T * hs + 4.0 * tt, "B=%zu NH=%zu T=%zu hs=%zu", B, NH, T, p.hs);
    rec_add(r, "att_softmax_forward", GPT_KC_ATTN, GPT_KU_FP32, 5.0 * tt, 8.0 * tt,
            "rows=%zu T=%zu", B * NH * T, T);
    rec_add(r, "gemm_att_v", GPT_KC_ATTN, rec_f32_gemm_unit(r), 2.0 * tt * hs,
            4.0 * tt + 8.0 * bh * T * hs, "B=%zu NH=%zu T=%zu hs=%zu", B, NH, T, p.hs);
}

static void rec_attention_backward(struct gpt_backend *be, float *dqkv, float *scratch,
                                   const float *dout, const float *out, const float *qkv,
                                   const float *att, size_t B, size_t T, size_t C, size_t NH)
{
    (void)att;
    struct rec_be *r = rec(be);
    struct gpt_cuda_attn_plan p;
    gpt_cuda_plan_attention(&p, B, T, C, NH, REC_SMEM_OPTIN, GPT_CUDA_ATTN_FLASH);
    p.tc = r->bf16; /* as cu_attn_plan */
    double bh = (double)(B * NH), hs = (double)p.hs, btc = (double)(B * T * C);
    if (p.kind == GPT_CUDA_ATTN_FLASH) {
        int qb = r->bf16 ? rec_in(r, qkv, B * T * 3 * C) : 0;
        if (!qb)
            rec_f32(r, qkv, B * T * 3 * C * sizeof(float));
        /* As cuda_attention_backward: the tensor-core pass reads dout's
         * current bf16 copy and out's (converted on a miss); the recorder
         * assumes them aligned. Without out's, the CUDA-core kernels read
         * both as fp32. */
        int tc = qb && gpt_flash_tc_applies(p.hs);
        int dob = tc && rec_cur(r, dout, B * T * C);
        tc = tc && rec_in(r, out, B * T * C);
        if (!dob || !tc)
            rec_f32(r, dout, B * T * C * sizeof(float));
        if (!tc)
            rec_f32(r, out, B * T * C * sizeof(float));
        int db = rec_out(r, dqkv, B * T * 3 * C);
        rec_wrote(r, scratch, gpt_cuda_plan_att_floats(&p, B, T, C, NH, 1) * sizeof(float));
        /* cuDNN's kernels are not modelled: priced as the hand-written default */
        const enum gpt_flash_bwd bv0 = gpt_flash_tc_bwd_of_spec(r->attn_bwd);
        const enum gpt_flash_bwd bv = bv0 == GPT_FLASH_BWD_CUDNN ? GPT_FLASH_BWD_DEFAULT : bv0;
        const size_t chunk = gpt_flash_tc_ds_chunk(p.bh, (int)T, p.hs);
        if (tc && bv == GPT_FLASH_BWD_DS && chunk > 0) {
            /* The dS backward (flash_tc.h): pass one is the fused pass
             * (D per visited tile row, S^T, dP^T, dv, dk: 8 hs per pair)
             * with no dQ share, no turns and no memset, its bf16 dS^T
             * tiles written; pass two reads them and K (once per query
             * tile: L2) and writes dq, 2 hs per pair (the same products
             * as the fused pass's shares), priced at the forward's rate:
             * the same mma.sync products from ldmatrix fragments, without
             * the softmax (at T 1024 the tiles' DRAM reads take about as
             * long as the products). Where all pairs' tiles would take
             * more than GPT_FLASH_TC_DS_MAX, both passes run per chunk
             * of pairs, each chunk's share of the work and bytes. */
            double pk = gpt_flash_tc_pairs((int)T, p.hs, 0);
            double d_rows = gpt_flash_tc_tiles((int)T, p.hs, 0) * gpt_flash_tc_bcq(p.hs);
            double dsb = (double)gpt_flash_tc_ds_bytes(p.bh, (int)T, p.hs);
            if (!dob)
                rec_add(r, "f32_to_bf16", GPT_KC_CONVERT, GPT_KU_FP32, 0, 6.0 * btc, "n=%.0f", btc);
            for (size_t bh0 = 0; bh0 < p.bh; bh0 += chunk) {
                double f = (double)(p.bh - bh0 < chunk ? p.bh - bh0 : chunk) / bh;
                rec_add(
                    r, "flash_tc_bwd_ds", GPT_KC_ATTN, GPT_KU_TC_FLASH_BWD,
                    f * bh * (pk * 8.0 * hs + d_rows * 2.0 * hs),
                    f * (10.0 * btc + 4.0 * p.lse_floats + 8.0 * btc + (db ? 4.0 * btc : 0) + dsb),
                    "B=%zu NH=%zu T=%zu hs=%zu%s", B, NH, T, p.hs, dob ? " bf16 dout" : "");
                rec_add(r, "flash_tc_dsq", GPT_KC_ATTN, GPT_KU_TC_FLASH_FWD, f * bh * pk * 2.0 * hs,
                        f * (dsb + 2.0 * btc + 4.0 * btc + (db ? 2.0 * btc : 0)),
                        "B=%zu NH=%zu T=%zu hs=%zu dS %.0f MB", B, NH, T, p.hs, dsb / 1e6);
            }
            return;
        }
        /* ds where not one pair's tiles fit runs twopass (cuda_attention.cu) */
        if (tc && (gpt_flash_tc_bwd_twopass(bv) || bv == GPT_FLASH_BWD_DS)) {
            /* Two passes (flash_tc.h): dout as bf16 when it has no
             * current copy; the dQ pass (D = dO . O once per row, 2 hs;
             * S = q k^T, dP = dO v^T, dq += dS k: 6 hs per computed
             * pair, the forward's pairs) reads q, k, v, dO and O once
             * (bf16) and the logsumexp, writes D and dq; the dK/dV pass
             * (S^T, dP^T, dv += P^T dO, dk += dS^T q: 8 hs per pair)
             * reads q, k, v and dO, the logsumexp and D, writes dk and
             * dv. Re-reads of the other side's tiles hit L2 as in the
             * forward. No turns, no memset. */
            double pq = gpt_flash_tc_pairs((int)T, p.hs, 1),
                   pk = gpt_flash_tc_pairs((int)T, p.hs, 0);
            if (!dob)
                rec_add(r, "f32_to_bf16", GPT_KC_CONVERT, GPT_KU_FP32, 0, 6.0 * btc, "n=%.0f", btc);
            rec_add(r, "flash_tc_bwd_dq", GPT_KC_ATTN, GPT_KU_TC_FLASH_BWD,
                    bh * pq * 6.0 * hs + 2.0 * btc,
                    10.0 * btc + 8.0 * p.lse_floats + 4.0 * btc + (db ? 2.0 * btc : 0),
                    "B=%zu NH=%zu T=%zu hs=%zu%s", B, NH, T, p.hs, dob ? " bf16 dout" : "");
            rec_add(r, "flash_tc_bwd_dkv", GPT_KC_ATTN, GPT_KU_TC_FLASH_BWD, bh * pk * 8.0 * hs,
                    8.0 * btc + 8.0 * p.lse_floats + 8.0 * btc + (db ? 4.0 * btc : 0),
                    "B=%zu NH=%zu T=%zu hs=%zu%s", B, NH, T, p.hs, dob ? " bf16 dout" : "");
            return;
        }
        if (tc) {
            double pk = gpt_flash_tc_pairs((int)T, p.hs, 0);
            double nq = (double)gpt_flash_tc_q_tiles(T, p.hs);
            double d_rows = gpt_flash_tc_tiles((int)T, p.hs, 0) * gpt_flash_tc_bcq(p.hs);
            double turns = 4.0 * (bh * nq + 1);
            /* The dQ turns and the block ticket zeroed; dout as bf16 when
             * it has no current copy (not in the steady state). */
            rec_add(r, "memset", GPT_KC_MEM, GPT_KU_FP32, 0, turns, "bytes=%.0f", turns);
            if (!dob)
                rec_add(r, "f32_to_bf16", GPT_KC_CONVERT, GPT_KU_FP32, 0, 6.0 * btc, "n=%.0f", btc);
            /* One fused pass per key block: per visited query tile D =
             * dO . O over its rows (2 hs each, on CUDA cores, ~0.3% of the
             * tile's products), S^T = K Q^T, dP^T = V dO^T, dv += P^T dO,
             * dk += dS^T q, dq share dS K (2 hs each per computed pair: S
             * and P once, not once per output). DRAM bytes: q, k, v, dO
             * and O read once (bf16), the logsumexp once, dk, dv and dq
             * written once (fp32, and bf16 when wanted), the turns. As in
             * the forward, the per-tile re-reads of q, dO, O and the
             * logsumexp hit L2, and so do the dq shares' loads and stores
             * (bcq x hs fp32 per visited tile): the key blocks of one head
             * run together and pass each query tile's dq on in lock-step. */
            rec_add(r, "flash_tc_bwd", GPT_KC_ATTN, GPT_KU_TC_FLASH_BWD,
                    bh * (pk * 10.0 * hs + d_rows * 2.0 * hs),
                    10.0 * btc + 4.0 * p.lse_floats + 12.0 * btc + (db ? 6.0 * btc : 0) + turns,
                    "B=%zu NH=%zu T=%zu hs=%zu%s", B, NH, T, p.hs, dob ? " bf16 dout" : "");
            return;
        }
        double es = qb ? 2.0 : 4.0;
        double pq = gpt_cuda_plan_flash_pairs(T, 1), pk = gpt_cuda_plan_flash_pairs(T, 0);
        rec_add(r, "flash_d", GPT_KC_ATTN, GPT_KU_FP32, 2.0 * btc, 8.0 * btc + 4.0 * p.lse_floats,
                "rows=%zu hs=%zu", p.lse_floats, p.hs);
        /* dq: S = q k^T, dP = dO v^T, dq += dS k (2 hs each). */
        rec_add(r, "flash_dq", GPT_KC_ATTN, GPT_KU_FP32, bh * pq * (6.0 * hs + 8.0),
                es * btc + 4.0 * btc + bh * pq / GPT_CUDA_FLASH_BR * hs * 2.0 * es + 4.0 * btc +
                    (db ? 2.0 * btc : 0),
                "B=%zu NH=%zu T=%zu hs=%zu", B, NH, T, p.hs);
        /* dk, dv: S, dP, dv += P^T dO, dk += dS^T q (2 hs each); q and dO
         * re-read once per key tile. */
        rec_add(r, "flash_dkv", GPT_KC_ATTN, GPT_KU_FP32, bh * pk * (8.0 * hs + 8.0),
                2.0 * es * btc + bh * pk / GPT_CUDA_FLASH_BR * hs * (es + 4.0) + 8.0 * btc +
                    (db ? 4.0 * btc : 0),
                "B=%zu NH=%zu T=%zu hs=%zu", B, NH, T, p.hs);
        return;
    }
    rec_f32(r, qkv, B * T * 3 * C * sizeof(float));
    rec_f32(r, dout, B * T * C * sizeof(float));
    rec_wrote(r, dqkv, B * T * 3 * C * sizeof(float));
    rec_wrote(r, scratch, B * NH * T * T * sizeof(float));
    double tt = bh * (double)T * (double)T;
    rec_add(r, "gemm_att_bwd", GPT_KC_ATTN, rec_f32_gemm_unit(r), 8.0 * tt * hs,
            16.0 * tt + 32.0 * bh * T * hs, "B=%zu NH=%zu T=%zu hs=%zu (4 GEMMs)", B, NH, T, p.hs);
    rec_add(r, "att_softmax_backward", GPT_KC_ATTN, GPT_KU_FP32, 4.0 * tt, 12.0 * tt,
            "rows=%zu T=%zu", B * NH * T, T);
}

static void rec_gelu_forward(struct gpt_backend *be, float *out, const float *inp, size_t n)
{
    struct rec_be *r = rec(be);
    rec_f32(r, inp, n * sizeof(float));
    int ob = rec_out(r, out, n);
    rec_add(r, "gelu_forward", GPT_KC_ELT, GPT_KU_FP32, 12.0 * n, (8.0 + (ob ? 2.0 : 0)) * n,
            "n=%zu", n);
}

static void rec_gelu_backward(struct gpt_backend *be, float *dinp, const float *inp,
                              const float *dout, size_t n)
{
    struct rec_be *r = rec(be);
    rec_f32(r, inp, n * sizeof(float));
    rec_f32(r, dout, n * sizeof(float));
    int db = rec_out(r, dinp, n);
    rec_add(r, "gelu_backward", GPT_KC_ELT, GPT_KU_FP32, 20.0 * n, (12.0 + (db ? 2.0 : 0)) * n,
            "n=%zu", n);
}

static void rec_residual_forward(struct gpt_backend *be, float *out, const float *a, const float *b,
                                 size_t n)
{
    struct rec_be *r = rec(be);
    rec_f32(r, a, n * sizeof(float));
    rec_f32(r, b, n * sizeof(float));
    rec_wrote(r, out, n * sizeof(float));
    rec_add(r, "residual_forward", GPT_KC_ELT, GPT_KU_FP32, (double)n, 12.0 * n, "n=%zu", n);
}

/* As cuda_softmax_xent: logits read as bf16 when current; dlogits in
 * place, bf16 only where allowed; after a loss call one pass; dlogits
 * without one keep the row in shared memory where it fits: one read. */
static void rec_softmax_xent(struct gpt_backend *be, float *logits, float *losses,
                             const int *targets, size_t N, size_t V, size_t Vp, float dscale,
                             int write_dlogits)
{
    (void)targets;
    (void)dscale;
    struct rec_be *r = rec(be);
    size_t n = N * Vp;
    int have_loss = write_dlogits == GPT_XENT_AFTER_LOSS && losses != NULL;
    int lb = rec_cur(r, logits, n);
    if (!lb)
        rec_f32(r, logits, n * sizeof(float));
    int own = write_dlogits && lb && rec_own(r, logits, n);
    int db = own || (write_dlogits && rec_out(r, logits, n));
    if (have_loss)
        rec_f32(r, losses, N * sizeof(float));
    else
        rec_wrote(r, losses, N * sizeof(float));
    if (own)
        rec_owned(r, logits, n);
    int staged =
        write_dlogits && !have_loss && gpt_cuda_plan_xent_stage(Vp, lb ? 2 : 4, REC_SMEM_OPTIN) > 0;
    double nv = (double)N * (double)Vp, es = lb ? 2.0 : 4.0;
    /* Reads: the reduction pass (none after a loss call), then the write
     * pass reads again (from shared memory when staged); writes: dlogits
     * fp32 (unless owned) and bf16. */
    double bytes = (have_loss ? 0 : es * nv) + 4.0 * N;
    if (write_dlogits)
        bytes += (staged ? 0 : es * nv) + (own ? 0 : 4.0 * nv) + (db ? 2.0 * nv : 0);
    rec_add(r, "softmax_xent", GPT_KC_XENT, GPT_KU_FP32,
            (have_loss ? 0 : 4.0 * (double)N * V) + (write_dlogits ? 3.0 * (double)N * V : 0),
            bytes, "N=%zu V=%zu%s%s%s", N, V, lb ? " bf16" : "",
            write_dlogits ? (own  ? " ->bf16"
                             : db ? " ->f32+bf16"
                                  : " ->f32")
                          : "",
            have_loss ? " 1-pass"
            : staged  ? " 1-read"
                      : "");
}

static void rec_adamw(struct gpt_backend *be, float *params, const float *grads, float *m, float *v,
                      size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                      float grad_scale, float bc1, float bc2)
{
    (void)lr;
    (void)beta1;
    (void)beta2;
    (void)eps;
    (void)weight_decay;
    (void)grad_scale;
    (void)bc1;
    (void)bc2;
    struct rec_be *r = rec(be);
    if (n == 0)
        return;
    rec_f32(r, params, n * sizeof(float));
    rec_f32(r, grads, n * sizeof(float));
    int pb = rec_out(r, params, n);
    rec_wrote(r, m, n * sizeof(float));
    rec_wrote(r, v, n * sizeof(float));
    rec_add(r, "adamw", GPT_KC_OPTIM, GPT_KU_FP32, 15.0 * n, (28.0 + (pb ? 2.0 : 0)) * n, "n=%zu",
            n);
}

/* As cuda_adamw_multi: one launch over the contiguous run of spans (the
 * optimizer's call covers every tensor). */
static void rec_adamw_multi(struct gpt_backend *be, float *params, const float *grads, float *m,
                            float *v, const struct gpt_adamw_span *spans, size_t n_spans, float lr,
                            float beta1, float beta2, float eps, float weight_decay,
                            float grad_scale, float bc1, float bc2)
{
    struct rec_be *r = rec(be);
    static uint64_t ends[1024];
    static uint32_t decay[1024];
    size_t total = 0;
    if (n_spans == 0)
        return;
    if (n_spans > 1024 || gpt_cuda_adamw_table(spans, n_spans, ends, decay, &total) < 0) {
        for (size_t i = 0; i < n_spans; i++) {
            size_t o = spans[i].off;
            rec_adamw(be, params + o, grads + o, m + o, v + o, spans[i].n, lr, beta1, beta2, eps,
                      spans[i].decay ? weight_decay : 0.0f, grad_scale, bc1, bc2);
        }
        return;
    }
    size_t o = spans[0].off;
    rec_f32(r, params + o, total * sizeof(float));
    rec_f32(r, grads + o, total * sizeof(float));
    int pb = rec_out(r, params + o, total);
    rec_wrote(r, m + o, total * sizeof(float));
    rec_wrote(r, v + o, total * sizeof(float));
    rec_add(r, "adamw_multi", GPT_KC_OPTIM, GPT_KU_FP32, 15.0 * total,
            (28.0 + (pb ? 2.0 : 0)) * total, "n=%zu spans=%zu", total, n_spans);
}

static double rec_sumsq(struct gpt_backend *be, const float *x, size_t n)
{
    rec_f32(rec(be), x, n * sizeof(float));
    rec_add(rec(be), "sumsq", GPT_KC_OPTIM, GPT_KU_FP32, 2.0 * n, 4.0 * n, "n=%zu", n);
    return 1.0;
}

/* The step-on-device ops, as the CUDA backend's: sumsq's kernels with the
 * result left on the device, adamw_multi's kernel reading the clip factor
 * (8 bytes) there, and one block summing a micro-batch's row losses. */
static void rec_sumsq_dev(struct gpt_backend *be, double *out, const float *x, size_t n)
{
    (void)out;
    if (n > 0)
        (void)rec_sumsq(be, x, n);
}

static void rec_adamw_multi_clip(struct gpt_backend *be, float *params, const float *grads,
                                 float *m, float *v, const struct gpt_adamw_span *spans,
                                 size_t n_spans, float lr, float beta1, float beta2, float eps,
                                 float weight_decay, const double *sumsq, double clip, float bc1,
                                 float bc2)
{
    (void)sumsq;
    (void)clip;
    rec_adamw_multi(be, params, grads, m, v, spans, n_spans, lr, beta1, beta2, eps, weight_decay,
                    1.0f, bc1, bc2);
}

static void rec_loss_accum(struct gpt_backend *be, double *acc, const float *losses, size_t N,
                           double weight, int reset)
{
    (void)acc;
    (void)weight;
    (void)reset;
    rec_f32(rec(be), losses, N * sizeof(float));
    rec_add(rec(be), "loss_accum", GPT_KC_XENT, GPT_KU_FP32, (double)N, 4.0 * N + 16.0, "N=%zu", N);
}

static void rec_scale(struct gpt_backend *be, float *x, float s, size_t n)
{
    (void)s;
    rec_f32(rec(be), x, n * sizeof(float));
    rec_wrote(rec(be), x, n * sizeof(float));
    rec_add(rec(be), "scale", GPT_KC_ELT, GPT_KU_FP32, (double)n, 8.0 * n, "n=%zu", n);
}

static int rec_set_precision(struct gpt_backend *be, int precision, uint64_t seed)
{
    (void)seed;
    struct rec_be *r = rec(be);
    int p = precision & GPT_BACKEND_PREC_MASK;
    if (p != 0 && p != 1 && p != 2)
        return -EINVAL;
    r->bf16 = p != 0;
    r->tf32 = !(precision & GPT_BACKEND_PREC_NO_TF32);
    return 0;
}

static size_t rec_att_floats(struct gpt_backend *be, size_t B, size_t T, size_t C, size_t NH,
                             int scratch)
{
    struct gpt_cuda_attn_plan p;
    gpt_cuda_plan_attention(&p, B, T, C, NH, REC_SMEM_OPTIN, GPT_CUDA_ATTN_FLASH);
    p.tc = rec(be)->bf16; /* as cu_attn_plan */
    return gpt_cuda_plan_att_floats(&p, B, T, C, NH, scratch);
}

/* Every stream op of backend_ops.def (group OP) is recorded: rec_<slot>
 * for each, so a new op fails to build here until it has a recorder. */
static const struct gpt_backend_ops rec_ops = {
    .name = "cuda-plan",
    .destroy = rec_destroy,
#define GPT_OP_REC_OP(name) .name = rec_##name,
#define GPT_OP_REC_CTL(name)
#define GPT_OP(wrap, group, ret, name, params, args, pre) GPT_OP_REC_##group(name)
#include "backend_ops.def"
#undef GPT_OP_REC_OP
#undef GPT_OP_REC_CTL
    .set_precision = rec_set_precision,
    .att_floats = rec_att_floats,
    .grads_assign = 1, /* as the CUDA backend */
    .device_memory = 1,
};

struct gpt_backend *gpu_plan_rec_new(const struct gpt_backend_opts *o)
{
    struct rec_be *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->attn_bwd = o ? o->attn_backward : 0;
    r->head.ops = &rec_ops;
    r->head.name = rec_ops.name;
    r->head.threads = 1;
    r->next = REC_BASE;
    return &r->head;
}

const struct gpt_cuda_kernel *gpu_plan_rec_kernels(struct gpt_backend *be, size_t *ret_n)
{
    struct rec_be *r = rec(be);
    *ret_n = r->oom ? 0 : r->n;
    return r->oom ? NULL : r->k;
}

void gpu_plan_rec_clear(struct gpt_backend *be)
{
    rec(be)->n = 0;
}
