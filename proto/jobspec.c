/*
 * jobspec: what the table of keys (jobspec_table.c) drives, except the
 * help text (jobspec_help.c) and files/YAML (jobspec_file.c): defaults,
 * JSON -> struct with type and range checks, Hydra-style overrides,
 * cross-field validation and struct -> canonical JSON.
 *
 * Owns nothing beyond the calls; pure, no globals but const tables, safe
 * from any thread.
 */
#include "jobspec_int.h"
#include "suggest.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- lookup ---- */

const struct jobspec_entry *jobspec_entry_find(const char *section, size_t section_len,
                                               const char *key)
{
    for (size_t i = 0; i < jobspec_n_entries; i++) {
        const char *p = jobspec_entries[i].path;
        const char *dot = strchr(p, '.');
        if (section_len == 0) {
            if (!dot && strcmp(p, key) == 0)
                return &jobspec_entries[i];
        } else if (dot && (size_t)(dot - p) == section_len &&
                   memcmp(p, section, section_len) == 0 && strcmp(dot + 1, key) == 0) {
            return &jobspec_entries[i];
        }
    }
    return NULL;
}

const struct jobspec_entry *jobspec_entry_find_path(const char *path)
{
    for (size_t i = 0; i < jobspec_n_entries; i++)
        if (strcmp(jobspec_entries[i].path, path) == 0)
            return &jobspec_entries[i];
    return NULL;
}

int jobspec_is_section(const char *name, size_t len)
{
    for (size_t i = 0; i < jobspec_n_entries; i++) {
        const char *p = jobspec_entries[i].path;
        if (len > 0 && strncmp(p, name, len) == 0 && p[len] == '.')
            return 1;
    }
    return 0;
}

/* The known path (or section) closest to `path`, or NULL when nothing is close:
 * a typo within a few edits, else a key of the same name in another section. */
static const char *suggest(const char *path, char *buf, size_t n)
{
    const char *leaf = strrchr(path, '.');
    size_t best = SIZE_MAX, limit;
    const char *found = NULL;

    leaf = leaf ? leaf + 1 : path;
    limit = strlen(leaf) / 3;
    limit = limit < 1 ? 1 : limit > 3 ? 3 : limit;
    for (size_t i = 0; i < jobspec_n_entries; i++) {
        const char *p = jobspec_entries[i].path, *dot = strchr(p, '.');
        size_t d = gpt_edit_distance(path, p);
        if (d < best) {
            best = d;
            snprintf(buf, n, "%s", p);
        }
        if (dot) { /* the section itself, for a typo at the top level */
            char sec[32];
            snprintf(sec, sizeof(sec), "%.*s", (int)(dot - p), p);
            d = gpt_edit_distance(path, sec);
            if (d < best) {
                best = d;
                snprintf(buf, n, "%s", sec);
            }
        }
    }
    if (best <= limit)
        return buf;
    for (size_t i = 0; i < jobspec_n_entries && !found; i++) {
        const char *p = jobspec_entries[i].path, *dot = strchr(p, '.');
        if (strcmp(dot ? dot + 1 : p, leaf) == 0)
            found = p;
    }
    if (found)
        snprintf(buf, n, "%s", found);
    return found ? buf : NULL;
}

static int unknown_key(const char *path, struct gpt_err *err)
{
    char hint[GPT_ERR_PATH_MAX];
    if (suggest(path, hint, sizeof(hint)))
        return gpt_err_set(err, -GPT_E_SPEC, path, "unknown key (did you mean %s?)", hint);
    return gpt_err_set(err, -GPT_E_SPEC, path, "unknown key");
}

/* ---- one value: checks, JSON -> struct, struct -> JSON ---- */

static void *field(struct gpt_job *job, size_t off)
{
    return (char *)job + off;
}

static const void *cfield(const struct gpt_job *job, size_t off)
{
    return (const char *)job + off;
}

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
        return "integer";
    case JSON_REAL:
        return "real";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    case JSON_NULL:
        break;
    }
    return "null";
}

void jobspec_entry_type_text(const struct jobspec_entry *e, char *buf, size_t n)
{
    static const char *const type_names[] = {
        [JOBSPEC_INT] = "int",
        [JOBSPEC_INT64] = "int64",
        [JOBSPEC_UINT64] = "uint64",
        [JOBSPEC_DOUBLE] = "number",
        [JOBSPEC_STRING] = "string",
        [JOBSPEC_ENUM] = "enum",
        [JOBSPEC_BOOL] = "bool",
        [JOBSPEC_BETAS] = "[number, number]",
        [JOBSPEC_NODES] = "\"MIN:MAX\" or int",
        [JOBSPEC_INTAUTO] = "int or \"auto\"",
    };
    snprintf(buf, n, "%s", type_names[e->type]);
}

