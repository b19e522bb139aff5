/*
 * peak: the FLOP/s an MFU (model FLOPs utilisation) figure divides by.
 * On a CPU the machine's achievable matrix-multiply rate, measured once
 * per run (blocks for about a tenth of a second); on a GPU the datasheet's
 * dense tensor-core peak, from a table keyed by the name and compute
 * capability the device reports. Pure apart from the measurement.
 */
#ifndef GPT_PEAK_H
#define GPT_PEAK_H

#include <stddef.h>

/* FLOP/s of cblas_sgemm on (M x K) @ (K x N) with the calling thread's
 * current OpenBLAS thread setting, best of a few repetitions within about
 * `budget_s` seconds. 0 on allocation failure. Any thread. */
double gpt_peak_sgemm_flops(size_t M, size_t K, size_t N, double budget_s);

/* Which of a device's peaks a run's matrix products reach for: bf16
 * tensor cores, TF32 tensor cores (fp32 storage, TF32 allowed), or plain
 * fp32 on the CUDA cores. */
enum gpt_peak_math { GPT_PEAK_BF16, GPT_PEAK_TF32, GPT_PEAK_FP32, GPT_PEAK_MATH_COUNT };

/* One row of the device table: `name` is a part of the name the device
 * reports (cudaDeviceProp.name, e.g. "NVIDIA H100 80GB HBM3"), `cc` its
 * compute capability as major * 10 + minor; flops the dense peaks (no
 * structured sparsity) of the SXM or PCIe card the row names. */
struct gpt_device_peak {
    const char *name;
    int cc;
    double flops[GPT_PEAK_MATH_COUNT];
};

/* The table's row for a device that reports `name` and compute capability
 * `cc`: the first row whose cc is equal and whose name occurs in `name`
 * (variants such as "H100 PCIe" come before "H100"). NULL when none does:
 * the caller says the device is unknown rather than print an MFU of 0.
 * Returns static storage. Any thread. */
const struct gpt_device_peak *gpt_peak_device_find(const char *name, int cc);

/* Static name of a math kind ("bf16", "tf32", "fp32"). */
const char *gpt_peak_math_name(enum gpt_peak_math m);

#endif
