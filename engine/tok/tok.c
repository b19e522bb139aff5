/*
 * tok: encoding and decoding with a loaded GPT-2 vocabulary (see tok.h for
 * the algorithm). A struct gpt_tok_enc belongs to one thread: it owns the
 * PCRE2 match data and JIT stack, a direct-mapped cache of recent pieces
 * and the scratch arrays of the merge loop.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "tok_impl.h"

/* JavaScript's \s (ECMAScript WhiteSpace and LineTerminator), which the
 * reference encoders use; PCRE2's own \s under UCP differs (U+0085, U+FEFF). */
#define TOK_WS "\\t\\n\\x0B\\f\\r\\p{Zs}\\x{2028}\\x{2029}\\x{FEFF}"
static const char tok_pattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+"
                                  "| ?[^" TOK_WS "\\p{L}\\p{N}]+"
                                  "|[" TOK_WS "]+(?![^" TOK_WS "])|[" TOK_WS "]+";

#define TOK_CACHE_SLOTS (1u << 15)
#define TOK_CACHE_KEY   22 /* pieces up to this many bytes are cached */
#define TOK_CACHE_IDS   8  /* ... when they encode to at most this many tokens */
#define TOK_SMALL_PIECE 64 /* longer pieces merge through a heap: O(n log n) */
#define TOK_JIT_STACK   (1u << 20)

struct tok_cache_slot {
    uint64_t h; /* 0 = empty */
    uint8_t len, n;
    unsigned char key[TOK_CACHE_KEY];
    int32_t ids[TOK_CACHE_IDS];
};

struct gpt_tok_enc {
    const struct gpt_tok *t;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
    struct tok_cache_slot *cache;
    size_t cap;      /* capacity of the scratch arrays below, in bytes of piece */
    int32_t *tok;    /* token per node (-1 dead) */
    int32_t *rank;   /* rank of the pair at node i (INT32_MAX: none) */
    int32_t *merged; /* its merged token */
    int32_t *next;   /* heap path: linked list of nodes */
    int32_t *prev;
    int32_t *heap; /* heap path: nodes with a pair, by (rank, node) */
    int32_t *pos;  /* heap path: node -> index in heap, -1 if absent */
};

int tok_compile_pattern(struct gpt_tok *t, struct gpt_err *err)
{
    int ec;
    PCRE2_SIZE eo;
    t->re = pcre2_compile((PCRE2_SPTR)tok_pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                          &ec, &eo, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof(msg));
        return gpt_err_set(err, -ENOTSUP, NULL, "PCRE2 rejects GPT-2's pattern at %zu: %s",
                           (size_t)eo, (const char *)msg);
    }
    t->jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

void gpt_tok_ids_done(struct gpt_tok_ids *ids)
{
    free(ids->v);
    *ids = (struct gpt_tok_ids){0};
}

static int tok_ids_reserve(struct gpt_tok_ids *ids, size_t more)
{
    if (ids->cap - ids->n >= more)
        return 0;
    size_t cap = ids->cap ? ids->cap : 256;
    while (cap - ids->n < more) {
        if (cap > SIZE_MAX / 2 / sizeof(int32_t))
            return -ENOMEM;
        cap *= 2;
    }
    int32_t *v = realloc(ids->v, cap * sizeof(*v));
    if (!v)
        return -ENOMEM;
    ids->v = v;
    ids->cap = cap;
    return 0;
}

int gpt_tok_enc_new(const struct gpt_tok *t, struct gpt_tok_enc **ret, struct gpt_err *err)
{
    GPT_ASSERT(t && ret);
    struct gpt_tok_enc *e = calloc(1, sizeof(*e));
    if (!e)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    e->t = t;
    e->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    e->mc = pcre2_match_context_create(NULL);
    e->cache = calloc(TOK_CACHE_SLOTS, sizeof(*e->cache));
    if (t->jit && e->mc) {
        e->js = pcre2_jit_stack_create(32u << 10, TOK_JIT_STACK, NULL);
        if (e->js)
            pcre2_jit_stack_assign(e->mc, NULL, e->js);
    }
    if (!e->md || !e->mc || !e->cache || (t->jit && !e->js)) {
        gpt_tok_enc_free(e);
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    }
    *ret = e;
    return 0;
}

