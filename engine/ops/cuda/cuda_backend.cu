/*
 * cuda_backend: the CUDA backend's lifecycle, memory (with accounting),
 * transfers, matrix products and attention, and its vtable; the other
 * kernels are in cuda_kernels.cu. A backend belongs to one worker thread
 * and owns: two streams (compute, comm), a cuBLAS and a cuBLASLt handle
 * sharing one workspace, a scratch buffer for two-pass column sums, the
 * sumsq partials and a pinned host word for its result.
 *
 * Matrix products: cuBLASLt with the bias fused as an epilogue when every
 * pointer is 16-byte aligned and a heuristic algorithm exists (cached per
 * shape), else plain cuBLAS SGEMM (bias broadcast first, beta = 1). Row-
 * major products are computed as column-major ones on the transposes.
 * Attention: the fused flash kernels of cuda_attention.cu whenever
 * gpt_cuda_plan_attention allows (then `att` holds the logsumexp and a copy
 * of the output, not probabilities); otherwise, or when the GEMM path is
 * requested, QK^T and att V (and the four backward products) are cuBLAS
 * strided-batched GEMMs straight on the strided views of qkv, batched over
 * heads (or batches, whichever is larger) and looped over the other, with
 * the causal softmax fused in one kernel; the full (T, T) product is
 * computed and the upper triangle zeroed (the CPU backend skips it).
 *
 * Errors: ops cannot return; a failing launch or cuBLAS call records the
 * first error (sticky) and the rest of the ops still run on the stream;
 * sync, download and sumsq report it as -GPT_E_CUDA.
 *
 * bf16 mode (set_precision): the vtable and every buffer stay fp32 (the
 * fp32 master weights, fp32 AdamW moments, fp32 gradients, LayerNorm
 * statistics, softmax and loss), and the backend keeps bf16 SHADOWS of the
 * fp32 ranges that matrix products read: a shadow is a bf16 copy of a
 * range [p, p + n) of floats with the sub-range where it is current. The
 * products read their operands from shadows (cuBLASLt, bf16 A/B, fp32
 * accumulation CUBLAS_COMPUTE_32F, fp32 D, bias epilogue), the fused
 * attention reads q, k, v from the shadow of qkv. A reader that finds no
 * current shadow converts (and the first time allocates the shadow, which
 * is counted in the memory statistics); producers whose output has a
 * shadow write the bf16 copy alongside (LayerNorm, GELU and its backward,
 * attention and its backward), and AdamW writes the weights' bf16 copy
 * with stochastic rounding (seeded counter-based bits: reproducible). Every
 * other write to device memory (ops, upload, copy, memzero, collectives via
 * gpt_cuda_backend_note_write) takes the written range out of the shadows
 * that cover it, so a stale bf16 value is never read. A shadow covers one
 * whole device allocation and is indexed by element offset (the plan and
 * its current-span set are engine/ops/cuda_plan.c, unit-tested): it is
 * created once, at the first read of its allocation, so after the first
 * step nothing is allocated whatever the batch shape, and no forward
 * operand is converted.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cublas_v2.h>

#include "cuda_impl.h"

extern "C" {
#include "cuda_backend.h"
#include "cuda_probe.h"
}

#define LT_WORKSPACE_BYTES ((size_t)32 << 20)
#define SCRATCH_FLOATS     ((size_t)1 << 20)
#define LT_CACHE_SIZE      64
#define LT_KEY_INTS        16
#define LT_USABLE          1 /* lt_cache_ent.valid: algo holds the heuristic's choice */
#define LT_REFUSED         2 /* no algorithm (or the epilogue refused): fall back */
#define ERR_MSG_MAX        256
#define AW_CAP             1024 /* spans of one adamw_multi launch (more: one per span) */

/* One cuBLASLt algorithm choice, keyed by everything the heuristic saw. */
struct lt_cache_ent {
    int valid;
    int key[LT_KEY_INTS];
    cublasLtMatmulAlgo_t algo;
};

/* bf16 copy of one whole device allocation, the floats [base, base + n);
 * `cur` holds the element spans where it is current. */
struct shadow {
    uintptr_t base;
    size_t n;
    uint16_t *bf;
    struct gpt_cuda_spans cur;
};

struct alloc_ent {
    void *ptr;
    size_t bytes;
};

struct gpt_cuda_backend {
    struct gpt_backend head; /* must stay first */
    int device;
    cudaStream_t compute;
    cudaStream_t comm;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *ws; /* cuBLAS(Lt) workspace, LT_WORKSPACE_BYTES */
    float *scratch;
    double *sumsq_dev; /* GPT_CUDA_SUMSQ_MAX_BLOCKS partials, then the result */
    double *sumsq_host;
    int tf32;
    int err_code;
    char err_msg[ERR_MSG_MAX];
    struct alloc_ent *allocs;
    size_t n_allocs, cap_allocs;
    size_t bytes, peak;
    struct lt_cache_ent cache[LT_CACHE_SIZE];
    unsigned cache_next;
    size_t smem_optin;                 /* shared memory a block may opt into */
    enum gpt_cuda_attn_kind attn_want; /* FLASH (when the plan allows) or GEMM */
    /* bf16 mode. The shadow table is also touched by the communication
     * thread (note_write), hence the mutex; everything else is the owner's. */
    int bf16;
    uint64_t sr_seed, sr_stream;
    pthread_mutex_t shd_mu;
    struct shadow *shd;
    size_t n_shd, cap_shd;
    /* adamw_multi's span table: on the device (ends, then decay flags,
     * AW_CAP each, allocated with the backend), the host copy of what is
     * there (uploaded again only when a call's table differs), and the
     * incoming table. */
    uint64_t *aw_dev_ends;
    uint32_t *aw_dev_decay;
    size_t aw_n;
    uint64_t aw_ends[AW_CAP], aw_new_ends[AW_CAP];
    uint32_t aw_decay[AW_CAP], aw_new_decay[AW_CAP];
};

static struct gpt_cuda_backend *cu(struct gpt_backend *be)
{
    return (struct gpt_cuda_backend *)be;
}

/* ---- errors ------------------------------------------------------------- */

static void cu_record(struct gpt_cuda_backend *cb, const char *what, const char *detail)
{
    if (cb->err_code)
        return;
    cb->err_code = -GPT_E_CUDA;
    snprintf(cb->err_msg, sizeof(cb->err_msg), "%s: %s", what, detail);
}

/* Checks the launches just enqueued; records the first failure. */
static void cu_check(struct gpt_cuda_backend *cb, const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        cu_record(cb, what, cudaGetErrorString(e));
}

static void cu_check_blas(struct gpt_cuda_backend *cb, cublasStatus_t st, const char *what)
{
    if (st != CUBLAS_STATUS_SUCCESS)
        cu_record(cb, what, cublasGetStatusString(st));
}

/* Turns a runtime error of a fallible slot into a return code, clearing
 * the runtime's last-error so it is not blamed on the next launch. */
static int cu_ret(struct gpt_cuda_backend *cb, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    cu_record(cb, what, cudaGetErrorString(e));
    return e == cudaErrorMemoryAllocation ? -ENOMEM : -GPT_E_CUDA;
}

