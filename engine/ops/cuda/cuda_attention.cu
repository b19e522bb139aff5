/*
 * cuda_attention: fused causal attention (FlashAttention-2 style) on
 * tensor cores for the CUDA backend, in bf16 mode for head sizes 32, 64,
 * 96 and 128, and the entry points that choose between these kernels,
 * their variants (trainer.attention_forward, _backward), the warpgroup kernels
 * of cuda_attention_wg.cu and the CUDA-core fallback of
 * cuda_attention_cc.cu (fp32 mode, other head sizes). Nothing of size
 * T x T is materialised: the forward streams key/value tiles through
 * shared memory with an online softmax and keeps only each query row's
 * logsumexp; the backward recomputes the probabilities tile by tile and
 * takes the rows' D = dout . out from the output itself (the caller
 * passes it back, FlashAttention-2's way). The default backward is the
 * dS backward (flash_tc.h): the fused pass's dK, dV and dS^T tiles, the
 * tiles summed into dQ by a second pass in a fixed order; the others
 * (two passes, the fused pass with dQ shares added in turn) are variants.
 * No atomics: the same bits every run. Tiling and the choice against
 * the batched-GEMM path are planned on the host (gpt_cuda_plan_attention
 * in cuda_plan.c, unit-tested in CI); the tensor-core tiling, spans and
 * softmax recurrence are engine/include/flash_tc.h, replayed on the CPU
 * by tests/unit/test_flash_tc.c. The saved state (the natural
 * logsumexp) is the same on every path, so either backward can follow
 * either forward.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include <cuda_bf16.h>

#include "cuda_impl.h" /* first: its _Noreturn shim for gpt_err.h */
#include "cuda_dnn.h"
#include "cuda_dnn_attn.h"
#include "cuda_flash_tc.cuh"
#include "flash_tc.h"
#include "flash_wg.h"
#include "gpt_bf16.h"

/* ==== tensor-core kernels (bf16, head sizes 32, 64, 96, 128) ===============
 *
 * The forward as above and the backward in one fused pass (the CUDA-core
 * kernels' dq and dk/dv passes merged), every product on tensor cores:
 * mma.sync m16n8k16 (bf16 x bf16 -> fp32), operands fetched from shared
 * memory with ldmatrix, tiles streamed with cp.async into two stages so
 * the next tile loads while this one computes. The tiling, the causal
 * spans and the softmax recurrence are engine/include/flash_tc.h (shared with
 * the CPU emulation test, tests/unit/test_flash_tc.c). The softmax runs
 * in log2 units (scores times scale * log2 e, exp2f); the saved logsumexp
 * is natural, as the CUDA-core kernels write it.
 *
 * The fragment layouts and the helpers the kernels share with the
 * warpgroup kernels (cuda_attention_wg.cu): cuda_flash_tc.cuh.
 */

/* ---- tensor-core forward ----------------------------------------------------
 * Grid (ceil(T / 128), B*NH), 8 warps; block x takes query block
 * x_blocks - 1 - x (128 rows), so the blocks with the most keys start
 * first. Warp w owns query rows q0 + 16 w .. + 15; lane l holds, for rows
 * ia = q0 + 16 w + l/4 and ib = ia + 8, the running maximum m (log2
 * units), its own columns' part of the running sum l (the quad's four
 * parts add up at the end) and the output accumulator o[n] over head
 * columns 8 n + 2 (l % 4) + {0, 1}. A warp whose 16 rows all precede a
 * key tile (the block's last tile, for its first four warps) or lie past
 * T skips that tile: none of its groups is live, so its scores would all
 * be masked (alpha 1, P 0) and nothing would change.
 * MT = 2 (attention_forward m32, head sizes up to 64): 4 warps of two m16
 * tiles each (rows q0 + 32 w ..), FlashAttention-2's layout for this
 * block: each K and V fragment loaded through ldmatrix feeds two mma
 * instead of one (the 8-warp layout issues one ldmatrix per two mma, which
 * may bind on shared-memory bandwidth), for twice the accumulators per
 * thread and half the warps per SM. The same arithmetic per row. MT = 1
 * is the 8-warp kernel the H200 runs measured: its PTX is the same but
 * for how one lane index is formed (the per-m-tile checks compile away).
 * KS = 2 (attention_forward k32, MT 1, head sizes up to 64): each 64-key
 * tile in two online-softmax steps of 32 keys, with Q's fragments loaded
 * from shared memory per k step instead of held: 80 registers, three
 * blocks per SM instead of two (the runs found the kernel latency-bound
 * at 22% occupancy); each row's maximum and sum are updated twice per
 * tile, so the result is rounded differently (within 1e-3). */
template <int HS, int MT, int KS = 1>
__global__ void __launch_bounds__(TC_FWD_THREADS / MT, KS > 1 ? 3 : 0)
    flash_tc_forward_kernel(float *out, uint16_t *out_bf, float *lse, const uint16_t *qkv, int T,
                            int C, int NH, float scale2)
{
    constexpr int LD = HS + GPT_FLASH_TC_PAD, KP = TC_BC / KS;
    static_assert(KP % 16 == 0 && (KS == 1 || MT == 1), "key parts");
    extern __shared__ __align__(16) uint16_t tc_smem[];
    uint16_t *sq = tc_smem, *skv = sq + TC_FWD_BR * LD; /* stage s: K at skv + 2 s TILE, V after */
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * TC_FWD_BR;
    const int warp = threadIdx.x / FA_WARP, lane = threadIdx.x % FA_WARP;
    const size_t ld3 = 3 * (size_t)C;
    const uint16_t *gq = qkv + (size_t)b * T * ld3 + (size_t)h * HS, *gk = gq + C, *gv = gq + 2 * C;
    int kt0, nkt;
    gpt_flash_tc_kv_span(q0, T, &kt0, &nkt);

    tc_load<HS>(sq, gq, ld3, q0, TC_FWD_BR, T);
    tc_load<HS>(skv, gk, ld3, 0, TC_BC, T);
    tc_load<HS>(skv + TC_BC * LD, gv, ld3, 0, TC_BC, T);
    tc_commit();

    /* The warp's m-tiles: rows rt[t] .. rt[t] + 15 of the block's tile
     * (t < MT, 16 rows each); lane l holds rows ia[t] and ia[t] + 8. */
    const int wr = warp * MT * TC_WR;
    int rt[MT], ia[MT], ib[MT];
#pragma unroll
    for (int t = 0; t < MT; t++) {
        rt[t] = q0 + wr + t * TC_WR;
        ia[t] = rt[t] + lane / 4;
        ib[t] = ia[t] + 8;
    }
    /* Q's fragments, loaded once (KS 1) or per part from shared memory
     * (KS 2: the registers go to three blocks per SM instead). */
    uint32_t qf[MT][KS > 1 ? 1 : HS / 16][4];
    float o[MT][HS / 8][4], m[MT][2], l[MT][2];
#pragma unroll
    for (int t = 0; t < MT; t++) {
        m[t][0] = m[t][1] = -INFINITY;
        l[t][0] = l[t][1] = 0.0f;
        tc_zero(o[t]);
    }

    for (int kt = kt0; kt < nkt; kt++) {
        const int k0 = kt * TC_BC;
        const uint16_t *sk = tc_kv_stage<HS>(skv, gk, gv, ld3, kt, kt0, nkt, T),
                       *sv = sk + TC_BC * LD;
        if constexpr (KS == 1) {
            if (kt == kt0) {
#pragma unroll
                for (int t = 0; t < MT; t++)
#pragma unroll
                    for (int ks = 0; ks < HS / 16; ks++)
                        tc_ld_a(qf[t][ks], sq, LD, wr + t * TC_WR, ks * 16);
            }
        }
        /* The tile's keys in KS parts of KP, one after the other, each a
         * step of the online softmax (KS 2: S holds half the keys'
         * scores, so three blocks fit an SM's registers). */
#pragma unroll
        for (int part = 0; part < KS; part++) {
            const int j0 = k0 + part * KP; /* the part's first key */
            /* Warp-uniform: the part's first 16 keys meet the warp's last
             * m-tile below T (else none of its keys meets any of its rows). */
            if (!tc_any_live<MT>(rt, j0, T))
                continue;
            /* S = Q K^T for each m-tile and the part's keys; a K fragment
             * is loaded once for the warp's MT m-tiles. The 16-key groups
             * with no valid pair for an m-tile's rows stay 0 (the mask
             * below turns them into -inf). */
            float s[MT][KP / 8][4];
#pragma unroll
            for (int t = 0; t < MT; t++)
                tc_zero(s[t]);
#pragma unroll
            for (int ks = 0; ks < HS / 16; ks++) {
                if (KS > 1) /* this k step's Q fragment (MT 1) */
                    tc_ld_a(qf[0][0], sq, LD, wr, ks * 16);
                const int qk = KS > 1 ? 0 : ks;
#pragma unroll
                for (int np = 0; np < KP / 16; np++) {
                    if (!tc_any_live<MT>(rt, j0 + np * 16, T))
                        continue;
                    uint32_t kb[4];
                    tc_ld_b(kb, sk, LD, part * KP + np * 16, ks * 16);
#pragma unroll
                    for (int t = 0; t < MT; t++) {
                        if (MT > 1 && !gpt_flash_tc_live(rt[t], j0 + np * 16, T))
                            continue; /* (one m-tile: tc_any_live said it) */
                        tc_mma(s[t][2 * np], qf[t][qk], kb[0], kb[1]);
                        tc_mma(s[t][2 * np + 1], qf[t][qk], kb[2], kb[3]);
                    }
                }
            }
#pragma unroll
            for (int t = 0; t < MT; t++) {
                if (MT > 1 && !gpt_flash_tc_live(rt[t], j0, T))
                    continue; /* every score masked: nothing would change */
                /* Scale to log2 units, mask, and take the part's row maxima. */
                const bool mask = gpt_flash_tc_needs_mask(rt[t], TC_WR, j0, KP, T);
                float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int n = 0; n < KP / 8; n++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int i = e < 2 ? ia[t] : ib[t],
                                  j = j0 + n * 8 + 2 * (lane % 4) + (e & 1);
                        float x = s[t][n][e] * scale2;
                        if (mask && (j > i || j >= T))
                            x = -INFINITY;
                        s[t][n][e] = x;
                        mx[e / 2] = fmaxf(mx[e / 2], x);
                    }
                }
                float sub[2], alpha[2];
#pragma unroll
                for (int r = 0; r < 2; r++)
                    alpha[r] = gpt_flash_tc_rescale(m[t][r], tc_quad_max(mx[r]), &m[t][r], &sub[r]);
                l[t][0] *= alpha[0];
                l[t][1] *= alpha[1];
#pragma unroll
                for (int n = 0; n < KP / 8; n++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) /* masked: 2^-inf = 0 */
                        s[t][n][e] = cu_exp2_ftz(s[t][n][e] - sub[e / 2]);
                    l[t][0] += s[t][n][0] + s[t][n][1];
                    l[t][1] += s[t][n][2] + s[t][n][3];
                }
#pragma unroll
                for (int n = 0; n < HS / 8; n++) {
                    o[t][n][0] *= alpha[0];
                    o[t][n][1] *= alpha[0];
                    o[t][n][2] *= alpha[1];
                    o[t][n][3] *= alpha[1];
                }
            }
            /* o += P V: P (16 x KP per m-tile) from the S registers, V
             * (KP x HS), each V fragment loaded once for the MT m-tiles;
             * P is 0 in the skipped groups. */
