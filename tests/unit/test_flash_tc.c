/*
 * test_flash_tc: the blocked algorithm of the tensor-core flash attention
 * kernels (engine/ops/cuda/cuda_attention.cu), emulated in C with the
 * kernels' own tiling and softmax helpers (engine/include/flash_tc.h), checked
 * against naive causal attention in double, forward (out, logsumexp) and
 * backward (dq, dk, dv: one fused pass, dq added in the kernels' fixed turn
 * order), for T around and between the tile sizes and head sizes 32, 64,
 * 96 and 128. The emulation walks the same blocks, warps and
 * streamed tiles in the same order as the kernels, zero-fills rows past T
 * as cp.async does, applies the per-element mask only where
 * gpt_flash_tc_needs_mask says so (and asserts that every pair of a tile it
 * calls unmasked is valid), skips the 16 x 16 groups gpt_flash_tc_live
 * calls dead (asserting they hold no valid pair), and counts every (query,
 * key) pair it uses: each
 * causal pair exactly once per pass, and as many computed pairs as the cost
 * model's gpt_flash_tc_pairs. The two-pass backward (attention_backward twopass)
 * is emulated as well: its dQ pass (the forward's blocks, D once per row,
 * key tiles in two halves) against the reference, and its dK/dV pass
 * (the fused pass without the dQ shares, D from the dQ pass) against the
 * fused pass's dk and dv, bit for bit. The backward's dQ adds run under a random
 * interleaving of the blocks and under lock-step rounds (where no block
 * may wait for its turn): same bits either way. The backward takes each
 * query tile's D = dO . O on every visit from the bf16 dO and the forward's
 * bf16 output, as the kernel does (FlashAttention-2's row term), and
 * counts those row sums against the cost model's. With bf16 rounding on
 * (inputs, P and dS before their products, dout and out for the backward,
 * as the kernels round) it must stay within bf16 tolerance of the
 * reference; with rounding off, within fp32 rounding. No GPU needed: the
 * PTX is tested by tests/gpu/test_gpu_ops.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "cuda/gpt_bf16.h"
#include "flash_tc.h"

#define PADROWS 128 /* zero rows past T: the widest tile that can overhang */

struct head {
    int T, hs, round;
    /* (T + PADROWS) x hs each, rows >= T zero */
    float *q, *k, *v, *dout;
    /* naive reference (double) */
    double *ref_out, *ref_lse, *ref_dq, *ref_dk, *ref_dv;
    /* emulated kernels */
    float *out, *lse, *D, *dob, *ob, *dq, *dk, *dv;
    int *seen;     /* T x T visit counts of one pass */
    double d_rows; /* rows whose D the backward summed, all visits */
};

static float rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}

static float bf(float x)
{
    return gpt_bf16_to_float(gpt_bf16_from_float_rne(x));
}

/* x as the kernels feed it to a tensor-core product. */
static float op(const struct head *h, float x)
{
    return h->round ? bf(x) : x;
}

static float dotf(const float *a, const float *b, int n)
{
    float s = 0;
    for (int d = 0; d < n; d++)
        s += a[d] * b[d];
    return s;
}

static void head_init(struct head *h, int T, int hs, int round, uint64_t seed)
{
    size_t n = (size_t)(T + PADROWS) * hs;
    h->T = T;
    h->hs = hs;
    h->round = round;
    h->d_rows = 0;
    float **in[] = {&h->q,   &h->k,  &h->v,  &h->dout, &h->out,
                    &h->dob, &h->ob, &h->dq, &h->dk,   &h->dv};
    for (size_t a = 0; a < sizeof(in) / sizeof(in[0]); a++) {
        *in[a] = calloc(n, sizeof(float));
        assert_non_null(*in[a]);
    }
    double **rf[] = {&h->ref_out, &h->ref_dq, &h->ref_dk, &h->ref_dv};
    for (size_t a = 0; a < sizeof(rf) / sizeof(rf[0]); a++) {
        *rf[a] = calloc(n, sizeof(double));
        assert_non_null(*rf[a]);
    }
    h->ref_lse = calloc((size_t)T, sizeof(double));
    h->lse = calloc((size_t)T, sizeof(float));
    h->D = calloc((size_t)T + PADROWS, sizeof(float));
    h->seen = calloc((size_t)T * T, sizeof(int));
    assert_non_null(h->ref_lse);
    assert_non_null(h->lse);
    assert_non_null(h->D);
    assert_non_null(h->seen);
    /* Larger q and k than unit scale, so the softmax is far from uniform. */
    for (size_t i = 0; i < (size_t)T * hs; i++) {
        h->q[i] = op(h, 2.0f * rnd(&seed));
        h->k[i] = op(h, 2.0f * rnd(&seed));
        h->v[i] = op(h, rnd(&seed));
        h->dout[i] = rnd(&seed);
    }
}

static void head_done(struct head *h)
{
    void *all[] = {h->q,      h->k,      h->v,       h->dout, h->out,     h->dob,
                   h->ob,     h->dq,     h->dk,      h->dv,   h->ref_out, h->ref_dq,
                   h->ref_dk, h->ref_dv, h->ref_lse, h->lse,  h->D,       h->seen};
    for (size_t a = 0; a < sizeof(all) / sizeof(all[0]); a++)
        free(all[a]);
}

/* Naive causal attention in double on the (already rounded) inputs. */
static void reference(struct head *h)
{
    int T = h->T, hs = h->hs;
    double scale = 1.0 / sqrt((double)hs);
    double *p = calloc((size_t)T, sizeof(double)), *dp = calloc((size_t)T, sizeof(double));
    assert_non_null(p);
    assert_non_null(dp);
    for (int i = 0; i < T; i++) {
        double mx = -INFINITY, sum = 0, Di = 0;
        for (int j = 0; j <= i; j++) {
            double s = 0;
            for (int d = 0; d < hs; d++)
                s += (double)h->q[i * hs + d] * h->k[j * hs + d];
            p[j] = s * scale;
            mx = fmax(mx, p[j]);
        }
        for (int j = 0; j <= i; j++)
            sum += (p[j] = exp(p[j] - mx));
        h->ref_lse[i] = mx + log(sum);
        for (int j = 0; j <= i; j++) {
            p[j] /= sum;
            dp[j] = 0;
            for (int d = 0; d < hs; d++) {
                h->ref_out[i * hs + d] += p[j] * h->v[j * hs + d];
                dp[j] += (double)h->dout[i * hs + d] * h->v[j * hs + d];
            }
            Di += p[j] * dp[j];
        }
        for (int j = 0; j <= i; j++) {
            double ds = p[j] * (dp[j] - Di);
            for (int d = 0; d < hs; d++) {
                h->ref_dq[i * hs + d] += scale * ds * h->k[j * hs + d];
                h->ref_dk[j * hs + d] += scale * ds * h->q[i * hs + d];
                h->ref_dv[j * hs + d] += p[j] * h->dout[i * hs + d];
            }
        }
    }
    free(p);
    free(dp);
}

/* One (query i, key j) of a streamed tile: asserts the kernels' mask
 * decision and counts the pair. Returns whether it contributes. */