void jobspec_entry_range_text(const struct jobspec_entry *e, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    if (e->names) {
        for (int i = 0; e->names[i] && len < n; i++)
            len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? "|" : "", e->names[i]);
    } else if (e->type == JOBSPEC_STRING) {
        snprintf(buf, n, "at most %zu bytes", e->size - 1);
    } else if (e->min < e->max) {
        if (e->type == JOBSPEC_DOUBLE || e->type == JOBSPEC_BETAS)
            snprintf(buf, n, "%c%g, %g%c", (e->flags & JOBSPEC_OPEN_MIN) ? '(' : '[', e->min,
                     e->max, (e->flags & JOBSPEC_OPEN_MAX) ? ')' : ']');
        else
            snprintf(buf, n, "%.0f..%.0f", e->min, e->max);
    }
}

static int in_range(const struct jobspec_entry *e, double v)
{
    if (!(e->min < e->max))
        return 1;
    if ((e->flags & JOBSPEC_OPEN_MIN) ? !(v > e->min) : !(v >= e->min))
        return 0;
    if ((e->flags & JOBSPEC_OPEN_MAX) ? !(v < e->max) : !(v <= e->max))
        return 0;
    return 1;
}

static int range_error(const struct jobspec_entry *e, const char *got, struct gpt_err *err)
{
    char range[96];
    jobspec_entry_range_text(e, range, sizeof(range));
    return gpt_err_set(err, -GPT_E_SPEC, e->path, "must be in %s, got %s", range, got);
}

static int check_int(const struct jobspec_entry *e, long long v, struct gpt_err *err)
{
    char got[32];
    if (in_range(e, (double)v))
        return 0;
    snprintf(got, sizeof(got), "%lld", v);
    return range_error(e, got, err);
}

static int check_double(const struct jobspec_entry *e, double v, struct gpt_err *err)
{
    char got[32];
    if (isfinite(v) && in_range(e, v))
        return 0;
    snprintf(got, sizeof(got), "%g", v);
    return range_error(e, got, err);
}

static int expect(const struct jobspec_entry *e, const char *what, const json_t *v,
                  struct gpt_err *err)
{
    /* The bad value itself, shortened (objects and arrays by their kind only). */
    char shown[64] = "";
    if (json_is_string(v))
        snprintf(shown, sizeof(shown), " \"%.40s%s\"", json_string_value(v),
                 strlen(json_string_value(v)) > 40 ? "..." : "");
    else if (json_is_integer(v) || json_is_real(v) || json_is_boolean(v)) {
        char *d = json_dumps(v, JSON_ENCODE_ANY);
        if (d)
            snprintf(shown, sizeof(shown), " %.40s", d);
        free(d);
    }
    return gpt_err_set(err, -GPT_E_SPEC, e->path, "expected %s, got %s%s", what, json_kind(v),
                       shown);
}

static int name_index(const char *const *names, const char *s)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

static int expect_name(const struct jobspec_entry *e, const char *s, struct gpt_err *err)
{
    char range[96];
    jobspec_entry_range_text(e, range, sizeof(range));
    return gpt_err_set(err, -GPT_E_SPEC, e->path, "expected one of %s, got \"%.40s\"", range, s);
}

/* "N" or "MIN:MAX", decimal digits only. Returns 0 or -1. */
static int parse_nodes(const char *s, long long *ret_lo, long long *ret_hi)
{
    long long v[2] = {0, 0};
    int k = 0, digits = 0;
    for (; *s; s++) {
        if (*s >= '0' && *s <= '9') {
            if (++digits > 9)
                return -1;
            v[k] = v[k] * 10 + (*s - '0');
        } else if (*s == ':' && k == 0 && digits > 0) {
            k = 1;
            digits = 0;
        } else {
            return -1;
        }
    }
    if (digits == 0)
        return -1;
    *ret_lo = v[0];
    *ret_hi = k ? v[1] : v[0];
    return 0;
}

/* JOBSPEC_UINT64: a non-negative integer, or a decimal string for values
 * past JSON's safe integers. */
static int apply_uint64(const struct jobspec_entry *e, const json_t *v, struct gpt_job *job,
                        struct gpt_err *err)
{
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *(uint64_t *)field(job, e->off) = (uint64_t)json_integer_value(v);
        return 0;
    }
    if (json_is_string(v)) {
        unsigned long long u;
        char *end;
        const char *s = json_string_value(v);
        errno = 0;
        u = strtoull(s, &end, 10);
        if (s[0] >= '0' && s[0] <= '9' && *end == '\0' && errno == 0) {
            *(uint64_t *)field(job, e->off) = u;
            return 0;
        }
    }
    return expect(e, "a non-negative integer (or a decimal string)", v, err);
}

