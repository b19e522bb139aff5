/*
 * http: the libmicrohttpd listener (see http.h). State shared between the
 * loop and the HTTP thread is only `text` under `mu`; the token and the
 * options are written before the thread starts and only read after.
 */
#include "http.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "hostport.h"
#include "http_api.h"
#include "http_conns.h"
#include "http_db.h"
#include "http_web.h"
#include "monotime.h"
#include "process_stat.h"
#include "store_client.h"

#define HTTP_TOKEN_MAX 4096
/* Connections libmicrohttpd may hold beyond http_max_connections: those
 * accepted in one turn of its loop before the ones they displaced
 * (http_conns.h) are closed. At its own limit it stops accepting. */
#define HTTP_CONN_SLACK 64
#define HTTP_HOST_MAX   255 /* a DNS name's longest text form, and then some */
#define HTTP_CSP                                                                                   \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "                    \
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

struct http {
    struct MHD_Daemon *mhd;
    struct http_conns *conns; /* locked itself (http_conns.h) */
    bool loopback;            /* the listener's address: Host: is checked */
    char *allowed_hosts;      /* http_allowed_hosts, read only once started */
    char node[64];
    char token[HTTP_TOKEN_MAX + 1];
    size_t token_len; /* 0: no token required */
    pthread_mutex_t mu;
    struct metrics_buf text; /* under mu: the loop's newest rendering */
    char *jobs_json;         /* under mu: the loop's newest /api/jobs (NULL: none yet) */
    char *nodes_json;        /* under mu: the loop's newest /api/nodes */
    struct http_db *db;      /* HTTP thread only: the per-job documents; NULL: none */
    pthread_mutex_t nvml_mu;
    struct nvml *nvml; /* NULL: no GPU library; used under nvml_mu */
};

static int http_parse_addr(const char *addr, struct sockaddr_storage *ss, bool *ret_loopback,
                           struct gpt_err *err)
{
    char host[INET6_ADDRSTRLEN + 1];
    int port = 0;
    int rc = hostport_parse(addr, 0, "http", host, sizeof(host), &port, err);
    if (rc < 0)
        return rc;
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *ret_loopback = (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
    } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *ret_loopback = IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr);
    } else {
        return gpt_err_set(err, -EINVAL, "http",
                           "http = %s: \"%s\" is not a numeric IPv4 or IPv6 address", addr, host);
    }
    return 0;
}

int http_addr_check(const char *addr, const char *token_file, bool *ret_loopback,
                    struct gpt_err *err)
{
    struct sockaddr_storage ss;
    bool loopback = false;
    int rc = http_parse_addr(addr, &ss, &loopback, err);
    if (rc < 0)
        return rc;
    if (!loopback && !(token_file && token_file[0]))
        return gpt_err_set(err, -EINVAL, "http_token_file",
                           "http = %s is not a loopback address: set http_token_file (a bearer "
                           "token, mode 0600) or listen on 127.0.0.1",
                           addr);
    *ret_loopback = loopback;
    return 0;
}

static int http_load_token(struct http *h, const char *path, struct gpt_err *err)
{
    struct gpt_err e2;
    size_t n = 0;
    int rc = store_secret_load(path, h->token, HTTP_TOKEN_MAX, &n, &e2);
    if (rc < 0)
        return gpt_err_set(err, rc, "http_token_file", "http_token_file: %s", e2.msg);
    for (size_t i = 0; i < n; i++)
        if (h->token[i] < 0x21 || h->token[i] > 0x7e)
            return gpt_err_set(err, -EINVAL, "http_token_file",
                               "http_token_file %s: byte %zu is not printable ASCII (a bearer "
                               "token is one word)",
                               path, i);
    h->token[n] = '\0';
    h->token_len = n;
    return 0;
}

/* 1 to 5 digits and nothing else: a port. */
static bool http_is_port(const char *p)
{
    size_t n = strspn(p, "0123456789");
    return n >= 1 && n <= 5 && !p[n];
}

/* Walks the names of an http_allowed_hosts value (',' or blank separated).
 * Returns the next name's start and sets *ret_len; NULL at the end. */
