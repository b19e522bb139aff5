/*
 * flash_tc: the tiling and the softmax recurrence of the tensor-core flash
 * attention kernels (engine/ops/cuda/cuda_attention.cu: bf16 operands,
 * mma.sync m16n8k16 with fp32 accumulation, head sizes 32 to 128), in
 * plain C. The kernels include this header and nvcc compiles the inline
 * functions below for the device; the CPU emulation test
 * (tests/unit/test_flash_tc.c) runs the kernels' blocked algorithm in C with
 * the same functions and checks it against naive attention, so the
 * tiling, the causal tile skipping and the online softmax are tested on
 * machines without a GPU. The cost model (bench_gpu_train --plan) counts
 * the kernels' work with gpt_flash_tc_pairs.
 *
 * Tiles (all rows of one (b, h) pair, T rows in all):
 *   forward       a block owns FWD_BR = 128 query rows (FlashAttention-2's
 *                 block for head dim 64), 16 per warp (one m16 row block
 *                 of the mma) over 8 warps, and streams key tiles of
 *                 BC = 64 rows through shared memory (double-buffered
 *                 cp.async): each K/V tile serves 128 rows;
 *   backward      one fused pass (FlashAttention-2's): a block owns BR = 64
 *                 key rows, 16 per warp over 4 warps, and streams query
 *                 tiles of gpt_flash_tc_bcq(hs) rows (64 up to hs 64, 32
 *                 above: the two fp32 accumulators dK and dV already take
 *                 2 hs / 2 registers per thread). Per query tile it
 *                 recomputes S and P once, takes the rows' D = dO . O
 *                 from the tile's dO and O (bf16, 2 hs FLOPs per row:
 *                 ~0.3% of the tile's products), accumulates dK and dV in
 *                 registers and adds the tile's dQ share dS K to dq in
 *                 global memory.
 * Causal skipping: a query block visits key tiles 0 .. the one holding
 * its last row; a key block visits query tiles from the one holding its
 * first key to the end. Only tiles that straddle the diagonal (or T) are
 * masked element by element, and inside them each warp skips the products
 * of the 16 x 16 (rows, keys) groups that hold no valid pair
 * (gpt_flash_tc_live): in a diagonal 64 x 64 tile 6 of its 16 groups.
 *
 * The default backward (attention_backward ds, below) runs the fused pass
 * without its ordered dQ shares: each dS^T tile goes to global memory,
 * and a second pass sums them into dQ in the same order.
 *
 * Two passes instead (attention_backward twopass, the default of the first
 * three H200 runs, which timed it against the fused pass): a dQ pass with the forward's
 * blocks (128 query rows, key tiles of BC) that takes D once per row,
 * keeps it in the backward's scratch and accumulates dq in registers,
 * then the dK/dV pass above without the dQ share, reading D like the
 * logsumexp. S and dP are computed in both (18 hs FLOPs per pair in all,
 * the fused pass 14), but no block waits on another.
 *
 * dQ without atomics, in a fixed order: the key blocks that visit query
 * tile qt (0 .. gpt_flash_tc_dq_last_kb) add their shares in descending
 * key-block order, the diagonal block first (it stores, the others load,
 * add and store, the last one, key block 0, also writes the bf16 copy).
 * A per-(b, h, query tile) counter in the backward's scratch says whose
 * turn it is (gpt_flash_tc_dq_turn). Key block kb reaches query tile qt
 * as its (qt - first + 1)-th tile and kb + 1 one tile earlier, so with
 * the blocks of a head resident together no block waits; a block only
 * waits on blocks of lower x (key block kb + 1 has x = k_tiles - 2 - kb),
 * which the hardware schedules first, so the order cannot deadlock. dq
 * gets the same bits on every run, like dk and dv.
 *
 * Pure: no allocation, no globals; any thread.
 */
#ifndef GPT_FLASH_TC_H
#define GPT_FLASH_TC_H

#include <math.h>
#include <stddef.h>
#include <string.h>

#ifdef __CUDACC__
#define GPT_FLASH_FN static __host__ __device__ __forceinline__
#else
#define GPT_FLASH_FN static inline
#endif

