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
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "ctl.h"
#include "jobspec.h"
#include "jobspec_sweep.h"
#include "metric_text.h"
#include "prompt_ids.h"
#include "snapshot.h"
#include "secret.h"
#include "static_rdzv.h"
#include "store_client.h"
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
               "  --snapshot-dir DIR     where snapshots go (default: the job's snapshot.dir,\n"
               "                         else ./gptd-snapshots/NAME)\n"
               "  --resume-from FILE     continue from this snapshot file\n"
               "  --workers K            K worker threads, each its own rank (data parallel)\n"
               "  --world N --rank R --rdzv HOST:PORT\n"
               "                         join a world of N ranks across processes as ranks\n"
               "                         R..R+K-1; the process with rank 0 serves the store\n"
               "  --secret-file FILE     cluster secret of the store (at least 16 bytes, mode\n"
               "                         0600); default: ~/.cache/gptd/run.secret, made once\n"
               "                         per user, so ranks of one user on one host agree\n"
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
                    "%s; continue it with --resume, or write elsewhere with --snapshot-dir DIR",
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
static int run_sweep(int argc, char **argv, const bool *skip, const char *const *over,
                     size_t n_over, const char *snapdir)
{
    struct gpt_sweep sw;
    struct gpt_err err;
    if (gpt_sweep_expand(over, n_over, &sw, &err) < 0) {
        fprintf(stderr, "gptd run: -m: %s: %s\n", err.path, err.msg);
        return 2;
    }
    int status = 0;
    size_t cap = (size_t)argc + sw.n_keys + 4;
    char **args = calloc(cap, sizeof(*args));
    char dir[GPT_JOB_PATH_MAX + 16];
    for (size_t j = 0; args && j < sw.n_jobs && !run_signalled; j++) {
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
    }
    free(args);
    gpt_sweep_free(&sw);
    return args ? status : 1;
}

