/*
 * test_snapshot_shard: sharded snapshots (engine/snapshot_shard.c, the
 * save and load paths of engine/shard.c).
 *   - slices of three ranks (uneven, interleaved pieces as full sharding
 *     makes them) and their manifest read back whole, by ranges, by size,
 *     and through gpt_snapshot_find;
 *   - a missing, a bit-flipped, a truncated and a stale (other id) slice
 *     each make the snapshot invalid: gpt_snapshot_find quarantines the
 *     manifest and falls back to the older valid snapshot;
 *   - the manifest parser refuses gaps, overlaps, pieces out of range,
 *     bad sizes and checksums with a message;
 *   - pruning removes a manifest's slices with it, and orphan slices;
 *     cleaning orphans for an owner spares another job's slices;
 *   - the streamed fresh weights (gpt_shard_init_*) equal
 *     gpt_model_init_weights_host's bit for bit;
 *   - the save path of a sharded model (gpt_shard_snapshot_write) and its
 *     load path (gpt_shard_load_stream) allocate no buffer of the model's
 *     full size: every allocation is recorded (malloc, calloc, realloc,
 *     aligned_alloc and posix_memalign are wrapped in this executable);
 *   - a load that one rank of three fails (gpt_shard_test_fail_load)
 *     fails on every rank, promptly, with an error naming that rank.
 */
#define _GNU_SOURCE /* nftw */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
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

#include <cmocka.h>
#include <zlib.h>

#include "backend.h"
#include "comm.h"
#include "model.h"
#include "shard.h"
#include "snapshot.h"
#include "unit/tmp_dir.h"

/* ---- allocation recorder ---- */

/* ASan interposes malloc itself, and a second definition here breaks its
 * start-up (CHECK tsd_key_inited): under it the recorder is left out and
 * the allocation bounds are checked by the plain build only. */
#if defined(__SANITIZE_ADDRESS__)
#define ALLOC_RECORDER 0
#else
#define ALLOC_RECORDER 1
#endif

static size_t largest_alloc; /* bytes of the largest allocation since reset */
static bool recording;

#if ALLOC_RECORDER
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t k);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);

static void record(size_t n)
{
    if (recording && n > largest_alloc)
        largest_alloc = n;
}

void *malloc(size_t n)
{
    record(n);
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t k)
{
    record(n * k);
    return __libc_calloc(n, k);
}

void *realloc(void *p, size_t n)
{
    record(n);
    return __libc_realloc(p, n);
}

void *aligned_alloc(size_t align, size_t n)
{
    record(n);
    return __libc_memalign(align, n);
}

int posix_memalign(void **ret, size_t align, size_t n)
{
    record(n);
    void *p = __libc_memalign(align, n);
    if (!p)
        return ENOMEM;
    *ret = p;
    return 0;
}
#endif

/* ---- fixtures ---- */

#define NP 1000

static int setup(void **state)
{
    (void)state;
    return tmp_dir_make("snapshard");
}

static void fill_meta(struct gpt_snapshot_meta *m, int64_t step, uint64_t n_params)
{
    memset(m, 0, sizeof(*m));
    m->cfg = (struct gpt_model_config){
        .n_layer = 2, .n_head = 4, .n_embd = 64, .block_size = 32, .vocab_size = 65};
    m->vocab.kind = GPT_TOK_CHAR;
    m->vocab.size = 65;
    m->step = step;
    m->cursor.position = 77;
    m->world_size = 3;
    m->sharding = GPT_SHARD_FULL;
    m->n_params = n_params;
    m->has_moments = 1;
}

static float value(int which, uint64_t i)
{
    return (float)which * 10000.0f + (float)i * 0.5f;
}

/* Rank r's pieces: two "units" [0, 400) and [400, 1000), each split
 * three ways with gpt_comm_slice (uneven). */
static uint32_t pieces_of(int r, struct gpt_snapshot_piece *out)
{
    uint64_t units[2][2] = {{0, 400}, {400, 600}};
    uint32_t n = 0;
    for (int u = 0; u < 2; u++) {
        size_t off, len;
        gpt_comm_slice(units[u][1], 3, r, &off, &len);
        out[n++] = (struct gpt_snapshot_piece){units[u][0] + off, len};
    }
    return n;
}

