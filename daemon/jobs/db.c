/*
 * db: the SQLite store of jobs, runs, metrics, snapshots and events (see
 * db.h). Owns one connection and its prepared statements, which are
 * compiled once on first use and kept; the file checks at open and the
 * schema migrations; jobs, runs and snapshots. Metrics, events and their
 * merged history are in db_history.c. Loop thread only.
 */
#include "db.h"
#include "db_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Schema migrations: migrations[v] takes a database from user_version v to
 * v + 1. Append only; never edit a migration that has shipped. */
static const char *const db_migrations[DB_SCHEMA_VERSION] = {
    /* 0 -> 1 */
    "CREATE TABLE jobs ("
    "  id INTEGER PRIMARY KEY,"
    "  name TEXT NOT NULL,"
    "  owner_uid INTEGER NOT NULL,"
    "  state TEXT NOT NULL,"
    "  priority INTEGER NOT NULL DEFAULT 0,"
    "  spec_json TEXT NOT NULL,"
    "  created REAL NOT NULL,"
    "  started REAL,"
    "  finished REAL,"
    "  error TEXT,"
    "  snapshot_dir TEXT NOT NULL DEFAULT '',"
    "  resume INTEGER NOT NULL DEFAULT 0,"
    "  resume_snapshot INTEGER NOT NULL DEFAULT 0,"
    "  step INTEGER NOT NULL DEFAULT 0,"
    "  max_steps INTEGER NOT NULL DEFAULT 0,"
    "  loss REAL);"
    "CREATE INDEX jobs_queue ON jobs(state, priority DESC, id);"
    "CREATE TABLE runs ("
    "  id INTEGER PRIMARY KEY,"
    "  job_id INTEGER NOT NULL REFERENCES jobs(id),"
    "  started REAL NOT NULL,"
    "  ended REAL,"
    "  world_size INTEGER NOT NULL,"
    "  status TEXT NOT NULL,"
    "  resumed_from TEXT);"
    "CREATE INDEX runs_job ON runs(job_id);"
    "CREATE TABLE metrics ("
    "  job_id INTEGER NOT NULL REFERENCES jobs(id),"
    "  run_id INTEGER NOT NULL,"
    "  step INTEGER NOT NULL,"
    "  max_steps INTEGER NOT NULL,"
    "  epoch INTEGER NOT NULL,"
    "  loss REAL, val_loss REAL, accuracy REAL, lr REAL, grad_norm REAL,"
    "  tokens_per_s REAL, ms_per_step REAL, mfu REAL, eta_s REAL,"
    "  tokens INTEGER NOT NULL,"
    "  world_size INTEGER NOT NULL,"
    "  mem_params_bytes INTEGER NOT NULL, mem_grads_bytes INTEGER NOT NULL,"
    "  mem_optim_bytes INTEGER NOT NULL, mem_acts_bytes INTEGER NOT NULL,"
    "  time REAL NOT NULL,"
    "  UNIQUE(job_id, step));"
    "CREATE TABLE snapshots ("
    "  id INTEGER PRIMARY KEY,"
    "  job_id INTEGER NOT NULL REFERENCES jobs(id),"
    "  run_id INTEGER NOT NULL,"
    "  step INTEGER NOT NULL,"
    "  node TEXT NOT NULL,"
    "  path TEXT NOT NULL,"
    "  size INTEGER NOT NULL,"
    "  checksum TEXT,"
    "  created REAL NOT NULL,"
    "  UNIQUE(job_id, node, step));"
    "CREATE TABLE events ("
    "  id INTEGER PRIMARY KEY,"
    "  job_id INTEGER NOT NULL REFERENCES jobs(id),"
    "  run_id INTEGER NOT NULL,"
    "  time REAL NOT NULL,"
    "  step INTEGER NOT NULL,"
    "  kind TEXT NOT NULL,"
    "  message TEXT NOT NULL);"
    "CREATE INDEX events_job ON events(job_id, step, id);",
    /* 1 -> 2: failures an elastic job has restarted from (distributed.max_restarts),
     * kept across coordinator restarts. */
    "ALTER TABLE jobs ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0;",
    /* 2 -> 3: a random token per job (who owns a snapshot folder: ids repeat
     * in a new database), and a cancel acknowledged while the job ran. */
    "ALTER TABLE jobs ADD COLUMN token TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE jobs ADD COLUMN cancel_uid INTEGER;"
    "UPDATE jobs SET token = lower(hex(randomblob(8)));",
    /* 3 -> 4: the spec each run trained with (a resume may change keys). */
    "ALTER TABLE runs ADD COLUMN spec_json TEXT;",
    /* 4 -> 5: the sweep a job belongs to (gptctl submit -m). */
    "ALTER TABLE jobs ADD COLUMN sweep TEXT NOT NULL DEFAULT '';",
    /* 5 -> 6: the overrides that tell a sweep's jobs apart, as a JSON object. */
    "ALTER TABLE jobs ADD COLUMN overrides TEXT NOT NULL DEFAULT '';",
    /* 6 -> 7: the job a --resume-from job continues (0: none). */
    "ALTER TABLE jobs ADD COLUMN parent_job INTEGER NOT NULL DEFAULT 0;",
    /* 7 -> 8: the newest `sample` replies of each job (sample_history). */
    "CREATE TABLE samples ("
    "  id INTEGER PRIMARY KEY,"
    "  job_id INTEGER NOT NULL REFERENCES jobs(id),"
    "  time REAL NOT NULL,"
    "  uid INTEGER NOT NULL,"
    "  snapshot_id INTEGER NOT NULL,"
    "  step INTEGER NOT NULL,"
    "  snapshot TEXT NOT NULL,"
    "  prompt TEXT NOT NULL,"
    "  prompt_ids TEXT NOT NULL,"
    "  completion TEXT NOT NULL,"
    "  truncated INTEGER NOT NULL,"
    "  tokens INTEGER NOT NULL,"
    "  temperature REAL NOT NULL,"
    "  top_k INTEGER NOT NULL,"
    "  seed INTEGER NOT NULL);"
    "CREATE INDEX samples_job ON samples(job_id, id);",
};