static const char *http_hosts_next(const char **at, size_t *ret_len)
{
    const char *p = *at + strspn(*at, ", \t");
    size_t n = strcspn(p, ", \t");
    *at = p + n;
    *ret_len = n;
    return n ? p : NULL;
}

int http_hosts_check(const char *list, struct gpt_err *err)
{
    const char *at = list, *name;
    size_t n;
    while ((name = http_hosts_next(&at, &n)))
        if (n > HTTP_HOST_MAX || strspn(name, "abcdefghijklmnopqrstuvwxyz"
                                              "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") < n)
            return gpt_err_set(err, -EINVAL, "http_allowed_hosts",
                               "\"%.*s\" is not a host name (letters, digits, '-' and '.')",
                               (int)(n > 64 ? 64 : n), name);
    return 0;
}

/* Whether a loopback listener answers a request with this Host: value:
 * localhost, a loopback address (127.0.0.0/8, [::1]) or a name listed in
 * http_allowed_hosts, with or without a port; no Host (HTTP/1.0) too. A
 * DNS name that an attacker points at 127.0.0.1 is none of these, so a web
 * page cannot read the listener through it (DNS rebinding). */
static bool http_host_ok(const struct http *h, const char *v)
{
    if (!h->loopback || !v)
        return true;
    char host[HTTP_HOST_MAX + 1];
    size_t n = strlen(v);
    if (v[0] == '[') {
        const char *end = strchr(v, ']');
        struct in6_addr a6;
        if (!end || (end[1] && (end[1] != ':' || !http_is_port(end + 2))) ||
            (size_t)(end - v - 1) >= sizeof(host))
            return false;
        memcpy(host, v + 1, (size_t)(end - v - 1));
        host[end - v - 1] = '\0';
        return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
    }
    const char *colon = strrchr(v, ':');
    if (colon) {
        if (!http_is_port(colon + 1))
            return false;
        n = (size_t)(colon - v);
    }
    if (n && v[n - 1] == '.')
        n--; /* "localhost." is localhost */
    if (!n || n >= sizeof(host))
        return false;
    for (size_t i = 0; i < n; i++)
        host[i] = (char)tolower((unsigned char)v[i]);
    host[n] = '\0';
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (strcmp(host, "localhost") == 0)
        return true;
    const char *at = h->allowed_hosts, *name;
    size_t k;
    while (at && (name = http_hosts_next(&at, &k))) {
        if (k && name[k - 1] == '.')
            k--;
        if (k == n && strncasecmp(name, host, n) == 0)
            return true;
    }
    return false;
}

/* Constant time in the token's length: a wrong guess learns nothing from
 * how long the comparison took. */
static bool http_authorized(const struct http *h, struct MHD_Connection *c)
{
    if (!h->token_len)
        return true;
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!v || strncmp(v, "Bearer ", 7) != 0)
        return false;
    v += 7;
    if (strlen(v) != h->token_len)
        return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < h->token_len; i++)
        diff |= (unsigned char)(v[i] ^ h->token[i]);
    return diff == 0;
}

const struct http_web_asset *http_web_find(const char *url)
{
    for (size_t i = 0; i < http_web_assets_n; i++)
        if (strcmp(url, http_web_assets[i].path) == 0 ||
            (strcmp(http_web_assets[i].path, "/") == 0 && strcmp(url, "/index.html") == 0))
            return &http_web_assets[i];
    return NULL;
}

static bool http_web_is_asset(const char *body)
{
    for (size_t i = 0; i < http_web_assets_n; i++)
        if (body == (const char *)http_web_assets[i].data)
            return true;
    return false;
}

/* Queues a response. `body` is taken (freed), unless it is one of the
 * embedded files (http_web_assets), which are constant. */
