/*
 * test_cuda_plan: the host-side arithmetic of the CUDA backend and the NCCL
 * communicator (engine/ops/cuda_plan.c), which runs everywhere: launch
 * grids, the deterministic reduction splits, bucket boundaries, and the
 * padding plan for uneven reduce-scatter/all-gather, checked by simulating
 * NCCL's equal-count collectives on host arrays for worlds 1-9 and sizes
 * around multiples of the world (including n < world); the choice between
 * fused (flash) and batched-GEMM attention and the flash kernels' causal
 * tile spans (checked pair by pair against the mask); and the bf16
 * conversions the kernels use (gpt_bf16.h, compiled here as plain C):
 * round-to-nearest-even against a distance-based reference and NaN/Inf;
 * the bf16 shadows' state machine (current, bf16-only and learned spans)
 * against a host model in which every reader must see the last write,
 * collectives' writes from the communication thread included: those
 * convert nothing (a crowded set defers them to the owner's next lock).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "backend.h"
#include "comm.h"
#include "cuda/gpt_bf16.h"
#include "cuda_plan.h"
#include "flash_tc.h"

static void test_grid(void **state)
{
    (void)state;
    assert_int_equal(gpt_cuda_plan_grid(0, 256, 100), 1);
    assert_int_equal(gpt_cuda_plan_grid(1, 256, 100), 1);
    assert_int_equal(gpt_cuda_plan_grid(256, 256, 100), 1);
    assert_int_equal(gpt_cuda_plan_grid(257, 256, 100), 2);
    assert_int_equal(gpt_cuda_plan_grid(1000000, 256, 100), 100);
    /* Sizes past 2^32 elements still give a valid (capped) grid. */
    assert_int_equal(gpt_cuda_plan_grid((size_t)1 << 40, 256, GPT_CUDA_MAX_GRID),
                     GPT_CUDA_MAX_GRID);
    assert_int_equal(gpt_cuda_plan_row_grid(17, 8), 3);
    assert_int_equal(gpt_cuda_plan_row_grid(16, 8), 2);
}

static void test_sumsq_blocks(void **state)
{
    (void)state;
    assert_int_equal(gpt_cuda_plan_sumsq_blocks(1, 256), 1);
    assert_int_equal(gpt_cuda_plan_sumsq_blocks(2048, 256), 1);
    assert_int_equal(gpt_cuda_plan_sumsq_blocks(2049, 256), 2);
    assert_int_equal(gpt_cuda_plan_sumsq_blocks((size_t)124 << 20, 256), GPT_CUDA_SUMSQ_MAX_BLOCKS);
    /* The plan depends on n only, which is what makes the sum reproducible. */
    for (size_t n = 1; n < 100000; n = n * 3 + 1)
        assert_int_equal(gpt_cuda_plan_sumsq_blocks(n, 256), gpt_cuda_plan_sumsq_blocks(n, 256));
}

/* The single-pass LayerNorm backward's block count: ~16 rows a block,
 * capped so the partials fit the scratch, no empty block; 0 (fallback)
 * for rows too wide for its shared memory or a scratch too small for one
 * block. At GPT-2's shape with the backend's scratch the grid must fill
 * an H200 (132 SMs) several blocks deep and still run in one wave (the
 * 256 blocks of 64 rows left it at 12% occupancy). */
/* The held LayerNorm rows: lane l's chunk k is columns [8 l + 256 k, + 8),
 * so chunks = ceil(C / 256) cover every column once; none past the limit
 * or for C % 8. */
static void test_ln_chunks(void **state)
{
    (void)state;
    assert_int_equal(gpt_cuda_plan_ln_chunks(768), 3);
    assert_int_equal(gpt_cuda_plan_ln_chunks(1024), 4);
    assert_int_equal(gpt_cuda_plan_ln_chunks(1280), 0);
    assert_int_equal(gpt_cuda_plan_ln_chunks(44), 0);
    assert_int_equal(gpt_cuda_plan_ln_chunks(0), 0);
    assert_int_equal(gpt_cuda_plan_ln_chunks(48), 1);
    for (size_t C = 8; C <= 2048; C += 8) {
        unsigned k = gpt_cuda_plan_ln_chunks(C);
        if (C > GPT_CUDA_LN_HELD_CHUNKS * 256) {
            assert_int_equal(k, 0);
            continue;
        }
        assert_true(k >= 1 && k <= GPT_CUDA_LN_HELD_CHUNKS);
        unsigned char seen[GPT_CUDA_LN_HELD_CHUNKS * 256] = {0};
        for (unsigned ch = 0; ch < k; ch++)
            for (size_t lane = 0; lane < 32; lane++)
                for (size_t e = 0; e < 8; e++) {
                    size_t c = 8 * lane + 256 * ch + e;
                    if (c < C)
                        seen[c]++;
                }
        for (size_t c = 0; c < C; c++)
            assert_int_equal(seen[c], 1);
    }
}

/* BGRADB writes the bias gradient straight into dbias only where the
 * step stores gradients and dbias suits the epilogue (16-byte aligned);
 * GPT-2's biases all are (every tensor a multiple of 4 floats). */
static void test_bgrad_direct(void **state)
{
    (void)state;
    _Alignas(16) float g[8] = {0};
    assert_true(gpt_cuda_plan_bgrad_direct(g, 1));
    assert_false(gpt_cuda_plan_bgrad_direct(g, 0));
    assert_false(gpt_cuda_plan_bgrad_direct(g + 1, 1));
    assert_true(gpt_cuda_plan_bgrad_direct(g + 4, 1));
    assert_false(gpt_cuda_plan_bgrad_direct(NULL, 1));
}

/* A fake GEMM for the autotune: per candidate a list of timings returned
 * in turn (negative: it fails), and the log of calls. */
struct fake_lt {
    double ms[GPT_CUDA_LT_TUNE_MAX][GPT_CUDA_LT_TUNE_REPS + 1];
    int calls[GPT_CUDA_LT_TUNE_MAX];
    int log[64], n_log;
};

static double fake_lt_time(void *ctx, int i)
{
    struct fake_lt *f = ctx;
    assert_true(i >= 0 && i < GPT_CUDA_LT_TUNE_MAX);
    assert_true(f->calls[i] <= GPT_CUDA_LT_TUNE_REPS);
    if (f->n_log < 64)
        f->log[f->n_log++] = i;
    return f->ms[i][f->calls[i]++];
}

static void fake_lt_fill(struct fake_lt *f, int i, double warm, double a, double b, double c,
                         double d, double e)
{
    const double v[GPT_CUDA_LT_TUNE_REPS + 1] = {warm, a, b, c, d, e};
    memcpy(f->ms[i], v, sizeof(v));
}

static void test_lt_tune(void **state)
{
    (void)state;
    struct fake_lt f;
    double med[GPT_CUDA_LT_TUNE_MAX];
    /* The median decides, not the minimum or the warm-up: candidate 1 has
     * the single fastest call and a slow warm-up, candidate 2 the lowest
     * median. Every candidate runs once to warm up, then 5 rounds of one
     * call each, in index order. */
    memset(&f, 0, sizeof(f));
    fake_lt_fill(&f, 0, 1.0, 2.0, 2.1, 2.2, 2.0, 2.1);
    fake_lt_fill(&f, 1, 9.0, 0.5, 3.0, 3.0, 3.0, 3.0);
    fake_lt_fill(&f, 2, 1.0, 1.9, 1.8, 1.9, 5.0, 1.7);
    assert_int_equal(gpt_cuda_plan_lt_tune(3, fake_lt_time, &f, med), 2);
    assert_true(med[0] == 2.1 && med[1] == 3.0 && med[2] == 1.9);
    assert_int_equal(f.n_log, 3 * (GPT_CUDA_LT_TUNE_REPS + 1));
    for (int k = 0; k < f.n_log; k++)
        assert_int_equal(f.log[k], k % 3);
    /* A tie goes to the heuristic's order (the untuned choice), and the
     * same timings choose the same candidate every time. */
    for (int rep = 0; rep < 3; rep++) {
        memset(&f, 0, sizeof(f));
        fake_lt_fill(&f, 0, 1, 1.5, 1.5, 1.5, 1.5, 1.5);
        fake_lt_fill(&f, 1, 1, 1.5, 1.5, 1.5, 1.5, 1.5);
        fake_lt_fill(&f, 2, 1, 1.6, 1.6, 1.6, 1.6, 1.6);
        assert_int_equal(gpt_cuda_plan_lt_tune(3, fake_lt_time, &f, NULL), 0);
    }
    /* A candidate that fails (at its warm-up or later) is not run again
     * and cannot win; all failing gives -1. */
    memset(&f, 0, sizeof(f));
    fake_lt_fill(&f, 0, 1, 4, 4, 4, 4, 4);
    fake_lt_fill(&f, 1, -1, 0, 0, 0, 0, 0);
    fake_lt_fill(&f, 2, 1, 0.1, -1, 0.1, 0.1, 0.1);
    fake_lt_fill(&f, 3, 1, 3, 3, 3, 3, 3);
    assert_int_equal(gpt_cuda_plan_lt_tune(4, fake_lt_time, &f, med), 3);
    assert_int_equal(f.calls[1], 1);
    assert_int_equal(f.calls[2], 3);
    assert_true(med[1] == -1 && med[2] == -1 && med[3] == 3);
    memset(&f, 0, sizeof(f));
    fake_lt_fill(&f, 0, -1, 0, 0, 0, 0, 0);
    assert_int_equal(gpt_cuda_plan_lt_tune(1, fake_lt_time, &f, NULL), -1);
    assert_int_equal(gpt_cuda_plan_lt_tune(0, fake_lt_time, &f, NULL), -1);
    /* More than the maximum: the first GPT_CUDA_LT_TUNE_MAX only. */
    memset(&f, 0, sizeof(f));
    for (int i = 0; i < GPT_CUDA_LT_TUNE_MAX; i++)
        fake_lt_fill(&f, i, 1, 8 - i, 8 - i, 8 - i, 8 - i, 8 - i);
    assert_int_equal(gpt_cuda_plan_lt_tune(GPT_CUDA_LT_TUNE_MAX + 4, fake_lt_time, &f, NULL),
                     GPT_CUDA_LT_TUNE_MAX - 1);
}

