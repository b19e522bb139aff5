/*
 * cuda_shadow: the CUDA backend's bf16 shadow cache (see cuda_backend.cu's
 * header for what bf16 mode keeps in shadows). One shadow per device
 * allocation a product reads, covering all of it, indexed by element
 * offset; its current spans are gpt_cuda_spans (engine/ops/cuda_plan.c,
 * unit-tested). The table is shared with the communication thread
 * (gpt_cuda_backend_note_write), hence cb->shd_mu; creating a shadow
 * (cu_shd_in) is the owner thread's. The communication thread only edits
 * span sets (cu_shd_wrote_foreign): it never launches on the compute
 * stream nor touches the backend's error fields; a write that would need
 * a flush waits in the shadow's pending hull, which the owner settles
 * (converting on its own stream) the next time it takes the lock.
 */
#include <stdint.h>
#include <string.h>

#include "cuda_impl.h"

/* Elements of m that the bytes [p, p + bytes) touch, as [*lo, *hi). */
static bool shd_overlap(const struct shadow *m, uintptr_t p, size_t bytes, size_t *lo, size_t *hi)
{
    uintptr_t me = m->base + m->n * sizeof(float);
    uintptr_t pe = bytes > UINTPTR_MAX - p ? UINTPTR_MAX : p + bytes;
    uintptr_t a = p > m->base ? p : m->base, b = pe < me ? pe : me;
    if (a >= b)
        return false;
    *lo = (size_t)(a - m->base) / sizeof(float);
    *hi = ((size_t)(b - m->base) + sizeof(float) - 1) / sizeof(float);
    return true;
}

/* The floats [lo, hi) of shadow m get their fp32 values back from the bf16
 * copy (in stream order). */
static void shd_to_f32(struct gpt_cuda_backend *cb, struct shadow *m, size_t lo, size_t hi)
{
    cuk_bf16_to_f32(cb->compute, (float *)m->base + lo, m->bf + lo, hi - lo);
    cu_check(cb, "bf16 to fp32");
}

/* Before a transition of m: when its span sets are crowded, every owned
 * span goes back to fp32 first (see gpt_cuda_shd_crowded). Lock held. */
static void shd_ready_locked(struct gpt_cuda_backend *cb, struct shadow *m)
{
    if (!gpt_cuda_shd_crowded(&m->st))
        return;
    for (size_t i = 0; i < m->st.own.n; i++)
        shd_to_f32(cb, m, m->st.own.lo[i], m->st.own.hi[i]);
    gpt_cuda_shd_flushed(&m->st);
}

/* The bytes [p, p + bytes) were (or are about to be, in stream order)
 * written: shadow `keep` (an index, or -1) got the bf16 copy of them
 * alongside the fp32 values, the others are stale there. Lock held. */
static void shd_note_locked(struct gpt_cuda_backend *cb, const void *p, size_t bytes, long keep)
{
    for (size_t i = 0; i < cb->n_shd; i++) {
        size_t lo, hi;
        struct shadow *m = &cb->shd[i];
        if (!shd_overlap(m, (uintptr_t)p, bytes, &lo, &hi))
            continue;
        shd_ready_locked(cb, m);
        if ((long)i == keep)
            gpt_cuda_shd_wrote_both(&m->st, lo, hi);
        else
            gpt_cuda_shd_wrote_f32(&m->st, lo, hi);
    }
}

/* The shadow of the allocation holding all of the floats [p, p + n), or
 * -1 when that allocation has none yet. Lock held. */
static long shd_find_locked(struct gpt_cuda_backend *cb, const float *p, size_t n)
{
    size_t off;
    for (size_t i = 0; i < cb->n_shd; i++)
        if (gpt_cuda_shadow_index(cb->shd[i].base, cb->shd[i].n * sizeof(float), (uintptr_t)p, n,
                                  &off))
            return (long)i;
    return -1;
}

static void shd_free_at_locked(struct gpt_cuda_backend *cb, size_t i)
{
    cudaFree(cb->shd[i].bf);
    (void)cudaGetLastError();
    cb->bytes -= cb->shd[i].n * sizeof(uint16_t);
    cb->shd[i] = cb->shd[--cb->n_shd];
}

