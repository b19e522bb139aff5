/*
 * tok_vocab: loading GPT-2's vocabulary files into a struct gpt_tok.
 *
 * Every count and length read from the files is checked against the
 * GPT_TOK_*_MAX limits before anything is allocated for it, and every
 * failure names the file, the line or token and what was wrong. Runs on
 * the caller's thread; blocks on file reads.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpt_file.h"
#include "tok_impl.h"

/* GPT-2's byte-to-unicode alphabet: printable Latin-1 bytes stand for
 * themselves, the other 68 bytes for U+0100.. in byte order. */
#define TOK_ALPHABET_CPS 324

static void tok_alphabet(int byte_of_cp[TOK_ALPHABET_CPS])
{
    int n = 0;
    for (int cp = 0; cp < TOK_ALPHABET_CPS; cp++)
        byte_of_cp[cp] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        byte_of_cp[printable ? b : 256 + n++] = b;
    }
}

/* Token string (alphabet characters, UTF-8) -> bytes; returns the byte
 * count or a negative error with err filled. */
static int tok_string_bytes(const int byte_of_cp[TOK_ALPHABET_CPS], const char *s, size_t len,
                            unsigned char out[GPT_TOK_TOKEN_BYTES_MAX], const char *file, long line,
                            struct gpt_err *err)
{
    size_t n = 0;
    char where[64] = "";
    if (line > 0)
        snprintf(where, sizeof(where), " line %ld:", line);
    if (len == 0)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s:%s empty token", file, where);
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int k = tok_utf8_char((const unsigned char *)s + i, len - i, &cp);
        if (k < 0)
            return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                               "%s:%s invalid UTF-8 at byte %zu of a token", file, where, i);
        if (cp >= TOK_ALPHABET_CPS || byte_of_cp[cp] < 0)
            return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                               "%s:%s token '%.*s' has U+%04X, outside GPT-2's byte alphabet", file,
                               where, (int)(len < 64 ? len : 64), s, (unsigned)cp);
        if (n == GPT_TOK_TOKEN_BYTES_MAX)
            return gpt_err_set(err, -GPT_E_LIMIT, NULL,
                               "%s:%s token '%.40s...' stands for more than %d bytes", file, where,
                               s, GPT_TOK_TOKEN_BYTES_MAX);
        out[n++] = (unsigned char)byte_of_cp[cp];
        i += (size_t)k;
    }
    return (int)n;
}

