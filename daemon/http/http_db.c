/*
 * http_db: the HTTP thread's read-only database connection (see
 * http_db.h). Its queries read the tables db.c declares (jobs, metrics,
 * events, snapshots, samples); each is prepared once and bounded by a LIMIT.
 */
#include "http_db.h"

#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "http_api.h"
#include "metric_csv.h"

enum http_db_stmt {
    HTTP_DB_JOB,
    HTTP_DB_METRICS,
    HTTP_DB_EVENTS,
    HTTP_DB_SNAPSHOTS,
    HTTP_DB_METRICS_ALL,
    HTTP_DB_CONFIG,
    HTTP_DB_SAMPLES,
    HTTP_DB_COUNT
};

static const char *const http_db_sql[HTTP_DB_COUNT] = {
    [HTTP_DB_JOB] = "SELECT 1 FROM jobs WHERE id = ?1",
    [HTTP_DB_METRICS] = "SELECT " DB_METRIC_COLS " FROM metrics"
                        " WHERE job_id = ?1 AND step >= ?2 ORDER BY step LIMIT ?3",
    /* The newest events, read newest first and sent oldest first. */
    [HTTP_DB_EVENTS] = "SELECT kind, message, step, time FROM events"
                       " WHERE job_id = ?1 ORDER BY id DESC LIMIT ?2",
    [HTTP_DB_SNAPSHOTS] = "SELECT id, step, node, path, size, created FROM snapshots"
                          " WHERE job_id = ?1 ORDER BY step DESC, id DESC LIMIT ?2",
    [HTTP_DB_METRICS_ALL] = "SELECT " DB_METRIC_COLS " FROM metrics"
                            " WHERE job_id = ?1 AND step >= ?2 ORDER BY step, run_id LIMIT ?3",
    [HTTP_DB_CONFIG] = "SELECT name, spec_json, overrides, sweep FROM jobs WHERE id = ?1",
    [HTTP_DB_SAMPLES] = "SELECT " DB_SAMPLE_COLS " FROM samples WHERE job_id = ?1"
                        " ORDER BY id DESC LIMIT ?2",
};

struct http_db {
    sqlite3 *conn;
    sqlite3_stmt *st[HTTP_DB_COUNT];
};

static int http_db_fail(struct http_db *hd, int src, const char *what, struct gpt_err *err)
{
    return gpt_err_set(err, src == SQLITE_NOMEM ? -ENOMEM : -EIO, NULL, "sqlite: %s: %s", what,
                       hd->conn ? sqlite3_errmsg(hd->conn) : sqlite3_errstr(src));
}

int http_db_open(const char *path, struct http_db **ret, struct gpt_err *err)
{
    struct http_db *hd = calloc(1, sizeof(*hd));
    if (!hd)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    int rc = 0;
    int src = sqlite3_open_v2(path, &hd->conn, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
    if (src != SQLITE_OK) {
        rc = http_db_fail(hd, src, path, err);
        goto fail;
    }
    sqlite3_busy_timeout(hd->conn, 1000);
    src = sqlite3_exec(hd->conn, "PRAGMA query_only = ON", NULL, NULL, NULL);
    if (src != SQLITE_OK) {
        rc = http_db_fail(hd, src, path, err);
        goto fail;
    }
    *ret = hd;
    return 0;
fail:
    http_db_close(hd);
    return rc;
}

void http_db_close(struct http_db *hd)
{
    if (!hd)
        return;
    for (int i = 0; i < HTTP_DB_COUNT; i++)
        sqlite3_finalize(hd->st[i]);
    sqlite3_close(hd->conn);
    free(hd);
}

/* The statement `which`, reset, compiled on first use. */
static sqlite3_stmt *http_db_stmt(struct http_db *hd, int which, int *rc, struct gpt_err *err)
{
    if (!hd->st[which]) {
        int src = sqlite3_prepare_v3(hd->conn, http_db_sql[which], -1, SQLITE_PREPARE_PERSISTENT,
                                     &hd->st[which], NULL);
        if (src != SQLITE_OK) {
            *rc = http_db_fail(hd, src, "prepare", err);
            return NULL;
        }
    }
    sqlite3_reset(hd->st[which]);
    sqlite3_clear_bindings(hd->st[which]);
    return hd->st[which];
}

static double http_db_real(sqlite3_stmt *s, int i)
{
    return sqlite3_column_type(s, i) == SQLITE_NULL ? NAN : sqlite3_column_double(s, i);
}

static const char *http_db_text(sqlite3_stmt *s, int i)
{
    const unsigned char *t = sqlite3_column_text(s, i);
    return t ? (const char *)t : "";
}

/* -ENOENT unless the job exists; a new {"job": ID} document otherwise. */
static int http_db_job_doc(struct http_db *hd, int64_t job, json_t **ret, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = http_db_stmt(hd, HTTP_DB_JOB, &rc, err);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, job);
    int src = sqlite3_step(s);
    sqlite3_reset(s);
    if (src == SQLITE_DONE)
        return gpt_err_set(err, -ENOENT, NULL, "no job %lld", (long long)job);
    if (src != SQLITE_ROW)
        return http_db_fail(hd, src, "read job", err);
    json_t *doc = json_pack("{s:I}", "job", (json_int_t)job);
    if (!doc)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    *ret = doc;
    return 0;
}

