/*
 * snapshot: the on-disk training state. One file per snapshot:
 *   header  magic "GPTDSNAP", format version, header length, model config,
 *           vocabulary, step, epoch and data cursor, RNG state, world size,
 *           sharding, parameter count, flags, tokens seen, and (version 2)
 *           the owner: the job's random token, job id, uid, and a
 *           fingerprint of the model and data identity;
 *   params  (n_params) float32 little-endian;
 *   m, v    AdamW moments (n_params each), when present;
 *   trailer checksum over everything before it.
 * Written to a temporary name, fsync'd, renamed, directory fsync'd: a file
 * under its final name is always complete. Read back with every size and
 * the checksum verified. A sharded run may write the arrays as one slice
 * file per rank and this file as their manifest (see below).
 *
 * Blocking file I/O: call from a worker thread, never from the loop.
 */
#ifndef GPT_SNAPSHOT_H
#define GPT_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "data.h"
#include "gpt_config.h"
#include "gpt_err.h"

#define GPT_SNAPSHOT_VERSION    2 /* 1 (no owner fields) is still read */
#define GPT_SNAPSHOT_SUFFIX     ".gpts"
#define GPT_SNAPSHOT_CORRUPT    ".corrupt"    /* appended to a quarantined file's name */
#define GPT_SNAPSHOT_OWNER_FILE ".gptd-owner" /* the folder's owner marker */
#define GPT_SNAPSHOT_OWNER_MAX  4096          /* a longer marker is corrupt */

/* Who a snapshot folder and its snapshots belong to. The token is random,
 * made once per daemon job (stored in its database row) or per fresh
 * `gptd run`; ids alone repeat (a new database numbers from 1 again).
 * token 0 means "no owner recorded" (a version 1 snapshot, or a folder
 * without a marker): such a snapshot counts as the folder owner's. */
struct gpt_snapshot_owner {
    uint64_t token;
    int64_t job;  /* daemon job id; 0 for `gptd run` */
    uint32_t uid; /* the submitting user */
};

struct gpt_snapshot_meta {
    uint32_t version;
    struct gpt_model_config cfg;
    struct gpt_vocab vocab;
    int64_t step; /* optimizer steps completed */
    struct gpt_data_cursor cursor;
    uint64_t rng[4]; /* trainer RNG state */
    uint64_t tokens_seen;
    int32_t world_size; /* at save time */
    int32_t sharding;   /* enum gpt_sharding at save time */
    uint64_t n_params;
    int32_t has_moments;
    struct gpt_snapshot_owner owner; /* zero in version 1 files */
    uint64_t fingerprint;            /* model and data identity; 0 in version 1 files */
    int32_t sliced;                  /* the file is a manifest: the arrays are in slice files */
};

/* Writes dir/snap-<step>.gpts atomically (creates dir if missing). m and v
 * may be NULL (then has_moments is 0). The path written goes to ret_path
 * when non-NULL. The step is zero-padded to 12 digits so names sort in
 * step order; meta->version and meta->has_moments are ignored (the file
 * gets GPT_SNAPSHOT_VERSION, and moments when m and v are given; one of
 * them alone is -EINVAL). A failed write leaves no file behind. */
int gpt_snapshot_write(const char *dir, const struct gpt_snapshot_meta *meta, const float *params,
                       const float *m, const float *v, char *ret_path, size_t path_cap,
                       struct gpt_err *err);

/* Reads and verifies a whole snapshot. params/m/v are caller buffers of
 * meta.n_params floats (NULL to skip one; the checksum is still verified;
 * m and v are left untouched when the file has no moments). Every size is
 * checked against the file size before anything is read. Returns
 * -GPT_E_CORRUPT (truncated, bad checksum, bad sizes), -GPT_E_VERSION or
 * an errno; err->msg names the file. On failure the buffers' contents are
 * undefined and ret_meta is untouched. */
int gpt_snapshot_read(const char *path, struct gpt_snapshot_meta *ret_meta, float *params, float *m,
                      float *v, struct gpt_err *err);