#define GPT_FLASH_TC_WARPS 4  /* warps per backward block */
#define GPT_FLASH_TC_WROWS 16 /* rows each warp owns: one m16 block */
#define GPT_FLASH_TC_BR    (GPT_FLASH_TC_WARPS * GPT_FLASH_TC_WROWS) /* 64 key rows */
#define GPT_FLASH_TC_BC    64 /* key rows per streamed tile (forward) */
/* Warps per forward block and the query rows it owns: 8 warps of one m16
 * block each keep every warp's code and registers as with 4 (the Q
 * fragments, S over 64 keys and O stay in registers up to hs 128, no
 * spills; FA2's 4 warps of 32 rows would double S and O per thread), and
 * give FlashAttention-2's 128-row block, so a K/V tile is fetched and
 * staged once per 128 query rows. */
#define GPT_FLASH_TC_FWD_WARPS 8
#define GPT_FLASH_TC_FWD_BR    (GPT_FLASH_TC_FWD_WARPS * GPT_FLASH_TC_WROWS) /* 128 */
/* bf16 elements of padding per shared-memory row: the row stride becomes
 * 2 hs + 16 bytes, so the eight 16-byte rows of one ldmatrix phase start
 * 4 banks apart and never conflict. */
#define GPT_FLASH_TC_PAD 8
#define GPT_FLASH_LOG2E  1.4426950408889634f

/* The backward's variants (cuda_attention.cu), as trainer.attention_backward names
 * them: "twopass" (unset: the default; a dQ pass, then dK/dV) is the
 * variant the last GPU run (tests/gpu/runs/, or the third H200 run while
 * that folder holds none) passed against the CPU backend and in training,
 * so it stays the default until a committed run passes another. "ds"
 * runs the fused pass's dK/dV with its dS^T tiles stored to global
 * memory in place of the ordered dQ shares, then a dQ pass that sums
 * them: the fused pass's bits and FLOPs without its waits (below; in
 * chunks of (b, h) pairs where the tiles of all would take more than
 * GPT_FLASH_TC_DS_MAX, twopass where one pair's would); the cost model
 * puts it at 26.4 ms a B=16 step against twopass's 28.2. "twopass4" (the same bits, its
 * dK/dV pass at four blocks per SM instead of three up to hs 64),
 * "fused" (one pass, dQ shares added in a fixed turn order), "split"
 * (the fused pass in two query parts, three blocks per SM up to hs 64;
 * the fused pass's bits) and "wg" (twopass with both passes on wgmma,
 * sm_90a, head size 64; flash_wg.h); "cudnn" (cuDNN's fused attention
 * graph, cuda_dnn_attn.h, where libcudnn.so.9 loads and takes the shape;
 * else the default). -1 for any other value: the caller
 * says so and takes the default. Host only. */
enum gpt_flash_bwd {
    GPT_FLASH_BWD_FUSED,
    GPT_FLASH_BWD_SPLIT,
    GPT_FLASH_BWD_TWOPASS,
    GPT_FLASH_BWD_TWOPASS4,
    GPT_FLASH_BWD_WG,
    GPT_FLASH_BWD_DS,
    GPT_FLASH_BWD_CUDNN
};
#define GPT_FLASH_BWD_DEFAULT GPT_FLASH_BWD_TWOPASS

static inline int gpt_flash_tc_bwd_variant(const char *env)
{
    if (!env)
        return GPT_FLASH_BWD_DEFAULT;
    if (strcmp(env, "fused") == 0)
        return GPT_FLASH_BWD_FUSED;
    if (strcmp(env, "split") == 0)
        return GPT_FLASH_BWD_SPLIT;
    if (strcmp(env, "twopass") == 0)
        return GPT_FLASH_BWD_TWOPASS;
    if (strcmp(env, "twopass4") == 0)
        return GPT_FLASH_BWD_TWOPASS4;
    if (strcmp(env, "wg") == 0)
        return GPT_FLASH_BWD_WG;
    if (strcmp(env, "ds") == 0)
        return GPT_FLASH_BWD_DS;
    if (strcmp(env, "cudnn") == 0)
        return GPT_FLASH_BWD_CUDNN;
    return -1;
}

/* The variant a trainer.attention_backward value runs (gpt_config.h's enum
 * gpt_attn_bwd: 0 auto, else the variant + 1), for the backend, the cost
 * model and the benchmark's rows. */
