/*
 * cmd_logs: `gptctl logs [-f] [--since STEP] [--csv] JOB` and the stream
 * of a logs request that `submit --follow` shares: metrics and events as
 * they come (a progress bar on a terminal), until gptd's "end".
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gptctl.h"
#include "metric_csv.h"

/* Streams the replies of a logs request until its "end". Returns the exit
 * code: 0 when the job completed (or the stream was not followed), 1 when
 * it failed or was cancelled and we followed it. */
static int logs_stream(struct ctl *c, bool follow, bool csv)
{
    struct logs_view v = {.tty = !c->json && !csv && isatty(STDOUT_FILENO)};
    if (csv)
        fputs(gpt_metric_csv_header(), stdout);
    for (;;) {
        json_t *o;
        int rc = ctl_recv(c, &o, true);
        if (rc) {
            logs_clear_bar(&v);
            return rc;
        }
        if (!json_is_true(json_object_get(o, "ok"))) {
            logs_clear_bar(&v);
            rc = c->json ? EXIT_FAIL : ctl_print_error(o);
            json_decref(o);
            return rc;
        }
        const char *type = json_string_value(json_object_get(o, "type"));
        if (!type)
            type = "";
        if (strcmp(type, "end") == 0) {
            const char *state = json_string_value(json_object_get(o, "state"));
            const char *err = json_string_value(json_object_get(o, "error"));
            if (!c->json && !csv) {
                logs_clear_bar(&v);
                printf(
                    "job %lld %s%s%s\n", (long long)json_integer_value(json_object_get(o, "job")),
                    state ? out_esc(state, 0) : "?", err ? ": " : "", err ? out_esc(err, 0) : "");
            }
            rc = follow && state && strcmp(state, "completed") != 0 ? EXIT_FAIL : 0;
            json_decref(o);
            return rc;
        }
        if (csv && strcmp(type, "metric") == 0) {
            logs_print_csv(o);
        } else if (!c->json && !csv) {
            if (strcmp(type, "metric") == 0)
                logs_print_metric(&v, o);
            else if (strcmp(type, "event") == 0)
                logs_print_event(&v, o);
        }
        json_decref(o);
    }
}

int ctl_logs_request(struct ctl *c, int64_t job, bool follow, int64_t since, bool csv)
{
    json_t *r = ctl_request(c, GPT_CTL_OP_LOGS);
    json_object_set_new(r, "job", json_integer(job));
    if (follow)
        json_object_set_new(r, "follow", json_true());
    if (since > 0)
        json_object_set_new(r, "since", json_integer(since));
    int rc = ctl_send(c, r);
    return rc ? rc : logs_stream(c, follow, csv);
}

int cmd_logs(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    (void)cmd;
    static const struct option opts[] = {{"follow", no_argument, 0, 'f'},
                                         {"since", required_argument, 0, 's'},
                                         {"csv", no_argument, 0, 'c'},
                                         {0, 0, 0, 0}};
    bool follow = false, csv = false, ok = true;
    int64_t since = 0, job;
    int ch;
    while ((ch = getopt_long(argc, argv, "fs:", opts, NULL)) != -1) {
        if (ch == 'f')
            follow = true;
        else if (ch == 's')
            since = ctl_parse_int(optarg, "--since", &ok);
        else if (ch == 'c')
            csv = true;
        else
            return EXIT_USAGE;
        if (!ok)
            return EXIT_USAGE;
    }
    if (optind + 1 != argc)
        return ctl_usage_error("usage: logs [-f] [--since STEP] [--csv] JOB");
    if (!ctl_parse_job(argv[optind], &job))
        return EXIT_USAGE;
    if (since < 0)
        return ctl_usage_error("--since must be >= 0");
    if (csv && c->json)
        return ctl_usage_error("--csv and --json are two formats: choose one");
    int rc = ctl_connect(c);
    return rc ? rc : ctl_logs_request(c, job, follow, since, csv);
}
