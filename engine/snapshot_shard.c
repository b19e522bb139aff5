/*
 * snapshot_shard: sharded snapshots (see snapshot.h): each rank's slice
 * file, the manifest that commits them, and reading either kind of
 * snapshot by ranges.
 *
 * Slice file (every integer little-endian):
 *   0   magic "GPTDSLCE"                    8 bytes
 *   8   u32 version (1), u32 header length (64)
 *   16  i64 step, u64 snapshot id
 *   32  u32 rank, u32 world (slices of the snapshot)
 *   40  u64 floats (per array), u32 flags (bit 0: moments)
 *   52  u64 owner token (the writing job's, as in the manifest; 0: none
 *       recorded, as in slices written before it was)
 *   60  u32 crc32 of the header bytes before it
 *   64  params (floats), then m and v when flagged: the slice's pieces
 *       back to back, in the manifest's order
 *   end u32 crc32 of every byte before it
 *
 * Manifest: the 512-byte snapshot header (flags: sharded), then
 *   512 u64 snapshot id, u32 n_slices, u32 zero
 *       per slice: u32 rank, u32 n_pieces, u64 floats, u64 file bytes,
 *                  u32 file crc (its trailer), u32 zero,
 *                  n_pieces x (u64 offset, u64 length)
 *   end u32 crc32 of every byte before it
 * The pieces of all slices tile [0, n_params) exactly.
 *
 * Blocking I/O on the calling thread; no state shared between calls.
 */
#define _GNU_SOURCE /* mkostemp */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "snapshot.h"
#include "snapshot_impl.h"

#define SLICE_MAGIC        "GPTDSLCE"
#define SLICE_VERSION      1u
#define SLICE_HEADER_BYTES 64u
#define SLICE_OWNER_OFF    52u /* the owner token in the header */
#define MAN_SLICE_BYTES    32u /* a slice's fixed part in the table */
#define MAN_PIECE_BYTES    16u

/* ---- names ---- */

int gpt_snapshot_slice_path(const char *dir, int64_t step, uint64_t id, uint32_t rank,
                            char *ret_path, size_t cap)
{
    int k = snprintf(ret_path, cap,
                     "%s/" SNAP_PREFIX "%012" PRId64 ".%016" PRIx64
                     ".r%05" PRIu32 GPT_SNAPSHOT_SLICE_SUFFIX,
                     dir, step, id, rank);
    return k < 0 || (size_t)k >= cap ? -ENAMETOOLONG : 0;
}

/* The folder of a snapshot path ("." when it has none). */
static void snap_dirname(const char *path, char *dir, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, cap, ".");
        return;
    }
    size_t n = (size_t)(slash - path);
    if (n == 0)
        n = 1; /* "/snap-...": the root */
    snprintf(dir, cap, "%.*s", (int)n, path);
}

/* Parses "snap-<step>.<16 hex>.r<5 digits>.gptslice": 0 or -1. */
static int slice_name_parse(const char *name, int64_t *ret_step, uint64_t *ret_id)
{
    size_t pre = strlen(SNAP_PREFIX), suf = strlen(GPT_SNAPSHOT_SLICE_SUFFIX), n = strlen(name);
    if (n != pre + 12 + 1 + 16 + 2 + 5 + suf || strncmp(name, SNAP_PREFIX, pre) != 0 ||
        strcmp(name + n - suf, GPT_SNAPSHOT_SLICE_SUFFIX) != 0)
        return -1;
    const char *p = name + pre;
    int64_t step = 0;
    uint64_t id = 0;
    for (int i = 0; i < 12; i++, p++) {
        if (*p < '0' || *p > '9')
            return -1;
        step = step * 10 + (*p - '0');
    }
    if (*p++ != '.')
        return -1;
    for (int i = 0; i < 16; i++, p++) {
        int d = *p >= '0' && *p <= '9' ? *p - '0' : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        id = id << 4 | (uint64_t)d;
    }
    if (p[0] != '.' || p[1] != 'r')
        return -1;
    for (int i = 2; i < 7; i++)
        if (p[i] < '0' || p[i] > '9')
            return -1;
    *ret_step = step;
    *ret_id = id;
    return 0;
}

/* ---- slice files ---- */

