/*
 * metrics_text: renders gptd's state as Prometheus text exposition format
 * (version 0.0.4): "# HELP" / "# TYPE" once per family, then its samples,
 * names prefixed gptd_, base units (seconds, bytes, ratios), counters
 * ending in _total, label values escaped (\\, \", \n) because job names
 * are user-controlled.
 *
 * Pure: structs in, text out; no clock, no globals. Any thread (the loop
 * renders the view once a second; the HTTP thread renders the GPU part at
 * scrape time).
 */
#ifndef GPTD_METRICS_TEXT_H
#define GPTD_METRICS_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvml.h"

#define METRICS_TEXT_MAX (16u << 20) /* a rendering larger than this fails with -E2BIG */

/* A growing text buffer; err latches the first failure (-ENOMEM, -E2BIG). */
struct metrics_buf {
    char *p; /* owned; NUL-terminated when len > 0 */
    size_t len, cap;
    int err;
};

/* One job, as the coordinator's database and its newest metrics know it. */
struct metrics_job {
    int64_t id;
    char name[128];
    char overrides[512]; /* what sets a sweep's job apart: a JSON object's text; "" none */
    char sweep[64];      /* the sweep (gptctl submit -m) it belongs to; "" none */
    const char *state;   /* static string: "queued", "running", ... */
    int restarts;
    bool has_metric; /* the fields below hold the newest metric record */
    int64_t step, max_steps;
    double loss, lr, grad_norm, tokens_per_s, mfu, eta_s;
    int world_size;
    bool has_val_loss; /* newest evaluated val_loss (any earlier step) */
    double val_loss;
    bool has_snapshot;       /* newest snapshot event */
    double snapshot_time;    /* unix seconds */
    double snapshot_write_s; /* < 0: unknown */
};

/* One node of the cluster table (cluster_nodes_json). */
struct metrics_node {
    char node[64];
    char state[32];
    char devices[128];
    char version[32];
    double heartbeat_age_s;
    int workers;
    bool member; /* in the running world */
};

struct metrics_view {
    double now; /* unix seconds, for ages */
    double started;
    char node[64];       /* this gptd's node name */
    const char *role;    /* "coordinator" or "member" */
    int64_t queued_jobs; /* < 0: not known here (a member) */
    int clients;
    int user_work_running, user_work_waiting; /* sample, export, --resume-from copies */
    bool has_store;                           /* the store counters below are set (coordinator) */
    uint64_t store_requests, store_auth_failures, store_tag_failures, store_refused_writes;
    size_t store_clients, store_keys, store_data_bytes;
    const struct metrics_job *jobs;
    size_t n_jobs;
    const struct metrics_node *nodes;
    size_t n_nodes;
};

/* This process's resource use (process_stat.h); a count < 0 is unknown. */
struct metrics_process {
    double cpu_seconds;        /* user + system */
    double start_time_seconds; /* unix seconds */
    uint64_t resident_bytes, virtual_bytes;
    int64_t open_fds, max_fds;
};

/* Appends the view's families to b. */
void metrics_text_render(struct metrics_buf *b, const struct metrics_view *v);
/* Appends the GPU families (n == 0: nothing at all) of node `node`. */
void metrics_text_render_gpus(struct metrics_buf *b, const char *node, const struct nvml_gpu *g,
                              size_t n);

/* Appends the process_* families (the standard names Prometheus's client
 * libraries export: process_cpu_seconds_total, process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_open_fds, process_max_fds,
 * process_start_time_seconds), unprefixed so that dashboards made for any
 * exporter work. */
void metrics_text_render_process(struct metrics_buf *b, const struct metrics_process *p);

/* Appends `s` as a label value (escaped, without quotes). */
void metrics_text_escape(struct metrics_buf *b, const char *s);
/* Appends printf-style text. */
void metrics_buf_printf(struct metrics_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Frees the text; the buffer is empty and usable again. */
void metrics_buf_done(struct metrics_buf *b);

#endif