#define DB_JOB_COLS                                                                                \
    "id, name, owner_uid, state, priority, created, coalesce(started, 0),"                         \
    " coalesce(finished, 0), coalesce(error, ''), snapshot_dir, resume, resume_snapshot, step,"    \
    " max_steps, loss, restarts, token, coalesce(cancel_uid, -1), sweep, overrides,"               \
    " parent_job"

static const char *const db_sql[DB_ST_COUNT] = {
    [DB_ST_JOB_INSERT] = "INSERT INTO jobs(name, owner_uid, state, priority, spec_json, created,"
                         " snapshot_dir, max_steps, token)"
                         " VALUES(?, ?, 'queued', ?, ?, ?, ?, ?, lower(hex(randomblob(8))))",
    [DB_ST_JOB_GET] = "SELECT " DB_JOB_COLS ", spec_json FROM jobs WHERE id = ?",
    [DB_ST_JOB_SET_DIR] = "UPDATE jobs SET snapshot_dir = ? WHERE id = ?",
    [DB_ST_JOB_SET_STATE] =
        "UPDATE jobs SET state = ?1,"
        " started = CASE WHEN ?1 = 'running' THEN ?3 WHEN ?1 = 'queued' THEN NULL ELSE started END,"
        " finished = CASE WHEN ?1 IN ('completed', 'failed', 'cancelled') THEN ?3 ELSE NULL END,"
        " error = ?2 WHERE id = ?4",
    [DB_ST_JOB_SET_RESUME] =
        "UPDATE jobs SET resume = ?, resume_snapshot = ?, cancel_uid = NULL WHERE id = ?",
    [DB_ST_JOB_CANCEL] = "UPDATE jobs SET cancel_uid = ? WHERE id = ?",
    [DB_ST_JOB_SET_RESTARTS] = "UPDATE jobs SET restarts = ? WHERE id = ?",
    [DB_ST_JOB_NEXT] =
        "SELECT id FROM jobs WHERE state = 'queued' ORDER BY priority DESC, id ASC LIMIT 1",
    [DB_ST_JOB_QUEUE] = "SELECT id FROM jobs WHERE state = 'queued' ORDER BY priority DESC,"
                        " id ASC LIMIT ?",
    [DB_ST_JOB_COUNT] = "SELECT count(*) FROM jobs WHERE state = ?",
    [DB_ST_JOB_COUNT_OWNED] = "SELECT count(*) FROM jobs WHERE state = ? AND owner_uid = ?",
    [DB_ST_JOB_LIST] = "SELECT " DB_JOB_COLS " FROM jobs ORDER BY id DESC LIMIT ?",
    [DB_ST_JOB_PROGRESS] =
        "UPDATE jobs SET step = max(step, ?2), max_steps = CASE WHEN ?3 > 0 THEN ?3 ELSE max_steps"
        " END, loss = coalesce(?4, loss) WHERE id = ?1",
    [DB_ST_JOB_SET_SPEC] = "UPDATE jobs SET spec_json = ? WHERE id = ?",
    [DB_ST_JOB_SET_SWEEP] = "UPDATE jobs SET sweep = ? WHERE id = ?",
    [DB_ST_JOB_SET_OVERRIDES] = "UPDATE jobs SET overrides = ? WHERE id = ?",
    [DB_ST_JOB_SET_PARENT] = "UPDATE jobs SET parent_job = ? WHERE id = ?",
    [DB_ST_JOB_SUMMARY] =
        "SELECT min(val_loss), max(tokens),"
        " (SELECT val_loss FROM metrics WHERE job_id = ?1 AND val_loss IS NOT NULL"
        "  ORDER BY step DESC LIMIT 1)"
        " FROM metrics WHERE job_id = ?1",
    [DB_ST_RUN_INSERT] =
        "INSERT INTO runs(job_id, started, world_size, status, resumed_from, spec_json)"
        " VALUES(?1, ?2, ?3, 'running', ?4, (SELECT spec_json FROM jobs WHERE id = ?1))",
    [DB_ST_RUN_END] = "UPDATE runs SET status = ?, ended = ? WHERE id = ?",
    [DB_ST_RUN_LIST] = "SELECT id, started, coalesce(ended, 0), world_size, status,"
                       " coalesce(resumed_from, ''), coalesce(spec_json, '')"
                       " FROM runs WHERE job_id = ? ORDER BY id",
    [DB_ST_METRIC_INSERT] =
        "INSERT INTO metrics(job_id, " DB_METRIC_COLS ") VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
        " ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(job_id, step) DO UPDATE SET"
        " run_id = excluded.run_id, max_steps = excluded.max_steps, epoch = excluded.epoch,"
        " loss = coalesce(excluded.loss, loss),"
        " val_loss = coalesce(excluded.val_loss, val_loss),"
        " accuracy = coalesce(excluded.accuracy, accuracy),"
        " lr = coalesce(excluded.lr, lr), grad_norm = coalesce(excluded.grad_norm, grad_norm),"
        " tokens_per_s = coalesce(excluded.tokens_per_s, tokens_per_s),"
        " ms_per_step = coalesce(excluded.ms_per_step, ms_per_step),"
        " mfu = coalesce(excluded.mfu, mfu), eta_s = coalesce(excluded.eta_s, eta_s),"
        " tokens = excluded.tokens, world_size = excluded.world_size,"
        " mem_params_bytes = excluded.mem_params_bytes,"
        " mem_grads_bytes = excluded.mem_grads_bytes,"
        " mem_optim_bytes = excluded.mem_optim_bytes, mem_acts_bytes = excluded.mem_acts_bytes,"
        " time = excluded.time",
    [DB_ST_EVENT_INSERT] = "INSERT INTO events(job_id, run_id, time, step, kind, message)"
                           " VALUES(?, ?, ?, ?, ?, ?)",
    [DB_ST_HIST_METRICS] = "SELECT " DB_METRIC_COLS " FROM metrics WHERE job_id = ?1"
                           " AND step >= ?2 AND step > ?3 ORDER BY step LIMIT ?4",
    [DB_ST_HIST_EVENTS] = "SELECT run_id, time, step, kind, message FROM events WHERE job_id = ?1"
                          " AND step >= ?2 AND step > ?3 AND step <= ?4 ORDER BY step, id",
    [DB_ST_SNAP_INSERT] = "INSERT OR IGNORE INTO snapshots(job_id, run_id, step, node, path,"
                          " size, checksum, created) VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
    [DB_ST_SNAP_GET] = "SELECT id, job_id, run_id, step, node, path, size, coalesce(checksum, ''),"
                       " created FROM snapshots WHERE id = ?",
    [DB_ST_SNAP_LIST] = "SELECT id, job_id, run_id, step, node, path, size,"
                        " coalesce(checksum, ''), created FROM snapshots WHERE job_id = ?"
                        " ORDER BY step DESC, id DESC",
    /* A snapshot id of 0: the row of the file sampled, when it has one. */
    [DB_ST_SAMPLE_INSERT] = "INSERT INTO samples(job_id, time, uid, snapshot_id, step, snapshot,"
                            " prompt, prompt_ids, completion, truncated, tokens, temperature,"
                            " top_k, seed) VALUES(?1, ?2, ?3, CASE WHEN ?4 > 0 THEN ?4 ELSE"
                            " coalesce((SELECT id FROM snapshots WHERE job_id = ?1 AND path = ?6"
                            " ORDER BY id DESC LIMIT 1), 0) END, ?5, ?6, ?7, ?8, ?9, ?10, ?11,"
                            " ?12, ?13, ?14)",
    /* Everything of the job but its newest ?2. */
    [DB_ST_SAMPLE_TRIM] = "DELETE FROM samples WHERE job_id = ?1 AND id <= coalesce((SELECT id"
                          " FROM samples WHERE job_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2),"
                          " 0)",
    [DB_ST_SAMPLE_LIST] = "SELECT " DB_SAMPLE_COLS " FROM samples WHERE job_id = ?"
                          " ORDER BY id DESC LIMIT ?",
};