static void slice_encode_header(int64_t step, uint64_t id, uint32_t rank, uint32_t world,
                                uint64_t floats, uint32_t flags, uint64_t owner, unsigned char *h)
{
    struct snap_buf b = {h, 8};
    memset(h, 0, SLICE_HEADER_BYTES);
    memcpy(h, SLICE_MAGIC, 8);
    put_u32(&b, SLICE_VERSION);
    put_u32(&b, SLICE_HEADER_BYTES);
    put_u64(&b, (uint64_t)step);
    put_u64(&b, id);
    put_u32(&b, rank);
    put_u32(&b, world);
    put_u64(&b, floats);
    put_u32(&b, flags);
    put_u64(&b, owner);
    b.off = SLICE_HEADER_BYTES - 4;
    put_u32(&b, snap_crc(0, h, SLICE_HEADER_BYTES - 4));
}

int gpt_snapshot_slice_write(const char *dir, int64_t step, uint64_t id, uint32_t world,
                             uint64_t owner, const float *params, const float *m, const float *v,
                             struct gpt_snapshot_slice *slice, struct gpt_err *err)
{
    GPT_ASSERT(dir && slice && (slice->n_pieces == 0 || slice->pieces));
    char final[GPT_JOB_PATH_MAX + 96], prefix[64];
    unsigned char header[SLICE_HEADER_BYTES];
    struct gpt_atomic_file f;
    uint64_t floats = 0;
    int rc;
    for (uint32_t i = 0; i < slice->n_pieces; i++)
        floats += slice->pieces[i].len;
    if (step < 0 || (!m) != (!v) || (floats > 0 && !params))
        return gpt_err_set(err, -EINVAL, NULL, "snapshot slice: bad step, moments or buffers");
    if (gpt_snapshot_slice_path(dir, step, id, slice->rank, final, sizeof(final)) < 0)
        return gpt_err_set(err, -ENAMETOOLONG, NULL, "snapshot directory name too long");
    snprintf(prefix, sizeof(prefix), SNAP_TMP_PREFIX "%012" PRId64 GPT_SNAPSHOT_SUFFIX ".", step);
    if ((rc = snap_mkdirs(dir)) < 0)
        return gpt_err_set(err, rc, NULL, "snapshot directory %s: %s", dir, strerror(-rc));
    /* 0600: a job's weights are its owner's alone */
    if ((rc = gpt_atomic_file_open(&f, final, prefix, 0600, err)) < 0)
        return rc;
    uint32_t crc = 0;
    size_t bytes = (size_t)floats * sizeof(float);
    slice_encode_header(step, id, slice->rank, world, floats, m ? SNAP_FLAG_MOMENTS : 0, owner,
                        header);
    rc = snap_write_all(&f, header, sizeof(header), &crc);
    const float *arrays[3] = {params, m, v};
    for (int a = 0; a < 3 && rc == 0; a++)
        if (arrays[a] && bytes > 0)
            rc = snap_write_all(&f, arrays[a], bytes, &crc);
    if (rc == 0) {
        unsigned char trailer[SNAP_TRAILER_BYTES];
        struct snap_buf b = {trailer, 0};
        put_u32(&b, crc);
        rc = snap_write_all(&f, trailer, sizeof(trailer), NULL);
    }
    if (rc < 0) {
        gpt_err_set(err, rc, NULL, "%s: write: %s", f.tmp, strerror(-rc));
        gpt_atomic_file_abort(&f);
        return rc;
    }
    if ((rc = gpt_atomic_file_commit(&f, err)) < 0)
        return snap_err_in_dir(err, rc);
    slice->floats = floats;
    slice->bytes = SLICE_HEADER_BYTES + bytes * (m ? 3 : 1) + SNAP_TRAILER_BYTES;
    slice->crc = crc;
    return 0;
}

/* Opens a slice file of `man` and checks its size and header against the
 * manifest. Returns the descriptor positioned at the data; *crc gets the
 * header's part of the file checksum. */
