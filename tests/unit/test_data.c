/*
 * test_data: datasets, tokenizer, train/val split, llm.c shards, the
 * sampler (world-size independence, epoch permutations, cursor) and the
 * synthetic addition task. Input files are generated into a mkdtemp dir.
 */
#define _GNU_SOURCE /* nftw */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
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

#include "data.h"
#include "unit/tmp_dir.h"

static int setup(void **state)
{
    (void)state;
    return tmp_dir_make("data");
}

static void write_file(const char *name, const void *p, size_t n)
{
    char path[512];
    tmp_dir_path(path, sizeof(path), name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* An llm.c shard whose token i is first + i (count_hdr may lie). */
static void write_shard(const char *name, int magic, int version, int count_hdr, int count,
                        int first)
{
    size_t bytes = 1024 + 2 * (size_t)count;
    unsigned char *buf = calloc(1, bytes);
    assert_non_null(buf);
    int32_t h[3] = {magic, version, count_hdr};
    memcpy(buf, h, sizeof(h)); /* the test host is little-endian like the format */
    for (int i = 0; i < count; i++) {
        uint16_t t = (uint16_t)(first + i);
        memcpy(buf + 1024 + 2 * i, &t, 2);
    }
    write_file(name, buf, bytes);
    free(buf);
}

static void text_spec(struct gpt_data_spec *s, const char *name, int tok, double split)
{
    memset(s, 0, sizeof(*s));
    s->kind = GPT_DATA_TEXT;
    tmp_dir_path(s->path, sizeof(s->path), name);
    s->tokenizer = tok;
    s->train_split = split;
}

/* 200 distinct bytes 0..199: a byte-tokenized file whose windows are named
 * by their first token. */
static struct gpt_dataset *open_bytes(size_t T, uint64_t seed)
{
    unsigned char b[200];
    for (int i = 0; i < 200; i++)
        b[i] = (unsigned char)i;
    char path[512];
    tmp_dir_path(path, sizeof(path), "bytes.txt");
    if (access(path, F_OK) != 0) /* never rewrite a file a live dataset maps */
        write_file("bytes.txt", b, sizeof(b));
    struct gpt_data_spec s;
    struct gpt_err err = {0};
    struct gpt_dataset *ds = NULL;
    text_spec(&s, "bytes.txt", GPT_TOK_BYTE, 0.5);
    assert_int_equal(gpt_dataset_open(&s, T, seed, &ds, &err), 0);
    return ds;
}

static void test_char_vocab(void **state)
{
    (void)state;
    const char *text = "hello world, hello gptd\n";
    char big[4096] = "";
    for (int i = 0; i < 40; i++)
        strcat(big, text);
    write_file("chars.txt", big, strlen(big));
    struct gpt_data_spec s;
    struct gpt_err err = {0};
    struct gpt_dataset *ds = NULL;
    text_spec(&s, "chars.txt", GPT_TOK_CHAR, 0.9);
    assert_int_equal(gpt_dataset_open(&s, 8, 1, &ds, &err), 0);

    const struct gpt_vocab *v = gpt_dataset_vocab(ds);
    assert_int_equal(v->kind, GPT_TOK_CHAR);
    assert_int_equal(v->size, 13); /* "\n ,deghloprtw" */
    assert_int_equal(gpt_dataset_vocab_size(ds), v->size);
    for (int i = 1; i < v->size; i++)
        assert_true(v->chars[i - 1] < v->chars[i]); /* sorted, distinct */
    assert_int_equal(v->chars[0], '\n');
    assert_int_equal(gpt_dataset_seq_len(ds), 8);

    int toks[64];
    size_t n;
    char out[64];
    assert_int_equal(gpt_vocab_encode(v, "hello gptd", toks, 64, &n, &err), 0);
    assert_int_equal(n, 10);
    for (size_t i = 0; i < n; i++)
        assert_true(toks[i] >= 0 && toks[i] < v->size);
    assert_int_equal(gpt_vocab_decode(v, toks, n, out, sizeof(out)), 10);
    assert_string_equal(out, "hello gptd");
    /* Decode truncates to cap - 1 bytes. */
    assert_int_equal(gpt_vocab_decode(v, toks, n, out, 4), 3);
    assert_string_equal(out, "hel");

    assert_int_equal(gpt_vocab_encode(v, "hellz", toks, 64, &n, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "'z'"));
    assert_int_equal(gpt_vocab_encode(v, "hello", toks, 3, &n, &err), -EMSGSIZE);

    /* The batch tokens are the file's text. */
    struct gpt_data_cursor cur;
    gpt_data_cursor_init(ds, &cur);
    int in[8], tg[8];
    assert_int_equal(gpt_dataset_train_batch(ds, &cur, 0, 1, in, tg, NULL), 0);
    char a[16], b[16];
    gpt_vocab_decode(v, in, 8, a, sizeof(a));
    gpt_vocab_decode(v, tg, 8, b, sizeof(b));
    assert_non_null(strstr(big, a));
    assert_memory_equal(a + 1, b, 7);
    gpt_dataset_free(ds);
}

static void test_byte_tokenizer(void **state)
{
    (void)state;
    struct gpt_dataset *ds = open_bytes(4, 1);
    const struct gpt_vocab *v = gpt_dataset_vocab(ds);
    assert_int_equal(v->kind, GPT_TOK_BYTE);
    assert_int_equal(v->size, 256);
    int toks[8];
    size_t n;
    struct gpt_err err = {0};
    assert_int_equal(gpt_vocab_encode(v, "A\xff~", toks, 8, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(toks[0], 'A');
    assert_int_equal(toks[1], 255);
    char out[8];
    assert_int_equal(gpt_vocab_decode(v, toks, n, out, sizeof(out)), 3);
    assert_string_equal(out, "A\xff~");

    /* Token ids decode as <id> and do not encode. */
    struct gpt_vocab ids = {.kind = -1, .size = 50257};
    int t2[3] = {15496, 11, 0};
    char s[32];
    assert_int_equal(gpt_vocab_decode(&ids, t2, 3, s, sizeof(s)), strlen("<15496><11><0>"));
    assert_string_equal(s, "<15496><11><0>");
    assert_int_equal(gpt_vocab_decode(&ids, t2, 3, s, 10), strlen("<15496>"));
    assert_int_equal(gpt_vocab_encode(&ids, "x", toks, 8, &n, &err), -ENOTSUP);
    gpt_dataset_free(ds);
}

static void test_split(void **state)
{
    (void)state;
    const size_t T = 3;
    struct gpt_dataset *ds = open_bytes(T, 7), *ds2 = open_bytes(T, 7);
    assert_int_equal(gpt_dataset_train_samples(ds), 100 - T); /* every offset */
    assert_int_equal(gpt_dataset_val_samples(ds), (100 - 1) / T);
    struct gpt_data_cursor cur;
    gpt_data_cursor_init(ds, &cur);
    int in[3 * 100], tg[3 * 100], in2[3 * 100], tg2[3 * 100];
    assert_int_equal(gpt_dataset_train_batch(ds, &cur, 0, 97, in, tg, NULL), 0);
    assert_int_equal(gpt_dataset_train_batch(ds2, &cur, 0, 97, in2, tg2, NULL), 0);
    assert_memory_equal(in, in2, sizeof(int) * 3 * 97); /* deterministic */
    assert_memory_equal(tg, tg2, sizeof(int) * 3 * 97);
    for (size_t i = 0; i < 97 * T; i++) {
        assert_true(in[i] < 100 && tg[i] < 100); /* train tokens are [0, 100) */
        assert_int_equal(tg[i], in[i] + 1);
    }
    assert_int_equal(gpt_dataset_val_batch(ds, 0, 33, in, tg, NULL), 0);
    for (size_t i = 0; i < 33 * T; i++) {
        assert_true(in[i] >= 100 && tg[i] < 200); /* val tokens are [100, 200) */
        assert_int_equal(tg[i], in[i] + 1);
    }
    assert_int_equal(in[0], 100);
    assert_int_equal(in[3], 103); /* val windows every T */
    /* Val batches wrap around the split. */
    assert_int_equal(gpt_dataset_val_batch(ds, 33, 1, in2, tg2, NULL), 0);
    assert_int_equal(in2[0], 100);
    /* Synthetic-only API. */
    int p[8], a[8];
    size_t np, na;
    assert_int_equal(gpt_dataset_val_problem(ds, 0, p, &np, a, &na), -ENOTSUP);
    assert_false(gpt_dataset_is_synthetic(ds));
    gpt_dataset_free(ds);
    gpt_dataset_free(ds2);
}

static void test_split_too_small(void **state)
{
    (void)state;
    write_file("small.txt", "abcdefghijklmnopqrst", 20);
    struct gpt_data_spec s;
    struct gpt_err err = {0};
    struct gpt_dataset *ds = NULL;
    text_spec(&s, "small.txt", GPT_TOK_CHAR, 0.9); /* val: 2 tokens */
    assert_int_equal(gpt_dataset_open(&s, 4, 1, &ds, &err), -GPT_E_DATA);
    assert_null(ds);
    assert_non_null(strstr(err.msg, "small.txt"));
    assert_non_null(strstr(err.msg, "val split"));

    text_spec(&s, "small.txt", GPT_TOK_CHAR, 1.0);
    assert_int_equal(gpt_dataset_open(&s, 4, 1, &ds, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "data.train_split");

    text_spec(&s, "missing.txt", GPT_TOK_CHAR, 0.9);
    assert_int_equal(gpt_dataset_open(&s, 4, 1, &ds, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "missing.txt"));
    assert_string_equal(err.path, "data.path");

    write_file("empty.txt", "", 0);
    text_spec(&s, "empty.txt", GPT_TOK_CHAR, 0.9);
    assert_int_equal(gpt_dataset_open(&s, 4, 1, &ds, &err), -GPT_E_DATA);
    assert_non_null(strstr(err.msg, "empty"));
}

static void test_text_val_path(void **state)
{
    (void)state;
    write_file("train.txt", "abababababababab", 16);
    write_file("valid.txt", "ZabZabZab", 9);
    struct gpt_data_spec s;
    struct gpt_err err = {0};
    struct gpt_dataset *ds = NULL;
    text_spec(&s, "train.txt", GPT_TOK_CHAR, 1.0); /* split unused with a val file */
    tmp_dir_path(s.val_path, sizeof(s.val_path), "valid.txt");
    assert_int_equal(gpt_dataset_open(&s, 4, 1, &ds, &err), 0);
    const struct gpt_vocab *v = gpt_dataset_vocab(ds);
    assert_int_equal(v->size, 3); /* 'Z' < 'a' < 'b': both files' characters */
    assert_memory_equal(v->chars, "Zab", 3);
    assert_int_equal(gpt_dataset_train_samples(ds), 16 - 4);
    assert_int_equal(gpt_dataset_val_samples(ds), (9 - 1) / 4);
    int in[8], tg[8];
    char a[16];
    assert_int_equal(gpt_dataset_val_batch(ds, 0, 2, in, tg, NULL), 0);
    gpt_vocab_decode(v, in, 8, a, sizeof(a));
    assert_string_equal(a, "ZabZabZa");
    struct gpt_data_cursor cur;
    gpt_data_cursor_init(ds, &cur);
    assert_int_equal(gpt_dataset_train_batch(ds, &cur, 0, 2, in, tg, NULL), 0);
    for (int i = 0; i < 8; i++)
        assert_true(in[i] == 1 || in[i] == 2);
    gpt_dataset_free(ds);

    tmp_dir_path(s.val_path, sizeof(s.val_path), "small.txt"); /* 20 bytes, T = 32 */
    assert_int_equal(gpt_dataset_open(&s, 32, 1, &ds, &err), -GPT_E_DATA);
    assert_string_equal(err.path, "data.path"); /* the train file is checked first */
    assert_non_null(strstr(err.msg, "train.txt"));
}

static void shard_spec(struct gpt_data_spec *s, const char *glob, const char *val)
{
    memset(s, 0, sizeof(*s));
    s->kind = GPT_DATA_SHARDS;
    tmp_dir_path(s->path, sizeof(s->path), glob);
    if (val)
        tmp_dir_path(s->val_path, sizeof(s->val_path), val);
    s->train_split = 0.9;
}

/* Collects the first token of every sample of epoch 0. */
static void epoch_starts(struct gpt_dataset *ds, int *starts)
{
    size_t T = gpt_dataset_seq_len(ds), N = gpt_dataset_train_samples(ds);
    struct gpt_data_cursor cur;
    gpt_data_cursor_init(ds, &cur);
    int *in = malloc(sizeof(int) * T), *tg = malloc(sizeof(int) * T);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(gpt_dataset_train_batch(ds, &cur, i, 1, in, tg, NULL), 0);
        for (size_t t = 0; t + 1 < T; t++)
            assert_int_equal(in[t + 1], in[t] + 1);
        assert_int_equal(tg[T - 1], in[T - 1] + 1);
        starts[i] = in[0];
    }
    free(in);
    free(tg);
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

static void test_shards(void **state)
{
    (void)state;
    write_shard("shard_000.bin", 20240520, 1, 100, 100, 1000);
    write_shard("shard_001.bin", 20240520, 1, 50, 50, 2000);
    write_shard("val.bin", 20240520, 1, 40, 40, 3000);
    struct gpt_data_spec s;
    struct gpt_err err = {0};
    struct gpt_dataset *ds = NULL;
    int starts[64];

    shard_spec(&s, "shard_*.bin", "val.bin");
    assert_int_equal(gpt_dataset_open(&s, 8, 3, &ds, &err), 0);
    assert_int_equal(gpt_dataset_vocab(ds)->kind, -1);
    assert_int_equal(gpt_dataset_vocab_size(ds), 50257);
    assert_int_equal(gpt_dataset_train_samples(ds), 99 / 8 + 49 / 8);
    assert_int_equal(gpt_dataset_val_samples(ds), 39 / 8);
    epoch_starts(ds, starts);
    qsort(starts, 18, sizeof(int), cmp_int);
    for (int k = 0; k < 12; k++)
        assert_int_equal(starts[k], 1000 + 8 * k);
    for (int k = 0; k < 6; k++)
        assert_int_equal(starts[12 + k], 2000 + 8 * k);
    int in[4 * 8], tg[4 * 8];
    assert_int_equal(gpt_dataset_val_batch(ds, 0, 4, in, tg, NULL), 0);
    for (int b = 0; b < 4; b++)
        assert_int_equal(in[8 * b], 3000 + 8 * b);
    gpt_dataset_free(ds);

    /* No val_path: the last shard in sorted order is the val split. */
    shard_spec(&s, "shard_*.bin", NULL);
    assert_int_equal(gpt_dataset_open(&s, 8, 3, &ds, &err), 0);
    assert_int_equal(gpt_dataset_train_samples(ds), 12);
    assert_int_equal(gpt_dataset_val_batch(ds, 0, 1, in, tg, NULL), 0);
    assert_int_equal(in[0], 2000);
    gpt_dataset_free(ds);

    /* A file named by both globs counts as validation only. */
    shard_spec(&s, "*.bin", "val.bin");
    assert_int_equal(gpt_dataset_open(&s, 8, 3, &ds, &err), 0);
    assert_int_equal(gpt_dataset_train_samples(ds), 18);
    gpt_dataset_free(ds);

    /* One shard alone is split by train_split. */
    shard_spec(&s, "shard_000.bin", NULL);
    assert_int_equal(gpt_dataset_open(&s, 8, 3, &ds, &err), 0);
    assert_int_equal(gpt_dataset_train_samples(ds), (90 - 1) / 8);
    assert_int_equal(gpt_dataset_val_batch(ds, 0, 1, in, tg, NULL), 0);
    assert_int_equal(in[0], 1090);
    gpt_dataset_free(ds);

    /* Tokens past GPT-2's vocabulary are caught when read. */
    write_shard("big.bin", 20240520, 1, 40, 40, 60000);
    shard_spec(&s, "big.bin", "val.bin");
    assert_int_equal(gpt_dataset_open(&s, 8, 3, &ds, &err), 0);
    struct gpt_data_cursor cur;
    gpt_data_cursor_init(ds, &cur);
    assert_int_equal(gpt_dataset_train_batch(ds, &cur, 0, 1, in, tg, NULL), -GPT_E_DATA);
    gpt_dataset_free(ds);
}

static void expect_shard_error(const char *name, int code, const char *what)
{
    struct gpt_data_spec s;
    struct gpt_err err = {0};
    struct gpt_dataset *ds = NULL;
    shard_spec(&s, name, "val.bin");
    assert_int_equal(gpt_dataset_open(&s, 8, 3, &ds, &err), code);
    assert_null(ds);
    assert_non_null(strstr(err.msg, name));
    assert_non_null(strstr(err.msg, what));
    assert_string_equal(err.path, "data.path");
}

static void test_shard_errors(void **state)
{
    (void)state;
    write_shard("val.bin", 20240520, 1, 40, 40, 3000);
    write_shard("badmagic.bin", 12345, 1, 40, 40, 0);
    write_shard("badversion.bin", 20240520, 2, 40, 40, 0);
    write_shard("truncated.bin", 20240520, 1, 100, 60, 0);
    write_shard("oversized.bin", 20240520, 1, 40, 60, 0);
    write_file("tiny.bin", "GPT", 3);
    expect_shard_error("badmagic.bin", -GPT_E_CORRUPT, "magic");
    expect_shard_error("badversion.bin", -GPT_E_VERSION, "version 2");
    expect_shard_error("truncated.bin", -GPT_E_CORRUPT, "truncated");
    expect_shard_error("oversized.bin", -GPT_E_CORRUPT, "oversized");
    expect_shard_error("tiny.bin", -GPT_E_CORRUPT, "truncated");
    expect_shard_error("nothing_*.bin", -ENOENT, "no file matches");
    /* A bad file anywhere in the glob fails the open, naming that file. */
    struct gpt_data_spec s;
    struct gpt_err err = {0};
    struct gpt_dataset *ds = NULL;
    shard_spec(&s, "*.bin", "val.bin");
    assert_int_equal(gpt_dataset_open(&s, 8, 3, &ds, &err), -GPT_E_CORRUPT);
    assert_non_null(strstr(err.msg, "badmagic.bin"));
}

/* A FIFO or a folder as data.path is refused at once (the open never waits
 * for a writer), naming the key and what the file is. */
/* Files truncated, grown or replaced after open (issue 36): a read past a
 * truncated file's new end fails with -GPT_E_DATA naming the file (a
 * mapping would raise SIGBUS); a grown or renamed-over file goes on being
 * read as it was opened. */
static void test_file_changes(void **state)
{
    (void)state;
    write_shard("change.bin", 20240520, 1, 4000, 4000, 0);
    struct gpt_data_spec s;
    struct gpt_err err = {0};
    struct gpt_dataset *ds = NULL;
    int in[8], tg[8];
    char path[512], other[512];
    tmp_dir_path(path, sizeof(path), "change.bin");
    tmp_dir_path(other, sizeof(other), "change.new");

    shard_spec(&s, "change.bin", NULL);
    s.train_split = 0.5;
    assert_int_equal(gpt_dataset_open(&s, 8, 3, &ds, &err), 0);
    assert_int_equal(gpt_dataset_val_batch(ds, 0, 1, in, tg, &err), 0);
    assert_int_equal(in[0], 2000); /* the val half starts at token 2000 */
    /* Grown: the same tokens. */
    FILE *f = fopen(path, "ab");
    assert_non_null(f);
    assert_int_equal(fwrite(tg, 1, sizeof(tg), f), sizeof(tg));
    assert_int_equal(fclose(f), 0);
    assert_int_equal(gpt_dataset_val_batch(ds, 0, 1, in, tg, &err), 0);
    assert_int_equal(in[0], 2000);
    /* Truncated to its header: every window is past the end. */
    assert_int_equal(truncate(path, 1024), 0);
    memset(&err, 0, sizeof(err));
    assert_int_equal(gpt_dataset_val_batch(ds, 0, 1, in, tg, &err), -GPT_E_DATA);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "shrank to 1024 bytes"));
    assert_string_equal(err.path, "data.path");
    struct gpt_data_cursor cur;
    gpt_data_cursor_init(ds, &cur);
    assert_int_equal(gpt_dataset_train_batch(ds, &cur, 0, 1, in, tg, &err), -GPT_E_DATA);
    gpt_dataset_free(ds);

    /* Replaced by rename: the open file is still the old one. */
    write_shard("change.bin", 20240520, 1, 4000, 4000, 0);
    assert_int_equal(gpt_dataset_open(&s, 8, 3, &ds, &err), 0);
    write_shard("change.new", 20240520, 1, 100, 100, 30000);
    assert_int_equal(rename(other, path), 0);
    assert_int_equal(gpt_dataset_val_batch(ds, 0, 1, in, tg, &err), 0);
    assert_int_equal(in[0], 2000);
    gpt_dataset_free(ds);

    /* A text file truncated to nothing. */
    unsigned char b[200];
    for (int i = 0; i < 200; i++)
        b[i] = (unsigned char)i;
    write_file("change.txt", b, sizeof(b));
    text_spec(&s, "change.txt", GPT_TOK_BYTE, 0.5);
    assert_int_equal(gpt_dataset_open(&s, 8, 3, &ds, &err), 0);
    gpt_data_cursor_init(ds, &cur);
    tmp_dir_path(path, sizeof(path), "change.txt");
    assert_int_equal(truncate(path, 0), 0);
    assert_int_equal(gpt_dataset_train_batch(ds, &cur, 0, 1, in, tg, &err), -GPT_E_DATA);
    assert_non_null(strstr(err.msg, path));
    gpt_dataset_free(ds);
}

static void test_not_regular(void **state)
{
    (void)state;
    char path[512];
    tmp_dir_path(path, sizeof(path), "fifo");
    assert_int_equal(mkfifo(path, 0600), 0);
    tmp_dir_path(path, sizeof(path), "folder");
    assert_int_equal(mkdir(path, 0700), 0);
    const char *names[] = {"fifo", "folder"}, *kinds[] = {"is a FIFO", "is a directory"};
    for (int i = 0; i < 2; i++) {
        struct gpt_data_spec s;
        struct gpt_err err = {0};
        struct gpt_dataset *ds = NULL;
        text_spec(&s, names[i], GPT_TOK_CHAR, 0.5);
        assert_int_equal(gpt_dataset_open(&s, 4, 1, &ds, &err), -GPT_E_DATA);
        assert_null(ds);
        assert_string_equal(err.path, "data.path");
        assert_non_null(strstr(err.msg, kinds[i]));
        assert_non_null(strstr(err.msg, "not a regular file"));
    }
}

/* The caller's policy sees every file on its descriptor, and its refusal
 * is the open's error. */
struct seen {
    int calls;
    char refuse[64];
};

static int policy_check(void *ctx, int fd, const char *file, const char *json_path,
                        struct gpt_err *err)
{
    struct seen *seen = ctx;
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    seen->calls++;
    if (strstr(file, seen->refuse))
        return gpt_err_set(err, -EACCES, json_path, "%s: refused by policy", file);
    return 0;
}

static void test_policy(void **state)
{
    (void)state;
    write_shard("pol_000.bin", 20240520, 1, 100, 100, 1000);
    write_shard("pol_001.bin", 20240520, 1, 100, 100, 2000);
    write_shard("pol_val.bin", 20240520, 1, 40, 40, 3000);
    struct seen seen = {0, "nothing"};
    struct gpt_data_policy policy = {.ctx = &seen, .check = policy_check};
    struct gpt_data_spec s;
    struct gpt_err err = {0};
    struct gpt_dataset *ds = NULL;
    shard_spec(&s, "pol_0*.bin", "pol_val.bin");
    assert_int_equal(gpt_dataset_open_checked(&s, 8, 1, &policy, &ds, &err), 0);
    assert_int_equal(seen.calls, 3);
    gpt_dataset_free(ds);
    ds = NULL;
    snprintf(seen.refuse, sizeof(seen.refuse), "pol_001");
    assert_int_equal(gpt_dataset_open_checked(&s, 8, 1, &policy, &ds, &err), -EACCES);
    assert_null(ds);
    assert_string_equal(err.path, "data.path");
    assert_non_null(strstr(err.msg, "refused by policy"));
}

/* A glob that would read more than GPT_GLOB_ENTRIES_MAX directory entries
 * stops there with a limit error naming the pattern. */
static void test_glob_limit(void **state)
{
    (void)state;
    char dir[512], path[600];
    tmp_dir_path(dir, sizeof(dir), "many");
    assert_int_equal(mkdir(dir, 0700), 0);
    for (int i = 0; i < GPT_GLOB_ENTRIES_MAX; i++) {
        snprintf(path, sizeof(path), "%s/%06d", dir, i);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
        assert_true(fd >= 0);
        close(fd);
    }
    struct gpt_data_spec s;
    struct gpt_err err = {0};
    struct gpt_dataset *ds = NULL;
    shard_spec(&s, "many/*.bin", NULL);
    assert_int_equal(gpt_dataset_open(&s, 8, 1, &ds, &err), -GPT_E_LIMIT);
    assert_string_equal(err.path, "data.path");
    assert_non_null(strstr(err.msg, "directory entries"));
    assert_non_null(strstr(err.msg, "many/*.bin"));
}

/* The global stream does not depend on how many ranks read it. */
static void test_sampler_world_sizes(void **state)
{
    (void)state;
    const size_t T = 3;
    struct gpt_dataset *ds = open_bytes(T, 11);
    const uint64_t G = 7; /* uneven for 2 and 3 ranks */
    struct gpt_data_cursor cur;
    gpt_data_cursor_init(ds, &cur);
    int want_in[7 * 3], want_tg[7 * 3], got_in[7 * 3], got_tg[7 * 3];
    for (int step = 0; step < 40; step++) { /* 280 samples: almost 3 epochs of 97 */
        assert_int_equal(gpt_dataset_train_batch(ds, &cur, 0, G, want_in, want_tg, NULL), 0);
        for (int world = 1; world <= 3; world++) {
            size_t filled = 0;
            for (int rank = 0; rank < world; rank++) {
                uint64_t first, count;
                gpt_data_rank_range(G, world, rank, &first, &count);
                assert_int_equal(first, filled);
                assert_int_equal(gpt_dataset_train_batch(ds, &cur, first, count,
                                                         got_in + filled * T, got_tg + filled * T,
                                                         NULL),
                                 0);
                filled += count;
            }
            assert_int_equal(filled, G);
            assert_memory_equal(got_in, want_in, sizeof(want_in));
            assert_memory_equal(got_tg, want_tg, sizeof(want_tg));
        }
        gpt_data_cursor_advance(ds, &cur, G);
    }
    assert_int_equal(cur.epoch, 280 / 97);
    assert_int_equal(cur.position, 280 % 97);
    gpt_dataset_free(ds);
}

static void test_epochs(void **state)
{
    (void)state;
    const size_t T = 3;
    struct gpt_dataset *ds = open_bytes(T, 5);
    const uint64_t N = gpt_dataset_train_samples(ds);
    assert_int_equal(N, 97);
    int order[4][97];
    struct gpt_data_cursor cur;
    gpt_data_cursor_init(ds, &cur);
    assert_int_equal(cur.seed, 5);
    int in[3], tg[3];
    for (int e = 0; e < 4; e++) {
        int seen[97] = {0};
        for (uint64_t i = 0; i < N; i++) {
            /* Global sample e*N + i from a cursor at epoch 0 is sample i of epoch e. */
            assert_int_equal(gpt_dataset_train_batch(ds, &cur, e * N + i, 1, in, tg, NULL), 0);
            assert_true(in[0] >= 0 && in[0] < 97);
            seen[in[0]]++;
            order[e][i] = in[0];
        }
        for (int k = 0; k < 97; k++)
            assert_int_equal(seen[k], 1); /* a permutation */
    }
    assert_memory_not_equal(order[0], order[1], sizeof(order[0]));
    assert_memory_not_equal(order[1], order[2], sizeof(order[0]));

    /* The same samples from a cursor standing at epoch 2, position 10. */
    struct gpt_data_cursor c2 = cur;
    gpt_data_cursor_advance(ds, &c2, 2 * N + 10);
    assert_int_equal(c2.epoch, 2);
    assert_int_equal(c2.position, 10);
    assert_int_equal(gpt_dataset_train_batch(ds, &c2, 0, 1, in, tg, NULL), 0);
    assert_int_equal(in[0], order[2][10]);
    assert_int_equal(gpt_dataset_train_batch(ds, &c2, N, 1, in, tg, NULL), 0);
    assert_int_equal(in[0], order[3][10]);
    gpt_data_cursor_advance(ds, &c2, N - 10);
    assert_int_equal(c2.epoch, 3);
    assert_int_equal(c2.position, 0);
    gpt_data_cursor_advance(ds, &c2, 0);
    assert_int_equal(c2.epoch, 3);

    /* Another seed, another order. */
    struct gpt_data_cursor c3 = {.epoch = 0, .position = 0, .seed = 6};
    int diff = 0;
    for (uint64_t i = 0; i < N; i++) {
        assert_int_equal(gpt_dataset_train_batch(ds, &c3, i, 1, in, tg, NULL), 0);
        diff += in[0] != order[0][i];
    }
    assert_true(diff > 0);
    gpt_dataset_free(ds);

    /* One sample per epoch. */
    struct gpt_data_spec s;
    struct gpt_err err = {0};
    text_spec(&s, "bytes.txt", GPT_TOK_BYTE, 0.02); /* 4 train tokens, T = 3 */
    assert_int_equal(gpt_dataset_open(&s, 3, 1, &ds, &err), 0);
    assert_int_equal(gpt_dataset_train_samples(ds), 1);
    gpt_data_cursor_init(ds, &cur);
    assert_int_equal(gpt_dataset_train_batch(ds, &cur, 5, 1, in, tg, NULL), 0);
    assert_int_equal(in[0], 0);
    gpt_data_cursor_advance(ds, &cur, 5);
    assert_int_equal(cur.epoch, 5);
    assert_int_equal(cur.position, 0);
    gpt_dataset_free(ds);
}

static struct gpt_dataset *open_addition(int digits, size_t T)
{
    struct gpt_data_spec s;
    struct gpt_err err = {0};
    struct gpt_dataset *ds = NULL;
    memset(&s, 0, sizeof(s));
    s.kind = GPT_DATA_SYNTHETIC;
    strcpy(s.task, "addition");
    s.digits = digits;
    assert_int_equal(gpt_dataset_open(&s, T, 42, &ds, &err), 0);
    return ds;
}

/* Problem id a * 10^n + b of a sample; checks the sum and the masking. */
static uint64_t check_addition(const int *in, const int *tg, int n)
{
    uint64_t a = 0, b = 0, c = 0, p10 = 1;
    for (int i = 0; i < n; i++) {
        a = a * 10 + (uint64_t)in[i];
        b = b * 10 + (uint64_t)in[n + i];
        p10 *= 10;
    }
    for (int i = 0; i < 3 * n; i++) {
        assert_true(in[i] >= 0 && in[i] <= 9);
        if (i < 2 * n - 1)
            assert_int_equal(tg[i], -1);
        else if (i + 1 < 3 * n)
            assert_int_equal(tg[i], in[i + 1]);
    }
    /* c's digits, least significant first: in[2n .. 3n-1] then tg[3n-1]. */
    for (int i = n; i >= 0; i--)
        c = c * 10 + (uint64_t)(i == n ? tg[3 * n - 1] : in[2 * n + i]);
    assert_int_equal(c, a + b);
    return a * p10 + b;
}

static void test_addition(void **state)
{
    (void)state;
    struct gpt_dataset *ds = open_addition(3, 64);
    assert_true(gpt_dataset_is_synthetic(ds));
    assert_int_equal(gpt_dataset_seq_len(ds), 9);
    assert_int_equal(gpt_dataset_vocab_size(ds), 10);
    assert_int_equal(gpt_dataset_vocab(ds)->chars[3], '3');
    assert_int_equal(gpt_dataset_val_samples(ds), 1000);
    assert_int_equal(gpt_dataset_train_samples(ds), 1000000 - 1000);

    unsigned char *is_val = calloc(1000000, 1);
    int prompt[6], answer[4], in[9 * 64], tg[9 * 64];
    size_t np, na;
    for (uint64_t i = 0; i < 1000; i++) {
        assert_int_equal(gpt_dataset_val_problem(ds, i, prompt, &np, answer, &na), 0);
        assert_int_equal(np, 6);
        assert_int_equal(na, 4);
        int seq_in[9], seq_tg[9];
        memcpy(seq_in, prompt, sizeof(prompt));
        memcpy(seq_in + 6, answer, 3 * sizeof(int));
        for (int t = 0; t < 9; t++)
            seq_tg[t] = t < 5 ? -1 : t < 8 ? seq_in[t + 1] : answer[3];
        uint64_t p = check_addition(seq_in, seq_tg, 3);
        assert_int_equal(is_val[p], 0); /* 1000 distinct problems */
        is_val[p] = 1;
    }
    /* Val batches are the held-out problems, wrapping around. */
    assert_int_equal(gpt_dataset_val_batch(ds, 1, 64, in, tg, NULL), 0);
    for (int b = 0; b < 64; b++)
        assert_true(is_val[check_addition(in + 9 * b, tg + 9 * b, 3)]);
    assert_int_equal(gpt_dataset_val_problem(ds, 1000 + 7, prompt, &np, answer, &na), 0);
    int p7[6], a7[4];
    assert_int_equal(gpt_dataset_val_problem(ds, 7, p7, &np, a7, &na), 0);
    assert_memory_equal(prompt, p7, sizeof(p7));

    /* 200k training samples over several epochs-worth of cursor: never held out. */
    struct gpt_data_cursor cur;
    gpt_data_cursor_init(ds, &cur);
    for (int k = 0; k < 200000 / 64; k++) {
        assert_int_equal(gpt_dataset_train_batch(ds, &cur, 0, 64, in, tg, NULL), 0);
        for (int b = 0; b < 64; b++)
            assert_false(is_val[check_addition(in + 9 * b, tg + 9 * b, 3)]);
        gpt_data_cursor_advance(ds, &cur, 64);
        if (k == 1000)
            cur.epoch = 7; /* other epochs too */
    }
    free(is_val);
    gpt_dataset_free(ds);

    /* Two digits: an epoch is exactly the train problems, each once. */
    ds = open_addition(2, 6);
    assert_int_equal(gpt_dataset_val_samples(ds), 1000);
    uint64_t N = gpt_dataset_train_samples(ds);
    assert_int_equal(N, 9000);
    unsigned char seen[10000] = {0};
    for (uint64_t i = 0; i < 1000; i++) {
        assert_int_equal(gpt_dataset_val_problem(ds, i, prompt, &np, answer, &na), 0);
        seen[((prompt[0] * 10 + prompt[1]) * 10 + prompt[2]) * 10 + prompt[3]] += 2;
    }
    gpt_data_cursor_init(ds, &cur);
    for (uint64_t i = 0; i < N; i++) {
        assert_int_equal(gpt_dataset_train_batch(ds, &cur, N + i, 1, in, tg, NULL), 0);
        seen[check_addition(in, tg, 2)] += 1;
    }
    for (int p = 0; p < 10000; p++)
        assert_true(seen[p] == 1 || seen[p] == 2);
    gpt_dataset_free(ds);

    /* One digit: 100 problems, 20 held out. */
    ds = open_addition(1, 0);
    assert_int_equal(gpt_dataset_val_samples(ds), 20);
    assert_int_equal(gpt_dataset_train_samples(ds), 80);
    gpt_dataset_free(ds);
}

static void test_addition_errors(void **state)
{
    (void)state;
    struct gpt_data_spec s;
    struct gpt_err err = {0};
    struct gpt_dataset *ds = NULL;
    memset(&s, 0, sizeof(s));
    s.kind = GPT_DATA_SYNTHETIC;
    strcpy(s.task, "addition");
    s.digits = 3;
    assert_int_equal(gpt_dataset_open(&s, 8, 1, &ds, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "model.block_size");
    s.digits = 0;
    assert_int_equal(gpt_dataset_open(&s, 64, 1, &ds, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "data.digits");
    s.digits = 2;
    strcpy(s.task, "sorting");
    assert_int_equal(gpt_dataset_open(&s, 64, 1, &ds, &err), -GPT_E_SPEC);
    assert_string_equal(err.path, "data.task");
    assert_null(ds);
    gpt_dataset_free(NULL);
}

static void test_rank_range(void **state)
{
    (void)state;
    uint64_t f, c;
    gpt_data_rank_range(8, 4, 3, &f, &c);
    assert_int_equal(f, 6);
    assert_int_equal(c, 2);
    gpt_data_rank_range(7, 3, 0, &f, &c);
    assert_int_equal(f, 0);
    assert_int_equal(c, 3);
    gpt_data_rank_range(7, 3, 2, &f, &c);
    assert_int_equal(f, 5);
    assert_int_equal(c, 2);
    gpt_data_rank_range(2, 4, 3, &f, &c);
    assert_int_equal(f, 2);
    assert_int_equal(c, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_char_vocab),      cmocka_unit_test(test_byte_tokenizer),
        cmocka_unit_test(test_split),           cmocka_unit_test(test_split_too_small),
        cmocka_unit_test(test_text_val_path),   cmocka_unit_test(test_shards),
        cmocka_unit_test(test_shard_errors),    cmocka_unit_test(test_sampler_world_sizes),
        cmocka_unit_test(test_epochs),          cmocka_unit_test(test_addition),
        cmocka_unit_test(test_addition_errors), cmocka_unit_test(test_rank_range),
        cmocka_unit_test(test_not_regular),     cmocka_unit_test(test_policy),
        cmocka_unit_test(test_glob_limit),      cmocka_unit_test(test_file_changes),
    };
    return cmocka_run_group_tests(tests, setup, tmp_dir_teardown);
}
