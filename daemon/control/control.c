/*
 * control: the control socket server (see control.h). Owns the listening
 * pipe and every client connection. Loop thread only.
 *
 * Output bound: each uv_write is counted until its callback; when the bytes
 * libuv could not hand to the kernel pass client_output_max_bytes the
 * client is closed (like redis's client-output-buffer-limit and tmux's
 * control clients), so a follower that stops reading costs at most the
 * bound plus the socket buffers.
 */
#define _GNU_SOURCE /* struct ucred */
#include "control.h"

#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"

#define CONTROL_READ_CHUNK 65536

struct control {
    uv_loop_t *loop;
    uv_pipe_t listener;
    bool listening;
    bool closing;
    const struct config *cfg;
    struct control_hooks hooks;
    struct control_client *clients; /* open ones (not closing) */
    int n_clients;
    unsigned handles; /* listener + clients not yet closed */
    char path[CONFIG_PATH_MAX];
};

struct control_write {
    uv_write_t req;
    struct control_client *cl;
    size_t len;
    char *buf;
};

static void control_maybe_free(struct control *srv)
{
    if (srv->closing && srv->handles == 0)
        free(srv);
}

static void control_client_free(struct control_client *cl)
{
    struct control *srv = cl->srv;
    gpt_ctl_linebuf_done(&cl->lb);
    json_decref(cl->logs.id);
    free(cl);
    srv->handles--;
    control_maybe_free(srv);
}

static void control_on_client_closed(uv_handle_t *h)
{
    struct control_client *cl = h->data;
    control_client_unref(cl);
}

void control_client_idle_check(struct control_client *cl)
{
    if (cl->eof && !cl->logs.active && cl->busy == 0)
        control_client_shutdown(cl);
}

void control_client_ref(struct control_client *cl)
{
    cl->refs++;
}

void control_client_unref(struct control_client *cl)
{
    GPT_ASSERT(cl->refs > 0);
    if (--cl->refs == 0)
        control_client_free(cl);
}

/* Starts closing a client: unlinks it, tells the owner, closes the pipe.
 * Pending writes are cancelled by uv_close and their callbacks still run. */
static void control_client_close(struct control_client *cl)
{
    if (cl->closing)
        return;
    struct control *srv = cl->srv;
    cl->closing = true;
    if (cl->prev)
        cl->prev->next = cl->next;
    else
        srv->clients = cl->next;
    if (cl->next)
        cl->next->prev = cl->prev;
    cl->prev = cl->next = NULL;
    srv->n_clients--;
    if (srv->hooks.closed)
        srv->hooks.closed(srv->hooks.ctx, cl);
    uv_close((uv_handle_t *)&cl->pipe, control_on_client_closed);
}

void control_client_drop(struct control_client *cl)
{
    control_client_close(cl);
}

static void control_on_shutdown(uv_shutdown_t *req, int status)
{
    struct control_client *cl = req->data;
    (void)status;
    free(req);
    control_client_close(cl);
    control_client_unref(cl);
}

void control_client_shutdown(struct control_client *cl)
{
    if (cl->closing)
        return;
    uv_read_stop((uv_stream_t *)&cl->pipe);
    uv_shutdown_t *req = malloc(sizeof(*req));
    if (!req || uv_shutdown(req, (uv_stream_t *)&cl->pipe, control_on_shutdown) < 0) {
        free(req);
        control_client_close(cl);
        return;
    }
    req->data = cl;
    control_client_ref(cl);
}

static void control_on_write(uv_write_t *req, int status)
{
    struct control_write *w = (struct control_write *)req;
    struct control_client *cl = w->cl;
    cl->writes_pending--;
    cl->bytes_pending -= w->len;
    free(w->buf);
    free(w);
    if (status < 0 && status != UV_ECANCELED)
        log_debug("control: write to client (uid %u): %s", (unsigned)cl->uid, uv_strerror(status));
    if (status == 0)
        cl->last_active_ms = uv_now(cl->srv->loop); /* the peer takes its output */
    if (status < 0)
        control_client_close(cl);
    else if (cl->writes_pending == 0 && !cl->closing && cl->srv->hooks.drained)
        cl->srv->hooks.drained(cl->srv->hooks.ctx, cl);
    control_client_unref(cl);
}

