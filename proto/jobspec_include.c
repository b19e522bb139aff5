/*
 * jobspec_include: a job file and the files it includes, Hydra-style.
 *
 *   include: [base.yaml, model/gpt2-small.yaml]      # or
 *   defaults: [base, {model: gpt2-small}, _self_]
 *
 * Included files are read in order (each may include others), then the
 * file's own keys (at `_self_` when a defaults list names it), then the
 * command line's overrides; later values replace earlier ones key by key
 * within each section. Paths are relative to the including file's folder;
 * a defaults entry without an extension takes its includer's; {group:
 * name} is group/name. Cycles, more than JOBSPEC_INCLUDE_DEPTH levels or
 * JOBSPEC_INCLUDE_FILES files are refused.
 *
 * Every key remembers where its value came from ("base.yaml:12",
 * "job.json", "the command line"), so an error names the file and, for
 * YAML, the line that set the bad key; an error of no one key (a
 * cross-field check) names the top file.
 *
 * Reads files as the calling process; no globals; any thread.
 */
#include "jobspec_int.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JOBSPEC_INCLUDE_DEPTH 8
#define JOBSPEC_INCLUDE_FILES 32

struct include_ctx {
    json_t *origin;                        /* "section.key" -> "file:line" */
    char *open[JOBSPEC_INCLUDE_DEPTH + 1]; /* the chain being read (cycle check) */
    int depth;
    int files;
};

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static bool is_yaml(const char *file)
{
    return has_suffix(file, ".yaml") || has_suffix(file, ".yml");
}

/* Prefixes err->msg with "what: ", truncating the end. */
static void msg_prefix(struct gpt_err *err, const char *what)
{
    if (!err)
        return;
    size_t flen = strnlen(what, 200), mlen = strlen(err->msg);
    if (flen + 2 + mlen >= sizeof(err->msg))
        mlen = sizeof(err->msg) - flen - 3;
    memmove(err->msg + flen + 2, err->msg, mlen);
    memcpy(err->msg, what, flen);
    memcpy(err->msg + flen, ": ", 2);
    err->msg[flen + 2 + mlen] = '\0';
}

/* Reads a whole job file (at most GPT_JOB_JSON_MAX bytes). */
static int read_text(const char *file, char **ret, size_t *ret_len, struct gpt_err *err)
{
    FILE *f = fopen(file, "rb");
    if (!f)
        return gpt_err_set(err, -GPT_E_SPEC, "", "%s: %s", file, strerror(errno));
    char *buf = malloc(GPT_JOB_JSON_MAX + 1);
    int rc = 0;
    size_t len = 0;
    if (!buf) {
        rc = gpt_err_set(err, -ENOMEM, "", "%s: out of memory", file);
        goto out;
    }
    len = fread(buf, 1, GPT_JOB_JSON_MAX + 1, f);
    if (ferror(f))
        rc = gpt_err_set(err, -GPT_E_SPEC, "", "%s: read error", file);
    else if (len > GPT_JOB_JSON_MAX)
        rc = gpt_err_set(err, -GPT_E_SPEC, "", "%s: larger than %u bytes", file, GPT_JOB_JSON_MAX);
out:
    fclose(f);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    *ret = buf;
    *ret_len = len;
    return 0;
}

/* Merges `src` into `dst` key by key (objects recursively, anything else
 * replaced), recording `where` (with a line from `lines` when known) as
 * the origin of every leaf it sets. */
static int merge_into(json_t *dst, json_t *src, const char *prefix, const char *where,
                      json_t *lines, json_t *origin)
{
    const char *key;
    json_t *v;
    json_object_foreach(src, key, v)
    {
        char path[GPT_ERR_PATH_MAX];
        snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "." : "", key);
        json_t *cur = json_object_get(dst, key);
        if (json_is_object(v) && json_is_object(cur)) {
            if (merge_into(cur, v, path, where, lines, origin) < 0)
                return -ENOMEM;
            continue;
        }
        if (json_is_object(v)) {
            json_t *fresh = json_object();
            if (!fresh || json_object_set_new(dst, key, fresh) < 0 ||
                merge_into(fresh, v, path, where, lines, origin) < 0)
                return -ENOMEM;
            continue;
        }
        if (json_object_set(dst, key, v) < 0)
            return -ENOMEM;
        char at[GPT_ERR_PATH_MAX + 32];
        json_t *line = lines ? json_object_get(lines, path) : NULL;
        if (json_is_integer(line))
            snprintf(at, sizeof(at), "%s:%lld", where, (long long)json_integer_value(line));
        else
            snprintf(at, sizeof(at), "%s", where);
        json_object_set_new(origin, path, json_string(at));
    }
    return 0;
}

