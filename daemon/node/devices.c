/*
 * devices: see devices.h.
 */
#include "devices.h"

#include <stdio.h>
#include <string.h>

#include "blas_select.h"
#include "factory.h"
#include "gpu_plan.h"

json_t *devices_json(void)
{
    json_t *o = json_pack("{s:[s], s:[]}", "backends", "cpu", "gpus");
    if (!o)
        return NULL;
    json_object_set_new(o, "blas", blas_select_json());
    int n = gpt_device_count();
    if (n > 0)
        json_array_append_new(json_object_get(o, "backends"), json_string("cuda"));
    for (int i = 0; i < n; i++) {
        char name[256];
        size_t mem = 0;
        if (gpt_device_info(i, name, sizeof(name), &mem) == 0)
            json_array_append_new(json_object_get(o, "gpus"),
                                  json_pack("{s:i, s:s, s:I}", "index", i, "name", name,
                                            "memory_bytes", (json_int_t)mem));
    }
    return o;
}

void devices_summary(char *buf, size_t cap)
{
    /* The CPU's matrix kernels matter for CPU jobs, so a CPU host names
     * them (a host with GPUs runs its jobs there). */
    char blas[64];
    blas_select_summary(blas, sizeof(blas));
    snprintf(buf, cap, "cpu, %s", blas);
    int n = gpt_device_count();
    char name[256];
    size_t mem = 0;
    if (n <= 0 || gpt_device_info(0, name, sizeof(name), &mem) != 0)
        return;
    int len = snprintf(buf, cap, "%dx %s %.0fGiB", n, name, (double)mem / (1024.0 * 1024 * 1024));
    /* NCCL's version and the interface it will use (gptd sets
     * NCCL_SOCKET_IFNAME at start unless the operator did; NCCL's "=NAME"
     * means exactly NAME). */
    int v = gpt_nccl_version();
    const char *ifname = gpu_plan_nccl_ifname_env();
    if (v > 0 && len > 0 && (size_t)len < cap)
        len += snprintf(buf + len, cap - (size_t)len, ", nccl %d.%d.%d on %s", v / 10000,
                        (v / 100) % 100, v % 100,
                        ifname ? ifname + (ifname[0] == '=') : "NCCL's choice");
    /* cuDNN, which the optional cuDNN attention needs (9.x codes are
     * major * 10000 + minor * 100 + patch) */
    int d = gpt_cudnn_version();
    if (len > 0 && (size_t)len < cap && d > 0)
        snprintf(buf + len, cap - (size_t)len, ", cudnn %d.%d.%d", d / 10000, (d / 100) % 100,
                 d % 100);
    else if (len > 0 && (size_t)len < cap)
        snprintf(buf + len, cap - (size_t)len, ", no cudnn");
}
