/*
 * cuda_attention_wg: the flash attention kernels on Hopper's warpgroup
 * matrix instructions (wgmma), attention_forward wg and attention_backward wg,
 * head size 64. The forward and the two-pass backward's dQ and dK/dV
 * passes as in cuda_attention.cu (the same blocks, spans, masks and
 * softmax), their products read from 128-byte-swizzled shared-memory
 * tiles through descriptors (engine/include/flash_wg.h, whose addressing
 * tests/unit/test_flash_wg.c replays on the CPU). wgmma exists only for
 * the arch-specific target, so this file alone is built as sm_90a code
 * (plus compute_90 PTX, cmake/cuda.cmake); in any other build the
 * kernels trap, and the probe kernel (gpt_cuda_flash_wg_live) tells the
 * backend which code the driver loaded. cuda_attention.cu chooses and
 * calls the launchers at the end.
 */
#include <math.h>
#include <stdint.h>

#include <atomic>

#include <cuda_bf16.h>

#include "cuda_flash_tc.cuh"
#include "flash_tc.h"
#include "flash_wg.h"

/* ---- warpgroup forward (attention_forward wg) ------------------------------------
 * cuda_attention.cu's m16 forward with wgmma in place of mma.sync: two
 * warpgroups of 64 query rows (the same 128-row blocks, grid and key
 * tiles), each
 * taking S = Q K^T for a 64-key tile in four m64n64k16 steps straight from
 * shared memory (no ldmatrix) and O += P V in four more with P from the
 * registers. The tiles are stored swizzled (flash_wg.h, whose CPU test
 * replays the descriptors); the softmax between the products is the m16
 * kernel's, per row, on the same register layout. A warpgroup whose 64
 * rows all precede a tile skips it (wgmma is collective: the skip is the
 * warpgroup's, the mask the warp's). Head size 64 only. The instructions
 * exist only in the sm_90a build of this file (__CUDA_ARCH_FEAT_SM90_ALL);
 * elsewhere the kernel traps, and gpt_cuda_flash_wg_live (the probe
 * below) says which build the driver loaded. */
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_LIVE 1
#else
#define WG_LIVE 0
#endif

/* What the probe kernel found: 1 in the sm_90a build (written by the
 * kernel itself: a host pointer to it would not be the device's). */
__device__ int wg_probe_flag;

__global__ void flash_wg_probe_kernel(void)
{
    wg_probe_flag = WG_LIVE;
}

#if WG_LIVE
__device__ __forceinline__ void wg_fence(void)
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wg_commit(void)
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wg_wait0(void)
{
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

/* Pins the accumulator registers at this point of the program: the
 * wgmma's results exist only after its wait, which the compiler cannot
 * see from the asm's operands. */
template <int N> __device__ __forceinline__ void wg_pin(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

/* Makes this thread's generic-proxy writes to shared memory (cp.async
 * included) visible to the async proxy that wgmma reads through. */
__device__ __forceinline__ void wg_fence_smem(void)
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

#define WG_D32                                                                                     \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WG_D32_OUT(d)                                                                              \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),            \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

/* d (+)= A B, m64n64k16, A and B K-major in shared memory; acc 0: d = A B. */
__device__ __forceinline__ void wg_mma_ss(float (&d)[32], uint64_t da, uint64_t db, int acc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_D32
                 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : WG_D32_OUT(d)
                 : "l"(da), "l"(db), "r"(acc));
}

/* d += A B, m64n64k16, A from registers, B MN-major in shared memory. */
__device__ __forceinline__ void wg_mma_rs(float (&d)[32], const uint32_t a[4], uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_D32
                 ", {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
                 : WG_D32_OUT(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

/* d += A B over NK k steps, issued (the caller commits and waits): A is
 * the lane's accumulators acc (8-column block n at acc[4 n ..]: columns
 * 16 kk .. of step kk) packed to bf16 as the next product's operand, B
 * the rows of k steps kstep0 .. of the tile at shared address base,
 * read MN-major (V, K, dO or Q: rows are the k dimension). */
template <int NK>
__device__ __forceinline__ void wg_mma_acc(float (&d)[32], const float *acc, uint32_t base,
                                           int kstep0)
{
    uint32_t a[NK][4];
#pragma unroll
    for (int kk = 0; kk < NK; kk++)
        tc_pack_a(a[kk], (const float(*)[4])acc, kk);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < NK; kk++)
        wg_mma_rs(d, a[kk],
                  gpt_flash_wg_desc(base + gpt_flash_wg_mnmajor_off(kstep0 + kk),
                                    GPT_FLASH_WG_MN_LBO, GPT_FLASH_WG_MN_SBO));
}
#endif

/* Rows t0 .. t0+rows-1 (64 bf16 columns) into a swizzled tile, cp.async
 * 16 bytes per copy, rows at or past T zero-filled. */
__device__ __forceinline__ void wg_load(uint16_t *s, const uint16_t *src, size_t stride, int t0,
                                        int rows, int T)
{
    for (int idx = threadIdx.x; idx < rows * 8; idx += blockDim.x) {
        int r = idx / 8, c = idx % 8, t = t0 + r;
        const uint16_t *g = src + (size_t)(t < T ? t : 0) * stride + c * 8;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                         tc_saddr(s + gpt_flash_wg_sw(r, c * 8))),
                     "l"(g), "r"(t < T ? 16 : 0)
                     : "memory");
    }
}

