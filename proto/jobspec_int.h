/*
 * jobspec_int: what the jobspec*.c files share and nobody else sees: the one
 * table of keys, lookup, conversion of one value between JSON and the struct,
 * and the common tail of every parse (overrides, struct, validation).
 *
 * Pure, no globals besides the const table, safe from any thread.
 */
#ifndef GPT_JOBSPEC_INT_H
#define GPT_JOBSPEC_INT_H

#include <jansson.h>

#include "jobspec.h"

/* The JSON shape and C storage of one key. */
enum jobspec_type {
    JOBSPEC_INT,     /* JSON integer -> int */
    JOBSPEC_INT64,   /* JSON integer -> int64_t */
    JOBSPEC_UINT64,  /* JSON integer >= 0, or a decimal string above 2^63 -> uint64_t */
    JOBSPEC_DOUBLE,  /* JSON number -> double (finite) */
    JOBSPEC_STRING,  /* JSON string -> char[size]; `names` restricts non-empty values */
    JOBSPEC_ENUM,    /* JSON string, one of `names` -> int (the index) */
    JOBSPEC_BOOL,    /* JSON true/false -> int 0/1 */
    JOBSPEC_BETAS,   /* JSON [b1, b2] -> double at off, double at off2 */
    JOBSPEC_NODES,   /* JSON "MIN:MAX" or an integer -> int at off, int at off2 */
    JOBSPEC_INTAUTO, /* JSON integer or "auto" (stored as 0) -> int */
};

/* Range flags: the bound itself is excluded. */
#define JOBSPEC_OPEN_MIN 1u
#define JOBSPEC_OPEN_MAX 2u

struct jobspec_entry {
    const char *path; /* "section.key", or "key" at the top level */
    enum jobspec_type type;
    size_t off, off2;         /* offsetof(struct gpt_job, ...); off2 for pairs */
    size_t size;              /* strings: the buffer size, NUL included */
    double min, max;          /* numeric range (each value of a pair); min == max: none */
    unsigned flags;           /* JOBSPEC_OPEN_* */
    const char *const *names; /* enum / allowed string values, NULL-terminated */
    int64_t def_i, def_i2;    /* defaults: integer types, enum index, nodes */
    double def_d, def_d2;     /* defaults: doubles, betas */
    const char *def_s;        /* default: strings */
    const char *help;         /* one or two sentences */
};

extern const struct jobspec_entry jobspec_entries[];
extern const size_t jobspec_n_entries;

/* names[v], or "?" when v is out of range. */
const char *jobspec_name_of(const char *const *names, int v);

/* The entry at `section` (first `section_len` bytes; 0 = top level) and
 * `key`, or NULL. */
const struct jobspec_entry *jobspec_entry_find(const char *section, size_t section_len,
                                               const char *key);

/* The entry named by a full path "section.key", or NULL. */
const struct jobspec_entry *jobspec_entry_find_path(const char *path);

/* 1 when `name` (`len` bytes) is a section ("model", "data", ...). */
int jobspec_is_section(const char *name, size_t len);

/* The value of `e` in `job` as JSON (canonical form). Returns new, NULL on ENOMEM. */
json_t *jobspec_entry_to_json(const struct jobspec_entry *e, const struct gpt_job *job);

/* Interprets text (an override's value, a plain YAML scalar) for entry `e`
 * (NULL: an unknown key): strings stay strings; for other types JSON numbers,
 * booleans and arrays are decoded and anything else is kept as a string for
 * the type check to refuse. Returns new, NULL on ENOMEM. */
json_t *jobspec_text_to_json(const struct jobspec_entry *e, const char *text);

/* Writes e's type ("int", "number", ...) and range ("1..1024", "(0, 10]",
 * "text|shards|synthetic") into buf. */
void jobspec_entry_type_text(const struct jobspec_entry *e, char *buf, size_t n);
void jobspec_entry_range_text(const struct jobspec_entry *e, char *buf, size_t n);

/* Applies `n_over` overrides to the parsed tree `root` (borrowed, modified),
 * converts it over the defaults, infers data.kind and validates. Writes
 * *ret_job only on success. */
/* A YAML job text as the JSON tree its JSON twin would parse to (plain
 * scalars typed as each key wants). When `lines` is an object, each
 * mapping key's path ("trainer.max_steps") is set in it to its line. */
int jobspec_yaml_tree(const char *yaml, size_t len, json_t *lines, json_t **ret_tree,
                      struct gpt_err *err);

/* The JSON job text's tree, checked for size and depth as gpt_jobspec_parse
 * checks them. */
int jobspec_json_tree(const char *json, size_t len, json_t **ret_tree, struct gpt_err *err);

int jobspec_parse_tree(json_t *root, const char *const *overrides, size_t n_over,
                       struct gpt_job *ret_job, struct gpt_err *err);

#endif