/* An fp32 reader of the floats [lo, hi) of m: the owned parts go back to
 * fp32 (learned with `learn`). Lock held. */
static void shd_read_f32_locked(struct gpt_cuda_backend *cb, struct shadow *m, size_t lo, size_t hi,
                                int learn)
{
    if (!gpt_cuda_spans_meets(&m->st.own, lo, hi))
        return;
    shd_ready_locked(cb, m);
    size_t k = gpt_cuda_shd_read_f32(&m->st, lo, hi, learn, cb->shd_lo, cb->shd_hi);
    for (size_t i = 0; i < k; i++)
        shd_to_f32(cb, m, cb->shd_lo[i], cb->shd_hi[i]);
}

/* Owner thread: takes the table's lock and settles the foreign writes
 * that wait (gpt_cuda_shd_pending), so every transition after this sees
 * them; the conversions go on the compute stream, from this thread. */
static void shd_lock(struct gpt_cuda_backend *cb)
{
    pthread_mutex_lock(&cb->shd_mu);
    for (size_t i = 0; i < cb->n_shd; i++) {
        struct shadow *m = &cb->shd[i];
        if (!gpt_cuda_shd_pending(&m->st))
            continue;
        for (size_t j = 0; j < m->st.own.n; j++)
            shd_to_f32(cb, m, m->st.own.lo[j], m->st.own.hi[j]);
        gpt_cuda_shd_settle(&m->st);
    }
}

/* Frees every shadow overlapping the bytes [p, p + bytes). */
void cu_shd_drop(struct gpt_cuda_backend *cb, const void *p, size_t bytes)
{
    shd_lock(cb);
    for (size_t i = cb->n_shd; i-- > 0;) {
        size_t lo, hi;
        if (shd_overlap(&cb->shd[i], (uintptr_t)p, bytes, &lo, &hi))
            shd_free_at_locked(cb, i);
    }
    pthread_mutex_unlock(&cb->shd_mu);
}

/* Another thread (a collective) wrote the bytes [p, p + bytes) in fp32:
 * span sets only, never a launch (see the file comment). */
void cu_shd_wrote_foreign(struct gpt_cuda_backend *cb, const void *p, size_t bytes)
{
    if (!p || bytes == 0)
        return;
    pthread_mutex_lock(&cb->shd_mu); /* cb->bf16 too: set_precision writes it under the lock */
    for (size_t i = 0; cb->bf16 && i < cb->n_shd; i++) {
        size_t lo, hi;
        if (shd_overlap(&cb->shd[i], (uintptr_t)p, bytes, &lo, &hi))
            (void)gpt_cuda_shd_wrote_foreign(&cb->shd[i].st, lo, hi);
    }
    pthread_mutex_unlock(&cb->shd_mu);
}

/* An op writes the bytes [p, p + bytes) without a bf16 copy. */
void cu_shd_wrote(struct gpt_cuda_backend *cb, const void *p, size_t bytes)
{
    if (!cb->bf16 || !p || bytes == 0)
        return;
    shd_lock(cb);
    shd_note_locked(cb, p, bytes, -1);
    pthread_mutex_unlock(&cb->shd_mu);
}

/* An op writes the floats [p, p + n): returns where it should write their
 * bf16 copy (NULL when no shadow holds them, or not in bf16 mode) and
 * marks the shadows accordingly; *ret_index (optional) receives the
 * element offset of p in that shadow. */
uint16_t *cu_shd_out(struct gpt_cuda_backend *cb, float *p, size_t n, uint64_t *ret_index)
{
    if (!cb->bf16 || !p || n == 0)
        return NULL;
    shd_lock(cb);
    long i = shd_find_locked(cb, p, n);
    shd_note_locked(cb, p, n * sizeof(float), i);
    uint16_t *r = NULL;
    if (i >= 0) {
        size_t off = ((uintptr_t)p - cb->shd[i].base) / sizeof(float);
        r = cb->shd[i].bf + off;
        if (ret_index)
            *ret_index = off;
    }
    pthread_mutex_unlock(&cb->shd_mu);
    return r;
}