static const char *const db_state_names[DB_JOB_STATE_COUNT] = {
    [DB_JOB_QUEUED] = "queued", [DB_JOB_RUNNING] = "running",     [DB_JOB_COMPLETED] = "completed",
    [DB_JOB_FAILED] = "failed", [DB_JOB_CANCELLED] = "cancelled", [DB_JOB_WAITING] = "waiting",
};

const char *db_job_state_name(int state)
{
    if (state < 0 || state >= DB_JOB_STATE_COUNT)
        return "unknown";
    return db_state_names[state];
}

int db_job_state_parse(const char *name)
{
    for (int i = 0; i < DB_JOB_STATE_COUNT; i++)
        if (name && strcmp(db_state_names[i], name) == 0)
            return i;
    return -1;
}

bool db_job_state_final(int state)
{
    return state == DB_JOB_COMPLETED || state == DB_JOB_FAILED || state == DB_JOB_CANCELLED;
}

void db_job_done(struct db_job *j)
{
    if (!j)
        return;
    free(j->spec_json);
    j->spec_json = NULL;
}

/* Maps an SQLite failure to -EIO (or -EBUSY/-ENOMEM) with its message. */
int db_fail(struct db *db, struct gpt_err *err, int src, const char *what)
{
    int code = src == SQLITE_NOMEM                            ? -ENOMEM
               : (src == SQLITE_BUSY || src == SQLITE_LOCKED) ? -EBUSY
                                                              : -EIO;
    return gpt_err_set(err, code, NULL, "sqlite: %s: %s", what,
                       db && db->conn ? sqlite3_errmsg(db->conn) : sqlite3_errstr(src));
}

