/*
 * test_snapshot: snapshot round trip, detection of truncated, bit-flipped,
 * wrong-magic and wrong-version files, newest-valid lookup with skip
 * reports, pruning, and atomic writes (no temporary left behind); owners
 * (header version 2, version 1 still read), quarantine of corrupt files,
 * the folder's owner marker and the cleaning of dead writers' temporaries.
 */
#define _GNU_SOURCE /* nftw */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "snapshot.h"
#include "unit/tmp_dir.h"

#define NP 1000

static int setup(void **state)
{
    (void)state;
    return tmp_dir_make("snap");
}

static void fill_meta(struct gpt_snapshot_meta *m, int64_t step, int moments)
{
    memset(m, 0, sizeof(*m));
    m->version = GPT_SNAPSHOT_VERSION;
    m->cfg = (struct gpt_model_config){
        .n_layer = 2, .n_head = 4, .n_embd = 64, .block_size = 32, .vocab_size = 65};
    m->vocab.kind = GPT_TOK_CHAR;
    m->vocab.size = 65;
    for (int i = 0; i < 65; i++)
        m->vocab.chars[i] = (unsigned char)(' ' + i);
    m->step = step;
    m->cursor = (struct gpt_data_cursor){.epoch = 3, .position = 12345, .seed = 0xdeadbeefcafeull};
    m->rng[0] = 1;
    m->rng[1] = UINT64_MAX;
    m->rng[2] = 0x8000000000000000ull;
    m->rng[3] = 42;
    m->tokens_seen = 1ull << 40;
    m->world_size = 3;
    m->sharding = GPT_SHARD_OPTIMIZER;
    m->n_params = NP;
    m->has_moments = moments;
}

/* Arbitrary bit patterns, NaNs and infinities included. */
static void fill_floats(float *p, size_t n, uint32_t salt)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x = (uint32_t)(i * 2654435761u) ^ salt;
        memcpy(&p[i], &x, 4);
    }
}

static void assert_meta_equal(const struct gpt_snapshot_meta *a, const struct gpt_snapshot_meta *b)
{
    assert_int_equal(a->version, b->version);
    assert_memory_equal(&a->cfg, &b->cfg, sizeof(a->cfg));
    assert_memory_equal(&a->vocab, &b->vocab, sizeof(a->vocab));
    assert_int_equal(a->step, b->step);
    assert_memory_equal(&a->cursor, &b->cursor, sizeof(a->cursor));
    assert_memory_equal(a->rng, b->rng, sizeof(a->rng));
    assert_int_equal(a->tokens_seen, b->tokens_seen);
    assert_int_equal(a->world_size, b->world_size);
    assert_int_equal(a->sharding, b->sharding);
    assert_int_equal(a->n_params, b->n_params);
    assert_int_equal(a->has_moments, b->has_moments);
}

static void write_snap(const char *dir, int64_t step, int moments, char *path, size_t cap)
{
    struct gpt_snapshot_meta m;
    float p[NP], mm[NP], vv[NP];
    struct gpt_err err = {0};
    fill_meta(&m, step, moments);
    fill_floats(p, NP, (uint32_t)step);
    fill_floats(mm, NP, 0x1111u);
    fill_floats(vv, NP, 0x2222u);
    assert_int_equal(
        gpt_snapshot_write(dir, &m, p, moments ? mm : NULL, moments ? vv : NULL, path, cap, &err),
        0);
}

