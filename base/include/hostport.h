/*
 * hostport: the one parser of "HOST:PORT" endpoints (--rdzv, rdzv in
 * gptd.conf, --coordinator's bind address, the engine's TCP ring peers):
 * the last ':' splits, "[v6]:PORT" loses its brackets, the port is decimal
 * in [port_min, 65535]. Pure; any thread.
 */
#ifndef GPTD_HOSTPORT_H
#define GPTD_HOSTPORT_H

#include <stddef.h>

#include "gpt_err.h"

/* Splits `s` into host (copied into `host`, `cap` bytes with the NUL) and
 * port. port_min is 0 where an ephemeral port is allowed, else 1.
 * -EINVAL with err naming `what` (path) and the text when the host is
 * empty or longer than cap - 1, or the port is not a number in range. */
int hostport_parse(const char *s, int port_min, const char *what, char *host, size_t cap,
                   int *ret_port, struct gpt_err *err);

#endif
