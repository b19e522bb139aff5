/*
 * jobspec_file: the parts of the job spec that touch files or YAML: reading
 * a job file, turning a YAML document into the same JSON tree the JSON
 * parser produces (so validation and error paths are shared), and checking
 * that the data paths exist.
 *
 * No globals; safe from any thread. gpt_jobspec_load and
 * gpt_jobspec_check_paths block on the file system.
 */
#include "jobspec_int.h"

#include <errno.h>
#include <glob.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef GPTD_HAVE_YAML
#include <yaml.h>

/* Nodes converted from one YAML document at most: aliases can make a small
 * document expand exponentially ("billion laughs"). */
#define JOBSPEC_YAML_NODES_MAX 4096

/* Collections open at once that the event pass allows: the top mapping
 * plus GPT_JOB_DEPTH_MAX levels below it, as yaml_to_json allows. */
#define JOBSPEC_YAML_DEPTH_MAX (GPT_JOB_DEPTH_MAX + 1)

/*
 * libyaml's loader builds the whole document before we see it, and its
 * scanner rechecks every pending simple key at each token: on deeply
 * nested input ("[[[[...", "{a: {a: ...") that is quadratic in the depth
 * (100,000 levels took 30 s and more). So the text first goes through the
 * event parser, which stops at the first collection nested deeper than the
 * limit; the scanner's stacks never hold more than the limit, and the
 * document is loaded only when its depth is known to be small.
 */
static int yaml_check_depth(const char *yaml, size_t len, struct gpt_err *err)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    int depth = 0, rc = 0;
    /* Per open collection: a mapping?, its next node is a key?, and the
     * length of the JSON path where it opened (the path names the error
     * the same way yaml_to_json would). */
    bool is_map[JOBSPEC_YAML_DEPTH_MAX + 1] = {false};
    bool want_key[JOBSPEC_YAML_DEPTH_MAX + 1] = {false};
    size_t base[JOBSPEC_YAML_DEPTH_MAX + 1] = {0};
    char path[GPT_ERR_PATH_MAX] = "";

    if (!yaml_parser_initialize(&parser))
        return gpt_err_set(err, -ENOMEM, "", "out of memory");
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    for (;;) {
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = gpt_err_set(
                err, parser.error == YAML_MEMORY_ERROR ? -ENOMEM : -GPT_E_SPEC, "",
                "invalid YAML at line %zu column %zu: %s", (size_t)parser.problem_mark.line + 1,
                (size_t)parser.problem_mark.column + 1, parser.problem ? parser.problem : "error");
            break;
        }
        yaml_event_type_t type = ev.type;
        size_t line = ev.start_mark.line + 1, col = ev.start_mark.column + 1;
        bool node = type == YAML_SCALAR_EVENT || type == YAML_ALIAS_EVENT;
        if (type == YAML_SCALAR_EVENT && depth > 0 && is_map[depth] && want_key[depth]) {
            /* a key: the path of what follows is the enclosing one plus it */
            size_t n = base[depth];
            snprintf(path + n, sizeof(path) - n, "%s%.*s", n ? "." : "", (int)ev.data.scalar.length,
                     (const char *)ev.data.scalar.value);
        }
        yaml_event_delete(&ev);
        if (type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT) {
            if (depth + 1 > JOBSPEC_YAML_DEPTH_MAX) {
                rc = gpt_err_set(err, -GPT_E_SPEC, path,
                                 "YAML nested deeper than %d levels (the limit) at line %zu "
                                 "column %zu",
                                 GPT_JOB_DEPTH_MAX, line, col);
                break;
            }
            depth++;
            is_map[depth] = type == YAML_MAPPING_START_EVENT;
            want_key[depth] = true;
            base[depth] = strlen(path);
        } else if (type == YAML_SEQUENCE_END_EVENT || type == YAML_MAPPING_END_EVENT) {
            path[base[depth]] = '\0';
            depth--;
            node = true; /* the collection was one node of its parent */
        } else if (type == YAML_DOCUMENT_END_EVENT || type == YAML_STREAM_END_EVENT) {
            break; /* only the first document is loaded */
        }
        if (node && depth > 0 && is_map[depth]) {
            want_key[depth] = !want_key[depth];
            if (want_key[depth])
                path[base[depth]] = '\0';
        }
    }
    yaml_parser_delete(&parser);
    return rc;
}

struct yaml_conv {
    yaml_document_t *doc;
    int budget;    /* nodes left */
    json_t *lines; /* NULL, or "section.key" -> its line (1-based) */
};