static inline enum gpt_flash_bwd gpt_flash_tc_bwd_of_spec(int spec)
{
    return spec > 0 && spec <= GPT_FLASH_BWD_CUDNN + 1 ? (enum gpt_flash_bwd)(spec - 1)
                                                       : GPT_FLASH_BWD_DEFAULT;
}

/* 1 for the variants that run the backward in two passes (a dQ pass,
 * then dK/dV): twopass, twopass4 and wg. */
static inline int gpt_flash_tc_bwd_twopass(enum gpt_flash_bwd v)
{
    return v == GPT_FLASH_BWD_TWOPASS || v == GPT_FLASH_BWD_TWOPASS4 || v == GPT_FLASH_BWD_WG;
}

/* The forward's variants, as trainer.attention_forward names them: GPT_FLASH_FWD_M16
 * (unset or "m16": 8 warps of 16 rows, 64-key steps), GPT_FLASH_FWD_M32
 * ("m32": 4 warps of two m16 tiles; the same bits) and GPT_FLASH_FWD_K32
 * ("k32": 8 warps of 16 rows, each 64-key tile in two online-softmax steps
 * of 32 keys, so that three blocks fit an SM's registers); the variants
 * only up to head size 64. GPT_FLASH_FWD_WG ("wg"): two warpgroups of 64
 * rows on wgmma (sm_90a, head size 64 only; flash_wg.h). GPT_FLASH_FWD_CUDNN
 * ("cudnn"): cuDNN's fused attention graph where it loads and takes the
 * shape, else m16. -1 for any other value. Host only. */
enum gpt_flash_fwd {
    GPT_FLASH_FWD_M16 = 1,
    GPT_FLASH_FWD_M32 = 2,
    GPT_FLASH_FWD_K32 = 3,
    GPT_FLASH_FWD_WG = 4,
    GPT_FLASH_FWD_CUDNN = 5
};
#define GPT_FLASH_FWD_DEFAULT GPT_FLASH_FWD_M16

/* The variant a trainer.attention_forward value runs (enum gpt_attn_fwd:
 * 0 auto, else the variant itself). */
static inline int gpt_flash_tc_fwd_of_spec(int spec)
{
    return spec > 0 && spec <= GPT_FLASH_FWD_CUDNN ? spec : GPT_FLASH_FWD_DEFAULT;
}

static inline int gpt_flash_tc_fwd_variant(const char *env)
{
    if (!env)
        return GPT_FLASH_FWD_DEFAULT;
    if (strcmp(env, "m16") == 0)
        return GPT_FLASH_FWD_M16;
    if (strcmp(env, "m32") == 0)
        return GPT_FLASH_FWD_M32;
    if (strcmp(env, "k32") == 0)
        return GPT_FLASH_FWD_K32;
    if (strcmp(env, "wg") == 0)
        return GPT_FLASH_FWD_WG;
    if (strcmp(env, "cudnn") == 0)
        return GPT_FLASH_FWD_CUDNN;
    return -1;
}

/* The names gpt_flash_tc_fwd_variant and _bwd_variant parse, of a
 * variant; "?" for a value that is none. Host only. */
static inline const char *gpt_flash_tc_fwd_name(int v)
{
    static const char *const names[] = {"?", "m16", "m32", "k32", "wg", "cudnn"};
    return v >= GPT_FLASH_FWD_M16 && v <= GPT_FLASH_FWD_CUDNN ? names[v] : "?";
}

static inline const char *gpt_flash_tc_bwd_name(enum gpt_flash_bwd v)
{
    static const char *const names[] = {"fused", "split", "twopass", "twopass4",
                                        "wg",    "ds",    "cudnn"};
    return (int)v >= 0 && v <= GPT_FLASH_BWD_CUDNN ? names[v] : "?";
}

/* The head sizes the tensor-core kernels are compiled for: 32, 64, 96 and
 * 128 (multiples of the 16-wide k step and of the 32-element bank period
 * that keeps the padded rows conflict-free). */
GPT_FLASH_FN int gpt_flash_tc_applies(size_t hs)
{
    return hs == 32 || hs == 64 || hs == 96 || hs == 128;
}

/* Query rows per streamed tile of the dk/dv kernel. */
GPT_FLASH_FN int gpt_flash_tc_bcq(size_t hs)
{
    return hs > 64 ? 32 : 64;
}

/* Key tiles [*ret_first, *ret_end) (BC rows each) that the forward's
 * query block owning rows [q0, q0 + FWD_BR) visits: keys past its last
 * row (or T) never enter. */
