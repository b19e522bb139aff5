/*
 * cuda_dnn: cuDNN, loaded at run time for the optional cuDNN attention
 * path, never linked, and built without cuDNN's headers: the build must
 * not need cuDNN, and a host without it keeps the hand-written attention
 * kernels. The table holds the handle calls and cuDNN's C graph API
 * (the "backend" descriptors: create, set and get attributes, finalize,
 * execute) with their C signatures, cudnnStatus_t as int and every
 * descriptor and handle as void *.
 *
 * Where the library is looked for, in order: libcudnn.so.9 by the
 * loader's search (the run path, LD_LIBRARY_PATH, the loader's cache);
 * beside the cudart this process loaded (a CUDA toolkit's lib64 holds
 * both); and where cudart lives in a Python environment's nvidia/
 * folder (nvidia/cuda_runtime/lib), that environment's nvidia/cudnn/lib.
 * Plain C and C++; any thread.
 */
#ifndef GPT_CUDA_DNN_H
#define GPT_CUDA_DNN_H

#include <stddef.h>
#include <stdint.h>

#include "gpt_err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GPT_CUDNN_SONAME "libcudnn.so.9"

struct gpt_cudnn_api {
    size_t (*cudnnGetVersion)(void);
    const char *(*cudnnGetErrorString)(int status);
    int (*cudnnCreate)(void **handle);
    int (*cudnnDestroy)(void *handle);
    int (*cudnnSetStream)(void *handle, void *stream);
    int (*cudnnBackendCreateDescriptor)(int type, void **desc);
    int (*cudnnBackendDestroyDescriptor)(void *desc);
    int (*cudnnBackendSetAttribute)(void *desc, int name, int type, int64_t count,
                                    const void *values);
    int (*cudnnBackendGetAttribute)(void *desc, int name, int type, int64_t requested,
                                    int64_t *ret_count, void *values);
    int (*cudnnBackendFinalize)(void *desc);
    int (*cudnnBackendExecute)(void *handle, void *plan, void *variant_pack);
};

/* Filled by gpt_cudnn_load; read-only afterwards. */
extern struct gpt_cudnn_api gpt_cudnn;

/* The places to try for `soname` after the loader's own search, given the
 * path of the cudart in use (NULL: none known): its folder, then, when
 * that folder is .../nvidia/<package>/lib, .../nvidia/cudnn/lib. Writes
 * at most `max` paths of `cap` bytes each to out; returns how many.
 * Pure. */
int gpt_cudnn_candidates(const char *cudart_path, const char *soname, char (*out)[4096], int max);

/* Opens `soname` (the loader's search, then gpt_cudnn_candidates beside
 * this process's cudart) and resolves the whole table into *ret: 0, with
 * the path or soname that loaded in where (cap bytes); or -GPT_E_NODEVICE
 * with *ret zeroed and why naming the library and every place tried (or
 * the missing symbol). The library stays loaded on success only. */
int gpt_cudnn_open(const char *soname, struct gpt_cudnn_api *ret, char *where, size_t where_cap,
                   char *why, size_t why_cap);

/* Loads GPT_CUDNN_SONAME into gpt_cudnn once per process (thread-safe;
 * later calls return the first result). 0, or -GPT_E_NODEVICE with err
 * saying why: the caller then keeps the hand-written attention kernels. */
int gpt_cudnn_load(struct gpt_err *err);

#ifdef __cplusplus
}
#endif

#endif
