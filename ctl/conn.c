/*
 * conn: gptctl's connection to gptd (see gptctl.h): connect to the control
 * socket, send one request line, read reply lines through a bounded line
 * buffer. Error messages from gptd are printed escaped: they may quote
 * what a user sent.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gptctl.h"

int ctl_connect(struct ctl *c)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(c->socket) >= sizeof(sa.sun_path)) {
        fprintf(stderr, "%s: cannot reach gptd at %s: socket path too long\n", ctl_prog, c->socket);
        return EXIT_NOREACH;
    }
    memcpy(sa.sun_path, c->socket, strlen(c->socket) + 1);
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        if (c->offline_ok && (e == ENOENT || e == ECONNREFUSED))
            return EXIT_NOREACH;
        fprintf(stderr, "%s: cannot reach gptd at %s: %s%s\n", ctl_prog, c->socket, strerror(e),
                e == ENOENT || e == ECONNREFUSED
                    ? " (is gptd running? use --socket or GPTD_SOCKET to point elsewhere)"
                : e == EACCES ? " (not in the socket's group?)"
                              : "");
        return EXIT_NOREACH;
    }
    gpt_ctl_linebuf_init(&c->lb, CTL_REPLY_MAX);
    return 0;
}

int ctl_send(struct ctl *c, json_t *req)
{
    size_t n;
    char *line = gpt_ctl_line_encode(req, &n);
    json_decref(req);
    if (!line) {
        fprintf(stderr, "%s: out of memory\n", ctl_prog);
        return EXIT_FAIL;
    }
    for (size_t off = 0; off < n;) {
        ssize_t k = send(c->fd, line + off, n - off, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            fprintf(stderr, "%s: lost the connection to gptd at %s: %s\n", ctl_prog, c->socket,
                    strerror(errno));
            free(line);
            return EXIT_NOREACH;
        }
        off += (size_t)k;
    }
    free(line);
    return 0;
}

/* Whether a line only says that the request waits for a slot of gptd's
 * user work pool (it comes before the reply). */
static bool ctl_is_waiting(const json_t *o)
{
    const char *type = json_string_value(json_object_get(o, "type"));
    return type && strcmp(type, "waiting") == 0 && json_is_true(json_object_get(o, "ok"));
}

/* Says so on stderr, in --json mode too, so that the reply stays the one
 * line on stdout. Returns whether the line was one. */
static bool ctl_waiting_notice(const json_t *o)
{
    if (!ctl_is_waiting(o))
        return false;
    fprintf(stderr,
            "%s: waiting for a slot: %lld request%s ahead, %lld of yours running "
            "(user_work_per_uid = %lld, user_work_threads = %lld)\n",
            ctl_prog, (long long)json_integer_value(json_object_get(o, "ahead")),
            json_integer_value(json_object_get(o, "ahead")) == 1 ? "" : "s",
            (long long)json_integer_value(json_object_get(o, "running")),
            (long long)json_integer_value(json_object_get(o, "per_uid")),
            (long long)json_integer_value(json_object_get(o, "threads")));
    return true;
}

/* Reads the next reply line. Returns 0 with a new object, or an exit code.
 * The raw line is printed when --json is on and `echo` is set. */
int ctl_recv(struct ctl *c, json_t **ret, bool echo)
{
    for (;;) {
        const char *line;
        size_t len;
        int rc = gpt_ctl_linebuf_next(&c->lb, &line, &len);
        if (rc < 0) {
            fprintf(stderr, "%s: reply longer than %u bytes\n", ctl_prog, CTL_REPLY_MAX);
            return EXIT_FAIL;
        }
        if (rc == 1) {
            json_error_t jerr;
            json_t *o = json_loadb(line, len, 0, &jerr);
            if (!json_is_object(o)) {
                json_decref(o);
                fprintf(stderr, "%s: gptd sent a malformed line: %s\n", ctl_prog,
                        out_esc(jerr.text, 0));
                return EXIT_FAIL;
            }
            if (echo && c->json && !ctl_is_waiting(o)) {
                fwrite(line, 1, len, stdout);
                fputc('\n', stdout);
                fflush(stdout);
            }
            *ret = o;
            return 0;
        }
        char buf[65536];
        ssize_t k = recv(c->fd, buf, sizeof(buf), 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            fprintf(stderr, "%s: gptd at %s closed the connection%s%s\n", ctl_prog, c->socket,
                    k < 0 ? ": " : "", k < 0 ? strerror(errno) : "");
            return EXIT_NOREACH;
        }
        if (gpt_ctl_linebuf_push(&c->lb, buf, (size_t)k) < 0) {
            fprintf(stderr, "%s: reply longer than %u bytes\n", ctl_prog, CTL_REPLY_MAX);
            return EXIT_FAIL;
        }
    }
}

/* Prints an error reply; returns EXIT_FAIL. */
int ctl_print_error(const json_t *reply)
{
    const json_t *e = json_object_get(reply, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    const char *path = json_string_value(json_object_get(e, "path"));
    fprintf(stderr, "%s: %s%s%s: %s\n", ctl_prog, code ? out_esc(code, 0) : "error",
            path ? " at " : "", path ? out_esc(path, 0) : "",
            msg ? out_esc(msg, 0) : "(no message)");
    return EXIT_FAIL;
}

/* Sends `req` and waits for its one reply. Returns 0 with the reply (ok),
 * or an exit code (the error already printed). */
int ctl_call(struct ctl *c, json_t *req, json_t **ret)
{
    int rc = ctl_send(c, req);
    if (rc)
        return rc;
    json_t *reply;
    for (;;) {
        if ((rc = ctl_recv(c, &reply, true)))
            return rc;
        if (!ctl_waiting_notice(reply))
            break;
        json_decref(reply);
    }
    if (!json_is_true(json_object_get(reply, "ok"))) {
        rc = c->json ? EXIT_FAIL : ctl_print_error(reply);
        json_decref(reply);
        return rc;
    }
    *ret = reply;
    return 0;
}

json_t *ctl_request(struct ctl *c, int op)
{
    /* NULL on ENOMEM: setting fields on NULL fails quietly and ctl_send
     * then reports "out of memory". */
    return gpt_ctl_request_new(op, ++c->next_id);
}