static int pair(struct head *h, int mask, int i, int j)
{
    int valid = j <= i && i < h->T && j < h->T;
    if (!mask)
        assert_true(valid); /* an unmasked tile holds only valid pairs */
    if (valid)
        h->seen[(size_t)i * h->T + j]++;
    return valid;
}

/* A pair in a group the kernels skip: it must not be valid. */
static void dead(const struct head *h, int i, int j)
{
    assert_false(j <= i && i < h->T && j < h->T);
}

/* Every causal pair seen exactly once since the last reset, none other. */
static void check_seen(struct head *h)
{
    for (int i = 0; i < h->T; i++)
        for (int j = 0; j < h->T; j++)
            assert_int_equal(h->seen[(size_t)i * h->T + j], j <= i ? 1 : 0);
    memset(h->seen, 0, (size_t)h->T * h->T * sizeof(int));
}

/* Row i of a forward-shaped kernel (the forward, the dQ pass): r0 is its
 * warp's first row, [kt0, nkt) the block's key tiles; returns the pairs it
 * computed. */
typedef double (*fwd_row_fn)(struct head *h, int i, int r0, int kt0, int nkt);

/* The forward's layout: blocks of FWD_BR query rows (last tile first),
 * warps of 16 rows, each row of each warp through f; the pairs summed. */
static double for_fwd_rows(struct head *h, fwd_row_fn f)
{
    const int tiles = (h->T + GPT_FLASH_TC_FWD_BR - 1) / GPT_FLASH_TC_FWD_BR;
    double pairs = 0;
    for (int bx = 0; bx < tiles; bx++) {
        const int q0 = (tiles - 1 - bx) * GPT_FLASH_TC_FWD_BR;
        int kt0, nkt;
        gpt_flash_tc_kv_span(q0, h->T, &kt0, &nkt);
        for (int w = 0; w < GPT_FLASH_TC_FWD_WARPS; w++) {
            const int r0 = q0 + w * GPT_FLASH_TC_WROWS;
            for (int i = r0; i < r0 + GPT_FLASH_TC_WROWS; i++)
                pairs += f(h, i, r0, kt0, nkt);
        }
    }
    return pairs;
}

/* The forward kernel's row: key tiles of the causal span, online softmax. */
static double forward_row(struct head *h, int i, int r0, int kt0, int nkt)
{
    const int T = h->T, hs = h->hs;
    const float scale2 = 1.0f / sqrtf((float)hs) * GPT_FLASH_LOG2E;
    float x[GPT_FLASH_TC_BC];
    double pairs = 0;
    float m = -INFINITY, l = 0, o[128] = {0};
    for (int kt = kt0; kt < nkt; kt++) {
        const int k0 = kt * GPT_FLASH_TC_BC;
        const int mask = gpt_flash_tc_needs_mask(r0, GPT_FLASH_TC_WROWS, k0, GPT_FLASH_TC_BC, T);
        float mx = -INFINITY, sub;
        for (int c = 0; c < GPT_FLASH_TC_BC; c++) {
            const int j = k0 + c;
            if (!gpt_flash_tc_live(r0, k0 + c / 16 * 16, T)) {
                dead(h, i, j); /* skipped: must hold no valid pair */
                x[c] = -INFINITY;
            } else {
                x[c] = dotf(h->q + (size_t)i * hs, h->k + (size_t)j * hs, hs) * scale2;
                if (!pair(h, mask, i, j) && mask)
                    x[c] = -INFINITY;
                pairs++;
            }
            mx = fmaxf(mx, x[c]);
        }
        const float alpha = gpt_flash_tc_rescale(m, mx, &m, &sub);
        l *= alpha;
        for (int d = 0; d < hs; d++)
            o[d] *= alpha;
        for (int c = 0; c < GPT_FLASH_TC_BC; c++) {
            const float p = exp2f(x[c] - sub);
            l += p;
            for (int d = 0; d < hs; d++)
                o[d] += op(h, p) * h->v[(size_t)(k0 + c) * hs + d];
        }
    }
    if (i >= T)
        return pairs;
    for (int d = 0; d < hs; d++)
        h->out[(size_t)i * hs + d] = o[d] / l;
    h->lse[i] = gpt_flash_tc_lse(m, l);
    return pairs;
}

/* The forward kernel: blocks of FWD_BR query rows (last tile first), warps
 * of 16 rows, key tiles of the causal span, online softmax per row. */
static double emulate_forward(struct head *h)
{
    return for_fwd_rows(h, forward_row);
}

/* What the backward reads besides q, k, v: dout as bf16 (its producer's
 * bf16 copy) and the forward's output as bf16 (its bf16 copy). */
static void emulate_bwd_inputs(struct head *h)
{
    for (size_t e = 0; e < (size_t)h->T * h->hs; e++) {
        h->dob[e] = op(h, h->dout[e]);
        h->ob[e] = op(h, h->out[e]);
    }
}

/* The fused backward kernel: key blocks, warps of 16 keys, query tiles of
 * bcq rows from the one holding the block's first key to the end. Per
 * tile: P recomputed from the saved logsumexp, dS = P (dP - D), dv += P^T
 * dO and dk += dS^T q in the warp's registers, and the block's dQ share
 * dS k of the tile (bf16 dS, as the kernel reads it back from shared
 * memory). The shares reach dq in the kernels' turn order, under a
 * schedule: sched 0 runs the blocks in lock-step rounds (every live block
 * one tile per round, in launch order) and asserts that no block ever
 * finds its turn not yet come; any other value is the seed of a random
 * interleaving in which a block whose turn has not come waits, and a
 * state where every live block waits fails the test (deadlock).
 * dq_shares: BWD_SHARES as above; BWD_DKV the two-pass backward's dK/dV
 * pass (no D, no dQ); BWD_DS pass one of the dS backward: D and the bf16
 * dS^T tiles, each stored at its gpt_flash_tc_ds_tile place in ds (and
 * counted in ds_writes), no dQ shares. */
enum { BWD_DKV, BWD_SHARES, BWD_DS };

/* One dQ add, shared by the fused pass's turns and the dS backward's
 * second pass so that both round alike: the first share stores. */
static float dq_add(float dq, float share, float scale, int first)
{
    float add = share * scale;
    return first ? add : dq + add;
}