static int slice_open(const char *dir, const struct gpt_snapshot_meta *meta,
                      const struct gpt_snapshot_manifest *man, uint32_t s, uint32_t *ret_crc,
                      struct gpt_err *err)
{
    const struct gpt_snapshot_slice *sl = &man->slices[s];
    char path[GPT_JOB_PATH_MAX + 96];
    unsigned char h[SLICE_HEADER_BYTES];
    struct stat st;
    int rc, fd;
    if (gpt_snapshot_slice_path(dir, meta->step, man->id, sl->rank, path, sizeof(path)) < 0)
        return gpt_err_set(err, -ENAMETOOLONG, NULL, "snapshot directory name too long");
    if ((fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0) { /* a FIFO must not block */
        rc = errno == ENOENT ? -GPT_E_CORRUPT : -errno;
        return gpt_err_set(err, rc, NULL, "snapshot slice %s: %s", path,
                           errno == ENOENT ? "missing (the snapshot is incomplete)"
                                           : strerror(errno));
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL, "snapshot slice %s: not a regular file", path);
        goto fail;
    }
    if ((uint64_t)st.st_size != sl->bytes) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                         "snapshot slice %s: %" PRIu64 " bytes, the manifest says %" PRIu64, path,
                         (uint64_t)st.st_size, sl->bytes);
        goto fail;
    }
    if ((rc = snap_read_all(fd, h, sizeof(h))) < 0) {
        gpt_err_set(err, rc, NULL, "snapshot slice %s: read: %s", path, gpt_strerror(rc));
        goto fail;
    }
    struct snap_buf b = {h, 8};
    uint32_t version = get_u32(&b), hlen = get_u32(&b);
    int64_t step = (int64_t)get_u64(&b);
    uint64_t id = get_u64(&b);
    uint32_t rank = get_u32(&b), world = get_u32(&b);
    uint64_t floats = get_u64(&b);
    uint32_t flags = get_u32(&b);
    b.off = SLICE_HEADER_BYTES - 4;
    if (memcmp(h, SLICE_MAGIC, 8) != 0 || version != SLICE_VERSION || hlen != SLICE_HEADER_BYTES ||
        get_u32(&b) != snap_crc(0, h, SLICE_HEADER_BYTES - 4) || step != meta->step ||
        id != man->id || rank != sl->rank || world != man->n_slices || floats != sl->floats ||
        flags != (meta->has_moments ? SNAP_FLAG_MOMENTS : 0)) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                         "snapshot slice %s: its header does not match the manifest", path);
        goto fail;
    }
    *ret_crc = snap_crc(0, h, sizeof(h));
    return fd;
fail:
    close(fd);
    return rc;
}

int snap_manifest_read_slices(const char *path, const struct gpt_snapshot_meta *meta,
                              const struct gpt_snapshot_manifest *man, float *params, float *m,
                              float *v, struct gpt_err *err)
{
    char dir[GPT_JOB_PATH_MAX + 64];
    unsigned char *scratch = NULL;
    float *dst[3] = {params, m, v};
    int arrays = meta->has_moments ? 3 : 1, rc = 0;
    snap_dirname(path, dir, sizeof(dir));
    for (uint32_t s = 0; s < man->n_slices && rc == 0; s++) {
        const struct gpt_snapshot_slice *sl = &man->slices[s];
        uint32_t crc;
        int fd = slice_open(dir, meta, man, s, &crc, err);
        if (fd < 0) {
            rc = fd; /* the scratch of an earlier slice is freed below */
            break;
        }
        for (int a = 0; a < arrays && rc == 0; a++) {
            for (uint32_t i = 0; i < sl->n_pieces && rc == 0; i++) {
                const struct gpt_snapshot_piece *p = &sl->pieces[i];
                size_t bytes = (size_t)p->len * sizeof(float);
                if (dst[a]) {
                    if ((rc = snap_read_all(fd, dst[a] + p->off, bytes)) == 0)
                        crc = snap_crc(crc, dst[a] + p->off, bytes);
                    continue;
                }
                if (!scratch && !(scratch = malloc(SNAP_CHUNK_BYTES))) {
                    rc = -ENOMEM;
                    break;
                }
                for (size_t off = 0; off < bytes && rc == 0; off += SNAP_CHUNK_BYTES) {
                    size_t k = bytes - off < SNAP_CHUNK_BYTES ? bytes - off : SNAP_CHUNK_BYTES;
                    if ((rc = snap_read_all(fd, scratch, k)) == 0)
                        crc = snap_crc(crc, scratch, k);
                }
            }
        }
        unsigned char trailer[SNAP_TRAILER_BYTES];
        if (rc == 0 && (rc = snap_read_all(fd, trailer, sizeof(trailer))) == 0) {
            struct snap_buf b = {trailer, 0};
            uint32_t stored = get_u32(&b);
            if (stored != crc || stored != sl->crc)
                rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                                 "snapshot %s: slice of rank %" PRIu32 " fails its checksum", path,
                                 sl->rank);
        } else if (rc == -ENOMEM) {
            gpt_err_set(err, rc, NULL, "snapshot %s: out of memory", path);
        } else if (rc < 0) {
            gpt_err_set(err, rc, NULL, "snapshot %s: slice of rank %" PRIu32 ": read: %s", path,
                        sl->rank,
                        rc == -GPT_E_CORRUPT ? "file shrank while reading" : gpt_strerror(rc));
        }
        close(fd);
    }
    free(scratch);
    return rc;
}

