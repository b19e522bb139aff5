/*
 * shard: ZeRO-1 and FSDP-style sharded state (see shard.h).
 *
 * A rank's shard is a list of pieces of the flat parameter layout. ZeRO-1
 * has one piece, the rank's gpt_comm_slice of the whole buffer; full
 * sharding has one piece per parameter unit, the rank's slice of that unit,
 * so that a unit is gathered with one all-gather of its span.
 *
 * Full sharding keeps, besides the shard, the embeddings unit gathered for
 * the whole step (the tied LM head uses it at both ends of forward and
 * backward) and one or two unit-sized buffers (a unit is a third of a
 * block: model.h's GPT_BLOCK_UNITS) with as many unit-sized gradient
 * buffers (gpt_shard_buffer_count). With two, the next unit is prefetched
 * while the current one computes and the reduce-scatter of one unit's
 * gradients overlaps the backward of the next; with one, every gather and
 * reduction waits, and the rank holds one unit less of each. Gathered
 * units stay valid until the optimizer step changes the parameters, so
 * a unit used at the end of forward is not gathered again at the start of
 * backward.
 *
 * Threads: the worker thread calls everything here; in full mode a
 * communication thread owned by the shard runs every collective in the
 * order the worker queued it (all ranks queue the same sequence), so the
 * communicator is never used by two threads at once. The backend is the
 * worker's alone (its per-op state is not thread-safe): the worker copies
 * a unit's slice into the gather buffer before it queues the all-gather
 * (a device communicator orders its stream after the compute stream), and
 * adds a reduce-scatter's slice into the shard gradients once it has seen
 * the reduce done (shard_settle, in queue order, so the same bits).
 */
#define _GNU_SOURCE /* mkostemp, getrandom */
#include "shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"

struct shard_piece {
    size_t flat_off; /* start in the flat layout */
    size_t len;
    size_t pos;                             /* start in the shard buffers */
    size_t unit_off, unit_count, slice_off; /* full mode: the unit and our slice of it */
};

enum shard_op_kind { SHARD_OP_GATHER, SHARD_OP_REDUCE };

struct shard_op {
    enum shard_op_kind kind;
    int unit;
    float *buf;
    uint64_t seq;
};

#define SHARD_QUEUE 8

struct gpt_shard {
    int mode;
    struct gpt_comm *comm;
    struct gpt_backend *be;
    struct gpt_model *model;
    struct gpt_model_units units;

    size_t n_pieces;
    struct shard_piece pieces[GPT_MAX_UNITS];
    size_t shard_len;
    float *sp, *sg; /* full mode: shard params and grads (shard_len) */
    float *sm, *sv; /* moments (shard_len) */

    /* full mode buffers */
    size_t max_unit; /* floats in the largest non-embedding unit */
    int n_bufs;      /* gathered unit buffers: 1 or 2 (gpt_shard_buffer_count) */
    int want_bufs;   /* distributed.shard_buffers: 1, 2, or 0 to choose */
    float *emb_p, *emb_g;
    bool emb_valid;
    float *blk_p[2];
    int blk_unit[2];     /* unit held (or being gathered), -1 = none */
    uint64_t blk_seq[2]; /* op that fills it */
    int blk_cur;         /* buffer of the unit in use (the other one's, 1 - blk_cur, for
                          * the prefetch; 0 alone with one buffer) */
    float *blk_g[2];
    uint64_t blk_g_seq[2]; /* reduce that reads it */
    int g_next;
    int g_unit_buf[GPT_MAX_UNITS]; /* grad buffer handed out per unit */

    /* communication thread (full mode) */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct shard_op queue[SHARD_QUEUE];
    size_t q_head, q_tail;
    uint64_t issued, done;
    int error;
    bool quit;
    /* Reduces whose slices the worker has still to add into sg, in queue
     * order (the worker's own, no lock). */
    struct shard_op acc[SHARD_QUEUE];
    size_t acc_head, acc_tail;

    int test_load_fail; /* gpt_shard_test_fail_load: the next load fails with it */

    /* sharded snapshots: whether every rank sees the same folder */
    bool shared, shared_known;
};

