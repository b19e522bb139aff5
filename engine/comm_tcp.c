/*
 * comm_tcp: the `tcp` collective backend. The ranks form a ring of TCP
 * connections (each rank sends to rank+1 and receives from rank-1, two
 * sockets so both directions run at once); addresses travel through a
 * struct gpt_kv. allreduce is a ring reduce-scatter followed by a ring
 * all-gather, run as one pipelined byte stream per direction: a rank
 * forwards the part of a segment it has already reduced while it is still
 * receiving the rest, so every link is busy all the time.
 *
 * When every rank is on this host, the collectives go through a shared
 * memory segment instead (comm_shm.c) and the ring only carries the setup
 * and tells a dead peer (its socket hangs up) from a slow one.
 *
 * Owns: the two ring sockets, an eventfd that abort makes readable, a
 * chunk-sized scratch buffer that incoming partial sums land in before they
 * are added to the caller's buffer, and the shm transport if any.
 * Threads: every call from the owning worker thread, except gpt_comm_abort
 * (any thread). Collectives block in poll() (ring) or on a futex (shm).
 */
#define _GNU_SOURCE
#include "comm.h"
#include "comm_shm.h"
#include "hostport.h"
#include "monotime.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define COMM_TCP_MAGIC              0x47505443u /* "GPTC" */
#define COMM_TCP_VERSION            2u          /* 2: the shm round after the hello */
#define COMM_TCP_HELLO_BYTES        24
#define COMM_TCP_HDR_BYTES          24
#define COMM_TCP_WORLD_MAX          4096
#define COMM_TCP_KEY_MAX            256
#define COMM_TCP_ADDR_MAX           128
#define COMM_TCP_DEFAULT_TIMEOUT_MS 300000
#define COMM_TCP_DEFAULT_CHUNK      (512u * 1024u)
#define COMM_TCP_CHUNK_MIN          64u
#define COMM_TCP_CHUNK_MAX          (64u * 1024u * 1024u)
#define COMM_TCP_SOCKBUF_BYTES      (4 * 1024 * 1024)
#define COMM_TCP_POLL_MS            200
#define COMM_TCP_HELLO_WAIT_MS      1000

enum comm_tcp_kind {
    COMM_TCP_ALLREDUCE = 1,
    COMM_TCP_REDUCE_SCATTER,
    COMM_TCP_ALLGATHER,
    COMM_TCP_BROADCAST,
};

enum comm_tcp_recv { COMM_TCP_RECV_NONE, COMM_TCP_RECV_COPY, COMM_TCP_RECV_REDUCE };

struct comm_tcp {
    struct gpt_comm base;
    int fd_right; /* we send to rank+1 */
    int fd_left;  /* we receive from rank-1 */
    int fd_abort; /* eventfd; readable once aborted */
    atomic_bool aborted;
    int status; /* 0, or the first failure (sticky) */
    int timeout_ms;
    size_t chunk_bytes;
    uint32_t seq;         /* collectives issued; the left peer must be at the same one */
    float *scratch;       /* chunk_bytes + 4: partial sums from the left */
    float *barrier_buf;   /* world floats */
    struct comm_shm *shm; /* set: collectives go through shared memory */
    /* gpt_comm_opts.cancelled, during set-up only */
    int (*cancelled)(void *ctx);
    void *cancel_ctx;
};

/* One collective as a sequence of phases. In phase p a rank sends one byte
 * range of the buffer to the right and receives one from the left; the send
 * of phase p > 0 is the range received in phase p - 1 and may only run as
 * far as that receive has got (this is the pipeline). */
struct comm_tcp_plan {
    enum comm_tcp_kind kind;
    unsigned char *buf;
    size_t n; /* floats; bytes for broadcast */
    int root;
    bool avg;
    int phases;
};

struct comm_tcp_phase {
    size_t send_off, send_len; /* bytes */
    size_t recv_off, recv_len; /* bytes */
    enum comm_tcp_recv recv;
    bool last_reduce; /* the receive that completes this rank's slice (AVG divides) */
};

static int comm_tcp_mod(int a, int world)
{
    return ((a % world) + world) % world;
}

static void comm_tcp_seg(const struct comm_tcp_plan *pl, int world, int j, size_t *ret_off,
                         size_t *ret_len)
{
    size_t off, len;
    gpt_comm_slice(pl->n, world, comm_tcp_mod(j, world), &off, &len);
    *ret_off = off * sizeof(float);
    *ret_len = len * sizeof(float);
}

/* Segment numbering makes rank r end the reduce-scatter owning segment r
 * (the gpt_comm_slice convention): in step s it sends segment r-s-1 and
 * receives r-s-2, so segment j is summed along j+1, j+2, ..., j, always in
 * that order, which makes the result bits depend only on the world size. */
