/*
 * cmd_list: `gptctl list [--sweep ID] [--state S] [--user U]`, the job
 * table, and `gptctl sweep ID`, a sweep's runs ranked by validation loss.
 */
#include <getopt.h>
#include <math.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gptctl.h"
#include "jobspec_sweep.h"

/* A sweep's runs best first (gpt_sweep_results_sort): each one's overrides,
 * best validation loss, final loss, steps, tokens and time. */
static void ctl_sweep_summary(const char *sweep, const json_t *jobs)
{
    size_t n = json_array_size(jobs), i;
    struct gpt_sweep_result *r = calloc(n ? n : 1, sizeof(*r));
    char(*labels)[256] = calloc(n ? n : 1, sizeof(*labels));
    const json_t *j;
    if (!r || !labels)
        goto out;
    double now = (double)time(NULL);
    json_array_foreach(jobs, i, j)
    {
        const json_t *bv = json_object_get(j, "best_val_loss"), *l = json_object_get(j, "loss");
        double started = json_number_value(json_object_get(j, "started"));
        double finished = json_number_value(json_object_get(j, "finished"));
        fmt_overrides(labels[i], sizeof(labels[i]), json_object_get(j, "overrides"));
        r[i] = (struct gpt_sweep_result){
            .id = json_integer_value(json_object_get(j, "id")),
            .best_val_loss = json_is_number(bv) ? json_number_value(bv) : NAN,
            .final_loss = json_is_number(l) ? json_number_value(l) : NAN,
            .steps = json_integer_value(json_object_get(j, "step")),
            .tokens = json_integer_value(json_object_get(j, "tokens")),
            .time_s = started > 0 ? (finished > 0 ? finished : now) - started : NAN,
            .label = labels[i],
            .state = json_string_value(json_object_get(j, "state")),
        };
    }
    gpt_sweep_results_sort(r, n);
    printf("\nsweep %s: %zu jobs, best validation loss first\n", out_esc(sweep, 0), n);
    struct table t = {.ncols = 9,
                      .right = {true, true, false, true, true, true, true, true, false}};
    table_row(&t, "RANK", "JOB", "OVERRIDES", "BEST VAL", "FINAL LOSS", "STEPS", "TOKENS", "TIME",
              "STATE");
    for (i = 0; i < n; i++) {
        char rank[24], id[32], bv[32], fl[32], steps[32], tok[32], dur[32];
        json_t *x = json_real(r[i].best_val_loss), *y = json_real(r[i].final_loss);
        snprintf(rank, sizeof(rank), "%zu", i + 1);
        snprintf(id, sizeof(id), "#%lld", (long long)r[i].id);
        snprintf(steps, sizeof(steps), "%lld", (long long)r[i].steps);
        table_row(&t, rank, id, r[i].label[0] ? r[i].label : "-",
                  isnan(r[i].best_val_loss) ? "-" : fmt_real(bv, sizeof(bv), x, 4),
                  isnan(r[i].final_loss) ? "-" : fmt_real(fl, sizeof(fl), y, 4), steps,
                  fmt_rate(tok, sizeof(tok), (double)r[i].tokens),
                  fmt_duration(dur, sizeof(dur), r[i].time_s), r[i].state ? r[i].state : "-");
        json_decref(x);
        json_decref(y);
    }
    table_print(&t);
out:
    free(r);
    free(labels);
}

/* What `list` asks for: all jobs, or one sweep's, state's or user's. */
struct ctl_list_filter {
    const char *sweep, *state;
    int64_t uid; /* -1: any */
};

/* The list request, its reply in *ret. */
static int ctl_list_call(struct ctl *c, const struct ctl_list_filter *f, json_t **ret)
{
    if (f->sweep && !gpt_sweep_id_ok(f->sweep))
        return ctl_usage_error("\"%s\" is not a sweep id", out_esc(f->sweep, 0));
    int rc = ctl_connect(c);
    if (rc)
        return rc;
    json_t *r = ctl_request(c, GPT_CTL_OP_LIST);
    if (f->sweep)
        json_object_set_new(r, "sweep", json_string(f->sweep));
    if (f->state) /* gptd checks the name */
        json_object_set_new(r, "state", json_string(f->state));
    if (f->uid >= 0)
        json_object_set_new(r, "user", json_integer(f->uid));
    return ctl_call(c, r, ret);
}