/* Writes a sharded snapshot of three ranks at `step`; returns its id. */
static uint64_t write_sharded(const char *dir, int64_t step, char *path, size_t cap,
                              uint64_t *ret_bytes)
{
    static struct gpt_snapshot_piece pieces[3][2];
    struct gpt_snapshot_slice slices[3];
    uint64_t id = 0x1234abcd00000000ull + (uint64_t)step;
    struct gpt_err err;
    for (int r = 0; r < 3; r++) {
        slices[r] = (struct gpt_snapshot_slice){.rank = (uint32_t)r, .pieces = pieces[r]};
        slices[r].n_pieces = pieces_of(r, pieces[r]);
        float *buf[3];
        size_t floats = pieces[r][0].len + pieces[r][1].len;
        for (int a = 0; a < 3; a++) {
            buf[a] = malloc(floats * sizeof(float));
            size_t at = 0;
            for (int i = 0; i < 2; i++)
                for (uint64_t k = 0; k < pieces[r][i].len; k++)
                    buf[a][at++] = value(a, pieces[r][i].off + k);
        }
        assert_int_equal(
            gpt_snapshot_slice_write(dir, step, id, 3, 0, buf[0], buf[1], buf[2], &slices[r], &err),
            0);
        assert_int_equal(slices[r].floats, floats);
        for (int a = 0; a < 3; a++)
            free(buf[a]);
    }
    struct gpt_snapshot_meta meta;
    fill_meta(&meta, step, NP);
    assert_int_equal(
        gpt_snapshot_manifest_write(dir, &meta, id, slices, 3, path, cap, ret_bytes, &err), 0);
    return id;
}

static void write_plain(const char *dir, int64_t step)
{
    struct gpt_snapshot_meta meta;
    struct gpt_err err;
    float p[NP], m[NP], v[NP];
    for (int i = 0; i < NP; i++) {
        p[i] = value(0, (uint64_t)i);
        m[i] = value(1, (uint64_t)i);
        v[i] = value(2, (uint64_t)i);
    }
    fill_meta(&meta, step, NP);
    assert_int_equal(gpt_snapshot_write(dir, &meta, p, m, v, NULL, 0, &err), 0);
}

static size_t count_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    size_t n = 0, k = strlen(suffix);
    struct dirent *de;
    if (!d)
        return 0;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len >= k && strcmp(de->d_name + len - k, suffix) == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* ---- tests ---- */

