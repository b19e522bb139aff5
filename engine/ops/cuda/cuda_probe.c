/*
 * cuda_probe: asks the CUDA runtime how many GPUs this host has, without
 * failing on hosts that have no driver (cudart reports that as an error,
 * which we turn into "zero devices").
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdio.h>

#include "cuda_probe.h"

int gpt_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
        return 0;
    return n;
}

int gpt_cuda_device_info(int i, char *name, size_t cap, size_t *ret_mem_bytes)
{
    struct cudaDeviceProp prop;
    if (i < 0 || i >= gpt_cuda_device_count() || cudaGetDeviceProperties(&prop, i) != cudaSuccess)
        return -ENODEV;
    snprintf(name, cap, "%s", prop.name);
    *ret_mem_bytes = prop.totalGlobalMem;
    return 0;
}
