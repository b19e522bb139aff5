/*
 * cuda_probe: GPU discovery that is safe on hosts without a driver.
 */
#ifndef GPT_CUDA_PROBE_H
#define GPT_CUDA_PROBE_H

/* Number of usable GPUs (CUDA_VISIBLE_DEVICES respected); 0 when there is
 * no driver or no device. Any thread; cheap after the first call. */
int gpt_cuda_device_count(void);

#endif