int control_send(struct control_client *cl, char *line, size_t len)
{
    if (!line)
        return -ENOMEM;
    if (cl->closing) {
        free(line);
        return -EPIPE;
    }
    struct control_write *w = malloc(sizeof(*w));
    if (!w) {
        free(line);
        return -ENOMEM;
    }
    w->cl = cl;
    w->len = len;
    w->buf = line;
    uv_buf_t b = uv_buf_init(line, (unsigned)len);
    int rc = uv_write(&w->req, (uv_stream_t *)&cl->pipe, &b, 1, control_on_write);
    if (rc < 0) {
        free(line);
        free(w);
        control_client_close(cl);
        return -EPIPE;
    }
    control_client_ref(cl);
    if (cl->writes_pending == 0)
        cl->last_active_ms = uv_now(cl->srv->loop); /* output to read from now on */
    cl->writes_pending++;
    cl->bytes_pending += len;
    /* What libuv still holds is what the kernel would not take. */
    size_t queued = uv_stream_get_write_queue_size((uv_stream_t *)&cl->pipe);
    if ((int64_t)queued > cl->srv->cfg->client_output_max_bytes) {
        log_warn("control: client pid %d uid %u is not reading (%zu bytes queued, limit %lld);"
                 " disconnecting it",
                 (int)cl->pid, (unsigned)cl->uid, queued,
                 (long long)cl->srv->cfg->client_output_max_bytes);
        control_client_close(cl);
        return -ENOBUFS;
    }
    return 0;
}

int control_reply_ok(struct control_client *cl, const json_t *id, json_t *result)
{
    size_t n = 0;
    char *line = gpt_ctl_reply_ok(id, result, &n);
    return control_send(cl, line, n);
}

int control_reply_err(struct control_client *cl, const json_t *id, int rc,
                      const struct gpt_err *err)
{
    size_t n = 0;
    char *line = gpt_ctl_reply_from_err(id, rc, err, &n);
    return control_send(cl, line, n);
}

static void control_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)h;
    (void)suggested;
    static char chunk[CONTROL_READ_CHUNK]; /* loop thread only; consumed before the next read */
    *buf = uv_buf_init(chunk, sizeof(chunk));
}

/* Decodes and dispatches every complete line in the client's buffer. */
static void control_process_lines(struct control_client *cl)
{
    struct control *srv = cl->srv;
    const char *line;
    size_t len;
    int rc;
    control_client_ref(cl);
    while (!cl->closing && (rc = gpt_ctl_linebuf_next(&cl->lb, &line, &len)) != 0) {
        struct gpt_ctl_request req;
        struct gpt_err err;
        gpt_err_clear(&err);
        if (rc < 0) {
            gpt_err_set(&err, rc, NULL, "request longer than %u bytes", GPT_CTL_LINE_MAX);
            control_reply_err(cl, NULL, rc, &err);
            control_client_shutdown(cl);
            break;
        }
        cl->last_active_ms = uv_now(srv->loop);
        rc = gpt_ctl_request_decode(line, len, &req, &err);
        if (rc < 0)
            control_reply_err(cl, req.id, rc, &err);
        else
            srv->hooks.request(srv->hooks.ctx, cl, &req);
        gpt_ctl_request_done(&req);
    }
    control_client_unref(cl);
}

/* Whether the peer closed its end entirely (not only its sending half):
 * a Unix stream socket whose peer is closed polls as hung up. */
static bool control_peer_gone(struct control_client *cl)
{
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&cl->pipe, &fd) < 0)
        return false;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR));
}

