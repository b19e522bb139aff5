/*
 * model_mem: what a training job allocates, estimated from its spec before
 * anything is allocated (issue 14: a model too large for the node must be
 * refused at submit, not grow until the kernel kills gptd). Pure
 * arithmetic that mirrors model.c's layout (model_layout, model_carve),
 * shard.c's per-rank buffers and trainer.c's set-up; test_model_mem checks
 * it against what the engine really allocates.
 *
 * Any thread; no I/O, no allocation.
 */
#ifndef GPT_MODEL_MEM_H
#define GPT_MODEL_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "gpt_config.h"

/* Bytes one worker (rank) needs. Sums are saturated at GPT_MEM_HUGE, so
 * absurd specs compare as "too large" instead of wrapping. */
#define GPT_MEM_HUGE (UINT64_C(1) << 62)

struct gpt_model_mem {
    uint64_t n_params;  /* the whole model's parameters */
    uint64_t params;    /* this rank's parameter buffers (after sharding) */
    uint64_t grads;     /* gradient buffers */
    uint64_t optim;     /* the two AdamW moments */
    uint64_t acts;      /* activations and backward workspace for micro_batch x block_size */
    uint64_t bf16;      /* bf16 mirrors (GPU backend with trainer.precision bf16), else 0 */
    uint64_t transient; /* set-up and snapshots: the host copy of the initial weights, and
                         * under sharding the full state gathered on every rank */
    uint64_t device;    /* what lives in backend memory at the peak */
    uint64_t host;      /* host memory beside it (all of it on the CPU backend) */
    uint64_t total;     /* device + host */
    int shard_buffers;  /* full sharding's gathered unit buffers counted (1 or 2), else 0 */
};

/* Estimates one worker's memory for model `cfg` (vocab_size already
 * resolved, >= 1), `micro_batch` sequences, sharding mode `sharding` (enum
 * gpt_sharding) over `world` ranks, on a GPU backend when `gpu` (bf16 mirrors
 * when `bf16`; on the CPU backend all of it is host memory). Under full
 * sharding `shard_buffers` (distributed.shard_buffers) is the count of
 * gathered unit buffers, 1 or 2, or 0 for gpt_shard_buffer_count's choice,
 * as gpt_shard_new takes it; other modes ignore it. Fills *ret. */
void gpt_model_mem_estimate(const struct gpt_model_config *cfg, int micro_batch, int sharding,
                            int shard_buffers, int world, int gpu, int bf16,
                            struct gpt_model_mem *ret);

#endif
