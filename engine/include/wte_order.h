/*
 * wte_order: the stable order of the positions by (token, position) that
 * the CUDA token-embedding gradient sums through
 * (engine/ops/cuda/cuda_kernels.cu, cuk_encoder_backward), in plain C. The
 * kernels include this header and nvcc compiles the inline functions below
 * for the device; the CPU emulation test (tests/unit/test_wte_order.c) runs
 * the kernels' passes in C with the same functions and checks the order
 * and each token's segment against a naive sort, so the rank logic is
 * tested on machines without a GPU.
 *
 * A position p holding token v has rank[p] = the number of positions q
 * with (tok[q], q) < (v, p): a permutation of 0 .. BT - 1, and the
 * positions of one token sit in increasing position order in a segment
 * starting at its first position's rank. The ranks come from chunks of
 * GPT_WTE_CHUNK positions:
 *   chunk pass    one block per chunk sorts its tokens in shared memory by
 *                 counting (rank inside the chunk: GPT_WTE_CHUNK compares
 *                 per position), writes them sorted to scratch and starts
 *                 each position's counts with the chunk's share;
 *   count pass    a block per (position chunk, slice of GPT_WTE_SLICE sorted
 *                 chunks) stages the slice in shared memory and adds, for
 *                 each other chunk, two binary searches' worth to the
 *                 position's counts (integer atomics: exact, so the order
 *                 does not matter).
 * That is BT (GPT_WTE_CHUNK + 2 (log2(GPT_WTE_CHUNK) + 1) BT / GPT_WTE_CHUNK)
 * steps instead of the BT^2 compares of comparing every pair (268 M at
 * B*T = 16384; the links pass that did so took ~100 us on an H200).
 *
 * Pure: no allocation, no globals; any thread.
 */
#ifndef GPT_WTE_ORDER_H
#define GPT_WTE_ORDER_H

#ifdef __CUDACC__
#define GPT_WTE_FN static __host__ __device__ __forceinline__
#else
#define GPT_WTE_FN static inline
#endif

#define GPT_WTE_CHUNK 256 /* positions per chunk: the chunk and count passes' block */
#define GPT_WTE_SLICE 8   /* sorted chunks per count block (8 KiB of shared memory) */

/* A position's counts: rank (positions ordered before it), earlier
 * (positions before it holding its token: 0 at the token's first) and
 * same (positions holding its token, itself included). */
struct gpt_wte_counts {
    int rank, earlier, same;
};

/* Position i of a chunk of n tokens tok[0 .. n): its counts within the
 * chunk. */
GPT_WTE_FN struct gpt_wte_counts gpt_wte_chunk_counts(const int *tok, int n, int i)
{
    struct gpt_wte_counts k = {0, 0, 0};
    int v = tok[i];
    for (int j = 0; j < n; j++) {
        int t = tok[j];
        k.rank += t < v || (t == v && j < i);
        k.earlier += t == v && j < i;
        k.same += t == v;
    }
    return k;
}

/* The number of a[0 .. n) (ascending) below v, or with le at most v. */
GPT_WTE_FN int gpt_wte_bound(const int *a, int n, int v, int le)
{
    int first = 0;
    while (n > 0) {
        int half = n / 2, t = a[first + half];
        if (t < v || (le && t == v)) {
            first += half + 1;
            n -= half + 1;
        } else {
            n = half;
        }
    }
    return first;
}

/* Adds the share of a sorted chunk a[0 .. n) of other positions to the
 * counts of a position holding v: all before it (before != 0; their v
 * count as ranked first) or all after it. */
GPT_WTE_FN void gpt_wte_chunk_add(struct gpt_wte_counts *k, const int *a, int n, int v, int before)
{
    int lo = gpt_wte_bound(a, n, v, 0), hi = gpt_wte_bound(a, n, v, 1);
    k->rank += before ? hi : lo;
    k->earlier += before ? hi - lo : 0;
    k->same += hi - lo;
}

#endif
