/*
 * resume_from: `gptctl submit FILE --resume-from JOB[:SNAPSHOT]`, a new job
 * that continues another job's full training state (weights, AdamW
 * moments, step, data cursor, RNG) under its own id.
 *
 * Around jobs_submit_held, in steps that alternate between the loop and
 * a uv work thread, so that reading and writing a snapshot file (which
 * may be large, and which the source job's owner may have replaced with
 * anything) never blocks the loop:
 *   resume_from_prepare (loop): the source job exists and is the client's,
 *     or the client is root; the new spec differs from the source's only
 *     in keys a resume may change; the snapshots to try. No file I/O.
 *   resume_from_read (work thread): as the source job's owner, reads the
 *     first of them that verifies. Its header must describe the new job's
 *     model (shape and parameter count) before a byte is allocated for
 *     it, so a planted header cannot make gptd allocate more than the job
 *     itself was admitted with; then something must be left to train.
 *   resume_from_stage (loop): after jobs_submit_held made job `id`: its
 *     identity (token, folder) and its snapshot folder prepared.
 *   resume_from_write (work thread): as the new job's owner, claims its
 *     folder and writes the copy there, with the new job's owner identity
 *     in its header (the agent resumes only from snapshots of the job's
 *     own folder and owner). A copy, never a link: the header changes,
 *     and the source's pruning must not reach it.
 *   resume_from_commit (loop): records the copy, marks the job's first
 *     run a resume and queues it; or leaves it failed, saying why.
 * The caller holds a queue slot throughout (jobs_reserve).
 */
#ifndef GPTD_RESUME_FROM_H
#define GPTD_RESUME_FROM_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "db.h"
#include "gpt_err.h"
#include "jobspec.h"
#include "snapshot.h"

#define RESUME_FROM_TRIES 16 /* snapshots tried, newest first, for "its newest that verifies" */

struct resume_from {
    int64_t src_job;      /* the job continued from */
    int64_t src_snapshot; /* its snapshots.id */
    char src_path[DB_PATH_MAX];
    struct gpt_snapshot_meta meta; /* the snapshot's header, owner still the source's */
    float *params, *m, *v;         /* owned; m and v NULL without moments */
    /* From resume_from_prepare, for resume_from_read. */
    uid_t src_owner;
    uint64_t src_token;
    bool by_id; /* the snapshot was named: its error is the answer */
    size_t n_tries;
    int64_t try_id[RESUME_FROM_TRIES];
    char try_path[RESUME_FROM_TRIES][DB_PATH_MAX];
    struct gpt_model_config model; /* the new job's (vocab_size 0: from its data) */
    int vocab_max;                 /* the largest vocabulary its data may have */
    int64_t max_steps;             /* the new job's trainer.max_steps */
    /* From resume_from_stage and resume_from_write: the new job's copy. */
    struct db_job dst; /* its id, owner, token and snapshot folder (no spec) */
    char dst_path[DB_PATH_MAX];
    int64_t dst_size;
};

/* Loop thread. Checks a submit of `job` by `uid` continuing job `src`
 * from snapshot `snapshot_id` (0: its newest that verifies) and picks the
 * snapshots to read (only those written on this gptd's node `node`).
 * Errors name what was wrong: -ENOENT an unknown job or snapshot ("job"
 * or "snapshot"), -EPERM another user's job, -GPT_E_SPEC a key that may
 * not differ (named in err->path). On success *ret is filled (free with
 * resume_from_done). */
int resume_from_prepare(struct db *db, const char *node, int64_t src, int64_t snapshot_id,
                        uid_t uid, const struct gpt_job *job, struct resume_from *ret,
                        struct gpt_err *err);

/* Work thread (blocks on the user database and the file). Reads the
 * snapshot as the source job's owner (a file-system identity taken and
 * given back on the calling thread). -GPT_E_MODEL (naming the file and
 * both counts) for a header whose model is not the new job's, -ENOENT
 * when none verifies, -EALREADY nothing left to train (err names
 * trainer.max_steps). */
int resume_from_read(struct resume_from *rf, struct gpt_err *err);

/* Loop thread. After jobs_submit_held made job `id`: fills rf->dst and
 * prepares its snapshot folder. */
int resume_from_stage(struct db *db, const char *state_dir, struct resume_from *rf, int64_t id,
                      struct gpt_err *err);

/* Work thread. Claims the new job's folder and writes the copy into it as
 * the new job's owner. */
int resume_from_write(struct resume_from *rf, struct gpt_err *err);

/* Loop thread. `rc` is how the steps since resume_from_stage went: 0, and
 * the copy is recorded, the job marked to resume and queued (the caller
 * schedules it), with an event; otherwise (or when recording fails) the
 * job is left failed with err's message, and the error is returned. */
int resume_from_commit(struct db *db, const char *node, const struct resume_from *rf, int rc,
                       struct gpt_err *err);

/* Frees the buffers; NULL and a zeroed struct allowed. */
void resume_from_done(struct resume_from *rf);

#endif
