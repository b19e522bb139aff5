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

#endif
