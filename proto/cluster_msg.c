/*
 * cluster_msg: the cluster messages' codec (see cluster_msg.h). One const
 * table says each field's wire name, type, limits and slot in struct
 * cluster_msg; one says which fields each message type takes and which it
 * requires; a third declares a forwarded read's arguments. Pure.
 */
#include "cluster_msg.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

enum cm_kind {
    CM_STR,    /* char[]: byte length in [min, max], no NUL inside */
    CM_HEX,    /* uint64_t as 1..16 lowercase hex digits */
    CM_I64,    /* int64_t in [min, max] */
    CM_INT,    /* int in [min, max] */
    CM_METRIC, /* struct gpt_metric (gpt_record.h; JSON: metric.h) */
    CM_EVENT,  /* struct gpt_event */
    CM_OBJECT, /* json_t *, an object */
    CM_OP,     /* int: a forwarded read's name -> enum gpt_ctl_op */
    CM_ARGS,   /* struct cluster_msg_read_args, an object of cm_args fields */
};

struct cm_field {
    const char *name;
    int kind; /* enum cm_kind */
    int64_t min, max;
    size_t off;
};

#define S(x) offsetof(struct cluster_msg, x)

static const struct cm_field cm_fields[CLUSTER_MSG_F_COUNT] = {
    [CLUSTER_MSG_F_NODE] = {"node", CM_STR, 1, CLUSTER_MSG_NODE_MAX - 1, S(node)},
    [CLUSTER_MSG_F_INC] = {"inc", CM_HEX, 0, 0, S(inc)},
    [CLUSTER_MSG_F_GEN] = {"gen", CM_HEX, 0, 0, S(gen)},
    [CLUSTER_MSG_F_ROUND] = {"round", CM_I64, -1, INT64_MAX, S(round)},
    [CLUSTER_MSG_F_JOB] = {"job", CM_I64, 0, INT64_MAX, S(job)},
    [CLUSTER_MSG_F_SNAP] = {"snap", CM_I64, -1, INT64_MAX, S(snap_step)},
    [CLUSTER_MSG_F_WORKERS] = {"workers", CM_INT, 1, CLUSTER_MSG_WORKERS_MAX, S(workers)},
    [CLUSTER_MSG_F_ADDR] = {"addr", CM_STR, 0, CLUSTER_MSG_ADDR_MAX - 1, S(addr)},
    [CLUSTER_MSG_F_VER] = {"ver", CM_STR, 0, CLUSTER_MSG_VERSION_MAX - 1, S(version)},
    [CLUSTER_MSG_F_DEV] = {"dev", CM_STR, 0, CLUSTER_MSG_DEVICES_MAX - 1, S(devices)},
    [CLUSTER_MSG_F_STATE] = {"state", CM_STR, 0, CLUSTER_MSG_STATE_MAX - 1, S(state)},
    [CLUSTER_MSG_F_EXIT_ROUND] = {"exit_round", CM_I64, -1, INT64_MAX, S(exit_round)},
    [CLUSTER_MSG_F_EXIT_RC] = {"exit_rc", CM_INT, INT32_MIN, INT32_MAX, S(exit_rc)},
    [CLUSTER_MSG_F_EXIT_STEP] = {"exit_step", CM_I64, -1, INT64_MAX, S(exit_step)},
    [CLUSTER_MSG_F_EXIT_MSG] = {"exit_msg", CM_STR, 0, CLUSTER_MSG_EXIT_MSG_MAX - 1, S(exit_msg)},
    [CLUSTER_MSG_F_METRIC] = {"m", CM_METRIC, 0, 0, S(metric)},
    [CLUSTER_MSG_F_EVENT] = {"e", CM_EVENT, 0, 0, S(event)},
    [CLUSTER_MSG_F_REQ] = {"req", CM_I64, 1, INT64_MAX, S(req)},
    [CLUSTER_MSG_F_UID] = {"uid", CM_I64, 0, (int64_t)UINT32_MAX - 1, S(uid)},
    [CLUSTER_MSG_F_PRIO] = {"prio", CM_I64, -CLUSTER_MSG_PRIO_MAX, CLUSTER_MSG_PRIO_MAX,
                            S(priority)},
    [CLUSTER_MSG_F_SPEC] = {"spec", CM_OBJECT, 0, 0, S(spec)},
    [CLUSTER_MSG_F_OP] = {"op", CM_OP, 0, 0, S(op)},
    [CLUSTER_MSG_F_ARGS] = {"args", CM_ARGS, 0, 0, S(args)},
    [CLUSTER_MSG_F_GPU] = {"gpu", CM_STR, 0, CLUSTER_MSG_GPUS_MAX - 1, S(gpus)},
    [CLUSTER_MSG_F_IID] = {"iid", CM_HEX, 0, 0, S(iid)},
    [CLUSTER_MSG_F_SAMPLE] = {"s", CM_OBJECT, 0, 0, S(sample)},
};