/* The file a list entry names, relative to the including file's folder. */
static int entry_path(const char *includer, const json_t *entry, bool defaults, char *out,
                      size_t cap, struct gpt_err *err)
{
    char rel[PATH_MAX];
    if (json_is_string(entry)) {
        snprintf(rel, sizeof(rel), "%s", json_string_value(entry));
    } else if (defaults && json_is_object(entry) && json_object_size(entry) == 1) {
        const char *group = json_object_iter_key(json_object_iter((json_t *)entry));
        const json_t *name = json_object_iter_value(json_object_iter((json_t *)entry));
        if (!json_is_string(name))
            return gpt_err_set(err, -GPT_E_SPEC, "defaults",
                               "%s: a {group: name} entry needs a string name", includer);
        snprintf(rel, sizeof(rel), "%s/%s", group, json_string_value(name));
    } else {
        return gpt_err_set(err, -GPT_E_SPEC, defaults ? "defaults" : "include",
                           "%s: each entry must be a file name%s", includer,
                           defaults ? " or {group: name}" : "");
    }
    if (!rel[0])
        return gpt_err_set(err, -GPT_E_SPEC, defaults ? "defaults" : "include",
                           "%s: an empty file name", includer);
    /* Hydra's defaults name files without their extension. */
    const char *base = strrchr(rel, '/');
    base = base ? base + 1 : rel;
    const char *ext = strchr(base, '.') ? "" : is_yaml(includer) ? ".yaml" : ".json";
    const char *slash = strrchr(includer, '/');
    int n;
    if (rel[0] == '/' || !slash)
        n = snprintf(out, cap, "%s%s", rel, ext);
    else
        n = snprintf(out, cap, "%.*s/%s%s", (int)(slash - includer), includer, rel, ext);
    if (n < 0 || (size_t)n >= cap)
        return gpt_err_set(err, -GPT_E_SPEC, "include", "%s: included path too long", includer);
    return 0;
}

static int load_chain(struct include_ctx *c, const char *file, json_t *into, struct gpt_err *err);

/* Includes every entry of `list` into `into`; `self` (the file's own keys)
 * goes where "_self_" stands, or after the list when it does not. */
static int include_list(struct include_ctx *c, const char *file, const json_t *list, bool defaults,
                        json_t *self, json_t *lines, json_t *into, struct gpt_err *err)
{
    bool self_done = false;
    size_t i;
    const json_t *entry;
    if (!json_is_array(list))
        return gpt_err_set(err, -GPT_E_SPEC, defaults ? "defaults" : "include",
                           "%s: expected a list of files", file);
    json_array_foreach((json_t *)list, i, entry)
    {
        int rc;
        if (defaults && json_is_string(entry) && strcmp(json_string_value(entry), "_self_") == 0) {
            if (merge_into(into, self, "", file, lines, c->origin) < 0)
                return gpt_err_set(err, -ENOMEM, "", "out of memory");
            self_done = true;
            continue;
        }
        char path[PATH_MAX];
        if ((rc = entry_path(file, entry, defaults, path, sizeof(path), err)) < 0 ||
            (rc = load_chain(c, path, into, err)) < 0)
            return rc;
    }
    if (!self_done && merge_into(into, self, "", file, lines, c->origin) < 0)
        return gpt_err_set(err, -ENOMEM, "", "out of memory");
    return 0;
}