/* Converts `node` into JSON. `section` is the key of the enclosing top-level
 * mapping entry (NULL at the top), `e` the table entry the node is the value
 * of (NULL: unknown, or inside a sequence), `path` the JSON path for errors. */
static int yaml_to_json(struct yaml_conv *c, yaml_node_t *node, int depth, const char *section,
                        const struct jobspec_entry *e, const char *path, json_t **ret,
                        struct gpt_err *err)
{
    json_t *v = NULL;
    int rc;

    if (!node)
        return gpt_err_set(err, -GPT_E_SPEC, path, "invalid YAML node");
    if (depth > GPT_JOB_DEPTH_MAX)
        return gpt_err_set(err, -GPT_E_SPEC, path, "nested deeper than %d levels",
                           GPT_JOB_DEPTH_MAX);
    if (--c->budget < 0)
        return gpt_err_set(err, -GPT_E_SPEC, path, "more than %d YAML nodes",
                           JOBSPEC_YAML_NODES_MAX);

    switch (node->type) {
    case YAML_SCALAR_NODE: {
        const char *s = (const char *)node->data.scalar.value;
        size_t len = node->data.scalar.length;
        if (node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
            v = json_stringn(s, len); /* quoted: always a string, as in JSON */
        else if ((!e || (e->type != JOBSPEC_STRING && e->type != JOBSPEC_ENUM)) &&
                 (len == 0 || strcmp(s, "~") == 0 || strcmp(s, "null") == 0))
            v = json_null();
        else
            v = jobspec_text_to_json(e, s);
        break;
    }
    case YAML_SEQUENCE_NODE:
        if (!(v = json_array()))
            break;
        for (yaml_node_item_t *it = node->data.sequence.items.start;
             it < node->data.sequence.items.top; it++) {
            json_t *item;
            rc = yaml_to_json(c, yaml_document_get_node(c->doc, *it), depth + 1, section, NULL,
                              path, &item, err);
            if (rc < 0) {
                json_decref(v);
                return rc;
            }
            if (json_array_append_new(v, item) < 0) {
                json_decref(v);
                return gpt_err_set(err, -ENOMEM, path, "out of memory");
            }
        }
        break;
    case YAML_MAPPING_NODE:
        if (!(v = json_object()))
            break;
        for (yaml_node_pair_t *pair = node->data.mapping.pairs.start;
             pair < node->data.mapping.pairs.top; pair++) {
            yaml_node_t *k = yaml_document_get_node(c->doc, pair->key);
            const struct jobspec_entry *ce = NULL;
            char cpath[GPT_ERR_PATH_MAX];
            const char *key;
            json_t *item;

            if (!k || k->type != YAML_SCALAR_NODE ||
                strlen((const char *)k->data.scalar.value) != k->data.scalar.length) {
                json_decref(v);
                return gpt_err_set(err, -GPT_E_SPEC, path, "expected a string key");
            }
            key = (const char *)k->data.scalar.value;
            snprintf(cpath, sizeof(cpath), "%s%s%s", path, path[0] ? "." : "", key);
            if (c->lines)
                json_object_set_new(c->lines, cpath,
                                    json_integer((json_int_t)k->start_mark.line + 1));
            if (depth == 0)
                ce = jobspec_entry_find(NULL, 0, key);
            else if (depth == 1 && section)
                ce = jobspec_entry_find(section, strlen(section), key);
            if (json_object_get(v, key)) {
                json_decref(v);
                return gpt_err_set(err, -GPT_E_SPEC, cpath, "duplicate key");
            }
            rc = yaml_to_json(c, yaml_document_get_node(c->doc, pair->value), depth + 1,
                              depth == 0 ? key : section, ce, cpath, &item, err);
            if (rc < 0) {
                json_decref(v);
                return rc;
            }
            if (json_object_set_new(v, key, item) < 0) {
                json_decref(v);
                return gpt_err_set(err, -ENOMEM, path, "out of memory");
            }
        }
        break;
    default:
        return gpt_err_set(err, -GPT_E_SPEC, path, "invalid YAML node");
    }
    if (!v)
        return gpt_err_set(err, -ENOMEM, path, "out of memory");
    *ret = v;
    return 0;
}
#endif

int jobspec_yaml_tree(const char *yaml, size_t len, json_t *lines, json_t **ret_tree,
                      struct gpt_err *err)
{
#ifdef GPTD_HAVE_YAML
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_node_t *top;
    json_t *root = NULL;
    int rc;