static size_t shard_min(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* ---- communication thread ---- */

/* Communication thread: the collective only, never the backend. */
static int shard_run_op(struct gpt_shard *sh, const struct shard_op *op)
{
    const struct shard_piece *p = &sh->pieces[op->unit];
    if (op->kind == SHARD_OP_GATHER)
        return gpt_comm_allgather(sh->comm, op->buf, p->unit_count);
    return gpt_comm_reduce_scatter(sh->comm, op->buf, p->unit_count, GPT_REDUCE_AVG);
}

static void *shard_thread_main(void *arg)
{
    struct gpt_shard *sh = arg;
    pthread_mutex_lock(&sh->mu);
    for (;;) {
        while (!sh->quit && sh->q_head == sh->q_tail)
            pthread_cond_wait(&sh->cv, &sh->mu);
        if (sh->quit)
            break;
        struct shard_op op = sh->queue[sh->q_head % SHARD_QUEUE];
        pthread_mutex_unlock(&sh->mu);
        int rc = sh->error ? sh->error : shard_run_op(sh, &op);
        pthread_mutex_lock(&sh->mu);
        if (rc < 0 && !sh->error)
            sh->error = rc;
        sh->q_head++;
        sh->done = op.seq;
        pthread_cond_broadcast(&sh->cv);
    }
    pthread_mutex_unlock(&sh->mu);
    return NULL;
}

/* Worker: adds the slices of the reduces done by now (`done`, read under
 * the lock) into the shard gradients, oldest first; after a failure they
 * are dropped (the step fails anyway). */
static void shard_settle(struct gpt_shard *sh, uint64_t done, int error)
{
    for (; sh->acc_head != sh->acc_tail; sh->acc_head++) {
        const struct shard_op *op = &sh->acc[sh->acc_head % SHARD_QUEUE];
        if (!error && op->seq > done)
            break;
        if (error)
            continue;
        const struct shard_piece *p = &sh->pieces[op->unit];
        gpt_backend_residual_forward(sh->be, sh->sg + p->pos, sh->sg + p->pos,
                                     op->buf + p->slice_off, p->len);
    }
}

/* Worker: queues a collective. A gather's own slice goes into the buffer
 * first (on the worker's backend); a reduce is remembered for
 * shard_settle. */
static uint64_t shard_enqueue(struct gpt_shard *sh, enum shard_op_kind kind, int unit, float *buf)
{
    if (kind == SHARD_OP_GATHER) {
        const struct shard_piece *p = &sh->pieces[unit];
        gpt_backend_copy(sh->be, buf + p->slice_off, sh->sp + p->pos, p->len * sizeof(float));
    }
    pthread_mutex_lock(&sh->mu);
    /* Every reduce not yet added must fit in acc: wait for the oldest. */
    while (kind == SHARD_OP_REDUCE && sh->acc_tail - sh->acc_head >= SHARD_QUEUE) {
        while (sh->done < sh->acc[sh->acc_head % SHARD_QUEUE].seq && !sh->error)
            pthread_cond_wait(&sh->cv, &sh->mu);
        shard_settle(sh, sh->done, sh->error);
    }
    while (sh->q_tail - sh->q_head >= SHARD_QUEUE)
        pthread_cond_wait(&sh->cv, &sh->mu);
    uint64_t seq = ++sh->issued;
    sh->queue[sh->q_tail % SHARD_QUEUE] = (struct shard_op){kind, unit, buf, seq};
    sh->q_tail++;
    if (kind == SHARD_OP_REDUCE)
        sh->acc[sh->acc_tail++ % SHARD_QUEUE] = (struct shard_op){kind, unit, buf, seq};
    pthread_cond_broadcast(&sh->cv);
    pthread_mutex_unlock(&sh->mu);
    return seq;
}

/* Worker: waits until op `seq` is done and settles the reduces done by
 * then; returns the sticky error. */
static int shard_wait(struct gpt_shard *sh, uint64_t seq)
{
    pthread_mutex_lock(&sh->mu);
    while (sh->done < seq && !sh->error)
        pthread_cond_wait(&sh->cv, &sh->mu);
    int rc = sh->error;
    uint64_t done = sh->done;
    pthread_mutex_unlock(&sh->mu);
    shard_settle(sh, done, rc);
    return rc;
}

/* ---- the model's unit hooks (full mode) ---- */

/* The unit used after `unit` in this pass, to prefetch; -1 = none. */
static int shard_next_unit(const struct gpt_shard *sh, int unit, int pass)
{
    int last = (int)sh->n_pieces - 1; /* the final LayerNorm */
    if (unit == 0)
        return -1;
    if (pass == 0)
        return unit < last ? unit + 1 : -1;
    return unit > 1 ? unit - 1 : -1;
}

/* The buffer to gather a unit into: the one not in use, or with one
 * buffer, that one once the backend has finished reading the unit it
 * held (the model released it, but its products may still be queued). */
static int shard_free_buf(struct gpt_shard *sh)
{
    if (sh->n_bufs == 2)
        return 1 - sh->blk_cur;
    sh->blk_unit[0] = -1;
    return gpt_backend_sync(sh->be) < 0 ? -1 : 0;
}

/* Starts gathering `unit` into the block buffer that is not in use (two
 * buffers only: with one, fetch gathers each unit when asked). */
static void shard_prefetch(struct gpt_shard *sh, int unit)
{
    int i = 1 - sh->blk_cur;
    if (sh->n_bufs < 2 || unit < 0 || sh->blk_unit[0] == unit || sh->blk_unit[1] == unit)
        return;
    sh->blk_unit[i] = unit;
    sh->blk_seq[i] = shard_enqueue(sh, SHARD_OP_GATHER, unit, sh->blk_p[i]);
}

static const float *shard_fetch(void *ctx, int unit, int pass)
{
    struct gpt_shard *sh = ctx;
    if (unit == 0) {
        if (!sh->emb_valid) {
            if (shard_wait(sh, shard_enqueue(sh, SHARD_OP_GATHER, 0, sh->emb_p)) < 0)
                return NULL;
            sh->emb_valid = true;
        }
        return sh->emb_p;
    }
    int i = sh->blk_unit[0] == unit ? 0 : sh->blk_unit[1] == unit ? 1 : -1;
    if (i < 0) {
        if ((i = shard_free_buf(sh)) < 0)
            return NULL;
        sh->blk_unit[i] = unit;
        sh->blk_seq[i] = shard_enqueue(sh, SHARD_OP_GATHER, unit, sh->blk_p[i]);
    }
    if (shard_wait(sh, sh->blk_seq[i]) < 0)
        return NULL;
    sh->blk_cur = i;
    shard_prefetch(sh, shard_next_unit(sh, unit, pass));
    return sh->blk_p[i];
}

static float *shard_grads(void *ctx, int unit)
{
    struct gpt_shard *sh = ctx;
    size_t off, count;
    gpt_model_unit_span(sh->model, unit, &off, &count);
    float *g;
    if (unit == 0) {
        g = sh->emb_g;
    } else {
        int j = sh->g_next;
        sh->g_next = sh->n_bufs == 2 ? 1 - j : 0;
        /* The buffer's previous reduce must have read it before reuse. */
        if (shard_wait(sh, sh->blk_g_seq[j]) < 0)
            return NULL;
        sh->g_unit_buf[unit] = j;
        g = sh->blk_g[j];
    }
    gpt_backend_memzero(sh->be, g, count * sizeof(float));
    return g;
}

static int shard_release(void *ctx, int unit, int pass)
{
    struct gpt_shard *sh = ctx;
    if (pass == 0)
        return 0;
    /* Backward finished this unit: reduce-scatter its gradients into the
     * shard while backward goes on with the next one. */
    if (gpt_backend_sync(sh->be) < 0)
        return -EIO;
    if (unit == 0) {
        (void)shard_enqueue(sh, SHARD_OP_REDUCE, 0, sh->emb_g);
        return 0;
    }
    int j = sh->g_unit_buf[unit];
    sh->blk_g_seq[j] = shard_enqueue(sh, SHARD_OP_REDUCE, unit, sh->blk_g[j]);
    return 0;
}

/* ---- set-up ---- */

int gpt_shard_buffer_count(size_t max_unit, size_t shard_len)
{
    /* The second pair costs 2 x max_unit floats; the persistent state is
     * params, grads and both moments of the shard. */
    return (double)max_unit * 2 * 32 <= (double)shard_len * 4 ? 2 : 1;
}

int gpt_shard_new(int mode, int buffers, struct gpt_comm *comm, struct gpt_backend *be,
                  struct gpt_shard **ret, struct gpt_err *err)
{
    GPT_ASSERT(mode == GPT_SHARD_OPTIMIZER || mode == GPT_SHARD_FULL);
    GPT_ASSERT(buffers >= 0 && buffers <= 2);
    struct gpt_shard *sh = calloc(1, sizeof(*sh));
    if (!sh)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory for the shard state");
    sh->mode = mode;
    sh->want_bufs = buffers;
    sh->comm = comm;
    sh->be = be;
    sh->units = (struct gpt_model_units){
        .ctx = sh, .fetch = shard_fetch, .grads = shard_grads, .release = shard_release};
    sh->blk_unit[0] = sh->blk_unit[1] = -1;
    pthread_mutex_init(&sh->mu, NULL);
    pthread_cond_init(&sh->cv, NULL);
    *ret = sh;
    return 0;
}

const struct gpt_model_units *gpt_shard_units(struct gpt_shard *sh)
{
    return &sh->units;
}

static int shard_alloc(struct gpt_shard *sh, size_t n, float **ret)
{
    return gpt_backend_alloc(sh->be, (n ? n : 1) * sizeof(float), (void **)ret);
}

int gpt_shard_attach(struct gpt_shard *sh, struct gpt_model *m, struct gpt_err *err)
{
    int world = sh->comm->world, rank = sh->comm->rank, rc = 0;
    sh->model = m;
    if (sh->mode == GPT_SHARD_OPTIMIZER) {
        size_t off, len;
        gpt_comm_slice(m->n_params, world, rank, &off, &len);
        sh->pieces[0] = (struct shard_piece){.flat_off = off, .len = len, .pos = 0};
        sh->n_pieces = 1;
        sh->shard_len = len;
    } else {
        int U = gpt_model_num_units(m);
        for (int u = 0; u < U; u++) {
            struct shard_piece *p = &sh->pieces[u];
            gpt_model_unit_span(m, u, &p->unit_off, &p->unit_count);
            gpt_comm_slice(p->unit_count, world, rank, &p->slice_off, &p->len);
            p->flat_off = p->unit_off + p->slice_off;
            p->pos = sh->shard_len;
            sh->shard_len += p->len;
            if (u > 0 && p->unit_count > sh->max_unit)
                sh->max_unit = p->unit_count;
        }
        sh->n_pieces = (size_t)U;
        size_t emb = sh->pieces[0].unit_count;
        if ((rc = shard_alloc(sh, sh->shard_len, &sh->sp)) < 0 ||
            (rc = shard_alloc(sh, sh->shard_len, &sh->sg)) < 0 ||
            (rc = shard_alloc(sh, emb, &sh->emb_p)) < 0 ||
            (rc = shard_alloc(sh, emb, &sh->emb_g)) < 0)
            goto fail;
        /* From what every rank knows alike (not this rank's shard_len),
         * so that all ranks choose the same count. */
        sh->n_bufs = sh->want_bufs > 0
                         ? sh->want_bufs
                         : gpt_shard_buffer_count(sh->max_unit, (m->n_params + (size_t)world - 1) /
                                                                    (size_t)world);
        for (int i = 0; i < sh->n_bufs; i++)
            if ((rc = shard_alloc(sh, sh->max_unit, &sh->blk_p[i])) < 0 ||
                (rc = shard_alloc(sh, sh->max_unit, &sh->blk_g[i])) < 0)
                goto fail;
        if (pthread_create(&sh->thread, NULL, shard_thread_main, sh) != 0) {
            rc = -EAGAIN;
            goto fail;
        }
        sh->thread_started = true;
    }
    if ((rc = shard_alloc(sh, sh->shard_len, &sh->sm)) < 0 ||
        (rc = shard_alloc(sh, sh->shard_len, &sh->sv)) < 0)
        goto fail;
    return 0;
fail:
    return gpt_err_set(err, rc, NULL, "cannot allocate the sharded training state (%zu floats)",
                       sh->shard_len);
}

void gpt_shard_free(struct gpt_shard *sh)
{
    if (!sh)
        return;
    if (sh->thread_started) {
        pthread_mutex_lock(&sh->mu);
        sh->quit = true;
        pthread_cond_broadcast(&sh->cv);
        pthread_mutex_unlock(&sh->mu);
        pthread_join(sh->thread, NULL);
    }
    float *bufs[] = {sh->sp,    sh->sg,       sh->sm,       sh->sv,       sh->emb_p,
                     sh->emb_g, sh->blk_p[0], sh->blk_p[1], sh->blk_g[0], sh->blk_g[1]};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        gpt_backend_mem_free(sh->be, bufs[i]);
    pthread_mutex_destroy(&sh->mu);
    pthread_cond_destroy(&sh->cv);
    free(sh);
}

/* ---- state transfer ---- */

/* Puts this rank's pieces of `src` (a shard buffer) into the full buffer
 * `dst`, then all-gathers each piece's span. */
static int shard_gather_one(struct gpt_shard *sh, float *dst, const float *src)
{
    int rc;
    for (size_t i = 0; i < sh->n_pieces; i++) {
        const struct shard_piece *p = &sh->pieces[i];
        gpt_backend_copy(sh->be, dst + p->flat_off, src + p->pos, p->len * sizeof(float));
    }
    if ((rc = gpt_backend_sync(sh->be)) < 0)
        return rc;
    if (sh->mode == GPT_SHARD_OPTIMIZER)
        return gpt_comm_allgather(sh->comm, dst, sh->model->n_params);
    for (size_t i = 0; i < sh->n_pieces; i++) {
        const struct shard_piece *p = &sh->pieces[i];
        if ((rc = gpt_comm_allgather(sh->comm, dst + p->unit_off, p->unit_count)) < 0)
            return rc;
    }
    return 0;
}

int gpt_shard_gather_full(struct gpt_shard *sh, float *params, float *m, float *v)
{
    int rc = 0;
    if (sh->mode == GPT_SHARD_FULL && (rc = shard_gather_one(sh, params, sh->sp)) < 0)
        return rc;
    if (sh->mode == GPT_SHARD_OPTIMIZER && params != sh->model->params)
        gpt_backend_copy(sh->be, params, sh->model->params, sh->model->n_params * sizeof(float));
    if (m && (rc = shard_gather_one(sh, m, sh->sm)) < 0)
        return rc;
    if (v && (rc = shard_gather_one(sh, v, sh->sv)) < 0)
        return rc;
    return 0;
}

/* ---- the step ---- */

void gpt_shard_zero_grad(struct gpt_shard *sh)
{
    if (sh->mode == GPT_SHARD_OPTIMIZER)
        gpt_model_zero_grad(sh->model);
    else
        gpt_backend_memzero(sh->be, sh->sg, (sh->shard_len ? sh->shard_len : 1) * sizeof(float));
}

int gpt_shard_sync(struct gpt_shard *sh)
{
    if (!sh->thread_started)
        return 0;
    pthread_mutex_lock(&sh->mu);
    uint64_t last = sh->issued;
    pthread_mutex_unlock(&sh->mu);
    return shard_wait(sh, last);
}

int gpt_shard_reduce_grads(struct gpt_shard *sh)
{
    if (sh->mode == GPT_SHARD_OPTIMIZER)
        return gpt_comm_reduce_scatter(sh->comm, sh->model->grads, sh->model->n_params,
                                       GPT_REDUCE_AVG);
    return gpt_shard_sync(sh);
}

/* This rank's gradient slice of piece p. */
static float *shard_piece_grads(const struct gpt_shard *sh, const struct shard_piece *p)
{
    return sh->mode == GPT_SHARD_OPTIMIZER ? sh->model->grads + p->flat_off : sh->sg + p->pos;
}

static float *shard_piece_params(const struct gpt_shard *sh, const struct shard_piece *p)
{
    return sh->mode == GPT_SHARD_OPTIMIZER ? sh->model->params + p->flat_off : sh->sp + p->pos;
}

int gpt_shard_grad_norm(struct gpt_shard *sh, double *ret_norm)
{
    double local = 0;
    for (size_t i = 0; i < sh->n_pieces; i++)
        if (sh->pieces[i].len)
            local +=
                gpt_backend_sumsq(sh->be, shard_piece_grads(sh, &sh->pieces[i]), sh->pieces[i].len);
    /* The collectives carry floats: split the double into a high and a low
     * part so the sum keeps double precision. */
    float parts[2] = {(float)local, (float)(local - (double)(float)local)};
    int rc = gpt_comm_allreduce(sh->comm, parts, 2, GPT_REDUCE_SUM);
    if (rc < 0)
        return rc;
    *ret_norm = sqrt((double)parts[0] + (double)parts[1]);
    return 0;
}

int gpt_shard_update(struct gpt_shard *sh, const struct gpt_optim_spec *o, float lr, int64_t t,
                     float grad_scale)
{
    const struct gpt_model *m = sh->model;
    float bc1 = (float)(1.0 - pow(o->beta1, (double)t));
    float bc2 = (float)(1.0 - pow(o->beta2, (double)t));
    for (size_t i = 0; i < sh->n_pieces; i++) {
        const struct shard_piece *p = &sh->pieces[i];
        float *params = shard_piece_params(sh, p), *grads = shard_piece_grads(sh, p);
        size_t end = p->flat_off + p->len;
        /* Each tensor overlapping the piece gets its own decay rule. */
        for (size_t k = 0; k < m->n_tensors; k++) {
            const struct gpt_tensor_info *ti = &m->tensors[k];
            size_t a = ti->offset > p->flat_off ? ti->offset : p->flat_off;
            size_t b = shard_min(ti->offset + ti->count, end);
            if (a >= b)
                continue;
            size_t rel = a - p->flat_off;
            float wd = ti->ndim >= 2 ? (float)o->weight_decay : 0.0f;
            gpt_backend_adamw(sh->be, params + rel, grads + rel, sh->sm + p->pos + rel,
                              sh->sv + p->pos + rel, b - a, lr, (float)o->beta1, (float)o->beta2,
                              (float)o->eps, wd, grad_scale, bc1, bc2);
        }
    }
    /* Every gathered copy is stale now. */
    sh->emb_valid = false;
    sh->blk_unit[0] = sh->blk_unit[1] = -1;
    int rc = gpt_backend_sync(sh->be);
    if (rc < 0 || sh->mode != GPT_SHARD_OPTIMIZER)
        return rc;
    return gpt_comm_allgather(sh->comm, sh->model->params, sh->model->n_params);
}

void gpt_shard_mem(const struct gpt_shard *sh, struct gpt_shard_mem *ret)
{
    uint64_t f = sizeof(float), n = sh->model->n_params;
    if (sh->mode == GPT_SHARD_OPTIMIZER) {
        ret->params = n * f;
        ret->grads = n * f;
        ret->work = 0;
    } else {
        ret->params = sh->shard_len * f;
        ret->grads = sh->shard_len * f;
        /* The gathered embeddings and the unit buffers, for parameters
         * and for gradients. */
        ret->work = 2 * (sh->pieces[0].unit_count + (uint64_t)sh->n_bufs * sh->max_unit) * f;
    }
    ret->optim = 2 * sh->shard_len * f;
}

/* ---- sharded snapshots ---- */

/* Rank r's pieces of the flat layout (those of length 0 left out), in
 * the order of its shard buffers. Returns the count. */
static uint32_t shard_rank_pieces(const struct gpt_shard *sh, int r, struct gpt_snapshot_piece *out)
{
    int world = sh->comm->world;
    uint32_t n = 0;
    size_t off, len;
    if (sh->mode == GPT_SHARD_OPTIMIZER) {
        gpt_comm_slice(sh->model->n_params, world, r, &off, &len);
        if (len)
            out[n++] = (struct gpt_snapshot_piece){off, len};
        return n;
    }
    for (size_t i = 0; i < sh->n_pieces; i++) {
        const struct shard_piece *p = &sh->pieces[i];
        gpt_comm_slice(p->unit_count, world, r, &off, &len);
        if (len)
            out[n++] = (struct gpt_snapshot_piece){p->unit_off + off, len};
    }
    return n;
}

/* A random id for a snapshot's slices (rank 0). */
static uint64_t shard_random_id(void)
{
    uint64_t id = 0;
    if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        id = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 32;
    }
    return id;
}