static void test_round_trip(void **state)
{
    (void)state;
    char dir[300], path[512];
    uint64_t bytes = 0, size = 0;
    struct gpt_err err;
    snprintf(dir, sizeof(dir), "%s/rt", tmpdir);
    write_sharded(dir, 10, path, sizeof(path), &bytes);
    assert_int_equal(count_files(dir, GPT_SNAPSHOT_SLICE_SUFFIX), 3);

    struct gpt_snapshot_meta meta;
    assert_int_equal(gpt_snapshot_read_meta(path, &meta, &err), 0);
    assert_true(meta.sliced);
    assert_int_equal(meta.step, 10);
    assert_int_equal(meta.n_params, NP);
    assert_int_equal(meta.cursor.position, 77);

    static float p[NP], m[NP], v[NP];
    assert_int_equal(gpt_snapshot_read(path, &meta, p, m, v, &err), 0);
    for (int i = 0; i < NP; i++) {
        assert_true(p[i] == value(0, (uint64_t)i));
        assert_true(m[i] == value(1, (uint64_t)i));
        assert_true(v[i] == value(2, (uint64_t)i));
    }
    assert_int_equal(gpt_snapshot_read(path, &meta, NULL, NULL, NULL, &err), 0);

    /* The size on disk is the manifest plus every slice. */
    assert_int_equal(gpt_snapshot_size(path, &size, &err), 0);
    assert_int_equal(size, bytes);
    uint64_t sum = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while ((de = readdir(d))) {
        char f[700];
        struct stat st;
        snprintf(f, sizeof(f), "%s/%s", dir, de->d_name);
        if (de->d_name[0] != '.' && stat(f, &st) == 0)
            sum += (uint64_t)st.st_size;
    }
    closedir(d);
    assert_int_equal(size, sum);

    /* Ranges across piece and slice borders. */
    struct gpt_snapshot_reader *r;
    assert_int_equal(gpt_snapshot_reader_open(path, &meta, &r, &err), 0);
    uint64_t ranges[][2] = {{0, 1000}, {130, 5}, {133, 140}, {399, 2}, {598, 300}, {999, 1}};
    for (size_t k = 0; k < sizeof(ranges) / sizeof(ranges[0]); k++)
        for (int a = 0; a < 3; a++) {
            float buf[NP];
            assert_int_equal(gpt_snapshot_reader_read(r, a, ranges[k][0], ranges[k][1], buf, &err),
                             0);
            for (uint64_t i = 0; i < ranges[k][1]; i++)
                assert_true(buf[i] == value(a, ranges[k][0] + i));
        }
    float one;
    assert_int_equal(gpt_snapshot_reader_read(r, 0, 1000, 1, &one, &err), -EINVAL);
    gpt_snapshot_reader_close(r);

    /* The same ranges from a plain file. */
    write_plain(dir, 5);
    snprintf(path, sizeof(path), "%s/snap-000000000005.gpts", dir);
    assert_int_equal(gpt_snapshot_reader_open(path, &meta, &r, &err), 0);
    float buf[300];
    assert_int_equal(gpt_snapshot_reader_read(r, 2, 598, 300, buf, &err), 0);
    for (int i = 0; i < 300; i++)
        assert_true(buf[i] == value(2, 598 + (uint64_t)i));
    gpt_snapshot_reader_close(r);

    /* gpt_snapshot_find takes the newest: the sharded one. */
    struct gpt_snapshot_find_opts fo = {.quarantine = 1};
    char found[512];
    assert_int_equal(gpt_snapshot_find(dir, &fo, found, sizeof(found), &meta, NULL, &err), 0);
    assert_int_equal(meta.step, 10);
}

static int skipped;
static char skip_msg[512];
static void on_skip(void *ctx, const char *path, const struct gpt_err *why)
{
    (void)ctx;
    (void)path;
    skipped++;
    snprintf(skip_msg, sizeof(skip_msg), "%s", why->msg);
}

/* damage: 0 remove a slice, 1 flip a bit in one, 2 truncate one, 3 replace
 * one with a slice of another snapshot id. */
static void check_damaged(int damage, const char *expect)
{
    char dir[300], path[512], slice[700];
    struct gpt_err err;
    snprintf(dir, sizeof(dir), "%s/dmg%d", tmpdir, damage);
    write_plain(dir, 10);
    uint64_t id = write_sharded(dir, 20, path, sizeof(path), NULL);
    assert_int_equal(gpt_snapshot_slice_path(dir, 20, id, 1, slice, sizeof(slice)), 0);
    if (damage == 0) {
        assert_int_equal(unlink(slice), 0);
    } else if (damage == 1 || damage == 2) {
        FILE *f = fopen(slice, "r+b");
        assert_non_null(f);
        if (damage == 1) {
            fseek(f, 200, SEEK_SET);
            int c = fgetc(f);
            fseek(f, 200, SEEK_SET);
            fputc(c ^ 0x10, f);
        }
        fclose(f);
        if (damage == 2)
            assert_int_equal(truncate(slice, 100), 0);
    } else {
        char other[700];
        assert_int_equal(gpt_snapshot_slice_path(dir, 20, id + 1, 1, other, sizeof(other)), 0);
        assert_int_equal(rename(slice, other), 0);
    }
    struct gpt_snapshot_meta meta;
    static float p[NP];
    int rc = gpt_snapshot_read(path, &meta, p, NULL, NULL, &err);
    assert_int_equal(rc, -GPT_E_CORRUPT);
    assert_non_null(strstr(err.msg, expect));

    skipped = 0;
    struct gpt_snapshot_find_opts fo = {.quarantine = 1, .skip = on_skip};
    struct gpt_snapshot_find_stats st;
    char found[512];
    assert_int_equal(gpt_snapshot_find(dir, &fo, found, sizeof(found), &meta, &st, &err), 0);
    assert_int_equal(meta.step, 10); /* the older, valid snapshot */
    assert_false(meta.sliced);
    assert_int_equal(skipped, 1);
    assert_int_equal(st.invalid, 1);
    assert_int_equal(st.quarantined, 1);
    assert_non_null(strstr(skip_msg, "quarantined"));
    assert_int_equal(access(path, F_OK), -1); /* renamed to .corrupt */
}