/* Every entry point makes the backend's device current for this thread
 * (cheap; a worker may have touched another device in between). */
static void cu_enter(struct gpt_cuda_backend *cb)
{
    cudaError_t e = cudaSetDevice(cb->device);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cu_record(cb, "cudaSetDevice", cudaGetErrorString(e));
    }
}

/* ---- memory ---------------------------------------------------------------- */

static int cu_track(struct gpt_cuda_backend *cb, void *ptr, size_t bytes)
{
    if (cb->n_allocs == cb->cap_allocs) {
        size_t cap = cb->cap_allocs ? cb->cap_allocs * 2 : 64;
        struct alloc_ent *a = (struct alloc_ent *)realloc(cb->allocs, cap * sizeof(*a));
        if (!a)
            return -ENOMEM;
        cb->allocs = a;
        cb->cap_allocs = cap;
    }
    cb->allocs[cb->n_allocs].ptr = ptr;
    cb->allocs[cb->n_allocs].bytes = bytes;
    cb->n_allocs++;
    cb->bytes += bytes;
    if (cb->bytes > cb->peak)
        cb->peak = cb->bytes;
    return 0;
}

/* Device allocation that is counted; zeroed on the compute stream. Out of
 * memory is the caller's to handle, so it is returned, not made sticky. */
static int cu_malloc(struct gpt_cuda_backend *cb, size_t bytes, void **ret_ptr)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return e == cudaErrorMemoryAllocation ? -ENOMEM : -GPT_E_CUDA;
    }
    int rc = cu_ret(cb, cudaMemsetAsync(p, 0, bytes, cb->compute), "cudaMemsetAsync");
    if (rc == 0)
        rc = cu_track(cb, p, bytes);
    if (rc < 0) {
        cudaFree(p);
        return rc;
    }
    *ret_ptr = p;
    return 0;
}

/* ---- bf16 shadows --------------------------------------------------------- */

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
static void shd_drop(struct gpt_cuda_backend *cb, const void *p, size_t bytes)
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
static void shd_wrote(struct gpt_cuda_backend *cb, const void *p, size_t bytes)
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
static uint16_t *shd_out(struct gpt_cuda_backend *cb, float *p, size_t n, uint64_t *ret_index)
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
static const uint16_t *shd_in(struct gpt_cuda_backend *cb, const float *p, size_t n)
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

static void cu_untrack_free(struct gpt_cuda_backend *cb, void *ptr)
{
    for (size_t i = cb->n_allocs; i-- > 0;) {
        if (cb->allocs[i].ptr == ptr) {
            cb->bytes -= cb->allocs[i].bytes;
            shd_drop(cb, ptr, cb->allocs[i].bytes);
            cb->allocs[i] = cb->allocs[--cb->n_allocs];
            break;
        }
    }
    /* cudaFree waits for the device; freeing is rare (teardown). */
    cudaError_t e = cudaFree(ptr);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cu_record(cb, "cudaFree", cudaGetErrorString(e));
    }
}

static void cuda_destroy(struct gpt_backend *be)
{
    struct gpt_cuda_backend *cb = cu(be);
    cudaSetDevice(cb->device);
    if (cb->compute)
        cudaStreamSynchronize(cb->compute);
    if (cb->comm)
        cudaStreamSynchronize(cb->comm);
    if (cb->lt)
        cublasLtDestroy(cb->lt);
    if (cb->blas)
        cublasDestroy(cb->blas);
    if (cb->ws)
        cudaFree(cb->ws);
    if (cb->scratch)
        cudaFree(cb->scratch);
    if (cb->sumsq_dev)
        cudaFree(cb->sumsq_dev);
    if (cb->sumsq_host)
        cudaFreeHost(cb->sumsq_host);
    if (cb->aw_dev_ends)
        cudaFree(cb->aw_dev_ends);
    if (cb->compute)
        cudaStreamDestroy(cb->compute);
    if (cb->comm)
        cudaStreamDestroy(cb->comm);
    for (size_t i = 0; i < cb->n_shd; i++)
        cudaFree(cb->shd[i].bf);
    (void)cudaGetLastError();
    pthread_mutex_destroy(&cb->shd_mu);
    free(cb->shd);
    free(cb->allocs);
    free(cb);
}

static int cuda_alloc(struct gpt_backend *be, size_t bytes, void **ret_ptr)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    /* cudaMalloc aligns to 256 bytes, more than the 64 backend.h promises. */
    return cu_malloc(cb, bytes, ret_ptr);
}

static void cuda_mem_free(struct gpt_backend *be, void *ptr)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    cu_untrack_free(cb, ptr);
}

static int cuda_upload(struct gpt_backend *be, void *dst, const void *host_src, size_t bytes)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    shd_wrote(cb, dst, bytes);
    /* From pageable memory the runtime stages the data before returning, so
     * the caller may reuse host_src at once; the copy is ordered with the
     * ops on the compute stream. */
    return cu_ret(cb, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cb->compute),
                  "upload");
}

static int cuda_sync(struct gpt_backend *be)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    int rc = cu_ret(cb, cudaStreamSynchronize(cb->compute), "cudaStreamSynchronize");
    if (rc == 0)
        cu_check(cb, "kernel");
    return cb->err_code ? cb->err_code : rc;
}

static int cuda_download(struct gpt_backend *be, void *host_dst, const void *src, size_t bytes)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    int rc = cu_ret(cb, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cb->compute),
                    "download");
    if (rc < 0)
        return rc;
    return cuda_sync(be);
}

static void cuda_copy(struct gpt_backend *be, void *dst, const void *src, size_t bytes)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    shd_wrote(cb, dst, bytes);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cb->compute);
    if (e != cudaSuccess)
        (void)cu_ret(cb, e, "copy");
}

static void cuda_memzero(struct gpt_backend *be, void *ptr, size_t bytes)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    shd_wrote(cb, ptr, bytes);
    cudaError_t e = cudaMemsetAsync(ptr, 0, bytes, cb->compute);
    if (e != cudaSuccess)
        (void)cu_ret(cb, e, "memzero");
}

/* ---- matrix products --------------------------------------------------------- */

/* Largest power of two (<= 256) dividing both the address and the byte
 * leading dimension: what cuBLASLt may assume about every column. */
static int cu_align(const void *p, size_t ld_bytes)
{
    uintptr_t a = (uintptr_t)p | (uintptr_t)ld_bytes | 256u;
    return (int)(a & (~a + 1));
}

/* What cuBLASLt fuses into a product (column-major D of m rows, n
 * columns). kind:
 *  - CUBLASLT_EPILOGUE_DEFAULT: nothing;
 *  - CUBLASLT_EPILOGUE_BIAS: D += bias over rows (bias: m floats, read);
 *  - CUBLASLT_EPILOGUE_BGRADB: bgrad[j] = sum over k of op(B)[k, j], the
 *    bias gradient in the same pass (n floats, WRITTEN, not accumulated);
 *  - CUBLASLT_EPILOGUE_GELU_AUX_BIAS: aux = A op B + bias (the pre-GELU
 *    values, fp32, leading dimension ldaux), D = gelu_tanh(aux);
 *  - CUBLASLT_EPILOGUE_DGELU: D = (A op B) * gelu'(aux), aux as written
 *    by GELU_AUX_BIAS. */
