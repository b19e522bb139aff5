/*
 * db: gptd's SQLite database: jobs, runs, metrics, snapshots, events.
 * One connection in WAL mode, schema version in PRAGMA user_version with
 * migrations from version 0 (a new file) upward. An existing file that is
 * empty, not a database or fails PRAGMA quick_check is refused at open,
 * never silently replaced by an empty database.
 *
 * Loop thread only: the connection is not shared with any other thread.
 * Calls block on disk I/O for the time of one small statement; the caller
 * batches writes of one loop iteration into one transaction (db_begin /
 * db_commit) so a commit (one fsync in WAL mode) is paid once per batch.
 */
#ifndef GPTD_DB_H
#define GPTD_DB_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpt_err.h"
#include "metric.h"

#define DB_SCHEMA_VERSION   8
#define DB_ERROR_MAX        512
#define DB_PATH_MAX         1024
#define DB_OVERRIDES_MAX    512   /* bytes of a job's overrides text, NUL included */
#define DB_SAMPLE_TEXT_MAX  16384 /* bytes of a sample's completion kept; the rest is cut */
#define DB_SAMPLES_MAX      100   /* samples kept per job at most (sample_history's bound) */
#define DB_SAMPLE_FIELD_MAX 8192  /* bytes of a prompt or its ids from a peer */

enum db_job_state {
    DB_JOB_QUEUED,
    DB_JOB_RUNNING,
    DB_JOB_COMPLETED,
    DB_JOB_FAILED,
    DB_JOB_CANCELLED,
    DB_JOB_WAITING, /* waiting for nodes (elastic) */
    DB_JOB_STATE_COUNT
};

/* "queued", "running", ... and back; -1 for an unknown name. */
const char *db_job_state_name(int state);
int db_job_state_parse(const char *name);
/* completed, failed and cancelled are final (until a resume). */
bool db_job_state_final(int state);

struct db_job {
    int64_t id;
    char name[128];
    uid_t owner_uid;
    int state; /* enum db_job_state */
    int64_t priority;
    char *spec_json; /* owned (malloc'd) when read with db_job_get; NULL in lists */
    double created, started, finished; /* unix seconds; 0 = not yet */
    char error[DB_ERROR_MAX];
    char snapshot_dir[DB_PATH_MAX];
    int resume;              /* the next run continues from a snapshot */
    int64_t resume_snapshot; /* snapshots.id chosen for the next run; 0 = newest */
    int64_t step;            /* newest metric step */
    int64_t max_steps;
    double loss;        /* newest train loss, NAN if none */
    int restarts;       /* failures restarted from so far (distributed.max_restarts) */
    uint64_t token;     /* random identity (snapshot ownership); made at insert, never 0 */
    int64_t cancel_uid; /* a cancel acknowledged while it ran: the uid; -1 none */
    char sweep[64];     /* the sweep (gptctl submit -m) it belongs to; "" none */
    char overrides[DB_OVERRIDES_MAX]; /* JSON object "a.b": "value" of its sweep; "" none */
    int64_t parent_job;               /* the job it continues (submit --resume-from); 0 none */
};

/* What a job's metrics add up to so far. */
struct db_job_summary {
    double best_val_loss; /* lowest validation loss; NAN when none yet */
    double val_loss;      /* newest validation loss; NAN when none yet */
    int64_t tokens;       /* tokens trained on (newest record) */
};

/* Frees what db_job_get allocated (spec_json). NULL allowed. */
void db_job_done(struct db_job *j);

struct db_snapshot {
    int64_t id, job_id, run_id, step;
    char node[64];
    char path[DB_PATH_MAX];
    int64_t size;
    char checksum[80];
    double created;
};

/* One `sample` reply as kept for a job: what was asked, from which
 * snapshot, and what the model wrote. Strings are borrowed. */
