/*
 * plot: `gptctl plot JOB... -o FILE.svg [--lr]`, the train (solid) and
 * validation (dashed, dots) loss of one or more jobs against step, one
 * colour per job labelled by its name, with an optional learning-rate
 * panel below, as a self-contained SVG (see gptctl.h). Reads each job's
 * whole `logs` history; keeps at most CTL_PLOT_MAX points per series. Only
 * SVG is written: any other extension is refused (no SVG bytes in a .png).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h> /* isfinite, INFINITY: macros, no libm */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpt_atomic_file.h"
#include "gptctl.h"
#include "jobspec_sweep.h"

#define PLOT_JOBS_MAX 16

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

/* One job's curves. */
struct plot_job {
    int64_t id;
    char label[160]; /* "#7 name" or "#7 lr=1e-3", XML-escaped */
    struct plot_series tr, va, lr;
};

/* XML text: & < > " ' escaped; control bytes dropped (names are hostile). */
static void plot_xml(char *out, size_t cap, const char *s)
{
    size_t n = 0;
    for (; s && *s && n + 7 < cap; s++) {
        const char *rep = NULL;
        switch (*s) {
        case '&':
            rep = "&amp;";
            break;
        case '<':
            rep = "&lt;";
            break;
        case '>':
            rep = "&gt;";
            break;
        case '"':
            rep = "&quot;";
            break;
        case '\'':
            rep = "&#39;";
            break;
        default:
            if ((unsigned char)*s < 0x20 || *s == 0x7f)
                continue;
        }
        if (rep) {
            size_t k = strlen(rep);
            memcpy(out + n, rep, k);
            n += k;
        } else {
            out[n++] = *s;
        }
    }
    out[n] = '\0';
}

/* One panel's frame: the range of the series `which` (0 loss, 1 lr) of
 * all jobs, with nice ticks. */
struct plot_frame {
    double x0, x1, y0, y1, xt, yt;
    double top, bottom; /* pixel rows of the panel */
};

static const double PW = 860, PL = 80, PR = 200; /* width; left and right margins */

static bool plot_range(const struct plot_job *jobs, int n, int which, struct plot_frame *fr)
{
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int j = 0; j < n; j++) {
        const struct plot_series *ss[2] = {which ? &jobs[j].lr : &jobs[j].tr,
                                           which ? NULL : &jobs[j].va};
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; ss[k] && i < ss[k]->n; i++) {
                x0 = plot_min(x0, ss[k]->x[i]);
                x1 = plot_max(x1, ss[k]->x[i]);
                y0 = plot_min(y0, ss[k]->y[i]);
                y1 = plot_max(y1, ss[k]->y[i]);
            }
    }
    if (!(x1 >= x0))
        return false;
    if (x1 == x0)
        x1 = x0 + 1;
    if (y1 - y0 < 1e-12 * (y1 > 0 ? y1 : 1)) {
        double d = y1 != 0 ? (y1 < 0 ? -y1 : y1) * 0.5 : 0.5;
        y0 -= d;
        y1 += d;
    }
    fr->xt = plot_tick(x1 - x0, 8);
    fr->yt = plot_tick(y1 - y0, 5);
    fr->x0 = plot_floor(x0 / fr->xt) * fr->xt;
    fr->x1 = plot_ceil(x1 / fr->xt) * fr->xt;
    fr->y0 = plot_floor(y0 / fr->yt) * fr->yt;
    fr->y1 = plot_ceil(y1 / fr->yt) * fr->yt;
    return true;
}

static double plot_px(const struct plot_frame *fr, double x)
{
    return PL + (x - fr->x0) / (fr->x1 - fr->x0) * (PW - PL - PR);
}

static double plot_py(const struct plot_frame *fr, double y)
{
    return fr->bottom - (y - fr->y0) / (fr->y1 - fr->y0) * (fr->bottom - fr->top);
}