/* The prepared statement, reset and unbound, compiled on first use. */
sqlite3_stmt *db_stmt(struct db *db, int which, struct gpt_err *err, int *rc)
{
    sqlite3_stmt *s = db->st[which];
    if (!s) {
        int src = sqlite3_prepare_v3(db->conn, db_sql[which], -1, SQLITE_PREPARE_PERSISTENT,
                                     &db->st[which], NULL);
        if (src != SQLITE_OK) {
            *rc = db_fail(db, err, src, "prepare");
            return NULL;
        }
        return db->st[which];
    }
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return s;
}

int db_state_check(struct db *db, struct gpt_err *err)
{
    struct stat st, sd;
    if (!db->gone) {
        bool file_ok = stat(db->path, &st) == 0 && st.st_dev == db->dev && st.st_ino == db->ino;
        bool dir_ok =
            stat(db->dir, &sd) == 0 && sd.st_dev == db->dir_dev && sd.st_ino == db->dir_ino;
        if (file_ok && dir_ok)
            return 0;
        db->gone = true;
        snprintf(db->gone_msg, sizeof(db->gone_msg),
                 "state directory gone: %s was removed or replaced since gptd opened it, so"
                 " nothing more can be kept (the database %s is not the one gptd writes);"
                 " restart gptd to start a new one, or restore the folder first",
                 dir_ok ? db->path : db->dir, db->path);
    }
    return gpt_err_set(err, -ESTALE, NULL, "%s", db->gone_msg);
}

/* Runs a statement that returns no rows: a write, refused (before and
 * after) outside a transaction once the state directory is gone. */
int db_exec_stmt(struct db *db, sqlite3_stmt *s, struct gpt_err *err, const char *what)
{
    int rc;
    if (!db->in_tx && (rc = db_state_check(db, err)) < 0) {
        sqlite3_reset(s);
        return rc;
    }
    int src = sqlite3_step(s);
    rc = src == SQLITE_DONE ? 0 : db_fail(db, err, src, what);
    sqlite3_reset(s);
    if (rc == 0 && !db->in_tx)
        rc = db_state_check(db, err);
    return rc;
}

static int db_exec(struct db *db, const char *sql, struct gpt_err *err)
{
    char *msg = NULL;
    int src = sqlite3_exec(db->conn, sql, NULL, NULL, &msg);
    if (src == SQLITE_OK)
        return 0;
    int rc = gpt_err_set(err, src == SQLITE_BUSY ? -EBUSY : -EIO, NULL, "sqlite: %s",
                         msg ? msg : sqlite3_errstr(src));
    sqlite3_free(msg);
    return rc;
}

int db_schema_version(struct db *db)
{
    sqlite3_stmt *s;
    int v = -1;
    if (sqlite3_prepare_v2(db->conn, "PRAGMA user_version", -1, &s, NULL) != SQLITE_OK)
        return -1;
    if (sqlite3_step(s) == SQLITE_ROW)
        v = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    return v;
}

/* Applies each migration above the file's version in its own transaction. */
static int db_migrate(struct db *db, struct gpt_err *err)
{
    int v = db_schema_version(db);
    if (v < 0)
        return gpt_err_set(err, -EIO, NULL, "sqlite: cannot read user_version: %s",
                           sqlite3_errmsg(db->conn));
    if (v > DB_SCHEMA_VERSION)
        return gpt_err_set(err, -GPT_E_VERSION, NULL,
                           "database schema version %d is newer than this gptd (%d)", v,
                           DB_SCHEMA_VERSION);
    for (; v < DB_SCHEMA_VERSION; v++) {
        char bump[64];
        snprintf(bump, sizeof(bump), "PRAGMA user_version = %d", v + 1);
        int rc = db_exec(db, "BEGIN IMMEDIATE", err);
        if (rc == 0)
            rc = db_exec(db, db_migrations[v], err);
        if (rc == 0)
            rc = db_exec(db, bump, err);
        if (rc == 0)
            rc = db_exec(db, "COMMIT", err);
        if (rc < 0) {
            sqlite3_exec(db->conn, "ROLLBACK", NULL, NULL, NULL);
            return rc;
        }
    }
    return 0;
}

#define DB_WHAT_TO_DO                                                                              \
    "; stop here and restore it from a backup, or move it away (with its -wal and -shm files)"     \
    " to start with an empty database"