#pragma unroll
            for (int kk = 0; kk < KP / 16; kk++) {
                if (!tc_any_live<MT>(rt, j0 + kk * 16, T))
                    continue;
                uint32_t pa[MT][4];
#pragma unroll
                for (int t = 0; t < MT; t++)
                    tc_pack_a(pa[t], s[t], kk);
#pragma unroll
                for (int dp = 0; dp < HS / 16; dp++) {
                    uint32_t vb[4];
                    tc_ld_bt(vb, sv, LD, part * KP + kk * 16, dp * 16);
#pragma unroll
                    for (int t = 0; t < MT; t++) {
                        if (MT > 1 && !gpt_flash_tc_live(rt[t], j0 + kk * 16, T))
                            continue;
                        tc_mma(o[t][2 * dp], pa[t], vb[0], vb[1]);
                        tc_mma(o[t][2 * dp + 1], pa[t], vb[2], vb[3]);
                    }
                }
            }
        }
        __syncthreads(); /* this stage is consumed before it is refilled */
    }
#pragma unroll
    for (int t = 0; t < MT; t++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = r ? ib[t] : ia[t];
            const float lt = tc_quad_sum(l[t][r]);
            if (row >= T)
                continue;
            const float inv = 1.0f / lt;
            const size_t at = ((size_t)b * T + row) * C + (size_t)h * HS + 2 * (lane % 4);
#pragma unroll
            for (int n = 0; n < HS / 8; n++)
                tc_store2(out, out_bf, at + n * 8, o[t][n][2 * r] * inv, o[t][n][2 * r + 1] * inv);
            if (lane % 4 == 0)
                lse[(size_t)bh * T + row] = gpt_flash_tc_lse(m[t][r], lt);
        }
    }
}

/* A query tile's dQ share from one key block: dq = dS K for the warp's
 * rows mb * 16 .. of the tile and head columns cb * DC .., A = dS from
 * the (key, query) dS^T tile sds (BR x BQ, rows of BQ + PAD) with
 * ldmatrix .trans, B = K's rows k0 .. from sk (key, dim) = (k, n); the
 * 16-key groups with no valid pair are skipped (dS is 0 there). The fused
 * pass and the dS backward's dQ pass both take their shares here, so
 * their products are the same. */
template <int HS, int BQ, int DC = HS / (GPT_FLASH_TC_WARPS / (BQ / 16))>
__device__ __forceinline__ void tc_dq_share(float (&dq)[DC / 8][4], const uint16_t *sds,
                                            const uint16_t *sk, int i0, int k0, int mb, int cb,
                                            int T)
{
    constexpr int LD = HS + GPT_FLASH_TC_PAD, SLD = BQ + GPT_FLASH_TC_PAD;
    tc_zero(dq);
#pragma unroll
    for (int kk = 0; kk < TC_BR / 16; kk++) {
        if (!gpt_flash_tc_live(i0 + mb * 16, k0 + kk * 16, T))
            continue; /* dS is 0 there */
        uint32_t da[4];
        tc_ld_at(da, sds, SLD, mb * 16, kk * 16);
#pragma unroll
        for (int dd = 0; dd < DC / 16; dd++) {
            uint32_t kb4[4];
            tc_ld_bt(kb4, sk, LD, kk * 16, cb * DC + dd * 16);
            tc_mma(dq[2 * dd], da, kb4[0], kb4[1]);
            tc_mma(dq[2 * dd + 1], da, kb4[2], kb4[3]);
        }
    }
}

/* ---- tensor-core backward: one fused pass ----------------------------------------
 * FlashAttention-2's backward: S and P are recomputed once per (query,
 * key) pair, not once for dq and once more for dk, dv. Grid (k tiles,
 * B*NH); block x owns key block kb = k_tiles - 1 - x, keys k0 = 64 kb.
 * Warp w owns keys k0 + 16 w ..; lane l rows ja = k0 + 16 w + l/4 and
 * jb = ja + 8. Per query tile of BQ rows (gpt_flash_tc_bcq): the rows'
 * D_i = dO_i . O_i from the tile's bf16 dO and O (each warp sums BQ / 4
 * rows; 2 hs FLOPs per row, 1 / (5 * 64) of the tile's products: ~0.3%,
 * where a separate pass would read dO and O once more from DRAM), S^T = K Q^T
 * and dP^T = V dO^T (16 x BQ per warp), P^T = exp2(S^T scale2 - lse2_i)
 * (0 where i < j or past T), dS^T = P^T (dP^T - D_i), then dv += P^T dO
 * and dk += dS^T Q, both with the left operand from registers and the
 * right one from shared memory through ldmatrix .trans (dO and Q are
 * stored (query, dim) = (k, n)). The bf16 dS^T goes to shared memory and
 * the block's dQ share dS K (BQ x HS, split over the warps) is added to
 * dq in global memory in the fixed turn order of flash_tc.h: the turn's
 * counter is awaited, the first share stores, later ones load, add and
 * store (through L2), key block 0 also writes the bf16 copy, and the
 * counter passes the turn on. dq, dk and dv: the same bits every run.
 * A block waits only on blocks that took their ticket before it: the
 * block's (key block, head) comes from a ticket taken at its start (one
 * atomicAdd on the int after the turn counters), not from blockIdx, since
 * CUDA does not promise to dispatch blocks in blockIdx order; a block
 * holding a ticket is resident, so every wait ends. The turn counters
 * and the ticket start at zero (the launcher's memset).
 * DQ false: the dK/dV pass of the two-pass backward (flash_tc.h): no O,
 * no D sum, no dS^T tile, no dQ share, no ticket (blockIdx gives the
 * block's key block); each tile's D comes from Dg, the dQ pass's, staged
 * with the logsumexp (gpt_flash_tc_smem_dkv).
 * DS (with DQ): pass one of the dS backward (flash_tc.h): all the above
 * up to the dS^T tile, which is then copied to its place in dsg
 * (gpt_flash_tc_ds_tile) instead of going into a dQ share: no turns, no
 * ticket; flash_tc_dsq_kernel sums the tiles into dq.
 * Shared memory (gpt_flash_tc_smem_bwd): K, V; two stages of (Q, dO) and
 * of lse2, one of O (read by D at the top of a tile, refilled for the
 * next tile right after) and one of D; dS^T. cp.async groups: the
 * initial one (K, V, Q, dO, O of the first tile), then per tile the next
 * tile's (Q, dO) at its top and the next tile's O after D, so the
 * wait_group 1 at a tile's top leaves only the newest (Q, dO) in flight. */
