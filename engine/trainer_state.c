/*
 * trainer_state: the trainer's start state and its snapshots (see
 * trainer_impl.h). Rank 0 initialises the weights or resumes from a
 * snapshot and every rank receives the same state (sharded runs stream
 * it, each rank keeping its slices); snapshots are written with the
 * folder's owner stamped in, and pruned. Runs on the worker thread.
 */
#include "trainer_impl.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend.h"
#include "data.h"
#include "model.h"
#include "rng.h"
#include "shard.h"
#include "snapshot.h"

/* ---- snapshots ---- */

static bool snapshot_writer(const struct trainer *t)
{
    return (t->opts->write_snapshots ? true : t->rank == 0) && t->snapdir[0];
}

/* The folder's owner (its marker, written by whoever started the job: the
 * daemon or `gptd run`) stamps every snapshot written and filters what a
 * resume and pruning see. A writer removes the temporary files of writers
 * that died here before it writes its own. */
int trainer_state_snapdir_prepare(struct trainer *t, struct gpt_err *err)
{
    struct gpt_err lerr;
    memset(&t->owner, 0, sizeof(t->owner));
    if (!t->snapdir[0])
        return 0;
    int rc = gpt_snapshot_owner_load(t->snapdir, &t->owner, &lerr);
    if (rc < 0 && rc != -ENOENT && rc != -ENOTDIR)
        return gpt_err_set(err, rc, "snapshot.dir", "%s", lerr.msg);
    if (rc < 0)
        memset(&t->owner, 0, sizeof(t->owner));
    int removed = 0;
    if (snapshot_writer(t) && gpt_snapshot_clean_tmp(t->snapdir, &removed, &lerr) == 0 &&
        removed > 0)
        emit_event(t, "snapshot_tmp", "removed %d stale temporary snapshot file%s from %s", removed,
                   removed == 1 ? "" : "s", t->snapdir);
    return 0;
}

static void fill_meta(const struct trainer *t, struct gpt_snapshot_meta *meta)
{
    memset(meta, 0, sizeof(*meta));
    meta->version = GPT_SNAPSHOT_VERSION;
    meta->cfg = t->model.cfg;
    meta->vocab = *gpt_dataset_vocab(t->ds);
    meta->step = t->st.step;
    meta->cursor = t->st.cursor;
    memcpy(meta->rng, t->rng.s, sizeof(meta->rng));
    meta->tokens_seen = t->st.tokens;
    meta->world_size = t->world;
    meta->sharding = t->job->distributed.sharding;
    meta->n_params = t->model.n_params;
    meta->has_moments = 1;
    meta->owner = t->owner;
    meta->fingerprint =
        gpt_snapshot_fingerprint(&t->model.cfg, gpt_dataset_vocab(t->ds), &t->job->data);
}

/* Full-size state buffers for sharded runs, which keep only slices: used
 * while a snapshot is gathered or the start state is scattered. */
struct full_state {
    float *params, *m, *v;
};

static int full_state_alloc(struct trainer *t, struct full_state *fs, struct gpt_err *err)
{
    size_t bytes = t->model.n_params * sizeof(float);
    memset(fs, 0, sizeof(*fs));
    if (gpt_backend_alloc(t->be, bytes, (void **)&fs->params) < 0 ||
        gpt_backend_alloc(t->be, bytes, (void **)&fs->m) < 0 ||
        gpt_backend_alloc(t->be, bytes, (void **)&fs->v) < 0)
        return gpt_err_set(err, -ENOMEM, NULL,
                           "out of memory for the full training state (%zu parameters)",
                           t->model.n_params);
    return 0;
}

static void full_state_free(struct trainer *t, struct full_state *fs)
{
    gpt_backend_mem_free(t->be, fs->params);
    gpt_backend_mem_free(t->be, fs->m);
    gpt_backend_mem_free(t->be, fs->v);
}

/* The snapshot file's reader and writer take host memory: on a backend
 * whose buffers are device memory the state passes through one host copy
 * of all three arrays (host->params NULL when the backend's own buffers
 * serve). */
static int host_state_alloc(struct trainer *t, struct full_state *host, struct gpt_err *err)
{
    size_t n = t->model.n_params;
    memset(host, 0, sizeof(*host));
    if (!gpt_backend_device_memory(t->be))
        return 0;
    float *all = n <= SIZE_MAX / (3 * sizeof(float)) ? malloc(3 * n * sizeof(float)) : NULL;
    if (!all)
        return gpt_err_set(err, -ENOMEM, NULL,
                           "out of host memory for a copy of the training state (%zu parameters)",
                           n);
    *host = (struct full_state){all, all + n, all + 2 * n};
    return 0;
}

