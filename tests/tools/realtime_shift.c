/*
 * realtime_shift: an LD_PRELOAD library for tests (libfaketime's idea, in
 * one file): CLOCK_REALTIME (clock_gettime, gettimeofday, time) runs
 * shifted by the number of seconds written in the file that
 * GPTD_TEST_REALTIME_SHIFT names, read again at most every 10 ms, so a
 * test steps the wall clock of the processes it started back and forth
 * while they run, without touching the host's clock. CLOCK_MONOTONIC and
 * every other clock are left alone: what must not notice the step is
 * exactly what uses them.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int clock_gettime(clockid_t id, struct timespec *ts);
int gettimeofday(struct timeval *restrict tv, void *restrict tz);
time_t time(time_t *t);

static _Atomic int64_t shift_s;
static _Atomic int64_t read_at_ns = -1; /* monotonic ns of the last read, -1 none */

static int64_t raw_ns(clockid_t id)
{
    struct timespec ts;
    if (syscall(SYS_clock_gettime, id, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The shift in seconds, from the file (kept when it cannot be read). */
static int64_t shift_now(void)
{
    int64_t mono = raw_ns(CLOCK_MONOTONIC);
    int64_t last = atomic_load(&read_at_ns);
    if (last >= 0 && mono - last < 10000000)
        return atomic_load(&shift_s);
    atomic_store(&read_at_ns, mono);
    const char *path = getenv("GPTD_TEST_REALTIME_SHIFT");
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd >= 0) {
        char buf[32] = "";
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n > 0)
            atomic_store(&shift_s, strtoll(buf, NULL, 10));
    }
    return atomic_load(&shift_s);
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    if (syscall(SYS_clock_gettime, id, ts) != 0)
        return -1;
    if (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)
        ts->tv_sec += (time_t)shift_now();
    return 0;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
    (void)tz;
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *t)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t)
        *t = ts.tv_sec;
    return ts.tv_sec;
}
