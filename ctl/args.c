/*
 * args: what every command uses to read its arguments and report a usage
 * error (see gptctl.h). It calls nothing of the commands or the table, so
 * gptctl.c -> the commands -> args.c runs one way.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gptctl.h"

const char *const ctl_prog = "gptctl";
static const char *ctl_usage_command; /* the command run, for "see gptctl CMD --help" */

void ctl_usage_set_command(const char *name)
{
    ctl_usage_command = name;
}

int ctl_usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", ctl_prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (ctl_usage_command)
        fprintf(stderr, " (see gptctl %s --help)\n", ctl_usage_command);
    else
        fprintf(stderr, " (see gptctl --help)\n");
    return EXIT_USAGE;
}

int64_t ctl_parse_int(const char *s, const char *what, bool *ok)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno) {
        ctl_usage_error("%s must be an integer, not \"%s\"", what, s);
        *ok = false;
        return 0;
    }
    return v;
}

bool ctl_parse_job(const char *s, int64_t *ret)
{
    bool ok = true;
    *ret = ctl_parse_int(s, "JOB", &ok);
    if (ok && *ret < 1) {
        ctl_usage_error("JOB must be a job id (>= 1)");
        return false;
    }
    return ok;
}

int ctl_job_snapshot_parse(const char *flag, const char *arg, int64_t *ret_job, int64_t *ret_snap)
{
    char jobtext[32];
    const char *colon = strchr(arg, ':');
    size_t jl = colon ? (size_t)(colon - arg) : strlen(arg);
    *ret_snap = 0;
    if (jl == 0 || jl >= sizeof(jobtext))
        return ctl_usage_error("%s takes JOB or JOB:SNAPSHOT", flag);
    memcpy(jobtext, arg, jl);
    jobtext[jl] = '\0';
    if (!ctl_parse_job(jobtext, ret_job) || (colon && !ctl_parse_job(colon + 1, ret_snap)))
        return EXIT_USAGE;
    return 0;
}
