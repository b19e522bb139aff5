/*
 * tok_impl: the loaded vocabulary shared by tok_vocab.c (which builds it)
 * and tok.c (which encodes with it). Immutable once built.
 */
#ifndef GPT_TOK_IMPL_H
#define GPT_TOK_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tok.h"

/* One merge: the pair (a, b) becomes `merged`; lower rank merges first. */
struct tok_merge {
    uint64_t key; /* (uint64_t)a << 32 | b; TOK_KEY_EMPTY for a free slot */
    int32_t rank;
    int32_t merged;
};
#define TOK_KEY_EMPTY UINT64_MAX

struct gpt_tok {
    int n_vocab;
    int32_t eot;
    int32_t byte_tok[256]; /* the token of each single byte */
    uint32_t *off;         /* (n_vocab + 1) offsets into bytes */
    unsigned char *bytes;  /* every token's bytes, by id */
    int32_t *map;          /* bytes -> id, open addressing, -1 free */
    size_t map_mask;
    struct tok_merge *merges; /* pair -> merge, open addressing */
    size_t merges_mask;
    int n_merges;
    pcre2_code *re; /* GPT-2's pattern, JIT-compiled when possible */
    int jit;
};

static inline size_t tok_pair_slot(uint64_t key, size_t mask)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 29) & mask;
}

/* The merge of (a, b), or NULL. */
static inline const struct tok_merge *tok_merge_find(const struct gpt_tok *t, int32_t a, int32_t b)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = tok_pair_slot(key, t->merges_mask);; i = (i + 1) & t->merges_mask) {
        const struct tok_merge *m = &t->merges[i];
        if (m->key == key)
            return m;
        if (m->key == TOK_KEY_EMPTY)
            return NULL;
    }
}

/* One UTF-8 character at s[0, len): its code point and length, or -1 for
 * an invalid sequence (overlong, surrogate, > U+10FFFF, truncated). */
static inline int tok_utf8_char(const unsigned char *s, size_t len, uint32_t *ret_cp)
{
    unsigned c = s[0];
    int n;
    uint32_t cp, min;
    if (c < 0x80) {
        *ret_cp = c;
        return 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
        n = 2, cp = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return -1;
    }
    if ((size_t)n > len)
        return -1;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return -1;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    *ret_cp = cp;
    return n;
}

/* Compiles GPT-2's pattern into t->re (tok.c). */
int tok_compile_pattern(struct gpt_tok *t, struct gpt_err *err);

#endif