/* JOBSPEC_STRING: at most e->size - 1 bytes, no NUL, one of e->names when
 * the entry has names (empty allowed). */
static int apply_string(const struct jobspec_entry *e, const json_t *v, struct gpt_job *job,
                        struct gpt_err *err)
{
    const char *s;
    if (!json_is_string(v))
        return expect(e, "a string", v, err);
    s = json_string_value(v);
    if (strlen(s) != json_string_length(v))
        return gpt_err_set(err, -GPT_E_SPEC, e->path, "must not contain NUL characters");
    if (json_string_length(v) >= e->size)
        return gpt_err_set(err, -GPT_E_SPEC, e->path, "expected at most %zu bytes, got %zu",
                           e->size - 1, json_string_length(v));
    if (e->names && s[0] && name_index(e->names, s) < 0)
        return expect_name(e, s, err);
    memcpy(field(job, e->off), s, json_string_length(v) + 1);
    return 0;
}

/* JOBSPEC_BETAS: [beta1, beta2], each in e's range. */
static int apply_betas(const struct jobspec_entry *e, const json_t *v, struct gpt_job *job,
                       struct gpt_err *err)
{
    double d, d2;
    int rc;
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_number(json_array_get(v, 0)) ||
        !json_is_number(json_array_get(v, 1)))
        return gpt_err_set(err, -GPT_E_SPEC, e->path,
                           "expected [beta1, beta2], an array of two numbers");
    d = json_number_value(json_array_get(v, 0));
    d2 = json_number_value(json_array_get(v, 1));
    if ((rc = check_double(e, d, err)) < 0 || (rc = check_double(e, d2, err)) < 0)
        return rc;
    *(double *)field(job, e->off) = d;
    *(double *)field(job, e->off2) = d2;
    return 0;
}

/* JOBSPEC_NODES: "MIN:MAX" or one integer for both. */
static int apply_nodes(const struct jobspec_entry *e, const json_t *v, struct gpt_job *job,
                       struct gpt_err *err)
{
    long long i, i2;
    int rc;
    if (json_is_integer(v)) {
        i = i2 = json_integer_value(v);
    } else if (!json_is_string(v) || parse_nodes(json_string_value(v), &i, &i2) < 0) {
        return gpt_err_set(err, -GPT_E_SPEC, e->path,
                           "expected \"MIN:MAX\" (e.g. \"2:4\") or an integer, got %s%s%.40s%s",
                           json_kind(v), json_is_string(v) ? " \"" : "",
                           json_is_string(v) ? json_string_value(v) : "",
                           json_is_string(v) ? "\"" : "");
    }
    if ((rc = check_int(e, i, err)) < 0 || (rc = check_int(e, i2, err)) < 0)
        return rc;
    *(int *)field(job, e->off) = (int)i;
    *(int *)field(job, e->off2) = (int)i2;
    return 0;
}

/* Checks `v` against e's type and range and stores it into `job`. */
static int entry_apply(const struct jobspec_entry *e, const json_t *v, struct gpt_job *job,
                       struct gpt_err *err)
{
    long long i;
    double d;
    int rc, idx;

    switch (e->type) {
    case JOBSPEC_INT:
    case JOBSPEC_INT64:
        if (!json_is_integer(v))
            return expect(e, "an integer", v, err);
        i = json_integer_value(v);
        if ((rc = check_int(e, i, err)) < 0)
            return rc;
        if (e->type == JOBSPEC_INT)
            *(int *)field(job, e->off) = (int)i;
        else
            *(int64_t *)field(job, e->off) = i;
        return 0;
    case JOBSPEC_UINT64:
        return apply_uint64(e, v, job, err);
    case JOBSPEC_DOUBLE:
        if (!json_is_number(v))
            return expect(e, "a number", v, err);
        d = json_number_value(v);
        if ((rc = check_double(e, d, err)) < 0)
            return rc;
        *(double *)field(job, e->off) = d;
        return 0;
    case JOBSPEC_STRING:
        return apply_string(e, v, job, err);
    case JOBSPEC_ENUM:
        if (!json_is_string(v))
            return expect(e, "a string", v, err);
        if ((idx = name_index(e->names, json_string_value(v))) < 0)
            return expect_name(e, json_string_value(v), err);
        *(int *)field(job, e->off) = idx;
        return 0;
    case JOBSPEC_BOOL:
        if (!json_is_boolean(v))
            return expect(e, "true or false", v, err);
        *(int *)field(job, e->off) = json_is_true(v);
        return 0;
    case JOBSPEC_BETAS:
        return apply_betas(e, v, job, err);
    case JOBSPEC_NODES:
        return apply_nodes(e, v, job, err);
    case JOBSPEC_INTAUTO:
        if (json_is_string(v) && strcmp(json_string_value(v), "auto") == 0) {
            *(int *)field(job, e->off) = 0;
            return 0;
        }
        if (!json_is_integer(v))
            return expect(e, "an integer or \"auto\"", v, err);
        i = json_integer_value(v);
        if ((rc = check_int(e, i, err)) < 0)
            return rc;
        *(int *)field(job, e->off) = (int)i;
        return 0;
    }
    GPT_ASSERT(!"unknown entry type");
    return -EINVAL; /* not reached: the assertion aborts (unoptimised builds cannot see it) */
}

