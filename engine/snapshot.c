/*
 * snapshot: the snapshot file format: encoding and decoding the header,
 * writing, verifying and reading a snapshot, and the job fingerprint.
 * Finding, pruning and quarantining files and the folder's owner marker
 * are in snapshot_dir.c.
 *
 * Layout (every integer little-endian, written field by field):
 *   0    magic "GPTDSNAP"                          8 bytes
 *   8    u32 version, u32 header length (SNAP_HEADER_BYTES)
 *   16   i32 n_layer, n_head, n_embd, block_size, vocab_size
 *   36   i32 vocab kind, i32 vocab size, 256 vocab bytes
 *   300  i64 step; u64 cursor epoch, position, seed; u64 rng[4];
 *        u64 tokens_seen
 *   372  i32 world_size, i32 sharding, u64 n_params, u32 flags (bit 0:
 *        moments present)
 *   392  version 2: u64 owner token, i64 owner job, u32 owner uid,
 *        u64 fingerprint (version 1: zero padding, read as "no owner")
 *   420  u64 BPE vocabulary fingerprint (vocab kind gpt2; 0 otherwise,
 *        and in files written before it existed)
 *   428  zero padding up to header length - 4
 *   508  u32 crc32 of the header bytes before it
 *   512  params, then m and v when flagged: n_params float32 each
 *   end  u32 crc32 of every byte before it (header included)
 * The header has its own checksum so gpt_snapshot_read_meta can trust a
 * header without reading a 1.5 GB payload. A reader accepts a longer
 * header from the same version (new fields go into the padding).
 *
 * Flags bit 1 marks a manifest of a sharded snapshot: its arrays are in
 * slice files (snapshot_shard.c); read, read_meta, find and prune accept
 * one wherever they accept a plain file.
 *
 * Blocking I/O on the calling thread; no state shared between calls.
 */
#define _GNU_SOURCE /* mkostemp, O_NOFOLLOW */
#include "snapshot.h"
#include "snapshot_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define SNAP_HEADER_MAX  65536u /* a longer header is corrupt */
#define SNAP_VERSION_MIN 1u     /* the oldest format read (no owner fields) */

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "snapshot.c stores float arrays as they are in memory: add byte swapping for this host"
#endif

void snap_encode_header(const struct gpt_snapshot_meta *m, uint32_t flags, unsigned char *h)
{
    struct snap_buf b = {h, 0};
    memset(h, 0, SNAP_HEADER_BYTES);
    memcpy(h, SNAP_MAGIC, 8);
    b.off = 8;
    put_u32(&b, GPT_SNAPSHOT_VERSION);
    put_u32(&b, SNAP_HEADER_BYTES);
    put_u32(&b, (uint32_t)m->cfg.n_layer);
    put_u32(&b, (uint32_t)m->cfg.n_head);
    put_u32(&b, (uint32_t)m->cfg.n_embd);
    put_u32(&b, (uint32_t)m->cfg.block_size);
    put_u32(&b, (uint32_t)m->cfg.vocab_size);
    put_u32(&b, (uint32_t)m->vocab.kind);
    put_u32(&b, (uint32_t)m->vocab.size);
    memcpy(h + b.off, m->vocab.chars, GPT_VOCAB_MAX);
    b.off += GPT_VOCAB_MAX;
    put_u64(&b, (uint64_t)m->step);
    put_u64(&b, m->cursor.epoch);
    put_u64(&b, m->cursor.position);
    put_u64(&b, m->cursor.seed);
    for (int i = 0; i < 4; i++)
        put_u64(&b, m->rng[i]);
    put_u64(&b, m->tokens_seen);
    put_u32(&b, (uint32_t)m->world_size);
    put_u32(&b, (uint32_t)m->sharding);
    put_u64(&b, m->n_params);
    put_u32(&b, (uint32_t)flags);
    put_u64(&b, m->owner.token);
    put_u64(&b, (uint64_t)m->owner.job);
    put_u32(&b, m->owner.uid);
    put_u64(&b, m->fingerprint);
    put_u64(&b, m->vocab.bpe_fingerprint);
    GPT_ASSERT(b.off <= SNAP_HEADER_BYTES - 4);
    b.off = SNAP_HEADER_BYTES - 4;
    put_u32(&b, snap_crc(0, h, SNAP_HEADER_BYTES - 4));
}