/* gpt_snapshot_read into buffers of `n_params` floats each: -GPT_E_MODEL,
 * before anything is read, when the file opened now holds another count
 * (it may have been replaced since the caller sized the buffers from an
 * earlier read of its header). */
int gpt_snapshot_read_sized(const char *path, uint64_t n_params, struct gpt_snapshot_meta *ret_meta,
                            float *params, float *m, float *v, struct gpt_err *err);

/* Parses and checks a snapshot header held in memory: `buf` has the first
 * `len` bytes of a file of `file_size` bytes (`name` is used in messages).
 * Checks magic, version, header length and checksum, flags, vocabulary
 * and that the sizes add up to file_size. Pure; the fuzz target's entry. */
int gpt_snapshot_parse_header(const void *buf, size_t len, uint64_t file_size, const char *name,
                              struct gpt_snapshot_meta *ret_meta, size_t *ret_hlen,
                              struct gpt_err *err);

/* Reads only the header: magic, version, the header's own checksum and
 * the file size are verified, the payload checksum is not. */
int gpt_snapshot_read_meta(const char *path, struct gpt_snapshot_meta *ret_meta,
                           struct gpt_err *err);

/* Called for each snapshot that was skipped as invalid. */
typedef void (*gpt_snapshot_skip_fn)(void *ctx, const char *path, const struct gpt_err *why);

/* Finds the newest snapshot in dir that verifies completely (each
 * candidate is read in full). Invalid newer ones are reported through skip
 * (may be NULL) with an error naming the file and the reason. -ENOENT when
 * dir is missing or none is valid. ret_path, ret_meta may be NULL. */
int gpt_snapshot_newest(const char *dir, char *ret_path, size_t path_cap,
                        struct gpt_snapshot_meta *ret_meta, gpt_snapshot_skip_fn skip, void *ctx,
                        struct gpt_err *err);

/* What gpt_snapshot_find considers and what it found. */
struct gpt_snapshot_find_opts {
    const struct gpt_snapshot_owner *owner; /* skip other owners' snapshots; NULL: take any */
    int quarantine;            /* rename corrupt files to NAME.corrupt (never read again) */
    gpt_snapshot_skip_fn skip; /* each skipped file and why; may be NULL */
    void *ctx;
};
struct gpt_snapshot_find_stats {
    size_t invalid;     /* corrupt or unreadable candidates (quarantined when asked) */
    size_t foreign;     /* valid files of another owner, skipped */
    size_t quarantined; /* NAME.corrupt files in the folder after the scan */
};

/* As gpt_snapshot_newest, with an owner filter and quarantine. ret_stats
 * (may be NULL) is filled on success and on -ENOENT. Blocks. */
int gpt_snapshot_find(const char *dir, const struct gpt_snapshot_find_opts *o, char *ret_path,
                      size_t path_cap, struct gpt_snapshot_meta *ret_meta,
                      struct gpt_snapshot_find_stats *ret_stats, struct gpt_err *err);

/* Deletes all but the newest `keep` snapshots of `owner` (keep <= 0: none
 * deleted; owner NULL or token 0: any owner). Newest means highest step
 * in the name. Each header is read (not the payload): a file whose header
 * is corrupt is quarantined (NAME.corrupt) and not counted, a file of
 * another owner is neither counted nor deleted. */
int gpt_snapshot_prune(const char *dir, int keep, const struct gpt_snapshot_owner *owner,
                       struct gpt_err *err);

/* Renames a corrupt snapshot to NAME.corrupt (NAME.2.corrupt ... when an
 * earlier quarantined file has that name: none is replaced) so that no
 * scan, resume or prune counts it again. The new name goes to ret_to (may
 * be NULL). 0 or an errno. */
int gpt_snapshot_quarantine(const char *path, char *ret_to, size_t to_cap, struct gpt_err *err);

/* Removes the temporary files of writers that died in dir: only regular
 * files named like gpt_snapshot_write's own ".snap-<step>.gpts.XXXXXX"
 * (no symlink, nothing else). *ret_removed (may be NULL) gets the count.
 * A missing dir is 0. Call only when no writer of this folder runs. */
int gpt_snapshot_clean_tmp(const char *dir, int *ret_removed, struct gpt_err *err);