GPT_FLASH_FN void gpt_flash_tc_kv_span(int q0, int T, int *ret_first, int *ret_end)
{
    int last = q0 + GPT_FLASH_TC_FWD_BR < T ? q0 + GPT_FLASH_TC_FWD_BR : T; /* one past */
    *ret_first = 0;
    *ret_end = (last + GPT_FLASH_TC_BC - 1) / GPT_FLASH_TC_BC;
}

/* Query tiles [*ret_first, *ret_end) (bcq rows each) that the key block
 * owning keys [k0, k0 + BR) visits: queries before k0 never see its keys. */
GPT_FLASH_FN void gpt_flash_tc_q_span(int k0, int T, int bcq, int *ret_first, int *ret_end)
{
    *ret_first = k0 / bcq;
    *ret_end = (T + bcq - 1) / bcq;
}

/* 1 when the (query rows [i0, i0 + ni)) x (keys [j0, j0 + nj)) sub-tile
 * has a masked pair: a key after a query (causal) or a row at or past T.
 * 0 means every pair is valid and the kernel skips the per-element mask. */
GPT_FLASH_FN int gpt_flash_tc_needs_mask(int i0, int ni, int j0, int nj, int T)
{
    return j0 + nj - 1 > i0 || i0 + ni > T || j0 + nj > T;
}

/* 1 when the 16 x 16 group of query rows [i0, i0 + 16) and keys
 * [j0, j0 + 16) holds a valid pair (a key at or before a query, both
 * below T): the kernels run its products; 0 and they skip them (its P and
 * dS are zero: the tile's mask covers every pair in it). */
GPT_FLASH_FN int gpt_flash_tc_live(int i0, int j0, int T)
{
    return i0 < T && j0 < T && j0 <= i0 + 15;
}

/* One step of the online softmax (scores in log2 units): the running row
 * maximum m_old meets the tile's maximum m_tile. Sets *ret_m to the new
 * maximum and *ret_sub to what the tile's exponents subtract (0 while the
 * row has seen only masked scores, so exp2(-inf - 0) = 0 and no NaN), and
 * returns alpha, the factor that rescales the running sum and output (0
 * while m_old is -inf). */
GPT_FLASH_FN float gpt_flash_tc_rescale(float m_old, float m_tile, float *ret_m, float *ret_sub)
{
    float m = m_old > m_tile ? m_old : m_tile;
    float sub = m == -INFINITY ? 0.0f : m;
    *ret_m = m;
    *ret_sub = sub;
    return exp2f(m_old - sub);
}

/* The natural logsumexp of a finished row from its maximum m (log2 units,
 * finite: every row has key 0) and its sum l of exp2(s - m). */
GPT_FLASH_FN float gpt_flash_tc_lse(float m, float l)
{
    return m / GPT_FLASH_LOG2E + logf(l);
}

/* ---- fragment addressing (mma.m16n8k16, ldmatrix .x4) --------------------
 * The element offsets that lane l (0..31) uses in a row-major bf16 tile of
 * row stride ld, shared by the kernels' ldmatrix helpers and the test that
 * replays ldmatrix and the mma fragment layouts on the CPU. ldmatrix .x4:
 * lane l gives the start of row l % 8 of 8 x 8 matrix l / 8 and receives,
 * of matrix i, register i: (row g, columns c, c+1) with g = l / 4 and
 * c = 2 (l % 4); with .trans, (row c and c+1, column g). */

/* A (rows m, cols k) from an (m, k) tile: matrices (m0, k0) (m0+8, k0)
 * (m0, k0+8) (m0+8, k0+8) = a0 a1 a2 a3. */
GPT_FLASH_FN int gpt_flash_tc_ld_a_off(int l, int ld, int m0, int k0)
{
    return (m0 + (l & 7) + ((l >> 3) & 1) * 8) * ld + k0 + (l >> 4) * 8;
}

/* B of n-tiles n0 (b0 b1) and n0 + 8 (b2 b3) from an (n, k) tile: matrices
 * (n0, k0) (n0, k0+8) (n0+8, k0) (n0+8, k0+8). */
GPT_FLASH_FN int gpt_flash_tc_ld_b_off(int l, int ld, int n0, int k0)
{
    return (n0 + (l & 7) + (l >> 4) * 8) * ld + k0 + ((l >> 3) & 1) * 8;
}

