/*
 * cuda_matmul: the CUDA backend's matrix products. cuBLASLt with what it
 * can fuse as an epilogue (bias; the bias gradient, BGRADB; GELU with its
 * pre-activation as aux, and the GELU gradient, DGELU) when every pointer
 * is 16-byte aligned and a heuristic algorithm exists (cached per shape,
 * refusals too), else plain cuBLAS (SGEMM, or GemmEx for bf16) with the
 * separate kernels. Row-major products are computed as column-major ones
 * on the transposes. In bf16 mode the operands come from the shadows
 * (cuda_shadow.cu) and accumulation is fp32; outputs are written as bf16
 * only into the output's shadow where the shadow rules allow
 * (gemm_bf16_own), else fp32. Gradients of the weights stay fp32.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cuda_impl.h"

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
    const void *bias; /* of D's type */
    float *bgrad;
    const void *aux; /* of D's type */
    int ldaux;
};

static const struct lt_epi lt_none = {CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, NULL, 0};

/* One product as cublasLtMatmul takes it, with the heuristic's candidate
 * algorithms: what the autotune runs again per candidate. */
struct lt_call {
    struct gpt_cuda_backend *cb;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    const void *A, *B, *C;
    void *D;
    float beta;
    const cublasLtMatmulHeuristicResult_t *res;
    cudaEvent_t ev[2];
};

/* gpt_cuda_plan_lt_tune's timer: candidate i once on the compute stream,
 * its milliseconds by events, -1 when cuBLASLt or CUDA refused. */
static double lt_time(void *ctx, int i)
{
    struct lt_call *c = (struct lt_call *)ctx;
    float alpha = 1.0f, ms = 0;
    if (c->res[i].state != CUBLAS_STATUS_SUCCESS ||
        cudaEventRecord(c->ev[0], c->cb->compute) != cudaSuccess ||
        GPT_CUBLAS(cublasLtMatmul)(c->cb->lt, c->desc, &alpha, c->A, c->la, c->B, c->lb, &c->beta,
                                   c->C, c->ld, c->D, c->ld, &c->res[i].algo, c->cb->ws,
                                   LT_WORKSPACE_BYTES, c->cb->compute) != CUBLAS_STATUS_SUCCESS ||
        cudaEventRecord(c->ev[1], c->cb->compute) != cudaSuccess ||
        cudaEventSynchronize(c->ev[1]) != cudaSuccess ||
        cudaEventElapsedTime(&ms, c->ev[0], c->ev[1]) != cudaSuccess)
        return -1;
    return ms;
}

/* The autotune (trainer.gemm_autotune) of the shape `key` on its first
 * product: the `found` candidates timed on the real operands
 * (gpt_cuda_plan_lt_tune), the winner stored in hit->algo and named on
 * stderr, once per shape. A product that accumulates into D (beta != 0,
 * C = D: the weight gradients) has D (its d_bytes) saved first and put back
 * after, so the timing runs leave no trace; every other output is written
 * again by the real call that follows. Nothing is tuned while the stream
 * is being captured into a graph (events cannot be waited on then): the
 * heuristic's first stays. The waits here are the first step's only. */
