/*
 * snapshot_impl: what snapshot.c (plain files, folders, owners) and
 * snapshot_shard.c (slice files and manifests) share: the little-endian
 * field codec, the checksum, whole-buffer I/O and the file-name rules.
 * Private to the engine; no state.
 */
#ifndef GPT_SNAPSHOT_IMPL_H
#define GPT_SNAPSHOT_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

#include "gpt_atomic_file.h"
#include "snapshot.h"

#define SNAP_MAGIC         "GPTDSNAP"
#define SNAP_HEADER_BYTES  512u
#define SNAP_TRAILER_BYTES 4u
#define SNAP_FLAG_MOMENTS  1u
#define SNAP_FLAG_SHARDED  2u         /* the file is a manifest of slice files */
#define SNAP_CHUNK_BYTES   (8u << 20) /* I/O and checksum granularity */
#define SNAP_PREFIX        "snap-"
#define SNAP_TMP_PREFIX    ".snap-"

struct snap_buf {
    unsigned char *p;
    size_t off;
};

static inline void put_u32(struct snap_buf *b, uint32_t x)
{
    for (int i = 0; i < 4; i++)
        b->p[b->off++] = (unsigned char)(x >> (8 * i));
}

static inline void put_u64(struct snap_buf *b, uint64_t x)
{
    for (int i = 0; i < 8; i++)
        b->p[b->off++] = (unsigned char)(x >> (8 * i));
}

static inline uint32_t get_u32(struct snap_buf *b)
{
    uint32_t x = 0;
    for (int i = 0; i < 4; i++)
        x |= (uint32_t)b->p[b->off++] << (8 * i);
    return x;
}

static inline uint64_t get_u64(struct snap_buf *b)
{
    uint64_t x = 0;
    for (int i = 0; i < 8; i++)
        x |= (uint64_t)b->p[b->off++] << (8 * i);
    return x;
}

static inline uint32_t snap_crc(uint32_t crc, const void *p, size_t n)
{
    const unsigned char *q = p;
    while (n > 0) { /* zlib takes a uInt length */
        size_t k = n < SNAP_CHUNK_BYTES ? n : SNAP_CHUNK_BYTES;
        crc = (uint32_t)crc32(crc, q, (uInt)k);
        q += k;
        n -= k;
    }
    return crc;
}

/* The 512-byte header of a snapshot or manifest, checksum included. */
void snap_encode_header(const struct gpt_snapshot_meta *m, uint32_t flags, unsigned char *h);
/* Appends all n bytes to f (crc updated when non-NULL). 0 or -errno. */
int snap_write_all(struct gpt_atomic_file *f, const void *p, size_t n, uint32_t *crc);
/* Reads exactly n bytes; -GPT_E_CORRUPT when the file ends first. */
int snap_read_all(int fd, void *p, size_t n);
int snap_mkdirs(const char *dir);
/* Points err (which may be NULL), filled by a failed file step, at the
 * "snapshot.dir" key of the job spec; returns rc. */
int snap_err_in_dir(struct gpt_err *err, int rc);

/* ---- manifests and slices (snapshot_shard.c) ---- */

/* Verifies every slice of the manifest at `path` (already parsed into
 * man) and copies their pieces into the full buffers (NULL: skip). */
int snap_manifest_read_slices(const char *path, const struct gpt_snapshot_meta *meta,
                              const struct gpt_snapshot_manifest *man, float *params, float *m,
                              float *v, struct gpt_err *err);
/* Reads and parses the manifest at path (header already read into meta
 * by the caller's checks): returns a new manifest. */
int snap_manifest_load(const char *path, struct gpt_snapshot_meta *ret_meta,
                       struct gpt_snapshot_manifest **ret, struct gpt_err *err);

#endif