/* Decodes fields of a header whose magic, version, length and checksum
 * were checked. Returns the flags. */
static uint32_t snap_decode_header(const unsigned char *h, struct gpt_snapshot_meta *m)
{
    struct snap_buf b = {(unsigned char *)h, 8};
    memset(m, 0, sizeof(*m));
    m->version = get_u32(&b);
    (void)get_u32(&b);
    m->cfg.n_layer = (int)get_u32(&b);
    m->cfg.n_head = (int)get_u32(&b);
    m->cfg.n_embd = (int)get_u32(&b);
    m->cfg.block_size = (int)get_u32(&b);
    m->cfg.vocab_size = (int)get_u32(&b);
    m->vocab.kind = (int)get_u32(&b);
    m->vocab.size = (int)get_u32(&b);
    memcpy(m->vocab.chars, h + b.off, GPT_VOCAB_MAX);
    b.off += GPT_VOCAB_MAX;
    m->step = (int64_t)get_u64(&b);
    m->cursor.epoch = get_u64(&b);
    m->cursor.position = get_u64(&b);
    m->cursor.seed = get_u64(&b);
    for (int i = 0; i < 4; i++)
        m->rng[i] = get_u64(&b);
    m->tokens_seen = get_u64(&b);
    m->world_size = (int32_t)get_u32(&b);
    m->sharding = (int32_t)get_u32(&b);
    m->n_params = get_u64(&b);
    uint32_t flags = get_u32(&b);
    m->has_moments = (flags & SNAP_FLAG_MOMENTS) != 0;
    m->sliced = (flags & SNAP_FLAG_SHARDED) != 0;
    if (m->version >= 2) { /* version 1 has zero padding here */
        m->owner.token = get_u64(&b);
        m->owner.job = (int64_t)get_u64(&b);
        m->owner.uid = get_u32(&b);
        m->fingerprint = get_u64(&b);
        m->vocab.bpe_fingerprint = get_u64(&b);
    }
    return flags;
}

/* ---- plain I/O -------------------------------------------------------------- */

int snap_write_all(struct gpt_atomic_file *f, const void *p, size_t n, uint32_t *crc)
{
    if (crc)
        *crc = snap_crc(*crc, p, n);
    return gpt_atomic_file_write(f, p, n, NULL);
}

/* Reads exactly n bytes; -GPT_E_CORRUPT when the file ends first. */
int snap_read_all(int fd, void *p, size_t n)
{
    unsigned char *q = p;
    while (n > 0) {
        size_t k = n < SNAP_CHUNK_BYTES ? n : SNAP_CHUNK_BYTES;
        ssize_t r = read(fd, q, k);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return -GPT_E_CORRUPT;
        q += r;
        n -= (size_t)r;
    }
    return 0;
}

int gpt_mkdirs(const char *dir, mode_t mode)
{
    char path[GPT_JOB_PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof(path))
        return -ENAMETOOLONG;
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char c = path[i];
        path[i] = '\0';
        if (mkdir(path, mode) < 0 && errno != EEXIST)
            return -errno;
        path[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) < 0)
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* mkdir -p for the job's owner only */
int snap_mkdirs(const char *dir)
{
    return gpt_mkdirs(dir, 0700);
}

int snap_err_in_dir(struct gpt_err *err, int rc)
{
    if (err)
        snprintf(err->path, sizeof(err->path), "snapshot.dir");
    return rc;
}

/* ---- write -------------------------------------------------------------- */

