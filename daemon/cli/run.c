/*
 * run: `gptd run JOB.json [overrides...] [flags]`, one job in the
 * foreground (like `torchrun --standalone`): K worker threads in this
 * process, a live progress line on a TTY or plain lines otherwise, JSON
 * lines with --json, a snapshot and a clean exit on SIGINT/SIGTERM.
 *
 * Runs on the main thread; the workers call back from their threads, and
 * only global rank 0 prints.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "ctl.h"
#include "jobspec.h"
#include "jobspec_sweep.h"
#include "metric_text.h"
#include "prompt_ids.h"
#include "run_dir.h"
#include "snapshot.h"
#include "secret.h"
#include "static_rdzv.h"
#include "store_client.h"
#include "suggest.h"
#include "tokcache.h"
#include "trainer.h"
#include "workers.h"

#define RUN_MAX_OVERRIDES 64

struct run_ctx {
    int json;
    int tty;
    int64_t stop_after; /* stop with a snapshot once this step is reached; 0 = never */
    int64_t last_step;
    /* Set by the main thread once workers_start returns; a worker that
     * reaches --stop-after first raises stop_wanted, which the main thread
     * checks after publishing ws (sequentially consistent atomics, so one
     * of the two sides always sees the other). */
    _Atomic(struct workers *) ws;
    atomic_bool stop_wanted;
    pthread_mutex_t out_mu;
    FILE *record; /* the run folder's metrics.jsonl (under out_mu); NULL: none */
};

static struct workers *volatile run_signal_target;
static volatile sig_atomic_t run_signalled;

static void run_on_signal(int sig)
{
    (void)sig;
    run_signalled = 1;
    if (run_signal_target)
        workers_request_stop(run_signal_target, GPT_STOP_SNAPSHOT);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: gptd run JOB.json [a.b=value ...] [options]\n"
               "\n"
               "Trains one job in the foreground.\n"
               "\n"
               "options:\n"
               "  --resume               continue from the newest valid snapshot of this run\n"
               "                         (corrupt ones are renamed NAME.corrupt; when none is\n"
               "                         valid the run fails instead of starting over)\n"
               "  --start-over           with --resume: start from step 0 when the folder holds\n"
               "                         only invalid snapshots (the job key\n"
               "                         snapshot.on_invalid=restart does the same)\n"
               "  --run-dir DIR          the run folder: its snapshots, metrics.jsonl, spec.json\n"
               "                         and overrides.json (default: a new run-DATE-TIME\n"
               "                         folder per run under the job's snapshot.dir, else\n"
               "                         under ./gptd-snapshots/NAME; --resume takes the newest)\n"
               "  --snapshot-dir DIR     the same as --run-dir\n"
               "  --overwrite            start afresh in a --run-dir that holds an earlier run\n"
               "                         (its snapshots and records are removed)\n"
               "  --resume-from FILE     continue from this snapshot file\n"
               "  --workers K            K worker threads, each its own rank (data parallel)\n"
               "  --world N --rank R --rdzv HOST:PORT\n"
               "                         join a world of N ranks across processes as ranks\n"
               "                         R..R+K-1; the process with rank 0 serves the store\n"
               "  --secret-file FILE     cluster secret of the store (at least 16 bytes, mode\n"
               "                         0600); default: ~/.cache/gptd/run.secret, made once\n"
               "                         per user, so ranks of one user on one host agree\n"
               "  --comm-timeout-s S     a collective (NCCL's or the ring's) that makes no\n"
               "                         progress for S seconds fails, so a dead rank ends\n"
               "                         the run (default 300)\n"
               "  --json                 print every metric and event as one JSON object per line\n"
               "  --stop-after STEP      stop with a snapshot once STEP steps are done\n"
               "  --sample N             print N sampled tokens from the final model\n"
               "  --prompt TEXT          prompt for --sample (the job's tokenizer encodes it)\n"
               "  --prompt-ids IDS       prompt for --sample as token ids, e.g. 15496,11\n"
               "  --temperature T        sampling temperature (default 0.8)\n"
               "  --top-k K              sample among the K likeliest tokens (default: all)\n"
               "  --seed N               sampling seed (default: trainer.seed)\n"
               "  -m, --multirun         one run after another per combination of the choices\n"
               "                         in a.b=v1,v2 overrides, each in DIR/mN of the\n"
               "                         snapshot folder\n"
               "  --print-spec           print the resolved job (includes, overrides) and exit\n"
               "  --help-spec            print every job key with its type, range and default\n");
}

static void print_json(json_t *o)
{
    if (!o)
        return;
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10));
    if (s) {
        fprintf(stdout, "%s\n", s);
        fflush(stdout);
        free(s);
    }
    json_decref(o);
}

