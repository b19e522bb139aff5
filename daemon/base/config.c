/*
 * config: the option table and everything it drives (see config.h).
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "log.h"
#include "suggest.h"

enum config_type {
    CONFIG_T_STRING,
    CONFIG_T_INT,
    CONFIG_T_SIZE,
    CONFIG_T_MODE,
    CONFIG_T_LEVEL,
    CONFIG_T_BOOL,
    CONFIG_T_DOUBLE
};

struct config_option {
    const char *name;
    int type; /* enum config_type */
    size_t offset;
    size_t size; /* strings: buffer size */
    const char *dflt;
    int64_t min, max;
    bool reloadable;
    const char *help;
    /* The value the packaged gptd.conf sets (uncommented); NULL: the default. */
    const char *pkg;
};

#define OPT_STR(n, d, r, h)                                                                        \
    {                                                                                              \
#n, CONFIG_T_STRING, offsetof(struct config, n), sizeof(((struct config *)0)->n), d, 0, 0, \
            r, h, NULL                                                                             \
    }
#define OPT_NUM(n, t, d, lo, hi, r, h)                                                             \
    {                                                                                              \
#n, t, offsetof(struct config, n), sizeof(((struct config *)0)->n), d, lo, hi, r, h, NULL  \
    }

/* clang-format off */
static const struct config_option config_options[] = {
    OPT_STR(state_dir, "/var/lib/gptd", false,
            "Directory of the SQLite database (gptd.db) and, under jobs/<id>/snapshots,\n"
            "the snapshots of jobs that do not set snapshot.dir. Created if missing."),
    OPT_STR(socket, "", false,
            "Control socket gptctl talks to. Empty: $RUNTIME_DIRECTORY/gptd.sock when\n"
            "systemd sets RuntimeDirectory=, else /run/gptd/gptd.sock."),
    OPT_NUM(socket_mode, CONFIG_T_MODE, "0660", 0, 0777, false,
            "Permission bits of the control socket (octal). Whoever can connect can\n"
            "submit jobs; only a job's owner (or root) may cancel or resume it."),
    OPT_STR(socket_group, "", false,
            "Group that owns the control socket, so its members may use gptctl.\n"
            "Empty: gptd's own group."),
    OPT_STR(node_name, "", false,
            "This node's id in `gptctl nodes`, in the rendezvous and in the snapshots\n"
            "table (--node-id is the same option). Empty: the host name. An id another\n"
            "live node (another state directory) holds is refused at join."),
    OPT_NUM(log_level, CONFIG_T_LEVEL, "info", 0, 7, true,
            "Highest log level written to stderr: error, warning, notice, info or debug."),
    OPT_NUM(workers, CONFIG_T_INT, "1", 1, 256, true,
            "Worker threads (ranks) a job runs on this host when its spec leaves\n"
            "distributed.workers_per_node at 0 (on a GPU host such a job runs one per GPU).\n"
            "On a host with GPUs, more than it sees is refused at start: each worker is one\n"
            "NCCL rank on its own GPU. Applies to jobs started after a reload."),
    OPT_NUM(max_clients, CONFIG_T_INT, "64", 1, 100000, true,
            "Control connections served at once; further connections are refused."),
    OPT_NUM(max_queued_jobs, CONFIG_T_INT, "1000", 1, 1000000, true,
            "Jobs waiting in the queue; a submit beyond it fails with \"limit\"."),
    OPT_NUM(max_queued_jobs_per_uid, CONFIG_T_INT, "100", 1, 1000000, true,
            "Jobs one user (uid) may have waiting in the queue (queued, not yet\n"
            "running), so that one user cannot fill max_queued_jobs; a submit or\n"
            "resume beyond it fails with \"limit\" naming this option. Root is exempt."),
    OPT_NUM(user_max_priority, CONFIG_T_INT, "0", -1000000, 1000000, true,
            "Highest `gptctl submit --priority` a user other than root may ask for,\n"
            "so that no user can put their jobs ahead of everyone else's; a submit\n"
            "above it is refused naming this option. Root may submit with any."),
    OPT_NUM(max_followers_per_job, CONFIG_T_INT, "32", 1, 100000, true,
            "Clients following one job's logs at once."),
    OPT_NUM(client_output_max_bytes, CONFIG_T_SIZE, "4194304", 4096, INT64_C(1) << 32, true,
            "Output queued for one client (bytes; suffixes k, M, G). A follower that\n"
            "reads slower than its job writes reads the database instead once half\n"
            "of this is queued, and rejoins the live stream when it has caught up.\n"
            "A client whose queue passes this is disconnected."),
    OPT_NUM(max_clients_per_uid, CONFIG_T_INT, "16", 1, 100000, true,
            "Control connections one user (uid) may hold at once, so that one user\n"
            "cannot take every connection of max_clients; one more is refused."),
    OPT_NUM(client_idle_timeout_s, CONFIG_T_INT, "60", 0, 86400, true,
            "Seconds a control connection may go without a complete request and\n"
            "without output to read before it is closed, unless it waits for\n"
            "something (`gptctl logs -f`, `gptctl sample`). A writer too slow to\n"
            "finish its request line in this time is closed too, and so is a\n"
            "follower that leaves its output unread this long (it can catch up\n"
            "with `gptctl logs --since STEP`). 0: never."),
    OPT_NUM(max_job_memory, CONFIG_T_SIZE, "0", 0, INT64_C(1) << 50, true,
            "Most memory (bytes; suffixes k, M, G) one job may need on one node, as\n"
            "estimated at submit from its spec (parameters, gradients, AdamW moments,\n"
            "activations, per sharding mode). 0: no cap but the node's own memory\n"
            "(physical memory, and GPU memory when it reports devices)."),
    OPT_STR(data_roots, "/usr/share:/srv:/data:/mnt:/home:/tmp:/var/lib/gptd", true,
            "Directories (':'-separated) under which a job's data.path and\n"
            "data.val_path must lie, after symbolic links are resolved; a job naming\n"
            "any other file is refused at submit. \"/\" allows every path."),
    OPT_STR(snapshot_roots, "/srv:/data:/mnt:/tmp", true,
            "Directories (':'-separated) under which a job's snapshot.dir must lie;\n"
            "the state directory is always allowed. \"/\" allows every path."),
    OPT_NUM(sample_max_tokens, CONFIG_T_INT, "2048", 1, 1000000, true,
            "Most tokens one `gptctl sample` may ask for."),
    OPT_NUM(sample_history, CONFIG_T_INT, "20", 0, 100, true,
            "Replies of `gptctl sample` kept per job (prompt, snapshot, settings and\n"
            "the text, at most 16 KiB of it) for `gptctl samples` and the dashboard; a\n"
            "job's older ones are dropped as new ones come. 0: none are kept."),
    OPT_NUM(user_work_threads, CONFIG_T_INT, "2", 1, 256, false,
            "Threads that run the work users ask for: `gptctl sample`, `gptctl\n"
            "export` and the snapshot copy of `gptctl submit --resume-from`. A job's\n"
            "start never waits for them (it has threads of its own)."),
    OPT_NUM(user_work_per_uid, CONFIG_T_INT, "1", 1, 256, true,
            "Requests of one user (uid) that run at once on those threads; the user's\n"
            "others wait for their turn (gptctl says so) while other users' run."),
    OPT_NUM(user_work_queue_max, CONFIG_T_INT, "64", 0, 100000, true,
            "Requests of all users that may wait for a thread; one more is refused\n"
            "with \"limit\" naming this option."),
    OPT_NUM(user_work_queue_per_uid, CONFIG_T_INT, "4", 0, 100000, true,
            "Requests of one user that may wait for a thread; one more is refused\n"
            "with \"limit\" naming this option."),
    OPT_NUM(user_work_max_memory, CONFIG_T_SIZE, "0", 0, INT64_C(1) << 50, true,
            "Most memory (bytes; suffixes k, M, G) one user's running requests may\n"
            "hold at once, estimated from the snapshot's header before anything is\n"
            "allocated; a request beyond it fails with \"limit\". 0: max_job_memory,\n"
            "or the node's physical memory when that is 0 too."),
    OPT_STR(rdzv, "", false,
            "The cluster's rendezvous store, HOST:PORT (numeric address). Empty, and not\n"
            "coordinator: this gptd is the coordinator of its own cluster, serving the\n"
            "store on 127.0.0.1 at a port the kernel picks (so that several gptd on one\n"
            "host never collide); `gptctl nodes` and `gptctl status` show it, and another\n"
            "gptd on this host joins with --rdzv 127.0.0.1:PORT --secret-file\n"
            "STATE_DIR/cluster.secret."),
    OPT_NUM(coordinator, CONFIG_T_BOOL, "no", 0, 1, false,
            "Serve the rendezvous store at `rdzv` and keep the cluster's job queue. The\n"
            "other nodes submit through it and report to it. Without `rdzv` it serves\n"
            "127.0.0.1:29400."),
    OPT_STR(secret_file, "", false,
            "File holding the cluster secret (at least 16 bytes); a node without it\n"
            "cannot join. Must not be readable by group or others. Empty on a\n"
            "coordinator (with or without rdzv): it makes STATE_DIR/cluster.secret (32\n"
            "random bytes as hex, mode 0600) once and uses it; members then name a copy\n"
            "of that file. A cluster always has a secret: every store connection proves\n"
            "it both ways and every frame carries a MAC under session keys."),
    OPT_STR(bind_host, "", false,
            "Address this node's workers listen on for the ring collectives; other nodes\n"
            "connect to it. Empty: the rdzv host when it is a loopback address, else\n"
            "127.0.0.1."),
    OPT_NUM(heartbeat_s, CONFIG_T_DOUBLE, "1", 0, 60, false,
            "Seconds between a node's heartbeats to the coordinator."),
    OPT_NUM(dead_after_s, CONFIG_T_DOUBLE, "3", 0, 3600, false,
            "A node silent this long (seconds) is dead and the world re-forms without it;\n"
            "a node whose store stops answering this long leaves its world."),
    OPT_NUM(last_call_s, CONFIG_T_DOUBLE, "1", 0, 3600, false,
            "How long (seconds) an open round waits for nodes beyond the job's minimum\n"
            "when not every alive node has joined."),
    OPT_NUM(admit_snapshot_steps, CONFIG_T_INT, "0", 0, 1000000000, false,
            "Taking a waiting node into a running world snapshots first when the newest\n"
            "snapshot is more than this many steps old; otherwise the world restarts\n"
            "from that snapshot."),
    OPT_NUM(comm_timeout_s, CONFIG_T_INT, "60", 1, 86400, false,
            "Seconds a collective may make no progress before it fails (a dead peer is\n"
            "normally noticed sooner, through heartbeats)."),
    {"http", CONFIG_T_STRING, offsetof(struct config, http), sizeof(((struct config *)0)->http),
     "", 0, 0, false,
     "Read-only HTTP listener, ADDR:PORT (numeric address; port 0: the kernel\n"
     "picks, and the log names it): GET /metrics in Prometheus text format.\n"
     "Nothing over HTTP can submit, cancel or change anything. Empty: off (gptd's\n"
     "built-in default); the packaged gptd.conf turns it on for loopback only.\n"
     "A non-loopback address requires http_token_file.",
     "127.0.0.1:29480"},
    OPT_STR(http_token_file, "", false,
            "File holding the bearer token HTTP clients must send (\"Authorization:\n"
            "Bearer TOKEN\"; requests without it get 401). Checked like secret_file: a\n"
            "regular file, no access for group or others, 16 to 4096 bytes of\n"
            "printable ASCII (one trailing newline is dropped). Required when `http` is\n"
            "not a loopback address; when set, required on loopback too."),
    OPT_STR(http_allowed_hosts, "", false,
            "Host names (',' or ' '-separated) a loopback listener answers besides\n"
            "localhost and loopback addresses. A request to a loopback `http` whose\n"
            "Host: header names anything else gets 421, so that a web page cannot\n"
            "read the listener through a DNS name it points at 127.0.0.1."),
    OPT_NUM(http_max_connections, CONFIG_T_INT, "16", 1, 10000, false,
            "HTTP connections served at once. A new connection beyond it closes the\n"
            "oldest one without a request in progress; when every one has a request\n"
            "in progress, the new one is answered 503 at once."),
    OPT_NUM(http_timeout_s, CONFIG_T_INT, "10", 1, 3600, false,
            "Seconds an HTTP connection may take to send a complete request (from its\n"
            "start, or from the end of its previous reply) before it is closed, so\n"
            "that idle and slow (byte-by-byte) connections go."),
    OPT_NUM(http_request_max_bytes, CONFIG_T_SIZE, "16384", 4096, INT64_C(1) << 20, false,
            "Memory one HTTP connection may use for its request (request line and\n"
            "headers; bytes, suffixes k, M). A larger request is refused (431 or 414);\n"
            "a request with a body is refused (413); a method other than GET or HEAD\n"
            "is refused (405)."),
};
/* clang-format on */

