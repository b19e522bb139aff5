/*
 * daemon: `gptd [--config FILE] [--state-dir DIR] [--socket PATH] [...]`,
 * the long-running daemon in the foreground (systemd style). Parses the
 * options, opens the database, listens on the control socket, runs the
 * libuv loop, reloads on SIGHUP and stops cleanly on SIGTERM/SIGINT (a
 * running job writes a snapshot and resumes on the next start).
 *
 * Runs on the main thread, which is the loop thread.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "blas_select.h"
#include "cli.h"
#include "control_limits.h"
#include "daemon.h"
#include "devices.h"
#include "export_tmp.h"
#include "factory.h"
#include "fdlimit.h"
#include "gpu_plan.h"
#include "hostport.h"
#include "http.h"
#include "http_collect.h"
#include "log.h"
#include "rdzv.h"
#include "notify.h"
#include "secret.h"
#include "statedir.h"
#include "store_client.h"
#include "suggest.h"

#define DAEMON_RDZV_DEFAULT    "127.0.0.1:29400"
#define DAEMON_EMBEDDED_HOST   "127.0.0.1"
#define DAEMON_EMBEDDED_KEY    "cluster.secret" /* in the state directory */
#define DAEMON_INSTANCE_FILE   "node.instance"  /* in the state directory */
#define DAEMON_LEAVE_TIMEOUT_S 15.0             /* a leaving member waits this long for its world */
#define DAEMON_FORCE_GRACE_S   10.0 /* a third stop signal waits at most this for the snapshot */

struct daemon_args {
    const char *config_file; /* NULL: CONFIG_FILE_DEFAULT if it exists */
    int argc;                /* the option flags, re-applied on reload */
    char **argv;
};

struct daemon_main {
    struct daemon_ctx d;
    struct daemon_args args;
    uv_loop_t loop;
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t notify_timer; /* systemd watchdog and STATUS= line */
    char status[NOTIFY_STATUS_MAX];
    bool gone_logged; /* the state directory's loss was logged (db_state_check) */
    /* Stop signals (SIGTERM, SIGINT) received; see daemon_on_stop_signal. */
    int stop_signals;
    bool jobs_stopped;            /* the running job has stopped (with its snapshot) */
    bool member_left;             /* a member's world went on without it (or it had none) */
    bool force_armed;             /* a third signal: exit once the snapshot attempt ended */
    bool forced;                  /* the loop was stopped without closing its handles */
    uv_timer_t force_timer;       /* bounds the wait of a forced exit (DAEMON_FORCE_GRACE_S) */
    struct http *http;            /* the HTTP listener (its own thread); NULL: off */
    struct http_collect *collect; /* loop side of /metrics */
};

static void daemon_usage(FILE *f)
{
    fprintf(f,
            "usage: gptd [--config FILE] [--OPTION VALUE ...]\n"
            "       gptd run JOB.json [a.b=value ...] [options]\n"
            "       gptd tokenize --tokenizer gpt2 --vocab DIR -o PREFIX FILE...\n"
            "       gptd export SNAPSHOT --format hf|llmc|gguf -o PATH\n"
            "\n"
            "Runs the gptd daemon in the foreground: the job queue, the control socket\n"
            "gptctl talks to, and the training workers.\n"
            "\n"
            "commands (each has its own --help):\n"
            "  run                          train one job in the foreground, without a daemon\n"
            "  tokenize                     turn text files into a token file for data.path\n"
            "  export                       write a snapshot as Hugging Face, llm.c or GGUF\n"
            "\n"
            "  --config FILE                options file (default %s if present)\n"
            "  --print-default-config       print the documented defaults (etc/gptd.conf)\n"
            "  --print-config               print the effective options and exit\n"
            "  --check-config               validate the options and exit\n"
            "  --version                    print the version and exit\n"
            "  --help                       this text (also -h)\n"
            "\n"
            "options (also valid as \"key = value\" in the config file):\n",
            CONFIG_FILE_DEFAULT);
    config_print_flags(f);
}

/* Builds a configuration: defaults, then the file, then the flags. */
static int daemon_build_config(const struct daemon_args *a, struct config *c, struct gpt_err *err)
{
    config_defaults(c);
    if (a->config_file) {
        int rc = config_load_file(c, a->config_file, err);
        if (rc < 0)
            return rc;
    } else {
        /* GPTD_CONFIG names another default file (the test suite points it
         * at /dev/null, so an installed /etc/gptd/gptd.conf never leaks in). */
        const char *def = getenv("GPTD_CONFIG");
        int rc = config_load_file(c, def && def[0] ? def : CONFIG_FILE_DEFAULT, err);
        if (rc < 0 && rc != -ENOENT)
            return rc;
    }
    for (int i = 0; i < a->argc; i++) {
        const char *flag = a->argv[i] + 2;
        const char *eq = strchr(flag, '=');
        char key[CONFIG_NAME_MAX];
        const char *value;
        if (eq) {
            snprintf(key, sizeof(key), "%.*s", (int)(eq - flag), flag);
            value = eq + 1;
        } else {
            snprintf(key, sizeof(key), "%s", flag);
            value = a->argv[++i];
        }
        struct gpt_err e2;
        int rc = config_set(c, key, value, &e2);
        if (rc < 0)
            return gpt_err_set(err, rc, e2.path, "--%s: %s", key, e2.msg);
    }
    int rc = config_finish(c, err);
    bool loopback;
    if (rc == 0 && c->http[0])
        rc = http_addr_check(c->http, c->http_token_file, &loopback, err);
    return rc < 0 ? rc : http_hosts_check(c->http_allowed_hosts, err);
}