static void run_metric(void *ctx, const struct gpt_metric *m)
{
    struct run_ctx *rc = ctx;
    pthread_mutex_lock(&rc->out_mu);
    rc->last_step = m->step;
    run_dir_record_line(rc->record, gpt_metric_to_json(m));
    if (rc->json) {
        print_json(gpt_metric_to_json(m));
    } else {
        char line[GPT_METRIC_LINE_MAX];
        gpt_metric_line(m, line, sizeof(line));
        if (rc->tty && !isfinite(m->val_loss))
            fprintf(stdout, "\r\033[K%s", line);
        else
            fprintf(stdout, "%s%s\n", rc->tty ? "\r\033[K" : "", line);
        fflush(stdout);
    }
    pthread_mutex_unlock(&rc->out_mu);
    if (rc->stop_after > 0 && m->step >= rc->stop_after) {
        atomic_store(&rc->stop_wanted, true);
        struct workers *ws = atomic_load(&rc->ws);
        if (ws)
            workers_request_stop(ws, GPT_STOP_SNAPSHOT);
    }
}

static void run_event(void *ctx, const struct gpt_event *e)
{
    struct run_ctx *rc = ctx;
    pthread_mutex_lock(&rc->out_mu);
    run_dir_record_line(rc->record, gpt_event_to_json(e));
    if (rc->json)
        print_json(gpt_event_to_json(e));
    else
        fprintf(stdout, "%s[%s] %s\n", rc->tty ? "\r\033[K" : "", e->kind, e->message);
    fflush(stdout);
    pthread_mutex_unlock(&rc->out_mu);
}

/* Claims the snapshot folder for this run (its owner marker). A fresh run
 * takes an empty folder or a new one, never one holding another run's or
 * job's snapshots; --resume continues as the folder's owner when this user
 * (or root) is that owner, and adopts a folder without a marker (as the
 * owner its snapshots record, when that is this user). */
static int run_claim_snapdir(const char *dir, int resume, struct gpt_err *err)
{
    struct gpt_snapshot_owner me = {0, 0, (uint32_t)getuid()}, found;
    if (resume) {
        int rc = gpt_snapshot_owner_load(dir, &found, err);
        if (rc == 0 && found.uid != me.uid && me.uid != 0)
            return gpt_err_set(err, -EPERM, "snapshot.dir",
                               "snapshot.dir %s belongs to uid %u, not to you", dir,
                               (unsigned)found.uid);
        if (rc == 0)
            return 0;
        if (rc != -ENOENT && rc != -ENOTDIR)
            return rc;
        struct gpt_err ignored;
        if (gpt_snapshot_owner_recorded(dir, &found, &ignored) == 0 &&
            (found.uid == me.uid || me.uid == 0))
            me = found;
    }
    while (me.token == 0)
        if (getrandom(&me.token, sizeof(me.token), 0) != (ssize_t)sizeof(me.token))
            return gpt_err_set(err, -EIO, NULL, "getrandom: %s", strerror(errno));
    int rc = gpt_snapshot_owner_claim(dir, &me, resume ? GPT_OWNER_ADOPT : 0, &found, err);
    if (rc == -EEXIST) {
        struct gpt_err why = *err;
        gpt_err_set(err, rc, "snapshot.dir",
                    "%s; continue it with --resume, start it over with --overwrite, or write"
                    " elsewhere with --run-dir DIR",
                    why.msg);
    }
    return rc;
}

/* The default snapshot directory: ./gptd-snapshots/<job name or file stem>. */
static void default_snapdir(const struct gpt_job *job, const char *file, char *buf, size_t cap)
{
    char stem[GPT_JOB_NAME_MAX];
    if (job->name[0]) {
        snprintf(stem, sizeof(stem), "%s", job->name);
    } else {
        const char *base = strrchr(file, '/');
        snprintf(stem, sizeof(stem), "%s", base ? base + 1 : file);
        char *dot = strrchr(stem, '.');
        if (dot && dot != stem)
            *dot = '\0';
    }
    snprintf(buf, cap, "gptd-snapshots/%s", stem);
}

static int parse_int_arg(const char *flag, const char *v, int64_t lo, int64_t *ret)
{
    char *end;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || errno || *end || x < lo) {
        fprintf(stderr, "gptd run: %s needs an integer >= %lld\n", flag, (long long)lo);
        return -1;
    }
    *ret = x;
    return 0;
}

/* gptd run -m: each combination of the overrides' choices as a gptd run
 * of its own, one after another, in DIR/m<N> of the snapshot folder. The
 * child gets argv without -m, the overrides and --snapshot-dir (`skip`),
 * plus its combination and folder. A stop signal stops the current child
 * (which snapshots) and starts no other. Returns the exit status: 0 when
 * every run succeeded, else the first failure's. */
/* The end of a sweep: its runs best first (gpt_sweep_results_sort), from
 * each run folder's metrics.jsonl, as a table (one JSON line with --json). */
