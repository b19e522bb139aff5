/*
 * cuda_plan: launch shapes, reduction splits, the NCCL padding plan and bucket
 * boundaries and the attention plan of the CUDA backend (see cuda_plan.h).
 * Plain C with no CUDA dependency, so it lives in the CPU engine and is tested
 * there.
 */
#include "cuda_plan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm.h"
#include "flash_tc.h"

unsigned gpt_cuda_plan_grid(size_t n, unsigned block, unsigned max_grid)
{
    GPT_ASSERT(block > 0 && max_grid > 0);
    size_t g = (n + block - 1) / block;
    if (g < 1)
        g = 1;
    if (g > max_grid)
        g = max_grid;
    return (unsigned)g;
}

unsigned gpt_cuda_plan_row_grid(size_t rows, unsigned warps_per_block)
{
    return gpt_cuda_plan_grid(rows, warps_per_block, GPT_CUDA_MAX_GRID);
}

unsigned gpt_cuda_plan_sumsq_blocks(size_t n, unsigned block)
{
    GPT_ASSERT(block > 0);
    return gpt_cuda_plan_grid(n, block * 8u, GPT_CUDA_SUMSQ_MAX_BLOCKS);
}

unsigned gpt_cuda_plan_colsum_splits(size_t N, size_t C, size_t scratch_floats)
{
    GPT_ASSERT(C > 0);
    size_t s = N / 256;
    if (s > GPT_CUDA_COLSUM_MAX_SPLITS)
        s = GPT_CUDA_COLSUM_MAX_SPLITS;
    if (s > scratch_floats / C)
        s = scratch_floats / C;
    return s < 2 ? 1u : (unsigned)s;
}

unsigned gpt_cuda_plan_lnb_blocks(size_t N, size_t C, size_t scratch_floats)
{
    GPT_ASSERT(C > 0);
    if (GPT_CUDA_LNB_WARPS * 2 * C * sizeof(float) > GPT_CUDA_LNB_SMEM_BYTES ||
        scratch_floats / 2 / C < 1)
        return 0;
    size_t b = (N + GPT_CUDA_LNB_ROWS - 1) / GPT_CUDA_LNB_ROWS;
    size_t cap = scratch_floats / 2 / C;
    if (b > cap)
        b = cap;
    if (b > GPT_CUDA_MAX_GRID)
        b = GPT_CUDA_MAX_GRID;
    if (b <= 1)
        return 1u;
    /* A cap leaves ceil(N / b) rows a block and, past the last row, empty
     * blocks that would only write zero partials: drop them. With
     * rows = ceil(N / b), ceil(N / rows) <= b blocks still get rows rows
     * each (ceil(N / ceil(N / rows)) == rows), so the kernel's split is
     * the same. */
    size_t rows = (N + b - 1) / b;
    return (unsigned)((N + rows - 1) / rows);
}

