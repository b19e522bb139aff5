/*
 * ctl: control-line codec (see ctl.h). One const table says which fields
 * each op takes and which it requires; one const table says each field's
 * name, JSON type and range. Pure.
 */
#define _GNU_SOURCE /* memrchr */
#include "ctl.h"
#include "jobspec_sweep.h"
#include "prompt_ids.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define SLOT(x) offsetof(struct gpt_ctl_request, x)

static const struct gpt_ctl_field_info ctl_fields[GPT_CTL_F_COUNT] = {
    [GPT_CTL_F_SPEC] = {"spec", GPT_CTL_T_OBJECT, 0, 0, SLOT(spec)},
    [GPT_CTL_F_JOB] = {"job", GPT_CTL_T_INT, 1, INT64_MAX, SLOT(job)},
    [GPT_CTL_F_PRIORITY] = {"priority", GPT_CTL_T_INT, -1000000, 1000000, SLOT(priority)},
    [GPT_CTL_F_FOLLOW] = {"follow", GPT_CTL_T_BOOL, 0, 0, SLOT(follow)},
    [GPT_CTL_F_SINCE] = {"since", GPT_CTL_T_INT, 0, INT64_MAX, SLOT(since)},
    [GPT_CTL_F_SNAPSHOT] = {"snapshot", GPT_CTL_T_INT, 1, INT64_MAX, SLOT(snapshot)},
    [GPT_CTL_F_PROMPT] = {"prompt", GPT_CTL_T_STRING, 0, GPT_CTL_PROMPT_MAX, SLOT(prompt)},
    [GPT_CTL_F_TOKENS] = {"tokens", GPT_CTL_T_INT, 1, 1000000, SLOT(tokens)},
    [GPT_CTL_F_TEMPERATURE] = {"temperature", GPT_CTL_T_NUMBER, 0, 100, SLOT(temperature)},
    [GPT_CTL_F_TOP_K] = {"top_k", GPT_CTL_T_INT, 0, 1000000, SLOT(top_k)},
    [GPT_CTL_F_OVERRIDES] = {"overrides", GPT_CTL_T_OBJECT, 0, 0, SLOT(overrides)},
    [GPT_CTL_F_SWEEP] = {"sweep", GPT_CTL_T_STRING, 0, 63, SLOT(sweep)},
    [GPT_CTL_F_FORMAT] = {"format", GPT_CTL_T_STRING, 0, 16, SLOT(format)},
    [GPT_CTL_F_OUTPUT] = {"output", GPT_CTL_T_STRING, 0, GPT_CTL_OUTPUT_MAX, SLOT(output)},
    [GPT_CTL_F_DTYPE] = {"dtype", GPT_CTL_T_STRING, 0, 8, SLOT(dtype)},
    [GPT_CTL_F_PROMPT_IDS] = {"prompt_ids", GPT_CTL_T_STRING, 0, GPT_PROMPT_IDS_TEXT_MAX,
                              SLOT(prompt_ids)},
    [GPT_CTL_F_RESUME_FROM] = {"resume_from", GPT_CTL_T_INT, 1, INT64_MAX, SLOT(resume_from)},
    [GPT_CTL_F_SWEEP_JOBS] = {"sweep_jobs", GPT_CTL_T_INT, 1, GPT_SWEEP_JOBS_MAX, SLOT(sweep_jobs)},
    [GPT_CTL_F_UMASK] = {"umask", GPT_CTL_T_INT, 0, 0777, SLOT(umask)},
    [GPT_CTL_F_STATE] = {"state", GPT_CTL_T_STRING, 0, 16, SLOT(state)},
    [GPT_CTL_F_USER] = {"user", GPT_CTL_T_INT, 0, UINT32_MAX, SLOT(user)},
    [GPT_CTL_F_FORGET] = {"forget", GPT_CTL_T_STRING, 0, 63, SLOT(forget)},
};

#undef SLOT

#define F(x)     (1u << GPT_CTL_F_##x)
#define FWD      GPT_CTL_OPF_FORWARD
#define FWD_JOB  GPT_CTL_OPF_FORWARD_JOB
#define OWNER    GPT_CTL_OPF_OWNER
#define STREAM   GPT_CTL_OPF_STREAM
#define NOT_STOP GPT_CTL_OPF_NOT_STOPPING

/* submit, logs and sample are forwarded too, but not as plain reads: their
 * handlers have member paths of their own (daemon/handlers.c). */