/* The same B fragments from a (k, n) tile, with .trans: (k0, n0)
 * (k0+8, n0) (k0, n0+8) (k0+8, n0+8). */
GPT_FLASH_FN int gpt_flash_tc_ld_bt_off(int l, int ld, int k0, int n0)
{
    return (k0 + (l & 7) + ((l >> 3) & 1) * 8) * ld + n0 + (l >> 4) * 8;
}

/* A (rows m, cols k) from a (k, m) tile, with .trans: (k0, m0) (k0, m0+8)
 * (k0+8, m0) (k0+8, m0+8) = a0 a1 a2 a3 (dS from the stored dS^T). */
GPT_FLASH_FN int gpt_flash_tc_ld_at_off(int l, int ld, int m0, int k0)
{
    return (k0 + (l & 7) + (l >> 4) * 8) * ld + m0 + ((l >> 3) & 1) * 8;
}

/* Where lane l stores register r (0..3, two bf16 each) of an A fragment
 * over rows m0.., columns k0.. into an (m, k) tile: its (row, column
 * pair) as in the layout above (a1 and a3 eight rows down, a2 and a3
 * eight columns right). */
GPT_FLASH_FN int gpt_flash_tc_st_a_off(int l, int r, int ld, int m0, int k0)
{
    return (m0 + l / 4 + (r & 1) * 8) * ld + k0 + 2 * (l % 4) + (r >> 1) * 8;
}

/* Dynamic shared memory of each kernel, bytes: bf16 rows of hs + PAD;
 * forward: Q (FWD_BR rows) and two stages of (K, V); backward: K, V and
 * two stages of (Q, dO), the stages' logsumexp and the tile's D (fp32,
 * bcq each), the tile's dS^T (BR rows of bcq + PAD) that the dQ product
 * reads back, and the tile's O (bcq rows, one stage: it is consumed, by
 * D, before the next one is fetched). At most 82 KiB, so shared memory
 * never holds the backward below the 2 blocks per SM its registers
 * allow (~190 per thread, 128 threads). */
GPT_FLASH_FN size_t gpt_flash_tc_smem_fwd(size_t hs)
{
    return (size_t)(GPT_FLASH_TC_FWD_BR + 4 * GPT_FLASH_TC_BC) * (hs + GPT_FLASH_TC_PAD) * 2;
}

GPT_FLASH_FN size_t gpt_flash_tc_smem_bwd(size_t hs)
{
    size_t bcq = (size_t)gpt_flash_tc_bcq(hs);
    return (2 * GPT_FLASH_TC_BR + 5 * bcq) * (hs + GPT_FLASH_TC_PAD) * 2 + 3 * bcq * 4 +
           (size_t)GPT_FLASH_TC_BR * (bcq + GPT_FLASH_TC_PAD) * 2;
}

/* The two-pass backward (attention_backward twopass): the dQ pass has the
 * forward's blocks and stages plus a dO tile beside Q; the dK/dV pass is
 * the fused one without O, dS^T and the dQ share, with two stages of D
 * (fp32, bcq each) beside the two of the logsumexp, since D now comes
 * from the dQ pass through global memory like the logsumexp. */
GPT_FLASH_FN size_t gpt_flash_tc_smem_dq(size_t hs)
{
    return (size_t)(2 * GPT_FLASH_TC_FWD_BR + 4 * GPT_FLASH_TC_BC) * (hs + GPT_FLASH_TC_PAD) * 2;
}

GPT_FLASH_FN size_t gpt_flash_tc_smem_dkv(size_t hs)
{
    size_t bcq = (size_t)gpt_flash_tc_bcq(hs);
    return (2 * GPT_FLASH_TC_BR + 4 * bcq) * (hs + GPT_FLASH_TC_PAD) * 2 + 4 * bcq * 4;
}

/* The dS backward's dQ pass (flash_tc.h, below): two stages of a dS^T
 * tile (BR keys by bcq queries) and K's BR rows. */
GPT_FLASH_FN size_t gpt_flash_tc_smem_dsq(size_t hs)
{
    size_t bcq = (size_t)gpt_flash_tc_bcq(hs);
    return 2 * (size_t)GPT_FLASH_TC_BR * (bcq + hs + 2 * GPT_FLASH_TC_PAD) * 2;
}

