/*
 * test_cuda_plan: the host-side arithmetic of the CUDA backend and the NCCL
 * communicator (engine/ops/cuda_plan.c), which runs everywhere: launch
 * grids, the deterministic reduction splits, bucket boundaries, and the
 * padding plan for uneven reduce-scatter/all-gather, checked by simulating
 * NCCL's equal-count collectives on host arrays for worlds 1-9 and sizes
 * around multiples of the world (including n < world).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm.h"
#include "cuda_plan.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grid),          cmocka_unit_test(test_sumsq_blocks),
        cmocka_unit_test(test_colsum_splits), cmocka_unit_test(test_buckets),
        cmocka_unit_test(test_pad_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
