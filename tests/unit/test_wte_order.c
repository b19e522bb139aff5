/*
 * test_wte_order: the passes of the CUDA token-embedding gradient
 * (engine/ops/cuda/cuda_kernels.cu, cuk_encoder_backward), emulated in C
 * with the kernels' own functions (engine/include/wte_order.h): the chunk
 * pass (each chunk sorted by counting), the count pass (a block per
 * position chunk and slice of sorted chunks, its shares added as the
 * atomics would) and the place pass. Checked against a naive stable sort
 * by (token, position) for random tokens and B*T around and between the
 * chunk and slice sizes (the last chunk partly filled): the order is that
 * permutation, and each token's first position has earlier 0 and its
 * segment [rank, rank + same) holds exactly its positions, ascending. The
 * sum pass's order of adds (each token's rows in position order, then one
 * add to dwte) gives the bits of the sequential sum the kernels always
 * gave. No GPU needed: the PTX is tested by tests/gpu/test_gpu_ops.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "wte_order.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rng_below(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32) % n;
}

struct order {
    int *order, *rank, *earlier, *same;
};

/* The chunk, count and place passes, block by block and thread by thread
 * as the kernels run them (the count pass's atomics become plain adds:
 * integers, so any order gives the same sums). */
static struct order emulate(const int *inp, int BT)
{
    struct order o;
    o.order = malloc((size_t)BT * sizeof(int));
    o.rank = malloc((size_t)BT * sizeof(int));
    o.earlier = malloc((size_t)BT * sizeof(int));
    o.same = malloc((size_t)BT * sizeof(int));
    assert_true(o.order && o.rank && o.earlier && o.same);
    int *sorted = o.order; /* aliased, as in the kernels */
    for (int p = 0; p < BT; p++)
        sorted[p] = -7;
    int chunks = (BT + GPT_WTE_CHUNK - 1) / GPT_WTE_CHUNK;
    for (int b = 0; b < chunks; b++) {
        int tok[GPT_WTE_CHUNK];
        int base = b * GPT_WTE_CHUNK;
        int n = BT - base < GPT_WTE_CHUNK ? BT - base : GPT_WTE_CHUNK;
        for (int i = 0; i < n; i++)
            tok[i] = inp[base + i];
        for (int i = 0; i < n; i++) {
            struct gpt_wte_counts k = gpt_wte_chunk_counts(tok, n, i);
            assert_true(k.rank >= 0 && k.rank < n);
            assert_int_equal(sorted[base + k.rank], -7); /* one writer per slot */
            sorted[base + k.rank] = tok[i];
            o.rank[base + i] = k.rank;
            o.earlier[base + i] = k.earlier;
            o.same[base + i] = k.same;
        }
        for (int i = 1; i < n; i++)
            assert_true(sorted[base + i - 1] <= sorted[base + i]);
    }
    int slices = (chunks + GPT_WTE_SLICE - 1) / GPT_WTE_SLICE;
    static int a[GPT_WTE_SLICE * GPT_WTE_CHUNK];
    for (int y = 0; chunks > 1 && y < slices; y++) {
        int k0 = y * GPT_WTE_SLICE, a0 = k0 * GPT_WTE_CHUNK;
        int kn = chunks - k0 < GPT_WTE_SLICE ? chunks - k0 : GPT_WTE_SLICE;
        int an = BT - a0 < kn * GPT_WTE_CHUNK ? BT - a0 : kn * GPT_WTE_CHUNK;
        memset(a, 0x55, sizeof(a)); /* stale shared memory past an */
        memcpy(a, sorted + a0, (size_t)an * sizeof(int));
        for (int own = 0; own < chunks; own++)
            for (int t = 0; t < GPT_WTE_CHUNK; t++) {
                int p = own * GPT_WTE_CHUNK + t;
                if (p >= BT)
                    break;
                struct gpt_wte_counts k = {0, 0, 0};
                for (int j = 0; j < kn; j++) {
                    int n = an - j * GPT_WTE_CHUNK < GPT_WTE_CHUNK ? an - j * GPT_WTE_CHUNK
                                                                   : GPT_WTE_CHUNK;
                    if (k0 + j != own)
                        gpt_wte_chunk_add(&k, a + j * GPT_WTE_CHUNK, n, inp[p], k0 + j < own);
                }
                o.rank[p] += k.rank;
                o.earlier[p] += k.earlier;
                o.same[p] += k.same;
            }
    }
    for (int p = 0; p < BT; p++)
        o.order[p] = -1;
    for (int p = 0; p < BT; p++) {
        assert_true(o.rank[p] >= 0 && o.rank[p] < BT);
        assert_int_equal(o.order[o.rank[p]], -1); /* a permutation */
        o.order[o.rank[p]] = p;
    }
    return o;
}