struct db_sample {
    int64_t id; /* set by the database */
    int64_t job_id;
    double time;            /* unix seconds of the reply */
    int64_t uid;            /* the client who asked */
    int64_t snapshot_id;    /* snapshots.id of the file sampled; 0 when it has no row (insert:
                             * 0 looks the row up by the path) */
    int64_t step;           /* the snapshot's step */
    const char *snapshot;   /* the file sampled */
    const char *prompt;     /* the prompt as text ("" when given as ids) */
    const char *prompt_ids; /* the prompt as token ids ("" when given as text) */
    const char *completion; /* what the model wrote after the prompt */
    bool truncated;         /* the completion was cut at DB_SAMPLE_TEXT_MAX bytes */
    int64_t tokens;         /* tokens asked for */
    double temperature;
    int64_t top_k; /* 0: no limit */
    uint64_t seed; /* the sampler's seed: the same request with it writes the same text */
};

struct db;
struct sqlite3_stmt;

/* The samples table's columns of one record, in the order db_sample_read()
 * reads them (for the HTTP thread's own connection, as DB_METRIC_COLS). */
#define DB_SAMPLE_COLS                                                                             \
    "id, job_id, time, uid, snapshot_id, step, snapshot, prompt, prompt_ids, completion,"          \
    " truncated, tokens, temperature, top_k, seed"

/* The record of a row whose first columns are DB_SAMPLE_COLS; its strings
 * borrow the statement's row (valid until the next step or reset). Any
 * thread that owns the statement. */
void db_sample_read(struct sqlite3_stmt *s, struct db_sample *ret);
/* A sample as `gptctl samples` and GET /api/jobs/ID/samples show it: a new
 * object {id, job, time, uid, snapshot_id, step, snapshot, prompt,
 * prompt_ids?, completion, truncated, tokens, temperature, top_k, seed}
 * (strings that are not valid UTF-8 escaped as \xNN); NULL on ENOMEM. Any
 * thread. */
struct json_t *db_sample_json(const struct db_sample *s);
/* Back: a record from such an object (its id and job left out), strings
 * borrowed from `o`; -EINVAL (err names the key) for a key missing, of
 * the wrong type or longer than DB_SAMPLE_FIELD_MAX. Any thread. */
int db_sample_from_json(const struct json_t *o, struct db_sample *ret, struct gpt_err *err);

/* The metrics table's columns of one record, in the order
 * db_metric_read() reads them: for a reader with its own connection (the
 * HTTP thread's, http_db.h) selecting from the same table. */
#define DB_METRIC_COLS                                                                             \
    "run_id, step, max_steps, epoch, loss, val_loss, accuracy, lr, grad_norm, tokens_per_s,"       \
    " ms_per_step, mfu, eta_s, tokens, world_size, mem_params_bytes, mem_grads_bytes,"             \
    " mem_optim_bytes, mem_acts_bytes, time"

/* The record of a row whose first columns are DB_METRIC_COLS (NULL reals
 * become NAN). Any thread that owns the statement. */
void db_metric_read(struct sqlite3_stmt *s, struct gpt_metric *ret);

/* Opens (creating if missing) the database file, checks an existing one
 * (not empty, a database, PRAGMA quick_check ok), sets WAL and migrates the
 * schema. Returns 0 and a new handle; -GPT_E_CORRUPT (err names the file
 * and what to do) for a damaged file. Blocks (file I/O). */
int db_open(const char *path, struct db **ret, struct gpt_err *err);
/* NULL allowed. Finalises statements and closes the connection. */
void db_close(struct db *db);
/* The schema version of an open database (PRAGMA user_version). */
int db_schema_version(struct db *db);

/* Whether the database file and its folder (the state directory) are
 * still the ones db_open opened: 0, or -ESTALE ("state directory gone:
 * ...", err names both paths) once either was unlinked or replaced, and
 * from then on. Every write checks it before (db_begin, a write outside a
 * transaction) and after (db_commit: a commit that went into an unlinked
 * file fails), so nothing is acknowledged that a restart would not find.
 * Two stat() calls. */
int db_state_check(struct db *db, struct gpt_err *err);

/* Transactions. db_commit/db_rollback are no-ops without db_begin. */
int db_begin(struct db *db, struct gpt_err *err);
int db_commit(struct db *db, struct gpt_err *err);
void db_rollback(struct db *db);

/* Jobs. db_job_insert reads every field of `j` but id, state (queued),
 * step/loss; returns the new id. */
