/*
 * ctl: control-line codec (see ctl.h). One const table says which fields
 * each op takes and which it requires; one const table says each field's
 * name, JSON type and range. Pure.
 */
#define _GNU_SOURCE /* memrchr */
#include "ctl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum ctl_type { CTL_T_OBJECT, CTL_T_INT, CTL_T_BOOL, CTL_T_NUMBER, CTL_T_STRING };

static const struct ctl_field_info {
    const char *name;
    int type;         /* enum ctl_type */
    int64_t min, max; /* integers: inclusive range; strings: byte length range */
} ctl_fields[GPT_CTL_F_COUNT] = {
    [GPT_CTL_F_SPEC] = {"spec", CTL_T_OBJECT, 0, 0},
    [GPT_CTL_F_JOB] = {"job", CTL_T_INT, 1, INT64_MAX},
    [GPT_CTL_F_PRIORITY] = {"priority", CTL_T_INT, -1000000, 1000000},
    [GPT_CTL_F_FOLLOW] = {"follow", CTL_T_BOOL, 0, 0},
    [GPT_CTL_F_SINCE] = {"since", CTL_T_INT, 0, INT64_MAX},
    [GPT_CTL_F_SNAPSHOT] = {"snapshot", CTL_T_INT, 1, INT64_MAX},
    [GPT_CTL_F_PROMPT] = {"prompt", CTL_T_STRING, 0, GPT_CTL_PROMPT_MAX},
    [GPT_CTL_F_TOKENS] = {"tokens", CTL_T_INT, 1, 1000000},
    [GPT_CTL_F_TEMPERATURE] = {"temperature", CTL_T_NUMBER, 0, 0},
    [GPT_CTL_F_TOP_K] = {"top_k", CTL_T_INT, 0, 1000000},
};

#define F(x) (1u << GPT_CTL_F_##x)

static const struct ctl_op_info {
    const char *name;
    uint32_t allowed;
    uint32_t required;
} ctl_ops[GPT_CTL_OP_COUNT] = {
    [GPT_CTL_OP_SUBMIT] = {"submit", F(SPEC) | F(PRIORITY), F(SPEC)},
    [GPT_CTL_OP_VALIDATE] = {"validate", F(SPEC), F(SPEC)},
    [GPT_CTL_OP_LIST] = {"list", 0, 0},
    [GPT_CTL_OP_STATUS] = {"status", F(JOB), 0},
    [GPT_CTL_OP_LOGS] = {"logs", F(JOB) | F(FOLLOW) | F(SINCE), F(JOB)},
    [GPT_CTL_OP_CANCEL] = {"cancel", F(JOB), F(JOB)},
    [GPT_CTL_OP_RESUME] = {"resume", F(JOB) | F(SNAPSHOT), F(JOB)},
    [GPT_CTL_OP_SNAPSHOTS] = {"snapshots", F(JOB), F(JOB)},
    [GPT_CTL_OP_SAMPLE] = {"sample",
                           F(JOB) | F(SNAPSHOT) | F(PROMPT) | F(TOKENS) | F(TEMPERATURE) | F(TOP_K),
                           F(JOB) | F(PROMPT)},
    [GPT_CTL_OP_NODES] = {"nodes", 0, 0},
    [GPT_CTL_OP_PING] = {"ping", 0, 0},
};

#undef F

const char *gpt_ctl_op_name(int op)
{
    if (op < 0 || op >= GPT_CTL_OP_COUNT)
        return NULL;
    return ctl_ops[op].name;
}

int gpt_ctl_op_lookup(const char *name)
{
    for (int i = 0; i < GPT_CTL_OP_COUNT; i++)
        if (strcmp(ctl_ops[i].name, name) == 0)
            return i;
    return -1;
}

static int ctl_field_lookup(const char *name)
{
    for (int i = 0; i < GPT_CTL_F_COUNT; i++)
        if (strcmp(ctl_fields[i].name, name) == 0)
            return i;
    return -1;
}

