/*
 * http_api: the dashboard's JSON documents and URL routing (see
 * http_api.h). Pure.
 */
#include "http_api.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "str_escape.h"

int http_api_parse_count(const char *s, int64_t *ret)
{
    if (!s || !s[0] || strlen(s) > 18 || (s[0] == '0' && s[1]))
        return -EINVAL;
    int64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return -EINVAL;
        v = v * 10 + (*p - '0'); /* 18 digits cannot overflow int64 */
    }
    *ret = v;
    return 0;
}

static const struct {
    const char *suffix;
    enum http_api_what what;
    const char *doc; /* how an error names it */
} http_api_job_docs[] = {
    {"/metrics", HTTP_API_METRICS, "/api/jobs/ID/metrics"},
    {"/events", HTTP_API_EVENTS, "/api/jobs/ID/events"},
    {"/snapshots", HTTP_API_SNAPSHOTS, "/api/jobs/ID/snapshots"},
    {"/config", HTTP_API_CONFIG, "/api/jobs/ID/config"},
    {"/samples", HTTP_API_SAMPLES, "/api/jobs/ID/samples"},
};

int http_api_route(const char *url, const char *since, struct http_api_route *ret,
                   struct gpt_err *err)
{
    static const char jobs[] = "/api/jobs";
    memset(ret, 0, sizeof(*ret));
    if (!url || strlen(url) > HTTP_API_URL_MAX)
        return 0;
    if (strcmp(url, "/api/nodes") == 0) {
        ret->what = HTTP_API_NODES;
        return 0;
    }
    if (strncmp(url, jobs, sizeof(jobs) - 1) != 0)
        return 0;
    const char *p = url + sizeof(jobs) - 1;
    if (!*p) {
        ret->what = HTTP_API_JOBS;
        return 0;
    }
    if (*p++ != '/')
        return 0;
    const char *slash = strchr(p, '/');
    if (!slash)
        return 0;
    enum http_api_what what = HTTP_API_NONE;
    const char *doc = NULL;
    for (size_t i = 0; i < sizeof(http_api_job_docs) / sizeof(http_api_job_docs[0]); i++)
        if (strcmp(slash, http_api_job_docs[i].suffix) == 0) {
            what = http_api_job_docs[i].what;
            doc = http_api_job_docs[i].doc;
        }
    if (what == HTTP_API_NONE)
        return 0;
    char id[24];
    size_t n = (size_t)(slash - p);
    int64_t job = 0, from = 0;
    if (n < sizeof(id)) {
        memcpy(id, p, n);
        id[n] = '\0';
    }
    if (n >= sizeof(id) || http_api_parse_count(id, &job) < 0 || job == 0)
        return gpt_err_set(err, -EINVAL, "job",
                           "the job id in %s is not a job id (1 to 18 digits, no leading zero)",
                           doc);
    if (since && what != HTTP_API_METRICS)
        return gpt_err_set(err, -EINVAL, "since",
                           "since is an argument of /api/jobs/ID/metrics only");
    if (since && http_api_parse_count(since, &from) < 0)
        return gpt_err_set(err, -EINVAL, "since",
                           "since must be a step: 1 to 18 digits, no sign, no leading zero");
    ret->what = what;
    ret->job = job;
    ret->since = from;
    return 0;
}

int http_api_format(const char *format, enum http_api_what what, bool *ret_csv, struct gpt_err *err)
{
    bool csv = format && strcmp(format, "csv") == 0;
    if (format && !csv && strcmp(format, "json") != 0)
        return gpt_err_set(err, -EINVAL, "format", "format is json (the default) or csv");
    if (csv && what != HTTP_API_METRICS)
        return gpt_err_set(err, -EINVAL, "format",
                           "format=csv is served by /api/jobs/ID/metrics only");
    *ret_csv = csv;
    return 0;
}

/* A string as JSON; invalid UTF-8 (a hostile job name or message) is sent
 * escaped (\xNN) instead of dropped (gpt_str_json). */
json_t *http_api_string(const char *s)
{
    return gpt_str_json(s);
}

