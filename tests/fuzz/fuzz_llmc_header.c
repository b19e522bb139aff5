/*
 * Fuzz target: llm.c checkpoints (engine/fmt/llmc.c). The input is a whole
 * file: the header is parsed and checked against the input's size, and a
 * file that passes is read into gptd's layout (float32 or bfloat16).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "llmc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gpt_llmc_header h;
    struct gpt_err err;
    struct gpt_model_config cfg;
    float *params = NULL;
    size_t n = 0;
    if (gpt_llmc_parse_header(data, size, size, "fuzz", &h, &err) == 0 &&
        (h.file_bytes != size || h.Vp < h.V))
        abort(); /* a header that passes describes exactly this input */
    if (gpt_llmc_read_mem(data, size, "fuzz", &cfg, &params, &n, &err) == 0) {
        if (!params || n == 0 || (size_t)cfg.vocab_size > n)
            abort();
        free(params);
    }
    return 0;
}