#if WG_LIVE
/* tc_kv_stage for the swizzled tiles (64 keys of 64 columns): prefetches
 * tile kt + 1's K and V into the other stage, waits for tile kt's, makes
 * them visible to wgmma (the async proxy) and to every thread, and
 * returns the shared-memory address of tile kt's K (its V follows). */
__device__ __forceinline__ uint32_t wg_kv_stage(uint16_t *skv, const uint16_t *gk,
                                                const uint16_t *gv, size_t ld3, int kt, int kt0,
                                                int nkt, int T)
{
    constexpr int TILE = TC_BC * GPT_FLASH_WG_HS;
    const int st = (kt - kt0) & 1;
    if (kt + 1 < nkt) {
        uint16_t *nk = skv + 2 * (st ^ 1) * TILE;
        wg_load(nk, gk, ld3, (kt + 1) * TC_BC, TC_BC, T);
        wg_load(nk + TILE, gv, ld3, (kt + 1) * TC_BC, TC_BC, T);
        tc_commit();
        tc_wait<1>();
    } else {
        tc_wait<0>();
    }
    wg_fence_smem();
    __syncthreads();
    return tc_saddr(skv + 2 * st * TILE);
}
#endif

__global__ void __launch_bounds__(GPT_FLASH_WG_THREADS, 2)
    flash_wg_forward_kernel(float *out, uint16_t *out_bf, float *lse, const uint16_t *qkv, int T,
                            int C, int NH, float scale2)
{
#if WG_LIVE
    constexpr int HS = GPT_FLASH_WG_HS, TILE = TC_BC * HS;
    extern __shared__ __align__(16) uint8_t wg_smem[];
    /* An atom-aligned base (the descriptors' base offset is 0). */
    uint16_t *sq = (uint16_t *)(wg_smem + gpt_flash_wg_align_pad(tc_saddr(wg_smem)));
    uint16_t *skv = sq + TC_FWD_BR * HS; /* stage s: K at skv + 2 s TILE, V after */
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * TC_FWD_BR;
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128, lane = threadIdx.x % FA_WARP;
    const size_t ld3 = 3 * (size_t)C;
    const uint16_t *gq = qkv + (size_t)b * T * ld3 + (size_t)h * HS, *gk = gq + C, *gv = gq + 2 * C;
    int kt0, nkt;
    gpt_flash_tc_kv_span(q0, T, &kt0, &nkt);

    wg_load(sq, gq, ld3, q0, TC_FWD_BR, T);
    wg_load(skv, gk, ld3, 0, TC_BC, T);
    wg_load(skv + TILE, gv, ld3, 0, TC_BC, T);
    tc_commit();

    const int r0 = q0 + wg * GPT_FLASH_WG_WGROWS; /* the warpgroup's first row */
    const int rt = r0 + 16 * (t / 32);            /* the warp's */
    const int ia = r0 + gpt_flash_wg_acc_row(t, 0), ib = ia + 8;
    const uint32_t qa = tc_saddr(sq);
    float o[32], s[32], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 32; i++)
        o[i] = s[i] = 0.0f;

    for (int kt = kt0; kt < nkt; kt++) {
        const int k0 = kt * TC_BC;
        const uint32_t ka = wg_kv_stage(skv, gk, gv, ld3, kt, kt0, nkt, T), va = ka + TILE * 2;
        /* Warpgroup-uniform: a key of the tile at or before its last row. */
        if (gpt_flash_wg_rows_live(r0, k0, T)) {
            wg_fence();
#pragma unroll
            for (int ks = 0; ks < HS / 16; ks++)
                wg_mma_ss(s,
                          gpt_flash_wg_desc(qa + gpt_flash_wg_kmajor_off(wg * 64, ks),
                                            GPT_FLASH_WG_K_LBO, GPT_FLASH_WG_K_SBO),
                          gpt_flash_wg_desc(ka + gpt_flash_wg_kmajor_off(0, ks), GPT_FLASH_WG_K_LBO,
                                            GPT_FLASH_WG_K_SBO),
                          ks);
            wg_commit();
            wg_wait0();
            wg_pin(s);
            /* The m16 kernel's softmax step over this warp's 16 rows. */
            const bool mask = gpt_flash_tc_needs_mask(rt, TC_WR, k0, TC_BC, T);
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int n = 0; n < TC_BC / 8; n++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int i = e < 2 ? ia : ib, j = k0 + gpt_flash_wg_acc_col(t, n, e);
                    float x = s[4 * n + e] * scale2;
                    if (mask && (j > i || j >= T))
                        x = -INFINITY;
                    s[4 * n + e] = x;
                    mx[e / 2] = fmaxf(mx[e / 2], x);
                }
            }
            float sub[2], alpha[2];
