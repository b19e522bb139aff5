/*
 * cuda_blas: cuBLAS(Lt) loaded at first use (see cuda_blas.h).
 */
#define _GNU_SOURCE /* dladdr */
#include "cuda_blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

struct gpt_cublas_api gpt_cublas;

static pthread_once_t cublas_once = PTHREAD_ONCE_INIT;
static int cublas_rc;
static char cublas_why[GPT_ERR_MSG_MAX];

#define CUBLAS_STR2(x) #x
#define CUBLAS_STR(x)  CUBLAS_STR2(x)

/* The library by its soname (the executable's run path, the loader's
 * cache), else from the folder of the cudart this process loaded: the two
 * ship together. */
static void *cublas_open(const char *soname)
{
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    Dl_info info;
    if (h || !dladdr((void *)cudaGetDeviceCount, &info) || !info.dli_fname)
        return h;
    const char *slash = strrchr(info.dli_fname, '/');
    char path[4096];
    if (!slash || snprintf(path, sizeof(path), "%.*s/%s", (int)(slash - info.dli_fname),
                           info.dli_fname, soname) >= (int)sizeof(path))
        return NULL;
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

static void cublas_load_once(void)
{
    void *h = cublas_open(GPTD_CUBLAS_SONAME);
    if (!h) {
        const char *why = dlerror();
        snprintf(cublas_why, sizeof(cublas_why), "cannot load %s: %s", GPTD_CUBLAS_SONAME,
                 why ? why : "not found");
        cublas_rc = -GPT_E_NODEVICE;
        return;
    }
    /* dlsym on cuBLAS's handle also finds cuBLASLt's symbols: it is a
     * dependency of cuBLAS. */
#define CUBLAS_RESOLVE(f)                                                                          \
    if (cublas_rc == 0 && !(gpt_cublas.f = (__typeof__(gpt_cublas.f))dlsym(h, CUBLAS_STR(f)))) {   \
        snprintf(cublas_why, sizeof(cublas_why), "%s has no %s", GPTD_CUBLAS_SONAME,               \
                 CUBLAS_STR(f));                                                                   \
        cublas_rc = -GPT_E_NODEVICE;                                                               \
    }
    GPT_CUBLAS_FUNCS(CUBLAS_RESOLVE)
#undef CUBLAS_RESOLVE
    if (cublas_rc < 0)
        memset(&gpt_cublas, 0, sizeof(gpt_cublas));
}

int gpt_cublas_load(struct gpt_err *err)
{
    pthread_once(&cublas_once, cublas_load_once);
    if (cublas_rc < 0)
        return gpt_err_set(err, cublas_rc, NULL, "%s", cublas_why);
    return 0;
}
