/*
 * libFuzzer target: proto/str_escape, the escaper of user strings for
 * gptctl's output and gptd's log. Whatever the bytes, the escaped text is
 * valid UTF-8 with no control character (C0, DEL, C1) and no line or bidi
 * mark left, fits GPT_STR_ESCAPE_SIZE, and a cut output is a prefix of the
 * whole one.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_err.h"
#include "str_escape.h"

static void check_clean(const char *out, size_t n, unsigned flags)
{
    const unsigned char *u = (const unsigned char *)out;
    for (size_t i = 0; i < n; i++) {
        bool keep = (flags & GPT_STR_ESCAPE_KEEP_NEWLINE) && (u[i] == '\n' || u[i] == '\t');
        GPT_ASSERT(keep || (u[i] >= 0x20 && u[i] != 0x7f));
        /* C1 controls are C2 80..9F; U+2028/9, U+202A-E are E2 80 A8..AE;
         * U+2066-9 are E2 81 A6..A9. */
        if (u[i] == 0xc2 && i + 1 < n)
            GPT_ASSERT(u[i + 1] > 0x9f);
        if (u[i] == 0xe2 && i + 2 < n && u[i + 1] == 0x80)
            GPT_ASSERT(u[i + 2] < 0xa8 || u[i + 2] > 0xae);
        if (u[i] == 0xe2 && i + 2 < n && u[i + 1] == 0x81)
            GPT_ASSERT(u[i + 2] < 0xa6 || u[i + 2] > 0xa9);
    }
    json_t *s = json_stringn(out, n); /* NULL when not valid UTF-8 */
    GPT_ASSERT(s);
    json_decref(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    unsigned flags = size > 0 && (data[0] & 1) ? GPT_STR_ESCAPE_KEEP_NEWLINE : 0;
    size_t cap = GPT_STR_ESCAPE_SIZE(size);
    char *out = malloc(cap);
    GPT_ASSERT(out);
    size_t n = gpt_str_escape(out, cap, (const char *)data, size, flags);
    GPT_ASSERT(n < cap);
    GPT_ASSERT(strlen(out) == n);
    check_clean(out, n, flags);

    /* A smaller buffer gets a prefix, cut at an escape boundary. */
    size_t small = size > 1 ? data[size - 1] % (n + 1) + 1 : 1;
    char *cut = malloc(small);
    GPT_ASSERT(cut);
    GPT_ASSERT(gpt_str_escape(cut, small, (const char *)data, size, flags) == n);
    size_t k = strlen(cut);
    GPT_ASSERT(k < small && memcmp(cut, out, k) == 0);
    check_clean(cut, k, flags);
    free(cut);
    free(out);
    return 0;
}
