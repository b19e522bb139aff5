/*
 * cuda_probe: asks the CUDA runtime how many GPUs this host has, without
 * failing on hosts that have no driver (cudart reports that as an error,
 * which we turn into "zero devices"), and tells that case apart from a
 * host whose GPUs CUDA cannot use (driver too old, initialisation failed).
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "cuda_probe.h"

int gpt_cuda_host_has_gpu_nodes(void)
{
    /* The NVIDIA kernel driver creates these nodes; containers given a GPU
     * get them bind-mounted. */
    return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0;
}

int gpt_cuda_probe_verdict(const struct gpt_cuda_probe_facts *f, char *msg, size_t cap)
{
    if (f->err == 0 && f->count > 0) {
        if (msg && cap)
            snprintf(msg, cap, "%d GPU(s); driver supports CUDA %d.%d, runtime %d.%d", f->count,
                     f->driver / 1000, f->driver % 1000 / 10, f->runtime / 1000,
                     f->runtime % 1000 / 10);
        return f->count;
    }
    /* No visible device (CUDA_VISIBLE_DEVICES empty or no GPU) is the
     * ordinary "no GPU"; so is any failure on a host without device nodes. */
    if (f->err == 0 || f->err == cudaErrorNoDevice || !f->has_nodes) {
        if (msg && cap)
            snprintf(msg, cap, "no GPU (%s)", f->err == 0 ? "no device" : f->err_text);
        return 0;
    }
    if (msg && cap)
        snprintf(msg, cap,
                 "GPU device nodes exist but CUDA failed to initialise: cudaGetDeviceCount: "
                 "%s (%s); driver supports CUDA %d.%d, runtime is %d.%d%s",
                 f->err_name, f->err_text, f->driver / 1000, f->driver % 1000 / 10,
                 f->runtime / 1000, f->runtime % 1000 / 10,
                 f->err == cudaErrorInsufficientDriver ? ": the driver is too old for this runtime"
                                                       : "");
    return -EIO;
}

int gpt_cuda_probe(char *msg, size_t cap)
{
    struct gpt_cuda_probe_facts f = {0};
    cudaError_t e = cudaGetDeviceCount(&f.count);
    (void)cudaGetLastError();
    f.err = (int)e;
    f.err_name = cudaGetErrorName(e);
    f.err_text = cudaGetErrorString(e);
    f.has_nodes = e == cudaSuccess ? 1 : gpt_cuda_host_has_gpu_nodes();
    cudaDriverGetVersion(&f.driver);
    cudaRuntimeGetVersion(&f.runtime);
    (void)cudaGetLastError();
    return gpt_cuda_probe_verdict(&f, msg, cap);
}

int gpt_cuda_device_count(void)
{
    int n = gpt_cuda_probe(NULL, 0);
    return n > 0 ? n : 0;
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
