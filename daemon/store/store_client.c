/*
 * store_client: see store_client.h. The secret file and the blocking
 * client, which owns one socket and runs on whichever thread calls it (one
 * call at a time, under its mutex); the asynchronous client is in
 * store_client_async.c. Both speak proto/store.h: the mutual handshake,
 * then sealed frames both ways (store_auth.h), so a reply that was not sent
 * by a server holding the secret, in this session, in this order, fails the
 * connection.
 */
#include "store_client.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "monotime.h"

#define POLL_SLICE_MS    100 /* how often a blocked call looks at the abort flag */
#define READ_CHUNK_BYTES 65536

/* ---- secret ---- */

int store_secret_load(const char *path, void *buf, size_t cap, size_t *ret_len, struct gpt_err *err)
{
    struct stat st;
    size_t got = 0;
    int fd, rc = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return gpt_err_set(err, -errno, NULL, "store secret %s: %s", path, strerror(errno));
    if (fstat(fd, &st) < 0) {
        rc = gpt_err_set(err, -errno, NULL, "store secret %s: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = gpt_err_set(err, -EINVAL, NULL, "store secret %s: not a regular file", path);
        goto out;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        rc = gpt_err_set(err, -EPERM, NULL,
                         "store secret %s: mode %03o lets others read it; chmod 600", path,
                         (unsigned)(st.st_mode & 0777));
        goto out;
    }
    if (st.st_size <= 0 || (size_t)st.st_size > cap) {
        rc = gpt_err_set(err, -EINVAL, NULL,
                         "store secret %s: size %lld not in %d..%zu bytes (make one with: "
                         "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n' > FILE; "
                         "chmod 600 FILE)",
                         path, (long long)st.st_size, STORE_SECRET_MIN, cap);
        goto out;
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, (char *)buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = gpt_err_set(err, n < 0 ? -errno : -EIO, NULL, "store secret %s: short read", path);
            goto out;
        }
        got += (size_t)n;
    }
    if (got > 0 && ((char *)buf)[got - 1] == '\n')
        got--;
    if (got < STORE_SECRET_MIN) {
        rc = gpt_err_set(err, -EINVAL, NULL,
                         "store secret %s: %zu bytes, shorter than the minimum of %d bytes "
                         "(make one with: head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n' "
                         "> FILE; chmod 600 FILE)",
                         path, got, STORE_SECRET_MIN);
        goto out;
    }
    *ret_len = got;
out:
    close(fd);
    return rc;
}

/* ---- blocking client ---- */

struct store_client {
    int fd;
    int timeout_ms;
    atomic_int aborted;
    bool broken;
    pthread_mutex_t lock;
    struct proto_store_out out;
    struct proto_store_parser parser;
    struct store_auth_session session; /* ready once the handshake is done */
    uint8_t rbuf[READ_CHUNK_BYTES];
};

/* Waits for `events` on fd up to the deadline, in slices so an abort is seen
 * quickly. Returns 0, -ETIMEDOUT, -ECANCELED or a negative errno. */
static int wait_fd(struct store_client *c, short events, int64_t deadline, struct gpt_err *err)
{
    for (;;) {
        struct pollfd pfd = {.fd = c->fd, .events = events};
        int64_t left = deadline - monotime_ms();
        int rc;

        if (atomic_load(&c->aborted))
            return gpt_err_set(err, -ECANCELED, NULL, "store client: aborted");
        if (left <= 0)
            return gpt_err_set(err, -ETIMEDOUT, NULL, "store client: timed out");
        rc = poll(&pfd, 1, (int)(left < POLL_SLICE_MS ? left : POLL_SLICE_MS));
        if (rc < 0 && errno != EINTR)
            return gpt_err_set(err, -errno, NULL, "store client: poll: %s", strerror(errno));
        if (rc > 0)
            return 0;
    }
}

/* Sends c->out and reads one reply frame into *ret (views valid until the
 * next exchange). Any failure marks the connection broken. */
