/*
 * Fuzz target: GGUF files (engine/fmt/gguf.c's reader). The input is a
 * whole file: header, metadata, tensor table and data are parsed with
 * every length, count and offset checked against the input. A file that
 * reads holds its model's tensors: at least 2 bytes for each parameter
 * (wte unpadded), so no header makes the reader allocate more than the
 * input's size in floats.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "gguf.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gpt_err err;
    struct gpt_model_config cfg;
    float *params = NULL;
    size_t n = 0;
    if (gpt_gguf_read_mem(data, size, "fuzz", &cfg, &params, &n, &err) == 0) {
        struct gpt_model m;
        if (!params || n == 0 || gpt_model_layout(&m, &cfg, &err) != 0 || m.n_params != n)
            abort();
        size_t stored = n - (m.Vp - (size_t)cfg.vocab_size) * (size_t)cfg.n_embd;
        if (stored * 2 > size)
            abort();
        free(params);
    }
    return 0;
}
