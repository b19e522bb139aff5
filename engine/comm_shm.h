/*
 * comm_shm: the shared-memory transport of the tcp communicator, used when
 * every rank of a world runs on this host. Private to engine/comm_tcp.c
 * (and to test_comm, for the test hook below).
 *
 * The tcp communicator keeps its ring of sockets: it forms the world,
 * confirms the segment, and tells a lost peer (a hung-up socket) from a
 * slow one while a collective waits on the segment.
 */
#ifndef GPT_COMM_SHM_H
#define GPT_COMM_SHM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm.h"

struct comm_shm;

/* What the transport borrows from its tcp communicator, which outlives it. */
struct comm_shm_link {
    int rank;
    int world;
    int timeout_ms;             /* no-progress timeout of one collective */
    int fd_left, fd_right;      /* ring sockets, polled for a hung-up peer */
    const atomic_bool *aborted; /* the communicator's abort flag */
};

/* Runs a consistency round over the ring: every rank passes whether its
 * side of the setup worked and learns whether every rank's did. Returns 0
 * or the ring's (fatal) error. */
typedef int (*comm_shm_confirm_fn)(void *ctx, bool ok, bool *ret_all_ok);

/* Setup, from gpt_comm_tcp_new once the ring is up; every rank calls it.
 * Publishes this rank's host identity under "<prefix>shm/host/<rank>";
 * rank 0 creates the segment when every identity matches and publishes its
 * name under "<prefix>shm/name"; every rank maps it; then `confirm` and the
 * name is unlinked. Returns 0 with *ret set to the transport, 0 with *ret
 * NULL when shm is off or any step failed (the ring is used), or the
 * confirm round's error. `slot_bytes` 0 = default. Blocks, bounded by
 * deadline_ms (CLOCK_MONOTONIC). */
int comm_shm_setup(const struct comm_shm_link *link, const struct gpt_comm_opts *opts,
                   const struct gpt_kv *kv, int64_t deadline_ms, comm_shm_confirm_fn confirm,
                   void *confirm_ctx, struct comm_shm **ret);

/* NULL allowed. Unmaps; the segment is gone once every rank has. */
void comm_shm_free(struct comm_shm *s);

/* The collectives, with comm.h's contract (the tcp communicator checks its
 * own abort and status first). Owning thread. A failure is sticky and is
 * published to the other ranks through the segment. */
int comm_shm_allreduce(struct comm_shm *s, float *buf, size_t n, bool avg);
int comm_shm_reduce_scatter(struct comm_shm *s, float *buf, size_t n, bool avg);
int comm_shm_allgather(struct comm_shm *s, float *buf, size_t n);
int comm_shm_broadcast(struct comm_shm *s, void *buf, size_t bytes, int root);
int comm_shm_barrier(struct comm_shm *s);

/* Marks the world failed with `code` (negative) and wakes every waiter.
 * Owning thread. */
void comm_shm_fail(struct comm_shm *s, int code);
/* Any thread: like comm_shm_fail(-ECANCELED), without touching the owning
 * thread's state. */
void comm_shm_abort(struct comm_shm *s);

/* Test hook: when set (before any communicator is made), called with the
 * host identity each rank is about to publish, which it may rewrite, so a
 * test can make ranks of one host look like different hosts. */
extern void (*gpt_comm_shm_test_host_hook)(int rank, char *id, size_t cap);

#endif
