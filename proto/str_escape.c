/*
 * str_escape: see str_escape.h. One pass over the bytes, decoding UTF-8
 * strictly (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF).
 */
#include "str_escape.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (n bytes left) and its code point,
 * or 0 when the bytes there are not valid UTF-8. */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *ret_cp)
{
    uint32_t cp;
    size_t k;
    if (s[0] < 0x80) {
        *ret_cp = s[0];
        return 1;
    }
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        k = 2;
        cp = s[0] & 0x1f;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        k = 3;
        cp = s[0] & 0x0f;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        k = 4;
        cp = s[0] & 0x07;
    } else {
        return 0;
    }
    if (n < k)
        return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((k == 3 && cp < 0x800) || (k == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    *ret_cp = cp;
    return k;
}

/* Code points above ASCII that are printed as \uXXXX. */
static int escape_cp(uint32_t cp)
{
    return (cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 ||
           (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

/* Appends `n` bytes when they fit whole; counts them either way. */
static void put(char *out, size_t cap, size_t *pos, int *cut, const char *p, size_t n)
{
    if (!*cut && *pos + n < cap)
        memcpy(out + *pos, p, n);
    else
        *cut = 1;
    *pos += n;
}

size_t gpt_str_escape(char *out, size_t cap, const char *s, size_t len, unsigned flags)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t pos = 0, written = 0;
    int cut = 0;
    char esc[16];
    for (size_t i = 0; i < len;) {
        uint32_t cp = 0;
        size_t k = utf8_decode(u + i, len - i, &cp);
        const char *p = (const char *)u + i;
        size_t n = k;
        if (k == 0) { /* one invalid byte */
            n = (size_t)snprintf(esc, sizeof(esc), "\\x%02x", u[i]);
            p = esc;
            k = 1;
        } else if (cp == '\\') {
            p = "\\\\", n = 2;
        } else if ((cp == '\n' || cp == '\t') && (flags & GPT_STR_ESCAPE_KEEP_NEWLINE)) {
            /* copied as is */
        } else if (cp == '\n') {
            p = "\\n", n = 2;
        } else if (cp == '\r') {
            p = "\\r", n = 2;
        } else if (cp == '\t') {
            p = "\\t", n = 2;
        } else if (cp == 0x1b) {
            p = "\\e", n = 2;
        } else if (cp < 0x20 || cp == 0x7f) {
            n = (size_t)snprintf(esc, sizeof(esc), "\\x%02x", (unsigned)cp);
            p = esc;
        } else if (escape_cp(cp)) {
            n = (size_t)snprintf(esc, sizeof(esc), "\\u%04x", (unsigned)cp);
            p = esc;
        }
        put(out, cap, &pos, &cut, p, n);
        if (!cut)
            written = pos;
        i += k;
    }
    if (cap > 0)
        out[written] = '\0';
    return pos;
}

char *gpt_str_escape_dup(const char *s, unsigned flags)
{
    if (!s)
        s = "";
    size_t len = strlen(s);
    char *out = malloc(GPT_STR_ESCAPE_SIZE(len));
    if (out)
        gpt_str_escape(out, GPT_STR_ESCAPE_SIZE(len), s, len, flags);
    return out;
}

json_t *gpt_str_json(const char *s)
{
    json_t *v = json_string(s ? s : "");
    if (v)
        return v;
    char *d = gpt_str_escape_dup(s, GPT_STR_ESCAPE_KEEP_NEWLINE);
    v = json_string(d ? d : "");
    free(d);
    return v;
}