struct lt_epi {
    cublasLtEpilogue_t kind;
    const float *bias;
    float *bgrad;
    const float *aux;
    int ldaux;
};

static const struct lt_epi lt_none = {CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, NULL, 0};

/* Column-major D = A op B (with the epilogue e) + beta D with cuBLASLt; A
 * and B are of type `ab` (CUDA_R_32F or CUDA_R_16BF), D, bias, bias
 * gradient and aux fp32, and the accumulation is fp32 (TF32 tensor cores
 * for fp32 inputs when allowed). Returns 0 when done, 1 when no algorithm
 * fits or cuBLASLt refuses the epilogue (the caller falls back; a refusal
 * is cached, so the next call falls back at once). */
static int lt_matmul(struct gpt_cuda_backend *cb, cudaDataType_t ab, cublasOperation_t ta,
                     cublasOperation_t tb, int m, int n, int k, const void *A, int lda,
                     const void *B, int ldb, float *D, int ldd, float beta, const struct lt_epi *e)
{
    size_t es = ab == CUDA_R_16BF ? 2 : 4;
    int al_a = cu_align(A, (size_t)lda * es), al_b = cu_align(B, (size_t)ldb * es);
    int al_d = cu_align(D, (size_t)ldd * 4);
    if (!e)
        e = &lt_none;
    const float *epi_vec = e->bias ? e->bias : e->bgrad;
    if (al_a < 16 || al_b < 16 || al_d < 16 || (epi_vec && cu_align(epi_vec, 0) < 16) ||
        (e->aux && cu_align(e->aux, (size_t)e->ldaux * 4) < 16))
        return 1;
    int key[LT_KEY_INTS] = {(int)ta, (int)tb,      m,        n,       k,   lda, ldb, ldd,
                            al_a,    al_b,         al_d,     (int)e->kind, beta != 0.0f,
                            cb->tf32, (int)ab,     e->ldaux};
    cublasComputeType_t ct =
        ab == CUDA_R_32F && cb->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    struct lt_cache_ent *hit = NULL;
    int ret = 1;
    for (int i = 0; i < LT_CACHE_SIZE && !hit; i++)
        if (cb->cache[i].valid && memcmp(cb->cache[i].key, key, sizeof(key)) == 0)
            hit = &cb->cache[i];
    if (hit && hit->valid == LT_REFUSED)
        return 1;
    cublasStatus_t st = cublasLtMatmulDescCreate(&desc, ct, CUDA_R_32F);
    if (st != CUBLAS_STATUS_SUCCESS)
        goto out;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    if (e->kind != CUBLASLT_EPILOGUE_DEFAULT) {
        cublasLtEpilogue_t epi = e->kind;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
    }
    if (epi_vec) {
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &epi_vec,
                                       sizeof(epi_vec));
        cudaDataType_t bt = CUDA_R_32F;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt));
    }
    if (e->aux) {
        /* The aux type is left at its default, D's (fp32). */
        int64_t ldaux = e->ldaux;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e->aux,
                                       sizeof(e->aux));
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux,
                                       sizeof(ldaux));
    }
    if (cublasLtMatrixLayoutCreate(&la, ab, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m,
                                   lda) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&lb, ab, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k,
                                   ldb) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, ldd) != CUBLAS_STATUS_SUCCESS)
        goto out;
    if (!hit) {
        hit = &cb->cache[cb->cache_next++ % LT_CACHE_SIZE];
        hit->valid = LT_REFUSED; /* until an algorithm is found */
        memcpy(hit->key, key, sizeof(key));
        if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS)
            goto out;
        size_t wsb = LT_WORKSPACE_BYTES;
        uint32_t u_a = (uint32_t)al_a, u_b = (uint32_t)al_b, u_d = (uint32_t)al_d;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                             sizeof(wsb));
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                             &u_a, sizeof(u_a));
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                             &u_b, sizeof(u_b));
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                             &u_d, sizeof(u_d));
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                             &u_d, sizeof(u_d));
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        st = cublasLtMatmulAlgoGetHeuristic(cb->lt, desc, la, lb, ld, ld, pref, 1, &res, &found);
        if (st != CUBLAS_STATUS_SUCCESS || found == 0)
            goto out;
        hit->valid = LT_USABLE;
        hit->algo = res.algo;
    }
    {
        float alpha = 1.0f;
        st = cublasLtMatmul(cb->lt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &hit->algo,
                            cb->ws, LT_WORKSPACE_BYTES, cb->compute);
        if (st == CUBLAS_STATUS_NOT_SUPPORTED && e->kind != CUBLASLT_EPILOGUE_DEFAULT) {
            hit->valid = LT_REFUSED; /* nothing was enqueued: fall back */
            goto out;
        }
        cu_check_blas(cb, st, "cublasLtMatmul");
        ret = 0;
    }
out:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (ld)
        cublasLtMatrixLayoutDestroy(ld);
    if (lb)
        cublasLtMatrixLayoutDestroy(lb);
    if (la)
        cublasLtMatrixLayoutDestroy(la);
    if (desc)
        cublasLtMatmulDescDestroy(desc);
    return ret;
}

/* Row-major, strided-batched: C(M,N) = alpha op(A) op(B) + beta C, each
 * computed as the column-major C^T = op(B)^T op(A)^T. */
static void gemm_rm(struct gpt_cuda_backend *cb, bool ta, bool tb, int M, int N, int K, float alpha,
                    const float *A, int lda, long long sa, const float *B, int ldb, long long sb,
                    float beta, float *C, int ldc, long long sc, int batch)
{
    cublasStatus_t st = cublasSgemmStridedBatched(cb->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                  ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
                                                  B, ldb, sb, A, lda, sa, &beta, C, ldc, sc, batch);
    cu_check_blas(cb, st, "cublasSgemmStridedBatched");
}

/* Column-major D (m, n) = op(A) op(B) (+ bias over rows) + beta D with bf16
 * A and B and fp32 D and accumulation: cuBLASLt, else cublasGemmEx with
 * the bias broadcast first. */
static void gemm_bf16(struct gpt_cuda_backend *cb, cublasOperation_t ta, cublasOperation_t tb,
                      int m, int n, int k, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                      float *D, int ldd, float beta, const float *bias)
{
    struct lt_epi e = {bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, NULL, NULL,
                       0};
    if (lt_matmul(cb, CUDA_R_16BF, ta, tb, m, n, k, A, lda, B, ldb, D, ldd, beta, &e) == 0)
        return;
    if (bias) {
        cuk_bias_broadcast(cb->compute, D, bias, (size_t)n, (size_t)m);
        cu_check(cb, "bias_broadcast");
        beta = 1.0f;
    }
    float alpha = 1.0f;
    cu_check_blas(cb,
                  cublasGemmEx(cb->blas, ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, B,
                               CUDA_R_16BF, ldb, &beta, D, CUDA_R_32F, ldd, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT),
                  "cublasGemmEx bf16");
}