static void run_sweep_summary(const struct gpt_sweep *sw, size_t n_run, const char *snapdir,
                              const double *time_s, bool json)
{
    struct gpt_sweep_result *r = calloc(n_run ? n_run : 1, sizeof(*r));
    char(*labels)[256] = calloc(n_run ? n_run : 1, sizeof(*labels));
    for (size_t j = 0; r && labels && j < n_run; j++) {
        char dir[GPT_JOB_PATH_MAX + 16];
        struct run_dir_sum sum;
        int dn = snprintf(dir, sizeof(dir), "%s/m%zu", snapdir, j);
        bool ok = dn > 0 && (size_t)dn < sizeof(dir) && run_dir_summary(dir, &sum) == 0;
        gpt_sweep_label((const char *const *)sw->assign + j * sw->n_keys, sw->n_keys, labels[j],
                        sizeof(labels[j]));
        r[j] = (struct gpt_sweep_result){
            .id = (int64_t)j,
            .best_val_loss = ok ? sum.best_val_loss : NAN,
            .final_loss = ok ? sum.final_loss : NAN,
            .steps = ok ? sum.steps : 0,
            .tokens = ok ? sum.tokens : 0,
            .time_s = time_s[j],
            .label = labels[j],
        };
    }
    if (r && labels) {
        gpt_sweep_results_sort(r, n_run);
        json_t *runs = json ? json_array() : NULL;
        if (!json)
            printf("\nsweep of %zu runs in %s, best validation loss first:\n"
                   "%-4s  %-6s  %-32s  %10s  %10s  %7s  %10s  %8s\n",
                   n_run, snapdir, "RANK", "RUN", "OVERRIDES", "BEST VAL", "FINAL LOSS", "STEPS",
                   "TOKENS", "TIME S");
        for (size_t i = 0; i < n_run; i++) {
            char run[32];
            snprintf(run, sizeof(run), "m%lld", (long long)r[i].id);
            if (json)
                json_array_append_new(
                    runs,
                    json_pack("{s:s, s:s, s:o, s:o, s:I, s:I, s:f}", "run", run, "overrides",
                              r[i].label, "best_val_loss",
                              isnan(r[i].best_val_loss) ? json_null()
                                                        : json_real(r[i].best_val_loss),
                              "final_loss",
                              isnan(r[i].final_loss) ? json_null() : json_real(r[i].final_loss),
                              "steps", (json_int_t)r[i].steps, "tokens", (json_int_t)r[i].tokens,
                              "time_s", r[i].time_s));
            else
                printf("%-4zu  %-6s  %-32s  %10.4f  %10.4f  %7lld  %10lld  %8.1f\n", i + 1, run,
                       r[i].label, r[i].best_val_loss, r[i].final_loss, (long long)r[i].steps,
                       (long long)r[i].tokens, r[i].time_s);
        }
        if (json)
            print_json(json_pack("{s:s, s:s, s:o}", "type", "sweep_summary", "dir", snapdir, "runs",
                                 runs));
        fflush(stdout);
    }
    free(r);
    free(labels);
}

static int run_sweep(int argc, char **argv, const bool *skip, const char *const *over,
                     size_t n_over, const char *snapdir, bool json)
{
    struct gpt_sweep sw;
    struct gpt_err err;
    if (gpt_sweep_expand(over, n_over, &sw, &err) < 0) {
        fprintf(stderr, "gptd run: -m: %s: %s\n", err.path, err.msg);
        return 2;
    }
    int status = 0;
    size_t cap = (size_t)argc + sw.n_keys + 4, j;
    char **args = calloc(cap, sizeof(*args));
    double *time_s = calloc(sw.n_jobs, sizeof(*time_s));
    char dir[GPT_JOB_PATH_MAX + 16];
    for (j = 0; args && time_s && j < sw.n_jobs && !run_signalled; j++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        size_t n = 0;
        args[n++] = (char *)"gptd";
        for (int i = 0; i < argc; i++)
            if (!skip[i])
                args[n++] = argv[i];
        for (size_t k = 0; k < sw.n_keys; k++)
            args[n++] = sw.assign[j * sw.n_keys + k];
        int dn = snprintf(dir, sizeof(dir), "%s/m%zu", snapdir, j);
        if (dn < 0 || (size_t)dn >= sizeof(dir)) {
            fprintf(stderr, "gptd run: snapshot folder %s is too long for a sweep\n", snapdir);
            status = 2;
            break;
        }
        args[n++] = (char *)"--snapshot-dir";
        args[n++] = dir;
        args[n] = NULL;
        fprintf(stderr, "gptd run: sweep run %zu of %zu:", j + 1, sw.n_jobs);
        for (size_t k = 0; k < sw.n_keys; k++)
            fprintf(stderr, " %s", sw.assign[j * sw.n_keys + k]);
        fprintf(stderr, " (snapshots in %s)\n", dir);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            execv("/proc/self/exe", args);
            fprintf(stderr, "gptd run: cannot run itself: %s\n", strerror(errno));
            _exit(127);
        }
        if (pid < 0) {
            fprintf(stderr, "gptd run: fork: %s\n", strerror(errno));
            status = 1;
            break;
        }
        int ws = 0;
        bool forwarded = false;
        while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
            if (run_signalled && !forwarded) { /* the child stops with a snapshot */
                kill(pid, SIGTERM);
                forwarded = true;
            }
        int rc = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
        if (rc != 0 && status == 0)
            status = rc;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        time_s[j] = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    }
    if (args && time_s && j > 0)
        run_sweep_summary(&sw, j, snapdir, time_s, json);
    bool ok = args && time_s;
    free(args);
    free(time_s);
    gpt_sweep_free(&sw);
    return ok ? status : 1;
}

