/*
 * log: see log.h. Every message is escaped (proto/str_escape.h) after it is
 * formatted, so a job name, a path or an error that quotes user bytes can
 * neither start a forged line (newline, CR, a "<0>" journald prefix) nor
 * send terminal escapes to whoever reads the log.
 */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "str_escape.h"

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
    char line[GPT_STR_ESCAPE_SIZE(2048) + 64];
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
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (k < 0)
        return;
    size_t m = (size_t)k < sizeof(msg) ? (size_t)k : sizeof(msg) - 1;
    size_t e = gpt_str_escape(line + n, sizeof(line) - n - 1, msg, m, 0);
    n += e < sizeof(line) - n - 1 ? e : strlen(line + n);
    line[n++] = '\n';
    (void)!write(STDERR_FILENO, line, n);
}
