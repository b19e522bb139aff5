/*
 * output: how gptctl prints for people (see gptctl.h): aligned tables,
 * numbers, times and rates, the logs view. Every string that came from gptd
 * (and so, in the end, from some user: job names, paths, messages) goes
 * through out_esc or a table cell, so it cannot send terminal escapes, CR
 * or newlines that would forge or hide output. --json output does not pass
 * here: it is the exact JSON gptd sent.
 */
#include <math.h> /* isfinite: a macro, no libm */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gptctl.h"
#include "jobspec_sweep.h"
#include "metric_csv.h"
#include "metric_text.h"
#include "str_escape.h"

const char *out_esc(const char *s, unsigned flags)
{
    /* A ring of buffers, so one printf may escape several arguments. */
    static char *slot[OUT_ESC_SLOTS];
    static size_t cap[OUT_ESC_SLOTS];
    static unsigned next;
    if (!s)
        return "-";
    size_t len = strlen(s), need = GPT_STR_ESCAPE_SIZE(len);
    unsigned i = next++ % OUT_ESC_SLOTS;
    if (cap[i] < need) {
        char *b = realloc(slot[i], need);
        if (!b)
            return "(out of memory)";
        slot[i] = b;
        cap[i] = need;
    }
    gpt_str_escape(slot[i], cap[i], s, len, flags);
    return slot[i];
}

/* --- formatting helpers -------------------------------------------------- */

void table_row(struct table *t, ...)
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
        char *d = gpt_str_escape_dup(s ? s : "-", 0);
        t->cells[t->nrows][i] = d ? d : (char *)"";
    }
    va_end(ap);
    t->nrows++;
}

void table_print(struct table *t)
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

const char *fmt_int(char *buf, size_t cap, const json_t *v)
{
    if (!json_is_integer(v))
        return "-";
    snprintf(buf, cap, "%lld", (long long)json_integer_value(v));
    return buf;
}

const char *fmt_real(char *buf, size_t cap, const json_t *v, int prec)
{
    if (!json_is_number(v))
        return "-";
    if (prec < 0)
        snprintf(buf, cap, "%.3g", json_number_value(v));
    else
        snprintf(buf, cap, "%.*f", prec, json_number_value(v));
    return buf;
}

const char *fmt_time(char *buf, size_t cap, const json_t *v)
{
    if (!json_is_number(v))
        return "-";
    time_t t = (time_t)json_number_value(v);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%d %H:%M:%S", &tm);
    return buf;
}

const char *fmt_duration(char *buf, size_t cap, double s)
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

const char *fmt_overrides(char *buf, size_t cap, const json_t *over)
{
    const char *assign[64], *key;
    char text[64][128];
    const json_t *v;
    size_t n = 0;
    json_object_foreach((json_t *)over, key, v)
    {
        if (n == 64)
            break;
        snprintf(text[n], sizeof(text[n]), "%s=%s", key,
                 json_is_string(v) ? json_string_value(v) : "?");
        assign[n] = text[n];
        n++;
    }
    gpt_sweep_label(assign, n, buf, cap);
    return buf;
}

const char *fmt_bytes(char *buf, size_t cap, const json_t *v)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    if (!json_is_integer(v))
        return "-";
    double x = (double)json_integer_value(v);
    size_t u = 0;
    while (x >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
        x /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%.0f B", x);
    else
        snprintf(buf, cap, "%.1f %s", x, units[u]);
    return buf;
}

const char *fmt_rate(char *buf, size_t cap, double v)
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

/* Appends s (and a separating space) to buf[*len..cap); cut at cap. */
static void fmt_join(char *buf, size_t cap, size_t *len, const char *s)
{
    int k = snprintf(buf + *len, cap - *len, "%s%s", *len ? " " : "", s);
    if (k > 0)
        *len = *len + (size_t)k < cap ? *len + (size_t)k : cap - 1;
}