int gpt_shard_snapshot_shared(struct gpt_shard *sh, const char *dir, bool *ret_shared)
{
    int world = sh->comm->world, rank = sh->comm->rank, rc;
    if (sh->shared_known) {
        *ret_shared = sh->shared;
        return 0;
    }
    /* Rank 0 leaves a probe file with a random content in its folder;
     * every rank looks for it in its own. Named like a snapshot
     * temporary, so gpt_snapshot_clean_tmp removes one left behind. */
    struct {
        char name[48];
        uint64_t nonce;
    } probe = {{0}, 0};
    char path[GPT_JOB_PATH_MAX + 64];
    if (rank == 0 && dir && dir[0] && gpt_mkdirs(dir, 0700) == 0) {
        probe.nonce = shard_random_id();
        snprintf(path, sizeof(path), "%s/.snap-000000000000.gpts.XXXXXX", dir);
        int fd = mkostemp(path, O_CLOEXEC);
        if (fd >= 0) {
            if (write(fd, &probe.nonce, sizeof(probe.nonce)) == (ssize_t)sizeof(probe.nonce))
                snprintf(probe.name, sizeof(probe.name), "%s", strrchr(path, '/') + 1);
            close(fd);
        }
    }
    if ((rc = gpt_comm_broadcast(sh->comm, &probe, sizeof(probe), 0)) < 0)
        goto out;
    float *seen = calloc((size_t)world, sizeof(float));
    if (!seen) {
        rc = -ENOMEM;
        goto out;
    }
    if (probe.name[0] && dir && dir[0]) {
        char mine[GPT_JOB_PATH_MAX + 64];
        uint64_t nonce = 0;
        snprintf(mine, sizeof(mine), "%s/%s", dir, probe.name);
        int fd = open(mine, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            if (read(fd, &nonce, sizeof(nonce)) == (ssize_t)sizeof(nonce) && nonce == probe.nonce)
                seen[rank] = 1.0f;
            close(fd);
        }
    }
    if ((rc = gpt_comm_allreduce(sh->comm, seen, (size_t)world, GPT_REDUCE_SUM)) == 0) {
        sh->shared = true;
        for (int r = 0; r < world; r++)
            sh->shared = sh->shared && seen[r] == 1.0f;
        sh->shared_known = true;
        *ret_shared = sh->shared;
    }
    free(seen);
out:
    if (rank == 0 && probe.name[0])
        unlink(path);
    return rc;
}