#undef S
#define A(x) offsetof(struct cluster_msg_read_args, x)

/* A forwarded read's arguments: all optional, integers. */
static const struct cm_field cm_args[] = {
    {"job", CM_I64, 0, INT64_MAX, A(job)},
    {"uid", CM_I64, 0, (int64_t)UINT32_MAX - 1, A(uid)},
    {"snapshot", CM_I64, 0, INT64_MAX, A(snapshot)},
    {"since", CM_I64, 0, INT64_MAX, A(since)},
    {"after", CM_I64, -1, INT64_MAX, A(after)},
    {"limit", CM_I64, 0, CLUSTER_MSG_READ_LIMIT, A(limit)},
};

#undef A
#define CM_NARGS (sizeof(cm_args) / sizeof(cm_args[0]))
#define B(x)     CLUSTER_MSG_BIT(x)
#define CM_HB_FIELDS                                                                               \
    (B(NODE) | B(INC) | B(GEN) | B(ROUND) | B(JOB) | B(SNAP) | B(WORKERS) | B(ADDR) | B(VER) |     \
     B(DEV) | B(STATE) | B(EXIT_ROUND) | B(EXIT_RC) | B(EXIT_STEP) | B(EXIT_MSG) | B(GPU) |        \
     B(IID))

static const struct cm_type {
    const char *name;
    uint32_t allowed;
    uint32_t required;
} cm_types[CLUSTER_MSG_TYPE_COUNT] = {
    [CLUSTER_MSG_HB] = {"hb", CM_HB_FIELDS, B(NODE) | B(INC)},
    [CLUSTER_MSG_JOIN] = {"join", CM_HB_FIELDS, B(NODE) | B(INC)},
    [CLUSTER_MSG_LEAVE] = {"leave", B(NODE) | B(INC), B(NODE) | B(INC)},
    [CLUSTER_MSG_METRIC] = {"metric", B(JOB) | B(NODE) | B(METRIC), B(JOB) | B(NODE) | B(METRIC)},
    [CLUSTER_MSG_EVENT] = {"event", B(JOB) | B(NODE) | B(EVENT), B(JOB) | B(NODE) | B(EVENT)},
    [CLUSTER_MSG_SUBMIT] = {"submit", B(NODE) | B(INC) | B(REQ) | B(UID) | B(PRIO) | B(SPEC),
                            B(NODE) | B(INC) | B(REQ) | B(UID) | B(SPEC)},
    [CLUSTER_MSG_READ] = {"read", B(NODE) | B(INC) | B(REQ) | B(OP) | B(ARGS),
                          B(NODE) | B(INC) | B(REQ) | B(OP)},
    [CLUSTER_MSG_SAMPLE] = {"sample", B(JOB) | B(NODE) | B(SAMPLE), B(JOB) | B(NODE) | B(SAMPLE)},
};

#undef B

