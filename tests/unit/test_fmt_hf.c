/*
 * test_fmt_hf: the safetensors reader and writer (engine/fmt/safetensors.c)
 * and Hugging Face GPT-2 folders (engine/fmt/hf.c): round trips bit for
 * bit, Conv1D transposition, vocabulary padding, F16/BF16 conversion,
 * refused targets, and hostile headers (each refused with a message naming
 * what is wrong, never a crash).
 */
#define _GNU_SOURCE /* nftw */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "export.h"
#include "hf.h"
#include "safetensors.h"
#include "unit/tmp_dir.h"

static int setup(void **state)
{
    (void)state;
    return tmp_dir_make("fmt-hf");
}

/* A buffer: 8-byte LE header length, the header, then `data_len` zero bytes. */
static unsigned char *make_file(const char *header, uint64_t claimed_len, size_t data_len,
                                size_t *ret_len)
{
    size_t hl = strlen(header);
    unsigned char *b = calloc(1, 8 + hl + data_len + 1);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(claimed_len >> (8 * i));
    memcpy(b + 8, header, hl);
    *ret_len = 8 + hl + data_len;
    return b;
}

/* Parses header (+ data_len bytes) and expects a refusal mentioning `want`. */
static void expect_refused(const char *header, int64_t claimed, size_t data_len, const char *want)
{
    size_t len;
    uint64_t hl = claimed >= 0 ? (uint64_t)claimed : strlen(header);
    unsigned char *b = make_file(header, hl, data_len, &len);
    struct gpt_st_index ix = {0};
    struct gpt_err err;
    gpt_err_clear(&err);
    int rc = gpt_st_parse_header(b, len, len, "hostile.safetensors", &ix, &err);
    if (rc != -GPT_E_CORRUPT || !strstr(err.msg, want))
        fail_msg("header %s: rc %d, message \"%s\", wanted \"%s\"", header, rc, err.msg, want);
    assert_null(ix.t);
    free(b);
}

static void test_st_hostile(void **state)
{
    (void)state;
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    size_t len;
    unsigned char *b = make_file(ok, strlen(ok), 8, &len);
    struct gpt_st_index ix = {0};
    struct gpt_err err;
    assert_int_equal(gpt_st_parse_header(b, len, len, "ok", &ix, &err), 0);
    assert_int_equal(ix.n, 1);
    assert_int_equal(ix.t[0].count, 2);
    assert_int_equal(ix.data_start, 8 + strlen(ok));
    gpt_st_index_done(&ix);
    /* the file has fewer bytes than the offsets claim */
    assert_int_equal(gpt_st_parse_header(b, len - 1, len - 1, "short", &ix, &err), -GPT_E_CORRUPT);
    free(b);

    expect_refused(ok, (int64_t)strlen(ok) + 100, 8, "runs past the end");
    expect_refused(ok, (int64_t)1 << 40, 8, "outside 2..");
    expect_refused(ok, 1, 8, "outside 2..");
    expect_refused("[1, 2, 3]", -1, 0, "not a JSON object");
    expect_refused("{\"a\": 1", -1, 0, "not valid JSON");
    expect_refused("{\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", -1, 8,
                   "dtype I64");
    expect_refused("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", -1, 4, "no dtype");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", -1, 8,
                   "8 bytes of data for 3 elements");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", -1, 8,
                   "data_offsets");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", -1, 8,
                   "data_offsets");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", -1, 8,
                   "data_offsets");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", -1, 8,
                   "dimension 0");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", -1,
                   4, "at most 4");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],"
                   "\"data_offsets\":[0,4]}}",
                   -1, 4, "shape too large");
    /* overlapping tensors and a hole in the buffer */
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                   -1, 12, "overlap or leave a hole");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                   -1, 12, "overlap or leave a hole");
    expect_refused(ok, -1, 12, "the tensors cover 8 bytes");
    expect_refused("{\"__metadata__\": [1]}", -1, 0, "__metadata__ is not an object");
    expect_refused("{\"__metadata__\": {\"a\": 1}}", -1, 0, "must be strings");
    expect_refused("{\"a\": 5}", -1, 0, "not a JSON object");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                   -1, 8, "not valid JSON");
    /* shorter than the length prefix */
    assert_int_equal(gpt_st_parse_header("abc", 3, 3, "tiny", &ix, &err), -GPT_E_CORRUPT);
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, p, n), (ssize_t)n);
    close(fd);
}