#pragma unroll
            for (int r = 0; r < 2; r++)
                alpha[r] = gpt_flash_tc_rescale(m[r], tc_quad_max(mx[r]), &m[r], &sub[r]);
            l[0] *= alpha[0];
            l[1] *= alpha[1];
#pragma unroll
            for (int n = 0; n < TC_BC / 8; n++) {
#pragma unroll
                for (int e = 0; e < 4; e++) /* masked: 2^-inf = 0 */
                    s[4 * n + e] = cu_exp2_ftz(s[4 * n + e] - sub[e / 2]);
                l[0] += s[4 * n] + s[4 * n + 1];
                l[1] += s[4 * n + 2] + s[4 * n + 3];
            }
#pragma unroll
            for (int i = 0; i < 32; i++)
                o[i] *= alpha[(i / 2) % 2];
            /* o += P V: P's A fragments from the S registers. */
            wg_mma_acc<TC_BC / 16>(o, s, va, 0);
            wg_commit();
            wg_wait0();
            wg_pin(o);
        }
        __syncthreads(); /* this stage is consumed before it is refilled */
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = r ? ib : ia;
        const float lt = tc_quad_sum(l[r]);
        if (row >= T)
            continue;
        const float inv = 1.0f / lt;
        const size_t at = ((size_t)b * T + row) * C + (size_t)h * HS + 2 * (lane % 4);
#pragma unroll
        for (int n = 0; n < HS / 8; n++)
            tc_store2(out, out_bf, at + n * 8, o[4 * n + 2 * r] * inv, o[4 * n + 2 * r + 1] * inv);
        if (lane % 4 == 0)
            lse[(size_t)bh * T + row] = gpt_flash_tc_lse(m[r], lt);
    }
#else
    (void)out, (void)out_bf, (void)lse, (void)qkv, (void)T, (void)C, (void)NH, (void)scale2;
    __trap();
#endif
}

/* ---- warpgroup dQ pass (attention_backward wg) -----------------------------------
 * cuda_attention.cu's dQ pass (flash_tc_dq_kernel) with wgmma, laid out
 * as the warpgroup forward (two warpgroups of 64 rows; warp w still owns
 * rows q0 + 16 w .., so the row terms are tc_dq_rows'). Per key tile, in
 * two halves of 32 keys as there (S and dP of a half are 16 accumulators
 * each per thread, dq 32: two blocks per SM): S = Q K^T and dP = dO V^T
 * in m64n32k16 steps from the swizzled Q, dO, K and V tiles (the half's
 * keys: its K and V rows, 4 atoms in), then dS as there and dq += dS K
 * in two m64n64k16 steps, dS
 * from the registers and K read MN-major, as the forward reads V. The
 * dK/dV pass that follows is flash_wg_dkv_kernel. Head size 64 only. */
#if WG_LIVE
#define WG_D16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define WG_D16_OUT(d)                                                                              \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),            \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15])