static void cuda_matmul_forward(struct gpt_backend *be, float *out, const float *inp,
                                const float *weight, const float *bias, size_t N, size_t C,
                                size_t OC)
{
    /* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias: column-major
     * out^T (OC,N) = W^T^T ... i.e. m = OC, n = N, k = C, A = weight (T). */
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    int m = (int)OC, n = (int)N, k = (int)C;
    if (cb->bf16) {
        const uint16_t *wb = shd_in(cb, weight, OC * C), *ib = shd_in(cb, inp, N * C);
        shd_wrote(cb, out, N * OC * sizeof(float));
        if (wb && ib) {
            gemm_bf16(cb, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, wb, k, ib, k, out, m, 0.0f, bias);
            return;
        }
    }
    struct lt_epi e = {bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, NULL, NULL,
                       0};
    if (lt_matmul(cb, CUDA_R_32F, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, weight, k, inp, k, out, m,
                  0.0f, &e) == 0)
        return;
    float beta = 0.0f;
    if (bias) {
        cuk_bias_broadcast(cb->compute, out, bias, N, OC);
        cu_check(cb, "bias_broadcast");
        beta = 1.0f;
    }
    gemm_rm(cb, false, true, n, m, k, 1.0f, inp, k, 0, weight, k, 0, beta, out, m, 0, 1);
}

static void cuda_matmul_backward(struct gpt_backend *be, float *dinp, float *dweight, float *dbias,
                                 const float *dout, const float *inp, const float *weight, size_t N,
                                 size_t C, size_t OC)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    int n = (int)N, c = (int)C, oc = (int)OC;
    const uint16_t *wb = NULL, *db = NULL, *ib = NULL;
    if (cb->bf16) {
        wb = dinp ? shd_in(cb, weight, OC * C) : NULL;
        db = shd_in(cb, dout, N * OC);
        ib = shd_in(cb, inp, N * C);
        if (dinp)
            shd_wrote(cb, dinp, N * C * sizeof(float));
        shd_wrote(cb, dweight, OC * C * sizeof(float));
        if (dbias)
            shd_wrote(cb, dbias, OC * sizeof(float));
    }
    /* dinp (N,C) = dout (N,OC) @ weight (OC,C) */
    if (dinp && wb && db)
        gemm_bf16(cb, CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, wb, c, db, oc, dinp, c, 0.0f, NULL);
    else if (dinp && lt_matmul(cb, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, weight, c, dout,
                               oc, dinp, c, 0.0f, NULL))
        gemm_rm(cb, false, false, n, c, oc, 1.0f, dout, oc, 0, weight, c, 0, 0.0f, dinp, c, 0, 1);
    /* dweight (OC,C) += dout^T (OC,N) @ inp (N,C): column-major D (c, oc)
     * = A (c, N) B^T with A = inp, B = dout (oc, N), k = N. With a bias,
     * the BGRADB epilogue sums op(B) = dout^T over k in the same pass:
     * bgrad[j] = sum_n dout[n, j], dbias's increment. It writes, and dbias
     * accumulates, so it goes to scratch and is added after. */
    struct lt_epi bg = {CUBLASLT_EPILOGUE_BGRADB, NULL, cb->scratch, NULL, 0};
    const struct lt_epi *e = dbias && OC <= SCRATCH_FLOATS ? &bg : NULL;
    int summed = 0;
    if (ib && db) {
        summed = e && lt_matmul(cb, CUDA_R_16BF, CUBLAS_OP_N, CUBLAS_OP_T, c, oc, n, ib, c, db, oc,
                                dweight, c, 1.0f, e) == 0;
        if (!summed)
            gemm_bf16(cb, CUBLAS_OP_N, CUBLAS_OP_T, c, oc, n, ib, c, db, oc, dweight, c, 1.0f, NULL);
    } else {
        summed = e && lt_matmul(cb, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_T, c, oc, n, inp, c, dout,
                                oc, dweight, c, 1.0f, e) == 0;
        if (!summed && lt_matmul(cb, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_T, c, oc, n, inp, c, dout,
                                 oc, dweight, c, 1.0f, NULL))
            gemm_rm(cb, true, false, oc, c, n, 1.0f, dout, oc, 0, inp, c, 0, 1.0f, dweight, c, 0,
                    1);
    }
    if (dbias && summed) {
        cuk_residual_forward(cb->compute, dbias, dbias, cb->scratch, OC); /* dbias += bgrad */
        cu_check(cb, "matmul_backward dbias add");
    } else if (dbias) {
        cuk_colsum_add(cb->compute, dbias, dout, N, OC, cb->scratch, SCRATCH_FLOATS);
        cu_check(cb, "matmul_backward dbias");
    }
}

/* ---- attention -------------------------------------------------------------- */

/* Strided views of one (b, h) pair: the batched GEMMs run over the larger
 * of B and NH and loop over the smaller. */
struct att_geom {
    size_t T, C, hs, NH;
    int outer_is_b; /* loop over b, batch over h */
    size_t outer, inner;
};

static struct att_geom att_geom(size_t B, size_t T, size_t C, size_t NH)
{
    struct att_geom g = {T, C, C / NH, NH, B <= NH, 0, 0};
    g.outer = g.outer_is_b ? B : NH;
    g.inner = g.outer_is_b ? NH : B;
    return g;
}

/* Offsets (in floats) of (b, h) into a (B,T,ld) row buffer with head
 * columns h*hs, and into (B,NH,T,T). */
static void att_offsets(const struct att_geom *g, size_t o, size_t ld, size_t *ret_row,
                        size_t *ret_row_stride, size_t *ret_tt, size_t *ret_tt_stride)
{
    size_t T = g->T;
    if (g->outer_is_b) { /* o = b, batch over h */
        *ret_row = o * T * ld;
        *ret_row_stride = g->hs;
        *ret_tt = o * g->NH * T * T;
        *ret_tt_stride = T * T;
    } else { /* o = h, batch over b */
        *ret_row = o * g->hs;
        *ret_row_stride = T * ld;
        *ret_tt = o * T * T;
        *ret_tt_stride = g->NH * T * T;
    }
}

static void cu_attn_plan(const struct gpt_cuda_backend *cb, struct gpt_cuda_attn_plan *p, size_t B,
                         size_t T, size_t C, size_t NH)
{
    gpt_cuda_plan_attention(p, B, T, C, NH, cb->smem_optin, cb->attn_want);
}

