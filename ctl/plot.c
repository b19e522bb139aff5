/*
 * plot: `gptctl plot JOB -o FILE.svg`, the train and validation loss of a
 * job against step as a self-contained SVG (see gptctl.h). Reads the job's
 * whole `logs` history; keeps at most CTL_PLOT_MAX points per series.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h> /* isfinite, INFINITY: macros, no libm */
#include <stdlib.h>
#include <string.h>

#include "gptctl.h"

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

int cmd_plot(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    (void)cmd;
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