static void comm_tcp_phase_get(const struct comm_tcp_plan *pl, int rank, int world, int p,
                               struct comm_tcp_phase *ret)
{
    memset(ret, 0, sizeof(*ret));
    if (pl->kind == COMM_TCP_BROADCAST) {
        bool last = comm_tcp_mod(rank + 1, world) == pl->root;
        if (p == 0 && rank == pl->root) {
            ret->send_len = pl->n;
        } else if (p == 0) {
            ret->recv = COMM_TCP_RECV_COPY;
            ret->recv_len = pl->n;
        } else if (rank != pl->root && !last) {
            ret->send_len = pl->n;
        }
        return;
    }
    int rs_phases = pl->kind == COMM_TCP_ALLGATHER ? 0 : world - 1;
    if (p < rs_phases) {
        comm_tcp_seg(pl, world, rank - p - 1, &ret->send_off, &ret->send_len);
        comm_tcp_seg(pl, world, rank - p - 2, &ret->recv_off, &ret->recv_len);
        ret->recv = COMM_TCP_RECV_REDUCE;
        ret->last_reduce = p == rs_phases - 1;
    } else {
        int a = p - rs_phases;
        comm_tcp_seg(pl, world, rank - a, &ret->send_off, &ret->send_len);
        comm_tcp_seg(pl, world, rank - a - 1, &ret->recv_off, &ret->recv_len);
        ret->recv = COMM_TCP_RECV_COPY;
    }
}

static void comm_tcp_put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (24 - 8 * i));
}

static void comm_tcp_put64(unsigned char *p, uint64_t v)
{
    comm_tcp_put32(p, (uint32_t)(v >> 32));
    comm_tcp_put32(p + 4, (uint32_t)v);
}

/* FNV-1a: identifies the world formation in the hello. */
static uint64_t comm_tcp_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* ---- the collective engine ---- */

static int comm_tcp_fail(struct comm_tcp *t, int code)
{
    if (t->status == 0)
        t->status = code;
    /* Tell both neighbours at once, so a failure travels round the ring
     * instead of leaving them to their timeouts; on shm, every rank. */
    comm_shm_fail(t->shm, t->status);
    if (t->fd_right >= 0)
        shutdown(t->fd_right, SHUT_RDWR);
    if (t->fd_left >= 0)
        shutdown(t->fd_left, SHUT_RDWR);
    return t->status;
}

/* Aborted, or (during set-up) cancelled by the owner. */
static bool comm_tcp_stopped(struct comm_tcp *t)
{
    return atomic_load_explicit(&t->aborted, memory_order_relaxed) ||
           (t->cancelled && t->cancelled(t->cancel_ctx));
}

static int comm_tcp_check(struct comm_tcp *t)
{
    if (t->status == 0 && comm_tcp_stopped(t))
        return comm_tcp_fail(t, -ECANCELED);
    return t->status;
}

/* The reductions, 4 lanes at a time (plain -O2 does not vectorize a loop
 * of unknown length). Element-wise, so the lanes change no result bit. */
typedef float comm_tcp_v4 __attribute__((vector_size(16)));

static void comm_tcp_add(float *restrict dst, const float *restrict src, size_t n)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        comm_tcp_v4 a, b;
        memcpy(&a, src + i, sizeof(a));
        memcpy(&b, dst + i, sizeof(b));
        b = a + b;
        memcpy(dst + i, &b, sizeof(b));
    }
    for (; i < n; i++)
        dst[i] = src[i] + dst[i];
}

static void comm_tcp_add_div(float *restrict dst, const float *restrict src, size_t n, float div)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        comm_tcp_v4 a, b;
        memcpy(&a, src + i, sizeof(a));
        memcpy(&b, dst + i, sizeof(b));
        b = (a + b) / div;
        memcpy(dst + i, &b, sizeof(b));
    }
    for (; i < n; i++)
        dst[i] = (src[i] + dst[i]) / div;
}

static void comm_tcp_hdr_encode(const struct comm_tcp *t, const struct comm_tcp_plan *pl,
                                unsigned char *h)
{
    comm_tcp_put32(h, COMM_TCP_MAGIC);
    comm_tcp_put32(h + 4, (uint32_t)pl->kind | (pl->avg ? 0x100u : 0u));
    comm_tcp_put32(h + 8, t->seq);
    comm_tcp_put32(h + 12, (uint32_t)pl->root);
    comm_tcp_put64(h + 16, (uint64_t)pl->n);
}

/* Send/receive state of one direction: phase -1 is the 24-byte header. */
struct comm_tcp_dir {
    int p;
    size_t done; /* bytes of phase p sent, or received and (for REDUCE) reduced */
    size_t len;
    struct comm_tcp_phase ph;
};

