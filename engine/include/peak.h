/*
 * peak: the machine's achievable matrix-multiply rate, measured once per
 * run for MFU (model FLOPs utilisation) and for benchmarks' "fraction of
 * the sgemm ceiling". Blocks for about a tenth of a second.
 */
#ifndef GPT_PEAK_H
#define GPT_PEAK_H

#include <stddef.h>

/* FLOP/s of cblas_sgemm on (M x K) @ (K x N) with the calling thread's
 * current OpenBLAS thread setting, best of a few repetitions within about
 * `budget_s` seconds. 0 on allocation failure. Any thread. */
double gpt_peak_sgemm_flops(size_t M, size_t K, size_t N, double budget_s);

#endif