/* What `gptd run`'s command line says. */
struct run_args {
    const char *file, *snapdir, *run_dir, *resume_from, *prompt, *prompt_ids, *rdzv, *secret_file;
    int64_t world, rank, top_k, seed, workers, stop_after, sample_tokens, comm_timeout_s;
    double temperature;
    const char *overrides[RUN_MAX_OVERRIDES];
    size_t n_over;
    int resume, json, multirun, print_spec, overwrite;
    bool *skip; /* argv a sweep run does not pass on */
};

enum run_opt_kind {
    RUN_OPT_FLAG,  /* an int field set to 1 */
    RUN_OPT_STR,   /* a const char * field */
    RUN_OPT_INT,   /* an int64_t field, at least `min` */
    RUN_OPT_OTHER, /* run_opt_other by name */
};

/* One row per option: it makes getopt_long's table, says how the value is
 * kept and whether a sweep's runs get the option (they get their own
 * folder and combination instead). The help text is usage()'s. */
struct run_opt {
    const char *name;
    int kind; /* enum run_opt_kind */
    size_t off;
    int64_t min;
    bool sweep_skip;
};

#define RUN_ARG(f) offsetof(struct run_args, f)
/* --comm-timeout-s at most a day, as the daemon's comm_timeout_s. */
#define RUN_COMM_TIMEOUT_MAX_S 86400
static const struct run_opt run_opts[] = {
    {"help", RUN_OPT_OTHER, 0, 0, false},
    {"help-spec", RUN_OPT_OTHER, 0, 0, false},
    {"resume", RUN_OPT_OTHER, 0, 0, false},
    {"start-over", RUN_OPT_OTHER, 0, 0, false},
    {"snapshot-dir", RUN_OPT_STR, RUN_ARG(snapdir), 0, true},
    {"run-dir", RUN_OPT_STR, RUN_ARG(run_dir), 0, true},
    {"overwrite", RUN_OPT_FLAG, RUN_ARG(overwrite), 0, false},
    {"resume-from", RUN_OPT_STR, RUN_ARG(resume_from), 0, false},
    {"workers", RUN_OPT_INT, RUN_ARG(workers), 1, false},
    {"world", RUN_OPT_INT, RUN_ARG(world), 1, false},
    {"rank", RUN_OPT_INT, RUN_ARG(rank), 0, false},
    {"rdzv", RUN_OPT_STR, RUN_ARG(rdzv), 0, false},
    {"secret-file", RUN_OPT_STR, RUN_ARG(secret_file), 0, false},
    {"comm-timeout-s", RUN_OPT_INT, RUN_ARG(comm_timeout_s), 1, false},
    {"json", RUN_OPT_FLAG, RUN_ARG(json), 0, false},
    {"stop-after", RUN_OPT_INT, RUN_ARG(stop_after), 1, false},
    {"sample", RUN_OPT_INT, RUN_ARG(sample_tokens), 0, false},
    {"prompt", RUN_OPT_STR, RUN_ARG(prompt), 0, false},
    {"prompt-ids", RUN_OPT_OTHER, 0, 0, false},
    {"temperature", RUN_OPT_OTHER, 0, 0, false},
    {"top-k", RUN_OPT_INT, RUN_ARG(top_k), 0, false},
    {"seed", RUN_OPT_INT, RUN_ARG(seed), 0, false},
    {"multirun", RUN_OPT_FLAG, RUN_ARG(multirun), 0, true},
    {"print-spec", RUN_OPT_FLAG, RUN_ARG(print_spec), 0, false},
};
#define RUN_N_OPTS  (sizeof(run_opts) / sizeof(run_opts[0]))
#define RUN_OPT_VAL 0x100 /* getopt_long's value of run_opts[i]: RUN_OPT_VAL + i */

static const struct run_opt *run_opt_find(const char *name)
{
    for (size_t i = 0; i < RUN_N_OPTS; i++)
        if (strcmp(run_opts[i].name, name) == 0)
            return &run_opts[i];
    return NULL;
}