template <int HS, int SPLIT, bool DQ, int MINB = (SPLIT > 1 ? 3 : 0), bool DS = false>
__global__ void __launch_bounds__(TC_THREADS, MINB)
    flash_tc_bwd_kernel(float *dqkv, uint16_t *dqkv_bf, int *sem, size_t nsem, uint16_t *dsg,
                        int bh0, const float *Dg, const uint16_t *dob, const uint16_t *ob,
                        const uint16_t *qkv, const float *lse, int T, int C, int NH, float scale,
                        float scale2)
{
    static_assert(!DS || DQ, "the dS tiles are the fused pass's");
    constexpr int LD = HS + GPT_FLASH_TC_PAD, BQ = HS > 64 ? 32 : 64, TILE = BQ * LD;
    constexpr int SLD = BQ + GPT_FLASH_TC_PAD; /* dS^T rows (keys) of BQ queries */
    /* The dQ share: BQ / 16 row blocks, the warps split the head columns
     * between them, DC each. */
    constexpr int MB = BQ / 16, DC = HS / (GPT_FLASH_TC_WARPS / MB);
    static_assert(GPT_FLASH_TC_WARPS % MB == 0 && DC % 16 == 0, "dQ split");
    /* D: each warp sums DR rows, DL lanes per row, DCH 16-byte chunks of
     * a row each (a lane's chunks adjacent: with the padded rows the 8
     * lanes of a 128-bit phase hit distinct banks at hs 64). */
    constexpr int DR = BQ / GPT_FLASH_TC_WARPS, DL = FA_WARP / DR, DCH = HS / 8 / DL;
    static_assert(FA_WARP % DR == 0 && DCH * DL * 8 == HS, "D split");
    extern __shared__ __align__(16) uint16_t tc_smem[];
    uint16_t *sk = tc_smem, *sv = sk + TC_BR * LD, *sqd = sv + TC_BR * LD;
    float *srow = (float *)(sqd + 4 * TILE); /* stage s: lse2 at srow + s BQ */
    /* DQ: the tile's D, then dS^T and O. Else (the dK/dV pass of two,
     * gpt_flash_tc_smem_dkv) stage s's D at sD + s BQ, nothing after. */
    float *sD = srow + 2 * BQ;
    uint16_t *sds = (uint16_t *)(srow + 3 * BQ), *so = sds + TC_BR * SLD;
    __shared__ unsigned tc_ticket;
    constexpr bool TURNS = DQ && !DS; /* dQ shares added in turn */
    if (TURNS) {                      /* only the dQ turns need the ticket */
        if (threadIdx.x == 0)
            tc_ticket = atomicAdd((unsigned *)sem + nsem, 1u);
        __syncthreads();
    }
    /* Ticket order is blockIdx order's: x fastest, so a head's key blocks
     * from the last (diagonal of the most query tiles) down. */
    const unsigned tk = TURNS ? tc_ticket : blockIdx.y * gridDim.x + blockIdx.x;
    const int bh = bh0 + (int)(tk / gridDim.x), b = bh / NH, h = bh % NH;
    const int kb = gridDim.x - 1 - (int)(tk % gridDim.x), k0 = kb * TC_BR;
    const int warp = threadIdx.x / FA_WARP, lane = threadIdx.x % FA_WARP;
    const size_t ld3 = 3 * (size_t)C;
    const uint16_t *gq = qkv + (size_t)b * T * ld3 + (size_t)h * HS, *gk = gq + C, *gv = gq + 2 * C;
    const uint16_t *gdo = dob + (size_t)b * T * C + (size_t)h * HS;
    const uint16_t *go = ob + (size_t)b * T * C + (size_t)h * HS;
    const float *glse = lse + (size_t)bh * T;
    int qt0, nqt;
    gpt_flash_tc_q_span(k0, T, BQ, &qt0, &nqt);
    int *cnt = TURNS ? sem + (size_t)bh * nqt : NULL; /* this head's dQ turn counters */
    /* DS: this head's dS^T tiles (gpt_flash_tc_ds_tile), the chunk's
     * heads from bh0 */
    uint16_t *gds =
        DS ? dsg + (size_t)(bh - bh0) * gpt_flash_tc_ds_tiles(T, HS) * (TC_BR * BQ) : NULL;
    const float *gD = DQ ? NULL : Dg + (size_t)bh * T;

    tc_load<HS>(sk, gk, ld3, k0, TC_BR, T);
    tc_load<HS>(sv, gv, ld3, k0, TC_BR, T);
    tc_load<HS>(sqd, gq, ld3, qt0 * BQ, BQ, T);
    tc_load<HS>(sqd + TILE, gdo, C, qt0 * BQ, BQ, T);
    if (DQ)
        tc_load<HS>(so, go, C, qt0 * BQ, BQ, T);
    tc_commit();
    for (int t = threadIdx.x; t < BQ; t += blockDim.x) {
        int i = qt0 * BQ + t;
        srow[t] = i < T ? glse[i] * GPT_FLASH_LOG2E : 0.0f;
        if (!DQ)
            sD[t] = i < T ? gD[i] : 0.0f;
    }

    const int wr = warp * TC_WR, ja = k0 + wr + lane / 4, jb = ja + 8;
    float dk[HS / 8][4], dv[HS / 8][4];
    tc_zero(dk);
    tc_zero(dv);

    for (int qt = qt0; qt < nqt; qt++) {
        const int st = (qt - qt0) & 1, i0 = qt * BQ;
        const uint16_t *sq = sqd + 2 * st * TILE, *sdo = sq + TILE;
        const float *sl = srow + st * BQ;
        if (qt + 1 < nqt) {
            uint16_t *nq = sqd + 2 * (st ^ 1) * TILE;
            float *nl = srow + (st ^ 1) * BQ;
            tc_load<HS>(nq, gq, ld3, i0 + BQ, BQ, T);
            tc_load<HS>(nq + TILE, gdo, C, i0 + BQ, BQ, T);
            tc_commit();
            for (int t = threadIdx.x; t < BQ; t += blockDim.x) {
                int i = i0 + BQ + t;
                nl[t] = i < T ? glse[i] * GPT_FLASH_LOG2E : 0.0f;
                if (!DQ)
                    sD[(st ^ 1) * BQ + t] = i < T ? gD[i] : 0.0f;
            }
            tc_wait<1>(); /* all but this (Q, dO): the tile's O came before */
        } else {
            tc_wait<0>();
        }
        __syncthreads();
        const float *sd = DQ ? sD : sD + st * BQ; /* the tile's D */
        if constexpr (DQ) { /* D of the tile's rows (zero-filled past T: D 0) */
            const int r = warp * DR + lane / DL, c0 = (lane % DL) * DCH * 8;
            float d = 0.0f;
#pragma unroll
            for (int c = 0; c < DCH; c++) {
                const uint4 x = *(const uint4 *)(sdo + r * LD + c0 + c * 8);
                const uint4 y = *(const uint4 *)(so + r * LD + c0 + c * 8);
                d += tc_dot2(x.x, y.x) + tc_dot2(x.y, y.y) + tc_dot2(x.z, y.z) + tc_dot2(x.w, y.w);
            }
#pragma unroll
            for (int o = DL / 2; o > 0; o /= 2)
                d += __shfl_xor_sync(FA_FULL, d, o);
            if (lane % DL == 0)
                sD[r] = d;
            __syncthreads(); /* D complete, O consumed */
            if (qt + 1 < nqt) {
                tc_load<HS>(so, go, C, i0 + BQ, BQ, T);
                tc_commit();
            }
        }
        /* Keys are this warp's rows, queries the columns: the mask is
         * i < j (a query before the key) or either past T. */
        const bool mask = gpt_flash_tc_needs_mask(i0, BQ, k0 + wr, TC_WR, T);
        /* The tile's queries in SPLIT parts of QP columns, one after the
         * other: S^T and dP^T of a part, then its P^T and dS^T into dV, dK
         * and the dS^T tile. Every value comes from the same products in
         * the same order as with one part, and the parts' dV and dK
         * products run in the same kk order: the same bits; a part holds
         * 1 / SPLIT of the S and dP accumulators (registers: occupancy). */
        constexpr int QP = BQ / SPLIT;
        static_assert(QP % 16 == 0, "query part");
#pragma unroll
        for (int part = 0; part < SPLIT; part++) {
            const int q0 = part * QP; /* the part's first column in the tile */
            float s[QP / 8][4], dp[QP / 8][4];
            tc_zero(s);
            tc_zero(dp);
#pragma unroll
            for (int ks = 0; ks < HS / 16; ks++) {
                uint32_t ka[4], va[4];
                tc_ld_a(ka, sk, LD, wr, ks * 16);
                tc_ld_a(va, sv, LD, wr, ks * 16);
#pragma unroll
                for (int np = 0; np < QP / 16; np++) {
                    if (!gpt_flash_tc_live(i0 + q0 + np * 16, k0 + wr, T))
                        continue; /* no valid pair: P^T and dS^T become 0 */
                    uint32_t qb[4], db[4];
                    tc_ld_b(qb, sq, LD, q0 + np * 16, ks * 16);
                    tc_ld_b(db, sdo, LD, q0 + np * 16, ks * 16);
                    tc_mma(s[2 * np], ka, qb[0], qb[1]);
                    tc_mma(s[2 * np + 1], ka, qb[2], qb[3]);
                    tc_mma(dp[2 * np], va, db[0], db[1]);
                    tc_mma(dp[2 * np + 1], va, db[2], db[3]);
                }
            }
#pragma unroll
            for (int n = 0; n < QP / 8; n++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int j = e < 2 ? ja : jb, c = q0 + n * 8 + 2 * (lane % 4) + (e & 1),
                              i = i0 + c;
                    float p = cu_exp2_ftz(s[n][e] * scale2 - sl[c]);
                    if (mask && (i < j || i >= T || j >= T))
                        p = 0.0f;
                    s[n][e] = p;                       /* P^T */
                    dp[n][e] = p * (dp[n][e] - sd[c]); /* dS^T */
                }
            }
#pragma unroll
            for (int kl = 0; kl < QP / 16; kl++) {
                const int kk = q0 / 16 + kl; /* the 16-query block in the tile */
                uint32_t pa[4], sa[4];
                tc_pack_a(pa, s, kl);
                tc_pack_a(sa, dp, kl);
                if (gpt_flash_tc_live(i0 + kk * 16, k0 + wr, T)) { /* else P^T = dS^T = 0 */
#pragma unroll
                    for (int dd = 0; dd < HS / 16; dd++) {
                        uint32_t ob[4], qb[4];
                        tc_ld_bt(ob, sdo, LD, kk * 16, dd * 16);
                        tc_ld_bt(qb, sq, LD, kk * 16, dd * 16);
                        tc_mma(dv[2 * dd], pa, ob[0], ob[1]);
                        tc_mma(dv[2 * dd + 1], pa, ob[2], ob[3]);
                        tc_mma(dk[2 * dd], sa, qb[0], qb[1]);
                        tc_mma(dk[2 * dd + 1], sa, qb[2], qb[3]);
                    }
                }
                /* dS^T as bf16 into the (key, query) tile, one word per register. */
                if (DQ) {
#pragma unroll
                    for (int r = 0; r < 4; r++)
                        *(uint32_t *)(sds + gpt_flash_tc_st_a_off(lane, r, SLD, wr, kk * 16)) =
                            sa[r];
                }
            }
        } /* part */
        if constexpr (!DQ) {
            __syncthreads(); /* this stage, its lse2 and D consumed before they are refilled */
            continue;
        }
        __syncthreads();    /* dS^T complete */
        if constexpr (DS) { /* the tile to gds, 16 bytes a copy; rows of BQ queries */
            constexpr int CH = BQ / 8;
            uint16_t *g = gds + gpt_flash_tc_ds_tile(qt, kb, BQ) * (TC_BR * BQ);
            for (int x = threadIdx.x; x < TC_BR * CH; x += blockDim.x) {
                const int r = x / CH, c = (x - r * CH) * 8;
                __stcg((uint4 *)(g + r * BQ + c), *(const uint4 *)(sds + r * SLD + c));
            }
            __syncthreads(); /* stage and dS^T consumed */
            continue;
        }
        /* The dQ share dS K: warp rows mb * 16 .. of the tile, head
         * columns cb * DC ..; A = dS from the (key, query) tile with
         * ldmatrix .trans, B = K stored (key, dim) = (k, n). */
        const int mb = warp % MB, cb = warp / MB;
        float dq[DC / 8][4];
        tc_dq_share<HS, BQ>(dq, sds, sk, i0, k0, mb, cb, T);
        /* This block's turn in the tile's dQ order (flash_tc.h). */
        const int turn = gpt_flash_tc_dq_turn(kb, qt, BQ, T);
        if (threadIdx.x == 0) {
            while (tc_ld_acquire(cnt + qt) != turn)
                __nanosleep(64);
            __threadfence();
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int i = i0 + mb * 16 + lane / 4 + 8 * r;
            if (i >= T)
                continue;
            const size_t at = ((size_t)b * T + i) * ld3 + (size_t)h * HS + cb * DC + 2 * (lane % 4);
#pragma unroll
            for (int n = 0; n < DC / 8; n++) {
                float *g = dqkv + at + n * 8;
                /* rounded apart (no fma): the dS backward's dQ pass repeats these bits */
                float x = __fmul_rn(dq[n][2 * r], scale), y = __fmul_rn(dq[n][2 * r + 1], scale);
                if (turn != 0) {
                    const float2 o = __ldcg((const float2 *)g);
                    x = __fadd_rn(o.x, x);
                    y = __fadd_rn(o.y, y);
                }
                __stcg((float2 *)g, make_float2(x, y));
                if (kb == 0 && dqkv_bf) /* the last share: dq is final */
                    *(uint32_t *)(dqkv_bf + at + n * 8) = tc_pack(x, y);
            }
        }
        __threadfence(); /* this thread's dq stores before the hand-over */
        __syncthreads(); /* every thread's; also: stage and dS^T consumed */
        if (threadIdx.x == 0)
            tc_st_release(cnt + qt, turn + 1);
    }
    tc_store_dkv<HS>(dqkv, dqkv_bf, &dk[0][0], &dv[0][0], (size_t)b * T, ja, T, ld3, C, h, scale);
}

