/*
 * http_collect: the loop's side of /metrics. Once a second (the daemon's
 * tick) it gathers what the metrics show from loop-owned objects (the
 * database's newest jobs and their newest metric records, the cluster's
 * node table, control and store counters, named by a struct
 * http_collect_src) into a struct metrics_view and
 * renders it (metrics_text.h); the caller publishes the text to the HTTP
 * thread (http_publish). It keeps, per job, the newest values read so far
 * so that each tick reads only the metric records that arrived since.
 *
 * Loop thread only.
 */
#ifndef GPTD_HTTP_COLLECT_H
#define GPTD_HTTP_COLLECT_H

#include "metrics_text.h"

#define HTTP_COLLECT_JOBS_MAX  64 /* the newest jobs exported */
#define HTTP_COLLECT_NODES_MAX 1024
#define HTTP_COLLECT_READ_MAX  2000 /* metric records read per job per tick (catch-up) */

struct http_collect;
struct userwork;
struct cluster;
struct control;
struct db;

/* What the metrics are gathered from, borrowed for the call: the daemon's
 * own loop-owned objects (NULL: none here), not the daemon itself. */
struct http_collect_src {
    struct db *db;             /* the queue of record */
    struct cluster *cluster;   /* NULL: not in a cluster */
    struct control *ctl;       /* the control socket (its client count) */
    struct userwork *userwork; /* the user work pool (its counts); NULL: none */
    const char *node;          /* this gptd's node name */
    double started;            /* unix seconds */
};

/* New, empty; NULL on ENOMEM. */
struct http_collect *http_collect_new(void);
void http_collect_free(struct http_collect *hc);

/* Renders the current state into b (appended). `now`: unix seconds. */
void http_collect_render(struct http_collect *hc, const struct http_collect_src *s, double now,
                         struct metrics_buf *b);

/* The dashboard's /api/jobs and /api/nodes documents of the state the
 * last http_collect_render gathered (new strings, NULL on ENOMEM). */
void http_collect_api(struct http_collect *hc, const struct http_collect_src *s, double now,
                      char **ret_jobs, char **ret_nodes);

#endif