/* The last key block (BR keys each) that visits query tile qt (bcq rows):
 * the one holding the tile's last row below T. Key blocks 0 .. that one
 * visit it (gpt_flash_tc_q_span). */
GPT_FLASH_FN int gpt_flash_tc_dq_last_kb(int qt, int bcq, int T)
{
    int end = (qt + 1) * bcq < T ? (qt + 1) * bcq : T; /* one past */
    return (end - 1) / GPT_FLASH_TC_BR;
}

/* Key block kb's turn in query tile qt's dQ order: 0 for the last visitor
 * (the diagonal block), then one more per block down to key block 0. */
GPT_FLASH_FN int gpt_flash_tc_dq_turn(int kb, int qt, int bcq, int T)
{
    return gpt_flash_tc_dq_last_kb(qt, bcq, T) - kb;
}

/* Query tiles of one (b, h) pair in the backward: its dQ counters. */
GPT_FLASH_FN size_t gpt_flash_tc_q_tiles(size_t T, size_t hs)
{
    size_t bcq = (size_t)gpt_flash_tc_bcq(hs);
    return (T + bcq - 1) / bcq;
}

/* Where the backward's bf16 copy of dout (made when dout has no current
 * bf16 copy of its own) starts in its scratch, in floats after the CUDA-core
 * kernels' D = dout . out (lse_floats of them), rounded up to 16 bytes for
 * cp.async. The copy takes ceil(B*T*C / 2) floats. */
GPT_FLASH_FN size_t gpt_flash_tc_dob_off(size_t lse_floats)
{
    return (lse_floats + 3) & ~(size_t)3;
}

/* Where the dQ turn counters (32-bit, bh * gpt_flash_tc_q_tiles of them)
 * start in the backward's scratch: after the bf16 dout copy of btc =
 * B*T*C elements, 16-byte aligned. */
GPT_FLASH_FN size_t gpt_flash_tc_sem_off(size_t lse_floats, size_t btc)
{
    return (gpt_flash_tc_dob_off(lse_floats) + (btc + 1) / 2 + 3) & ~(size_t)3;
}

/* ---- the dS backward (attention_backward ds) ----------------------------------
 * Pass one is the fused pass (D, S^T, dP^T, dV, dK and the bf16 dS^T tile
 * of each visited (query tile, key block)), except that each dS^T tile
 * (BR keys by bcq queries, row-major, no padding) goes to global memory
 * instead of into ordered dQ shares; pass two (one block per query tile)
 * takes tile qt's dQ = scale * sum over its key blocks kb of dS K_kb,
 * adding the shares in the fused pass's turn order (the diagonal block
 * first, each share's product scaled, then added), so dq has the fused
 * pass's bits and nobody waits. 10 hs FLOPs per pair, as fused; the dS
 * tiles take 2 bytes a pair through DRAM, twice.
 * Tiles of one (b, h) are stored query tile by query tile, key blocks 0
 * .. gpt_flash_tc_dq_last_kb within each: tile (qt, kb) at index
 * gpt_flash_tc_ds_tile. */

/* Tiles of query tiles 0 .. qt - 1 (all full: only the last can be short):
 * the sum over q < qt of last_kb(q) + 1 = floor(((q + 1) bcq - 1) / BR) + 1
 * = floor(q / r) + 1, r = BR / bcq (1 or 2): qt, plus r m (m - 1) / 2 for
 * the m = floor(qt / r) whole groups of r tiles, plus m for each of the
 * qt mod r tiles after them. */
GPT_FLASH_FN size_t gpt_flash_tc_ds_first(int qt, int bcq)
{
    size_t r = (size_t)(GPT_FLASH_TC_BR / bcq), n = (size_t)qt, m = n / r;
    return n + (m > 0 ? r * m * (m - 1) / 2 : 0) + (n % r) * m;
}

/* Index of tile (query tile qt, key block kb) among its (b, h)'s. */
GPT_FLASH_FN size_t gpt_flash_tc_ds_tile(int qt, int kb, int bcq)
{
    return gpt_flash_tc_ds_first(qt, bcq) + (size_t)kb;
}

