/*
 * test_flash_wg: the addressing of the warpgroup flash forward
 * (attention_forward wg, engine/ops/cuda/cuda_attention_wg.cu) replayed on the
 * CPU with the kernel's own helpers (engine/include/flash_wg.h). A model
 * of the hardware, written from the PTX ISA's description of wgmma
 * (descriptor bit fields, the canonical K-major and MN-major layouts
 * with 128-byte swizzle, the register layouts of D and of A), reads the
 * tiles the kernel stores through the descriptors the kernel builds:
 * S = Q K^T per warpgroup must equal the naive product, the per-thread
 * accumulators must cover S once, P packed from them as the kernel packs
 * it (tc_pack_a) and V read transposed must give P V; for the dQ pass
 * (attention_backward wg) likewise S and dP of each 32-key half and
 * dq += dS K with K read transposed, and for the dK/dV pass S^T = K Q^T
 * per 32-query part and dv += P^T dO with dO read transposed. A wrong
 * swizzle, descriptor stride, start offset or register mapping fails
 * here; the PTX itself is tested by tests/gpu/test_gpu_ops on a GPU.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "flash_wg.h"

#define SMEM 65536u /* the emulated shared memory; a byte address indexes it */

static uint16_t smem[SMEM / 2];

/* Values exactly representable in bf16 (8 significant bits), stored as
 * their bf16 bits: products and sums in double are then exact enough to
 * compare at 1e-9. */
static uint16_t bf_of(int v)
{
    float f = (float)v / 64.0f;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

static double bf_val(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The hardware model: the byte address that a wgmma reads for element
 * (mn, k) of an operand with descriptor d (128-byte swizzle, bf16, T = 8
 * elements per 16 bytes). K-major: ((8,m),(T,2k)):((8T,SBO),(1,T));
 * MN-major: ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)); then Swizzle<3,4,3>
 * on the byte address (bits 4-6 ^= bits 7-9). */
static uint32_t hw_addr(uint64_t d, int mn_major, int mn, int k)
{
    uint32_t start = (uint32_t)(d & 0x3FFF) << 4, lbo = (uint32_t)((d >> 16) & 0x3FFF) << 4,
             sbo = (uint32_t)((d >> 32) & 0x3FFF) << 4;
    assert_int_equal((int)(d >> 62), 1);       /* 128-byte swizzle */
    assert_int_equal((int)((d >> 49) & 7), 0); /* base offset */
    assert_true(k < 16);                       /* one k16 step */
    uint32_t off;
    if (!mn_major)
        off = (uint32_t)((mn % 8) * 128 + (mn / 8) * (int)sbo + k * 2);
    else
        off = (uint32_t)((mn % 64) * 2 + (mn / 64) * (int)lbo + (k % 8) * 128 + (k / 8) * (int)sbo);
    uint32_t a = start + off;
    a ^= ((a >> 7) & 7) << 4;
    assert_true(a + 2 <= SMEM);
    return a;
}

static double hw_read(uint64_t d, int mn_major, int mn, int k)
{
    return bf_val(smem[hw_addr(d, mn_major, mn, k) / 2]);
}

/* A row-major rows x 64 tile into the emulated smem at byte address base
 * as the kernel's cp.async loop stores it (16-byte chunk c of row r). */
static void store_tile(uint32_t base, const uint16_t *m, int rows)
{
    for (int idx = 0; idx < rows * 8; idx++) {
        int r = idx / 8, c = idx % 8;
        memcpy(&smem[base / 2 + (uint32_t)gpt_flash_wg_sw(r, c * 8)], m + r * 64 + c * 8, 16);
    }
}