static void test_st_half(void **state)
{
    (void)state;
    /* F16: 1.0 = 0x3c00, -2.5 = 0xc100, smallest subnormal 2^-24 = 0x0001, 65504 = 0x7bff;
     * BF16: 1.0 = 0x3f80, -0.15625 = 0xbe20 */
    const char *h = "{\"h\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[8,12]}}";
    size_t len;
    unsigned char *b = make_file(h, strlen(h), 12, &len);
    unsigned char *d = b + 8 + strlen(h);
    const uint16_t vals[6] = {0x3c00, 0xc100, 0x0001, 0x7bff, 0x3f80, 0xbe20};
    for (int i = 0; i < 6; i++) {
        d[2 * i] = (unsigned char)vals[i];
        d[2 * i + 1] = (unsigned char)(vals[i] >> 8);
    }
    char path[512];
    snprintf(path, sizeof(path), "%s/half.safetensors", tmpdir);
    write_bytes(path, b, len);
    free(b);
    struct gpt_st_file f;
    struct gpt_err err;
    assert_int_equal(gpt_st_open(path, &f, &err), 0);
    float out[4];
    assert_int_equal(gpt_st_read_f32(&f, gpt_st_find(&f.ix, "h"), out, &err), 0);
    assert_true(out[0] == 1.0f && out[1] == -2.5f && out[2] == ldexpf(1.0f, -24) &&
                out[3] == 65504.0f);
    assert_int_equal(gpt_st_read_f32(&f, gpt_st_find(&f.ix, "b"), out, &err), 0);
    assert_true(out[0] == 1.0f && out[1] == -0.15625f);
    gpt_st_close(&f);
    assert_true(isinf(gpt_st_f16_to_f32(0x7c00)) && isnan(gpt_st_f16_to_f32(0x7e00)));
    assert_true(gpt_st_f16_to_f32(0x0400) == ldexpf(1.0f, -14));
}

static void test_st_open_errors(void **state)
{
    (void)state;
    char path[512];
    struct gpt_st_file f;
    struct gpt_err err;
    snprintf(path, sizeof(path), "%s/missing.safetensors", tmpdir);
    assert_int_equal(gpt_st_open(path, &f, &err), -ENOENT);
    assert_int_equal(gpt_st_open(tmpdir, &f, &err), -GPT_E_CORRUPT);
    assert_non_null(strstr(err.msg, "not a regular file"));
    /* a huge claimed header length is refused before anything is allocated */
    unsigned char huge[16] = {0, 0, 0, 0, 0, 0, 0, 0x7f, '{', '}'};
    snprintf(path, sizeof(path), "%s/huge.safetensors", tmpdir);
    write_bytes(path, huge, sizeof(huge));
    assert_int_equal(gpt_st_open(path, &f, &err), -GPT_E_CORRUPT);
    assert_non_null(strstr(err.msg, "header length"));
}

static struct gpt_model_config tiny_cfg(void)
{
    struct gpt_model_config c;
    memset(&c, 0, sizeof(c));
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 16;
    c.block_size = 8;
    c.vocab_size = 37; /* gptd pads to Vp = 48 */
    return c;
}

/* Random parameters in the layout of c, wte's padding rows zero. */
static float *random_params(const struct gpt_model *m)
{
    float *p = malloc(m->n_params * sizeof(float));
    uint64_t s = 12345;
    for (size_t i = 0; i < m->n_params; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((int64_t)(s >> 11) - (1ll << 52)) / (float)(1ll << 52);
    }
    size_t C = (size_t)m->cfg.n_embd;
    memset(p + (size_t)m->cfg.vocab_size * C, 0, (m->Vp - (size_t)m->cfg.vocab_size) * C * 4);
    return p;
}

