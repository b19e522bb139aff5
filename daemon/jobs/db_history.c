/*
 * db_history: a job's metrics and events in the database, and their merged
 * history for `logs` (see db.h). Uses db.c's connection and statements
 * (db_int.h). Loop thread only.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "db_int.h"

int db_metric_insert(struct db *db, int64_t job_id, const struct gpt_metric *m, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_METRIC_INSERT, err, &rc);
    if (!s)
        return rc;
    int i = 1;
    sqlite3_bind_int64(s, i++, job_id);
    sqlite3_bind_int64(s, i++, m->run_id);
    sqlite3_bind_int64(s, i++, m->step);
    sqlite3_bind_int64(s, i++, m->max_steps);
    sqlite3_bind_int64(s, i++, (int64_t)m->epoch);
    db_bind_real(s, i++, m->loss);
    db_bind_real(s, i++, m->val_loss);
    db_bind_real(s, i++, m->accuracy);
    db_bind_real(s, i++, m->lr);
    db_bind_real(s, i++, m->grad_norm);
    db_bind_real(s, i++, m->tokens_per_s);
    db_bind_real(s, i++, m->ms_per_step);
    db_bind_real(s, i++, m->mfu);
    db_bind_real(s, i++, m->eta_s);
    sqlite3_bind_int64(s, i++, (int64_t)m->tokens);
    sqlite3_bind_int(s, i++, m->world_size);
    sqlite3_bind_int64(s, i++, (int64_t)m->mem_params_bytes);
    sqlite3_bind_int64(s, i++, (int64_t)m->mem_grads_bytes);
    sqlite3_bind_int64(s, i++, (int64_t)m->mem_optim_bytes);
    sqlite3_bind_int64(s, i++, (int64_t)m->mem_acts_bytes);
    sqlite3_bind_double(s, i++, m->time);
    rc = db_exec_stmt(db, s, err, "insert metric");
    if (rc < 0)
        return rc;

    /* Keep the job row's progress current for `list` and `status`. */
    s = db_stmt(db, DB_ST_JOB_PROGRESS, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, job_id);
    sqlite3_bind_int64(s, 2, m->step);
    sqlite3_bind_int64(s, 3, m->max_steps);
    db_bind_real(s, 4, m->loss);
    return db_exec_stmt(db, s, err, "update job progress");
}

int db_event_insert(struct db *db, int64_t job_id, const struct gpt_event *e, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_EVENT_INSERT, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, job_id);
    sqlite3_bind_int64(s, 2, e->run_id);
    sqlite3_bind_double(s, 3, e->time);
    sqlite3_bind_int64(s, 4, e->step);
    sqlite3_bind_text(s, 5, e->kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 6, e->message, -1, SQLITE_STATIC);
    return db_exec_stmt(db, s, err, "insert event");
}

void db_metric_read(sqlite3_stmt *s, struct gpt_metric *m)
{
    int i = 0;
    memset(m, 0, sizeof(*m));
    m->run_id = sqlite3_column_int64(s, i++);
    m->step = sqlite3_column_int64(s, i++);
    m->max_steps = sqlite3_column_int64(s, i++);
    m->epoch = (uint64_t)sqlite3_column_int64(s, i++);
    m->loss = db_column_real(s, i++);
    m->val_loss = db_column_real(s, i++);
    m->accuracy = db_column_real(s, i++);
    m->lr = db_column_real(s, i++);
    m->grad_norm = db_column_real(s, i++);
    m->tokens_per_s = db_column_real(s, i++);
    m->ms_per_step = db_column_real(s, i++);
    m->mfu = db_column_real(s, i++);
    m->eta_s = db_column_real(s, i++);
    m->tokens = (uint64_t)sqlite3_column_int64(s, i++);
    m->world_size = sqlite3_column_int(s, i++);
    m->mem_params_bytes = (uint64_t)sqlite3_column_int64(s, i++);
    m->mem_grads_bytes = (uint64_t)sqlite3_column_int64(s, i++);
    m->mem_optim_bytes = (uint64_t)sqlite3_column_int64(s, i++);
    m->mem_acts_bytes = (uint64_t)sqlite3_column_int64(s, i++);
    m->time = sqlite3_column_double(s, i++);
}