/* Device -> host (to_host) or host -> device, for the arrays present in
 * src (m and v may be NULL). */
static int host_state_copy(struct trainer *t, const struct full_state *dev,
                           const struct full_state *host, bool to_host, bool moments)
{
    size_t bytes = t->model.n_params * sizeof(float);
    float *const d[3] = {dev->params, dev->m, dev->v}, *const h[3] = {host->params, host->m,
                                                                      host->v};
    for (int i = 0; i < (moments ? 3 : 1); i++) {
        int rc = to_host ? gpt_backend_download(t->be, h[i], d[i], bytes)
                         : gpt_backend_upload(t->be, d[i], h[i], bytes);
        if (rc < 0)
            return rc;
    }
    return to_host ? 0 : gpt_backend_sync(t->be);
}

/* A sharded snapshot: each rank writes its slice into the folder all
 * ranks share, rank 0 the manifest (no full-size copy on any rank). */
static int write_snapshot_sharded(struct trainer *t, struct gpt_err *err)
{
    struct gpt_snapshot_meta meta;
    char path[1024];
    uint64_t bytes = 0;
    fill_meta(t, &meta);
    double t0 = monotime_s();
    int rc = gpt_shard_snapshot_write(t->shard, t->snapdir, &meta, path, sizeof(path), &bytes, err);
    if (rc < 0 || t->rank != 0)
        return rc;
    snprintf(t->result->last_snapshot, sizeof(t->result->last_snapshot), "%s", path);
    emit_event(t, "snapshot", "step %lld written to %s in %.0f ms (%llu bytes, %d slices)",
               (long long)t->st.step, path, (monotime_s() - t0) * 1e3, (unsigned long long)bytes,
               t->world);
    if (t->job->snapshot.keep > 0) {
        struct gpt_err perr;
        (void)gpt_snapshot_prune(t->snapdir, t->job->snapshot.keep, &t->owner, &perr);
    } else {
        struct gpt_err cerr;
        (void)gpt_snapshot_clean_slices(t->snapdir, &t->owner, NULL, &cerr);
    }
    return 0;
}

/* Writes a snapshot. Under sharding every rank first takes part in
 * gathering the full state (each node then holds a complete copy, so any
 * node can resume the job at any world size; the cost is three full-size
 * buffers while the snapshot is taken). */
int trainer_state_snapshot_write(struct trainer *t, struct gpt_err *err)
{
    bool writer = snapshot_writer(t), shared = false;
    struct full_state fs = {t->model.params, t->model.m, t->model.v}, host = {0};
    int rc = 0;
    if (t->shard && (rc = gpt_shard_snapshot_shared(t->shard, t->snapdir, &shared)) < 0)
        return gpt_err_set(err, rc, NULL, "snapshot: probing the folder failed: %s",
                           gpt_strerror(rc));
    if (shared)
        return write_snapshot_sharded(t, err);
    if (t->shard) {
        if ((rc = full_state_alloc(t, &fs, err)) < 0)
            goto out;
        if ((rc = gpt_shard_gather_full(t->shard, fs.params, fs.m, fs.v)) < 0) {
            rc = gpt_err_set(err, rc, NULL, "gathering the sharded state failed: %s",
                             gpt_strerror(rc));
            goto out;
        }
    }
    if (!writer)
        goto out;
    struct gpt_snapshot_meta meta;
    fill_meta(t, &meta);
    char path[1024];
    double t0 = monotime_s();
    if ((rc = host_state_alloc(t, &host, err)) < 0)
        goto out;
    if (host.params && (rc = host_state_copy(t, &fs, &host, true, true)) < 0) {
        rc = gpt_err_set(err, rc, NULL, "snapshot: copying the state from the device failed: %s",
                         gpt_strerror(rc));
        goto out;
    }
    rc = gpt_snapshot_write(t->snapdir, &meta, host.params ? host.params : fs.params,
                            host.params ? host.m : fs.m, host.params ? host.v : fs.v, path,
                            sizeof(path), err);
    if (rc < 0)
        goto out;
    snprintf(t->result->last_snapshot, sizeof(t->result->last_snapshot), "%s", path);
    /* The size travels in the event: a coordinator cannot stat a file
     * written on another node (daemon/jobs/jobs.c reads it back). */
    double ms = (monotime_s() - t0) * 1e3;
    struct stat st;
    if (stat(path, &st) == 0)
        emit_event(t, "snapshot", "step %lld written to %s in %.0f ms (%lld bytes)",
                   (long long)t->st.step, path, ms, (long long)st.st_size);
    else
        emit_event(t, "snapshot", "step %lld written to %s in %.0f ms", (long long)t->st.step, path,
                   ms);
    if (t->job->snapshot.keep > 0) {
        struct gpt_err perr;
        (void)gpt_snapshot_prune(t->snapdir, t->job->snapshot.keep, &t->owner, &perr);
    }
out:
    free(host.params);
    if (t->shard)
        full_state_free(t, &fs);
    return rc;
}

