/*
 * cmds: gptctl's commands (see gptctl.h): each parses its own flags,
 * builds one request, sends it and prints the reply through output.c.
 * Decisions live in gptd; these only talk and format.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gptctl.h"
#include "jobspec.h"
#include "str_escape.h"

static int64_t ctl_parse_int(const char *s, const char *what, bool *ok)
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

/* --- logs ---------------------------------------------------------------- */

/* Streams the replies of a logs request until its "end". Returns the exit
 * code: 0 when the job completed (or the stream was not followed), 1 when
 * it failed or was cancelled and we followed it. */
static int logs_stream(struct ctl *c, bool follow)
{
    struct logs_view v = {.tty = !c->json && isatty(STDOUT_FILENO)};
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
            if (!c->json) {
                logs_clear_bar(&v);
                printf(
                    "job %lld %s%s%s\n", (long long)json_integer_value(json_object_get(o, "job")),
                    state ? out_esc(state, 0) : "?", err ? ": " : "", err ? out_esc(err, 0) : "");
            }
            rc = follow && state && strcmp(state, "completed") != 0 ? EXIT_FAIL : 0;
            json_decref(o);
            return rc;
        }
        if (!c->json) {
            if (strcmp(type, "metric") == 0)
                logs_print_metric(&v, o);
            else if (strcmp(type, "event") == 0)
                logs_print_event(&v, o);
        }
        json_decref(o);
    }
}

static int ctl_logs_request(struct ctl *c, int64_t job, bool follow, int64_t since)
{
    json_t *r = ctl_request(c, GPT_CTL_OP_LOGS);
    json_object_set_new(r, "job", json_integer(job));
    if (follow)
        json_object_set_new(r, "follow", json_true());
    if (since > 0)
        json_object_set_new(r, "since", json_integer(since));
    int rc = ctl_send(c, r);
    return rc ? rc : logs_stream(c, follow);
}

/* --- commands -------------------------------------------------------------- */

/* Makes a relative path absolute against the client's working directory,
 * since the daemon has its own. */
static void ctl_absolute(char *path, size_t cap)
{
    if (!path[0] || path[0] == '/')
        return;
    char cwd[4096], tmp[GPT_JOB_PATH_MAX];
    if (!getcwd(cwd, sizeof(cwd)))
        return;
    int n = snprintf(tmp, sizeof(tmp), "%s/%s", cwd, path);
    if (n > 0 && (size_t)n < cap)
        memcpy(path, tmp, (size_t)n + 1);
}

/* Loads a job file with overrides into a spec object for the daemon. */
static int ctl_load_spec(const char *file, char **over, int n_over, json_t **ret)
{
    struct gpt_job *job = malloc(sizeof(*job));
    struct gpt_err err;
    if (!job)
        return EXIT_FAIL;
    gpt_err_clear(&err);
    int rc = gpt_jobspec_load(file, (const char *const *)over, (size_t)n_over, job, &err);
    if (rc < 0) {
        fprintf(stderr, "%s: %s%s%s\n", ctl_prog, err.path[0] ? out_esc(err.path, 0) : "",
                err.path[0] ? ": " : "", out_esc(err.msg, 0));
        free(job);
        return EXIT_FAIL;
    }
    ctl_absolute(job->data.path, sizeof(job->data.path));
    ctl_absolute(job->data.val_path, sizeof(job->data.val_path));
    ctl_absolute(job->snapshot.dir, sizeof(job->snapshot.dir));
    char *text = gpt_jobspec_to_json(job);
    free(job);
    *ret = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    return *ret ? 0 : EXIT_FAIL;
}