void gpt_tok_enc_free(struct gpt_tok_enc *e)
{
    if (!e)
        return;
    pcre2_match_data_free(e->md);
    pcre2_match_context_free(e->mc);
    pcre2_jit_stack_free(e->js);
    free(e->cache);
    free(e->tok);
    free(e->rank);
    free(e->merged);
    free(e->next);
    free(e->prev);
    free(e->heap);
    free(e->pos);
    free(e);
}

static int tok_scratch(struct gpt_tok_enc *e, size_t n)
{
    if (n <= e->cap)
        return 0;
    size_t cap = e->cap ? e->cap : 256;
    while (cap < n) {
        if (cap > (size_t)INT32_MAX / 4)
            return -ENOMEM;
        cap *= 2;
    }
    int32_t **arr[] = {&e->tok, &e->rank, &e->merged, &e->next, &e->prev, &e->heap, &e->pos};
    for (size_t i = 0; i < sizeof(arr) / sizeof(arr[0]); i++) {
        int32_t *p = realloc(*arr[i], cap * sizeof(int32_t));
        if (!p)
            return -ENOMEM;
        *arr[i] = p;
    }
    e->cap = cap;
    return 0;
}

static void tok_pair(const struct gpt_tok *t, int32_t a, int32_t b, int32_t *ret_rank,
                     int32_t *ret_merged)
{
    const struct tok_merge *m = tok_merge_find(t, a, b);
    *ret_rank = m ? m->rank : INT32_MAX;
    *ret_merged = m ? m->merged : -1;
}

/* Merges e->tok[0, n) in place; returns the number of tokens left. The
 * lowest rank merges first, the leftmost among equal ranks. */
static size_t tok_merge_small(struct gpt_tok_enc *e, size_t n)
{
    int32_t *tok = e->tok, *rk = e->rank, *mg = e->merged;
    for (size_t i = 0; i + 1 < n; i++)
        tok_pair(e->t, tok[i], tok[i + 1], &rk[i], &mg[i]);
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (rk[i] < rk[best])
                best = i;
        if (rk[best] == INT32_MAX)
            break;
        tok[best] = mg[best];
        size_t tail = n - best - 2;
        memmove(tok + best + 1, tok + best + 2, tail * sizeof(*tok));
        memmove(rk + best + 1, rk + best + 2, tail * sizeof(*rk));
        memmove(mg + best + 1, mg + best + 2, tail * sizeof(*mg));
        n--;
        if (best > 0)
            tok_pair(e->t, tok[best - 1], tok[best], &rk[best - 1], &mg[best - 1]);
        if (best + 1 < n)
            tok_pair(e->t, tok[best], tok[best + 1], &rk[best], &mg[best]);
    }
    return n;
}

/* The heap path keeps one entry per node that has a pair with its next
 * node, keyed by (rank, node): node order is text order, so the top is the
 * lowest rank, leftmost among equals, exactly as tok_merge_small picks. */
static int tok_heap_less(const struct gpt_tok_enc *e, int32_t x, int32_t y)
{
    return e->rank[x] < e->rank[y] || (e->rank[x] == e->rank[y] && x < y);
}

static void tok_heap_up(struct gpt_tok_enc *e, size_t k)
{
    int32_t *h = e->heap, x = h[k];
    while (k > 0) {
        size_t p = (k - 1) / 2;
        if (!tok_heap_less(e, x, h[p]))
            break;
        h[k] = h[p];
        e->pos[h[k]] = (int32_t)k;
        k = p;
    }
    h[k] = x;
    e->pos[x] = (int32_t)k;
}

