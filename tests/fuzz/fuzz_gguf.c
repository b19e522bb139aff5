/*
 * Fuzz target: GGUF files (engine/fmt/gguf.c's reader). The input is a
 * whole file: header, metadata, tensor table and data are parsed with
 * every length, count and offset checked against the input.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gpt_err err;
    struct gpt_model_config cfg;
    float *params = NULL;
    size_t n = 0;
    if (gpt_gguf_read_mem(data, size, "fuzz", &cfg, &params, &n, &err) == 0) {
        if (!params || n == 0)
            abort();
        free(params);
    }
    return 0;
}