static size_t count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += de->d_name[0] != '.' || (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."));
    closedir(d);
    return n;
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void spit(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void test_round_trip(void **state)
{
    (void)state;
    char dir[300], path[512];
    tmp_dir_path(dir, sizeof(dir), "rt/nested"); /* created with its parent */
    struct gpt_snapshot_meta m, got;
    float p[NP], mm[NP], vv[NP], rp[NP], rm[NP], rv[NP];
    struct gpt_err err = {0};
    fill_meta(&m, 42, 1);
    fill_floats(p, NP, 1);
    fill_floats(mm, NP, 2);
    fill_floats(vv, NP, 3);
    assert_int_equal(gpt_snapshot_write(dir, &m, p, mm, vv, path, sizeof(path), &err), 0);
    assert_non_null(strstr(path, "/snap-000000000042.gpts"));
    assert_int_equal(count_entries(dir), 1); /* no temporary left behind */

    assert_int_equal(gpt_snapshot_read(path, &got, rp, rm, rv, &err), 0);
    assert_meta_equal(&m, &got);
    assert_memory_equal(p, rp, sizeof(p)); /* bitwise, NaNs included */
    assert_memory_equal(mm, rm, sizeof(mm));
    assert_memory_equal(vv, rv, sizeof(vv));

    memset(&got, 0, sizeof(got));
    assert_int_equal(gpt_snapshot_read(path, &got, NULL, NULL, NULL, &err), 0);
    assert_meta_equal(&m, &got);
    memset(&got, 0, sizeof(got));
    assert_int_equal(gpt_snapshot_read_meta(path, &got, &err), 0);
    assert_meta_equal(&m, &got);

    /* Without moments: m and v buffers are left alone. */
    fill_meta(&m, 43, 0);
    assert_int_equal(gpt_snapshot_write(dir, &m, p, NULL, NULL, path, sizeof(path), &err), 0);
    memset(rm, 0x5a, sizeof(rm));
    assert_int_equal(gpt_snapshot_read(path, &got, rp, rm, rv, &err), 0);
    assert_int_equal(got.has_moments, 0);
    assert_memory_equal(p, rp, sizeof(p));
    for (size_t i = 0; i < sizeof(rm); i++)
        assert_int_equal(((unsigned char *)rm)[i], 0x5a);
    assert_int_equal(count_entries(dir), 2);

    /* Size: header + params + trailer exactly. */
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 512 + 4 * NP + 4);

    /* Only one of m, v is a caller error. */
    assert_int_equal(gpt_snapshot_write(dir, &m, p, mm, NULL, NULL, 0, &err), -EINVAL);
    assert_int_equal(count_entries(dir), 2);
}

static void expect_bad(const char *path, int code, const char *what)
{
    struct gpt_snapshot_meta got;
    struct gpt_err err = {0};
    float buf[NP];
    assert_int_equal(gpt_snapshot_read(path, &got, buf, buf, buf, &err), code);
    assert_int_equal(err.code, code);
    assert_non_null(strstr(err.msg, path));
    if (what && !strstr(err.msg, what))
        fail_msg("message '%s' lacks '%s'", err.msg, what);
}

static void put32(unsigned char *b, uint32_t x)
{
    for (int i = 0; i < 4; i++)
        b[i] = (unsigned char)(x >> (8 * i));
}

static void test_corruption(void **state)
{
    (void)state;
    char dir[300], good[512], bad[600];
    tmp_dir_path(dir, sizeof(dir), "corrupt");
    write_snap(dir, 7, 1, good, sizeof(good));
    snprintf(bad, sizeof(bad), "%s/snap-000000000008.gpts", dir);
    size_t n;
    unsigned char *b = slurp(good, &n);
    assert_int_equal(n, 512 + 3 * 4 * NP + 4);

    /* Truncated anywhere. */
    size_t cuts[] = {0, 5, 8, 15, 16, 100, 511, 512, 513, 512 + 4 * NP, n - 4, n - 1};
    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
        spit(bad, b, cuts[i]);
        expect_bad(bad, -GPT_E_CORRUPT, "truncated");
    }
    /* Longer than its sizes say. */
    unsigned char *longer = malloc(n + 4);
    memcpy(longer, b, n);
    memset(longer + n, 0, 4);
    spit(bad, longer, n + 4);
    expect_bad(bad, -GPT_E_CORRUPT, "bad size");
    free(longer);

    /* One flipped bit in the header, params, moments and trailer. */
    size_t flips[] = {12,    20,   300, 400, 508, 512, 512 + 4 * NP + 3, 512 + 8 * NP + 100,
                      n - 4, n - 1};
    for (size_t i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
        b[flips[i]] ^= 0x10;
        spit(bad, b, n);
        expect_bad(bad, -GPT_E_CORRUPT, "checksum");
        b[flips[i]] ^= 0x10;
    }
    /* The header check alone: read_meta sees header flips, not payload ones. */
    struct gpt_snapshot_meta got;
    struct gpt_err err = {0};
    b[300] ^= 1;
    spit(bad, b, n);
    assert_int_equal(gpt_snapshot_read_meta(bad, &got, &err), -GPT_E_CORRUPT);
    assert_non_null(strstr(err.msg, bad));
    b[300] ^= 1;
    b[600] ^= 1;
    spit(bad, b, n);
    assert_int_equal(gpt_snapshot_read_meta(bad, &got, &err), 0);
    b[600] ^= 1;

    /* Wrong magic. */
    b[0] = 'X';
    spit(bad, b, n);
    expect_bad(bad, -GPT_E_CORRUPT, "magic");
    b[0] = 'G';

    /* Wrong version, even with a consistent header checksum. */
    unsigned char *h = malloc(n);
    memcpy(h, b, n);
    put32(h + 8, 3);
    put32(h + 508, (uint32_t)crc32(0, h, 508));
    spit(bad, h, n);
    expect_bad(bad, -GPT_E_VERSION, "version 3");
    assert_int_equal(gpt_snapshot_read_meta(bad, &got, &err), -GPT_E_VERSION);

    /* A lying parameter count with a valid header checksum: caught by size. */
    memcpy(h, b, n);
    put32(h + 380, NP * 1000); /* n_params (low word) */
    put32(h + 508, (uint32_t)crc32(0, h, 508));
    spit(bad, h, n);
    expect_bad(bad, -GPT_E_CORRUPT, "truncated");
    memcpy(h, b, n);
    put32(h + 384, 0x40000000u); /* n_params high word: 2^62 parameters */
    put32(h + 508, (uint32_t)crc32(0, h, 508));
    spit(bad, h, n);
    expect_bad(bad, -GPT_E_CORRUPT, NULL);
    /* An absurd header length. */
    memcpy(h, b, n);
    put32(h + 12, 0xffffffffu);
    spit(bad, h, n);
    expect_bad(bad, -GPT_E_CORRUPT, "header length");
    free(h);

    /* The untouched original still reads. */
    float buf[NP];
    assert_int_equal(gpt_snapshot_read(good, &got, buf, NULL, NULL, &err), 0);
    /* A missing file is an errno. */
    snprintf(bad, sizeof(bad), "%s/nope.gpts", dir);
    expect_bad(bad, -ENOENT, NULL);
    free(b);
}