static void plot_axes(FILE *f, const struct plot_frame *fr, const char *ylabel, bool xlabel)
{
    for (double x = fr->x0; x <= fr->x1 + fr->xt / 2; x += fr->xt) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                plot_px(fr, x), fr->top, plot_px(fr, x), fr->bottom);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", plot_px(fr, x),
                fr->bottom + 18, x);
    }
    for (double y = fr->y0; y <= fr->y1 + fr->yt / 2; y += fr->yt) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", PL,
                plot_py(fr, y), PW - PR, plot_py(fr, y));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", PL - 6,
                plot_py(fr, y) + 4, (y < 0 ? -y : y) < fr->yt * 1e-6 ? 0.0 : y);
    }
    fprintf(f,
            "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
            "stroke=\"black\"/>\n",
            PL, fr->top, PW - PL - PR, fr->bottom - fr->top);
    if (xlabel)
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step</text>\n",
                PL + (PW - PL - PR) / 2, fr->bottom + 40);
    fprintf(f,
            "<text transform=\"translate(22 %.0f) rotate(-90)\" text-anchor=\"middle\">%s"
            "</text>\n",
            fr->top + (fr->bottom - fr->top) / 2, ylabel);
}

static void plot_line(FILE *f, const struct plot_frame *fr, const struct plot_series *s,
                      const char *color, bool dashed, bool dots)
{
    if (!s->n)
        return;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", color,
            dashed ? " stroke-dasharray=\"6 4\"" : "");
    for (size_t i = 0; i < s->n; i++)
        fprintf(f, "%.1f,%.1f ", plot_px(fr, s->x[i]), plot_py(fr, s->y[i]));
    fprintf(f, "\"/>\n");
    for (size_t i = 0; dots && i < s->n; i++)
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", plot_px(fr, s->x[i]),
                plot_py(fr, s->y[i]), color);
}

static int plot_write(FILE *f, const struct plot_job *jobs, int n, bool lr)
{
    struct plot_frame loss, rate;
    if (!plot_range(jobs, n, 0, &loss)) {
        fprintf(stderr, "%s: %s no loss values to plot yet\n", ctl_prog,
                n == 1 ? "the job has" : "the jobs have");
        return EXIT_FAIL;
    }
    bool has_lr = lr && plot_range(jobs, n, 1, &rate);
    if (has_lr) { /* one step axis for both panels */
        rate.x0 = loss.x0 = plot_min(loss.x0, rate.x0);
        rate.x1 = loss.x1 = plot_max(loss.x1, rate.x1);
        rate.xt = loss.xt = plot_tick(loss.x1 - loss.x0, 8);
    }
    double H = has_lr ? 760 : 520;
    loss.top = 50;
    loss.bottom = has_lr ? 470 : 460;
    rate.top = 520;
    rate.bottom = 700;
    static const char *const colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"13\">\n",
            PW, H, PW, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    if (n == 1)
        fprintf(f,
                "<text x=\"%.0f\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">%s: loss"
                " against step</text>\n",
                PW / 2, jobs[0].label);
    else
        fprintf(f,
                "<text x=\"%.0f\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">loss"
                " against step (solid: train, dashed: validation)</text>\n",
                PW / 2);
    plot_axes(f, &loss, "loss", !has_lr);
    if (has_lr)
        plot_axes(f, &rate, "learning rate", true);
    for (int j = 0; j < n; j++) {
        const char *color = colors[j % (int)(sizeof(colors) / sizeof(colors[0]))];
        plot_line(f, &loss, &jobs[j].tr, color, false, false);
        plot_line(f, &loss, &jobs[j].va, color, true, true);
        if (has_lr)
            plot_line(f, &rate, &jobs[j].lr, color, false, false);
        /* Legend: a single job keeps the train/val names, several are named. */
        double ly = loss.top + 18 + 20 * j;
        fprintf(f,
                "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" "
                "stroke-width=\"2\"/>\n",
                PW - PR + 10, ly - 4, PW - PR + 35, ly - 4, color);
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n", PW - PR + 42, ly,
                n == 1 ? "train loss" : jobs[j].label);
        if (n == 1 && jobs[j].va.n) {
            fprintf(f,
                    "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" "
                    "stroke-width=\"2\" stroke-dasharray=\"6 4\"/>\n",
                    PW - PR + 10, ly + 16, PW - PR + 35, ly + 16, color);
            fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">val loss</text>\n", PW - PR + 42, ly + 20);
        }
    }
    fprintf(f, "</svg>\n");
    return 0;
}

