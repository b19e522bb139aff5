/*
 * metrics_text: the Prometheus text rendering (see metrics_text.h). Each
 * family is a table row; a sample is left out where its value is unknown
 * (a job without metrics yet, a GPU that does not report power), never
 * written as a made-up 0.
 */
#include "metrics_text.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool metrics_buf_reserve(struct metrics_buf *b, size_t more)
{
    if (b->err)
        return false;
    if (b->len + more + 1 <= b->cap)
        return true;
    if (b->len + more + 1 > METRICS_TEXT_MAX) {
        b->err = -E2BIG;
        return false;
    }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more + 1)
        cap *= 2;
    if (cap > METRICS_TEXT_MAX)
        cap = METRICS_TEXT_MAX;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->err = -ENOMEM;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void metrics_buf_printf(struct metrics_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !metrics_buf_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static void metrics_buf_put(struct metrics_buf *b, const char *s, size_t n)
{
    if (!metrics_buf_reserve(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void metrics_buf_done(struct metrics_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

void metrics_text_escape(struct metrics_buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\')
            metrics_buf_put(b, "\\\\", 2);
        else if (*s == '"')
            metrics_buf_put(b, "\\\"", 2);
        else if (*s == '\n')
            metrics_buf_put(b, "\\n", 2);
        else
            metrics_buf_put(b, s, 1);
    }
}

/* A sample value: exact (%.17g reads back as the same double), with the
 * format's spellings of the non-finite values. */
static void metrics_value(struct metrics_buf *b, double v)
{
    if (isnan(v))
        metrics_buf_printf(b, " NaN\n");
    else if (isinf(v))
        metrics_buf_printf(b, " %sInf\n", v > 0 ? "+" : "-");
    else
        metrics_buf_printf(b, " %.17g\n", v);
}

static void metrics_family(struct metrics_buf *b, const char *name, const char *type,
                           const char *help)
{
    metrics_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{job_id="..",job_name=".."[,extra]} */
static void metrics_job_labels(struct metrics_buf *b, const char *name, const struct metrics_job *j)
{
    metrics_buf_printf(b, "%s{job_id=\"%lld\",job_name=\"", name, (long long)j->id);
    metrics_text_escape(b, j->name);
    metrics_buf_put(b, "\"", 1);
}

enum metrics_job_field {
    MJ_STEP,
    MJ_MAX_STEPS,
    MJ_LOSS,
    MJ_VAL_LOSS,
    MJ_LR,
    MJ_GRAD_NORM,
    MJ_TOKENS_PER_S,
    MJ_MFU,
    MJ_ETA,
    MJ_RESTARTS,
    MJ_WORLD_SIZE,
    MJ_SNAPSHOT_AGE,
    MJ_SNAPSHOT_WRITE,
};

static const struct metrics_job_family {
    const char *name, *type, *help;
    int field; /* enum metrics_job_field */
} metrics_job_families[] = {
    {"gptd_job_step", "gauge", "Optimizer steps the job has completed (newest metric).", MJ_STEP},
    {"gptd_job_max_steps", "gauge", "Steps the job plans to run.", MJ_MAX_STEPS},
    {"gptd_job_loss", "gauge", "Newest mean train loss over the global batch.", MJ_LOSS},
    {"gptd_job_val_loss", "gauge", "Newest validation loss.", MJ_VAL_LOSS},
    {"gptd_job_learning_rate", "gauge", "Learning rate of the newest step.", MJ_LR},
    {"gptd_job_grad_norm", "gauge", "Global gradient norm before clipping (newest step).",
     MJ_GRAD_NORM},
    {"gptd_job_tokens_per_second", "gauge", "Training throughput of the newest step.",
     MJ_TOKENS_PER_S},
    {"gptd_job_mfu_ratio", "gauge", "Model FLOPs utilisation, fraction of peak (0..1).", MJ_MFU},
    {"gptd_job_eta_seconds", "gauge", "Estimated seconds until the job's last step.", MJ_ETA},
    {"gptd_job_restarts_total", "counter", "Failures the job restarted from.", MJ_RESTARTS},
    {"gptd_job_world_size", "gauge", "Ranks in the job's world at the newest step.", MJ_WORLD_SIZE},
    {"gptd_job_snapshot_age_seconds", "gauge", "Seconds since the job's newest snapshot.",
     MJ_SNAPSHOT_AGE},
    {"gptd_job_snapshot_write_seconds", "gauge", "Time the newest snapshot took to write.",
     MJ_SNAPSHOT_WRITE},
};

/* The value of one family for a job; false when it has none. */
static bool metrics_job_value(const struct metrics_job *j, int field, double now, double *ret)
{
    switch (field) {
    case MJ_RESTARTS:
        *ret = j->restarts;
        return true;
    case MJ_MAX_STEPS:
        if (!j->has_metric || j->max_steps <= 0)
            return false;
        *ret = (double)j->max_steps;
        return true;
    case MJ_VAL_LOSS:
        *ret = j->val_loss;
        return j->has_val_loss;
    case MJ_SNAPSHOT_AGE:
        *ret = now - j->snapshot_time;
        return j->has_snapshot;
    case MJ_SNAPSHOT_WRITE:
        *ret = j->snapshot_write_s;
        return j->has_snapshot && j->snapshot_write_s >= 0;
    default:
        break;
    }
    if (!j->has_metric)
        return false;
    switch (field) {
    case MJ_STEP:
        *ret = (double)j->step;
        return true;
    case MJ_LOSS:
        *ret = j->loss;
        return true;
    case MJ_LR:
        *ret = j->lr;
        return true;
    case MJ_GRAD_NORM:
        *ret = j->grad_norm;
        return true;
    case MJ_TOKENS_PER_S:
        *ret = j->tokens_per_s;
        return true;
    case MJ_MFU:
        *ret = j->mfu;
        return true;
    case MJ_ETA:
        *ret = j->eta_s;
        return j->eta_s >= 0;
    case MJ_WORLD_SIZE:
        *ret = j->world_size;
        return j->world_size > 0;
    default:
        return false;
    }
}

static void metrics_render_jobs(struct metrics_buf *b, const struct metrics_view *v)
{
    if (v->n_jobs == 0)
        return;
    metrics_family(b, "gptd_job_info", "gauge",
                   "Jobs gptd knows (the newest ones): 1, with the job's state as a label.");
    for (size_t i = 0; i < v->n_jobs; i++) {
        metrics_job_labels(b, "gptd_job_info", &v->jobs[i]);
        metrics_buf_printf(b, ",state=\"");
        metrics_text_escape(b, v->jobs[i].state ? v->jobs[i].state : "unknown");
        metrics_buf_printf(b, "\"} 1\n");
    }
    for (size_t f = 0; f < sizeof(metrics_job_families) / sizeof(metrics_job_families[0]); f++) {
        const struct metrics_job_family *fam = &metrics_job_families[f];
        bool header = false;
        for (size_t i = 0; i < v->n_jobs; i++) {
            double x;
            if (!metrics_job_value(&v->jobs[i], fam->field, v->now, &x))
                continue;
            if (!header) {
                metrics_family(b, fam->name, fam->type, fam->help);
                header = true;
            }
            metrics_job_labels(b, fam->name, &v->jobs[i]);
            metrics_buf_put(b, "}", 1);
            metrics_value(b, x);
        }
    }
}

static void metrics_node_labels(struct metrics_buf *b, const char *name, const char *node)
{
    metrics_buf_printf(b, "%s{node=\"", name);
    metrics_text_escape(b, node);
    metrics_buf_put(b, "\"", 1);
}

static bool metrics_node_alive(const struct metrics_node *n)
{
    return strcmp(n->state, "dead") != 0 && strcmp(n->state, "left") != 0;
}

static void metrics_render_nodes(struct metrics_buf *b, const struct metrics_view *v)
{
    if (v->n_nodes == 0)
        return;
    metrics_family(b, "gptd_node_info", "gauge",
                   "Nodes of the cluster: 1, with state, devices and version as labels.");
    for (size_t i = 0; i < v->n_nodes; i++) {
        const struct metrics_node *n = &v->nodes[i];
        metrics_node_labels(b, "gptd_node_info", n->node);
        metrics_buf_printf(b, ",state=\"");
        metrics_text_escape(b, n->state);
        metrics_buf_printf(b, "\",devices=\"");
        metrics_text_escape(b, n->devices);
        metrics_buf_printf(b, "\",version=\"");
        metrics_text_escape(b, n->version);
        metrics_buf_printf(b, "\"} 1\n");
    }
    static const char *const names[] = {"gptd_node_up", "gptd_node_heartbeat_age_seconds",
                                        "gptd_node_workers", "gptd_node_in_world"};
    static const char *const helps[] = {
        "1 while the node heartbeats (not dead, not left).",
        "Seconds since the coordinator last heard the node's heartbeat.",
        "Worker ranks the node offers.", "1 when the node is a member of the running world."};
    for (size_t f = 0; f < 4; f++) {
        metrics_family(b, names[f], "gauge", helps[f]);
        for (size_t i = 0; i < v->n_nodes; i++) {
            const struct metrics_node *n = &v->nodes[i];
            double x = f == 0   ? (metrics_node_alive(n) ? 1 : 0)
                       : f == 1 ? n->heartbeat_age_s
                       : f == 2 ? n->workers
                                : (n->member ? 1 : 0);
            metrics_node_labels(b, names[f], n->node);
            metrics_buf_put(b, "}", 1);
            metrics_value(b, x);
        }
    }
}

static void metrics_render_daemon(struct metrics_buf *b, const struct metrics_view *v)
{
    metrics_family(b, "gptd_info", "gauge", "This gptd: 1, with its node name and role.");
    metrics_node_labels(b, "gptd_info", v->node);
    metrics_buf_printf(b, ",role=\"%s\"} 1\n", v->role ? v->role : "");
    metrics_family(b, "gptd_start_time_seconds", "gauge", "When gptd started (unix seconds).");
    metrics_buf_printf(b, "gptd_start_time_seconds");
    metrics_value(b, v->started);
    if (v->queued_jobs >= 0) {
        metrics_family(b, "gptd_queued_jobs", "gauge", "Jobs waiting in the queue.");
        metrics_buf_printf(b, "gptd_queued_jobs %lld\n", (long long)v->queued_jobs);
    }
    metrics_family(b, "gptd_control_clients", "gauge", "Open control socket connections.");
    metrics_buf_printf(b, "gptd_control_clients %d\n", v->clients);
    metrics_family(b, "gptd_user_work_running", "gauge",
                   "Requests (sample, export, --resume-from copy) running on the user work pool.");
    metrics_buf_printf(b, "gptd_user_work_running %d\n", v->user_work_running);
    metrics_family(b, "gptd_user_work_waiting", "gauge",
                   "Requests waiting for a slot of the user work pool.");
    metrics_buf_printf(b, "gptd_user_work_waiting %d\n", v->user_work_waiting);
    if (!v->has_store)
        return;
    metrics_family(b, "gptd_store_requests_total", "counter", "Store commands served.");
    metrics_buf_printf(b, "gptd_store_requests_total %llu\n",
                       (unsigned long long)v->store_requests);
    metrics_family(b, "gptd_store_auth_failures_total", "counter",
                   "Store peers dropped in or before the handshake.");
    metrics_buf_printf(b, "gptd_store_auth_failures_total %llu\n",
                       (unsigned long long)v->store_auth_failures);
    metrics_family(b, "gptd_store_tag_failures_total", "counter",
                   "Authenticated store connections dropped for a bad frame tag.");
    metrics_buf_printf(b, "gptd_store_tag_failures_total %llu\n",
                       (unsigned long long)v->store_tag_failures);
    metrics_family(b, "gptd_store_refused_writes_total", "counter",
                   "Store writes and inbox records refused because their node may not make them.");
    metrics_buf_printf(b, "gptd_store_refused_writes_total %llu\n",
                       (unsigned long long)v->store_refused_writes);
    metrics_family(b, "gptd_store_clients", "gauge", "Open store connections.");
    metrics_buf_printf(b, "gptd_store_clients %zu\n", v->store_clients);
    metrics_family(b, "gptd_store_keys", "gauge", "Keys held by the store.");
    metrics_buf_printf(b, "gptd_store_keys %zu\n", v->store_keys);
    metrics_family(b, "gptd_store_data_bytes", "gauge", "Bytes of keys and values in the store.");
    metrics_buf_printf(b, "gptd_store_data_bytes %zu\n", v->store_data_bytes);
}

void metrics_text_render(struct metrics_buf *b, const struct metrics_view *v)
{
    metrics_render_daemon(b, v);
    metrics_render_jobs(b, v);
    metrics_render_nodes(b, v);
}

void metrics_text_render_process(struct metrics_buf *b, const struct metrics_process *p)
{
    metrics_family(b, "process_cpu_seconds_total", "counter",
                   "Total user and system CPU time spent in seconds.");
    metrics_buf_printf(b, "process_cpu_seconds_total");
    metrics_value(b, p->cpu_seconds);
    metrics_family(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
    metrics_buf_printf(b, "process_resident_memory_bytes %llu\n",
                       (unsigned long long)p->resident_bytes);
    metrics_family(b, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
    metrics_buf_printf(b, "process_virtual_memory_bytes %llu\n",
                       (unsigned long long)p->virtual_bytes);
    if (p->open_fds >= 0) {
        metrics_family(b, "process_open_fds", "gauge", "Number of open file descriptors.");
        metrics_buf_printf(b, "process_open_fds %lld\n", (long long)p->open_fds);
    }
    if (p->max_fds >= 0) {
        metrics_family(b, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
        metrics_buf_printf(b, "process_max_fds %lld\n", (long long)p->max_fds);
    }
    metrics_family(b, "process_start_time_seconds", "gauge",
                   "Start time of the process since unix epoch in seconds.");
    metrics_buf_printf(b, "process_start_time_seconds");
    metrics_value(b, p->start_time_seconds);
}

static void metrics_gpu_labels(struct metrics_buf *b, const char *name, const char *node,
                               const struct nvml_gpu *g)
{
    metrics_node_labels(b, name, node);
    metrics_buf_printf(b, ",gpu=\"%u\",gpu_name=\"", g->index);
    metrics_text_escape(b, g->name);
    metrics_buf_printf(b, "\",uuid=\"");
    metrics_text_escape(b, g->uuid);
    metrics_buf_printf(b, "\"}");
}

void metrics_text_render_gpus(struct metrics_buf *b, const char *node, const struct nvml_gpu *g,
                              size_t n)
{
    static const struct {
        const char *name, *help;
    } fams[] = {
        {"gptd_gpu_utilization_ratio", "GPU busy fraction over the driver's sample period."},
        {"gptd_gpu_memory_used_bytes", "GPU memory in use."},
        {"gptd_gpu_memory_total_bytes", "GPU memory installed."},
        {"gptd_gpu_temperature_celsius", "GPU core temperature."},
        {"gptd_gpu_power_watts", "GPU power draw."},
    };
    for (size_t f = 0; f < sizeof(fams) / sizeof(fams[0]); f++) {
        bool header = false;
        for (size_t i = 0; i < n; i++) {
            bool has = f == 0   ? g[i].has_util
                       : f <= 2 ? g[i].has_mem
                       : f == 3 ? g[i].has_temp
                                : g[i].has_power;
            if (!has)
                continue;
            double x = f == 0   ? g[i].util_ratio
                       : f == 1 ? (double)g[i].mem_used_bytes
                       : f == 2 ? (double)g[i].mem_total_bytes
                       : f == 3 ? g[i].temp_celsius
                                : g[i].power_watts;
            if (!header) {
                metrics_family(b, fams[f].name, "gauge", fams[f].help);
                header = true;
            }
            metrics_gpu_labels(b, fams[f].name, node, &g[i]);
            metrics_value(b, x);
        }
    }
}
