/*
 * log: gptd's logging to stderr. Under systemd (JOURNAL_STREAM set) each
 * line starts with a "<N>" syslog priority prefix so journald files it at
 * the right level; otherwise lines carry a timestamp and the level name.
 * The message is escaped (control characters, invalid UTF-8: see
 * proto/str_escape.h), so one call is always exactly one line whatever user
 * strings it quotes. Any thread may log; a line is written with one
 * write(2).
 */
#ifndef GPTD_LOG_H
#define GPTD_LOG_H

enum log_level {
    LOG_LVL_ERR = 3,
    LOG_LVL_WARN = 4,
    LOG_LVL_NOTICE = 5,
    LOG_LVL_INFO = 6,
    LOG_LVL_DEBUG = 7
};

/* Sets the highest level written (default info). */
void log_set_level(int level);
/* Parses "error|warning|notice|info|debug"; -1 if unknown. */
int log_level_parse(const char *name);

void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...)  log_msg(LOG_LVL_ERR, __VA_ARGS__)
#define log_warn(...)   log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_notice(...) log_msg(LOG_LVL_NOTICE, __VA_ARGS__)
#define log_info(...)   log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...)  log_msg(LOG_LVL_DEBUG, __VA_ARGS__)

#endif