/* A number, or null where it is not finite (JSON has no NaN). */
static json_t *http_api_real(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

json_t *http_api_job_json(const struct metrics_job *j)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "id", json_integer(j->id));
    json_object_set_new(o, "name", http_api_string(j->name));
    json_object_set_new(o, "state", json_string(j->state ? j->state : "unknown"));
    json_object_set_new(o, "restarts", json_integer(j->restarts));
    json_t *over = j->overrides[0] ? json_loads(j->overrides, 0, NULL) : NULL;
    if (over)
        json_object_set_new(o, "overrides", over);
    if (j->sweep[0])
        json_object_set_new(o, "sweep", http_api_string(j->sweep));
    if (j->has_metric) {
        json_object_set_new(o, "step", json_integer(j->step));
        json_object_set_new(o, "max_steps", json_integer(j->max_steps));
        json_object_set_new(o, "loss", http_api_real(j->loss));
        json_object_set_new(o, "lr", http_api_real(j->lr));
        json_object_set_new(o, "tokens_per_s", http_api_real(j->tokens_per_s));
        json_object_set_new(o, "eta_s", http_api_real(j->eta_s));
        json_object_set_new(o, "world_size", json_integer(j->world_size));
    } else {
        json_object_set_new(o, "step", json_null());
    }
    json_object_set_new(o, "val_loss", j->has_val_loss ? http_api_real(j->val_loss) : json_null());
    return o;
}

json_t *http_api_jobs_doc(const struct metrics_view *v)
{
    json_t *arr = json_array();
    json_t *doc = json_pack("{s:o, s:s, s:o}", "node", http_api_string(v->node), "role",
                            v->role ? v->role : "", "time", http_api_real(v->now));
    if (!arr || !doc) {
        json_decref(arr);
        json_decref(doc);
        return NULL;
    }
    for (size_t i = 0; i < v->n_jobs; i++)
        json_array_append_new(arr, http_api_job_json(&v->jobs[i]));
    json_object_set_new(doc, "jobs", arr);
    return doc;
}

json_t *http_api_nodes_doc(const json_t *cluster_nodes)
{
    static const char *const keys[] = {"node",    "state",  "heartbeat_age_s", "workers", "devices",
                                       "version", "member", "ranks",           "role",    "gpus"};
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    size_t i;
    const json_t *n;
    json_array_foreach(cluster_nodes, i, n)
    {
        if (!json_is_object(n))
            continue;
        json_t *o = json_object();
        if (!o)
            break;
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
            json_t *v = json_object_get(n, keys[k]);
            if (v)
                json_object_set(o, keys[k], v);
        }
        json_array_append_new(arr, o);
    }
    return json_pack("{s:o}", "nodes", arr);
}

json_t *http_api_metric_json(const struct gpt_metric *m)
{
    /* The memory a rank holds: the four parts metric.h reports, summed. */
    uint64_t mem =
        m->mem_params_bytes + m->mem_grads_bytes + m->mem_optim_bytes + m->mem_acts_bytes;
    json_t *o = json_pack(
        "{s:I, s:o, s:o, s:o, s:I, s:o, s:o, s:o, s:I}", "step", (json_int_t)m->step, "loss",
        http_api_real(m->loss), "lr", http_api_real(m->lr), "time", http_api_real(m->time),
        "tokens", (json_int_t)m->tokens, "grad_norm", http_api_real(m->grad_norm), "tokens_per_s",
        http_api_real(m->tokens_per_s), "mfu", http_api_real(m->mfu), "mem_bytes", (json_int_t)mem);
    if (o && isfinite(m->val_loss))
        json_object_set_new(o, "val_loss", json_real(m->val_loss));
    return o;
}

json_t *http_api_event_json(const struct gpt_event *e)
{
    return json_pack("{s:o, s:o, s:I, s:o}", "kind", http_api_string(e->kind), "message",
                     http_api_string(e->message), "step", (json_int_t)e->step, "time",
                     http_api_real(e->time));
}

char *http_api_dump(json_t *doc)
{
    if (!doc)
        return NULL;
    char *s = json_dumps(doc, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ESCAPE_SLASH);
    json_decref(doc);
    return s;
}