static void comm_tcp_dir_next(const struct comm_tcp *t, const struct comm_tcp_plan *pl,
                              struct comm_tcp_dir *d, bool send)
{
    for (;;) {
        if (d->done < d->len || d->p >= pl->phases)
            return;
        d->p++;
        d->done = 0;
        d->len = 0;
        if (d->p < pl->phases) {
            comm_tcp_phase_get(pl, t->base.rank, t->base.world, d->p, &d->ph);
            d->len = send ? d->ph.send_len : d->ph.recv_len;
        }
    }
}

/* One non-blocking send of comm_tcp_run's right direction: the header,
 * then each phase's bytes as far as the receive side has gathered them.
 * Sets *progress when bytes went out, *want_out when the socket is full.
 * Returns 0 or the (sticky) failure. */
static int comm_tcp_send_step(struct comm_tcp *t, const struct comm_tcp_plan *pl,
                              struct comm_tcp_dir *s, const struct comm_tcp_dir *r,
                              const unsigned char *hdr_out, bool *progress, bool *want_out)
{
    if (s->p >= pl->phases)
        return 0;
    const unsigned char *src;
    size_t avail;
    if (s->p < 0) {
        src = hdr_out;
        avail = s->len;
    } else {
        src = pl->buf + s->ph.send_off;
        /* Gate: phase p forwards what phase p-1 has received. */
        avail = s->p == 0 ? s->len : r->p > s->p - 1 ? s->len : r->p == s->p - 1 ? r->done : 0;
    }
    if (avail > s->done) {
        size_t want = avail - s->done;
        if (want > t->chunk_bytes)
            want = t->chunk_bytes;
        ssize_t k = send(t->fd_right, src + s->done, want, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k > 0) {
            s->done += (size_t)k;
            *progress = true;
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            *want_out = true;
        } else if (!(k < 0 && errno == EINTR)) {
            return comm_tcp_fail(t, k < 0 ? -errno : -EPIPE);
        }
    }
    return 0;
}

/* One non-blocking receive of comm_tcp_run's left direction: the header
 * into hdr_in, then each phase's bytes, copied or reduced into the plan's
 * buffer (*pend: received bytes in scratch not yet reduced, < 4). Sets
 * *progress when bytes came in, *want_in when none were there. Returns 0
 * or the (sticky) failure. */
static int comm_tcp_recv_step(struct comm_tcp *t, const struct comm_tcp_plan *pl,
                              struct comm_tcp_dir *r, unsigned char *hdr_in, size_t *pend,
                              float div, bool *progress, bool *want_in)
{
    if (r->p >= pl->phases)
        return 0;
    unsigned char *dst;
    size_t want;
    bool reduce = r->p >= 0 && r->ph.recv == COMM_TCP_RECV_REDUCE;
    if (r->p < 0) {
        dst = hdr_in + r->done;
        want = r->len - r->done;
    } else if (reduce) {
        dst = (unsigned char *)t->scratch + *pend;
        want = r->len - r->done - *pend;
        if (want > t->chunk_bytes)
            want = t->chunk_bytes;
    } else {
        dst = pl->buf + r->ph.recv_off + r->done;
        want = r->len - r->done;
        if (want > t->chunk_bytes)
            want = t->chunk_bytes;
    }
    ssize_t k = recv(t->fd_left, dst, want, MSG_DONTWAIT);
    if (k > 0) {
        *progress = true;
        if (!reduce) {
            r->done += (size_t)k;
        } else {
            size_t have = *pend + (size_t)k, nf = have / sizeof(float);
            float *d = (float *)(pl->buf + r->ph.recv_off + r->done);
            if (r->ph.last_reduce && pl->avg)
                comm_tcp_add_div(d, t->scratch, nf, div);
            else
                comm_tcp_add(d, t->scratch, nf);
            r->done += nf * sizeof(float);
            *pend = have - nf * sizeof(float);
            if (*pend)
                memmove(t->scratch, (unsigned char *)t->scratch + nf * sizeof(float), *pend);
        }
    } else if (k == 0) {
        return comm_tcp_fail(t, -EPIPE);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        *want_in = true;
    } else if (errno != EINTR) {
        return comm_tcp_fail(t, -errno);
    }
    return 0;
}