static void report_skipped(void *ctx, const char *path, const struct gpt_err *why)
{
    struct trainer *t = ctx;
    emit_event(t, "snapshot_invalid", "skipped %s: %s", path, why->msg);
}

/* Rank 0 loads the snapshot to resume from (if any) into fs; with fs
 * NULL (sharded runs) it only verifies it and names it in ret_path
 * ("" when there is none), and the caller streams the arrays. */
static int load_snapshot(struct trainer *t, const struct full_state *fs, char *ret_path,
                         struct gpt_err *err)
{
    char path[1024];
    struct gpt_snapshot_meta meta;
    int rc;

    if (t->opts->resume_path) {
        snprintf(path, sizeof(path), "%s", t->opts->resume_path);
        rc = gpt_snapshot_read_meta(path, &meta, err);
        if (rc < 0)
            return rc;
    } else {
        if (!t->snapdir[0])
            return 0;
        struct gpt_snapshot_find_opts fo = {
            .owner = &t->owner, .quarantine = 1, .skip = report_skipped, .ctx = t};
        struct gpt_snapshot_find_stats fs_stats;
        rc = gpt_snapshot_find(t->snapdir, &fo, path, sizeof(path), &meta, &fs_stats, err);
        if (rc == -ENOENT) {
            size_t bad = fs_stats.invalid + fs_stats.foreign + fs_stats.quarantined;
            /* An empty folder is a first start; a folder whose snapshots
             * are all unusable is not, and starting over silently would
             * throw the job's progress away. */
            if (bad > 0 && t->opts->resume != GPT_RESUME_START_OVER)
                return gpt_err_set(
                    err, -GPT_E_CORRUPT, "snapshot.dir",
                    "no valid snapshot to resume from in %s: %zu invalid, %zu of "
                    "another job, %zu quarantined (*" GPT_SNAPSHOT_SUFFIX GPT_SNAPSHOT_CORRUPT
                    "); start over from step 0 only on "
                    "request (gptd run --start-over, or snapshot.on_invalid=restart)",
                    t->snapdir, fs_stats.invalid, fs_stats.foreign, fs_stats.quarantined);
            if (bad > 0)
                emit_event(t, "start_over",
                           "no valid snapshot in %s (%zu invalid, %zu quarantined): starting over "
                           "from step 0 as asked",
                           t->snapdir, fs_stats.invalid, fs_stats.quarantined);
            gpt_err_clear(err);
            return 0;
        }
        if (rc < 0)
            return rc;
    }
    const struct gpt_model_config *mc = &t->model.cfg;
    if (meta.cfg.n_layer != mc->n_layer || meta.cfg.n_head != mc->n_head ||
        meta.cfg.n_embd != mc->n_embd || meta.cfg.block_size != mc->block_size ||
        meta.cfg.vocab_size != mc->vocab_size || meta.n_params != t->model.n_params)
        return gpt_err_set(err, -GPT_E_MODEL, "model",
                           "snapshot %s was taken with a different model (%d layers, %d heads, "
                           "%d wide, block %d, vocab %d)",
                           path, meta.cfg.n_layer, meta.cfg.n_head, meta.cfg.n_embd,
                           meta.cfg.block_size, meta.cfg.vocab_size);
    const struct gpt_vocab *dv = gpt_dataset_vocab(t->ds);
    if (meta.vocab.kind != dv->kind || meta.vocab.size != dv->size ||
        meta.vocab.bpe_fingerprint != dv->bpe_fingerprint ||
        memcmp(meta.vocab.chars, dv->chars,
               (size_t)dv->size < sizeof(dv->chars) ? (size_t)dv->size : sizeof(dv->chars)))
        return gpt_err_set(err, -GPT_E_MODEL, "data",
                           "snapshot %s was taken with a different vocabulary than data.path now "
                           "gives",
                           path);
    /* Found in the folder (not named by the user): its data must be this job's too. */
    if (!t->opts->resume_path && meta.fingerprint != 0 &&
        meta.fingerprint != gpt_snapshot_fingerprint(&t->model.cfg, dv, &t->job->data))
        return gpt_err_set(err, -GPT_E_MODEL, "data",
                           "snapshot %s was taken with other data (data.kind, data.path or "
                           "data.task differ)",
                           path);
    if (fs) {
        struct full_state host;
        if ((rc = host_state_alloc(t, &host, err)) < 0)
            return rc;
        const struct full_state *to = host.params ? &host : fs;
        rc = gpt_snapshot_read_sized(path, meta.n_params, &meta, to->params,
                                     meta.has_moments ? to->m : NULL,
                                     meta.has_moments ? to->v : NULL, err);
        if (rc >= 0 && host.params &&
            (rc = host_state_copy(t, fs, &host, false, meta.has_moments)) < 0)
            rc = gpt_err_set(err, rc, NULL, "copying snapshot %s to the device failed: %s", path,
                             gpt_strerror(rc));
        free(host.params);
    } else if (t->opts->resume_path) /* found in the folder: verified by gpt_snapshot_find */
        rc = gpt_snapshot_read(path, &meta, NULL, NULL, NULL, err);
    if (rc < 0)
        return rc;
    if (ret_path)
        snprintf(ret_path, 1024, "%s", path);
    t->st.step = meta.step;
    t->st.cursor = meta.cursor;
    memcpy(t->st.rng, meta.rng, sizeof(t->st.rng));
    t->st.tokens = meta.tokens_seen;
    t->st.resumed = 1;
    snprintf(t->result->last_snapshot, sizeof(t->result->last_snapshot), "%s", path);
    emit_event(t, "resume", "resumed from %s at step %lld (saved at world size %d, now %d)", path,
               (long long)meta.step, meta.world_size, t->world);
    return 0;
}