static int exchange(struct store_client *c, int64_t deadline, struct proto_store_msg *ret,
                    struct gpt_err *err)
{
    size_t sent = 0;
    int rc;

    if (c->broken) {
        c->out.len = 0;
        return gpt_err_set(err, atomic_load(&c->aborted) ? -ECANCELED : -EPIPE, NULL,
                           "store client: connection unusable after an earlier failure");
    }
    if (store_auth_session_ready(&c->session) && store_auth_seal(&c->session, &c->out, 0) < 0) {
        rc = gpt_err_set(err, -GPT_E_AUTH, NULL, "store client: cannot seal the request");
        goto fail;
    }
    while (sent < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + sent, c->out.len - sent, MSG_NOSIGNAL);
        if (n >= 0) {
            sent += (size_t)n;
            continue;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            rc = gpt_err_set(err, -errno, NULL, "store client: send: %s", strerror(errno));
            goto fail;
        }
        if ((rc = wait_fd(c, POLLOUT, deadline, err)) < 0)
            goto fail;
    }
    c->out.len = 0;
    for (;;) {
        ssize_t n;
        rc = proto_store_parser_next(&c->parser, ret, err);
        if (rc == 1)
            return 0;
        if (rc < 0)
            goto fail;
        n = recv(c->fd, c->rbuf, sizeof(c->rbuf), 0);
        if (n == 0) {
            rc = gpt_err_set(err, -ECONNRESET, NULL, "store client: server closed the connection");
            goto fail;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                rc = gpt_err_set(err, -errno, NULL, "store client: recv: %s", strerror(errno));
                goto fail;
            }
            if ((rc = wait_fd(c, POLLIN, deadline, err)) < 0)
                goto fail;
            continue;
        }
        if ((rc = proto_store_parser_feed(&c->parser, c->rbuf, (size_t)n, err)) < 0)
            goto fail;
    }
fail:
    c->out.len = 0;
    c->broken = true;
    return rc;
}

/* Checks a reply: ERROR becomes its error code, another type than `expect`
 * a protocol error (and a broken connection). */
static int reply_check(struct store_client *c, const struct proto_store_msg *m, int expect,
                       struct gpt_err *err)
{
    if (m->type == PROTO_STORE_ERROR)
        return gpt_err_set(err, proto_store_status_to_errno(m->status), NULL, "store: %.*s",
                           (int)m->val_len, (const char *)m->val);
    if ((int)m->type != expect) {
        c->broken = true;
        return gpt_err_set(err, -GPT_E_PROTO, NULL, "store client: got %s, expected %s",
                           proto_store_type_name(m->type), proto_store_type_name(expect));
    }
    return 0;
}

static int connect_addr(struct store_client *c, const struct addrinfo *ai, int64_t deadline,
                        struct gpt_err *err)
{
    int one = 1, soerr = 0, rc;
    socklen_t len = sizeof(soerr);

    c->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return gpt_err_set(err, -errno, NULL, "store client: socket: %s", strerror(errno));
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(c->fd, ai->ai_addr, ai->ai_addrlen) == 0)
        return 0;
    if (errno != EINPROGRESS)
        rc = gpt_err_set(err, -errno, NULL, "store client: connect: %s", strerror(errno));
    else if ((rc = wait_fd(c, POLLOUT, deadline, err)) == 0 &&
             getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 && soerr != 0)
        rc = gpt_err_set(err, -soerr, NULL, "store client: connect: %s", strerror(soerr));
    if (rc < 0) {
        close(c->fd);
        c->fd = -1;
    }
    return rc;
}

/* HELLO(Nc) -> CHALLENGE(Ns) -> AUTH(client proof [, node proof]) ->
 * PROOF(server proof [, wrapped node key]) or ERROR (the node proof
 * refused), then the session keys (proto/store.h). */
