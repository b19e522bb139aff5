/*
 * comm_nccl: collectives over NCCL for the CUDA backend (see comm_nccl.h).
 * One communicator per worker thread; every call comes from that thread
 * except gpt_comm_abort, which only sets an atomic flag that the owner's
 * poll loop acts on within 50 microseconds or so.
 *
 * NCCL runs in non-blocking mode (ncclConfig_t.blocking = 0): a call only
 * enqueues, and this file waits by polling ncclCommGetAsyncError and
 * cudaStreamQuery, so a collective that hangs (a dead peer) can be given
 * up: on the abort flag (-ECANCELED) or the timeout (-ETIMEDOUT) the NCCL
 * communicator is aborted with ncclCommAbort, which also releases the GPU
 * from the stuck kernel. A failure is sticky: later calls return it.
 *
 * Uneven slices: gpt_comm_slice gives the first n % world ranks one extra
 * element, while ncclReduceScatter/ncclAllGather need equal counts. When
 * n % world != 0 the buffer is repacked into a padded staging buffer with
 * every rank's slice at rank * chunk (chunk = ceil(n / world), the tails
 * zeroed), the collective runs in place there, and the result is unpacked.
 * The repacking takes two copies whatever the world size: ranks below
 * n % world have full slices, so their part of the layout is identical
 * (one 1-D copy), and the rest is one 2-D copy with pitches base and
 * chunk. When n % world == 0 the collective runs in place on the caller's
 * buffer. The plan is engine/ops/cuda_plan.c, unit-tested without a GPU.
 */
#include "comm_nccl.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "cuda_backend.h"
#include "cuda_plan.h"
#include "cuda_probe.h"
#include "gpt_bf16.h"
#include "monotime.h"

#define NCCL_DEFAULT_TIMEOUT_MS 300000
#define NCCL_KEY_MAX            256
#define NCCL_MSG_MAX            256
/* How long the abort path waits for ncclCommAbort before it returns
 * anyway (well inside gpt_comm_abort's one-second bound). */
#define NCCL_ABORT_WAIT_MS 500

/* One ncclCommAbort run on its own thread: it can block behind unrelated
 * work on the compute stream (its frees synchronise the device), and the
 * abort path must return within gpt_comm_abort's bound. Shared by the
 * owner thread and the abort thread under `mu`; the owner joins the thread
 * in nccl_free. */
struct nccl_aborter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ncclComm_t nc;
    int device;
    int done;    /* ncclCommAbort returned */
    int started; /* the thread exists and must be joined */
    pthread_t th;
};

struct comm_nccl {
    struct gpt_comm base; /* must stay first */
    ncclComm_t nc;
    int device;
    int timeout_ms;
    cudaStream_t stream;     /* the stream collectives run on */
    cudaStream_t own_stream; /* created here; NULL once bound to a backend */
    cudaStream_t compute;    /* bound backend's compute stream, or NULL */
    struct gpt_backend *be;  /* bound backend (told what collectives wrote), or NULL */
    cudaEvent_t ready;       /* compute -> comm ordering */
    /* Per-bucket ready marks (gpt_comm_mark_ready), recorded by the worker
     * thread on the compute stream as each bucket's gradients are
     * enqueued, waited on by the comm stream before that bucket's
     * all-reduce: a bucket waits for its own gradients only, not for the
     * backward enqueued after it. The slot protocol (trainer_ddp) orders a
     * slot's mark before its collective and its collective before the
     * next mark. */
    cudaEvent_t marks[GPT_COMM_READY_SLOTS];
    void *stage; /* device staging (host buffers, padding) */
    size_t stage_bytes;
    uint16_t *wire; /* bf16 all-reduce buffer (GPT_COMM_BF16), grown, never shrunk */
    size_t wire_n;
    atomic_bool abort_req;
    int (*cancelled)(void *ctx); /* gpt_comm_opts.cancelled, during init only */
    void *cancel_ctx;
    int pending; /* allreduce_after enqueued, not yet waited for (nccl_wait_after) */
    int dead;    /* sticky failure, 0 while usable */
    int aborted; /* ncclCommAbort issued (maybe still running on ab.th) */
    struct nccl_aborter ab;
    char msg[NCCL_MSG_MAX];
};

/* Records the first failure and makes the communicator unusable. */
static int nccl_fail(struct comm_nccl *c, int code, const char *what, const char *detail)
{
    if (!c->dead) {
        c->dead = code;
        snprintf(c->msg, sizeof(c->msg), "%s: %s", what, detail ? detail : gpt_strerror(code));
    }
    return c->dead;
}