/* A current bf16 view of the floats [p, p + n) for a reader: converts on a
 * miss. The first reader of an allocation creates the shadow of the whole
 * allocation, so a later range of it at any other shape (eval, sample)
 * reuses that shadow and no device memory is allocated after the first
 * step. NULL when [p, p + n) is not inside one tracked allocation or the
 * shadow cannot be allocated (the caller then computes from the fp32
 * data). Owner thread (reads cb->allocs). */
const uint16_t *cu_shd_in(struct gpt_cuda_backend *cb, const float *p, size_t n)
{
    shd_lock(cb);
    long i = shd_find_locked(cb, p, n);
    if (i < 0 && cb->n_shd == cb->cap_shd) {
        size_t cap = cb->cap_shd ? 2 * cb->cap_shd : 16;
        struct shadow *t = (struct shadow *)realloc(cb->shd, cap * sizeof(*t));
        if (t) {
            cb->shd = t;
            cb->cap_shd = cap;
        }
    }
    size_t off;
    for (size_t a = 0; i < 0 && cb->n_shd < cb->cap_shd && a < cb->n_allocs; a++) {
        const struct alloc_ent *ae = &cb->allocs[a];
        if (!gpt_cuda_shadow_index((uintptr_t)ae->ptr, ae->bytes, (uintptr_t)p, n, &off))
            continue;
        size_t elems = ae->bytes / sizeof(float);
        void *bf = NULL;
        if (cudaMalloc(&bf, elems * sizeof(uint16_t)) == cudaSuccess) {
            struct shadow *m = &cb->shd[cb->n_shd];
            m->base = (uintptr_t)ae->ptr;
            m->n = elems;
            m->bf = (uint16_t *)bf;
            gpt_cuda_shd_clear(&m->st);
            i = (long)cb->n_shd++;
            cb->bytes += elems * sizeof(uint16_t);
            if (cb->bytes > cb->peak)
                cb->peak = cb->bytes;
        } else {
            (void)cudaGetLastError();
        }
        break;
    }
    const uint16_t *r = NULL;
    if (i >= 0) {
        struct shadow *m = &cb->shd[i];
        size_t lo = ((uintptr_t)p - m->base) / sizeof(float);
        if (!gpt_cuda_spans_covers(&m->st.cur, lo, lo + n)) {
            /* Owned parts go back to fp32 first, so the whole range can
             * be converted from fp32 (bf16 -> fp32 -> bf16 is exact). */
            shd_ready_locked(cb, m);
            shd_read_f32_locked(cb, m, lo, lo + n, 1);
            if (gpt_cuda_shd_read_bf16(&m->st, lo, lo + n)) {
                cuk_f32_to_bf16(cb->compute, m->bf + lo, p, n);
                cu_check(cb, "bf16 convert");
            }
        }
        r = m->bf + lo;
    }
    pthread_mutex_unlock(&cb->shd_mu);
    return r;
}

void cu_shd_free_all_locked(struct gpt_cuda_backend *cb)
{
    for (size_t i = 0; i < cb->n_shd; i++) {
        struct shadow *m = &cb->shd[i];
        for (size_t j = 0; j < m->st.own.n; j++)
            shd_to_f32(cb, m, m->st.own.lo[j], m->st.own.hi[j]);
        gpt_cuda_shd_flushed(&m->st);
    }
    /* cudaFree waits for the device, so the conversions finish first. */
    while (cb->n_shd > 0)
        shd_free_at_locked(cb, cb->n_shd - 1);
}

/* The floats [p, p + n) are about to be written as bf16 only (an owned
 * range): where, or NULL when they may not be (not bf16 mode, no shadow,
 * a range an fp32 reader wanted before). Marks nothing: the caller calls
 * cu_shd_owned once the write is enqueued, or writes fp32 as usual. */
uint16_t *cu_shd_own(struct gpt_cuda_backend *cb, float *p, size_t n)
{
    if (!cb->bf16 || !p || n == 0)
        return NULL;
    shd_lock(cb);
    long i = shd_find_locked(cb, p, n);
    uint16_t *r = NULL;
    if (i >= 0) {
        struct shadow *m = &cb->shd[i];
        size_t lo = ((uintptr_t)p - m->base) / sizeof(float);
        shd_ready_locked(cb, m);
        if (gpt_cuda_shd_may_own(&m->st, lo, lo + n))
            r = m->bf + lo;
    }
    pthread_mutex_unlock(&cb->shd_mu);
    return r;
}

