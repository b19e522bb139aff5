/*
 * gguf: GGUF v3 for llama.cpp's gpt2 architecture (see gguf.h). The writer
 * lays the file out in one pass (metadata, tensor table, then each tensor
 * at its 32-byte aligned offset); the reader parses from memory,
 * bounds-checking every read. A file is read, never mapped: a user may
 * truncate a model.init_from file while gptd loads it, and a mapped page
 * past the new end would kill the daemon with SIGBUS. Its header, metadata
 * and tensor table are parsed from a prefix read into memory (grown until
 * they fit, up to GGUF_HEADER_MAX), its tensors read with pread where they
 * are needed. Blocking I/O on the calling thread.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fmt.h"
#include "fmt_out.h"
#include "model.h"
#include "tok.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c writes integers and floats as they are in memory: add byte swapping"
#endif

#define GGUF_MAGIC        "GGUF"
#define GGUF_BLOCK_KINDS  12
#define GGUF_NAME_MAX     64 /* ggml's GGML_MAX_NAME */
#define GGUF_DIMS_MAX     4
#define GGUF_CHUNK        65536
#define GGUF_PREFIX_MIN   (64u << 10) /* first read of a file's header and tables */
#define GGUF_HEADER_MAX   (64u << 20) /* header, metadata and tensor table at most */
#define GGUF_LN_EPS       1e-5f
#define GGUF_FTYPE_F32    0u  /* llama_ftype ALL_F32 */
#define GGUF_FTYPE_F16    1u  /* MOSTLY_F16 */
#define GGUF_FTYPE_BF16   32u /* MOSTLY_BF16 */
#define GGUF_TOKEN_NORMAL 1
#define GGUF_TOKEN_CTRL   3

/* metadata value types */
enum gguf_vtype {
    GGUF_U8 = 0,
    GGUF_I8,
    GGUF_U16,
    GGUF_I16,
    GGUF_U32,
    GGUF_I32,
    GGUF_F32V,
    GGUF_BOOL,
    GGUF_STRING,
    GGUF_ARRAY,
    GGUF_U64,
    GGUF_I64,
    GGUF_F64,
    GGUF_VTYPE_COUNT
};

/* Each block tensor of gptd's layout (in its order) under llama.cpp's name,
 * with its GGUF dimensions in units of C (ne1 0: a 1-D tensor). */
static const struct {
    const char *suffix;
    size_t ne0, ne1;
} gguf_block[GGUF_BLOCK_KINDS] = {
    {"attn_norm.weight", 1, 0}, {"attn_norm.bias", 1, 0},     {"attn_qkv.weight", 1, 3},
    {"attn_qkv.bias", 3, 0},    {"attn_output.weight", 1, 1}, {"attn_output.bias", 1, 0},
    {"ffn_norm.weight", 1, 0},  {"ffn_norm.bias", 1, 0},      {"ffn_up.weight", 1, 4},
    {"ffn_up.bias", 4, 0},      {"ffn_down.weight", 4, 1},    {"ffn_down.bias", 1, 0},
};

/* One tensor of the file: where its floats are in gptd's layout. */
struct gguf_tensor {
    char name[GGUF_NAME_MAX];
    int ndim;
    uint64_t ne[2];
    size_t src; /* offset into params, in floats */
    size_t count;
    int required; /* reader: must be present (output.weight is not) */
};

/* The file's tensors for layout m (V real vocabulary rows); returns the count. */
static size_t gguf_plan(const struct gpt_model *m, struct gguf_tensor *t)
{
    size_t n = 0, C = (size_t)m->cfg.n_embd, V = (size_t)m->cfg.vocab_size;
    size_t L = (size_t)m->cfg.n_layer, T = (size_t)m->cfg.block_size;
    t[n++] = (struct gguf_tensor){"token_embd.weight", 2, {C, V}, m->tensors[0].offset, V * C, 1};
    t[n++] =
        (struct gguf_tensor){"position_embd.weight", 2, {C, T}, m->tensors[1].offset, T * C, 1};
    for (size_t l = 0; l < L; l++)
        for (size_t k = 0; k < GGUF_BLOCK_KINDS; k++) {
            const struct gpt_tensor_info *ti = &m->tensors[2 + l * GGUF_BLOCK_KINDS + k];
            struct gguf_tensor *g = &t[n++];
            snprintf(g->name, sizeof(g->name), "blk.%zu.%s", l, gguf_block[k].suffix);
            g->ndim = gguf_block[k].ne1 ? 2 : 1;
            g->ne[0] = gguf_block[k].ne0 * C;
            g->ne[1] = gguf_block[k].ne1 * C;
            g->src = ti->offset;
            g->count = ti->count;
            g->required = 1;
            GPT_ASSERT(g->count == g->ne[0] * (g->ndim == 2 ? g->ne[1] : 1));
        }
    size_t f = 2 + L * GGUF_BLOCK_KINDS;
    t[n++] = (struct gguf_tensor){"output_norm.weight", 1, {C, 0}, m->tensors[f].offset, C, 1};
    t[n++] = (struct gguf_tensor){"output_norm.bias", 1, {C, 0}, m->tensors[f + 1].offset, C, 1};
    t[n++] = (struct gguf_tensor){"output.weight", 2, {C, V}, m->tensors[0].offset, V * C, 0};
    return n;
}

#define GGUF_PLAN_MAX (2 + GPT_JOB_N_LAYER_MAX * GGUF_BLOCK_KINDS + 3)

int gpt_gguf_dtype_parse(const char *name, enum gpt_gguf_dtype *ret, struct gpt_err *err)
{
    static const struct {
        const char *name;
        enum gpt_gguf_dtype t;
    } names[] = {{"f32", GPT_GGUF_F32}, {"f16", GPT_GGUF_F16}, {"bf16", GPT_GGUF_BF16}};
    for (size_t i = 0; name && i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(name, names[i].name) == 0) {
            *ret = names[i].t;
            return 0;
        }
    return gpt_err_set(err, -EINVAL, "dtype",
                       "unknown GGUF tensor type \"%s\" (give f32, f16 or bf16)", name ? name : "");
}