static void test_hf_round_trip(void **state)
{
    (void)state;
    struct gpt_model_config c = tiny_cfg();
    struct gpt_model m;
    struct gpt_err err;
    assert_int_equal(gpt_model_layout(&m, &c, &err), 0);
    assert_int_equal(m.Vp, 48);
    float *p = random_params(&m);
    char out[512], out2[512];
    snprintf(out, sizeof(out), "%s/hf", tmpdir);
    struct gpt_fmt_src src = {.cfg = c, .params = p, .n_params = m.n_params};
    assert_int_equal(gpt_fmt_export(GPT_FMT_HF, out, &src, &err), 0);

    /* an existing target is refused, and so is a symlink at the final name */
    assert_int_equal(gpt_fmt_export(GPT_FMT_HF, out, &src, &err), -EEXIST);
    snprintf(out2, sizeof(out2), "%s/link", tmpdir);
    assert_int_equal(symlink("/tmp/nowhere-gptd-test", out2), 0);
    assert_int_equal(gpt_fmt_export(GPT_FMT_HF, out2, &src, &err), -ELOOP);
    assert_non_null(strstr(err.msg, "symbolic link"));

    /* config.json and the kind are what a reader expects */
    enum gpt_fmt_kind kind;
    struct gpt_model_config back;
    assert_int_equal(gpt_fmt_probe(out, &kind, &back, &err), 0);
    assert_int_equal(kind, GPT_FMT_HF);
    assert_true(back.n_layer == 2 && back.n_head == 2 && back.n_embd == 16 &&
                back.block_size == 8 && back.vocab_size == 37);

    /* file layout: Conv1D weights transposed, wte unpadded, lm_head absent */
    char st[600];
    snprintf(st, sizeof(st), "%s/model.safetensors", out);
    struct gpt_st_file f;
    assert_int_equal(gpt_st_open(st, &f, &err), 0);
    assert_int_equal(f.ix.n, 2 + 2 * 12 + 2);
    assert_null(gpt_st_find(&f.ix, "lm_head.weight"));
    const struct gpt_st_tensor *wte = gpt_st_find(&f.ix, "transformer.wte.weight");
    assert_non_null(wte);
    assert_true(wte->ndim == 2 && wte->shape[0] == 37 && wte->shape[1] == 16);
    const struct gpt_st_tensor *qkv = gpt_st_find(&f.ix, "transformer.h.1.attn.c_attn.weight");
    assert_non_null(qkv);
    assert_true(qkv->shape[0] == 16 && qkv->shape[1] == 48);
    const struct gpt_st_tensor *fcp = gpt_st_find(&f.ix, "transformer.h.0.mlp.c_proj.weight");
    assert_true(fcp && fcp->shape[0] == 64 && fcp->shape[1] == 16);
    float *q = malloc(qkv->count * sizeof(float));
    assert_int_equal(gpt_st_read_f32(&f, qkv, q, &err), 0);
    size_t qoff = 0;
    for (size_t i = 0; i < m.n_tensors; i++)
        if (strcmp(m.tensors[i].name, "h.1.attn.qkvw") == 0)
            qoff = m.tensors[i].offset;
    for (size_t r = 0; r < 48; r++) /* gptd (3C, C) row r, col k == file [k][r] */
        for (size_t k = 0; k < 16; k++)
            assert_memory_equal(&q[k * 48 + r], &p[qoff + r * 16 + k], 4);
    free(q);
    gpt_st_close(&f);

    /* import: bit for bit, padding rows zero */
    struct gpt_fmt_loaded l;
    assert_int_equal(gpt_fmt_load(out, &l, &err), 0);
    assert_int_equal(l.n_params, m.n_params);
    assert_memory_equal(l.params, p, m.n_params * sizeof(float));
    gpt_fmt_loaded_done(&l);

    /* export the import again: the same bytes */
    snprintf(out2, sizeof(out2), "%s/hf2", tmpdir);
    assert_int_equal(gpt_fmt_export(GPT_FMT_HF, out2, &src, &err), 0);
    char cmd[2600];
    snprintf(cmd, sizeof(cmd),
             "cmp -s %s/model.safetensors %s/model.safetensors && cmp -s "
             "%s/config.json %s/config.json",
             out, out2, out, out2);
    assert_int_equal(system(cmd), 0);
    free(p);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    write_bytes(path, text, strlen(text));
}