static void test_missing_slice(void **state)
{
    (void)state;
    check_damaged(0, "missing");
}

static void test_flipped_slice(void **state)
{
    (void)state;
    check_damaged(1, "checksum");
}

static void test_truncated_slice(void **state)
{
    (void)state;
    check_damaged(2, "bytes, the manifest says");
}

static void test_stale_slice(void **state)
{
    (void)state;
    check_damaged(3, "missing");
}

/* A manifest in memory, rewritten with its checksum fixed. */
static size_t manifest_bytes(unsigned char *buf, size_t cap)
{
    char dir[300], path[512];
    snprintf(dir, sizeof(dir), "%s/parse", tmpdir);
    write_sharded(dir, 30, path, sizeof(path), NULL);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static void put64(unsigned char *p, uint64_t x)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(x >> (8 * i));
}

static void fix_crc(unsigned char *buf, size_t n)
{
    uint32_t crc = (uint32_t)crc32(0L, buf, (uInt)(n - 4));
    for (int i = 0; i < 4; i++)
        buf[n - 4 + (size_t)i] = (unsigned char)(crc >> (8 * i));
}

static void expect_refused(const unsigned char *orig, size_t n, size_t at, uint64_t x,
                           const char *msg)
{
    unsigned char buf[4096];
    struct gpt_snapshot_meta meta;
    struct gpt_snapshot_manifest *man = NULL;
    struct gpt_err err;
    memcpy(buf, orig, n);
    put64(buf + at, x);
    fix_crc(buf, n);
    assert_int_equal(gpt_snapshot_manifest_parse(buf, n, "m", &meta, &man, &err), -GPT_E_CORRUPT);
    assert_null(man);
    assert_non_null(strstr(err.msg, msg));
}

static void test_manifest_parse(void **state)
{
    (void)state;
    unsigned char buf[4096];
    size_t n = manifest_bytes(buf, sizeof(buf));
    struct gpt_snapshot_meta meta;
    struct gpt_snapshot_manifest *man;
    struct gpt_err err;
    /* 512 header + 16 + 3 x (32 + 2 x 16) + 4 */
    assert_int_equal(n, 512 + 16 + 3 * 64 + 4);
    assert_int_equal(gpt_snapshot_manifest_parse(buf, n, "m", &meta, &man, &err), 0);
    assert_int_equal(man->n_slices, 3);
    assert_int_equal(man->slices[1].n_pieces, 2);
    assert_int_equal(man->slices[1].pieces[0].off, 134); /* 400 / 3: 134, 133, 133 */
    gpt_snapshot_manifest_free(man);

    size_t s0 = 512 + 16, piece0 = s0 + 32;           /* slice 0's first piece */
    expect_refused(buf, n, piece0, 1, "gap");         /* offset 1: gap at 0 */
    expect_refused(buf, n, piece0 + 8, 135, "sizes"); /* length != floats */
    expect_refused(buf, n, piece0, 999, "outside");   /* 999 + 134 > 1000 */
    expect_refused(buf, n, s0 + 8, 999, "sizes");     /* floats */
    expect_refused(buf, n, s0 + 16, 12, "sizes");     /* file bytes */
    expect_refused(buf, n, 512 + 8, 0, "slices");     /* no slices */
    /* Slice 1's second piece moved onto slice 0's: an overlap. */
    expect_refused(buf, n, s0 + 64 + 32 + 16, 400, "overlap or leave a gap");

    /* Checksum and truncation. */
    buf[600] ^= 1;
    assert_int_equal(gpt_snapshot_manifest_parse(buf, n, "m", &meta, &man, &err), -GPT_E_CORRUPT);
    assert_non_null(strstr(err.msg, "checksum"));
    buf[600] ^= 1;
    assert_int_equal(gpt_snapshot_manifest_parse(buf, n - 16, "m", &meta, &man, &err),
                     -GPT_E_CORRUPT);
    /* A plain snapshot is not a manifest. */
    assert_int_equal(gpt_snapshot_manifest_parse(buf, 100, "m", &meta, &man, &err), -GPT_E_CORRUPT);
}