static void lt_tune(struct lt_call *c, struct lt_cache_ent *hit, int found, const int *key,
                    size_t d_bytes)
{
    struct gpt_cuda_backend *cb = c->cb;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    void *save = NULL;
    double ms[GPT_CUDA_LT_TUNE_MAX];
    int best = -1;
    if (cudaStreamIsCapturing(cb->compute, &cap) != cudaSuccess ||
        cap != cudaStreamCaptureStatusNone)
        return;
    if (c->beta != 0.0f && c->C == c->D &&
        (cudaMallocAsync(&save, d_bytes, cb->compute) != cudaSuccess ||
         cudaMemcpyAsync(save, c->D, d_bytes, cudaMemcpyDeviceToDevice, cb->compute) !=
             cudaSuccess))
        goto out;
    if (cudaEventCreate(&c->ev[0]) != cudaSuccess)
        goto out;
    if (cudaEventCreate(&c->ev[1]) == cudaSuccess) {
        best = gpt_cuda_plan_lt_tune(found, lt_time, c, ms);
        cudaEventDestroy(c->ev[1]);
    }
    cudaEventDestroy(c->ev[0]);
    if (save &&
        cudaMemcpyAsync(c->D, save, d_bytes, cudaMemcpyDeviceToDevice, cb->compute) != cudaSuccess)
        best = -1; /* D could not be put back: the error is sticky, cu_check names it */
out:
    if (save)
        cudaFreeAsync(save, cb->compute);
    if (best < 0)
        return;
    hit->algo = c->res[best].algo;
    fprintf(stderr,
            "gptd: gemm autotune: m %d n %d k %d (op %d,%d, epilogue %d, beta %d, types %d): "
            "algorithm %d of %d, %.4f ms (the heuristic's first: %.4f ms)\n",
            key[2], key[3], key[4], key[0], key[1], key[11], key[12], key[14], best, found,
            ms[best], ms[0]);
}

/* Column-major D = A op B (with the epilogue e) + beta D with cuBLASLt; A
 * and B are of type `ab` (CUDA_R_32F or CUDA_R_16BF), D of type `dt`
 * (CUDA_R_32F, or CUDA_R_16BF with bf16 A and B: a bf16-only output), the
 * bias and aux of D's type (cuBLASLt's default), the bias gradient fp32
 * (with an fp32 D), and the accumulation is fp32 (TF32 tensor cores for
 * fp32 inputs when allowed). `Cm` is the beta term's matrix, of D's type
 * and layout; NULL means D itself (accumulate in place). Returns 0 when
 * done, 1 when no algorithm fits or cuBLASLt refuses the epilogue (the
 * caller falls back; a refusal is cached, so the next call falls back at
 * once). */