int gpt_cuda_plan_bgrad_direct(const void *dbias, int assign)
{
    return assign && dbias && (uintptr_t)dbias % 16 == 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int gpt_cuda_plan_lt_tune(int n, double (*time)(void *ctx, int i), void *ctx, double *ret_ms)
{
    double ms[GPT_CUDA_LT_TUNE_MAX][GPT_CUDA_LT_TUNE_REPS];
    int failed[GPT_CUDA_LT_TUNE_MAX] = {0};
    if (n > GPT_CUDA_LT_TUNE_MAX)
        n = GPT_CUDA_LT_TUNE_MAX;
    for (int r = -1; r < GPT_CUDA_LT_TUNE_REPS; r++) /* round -1: the warm-up */
        for (int i = 0; i < n; i++) {
            if (failed[i])
                continue;
            double t = time(ctx, i);
            if (t < 0)
                failed[i] = 1;
            else if (r >= 0)
                ms[i][r] = t;
        }
    int best = -1;
    double best_ms = 0;
    for (int i = 0; i < n; i++) {
        double med = -1;
        if (!failed[i]) {
            qsort(ms[i], GPT_CUDA_LT_TUNE_REPS, sizeof(double), cmp_double);
            med = ms[i][GPT_CUDA_LT_TUNE_REPS / 2];
            if (best < 0 || med < best_ms) {
                best = i;
                best_ms = med;
            }
        }
        if (ret_ms)
            ret_ms[i] = med;
    }
    return best;
}

unsigned gpt_cuda_plan_ln_chunks(size_t C)
{
    if (C == 0 || C % 8 != 0 || C > (size_t)GPT_CUDA_LN_HELD_CHUNKS * 256)
        return 0;
    return (unsigned)((C + 255) / 256);
}

size_t gpt_cuda_plan_xent_stage(size_t Vp, size_t elem_bytes, size_t smem_limit)
{
    GPT_ASSERT(elem_bytes == 2 || elem_bytes == 4);
    if (smem_limit < GPT_CUDA_XENT_STATIC_SMEM ||
        Vp > (smem_limit - GPT_CUDA_XENT_STATIC_SMEM) / elem_bytes)
        return 0;
    return Vp * elem_bytes;
}

int gpt_cuda_adamw_table(const struct gpt_adamw_span *spans, size_t n, uint64_t *ret_ends,
                         uint32_t *ret_decay, size_t *ret_total)
{
    GPT_ASSERT(spans && n >= 1);
    size_t pos = spans[0].off;
    for (size_t s = 0; s < n; s++) {
        if (spans[s].off != pos || spans[s].n == 0)
            return -EINVAL;
        pos += spans[s].n;
        ret_ends[s] = (uint64_t)(pos - spans[0].off);
        ret_decay[s] = spans[s].decay != 0;
    }
    *ret_total = pos - spans[0].off;
    return 0;
}

void gpt_cuda_pad_plan_init(struct gpt_cuda_pad_plan *p, size_t n, int world)
{
    GPT_ASSERT(p && world > 0);
    p->n = n;
    p->world = world;
    p->chunk = (n + (size_t)world - 1) / (size_t)world;
    p->padded = p->chunk * (size_t)world;
    p->needs_pad = n % (size_t)world != 0;
}

void gpt_cuda_pad_plan_slice(const struct gpt_cuda_pad_plan *p, int rank, size_t *ret_off,
                             size_t *ret_len, size_t *ret_padded_off)
{
    GPT_ASSERT(p && rank >= 0 && rank < p->world);
    gpt_comm_slice(p->n, p->world, rank, ret_off, ret_len);
    *ret_padded_off = (size_t)rank * p->chunk;
}

size_t gpt_cuda_plan_buckets(size_t n, size_t max_bucket_elems, size_t *ret_bucket_elems)
{
    size_t b = max_bucket_elems & ~(size_t)63;
    if (b < 64)
        b = 64;
    *ret_bucket_elems = b;
    return (n + b - 1) / b;
}

void gpt_cuda_plan_attention(struct gpt_cuda_attn_plan *p, size_t B, size_t T, size_t C, size_t NH,
                             size_t smem_limit, enum gpt_cuda_attn_kind want)
{
    GPT_ASSERT(p && NH > 0 && C % NH == 0 && T > 0 && B > 0);
    size_t hs = C / NH, br = GPT_CUDA_FLASH_BR, bc = GPT_CUDA_FLASH_BC;
    /* Row stride of the float4 reads: an odd number of float4s, so the
     * eight lanes of a 128-bit shared-memory phase hit distinct banks. */
    size_t ld4 = (hs + 3) / 4 + 1;
    if (ld4 % 2 == 0)
        ld4++;
    p->kind = GPT_CUDA_ATTN_GEMM;
    p->why = "";
    p->hs = hs;
    p->tc = 1;
    p->attn_fwd = 0;
    p->attn_bwd = 0;
    p->ld = 4 * ld4;
    p->q_tiles = (unsigned)((T + br - 1) / br);
    p->k_tiles = p->q_tiles;
    p->bh = (unsigned)(B * NH);
    p->smem_fwd = (br + 2 * bc) * p->ld * sizeof(float);
    p->smem_dq = (2 * br + 2 * bc) * p->ld * sizeof(float);
    p->smem_dkv = ((2 * br + 2 * bc) * p->ld + 2 * bc) * sizeof(float);
    p->lse_floats = B * NH * T;
    if (want == GPT_CUDA_ATTN_GEMM)
        p->why = "requested";
    else if (hs % 4 != 0)
        p->why = "head size not a multiple of 4";
    else if (hs > GPT_CUDA_FLASH_MAX_HS)
        p->why = "head size above the flash maximum";
    else if (T <= hs)
        p->why = "T <= head size: the (B,NH,T,T) scratch cannot hold the backward's state";
    else if (B * NH > 65535u)
        p->why = "B * NH exceeds a grid dimension";
    else if (p->smem_fwd > smem_limit || p->smem_dq > smem_limit || p->smem_dkv > smem_limit)
        p->why = "shared memory";
    else
        p->kind = GPT_CUDA_ATTN_FLASH;
}

void gpt_cuda_plan_flash_span(int own_is_query, size_t own0, size_t T, unsigned *ret_first,
                              unsigned *ret_end)
{
    size_t bc = GPT_CUDA_FLASH_BC;
    GPT_ASSERT(own0 < T);
    if (own_is_query) {
        size_t last = own0 + GPT_CUDA_FLASH_BR < T ? own0 + GPT_CUDA_FLASH_BR : T;
        *ret_first = 0;
        *ret_end = (unsigned)((last + bc - 1) / bc);
    } else {
        *ret_first = (unsigned)(own0 / bc);
        *ret_end = (unsigned)((T + bc - 1) / bc);
    }
}

/* ---- bf16 shadows ---------------------------------------------------------- */

int gpt_cuda_shadow_index(uintptr_t base, size_t bytes, uintptr_t p, size_t n, size_t *ret_off)
{
    if (p < base || (p - base) % sizeof(float) != 0)
        return 0;
    size_t off = (p - base) / sizeof(float), elems = bytes / sizeof(float);
    if (off >= elems || n > elems - off)
        return 0;
    *ret_off = off;
    return 1;
}

void gpt_cuda_spans_clear(struct gpt_cuda_spans *s)
{
    s->n = 0;
}

int gpt_cuda_spans_covers(const struct gpt_cuda_spans *s, size_t lo, size_t hi)
{
    if (lo >= hi)
        return 1;
    for (size_t i = 0; i < s->n; i++)
        if (s->lo[i] <= lo && hi <= s->hi[i])
            return 1;
    return 0;
}

/* Removes span i, keeping the order. */
static void spans_remove(struct gpt_cuda_spans *s, size_t i)
{
    for (size_t j = i + 1; j < s->n; j++) {
        s->lo[j - 1] = s->lo[j];
        s->hi[j - 1] = s->hi[j];
    }
    s->n--;
}

/* Inserts [lo, hi) at index i (the caller keeps the order), dropping the
 * smallest span first when the set is full; a new span smaller than every
 * other one is the one left out. */
static void spans_insert(struct gpt_cuda_spans *s, size_t i, size_t lo, size_t hi)
{
    if (s->n == GPT_CUDA_SPANS_MAX) {
        size_t small = 0;
        for (size_t j = 1; j < s->n; j++)
            if (s->hi[j] - s->lo[j] < s->hi[small] - s->lo[small])
                small = j;
        if (hi - lo <= s->hi[small] - s->lo[small])
            return;
        spans_remove(s, small);
        if (small < i)
            i--;
    }
    for (size_t j = s->n; j > i; j--) {
        s->lo[j] = s->lo[j - 1];
        s->hi[j] = s->hi[j - 1];
    }
    s->lo[i] = lo;
    s->hi[i] = hi;
    s->n++;
}

void gpt_cuda_spans_add(struct gpt_cuda_spans *s, size_t lo, size_t hi)
{
    if (lo >= hi)
        return;
    /* Absorb every span that overlaps or touches [lo, hi), then insert. */
    size_t i = 0;
    while (i < s->n && s->hi[i] < lo)
        i++;
    while (i < s->n && s->lo[i] <= hi) {
        if (s->lo[i] < lo)
            lo = s->lo[i];
        if (s->hi[i] > hi)
            hi = s->hi[i];
        spans_remove(s, i);
    }
    spans_insert(s, i, lo, hi);
}

void gpt_cuda_spans_cut(struct gpt_cuda_spans *s, size_t lo, size_t hi)
{
    if (lo >= hi)
        return;
    for (size_t i = 0; i < s->n;) {
        size_t a = s->lo[i], b = s->hi[i];
        if (b <= lo || a >= hi) {
            i++;
            continue;
        }
        if (a < lo && b > hi) { /* split in two */
            s->hi[i] = lo;
            spans_insert(s, i + 1, hi, b);
            return;
        }
        if (a < lo) {
            s->hi[i] = lo;
            i++;
        } else if (b > hi) {
            s->lo[i] = hi;
            i++;
        } else {
            spans_remove(s, i);
        }
    }
}

int gpt_cuda_spans_meets(const struct gpt_cuda_spans *s, size_t lo, size_t hi)
{
    for (size_t i = 0; lo < hi && i < s->n; i++)
        if (s->lo[i] < hi && lo < s->hi[i])
            return 1;
    return 0;
}

/* ---- bf16-only activations ------------------------------------------------ */

void gpt_cuda_shd_clear(struct gpt_cuda_shd_state *s)
{
    gpt_cuda_spans_clear(&s->cur);
    gpt_cuda_spans_clear(&s->own);
    gpt_cuda_spans_clear(&s->want);
    s->pend_lo = s->pend_hi = 0;
}

/* A transition adds at most one span to cur and one to own (a cut splits
 * one span in two; an add merges or inserts one). */
int gpt_cuda_shd_crowded(const struct gpt_cuda_shd_state *s)
{
    return s->own.n > 0 && (s->cur.n + 2 > GPT_CUDA_SPANS_MAX || s->own.n + 2 > GPT_CUDA_SPANS_MAX);
}

void gpt_cuda_shd_flushed(struct gpt_cuda_shd_state *s)
{
    for (size_t i = 0; i < s->own.n; i++)
        gpt_cuda_spans_add(&s->want, s->own.lo[i], s->own.hi[i]);
    gpt_cuda_spans_clear(&s->own);
}

void gpt_cuda_shd_wrote_f32(struct gpt_cuda_shd_state *s, size_t lo, size_t hi)
{
    GPT_ASSERT(!gpt_cuda_shd_crowded(s));
    gpt_cuda_spans_cut(&s->cur, lo, hi);
    gpt_cuda_spans_cut(&s->own, lo, hi);
}

int gpt_cuda_shd_wrote_foreign(struct gpt_cuda_shd_state *s, size_t lo, size_t hi)
{
    if (lo >= hi)
        return 1;
    if (!gpt_cuda_shd_crowded(s) && !gpt_cuda_shd_pending(s)) {
        gpt_cuda_shd_wrote_f32(s, lo, hi);
        return 1;
    }
    if (!gpt_cuda_shd_pending(s)) {
        s->pend_lo = lo;
        s->pend_hi = hi;
    } else {
        s->pend_lo = lo < s->pend_lo ? lo : s->pend_lo;
        s->pend_hi = hi > s->pend_hi ? hi : s->pend_hi;
    }
    return 0;
}

int gpt_cuda_shd_pending(const struct gpt_cuda_shd_state *s)
{
    return s->pend_lo < s->pend_hi;
}

void gpt_cuda_shd_settle(struct gpt_cuda_shd_state *s)
{
    GPT_ASSERT(gpt_cuda_shd_pending(s));
    gpt_cuda_shd_flushed(s);
    gpt_cuda_shd_wrote_f32(s, s->pend_lo, s->pend_hi);
    s->pend_lo = s->pend_hi = 0;
}

void gpt_cuda_shd_wrote_both(struct gpt_cuda_shd_state *s, size_t lo, size_t hi)
{
    GPT_ASSERT(!gpt_cuda_shd_crowded(s));
    gpt_cuda_spans_cut(&s->own, lo, hi);
    gpt_cuda_spans_add(&s->cur, lo, hi);
}

int gpt_cuda_shd_may_own(const struct gpt_cuda_shd_state *s, size_t lo, size_t hi)
{
    return lo < hi && !gpt_cuda_spans_meets(&s->want, lo, hi) &&
           s->cur.n + 4 <= GPT_CUDA_SPANS_MAX && s->own.n + 4 <= GPT_CUDA_SPANS_MAX;
}

int gpt_cuda_shd_held(const struct gpt_cuda_shd_state *s, size_t lo, size_t hi)
{
    return gpt_cuda_spans_meets(&s->own, lo, hi) && gpt_cuda_spans_covers(&s->cur, lo, hi);
}

void gpt_cuda_shd_wrote_bf16(struct gpt_cuda_shd_state *s, size_t lo, size_t hi)
{
    GPT_ASSERT(gpt_cuda_shd_may_own(s, lo, hi));
    gpt_cuda_spans_add(&s->cur, lo, hi);
    gpt_cuda_spans_add(&s->own, lo, hi);
}

size_t gpt_cuda_shd_read_f32(struct gpt_cuda_shd_state *s, size_t lo, size_t hi, int learn,
                             size_t *ret_lo, size_t *ret_hi)
{
    size_t k = 0;
    for (size_t i = 0; lo < hi && i < s->own.n; i++) {
        size_t a = s->own.lo[i] > lo ? s->own.lo[i] : lo;
        size_t b = s->own.hi[i] < hi ? s->own.hi[i] : hi;
        if (a < b) {
            ret_lo[k] = a;
            ret_hi[k] = b;
            k++;
        }
    }
    if (k == 0)
        return 0;
    GPT_ASSERT(!gpt_cuda_shd_crowded(s));
    gpt_cuda_spans_cut(&s->own, lo, hi);
    for (size_t i = 0; learn && i < k; i++)
        gpt_cuda_spans_add(&s->want, ret_lo[i], ret_hi[i]);
    return k;
}

int gpt_cuda_shd_read_bf16(struct gpt_cuda_shd_state *s, size_t lo, size_t hi)
{
    if (gpt_cuda_spans_covers(&s->cur, lo, hi))
        return 0;
    GPT_ASSERT(!gpt_cuda_spans_meets(&s->own, lo, hi) && !gpt_cuda_shd_crowded(s));
    gpt_cuda_spans_add(&s->cur, lo, hi);
    return 1;
}

size_t gpt_cuda_plan_att_floats(const struct gpt_cuda_attn_plan *p, size_t B, size_t T, size_t C,
                                size_t NH, int scratch)
{
    if (p->kind != GPT_CUDA_ATTN_FLASH)
        return B * NH * T * T;
    if (!scratch)
        return p->lse_floats; /* the logsumexp: out comes back to the backward */
    /* The tensor-core backward also keeps a bf16 copy of dout there, its
     * dQ turn counters (one int per (b, h, query tile)) and block ticket,
     * and the dS backward's tiles (at most GPT_FLASH_TC_DS_MAX bytes of
     * them; every part grows with B and T, so a smaller shape's scratch
     * fits in a larger one's). */
    if (p->tc && gpt_flash_tc_applies(p->hs)) {
        size_t nsem = (size_t)p->bh * gpt_flash_tc_q_tiles(T, p->hs);
        return gpt_flash_tc_ds_off(p->lse_floats, B * T * C, nsem) +
               gpt_flash_tc_ds_reserve(p->bh, (int)T, p->hs) / sizeof(float);
    }
    return p->lse_floats;
}

/* ---- step cost model ---------------------------------------------------------- */

const char *gpt_cuda_kclass_name(enum gpt_cuda_kclass c)
{
    static const char *const names[GPT_KC_COUNT] = {
        "gemm", "attn", "norm", "eltwise", "xent", "embed", "optim", "convert", "mem",
    };
    return (unsigned)c < GPT_KC_COUNT ? names[c] : "?";
}

double gpt_cuda_kernel_seconds(const struct gpt_cuda_kernel *k)
{
    double rate = k->unit == GPT_KU_TC_BF16        ? GPT_H200_TC_BF16_FLOPS
                  : k->unit == GPT_KU_TC_TF32      ? GPT_H200_TC_TF32_FLOPS
                  : k->unit == GPT_KU_TC_FLASH_FWD ? GPT_H200_FLASH_FWD_FLOPS
                  : k->unit == GPT_KU_TC_FLASH_BWD ? GPT_H200_FLASH_BWD_FLOPS
                                                   : GPT_H200_FP32_FLOPS;
    double tc = k->flops / rate, tm = k->bytes / GPT_H200_MEM_BPS;
    return tc > tm ? tc : tm;
}

double gpt_cuda_plan_flash_pairs(size_t T, int own_is_query)
{
    double pairs = 0;
    for (size_t own0 = 0; own0 < T; own0 += GPT_CUDA_FLASH_BR) {
        unsigned first, end;
        gpt_cuda_plan_flash_span(own_is_query, own0, T, &first, &end);
        pairs += (double)(end - first) * GPT_CUDA_FLASH_BC * GPT_CUDA_FLASH_BR;
    }
    return pairs;
}

/* ---- DDP all-reduce model ---- */

/* Wire rates per GPU and direction, and one ring step's latency (NCCL's
 * simple protocol: a few microseconds inside a node, more through a NIC
 * and a switch, most over TCP). */
static const struct gpt_link_spec gpt_links[GPT_LINK_COUNT] = {
    [GPT_LINK_NVLINK] = {"nvlink", 450e9, 3e-6},   /* NVLink 4: 900 GB/s both ways */
    [GPT_LINK_IB400] = {"ib400", 50e9, 6e-6},      /* 400 Gb/s InfiniBand */
    [GPT_LINK_ETH100] = {"eth100", 12.5e9, 25e-6}, /* 100 GbE */
};

const struct gpt_link_spec *gpt_link_get(enum gpt_link l)
{
    return l < GPT_LINK_COUNT ? &gpt_links[l] : NULL;
}

const struct gpt_link_spec *gpt_link_find(const char *name)
{
    for (int i = 0; i < GPT_LINK_COUNT; i++)
        if (name && strcmp(gpt_links[i].name, name) == 0)
            return &gpt_links[i];
    return NULL;
}

double gpt_ddp_allreduce_seconds(const struct gpt_link_spec *l, int world, double bytes)
{
    if (world <= 1)
        return 0;
    double steps = 2.0 * (world - 1);
    return steps * l->hop_s + steps / world * bytes / (l->bytes_per_s * GPT_LINK_EFFICIENCY);
}

double gpt_ddp_comm_end_s(const struct gpt_ddp_bucket *b, size_t n, const struct gpt_link_spec *l,
                          int world)
{
    double t = 0;
    for (size_t i = 0; i < n; i++) {
        double start = b[i].ready_s > t ? b[i].ready_s : t;
        t = start + gpt_ddp_allreduce_seconds(l, world, b[i].bytes);
    }
    return t;
}