static void test_prune_and_orphans(void **state)
{
    (void)state;
    char dir[300], path[512], orphan[700];
    struct gpt_err err;
    snprintf(dir, sizeof(dir), "%s/prune", tmpdir);
    for (int64_t step = 10; step <= 30; step += 10)
        write_sharded(dir, step, path, sizeof(path), NULL);
    assert_int_equal(count_files(dir, GPT_SNAPSHOT_SLICE_SUFFIX), 9);
    /* A writer that died before its manifest left a slice. */
    assert_int_equal(gpt_snapshot_slice_path(dir, 40, 77, 0, orphan, sizeof(orphan)), 0);
    FILE *f = fopen(orphan, "w");
    fputs("x", f);
    fclose(f);
    assert_int_equal(gpt_snapshot_prune(dir, 1, NULL, &err), 0);
    assert_int_equal(count_files(dir, GPT_SNAPSHOT_SUFFIX), 1);
    assert_int_equal(count_files(dir, GPT_SNAPSHOT_SLICE_SUFFIX), 3);
    assert_int_equal(access(orphan, F_OK), -1);
    struct gpt_snapshot_meta meta;
    assert_int_equal(gpt_snapshot_read(path, &meta, NULL, NULL, NULL, &err), 0);
    assert_int_equal(meta.step, 30);
    /* Nothing to clean now. */
    int removed = -1;
    assert_int_equal(gpt_snapshot_clean_slices(dir, NULL, &removed, &err), 0);
    assert_int_equal(removed, 0);
}

/* Source of the load path: the snapshot read by ranges. */
static int read_snap(void *ctx, int which, size_t off, size_t count, float *dst,
                     struct gpt_err *err)
{
    return gpt_snapshot_reader_read(ctx, which, off, count, dst, err);
}

/* The save and load paths of a sharded model (world 1, full sharding)
 * allocate nothing of the model's full size. */
