/*
 * gptctl: the command-line client of gptd. Parses flags, builds one
 * request, sends it over the control socket and prints the replies: aligned
 * tables for people, raw JSON lines with --json. Decisions live in the
 * daemon; this file only talks and formats (plus the SVG of `plot`).
 *
 * Exit status: 0 ok, 1 the request failed, 2 usage, 3 cannot reach gptd.
 * Single-threaded; blocking I/O.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h> /* isfinite, INFINITY: macros, no libm */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "jobspec.h"
#include "metric.h"

#define EXIT_FAIL    1
#define EXIT_USAGE   2
#define EXIT_NOREACH 3

#define CTL_REPLY_MAX    (64u << 20) /* longest reply line accepted */
#define CTL_OVERRIDE_MAX 64
#define CTL_PLOT_MAX     1000000 /* points kept for a plot */

struct ctl {
    const char *socket;
    bool json;
    int fd;
    int64_t next_id;
    struct gpt_ctl_linebuf lb;
};

static const char *ctl_prog = "gptctl";

static void ctl_usage(FILE *f)
{
    fprintf(f,
            "usage: gptctl [--socket PATH] [--json] COMMAND [ARGS]\n"
            "\n"
            "commands:\n"
            "  submit FILE [a.b=v ...] [--follow] [--priority N]   queue a job, print its id\n"
            "  validate FILE [a.b=v ...]     check a job file fully, without submitting\n"
            "  list                          all jobs\n"
            "  status [JOB]                  the daemon, or one job\n"
            "  logs [-f] [--since STEP] JOB  metrics and events (-f: follow until the end)\n"
            "  cancel JOB                    stop a job (it writes a snapshot first)\n"
            "  resume JOB [--snapshot ID]    queue a finished job again from a snapshot\n"
            "  snapshots JOB                 a job's snapshots\n"
            "  sample JOB --prompt TEXT [--tokens N] [--temperature T] [--top-k K]\n"
            "                                generate text from the newest snapshot\n"
            "  plot JOB -o FILE.svg          train and validation loss against step\n"
            "  nodes                         the nodes of the cluster\n"
            "\n"
            "The socket is --socket, else $GPTD_SOCKET, else %s.\n"
            "Job files are JSON or YAML (.yaml/.yml). Exit status: 0 ok, 1 the request\n"
            "failed, 2 usage error, 3 cannot reach gptd.\n",
            GPT_CTL_SOCKET_DEFAULT);
}

__attribute__((format(printf, 1, 2))) static int ctl_usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", ctl_prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see gptctl --help)\n");
    return EXIT_USAGE;
}

/* --- connection ---------------------------------------------------------- */

static int ctl_connect(struct ctl *c)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(c->socket) >= sizeof(sa.sun_path)) {
        fprintf(stderr, "%s: cannot reach gptd at %s: socket path too long\n", ctl_prog, c->socket);
        return EXIT_NOREACH;
    }
    memcpy(sa.sun_path, c->socket, strlen(c->socket) + 1);
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        fprintf(stderr, "%s: cannot reach gptd at %s: %s%s\n", ctl_prog, c->socket, strerror(e),
                e == ENOENT || e == ECONNREFUSED
                    ? " (is gptd running? use --socket or GPTD_SOCKET to point elsewhere)"
                : e == EACCES ? " (not in the socket's group?)"
                              : "");
        return EXIT_NOREACH;
    }
    gpt_ctl_linebuf_init(&c->lb, CTL_REPLY_MAX);
    return 0;
}

static int ctl_send(struct ctl *c, json_t *req)
{
    size_t n;
    char *line = gpt_ctl_line_encode(req, &n);
    json_decref(req);
    if (!line) {
        fprintf(stderr, "%s: out of memory\n", ctl_prog);
        return EXIT_FAIL;
    }
    for (size_t off = 0; off < n;) {
        ssize_t k = send(c->fd, line + off, n - off, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            fprintf(stderr, "%s: lost the connection to gptd at %s: %s\n", ctl_prog, c->socket,
                    strerror(errno));
            free(line);
            return EXIT_NOREACH;
        }
        off += (size_t)k;
    }
    free(line);
    return 0;
}