static void tok_heap_down(struct gpt_tok_enc *e, size_t hn, size_t k)
{
    int32_t *h = e->heap, x = h[k];
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= hn)
            break;
        if (c + 1 < hn && tok_heap_less(e, h[c + 1], h[c]))
            c++;
        if (!tok_heap_less(e, h[c], x))
            break;
        h[k] = h[c];
        e->pos[h[k]] = (int32_t)k;
        k = c;
    }
    h[k] = x;
    e->pos[x] = (int32_t)k;
}

static void tok_heap_remove(struct gpt_tok_enc *e, size_t *hn, int32_t node)
{
    size_t k = (size_t)e->pos[node];
    int32_t last = e->heap[--*hn];
    e->pos[node] = -1;
    if (k == *hn)
        return;
    e->heap[k] = last;
    e->pos[last] = (int32_t)k;
    tok_heap_down(e, *hn, k);
    tok_heap_up(e, (size_t)e->pos[last]);
}

/* Recomputes the pair at `node` (with its next node) and its heap entry. */
static void tok_heap_refresh(struct gpt_tok_enc *e, size_t *hn, int32_t node)
{
    int32_t nx = e->next[node];
    if (nx >= 0)
        tok_pair(e->t, e->tok[node], e->tok[nx], &e->rank[node], &e->merged[node]);
    else
        e->rank[node] = INT32_MAX;
    if (e->rank[node] == INT32_MAX) {
        if (e->pos[node] >= 0)
            tok_heap_remove(e, hn, node);
    } else if (e->pos[node] >= 0) {
        tok_heap_up(e, (size_t)e->pos[node]);
        tok_heap_down(e, *hn, (size_t)e->pos[node]);
    } else {
        e->heap[*hn] = node;
        tok_heap_up(e, (*hn)++);
    }
}

/* The same merge order as tok_merge_small in O(n log n) time and 28 bytes
 * of scratch per byte of the piece. Compacts the survivors into
 * e->tok[0, ret). */
static size_t tok_merge_large(struct gpt_tok_enc *e, size_t n)
{
    int32_t *tok = e->tok, *next = e->next, *prev = e->prev;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        prev[i] = (int32_t)i - 1;
        e->pos[i] = -1;
        if (i + 1 < n)
            tok_pair(e->t, tok[i], tok[i + 1], &e->rank[i], &e->merged[i]);
        else
            e->rank[i] = INT32_MAX;
        if (e->rank[i] != INT32_MAX) {
            e->heap[hn] = (int32_t)i;
            e->pos[i] = (int32_t)hn++;
        }
    }
    for (size_t k = hn / 2; k-- > 0;)
        tok_heap_down(e, hn, k);
    while (hn > 0) {
        int32_t i = e->heap[0], j = next[i];
        tok[i] = e->merged[i];
        if (e->pos[j] >= 0)
            tok_heap_remove(e, &hn, j);
        tok[j] = -1;
        next[i] = next[j];
        if (next[j] >= 0)
            prev[next[j]] = i;
        tok_heap_refresh(e, &hn, i);
        if (prev[i] >= 0)
            tok_heap_refresh(e, &hn, prev[i]);
    }
    size_t m = 0;
    for (int32_t i = 0; i >= 0; i = next[i])
        tok[m++] = tok[i];
    return m;
}

static uint64_t tok_piece_hash(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h | 1;
}