static double emulate_bwd_ds(struct head *h, uint64_t sched, int dq_shares, float *ds_tiles,
                             int *ds_writes)
{
    const int T = h->T, hs = h->hs, tiles = (T + GPT_FLASH_TC_BR - 1) / GPT_FLASH_TC_BR;
    const int bq = gpt_flash_tc_bcq((size_t)hs), nqt = (int)gpt_flash_tc_q_tiles(T, hs);
    const float scale = 1.0f / sqrtf((float)hs), scale2 = scale * GPT_FLASH_LOG2E;
    const size_t tile = (size_t)bq * hs;
    float *share = calloc((size_t)tiles * nqt * tile, sizeof(float));
    int *turn = calloc((size_t)nqt, sizeof(int)), *cur = calloc((size_t)tiles, sizeof(int));
    assert_non_null(share);
    assert_non_null(turn);
    assert_non_null(cur);
    double pairs = 0;
    for (int kb = 0; kb < tiles; kb++) {
        const int k0 = kb * GPT_FLASH_TC_BR;
        int qt0, nq;
        gpt_flash_tc_q_span(k0, T, bq, &qt0, &nq);
        assert_int_equal(nq, nqt);
        cur[kb] = qt0;
        /* Each visit of a query tile first sums its rows' D = dO . O
         * (rows past T are zero-filled: D 0). The dK/dV pass of two reads
         * D as the dQ pass left it. */
        for (int qt = qt0; dq_shares && qt < nqt; qt++)
            for (int i = qt * bq; i < (qt + 1) * bq; i++, h->d_rows++)
                h->D[i] = dotf(h->dob + (size_t)i * hs, h->ob + (size_t)i * hs, hs);
        for (int w = 0; w < GPT_FLASH_TC_WARPS; w++) {
            const int r0 = k0 + w * GPT_FLASH_TC_WROWS;
            for (int j = r0; j < r0 + GPT_FLASH_TC_WROWS; j++) {
                const float *kj = h->k + (size_t)j * hs, *vj = h->v + (size_t)j * hs;
                float dk[128] = {0}, dv[128] = {0};
                for (int qt = qt0; qt < nqt; qt++) {
                    const int i0 = qt * bq;
                    const int mask = gpt_flash_tc_needs_mask(i0, bq, r0, GPT_FLASH_TC_WROWS, T);
                    float *sh = share + ((size_t)kb * nqt + qt) * tile;
                    for (int c = 0; c < bq; c++) {
                        const int i = i0 + c;
                        if (!gpt_flash_tc_live(i0 + c / 16 * 16, r0, T)) {
                            dead(h, i, j); /* skipped: P and dS are 0 */
                            continue;
                        }
                        pairs++;
                        const float *qi = h->q + (size_t)i * hs, *doi = h->dob + (size_t)i * hs;
                        const float l2 = i < T ? h->lse[i] * GPT_FLASH_LOG2E : 0;
                        const float Di = i < T ? h->D[i] : 0;
                        float p = exp2f(dotf(kj, qi, hs) * scale2 - l2);
                        if (!pair(h, mask, i, j) && mask)
                            p = 0;
                        float ds = p * (dotf(vj, doi, hs) - Di), pr = op(h, p), dsr = op(h, ds);
                        for (int d = 0; d < hs; d++) {
                            dv[d] += pr * doi[d];
                            dk[d] += dsr * qi[d];
                            if (dq_shares == BWD_SHARES)
                                sh[(size_t)c * hs + d] += dsr * kj[d];
                        }
                        if (dq_shares == BWD_DS) {
                            size_t t = gpt_flash_tc_ds_tile(qt, kb, bq);
                            assert_true(t < gpt_flash_tc_ds_tiles(T, (size_t)hs));
                            ds_tiles[(t * GPT_FLASH_TC_BR + (size_t)(j - k0)) * bq + c] = dsr;
                            if (j == k0 && c == 0)
                                ds_writes[t]++;
                        }
                    }
                }
                if (j < T)
                    for (int d = 0; d < hs; d++) {
                        h->dk[(size_t)j * hs + d] = dk[d] * scale;
                        h->dv[(size_t)j * hs + d] = dv[d];
                    }
            }
        }
    }
    /* The ordered dQ adds: the turn's first share stores, the others
     * load, add and store; the counter then passes the turn on. */
    for (int live = dq_shares == BWD_SHARES ? tiles : 0; live > 0;) {
        int ready[64], n = 0, waiting = 0;
        for (int x = 0; x < tiles; x++) { /* launch order: kb = tiles - 1 - x */
            const int kb = tiles - 1 - x;
            if (cur[kb] >= nqt)
                continue;
            if (turn[cur[kb]] == gpt_flash_tc_dq_turn(kb, cur[kb], bq, T))
                ready[n++] = kb;
            else
                waiting++;
        }
        if (sched == 0)
            assert_int_equal(waiting, 0); /* lock-step: nobody waits */
        assert_true(n > 0);               /* otherwise: deadlock */
        int from = 0, to = n;
        if (sched != 0) { /* one random ready block advances */
            from = (int)((rnd(&sched) + 1.0f) * 0.5f * (float)n);
            from = from >= n ? n - 1 : from;
            to = from + 1;
        }
        for (int r = from; r < to; r++) {
            const int kb = ready[r], qt = cur[kb], i0 = qt * bq;
            const float *sh = share + ((size_t)kb * nqt + qt) * tile;
            for (int c = 0; c < bq && i0 + c < T; c++)
                for (int d = 0; d < hs; d++) {
                    float *dq = h->dq + (size_t)(i0 + c) * hs + d;
                    *dq = dq_add(*dq, sh[(size_t)c * hs + d], scale, turn[qt] == 0);
                }
            turn[qt]++;
            if (kb == 0) /* the last share: every visitor has added */
                assert_int_equal(turn[qt], gpt_flash_tc_dq_last_kb(qt, bq, T) + 1);
            if (++cur[kb] == nqt)
                live--;
        }
    }
    for (int qt = 0; dq_shares == BWD_SHARES && qt < nqt; qt++)
        assert_int_equal(turn[qt], gpt_flash_tc_dq_last_kb(qt, bq, T) + 1);
    free(share);
    free(turn);
    free(cur);
    return pairs;
}

static double emulate_bwd(struct head *h, uint64_t sched, int dq_shares)
{
    return emulate_bwd_ds(h, sched, dq_shares, NULL, NULL);
}

/* The dS backward's second pass: per query tile (last first), its key
 * blocks from the diagonal one down to 0, each share dS K summed as the
 * fused pass sums it (warps in order, each warp's 16 keys in order,
 * skipping the groups it skips) from the stored tile, then added. */
static void emulate_dsq(struct head *h, const float *ds)
{
    const int T = h->T, hs = h->hs, bq = gpt_flash_tc_bcq((size_t)hs);
    const int nqt = (int)gpt_flash_tc_q_tiles(T, hs);
    const float scale = 1.0f / sqrtf((float)hs);
    float *sh = malloc((size_t)bq * hs * sizeof(float));
    assert_non_null(sh);
    for (int qt = nqt - 1; qt >= 0; qt--) {
        const int i0 = qt * bq, last = gpt_flash_tc_dq_last_kb(qt, bq, T);
        for (int kb = last; kb >= 0; kb--) {
            const int k0 = kb * GPT_FLASH_TC_BR;
            const float *tile = ds + gpt_flash_tc_ds_tile(qt, kb, bq) * GPT_FLASH_TC_BR * bq;
            memset(sh, 0, (size_t)bq * hs * sizeof(float));
            for (int w = 0; w < GPT_FLASH_TC_WARPS; w++) {
                const int r0 = k0 + w * GPT_FLASH_TC_WROWS;
                for (int j = r0; j < r0 + GPT_FLASH_TC_WROWS; j++)
                    for (int c = 0; c < bq; c++) {
                        if (!gpt_flash_tc_live(i0 + c / 16 * 16, r0, T))
                            continue;
                        const float x = tile[(size_t)(j - k0) * bq + c];
                        for (int d = 0; d < hs; d++)
                            sh[(size_t)c * hs + d] += x * h->k[(size_t)j * hs + d];
                    }
            }
            for (int c = 0; c < bq && i0 + c < T; c++)
                for (int d = 0; d < hs; d++) {
                    float *dq = h->dq + (size_t)(i0 + c) * hs + d;
                    *dq = dq_add(*dq, sh[(size_t)c * hs + d], scale, kb == last);
                }
        }
    }
    free(sh);
}