/* Reads the next reply line. Returns 0 with a new object, or an exit code.
 * The raw line is printed when --json is on and `echo` is set. */
static int ctl_recv(struct ctl *c, json_t **ret, bool echo)
{
    for (;;) {
        const char *line;
        size_t len;
        int rc = gpt_ctl_linebuf_next(&c->lb, &line, &len);
        if (rc < 0) {
            fprintf(stderr, "%s: reply longer than %u bytes\n", ctl_prog, CTL_REPLY_MAX);
            return EXIT_FAIL;
        }
        if (rc == 1) {
            json_error_t jerr;
            json_t *o = json_loadb(line, len, 0, &jerr);
            if (!json_is_object(o)) {
                json_decref(o);
                fprintf(stderr, "%s: gptd sent a malformed line: %s\n", ctl_prog, jerr.text);
                return EXIT_FAIL;
            }
            if (echo && c->json) {
                fwrite(line, 1, len, stdout);
                fputc('\n', stdout);
                fflush(stdout);
            }
            *ret = o;
            return 0;
        }
        char buf[65536];
        ssize_t k = recv(c->fd, buf, sizeof(buf), 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            fprintf(stderr, "%s: gptd at %s closed the connection%s%s\n", ctl_prog, c->socket,
                    k < 0 ? ": " : "", k < 0 ? strerror(errno) : "");
            return EXIT_NOREACH;
        }
        if (gpt_ctl_linebuf_push(&c->lb, buf, (size_t)k) < 0) {
            fprintf(stderr, "%s: reply longer than %u bytes\n", ctl_prog, CTL_REPLY_MAX);
            return EXIT_FAIL;
        }
    }
}

