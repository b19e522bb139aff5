/*
 * comm_shm: collectives through one POSIX shared-memory segment, for a world
 * whose ranks all run on this host (processes or threads). Loopback TCP
 * makes the kernel copy every byte twice more and caps the ring at a few
 * GB/s; here each rank copies its data into its own staging area once, the
 * reductions read every rank's staging area directly, and results are
 * copied out once.
 *
 * The segment: a header (layout, and the `failed` word), one control line
 * per rank (a sequence counter that is also the futex word, a waiter count
 * and the descriptions of the rank's last three steps), then per rank three
 * staging slots. Work goes in steps of one barrier each; step c uses slot
 * c % 3. A rank fills its part of the slot, publishes its counter, and
 * waits until every rank has published the same count; then it reads. A
 * rank reads a step's slot only until it publishes the step after next
 * (the large allreduce copies step c's results out in step c + 1), so a
 * rank that has passed the barrier of step c + 2 may refill the slot of
 * step c: three slots need no other handshake.
 *
 * Reductions run in the tcp ring's order (the slice gpt_comm_slice gives
 * rank j is summed from rank j + 1 round to j), so results are bit for bit
 * those of the ring, whichever transport ran.
 *
 * Waiting spins a few microseconds, then sleeps on the counter's futex (at
 * most COMM_SHM_NAP_MS at a time): the DDP all-reduce runs on a thread next
 * to backward compute, and a spinning waiter would steal its core. Between
 * naps it checks the abort flag, the `failed` word (which a failing or
 * aborting rank sets, waking everyone) and, every nap, the ring sockets for
 * a peer that hung up (a killed process cannot set `failed`).
 *
 * Owns: the mapping. Threads: the owning worker thread, except
 * comm_shm_abort (any thread).
 */
#define _GNU_SOURCE
#include "comm_shm.h"
#include "monotime.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define COMM_SHM_MAGIC     0x47505348u /* "GPSH" */
#define COMM_SHM_VERSION   1u
#define COMM_SHM_WORLD_MAX 64
#define COMM_SHM_LINE      128 /* two cache lines: no false sharing with the prefetcher */
#define COMM_SHM_ALIGN     64
/* Staging per rank and slot: small enough that a step's staging stays in
 * cache (large buffers are bound by memory bandwidth), and every rank maps
 * (and its RSS counts) all ranks' slots: world x 3 x this. One size also
 * when ranks outnumber cores: 4 MiB slots there (fewer barriers, each a
 * context switch) measured no faster with bench_allreduce at worlds 3 and
 * 4 on 2 cores (64 MiB: 18.8 ms at 1 MiB vs 22.3 at 4 MiB, world 4) and
 * cost each rank 36 MiB more resident memory at world 4. */
#define COMM_SHM_SLOT_BYTES (1024u * 1024u)
#define COMM_SHM_SLOT_MIN   64u
#define COMM_SHM_SLOT_MAX   (64u * 1024u * 1024u)
#define COMM_SHM_STAGE_MAX  (64ull * 1024 * 1024) /* all ranks' slots together */
#define COMM_SHM_SHRINK_MIN (256u * 1024u)        /* when /dev/shm is short, halve down to this */
/* allreduce of at most this many bytes: every rank reduces the whole buffer
 * instead of its slice (no step to copy the results out). */
#define COMM_SHM_WHOLE_MAX (256u * 1024u)
#define COMM_SHM_SPIN_NS   5000
#define COMM_SHM_NAP_MS    50
#define COMM_SHM_KV_MS     10000 /* bound on each kv wait of the setup */
#define COMM_SHM_KEY_MAX   256
#define COMM_SHM_NAME_MAX  64
#define COMM_SHM_HOST_MAX  256
#define COMM_SHM_BLOCK     1024 /* floats reduced per pass (4 KiB, stays in L1) */
#define COMM_SHM_SLOTS     3

void (*gpt_comm_shm_test_host_hook)(int rank, char *id, size_t cap);

_Static_assert(sizeof(atomic_uint) == sizeof(uint32_t), "futex words are 32 bits");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "atomics in shared memory must be lock-free");