/* d (+)= A B, m64n32k16, A and B K-major in shared memory; acc 0: d = A B. */
__device__ __forceinline__ void wg_mma_ss32(float (&d)[16], uint64_t da, uint64_t db, int acc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " WG_D16
                 ", %16, %17, p, 1, 1, 0, 0;\n}\n"
                 : WG_D16_OUT(d)
                 : "l"(da), "l"(db), "r"(acc));
}

#endif

__global__ void __launch_bounds__(GPT_FLASH_WG_THREADS, 2)
    flash_wg_dq_kernel(float *dqkv, uint16_t *dqkv_bf, float *Dg, const uint16_t *dob,
                       const uint16_t *ob, const uint16_t *qkv, const float *lse, int T, int C,
                       int NH, float scale, float scale2)
{
#if WG_LIVE
    constexpr int HS = GPT_FLASH_WG_HS, TILE = TC_BC * HS, KP = TC_BC / 2;
    extern __shared__ __align__(16) uint8_t wg_smem[];
    /* Q, dO (128 rows each), then stage s's K at skv + 2 s TILE, V after;
     * from an atom-aligned base. */
    uint16_t *sq = (uint16_t *)(wg_smem + gpt_flash_wg_align_pad(tc_saddr(wg_smem)));
    uint16_t *sdo = sq + TC_FWD_BR * HS, *skv = sdo + TC_FWD_BR * HS;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * TC_FWD_BR;
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    const size_t ld3 = 3 * (size_t)C;
    const uint16_t *gq = qkv + (size_t)b * T * ld3 + (size_t)h * HS, *gk = gq + C, *gv = gq + 2 * C;
    const uint16_t *gdo = dob + (size_t)b * T * C + (size_t)h * HS;
    const uint16_t *go = ob + (size_t)b * T * C + (size_t)h * HS;
    int kt0, nkt;
    gpt_flash_tc_kv_span(q0, T, &kt0, &nkt);

    wg_load(sq, gq, ld3, q0, TC_FWD_BR, T);
    wg_load(sdo, gdo, C, q0, TC_FWD_BR, T);
    wg_load(skv, gk, ld3, 0, TC_BC, T);
    wg_load(skv + TILE, gv, ld3, 0, TC_BC, T);
    tc_commit();

    const int r0 = q0 + wg * GPT_FLASH_WG_WGROWS, rt = r0 + 16 * (t / 32);
    const int ia = r0 + gpt_flash_wg_acc_row(t, 0), ib = ia + 8;
    float dr[2], lr[2]; /* D and lse2 of rows ia, ib */
    tc_dq_rows<HS>(dr, lr, Dg, gdo, go, lse, (size_t)bh * T, rt, T, C);
    const uint32_t qa = tc_saddr(sq), doa = tc_saddr(sdo);
    float dq[32], s[16], dp[16];
#pragma unroll
    for (int i = 0; i < 32; i++)
        dq[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; i++)
        s[i] = dp[i] = 0.0f;

    for (int kt = kt0; kt < nkt; kt++) {
        const int k0 = kt * TC_BC;
        const uint32_t ka = wg_kv_stage(skv, gk, gv, ld3, kt, kt0, nkt, T), va = ka + TILE * 2;
#pragma unroll
        for (int part = 0; part < 2; part++) {
            const int j0 = k0 + part * KP; /* the half's first key */
            /* Warpgroup-uniform: a key of the half at or before its last row. */
            if (!gpt_flash_wg_rows_live(r0, j0, T))
                continue;
            wg_fence();
#pragma unroll
            for (int ks = 0; ks < HS / 16; ks++) {
                const uint64_t kd = gpt_flash_wg_desc(ka + gpt_flash_wg_kmajor_off(part * KP, ks),
                                                      GPT_FLASH_WG_K_LBO, GPT_FLASH_WG_K_SBO),
                               vd = gpt_flash_wg_desc(va + gpt_flash_wg_kmajor_off(part * KP, ks),
                                                      GPT_FLASH_WG_K_LBO, GPT_FLASH_WG_K_SBO);
                wg_mma_ss32(s,
                            gpt_flash_wg_desc(qa + gpt_flash_wg_kmajor_off(wg * 64, ks),
                                              GPT_FLASH_WG_K_LBO, GPT_FLASH_WG_K_SBO),
                            kd, ks);
                wg_mma_ss32(dp,
                            gpt_flash_wg_desc(doa + gpt_flash_wg_kmajor_off(wg * 64, ks),
                                              GPT_FLASH_WG_K_LBO, GPT_FLASH_WG_K_SBO),
                            vd, ks);
            }
            wg_commit();
            wg_wait0();
            wg_pin(s);
            wg_pin(dp);
            const bool mask = gpt_flash_tc_needs_mask(rt, TC_WR, j0, KP, T);
#pragma unroll
            for (int n = 0; n < KP / 8; n++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = e / 2, i = r ? ib : ia, j = j0 + gpt_flash_wg_acc_col(t, n, e);
                    float p = cu_exp2_ftz(s[4 * n + e] * scale2 - lr[r]);
                    if (mask && (j > i || i >= T || j >= T))
                        p = 0.0f;
                    s[4 * n + e] = p * (dp[4 * n + e] - dr[r]); /* dS */
                }
            }
            wg_mma_acc<KP / 16>(dq, s, ka, part * KP / 16); /* dq += dS K */
            wg_commit();
            wg_wait0();
            wg_pin(dq);
        }
        __syncthreads(); /* this stage is consumed before it is refilled */
    }
    tc_store_dq<HS>(dqkv, dqkv_bf, dq, (size_t)b * T, ia, T, ld3, h, scale);