static void db_event_row(sqlite3_stmt *s, struct gpt_event *e)
{
    memset(e, 0, sizeof(*e));
    e->run_id = sqlite3_column_int64(s, 0);
    e->time = sqlite3_column_double(s, 1);
    e->step = sqlite3_column_int64(s, 2);
    db_column_text(s, 3, e->kind, sizeof(e->kind));
    db_column_text(s, 4, e->message, sizeof(e->message));
}

int db_history(struct db *db, int64_t job_id, int64_t since, int64_t after, int limit,
               const struct db_history_cb *cb, int64_t *ret_last, int *ret_more,
               struct gpt_err *err)
{
    int rc = 0;
    struct gpt_metric *ms = calloc((size_t)limit, sizeof(*ms));
    if (!ms)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");

    /* Metrics of this chunk first, so the events' upper bound is known. */
    int n = 0, src = SQLITE_DONE;
    sqlite3_stmt *s = db_stmt(db, DB_ST_HIST_METRICS, err, &rc);
    if (!s)
        goto out;
    sqlite3_bind_int64(s, 1, job_id);
    sqlite3_bind_int64(s, 2, since);
    sqlite3_bind_int64(s, 3, after);
    sqlite3_bind_int(s, 4, limit);
    while (n < limit && (src = sqlite3_step(s)) == SQLITE_ROW)
        db_metric_read(s, &ms[n++]);
    if (n < limit && src != SQLITE_DONE) {
        rc = db_fail(db, err, src, "read metrics");
        sqlite3_reset(s);
        goto out;
    }
    sqlite3_reset(s);
    int more = n == limit;
    int64_t upto = more ? ms[n - 1].step : INT64_MAX;

    s = db_stmt(db, DB_ST_HIST_EVENTS, err, &rc);
    if (!s)
        goto out;
    sqlite3_bind_int64(s, 1, job_id);
    sqlite3_bind_int64(s, 2, since);
    sqlite3_bind_int64(s, 3, after);
    sqlite3_bind_int64(s, 4, upto);
    int k = 0;
    /* Merge: at equal steps an event goes before the metric when it is
     * older (the "start" of a run before its first metric). */
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        struct gpt_event e;
        db_event_row(s, &e);
        while (k < n && (ms[k].step < e.step || (ms[k].step == e.step && ms[k].time <= e.time)))
            cb->metric(cb->ctx, &ms[k++]);
        cb->event(cb->ctx, &e);
    }
    if (src != SQLITE_DONE)
        rc = db_fail(db, err, src, "read events");
    sqlite3_reset(s);
    if (rc < 0)
        goto out;
    while (k < n)
        cb->metric(cb->ctx, &ms[k++]);
    *ret_last = n ? ms[n - 1].step : after;
    *ret_more = more;
out:
    free(ms);
    return rc;
}

/* A record's position for db_history_page: seq * 2^44 + step + 1, where
 * seq is 2 * the run's ordinal among the job's runs, or 2 * (runs started
 * before it) + 1 for the queue's own events (run 0), which come between
 * runs and are ordered by time alone. A run's events older than its first
 * metric (world, start, resume) take step -1: the cluster's events carry
 * the job's newest step, which a run resumed from an older snapshot has
 * not reached yet. Steps below 2^44 and fewer than 2^18 runs per job keep
 * it in an int64. Computed in SQL so that a page is one ordered read. */
/* 2^44 is 17592186044416; a run's ordinal is the count of the job's runs
 * with ids up to its own. */
