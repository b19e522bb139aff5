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

GPT_CPU_CLONES
static void cpu_adamw(struct gpt_backend *be, float *restrict params, const float *restrict grads,
                      float *restrict m, float *restrict v, size_t n, float lr, float beta1,
                      float beta2, float eps, float weight_decay, float grad_scale, float bc1,
                      float bc2)
{
    /* Same operation order as torch.optim.AdamW (single-tensor, foreach=False):
     * decay, moments, then p -= (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps). */
    float decay = 1.0f - lr * weight_decay;
    float step_size = lr / bc1;
    float bc2_sqrt = sqrtf(bc2);
    int nt = n >= GPT_CPU_PAR_MIN ? be->threads : 1;
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float denom = __builtin_sqrtf(vi) / bc2_sqrt + eps;
        params[i] = params[i] * decay - step_size * mi / denom;
    }
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