static int client_handshake(struct store_client *c, const struct store_client_opts *opts,
                            int64_t deadline, struct gpt_err *err)
{
    uint8_t nc[GPT_STORE_NONCE_BYTES], ns[GPT_STORE_NONCE_BYTES], mac[GPT_STORE_MAC_BYTES];
    uint8_t node_mac[GPT_STORE_MAC_BYTES];
    struct proto_store_msg m;
    int rc;

    if (store_auth_random(nc, sizeof(nc)) < 0)
        return gpt_err_set(err, -GPT_E_AUTH, NULL, "store client: no random bytes");
    if ((rc = proto_store_put_hello(&c->out, GPT_STORE_PROTO_VERSION, nc, opts->node)) < 0)
        return gpt_err_set(err, rc, NULL, "store client: %s",
                           rc == -EINVAL ? "node id too long" : "out of memory");
    if ((rc = exchange(c, deadline, &m, err)) < 0)
        goto dropped;
    if (m.type != PROTO_STORE_CHALLENGE)
        return gpt_err_set(err, -GPT_E_PROTO, NULL, "store client: got %s, expected CHALLENGE",
                           proto_store_type_name(m.type));
    memcpy(ns, m.nonce, sizeof(ns));
    if (store_auth_proof(opts->secret, opts->secret_len, GPT_STORE_LABEL_CLIENT, nc, ns, opts->node,
                         mac) < 0)
        return gpt_err_set(err, -GPT_E_AUTH, NULL, "store client: HMAC failed");
    if (opts->node_key && store_auth_proof(opts->node_key, GPT_STORE_MAC_BYTES,
                                           GPT_STORE_LABEL_NODE, nc, ns, opts->node, node_mac) < 0)
        return gpt_err_set(err, -GPT_E_AUTH, NULL, "store client: HMAC failed");
    if ((rc = proto_store_put_auth(&c->out, mac, opts->node_key ? node_mac : NULL)) < 0)
        return gpt_err_set(err, rc, NULL, "store client: out of memory");
    if ((rc = exchange(c, deadline, &m, err)) < 0)
        goto dropped;
    if (m.type == PROTO_STORE_ERROR) /* the node key refused: the message names the node */
        return gpt_err_set(err, proto_store_status_to_errno(m.status), NULL, "store: %.*s",
                           (int)m.val_len, (const char *)m.val);
    if (m.type != PROTO_STORE_PROOF)
        return gpt_err_set(err, -GPT_E_PROTO, NULL, "store client: got %s, expected PROOF",
                           proto_store_type_name(m.type));
    if (store_auth_proof(opts->secret, opts->secret_len, GPT_STORE_LABEL_SERVER, nc, ns, opts->node,
                         mac) < 0 ||
        CRYPTO_memcmp(mac, m.nonce, sizeof(mac)) != 0)
        return gpt_err_set(err, -GPT_E_AUTH, NULL,
                           "store client: the server at %s:%d does not prove it holds the cluster "
                           "secret (an impostor, or another cluster's store)",
                           opts->host, opts->port);
    if ((rc = store_auth_session_init(&c->session, false, opts->secret, opts->secret_len, nc, ns)) <
        0)
        return gpt_err_set(err, rc, NULL, "store client: cannot derive the session keys");
    if (m.val && opts->node && opts->node_key_issued) {
        if (store_auth_wrap(opts->secret, opts->secret_len, nc, ns, opts->node, m.val, node_mac) <
            0)
            return gpt_err_set(err, -GPT_E_AUTH, NULL, "store client: HMAC failed");
        opts->node_key_issued(opts->node_key_arg, opts->node, node_mac);
        OPENSSL_cleanse(node_mac, sizeof(node_mac));
    }
    proto_store_parser_seal(&c->parser, GPT_STORE_TAG_BYTES, store_auth_verify, &c->session);
    c->out.tag_bytes = GPT_STORE_TAG_BYTES;
    c->parser.frame_max = GPT_STORE_FRAME_MAX;
    return 0;
dropped:
    /* The server answers a failed handshake by closing the connection. */
    if (rc == -ECONNRESET || rc == -EPIPE)
        rc = gpt_err_set(err, -GPT_E_AUTH, NULL,
                         "store client: dropped in the handshake (wrong secret or version?)");
    return rc;
}