static const char db_page_metrics[] =
    "SELECT run_id, step, max_steps, epoch, loss, val_loss, accuracy, lr, grad_norm,"
    " tokens_per_s, ms_per_step, mfu, eta_s, tokens, world_size, mem_params_bytes,"
    " mem_grads_bytes, mem_optim_bytes, mem_acts_bytes, time, pos FROM ("
    "  SELECT m.*, 2 * (SELECT count(*) FROM runs r WHERE r.job_id = ?1 AND r.id <= m.run_id)"
    "   * 17592186044416 + m.step + 1 AS pos"
    "  FROM metrics m WHERE m.job_id = ?1 AND m.step >= ?2)"
    " WHERE pos > ?3 ORDER BY pos LIMIT ?4";
/* rt is MATERIALIZED: left to itself, SQLite 3.40 ran the CTE again for
 * every event row (every metric of the job read once per event: 22 s a
 * page for 2,000 snapshot events and 20,000 metrics, 11 ms materialized). */
static const char db_page_events[] =
    "WITH rt AS MATERIALIZED"
    " (SELECT run_id, min(time) AS t0 FROM metrics WHERE job_id = ?1 GROUP BY run_id)"
    " SELECT run_id, time, step, kind, message, pos FROM ("
    "  SELECT e.*, CASE WHEN e.run_id > 0"
    "   THEN 2 * (SELECT count(*) FROM runs r WHERE r.job_id = ?1 AND r.id <= e.run_id)"
    "    * 17592186044416 + 1"
    "    + CASE WHEN e.time < (SELECT t0 FROM rt WHERE rt.run_id = e.run_id) THEN -1"
    "      ELSE e.step END"
    "   ELSE (2 * (SELECT count(*) FROM runs r WHERE r.job_id = ?1 AND r.started <= e.time)"
    "    + 1) * 17592186044416 END AS pos"
    "  FROM events e WHERE e.job_id = ?1 AND e.step >= ?2)"
    " WHERE pos > ?3 AND pos <= ?4 ORDER BY pos, time, id";

static int db_page_prepare(struct db *db, const char *sql, sqlite3_stmt **ret, struct gpt_err *err)
{
    int src = sqlite3_prepare_v2(db->conn, sql, -1, ret, NULL);
    return src == SQLITE_OK ? 0 : db_fail(db, err, src, "prepare history page");
}

int db_history_page(struct db *db, int64_t job_id, int64_t since, int64_t after, int limit,
                    const struct db_history_cb *cb, int64_t *ret_last, int *ret_more,
                    struct gpt_err *err)
{
    sqlite3_stmt *s = NULL;
    int64_t *pos = NULL;
    int rc, src = SQLITE_DONE, n = 0;
    struct gpt_metric *ms = calloc((size_t)limit, sizeof(*ms));
    pos = calloc((size_t)limit, sizeof(*pos));
    if (!ms || !pos) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        goto out;
    }
    /* This page's metrics first, so the events' upper bound is known. */
    if ((rc = db_page_prepare(db, db_page_metrics, &s, err)) < 0)
        goto out;
    sqlite3_bind_int64(s, 1, job_id);
    sqlite3_bind_int64(s, 2, since);
    sqlite3_bind_int64(s, 3, after);
    sqlite3_bind_int(s, 4, limit);
    while (n < limit && (src = sqlite3_step(s)) == SQLITE_ROW) {
        db_metric_read(s, &ms[n]);
        pos[n++] = sqlite3_column_int64(s, 20);
    }
    if (n < limit && src != SQLITE_DONE) {
        rc = db_fail(db, err, src, "read metrics");
        goto out;
    }
    sqlite3_finalize(s);
    s = NULL;
    int more = n == limit;
    int64_t upto = more ? pos[n - 1] : INT64_MAX;

    if ((rc = db_page_prepare(db, db_page_events, &s, err)) < 0)
        goto out;
    sqlite3_bind_int64(s, 1, job_id);
    sqlite3_bind_int64(s, 2, since);
    sqlite3_bind_int64(s, 3, after);
    sqlite3_bind_int64(s, 4, upto);
    int k = 0;
    /* Merge by position; at one position (a run's step) an event goes
     * before the metric when it is older (a run's "start" before its first
     * metric, a snapshot after its step's metric). */
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        struct gpt_event e;
        db_event_row(s, &e);
        int64_t p = sqlite3_column_int64(s, 5);
        while (k < n && (pos[k] < p || (pos[k] == p && ms[k].time <= e.time)))
            cb->metric(cb->ctx, &ms[k++]);
        cb->event(cb->ctx, &e);
    }
    if (src != SQLITE_DONE) {
        rc = db_fail(db, err, src, "read events");
        goto out;
    }
    while (k < n)
        cb->metric(cb->ctx, &ms[k++]);
    *ret_last = n ? pos[n - 1] : after;
    *ret_more = more;
    rc = 0;