/* Re-checks the value already in `job` (a struct may be built by code). */
static int entry_check(const struct jobspec_entry *e, const struct gpt_job *job,
                       struct gpt_err *err)
{
    const char *s;
    int rc;

    switch (e->type) {
    case JOBSPEC_INT:
    case JOBSPEC_INTAUTO:
        return check_int(e, *(const int *)cfield(job, e->off), err);
    case JOBSPEC_INT64:
        return check_int(e, (long long)*(const int64_t *)cfield(job, e->off), err);
    case JOBSPEC_UINT64:
        return 0;
    case JOBSPEC_DOUBLE:
        return check_double(e, *(const double *)cfield(job, e->off), err);
    case JOBSPEC_STRING:
        s = cfield(job, e->off);
        if (!memchr(s, '\0', e->size))
            return gpt_err_set(err, -GPT_E_SPEC, e->path, "is not NUL-terminated");
        if (e->names && s[0] && name_index(e->names, s) < 0)
            return expect_name(e, s, err);
        return 0;
    case JOBSPEC_ENUM:
    case JOBSPEC_BOOL: {
        int v = *(const int *)cfield(job, e->off), n = 0;
        while (e->type == JOBSPEC_ENUM && e->names[n])
            n++;
        if (v < 0 || v >= (e->type == JOBSPEC_ENUM ? n : 2))
            return gpt_err_set(err, -GPT_E_SPEC, e->path, "invalid value %d", v);
        return 0;
    }
    case JOBSPEC_BETAS:
        if ((rc = check_double(e, *(const double *)cfield(job, e->off), err)) < 0)
            return rc;
        return check_double(e, *(const double *)cfield(job, e->off2), err);
    case JOBSPEC_NODES:
        if ((rc = check_int(e, *(const int *)cfield(job, e->off), err)) < 0)
            return rc;
        return check_int(e, *(const int *)cfield(job, e->off2), err);
    }
    GPT_ASSERT(!"unknown entry type");
}

json_t *jobspec_entry_to_json(const struct jobspec_entry *e, const struct gpt_job *job)
{
    const char *s;
    char buf[48];
    int i;
    uint64_t u;

    switch (e->type) {
    case JOBSPEC_INT:
        return json_integer(*(const int *)cfield(job, e->off));
    case JOBSPEC_INT64:
        return json_integer(*(const int64_t *)cfield(job, e->off));
    case JOBSPEC_UINT64:
        u = *(const uint64_t *)cfield(job, e->off);
        if (u <= (uint64_t)LLONG_MAX)
            return json_integer((json_int_t)u);
        snprintf(buf, sizeof(buf), "%llu", (unsigned long long)u);
        return json_string(buf);
    case JOBSPEC_DOUBLE:
        return json_real(*(const double *)cfield(job, e->off));
    case JOBSPEC_STRING:
        s = cfield(job, e->off);
        return json_stringn(s, strnlen(s, e->size));
    case JOBSPEC_ENUM:
        i = *(const int *)cfield(job, e->off);
        s = jobspec_name_of(e->names, i);
        return json_string(s);
    case JOBSPEC_BOOL:
        return json_boolean(*(const int *)cfield(job, e->off));
    case JOBSPEC_BETAS:
        return json_pack("[ff]", *(const double *)cfield(job, e->off),
                         *(const double *)cfield(job, e->off2));
    case JOBSPEC_NODES:
        snprintf(buf, sizeof(buf), "%d:%d", *(const int *)cfield(job, e->off),
                 *(const int *)cfield(job, e->off2));
        return json_string(buf);
    case JOBSPEC_INTAUTO:
        i = *(const int *)cfield(job, e->off);
        return i == 0 ? json_string("auto") : json_integer(i);
    }
    GPT_ASSERT(!"unknown entry type");
    return NULL; /* not reached */
}

/* 1 when `s` is well-formed UTF-8 (no overlongs, surrogates or code points
 * above U+10FFFF), as jansson requires of every string. */