/* The options that are not a plain field. Returns -1 to go on, else the
 * exit status. */
static int run_opt_other(struct run_args *a, const char *name, const char *v)
{
    struct gpt_err err;
    if (strcmp(name, "help") == 0) {
        usage(stdout);
        return 0;
    } else if (strcmp(name, "help-spec") == 0) {
        char *help = gpt_jobspec_help(0);
        if (help)
            fputs(help, stdout);
        free(help);
        return help ? 0 : 1;
    } else if (strcmp(name, "resume") == 0) {
        a->resume = a->resume ? a->resume : 1;
    } else if (strcmp(name, "start-over") == 0) {
        a->resume = GPT_RESUME_START_OVER;
    } else if (strcmp(name, "prompt-ids") == 0) {
        int32_t ids[GPT_PROMPT_IDS_MAX];
        size_t n;
        if (gpt_prompt_ids_parse(v, strlen(v), ids, GPT_PROMPT_IDS_MAX, &n, &err) < 0) {
            fprintf(stderr, "gptd run: --prompt-ids: %s\n", err.msg);
            return 2;
        }
        a->prompt_ids = v;
    } else if (strcmp(name, "temperature") == 0) {
        char *end;
        a->temperature = strtod(v, &end);
        if (*end || !(a->temperature > 0)) {
            fprintf(stderr, "gptd run: --temperature needs a number > 0\n");
            return 2;
        }
    }
    return -1;
}

/* One option of the table (its value v, NULL for a flag). -1 to go on,
 * else the exit status. */
static int run_opt_take(struct run_args *a, const struct run_opt *o, const char *v)
{
    char flag[40];
    snprintf(flag, sizeof(flag), "--%s", o->name);
    switch (o->kind) {
    case RUN_OPT_FLAG:
        *(int *)((char *)a + o->off) = 1;
        return -1;
    case RUN_OPT_STR:
        *(const char **)((char *)a + o->off) = v;
        return -1;
    case RUN_OPT_INT:
        return parse_int_arg(flag, v, o->min, (int64_t *)((char *)a + o->off)) < 0 ? 2 : -1;
    default:
        return run_opt_other(a, o->name, v);
    }
}

/* A word that is no option: the job file first, then a.b=value overrides. */
static int run_positional(struct run_args *a, const char *w)
{
    if (!a->file) {
        a->file = w;
    } else if (strchr(w, '=')) {
        if (a->n_over == RUN_MAX_OVERRIDES) {
            fprintf(stderr, "gptd run: more than %d overrides\n", RUN_MAX_OVERRIDES);
            return 2;
        }
        a->overrides[a->n_over++] = w;
        return -2; /* a sweep's runs get their own combination instead */
    } else {
        fprintf(stderr, "gptd run: expected an override a.b=value, got '%s'\n", w);
        return 2;
    }
    return -1;
}

/* An option run_opts lacks (with the closest it has), or one without its
 * value. */
static void run_unknown_option(const char *arg)
{
    const char *names[RUN_N_OPTS], *hint = NULL;
    char word[GPT_SUGGEST_LEN_MAX + 1];
    for (size_t i = 0; i < RUN_N_OPTS; i++)
        names[i] = run_opts[i].name;
    snprintf(word, sizeof(word), "%.*s", (int)strcspn(arg + 2, "="), arg + 2);
    if (strncmp(arg, "--", 2) == 0 && !run_opt_find(word))
        hint = gpt_suggest(word, names, RUN_N_OPTS);
    if (hint)
        fprintf(stderr, "gptd run: unknown option %s (did you mean --%s?)\n", arg, hint);
    else
        fprintf(stderr, "gptd run: unknown option or missing value: %s\n", arg);
    usage(stderr);
}

/* Parses argv through run_opts with getopt_long, in order ("-": words
 * that are no option come back where they stand, so a.b=value overrides
 * and the file may sit between options, and `skip` marks the very argv
 * entries a sweep's runs leave out). -1 to go on, else the exit status. */