/* Rank 0's source of a sharded run's start state: a snapshot read by
 * ranges, or the fresh weights (moments zero). */
struct start_source {
    struct gpt_snapshot_reader *snap;
    struct gpt_shard_init *init; /* fresh weights, streamed */
    const float *host;           /* fresh weights (n_params) changed by init_from */
};

static int start_source_read(void *ctx, int which, size_t off, size_t count, float *dst,
                             struct gpt_err *err)
{
    struct start_source *src = ctx;
    if (src->snap)
        return gpt_snapshot_reader_read(src->snap, which, off, count, dst, err);
    if (which == 0 && src->init)
        gpt_shard_init_next(src->init, dst, count); /* chunks come in order */
    else if (which == 0)
        memcpy(dst, src->host + off, count * sizeof(float));
    else
        memset(dst, 0, count * sizeof(float));
    return 0;
}

/* init_state of a sharded run: rank 0 finds the start state and streams
 * it in chunks; each rank keeps its slices, so no rank holds a full-size
 * copy (but rank 0 under model.init_from: one parameter-sized host
 * array), whatever world size and mode the snapshot was taken at. */
static int init_state_sharded(struct trainer *t, struct gpt_err *err)
{
    struct gpt_shard_init init;
    struct start_source src = {0};
    float *host = NULL;
    char path[1024] = "";
    int rc = 0, moments = 0;
    if (t->rank == 0) {
        t->st.cursor.seed = t->job->trainer.seed;
        struct gpt_rng r;
        gpt_rng_seed(&r, t->job->trainer.seed ^ 0x5eedull);
        memcpy(t->st.rng, r.s, sizeof(t->st.rng));
        if (t->opts->resume || t->opts->resume_path)
            rc = load_snapshot(t, NULL, path, err);
        if (rc == 0 && path[0]) {
            struct gpt_snapshot_meta meta;
            if ((rc = gpt_snapshot_reader_open(path, &meta, &src.snap, err)) == 0)
                moments = meta.has_moments;
        } else if (rc == 0 && !t->opts->init_weights) {
            gpt_shard_init_begin(&init, &t->model, t->job->trainer.seed);
            src.init = &init;
            if (setup_stopped(t))
                rc = GPT_TRAIN_STOPPED;
        } else if (rc == 0 && !(host = malloc(t->model.n_params * sizeof(float)))) {
            rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory for the initial weights");
        } else if (rc == 0) {
            gpt_model_init_weights_host(&t->model, t->job->trainer.seed, host);
            if (t->opts->init_weights &&
                (rc = t->opts->init_weights(t->opts->init_weights_ctx, &t->model, host, err)) == 0)
                emit_event(t, "init_from", "weights from %s", t->job->model.init_from);
            if (rc == 0 && setup_stopped(t))
                rc = GPT_TRAIN_STOPPED;
            src.host = host;
        }
    }
    int64_t status[2] = {rc, 0};
    int brc = gpt_comm_broadcast(t->comm, status, sizeof(status), 0);
    if (brc == 0)
        brc = gpt_comm_broadcast(t->comm, &t->st, sizeof(t->st), 0);
    if (brc < 0) {
        rc = rc < 0 ? rc : gpt_err_set(err, brc, NULL, "broadcast of the start state failed");
        goto out;
    }
    if (status[0] != 0) { /* an error, or GPT_TRAIN_STOPPED during set-up */
        if (rc == 0 && status[0] < 0)
            gpt_err_set(err, (int)status[0], NULL, "rank 0 failed to initialise the model: %s",
                        gpt_strerror((int)status[0]));
        rc = rc != 0 ? rc : (int)status[0];
        goto out;
    }
    rc = gpt_shard_load_stream(t->shard, t->rank == 0 ? start_source_read : NULL, &src, moments,
                               err);
    if (rc == 0)
        memcpy(t->rng.s, t->st.rng, sizeof(t->rng.s));
out:
    free(host);
    gpt_snapshot_reader_close(src.snap);
    return rc;
}