static uint64_t tok_hash_bytes(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* The id of bytes p[0, n), or -1. */
static int32_t tok_map_find(const struct gpt_tok *t, const unsigned char *p, size_t n)
{
    for (size_t i = tok_hash_bytes(p, n) & t->map_mask;; i = (i + 1) & t->map_mask) {
        int32_t id = t->map[i];
        if (id < 0)
            return -1;
        if (t->off[id + 1] - t->off[id] == n && memcmp(t->bytes + t->off[id], p, n) == 0)
            return id;
    }
}

static size_t tok_pow2_at_least(size_t n)
{
    size_t p = 16;
    while (p < n)
        p <<= 1;
    return p;
}

/* encoder.json / vocab.json: a JSON object of n distinct token strings
 * with the ids 0..n-1, each exactly once. */
static int tok_parse_encoder(struct gpt_tok *t, const int byte_of_cp[TOK_ALPHABET_CPS],
                             const char *buf, size_t len, const char *file, struct gpt_err *err)
{
    json_error_t je;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    unsigned char tb[GPT_TOK_TOKEN_BYTES_MAX];
    int rc = 0;
    if (!root)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: line %d: %s", file, je.line, je.text);
    if (!json_is_object(root)) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: not a JSON object of token -> id", file);
        goto out;
    }
    size_t n = json_object_size(root);
    if (n < 257 || n > GPT_TOK_VOCAB_MAX) {
        rc = gpt_err_set(err, -GPT_E_LIMIT, NULL,
                         "%s: %zu tokens (a byte-level vocabulary has 257 to %d: the 256 bytes "
                         "and <|endoftext|> at least)",
                         file, n, GPT_TOK_VOCAB_MAX);
        goto out;
    }
    t->n_vocab = (int)n;
    t->off = calloc(n + 1, sizeof(*t->off));
    t->map_mask = tok_pow2_at_least(2 * n) - 1;
    t->map = malloc((t->map_mask + 1) * sizeof(*t->map));
    if (!t->off || !t->map) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        goto out;
    }
    memset(t->map, 0xff, (t->map_mask + 1) * sizeof(*t->map));
    /* Pass 1: ids and lengths (off[id + 1] = length, 0 = unseen). */
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        if (id < 0 || (size_t)id >= n) {
            rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                             "%s: token '%.64s' has id %s; ids must be the integers 0..%zu", file,
                             key, json_is_integer(val) ? "out of range" : "that is not an integer",
                             n - 1);
            goto out;
        }
        int k = tok_string_bytes(byte_of_cp, key, strlen(key), tb, file, 0, err);
        if (k < 0) {
            rc = k;
            goto out;
        }
        if (t->off[id + 1] != 0) {
            rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: id %lld is given to two tokens", file,
                             (long long)id);
            goto out;
        }
        t->off[id + 1] = (uint32_t)k;
    }
    for (size_t i = 0; i < n; i++)
        t->off[i + 1] += t->off[i];
    t->bytes = malloc(t->off[n] ? t->off[n] : 1);
    if (!t->bytes) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        goto out;
    }
    /* Pass 2: bytes and the bytes -> id map. */
    json_object_foreach(root, key, val)
    {
        int32_t id = (int32_t)json_integer_value(val);
        int k = tok_string_bytes(byte_of_cp, key, strlen(key), tb, file, 0, err);
        memcpy(t->bytes + t->off[id], tb, (size_t)k);
        size_t i = tok_hash_bytes(tb, (size_t)k) & t->map_mask;
        while (t->map[i] >= 0)
            i = (i + 1) & t->map_mask;
        t->map[i] = id;
    }
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        t->byte_tok[b] = tok_map_find(t, &c, 1);
        if (t->byte_tok[b] < 0) {
            rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                             "%s: no token for byte 0x%02x (a byte-level vocabulary has one for "
                             "every byte)",
                             file, b);
            goto out;
        }
    }
    t->eot = tok_map_find(t, (const unsigned char *)GPT_TOK_EOT_TEXT, strlen(GPT_TOK_EOT_TEXT));
    if (t->eot < 0)
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: no %s token", file, GPT_TOK_EOT_TEXT);
out:
    json_decref(root);
    return rc;
}

/* vocab.bpe / merges.txt: an optional "#version" line, then one merge
 * "A B" per line, rank = order; a final newline is optional. */
static int tok_parse_merges(struct gpt_tok *t, const int byte_of_cp[TOK_ALPHABET_CPS],
                            const char *buf, size_t len, const char *file, struct gpt_err *err)
{
    unsigned char a[GPT_TOK_TOKEN_BYTES_MAX], b[GPT_TOK_TOKEN_BYTES_MAX];
    unsigned char ab[2 * GPT_TOK_TOKEN_BYTES_MAX];
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += buf[i] == '\n';
    lines++;
    if (lines > GPT_TOK_MERGES_MAX + 2)
        return gpt_err_set(err, -GPT_E_LIMIT, NULL, "%s: %zu lines (at most %d merges)", file,
                           lines, GPT_TOK_MERGES_MAX);
    t->merges_mask = tok_pow2_at_least(2 * lines) - 1;
    t->merges = malloc((t->merges_mask + 1) * sizeof(*t->merges));
    if (!t->merges)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    for (size_t i = 0; i <= t->merges_mask; i++)
        t->merges[i].key = TOK_KEY_EMPTY;
    long line = 0;
    for (size_t pos = 0; pos < len;) {
        const char *s = buf + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + (nl != NULL);
        line++;
        if (n > 0 && s[n - 1] == '\r')
            n--;
        if (line == 1 && n >= 8 && memcmp(s, "#version", 8) == 0)
            continue;
        if (n == 0) {
            if (pos >= len)
                break;
            return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: line %ld: empty line", file, line);
        }
        const char *sp = memchr(s, ' ', n);
        if (!sp || sp == s || sp == s + n - 1 || memchr(sp + 1, ' ', (size_t)(s + n - sp - 1)))
            return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                               "%s: line %ld: expected two tokens separated by one space", file,
                               line);
        int na = tok_string_bytes(byte_of_cp, s, (size_t)(sp - s), a, file, line, err);
        if (na < 0)
            return na;
        int nb = tok_string_bytes(byte_of_cp, sp + 1, (size_t)(s + n - sp - 1), b, file, line, err);
        if (nb < 0)
            return nb;
        memcpy(ab, a, (size_t)na);
        memcpy(ab + na, b, (size_t)nb);
        int32_t ia = tok_map_find(t, a, (size_t)na), ib = tok_map_find(t, b, (size_t)nb);
        int32_t im = tok_map_find(t, ab, (size_t)(na + nb));
        if (ia < 0 || ib < 0 || im < 0)
            return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                               "%s: line %ld: '%.*s' is not in the vocabulary", file, line,
                               ia < 0   ? (int)(sp - s)
                               : ib < 0 ? (int)(s + n - sp - 1)
                                        : (int)n,
                               ia < 0   ? s
                               : ib < 0 ? sp + 1
                                        : s);
        uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
        size_t i = tok_pair_slot(key, t->merges_mask);
        while (t->merges[i].key != TOK_KEY_EMPTY) {
            if (t->merges[i].key == key)
                return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                                   "%s: line %ld: the merge '%.*s' is listed twice", file, line,
                                   (int)n, s);
            i = (i + 1) & t->merges_mask;
        }
        t->merges[i] = (struct tok_merge){.key = key, .rank = t->n_merges++, .merged = im};
    }
    return 0;
}