/* The dQ pass's row: D = dO . O (kept for the dK/dV pass), key tiles of
 * the causal span in two halves of BC / 2 keys (a half none of the warp's
 * rows meets is skipped whole), P from the saved logsumexp, dS = P (dP -
 * D) rounded as the kernel packs it, dq += dS k summed over the tiles in
 * order. */
static double dq_row(struct head *h, int i, int r0, int kt0, int nkt)
{
    const int T = h->T, hs = h->hs, kp = GPT_FLASH_TC_BC / 2;
    const float scale = 1.0f / sqrtf((float)hs), scale2 = scale * GPT_FLASH_LOG2E;
    double pairs = 0;
    const float *qi = h->q + (size_t)i * hs, *doi = h->dob + (size_t)i * hs;
    const float Di = i < T ? dotf(doi, h->ob + (size_t)i * hs, hs) : 0;
    const float l2 = i < T ? h->lse[i] * GPT_FLASH_LOG2E : 0;
    float dq[128] = {0};
    if (i < T)
        h->D[i] = Di;
    for (int kt = kt0; kt < nkt; kt++) {
        for (int part = 0; part < 2; part++) {
            const int j0 = kt * GPT_FLASH_TC_BC + part * kp;
            const int mask = gpt_flash_tc_needs_mask(r0, GPT_FLASH_TC_WROWS, j0, kp, T);
            for (int c = 0; c < kp; c++) {
                const int j = j0 + c;
                if (!gpt_flash_tc_live(r0, j0 + c / 16 * 16, T)) {
                    dead(h, i, j);
                    continue;
                }
                pairs++;
                const float *kj = h->k + (size_t)j * hs, *vj = h->v + (size_t)j * hs;
                float p = exp2f(dotf(qi, kj, hs) * scale2 - l2);
                if (!pair(h, mask, i, j) && mask)
                    p = 0;
                const float ds = op(h, p * (dotf(doi, vj, hs) - Di));
                for (int d = 0; d < hs; d++)
                    dq[d] += ds * kj[d];
            }
        }
    }
    if (i < T)
        for (int d = 0; d < hs; d++)
            h->dq[(size_t)i * hs + d] = dq[d] * scale;
    return pairs;
}

/* The two-pass backward's dQ pass: the forward's blocks of FWD_BR query
 * rows and warps of 16, each row as dq_row. */
static double emulate_dq_pass(struct head *h)
{
    return for_fwd_rows(h, dq_row);
}

/* Largest |a - ref| over n, relative to the largest |ref| (at least 1). */
static double max_err(const float *a, const double *ref, size_t n)
{
    double e = 0, big = 1;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= e)) /* NaN counts as the worst */
            e = isnan(d) ? INFINITY : d;
        big = fmax(big, fabs(ref[i]));
    }
    return e / big;
}

static void run_case(int T, int hs, int round)
{
    struct head h;
    head_init(&h, T, hs, round, 0x9e3779b97f4a7c15ull ^ (uint64_t)(T * 131 + hs));
    reference(&h);
    double pf = emulate_forward(&h);
    check_seen(&h);
    assert_true(pf == gpt_flash_tc_pairs(T, (size_t)hs, 1));
    const size_t n = (size_t)T * hs;
    /* bf16 P before P V: each weight off by up to 2^-9 relative. */
    double tol_out = round ? 5e-3 : 5e-6, tol_grad = round ? 1e-2 : 1e-5;
    double e_out = max_err(h.out, h.ref_out, n), e_lse = 0;
    for (int i = 0; i < T; i++) {
        double d = fabs(h.lse[i] - h.ref_lse[i]);
        if (!(d <= e_lse))
            e_lse = isnan(d) ? INFINITY : d;
    }
    emulate_bwd_inputs(&h);
    /* A random interleaving first, then the lock-step one: dq must come
     * out with the same bits (the order of the adds is fixed). */
    double pr = emulate_bwd(&h, 0x5851f42d4c957f2dull ^ (uint64_t)T, BWD_SHARES);
    check_seen(&h);
    float *dq_random = malloc(n * sizeof(float));
    assert_non_null(dq_random);
    memcpy(dq_random, h.dq, n * sizeof(float));
    memset(h.dq, 0xff, n * sizeof(float)); /* NaN: the first share must store, not add */
    double pk = emulate_bwd(&h, 0, BWD_SHARES);
    check_seen(&h);
    assert_memory_equal(dq_random, h.dq, n * sizeof(float));
    free(dq_random);
    assert_true(pr == pk);
    assert_true(pk == gpt_flash_tc_pairs(T, (size_t)hs, 0));
    /* D summed once per visited tile row, as the cost model counts it. */
    assert_true(h.d_rows == 2 * gpt_flash_tc_tiles(T, (size_t)hs, 0) * gpt_flash_tc_bcq(hs));
    double e_dq = max_err(h.dq, h.ref_dq, n), e_dk = max_err(h.dk, h.ref_dk, n);
    double e_dv = max_err(h.dv, h.ref_dv, n);
    if (getenv("FLASH_TC_VERBOSE") || e_out > tol_out || e_lse > 1e-4 || e_dq > tol_grad ||
        e_dk > tol_grad || e_dv > tol_grad)
        print_error("T=%d hs=%d round=%d: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", T, hs,
                    round, e_out, e_lse, e_dq, e_dk, e_dv);
    assert_true(e_out <= tol_out);
    assert_true(e_lse <= 1e-4);
    assert_true(e_dq <= tol_grad);
    assert_true(e_dk <= tol_grad);
    assert_true(e_dv <= tol_grad);

    /* Two passes: dq from the dQ pass (NaN first: every row must be
     * stored), dk and dv from the dK/dV pass with the dQ pass's D, the
     * fused pass's bits. */
    float *dk_fused = malloc(n * sizeof(float)), *dv_fused = malloc(n * sizeof(float));
    float *dq_fused = malloc(n * sizeof(float));
    assert_non_null(dk_fused);
    assert_non_null(dv_fused);
    assert_non_null(dq_fused);
    memcpy(dk_fused, h.dk, n * sizeof(float));
    memcpy(dv_fused, h.dv, n * sizeof(float));
    memcpy(dq_fused, h.dq, n * sizeof(float));
    memset(h.dq, 0xff, n * sizeof(float));
    memset(h.dk, 0xff, n * sizeof(float));
    memset(h.dv, 0xff, n * sizeof(float));
    memset(h.D, 0xff, (size_t)T * sizeof(float)); /* the dQ pass must fill D */
    double p2q = emulate_dq_pass(&h);
    check_seen(&h);
    assert_true(p2q == gpt_flash_tc_pairs(T, (size_t)hs, 1));
    double p2k = emulate_bwd(&h, 0, BWD_DKV);
    check_seen(&h);
    assert_true(p2k == pk);
    assert_memory_equal(dk_fused, h.dk, n * sizeof(float));
    assert_memory_equal(dv_fused, h.dv, n * sizeof(float));
    double e_dq2 = max_err(h.dq, h.ref_dq, n);
    if (getenv("FLASH_TC_VERBOSE") || e_dq2 > tol_grad)
        print_error("T=%d hs=%d round=%d: two-pass dq %.2e\n", T, hs, round, e_dq2);
    assert_true(e_dq2 <= tol_grad);

    /* The dS backward: pass one writes every tile of the triangle once
     * (NaN first: nothing unwritten is read), pass two's dq, and pass
     * one's dk and dv, are the fused pass's bits. */
    const size_t nds = gpt_flash_tc_ds_tiles(T, (size_t)hs);
    const size_t tile_elems = (size_t)GPT_FLASH_TC_BR * gpt_flash_tc_bcq((size_t)hs);
    assert_true(gpt_flash_tc_ds_bytes(3, T, (size_t)hs) == 3 * nds * tile_elems * 2);
    float *ds = malloc(nds * tile_elems * sizeof(float));
    int *ds_writes = calloc(nds, sizeof(int));
    assert_non_null(ds);
    assert_non_null(ds_writes);
    memset(ds, 0xff, nds * tile_elems * sizeof(float));
    memset(h.dq, 0xff, n * sizeof(float));
    memset(h.dk, 0xff, n * sizeof(float));
    memset(h.dv, 0xff, n * sizeof(float));
    double p3 = emulate_bwd_ds(&h, 0, BWD_DS, ds, ds_writes);
    check_seen(&h);
    assert_true(p3 == pk);
    for (size_t t = 0; t < nds; t++)
        assert_int_equal(ds_writes[t], 1);
    emulate_dsq(&h, ds);
    assert_memory_equal(dq_fused, h.dq, n * sizeof(float));
    assert_memory_equal(dk_fused, h.dk, n * sizeof(float));
    assert_memory_equal(dv_fused, h.dv, n * sizeof(float));
    free(ds);
    free(ds_writes);
    free(dk_fused);
    free(dv_fused);
    free(dq_fused);
    head_done(&h);
}

