/*
 * A stand-in for NVIDIA's libnvidia-ml.so.1 with the entry points
 * daemon/node/nvml.c resolves, so that the dlopen path is tested on hosts
 * without a GPU (test_metrics_text loads it by path). Two GPUs: the first
 * reports everything, the second no power (NVML_ERROR_NOT_SUPPORTED).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct fake_util {
    unsigned gpu, memory;
};
struct fake_mem {
    unsigned long long total, free, used;
};

#define FAKE_NOT_SUPPORTED 3

int nvmlInit_v2(void);
int nvmlShutdown(void);
int nvmlDeviceGetCount_v2(unsigned *n);
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **dev);
int nvmlDeviceGetName(void *dev, char *buf, unsigned cap);
int nvmlDeviceGetUUID(void *dev, char *buf, unsigned cap);
int nvmlDeviceGetUtilizationRates(void *dev, struct fake_util *u);
int nvmlDeviceGetMemoryInfo(void *dev, struct fake_mem *m);
int nvmlDeviceGetTemperature(void *dev, int sensor, unsigned *t);
int nvmlDeviceGetPowerUsage(void *dev, unsigned *mw);

static int fake_inited;

int nvmlInit_v2(void)
{
    fake_inited = 1;
    return 0;
}
int nvmlShutdown(void)
{
    fake_inited = 0;
    return 0;
}
int nvmlDeviceGetCount_v2(unsigned *n)
{
    *n = 2;
    return fake_inited ? 0 : 1;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **dev)
{
    *dev = (void *)(uintptr_t)(i + 1);
    return i < 2 ? 0 : 2;
}
int nvmlDeviceGetName(void *dev, char *buf, unsigned cap)
{
    snprintf(buf, cap, "Fake \"GPU\" %u", (unsigned)(uintptr_t)dev);
    return 0;
}
int nvmlDeviceGetUUID(void *dev, char *buf, unsigned cap)
{
    snprintf(buf, cap, "GPU-fake-%u", (unsigned)(uintptr_t)dev);
    return 0;
}
int nvmlDeviceGetUtilizationRates(void *dev, struct fake_util *u)
{
    u->gpu = 37 + (unsigned)(uintptr_t)dev;
    u->memory = 5;
    return 0;
}
int nvmlDeviceGetMemoryInfo(void *dev, struct fake_mem *m)
{
    (void)dev;
    m->total = 80ull << 30;
    m->used = 1ull << 30;
    m->free = m->total - m->used;
    return 0;
}
int nvmlDeviceGetTemperature(void *dev, int sensor, unsigned *t)
{
    (void)dev;
    *t = 51;
    return sensor == 0 ? 0 : 2;
}
int nvmlDeviceGetPowerUsage(void *dev, unsigned *mw)
{
    if ((uintptr_t)dev == 2)
        return FAKE_NOT_SUPPORTED;
    *mw = 123456;
    return 0;
}
