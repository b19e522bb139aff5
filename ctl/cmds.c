/*
 * cmds: gptctl's commands (see gptctl.h): each parses its own flags,
 * builds one request, sends it and prints the reply through output.c.
 * Decisions live in gptd; these only talk and format.
 */
#include <errno.h>
#include <math.h>
#include <pwd.h>
#include <getopt.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "gptctl.h"
#include "jobspec.h"
#include "jobspec_sweep.h"
#include "metric_csv.h"
#include "str_escape.h"

/* --- logs ---------------------------------------------------------------- */

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

static int ctl_logs_request(struct ctl *c, int64_t job, bool follow, int64_t since, bool csv)
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
    /* Valid but probably not meant: said before the job is queued. */
    char warn[1024];
    if (gpt_jobspec_warnings(job, warn, sizeof(warn)) > 0)
        for (char *save, *line = strtok_r(warn, "\n", &save); line;
             line = strtok_r(NULL, "\n", &save))
            fprintf(stderr, "%s: warning: %s\n", ctl_prog, line);
    ctl_absolute(job->data.path, sizeof(job->data.path));
    ctl_absolute(job->data.val_path, sizeof(job->data.val_path));
    ctl_absolute(job->snapshot.dir, sizeof(job->snapshot.dir));
    ctl_absolute(job->model.init_from, sizeof(job->model.init_from));
    char *text = gpt_jobspec_to_json(job);
    free(job);
    *ret = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    return *ret ? 0 : EXIT_FAIL;
}

/* Job j's overrides that set it apart in the sweep (the keys whose value
 * differs between jobs; all of them when none does), as the submit's
 * "overrides" object, "a.b": "value". */
static json_t *ctl_sweep_overrides(const struct gpt_sweep *sw, size_t j)
{
    json_t *o = json_object();
    for (int pass = 0; pass < 2 && o && json_object_size(o) == 0; pass++) {
        for (size_t k = 0; k < sw->n_keys; k++) {
            const char *a = sw->assign[j * sw->n_keys + k], *eq = strchr(a, '=');
            bool varies = false;
            for (size_t i = 0; i < sw->n_jobs && !varies; i++)
                varies = strcmp(sw->assign[i * sw->n_keys + k], a) != 0;
            if (!eq || (pass == 0 && !varies))
                continue;
            char key[GPT_ERR_PATH_MAX];
            snprintf(key, sizeof(key), "%.*s", (int)(eq - a), a);
            json_object_set_new(o, key, json_string(eq + 1));
        }
    }
    return o;
}

/* submit -m: the cartesian product of the overrides' choices, one job each,
 * all tagged with one new sweep id. */
