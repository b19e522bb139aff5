/*
 * control: the Unix control socket server on the libuv loop. Accepts
 * connections (bounded), records each peer's uid (SO_PEERCRED), splits the
 * input into bounded lines, decodes each with proto/ctl and hands the
 * request to one callback; queues replies with a byte bound per client, so
 * a client that stops reading is disconnected instead of growing gptd's
 * memory.
 *
 * Loop thread only. Clients are freed in their close callback once no one
 * holds a reference (a pending `sample` does).
 */
#ifndef GPTD_CONTROL_H
#define GPTD_CONTROL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "config.h"
#include "ctl.h"
#include "gpt_err.h"

struct control;

/* The one `logs` stream a connection may have at a time (see jobs.c). */
struct control_logs {
    bool active;
    bool follow;    /* stay for live records until the job ends */
    bool replaying; /* still sending history from SQLite */
    json_t *id;     /* the logs request's id (owned) */
    int64_t job;
    int64_t since;  /* first step wanted */
    int64_t after;  /* last metric step sent (a member's live records after replay) */
    int64_t cursor; /* replay position (db_history_page's key); -1 before the first */
    int64_t until;  /* without follow, of a running job: the history ends here (-1: all) */
    /* a member's stream of the coordinator's job (daemon/mirror.h) */
    bool remote;
    bool pending;      /* a history chunk is being fetched */
    uint64_t feed_seq; /* live: feed records up to this one are sent */
};

struct control_client {
    uv_pipe_t pipe;
    struct control *srv;
    struct gpt_ctl_linebuf lb;
    uid_t uid;
    pid_t pid;
    unsigned refs;
    bool closing;
    bool eof;                /* the peer finished sending */
    unsigned busy;           /* requests still being worked on (sample) */
    size_t writes_pending;   /* uv_write requests not yet completed */
    size_t bytes_pending;    /* their bytes */
    uint64_t last_active_ms; /* uv_now of the last complete request or output taken */
    struct control_logs logs;
    struct control_client *prev, *next;
};

struct control_hooks {
    void *ctx;
    /* A decoded request; `req` is borrowed for the call (take references to
     * keep parts of it). */
    void (*request)(void *ctx, struct control_client *cl, struct gpt_ctl_request *req);
    /* Every queued write of the client has completed. */
    void (*drained)(void *ctx, struct control_client *cl);
    /* The client is closing: drop anything that points at it. */
    void (*closed)(void *ctx, struct control_client *cl);
    /* A just-accepted client (already counted among srv's clients), past
     * max_clients: 0 admits it; below 0 refuses it with err, which the
     * client is sent (the daemon checks control_limits here). NULL: all. */
    int (*admit)(void *ctx, struct control *srv, const struct control_client *cl,
                 struct gpt_err *err);
};

/* Binds and listens on cfg->socket (a stale socket file is replaced; a live
 * one is -EADDRINUSE), applies socket_mode and socket_group. `cfg` is
 * borrowed and read live (reloadable limits). */
int control_start(uv_loop_t *loop, const struct config *cfg, const struct control_hooks *hooks,
                  struct control **ret, struct gpt_err *err);

/* Stops accepting new connections (the socket file is removed). */
void control_stop_listening(struct control *srv);

/* Closes every client and the listener; `srv` is freed once every handle's
 * close callback ran. NULL allowed. */
void control_close(struct control *srv);

/* Queues one line (takes `line`, malloc'd, `len` bytes ending in '\n').
 * Returns -EPIPE when the client is closing, -ENOBUFS when the queue passed
 * client_output_max_bytes (the client is then disconnected). */
int control_send(struct control_client *cl, char *line, size_t len);
/* Convenience: gpt_ctl_reply_ok / gpt_ctl_reply_from_err, then send. */
int control_reply_ok(struct control_client *cl, const json_t *id, json_t *result);
int control_reply_err(struct control_client *cl, const json_t *id, int rc,
                      const struct gpt_err *err);

/* Closes a client at once; queued output is dropped. */
void control_client_drop(struct control_client *cl);
/* Closes a client after its queued output is written. */
void control_client_shutdown(struct control_client *cl);
/* Once the peer has finished sending and nothing is left to answer (no
 * logs stream, no pending request), closes after the output is written.
 * Call after ending a stream or finishing a request. */
void control_client_idle_check(struct control_client *cl);
void control_client_ref(struct control_client *cl);
void control_client_unref(struct control_client *cl);

/* Calls fn for each open client. fn may send (and so disconnect) but must
 * not close other clients. */
void control_foreach(struct control *srv, void (*fn)(void *ctx, struct control_client *cl),
                     void *ctx);
/* Connected clients. */
int control_client_count(const struct control *srv);

#endif
