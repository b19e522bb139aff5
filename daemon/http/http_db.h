/*
 * http_db: the HTTP thread's own read-only connection to gptd's database,
 * for the dashboard's per-job documents (a job's metrics since a step, its
 * newest events and snapshots). It is a second SQLite connection, opened
 * read-only (SQLITE_OPEN_READONLY, PRAGMA query_only) on the file the
 * loop's connection (db.h) writes in WAL mode: readers never block the
 * writer and see its last commit. It is not the loop's struct db and
 * shares nothing with it.
 *
 * Thread: the HTTP thread only (libmicrohttpd's one polling thread), one
 * call at a time. Calls block for one small query (a busy timeout of
 * 1 s; every query is bounded by a LIMIT).
 */
#ifndef GPTD_HTTP_DB_H
#define GPTD_HTTP_DB_H

#include <jansson.h>
#include <stdint.h>

#include "gpt_err.h"
#include "metrics_text.h"

struct http_db;

/* Opens `path` read-only. The file must exist (the daemon created it
 * before the listener starts). 0 and a new handle, or -EIO. */
int http_db_open(const char *path, struct http_db **ret, struct gpt_err *err);
/* NULL allowed. */
void http_db_close(struct http_db *hd);

/* The per-job documents; each returns 0 and a new JSON object in *ret,
 * -ENOENT when the database has no job `job`, -EIO (err) when a query
 * fails.
 *   metrics:   {"job","metrics":[{step,loss,val_loss?,lr,time,tokens,grad_norm,
 *              tokens_per_s,mfu,mem_bytes}],"last","more"}
 *              steps >= since, by step, at most HTTP_API_METRICS_MAX; "last"
 *              the last step sent (since - 1 when none), "more" true when
 *              the limit cut it short.
 *   events:    {"job","events":[{kind,message,step,time}]} the newest
 *              HTTP_API_EVENTS_MAX, oldest first.
 *   snapshots: {"job","snapshots":[{id,step,node,path,size,created}]} the
 *              newest HTTP_API_SNAPSHOTS_MAX, newest first.
 *   config:    {"job","name","spec","overrides","sweep"}: the resolved job
 *              spec as the coordinator keeps it, the overrides that set a
 *              sweep's job apart ({} none) and its sweep ("" none).
 *   samples:   {"job","samples":[db_sample_json's records]} the `sample`
 *              replies kept for the job (sample_history), newest first. */
int http_db_metrics(struct http_db *hd, int64_t job, int64_t since, json_t **ret,
                    struct gpt_err *err);
/* The job's metric records with step >= since as CSV (metric_csv.h), the
 * header first, by step (a resumed job's runs at one step by run), at most
 * HTTP_API_CSV_ROWS_MAX rows appended to *out; *ret_next the since that
 * continues them, 0 when none are left. -ENOENT, -EIO as above; -ENOMEM
 * or -E2BIG from the buffer. */
int http_db_metrics_csv(struct http_db *hd, int64_t job, int64_t since, struct metrics_buf *out,
                        int64_t *ret_next, struct gpt_err *err);
int http_db_events(struct http_db *hd, int64_t job, json_t **ret, struct gpt_err *err);
int http_db_snapshots(struct http_db *hd, int64_t job, json_t **ret, struct gpt_err *err);
int http_db_config(struct http_db *hd, int64_t job, json_t **ret, struct gpt_err *err);
int http_db_samples(struct http_db *hd, int64_t job, json_t **ret, struct gpt_err *err);

#endif