int gpt_snapshot_write(const char *dir, const struct gpt_snapshot_meta *meta, const float *params,
                       const float *m, const float *v, char *ret_path, size_t path_cap,
                       struct gpt_err *err)
{
    GPT_ASSERT(dir && meta && (params || meta->n_params == 0));
    char final[GPT_JOB_PATH_MAX + 64], prefix[64];
    unsigned char header[SNAP_HEADER_BYTES];
    struct gpt_atomic_file f = {.fd = -1};
    int rc;
    if (meta->step < 0 || (!m) != (!v) || meta->n_params > UINT64_MAX / 16)
        return gpt_err_set(err, -EINVAL, NULL, "snapshot: bad step, moments or parameter count");
    if (strlen(dir) >= GPT_JOB_PATH_MAX)
        return gpt_err_set(err, -ENAMETOOLONG, NULL, "snapshot directory name too long");
    snprintf(final, sizeof(final), "%s/" SNAP_PREFIX "%012" PRId64 GPT_SNAPSHOT_SUFFIX, dir,
             meta->step);
    snprintf(prefix, sizeof(prefix), SNAP_TMP_PREFIX "%012" PRId64 GPT_SNAPSHOT_SUFFIX ".",
             meta->step);
    if (ret_path && strlen(final) >= path_cap)
        return gpt_err_set(err, -ENAMETOOLONG, NULL, "%s: longer than the caller's buffer", final);
    if ((rc = snap_mkdirs(dir)) < 0)
        return gpt_err_set(err, rc, "snapshot.dir", "snapshot directory %s: %s", dir,
                           strerror(-rc));
    /* 0600: a job's weights are its owner's alone */
    if ((rc = gpt_atomic_file_open(&f, final, prefix, 0600, err)) < 0)
        return snap_err_in_dir(err, rc);
    uint32_t crc = 0;
    size_t bytes = (size_t)meta->n_params * sizeof(float);
    snap_encode_header(meta, m ? SNAP_FLAG_MOMENTS : 0, header);
    rc = snap_write_all(&f, header, sizeof(header), &crc);
    if (rc == 0)
        rc = snap_write_all(&f, params, bytes, &crc);
    if (rc == 0 && m)
        rc = snap_write_all(&f, m, bytes, &crc);
    if (rc == 0 && v)
        rc = snap_write_all(&f, v, bytes, &crc);
    if (rc == 0) {
        unsigned char trailer[SNAP_TRAILER_BYTES];
        struct snap_buf b = {trailer, 0};
        put_u32(&b, crc);
        rc = snap_write_all(&f, trailer, sizeof(trailer), NULL);
    }
    if (rc < 0) {
        gpt_err_set(err, rc, NULL, "%s: write: %s", f.tmp, strerror(-rc));
        goto fail;
    }
    if (meta->owner.token != 0) {
        /* Never replace another owner's file of the same step. */
        struct gpt_snapshot_meta old;
        struct gpt_err ignored;
        if (gpt_snapshot_read_meta(final, &old, &ignored) == 0 && old.owner.token != 0 &&
            old.owner.token != meta->owner.token) {
            rc = gpt_err_set(err, -EEXIST, NULL,
                             "%s belongs to job %" PRId64 " (uid %" PRIu32 "): not overwritten",
                             final, old.owner.job, old.owner.uid);
            goto fail;
        }
    }
    if ((rc = gpt_atomic_file_commit(&f, err)) < 0)
        return snap_err_in_dir(err, rc);
    if (ret_path)
        snprintf(ret_path, path_cap, "%s", final);
    return 0;
fail:
    gpt_atomic_file_abort(&f);
    return rc;
}

/* ---- read ----------------------------------------------------------------- */

/* Opens path and checks its header against the file size. On success *ret_fd
 * is positioned at the payload and ret_meta / *ret_hlen are filled. */
/* The length a header declares, after checking magic and version: needs
 * the first 16 bytes. */