/* Runs one plan to completion. Returns 0 or the (sticky) failure. */
static int comm_tcp_run(struct comm_tcp *t, const struct comm_tcp_plan *pl)
{
    int rc = comm_tcp_check(t);
    if (rc)
        return rc;
    t->seq++;

    /* Broadcast: the root receives nothing and the root's left sends
     * nothing; every other shape uses both directions. */
    bool has_send =
        pl->kind != COMM_TCP_BROADCAST || comm_tcp_mod(t->base.rank + 1, t->base.world) != pl->root;
    bool has_recv = pl->kind != COMM_TCP_BROADCAST || t->base.rank != pl->root;
    unsigned char hdr_out[COMM_TCP_HDR_BYTES], hdr_in[COMM_TCP_HDR_BYTES];
    comm_tcp_hdr_encode(t, pl, hdr_out);

    struct comm_tcp_dir s = {.p = -1, .len = has_send ? COMM_TCP_HDR_BYTES : 0};
    struct comm_tcp_dir r = {.p = -1, .len = has_recv ? COMM_TCP_HDR_BYTES : 0};
    size_t pend = 0; /* received bytes in scratch not yet reduced (< 4) */
    int64_t deadline = monotime_ms() + t->timeout_ms;
    float div = (float)t->base.world;

    for (;;) {
        bool hdr_was_open = r.p < 0;
        comm_tcp_dir_next(t, pl, &r, false);
        if (hdr_was_open && r.p >= 0 && has_recv) {
            /* The left peer must be in the same collective with the same
             * arguments; otherwise the byte streams would silently mix. */
            if (memcmp(hdr_out, hdr_in, sizeof(hdr_in)) != 0)
                return comm_tcp_fail(t, -GPT_E_PROTO);
        }
        comm_tcp_dir_next(t, pl, &s, true);
        if (s.p >= pl->phases && r.p >= pl->phases)
            return 0;
        if (comm_tcp_stopped(t))
            return comm_tcp_fail(t, -ECANCELED);

        bool progress = false, want_out = false, want_in = false;

        if ((rc = comm_tcp_send_step(t, pl, &s, &r, hdr_out, &progress, &want_out)) != 0)
            return rc;
        if ((rc = comm_tcp_recv_step(t, pl, &r, hdr_in, &pend, div, &progress, &want_in)) != 0)
            return rc;

        int64_t now = monotime_ms();
        if (progress) {
            deadline = now + t->timeout_ms;
            continue;
        }
        if (now >= deadline)
            return comm_tcp_fail(t, -ETIMEDOUT);
        struct pollfd pfd[3];
        nfds_t np = 0;
        pfd[np++] = (struct pollfd){.fd = t->fd_abort, .events = POLLIN};
        if (want_out)
            pfd[np++] = (struct pollfd){.fd = t->fd_right, .events = POLLOUT};
        if (want_in)
            pfd[np++] = (struct pollfd){.fd = t->fd_left, .events = POLLIN};
        int64_t wait = deadline - now;
        if (wait > COMM_TCP_POLL_MS)
            wait = COMM_TCP_POLL_MS;
        if (poll(pfd, np, (int)wait) < 0 && errno != EINTR)
            return comm_tcp_fail(t, -errno);
    }
}

static int comm_tcp_ring(struct gpt_comm *c, enum comm_tcp_kind kind, void *buf, size_t n, int root,
                         bool avg)
{
    struct comm_tcp *t = (struct comm_tcp *)c;
    if (c->world == 1)
        return comm_tcp_check(t);
    struct comm_tcp_plan pl = {
        .kind = kind,
        .buf = buf,
        .n = n,
        .root = root,
        .avg = avg,
    };
    switch (kind) {
    case COMM_TCP_ALLREDUCE:
        pl.phases = 2 * (c->world - 1);
        break;
    case COMM_TCP_REDUCE_SCATTER:
    case COMM_TCP_ALLGATHER:
        pl.phases = c->world - 1;
        break;
    case COMM_TCP_BROADCAST:
        pl.phases = 2;
        break;
    }
    return comm_tcp_run(t, &pl);
}

static int comm_tcp_allreduce(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op)
{
    return comm_tcp_ring(c, COMM_TCP_ALLREDUCE, buf, n, 0, op == GPT_REDUCE_AVG);
}

static int comm_tcp_broadcast(struct gpt_comm *c, void *buf, size_t bytes, int root)
{
    return comm_tcp_ring(c, COMM_TCP_BROADCAST, buf, bytes, root, false);
}

static int comm_tcp_reduce_scatter(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op)
{
    return comm_tcp_ring(c, COMM_TCP_REDUCE_SCATTER, buf, n, 0, op == GPT_REDUCE_AVG);
}

static int comm_tcp_allgather(struct gpt_comm *c, float *buf, size_t n)
{
    return comm_tcp_ring(c, COMM_TCP_ALLGATHER, buf, n, 0, false);
}

/* An allreduce of one float per rank: nobody can finish it before every
 * rank has started it. */