enum comm_shm_kind {
    COMM_SHM_ALLREDUCE = 1,
    COMM_SHM_REDUCE_SCATTER,
    COMM_SHM_ALLGATHER,
    COMM_SHM_BROADCAST,
    COMM_SHM_BARRIER,
};

/* What a rank is doing in one step; every rank's must match, or the ranks
 * disagree on the call and the step's data would be mixed. */
struct comm_shm_desc {
    uint32_t coll; /* collectives issued */
    uint32_t step; /* steps issued (low bits) */
    uint32_t kind;
    uint32_t avg;
    uint64_t n;
    int32_t root;
    uint32_t pad;
};

struct comm_shm_hdr {
    uint32_t magic;
    uint32_t version;
    uint32_t world;
    uint32_t pad;
    uint64_t seg_bytes;
    uint64_t region_bytes; /* a slot is `world` regions */
    uint64_t whole_max;
    alignas(COMM_SHM_LINE) atomic_uint failed; /* 0, or the first failure's code, negated */
};

struct comm_shm_rank {
    alignas(COMM_SHM_LINE) atomic_uint seq;    /* barriers published; the futex word */
    atomic_uint waiters;                       /* ranks asleep (or about to be) on seq */
    struct comm_shm_desc desc[COMM_SHM_SLOTS]; /* by slot */
};

struct comm_shm {
    struct comm_shm_link link;
    unsigned char *map;
    size_t map_bytes;
    struct comm_shm_hdr *hdr;
    struct comm_shm_rank *rk;
    unsigned char *stage;
    size_t region_bytes, slot_bytes, whole_max;
    uint32_t seq;  /* barriers this rank has published */
    unsigned slot; /* the slot of the current step */
    struct comm_shm_desc cur;
    int status; /* 0, or the first failure (sticky) */
};

static void comm_shm_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Shared (not private) futex ops: the word lives in a MAP_SHARED mapping
 * that other processes, or other mappings in this one, see. */
