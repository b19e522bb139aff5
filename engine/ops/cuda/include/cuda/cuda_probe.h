/*
 * cuda_probe: GPU discovery that is safe on hosts without a driver.
 */
#ifndef GPT_CUDA_PROBE_H
#define GPT_CUDA_PROBE_H

#include <stddef.h>

/* Number of usable GPUs (CUDA_VISIBLE_DEVICES respected); 0 when there is
 * no driver or no device, and also when CUDA fails on a host that has GPUs
 * (use gpt_cuda_probe to tell those apart). Any thread. */
int gpt_cuda_device_count(void);

/* Like gpt_cuda_device_count, but separates "no GPU" from "GPUs exist and
 * CUDA cannot use them": returns the device count (> 0), 0 when the host
 * has no GPU (no /dev/nvidia* nodes, or no visible device), or -EIO when
 * device nodes exist but cudaGetDeviceCount fails (driver too old for the
 * runtime, initialisation error). `msg` (may be NULL) gets one line saying
 * which, with the CUDA error name and text and the driver and runtime
 * versions on failure. GPU tests skip (77) only on 0 and fail on -EIO. */
int gpt_cuda_probe(char *msg, size_t cap);

/* What gpt_cuda_probe learnt from the runtime, for its verdict. */
struct gpt_cuda_probe_facts {
    int err;              /* cudaGetDeviceCount's cudaError_t (0: success) */
    const char *err_name; /* its name and text (cudaGetErrorName/String) */
    const char *err_text;
    int count;           /* the device count it returned */
    int has_nodes;       /* gpt_cuda_host_has_gpu_nodes() */
    int driver, runtime; /* cudaDriverGetVersion, cudaRuntimeGetVersion */
};

/* gpt_cuda_probe's decision and message from those facts. Pure (unit
 * tests give it the facts of a broken host). */
int gpt_cuda_probe_verdict(const struct gpt_cuda_probe_facts *f, char *msg, size_t cap);

/* 1 when the NVIDIA driver's device nodes exist (/dev/nvidiactl or
 * /dev/nvidia0), whether or not CUDA can use them. */
int gpt_cuda_host_has_gpu_nodes(void);

/* Name and total memory of GPU `i` (0-based). Returns 0, or a negative
 * error when there is no such device. */
int gpt_cuda_device_info(int i, char *name, size_t cap, size_t *ret_mem_bytes);

/* cuDNN's version code (91400 is 9.14.0) where libcudnn.so.9 loads
 * (engine/ops/cuda/cuda_dnn.h says where it is looked for), 0 where it
 * does not: the cuDNN attention path is then unavailable and the
 * hand-written kernels run. Loads it at the first call (a small shim;
 * cuDNN loads its engines only when one is used). Any thread. */
int gpt_cuda_cudnn_version(void);

#endif