static const int Ts[] = {1, 15, 16, 17, 63, 64, 65, 100, 128, 130, 200, 257};

/* The blocked algorithm in exact fp32: only summation order differs from
 * the reference. */
static void test_blocked_fp32(void **state)
{
    (void)state;
    for (size_t t = 0; t < sizeof(Ts) / sizeof(Ts[0]); t++)
        for (int hs = 32; hs <= 128; hs += 32)
            run_case(Ts[t], hs, 0);
}

/* With the kernels' bf16 roundings: within bf16 tolerance. */
static void test_blocked_bf16(void **state)
{
    (void)state;
    for (size_t t = 0; t < sizeof(Ts) / sizeof(Ts[0]); t++)
        for (int hs = 32; hs <= 128; hs += 32)
            run_case(Ts[t], hs, 1);
}

static void test_rescale(void **state)
{
    (void)state;
    float m, sub;
    /* Nothing seen yet and a fully masked tile: no NaN, nothing kept. */
    assert_true(gpt_flash_tc_rescale(-INFINITY, -INFINITY, &m, &sub) == 0.0f);
    assert_true(m == -INFINITY && sub == 0.0f);
    assert_true(exp2f(-INFINITY - sub) == 0.0f);
    /* The first real tile: the old (empty) sums are dropped. */
    assert_true(gpt_flash_tc_rescale(-INFINITY, 3.0f, &m, &sub) == 0.0f);
    assert_true(m == 3.0f && sub == 3.0f);
    /* A smaller tile maximum keeps the sums, a larger one scales them. */
    assert_true(gpt_flash_tc_rescale(5.0f, 3.0f, &m, &sub) == 1.0f);
    assert_true(m == 5.0f);
    assert_true(gpt_flash_tc_rescale(3.0f, 5.0f, &m, &sub) == 0.25f);
    assert_true(m == 5.0f && sub == 5.0f);
    /* A masked tile after real ones changes nothing. */
    assert_true(gpt_flash_tc_rescale(5.0f, -INFINITY, &m, &sub) == 1.0f);
    assert_true(m == 5.0f);
    /* lse in natural units: m log2 units, l the sum of exp2(s - m). */
    assert_true(fabsf(gpt_flash_tc_lse(2.0f * GPT_FLASH_LOG2E, 3.0f) - (2.0f + logf(3.0f))) <
                1e-6f);
}

static void test_mask_and_spans(void **state)
{
    (void)state;
    /* Below the diagonal and inside T: no mask. */
    assert_false(gpt_flash_tc_needs_mask(64, 16, 0, 64, 1024));
    /* The diagonal tile, a tile over T, rows past T. */
    assert_true(gpt_flash_tc_needs_mask(64, 16, 64, 64, 1024));
    assert_true(gpt_flash_tc_needs_mask(112, 16, 64, 64, 1024)); /* key 127 > row 112 */
    assert_false(gpt_flash_tc_needs_mask(128, 16, 64, 64, 1024));
    assert_true(gpt_flash_tc_needs_mask(64, 16, 0, 64, 70));
    assert_true(gpt_flash_tc_needs_mask(0, 64, 0, 16, 10));
    int f, e;
    /* The forward's 128-row query blocks: keys up to their last row. */
    gpt_flash_tc_kv_span(0, 1024, &f, &e);
    assert_int_equal(f, 0);
    assert_int_equal(e, 2);
    gpt_flash_tc_kv_span(896, 1024, &f, &e);
    assert_int_equal(e, 16);
    gpt_flash_tc_kv_span(128, 140, &f, &e); /* rows 128..139: keys 0..139 */
    assert_int_equal(e, 3);
    gpt_flash_tc_kv_span(0, 70, &f, &e); /* T under one block */
    assert_int_equal(e, 2);
    gpt_flash_tc_kv_span(0, 40, &f, &e);
    assert_int_equal(e, 1);
    gpt_flash_tc_q_span(128, 1024, 32, &f, &e);
    assert_int_equal(f, 4);
    assert_int_equal(e, 32);
    gpt_flash_tc_q_span(128, 130, 64, &f, &e);
    assert_int_equal(f, 2);
    assert_int_equal(e, 3);
    /* At T = 1024 the backward visits 136 of the 256 tiles of 64 x 64:
     * the 120 below the diagonal and the 16 diagonal ones; the forward's
     * 8 blocks of 128 rows visit 2, 4, .. 16 key tiles of 64, 72 in all
     * (each 128 x 64: the same area plus the 8 upper halves of the
     * diagonal 128 x 128 blocks, whose 16 x 16 groups it skips). Both
     * compute the 64 * 65 / 2 live 16 x 16 groups: 1.016 times the
     * T (T + 1) / 2 causal pairs (a whole diagonal tile would be 1.06). */
    assert_true(gpt_flash_tc_tiles(1024, 64, 1) == 72.0);
    assert_true(gpt_flash_tc_tiles(1024, 64, 0) == 136.0);
    assert_true(gpt_flash_tc_tiles(100, 64, 1) == 2.0);              /* one block, T < 128 */
    assert_true(gpt_flash_tc_tiles(200, 64, 1) == 6.0);              /* 2 + 4 (keys 128..199) */
    assert_true(gpt_flash_tc_tiles(200, 128, 0) == 7.0 + 5 + 3 + 1); /* 32-row q tiles */
    assert_true(gpt_flash_tc_pairs(1024, 64, 1) == 64.0 * 65 / 2 * 256);
    assert_true(gpt_flash_tc_pairs(1024, 128, 0) == 64.0 * 65 / 2 * 256);
    /* Key block k0 visits (1024 - k0) / 32 tiles of 32 queries. */
    double want = 0;
    for (int k0 = 0; k0 < 1024; k0 += 64)
        want += (1024 - k0) / 32;
    assert_true(gpt_flash_tc_tiles(1024, 128, 0) == want);
    /* Past T: a last group of rows 96..99 (T 100) sees keys 0..99. */
    assert_true(gpt_flash_tc_live(96, 96, 100));
    assert_false(gpt_flash_tc_live(96, 112, 100));
    assert_false(gpt_flash_tc_live(112, 0, 100));
    assert_false(gpt_flash_tc_live(0, 16, 1024));
    assert_true(gpt_flash_tc_live(16, 16, 1024));
    assert_true(gpt_flash_tc_pairs(100, 64, 1) == (7.0 * 8 / 2) * 256);
}