/* ---- manifests ---- */

int gpt_snapshot_manifest_write(const char *dir, const struct gpt_snapshot_meta *meta, uint64_t id,
                                const struct gpt_snapshot_slice *slices, uint32_t n, char *ret_path,
                                size_t path_cap, uint64_t *ret_total_bytes, struct gpt_err *err)
{
    GPT_ASSERT(dir && meta && slices && n > 0);
    char final[GPT_JOB_PATH_MAX + 64], prefix[64];
    unsigned char *buf = NULL;
    size_t len = SNAP_HEADER_BYTES + 16 + SNAP_TRAILER_BYTES;
    uint64_t total = 0;
    struct gpt_atomic_file f = {.fd = -1};
    int rc;
    if (n > GPT_SNAPSHOT_SLICES_MAX)
        return gpt_err_set(err, -GPT_E_LIMIT, NULL, "snapshot: more than %d slices",
                           GPT_SNAPSHOT_SLICES_MAX);
    for (uint32_t s = 0; s < n; s++) {
        if (slices[s].n_pieces > GPT_SNAPSHOT_PIECES_MAX)
            return gpt_err_set(err, -GPT_E_LIMIT, NULL, "snapshot: a slice of more than %d pieces",
                               GPT_SNAPSHOT_PIECES_MAX);
        len += MAN_SLICE_BYTES + (size_t)slices[s].n_pieces * MAN_PIECE_BYTES;
        total += slices[s].bytes;
    }
    if (len > GPT_SNAPSHOT_MANIFEST_MAX)
        return gpt_err_set(err, -GPT_E_LIMIT, NULL, "snapshot manifest: %zu bytes is too long",
                           len);
    snprintf(final, sizeof(final), "%s/" SNAP_PREFIX "%012" PRId64 GPT_SNAPSHOT_SUFFIX, dir,
             meta->step);
    snprintf(prefix, sizeof(prefix), SNAP_TMP_PREFIX "%012" PRId64 GPT_SNAPSHOT_SUFFIX ".",
             meta->step);
    if (strlen(dir) >= GPT_JOB_PATH_MAX || (ret_path && strlen(final) >= path_cap))
        return gpt_err_set(err, -ENAMETOOLONG, NULL, "snapshot directory name too long");
    if (!(buf = calloc(1, len)))
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory for a snapshot manifest");
    snap_encode_header(meta, SNAP_FLAG_SHARDED | (meta->has_moments ? SNAP_FLAG_MOMENTS : 0), buf);
    struct snap_buf b = {buf, SNAP_HEADER_BYTES};
    put_u64(&b, id);
    put_u32(&b, n);
    put_u32(&b, 0);
    for (uint32_t s = 0; s < n; s++) {
        put_u32(&b, slices[s].rank);
        put_u32(&b, slices[s].n_pieces);
        put_u64(&b, slices[s].floats);
        put_u64(&b, slices[s].bytes);
        put_u32(&b, slices[s].crc);
        put_u32(&b, 0);
        for (uint32_t i = 0; i < slices[s].n_pieces; i++) {
            put_u64(&b, slices[s].pieces[i].off);
            put_u64(&b, slices[s].pieces[i].len);
        }
    }
    put_u32(&b, snap_crc(0, buf, len - SNAP_TRAILER_BYTES));
    GPT_ASSERT(b.off == len);
    /* What the readers will accept, checked before anything is committed. */
    struct gpt_snapshot_meta check;
    struct gpt_snapshot_manifest *man;
    if ((rc = gpt_snapshot_manifest_parse(buf, len, final, &check, &man, err)) < 0)
        goto out;
    gpt_snapshot_manifest_free(man);
    if ((rc = gpt_atomic_file_open(&f, final, prefix, 0600, err)) < 0)
        goto out;
    if ((rc = snap_write_all(&f, buf, len, NULL)) < 0) {
        gpt_err_set(err, rc, "snapshot.dir", "%s: write: %s", final, strerror(-rc));
        goto out;
    }
    if (meta->owner.token != 0) {
        /* Never replace another owner's snapshot of the same step. */
        struct gpt_snapshot_meta old;
        struct gpt_err ignored;
        if (gpt_snapshot_read_meta(final, &old, &ignored) == 0 && old.owner.token != 0 &&
            old.owner.token != meta->owner.token) {
            rc = gpt_err_set(err, -EEXIST, NULL,
                             "%s belongs to job %" PRId64 " (uid %" PRIu32 "): not overwritten",
                             final, old.owner.job, old.owner.uid);
            goto out;
        }
    }
    if ((rc = gpt_atomic_file_commit(&f, err)) < 0) {
        /* Not committed: take the manifest back, since every rank now
         * deletes its slice. */
        if (f.renamed)
            unlink(final);
        snap_err_in_dir(err, rc);
        goto out;
    }
    if (ret_path)
        snprintf(ret_path, path_cap, "%s", final);
    if (ret_total_bytes)
        *ret_total_bytes = total + len;
out:
    gpt_atomic_file_abort(&f);
    free(buf);
    return rc;
}