static void test_swizzle_and_desc(void **state)
{
    (void)state;
    /* Every element of an 8-row atom lands once, inside the atom, its
     * 16-byte chunk moved by the row. */
    unsigned char seen[512] = {0};
    for (int r = 0; r < 8; r++)
        for (int c = 0; c < 64; c++) {
            int e = gpt_flash_wg_sw(r, c);
            assert_true(e >= 0 && e < 512);
            assert_int_equal(e / 64, r);
            assert_int_equal((e % 64) % 8, c % 8);
            assert_int_equal((e % 64) / 8, (c / 8) ^ r);
            seen[e]++;
        }
    for (int i = 0; i < 512; i++)
        assert_int_equal(seen[i], 1);
    assert_int_equal(gpt_flash_wg_sw(9, 0), 9 * 64 + 8);
    /* The descriptor's fields (PTX ISA "Matrix Descriptor Format"). */
    uint64_t d = gpt_flash_wg_desc(0x12340u, 16, 1024);
    assert_int_equal((int)(d & 0x3FFF), 0x1234);
    assert_int_equal((int)((d >> 16) & 0x3FFF), 1);
    assert_int_equal((int)((d >> 32) & 0x3FFF), 64);
    assert_int_equal((int)((d >> 62) & 3), 1);
    assert_int_equal((int)((d >> 14) & 3), 0);
    assert_int_equal((int)((d >> 46) & 0xFFFF), 0); /* bits 46-61 clear */
    /* The kernel's base alignment. */
    assert_int_equal((int)gpt_flash_wg_align_pad(0x1230), 0x1400 - 0x1230);
    assert_int_equal((int)gpt_flash_wg_align_pad(0x1400), 0);
    assert_true(gpt_flash_wg_smem_fwd() >= 1023 + (128 + 4 * 64) * 128);
}

/* One accumulator (thread t, register 4 n + e) per element of a 64 x 64
 * result, and the kernel's row and column for it. */
static void test_acc_layout(void **state)
{
    (void)state;
    unsigned char seen[64][64] = {{0}};
    for (int t = 0; t < 128; t++)
        for (int n = 0; n < 8; n++)
            for (int e = 0; e < 4; e++) {
                int r = gpt_flash_wg_acc_row(t, e), c = gpt_flash_wg_acc_col(t, n, e);
                assert_true(r >= 0 && r < 64 && c >= 0 && c < 64);
                /* warp t / 32 owns rows 16 (t / 32) .. + 15 (the kernel's mask) */
                assert_int_equal(r / 16, t / 32);
                seen[r][c]++;
            }
    for (int r = 0; r < 64; r++)
        for (int c = 0; c < 64; c++)
            assert_int_equal(seen[r][c], 1);
}

/* The hardware's A-from-registers layout (m64k16): register j (two bf16,
 * low half first) of thread t holds row 16 (t / 32) + (t % 32) / 4 +
 * 8 (j % 2), columns 2 (t % 4) + 8 (j / 2) + {0, 1}. */
static void a_layout(int t, int j, int half, int *ret_r, int *ret_c)
{
    *ret_r = 16 * (t / 32) + (t % 32) / 4 + 8 * (j % 2);
    *ret_c = 2 * (t % 4) + 8 * (j / 2) + half;
}

/* The kernel's tc_pack_a over an accumulator array acc[4 n + e]: register
 * j of step kk takes block 2 kk + j / 2, elements 2 (j % 2) + {0, 1}. */
static double pack_a(const double *acc, int kk, int j, int half)
{
    return acc[4 * (2 * kk + j / 2) + 2 * (j % 2) + half];
}