/* ---- writer ------------------------------------------------------------ */

static int gguf_put(struct gpt_fmt_out *o, const void *p, size_t n, struct gpt_err *err)
{
    return gpt_fmt_out_write(o, p, n, err);
}

static int gguf_put_u32(struct gpt_fmt_out *o, uint32_t x, struct gpt_err *err)
{
    return gguf_put(o, &x, 4, err);
}

static int gguf_put_u64(struct gpt_fmt_out *o, uint64_t x, struct gpt_err *err)
{
    return gguf_put(o, &x, 8, err);
}

static int gguf_put_str(struct gpt_fmt_out *o, const char *s, size_t n, struct gpt_err *err)
{
    int rc = gguf_put_u64(o, n, err);
    return rc < 0 ? rc : gguf_put(o, s, n, err);
}

static int gguf_kv_u32(struct gpt_fmt_out *o, const char *key, uint32_t v, struct gpt_err *err)
{
    int rc = gguf_put_str(o, key, strlen(key), err);
    if (rc == 0)
        rc = gguf_put_u32(o, GGUF_U32, err);
    return rc < 0 ? rc : gguf_put_u32(o, v, err);
}

static int gguf_kv_f32(struct gpt_fmt_out *o, const char *key, float v, struct gpt_err *err)
{
    int rc = gguf_put_str(o, key, strlen(key), err);
    if (rc == 0)
        rc = gguf_put_u32(o, GGUF_F32V, err);
    return rc < 0 ? rc : gguf_put(o, &v, 4, err);
}

static int gguf_kv_str(struct gpt_fmt_out *o, const char *key, const char *v, struct gpt_err *err)
{
    int rc = gguf_put_str(o, key, strlen(key), err);
    if (rc == 0)
        rc = gguf_put_u32(o, GGUF_STRING, err);
    return rc < 0 ? rc : gguf_put_str(o, v, strlen(v), err);
}

/* key, ARRAY, element type, count: the elements follow. */
static int gguf_kv_array(struct gpt_fmt_out *o, const char *key, enum gguf_vtype type, uint64_t n,
                         struct gpt_err *err)
{
    int rc = gguf_put_str(o, key, strlen(key), err);
    if (rc == 0)
        rc = gguf_put_u32(o, GGUF_ARRAY, err);
    if (rc == 0)
        rc = gguf_put_u32(o, type, err);
    return rc < 0 ? rc : gguf_put_u64(o, n, err);
}

#define GGUF_TOKENIZER_KEYS 7

static int gguf_write_tokenizer(struct gpt_fmt_out *o, const struct gpt_tok *tok,
                                struct gpt_err *err)
{
    int n = gpt_tok_vocab_size(tok), nm = gpt_tok_n_merges(tok);
    int32_t eot = gpt_tok_eot(tok);
    char a[GPT_TOK_TEXT_MAX], b[GPT_TOK_TEXT_MAX];
    int32_t *pairs = NULL;
    int rc = gguf_kv_str(o, "tokenizer.ggml.model", "gpt2", err);
    if (rc == 0)
        rc = gguf_kv_str(o, "tokenizer.ggml.pre", "gpt-2", err);
    if (rc == 0)
        rc = gguf_kv_array(o, "tokenizer.ggml.tokens", GGUF_STRING, (uint64_t)n, err);
    for (int32_t id = 0; rc == 0 && id < n; id++) {
        int k = gpt_tok_token_text(tok, id, a, sizeof(a));
        GPT_ASSERT(k >= 0);
        rc = gguf_put_str(o, a, (size_t)k, err);
    }
    if (rc == 0)
        rc = gguf_kv_array(o, "tokenizer.ggml.token_type", GGUF_I32, (uint64_t)n, err);
    for (int32_t id = 0; rc == 0 && id < n; id++)
        rc = gguf_put_u32(o, id == eot ? GGUF_TOKEN_CTRL : GGUF_TOKEN_NORMAL, err);
    if (rc == 0 && !(pairs = malloc(2 * (size_t)(nm > 0 ? nm : 1) * sizeof(*pairs))))
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    if (rc == 0) {
        gpt_tok_merge_pairs(tok, pairs);
        rc = gguf_kv_array(o, "tokenizer.ggml.merges", GGUF_STRING, (uint64_t)nm, err);
    }
    for (int i = 0; rc == 0 && i < nm; i++) {
        int ka = gpt_tok_token_text(tok, pairs[2 * i], a, sizeof(a));
        int kb = gpt_tok_token_text(tok, pairs[2 * i + 1], b, sizeof(b));
        GPT_ASSERT(ka >= 0 && kb >= 0);
        rc = gguf_put_u64(o, (uint64_t)ka + 1 + (uint64_t)kb, err);
        if (rc == 0)
            rc = gguf_put(o, a, (size_t)ka, err);
        if (rc == 0)
            rc = gguf_put(o, " ", 1, err);
        if (rc == 0)
            rc = gguf_put(o, b, (size_t)kb, err);
    }
    if (rc == 0)
        rc = gguf_kv_u32(o, "tokenizer.ggml.bos_token_id", (uint32_t)eot, err);
    if (rc == 0)
        rc = gguf_kv_u32(o, "tokenizer.ggml.eos_token_id", (uint32_t)eot, err);
    free(pairs);
    return rc;
}

static size_t gguf_esize(enum gpt_gguf_dtype t)
{
    return t == GPT_GGUF_F32 ? 4 : 2;
}

