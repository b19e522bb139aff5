/*
 * snapshot: the on-disk training state. One file per snapshot:
 *   header  magic "GPTDSNAP", format version, header length, model config,
 *           vocabulary, step, epoch and data cursor, RNG state, world size,
 *           sharding, parameter count, flags, tokens seen;
 *   params  (n_params) float32 little-endian;
 *   m, v    AdamW moments (n_params each), when present;
 *   trailer checksum over everything before it.
 * Written to a temporary name, fsync'd, renamed, directory fsync'd: a file
 * under its final name is always complete. Read back with every size and
 * the checksum verified.
 *
 * Blocking file I/O: call from a worker thread, never from the loop.
 */
#ifndef GPT_SNAPSHOT_H
#define GPT_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"
#include "gpt_err.h"
#include "jobspec.h"

#define GPT_SNAPSHOT_VERSION 1
#define GPT_SNAPSHOT_SUFFIX  ".gpts"

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

/* Deletes all but the newest `keep` snapshots (keep <= 0: none deleted).
 * Newest means highest step in the name; files are not verified. */
int gpt_snapshot_prune(const char *dir, int keep, struct gpt_err *err);

/* Lists snapshot file paths in dir ("snap-<digits>.gpts"), newest (highest
 * step) first. *ret_paths is a malloc'd array of malloc'd strings; free
 * with gpt_snapshot_list_free (NULL allowed). */
int gpt_snapshot_list(const char *dir, char ***ret_paths, size_t *ret_n, struct gpt_err *err);
void gpt_snapshot_list_free(char **paths, size_t n);

#endif