static int run_parse_args(int argc, char **argv, struct run_args *a)
{
    struct option lo[RUN_N_OPTS + 1];
    for (size_t i = 0; i < RUN_N_OPTS; i++) {
        bool takes = run_opts[i].kind == RUN_OPT_STR || run_opts[i].kind == RUN_OPT_INT ||
                     strcmp(run_opts[i].name, "prompt-ids") == 0 ||
                     strcmp(run_opts[i].name, "temperature") == 0;
        lo[i] = (struct option){run_opts[i].name, takes ? required_argument : no_argument, NULL,
                                RUN_OPT_VAL + (int)i};
    }
    lo[RUN_N_OPTS] = (struct option){NULL, 0, NULL, 0};
    opterr = 0;
    optind = 1;
    int rc = -1;
    while (rc == -1) {
        int at = optind, c = getopt_long(argc, argv, "-:hm", lo, NULL);
        const struct run_opt *o = c >= RUN_OPT_VAL ? &run_opts[c - RUN_OPT_VAL] : NULL;
        if (c == -1)
            break;
        if (c == 'h' || c == 'm')
            o = run_opt_find(c == 'h' ? "help" : "multirun");
        if (c == 1) {
            rc = run_positional(a, optarg);
        } else if (o) {
            rc = run_opt_take(a, o, o->kind == RUN_OPT_FLAG ? NULL : optarg);
            if (rc == -1 && o->sweep_skip)
                rc = -2;
        } else if (c == ':' && optopt >= RUN_OPT_VAL &&
                   run_opts[optopt - RUN_OPT_VAL].kind == RUN_OPT_INT) {
            rc = run_opt_take(a, &run_opts[optopt - RUN_OPT_VAL], NULL);
        } else {
            run_unknown_option(argv[at]);
            rc = 2;
        }
        for (int i = at; rc == -2 && i < optind; i++)
            a->skip[i] = true;
        rc = rc == -2 ? -1 : rc;
    }
    for (int i = optind; rc == -1 && i < argc; i++) { /* after "--" */
        rc = run_positional(a, argv[i]);
        if (rc == -2) {
            a->skip[i] = true;
            rc = -1;
        }
    }
    return rc;
}

/* Loads the job (the file, its includes and overrides; a sweep's first
 * combination) and checks its paths; --print-spec prints it. -1 to go on,
 * else the exit status. */
static int run_load_job(const struct run_args *a, struct gpt_job *job)
{
    struct gpt_err err;
    struct gpt_sweep first = {0};
    int rc = 0;
    if (a->multirun && (rc = gpt_sweep_expand(a->overrides, a->n_over, &first, &err)) < 0) {
        fprintf(stderr, "gptd run: -m: %s: %s\n", err.path, err.msg);
        return 2;
    }
    /* A sweep's folder and checks come from its first combination. */
    rc = a->multirun
             ? gpt_jobspec_load(a->file, (const char *const *)first.assign, first.n_keys, job, &err)
             : gpt_jobspec_load(a->file, a->overrides, a->n_over, job, &err);
    gpt_sweep_free(&first);
    if (rc == 0 && !a->print_spec)
        rc = gpt_jobspec_check_paths(job, &err);
    if (rc < 0) {
        /* The message names the file (and line) or the command line. */
        fprintf(stderr, "gptd run: %s%s%s\n", err.path, err.path[0] ? ": " : "", err.msg);
        return 1;
    }
    char warn[1024];
    if (!a->print_spec && gpt_jobspec_warnings(job, warn, sizeof(warn)) > 0)
        for (char *save, *line = strtok_r(warn, "\n", &save); line;
             line = strtok_r(NULL, "\n", &save))
            fprintf(stderr, "gptd run: warning: %s\n", line);
    if (!a->print_spec || a->multirun)
        return -1;
    /* As gpt_jobspec_to_json writes it: indented, each number in the fewest
     * digits that read back exactly (0.9, not 0.90000000000000002). */
    char *text = gpt_jobspec_to_json(job);
    if (text)
        printf("%s\n", text);
    free(text);
    return text ? 0 : 1;
}

/* What the loaded job and the options decide together: the resume mode,
 * the worker count, the batch check and the snapshot folder. -1 to go
 * on, else the exit status. */
static int run_settle(struct run_args *a, const struct gpt_job *job, char *snapdir, size_t cap)
{
    /* snapshot.on_invalid: restart is the job's standing --start-over. */
    if (a->resume == 1 && job->snapshot.on_invalid == GPT_SNAPSHOT_ON_INVALID_RESTART)
        a->resume = GPT_RESUME_START_OVER;
    if (a->comm_timeout_s > RUN_COMM_TIMEOUT_MAX_S) {
        fprintf(stderr, "gptd run: --comm-timeout-s: %lld is more than %d\n",
                (long long)a->comm_timeout_s, RUN_COMM_TIMEOUT_MAX_S);
        return 2;
    }
    /* --workers, else distributed.workers_per_node, else one per GPU, else 1. */
    if (a->workers == 0)
        a->workers = workers_default_count(job, 1);
    int64_t size = a->world > 0 ? a->world : a->workers;
    if (job->trainer.global_batch < size) {
        fprintf(stderr,
                "gptd run: trainer.global_batch: %d is smaller than the world size (%lld): every "
                "worker needs at least one sequence per step\n",
                job->trainer.global_batch, (long long)size);
        return 1;
    }
    if (a->overwrite && !a->run_dir && !a->snapdir) {
        fprintf(stderr, "gptd run: --overwrite reuses a --run-dir DIR; without one every run"
                        " gets a new folder\n");
        return 2;
    }
    if (a->run_dir || a->snapdir)
        snprintf(snapdir, cap, "%s", a->run_dir ? a->run_dir : a->snapdir);
    else if (job->snapshot.dir[0])
        snprintf(snapdir, cap, "%s", job->snapshot.dir);
    else
        default_snapdir(job, a->file, snapdir, cap);
    return -1;
}