#define CONFIG_N_OPTIONS (sizeof(config_options) / sizeof(config_options[0]))

static const char *const config_level_names[] = {"",        "",       "",     "error",
                                                 "warning", "notice", "info", "debug"};

/* Finds an option by name, '-' and '_' alike; node_id is node_name. */
static const struct config_option *config_find(const char *key)
{
    char norm[CONFIG_NAME_MAX];
    size_t n = strlen(key);
    if (n >= sizeof(norm))
        return NULL;
    for (size_t i = 0; i <= n; i++)
        norm[i] = key[i] == '-' ? '_' : key[i];
    if (strcmp(norm, "node_id") == 0)
        snprintf(norm, sizeof(norm), "node_name");
    for (size_t i = 0; i < CONFIG_N_OPTIONS; i++)
        if (strcmp(config_options[i].name, norm) == 0)
            return &config_options[i];
    return NULL;
}

bool config_is_option(const char *name)
{
    return config_find(name) != NULL;
}

bool config_is_bool(const char *name)
{
    const struct config_option *o = config_find(name);
    return o && o->type == CONFIG_T_BOOL;
}

/* Parses an integer with an optional k/M/G suffix (sizes only). */
static int config_parse_int(const struct config_option *o, const char *v, int64_t *ret,
                            struct gpt_err *err)
{
    char *end;
    errno = 0;
    int base = o->type == CONFIG_T_MODE ? 8 : 10;
    long long x = strtoll(v, &end, base);
    if (end == v || errno)
        return gpt_err_set(err, -EINVAL, o->name, "\"%s\" is not a%s number", v,
                           base == 8 ? "n octal" : "");
    if (o->type == CONFIG_T_SIZE && *end) {
        int shift = *end == 'k' || *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : -1;
        if (shift < 0 || end[1] || x > (LLONG_MAX >> shift))
            return gpt_err_set(err, -EINVAL, o->name, "bad size \"%s\" (use k, M or G)", v);
        x <<= shift;
        end++;
    }
    if (*end)
        return gpt_err_set(err, -EINVAL, o->name, "trailing characters in \"%s\"", v);
    if (x < o->min || x > o->max)
        return gpt_err_set(err, -EINVAL, o->name, "%lld is out of range [%lld, %lld]", x,
                           (long long)o->min, (long long)o->max);
    *ret = x;
    return 0;
}