static int snap_header_length(const unsigned char *fixed, uint64_t file_size, const char *name,
                              uint32_t *ret_hlen, struct gpt_err *err)
{
    if (memcmp(fixed, SNAP_MAGIC, 8) != 0)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "snapshot %s: bad magic (not a gptd snapshot)", name);
    struct snap_buf b = {(unsigned char *)fixed, 8};
    uint32_t version = get_u32(&b), hlen = get_u32(&b);
    if (version < SNAP_VERSION_MIN || version > GPT_SNAPSHOT_VERSION)
        return gpt_err_set(err, -GPT_E_VERSION, NULL,
                           "snapshot %s: format version %" PRIu32
                           ", this build reads versions %u to %d",
                           name, version, SNAP_VERSION_MIN, GPT_SNAPSHOT_VERSION);
    if (hlen < SNAP_HEADER_BYTES || hlen > SNAP_HEADER_MAX)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "snapshot %s: impossible header length %" PRIu32, name, hlen);
    if ((uint64_t)hlen + SNAP_TRAILER_BYTES > file_size)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "snapshot %s: truncated (%" PRIu64 " bytes, the header alone is %" PRIu32
                           ")",
                           name, file_size, hlen);
    *ret_hlen = hlen;
    return 0;
}

int gpt_snapshot_parse_header(const void *buf, size_t len, uint64_t file_size, const char *name,
                              struct gpt_snapshot_meta *ret_meta, size_t *ret_hlen,
                              struct gpt_err *err)
{
    const unsigned char *h = buf;
    struct gpt_snapshot_meta meta;
    uint32_t hlen;
    int rc;
    if (len < 16 || file_size < 16)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "snapshot %s: truncated (%" PRIu64 " bytes)",
                           name, file_size);
    if ((rc = snap_header_length(h, file_size, name, &hlen, err)) < 0)
        return rc;
    if (len < hlen)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "snapshot %s: truncated header (%zu of %" PRIu32 " bytes)", name, len,
                           hlen);
    struct snap_buf b = {(unsigned char *)h, hlen - 4};
    uint32_t hcrc = get_u32(&b);
    if (hcrc != snap_crc(0, h, hlen - 4))
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "snapshot %s: header checksum mismatch",
                           name);
    uint32_t flags = snap_decode_header(h, &meta);
    if (flags & ~(SNAP_FLAG_MOMENTS | SNAP_FLAG_SHARDED))
        return gpt_err_set(err, -GPT_E_VERSION, NULL,
                           "snapshot %s: unknown feature flags 0x%" PRIx32, name, flags);
    if (meta.vocab.kind >= 0 &&
        (meta.vocab.size < 0 ||
         meta.vocab.size > (meta.vocab.kind == GPT_TOK_GPT2 ? 65536 : GPT_VOCAB_MAX)))
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "snapshot %s: vocabulary size %d", name,
                           meta.vocab.size);
    if (meta.sliced) { /* a manifest: its table is checked by gpt_snapshot_manifest_parse */
        /* No file size bounds a manifest's parameter count: cap it, so a
         * piece table's sums (and a reader's n x 4 bytes) cannot wrap. */
        if (meta.n_params == 0 || meta.n_params > GPT_JOB_GEMM_MAX)
            return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                               "snapshot %s: a manifest of %" PRIu64 " parameters is impossible",
                               name, meta.n_params);
        if (file_size > GPT_SNAPSHOT_MANIFEST_MAX || file_size < hlen + 16 + SNAP_TRAILER_BYTES)
            return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                               "snapshot %s: a manifest of %" PRIu64 " bytes is impossible", name,
                               file_size);
        *ret_meta = meta;
        *ret_hlen = hlen;
        return 0;
    }
    /* Sizes: header + arrays + trailer must be the file size exactly. */
    uint64_t arrays = meta.has_moments ? 3 : 1, payload = file_size - hlen - SNAP_TRAILER_BYTES;
    if (meta.n_params > payload / 4 / arrays || meta.n_params * 4 * arrays != payload)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "snapshot %s: %s: %" PRIu64 " bytes, but %" PRIu64
                           " parameters%s need %" PRIu64,
                           name, meta.n_params > payload / 4 / arrays ? "truncated" : "bad size",
                           file_size, meta.n_params, meta.has_moments ? " with moments" : "",
                           meta.n_params > payload / 4 / arrays
                               ? 0
                               : hlen + SNAP_TRAILER_BYTES + meta.n_params * 4 * arrays);
    *ret_meta = meta;
    *ret_hlen = hlen;
    return 0;
}

