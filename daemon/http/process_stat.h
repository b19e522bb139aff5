/*
 * process_stat: this process's resource use for /metrics' process_*
 * families (Prometheus's standard process collector's names): CPU seconds,
 * resident and virtual memory, open and allowed descriptors, start time.
 * Read from /proc at scrape time. HTTP thread; blocks only on /proc.
 */
#ifndef GPTD_PROCESS_STAT_H
#define GPTD_PROCESS_STAT_H

#include "metrics_text.h"

/* Fills *ret from /proc/self/stat, /proc/stat (boot time), /proc/self/fd
 * and the open-file limit. 0, or a negative errno when /proc cannot be
 * read (the caller then leaves the process families out). */
int process_stat_read(struct metrics_process *ret);

#endif