int config_set(struct config *c, const char *key, const char *value, struct gpt_err *err)
{
    const struct config_option *o = config_find(key);
    if (!o)
        return gpt_err_set(err, -EINVAL, key, "unknown option \"%s\"", key);
    char *field = (char *)c + o->offset;
    int64_t x = 0;
    int rc;
    switch (o->type) {
    case CONFIG_T_STRING:
        if (strlen(value) >= o->size)
            return gpt_err_set(err, -EINVAL, o->name, "longer than %zu bytes", o->size - 1);
        memcpy(field, value, strlen(value) + 1);
        return 0;
    case CONFIG_T_LEVEL:
        rc = log_level_parse(value);
        if (rc < 0)
            return gpt_err_set(err, -EINVAL, o->name,
                               "\"%s\" is not one of error, warning, notice, info, debug", value);
        *(int *)field = rc;
        return 0;
    case CONFIG_T_BOOL:
        if (!strcmp(value, "yes") || !strcmp(value, "true") || !strcmp(value, "1") ||
            !strcmp(value, "on"))
            *(int *)field = 1;
        else if (!strcmp(value, "no") || !strcmp(value, "false") || !strcmp(value, "0") ||
                 !strcmp(value, "off"))
            *(int *)field = 0;
        else
            return gpt_err_set(err, -EINVAL, o->name, "\"%s\" is not yes or no", value);
        return 0;
    case CONFIG_T_DOUBLE: {
        char *end;
        errno = 0;
        double d = strtod(value, &end);
        if (end == value || *end || errno || !(d >= (double)o->min && d <= (double)o->max))
            return gpt_err_set(err, -EINVAL, o->name, "\"%s\" is not a number in [%lld, %lld]",
                               value, (long long)o->min, (long long)o->max);
        *(double *)field = d;
        return 0;
    }
    case CONFIG_T_INT:
    case CONFIG_T_MODE:
    case CONFIG_T_SIZE:
        rc = config_parse_int(o, value, &x, err);
        if (rc < 0)
            return rc;
        if (o->size == sizeof(int64_t))
            *(int64_t *)field = x;
        else
            *(int *)field = (int)x;
        return 0;
    default:
        GPT_ASSERT(!"bad option type");
    }
    return -EINVAL; /* not reached: the assertion aborts (unoptimised builds cannot see it) */
}