static int daemon_mkdir(const char *path, struct gpt_err *err)
{
    if (mkdir(path, 0750) < 0 && errno != EEXIST)
        return gpt_err_set(err, -errno, NULL, "mkdir %s: %s", path, strerror(errno));
    return 0;
}

/* The state directory lists nothing to anyone but gptd: no read or write
 * bit for group or others (an existing folder is fixed too). Its search
 * bits stay: users reach their jobs' snapshot folders through it. */
static int daemon_state_dir_private(const char *path, struct gpt_err *err)
{
    if (mkdir(path, 0700) < 0 && errno != EEXIST)
        return gpt_err_set(err, -errno, NULL, "mkdir %s: %s", path, strerror(errno));
    struct stat st;
    if (stat(path, &st) < 0)
        return gpt_err_set(err, -errno, NULL, "state directory %s: %s", path, strerror(errno));
    mode_t want = st.st_mode & 07777 & ~(mode_t)(S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH);
    if (want != (st.st_mode & 07777) && chmod(path, want) < 0)
        return gpt_err_set(err, -errno, NULL, "chmod %s: %s", path, strerror(errno));
    return 0;
}

/* A coordinator's secret when none is named: <state_dir>/cluster.secret,
 * made once (32 random bytes, hex, mode 0600) so that only who may read the
 * state directory can join or talk to its store. A cluster always has one. */
static int daemon_embedded_secret(const char *state_dir, char *path, size_t cap,
                                  struct gpt_err *err)
{
    int k = snprintf(path, cap, "%s/" DAEMON_EMBEDDED_KEY, state_dir);
    if (k < 0 || (size_t)k >= cap)
        return gpt_err_set(err, -ENAMETOOLONG, "state_dir", "state directory too long");
    return secret_file_ensure(path, err);
}

/* This node's instance: a random number made once per state directory
 * (STATE_DIR/node.instance, written as a secret is), so that the
 * coordinator tells a restart of this node (same state directory, same
 * instance) from another gptd that took the same node id. */
static int daemon_node_instance(const char *state_dir, uint64_t *ret, struct gpt_err *err)
{
    char path[CONFIG_PATH_MAX + 32], hex[17] = "";
    int k = snprintf(path, sizeof(path), "%s/" DAEMON_INSTANCE_FILE, state_dir);
    if (k < 0 || (size_t)k >= sizeof(path))
        return gpt_err_set(err, -ENAMETOOLONG, "state_dir", "state directory too long");
    int rc = secret_file_ensure(path, err);
    if (rc < 0)
        return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return gpt_err_set(err, -errno, NULL, "%s: %s", path, strerror(errno));
    ssize_t n = read(fd, hex, 16);
    close(fd);
    char *end = NULL;
    uint64_t v = n == 16 ? strtoull(hex, &end, 16) : 0;
    if (n != 16 || !end || *end || v == 0)
        return gpt_err_set(err, -EINVAL, NULL,
                           "%s: not a node instance (16 hex digits); remove it to make a new one",
                           path);
    *ret = v;
    return 0;
}

static void daemon_on_handle_closed(uv_handle_t *h)
{
    (void)h;
}

/* Last step of a stop: close everything so the loop ends. */
static void daemon_on_userwork_closed(void *ctx)
{
    struct daemon_main *m = ctx;
    m->d.userwork = NULL; /* freed */
    log_info("stopped; state saved in %s", m->d.cfg.state_dir);
    http_stop(m->http); /* joins the HTTP thread; it holds no loop object */
    m->http = NULL;
    http_collect_free(m->collect);
    m->collect = NULL;
    control_close(m->d.ctl);
    m->d.ctl = NULL;
    mirror_free(m->d.mirror);
    m->d.mirror = NULL;
    jobs_free(m->d.jobs);
    m->d.jobs = NULL;
    uv_close((uv_handle_t *)&m->notify_timer, daemon_on_handle_closed);
    uv_close((uv_handle_t *)&m->sig_term, daemon_on_handle_closed);
    uv_close((uv_handle_t *)&m->sig_int, daemon_on_handle_closed);
    uv_close((uv_handle_t *)&m->sig_hup, daemon_on_handle_closed);
    uv_close((uv_handle_t *)&m->force_timer, daemon_on_handle_closed);
    /* Closing the last handle of a signal restores its default action,
     * which would kill gptd now, with the state already saved, with a
     * status that says otherwise (128 + signal): ignore what comes late. */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
}