static int gguf_write_data(struct gpt_fmt_out *o, const float *src, size_t count,
                           enum gpt_gguf_dtype t, struct gpt_err *err)
{
    if (t == GPT_GGUF_F32)
        return gguf_put(o, src, count * 4, err);
    uint16_t chunk[GGUF_CHUNK];
    for (size_t done = 0; done < count;) {
        size_t k = count - done < GGUF_CHUNK ? count - done : GGUF_CHUNK;
        for (size_t i = 0; i < k; i++)
            chunk[i] = t == GPT_GGUF_F16 ? gpt_fmt_f32_to_f16(src[done + i])
                                         : gpt_fmt_f32_to_bf16(src[done + i]);
        int rc = gguf_put(o, chunk, k * 2, err);
        if (rc < 0)
            return rc;
        done += k;
    }
    return 0;
}

static uint64_t gguf_align(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

/* The file's header and metadata: magic, version, counts, the gpt2
 * architecture's keys and, with a tokenizer, its keys. Returns 0 or a
 * negative errno with err set. */
static int gguf_write_header(struct gpt_fmt_out *o, const struct gpt_model_config *cfg,
                             const struct gpt_gguf_write_opts *op, size_t nt,
                             const struct gpt_tok *tok, struct gpt_err *err)
{
    int rc;
    uint32_t ftype = op->dtype == GPT_GGUF_F32   ? GGUF_FTYPE_F32
                     : op->dtype == GPT_GGUF_F16 ? GGUF_FTYPE_F16
                                                 : GGUF_FTYPE_BF16;
    uint32_t C = (uint32_t)cfg->n_embd;
    rc = gguf_put(o, GGUF_MAGIC, 4, err);
    if (rc == 0)
        rc = gguf_put_u32(o, GPT_GGUF_VERSION, err);
    if (rc == 0)
        rc = gguf_put_u64(o, nt, err);
    if (rc == 0)
        rc = gguf_put_u64(o, 10 + (tok ? GGUF_TOKENIZER_KEYS : 0), err);
    if (rc == 0)
        rc = gguf_kv_str(o, "general.architecture", "gpt2", err);
    if (rc == 0)
        rc = gguf_kv_str(o, "general.name", op->name ? op->name : "gptd", err);
    if (rc == 0)
        rc = gguf_kv_u32(o, "general.file_type", ftype, err);
    if (rc == 0)
        rc = gguf_kv_u32(o, "general.alignment", GPT_GGUF_ALIGNMENT, err);
    if (rc == 0)
        rc = gguf_kv_u32(o, "gpt2.context_length", (uint32_t)cfg->block_size, err);
    if (rc == 0)
        rc = gguf_kv_u32(o, "gpt2.embedding_length", C, err);
    if (rc == 0)
        rc = gguf_kv_u32(o, "gpt2.feed_forward_length", 4 * C, err);
    if (rc == 0)
        rc = gguf_kv_u32(o, "gpt2.block_count", (uint32_t)cfg->n_layer, err);
    if (rc == 0)
        rc = gguf_kv_u32(o, "gpt2.attention.head_count", (uint32_t)cfg->n_head, err);
    if (rc == 0)
        rc = gguf_kv_f32(o, "gpt2.attention.layer_norm_epsilon", GGUF_LN_EPS, err);
    if (rc == 0 && tok)
        rc = gguf_write_tokenizer(o, tok, err);
    return rc;
}

/* The tensor table: each tensor's name, shape, type (2-D ones in `dtype`,
 * the rest f32) and offset from the start of the data section. Returns 0
 * or a negative errno with err set. */
static int gguf_write_table(struct gpt_fmt_out *o, const struct gguf_tensor *t, size_t nt,
                            enum gpt_gguf_dtype dtype, struct gpt_err *err)
{
    int rc = 0;
    uint64_t off = 0;
    for (size_t i = 0; rc == 0 && i < nt; i++) {
        enum gpt_gguf_dtype dt = t[i].ndim == 2 ? dtype : GPT_GGUF_F32;
        rc = gguf_put_str(o, t[i].name, strlen(t[i].name), err);
        if (rc == 0)
            rc = gguf_put_u32(o, (uint32_t)t[i].ndim, err);
        for (int d = 0; rc == 0 && d < t[i].ndim; d++)
            rc = gguf_put_u64(o, t[i].ne[d], err);
        if (rc == 0)
            rc = gguf_put_u32(o, (uint32_t)dt, err);
        if (rc == 0)
            rc = gguf_put_u64(o, off, err);
        off = gguf_align(off + t[i].count * gguf_esize(dt), GPT_GGUF_ALIGNMENT);
    }
    return rc;
}

int gpt_gguf_write_opts(const char *path, const struct gpt_model_config *cfg, const float *params,
                        const char *vocab_dir, const struct gpt_gguf_write_opts *opts,
                        struct gpt_err *err)
{
    struct gpt_gguf_write_opts def = {.dtype = GPT_GGUF_F32};
    const struct gpt_gguf_write_opts *op = opts ? opts : &def;
    struct gpt_model *m = malloc(sizeof(*m));
    struct gguf_tensor *t = malloc(GGUF_PLAN_MAX * sizeof(*t));
    struct gpt_tok *tok = NULL;
    struct gpt_fmt_out o = {.f.fd = -1};
    int rc;
    if (!m || !t) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "%s: out of memory", path);
        goto out;
    }
    if (op->dtype != GPT_GGUF_F32 && op->dtype != GPT_GGUF_F16 && op->dtype != GPT_GGUF_BF16) {
        rc = gpt_err_set(err, -EINVAL, "dtype", "GGUF tensor type %d is not f32, f16 or bf16",
                         (int)op->dtype);
        goto out;
    }
    if ((rc = gpt_model_layout(m, cfg, err)) < 0)
        goto out;
    if (vocab_dir) {
        if ((rc = gpt_tok_load(vocab_dir, &tok, err)) < 0)
            goto out;
        if (gpt_tok_vocab_size(tok) != cfg->vocab_size) {
            rc = gpt_err_set(err, -EINVAL, "model.vocab_size",
                             "the model has %d tokens but the vocabulary in %s has %d",
                             cfg->vocab_size, vocab_dir, gpt_tok_vocab_size(tok));
            goto out;
        }
    }
    size_t nt = gguf_plan(m, t);
    if ((rc = gpt_fmt_out_open(&o, path, op->mode, op->tmp_prefix, err)) < 0)
        goto out;
    rc = gguf_write_header(&o, cfg, op, nt, tok, err);
    if (rc == 0)
        rc = gguf_write_table(&o, t, nt, op->dtype, err);
    if (rc == 0)
        rc = gpt_fmt_out_pad(&o, GPT_GGUF_ALIGNMENT, err);
    for (size_t i = 0; rc == 0 && i < nt; i++) {
        enum gpt_gguf_dtype dt = t[i].ndim == 2 ? op->dtype : GPT_GGUF_F32;
        if (gpt_fmt_cancelled(op->cancel)) {
            rc = gpt_err_set(err, -ECANCELED, NULL, "the export to %s was cancelled", path);
            break;
        }
        rc = gguf_write_data(&o, params + t[i].src, t[i].count, dt, err);
        if (rc == 0)
            rc = gpt_fmt_out_pad(&o, GPT_GGUF_ALIGNMENT, err);
    }
    if (rc == 0)
        rc = gpt_fmt_out_commit(&o, err);
