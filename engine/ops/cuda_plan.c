/*
 * cuda_plan: launch shapes, reduction splits, the NCCL padding plan and
 * bucket boundaries of the CUDA backend (see cuda_plan.h). Plain C with no
 * CUDA dependency, so it lives in the CPU engine and is tested there.
 */
#include "cuda_plan.h"

#include "comm.h"

unsigned gpt_cuda_plan_grid(size_t n, unsigned block, unsigned max_grid)
{
    GPT_ASSERT(block > 0 && max_grid > 0);
    size_t g = (n + block - 1) / block;
    if (g < 1)
        g = 1;
    if (g > max_grid)
        g = max_grid;
    return (unsigned)g;
}

unsigned gpt_cuda_plan_row_grid(size_t rows, unsigned warps_per_block)
{
    return gpt_cuda_plan_grid(rows, warps_per_block, GPT_CUDA_MAX_GRID);
}

unsigned gpt_cuda_plan_sumsq_blocks(size_t n, unsigned block)
{
    GPT_ASSERT(block > 0);
    return gpt_cuda_plan_grid(n, block * 8u, GPT_CUDA_SUMSQ_MAX_BLOCKS);
}

unsigned gpt_cuda_plan_colsum_splits(size_t N, size_t C, size_t scratch_floats)
{
    GPT_ASSERT(C > 0);
    size_t s = N / 256;
    if (s > GPT_CUDA_COLSUM_MAX_SPLITS)
        s = GPT_CUDA_COLSUM_MAX_SPLITS;
    if (s > scratch_floats / C)
        s = scratch_floats / C;
    return s < 2 ? 1u : (unsigned)s;
}

void gpt_cuda_pad_plan_init(struct gpt_cuda_pad_plan *p, size_t n, int world)
{
    GPT_ASSERT(p && world > 0);
    p->n = n;
    p->world = world;
    p->chunk = (n + (size_t)world - 1) / (size_t)world;
    p->padded = p->chunk * (size_t)world;
    p->needs_pad = n % (size_t)world != 0;
}

void gpt_cuda_pad_plan_slice(const struct gpt_cuda_pad_plan *p, int rank, size_t *ret_off,
                             size_t *ret_len, size_t *ret_padded_off)
{
    GPT_ASSERT(p && rank >= 0 && rank < p->world);
    gpt_comm_slice(p->n, p->world, rank, ret_off, ret_len);
    *ret_padded_off = (size_t)rank * p->chunk;
}

size_t gpt_cuda_plan_buckets(size_t n, size_t max_bucket_elems, size_t *ret_bucket_elems)
{
    size_t b = max_bucket_elems & ~(size_t)63;
    if (b < 64)
        b = 64;
    *ret_bucket_elems = b;
    return (n + b - 1) / b;
}