/* One record of a job's history (logs or metrics.jsonl): a metric's
 * points; anything else is skipped. */
static void plot_record(struct plot_job *j, const json_t *o)
{
    const char *type = json_string_value(json_object_get(o, "type"));
    if (!type || strcmp(type, "metric") != 0)
        return;
    double step = (double)json_integer_value(json_object_get(o, "step"));
    const json_t *loss = json_object_get(o, "loss"), *val = json_object_get(o, "val_loss"),
                 *lr = json_object_get(o, "lr");
    if (json_is_number(loss))
        plot_add(&j->tr, step, json_number_value(loss));
    if (json_is_number(val))
        plot_add(&j->va, step, json_number_value(val));
    if (json_is_number(lr))
        plot_add(&j->lr, step, json_number_value(lr));
}

/* A `gptd run` folder (run_dir.h): its metrics.jsonl, labelled by the
 * folder's name and its overrides.json. 0 or an exit status. */
static int plot_load_dir(struct plot_job *j, const char *dir)
{
    char path[4096], over[256] = "", name[128];
    snprintf(path, sizeof(path), "%s/overrides.json", dir);
    json_t *list = json_load_file(path, 0, NULL);
    const char *assign[64];
    size_t n = 0, i;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        if (n < 64 && json_is_string(v))
            assign[n++] = json_string_value(v);
    }
    gpt_sweep_label(assign, n, over, sizeof(over));
    json_decref(list);
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    const char *base = dir + len;
    while (base > dir && base[-1] != '/')
        base--;
    char label[400];
    snprintf(label, sizeof(label), "%.*s%s%s", (int)(dir + len - base), base, over[0] ? " " : "",
             over);
    plot_xml(name, sizeof(name), label);
    snprintf(j->label, sizeof(j->label), "%s", name);
    snprintf(path, sizeof(path), "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "re");
    if (!f) {
        fprintf(stderr, "%s: %s: %s (a gptd run folder has one)\n", ctl_prog, out_esc(path, 0),
                strerror(errno));
        return EXIT_FAIL;
    }
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        plot_record(j, o);
        json_decref(o);
    }
    free(line);
    fclose(f);
    return 0;
}

/* Reads one job's name and whole history into j. */
static int plot_fetch(struct ctl *c, struct plot_job *j)
{
    json_t *r = ctl_request(c, GPT_CTL_OP_STATUS), *reply;
    json_object_set_new(r, "job", json_integer(j->id));
    int rc = ctl_call(c, r, &reply);
    if (rc)
        return rc;
    /* A sweep's job is told apart by its overrides ("#5 lr=1e-3 n_embd=48"),
     * another by its name. */
    const json_t *job = json_object_get(reply, "job");
    char name[128], over[256];
    fmt_overrides(over, sizeof(over), json_object_get(job, "overrides"));
    plot_xml(name, sizeof(name), over[0] ? over : json_string_value(json_object_get(job, "name")));
    snprintf(j->label, sizeof(j->label), "#%lld %s", (long long)j->id, name);
    json_decref(reply);

    r = ctl_request(c, GPT_CTL_OP_LOGS);
    json_object_set_new(r, "job", json_integer(j->id));
    if ((rc = ctl_send(c, r)))
        return rc;
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
        plot_record(j, o);
        json_decref(o);
        if (end)
            return 0;
    }
}