static int ctl_submit_sweep(struct ctl *c, const char *file, char **over, int n_over,
                            int64_t priority)
{
    struct gpt_sweep sw;
    struct gpt_err err;
    gpt_err_clear(&err);
    if (gpt_sweep_expand((const char *const *)over, (size_t)n_over, &sw, &err) < 0)
        return ctl_usage_error("-m: %s: %s", err.path, err.msg);
    /* Every job's spec is checked before the first is submitted. */
    json_t **specs = calloc(sw.n_jobs, sizeof(*specs));
    int rc = specs ? 0 : EXIT_FAIL;
    for (size_t j = 0; rc == 0 && j < sw.n_jobs; j++)
        rc = ctl_load_spec(file, sw.assign + j * sw.n_keys, (int)sw.n_keys, &specs[j]);
    unsigned char rnd[4] = {0};
    char id[GPT_SWEEP_ID_MAX];
    if (rc == 0 && getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        rc = ctl_usage_error("cannot make a sweep id: %s", strerror(errno));
    snprintf(id, sizeof(id), "sw-%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3]);
    if (rc == 0)
        rc = ctl_connect(c);
    json_t *ids = json_array();
    for (size_t j = 0; rc == 0 && j < sw.n_jobs; j++) {
        json_t *r = ctl_request(c, GPT_CTL_OP_SUBMIT), *reply;
        json_object_set_new(r, "spec", specs[j]);
        specs[j] = NULL;
        json_object_set_new(r, "sweep", json_string(id));
        json_object_set_new(r, "overrides", ctl_sweep_overrides(&sw, j));
        if (j == 0) /* all of them fit, or none is queued */
            json_object_set_new(r, "sweep_jobs", json_integer((json_int_t)sw.n_jobs));
        if (priority)
            json_object_set_new(r, "priority", json_integer(priority));
        if ((rc = ctl_call(c, r, &reply)))
            break;
        json_t *job = json_object_get(reply, "job");
        json_array_append(ids, job);
        if (!c->json) {
            printf("%lld", (long long)json_integer_value(job));
            for (size_t k = 0; k < sw.n_keys; k++)
                printf(" %s", out_esc(sw.assign[j * sw.n_keys + k], 0));
            printf("\n");
        }
        json_decref(reply);
    }
    if (rc == 0 && c->json) {
        json_t *o = json_pack("{s:s, s:O}", "sweep", id, "jobs", ids);
        char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (text)
            printf("%s\n", text);
        free(text);
        json_decref(o);
    } else if (rc == 0) {
        printf("sweep %s: %zu jobs (gptctl list --sweep %s)\n", id, sw.n_jobs, id);
    }
    json_decref(ids);
    for (size_t j = 0; specs && j < sw.n_jobs; j++)
        json_decref(specs[j]);
    free(specs);
    gpt_sweep_free(&sw);
    return rc;
}

int cmd_submit(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    bool validate_only = cmd->op == GPT_CTL_OP_VALIDATE;
    static const struct option opts[] = {{"follow", no_argument, 0, 'f'},
                                         {"priority", required_argument, 0, 'p'},
                                         {"multirun", no_argument, 0, 'm'},
                                         {"init-from", required_argument, 0, 'i'},
                                         {"resume-from", required_argument, 0, 'r'},
                                         {0, 0, 0, 0}};
    bool follow = false, ok = true, multirun = false;
    const char *init_from = NULL, *resume_from = NULL;
    int64_t priority = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, validate_only ? "+" : "+fmp:i:",
                             validate_only ? opts + 5 : opts, NULL)) != -1) {
        if (ch == 'i' || ch == 'r')
            *(ch == 'i' ? &init_from : &resume_from) = optarg;
        else if (ch == 'f')
            follow = true;
        else if (ch == 'm')
            multirun = true;
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
        } else if ((strcmp(a, "-m") == 0 || strcmp(a, "--multirun") == 0) && !validate_only) {
            multirun = true;
        } else if (strcmp(a, "--priority") == 0 && !validate_only && optind + 1 < argc) {
            priority = ctl_parse_int(argv[++optind], "--priority", &ok);
            if (!ok)
                return EXIT_USAGE;
        } else if (strcmp(a, "--init-from") == 0 && !validate_only && optind + 1 < argc) {
            init_from = argv[++optind];
        } else if (strcmp(a, "--resume-from") == 0 && !validate_only && optind + 1 < argc) {
            resume_from = argv[++optind];
        } else if (strchr(a, '=') && a[0] != '-') {
            if (n_over == CTL_OVERRIDE_MAX)
                return ctl_usage_error("more than %d overrides", CTL_OVERRIDE_MAX);
            over[n_over++] = argv[optind];
        } else {
            return ctl_usage_error("unexpected argument \"%s\" (overrides look like a.b=value)", a);
        }
    }
    json_t *spec;
    char init_over[GPT_JOB_PATH_MAX + 32];
    int64_t from_job = 0, from_snap = 0;
    int rc;
    if (resume_from && (init_from || multirun))
        return ctl_usage_error("--resume-from continues one job: not with %s",
                               init_from ? "--init-from" : "-m");
    if (resume_from &&
        (rc = ctl_job_snapshot_parse("--resume-from", resume_from, &from_job, &from_snap)))
        return rc;
    if (init_from) { /* JOB[:SNAPSHOT] -> model.init_from=PATH, after the file's own overrides */
        if (n_over == CTL_OVERRIDE_MAX)
            return ctl_usage_error("more than %d overrides", CTL_OVERRIDE_MAX);
        if ((rc = ctl_init_from_path(c, init_from, init_over, sizeof(init_over))))
            return rc;
        over[n_over++] = init_over;
    }
    if (multirun) {
        if (follow)
            return ctl_usage_error("-m makes several jobs: follow them with gptctl logs -f");
        return ctl_submit_sweep(c, file, over, n_over, priority);
    }
    rc = ctl_load_spec(file, over, n_over, &spec);
    if (rc)
        return rc;
    if (validate_only) {
        /* The spec is fully checked here; a running gptd also checks the
         * data paths as the calling user. Without one, the spec check is
         * the answer. */
        c->offline_ok = true;
        rc = c->fd >= 0 ? 0 : ctl_connect(c);
        c->offline_ok = false;
        if (rc == 0) {
            json_t *r = ctl_request(c, GPT_CTL_OP_VALIDATE), *reply;
            json_object_set_new(r, "spec", spec);
            if ((rc = ctl_call(c, r, &reply)))
                return rc;
            if (!c->json)
                printf("%s: valid\n", out_esc(file, 0));
            json_decref(reply);
            return 0;
        }
        if (rc != EXIT_NOREACH) {
            json_decref(spec);
            return rc;
        }
        if (c->json) {
            json_t *o = json_pack("{s:b, s:o}", "valid", 1, "spec", spec);
            char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
            if (text)
                printf("%s\n", text);
            free(text);
            json_decref(o);
        } else {
            printf("%s: valid (no gptd running: data paths are checked at submit)\n",
                   out_esc(file, 0));
            json_decref(spec);
        }
        return 0;
    }
    rc = c->fd >= 0 ? 0 : ctl_connect(c);
    if (rc) {
        json_decref(spec);
        return rc;
    }
    json_t *r = ctl_request(c, GPT_CTL_OP_SUBMIT);
    json_object_set_new(r, "spec", spec);
    if (priority)
        json_object_set_new(r, "priority", json_integer(priority));
    if (from_job) /* the daemon checks the owner, the spec and the snapshot */
        json_object_set_new(r, "resume_from", json_integer(from_job));
    if (from_snap)
        json_object_set_new(r, "snapshot", json_integer(from_snap));
    json_t *reply;
    rc = ctl_call(c, r, &reply);
    if (rc)
        return rc;
    int64_t id = json_integer_value(json_object_get(reply, "job"));
    json_t *rf = json_object_get(reply, "resumed_from");
    if (rf && !c->json) /* stdout keeps only the id, for scripts */
        fprintf(stderr, "%s: job %lld continues job %lld from its snapshot %lld (step %lld)\n",
                ctl_prog, (long long)id, (long long)json_integer_value(json_object_get(rf, "job")),
                (long long)json_integer_value(json_object_get(rf, "snapshot")),
                (long long)json_integer_value(json_object_get(rf, "step")));
    json_decref(reply);
    if (!c->json)
        printf("%lld\n", (long long)id);
    fflush(stdout);
    return follow ? ctl_logs_request(c, id, true, 0, false) : 0;
}

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