static void test_lnb_blocks(void **state)
{
    (void)state;
    const size_t S = GPT_CUDA_SCRATCH_FLOATS, sms = 132;
    unsigned gpt2 = gpt_cuda_plan_lnb_blocks(16384, 768, S);
    assert_int_equal(gpt2, 1024);
    assert_true(gpt2 >= 4 * sms && gpt2 <= GPT_CUDA_LNB_SM_BLOCKS * sms);
    /* An SM holds GPT_CUDA_LNB_SM_BLOCKS blocks' shared memory (228 KiB,
     * 1 KiB reserved per block) at GPT-2's width. */
    assert_true(GPT_CUDA_LNB_SM_BLOCKS * (GPT_CUDA_LNB_WARPS * 2 * 768 * sizeof(float) + 1024) <=
                228 * 1024);
    /* B = 8 and B = 32 at T = 1024: at least 2 blocks per SM; B = 32 is
     * capped by the scratch, 2 * 1365 * 768 <= 2 << 20 floats (1365
     * blocks of 25 rows trimmed to the 1311 that hold rows). */
    assert_true(gpt_cuda_plan_lnb_blocks(8192, 768, S) >= 2 * sms);
    assert_int_equal(gpt_cuda_plan_lnb_blocks(32768, 768, S), 1311);
    assert_int_equal(gpt_cuda_plan_lnb_blocks(1, 768, S), 1);
    assert_int_equal(gpt_cuda_plan_lnb_blocks(0, 768, S), 1);
    assert_int_equal(gpt_cuda_plan_lnb_blocks(65, 48, S), 5);
    /* 2 * blocks * C floats must fit: (1 << 20) / 2 / 768 = 682, 16384
     * rows then 25 a block, 656 blocks. */
    assert_int_equal(gpt_cuda_plan_lnb_blocks(16384, 768, 1 << 20), 656);
    assert_int_equal(gpt_cuda_plan_lnb_blocks(1 << 20, 768, 1 << 20), 682);
    /* A scratch too small for 2 blocks: one block of every row. */
    assert_int_equal(gpt_cuda_plan_lnb_blocks(16384, 768, 3 * 768), 1);
    const size_t scratches[] = {2 * 16, 3000, 1 << 16, 1 << 20, GPT_CUDA_SCRATCH_FLOATS};
    for (size_t si = 0; si < sizeof(scratches) / sizeof(scratches[0]); si++)
        for (size_t N = 1; N < 40000; N = N * 5 / 4 + 37)
            for (size_t C = 16; C <= 1536; C += 160) {
                size_t sf = scratches[si];
                unsigned b = gpt_cuda_plan_lnb_blocks(N, C, sf);
                if (2 * C > sf) {
                    assert_int_equal(b, 0);
                    continue;
                }
                /* The partials fit; no more blocks than 16 rows each need. */
                assert_true(b >= 1 && 2 * (size_t)b * C <= sf);
                assert_true(b <= (N + GPT_CUDA_LNB_ROWS - 1) / GPT_CUDA_LNB_ROWS || b == 1);
                /* Every row is owned by exactly one block, none empty. */
                size_t rows_per = (N + b - 1) / b;
                assert_true(rows_per * b >= N && rows_per * (b - 1) < N);
                /* Where the scratch does not bind, 16 rows a block. */
                if (2 * C * ((N + GPT_CUDA_LNB_ROWS - 1) / GPT_CUDA_LNB_ROWS) <= sf)
                    assert_int_equal(b, (N + GPT_CUDA_LNB_ROWS - 1) / GPT_CUDA_LNB_ROWS);
            }
    /* 4 warps * 2 * C floats of shared memory: C = 1536 fits 48 KiB, 1537 not. */
    assert_true(gpt_cuda_plan_lnb_blocks(100, 1536, S) > 0);
    assert_int_equal(gpt_cuda_plan_lnb_blocks(100, 1537, S), 0);
    assert_int_equal(gpt_cuda_plan_lnb_blocks(100, 768, 1000), 0);
}

/* The classifier's one-read form keeps a row of logits in shared memory
 * when it fits beside the reductions' share: GPT-2's padded vocabulary
 * as bf16 (100.6 KB) and as fp32 (201 KB) under the H200's 227 KiB
 * opt-in, not under the 48 KiB default; the boundary is exact. */
static void test_xent_stage(void **state)
{
    (void)state;
    size_t h200 = (size_t)227 * 1024;
    assert_int_equal(gpt_cuda_plan_xent_stage(50304, 2, h200), 100608);
    assert_int_equal(gpt_cuda_plan_xent_stage(50304, 4, h200), 201216);
    assert_int_equal(gpt_cuda_plan_xent_stage(50304, 2, 48 * 1024), 0);
    assert_int_equal(gpt_cuda_plan_xent_stage(1024, 4, 48 * 1024), 4096);
    size_t fit = (h200 - GPT_CUDA_XENT_STATIC_SMEM) / 2;
    assert_int_equal(gpt_cuda_plan_xent_stage(fit, 2, h200), 2 * fit);
    assert_int_equal(gpt_cuda_plan_xent_stage(fit + 1, 2, h200), 0);
    /* A 128k vocabulary fits as bf16 only; a limit below the static share
     * takes nothing. */
    assert_true(gpt_cuda_plan_xent_stage(100352, 2, h200) > 0);
    assert_int_equal(gpt_cuda_plan_xent_stage(100352, 4, h200), 0);
    assert_int_equal(gpt_cuda_plan_xent_stage(1, 2, GPT_CUDA_XENT_STATIC_SMEM - 1), 0);
}

/* The one-launch AdamW's span lookup (gpt_cuda_span_of, which the kernel
 * runs) against a linear scan, and its table's contiguity rules. */
static void test_adamw_table(void **state)
{
    (void)state;
    struct gpt_adamw_span sp[64];
    uint64_t ends[64];
    uint32_t decay[64];
    size_t pos = 1000, total = 0;
    for (size_t s = 0; s < 64; s++) {
        size_t n = 1 + (s * 37) % 11 + (s % 5 == 0 ? 700 : 0);
        sp[s] = (struct gpt_adamw_span){pos, n, (int)(s % 3 == 0)};
        pos += n;
    }
    assert_int_equal(gpt_cuda_adamw_table(sp, 64, ends, decay, &total), 0);
    assert_int_equal(total, pos - 1000);
    assert_int_equal(ends[63], total);
    for (uint64_t i = 0; i < total + 3; i++) {
        size_t want = 0;
        while (want < 64 && ends[want] <= i)
            want++;
        size_t got = gpt_cuda_span_of(ends, 64, i);
        assert_int_equal(got, want);
        if (got < 64) {
            /* element i is inside span got, with its decay flag */
            uint64_t start = got ? ends[got - 1] : 0;
            assert_true(i >= start && i < ends[got]);
            assert_int_equal(decay[got], sp[got].decay != 0);
        }
    }
    assert_int_equal(gpt_cuda_span_of(ends, 1, 0), 0);
    /* A gap, an overlap and an empty span refuse the one-launch path. */
    sp[10].off += 1;
    assert_int_equal(gpt_cuda_adamw_table(sp, 64, ends, decay, &total), -EINVAL);
    sp[10].off -= 2;
    assert_int_equal(gpt_cuda_adamw_table(sp, 64, ends, decay, &total), -EINVAL);
    sp[10].off += 1;
    assert_int_equal(gpt_cuda_adamw_table(sp, 64, ends, decay, &total), 0);
    sp[5].n = 0;
    assert_int_equal(gpt_cuda_adamw_table(sp, 6, ends, decay, &total), -EINVAL);
}