static int comm_tcp_barrier(struct gpt_comm *c)
{
    struct comm_tcp *t = (struct comm_tcp *)c;
    if (c->world > 1)
        memset(t->barrier_buf, 0, (size_t)c->world * sizeof(float));
    return comm_tcp_ring(c, COMM_TCP_ALLREDUCE, t->barrier_buf, (size_t)c->world, 0, false);
}

static void comm_tcp_abort(struct gpt_comm *c)
{
    struct comm_tcp *t = (struct comm_tcp *)c;
    atomic_store(&t->aborted, true);
    comm_shm_abort(t->shm);
    if (t->fd_abort >= 0) {
        uint64_t one = 1;
        ssize_t k = write(t->fd_abort, &one, sizeof(one));
        (void)k; /* only fails when the counter is already huge: still readable */
    }
}

static void comm_tcp_free(struct gpt_comm *c)
{
    struct comm_tcp *t = (struct comm_tcp *)c;
    comm_shm_free(t->shm);
    if (t->fd_right >= 0)
        close(t->fd_right);
    if (t->fd_left >= 0)
        close(t->fd_left);
    if (t->fd_abort >= 0)
        close(t->fd_abort);
    free(t->scratch);
    free(t->barrier_buf);
    free(t);
}

static const struct gpt_comm_ops comm_tcp_ops = {
    .name = "tcp",
    .allreduce = comm_tcp_allreduce,
    .broadcast = comm_tcp_broadcast,
    .reduce_scatter = comm_tcp_reduce_scatter,
    .allgather = comm_tcp_allgather,
    .barrier = comm_tcp_barrier,
    .abort = comm_tcp_abort,
    .free = comm_tcp_free,
};

/* ---- the same collectives through shared memory ---- */

static int comm_tcp_shm_done(struct comm_tcp *t, int rc)
{
    return rc ? comm_tcp_fail(t, rc) : 0;
}

static int comm_tcp_shm_allreduce(struct gpt_comm *c, float *buf, size_t n, enum gpt_reduce_op op)
{
    struct comm_tcp *t = (struct comm_tcp *)c;
    int rc = comm_tcp_check(t);
    return rc ? rc : comm_tcp_shm_done(t, comm_shm_allreduce(t->shm, buf, n, op == GPT_REDUCE_AVG));
}

static int comm_tcp_shm_broadcast(struct gpt_comm *c, void *buf, size_t bytes, int root)
{
    struct comm_tcp *t = (struct comm_tcp *)c;
    int rc = comm_tcp_check(t);
    return rc ? rc : comm_tcp_shm_done(t, comm_shm_broadcast(t->shm, buf, bytes, root));
}

static int comm_tcp_shm_reduce_scatter(struct gpt_comm *c, float *buf, size_t n,
                                       enum gpt_reduce_op op)
{
    struct comm_tcp *t = (struct comm_tcp *)c;
    int rc = comm_tcp_check(t);
    return rc ? rc
              : comm_tcp_shm_done(t, comm_shm_reduce_scatter(t->shm, buf, n, op == GPT_REDUCE_AVG));
}

static int comm_tcp_shm_allgather(struct gpt_comm *c, float *buf, size_t n)
{
    struct comm_tcp *t = (struct comm_tcp *)c;
    int rc = comm_tcp_check(t);
    return rc ? rc : comm_tcp_shm_done(t, comm_shm_allgather(t->shm, buf, n));
}

static int comm_tcp_shm_barrier(struct gpt_comm *c)
{
    struct comm_tcp *t = (struct comm_tcp *)c;
    int rc = comm_tcp_check(t);
    return rc ? rc : comm_tcp_shm_done(t, comm_shm_barrier(t->shm));
}

static const struct gpt_comm_ops comm_tcp_shm_ops = {
    .name = "shm",
    .allreduce = comm_tcp_shm_allreduce,
    .broadcast = comm_tcp_shm_broadcast,
    .reduce_scatter = comm_tcp_shm_reduce_scatter,
    .allgather = comm_tcp_shm_allgather,
    .barrier = comm_tcp_shm_barrier,
    .abort = comm_tcp_abort,
    .free = comm_tcp_free,
};

/* The shm setup's consistency round: a sum over the ring of one flag per
 * rank. */
static int comm_tcp_shm_confirm(void *ctx, bool ok, bool *ret_all_ok)
{
    struct comm_tcp *t = ctx;
    struct gpt_comm *c = &t->base;
    memset(t->barrier_buf, 0, (size_t)c->world * sizeof(float));
    t->barrier_buf[c->rank] = ok ? 1.0f : 0.0f;
    int rc = comm_tcp_ring(c, COMM_TCP_ALLREDUCE, t->barrier_buf, (size_t)c->world, 0, false);
    if (rc)
        return rc;
    float sum = 0;
    for (int r = 0; r < c->world; r++)
        sum += t->barrier_buf[r];
    *ret_all_ok = sum == (float)c->world;
    return 0;
}