/* The keys whose values differ between two specs ("trainer.max_steps
 * 300 -> 600"), appended to buf. */
static void ctl_spec_diff(const json_t *a, const json_t *b, char *buf, size_t cap)
{
    const char *sect, *key;
    const json_t *sb, *vb;
    size_t len = strlen(buf);
    json_object_foreach((json_t *)b, sect, sb)
    {
        json_object_foreach((json_t *)sb, key, vb)
        {
            const json_t *va = json_object_get(json_object_get(a, sect), key);
            if (json_equal((json_t *)va, (json_t *)vb))
                continue;
            char *x = va ? json_dumps(va, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
            char *y = json_dumps(vb, JSON_ENCODE_ANY | JSON_COMPACT);
            int w = snprintf(buf + len, cap - len, "%s%s.%s %s -> %s", len ? ", " : "", sect, key,
                             x ? x : "-", y ? y : "?");
            free(x);
            free(y);
            if (w < 0 || (size_t)w >= cap - len)
                return;
            len += (size_t)w;
        }
    }
}

/* status JOB's runs: world size, outcome, and what the spec changed. */
static void ctl_print_runs(const json_t *runs)
{
    if (!json_array_size(runs))
        return;
    printf("runs:\n");
    size_t i;
    const json_t *r, *prev = NULL;
    json_array_foreach((json_t *)runs, i, r)
    {
        char a[64], b[64], changes[1024] = "";
        const json_t *spec = json_object_get(r, "spec");
        if (prev && json_is_object(spec) && json_is_object(prev))
            ctl_spec_diff(prev, spec, changes, sizeof(changes));
        printf("  run %s: world %d, %s, started %s%s%s\n",
               fmt_int(a, sizeof(a), json_object_get(r, "id")),
               (int)json_integer_value(json_object_get(r, "world_size")),
               out_esc(json_string_value(json_object_get(r, "status")), 0),
               fmt_time(b, sizeof(b), json_object_get(r, "started")), changes[0] ? "; " : "",
               out_esc(changes, 0));
        if (json_is_object(spec))
            prev = spec;
    }
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
        table_row(&t, "val loss:", fmt_real(a, sizeof(a), json_object_get(j, "val_loss"), 4));
        table_row(&t, "best val loss:",
                  fmt_real(a, sizeof(a), json_object_get(j, "best_val_loss"), 4));
        table_row(&t, "tokens seen:",
                  fmt_rate(a, sizeof(a), (double)json_integer_value(json_object_get(j, "tokens"))));
        double t0 = json_number_value(json_object_get(j, "started"));
        double t1 = json_number_value(json_object_get(j, "finished"));
        table_row(&t, "elapsed:",
                  t0 > 0 ? fmt_duration(a, sizeof(a), (t1 > 0 ? t1 : (double)time(NULL)) - t0)
                         : "-");
        char label[256];
        if (fmt_overrides(label, sizeof(label), json_object_get(j, "overrides"))[0])
            table_row(&t, "overrides:", label);
        if (json_object_get(j, "sweep"))
            table_row(&t, "sweep:", json_string_value(json_object_get(j, "sweep")));
        if (json_object_get(j, "parent_job")) /* submit --resume-from */
            table_row(&t, "continues job:", fmt_int(a, sizeof(a), json_object_get(j, "parent_job")));
        char ranks[1024];
        const char *rk = fmt_rank_ms(ranks, sizeof(ranks), json_object_get(j, "rank_step_ms"));
        if (rk)
            table_row(&t, "rank ms/step:", rk);
        table_row(&t, "owner uid:", fmt_int(a, sizeof(a), json_object_get(j, "owner_uid")));
        table_row(&t, "priority:", fmt_int(a, sizeof(a), json_object_get(j, "priority")));
        table_row(&t, "created:", fmt_time(a, sizeof(a), json_object_get(j, "created")));
        table_row(&t, "started:", fmt_time(a, sizeof(a), json_object_get(j, "started")));
        table_row(&t, "finished:", fmt_time(a, sizeof(a), json_object_get(j, "finished")));
        table_row(&t, "snapshots:", json_string_value(json_object_get(j, "snapshot_dir")));
        if (json_object_get(j, "restarts"))
            table_row(&t, "restarts:", fmt_int(a, sizeof(a), json_object_get(j, "restarts")));
        if (json_object_get(j, "error"))
            table_row(&t, "error:", json_string_value(json_object_get(j, "error")));
        table_print(&t);
        t = (struct table){.ncols = 2};
        ctl_print_runs(json_object_get(j, "runs"));
    } else {
        json_t *s = reply;
        table_row(&t, "gptd:", json_string_value(json_object_get(s, "version")));
        table_row(&t, "node:", json_string_value(json_object_get(s, "node")));
        table_row(&t, "pid:", fmt_int(a, sizeof(a), json_object_get(s, "pid")));
        table_row(&t, "started:", fmt_time(a, sizeof(a), json_object_get(s, "started")));
        int64_t running = json_integer_value(json_object_get(s, "running_job"));
        const json_t *all = json_object_get(s, "running_jobs"); /* a coordinator's */
        char ids[256] = "";
        size_t k;
        const json_t *v;
        json_array_foreach(all, k, v)
        {
            size_t off = strlen(ids);
            snprintf(ids + off, sizeof(ids) - off, "%s%lld", k ? ", " : "",
                     (long long)json_integer_value(v));
        }
        table_row(&t, json_array_size(all) > 1 ? "running jobs:" : "running job:",
                  json_array_size(all) > 1 ? ids
                  : running ? fmt_int(a, sizeof(a), json_object_get(s, "running_job"))
                            : "none");
        table_row(&t, "queued jobs:", fmt_int(b, sizeof(b), json_object_get(s, "queued")));
        const json_t *uw = json_object_get(s, "user_work");
        if (uw) {
            char work[96];
            snprintf(work, sizeof(work), "%s running, %s waiting",
                     fmt_int(a, sizeof(a), json_object_get(uw, "running")),
                     fmt_int(b, sizeof(b), json_object_get(uw, "waiting")));
            table_row(&t, "user work:", work);
        }
        table_row(&t, "state dir:", json_string_value(json_object_get(s, "state_dir")));
        if (json_is_string(json_object_get(s, "state_dir_error")))
            table_row(&t, "state dir error:",
                      json_string_value(json_object_get(s, "state_dir_error")));
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
    while (has_opts && (ch = getopt_long(argc, argv, op == GPT_CTL_OP_RESUME ? "s:" : "",
                                         op == GPT_CTL_OP_RESUME ? resume_opts : cancel_opts,
                                         NULL)) != -1) {
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

int cmd_sample(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    (void)cmd;
    static const struct option opts[] = {{"prompt", required_argument, 0, 'p'},
                                         {"tokens", required_argument, 0, 'n'},
                                         {"temperature", required_argument, 0, 't'},
                                         {"top-k", required_argument, 0, 'k'},
                                         {"snapshot", required_argument, 0, 's'},
                                         {"prompt-ids", required_argument, 0, 'i'},
                                         {0, 0, 0, 0}};
    const char *prompt = NULL, *prompt_ids = NULL;
    int64_t tokens = 0, top_k = -1, snap = 0, job;
    double temp = 0;
    bool ok = true;
    int ch;
    while ((ch = getopt_long(argc, argv, "p:n:t:k:s:i:", opts, NULL)) != -1) {
        char *end;
        switch (ch) {
        case 'p':
            prompt = optarg;
            break;
        case 'i':
            prompt_ids = optarg;
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
    if (optind + 1 != argc || !prompt == !prompt_ids)
        return ctl_usage_error("usage: sample JOB --prompt TEXT | --prompt-ids ID,ID,... "
                               "[--tokens N] [--temperature T] [--top-k K]");
    if (!ctl_parse_job(argv[optind], &job))
        return EXIT_USAGE;
    int rc = ctl_connect(c);
    if (rc)
        return rc;
    json_t *r = ctl_request(c, GPT_CTL_OP_SAMPLE), *reply;
    json_object_set_new(r, "job", json_integer(job));
    json_t *p = json_string(prompt ? prompt : prompt_ids);
    if (!p)
        return ctl_usage_error(prompt ? "--prompt must be valid UTF-8"
                                      : "--prompt-ids must be token ids such as 15496,11");
    json_object_set_new(r, prompt ? "prompt" : "prompt_ids", p);
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
    /* The prompt, a line that says where the model takes over, then what it
     * wrote, newline-terminated; --json keeps the text whole. */
    const char *text = json_string_value(json_object_get(reply, "text"));
    size_t pl = prompt && text && strncmp(text, prompt, strlen(prompt)) == 0 ? strlen(prompt) : 0;
    if (!c->json && pl) {
        printf("%s\n", out_esc(prompt, GPT_STR_ESCAPE_KEEP_NEWLINE));
        printf("--- generated ---\n");
    }
    if (!c->json)
        printf("%s\n", out_esc(text ? text + pl : "", GPT_STR_ESCAPE_KEEP_NEWLINE));
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
        struct table t = {
            .ncols = 10,
            .right = {false, false, true, true, true, true, false, false, false, false}};
        table_row(&t, "NODE", "STATE", "HEARTBEAT", "WORKERS", "JOB", "RANKS", "DEVICES",
                  "GPU UTIL", "GPU MEM", "VERSION");
        size_t i;
        json_t *n;
        json_array_foreach(json_object_get(reply, "nodes"), i, n)
        {
            char w[32], j[32], rk[48], hb[32], gu[256], gm[512];
            const json_t *gpus = json_object_get(n, "gpus");
            const json_t *age = json_object_get(n, "heartbeat_age_s");
            const char *ranks = json_string_value(json_object_get(n, "ranks"));
            int64_t job = json_integer_value(json_object_get(n, "job"));
            snprintf(hb, sizeof(hb), "%s", "-");
            if (json_is_number(age))
                snprintf(hb, sizeof(hb), "%.1fs ago", json_number_value(age));
            /* The job placed on the node (a cluster's) or running there
             * (a single gptd's), and its ranks of that job's world. */
            snprintf(rk, sizeof(rk), "%s", ranks ? ranks : "-");
            if (job)
                fmt_int(j, sizeof(j), json_object_get(n, "job"));
            else
                snprintf(j, sizeof(j), "-");
            table_row(&t, json_string_value(json_object_get(n, "node")),
                      json_string_value(json_object_get(n, "state")), hb,
                      fmt_int(w, sizeof(w), json_object_get(n, "workers")), j, rk,
                      json_string_value(json_object_get(n, "devices")),
                      fmt_gpus_util(gu, sizeof(gu), gpus), fmt_gpus_mem(gm, sizeof(gm), gpus),
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
