/*
 * cuda_dnn: cuDNN loaded at first use (see cuda_dnn.h).
 */
#define _GNU_SOURCE /* dladdr */
#include "cuda_dnn.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cuda/cuda_probe.h"

struct gpt_cudnn_api gpt_cudnn;

static pthread_once_t cudnn_once = PTHREAD_ONCE_INIT;
static int cudnn_rc;
static char cudnn_why[GPT_ERR_MSG_MAX];

#define CUDNN_CANDIDATES_MAX 2

int gpt_cudnn_candidates(const char *cudart_path, const char *soname, char (*out)[4096], int max)
{
    const char *slash = cudart_path ? strrchr(cudart_path, '/') : NULL;
    int n = 0;
    if (!slash || max < 1)
        return 0;
    int dir = (int)(slash - cudart_path);
    if (snprintf(out[n], sizeof(out[n]), "%.*s/%s", dir, cudart_path, soname) < (int)sizeof(out[n]))
        n++;
    /* .../nvidia/<package>/lib: the wheels' layout (nvidia-cuda-runtime,
     * nvidia-cudnn-cu13, ...), each package a folder of its own */
    const char *lib = slash - 4;
    if (dir >= 4 && strncmp(lib, "/lib", 4) == 0) {
        const char *pkg = lib;
        while (pkg > cudart_path && pkg[-1] != '/')
            pkg--;
        int nv = (int)(pkg - cudart_path);
        if (nv >= 8 && strncmp(pkg - 8, "/nvidia/", 8) == 0 && n < max &&
            strncmp(pkg, "cudnn/", 6) != 0 &&
            snprintf(out[n], sizeof(out[n]), "%.*scudnn/lib/%s", nv, cudart_path, soname) <
                (int)sizeof(out[n]))
            n++;
    }
    return n;
}

#define CUDNN_FUNCS(X)                                                                             \
    X(cudnnGetVersion)                                                                             \
    X(cudnnGetErrorString)                                                                         \
    X(cudnnCreate)                                                                                 \
    X(cudnnDestroy)                                                                                \
    X(cudnnSetStream)                                                                              \
    X(cudnnBackendCreateDescriptor)                                                                \
    X(cudnnBackendDestroyDescriptor)                                                               \
    X(cudnnBackendSetAttribute)                                                                    \
    X(cudnnBackendGetAttribute)                                                                    \
    X(cudnnBackendFinalize)                                                                        \
    X(cudnnBackendExecute)

#define CUDNN_STR2(x) #x
#define CUDNN_STR(x)  CUDNN_STR2(x)

int gpt_cudnn_open(const char *soname, struct gpt_cudnn_api *ret, char *where, size_t where_cap,
                   char *why, size_t why_cap)
{
    memset(ret, 0, sizeof(*ret));
    char tried[CUDNN_CANDIDATES_MAX][4096];
    int n = 0;
    const char *loaded = soname;
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        Dl_info info;
        if (dladdr((void *)cudaGetDeviceCount, &info) && info.dli_fname)
            n = gpt_cudnn_candidates(info.dli_fname, soname, tried, CUDNN_CANDIDATES_MAX);
        for (int i = 0; !h && i < n; i++)
            if ((h = dlopen(tried[i], RTLD_NOW | RTLD_LOCAL)))
                loaded = tried[i];
    }
    if (!h) {
        int len = snprintf(why, why_cap, "cannot load %s (the loader's search", soname);
        for (int i = 0; i < n && len > 0 && (size_t)len < why_cap; i++)
            len += snprintf(why + len, why_cap - (size_t)len, ", %s", tried[i]);
        if (len > 0 && (size_t)len < why_cap)
            snprintf(why + len, why_cap - (size_t)len, ")");
        return -GPT_E_NODEVICE;
    }
#define CUDNN_RESOLVE(f)                                                                           \
    if (!(ret->f = (__typeof__(ret->f))dlsym(h, CUDNN_STR(f)))) {                                  \
        snprintf(why, why_cap, "%s has no %s", loaded, CUDNN_STR(f));                              \
        memset(ret, 0, sizeof(*ret));                                                              \
        dlclose(h);                                                                                \
        return -GPT_E_NODEVICE;                                                                    \
    }
    CUDNN_FUNCS(CUDNN_RESOLVE)
#undef CUDNN_RESOLVE
    snprintf(where, where_cap, "%s", loaded);
    return 0;
}

static void cudnn_load_once(void)
{
    char where[4096];
    cudnn_rc = gpt_cudnn_open(GPT_CUDNN_SONAME, &gpt_cudnn, where, sizeof(where), cudnn_why,
                              sizeof(cudnn_why));
}

int gpt_cudnn_load(struct gpt_err *err)
{
    pthread_once(&cudnn_once, cudnn_load_once);
    if (cudnn_rc < 0)
        return gpt_err_set(err, cudnn_rc, NULL, "%s", cudnn_why);
    return 0;
}

int gpt_cuda_cudnn_version(void)
{
    struct gpt_err err;
    if (gpt_cudnn_load(&err) < 0)
        return 0;
    return (int)gpt_cudnn.cudnnGetVersion();
}
