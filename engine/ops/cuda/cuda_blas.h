/*
 * cuda_blas: cuBLAS and cuBLASLt, loaded when the first CUDA backend is
 * created instead of linked. Loading libcublasLt costs every process that
 * maps it about 210 MB of resident memory (measured: a program that only
 * links it peaks at 211 MB, one that links cudart at 1.5 MB), and every
 * gptd links the CUDA backend: the daemon, `gptd run` and each CPU rank
 * paid it without ever running a GEMM on a GPU.
 *
 * Call sites spell a call GPT_CUBLAS(cublasLtMatmul)(...): the name goes
 * through cuBLAS's own macros (cublasCreate is cublasCreate_v2), so the
 * table holds the symbols the headers would have linked. Plain C and C++.
 */
#ifndef GPT_CUDA_BLAS_H
#define GPT_CUDA_BLAS_H

#include <cublasLt.h>
#include <cublas_v2.h>

#include "gpt_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every cuBLAS(Lt) function the backend calls: GPT_CUBLAS_TYPED's by their
 * declared type, cublasGemmEx by its C signature (C++ also sees an inline
 * overload of it that takes a cudaDataType compute type). */
#define GPT_CUBLAS_FUNCS(X)                                                                        \
    GPT_CUBLAS_TYPED(X)                                                                            \
    X(cublasGemmEx)
#define GPT_CUBLAS_TYPED(X)                                                                        \
    X(cublasCreate)                                                                                \
    X(cublasDestroy)                                                                               \
    X(cublasSetStream)                                                                             \
    X(cublasSetMathMode)                                                                           \
    X(cublasSetWorkspace)                                                                          \
    X(cublasGetStatusString)                                                                       \
    X(cublasSgemmStridedBatched)                                                                   \
    X(cublasLtCreate)                                                                              \
    X(cublasLtDestroy)                                                                             \
    X(cublasLtMatmul)                                                                              \
    X(cublasLtMatmulAlgoGetHeuristic)                                                              \
    X(cublasLtMatmulDescCreate)                                                                    \
    X(cublasLtMatmulDescDestroy)                                                                   \
    X(cublasLtMatmulDescSetAttribute)                                                              \
    X(cublasLtMatmulPreferenceCreate)                                                              \
    X(cublasLtMatmulPreferenceDestroy)                                                             \
    X(cublasLtMatmulPreferenceSetAttribute)                                                        \
    X(cublasLtMatrixLayoutCreate)                                                                  \
    X(cublasLtMatrixLayoutDestroy)

#define GPT_CUBLAS_MEMBER(f) __typeof__(f) *f;
struct gpt_cublas_api {
    GPT_CUBLAS_TYPED(GPT_CUBLAS_MEMBER)
    cublasStatus_t (*cublasGemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                   int, const void *, const void *, cudaDataType, int, const void *,
                                   cudaDataType, int, const void *, void *, cudaDataType, int,
                                   cublasComputeType_t, cublasGemmAlgo_t);
};
#undef GPT_CUBLAS_MEMBER

/* Filled by gpt_cublas_load; read-only afterwards. */
extern struct gpt_cublas_api gpt_cublas;

#define GPT_CUBLAS(f) (gpt_cublas.f)

/* Loads cuBLAS (which brings cuBLASLt) and resolves the table, once per
 * process (thread-safe; later calls return the first result). The library
 * is looked up by its soname, then beside the cudart this process uses.
 * -GPT_E_NODEVICE naming the library and dlerror()'s text when it cannot
 * be loaded or lacks a symbol. */
int gpt_cublas_load(struct gpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