static void control_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct control_client *cl = s->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        /* EOF: what was a complete line has been answered; a half line is
         * dropped. Queued replies still go out before the close. */
        if (nread != UV_EOF)
            log_debug("control: read: %s", uv_strerror((int)nread));
        uv_read_stop(s);
        cl->eof = true;
        /* A client that only finished sending still reads its answers; one
         * that is gone (killed, closed) is closed now, so that the work it
         * asked for is cancelled instead of running for nobody. */
        if (cl->busy > 0 && control_peer_gone(cl)) {
            log_debug("control: the client (uid %u, pid %d) left with %u requests under way",
                      (unsigned)cl->uid, (int)cl->pid, cl->busy);
            control_client_close(cl);
            return;
        }
        control_client_idle_check(cl);
        return;
    }
    int rc = gpt_ctl_linebuf_push(&cl->lb, buf->base, (size_t)nread);
    if (rc == GPT_CTL_E_TOO_LONG) {
        /* Answer the complete lines before it, then refuse the long one. */
        control_process_lines(cl);
        if (cl->closing)
            return;
        struct gpt_err err;
        gpt_err_set(&err, rc, NULL, "request longer than %u bytes", GPT_CTL_LINE_MAX);
        control_reply_err(cl, NULL, rc, &err);
        control_client_shutdown(cl);
        return;
    }
    if (rc < 0) {
        log_error("control: out of memory reading a request");
        control_client_close(cl);
        return;
    }
    control_process_lines(cl);
}

static void control_peer_cred(struct control_client *cl)
{
    uv_os_fd_t fd;
    struct ucred cred;
    socklen_t n = sizeof(cred);
    cl->uid = (uid_t)-1;
    cl->pid = 0;
    if (uv_fileno((uv_handle_t *)&cl->pipe, &fd) == 0 &&
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &n) == 0) {
        cl->uid = cred.uid;
        cl->pid = cred.pid;
    }
}

static void control_on_connection(uv_stream_t *server, int status)
{
    struct control *srv = server->data;
    if (status < 0) {
        log_warn("control: accept: %s", uv_strerror(status));
        return;
    }
    struct control_client *cl = calloc(1, sizeof(*cl));
    if (!cl) {
        log_error("control: out of memory accepting a client");
        return;
    }
    cl->srv = srv;
    cl->refs = 1; /* dropped by the close callback */
    gpt_ctl_linebuf_init(&cl->lb, GPT_CTL_LINE_MAX);
    uv_pipe_init(srv->loop, &cl->pipe, 0);
    cl->pipe.data = cl;
    srv->handles++;
    if (uv_accept(server, (uv_stream_t *)&cl->pipe) < 0) {
        cl->closing = true;
        uv_close((uv_handle_t *)&cl->pipe, control_on_client_closed);
        return;
    }
    control_peer_cred(cl);
    cl->next = srv->clients;
    if (srv->clients)
        srv->clients->prev = cl;
    srv->clients = cl;
    srv->n_clients++;
    if (srv->n_clients > srv->cfg->max_clients || cl->uid == (uid_t)-1) {
        struct gpt_err err;
        int rc = cl->uid == (uid_t)-1 ? -EACCES : -GPT_E_LIMIT;
        gpt_err_set(&err, rc, NULL,
                    rc == -EACCES ? "cannot read the peer's credentials"
                                  : "too many clients (max_clients = %d)",
                    srv->cfg->max_clients);
        control_reply_err(cl, NULL, rc, &err);
        control_client_shutdown(cl);
        return;
    }
    struct gpt_err lerr;
    if (srv->hooks.admit && srv->hooks.admit(srv->hooks.ctx, srv, cl, &lerr) < 0) {
        log_warn("control: client pid %d refused: %s", (int)cl->pid, lerr.msg);
        control_reply_err(cl, NULL, -GPT_E_LIMIT, &lerr);
        control_client_shutdown(cl);
        return;
    }
    cl->last_active_ms = uv_now(srv->loop);
    log_debug("control: client pid %d uid %u connected", (int)cl->pid, (unsigned)cl->uid);
    uv_read_start((uv_stream_t *)&cl->pipe, control_on_alloc, control_on_read);
}

/* Replaces a socket file nobody listens on; refuses to steal a live one. */
static int control_clear_stale(const char *path, struct gpt_err *err)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0
                               : gpt_err_set(err, -errno, NULL, "%s: %s", path, strerror(errno));
    if (!S_ISSOCK(st.st_mode))
        return gpt_err_set(err, -EEXIST, NULL, "%s exists and is not a socket", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return gpt_err_set(err, -errno, NULL, "socket: %s", strerror(errno));
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path)) {
        close(fd);
        return gpt_err_set(err, -ENAMETOOLONG, "socket", "socket path too long: %s", path);
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int live = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    if (live)
        return gpt_err_set(err, -EADDRINUSE, NULL, "another gptd is listening on %s", path);
    unlink(path);
    return 0;
}

