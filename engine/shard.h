/*
 * shard: sharded data parallelism for the trainer.
 *
 *   optimizer (ZeRO-1): every rank keeps full parameters and gradients; the
 *     AdamW moments exist only for this rank's slice of the flat buffer.
 *     Gradients are reduce-scattered, the slice is updated, parameters are
 *     all-gathered.
 *   full (FSDP-like): parameters, gradients and moments are all sharded.
 *     The model fetches each parameter unit (embeddings, each third of a
 *     block, final LayerNorm) through struct gpt_model_units: the unit is all-gathered
 *     just before use and released after; gradients of a unit are
 *     reduce-scattered as soon as backward finishes it. A communication
 *     thread runs every collective in issue order and prefetches the next
 *     unit while the current one computes.
 *
 * Slices follow gpt_comm_slice (uneven shards allowed). One struct
 * gpt_shard per rank, used by the worker thread that owns the model.
 */
#ifndef GPT_SHARD_H
#define GPT_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "gpt_config.h"
#include "gpt_err.h"
#include "rng.h"
#include "snapshot.h"

struct gpt_model;
struct gpt_backend;
struct gpt_shard;

/* Per-rank memory of the training state, in bytes: the persistent state
 * (params, grads, optim) and the transient working buffers full sharding
 * adds (gathered units and unit gradients; 0 for optimizer sharding). */
struct gpt_shard_mem {
    uint64_t params, grads, optim, work;
};

/* Creates the shard state for `mode` (GPT_SHARD_OPTIMIZER or
 * GPT_SHARD_FULL) over `comm` (borrowed). For full sharding, pass
 * gpt_shard_units() to gpt_model_init_sharded, then call gpt_shard_attach;
 * for optimizer sharding, init the model normally and attach. `buffers`
 * (distributed.shard_buffers): full sharding's gathered unit buffers, 1
 * or 2, or 0 for gpt_shard_buffer_count's choice. */
int gpt_shard_new(int mode, int buffers, struct gpt_comm *comm, struct gpt_backend *be,
                  struct gpt_shard **ret, struct gpt_err *err);
const struct gpt_model_units *gpt_shard_units(struct gpt_shard *sh);
/* Sizes the slices from the model's layout and allocates the shard
 * buffers; starts the communication thread (full). */
int gpt_shard_attach(struct gpt_shard *sh, struct gpt_model *m, struct gpt_err *err);
/* NULL allowed. Stops the thread and frees every buffer. */
void gpt_shard_free(struct gpt_shard *sh);

/* Gathers the full state on every rank into the given buffers (n_params
 * each; m and v may be NULL to skip). Collective. */
int gpt_shard_gather_full(struct gpt_shard *sh, float *params, float *m, float *v);

/* Before the first micro-batch of a step. */
void gpt_shard_zero_grad(struct gpt_shard *sh);
/* After the last micro-batch's backward: finishes the gradient reduction
 * (reduce-scatter for optimizer sharding; waits for the per-unit
 * reductions for full). Collective. */
int gpt_shard_reduce_grads(struct gpt_shard *sh);
/* Waits until the communication thread has run everything queued, so the
 * caller may use the communicator itself. Returns the first error. */
int gpt_shard_sync(struct gpt_shard *sh);
/* Global gradient norm (before clipping). Collective. */
int gpt_shard_grad_norm(struct gpt_shard *sh, double *ret_norm);
/* AdamW on this rank's slices, then (optimizer sharding) the all-gather of
 * the parameters. Collective. */
int gpt_shard_update(struct gpt_shard *sh, const struct gpt_optim_spec *o, float lr, int64_t t,
                     float grad_scale);

void gpt_shard_mem(const struct gpt_shard *sh, struct gpt_shard_mem *ret);

/* How many gathered unit buffers (and as many unit gradient buffers) full
 * sharding keeps when a rank's shard holds shard_len floats (n_params over
 * the world, rounded up: the same on every rank) and the largest unit but
 * the embeddings max_unit: 2 (the next unit's
 * all-gather and the last one's reduce-scatter overlap compute) when the
 * second pair costs at most 1/32 of the rank's persistent state (params,
 * grads, m, v of its shard), else 1 (every collective waits, one unit less
 * of each); the job spec's distributed.shard_buffers 1 or 2 forces the
 * count instead. Any thread. */
int gpt_shard_buffer_count(size_t max_unit, size_t shard_len);

/* ---- sharded snapshots and loading without full-size copies ---- */

/* Whether every rank sees `dir` (its own snapshot folder, "" or NULL
 * for none) as the same folder: rank 0 leaves a probe file there and each
 * rank looks for it. The answer is kept for the shard's lifetime.
 * Collective; blocking file I/O. */
int gpt_shard_snapshot_shared(struct gpt_shard *sh, const char *dir, bool *ret_shared);

/* Writes a sharded snapshot into dir (shared by every rank: see
 * gpt_shard_snapshot_shared): each rank writes its slice straight from
 * its shard buffers (no full-size buffer anywhere), then rank 0 writes
 * the manifest. meta is rank 0's (the others' is not read past step).
 * On rank 0, ret_path and *ret_bytes (may be NULL) get the manifest's
 * path and the snapshot's total size. Returns the same status on every
 * rank; on failure no slice of this snapshot is left. Collective. */
int gpt_shard_snapshot_write(struct gpt_shard *sh, const char *dir,
                             const struct gpt_snapshot_meta *meta, char *ret_path, size_t path_cap,
                             uint64_t *ret_bytes, struct gpt_err *err);

/* Rank 0's source of the start state: fills dst with floats
 * [off, off + count) of array `which` (0 params, 1 m, 2 v). */
typedef int (*gpt_shard_source_fn)(void *ctx, int which, size_t off, size_t count, float *dst,
                                   struct gpt_err *err);
#define GPT_SHARD_CHUNK_FLOATS (1u << 20) /* floats per broadcast while loading */

/* Loads every rank's shard from rank 0's source, one chunk of
 * GPT_SHARD_CHUNK_FLOATS at a time (rank 0 passes read and whether there
 * are moments; the others NULL): no rank holds more than a chunk beyond
 * its own state. Moments are zero when rank 0 says there are none.
 * Collective, and so is its outcome: when any rank fails (rank 0's
 * source, or a rank on its own: its chunk buffer, storing its slice,
 * a gathered-buffer count unlike rank 0's) every rank returns an error,
 * the failing rank its own, the others one naming it. */
int gpt_shard_load_stream(struct gpt_shard *sh, gpt_shard_source_fn read, void *ctx, int moments,
                          struct gpt_err *err);
/* Tests: the next gpt_shard_load_stream on this rank fails with rc (< 0)
 * after its last chunk, as a rank that cannot store its slice would. */
void gpt_shard_test_fail_load(struct gpt_shard *sh, int rc);

/* The fresh weights of gpt_model_init_weights_host, produced in layout
 * order a chunk at a time (no full-size buffer), the same values bit for
 * bit. Begin, then next with consecutive chunks. m is borrowed. */
struct gpt_shard_init {
    const struct gpt_model *m;
    struct gpt_rng rng;
    double resid_std;
    size_t tensor, pos;
};
void gpt_shard_init_begin(struct gpt_shard_init *s, const struct gpt_model *m, uint64_t seed);
void gpt_shard_init_next(struct gpt_shard_init *s, float *dst, size_t count);

#endif