/* What each rank tells the others about its slice. */
struct shard_slice_report {
    int64_t status;
    uint64_t floats, bytes;
    uint32_t crc, pad;
};

/* Rank 0's commit of a sharded snapshot: the manifest, written last,
 * naming every rank's slice (its pieces, and the sizes and checksum its
 * report carried). Returns 0 or a negative errno with err set. */
static int shard_manifest_commit(struct gpt_shard *sh, const char *dir,
                                 const struct gpt_snapshot_meta *meta, uint64_t id,
                                 const struct shard_slice_report *reports, char *ret_path,
                                 size_t path_cap, uint64_t *ret_bytes, struct gpt_err *err)
{
    int world = sh->comm->world, rc;
    struct gpt_snapshot_slice *slices = calloc((size_t)world, sizeof(*slices));
    struct gpt_snapshot_piece *all = calloc((size_t)world * GPT_MAX_UNITS, sizeof(*all));
    if (!slices || !all) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory for the manifest");
        goto out;
    }
    for (int r = 0; r < world; r++) {
        struct gpt_snapshot_slice *sl = &slices[r];
        sl->rank = (uint32_t)r;
        sl->pieces = all + (size_t)r * GPT_MAX_UNITS;
        sl->n_pieces = shard_rank_pieces(sh, r, all + (size_t)r * GPT_MAX_UNITS);
        sl->floats = reports[r].floats;
        sl->bytes = reports[r].bytes;
        sl->crc = reports[r].crc;
    }
    rc = gpt_snapshot_manifest_write(dir, meta, id, slices, (uint32_t)world, ret_path, path_cap,
                                     ret_bytes, err);