/* Stores one field's value into the request after checking its type. */
static int ctl_field_decode(struct gpt_ctl_request *req, int f, json_t *v, struct gpt_err *err)
{
    const struct ctl_field_info *fi = &ctl_fields[f];
    int64_t i = 0;
    switch (fi->type) {
    case CTL_T_OBJECT:
        if (!json_is_object(v))
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, fi->name, "must be an object");
        req->spec = v;
        break;
    case CTL_T_BOOL:
        if (!json_is_boolean(v))
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, fi->name, "must be true or false");
        req->follow = json_is_true(v);
        break;
    case CTL_T_NUMBER: {
        if (!json_is_number(v))
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, fi->name, "must be a number");
        double d = json_number_value(v);
        if (!isfinite(d) || d <= 0 || d > 100)
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, fi->name, "must be in (0, 100]");
        req->temperature = d;
        break;
    }
    case CTL_T_STRING: {
        if (!json_is_string(v))
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, fi->name, "must be a string");
        size_t n = json_string_length(v);
        if ((int64_t)n > fi->max)
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, fi->name, "longer than %lld bytes",
                               (long long)fi->max);
        if (strlen(json_string_value(v)) != n)
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, fi->name, "contains a NUL byte");
        req->prompt = json_string_value(v);
        break;
    }
    case CTL_T_INT:
        if (!json_is_integer(v))
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, fi->name, "must be an integer");
        i = json_integer_value(v);
        if (i < fi->min || i > fi->max)
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, fi->name, "must be between %lld and %lld",
                               (long long)fi->min, (long long)fi->max);
        switch (f) {
        case GPT_CTL_F_JOB:
            req->job = i;
            break;
        case GPT_CTL_F_PRIORITY:
            req->priority = i;
            break;
        case GPT_CTL_F_SINCE:
            req->since = i;
            break;
        case GPT_CTL_F_SNAPSHOT:
            req->snapshot = i;
            break;
        case GPT_CTL_F_TOKENS:
            req->tokens = i;
            break;
        case GPT_CTL_F_TOP_K:
            req->top_k = i;
            break;
        default:
            GPT_ASSERT(!"integer field without a slot");
        }
        break;
    default:
        GPT_ASSERT(!"bad field type");
    }
    req->present |= 1u << f;
    return 0;
}

/* Reads the id: absent -> null; a non-negative integer or a short string. */
static int ctl_id_decode(struct gpt_ctl_request *req, json_t *id, struct gpt_err *err)
{
    if (!id)
        return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, "id", "missing");
    if (json_is_integer(id) && json_integer_value(id) >= 0) {
        json_decref(req->id);
        req->id = json_incref(id);
        return 0;
    }
    if (json_is_string(id) && json_string_length(id) <= GPT_CTL_ID_MAX &&
        strlen(json_string_value(id)) == json_string_length(id)) {
        json_decref(req->id);
        req->id = json_incref(id);
        return 0;
    }
    return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, "id",
                       "must be a non-negative integer or a string of at most %d bytes",
                       GPT_CTL_ID_MAX);
}

int gpt_ctl_request_decode(const char *line, size_t len, struct gpt_ctl_request *ret,
                           struct gpt_err *err)
{
    memset(ret, 0, sizeof(*ret));
    ret->op = -1;
    ret->id = json_null();
    if (len > GPT_CTL_LINE_MAX)
        return gpt_err_set(err, GPT_CTL_E_TOO_LONG, NULL, "request longer than %u bytes",
                           GPT_CTL_LINE_MAX);

    json_error_t jerr;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return gpt_err_set(err, GPT_CTL_E_BAD_JSON, NULL, "not JSON: %s (column %d)", jerr.text,
                           jerr.column);
    ret->root = root;
    if (!json_is_object(root))
        return gpt_err_set(err, GPT_CTL_E_BAD_JSON, NULL, "a request must be a JSON object");

    /* The id first, so every later error can be answered with it. */
    int rc = ctl_id_decode(ret, json_object_get(root, "id"), err);
    if (rc < 0)
        return rc;

    json_t *op = json_object_get(root, "op");
    if (!op)
        return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, "op", "missing");
    if (!json_is_string(op))
        return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, "op", "must be a string");
    ret->op = gpt_ctl_op_lookup(json_string_value(op));
    if (ret->op < 0)
        return gpt_err_set(err, GPT_CTL_E_UNKNOWN_OP, "op", "unknown op \"%.64s\"",
                           json_string_value(op));
    const struct ctl_op_info *oi = &ctl_ops[ret->op];

    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "id") == 0 || strcmp(key, "op") == 0)
            continue;
        int f = ctl_field_lookup(key);
        if (f < 0 || !(oi->allowed & (1u << f)))
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, key, "unknown field for op %s", oi->name);
        rc = ctl_field_decode(ret, f, v, err);
        if (rc < 0)
            return rc;
    }
    uint32_t missing = oi->required & ~ret->present;
    if (missing) {
        int f = __builtin_ctz(missing);
        return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, ctl_fields[f].name, "missing (op %s)",
                           oi->name);
    }
    return 0;
}

void gpt_ctl_request_done(struct gpt_ctl_request *req)
{
    if (!req)
        return;
    json_decref(req->id);
    json_decref(req->root);
    memset(req, 0, sizeof(*req));
    req->op = -1;
}

char *gpt_ctl_line_encode(const json_t *obj, size_t *ret_len)
{
    char *s = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(15));
    if (!s)
        return NULL;
    size_t n = strlen(s);
    char *line = realloc(s, n + 2);
    if (!line) {
        free(s);
        return NULL;
    }
    line[n] = '\n';
    line[n + 1] = '\0';
    if (ret_len)
        *ret_len = n + 1;
    return line;
}