/* User work was told to stop at the first signal: once it has (a sample
 * at its next token, an export at its next tensor), its clients are
 * answered, and then the control socket closes. */
static void daemon_on_cluster_closed(void *ctx)
{
    struct daemon_main *m = ctx;
    userwork_close(m->d.userwork, daemon_on_userwork_closed, m);
}

static void daemon_on_agent_closed(void *ctx)
{
    struct daemon_main *m = ctx;
    m->d.agent = NULL;
    if (m->d.cluster) {
        struct cluster *c = m->d.cluster;
        m->d.cluster = NULL;
        cluster_close(c, daemon_on_cluster_closed, m);
    } else {
        daemon_on_cluster_closed(m);
    }
}

/* A forced exit (third stop signal): the snapshot attempt has ended, or
 * DAEMON_FORCE_GRACE_S passed. The loop stops with handles open and
 * gptd_daemon_main returns GPTD_EXIT_FORCED, so that main() exits without
 * running exit handlers under worker threads that may still be running. The
 * job's state is recorded already (requeued) or, if the grace ran out, it
 * is recovered on the next start like after a crash. */
static void daemon_force_exit(struct daemon_main *m, const char *why)
{
    if (m->forced)
        return;
    m->forced = true;
    log_notice("exiting now (%s)", why);
    control_stop_listening(m->d.ctl);
    uv_stop(&m->loop);
}

static void daemon_force_check(struct daemon_main *m)
{
    bool member = m->d.agent && m->d.cluster && !cluster_is_coordinator(m->d.cluster);
    if (m->force_armed && m->jobs_stopped && (!member || m->member_left))
        daemon_force_exit(m, "third stop signal; the snapshot attempt has ended");
}

static void daemon_on_force_timer(uv_timer_t *h)
{
    daemon_force_exit(h->data, "third stop signal; the snapshot did not end in time");
}

static void daemon_on_left(void *ctx)
{
    struct daemon_main *m = ctx;
    m->member_left = true;
    daemon_force_check(m);
    if (m->forced)
        return;
    agent_close(m->d.agent, daemon_on_agent_closed, m);
}

static void daemon_on_leave_sent(void *ctx)
{
    struct daemon_main *m = ctx;
    agent_leave(m->d.agent, DAEMON_LEAVE_TIMEOUT_S, daemon_on_left, m);
}

/* The job has stopped (or none ran): this node's workers go, then the
 * cluster connection, then everything else. A member first says it is
 * leaving, so that the world re-forms without it instead of counting a
 * failure, and lets its workers stop with the world's snapshot. */
static void daemon_on_jobs_stopped(void *ctx)
{
    struct daemon_main *m = ctx;
    m->jobs_stopped = true;
    daemon_force_check(m);
    if (m->forced)
        return;
    if (m->d.agent && m->d.cluster && !cluster_is_coordinator(m->d.cluster))
        cluster_leave(m->d.cluster, daemon_on_leave_sent, m);
    else if (m->d.agent)
        agent_close(m->d.agent, daemon_on_agent_closed, m);
    else
        daemon_on_agent_closed(m);
}

/* What this node's GPUs allow, before any thread exists (gpu_plan.h): the
 * GPUs seen go to the log, a `workers` above them stops gptd, and NCCL is
 * pointed at the interface of the address this node registers (the one
 * daemon_cluster_start gives the cluster). */
static int daemon_gpu_plan(const struct config *cfg, struct gpt_err *err)
{
    int gpus = gpt_device_count();
    char summary[128];
    devices_summary(summary, sizeof(summary));
    log_info("%d GPU%s seen (%s)", gpus, gpus == 1 ? "" : "s", summary);
    int rc = gpu_plan_check_workers(cfg->workers, gpus, "workers", err);
    if (rc < 0 || gpus == 0)
        return rc;
    const char *bind = cfg->bind_host[0] ? cfg->bind_host : "127.0.0.1";
    char ifname[64];
    int derived = 0;
    rc = gpu_plan_nccl_env(bind, ifname, sizeof(ifname), &derived);
    if (rc < 0)
        log_warn("NCCL: no interface holds %s (%s); NCCL picks one itself (set "
                 "NCCL_SOCKET_IFNAME to choose)",
                 bind, gpt_strerror(rc));
    else if (derived)
        log_info("NCCL: NCCL_SOCKET_IFNAME==%s, the interface of %s", ifname, bind);
    else
        log_info("NCCL: NCCL_SOCKET_IFNAME=%s, as the environment set it", ifname);
    return 0;
}

