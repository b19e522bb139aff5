/*
 * fuzz_safetensors: libFuzzer target for the safetensors header reader
 * (gpt_st_parse_header). The input is a whole file. For inputs whose first
 * byte is odd, the 8-byte length prefix is rewritten to the input's length
 * minus 8 (all of it header), so the fuzzer reaches the JSON and tensor
 * checks instead of stopping at the length check every time.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    if (size > 9 && (buf[0] & 1) && buf[1] == 0xff) {
        uint64_t h = size - 8;
        for (int i = 0; i < 8; i++)
            buf[i] = (uint8_t)(h >> (8 * i));
    }
    struct gpt_st_index ix = {0};
    struct gpt_err err;
    if (gpt_st_parse_header(buf, size, size, "fuzz", &ix, &err) == 0) {
        /* every tensor lies inside the file */
        for (size_t i = 0; i < ix.n; i++)
            if (ix.data_start + ix.t[i].end > size || ix.t[i].begin > ix.t[i].end)
                abort();
        (void)gpt_st_find(&ix, "a");
    }
    gpt_st_index_done(&ix);
    free(buf);
    return 0;
}