static void test_smem_and_offsets(void **state)
{
    (void)state;
    for (size_t hs = 0; hs <= 256; hs++)
        assert_int_equal(gpt_flash_tc_applies(hs), hs == 32 || hs == 64 || hs == 96 || hs == 128);
    /* Rows of 2 hs + 16 bytes: 16-byte aligned for cp.async and ldmatrix,
     * and the 16-byte rows of an 8-row ldmatrix phase start in 8 distinct
     * groups of 4 banks, so they never conflict. */
    for (size_t hs = 32; hs <= 128; hs += 32) {
        size_t row = (hs + GPT_FLASH_TC_PAD) * 2;
        assert_int_equal(row % 16, 0);
        unsigned groups = 0;
        for (size_t r = 0; r < 8; r++)
            groups |= 1u << ((r * row / 4) % 32 / 4);
        assert_int_equal(groups, 0xffu);
        /* Every kernel fits the H100/H200 opt-in limit of 227 KiB, and two
         * backward blocks (what its registers allow) fit an SM's 228 KiB
         * (1 KiB of it reserved per block). */
        assert_true(gpt_flash_tc_smem_fwd(hs) <= 227 * 1024);
        assert_true(gpt_flash_tc_smem_bwd(hs) <= 227 * 1024);
        assert_true(2 * (gpt_flash_tc_smem_bwd(hs) + 1024) <= 228 * 1024);
        /* The two-pass kernels: up to hs 64, two dQ blocks (what its
         * registers allow, 128 each) and three dK/dV blocks (164) fit an
         * SM; above, one and two. */
        assert_true(gpt_flash_tc_smem_dq(hs) <= 227 * 1024);
        assert_true((hs <= 64 ? 2 : 1) * (gpt_flash_tc_smem_dq(hs) + 1024) <= 228 * 1024);
        assert_true((hs <= 64 ? 3 : 2) * (gpt_flash_tc_smem_dkv(hs) + 1024) <= 228 * 1024);
        /* The dS^T tile (rows of bcq + PAD) is conflict-free as well. */
        size_t srow = ((size_t)gpt_flash_tc_bcq(hs) + GPT_FLASH_TC_PAD) * 2;
        unsigned sgroups = 0;
        for (size_t r = 0; r < 8; r++)
            sgroups |= 1u << ((r * srow / 4) % 32 / 4);
        assert_int_equal(sgroups, 0xffu);
    }
    /* Forward: Q of 128 rows, two stages of K and V of 64. Backward: K, V,
     * two stages of Q and dO and one of O; two stages of lse and one of
     * D; dS^T. */
    assert_int_equal(gpt_flash_tc_smem_fwd(64), (128 + 4 * 64) * 72 * 2);
    assert_int_equal(gpt_flash_tc_smem_fwd(128), (128 + 4 * 64) * 136 * 2);
    assert_int_equal(gpt_flash_tc_smem_bwd(128),
                     (2 * 64 + 5 * 32) * 136 * 2 + 3 * 32 * 4 + 64 * 40 * 2);
    assert_int_equal(gpt_flash_tc_smem_bwd(64),
                     (2 * 64 + 5 * 64) * 72 * 2 + 3 * 64 * 4 + 64 * 72 * 2);
    /* dQ pass: Q and dO of 128 rows, two stages of K and V of 64. dK/dV
     * pass: K, V, two stages of Q and dO, of the logsumexp and of D. */
    assert_int_equal(gpt_flash_tc_smem_dq(64), (2 * 128 + 4 * 64) * 72 * 2);
    assert_int_equal(gpt_flash_tc_smem_dkv(64), (2 * 64 + 4 * 64) * 72 * 2 + 4 * 64 * 4);
    assert_int_equal(gpt_flash_tc_smem_dkv(128), (2 * 64 + 4 * 32) * 136 * 2 + 4 * 32 * 4);
    /* The bf16 dout copy starts 16-byte aligned after D. */
    assert_int_equal(gpt_flash_tc_dob_off(0), 0);
    assert_int_equal(gpt_flash_tc_dob_off(1), 4);
    assert_int_equal(gpt_flash_tc_dob_off(12288), 12288);
    assert_int_equal(gpt_flash_tc_dob_off(12289) % 4, 0);
    /* The dQ counters follow the bf16 copy, 16-byte aligned. */
    assert_int_equal(gpt_flash_tc_sem_off(12288, 2 * 1024 * 64), 12288 + 1024 * 64);
    assert_int_equal(gpt_flash_tc_sem_off(5, 3), 8 + 4);
    assert_true(gpt_flash_tc_sem_off(5, 3) * 4 >= gpt_flash_tc_dob_off(5) * 4 + 3 * 2);
}

/* The variants' names (bench_gpu_train's --attn-bwd and --attn-fwd):
 * exact names only, anything else is -1; and the job spec's values
 * (trainer.attention_*: 0 auto) to the variants they run. */