void gpt_snapshot_manifest_free(struct gpt_snapshot_manifest *man)
{
    if (!man)
        return;
    free(man->slices);
    free(man->pieces);
    free(man);
}

static int piece_cmp(const void *a, const void *b)
{
    const struct gpt_snapshot_piece *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Reads slice `s` of the manifest's table at b (which ends at `end`) into
 * man->slices[s], its pieces after the *n_pieces already in man->pieces.
 * Checks the slice's rank, piece count, pieces (inside meta's parameters)
 * and sizes. Returns 0 or -GPT_E_CORRUPT with err set. */
static int manifest_read_slice(struct snap_buf *b, size_t end, uint32_t s,
                               const struct gpt_snapshot_meta *meta, const char *name,
                               struct gpt_snapshot_manifest *man, size_t *n_pieces,
                               struct gpt_err *err)
{
    uint64_t arrays = meta->has_moments ? 3 : 1;
    struct gpt_snapshot_slice *sl = &man->slices[s];
    if (end - b->off < MAN_SLICE_BYTES)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "snapshot %s: slice table truncated", name);
    sl->rank = get_u32(b);
    sl->n_pieces = get_u32(b);
    sl->floats = get_u64(b);
    sl->bytes = get_u64(b);
    sl->crc = get_u32(b);
    (void)get_u32(b);
    if (sl->rank != s || sl->n_pieces > GPT_SNAPSHOT_PIECES_MAX ||
        (end - b->off) / MAN_PIECE_BYTES < sl->n_pieces)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "snapshot %s: slice %" PRIu32 ": bad rank or piece count", name, s);
    sl->pieces = man->pieces + *n_pieces;
    uint64_t sum = 0;
    for (uint32_t i = 0; i < sl->n_pieces; i++) {
        struct gpt_snapshot_piece *p = &man->pieces[(*n_pieces)++];
        p->off = get_u64(b);
        p->len = get_u64(b);
        if (p->len == 0 || p->len > meta->n_params || p->off > meta->n_params - p->len)
            return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                               "snapshot %s: slice %" PRIu32 ": a piece outside the %" PRIu64
                               " parameters",
                               name, s, meta->n_params);
        sum += p->len; /* no overflow: each <= n_params, at most 2^24 pieces */
    }
    if (sum != sl->floats || sum > meta->n_params ||
        sl->bytes != SLICE_HEADER_BYTES + sum * 4 * arrays + SNAP_TRAILER_BYTES)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "snapshot %s: slice %" PRIu32 ": sizes do not add up", name, s);
    return 0;
}

/* Exact tiling: the n pieces sorted by offset, each starts where the last
 * ended. Returns 0, -ENOMEM or -GPT_E_CORRUPT with err set. */
static int manifest_check_tiling(const struct gpt_snapshot_piece *pieces, size_t n,
                                 const char *name, struct gpt_err *err)
{
    if (n == 0)
        return 0;
    struct gpt_snapshot_piece *sorted = malloc(n * sizeof(*sorted));
    if (!sorted)
        return gpt_err_set(err, -ENOMEM, NULL, "snapshot %s: out of memory", name);
    memcpy(sorted, pieces, n * sizeof(*sorted));
    qsort(sorted, n, sizeof(*sorted), piece_cmp);
    uint64_t at = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (sorted[i].off != at)
            rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                             "snapshot %s: slices overlap or leave a gap at parameter %" PRIu64,
                             name, at);
        at += sorted[i].len;
    }
    free(sorted);
    return rc;
}