/* The reads a member forwards, by the control op whose answer they give. */
static const struct cm_read {
    int op; /* enum gpt_ctl_op */
    const char *name;
} cm_reads[] = {
    {GPT_CTL_OP_LIST, "list"},           {GPT_CTL_OP_STATUS, "status"},
    {GPT_CTL_OP_SNAPSHOTS, "snapshots"}, {GPT_CTL_OP_LOGS, "history"},
    {GPT_CTL_OP_CANCEL, "cancel"},       {GPT_CTL_OP_RESUME, "resume"},
    {GPT_CTL_OP_SAMPLE, "locate"},       {GPT_CTL_OP_SAMPLES, "samples"},
};

#define CM_NREADS (sizeof(cm_reads) / sizeof(cm_reads[0]))

const char *cluster_msg_type_name(int type)
{
    return type >= 0 && type < CLUSTER_MSG_TYPE_COUNT ? cm_types[type].name : NULL;
}

int cluster_msg_type_lookup(const char *name)
{
    for (int i = 0; i < CLUSTER_MSG_TYPE_COUNT; i++)
        if (strcmp(cm_types[i].name, name) == 0)
            return i;
    return -1;
}

const char *cluster_msg_field_name(int field)
{
    return field >= 0 && field < CLUSTER_MSG_F_COUNT ? cm_fields[field].name : NULL;
}

const char *cluster_msg_read_name(int op)
{
    for (size_t i = 0; i < CM_NREADS; i++)
        if (cm_reads[i].op == op)
            return cm_reads[i].name;
    return NULL;
}

int cluster_msg_read_op(const char *name)
{
    for (size_t i = 0; i < CM_NREADS; i++)
        if (strcmp(cm_reads[i].name, name) == 0)
            return cm_reads[i].op;
    return -1;
}

void cluster_msg_init(struct cluster_msg *m, int type)
{
    memset(m, 0, sizeof(*m));
    m->type = type;
    m->round = -1;
    m->snap_step = -1;
    m->workers = 1;
    m->exit_round = -1;
    m->op = -1;
    m->args.uid = -1;
}

void cluster_msg_done(struct cluster_msg *m)
{
    if (!m)
        return;
    json_decref(m->spec);
    m->spec = NULL;
    json_decref(m->sample);
    m->sample = NULL;
}

/* ---- one field ---- */

int cluster_msg_hex_parse(const char *s, size_t n, uint64_t *ret)
{
    if (n == 0 || n > 16)
        return -EINVAL;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0)
            return -EINVAL;
        v = v << 4 | (uint64_t)d;
    }
    *ret = v;
    return 0;
}

static int cm_range(const struct cm_field *f, int64_t i, const char *prefix, struct gpt_err *err)
{
    if (i < f->min || i > f->max)
        return gpt_err_set(err, -EINVAL, f->name, "%s%s must be between %" PRId64 " and %" PRId64,
                           prefix, f->name, f->min, f->max);
    return 0;
}

static int cm_args_decode(const json_t *v, struct cluster_msg_read_args *a, struct gpt_err *err);