/* Joins the cluster at `rdzv`, or serves it (coordinator). With neither,
 * this gptd is the coordinator of its own cluster on loopback at an
 * ephemeral port (the embedded default): `gptctl nodes` / `status` show the
 * endpoint, and another gptd on this host joins it with --rdzv and the
 * secret in the state directory. */
static int daemon_cluster_start(struct daemon_ctx *d, struct gpt_err *err)
{
    const struct config *cfg = &d->cfg;
    bool embedded = !cfg->rdzv[0] && !cfg->coordinator;
    const char *ep = cfg->rdzv[0] ? cfg->rdzv
                     : embedded   ? DAEMON_EMBEDDED_HOST ":0"
                                  : DAEMON_RDZV_DEFAULT;
    char host[CLUSTER_HOST_MAX];
    int port_i = 0;
    int rc0 = hostport_parse(ep, embedded ? 0 : 1, "rdzv", host, sizeof(host), &port_i, err);
    if (rc0 < 0)
        return rc0;
    long port = port_i;
    char secret_path[CONFIG_PATH_MAX + 32];
    snprintf(secret_path, sizeof(secret_path), "%s", cfg->secret_file);
    if ((embedded || cfg->coordinator) && !secret_path[0]) {
        int rc = daemon_embedded_secret(cfg->state_dir, secret_path, sizeof(secret_path), err);
        if (rc < 0)
            return rc;
    }
    uint8_t secret[STORE_SECRET_MAX]; /* copied by the cluster and the agent */
    size_t secret_len = 0;
    if (secret_path[0]) {
        int rc = store_secret_load(secret_path, secret, sizeof(secret), &secret_len, err);
        if (rc < 0)
            return rc;
    }
    uint64_t instance = 0;
    int rc1 = daemon_node_instance(cfg->state_dir, &instance, err);
    if (rc1 < 0)
        return rc1;
    const char *bind = cfg->bind_host[0] ? cfg->bind_host : "127.0.0.1";
    bool co_coordinator = cfg->coordinator != 0 || embedded;
    struct cluster_opts co = {
        .node_id = cfg->node_name,
        .instance = instance,
        .host = host,
        .port = (int)port,
        .coordinator = co_coordinator,
        .secret = secret,
        .secret_len = secret_len,
        .secret_file = secret_path,
        .secret_hint = co_coordinator && secret_path[0] ? secret_path : "",
        .state_dir = cfg->state_dir,
        .heartbeat_s = cfg->heartbeat_s,
        .dead_after_s = cfg->dead_after_s,
        .last_call_s = cfg->last_call_s,
        .admit_snapshot_steps = cfg->admit_snapshot_steps,
        .addr = bind,
        .workers = cfg->workers,
        .version = GPTD_VERSION,
    };
    int rc = cluster_new(d->loop, &co, &d->cluster, err);
    if (rc < 0) {
        if (embedded && rc == -EADDRINUSE)
            gpt_err_set(err, rc, "rdzv", "%s (set rdzv = HOST:PORT to serve elsewhere)", err->msg);
        return rc;
    }
    port = cluster_port(d->cluster);
    struct agent_opts ao = {
        .node_id = cfg->node_name,
        .state_dir = cfg->state_dir,
        .host = host,
        .port = (int)port,
        .secret = secret,
        .secret_len = secret_len,
        .bind_host = bind,
        .workers = cfg->workers,
        .comm_timeout_ms = cfg->comm_timeout_s * 1000,
        .snapshot_dir_own = co.coordinator,
        .data_roots = cfg->data_roots,
        .snapshot_roots = cfg->snapshot_roots,
    };
    rc = agent_new(d->loop, d->cluster, &ao, &d->agent, err);
    if (rc < 0) {
        cluster_close(d->cluster, NULL, NULL);
        d->cluster = NULL;
        return rc;
    }
    if (co.coordinator) {
        jobs_set_cluster(d->jobs, d->cluster);
        cluster_set_read_hook(d->cluster, handler_read, d);
    } else if (!(d->mirror = mirror_new(d->cluster, d->ctl, &d->cfg))) {
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    }
    if (embedded)
        log_notice("cluster: node %s is the coordinator of its own cluster; store at %s:%ld"
                   " (another gptd on this host joins with --rdzv %s:%ld --secret-file %s)",
                   cfg->node_name, host, port, host, port, secret_path);
    else
        log_info("cluster: node %s, %s, store at %s:%ld", cfg->node_name,
                 co.coordinator ? "coordinator" : "member", host, port);
    return 0;
}

/* Stop signals, in any mix of SIGTERM and SIGINT and at any spacing:
 *  1st: a clean stop. The running job writes a snapshot at its next step
 *       boundary and is requeued; a member first leaves its world; then
 *       the cluster, the agent and the control socket close in order.
 *  2nd: acknowledged only. The snapshot of the first is kept (stopping the
 *       job without it would lose the steps since the last one).
 *  3rd and later: gptd exits as soon as the snapshot attempt has ended
 *       (the job stopped; a member's world went on without it), skipping
 *       the orderly close of the cluster connections, and at the latest
 *       DAEMON_FORCE_GRACE_S after this signal.
 * Every path ends with the socket removed and the process gone. */