/* ---- tensor-core backward, the dS backward's dQ pass -------------------------------
 * attention_backward ds (flash_tc.h): pass two, after flash_tc_bwd_kernel<..,
 * DS> stored every visited (query tile, key block) dS^T tile of (b, h)
 * pairs bh0 .. in dsg. Grid (query tiles of BQ rows, the chunk's pairs),
 * 4 warps; block x owns query tile qt =
 * tiles - 1 - x (the most key blocks first). The key blocks kb that
 * visited the tile, from the diagonal one (gpt_flash_tc_dq_last_kb) down
 * to 0, the fused pass's turn order: the tile's dS^T (BR keys x BQ
 * queries) and K's rows k0 .. k0 + BR - 1 stream through two stages of
 * shared memory (cp.async: the next block's copied during this one's
 * products); each warp takes the fused pass's share of dS K (rows mb * 16
 * .., head columns cb * DC ..; same fragments, same products, same
 * skips), scales it and adds it to its running dq, the first stored: the
 * fused pass's bits, with no turns and no waiting. */
template <int HS>
__global__ void __launch_bounds__(TC_THREADS)
    flash_tc_dsq_kernel(float *dqkv, uint16_t *dqkv_bf, const uint16_t *dsg, int bh0,
                        const uint16_t *qkv, int T, int C, int NH, float scale)
{
    constexpr int LD = HS + GPT_FLASH_TC_PAD, BQ = HS > 64 ? 32 : 64, SLD = BQ + GPT_FLASH_TC_PAD;
    constexpr int MB = BQ / 16, DC = HS / (GPT_FLASH_TC_WARPS / MB);
    constexpr int STAGE = TC_BR * (SLD + LD); /* dS^T, then K */
    constexpr size_t TILE = (size_t)TC_BR * BQ;
    extern __shared__ __align__(16) uint16_t tc_smem[];
    const int bh = bh0 + (int)blockIdx.y, b = bh / NH, h = bh % NH;
    const int qt = gridDim.x - 1 - blockIdx.x, i0 = qt * BQ,
              last = gpt_flash_tc_dq_last_kb(qt, BQ, T);
    const int warp = threadIdx.x / FA_WARP, lane = threadIdx.x % FA_WARP;
    const int mb = warp % MB, cb = warp / MB;
    const size_t ld3 = 3 * (size_t)C;
    const uint16_t *gk = qkv + (size_t)b * T * ld3 + C + (size_t)h * HS;
    const uint16_t *gds =
        dsg + ((size_t)blockIdx.y * gpt_flash_tc_ds_tiles(T, HS) + gpt_flash_tc_ds_first(qt, BQ)) *
                  TILE; /* the chunk's heads from bh0 */

    tc_load<BQ>(tc_smem, gds + (size_t)last * TILE, BQ, 0, TC_BR, TC_BR);
    tc_load<HS>(tc_smem + TC_BR * SLD, gk, ld3, last * TC_BR, TC_BR, T);
    tc_commit();
    float acc[DC / 8][4];
    tc_zero(acc); /* each element is stored (not added to) at kb == last */
    for (int kb = last; kb >= 0; kb--) {
        const uint16_t *sds = tc_smem + ((last - kb) & 1) * STAGE, *sk = sds + TC_BR * SLD;
        if (kb > 0) {
            uint16_t *nds = tc_smem + ((last - kb + 1) & 1) * STAGE;
            tc_load<BQ>(nds, gds + (size_t)(kb - 1) * TILE, BQ, 0, TC_BR, TC_BR);
            tc_load<HS>(nds + TC_BR * SLD, gk, ld3, (kb - 1) * TC_BR, TC_BR, T);
            tc_commit();
            tc_wait<1>();
        } else {
            tc_wait<0>();
        }
        __syncthreads();
        const int k0 = kb * TC_BR;
        float dq[DC / 8][4];
        tc_dq_share<HS, BQ>(dq, sds, sk, i0, k0, mb, cb, T);
#pragma unroll
        for (int n = 0; n < DC / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float x = __fmul_rn(dq[n][e], scale);
                acc[n][e] = kb == last ? x : __fadd_rn(acc[n][e], x);
            }
        __syncthreads(); /* this stage consumed before it is refilled */
    }
    /* already scaled: times 1, exactly */
    tc_store_dq<HS, DC>(dqkv, dqkv_bf, &acc[0][0], (size_t)b * T, i0 + mb * 16 + lane / 4, T, ld3,
                        h, 1.0f, cb * DC);
}

/* ---- tensor-core backward, two passes: dQ -----------------------------------------
 * attention_backward twopass (flash_tc.h): dq in a pass of its own, laid out
 * as the forward (grid (ceil(T / 128), B*NH), 8 warps, block x owns query
 * block x_blocks - 1 - x, warp w rows q0 + 16 w .., lane l rows ia and
 * ib = ia + 8), then flash_tc_bwd_kernel<HS, SPLIT, false> for dk and dv.
 * While the first tiles load, each warp takes D = dO . O of its 16 rows
 * from global memory (bf16, two lanes a row, 16-byte loads; rows past T:
 * 0) and stores it to Dg for the dK/dV pass. Per key tile: S = Q K^T and
 * dP = dO V^T (the Q and dO fragments in registers, K and V as B from
 * their (key, dim) = (n, k) tiles), P = exp2(S scale2 - lse2_i) (0 where
 * j > i or past T), dS = P (dP - D_i), then dq += dS K with dS packed
 * from the registers as the forward packs P, and K (k, n) through
 * ldmatrix .trans as the forward reads V. Each dq row is one warp's, its
 * key tiles summed in order: the same bits every run, no atomics, no
 * turns, no waiting on other blocks. The forward's skips apply: a warp
 * whose rows all precede a tile skips it, and 16-key groups without a
 * valid pair stay out of the products (their dS is 0). */