/* An existing file must be a sound database: a zero-length or damaged one
 * would otherwise become a new, empty database without a word. */
static int db_check(struct db *db, const char *path, struct gpt_err *err)
{
    sqlite3_stmt *s = NULL;
    char first[256] = "";
    int src = sqlite3_prepare_v2(db->conn, "PRAGMA quick_check", -1, &s, NULL), rows = 0;
    if (src == SQLITE_OK) {
        while ((src = sqlite3_step(s)) == SQLITE_ROW) {
            if (rows++ == 0)
                db_column_text(s, 0, first, sizeof(first));
        }
    }
    if (src == SQLITE_DONE && rows == 1 && strcmp(first, "ok") == 0)
        src = SQLITE_OK;
    else if (src == SQLITE_DONE)
        src = SQLITE_CORRUPT;
    int rc = 0;
    if (src != SQLITE_OK)
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                         "database %s is damaged (quick_check: %s)" DB_WHAT_TO_DO, path,
                         first[0] ? first : sqlite3_errmsg(db->conn));
    sqlite3_finalize(s);
    return rc;
}

/* The database and its -wal and -shm files hold every job's ownership
 * token and spec: gptd's alone (0600), whatever the umask, and fixed on an
 * existing file; SQLite gives a new -wal or -shm the database file's mode.
 * A missing file is fine; a link or anything not a regular file is left
 * alone (SQLite refuses it). Only before SQLite opens the files: closing
 * any descriptor of a file drops every POSIX lock the process holds on it,
 * SQLite's included. */
static int db_private(const char *path, struct gpt_err *err)
{
    static const char *const suffix[] = {"", "-wal", "-shm"};
    for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
        char p[PATH_MAX];
        if (snprintf(p, sizeof(p), "%s%s", path, suffix[i]) >= (int)sizeof(p))
            return gpt_err_set(err, -ENAMETOOLONG, NULL, "database path too long: %s", path);
        int fd = open(p, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0 && (errno == ENOENT || errno == ELOOP))
            continue;
        struct stat st;
        int rc = fd < 0 || fstat(fd, &st) < 0 ? -errno : 0;
        if (rc == 0 && S_ISREG(st.st_mode) && (st.st_mode & 077) && fchmod(fd, 0600) < 0)
            rc = -errno;
        if (fd >= 0)
            close(fd);
        if (rc < 0)
            return gpt_err_set(err, rc, NULL, "cannot make %s private (mode 0600): %s", p,
                               strerror(-rc));
    }
    return 0;
}

/* Notes which file and folder the database is (db_state_check). */
static int db_state_note(struct db *db, const char *path, struct gpt_err *err)
{
    struct stat st, sd;
    snprintf(db->path, sizeof(db->path), "%s", path);
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(db->dir, sizeof(db->dir), ".");
    else
        snprintf(db->dir, sizeof(db->dir), "%.*s", slash == path ? 1 : (int)(slash - path), path);
    if (stat(db->path, &st) < 0 || stat(db->dir, &sd) < 0)
        return gpt_err_set(err, -errno, NULL, "%s: %s", path, strerror(errno));
    db->dev = st.st_dev;
    db->ino = st.st_ino;
    db->dir_dev = sd.st_dev;
    db->dir_ino = sd.st_ino;
    return 0;
}

int db_open(const char *path, struct db **ret, struct gpt_err *err)
{
    struct db *db = calloc(1, sizeof(*db));
    if (!db)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    int rc;
    struct stat st;
    bool existed = stat(path, &st) == 0;
    if (existed && S_ISREG(st.st_mode) && st.st_size == 0) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                         "database %s is empty (0 bytes): its jobs are lost" DB_WHAT_TO_DO, path);
        goto fail;
    }
    /* A new database is made 0600 before SQLite opens it (SQLite would
     * make it 0644 less the umask). */
    if (!existed) {
        int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0)
            close(fd);
    }
    if ((rc = db_private(path, err)) < 0)
        goto fail;
    int src = sqlite3_open_v2(
        path, &db->conn, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (src != SQLITE_OK) {
        rc = gpt_err_set(err, -EIO, NULL, "sqlite: cannot open %s: %s", path,
                         db->conn ? sqlite3_errmsg(db->conn) : sqlite3_errstr(src));
        goto fail;
    }
    sqlite3_busy_timeout(db->conn, 5000);
    if (existed && (rc = db_check(db, path, err)) < 0)
        goto fail;
    /* WAL with synchronous=FULL: the WAL is synced at every commit, so what
     * gptd acknowledged (a submit, a cancel, a resume: each committed before
     * its reply) survives a crash of gptd and a power loss alike. Metrics
     * are committed in one transaction per mailbox drain, so the syncs stay
     * few. */
    rc = db_exec(db,
                 "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;"
                 " PRAGMA foreign_keys = ON",
                 err);
    if (rc < 0)
        goto fail;
    rc = db_migrate(db, err);
    if (rc < 0)
        goto fail;
    if ((rc = db_state_note(db, path, err)) < 0)
        goto fail;
    *ret = db;
    return 0;
fail:
    db_close(db);
    return rc;
}

