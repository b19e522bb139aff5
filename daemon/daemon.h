/*
 * daemon: the pieces of a running gptd, as the control ops see them.
 * Built and torn down by gptd_daemon_main (daemon.c); loop thread only.
 */
#ifndef GPTD_DAEMON_H
#define GPTD_DAEMON_H

#include <stdbool.h>
#include <uv.h>

#include "agent.h"
#include "cluster.h"
#include "config.h"
#include "control.h"
#include "ctl.h"
#include "db.h"
#include "jobs.h"
#include "mirror.h"

#ifndef GPTD_VERSION
#define GPTD_VERSION "0.1.0"
#endif

struct daemon_ctx {
    uv_loop_t *loop;
    struct config cfg;
    struct db *db;
    struct control *ctl;
    struct jobs *jobs;
    struct cluster *cluster; /* NULL only before it started */
    struct agent *agent;
    struct mirror *mirror; /* a member's view of the coordinator's jobs */
    double started;        /* unix seconds */
    bool stopping;
    /* submit --resume-from (handlers_resume_from.c): copies under way, and
     * those waiting for their turn, oldest first. */
    int rf_running;
    struct handler_rf *rf_wait, *rf_wait_tail;
};

/* Handles one decoded request (handlers.c): looks up the op's handler in a const
 * table and replies (or starts a stream). */
void handler_dispatch(struct daemon_ctx *d, struct control_client *cl, struct gpt_ctl_request *req);

/* The coordinator's answer to a read a member forwarded (cluster_read_fn;
 * ctx is the daemon_ctx). */
int handler_read(void *ctx, const struct cluster_msg *m, json_t **ret, struct gpt_err *err);

/* A stop has begun (d->stopping; handlers_resume_from.c): the
 * --resume-from submits still waiting for their turn are refused now,
 * while their clients can be answered (the copy under way ends only after
 * the control socket has closed). Nothing of theirs was recorded. */
void handler_resume_from_stop(struct daemon_ctx *d);

#endif