static void order_free(struct order *o)
{
    free(o->order);
    free(o->rank);
    free(o->earlier);
    free(o->same);
}

static const int *cmp_tok;

static int cmp_pos(const void *x, const void *y)
{
    int p = *(const int *)x, q = *(const int *)y;
    if (cmp_tok[p] != cmp_tok[q])
        return cmp_tok[p] < cmp_tok[q] ? -1 : 1;
    return p < q ? -1 : p > q;
}

/* The emulated passes against a naive sort, and the sums in the order the
 * sum pass adds them against the sequential sum, bit for bit. */
static void check_tokens(const int *inp, int BT)
{
    struct order o = emulate(inp, BT);
    int *ref = malloc((size_t)BT * sizeof(int));
    assert_non_null(ref);
    for (int p = 0; p < BT; p++)
        ref[p] = p;
    cmp_tok = inp;
    qsort(ref, (size_t)BT, sizeof(int), cmp_pos);
    assert_memory_equal(o.order, ref, (size_t)BT * sizeof(int));
    for (int i = 0; i < BT;) { /* each token's run in the sorted order */
        int v = inp[ref[i]], n = 1;
        while (i + n < BT && inp[ref[i + n]] == v)
            n++;
        for (int k = 0; k < n; k++) {
            int p = ref[i + k];
            assert_int_equal(o.rank[p], i + k);
            assert_int_equal(o.earlier[p], k);
            assert_int_equal(o.same[p], n);
        }
        i += n;
    }

    /* The sum pass: each token's sum over its segment in order, at its
     * first position (then added to dwte once), against the sum of the
     * rows holding it in position order, from the naive sort. */
    enum { C = 3 };
    size_t n = (size_t)BT * C;
    float *dout = malloc(n * sizeof(float)), *got = calloc(n, sizeof(float)),
          *want = calloc(n, sizeof(float));
    assert_true(dout && got && want);
    for (size_t i = 0; i < n; i++)
        dout[i] = (float)((int)rng_below(2000001) - 1000000) * 1e-6f * (1.0f + (float)(i % 7));
    for (int p = 0; p < BT; p++) {
        if (o.earlier[p] != 0)
            continue;
        for (int c = 0; c < C; c++) {
            float acc = 0.0f;
            for (int k = 0; k < o.same[p]; k++)
                acc += dout[(size_t)o.order[o.rank[p] + k] * C + c];
            got[(size_t)p * C + c] = acc;
        }
    }
    for (int i = 0; i < BT;) {
        int v = inp[ref[i]], m = 0;
        for (int c = 0; c < C; c++) {
            float acc = 0.0f;
            for (m = 0; i + m < BT && inp[ref[i + m]] == v; m++)
                acc += dout[(size_t)ref[i + m] * C + c];
            want[(size_t)ref[i] * C + c] = acc;
        }
        i += m;
    }
    assert_memory_equal(got, want, n * sizeof(float));
    free(got);
    free(want);
    free(dout);
    free(ref);
    order_free(&o);
}

/* B*T around the chunk (256) and slice (8 chunks) sizes, with the last
 * chunk partly filled, for tokens from vocabularies of 1 (one run over
 * everything), 3, 64 and 50257 (mostly once each). */
static void test_random(void **state)
{
    (void)state;
    const int bts[] = {1, 2, 7, 255, 256, 257, 1000, 2047, 2048, 2049, 4097, 5000, 16384};
    const uint32_t vocab[] = {1, 3, 64, 50257};
    for (size_t b = 0; b < sizeof(bts) / sizeof(bts[0]); b++)
        for (size_t w = 0; w < sizeof(vocab) / sizeof(vocab[0]); w++) {
            int BT = bts[b];
            int *inp = malloc((size_t)BT * sizeof(int));
            assert_non_null(inp);
            for (int p = 0; p < BT; p++)
                inp[p] = (int)rng_below(vocab[w]);
            check_tokens(inp, BT);
            free(inp);
        }
}

/* One token at hundreds of positions (scattered and in one long run
 * across chunk borders), the rest distinct; tokens up to INT_MAX. */
static void test_runs(void **state)
{
    (void)state;
    const int BT = 3 * 2048 + 77;
    int *inp = malloc((size_t)BT * sizeof(int));
    assert_non_null(inp);
    for (int p = 0; p < BT; p++)
        inp[p] = rng_below(4) == 0 ? 2 : 1000 + p;
    check_tokens(inp, BT);
    for (int p = 0; p < BT; p++)
        inp[p] = p >= 200 && p < 1500 ? 5 : (p & 1 ? 0x7fffffff - p : p);
    check_tokens(inp, BT);
    for (int p = 0; p < BT; p++) /* descending: every chunk's share is all-before or all-after */
        inp[p] = BT - p;
    check_tokens(inp, BT);
    free(inp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