static void test_no_full_size_buffer(void **state)
{
    (void)state;
    struct gpt_backend *be;
    struct gpt_comm *comm;
    struct gpt_shard *sh;
    struct gpt_model model;
    struct gpt_err err;
    /* About 1.9 M parameters: more than one load chunk (1 M floats). */
    struct gpt_model_config cfg = {
        .n_layer = 4, .n_head = 4, .n_embd = 192, .block_size = 16, .vocab_size = 65};
    assert_int_equal(gpt_backend_cpu_new(1, &be, &err), 0);
    assert_int_equal(gpt_comm_local_new(&comm, &err), 0);
    assert_int_equal(gpt_shard_new(GPT_SHARD_FULL, 0, comm, be, &sh, &err), 0);
    assert_int_equal(gpt_model_init_sharded(&model, &cfg, be, 1, gpt_shard_units(sh), &err), 0);
    assert_int_equal(gpt_shard_attach(sh, &model, &err), 0);
    size_t full = model.n_params * sizeof(float);
    assert_true(model.n_params > GPT_SHARD_CHUNK_FLOATS);

    /* Some state to save: params i, moments 2i and 3i (load from a plain file). */
    char dir[300], path[512], plain[512];
    snprintf(dir, sizeof(dir), "%s/model", tmpdir);
    float *p = malloc(full), *m = malloc(full), *v = malloc(full);
    for (size_t i = 0; i < model.n_params; i++) {
        p[i] = (float)i;
        m[i] = 2.0f * (float)i;
        v[i] = 3.0f * (float)i;
    }
    struct gpt_snapshot_meta meta;
    fill_meta(&meta, 1, model.n_params);
    meta.cfg = cfg;
    assert_int_equal(gpt_snapshot_write(dir, &meta, p, m, v, plain, sizeof(plain), &err), 0);
    struct gpt_snapshot_reader *r;
    assert_int_equal(gpt_snapshot_reader_open(plain, &meta, &r, &err), 0);

    largest_alloc = 0;
    recording = true;
    assert_int_equal(gpt_shard_load_stream(sh, read_snap, r, 1, &err), 0);
    recording = false;
    gpt_snapshot_reader_close(r);
    print_message("largest allocation while loading: %zu bytes (full size %zu)\n", largest_alloc,
                  full);
    /* The recorder works: the load's chunk buffers are seen. */
    if (ALLOC_RECORDER) {
        assert_true(largest_alloc >= GPT_SHARD_CHUNK_FLOATS * sizeof(float));
        assert_true(largest_alloc <= GPT_SHARD_CHUNK_FLOATS * sizeof(float) + 64);
        assert_true(largest_alloc < full);
    }

    bool shared = false;
    assert_int_equal(gpt_shard_snapshot_shared(sh, dir, &shared), 0);
    assert_true(shared);
    meta.step = 2;
    uint64_t bytes = 0;
    largest_alloc = 0;
    recording = true;
    assert_int_equal(gpt_shard_snapshot_write(sh, dir, &meta, path, sizeof(path), &bytes, &err), 0);
    recording = false;
    print_message("largest allocation while saving: %zu bytes (full size %zu)\n", largest_alloc,
                  full);
    assert_true(!ALLOC_RECORDER || largest_alloc < full / 4);

    /* What was saved is what was loaded. */
    memset(p, 0, full);
    memset(m, 0, full);
    assert_int_equal(gpt_snapshot_read(path, &meta, p, m, NULL, &err), 0);
    assert_true(meta.sliced);
    for (size_t i = 0; i < model.n_params; i += 997) {
        assert_true(p[i] == (float)i);
        assert_true(m[i] == 2.0f * (float)i);
    }
    free(p);
    free(m);
    free(v);
    gpt_model_done(&model);
    gpt_shard_free(sh);
    gpt_comm_free(comm);
    gpt_backend_free(be);
}

/* The streamed fresh weights are gpt_model_init_weights_host's, bit for
 * bit, in chunks of any size. */
static void test_init_stream(void **state)
{
    (void)state;
    struct gpt_model m;
    struct gpt_err err;
    struct gpt_model_config cfg = {
        .n_layer = 3, .n_head = 2, .n_embd = 32, .block_size = 8, .vocab_size = 50};
    assert_int_equal(gpt_model_layout(&m, &cfg, &err), 0);
    float *want = malloc(m.n_params * sizeof(float)), *got = malloc(m.n_params * sizeof(float));
    gpt_model_init_weights_host(&m, 1234, want);
    size_t chunks[] = {1, 7, 4096, 100000};
    for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
        struct gpt_shard_init s;
        memset(got, 0xff, m.n_params * sizeof(float));
        gpt_shard_init_begin(&s, &m, 1234);
        for (size_t off = 0; off < m.n_params; off += chunks[c])
            gpt_shard_init_next(&s, got + off,
                                m.n_params - off < chunks[c] ? m.n_params - off : chunks[c]);
        assert_memory_equal(got, want, m.n_params * sizeof(float));
    }
    free(want);
    free(got);
}

/* An orphan slice (no manifest names it) of `owner` at step 50, rank r. */
static void write_orphan(const char *dir, uint32_t r, uint64_t owner)
{
    struct gpt_snapshot_piece piece = {0, 4};
    struct gpt_snapshot_slice sl = {.rank = r, .pieces = &piece, .n_pieces = 1};
    float x[4] = {1, 2, 3, 4};
    struct gpt_err err;
    assert_int_equal(gpt_snapshot_slice_write(dir, 50, 99, 4, owner, x, NULL, NULL, &sl, &err), 0);
}

static bool slice_exists(const char *dir, uint32_t r)
{
    char p[700];
    assert_int_equal(gpt_snapshot_slice_path(dir, 50, 99, r, p, sizeof(p)), 0);
    return access(p, F_OK) == 0;
}

