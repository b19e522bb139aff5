/*
 * nvml: dlopen'd NVML (see nvml.h). Only the handful of entry points the
 * metrics need are resolved; their prototypes are declared here from
 * NVML's documented ABI (nvml.h of the CUDA toolkit is not needed to
 * build).
 */
#include "nvml.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* NVML's ABI: opaque device handles, int return codes (0 = success). */
typedef void *nvml_device_t;
struct nvml_utilization {
    unsigned gpu, memory;
};
struct nvml_memory {
    unsigned long long total, free, used;
};

#define NVML_TEMPERATURE_GPU 0

struct nvml {
    void *lib;
    int (*shutdown)(void);
    int (*count)(unsigned *);
    int (*handle)(unsigned, nvml_device_t *);
    int (*name)(nvml_device_t, char *, unsigned);
    int (*uuid)(nvml_device_t, char *, unsigned);
    int (*util)(nvml_device_t, struct nvml_utilization *);
    int (*mem)(nvml_device_t, struct nvml_memory *);
    int (*temp)(nvml_device_t, int, unsigned *);
    int (*power)(nvml_device_t, unsigned *);
};

int nvml_open(const char *library, struct nvml **ret, struct gpt_err *err)
{
    /* GPTD_NVML_LIBRARY names another library (tests load a stand-in). */
    const char *env = getenv("GPTD_NVML_LIBRARY");
    const char *libname = library ? library : env && env[0] ? env : NVML_LIBRARY;
    struct nvml *n = calloc(1, sizeof(*n));
    int (*init)(void) = NULL;
    int rc = 0;
    if (!n)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    n->lib = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        const char *why = dlerror();
        rc = gpt_err_set(err, -ENOENT, NULL, "%s: %s", libname, why ? why : "cannot be loaded");
        goto fail;
    }
    /* POSIX: a data pointer from dlsym converts to a function pointer. */
#define NVML_SYM(field, sym)                                                                       \
    do {                                                                                           \
        void *p_ = dlsym(n->lib, sym);                                                             \
        if (!p_) {                                                                                 \
            rc = gpt_err_set(err, -ENOSYS, NULL, "%s: no symbol %s", libname, sym);                \
            goto fail;                                                                             \
        }                                                                                          \
        memcpy(&(field), &p_, sizeof(p_));                                                         \
    } while (0)
    NVML_SYM(init, "nvmlInit_v2");
    NVML_SYM(n->shutdown, "nvmlShutdown");
    NVML_SYM(n->count, "nvmlDeviceGetCount_v2");
    NVML_SYM(n->handle, "nvmlDeviceGetHandleByIndex_v2");
    NVML_SYM(n->name, "nvmlDeviceGetName");
    NVML_SYM(n->uuid, "nvmlDeviceGetUUID");
    NVML_SYM(n->util, "nvmlDeviceGetUtilizationRates");
    NVML_SYM(n->mem, "nvmlDeviceGetMemoryInfo");
    NVML_SYM(n->temp, "nvmlDeviceGetTemperature");
    NVML_SYM(n->power, "nvmlDeviceGetPowerUsage");
#undef NVML_SYM
    int nrc = init();
    if (nrc != 0) {
        rc = gpt_err_set(err, -EIO, NULL, "%s: nvmlInit failed (NVML error %d)", libname, nrc);
        goto fail;
    }
    *ret = n;
    return 0;
fail:
    if (n->lib)
        dlclose(n->lib);
    free(n);
    return rc;
}

int nvml_sample(struct nvml *n, struct nvml_gpu *out, size_t cap)
{
    unsigned count = 0;
    if (n->count(&count) != 0)
        return -EIO;
    size_t k = 0;
    for (unsigned i = 0; i < count && k < cap; i++) {
        nvml_device_t dev;
        if (n->handle(i, &dev) != 0)
            continue;
        struct nvml_gpu *g = &out[k++];
        memset(g, 0, sizeof(*g));
        g->index = i;
        if (n->name(dev, g->name, sizeof(g->name)) != 0)
            g->name[0] = '\0';
        g->name[sizeof(g->name) - 1] = '\0';
        if (n->uuid(dev, g->uuid, sizeof(g->uuid)) != 0)
            g->uuid[0] = '\0';
        g->uuid[sizeof(g->uuid) - 1] = '\0';
        struct nvml_utilization u;
        if ((g->has_util = n->util(dev, &u) == 0))
            g->util_ratio = u.gpu / 100.0;
        struct nvml_memory m;
        if ((g->has_mem = n->mem(dev, &m) == 0)) {
            g->mem_used_bytes = m.used;
            g->mem_total_bytes = m.total;
        }
        unsigned t;
        if ((g->has_temp = n->temp(dev, NVML_TEMPERATURE_GPU, &t) == 0))
            g->temp_celsius = t;
        unsigned mw;
        if ((g->has_power = n->power(dev, &mw) == 0))
            g->power_watts = mw / 1000.0;
    }
    return (int)k;
}

void nvml_close(struct nvml *n)
{
    if (!n)
        return;
    n->shutdown();
    dlclose(n->lib);
    free(n);
}

void nvml_gpus_local(char *buf, size_t cap)
{
    /* Loop thread only: one handle for the heartbeats, opened once. */
    static struct nvml *local;
    static bool tried;
    if (cap)
        buf[0] = '\0';
    if (!tried) {
        struct gpt_err err;
        tried = true;
        if (nvml_open(NULL, &local, &err) < 0)
            local = NULL; /* no driver: a CPU host, no GPU text */
    }
    if (!local)
        return;
    struct nvml_gpu g[NVML_GPUS_WIRE_MAX];
    int n = nvml_sample(local, g, NVML_GPUS_WIRE_MAX);
    if (n > 0)
        nvml_gpus_format(g, (size_t)n, buf, cap);
}