void config_defaults(struct config *c)
{
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < CONFIG_N_OPTIONS; i++) {
        int rc = config_set(c, config_options[i].name, config_options[i].dflt, NULL);
        GPT_ASSERT(rc == 0);
    }
}

static char *config_trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

int config_load_file(struct config *c, const char *path, struct gpt_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return gpt_err_set(err, -errno, NULL, "%s: %s", path, strerror(errno));
    int rc = 0;
    char line[CONFIG_LINE_MAX];
    size_t total = 0;
    for (int lineno = 1; fgets(line, sizeof(line), f); lineno++) {
        size_t n = strlen(line);
        total += n;
        if (total > CONFIG_FILE_MAX) {
            rc = gpt_err_set(err, -EINVAL, NULL, "%s: larger than %u bytes", path, CONFIG_FILE_MAX);
            break;
        }
        if (n == sizeof(line) - 1 && line[n - 1] != '\n') {
            rc = gpt_err_set(err, -EINVAL, NULL, "%s:%d: line longer than %d bytes", path, lineno,
                             CONFIG_LINE_MAX - 2);
            break;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = config_trim(line);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = gpt_err_set(err, -EINVAL, NULL, "%s:%d: expected \"key = value\"", path, lineno);
            break;
        }
        *eq = '\0';
        char *key = config_trim(s), *value = config_trim(eq + 1);
        struct gpt_err e2;
        rc = config_set(c, key, value, &e2);
        if (rc < 0) {
            gpt_err_set(err, rc, e2.path, "%s:%d: %s: %s", path, lineno, key, e2.msg);
            break;
        }
    }
    if (rc == 0 && ferror(f))
        rc = gpt_err_set(err, -EIO, NULL, "%s: read error", path);
    fclose(f);
    return rc;
}