struct skips {
    int n;
    char path[4][600];
    struct gpt_err why[4];
};

static void on_skip(void *ctx, const char *path, const struct gpt_err *why)
{
    struct skips *s = ctx;
    assert_true(s->n < 4);
    snprintf(s->path[s->n], sizeof(s->path[0]), "%s", path);
    s->why[s->n++] = *why;
}

static void test_newest(void **state)
{
    (void)state;
    char dir[300], p1[512], p2[512], p3[512], got[512], junk[600];
    tmp_dir_path(dir, sizeof(dir), "newest");
    struct gpt_snapshot_meta meta;
    struct gpt_err err = {0};
    struct skips sk = {0};

    assert_int_equal(gpt_snapshot_newest(dir, got, sizeof(got), &meta, on_skip, &sk, &err),
                     -ENOENT); /* no directory */
    write_snap(dir, 1, 1, p1, sizeof(p1));
    write_snap(dir, 2, 0, p2, sizeof(p2));
    write_snap(dir, 30, 1, p3, sizeof(p3));
    assert_int_equal(gpt_snapshot_newest(dir, got, sizeof(got), &meta, on_skip, &sk, &err), 0);
    assert_string_equal(got, p3);
    assert_int_equal(meta.step, 30);
    assert_int_equal(sk.n, 0);

    /* Corrupt the newest (one bit in its params) and add a garbage newer one. */
    size_t n;
    unsigned char *b = slurp(p3, &n);
    b[512 + 10] ^= 4;
    spit(p3, b, n);
    free(b);
    snprintf(junk, sizeof(junk), "%s/snap-000000000099.gpts", dir);
    spit(junk, "garbage", 7);
    /* Names that are not snapshots are ignored. */
    snprintf(got, sizeof(got), "%s/snap-abc.gpts", dir);
    spit(got, "x", 1);
    snprintf(got, sizeof(got), "%s/notes.txt", dir);
    spit(got, "x", 1);

    assert_int_equal(gpt_snapshot_newest(dir, got, sizeof(got), &meta, on_skip, &sk, &err), 0);
    assert_string_equal(got, p2);
    assert_int_equal(meta.step, 2);
    assert_int_equal(sk.n, 2);
    assert_string_equal(sk.path[0], junk);
    assert_int_equal(sk.why[0].code, -GPT_E_CORRUPT);
    assert_non_null(strstr(sk.why[0].msg, junk));
    assert_string_equal(sk.path[1], p3);
    assert_int_equal(sk.why[1].code, -GPT_E_CORRUPT);
    assert_non_null(strstr(sk.why[1].msg, p3));
    assert_non_null(strstr(sk.why[1].msg, "checksum"));

    /* NULL callback and outputs are allowed. */
    assert_int_equal(gpt_snapshot_newest(dir, NULL, 0, NULL, NULL, NULL, &err), 0);

    /* Nothing valid left: -ENOENT, every file reported. */
    unlink(p1);
    unlink(p2);
    sk.n = 0;
    assert_int_equal(gpt_snapshot_newest(dir, got, sizeof(got), &meta, on_skip, &sk, &err),
                     -ENOENT);
    assert_int_equal(sk.n, 2);
    assert_non_null(strstr(err.msg, dir));
}

