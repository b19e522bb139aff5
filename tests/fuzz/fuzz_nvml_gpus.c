/*
 * libFuzzer target: daemon/nvml_text, the GPU readings a heartbeat carries
 * ("gpu": INDEX:UTIL:USED:TOTAL,...), parsed by the coordinator from any
 * node. Whatever the bytes: no crash or out-of-bounds read; a text that
 * parses formats back to the same text and gives a JSON array; one that
 * does not gives an error naming "gpu" and null as JSON.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_err.h"
#include "nvml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 2048)
        return 0;
    char *s = malloc(size + 1);
    GPT_ASSERT(s);
    memcpy(s, data, size);
    s[size] = '\0';
    struct nvml_gpu g[NVML_GPUS_WIRE_MAX];
    size_t n = 0;
    struct gpt_err err;
    gpt_err_clear(&err);
    int rc = nvml_gpus_parse(s, g, NVML_GPUS_WIRE_MAX, &n, &err);
    json_t *j = nvml_gpus_json(s);
    GPT_ASSERT(j);
    if (rc == 0) {
        GPT_ASSERT(n <= NVML_GPUS_WIRE_MAX && json_array_size(j) == n);
        char back[NVML_GPUS_TEXT_MAX];
        nvml_gpus_format(g, n, back, sizeof(back));
        GPT_ASSERT(strcmp(back, s) == 0);
    } else {
        GPT_ASSERT(rc == -EINVAL && strcmp(err.path, "gpu") == 0 && json_is_null(j));
    }
    json_decref(j);
    free(s);
    return 0;
}