int gpt_snapshot_manifest_parse(const void *data, size_t len, const char *name,
                                struct gpt_snapshot_meta *ret_meta,
                                struct gpt_snapshot_manifest **ret, struct gpt_err *err)
{
    struct gpt_snapshot_meta meta;
    struct gpt_snapshot_manifest *man = NULL;
    size_t hlen;
    int rc = gpt_snapshot_parse_header(data, len, len, name, &meta, &hlen, err);
    if (rc < 0)
        return rc;
    if (!meta.sliced)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "snapshot %s: not a manifest", name);
    struct snap_buf b = {(unsigned char *)data, len - SNAP_TRAILER_BYTES};
    if (get_u32(&b) != snap_crc(0, data, len - SNAP_TRAILER_BYTES))
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "snapshot %s: manifest checksum mismatch",
                           name);
    size_t end = len - SNAP_TRAILER_BYTES; /* parse_header made sure hlen + 16 fits */
    b.off = hlen;
    uint64_t id = get_u64(&b);
    uint32_t n = get_u32(&b);
    (void)get_u32(&b);
    uint64_t covered = 0, total = len;
    if (n == 0 || n > GPT_SNAPSHOT_SLICES_MAX)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "snapshot %s: %" PRIu32 " slices", name, n);
    /* Each piece takes 16 bytes of the file: the table bounds the count. */
    size_t max_pieces = (end - b.off) / MAN_PIECE_BYTES, n_pieces = 0;
    if (!(man = calloc(1, sizeof(*man))) || !(man->slices = calloc(n, sizeof(*man->slices))) ||
        !(man->pieces = calloc(max_pieces ? max_pieces : 1, sizeof(*man->pieces)))) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "snapshot %s: out of memory", name);
        goto fail;
    }
    for (uint32_t s = 0; s < n; s++) {
        if ((rc = manifest_read_slice(&b, end, s, &meta, name, man, &n_pieces, err)) < 0)
            goto fail;
        covered += man->slices[s].floats;
        total += man->slices[s].bytes;
        if (covered > meta.n_params) {
            rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                             "snapshot %s: slices overlap (more than %" PRIu64 " parameters)", name,
                             meta.n_params);
            goto fail;
        }
    }
    if (b.off != end || covered != meta.n_params) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL, "snapshot %s: %s", name,
                         b.off != end ? "bytes after the slice table"
                                      : "the slices do not cover every parameter");
        goto fail;
    }
    if ((rc = manifest_check_tiling(man->pieces, n_pieces, name, err)) < 0)
        goto fail;
    man->id = id;
    man->n_slices = n;
    man->total_bytes = total;
    *ret_meta = meta;
    *ret = man;
    return 0;
fail:
    gpt_snapshot_manifest_free(man);
    return rc;
}

int snap_manifest_load(const char *path, struct gpt_snapshot_meta *ret_meta,
                       struct gpt_snapshot_manifest **ret, struct gpt_err *err)
{
    unsigned char *buf = NULL;
    struct stat st;
    int rc, fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO must not block */
    if (fd < 0) {
        rc = -errno;
        return gpt_err_set(err, rc, NULL, "snapshot %s: %s", path, strerror(-rc));
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < 0 ||
        (uint64_t)st.st_size > GPT_SNAPSHOT_MANIFEST_MAX) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL, "snapshot %s: not a manifest of sane size",
                         path);
        goto out;
    }
    size_t len = (size_t)st.st_size;
    if (!(buf = malloc(len ? len : 1))) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "snapshot %s: out of memory", path);
        goto out;
    }
    if ((rc = snap_read_all(fd, buf, len)) < 0) {
        gpt_err_set(err, rc, NULL, "snapshot %s: read: %s", path, gpt_strerror(rc));
        goto out;
    }
    rc = gpt_snapshot_manifest_parse(buf, len, path, ret_meta, ret, err);
out:
    free(buf);
    close(fd);
    return rc;
}

/* ---- orphans ---- */

/* The owner token a slice file's header records: 0 and *ret_token, or -1
 * when the header cannot be read or is not a slice header. */