/* Checks one value against its field and stores it at base + f->off. */
static int cm_field_decode(const struct cm_field *f, const json_t *v, void *base,
                           const char *prefix, struct gpt_err *err)
{
    char *slot = (char *)base + f->off;
    switch (f->kind) {
    case CM_STR: {
        if (!json_is_string(v))
            return gpt_err_set(err, -EINVAL, f->name, "%s%s must be a string", prefix, f->name);
        size_t n = json_string_length(v);
        if ((int64_t)n > f->max)
            return gpt_err_set(err, -EINVAL, f->name, "%s%s is longer than %" PRId64 " bytes",
                               prefix, f->name, f->max);
        if ((int64_t)n < f->min)
            return gpt_err_set(err, -EINVAL, f->name, "%s%s must not be empty", prefix, f->name);
        if (strlen(json_string_value(v)) != n)
            return gpt_err_set(err, -EINVAL, f->name, "%s%s contains a NUL byte", prefix, f->name);
        memcpy(slot, json_string_value(v), n + 1);
        return 0;
    }
    case CM_HEX:
        if (!json_is_string(v) || cluster_msg_hex_parse(json_string_value(v), json_string_length(v),
                                                        (uint64_t *)slot) < 0)
            return gpt_err_set(err, -EINVAL, f->name, "%s%s must be 1 to 16 lowercase hex digits",
                               prefix, f->name);
        return 0;
    case CM_I64:
    case CM_INT: {
        if (!json_is_integer(v))
            return gpt_err_set(err, -EINVAL, f->name, "%s%s must be an integer", prefix, f->name);
        int64_t i = json_integer_value(v);
        int rc = cm_range(f, i, prefix, err);
        if (rc < 0)
            return rc;
        if (f->kind == CM_INT)
            *(int *)slot = (int)i;
        else
            *(int64_t *)slot = i;
        return 0;
    }
    case CM_METRIC:
    case CM_EVENT: {
        struct gpt_err e;
        gpt_err_clear(&e);
        int rc = f->kind == CM_METRIC ? gpt_metric_from_json(v, (struct gpt_metric *)slot, &e)
                                      : gpt_event_from_json(v, (struct gpt_event *)slot, &e);
        if (rc < 0) {
            char path[GPT_ERR_PATH_MAX];
            int w =
                snprintf(path, sizeof(path), "%s%s%.100s", f->name, e.path[0] ? "." : "", e.path);
            (void)w;
            return gpt_err_set(err, -EINVAL, path, "%s%s: %s", prefix, path, e.msg);
        }
        return 0;
    }
    case CM_OBJECT:
        if (!json_is_object(v))
            return gpt_err_set(err, -EINVAL, f->name, "%s%s must be an object", prefix, f->name);
        *(json_t **)slot = json_incref((json_t *)v);
        return 0;
    case CM_OP: {
        int op = json_is_string(v) ? cluster_msg_read_op(json_string_value(v)) : -1;
        if (op < 0)
            return gpt_err_set(err, -EINVAL, f->name, "%s%s must name a forwarded read", prefix,
                               f->name);
        *(int *)slot = op;
        return 0;
    }
    case CM_ARGS:
        return cm_args_decode(v, (struct cluster_msg_read_args *)slot, err);
    default:
        GPT_ASSERT(!"bad field kind");
    }
    return -EINVAL;
}

static int cm_args_decode(const json_t *v, struct cluster_msg_read_args *a, struct gpt_err *err)
{
    if (!json_is_object(v))
        return gpt_err_set(err, -EINVAL, "args", "args must be an object");
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)v, key, val)
    {
        size_t i = 0;
        while (i < CM_NARGS && strcmp(cm_args[i].name, key) != 0)
            i++;
        if (i == CM_NARGS)
            return gpt_err_set(err, -EINVAL, "args", "args: unknown field \"%.64s\"", key);
        int rc = cm_field_decode(&cm_args[i], val, a, "args.", err);
        if (rc < 0) {
            if (err && rc == -EINVAL)
                snprintf(err->path, sizeof(err->path), "args.%s", cm_args[i].name);
            return rc;
        }
    }
    return 0;
}

/* ---- messages ---- */