static void test_products(void **state)
{
    (void)state;
    static uint16_t q[128 * 64], k[64 * 64], v[64 * 64];
    srand(7);
    for (int i = 0; i < 128 * 64; i++)
        q[i] = bf_of(rand() % 255 - 127);
    for (int i = 0; i < 64 * 64; i++) {
        k[i] = bf_of(rand() % 255 - 127);
        v[i] = bf_of(rand() % 255 - 127);
    }
    /* The kernel's layout from an unaligned dynamic base: Q, then stage
     * 1's K and V (stage 0 left garbage: a wrong stage offset reads it). */
    const uint32_t dyn = 0x0230;
    const uint32_t sq = dyn + gpt_flash_wg_align_pad(dyn);
    const uint32_t tile = 64 * 64 * 2, sk = sq + 128 * 128 + 2 * tile, sv = sk + tile;
    assert_int_equal(sq % 1024, 0);
    for (size_t i = 0; i < SMEM / 2; i++)
        smem[i] = bf_of(1000);
    store_tile(sq, q, 128);
    store_tile(sk, k, 64);
    store_tile(sv, v, 64);
    assert_true(sv + tile <= dyn + gpt_flash_wg_smem_fwd());

    for (int wg = 0; wg < 2; wg++) {
        /* S = Q K^T in four k steps, as the kernel issues them. */
        static double s[64][64];
        memset(s, 0, sizeof(s));
        for (int ks = 0; ks < 4; ks++) {
            uint64_t da = gpt_flash_wg_desc(sq + gpt_flash_wg_kmajor_off(wg * 64, ks),
                                            GPT_FLASH_WG_K_LBO, GPT_FLASH_WG_K_SBO);
            uint64_t db = gpt_flash_wg_desc(sk + gpt_flash_wg_kmajor_off(0, ks), GPT_FLASH_WG_K_LBO,
                                            GPT_FLASH_WG_K_SBO);
            for (int m = 0; m < 64; m++)
                for (int n = 0; n < 64; n++)
                    for (int kx = 0; kx < 16; kx++)
                        s[m][n] += hw_read(da, 0, m, kx) * hw_read(db, 0, n, kx);
        }
        for (int m = 0; m < 64; m++)
            for (int n = 0; n < 64; n++) {
                double ref = 0.0;
                for (int c = 0; c < 64; c++)
                    ref += bf_val(q[(wg * 64 + m) * 64 + c]) * bf_val(k[n * 64 + c]);
                assert_true(fabs(s[m][n] - ref) <= 1e-9 * (1.0 + fabs(ref)));
            }
        /* Each thread's accumulators, then P = a function of them (as the
         * softmax is elementwise), packed as the kernel packs it. */
        static double acc[128][32], p[64][64];
        for (int t = 0; t < 128; t++)
            for (int n = 0; n < 8; n++)
                for (int e = 0; e < 4; e++) {
                    int r = gpt_flash_wg_acc_row(t, e), c = gpt_flash_wg_acc_col(t, n, e);
                    acc[t][4 * n + e] = floor(s[r][c] * 8.0) / 64.0;
                    p[r][c] = acc[t][4 * n + e];
                }
        /* O = P V: A from the registers (the hardware's layout over the
         * kernel's packing), B = V read MN-major through the kernel's
         * descriptors of steps kk. */
        static double o[64][64];
        memset(o, 0, sizeof(o));
        for (int kk = 0; kk < 4; kk++) {
            uint64_t db = gpt_flash_wg_desc(sv + gpt_flash_wg_mnmajor_off(kk), GPT_FLASH_WG_MN_LBO,
                                            GPT_FLASH_WG_MN_SBO);
            static double a[64][16];
            static unsigned char seen[64][16];
            memset(seen, 0, sizeof(seen));
            for (int t = 0; t < 128; t++)
                for (int j = 0; j < 4; j++)
                    for (int half = 0; half < 2; half++) {
                        int r, c;
                        a_layout(t, j, half, &r, &c);
                        a[r][c] = pack_a(acc[t], kk, j, half);
                        seen[r][c]++;
                    }
            for (int r = 0; r < 64; r++)
                for (int c = 0; c < 16; c++)
                    assert_int_equal(seen[r][c], 1);
            for (int m = 0; m < 64; m++)
                for (int n = 0; n < 64; n++)
                    for (int kx = 0; kx < 16; kx++)
                        o[m][n] += a[m][kx] * hw_read(db, 1, n, kx);
        }
        for (int m = 0; m < 64; m++)
            for (int n = 0; n < 64; n++) {
                double ref = 0.0;
                for (int j = 0; j < 64; j++)
                    ref += p[m][j] * bf_val(v[j * 64 + n]);
                assert_true(fabs(o[m][n] - ref) <= 1e-9 * (1.0 + fabs(ref)));
            }
    }
}

