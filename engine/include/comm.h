/*
 * comm: collective operations between the ranks of one world (DDP,
 * sharded training). One struct gpt_comm per worker thread; all calls on it
 * come from that thread except gpt_comm_abort(), which any thread may call.
 * Every collective blocks until done, then returns 0, -ECANCELED (after an
 * abort, within one second of it), -ETIMEDOUT (no progress for the
 * configured timeout) or another negative error (peer lost: -EPIPE, ...).
 * After a failure the communicator is unusable except for free.
 *
 * Backends: local (world of one, no copies), tcp (ring over sockets,
 * addresses exchanged through a struct gpt_kv; when every rank is on this
 * host, collectives go through shared memory instead and ops->name is
 * "shm"), nccl (GPU, optional build), staged (device buffers copied
 * through host memory to a tcp/shm communicator: what a GPU world falls
 * back to when NCCL does not form; comm_staged.c).
 */
#ifndef GPT_COMM_H
#define GPT_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "gpt_err.h"

enum gpt_reduce_op { GPT_REDUCE_SUM, GPT_REDUCE_AVG };

/* What a gradient reduction carries between ranks (distributed.grad_reduce).
 * FP32: the buffer's own floats, today's bits. BF16: each rank's
 * contribution rounded to bf16 (nearest even), summed in fp32, and the
 * result rounded to bf16 again; the buffer stays float and holds
 * bf16-representable values afterwards. NCCL moves bf16 (half the bytes;
 * its ring also rounds each partial sum to bf16 at every hop); the CPU
 * transports round in and out around their fp32 reduction, so they move
 * fp32 bytes and accumulate in fp32 end to end, with the same bits on the
 * ring and through shared memory. A world of one reduces nothing in
 * either mode, so it keeps its bits. */
enum gpt_comm_dtype { GPT_COMM_FP32, GPT_COMM_BF16 };

/* A blocking key-value store the comm layer uses to exchange addresses and
 * ids (the rendezvous store client implements it; tests may use an
 * in-memory one). Keys are NUL-terminated; values are bytes. */
struct gpt_kv {
    void *ctx;
    int (*set)(void *ctx, const char *key, const void *val, size_t len);
    /* Waits until `key` exists (or timeout), copies at most `cap` bytes. */
    int (*get)(void *ctx, const char *key, void *buf, size_t cap, size_t *ret_len, int timeout_ms);
};

struct gpt_comm_opts {
    int rank;
    int world;
    const char *prefix;    /* key prefix, unique per world formation ("job7/r3/") */
    const char *bind_host; /* address peers connect to; NULL = 127.0.0.1 */
    int timeout_ms;        /* no-progress timeout of one collective; 0 = 300000 */
    size_t chunk_bytes;    /* ring pipeline chunk, and shm staging per rank; 0 = default */
    /* tcp: shared memory when all ranks share this host (the same boot and
     * network, mount and IPC namespaces); the sockets stay, for liveness.
     * 0 = auto (on), -1 = off, 1 = on (the job spec's distributed.comm_shm:
     * auto, off, on). If any rank has it off, or any step of its setup
     * fails, the world uses the ring. */
    int shm;
    /* Optional. Until gpt_comm_*_new returns, gpt_comm_abort cannot reach
     * the communicator: while it connects to its peers, a non-zero
     * cancelled(cancel_ctx) (polled from the calling thread) makes it give
     * up with -ECANCELED within about COMM_CANCEL_POLL_MS, so a world whose
     * peer died during set-up is left at once, not after timeout_ms. */
    int (*cancelled)(void *cancel_ctx);
    void *cancel_ctx;
};

/* How often set-up polls gpt_comm_opts.cancelled. */
#define COMM_CANCEL_POLL_MS 100

struct gpt_comm;