int config_finish(struct config *c, struct gpt_err *err)
{
    if (!c->state_dir[0])
        return gpt_err_set(err, -EINVAL, "state_dir", "must not be empty");
    if (!c->socket[0]) {
        const char *rt = getenv("RUNTIME_DIRECTORY");
        /* systemd may list several directories separated by ':'; use the first. */
        size_t n = rt ? strcspn(rt, ":") : 0;
        int k;
        if (n)
            k = snprintf(c->socket, sizeof(c->socket), "%.*s/%s", (int)n, rt, GPT_CTL_SOCKET_NAME);
        else
            k = snprintf(c->socket, sizeof(c->socket), "%s", GPT_CTL_SOCKET_DEFAULT);
        if (k < 0 || (size_t)k >= sizeof(c->socket))
            return gpt_err_set(err, -EINVAL, "socket", "socket path too long");
    }
    /* sockaddr_un.sun_path is 108 bytes. */
    if (strlen(c->socket) >= 108)
        return gpt_err_set(err, -EINVAL, "socket", "longer than 107 bytes: %s", c->socket);
    if (!c->node_name[0]) {
        char host[256] = "";
        if (gethostname(host, sizeof(host) - 1) < 0 || !host[0])
            snprintf(host, sizeof(host), "localhost");
        snprintf(c->node_name, sizeof(c->node_name), "%.*s", (int)sizeof(c->node_name) - 1, host);
    }
    if (c->dead_after_s <= c->heartbeat_s)
        return gpt_err_set(err, -EINVAL, "dead_after_s", "must be longer than heartbeat_s (%g)",
                           c->heartbeat_s);
    if (c->heartbeat_s <= 0)
        return gpt_err_set(err, -EINVAL, "heartbeat_s", "must be positive");
    return 0;
}

/* Formats an option's current value the way the file spells it. */
static void config_format(const struct config *c, const struct config_option *o, char *buf,
                          size_t cap)
{
    const char *field = (const char *)c + o->offset;
    switch (o->type) {
    case CONFIG_T_STRING:
        snprintf(buf, cap, "%s", field);
        break;
    case CONFIG_T_LEVEL:
        snprintf(buf, cap, "%s", config_level_names[*(const int *)field & 7]);
        break;
    case CONFIG_T_MODE:
        snprintf(buf, cap, "%04o", (unsigned)*(const int *)field);
        break;
    case CONFIG_T_SIZE:
        snprintf(buf, cap, "%lld", (long long)*(const int64_t *)field);
        break;
    case CONFIG_T_BOOL:
        snprintf(buf, cap, "%s", *(const int *)field ? "yes" : "no");
        break;
    case CONFIG_T_DOUBLE:
        snprintf(buf, cap, "%g", *(const double *)field);
        break;
    default:
        snprintf(buf, cap, "%d", *(const int *)field);
        break;
    }
}