static int utf8_ok(const unsigned char *s)
{
    while (*s) {
        unsigned c = *s++, n, cp, min;
        if (c < 0x80)
            continue;
        if (c >= 0xc2 && c <= 0xdf)
            n = 1, cp = c & 0x1f, min = 0x80;
        else if (c >= 0xe0 && c <= 0xef)
            n = 2, cp = c & 0x0f, min = 0x800;
        else if (c >= 0xf0 && c <= 0xf4)
            n = 3, cp = c & 0x07, min = 0x10000;
        else
            return 0;
        for (; n > 0; n--, s++) {
            if ((*s & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (*s & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
    }
    return 1;
}

json_t *jobspec_text_to_json(const struct jobspec_entry *e, const char *text)
{
    json_error_t jerr;
    json_t *v;

    if (!utf8_ok((const unsigned char *)text))
        return json_pack("{}"); /* refused by every type check: "got object" */
    if (e && (e->type == JOBSPEC_STRING || e->type == JOBSPEC_ENUM))
        return json_string(text);
    v = json_loads(text, JSON_DECODE_ANY, &jerr);
    if (v)
        return v;
    if (e && e->type == JOBSPEC_BETAS && strlen(text) < 120) {
        char buf[128]; /* "0.9,0.95" as a convenience for [0.9,0.95] */
        snprintf(buf, sizeof(buf), "[%s]", text);
        if ((v = json_loads(buf, 0, &jerr)))
            return v;
    }
    return json_string(text);
}

/* ---- whole job ---- */

void gpt_jobspec_defaults(struct gpt_job *job)
{
    memset(job, 0, sizeof(*job));
    for (size_t k = 0; k < jobspec_n_entries; k++) {
        const struct jobspec_entry *e = &jobspec_entries[k];
        switch (e->type) {
        case JOBSPEC_INT:
        case JOBSPEC_ENUM:
        case JOBSPEC_BOOL:
        case JOBSPEC_INTAUTO:
            *(int *)field(job, e->off) = (int)e->def_i;
            break;
        case JOBSPEC_NODES:
            *(int *)field(job, e->off) = (int)e->def_i;
            *(int *)field(job, e->off2) = (int)e->def_i2;
            break;
        case JOBSPEC_INT64:
            *(int64_t *)field(job, e->off) = e->def_i;
            break;
        case JOBSPEC_UINT64:
            *(uint64_t *)field(job, e->off) = (uint64_t)e->def_i;
            break;
        case JOBSPEC_DOUBLE:
            *(double *)field(job, e->off) = e->def_d;
            break;
        case JOBSPEC_BETAS:
            *(double *)field(job, e->off) = e->def_d;
            *(double *)field(job, e->off2) = e->def_d2;
            break;
        case JOBSPEC_STRING:
            snprintf(field(job, e->off), e->size, "%s", e->def_s);
            break;
        }
    }
}

/* Converts one object of the tree: the top level (section NULL) or a section. */
static int apply_object(const char *section, const json_t *obj, struct gpt_job *job,
                        struct gpt_err *err)
{
    size_t slen = section ? strlen(section) : 0;
    const char *key;
    json_t *v;
    int rc;

    json_object_foreach((json_t *)obj, key, v)
    {
        const struct jobspec_entry *e = jobspec_entry_find(section, slen, key);
        char path[GPT_ERR_PATH_MAX];
        if (e) {
            if ((rc = entry_apply(e, v, job, err)) < 0)
                return rc;
            continue;
        }
        snprintf(path, sizeof(path), "%s%s%s", section ? section : "", section ? "." : "", key);
        if (!section && jobspec_is_section(key, strlen(key))) {
            if (!json_is_object(v))
                return gpt_err_set(err, -GPT_E_SPEC, path, "expected an object, got %s",
                                   json_kind(v));
            if ((rc = apply_object(key, v, job, err)) < 0)
                return rc;
            continue;
        }
        return unknown_key(path, err);
    }
    return 0;
}

/* Splits "a.b=value" and finds the entry. */
static int override_split(const char *assignment, const struct jobspec_entry **ret_e,
                          const char **ret_value, struct gpt_err *err)
{
    const char *eq = strchr(assignment, '=');
    const struct jobspec_entry *e;
    char key[GPT_ERR_PATH_MAX];
    size_t klen;

    if (!eq)
        return gpt_err_set(err, -GPT_E_SPEC, assignment,
                           "an override must be KEY=VALUE, e.g. trainer.max_steps=200");
    klen = (size_t)(eq - assignment);
    if (klen == 0)
        return gpt_err_set(err, -GPT_E_SPEC, "", "override \"%.64s\" has no key before '='",
                           assignment);
    snprintf(key, sizeof(key), "%.*s", (int)klen, assignment);
    e = klen < sizeof(key) ? jobspec_entry_find_path(key) : NULL;
    if (!e) {
        if (jobspec_is_section(key, klen))
            return gpt_err_set(err, -GPT_E_SPEC, key,
                               "is a section; override one of its keys, e.g. %s.KEY=VALUE", key);
        return unknown_key(key, err);
    }
    *ret_e = e;
    *ret_value = eq + 1;
    return 0;
}

int gpt_jobspec_override(struct gpt_job *job, const char *assignment, struct gpt_err *err)
{
    const struct jobspec_entry *e;
    const char *value;
    json_t *v;
    int rc;

    if ((rc = override_split(assignment, &e, &value, err)) < 0)
        return rc;
    if (!utf8_ok((const unsigned char *)value))
        return gpt_err_set(err, -GPT_E_SPEC, e->path, "expected UTF-8 text");
    if (!(v = jobspec_text_to_json(e, value)))
        return gpt_err_set(err, -ENOMEM, e->path, "out of memory");
    rc = entry_apply(e, v, job, err);
    json_decref(v);
    return rc;
}

/* What the engine would refuse at run time (data.c, model.c, trainer.c),
 * refused here instead with the key named, so that such a job fails at
 * submit rather than after it was queued, started and retried. Checks that
 * need the data files (their length) are the daemon's (daemon/node/job_limits.c). */
static int jobspec_validate_engine(const struct gpt_job *job, struct gpt_err *err)
{
    const struct gpt_model_config *m = &job->model;
    const struct gpt_data_spec *d = &job->data;
    if (m->vocab_size == 1)
        return gpt_err_set(
            err, -GPT_E_SPEC, "model.vocab_size",
            "1 leaves nothing to predict; use 0 (taken from the data) or at least 2");
    if (d->kind == GPT_DATA_SYNTHETIC && m->block_size < 3 * d->digits)
        return gpt_err_set(err, -GPT_E_SPEC, "model.block_size",
                           "addition with data.digits = %d needs model.block_size >= %d, got %d",
                           d->digits, 3 * d->digits, m->block_size);
    if (d->kind == GPT_DATA_TEXT && d->val_path[0] == '\0' && !(d->train_split < 1.0))
        return gpt_err_set(err, -GPT_E_SPEC, "data.train_split",
                           "must be below 1 to leave a validation split of data.path (or set "
                           "data.val_path), got %g",
                           d->train_split);
    uint64_t rows = (uint64_t)job->trainer.micro_batch * (uint64_t)m->block_size;
    if (rows * 4 * (uint64_t)m->n_embd > GPT_JOB_GEMM_MAX)
        return gpt_err_set(err, -GPT_E_SPEC, "trainer.micro_batch",
                           "trainer.micro_batch (%d) x model.block_size (%d) x 4 model.n_embd (%d) "
                           "exceeds the matrix size limit 2^40",
                           job->trainer.micro_batch, m->block_size, 4 * m->n_embd);
    return 0;
}

/* data.tokenizer gpt2 and data.vocab go together (a shards job with
 * data.vocab was made gpt2 by the parser). */
static int jobspec_validate_vocab(const struct gpt_job *job, struct gpt_err *err)
{
    const struct gpt_data_spec *d = &job->data;
    if (d->tokenizer == GPT_TOK_GPT2 && d->kind == GPT_DATA_SYNTHETIC)
        return gpt_err_set(err, -GPT_E_SPEC, "data.tokenizer",
                           "gpt2 is for text and shards jobs, not synthetic tasks");
    if (d->tokenizer == GPT_TOK_GPT2 && d->vocab[0] == '\0')
        return gpt_err_set(err, -GPT_E_SPEC, "data.vocab",
                           "required with data.tokenizer gpt2: a folder holding encoder.json and "
                           "vocab.bpe (or vocab.json and merges.txt)");
    if (d->tokenizer != GPT_TOK_GPT2 && d->vocab[0] != '\0')
        return gpt_err_set(err, -GPT_E_SPEC, "data.vocab",
                           "is only used with data.tokenizer gpt2 (the job's tokenizer is %s)",
                           d->tokenizer == GPT_TOK_BYTE ? "byte" : "char");
    return 0;
}

int gpt_jobspec_check_world(const struct gpt_job *job, int workers_per_node, struct gpt_err *err)
{
    int per_node = workers_per_node > 0 ? workers_per_node : 1;
    int64_t world = (int64_t)job->distributed.nodes_max * per_node;
    if (job->trainer.global_batch >= world)
        return 0;
    return gpt_err_set(err, -GPT_E_SPEC, "trainer.global_batch",
                       "trainer.global_batch (%d) is smaller than the largest world of this job, "
                       "%lld workers (distributed.nodes \"%d:%d\" x %d worker%s per node): every "
                       "worker needs at least one sequence per step",
                       job->trainer.global_batch, (long long)world, job->distributed.nodes_min,
                       job->distributed.nodes_max, per_node, per_node == 1 ? "" : "s");
}

int gpt_jobspec_validate(const struct gpt_job *job, struct gpt_err *err)
{
    const struct gpt_model_config *m = &job->model;
    const struct gpt_data_spec *d = &job->data;
    const struct gpt_trainer_spec *t = &job->trainer;
    int rc;

    for (size_t k = 0; k < jobspec_n_entries; k++)
        if ((rc = entry_check(&jobspec_entries[k], job, err)) < 0)
            return rc;

    if (m->n_embd % m->n_head != 0)
        return gpt_err_set(err, -GPT_E_SPEC, "model.n_embd",
                           "must be a multiple of model.n_head (%d), got %d", m->n_head, m->n_embd);
    if (t->max_steps == 0 && t->max_epochs == 0)
        return gpt_err_set(err, -GPT_E_SPEC, "trainer.max_steps",
                           "one of trainer.max_steps and trainer.max_epochs must be > 0");
    if (job->optimizer.min_lr > job->optimizer.lr)
        return gpt_err_set(err, -GPT_E_SPEC, "optimizer.min_lr",
                           "must be at most optimizer.lr (%g), got %g", job->optimizer.lr,
                           job->optimizer.min_lr);
    if (job->distributed.nodes_min > job->distributed.nodes_max)
        return gpt_err_set(err, -GPT_E_SPEC, "distributed.nodes",
                           "expected MIN <= MAX, got \"%d:%d\"", job->distributed.nodes_min,
                           job->distributed.nodes_max);
    if ((rc = gpt_jobspec_check_world(job, job->distributed.workers_per_node, err)) < 0)
        return rc;
    if (d->kind != GPT_DATA_SYNTHETIC && d->path[0] == '\0')
        return gpt_err_set(err, -GPT_E_SPEC, "data.path", "required when data.kind is %s (a %s)",
                           gpt_data_kind_name(d->kind),
                           d->kind == GPT_DATA_TEXT ? "text file" : "glob of shard files");
    if (d->kind == GPT_DATA_SYNTHETIC && d->task[0] == '\0')
        return gpt_err_set(err, -GPT_E_SPEC, "data.task",
                           "required when data.kind is synthetic (one of: addition)");
    if (d->kind == GPT_DATA_TEXT && d->tokenizer == GPT_TOK_BYTE && m->vocab_size != 0 &&
        m->vocab_size < 256)
        return gpt_err_set(err, -GPT_E_SPEC, "model.vocab_size",
                           "must be 0 or at least 256 with the byte tokenizer, got %d",
                           m->vocab_size);
    if (d->kind == GPT_DATA_SYNTHETIC && m->vocab_size != 0 && m->vocab_size < 10)
        return gpt_err_set(err, -GPT_E_SPEC, "model.vocab_size",
                           "must be 0 or at least 10 for the addition task, got %d", m->vocab_size);
    if ((rc = jobspec_validate_vocab(job, err)) < 0)
        return rc;
    return jobspec_validate_engine(job, err);
}

/* Refuses nesting deeper than GPT_JOB_DEPTH_MAX before jansson recurses into it. */
static int depth_ok(const char *s, size_t len)
{
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '[' || c == '{') {
            if (++depth > GPT_JOB_DEPTH_MAX)
                return 0;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return 1;
}

int jobspec_parse_tree(json_t *root, const char *const *overrides, size_t n_over,
                       struct gpt_job *ret_job, struct gpt_err *err)
{
    struct gpt_job job;
    const struct jobspec_entry *kind = jobspec_entry_find_path("data.kind");
    int rc, kind_set;

    if (!json_is_object(root))
        return gpt_err_set(err, -GPT_E_SPEC, "", "expected a JSON object at the top level, got %s",
                           json_kind(root));
    gpt_jobspec_defaults(&job);
    if ((rc = apply_object(NULL, root, &job, err)) < 0)
        return rc;
    kind_set = json_object_get(json_object_get(root, "data"), "kind") != NULL;
    for (size_t k = 0; k < n_over; k++) {
        const struct jobspec_entry *e;
        const char *value;
        if ((rc = override_split(overrides[k], &e, &value, err)) < 0)
            return rc;
        if ((rc = gpt_jobspec_override(&job, overrides[k], err)) < 0)
            return rc;
        kind_set |= e == kind;
    }
    /* data.kind, when not given, follows from what is. */
    if (!kind_set && job.data.path[0] == '\0' && job.data.task[0] != '\0')
        job.data.kind = GPT_DATA_SYNTHETIC;
    /* Shards are token ids already: a vocabulary makes them GPT-2 text. */
    if (job.data.kind == GPT_DATA_SHARDS && job.data.vocab[0] != '\0')
        job.data.tokenizer = GPT_TOK_GPT2;
    if ((rc = gpt_jobspec_validate(&job, err)) < 0)
        return rc;
    *ret_job = job;
    return 0;
}

int jobspec_json_tree(const char *json, size_t len, json_t **ret_tree, struct gpt_err *err)
{
    json_error_t jerr;
    json_t *root;

    *ret_tree = NULL;
    if (len > GPT_JOB_JSON_MAX)
        return gpt_err_set(err, -GPT_E_SPEC, "", "job spec is %zu bytes; at most %u are allowed",
                           len, GPT_JOB_JSON_MAX);
    if (!depth_ok(json, len))
        return gpt_err_set(err, -GPT_E_SPEC, "", "nested deeper than %d levels", GPT_JOB_DEPTH_MAX);
    root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (json_error_code(&jerr) == json_error_out_of_memory)
            return gpt_err_set(err, -ENOMEM, "", "out of memory");
        return gpt_err_set(err, -GPT_E_SPEC, "", "invalid JSON at line %d column %d: %s", jerr.line,
                           jerr.column, jerr.text);
    }
    *ret_tree = root;
    return 0;
}

int gpt_jobspec_parse(const char *json, size_t len, const char *const *overrides, size_t n_over,
                      struct gpt_job *ret_job, struct gpt_err *err)
{
    json_t *root;
    int rc;

    if ((rc = jobspec_json_tree(json, len, &root, err)) < 0)
        return rc;
    rc = jobspec_parse_tree(root, overrides, n_over, ret_job, err);
    json_decref(root);
    return rc;
}

/* The fewest significant digits (15..17) that print every double of `job`
 * so it reads back exactly: 3e-4 stays "0.0003", not "0.00029999999999999997". */
static int real_precision(const struct gpt_job *job)
{
    int prec = 15;
    for (size_t k = 0; k < jobspec_n_entries; k++) {
        const struct jobspec_entry *e = &jobspec_entries[k];
        size_t offs[2] = {e->off, e->off2};
        int n = e->type == JOBSPEC_DOUBLE ? 1 : e->type == JOBSPEC_BETAS ? 2 : 0;
        for (int j = 0; j < n; j++) {
            double v = *(const double *)cfield(job, offs[j]);
            char buf[40];
            for (int p = prec; p <= 17; p++) {
                snprintf(buf, sizeof(buf), "%.*g", p, v);
                if (strtod(buf, NULL) == v || p == 17) {
                    prec = p;
                    break;
                }
            }
        }
    }
    return prec;
}

int gpt_jobspec_warnings(const struct gpt_job *job, char *buf, size_t cap)
{
    const struct gpt_trainer_spec *t = &job->trainer;
    int n = 0;
    size_t len = 0;
    if (cap)
        buf[0] = '\0';
    if (t->max_steps > 0 && job->optimizer.warmup_steps >= t->max_steps) {
        int w = snprintf(buf + len, cap - len,
                         "optimizer.warmup_steps: %d is not below trainer.max_steps (%lld): the"
                         " learning rate never leaves its warmup\n",
                         job->optimizer.warmup_steps, (long long)t->max_steps);
        len += w > 0 && (size_t)w < cap - len ? (size_t)w : 0;
        n++;
    }
    if (t->max_steps > 0 && t->eval_every > t->max_steps) {
        int w = snprintf(buf + len, cap - len,
                         "trainer.eval_every: %d is beyond trainer.max_steps (%lld): validation"
                         " runs only once, at the last step\n",
                         t->eval_every, (long long)t->max_steps);
        len += w > 0 && (size_t)w < cap - len ? (size_t)w : 0;
        n++;
    }
    return n;
}

char *gpt_jobspec_to_json(const struct gpt_job *job)
{
    json_t *root = json_object();
    char *text = NULL;

    if (!root)
        return NULL;
    for (size_t k = 0; k < jobspec_n_entries; k++) {
        const struct jobspec_entry *e = &jobspec_entries[k];
        const char *dot = strchr(e->path, '.');
        json_t *obj = root;
        if (dot) {
            char sec[32];
            snprintf(sec, sizeof(sec), "%.*s", (int)(dot - e->path), e->path);
            obj = json_object_get(root, sec);
            if (!obj && json_object_set_new(root, sec, obj = json_object()) < 0)
                goto out;
        }
        if (json_object_set_new(obj, dot ? dot + 1 : e->path, jobspec_entry_to_json(e, job)) < 0)
            goto out;
    }
    text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(real_precision(job)));
out:
    json_decref(root);
    return text;
}