#else
    (void)dqkv, (void)dqkv_bf, (void)Dg, (void)dob, (void)ob, (void)qkv, (void)lse, (void)T;
    (void)C, (void)NH, (void)scale, (void)scale2;
    __trap();
#endif
}

/* ---- warpgroup dK/dV pass (attention_backward wg) ---------------------------------
 * The two-pass backward's dK/dV pass (flash_tc_bwd_kernel<64, 2, false>)
 * with wgmma: one warpgroup owns 64 keys (the same grid, block x taking
 * key block x; warp w keys k0 + 16 w ..), K and V swizzled in shared
 * memory, and streams query tiles of 64 rows (Q and dO, two stages, with
 * their lse2 and the dQ pass's D). Per tile, in two parts of 32 queries:
 * S^T = K Q^T and dP^T = V dO^T as m64n32 products (K and V as A, the
 * part's Q and dO rows as B, all K-major), P^T and dS^T as in the
 * mma.sync pass, then dv += P^T dO and dk += dS^T Q in two m64n64k16
 * steps each, P^T and dS^T from the registers and dO and Q read
 * MN-major. A part whose queries all precede the block's keys (or lie
 * past T) is skipped by the whole warpgroup. Head size 64 only. */
__global__ void __launch_bounds__(128, 3)
    flash_wg_dkv_kernel(float *dqkv, uint16_t *dqkv_bf, const float *Dg, const uint16_t *dob,
                        const uint16_t *qkv, const float *lse, int T, int C, int NH, float scale,
                        float scale2)
{
#if WG_LIVE
    constexpr int HS = GPT_FLASH_WG_HS, BQ = 64, QP = BQ / 2, TILE = BQ * HS;
    extern __shared__ __align__(16) uint8_t wg_smem[];
    /* K, V (64 rows each), two stages of (Q, dO), then lse2 and D of each
     * stage (fp32, BQ each); from an atom-aligned base. */
    uint16_t *sk = (uint16_t *)(wg_smem + gpt_flash_wg_align_pad(tc_saddr(wg_smem)));
    uint16_t *sv = sk + TC_BR * HS, *sqd = sv + TC_BR * HS;
    float *srow = (float *)(sqd + 4 * TILE), *sD = srow + 2 * BQ;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    /* Key block x: a head's blocks with the most query tiles first (no
     * dQ turns here to order them otherwise), so the last blocks of the
     * grid are its lightest. */
    const int kb = blockIdx.x, k0 = kb * TC_BR;
    const int t = threadIdx.x;
    const size_t ld3 = 3 * (size_t)C;
    const uint16_t *gq = qkv + (size_t)b * T * ld3 + (size_t)h * HS, *gk = gq + C, *gv = gq + 2 * C;
    const uint16_t *gdo = dob + (size_t)b * T * C + (size_t)h * HS;
    const float *glse = lse + (size_t)bh * T, *gD = Dg + (size_t)bh * T;
    int qt0, nqt;
    gpt_flash_tc_q_span(k0, T, BQ, &qt0, &nqt);

    wg_load(sk, gk, ld3, k0, TC_BR, T);
    wg_load(sv, gv, ld3, k0, TC_BR, T);
    wg_load(sqd, gq, ld3, qt0 * BQ, BQ, T);
    wg_load(sqd + TILE, gdo, C, qt0 * BQ, BQ, T);
    tc_commit();
    for (int x = t; x < BQ; x += blockDim.x) {
        int i = qt0 * BQ + x;
        srow[x] = i < T ? glse[i] * GPT_FLASH_LOG2E : 0.0f;
        sD[x] = i < T ? gD[i] : 0.0f;
    }

    const int wr = 16 * (t / 32), ja = k0 + gpt_flash_wg_acc_row(t, 0), jb = ja + 8;
    const uint32_t ka = tc_saddr(sk), vsa = tc_saddr(sv);
    float dk[32], dv[32], s[16], dp[16];
#pragma unroll
    for (int i = 0; i < 32; i++)
        dk[i] = dv[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; i++)
        s[i] = dp[i] = 0.0f;

    for (int qt = qt0; qt < nqt; qt++) {
        const int st = (qt - qt0) & 1, i0 = qt * BQ;
        const uint16_t *sq = sqd + 2 * st * TILE, *sdo = sq + TILE;
        const float *sl = srow + st * BQ, *sd = sD + st * BQ;
        if (qt + 1 < nqt) {
            uint16_t *nq = sqd + 2 * (st ^ 1) * TILE;
            wg_load(nq, gq, ld3, i0 + BQ, BQ, T);
            wg_load(nq + TILE, gdo, C, i0 + BQ, BQ, T);
            tc_commit();
            for (int x = t; x < BQ; x += blockDim.x) {
                int i = i0 + BQ + x;
                srow[(st ^ 1) * BQ + x] = i < T ? glse[i] * GPT_FLASH_LOG2E : 0.0f;
                sD[(st ^ 1) * BQ + x] = i < T ? gD[i] : 0.0f;
            }
            tc_wait<1>();
        } else {
            tc_wait<0>();
        }
        wg_fence_smem();
        __syncthreads();
        const uint32_t qa = tc_saddr(sq), doa = tc_saddr(sdo);
        /* Keys are the rows, queries the columns: the mask is i < j (a
         * query before the key) or either past T. */
        const bool mask = gpt_flash_tc_needs_mask(i0, BQ, k0 + wr, TC_WR, T);
#pragma unroll
        for (int part = 0; part < 2; part++) {
            const int c0 = part * QP; /* the part's first query in the tile */
            if (!gpt_flash_wg_keys_live(k0, i0 + c0, QP, T))
                continue; /* warpgroup-uniform: no valid pair */
            wg_fence();
#pragma unroll
            for (int ks = 0; ks < HS / 16; ks++) {
                const uint64_t qd = gpt_flash_wg_desc(qa + gpt_flash_wg_kmajor_off(c0, ks),
                                                      GPT_FLASH_WG_K_LBO, GPT_FLASH_WG_K_SBO),
                               dd = gpt_flash_wg_desc(doa + gpt_flash_wg_kmajor_off(c0, ks),
                                                      GPT_FLASH_WG_K_LBO, GPT_FLASH_WG_K_SBO);
                wg_mma_ss32(s,
                            gpt_flash_wg_desc(ka + gpt_flash_wg_kmajor_off(0, ks),
                                              GPT_FLASH_WG_K_LBO, GPT_FLASH_WG_K_SBO),
                            qd, ks);
                wg_mma_ss32(dp,
                            gpt_flash_wg_desc(vsa + gpt_flash_wg_kmajor_off(0, ks),
                                              GPT_FLASH_WG_K_LBO, GPT_FLASH_WG_K_SBO),
                            dd, ks);
            }
            wg_commit();
            wg_wait0();
            wg_pin(s);
            wg_pin(dp);
#pragma unroll
            for (int n = 0; n < QP / 8; n++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int j = e < 2 ? ja : jb, c = c0 + gpt_flash_wg_acc_col(t, n, e),
                              i = i0 + c;
                    float p = cu_exp2_ftz(s[4 * n + e] * scale2 - sl[c]);
                    if (mask && (i < j || i >= T || j >= T))
                        p = 0.0f;
                    s[4 * n + e] = p;                            /* P^T */
                    dp[4 * n + e] = p * (dp[4 * n + e] - sd[c]); /* dS^T */
                }
            }
            wg_mma_acc<QP / 16>(dv, s, doa, c0 / 16); /* dv += P^T dO */
            wg_mma_acc<QP / 16>(dk, dp, qa, c0 / 16); /* dk += dS^T Q */
            wg_commit();
            wg_wait0();
            wg_pin(dv);
            wg_pin(dk);
        }
        __syncthreads(); /* this stage, its lse2 and D consumed before they are refilled */
    }
    tc_store_dkv<HS>(dqkv, dqkv_bf, dk, dv, (size_t)b * T, ja, T, ld3, C, h, scale);