static void test_colsum_splits(void **state)
{
    (void)state;
    assert_int_equal(gpt_cuda_plan_colsum_splits(100, 768, 1 << 20), 1);
    assert_int_equal(gpt_cuda_plan_colsum_splits(512, 768, 1 << 20), 2);
    assert_int_equal(gpt_cuda_plan_colsum_splits(16384, 768, 1 << 20), GPT_CUDA_COLSUM_MAX_SPLITS);
    /* Bounded by the scratch: splits * C <= scratch. */
    assert_int_equal(gpt_cuda_plan_colsum_splits(16384, 100000, 1 << 20), 10);
    assert_int_equal(gpt_cuda_plan_colsum_splits(16384, 1 << 20, 1 << 20), 1);
    for (size_t C = 1; C < 5000; C = C * 2 + 3) {
        unsigned s = gpt_cuda_plan_colsum_splits(1 << 16, C, 65536);
        assert_true(s >= 1 && s <= GPT_CUDA_COLSUM_MAX_SPLITS);
        assert_true(s == 1 || (size_t)s * C <= 65536);
    }
}

static void test_buckets(void **state)
{
    (void)state;
    size_t b;
    assert_int_equal(gpt_cuda_plan_buckets(0, 1000, &b), 0);
    assert_int_equal(gpt_cuda_plan_buckets(1000, 1000, &b), 2);
    assert_int_equal(b, 960);
    assert_int_equal(gpt_cuda_plan_buckets(10, 1, &b), 1);
    assert_int_equal(b, 64);
    assert_int_equal(gpt_cuda_plan_buckets(124439808, 25u << 18, &b), 19);
    assert_int_equal(b % 64, 0);
}

/* The two-copy repack of comm_nccl.c, on the host: a 1-D copy of the
 * first extra*chunk elements, then rows of `base` with pitches base and
 * chunk. */
static void repack(const struct gpt_cuda_pad_plan *p, float *flat, float *padded, int to_padded)
{
    size_t base = p->n / (size_t)p->world, extra = p->n % (size_t)p->world;
    size_t head = extra * p->chunk;
    if (to_padded)
        memcpy(padded, flat, head * sizeof(float));
    else
        memcpy(flat, padded, head * sizeof(float));
    for (size_t r = 0; r < (size_t)p->world - extra && base > 0; r++) {
        float *f = flat + head + r * base, *d = padded + head + r * p->chunk;
        if (to_padded)
            memcpy(d, f, base * sizeof(float));
        else
            memcpy(f, d, base * sizeof(float));
    }
}

static float val(int rank, size_t i)
{
    return (float)((rank + 1) * 1000 + (int)(i % 997));
}

/* Simulates reduce-scatter and all-gather through the padded layout and
 * compares with the slice convention of gpt_comm_slice. */
static void check_world(size_t n, int world)
{
    struct gpt_cuda_pad_plan p;
    gpt_cuda_pad_plan_init(&p, n, world);
    assert_int_equal(p.chunk, (n + (size_t)world - 1) / (size_t)world);
    assert_int_equal(p.padded, p.chunk * (size_t)world);
    assert_int_equal(p.needs_pad, n % (size_t)world != 0);
    float *flat = malloc((n + 1) * sizeof(float));
    float *padded = calloc(p.padded + 1, sizeof(float));
    float *sum = calloc(p.padded + 1, sizeof(float));
    assert_non_null(flat);
    assert_non_null(padded);
    assert_non_null(sum);
    /* Slices tile [0, n) and sit at r * chunk in the padded buffer. */
    size_t next = 0;
    for (int r = 0; r < world; r++) {
        size_t off, len, poff;
        gpt_cuda_pad_plan_slice(&p, r, &off, &len, &poff);
        assert_int_equal(off, next);
        assert_true(len <= p.chunk);
        assert_int_equal(poff, (size_t)r * p.chunk);
        next = off + len;
    }
    assert_int_equal(next, n);
    /* Reduce-scatter: every rank packs (tails zero); NCCL sums the padded
     * buffers element-wise; rank r reads chunk r. */
    for (int r = 0; r < world; r++) {
        for (size_t i = 0; i < n; i++)
            flat[i] = val(r, i);
        memset(padded, 0, p.padded * sizeof(float));
        repack(&p, flat, padded, 1);
        for (size_t i = 0; i < p.padded; i++)
            sum[i] += padded[i];
    }
    for (int r = 0; r < world; r++) {
        size_t off, len, poff;
        gpt_cuda_pad_plan_slice(&p, r, &off, &len, &poff);
        for (size_t i = 0; i < len; i++) {
            float want = 0;
            for (int q = 0; q < world; q++)
                want += val(q, off + i);
            assert_float_equal(sum[poff + i], want, 0.0f);
        }
        for (size_t i = len; i < p.chunk; i++)
            assert_float_equal(sum[poff + i], 0.0f, 0.0f); /* padding stays zero */
    }
    /* All-gather: each rank's slice lands at r * chunk, the unpack restores
     * the flat layout. */
    for (size_t i = 0; i < p.padded; i++)
        padded[i] = -1.0f;
    for (int r = 0; r < world; r++) {
        size_t off, len, poff;
        gpt_cuda_pad_plan_slice(&p, r, &off, &len, &poff);
        for (size_t i = 0; i < len; i++)
            padded[poff + i] = val(r, off + i);
    }
    memset(flat, 0, (n + 1) * sizeof(float));
    flat[n] = 42.0f; /* guard: the unpack must not write past n */
    repack(&p, flat, padded, 0);
    for (int r = 0; r < world; r++) {
        size_t off, len, poff;
        gpt_cuda_pad_plan_slice(&p, r, &off, &len, &poff);
        for (size_t i = 0; i < len; i++)
            assert_float_equal(flat[off + i], val(r, off + i), 0.0f);
    }
    assert_float_equal(flat[n], 42.0f, 0.0f);
    free(flat);
    free(padded);
    free(sum);
}

static void test_pad_plan(void **state)
{
    (void)state;
    for (int world = 1; world <= 9; world++)
        for (size_t n = 1; n <= 40; n++)
            check_world(n, world);
    check_world(1000003, 8);
    check_world(1 << 20, 8);
}

/* ---- attention plan ------------------------------------------------------ */

#define SMEM_H100 ((size_t)227 * 1024)

static void test_attn_plan_gpt2(void **state)
{
    (void)state;
    struct gpt_cuda_attn_plan p;
    gpt_cuda_plan_attention(&p, 16, 1024, 768, 12, SMEM_H100, GPT_CUDA_ATTN_FLASH);
    assert_int_equal(p.kind, GPT_CUDA_ATTN_FLASH);
    assert_string_equal(p.why, "");
    assert_int_equal(p.hs, 64);
    assert_int_equal(p.ld, 68);
    assert_int_equal(p.q_tiles, 1024 / GPT_CUDA_FLASH_BR);
    assert_int_equal(p.k_tiles, 1024 / GPT_CUDA_FLASH_BR);
    assert_int_equal(p.bh, 16 * 12);
    assert_int_equal(p.smem_fwd, (64 + 2 * 32) * 68 * 4);
    assert_int_equal(p.smem_dq, (2 * 64 + 2 * 32) * 68 * 4);
    assert_int_equal(p.smem_dkv, ((2 * 64 + 2 * 32) * 68 + 64) * 4);
    assert_int_equal(p.lse_floats, 16 * 12 * 1024);
    /* The same shape on request goes to the GEMMs. */
    gpt_cuda_plan_attention(&p, 16, 1024, 768, 12, SMEM_H100, GPT_CUDA_ATTN_GEMM);
    assert_int_equal(p.kind, GPT_CUDA_ATTN_GEMM);
    assert_string_equal(p.why, "requested");
}

/* With flash, att holds the logsumexp only (the backward gets the output
 * back from the caller) and the backward scratch per-row state and a bf16
 * dout, not the (B,NH,T,T) scores: 0.8 MB instead of 0.8 GB of att per
 * layer at B=16. */
