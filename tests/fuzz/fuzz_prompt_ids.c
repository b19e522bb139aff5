/*
 * libFuzzer target: proto/prompt_ids, the `--prompt-ids 15496,11` parser.
 * Whatever the bytes, it never reads past them, fills at most `cap` ids,
 * each in [0, GPT_PROMPT_ID_MAX]; a success re-printed as "a,b,c" parses
 * to the same ids, and a failure names prompt_ids.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_err.h"
#include "prompt_ids.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    enum { CAP = 64 };
    int32_t ids[CAP], again[CAP];
    size_t n = 0, m = 0;
    struct gpt_err err;
    gpt_err_clear(&err);
    char *text = malloc(size ? size : 1); /* exactly the bytes: ASan sees any overread */
    GPT_ASSERT(text);
    memcpy(text, data, size);
    int rc = gpt_prompt_ids_parse(text, size, ids, CAP, &n, &err);
    free(text);
    if (rc < 0) {
        GPT_ASSERT(strcmp(err.path, "prompt_ids") == 0 && err.msg[0]);
        return 0;
    }
    GPT_ASSERT(n >= 1 && n <= CAP);
    char buf[CAP * 12];
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        GPT_ASSERT(ids[i] >= 0 && ids[i] <= GPT_PROMPT_ID_MAX);
        off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%s%d", i ? "," : "", ids[i]);
    }
    GPT_ASSERT(gpt_prompt_ids_parse(buf, off, again, CAP, &m, &err) == 0 && m == n);
    GPT_ASSERT(memcmp(ids, again, n * sizeof(ids[0])) == 0);
    return 0;
}