/* Prints an error reply; returns EXIT_FAIL. */
static int ctl_print_error(const json_t *reply)
{
    const json_t *e = json_object_get(reply, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    const char *path = json_string_value(json_object_get(e, "path"));
    fprintf(stderr, "%s: %s%s%s: %s\n", ctl_prog, code ? code : "error", path ? " at " : "",
            path ? path : "", msg ? msg : "(no message)");
    return EXIT_FAIL;
}

/* Sends `req` and waits for its one reply. Returns 0 with the reply (ok),
 * or an exit code (the error already printed). */
static int ctl_call(struct ctl *c, json_t *req, json_t **ret)
{
    int rc = ctl_send(c, req);
    if (rc)
        return rc;
    json_t *reply;
    rc = ctl_recv(c, &reply, true);
    if (rc)
        return rc;
    if (!json_is_true(json_object_get(reply, "ok"))) {
        rc = c->json ? EXIT_FAIL : ctl_print_error(reply);
        json_decref(reply);
        return rc;
    }
    *ret = reply;
    return 0;
}

static json_t *ctl_request(struct ctl *c, int op)
{
    /* NULL on ENOMEM: setting fields on NULL fails quietly and ctl_send
     * then reports "out of memory". */
    return gpt_ctl_request_new(op, ++c->next_id);
}

/* --- formatting helpers -------------------------------------------------- */

/* A table printed with each column as wide as its widest cell. */
#define TABLE_COLS 10
struct table {
    int ncols, nrows, cap;
    char *(*cells)[TABLE_COLS];
    bool right[TABLE_COLS];
};

static void table_row(struct table *t, ...)
{
    if (t->nrows == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        void *cells = realloc(t->cells, (size_t)cap * sizeof(*t->cells));
        if (!cells)
            return; /* out of memory: the row is left out */
        t->cells = cells;
        t->cap = cap;
    }
    va_list ap;
    va_start(ap, t);
    for (int i = 0; i < t->ncols; i++) {
        const char *s = va_arg(ap, const char *);
        char *d = strdup(s ? s : "-");
        t->cells[t->nrows][i] = d ? d : (char *)"";
    }
    va_end(ap);
    t->nrows++;
}

static void table_print(struct table *t)
{
    int w[TABLE_COLS] = {0};
    for (int r = 0; r < t->nrows; r++)
        for (int i = 0; i < t->ncols; i++) {
            int n = (int)strlen(t->cells[r][i]);
            w[i] = n > w[i] ? n : w[i];
        }
    for (int r = 0; r < t->nrows; r++) {
        for (int i = 0; i < t->ncols; i++) {
            const char *sep = i + 1 < t->ncols ? "  " : "\n";
            if (i + 1 == t->ncols && !t->right[i])
                printf("%s%s", t->cells[r][i], sep);
            else if (t->right[i])
                printf("%*s%s", w[i], t->cells[r][i], sep);
            else
                printf("%-*s%s", w[i], t->cells[r][i], sep);
            if (t->cells[r][i][0])
                free(t->cells[r][i]);
        }
    }
    free(t->cells);
}

static const char *fmt_int(char *buf, size_t cap, const json_t *v)
{
    if (!json_is_integer(v))
        return "-";
    snprintf(buf, cap, "%lld", (long long)json_integer_value(v));
    return buf;
}

/* A number with `prec` decimals, or with 3 significant digits when prec < 0. */
static const char *fmt_real(char *buf, size_t cap, const json_t *v, int prec)
{
    if (!json_is_number(v))
        return "-";
    if (prec < 0)
        snprintf(buf, cap, "%.3g", json_number_value(v));
    else
        snprintf(buf, cap, "%.*f", prec, json_number_value(v));
    return buf;
}

static const char *fmt_time(char *buf, size_t cap, const json_t *v)
{
    if (!json_is_number(v))
        return "-";
    time_t t = (time_t)json_number_value(v);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%d %H:%M:%S", &tm);
    return buf;
}

static const char *fmt_duration(char *buf, size_t cap, double s)
{
    if (!(s >= 0) || s > 1e9)
        return "-";
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
    return buf;
}

static const char *fmt_rate(char *buf, size_t cap, double v)
{
    if (!(v >= 0))
        return "-";
    if (v >= 1e6)
        snprintf(buf, cap, "%.1fM", v / 1e6);
    else if (v >= 1e3)
        snprintf(buf, cap, "%.1fk", v / 1e3);
    else
        snprintf(buf, cap, "%.0f", v);
    return buf;
}

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

static bool ctl_parse_job(const char *s, int64_t *ret)
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

struct logs_view {
    bool tty;
    bool bar_shown;
};

static void logs_clear_bar(struct logs_view *v)
{
    if (v->bar_shown) {
        fputs("\r\033[K", stdout);
        v->bar_shown = false;
    }
}

static void logs_print_metric(struct logs_view *v, const json_t *o)
{
    char a[32], b[32], c[32], d[32], e[32];
    int64_t step = json_integer_value(json_object_get(o, "step"));
    int64_t max = json_integer_value(json_object_get(o, "max_steps"));
    double loss = json_number_value(json_object_get(o, "loss"));
    const json_t *val = json_object_get(o, "val_loss");
    const json_t *acc = json_object_get(o, "accuracy");
    const char *rate =
        fmt_rate(a, sizeof(a), json_number_value(json_object_get(o, "tokens_per_s")));
    if (v->tty) {
        logs_clear_bar(v);
        if (val) {
            printf("step %lld: val_loss %.4f%s%s\n", (long long)step, json_number_value(val),
                   acc ? "  accuracy " : "", acc ? fmt_real(e, sizeof(e), acc, 3) : "");
        }
        int width = 30, fill = max > 0 ? (int)(width * step / max) : 0;
        fill = fill > width ? width : fill;
        char bar[64];
        for (int i = 0; i < width; i++)
            bar[i] = i < fill ? '#' : '-';
        bar[width] = '\0';
        printf("[%s] %lld/%lld  loss %.4f  %s tok/s  ETA %s", bar, (long long)step, (long long)max,
               loss, rate,
               fmt_duration(b, sizeof(b), json_number_value(json_object_get(o, "eta_s"))));
        v->bar_shown = true;
        fflush(stdout);
        return;
    }
    printf("step %lld/%lld  loss %.4f", (long long)step, (long long)max, loss);
    if (val)
        printf("  val_loss %.4f", json_number_value(val));
    if (acc)
        printf("  accuracy %s", fmt_real(e, sizeof(e), acc, 3));
    printf("  lr %s  %s tok/s  %s ms/step  eta %s\n",
           fmt_real(c, sizeof(c), json_object_get(o, "lr"), -1), rate,
           fmt_real(d, sizeof(d), json_object_get(o, "ms_per_step"), 1),
           fmt_duration(b, sizeof(b), json_number_value(json_object_get(o, "eta_s"))));
}

static void logs_print_event(struct logs_view *v, const json_t *o)
{
    char t[32];
    logs_clear_bar(v);
    const json_t *tm = json_object_get(o, "time");
    time_t sec = (time_t)json_number_value(tm);
    struct tm lt;
    localtime_r(&sec, &lt);
    strftime(t, sizeof(t), "%H:%M:%S", &lt);
    printf("%s [%s] %s\n", t, json_string_value(json_object_get(o, "kind")),
           json_string_value(json_object_get(o, "message")));
}

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
                printf("job %lld %s%s%s\n",
                       (long long)json_integer_value(json_object_get(o, "job")),
                       state ? state : "?", err ? ": " : "", err ? err : "");
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
        fprintf(stderr, "%s: %s%s%s%s\n", ctl_prog, err.path[0] ? err.path : "",
                err.path[0] ? ": " : "", err.msg, strstr(err.msg, file) ? "" : "");
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

static int cmd_submit(struct ctl *c, int argc, char **argv, bool validate_only)
{
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
            printf("%s: valid\n", file);
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

static int cmd_list(struct ctl *c, int argc, char **argv)
{
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

static int cmd_status(struct ctl *c, int argc, char **argv)
{
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
    }
    table_print(&t);
out:
    json_decref(reply);
    return 0;
}

static int cmd_logs(struct ctl *c, int argc, char **argv)
{
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

static int cmd_job_op(struct ctl *c, int argc, char **argv, int op)
{
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
               json_string_value(json_object_get(reply, "state")));
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

static int cmd_sample(struct ctl *c, int argc, char **argv)
{
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
        printf("%s\n", json_string_value(json_object_get(reply, "text")));
    json_decref(reply);
    return 0;
}

static int cmd_nodes(struct ctl *c, int argc, char **argv)
{
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
                       json_string_value(json_object_get(n, "node")), rdzv);
        }
    }
    json_decref(reply);
    return 0;
}