/* dS^T tiles per (b, h) at T. */
GPT_FLASH_FN size_t gpt_flash_tc_ds_tiles(int T, size_t hs)
{
    int bcq = gpt_flash_tc_bcq(hs), last = (T + bcq - 1) / bcq - 1;
    return gpt_flash_tc_ds_first(last, bcq) + (size_t)gpt_flash_tc_dq_last_kb(last, bcq, T) + 1;
}

/* Bytes of the dS^T tiles of bh (b, h) pairs at T. */
GPT_FLASH_FN size_t gpt_flash_tc_ds_bytes(size_t bh, int T, size_t hs)
{
    return bh * gpt_flash_tc_ds_tiles(T, hs) * GPT_FLASH_TC_BR * (size_t)gpt_flash_tc_bcq(hs) * 2;
}

/* The backward's scratch keeps at most this much of dS^T tiles: the dS
 * backward runs over chunks of (b, h) pairs whose tiles fit it (each
 * chunk's two passes in turn on the stream, reusing the space), and
 * twopass where not even one pair's do (hs 64 past T ~32k). 1 GiB holds
 * 963 pairs at T 1024 (1.1 MB each: GPT-2 124M in one chunk up to B 80)
 * or 248 at T 2048. */
#define GPT_FLASH_TC_DS_MAX ((size_t)1 << 30)

/* Bytes of dS^T tiles the backward's scratch reserves for bh pairs at T:
 * all of theirs, at most GPT_FLASH_TC_DS_MAX. Never less for a larger bh
 * or T, so the scratch carved for the largest shape holds any smaller
 * one's (the model sizes its buffers once, for its largest batch). */
GPT_FLASH_FN size_t gpt_flash_tc_ds_reserve(size_t bh, int T, size_t hs)
{
    size_t all = gpt_flash_tc_ds_bytes(bh, T, hs);
    return all < GPT_FLASH_TC_DS_MAX ? all : GPT_FLASH_TC_DS_MAX;
}

/* (b, h) pairs per chunk of the dS backward at (bh, T): as many as the
 * reserve holds, at most bh; 0 when not one pair's tiles fit (the ds
 * variant then runs twopass). */
GPT_FLASH_FN size_t gpt_flash_tc_ds_chunk(size_t bh, int T, size_t hs)
{
    size_t one = gpt_flash_tc_ds_bytes(1, T, hs), n = gpt_flash_tc_ds_reserve(bh, T, hs) / one;
    return n < bh ? n : bh;
}

/* Where the dS^T tiles start in the backward's scratch, in floats: after
 * the dQ turn counters (nsem ints) and the block ticket, 16-byte aligned. */
GPT_FLASH_FN size_t gpt_flash_tc_ds_off(size_t lse_floats, size_t btc, size_t nsem)
{
    return (gpt_flash_tc_sem_off(lse_floats, btc) + nsem + 1 + 3) & ~(size_t)3;
}

/* Tiles the tensor-core kernels visit per (b, h) at T (each streams one
 * tile of the other side per visit): forward (own_is_query 1: key tiles
 * of BC rows per 128-row query block), backward (0: query tiles of bcq
 * rows per 64-key block; each visit also sums D over the tile's rows). */
GPT_FLASH_FN double gpt_flash_tc_tiles(int T, size_t hs, int own_is_query)
{
    double tiles = 0;
    int bcq = gpt_flash_tc_bcq(hs);
    int br = own_is_query ? GPT_FLASH_TC_FWD_BR : GPT_FLASH_TC_BR;
    for (int own0 = 0; own0 < T; own0 += br) {
        int first, end;
        if (own_is_query)
            gpt_flash_tc_kv_span(own0, T, &first, &end);
        else
            gpt_flash_tc_q_span(own0, T, bcq, &first, &end);
        tiles += end - first;
    }
    return tiles;
}

/* Query-key pairs the tensor-core kernels compute per (b, h) at T: 256
 * per live 16 x 16 group (gpt_flash_tc_live), the masked pairs inside
 * those groups included. The forward (own_is_query 1) and the backward
 * (0) visit different tiles, but the same live groups. */
GPT_FLASH_FN double gpt_flash_tc_pairs(int T, size_t hs, int own_is_query)
{
    (void)hs;
    (void)own_is_query;
    double groups = 0;
    for (int i0 = 0; i0 < T; i0 += 16)
        for (int j0 = 0; j0 < T; j0 += 16)
            groups += gpt_flash_tc_live(i0, j0, T);
    return groups * 256.0;
}

#endif