struct gpt_comm_ops {
    const char *name;
    int (*allreduce)(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op);
    int (*broadcast)(struct gpt_comm *c, void *buf, size_t bytes, int root);
    int (*reduce_scatter)(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op);
    int (*allgather)(struct gpt_comm *c, float *buf, size_t n);
    int (*barrier)(struct gpt_comm *c);
    void (*abort)(struct gpt_comm *c);
    void (*free)(struct gpt_comm *c);
    /* Optional trio (NULL: a collective waits for all work enqueued
     * before it, and returns done). mark_ready notes, on the device stream
     * the communicator is bound to, that the work enqueued so far is what
     * the collective later issued with the same slot (< GPT_COMM_READY_SLOTS)
     * waits for; it does not block. allreduce_after is allreduce ordered
     * after that mark only, and may return once it is enqueued (a device
     * buffer): the buffer holds the result only after wait_after, which
     * waits for every allreduce_after enqueued since the last one (their
     * errors and timeouts surface there). A slot may be marked again once
     * its collective has returned. */
    int (*mark_ready)(struct gpt_comm *c, unsigned slot);
    int (*allreduce_after)(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op,
                           unsigned slot, enum gpt_comm_dtype dtype);
    int (*wait_after)(struct gpt_comm *c);
    /* Optional (NULL: the front end rounds in and out around allreduce,
     * see enum gpt_comm_dtype): an allreduce that moves bf16 itself. */
    int (*allreduce_bf16)(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op);
};

/* Ready marks a communicator keeps (see gpt_comm_ops.mark_ready). */
#define GPT_COMM_READY_SLOTS 64u

/* Common head of every backend's communicator. */
struct gpt_comm {
    const struct gpt_comm_ops *ops;
    int rank;
    int world;
};

/* Slice of an n-element buffer owned by `rank` in reduce_scatter/allgather:
 * the first n % world ranks get one extra element. */
static inline void gpt_comm_slice(size_t n, int world, int rank, size_t *ret_off, size_t *ret_len)
{
    size_t base = n / (size_t)world, extra = n % (size_t)world, r = (size_t)rank;
    *ret_off = r * base + (r < extra ? r : extra);
    *ret_len = base + (r < extra ? 1 : 0);
}

/* In place: every rank ends with the sum (or mean) of all ranks' buf. */
int gpt_comm_allreduce(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op);
/* allreduce with the wire dtype of a gradient reduction (enum
 * gpt_comm_dtype); FP32 is gpt_comm_allreduce. */
int gpt_comm_allreduce_dtype(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op,
                             enum gpt_comm_dtype dtype);
/* Copies `bytes` of root's buf into every rank's buf. */
int gpt_comm_broadcast(struct gpt_comm *c, void *buf, size_t bytes, int root);
/* In place: afterwards this rank's slice (gpt_comm_slice) of buf holds the
 * reduced values; the rest of buf is scratch. */
int gpt_comm_reduce_scatter(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op);
/* In place: each rank contributes its slice of buf; afterwards every rank
 * has all slices. */
int gpt_comm_allgather(struct gpt_comm *c, float *buf, size_t n);
int gpt_comm_barrier(struct gpt_comm *c);
/* Gradient overlap (DDP buckets): gpt_comm_mark_ready, from the thread
 * that enqueues the compute work, when a bucket's gradients are enqueued;
 * gpt_comm_allreduce_after, from the communication thread, reduces that
 * bucket after the mark only, enqueued back to back with the buckets
 * before it; gpt_comm_wait_after, once all are issued, waits for them
 * together. Without the optional ops: 0, gpt_comm_allreduce_dtype, and 0. */
int gpt_comm_mark_ready(struct gpt_comm *c, unsigned slot);
int gpt_comm_allreduce_after(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op,
                             unsigned slot, enum gpt_comm_dtype dtype);
int gpt_comm_wait_after(struct gpt_comm *c);
/* Any thread: makes the current and every later collective fail with
 * -ECANCELED within one second. */
void gpt_comm_abort(struct gpt_comm *c);
/* NULL allowed. */
void gpt_comm_free(struct gpt_comm *c);

/* World of one: collectives are no-ops (AVG of one is the identity). */
int gpt_comm_local_new(struct gpt_comm **ret, struct gpt_err *err);

/* TCP ring. Blocks until all `world` ranks have connected, bounded by
 * opts->timeout_ms and ended early by opts->cancelled. */