/* ---- ring setup ---- */

static int comm_tcp_remaining_ms(int64_t deadline)
{
    int64_t left = deadline - monotime_ms();
    return left < 0 ? 0 : left > INT32_MAX ? INT32_MAX : (int)left;
}

/* How long one set-up wait may poll: up to the deadline, in slices short
 * enough to notice a cancel. Sets *ret_rc (-ECANCELED, -ETIMEDOUT) and
 * returns -1 when the wait must end. */
static int comm_tcp_setup_slice(struct comm_tcp *t, int64_t deadline, int *ret_rc)
{
    if (comm_tcp_stopped(t)) {
        *ret_rc = -ECANCELED;
        return -1;
    }
    int wait = comm_tcp_remaining_ms(deadline);
    if (wait == 0) {
        *ret_rc = -ETIMEDOUT;
        return -1;
    }
    return wait > COMM_CANCEL_POLL_MS ? COMM_CANCEL_POLL_MS : wait;
}

/* Latency matters (one small segment per ring step), and big buffers keep
 * the pipeline full on fast links. */
static void comm_tcp_sockopts(int fd)
{
    int one = 1, bytes = COMM_TCP_SOCKBUF_BYTES;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

/* Moves exactly len bytes on a non-blocking socket by the deadline. */
static int comm_tcp_io_all(struct comm_tcp *t, int fd, void *buf, size_t len, bool send_dir,
                           int64_t deadline)
{
    size_t done = 0;
    while (done < len) {
        ssize_t k = send_dir ? send(fd, (char *)buf + done, len - done, MSG_NOSIGNAL)
                             : recv(fd, (char *)buf + done, len - done, 0);
        if (k > 0) {
            done += (size_t)k;
            continue;
        }
        if (k == 0)
            return -EPIPE;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        int rc, wait = comm_tcp_setup_slice(t, deadline, &rc);
        if (wait < 0)
            return rc;
        struct pollfd pfd = {.fd = fd, .events = send_dir ? POLLOUT : POLLIN};
        if (poll(&pfd, 1, wait) < 0 && errno != EINTR)
            return -errno;
    }
    return 0;
}

static int comm_tcp_resolve(const char *host, const char *port, struct addrinfo **ret)
{
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC,
        .ai_socktype = SOCK_STREAM,
        .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
    };
    int rc = getaddrinfo(host, port, &hints, ret);
    return rc == 0 ? 0 : rc == EAI_MEMORY ? -ENOMEM : -EINVAL;
}

static int comm_tcp_listen(const char *host, int *ret_fd, char *addr, size_t cap,
                           struct gpt_err *err)
{
    struct addrinfo *ai = NULL;
    int fd = -1, rc = comm_tcp_resolve(host, "0", &ai);
    if (rc) {
        gpt_err_set(err, rc, NULL, "comm tcp: bind_host '%s' is not a numeric address", host);
        goto out;
    }
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        rc = gpt_err_set(err, -errno, NULL, "comm tcp: socket: %s", strerror(errno));
        goto out;
    }
    comm_tcp_sockopts(fd);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0) {
        rc = gpt_err_set(err, -errno, NULL, "comm tcp: listen on %s: %s", host, strerror(errno));
        goto out;
    }
    struct sockaddr_storage sa;
    socklen_t sl = sizeof(sa);
    if (getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
        rc = gpt_err_set(err, -errno, NULL, "comm tcp: getsockname: %s", strerror(errno));
        goto out;
    }
    unsigned port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                   : ((struct sockaddr_in *)&sa)->sin_port);
    bool v6 = ai->ai_family == AF_INET6;
    if ((size_t)snprintf(addr, cap, "%s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "", port) >= cap) {
        rc = gpt_err_set(err, -EINVAL, NULL, "comm tcp: bind_host too long");
        goto out;
    }
    *ret_fd = fd;
    fd = -1;
out:
    if (fd >= 0)
        close(fd);
    if (ai)
        freeaddrinfo(ai);
    return rc;
}