out:
    gpt_fmt_out_abort(&o);
    gpt_tok_free(tok);
    free(t);
    free(m);
    return rc;
}

/* ---- reader -------------------------------------------------------------- */

/* What the parser reads: p[0, len) is the file (fd -1) or a prefix of it
 * (fd >= 0: tensor data is read from fd, the file holding file_len bytes
 * when opened). */
struct gguf_rd {
    const unsigned char *p;
    size_t len, off;
    const char *name;
    struct gpt_err *err;
    int fd;
    uint64_t file_len;
    int ran_short; /* a parse needed bytes past len (a prefix may be too short) */
};

static int gguf_short(struct gguf_rd *r, const char *what)
{
    r->ran_short = 1;
    return gpt_err_set(r->err, -GPT_E_CORRUPT, NULL, "%s: truncated at byte %zu (reading %s)",
                       r->name, r->off, what);
}

/* n bytes at byte `at` of the file (checked to lie in it when opened) into
 * dst. A read that ends early means the file shrank since it was opened. */
static int gguf_read_at(struct gguf_rd *r, uint64_t at, void *dst, size_t n)
{
    if (r->fd < 0) {
        memcpy(dst, r->p + at, n);
        return 0;
    }
    for (size_t done = 0; done < n;) {
        ssize_t k = pread(r->fd, (unsigned char *)dst + done, n - done, (off_t)(at + done));
        if (k > 0) {
            done += (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            int e = errno;
            return gpt_err_set(r->err, -e, NULL, "%s: read: %s", r->name, strerror(e));
        }
        return gpt_err_set(r->err, -GPT_E_CORRUPT, NULL,
                           "%s: the file shrank while it was read (it held %" PRIu64 " bytes)",
                           r->name, r->file_len);
    }
    return 0;
}

static int gguf_get(struct gguf_rd *r, void *dst, size_t n, const char *what)
{
    if (r->len - r->off < n)
        return gguf_short(r, what);
    memcpy(dst, r->p + r->off, n);
    r->off += n;
    return 0;
}

static int gguf_get_u32(struct gguf_rd *r, uint32_t *x, const char *what)
{
    return gguf_get(r, x, 4, what);
}

static int gguf_get_u64(struct gguf_rd *r, uint64_t *x, const char *what)
{
    return gguf_get(r, x, 8, what);
}

/* A string borrowed from the buffer (not NUL-terminated). */
static int gguf_get_str(struct gguf_rd *r, const char **s, size_t *n, const char *what)
{
    uint64_t len = 0;
    int rc = gguf_get_u64(r, &len, what);
    if (rc < 0)
        return rc;
    if (len > GPT_GGUF_STRING_MAX)
        return gpt_err_set(r->err, -GPT_E_CORRUPT, NULL,
                           "%s: %s at byte %zu is %" PRIu64 " bytes long (at most %u)", r->name,
                           what, r->off - 8, len, GPT_GGUF_STRING_MAX);
    if (r->len - r->off < len)
        return gguf_short(r, what);
    *s = (const char *)r->p + r->off;
    *n = (size_t)len;
    r->off += (size_t)len;
    return 0;
}

static size_t gguf_scalar_size(uint32_t type)
{
    static const unsigned char sz[GGUF_VTYPE_COUNT] = {
        [GGUF_U8] = 1,  [GGUF_I8] = 1,  [GGUF_U16] = 2,  [GGUF_I16] = 2,
        [GGUF_U32] = 4, [GGUF_I32] = 4, [GGUF_F32V] = 4, [GGUF_BOOL] = 1,
        [GGUF_U64] = 8, [GGUF_I64] = 8, [GGUF_F64] = 8};
    return type < GGUF_VTYPE_COUNT ? sz[type] : 0;
}

/* What the reader keeps from the metadata. */
struct gguf_meta {
    int have_arch;
    /* the values of gguf_hp_keys, in its order, and whether each was seen */
    uint64_t hp[5];
    int have_hp[5];
    uint32_t alignment;
    int64_t n_tokens; /* tokenizer.ggml.tokens' length, -1 when absent */
};

static const char *const gguf_hp_keys[5] = {"gpt2.context_length", "gpt2.embedding_length",
                                            "gpt2.feed_forward_length", "gpt2.block_count",
                                            "gpt2.attention.head_count"};

static int gguf_key_is(const char *k, size_t n, const char *want)
{
    return strlen(want) == n && memcmp(k, want, n) == 0;
}

/* An unsigned integer value of any integer type; -1 for other types. */
static int gguf_uint_value(const unsigned char *v, uint32_t type, uint64_t *ret)
{
    int64_t s;
    switch (type) {
    case GGUF_U8:
        *ret = v[0];
        return 0;
    case GGUF_U16: {
        uint16_t x;
        memcpy(&x, v, 2);
        *ret = x;
        return 0;
    }
    case GGUF_U32: {
        uint32_t x;
        memcpy(&x, v, 4);
        *ret = x;
        return 0;
    }
    case GGUF_U64:
        memcpy(ret, v, 8);
        return 0;
    case GGUF_I8:
        s = (int8_t)v[0];
        break;
    case GGUF_I16: {
        int16_t x;
        memcpy(&x, v, 2);
        s = x;
        break;
    }
    case GGUF_I32: {
        int32_t x;
        memcpy(&x, v, 4);
        s = x;
        break;
    }
    case GGUF_I64:
        memcpy(&s, v, 8);
        break;
    default:
        return -1;
    }
    if (s < 0)
        return -1;
    *ret = (uint64_t)s;
    return 0;
}

static int gguf_read_kv(struct gguf_rd *r, struct gguf_meta *md)
{
    const char *key, *s;
    size_t klen, slen;
    uint32_t type;
    int rc = gguf_get_str(r, &key, &klen, "a metadata key");
    if (rc == 0)
        rc = gguf_get_u32(r, &type, "a metadata type");
    if (rc < 0)
        return rc;
    if (type == GGUF_STRING) {
        if ((rc = gguf_get_str(r, &s, &slen, "a metadata string")) < 0)
            return rc;
        if (gguf_key_is(key, klen, "general.architecture")) {
            if (!(slen == 4 && memcmp(s, "gpt2", 4) == 0))
                return gpt_err_set(r->err, -EINVAL, NULL,
                                   "%s: general.architecture is \"%.*s\"; gptd reads gpt2 only",
                                   r->name, (int)(slen < 64 ? slen : 64), s);
            md->have_arch = 1;
        }
        return 0;
    }
    if (type == GGUF_ARRAY) {
        uint32_t et;
        uint64_t n;
        if ((rc = gguf_get_u32(r, &et, "an array type")) < 0 ||
            (rc = gguf_get_u64(r, &n, "an array length")) < 0)
            return rc;
        if (gguf_key_is(key, klen, "tokenizer.ggml.tokens"))
            md->n_tokens = n > INT64_MAX ? INT64_MAX : (int64_t)n;
        if (et == GGUF_STRING) {
            if (n > (r->len - r->off) / 8)
                return gguf_short(r, "a string array");
            for (uint64_t i = 0; i < n; i++)
                if ((rc = gguf_get_str(r, &s, &slen, "an array string")) < 0)
                    return rc;
            return 0;
        }
        size_t es = gguf_scalar_size(et);
        if (es == 0)
            return gpt_err_set(r->err, -GPT_E_CORRUPT, NULL,
                               "%s: metadata %.*s: array of type %" PRIu32
                               " (not a scalar or string)",
                               r->name, (int)(klen < 128 ? klen : 128), key, et);
        if (n > (r->len - r->off) / es)
            return gguf_short(r, "an array");
        r->off += (size_t)n * es;
        return 0;
    }
    size_t es = gguf_scalar_size(type);
    if (es == 0)
        return gpt_err_set(r->err, -GPT_E_CORRUPT, NULL,
                           "%s: metadata %.*s has unknown type %" PRIu32, r->name,
                           (int)(klen < 128 ? klen : 128), key, type);
    unsigned char v[8];
    if ((rc = gguf_get(r, v, es, "a metadata value")) < 0)
        return rc;
    for (int i = 0; i < 5; i++)
        if (gguf_key_is(key, klen, gguf_hp_keys[i])) {
            if (gguf_uint_value(v, type, &md->hp[i]) < 0)
                return gpt_err_set(r->err, -GPT_E_CORRUPT, NULL,
                                   "%s: %s is not a non-negative integer", r->name,
                                   gguf_hp_keys[i]);
            md->have_hp[i] = 1;
        }
    if (gguf_key_is(key, klen, "general.alignment")) {
        uint64_t a;
        if (gguf_uint_value(v, type, &a) < 0 || a == 0 || a > 65536 || (a & (a - 1)) != 0)
            return gpt_err_set(r->err, -GPT_E_CORRUPT, NULL,
                               "%s: general.alignment must be a power of two up to 65536", r->name);
        md->alignment = (uint32_t)a;
    }
    return 0;
}

/* One entry of the file's tensor table. */
struct gguf_info {
    const char *name;
    size_t name_len;
    uint32_t ndim, type;
    uint64_t ne[GGUF_DIMS_MAX];
    uint64_t off;
};

static int gguf_read_info(struct gguf_rd *r, struct gguf_info *ti)
{
    int rc = gguf_get_str(r, &ti->name, &ti->name_len, "a tensor name");
    if (rc == 0)
        rc = gguf_get_u32(r, &ti->ndim, "a tensor's dimension count");
    if (rc < 0)
        return rc;
    int nl = (int)(ti->name_len < GGUF_NAME_MAX ? ti->name_len : GGUF_NAME_MAX);
    if (ti->name_len >= GGUF_NAME_MAX)
        return gpt_err_set(r->err, -GPT_E_CORRUPT, NULL, "%s: tensor name '%.*s...' is too long",
                           r->name, nl, ti->name);
    if (ti->ndim < 1 || ti->ndim > GGUF_DIMS_MAX)
        return gpt_err_set(r->err, -GPT_E_CORRUPT, NULL,
                           "%s: tensor %.*s has %" PRIu32 " dimensions", r->name, nl, ti->name,
                           ti->ndim);
    for (uint32_t d = 0; d < ti->ndim; d++)
        if ((rc = gguf_get_u64(r, &ti->ne[d], "a tensor dimension")) < 0)
            return rc;
    if ((rc = gguf_get_u32(r, &ti->type, "a tensor type")) < 0 ||
        (rc = gguf_get_u64(r, &ti->off, "a tensor offset")) < 0)
        return rc;
    return 0;
}

static int gguf_find(struct gguf_rd *r, const struct gguf_info *ti, size_t n, const char *name,
                     const struct gguf_info **ret)
{
    *ret = NULL;
    for (size_t i = 0; i < n; i++)
        if (gguf_key_is(ti[i].name, ti[i].name_len, name)) {
            if (*ret)
                return gpt_err_set(r->err, -GPT_E_CORRUPT, NULL, "%s: tensor %s is listed twice",
                                   r->name, name);
            *ret = &ti[i];
        }
    return 0;
}

/* Checks tensor ti against the planned g and converts its data into dst
 * (NULL: check only). */
static int gguf_load_tensor(struct gguf_rd *r, uint64_t data_start, uint32_t align,
                            const struct gguf_info *ti, const struct gguf_tensor *g, float *dst)
{
    uint64_t want[2] = {g->ne[0], g->ndim == 2 ? g->ne[1] : 1};
    int ok = ti->ndim >= (uint32_t)g->ndim;
    for (uint32_t d = 0; ok && d < ti->ndim; d++)
        ok = ti->ne[d] == (d < 2 ? want[d] : 1);
    if (!ok)
        return gpt_err_set(r->err, -GPT_E_CORRUPT, NULL,
                           "%s: tensor %s has shape [%" PRIu64 ", %" PRIu64 "...]; the model's "
                           "hyper-parameters make it [%" PRIu64 ", %" PRIu64 "]",
                           r->name, g->name, ti->ne[0], ti->ndim > 1 ? ti->ne[1] : 1, want[0],
                           want[1]);
    size_t es = ti->type == GPT_GGUF_F32                                  ? 4
                : (ti->type == GPT_GGUF_F16 || ti->type == GPT_GGUF_BF16) ? 2
                                                                          : 0;
    if (es == 0)
        return gpt_err_set(r->err, -GPT_E_CORRUPT, NULL,
                           "%s: tensor %s has ggml type %" PRIu32 " (gptd reads f32, f16 and bf16)",
                           r->name, g->name, ti->type);
    uint64_t bytes = (uint64_t)g->count * es, avail = r->file_len - data_start;
    if (ti->off % align != 0 || ti->off > avail || bytes > avail - ti->off)
        return gpt_err_set(r->err, -GPT_E_CORRUPT, NULL,
                           "%s: tensor %s: offset %" PRIu64 " (+%" PRIu64
                           " bytes) is misaligned or past the end of the file (%" PRIu64
                           " bytes of tensor data after %" PRIu64 " bytes of header)",
                           r->name, g->name, ti->off, bytes, avail, data_start);
    if (!dst)
        return 0;
    uint64_t at = data_start + ti->off;
    if (es == 4)
        return gguf_read_at(r, at, dst, (size_t)bytes);
    uint16_t h[GGUF_CHUNK / 2];
    for (size_t i = 0; i < g->count;) {
        size_t k = g->count - i < GGUF_CHUNK / 2 ? g->count - i : GGUF_CHUNK / 2;
        int rc = gguf_read_at(r, at + 2 * (uint64_t)i, h, 2 * k);
        if (rc < 0)
            return rc;
        for (size_t j = 0; j < k; j++)
            dst[i + j] =
                ti->type == GPT_GGUF_F16 ? gpt_fmt_f16_to_f32(h[j]) : gpt_fmt_bf16_to_f32(h[j]);
        i += k;
    }
    return 0;
}

/* A parsed file: what the metadata and tensor table say. */
struct gguf_parsed {
    struct gguf_meta md;
    struct gguf_info *ti; /* (nt) owned */
    uint64_t nt;
    uint64_t data_start;
    struct gpt_model_config cfg;
};

static int gguf_fill(struct gguf_rd *r, const struct gguf_parsed *p, const struct gpt_model *m,
                     float *params);

/* Header, metadata and tensor table; the model config they describe. */
static int gguf_parse(struct gguf_rd *r, struct gguf_parsed *p)
{
    struct gpt_err *err = r->err;
    const char *name = r->name;
    char magic[4];
    uint32_t version;
    uint64_t nkv;
    memset(p, 0, sizeof(*p));
    p->md.alignment = GPT_GGUF_ALIGNMENT;
    p->md.n_tokens = -1;
    int rc = gguf_get(r, magic, 4, "the magic");
    if (rc < 0)
        return rc;
    if (memcmp(magic, GGUF_MAGIC, 4) != 0)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: not a GGUF file (no GGUF magic)", name);
    if ((rc = gguf_get_u32(r, &version, "the version")) < 0)
        return rc;
    if (version != GPT_GGUF_VERSION)
        return gpt_err_set(err, -GPT_E_VERSION, NULL, "%s: GGUF version %" PRIu32 " (gptd reads 3)",
                           name, version);
    if ((rc = gguf_get_u64(r, &p->nt, "the tensor count")) < 0 ||
        (rc = gguf_get_u64(r, &nkv, "the metadata count")) < 0)
        return rc;
    if (p->nt > GPT_GGUF_TENSORS_MAX || nkv > GPT_GGUF_KV_MAX)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "%s: %" PRIu64 " tensors and %" PRIu64
                           " metadata keys (at most %d and %d)",
                           name, p->nt, nkv, GPT_GGUF_TENSORS_MAX, GPT_GGUF_KV_MAX);
    struct gguf_meta *md = &p->md;
    for (uint64_t i = 0; i < nkv; i++)
        if ((rc = gguf_read_kv(r, md)) < 0)
            return rc;
    if (!md->have_arch)
        return gpt_err_set(err, -EINVAL, NULL, "%s: no general.architecture = gpt2", name);
    for (int i = 0; i < 5; i++)
        if (!md->have_hp[i])
            return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: no %s", name, gguf_hp_keys[i]);
    p->ti = calloc(p->nt ? p->nt : 1, sizeof(*p->ti));
    if (!p->ti)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    for (uint64_t i = 0; i < p->nt; i++)
        if ((rc = gguf_read_info(r, &p->ti[i])) < 0)
            return rc;
    p->data_start = gguf_align(r->off, md->alignment);
    if (p->data_start > r->len)
        return gguf_short(r, "the padding before the tensor data");
    /* hyper-parameters -> config; vocab_size from token_embd */
    const struct gguf_info *emb;
    if ((rc = gguf_find(r, p->ti, p->nt, "token_embd.weight", &emb)) < 0)
        return rc;
    if (!emb || emb->ndim != 2)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: no 2-D tensor token_embd.weight", name);
    uint64_t lim[5] = {65536, 65536, 4 * 65536, GPT_JOB_N_LAYER_MAX, 65536};
    for (int i = 0; i < 5; i++)
        if (md->hp[i] < 1 || md->hp[i] > lim[i])
            return gpt_err_set(err, -EINVAL, NULL,
                               "%s: %s is %" PRIu64 " (gptd takes 1..%" PRIu64 ")", name,
                               gguf_hp_keys[i], md->hp[i], lim[i]);
    if (md->hp[2] != 4 * md->hp[1])
        return gpt_err_set(err, -EINVAL, NULL,
                           "%s: gpt2.feed_forward_length %" PRIu64
                           " is not 4 x embedding_length (%" PRIu64
                           "), the only MLP width gptd has",
                           name, md->hp[2], md->hp[1]);
    if (emb->ne[1] < 1 || emb->ne[1] > (1 << 24))
        return gpt_err_set(err, -EINVAL, NULL, "%s: token_embd.weight has %" PRIu64 " rows (1..%d)",
                           name, emb->ne[1], 1 << 24);
    if (md->n_tokens >= 0 && (uint64_t)md->n_tokens != emb->ne[1])
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "%s: tokenizer.ggml.tokens has %" PRId64
                           " tokens, token_embd.weight %" PRIu64 " rows",
                           name, md->n_tokens, emb->ne[1]);
    p->cfg = (struct gpt_model_config){.n_layer = (int)md->hp[3],
                                       .n_head = (int)md->hp[4],
                                       .n_embd = (int)md->hp[1],
                                       .block_size = (int)md->hp[0],
                                       .vocab_size = (int)emb->ne[1]};
    struct gpt_model *m = malloc(sizeof(*m));
    struct gpt_err lerr;
    if (!m)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    rc = gpt_model_layout(m, &p->cfg, &lerr); /* the config is one gptd can hold */
    if (rc < 0)
        rc = gpt_err_set(err, rc, NULL, "%s: %s", name, lerr.msg);
    /* The metadata's model against the file, before anyone allocates it:
     * its tensors at 2 bytes each (f16, bf16) must fit the data, and then
     * every tensor the model needs must be in the table with its shape
     * and lie inside the file. */
    if (rc == 0)
        rc = gpt_fmt_check_data_size(name, "its header", m, 2, r->file_len - p->data_start, err);
    if (rc == 0)
        rc = gguf_fill(r, p, m, NULL);
    free(m);
    return rc;
}