static int tok_build(const char *json, size_t json_len, const char *json_name, const char *merges,
                     size_t merges_len, const char *merges_name, struct gpt_tok **ret,
                     struct gpt_err *err)
{
    int byte_of_cp[TOK_ALPHABET_CPS];
    tok_alphabet(byte_of_cp);
    if (json_len > GPT_TOK_FILE_BYTES_MAX || merges_len > GPT_TOK_FILE_BYTES_MAX)
        return gpt_err_set(err, -GPT_E_LIMIT, NULL, "%s: larger than %u bytes",
                           json_len > GPT_TOK_FILE_BYTES_MAX ? json_name : merges_name,
                           GPT_TOK_FILE_BYTES_MAX);
    struct gpt_tok *t = calloc(1, sizeof(*t));
    if (!t)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    int rc = tok_parse_encoder(t, byte_of_cp, json, json_len, json_name, err);
    if (rc == 0)
        rc = tok_parse_merges(t, byte_of_cp, merges, merges_len, merges_name, err);
    if (rc == 0)
        rc = tok_compile_pattern(t, err);
    if (rc < 0) {
        gpt_tok_free(t);
        return rc;
    }
    *ret = t;
    return 0;
}

int gpt_tok_load_mem(const char *json, size_t json_len, const char *merges, size_t merges_len,
                     struct gpt_tok **ret, struct gpt_err *err)
{
    GPT_ASSERT(json && merges && ret);
    return tok_build(json, json_len, "encoder.json", merges, merges_len, "vocab.bpe", ret, err);
}

/* Reads a whole file of at most GPT_TOK_FILE_BYTES_MAX bytes (returns new). */
static int tok_read_file(const char *path, char **ret, size_t *ret_len, struct gpt_err *err)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return gpt_err_set(err, -errno, NULL, "%s: %s", path, strerror(errno));
    int rc = gpt_file_read_fd(fd, path, GPT_TOK_FILE_BYTES_MAX, NULL, ret, ret_len, err);
    close(fd);
    return rc;
}

int gpt_tok_load_files(const char *encoder_json, const char *merges, struct gpt_tok **ret,
                       struct gpt_err *err)
{
    GPT_ASSERT(encoder_json && merges && ret);
    char *j = NULL, *m = NULL;
    size_t jn = 0, mn = 0;
    int rc = tok_read_file(encoder_json, &j, &jn, err);
    if (rc == 0)
        rc = tok_read_file(merges, &m, &mn, err);
    if (rc == 0)
        rc = tok_build(j, jn, encoder_json, m, mn, merges, ret, err);
    free(j);
    free(m);
    return rc;
}

