/*
 * http_collect: gathering the metrics view on the loop (see
 * http_collect.h).
 */
#include "http_collect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "control.h"
#include "db.h"
#include "http_api.h"
#include "userwork.h"
#include "log.h"
#include "store_server.h"

struct http_job_cache {
    struct metrics_job mj;
    int64_t after;   /* the newest metric step read; -1: none yet */
    int64_t db_step; /* the job's newest step as its row said at the last read */
    bool was_final;  /* final at the last tick too */
    bool caught_up;  /* the last read reached the newest record */
    bool skip;       /* this tick: nothing new to read */
};

struct http_collect {
    struct http_job_cache *jobs; /* the newest jobs, newest first */
    size_t n_jobs;
    struct metrics_node *nodes;
};

struct http_collect *http_collect_new(void)
{
    struct http_collect *hc = calloc(1, sizeof(*hc));
    if (!hc)
        return NULL;
    hc->jobs = calloc(HTTP_COLLECT_JOBS_MAX, sizeof(*hc->jobs));
    hc->nodes = calloc(HTTP_COLLECT_NODES_MAX, sizeof(*hc->nodes));
    if (!hc->jobs || !hc->nodes) {
        http_collect_free(hc);
        return NULL;
    }
    return hc;
}

void http_collect_free(struct http_collect *hc)
{
    if (!hc)
        return;
    free(hc->jobs);
    free(hc->nodes);
    free(hc);
}

struct http_list_ctx {
    struct http_collect *hc;
    struct http_job_cache *fresh;
    size_t n;
};

/* db_job_list callback: carries a known job's cache over, starts a new
 * one otherwise. */
static void http_on_job(void *ctx, const struct db_job *j)
{
    struct http_list_ctx *lc = ctx;
    if (lc->n >= HTTP_COLLECT_JOBS_MAX)
        return;
    struct http_job_cache *c = &lc->fresh[lc->n++];
    memset(c, 0, sizeof(*c));
    c->after = -1;
    for (size_t i = 0; i < lc->hc->n_jobs; i++)
        if (lc->hc->jobs[i].mj.id == j->id) {
            *c = lc->hc->jobs[i];
            break;
        }
    c->mj.id = j->id;
    snprintf(c->mj.name, sizeof(c->mj.name), "%s", j->name);
    snprintf(c->mj.overrides, sizeof(c->mj.overrides), "%s", j->overrides);
    snprintf(c->mj.sweep, sizeof(c->mj.sweep), "%s", j->sweep);
    c->mj.state = db_job_state_name(j->state);
    c->mj.restarts = j->restarts;
    /* A finished job whose records were all read after it finished has no
     * new ones (until a resume, which makes it queued again). */
    bool final = db_job_state_final(j->state);
    c->skip = final && c->was_final && c->caught_up && c->db_step == j->step;
    c->was_final = final;
    c->db_step = j->step;
}

static void http_on_metric(void *ctx, const struct gpt_metric *m)
{
    struct metrics_job *mj = ctx;
    if (!isnan(m->val_loss)) {
        mj->has_val_loss = true;
        mj->val_loss = m->val_loss;
    }
    if (mj->has_metric && m->step < mj->step)
        return;
    mj->has_metric = true;
    mj->step = m->step;
    mj->max_steps = m->max_steps;
    mj->loss = m->loss;
    mj->lr = m->lr;
    mj->grad_norm = m->grad_norm;
    mj->tokens_per_s = m->tokens_per_s;
    mj->mfu = m->mfu;
    mj->eta_s = m->eta_s;
    mj->world_size = m->world_size;
}

/* The trainer's snapshot event reads "step N written to PATH in X ms"
 * (engine/trainer.c); the time is the number after the last " in ". */
static double http_snapshot_write_s(const char *msg)
{
    const char *p = NULL;
    for (const char *q = strstr(msg, " in "); q; q = strstr(q + 1, " in "))
        p = q;
    double ms;
    char unit[4];
    if (p && sscanf(p, " in %lf %3s", &ms, unit) == 2 && strcmp(unit, "ms") == 0 && ms >= 0)
        return ms / 1000.0;
    return -1;
}

static void http_on_event(void *ctx, const struct gpt_event *e)
{
    struct metrics_job *mj = ctx;
    if (strcmp(e->kind, "snapshot") != 0 || (mj->has_snapshot && e->time < mj->snapshot_time))
        return;
    mj->has_snapshot = true;
    mj->snapshot_time = e->time;
    mj->snapshot_write_s = http_snapshot_write_s(e->message);
}

/* Reads the records of a job that arrived since the last tick. The newest
 * step already read is read again: an eval record replaces the log record
 * of its step, and a snapshot event of that step may come after it. */
static void http_job_refresh(struct db *db, struct http_job_cache *c)
{
    struct db_history_cb cb = {&c->mj, http_on_metric, http_on_event};
    int64_t since = c->after < 0 ? 0 : c->after;
    int64_t last = c->after;
    int more = 0;
    struct gpt_err err;
    if (db_history(db, c->mj.id, since, since - 1, HTTP_COLLECT_READ_MAX, &cb, &last, &more, &err) <
        0) {
        log_debug("metrics: job %lld: %s", (long long)c->mj.id, err.msg);
        return;
    }
    if (last > c->after)
        c->after = last;
    c->caught_up = !more;
}