/* Appends the tokens of one piece p[0, n) (n >= 1). */
static int tok_piece(struct gpt_tok_enc *e, const unsigned char *p, size_t n,
                     struct gpt_tok_ids *out)
{
    const struct gpt_tok *t = e->t;
    if (tok_ids_reserve(out, n) < 0)
        return -ENOMEM;
    if (n == 1) {
        out->v[out->n++] = t->byte_tok[p[0]];
        return 0;
    }
    struct tok_cache_slot *slot = NULL;
    uint64_t h = 0;
    if (n <= TOK_CACHE_KEY) {
        h = tok_piece_hash(p, n);
        slot = &e->cache[(h >> 17) & (TOK_CACHE_SLOTS - 1)];
        if (slot->h == h && slot->len == n && memcmp(slot->key, p, n) == 0) {
            memcpy(out->v + out->n, slot->ids, slot->n * sizeof(int32_t));
            out->n += slot->n;
            return 0;
        }
    }
    if (tok_scratch(e, n) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        e->tok[i] = t->byte_tok[p[i]];
    size_t m;
    if (n <= TOK_SMALL_PIECE)
        m = tok_merge_small(e, n);
    else
        m = tok_merge_large(e, n);
    memcpy(out->v + out->n, e->tok, m * sizeof(int32_t));
    out->n += m;
    if (slot && m <= TOK_CACHE_IDS) {
        slot->h = h;
        slot->len = (uint8_t)n;
        slot->n = (uint8_t)m;
        memcpy(slot->key, p, n);
        memcpy(slot->ids, e->tok, m * sizeof(int32_t));
    }
    return 0;
}

/* Pre-tokenizes one valid UTF-8 run s[0, n) and merges each piece. */
static int tok_encode_run(struct gpt_tok_enc *e, const unsigned char *s, size_t n,
                          struct gpt_tok_ids *out, struct gpt_err *err)
{
    const struct gpt_tok *t = e->t;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
    size_t off = 0;
    while (off < n) {
        int rc = t->jit ? pcre2_jit_match(t->re, s, n, off, 0, e->md, e->mc)
                        : pcre2_match(t->re, s, n, off, PCRE2_NO_UTF_CHECK, e->md, e->mc);
        size_t ms, me;
        if (rc == PCRE2_ERROR_NOMATCH) {
            ms = me = n; /* cannot happen: every character matches an alternative */
        } else if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            return gpt_err_set(err, -EIO, NULL, "PCRE2 failed at byte %zu: %s", off,
                               (const char *)msg);
        } else {
            ms = ov[0];
            me = ov[1];
        }
        if (ms > off && tok_piece(e, s + off, ms - off, out) < 0)
            goto nomem;
        if (me > ms && tok_piece(e, s + ms, me - ms, out) < 0)
            goto nomem;
        if (me <= off) /* an empty match (cannot happen): step one character */
            me = off + 1;
        while (me < n && (s[me] & 0xC0) == 0x80)
            me++;
        off = me;
    }
    return 0;
nomem:
    return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
}

/* Ordinary text: valid UTF-8 runs through the pattern, each run of
 * invalid bytes one piece. */
static int tok_encode_ordinary(struct gpt_tok_enc *e, const unsigned char *s, size_t n,
                               struct gpt_tok_ids *out, struct gpt_err *err)
{
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        for (;;) {
            while (i < n && s[i] < 0x80)
                i++;
            if (i == n)
                break;
            uint32_t cp;
            int k = tok_utf8_char(s + i, n - i, &cp);
            if (k < 0)
                break;
            i += (size_t)k;
        }
        if (i > start) {
            int rc = tok_encode_run(e, s + start, i - start, out, err);
            if (rc < 0)
                return rc;
        }
        size_t bad = i;
        while (i < n) {
            uint32_t cp;
            if (tok_utf8_char(s + i, n - i, &cp) >= 0)
                break;
            i++;
        }
        if (i > bad && tok_piece(e, s + bad, i - bad, out) < 0)
            return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    }
    return 0;
}