#else
    (void)dqkv, (void)dqkv_bf, (void)Dg, (void)dob, (void)qkv, (void)lse, (void)T, (void)C;
    (void)NH, (void)scale, (void)scale2;
    __trap();
#endif
}

/* ---- launchers ------------------------------------------------------------------ */

/* Whether the driver loaded this file's sm_90a code (the wgmma
 * instructions), asked once by the probe kernel; -1 before. */
static std::atomic<int> wg_live{-1};

extern "C" int gpt_cuda_flash_wg_live(void)
{
    int v = wg_live.load(std::memory_order_relaxed);
    if (v < 0) {
        int got = 0;
        flash_wg_probe_kernel<<<1, 1>>>();
        if (cudaMemcpyFromSymbol(&got, wg_probe_flag, sizeof(got)) != cudaSuccess) {
            (void)cudaGetLastError();
            got = 0;
        }
        v = got ? 1 : 0;
        wg_live.store(v, std::memory_order_relaxed);
    }
    return v;
}

cudaError_t cuk_flash_wg_forward(cudaStream_t s, unsigned bh, float *out, uint16_t *out_bf,
                                 float *lse, const uint16_t *qkv, int T, int C, int NH,
                                 float scale2)
{
    const size_t smem = gpt_flash_wg_smem_fwd();
    cudaError_t e = fa_smem_optin(flash_wg_forward_kernel, smem);
    if (e != cudaSuccess)
        return e;
    dim3 grid((unsigned)((T + TC_FWD_BR - 1) / TC_FWD_BR), bh);
    flash_wg_forward_kernel<<<grid, GPT_FLASH_WG_THREADS, smem, s>>>(out, out_bf, lse, qkv, T, C,
                                                                     NH, scale2);
    return cudaSuccess;
}

