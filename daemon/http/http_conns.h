/*
 * http_conns: the HTTP listener's table of open connections, which keeps
 * idle and slow clients from taking the listener away from everyone else.
 *
 * A connection is "waiting" from its start, and again from the end of each
 * reply, until its next request has fully arrived (libmicrohttpd calls the
 * access handler only then); it is "busy" while a request is answered. A
 * waiting connection is closed when it has waited longer than the timeout
 * (a client that sends nothing, or its headers a byte at a time), and the
 * oldest waiting one is closed to make room when a connection beyond the
 * limit arrives, so the listener keeps accepting and never leaves a client
 * in the kernel's backlog. Only when every connection is busy does a new
 * one stay over the limit: its request is answered 503.
 *
 * Closing is shutdown(2) of the socket, never close(2): libmicrohttpd owns
 * the descriptor, sees the end of the stream and closes it itself. The
 * table is locked, so the loop thread's sweep and the HTTP thread's
 * callbacks may meet; an entry is removed (http_conns_close) before
 * libmicrohttpd closes its descriptor, so a shutdown under the lock never
 * reaches a reused descriptor number.
 */
#ifndef GPTD_HTTP_CONNS_H
#define GPTD_HTTP_CONNS_H

#include <stdbool.h>
#include <stdint.h>

struct http_conns;
struct http_conn;

/* A table for at most `max` connections served at once; a connection may
 * wait `timeout_ms` for its request. Returns new (free with
 * http_conns_free), NULL when out of memory. Any thread. */
struct http_conns *http_conns_new(int max, int64_t timeout_ms);

/* Frees the table and its entries (their sockets are libmicrohttpd's).
 * NULL allowed. */
void http_conns_free(struct http_conns *t);

/* A connection on socket `fd` started at `now_ms`: recorded as waiting;
 * when the table is full, the oldest other waiting connection is shut
 * down. Returns the entry (owned by the table until http_conns_close), NULL
 * when out of memory (the connection is then not tracked). HTTP thread. */
struct http_conn *http_conns_open(struct http_conns *t, int fd, int64_t now_ms);

/* The connection's socket is about to be closed: forgets and frees the
 * entry. NULL allowed. HTTP thread. */
void http_conns_close(struct http_conns *t, struct http_conn *c);

/* A request arrived on the connection: marks it busy. Returns true when
 * the connection came beyond the limit and nothing could make room (answer
 * 503 and close it). NULL allowed (false). HTTP thread. */
bool http_conns_request(struct http_conns *t, struct http_conn *c);

/* The connection's request was answered at `now_ms`: it waits again.
 * NULL allowed. HTTP thread. */
void http_conns_request_done(struct http_conns *t, struct http_conn *c, int64_t now_ms);

/* Shuts down every connection that has waited past the timeout at
 * `now_ms`. Returns how many. Any thread; does not block. */
int http_conns_sweep(struct http_conns *t, int64_t now_ms);

/* Connections tracked and not shut down (for tests and logs). Any thread. */
int http_conns_live(struct http_conns *t);

#endif