static const struct gpt_ctl_op_info ctl_ops[GPT_CTL_OP_COUNT] = {
    [GPT_CTL_OP_SUBMIT] = {"submit",
                           F(SPEC) | F(PRIORITY) | F(SWEEP) | F(SWEEP_JOBS) | F(RESUME_FROM) |
                               F(SNAPSHOT) | F(OVERRIDES),
                           F(SPEC), NOT_STOP},
    [GPT_CTL_OP_VALIDATE] = {"validate", F(SPEC), F(SPEC), 0},
    [GPT_CTL_OP_LIST] = {"list", F(SWEEP) | F(STATE) | F(USER), 0, FWD},
    [GPT_CTL_OP_STATUS] = {"status", F(JOB), 0, FWD_JOB},
    [GPT_CTL_OP_LOGS] = {"logs", F(JOB) | F(FOLLOW) | F(SINCE), F(JOB), STREAM},
    [GPT_CTL_OP_CANCEL] = {"cancel", F(JOB), F(JOB), FWD | OWNER},
    [GPT_CTL_OP_RESUME] = {"resume", F(JOB) | F(SNAPSHOT) | F(OVERRIDES), F(JOB),
                           FWD | OWNER | NOT_STOP},
    [GPT_CTL_OP_SNAPSHOTS] = {"snapshots", F(JOB), F(JOB), FWD},
    [GPT_CTL_OP_SAMPLE] = {"sample",
                           F(JOB) | F(SNAPSHOT) | F(PROMPT) | F(PROMPT_IDS) | F(TOKENS) |
                               F(TEMPERATURE) | F(TOP_K),
                           F(JOB), 0},
    [GPT_CTL_OP_NODES] = {"nodes", F(FORGET), 0, 0},
    [GPT_CTL_OP_PING] = {"ping", 0, 0, 0},
    [GPT_CTL_OP_EXPORT] = {"export",
                           F(JOB) | F(SNAPSHOT) | F(FORMAT) | F(OUTPUT) | F(DTYPE) | F(UMASK),
                           F(JOB) | F(FORMAT) | F(OUTPUT), OWNER},
    [GPT_CTL_OP_SAMPLES] = {"samples", F(JOB), F(JOB), FWD},
};

#undef F
#undef FWD
#undef FWD_JOB
#undef OWNER
#undef STREAM
#undef NOT_STOP

const struct gpt_ctl_op_info *gpt_ctl_op_info(int op)
{
    return op >= 0 && op < GPT_CTL_OP_COUNT ? &ctl_ops[op] : NULL;
}

const struct gpt_ctl_field_info *gpt_ctl_field_info(int field)
{
    return field >= 0 && field < GPT_CTL_F_COUNT ? &ctl_fields[field] : NULL;
}

bool gpt_ctl_op_has(int op, uint32_t flags)
{
    return op >= 0 && op < GPT_CTL_OP_COUNT && (ctl_ops[op].flags & flags) == flags;
}

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

int gpt_ctl_field_lookup(const char *name)
{
    for (int i = 0; i < GPT_CTL_F_COUNT; i++)
        if (strcmp(ctl_fields[i].name, name) == 0)
            return i;
    return -1;
}

/* Stores one field's value into its slot after checking type and range. */
static int ctl_field_decode(struct gpt_ctl_request *req, int f, json_t *v, struct gpt_err *err)
{
    const struct gpt_ctl_field_info *fi = &ctl_fields[f];
    char *slot = (char *)req + fi->offset;
    switch (fi->type) {
    case GPT_CTL_T_OBJECT:
        if (!json_is_object(v))
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, fi->name, "must be an object");
        *(json_t **)(void *)slot = v;
        break;
    case GPT_CTL_T_BOOL:
        if (!json_is_boolean(v))
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, fi->name, "must be true or false");
        *(bool *)(void *)slot = json_is_true(v);
        break;
    case GPT_CTL_T_NUMBER: {
        if (!json_is_number(v))
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, fi->name, "must be a number");
        double d = json_number_value(v);
        if (!isfinite(d) || d <= (double)fi->min || d > (double)fi->max)
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, fi->name, "must be in (%lld, %lld]",
                               (long long)fi->min, (long long)fi->max);
        *(double *)(void *)slot = d;
        break;
    }
    case GPT_CTL_T_STRING: {
        if (!json_is_string(v))
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, fi->name, "must be a string");
        size_t n = json_string_length(v);
        if ((int64_t)n > fi->max)
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, fi->name, "longer than %lld bytes",
                               (long long)fi->max);
        if (strlen(json_string_value(v)) != n)
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, fi->name, "contains a NUL byte");
        *(const char **)(void *)slot = json_string_value(v);
        break;
    }
    case GPT_CTL_T_INT: {
        if (!json_is_integer(v))
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, fi->name, "must be an integer");
        int64_t i = json_integer_value(v);
        if (i < fi->min || i > fi->max)
            return gpt_err_set(err, GPT_CTL_E_BAD_FIELD, fi->name, "must be between %lld and %lld",
                               (long long)fi->min, (long long)fi->max);
        *(int64_t *)(void *)slot = i;
        break;
    }
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
    const struct gpt_ctl_op_info *oi = &ctl_ops[ret->op];

    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "id") == 0 || strcmp(key, "op") == 0)
            continue;
        int f = gpt_ctl_field_lookup(key);
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