static int slice_owner(int dfd, const char *name, uint64_t *ret_token)
{
    unsigned char h[SLICE_HEADER_BYTES];
    int fd = openat(dfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC), rc = -1;
    struct stat st;
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && snap_read_all(fd, h, sizeof(h)) == 0 &&
        memcmp(h, SLICE_MAGIC, 8) == 0) {
        struct snap_buf b = {h, SLICE_HEADER_BYTES - 4};
        if (get_u32(&b) == snap_crc(0, h, SLICE_HEADER_BYTES - 4)) {
            b.off = SLICE_OWNER_OFF;
            *ret_token = get_u64(&b);
            rc = 0;
        }
    }
    close(fd);
    return rc;
}

int gpt_snapshot_clean_slices(const char *dir, const struct gpt_snapshot_owner *owner,
                              int *ret_removed, struct gpt_err *err)
{
    GPT_ASSERT(dir);
    int removed = 0, rc = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (ret_removed)
            *ret_removed = 0;
        if (errno == ENOENT)
            return 0;
        rc = -errno;
        return gpt_err_set(err, rc, NULL, "snapshot directory %s: %s", dir, strerror(-rc));
    }
    /* One manifest per step name: remember the last one looked at. */
    int64_t cached_step = -1;
    uint64_t cached_id = 0;
    bool cached_ok = false;
    struct dirent *de;
    while ((de = readdir(d))) {
        int64_t step;
        uint64_t id;
        if (slice_name_parse(de->d_name, &step, &id) < 0)
            continue;
        if (step != cached_step) {
            char mp[GPT_JOB_PATH_MAX + 64];
            struct gpt_snapshot_meta meta;
            struct gpt_snapshot_manifest *man = NULL;
            struct gpt_err ignored;
            cached_step = step;
            cached_ok =
                snprintf(mp, sizeof(mp), "%s/" SNAP_PREFIX "%012" PRId64 GPT_SNAPSHOT_SUFFIX, dir,
                         step) < (int)sizeof(mp) &&
                snap_manifest_load(mp, &meta, &man, &ignored) == 0;
            cached_id = man ? man->id : 0;
            gpt_snapshot_manifest_free(man);
        }
        if (cached_ok && cached_id == id)
            continue;
        /* Another job may be writing its slices into this folder right
         * now (its manifest comes last): only slices that record our
         * owner, or none, are ours to remove. */
        uint64_t token = 0;
        if (owner && owner->token != 0 &&
            (slice_owner(dirfd(d), de->d_name, &token) < 0 ||
             (token != 0 && token != owner->token)))
            continue;
        char sp[GPT_JOB_PATH_MAX + 300];
        snprintf(sp, sizeof(sp), "%s/%s", dir, de->d_name);
        if (unlink(sp) == 0)
            removed++;
        else if (errno != ENOENT && rc == 0)
            rc = gpt_err_set(err, -errno, NULL, "%s: unlink: %s", sp, strerror(errno));
    }
    closedir(d);
    if (ret_removed)
        *ret_removed = removed;
    return rc;
}

/* ---- size ---- */

int gpt_snapshot_size(const char *path, uint64_t *ret_bytes, struct gpt_err *err)
{
    struct gpt_snapshot_meta meta;
    struct stat st;
    int rc = gpt_snapshot_read_meta(path, &meta, err);
    if (rc < 0)
        return rc;
    if (!meta.sliced) {
        if (stat(path, &st) < 0) {
            rc = -errno;
            return gpt_err_set(err, rc, NULL, "snapshot %s: %s", path, strerror(-rc));
        }
        *ret_bytes = (uint64_t)st.st_size;
        return 0;
    }
    struct gpt_snapshot_manifest *man;
    if ((rc = snap_manifest_load(path, &meta, &man, err)) < 0)
        return rc;
    *ret_bytes = man->total_bytes;
    gpt_snapshot_manifest_free(man);
    return 0;
}

/* ---- ranged reads ---- */

struct gpt_snapshot_reader {
    char path[GPT_JOB_PATH_MAX + 64];
    char dir[GPT_JOB_PATH_MAX + 64];
    struct gpt_snapshot_meta meta;
    int fd;                            /* plain: the file; sharded: the open slice */
    uint64_t hlen;                     /* plain: where the arrays start */
    struct gpt_snapshot_manifest *man; /* sharded */
    uint32_t open_slice;               /* sharded: the slice fd belongs to */
    uint64_t *piece_pos;               /* sharded: each piece's float index in its slice */
};