static void test_att_floats(void **state)
{
    (void)state;
    struct gpt_cuda_attn_plan p;
    size_t prev = 0;
    for (size_t B = 1; B <= 32; B *= 2) {
        gpt_cuda_plan_attention(&p, B, 1024, 768, 12, SMEM_H100, GPT_CUDA_ATTN_FLASH);
        assert_int_equal(p.kind, GPT_CUDA_ATTN_FLASH);
        size_t att = gpt_cuda_plan_att_floats(&p, B, 1024, 768, 12, 0);
        assert_int_equal(att, B * 12 * 1024);
        /* D per row, then (hs 64: the tensor-core backward) dout as bf16
         * and one dQ turn counter per (b, h, 64-row query tile), then
         * the block ticket, then (16-byte aligned) the dS backward's
         * tiles: 136 of 64 x 64 bf16 per (b, h). */
        size_t ds_at = (B * 12 * 1024 + B * 1024 * 768 / 2 + B * 12 * 16 + 1 + 3) & ~(size_t)3;
        assert_int_equal(gpt_flash_tc_ds_off(B * 12 * 1024, B * 1024 * 768, B * 12 * 16), ds_at);
        assert_int_equal(gpt_cuda_plan_att_floats(&p, B, 1024, 768, 12, 1),
                         ds_at + B * 12 * 136 * 64 * 64 / 2);
        /* fp32 mode (the backend clears tc): the CUDA-core kernels' D only */
        p.tc = 0;
        assert_int_equal(gpt_cuda_plan_att_floats(&p, B, 1024, 768, 12, 1), B * 12 * 1024);
        assert_int_equal(gpt_cuda_plan_att_floats(&p, B, 1024, 768, 12, 0), att);
        assert_true(att * 8 < B * 12 * 1024 * 1024);
        assert_true(att > prev); /* never grows when B shrinks */
        prev = att;
        gpt_cuda_plan_attention(&p, B, 1024, 768, 12, SMEM_H100, GPT_CUDA_ATTN_GEMM);
        assert_int_equal(gpt_cuda_plan_att_floats(&p, B, 1024, 768, 12, 0), B * 12 * 1024 * 1024);
        assert_int_equal(gpt_cuda_plan_att_floats(&p, B, 1024, 768, 12, 1), B * 12 * 1024 * 1024);
    }
    /* Head size 16 (no tensor-core kernels): D only. The scratch never
     * exceeds the (B,NH,T,T) of the GEMM path, as T > hs, but for the dS
     * tiles at short T (test_attn_plan_invariants). */
    gpt_cuda_plan_attention(&p, 2, 128, 128, 8, SMEM_H100, GPT_CUDA_ATTN_FLASH);
    assert_int_equal(p.kind, GPT_CUDA_ATTN_FLASH);
    assert_int_equal(gpt_cuda_plan_att_floats(&p, 2, 128, 128, 8, 1), 2 * 8 * 128);
    gpt_cuda_plan_attention(&p, 1, 33, 32, 1, SMEM_H100, GPT_CUDA_ATTN_FLASH);
    assert_int_equal(p.kind, GPT_CUDA_ATTN_FLASH);
    /* hs 32: one dS tile of 64 x 64 bf16 beyond that at T 33 */
    assert_true(gpt_cuda_plan_att_floats(&p, 1, 33, 32, 1, 1) <= 33 * 33 + 64 * 64 / 2);
    gpt_cuda_plan_attention(&p, 3, 129, 1024, 8, SMEM_H100, GPT_CUDA_ATTN_FLASH);
    assert_int_equal(p.kind, GPT_CUDA_ATTN_FLASH);
    /* hs 128: query tiles of 32 rows, 5 per head at T = 129, visited by
     * 1, 1, 2, 2 and 3 key blocks: 9 dS tiles of 64 x 32 per head. */
    assert_int_equal(gpt_cuda_plan_att_floats(&p, 3, 129, 1024, 8, 1),
                     gpt_flash_tc_ds_off(3 * 8 * 129, 3 * 129 * 1024, 3 * 8 * 5) +
                         3 * 8 * 9 * 64 * 32 / 2);
    assert_true(gpt_flash_tc_ds_off(3 * 8 * 129, 3 * 129 * 1024, 3 * 8 * 5) >=
                gpt_flash_tc_sem_off(3 * 8 * 129, 3 * 129 * 1024) + 3 * 8 * 5 + 1);
    /* Tiles past the cap (1 GiB): the cap kept, the dS backward in chunks
     * of the pairs whose tiles fit it (963 of 1.1 MB at T 1024). */
    gpt_cuda_plan_attention(&p, 81, 1024, 768, 12, SMEM_H100, GPT_CUDA_ATTN_FLASH);
    assert_int_equal(gpt_flash_tc_ds_reserve(p.bh, 1024, 64), (size_t)1 << 30);
    assert_int_equal(gpt_flash_tc_ds_chunk(p.bh, 1024, 64), 963);
    assert_int_equal(gpt_flash_tc_ds_chunk(80 * 12, 1024, 64), 960); /* all in one */
    assert_int_equal(gpt_cuda_plan_att_floats(&p, 81, 1024, 768, 12, 1),
                     gpt_flash_tc_ds_off(81 * 12 * 1024, 81 * 1024 * 768, 81 * 12 * 16) +
                         ((size_t)1 << 28));
    /* One pair's tiles past the cap (hs 64, T 32768: 131328 tiles of 8
     * KiB): no chunk, twopass; the reserve stays at the cap. */
    assert_int_equal(gpt_flash_tc_ds_chunk(4, 32768, 64), 0);
    assert_int_equal(gpt_flash_tc_ds_reserve(4, 32768, 64), (size_t)1 << 30);
    assert_int_equal(gpt_flash_tc_ds_chunk(4, 16384, 64), 3);
    gpt_cuda_plan_attention(&p, 3, 129, 1024, 8, SMEM_H100, GPT_CUDA_ATTN_FLASH);
    assert_true(gpt_flash_tc_sem_off(3 * 8 * 129, 3 * 129 * 1024) >=
                gpt_flash_tc_dob_off(3 * 8 * 129) + (3 * 129 * 1024 + 1) / 2);
    assert_true(gpt_cuda_plan_att_floats(&p, 3, 129, 1024, 8, 1) <=
                3 * 8 * 129 * 129 + 3 * 8 * 9 * 64 * 32 / 2);
    /* The CPU backend keeps the full probabilities (no att_floats slot). */
    struct gpt_backend *cpu = NULL;
    assert_int_equal(gpt_backend_cpu_new(1, &cpu, NULL), 0);
    assert_int_equal(gpt_backend_att_floats(cpu, 2, 64, 32, 4, 0), 2 * 4 * 64 * 64);
    assert_int_equal(gpt_backend_att_floats(cpu, 2, 64, 32, 4, 1), 2 * 4 * 64 * 64);
    gpt_backend_free(cpu);
}

/* The model carves the attention buffers once, for its largest batch and
 * sequence, and re-carves them for smaller ones: on the flash path
 * neither att nor the backward's scratch may ever need more for a smaller
 * B or T (the dS tiles' reserve is capped, never dropped), at any head
 * size, across the dS cap (B 80 / 81 at T 1024, hs 64) and one pair past
 * it. (At T up to hs the plan takes the GEMM path, whose (B,NH,T,T)
 * scores the model sizes for separately: model.c.) */
static void test_att_floats_monotone(void **state)
{
    (void)state;
    static const size_t Ts[] = {64, 65, 200, 1024, 1025, 2048, 4096, 32768};
    static const size_t Bs[] = {1, 2, 3, 16, 79, 80, 81, 96, 200};
    static const size_t hss[] = {32, 48, 64, 96, 128};
    for (size_t h = 0; h < sizeof(hss) / sizeof(hss[0]); h++)
        for (int scratch = 0; scratch <= 1; scratch++) {
            size_t NH = 12, C = hss[h] * NH;
            for (size_t ti = 0; ti < sizeof(Ts) / sizeof(Ts[0]); ti++)
                for (size_t bi = 0; bi < sizeof(Bs) / sizeof(Bs[0]); bi++) {
                    struct gpt_cuda_attn_plan p, q;
                    size_t T = Ts[ti], B = Bs[bi];
                    gpt_cuda_plan_attention(&p, B, T, C, NH, SMEM_H100, GPT_CUDA_ATTN_FLASH);
                    size_t big = gpt_cuda_plan_att_floats(&p, B, T, C, NH, scratch);
                    assert_int_equal(p.kind, T > hss[h] ? GPT_CUDA_ATTN_FLASH : GPT_CUDA_ATTN_GEMM);
                    if (p.kind != GPT_CUDA_ATTN_FLASH)
                        continue;
                    if (bi > 0) { /* one batch smaller */
                        size_t b = Bs[bi - 1];
                        gpt_cuda_plan_attention(&q, b, T, C, NH, SMEM_H100, GPT_CUDA_ATTN_FLASH);
                        assert_true(gpt_cuda_plan_att_floats(&q, b, T, C, NH, scratch) <= big);
                    }
                    if (ti > 0) { /* one length shorter */
                        size_t t = Ts[ti - 1];
                        gpt_cuda_plan_attention(&q, B, t, C, NH, SMEM_H100, GPT_CUDA_ATTN_FLASH);
                        if (q.kind == GPT_CUDA_ATTN_FLASH)
                            assert_true(gpt_cuda_plan_att_floats(&q, B, t, C, NH, scratch) <= big);
                    }
                }
        }
}

