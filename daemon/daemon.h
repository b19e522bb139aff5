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
#include "userwork.h"

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
    struct mirror *mirror;     /* a member's view of the coordinator's jobs */
    struct userwork *userwork; /* sample, export, resume-from copies; NULL before start */
    double started;            /* unix seconds */
    bool stopping;
};

/* Handles one decoded request (handlers.c): looks up the op's handler in a const
 * table and replies (or starts a stream). */
void handler_dispatch(struct daemon_ctx *d, struct control_client *cl, struct gpt_ctl_request *req);

/* The coordinator's answer to a read a member forwarded (cluster_read_fn;
 * ctx is the daemon_ctx). */
int handler_read(void *ctx, const struct cluster_msg *m, json_t **ret, struct gpt_err *err);

#endif
