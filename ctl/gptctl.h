/*
 * gptctl: private header of the command-line client (every file of ctl/).
 *
 *   gptctl.c        main: global options and the command table (dispatch, usage)
 *   cmd_submit.c    `submit` (and -m sweeps), `validate`
 *   cmd_list.c      `list`, `sweep`
 *   cmd_status.c    `status`, `nodes`
 *   cmd_logs.c      `logs`, and the logs stream submit --follow prints
 *   cmd_job.c       `cancel`, `resume`, `snapshots`: one job by id
 *   cmd_sample.c    `sample`, `samples`
 *   cmd_export.c    `export`, and submit's --init-from lookup
 *   plot.c          `plot`: a job's loss curve as SVG
 *   args.c          usage errors, JOB and JOB:SNAPSHOT arguments
 *   conn.c          the connection to gptd: one request out, reply lines in
 *   output.c        tables, number/time formats, the logs view, escaping
 *
 * Calls run one way: gptctl.c -> the cmd_*.c files (cmd_submit.c ->
 * cmd_logs.c and cmd_export.c, no other arrow between them), and each
 * command file -> args.c, conn.c -> output.c; nothing calls back up.
 * Single-threaded; blocking I/O. Exit status: 0 ok, 1 the request failed,
 * 2 usage, 3 cannot reach gptd.
 */
#ifndef GPTCTL_H
#define GPTCTL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ctl.h"

#define EXIT_FAIL    1
#define EXIT_USAGE   2
#define EXIT_NOREACH 3

#define CTL_REPLY_MAX    (64u << 20) /* longest reply line accepted */
#define CTL_OVERRIDE_MAX 64
#define CTL_PLOT_MAX     1000000 /* points kept for a plot */

extern const char *const ctl_prog; /* "gptctl", the prefix of messages */

struct ctl {
    const char *socket;
    bool json;
    bool offline_ok; /* ctl_connect: no gptd listening is not an error to print */
    int fd;
    int64_t next_id;
    struct gpt_ctl_linebuf lb;
};

/* One option of a command: --name (and -short_name when not 0), taking a
 * value named `arg` (NULL: a flag). */
struct ctl_opt {
    const char *name;
    char short_name;
    const char *arg;
    const char *help;
};
#define CTL_OPTS_MAX 16 /* options of one command */

/* One command: a row of the table in gptctl.c. `synopsis`, `help`, `opts`
 * (ended by a NULL name) and `example` make the usage texts and are what
 * gptctl(1) and the bash completion are checked against; `op` is the
 * control op it sends (a hint for commands that serve several ops).
 * Returns the exit status. */
struct ctl_cmd {
    const char *name;
    const char *synopsis; /* after the name */
    const char *help;
    int (*run)(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv);
    int op; /* enum gpt_ctl_op */
    const struct ctl_opt *opts;
    const char *example; /* one command line */
};

/* args.c: names the command whose help a usage error points to. */
void ctl_usage_set_command(const char *name);
/* args.c: a usage error on stderr; returns EXIT_USAGE. */
int ctl_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* args.c: parses an integer argument named `what` (for the message); on
 * failure prints a usage error, sets *ok false and returns 0. */
int64_t ctl_parse_int(const char *s, const char *what, bool *ok);
/* args.c: parses a JOB argument (>= 1); false after printing a usage error. */
bool ctl_parse_job(const char *s, int64_t *ret);
/* args.c: JOB or JOB:SNAPSHOT of --init-from / --resume-from (`flag`, for the
 * message): 0, or EXIT_USAGE after saying what was wrong. *ret_snap 0 when
 * no snapshot was given. */
int ctl_job_snapshot_parse(const char *flag, const char *arg, int64_t *ret_job, int64_t *ret_snap);

/* conn.c. Each returns 0 or an exit status, the error already printed. */
int ctl_connect(struct ctl *c);
/* Sends a request (takes `req`). */
int ctl_send(struct ctl *c, json_t *req);
/* Reads the next reply line into a new object; with --json and `echo` the
 * raw line is printed too. */
int ctl_recv(struct ctl *c, json_t **ret, bool echo);
/* Sends `req` (taken) and waits for its one reply; 0 with an ok reply. */
int ctl_call(struct ctl *c, json_t *req, json_t **ret);
/* A new request object for `op` with the next id (NULL on ENOMEM). */
json_t *ctl_request(struct ctl *c, int op);
/* Prints an error reply (escaped); returns EXIT_FAIL. */
int ctl_print_error(const json_t *reply);