const char *fmt_gpus_util(char *buf, size_t cap, const json_t *gpus)
{
    size_t len = 0, i;
    const json_t *g;
    buf[0] = '\0';
    json_array_foreach(gpus, i, g)
    {
        char c[16];
        const json_t *u = json_object_get(g, "util_ratio");
        if (json_is_number(u))
            snprintf(c, sizeof(c), "%.0f%%", json_number_value(u) * 100.0);
        else
            snprintf(c, sizeof(c), "-");
        fmt_join(buf, cap, &len, c);
    }
    return len ? buf : "-";
}

const char *fmt_gpus_mem(char *buf, size_t cap, const json_t *gpus)
{
    size_t len = 0, i;
    const json_t *g;
    buf[0] = '\0';
    json_array_foreach(gpus, i, g)
    {
        char c[48];
        const json_t *used = json_object_get(g, "mem_used_bytes");
        const json_t *total = json_object_get(g, "mem_total_bytes");
        if (json_is_integer(used) && json_is_integer(total))
            snprintf(c, sizeof(c), "%.1f/%.1fG", (double)json_integer_value(used) / (1 << 30),
                     (double)json_integer_value(total) / (1 << 30));
        else
            snprintf(c, sizeof(c), "-");
        fmt_join(buf, cap, &len, c);
    }
    return len ? buf : "-";
}

const char *fmt_rank_ms(char *buf, size_t cap, const json_t *ms)
{
    size_t len = 0, i, slow = 0, n = 0;
    double lo = 0, hi = -1;
    const json_t *v;
    if (!json_is_array(ms) || !json_array_size(ms))
        return NULL;
    buf[0] = '\0';
    json_array_foreach(ms, i, v)
    {
        char c[40];
        double x = json_number_value(v);
        snprintf(c, sizeof(c), "%s%zu: %.3g", i ? " " : "", i, x);
        fmt_join(buf, cap, &len, c);
        if (x > hi) {
            hi = x;
            slow = i;
        }
        lo = n++ == 0 || x < lo ? x : lo;
    }
    if (n > 1 && lo > 0) {
        char c[80];
        snprintf(c, sizeof(c), " (slowest: rank %zu, %.1fx the fastest)", slow, hi / lo);
        fmt_join(buf, cap, &len, c);
    }
    return buf;
}

void logs_clear_bar(struct logs_view *v)
{
    if (v->bar_shown) {
        fputs("\r\033[K", stdout);
        v->bar_shown = false;
    }
}

void logs_print_metric(struct logs_view *v, const json_t *o)
{
    char a[32], b[32], e[32];
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
    /* One line, the same as `gptd run` prints (proto/metric_text.c). */
    struct gpt_metric m;
    struct gpt_err err;
    char line[GPT_METRIC_LINE_MAX];
    if (gpt_metric_from_json(o, &m, &err) == 0)
        printf("%s\n", gpt_metric_line(&m, line, sizeof(line)));
    else
        printf("step %lld/%lld  loss %.4f\n", (long long)step, (long long)max, loss);
}

void logs_print_csv(const json_t *o)
{
    struct gpt_metric m;
    struct gpt_err err;
    char row[GPT_METRIC_CSV_LINE_MAX];
    /* A record gptd sent that does not decode is left out rather than
     * written as a row of made-up values. */
    if (gpt_metric_from_json(o, &m, &err) == 0 && gpt_metric_csv_row(&m, row, sizeof(row)) > 0)
        fputs(row, stdout);
}

void logs_print_event(struct logs_view *v, const json_t *o)
{
    char t[32];
    logs_clear_bar(v);
    const json_t *tm = json_object_get(o, "time");
    time_t sec = (time_t)json_number_value(tm);
    struct tm lt;
    localtime_r(&sec, &lt);
    strftime(t, sizeof(t), "%H:%M:%S", &lt);
    printf("%s [%s] %s\n", t, out_esc(json_string_value(json_object_get(o, "kind")), 0),
           out_esc(json_string_value(json_object_get(o, "message")), 0));
}
