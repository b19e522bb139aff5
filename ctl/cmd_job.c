/*
 * cmd_job: the commands on one job by id (cancel [--wait], resume
 * [KEY=VALUE ...] [--snapshot ID], snapshots): one request each; resume
 * prints gptd's plan, cancel --wait follows the job until it stops.
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gptctl.h"

/* resume's KEY=VALUE arguments as the request's "overrides" object (values
 * stay text: the daemon parses them by each key's type). */
static int ctl_resume_overrides(int n, char **args, json_t **ret)
{
    json_t *o = json_object();
    if (!o)
        return ctl_usage_error("out of memory");
    for (int i = 0; i < n; i++) {
        const char *eq = strchr(args[i], '=');
        if (!eq || eq == args[i] || eq - args[i] >= 128) {
            json_decref(o);
            return ctl_usage_error("unexpected argument \"%s\" (overrides look like a.b=value)",
                                   args[i]);
        }
        char key[128];
        memcpy(key, args[i], (size_t)(eq - args[i]));
        key[eq - args[i]] = '\0';
        if (json_object_set_new(o, key, json_string(eq + 1)) < 0) {
            json_decref(o);
            return ctl_usage_error("override \"%s\" is not UTF-8 text", args[i]);
        }
    }
    *ret = o;
    return 0;
}

/* What a resume will do: the step it continues from, the keys it changed
 * and, when it has a known end, the learning rate before and after. */
static void ctl_print_resume_plan(const json_t *plan)
{
    if (!plan)
        return;
    long long from = (long long)json_integer_value(json_object_get(plan, "from_step"));
    long long end = (long long)json_integer_value(json_object_get(plan, "max_steps"));
    const char *changes = json_string_value(json_object_get(plan, "changes"));
    if (end > 0)
        printf("continues from step %lld to step %lld\n", from, end);
    else
        printf("continues from step %lld\n", from);
    if (changes && changes[0])
        printf("changes: %s\n", out_esc(changes, 0));
    const json_t *last = json_object_get(plan, "lr_last"), *next = json_object_get(plan, "lr_next"),
                 *fin = json_object_get(plan, "lr_end");
    if (json_is_number(next) && json_is_number(fin)) {
        if (json_is_number(last))
            printf("learning rate: %.3g at step %lld (last trained), %.3g at step %lld, %.3g at"
                   " step %lld\n",
                   json_number_value(last), from, json_number_value(next), from + 1,
                   json_number_value(fin), end);
        else
            printf("learning rate: %.3g at step %lld, %.3g at step %lld\n", json_number_value(next),
                   from + 1, json_number_value(fin), end);
    }
}

/* cancel --wait: follows the job's records from past any step (so none
 * is printed) until gptd sends its end: the job has stopped, its
 * snapshot written. Prints its final state; 0 whatever it is, as the
 * stop was asked for. */
static int ctl_wait_stopped(struct ctl *c, int64_t job)
{
    json_t *r = ctl_request(c, GPT_CTL_OP_LOGS), *o = NULL;
    json_object_set_new(r, "job", json_integer(job));
    json_object_set_new(r, "follow", json_true());
    json_object_set_new(r, "since", json_integer(INT64_MAX));
    int rc = ctl_send(c, r);
    while (rc == 0 && (rc = ctl_recv(c, &o, true)) == 0) {
        const char *type = json_string_value(json_object_get(o, "type"));
        if (!json_is_true(json_object_get(o, "ok"))) {
            rc = c->json ? EXIT_FAIL : ctl_print_error(o);
        } else if (type && strcmp(type, "end") == 0) {
            if (!c->json)
                printf("job %lld stopped: %s\n", (long long)job,
                       out_esc(json_string_value(json_object_get(o, "state")), 0));
            json_decref(o);
            return 0;
        }
        json_decref(o);
    }
    return rc;
}

int cmd_job_op(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    int op = cmd->op;
    static const struct option resume_opts[] = {{"snapshot", required_argument, 0, 's'},
                                                {0, 0, 0, 0}};
    static const struct option cancel_opts[] = {{"wait", no_argument, 0, 'w'}, {0, 0, 0, 0}};
    int64_t job, snap = 0;
    bool ok = true, wait = false, has_opts = op == GPT_CTL_OP_RESUME || op == GPT_CTL_OP_CANCEL;
    int ch, rc_usage;
    while (has_opts &&
           (ch = getopt_long(argc, argv, op == GPT_CTL_OP_RESUME ? "s:" : "",
                             op == GPT_CTL_OP_RESUME ? resume_opts : cancel_opts, NULL)) != -1) {
        if (ch == 'w') {
            wait = true;
            continue;
        }
        if (ch != 's')
            return EXIT_USAGE;
        snap = ctl_parse_int(optarg, "--snapshot", &ok);
        if (!ok)
            return EXIT_USAGE;
    }
    if (!has_opts)
        optind = 1;
    if (optind + 1 > argc || (op != GPT_CTL_OP_RESUME && optind + 1 != argc))
        return ctl_usage_error("usage: %s JOB%s", gpt_ctl_op_name(op),
                               op == GPT_CTL_OP_RESUME ? " [KEY=VALUE ...] [--snapshot ID]" : "");
    if (!ctl_parse_job(argv[optind], &job))
        return EXIT_USAGE;
    json_t *over = NULL;
    if (op == GPT_CTL_OP_RESUME && optind + 1 < argc &&
        (rc_usage = ctl_resume_overrides(argc - optind - 1, argv + optind + 1, &over)))
        return rc_usage;
    int rc = ctl_connect(c);
    if (rc) {
        json_decref(over);
        return rc;
    }
    json_t *r = ctl_request(c, op), *reply;
    json_object_set_new(r, "job", json_integer(job));
    if (snap > 0)
        json_object_set_new(r, "snapshot", json_integer(snap));
    if (over)
        json_object_set_new(r, "overrides", over);
    if ((rc = ctl_call(c, r, &reply)))
        return rc;
    if (!c->json && op != GPT_CTL_OP_SNAPSHOTS) {
        printf("job %lld: %s\n", (long long)job,
               out_esc(json_string_value(json_object_get(reply, "state")), 0));
        if (op == GPT_CTL_OP_RESUME)
            ctl_print_resume_plan(json_object_get(reply, "plan"));
        fflush(stdout);
    } else if (!c->json) {
        struct table t = {.ncols = 6, .right = {true, true, false, true, false, false}};
        table_row(&t, "ID", "STEP", "NODE", "SIZE", "ON DISK", "PATH");
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(reply, "snapshots"), i, s)
        {
            char id[32], step[32], size[32];
            table_row(&t, fmt_int(id, sizeof(id), json_object_get(s, "id")),
                      fmt_int(step, sizeof(step), json_object_get(s, "step")),
                      json_string_value(json_object_get(s, "node")),
                      fmt_bytes(size, sizeof(size), json_object_get(s, "size")),
                      json_is_true(json_object_get(s, "exists")) ? "yes" : "pruned",
                      json_string_value(json_object_get(s, "path")));
        }
        table_print(&t);
    }
    json_decref(reply);
    return wait ? ctl_wait_stopped(c, job) : 0;
}