out:
    free(slices);
    free(all);
    return rc;
}

int gpt_shard_snapshot_write(struct gpt_shard *sh, const char *dir,
                             const struct gpt_snapshot_meta *meta, char *ret_path, size_t path_cap,
                             uint64_t *ret_bytes, struct gpt_err *err)
{
    int world = sh->comm->world, rank = sh->comm->rank, rc;
    struct gpt_snapshot_piece mine[GPT_MAX_UNITS];
    struct shard_slice_report *reports = NULL;
    uint64_t id = 0;
    bool written = false;
    /* Every rank knows the snapshot failed (a slice failure all reports
     * carried, or rank 0's status): only then may a rank delete its slice.
     * After a failed collective the manifest may already name it: leave it
     * (gpt_snapshot_clean_slices removes slices no manifest names). */
    bool agreed = false;
    if ((rc = gpt_shard_sync(sh)) < 0 || (rc = gpt_backend_sync(sh->be)) < 0)
        return gpt_err_set(err, rc, NULL, "snapshot: the shard is not idle: %s", gpt_strerror(rc));
    if (rank == 0)
        id = shard_random_id();
    if ((rc = gpt_comm_broadcast(sh->comm, &id, sizeof(id), 0)) < 0)
        return gpt_err_set(err, rc, NULL, "snapshot: broadcast failed: %s", gpt_strerror(rc));

    /* 1. Every rank writes its own slice, straight from its shard buffers. */
    struct gpt_snapshot_slice s = {.rank = (uint32_t)rank, .pieces = mine};
    s.n_pieces = shard_rank_pieces(sh, rank, mine);
    const float *params = sh->mode == GPT_SHARD_OPTIMIZER
                              ? sh->model->params + (s.n_pieces ? mine[0].off : 0)
                              : sh->sp;
    struct gpt_err werr = {0};
    int wrc = gpt_snapshot_slice_write(dir, meta->step, id, (uint32_t)world, meta->owner.token,
                                       params, sh->sm, sh->sv, &s, &werr);
    written = wrc == 0;

    /* 2. Everyone learns every slice's outcome (rank 0 needs the sizes
     * and checksums for the manifest). */
    if (!(reports = calloc((size_t)world, sizeof(*reports)))) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        goto out; /* the others fail in the broadcasts below */
    }
    reports[rank] = (struct shard_slice_report){wrc, s.floats, s.bytes, s.crc, 0};
    for (int r = 0; r < world; r++)
        if ((rc = gpt_comm_broadcast(sh->comm, &reports[r], sizeof(reports[r]), r)) < 0) {
            gpt_err_set(err, rc, NULL, "snapshot: broadcast failed: %s", gpt_strerror(rc));
            goto out;
        }
    agreed = true; /* every rank has every report */
    if (wrc < 0) {
        rc = wrc;
        *err = werr;
        goto out;
    }
    for (int r = 0; r < world; r++)
        if (reports[r].status < 0) {
            rc = gpt_err_set(err, (int)reports[r].status, NULL,
                             "snapshot: rank %d could not write its slice: %s", r,
                             gpt_strerror((int)reports[r].status));
            goto out;
        }

    /* 3. Rank 0 commits the snapshot with the manifest, written last. */
    int64_t status = 0;
    if (rank == 0)
        status =
            shard_manifest_commit(sh, dir, meta, id, reports, ret_path, path_cap, ret_bytes, err);
    agreed = false; /* until rank 0's status arrives */
    if ((rc = gpt_comm_broadcast(sh->comm, &status, sizeof(status), 0)) < 0) {
        gpt_err_set(err, rc, NULL, "snapshot: broadcast failed: %s", gpt_strerror(rc));
        goto out;
    }
    agreed = true;
    rc = (int)status;
    if (rc < 0 && rank != 0)
        gpt_err_set(err, rc, NULL, "snapshot: rank 0 could not write the manifest: %s",
                    gpt_strerror(rc));