/* --user NAME or UID: the uid, or -1 after a usage error. */
static int64_t ctl_user_uid(const char *s)
{
    const struct passwd *pw = getpwnam(s);
    if (pw)
        return (int64_t)pw->pw_uid;
    bool ok = true;
    int64_t uid = ctl_parse_int(s, "--user (a user name or uid)", &ok);
    return ok && uid >= 0 ? uid : -1;
}

int cmd_list(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    (void)cmd;
    static const struct option opts[] = {{"sweep", required_argument, 0, 'w'},
                                         {"state", required_argument, 0, 's'},
                                         {"user", required_argument, 0, 'u'},
                                         {0, 0, 0, 0}};
    struct ctl_list_filter f = {.uid = -1};
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (ch == 'w')
            f.sweep = optarg;
        else if (ch == 's')
            f.state = optarg;
        else if (ch == 'u' && (f.uid = ctl_user_uid(optarg)) < 0)
            return EXIT_USAGE;
        else if (ch != 'u')
            return EXIT_USAGE;
    }
    if (optind < argc)
        return ctl_usage_error("list takes no JOB (gptctl status JOB shows one)");
    const char *sweep = f.sweep;
    json_t *reply;
    int rc = ctl_list_call(c, &f, &reply);
    if (rc || c->json)
        goto out;
    const json_t *jobs = json_object_get(reply, "jobs");
    bool over = false; /* the OVERRIDES column only where a job has some */
    size_t i;
    json_t *j;
    json_array_foreach(jobs, i, j) over = over || json_object_get(j, "overrides");
    struct table t = {.ncols = over ? 9 : 8,
                      .right = {true, false, false, true, true, true, true, false, false}};
    table_row(&t, "ID", "NAME", "STATE", "STEP", "LOSS", "PRIO", "OWNER", "CREATED", "OVERRIDES");
    json_array_foreach(jobs, i, j)
    {
        char id[32], step[64], s1[32], s2[32], loss[32], prio[32], owner[32], created[32];
        char state[160], label[256];
        snprintf(step, sizeof(step), "%s/%s", fmt_int(s1, sizeof(s1), json_object_get(j, "step")),
                 fmt_int(s2, sizeof(s2), json_object_get(j, "max_steps")));
        /* A queued job: its place in the queue and what it waits for. */
        const json_t *pos = json_object_get(j, "queue_position");
        const char *why = json_string_value(json_object_get(j, "waiting_for"));
        const char *st = json_string_value(json_object_get(j, "state"));
        snprintf(state, sizeof(state), "%s", st ? st : "-");
        if (json_is_integer(pos)) /* the table escapes the cell */
            snprintf(state + strlen(state), sizeof(state) - strlen(state), " #%lld%s%.100s",
                     (long long)json_integer_value(pos), why ? ": " : "", why ? why : "");
        fmt_overrides(label, sizeof(label), json_object_get(j, "overrides"));
        table_row(&t, fmt_int(id, sizeof(id), json_object_get(j, "id")),
                  json_string_value(json_object_get(j, "name")), state, step,
                  fmt_real(loss, sizeof(loss), json_object_get(j, "loss"), 4),
                  fmt_int(prio, sizeof(prio), json_object_get(j, "priority")),
                  fmt_int(owner, sizeof(owner), json_object_get(j, "owner_uid")),
                  fmt_time(created, sizeof(created), json_object_get(j, "created")),
                  label[0] ? label : "-");
    }
    table_print(&t);
    if (sweep)
        ctl_sweep_summary(sweep, jobs);
out:
    if (rc == 0)
        json_decref(reply);
    return rc;
}

int cmd_sweep(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    (void)cmd;
    if (argc != 2)
        return ctl_usage_error("usage: sweep ID");
    json_t *reply;
    struct ctl_list_filter f = {.sweep = argv[1], .uid = -1};
    int rc = ctl_list_call(c, &f, &reply);
    if (rc)
        return rc;
    if (!c->json)
        ctl_sweep_summary(argv[1], json_object_get(reply, "jobs"));
    json_decref(reply);
    return 0;
}