/* Reads `file` and what it includes, merged into `into`. */
static int load_chain(struct include_ctx *c, const char *file, json_t *into, struct gpt_err *err)
{
    char *text = NULL, *real = NULL;
    json_t *tree = NULL, *lines = NULL;
    size_t len = 0;
    int rc;

    if (c->depth > JOBSPEC_INCLUDE_DEPTH)
        return gpt_err_set(err, -GPT_E_SPEC, "include", "%s: includes nest deeper than %d files",
                           file, JOBSPEC_INCLUDE_DEPTH);
    if (++c->files > JOBSPEC_INCLUDE_FILES)
        return gpt_err_set(err, -GPT_E_SPEC, "include", "%s: more than %d files included", file,
                           JOBSPEC_INCLUDE_FILES);
    if ((rc = read_text(file, &text, &len, err)) < 0)
        return rc;
    if (!(real = realpath(file, NULL))) {
        rc = gpt_err_set(err, -GPT_E_SPEC, "", "%s: %s", file, strerror(errno));
        goto out;
    }
    for (int i = 0; i < c->depth; i++)
        if (strcmp(c->open[i], real) == 0) {
            rc = gpt_err_set(err, -GPT_E_SPEC, "include", "%s includes itself (through %s)", file,
                             c->depth ? c->open[c->depth - 1] : file);
            goto out;
        }
    if (is_yaml(file)) {
        if (!(lines = json_object())) {
            rc = gpt_err_set(err, -ENOMEM, "", "out of memory");
            goto out;
        }
        rc = jobspec_yaml_tree(text, len, lines, &tree, err);
    } else {
        rc = jobspec_json_tree(text, len, &tree, err);
    }
    if (rc < 0) {
        msg_prefix(err, file);
        goto out;
    }
    if (!json_is_object(tree)) {
        rc = gpt_err_set(err, -GPT_E_SPEC, "", "%s: expected an object at the top level", file);
        goto out;
    }
    json_t *inc = json_object_get(tree, "include"), *def = json_object_get(tree, "defaults");
    if (inc && def) {
        rc = gpt_err_set(err, -GPT_E_SPEC, "include", "%s: give include or defaults, not both",
                         file);
        goto out;
    }
    json_t *list = inc ? inc : def;
    if (!list) {
        rc = merge_into(into, tree, "", file, lines, c->origin) < 0
                 ? gpt_err_set(err, -ENOMEM, "", "out of memory")
                 : 0;
        goto out;
    }
    json_incref(list);
    json_object_del(tree, inc ? "include" : "defaults");
    c->open[c->depth++] = real;
    rc = include_list(c, file, list, def != NULL, tree, lines, into, err);
    c->depth--;
    json_decref(list);
out:
    free(real);
    free(text);
    json_decref(tree);
    json_decref(lines);
    return rc;
}

int gpt_jobspec_load(const char *file, const char *const *overrides, size_t n_over,
                     struct gpt_job *ret_job, struct gpt_err *err)
{
    struct include_ctx c = {.origin = json_object()};
    json_t *root = json_object();
    int rc;

    if (!c.origin || !root) {
        rc = gpt_err_set(err, -ENOMEM, "", "out of memory");
        goto out;
    }
    if ((rc = load_chain(&c, file, root, err)) < 0)
        goto out;
    for (size_t k = 0; k < n_over; k++) {
        const char *eq = strchr(overrides[k], '=');
        char key[GPT_ERR_PATH_MAX];
        if (eq && (size_t)(eq - overrides[k]) < sizeof(key)) {
            memcpy(key, overrides[k], (size_t)(eq - overrides[k]));
            key[eq - overrides[k]] = '\0';
            json_object_set_new(c.origin, key, json_string("the command line"));
        }
    }
    rc = jobspec_parse_tree(root, overrides, n_over, ret_job, err);
    if (rc < 0 && err) {
        /* The file (and line) that set the key the error names. */
        const char *where = json_string_value(json_object_get(c.origin, err->path));
        char what[GPT_ERR_PATH_MAX + 64];
        snprintf(what, sizeof(what), "%s", where ? where : file);
        msg_prefix(err, what);
    }
out:
    json_decref(c.origin);
    json_decref(root);
    return rc;
}