static void cuda_attention_forward(struct gpt_backend *be, float *out, float *att, const float *qkv,
                                   size_t B, size_t T, size_t C, size_t NH)
{
    /* out (B,T,C), att (B,NH,T,T), qkv (B,T,3C) */
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    struct gpt_cuda_attn_plan plan;
    cu_attn_plan(cb, &plan, B, T, C, NH);
    if (plan.kind == GPT_CUDA_ATTN_FLASH) {
        const uint16_t *qb = cb->bf16 ? shd_in(cb, qkv, B * T * 3 * C) : NULL;
        uint16_t *ob = shd_out(cb, out, B * T * C, NULL);
        shd_wrote(cb, att, (plan.lse_floats + B * T * C) * sizeof(float));
        cudaError_t e = cuk_flash_forward(cb->compute, &plan, out, ob, att, qkv, qb, B, T, C, NH);
        if (e != cudaSuccess)
            (void)cu_ret(cb, e, "flash_forward smem");
        cu_check(cb, "flash_forward");
        return;
    }
    shd_wrote(cb, out, B * T * C * sizeof(float));
    shd_wrote(cb, att, B * NH * T * T * sizeof(float));
    struct att_geom g = att_geom(B, T, C, NH);
    int t = (int)T, hs = (int)g.hs, ld3 = (int)(3 * C), batch = (int)g.inner;
    float scale = 1.0f / sqrtf((float)g.hs);
    for (size_t o = 0; o < g.outer; o++) {
        size_t q0, qs, a0, as;
        att_offsets(&g, o, 3 * C, &q0, &qs, &a0, &as);
        const float *q = qkv + q0, *k = q + C;
        /* att (T,T) = scale * q (T,hs) @ k (T,hs)^T */
        gemm_rm(cb, false, true, t, t, hs, scale, q, ld3, (long long)qs, k, ld3, (long long)qs,
                0.0f, att + a0, t, (long long)as, batch);
    }
    cuk_att_softmax_forward(cb->compute, att, B * NH * T, T);
    cu_check(cb, "att_softmax_forward");
    for (size_t o = 0; o < g.outer; o++) {
        size_t q0, qs, a0, as, o0, os;
        att_offsets(&g, o, 3 * C, &q0, &qs, &a0, &as);
        att_offsets(&g, o, C, &o0, &os, &a0, &as);
        const float *v = qkv + q0 + 2 * C;
        /* out (T,hs) = att (T,T) @ v (T,hs) */
        gemm_rm(cb, false, false, t, hs, t, 1.0f, att + a0, t, (long long)as, v, ld3, (long long)qs,
                0.0f, out + o0, (int)C, (long long)os, batch);
    }
}

/* The same plan as the attention calls, so the model sizes att and the
 * backward scratch for what the kernels write. */
static size_t cuda_att_floats(struct gpt_backend *be, size_t B, size_t T, size_t C, size_t NH,
                              int scratch)
{
    struct gpt_cuda_attn_plan plan;
    cu_attn_plan(cu(be), &plan, B, T, C, NH);
    return gpt_cuda_plan_att_floats(&plan, B, T, C, NH, scratch);
}

static void cuda_attention_backward(struct gpt_backend *be, float *dqkv, float *scratch,
                                    const float *dout, const float *qkv, const float *att, size_t B,
                                    size_t T, size_t C, size_t NH)
{
    /* Relies on the zeros this backend's forward wrote above the diagonal
     * of att (the dv product runs over all T rows), or on the logsumexp and
     * output copy the flash forward wrote there (the plan is the same). */
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    struct gpt_cuda_attn_plan plan;
    cu_attn_plan(cb, &plan, B, T, C, NH);
    if (plan.kind == GPT_CUDA_ATTN_FLASH) {
        const uint16_t *qb = cb->bf16 ? shd_in(cb, qkv, B * T * 3 * C) : NULL;
        uint16_t *db = shd_out(cb, dqkv, B * T * 3 * C, NULL);
        shd_wrote(cb, scratch, plan.lse_floats * sizeof(float));
        cudaError_t e = cuk_flash_backward(cb->compute, &plan, dqkv, db, scratch, dout, qkv, qb,
                                           att, B, T, C, NH);
        if (e != cudaSuccess)
            (void)cu_ret(cb, e, "flash_backward smem");
        cu_check(cb, "flash_backward");
        return;
    }
    shd_wrote(cb, dqkv, B * T * 3 * C * sizeof(float));
    shd_wrote(cb, scratch, B * NH * T * T * sizeof(float));
    struct att_geom g = att_geom(B, T, C, NH);
    int t = (int)T, hs = (int)g.hs, ld3 = (int)(3 * C), ldc = (int)C, batch = (int)g.inner;
    float scale = 1.0f / sqrtf((float)g.hs);
    for (size_t o = 0; o < g.outer; o++) {
        size_t q0, qs, a0, as, d0, ds;
        att_offsets(&g, o, 3 * C, &q0, &qs, &a0, &as);
        att_offsets(&g, o, C, &d0, &ds, &a0, &as);
        const float *v = qkv + q0 + 2 * C, *d = dout + d0;
        float *dv = dqkv + q0 + 2 * C;
        /* datt (T,T) = d (T,hs) @ v (T,hs)^T */
        gemm_rm(cb, false, true, t, t, hs, 1.0f, d, ldc, (long long)ds, v, ld3, (long long)qs, 0.0f,
                scratch + a0, t, (long long)as, batch);
        /* dv (T,hs) = att^T (T,T) @ d (T,hs) */
        gemm_rm(cb, true, false, t, hs, t, 1.0f, att + a0, t, (long long)as, d, ldc, (long long)ds,
                0.0f, dv, ld3, (long long)qs, batch);
    }
    cuk_att_softmax_backward(cb->compute, scratch, att, B * NH * T, T);
    cu_check(cb, "att_softmax_backward");
    for (size_t o = 0; o < g.outer; o++) {
        size_t q0, qs, a0, as;
        att_offsets(&g, o, 3 * C, &q0, &qs, &a0, &as);
        const float *q = qkv + q0, *k = q + C;
        float *dq = dqkv + q0, *dk = dq + C;
        /* dq (T,hs) = scale * dpre (T,T) @ k (T,hs) */
        gemm_rm(cb, false, false, t, hs, t, scale, scratch + a0, t, (long long)as, k, ld3,
                (long long)qs, 0.0f, dq, ld3, (long long)qs, batch);
        /* dk (T,hs) = scale * dpre^T (T,T) @ q (T,hs) */
        gemm_rm(cb, true, false, t, hs, t, scale, scratch + a0, t, (long long)as, q, ld3,
                (long long)qs, 0.0f, dk, ld3, (long long)qs, batch);
    }
}

/* ---- thin wrappers over cuda_kernels.cu ----------------------------------------- */

static void cuda_encoder_forward(struct gpt_backend *be, float *out, const int *inp,
                                 const float *wte, const float *wpe, size_t B, size_t T, size_t C)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    shd_wrote(cb, out, B * T * C * sizeof(float));
    cuk_encoder_forward(cb->compute, out, inp, wte, wpe, B, T, C);
    cu_check(cb, "encoder_forward");
}

static void cuda_encoder_backward(struct gpt_backend *be, float *dwte, float *dwpe,
                                  const float *dout, const int *inp, size_t B, size_t T, size_t C)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    shd_wrote(cb, dwte, SIZE_MAX); /* rows by token id: up to the vocabulary's end */
    shd_wrote(cb, dwpe, T * C * sizeof(float));
    cuk_encoder_backward(cb->compute, dwte, dwpe, dout, inp, B, T, C);
    cu_check(cb, "encoder_backward");
}

static void cuda_layernorm_forward(struct gpt_backend *be, float *out, float *mean, float *rstd,
                                   const float *inp, const float *weight, const float *bias,
                                   size_t N, size_t C)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    uint16_t *ob = shd_out(cb, out, N * C, NULL);
    shd_wrote(cb, mean, N * sizeof(float));
    shd_wrote(cb, rstd, N * sizeof(float));
    cuk_layernorm_forward(cb->compute, out, ob, mean, rstd, inp, weight, bias, N, C);
    cu_check(cb, "layernorm_forward");
}

