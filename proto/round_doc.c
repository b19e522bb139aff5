/*
 * round_doc: the round, world and node-table documents' codec (see
 * round_doc.h). One const table per document says each field's JSON name,
 * type, limits, whether it is required and its slot in the struct; one
 * pair of functions walks any table both ways. Pure.
 */
#include "round_doc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum rd_kind {
    RD_STR,     /* char[max + 1]: byte length in [min, max], no NUL inside */
    RD_HEX,     /* uint64_t as 1..16 lowercase hex digits */
    RD_I64,     /* int64_t in [min, max] */
    RD_INT,     /* int in [min, max] */
    RD_REAL,    /* double, any JSON number */
    RD_BOOL,    /* bool */
    RD_PHASE,   /* char[ROUND_DOC_PHASE_MAX], one of rd_phases */
    RD_STOP,    /* bool: "snapshot" (true) or "abort" */
    RD_TEXT,    /* char *, owned, at most max bytes */
    RD_MEMBER,  /* struct round_member, an object of rd_member_fields; `has` says present */
    RD_MEMBERS, /* struct round_members, an array of such objects */
    RD_ARRAY,   /* json_t *, an array (a reference is kept) */
};

enum {
    RD_REQ = 1,  /* a missing field is an error */
    RD_NULL = 2, /* absent travels as JSON null (not left out) */
};

struct rd_field {
    const char *name;
    int kind; /* enum rd_kind */
    int flags;
    int64_t min, max;
    size_t off;
    size_t has; /* RD_MEMBER: offset of its bool */
};

static const char *const rd_phases[] = {"idle", "forming", "running", "waiting", "stopping"};

#define M(x) offsetof(struct round_member, x)
static const struct rd_field rd_member_fields[] = {
    {"id", RD_STR, RD_REQ, 1, CLUSTER_MSG_NODE_MAX - 1, M(id), 0},
    {"inc", RD_HEX, RD_REQ, 0, 0, M(inc), 0},
    {"rank_base", RD_INT, RD_REQ, 0, INT32_MAX, M(rank_base), 0},
    {"workers", RD_INT, RD_REQ, 0, CLUSTER_MSG_WORKERS_MAX, M(workers), 0},
    {"addr", RD_STR, RD_REQ, 0, CLUSTER_MSG_ADDR_MAX - 1, M(addr), 0},
};
#undef M

#define D(x) offsetof(struct round_doc, x)
static const struct rd_field rd_round_fields[] = {
    {"gen", RD_HEX, RD_REQ, 0, 0, D(gen), 0},
    {"round", RD_I64, RD_REQ, 0, INT64_MAX, D(round), 0},
    {"phase", RD_PHASE, RD_REQ, 0, 0, D(phase), 0},
    {"job", RD_I64, RD_REQ, 0, INT64_MAX, D(job), 0},
    {"stop", RD_STOP, RD_REQ, 0, 0, D(stop_snapshot), 0},
    {"run_id", RD_I64, RD_REQ, 0, INT64_MAX, D(run_id), 0},
    {"world", RD_INT, RD_REQ, 0, INT32_MAX, D(world), 0},
    {"prefix", RD_STR, RD_REQ, 0, ROUND_DOC_PREFIX_MAX - 1, D(prefix), 0},
    {"spec", RD_TEXT, 0, 0, ROUND_DOC_SPEC_MAX, D(spec), 0},
    {"uid", RD_I64, 0, 0, (int64_t)UINT32_MAX - 1, D(uid), 0},
    {"token", RD_HEX, 0, 0, 0, D(token), 0},
    {"resume_step", RD_I64, 0, 0, INT64_MAX, D(resume_step), 0},
    {"closed", RD_STR, 0, 0, ROUND_DOC_CLOSED_MAX - 1, D(closed), 0},
    {"me", RD_MEMBER, 0, 0, 0, D(me), D(has_me)},
    {"nodes", RD_MEMBERS, 0, 0, ROUND_DOC_MEMBERS_MAX, D(nodes), 0},
};
#undef D