out:
    if (rc < 0 && written && agreed) { /* no manifest names it */
        char sp[GPT_JOB_PATH_MAX + 96];
        if (gpt_snapshot_slice_path(dir, meta->step, id, (uint32_t)rank, sp, sizeof(sp)) == 0)
            unlink(sp);
    }
    free(reports);
    return rc;
}

/* Copies the part of chunk [off, off + count) of array `which` that this
 * rank keeps into its state. */
static void shard_load_chunk(struct gpt_shard *sh, int which, size_t off, size_t count,
                             const float *chunk)
{
    if (which == 0 && sh->mode == GPT_SHARD_OPTIMIZER) { /* full parameters on every rank */
        gpt_backend_copy(sh->be, sh->model->params + off, chunk, count * sizeof(float));
        return;
    }
    float *dst = which == 0 ? sh->sp : which == 1 ? sh->sm : sh->sv;
    for (size_t i = 0; i < sh->n_pieces; i++) {
        const struct shard_piece *p = &sh->pieces[i];
        size_t a = p->flat_off > off ? p->flat_off : off;
        size_t b = shard_min(p->flat_off + p->len, off + count);
        if (a < b)
            gpt_backend_copy(sh->be, dst + p->pos + (a - p->flat_off), chunk + (a - off),
                             (b - a) * sizeof(float));
    }
}