int control_start(uv_loop_t *loop, const struct config *cfg, const struct control_hooks *hooks,
                  struct control **ret, struct gpt_err *err)
{
    struct control *srv = calloc(1, sizeof(*srv));
    if (!srv)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    srv->loop = loop;
    srv->cfg = cfg;
    srv->hooks = *hooks;
    snprintf(srv->path, sizeof(srv->path), "%s", cfg->socket);
    int rc = control_clear_stale(srv->path, err);
    if (rc < 0) {
        free(srv);
        return rc;
    }
    uv_pipe_init(loop, &srv->listener, 0);
    srv->listener.data = srv;
    srv->handles = 1;
    /* Bind under a umask that already gives the final mode, so there is no
     * moment where the socket is more open than configured. */
    mode_t old = umask(0777 & ~(mode_t)cfg->socket_mode);
    rc = uv_pipe_bind(&srv->listener, srv->path);
    umask(old);
    if (rc < 0) {
        rc = gpt_err_set(err, rc == UV_EADDRINUSE ? -EADDRINUSE : -EIO, NULL, "bind %s: %s",
                         srv->path, uv_strerror(rc));
        goto fail;
    }
    if (chmod(srv->path, (mode_t)cfg->socket_mode) < 0) {
        rc = gpt_err_set(err, -errno, NULL, "chmod %s: %s", srv->path, strerror(errno));
        goto fail_unlink;
    }
    if (cfg->socket_group[0]) {
        struct group *g = getgrnam(cfg->socket_group);
        if (!g) {
            rc = gpt_err_set(err, -ENOENT, "socket_group", "no group \"%s\"", cfg->socket_group);
            goto fail_unlink;
        }
        if (chown(srv->path, (uid_t)-1, g->gr_gid) < 0) {
            rc = gpt_err_set(err, -errno, NULL, "chown %s: %s", srv->path, strerror(errno));
            goto fail_unlink;
        }
    }
    rc = uv_listen((uv_stream_t *)&srv->listener, 128, control_on_connection);
    if (rc < 0) {
        rc = gpt_err_set(err, -EIO, NULL, "listen %s: %s", srv->path, uv_strerror(rc));
        goto fail_unlink;
    }
    srv->listening = true;
    *ret = srv;
    return 0;
fail_unlink:
    unlink(srv->path);
fail:
    control_close(srv);
    return rc;
}

static void control_on_listener_closed(uv_handle_t *h)
{
    struct control *srv = h->data;
    srv->handles--;
    control_maybe_free(srv);
}

void control_stop_listening(struct control *srv)
{
    if (!srv || !srv->listening)
        return;
    srv->listening = false;
    unlink(srv->path);
    uv_close((uv_handle_t *)&srv->listener, control_on_listener_closed);
}

void control_close(struct control *srv)
{
    if (!srv)
        return;
    bool was_listening = srv->listening;
    srv->closing = true;
    if (was_listening) {
        control_stop_listening(srv);
    } else if (!uv_is_closing((uv_handle_t *)&srv->listener)) {
        /* Never listened (failed start): the handle still needs closing. */
        uv_close((uv_handle_t *)&srv->listener, control_on_listener_closed);
    }
    while (srv->clients)
        control_client_close(srv->clients);
    /* The listener may have been closed (and counted down) before, by
     * control_stop_listening: then nothing is left to free srv later. */
    control_maybe_free(srv);
}

void control_foreach(struct control *srv, void (*fn)(void *ctx, struct control_client *cl),
                     void *ctx)
{
    struct control_client *cl = srv->clients;
    while (cl) {
        struct control_client *next = cl->next;
        control_client_ref(cl);
        fn(ctx, cl);
        /* fn may have closed cl (unlinked it); `next` is still open unless
         * fn closed it too, which the contract forbids. */
        control_client_unref(cl);
        cl = next;
    }
}

int control_client_count(const struct control *srv)
{
    return srv->n_clients;
}