template <int HS>
__global__ void __launch_bounds__(TC_FWD_THREADS, HS <= 64 ? 2 : 1)
    flash_tc_dq_kernel(float *dqkv, uint16_t *dqkv_bf, float *Dg, const uint16_t *dob,
                       const uint16_t *ob, const uint16_t *qkv, const float *lse, int T, int C,
                       int NH, float scale, float scale2)
{
    constexpr int LD = HS + GPT_FLASH_TC_PAD, TILE = TC_BC * LD;
    extern __shared__ __align__(16) uint16_t tc_smem[];
    /* Q, dO (128 rows each), then stage s's K at skv + 2 s TILE, V after. */
    uint16_t *sq = tc_smem, *sdo = sq + TC_FWD_BR * LD, *skv = sdo + TC_FWD_BR * LD;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * TC_FWD_BR;
    const int warp = threadIdx.x / FA_WARP, lane = threadIdx.x % FA_WARP;
    const size_t ld3 = 3 * (size_t)C;
    const uint16_t *gq = qkv + (size_t)b * T * ld3 + (size_t)h * HS, *gk = gq + C, *gv = gq + 2 * C;
    const uint16_t *gdo = dob + (size_t)b * T * C + (size_t)h * HS;
    const uint16_t *go = ob + (size_t)b * T * C + (size_t)h * HS;
    int kt0, nkt;
    gpt_flash_tc_kv_span(q0, T, &kt0, &nkt);

    tc_load<HS>(sq, gq, ld3, q0, TC_FWD_BR, T);
    tc_load<HS>(sdo, gdo, C, q0, TC_FWD_BR, T);
    tc_load<HS>(skv, gk, ld3, 0, TC_BC, T);
    tc_load<HS>(skv + TILE, gv, ld3, 0, TC_BC, T);
    tc_commit();

    const int wr = warp * TC_WR, ia = q0 + wr + lane / 4, ib = ia + 8;
    float dr[2], lr[2]; /* D and lse2 of rows ia, ib */
    tc_dq_rows<HS>(dr, lr, Dg, gdo, go, lse, (size_t)bh * T, q0 + wr, T, C);

    uint32_t qf[HS / 16][4], df[HS / 16][4];
    float dq[HS / 8][4];
    tc_zero(dq);

    for (int kt = kt0; kt < nkt; kt++) {
        const int k0 = kt * TC_BC;
        const uint16_t *sk = tc_kv_stage<HS>(skv, gk, gv, ld3, kt, kt0, nkt, T), *sv = sk + TILE;
        if (kt == kt0) {
#pragma unroll
            for (int ks = 0; ks < HS / 16; ks++) {
                tc_ld_a(qf[ks], sq, LD, wr, ks * 16);
                tc_ld_a(df[ks], sdo, LD, wr, ks * 16);
            }
        }
        /* The tile's keys in two halves of KP, one after the other: S and
         * dP of a half (8 accumulators each per thread, not 16: with dq's
         * and the Q and dO fragments, two blocks of 256 threads fit an
         * SM's registers), then its dS into dq. */
        constexpr int KP = TC_BC / 2;
#pragma unroll
        for (int part = 0; part < 2; part++) {
            const int j0 = k0 + part * KP; /* the half's first key */
            if (!gpt_flash_tc_live(q0 + wr, j0, T))
                continue; /* warp-uniform: none of these rows meets the half */
            float s[KP / 8][4], dp[KP / 8][4];
            tc_zero(s);
            tc_zero(dp);
#pragma unroll
            for (int ks = 0; ks < HS / 16; ks++) {
#pragma unroll
                for (int np = 0; np < KP / 16; np++) {
                    if (!gpt_flash_tc_live(q0 + wr, j0 + np * 16, T))
                        continue; /* masked below: dS 0 */
                    uint32_t kb[4], vb[4];
                    tc_ld_b(kb, sk, LD, part * KP + np * 16, ks * 16);
                    tc_ld_b(vb, sv, LD, part * KP + np * 16, ks * 16);
                    tc_mma(s[2 * np], qf[ks], kb[0], kb[1]);
                    tc_mma(s[2 * np + 1], qf[ks], kb[2], kb[3]);
                    tc_mma(dp[2 * np], df[ks], vb[0], vb[1]);
                    tc_mma(dp[2 * np + 1], df[ks], vb[2], vb[3]);
                }
            }
            const bool mask = gpt_flash_tc_needs_mask(q0 + wr, TC_WR, j0, KP, T);
#pragma unroll
            for (int n = 0; n < KP / 8; n++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = e / 2, i = r ? ib : ia, j = j0 + n * 8 + 2 * (lane % 4) + (e & 1);
                    float p = cu_exp2_ftz(s[n][e] * scale2 - lr[r]);
                    if (mask && (j > i || i >= T || j >= T))
                        p = 0.0f;
                    s[n][e] = p * (dp[n][e] - dr[r]); /* dS */
                }
            }
#pragma unroll
            for (int kk = 0; kk < KP / 16; kk++) {
                if (!gpt_flash_tc_live(q0 + wr, j0 + kk * 16, T))
                    continue;
                uint32_t da[4];
                tc_pack_a(da, s, kk);
#pragma unroll
                for (int dd = 0; dd < HS / 16; dd++) {
                    uint32_t kb4[4];
                    tc_ld_bt(kb4, sk, LD, part * KP + kk * 16, dd * 16);
                    tc_mma(dq[2 * dd], da, kb4[0], kb4[1]);
                    tc_mma(dq[2 * dd + 1], da, kb4[2], kb4[3]);
                }
            }
        }
        __syncthreads(); /* this stage is consumed before it is refilled */
    }
    tc_store_dq<HS>(dqkv, dqkv_bf, &dq[0][0], (size_t)b * T, ia, T, ld3, h, scale);
}

/* ---- launchers ------------------------------------------------------------------ */

static bool tc_aligned(const void *p, size_t a)
{
    return p == NULL || (uintptr_t)p % a == 0;
}

/* The tensor-core kernels run when q, k, v come as bf16 (the backend's
 * bf16 mode), the head size is one they are compiled for, and the
 * pointers allow their vector accesses: 16 bytes for cp.async sources,
 * 8 for float2, 4 for bf16 pairs. The backward also needs out as bf16 (it
 * streams it for D). Anything else takes the CUDA-core kernels, whose
 * saved state (the logsumexp) is the same, so a forward and a backward
 * may differ in path. */
static bool tc_forward_ok(const struct gpt_cuda_attn_plan *p, const float *out,
                          const uint16_t *out_bf, const uint16_t *qkv_bf)
{
    return qkv_bf && gpt_flash_tc_applies(p->hs) && tc_aligned(qkv_bf, 16) && tc_aligned(out, 8) &&
           tc_aligned(out_bf, 4) && p->q_tiles <= GPT_CUDA_MAX_GRID;
}

static bool tc_backward_ok(const struct gpt_cuda_attn_plan *p, const float *dqkv,
                           const uint16_t *dqkv_bf, const uint16_t *out_bf, const uint16_t *qkv_bf,
                           const uint16_t *dob)
{
    return p->tc && qkv_bf && out_bf && gpt_flash_tc_applies(p->hs) && tc_aligned(qkv_bf, 16) &&
           tc_aligned(dqkv, 8) && tc_aligned(dqkv_bf, 4) && tc_aligned(out_bf, 16) &&
           tc_aligned(dob, 16) && p->q_tiles <= GPT_CUDA_MAX_GRID;
}

/* Tensor-core passes launched in this process (forward and backward
 * each count one), for tests that must know the fast path ran. */
static std::atomic<uint64_t> tc_launches{0};

extern "C" uint64_t gpt_cuda_flash_tc_launches(void)
{
    return tc_launches.load(std::memory_order_relaxed);
}

/* The backward's variants, chosen by trainer.attention_backward (the
 * plan's attn_bwd): "twopass" (default: what the last GPU run passed): a dQ
 * pass, then the dK/dV pass without the ordered dQ shares (flash_tc.h);
 * "ds": the fused pass with its dS^T tiles stored in place of the
 * ordered dQ shares, then flash_tc_dsq_kernel (in chunks of (b, h)
 * pairs, gpt_flash_tc_ds_chunk; twopass where not one pair's tiles
 * fit); "fused": one pass, its dQ
 * shares added in turn; "split": the fused pass's tiles in two query
 * parts, three blocks per multiprocessor instead of two (head sizes up to
 * 64; the fused pass's bits). The first H200 runs measured the fused pass
 * at 12% occupancy and latency-bound (81% of cycles without an eligible
 * warp, 40% of stalls on the dQ turns' L2 traffic), 456 us a call at
 * B=4 against the two passes' 118 + 161 (third run, ncu); "twopass4":
 * the two passes with the dK/dV pass at four blocks of 4 warps per SM
 * instead of three up to hs 64 (__launch_bounds__ caps it at 128
 * registers, no spills; the PTX is the three-block kernel's, so the same
 * bits), for the next GPU run to time: ncu found that pass latency-bound
 * at 16% occupancy.
 * The forward's (trainer.attention_forward): auto or "m16", 8 warps of one m16 tile; "m32"
 * (flash_tc_forward_kernel's MT 2; head sizes up to 64), 4 warps of two
 * (the third run: 137 us a call at B=4 against m16's 87, 219 registers
 * and half the warps); "k32" (KS 2, up to hs 64), 8 warps of one m16 tile
 * taking each 64-key tile in two steps of 32 keys, capped at 80
 * registers for three blocks per SM (not yet timed).
 * tests/gpu/acceptance.sh checks and times each variant. */
/* Tests' choices (gpt_cuda_flash_tc_set_variants; -1: none), which win
 * over the plan's; tc_bwd_fell: the guard's fall-back to the reference,
 * which wins over every choice. */
static std::atomic<int> tc_fwd_v{-1}, tc_bwd_v{-1};
static std::atomic<bool> tc_bwd_fell{false};

/* The forward variant of plan p: a test's, else the backend's (attn_fwd's
 * values are enum gpt_flash_fwd's), else the default. */