/* ---- the folder's owner marker (dir/.gptd-owner) ---- */

/* Parses a marker's text (pure; the fuzz target's second entry). */
int gpt_snapshot_owner_parse(const char *buf, size_t len, struct gpt_snapshot_owner *ret,
                             struct gpt_err *err);

/* Reads dir's marker. -ENOENT when there is none. */
int gpt_snapshot_owner_load(const char *dir, struct gpt_snapshot_owner *ret, struct gpt_err *err);

/* The owner recorded in the newest snapshot of dir that records one (a
 * folder whose marker was lost). -ENOENT when none does. */
int gpt_snapshot_owner_recorded(const char *dir, struct gpt_snapshot_owner *ret,
                                struct gpt_err *err);

#define GPT_OWNER_ADOPT   1u /* a folder without a marker may hold snapshots: they become ours */
#define GPT_OWNER_DRY_RUN 2u /* check only: create neither the folder nor the marker */

/* mkdir -p: creates `dir` and its missing parents with `mode` (existing
 * ones are left as they are). 0, or -ENAMETOOLONG, or -errno of the first
 * mkdir that failed, or -ENOTDIR when `dir` exists and is not a folder.
 * Any thread; with the caller's file-system identity. */
int gpt_mkdirs(const char *dir, mode_t mode);

/* Claims dir for `me` (token != 0): creates the folder and the marker at
 * first use, or checks that the marker names me. -EEXIST (ret_found, may
 * be NULL, gets the marker's owner; token 0 when there is no marker but
 * the folder holds snapshots and GPT_OWNER_ADOPT is not given) when the
 * folder is another's. err names the folder and the owner. Blocks. */
int gpt_snapshot_owner_claim(const char *dir, const struct gpt_snapshot_owner *me, unsigned flags,
                             struct gpt_snapshot_owner *ret_found, struct gpt_err *err);

/* A fingerprint of what a snapshot's weights mean: the model shape, the
 * vocabulary and the data's identity (kind and path). Pure. */
uint64_t gpt_snapshot_fingerprint(const struct gpt_model_config *cfg, const struct gpt_vocab *vocab,
                                  const struct gpt_data_spec *data);

/* Lists snapshot file paths in dir ("snap-<digits>.gpts"), newest (highest
 * step) first. *ret_paths is a malloc'd array of malloc'd strings; free
 * with gpt_snapshot_list_free (NULL allowed). */
int gpt_snapshot_list(const char *dir, char ***ret_paths, size_t *ret_n, struct gpt_err *err);
void gpt_snapshot_list_free(char **paths, size_t n);

/* ---- sharded snapshots: one slice file per rank and a manifest ----
 *
 * Under distributed.sharding optimizer or full, when every rank sees the
 * same snapshot folder, each rank writes its own slice file
 *   snap-<step>.<id>.r<rank>.gptslice   (id: 16 hex digits, per snapshot)
 * holding its pieces of the flat parameter layout (params, then m and v),
 * and rank 0 then writes snap-<step>.gpts as a manifest: the usual header
 * with the "sharded" flag, then the slice table (each slice's pieces,
 * size and CRC-32). The manifest is written last (temporary name, fsync,
 * rename): a snapshot exists only once every slice is durable, and it is
 * valid only while every slice is present and matches its CRC.
 * gpt_snapshot_read/read_meta/find/prune accept a manifest wherever they
 * accept a plain file (reading one re-assembles the full arrays). */

#define GPT_SNAPSHOT_SLICE_SUFFIX ".gptslice"
#define GPT_SNAPSHOT_SLICES_MAX   4096        /* slices (ranks) in one manifest */
#define GPT_SNAPSHOT_PIECES_MAX   4096        /* pieces in one slice */
#define GPT_SNAPSHOT_MANIFEST_MAX (16u << 20) /* a longer manifest is corrupt */

/* A run of floats of the flat layout: [off, off + len). */
struct gpt_snapshot_piece {
    uint64_t off, len;
};

