/*
 * http_api: the dashboard's JSON documents (GET /api/...) and the parsing of
 * their URLs. Pure: strings and structs in, JSON text or a route out; no
 * clock, no I/O, no globals, so the unit test and the fuzz target call it
 * directly. Any thread: the loop builds /api/jobs and /api/nodes once a
 * second (http_collect.c), the HTTP thread parses URLs and builds the
 * per-job documents from its own database reader (http_db.c).
 *
 * Every string in a document comes from a user or a peer (job names, event
 * messages, paths, node names): jansson escapes it as JSON, and the page
 * puts it into the DOM only as text (textContent), never as markup.
 * Documents are dumped with JSON_ENSURE_ASCII | JSON_ESCAPE_SLASH (no
 * "</" in them) and served as application/json with nosniff.
 */
#ifndef GPTD_HTTP_API_H
#define GPTD_HTTP_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpt_err.h"
#include "metric.h"
#include "metrics_text.h"

#define HTTP_API_METRICS_MAX   1000  /* metric records per /metrics document */
#define HTTP_API_EVENTS_MAX    200   /* newest events per /events document */
#define HTTP_API_SNAPSHOTS_MAX 200   /* newest snapshots per /snapshots document */
#define HTTP_API_URL_MAX       256   /* longer URLs are not ours: 404 */
#define HTTP_API_CSV_ROWS_MAX  50000 /* metric rows per ?format=csv reply (about 10 MB) */

enum http_api_what {
    HTTP_API_NONE,      /* not an /api/ URL we serve */
    HTTP_API_JOBS,      /* /api/jobs */
    HTTP_API_NODES,     /* /api/nodes */
    HTTP_API_METRICS,   /* /api/jobs/ID/metrics[?since=STEP] */
    HTTP_API_EVENTS,    /* /api/jobs/ID/events */
    HTTP_API_SNAPSHOTS, /* /api/jobs/ID/snapshots */
    HTTP_API_CONFIG,    /* /api/jobs/ID/config */
    HTTP_API_SAMPLES,   /* /api/jobs/ID/samples */
};

struct http_api_route {
    enum http_api_what what;
    int64_t job;   /* > 0 for the per-job documents */
    int64_t since; /* metrics: first step wanted (>= 0) */
};

/* Parses a decimal count: digits only (no sign, space or "0x"), at most
 * 18 of them, no leading zero but "0" itself. 0 and *ret on success,
 * -EINVAL otherwise. `s` may be NULL (-EINVAL). */
int http_api_parse_count(const char *s, int64_t *ret);

/* Routes a request: `url` is the path libmicrohttpd decoded (no query),
 * `since` the value of the since argument (NULL: absent). Returns 0 with
 * *ret filled (what = HTTP_API_NONE for a URL that is not ours), or
 * -EINVAL (err says which part) for one of ours with a bad job id or
 * since (400). */
int http_api_route(const char *url, const char *since, struct http_api_route *ret,
                   struct gpt_err *err);

/* The format argument (NULL: absent): "json" (the default) or "csv",
 * which only /api/jobs/ID/metrics serves (metric_csv.h's columns). 0 and
 * *ret_csv, or -EINVAL (err says why: 400). */
int http_api_format(const char *format, enum http_api_what what, bool *ret_csv,
                    struct gpt_err *err);

/* A job of /api/jobs: the fields of struct metrics_job the table shows. */
json_t *http_api_job_json(const struct metrics_job *j);
/* {"node","role","time","jobs":[...]} from the loop's view (v->jobs). */
json_t *http_api_jobs_doc(const struct metrics_view *v);
/* {"nodes":[...]} from cluster_nodes_json's array (borrowed): only the
 * keys the page shows are copied (node, state, heartbeat_age_s, workers,
 * devices, version, member, ranks, role, gpus). NULL on ENOMEM. */
json_t *http_api_nodes_doc(const json_t *cluster_nodes);

/* A JSON string of s (NULL: ""); invalid UTF-8 (a hostile name or message)
 * is sent escaped as \xNN rather than dropped. NULL on ENOMEM. */
json_t *http_api_string(const char *s);

/* Records of the per-job documents. */
/* step, loss, val_loss?, lr, time, tokens, grad_norm, tokens_per_s, mfu,
 * mem_bytes (a rank's parameters, gradients, optimizer state and
 * activations together) */
json_t *http_api_metric_json(const struct gpt_metric *m);
json_t *http_api_event_json(const struct gpt_event *e); /* kind, message, step, time */

/* Dumps a document (JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ESCAPE_SLASH)
 * and drops the reference. Returns new text (free), NULL on ENOMEM or a
 * NULL doc. */
char *http_api_dump(json_t *doc);

#endif