static void cuda_layernorm_backward(struct gpt_backend *be, float *dinp, float *dweight,
                                    float *dbias, const float *dout, const float *inp,
                                    const float *weight, const float *mean, const float *rstd,
                                    size_t N, size_t C)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    /* dinp (the residual stream's gradient) feeds the next products'
     * backward: its bf16 copy is written alongside. */
    uint16_t *db = shd_out(cb, dinp, N * C, NULL);
    shd_wrote(cb, dweight, C * sizeof(float));
    shd_wrote(cb, dbias, C * sizeof(float));
    cuk_layernorm_backward(cb->compute, dinp, db, dweight, dbias, dout, inp, weight, mean, rstd, N,
                           C, cb->scratch, SCRATCH_FLOATS);
    cu_check(cb, "layernorm_backward");
}

static void cuda_gelu_forward(struct gpt_backend *be, float *out, const float *inp, size_t n)
{
    struct gpt_cuda_backend *cb = cu(be);
    if (n == 0)
        return;
    cu_enter(cb);
    uint16_t *ob = shd_out(cb, out, n, NULL);
    cuk_gelu_forward(cb->compute, out, ob, inp, n);
    cu_check(cb, "gelu_forward");
}

static void cuda_gelu_backward(struct gpt_backend *be, float *dinp, const float *inp,
                               const float *dout, size_t n)
{
    struct gpt_cuda_backend *cb = cu(be);
    if (n == 0)
        return;
    cu_enter(cb);
    uint16_t *db = shd_out(cb, dinp, n, NULL);
    cuk_gelu_backward(cb->compute, dinp, db, inp, dout, n);
    cu_check(cb, "gelu_backward");
}

static void cuda_residual_forward(struct gpt_backend *be, float *out, const float *a,
                                  const float *b, size_t n)
{
    struct gpt_cuda_backend *cb = cu(be);
    if (n == 0)
        return;
    cu_enter(cb);
    shd_wrote(cb, out, n * sizeof(float));
    cuk_residual_forward(cb->compute, out, a, b, n);
    cu_check(cb, "residual_forward");
}

static void cuda_softmax_xent(struct gpt_backend *be, float *logits, float *losses,
                              const int *targets, size_t N, size_t V, size_t Vp, float dscale,
                              int write_dlogits)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    /* dlogits are the head's backward operand: bf16 copy alongside. */
    uint16_t *db = write_dlogits ? shd_out(cb, logits, N * Vp, NULL) : NULL;
    shd_wrote(cb, losses, N * sizeof(float));
    cuk_softmax_xent(cb->compute, logits, db, losses, targets, N, V, Vp, dscale, write_dlogits);
    cu_check(cb, "softmax_xent");
}

static void cuda_adamw(struct gpt_backend *be, float *params, const float *grads, float *m,
                       float *v, size_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, float grad_scale, float bc1, float bc2)
{
    struct gpt_cuda_backend *cb = cu(be);
    if (n == 0)
        return;
    cu_enter(cb);
    /* In bf16 mode the weights' shadow (if a product has read them) gets
     * the new values with stochastic rounding; one random stream per call,
     * indexed by the element's place in the shadow. */
    uint64_t index0 = 0;
    uint16_t *pb = shd_out(cb, params, n, &index0);
    shd_wrote(cb, m, n * sizeof(float));
    shd_wrote(cb, v, n * sizeof(float));
    uint64_t stream = cb->sr_stream++;
    cuk_adamw(cb->compute, params, pb, grads, m, v, n, lr, beta1, beta2, eps, weight_decay,
              grad_scale, bc1, bc2, cb->sr_seed, stream, index0);
    cu_check(cb, "adamw");
}

/* AdamW over all the spans in one launch when they are contiguous and at
 * most AW_CAP (the optimizer's usual call: every tensor of the model, or
 * of a shard), else one adamw per span. The span table goes to the device
 * only when it differs from the last one (in steady state: never). In
 * bf16 mode the weights' shadow gets the stochastically rounded copy in
 * the same pass, one random stream per call. */
static void cuda_adamw_multi(struct gpt_backend *be, float *params, const float *grads, float *m,
                             float *v, const struct gpt_adamw_span *spans, size_t n_spans,
                             float lr, float beta1, float beta2, float eps, float weight_decay,
                             float grad_scale, float bc1, float bc2)
{
    struct gpt_cuda_backend *cb = cu(be);
    size_t total = 0;
    if (n_spans == 0)
        return;
    if (n_spans > AW_CAP ||
        gpt_cuda_adamw_table(spans, n_spans, cb->aw_new_ends, cb->aw_new_decay, &total) < 0) {
        for (size_t i = 0; i < n_spans; i++) {
            size_t o = spans[i].off;
            cuda_adamw(be, params + o, grads + o, m + o, v + o, spans[i].n, lr, beta1, beta2, eps,
                       spans[i].decay ? weight_decay : 0.0f, grad_scale, bc1, bc2);
        }
        return;
    }
    cu_enter(cb);
    if (n_spans != cb->aw_n ||
        memcmp(cb->aw_ends, cb->aw_new_ends, n_spans * sizeof(uint64_t)) != 0 ||
        memcmp(cb->aw_decay, cb->aw_new_decay, n_spans * sizeof(uint32_t)) != 0) {
        memcpy(cb->aw_ends, cb->aw_new_ends, n_spans * sizeof(uint64_t));
        memcpy(cb->aw_decay, cb->aw_new_decay, n_spans * sizeof(uint32_t));
        /* Pageable sources: staged before the calls return, so the host
         * copies may change on the next call. */
        if (cu_ret(cb,
                   cudaMemcpyAsync(cb->aw_dev_ends, cb->aw_ends, n_spans * sizeof(uint64_t),
                                   cudaMemcpyHostToDevice, cb->compute),
                   "adamw table") < 0 ||
            cu_ret(cb,
                   cudaMemcpyAsync(cb->aw_dev_decay, cb->aw_decay, n_spans * sizeof(uint32_t),
                                   cudaMemcpyHostToDevice, cb->compute),
                   "adamw table") < 0) {
            cb->aw_n = 0;
            return;
        }
        cb->aw_n = n_spans;
    }
    size_t o = spans[0].off;
    uint64_t index0 = 0;
    uint16_t *pb = shd_out(cb, params + o, total, &index0);
    shd_wrote(cb, m + o, total * sizeof(float));
    shd_wrote(cb, v + o, total * sizeof(float));
    uint64_t stream = cb->sr_stream++;
    cuk_adamw_multi(cb->compute, params + o, pb, grads + o, m + o, v + o, total, cb->aw_dev_ends,
                    cb->aw_dev_decay, n_spans, lr, beta1, beta2, eps, weight_decay, grad_scale,
                    bc1, bc2, cb->sr_seed, stream, index0);
    cu_check(cb, "adamw_multi");
}