/* Where this run writes (rank 0): the folder given, emptied first with
 * --overwrite; else a new run folder under `dir` (the job's snapshot
 * folder), or with --resume its newest run folder (the folder itself when
 * it has none: runs from before run folders). The folder in dir. */
static int run_place(const struct run_args *a, char *dir, size_t cap, struct gpt_err *err)
{
    bool resume = a->resume || a->resume_from;
    if (a->run_dir || a->snapdir)
        return a->overwrite && !resume ? run_dir_clear(dir, err) : 0;
    char root[GPT_JOB_PATH_MAX];
    snprintf(root, sizeof(root), "%s", dir);
    if (!a->resume)
        return run_dir_make(root, dir, cap, err);
    if (run_dir_newest(root, dir, cap) < 0)
        snprintf(dir, cap, "%s", root);
    return 0;
}

/* The store always has a secret: without --secret-file, this user's own
 * (made once, 0600), which every rank of the user on this host finds.
 * Loaded before anything is claimed, so a bad secret changes nothing. */
static int run_secret(const struct run_args *a, unsigned char *secret, size_t cap, size_t *ret_len)
{
    struct gpt_err err;
    char user_secret[4096];
    const char *file = a->secret_file;
    *ret_len = 0;
    if (!a->rdzv)
        return 0;
    if (!file && (secret_user_path(user_secret, sizeof(user_secret), &err) < 0 ||
                  secret_file_ensure(user_secret, &err) < 0)) {
        fprintf(stderr, "gptd run: %s\n", err.msg);
        return -1;
    }
    if (store_secret_load(file ? file : user_secret, secret, cap, ret_len, &err) < 0) {
        fprintf(stderr, "gptd run: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* Starts the workers (after the static rendezvous, with --rdzv) and waits
 * for them. Signals are blocked while they start so that only the main
 * thread handles them. 0 or GPT_TRAIN_STOPPED with *res filled; -1 after
 * printing the error. */
static int run_train(const struct run_args *a, const struct gpt_job *job, const char *snapdir,
                     const unsigned char *secret, size_t secret_len, FILE *record,
                     struct gpt_train_result *res)
{
    struct gpt_err err;
    struct run_ctx ctx = {.json = a->json,
                          .tty = !a->json && isatty(STDOUT_FILENO),
                          .stop_after = a->stop_after,
                          .record = record};
    pthread_mutex_init(&ctx.out_mu, NULL);
    struct static_rdzv *rdzv_h = NULL;
    if (a->rdzv &&
        static_rdzv_open(a->rdzv, a->rank == 0, secret, secret_len, 300000, &rdzv_h, &err) < 0) {
        fprintf(stderr, "gptd run: rendezvous at %s: %s\n", a->rdzv, err.msg);
        return -1;
    }
    struct workers_opts wo = {
        .job = job,
        .n_workers = (int)a->workers,
        .snapshot_dir = snapdir,
        .resume = a->resume,
        .resume_path = a->resume_from,
        .ctx = &ctx,
        .on_metric = run_metric,
        .on_event = run_event,
        .world = (int)a->world,
        .rank_base = (int)a->rank,
        .kv = rdzv_h ? static_rdzv_kv(rdzv_h) : NULL,
        .kv_prefix = "run/",
        .comm_timeout_ms = (int)(a->comm_timeout_s * 1000),
    };
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    struct workers *ws = NULL;
    int rc = workers_start(&wo, &ws, &err);
    if (rc == 0) {
        atomic_store(&ctx.ws, ws);
        run_signal_target = ws; /* signals are blocked here: none is lost */
        if (atomic_load(&ctx.stop_wanted) || run_signalled)
            workers_request_stop(ws, GPT_STOP_SNAPSHOT);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) {
        memset(res, 0, sizeof(*res));
        rc = workers_join(ws, res, &err);
        run_signal_target = NULL;
        workers_free(ws);
    }
    static_rdzv_close(rdzv_h);
    if (rc == 0 && ctx.tty)
        fputc('\n', stdout);
    if (rc < 0)
        fprintf(stderr, "gptd run: %s%s%s\n", err.path, err.path[0] ? ": " : "", err.msg);
    return rc < 0 ? -1 : rc;
}

/* --sample N: tokens from the final snapshot. The exit status. */
static int run_sample(const struct run_args *a, const struct gpt_job *job, const char *snapshot)
{
    struct gpt_err err;
    struct gpt_sample_opts so = {
        .prompt = a->prompt,
        .tokens = (int)a->sample_tokens,
        .temperature = a->temperature,
        .top_k = (int)a->top_k,
        .seed = a->seed >= 0 ? (uint64_t)a->seed : job->trainer.seed,
        .threads = job->trainer.threads > 0 ? job->trainer.threads : 1,
    };
    char *text = NULL;
    int rc =
        a->prompt_ids && a->prompt[0]
            ? gpt_err_set(&err, -EINVAL, "prompt", "give --prompt or --prompt-ids, not both")
            : tokcache_sample(snapshot, job->data.vocab, NULL, a->prompt_ids, &so, &text, &err);
    if (rc < 0) {
        fprintf(stderr, "gptd run: sampling failed: %s\n", err.msg);
        return 1;
    }
    if (a->json)
        print_json(json_pack("{s:s, s:s}", "type", "sample", "text", text));
    else if (a->prompt[0] && strncmp(text, a->prompt, strlen(a->prompt)) == 0)
        fprintf(stdout, "--- sample (%lld tokens, temperature %g) ---\n%s\n--- generated ---\n%s\n",
                (long long)a->sample_tokens, a->temperature, a->prompt, text + strlen(a->prompt));
    else
        fprintf(stdout, "--- sample (%lld tokens, temperature %g) ---\n%s\n",
                (long long)a->sample_tokens, a->temperature, text);
    free(text);
    return 0;
}

/* Everything after the options: the job, the sweep or the one run, then
 * the sample. The exit status. */
static int run_main(int argc, char **argv, struct run_args *a)
{
    if (!a->file) {
        usage(stderr);
        return 2;
    }
    if ((a->world > 0) != (a->rdzv != NULL) ||
        (a->world > 0 && a->rank + (a->workers ? a->workers : 1) > a->world)) {
        fprintf(stderr, "gptd run: --world and --rdzv go together, and --rank + --workers must "
                        "not exceed --world\n");
        return 2;
    }
    struct gpt_job job;
    char snapdir[GPT_JOB_PATH_MAX];
    int rc = run_load_job(a, &job);
    if (rc < 0)
        rc = run_settle(a, &job, snapdir, sizeof(snapdir));
    if (rc >= 0)
        return rc;
    struct gpt_err err;
    if (a->multirun) { /* the sweep's runs go into one new folder, each its own mN */
        if (!a->run_dir && !a->snapdir && run_place(a, snapdir, sizeof(snapdir), &err) < 0) {
            fprintf(stderr, "gptd run: %s\n", err.msg);
            return 1;
        }
        return run_sweep(argc, argv, a->skip, a->overrides, a->n_over, snapdir, a->json);
    }
    unsigned char secret[STORE_SECRET_MAX];
    size_t secret_len;
    if (run_secret(a, secret, sizeof(secret), &secret_len) < 0)
        return 1;
    /* Only the process of global rank 0 writes (and resumes from) snapshots
     * and keeps the records. */
    bool resume = a->resume || a->resume_from;
    FILE *record = NULL;
    if (a->rank == 0 &&
        (run_place(a, snapdir, sizeof(snapdir), &err) < 0 ||
         run_claim_snapdir(snapdir, resume, &err) < 0 ||
         run_dir_record(snapdir, &job, a->overrides, a->n_over, a->resume, &record, &err) < 0)) {
        fprintf(stderr, "gptd run: %s\n", err.msg);
        return 1;
    }
    struct gpt_train_result result;
    rc = run_train(a, &job, snapdir, secret, secret_len, record, &result);
    if (record) {
        fclose(record);
        fprintf(stderr, "gptd run: the run's records are in %s (gptctl plot %s -o loss.svg)\n",
                snapdir, snapdir);
    }
    if (rc < 0)
        return 1;
    if (rc == GPT_TRAIN_STOPPED) {
        fprintf(stderr, "gptd run: stopped at step %lld%s; continue with --resume\n",
                (long long)result.step, run_signalled ? " on a signal" : "");
        return 0;
    }
    if (a->sample_tokens > 0 && result.last_snapshot[0])
        return run_sample(a, &job, result.last_snapshot);
    return 0;
}

int gptd_run_main(int argc, char **argv)
{
    /* A stop signal from the first moment on is a request to stop: before
     * the workers exist it is remembered (run_signalled) and passed on once
     * they start, so the run ends cleanly instead of dying by the signal. */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = run_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    struct run_args a = {.prompt = "", .seed = -1, .temperature = GPT_SAMPLE_TEMPERATURE_DEFAULT};
    a.skip = calloc((size_t)argc + 1, sizeof(*a.skip));
    if (!a.skip)
        return 1;
    int rc = run_parse_args(argc, argv, &a);
    if (rc < 0)
        rc = run_main(argc, argv, &a);
    free(a.skip);
    return rc;
}
