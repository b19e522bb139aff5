/*
 * cpu_backend: the fp32 CPU backend's lifecycle, memory slots and the
 * optimizer ops (AdamW, sum of squares, scale), plus its vtable. Backend
 * memory is ordinary host memory (64-byte aligned, zeroed), so transfers
 * are memcpy. Matrix products go to OpenBLAS (cpu_ops.c, cpu_attention.c),
 * everything else is OpenMP loops over `threads` threads. A backend belongs
 * to one worker thread.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "cpu_impl.h"

struct gpt_cpu_backend {
    struct gpt_backend head; /* must stay first */
};

static void cpu_destroy(struct gpt_backend *be)
{
    free(be);
}

static int cpu_alloc(struct gpt_backend *be, size_t bytes, void **ret_ptr)
{
    (void)be;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded < bytes)
        return -ENOMEM;
    void *p = aligned_alloc(64, rounded);
    if (!p)
        return -ENOMEM;
    memset(p, 0, rounded);
    *ret_ptr = p;
    return 0;
}

static void cpu_mem_free(struct gpt_backend *be, void *ptr)
{
    (void)be;
    free(ptr);
}

static int cpu_upload(struct gpt_backend *be, void *dst, const void *host_src, size_t bytes)
{
    (void)be;
    memmove(dst, host_src, bytes);
    return 0;
}

static int cpu_download(struct gpt_backend *be, void *host_dst, const void *src, size_t bytes)
{
    (void)be;
    memmove(host_dst, src, bytes);
    return 0;
}

static void cpu_copy(struct gpt_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    memmove(dst, src, bytes);
}

static void cpu_memzero(struct gpt_backend *be, void *ptr, size_t bytes)
{
    (void)be;
    memset(ptr, 0, bytes);
}

/* AdamW constants of one call. */
struct cpu_adamw_k {
    float beta1, beta2, omb1, omb2; /* betas and 1 - betas */
    float eps, decay, step_size, inv_bc2_sqrt, grad_scale;
};

/* The portable loop. Same operation order as torch.optim.AdamW
 * (single-tensor, foreach=False): decay, moments, then
 * p -= (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps). */
static void adamw_range_c(float *restrict p, const float *restrict g, float *restrict m,
                          float *restrict v, size_t i0, size_t i1, const struct cpu_adamw_k *k)
{
    for (size_t i = i0; i < i1; i++) {
        float gi = g[i] * k->grad_scale;
        float mi = k->beta1 * m[i] + k->omb1 * gi;
        float vi = k->beta2 * v[i] + k->omb2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) * k->inv_bc2_sqrt + k->eps;
        p[i] = p[i] * k->decay - k->step_size * mi / denom;
    }
}

#if GPT_CPU_X86_DISPATCH
/* One AVX2 + FMA step of AdamW on 8 lanes. */
#define ADAMW_AVX2_STEP(gv, mv, vv, pv, ret_m, ret_v, ret_p)                                       \
    do {                                                                                           \
        __m256 gi_ = _mm256_mul_ps((gv), gs);                                                      \
        ret_m = _mm256_fmadd_ps(b1, (mv), _mm256_mul_ps(omb1, gi_));                               \
        ret_v = _mm256_fmadd_ps(b2, (vv), _mm256_mul_ps(_mm256_mul_ps(omb2, gi_), gi_));           \
        __m256 denom_ = _mm256_fmadd_ps(_mm256_sqrt_ps(ret_v), ibc2, eps);                         \
        __m256 upd_ = _mm256_div_ps(_mm256_mul_ps(step, ret_m), denom_);                           \
        ret_p = _mm256_fmsub_ps((pv), decay, upd_);                                                \
    } while (0)

/* AVX2 + FMA, 8 lanes; the tail goes through masked loads and stores with
 * the same arithmetic, so every element's result is independent of its
 * position (sharded optimizer state gets bitwise the same update). Written
 * with intrinsics because gcc only vectorises sqrtf under -fno-math-errno,
 * which a function attribute cannot switch on. */
__attribute__((target("avx2,fma"))) static void
adamw_range_avx2(float *restrict p, const float *restrict g, float *restrict m, float *restrict v,
                 size_t i0, size_t i1, const struct cpu_adamw_k *k)
{
    const __m256 b1 = _mm256_set1_ps(k->beta1), b2 = _mm256_set1_ps(k->beta2);
    const __m256 omb1 = _mm256_set1_ps(k->omb1), omb2 = _mm256_set1_ps(k->omb2);
    const __m256 eps = _mm256_set1_ps(k->eps), decay = _mm256_set1_ps(k->decay);
    const __m256 step = _mm256_set1_ps(k->step_size), ibc2 = _mm256_set1_ps(k->inv_bc2_sqrt);
    const __m256 gs = _mm256_set1_ps(k->grad_scale);
    size_t i = i0;
    for (; i + 8 <= i1; i += 8) {
        __m256 mi, vi, pi;
        ADAMW_AVX2_STEP(_mm256_loadu_ps(g + i), _mm256_loadu_ps(m + i), _mm256_loadu_ps(v + i),
                        _mm256_loadu_ps(p + i), mi, vi, pi);
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        _mm256_storeu_ps(p + i, pi);
    }
    if (i < i1) {
        /* Masked stores are slow on AMD, so only the tail uses them. */
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(i1 - i)), lane);
        __m256 mi, vi, pi;
        ADAMW_AVX2_STEP(_mm256_maskload_ps(g + i, mask), _mm256_maskload_ps(m + i, mask),
                        _mm256_maskload_ps(v + i, mask), _mm256_maskload_ps(p + i, mask), mi, vi,
                        pi);
        _mm256_maskstore_ps(m + i, mask, mi);
        _mm256_maskstore_ps(v + i, mask, vi);
        _mm256_maskstore_ps(p + i, mask, pi);
    }
}
#endif