int db_job_insert(struct db *db, const struct db_job *j, int64_t *ret_id, struct gpt_err *err);
/* -ENOENT when no such job. */
int db_job_get(struct db *db, int64_t id, struct db_job *ret, struct gpt_err *err);
int db_job_set_snapshot_dir(struct db *db, int64_t id, const char *dir, struct gpt_err *err);
/* Moves a job to `state`; `error` (may be NULL) is stored for failed jobs.
 * running sets started, final states set finished, queued clears both. */
int db_job_set_state(struct db *db, int64_t id, int state, const char *error, double now,
                     struct gpt_err *err);
/* Records a cancel of a running job before it is acknowledged: a restart
 * of gptd then ends the job cancelled instead of resuming it. */
int db_job_request_cancel(struct db *db, int64_t id, uid_t who, struct gpt_err *err);
/* Marks the next run of a job as a resume (from snapshot id, 0 = newest);
 * clears a recorded cancel request. */
int db_job_set_resume(struct db *db, int64_t id, int resume, int64_t snapshot_id,
                      struct gpt_err *err);
/* Records how many failures an elastic job has restarted from. */
/* Tags the job with the sweep it belongs to. */
int db_job_set_sweep(struct db *db, int64_t id, const char *sweep, struct gpt_err *err);
/* Records the overrides (a JSON object's text) that set the job apart in
 * its sweep; at most DB_OVERRIDES_MAX - 1 bytes. */
int db_job_set_overrides(struct db *db, int64_t id, const char *overrides, struct gpt_err *err);
/* Records the job a --resume-from job continues. */
int db_job_set_parent(struct db *db, int64_t id, int64_t parent, struct gpt_err *err);
/* The job's best and newest validation loss and its tokens so far. */
int db_job_summary(struct db *db, int64_t id, struct db_job_summary *ret, struct gpt_err *err);
/* Replaces the job's spec (a resume that changed keys); the next run
 * records it. */
int db_job_set_spec(struct db *db, int64_t id, const char *spec_json, struct gpt_err *err);
int db_job_set_restarts(struct db *db, int64_t id, int restarts, struct gpt_err *err);
/* The next job to run: queued, highest priority, then lowest id.
 * -ENOENT when the queue is empty. */
int db_job_next_queued(struct db *db, int64_t *ret_id, struct gpt_err *err);
/* The queue in the order it is served (as db_job_next_queued): at most
 * `max` ids into ids[], their number in *ret_n. */
int db_job_queue(struct db *db, int64_t *ids, int max, int *ret_n, struct gpt_err *err);
/* Number of jobs in `state`. */
int db_job_count(struct db *db, int state, int64_t *ret_n, struct gpt_err *err);
/* Number of jobs in `state` that `owner` owns. */
int db_job_count_owned(struct db *db, int state, uid_t owner, int64_t *ret_n, struct gpt_err *err);
/* Calls fn for each job (newest first, at most `limit`), spec_json NULL. */
int db_job_list(struct db *db, int limit, void (*fn)(void *ctx, const struct db_job *j), void *ctx,
                struct gpt_err *err);
/* Jobs found running at start-up go back to the queue, marked to resume,
 * except those whose cancel was acknowledged (db_job_request_cancel): they
 * end cancelled, with an event. Returns how many were re-queued (>= 0). */
int db_jobs_requeue_running(struct db *db, double now, struct gpt_err *err);

/* Runs: one per world formed for a job. */
int db_run_insert(struct db *db, int64_t job_id, int world_size, const char *resumed_from,
                  double now, int64_t *ret_id, struct gpt_err *err);
int db_run_end(struct db *db, int64_t run_id, const char *status, double now, struct gpt_err *err);
/* Runs still open at start-up (the daemon died) are closed as "lost". */
int db_runs_close_open(struct db *db, double now, struct gpt_err *err);

/* Metrics: unique per (job, step). A second record for a step (an eval
 * after the log line, or the same step again after a resume) replaces the
 * first, keeping val_loss/accuracy when the new one has none. */
int db_metric_insert(struct db *db, int64_t job_id, const struct gpt_metric *m,
                     struct gpt_err *err);
int db_event_insert(struct db *db, int64_t job_id, const struct gpt_event *e, struct gpt_err *err);

/* History of a job for `logs`: metrics with step >= since and step > after
 * (at most `limit` of them, by step), and the events with steps in the same
 * range, merged in step (then time) order. *ret_last gets the last metric
 * step delivered (or `after` when none), *ret_more 1 when the limit cut the
 * metrics short. Callbacks borrow the records. */
