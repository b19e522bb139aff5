/*
 * cuda_probe: GPU discovery that is safe on hosts without a driver.
 */
#ifndef GPT_CUDA_PROBE_H
#define GPT_CUDA_PROBE_H

#include <stddef.h>

/* Number of usable GPUs (CUDA_VISIBLE_DEVICES respected); 0 when there is
 * no driver or no device. Any thread; cheap after the first call. */
int gpt_cuda_device_count(void);

/* Name and total memory of GPU `i` (0-based). Returns 0, or a negative
 * error when there is no such device. */
int gpt_cuda_device_info(int i, char *name, size_t cap, size_t *ret_mem_bytes);

#endif