int cmd_submit(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    bool validate_only = cmd->op == GPT_CTL_OP_VALIDATE;
    static const struct option opts[] = {
        {"follow", no_argument, 0, 'f'}, {"priority", required_argument, 0, 'p'}, {0, 0, 0, 0}};
    bool follow = false, ok = true;
    int64_t priority = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, validate_only ? "+" : "+fp:",
                             validate_only ? opts + 2 : opts, NULL)) != -1) {
        if (ch == 'f')
            follow = true;
        else if (ch == 'p')
            priority = ctl_parse_int(optarg, "--priority", &ok);
        else
            return EXIT_USAGE;
        if (!ok)
            return EXIT_USAGE;
    }
    if (optind >= argc)
        return ctl_usage_error("%s needs a job FILE", validate_only ? "validate" : "submit");
    const char *file = argv[optind++];
    char *over[CTL_OVERRIDE_MAX];
    int n_over = 0;
    for (; optind < argc; optind++) {
        const char *a = argv[optind];
        if (strcmp(a, "--follow") == 0 && !validate_only) {
            follow = true;
        } else if (strcmp(a, "--priority") == 0 && !validate_only && optind + 1 < argc) {
            priority = ctl_parse_int(argv[++optind], "--priority", &ok);
            if (!ok)
                return EXIT_USAGE;
        } else if (strchr(a, '=') && a[0] != '-') {
            if (n_over == CTL_OVERRIDE_MAX)
                return ctl_usage_error("more than %d overrides", CTL_OVERRIDE_MAX);
            over[n_over++] = argv[optind];
        } else {
            return ctl_usage_error("unexpected argument \"%s\" (overrides look like a.b=value)", a);
        }
    }
    json_t *spec;
    int rc = ctl_load_spec(file, over, n_over, &spec);
    if (rc)
        return rc;
    rc = ctl_connect(c);
    if (rc) {
        json_decref(spec);
        return rc;
    }
    json_t *r = ctl_request(c, validate_only ? GPT_CTL_OP_VALIDATE : GPT_CTL_OP_SUBMIT);
    json_object_set_new(r, "spec", spec);
    if (priority)
        json_object_set_new(r, "priority", json_integer(priority));
    json_t *reply;
    rc = ctl_call(c, r, &reply);
    if (rc)
        return rc;
    if (validate_only) {
        if (!c->json)
            printf("%s: valid\n", out_esc(file, 0));
        json_decref(reply);
        return 0;
    }
    int64_t id = json_integer_value(json_object_get(reply, "job"));
    json_decref(reply);
    if (!c->json)
        printf("%lld\n", (long long)id);
    fflush(stdout);
    return follow ? ctl_logs_request(c, id, true, 0) : 0;
}

int cmd_list(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    (void)cmd;
    (void)argv;
    if (argc > 1)
        return ctl_usage_error("list takes no arguments");
    int rc = ctl_connect(c);
    json_t *reply;
    if (rc || (rc = ctl_call(c, ctl_request(c, GPT_CTL_OP_LIST), &reply)))
        return rc;
    if (c->json)
        goto out;
    struct table t = {.ncols = 8, .right = {true, false, false, true, true, true, true, false}};
    table_row(&t, "ID", "NAME", "STATE", "STEP", "LOSS", "PRIO", "OWNER", "CREATED");
    size_t i;
    json_t *j;
    json_array_foreach(json_object_get(reply, "jobs"), i, j)
    {
        char id[32], step[64], s1[32], s2[32], loss[32], prio[32], owner[32], created[32];
        snprintf(step, sizeof(step), "%s/%s", fmt_int(s1, sizeof(s1), json_object_get(j, "step")),
                 fmt_int(s2, sizeof(s2), json_object_get(j, "max_steps")));
        table_row(&t, fmt_int(id, sizeof(id), json_object_get(j, "id")),
                  json_string_value(json_object_get(j, "name")),
                  json_string_value(json_object_get(j, "state")), step,
                  fmt_real(loss, sizeof(loss), json_object_get(j, "loss"), 4),
                  fmt_int(prio, sizeof(prio), json_object_get(j, "priority")),
                  fmt_int(owner, sizeof(owner), json_object_get(j, "owner_uid")),
                  fmt_time(created, sizeof(created), json_object_get(j, "created")));
    }
    table_print(&t);
out:
    json_decref(reply);
    return 0;
}