/* Cleaning orphan slices for an owner removes that owner's and those that
 * record none, never another job's (it may be writing its snapshot into
 * the same folder) nor one whose header cannot be read; without an owner,
 * every orphan goes. Pruning for an owner cleans the same way. */
static void test_clean_slices_owner(void **state)
{
    (void)state;
    char dir[300];
    struct gpt_err err;
    struct gpt_snapshot_owner mine = {.token = 0x1111, .job = 7, .uid = 1000};
    snprintf(dir, sizeof(dir), "%s/owners", tmpdir);
    for (int pass = 0; pass < 2; pass++) {
        write_orphan(dir, 0, mine.token);
        write_orphan(dir, 1, 0x2222); /* another job's */
        write_orphan(dir, 2, 0);      /* no owner recorded */
        char junk[700];
        assert_int_equal(gpt_snapshot_slice_path(dir, 50, 99, 3, junk, sizeof(junk)), 0);
        FILE *f = fopen(junk, "w");
        assert_non_null(f);
        fputs("not a slice", f);
        fclose(f);
        int removed = -1;
        if (pass == 0)
            assert_int_equal(gpt_snapshot_clean_slices(dir, &mine, &removed, &err), 0);
        else
            assert_int_equal(gpt_snapshot_prune(dir, 1, &mine, &err), 0);
        if (pass == 0)
            assert_int_equal(removed, 2);
        assert_false(slice_exists(dir, 0));
        assert_true(slice_exists(dir, 1));
        assert_false(slice_exists(dir, 2));
        assert_true(slice_exists(dir, 3));
        /* No owner: every orphan. */
        assert_int_equal(gpt_snapshot_clean_slices(dir, NULL, &removed, &err), 0);
        assert_int_equal(removed, 2);
        assert_int_equal(count_files(dir, GPT_SNAPSHOT_SLICE_SUFFIX), 0);
    }
}

/* ---- a load that fails on one rank fails on every rank ---- */

#define LOAD_WORLD 3

struct load_rank {
    struct gpt_kv *kv;
    const char *prefix, *snap; /* the world's key prefix; the snapshot rank 0 reads */
    int rank, fail;            /* fail: this rank's slice cannot be stored */
    int rc;
    struct gpt_err err;
    float first; /* rank 0, success: the first parameter after a gather */
};

static void *load_rank_main(void *arg)
{
    struct load_rank *lr = arg;
    struct gpt_backend *be = NULL;
    struct gpt_comm *comm = NULL;
    struct gpt_shard *sh = NULL;
    struct gpt_model model;
    struct gpt_snapshot_reader *r = NULL;
    struct gpt_snapshot_meta meta;
    struct gpt_model_config cfg = {
        .n_layer = 2, .n_head = 2, .n_embd = 32, .block_size = 8, .vocab_size = 65};
    struct gpt_comm_opts o = {
        .rank = lr->rank, .world = LOAD_WORLD, .prefix = lr->prefix, .timeout_ms = 10000};
    bool model_ok = false;
    memset(&model, 0, sizeof(model));
    if ((lr->rc = gpt_backend_cpu_new(1, &be, &lr->err)) < 0 ||
        (lr->rc = gpt_comm_tcp_new(&o, lr->kv, &comm, &lr->err)) < 0 ||
        (lr->rc = gpt_shard_new(GPT_SHARD_FULL, 0, comm, be, &sh, &lr->err)) < 0 ||
        (lr->rc = gpt_model_init_sharded(&model, &cfg, be, 1, gpt_shard_units(sh), &lr->err)) < 0)
        goto out;
    model_ok = true;
    if ((lr->rc = gpt_shard_attach(sh, &model, &lr->err)) < 0 ||
        (lr->rank == 0 && (lr->rc = gpt_snapshot_reader_open(lr->snap, &meta, &r, &lr->err)) < 0))
        goto out;
    if (lr->fail)
        gpt_shard_test_fail_load(sh, -EIO);
    lr->rc = gpt_shard_load_stream(sh, lr->rank == 0 ? read_snap : NULL, r, 1, &lr->err);
    if (lr->rc == 0) { /* the ranks still work together: gather what was loaded */
        float *p = malloc(model.n_params * sizeof(float));
        if (!p || (lr->rc = gpt_shard_gather_full(sh, p, NULL, NULL)) == 0)
            lr->first = p ? p[1] : 0.0f;
        free(p);
    }
out:
    gpt_snapshot_reader_close(r);
    if (model_ok)
        gpt_model_done(&model);
    gpt_shard_free(sh);
    gpt_comm_free(comm);
    gpt_backend_free(be);
    return NULL;
}