int gpt_tok_load(const char *dir, struct gpt_tok **ret, struct gpt_err *err)
{
    GPT_ASSERT(dir && ret);
    static const char *const names[][2] = {{"encoder.json", "vocab.bpe"},
                                           {"vocab.json", "merges.txt"}};
    char jp[4096], mp[4096];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        int a = snprintf(jp, sizeof(jp), "%s/%s", dir, names[i][0]);
        int b = snprintf(mp, sizeof(mp), "%s/%s", dir, names[i][1]);
        if (a < 0 || b < 0 || (size_t)a >= sizeof(jp) || (size_t)b >= sizeof(mp))
            return gpt_err_set(err, -ENAMETOOLONG, NULL, "vocabulary folder name too long");
        if (access(jp, F_OK) == 0 || access(mp, F_OK) == 0)
            return gpt_tok_load_files(jp, mp, ret, err);
    }
    return gpt_err_set(err, -ENOENT, NULL,
                       "%s: no GPT-2 vocabulary (encoder.json + vocab.bpe, or Hugging Face's "
                       "vocab.json + merges.txt)",
                       dir);
}

void gpt_tok_free(struct gpt_tok *t)
{
    if (!t)
        return;
    pcre2_code_free(t->re);
    free(t->off);
    free(t->bytes);
    free(t->map);
    free(t->merges);
    free(t);
}

int gpt_tok_vocab_size(const struct gpt_tok *t)
{
    return t->n_vocab;
}

int32_t gpt_tok_eot(const struct gpt_tok *t)
{
    return t->eot;
}

const unsigned char *gpt_tok_token_bytes(const struct gpt_tok *t, int32_t id, size_t *ret_len)
{
    if (id < 0 || id >= t->n_vocab)
        return NULL;
    *ret_len = t->off[id + 1] - t->off[id];
    return t->bytes + t->off[id];
}

int gpt_tok_token_text(const struct gpt_tok *t, int32_t id, char *out, size_t cap)
{
    GPT_ASSERT(cap >= GPT_TOK_TEXT_MAX);
    if (id < 0 || id >= t->n_vocab)
        return -EINVAL;
    int cp_of_byte[256], byte_of_cp[TOK_ALPHABET_CPS];
    tok_alphabet(byte_of_cp);
    for (int cp = 0; cp < TOK_ALPHABET_CPS; cp++)
        if (byte_of_cp[cp] >= 0)
            cp_of_byte[byte_of_cp[cp]] = cp;
    size_t n = 0;
    for (uint32_t i = t->off[id]; i < t->off[id + 1]; i++) {
        int cp = cp_of_byte[t->bytes[i]];
        if (cp < 0x80) {
            out[n++] = (char)cp;
        } else { /* every alphabet code point is below U+0800: two bytes */
            out[n++] = (char)(0xC0 | (cp >> 6));
            out[n++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    out[n] = '\0';
    return (int)n;
}

int gpt_tok_n_merges(const struct gpt_tok *t)
{
    return t->n_merges;
}

void gpt_tok_merge_pairs(const struct gpt_tok *t, int32_t *pairs)
{
    for (size_t i = 0; i <= t->merges_mask; i++) {
        const struct tok_merge *g = &t->merges[i];
        if (g->key == TOK_KEY_EMPTY)
            continue;
        pairs[2 * (size_t)g->rank] = (int32_t)(g->key >> 32);
        pairs[2 * (size_t)g->rank + 1] = (int32_t)(uint32_t)g->key;
    }
}

uint64_t gpt_tok_fingerprint(const struct gpt_tok *t)
{
    uint64_t h = tok_hash_bytes(t->bytes, t->off[t->n_vocab]) ^ (uint64_t)t->n_vocab;
    for (int i = 0; i <= t->n_vocab; i++)
        h = (h ^ t->off[i]) * 0x100000001b3ull;
    /* merges: order-independent over the table (slots depend only on keys) */
    uint64_t m = (uint64_t)t->n_merges;
    for (size_t i = 0; i <= t->merges_mask; i++) {
        const struct tok_merge *g = &t->merges[i];
        if (g->key != TOK_KEY_EMPTY)
            m += (g->key * 0x9E3779B97F4A7C15ull) ^
                 ((uint64_t)(uint32_t)g->rank << 32 | (uint32_t)g->merged);
    }
    return h ^ (m * 0xff51afd7ed558ccdull);
}
