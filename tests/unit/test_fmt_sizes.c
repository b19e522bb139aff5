/*
 * test_fmt_sizes: the format probes (engine/fmt) refuse a header that
 * claims more tensor data than its file holds, naming the file and both
 * sizes, before a loader allocates the claimed model (gpt_fmt_load
 * allocates what the probe returns):
 *  - llm.c: a GPT-2 124M header over 4 KiB of data;
 *  - GGUF: GPT-2 124M metadata over 64 bytes of data; an honest file cut
 *    short by 4 bytes (its last tensor runs past the end);
 *  - Hugging Face: a config.json of GPT-2 124M beside a tiny model's
 *    weights; a config whose vocabulary the weights do not have.
 * Each honest file written by gptd's own writers still probes.
 */
#define _GNU_SOURCE /* nftw */
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

#include "export.h"
#include "gguf.h"
#include "hf.h"
#include "llmc.h"
#include "model.h"
#include "unit/tmp_dir.h"

static int setup(void **state)
{
    (void)state;
    return tmp_dir_make("fmt-sizes");
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* A small model and its (zero) parameters, for the honest files. */
static float *tiny(struct gpt_model_config *c, struct gpt_model *m)
{
    memset(c, 0, sizeof(*c));
    *c = (struct gpt_model_config){
        .n_layer = 2, .n_head = 2, .n_embd = 16, .block_size = 8, .vocab_size = 37};
    struct gpt_err err;
    assert_int_equal(gpt_model_layout(m, c, &err), 0);
    float *p = calloc(m->n_params, sizeof(float));
    assert_non_null(p);
    return p;
}

/* Probe and load of `path` both refused, the message holding each want. */
static void expect_refused(const char *path, const char *const *want, size_t n_want)
{
    struct gpt_err err;
    enum gpt_fmt_kind kind;
    struct gpt_model_config cfg;
    gpt_err_clear(&err);
    int rc = gpt_fmt_probe(path, &kind, &cfg, &err);
    print_message("%s\n", err.msg);
    assert_int_equal(rc, -GPT_E_CORRUPT);
    for (size_t i = 0; i < n_want; i++)
        if (!strstr(err.msg, want[i]))
            fail_msg("\"%s\" lacks \"%s\"", err.msg, want[i]);
    struct gpt_fmt_loaded l;
    assert_int_equal(gpt_fmt_load(path, &l, &err), -GPT_E_CORRUPT);
}

static void test_llmc(void **state)
{
    (void)state;
    char path[512], size_text[64];
    /* GPT-2 124M: maxT 1024, V 50257, L 12, NH 12, C 768, Vp 50304. */
    int32_t h[GPT_LLMC_HEADER_INTS] = {
        GPT_LLMC_MAGIC, GPT_LLMC_VERSION_FP32, 1024, 50257, 12, 12, 768, 50304};
    size_t n = GPT_LLMC_HEADER_BYTES + 4096;
    unsigned char *b = calloc(1, n);
    assert_non_null(b);
    memcpy(b, h, sizeof(h));
    tmp_dir_path(path, sizeof(path), "gpt2_header.bin");
    write_bytes(path, b, n);
    free(b);
    uint64_t C = 768, claimed = 4 * (50304 * C + 1024 * C + 12 * (12 * C * C + 13 * C) + 2 * C) +
                                GPT_LLMC_HEADER_BYTES;
    snprintf(size_text, sizeof(size_text), "%llu bytes", (unsigned long long)claimed);
    const char *want[] = {path, "5120 bytes", size_text};
    expect_refused(path, want, 3);

    struct gpt_model_config c, back;
    struct gpt_model m;
    struct gpt_err err;
    float *p = tiny(&c, &m);
    tmp_dir_path(path, sizeof(path), "tiny.bin");
    assert_int_equal(gpt_llmc_write_opts(path, &c, p, NULL, NULL, &err), 0);
    assert_int_equal(gpt_llmc_probe(path, &back, &err), 0);
    assert_int_equal(back.n_embd, 16);
    free(p);
}

/* A growing GGUF file in memory. */
struct buf {
    unsigned char b[1024];
    size_t n;
};

static void put(struct buf *b, const void *p, size_t n)
{
    assert_true(b->n + n <= sizeof(b->b));
    memcpy(b->b + b->n, p, n);
    b->n += n;
}

static void put_u32(struct buf *b, uint32_t x)
{
    put(b, &x, 4);
}

static void put_u64(struct buf *b, uint64_t x)
{
    put(b, &x, 8);
}

static void put_str(struct buf *b, const char *s)
{
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

static void put_kv_u32(struct buf *b, const char *key, uint32_t v)
{
    put_str(b, key);
    put_u32(b, 4); /* GGUF's u32 */
    put_u32(b, v);
}

static void test_gguf(void **state)
{
    (void)state;
    char path[512];
    struct buf g = {.n = 0};
    put(&g, "GGUF", 4);
    put_u32(&g, GPT_GGUF_VERSION);
    put_u64(&g, 1); /* tensors */
    put_u64(&g, 6); /* metadata keys */
    put_str(&g, "general.architecture");
    put_u32(&g, 8); /* string */
    put_str(&g, "gpt2");
    put_kv_u32(&g, "gpt2.context_length", 1024);
    put_kv_u32(&g, "gpt2.embedding_length", 768);
    put_kv_u32(&g, "gpt2.feed_forward_length", 4 * 768);
    put_kv_u32(&g, "gpt2.block_count", 12);
    put_kv_u32(&g, "gpt2.attention.head_count", 12);
    put_str(&g, "token_embd.weight");
    put_u32(&g, 2);
    put_u64(&g, 768);
    put_u64(&g, 50257);
    put_u32(&g, GPT_GGUF_F32);
    put_u64(&g, 0);
    while (g.n % GPT_GGUF_ALIGNMENT)
        put(&g, "", 1);
    for (int i = 0; i < 64; i++)
        put(&g, "", 1);
    tmp_dir_path(path, sizeof(path), "gpt2_header.gguf");
    write_bytes(path, g.b, g.n);
    const char *want[] = {path, "its header's model", "124439808 parameters",
                          "holds 64 bytes of tensor data"};
    expect_refused(path, want, 4);

    /* An honest file probes; cut by 4 bytes, its last tensor is named. */
    struct gpt_model_config c, back;
    struct gpt_model m;
    struct gpt_err err;
    float *p = tiny(&c, &m);
    tmp_dir_path(path, sizeof(path), "tiny.gguf");
    assert_int_equal(gpt_gguf_write_opts(path, &c, p, NULL, NULL, &err), 0);
    assert_int_equal(gpt_gguf_probe(path, &back, &err), 0);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    fclose(f);
    assert_int_equal(truncate(path, len - 4), 0);
    const char *cut[] = {path, "past the end of the file", "bytes of tensor data after"};
    expect_refused(path, cut, 3);
    free(p);
}

static void write_config(const char *dir, const char *text)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    write_bytes(path, text, strlen(text));
}

static void test_hf(void **state)
{
    (void)state;
    char dir[512], weights[600];
    struct gpt_model_config c, back;
    struct gpt_model m;
    struct gpt_err err;
    enum gpt_fmt_kind kind;
    float *p = tiny(&c, &m);
    tmp_dir_path(dir, sizeof(dir), "tiny_hf");
    struct gpt_fmt_src src = {.cfg = c, .params = p, .n_params = m.n_params};
    assert_int_equal(gpt_hf_write(dir, &src, &err), 0);
    assert_int_equal(gpt_fmt_probe(dir, &kind, &back, &err), 0);
    assert_int_equal(kind, GPT_FMT_HF);

    snprintf(weights, sizeof(weights), "%s/model.safetensors", dir);
    write_config(dir, "{\"n_layer\":12,\"n_head\":12,\"n_embd\":768,\"n_positions\":1024,"
                      "\"vocab_size\":50257}");
    const char *want[] = {weights, "config.json's model", "124439808 parameters"};
    expect_refused(dir, want, 3);

    /* Sizes that fit, a shape that does not: the tensor is named. */
    write_config(dir, "{\"n_layer\":2,\"n_head\":2,\"n_embd\":16,\"n_positions\":8,"
                      "\"vocab_size\":36}");
    const char *shape[] = {weights, "wte.weight has shape [37, 16], config.json says [36, 16]"};
    expect_refused(dir, shape, 2);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llmc),
        cmocka_unit_test(test_gguf),
        cmocka_unit_test(test_hf),
    };
    return cmocka_run_group_tests(tests, setup, tmp_dir_teardown);
}