static enum MHD_Result http_reply(struct MHD_Connection *c, unsigned status, const char *type,
                                  char *body, size_t len, const char *hdr, const char *hdr_value)
{
    bool constant = !body || http_web_is_asset(body);
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, body, constant ? MHD_RESPMEM_PERSISTENT : MHD_RESPMEM_MUST_FREE);
    if (!r) {
        if (!constant)
            free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    /* The dashboard loads only its own embedded files and talks only to
     * this origin: no inline script, no other host, no framing. */
    MHD_add_response_header(r, "Content-Security-Policy", HTTP_CSP);
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    if (hdr)
        MHD_add_response_header(r, hdr, hdr_value);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result http_text(struct MHD_Connection *c, unsigned status, const char *msg,
                                 const char *hdr, const char *hdr_value)
{
    char *body = strdup(msg);
    return http_reply(c, status, "text/plain; charset=utf-8", body, body ? strlen(body) : 0, hdr,
                      hdr_value);
}

/* /metrics: the loop's text, then this thread's GPU families. */
static enum MHD_Result http_metrics(struct http *h, struct MHD_Connection *c)
{
    struct metrics_buf out = {0};
    pthread_mutex_lock(&h->mu);
    if (h->text.len)
        metrics_buf_printf(&out, "%s", h->text.p);
    pthread_mutex_unlock(&h->mu);
    pthread_mutex_lock(&h->nvml_mu);
    if (h->nvml) {
        struct nvml_gpu gpus[NVML_GPUS_MAX];
        int n = nvml_sample(h->nvml, gpus, NVML_GPUS_MAX);
        if (n > 0)
            metrics_text_render_gpus(&out, h->node, gpus, (size_t)n);
    }
    pthread_mutex_unlock(&h->nvml_mu);
    struct metrics_process proc;
    if (out.p && process_stat_read(&proc) == 0)
        metrics_text_render_process(&out, &proc);
    if (out.err) {
        metrics_buf_done(&out);
        return http_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", NULL, NULL);
    }
    if (!out.p)
        return http_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, "no metrics yet\n", NULL, NULL);
    return http_reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", out.p, out.len,
                      NULL, NULL);
}

static enum MHD_Result http_json(struct MHD_Connection *c, unsigned status, char *text)
{
    if (!text)
        return http_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", NULL, NULL);
    return http_reply(c, status, "application/json", text, strlen(text), NULL, NULL);
}

static enum MHD_Result http_json_error(struct MHD_Connection *c, unsigned status, const char *msg)
{
    return http_json(c, status, http_api_dump(json_pack("{s:o}", "error", http_api_string(msg))));
}

/* A copy of one of the loop's documents (under mu). */
static char *http_copy_doc(struct http *h, char *const *doc)
{
    pthread_mutex_lock(&h->mu);
    char *s = *doc ? strdup(*doc) : NULL;
    pthread_mutex_unlock(&h->mu);
    return s;
}

/* /api/...: the loop's documents, or the per-job ones read here. */
/* /api/jobs/ID/metrics?format=csv: every record since a step, as CSV; a
 * reply cut at HTTP_API_CSV_ROWS_MAX rows says where to continue in
 * X-Gptd-Next-Since. */
static enum MHD_Result http_api_csv(struct http *h, struct MHD_Connection *c,
                                    const struct http_api_route *rt)
{
    struct metrics_buf out = {0};
    struct gpt_err err;
    int64_t next = 0;
    int rc = http_db_metrics_csv(h->db, rt->job, rt->since, &out, &next, &err);
    if (rc < 0) {
        metrics_buf_done(&out);
        return http_json_error(
            c, rc == -ENOENT ? MHD_HTTP_NOT_FOUND : MHD_HTTP_INTERNAL_SERVER_ERROR, err.msg);
    }
    char since[24];
    snprintf(since, sizeof(since), "%lld", (long long)next);
    return http_reply(c, MHD_HTTP_OK, "text/csv; charset=utf-8", out.p, out.len,
                      next ? "X-Gptd-Next-Since" : NULL, next ? since : NULL);
}