static bool plot_svg_name(const char *path)
{
    size_t n = strlen(path);
    return n > 4 && strcmp(path + n - 4, ".svg") == 0;
}

int cmd_plot(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    (void)cmd;
    static const struct option opts[] = {
        {"output", required_argument, 0, 'o'}, {"lr", no_argument, 0, 'l'}, {0, 0, 0, 0}};
    const char *out = NULL;
    bool lr = false;
    int ch;
    while ((ch = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
        if (ch == 'o')
            out = optarg;
        else if (ch == 'l')
            lr = true;
        else
            return EXIT_USAGE;
    }
    int n = argc - optind;
    if (n < 1 || !out)
        return ctl_usage_error("usage: plot JOB|RUN_DIR... -o FILE.svg [--lr]");
    if (n > PLOT_JOBS_MAX)
        return ctl_usage_error("plot takes at most %d jobs", PLOT_JOBS_MAX);
    if (!plot_svg_name(out))
        return ctl_usage_error("-o %s: only SVG is written; name the file .svg (convert it with"
                               " rsvg-convert or a browser for PNG)",
                               out);
    struct plot_job *jobs = calloc((size_t)n, sizeof(*jobs));
    if (!jobs)
        return EXIT_FAIL;
    int rc = 0;
    bool any_job = false;
    struct stat st;
    for (int i = 0; i < n && rc == 0; i++) {
        const char *a = argv[optind + i];
        if (stat(a, &st) == 0 && S_ISDIR(st.st_mode))
            rc = plot_load_dir(&jobs[i], a); /* a gptd run folder */
        else if (!ctl_parse_job(a, &jobs[i].id))
            rc = EXIT_USAGE;
        else
            any_job = true;
    }
    if (rc == 0 && any_job)
        rc = ctl_connect(c);
    for (int i = 0; i < n && rc == 0; i++)
        if (jobs[i].id)
            rc = plot_fetch(c, &jobs[i]);
    if (rc == 0) {
        /* Built in memory, then written beside the target and renamed
         * (gpt_atomic_file): a failed plot leaves no half file, and a
         * symlink at the name is replaced, not followed. */
        char *svg = NULL;
        size_t svg_len = 0;
        struct gpt_atomic_file af = {.fd = -1};
        struct gpt_err err;
        FILE *f = open_memstream(&svg, &svg_len);
        if (!f) {
            fprintf(stderr, "%s: %s: %s\n", ctl_prog, out, strerror(errno));
            rc = EXIT_FAIL;
        } else {
            rc = plot_write(f, jobs, n, lr);
            if (fclose(f) != 0 && rc == 0) {
                fprintf(stderr, "%s: %s: %s\n", ctl_prog, out, strerror(errno));
                rc = EXIT_FAIL;
            }
        }
        if (rc == 0 && (gpt_atomic_file_open(&af, out, NULL, 0644, &err) < 0 ||
                        gpt_atomic_file_write(&af, svg, svg_len, &err) < 0 ||
                        gpt_atomic_file_commit(&af, &err) < 0)) {
            fprintf(stderr, "%s: %s\n", ctl_prog, err.msg);
            rc = EXIT_FAIL;
        }
        gpt_atomic_file_abort(&af);
        free(svg);
        for (int i = 0; rc == 0 && !c->json && i < n; i++) {
            char what[64];
            snprintf(what, sizeof(what), "job %lld", (long long)jobs[i].id);
            printf("%s: %s: %zu train, %zu validation, %zu learning-rate points\n", out,
                   jobs[i].id ? what : out_esc(argv[optind + i], 0), jobs[i].tr.n, jobs[i].va.n,
                   jobs[i].lr.n);
        }
    }
    for (int i = 0; i < n; i++) {
        free(jobs[i].tr.x), free(jobs[i].tr.y);
        free(jobs[i].va.x), free(jobs[i].va.y);
        free(jobs[i].lr.x), free(jobs[i].lr.y);
    }
    free(jobs);
    return rc;
}