static void http_collect_jobs(struct http_collect *hc, struct db *db)
{
    struct http_job_cache *fresh = calloc(HTTP_COLLECT_JOBS_MAX, sizeof(*fresh));
    if (!fresh)
        return;
    struct http_list_ctx lc = {hc, fresh, 0};
    struct gpt_err err;
    if (db_job_list(db, HTTP_COLLECT_JOBS_MAX, http_on_job, &lc, &err) < 0) {
        log_debug("metrics: %s", err.msg);
        free(fresh);
        return;
    }
    for (size_t i = 0; i < lc.n; i++)
        if (!fresh[i].skip)
            http_job_refresh(db, &fresh[i]);
    free(hc->jobs);
    hc->jobs = fresh;
    hc->n_jobs = lc.n;
}

static void http_copy_str(char *dst, size_t cap, const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    snprintf(dst, cap, "%s", s ? s : "");
}

static size_t http_collect_nodes(struct http_collect *hc, struct cluster *cluster)
{
    if (!cluster)
        return 0;
    json_t *arr = cluster_nodes_json(cluster);
    size_t n = 0, i;
    json_t *o;
    json_array_foreach(arr, i, o)
    {
        if (n >= HTTP_COLLECT_NODES_MAX)
            break;
        struct metrics_node *nd = &hc->nodes[n++];
        memset(nd, 0, sizeof(*nd));
        http_copy_str(nd->node, sizeof(nd->node), o, "node");
        http_copy_str(nd->state, sizeof(nd->state), o, "state");
        http_copy_str(nd->devices, sizeof(nd->devices), o, "devices");
        http_copy_str(nd->version, sizeof(nd->version), o, "version");
        nd->heartbeat_age_s = json_number_value(json_object_get(o, "heartbeat_age_s"));
        nd->workers = (int)json_integer_value(json_object_get(o, "workers"));
        nd->member = json_is_true(json_object_get(o, "member"));
    }
    json_decref(arr);
    return n;
}

void http_collect_render(struct http_collect *hc, const struct http_collect_src *s, double now,
                         struct metrics_buf *b)
{
    bool coordinator = s->cluster && cluster_is_coordinator(s->cluster);
    struct metrics_view v = {
        .now = now,
        .started = s->started,
        .role = coordinator ? "coordinator" : "member",
        .queued_jobs = -1,
        .clients = s->ctl ? control_client_count(s->ctl) : 0,
    };
    userwork_counts(s->userwork, &v.user_work_running, &v.user_work_waiting);
    snprintf(v.node, sizeof(v.node), "%s", s->node);
    /* The coordinator holds the cluster's jobs; a member's database has
     * none of its own, so it exports nodes and counters only. */
    if (coordinator && s->db) {
        int64_t q = 0;
        if (db_job_count(s->db, DB_JOB_QUEUED, &q, NULL) == 0)
            v.queued_jobs = q;
        http_collect_jobs(hc, s->db);
    }
    struct store_server *srv = s->cluster ? cluster_store_server(s->cluster) : NULL;
    if (srv) {
        struct store_server_stats st;
        store_server_stats(srv, &st);
        v.has_store = true;
        v.store_requests = st.requests;
        v.store_auth_failures = st.auth_failures;
        v.store_tag_failures = st.tag_failures;
        v.store_refused_writes = st.refused_writes + cluster_records_refused(s->cluster);
        v.store_clients = st.clients;
        v.store_keys = st.keys;
        v.store_data_bytes = st.data_bytes;
    }
    v.nodes = hc->nodes;
    v.n_nodes = http_collect_nodes(hc, s->cluster);
    /* metrics_view takes an array of metrics_job; the cache interleaves
     * them with bookkeeping, so copy them out. */
    struct metrics_job *jobs = NULL;
    if (coordinator && hc->n_jobs) {
        jobs = calloc(hc->n_jobs, sizeof(*jobs));
        if (jobs)
            for (size_t i = 0; i < hc->n_jobs; i++)
                jobs[i] = hc->jobs[i].mj;
        v.jobs = jobs;
        v.n_jobs = jobs ? hc->n_jobs : 0;
    }
    metrics_text_render(b, &v);
    free(jobs);
}

void http_collect_api(struct http_collect *hc, const struct http_collect_src *s, double now,
                      char **ret_jobs, char **ret_nodes)
{
    bool coordinator = s->cluster && cluster_is_coordinator(s->cluster);
    struct metrics_view v = {.now = now, .role = coordinator ? "coordinator" : "member"};
    snprintf(v.node, sizeof(v.node), "%s", s->node);
    struct metrics_job *jobs = NULL;
    if (coordinator && hc->n_jobs && (jobs = calloc(hc->n_jobs, sizeof(*jobs)))) {
        for (size_t i = 0; i < hc->n_jobs; i++)
            jobs[i] = hc->jobs[i].mj;
        v.jobs = jobs;
        v.n_jobs = hc->n_jobs;
    }
    *ret_jobs = http_api_dump(http_api_jobs_doc(&v));
    free(jobs);
    json_t *arr = s->cluster ? cluster_nodes_json(s->cluster) : json_array();
    *ret_nodes = arr ? http_api_dump(http_api_nodes_doc(arr)) : NULL;
    json_decref(arr);
}