static int lt_matmul_c(struct gpt_cuda_backend *cb, cudaDataType_t ab, cublasOperation_t ta,
                       cublasOperation_t tb, int m, int n, int k, const void *A, int lda,
                       const void *B, int ldb, cudaDataType_t dt, void *D, int ldd, float beta,
                       const struct lt_epi *e, const void *Cm)
{
    size_t es = ab == CUDA_R_16BF ? 2 : 4, ds = dt == CUDA_R_16BF ? 2 : 4;
    int al_a = cu_align(A, (size_t)lda * es), al_b = cu_align(B, (size_t)ldb * es);
    int al_d = cu_align(D, (size_t)ldd * ds);
    if (!Cm)
        Cm = D;
    /* The heuristic is told C is aligned like D. */
    if (cu_align(Cm, (size_t)ldd * ds) < al_d)
        return 1;
    if (!e)
        e = &lt_none;
    const void *epi_vec = e->bias ? e->bias : (const void *)e->bgrad;
    if (al_a < 16 || al_b < 16 || al_d < 16 || (epi_vec && cu_align(epi_vec, 0) < 16) ||
        (e->aux && cu_align(e->aux, (size_t)e->ldaux * ds) < 16) ||
        (dt == CUDA_R_16BF && (ab != CUDA_R_16BF || e->bgrad)))
        return 1;
    /* (ab, dt) packed in one int: both are small enum values. */
    int key[LT_KEY_INTS] = {(int)ta,
                            (int)tb,
                            m,
                            n,
                            k,
                            lda,
                            ldb,
                            ldd,
                            al_a,
                            al_b,
                            al_d,
                            (int)e->kind,
                            beta != 0.0f,
                            cb->tf32,
                            (int)ab * 256 + (int)dt,
                            e->ldaux};
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
    cublasStatus_t st = GPT_CUBLAS(cublasLtMatmulDescCreate)(&desc, ct, CUDA_R_32F);
    if (st != CUBLAS_STATUS_SUCCESS)
        goto out;
    GPT_CUBLAS(cublasLtMatmulDescSetAttribute)(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    GPT_CUBLAS(cublasLtMatmulDescSetAttribute)(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    if (e->kind != CUBLASLT_EPILOGUE_DEFAULT) {
        cublasLtEpilogue_t epi = e->kind;
        GPT_CUBLAS(cublasLtMatmulDescSetAttribute)
        (desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
    }
    if (epi_vec) {
        GPT_CUBLAS(cublasLtMatmulDescSetAttribute)
        (desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &epi_vec, sizeof(epi_vec));
        cudaDataType_t bt = dt;
        GPT_CUBLAS(cublasLtMatmulDescSetAttribute)
        (desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt));
    }
    if (e->aux) {
        /* The aux type is left at its default, D's. */
        int64_t ldaux = e->ldaux;
        GPT_CUBLAS(cublasLtMatmulDescSetAttribute)
        (desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e->aux, sizeof(e->aux));
        GPT_CUBLAS(cublasLtMatmulDescSetAttribute)
        (desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux, sizeof(ldaux));
    }
    if (GPT_CUBLAS(cublasLtMatrixLayoutCreate)(&la, ab, ta == CUBLAS_OP_N ? m : k,
                                               ta == CUBLAS_OP_N ? k : m,
                                               lda) != CUBLAS_STATUS_SUCCESS ||
        GPT_CUBLAS(cublasLtMatrixLayoutCreate)(&lb, ab, tb == CUBLAS_OP_N ? k : n,
                                               tb == CUBLAS_OP_N ? n : k,
                                               ldb) != CUBLAS_STATUS_SUCCESS ||
        GPT_CUBLAS(cublasLtMatrixLayoutCreate)(&ld, dt, m, n, ldd) != CUBLAS_STATUS_SUCCESS)
        goto out;
    if (!hit) {
        hit = &cb->cache[cb->cache_next++ % LT_CACHE_SIZE];
        hit->valid = LT_REFUSED; /* until an algorithm is found */
        memcpy(hit->key, key, sizeof(key));
        if (GPT_CUBLAS(cublasLtMatmulPreferenceCreate)(&pref) != CUBLAS_STATUS_SUCCESS)
            goto out;
        size_t wsb = LT_WORKSPACE_BYTES;
        uint32_t u_a = (uint32_t)al_a, u_b = (uint32_t)al_b, u_d = (uint32_t)al_d;
        GPT_CUBLAS(cublasLtMatmulPreferenceSetAttribute)
        (pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb));
        GPT_CUBLAS(cublasLtMatmulPreferenceSetAttribute)
        (pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &u_a, sizeof(u_a));
        GPT_CUBLAS(cublasLtMatmulPreferenceSetAttribute)
        (pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &u_b, sizeof(u_b));
        GPT_CUBLAS(cublasLtMatmulPreferenceSetAttribute)
        (pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &u_d, sizeof(u_d));
        GPT_CUBLAS(cublasLtMatmulPreferenceSetAttribute)
        (pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &u_d, sizeof(u_d));
        cublasLtMatmulHeuristicResult_t res[GPT_CUDA_LT_TUNE_MAX];
        int found = 0;
        st = GPT_CUBLAS(cublasLtMatmulAlgoGetHeuristic)(cb->lt, desc, la, lb, ld, ld, pref,
                                                        cb->lt_tune ? GPT_CUDA_LT_TUNE_MAX : 1, res,
                                                        &found);
        if (st != CUBLAS_STATUS_SUCCESS || found == 0)
            goto out;
        hit->valid = LT_USABLE;
        hit->algo = res[0].algo;
        if (found > 1) {
            struct lt_call call = {cb, desc, la, lb, ld, A, B, Cm, D, beta, res, {NULL, NULL}};
            lt_tune(&call, hit, found, key, ((size_t)ldd * (size_t)(n - 1) + (size_t)m) * ds);
        }
    }
    {
        float alpha = 1.0f;
        st = GPT_CUBLAS(cublasLtMatmul)(cb->lt, desc, &alpha, A, la, B, lb, &beta, Cm, ld, D, ld,
                                        &hit->algo, cb->ws, LT_WORKSPACE_BYTES, cb->compute);
        if (st == CUBLAS_STATUS_NOT_SUPPORTED && e->kind != CUBLASLT_EPILOGUE_DEFAULT) {
            hit->valid = LT_REFUSED; /* nothing was enqueued: fall back */
            goto out;
        }
        cu_check_blas(cb, st, "cublasLtMatmul");
        ret = 0;
    }
out:
    if (pref)
        GPT_CUBLAS(cublasLtMatmulPreferenceDestroy)(pref);
    if (ld)
        GPT_CUBLAS(cublasLtMatrixLayoutDestroy)(ld);
    if (lb)
        GPT_CUBLAS(cublasLtMatrixLayoutDestroy)(lb);
    if (la)
        GPT_CUBLAS(cublasLtMatrixLayoutDestroy)(la);
    if (desc)
        GPT_CUBLAS(cublasLtMatmulDescDestroy)(desc);
    return ret;
}

static int lt_matmul(struct gpt_cuda_backend *cb, cudaDataType_t ab, cublasOperation_t ta,
                     cublasOperation_t tb, int m, int n, int k, const void *A, int lda,
                     const void *B, int ldb, cudaDataType_t dt, void *D, int ldd, float beta,
                     const struct lt_epi *e)
{
    return lt_matmul_c(cb, ab, ta, tb, m, n, k, A, lda, B, ldb, dt, D, ldd, beta, e, NULL);
}

/* Row-major, strided-batched: C(M,N) = alpha op(A) op(B) + beta C, each
 * computed as the column-major C^T = op(B)^T op(A)^T. */
void cu_gemm_rm(struct gpt_cuda_backend *cb, bool ta, bool tb, int M, int N, int K, float alpha,
                const float *A, int lda, long long sa, const float *B, int ldb, long long sb,
                float beta, float *C, int ldc, long long sc, int batch)
{
    cublasStatus_t st = GPT_CUBLAS(cublasSgemmStridedBatched)(
        cb->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
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
    if (lt_matmul(cb, CUDA_R_16BF, ta, tb, m, n, k, A, lda, B, ldb, CUDA_R_32F, D, ldd, beta, &e) ==
        0)
        return;
    if (bias) {
        cuk_bias_broadcast(cb->compute, D, bias, (size_t)n, (size_t)m);
        cu_check(cb, "bias_broadcast");
        beta = 1.0f;
    }
    float alpha = 1.0f;
    cu_check_blas(cb,
                  GPT_CUBLAS(cublasGemmEx)(cb->blas, ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda,
                                           B, CUDA_R_16BF, ldb, &beta, D, CUDA_R_32F, ldd,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  "cublasGemmEx bf16");
}

/* The bf16-only output of a product: column-major D (m, n) = op(A) op(B)
 * with the epilogue e (its bias and aux in bf16) written as bf16 straight
 * into the shadow of `out` (the floats [out, out + count)), when the
 * shadow rules allow it there (cu_shd_own) and cuBLASLt takes it. Returns
 * 1 when done (the range is then owned), 0 when the caller must write
 * fp32 as usual. `aux_out` (optional, count floats too): the GELU_AUX
 * epilogue's pre-activation, also bf16-only in its own shadow range.
 * `res` (optional): a bf16 matrix laid out as D added with beta 1 (the
 * skip connection, cuBLASLt's C). */
static int gemm_bf16_own_c(struct gpt_cuda_backend *cb, cublasOperation_t ta, cublasOperation_t tb,
                           int m, int n, int k, const uint16_t *A, int lda, const uint16_t *B,
                           int ldb, float *out, size_t count, cublasLtEpilogue_t kind,
                           const float *bias, float *aux_out, const float *aux_in,
                           const uint16_t *res)
{
    /* In this order, each step only when the ones before succeeded (the
     * plan's recorder, bench_gpu_train's rec_gemm_own, mirrors it). */
    uint16_t *ob = cu_shd_own(cb, out, count), *xb = NULL;
    const uint16_t *bb = NULL, *ab = NULL;
    if (!ob || (aux_out && !(xb = cu_shd_own(cb, aux_out, count))) ||
        (bias && !(bb = cu_shd_in(cb, bias, (size_t)m))) ||
        (aux_in && !(ab = cu_shd_in(cb, aux_in, count))))
        return 0;
    struct lt_epi e = {kind, bb, NULL, aux_out ? (const void *)xb : (const void *)ab,
                       aux_out || aux_in ? m : 0};
    if (lt_matmul_c(cb, CUDA_R_16BF, ta, tb, m, n, k, A, lda, B, ldb, CUDA_R_16BF, ob, m,
                    res ? 1.0f : 0.0f, &e, res))
        return 0;
    cu_shd_owned(cb, out, count);
    if (aux_out)
        cu_shd_owned(cb, aux_out, count);
    return 1;
}

static int gemm_bf16_own(struct gpt_cuda_backend *cb, cublasOperation_t ta, cublasOperation_t tb,
                         int m, int n, int k, const uint16_t *A, int lda, const uint16_t *B,
                         int ldb, float *out, size_t count, cublasLtEpilogue_t kind,
                         const float *bias, float *aux_out, const float *aux_in)
{
    return gemm_bf16_own_c(cb, ta, tb, m, n, k, A, lda, B, ldb, out, count, kind, bias, aux_out,
                           aux_in, NULL);
}

void cuda_matmul_forward(struct gpt_backend *be, float *out, const float *inp, const float *weight,
                         const float *bias, size_t N, size_t C, size_t OC)
{
    /* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias: column-major
     * out^T (OC,N) = W^T^T ... i.e. m = OC, n = N, k = C, A = weight (T). */
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    int m = (int)OC, n = (int)N, k = (int)C;
    if (bias)
        cu_f32(cb, bias, OC * sizeof(float));
    if (cb->bf16) {
        const uint16_t *wb = cu_shd_in(cb, weight, OC * C), *ib = cu_shd_in(cb, inp, N * C);
        if (wb && ib) {
            if (gemm_bf16_own(cb, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, wb, k, ib, k, out, N * OC,
                              bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, NULL,
                              NULL))
                return;
            cu_shd_wrote(cb, out, N * OC * sizeof(float));
            gemm_bf16(cb, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, wb, k, ib, k, out, m, 0.0f, bias);
            return;
        }
    }
    cu_f32(cb, inp, N * C * sizeof(float));
    cu_f32(cb, weight, OC * C * sizeof(float));
    cu_shd_wrote(cb, out, N * OC * sizeof(float));
    struct lt_epi e = {bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, NULL, NULL,
                       0};
    if (lt_matmul(cb, CUDA_R_32F, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, weight, k, inp, k, CUDA_R_32F,
                  out, m, 0.0f, &e) == 0)
        return;
    float beta = 0.0f;
    if (bias) {
        cuk_bias_broadcast(cb->compute, out, bias, N, OC);
        cu_check(cb, "bias_broadcast");
        beta = 1.0f;
    }
    cu_gemm_rm(cb, false, true, n, m, k, 1.0f, inp, k, 0, weight, k, 0, beta, out, m, 0, 1);
}

void cuda_matmul_backward(struct gpt_backend *be, float *dinp, float *dweight, float *dbias,
                          const float *dout, const float *inp, const float *weight, size_t N,
                          size_t C, size_t OC)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    int n = (int)N, c = (int)C, oc = (int)OC;
    const uint16_t *wb = NULL, *db = NULL, *ib = NULL;
    if (cb->bf16) {
        wb = dinp ? cu_shd_in(cb, weight, OC * C) : NULL;
        db = cu_shd_in(cb, dout, N * OC);
        ib = cu_shd_in(cb, inp, N * C);
    }
    /* The gradients accumulate: read as fp32 (never owned, but the rule
     * is every fp32 read asks). */
    cu_f32(cb, dweight, OC * C * sizeof(float));
    cu_shd_wrote(cb, dweight, OC * C * sizeof(float));
    if (dbias) {
        cu_f32(cb, dbias, OC * sizeof(float));
        cu_shd_wrote(cb, dbias, OC * sizeof(float));
    }
    /* dinp (N,C) = dout (N,OC) @ weight (OC,C), as bf16 only where the
     * shadow rules allow. */
    if (dinp && wb && db) {
        if (!gemm_bf16_own(cb, CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, wb, c, db, oc, dinp, N * C,
                           CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, NULL)) {
            cu_shd_wrote(cb, dinp, N * C * sizeof(float));
            gemm_bf16(cb, CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, wb, c, db, oc, dinp, c, 0.0f, NULL);
        }
    } else if (dinp) {
        cu_f32(cb, dout, N * OC * sizeof(float));
        cu_f32(cb, weight, OC * C * sizeof(float));
        cu_shd_wrote(cb, dinp, N * C * sizeof(float));
        if (lt_matmul(cb, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, weight, c, dout, oc,
                      CUDA_R_32F, dinp, c, 0.0f, NULL))
            cu_gemm_rm(cb, false, false, n, c, oc, 1.0f, dout, oc, 0, weight, c, 0, 0.0f, dinp, c,
                       0, 1);
    }
    /* dweight (OC,C) += dout^T (OC,N) @ inp (N,C): column-major D (c, oc)
     * = A (c, N) B^T with A = inp, B = dout (oc, N), k = N. With a bias,
     * the BGRADB epilogue sums op(B) = dout^T over k in the same pass:
     * bgrad[j] = sum_n dout[n, j], dbias's increment. It writes: where
     * dbias is stored (be->grad_assign) it goes there, else to scratch and
     * is added after (gpt_cuda_plan_bgrad_direct). */
    int assign = be->grad_assign, direct = gpt_cuda_plan_bgrad_direct(dbias, assign);
    struct lt_epi bg = {CUBLASLT_EPILOGUE_BGRADB, NULL, direct ? dbias : cb->scratch, NULL, 0};
    const struct lt_epi *e = dbias && (direct || OC <= SCRATCH_FLOATS) ? &bg : NULL;
    int summed = 0;
    /* be->grad_assign: dweight = the product (beta 0: not read), dbias =
     * the sums. */
    float gb = assign ? 0.0f : 1.0f;
    if (ib && db) {
        summed = e && lt_matmul(cb, CUDA_R_16BF, CUBLAS_OP_N, CUBLAS_OP_T, c, oc, n, ib, c, db, oc,
                                CUDA_R_32F, dweight, c, gb, e) == 0;
        if (!summed)
            gemm_bf16(cb, CUBLAS_OP_N, CUBLAS_OP_T, c, oc, n, ib, c, db, oc, dweight, c, gb, NULL);
    } else {
        cu_f32(cb, dout, N * OC * sizeof(float));
        cu_f32(cb, inp, N * C * sizeof(float));
        summed = e && lt_matmul(cb, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_T, c, oc, n, inp, c, dout,
                                oc, CUDA_R_32F, dweight, c, gb, e) == 0;
        if (!summed && lt_matmul(cb, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_T, c, oc, n, inp, c, dout,
                                 oc, CUDA_R_32F, dweight, c, gb, NULL))
            cu_gemm_rm(cb, true, false, oc, c, n, 1.0f, dout, oc, 0, inp, c, 0, gb, dweight, c, 0,
                       1);
    }
    if (dbias && summed && assign && !direct) { /* dbias = bgrad (direct: written there) */
        cudaError_t ce = cudaMemcpyAsync(dbias, cb->scratch, OC * sizeof(float),
                                         cudaMemcpyDeviceToDevice, cb->compute);
        if (ce != cudaSuccess)
            (void)cu_ret(cb, ce, "matmul_backward dbias copy");
    } else if (dbias && summed && !assign) {
        cuk_residual_forward(cb->compute, dbias, dbias, cb->scratch, OC); /* dbias += bgrad */
        cu_check(cb, "matmul_backward dbias add");
    } else if (dbias && !summed) {
        cu_f32(cb, dout, N * OC * sizeof(float));
        cuk_colsum_add(cb->compute, dbias, dout, N, OC, cb->scratch, SCRATCH_FLOATS, assign);
        cu_check(cb, "matmul_backward dbias");
    }
}

/* out = inp @ weight^T + bias + res: the skip connection is the product's
 * beta term (cuBLASLt's C = res, D = out, beta 1), read once by the
 * epilogue instead of a separate residual pass over out. In bf16 mode,
 * where res is held in bf16 only (its producer, the encoder or the
 * previous block's product, wrote it so) and the shadow rules allow, C and D
 * are bf16 (the residual stream stays bf16 only; fp32 accumulation, the
 * sum rounded once); else out is fp32. Falls back to the product and the
 * residual kernel where cuBLASLt refuses. */
void cuda_matmul_residual_forward(struct gpt_backend *be, float *out, const float *inp,
                                  const float *weight, const float *bias, const float *res,
                                  size_t N, size_t C, size_t OC)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    int m = (int)OC, n = (int)N, k = (int)C;
    if (bias)
        cu_f32(cb, bias, OC * sizeof(float));
    const uint16_t *wb = NULL, *ib = NULL, *rb = NULL;
    if (cb->bf16) {
        wb = cu_shd_in(cb, weight, OC * C);
        ib = cu_shd_in(cb, inp, N * C);
        rb = wb && ib ? cu_shd_held(cb, res, N * OC) : NULL;
    }
    /* In this order (bench_gpu_train's rec_matmul_residual_forward
     * mirrors it). */
    if (rb && gemm_bf16_own_c(cb, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, wb, k, ib, k, out, N * OC,
                              bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, NULL,
                              NULL, rb))
        return;
    cu_f32(cb, res, N * OC * sizeof(float));
    struct lt_epi e = {bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, NULL, NULL,
                       0};
    int done;
    if (wb && ib) {
        done = lt_matmul_c(cb, CUDA_R_16BF, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, wb, k, ib, k,
                           CUDA_R_32F, out, m, 1.0f, &e, res) == 0;
    } else {
        cu_f32(cb, inp, N * C * sizeof(float));
        cu_f32(cb, weight, OC * C * sizeof(float));
        done = lt_matmul_c(cb, CUDA_R_32F, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, weight, k, inp, k,
                           CUDA_R_32F, out, m, 1.0f, &e, res) == 0;
    }
    if (done) {
        cu_shd_wrote(cb, out, N * OC * sizeof(float));
        return;
    }
    cuda_matmul_forward(be, out, inp, weight, bias, N, C, OC);
    cu_f32(cb, out, N * OC * sizeof(float)); /* the product may have written bf16 only */
    cu_shd_wrote(cb, out, N * OC * sizeof(float));
    cuk_residual_forward(cb->compute, out, out, res, N * OC);
    cu_check(cb, "matmul_residual_forward residual");
}

/* ---- products fused with the GELU (cuBLASLt epilogues) ----------------------- */

/* pre = inp @ weight^T + bias and out = gelu(pre) in the product's own
 * pass (GELU_AUX_BIAS: pre is the epilogue's aux output, column-major
 * (OC, N) with ld OC, i.e. row-major (N, OC)). In bf16 mode both are
 * written as bf16 only where the shadow rules allow (the bias read as
 * bf16). Falls back to the separate product and GELU kernel where cuBLASLt
 * refuses. */
void cuda_matmul_gelu_forward(struct gpt_backend *be, float *out, float *pre, const float *inp,
                              const float *weight, const float *bias, size_t N, size_t C, size_t OC)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    if (cb->gelu_unfused) { /* GPT_BACKEND_PREC_GELU_UNFUSED: the epilogue's timing rival */
        cuda_matmul_forward(be, pre, inp, weight, bias, N, C, OC);
        cuda_gelu_forward(be, out, pre, N * OC);
        return;
    }
    int m = (int)OC, n = (int)N, k = (int)C;
    cublasLtEpilogue_t kind = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    struct lt_epi e = {kind, bias, NULL, pre, m};
    const uint16_t *wb = NULL, *ib = NULL;
    if (cb->bf16) {
        wb = cu_shd_in(cb, weight, OC * C);
        ib = cu_shd_in(cb, inp, N * C);
    }
    if (wb && ib &&
        gemm_bf16_own(cb, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, wb, k, ib, k, out, N * OC, kind, bias,
                      pre, NULL))
        return;
    if (bias)
        cu_f32(cb, bias, OC * sizeof(float));
    int done;
    if (wb && ib) {
        done = lt_matmul(cb, CUDA_R_16BF, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, wb, k, ib, k,
                         CUDA_R_32F, out, m, 0.0f, &e) == 0;
    } else {
        cu_f32(cb, inp, N * C * sizeof(float));
        cu_f32(cb, weight, OC * C * sizeof(float));
        done = lt_matmul(cb, CUDA_R_32F, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, weight, k, inp, k,
                         CUDA_R_32F, out, m, 0.0f, &e) == 0;
    }
    if (!done) {
        cuda_matmul_forward(be, pre, inp, weight, bias, N, C, OC);
        cuda_gelu_forward(be, out, pre, N * OC);
        return;
    }
    cu_shd_wrote(cb, out, N * OC * sizeof(float));
    cu_shd_wrote(cb, pre, N * OC * sizeof(float));
}