static int tc_fwd_mode(const struct gpt_cuda_attn_plan *p)
{
    int v = tc_fwd_v.load(std::memory_order_relaxed);
    return v >= 0 ? v : gpt_flash_tc_fwd_of_spec(p->attn_fwd);
}

/* The backward's, likewise (attn_bwd is enum gpt_flash_bwd + 1). */
static enum gpt_flash_bwd tc_bwd_mode(const struct gpt_cuda_attn_plan *p)
{
    if (tc_bwd_fell.load(std::memory_order_relaxed))
        return GPT_FLASH_BWD_FUSED;
    int v = tc_bwd_v.load(std::memory_order_relaxed);
    return v >= 0 ? (enum gpt_flash_bwd)v : gpt_flash_tc_bwd_of_spec(p->attn_bwd);
}

extern "C" void gpt_cuda_flash_tc_set_variants(int bwd, int fwd)
{
    tc_bwd_fell.store(false, std::memory_order_relaxed);
    tc_bwd_v.store(bwd, std::memory_order_relaxed);
    tc_fwd_v.store(fwd, std::memory_order_relaxed);
}

static std::atomic<size_t> tc_ds_chunk_max{0}; /* tests: heads per dS chunk, 0 any */

extern "C" void gpt_cuda_flash_tc_set_ds_chunk(size_t heads)
{
    tc_ds_chunk_max.store(heads, std::memory_order_relaxed);
}

/* The warpgroup kernels run: their code is loaded; else says once that
 * the wg variants run the defaults here. */
static bool wg_ready(void)
{
    static std::atomic<bool> said{false};
    if (gpt_cuda_flash_wg_live())
        return true;
    if (!said.exchange(true))
        fprintf(stderr, "gptd: the wg attention variants need the sm_90a build of the attention "
                        "kernels, which this GPU did not load: running the defaults\n");
    return false;
}

template <int HS, int SPLIT>
static cudaError_t tc_bwd_launch(cudaStream_t s, dim3 grid, size_t smem, float *dqkv,
                                 uint16_t *dqkv_bf, int *sem, size_t nsem, const uint16_t *dob,
                                 const uint16_t *out_bf, const uint16_t *qkv_bf, const float *lse,
                                 int T, int C, int NH, float scale, float scale2)
{
    /* tc_backward opted the one-part kernel in before anything was
     * enqueued; the split kernel's opt-in is its own, and three of its
     * blocks need the largest shared-memory carve-out (a refusal of that
     * only costs the third block). */
    if (SPLIT > 1) {
        cudaError_t e = fa_smem_optin(flash_tc_bwd_kernel<HS, SPLIT, true>, smem);
        if (e != cudaSuccess)
            return e;
        (void)cudaFuncSetAttribute(flash_tc_bwd_kernel<HS, SPLIT, true>,
                                   cudaFuncAttributePreferredSharedMemoryCarveout,
                                   cudaSharedmemCarveoutMaxShared);
        (void)cudaGetLastError();
    }
    flash_tc_bwd_kernel<HS, SPLIT, true><<<grid, TC_THREADS, smem, s>>>(
        dqkv, dqkv_bf, sem, nsem, NULL, 0, NULL, dob, out_bf, qkv_bf, lse, T, C, NH, scale, scale2);
    return cudaSuccess;
}

/* The two-pass backward: both kernels' opt-ins first (a refusal leaves
 * nothing launched), dout's bf16 copy (unless dob_in), the dQ pass (it
 * writes D to Dv), then the dK/dV pass: in two query parts up to head
 * size 64, so that three of its blocks fit an SM (registers and the
 * largest shared-memory carve-out; a refused carve-out only costs the
 * third block). */
template <int HS>
static cudaError_t tc_backward_twopass(cudaStream_t s, enum gpt_flash_bwd mode,
                                       const struct gpt_cuda_attn_plan *p, float *dqkv,
                                       uint16_t *dqkv_bf, float *Dv, uint16_t *dob, bool dob_in,
                                       const float *dout, const uint16_t *out_bf,
                                       const uint16_t *qkv_bf, const float *lse, size_t B, size_t T,
                                       size_t C, size_t NH)
{
    constexpr int SPLIT = HS <= 64 ? 2 : 1;
    auto *dkv = flash_tc_bwd_kernel<HS, SPLIT, false>;
    if constexpr (SPLIT > 1) /* attention_backward twopass4: four dK/dV blocks per SM */
        if (mode == GPT_FLASH_BWD_TWOPASS4)
            dkv = flash_tc_bwd_kernel<HS, SPLIT, false, 4>;
    int t = (int)T, c = (int)C, nh = (int)NH;
    float scale = 1.0f / sqrtf((float)HS), scale2 = scale * GPT_FLASH_LOG2E;
    cudaError_t e;
    /* attention_backward wg: both passes on wgmma (head size 64) */
    if (HS == GPT_FLASH_WG_HS && mode == GPT_FLASH_BWD_WG && wg_ready()) {
        if ((e = cuk_flash_wg_backward(s, (unsigned)p->bh, dqkv, dqkv_bf, Dv, dob,
                                       dob_in ? NULL : dout, out_bf, qkv_bf, lse, t, c, nh, scale,
                                       scale2)) != cudaSuccess)
            return e;
        tc_launches.fetch_add(1, std::memory_order_relaxed);
        return cudaSuccess;
    }
    const size_t smem_dq = gpt_flash_tc_smem_dq(HS), smem_dkv = gpt_flash_tc_smem_dkv(HS);
    if ((e = fa_smem_optin(flash_tc_dq_kernel<HS>, smem_dq)) != cudaSuccess ||
        (e = fa_smem_optin(dkv, smem_dkv)) != cudaSuccess)
        return e;
    if (SPLIT > 1) {
        (void)cudaFuncSetAttribute(dkv, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   cudaSharedmemCarveoutMaxShared);
        (void)cudaGetLastError();
    }
    if (!dob_in)
        cuk_f32_to_bf16(s, dob, dout, B * T * C);
    dim3 gq((unsigned)((T + TC_FWD_BR - 1) / TC_FWD_BR), p->bh);
    dim3 gk((unsigned)((T + TC_BR - 1) / TC_BR), p->bh);
    flash_tc_dq_kernel<HS><<<gq, TC_FWD_THREADS, smem_dq, s>>>(
        dqkv, dqkv_bf, Dv, dob, out_bf, qkv_bf, lse, t, c, nh, scale, scale2);
    dkv<<<gk, TC_THREADS, smem_dkv, s>>>(dqkv, dqkv_bf, NULL, 0, NULL, 0, Dv, dob, out_bf, qkv_bf,
                                         lse, t, c, nh, scale, scale2);
    tc_launches.fetch_add(1, std::memory_order_relaxed);
    return cudaSuccess;
}

/* The dS backward (flash_tc.h): both passes' opt-ins first (a refusal
 * leaves nothing launched), dout's bf16 copy (unless dob_in), pass one
 * (in two query parts up to head size 64, three blocks per SM, as
 * "split"; its dS^T tiles to dsg), then pass two, the dQ sums. */
template <int HS>
static cudaError_t tc_backward_ds(cudaStream_t s, const struct gpt_cuda_attn_plan *p, float *dqkv,
                                  uint16_t *dqkv_bf, uint16_t *dsg, uint16_t *dob, bool dob_in,
                                  const float *dout, const uint16_t *out_bf, const uint16_t *qkv_bf,
                                  const float *lse, size_t B, size_t T, size_t C, size_t NH)
{
    constexpr int SPLIT = HS <= 64 ? 2 : 1;
    auto *one = flash_tc_bwd_kernel<HS, SPLIT, true, (SPLIT > 1 ? 3 : 0), true>;
    auto *two = flash_tc_dsq_kernel<HS>;
    const size_t smem1 = gpt_flash_tc_smem_bwd(HS), smem2 = gpt_flash_tc_smem_dsq(HS);
    cudaError_t e;
    if ((e = fa_smem_optin(one, smem1)) != cudaSuccess ||
        (e = fa_smem_optin(two, smem2)) != cudaSuccess)
        return e;
    if (SPLIT > 1) { /* three blocks need the largest carve-out; a refusal costs the third */
        (void)cudaFuncSetAttribute(one, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   cudaSharedmemCarveoutMaxShared);
        (void)cudaGetLastError();
    }
    if (!dob_in)
        cuk_f32_to_bf16(s, dob, dout, B * T * C);
    int t = (int)T, c = (int)C, nh = (int)NH;
    float scale = 1.0f / sqrtf((float)HS), scale2 = scale * GPT_FLASH_LOG2E;
    /* chunks of (b, h) pairs whose tiles fit the reserve, one after the
     * other on the stream: chunk n + 1's pass one overwrites the tiles
     * only after chunk n's pass two has read them */
    unsigned chunk = (unsigned)gpt_flash_tc_ds_chunk(p->bh, t, HS);
    const size_t most = tc_ds_chunk_max.load(std::memory_order_relaxed); /* tests */
    if (most > 0 && most < chunk)
        chunk = (unsigned)most; /* fewer heads: less of the reserve */
    for (unsigned bh0 = 0; bh0 < p->bh; bh0 += chunk) {
        const unsigned n = p->bh - bh0 < chunk ? p->bh - bh0 : chunk;
        dim3 gk((unsigned)((T + TC_BR - 1) / TC_BR), n),
            gq((unsigned)gpt_flash_tc_q_tiles(T, HS), n);
        one<<<gk, TC_THREADS, smem1, s>>>(dqkv, dqkv_bf, NULL, 0, dsg, (int)bh0, NULL, dob, out_bf,
                                          qkv_bf, lse, t, c, nh, scale, scale2);
        two<<<gq, TC_THREADS, smem2, s>>>(dqkv, dqkv_bf, dsg, (int)bh0, qkv_bf, t, c, nh, scale);
    }
    tc_launches.fetch_add(1, std::memory_order_relaxed);
    return cudaSuccess;
}