/* Three ranks (threads over the tcp/shm communicator) load a snapshot;
 * one rank (none, rank 1, rank 0) cannot store its slice. Every rank
 * returns: all succeed, or all fail, the failing rank with its own error
 * and the others with one naming it, none waiting in a collective for the
 * communicator's timeout. */
static void test_load_fails_together(void **state)
{
    (void)state;
    struct gpt_model m;
    struct gpt_err err;
    struct gpt_model_config cfg = {
        .n_layer = 2, .n_head = 2, .n_embd = 32, .block_size = 8, .vocab_size = 65};
    assert_int_equal(gpt_model_layout(&m, &cfg, &err), 0);
    float *p = malloc(m.n_params * sizeof(float));
    assert_non_null(p);
    for (size_t i = 0; i < m.n_params; i++)
        p[i] = (float)i;
    char dir[300], snap[512];
    snprintf(dir, sizeof(dir), "%s/loadfail", tmpdir);
    struct gpt_snapshot_meta meta;
    fill_meta(&meta, 5, m.n_params);
    meta.cfg = cfg;
    assert_int_equal(gpt_snapshot_write(dir, &meta, p, p, p, snap, sizeof(snap), &err), 0);
    free(p);

    const int fail_rank[] = {-1, 1, 0};
    for (size_t c = 0; c < sizeof(fail_rank) / sizeof(fail_rank[0]); c++) {
        struct gpt_kv kv;
        char prefix[64];
        struct load_rank ranks[LOAD_WORLD];
        pthread_t th[LOAD_WORLD];
        snprintf(prefix, sizeof(prefix), "loadfail/%d/%zu/", (int)getpid(), c);
        assert_int_equal(gpt_kv_mem_new(&kv, NULL), 0);
        for (int r = 0; r < LOAD_WORLD; r++) {
            ranks[r] = (struct load_rank){
                .kv = &kv, .prefix = prefix, .snap = snap, .rank = r, .fail = r == fail_rank[c]};
            assert_int_equal(pthread_create(&th[r], NULL, load_rank_main, &ranks[r]), 0);
        }
        for (int r = 0; r < LOAD_WORLD; r++)
            pthread_join(th[r], NULL);
        gpt_kv_mem_free(&kv);
        for (int r = 0; r < LOAD_WORLD; r++) {
            print_message("fail rank %d: rank %d returned %d: %s\n", fail_rank[c], r, ranks[r].rc,
                          ranks[r].rc ? ranks[r].err.msg : "ok");
            if (fail_rank[c] < 0) {
                assert_int_equal(ranks[r].rc, 0);
                continue;
            }
            assert_int_equal(ranks[r].rc, -EIO);
            char want[32];
            snprintf(want, sizeof(want), "rank %d failed", fail_rank[c]);
            if (r == fail_rank[c])
                assert_non_null(strstr(ranks[r].err.msg, "this rank's slice"));
            else
                assert_non_null(strstr(ranks[r].err.msg, want));
        }
        if (fail_rank[c] < 0)
            assert_true(ranks[0].first == 1.0f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),         cmocka_unit_test(test_missing_slice),
        cmocka_unit_test(test_flipped_slice),      cmocka_unit_test(test_truncated_slice),
        cmocka_unit_test(test_stale_slice),        cmocka_unit_test(test_manifest_parse),
        cmocka_unit_test(test_prune_and_orphans),  cmocka_unit_test(test_no_full_size_buffer),
        cmocka_unit_test(test_init_stream),        cmocka_unit_test(test_load_fails_together),
        cmocka_unit_test(test_clean_slices_owner),
    };
    return cmocka_run_group_tests(tests, setup, tmp_dir_teardown);
}