/* {"id": id, "ok": ok} with the id copied (NULL -> null). */
static json_t *ctl_reply_base(const json_t *id, bool ok)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_t *idc = id ? json_deep_copy(id) : json_null();
    if (json_object_set_new(o, "id", idc) || json_object_set_new(o, "ok", json_boolean(ok))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *gpt_ctl_reply_ok(const json_t *id, json_t *result, size_t *ret_len)
{
    char *line = NULL;
    json_t *o = ctl_reply_base(id, true);
    if (!o)
        goto out;
    if (result) {
        /* The reply's own keys win over a result that happens to carry them. */
        json_object_del(result, "id");
        json_object_del(result, "ok");
        if (json_object_update(o, result))
            goto out;
    }
    line = gpt_ctl_line_encode(o, ret_len);
out:
    json_decref(o);
    json_decref(result);
    return line;
}

char *gpt_ctl_reply_error(const json_t *id, const char *code, const char *message, const char *path,
                          size_t *ret_len)
{
    char *line = NULL;
    json_t *o = ctl_reply_base(id, false);
    json_t *e = json_object();
    if (!o || !e)
        goto out;
    /* Messages may quote user bytes: keep them valid UTF-8 for JSON. */
    json_t *msg = json_string(message ? message : "");
    if (!msg)
        msg = json_string("(message not valid UTF-8)");
    if (json_object_set_new(e, "code", json_string(code)) || json_object_set_new(e, "message", msg))
        goto out;
    if (path && path[0]) {
        json_t *p = json_string(path);
        if (json_object_set_new(e, "path", p ? p : json_string("?")))
            goto out;
    }
    if (json_object_set(o, "error", e))
        goto out;
    line = gpt_ctl_line_encode(o, ret_len);
out:
    json_decref(e);
    json_decref(o);
    return line;
}

char *gpt_ctl_reply_from_err(const json_t *id, int rc, const struct gpt_err *err, size_t *ret_len)
{
    const char *msg = err && err->msg[0] ? err->msg : gpt_strerror(rc);
    return gpt_ctl_reply_error(id, gpt_ctl_errname(rc), msg, err ? err->path : NULL, ret_len);
}

const char *gpt_ctl_errname(int rc)
{
    switch (rc) {
    case GPT_CTL_E_TOO_LONG:
        return "line_too_long";
    case GPT_CTL_E_BAD_JSON:
        return "bad_json";
    case GPT_CTL_E_UNKNOWN_OP:
        return "unknown_op";
    case GPT_CTL_E_BAD_FIELD:
        return "bad_request";
    case -EALREADY:
        return "bad_state"; /* the job is not in a state that allows it */
    default:
        return gpt_errname(rc);
    }
}

json_t *gpt_ctl_request_new(int op, int64_t id)
{
    const char *name = gpt_ctl_op_name(op);
    GPT_ASSERT(name);
    json_t *o = json_object();
    if (!o)
        return NULL;
    if (json_object_set_new(o, "id", json_integer(id)) ||
        json_object_set_new(o, "op", json_string(name))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

void gpt_ctl_linebuf_init(struct gpt_ctl_linebuf *lb, size_t max)
{
    memset(lb, 0, sizeof(*lb));
    lb->max = max;
}

void gpt_ctl_linebuf_done(struct gpt_ctl_linebuf *lb)
{
    if (!lb)
        return;
    free(lb->buf);
    memset(lb, 0, sizeof(*lb));
}

size_t gpt_ctl_linebuf_pending(const struct gpt_ctl_linebuf *lb)
{
    return lb->len - lb->start;
}

int gpt_ctl_linebuf_push(struct gpt_ctl_linebuf *lb, const char *data, size_t n)
{
    /* Drop returned lines first so the buffer holds only what is pending. */
    if (lb->start > 0) {
        memmove(lb->buf, lb->buf + lb->start, lb->len - lb->start);
        lb->len -= lb->start;
        lb->start = 0;
    }
    if (n == 0)
        return 0;
    /* The tail after the last '\n' of this chunk is the new partial line. */
    const char *nl = memrchr(data, '\n', n);
    size_t partial = nl ? n - (size_t)(nl - data) - 1 : lb->len + n;
    if (partial > lb->max)
        return GPT_CTL_E_TOO_LONG;
    if (lb->len + n > lb->cap) {
        size_t cap = lb->cap ? lb->cap : 4096;
        while (cap < lb->len + n)
            cap *= 2;
        char *b = realloc(lb->buf, cap);
        if (!b)
            return -ENOMEM;
        lb->buf = b;
        lb->cap = cap;
    }
    memcpy(lb->buf + lb->len, data, n);
    lb->len += n;
    return 0;
}

int gpt_ctl_linebuf_next(struct gpt_ctl_linebuf *lb, const char **ret_line, size_t *ret_len)
{
    size_t from = lb->start + lb->scanned;
    const char *nl = from < lb->len ? memchr(lb->buf + from, '\n', lb->len - from) : NULL;
    if (!nl) {
        lb->scanned = lb->len - lb->start;
        return 0;
    }
    size_t n = (size_t)(nl - (lb->buf + lb->start));
    const char *line = lb->buf + lb->start;
    lb->start += n + 1;
    lb->scanned = 0;
    if (n > lb->max)
        return GPT_CTL_E_TOO_LONG;
    *ret_line = line;
    *ret_len = n;
    return 1;
}
