/*
 * notify: gptd's side of systemd's service notification protocol
 * (sd_notify(3)), for Type=notify units: READY=1 once gptd serves,
 * STATUS= one line of state for `systemctl status`, WATCHDOG=1 pings for
 * WatchdogSec=, RELOADING=1 around a SIGHUP reload and STOPPING=1 on
 * SIGTERM.
 *
 * With libsystemd (GPTD_HAVE_SYSTEMD) the messages go through sd_notify();
 * without it, through a self-contained implementation of the same datagram
 * protocol. Either way every function is a no-op returning 0 when
 * NOTIFY_SOCKET is unset (gptd started by hand or by a test), so callers
 * never need to know whether systemd is there. Failures are returned, never
 * logged: a lost notification is not a reason to stop serving.
 *
 * Any thread may call these functions (each sends one datagram); gptd
 * calls them from the loop thread. They do not block beyond one sendmsg(2)
 * on a local datagram socket.
 */
#ifndef GPTD_NOTIFY_H
#define GPTD_NOTIFY_H

#include <stdint.h>

/* Longest STATUS= text sent; longer text is cut. */
#define NOTIFY_STATUS_MAX 256

/* READY=1: the configuration is loaded, migrations ran and every socket
 * gptd serves listens. Sent again after a reload finished. Returns 0 (sent,
 * or nobody to tell) or a negative errno. */
int notify_ready(void);

/* STATUS=<text>, printf-style. Newlines in the text become spaces so the
 * status stays one line. Returns 0 or a negative errno. */
int notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* STOPPING=1: gptd started its graceful stop (SIGTERM). Returns 0 or a
 * negative errno. */
int notify_stopping(void);

/* RELOADING=1 with MONOTONIC_USEC= (as Type=notify-reload wants): a SIGHUP
 * reload began; follow it with notify_ready() when it is done. Returns 0 or
 * a negative errno. */
int notify_reloading(void);

/* WATCHDOG=1: the loop is alive. Returns 0 or a negative errno. */
int notify_watchdog(void);

/* How often to call notify_watchdog(): half of the WatchdogSec= systemd
 * passes in WATCHDOG_USEC (only when WATCHDOG_PID is unset or names this
 * process), in milliseconds and at least 1; 0 when no watchdog is
 * configured. */
uint64_t notify_watchdog_interval_ms(void);

#endif