int gpt_comm_tcp_new(const struct gpt_comm_opts *opts, const struct gpt_kv *kv,
                     struct gpt_comm **ret, struct gpt_err *err);

/* How a host-staged communicator reaches device memory (the CUDA
 * backend's gpt_cuda_stager; a test's shim). Every function may be called
 * from any thread that uses the communicator (the DDP or shard
 * communication thread included), so none may touch a backend's per-op
 * state. is_device: non-zero when p is memory the host cannot read.
 * to_host: copies after all the compute work enqueued so far, and returns
 * once the bytes are in host memory. to_device: returns once the bytes are
 * in device memory, before any compute work enqueued afterwards reads
 * them. Both return 0 or a negative error. */
struct gpt_comm_stager {
    void *ctx;
    int (*is_device)(void *ctx, const void *p);
    int (*to_host)(void *ctx, void *host, const void *dev, size_t bytes);
    int (*to_device)(void *ctx, void *dev, const void *host, size_t bytes);
};

/* Host-staged: wraps a host communicator `inner` (tcp/shm; owned from here
 * on, freed with the result or on failure). A collective on device memory
 * (stager->is_device) copies the bytes it needs to a host buffer, runs on
 * `inner` there, and copies the result back; host memory goes straight to
 * `inner`, so the bits are those of `inner` on the same values. The name
 * is "staged/" and inner's name ("staged/shm"). `why` (may be NULL): why
 * this communicator was chosen, for gpt_comm_staged_why. NULL stager: no
 * memory is device memory. Returns 0 and *ret, or a negative error. */
int gpt_comm_staged_new(struct gpt_comm *inner, const struct gpt_comm_stager *stager,
                        const char *why, struct gpt_comm **ret, struct gpt_err *err);
/* The `why` of a host-staged communicator (the first refusal when
 * gpt_comm_fallback_new chose it, "distributed.backend is staged" when the
 * job asked), or NULL for any other communicator. */
const char *gpt_comm_staged_why(const struct gpt_comm *c);

/* Tries a device communicator (`first`, NCCL) and, if any rank of the
 * world cannot form it, makes every rank fall back to a host-staged one
 * over the tcp/shm communicator (keys under o->prefix "staged/"). All ranks
 * agree through `kv`: a rank whose attempt fails publishes why under
 * o->prefix "refused" (first may be waiting for that rank: it is handed
 * options whose `cancelled` turns true within about COMM_CANCEL_POLL_MS
 * of such a refusal, or of o->cancelled), then each rank publishes its
 * vote and reads every other's; one refusal, and the ranks that formed
 * the device communicator free it. An abort (o->cancelled) returns
 * -ECANCELED and never falls back. Returns 0 and *ret (the device
 * communicator, or the host-staged one whose gpt_comm_staged_why quotes
 * the refusal), or a negative error with err filled. Blocks like
 * gpt_comm_tcp_new. */
typedef int (*gpt_comm_try_fn)(void *ctx, const struct gpt_comm_opts *o, struct gpt_comm **ret,
                               struct gpt_err *err);
int gpt_comm_fallback_new(const struct gpt_comm_opts *o, const struct gpt_kv *kv,
                          gpt_comm_try_fn first, void *first_ctx,
                          const struct gpt_comm_stager *stager, struct gpt_comm **ret,
                          struct gpt_err *err);

/* Two struct gpt_kv stores that need no daemon. mem: shared by the threads
 * of one process (an in-process world); get waits on a condition variable.
 * dir: shared by processes through a directory (one file per key, written
 * atomically); get polls, so it is for tests and benchmarks. Both fill
 * *ret (a value the caller owns) and return 0 or a negative errno; free
 * with the matching function (NULL and a zeroed kv allowed). Any thread;
 * the stores are thread-safe. */
int gpt_kv_mem_new(struct gpt_kv *ret, struct gpt_err *err);
void gpt_kv_mem_free(struct gpt_kv *kv);
int gpt_kv_dir_new(struct gpt_kv *ret, const char *dir, struct gpt_err *err);
void gpt_kv_dir_free(struct gpt_kv *kv);

#endif