/* output.c */
/* `s` (NULL: "-") with control characters and invalid UTF-8 escaped
 * (proto/str_escape.h); `flags` GPT_STR_ESCAPE_*. Returns a buffer owned
 * by output.c, valid until the OUT_ESC_SLOTS-th next call. */
#define OUT_ESC_SLOTS 8
const char *out_esc(const char *s, unsigned flags);

#define TABLE_COLS 10
/* A table printed with each column as wide as its widest cell. Cells are
 * escaped as they are added. */
struct table {
    int ncols, nrows, cap;
    char *(*cells)[TABLE_COLS];
    bool right[TABLE_COLS];
};
void table_row(struct table *t, ...);
/* Prints and frees the rows. */
void table_print(struct table *t);

const char *fmt_int(char *buf, size_t cap, const json_t *v);
/* A number with `prec` decimals, or with 3 significant digits when prec < 0. */
const char *fmt_real(char *buf, size_t cap, const json_t *v, int prec);
const char *fmt_time(char *buf, size_t cap, const json_t *v);
const char *fmt_duration(char *buf, size_t cap, double s);
const char *fmt_rate(char *buf, size_t cap, double v);
/* A byte count for people: "512 B", "158.4 KiB", "1.2 GiB"; "-" when absent. */
const char *fmt_bytes(char *buf, size_t cap, const json_t *v);
/* A job's "overrides" object as "lr=1e-3 n_embd=48" (each key's last
 * part); "" when it has none. Not escaped (a table escapes its cells). */
const char *fmt_overrides(char *buf, size_t cap, const json_t *over);
/* A node's "gpus" array (nvml.h) as one cell: each GPU's utilisation
 * ("87%") or memory ("40.0/140.4G"), joined by " "; "-" where a GPU does not
 * report it, "-" for no GPU (a CPU host) or a node that sends none. */
const char *fmt_gpus_util(char *buf, size_t cap, const json_t *gpus);
const char *fmt_gpus_mem(char *buf, size_t cap, const json_t *gpus);
/* A job's "rank_step_ms" (each rank's compute ms per step) as one line:
 * "0: 12.1  1: 30.5  (slowest: rank 1, 2.5x the fastest)"; NULL when absent. */
const char *fmt_rank_ms(char *buf, size_t cap, const json_t *ms);

/* The logs view: a progress bar on a terminal, plain lines otherwise. */
struct logs_view {
    bool tty;
    bool bar_shown;
};
void logs_clear_bar(struct logs_view *v);
void logs_print_metric(struct logs_view *v, const json_t *o);
void logs_print_event(struct logs_view *v, const json_t *o);
/* A metric record as a CSV row (metric_csv.h's columns). */
void logs_print_csv(const json_t *o);

/* The commands of the table, one file per subject (cmd_NAME.c). Each
 * returns the exit status. */
/* cmd_submit.c: submit and validate */
int cmd_submit(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv);
/* cmd_list.c */
int cmd_list(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv);
int cmd_sweep(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv);
/* cmd_status.c */
int cmd_status(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv);
int cmd_nodes(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv);
/* cmd_logs.c */
int cmd_logs(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv);
/* Sends a logs request for `job` on the connected c (follow: until the job
 * ends; since > 0: records after that step; csv: metrics as CSV rows) and
 * prints the stream. 0, or EXIT_FAIL when a followed job did not
 * complete, or another exit status (the error printed). */
int ctl_logs_request(struct ctl *c, int64_t job, bool follow, int64_t since, bool csv);
/* cmd_job.c: cancel, resume and snapshots */
int cmd_job_op(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv);
/* cmd_sample.c */
int cmd_sample(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv);
int cmd_samples(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv);

/* cmd_export.c */
int cmd_export(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv);
/* submit --init-from JOB[:SNAPSHOT]: writes "model.init_from=PATH" (the
 * snapshot's path; the newest when none is named) into ret after checking
 * that the job is the caller's. Connects c when it is not. 0 or an exit
 * status (the error printed). */
int ctl_init_from_path(struct ctl *c, const char *arg, char *ret, size_t cap);

/* plot.c */
int cmd_plot(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv);

#endif