#define N(x) offsetof(struct round_node, x)
static const struct rd_field rd_node_fields[] = {
    {"node", RD_STR, RD_REQ, 1, CLUSTER_MSG_NODE_MAX - 1, N(node), 0},
    {"state", RD_STR, RD_REQ, 0, CLUSTER_MSG_STATE_MAX - 1, N(state), 0},
    {"heartbeat_age_s", RD_REAL, RD_REQ, 0, 0, N(heartbeat_age_s), 0},
    {"workers", RD_INT, RD_REQ, 0, CLUSTER_MSG_WORKERS_MAX, N(workers), 0},
    {"version", RD_STR, RD_REQ, 0, CLUSTER_MSG_VERSION_MAX - 1, N(version), 0},
    {"addr", RD_STR, RD_REQ, 0, CLUSTER_MSG_ADDR_MAX - 1, N(addr), 0},
    {"member", RD_BOOL, RD_REQ, 0, 0, N(member), 0},
    {"devices", RD_STR, RD_REQ, 0, CLUSTER_MSG_DEVICES_MAX - 1, N(devices), 0},
    {"gpus", RD_ARRAY, RD_REQ | RD_NULL, 0, 0, N(gpus), 0},
    {"job", RD_I64, RD_REQ | RD_NULL, 1, INT64_MAX, N(job), 0},
    {"ranks", RD_STR, RD_REQ | RD_NULL, 1, ROUND_DOC_RANKS_MAX - 1, N(ranks), 0},
    {"role", RD_STR, 0, 0, 15, N(role), 0},
    {"quarantine", RD_STR, 0, 0, ROUND_DOC_QUARANTINE_MAX - 1, N(quarantine), 0},
    {"quarantined_until", RD_STR, 0, 0, 31, N(quarantined_until), 0},
};
#undef N

#define RD_COUNT(t) (sizeof(t) / sizeof((t)[0]))

/* ---- one field ---- */

static int rd_fail(struct gpt_err *err, const char *prefix, const char *name, const char *what)
{
    char path[GPT_ERR_PATH_MAX];
    snprintf(path, sizeof(path), "%s%s", prefix, name);
    return gpt_err_set(err, -EINVAL, path, "round document: %s %s", path, what);
}

static int rd_hex_parse(const json_t *v, uint64_t *ret)
{
    const char *s = json_string_value(v);
    return s ? cluster_msg_hex_parse(s, json_string_length(v), ret) : -EINVAL;
}

static int rd_decode_obj(const struct rd_field *t, size_t n, const json_t *o, void *base,
                         const char *prefix, struct gpt_err *err);

static int rd_member_decode(const json_t *v, struct round_member *m, const char *path,
                            struct gpt_err *err)
{
    char sub[GPT_ERR_PATH_MAX];
    snprintf(sub, sizeof(sub), "%s.", path);
    if (!json_is_object(v))
        return gpt_err_set(err, -EINVAL, path, "round document: %s must be an object", path);
    return rd_decode_obj(rd_member_fields, RD_COUNT(rd_member_fields), v, m, sub, err);
}