static void test_attn_plan_limits(void **state)
{
    (void)state;
    struct gpt_cuda_attn_plan p;
    /* Head size 6: not a multiple of 4. */
    gpt_cuda_plan_attention(&p, 2, 64, 12, 2, SMEM_H100, GPT_CUDA_ATTN_FLASH);
    assert_int_equal(p.kind, GPT_CUDA_ATTN_GEMM);
    /* Head size 256: above the maximum. */
    gpt_cuda_plan_attention(&p, 1, 1024, 512, 2, SMEM_H100, GPT_CUDA_ATTN_FLASH);
    assert_int_equal(p.kind, GPT_CUDA_ATTN_GEMM);
    /* T must exceed hs (the backward's scratch holds D and a bf16 dout). */
    gpt_cuda_plan_attention(&p, 2, 64, 256, 4, SMEM_H100, GPT_CUDA_ATTN_FLASH);
    assert_int_equal(p.kind, GPT_CUDA_ATTN_GEMM);
    gpt_cuda_plan_attention(&p, 2, 65, 256, 4, SMEM_H100, GPT_CUDA_ATTN_FLASH);
    assert_int_equal(p.kind, GPT_CUDA_ATTN_FLASH);
    /* hs 128 needs ~100 KB in the backward: over the default 48 KB, within
     * an H100's opt-in limit. */
    gpt_cuda_plan_attention(&p, 1, 512, 1024, 8, 48 * 1024, GPT_CUDA_ATTN_FLASH);
    assert_int_equal(p.kind, GPT_CUDA_ATTN_GEMM);
    assert_string_equal(p.why, "shared memory");
    gpt_cuda_plan_attention(&p, 1, 512, 1024, 8, SMEM_H100, GPT_CUDA_ATTN_FLASH);
    assert_int_equal(p.kind, GPT_CUDA_ATTN_FLASH);
    assert_true(p.smem_dkv > 48 * 1024 && p.smem_dkv <= SMEM_H100);
    /* B * NH past a grid dimension. */
    gpt_cuda_plan_attention(&p, 65536, 128, 64, 1, SMEM_H100, GPT_CUDA_ATTN_FLASH);
    assert_int_equal(p.kind, GPT_CUDA_ATTN_GEMM);
}

/* Every accepted shape: the padded row stride suits the float4 reads, the
 * saved state fits att, the grid covers T exactly. */
static void test_attn_plan_invariants(void **state)
{
    (void)state;
    static const size_t Ts[] = {1, 5, 31, 32, 33, 63, 64, 65, 100, 129, 1000, 1024, 2049};
    for (size_t hs = 1; hs <= 160; hs++) {
        for (size_t ti = 0; ti < sizeof(Ts) / sizeof(Ts[0]); ti++) {
            size_t B = 3, NH = 2, T = Ts[ti], C = hs * NH;
            struct gpt_cuda_attn_plan p;
            gpt_cuda_plan_attention(&p, B, T, C, NH, SMEM_H100, GPT_CUDA_ATTN_FLASH);
            assert_int_equal(p.hs, hs);
            if (p.kind != GPT_CUDA_ATTN_FLASH) {
                assert_true(hs % 4 != 0 || hs > GPT_CUDA_FLASH_MAX_HS || T <= hs);
                continue;
            }
            assert_int_equal(p.ld % 4, 0);
            assert_int_equal((p.ld / 4) % 2, 1);
            assert_true(p.ld >= hs + 4);
            assert_true(gpt_cuda_plan_att_floats(&p, B, T, C, NH, 0) <= B * NH * T * T);
            /* The scratch less the dS backward's tiles (whole 64-key
             * tiles: at short T, more than the scores of the GEMM path);
             * from T 256 all of it. */
            size_t ds =
                gpt_flash_tc_applies(hs) ? gpt_flash_tc_ds_reserve(B * NH, (int)T, hs) / 4 : 0;
            assert_true(gpt_cuda_plan_att_floats(&p, B, T, C, NH, 1) <= B * NH * T * T + ds);
            if (T >= 256)
                assert_true(gpt_cuda_plan_att_floats(&p, B, T, C, NH, 1) <= B * NH * T * T);
            assert_true((size_t)p.q_tiles * GPT_CUDA_FLASH_BR >= T);
            assert_true((size_t)(p.q_tiles - 1) * GPT_CUDA_FLASH_BR < T);
            assert_int_equal(p.bh, B * NH);
        }
    }
}

/* The causal spans against the mask, pair by pair: every (i, j <= i) pair
 * of a block's rows is in a visited tile, and every visited tile has one. */
static void check_spans(size_t T)
{
    size_t br = GPT_CUDA_FLASH_BR, bc = GPT_CUDA_FLASH_BC;
    for (size_t own0 = 0; own0 < T; own0 += br) {
        size_t own1 = own0 + br < T ? own0 + br : T;
        unsigned first, end;
        /* Query block: rows own0..own1-1, key tiles streamed. */
        gpt_cuda_plan_flash_span(1, own0, T, &first, &end);
        for (size_t i = own0; i < own1; i++)
            for (size_t j = 0; j <= i; j++)
                assert_true(j / bc >= first && j / bc < end);
        for (unsigned t = first; t < end; t++)
            assert_true(t * bc < T && t * bc <= own1 - 1); /* key t*bc <= some i */
        /* Key block: keys own0..own1-1, query tiles streamed. */
        gpt_cuda_plan_flash_span(0, own0, T, &first, &end);
        for (size_t j = own0; j < own1; j++)
            for (size_t i = j; i < T; i++)
                assert_true(i / bc >= first && i / bc < end);
        for (unsigned t = first; t < end; t++) {
            size_t last_q = (t + 1) * bc - 1 < T - 1 ? (t + 1) * bc - 1 : T - 1;
            assert_true(t * bc < T && last_q >= own0); /* some query i >= key own0 */
        }
    }
}

static void test_flash_span(void **state)
{
    (void)state;
    for (size_t T = 1; T <= 200; T++)
        check_spans(T);
    check_spans(1000);
    check_spans(1024);
}

/* ---- bf16 conversions ----------------------------------------------------- */

static float bits_f(uint32_t u)
{
    return gpt_bf16_u2f(u);
}

static int bf16_is_nan(uint16_t h)
{
    return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0;
}

/* Nearest bf16 to a finite f by distance in double, ties to even; beyond
 * the largest finite value by half an ulp: Inf. */
static uint16_t ref_rne(float f)
{
    uint32_t u = gpt_bf16_f2u(f);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1); /* magnitude up */
    double a = fabs((double)gpt_bf16_to_float(lo));
    double b = (hi & 0x7fffu) == 0x7f80u ? ldexp(1.0, 128) : fabs((double)gpt_bf16_to_float(hi));
    double x = fabs((double)f);
    if (x - a < b - x)
        return lo;
    if (x - a > b - x)
        return hi;
    return (lo & 1u) ? hi : lo;
}