/* Every tensor of layout m (the parsed config's) into params (zeroed by
 * the caller); with params NULL, only checks each (shape, type, and its
 * bytes within the file). */
static int gguf_fill(struct gguf_rd *r, const struct gguf_parsed *p, const struct gpt_model *m,
                     float *params)
{
    struct gguf_tensor *plan = malloc(GGUF_PLAN_MAX * sizeof(*plan));
    int rc = 0;
    if (!plan)
        return gpt_err_set(r->err, -ENOMEM, NULL, "out of memory");
    size_t np = gguf_plan(m, plan);
    for (size_t i = 0; rc == 0 && i < np; i++) {
        const struct gguf_info *f;
        if ((rc = gguf_find(r, p->ti, p->nt, plan[i].name, &f)) < 0)
            break;
        if (!f) {
            if (plan[i].required)
                rc = gpt_err_set(r->err, -GPT_E_CORRUPT, NULL, "%s: no tensor %s", r->name,
                                 plan[i].name);
            continue;
        }
        /* output.weight (tied to token_embd) is checked, not loaded */
        rc = gguf_load_tensor(r, p->data_start, p->md.alignment, f, &plan[i],
                              params && plan[i].required ? params + plan[i].src : NULL);
    }
    free(plan);
    return rc;
}

/* The parsed file's tensors into a new array in gptd's layout. */
static int gguf_read_params(struct gguf_rd *r, const struct gguf_parsed *p,
                            struct gpt_model_config *ret_cfg, float **ret_params, size_t *ret_n)
{
    struct gpt_model *m = malloc(sizeof(*m));
    float *params = NULL;
    int rc;
    if (!m) {
        rc = gpt_err_set(r->err, -ENOMEM, NULL, "out of memory");
        goto out;
    }
    if ((rc = gpt_model_layout(m, &p->cfg, r->err)) < 0)
        goto out;
    params = calloc(m->n_params, sizeof(float));
    if (!params) {
        rc = gpt_err_set(r->err, -ENOMEM, NULL, "%s: out of memory for %zu parameters", r->name,
                         m->n_params);
        goto out;
    }
    if ((rc = gguf_fill(r, p, m, params)) < 0)
        goto out;
    *ret_cfg = p->cfg;
    *ret_params = params;
    *ret_n = m->n_params;
    params = NULL;
out:
    free(params);
    free(m);
    return rc;
}