/* The backward in variant `mode`: the dS or two-pass backward, or the
 * zeroed dQ turns and block ticket, dout's bf16 copy (unless dob_in: dob
 * is dout's current bf16 copy), then the fused pass (or split); the
 * shared-memory opt-in first, so a refusal leaves nothing launched. */
template <int HS>
static cudaError_t tc_backward(cudaStream_t s, enum gpt_flash_bwd mode,
                               const struct gpt_cuda_attn_plan *p, float *dqkv, uint16_t *dqkv_bf,
                               float *Dv, uint16_t *dob, bool dob_in, int *sem, uint16_t *dsg,
                               const float *dout, const uint16_t *out_bf, const uint16_t *qkv_bf,
                               const float *lse, size_t B, size_t T, size_t C, size_t NH)
{
    /* ds, unless not one (b, h) pair's tiles fit the reserve: twopass */
    if (mode == GPT_FLASH_BWD_DS && dsg && gpt_flash_tc_ds_chunk(p->bh, (int)T, HS) > 0)
        return tc_backward_ds<HS>(s, p, dqkv, dqkv_bf, dsg, dob, dob_in, dout, out_bf, qkv_bf, lse,
                                  B, T, C, NH);
    if (gpt_flash_tc_bwd_twopass(mode) || mode == GPT_FLASH_BWD_DS)
        return tc_backward_twopass<HS>(s, mode, p, dqkv, dqkv_bf, Dv, dob, dob_in, dout, out_bf,
                                       qkv_bf, lse, B, T, C, NH);
    size_t smem = gpt_flash_tc_smem_bwd(HS);
    cudaError_t e = fa_smem_optin(flash_tc_bwd_kernel<HS, 1, true>, smem);
    if (e != cudaSuccess)
        return e;
    int t = (int)T, c = (int)C, nh = (int)NH;
    float scale = 1.0f / sqrtf((float)HS), scale2 = scale * GPT_FLASH_LOG2E;
    size_t nsem = (size_t)p->bh * gpt_flash_tc_q_tiles(T, HS);
    if ((e = cudaMemsetAsync(sem, 0, (nsem + 1) * sizeof(int), s)) != cudaSuccess)
        return e;
    if (!dob_in)
        cuk_f32_to_bf16(s, dob, dout, B * T * C);
    dim3 grid((unsigned)((T + TC_BR - 1) / TC_BR), p->bh);
    if constexpr (HS <= 64) {
        if (mode == GPT_FLASH_BWD_SPLIT)
            e = tc_bwd_launch<HS, 2>(s, grid, smem, dqkv, dqkv_bf, sem, nsem, dob, out_bf, qkv_bf,
                                     lse, t, c, nh, scale, scale2);
        else
            e = tc_bwd_launch<HS, 1>(s, grid, smem, dqkv, dqkv_bf, sem, nsem, dob, out_bf, qkv_bf,
                                     lse, t, c, nh, scale, scale2);
    } else {
        e = tc_bwd_launch<HS, 1>(s, grid, smem, dqkv, dqkv_bf, sem, nsem, dob, out_bf, qkv_bf, lse,
                                 t, c, nh, scale, scale2);
    }
    if (e != cudaSuccess)
        return e;
    tc_launches.fetch_add(1, std::memory_order_relaxed);
    return cudaSuccess;
}

/* The tensor-core forward for head size HS; the error of a refused
 * shared-memory opt-in (then nothing is launched). */
template <int HS>
static cudaError_t tc_forward(cudaStream_t s, int v, dim3 grid, size_t smem, float *out,
                              uint16_t *out_bf, float *lse, const uint16_t *qkv_bf, int T, int C,
                              int NH, float scale2)
{
    auto *k = flash_tc_forward_kernel<HS, 1>;
    unsigned threads = TC_FWD_THREADS;
    bool three = false;
    if constexpr (HS <= 64) { /* the variants' registers fit up to hs 64 */
        if (v == GPT_FLASH_FWD_M32) {
            k = flash_tc_forward_kernel<HS, 2>;
            threads = TC_FWD_THREADS / 2;
        } else if (v == GPT_FLASH_FWD_K32) {
            k = flash_tc_forward_kernel<HS, 1, 2>;
            three = true;
        }
    }
    if constexpr (HS == GPT_FLASH_WG_HS) {
        if (v == GPT_FLASH_FWD_WG && wg_ready()) {
            cudaError_t e =
                cuk_flash_wg_forward(s, grid.y, out, out_bf, lse, qkv_bf, T, C, NH, scale2);
            if (e != cudaSuccess)
                return e;
            tc_launches.fetch_add(1, std::memory_order_relaxed);
            return cudaSuccess;
        }
    }
    cudaError_t e = fa_smem_optin(k, smem);
    if (e != cudaSuccess)
        return e;
    if (three) { /* three blocks need the largest carve-out; a refusal costs the third */
        (void)cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   cudaSharedmemCarveoutMaxShared);
        (void)cudaGetLastError();
    }
    k<<<grid, threads, smem, s>>>(out, out_bf, lse, qkv_bf, T, C, NH, scale2);
    tc_launches.fetch_add(1, std::memory_order_relaxed);
    return cudaSuccess;
}

/* ---- cuDNN's attention (attention_forward cudnn, attention_backward cudnn) ----------
 * cuda_dnn_attn.c builds cuDNN's fused attention graph per shape; here
 * its inputs and outputs are the tensor-core kernels': q, k and v from
 * qkv's bf16 copy, the logsumexp in att, out and dqkv in bf16 (a
 * private bf16 buffer in the plan's workspace where the caller has no
 * copy) and converted to fp32 where the caller wants fp32. Anything
 * cuDNN refuses, and every shape where the library does not load, runs
 * the hand-written default instead. Not yet run on a GPU. */
static std::atomic<uint64_t> dnn_launches{0};
static std::atomic<bool> dnn_bwd_last{false};

extern "C" uint64_t gpt_cuda_flash_dnn_launches(void)
{
    return dnn_launches.load(std::memory_order_relaxed);
}

extern "C" int gpt_cuda_flash_dnn_bwd_last(void)
{
    return dnn_bwd_last.load(std::memory_order_relaxed);
}

static int dnn_alloc(size_t n, void **ret)
{
    return cudaMalloc(ret, n) == cudaSuccess ? 0 : (cudaGetLastError(), -ENOMEM);
}

/* The cached plan for this shape on the current device, or NULL (said
 * once, by cuda_dnn_attn.c or here when the library is missing). */
static struct gpt_cudnn_sdpa_entry *dnn_entry(size_t B, size_t T, size_t C, size_t NH, int bwd)
{
    static std::atomic<bool> said{false};
    struct gpt_err err;
    if (gpt_cudnn_load(&err) < 0) {
        if (!said.exchange(true))
            fprintf(stderr, "gptd: cuDNN attention: %s: running the hand-written kernels\n",
                    err.msg);
        return NULL;
    }
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    struct gpt_cudnn_sdpa_shape sh = {(int64_t)B, (int64_t)T, (int64_t)C, (int64_t)NH, bwd};
    struct gpt_cudnn_sdpa_entry *e = NULL;
    return gpt_cudnn_sdpa_get(&gpt_cudnn, dev, &sh, dnn_alloc, &e) == 0 ? e : NULL;
}

/* What both directions read: q, k and v, the thirds of qkv's rows; O
 * (bf16) and the statistics. */
static struct gpt_cudnn_sdpa_io dnn_io(const uint16_t *qkv_bf, const uint16_t *o_bf,
                                       const float *lse, size_t C)
{
    struct gpt_cudnn_sdpa_io io = {};
    io.ptr[GPT_CUDNN_Q] = qkv_bf;
    io.ptr[GPT_CUDNN_K] = qkv_bf + C;
    io.ptr[GPT_CUDNN_V] = qkv_bf + 2 * C;
    io.ptr[GPT_CUDNN_O] = o_bf;
    io.ptr[GPT_CUDNN_STATS] = lse;
    return io;
}

/* The forward through cuDNN: true when it was enqueued. */
static bool dnn_forward(cudaStream_t s, float *out, uint16_t *out_bf, float *lse,
                        const uint16_t *qkv_bf, size_t B, size_t T, size_t C, size_t NH)
{
    if (!qkv_bf || !tc_aligned(qkv_bf, 16) || !tc_aligned(out_bf, 16) || (C * 2) % 16 != 0)
        return false;
    struct gpt_cudnn_sdpa_entry *e = dnn_entry(B, T, C, NH, 0);
    if (!e)
        return false;
    uint16_t *ob = out_bf ? out_bf : (uint16_t *)((char *)e->workspace + e->extra_off);
    struct gpt_cudnn_sdpa_io io = dnn_io(qkv_bf, ob, lse, C);
    if (gpt_cudnn_sdpa_exec(&gpt_cudnn, e, s, &io) < 0)
        return false;
    if (out)
        cuk_bf16_to_f32(s, out, ob, B * T * C);
    dnn_launches.fetch_add(1, std::memory_order_relaxed);
    tc_launches.fetch_add(1, std::memory_order_relaxed);
    return true;
}

/* The backward through cuDNN: true when it was enqueued. D goes to Dv
 * (the scratch's first B NH T floats, where the two-pass backward keeps
 * it); dout's bf16 copy to dob unless dob_in. */
