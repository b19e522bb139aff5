/*
 * jobspec_help: the reference of every job-spec key, written from the one
 * table, as plain text (`gptd --help-spec`, `gptctl help spec`) or as the
 * roff source of gptd-job(5).
 *
 * Pure, no globals, safe from any thread.
 */
#include "jobspec_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growing string; `failed` sticks after the first ENOMEM. */
struct help_buf {
    char *p;
    size_t len, cap;
    int failed;
};

__attribute__((format(printf, 2, 3))) static void help_printf(struct help_buf *b, const char *fmt,
                                                              ...)
{
    va_list ap;
    int n;

    if (b->failed)
        return;
    va_start(ap, fmt);
    n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if (!b->p || b->len + (size_t)n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        char *p;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        if (!(p = realloc(b->p, cap))) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
        va_start(ap, fmt);
        vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

/* Writes `s` escaped for roff: backslashes and hyphens, and a leading '.'
 * or '\'' that would otherwise start a request. */
static void help_roff(struct help_buf *b, const char *s)
{
    if (*s == '.' || *s == '\'')
        help_printf(b, "\\&");
    for (; *s; s++) {
        if (*s == '\\')
            help_printf(b, "\\e");
        else if (*s == '-')
            help_printf(b, "\\-");
        else
            help_printf(b, "%c", *s);
    }
}

/* Writes `s` wrapped at 78 columns, each line indented by `indent`. */
static void help_wrap(struct help_buf *b, const char *s, int indent)
{
    int col = 0;
    while (*s) {
        size_t w = strcspn(s, " ");
        if (col > 0 && col + 1 + (int)w > 78) {
            help_printf(b, "\n");
            col = 0;
        }
        if (col == 0) {
            help_printf(b, "%*s%.*s", indent, "", (int)w, s);
            col = indent + (int)w;
        } else {
            help_printf(b, " %.*s", (int)w, s);
            col += 1 + (int)w;
        }
        s += w;
        s += strspn(s, " ");
    }
    help_printf(b, "\n");
}

/* The default of `e` as compact JSON ("0.0003", "\"cosine\"", "[0.9,0.95]"). */
static char *help_default(const struct jobspec_entry *e, const struct gpt_job *defaults)
{
    json_t *v = jobspec_entry_to_json(e, defaults);
    char *s = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(v);
    return s;
}

static const char help_intro[] =
    "A job is one JSON object (or a YAML mapping) with the sections model, data, trainer, "
    "optimizer, distributed and snapshot, and a top-level name. Every key is optional and has a "
    "default, except data.path (text and shards) and data.task (synthetic). Unknown keys are "
    "errors, and every error names the JSON path of the key at fault. Overrides KEY=VALUE "
    "(e.g. trainer.max_steps=200 optimizer.lr=3e-4) replace values of the file before the "
    "job is validated; VALUE is read as the key's type.";

static const char help_example[] = "{\n"
                                   "  \"name\": \"fortunes\",\n"
                                   "  \"model\": {\"n_layer\": 4, \"n_head\": 4, \"n_embd\": 128, "
                                   "\"block_size\": 64},\n"
                                   "  \"data\": {\"path\": \"/usr/share/games/fortunes/cookie\"},\n"
                                   "  \"trainer\": {\"max_steps\": 600, \"micro_batch\": 16, "
                                   "\"global_batch\": 32},\n"
                                   "  \"optimizer\": {\"lr\": 1e-3},\n"
                                   "  \"distributed\": {\"nodes\": \"1:2\"}\n"
                                   "}\n";

static void help_text(struct help_buf *b, const struct gpt_job *defaults)
{
    help_printf(b, "Job spec keys\n\n");
    help_wrap(b, help_intro, 0);
    for (size_t k = 0; k < jobspec_n_entries; k++) {
        const struct jobspec_entry *e = &jobspec_entries[k];
        char type[64], range[96], *def = help_default(e, defaults);
        jobspec_entry_type_text(e, type, sizeof(type));
        jobspec_entry_range_text(e, range, sizeof(range));
        help_printf(b, "\n%s\n    %s%s%s, default %s\n", e->path, type, range[0] ? ", " : "", range,
                    def ? def : "?");
        help_wrap(b, e->help, 4);
        free(def);
    }
    help_printf(b, "\nExample:\n\n%s", help_example);
}

static void help_man(struct help_buf *b, const struct gpt_job *defaults)
{
    char section[32] = "";

    help_printf(b, ".TH GPTD\\-JOB 5 \"\" \"gptd\" \"File Formats\"\n"
                   ".SH NAME\n"
                   "gptd\\-job \\- the job description of gptd (job.json)\n"
                   ".SH SYNOPSIS\n"
                   ".B gptctl submit\n"
                   ".I job.json\n"
                   "[\\fIKEY\\fB=\\fIVALUE\\fR ...]\n"
                   ".SH DESCRIPTION\n");
    help_roff(b, help_intro);
    help_printf(b, "\n.SH KEYS\n");
    for (size_t k = 0; k < jobspec_n_entries; k++) {
        const struct jobspec_entry *e = &jobspec_entries[k];
        const char *dot = strchr(e->path, '.');
        char type[64], range[96], *def = help_default(e, defaults);
        int len = dot ? (int)(dot - e->path) : 0;

        if (dot && (strncmp(section, e->path, (size_t)len) != 0 || section[len] != '\0')) {
            snprintf(section, sizeof(section), "%.*s", len, e->path);
            help_printf(b, ".SS %s\n", section);
        }
        jobspec_entry_type_text(e, type, sizeof(type));
        jobspec_entry_range_text(e, range, sizeof(range));
        help_printf(b, ".TP\n.B ");
        help_roff(b, e->path);
        help_printf(b, "\n");
        help_roff(b, type);
        if (range[0]) {
            help_printf(b, ", ");
            help_roff(b, range);
        }
        help_printf(b, ", default ");
        help_roff(b, def ? def : "?");
        help_printf(b, ".\n");
        help_roff(b, e->help);
        help_printf(b, "\n");
        free(def);
    }
    help_printf(b, ".SH EXAMPLE\n.nf\n");
    for (const char *line = help_example; *line;) {
        size_t n = strcspn(line, "\n");
        char buf[256];
        snprintf(buf, sizeof(buf), "%.*s", (int)n, line);
        help_roff(b, buf);
        help_printf(b, "\n");
        line += n + (line[n] == '\n');
    }
    help_printf(b, ".fi\n.SH SEE ALSO\n.BR gptctl (1),\n.BR gptd (8)\n");
}

char *gpt_jobspec_help(int man)
{
    struct help_buf b = {0};
    struct gpt_job defaults;

    gpt_jobspec_defaults(&defaults);
    if (man)
        help_man(&b, &defaults);
    else
        help_text(&b, &defaults);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