void db_close(struct db *db)
{
    if (!db)
        return;
    for (int i = 0; i < DB_ST_COUNT; i++)
        sqlite3_finalize(db->st[i]);
    sqlite3_close(db->conn);
    free(db);
}

int db_begin(struct db *db, struct gpt_err *err)
{
    GPT_ASSERT(!db->in_tx);
    int rc = db_state_check(db, err);
    if (rc < 0)
        return rc;
    rc = db_exec(db, "BEGIN IMMEDIATE", err);
    if (rc == 0)
        db->in_tx = true;
    return rc;
}

int db_commit(struct db *db, struct gpt_err *err)
{
    if (!db->in_tx)
        return 0;
    int rc = db_exec(db, "COMMIT", err);
    if (rc < 0) {
        db_rollback(db);
        return rc;
    }
    db->in_tx = false;
    /* Committed into a file that was unlinked meanwhile: lost. */
    return db_state_check(db, err);
}

void db_rollback(struct db *db)
{
    if (!db->in_tx)
        return;
    sqlite3_exec(db->conn, "ROLLBACK", NULL, NULL, NULL);
    db->in_tx = false;
}

/* Binds a double, or NULL when it is not finite (SQL has no NaN either). */
void db_bind_real(sqlite3_stmt *s, int i, double v)
{
    if (isfinite(v))
        sqlite3_bind_double(s, i, v);
    else
        sqlite3_bind_null(s, i);
}

double db_column_real(sqlite3_stmt *s, int i)
{
    return sqlite3_column_type(s, i) == SQLITE_NULL ? NAN : sqlite3_column_double(s, i);
}

void db_column_text(sqlite3_stmt *s, int i, char *dst, size_t cap)
{
    const unsigned char *t = sqlite3_column_text(s, i);
    snprintf(dst, cap, "%s", t ? (const char *)t : "");
}

int db_job_insert(struct db *db, const struct db_job *j, int64_t *ret_id, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_JOB_INSERT, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, j->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, (int64_t)j->owner_uid);
    sqlite3_bind_int64(s, 3, j->priority);
    sqlite3_bind_text(s, 4, j->spec_json ? j->spec_json : "{}", -1, SQLITE_STATIC);
    sqlite3_bind_double(s, 5, j->created);
    sqlite3_bind_text(s, 6, j->snapshot_dir, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 7, j->max_steps);
    rc = db_exec_stmt(db, s, err, "insert job");
    if (rc == 0)
        *ret_id = sqlite3_last_insert_rowid(db->conn);
    return rc;
}

/* Reads the DB_JOB_COLS of the current row. */
static void db_job_row(sqlite3_stmt *s, struct db_job *j)
{
    memset(j, 0, sizeof(*j));
    j->id = sqlite3_column_int64(s, 0);
    db_column_text(s, 1, j->name, sizeof(j->name));
    j->owner_uid = (uid_t)sqlite3_column_int64(s, 2);
    j->state = db_job_state_parse((const char *)sqlite3_column_text(s, 3));
    j->priority = sqlite3_column_int64(s, 4);
    j->created = sqlite3_column_double(s, 5);
    j->started = sqlite3_column_double(s, 6);
    j->finished = sqlite3_column_double(s, 7);
    db_column_text(s, 8, j->error, sizeof(j->error));
    db_column_text(s, 9, j->snapshot_dir, sizeof(j->snapshot_dir));
    j->resume = sqlite3_column_int(s, 10);
    j->resume_snapshot = sqlite3_column_int64(s, 11);
    j->step = sqlite3_column_int64(s, 12);
    j->max_steps = sqlite3_column_int64(s, 13);
    j->loss = db_column_real(s, 14);
    j->restarts = sqlite3_column_int(s, 15);
    const unsigned char *tok = sqlite3_column_text(s, 16);
    j->token = tok ? strtoull((const char *)tok, NULL, 16) : 0;
    j->cancel_uid = sqlite3_column_int64(s, 17);
    db_column_text(s, 18, j->sweep, sizeof(j->sweep));
    db_column_text(s, 19, j->overrides, sizeof(j->overrides));
    j->parent_job = sqlite3_column_int64(s, 20);
}

int db_job_get(struct db *db, int64_t id, struct db_job *ret, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_JOB_GET, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, id);
    int src = sqlite3_step(s);
    if (src == SQLITE_DONE) {
        rc = gpt_err_set(err, -ENOENT, "job", "no job %lld", (long long)id);
    } else if (src != SQLITE_ROW) {
        rc = db_fail(db, err, src, "get job");
    } else {
        struct db_job j;
        db_job_row(s, &j);
        const unsigned char *spec = sqlite3_column_text(s, 21);
        j.spec_json = strdup(spec ? (const char *)spec : "{}");
        if (!j.spec_json)
            rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        else
            *ret = j;
    }
    sqlite3_reset(s);
    return rc;
}

int db_job_set_snapshot_dir(struct db *db, int64_t id, const char *dir, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_JOB_SET_DIR, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, dir, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, id);
    return db_exec_stmt(db, s, err, "set snapshot dir");
}

