/*
 * cuda_probe: asks the CUDA runtime how many GPUs this host has, without
 * failing on hosts that have no driver (cudart reports that as an error,
 * which we turn into "zero devices").
 */
#include <cuda_runtime_api.h>

#include "cuda_probe.h"

int gpt_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
        return 0;
    return n;
}