static void daemon_on_stop_signal(uv_signal_t *h, int signum)
{
    struct daemon_main *m = h->data;
    m->stop_signals++;
    if (m->stop_signals == 1) {
        log_notice("%s: stopping", strsignal(signum));
        (void)notify_stopping();
        m->d.stopping = true;
        /* User work ends now (a sample at its next token, an export at its
         * next tensor): the stop waits only for the job's snapshot. */
        userwork_stop(m->d.userwork);
        control_stop_listening(m->d.ctl);
        jobs_shutdown(m->d.jobs, daemon_on_jobs_stopped, m);
    } else if (m->stop_signals == 2) {
        log_notice("%s again: already stopping, after the snapshot; a third signal exits as soon"
                   " as the snapshot is written (at most %.0f s later)",
                   strsignal(signum), DAEMON_FORCE_GRACE_S);
    } else if (!m->force_armed) {
        log_notice("%s a third time: exiting once the snapshot attempt has ended",
                   strsignal(signum));
        m->force_armed = true;
        uv_timer_start(&m->force_timer, daemon_on_force_timer,
                       (uint64_t)(DAEMON_FORCE_GRACE_S * 1000), 0);
        daemon_force_check(m);
    }
}

static void daemon_on_reload_key(void *ctx, const char *key, bool applied)
{
    (void)ctx;
    if (applied)
        log_notice("reload: %s changed", key);
    else
        log_warn("reload: %s changed in the configuration but needs a restart", key);
}

static void daemon_on_hup(uv_signal_t *h, int signum)
{
    (void)signum;
    struct daemon_main *m = h->data;
    struct config fresh;
    struct gpt_err err;
    if (m->d.stopping) {
        /* The agent and the cluster may be half closed; and READY=1 must not
         * follow STOPPING=1. */
        log_notice("SIGHUP while stopping: ignored");
        return;
    }
    log_notice("SIGHUP: reloading the configuration");
    (void)notify_reloading();
    if (daemon_build_config(&m->args, &fresh, &err) < 0)
        log_error("reload failed, keeping the current configuration: %s", err.msg);
    else
        config_reload(&m->d.cfg, &fresh, daemon_on_reload_key, NULL);
    log_set_level(m->d.cfg.log_level);
    if (m->d.cluster)
        cluster_set_workers(m->d.cluster, m->d.cfg.workers);
    if (m->d.agent)
        agent_set_workers(m->d.agent, m->d.cfg.workers);
    (void)notify_ready();
}

/* Renders /metrics from the loop's state and hands the text to the HTTP
 * thread (http.h): the only way data crosses to it. */
static void daemon_http_publish(struct daemon_main *m)
{
    if (!m->http || m->d.stopping)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct metrics_buf b = {0};
    double now = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    struct http_collect_src src = {.db = m->d.db,
                                   .cluster = m->d.cluster,
                                   .ctl = m->d.ctl,
                                   .userwork = m->d.userwork,
                                   .node = m->d.cfg.node_name,
                                   .started = m->d.started};
    http_collect_render(m->collect, &src, now, &b);
    if (b.err)
        log_warn("metrics: cannot render: %s", strerror(-b.err));
    else
        http_publish(m->http, &b);
    metrics_buf_done(&b);
    char *jobs = NULL, *nodes = NULL;
    http_collect_api(m->collect, &src, now, &jobs, &nodes);
    http_publish_api(m->http, jobs, nodes);
}

/* Starts the HTTP listener when `http` is set. */
static int daemon_http_start(struct daemon_main *m, struct gpt_err *err)
{
    const struct config *cfg = &m->d.cfg;
    if (!cfg->http[0])
        return 0;
    char db_path[CONFIG_PATH_MAX + 32];
    snprintf(db_path, sizeof(db_path), "%s/gptd.db", cfg->state_dir);
    struct http_opts ho = {
        .addr = cfg->http,
        .token_file = cfg->http_token_file,
        .allowed_hosts = cfg->http_allowed_hosts,
        .max_connections = cfg->http_max_connections,
        .timeout_s = cfg->http_timeout_s,
        .request_max_bytes = (size_t)cfg->http_request_max_bytes,
        .node = cfg->node_name,
        .db_path = db_path,
    };
    int port = 0;
    if (!(m->collect = http_collect_new()))
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    int rc = http_start(&ho, &m->http, &port, err);
    if (rc < 0)
        return rc;
    char host[64];
    int ignored;
    if (hostport_parse(cfg->http, 0, "http", host, sizeof(host), &ignored, NULL) < 0)
        snprintf(host, sizeof(host), "?");
    log_notice("http: serving /metrics on %s%s%s:%d%s%s", strchr(host, ':') ? "[" : "", host,
               strchr(host, ':') ? "]" : "", port,
               cfg->http_token_file[0] ? " (bearer token required)" : "",
               http_has_gpus(m->http) ? ", with GPU telemetry" : "");
    return 0;
}