int cluster_msg_decode(const char *line, size_t len, struct cluster_msg *ret, struct gpt_err *err)
{
    cluster_msg_init(ret, -1);
    if (len > CLUSTER_MSG_LINE_MAX)
        return gpt_err_set(err, -EMSGSIZE, NULL, "message longer than %u bytes",
                           CLUSTER_MSG_LINE_MAX);
    json_error_t jerr;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    int rc = 0;
    if (!root || !json_is_object(root)) {
        rc = gpt_err_set(err, -EBADMSG, NULL, "not a JSON object");
        goto out;
    }
    const json_t *t = json_object_get(root, "t");
    int type = json_is_string(t) ? cluster_msg_type_lookup(json_string_value(t)) : -1;
    if (type < 0) {
        rc = gpt_err_set(err, -EINVAL, "t", "t must name a message type");
        goto out;
    }
    ret->type = type;
    const struct cm_type *ti = &cm_types[type];
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "t") == 0)
            continue;
        int f = 0;
        while (f < CLUSTER_MSG_F_COUNT && strcmp(cm_fields[f].name, key) != 0)
            f++;
        if (f == CLUSTER_MSG_F_COUNT || !(ti->allowed & (1u << f))) {
            rc = gpt_err_set(err, -EINVAL, key, "%s: unknown field \"%.64s\"", ti->name, key);
            goto out;
        }
        if ((rc = cm_field_decode(&cm_fields[f], v, ret, "", err)) < 0)
            goto out;
        ret->present |= 1u << f;
    }
    uint32_t missing = ti->required & ~ret->present;
    if (missing) {
        int f = __builtin_ctz(missing);
        rc = gpt_err_set(err, -EINVAL, cm_fields[f].name, "%s: %s is missing", ti->name,
                         cm_fields[f].name);
    }
out:
    json_decref(root);
    return rc;
}

static int cm_field_encode(const struct cm_field *f, const void *base, const char *prefix,
                           json_t **ret, struct gpt_err *err);

static int cm_args_encode(const struct cluster_msg_read_args *a, json_t **ret, struct gpt_err *err)
{
    json_t *o = json_object();
    if (!o)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    for (size_t i = 0; i < CM_NARGS; i++) {
        int64_t v = *(const int64_t *)((const char *)a + cm_args[i].off);
        if (v == (strcmp(cm_args[i].name, "uid") == 0 ? -1 : 0))
            continue; /* the default: absent */
        json_t *j = NULL;
        int rc = cm_field_encode(&cm_args[i], a, "args.", &j, err);
        if (rc == 0 && json_object_set_new(o, cm_args[i].name, j) < 0)
            rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        if (rc < 0) {
            if (err && rc == -EINVAL)
                snprintf(err->path, sizeof(err->path), "args.%s", cm_args[i].name);
            json_decref(o);
            return rc;
        }
    }
    *ret = o;
    return 0;
}

/* *ret gets the JSON value of one field (new), checked as decode checks
 * it: -EINVAL naming the field, or -ENOMEM. */
static int cm_field_encode(const struct cm_field *f, const void *base, const char *prefix,
                           json_t **ret, struct gpt_err *err)
{
    const char *slot = (const char *)base + f->off;
    json_t *v = NULL;
    switch (f->kind) {
    case CM_STR: {
        size_t n = strnlen(slot, (size_t)f->max + 1);
        if ((int64_t)n > f->max || (int64_t)n < f->min)
            return gpt_err_set(err, -EINVAL, f->name,
                               "%s%s must be %" PRId64 " to %" PRId64 " bytes", prefix, f->name,
                               f->min, f->max);
        v = json_stringn(slot, n);
        break;
    }
    case CM_HEX: {
        char hex[17];
        snprintf(hex, sizeof(hex), "%" PRIx64, *(const uint64_t *)slot);
        v = json_string(hex);
        break;
    }
    case CM_I64:
    case CM_INT: {
        int64_t i = f->kind == CM_INT ? *(const int *)slot : *(const int64_t *)slot;
        int rc = cm_range(f, i, prefix, err);
        if (rc < 0)
            return rc;
        v = json_integer(i);
        break;
    }
    case CM_METRIC:
        v = gpt_metric_to_json((const struct gpt_metric *)slot);
        break;
    case CM_EVENT:
        v = gpt_event_to_json((const struct gpt_event *)slot);
        break;
    case CM_OBJECT: {
        json_t *o = *(json_t *const *)slot;
        if (!json_is_object(o))
            return gpt_err_set(err, -EINVAL, f->name, "%s%s must be an object", prefix, f->name);
        v = json_incref(o);
        break;
    }
    case CM_OP: {
        const char *name = cluster_msg_read_name(*(const int *)slot);
        if (!name)
            return gpt_err_set(err, -EINVAL, f->name, "%s%s: control op %d is not forwarded",
                               prefix, f->name, *(const int *)slot);
        v = json_string(name);
        break;
    }
    case CM_ARGS:
        return cm_args_encode((const struct cluster_msg_read_args *)slot, ret, err);
    default:
        GPT_ASSERT(!"bad field kind");
    }
    if (!v)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    *ret = v;
    return 0;
}