static enum MHD_Result http_api(struct http *h, struct MHD_Connection *c,
                                const struct http_api_route *rt, bool csv)
{
    if (rt->what == HTTP_API_JOBS || rt->what == HTTP_API_NODES) {
        char *s = http_copy_doc(h, rt->what == HTTP_API_JOBS ? &h->jobs_json : &h->nodes_json);
        return s ? http_json(c, MHD_HTTP_OK, s)
                 : http_json_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "no data yet");
    }
    if (!h->db)
        return http_json_error(c, MHD_HTTP_NOT_FOUND, "this gptd keeps no jobs");
    if (csv)
        return http_api_csv(h, c, rt);
    json_t *doc = NULL;
    struct gpt_err err;
    int rc = rt->what == HTTP_API_METRICS   ? http_db_metrics(h->db, rt->job, rt->since, &doc, &err)
             : rt->what == HTTP_API_EVENTS  ? http_db_events(h->db, rt->job, &doc, &err)
             : rt->what == HTTP_API_CONFIG  ? http_db_config(h->db, rt->job, &doc, &err)
             : rt->what == HTTP_API_SAMPLES ? http_db_samples(h->db, rt->job, &doc, &err)
                                            : http_db_snapshots(h->db, rt->job, &doc, &err);
    if (rc == -ENOENT)
        return http_json_error(c, MHD_HTTP_NOT_FOUND, err.msg);
    if (rc < 0)
        return http_json_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, err.msg);
    return http_json(c, MHD_HTTP_OK, http_api_dump(doc));
}

/* The access handler (HTTP thread). Answers on the first call, before any
 * body is read: nothing here takes input beyond the request line and the
 * headers. */
static enum MHD_Result http_on_request(void *cls, struct MHD_Connection *c, const char *url,
                                       const char *method, const char *version,
                                       const char *upload_data, size_t *upload_data_size,
                                       void **con_cls)
{
    struct http *h = cls;
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)con_cls;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (http_conns_request(h->conns, ci ? ci->socket_context : NULL))
        return http_text(c, MHD_HTTP_SERVICE_UNAVAILABLE,
                         "gptd: every HTTP connection (http_max_connections) is answering a "
                         "request; try again\n",
                         MHD_HTTP_HEADER_CONNECTION, "close");
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!http_host_ok(h, host)) {
        char shown[64], body[256];
        size_t i = 0;
        for (; host[i] && i < sizeof(shown) - 1; i++)
            shown[i] = host[i] > 0x20 && host[i] < 0x7f && host[i] != '"' ? host[i] : '?';
        shown[i] = '\0';
        snprintf(body, sizeof(body),
                 "gptd: Host \"%s%s\" is not a name of this loopback listener: it answers "
                 "localhost, loopback addresses and the names in http_allowed_hosts "
                 "(gptd.conf)\n",
                 shown, host[i] ? "..." : "");
        return http_text(c, MHD_HTTP_MISDIRECTED_REQUEST, body, NULL, NULL);
    }
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return http_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "gptd serves GET and HEAD only\n",
                         MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    /* The dashboard's own files hold no data: they load without the token
     * (the page asks for it), so that a browser can show the form. */
    const struct http_web_asset *asset = http_web_find(url);
    if (asset)
        return http_reply(c, MHD_HTTP_OK, asset->type, (char *)asset->data, asset->len, NULL, NULL);
    if (!http_authorized(h, c))
        return http_text(c, MHD_HTTP_UNAUTHORIZED, "a bearer token is required\n",
                         MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"gptd\"");
    const char *cl =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *te =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    if (te || (cl && strcmp(cl, "0") != 0))
        return http_text(c, MHD_HTTP_CONTENT_TOO_LARGE, "a request body is not accepted\n", NULL,
                         NULL);
    if (strcmp(url, "/metrics") == 0)
        return http_metrics(h, c);
    struct http_api_route route;
    struct gpt_err err;
    const char *since = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "since");
    const char *format = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "format");
    bool csv = false;
    if (http_api_route(url, since, &route, &err) < 0 ||
        (route.what != HTTP_API_NONE && http_api_format(format, route.what, &csv, &err) < 0))
        return http_json_error(c, MHD_HTTP_BAD_REQUEST, err.msg);
    if (route.what != HTTP_API_NONE)
        return http_api(h, c, &route, csv);
    return http_text(c, MHD_HTTP_NOT_FOUND, "not found\n", NULL, NULL);
}

/* A connection starts or ends (HTTP thread): its entry in the table. */
static void http_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                               enum MHD_ConnectionNotificationCode toe)
{
    struct http *h = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? http_conns_open(h->conns, ci->connect_fd, monotime_ms()) : NULL;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        http_conns_close(h->conns, *socket_context);
        *socket_context = NULL;
    }
}