/* Rank 0 initialises or resumes; everyone receives the same state.
 * Sharded runs stream it instead (init_state_sharded): each rank keeps
 * its slices, so a snapshot taken at any world size and sharding mode
 * resumes in any other (re-sharding on load). */
int trainer_state_init(struct trainer *t, struct gpt_err *err)
{
    struct full_state fs = {t->model.params, t->model.m, t->model.v};
    int rc = 0;
    memset(&t->st, 0, sizeof(t->st));
    if (t->shard)
        return init_state_sharded(t, err);
    if (t->rank == 0) {
        float *host = malloc(t->model.n_params * sizeof(float));
        if (!host) {
            rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory for the initial weights");
        } else {
            gpt_model_init_weights_host(&t->model, t->job->trainer.seed, host);
            if (t->opts->init_weights &&
                (rc = t->opts->init_weights(t->opts->init_weights_ctx, &t->model, host, err)) == 0)
                emit_event(t, "init_from", "weights from %s", t->job->model.init_from);
            if (rc == 0)
                rc = setup_stopped(t) ? GPT_TRAIN_STOPPED
                                      : gpt_backend_upload(t->be, fs.params, host,
                                                           t->model.n_params * sizeof(float));
            free(host);
        }
        t->st.cursor.seed = t->job->trainer.seed;
        struct gpt_rng r;
        gpt_rng_seed(&r, t->job->trainer.seed ^ 0x5eedull);
        memcpy(t->st.rng, r.s, sizeof(t->st.rng));
        if (rc == 0 && (t->opts->resume || t->opts->resume_path))
            rc = load_snapshot(t, &fs, NULL, err);
    }
    if (t->world > 1) {
        /* A failure on rank 0 must not leave the others waiting in the
         * broadcast, and a stop during its set-up stops them all: the
         * status travels before the state. */
        int64_t status[2] = {rc, 0};
        size_t bytes = t->model.n_params * sizeof(float);
        int brc = gpt_comm_broadcast(t->comm, status, sizeof(status), 0);
        if (brc < 0) {
            rc = rc < 0 ? rc : gpt_err_set(err, brc, NULL, "broadcast of the start state failed");
            goto out;
        }
        if (status[0] == GPT_TRAIN_STOPPED) { /* rank 0 stopped in set-up: all do */
            rc = GPT_TRAIN_STOPPED;
            goto out;
        }
        if (status[0] < 0) {
            rc = rc < 0 ? rc
                        : gpt_err_set(err, (int)status[0], NULL,
                                      "rank 0 failed to initialise the model: %s",
                                      gpt_strerror((int)status[0]));
            goto out;
        }
        if ((brc = gpt_comm_broadcast(t->comm, &t->st, sizeof(t->st), 0)) < 0 ||
            (brc = gpt_comm_broadcast(t->comm, fs.params, bytes, 0)) < 0 ||
            (brc = gpt_comm_broadcast(t->comm, fs.m, bytes, 0)) < 0 ||
            (brc = gpt_comm_broadcast(t->comm, fs.v, bytes, 0)) < 0) {
            rc = gpt_err_set(err, brc, NULL, "broadcast of the parameters failed: %s",
                             gpt_strerror(brc));
            goto out;
        }
    }
    if (rc != 0) /* an error, or GPT_TRAIN_STOPPED during set-up */
        goto out;
    memcpy(t->rng.s, t->st.rng, sizeof(t->rng.s));
out:
    return rc;
}
