/*
 * config: gptd's options, declared once in a const table (name, type,
 * default, range, reloadable, help). The table drives the config file
 * parser (`key = value` lines, # comments), the command-line flags
 * (`--key value`, `--key=value`, '-' and '_' alike), validation, the
 * generated etc/gptd.conf (`gptd --print-default-config`) and SIGHUP
 * reloads of the options marked reloadable.
 *
 * Pure apart from config_load_file (reads a file); no globals besides the
 * const table. Main/loop thread.
 */
#ifndef GPTD_CONFIG_H
#define GPTD_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gpt_err.h"

#define CONFIG_PATH_MAX     1024
#define CONFIG_NAME_MAX     64
#define CONFIG_FILE_MAX     (256u * 1024) /* a config file larger than this is refused */
#define CONFIG_LINE_MAX     4096
#define CONFIG_FILE_DEFAULT "/etc/gptd/gptd.conf"

struct config {
    char state_dir[CONFIG_PATH_MAX];
    char socket[CONFIG_PATH_MAX];
    int socket_mode;
    char socket_group[CONFIG_NAME_MAX];
    char node_name[CONFIG_NAME_MAX];
    int log_level;
    int workers;
    int max_clients;
    int max_queued_jobs;
    int max_queued_jobs_per_uid; /* queued jobs of one uid (root: no cap) */
    int user_max_priority;       /* the highest priority a uid but root may submit with */
    int max_followers_per_job;
    int64_t client_output_max_bytes;
    int max_clients_per_uid;   /* control connections one uid may hold */
    int client_idle_timeout_s; /* 0: an idle control connection is never closed */
    int64_t max_job_memory;    /* bytes one job may need on a node; 0: the node's memory */
    int sample_max_tokens;
    int sample_history; /* `sample` replies kept per job (db_sample_insert) */
    /* the user work pool (daemon/userwork.h): sample, export, resume-from copies */
    int user_work_threads;
    int user_work_per_uid;
    int user_work_queue_max;
    int user_work_queue_per_uid;
    int64_t user_work_max_memory; /* 0: max_job_memory, else the node's memory */
    /* Where jobs may read data and write snapshots (':'-separated roots;
     * the state directory is always a snapshot root). */
    char data_roots[CONFIG_PATH_MAX];
    char snapshot_roots[CONFIG_PATH_MAX];

    /* cluster (daemon/cluster.h); no rdzv and not coordinator: one node */
    char rdzv[CONFIG_PATH_MAX];
    int coordinator;
    char secret_file[CONFIG_PATH_MAX];
    char bind_host[CONFIG_NAME_MAX];
    double heartbeat_s;
    double dead_after_s;
    double last_call_s;
    int admit_snapshot_steps;
    int comm_timeout_s;

    /* read-only HTTP listener (daemon/http.h); empty http: none */
    char http[CONFIG_NAME_MAX];
    char http_token_file[CONFIG_PATH_MAX];
    char http_allowed_hosts[CONFIG_PATH_MAX];
    int http_max_connections;
    int http_timeout_s;
    int64_t http_request_max_bytes;
};

/* Writes every default. */
void config_defaults(struct config *c);

/* Sets one option from text. `key` may spell '_' as '-'. Unknown keys,
 * bad values and out-of-range numbers are -EINVAL with the key as path. */
int config_set(struct config *c, const char *key, const char *value, struct gpt_err *err);

/* Applies a config file over *c. Errors name "FILE:LINE". -ENOENT when the
 * file does not exist. Blocks (file I/O). */
int config_load_file(struct config *c, const char *path, struct gpt_err *err);

/* Cross-option checks and derived defaults: an empty socket becomes
 * $RUNTIME_DIRECTORY/gptd.sock (systemd's RuntimeDirectory=) or
 * /run/gptd/gptd.sock; an empty node_name becomes the host name. The
 * `http` options are the HTTP listener's to check (http.h; the daemon
 * calls both). */
int config_finish(struct config *c, struct gpt_err *err);

/* Copies the reloadable options of `fresh` into `live`. For each option
 * that differs, calls fn(ctx, key, reloadable) so the caller can log what
 * changed and what needs a restart. */
void config_reload(struct config *live, const struct config *fresh,
                   void (*fn)(void *ctx, const char *key, bool applied), void *ctx);

/* Writes the documented default config file (what etc/gptd.conf holds). */
void config_print_defaults(FILE *f);
/* Writes the effective configuration as `key = value` lines. */
void config_print(const struct config *c, FILE *f);
/* Writes one "  --key  first sentence of its help (default ...)" line per
 * option, for --help. */
void config_print_flags(FILE *f);
/* The option closest to `name` (without "--"; '-' and '_' alike) as a flag
 * name ("state-dir") in buf, or NULL when none is within a few edits. */
const char *config_suggest(const char *name, char *buf, size_t cap);
/* True when `name` (without the leading "--") is an option. */
bool config_is_option(const char *name);
/* True when `name` is a yes/no option, which a bare flag sets to yes. */
bool config_is_bool(const char *name);

#endif