static void comm_shm_futex_wait(atomic_uint *w, uint32_t val, int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void comm_shm_futex_wake(atomic_uint *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static size_t comm_shm_round(size_t v, size_t to)
{
    return (v + to - 1) / to * to;
}

static unsigned char *comm_shm_slot(const struct comm_shm *s, int rank, unsigned slot)
{
    return s->stage + ((size_t)rank * COMM_SHM_SLOTS + slot) * s->slot_bytes;
}

/* ---- failure ---- */

static void comm_shm_wake_all(struct comm_shm *s)
{
    for (int q = 0; q < s->link.world; q++)
        comm_shm_futex_wake(&s->rk[q].seq);
}

static void comm_shm_publish_failure(struct comm_shm *s, int code)
{
    unsigned expect = 0;
    atomic_compare_exchange_strong(&s->hdr->failed, &expect, (unsigned)-code);
    comm_shm_wake_all(s);
}

void comm_shm_fail(struct comm_shm *s, int code)
{
    if (!s)
        return;
    if (s->status == 0)
        s->status = code;
    comm_shm_publish_failure(s, code);
}

void comm_shm_abort(struct comm_shm *s)
{
    if (s)
        comm_shm_publish_failure(s, -ECANCELED);
}

static int comm_shm_failed(struct comm_shm *s, int code)
{
    comm_shm_fail(s, code);
    return s->status;
}

/* The error this rank reports for a failure elsewhere: a disagreement on
 * the call is reported as such by every rank, anything else as a lost
 * peer. Our own abort reads as -ECANCELED. */
static int comm_shm_check(struct comm_shm *s)
{
    if (s->status)
        return s->status;
    if (atomic_load_explicit(s->link.aborted, memory_order_relaxed))
        return comm_shm_failed(s, -ECANCELED);
    unsigned f = atomic_load_explicit(&s->hdr->failed, memory_order_acquire);
    if (f)
        return comm_shm_failed(s, f == GPT_E_PROTO ? -GPT_E_PROTO : -EPIPE);
    return 0;
}

/* A peer whose socket hung up, reset or sent anything (the ring is idle
 * while the segment is in use) is gone. */
static int comm_shm_poll_peers(struct comm_shm *s)
{
    struct pollfd pfd[2];
    nfds_t np = 0;
    if (s->link.fd_left >= 0)
        pfd[np++] = (struct pollfd){.fd = s->link.fd_left, .events = POLLIN | POLLRDHUP};
    if (s->link.fd_right >= 0)
        pfd[np++] = (struct pollfd){.fd = s->link.fd_right, .events = POLLIN | POLLRDHUP};
    if (np == 0 || poll(pfd, np, 0) <= 0)
        return 0;
    for (nfds_t i = 0; i < np; i++)
        if (pfd[i].revents)
            return -EPIPE;
    return 0;
}

/* ---- barriers ---- */

static bool comm_shm_reached(uint32_t v, uint32_t target)
{
    return (int32_t)(v - target) >= 0;
}

/* Waits until rank q has published `target`. */
static int comm_shm_wait(struct comm_shm *s, int q, uint32_t target)
{
    atomic_uint *w = &s->rk[q].seq;
    uint32_t v = atomic_load_explicit(w, memory_order_acquire);
    if (comm_shm_reached(v, target))
        return 0;
    int64_t spin_until = monotime_ns() + COMM_SHM_SPIN_NS;
    for (unsigned i = 1;; i++) {
        comm_shm_relax();
        v = atomic_load_explicit(w, memory_order_acquire);
        if (comm_shm_reached(v, target))
            return 0;
        if (i % 32 == 0 && monotime_ns() >= spin_until)
            break;
    }
    int64_t now = monotime_ms(), deadline = now + s->link.timeout_ms, next_poll = now;
    for (;;) {
        int rc = comm_shm_check(s);
        if (rc)
            return rc;
        now = monotime_ms();
        if (now >= next_poll) {
            next_poll = now + COMM_SHM_NAP_MS;
            /* A peer that is done with its last collective may hang up
             * once the barrier we wait for is complete: look again. */
            if ((rc = comm_shm_poll_peers(s)) &&
                !comm_shm_reached(atomic_load_explicit(w, memory_order_acquire), target))
                return comm_shm_failed(s, rc);
        }
        if (now >= deadline)
            return comm_shm_failed(s, -ETIMEDOUT);
        int nap = deadline - now < COMM_SHM_NAP_MS ? (int)(deadline - now) : COMM_SHM_NAP_MS;
        /* Announce the nap before the last look: a publisher that stores
         * after our look sees the waiter count (both sequentially
         * consistent) and wakes us, or the futex sees the new value. */
        atomic_fetch_add(&s->rk[q].waiters, 1);
        uint32_t seen = atomic_load(w);
        if (!comm_shm_reached(seen, target))
            comm_shm_futex_wait(w, seen, nap > 0 ? nap : 1);
        atomic_fetch_sub(&s->rk[q].waiters, 1);
        seen = atomic_load_explicit(w, memory_order_acquire);
        if (comm_shm_reached(seen, target))
            return 0;
        if (seen != v) { /* progress: the peer is alive and moving */
            v = seen;
            deadline = monotime_ms() + s->link.timeout_ms;
        }
    }
}

/* Publishes this rank's next barrier count and waits for every rank's;
 * then the step's description (written by comm_shm_step_begin) must match
 * every rank's. */
static int comm_shm_sync(struct comm_shm *s)
{
    int me = s->link.rank, world = s->link.world;
    uint32_t target = ++s->seq;
    atomic_store(&s->rk[me].seq, target);
    if (atomic_load(&s->rk[me].waiters))
        comm_shm_futex_wake(&s->rk[me].seq);
    /* Start with the rank after us: in a world that arrives in rank order
     * the last one is the likeliest to be missing. */
    for (int k = 1; k < world; k++) {
        int rc = comm_shm_wait(s, (me + k) % world, target);
        if (rc)
            return rc;
    }
    for (int q = 0; q < world; q++)
        if (memcmp(&s->rk[q].desc[s->slot], &s->cur, sizeof(s->cur)) != 0)
            return comm_shm_failed(s, -GPT_E_PROTO);
    return 0;
}

/* Returns the slot of a new step and describes the step for the check. */
static unsigned comm_shm_step_begin(struct comm_shm *s)
{
    s->slot = (s->slot + 1) % COMM_SHM_SLOTS;
    s->cur.step++;
    s->rk[s->link.rank].desc[s->slot] = s->cur;
    return s->slot;
}

static int comm_shm_begin(struct comm_shm *s, enum comm_shm_kind kind, size_t n, int root, bool avg)
{
    int rc = comm_shm_check(s);
    if (rc)
        return rc;
    s->cur.coll++;
    s->cur.kind = kind;
    s->cur.n = n;
    s->cur.root = root;
    s->cur.avg = avg;
    return 0;
}

/* ---- reductions ---- */

typedef float comm_shm_v4 __attribute__((vector_size(16)));

/* acc[0..m) (+)= src[0..m), 4 lanes at a time (plain -O2 does not
 * vectorize a loop of unknown length). Element-wise: no result bit
 * depends on the lanes. */
static void comm_shm_acc(float *restrict acc, const float *restrict src, size_t m, bool first)
{
    size_t i = 0;
    for (; i + 4 <= m; i += 4) {
        comm_shm_v4 a, b;
        memcpy(&b, src + i, sizeof(b));
        if (!first) {
            memcpy(&a, acc + i, sizeof(a));
            b = a + b;
        }
        memcpy(acc + i, &b, sizeof(b));
    }
    for (; i < m; i++)
        acc[i] = first ? src[i] : acc[i] + src[i];
}

static void comm_shm_div(float *acc, size_t m, float div)
{
    size_t i = 0;
    comm_shm_v4 d = {div, div, div, div};
    for (; i + 4 <= m; i += 4) {
        comm_shm_v4 a;
        memcpy(&a, acc + i, sizeof(a));
        a = a / d;
        memcpy(acc + i, &a, sizeof(a));
    }
    for (; i < m; i++)
        acc[i] = acc[i] / div;
}

/* dst[i] = ((src[0][i] + src[1][i]) + ...) + src[k-1][i], divided by div
 * when div != 0; also into dst2 when not NULL. dst may be one of the
 * sources: a block is read whole before it is written. */
static void comm_shm_reduce(float *dst, float *dst2, const float *const *src, int k, size_t n,
                            float div)
{
    alignas(64) float acc[COMM_SHM_BLOCK];
    for (size_t b = 0; b < n; b += COMM_SHM_BLOCK) {
        size_t m = n - b < COMM_SHM_BLOCK ? n - b : COMM_SHM_BLOCK;
        for (int j = 0; j < k; j++)
            comm_shm_acc(acc, src[j] + b, m, j == 0);
        if (div != 0.0f)
            comm_shm_div(acc, m, div);
        memcpy(dst + b, acc, m * sizeof(float));
        if (dst2)
            memcpy(dst2 + b, acc, m * sizeof(float));
    }
}

/* Part [a, a + L) of rank q's slice, clipped. */
static void comm_shm_part(size_t n, int world, int q, size_t a, size_t L, size_t *ret_off,
                          size_t *ret_len)
{
    size_t off, len;
    gpt_comm_slice(n, world, q, &off, &len);
    *ret_off = off + a;
    *ret_len = len > a ? (len - a < L ? len - a : L) : 0;
}

/* Steps needed to move parts of L elements of the longest slice (rank 0's);
 * at least one, so that every call meets the others. */
static size_t comm_shm_steps(size_t n, int world, size_t L)
{
    size_t off, len;
    gpt_comm_slice(n, world, 0, &off, &len);
    return len == 0 ? 1 : (len + L - 1) / L;
}

/* Small allreduce: each step copies a contiguous piece of the buffer in,
 * and every rank reduces the whole piece (each element in its owner's ring
 * order), so one barrier per step. */
static int comm_shm_allreduce_whole(struct comm_shm *s, float *buf, size_t n, bool avg)
{
    int me = s->link.rank, world = s->link.world;
    size_t piece = s->slot_bytes / sizeof(float);
    const float *src[COMM_SHM_WORLD_MAX];
    float div = avg ? (float)world : 0.0f;
    size_t b = 0;
    do {
        size_t m = n - b < piece ? n - b : piece;
        unsigned slot = comm_shm_step_begin(s);
        if (m)
            memcpy(comm_shm_slot(s, me, slot), buf + b, m * sizeof(float));
        int rc = comm_shm_sync(s);
        if (rc)
            return rc;
        for (int j = 0; j < world; j++) {
            size_t off, len;
            gpt_comm_slice(n, world, j, &off, &len);
            size_t lo = off > b ? off : b, hi = off + len < b + m ? off + len : b + m;
            if (lo >= hi)
                continue;
            for (int t = 1; t <= world; t++) {
                int q = (j + t) % world;
                src[t - 1] =
                    q == me ? buf + lo : (const float *)comm_shm_slot(s, q, slot) + (lo - b);
            }
            comm_shm_reduce(buf + lo, NULL, src, world, hi - lo, div);
        }
        b += m;
    } while (b < n);
    return 0;
}

/* Large allreduce and reduce_scatter: each step moves one part of every
 * slice; rank r reduces its own slice's part, in place and (allreduce) into
 * its staging region, from where the others copy it out in the next step,
 * so that a step needs one barrier. Allreduce adds a last step that only
 * copies out. */
static int comm_shm_sliced(struct comm_shm *s, float *buf, size_t n, bool avg, bool gather)
{
    int me = s->link.rank, world = s->link.world;
    size_t L = s->region_bytes / sizeof(float), steps = comm_shm_steps(n, world, L), off, len;
    size_t region = s->region_bytes;
    const float *src[COMM_SHM_WORLD_MAX];
    float div = avg ? (float)world : 0.0f;
    for (size_t k = 0; k < steps + gather; k++) {
        unsigned slot = comm_shm_step_begin(s), prev = (slot + COMM_SHM_SLOTS - 1) % COMM_SHM_SLOTS;
        unsigned char *mine = comm_shm_slot(s, me, slot);
        for (int q = 0; q < world && k < steps; q++) {
            comm_shm_part(n, world, q, k * L, L, &off, &len);
            if (q != me && len)
                memcpy(mine + (size_t)q * region, buf + off, len * sizeof(float));
        }
        int rc = comm_shm_sync(s);
        if (rc)
            return rc;
        for (int q = 0; q < world && gather && k > 0; q++) {
            comm_shm_part(n, world, q, (k - 1) * L, L, &off, &len);
            if (q != me && len)
                memcpy(buf + off, comm_shm_slot(s, q, prev) + (size_t)q * region,
                       len * sizeof(float));
        }
        if (k == steps)
            break;
        comm_shm_part(n, world, me, k * L, L, &off, &len);
        if (len == 0)
            continue;
        for (int t = 1; t <= world; t++) {
            int q = (me + t) % world;
            src[t - 1] = q == me ? buf + off
                                 : (const float *)(comm_shm_slot(s, q, slot) + (size_t)me * region);
        }
        comm_shm_reduce(buf + off, gather ? (float *)(mine + (size_t)me * region) : NULL, src,
                        world, len, div);
    }
    return 0;
}

int comm_shm_allreduce(struct comm_shm *s, float *buf, size_t n, bool avg)
{
    int rc = comm_shm_begin(s, COMM_SHM_ALLREDUCE, n, 0, avg);
    if (rc)
        return rc;
    if (n * sizeof(float) <= s->whole_max)
        return comm_shm_allreduce_whole(s, buf, n, avg);
    return comm_shm_sliced(s, buf, n, avg, true);
}

int comm_shm_reduce_scatter(struct comm_shm *s, float *buf, size_t n, bool avg)
{
    int rc = comm_shm_begin(s, COMM_SHM_REDUCE_SCATTER, n, 0, avg);
    return rc ? rc : comm_shm_sliced(s, buf, n, avg, false);
}

int comm_shm_allgather(struct comm_shm *s, float *buf, size_t n)
{
    int rc = comm_shm_begin(s, COMM_SHM_ALLGATHER, n, 0, false);
    if (rc)
        return rc;
    int me = s->link.rank, world = s->link.world;
    size_t L = s->slot_bytes / sizeof(float), steps = comm_shm_steps(n, world, L), off, len;
    for (size_t k = 0; k < steps; k++) {
        unsigned slot = comm_shm_step_begin(s);
        comm_shm_part(n, world, me, k * L, L, &off, &len);
        if (len)
            memcpy(comm_shm_slot(s, me, slot), buf + off, len * sizeof(float));
        if ((rc = comm_shm_sync(s)))
            return rc;
        for (int q = 0; q < world; q++) {
            comm_shm_part(n, world, q, k * L, L, &off, &len);
            if (q != me && len)
                memcpy(buf + off, comm_shm_slot(s, q, slot), len * sizeof(float));
        }
    }
    return 0;
}

int comm_shm_broadcast(struct comm_shm *s, void *buf, size_t bytes, int root)
{
    int rc = comm_shm_begin(s, COMM_SHM_BROADCAST, bytes, root, false);
    if (rc)
        return rc;
    unsigned char *p = buf;
    size_t b = 0;
    do {
        size_t m = bytes - b < s->slot_bytes ? bytes - b : s->slot_bytes;
        unsigned slot = comm_shm_step_begin(s);
        if (s->link.rank == root && m)
            memcpy(comm_shm_slot(s, root, slot), p + b, m);
        if ((rc = comm_shm_sync(s)))
            return rc;
        if (s->link.rank != root && m)
            memcpy(p + b, comm_shm_slot(s, root, slot), m);
        b += m;
    } while (b < bytes);
    return 0;
}

int comm_shm_barrier(struct comm_shm *s)
{
    int rc = comm_shm_begin(s, COMM_SHM_BARRIER, 0, 0, false);
    if (rc)
        return rc;
    comm_shm_step_begin(s);
    return comm_shm_sync(s);
}

/* ---- setup ---- */

/* This host as the kernel sees this process: the boot, and the network,
 * mount and IPC namespaces (network-namespace "hosts" of one machine must
 * not share memory behind the network's back, and /dev/shm must be the
 * same mount). */
static int comm_shm_host_id(char *buf, size_t cap)
{
    static const char *const ns[] = {"net", "mnt", "ipc"};
    char boot[64] = {0};
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t k = read(fd, boot, sizeof(boot) - 1);
    close(fd);
    if (k <= 0)
        return -EIO;
    boot[strcspn(boot, "\n")] = '\0';
    size_t len = (size_t)snprintf(buf, cap, "%s", boot);
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]) && len < cap; i++) {
        char path[64];
        struct stat st;
        snprintf(path, sizeof(path), "/proc/self/ns/%s", ns[i]);
        if (stat(path, &st) < 0)
            return -errno;
        len += (size_t)snprintf(buf + len, cap - len, "/%s:%llx:%llx", ns[i],
                                (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
    }
    return len < cap ? 0 : -ENAMETOOLONG;
}

static void comm_shm_layout(struct comm_shm *s)
{
    int world = s->link.world;
    size_t ctl = comm_shm_round(sizeof(struct comm_shm_hdr), COMM_SHM_LINE) +
                 (size_t)world * sizeof(struct comm_shm_rank);
    s->hdr = (struct comm_shm_hdr *)s->map;
    s->rk = (struct comm_shm_rank *)(s->map +
                                     comm_shm_round(sizeof(struct comm_shm_hdr), COMM_SHM_LINE));
    s->stage = s->map + comm_shm_round(ctl, 4096);
    s->slot_bytes = s->region_bytes * (size_t)world;
}

static size_t comm_shm_seg_bytes(int world, size_t region_bytes)
{
    size_t ctl = comm_shm_round(sizeof(struct comm_shm_hdr), COMM_SHM_LINE) +
                 (size_t)world * sizeof(struct comm_shm_rank);
    return comm_shm_round(ctl, 4096) +
           (size_t)world * COMM_SHM_SLOTS * region_bytes * (size_t)world;
}

static struct comm_shm *comm_shm_alloc(const struct comm_shm_link *link)
{
    struct comm_shm *s = calloc(1, sizeof(*s));
    if (s) {
        s->link = *link;
        s->slot = COMM_SHM_SLOTS - 1; /* the first step uses slot 0 */
    }
    return s;
}

void comm_shm_free(struct comm_shm *s)
{
    if (!s)
        return;
    if (s->map)
        munmap(s->map, s->map_bytes);
    free(s);
}

static int comm_shm_map(struct comm_shm *s, int fd, size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return -errno;
    /* A child forked for some other purpose must not keep the segment. */
    madvise(p, bytes, MADV_DONTFORK);
    s->map = p;
    s->map_bytes = bytes;
    return 0;
}

/* Rank 0: a new segment, laid out and initialised, under a fresh name. */
static int comm_shm_create(struct comm_shm *s, const char *prefix, size_t slot_bytes, char *name,
                           size_t cap)
{
    int world = s->link.world;
    size_t region = slot_bytes / (size_t)world / COMM_SHM_ALIGN * COMM_SHM_ALIGN;
    if (region < COMM_SHM_ALIGN)
        region = COMM_SHM_ALIGN;
    while (region > COMM_SHM_ALIGN &&
           (uint64_t)region * COMM_SHM_SLOTS * world * world > COMM_SHM_STAGE_MAX)
        region /= 2;
    region = region / COMM_SHM_ALIGN * COMM_SHM_ALIGN;
    uint64_t rnd = 0, h = 1469598103934665603ull;
    for (const char *c = prefix; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd))
        rnd = (uint64_t)monotime_ns() ^ ((uint64_t)getpid() << 32);
    snprintf(name, cap, "/gptd-%016llx-%016llx", (unsigned long long)h, (unsigned long long)rnd);

    size_t bytes = comm_shm_seg_bytes(world, region);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int rc = ftruncate(fd, (off_t)bytes) < 0 ? -errno : 0;
    /* Reserve the pages now: a full /dev/shm must fail here, not SIGBUS a
     * rank in the middle of a collective. */
    if (rc == 0)
        rc = -posix_fallocate(fd, 0, (off_t)bytes);
    if (rc == 0)
        rc = comm_shm_map(s, fd, bytes);
    close(fd);
    if (rc) {
        shm_unlink(name);
        return rc;
    }
    s->region_bytes = region;
    s->whole_max = COMM_SHM_WHOLE_MAX;
    comm_shm_layout(s);
    *s->hdr = (struct comm_shm_hdr){
        .magic = COMM_SHM_MAGIC,
        .version = COMM_SHM_VERSION,
        .world = (uint32_t)world,
        .seg_bytes = bytes,
        .region_bytes = region,
        .whole_max = s->whole_max,
    };
    atomic_init(&s->hdr->failed, 0);
    for (int q = 0; q < world; q++) {
        atomic_init(&s->rk[q].seq, 0);
        atomic_init(&s->rk[q].waiters, 0);
    }
    return 0;
}