static bool dnn_backward(cudaStream_t s, float *dqkv, uint16_t *dqkv_bf, float *Dv, uint16_t *dob,
                         bool dob_in, const float *dout, const uint16_t *out_bf,
                         const uint16_t *qkv_bf, const float *lse, size_t B, size_t T, size_t C,
                         size_t NH)
{
    if (!tc_aligned(dqkv_bf, 16) || !tc_aligned(dob, 16) || !tc_aligned(Dv, 16))
        return false;
    struct gpt_cudnn_sdpa_entry *e = dnn_entry(B, T, C, NH, 1);
    if (!e)
        return false;
    uint16_t *db = dqkv_bf ? dqkv_bf : (uint16_t *)((char *)e->workspace + e->extra_off);
    if (!dob_in)
        cuk_f32_to_bf16(s, dob, dout, B * T * C);
    struct gpt_cudnn_sdpa_io io = dnn_io(qkv_bf, out_bf, lse, C);
    io.ptr[GPT_CUDNN_DO] = dob;
    io.ptr[GPT_CUDNN_DQ] = db;
    io.ptr[GPT_CUDNN_DK] = db + C;
    io.ptr[GPT_CUDNN_DV] = db + 2 * C;
    io.ptr[GPT_CUDNN_DSUM] = Dv;
    if (gpt_cudnn_sdpa_exec(&gpt_cudnn, e, s, &io) < 0)
        return false;
    cuk_bf16_to_f32(s, dqkv, db, B * T * 3 * C);
    dnn_launches.fetch_add(1, std::memory_order_relaxed);
    tc_launches.fetch_add(1, std::memory_order_relaxed);
    return true;
}

cudaError_t cuk_flash_forward(cudaStream_t s, const struct gpt_cuda_attn_plan *p, float *out,
                              uint16_t *out_bf, float *att, const float *qkv,
                              const uint16_t *qkv_bf, size_t B, size_t T, size_t C, size_t NH)
{
    float *lse = att;
    float scale = 1.0f / sqrtf((float)p->hs);
    int t = (int)T, c = (int)C, nh = (int)NH, hs = (int)p->hs;
    cudaError_t e;
    if (tc_forward_ok(p, out, out_bf, qkv_bf)) {
        const int v = tc_fwd_mode(p);
        if (v == GPT_FLASH_FWD_CUDNN && dnn_forward(s, out, out_bf, lse, qkv_bf, B, T, C, NH))
            return cudaSuccess;
        dim3 g((unsigned)((T + TC_FWD_BR - 1) / TC_FWD_BR), p->bh);
        size_t smem = gpt_flash_tc_smem_fwd(p->hs);
        float scale2 = scale * GPT_FLASH_LOG2E;
        e = hs == 32   ? tc_forward<32>(s, v, g, smem, out, out_bf, lse, qkv_bf, t, c, nh, scale2)
            : hs == 64 ? tc_forward<64>(s, v, g, smem, out, out_bf, lse, qkv_bf, t, c, nh, scale2)
            : hs == 96 ? tc_forward<96>(s, v, g, smem, out, out_bf, lse, qkv_bf, t, c, nh, scale2)
                       : tc_forward<128>(s, v, g, smem, out, out_bf, lse, qkv_bf, t, c, nh,
                                         scale2);
        if (e == cudaSuccess)
            return cudaSuccess;
        (void)cudaGetLastError(); /* a refused opt-in: the CUDA-core kernel below */
    }
    return cuk_flash_cc_forward(s, p, out, out_bf, lse, qkv, qkv_bf, T, C, NH);
}

/* tc_backward for the plan's head size. */
static cudaError_t tc_backward_hs(cudaStream_t s, enum gpt_flash_bwd mode,
                                  const struct gpt_cuda_attn_plan *p, float *dqkv,
                                  uint16_t *dqkv_bf, float *Dv, uint16_t *dob, bool dob_in,
                                  int *sem, uint16_t *dsg, const float *dout,
                                  const uint16_t *out_bf, const uint16_t *qkv_bf, const float *lse,
                                  size_t B, size_t T, size_t C, size_t NH)
{
    switch (p->hs) {
    case 32:
        return tc_backward<32>(s, mode, p, dqkv, dqkv_bf, Dv, dob, dob_in, sem, dsg, dout, out_bf,
                               qkv_bf, lse, B, T, C, NH);
    case 64:
        return tc_backward<64>(s, mode, p, dqkv, dqkv_bf, Dv, dob, dob_in, sem, dsg, dout, out_bf,
                               qkv_bf, lse, B, T, C, NH);
    case 96:
        return tc_backward<96>(s, mode, p, dqkv, dqkv_bf, Dv, dob, dob_in, sem, dsg, dout, out_bf,
                               qkv_bf, lse, B, T, C, NH);
    default:
        return tc_backward<128>(s, mode, p, dqkv, dqkv_bf, Dv, dob, dob_in, sem, dsg, dout,
                                out_bf, qkv_bf, lse, B, T, C, NH);
    }
}

extern "C" int gpt_cuda_flash_tc_bwd_is_reference(const struct gpt_cuda_attn_plan *p)
{
    return tc_bwd_mode(p) == GPT_FLASH_BWD_FUSED;
}

extern "C" void gpt_cuda_flash_tc_bwd_fall_back(void)
{
    tc_bwd_fell.store(true, std::memory_order_relaxed);
}

cudaError_t cuk_flash_backward_ref(cudaStream_t s, const struct gpt_cuda_attn_plan *p, float *ref,
                                   float *scratch, const float *dout, const uint16_t *dout_bf,
                                   const uint16_t *out_bf, const uint16_t *qkv_bf,
                                   const float *att, size_t B, size_t T, size_t C, size_t NH)
{
    /* The scratch's parts where the whole backward has them (its offsets
     * follow B); the grid's one (b, h) pair is pair 0: batch 0, head 0,
     * whose rows are the first T of every tensor, so dout's bf16 copy
     * needs only batch 0's. */
    bool dob_in = dout_bf != NULL;
    uint16_t *dob =
        dob_in ? (uint16_t *)dout_bf : (uint16_t *)(scratch + gpt_flash_tc_dob_off(p->lse_floats));
    int *sem = (int *)(scratch + gpt_flash_tc_sem_off(p->lse_floats, B * T * C));
    struct gpt_cuda_attn_plan one = *p;
    one.bh = 1;
    if (!tc_backward_ok(&one, ref, NULL, out_bf, qkv_bf, dob))
        return cudaErrorNotSupported;
    cudaError_t e = tc_backward_hs(s, GPT_FLASH_BWD_FUSED, &one, ref, NULL, scratch, dob, dob_in,
                                   sem, NULL, dout, out_bf, qkv_bf, att, 1, T, C, NH);
    if (e == cudaSuccess) /* the count is of the backend's own passes (tests) */
        tc_launches.fetch_sub(1, std::memory_order_relaxed);
    return e;
}

cudaError_t cuk_flash_backward(cudaStream_t s, const struct gpt_cuda_attn_plan *p, float *dqkv,
                               uint16_t *dqkv_bf, float *scratch, const float *dout,
                               const uint16_t *dout_bf, const float *out, const uint16_t *out_bf,
                               const float *qkv, const uint16_t *qkv_bf, const float *att, size_t B,
                               size_t T, size_t C, size_t NH)
{
    const float *lse = att;
    float *Dv = scratch;
    bool dob_in = dout_bf != NULL;
    uint16_t *dob =
        dob_in ? (uint16_t *)dout_bf : (uint16_t *)(scratch + gpt_flash_tc_dob_off(p->lse_floats));
    int *sem = (int *)(scratch + gpt_flash_tc_sem_off(p->lse_floats, B * T * C));
    /* the dS backward's tiles, where gpt_cuda_plan_att_floats made room */
    uint16_t *dsg = NULL;
    if (p->tc && gpt_flash_tc_applies(p->hs)) {
        const size_t nsem = (size_t)p->bh * gpt_flash_tc_q_tiles(T, p->hs);
        dsg = (uint16_t *)(scratch + gpt_flash_tc_ds_off(p->lse_floats, B * T * C, nsem));
    }
    if (!tc_aligned(dsg, 16)) /* as dob is, when the scratch is */
        dsg = NULL;
    dnn_bwd_last.store(false, std::memory_order_relaxed);
    if (tc_backward_ok(p, dqkv, dqkv_bf, out_bf, qkv_bf, dob)) {
        enum gpt_flash_bwd mode = tc_bwd_mode(p);
        if (mode == GPT_FLASH_BWD_CUDNN) { /* else, or where cuDNN refuses: the default */
            if (dnn_backward(s, dqkv, dqkv_bf, Dv, dob, dob_in, dout, out_bf, qkv_bf, lse, B, T, C,
                             NH)) {
                dnn_bwd_last.store(true, std::memory_order_relaxed);
                return cudaSuccess;
            }
            mode = GPT_FLASH_BWD_DEFAULT;
        }
        cudaError_t e = tc_backward_hs(s, mode, p, dqkv, dqkv_bf, Dv, dob, dob_in, sem, dsg, dout,
                                       out_bf, qkv_bf, lse, B, T, C, NH);
        if (e == cudaSuccess)
            return cudaSuccess;
        (void)cudaGetLastError(); /* a refused opt-in: the CUDA-core kernels below */
    }
    if (dob_in || out_bf) /* the CUDA-core kernels read dout and out as fp32: the caller's turn */
        return cudaErrorNotSupported;
    return cuk_flash_cc_backward(s, p, dqkv, dqkv_bf, Dv, dout, out, qkv, qkv_bf, lse, T, C, NH);
}
