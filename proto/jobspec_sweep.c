/* jobspec_sweep: multirun overrides to the jobs they make (see jobspec_sweep.h). */
#include "jobspec_sweep.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The choices of one override "key=v1,v2,...": start and length of each,
 * split at commas outside brackets and quotes. Returns the count, or a
 * negative error. */
static int split_choices(const char *value, const char *key, const char **start, size_t *len,
                         size_t cap, struct gpt_err *err)
{
    size_t n = 0;
    int depth = 0;
    char quote = 0;
    const char *p = value, *begin = value;
    for (;; p++) {
        char ch = *p;
        if (quote) {
            if (ch == quote)
                quote = 0;
            else if (!ch)
                return gpt_err_set(err, -GPT_E_SPEC, key, "unclosed quote in \"%s\"", value);
            continue;
        }
        if (ch == '"' || ch == '\'') {
            quote = ch;
        } else if (ch == '[' || ch == '{') {
            depth++;
        } else if ((ch == ']' || ch == '}') && depth > 0) {
            depth--;
        } else if ((ch == ',' && depth == 0) || !ch) {
            if (!ch && depth)
                return gpt_err_set(err, -GPT_E_SPEC, key, "unclosed bracket in \"%s\"", value);
            if (p == begin)
                return gpt_err_set(err, -GPT_E_SPEC, key, "an empty choice in \"%s\"", value);
            if (n == cap)
                return gpt_err_set(err, -GPT_E_SPEC, key, "more than %zu choices", cap);
            start[n] = begin;
            len[n++] = (size_t)(p - begin);
            begin = p + 1;
            if (!ch)
                break;
        }
    }
    return (int)n;
}

int gpt_sweep_expand(const char *const *over, size_t n_over, struct gpt_sweep *ret,
                     struct gpt_err *err)
{
    memset(ret, 0, sizeof(*ret));
    size_t n_jobs = 1;
    size_t *counts = calloc(n_over ? n_over : 1, sizeof(*counts));
    const char **starts = calloc(n_over * GPT_SWEEP_JOBS_MAX + 1, sizeof(*starts));
    size_t *lens = calloc(n_over * GPT_SWEEP_JOBS_MAX + 1, sizeof(*lens));
    int rc = 0;
    if (!counts || !starts || !lens) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        goto out;
    }
    for (size_t k = 0; k < n_over; k++) {
        const char *eq = strchr(over[k], '=');
        char key[128];
        size_t klen = eq ? (size_t)(eq - over[k]) : strlen(over[k]);
        snprintf(key, sizeof(key), "%.*s", (int)(klen < 127 ? klen : 127), over[k]);
        if (!eq || klen == 0) {
            rc = gpt_err_set(err, -GPT_E_SPEC, key, "expected a.b=value, got \"%s\"", over[k]);
            goto out;
        }
        int c = split_choices(eq + 1, key, starts + k * GPT_SWEEP_JOBS_MAX,
                              lens + k * GPT_SWEEP_JOBS_MAX, GPT_SWEEP_JOBS_MAX, err);
        if (c < 0) {
            rc = c;
            goto out;
        }
        counts[k] = (size_t)c;
        if (n_jobs * (size_t)c > GPT_SWEEP_JOBS_MAX) {
            rc = gpt_err_set(err, -GPT_E_SPEC, key, "the sweep would make more than %d jobs",
                             GPT_SWEEP_JOBS_MAX);
            goto out;
        }
        n_jobs *= (size_t)c;
    }
    ret->assign = calloc(n_jobs * (n_over ? n_over : 1), sizeof(char *));
    if (!ret->assign) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        goto out;
    }
    ret->n_jobs = n_jobs;
    ret->n_keys = n_over;
    for (size_t j = 0; j < n_jobs; j++) {
        /* Mixed radix, the last override fastest. */
        size_t rest = j;
        for (size_t k = n_over; k-- > 0;) {
            size_t choice = rest % counts[k];
            rest /= counts[k];
            const char *eq = strchr(over[k], '=');
            size_t klen = (size_t)(eq - over[k]);
            size_t vlen = lens[k * GPT_SWEEP_JOBS_MAX + choice];
            char *a = malloc(klen + 1 + vlen + 1);
            if (!a) {
                gpt_sweep_free(ret);
                rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
                goto out;
            }
            memcpy(a, over[k], klen + 1);
            memcpy(a + klen + 1, starts[k * GPT_SWEEP_JOBS_MAX + choice], vlen);
            a[klen + 1 + vlen] = '\0';
            ret->assign[j * n_over + k] = a;
        }
    }
out:
    free(counts);
    free(starts);
    free(lens);
    return rc;
}

void gpt_sweep_free(struct gpt_sweep *s)
{
    if (s->assign)
        for (size_t i = 0; i < s->n_jobs * s->n_keys; i++)
            free(s->assign[i]);
    free(s->assign);
    memset(s, 0, sizeof(*s));
}

int gpt_sweep_id_ok(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n >= GPT_SWEEP_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

/* NAN sorts after every number. */
static int sweep_cmp_real(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) - isnan(b);
    return (a > b) - (a < b);
}

static int sweep_cmp_result(const void *pa, const void *pb)
{
    const struct gpt_sweep_result *a = pa, *b = pb;
    int c = sweep_cmp_real(a->best_val_loss, b->best_val_loss);
    if (c == 0)
        c = sweep_cmp_real(a->final_loss, b->final_loss);
    return c ? c : (a->id > b->id) - (a->id < b->id);
}

void gpt_sweep_results_sort(struct gpt_sweep_result *r, size_t n)
{
    if (n > 1)
        qsort(r, n, sizeof(*r), sweep_cmp_result);
}

void gpt_sweep_label(const char *const *assign, size_t n, char *buf, size_t cap)
{
    size_t len = 0;
    if (cap)
        buf[0] = '\0';
    for (size_t i = 0; i < n && len + 1 < cap; i++) {
        const char *eq = strchr(assign[i], '='), *leaf = assign[i];
        for (const char *p = assign[i]; eq && p < eq; p++)
            if (*p == '.')
                leaf = p + 1;
        int w = snprintf(buf + len, cap - len, "%s%s", len ? " " : "", leaf);
        if (w < 0)
            break;
        len += (size_t)w < cap - len ? (size_t)w : cap - len - 1;
    }
}