int gpt_gguf_read_mem(const void *buf, size_t len, const char *name,
                      struct gpt_model_config *ret_cfg, float **ret_params, size_t *ret_n,
                      struct gpt_err *err)
{
    struct gguf_rd r = {buf, len, 0, name, err, -1, len, 0};
    struct gguf_parsed p;
    int rc = gguf_parse(&r, &p);
    if (rc == 0)
        rc = gguf_read_params(&r, &p, ret_cfg, ret_params, ret_n);
    free(p.ti);
    return rc;
}

/* A GGUF file opened for reading: fd, its size, the prefix its header and
 * tables were parsed from (owned; the parsed names point into it). */
struct gguf_file {
    int fd;
    uint64_t len;
    unsigned char *prefix;
};

static void gguf_file_close(struct gguf_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    free(f->prefix);
}

/* Opens path and parses its header, metadata and tensor table into *p (r
 * set up to read the file's tensors). The prefix read grows while the
 * parse runs past its end: a parse that succeeds on a prefix
 * reads only bytes the file holds there, and every bound it checks is
 * looser on the whole file, so it would succeed the same way on the whole
 * file. */
static int gguf_open(const char *path, struct gguf_file *f, struct gguf_rd *r,
                     struct gguf_parsed *p, struct gpt_err *err)
{
    struct stat st;
    int rc;
    *f = (struct gguf_file){.fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
    memset(p, 0, sizeof(*p));
    if (f->fd < 0) {
        rc = -errno;
        return gpt_err_set(err, rc, NULL, "%s: %s", path, strerror(-rc));
    }
    if (fstat(f->fd, &st) < 0 || !S_ISREG(st.st_mode))
        return gpt_err_set(err, -EINVAL, NULL, "%s: not a regular file", path);
    if (st.st_size < 24)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: %lld bytes, too short for GGUF", path,
                           (long long)st.st_size);
    f->len = (uint64_t)st.st_size;
    uint64_t cap = f->len < GGUF_PREFIX_MIN ? f->len : GGUF_PREFIX_MIN;
    for (;;) {
        unsigned char *np = realloc(f->prefix, (size_t)cap);
        if (!np)
            return gpt_err_set(err, -ENOMEM, NULL, "%s: out of memory", path);
        f->prefix = np;
        *r = (struct gguf_rd){np, (size_t)cap, 0, path, err, f->fd, f->len, 0};
        if ((rc = gguf_read_at(r, 0, np, (size_t)cap)) < 0)
            return rc;
        r->fd = cap == f->len ? -1 : f->fd; /* tensor reads come from memory or the file */
        free(p->ti);
        /* Only a parse that ran past the prefix may succeed on a longer one. */
        if ((rc = gguf_parse(r, p)) == 0 || cap == f->len || !r->ran_short)
            break;
        if (cap >= GGUF_HEADER_MAX) {
            char why[GPT_ERR_MSG_MAX];
            snprintf(why, sizeof(why), "%s", err ? err->msg : "damaged");
            return gpt_err_set(err, rc, NULL,
                               "%s: the header, metadata and tensor table do not end within "
                               "%u MiB (%s)",
                               path, GGUF_HEADER_MAX >> 20, why);
        }
        cap = f->len / 4 < cap ? f->len : cap * 4;
        if (cap > GGUF_HEADER_MAX && f->len > GGUF_HEADER_MAX)
            cap = GGUF_HEADER_MAX;
    }
    return rc;
}