static void test_bwd_variant(void **state)
{
    (void)state;
    assert_int_equal(gpt_flash_tc_bwd_variant(NULL), GPT_FLASH_BWD_TWOPASS);
    assert_int_equal(gpt_flash_tc_bwd_variant("ds"), GPT_FLASH_BWD_DS);
    assert_int_equal(gpt_flash_tc_bwd_variant("fused"), GPT_FLASH_BWD_FUSED);
    assert_int_equal(gpt_flash_tc_bwd_variant("split"), GPT_FLASH_BWD_SPLIT);
    assert_int_equal(gpt_flash_tc_bwd_variant("twopass"), GPT_FLASH_BWD_TWOPASS);
    assert_int_equal(gpt_flash_tc_bwd_variant("twopass4"), GPT_FLASH_BWD_TWOPASS4);
    assert_int_equal(gpt_flash_tc_bwd_variant("wg"), GPT_FLASH_BWD_WG);
    const char *bad[] = {"",          "Split", "twopass ", "two", "splitx", "fused\n", "twopass3",
                         "twopass44", "wg2",   "WG",       "DS",  "ds ",    "dsq"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(gpt_flash_tc_bwd_variant(bad[i]), -1);
    }
    assert_int_equal(gpt_flash_tc_bwd_of_spec(0), GPT_FLASH_BWD_TWOPASS);
    for (int v = GPT_FLASH_BWD_FUSED; v <= GPT_FLASH_BWD_CUDNN; v++) {
        assert_int_equal(gpt_flash_tc_bwd_of_spec(v + 1), v);
        assert_int_equal(gpt_flash_tc_bwd_variant(gpt_flash_tc_bwd_name((enum gpt_flash_bwd)v)), v);
    }
    assert_int_equal(gpt_flash_tc_bwd_of_spec(GPT_FLASH_BWD_CUDNN + 2), GPT_FLASH_BWD_TWOPASS);
    /* The two-pass variants (the cost model and the benchmark count them
     * as two passes). */
    assert_true(gpt_flash_tc_bwd_twopass(GPT_FLASH_BWD_TWOPASS));
    assert_true(gpt_flash_tc_bwd_twopass(GPT_FLASH_BWD_TWOPASS4));
    assert_true(gpt_flash_tc_bwd_twopass(GPT_FLASH_BWD_WG));
    assert_false(gpt_flash_tc_bwd_twopass(GPT_FLASH_BWD_FUSED));
    assert_false(gpt_flash_tc_bwd_twopass(GPT_FLASH_BWD_SPLIT));
    assert_false(gpt_flash_tc_bwd_twopass(GPT_FLASH_BWD_DS)); /* but where its tiles do not fit */
    /* the forward variants */
    assert_int_equal(gpt_flash_tc_fwd_variant(NULL), GPT_FLASH_FWD_M16);
    assert_int_equal(gpt_flash_tc_fwd_variant("m16"), GPT_FLASH_FWD_M16);
    assert_int_equal(gpt_flash_tc_fwd_variant("m32"), GPT_FLASH_FWD_M32);
    assert_int_equal(gpt_flash_tc_fwd_variant("k32"), GPT_FLASH_FWD_K32);
    assert_int_equal(gpt_flash_tc_fwd_variant("wg"), GPT_FLASH_FWD_WG);
    const char *badf[] = {"", "m64", "M32", "m32 ", "32", "m3", "k16", "K32", "k32\n", "WG", "wg "};
    for (size_t i = 0; i < sizeof(badf) / sizeof(badf[0]); i++)
        assert_int_equal(gpt_flash_tc_fwd_variant(badf[i]), -1);
    assert_int_equal(gpt_flash_tc_fwd_of_spec(0), GPT_FLASH_FWD_M16);
    for (int v = GPT_FLASH_FWD_M16; v <= GPT_FLASH_FWD_CUDNN; v++) {
        assert_int_equal(gpt_flash_tc_fwd_of_spec(v), v);
        assert_int_equal(gpt_flash_tc_fwd_variant(gpt_flash_tc_fwd_name(v)), v);
    }
    assert_string_equal(gpt_flash_tc_fwd_name(0), "?");
}

/* The dQ turns: key blocks 0 .. last visit a query tile, the diagonal
 * one (the last) goes first. */
static void test_dq_turns(void **state)
{
    (void)state;
    /* bcq 64 (hs <= 64): query tile qt is visited by key blocks 0 .. qt. */
    assert_int_equal(gpt_flash_tc_dq_last_kb(0, 64, 1024), 0);
    assert_int_equal(gpt_flash_tc_dq_last_kb(15, 64, 1024), 15);
    assert_int_equal(gpt_flash_tc_dq_turn(15, 15, 64, 1024), 0);
    assert_int_equal(gpt_flash_tc_dq_turn(0, 15, 64, 1024), 15);
    /* bcq 32 (hs > 64): tiles 2 kb and 2 kb + 1 end in key block kb. */
    assert_int_equal(gpt_flash_tc_dq_last_kb(2, 32, 1024), 1);
    assert_int_equal(gpt_flash_tc_dq_last_kb(3, 32, 1024), 1);
    assert_int_equal(gpt_flash_tc_dq_last_kb(4, 32, 1024), 2);
    /* A short last tile ends where T does. */
    assert_int_equal(gpt_flash_tc_dq_last_kb(2, 64, 130), 2);
    assert_int_equal(gpt_flash_tc_dq_last_kb(4, 32, 130), 2);
    assert_int_equal(gpt_flash_tc_q_tiles(130, 128), 5);
    assert_int_equal(gpt_flash_tc_q_tiles(1024, 64), 16);
    /* Every key block that the spans send to a tile has a turn in it, in
     * 0 .. last, and no two the same. */
    for (int hs = 32; hs <= 128; hs += 32)
        for (int T = 1; T <= 300; T += 7) {
            int bq = gpt_flash_tc_bcq((size_t)hs), nqt = (int)gpt_flash_tc_q_tiles(T, hs);
            for (int qt = 0; qt < nqt; qt++) {
                unsigned long long seen = 0;
                int visitors = 0;
                for (int k0 = 0; k0 < T; k0 += GPT_FLASH_TC_BR) {
                    int f, e;
                    gpt_flash_tc_q_span(k0, T, bq, &f, &e);
                    if (qt < f || qt >= e)
                        continue;
                    int t = gpt_flash_tc_dq_turn(k0 / GPT_FLASH_TC_BR, qt, bq, T);
                    assert_true(t >= 0 && t < 64);
                    assert_false(seen & (1ull << t));
                    seen |= 1ull << t;
                    visitors++;
                }
                assert_int_equal(visitors, gpt_flash_tc_dq_last_kb(qt, bq, T) + 1);
            }
        }
    /* The dS backward's tiles: query tile qt's start at the sum of the
     * visitor counts before it (closed form against the running sum),
     * and a (b, h) holds that sum over all its tiles. */
    for (int hs = 32; hs <= 128; hs += 32)
        for (int T = 1; T <= 4200; T += 37) {
            int bq = gpt_flash_tc_bcq((size_t)hs), nqt = (int)gpt_flash_tc_q_tiles(T, hs);
            size_t sum = 0;
            for (int qt = 0; qt < nqt; qt++) {
                assert_int_equal(gpt_flash_tc_ds_first(qt, bq), sum);
                assert_int_equal(gpt_flash_tc_ds_tile(qt, 1, bq), sum + 1);
                sum += (size_t)gpt_flash_tc_dq_last_kb(qt, bq, T) + 1;
            }
            assert_int_equal(gpt_flash_tc_ds_tiles(T, (size_t)hs), sum);
        }
    /* GPT-2 124M at T 1024: 136 tiles of 8 KiB a head; B 16 (192 heads)
     * and 32 in one chunk under the 1 GiB cap, B 80 (960 heads) just, 81
     * (972) in chunks of 963. */
    assert_int_equal(gpt_flash_tc_ds_tiles(1024, 64), 136);
    assert_int_equal(gpt_flash_tc_ds_bytes(192, 1024, 64), 192u * 136 * 8192);
    assert_int_equal(gpt_flash_tc_ds_reserve(192, 1024, 64), 192u * 136 * 8192);
    assert_int_equal(gpt_flash_tc_ds_chunk(192, 1024, 64), 192);
    assert_int_equal(gpt_flash_tc_ds_chunk(384, 1024, 64), 384);
    assert_int_equal(gpt_flash_tc_ds_chunk(960, 1024, 64), 960);
    assert_int_equal(gpt_flash_tc_ds_chunk(972, 1024, 64), 963);
    assert_int_equal(gpt_flash_tc_ds_reserve(972, 1024, 64), (size_t)1 << 30);
}