/* After a step every rank takes part in: whether any rank failed on its
 * own (mine < 0, why saying why), from an all-reduce of a count, a rank
 * and a status, so that all ranks go on or all stop together. Returns 0
 * when none failed; else this rank's own status and message, or the
 * failing rank's status with err naming it. */
static int shard_agree(struct gpt_shard *sh, int mine, const struct gpt_err *why, const char *what,
                       struct gpt_err *err)
{
    float v[3] = {mine < 0 ? 1.0f : 0.0f, mine < 0 ? (float)sh->comm->rank : 0.0f,
                  mine < 0 ? (float)mine : 0.0f};
    int rc = gpt_comm_allreduce(sh->comm, v, 3, GPT_REDUCE_SUM);
    if (mine < 0) {
        *err = *why;
        return mine;
    }
    if (rc < 0)
        return gpt_err_set(err, rc, NULL, "%s: the ranks could not agree on its outcome: %s", what,
                           gpt_strerror(rc));
    if (v[0] == 0.0f)
        return 0;
    if (v[0] == 1.0f)
        return gpt_err_set(err, (int)v[2], NULL, "%s: rank %d failed: %s", what, (int)v[1],
                           gpt_strerror((int)v[2]));
    return gpt_err_set(err, -EIO, NULL, "%s: %d ranks failed", what, (int)v[0]);
}

