/*
 * control_limits: per-uid connection cap and idle timeout of control
 * clients (see control_limits.h). Owns nothing: it reads the clients'
 * public fields and closes through control.h. Loop thread only.
 *
 * Why both: max_clients alone lets one user take every connection (64 idle
 * sockets lock everyone else out); the per-uid cap bounds what one user
 * holds, and the idle timeout frees what a forgotten or hostile client
 * holds. A follower (`logs -f`) and a pending `sample` wait on gptd, not on
 * the peer, so they are never idle; a follower that stops reading is bounded
 * by client_output_max_bytes (control_send) and dropped once its queued
 * output has gone unread for the idle timeout.
 */
#include "control_limits.h"

#include <errno.h>

#include "log.h"

struct limits_count {
    uid_t uid;
    int n;
};

static void limits_count_uid(void *ctx, struct control_client *cl)
{
    struct limits_count *c = ctx;
    if (cl->uid == c->uid)
        c->n++;
}

int control_limits_admit(struct control *srv, const struct control_client *cl,
                         const struct config *cfg, struct gpt_err *err)
{
    struct limits_count c = {cl->uid, 0};
    control_foreach(srv, limits_count_uid, &c);
    if (c.n <= cfg->max_clients_per_uid)
        return 0;
    return gpt_err_set(err, -GPT_E_LIMIT, NULL,
                       "uid %u already holds %d control connections (max_clients_per_uid = %d)",
                       (unsigned)cl->uid, c.n - 1, cfg->max_clients_per_uid);
}

struct limits_sweep {
    const struct config *cfg;
    uint64_t now_ms;
};

static void limits_sweep_one(void *ctx, struct control_client *cl)
{
    const struct limits_sweep *s = ctx;
    uint64_t limit_ms = (uint64_t)s->cfg->client_idle_timeout_s * 1000;
    if (cl->closing || s->now_ms < cl->last_active_ms || s->now_ms - cl->last_active_ms < limit_ms)
        return;
    if (cl->logs.active && cl->writes_pending > 0) {
        /* A follower whose output has waited that long unread: it has
         * stopped reading (one that reads slowly catches up from the
         * database instead, daemon/jobs/follow.c). */
        log_warn("control: client pid %d uid %u is not reading (%zu bytes queued, none taken for"
                 " %d s: client_idle_timeout_s); disconnecting it",
                 (int)cl->pid, (unsigned)cl->uid, cl->bytes_pending, s->cfg->client_idle_timeout_s);
        control_client_drop(cl);
        return;
    }
    if (cl->busy > 0 || cl->logs.active)
        return;
    log_info("control: client pid %d uid %u idle for %d s (client_idle_timeout_s); closing it",
             (int)cl->pid, (unsigned)cl->uid, s->cfg->client_idle_timeout_s);
    if (cl->writes_pending > 0) {
        /* It does not read what it has: a goodbye would wait behind that. */
        control_client_drop(cl);
        return;
    }
    cl->last_active_ms = s->now_ms; /* one goodbye per timeout while the shutdown drains */
    struct gpt_err err;
    gpt_err_set(&err, -ETIMEDOUT, NULL,
                "no complete request for %d s (client_idle_timeout_s); closing the connection",
                s->cfg->client_idle_timeout_s);
    if (control_reply_err(cl, NULL, -ETIMEDOUT, &err) == 0)
        control_client_shutdown(cl);
}

void control_limits_sweep(struct control *srv, const struct config *cfg, uint64_t now_ms)
{
    if (!srv || cfg->client_idle_timeout_s <= 0)
        return;
    struct limits_sweep s = {cfg, now_ms};
    control_foreach(srv, limits_sweep_one, &s);
}