struct db_history_cb {
    void *ctx;
    void (*metric)(void *ctx, const struct gpt_metric *m);
    void (*event)(void *ctx, const struct gpt_event *e);
};
int db_history(struct db *db, int64_t job_id, int64_t since, int64_t after, int limit,
               const struct db_history_cb *cb, int64_t *ret_last, int *ret_more,
               struct gpt_err *err);

/* History of a job for `logs`, in the order it happened: run by run (the
 * queue's own events, run id 0, between the runs they came between, by
 * time), within a run by step, at one step by time. A resumed job's runs
 * reuse steps, so the cursor is a position, not a step: `after` is an
 * opaque key from an earlier call's *ret_last (-1: from the start), and
 * each page ends at a (run, step) boundary, so pages neither skip nor
 * repeat a record. Records with step < `since` are left out. At most
 * `limit` metrics per page (*ret_more 1 when more follow); the events up to
 * the last metric's position come with them, all of them on the last page.
 * A metric replaced by a later run's record of its step (db_metric_insert)
 * moves to that run. Callbacks borrow the records. */
int db_history_page(struct db *db, int64_t job_id, int64_t since, int64_t after, int limit,
                    const struct db_history_cb *cb, int64_t *ret_last, int *ret_more,
                    struct gpt_err *err);
/* The position db_history_page gives the metric of run `run_id` at `step`
 * (a live follower that falls behind resumes from the database there). */
int db_history_metric_pos(struct db *db, int64_t job_id, int64_t run_id, int64_t step, int64_t *ret,
                          struct gpt_err *err);
/* The position of the job's newest metric (-1: none yet): where a `logs`
 * without follow of a running job stops, instead of chasing a history that
 * grows while it is read. */
int db_history_last_pos(struct db *db, int64_t job_id, int64_t *ret, struct gpt_err *err);

/* One run of a job: a world that trained it, with the spec it ran. */
struct db_run {
    int64_t id;
    double started, ended; /* ended 0 while it runs */
    int world_size;
    const char *status;       /* borrowed: "running", "completed", "reformed", ... */
    const char *resumed_from; /* borrowed; "" for a fresh start */
    const char *spec_json;    /* borrowed; "" for runs recorded before schema 4 */
};
/* The job's runs, oldest first; fn borrows each record for the call. */
int db_run_list(struct db *db, int64_t job_id, void (*fn)(void *ctx, const struct db_run *r),
                void *ctx, struct gpt_err *err);

/* Samples: the newest `keep` `sample` replies of each job. Insert records
 * one (a completion longer than DB_SAMPLE_TEXT_MAX cut at a character
 * boundary, `truncated` set) and drops the job's older ones beyond `keep`,
 * in one transaction (or the caller's); keep 0 records nothing. */
int db_sample_insert(struct db *db, const struct db_sample *s, int keep, struct gpt_err *err);
/* The job's samples, newest first, at most `limit`; fn borrows each record
 * for the call. */
int db_sample_list(struct db *db, int64_t job_id, int limit,
                   void (*fn)(void *ctx, const struct db_sample *s), void *ctx,
                   struct gpt_err *err);

/* Snapshots. Insert ignores a duplicate (job, node, step). */
int db_snapshot_insert(struct db *db, const struct db_snapshot *s, int64_t *ret_id,
                       struct gpt_err *err);
int db_snapshot_get(struct db *db, int64_t id, struct db_snapshot *ret, struct gpt_err *err);
/* The step of the job's newest recorded snapshot into *ret_step; -1 when it
 * has none. */
int db_snapshot_newest_step(struct db *db, int64_t job, int64_t *ret_step, struct gpt_err *err);
/* Snapshot `id` of job `job`: -ENOENT (naming both) when it is another
 * job's, so a request cannot reach another job's snapshot by its id. */
int db_job_snapshot_get(struct db *db, int64_t job, int64_t id, struct db_snapshot *ret,
                        struct gpt_err *err);
/* Newest first. */
int db_snapshot_list(struct db *db, int64_t job_id,
                     void (*fn)(void *ctx, const struct db_snapshot *s), void *ctx,
                     struct gpt_err *err);

#endif