int store_client_connect(const struct store_client_opts *opts, struct store_client **ret,
                         struct gpt_err *err)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL, *ai;
    struct store_client *c;
    char port[16];
    int64_t deadline;
    int rc;

    if (!opts->secret || opts->secret_len < STORE_SECRET_MIN)
        return gpt_err_set(err, -EINVAL, NULL,
                           "store client: a cluster secret of at least %d bytes is required",
                           STORE_SECRET_MIN);
    c = calloc(1, sizeof(*c));
    if (!c)
        return gpt_err_set(err, -ENOMEM, NULL, "store client: out of memory");
    c->fd = -1;
    c->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : 30000;
    pthread_mutex_init(&c->lock, NULL);
    proto_store_out_init(&c->out);
    proto_store_parser_init(&c->parser, GPT_STORE_HANDSHAKE_FRAME_MAX);
    deadline = monotime_ms() + c->timeout_ms;
    snprintf(port, sizeof(port), "%d", opts->port);
    rc = getaddrinfo(opts->host, port, &hints, &res);
    if (rc != 0) {
        rc = gpt_err_set(err, -EHOSTUNREACH, NULL, "store client: %s: %s", opts->host,
                         gai_strerror(rc));
        goto fail;
    }
    rc = -EHOSTUNREACH;
    for (ai = res; ai && rc < 0; ai = ai->ai_next)
        rc = connect_addr(c, ai, deadline, err);
    freeaddrinfo(res);
    if (rc < 0)
        goto fail;
    if ((rc = client_handshake(c, opts, deadline, err)) < 0)
        goto fail;
    *ret = c;
    return 0;
fail:
    store_client_free(c);
    return rc;
}

