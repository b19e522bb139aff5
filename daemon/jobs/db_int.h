/*
 * db_int: what db.c shares with db_history.c and db_samples.c (private to
 * them): the connection with its statement cache, and the statement
 * helpers. Calls go one way, from db_history.c and db_samples.c into db.c.
 * Loop thread only.
 */
#ifndef GPTD_DB_INT_H
#define GPTD_DB_INT_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>

#include "db.h"

enum db_stmt {
    DB_ST_JOB_INSERT,
    DB_ST_JOB_GET,
    DB_ST_JOB_SET_DIR,
    DB_ST_JOB_SET_STATE,
    DB_ST_JOB_SET_RESUME,
    DB_ST_JOB_SET_RESTARTS,
    DB_ST_JOB_SET_SPEC,
    DB_ST_JOB_SET_SWEEP,
    DB_ST_JOB_SET_OVERRIDES,
    DB_ST_JOB_SET_PARENT,
    DB_ST_JOB_SUMMARY,
    DB_ST_JOB_CANCEL,
    DB_ST_JOB_NEXT,
    DB_ST_JOB_QUEUE,
    DB_ST_JOB_COUNT,
    DB_ST_JOB_COUNT_OWNED,
    DB_ST_JOB_LIST,
    DB_ST_JOB_PROGRESS,
    DB_ST_RUN_INSERT,
    DB_ST_RUN_END,
    DB_ST_RUN_LIST,
    DB_ST_METRIC_INSERT,
    DB_ST_EVENT_INSERT,
    DB_ST_HIST_METRICS,
    DB_ST_HIST_EVENTS,
    DB_ST_SNAP_INSERT,
    DB_ST_SNAP_GET,
    DB_ST_SNAP_LIST,
    DB_ST_SAMPLE_INSERT,
    DB_ST_SAMPLE_TRIM,
    DB_ST_SAMPLE_LIST,
    DB_ST_COUNT
};

struct db {
    sqlite3 *conn;
    sqlite3_stmt *st[DB_ST_COUNT];
    bool in_tx;
    /* The file and its folder as opened (db_state_check): a write is
     * refused once either is unlinked or replaced, since it would go where
     * no later gptd reads it. */
    char path[DB_PATH_MAX];
    char dir[DB_PATH_MAX];
    dev_t dev, dir_dev;
    ino_t ino, dir_ino;
    bool gone;
    char gone_msg[DB_PATH_MAX * 2 + 256];
};

/* Maps an SQLite failure to -EIO (or -EBUSY/-ENOMEM) with its message. */
int db_fail(struct db *db, struct gpt_err *err, int src, const char *what);
/* The prepared statement `which`, reset and unbound, compiled on first use;
 * NULL (and *rc set) on failure. */
sqlite3_stmt *db_stmt(struct db *db, int which, struct gpt_err *err, int *rc);
/* Runs a statement that returns no rows. */
int db_exec_stmt(struct db *db, sqlite3_stmt *s, struct gpt_err *err, const char *what);
/* A double, or NULL when it is not finite (SQL has no NaN); and back. */
void db_bind_real(sqlite3_stmt *s, int i, double v);
double db_column_real(sqlite3_stmt *s, int i);
void db_column_text(sqlite3_stmt *s, int i, char *dst, size_t cap);

#endif