static void test_bf16_rne(void **state)
{
    (void)state;
    /* Every bf16 value survives the round trip. */
    for (uint32_t h = 0; h < 0x10000u; h++) {
        if (bf16_is_nan((uint16_t)h))
            continue;
        float f = gpt_bf16_to_float((uint16_t)h);
        assert_int_equal(gpt_bf16_from_float_rne(f), h);
    }
    assert_int_equal(gpt_bf16_from_float_rne(1.0f), 0x3f80);
    assert_int_equal(gpt_bf16_from_float_rne(bits_f(0x3f808000u)), 0x3f80); /* tie, even down */
    assert_int_equal(gpt_bf16_from_float_rne(bits_f(0x3f818000u)), 0x3f82); /* tie, odd up */
    assert_int_equal(gpt_bf16_from_float_rne(bits_f(0x3f808001u)), 0x3f81);
    assert_int_equal(gpt_bf16_from_float_rne(bits_f(0xbf80ffffu)), 0xbf81);
    assert_int_equal(gpt_bf16_from_float_rne(-0.0f), 0x8000);
    assert_int_equal(gpt_bf16_from_float_rne(bits_f(0x00000001u)), 0x0000); /* denormal */
    assert_int_equal(gpt_bf16_from_float_rne(bits_f(0x7f7f7fffu)), 0x7f7f);
    assert_int_equal(gpt_bf16_from_float_rne(bits_f(0x7f7fffffu)), 0x7f80); /* overflow */
    assert_int_equal(gpt_bf16_from_float_rne(INFINITY), 0x7f80);
    assert_int_equal(gpt_bf16_from_float_rne(-INFINITY), 0xff80);
    /* NaN stays NaN, sign kept, even with a payload only in the low bits. */
    assert_true(bf16_is_nan(gpt_bf16_from_float_rne(NAN)));
    assert_true(bf16_is_nan(gpt_bf16_from_float_rne(bits_f(0x7f800001u))));
    assert_true(bf16_is_nan(gpt_bf16_from_float_rne(bits_f(0x7fffffffu))));
    assert_int_equal(gpt_bf16_from_float_rne(bits_f(0xff800001u)) & 0x8000u, 0x8000u);
    /* Against the distance-based reference on pseudo-random finite floats. */
    uint64_t x = 88172645463325252ull;
    for (int n = 0; n < 2000000; n++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint32_t u = (uint32_t)x;
        if ((u & 0x7f800000u) == 0x7f800000u)
            continue;
        float f = bits_f(u);
        assert_int_equal(gpt_bf16_from_float_rne(f), ref_rne(f));
    }
    /* The pair: lo in the low half, hi in the high one, each rounded as
     * alone (the device's cvt.rn.bf16x2.f32 takes hi first). */
    assert_int_equal(gpt_bf16x2_from_floats_rne(1.0f, -2.0f), 0xc0003f80u);
    assert_int_equal(gpt_bf16x2_from_floats_rne(bits_f(0x3f808000u), bits_f(0x3f818000u)),
                     0x3f823f80u);
    assert_int_equal(gpt_bf16x2_from_floats_rne(INFINITY, 0.0f), 0x00007f80u);
}

/* ---- bf16 shadows: indexing and current spans ------------------------- */

static void test_shadow_index(void **state)
{
    (void)state;
    size_t off = 99;
    uintptr_t base = 0x10000;
    assert_int_equal(gpt_cuda_shadow_index(base, 4096, base, 1024, &off), 1);
    assert_int_equal(off, 0);
    assert_int_equal(gpt_cuda_shadow_index(base, 4096, base + 400, 924, &off), 1);
    assert_int_equal(off, 100);
    /* Another batch shape: a shorter range of the same allocation maps to
     * the same shadow at the same offset. */
    assert_int_equal(gpt_cuda_shadow_index(base, 4096, base + 400, 10, &off), 1);
    assert_int_equal(off, 100);
    assert_int_equal(gpt_cuda_shadow_index(base, 4096, base + 400, 925, &off), 0); /* past end */
    assert_int_equal(gpt_cuda_shadow_index(base, 4096, base - 4, 1, &off), 0);     /* before */
    assert_int_equal(gpt_cuda_shadow_index(base, 4096, base + 2, 1, &off), 0);     /* unaligned */
    assert_int_equal(gpt_cuda_shadow_index(base, 4096, base + 4096, 0, &off), 0);  /* outside */
    assert_int_equal(gpt_cuda_shadow_index(base, 4096, base + 4092, 1, &off), 1);
    assert_int_equal(off, 1023);
}

/* The spans against a bitmap: never more current than the reference (a
 * stale value is never read), exactly the reference while the set does not
 * overflow, sorted, disjoint and never touching. */
#define SPAN_N 1200

static void spans_check(const struct gpt_cuda_spans *s, const unsigned char *ref, int exact)
{
    unsigned char got[SPAN_N] = {0};
    for (size_t i = 0; i < s->n; i++) {
        assert_true(s->lo[i] < s->hi[i] && s->hi[i] <= SPAN_N);
        if (i > 0)
            assert_true(s->hi[i - 1] < s->lo[i]);
        for (size_t k = s->lo[i]; k < s->hi[i]; k++)
            got[k] = 1;
    }
    for (size_t k = 0; k < SPAN_N; k++) {
        assert_true(!got[k] || ref[k]);
        if (exact)
            assert_int_equal(got[k], ref[k]);
    }
}

static void test_spans(void **state)
{
    (void)state;
    static struct gpt_cuda_spans s;
    unsigned char ref[SPAN_N];
    for (int round = 0; round < 2; round++) {
        /* round 0: wide ranges (few spans, exact); round 1: narrow ranges
         * that overflow GPT_CUDA_SPANS_MAX (subset only). */
        gpt_cuda_spans_clear(&s);
        memset(ref, 0, sizeof(ref));
        uint32_t x = 12345u + (uint32_t)round;
        int overflowed = 0;
        for (int it = 0; it < 20000; it++) {
            x = x * 1664525u + 1013904223u;
            /* round 1: single elements 3 apart, so spans never merge. */
            size_t lo = round == 0 ? (x >> 8) % SPAN_N : ((x >> 8) % (SPAN_N / 3)) * 3;
            size_t len = round == 0 ? (x >> 20) % 200 : 1;
            size_t hi = lo + len > SPAN_N ? SPAN_N : lo + len;
            int add = round == 0 ? (x >> 3) & 1 : ((x >> 3) & 7) != 0;
            if (add)
                gpt_cuda_spans_add(&s, lo, hi);
            else
                gpt_cuda_spans_cut(&s, lo, hi);
            for (size_t k = lo; k < hi; k++)
                ref[k] = (unsigned char)add;
            if (s.n == GPT_CUDA_SPANS_MAX)
                overflowed = 1;
            spans_check(&s, ref, !overflowed);
            /* covers agrees with the spans. */
            size_t a = (x >> 4) % SPAN_N, b = a + (x >> 12) % 8;
            if (b > SPAN_N)
                b = SPAN_N;
            int all = 1;
            for (size_t k = a; k < b; k++)
                all &= ref[k];
            int cov = gpt_cuda_spans_covers(&s, a, b);
            if (!overflowed)
                assert_int_equal(cov, all); /* maximal spans: exact */
            else if (cov)
                assert_true(all);
        }
        if (round == 1)
            assert_true(overflowed);
    }
    /* Cut in the middle splits; add over the gap merges back. */
    gpt_cuda_spans_clear(&s);
    gpt_cuda_spans_add(&s, 0, 100);
    gpt_cuda_spans_cut(&s, 40, 60);
    assert_int_equal(s.n, 2);
    assert_true(gpt_cuda_spans_covers(&s, 0, 40) && gpt_cuda_spans_covers(&s, 60, 100));
    assert_false(gpt_cuda_spans_covers(&s, 39, 41));
    gpt_cuda_spans_add(&s, 40, 60);
    assert_int_equal(s.n, 1);
    assert_true(gpt_cuda_spans_covers(&s, 0, 100));
}

/* ---- bf16-only activations: the shadow state machine --------------------- */

/* A host model of one allocation as the backend drives it: each element's
 * fp32 and bf16 copies hold a version number, `truth` the version last
 * written. The protocol (cuda_shadow.cu's, and the plan recorder's) must
 * make every fp32 reader see truth in fp32 and every bf16 reader see it in
 * bf16, whatever mix of fp32, both and bf16-only writes came before, with
 * the span sets crowded or not. */
#define SHD_N 4096
struct shd_model {
    struct gpt_cuda_shd_state st;
    unsigned f32[SHD_N], bf[SHD_N], truth[SHD_N];
    unsigned version;
    size_t converted; /* elements converted bf16 -> fp32 */
};

static void shd_copy_back(struct shd_model *m, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++)
        m->f32[i] = m->bf[i];
    m->converted += hi - lo;
}

/* shd_ready_locked. */
static void shd_ready(struct shd_model *m)
{
    if (!gpt_cuda_shd_crowded(&m->st))
        return;
    for (size_t i = 0; i < m->st.own.n; i++)
        shd_copy_back(m, m->st.own.lo[i], m->st.own.hi[i]);
    gpt_cuda_shd_flushed(&m->st);
    assert_int_equal(m->st.own.n, 0);
}

/* shd_lock: the owner settles the foreign writes that wait. */
static void shd_owner(struct shd_model *m)
{
    if (!gpt_cuda_shd_pending(&m->st))
        return;
    for (size_t i = 0; i < m->st.own.n; i++)
        shd_copy_back(m, m->st.own.lo[i], m->st.own.hi[i]);
    gpt_cuda_shd_settle(&m->st);
    assert_false(gpt_cuda_shd_pending(&m->st));
}

