/*
 * monotime: the one monotonic clock (CLOCK_MONOTONIC) of the engine, the
 * daemon and gptctl, for deadlines, timeouts, periods and step timings;
 * never for timestamps a user sees (those are CLOCK_REALTIME). Any
 * thread; never blocks (but monotime_sleep_ms).
 */
#ifndef GPTD_MONOTIME_H
#define GPTD_MONOTIME_H

#include <stdint.h>

/* Seconds since an arbitrary fixed point, with nanosecond resolution. */
double monotime_s(void);
/* Milliseconds since the same point. */
int64_t monotime_ms(void);
/* Microseconds since the same point (sd_notify's MONOTONIC_USEC). */
int64_t monotime_us(void);
/* Nanoseconds since the same point. */
int64_t monotime_ns(void);
/* Sleeps `ms` milliseconds (0 or less: returns at once; a signal may end
 * it early, so callers that poll re-check their deadline). Blocks the
 * calling thread: never on the loop thread. */
void monotime_sleep_ms(int ms);
/* One nap of a polling wait that backs off: sleeps *ns nanoseconds (a
 * signal may end it early), then doubles *ns up to max_ns. The caller
 * starts *ns at its first nap. The kernel's timer slack (50 us by default
 * for a normal thread) lengthens short naps; bench_poll_backoff measures
 * what a wait loses to them. Blocks the calling thread. */
void monotime_nap_backoff(long *ns, long max_ns);

#endif
