/*
 * cmd_submit: `gptctl submit FILE [a.b=value ...]` (with -m, a sweep of
 * jobs; --init-from and --resume-from start from another job's snapshot)
 * and `gptctl validate FILE`. The job file is read and checked here, with
 * the client's paths made absolute; gptd decides the rest.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "gptctl.h"
#include "jobspec.h"
#include "jobspec_sweep.h"

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

/* What submit's (or validate's) command line says. */
struct submit_args {
    bool validate_only, follow, multirun;
    const char *file, *init_from, *resume_from;
    int64_t priority;
    char *over[CTL_OVERRIDE_MAX]; /* a.b=value, in order */
    int n_over;
    char init_over[GPT_JOB_PATH_MAX + 32]; /* --init-from's model.init_from=PATH */
    int64_t from_job, from_snap;           /* --resume-from JOB[:SNAPSHOT] */
};

/* The options before the job file (getopt_long; validate takes none).
 * 0, or EXIT_USAGE. */
static int submit_parse_options(int argc, char **argv, struct submit_args *a)
{
    static const struct option opts[] = {{"follow", no_argument, 0, 'f'},
                                         {"priority", required_argument, 0, 'p'},
                                         {"multirun", no_argument, 0, 'm'},
                                         {"init-from", required_argument, 0, 'i'},
                                         {"resume-from", required_argument, 0, 'r'},
                                         {0, 0, 0, 0}};
    bool ok = true;
    int ch;
    while ((ch = getopt_long(argc, argv, a->validate_only ? "+" : "+fmp:i:",
                             a->validate_only ? opts + 5 : opts, NULL)) != -1) {
        if (ch == 'i' || ch == 'r')
            *(ch == 'i' ? &a->init_from : &a->resume_from) = optarg;
        else if (ch == 'f')
            a->follow = true;
        else if (ch == 'm')
            a->multirun = true;
        else if (ch == 'p')
            a->priority = ctl_parse_int(optarg, "--priority", &ok);
        else
            return EXIT_USAGE;
        if (!ok)
            return EXIT_USAGE;
    }
    return 0;
}

/* The words after the job file: overrides a.b=value, and submit's options
 * written after them (as people do). 0, or EXIT_USAGE. */
static int submit_parse_rest(int argc, char **argv, struct submit_args *a)
{
    bool ok = true, sub = !a->validate_only;
    for (; optind < argc; optind++) {
        const char *w = argv[optind];
        bool has_value = optind + 1 < argc;
        if (sub && strcmp(w, "--follow") == 0) {
            a->follow = true;
        } else if (sub && (strcmp(w, "-m") == 0 || strcmp(w, "--multirun") == 0)) {
            a->multirun = true;
        } else if (sub && strcmp(w, "--priority") == 0 && has_value) {
            a->priority = ctl_parse_int(argv[++optind], "--priority", &ok);
            if (!ok)
                return EXIT_USAGE;
        } else if (sub && strcmp(w, "--init-from") == 0 && has_value) {
            a->init_from = argv[++optind];
        } else if (sub && strcmp(w, "--resume-from") == 0 && has_value) {
            a->resume_from = argv[++optind];
        } else if (strchr(w, '=') && w[0] != '-') {
            if (a->n_over == CTL_OVERRIDE_MAX)
                return ctl_usage_error("more than %d overrides", CTL_OVERRIDE_MAX);
            a->over[a->n_over++] = argv[optind];
        } else {
            return ctl_usage_error("unexpected argument \"%s\" (overrides look like a.b=value)", w);
        }
    }
    return 0;
}

/* --resume-from and --init-from: the job (and snapshot) to continue, or
 * model.init_from=PATH added after the file's own overrides (which asks
 * gptd, connecting c). 0, or an exit status. */
static int submit_resolve_from(struct ctl *c, struct submit_args *a)
{
    int rc;
    if (a->resume_from && (a->init_from || a->multirun))
        return ctl_usage_error("--resume-from continues one job: not with %s",
                               a->init_from ? "--init-from" : "-m");
    if (a->resume_from &&
        (rc = ctl_job_snapshot_parse("--resume-from", a->resume_from, &a->from_job, &a->from_snap)))
        return rc;
    if (a->init_from) {
        if (a->n_over == CTL_OVERRIDE_MAX)
            return ctl_usage_error("more than %d overrides", CTL_OVERRIDE_MAX);
        if ((rc = ctl_init_from_path(c, a->init_from, a->init_over, sizeof(a->init_over))))
            return rc;
        a->over[a->n_over++] = a->init_over;
    }
    return 0;
}

/* validate: the spec (takes it) checked by a running gptd too, which also
 * checks the data paths as the calling user; without one, the spec check
 * done here is the answer. */
static int submit_validate(struct ctl *c, const char *file, json_t *spec)
{
    c->offline_ok = true;
    int rc = c->fd >= 0 ? 0 : ctl_connect(c);
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
        printf("%s: valid (no gptd running: data paths are checked at submit)\n", out_esc(file, 0));
        json_decref(spec);
    }
    return 0;
}

/* Submits one job (takes spec) and prints its id; with --follow, its logs
 * until it ends. Returns the exit status. */
static int submit_one(struct ctl *c, const struct submit_args *a, json_t *spec)
{
    int rc = c->fd >= 0 ? 0 : ctl_connect(c);
    if (rc) {
        json_decref(spec);
        return rc;
    }
    json_t *r = ctl_request(c, GPT_CTL_OP_SUBMIT);
    json_object_set_new(r, "spec", spec);
    if (a->priority)
        json_object_set_new(r, "priority", json_integer(a->priority));
    if (a->from_job) /* the daemon checks the owner, the spec and the snapshot */
        json_object_set_new(r, "resume_from", json_integer(a->from_job));
    if (a->from_snap)
        json_object_set_new(r, "snapshot", json_integer(a->from_snap));
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
    return a->follow ? ctl_logs_request(c, id, true, 0, false) : 0;
}

int cmd_submit(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    struct submit_args a = {.validate_only = cmd->op == GPT_CTL_OP_VALIDATE};
    int rc = submit_parse_options(argc, argv, &a);
    if (rc)
        return rc;
    if (optind >= argc)
        return ctl_usage_error("%s needs a job FILE", a.validate_only ? "validate" : "submit");
    a.file = argv[optind++];
    if ((rc = submit_parse_rest(argc, argv, &a)) || (rc = submit_resolve_from(c, &a)))
        return rc;
    if (a.multirun) {
        if (a.follow)
            return ctl_usage_error("-m makes several jobs: follow them with gptctl logs -f");
        return ctl_submit_sweep(c, a.file, a.over, a.n_over, a.priority);
    }
    json_t *spec;
    if ((rc = ctl_load_spec(a.file, a.over, a.n_over, &spec)))
        return rc;
    return a.validate_only ? submit_validate(c, a.file, spec) : submit_one(c, &a, spec);
}