int db_job_set_state(struct db *db, int64_t id, int state, const char *error, double now,
                     struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_JOB_SET_STATE, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, db_job_state_name(state), -1, SQLITE_STATIC);
    if (error && error[0])
        sqlite3_bind_text(s, 2, error, -1, SQLITE_STATIC);
    sqlite3_bind_double(s, 3, now);
    sqlite3_bind_int64(s, 4, id);
    return db_exec_stmt(db, s, err, "set job state");
}

int db_job_set_resume(struct db *db, int64_t id, int resume, int64_t snapshot_id,
                      struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_JOB_SET_RESUME, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int(s, 1, resume);
    sqlite3_bind_int64(s, 2, snapshot_id);
    sqlite3_bind_int64(s, 3, id);
    return db_exec_stmt(db, s, err, "set job resume");
}

int db_job_request_cancel(struct db *db, int64_t id, uid_t who, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_JOB_CANCEL, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, (int64_t)who);
    sqlite3_bind_int64(s, 2, id);
    return db_exec_stmt(db, s, err, "record cancel");
}

int db_job_set_restarts(struct db *db, int64_t id, int restarts, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_JOB_SET_RESTARTS, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int(s, 1, restarts);
    sqlite3_bind_int64(s, 2, id);
    return db_exec_stmt(db, s, err, "set job restarts");
}

int db_job_set_spec(struct db *db, int64_t id, const char *spec_json, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_JOB_SET_SPEC, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, spec_json, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, id);
    return db_exec_stmt(db, s, err, "set job spec");
}

int db_job_set_sweep(struct db *db, int64_t id, const char *sweep, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_JOB_SET_SWEEP, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, sweep, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, id);
    return db_exec_stmt(db, s, err, "set job sweep");
}

int db_job_set_overrides(struct db *db, int64_t id, const char *overrides, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_JOB_SET_OVERRIDES, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, overrides, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, id);
    return db_exec_stmt(db, s, err, "set job overrides");
}

int db_job_set_parent(struct db *db, int64_t id, int64_t parent, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_JOB_SET_PARENT, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, parent);
    sqlite3_bind_int64(s, 2, id);
    return db_exec_stmt(db, s, err, "set job parent");
}

int db_job_summary(struct db *db, int64_t id, struct db_job_summary *ret, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_JOB_SUMMARY, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, id);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW) {
        ret->best_val_loss = db_column_real(s, 0);
        ret->tokens = sqlite3_column_int64(s, 1);
        ret->val_loss = db_column_real(s, 2);
    } else {
        rc = db_fail(db, err, src, "job summary");
    }
    sqlite3_reset(s);
    return rc;
}

int db_job_next_queued(struct db *db, int64_t *ret_id, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_JOB_NEXT, err, &rc);
    if (!s)
        return rc;
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW)
        *ret_id = sqlite3_column_int64(s, 0);
    else if (src == SQLITE_DONE)
        rc = -ENOENT;
    else
        rc = db_fail(db, err, src, "next job");
    sqlite3_reset(s);
    return rc;
}

int db_job_queue(struct db *db, int64_t *ids, int max, int *ret_n, struct gpt_err *err)
{
    int rc = 0, n = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_JOB_QUEUE, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int(s, 1, max);
    int src;
    while ((src = sqlite3_step(s)) == SQLITE_ROW && n < max)
        ids[n++] = sqlite3_column_int64(s, 0);
    if (src != SQLITE_DONE && src != SQLITE_ROW)
        rc = db_fail(db, err, src, "list the queue");
    sqlite3_reset(s);
    if (rc == 0)
        *ret_n = n;
    return rc;
}

/* Steps a bound COUNT statement into *ret_n and resets it. */
static int db_count_step(struct db *db, sqlite3_stmt *s, int64_t *ret_n, struct gpt_err *err)
{
    int rc = 0, src = sqlite3_step(s);
    if (src == SQLITE_ROW)
        *ret_n = sqlite3_column_int64(s, 0);
    else
        rc = db_fail(db, err, src, "count jobs");
    sqlite3_reset(s);
    return rc;
}

int db_job_count(struct db *db, int state, int64_t *ret_n, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_JOB_COUNT, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, db_job_state_name(state), -1, SQLITE_STATIC);
    return db_count_step(db, s, ret_n, err);
}

int db_job_count_owned(struct db *db, int state, uid_t owner, int64_t *ret_n, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_JOB_COUNT_OWNED, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, db_job_state_name(state), -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, owner);
    return db_count_step(db, s, ret_n, err);
}

int db_job_list(struct db *db, int limit, void (*fn)(void *ctx, const struct db_job *j), void *ctx,
                struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_JOB_LIST, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int(s, 1, limit);
    int src;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        struct db_job j;
        db_job_row(s, &j);
        fn(ctx, &j);
    }
    if (src != SQLITE_DONE)
        rc = db_fail(db, err, src, "list jobs");
    sqlite3_reset(s);
    return rc;
}