int cmd_status(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    (void)cmd;
    int64_t job = 0;
    if (argc > 2)
        return ctl_usage_error("usage: status [JOB]");
    if (argc == 2 && !ctl_parse_job(argv[1], &job))
        return EXIT_USAGE;
    int rc = ctl_connect(c);
    if (rc)
        return rc;
    json_t *r = ctl_request(c, GPT_CTL_OP_STATUS), *reply;
    if (job)
        json_object_set_new(r, "job", json_integer(job));
    if ((rc = ctl_call(c, r, &reply)))
        return rc;
    if (c->json)
        goto out;
    struct table t = {.ncols = 2};
    char a[64], b[64];
    if (job) {
        json_t *j = json_object_get(reply, "job");
        char step[80];
        snprintf(step, sizeof(step), "%s/%s", fmt_int(a, sizeof(a), json_object_get(j, "step")),
                 fmt_int(b, sizeof(b), json_object_get(j, "max_steps")));
        table_row(&t, "job:", fmt_int(a, sizeof(a), json_object_get(j, "id")));
        table_row(&t, "name:", json_string_value(json_object_get(j, "name")));
        table_row(&t, "state:", json_string_value(json_object_get(j, "state")));
        table_row(&t, "step:", step);
        table_row(&t, "loss:", fmt_real(a, sizeof(a), json_object_get(j, "loss"), 4));
        table_row(&t, "owner uid:", fmt_int(a, sizeof(a), json_object_get(j, "owner_uid")));
        table_row(&t, "priority:", fmt_int(a, sizeof(a), json_object_get(j, "priority")));
        table_row(&t, "created:", fmt_time(a, sizeof(a), json_object_get(j, "created")));
        table_row(&t, "started:", fmt_time(a, sizeof(a), json_object_get(j, "started")));
        table_row(&t, "finished:", fmt_time(a, sizeof(a), json_object_get(j, "finished")));
        table_row(&t, "snapshots:", json_string_value(json_object_get(j, "snapshot_dir")));
        if (json_object_get(j, "error"))
            table_row(&t, "error:", json_string_value(json_object_get(j, "error")));
    } else {
        json_t *s = reply;
        table_row(&t, "gptd:", json_string_value(json_object_get(s, "version")));
        table_row(&t, "node:", json_string_value(json_object_get(s, "node")));
        table_row(&t, "pid:", fmt_int(a, sizeof(a), json_object_get(s, "pid")));
        table_row(&t, "started:", fmt_time(a, sizeof(a), json_object_get(s, "started")));
        int64_t running = json_integer_value(json_object_get(s, "running_job"));
        table_row(&t, "running job:",
                  running ? fmt_int(a, sizeof(a), json_object_get(s, "running_job")) : "none");
        table_row(&t, "queued jobs:", fmt_int(b, sizeof(b), json_object_get(s, "queued")));
        table_row(&t, "state dir:", json_string_value(json_object_get(s, "state_dir")));
        table_row(&t, "socket:", json_string_value(json_object_get(s, "socket")));
        if (json_object_get(s, "max_nodes")) {
            char nodes[96];
            snprintf(nodes, sizeof(nodes), "%s (open-file limit %s)",
                     fmt_int(a, sizeof(a), json_object_get(s, "max_nodes")),
                     fmt_int(b, sizeof(b), json_object_get(s, "open_files_max")));
            table_row(&t, "max nodes:", nodes);
        }
    }
    table_print(&t);
out:
    json_decref(reply);
    return 0;
}

int cmd_logs(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    (void)cmd;
    static const struct option opts[] = {
        {"follow", no_argument, 0, 'f'}, {"since", required_argument, 0, 's'}, {0, 0, 0, 0}};
    bool follow = false, ok = true;
    int64_t since = 0, job;
    int ch;
    while ((ch = getopt_long(argc, argv, "fs:", opts, NULL)) != -1) {
        if (ch == 'f')
            follow = true;
        else if (ch == 's')
            since = ctl_parse_int(optarg, "--since", &ok);
        else
            return EXIT_USAGE;
        if (!ok)
            return EXIT_USAGE;
    }
    if (optind + 1 != argc)
        return ctl_usage_error("usage: logs [-f] [--since STEP] JOB");
    if (!ctl_parse_job(argv[optind], &job))
        return EXIT_USAGE;
    if (since < 0)
        return ctl_usage_error("--since must be >= 0");
    int rc = ctl_connect(c);
    return rc ? rc : ctl_logs_request(c, job, follow, since);
}

int cmd_job_op(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    int op = cmd->op;
    static const struct option opts[] = {{"snapshot", required_argument, 0, 's'}, {0, 0, 0, 0}};
    int64_t job, snap = 0;
    bool ok = true;
    int ch;
    while (op == GPT_CTL_OP_RESUME && (ch = getopt_long(argc, argv, "s:", opts, NULL)) != -1) {
        if (ch != 's')
            return EXIT_USAGE;
        snap = ctl_parse_int(optarg, "--snapshot", &ok);
        if (!ok)
            return EXIT_USAGE;
    }
    if (op != GPT_CTL_OP_RESUME)
        optind = 1;
    if (optind + 1 != argc)
        return ctl_usage_error("usage: %s JOB%s", gpt_ctl_op_name(op),
                               op == GPT_CTL_OP_RESUME ? " [--snapshot ID]" : "");
    if (!ctl_parse_job(argv[optind], &job))
        return EXIT_USAGE;
    int rc = ctl_connect(c);
    if (rc)
        return rc;
    json_t *r = ctl_request(c, op), *reply;
    json_object_set_new(r, "job", json_integer(job));
    if (snap > 0)
        json_object_set_new(r, "snapshot", json_integer(snap));
    if ((rc = ctl_call(c, r, &reply)))
        return rc;
    if (!c->json && op != GPT_CTL_OP_SNAPSHOTS) {
        printf("job %lld: %s\n", (long long)job,
               out_esc(json_string_value(json_object_get(reply, "state")), 0));
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
                      fmt_int(size, sizeof(size), json_object_get(s, "size")),
                      json_is_true(json_object_get(s, "exists")) ? "yes" : "pruned",
                      json_string_value(json_object_get(s, "path")));
        }
        table_print(&t);
    }
    json_decref(reply);
    return 0;
}

