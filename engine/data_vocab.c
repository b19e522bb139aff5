/*
 * data_vocab: the tokenizer of text and synthetic data (one byte per
 * token through struct gpt_vocab) and the "<id>" rendering of token ids.
 *
 * Pure functions of their arguments; any thread.
 */
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int gpt_vocab_encode(const struct gpt_vocab *v, const char *text, int *out, size_t cap,
                     size_t *ret_n, struct gpt_err *err)
{
    GPT_ASSERT(v && text && ret_n && (out || cap == 0));
    if (v->kind != GPT_TOK_CHAR && v->kind != GPT_TOK_BYTE)
        return gpt_err_set(err, -ENOTSUP, NULL,
                           "this job has no text tokenizer (its tokens are ids): give the prompt "
                           "as token ids (--prompt-ids 15496,11) or set data.vocab");
    if (v->size < 0 || v->size > GPT_VOCAB_MAX)
        return gpt_err_set(err, -EINVAL, NULL, "vocabulary size %d out of range", v->size);
    int lut[256];
    for (int c = 0; c < 256; c++)
        lut[c] = -1;
    for (int i = v->size - 1; i >= 0; i--)
        lut[v->chars[i]] = i;
    const unsigned char *p = (const unsigned char *)text;
    size_t n = strlen(text);
    if (n > cap)
        return gpt_err_set(err, -EMSGSIZE, NULL, "text of %zu characters exceeds %zu tokens", n,
                           cap);
    for (size_t i = 0; i < n; i++) {
        if (lut[p[i]] < 0) {
            if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\'')
                return gpt_err_set(err, -EINVAL, NULL,
                                   "character '%c' at offset %zu is not in the vocabulary", p[i],
                                   i);
            return gpt_err_set(err, -EINVAL, NULL,
                               "character 0x%02x at offset %zu is not in the vocabulary", p[i], i);
        }
        out[i] = lut[p[i]];
    }
    *ret_n = n;
    return 0;
}

size_t gpt_vocab_decode(const struct gpt_vocab *v, const int *tokens, size_t n, char *out,
                        size_t cap)
{
    GPT_ASSERT(v && (tokens || n == 0) && (out || cap == 0));
    if (cap == 0)
        return 0;
    size_t len = 0;
    for (size_t i = 0; i < n && len + 1 < cap; i++) {
        int t = tokens[i];
        if (v->kind != GPT_TOK_CHAR && v->kind != GPT_TOK_BYTE) {
            char buf[16];
            int k = snprintf(buf, sizeof(buf), "<%d>", t);
            if (k < 0 || len + (size_t)k + 1 > cap)
                break; /* never cut a token in half */
            memcpy(out + len, buf, (size_t)k);
            len += (size_t)k;
            continue;
        }
        int ok = t >= 0 && t < v->size && t < GPT_VOCAB_MAX;
        out[len++] = ok ? (char)v->chars[t] : '?';
    }
    out[len] = '\0';
    return len;
}