/* S (64 x n) = A B^T in four k steps, both K-major through the kernels'
 * descriptors: A's rows from a0 (the warpgroup's), B's from b0. */
static void emul_ss(double s[64][64], uint32_t abase, int a0, uint32_t bbase, int b0, int n)
{
    memset(s, 0, 64 * sizeof(s[0]));
    for (int ks = 0; ks < 4; ks++) {
        uint64_t da = gpt_flash_wg_desc(abase + gpt_flash_wg_kmajor_off(a0, ks), GPT_FLASH_WG_K_LBO,
                                        GPT_FLASH_WG_K_SBO);
        uint64_t db = gpt_flash_wg_desc(bbase + gpt_flash_wg_kmajor_off(b0, ks), GPT_FLASH_WG_K_LBO,
                                        GPT_FLASH_WG_K_SBO);
        for (int m = 0; m < 64; m++)
            for (int j = 0; j < n; j++)
                for (int kx = 0; kx < 16; kx++)
                    s[m][j] += hw_read(da, 0, m, kx) * hw_read(db, 0, j, kx);
    }
}

/* out (64 x 64) += A B over two k steps: A (64 x 32) from the threads'
 * m64n32 accumulators acc, packed as the kernels pack them, B read
 * MN-major from the tile at bbase, k steps kstep0 and kstep0 + 1 (16
 * rows each) through the kernels' descriptors. */
static void emul_rs32(double out[64][64], double acc[128][16], uint32_t bbase, int kstep0)
{
    for (int kk = 0; kk < 2; kk++) {
        uint64_t db = gpt_flash_wg_desc(bbase + gpt_flash_wg_mnmajor_off(kstep0 + kk),
                                        GPT_FLASH_WG_MN_LBO, GPT_FLASH_WG_MN_SBO);
        for (int t = 0; t < 128; t++)
            for (int j = 0; j < 4; j++)
                for (int half = 0; half < 2; half++) {
                    int r, c;
                    a_layout(t, j, half, &r, &c);
                    double a = pack_a(acc[t], kk, j, half);
                    for (int n = 0; n < 64; n++)
                        out[r][n] += a * hw_read(db, 1, n, c);
                }
    }
}

/* The dQ pass (attention_backward wg): per warpgroup and half of a 64-key
 * tile, S = Q K^T and dP = dO V^T as m64n32 products (B from the half's
 * rows), dS from their accumulators, dq += dS K with K read MN-major at
 * the half's k steps; over both halves dq must be the naive dS K. */