/* Steps the query to its end, appending each row (made by `row`) to a new
 * array set as doc[key]. Returns rows read or a negative error. */
static int http_db_rows(struct http_db *hd, sqlite3_stmt *s, json_t *doc, const char *key,
                        json_t *(*row)(sqlite3_stmt *s), const char *what, struct gpt_err *err)
{
    json_t *arr = json_array();
    if (!arr || json_object_set_new(doc, key, arr) < 0)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    int n = 0, src;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        json_t *o = row(s);
        if (!o || json_array_append_new(arr, o) < 0) {
            sqlite3_reset(s);
            return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        }
        n++;
    }
    sqlite3_reset(s);
    return src == SQLITE_DONE ? n : http_db_fail(hd, src, what, err);
}

static json_t *http_db_metric_row(sqlite3_stmt *s)
{
    struct gpt_metric m;
    db_metric_read(s, &m);
    return http_api_metric_json(&m);
}

static json_t *http_db_event_row(sqlite3_stmt *s)
{
    struct gpt_event e;
    memset(&e, 0, sizeof(e));
    snprintf(e.kind, sizeof(e.kind), "%s", http_db_text(s, 0));
    snprintf(e.message, sizeof(e.message), "%s", http_db_text(s, 1));
    e.step = sqlite3_column_int64(s, 2);
    e.time = http_db_real(s, 3);
    return http_api_event_json(&e);
}

static json_t *http_db_snapshot_row(sqlite3_stmt *s)
{
    return json_pack(
        "{s:I, s:I, s:o, s:o, s:I, s:f}", "id", (json_int_t)sqlite3_column_int64(s, 0), "step",
        (json_int_t)sqlite3_column_int64(s, 1), "node", http_api_string(http_db_text(s, 2)), "path",
        http_api_string(http_db_text(s, 3)), "size", (json_int_t)sqlite3_column_int64(s, 4),
        "created", sqlite3_column_double(s, 5));
}

static json_t *http_db_sample_row(sqlite3_stmt *s)
{
    struct db_sample r;
    db_sample_read(s, &r);
    return db_sample_json(&r);
}

int http_db_metrics(struct http_db *hd, int64_t job, int64_t since, json_t **ret,
                    struct gpt_err *err)
{
    json_t *doc = NULL;
    int rc = http_db_job_doc(hd, job, &doc, err);
    if (rc < 0)
        return rc;
    sqlite3_stmt *s = http_db_stmt(hd, HTTP_DB_METRICS, &rc, err);
    if (!s)
        goto fail;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int64(s, 2, since);
    sqlite3_bind_int(s, 3, HTTP_API_METRICS_MAX);
    int n = http_db_rows(hd, s, doc, "metrics", http_db_metric_row, "read metrics", err);
    if ((rc = n) < 0)
        goto fail;
    json_t *arr = json_object_get(doc, "metrics");
    json_t *last = n ? json_object_get(json_array_get(arr, (size_t)n - 1), "step") : NULL;
    json_object_set_new(doc, "last",
                        json_integer(last ? json_integer_value(last) : (json_int_t)since - 1));
    json_object_set_new(doc, "more", json_boolean(n == HTTP_API_METRICS_MAX));
    *ret = doc;
    return 0;
fail:
    json_decref(doc);
    return rc;
}