    *ret_tree = NULL;
    if (len > GPT_JOB_JSON_MAX)
        return gpt_err_set(err, -GPT_E_SPEC, "", "job spec is %zu bytes; at most %u are allowed",
                           len, GPT_JOB_JSON_MAX);
    if ((rc = yaml_check_depth(yaml, len, err)) < 0)
        return rc;
    if (!yaml_parser_initialize(&parser))
        return gpt_err_set(err, -ENOMEM, "", "out of memory");
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    if (!yaml_parser_load(&parser, &doc)) {
        rc = gpt_err_set(
            err, parser.error == YAML_MEMORY_ERROR ? -ENOMEM : -GPT_E_SPEC, "",
            "invalid YAML at line %zu column %zu: %s", (size_t)parser.problem_mark.line + 1,
            (size_t)parser.problem_mark.column + 1, parser.problem ? parser.problem : "error");
        yaml_parser_delete(&parser);
        return rc;
    }
    top = yaml_document_get_root_node(&doc);
    if (!top) { /* an empty document is an empty mapping: all defaults */
        root = json_object();
        rc = root ? 0 : gpt_err_set(err, -ENOMEM, "", "out of memory");
    } else {
        struct yaml_conv c = {.doc = &doc, .budget = JOBSPEC_YAML_NODES_MAX, .lines = lines};
        rc = yaml_to_json(&c, top, 0, NULL, NULL, "", &root, err);
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (rc == 0)
        *ret_tree = root;
    return rc;
#else
    (void)yaml, (void)len, (void)lines;
    *ret_tree = NULL;
    return gpt_err_set(err, -GPT_E_SPEC, "", "YAML job files are not supported by this build");
#endif
}

int gpt_jobspec_parse_yaml(const char *yaml, size_t len, const char *const *overrides,
                           size_t n_over, struct gpt_job *ret_job, struct gpt_err *err)
{
    json_t *root;
    int rc = jobspec_yaml_tree(yaml, len, NULL, &root, err);
    if (rc == 0)
        rc = jobspec_parse_tree(root, overrides, n_over, ret_job, err);
    json_decref(root);
    return rc;
}

/* One file: exists, is not a directory, is readable. */
static int check_file(const char *file, const char *key, struct gpt_err *err)
{
    struct stat st;

    if (stat(file, &st) < 0)
        return gpt_err_set(err, -GPT_E_SPEC, key, "cannot open \"%s\": %s", file, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return gpt_err_set(err, -GPT_E_SPEC, key, "\"%s\" is a directory, expected a file", file);
    if (access(file, R_OK) < 0)
        return gpt_err_set(err, -GPT_E_SPEC, key, "cannot read \"%s\": %s", file, strerror(errno));
    return 0;
}

/* A file, or for shards a glob with at least one match, every match readable. */
static int check_data_path(const char *pattern, int is_glob, const char *key, struct gpt_err *err)
{
    glob_t g;
    int rc = 0, r;

    if (!is_glob)
        return check_file(pattern, key, err);
    r = glob(pattern, 0, NULL, &g);
    if (r == GLOB_NOMATCH)
        rc = gpt_err_set(err, -GPT_E_SPEC, key, "no file matches \"%s\"", pattern);
    else if (r == GLOB_NOSPACE)
        rc = gpt_err_set(err, -ENOMEM, key, "out of memory");
    else if (r != 0)
        rc = gpt_err_set(err, -GPT_E_SPEC, key, "cannot read the directories of \"%s\"", pattern);
    for (size_t i = 0; r == 0 && rc == 0 && i < g.gl_pathc; i++)
        rc = check_file(g.gl_pathv[i], key, err);
    if (r == 0 || r == GLOB_NOMATCH)
        globfree(&g);
    return rc;
}

int gpt_jobspec_check_paths(const struct gpt_job *job, struct gpt_err *err)
{
    int shards = job->data.kind == GPT_DATA_SHARDS, rc;

    if (job->data.kind == GPT_DATA_SYNTHETIC)
        return 0;
    if (job->data.path[0] == '\0')
        return gpt_err_set(err, -GPT_E_SPEC, "data.path", "is empty");
    if ((rc = check_data_path(job->data.path, shards, "data.path", err)) < 0)
        return rc;
    if (job->data.val_path[0] != '\0')
        return check_data_path(job->data.val_path, shards, "data.val_path", err);
    return 0;
}