/* A request was answered (HTTP thread): the connection waits again. */
static void http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                              enum MHD_RequestTerminationCode toe)
{
    struct http *h = cls;
    (void)con_cls;
    (void)toe;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    http_conns_request_done(h->conns, ci ? ci->socket_context : NULL, monotime_ms());
}

int http_start(const struct http_opts *o, struct http **ret, int *ret_port, struct gpt_err *err)
{
    struct sockaddr_storage ss;
    bool loopback = false;
    int rc = http_addr_check(o->addr, o->token_file, &loopback, err);
    if (rc < 0)
        return rc;
    (void)http_parse_addr(o->addr, &ss, &loopback, err);
    struct http *h = calloc(1, sizeof(*h));
    if (!h)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    pthread_mutex_init(&h->mu, NULL);
    pthread_mutex_init(&h->nvml_mu, NULL);
    snprintf(h->node, sizeof(h->node), "%s", o->node ? o->node : "");
    h->loopback = loopback;
    if ((rc = http_hosts_check(o->allowed_hosts ? o->allowed_hosts : "", err)) < 0)
        goto fail;
    h->allowed_hosts = strdup(o->allowed_hosts ? o->allowed_hosts : "");
    h->conns = http_conns_new(o->max_connections, (int64_t)o->timeout_s * 1000);
    if (!h->allowed_hosts || !h->conns) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        goto fail;
    }
    if (o->token_file && o->token_file[0] && (rc = http_load_token(h, o->token_file, err)) < 0)
        goto fail;
    /* The per-job documents read the database; without one (a test, a
     * member's empty file is still a file) they answer 404. */
    if (o->db_path && o->db_path[0] && (rc = http_db_open(o->db_path, &h->db, err)) < 0)
        goto fail;
    struct gpt_err nerr;
    if (nvml_open(o->nvml_library, &h->nvml, &nerr) < 0)
        h->nvml = NULL; /* no driver: no GPU series (the normal case on a CPU host) */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    h->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, http_on_request, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(o->max_connections + HTTP_CONN_SLACK),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        o->request_max_bytes, MHD_OPTION_NOTIFY_CONNECTION, http_on_connection, h,
        MHD_OPTION_NOTIFY_COMPLETED, http_on_completed, h, MHD_OPTION_LISTENING_ADDRESS_REUSE,
        (unsigned)1, MHD_OPTION_END);
    if (!h->mhd) {
        rc = gpt_err_set(err, -EADDRNOTAVAIL, "http", "http: cannot listen on %s", o->addr);
        goto fail;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_BIND_PORT);
    *ret_port = info ? info->port : 0;
    *ret = h;
    return 0;
fail:
    http_db_close(h->db);
    nvml_close(h->nvml);
    http_conns_free(h->conns);
    free(h->allowed_hosts);
    pthread_mutex_destroy(&h->mu);
    pthread_mutex_destroy(&h->nvml_mu);
    free(h);
    return rc;
}

void http_publish(struct http *h, struct metrics_buf *b)
{
    pthread_mutex_lock(&h->mu);
    struct metrics_buf old = h->text;
    h->text = *b;
    pthread_mutex_unlock(&h->mu);
    memset(b, 0, sizeof(*b));
    metrics_buf_done(&old);
}

void http_publish_api(struct http *h, char *jobs_json, char *nodes_json)
{
    pthread_mutex_lock(&h->mu);
    char *old_jobs = h->jobs_json, *old_nodes = h->nodes_json;
    h->jobs_json = jobs_json;
    h->nodes_json = nodes_json;
    pthread_mutex_unlock(&h->mu);
    free(old_jobs);
    free(old_nodes);
}

int http_sweep(struct http *h)
{
    return http_conns_sweep(h->conns, monotime_ms());
}

bool http_has_gpus(const struct http *h)
{
    return h->nvml != NULL;
}

void http_stop(struct http *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->mhd);
    http_conns_free(h->conns);
    free(h->allowed_hosts);
    http_db_close(h->db);
    nvml_close(h->nvml);
    metrics_buf_done(&h->text);
    free(h->jobs_json);
    free(h->nodes_json);
    pthread_mutex_destroy(&h->mu);
    pthread_mutex_destroy(&h->nvml_mu);
    explicit_bzero(h->token, sizeof(h->token));
    free(h);
}