/* matmul_backward whose dinp is multiplied by gelu'(pre_gelu): the DGELU
 * epilogue on the dinp product (column-major D (C, N) = W (C, OC) dout^T,
 * aux = pre_gelu with ld C), then the weight and bias gradients as
 * matmul_backward computes them. In bf16 mode dinp is written as bf16 only
 * where the shadow rules allow, the aux then read as bf16 (the bf16-only
 * pre-activation of matmul_gelu_forward: no conversion). Falls back to the
 * separate ops where cuBLASLt refuses. */
void cuda_matmul_backward_dgelu(struct gpt_backend *be, float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp, const float *weight,
                                const float *pre_gelu, size_t N, size_t C, size_t OC)
{
    struct gpt_cuda_backend *cb = cu(be);
    cu_enter(cb);
    if (cb->gelu_unfused) {
        cuda_matmul_backward(be, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
        cuda_gelu_backward(be, dinp, pre_gelu, dinp, N * C);
        return;
    }
    int n = (int)N, c = (int)C, oc = (int)OC;
    struct lt_epi e = {CUBLASLT_EPILOGUE_DGELU, NULL, NULL, pre_gelu, c};
    const uint16_t *wb = NULL, *db = NULL;
    if (cb->bf16) {
        wb = cu_shd_in(cb, weight, OC * C);
        db = cu_shd_in(cb, dout, N * OC);
    }
    if (wb && db &&
        gemm_bf16_own(cb, CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, wb, c, db, oc, dinp, N * C,
                      CUBLASLT_EPILOGUE_DGELU, NULL, NULL, pre_gelu)) {
        cuda_matmul_backward(be, NULL, dweight, dbias, dout, inp, weight, N, C, OC);
        return;
    }
    cu_f32(cb, pre_gelu, N * C * sizeof(float));
    int done;
    if (wb && db) {
        done = lt_matmul(cb, CUDA_R_16BF, CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, wb, c, db, oc,
                         CUDA_R_32F, dinp, c, 0.0f, &e) == 0;
    } else {
        cu_f32(cb, weight, OC * C * sizeof(float));
        cu_f32(cb, dout, N * OC * sizeof(float));
        done = lt_matmul(cb, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, weight, c, dout, oc,
                         CUDA_R_32F, dinp, c, 0.0f, &e) == 0;
    }
    if (!done) {
        cuda_matmul_backward(be, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
        cuda_gelu_backward(be, dinp, pre_gelu, dinp, N * C);
        return;
    }
    cu_shd_wrote(cb, dinp, N * C * sizeof(float));
    cuda_matmul_backward(be, NULL, dweight, dbias, dout, inp, weight, N, C, OC);
}
