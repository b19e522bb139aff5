/*
 * flash_wg: the shared-memory layout and the operand descriptors of the
 * warpgroup (wgmma, sm_90a) flash attention kernels (the forward,
 * attention_forward wg, and the two backward passes, attention_backward wg;
 * engine/ops/cuda/cuda_attention_wg.cu), in plain C. The kernels and the CPU
 * test (tests/unit/test_flash_wg.c) use the same functions: the test
 * replays what the PTX ISA says a wgmma reads through a descriptor
 * (section "Shared Memory Matrix Layout": canonical layouts, 128-byte
 * swizzle) and checks that the tiles the kernels store and the
 * descriptors they build give their products, so the addressing is tested
 * on machines without a GPU.
 *
 * Head size 64 only (GPT-2's): one bf16 row of a Q, K or V tile is 128
 * bytes, exactly one row of a 128-byte swizzle atom (8 rows, 1024 bytes).
 * A tile is stored row-major with rows of 128 bytes, and the 16-byte
 * chunk c of row r at chunk c ^ (r % 8) (Swizzle<3,4,3>: address bits
 * 4-6 take bits 7-9), from a 1024-byte aligned base, so the descriptors'
 * base offset is 0. The same tile serves as a K-major operand (Q and K
 * for S = Q K^T: rows are M or N, the 64 head columns are K) and as an
 * MN-major one (V for O += P V: rows are keys, i.e. K, the head columns
 * are N), which the instruction reads transposed (imm-trans-b 1).
 *
 * Pure: no allocation, no globals; any thread.
 */
#ifndef GPT_FLASH_WG_H
#define GPT_FLASH_WG_H

#include <stddef.h>
#include <stdint.h>

#include "flash_tc.h"

#define GPT_FLASH_WG_HS      64   /* the head size the kernel is built for */
#define GPT_FLASH_WG_ROW     128  /* bytes per tile row (64 bf16) */
#define GPT_FLASH_WG_ATOM    1024 /* bytes per swizzle atom: 8 rows */
#define GPT_FLASH_WG_WGROWS  64   /* query rows per warpgroup (one m64) */
#define GPT_FLASH_WG_THREADS 256  /* two warpgroups: the forward's 128-row block */

/* The element index of (row r, column c) in a swizzled tile. */
GPT_FLASH_FN int gpt_flash_wg_sw(int r, int c)
{
    return r * 64 + (((c >> 3) ^ (r & 7)) << 3) + (c & 7);
}

/* A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor
 * Format"): start address, leading and stride byte offsets (each >> 4
 * in 14 bits), base offset 0, 128-byte swizzle (mode 1 in bits 62-63). */
GPT_FLASH_FN uint64_t gpt_flash_wg_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | (uint64_t)((lbo & 0x3FFFFu) >> 4) << 16 |
           (uint64_t)((sbo & 0x3FFFFu) >> 4) << 32 | (uint64_t)1 << 62;
}

/* The strides: a K-major operand's 8-row groups lie one atom apart (its
 * leading offset is unused with a swizzle: 16, encoded 1, as the ISA
 * assumes); an MN-major one's 8 key rows likewise, and its leading
 * offset (the next 64 columns) is never reached at N = 64. */
#define GPT_FLASH_WG_K_LBO  16u
#define GPT_FLASH_WG_K_SBO  ((uint32_t)GPT_FLASH_WG_ATOM)
#define GPT_FLASH_WG_MN_LBO ((uint32_t)(64 * GPT_FLASH_WG_ROW))
#define GPT_FLASH_WG_MN_SBO ((uint32_t)GPT_FLASH_WG_ATOM)

/* Byte offsets, from a tile's base, where the operand of k step ks
 * (0..3, 16 head columns) starts: K-major, the start moves 32 bytes
 * along the row (inside the atom: the swizzle is applied to the whole
 * address, as for the stores). rows0: the warpgroup's first row. */
GPT_FLASH_FN uint32_t gpt_flash_wg_kmajor_off(int rows0, int ks)
{
    return (uint32_t)(rows0 * GPT_FLASH_WG_ROW + ks * 32);
}