/* Other ranks: map rank 0's segment and check its header. */
static int comm_shm_attach(struct comm_shm *s, const char *name)
{
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct stat st;
    int rc = fstat(fd, &st) < 0 ? -errno : 0;
    if (rc == 0 && (size_t)st.st_size < sizeof(struct comm_shm_hdr))
        rc = -GPT_E_PROTO;
    if (rc == 0)
        rc = comm_shm_map(s, fd, (size_t)st.st_size);
    close(fd);
    if (rc)
        return rc;
    const struct comm_shm_hdr *h = (const struct comm_shm_hdr *)s->map;
    if (h->magic != COMM_SHM_MAGIC || h->version != COMM_SHM_VERSION ||
        h->world != (uint32_t)s->link.world || h->seg_bytes != (uint64_t)st.st_size ||
        h->region_bytes < COMM_SHM_ALIGN || h->region_bytes % COMM_SHM_ALIGN != 0 ||
        h->seg_bytes != comm_shm_seg_bytes(s->link.world, h->region_bytes))
        return -GPT_E_PROTO;
    s->region_bytes = h->region_bytes;
    s->whole_max = h->whole_max;
    comm_shm_layout(s);
    return 0;
}

static bool comm_shm_wanted(const struct gpt_comm_opts *opts)
{
    return opts->shm >= 0;
}