int db_jobs_requeue_running(struct db *db, double now, struct gpt_err *err)
{
    char sql[640];
    /* A cancel acknowledged before gptd died is honoured, not resumed. */
    snprintf(sql, sizeof(sql),
             "INSERT INTO events(job_id, run_id, time, step, kind, message)"
             " SELECT id, 0, %.3f, step, 'state', 'cancelled by uid ' || cancel_uid ||"
             " ' (acknowledged before gptd stopped)' FROM jobs"
             " WHERE state IN ('running', 'waiting') AND cancel_uid IS NOT NULL;"
             "UPDATE jobs SET state = 'cancelled', finished = %.3f, cancel_uid = NULL"
             " WHERE state IN ('running', 'waiting') AND cancel_uid IS NOT NULL;",
             now, now);
    int rc = db_begin(db, err);
    if (rc == 0)
        rc = db_exec(db, sql, err);
    if (rc == 0)
        rc = db_exec(db,
                     "UPDATE jobs SET state = 'queued', resume = 1, resume_snapshot = 0,"
                     " started = NULL WHERE state IN ('running', 'waiting')",
                     err);
    int n = rc == 0 ? sqlite3_changes(db->conn) : 0;
    if (rc == 0)
        rc = db_commit(db, err);
    else
        db_rollback(db);
    return rc < 0 ? rc : n;
}

int db_run_insert(struct db *db, int64_t job_id, int world_size, const char *resumed_from,
                  double now, int64_t *ret_id, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_RUN_INSERT, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, job_id);
    sqlite3_bind_double(s, 2, now);
    sqlite3_bind_int(s, 3, world_size);
    if (resumed_from && resumed_from[0])
        sqlite3_bind_text(s, 4, resumed_from, -1, SQLITE_STATIC);
    rc = db_exec_stmt(db, s, err, "insert run");
    if (rc == 0)
        *ret_id = sqlite3_last_insert_rowid(db->conn);
    return rc;
}

int db_run_end(struct db *db, int64_t run_id, const char *status, double now, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_RUN_END, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_text(s, 1, status, -1, SQLITE_STATIC);
    sqlite3_bind_double(s, 2, now);
    sqlite3_bind_int64(s, 3, run_id);
    return db_exec_stmt(db, s, err, "end run");
}

int db_runs_close_open(struct db *db, double now, struct gpt_err *err)
{
    char sql[128];
    snprintf(sql, sizeof(sql),
             "UPDATE runs SET status = 'lost', ended = %.3f WHERE status = 'running'", now);
    return db_exec(db, sql, err);
}

int db_snapshot_insert(struct db *db, const struct db_snapshot *sn, int64_t *ret_id,
                       struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_SNAP_INSERT, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, sn->job_id);
    sqlite3_bind_int64(s, 2, sn->run_id);
    sqlite3_bind_int64(s, 3, sn->step);
    sqlite3_bind_text(s, 4, sn->node, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 5, sn->path, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 6, sn->size);
    if (sn->checksum[0])
        sqlite3_bind_text(s, 7, sn->checksum, -1, SQLITE_STATIC);
    sqlite3_bind_double(s, 8, sn->created);
    rc = db_exec_stmt(db, s, err, "insert snapshot");
    if (rc == 0 && ret_id)
        *ret_id = sqlite3_changes(db->conn) ? sqlite3_last_insert_rowid(db->conn) : 0;
    return rc;
}

static void db_snapshot_row(sqlite3_stmt *s, struct db_snapshot *sn)
{
    memset(sn, 0, sizeof(*sn));
    sn->id = sqlite3_column_int64(s, 0);
    sn->job_id = sqlite3_column_int64(s, 1);
    sn->run_id = sqlite3_column_int64(s, 2);
    sn->step = sqlite3_column_int64(s, 3);
    db_column_text(s, 4, sn->node, sizeof(sn->node));
    db_column_text(s, 5, sn->path, sizeof(sn->path));
    sn->size = sqlite3_column_int64(s, 6);
    db_column_text(s, 7, sn->checksum, sizeof(sn->checksum));
    sn->created = sqlite3_column_double(s, 8);
}

int db_snapshot_get(struct db *db, int64_t id, struct db_snapshot *ret, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_SNAP_GET, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, id);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW)
        db_snapshot_row(s, ret);
    else if (src == SQLITE_DONE)
        rc = gpt_err_set(err, -ENOENT, "snapshot", "no snapshot %lld", (long long)id);
    else
        rc = db_fail(db, err, src, "get snapshot");
    sqlite3_reset(s);
    return rc;
}

int db_snapshot_list(struct db *db, int64_t job_id,
                     void (*fn)(void *ctx, const struct db_snapshot *s), void *ctx,
                     struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_SNAP_LIST, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, job_id);
    int src;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        struct db_snapshot sn;
        db_snapshot_row(s, &sn);
        fn(ctx, &sn);
    }
    if (src != SQLITE_DONE)
        rc = db_fail(db, err, src, "list snapshots");
    sqlite3_reset(s);
    return rc;
}