static int snap_open(const char *path, struct gpt_snapshot_meta *ret_meta, int *ret_fd,
                     uint32_t *ret_crc, struct gpt_err *err)
{
    unsigned char fixed[16], *h = NULL;
    struct gpt_snapshot_meta meta;
    struct stat st;
    uint32_t hlen;
    size_t parsed_hlen;
    /* O_NONBLOCK: a FIFO in its place must not block the caller (the
     * daemon's loop reads snapshots for --resume-from); not a regular file
     * is refused below. */
    int rc, fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        return gpt_err_set(err, rc, NULL, "snapshot %s: %s", path, strerror(-rc));
    }
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        gpt_err_set(err, rc, NULL, "snapshot %s: %s", path, strerror(-rc));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL, "snapshot %s: not a regular file", path);
        goto fail;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < sizeof(fixed)) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL, "snapshot %s: truncated (%" PRIu64 " bytes)",
                         path, size);
        goto fail;
    }
    if ((rc = snap_read_all(fd, fixed, sizeof(fixed))) < 0) {
        gpt_err_set(err, rc, NULL, "snapshot %s: read: %s", path, gpt_strerror(rc));
        goto fail;
    }
    /* Magic, version and length first: the length bounds the allocation. */
    if ((rc = snap_header_length(fixed, size, path, &hlen, err)) < 0)
        goto fail;
    if (!(h = malloc(hlen))) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "snapshot %s: out of memory", path);
        goto fail;
    }
    memcpy(h, fixed, sizeof(fixed));
    if ((rc = snap_read_all(fd, h + sizeof(fixed), hlen - sizeof(fixed))) < 0) {
        gpt_err_set(err, rc, NULL, "snapshot %s: read: %s", path, gpt_strerror(rc));
        goto fail;
    }
    if ((rc = gpt_snapshot_parse_header(h, hlen, size, path, &meta, &parsed_hlen, err)) < 0)
        goto fail;
    if (ret_crc)
        *ret_crc = snap_crc(0, h, hlen);
    free(h);
    *ret_meta = meta;
    *ret_fd = fd;
    return 0;
fail:
    free(h);
    close(fd);
    return rc;
}

int gpt_snapshot_read_meta(const char *path, struct gpt_snapshot_meta *ret_meta,
                           struct gpt_err *err)
{
    GPT_ASSERT(path && ret_meta);
    int fd;
    struct gpt_snapshot_meta meta;
    int rc = snap_open(path, &meta, &fd, NULL, err);
    if (rc < 0)
        return rc;
    close(fd);
    if (meta.sliced) { /* the slice table too (small); not the slices' contents */
        struct gpt_snapshot_manifest *man;
        if ((rc = snap_manifest_load(path, &meta, &man, err)) < 0)
            return rc;
        gpt_snapshot_manifest_free(man);
    }
    *ret_meta = meta;
    return 0;
}

int gpt_snapshot_read(const char *path, struct gpt_snapshot_meta *ret_meta, float *params, float *m,
                      float *v, struct gpt_err *err)
{
    return gpt_snapshot_read_sized(path, 0, ret_meta, params, m, v, err);
}

/* n_params 0: the caller's buffers fit whatever the file holds (it sized
 * them from this very header, or passes none). */
