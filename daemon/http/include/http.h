/*
 * http: gptd's read-only HTTP listener (`http = ADDR:PORT`), serving
 * GET/HEAD /metrics in Prometheus text format, the dashboard (its files
 * embedded at build time, http_web.h) and the dashboard's JSON documents
 * under /api/ (http_api.h): /api/jobs and /api/nodes as the loop last
 * published them, the per-job ones read by this thread's own read-only
 * database connection (http_db.h). libmicrohttpd parses HTTP
 * and runs the listener on its own thread; that thread never touches
 * loop-owned objects. The loop renders the metrics text (http_collect.c)
 * and hands it over with http_publish; the HTTP thread copies the newest
 * text under a mutex and appends the GPU families it samples itself
 * (nvml.h, when the library is present).
 *
 * Nothing served here changes anything: every method but GET and HEAD is
 * refused (405), a request with a body is refused (413), headers beyond
 * http_request_max_bytes are refused by libmicrohttpd (431/414). With a
 * token file every request but those for the dashboard's own files (which
 * hold no data) must carry "Authorization: Bearer TOKEN" or gets 401; a listener on a non-loopback
 * address must have one. A loopback listener answers only a Host: that is
 * localhost, a loopback address or a name in http_allowed_hosts (421
 * otherwise: no DNS rebinding). Idle and slow connections are closed, and
 * one beyond http_max_connections displaces the oldest idle one or gets
 * 503 (http_conns.h): the listener never leaves a client in the backlog.
 */
#ifndef GPTD_HTTP_H
#define GPTD_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "gpt_err.h"
#include "metrics_text.h"

struct http_opts {
    const char *addr;          /* "HOST:PORT", numeric host; port 0: the kernel picks */
    const char *token_file;    /* "" or NULL: no token (loopback only) */
    const char *allowed_hosts; /* http_allowed_hosts: Host: names a loopback
                                  listener answers besides localhost */
    int max_connections;       /* served at once (http_conns.h) */
    int timeout_s;             /* a connection waits this long for its request */
    size_t request_max_bytes;  /* per-connection memory for the request (headers) */
    const char *node;          /* this node's name, the GPU series' label */
    const char *nvml_library;  /* NULL: NVML_LIBRARY */
    const char *db_path;       /* gptd's database, read by the dashboard's per-job
                                  documents (http_db.h); NULL: they answer 404 */
};

struct http;

/* Checks an `http` value and its token file setting without binding:
 * `addr` must be a numeric HOST:PORT; a non-loopback host needs a token
 * file. Sets *ret_loopback. Pure; any thread. */
int http_addr_check(const char *addr, const char *token_file, bool *ret_loopback,
                    struct gpt_err *err);

/* Checks an http_allowed_hosts value: names of letters, digits, '-' and
 * '.', separated by ',' or blanks. Pure; any thread. */
int http_hosts_check(const char *list, struct gpt_err *err);

/* Loads the token (checked like the cluster secret: a regular file, mode
 * 0600 or stricter, 16..4096 bytes, printable), opens NVML if present,
 * binds and starts the HTTP thread. *ret_port gets the bound port.
 * Main/loop thread; blocks on file I/O. */
int http_start(const struct http_opts *o, struct http **ret, int *ret_port, struct gpt_err *err);

/* Publishes the newest metrics text (takes b's text; b is left empty).
 * Loop thread; holds the mutex only for a pointer swap. */
void http_publish(struct http *h, struct metrics_buf *b);

/* Publishes the newest /api/jobs and /api/nodes documents (takes both
 * strings; NULL: that document is not available yet). Loop thread; holds
 * the mutex only for the pointer swap. */
void http_publish_api(struct http *h, char *jobs_json, char *nodes_json);

/* Closes the connections that waited for their request longer than
 * http_timeout_s (http_conns.h). Returns how many. Loop thread (the
 * periodic tick); does not block. */
int http_sweep(struct http *h);

/* True when the GPU library was loaded. */
bool http_has_gpus(const struct http *h);

/* Stops the HTTP thread (waiting for it) and frees. NULL allowed. */
void http_stop(struct http *h);

#endif