cudaError_t cuk_flash_wg_backward(cudaStream_t s, unsigned bh, float *dqkv, uint16_t *dqkv_bf,
                                  float *Dv, uint16_t *dob, const float *dout,
                                  const uint16_t *out_bf, const uint16_t *qkv, const float *lse,
                                  int T, int C, int NH, float scale, float scale2)
{
    const size_t smem_dq = gpt_flash_wg_smem_dq(), smem_dkv = gpt_flash_wg_smem_dkv();
    cudaError_t e;
    if ((e = fa_smem_optin(flash_wg_dq_kernel, smem_dq)) != cudaSuccess ||
        (e = fa_smem_optin(flash_wg_dkv_kernel, smem_dkv)) != cudaSuccess)
        return e;
    /* three dK/dV blocks need the largest carve-out; a refusal costs the third */
    (void)cudaFuncSetAttribute(flash_wg_dkv_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                               cudaSharedmemCarveoutMaxShared);
    (void)cudaGetLastError();
    if (dout)
        cuk_f32_to_bf16(s, dob, dout, (size_t)(bh / (unsigned)NH) * (size_t)T * (size_t)C);
    dim3 gq((unsigned)((T + TC_FWD_BR - 1) / TC_FWD_BR), bh);
    dim3 gk((unsigned)((T + TC_BR - 1) / TC_BR), bh);
    flash_wg_dq_kernel<<<gq, GPT_FLASH_WG_THREADS, smem_dq, s>>>(dqkv, dqkv_bf, Dv, dob, out_bf,
                                                                 qkv, lse, T, C, NH, scale, scale2);
    flash_wg_dkv_kernel<<<gk, GPT_FLASH_WG_THREADS / 2, smem_dkv, s>>>(
        dqkv, dqkv_bf, Dv, dob, qkv, lse, T, C, NH, scale, scale2);
    return cudaSuccess;
}