static int comm_shm_key(char *key, size_t cap, const char *prefix, const char *what, int rank)
{
    int k = rank < 0 ? snprintf(key, cap, "%sshm/%s", prefix, what)
                     : snprintf(key, cap, "%sshm/%s/%d", prefix, what, rank);
    return k > 0 && (size_t)k < cap ? 0 : -EINVAL;
}

/* Waits in slices so that the owner's cancel (gpt_comm_opts.cancelled) is
 * seen within COMM_CANCEL_POLL_MS. */
static int comm_shm_kv_get(const struct gpt_comm_opts *opts, const struct gpt_kv *kv,
                           const char *key, char *buf, size_t cap, int64_t deadline_ms)
{
    int64_t now = monotime_ms(), end = now + COMM_SHM_KV_MS;
    if (end > deadline_ms)
        end = deadline_ms;
    size_t len = 0;
    int rc = -ETIMEDOUT;
    while (rc == -ETIMEDOUT) {
        if (opts->cancelled && opts->cancelled(opts->cancel_ctx)) {
            rc = -ECANCELED;
            break;
        }
        int64_t left = end - monotime_ms();
        int wait = left <= 0 ? 0 : left > COMM_CANCEL_POLL_MS ? COMM_CANCEL_POLL_MS : (int)left;
        rc = kv->get(kv->ctx, key, buf, cap - 1, &len, wait);
        if (wait == 0)
            break;
    }
    buf[rc == 0 ? len : 0] = '\0';
    return rc;
}