int gptd_run_main(int argc, char **argv)
{
    const char *file = NULL, *snapdir_arg = NULL, *resume_from = NULL, *prompt = "";
    const char *rdzv = NULL, *secret_file = NULL, *prompt_ids = NULL;
    int64_t world = 0, rank = 0, top_k = 0, sample_seed = -1;
    double temperature = GPT_SAMPLE_TEMPERATURE_DEFAULT;
    const char *overrides[RUN_MAX_OVERRIDES];
    size_t n_over = 0;
    int resume = 0, json = 0, multirun = 0, print_spec = 0;
    bool *skip = calloc((size_t)argc + 1, sizeof(*skip)); /* argv a sweep run does not pass on */
    if (!skip)
        return 1;
    int64_t workers = 0, stop_after = 0, sample_tokens = 0;
    struct gpt_err err;

    /* A stop signal from the first moment on is a request to stop: before
     * the workers exist it is remembered (run_signalled) and passed on once
     * they start, so the run ends cleanly instead of dying by the signal. */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = run_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--help-spec") == 0) {
            char *help = gpt_jobspec_help(0);
            if (!help)
                return 1;
            fputs(help, stdout);
            free(help);
            return 0;
        } else if (strcmp(a, "--resume") == 0) {
            resume = resume ? resume : 1;
        } else if (strcmp(a, "--start-over") == 0) {
            resume = GPT_RESUME_START_OVER;
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--multirun") == 0) {
            multirun = 1;
            skip[i] = true;
        } else if (strcmp(a, "--print-spec") == 0) {
            print_spec = 1;
        } else if (strcmp(a, "--snapshot-dir") == 0 && next) {
            skip[i] = skip[i + 1] = true;
            snapdir_arg = argv[++i];
        } else if (strcmp(a, "--resume-from") == 0 && next) {
            resume_from = argv[++i];
        } else if (strcmp(a, "--prompt") == 0 && next) {
            prompt = argv[++i];
        } else if (strcmp(a, "--prompt-ids") == 0 && next) {
            prompt_ids = argv[++i];
            int32_t ids[GPT_PROMPT_IDS_MAX];
            size_t n;
            if (gpt_prompt_ids_parse(prompt_ids, strlen(prompt_ids), ids, GPT_PROMPT_IDS_MAX, &n,
                                     &err) < 0) {
                fprintf(stderr, "gptd run: --prompt-ids: %s\n", err.msg);
                return 2;
            }
        } else if (strcmp(a, "--temperature") == 0 && next) {
            char *end;
            temperature = strtod(argv[++i], &end);
            if (*end || !(temperature > 0)) {
                fprintf(stderr, "gptd run: --temperature needs a number > 0\n");
                return 2;
            }
        } else if (strcmp(a, "--top-k") == 0) {
            if (parse_int_arg(a, next, 0, &top_k) < 0)
                return 2;
            i++;
        } else if (strcmp(a, "--seed") == 0) {
            if (parse_int_arg(a, next, 0, &sample_seed) < 0)
                return 2;
            i++;
        } else if (strcmp(a, "--workers") == 0) {
            if (parse_int_arg(a, next, 1, &workers) < 0)
                return 2;
            i++;
        } else if (strcmp(a, "--rdzv") == 0 && next) {
            rdzv = argv[++i];
        } else if (strcmp(a, "--secret-file") == 0 && next) {
            secret_file = argv[++i];
        } else if (strcmp(a, "--world") == 0) {
            if (parse_int_arg(a, next, 1, &world) < 0)
                return 2;
            i++;
        } else if (strcmp(a, "--rank") == 0) {
            if (parse_int_arg(a, next, 0, &rank) < 0)
                return 2;
            i++;
        } else if (strcmp(a, "--stop-after") == 0) {
            if (parse_int_arg(a, next, 1, &stop_after) < 0)
                return 2;
            i++;
        } else if (strcmp(a, "--sample") == 0) {
            if (parse_int_arg(a, next, 0, &sample_tokens) < 0)
                return 2;
            i++;
        } else if (a[0] == '-') {
            fprintf(stderr, "gptd run: unknown option or missing value: %s\n", a);
            usage(stderr);
            return 2;
        } else if (!file) {
            file = a;
        } else if (strchr(a, '=')) {
            if (n_over == RUN_MAX_OVERRIDES) {
                fprintf(stderr, "gptd run: more than %d overrides\n", RUN_MAX_OVERRIDES);
                return 2;
            }
            overrides[n_over++] = a;
            skip[i] = true;
        } else {
            fprintf(stderr, "gptd run: expected an override a.b=value, got '%s'\n", a);
            return 2;
        }
    }
    if (!file) {
        usage(stderr);
        return 2;
    }
    if ((world > 0) != (rdzv != NULL) || (world > 0 && rank + (workers ? workers : 1) > world)) {
        fprintf(stderr, "gptd run: --world and --rdzv go together, and --rank + --workers must "
                        "not exceed --world\n");
        return 2;
    }

    struct gpt_job job;
    struct gpt_sweep first = {0};
    int rc = 0;
    if (multirun && (rc = gpt_sweep_expand(overrides, n_over, &first, &err)) < 0) {
        fprintf(stderr, "gptd run: -m: %s: %s\n", err.path, err.msg);
        free(skip);
        return 2;
    }
    /* A sweep's folder and checks come from its first combination. */
    rc = multirun
             ? gpt_jobspec_load(file, (const char *const *)first.assign, first.n_keys, &job, &err)
             : gpt_jobspec_load(file, overrides, n_over, &job, &err);
    gpt_sweep_free(&first);
    if (rc == 0 && !print_spec)
        rc = gpt_jobspec_check_paths(&job, &err);
    if (rc < 0) {
        /* The message names the file (and line) or the command line. */
        fprintf(stderr, "gptd run: %s%s%s\n", err.path, err.path[0] ? ": " : "", err.msg);
        free(skip);
        return 1;
    }
    if (print_spec && !multirun) {
        char *text = gpt_jobspec_to_json(&job);
        json_t *o = text ? json_loads(text, 0, NULL) : NULL;
        char *pretty = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
        if (pretty)
            printf("%s\n", pretty);
        free(pretty);
        json_decref(o);
        free(text);
        free(skip);
        return pretty ? 0 : 1;
    }

    /* snapshot.on_invalid: restart is the job's standing --start-over. */
    if (resume == 1 && job.snapshot.on_invalid == GPT_SNAPSHOT_ON_INVALID_RESTART)
        resume = GPT_RESUME_START_OVER;
    /* --workers, else distributed.workers_per_node, else one per GPU, else 1. */
    if (workers == 0)
        workers = workers_default_count(&job, 1);
    if (job.trainer.global_batch < (world > 0 ? world : workers)) {
        fprintf(stderr,
                "gptd run: trainer.global_batch: %d is smaller than the world size (%lld): every "
                "worker needs at least one sequence per step\n",
                job.trainer.global_batch, (long long)(world > 0 ? world : workers));
        free(skip);
        return 1;
    }
    char snapdir[GPT_JOB_PATH_MAX];
    if (snapdir_arg)
        snprintf(snapdir, sizeof(snapdir), "%s", snapdir_arg);
    else if (job.snapshot.dir[0])
        snprintf(snapdir, sizeof(snapdir), "%s", job.snapshot.dir);
    else
        default_snapdir(&job, file, snapdir, sizeof(snapdir));
    if (multirun) {
        rc = run_sweep(argc, argv, skip, overrides, n_over, snapdir);
        free(skip);
        return rc;
    }
    free(skip);

    /* The store always has a secret: without --secret-file, this user's own
     * (made once, 0600), which every rank of the user on this host finds.
     * Loaded before anything is claimed, so a bad secret changes nothing. */
    unsigned char secret[STORE_SECRET_MAX];
    char user_secret[4096];
    size_t secret_len = 0;
    if (rdzv) {
        if (!secret_file && ((rc = secret_user_path(user_secret, sizeof(user_secret), &err)) < 0 ||
                             (rc = secret_file_ensure(user_secret, &err)) < 0)) {
            fprintf(stderr, "gptd run: %s\n", err.msg);
            return 1;
        }
        if (!secret_file)
            secret_file = user_secret;
        if ((rc = store_secret_load(secret_file, secret, sizeof(secret), &secret_len, &err)) < 0) {
            fprintf(stderr, "gptd run: %s\n", err.msg);
            return 1;
        }
    }

    /* Only the process of global rank 0 writes (and resumes from) snapshots. */
    if (rank == 0 && (rc = run_claim_snapdir(snapdir, resume || resume_from, &err)) < 0) {
        fprintf(stderr, "gptd run: %s\n", err.msg);
        return 1;
    }

    struct run_ctx ctx = {
        .json = json,
        .tty = !json && isatty(STDOUT_FILENO),
        .stop_after = stop_after,
    };
    pthread_mutex_init(&ctx.out_mu, NULL);

    struct static_rdzv *rdzv_h = NULL;
    if (rdzv) {
        rc = static_rdzv_open(rdzv, rank == 0, secret, secret_len, 300000, &rdzv_h, &err);
        if (rc < 0) {
            fprintf(stderr, "gptd run: rendezvous at %s: %s\n", rdzv, err.msg);
            return 1;
        }
    }

    struct workers_opts wo = {
        .job = &job,
        .n_workers = (int)workers,
        .snapshot_dir = snapdir,
        .resume = resume,
        .resume_path = resume_from,
        .ctx = &ctx,
        .on_metric = run_metric,
        .on_event = run_event,
        .world = (int)world,
        .rank_base = (int)rank,
        .kv = rdzv_h ? static_rdzv_kv(rdzv_h) : NULL,
        .kv_prefix = "run/",
    };
    /* Signals are blocked while the workers start so that only the main
     * thread handles them. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    struct workers *ws = NULL;
    rc = workers_start(&wo, &ws, &err);
    if (rc == 0) {
        atomic_store(&ctx.ws, ws);
        run_signal_target = ws; /* signals are blocked here: none is lost */
        if (atomic_load(&ctx.stop_wanted) || run_signalled)
            workers_request_stop(ws, GPT_STOP_SNAPSHOT);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc < 0) {
        fprintf(stderr, "gptd run: %s\n", err.msg);
        static_rdzv_close(rdzv_h);
        return 1;
    }

    struct gpt_train_result result;
    memset(&result, 0, sizeof(result));
    rc = workers_join(ws, &result, &err);
    run_signal_target = NULL;
    workers_free(ws);
    static_rdzv_close(rdzv_h);
    if (ctx.tty)
        fputc('\n', stdout);
    if (rc < 0) {
        fprintf(stderr, "gptd run: %s%s%s\n", err.path, err.path[0] ? ": " : "", err.msg);
        return 1;
    }
    if (rc == GPT_TRAIN_STOPPED) {
        fprintf(stderr, "gptd run: stopped at step %lld%s; continue with --resume\n",
                (long long)result.step, run_signalled ? " on a signal" : "");
        return 0;
    }
    if (sample_tokens > 0 && result.last_snapshot[0]) {
        struct gpt_sample_opts so = {
            .prompt = prompt,
            .tokens = (int)sample_tokens,
            .temperature = temperature,
            .top_k = (int)top_k,
            .seed = sample_seed >= 0 ? (uint64_t)sample_seed : job.trainer.seed,
            .threads = job.trainer.threads > 0 ? job.trainer.threads : 1,
        };
        char *text = NULL;
        rc = prompt_ids && prompt[0]
                 ? gpt_err_set(&err, -EINVAL, "prompt", "give --prompt or --prompt-ids, not both")
                 : tokcache_sample(result.last_snapshot, job.data.vocab, NULL, prompt_ids, &so,
                                   &text, &err);
        if (rc < 0) {
            fprintf(stderr, "gptd run: sampling failed: %s\n", err.msg);
            return 1;
        }
        if (json) {
            json_t *o = json_pack("{s:s, s:s}", "type", "sample", "text", text);
            print_json(o);
        } else {
            fprintf(stdout, "--- sample (%lld tokens, temperature %g) ---\n%s\n",
                    (long long)sample_tokens, temperature, text);
        }
        free(text);
    }
    return 0;
}