/* The MN-major operand of k step kk (keys 16 kk .. 16 kk + 15 of a V
 * tile): two atoms further per step. */
GPT_FLASH_FN uint32_t gpt_flash_wg_mnmajor_off(int kk)
{
    return (uint32_t)(kk * 16 * GPT_FLASH_WG_ROW);
}

/* Accumulator and register-A layout of wgmma .m64nNk16 (PTX ISA figures
 * "register fragment layout for accumulator matrix D" and "for matrix
 * A"): thread t of the warpgroup (warp t / 32 owns rows 16 (t / 32) ..
 * + 15) holds, of 8-column block n, registers 4 n + e: row
 * 16 (t / 32) + (t % 32) / 4 + 8 (e / 2), column 8 n + 2 (t % 4) + e % 2;
 * the A fragment of a k16 step is the same over its two 8-column blocks
 * (a0 a1 block 0 rows g, a2 a3 block 0 rows g + 8, a4..a7 block 1), so
 * a row of accumulator blocks 2 kk, 2 kk + 1 packs into A for step kk
 * as with mma.sync (tc_pack_a). */
GPT_FLASH_FN int gpt_flash_wg_acc_row(int t, int e)
{
    return 16 * (t / 32) + (t % 32) / 4 + 8 * (e / 2);
}

GPT_FLASH_FN int gpt_flash_wg_acc_col(int t, int n, int e)
{
    return 8 * n + 2 * (t % 4) + e % 2;
}

/* Bytes from a dynamic shared-memory base at saddr to the next atom
 * boundary, where the kernel puts its first tile. */
GPT_FLASH_FN uint32_t gpt_flash_wg_align_pad(uint32_t saddr)
{
    return (GPT_FLASH_WG_ATOM - (saddr & (GPT_FLASH_WG_ATOM - 1))) & (GPT_FLASH_WG_ATOM - 1);
}

/* Dynamic shared memory of the forward, bytes: Q (128 rows) and two
 * stages of K and V (64 rows each), plus the slack that aligns the base
 * to an atom. */
GPT_FLASH_FN size_t gpt_flash_wg_smem_fwd(void)
{
    return (size_t)GPT_FLASH_WG_ATOM +
           (size_t)(GPT_FLASH_TC_FWD_BR + 4 * GPT_FLASH_TC_BC) * GPT_FLASH_WG_ROW;
}

/* The warpgroup dQ pass's (attention_backward wg): Q and dO (128 rows each)
 * and two stages of K and V, plus the alignment slack. */
GPT_FLASH_FN size_t gpt_flash_wg_smem_dq(void)
{
    return (size_t)GPT_FLASH_WG_ATOM +
           (size_t)(2 * GPT_FLASH_TC_FWD_BR + 4 * GPT_FLASH_TC_BC) * GPT_FLASH_WG_ROW;
}

/* The warpgroup dK/dV pass's: K and V (64 rows each), two stages of Q
 * and dO (64 rows each) and of the rows' lse2 and D (fp32), plus the
 * alignment slack. */
GPT_FLASH_FN size_t gpt_flash_wg_smem_dkv(void)
{
    return (size_t)GPT_FLASH_WG_ATOM + (size_t)(2 * GPT_FLASH_TC_BR + 4 * 64) * GPT_FLASH_WG_ROW +
           4 * 64 * sizeof(float);
}

/* Whether a warpgroup's 64 rows starting at r0 meet the keys from j0 (a
 * key at or before one of its rows, both below T): the forward and the
 * dQ pass skip a tile or half that they do not meet (every pair of it is
 * masked). */
GPT_FLASH_FN int gpt_flash_wg_rows_live(int r0, int j0, int T)
{
    return r0 < T && j0 < T && j0 <= r0 + GPT_FLASH_WG_WGROWS - 1;
}

/* The dK/dV pass's: whether queries [i0, i0 + ni) meet the block's keys
 * from k0 (a query at or after its first key, below T). */
GPT_FLASH_FN int gpt_flash_wg_keys_live(int k0, int i0, int ni, int T)
{
    return i0 < T && i0 + ni - 1 >= k0;
}

#endif