/* --- plot ------------------------------------------------------------------ */

/* gptctl links only gptproto (no libm): the little math the plot needs. */
static double plot_floor(double x)
{
    double t = (double)(long long)x;
    return t > x ? t - 1 : t;
}

static double plot_ceil(double x)
{
    double t = (double)(long long)x;
    return t < x ? t + 1 : t;
}

static double plot_min(double a, double b)
{
    return a < b ? a : b;
}

static double plot_max(double a, double b)
{
    return a > b ? a : b;
}

struct plot_series {
    double *x, *y;
    size_t n, cap;
};

static void plot_add(struct plot_series *s, double x, double y)
{
    if (s->n == CTL_PLOT_MAX || !isfinite(y))
        return;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        double *nx = realloc(s->x, cap * sizeof(double));
        if (nx)
            s->x = nx;
        double *ny = nx ? realloc(s->y, cap * sizeof(double)) : NULL;
        if (!ny)
            return; /* out of memory: the plot keeps the points it has */
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
}

/* A "nice" tick spacing (1, 2 or 5 times a power of ten) for ~n ticks. */
static double plot_tick(double span, int n)
{
    double raw = span / n, p = 1;
    while (p > raw)
        p /= 10;
    while (p * 10 <= raw)
        p *= 10;
    double f = raw / p;
    return p * (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10);
}