/* The loop's periodic tick (at most 1 s): for systemd, WATCHDOG=1 proves
 * the loop turns and STATUS= carries a one-line state when it changed; idle
 * control clients are closed (control_limits_sweep). */
static void daemon_on_notify_timer(uv_timer_t *h)
{
    struct daemon_main *m = h->data;
    struct daemon_ctx *d = &m->d;
    char status[NOTIFY_STATUS_MAX];
    const char *role = !d->cluster                          ? "standalone"
                       : cluster_is_coordinator(d->cluster) ? "coordinator"
                                                            : "member";
    int64_t job = d->jobs ? jobs_running(d->jobs) : 0;
    struct gpt_err gone;
    bool is_gone = d->db && db_state_check(d->db, &gone) < 0;
    if (is_gone && !m->gone_logged) {
        m->gone_logged = true;
        log_error("%s", gone.msg);
    }
    if (is_gone) /* refusing writes: systemd's status line says why */
        snprintf(status, sizeof(status), "%s %s: %.*s", role, d->cfg.node_name,
                 (int)(sizeof(status) / 2), gone.msg);
    else if (d->stopping)
        snprintf(status, sizeof(status), "%s %s: stopping", role, d->cfg.node_name);
    else if (job)
        snprintf(status, sizeof(status), "%s %s: job %lld running%s%s", role, d->cfg.node_name,
                 (long long)job, d->agent ? ", agent " : "", d->agent ? agent_state(d->agent) : "");
    else
        snprintf(status, sizeof(status), "%s %s: idle%s%s", role, d->cfg.node_name,
                 d->agent ? ", agent " : "", d->agent ? agent_state(d->agent) : "");
    if (strcmp(status, m->status) != 0) {
        snprintf(m->status, sizeof(m->status), "%s", status);
        (void)notify_status("%s", status);
    }
    (void)notify_watchdog();
    control_limits_sweep(d->ctl, &d->cfg, uv_now(&m->loop));
    if (m->http)
        (void)http_sweep(m->http);
    daemon_http_publish(m);
}

static void daemon_on_request(void *ctx, struct control_client *cl, struct gpt_ctl_request *req)
{
    handler_dispatch(ctx, cl, req);
}

static void daemon_on_drained(void *ctx, struct control_client *cl)
{
    struct daemon_ctx *d = ctx;
    if (cl->logs.remote) {
        if (d->mirror)
            mirror_client_drained(d->mirror, cl);
    } else if (d->jobs) {
        jobs_client_drained(d->jobs, cl);
    }
}

static void daemon_on_closed(void *ctx, struct control_client *cl)
{
    struct daemon_ctx *d = ctx;
    /* Nobody is left to read what its work would answer. */
    userwork_cancel_owner(d->userwork, cl);
    /* Drops the stream; a reply still in flight (mirror) holds a reference. */
    if (cl->logs.active) {
        json_decref(cl->logs.id);
        memset(&cl->logs, 0, sizeof(cl->logs));
    }
}

/* max_clients_per_uid, read live from the configuration (reloadable). */
static int daemon_on_admit(void *ctx, struct control *srv, const struct control_client *cl,
                           struct gpt_err *err)
{
    struct daemon_ctx *d = ctx;
    return control_limits_admit(srv, cl, &d->cfg, err);
}

/* "unknown argument", with the option or command it is closest to. */
static void daemon_unknown_argument(const char *arg, const char *key)
{
    static const char *const commands[] = {"run", "tokenize", "export"};
    static const char *const flags[] = {
        "config", "print-default-config", "print-config", "check-config", "version", "help"};
    char buf[CONFIG_NAME_MAX];
    const char *hint = NULL;
    bool dashes = strncmp(arg, "--", 2) == 0;
    if (dashes && !(hint = gpt_suggest(key, flags, sizeof(flags) / sizeof(flags[0]))))
        hint = config_suggest(key, buf, sizeof(buf));
    else if (!dashes)
        hint = gpt_suggest(arg, commands, sizeof(commands) / sizeof(commands[0]));
    if (hint)
        fprintf(stderr, "gptd: unknown argument \"%s\" (did you mean %s%s? see gptd --help)\n", arg,
                dashes ? "--" : "gptd ", hint);
    else
        fprintf(stderr, "gptd: unknown argument \"%s\" (see gptd --help)\n", arg);
}

/* Splits argv into special flags and option flags. Returns -1 to continue,
 * else the exit status. */