static void shd_read_f32(struct shd_model *m, size_t lo, size_t hi, int learn)
{
    static size_t rlo[GPT_CUDA_SPANS_MAX], rhi[GPT_CUDA_SPANS_MAX];
    shd_ready(m);
    size_t k = gpt_cuda_shd_read_f32(&m->st, lo, hi, learn, rlo, rhi);
    for (size_t i = 0; i < k; i++) {
        assert_true(lo <= rlo[i] && rlo[i] < rhi[i] && rhi[i] <= hi);
        assert_true(i == 0 || rlo[i] >= rhi[i - 1]);
        shd_copy_back(m, rlo[i], rhi[i]);
    }
    assert_false(gpt_cuda_spans_meets(&m->st.own, lo, hi));
}

static void test_shd_state_model(void **state)
{
    (void)state;
    static struct shd_model m;
    for (int round = 0; round < 2; round++) {
        memset(&m, 0, sizeof(m));
        gpt_cuda_shd_clear(&m.st);
        uint32_t x = 777u + (uint32_t)round;
        int crowded_seen = 0, owned = 0, deferred = 0;
        for (int it = 0; it < 30000; it++) {
            x = x * 1664525u + 1013904223u;
            /* round 0: wide ranges; round 1: short ones far apart, which
             * crowd the span sets. */
            size_t lo = round == 0 ? (x >> 8) % SHD_N : ((x >> 8) % (SHD_N / 8)) * 8;
            size_t len = round == 0 ? 1 + (x >> 20) % 300 : 1 + (x >> 20) % 3;
            size_t hi = lo + len > SHD_N ? SHD_N : lo + len;
            unsigned op = (x >> 3) % 7;
            crowded_seen |= gpt_cuda_shd_crowded(&m.st);
            if (op == 6) {
                /* A collective's fp32 write, from the communication
                 * thread: it converts nothing, whatever the sets hold (a
                 * collective never writes a range held in bf16 only). */
                if (gpt_cuda_spans_meets(&m.st.own, lo, hi))
                    continue;
                size_t before = m.converted;
                deferred += !gpt_cuda_shd_wrote_foreign(&m.st, lo, hi);
                assert_int_equal(m.converted, before);
                m.version++;
                for (size_t i = lo; i < hi; i++)
                    m.f32[i] = m.truth[i] = m.version;
                continue;
            }
            shd_owner(&m); /* every owner op takes the lock first */
            if (op == 0) { /* fp32 write */
                shd_ready(&m);
                gpt_cuda_shd_wrote_f32(&m.st, lo, hi);
                m.version++;
                for (size_t i = lo; i < hi; i++)
                    m.f32[i] = m.truth[i] = m.version;
            } else if (op == 1) { /* fp32 and bf16 */
                shd_ready(&m);
                gpt_cuda_shd_wrote_both(&m.st, lo, hi);
                m.version++;
                for (size_t i = lo; i < hi; i++)
                    m.f32[i] = m.bf[i] = m.truth[i] = m.version;
            } else if (op == 2) { /* bf16 only, where allowed */
                shd_ready(&m);
                if (!gpt_cuda_shd_may_own(&m.st, lo, hi))
                    continue;
                gpt_cuda_shd_wrote_bf16(&m.st, lo, hi);
                owned++;
                m.version++;
                for (size_t i = lo; i < hi; i++)
                    m.bf[i] = m.truth[i] = m.version;
                assert_true(gpt_cuda_spans_covers(&m.st.cur, lo, hi));
                assert_true(gpt_cuda_spans_covers(&m.st.own, lo, hi));
            } else if (op == 3) { /* fp32 reader */
                shd_read_f32(&m, lo, hi, (x >> 11) & 1);
                for (size_t i = lo; i < hi; i++)
                    assert_int_equal(m.f32[i], m.truth[i]);
            } else if (op == 5) { /* either copy (gpt_cuda_shd_held) */
                if (gpt_cuda_shd_held(&m.st, lo, hi)) {
                    for (size_t i = lo; i < hi; i++)
                        assert_int_equal(m.bf[i], m.truth[i]);
                } else {
                    shd_read_f32(&m, lo, hi, 1);
                    for (size_t i = lo; i < hi; i++)
                        assert_int_equal(m.f32[i], m.truth[i]);
                }
            } else { /* bf16 reader: convert on a miss */
                if (!gpt_cuda_spans_covers(&m.st.cur, lo, hi)) {
                    shd_read_f32(&m, lo, hi, 1);
                    shd_ready(&m);
                    if (gpt_cuda_shd_read_bf16(&m.st, lo, hi))
                        for (size_t i = lo; i < hi; i++)
                            m.bf[i] = m.f32[i];
                }
                for (size_t i = lo; i < hi; i++)
                    assert_int_equal(m.bf[i], m.truth[i]);
            }
            /* own inside cur, always. */
            for (size_t i = 0; i < m.st.own.n; i++)
                assert_true(gpt_cuda_spans_covers(&m.st.cur, m.st.own.lo[i], m.st.own.hi[i]));
        }
        assert_true(owned > 100);
        assert_true(m.converted > 0);
        if (round == 1)
            assert_true(crowded_seen && deferred > 0);
    }
}

/* The learned rule: a range an fp32 reader had to convert back is written
 * in fp32 from then on; elsewhere bf16-only writes go on. */
static void test_shd_state_learns(void **state)
{
    (void)state;
    static struct gpt_cuda_shd_state s;
    size_t rlo[GPT_CUDA_SPANS_MAX], rhi[GPT_CUDA_SPANS_MAX];
    gpt_cuda_shd_clear(&s);
    assert_true(gpt_cuda_shd_may_own(&s, 0, 100));
    assert_false(gpt_cuda_shd_may_own(&s, 5, 5)); /* empty */
    gpt_cuda_shd_wrote_bf16(&s, 0, 100);
    assert_int_equal(gpt_cuda_shd_read_bf16(&s, 10, 20), 0); /* current: no conversion */
    /* A download of [90, 100): converted back, not learned. */
    assert_int_equal(gpt_cuda_shd_read_f32(&s, 90, 100, 0, rlo, rhi), 1);
    assert_true(rlo[0] == 90 && rhi[0] == 100);
    assert_true(gpt_cuda_shd_may_own(&s, 90, 100));
    gpt_cuda_shd_wrote_bf16(&s, 90, 100);
    /* An op's fp32 read of [50, 150): [50, 100) comes back, and is learned. */
    assert_int_equal(gpt_cuda_shd_read_f32(&s, 50, 150, 1, rlo, rhi), 1);
    assert_int_equal(rlo[0], 50);
    assert_int_equal(rhi[0], 100);
    assert_int_equal(gpt_cuda_shd_read_f32(&s, 50, 150, 1, rlo, rhi), 0); /* nothing owned now */
    assert_true(gpt_cuda_spans_covers(&s.cur, 0, 100));                   /* bf16 still current */
    assert_false(gpt_cuda_shd_may_own(&s, 60, 70));
    assert_false(gpt_cuda_shd_may_own(&s, 0, 51));
    assert_true(gpt_cuda_shd_may_own(&s, 0, 50));
    assert_true(gpt_cuda_shd_may_own(&s, 100, 200));
    /* An fp32 write makes both copies of [0, 10) plain fp32. */
    gpt_cuda_shd_wrote_f32(&s, 0, 10);
    assert_false(gpt_cuda_spans_meets(&s.own, 0, 10));
    assert_false(gpt_cuda_spans_meets(&s.cur, 0, 10));
    assert_true(gpt_cuda_spans_covers(&s.own, 10, 50));
    /* Writing both ends ownership there. */
    gpt_cuda_shd_wrote_both(&s, 20, 60);
    assert_true(gpt_cuda_spans_covers(&s.own, 10, 20));
    assert_false(gpt_cuda_spans_meets(&s.own, 20, 100));
    /* A flush hands every owned span back and learns it. */
    gpt_cuda_shd_flushed(&s);
    assert_int_equal(s.own.n, 0);
    assert_false(gpt_cuda_shd_may_own(&s, 15, 16));
    assert_false(gpt_cuda_shd_crowded(&s)); /* nothing owned: never crowded */
}

/* A reader that takes either copy (the residual stream's) reads bf16 only
 * where something is held in bf16 only and the copy is current: a range
 * current in both copies is read in fp32 (more exact), a stale one too
 * (after cu_f32 converts what is owned). */
