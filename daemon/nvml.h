/*
 * nvml: GPU telemetry (utilisation, memory, temperature, power) through
 * NVIDIA's management library, loaded at run time with dlopen so that gptd
 * neither links it nor needs it: on a host without the driver
 * (libnvidia-ml.so.1 absent) nvml_open fails with -ENOENT and gptd exports
 * no GPU series.
 *
 * Thread: the caller's; NVML itself is thread-safe, and a struct nvml is
 * used by one thread at a time (the HTTP thread samples at scrape time).
 * nvml_sample blocks for the time of a few driver queries (milliseconds).
 */
#ifndef GPTD_NVML_H
#define GPTD_NVML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpt_err.h"

#define NVML_LIBRARY  "libnvidia-ml.so.1"
#define NVML_GPUS_MAX 64
#define NVML_NAME_MAX 96

/* One GPU's reading; a has_ flag is false where the device does not
 * report that value (those series are left out, not written as 0). */
struct nvml_gpu {
    unsigned index;
    char name[NVML_NAME_MAX];
    char uuid[NVML_NAME_MAX];
    bool has_util, has_mem, has_temp, has_power;
    double util_ratio; /* 0..1, GPU busy over the driver's last sample period */
    uint64_t mem_used_bytes, mem_total_bytes;
    double temp_celsius;
    double power_watts;
};

struct nvml;

/* Loads `library` (NULL: NVML_LIBRARY) and initialises NVML. Returns 0 and
 * a new handle, -ENOENT when the library cannot be loaded (no driver: the
 * normal case on a CPU host, err says why), -ENOSYS when a symbol is
 * missing, -EIO when nvmlInit fails. */
int nvml_open(const char *library, struct nvml **ret, struct gpt_err *err);

/* Reads up to `cap` GPUs into out[]; returns how many (>= 0), or -EIO when
 * the device count cannot be read. Blocks (driver queries). */
int nvml_sample(struct nvml *n, struct nvml_gpu *out, size_t cap);

/* Shuts NVML down and unloads the library. NULL allowed. */
void nvml_close(struct nvml *n);

#endif
