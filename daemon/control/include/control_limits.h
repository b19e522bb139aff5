/*
 * control_limits: what keeps one client, or one user, from holding the
 * control socket: a cap on the connections of one uid (max_clients_per_uid)
 * and the idle timeout (client_idle_timeout_s). Built on control.h's public
 * interface only (control.c does not include it): the daemon passes the
 * admission check as control.h's admit hook and calls the sweep from its
 * periodic tick.
 *
 * Loop thread only.
 */
#ifndef GPTD_CONTROL_LIMITS_H
#define GPTD_CONTROL_LIMITS_H

#include <stdint.h>

#include "config.h"
#include "control.h"
#include "gpt_err.h"

/* Checks a just-accepted client (already counted among srv's clients)
 * against max_clients_per_uid. Returns 0, or -GPT_E_LIMIT with err naming
 * the uid, its count and the option. Does not block. */
int control_limits_admit(struct control *srv, const struct control_client *cl,
                         const struct config *cfg, struct gpt_err *err);

/* Closes every client idle for client_idle_timeout_s or more at `now_ms`
 * (uv_now): no request in progress, no logs stream, and neither a complete
 * request nor output taken by the peer since cl->last_active_ms. The peer
 * gets an error line first when it still has room to take it. */
void control_limits_sweep(struct control *srv, const struct config *cfg, uint64_t now_ms);

#endif