int gpt_tok_encode(struct gpt_tok_enc *e, const void *text, size_t len, unsigned flags,
                   struct gpt_tok_ids *out, struct gpt_err *err)
{
    GPT_ASSERT(e && out && (text || len == 0));
    const unsigned char *s = text;
    if (!(flags & GPT_TOK_ALLOW_SPECIAL))
        return tok_encode_ordinary(e, s, len, out, err);
    static const char eot[] = GPT_TOK_EOT_TEXT;
    const size_t eot_len = sizeof(eot) - 1;
    while (len > 0) {
        const unsigned char *hit = memmem(s, len, eot, eot_len);
        size_t seg = hit ? (size_t)(hit - s) : len;
        int rc = tok_encode_ordinary(e, s, seg, out, err);
        if (rc < 0)
            return rc;
        if (!hit)
            break;
        if (tok_ids_reserve(out, 1) < 0)
            return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        out->v[out->n++] = e->t->eot;
        s += seg + eot_len;
        len -= seg + eot_len;
    }
    return 0;
}

/* JavaScript's \s as code points (TOK_WS). */
static int tok_is_ws(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

/* Is the character at s[p] (if after) or ending at s[p] (if !after) a
 * valid non-space character? */
static int tok_solid(const unsigned char *s, size_t len, size_t p, int after)
{
    uint32_t cp;
    if (after)
        return p < len && tok_utf8_char(s + p, len - p, &cp) > 0 && !tok_is_ws(cp);
    for (size_t k = 1; k <= 4 && k <= p; k++) {
        if ((s[p - k] & 0xC0) == 0x80)
            continue;
        return tok_utf8_char(s + p - k, k, &cp) == (int)k && !tok_is_ws(cp);
    }
    return 0;
}

/* A match of the pattern never spans such a cut, and no match ending
 * there looked past it: the match before ends in a non-space character
 * or is the newline alone (a single newline before a non-space is matched
 * by the last alternative both when the text goes on and when it ends),
 * and the pattern has no lookbehind. */
size_t gpt_tok_safe_cut(const void *text, size_t len, size_t from)
{
    const unsigned char *s = text;
    for (size_t i = from > 1 ? from : 1; i < len; i++) {
        if (s[i] == ' ' && tok_solid(s, len, i, 0) && tok_solid(s, len, i + 1, 1))
            return i;
        if (s[i - 1] == '\n' && i >= 2 && tok_solid(s, len, i - 1, 0) && tok_solid(s, len, i, 1))
            return i;
    }
    return len;
}

int gpt_tok_encode_str(const struct gpt_tok *t, const char *text, unsigned flags, int32_t *out,
                       size_t cap, size_t *ret_n, struct gpt_err *err)
{
    GPT_ASSERT(t && text && ret_n && (out || cap == 0));
    struct gpt_tok_enc *e = NULL;
    struct gpt_tok_ids ids = {0};
    int rc = gpt_tok_enc_new(t, &e, err);
    if (rc == 0)
        rc = gpt_tok_encode(e, text, strlen(text), flags, &ids, err);
    if (rc == 0 && ids.n > cap)
        rc = gpt_err_set(err, -EMSGSIZE, NULL, "the text is %zu tokens, more than %zu", ids.n, cap);
    if (rc == 0) {
        if (ids.n)
            memcpy(out, ids.v, ids.n * sizeof(*out));
        *ret_n = ids.n;
    }
    gpt_tok_ids_done(&ids);
    gpt_tok_enc_free(e);
    return rc;
}

int gpt_tok_decode(const struct gpt_tok *t, const int32_t *ids, size_t n, char *out, size_t cap,
                   size_t *ret_len, struct gpt_err *err)
{
    GPT_ASSERT(t && ret_len && (ids || n == 0) && (out || cap == 0));
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return gpt_err_set(err, -EINVAL, NULL,
                               "token id %d at %zu is outside the vocabulary "
                               "(0..%d)",
                               ids[i], i, t->n_vocab - 1);
        size_t k = t->off[ids[i] + 1] - t->off[ids[i]];
        if (len < cap)
            memcpy(out + len, t->bytes + t->off[ids[i]], k < cap - len ? k : cap - len);
        len += k;
    }
    *ret_len = len;
    return len > cap ? -ENOSPC : 0;
}