static double cuda_sumsq(struct gpt_backend *be, const float *x, size_t n)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    double *result = cb->sumsq_dev + GPT_CUDA_SUMSQ_MAX_BLOCKS;
    cuk_sumsq(cb->compute, x, n, cb->sumsq_dev, result);
    cu_check(cb, "sumsq");
    if (cu_ret(cb,
               cudaMemcpyAsync(cb->sumsq_host, result, sizeof(double), cudaMemcpyDeviceToHost,
                               cb->compute),
               "sumsq copy") < 0 ||
        cuda_sync(be) < 0)
        return NAN; /* the error stays recorded for the next sync */
    return *cb->sumsq_host;
}

static void cuda_scale(struct gpt_backend *be, float *x, float s, size_t n)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    shd_wrote(cb, x, n * sizeof(float));
    cuk_scale(cb->compute, x, s, n);
    cu_check(cb, "scale");
}

/* ---- products fused with the GELU (cuBLASLt epilogues) ----------------------- */

/* pre = inp @ weight^T + bias and out = gelu(pre) in the product's own
 * pass (GELU_AUX_BIAS: pre is the epilogue's aux output, column-major
 * (OC, N) with ld OC, i.e. row-major (N, OC)). Falls back to the separate
 * product and GELU kernel where cuBLASLt refuses. */
static void cuda_matmul_gelu_forward(struct gpt_backend *be, float *out, float *pre,
                                     const float *inp, const float *weight, const float *bias,
                                     size_t N, size_t C, size_t OC)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    int m = (int)OC, n = (int)N, k = (int)C;
    struct lt_epi e = {bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, bias,
                       NULL, pre, m};
    const uint16_t *wb = NULL, *ib = NULL;
    if (cb->bf16) {
        wb = shd_in(cb, weight, OC * C);
        ib = shd_in(cb, inp, N * C);
    }
    int done;
    if (wb && ib)
        done = lt_matmul(cb, CUDA_R_16BF, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, wb, k, ib, k, out, m,
                         0.0f, &e) == 0;
    else
        done = lt_matmul(cb, CUDA_R_32F, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, weight, k, inp, k, out,
                         m, 0.0f, &e) == 0;
    if (!done) {
        cuda_matmul_forward(be, pre, inp, weight, bias, N, C, OC);
        cuda_gelu_forward(be, out, pre, N * OC);
        return;
    }
    shd_wrote(cb, out, N * OC * sizeof(float));
    shd_wrote(cb, pre, N * OC * sizeof(float));
}

/* matmul_backward whose dinp is multiplied by gelu'(pre_gelu): the DGELU
 * epilogue on the dinp product (column-major D (C, N) = W (C, OC) dout^T,
 * aux = pre_gelu with ld C), then the weight and bias gradients as
 * matmul_backward computes them. Falls back to the separate ops where
 * cuBLASLt refuses. */
static void cuda_matmul_backward_dgelu(struct gpt_backend *be, float *dinp, float *dweight,
                                       float *dbias, const float *dout, const float *inp,
                                       const float *weight, const float *pre_gelu, size_t N,
                                       size_t C, size_t OC)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    int n = (int)N, c = (int)C, oc = (int)OC;
    struct lt_epi e = {CUBLASLT_EPILOGUE_DGELU, NULL, NULL, pre_gelu, c};
    const uint16_t *wb = NULL, *db = NULL;
    if (cb->bf16) {
        wb = shd_in(cb, weight, OC * C);
        db = shd_in(cb, dout, N * OC);
    }
    int done;
    if (wb && db)
        done = lt_matmul(cb, CUDA_R_16BF, CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, wb, c, db, oc, dinp,
                         c, 0.0f, &e) == 0;
    else
        done = lt_matmul(cb, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, weight, c, dout, oc,
                         dinp, c, 0.0f, &e) == 0;
    if (!done) {
        cuda_matmul_backward(be, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
        cuda_gelu_backward(be, dinp, pre_gelu, dinp, N * C);
        return;
    }
    shd_wrote(cb, dinp, N * C * sizeof(float));
    cuda_matmul_backward(be, NULL, dweight, dbias, dout, inp, weight, N, C, OC);
}

/* fp32 (0), bf16 (1) or auto (2, = bf16), enum gpt_precision, with
 * GPT_BACKEND_PREC_NO_TF32 or'd in to keep fp32 products strict; without
 * it fp32 products run on TF32 tensor cores (trainer.tf32, default true).
 * Leaving bf16 frees the shadows; entering it starts the
 * stochastic-rounding streams afresh. */
static int cuda_set_precision(struct gpt_backend *be, int precision, uint64_t seed)
{
    struct gpt_cuda_backend *cb = cu(be);
    int tf32 = !(precision & GPT_BACKEND_PREC_NO_TF32);
    if (precision & ~(GPT_BACKEND_PREC_MASK | GPT_BACKEND_PREC_NO_TF32))
        return -EINVAL;
    precision &= GPT_BACKEND_PREC_MASK;
    if (precision == 2)
        precision = 1; /* auto: bf16 is this backend's fast path */
    if (precision != 0 && precision != 1)
        return -EINVAL;
    cb->tf32 = tf32;
    cu_enter(cb);
    pthread_mutex_lock(&cb->shd_mu);
    if (!precision)
        while (cb->n_shd > 0)
            shd_free_at_locked(cb, cb->n_shd - 1);
    cb->bf16 = precision;
    cb->sr_seed = seed;
    cb->sr_stream = 0;
    pthread_mutex_unlock(&cb->shd_mu);
    return 0;
}

static const struct gpt_backend_ops cuda_ops = {
    /* .name = */ "cuda",
    /* .destroy = */ cuda_destroy,
    /* .alloc = */ cuda_alloc,
    /* .mem_free = */ cuda_mem_free,
    /* .upload = */ cuda_upload,
    /* .download = */ cuda_download,
    /* .copy = */ cuda_copy,
    /* .memzero = */ cuda_memzero,
    /* .sync = */ cuda_sync,
    /* .encoder_forward = */ cuda_encoder_forward,
    /* .encoder_backward = */ cuda_encoder_backward,
    /* .layernorm_forward = */ cuda_layernorm_forward,
    /* .layernorm_backward = */ cuda_layernorm_backward,
    /* .matmul_forward = */ cuda_matmul_forward,
    /* .matmul_backward = */ cuda_matmul_backward,
    /* .attention_forward = */ cuda_attention_forward,
    /* .attention_backward = */ cuda_attention_backward,
    /* .gelu_forward = */ cuda_gelu_forward,
    /* .gelu_backward = */ cuda_gelu_backward,
    /* .residual_forward = */ cuda_residual_forward,
    /* .softmax_xent = */ cuda_softmax_xent,
    /* .adamw = */ cuda_adamw,
    /* .sumsq = */ cuda_sumsq,
    /* .scale = */ cuda_scale,
    /* .set_precision = */ cuda_set_precision,
    /* .att_floats = */ cuda_att_floats,
    /* .matmul_gelu_forward = */ cuda_matmul_gelu_forward,
    /* .matmul_backward_dgelu = */ cuda_matmul_backward_dgelu,
    /* .adamw_multi = */ cuda_adamw_multi,
};

/* ---- construction and accessors -------------------------------------------- */