static void test_list_prune(void **state)
{
    (void)state;
    char dir[300], path[512], other[600];
    tmp_dir_path(dir, sizeof(dir), "prune");
    struct gpt_err err = {0};
    for (int64_t s = 1; s <= 5; s++)
        write_snap(dir, s * 100, 0, path, sizeof(path));
    write_snap(dir, 1000000000000ll, 0, path, sizeof(path)); /* 13 digits: still newest */
    snprintf(other, sizeof(other), "%s/keepme.txt", dir);
    spit(other, "x", 1);

    char **paths;
    size_t n;
    assert_int_equal(gpt_snapshot_list(dir, &paths, &n, &err), 0);
    assert_int_equal(n, 6);
    assert_string_equal(paths[0], path);
    assert_non_null(strstr(paths[1], "snap-000000000500.gpts"));
    assert_non_null(strstr(paths[5], "snap-000000000100.gpts"));
    gpt_snapshot_list_free(paths, n);
    gpt_snapshot_list_free(NULL, 0);

    assert_int_equal(gpt_snapshot_prune(dir, 0, NULL, &err), 0);
    assert_int_equal(count_entries(dir), 7);
    assert_int_equal(gpt_snapshot_prune(dir, 3, NULL, &err), 0);
    assert_int_equal(gpt_snapshot_list(dir, &paths, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_string_equal(paths[0], path);
    assert_non_null(strstr(paths[1], "snap-000000000500.gpts"));
    assert_non_null(strstr(paths[2], "snap-000000000400.gpts"));
    gpt_snapshot_list_free(paths, n);
    assert_int_equal(access(other, F_OK), 0);
    assert_int_equal(gpt_snapshot_prune(dir, 10, NULL, &err), 0);
    assert_int_equal(count_entries(dir), 4);

    snprintf(other, sizeof(other), "%s/absent", dir);
    assert_int_equal(gpt_snapshot_list(other, &paths, &n, &err), -ENOENT);
    assert_non_null(strstr(err.msg, other));
}

static const struct gpt_snapshot_owner OWNER_A = {0xa11ce, 7, 1000};
static const struct gpt_snapshot_owner OWNER_B = {0xb0b, 8, 1001};

static void write_owned(const char *dir, int64_t step, const struct gpt_snapshot_owner *o,
                        char *path, size_t cap)
{
    struct gpt_snapshot_meta m;
    float p[NP];
    struct gpt_err err = {0};
    fill_meta(&m, step, 0);
    m.owner = *o;
    m.fingerprint = 0x1234;
    fill_floats(p, NP, (uint32_t)step);
    assert_int_equal(gpt_snapshot_write(dir, &m, p, NULL, NULL, path, cap, &err), 0);
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Version 2 carries the owner; a version 1 file (zero padding there) still
 * reads, as "no owner recorded". */
static void test_owner_header(void **state)
{
    (void)state;
    char dir[300], path[512];
    tmp_dir_path(dir, sizeof(dir), "owner");
    struct gpt_snapshot_meta got;
    struct gpt_err err = {0};
    write_owned(dir, 3, &OWNER_A, path, sizeof(path));
    assert_int_equal(gpt_snapshot_read_meta(path, &got, &err), 0);
    assert_int_equal(got.version, 2);
    assert_int_equal(got.owner.token, OWNER_A.token);
    assert_int_equal(got.owner.job, 7);
    assert_int_equal(got.owner.uid, 1000);
    assert_int_equal(got.fingerprint, 0x1234);

    size_t n;
    unsigned char *b = slurp(path, &n);
    put32(b + 8, 1);
    memset(b + 392, 0, 28);
    put32(b + 508, (uint32_t)crc32(0, b, 508));
    uint32_t crc = (uint32_t)crc32(0, b, (uInt)(n - 4));
    put32(b + n - 4, crc);
    spit(path, b, n);
    free(b);
    float p[NP];
    assert_int_equal(gpt_snapshot_read(path, &got, p, NULL, NULL, &err), 0);
    assert_int_equal(got.version, 1);
    assert_int_equal(got.owner.token, 0);
    assert_int_equal(got.fingerprint, 0);

    /* The fingerprint changes with the model, the vocabulary and the data. */
    struct gpt_snapshot_meta m;
    fill_meta(&m, 1, 0);
    struct gpt_data_spec d = {.kind = GPT_DATA_TEXT};
    snprintf(d.path, sizeof(d.path), "/data/a.txt");
    uint64_t f0 = gpt_snapshot_fingerprint(&m.cfg, &m.vocab, &d);
    assert_int_not_equal(f0, 0);
    assert_int_equal(f0, gpt_snapshot_fingerprint(&m.cfg, &m.vocab, &d));
    snprintf(d.path, sizeof(d.path), "/data/b.txt");
    assert_int_not_equal(f0, gpt_snapshot_fingerprint(&m.cfg, &m.vocab, &d));
    snprintf(d.path, sizeof(d.path), "/data/a.txt");
    m.cfg.n_layer++;
    assert_int_not_equal(f0, gpt_snapshot_fingerprint(&m.cfg, &m.vocab, &d));
    m.cfg.n_layer--;
    m.vocab.chars[3] ^= 1;
    assert_int_not_equal(f0, gpt_snapshot_fingerprint(&m.cfg, &m.vocab, &d));
}

/* Every snapshot corrupt: a scan quarantines them all and finds nothing;
 * pruning then keeps the new valid snapshots, never counting corrupt
 * high-step files. */
static void test_quarantine(void **state)
{
    (void)state;
    char dir[300], p1[512], p2[512], q[700], fresh[512];
    tmp_dir_path(dir, sizeof(dir), "quarantine");
    struct gpt_err err = {0};
    struct gpt_snapshot_meta meta;
    write_owned(dir, 100, &OWNER_A, p1, sizeof(p1));
    write_owned(dir, 200, &OWNER_A, p2, sizeof(p2));
    size_t n;
    unsigned char *b = slurp(p1, &n);
    b[600] ^= 1; /* payload */
    spit(p1, b, n);
    free(b);
    truncate(p2, 100);

    struct skips sk = {0};
    struct gpt_snapshot_find_opts fo = {
        .owner = &OWNER_A, .quarantine = 1, .skip = on_skip, .ctx = &sk};
    struct gpt_snapshot_find_stats st;
    assert_int_equal(gpt_snapshot_find(dir, &fo, NULL, 0, &meta, &st, &err), -ENOENT);
    assert_int_equal(st.invalid, 2);
    assert_int_equal(st.quarantined, 2);
    assert_int_equal(sk.n, 2);
    assert_non_null(strstr(sk.why[0].msg, "quarantined as"));
    assert_non_null(strstr(sk.why[0].msg, p2));
    assert_false(exists(p1));
    assert_false(exists(p2));
    snprintf(q, sizeof(q), "%s" GPT_SNAPSHOT_CORRUPT, p2);
    assert_true(exists(q));
    /* Quarantined files are not candidates again, but they are counted. */
    sk.n = 0;
    assert_int_equal(gpt_snapshot_find(dir, &fo, NULL, 0, &meta, &st, &err), -ENOENT);
    assert_int_equal(st.invalid, 0);
    assert_int_equal(st.quarantined, 2);
    assert_int_equal(sk.n, 0);

    /* A corrupt header at a high step is not counted by pruning either. */
    char high[520];
    snprintf(high, sizeof(high), "%s/snap-000000009999.gpts", dir);
    spit(high, "not a snapshot: garbage", 23);
    write_owned(dir, 10, &OWNER_A, fresh, sizeof(fresh));
    write_owned(dir, 20, &OWNER_A, p1, sizeof(p1));
    assert_int_equal(gpt_snapshot_prune(dir, 1, &OWNER_A, &err), 0);
    assert_true(exists(p1)); /* the newest valid one is kept */
    assert_false(exists(fresh));
    assert_false(exists(high));
    snprintf(q, sizeof(q), "%s" GPT_SNAPSHOT_CORRUPT, high);
    assert_true(exists(q));
    assert_int_equal(gpt_snapshot_find(dir, &fo, NULL, 0, &meta, &st, &err), 0);
    assert_int_equal(meta.step, 20);

    /* A second corrupt file of a name already quarantined keeps both. */
    char again[700], got[700];
    snprintf(again, sizeof(again), "%s/snap-000000000200.gpts", dir);
    spit(again, "junk", 4);
    assert_int_equal(gpt_snapshot_quarantine(again, got, sizeof(got), &err), 0);
    snprintf(q, sizeof(q), "%s/snap-000000000200.gpts.2" GPT_SNAPSHOT_CORRUPT, dir);
    assert_string_equal(got, q);
    assert_true(exists(q));
    snprintf(q, sizeof(q), "%s" GPT_SNAPSHOT_CORRUPT, p2);
    assert_true(exists(q)); /* the first one is still there */
    assert_int_equal(gpt_snapshot_find(dir, &fo, NULL, 0, &meta, &st, &err), 0);
    assert_int_equal(st.quarantined, 4);
}

/* Another owner's snapshots are skipped by a scan, neither counted nor
 * deleted by pruning, and never overwritten. */
static void test_foreign(void **state)
{
    (void)state;
    char dir[300], a[512], bpath[512], got[512];
    tmp_dir_path(dir, sizeof(dir), "foreign");
    struct gpt_err err = {0};
    struct gpt_snapshot_meta meta;
    write_owned(dir, 10, &OWNER_A, a, sizeof(a));
    write_owned(dir, 50, &OWNER_B, bpath, sizeof(bpath));
    write_owned(dir, 60, &OWNER_B, got, sizeof(got));
    struct skips sk = {0};
    struct gpt_snapshot_find_opts fo = {.owner = &OWNER_A, .skip = on_skip, .ctx = &sk};
    struct gpt_snapshot_find_stats st;
    assert_int_equal(gpt_snapshot_find(dir, &fo, got, sizeof(got), &meta, &st, &err), 0);
    assert_string_equal(got, a);
    assert_int_equal(st.foreign, 2);
    assert_non_null(strstr(sk.why[0].msg, "belongs to job 8 (uid 1001)"));
    /* Without an owner every valid file counts (the old behaviour). */
    assert_int_equal(gpt_snapshot_newest(dir, NULL, 0, &meta, NULL, NULL, &err), 0);
    assert_int_equal(meta.step, 60);

    write_owned(dir, 20, &OWNER_A, got, sizeof(got));
    assert_int_equal(gpt_snapshot_prune(dir, 1, &OWNER_A, &err), 0);
    assert_false(exists(a));
    assert_true(exists(bpath));
    assert_true(exists(got));

    struct gpt_snapshot_meta m;
    float p[NP] = {0};
    fill_meta(&m, 50, 0);
    m.owner = OWNER_A;
    assert_int_equal(gpt_snapshot_write(dir, &m, p, NULL, NULL, NULL, 0, &err), -EEXIST);
    assert_non_null(strstr(err.msg, "belongs to job 8"));
    assert_int_equal(gpt_snapshot_read_meta(bpath, &meta, &err), 0);
    assert_int_equal(meta.owner.token, OWNER_B.token);

    /* The newest snapshot that records an owner speaks for a folder whose
     * marker was lost; a folder of unowned snapshots has none. */
    struct gpt_snapshot_owner rec;
    assert_int_equal(gpt_snapshot_owner_recorded(dir, &rec, &err), 0);
    assert_int_equal(rec.token, OWNER_B.token);
    char plain[300];
    tmp_dir_path(plain, sizeof(plain), "plain");
    write_snap(plain, 1, 0, got, sizeof(got));
    assert_int_equal(gpt_snapshot_owner_recorded(plain, &rec, &err), -ENOENT);
}

static void test_owner_marker(void **state)
{
    (void)state;
    char dir[300], other[300], path[512];
    tmp_dir_path(dir, sizeof(dir), "marked/deeper");
    tmp_dir_path(other, sizeof(other), "unmarked");
    struct gpt_err err = {0};
    struct gpt_snapshot_owner found;

    assert_int_equal(gpt_snapshot_owner_load(dir, &found, &err), -ENOENT);
    assert_int_equal(gpt_snapshot_owner_claim(dir, &OWNER_A, GPT_OWNER_DRY_RUN, &found, &err), 0);
    assert_false(exists(dir));
    assert_int_equal(gpt_snapshot_owner_claim(dir, &OWNER_A, 0, &found, &err), 0);
    assert_int_equal(gpt_snapshot_owner_load(dir, &found, &err), 0);
    assert_int_equal(found.token, OWNER_A.token);
    assert_int_equal(found.job, 7);
    assert_int_equal(found.uid, 1000);
    assert_int_equal(gpt_snapshot_owner_claim(dir, &OWNER_A, 0, NULL, &err), 0); /* again */
    memset(&found, 0, sizeof(found));
    assert_int_equal(gpt_snapshot_owner_claim(dir, &OWNER_B, GPT_OWNER_ADOPT, &found, &err),
                     -EEXIST);
    assert_int_equal(found.job, 7);
    assert_string_equal(err.path, "snapshot.dir");
    assert_non_null(strstr(err.msg, dir));
    assert_non_null(strstr(err.msg, "belongs to job 7 (uid 1000)"));
    struct gpt_snapshot_owner run = {0x77, 0, 0};
    assert_int_equal(gpt_snapshot_owner_claim(dir, &run, GPT_OWNER_DRY_RUN, NULL, &err), -EEXIST);

    /* A folder holding snapshots without a marker: refused for a fresh
     * start, adopted by a resume. */
    write_snap(other, 5, 0, path, sizeof(path));
    assert_int_equal(gpt_snapshot_owner_claim(other, &OWNER_B, 0, &found, &err), -EEXIST);
    assert_int_equal(found.token, 0);
    assert_non_null(strstr(err.msg, "no owner recorded"));
    assert_int_equal(gpt_snapshot_owner_claim(other, &OWNER_B, GPT_OWNER_ADOPT, NULL, &err), 0);
    assert_int_equal(gpt_snapshot_owner_load(other, &found, &err), 0);
    assert_int_equal(found.token, OWNER_B.token);

    /* The parser refuses what it did not write. */
    const char *bad[] = {"",
                         "gptd-snapshot-owner 2\ntoken 1\njob 1\nuid 1\n",
                         "gptd-snapshot-owner 1\ntoken 1\njob 1\n",
                         "gptd-snapshot-owner 1\ntoken 0\njob 1\nuid 1\n",
                         "gptd-snapshot-owner 1\ntoken zz\njob 1\nuid 1\n",
                         "gptd-snapshot-owner 1\ntoken 1\njob -1\nuid 1\n",
                         "gptd-snapshot-owner 1\ntoken 1\njob 1\nuid 99999999999\n",
                         "gptd-snapshot-owner 1\ntoken 1\njob 1\nuid 1\nmore 2\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(gpt_snapshot_owner_parse(bad[i], strlen(bad[i]), &found, &err),
                         -GPT_E_CORRUPT);
    const char *ok = "gptd-snapshot-owner 1\ntoken 00ff\njob 12\nuid 0\n";
    assert_int_equal(gpt_snapshot_owner_parse(ok, strlen(ok), &found, &err), 0);
    assert_int_equal(found.token, 255);
    assert_int_equal(found.job, 12);
}

/* Only regular files named like our own temporaries go. */
static void test_clean_tmp(void **state)
{
    (void)state;
    char dir[300], a[600], b[600], c[600], d[600], e[600], snap[512];
    tmp_dir_path(dir, sizeof(dir), "tmpclean");
    write_snap(dir, 4, 0, snap, sizeof(snap));
    snprintf(a, sizeof(a), "%s/.snap-000000000010.gpts.AbC123", dir);
    snprintf(b, sizeof(b), "%s/.snap-000000000010.gpts.AbC12", dir);  /* 5 letters */
    snprintf(c, sizeof(c), "%s/.snap-x.gpts.AbC123", dir);            /* no step */
    snprintf(d, sizeof(d), "%s/.snap-000000000011.gpts.link01", dir); /* a symlink */
    snprintf(e, sizeof(e), "%s/.snap-000000000012.gpts.dir001", dir); /* a directory */
    spit(a, "x", 1);
    spit(b, "x", 1);
    spit(c, "x", 1);
    assert_int_equal(symlink(snap, d), 0);
    assert_int_equal(mkdir(e, 0755), 0);
    int removed = -1;
    struct gpt_err err = {0};
    assert_int_equal(gpt_snapshot_clean_tmp(dir, &removed, &err), 0);
    assert_int_equal(removed, 1);
    assert_false(exists(a));
    assert_true(exists(b) && exists(c) && exists(d) && exists(e) && exists(snap));
    assert_int_equal(rmdir(e), 0);
    char missing[400];
    snprintf(missing, sizeof(missing), "%s/none", dir);
    assert_int_equal(gpt_snapshot_clean_tmp(missing, &removed, &err), 0);
    assert_int_equal(removed, 0);
}

/* A FIFO where a snapshot should be is refused at once, never opened for
 * a blocking read (the daemon's loop reads snapshots for --resume-from). */
static void test_fifo(void **state)
{
    (void)state;
    char path[512];
    tmp_dir_path(path, sizeof(path), "snap-000000000010.gpts");
    assert_int_equal(mkfifo(path, 0600), 0);
    struct gpt_snapshot_meta meta;
    struct gpt_err err = {0};
    assert_true(gpt_snapshot_read_meta(path, &meta, &err) < 0);
    assert_non_null(strstr(err.msg, "not a"));
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),   cmocka_unit_test(test_corruption),
        cmocka_unit_test(test_newest),       cmocka_unit_test(test_list_prune),
        cmocka_unit_test(test_owner_header), cmocka_unit_test(test_quarantine),
        cmocka_unit_test(test_foreign),      cmocka_unit_test(test_owner_marker),
        cmocka_unit_test(test_clean_tmp),    cmocka_unit_test(test_fifo),
    };
    return cmocka_run_group_tests(tests, setup, tmp_dir_teardown);
}