int http_db_metrics_csv(struct http_db *hd, int64_t job, int64_t since, struct metrics_buf *out,
                        int64_t *ret_next, struct gpt_err *err)
{
    json_t *doc = NULL;
    int rc = http_db_job_doc(hd, job, &doc, err);
    json_decref(doc);
    if (rc < 0)
        return rc;
    sqlite3_stmt *s = http_db_stmt(hd, HTTP_DB_METRICS_ALL, &rc, err);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int64(s, 2, since);
    /* One row more than sent: whether the limit cut the records short. */
    sqlite3_bind_int(s, 3, HTTP_API_CSV_ROWS_MAX + 1);
    metrics_buf_printf(out, "%s", gpt_metric_csv_header());
    int n = 0, src;
    *ret_next = 0;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        struct gpt_metric m;
        db_metric_read(s, &m);
        if (n++ == HTTP_API_CSV_ROWS_MAX) {
            *ret_next = m.step;
            break;
        }
        char row[GPT_METRIC_CSV_LINE_MAX];
        if (gpt_metric_csv_row(&m, row, sizeof(row)) > 0)
            metrics_buf_printf(out, "%s", row);
    }
    sqlite3_reset(s);
    if (src != SQLITE_ROW && src != SQLITE_DONE)
        return http_db_fail(hd, src, "read metrics", err);
    if (out->err)
        return gpt_err_set(err, out->err, NULL, "the CSV does not fit in memory");
    return 0;
}

int http_db_events(struct http_db *hd, int64_t job, json_t **ret, struct gpt_err *err)
{
    json_t *doc = NULL;
    int rc = http_db_job_doc(hd, job, &doc, err);
    if (rc < 0)
        return rc;
    sqlite3_stmt *s = http_db_stmt(hd, HTTP_DB_EVENTS, &rc, err);
    if (!s)
        goto fail;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int(s, 2, HTTP_API_EVENTS_MAX);
    if ((rc = http_db_rows(hd, s, doc, "events", http_db_event_row, "read events", err)) < 0)
        goto fail;
    /* Read newest first (for the LIMIT); sent oldest first. */
    json_t *arr = json_object_get(doc, "events");
    for (size_t i = 0, j = json_array_size(arr); i + 1 < j; i++, j--) {
        json_t *a = json_incref(json_array_get(arr, i));
        json_array_set(arr, i, json_array_get(arr, j - 1));
        json_array_set_new(arr, j - 1, a);
    }
    *ret = doc;
    return 0;
fail:
    json_decref(doc);
    return rc;
}

int http_db_snapshots(struct http_db *hd, int64_t job, json_t **ret, struct gpt_err *err)
{
    json_t *doc = NULL;
    int rc = http_db_job_doc(hd, job, &doc, err);
    if (rc < 0)
        return rc;
    sqlite3_stmt *s = http_db_stmt(hd, HTTP_DB_SNAPSHOTS, &rc, err);
    if (!s)
        goto fail;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int(s, 2, HTTP_API_SNAPSHOTS_MAX);
    if ((rc = http_db_rows(hd, s, doc, "snapshots", http_db_snapshot_row, "read snapshots", err)) <
        0)
        goto fail;
    *ret = doc;
    return 0;
fail:
    json_decref(doc);
    return rc;
}

/* A JSON object stored as text (spec_json, overrides); {} when the column
 * is empty or not an object, so the page always gets an object. */
static json_t *http_db_object(sqlite3_stmt *s, int i)
{
    json_t *o = json_loads(http_db_text(s, i), 0, NULL);
    if (json_is_object(o))
        return o;
    json_decref(o);
    return json_object();
}

int http_db_config(struct http_db *hd, int64_t job, json_t **ret, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = http_db_stmt(hd, HTTP_DB_CONFIG, &rc, err);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, job);
    int src = sqlite3_step(s);
    if (src != SQLITE_ROW) {
        sqlite3_reset(s);
        if (src == SQLITE_DONE)
            return gpt_err_set(err, -ENOENT, NULL, "no job %lld", (long long)job);
        return http_db_fail(hd, src, "read job", err);
    }
    json_t *doc =
        json_pack("{s:I, s:o, s:o, s:o, s:o}", "job", (json_int_t)job, "name",
                  http_api_string(http_db_text(s, 0)), "spec", http_db_object(s, 1), "overrides",
                  http_db_object(s, 2), "sweep", http_api_string(http_db_text(s, 3)));
    sqlite3_reset(s);
    if (!doc)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    *ret = doc;
    return 0;
}

int http_db_samples(struct http_db *hd, int64_t job, json_t **ret, struct gpt_err *err)
{
    json_t *doc = NULL;
    int rc = http_db_job_doc(hd, job, &doc, err);
    if (rc < 0)
        return rc;
    sqlite3_stmt *s = http_db_stmt(hd, HTTP_DB_SAMPLES, &rc, err);
    if (!s)
        goto fail;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int(s, 2, DB_SAMPLES_MAX);
    if ((rc = http_db_rows(hd, s, doc, "samples", http_db_sample_row, "read samples", err)) < 0)
        goto fail;
    *ret = doc;
    return 0;
fail:
    json_decref(doc);
    return rc;
}