int gpt_snapshot_reader_open(const char *path, struct gpt_snapshot_meta *ret_meta,
                             struct gpt_snapshot_reader **ret, struct gpt_err *err)
{
    struct gpt_snapshot_reader *r = calloc(1, sizeof(*r));
    int rc;
    if (!r)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    r->fd = -1;
    r->open_slice = UINT32_MAX;
    snprintf(r->path, sizeof(r->path), "%s", path);
    snap_dirname(path, r->dir, sizeof(r->dir));
    if ((rc = gpt_snapshot_read_meta(path, &r->meta, err)) < 0)
        goto fail;
    if (r->meta.sliced) {
        if ((rc = snap_manifest_load(path, &r->meta, &r->man, err)) < 0)
            goto fail;
        size_t total = 0;
        for (uint32_t s = 0; s < r->man->n_slices; s++)
            total += r->man->slices[s].n_pieces;
        if (!(r->piece_pos = calloc(total ? total : 1, sizeof(*r->piece_pos)))) {
            rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
            goto fail;
        }
        for (uint32_t s = 0; s < r->man->n_slices; s++) {
            const struct gpt_snapshot_slice *sl = &r->man->slices[s];
            uint64_t at = 0;
            for (uint32_t i = 0; i < sl->n_pieces; i++) {
                r->piece_pos[sl->pieces + i - r->man->pieces] = at;
                at += sl->pieces[i].len;
            }
        }
    } else {
        unsigned char fixed[16];
        if ((r->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
            rc = -errno;
            gpt_err_set(err, rc, NULL, "snapshot %s: %s", path, strerror(-rc));
            goto fail;
        }
        if ((rc = snap_read_all(r->fd, fixed, sizeof(fixed))) < 0) {
            gpt_err_set(err, rc, NULL, "snapshot %s: read: %s", path, gpt_strerror(rc));
            goto fail;
        }
        struct snap_buf b = {fixed, 12};
        r->hlen = get_u32(&b); /* checked by read_meta */
    }
    *ret_meta = r->meta;
    *ret = r;
    return 0;
fail:
    gpt_snapshot_reader_close(r);
    return rc;
}

void gpt_snapshot_reader_close(struct gpt_snapshot_reader *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    gpt_snapshot_manifest_free(r->man);
    free(r->piece_pos);
    free(r);
}

static int reader_pread(struct gpt_snapshot_reader *r, void *dst, size_t bytes, uint64_t at,
                        struct gpt_err *err)
{
    unsigned char *q = dst;
    while (bytes > 0) {
        ssize_t k = pread(r->fd, q, bytes, (off_t)at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return gpt_err_set(err, k < 0 ? -errno : -GPT_E_CORRUPT, NULL, "snapshot %s: read: %s",
                               r->path, k < 0 ? strerror(errno) : "file shrank while reading");
        q += k;
        bytes -= (size_t)k;
        at += (uint64_t)k;
    }
    return 0;
}

int gpt_snapshot_reader_read(struct gpt_snapshot_reader *r, int which, uint64_t off, uint64_t count,
                             float *dst, struct gpt_err *err)
{
    const struct gpt_snapshot_meta *m = &r->meta;
    uint64_t n = m->n_params;
    if (which < 0 || which > 2 || (which > 0 && !m->has_moments) || off > n || count > n - off)
        return gpt_err_set(err, -EINVAL, NULL, "snapshot %s: no such range", r->path);
    if (!m->sliced)
        return reader_pread(r, dst, (size_t)count * 4, r->hlen + ((uint64_t)which * n + off) * 4,
                            err);
    const struct gpt_snapshot_manifest *man = r->man;
    for (uint32_t s = 0; s < man->n_slices; s++) {
        const struct gpt_snapshot_slice *sl = &man->slices[s];
        for (uint32_t i = 0; i < sl->n_pieces; i++) {
            const struct gpt_snapshot_piece *p = &sl->pieces[i];
            uint64_t a = p->off > off ? p->off : off;
            uint64_t b = p->off + p->len < off + count ? p->off + p->len : off + count;
            if (a >= b)
                continue;
            if (r->open_slice != s) {
                uint32_t ignored;
                if (r->fd >= 0)
                    close(r->fd);
                r->open_slice = UINT32_MAX;
                if ((r->fd = slice_open(r->dir, m, man, s, &ignored, err)) < 0)
                    return r->fd;
                r->open_slice = s;
            }
            uint64_t pos = r->piece_pos[p - man->pieces] + (a - p->off);
            int rc =
                reader_pread(r, dst + (a - off), (size_t)(b - a) * 4,
                             SLICE_HEADER_BYTES + ((uint64_t)which * sl->floats + pos) * 4, err);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}