int cluster_msg_encode(const struct cluster_msg *m, char **ret_line, size_t *ret_len,
                       struct gpt_err *err)
{
    if (m->type < 0 || m->type >= CLUSTER_MSG_TYPE_COUNT)
        return gpt_err_set(err, -EINVAL, "t", "message type %d unknown", m->type);
    const struct cm_type *ti = &cm_types[m->type];
    uint32_t fields = (m->present & ti->allowed) | ti->required;
    json_t *o = json_pack("{s:s}", "t", ti->name);
    int rc = 0;
    if (!o)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    for (int f = 0; f < CLUSTER_MSG_F_COUNT; f++) {
        if (!(fields & (1u << f)))
            continue;
        json_t *v = NULL;
        if ((rc = cm_field_encode(&cm_fields[f], m, "", &v, err)) < 0)
            goto out;
        if (json_object_set_new(o, cm_fields[f].name, v) < 0) {
            rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
            goto out;
        }
    }
    char *line = json_dumps(o, JSON_COMPACT);
    if (!line) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        goto out;
    }
    size_t n = strlen(line);
    if (n > CLUSTER_MSG_LINE_MAX) {
        free(line);
        rc =
            gpt_err_set(err, -EMSGSIZE, NULL, "message longer than %u bytes", CLUSTER_MSG_LINE_MAX);
        goto out;
    }
    *ret_line = line;
    *ret_len = n;
out:
    json_decref(o);
    return rc;
}

/* ---- replies ---- */

void cluster_msg_reply_done(struct cluster_msg_reply *r)
{
    if (!r)
        return;
    json_decref(r->result);
    r->result = NULL;
}

static int cm_reply_str(const json_t *v, const char *name, char *dst, size_t cap,
                        struct gpt_err *err)
{
    if (!json_is_string(v))
        return gpt_err_set(err, -EINVAL, name, "%s must be a string", name);
    size_t n = json_string_length(v);
    if (n >= cap)
        return gpt_err_set(err, -EINVAL, name, "%s is longer than %zu bytes", name, cap - 1);
    if (strlen(json_string_value(v)) != n)
        return gpt_err_set(err, -EINVAL, name, "%s contains a NUL byte", name);
    memcpy(dst, json_string_value(v), n + 1);
    return 0;
}

int cluster_msg_reply_decode(const char *text, size_t len, struct cluster_msg_reply *ret,
                             struct gpt_err *err)
{
    memset(ret, 0, sizeof(*ret));
    if (len > CLUSTER_MSG_LINE_MAX)
        return gpt_err_set(err, -EMSGSIZE, NULL, "reply longer than %u bytes",
                           CLUSTER_MSG_LINE_MAX);
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    int rc = 0;
    if (!root || !json_is_object(root)) {
        rc = gpt_err_set(err, -EBADMSG, NULL, "not a JSON object");
        goto out;
    }
    const json_t *ok = json_object_get(root, "ok");
    if (!json_is_boolean(ok)) {
        rc = gpt_err_set(err, -EINVAL, "ok", "ok must be true or false");
        goto out;
    }
    ret->ok = json_is_true(ok);
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "ok") == 0)
            continue;
        if (ret->ok && strcmp(key, "job") == 0) {
            if (!json_is_integer(v) || json_integer_value(v) < 0) {
                rc = gpt_err_set(err, -EINVAL, "job", "job must be an integer >= 0");
                goto out;
            }
            ret->job = json_integer_value(v);
        } else if (ret->ok && strcmp(key, "r") == 0) {
            if (!json_is_object(v)) {
                rc = gpt_err_set(err, -EINVAL, "r", "r must be an object");
                goto out;
            }
            ret->result = json_incref(v);
        } else if (!ret->ok && strcmp(key, "code") == 0) {
            if (!json_is_integer(v) || json_integer_value(v) >= 0 ||
                json_integer_value(v) < INT32_MIN) {
                rc = gpt_err_set(err, -EINVAL, "code", "code must be a negative error code");
                goto out;
            }
            ret->code = (int)json_integer_value(v);
        } else if (!ret->ok && strcmp(key, "message") == 0) {
            if ((rc = cm_reply_str(v, "message", ret->message, sizeof(ret->message), err)) < 0)
                goto out;
        } else if (!ret->ok && strcmp(key, "path") == 0) {
            if ((rc = cm_reply_str(v, "path", ret->path, sizeof(ret->path), err)) < 0)
                goto out;
        } else {
            rc = gpt_err_set(err, -EINVAL, key, "reply: unknown field \"%.64s\"", key);
            goto out;
        }
    }
    if (!ret->ok && ret->code == 0)
        rc = gpt_err_set(err, -EINVAL, "code", "reply: code is missing");