static void test_hf_bad_config(void **state)
{
    (void)state;
    struct gpt_model_config c = tiny_cfg(), back;
    struct gpt_model m;
    struct gpt_err err;
    enum gpt_fmt_kind kind;
    assert_int_equal(gpt_model_layout(&m, &c, &err), 0);
    float *p = random_params(&m);
    char out[512];
    snprintf(out, sizeof(out), "%s/bad", tmpdir);
    struct gpt_fmt_src src = {.cfg = c, .params = p, .n_params = m.n_params};
    assert_int_equal(gpt_hf_write(out, &src, &err), 0);

    static const struct {
        const char *cfg, *want;
    } cases[] = {
        {"{\"n_layer\":2,\"n_head\":2,\"n_embd\":16,\"n_positions\":8,\"vocab_size\":37,"
         "\"activation_function\":\"relu\"}",
         "activation_function"},
        {"{\"n_layer\":2,\"n_head\":2,\"n_embd\":16,\"n_positions\":8,\"vocab_size\":37,"
         "\"layer_norm_epsilon\":1e-6}",
         "layer_norm_epsilon"},
        {"{\"n_layer\":2,\"n_head\":3,\"n_embd\":16,\"n_positions\":8,\"vocab_size\":37}",
         "not a multiple"},
        {"{\"n_layer\":2,\"n_head\":2,\"n_embd\":16,\"vocab_size\":37}", "n_positions"},
        {"{\"n_layer\":2,\"n_head\":2,\"n_embd\":16,\"n_positions\":8,\"vocab_size\":37,"
         "\"model_type\":\"llama\"}",
         "model_type"},
        {"{\"n_layer\":2,\"n_head\":2,\"n_embd\":16,\"n_positions\":8,\"vocab_size\":37,"
         "\"n_inner\":100}",
         "n_inner"},
        {"[]", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_text(out, "config.json", cases[i].cfg);
        int rc = gpt_fmt_probe(out, &kind, &back, &err);
        if (rc >= 0 || !strstr(err.msg, cases[i].want))
            fail_msg("config %s: rc %d, \"%s\"", cases[i].cfg, rc, err.msg);
    }
    /* a config that disagrees with the weights: the tensor is named */
    struct gpt_fmt_loaded l;
    write_text(out, "config.json",
               "{\"n_layer\":3,\"n_head\":2,\"n_embd\":16,\"n_positions\":8,\"vocab_size\":37}");
    assert_true(gpt_fmt_load(out, &l, &err) < 0);
    assert_non_null(strstr(err.msg, "h.2.ln_1.weight"));
    write_text(out, "config.json",
               "{\"n_layer\":2,\"n_head\":2,\"n_embd\":16,\"n_positions\":8,\"vocab_size\":40}");
    assert_true(gpt_fmt_load(out, &l, &err) < 0);
    assert_non_null(strstr(err.msg, "wte.weight has shape [37, 16]"));
    free(p);
}

/* A file with "wte.weight" etc. without the transformer. prefix (the Hub's
 * original gpt2 upload), with extra buffers, reads the same. */
static void test_hf_unprefixed(void **state)
{
    (void)state;
    struct gpt_model_config c = tiny_cfg();
    c.n_layer = 1;
    struct gpt_model m;
    struct gpt_err err;
    assert_int_equal(gpt_model_layout(&m, &c, &err), 0);
    float *p = random_params(&m);
    char dir[512], path[600];
    snprintf(dir, sizeof(dir), "%s/plain", tmpdir);
    assert_int_equal(mkdir(dir, 0755), 0);
    write_text(dir, "config.json",
               "{\"n_layer\":1,\"n_head\":2,\"n_embd\":16,\"n_positions\":8,\"vocab_size\":37,"
               "\"activation_function\":\"gelu_new\",\"model_type\":\"gpt2\"}");
    static const char *const names[] = {"wte.weight",
                                        "wpe.weight",
                                        "h.0.ln_1.weight",
                                        "h.0.ln_1.bias",
                                        "h.0.attn.c_attn.weight",
                                        "h.0.attn.c_attn.bias",
                                        "h.0.attn.c_proj.weight",
                                        "h.0.attn.c_proj.bias",
                                        "h.0.ln_2.weight",
                                        "h.0.ln_2.bias",
                                        "h.0.mlp.c_fc.weight",
                                        "h.0.mlp.c_fc.bias",
                                        "h.0.mlp.c_proj.weight",
                                        "h.0.mlp.c_proj.bias",
                                        "ln_f.weight",
                                        "ln_f.bias"};
    static const int transpose[] = {0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};
    struct gpt_st_out outs[17];
    for (size_t i = 0; i < m.n_tensors; i++) {
        const struct gpt_tensor_info *t = &m.tensors[i];
        uint64_t cols = t->ndim == 2 ? 16 : 1;
        if (i == 12)
            cols = 64;
        outs[i] = (struct gpt_st_out){.name = names[i],
                                      .data = p + t->offset,
                                      .rows = i == 0 ? 37 : t->count / cols,
                                      .cols = cols,
                                      .ndim = t->ndim,
                                      .transpose = transpose[i]};
    }
    float mask[64] = {0}; /* the causal-mask buffer old files carry */
    outs[16] =
        (struct gpt_st_out){.name = "h.0.attn.bias", .data = mask, .rows = 8, .cols = 8, .ndim = 2};
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_int_equal(gpt_st_write_fd(fd, outs, 17, NULL, NULL, &err), 0);
    close(fd);
    struct gpt_fmt_loaded l;
    assert_int_equal(gpt_fmt_load(dir, &l, &err), 0);
    assert_memory_equal(l.params, p, m.n_params * sizeof(float));
    gpt_fmt_loaded_done(&l);
    free(p);
}

/* A GPT-2-tokenized model ships its tokenizer files (encoder.json +
 * vocab.bpe copied as vocab.json + merges.txt); a truncated weights file
 * is refused naming the file. */
static void test_hf_vocab_and_truncated(void **state)
{
    (void)state;
    struct gpt_model_config c = tiny_cfg();
    struct gpt_model m;
    struct gpt_err err;
    assert_int_equal(gpt_model_layout(&m, &c, &err), 0);
    float *p = random_params(&m);
    char voc[512], out[512], cmd[4000];
    snprintf(voc, sizeof(voc), "%s/vocab", tmpdir);
    assert_int_equal(mkdir(voc, 0755), 0);
    write_text(voc, "encoder.json", "{\"!\": 0, \"<|endoftext|>\": 50256}");
    write_text(voc, "vocab.bpe", "#version: 0.2\n\u0120 t\n");
    snprintf(out, sizeof(out), "%s/withvocab", tmpdir);
    struct gpt_fmt_src src = {.cfg = c, .params = p, .n_params = m.n_params, .vocab_dir = voc};
    assert_int_equal(gpt_fmt_export(GPT_FMT_HF, out, &src, &err), 0);
    snprintf(cmd, sizeof(cmd),
             "cmp -s %s/encoder.json %s/vocab.json && cmp -s %s/vocab.bpe %s/merges.txt && "
             "grep -q GPT2Tokenizer %s/tokenizer_config.json && "
             "grep -q '\"eos_token_id\": 50256' %s/config.json",
             voc, out, voc, out, out, out);
    assert_int_equal(system(cmd), 0);
    /* a vocabulary folder without the files fails the export, leaving nothing */
    snprintf(out, sizeof(out), "%s/novocab", tmpdir);
    src.vocab_dir = tmpdir;
    assert_true(gpt_fmt_export(GPT_FMT_HF, out, &src, &err) < 0);
    assert_non_null(strstr(err.msg, "encoder.json"));
    assert_int_equal(access(out, F_OK), -1);
    snprintf(cmd, sizeof(cmd), "ls %s | grep -q novocab.tmp", tmpdir);
    assert_int_not_equal(system(cmd), 0);

    snprintf(out, sizeof(out), "%s/withvocab/model.safetensors", tmpdir);
    assert_int_equal(truncate(out, 1000), 0);
    struct gpt_fmt_loaded l;
    snprintf(out, sizeof(out), "%s/withvocab", tmpdir);
    assert_int_equal(gpt_fmt_load(out, &l, &err), -GPT_E_CORRUPT);
    assert_non_null(strstr(err.msg, "model.safetensors"));
    free(p);
}

static void test_detect(void **state)
{
    (void)state;
    char path[512];
    struct gpt_err err;
    enum gpt_fmt_kind kind;
    snprintf(path, sizeof(path), "%s/junk.bin", tmpdir);
    write_bytes(path, "hello world", 11);
    assert_int_equal(gpt_fmt_detect(path, &kind, &err), -GPT_E_CORRUPT);
    assert_non_null(strstr(err.msg, "not a model gptd reads"));
    unsigned char llmc[16] = {0xc6, 0xd7, 0x34, 0x01, 3};
    write_bytes(path, llmc, sizeof(llmc));
    assert_int_equal(gpt_fmt_detect(path, &kind, &err), 0);
    assert_int_equal(kind, GPT_FMT_LLMC);
    write_bytes(path, "GGUF\3\0\0\0", 8);
    assert_int_equal(gpt_fmt_detect(path, &kind, &err), 0);
    assert_int_equal(kind, GPT_FMT_GGUF);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_st_hostile),
        cmocka_unit_test(test_st_half),
        cmocka_unit_test(test_st_open_errors),
        cmocka_unit_test(test_hf_round_trip),
        cmocka_unit_test(test_hf_bad_config),
        cmocka_unit_test(test_hf_unprefixed),
        cmocka_unit_test(test_hf_vocab_and_truncated),
        cmocka_unit_test(test_detect),
    };
    return cmocka_run_group_tests(tests, setup, tmp_dir_teardown);
}