int gpt_snapshot_read_sized(const char *path, uint64_t n_params, struct gpt_snapshot_meta *ret_meta,
                            float *params, float *m, float *v, struct gpt_err *err)
{
    GPT_ASSERT(path && ret_meta);
    struct gpt_snapshot_meta meta;
    uint32_t crc;
    int fd, rc = snap_open(path, &meta, &fd, &crc, err);
    if (rc < 0)
        return rc;
    if (n_params != 0 && meta.n_params != n_params) {
        close(fd);
        return gpt_err_set(err, -GPT_E_MODEL, NULL,
                           "snapshot %s: %" PRIu64 " parameters where %" PRIu64
                           " were expected (the file changed while it was read?)",
                           path, meta.n_params, n_params);
    }
    if (meta.sliced) {
        struct gpt_snapshot_manifest *man;
        close(fd);
        if ((rc = snap_manifest_load(path, &meta, &man, err)) < 0)
            return rc;
        rc = snap_manifest_read_slices(path, &meta, man, params, meta.has_moments ? m : NULL,
                                       meta.has_moments ? v : NULL, err);
        gpt_snapshot_manifest_free(man);
        if (rc == 0)
            *ret_meta = meta;
        return rc;
    }
    unsigned char *scratch = NULL;
    size_t bytes = (size_t)meta.n_params * sizeof(float);
    float *dst[3] = {params, meta.has_moments ? m : NULL, meta.has_moments ? v : NULL};
    for (int a = 0; a < (meta.has_moments ? 3 : 1); a++) {
        if (dst[a]) {
            if ((rc = snap_read_all(fd, dst[a], bytes)) < 0)
                goto io;
            crc = snap_crc(crc, dst[a], bytes);
            continue;
        }
        /* Skipped array: still read through it for the checksum. */
        if (!scratch && !(scratch = malloc(SNAP_CHUNK_BYTES))) {
            rc = gpt_err_set(err, -ENOMEM, NULL, "snapshot %s: out of memory", path);
            goto out;
        }
        for (size_t off = 0; off < bytes; off += SNAP_CHUNK_BYTES) {
            size_t k = bytes - off < SNAP_CHUNK_BYTES ? bytes - off : SNAP_CHUNK_BYTES;
            if ((rc = snap_read_all(fd, scratch, k)) < 0)
                goto io;
            crc = snap_crc(crc, scratch, k);
        }
    }
    unsigned char trailer[SNAP_TRAILER_BYTES];
    if ((rc = snap_read_all(fd, trailer, sizeof(trailer))) < 0)
        goto io;
    struct snap_buf b = {trailer, 0};
    if (get_u32(&b) != crc) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL, "snapshot %s: checksum mismatch", path);
        goto out;
    }
    *ret_meta = meta;
    goto out;
io:
    /* The size was checked, so running short means the file changed under us. */
    gpt_err_set(err, rc, NULL, "snapshot %s: read: %s", path,
                rc == -GPT_E_CORRUPT ? "file shrank while reading" : gpt_strerror(rc));
out:
    free(scratch);
    close(fd);
    return rc;
}

/* FNV-1a, 64 bits. */
static uint64_t snap_fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *q = p;
    for (size_t i = 0; i < n; i++) {
        h ^= q[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t gpt_snapshot_fingerprint(const struct gpt_model_config *cfg, const struct gpt_vocab *vocab,
                                  const struct gpt_data_spec *data)
{
    uint64_t h = 0xcbf29ce484222325ull;
    int32_t shape[5] = {cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->block_size, cfg->vocab_size};
    int32_t v[2] = {vocab->kind, vocab->size};
    h = snap_fnv(h, shape, sizeof(shape));
    h = snap_fnv(h, v, sizeof(v));
    h = snap_fnv(h, vocab->chars,
                 vocab->size > 0 && vocab->size <= GPT_VOCAB_MAX ? (size_t)vocab->size : 0);
    if (vocab->bpe_fingerprint) /* absent before gpt2 jobs: older fingerprints stay valid */
        h = snap_fnv(h, &vocab->bpe_fingerprint, sizeof(vocab->bpe_fingerprint));
    if (data) {
        int32_t kind = data->kind;
        h = snap_fnv(h, &kind, sizeof(kind));
        h = snap_fnv(h, data->path, strnlen(data->path, sizeof(data->path)));
        h = snap_fnv(h, data->task, strnlen(data->task, sizeof(data->task)));
    }
    return h ? h : 1; /* 0 means "not recorded" */
}