static int rd_members_decode(const struct rd_field *f, const json_t *v, struct round_members *ms,
                             const char *prefix, struct gpt_err *err)
{
    if (!json_is_array(v))
        return rd_fail(err, prefix, f->name, "must be an array");
    size_t n = json_array_size(v);
    if ((int64_t)n > f->max)
        return gpt_err_set(err, -GPT_E_LIMIT, f->name, "round document: more than %" PRId64 " %s",
                           f->max, f->name);
    ms->v = calloc(n ? n : 1, sizeof(*ms->v));
    if (!ms->v)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    ms->n = n;
    ms->present = true;
    for (size_t i = 0; i < n; i++) {
        char path[GPT_ERR_PATH_MAX];
        snprintf(path, sizeof(path), "%s%s[%zu]", prefix, f->name, i);
        int rc = rd_member_decode(json_array_get(v, i), &ms->v[i], path, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Checks one value against its field and stores it at base + f->off. */
static int rd_field_decode(const struct rd_field *f, const json_t *v, void *base,
                           const char *prefix, struct gpt_err *err)
{
    char *slot = (char *)base + f->off;
    switch (f->kind) {
    case RD_STR: {
        if (!json_is_string(v))
            return rd_fail(err, prefix, f->name, "must be a string");
        size_t n = json_string_length(v);
        if ((int64_t)n > f->max || (int64_t)n < f->min || strlen(json_string_value(v)) != n)
            return rd_fail(err, prefix, f->name, "has a bad length or a NUL byte");
        memcpy(slot, json_string_value(v), n + 1);
        return 0;
    }
    case RD_HEX:
        if (rd_hex_parse(v, (uint64_t *)slot) < 0)
            return rd_fail(err, prefix, f->name, "must be 1 to 16 lowercase hex digits");
        return 0;
    case RD_I64:
    case RD_INT: {
        if (!json_is_integer(v))
            return rd_fail(err, prefix, f->name, "must be an integer");
        int64_t i = json_integer_value(v);
        if (i < f->min || i > f->max)
            return rd_fail(err, prefix, f->name, "is out of range");
        if (f->kind == RD_INT)
            *(int *)slot = (int)i;
        else
            *(int64_t *)slot = i;
        return 0;
    }
    case RD_REAL:
        if (!json_is_number(v))
            return rd_fail(err, prefix, f->name, "must be a number");
        *(double *)slot = json_number_value(v);
        return 0;
    case RD_BOOL:
        if (!json_is_boolean(v))
            return rd_fail(err, prefix, f->name, "must be true or false");
        *(bool *)slot = json_is_true(v);
        return 0;
    case RD_PHASE:
        for (size_t i = 0; json_is_string(v) && i < RD_COUNT(rd_phases); i++)
            if (strcmp(json_string_value(v), rd_phases[i]) == 0) {
                snprintf(slot, ROUND_DOC_PHASE_MAX, "%s", rd_phases[i]);
                return 0;
            }
        return rd_fail(err, prefix, f->name, "must name a phase");
    case RD_STOP: {
        const char *s = json_string_value(v);
        if (!s || (strcmp(s, "snapshot") != 0 && strcmp(s, "abort") != 0))
            return rd_fail(err, prefix, f->name, "must be \"snapshot\" or \"abort\"");
        *(bool *)slot = strcmp(s, "snapshot") == 0;
        return 0;
    }
    case RD_TEXT: {
        if (!json_is_string(v))
            return rd_fail(err, prefix, f->name, "must be a string");
        size_t n = json_string_length(v);
        if ((int64_t)n > f->max || strlen(json_string_value(v)) != n)
            return rd_fail(err, prefix, f->name, "has a bad length or a NUL byte");
        if (!(*(char **)slot = strdup(json_string_value(v))))
            return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        return 0;
    }
    case RD_MEMBER: {
        char path[GPT_ERR_PATH_MAX];
        snprintf(path, sizeof(path), "%s%s", prefix, f->name);
        int rc = rd_member_decode(v, (struct round_member *)slot, path, err);
        if (rc == 0)
            *(bool *)((char *)base + f->has) = true;
        return rc;
    }
    case RD_MEMBERS:
        return rd_members_decode(f, v, (struct round_members *)slot, prefix, err);
    case RD_ARRAY:
        if (!json_is_array(v))
            return rd_fail(err, prefix, f->name, "must be an array");
        *(json_t **)slot = json_incref((json_t *)v);
        return 0;
    default:
        GPT_ASSERT(!"bad field kind");
    }
    return -EINVAL;
}

static int rd_decode_obj(const struct rd_field *t, size_t n, const json_t *o, void *base,
                         const char *prefix, struct gpt_err *err)
{
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_object_get(o, t[i].name);
        if (v && json_is_null(v) && (t[i].flags & RD_NULL))
            continue;
        if (!v && (t[i].flags & RD_REQ))
            return rd_fail(err, prefix, t[i].name, "is missing");
        int rc = v ? rd_field_decode(&t[i], v, base, prefix, err) : 0;
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- encoding ---- */

static json_t *rd_encode_obj(const struct rd_field *t, size_t n, const void *base);

/* One field's JSON value; NULL when it is absent (left out or null). */
static json_t *rd_field_encode(const struct rd_field *f, const void *base)
{
    const char *slot = (const char *)base + f->off;
    char hex[17];
    switch (f->kind) {
    case RD_STR:
        return slot[0] || ((f->flags & RD_REQ) && !(f->flags & RD_NULL)) ? json_string(slot) : NULL;
    case RD_HEX: {
        uint64_t x = *(const uint64_t *)slot;
        if (!x && !(f->flags & RD_REQ))
            return NULL;
        snprintf(hex, sizeof(hex), "%" PRIx64, x);
        return json_string(hex);
    }
    case RD_I64:
    case RD_INT: {
        int64_t i = f->kind == RD_INT ? *(const int *)slot : *(const int64_t *)slot;
        return i < f->min ? NULL : json_integer((json_int_t)i);
    }
    case RD_REAL:
        return json_real(*(const double *)slot);
    case RD_BOOL:
        return json_boolean(*(const bool *)slot);
    case RD_PHASE:
        return json_string(slot);
    case RD_STOP:
        return json_string(*(const bool *)slot ? "snapshot" : "abort");
    case RD_TEXT:
        return *(char *const *)slot ? json_string(*(char *const *)slot) : NULL;
    case RD_MEMBER:
        return *(const bool *)((const char *)base + f->has)
                   ? rd_encode_obj(rd_member_fields, RD_COUNT(rd_member_fields), slot)
                   : NULL;
    case RD_MEMBERS: {
        const struct round_members *ms = (const struct round_members *)slot;
        if (!ms->present)
            return NULL;
        json_t *a = json_array();
        for (size_t i = 0; a && i < ms->n; i++)
            if (json_array_append_new(a, round_member_to_json(&ms->v[i])) < 0) {
                json_decref(a);
                a = NULL;
            }
        return a;
    }
    case RD_ARRAY:
        return *(json_t *const *)slot ? json_incref(*(json_t *const *)slot) : NULL;
    default:
        GPT_ASSERT(!"bad field kind");
    }
    return NULL;
}

static json_t *rd_encode_obj(const struct rd_field *t, size_t n, const void *base)
{
    json_t *o = json_object();
    for (size_t i = 0; o && i < n; i++) {
        json_t *v = rd_field_encode(&t[i], base);
        if (!v && (t[i].flags & RD_NULL))
            v = json_null();
        /* A required field encodes always; NULL there is ENOMEM. */
        if ((v || (t[i].flags & RD_REQ)) && json_object_set_new(o, t[i].name, v) < 0) {
            json_decref(o);
            o = NULL;
        }
    }
    return o;
}

/* ---- documents ---- */

void round_doc_init(struct round_doc *d)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->phase, sizeof(d->phase), "idle");
    d->uid = -1;
    d->resume_step = -1;
}

void round_doc_done(struct round_doc *d)
{
    if (!d)
        return;
    free(d->spec);
    free(d->nodes.v);
    round_doc_init(d);
}

json_t *round_member_to_json(const struct round_member *m)
{
    return rd_encode_obj(rd_member_fields, RD_COUNT(rd_member_fields), m);
}

json_t *round_doc_to_json(const struct round_doc *d)
{
    return rd_encode_obj(rd_round_fields, RD_COUNT(rd_round_fields), d);
}

/* Parses text as JSON of the wanted type (object or array). */
static json_t *rd_load(const char *text, size_t len, bool array, int *rc, struct gpt_err *err)
{
    if (len > ROUND_DOC_TEXT_MAX) {
        *rc = gpt_err_set(err, -EMSGSIZE, NULL, "round document longer than %u bytes",
                          ROUND_DOC_TEXT_MAX);
        return NULL;
    }
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    if (!root || (array ? !json_is_array(root) : !json_is_object(root))) {
        json_decref(root);
        *rc = gpt_err_set(err, -EBADMSG, NULL, "round document: not a JSON %s",
                          array ? "array" : "object");
        return NULL;
    }
    return root;
}

int round_doc_decode(const char *text, size_t len, struct round_doc *ret, struct gpt_err *err)
{
    int rc = 0;
    round_doc_init(ret);
    json_t *root = rd_load(text, len, false, &rc, err);
    if (!root)
        return rc;
    rc = rd_decode_obj(rd_round_fields, RD_COUNT(rd_round_fields), root, ret, "", err);
    json_decref(root);
    if (rc < 0)
        round_doc_done(ret);
    return rc;
}

json_t *round_nodes_to_json(const struct round_node *rows, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(
                a, rd_encode_obj(rd_node_fields, RD_COUNT(rd_node_fields), &rows[i])) < 0) {
            json_decref(a);
            a = NULL;
        }
    return a;
}

void round_nodes_free(struct round_node *rows, size_t n)
{
    for (size_t i = 0; rows && i < n; i++)
        json_decref(rows[i].gpus);
    free(rows);
}

int round_nodes_decode(const char *text, size_t len, struct round_node **ret, size_t *ret_n,
                       struct gpt_err *err)
{
    int rc = 0;
    json_t *root = rd_load(text, len, true, &rc, err);
    if (!root)
        return rc;
    size_t n = json_array_size(root);
    struct round_node *rows = NULL;
    if (n > ROUND_DOC_MEMBERS_MAX) {
        rc = gpt_err_set(err, -GPT_E_LIMIT, NULL, "round document: more than %d nodes",
                         ROUND_DOC_MEMBERS_MAX);
        goto out;
    }
    if (!(rows = calloc(n ? n : 1, sizeof(*rows)))) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "[%zu].", i);
        const json_t *o = json_array_get(root, i);
        rc = json_is_object(o)
                 ? rd_decode_obj(rd_node_fields, RD_COUNT(rd_node_fields), o, &rows[i], prefix, err)
                 : gpt_err_set(err, -EINVAL, NULL, "round document: [%zu] must be an object", i);
    }
out:
    json_decref(root);
    if (rc < 0) {
        round_nodes_free(rows, n);
        return rc;
    }
    *ret = rows;
    *ret_n = n;
    return 0;
}