/* ---- fragment addressing -------------------------------------------------- */

/* ldmatrix .x4 as the PTX ISA specifies it, on a tile whose element at
 * offset o holds o: addr[l] is lane l's row start (row l % 8 of matrix
 * l / 8); lane l receives, of matrix i, (row g, columns c and c + 1), or
 * with .trans (rows c and c + 1, column g), g = l / 4, c = 2 (l % 4). */
static void ldsm(const int *addr, int trans, int l, int i, int *lo, int *hi)
{
    int g = l / 4, c = 2 * (l % 4);
    if (!trans) {
        *lo = addr[8 * i + g] + c;
        *hi = addr[8 * i + g] + c + 1;
    } else {
        *lo = addr[8 * i + c] + g;
        *hi = addr[8 * i + c + 1] + g;
    }
}

/* The kernels' four ldmatrix address patterns and the dS^T store give
 * exactly the mma.m16n8k16 fragments (A: register r holds row g + 8 (r & 1),
 * columns c + 8 (r >> 1) and the next; B: register r holds column g of
 * n-tile r >> 1, rows c + 8 (r & 1) and the next), for every tile stride
 * the kernels use; row starts are 16-byte aligned; the four warps' dS^T
 * stores cover the key x query tile exactly once. */
static void test_fragments(void **state)
{
    (void)state;
    int lds[8], nld = 0;
    for (int hs = 32; hs <= 128; hs += 32)
        lds[nld++] = hs + GPT_FLASH_TC_PAD;
    lds[nld++] = 32 + GPT_FLASH_TC_PAD; /* dS^T rows: bcq 32 and 64 */
    lds[nld++] = 64 + GPT_FLASH_TC_PAD;
    for (int x = 0; x < nld; x++) {
        const int ld = lds[x];
        for (int o0 = 0; o0 <= 48; o0 += 16)
            for (int o1 = 0; o1 <= 48; o1 += 16) {
                int a[32], b[32], bt[32], at[32];
                for (int l = 0; l < 32; l++) {
                    a[l] = gpt_flash_tc_ld_a_off(l, ld, o0, o1);   /* m0, k0 */
                    b[l] = gpt_flash_tc_ld_b_off(l, ld, o0, o1);   /* n0, k0 */
                    bt[l] = gpt_flash_tc_ld_bt_off(l, ld, o1, o0); /* k0, n0 */
                    at[l] = gpt_flash_tc_ld_at_off(l, ld, o0, o1); /* m0, k0 */
                    assert_int_equal(a[l] * 2 % 16, 0);
                    assert_int_equal(b[l] * 2 % 16, 0);
                    assert_int_equal(bt[l] * 2 % 16, 0);
                    assert_int_equal(at[l] * 2 % 16, 0);
                }
                for (int l = 0; l < 32; l++)
                    for (int r = 0; r < 4; r++) {
                        const int g = l / 4, c = 2 * (l % 4);
                        int lo, hi;
                        /* A, (m, k) tile: m = o0 + g + 8 (r & 1), k = o1 + c + 8 (r >> 1). */
                        const int am = o0 + g + 8 * (r & 1), ak = o1 + c + 8 * (r >> 1);
                        ldsm(a, 0, l, r, &lo, &hi);
                        assert_int_equal(lo, am * ld + ak);
                        assert_int_equal(hi, am * ld + ak + 1);
                        /* A from the (k, m) tile, transposed. */
                        ldsm(at, 1, l, r, &lo, &hi);
                        assert_int_equal(lo, ak * ld + am);
                        assert_int_equal(hi, (ak + 1) * ld + am);
                        /* The store of register r lands where A reads it. */
                        assert_int_equal(gpt_flash_tc_st_a_off(l, r, ld, o0, o1), am * ld + ak);
                        /* B of n-tile o0 + 8 (r >> 1): n = .. + g, k = o1 + c + 8 (r & 1). */
                        const int bn = o0 + 8 * (r >> 1) + g, bk = o1 + c + 8 * (r & 1);
                        ldsm(b, 0, l, r, &lo, &hi); /* (n, k) tile */
                        assert_int_equal(lo, bn * ld + bk);
                        assert_int_equal(hi, bn * ld + bk + 1);
                        ldsm(bt, 1, l, r, &lo, &hi); /* (k, n) tile, transposed */
                        assert_int_equal(lo, bk * ld + bn);
                        assert_int_equal(hi, (bk + 1) * ld + bn);
                    }
            }
    }
    /* The backward's dS^T stores: warp w rows 16 w .., bcq query columns in
     * steps of 16; every (key, query) word written once. */
    for (int bq = 32; bq <= 64; bq += 32) {
        const int sld = bq + GPT_FLASH_TC_PAD;
        int *hits = calloc((size_t)GPT_FLASH_TC_BR * sld, sizeof(int));
        assert_non_null(hits);
        for (int w = 0; w < GPT_FLASH_TC_WARPS; w++)
            for (int kk = 0; kk < bq / 16; kk++)
                for (int l = 0; l < 32; l++)
                    for (int r = 0; r < 4; r++) {
                        int off = gpt_flash_tc_st_a_off(l, r, sld, w * GPT_FLASH_TC_WROWS, kk * 16);
                        assert_int_equal(off % 2, 0); /* a 32-bit word */
                        hits[off]++;
                        hits[off + 1]++;
                    }
        for (int k = 0; k < GPT_FLASH_TC_BR; k++)
            for (int q = 0; q < sld; q++)
                assert_int_equal(hits[k * sld + q], q < bq ? 1 : 0);
        free(hits);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rescale),          cmocka_unit_test(test_mask_and_spans),
        cmocka_unit_test(test_smem_and_offsets), cmocka_unit_test(test_dq_turns),
        cmocka_unit_test(test_fragments),        cmocka_unit_test(test_blocked_fp32),
        cmocka_unit_test(test_blocked_bf16),     cmocka_unit_test(test_bwd_variant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
