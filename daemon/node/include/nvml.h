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

#include <jansson.h>

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

/* ---- a node's GPUs in its heartbeat ----
 * A heartbeat carries its node's GPU readings as one short text (the "gpu"
 * field of proto/cluster_msg), one entry per GPU joined by ",":
 *   INDEX:UTIL:USED:TOTAL      e.g. "0:87:40960:143771,1:-:-:-"
 * UTIL in percent (0..100), USED and TOTAL in MiB (0..2^40), "-" where the
 * device does not report it. Empty: no GPU (a CPU host). Pure functions,
 * any thread. */
#define NVML_GPUS_TEXT_MAX 512 /* with the NUL; fits CLUSTER_MSG_GPUS_MAX */
#define NVML_GPUS_WIRE_MAX 16  /* entries a heartbeat carries */

/* Writes the text of g[0..n) (at most NVML_GPUS_WIRE_MAX entries; whole
 * entries only, as many as fit in cap). Returns its length. */
size_t nvml_gpus_format(const struct nvml_gpu *g, size_t n, char *buf, size_t cap);
/* Parses a text as above into out[0..cap): 0 and *ret_n, or -EINVAL with
 * err naming the entry and what is wrong. Strict: no spaces, signs or
 * leading zeros; indexes below NVML_GPUS_MAX; USED <= TOTAL. */
int nvml_gpus_parse(const char *s, struct nvml_gpu *out, size_t cap, size_t *ret_n,
                    struct gpt_err *err);
/* [{"index", "util_ratio"?, "mem_used_bytes"?, "mem_total_bytes"?}] of a
 * text; an unparsable one gives null. New reference (NULL on ENOMEM). */
json_t *nvml_gpus_json(const char *s);

/* This host's GPUs as a heartbeat text (empty on a host without NVML).
 * Opens NVML on the first call and keeps it; a host where it failed to
 * open is not asked again. Loop thread only (one handle, unlocked);
 * blocks for the driver queries (milliseconds). */
void nvml_gpus_local(char *buf, size_t cap);

#endif