static void test_dq_products(void **state)
{
    (void)state;
    static uint16_t q[128 * 64], dob[128 * 64], k[64 * 64], v[64 * 64];
    srand(11);
    for (int i = 0; i < 128 * 64; i++) {
        q[i] = bf_of(rand() % 255 - 127);
        dob[i] = bf_of(rand() % 255 - 127);
    }
    for (int i = 0; i < 64 * 64; i++) {
        k[i] = bf_of(rand() % 255 - 127);
        v[i] = bf_of(rand() % 255 - 127);
    }
    /* The kernel's layout: Q, dO, then stage 0's K and V. */
    const uint32_t dyn = 0x0470, tile = 64 * 64 * 2;
    const uint32_t sq = dyn + gpt_flash_wg_align_pad(dyn), sdo = sq + 128 * 128;
    const uint32_t sk = sdo + 128 * 128, sv = sk + tile;
    for (size_t i = 0; i < SMEM / 2; i++)
        smem[i] = bf_of(1000);
    store_tile(sq, q, 128);
    store_tile(sdo, dob, 128);
    store_tile(sk, k, 64);
    store_tile(sv, v, 64);
    assert_true(sv + 3 * tile <= dyn + gpt_flash_wg_smem_dq());

    for (int wg = 0; wg < 2; wg++) {
        static double dq[64][64], ds_all[64][64];
        memset(dq, 0, sizeof(dq));
        for (int part = 0; part < 2; part++) {
            static double s[64][64], dp[64][64];
            emul_ss(s, sq, wg * 64, sk, part * 32, 32);
            emul_ss(dp, sdo, wg * 64, sv, part * 32, 32);
            for (int m = 0; m < 64; m++)
                for (int j = 0; j < 32; j++) {
                    double rs = 0.0, rp = 0.0;
                    for (int c = 0; c < 64; c++) {
                        rs +=
                            bf_val(q[(wg * 64 + m) * 64 + c]) * bf_val(k[(part * 32 + j) * 64 + c]);
                        rp += bf_val(dob[(wg * 64 + m) * 64 + c]) *
                              bf_val(v[(part * 32 + j) * 64 + c]);
                    }
                    assert_true(fabs(s[m][j] - rs) <= 1e-9 * (1.0 + fabs(rs)));
                    assert_true(fabs(dp[m][j] - rp) <= 1e-9 * (1.0 + fabs(rp)));
                }
            /* dS in the threads' registers (n32: blocks 0..3). */
            static double acc[128][16];
            for (int t = 0; t < 128; t++)
                for (int n = 0; n < 4; n++)
                    for (int e = 0; e < 4; e++) {
                        int r = gpt_flash_wg_acc_row(t, e), c = gpt_flash_wg_acc_col(t, n, e);
                        acc[t][4 * n + e] = floor((s[r][c] - dp[r][c]) * 4.0) / 64.0;
                        ds_all[r][part * 32 + c] = acc[t][4 * n + e];
                    }
            emul_rs32(dq, acc, sk, part * 2);
        }
        for (int m = 0; m < 64; m++)
            for (int n = 0; n < 64; n++) {
                double ref = 0.0;
                for (int j = 0; j < 64; j++)
                    ref += ds_all[m][j] * bf_val(k[j * 64 + n]);
                assert_true(fabs(dq[m][n] - ref) <= 1e-9 * (1.0 + fabs(ref)));
            }
    }
}

/* The dK/dV pass (attention_backward wg): for each 32-query part of a
 * 64-row tile, S^T = K Q^T as an m64n32 product (B from the part's Q
 * rows), then dv += P^T dO with dO read MN-major at the part's k steps;
 * over both parts dv must be the naive P^T dO (dk += dS^T Q takes the
 * same addresses in Q). */
static void test_dkv_products(void **state)
{
    (void)state;
    static uint16_t q[64 * 64], dob[64 * 64], k[64 * 64];
    srand(13);
    for (int i = 0; i < 64 * 64; i++) {
        q[i] = bf_of(rand() % 255 - 127);
        dob[i] = bf_of(rand() % 255 - 127);
        k[i] = bf_of(rand() % 255 - 127);
    }
    /* The kernel's layout: K, V, then stage 1's Q and dO. */
    const uint32_t dyn = 0x0810, tile = 64 * 64 * 2;
    const uint32_t sk = dyn + gpt_flash_wg_align_pad(dyn), sq = sk + 2 * tile + 2 * tile;
    const uint32_t sdo = sq + tile;
    for (size_t i = 0; i < SMEM / 2; i++)
        smem[i] = bf_of(1000);
    store_tile(sk, k, 64);
    store_tile(sq, q, 64);
    store_tile(sdo, dob, 64);
    assert_true(sdo + tile + 4 * 64 * 4 <= dyn + gpt_flash_wg_smem_dkv());

    static double dv[64][64], p_all[64][64];
    memset(dv, 0, sizeof(dv));
    for (int part = 0; part < 2; part++) {
        static double st[64][64];
        emul_ss(st, sk, 0, sq, part * 32, 32);
        for (int m = 0; m < 64; m++)
            for (int j = 0; j < 32; j++) {
                double ref = 0.0;
                for (int c = 0; c < 64; c++)
                    ref += bf_val(k[m * 64 + c]) * bf_val(q[(part * 32 + j) * 64 + c]);
                assert_true(fabs(st[m][j] - ref) <= 1e-9 * (1.0 + fabs(ref)));
            }
        static double acc[128][16];
        for (int t = 0; t < 128; t++)
            for (int n = 0; n < 4; n++)
                for (int e = 0; e < 4; e++) {
                    int r = gpt_flash_wg_acc_row(t, e), c = gpt_flash_wg_acc_col(t, n, e);
                    acc[t][4 * n + e] = floor(st[r][c] * 8.0) / 64.0;
                    p_all[r][part * 32 + c] = acc[t][4 * n + e];
                }
        emul_rs32(dv, acc, sdo, part * 2);
    }
    for (int m = 0; m < 64; m++)
        for (int n = 0; n < 64; n++) {
            double ref = 0.0;
            for (int i = 0; i < 64; i++)
                ref += p_all[m][i] * bf_val(dob[i * 64 + n]);
            assert_true(fabs(dv[m][n] - ref) <= 1e-9 * (1.0 + fabs(ref)));
        }
}