static const struct gpt_cuda_backend *cu_const(const struct gpt_backend *be)
{
    GPT_ASSERT(be && be->ops == &cuda_ops);
    return (const struct gpt_cuda_backend *)be;
}

static int cu_fail_new(struct gpt_cuda_backend *cb, struct gpt_err *err, const char *what,
                       const char *detail)
{
    cuda_destroy(&cb->head);
    return gpt_err_set(err, -GPT_E_CUDA, NULL, "cuda backend: %s: %s", what, detail);
}

extern "C" int gpt_backend_cuda_new(int device, struct gpt_backend **ret, struct gpt_err *err)
{
    char probe[512];
    int count = gpt_cuda_probe(probe, sizeof(probe));
    if (count < 0)
        return gpt_err_set(err, -GPT_E_CUDA, NULL, "cuda backend: %s", probe);
    if (count == 0)
        return gpt_err_set(err, -GPT_E_NODEVICE, NULL, "cuda backend: no GPU or no driver");
    if (device < 0 || device >= count)
        return gpt_err_set(err, -EINVAL, NULL, "cuda backend: device %d out of range (0..%d)",
                           device, count - 1);
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gpt_err_set(err, -GPT_E_CUDA, NULL, "cuda backend: cudaSetDevice(%d): %s", device,
                           cudaGetErrorString(e));
    }
    struct gpt_cuda_backend *cb = (struct gpt_cuda_backend *)calloc(1, sizeof(*cb));
    if (!cb)
        return gpt_err_set(err, -ENOMEM, NULL, "cuda backend: out of memory");
    cb->head.ops = &cuda_ops;
    cb->head.name = "cuda";
    cb->head.threads = 1;
    cb->device = device;
    cb->attn_want = GPT_CUDA_ATTN_FLASH;
    pthread_mutex_init(&cb->shd_mu, NULL);
    int optin = 0;
    if ((e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device)) !=
        cudaSuccess)
        return cu_fail_new(cb, err, "cudaDeviceGetAttribute", cudaGetErrorString(e));
    cb->smem_optin = (size_t)optin;
    if ((e = cudaStreamCreateWithFlags(&cb->compute, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&cb->comm, cudaStreamNonBlocking)) != cudaSuccess)
        return cu_fail_new(cb, err, "cudaStreamCreate", cudaGetErrorString(e));
    cublasStatus_t st;
    if ((st = cublasCreate(&cb->blas)) != CUBLAS_STATUS_SUCCESS ||
        (st = cublasSetStream(cb->blas, cb->compute)) != CUBLAS_STATUS_SUCCESS ||
        (st = cublasSetMathMode(cb->blas, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS)
        return cu_fail_new(cb, err, "cuBLAS", cublasGetStatusString(st));
    if ((st = cublasLtCreate(&cb->lt)) != CUBLAS_STATUS_SUCCESS)
        return cu_fail_new(cb, err, "cublasLtCreate", cublasGetStatusString(st));
    void *p;
    if (cu_malloc(cb, LT_WORKSPACE_BYTES, &p) < 0)
        return cu_fail_new(cb, err, "workspace", "cudaMalloc failed");
    cb->ws = p;
    /* cuBLAS and cuBLASLt run on the same stream, so they can share it. */
    if ((st = cublasSetWorkspace(cb->blas, cb->ws, LT_WORKSPACE_BYTES)) != CUBLAS_STATUS_SUCCESS)
        return cu_fail_new(cb, err, "cublasSetWorkspace", cublasGetStatusString(st));
    if (cu_malloc(cb, SCRATCH_FLOATS * sizeof(float), &p) < 0)
        return cu_fail_new(cb, err, "scratch", "cudaMalloc failed");
    cb->scratch = (float *)p;
    if (cu_malloc(cb, (GPT_CUDA_SUMSQ_MAX_BLOCKS + 1) * sizeof(double), &p) < 0)
        return cu_fail_new(cb, err, "sumsq", "cudaMalloc failed");
    cb->sumsq_dev = (double *)p;
    if (cu_malloc(cb, AW_CAP * (sizeof(uint64_t) + sizeof(uint32_t)), &p) < 0)
        return cu_fail_new(cb, err, "adamw table", "cudaMalloc failed");
    cb->aw_dev_ends = (uint64_t *)p;
    cb->aw_dev_decay = (uint32_t *)(cb->aw_dev_ends + AW_CAP);
    if ((e = cudaMallocHost((void **)&cb->sumsq_host, sizeof(double))) != cudaSuccess)
        return cu_fail_new(cb, err, "cudaMallocHost", cudaGetErrorString(e));
    /* Untrack the internal buffers from the table (they are freed by
     * destroy) but keep them in the byte counts. */
    cb->n_allocs = 0;
    if ((e = cudaStreamSynchronize(cb->compute)) != cudaSuccess)
        return cu_fail_new(cb, err, "cudaStreamSynchronize", cudaGetErrorString(e));
    *ret = &cb->head;
    return 0;
}

extern "C" int gpt_backend_is_cuda(const struct gpt_backend *be)
{
    return be && be->ops == &cuda_ops;
}

extern "C" void gpt_cuda_backend_mem_stats(const struct gpt_backend *be, size_t *ret_bytes,
                                           size_t *ret_peak_bytes)
{
    const struct gpt_cuda_backend *cb = cu_const(be);
    if (ret_bytes)
        *ret_bytes = cb->bytes;
    if (ret_peak_bytes)
        *ret_peak_bytes = cb->peak;
}

extern "C" int gpt_cuda_backend_device(const struct gpt_backend *be)
{
    return cu_const(be)->device;
}

extern "C" void gpt_cuda_backend_set_tf32(struct gpt_backend *be, int on)
{
    struct gpt_cuda_backend *cb = (struct gpt_cuda_backend *)cu_const(be);
    cb->tf32 = on != 0;
    cu_check_blas(
        cb, cublasSetMathMode(cb->blas, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
        "cublasSetMathMode");
}

extern "C" void *gpt_cuda_backend_compute_stream(const struct gpt_backend *be)
{
    return (void *)cu_const(be)->compute;
}

extern "C" void *gpt_cuda_backend_comm_stream(const struct gpt_backend *be)
{
    return (void *)cu_const(be)->comm;
}

extern "C" const char *gpt_cuda_backend_last_error(const struct gpt_backend *be)
{
    return cu_const(be)->err_msg;
}

extern "C" void gpt_cuda_backend_set_attention(struct gpt_backend *be, enum gpt_cuda_attn_kind want)
{
    struct gpt_cuda_backend *cb = (struct gpt_cuda_backend *)cu_const(be);
    cb->attn_want = want;
}

extern "C" void gpt_cuda_backend_attention_plan(const struct gpt_backend *be, size_t B, size_t T,
                                                size_t C, size_t NH, struct gpt_cuda_attn_plan *ret)
{
    cu_attn_plan(cu_const(be), ret, B, T, C, NH);
}

extern "C" void gpt_cuda_backend_note_write(struct gpt_backend *be, const void *ptr, size_t bytes)
{
    struct gpt_cuda_backend *cb = (struct gpt_cuda_backend *)cu_const(be);
    shd_wrote(cb, ptr, bytes);
}
