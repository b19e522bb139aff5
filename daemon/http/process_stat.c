/*
 * process_stat: see process_stat.h. Field numbers of /proc/self/stat are
 * proc(5)'s, counted from 1: utime 14, stime 15, starttime 22 (clock ticks
 * since boot), vsize 23 (bytes), rss 24 (pages).
 */
#include "process_stat.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Seconds since the epoch at boot ("btime" of /proc/stat). */
static int process_stat_boot_time(double *ret)
{
    FILE *f = fopen("/proc/stat", "re");
    if (!f)
        return -errno;
    char line[256];
    int rc = -ENOENT;
    unsigned long long bt;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "btime %llu", &bt) == 1) {
            *ret = (double)bt;
            rc = 0;
            break;
        }
    fclose(f);
    return rc;
}

static int64_t process_stat_open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int64_t n = 0;
    const struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the descriptor opendir holds */
}

int process_stat_read(struct metrics_process *ret)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "re");
    if (!f)
        return -errno;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name (field 2) may hold spaces and parentheses: the
     * fields after it start after its last ')'. */
    const char *p = strrchr(buf, ')');
    unsigned long long utime, stime, start, vsize;
    long long rss;
    if (!p || sscanf(p + 1,
                     " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d"
                     " %*d %llu %llu %lld",
                     &utime, &stime, &start, &vsize, &rss) != 5)
        return -EIO;
    double boot = 0;
    int rc = process_stat_boot_time(&boot);
    if (rc < 0)
        return rc;
    double hz = (double)sysconf(_SC_CLK_TCK);
    long page = sysconf(_SC_PAGESIZE);
    struct rlimit rl;
    ret->cpu_seconds = (double)(utime + stime) / hz;
    ret->start_time_seconds = boot + (double)start / hz;
    ret->virtual_bytes = vsize;
    ret->resident_bytes = rss > 0 ? (uint64_t)rss * (uint64_t)page : 0;
    ret->open_fds = process_stat_open_fds();
    ret->max_fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                       ? (int64_t)rl.rlim_cur
                       : -1;
    return 0;
}