out:
    if (rc < 0)
        cluster_msg_reply_done(ret);
    json_decref(root);
    return rc;
}

int cluster_msg_reply_encode(const struct cluster_msg_reply *r, char **ret_text, size_t *ret_len,
                             struct gpt_err *err)
{
    json_t *o;
    if (r->ok) {
        if (r->result && !json_is_object(r->result))
            return gpt_err_set(err, -EINVAL, "r", "r must be an object");
        if (r->job < 0)
            return gpt_err_set(err, -EINVAL, "job", "job must be an integer >= 0");
        o = json_pack("{s:b, s:I}", "ok", 1, "job", (json_int_t)r->job);
        if (o && r->result)
            json_object_set(o, "r", r->result);
    } else {
        if (r->code >= 0)
            return gpt_err_set(err, -EINVAL, "code", "code must be a negative error code");
        if (strnlen(r->message, sizeof(r->message)) == sizeof(r->message) ||
            strnlen(r->path, sizeof(r->path)) == sizeof(r->path))
            return gpt_err_set(err, -EINVAL, "message", "message or path unterminated");
        o = json_pack("{s:b, s:i, s:s, s:s}", "ok", 0, "code", r->code, "message", r->message,
                      "path", r->path);
    }
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    *ret_text = text;
    *ret_len = strlen(text);
    return 0;
}

int cluster_msg_reply_key(char *buf, size_t cap, const char *node, uint64_t inc, int64_t req)
{
    size_t n = strnlen(node, CLUSTER_MSG_NODE_MAX);
    if (n == 0 || n >= CLUSTER_MSG_NODE_MAX || memchr(node, '/', n))
        return -EINVAL;
    int w = snprintf(buf, cap, "c/reply/%s/%" PRIx64 "/%" PRId64, node, inc, req);
    return w < 0 || (size_t)w >= cap ? -ENAMETOOLONG : 0;
}

/* ---- the feed ---- */

json_t *cluster_msg_feed_rec_new(uint64_t seq, int64_t job, json_t *rec)
{
    if (!json_is_object(rec) || seq == 0 || seq > INT64_MAX || job < 0) {
        json_decref(rec);
        return NULL;
    }
    return json_pack("{s:I, s:I, s:o}", "s", (json_int_t)seq, "j", (json_int_t)job, "r", rec);
}

int cluster_msg_feed_encode(const json_t *recs, char **ret_text, size_t *ret_len,
                            struct gpt_err *err)
{
    if (!json_is_array(recs) || json_array_size(recs) > CLUSTER_MSG_FEED_RECS)
        return gpt_err_set(err, -EINVAL, "recs", "recs must be an array of at most %d records",
                           CLUSTER_MSG_FEED_RECS);
    json_t *o = json_pack("{s:O}", "recs", (json_t *)recs);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    *ret_text = text;
    *ret_len = strlen(text);
    return 0;
}

