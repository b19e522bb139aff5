/*
 * log: see log.h.
 */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int log_max_level = LOG_LVL_INFO;

void log_set_level(int level)
{
    atomic_store(&log_max_level, level);
}

static const char *const level_names[8] = {
    [LOG_LVL_ERR] = "error", [LOG_LVL_WARN] = "warning", [LOG_LVL_NOTICE] = "notice",
    [LOG_LVL_INFO] = "info", [LOG_LVL_DEBUG] = "debug",
};

int log_level_parse(const char *name)
{
    for (int i = 0; i < 8; i++)
        if (level_names[i] && strcmp(level_names[i], name) == 0)
            return i;
    return -1;
}

void log_msg(int level, const char *fmt, ...)
{
    if (level > atomic_load(&log_max_level))
        return;
    char line[2048];
    size_t n;
    if (getenv("JOURNAL_STREAM")) {
        n = (size_t)snprintf(line, sizeof(line), "<%d>", level);
    } else {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        localtime_r(&ts.tv_sec, &tm);
        n = strftime(line, sizeof(line), "%H:%M:%S", &tm);
        n += (size_t)snprintf(line + n, sizeof(line) - n, ".%03ld gptd %s: ", ts.tv_nsec / 1000000,
                              level_names[level & 7]);
    }
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
    va_end(ap);
    if (k < 0)
        return;
    n += (size_t)k < sizeof(line) - n - 1 ? (size_t)k : sizeof(line) - n - 2;
    line[n++] = '\n';
    (void)!write(STDERR_FILENO, line, n);
}