/* One rank's slice as the manifest records it. */
struct gpt_snapshot_slice {
    uint32_t rank;
    uint32_t n_pieces;
    const struct gpt_snapshot_piece *pieces; /* borrowed (manifest or caller) */
    uint64_t floats;                         /* sum of the pieces' lengths */
    uint64_t bytes;                          /* the slice file's size */
    uint32_t crc;                            /* CRC-32 of the whole slice file */
};

struct gpt_snapshot_manifest {
    uint64_t id; /* ties the slice files to this manifest */
    uint32_t n_slices;
    struct gpt_snapshot_slice *slices; /* owned */
    struct gpt_snapshot_piece *pieces; /* owned: every slice's pieces */
    uint64_t total_bytes;              /* manifest + every slice file */
};

/* The file name of a slice ("snap-<step>.<id>.r<rank>.gptslice") in dir. */
int gpt_snapshot_slice_path(const char *dir, int64_t step, uint64_t id, uint32_t rank,
                            char *ret_path, size_t cap);

/* Writes this rank's slice file atomically (temporary name, fsync,
 * rename, folder fsync). params, m, v hold slice->floats floats each (the
 * pieces back to back; m and v NULL for no moments). slice->rank, pieces
 * and n_pieces are read; floats, bytes and crc are filled. Never allocates
 * more than one I/O chunk. Blocks. */
int gpt_snapshot_slice_write(const char *dir, int64_t step, uint64_t id, uint32_t world,
                             uint64_t owner, const float *params, const float *m, const float *v,
                             struct gpt_snapshot_slice *slice, struct gpt_err *err);

/* Writes dir/snap-<step>.gpts as the manifest of `n` slices already
 * written (their pieces must tile [0, meta->n_params) exactly), last and
 * atomically. meta->has_moments says whether the slices carry moments.
 * *ret_total_bytes (may be NULL) gets the snapshot's size on disk. */
int gpt_snapshot_manifest_write(const char *dir, const struct gpt_snapshot_meta *meta, uint64_t id,
                                const struct gpt_snapshot_slice *slices, uint32_t n, char *ret_path,
                                size_t path_cap, uint64_t *ret_total_bytes, struct gpt_err *err);

/* Parses a whole manifest file held in memory (pure; the fuzz target's
 * entry): header, slice table, piece coverage, trailer checksum. Returns a
 * new manifest (free with gpt_snapshot_manifest_free) and the meta. */
int gpt_snapshot_manifest_parse(const void *buf, size_t len, const char *name,
                                struct gpt_snapshot_meta *ret_meta,
                                struct gpt_snapshot_manifest **ret, struct gpt_err *err);
void gpt_snapshot_manifest_free(struct gpt_snapshot_manifest *man);

/* Removes slice files of dir that no manifest refers to (a writer that
 * died before its manifest, or a pruned snapshot). With an owner (token
 * not 0), only slices whose header records that owner's token, or none,
 * are removed: never another job's, which may be writing its snapshot in
 * the same folder, nor a slice whose header cannot be read. Call only
 * when this owner writes no snapshot in the folder. owner and
 * *ret_removed may be NULL. */
int gpt_snapshot_clean_slices(const char *dir, const struct gpt_snapshot_owner *owner,
                              int *ret_removed, struct gpt_err *err);

/* Reads ranges of a snapshot (plain or sharded) without the whole arrays
 * in memory: for loading a sharded run. The payload checksums are not
 * verified here (gpt_snapshot_find or gpt_snapshot_read did that). */
struct gpt_snapshot_reader;
int gpt_snapshot_reader_open(const char *path, struct gpt_snapshot_meta *ret_meta,
                             struct gpt_snapshot_reader **ret, struct gpt_err *err);
/* Copies floats [off, off + count) of array `which` (0 params, 1 m, 2 v)
 * into dst. */
int gpt_snapshot_reader_read(struct gpt_snapshot_reader *r, int which, uint64_t off, uint64_t count,
                             float *dst, struct gpt_err *err);
void gpt_snapshot_reader_close(struct gpt_snapshot_reader *r);

/* The bytes a snapshot takes on disk (a manifest and its slices, or the
 * one file). */
int gpt_snapshot_size(const char *path, uint64_t *ret_bytes, struct gpt_err *err);

#endif