void cluster_msg_feed_done(struct cluster_msg_feed *f)
{
    if (!f)
        return;
    json_decref(f->root);
    f->root = NULL;
    f->n = 0;
}

int cluster_msg_feed_decode(const char *text, size_t len, struct cluster_msg_feed *ret,
                            struct gpt_err *err)
{
    ret->root = NULL;
    ret->n = 0;
    if (len > CLUSTER_MSG_LINE_MAX)
        return gpt_err_set(err, -EMSGSIZE, NULL, "feed chunk longer than %u bytes",
                           CLUSTER_MSG_LINE_MAX);
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    int rc = 0;
    if (!root || !json_is_object(root)) {
        rc = gpt_err_set(err, -EBADMSG, NULL, "not a JSON object");
        goto fail;
    }
    const json_t *recs = json_object_get(root, "recs");
    if (json_object_size(root) != 1 || !json_is_array(recs)) {
        rc = gpt_err_set(err, -EINVAL, "recs", "a feed chunk is {\"recs\": [...]} alone");
        goto fail;
    }
    if (json_array_size(recs) > CLUSTER_MSG_FEED_RECS) {
        rc = gpt_err_set(err, -EINVAL, "recs", "recs holds more than %d records",
                         CLUSTER_MSG_FEED_RECS);
        goto fail;
    }
    size_t i;
    const json_t *e;
    json_array_foreach(recs, i, e)
    {
        const json_t *s = json_object_get(e, "s"), *j = json_object_get(e, "j");
        const json_t *r = json_object_get(e, "r");
        char path[32];
        snprintf(path, sizeof(path), "recs[%zu]", i);
        if (!json_is_object(e) || json_object_size(e) != 3 || !r) {
            rc = gpt_err_set(err, -EINVAL, path, "%s must be {\"s\", \"j\", \"r\"}", path);
            goto fail;
        }
        if (!json_is_integer(s) || json_integer_value(s) < 1) {
            rc = gpt_err_set(err, -EINVAL, path, "%s.s must be an integer >= 1", path);
            goto fail;
        }
        if (!json_is_integer(j) || json_integer_value(j) < 0) {
            rc = gpt_err_set(err, -EINVAL, path, "%s.j must be an integer >= 0", path);
            goto fail;
        }
        if (!json_is_object(r)) {
            rc = gpt_err_set(err, -EINVAL, path, "%s.r must be an object", path);
            goto fail;
        }
        ret->recs[i].seq = (uint64_t)json_integer_value(s);
        ret->recs[i].job = json_integer_value(j);
        ret->recs[i].rec = r;
    }
    ret->root = root;
    ret->n = json_array_size(recs);
    return 0;
fail:
    json_decref(root);
    return rc;
}

int cluster_msg_feed_head_encode(char *buf, size_t cap, uint64_t gen, int64_t head)
{
    int w = snprintf(buf, cap, "%" PRIx64 ":%" PRId64, gen, head);
    return w < 0 || (size_t)w >= cap ? -ENAMETOOLONG : 0;
}

int cluster_msg_feed_head_decode(const char *text, size_t len, uint64_t *ret_gen, int64_t *ret_head,
                                 struct gpt_err *err)
{
    const char *colon = memchr(text, ':', len);
    uint64_t gen;
    if (!colon || cluster_msg_hex_parse(text, (size_t)(colon - text), &gen) < 0)
        return gpt_err_set(err, -EINVAL, "head", "feed head: GEN must be 1 to 16 hex digits");
    const char *p = colon + 1;
    size_t n = len - (size_t)(p - text);
    if (n == 0 || n > 18)
        return gpt_err_set(err, -EINVAL, "head", "feed head: N must be 1 to 18 digits");
    int64_t head = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return gpt_err_set(err, -EINVAL, "head", "feed head: N must be decimal digits");
        head = head * 10 + (p[i] - '0');
    }
    *ret_gen = gen;
    *ret_head = head;
    return 0;
}