static int daemon_parse_args(int argc, char **argv, struct daemon_args *a, int *print)
{
    a->argv = calloc(2 * (size_t)argc + 1, sizeof(char *));
    if (!a->argv)
        return 1;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            daemon_usage(stdout);
            return 0;
        }
        if (strcmp(s, "--version") == 0) {
            printf("gptd %s\n", GPTD_VERSION);
            return 0;
        }
        if (strcmp(s, "--print-default-config") == 0) {
            config_print_defaults(stdout);
            return 0;
        }
        if (strcmp(s, "--print-config") == 0 || strcmp(s, "--check-config") == 0) {
            *print = s[2] == 'p' ? 1 : 2;
            continue;
        }
        if (strcmp(s, "--config") == 0 || strncmp(s, "--config=", 9) == 0) {
            if (s[8] == '=') {
                a->config_file = s + 9;
            } else if (i + 1 < argc) {
                a->config_file = argv[++i];
            } else {
                fprintf(stderr, "gptd: --config needs a file\n");
                return 2;
            }
            continue;
        }
        char key[CONFIG_NAME_MAX];
        const char *eq = strncmp(s, "--", 2) == 0 ? strchr(s, '=') : NULL;
        snprintf(key, sizeof(key), "%.*s", eq ? (int)(eq - s - 2) : (int)sizeof(key) - 1, s + 2);
        if (strncmp(s, "--", 2) != 0 || !config_is_option(key)) {
            daemon_unknown_argument(s, key);
            return 2;
        }
        a->argv[a->argc++] = argv[i];
        if (!eq && config_is_bool(key) && (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)) {
            a->argv[a->argc++] = (char *)"yes"; /* a bare yes/no flag */
            continue;
        }
        if (!eq) {
            if (i + 1 >= argc) {
                fprintf(stderr, "gptd: %s needs a value\n", s);
                return 2;
            }
            a->argv[a->argc++] = argv[++i];
        }
    }
    return -1;
}

/* The state directory before anything runs: the GPU plan, private modes,
 * the lock (one gptd per state directory), the database (a missing, empty
 * or damaged one stops gptd instead of starting empty: statedir.h, db.h),
 * and what killed writers left behind. */
static int daemon_open_state(struct daemon_ctx *d, struct gpt_err *err)
{
    char path[CONFIG_PATH_MAX + 32];
    if (daemon_gpu_plan(&d->cfg, err) < 0 || daemon_state_dir_private(d->cfg.state_dir, err) < 0 ||
        statedir_lock(d->cfg.state_dir, err) < 0)
        return -1;
    snprintf(path, sizeof(path), "%s/gptd.db", d->cfg.state_dir);
    if (statedir_check_db(d->cfg.state_dir, path, err) < 0)
        return -1;
    snprintf(path, sizeof(path), "%s/jobs", d->cfg.state_dir);
    if (daemon_mkdir(path, err) < 0)
        return -1;
    snprintf(path, sizeof(path), "%s/gptd.db", d->cfg.state_dir);
    if (db_open(path, &d->db, err) < 0)
        return -1;
    int stale = statedir_clean_tmp(d->db);
    if (stale > 0)
        log_notice("removed %d stale temporary snapshot file%s left by killed writers", stale,
                   stale == 1 ? "" : "s");
    (void)export_tmp_clean(d->cfg.state_dir);
    return 0;
}

/* Each node of a cluster holds a connection to the coordinator: raise the
 * open-file limit before the store listens, and say what it allows. */
static void daemon_raise_fdlimit(void)
{
    uint64_t fd_soft = 0, fd_hard = 0;
    int fd_rc = fdlimit_raise(&fd_soft, &fd_hard);
    if (fd_rc < 0)
        log_warn("cannot raise the open-file limit to %llu: %s; %llu open files, room for %llu "
                 "nodes",
                 (unsigned long long)fd_hard, gpt_strerror(fd_rc), (unsigned long long)fd_soft,
                 (unsigned long long)fdlimit_nodes(fd_soft, RDZV_NODES_MAX));
    else
        log_info("open-file limit %llu (hard %llu): room for %llu nodes",
                 (unsigned long long)fd_soft, (unsigned long long)fd_hard,
                 (unsigned long long)fdlimit_nodes(fd_soft, RDZV_NODES_MAX));
}

/* SIGTERM and SIGINT stop gptd, SIGHUP reloads; the force timer will bound
 * the wait of a forced exit (a third stop signal). */
static void daemon_signals_start(struct daemon_main *m)
{
    uv_signal_init(&m->loop, &m->sig_term);
    uv_signal_init(&m->loop, &m->sig_int);
    uv_signal_init(&m->loop, &m->sig_hup);
    m->sig_term.data = m->sig_int.data = m->sig_hup.data = m;
    uv_signal_start(&m->sig_term, daemon_on_stop_signal, SIGTERM);
    uv_signal_start(&m->sig_int, daemon_on_stop_signal, SIGINT);
    uv_signal_start(&m->sig_hup, daemon_on_hup, SIGHUP);
    uv_timer_init(&m->loop, &m->force_timer);
    m->force_timer.data = m;
}

