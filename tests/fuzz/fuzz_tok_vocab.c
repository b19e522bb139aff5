/*
 * fuzz_tok_vocab: libFuzzer target for the GPT-2 vocabulary parsers
 * (gpt_tok_load_mem: encoder.json and vocab.bpe). The input is the JSON,
 * a NUL byte, then the merges (no NUL: all JSON, no merges). When the
 * pair loads, a fixed text and the input's own bytes are encoded and must
 * decode back to themselves.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void round_trip(struct gpt_tok *t, struct gpt_tok_enc *e, const void *text, size_t len)
{
    struct gpt_tok_ids ids = {0};
    struct gpt_err err = {0};
    if (gpt_tok_encode(e, text, len, GPT_TOK_ALLOW_SPECIAL, &ids, &err) == 0) {
        char *back = malloc(len + 1);
        size_t blen = 0;
        if (!back || gpt_tok_decode(t, ids.v, ids.n, back, len + 1, &blen, &err) != 0 ||
            blen != len || memcmp(back, text, len) != 0)
            abort();
        free(back);
    }
    gpt_tok_ids_done(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t jn = nul ? (size_t)(nul - data) : size;
    const char *m = nul ? (const char *)nul + 1 : "";
    size_t mn = nul ? size - jn - 1 : 0;
    struct gpt_tok *t = NULL;
    struct gpt_err err = {0};
    if (gpt_tok_load_mem((const char *)data, jn, m, mn, &t, &err) == 0) {
        struct gpt_tok_enc *e = NULL;
        if (gpt_tok_enc_new(t, &e, &err) == 0) {
            static const char text[] = "Hello, world! It's 2026.\n  \xe4\xb8\xad\xff<|endoftext|>";
            round_trip(t, e, text, sizeof(text) - 1);
            round_trip(t, e, data, size);
        }
        gpt_tok_enc_free(e);
    }
    gpt_tok_free(t);
    return 0;
}
