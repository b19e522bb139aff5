/*
 * cuda_shadow: the CUDA backend's bf16 shadow cache (see cuda_backend.cu's
 * header for what bf16 mode keeps in shadows). One shadow per device
 * allocation a product reads, covering all of it, indexed by element
 * offset; its current spans are gpt_cuda_spans (engine/ops/cuda_plan.c,
 * unit-tested). The table is shared with the communication thread
 * (gpt_cuda_backend_note_write), hence cb->shd_mu; creating a shadow
 * (cu_shd_in) is the owner thread's.
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

/* The bytes [p, p + bytes) were (or are about to be, in stream order)
 * written: shadow `keep` (an index, or -1) got the bf16 copy of them, the
 * others are stale there. Lock held. */
static void shd_note_locked(struct gpt_cuda_backend *cb, const void *p, size_t bytes, long keep)
{
    for (size_t i = 0; i < cb->n_shd; i++) {
        size_t lo, hi;
        if (!shd_overlap(&cb->shd[i], (uintptr_t)p, bytes, &lo, &hi))
            continue;
        if ((long)i == keep)
            gpt_cuda_spans_add(&cb->shd[i].cur, lo, hi);
        else
            gpt_cuda_spans_cut(&cb->shd[i].cur, lo, hi);
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

/* Frees every shadow overlapping the bytes [p, p + bytes). */
void cu_shd_drop(struct gpt_cuda_backend *cb, const void *p, size_t bytes)
{
    pthread_mutex_lock(&cb->shd_mu);
    for (size_t i = cb->n_shd; i-- > 0;) {
        size_t lo, hi;
        if (shd_overlap(&cb->shd[i], (uintptr_t)p, bytes, &lo, &hi))
            shd_free_at_locked(cb, i);
    }
    pthread_mutex_unlock(&cb->shd_mu);
}

/* An op writes the bytes [p, p + bytes) without a bf16 copy. */
void cu_shd_wrote(struct gpt_cuda_backend *cb, const void *p, size_t bytes)
{
    if (!cb->bf16 || !p || bytes == 0)
        return;
    pthread_mutex_lock(&cb->shd_mu);
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
    pthread_mutex_lock(&cb->shd_mu);
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
    pthread_mutex_lock(&cb->shd_mu);
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
            gpt_cuda_spans_clear(&m->cur);
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
        if (!gpt_cuda_spans_covers(&m->cur, lo, lo + n)) {
            cuk_f32_to_bf16(cb->compute, m->bf + lo, p, n);
            cu_check(cb, "bf16 convert");
            gpt_cuda_spans_add(&m->cur, lo, lo + n);
        }
        r = m->bf + lo;
    }
    pthread_mutex_unlock(&cb->shd_mu);
    return r;
}

void cu_shd_free_all_locked(struct gpt_cuda_backend *cb)
{
    while (cb->n_shd > 0)
        shd_free_at_locked(cb, cb->n_shd - 1);
}