/* The skips drop only masked pairs: for T around the tile sizes, every
 * valid (query, key) pair lies in a tile (forward), half (dQ pass) or
 * part (dK/dV pass) that its warpgroup runs; and a tile that is run holds
 * a valid pair for some row of it below T (no work on nothing). */
static void test_skips(void **state)
{
    (void)state;
    static const int Ts[] = {1, 2, 63, 64, 65, 127, 128, 129, 191, 200, 256, 1000, 1024};
    for (size_t n = 0; n < sizeof(Ts) / sizeof(Ts[0]); n++) {
        const int T = Ts[n];
        for (int q0 = 0; q0 < T; q0 += 128) { /* forward and dQ blocks */
            int kt0, nkt;
            gpt_flash_tc_kv_span(q0, T, &kt0, &nkt);
            for (int wg = 0; wg < 2; wg++) {
                const int r0 = q0 + 64 * wg;
                for (int kt = kt0; kt < nkt; kt++)
                    for (int part = 0; part < 3; part++) { /* 2: the whole tile */
                        const int j0 = kt * 64 + (part < 2 ? part * 32 : 0);
                        const int nj = part < 2 ? 32 : 64;
                        int valid = 0;
                        for (int i = r0; i < r0 + 64 && i < T; i++)
                            for (int j = j0; j < j0 + nj && j < T; j++)
                                valid += j <= i;
                        assert_int_equal(gpt_flash_wg_rows_live(r0, j0, T), valid > 0);
                    }
                /* Every valid key of its rows lies in the visited tiles. */
                for (int i = r0; i < r0 + 64 && i < T; i++)
                    assert_true(i < nkt * 64);
            }
        }
        for (int k0 = 0; k0 < T; k0 += 64) { /* dK/dV blocks */
            int qt0, nqt;
            gpt_flash_tc_q_span(k0, T, 64, &qt0, &nqt);
            assert_true(qt0 * 64 <= k0); /* no query at or after k0 left out */
            assert_true(nqt * 64 >= T);
            for (int qt = qt0; qt < nqt; qt++)
                for (int part = 0; part < 2; part++) {
                    const int i0 = qt * 64 + part * 32;
                    int valid = 0;
                    for (int j = k0; j < k0 + 64 && j < T; j++)
                        for (int i = i0; i < i0 + 32 && i < T; i++)
                            valid += i >= j;
                    assert_int_equal(gpt_flash_wg_keys_live(k0, i0, 32, T), valid > 0);
                }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_swizzle_and_desc), cmocka_unit_test(test_acc_layout),
        cmocka_unit_test(test_products),         cmocka_unit_test(test_dq_products),
        cmocka_unit_test(test_dkv_products),     cmocka_unit_test(test_skips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