void config_reload(struct config *live, const struct config *fresh,
                   void (*fn)(void *ctx, const char *key, bool applied), void *ctx)
{
    for (size_t i = 0; i < CONFIG_N_OPTIONS; i++) {
        const struct config_option *o = &config_options[i];
        char a[CONFIG_PATH_MAX], b[CONFIG_PATH_MAX];
        config_format(live, o, a, sizeof(a));
        config_format(fresh, o, b, sizeof(b));
        if (strcmp(a, b) == 0)
            continue;
        if (o->reloadable)
            memcpy((char *)live + o->offset, (const char *)fresh + o->offset, o->size);
        if (fn)
            fn(ctx, o->name, o->reloadable);
    }
}

void config_print_defaults(FILE *f)
{
    struct config c;
    config_defaults(&c);
    fprintf(f, "# gptd.conf: configuration of the gptd daemon.\n"
               "#\n"
               "# One \"key = value\" per line; '#' starts a comment. Every option can also be\n"
               "# given as a flag, --key VALUE (flags win over this file). Options marked\n"
               "# [reloadable] take effect on SIGHUP (systemctl reload gptd); the others need\n"
               "# a restart. The values below are the defaults.\n"
               "#\n"
               "# This file is generated from gptd's option table (gptd --print-default-config)\n"
               "# and a test checks that the two agree.\n");
    for (size_t i = 0; i < CONFIG_N_OPTIONS; i++) {
        const struct config_option *o = &config_options[i];
        char v[CONFIG_PATH_MAX];
        config_format(&c, o, v, sizeof(v));
        fprintf(f, "\n");
        const char *h = o->help;
        while (*h) {
            size_t n = strcspn(h, "\n");
            fprintf(f, "# %.*s\n", (int)n, h);
            h += n + (h[n] == '\n');
        }
        if (o->reloadable)
            fprintf(f, "# [reloadable]\n");
        if (o->pkg)
            fprintf(f, "%s = %s\n", o->name, o->pkg);
        else
            fprintf(f, "#%s = %s\n", o->name, v);
    }
}

void config_print(const struct config *c, FILE *f)
{
    for (size_t i = 0; i < CONFIG_N_OPTIONS; i++) {
        char v[CONFIG_PATH_MAX];
        config_format(c, &config_options[i], v, sizeof(v));
        fprintf(f, "%s = %s\n", config_options[i].name, v);
    }
}

/* The first sentence of an option's help, on one line. */
static void config_first_sentence(const char *help, char *buf, size_t cap)
{
    size_t k = 0;
    for (const char *p = help; *p && k + 1 < cap; p++) {
        if (*p == '.' && (p[1] == ' ' || p[1] == '\n' || !p[1]))
            break;
        buf[k++] = *p == '\n' ? ' ' : *p;
    }
    buf[k] = '\0';
}

void config_print_flags(FILE *f)
{
    struct config c;
    config_defaults(&c);
    for (size_t i = 0; i < CONFIG_N_OPTIONS; i++) {
        const struct config_option *o = &config_options[i];
        char flag[CONFIG_NAME_MAX + 2], v[CONFIG_PATH_MAX], what[256];
        size_t k = 0;
        for (const char *p = o->name; *p && k < sizeof(flag) - 1; p++)
            flag[k++] = *p == '_' ? '-' : *p;
        flag[k] = '\0';
        config_format(&c, o, v, sizeof(v));
        config_first_sentence(o->help, what, sizeof(what));
        fprintf(f, "  --%-26s %s (default \"%s\")%s\n", flag, what, v,
                o->reloadable ? " [reloadable]" : "");
    }
}

const char *config_suggest(const char *name, char *buf, size_t cap)
{
    const char *names[CONFIG_N_OPTIONS];
    char norm[CONFIG_NAME_MAX];
    size_t n = strlen(name) < sizeof(norm) ? strlen(name) : sizeof(norm) - 1;
    for (size_t i = 0; i < n; i++)
        norm[i] = name[i] == '-' ? '_' : name[i];
    norm[n] = '\0';
    for (size_t i = 0; i < CONFIG_N_OPTIONS; i++)
        names[i] = config_options[i].name;
    const char *hint = gpt_suggest(norm, names, CONFIG_N_OPTIONS);
    if (!hint)
        return NULL;
    for (n = 0; hint[n] && n + 1 < cap; n++)
        buf[n] = hint[n] == '_' ? '-' : hint[n];
    buf[n] = '\0';
    return buf;
}