int gpt_gguf_read(const char *path, struct gpt_model_config *ret_cfg, float **ret_params,
                  size_t *ret_n, struct gpt_err *err)
{
    struct gguf_file f;
    struct gguf_rd r;
    struct gguf_parsed p;
    int rc = gguf_open(path, &f, &r, &p, err);
    if (rc == 0)
        rc = gguf_read_params(&r, &p, ret_cfg, ret_params, ret_n);
    free(p.ti);
    gguf_file_close(&f);
    return rc;
}

int gpt_gguf_probe(const char *path, struct gpt_model_config *ret_cfg, struct gpt_err *err)
{
    struct gguf_file f;
    struct gguf_rd r;
    struct gguf_parsed p;
    int rc = gguf_open(path, &f, &r, &p, err);
    if (rc == 0)
        *ret_cfg = p.cfg;
    free(p.ti);
    gguf_file_close(&f);
    return rc;
}

int gpt_gguf_load(const char *path, const struct gpt_model *layout, float *params,
                  struct gpt_err *err)
{
    struct gguf_file f;
    struct gguf_rd r;
    struct gguf_parsed p;
    int rc = gguf_open(path, &f, &r, &p, err);
    const struct gpt_model_config *c = &p.cfg, *w = &layout->cfg;
    if (rc == 0 && (c->n_layer != w->n_layer || c->n_head != w->n_head || c->n_embd != w->n_embd ||
                    c->block_size != w->block_size || c->vocab_size != w->vocab_size))
        rc = gpt_err_set(err, -EINVAL, NULL,
                         "%s: the file's model (n_layer %d, n_head %d, n_embd %d, block_size %d, "
                         "vocab_size %d) is not the one asked for (%d, %d, %d, %d, %d)",
                         path, c->n_layer, c->n_head, c->n_embd, c->block_size, c->vocab_size,
                         w->n_layer, w->n_head, w->n_embd, w->block_size, w->vocab_size);
    if (rc == 0) {
        memset(params, 0, layout->n_params * sizeof(float));
        rc = gguf_fill(&r, &p, layout, params);
    }
    free(p.ti);
    gguf_file_close(&f);
    return rc;
}