void store_client_free(struct store_client *c)
{
    if (!c)
        return;
    if (c->fd >= 0)
        close(c->fd);
    proto_store_out_done(&c->out);
    proto_store_parser_done(&c->parser);
    store_auth_session_done(&c->session);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

void store_client_abort(struct store_client *c)
{
    atomic_store(&c->aborted, 1);
}

/* One request already encoded in c->out (rc_enc is the encoder's result):
 * exchange under the lock and check the reply type. The reply views in *m
 * stay valid until the lock is released by call_end(). */
static int call_begin(struct store_client *c, int rc_enc, int64_t timeout_ms, int expect,
                      struct proto_store_msg *m, struct gpt_err *err)
{
    int rc;

    if (rc_enc < 0) {
        c->out.len = 0;
        return gpt_err_set(err, rc_enc, NULL, "store client: cannot encode request: %s",
                           gpt_strerror(rc_enc));
    }
    rc = exchange(c, monotime_ms() + timeout_ms, m, err);
    if (rc == 0)
        rc = reply_check(c, m, expect, err);
    return rc;
}

static void *dup_value(const struct proto_store_msg *m)
{
    uint8_t *v = malloc(m->val_len + 1);

    if (v) {
        memcpy(v, m->val, m->val_len);
        v[m->val_len] = 0;
    }
    return v;
}

int store_client_set(struct store_client *c, const char *key, const void *val, size_t len,
                     struct gpt_err *err)
{
    struct proto_store_msg m;
    int rc;

    pthread_mutex_lock(&c->lock);
    rc = proto_store_put_key_value(&c->out, PROTO_STORE_SET, key, strlen(key), val, len);
    rc = call_begin(c, rc, c->timeout_ms, PROTO_STORE_OK, &m, err);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int store_client_append(struct store_client *c, const char *key, const void *val, size_t len,
                        struct gpt_err *err)
{
    struct proto_store_msg m;
    int rc;

    pthread_mutex_lock(&c->lock);
    rc = proto_store_put_key_value(&c->out, PROTO_STORE_APPEND, key, strlen(key), val, len);
    rc = call_begin(c, rc, c->timeout_ms, PROTO_STORE_OK, &m, err);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int store_client_get(struct store_client *c, const char *key, void **ret_val, size_t *ret_len,
                     struct gpt_err *err)
{
    struct proto_store_msg m;
    int rc;

    pthread_mutex_lock(&c->lock);
    rc = proto_store_put_key(&c->out, PROTO_STORE_GET, key, strlen(key));
    rc = call_begin(c, rc, c->timeout_ms, PROTO_STORE_VALUE, &m, err);
    if (rc == 0) {
        void *v = dup_value(&m);
        if (!v) {
            rc = gpt_err_set(err, -ENOMEM, NULL, "store client: out of memory");
        } else {
            *ret_val = v;
            *ret_len = m.val_len;
        }
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int store_client_add(struct store_client *c, const char *key, int64_t delta, int64_t *ret_value,
                     struct gpt_err *err)
{
    struct proto_store_msg m;
    int rc;

    pthread_mutex_lock(&c->lock);
    rc = proto_store_put_add(&c->out, key, strlen(key), delta);
    rc = call_begin(c, rc, c->timeout_ms, PROTO_STORE_INT, &m, err);
    if (rc == 0 && ret_value)
        *ret_value = m.num;
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int store_client_compare_set(struct store_client *c, const char *key, const void *expected,
                             size_t expected_len, const void *desired, size_t desired_len,
                             void **ret_val, size_t *ret_len, struct gpt_err *err)
{
    struct proto_store_msg m;
    int rc;

    pthread_mutex_lock(&c->lock);
    rc = proto_store_put_compare_set(&c->out, key, strlen(key), expected, expected_len, desired,
                                     desired_len);
    rc = call_begin(c, rc, c->timeout_ms, PROTO_STORE_VALUE, &m, err);
    if (rc == 0 && ret_val) {
        void *v = dup_value(&m);
        if (!v) {
            rc = gpt_err_set(err, -ENOMEM, NULL, "store client: out of memory");
        } else {
            *ret_val = v;
            if (ret_len)
                *ret_len = m.val_len;
        }
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int store_client_wait(struct store_client *c, const char *const *keys, size_t nkeys, int timeout_ms,
                      struct gpt_err *err)
{
    int effective = timeout_ms > 0 ? timeout_ms : c->timeout_ms;
    struct proto_store_msg m;
    int rc;

    pthread_mutex_lock(&c->lock);
    rc = proto_store_put_keys(&c->out, PROTO_STORE_WAIT, (uint32_t)effective, keys, nkeys);
    /* The server times the wait; our own deadline only guards a lost server. */
    rc = call_begin(c, rc, (int64_t)effective + c->timeout_ms, PROTO_STORE_OK, &m, err);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int store_client_check(struct store_client *c, const char *const *keys, size_t nkeys, int *ret_all,
                       struct gpt_err *err)
{
    struct proto_store_msg m;
    int rc;

    pthread_mutex_lock(&c->lock);
    rc = proto_store_put_keys(&c->out, PROTO_STORE_CHECK, 0, keys, nkeys);
    rc = call_begin(c, rc, c->timeout_ms, PROTO_STORE_INT, &m, err);
    if (rc == 0)
        *ret_all = m.num != 0;
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int store_client_delete(struct store_client *c, const char *key, int *ret_deleted,
                        struct gpt_err *err)
{
    struct proto_store_msg m;
    int rc;

    pthread_mutex_lock(&c->lock);
    rc = proto_store_put_key(&c->out, PROTO_STORE_DELETE, key, strlen(key));
    rc = call_begin(c, rc, c->timeout_ms, PROTO_STORE_INT, &m, err);
    if (rc == 0 && ret_deleted)
        *ret_deleted = m.num != 0;
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int store_client_num_keys(struct store_client *c, int64_t *ret_n, struct gpt_err *err)
{
    struct proto_store_msg m;
    int rc;

    pthread_mutex_lock(&c->lock);
    rc = proto_store_put_num_keys(&c->out);
    rc = call_begin(c, rc, c->timeout_ms, PROTO_STORE_INT, &m, err);
    if (rc == 0)
        *ret_n = m.num;
    pthread_mutex_unlock(&c->lock);
    return rc;
}
