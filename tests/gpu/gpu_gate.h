/*
 * gpu_gate: the first step of every GPU test program.
 */
#ifndef GPT_TEST_GPU_GATE_H
#define GPT_TEST_GPU_GATE_H

#include <stdio.h>

#include "cuda/cuda_probe.h"

/* The host's GPU count (> 0) to go on with, or the negated exit status the
 * program must end with, said on stdout or stderr: -77 where the host has
 * no GPU (ctest: skipped), -1 where GPUs exist and CUDA cannot use them
 * (the error's name and text). */
static inline int gpu_test_gate(void)
{
    char probe[512];
    int n = gpt_cuda_probe(probe, sizeof(probe));
    if (n < 0) {
        fprintf(stderr, "FAIL: %s\n", probe);
        return -1;
    }
    if (n == 0) {
        printf("%s: skipped\n", probe);
        return -77;
    }
    return n;
}

#endif
