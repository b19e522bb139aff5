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

static void db_metric_row(sqlite3_stmt *s, struct gpt_metric *m)
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
        db_metric_row(s, &ms[n++]);
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