/* The HTTP listener, the control socket, the job queue, the user work
 * pool, the cluster and the signals, in that order. On a failure the
 * parts already started are closed (their close callbacks run on the
 * loop) and -1 returned with err set. */
static int daemon_services_start(struct daemon_main *m, struct gpt_err *err)
{
    struct daemon_ctx *d = &m->d;
    /* Before the control socket: a listener that cannot bind stops gptd
     * before anything runs. */
    if (daemon_http_start(m, err) < 0)
        return -1;
    struct control_hooks hooks = {d, daemon_on_request, daemon_on_drained, daemon_on_closed,
                                  daemon_on_admit};
    if (control_start(&m->loop, &d->cfg, &hooks, &d->ctl, err) < 0)
        return -1;
    if (jobs_new(&m->loop, d->db, &d->cfg, d->ctl, d->cfg.state_dir, &d->jobs, err) < 0) {
        control_close(d->ctl);
        d->ctl = NULL;
        uv_run(&m->loop, UV_RUN_DEFAULT);
        return -1;
    }
    daemon_raise_fdlimit();
    if (userwork_new(&m->loop, &d->cfg, &d->userwork, err) < 0 ||
        daemon_cluster_start(d, err) < 0) {
        userwork_close(d->userwork, NULL, NULL);
        d->userwork = NULL;
        jobs_shutdown(d->jobs, NULL, NULL);
        jobs_free(d->jobs);
        d->jobs = NULL;
        control_close(d->ctl);
        d->ctl = NULL;
        uv_run(&m->loop, UV_RUN_DEFAULT);
        return -1;
    }
    daemon_signals_start(m);
    return 0;
}

/* Everything listens: says so in the log and to systemd (READY=1), and
 * starts the timer that keeps STATUS= and the watchdog fresh. */
static void daemon_announce_ready(struct daemon_main *m)
{
    struct daemon_ctx *d = &m->d;
    char blas[256];
    blas_select_describe(blas, sizeof(blas));
    log_info("gptd %s listening on %s, state in %s; %s", GPTD_VERSION, d->cfg.socket,
             d->cfg.state_dir, blas);
    /* READY=1 only now: configuration loaded, migrations run, the control
     * socket (and on the coordinator the store) listening. */
    (void)notify_ready();
    uint64_t every_ms = notify_watchdog_interval_ms();
    if (every_ms == 0 || every_ms > 1000)
        every_ms = 1000; /* STATUS= stays fresh without a watchdog; idle clients go in time */
    uv_timer_init(&m->loop, &m->notify_timer);
    m->notify_timer.data = m;
    uv_timer_start(&m->notify_timer, daemon_on_notify_timer, 0, every_ms);
    uv_unref((uv_handle_t *)&m->notify_timer);
}

int gptd_daemon_main(int argc, char **argv)
{
    struct daemon_main *m = calloc(1, sizeof(*m));
    if (!m) {
        fprintf(stderr, "gptd: out of memory\n");
        return 1;
    }
    struct daemon_ctx *d = &m->d;
    struct gpt_err err;
    gpt_err_clear(&err);
    int status = 1, print = 0;
    int loop_ok = 0;

    int rc = daemon_parse_args(argc, argv, &m->args, &print);
    if (rc >= 0) {
        status = rc;
        goto out;
    }
    if (daemon_build_config(&m->args, &d->cfg, &err) < 0) {
        fprintf(stderr, "gptd: %s\n", err.msg);
        status = 2;
        goto out;
    }
    if (print) {
        if (print == 1)
            config_print(&d->cfg, stdout);
        status = 0;
        goto out;
    }
    log_set_level(d->cfg.log_level);
    signal(SIGPIPE, SIG_IGN);

    if (daemon_open_state(d, &err) < 0)
        goto fail;

    uv_loop_init(&m->loop);
    loop_ok = 1;
    d->loop = &m->loop;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    d->started = (double)ts.tv_sec + ts.tv_nsec * 1e-9;

    if (daemon_services_start(m, &err) < 0)
        goto fail;
    daemon_announce_ready(m);
    jobs_schedule(d->jobs);
    uv_run(&m->loop, UV_RUN_DEFAULT);
    if (m->forced) {
        /* Handles are still open and worker threads may hold pointers into
         * m: nothing is closed or freed; main() exits at once. */
        log_info("stopped (forced); state in %s", d->cfg.state_dir);
        free(m->args.argv);
        return GPTD_EXIT_FORCED | (m->jobs_stopped ? 0 : 1);
    }
    status = 0;
    goto out;

fail:
    log_error("%s", err.msg);
    (void)notify_status("failed: %s", err.msg);
    status = 1;
out:
    if (loop_ok && uv_loop_close(&m->loop) == UV_EBUSY)
        log_warn("loop closed with handles still open");
    http_stop(m->http);
    http_collect_free(m->collect);
    db_close(d->db);
    free(m->args.argv);
    free(m);
    return status;
}