void gpt_shard_test_fail_load(struct gpt_shard *sh, int rc)
{
    GPT_ASSERT(rc < 0);
    sh->test_load_fail = rc;
}

int gpt_shard_load_stream(struct gpt_shard *sh, gpt_shard_source_fn read, void *ctx, int moments,
                          struct gpt_err *err)
{
    static const char what[] = "loading the start state";
    size_t n = sh->model->n_params, chunk = shard_min(n ? n : 1, GPT_SHARD_CHUNK_FLOATS);
    float *host = NULL, *dev = NULL;
    int rank = sh->comm->rank, rc, mine = 0; /* mine: this rank's own failure */
    struct gpt_err why = {0};
    /* Rank 0's moments flag and unit buffer count: ranks that gather into
     * different numbers of buffers issue their collectives in different
     * orders (shard_prefetch), so they must not train together. */
    int64_t hdr[2] = {moments, sh->n_bufs};
    if ((rc = gpt_comm_broadcast(sh->comm, hdr, sizeof(hdr), 0)) < 0)
        return gpt_err_set(err, rc, NULL, "broadcast of the start state failed: %s",
                           gpt_strerror(rc));
    if (hdr[1] != sh->n_bufs)
        mine = gpt_err_set(&why, -EINVAL, NULL,
                           "this rank keeps %d gathered unit buffers and rank 0 %d: set "
                           "distributed.shard_buffers alike on every rank",
                           sh->n_bufs, (int)hdr[1]);
    if (mine == 0 && ((rank == 0 && !(host = malloc(chunk * sizeof(float)))) ||
                      gpt_backend_alloc(sh->be, chunk * sizeof(float), (void **)&dev) < 0))
        mine = gpt_err_set(&why, -ENOMEM, NULL, "out of memory for the start state's chunks");
    /* No rank may leave the broadcasts below alone: the others would wait
     * in them until the communicator's timeout. */
    if ((rc = shard_agree(sh, mine, &why, what, err)) < 0)
        goto out;
    for (int which = 0; which < 3; which++) {
        if (which > 0 && !hdr[0]) {
            float *zero[2] = {sh->sm, sh->sv};
            gpt_backend_memzero(sh->be, zero[which - 1],
                                (sh->shard_len ? sh->shard_len : 1) * sizeof(float));
            continue;
        }
        for (size_t off = 0; off < n; off += chunk) {
            size_t k = shard_min(chunk, n - off);
            int64_t status = 0;
            if (rank == 0) {
                struct gpt_err rerr;
                status = read(ctx, which, off, k, host, &rerr);
                if (status < 0)
                    *err = rerr;
                else if ((status = gpt_backend_upload(sh->be, dev, host, k * sizeof(float))) < 0)
                    gpt_err_set(err, (int)status, NULL, "upload of the start state failed: %s",
                                gpt_strerror((int)status));
            }
            /* Rank 0's read status: every rank stops at the same chunk. */
            if ((rc = gpt_comm_broadcast(sh->comm, &status, sizeof(status), 0)) < 0 ||
                (status == 0 &&
                 (rc = gpt_comm_broadcast(sh->comm, dev, k * sizeof(float), 0)) < 0)) {
                gpt_err_set(err, rc, NULL, "broadcast of the start state failed: %s",
                            gpt_strerror(rc));
                goto out;
            }
            if (status < 0) {
                if (rank != 0)
                    gpt_err_set(err, (int)status, NULL, "rank 0 failed to read the start state: %s",
                                gpt_strerror((int)status));
                rc = (int)status;
                goto out;
            }
            if (mine < 0) /* keep taking part; the outcome is agreed below */
                continue;
            shard_load_chunk(sh, which, off, k, dev);
            if ((mine = gpt_backend_sync(sh->be)) < 0)
                gpt_err_set(&why, mine, NULL, "storing this rank's slice of the start state: %s",
                            gpt_strerror(mine));
        }
    }
    if (mine == 0 && sh->test_load_fail < 0) {
        mine = gpt_err_set(&why, sh->test_load_fail, NULL,
                           "storing this rank's slice of the start state: %s (test)",
                           gpt_strerror(sh->test_load_fail));
        sh->test_load_fail = 0;
    }
    rc = shard_agree(sh, mine, &why, what, err);
out:
    sh->emb_valid = false;
    sh->blk_unit[0] = sh->blk_unit[1] = -1;
    free(host);
    gpt_backend_mem_free(sh->be, dev);
    return rc;
}