out:
    sqlite3_finalize(s);
    free(ms);
    free(pos);
    return rc;
}

/* One history position from `sql`, its parameters ?1.. bound to args[0..n):
 * -1 when the query gives NULL (no metric yet). */
static int db_history_pos(struct db *db, const char *sql, const int64_t *args, int n, int64_t *ret,
                          struct gpt_err *err)
{
    sqlite3_stmt *s = NULL;
    int rc = db_page_prepare(db, sql, &s, err);
    if (rc < 0)
        return rc;
    for (int i = 0; i < n; i++)
        sqlite3_bind_int64(s, i + 1, args[i]);
    int src = sqlite3_step(s);
    if (src == SQLITE_ROW)
        *ret = sqlite3_column_type(s, 0) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 0);
    else
        rc = db_fail(db, err, src, "read a history position");
    sqlite3_finalize(s);
    return rc;
}

int db_history_metric_pos(struct db *db, int64_t job_id, int64_t run_id, int64_t step, int64_t *ret,
                          struct gpt_err *err)
{
    static const char sql[] =
        "SELECT 2 * (SELECT count(*) FROM runs r WHERE r.job_id = ?1 AND r.id <= ?2)"
        " * 17592186044416 + ?3 + 1";
    const int64_t args[] = {job_id, run_id, step};
    return db_history_pos(db, sql, args, 3, ret, err);
}

int db_history_last_pos(struct db *db, int64_t job_id, int64_t *ret, struct gpt_err *err)
{
    static const char sql[] =
        "SELECT max(2 * (SELECT count(*) FROM runs r WHERE r.job_id = ?1 AND r.id <= m.run_id)"
        " * 17592186044416 + m.step + 1) FROM metrics m WHERE m.job_id = ?1";
    return db_history_pos(db, sql, &job_id, 1, ret, err);
}

int db_run_list(struct db *db, int64_t job_id, void (*fn)(void *ctx, const struct db_run *r),
                void *ctx, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_RUN_LIST, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, job_id);
    int src;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        struct db_run r = {
            .id = sqlite3_column_int64(s, 0),
            .started = sqlite3_column_double(s, 1),
            .ended = sqlite3_column_double(s, 2),
            .world_size = sqlite3_column_int(s, 3),
            .status = (const char *)sqlite3_column_text(s, 4),
            .resumed_from = (const char *)sqlite3_column_text(s, 5),
            .spec_json = (const char *)sqlite3_column_text(s, 6),
        };
        fn(ctx, &r);
    }
    if (src != SQLITE_DONE)
        rc = db_fail(db, err, src, "list runs");
    sqlite3_reset(s);
    return rc;
}

int db_job_snapshot_get(struct db *db, int64_t job, int64_t id, struct db_snapshot *ret,
                        struct gpt_err *err)
{
    int rc = db_snapshot_get(db, id, ret, err);
    if (rc == 0 && ret->job_id != job)
        rc = gpt_err_set(err, -ENOENT, "snapshot", "snapshot %lld is not job %lld's", (long long)id,
                         (long long)job);
    return rc;
}

static void db_newest_step(void *ctx, const struct db_snapshot *s)
{
    int64_t *step = ctx;
    if (s->step > *step)
        *step = s->step;
}

int db_snapshot_newest_step(struct db *db, int64_t job, int64_t *ret_step, struct gpt_err *err)
{
    *ret_step = -1;
    return db_snapshot_list(db, job, db_newest_step, ret_step, err);
}