static int comm_tcp_connect(struct comm_tcp *t, const char *addr, int64_t deadline, int *ret_fd)
{
    char host[256], port[8];
    struct addrinfo *ai = NULL;
    int fd = -1, port_i, rc = hostport_parse(addr, 1, "peer", host, sizeof(host), &port_i, NULL);
    snprintf(port, sizeof(port), "%d", rc == 0 ? port_i : 0);
    if (rc == 0)
        rc = comm_tcp_resolve(host, port, &ai);
    while (rc == 0) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            rc = -errno;
            break;
        }
        comm_tcp_sockopts(fd);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        if (errno == EINPROGRESS) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            int so = 0, k = 0;
            socklen_t sl = sizeof(so);
            while (k == 0) {
                int wait = comm_tcp_setup_slice(t, deadline, &rc);
                if (wait < 0)
                    break;
                k = poll(&pfd, 1, wait);
                if (k < 0 && errno != EINTR) {
                    rc = -errno;
                    break;
                }
                k = k < 0 ? 0 : k;
            }
            if (rc)
                break;
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl) == 0 && so == 0)
                break;
            errno = so ? so : ECONNREFUSED;
        }
        rc = -errno;
        close(fd);
        fd = -1;
        /* A refused connection may be a listener not yet up: retry. */
        if (rc != -ECONNREFUSED || comm_tcp_setup_slice(t, deadline, &rc) < 0)
            break;
        rc = 0;
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL);
    }
    if (ai)
        freeaddrinfo(ai);
    if (rc) {
        if (fd >= 0)
            close(fd);
        return rc;
    }
    *ret_fd = fd;
    return 0;
}

static void comm_tcp_hello_encode(unsigned char *h, uint64_t prefix_hash, int rank, int world)
{
    comm_tcp_put32(h, COMM_TCP_MAGIC);
    comm_tcp_put32(h + 4, COMM_TCP_VERSION);
    comm_tcp_put64(h + 8, prefix_hash);
    comm_tcp_put32(h + 16, (uint32_t)rank);
    comm_tcp_put32(h + 20, (uint32_t)world);
}

/* Accepts until the left neighbour shows up with the right hello; anything
 * else that connects to the published port is closed. */
static int comm_tcp_accept_left(struct comm_tcp *t, int lfd, uint64_t prefix_hash, int left,
                                int world, int64_t deadline, int *ret_fd)
{
    for (;;) {
        int rc, wait = comm_tcp_setup_slice(t, deadline, &rc);
        if (wait < 0)
            return rc;
        struct pollfd pfd = {.fd = lfd, .events = POLLIN};
        if (poll(&pfd, 1, wait) < 0 && errno != EINTR)
            return -errno;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
                continue;
            return -errno;
        }
        unsigned char got[COMM_TCP_HELLO_BYTES], want[COMM_TCP_HELLO_BYTES];
        int64_t hello_deadline = monotime_ms() + COMM_TCP_HELLO_WAIT_MS;
        if (hello_deadline > deadline)
            hello_deadline = deadline;
        comm_tcp_hello_encode(want, prefix_hash, left, world);
        if (comm_tcp_io_all(t, fd, got, sizeof(got), false, hello_deadline) == 0 &&
            memcmp(got, want, sizeof(got)) == 0) {
            *ret_fd = fd;
            return 0;
        }
        close(fd);
    }
}

static int comm_tcp_key(char *key, size_t cap, const char *prefix, int rank)
{
    return (size_t)snprintf(key, cap, "%saddr/%d", prefix, rank) < cap ? 0 : -EINVAL;
}

static int comm_tcp_setup(struct comm_tcp *t, const struct gpt_comm_opts *opts,
                          const struct gpt_kv *kv, struct gpt_err *err)
{
    const char *host = opts->bind_host ? opts->bind_host : "127.0.0.1";
    int rank = opts->rank, world = opts->world, lfd = -1, rc;
    int right = (rank + 1) % world, left = (rank + world - 1) % world;
    int64_t deadline = monotime_ms() + t->timeout_ms;
    uint64_t hash = comm_tcp_hash(opts->prefix);
    char key[COMM_TCP_KEY_MAX], addr[COMM_TCP_ADDR_MAX];
    size_t len = 0;

    rc = comm_tcp_listen(host, &lfd, addr, sizeof(addr), err);
    if (rc)
        goto out;
    comm_tcp_key(key, sizeof(key), opts->prefix, rank);
    rc = kv->set(kv->ctx, key, addr, strlen(addr));
    if (rc) {
        gpt_err_set(err, rc, NULL, "comm tcp: publishing %s: %s", key, gpt_strerror(rc));
        goto out;
    }
    comm_tcp_key(key, sizeof(key), opts->prefix, right);
    do {
        int wait = comm_tcp_setup_slice(t, deadline, &rc);
        if (wait < 0)
            break;
        rc = kv->get(kv->ctx, key, addr, sizeof(addr) - 1, &len, wait);
    } while (rc == -ETIMEDOUT);
    if (rc) {
        gpt_err_set(err, rc, NULL, "comm tcp: waiting for %s: %s", key, gpt_strerror(rc));
        goto out;
    }
    addr[len] = '\0';
    rc = comm_tcp_connect(t, addr, deadline, &t->fd_right);
    if (rc) {
        gpt_err_set(err, rc, NULL, "comm tcp: rank %d connecting to rank %d at '%s': %s", rank,
                    right, addr, gpt_strerror(rc));
        goto out;
    }
    unsigned char hello[COMM_TCP_HELLO_BYTES];
    comm_tcp_hello_encode(hello, hash, rank, world);
    rc = comm_tcp_io_all(t, t->fd_right, hello, sizeof(hello), true, deadline);
    if (rc) {
        gpt_err_set(err, rc, NULL, "comm tcp: hello to rank %d: %s", right, gpt_strerror(rc));
        goto out;
    }
    rc = comm_tcp_accept_left(t, lfd, hash, left, world, deadline, &t->fd_left);
    if (rc)
        gpt_err_set(err, rc, NULL, "comm tcp: rank %d waiting for rank %d: %s", rank, left,
                    gpt_strerror(rc));
out:
    if (lfd >= 0)
        close(lfd);
    return rc;
}