static int plot_write(FILE *f, int64_t job, const struct plot_series *tr,
                      const struct plot_series *va)
{
    const double W = 800, H = 500, L = 80, R = 30, T = 50, B = 60;
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    const struct plot_series *all[2] = {tr, va};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < all[k]->n; i++) {
            x0 = plot_min(x0, all[k]->x[i]);
            x1 = plot_max(x1, all[k]->x[i]);
            y0 = plot_min(y0, all[k]->y[i]);
            y1 = plot_max(y1, all[k]->y[i]);
        }
    if (!(x1 >= x0)) {
        fprintf(stderr, "%s: job %lld has no loss values to plot yet\n", ctl_prog, (long long)job);
        return EXIT_FAIL;
    }
    if (x1 == x0)
        x1 = x0 + 1;
    if (y1 - y0 < 1e-9) {
        y0 -= 0.5;
        y1 += 0.5;
    }
    double xt = plot_tick(x1 - x0, 8), yt = plot_tick(y1 - y0, 6);
    x0 = plot_floor(x0 / xt) * xt;
    x1 = plot_ceil(x1 / xt) * xt;
    y0 = plot_floor(y0 / yt) * yt;
    y1 = plot_ceil(y1 / yt) * yt;
#define PX(x) (L + ((x)-x0) / (x1 - x0) * (W - L - R))
#define PY(y) (H - B - ((y)-y0) / (y1 - y0) * (H - T - B))
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"13\">\n",
            W, H, W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f,
            "<text x=\"%.0f\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">job %lld: loss"
            " against step</text>\n",
            W / 2, (long long)job);
    for (double x = x0; x <= x1 + xt / 2; x += xt) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                PX(x), T, PX(x), H - B);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", PX(x),
                H - B + 18, x);
    }
    for (double y = y0; y <= y1 + yt / 2; y += yt) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L,
                PY(y), W - R, PY(y));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", L - 6, PY(y) + 4,
                (y < 0 ? -y : y) < yt * 1e-6 ? 0.0 : y);
    }
    fprintf(f,
            "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
            "stroke=\"black\"/>\n",
            L, T, W - L - R, H - T - B);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step</text>\n",
            L + (W - L - R) / 2, H - 18);
    fprintf(f,
            "<text transform=\"translate(22 %.0f) rotate(-90)\" text-anchor=\"middle\">loss"
            "</text>\n",
            T + (H - T - B) / 2);
    static const char *const colors[2] = {"#1f77b4", "#ff7f0e"};
    static const char *const names[2] = {"train loss", "val loss"};
    for (int k = 0; k < 2; k++) {
        if (!all[k]->n)
            continue;
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", colors[k]);
        for (size_t i = 0; i < all[k]->n; i++)
            fprintf(f, "%.1f,%.1f ", PX(all[k]->x[i]), PY(all[k]->y[i]));
        fprintf(f, "\"/>\n");
        if (k == 1)
            for (size_t i = 0; i < all[k]->n; i++)
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                        PX(all[k]->x[i]), PY(all[k]->y[i]), colors[k]);
        double ly = T + 18 + 20 * k;
        fprintf(f,
                "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" "
                "stroke-width=\"2\"/>\n",
                W - R - 130, ly - 4, W - R - 105, ly - 4, colors[k]);
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n", W - R - 98, ly, names[k]);
    }
    fprintf(f, "</svg>\n");
#undef PX
#undef PY
    return 0;
}

