/*
 * resume_from: `gptctl submit FILE --resume-from JOB[:SNAPSHOT]`, a new job
 * that continues another job's full training state (weights, AdamW
 * moments, step, data cursor, RNG) under its own id.
 *
 * Two halves around jobs_submit: resume_from_prepare checks everything
 * (the source job exists and is the client's, or the client is root; the
 * new spec differs from the source's only in keys a resume may change; a
 * snapshot of the source verifies and something is left to train) and
 * reads the snapshot into memory as the source job's owner;
 * resume_from_commit writes it into the new job's own snapshot folder as
 * the new job's owner, with the new job's owner identity in its header
 * (the agent resumes only from snapshots of the job's own folder and
 * owner), records it and marks the job's first run a resume. A copy, never
 * a link: the header changes, and the source's pruning must not reach it.
 *
 * Loop thread (as init_from_submit): blocks on reading and writing one
 * snapshot file and on user-database lookups.
 */
#ifndef GPTD_RESUME_FROM_H
#define GPTD_RESUME_FROM_H

#include <stdint.h>
#include <sys/types.h>

#include "db.h"
#include "gpt_err.h"
#include "jobspec.h"
#include "snapshot.h"

struct resume_from {
    int64_t src_job;      /* the job continued from */
    int64_t src_snapshot; /* its snapshots.id */
    char src_path[DB_PATH_MAX];
    struct gpt_snapshot_meta meta; /* the snapshot's header, owner still the source's */
    float *params, *m, *v;         /* owned; m and v NULL without moments */
};

/* Checks a submit of `job` by `uid` continuing job `src` from snapshot
 * `snapshot_id` (0: its newest that verifies) and reads that snapshot.
 * Errors name what was wrong: -ENOENT an unknown job or snapshot ("job"
 * or "snapshot"), -EPERM another user's job, -GPT_E_SPEC a key that may
 * not differ (named in err->path), -EALREADY nothing left to train.
 * `node` is this gptd's node name: only snapshots written here are read.
 * On success *ret is filled (free with resume_from_done). */
int resume_from_prepare(struct db *db, const char *node, int64_t src, int64_t snapshot_id,
                        uid_t uid, const struct gpt_job *job, struct resume_from *ret,
                        struct gpt_err *err);

/* After jobs_submit made job `id` (still queued; the scheduler runs on a
 * later loop iteration): writes the snapshot into its folder as its owner,
 * records it, marks the job to resume and logs an event. On failure the
 * job is marked failed (it must not start fresh) and the error returned. */
int resume_from_commit(struct db *db, const char *state_dir, const char *node,
                       const struct resume_from *rf, int64_t id, struct gpt_err *err);

/* Frees the buffers; NULL and a zeroed struct allowed. */
void resume_from_done(struct resume_from *rf);

#endif
