/*
 * tok: GPT-2's byte-level BPE tokenizer (library gpttok; depends only on
 * proto's gpt_err, jansson and PCRE2).
 *
 * Vocabulary files, read from one folder: GPT-2's encoder.json (token
 * string -> id) with vocab.bpe (merges, one "A B" pair per line, rank =
 * line order), or the same content under Hugging Face's names vocab.json
 * with merges.txt. Token strings are written in GPT-2's byte-to-unicode
 * alphabet (every byte one printable character).
 *
 * Encoding follows GPT-2 (and js-tiktoken's "gpt2", gpt-3-encoder):
 *   1. The text is cut into valid UTF-8 runs and runs of invalid bytes.
 *   2. Each valid run is pre-tokenized with GPT-2's pattern
 *        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      through PCRE2 (UTF + UCP, JIT when available), where \s is
 *      JavaScript's whitespace class (tab, LF, VT, FF, CR, \p{Zs}, U+2028,
 *      U+2029, U+FEFF) so that ids equal the JavaScript references'.
 *      Each maximal run of invalid bytes is one piece of its own (GPT-2
 *      is byte-level, so every byte has a token and nothing is lost).
 *   3. Each piece's bytes are merged by rank (lowest rank first, leftmost
 *      first among equals) until no adjacent pair has a merge.
 * decode(encode(x)) == x for every byte string x.
 *
 * Threads: a struct gpt_tok is immutable after gpt_tok_load and may be
 * shared by any number of threads; each thread encodes through its own
 * struct gpt_tok_enc (which holds the piece cache and PCRE2 match state).
 * Nothing here logs or exits.
 */
#ifndef GPT_TOK_H
#define GPT_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "gpt_err.h"

/* Limits on what vocabulary files may hold (checked before allocating). */
#define GPT_TOK_FILE_BYTES_MAX  (64u << 20) /* encoder.json / vocab.bpe size */
#define GPT_TOK_VOCAB_MAX       262144      /* tokens in encoder.json */
#define GPT_TOK_MERGES_MAX      GPT_TOK_VOCAB_MAX
#define GPT_TOK_TOKEN_BYTES_MAX 256 /* bytes one token stands for */
#define GPT_TOK_EOT_TEXT        "<|endoftext|>"

/* encode flags */
enum {
    /* "<|endoftext|>" in the text becomes the special token (otherwise it
     * is ordinary text, like tiktoken's encode_ordinary). */
    GPT_TOK_ALLOW_SPECIAL = 1u << 0,
};

struct gpt_tok;
struct gpt_tok_enc;

/* A growable id vector; zero-initialize, free with gpt_tok_ids_done. */
struct gpt_tok_ids {
    int32_t *v;
    size_t n, cap;
};
void gpt_tok_ids_done(struct gpt_tok_ids *ids);

/* Loads the vocabulary in folder `dir` (encoder.json + vocab.bpe, else
 * vocab.json + merges.txt). Returns new (free with gpt_tok_free). Blocks on
 * file reads; any thread. */
int gpt_tok_load(const char *dir, struct gpt_tok **ret, struct gpt_err *err);
/* The same from two explicit files. */
int gpt_tok_load_files(const char *encoder_json, const char *merges, struct gpt_tok **ret,
                       struct gpt_err *err);
/* The same from memory (both borrowed; the fuzz target's entry point). */
int gpt_tok_load_mem(const char *json, size_t json_len, const char *merges, size_t merges_len,
                     struct gpt_tok **ret, struct gpt_err *err);
/* NULL allowed. */
void gpt_tok_free(struct gpt_tok *t);

int gpt_tok_vocab_size(const struct gpt_tok *t);
/* The id of <|endoftext|>. */
int32_t gpt_tok_eot(const struct gpt_tok *t);
/* The bytes token `id` stands for (borrowed from t), or NULL for an id
 * out of range. */
const unsigned char *gpt_tok_token_bytes(const struct gpt_tok *t, int32_t id, size_t *ret_len);

/* Token `id` written as the vocabulary files write it: GPT-2's
 * byte-to-unicode alphabet, UTF-8, NUL-terminated, into out[0, cap)
 * (GPT_TOK_TEXT_MAX always suffices). Returns its length in bytes, or
 * -EINVAL for an id out of range. For writers of other formats (GGUF's
 * tokenizer.ggml.tokens). Pure; any thread. */
#define GPT_TOK_TEXT_MAX (2 * GPT_TOK_TOKEN_BYTES_MAX + 1)
int gpt_tok_token_text(const struct gpt_tok *t, int32_t id, char *out, size_t cap);

/* The number of merges (ranks 0 .. n-1). */
int gpt_tok_n_merges(const struct gpt_tok *t);
/* Fills pairs[2 * rank] and pairs[2 * rank + 1] (caller's array of
 * 2 * gpt_tok_n_merges ids) with the two tokens merge `rank` joins: the
 * merges file in id form. Pure; any thread. */
void gpt_tok_merge_pairs(const struct gpt_tok *t, int32_t *pairs);

/* Per-thread encoding state over `t` (borrowed; must outlive it). */
int gpt_tok_enc_new(const struct gpt_tok *t, struct gpt_tok_enc **ret, struct gpt_err *err);
void gpt_tok_enc_free(struct gpt_tok_enc *e);

/* Appends the ids of text[0, len) to `out`. Fails only on out of memory
 * (or a PCRE2 failure, reported with its message). */
int gpt_tok_encode(struct gpt_tok_enc *e, const void *text, size_t len, unsigned flags,
                   struct gpt_tok_ids *out, struct gpt_err *err);

/* The first offset c >= from (c <= len) at which text[0, len) can be cut
 * without changing its tokens: encode(text[0, c)) ++ encode(text[c, len))
 * == encode(text). Cuts are made after a newline or before a space that
 * sit between two non-space characters; len when there is none. For
 * splitting a large text among threads. Pure; any thread. */
size_t gpt_tok_safe_cut(const void *text, size_t len, size_t from);

/* gpt_tok_encode on `threads` threads (1..256): the text is cut at
 * gpt_tok_safe_cut points, so the ids appended to `out` are exactly
 * gpt_tok_encode's. Starts and joins its own threads; blocks. For
 * tokenizing a whole training text on load. */
int gpt_tok_encode_parallel(const struct gpt_tok *t, const void *text, size_t len, unsigned flags,
                            int threads, struct gpt_tok_ids *out, struct gpt_err *err);

/* A 64-bit hash of the vocabulary (every token's bytes and every merge
 * with its rank): equal for the same content under either file naming,
 * for keying caches of encoded text and for recording which vocabulary a
 * model was trained with. */
uint64_t gpt_tok_fingerprint(const struct gpt_tok *t);

/* Convenience for one short text (a prompt): encodes NUL-terminated `text`
 * into out[0, cap) with a temporary encoder; -EMSGSIZE when the ids do not
 * fit. */
int gpt_tok_encode_str(const struct gpt_tok *t, const char *text, unsigned flags, int32_t *out,
                       size_t cap, size_t *ret_n, struct gpt_err *err);

/* Writes the bytes of ids[0, n) to out[0, cap) (not NUL-terminated) and
 * the full length to *ret_len. -EINVAL for an id out of range (named in
 * err), -ENOSPC when the bytes do not fit (then *ret_len is the length
 * needed and out holds a prefix). */
int gpt_tok_decode(const struct gpt_tok *t, const int32_t *ids, size_t n, char *out, size_t cap,
                   size_t *ret_len, struct gpt_err *err);

#endif