int cmd_sample(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    (void)cmd;
    static const struct option opts[] = {
        {"prompt", required_argument, 0, 'p'},      {"tokens", required_argument, 0, 'n'},
        {"temperature", required_argument, 0, 't'}, {"top-k", required_argument, 0, 'k'},
        {"snapshot", required_argument, 0, 's'},    {0, 0, 0, 0}};
    const char *prompt = NULL;
    int64_t tokens = 0, top_k = -1, snap = 0, job;
    double temp = 0;
    bool ok = true;
    int ch;
    while ((ch = getopt_long(argc, argv, "p:n:t:k:s:", opts, NULL)) != -1) {
        char *end;
        switch (ch) {
        case 'p':
            prompt = optarg;
            break;
        case 'n':
            tokens = ctl_parse_int(optarg, "--tokens", &ok);
            break;
        case 'k':
            top_k = ctl_parse_int(optarg, "--top-k", &ok);
            break;
        case 's':
            snap = ctl_parse_int(optarg, "--snapshot", &ok);
            break;
        case 't':
            temp = strtod(optarg, &end);
            if (*end || !(temp > 0))
                return ctl_usage_error("--temperature must be a number > 0");
            break;
        default:
            return EXIT_USAGE;
        }
        if (!ok)
            return EXIT_USAGE;
    }
    if (optind + 1 != argc || !prompt)
        return ctl_usage_error("usage: sample JOB --prompt TEXT [--tokens N] [--temperature T]"
                               " [--top-k K]");
    if (!ctl_parse_job(argv[optind], &job))
        return EXIT_USAGE;
    int rc = ctl_connect(c);
    if (rc)
        return rc;
    json_t *r = ctl_request(c, GPT_CTL_OP_SAMPLE), *reply;
    json_object_set_new(r, "job", json_integer(job));
    json_t *p = json_string(prompt);
    if (!p)
        return ctl_usage_error("--prompt must be valid UTF-8");
    json_object_set_new(r, "prompt", p);
    if (tokens)
        json_object_set_new(r, "tokens", json_integer(tokens));
    if (temp > 0)
        json_object_set_new(r, "temperature", json_real(temp));
    if (top_k >= 0)
        json_object_set_new(r, "top_k", json_integer(top_k));
    if (snap)
        json_object_set_new(r, "snapshot", json_integer(snap));
    if ((rc = ctl_call(c, r, &reply)))
        return rc;
    if (!c->json)
        printf("%s\n", out_esc(json_string_value(json_object_get(reply, "text")),
                               GPT_STR_ESCAPE_KEEP_NEWLINE));
    json_decref(reply);
    return 0;
}

int cmd_nodes(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    (void)cmd;
    (void)argv;
    if (argc > 1)
        return ctl_usage_error("nodes takes no arguments");
    int rc = ctl_connect(c);
    json_t *reply;
    if (rc || (rc = ctl_call(c, ctl_request(c, GPT_CTL_OP_NODES), &reply)))
        return rc;
    if (!c->json) {
        /* A cluster's nodes carry a heartbeat age and their current ranks;
         * a single gptd reports its job instead. */
        struct table t = {.ncols = 7, .right = {false, false, true, true, true, false, false}};
        table_row(&t, "NODE", "STATE", "HEARTBEAT", "WORKERS", "RANKS/JOB", "DEVICES", "VERSION");
        size_t i;
        json_t *n;
        json_array_foreach(json_object_get(reply, "nodes"), i, n)
        {
            char w[32], j[32], hb[32];
            const json_t *age = json_object_get(n, "heartbeat_age_s");
            const char *ranks = json_string_value(json_object_get(n, "ranks"));
            int64_t job = json_integer_value(json_object_get(n, "job"));
            snprintf(hb, sizeof(hb), "%s", "-");
            if (json_is_number(age))
                snprintf(hb, sizeof(hb), "%.1fs ago", json_number_value(age));
            if (ranks)
                snprintf(j, sizeof(j), "%s", ranks);
            else if (job)
                fmt_int(j, sizeof(j), json_object_get(n, "job"));
            else
                snprintf(j, sizeof(j), "-");
            table_row(&t, json_string_value(json_object_get(n, "node")),
                      json_string_value(json_object_get(n, "state")), hb,
                      fmt_int(w, sizeof(w), json_object_get(n, "workers")), j,
                      json_string_value(json_object_get(n, "devices")),
                      json_string_value(json_object_get(n, "version")));
        }
        table_print(&t);
        /* Where the cluster meets and who keeps its queue. */
        const char *rdzv = json_string_value(json_object_get(reply, "rdzv"));
        json_array_foreach(json_object_get(reply, "nodes"), i, n)
        {
            const char *role = json_string_value(json_object_get(n, "role"));
            if (rdzv && role && strcmp(role, "coordinator") == 0)
                printf("coordinator: %s, store at %s\n",
                       out_esc(json_string_value(json_object_get(n, "node")), 0), out_esc(rdzv, 0));
        }
    }
    json_decref(reply);
    return 0;
}