int gpt_comm_tcp_new(const struct gpt_comm_opts *opts, const struct gpt_kv *kv,
                     struct gpt_comm **ret, struct gpt_err *err)
{
    if (!opts || opts->world < 1 || opts->world > COMM_TCP_WORLD_MAX || opts->rank < 0 ||
        opts->rank >= opts->world || opts->timeout_ms < 0)
        return gpt_err_set(err, -EINVAL, NULL, "comm tcp: bad rank/world/timeout");
    if (opts->world > 1 && (!opts->prefix || !kv || !kv->set || !kv->get))
        return gpt_err_set(err, -EINVAL, NULL, "comm tcp: a prefix and a kv store are needed");
    char key[COMM_TCP_KEY_MAX];
    if (opts->prefix && comm_tcp_key(key, sizeof(key), opts->prefix, opts->world) != 0)
        return gpt_err_set(err, -EINVAL, NULL, "comm tcp: key prefix too long");

    struct comm_tcp *t = calloc(1, sizeof(*t));
    if (!t)
        return gpt_err_set(err, -ENOMEM, NULL, "comm tcp: out of memory");
    t->base.ops = &comm_tcp_ops;
    t->base.rank = opts->rank;
    t->base.world = opts->world;
    t->fd_right = t->fd_left = t->fd_abort = -1;
    atomic_init(&t->aborted, false);
    t->cancelled = opts->cancelled;
    t->cancel_ctx = opts->cancel_ctx;
    t->timeout_ms = opts->timeout_ms ? opts->timeout_ms : COMM_TCP_DEFAULT_TIMEOUT_MS;
    size_t chunk = opts->chunk_bytes ? opts->chunk_bytes : COMM_TCP_DEFAULT_CHUNK;
    chunk = chunk < COMM_TCP_CHUNK_MIN ? COMM_TCP_CHUNK_MIN : chunk;
    chunk = chunk > COMM_TCP_CHUNK_MAX ? COMM_TCP_CHUNK_MAX : chunk;
    t->chunk_bytes = chunk & ~(size_t)(sizeof(float) - 1);

    int rc = 0;
    if (opts->world > 1) {
        t->scratch = malloc(t->chunk_bytes + sizeof(float));
        t->barrier_buf = calloc((size_t)opts->world, sizeof(float));
        if (!t->scratch || !t->barrier_buf) {
            rc = gpt_err_set(err, -ENOMEM, NULL, "comm tcp: out of memory");
            goto fail;
        }
        t->fd_abort = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (t->fd_abort < 0) {
            rc = gpt_err_set(err, -errno, NULL, "comm tcp: eventfd: %s", strerror(errno));
            goto fail;
        }
        rc = comm_tcp_setup(t, opts, kv, err);
        if (rc)
            goto fail;
        struct comm_shm_link link = {
            .rank = opts->rank,
            .world = opts->world,
            .timeout_ms = t->timeout_ms,
            .fd_left = t->fd_left,
            .fd_right = t->fd_right,
            .aborted = &t->aborted,
        };
        int64_t deadline = monotime_ms() + t->timeout_ms;
        rc = comm_shm_setup(&link, opts, kv, deadline, comm_tcp_shm_confirm, t, &t->shm);
        if (rc) {
            gpt_err_set(err, rc, NULL, "comm tcp: rank %d: shm round on the ring: %s", opts->rank,
                        gpt_strerror(rc));
            goto fail;
        }
        if (t->shm)
            t->base.ops = &comm_tcp_shm_ops;
    }
    /* From here on the owner aborts with gpt_comm_abort. */
    t->cancelled = NULL;
    t->cancel_ctx = NULL;
    *ret = &t->base;
    return 0;
fail:
    comm_tcp_free(&t->base);
    return rc;
}