/* The bf16-only write of the floats [p, p + n) that cu_shd_own allowed is
 * enqueued: the range is owned (its fp32 values stale). Should the rules
 * have changed in between, the fp32 values are converted back at once. */
void cu_shd_owned(struct gpt_cuda_backend *cb, float *p, size_t n)
{
    shd_lock(cb);
    long i = shd_find_locked(cb, p, n);
    GPT_ASSERT(i >= 0);
    struct shadow *m = &cb->shd[i];
    size_t lo = ((uintptr_t)p - m->base) / sizeof(float);
    shd_ready_locked(cb, m);
    if (gpt_cuda_shd_may_own(&m->st, lo, lo + n)) {
        gpt_cuda_shd_wrote_bf16(&m->st, lo, lo + n);
    } else {
        shd_to_f32(cb, m, lo, lo + n);
        gpt_cuda_shd_wrote_both(&m->st, lo, lo + n);
    }
    pthread_mutex_unlock(&cb->shd_mu);
}

/* The bf16 copy of the floats [p, p + n) where `want` says a reader
 * should take it there, else NULL; never converts. */
static const uint16_t *shd_view(struct gpt_cuda_backend *cb, const float *p, size_t n,
                                int (*want)(const struct gpt_cuda_shd_state *s, size_t lo,
                                            size_t hi))
{
    if (!cb->bf16 || !p || n == 0)
        return NULL;
    shd_lock(cb);
    long i = shd_find_locked(cb, p, n);
    const uint16_t *r = NULL;
    if (i >= 0) {
        struct shadow *m = &cb->shd[i];
        size_t lo = ((uintptr_t)p - m->base) / sizeof(float);
        if (want(&m->st, lo, lo + n))
            r = m->bf + lo;
    }
    pthread_mutex_unlock(&cb->shd_mu);
    return r;
}

static int shd_current(const struct gpt_cuda_shd_state *s, size_t lo, size_t hi)
{
    return gpt_cuda_spans_covers(&s->cur, lo, hi);
}

/* The current bf16 copy of the floats [p, p + n), or NULL when it is not
 * current there (nothing is converted). */
const uint16_t *cu_shd_cur(struct gpt_cuda_backend *cb, const float *p, size_t n)
{
    return shd_view(cb, p, n, shd_current);
}

/* The current bf16 copy of the floats [p, p + n) when a reader that takes
 * either copy should read it (gpt_cuda_shd_held: some of it is held in
 * bf16 only), else NULL: the caller reads fp32 after cu_f32. */
const uint16_t *cu_shd_held(struct gpt_cuda_backend *cb, const float *p, size_t n)
{
    return shd_view(cb, p, n, gpt_cuda_shd_held);
}

/* An op reads the fp32 bytes [p, p + bytes): owned floats among them get
 * their fp32 values back first (and are learned, so their producer writes
 * fp32 next time). */
void cu_f32(struct gpt_cuda_backend *cb, const void *p, size_t bytes)
{
    cu_f32_learn(cb, p, bytes, 1);
}

void cu_f32_learn(struct gpt_cuda_backend *cb, const void *p, size_t bytes, int learn)
{
    if (!p || bytes == 0)
        return;
    shd_lock(cb);
    for (size_t i = 0; i < cb->n_shd; i++) {
        size_t lo, hi;
        if (shd_overlap(&cb->shd[i], (uintptr_t)p, bytes, &lo, &hi))
            shd_read_f32_locked(cb, &cb->shd[i], lo, hi, learn);
    }
    pthread_mutex_unlock(&cb->shd_mu);
}

int cu_shd_is_owned(struct gpt_cuda_backend *cb, const void *p, size_t bytes)
{
    int r = 0;
    shd_lock(cb);
    for (size_t i = 0; i < cb->n_shd && !r; i++) {
        size_t lo, hi;
        if (shd_overlap(&cb->shd[i], (uintptr_t)p, bytes, &lo, &hi))
            r = gpt_cuda_spans_meets(&cb->shd[i].st.own, lo, hi);
    }
    pthread_mutex_unlock(&cb->shd_mu);
    return r;
}