static void *nccl_abort_main(void *arg)
{
    struct nccl_aborter *a = arg;
    cudaSetDevice(a->device);
    ncclCommAbort(a->nc);
    (void)cudaGetLastError();
    pthread_mutex_lock(&a->mu);
    a->done = 1;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* Aborts the communicator: ncclCommAbort runs on a helper thread and this
 * waits for it at most NCCL_ABORT_WAIT_MS, so it returns in bounded time
 * even when the abort is stuck behind the compute stream; nccl_free joins
 * the helper. Owner thread. */
static void nccl_abort_now(struct comm_nccl *c)
{
    if (!c->nc || c->aborted)
        return;
    c->aborted = 1;
    struct nccl_aborter *a = &c->ab;
    a->nc = c->nc;
    a->device = c->device;
    a->done = 0;
    if (pthread_create(&a->th, NULL, nccl_abort_main, a) != 0) {
        ncclCommAbort(c->nc); /* no thread: abort inline, unbounded */
        a->done = 1;
        return;
    }
    a->started = 1;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += NCCL_ABORT_WAIT_MS / 1000;
    until.tv_nsec += (long)(NCCL_ABORT_WAIT_MS % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&a->mu);
    while (!a->done) {
        if (pthread_cond_timedwait(&a->cv, &a->mu, &until) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&a->mu);
}

/* Waits for a helper thread started by nccl_abort_now. Owner thread. */
static void nccl_abort_join(struct comm_nccl *c)
{
    if (c->ab.started) {
        pthread_join(c->ab.th, NULL);
        c->ab.started = 0;
    }
}

static int nccl_result_code(ncclResult_t r)
{
    /* A system or remote error is what a lost peer looks like. */
    return r == ncclSystemError || r == ncclRemoteError ? -EPIPE : -GPT_E_NCCL;
}

/* Waits until the NCCL communicator has left ncclInProgress and, when
 * `stream` is set, the stream has drained; on abort, timeout or error
 * aborts the communicator. `deadline_ms` is absolute (monotonic). */
static int nccl_wait(struct comm_nccl *c, int stream, int64_t deadline_ms, const char *what)
{
    long ns = GPT_NCCL_POLL_FIRST_NS;
    for (;;) {
        if (atomic_load(&c->abort_req) || (c->cancelled && c->cancelled(c->cancel_ctx))) {
            nccl_abort_now(c);
            return nccl_fail(c, -ECANCELED, what, "aborted");
        }
        ncclResult_t ar = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(c->nc, &ar);
        if (r != ncclSuccess)
            ar = r;
        if (ar != ncclSuccess && ar != ncclInProgress) {
            const char *detail = ncclGetLastError(c->nc);
            int code = nccl_result_code(ar);
            nccl_fail(c, code, what, detail && *detail ? detail : ncclGetErrorString(ar));
            nccl_abort_now(c);
            return code;
        }
        if (ar == ncclSuccess) {
            if (!stream)
                return 0;
            cudaError_t e = cudaStreamQuery(c->stream);
            if (e == cudaSuccess)
                return 0;
            if (e != cudaErrorNotReady) {
                (void)cudaGetLastError();
                nccl_fail(c, -GPT_E_CUDA, what, cudaGetErrorString(e));
                nccl_abort_now(c);
                return -GPT_E_CUDA;
            }
        }
        if (monotime_ms() >= deadline_ms) {
            nccl_abort_now(c);
            return nccl_fail(c, -ETIMEDOUT, what, "timed out");
        }
        monotime_nap_backoff(&ns, GPT_NCCL_POLL_MAX_NS);
    }
}

static int nccl_cuda(struct comm_nccl *c, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    return nccl_fail(c, -GPT_E_CUDA, what, cudaGetErrorString(e));
}

/* Entry of every collective: refuses after a failure or an abort, makes
 * the device current and orders the comm stream after compute: after the
 * event `after` when given (a bucket's ready mark), else after all the
 * work enqueued so far. */
static int nccl_begin_after(struct comm_nccl *c, const char *what, cudaEvent_t after)
{
    if (c->dead)
        return c->dead;
    if (atomic_load(&c->abort_req)) {
        nccl_abort_now(c);
        return nccl_fail(c, -ECANCELED, what, "aborted");
    }
    int rc = nccl_cuda(c, cudaSetDevice(c->device), "cudaSetDevice");
    if (rc < 0)
        return rc;
    if (c->compute) {
        if (after)
            return nccl_cuda(c, cudaStreamWaitEvent(c->stream, after, 0), "cudaStreamWaitEvent");
        if ((rc = nccl_cuda(c, cudaEventRecord(c->ready, c->compute), "cudaEventRecord")) < 0)
            return rc;
        return nccl_cuda(c, cudaStreamWaitEvent(c->stream, c->ready, 0), "cudaStreamWaitEvent");
    }
    return nccl_cuda(c, cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

static int nccl_begin(struct comm_nccl *c, const char *what)
{
    return nccl_begin_after(c, what, NULL);
}

/* Checks one NCCL call's result and waits until it is enqueued (a
 * non-blocking communicator may still be enqueueing: ncclInProgress) and,
 * with `stream`, until the stream is idle. */
static int nccl_issued(struct comm_nccl *c, ncclResult_t r, const char *what, int stream)
{
    if (r != ncclSuccess && r != ncclInProgress) {
        const char *detail = ncclGetLastError(c->nc);
        int code = nccl_result_code(r);
        nccl_fail(c, code, what, detail && *detail ? detail : ncclGetErrorString(r));
        nccl_abort_now(c);
        return code;
    }
    return nccl_wait(c, stream, monotime_ms() + c->timeout_ms, what);
}

/* Issues one NCCL call's result and waits for the stream. */
static int nccl_finish(struct comm_nccl *c, ncclResult_t r, const char *what)
{
    return nccl_issued(c, r, what, 1);
}

static int nccl_is_device(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* Grows the staging buffer to at least `bytes` (rounded to 256). */
static int nccl_stage(struct comm_nccl *c, size_t bytes)
{
    if (bytes <= c->stage_bytes)
        return 0;
    bytes = (bytes + 255) & ~(size_t)255;
    if (c->stage) {
        cudaFree(c->stage);
        c->stage = NULL;
        c->stage_bytes = 0;
    }
    cudaError_t e = cudaMalloc(&c->stage, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        c->stage = NULL;
        return -ENOMEM; /* not sticky: the caller may retry smaller */
    }
    c->stage_bytes = bytes;
    return 0;
}

static ncclRedOp_t nccl_op(enum gpt_reduce_op op)
{
    return op == GPT_REDUCE_AVG ? ncclAvg : ncclSum;
}

/* Host buffers: copy in to the front of the staging buffer (`lead` bytes
 * reserved for it), returning the device pointer to work on. */
static int nccl_stage_in(struct comm_nccl *c, void *buf, size_t bytes, size_t extra_bytes,
                         void **ret_dev)
{
    if (nccl_is_device(buf)) {
        int rc = extra_bytes ? nccl_stage(c, extra_bytes) : 0;
        *ret_dev = buf;
        return rc;
    }
    size_t lead = (bytes + 255) & ~(size_t)255;
    int rc = nccl_stage(c, lead + extra_bytes);
    if (rc < 0)
        return rc;
    /* Pageable memory is staged by the runtime before the call returns. */
    if ((rc = nccl_cuda(c, cudaMemcpyAsync(c->stage, buf, bytes, cudaMemcpyHostToDevice, c->stream),
                        "stage in")) < 0)
        return rc;
    *ret_dev = c->stage;
    return 0;
}

/* Copies the result back to a host buffer once the stream is idle (a
 * device-to-pageable copy blocks the host, so it comes after the wait). */
static int nccl_stage_out(struct comm_nccl *c, void *buf, const void *dev, size_t off_bytes,
                          size_t bytes)
{
    if (dev == buf || bytes == 0)
        return 0;
    return nccl_cuda(c,
                     cudaMemcpy((char *)buf + off_bytes, (const char *)dev + off_bytes, bytes,
                                cudaMemcpyDeviceToHost),
                     "stage out");
}

/* The padded area sits after the staged host copy (if any). */
static float *nccl_padded_area(struct comm_nccl *c, const void *dev, size_t n)
{
    size_t lead = dev == c->stage ? ((n * sizeof(float) + 255) & ~(size_t)255) : 0;
    return (float *)((char *)c->stage + lead);
}

/* A collective wrote the caller's buf: the bound backend's bf16 shadows
 * of it are stale from now on (a no-op outside bf16 mode). */
static void nccl_wrote(struct comm_nccl *c, const void *buf, size_t bytes)
{
    if (c->be)
        gpt_cuda_backend_note_write(c->be, buf, bytes);
}

/* Grows the bf16 wire buffer to n elements. Freeing the old one waits
 * for the device, so it only grows (the first step's buckets). */
static int nccl_wire(struct comm_nccl *c, size_t n)
{
    if (n <= c->wire_n)
        return 0;
    if (c->wire)
        cudaFree(c->wire);
    c->wire = NULL;
    c->wire_n = 0;
    cudaError_t e = cudaMalloc((void **)&c->wire, n * sizeof(uint16_t));
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        c->wire = NULL;
        return nccl_fail(c, -ENOMEM, "allreduce", "no device memory for the bf16 wire buffer");
    }
    c->wire_n = n;
    return 0;
}

/* A bf16 all-reduce of the device floats buf, enqueued on the comm stream
 * after nccl_begin_after: converted into the wire buffer, reduced there as
 * ncclBfloat16 (half the bytes of fp32), converted back into buf. Stream
 * order keeps back-to-back buckets from sharing the wire buffer at once.
 * Only enqueues; the caller waits (`stream` as in nccl_issued). */
static int nccl_allreduce_wire(struct comm_nccl *c, float *buf, size_t n, enum gpt_reduce_op op,
                               int stream)
{
    int rc = nccl_wire(c, n);
    if (rc < 0)
        return rc;
    if (gpt_cuda_f32_to_bf16(c->stream, c->wire, buf, n) < 0)
        return nccl_fail(c, -GPT_E_CUDA, "allreduce", "bf16 conversion launch failed");
    rc = nccl_issued(
        c, ncclAllReduce(c->wire, c->wire, n, ncclBfloat16, nccl_op(op), c->nc, c->stream),
        "allreduce", 0);
    if (rc < 0)
        return rc;
    if (gpt_cuda_bf16_to_f32(c->stream, buf, c->wire, n) < 0)
        return nccl_fail(c, -GPT_E_CUDA, "allreduce", "bf16 conversion launch failed");
    return stream ? nccl_wait(c, 1, monotime_ms() + c->timeout_ms, "allreduce") : 0;
}

/* Host floats as the bf16 wire carries them (a host buffer's bf16
 * all-reduce rounds in and out around the fp32 one, as comm.c does for
 * the CPU transports). */
static void nccl_round_host(float *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = gpt_bf16_to_float(gpt_bf16_from_float_rne(buf[i]));
}

/* The all-reduce of every entry point; `after` as in nccl_begin_after. */
static int nccl_allreduce_ev(struct comm_nccl *c, float *buf, size_t n, enum gpt_reduce_op op,
                             cudaEvent_t after, enum gpt_comm_dtype dtype)
{
    int rc = nccl_begin_after(c, "allreduce", after);
    if (rc < 0 || n == 0)
        return rc;
    int bf16 = dtype == GPT_COMM_BF16 && c->base.world > 1;
    if (bf16 && nccl_is_device(buf)) {
        rc = nccl_allreduce_wire(c, buf, n, op, 1);
        nccl_wrote(c, buf, n * sizeof(float));
        return rc;
    }
    if (bf16)
        nccl_round_host(buf, n);
    void *dev;
    if ((rc = nccl_stage_in(c, buf, n * sizeof(float), 0, &dev)) < 0)
        return rc;
    rc = nccl_finish(c, ncclAllReduce(dev, dev, n, ncclFloat, nccl_op(op), c->nc, c->stream),
                     "allreduce");
    if (rc == 0)
        rc = nccl_stage_out(c, buf, dev, 0, n * sizeof(float));
    if (rc == 0 && bf16)
        nccl_round_host(buf, n);
    nccl_wrote(c, buf, n * sizeof(float));
    return rc;
}

static int nccl_allreduce(struct gpt_comm *gc, float *buf, size_t n, enum gpt_reduce_op op)
{
    return nccl_allreduce_ev((struct comm_nccl *)gc, buf, n, op, NULL, GPT_COMM_FP32);
}

static int nccl_allreduce_bf16(struct gpt_comm *gc, float *buf, size_t n, enum gpt_reduce_op op)
{
    return nccl_allreduce_ev((struct comm_nccl *)gc, buf, n, op, NULL, GPT_COMM_BF16);
}

/* Worker thread (the one enqueueing the backward): marks the compute
 * stream's current end for the bucket that will use `slot`. Without a
 * bound compute stream there is nothing to mark (collectives then
 * synchronise the device). */
static int nccl_mark_ready(struct gpt_comm *gc, unsigned slot)
{
    struct comm_nccl *c = (struct comm_nccl *)gc;
    /* Not c->dead: the comm thread writes it meanwhile; on a dead
     * communicator the bucket's collective fails by itself. */
    if (!c->compute)
        return 0;
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess)
        e = cudaEventRecord(c->marks[slot], c->compute);
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    return -GPT_E_CUDA; /* the collective of this slot then fails on its own */
}

/* A bucket's all-reduce after its ready mark. In place on device memory
 * it is only enqueued (nccl_wait_after waits for all of them at once), so
 * the buckets run back to back on the comm stream; a host buffer is
 * staged and waited for here, as by allreduce. */
static int nccl_allreduce_after(struct gpt_comm *gc, float *buf, size_t n, enum gpt_reduce_op op,
                                unsigned slot, enum gpt_comm_dtype dtype)
{
    struct comm_nccl *c = (struct comm_nccl *)gc;
    if (!c->compute || n == 0 || !nccl_is_device(buf))
        return nccl_allreduce_ev(c, buf, n, op, c->compute ? c->marks[slot] : NULL, dtype);
    int rc = nccl_begin_after(c, "allreduce", c->marks[slot]);
    if (rc < 0)
        return rc;
    if (dtype == GPT_COMM_BF16 && c->base.world > 1)
        rc = nccl_allreduce_wire(c, buf, n, op, 0);
    else
        rc = nccl_issued(c, ncclAllReduce(buf, buf, n, ncclFloat, nccl_op(op), c->nc, c->stream),
                         "allreduce", 0);
    nccl_wrote(c, buf, n * sizeof(float));
    c->pending = 1;
    return rc;
}

/* Waits once for every all-reduce nccl_allreduce_after enqueued: the
 * stream idle, the communicator without an async error, within the
 * timeout (as one collective's). */
static int nccl_wait_after(struct gpt_comm *gc)
{
    struct comm_nccl *c = (struct comm_nccl *)gc;
    if (!c->pending || c->dead)
        return c->dead;
    c->pending = 0;
    int rc = nccl_cuda(c, cudaSetDevice(c->device), "cudaSetDevice");
    return rc < 0 ? rc : nccl_wait(c, 1, monotime_ms() + c->timeout_ms, "allreduce");
}

static int nccl_broadcast(struct gpt_comm *gc, void *buf, size_t bytes, int root)
{
    struct comm_nccl *c = (struct comm_nccl *)gc;
    int rc = nccl_begin(c, "broadcast");
    if (rc < 0 || bytes == 0)
        return rc;
    void *dev;
    if ((rc = nccl_stage_in(c, buf, bytes, 0, &dev)) < 0)
        return rc;
    rc = nccl_finish(c, ncclBroadcast(dev, dev, bytes, ncclUint8, root, c->nc, c->stream),
                     "broadcast");
    if (rc == 0)
        rc = nccl_stage_out(c, buf, dev, 0, bytes);
    nccl_wrote(c, buf, bytes);
    return rc;
}

/* Copies between the caller's layout (gpt_comm_slice) and the padded one,
 * in two copies (see the file comment). to_padded selects the direction. */
static int nccl_repack(struct comm_nccl *c, const struct gpt_cuda_pad_plan *p, float *flat,
                       float *padded, int to_padded)
{
    size_t base = p->n / (size_t)p->world, extra = p->n % (size_t)p->world;
    size_t head = extra * p->chunk; /* identical in both layouts */
    int rc = 0;
    if (head)
        rc = nccl_cuda(c,
                       cudaMemcpyAsync(to_padded ? padded : flat, to_padded ? flat : padded,
                                       head * sizeof(float), cudaMemcpyDeviceToDevice, c->stream),
                       "repack");
    if (rc == 0 && base > 0) {
        size_t rows = (size_t)p->world - extra;
        size_t fp = base * sizeof(float), pp = p->chunk * sizeof(float);
        float *pf = flat + head, *pd = padded + head;
        rc = nccl_cuda(
            c,
            to_padded
                ? cudaMemcpy2DAsync(pd, pp, pf, fp, fp, rows, cudaMemcpyDeviceToDevice, c->stream)
                : cudaMemcpy2DAsync(pf, fp, pd, pp, fp, rows, cudaMemcpyDeviceToDevice, c->stream),
            "repack 2d");
    }
    return rc;
}

static int nccl_reduce_scatter(struct gpt_comm *gc, float *buf, size_t n, enum gpt_reduce_op op)
{
    struct comm_nccl *c = (struct comm_nccl *)gc;
    int rc = nccl_begin(c, "reduce_scatter");
    if (rc < 0 || n == 0)
        return rc;
    struct gpt_cuda_pad_plan p;
    gpt_cuda_pad_plan_init(&p, n, c->base.world);
    size_t off, len, poff;
    gpt_cuda_pad_plan_slice(&p, c->base.rank, &off, &len, &poff);
    void *dev;
    if ((rc = nccl_stage_in(c, buf, n * sizeof(float), p.needs_pad ? p.padded * sizeof(float) : 0,
                            &dev)) < 0)
        return rc;
    float *work = (float *)dev;
    if (p.needs_pad) {
        work = nccl_padded_area(c, dev, n);
        /* The tails must add zeros. */
        if ((rc = nccl_cuda(c, cudaMemsetAsync(work, 0, p.padded * sizeof(float), c->stream),
                            "pad zero")) < 0 ||
            (rc = nccl_repack(c, &p, (float *)dev, work, 1)) < 0)
            return rc;
    }
    rc = nccl_finish(
        c, ncclReduceScatter(work, work + poff, p.chunk, ncclFloat, nccl_op(op), c->nc, c->stream),
        "reduce_scatter");
    if (rc == 0 && p.needs_pad && len > 0) {
        rc = nccl_cuda(c,
                       cudaMemcpyAsync((float *)dev + off, work + poff, len * sizeof(float),
                                       cudaMemcpyDeviceToDevice, c->stream),
                       "unpad");
        if (rc == 0)
            rc = nccl_wait(c, 1, monotime_ms() + c->timeout_ms, "unpad");
    }
    if (rc == 0)
        rc = nccl_stage_out(c, buf, dev, off * sizeof(float), len * sizeof(float));
    nccl_wrote(c, buf, n * sizeof(float));
    return rc;
}

static int nccl_allgather(struct gpt_comm *gc, float *buf, size_t n)
{
    struct comm_nccl *c = (struct comm_nccl *)gc;
    int rc = nccl_begin(c, "allgather");
    if (rc < 0 || n == 0)
        return rc;
    struct gpt_cuda_pad_plan p;
    gpt_cuda_pad_plan_init(&p, n, c->base.world);
    size_t off, len, poff;
    gpt_cuda_pad_plan_slice(&p, c->base.rank, &off, &len, &poff);
    void *dev;
    if ((rc = nccl_stage_in(c, buf, n * sizeof(float), p.needs_pad ? p.padded * sizeof(float) : 0,
                            &dev)) < 0)
        return rc;
    float *work = (float *)dev;
    if (p.needs_pad) {
        work = nccl_padded_area(c, dev, n);
        if (len > 0 &&
            (rc = nccl_cuda(c,
                            cudaMemcpyAsync(work + poff, (float *)dev + off, len * sizeof(float),
                                            cudaMemcpyDeviceToDevice, c->stream),
                            "pad")) < 0)
            return rc;
    }
    rc = nccl_finish(c, ncclAllGather(work + poff, work, p.chunk, ncclFloat, c->nc, c->stream),
                     "allgather");
    if (rc == 0 && p.needs_pad) {
        rc = nccl_repack(c, &p, (float *)dev, work, 0);
        if (rc == 0)
            rc = nccl_wait(c, 1, monotime_ms() + c->timeout_ms, "unpad");
    }
    if (rc == 0)
        rc = nccl_stage_out(c, buf, dev, 0, n * sizeof(float));
    nccl_wrote(c, buf, n * sizeof(float));
    return rc;
}

static int nccl_barrier(struct gpt_comm *gc)
{
    struct comm_nccl *c = (struct comm_nccl *)gc;
    int rc = nccl_begin(c, "barrier");
    if (rc < 0 || (rc = nccl_stage(c, 256)) < 0)
        return rc;
    return nccl_finish(
        c, ncclAllReduce(c->stage, c->stage, 1, ncclFloat, ncclSum, c->nc, c->stream), "barrier");
}

static void nccl_abort(struct gpt_comm *gc)
{
    atomic_store(&((struct comm_nccl *)gc)->abort_req, true);
}

/* Tears the communicator down. A healthy one is finalized: with a
 * non-blocking communicator ncclCommFinalize returns ncclInProgress while
 * it flushes, so both that and ncclSuccess are waited on (nccl_wait polls
 * the async error until it leaves ncclInProgress), then destroyed. Any
 * error, an abort request or a timeout aborts instead. This file never
 * opens an NCCL group (no ncclGroupStart), so no path leaves the thread
 * inside one. */
static void nccl_free(struct gpt_comm *gc)
{
    struct comm_nccl *c = (struct comm_nccl *)gc;
    cudaSetDevice(c->device);
    if (c->nc && !c->aborted) {
        int ok = !c->dead && !atomic_load(&c->abort_req);
        if (ok) {
            ncclResult_t r = ncclCommFinalize(c->nc);
            ok = r == ncclSuccess || r == ncclInProgress;
            if (ok)
                ok = nccl_wait(c, 0, monotime_ms() + c->timeout_ms, "finalize") == 0;
        }
        if (ok && !c->aborted) {
            ncclResult_t r = ncclCommDestroy(c->nc);
            if (r != ncclSuccess && r != ncclInProgress)
                nccl_abort_now(c);
        } else {
            nccl_abort_now(c); /* no-op when nccl_wait already aborted */
        }
    }
    nccl_abort_join(c);
    pthread_cond_destroy(&c->ab.cv);
    pthread_mutex_destroy(&c->ab.mu);
    if (c->stage)
        cudaFree(c->stage);
    if (c->wire)
        cudaFree(c->wire);
    if (c->ready)
        cudaEventDestroy(c->ready);
    for (unsigned i = 0; i < GPT_COMM_READY_SLOTS; i++)
        if (c->marks[i])
            cudaEventDestroy(c->marks[i]);
    if (c->own_stream)
        cudaStreamDestroy(c->own_stream);
    (void)cudaGetLastError();
    free(c);
}

static const struct gpt_comm_ops nccl_ops = {
    .name = "nccl",
    .allreduce = nccl_allreduce,
    .broadcast = nccl_broadcast,
    .reduce_scatter = nccl_reduce_scatter,
    .allgather = nccl_allgather,
    .barrier = nccl_barrier,
    .abort = nccl_abort,
    .free = nccl_free,
    .mark_ready = nccl_mark_ready,
    .allreduce_after = nccl_allreduce_after,
    .wait_after = nccl_wait_after,
    .allreduce_bf16 = nccl_allreduce_bf16,
};

/* The unique id through the kv store: rank 0 creates and publishes it. */
static int nccl_exchange_id(const struct gpt_comm_opts *o, const struct gpt_kv *kv,
                            ncclUniqueId *id, struct gpt_err *err)
{
    char key[NCCL_KEY_MAX];
    int klen = snprintf(key, sizeof(key), "%snccl_id", o->prefix ? o->prefix : "");
    if (klen < 0 || (size_t)klen >= sizeof(key))
        return gpt_err_set(err, -EINVAL, NULL, "nccl: key prefix too long");
    if (o->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(id);
        if (r != ncclSuccess)
            return gpt_err_set(err, -GPT_E_NCCL, NULL, "nccl: ncclGetUniqueId: %s",
                               ncclGetErrorString(r));
        int rc = kv->set(kv->ctx, key, id, sizeof(*id));
        if (rc < 0)
            return gpt_err_set(err, rc, NULL, "nccl: cannot publish %s: %s", key, gpt_strerror(rc));
        return 0;
    }
    size_t len = 0;
    int64_t deadline =
        monotime_ms() + (o->timeout_ms > 0 ? o->timeout_ms : NCCL_DEFAULT_TIMEOUT_MS);
    int rc;
    /* In slices, so that o->cancelled (an abort, or another rank's refusal
     * under gpt_comm_fallback_new) ends the wait for an id that may never
     * come. */
    do {
        if (o->cancelled && o->cancelled(o->cancel_ctx))
            return gpt_err_set(err, -ECANCELED, NULL, "nccl: cancelled waiting for %s", key);
        int64_t left = deadline - monotime_ms();
        if (left <= 0) {
            rc = -ETIMEDOUT;
            break;
        }
        rc = kv->get(kv->ctx, key, id, sizeof(*id), &len,
                     left > COMM_CANCEL_POLL_MS ? COMM_CANCEL_POLL_MS : (int)left);
    } while (rc == -ETIMEDOUT);
    if (rc < 0)
        return gpt_err_set(err, rc, NULL, "nccl: cannot read %s: %s", key, gpt_strerror(rc));
    if (len != sizeof(*id))
        return gpt_err_set(err, -GPT_E_PROTO, NULL, "nccl: %s has %zu bytes, want %zu", key, len,
                           sizeof(*id));
    return 0;
}

int gpt_comm_nccl_new(const struct gpt_comm_opts *o, const struct gpt_kv *kv, int device,
                      struct gpt_comm **ret, struct gpt_err *err)
{
    GPT_ASSERT(o && kv && ret);
    if (o->world < 1 || o->rank < 0 || o->rank >= o->world)
        return gpt_err_set(err, -EINVAL, NULL, "nccl: rank %d of world %d", o->rank, o->world);
    char probe[512];
    int count = gpt_cuda_probe(probe, sizeof(probe));
    if (count < 0)
        return gpt_err_set(err, -GPT_E_CUDA, NULL, "nccl: %s", probe);
    if (count == 0)
        return gpt_err_set(err, -GPT_E_NODEVICE, NULL, "nccl: no GPU or no driver");
    if (device < 0 || device >= count)
        return gpt_err_set(err, -EINVAL, NULL, "nccl: device %d out of range (0..%d)", device,
                           count - 1);
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gpt_err_set(err, -GPT_E_CUDA, NULL, "nccl: cudaSetDevice(%d): %s", device,
                           cudaGetErrorString(e));
    }
    ncclUniqueId id;
    int rc = nccl_exchange_id(o, kv, &id, err);
    if (rc < 0)
        return rc;

    struct comm_nccl *c = calloc(1, sizeof(*c));
    if (!c)
        return gpt_err_set(err, -ENOMEM, NULL, "nccl: out of memory");
    c->base.ops = &nccl_ops;
    c->base.rank = o->rank;
    c->base.world = o->world;
    c->device = device;
    c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : NCCL_DEFAULT_TIMEOUT_MS;
    atomic_init(&c->abort_req, false);
    pthread_mutex_init(&c->ab.mu, NULL);
    pthread_cond_init(&c->ab.cv, NULL);
    c->cancelled = o->cancelled; /* until init is done; then gpt_comm_abort */
    c->cancel_ctx = o->cancel_ctx;
    if ((e = cudaStreamCreateWithFlags(&c->own_stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming)) != cudaSuccess) {
        (void)cudaGetLastError();
        rc = gpt_err_set(err, -GPT_E_CUDA, NULL, "nccl: stream/event: %s", cudaGetErrorString(e));
        goto fail;
    }
    for (unsigned i = 0; i < GPT_COMM_READY_SLOTS; i++)
        if ((e = cudaEventCreateWithFlags(&c->marks[i], cudaEventDisableTiming)) != cudaSuccess) {
            (void)cudaGetLastError();
            rc = gpt_err_set(err, -GPT_E_CUDA, NULL, "nccl: events: %s", cudaGetErrorString(e));
            goto fail;
        }
    c->stream = c->own_stream;

    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&c->nc, o->world, id, o->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        rc = gpt_err_set(err, nccl_result_code(r), NULL, "nccl: ncclCommInitRankConfig: %s",
                         ncclGetErrorString(r));
        if (c->nc)
            nccl_abort_now(c);
        goto fail;
    }
    /* Every rank must join; a missing one shows up as the timeout. */
    rc = nccl_wait(c, 0, monotime_ms() + c->timeout_ms, "init");
    if (rc < 0) {
        gpt_err_set(err, rc, NULL, "nccl: world %d did not form: %s", o->world, c->msg);
        goto fail;
    }
    c->cancelled = NULL;
    c->cancel_ctx = NULL;
    *ret = &c->base;
    return 0;
fail:
    nccl_abort_join(c);
    pthread_cond_destroy(&c->ab.cv);
    pthread_mutex_destroy(&c->ab.mu);
    if (c->ready)
        cudaEventDestroy(c->ready);
    for (unsigned i = 0; i < GPT_COMM_READY_SLOTS; i++)
        if (c->marks[i])
            cudaEventDestroy(c->marks[i]);
    if (c->own_stream)
        cudaStreamDestroy(c->own_stream);
    free(c);
    return rc;
}

int gpt_comm_nccl_bind_backend(struct gpt_comm *gc, struct gpt_backend *be)
{
    GPT_ASSERT(gc && gc->ops == &nccl_ops);
    struct comm_nccl *c = (struct comm_nccl *)gc;
    if (!gpt_backend_is_cuda(be) || gpt_cuda_backend_device(be) != c->device)
        return -EINVAL;
    c->compute = (cudaStream_t)gpt_cuda_backend_compute_stream(be);
    c->be = be;
    c->stream = (cudaStream_t)gpt_cuda_backend_comm_stream(be);
    return 0;
}

int gpt_comm_nccl_version(void)
{
    int v = 0;
    return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

const char *gpt_comm_nccl_last_error(const struct gpt_comm *gc)
{
    GPT_ASSERT(gc && gc->ops == &nccl_ops);
    return ((const struct comm_nccl *)gc)->msg;
}