int comm_shm_setup(const struct comm_shm_link *link, const struct gpt_comm_opts *opts,
                   const struct gpt_kv *kv, int64_t deadline_ms, comm_shm_confirm_fn confirm,
                   void *confirm_ctx, struct comm_shm **ret)
{
    char host[COMM_SHM_HOST_MAX], other[COMM_SHM_HOST_MAX], key[COMM_SHM_KEY_MAX];
    char name[COMM_SHM_NAME_MAX] = "-";
    int rank = link->rank, world = link->world;
    bool ok = false, created = false, all_ok = false;
    struct comm_shm *s = NULL;
    *ret = NULL;

    /* "-" never matches: this rank does not take part. Every rank still
     * goes through every step below, so that they all agree. */
    if (world > COMM_SHM_WORLD_MAX || !comm_shm_wanted(opts) ||
        comm_shm_host_id(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "-");
    if (gpt_comm_shm_test_host_hook)
        gpt_comm_shm_test_host_hook(rank, host, sizeof(host));
    if (comm_shm_key(key, sizeof(key), opts->prefix, "host", rank) == 0)
        kv->set(kv->ctx, key, host, strlen(host));

    s = comm_shm_alloc(link);
    if (rank == 0) {
        bool same = s && host[0] != '-';
        for (int q = 1; q < world && same; q++)
            same = comm_shm_key(key, sizeof(key), opts->prefix, "host", q) == 0 &&
                   comm_shm_kv_get(opts, kv, key, other, sizeof(other), deadline_ms) == 0 &&
                   strcmp(host, other) == 0;
        size_t slot = opts->chunk_bytes ? opts->chunk_bytes : COMM_SHM_SLOT_BYTES;
        slot = slot < COMM_SHM_SLOT_MIN ? COMM_SHM_SLOT_MIN : slot;
        slot = slot > COMM_SHM_SLOT_MAX ? COMM_SHM_SLOT_MAX : slot;
        int rc = same ? comm_shm_create(s, opts->prefix, slot, name, sizeof(name)) : -EINVAL;
        /* A small /dev/shm (a container's 64 MiB): try smaller slots. */
        while (rc == -ENOSPC && slot / 2 >= COMM_SHM_SHRINK_MIN) {
            slot /= 2;
            rc = comm_shm_create(s, opts->prefix, slot, name, sizeof(name));
        }
        ok = created = rc == 0;
        if (!ok)
            snprintf(name, sizeof(name), "-");
        if (comm_shm_key(key, sizeof(key), opts->prefix, "name", -1) == 0)
            kv->set(kv->ctx, key, name, strlen(name));
    } else if (comm_shm_key(key, sizeof(key), opts->prefix, "name", -1) == 0 &&
               comm_shm_kv_get(opts, kv, key, name, sizeof(name), deadline_ms) == 0 &&
               name[0] == '/' && s) {
        ok = comm_shm_attach(s, name) == 0;
    }

    /* Every rank has mapped the segment (or given up) once this returns,
     * so the name can go: from here on a crash leaks nothing. */
    int rc = confirm(confirm_ctx, ok, &all_ok);
    if (created)
        shm_unlink(name);
    if (rc == 0 && all_ok) {
        *ret = s;
        return 0;
    }
    comm_shm_free(s);
    return rc;
}