static void test_shd_held(void **state)
{
    (void)state;
    static struct gpt_cuda_shd_state s;
    size_t rlo[GPT_CUDA_SPANS_MAX], rhi[GPT_CUDA_SPANS_MAX];
    gpt_cuda_shd_clear(&s);
    assert_false(gpt_cuda_shd_held(&s, 0, 100)); /* nothing current */
    gpt_cuda_shd_wrote_both(&s, 0, 100);
    assert_false(gpt_cuda_shd_held(&s, 0, 100)); /* current in both: fp32 */
    gpt_cuda_shd_wrote_bf16(&s, 40, 60);
    assert_true(gpt_cuda_shd_held(&s, 40, 60));
    assert_true(gpt_cuda_shd_held(&s, 0, 100)); /* partly owned, all current */
    assert_false(gpt_cuda_shd_held(&s, 0, 40));
    assert_false(gpt_cuda_shd_held(&s, 50, 50)); /* empty */
    gpt_cuda_shd_wrote_f32(&s, 90, 120);
    assert_false(gpt_cuda_shd_held(&s, 50, 100)); /* [90, 100) stale in bf16 */
    /* After an fp32 reader converted the owned part back: fp32 again. */
    assert_int_equal(gpt_cuda_shd_read_f32(&s, 0, 100, 1, rlo, rhi), 1);
    assert_true(rlo[0] == 40 && rhi[0] == 60);
    assert_false(gpt_cuda_shd_held(&s, 40, 60));
    assert_true(gpt_cuda_spans_covers(&s.cur, 40, 60));
}

/* ---- cost model ------------------------------------------------------------ */

static void test_roofline(void **state)
{
    (void)state;
    /* A GEMM of GPT-2's MLP (bf16, tensor cores) is compute-bound. */
    struct gpt_cuda_kernel k = {.name = "gemm", .cls = GPT_KC_GEMM, .unit = GPT_KU_TC_BF16};
    k.flops = 2.0 * 3072 * 16384 * 768;
    k.bytes = 2.0 * (3072.0 * 768 + 16384.0 * 768) + 4.0 * 3072 * 16384;
    assert_true(fabs(gpt_cuda_kernel_seconds(&k) - k.flops / 700e12) < 1e-12);
    /* The same FLOPs on TF32 take twice as long, on CUDA cores 700/60. */
    k.unit = GPT_KU_TC_TF32;
    assert_true(fabs(gpt_cuda_kernel_seconds(&k) - k.flops / 350e12) < 1e-12);
    k.unit = GPT_KU_FP32;
    assert_true(fabs(gpt_cuda_kernel_seconds(&k) - k.flops / 60e12) < 1e-12);
    /* The tensor-core flash kernels at their own (assumed) rates. */
    k.unit = GPT_KU_TC_FLASH_FWD;
    assert_true(fabs(gpt_cuda_kernel_seconds(&k) - k.flops / 220e12) < 1e-12);
    k.unit = GPT_KU_TC_FLASH_BWD;
    assert_true(fabs(gpt_cuda_kernel_seconds(&k) - k.flops / 170e12) < 1e-12);
    /* An element-wise kernel is memory-bound at 4 TB/s. */
    struct gpt_cuda_kernel e = {.name = "gelu", .cls = GPT_KC_ELT, .unit = GPT_KU_FP32};
    e.flops = 1e6;
    e.bytes = 4e9;
    assert_true(fabs(gpt_cuda_kernel_seconds(&e) - 1e-3) < 1e-12);
    assert_string_equal(gpt_cuda_kclass_name(GPT_KC_GEMM), "gemm");
    assert_string_equal(gpt_cuda_kclass_name(GPT_KC_ATTN), "attn");
    assert_string_equal(gpt_cuda_kclass_name(GPT_KC_COUNT), "?");
}

static void test_flash_pairs(void **state)
{
    (void)state;
    /* Causal: the visited tiles cover the lower triangle and its diagonal
     * tiles, so between T^2/2 and T^2/2 plus a tile row per tile. */
    size_t Ts[] = {64, 100, 1024, 4096};
    for (size_t i = 0; i < sizeof(Ts) / sizeof(Ts[0]); i++) {
        double T = (double)Ts[i];
        double q = gpt_cuda_plan_flash_pairs(Ts[i], 1), kk = gpt_cuda_plan_flash_pairs(Ts[i], 0);
        assert_true(q >= T * (T + 1) / 2);
        assert_true(kk >= T * (T + 1) / 2);
        double tile = (double)GPT_CUDA_FLASH_BR * GPT_CUDA_FLASH_BC;
        double ntiles = ceil(T / GPT_CUDA_FLASH_BR);
        assert_true(q <= T * T / 2 + ntiles * (GPT_CUDA_FLASH_BR / GPT_CUDA_FLASH_BC + 1) * tile);
        assert_true(kk <= T * T / 2 + ntiles * (GPT_CUDA_FLASH_BR / GPT_CUDA_FLASH_BC + 1) * tile);
    }
    /* T = 1024: query tiles of 64 visit (own0 + 64) / 32 key tiles. */
    double want = 0;
    for (size_t t = 0; t < 16; t++)
        want += (double)((t * 64 + 64) / 32) * 32 * 64;
    assert_true(gpt_cuda_plan_flash_pairs(1024, 1) == want);
}

/* The DDP all-reduce model: the ring's time (latency per step plus
 * 2 (w - 1) / w of the bytes at the link's achievable rate), nothing for a
 * world of one, the link table by name, and buckets reduced back to back,
 * none before it is ready. */
static void test_ddp_model(void **state)
{
    (void)state;
    const struct gpt_link_spec *nv = gpt_link_find("nvlink"), *ib = gpt_link_find("ib400");
    const struct gpt_link_spec *eth = gpt_link_find("eth100");
    assert_non_null(nv);
    assert_non_null(ib);
    assert_non_null(eth);
    assert_null(gpt_link_find("pcie"));
    assert_ptr_equal(gpt_link_get(GPT_LINK_IB400), ib);
    assert_true(nv->bytes_per_s > ib->bytes_per_s && ib->bytes_per_s > eth->bytes_per_s);
    assert_true(gpt_ddp_allreduce_seconds(nv, 1, 1e9) == 0);
    double want = 14 * nv->hop_s + 14.0 / 8 * 1e9 / (nv->bytes_per_s * GPT_LINK_EFFICIENCY);
    assert_true(fabs(gpt_ddp_allreduce_seconds(nv, 8, 1e9) - want) < 1e-12);
    /* bf16 halves the bandwidth term, not the latency. */
    double f32 = gpt_ddp_allreduce_seconds(ib, 16, 4e8),
           b16 = gpt_ddp_allreduce_seconds(ib, 16, 2e8);
    assert_true(fabs((f32 - 30 * ib->hop_s) - 2 * (b16 - 30 * ib->hop_s)) < 1e-12);
    /* Latency only: three buckets of no bytes, 2 (w-1) hops each. */
    struct gpt_ddp_bucket b[3] = {{0.001, 0}, {0.002, 0}, {0.010, 0}};
    assert_true(fabs(gpt_ddp_comm_end_s(b, 3, eth, 2) - (0.010 + 2 * eth->hop_s)) < 1e-12);
    /* A bucket longer than the gap to the next delays it. */
    double one = gpt_ddp_allreduce_seconds(eth, 4, 1e8);
    struct gpt_ddp_bucket c[2] = {{0, 1e8}, {one / 2, 1e8}};
    assert_true(fabs(gpt_ddp_comm_end_s(c, 2, eth, 4) - 2 * one) < 1e-12);
    assert_true(gpt_ddp_comm_end_s(c, 0, eth, 4) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grid),
        cmocka_unit_test(test_sumsq_blocks),
        cmocka_unit_test(test_colsum_splits),
        cmocka_unit_test(test_ln_chunks),
        cmocka_unit_test(test_bgrad_direct),
        cmocka_unit_test(test_lt_tune),
        cmocka_unit_test(test_lnb_blocks),
        cmocka_unit_test(test_xent_stage),
        cmocka_unit_test(test_adamw_table),
        cmocka_unit_test(test_buckets),
        cmocka_unit_test(test_pad_plan),
        cmocka_unit_test(test_attn_plan_gpt2),
        cmocka_unit_test(test_att_floats),
        cmocka_unit_test(test_att_floats_monotone),
        cmocka_unit_test(test_attn_plan_limits),
        cmocka_unit_test(test_attn_plan_invariants),
        cmocka_unit_test(test_flash_span),
        cmocka_unit_test(test_bf16_rne),
        cmocka_unit_test(test_shadow_index),
        cmocka_unit_test(test_spans),
        cmocka_unit_test(test_shd_state_model),
        cmocka_unit_test(test_shd_state_learns),
        cmocka_unit_test(test_shd_held),
        cmocka_unit_test(test_ddp_model),
        cmocka_unit_test(test_roofline),
        cmocka_unit_test(test_flash_pairs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