static int cmd_plot(struct ctl *c, int argc, char **argv)
{
    static const struct option opts[] = {{"output", required_argument, 0, 'o'}, {0, 0, 0, 0}};
    const char *out = NULL;
    int64_t job;
    int ch;
    while ((ch = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
        if (ch != 'o')
            return EXIT_USAGE;
        out = optarg;
    }
    if (optind + 1 != argc || !out)
        return ctl_usage_error("usage: plot JOB -o FILE.svg");
    if (!ctl_parse_job(argv[optind], &job))
        return EXIT_USAGE;
    int rc = ctl_connect(c);
    if (rc)
        return rc;
    json_t *r = ctl_request(c, GPT_CTL_OP_LOGS);
    json_object_set_new(r, "job", json_integer(job));
    if ((rc = ctl_send(c, r)))
        return rc;
    struct plot_series tr = {0}, va = {0};
    for (;;) {
        json_t *o;
        if ((rc = ctl_recv(c, &o, false)))
            return rc;
        if (!json_is_true(json_object_get(o, "ok"))) {
            rc = ctl_print_error(o);
            json_decref(o);
            return rc;
        }
        const char *type = json_string_value(json_object_get(o, "type"));
        bool end = type && strcmp(type, "end") == 0;
        if (type && strcmp(type, "metric") == 0) {
            double step = (double)json_integer_value(json_object_get(o, "step"));
            const json_t *loss = json_object_get(o, "loss"), *val = json_object_get(o, "val_loss");
            if (json_is_number(loss))
                plot_add(&tr, step, json_number_value(loss));
            if (json_is_number(val))
                plot_add(&va, step, json_number_value(val));
        }
        json_decref(o);
        if (end)
            break;
    }
    FILE *f = fopen(out, "w");
    if (!f) {
        fprintf(stderr, "%s: %s: %s\n", ctl_prog, out, strerror(errno));
        rc = EXIT_FAIL;
    } else {
        rc = plot_write(f, job, &tr, &va);
        if (fclose(f) != 0 && rc == 0) {
            fprintf(stderr, "%s: %s: %s\n", ctl_prog, out, strerror(errno));
            rc = EXIT_FAIL;
        }
        if (rc == 0 && !c->json)
            printf("%s: %zu train and %zu validation points\n", out, tr.n, va.n);
    }
    free(tr.x);
    free(tr.y);
    free(va.x);
    free(va.y);
    return rc;
}

int main(int argc, char **argv)
{
    struct ctl c = {.fd = -1};
    c.socket = getenv("GPTD_SOCKET");
    if (!c.socket || !c.socket[0])
        c.socket = GPT_CTL_SOCKET_DEFAULT;
    static const struct option opts[] = {{"socket", required_argument, 0, 'S'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int ch;
    /* Global options stop at the command ("+"): its options are its own. */
    while ((ch = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (ch) {
        case 'S':
            c.socket = optarg;
            break;
        case 'j':
            c.json = true;
            break;
        case 'h':
            ctl_usage(stdout);
            return 0;
        default:
            return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        ctl_usage(stderr);
        return EXIT_USAGE;
    }
    /* --json (and --socket) may also follow the command. */
    int n = 0;
    char **args = calloc((size_t)argc + 1, sizeof(char *));
    if (!args)
        return EXIT_FAIL;
    for (int i = optind; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            c.json = true;
        else if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc)
            c.socket = argv[++i];
        else if (strncmp(argv[i], "--socket=", 9) == 0)
            c.socket = argv[i] + 9;
        else
            args[n++] = argv[i];
    }
    const char *cmd = args[0];
    optind = 0; /* GNU getopt: start over; each command parses args[1..] */
    int rc;
    if (strcmp(cmd, "submit") == 0)
        rc = cmd_submit(&c, n, args, false);
    else if (strcmp(cmd, "validate") == 0)
        rc = cmd_submit(&c, n, args, true);
    else if (strcmp(cmd, "list") == 0)
        rc = cmd_list(&c, n, args);
    else if (strcmp(cmd, "status") == 0)
        rc = cmd_status(&c, n, args);
    else if (strcmp(cmd, "logs") == 0)
        rc = cmd_logs(&c, n, args);
    else if (strcmp(cmd, "cancel") == 0)
        rc = cmd_job_op(&c, n, args, GPT_CTL_OP_CANCEL);
    else if (strcmp(cmd, "resume") == 0)
        rc = cmd_job_op(&c, n, args, GPT_CTL_OP_RESUME);
    else if (strcmp(cmd, "snapshots") == 0)
        rc = cmd_job_op(&c, n, args, GPT_CTL_OP_SNAPSHOTS);
    else if (strcmp(cmd, "sample") == 0)
        rc = cmd_sample(&c, n, args);
    else if (strcmp(cmd, "plot") == 0)
        rc = cmd_plot(&c, n, args);
    else if (strcmp(cmd, "nodes") == 0)
        rc = cmd_nodes(&c, n, args);
    else if (strcmp(cmd, "help") == 0) {
        ctl_usage(stdout);
        rc = 0;
    } else
        rc = ctl_usage_error("unknown command \"%s\"", cmd);
    if (c.fd >= 0)
        close(c.fd);
    gpt_ctl_linebuf_done(&c.lb);
    free(args);
    return rc;
}