static void cpu_adamw(struct gpt_backend *be, float *restrict params, const float *restrict grads,
                      float *restrict m, float *restrict v, size_t n, float lr, float beta1,
                      float beta2, float eps, float weight_decay, float grad_scale, float bc1,
                      float bc2)
{
    const struct cpu_adamw_k k = {
        .beta1 = beta1,
        .beta2 = beta2,
        .omb1 = 1.0f - beta1,
        .omb2 = 1.0f - beta2,
        .eps = eps,
        .decay = 1.0f - lr * weight_decay,
        .step_size = lr / bc1,
        .inv_bc2_sqrt = 1.0f / sqrtf(bc2),
        .grad_scale = grad_scale,
    };
    void (*range)(float *restrict, const float *restrict, float *restrict, float *restrict, size_t,
                  size_t, const struct cpu_adamw_k *) = adamw_range_c;
#if GPT_CPU_X86_DISPATCH
    if (gpt_cpu_has_avx2_fma())
        range = adamw_range_avx2;
#endif
    int nt = n >= GPT_CPU_PAR_MIN ? be->threads : 1;
    /* Chunks of whole cache lines per thread. */
    size_t chunk = ((n + (size_t)nt - 1) / (size_t)nt + 15) & ~(size_t)15;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i0 = 0; i0 < n; i0 += chunk)
        range(params, grads, m, v, i0, i0 + chunk < n ? i0 + chunk : n, &k);
}

GPT_CPU_CLONES
static double cpu_sumsq(struct gpt_backend *be, const float *restrict x, size_t n)
{
    double acc = 0.0;
    int nt = n >= GPT_CPU_PAR_MIN ? be->threads : 1;
#pragma omp parallel for simd num_threads(nt) schedule(static) reduction(+ : acc)
    for (size_t i = 0; i < n; i++)
        acc += (double)x[i] * (double)x[i];
    return acc;
}

GPT_CPU_CLONES
static void cpu_scale(struct gpt_backend *be, float *restrict x, float s, size_t n)
{
    int nt = n >= GPT_CPU_PAR_MIN ? be->threads : 1;
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}

static const struct gpt_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .mem_free = cpu_mem_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .copy = cpu_copy,
    .memzero = cpu_memzero,
    .sync = NULL,
    .encoder_forward = gpt_cpu_encoder_forward,
    .encoder_backward = gpt_cpu_encoder_backward,
    .layernorm_forward = gpt_cpu_layernorm_forward,
    .layernorm_backward = gpt_cpu_layernorm_backward,
    .matmul_forward = gpt_cpu_matmul_forward,
    .matmul_backward = gpt_cpu_matmul_backward,
    .attention_forward = gpt_cpu_attention_forward,
    .attention_backward = gpt_cpu_attention_backward,
    .gelu_forward = gpt_cpu_gelu_forward,
    .gelu_backward = gpt_cpu_gelu_backward,
    .residual_forward = gpt_cpu_residual_forward,
    .softmax_xent = gpt_cpu_softmax_xent,
    .adamw = cpu_adamw,
    .sumsq = cpu_sumsq,
    .scale = cpu_scale,
    .grads_assign = 1, /* the ops zero dweight and dbias first: the same bits */
};

int gpt_backend_cpu_new(int threads, struct gpt_backend **ret, struct gpt_err *err)
{
    if (threads < 1 || threads > 1024)
        return gpt_err_set(err, -EINVAL, NULL, "cpu backend: threads must be 1..1024, got %d",
                           threads);
    struct gpt_cpu_backend *cb = calloc(1, sizeof(*cb));
    if (!cb)
        return gpt_err_set(err, -ENOMEM, NULL, "cpu backend: out of memory");
    cb->head.ops = &cpu_ops;
    cb->head.name = "cpu";
    cb->head.threads = threads;
    /* OpenBLAS's thread count is process-wide; a worker asks for as many
     * BLAS threads as it has compute threads (one unless told otherwise). */
    openblas_set_num_threads(threads);
    *ret = &cb->head;
    return 0;
}
