/*
 * store_client_async: the asynchronous store client of store_client.h (the
 * daemon's side of the cluster). Owns a uv_tcp_t, a FIFO of pending
 * callbacks, the requests queued before the handshake is done, and the
 * connection's sealing session (store_auth.h). Runs on its loop's thread.
 * Speaks the mutual handshake of proto/store.h, then seals every request
 * and drops the connection on a reply that fails its tag.
 */
#include "store_client.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "log.h"

#define READ_CHUNK_BYTES 65536

/* ---- asynchronous client ---- */

enum async_state {
    ASYNC_CONNECTING,
    ASYNC_HELLO, /* HELLO sent, waiting for CHALLENGE */
    ASYNC_AUTH,  /* AUTH sent, waiting for PROOF */
    ASYNC_READY,
    ASYNC_FAILED,
    ASYNC_CLOSING,
};

struct async_pending {
    struct async_pending *next;
    int expect; /* reply type on success */
    void (*cb)(void *arg, const struct store_reply *r);
    void *arg;
};

/* A WATCH registered by this client: one per key, until its NOTIFY. */
struct async_watch {
    struct async_watch *next;
    struct store_client_async *a;
    void (*cb)(void *arg, const struct store_reply *r);
    void *arg;
    size_t len;
    char key[]; /* NUL-terminated */
};

struct async_write {
    uv_write_t req;
    struct proto_store_out buf;
};

struct store_client_async {
    uv_loop_t *loop;
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    enum async_state state;
    int fail_status;
    uint8_t *secret;
    size_t secret_len;
    char node[GPT_STORE_NODE_MAX + 1]; /* the node id of the HELLO ("": none) */
    bool has_node_key;
    uint8_t node_key[GPT_STORE_MAC_BYTES];  /* proved in AUTH when has_node_key */
    char refusal[GPT_STORE_ERRMSG_MAX + 1]; /* the server's ERROR in place of PROOF */
    void (*node_key_issued)(void *arg, const char *node, const uint8_t key[GPT_STORE_MAC_BYTES]);
    void *node_key_arg;
    void (*connect_cb)(void *arg, int status);
    void *connect_arg;
    void (*close_cb)(void *arg);
    void *close_arg;
    struct proto_store_out queued; /* requests not yet written; sealed once READY */
    struct proto_store_parser parser;
    struct async_pending *head, *tail;
    struct async_watch *watches;
    uint8_t nc[GPT_STORE_NONCE_BYTES]; /* our handshake nonce */
    uint8_t ns[GPT_STORE_NONCE_BYTES]; /* the server's */
    struct store_auth_session session;
    uint64_t tag_logged_ms; /* when a bad tag was last logged (uv_now) */
    char peer[64];
    uint8_t rbuf[READ_CHUNK_BYTES];
};

static void async_write_done(uv_write_t *req, int status)
{
    struct async_write *w = (struct async_write *)req;

    (void)status; /* a failed write also fails the read side, which reports it */
    proto_store_out_done(&w->buf);
    free(w);
}

/* Writes `o` (taking its buffer). */
static int async_write(struct store_client_async *a, struct proto_store_out *o)
{
    struct async_write *w;
    uv_buf_t b;
    int rc;

    if (o->len == 0)
        return 0;
    w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->buf = *o;
    proto_store_out_init(o);
    o->tag_bytes = w->buf.tag_bytes; /* later frames are sealed like these */
    b = uv_buf_init((char *)w->buf.data, (unsigned)w->buf.len);
    rc = uv_write(&w->req, (uv_stream_t *)&a->tcp, &b, 1, async_write_done);
    if (rc < 0) {
        proto_store_out_done(&w->buf);
        free(w);
    }
    return rc;
}

/* Fails every pending request with `status`, oldest first. Callbacks may
 * close the client (the struct stays valid until the handle is closed). */
static void async_fail_pending(struct store_client_async *a, int status)
{
    struct store_reply r = {.status = status};

    while (a->head) {
        struct async_pending *p = a->head;
        a->head = p->next;
        if (!a->head)
            a->tail = NULL;
        p->cb(p->arg, &r);
        free(p);
    }
}

/* Unlinks w from a's watches (it may already be gone). */
static void async_watch_unlink(struct store_client_async *a, struct async_watch *w)
{
    struct async_watch **pp = &a->watches;

    while (*pp && *pp != w)
        pp = &(*pp)->next;
    if (*pp)
        *pp = w->next;
}

/* Ends every watch with `status`; their callbacks may not watch again
 * (the client is failed or closing, so a new watch is refused). */
static void async_fail_watches(struct store_client_async *a, int status)
{
    struct store_reply r = {.status = status};

    while (a->watches) {
        struct async_watch *w = a->watches;
        a->watches = w->next;
        w->cb(w->arg, &r);
        free(w);
    }
}

static void async_fail(struct store_client_async *a, int status)
{
    enum async_state was = a->state;

    if (was == ASYNC_FAILED || was == ASYNC_CLOSING)
        return;
    a->state = ASYNC_FAILED;
    a->fail_status = status;
    uv_read_stop((uv_stream_t *)&a->tcp);
    if (was != ASYNC_READY && a->connect_cb)
        a->connect_cb(a->connect_arg, status);
    if (a->state == ASYNC_FAILED)
        async_fail_pending(a, status);
    if (a->state == ASYNC_FAILED)
        async_fail_watches(a, status);
}

static void async_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct store_client_async *a = h->data;

    (void)suggested;
    *buf = uv_buf_init((char *)a->rbuf, sizeof(a->rbuf));
}

/* The server's CHALLENGE: answer with this side's proofs (the cluster
 * secret's, and the node key's when this node holds one). */
static int async_on_challenge(struct store_client_async *a, const struct proto_store_msg *m)
{
    uint8_t mac[GPT_STORE_MAC_BYTES], node_mac[GPT_STORE_MAC_BYTES];
    struct proto_store_out o;
    int rc;

    if (m->type != PROTO_STORE_CHALLENGE)
        return -GPT_E_PROTO;
    memcpy(a->ns, m->nonce, sizeof(a->ns));
    /* Without a secret the AUTH is all zeros: the server refuses it and
     * its log says which secret file a member needs. */
    memset(mac, 0, sizeof(mac));
    if (a->secret_len >= STORE_SECRET_MIN &&
        (rc = store_auth_proof(a->secret, a->secret_len, GPT_STORE_LABEL_CLIENT, a->nc, a->ns,
                               a->node, mac)) < 0)
        return rc;
    if (a->has_node_key &&
        (rc = store_auth_proof(a->node_key, sizeof(a->node_key), GPT_STORE_LABEL_NODE, a->nc, a->ns,
                               a->node, node_mac)) < 0)
        return rc;
    proto_store_out_init(&o);
    if ((rc = proto_store_put_auth(&o, mac, a->has_node_key ? node_mac : NULL)) < 0 ||
        (rc = async_write(a, &o)) < 0) {
        proto_store_out_done(&o);
        return rc;
    }
    a->state = ASYNC_AUTH;
    return 0;
}

/* The server's PROOF (or its refusal): check it, keep a node key it
 * issued, seal the session and send what was queued meanwhile. */
static int async_on_proof(struct store_client_async *a, const struct proto_store_msg *m)
{
    uint8_t mac[GPT_STORE_MAC_BYTES], node_key[GPT_STORE_MAC_BYTES];
    int rc;

    if (m->type == PROTO_STORE_ERROR) {
        /* The server refused this node's key: its message names the node. */
        snprintf(a->refusal, sizeof(a->refusal), "%.*s", (int)m->val_len, (const char *)m->val);
        return proto_store_status_to_errno(m->status);
    }
    if (m->type != PROTO_STORE_PROOF)
        return -GPT_E_PROTO;
    if (store_auth_proof(a->secret, a->secret_len, GPT_STORE_LABEL_SERVER, a->nc, a->ns, a->node,
                         mac) < 0 ||
        CRYPTO_memcmp(mac, m->nonce, sizeof(mac)) != 0) {
        log_warn("store: %s does not prove it holds the cluster secret; not using it", a->peer);
        return -GPT_E_AUTH;
    }
    if ((rc = store_auth_session_init(&a->session, false, a->secret, a->secret_len, a->nc, a->ns)) <
        0)
        return rc;
    if (m->val && a->node[0] && a->node_key_issued) {
        if ((rc = store_auth_wrap(a->secret, a->secret_len, a->nc, a->ns, a->node, m->val,
                                  node_key)) < 0)
            return rc;
        memcpy(a->node_key, node_key, sizeof(a->node_key));
        a->has_node_key = true;
        a->node_key_issued(a->node_key_arg, a->node, node_key);
        OPENSSL_cleanse(node_key, sizeof(node_key));
    }
    proto_store_parser_seal(&a->parser, GPT_STORE_TAG_BYTES, store_auth_verify, &a->session);
    if ((rc = store_auth_seal(&a->session, &a->queued, 0)) < 0)
        return rc;
    a->state = ASYNC_READY;
    a->parser.frame_max = GPT_STORE_FRAME_MAX;
    if ((rc = async_write(a, &a->queued)) < 0)
        return rc;
    if (a->connect_cb)
        a->connect_cb(a->connect_arg, 0);
    return 0;
}

/* A NOTIFY: the watch of its key fired (none: replaced, gone). */
static int async_on_notify(struct store_client_async *a, const struct proto_store_msg *m)
{
    struct async_watch *w = a->watches;
    while (w && (w->len != m->key_len || memcmp(w->key, m->key, m->key_len) != 0))
        w = w->next;
    if (!w)
        return 0;
    async_watch_unlink(a, w);
    struct store_reply r;
    memset(&r, 0, sizeof(r));
    r.status = m->status ? proto_store_status_to_errno(m->status) : 0;
    r.version = m->key_version;
    r.data = m->val;
    r.len = m->val_len;
    w->cb(w->arg, &r);
    free(w);
    return 0;
}

/* The reply to the oldest pending request. */
static int async_on_reply(struct store_client_async *a, const struct proto_store_msg *m)
{
    struct async_pending *p = a->head;
    if (!p)
        return -GPT_E_PROTO; /* a reply nobody asked for */
    struct store_reply r;
    memset(&r, 0, sizeof(r));
    if (m->type == PROTO_STORE_ERROR)
        r.status = proto_store_status_to_errno(m->status);
    else if ((int)m->type != p->expect)
        return -GPT_E_PROTO;
    r.num = m->num;
    if (m->type == PROTO_STORE_VALUE || m->type == PROTO_STORE_ERROR) {
        r.data = m->val; /* an ERROR's: its message */
        r.len = m->val_len;
    }
    a->head = p->next;
    if (!a->head)
        a->tail = NULL;
    p->cb(p->arg, &r);
    free(p);
    return 0;
}

/* Handles one frame; returns 0 or a negative error that fails the client. */
static int async_frame(struct store_client_async *a, const struct proto_store_msg *m)
{
    switch (a->state) {
    case ASYNC_HELLO:
        return async_on_challenge(a, m);
    case ASYNC_AUTH:
        return async_on_proof(a, m);
    case ASYNC_READY:
        return m->type == PROTO_STORE_NOTIFY ? async_on_notify(a, m) : async_on_reply(a, m);
    default:
        return 0;
    }
}

static void async_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct store_client_async *a = stream->data;
    struct proto_store_msg m;
    int rc;

    if (nread == 0)
        return;
    if (nread < 0) {
        /* Dropped before the handshake finished means we were refused. */
        async_fail(a, a->state == ASYNC_READY ? -ECONNRESET : -GPT_E_AUTH);
        return;
    }
    if ((rc = proto_store_parser_feed(&a->parser, buf->base, (size_t)nread, NULL)) < 0) {
        async_fail(a, rc);
        return;
    }
    while ((a->state == ASYNC_HELLO || a->state == ASYNC_AUTH || a->state == ASYNC_READY) &&
           (rc = proto_store_parser_next(&a->parser, &m, NULL)) != 0) {
        if (rc == -GPT_E_AUTH && a->state == ASYNC_READY) {
            /* A reply that fails its tag was forged, replayed or reordered
             * on the way: the connection is lost (and redone by the
             * caller), not the secret. Logged at most every 10 s. */
            uint64_t now = uv_now(a->loop);
            if (!a->tag_logged_ms || now - a->tag_logged_ms >= 10000) {
                a->tag_logged_ms = now;
                log_warn("store: dropped a frame from %s with a bad tag (forged, replayed or "
                         "reordered); connection closed",
                         a->peer);
            }
            rc = -GPT_E_PROTO;
        }
        if (rc < 0 || (rc = async_frame(a, &m)) < 0) {
            async_fail(a, rc);
            return;
        }
    }
}

static void async_connected(uv_connect_t *req, int status)
{
    struct store_client_async *a = req->data;
    struct proto_store_out o;
    int rc;

    if (a->state != ASYNC_CONNECTING)
        return; /* closed meanwhile: status is UV_ECANCELED */
    if (status < 0) {
        async_fail(a, status);
        return;
    }
    a->state = ASYNC_HELLO;
    proto_store_out_init(&o);
    if ((rc = store_auth_random(a->nc, sizeof(a->nc))) < 0 ||
        (rc = proto_store_put_hello(&o, GPT_STORE_PROTO_VERSION, a->nc, a->node)) < 0 ||
        (rc = async_write(a, &o)) < 0 ||
        (rc = uv_read_start((uv_stream_t *)&a->tcp, async_alloc, async_read)) < 0) {
        proto_store_out_done(&o);
        async_fail(a, rc);
    }
}

const char *store_client_async_refusal(const struct store_client_async *a)
{
    return a->refusal;
}

int store_client_async_new(uv_loop_t *loop, const struct store_client_async_opts *opts,
                           void (*connect_cb)(void *arg, int status), void *arg,
                           struct store_client_async **ret, struct gpt_err *err)
{
    struct sockaddr_storage ss;
    struct store_client_async *a;
    int rc;

    if (uv_ip4_addr(opts->host, opts->port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(opts->host, opts->port, (struct sockaddr_in6 *)&ss) != 0)
        return gpt_err_set(err, -EINVAL, NULL, "store client: '%s' is not a numeric address",
                           opts->host);
    /* Not calloc: the read buffer at the end is 64 KiB that need no zeroing
     * (thousands of clients in one process, e.g. bench_rdzv). */
    a = malloc(sizeof(*a));
    if (a)
        memset(a, 0, offsetof(struct store_client_async, rbuf));
    if (!a)
        return gpt_err_set(err, -ENOMEM, NULL, "store client: out of memory");
    if (opts->node && strlen(opts->node) > GPT_STORE_NODE_MAX) {
        free(a);
        return gpt_err_set(err, -EINVAL, NULL, "store client: node id \"%s\" too long", opts->node);
    }
    snprintf(a->node, sizeof(a->node), "%s", opts->node ? opts->node : "");
    if (opts->node_key) {
        memcpy(a->node_key, opts->node_key, sizeof(a->node_key));
        a->has_node_key = true;
    }
    a->node_key_issued = opts->node_key_issued;
    a->node_key_arg = opts->node_key_arg;
    if (opts->secret && opts->secret_len > 0) {
        a->secret = malloc(opts->secret_len);
        if (!a->secret) {
            free(a);
            return gpt_err_set(err, -ENOMEM, NULL, "store client: out of memory");
        }
        memcpy(a->secret, opts->secret, opts->secret_len);
        a->secret_len = opts->secret_len;
    }
    a->loop = loop;
    a->connect_cb = connect_cb;
    a->connect_arg = arg;
    snprintf(a->peer, sizeof(a->peer), "%s:%d", opts->host, opts->port);
    proto_store_out_init(&a->queued);
    a->queued.tag_bytes = GPT_STORE_TAG_BYTES;
    proto_store_parser_init(&a->parser, GPT_STORE_HANDSHAKE_FRAME_MAX);
    GPT_ASSERT(uv_tcp_init(loop, &a->tcp) == 0);
    a->tcp.data = a;
    a->connect_req.data = a;
    uv_tcp_nodelay(&a->tcp, 1);
    rc = uv_tcp_connect(&a->connect_req, &a->tcp, (const struct sockaddr *)&ss, async_connected);
    if (rc < 0) {
        /* The handle is initialised, so it must go through uv_close. */
        a->connect_cb = NULL;
        store_client_async_close(a, NULL, NULL);
        return gpt_err_set(err, rc, NULL, "store client: connect: %s", uv_strerror(rc));
    }
    *ret = a;
    return 0;
}

static void async_closed(uv_handle_t *h)
{
    struct store_client_async *a = h->data;
    void (*cb)(void *) = a->close_cb;
    void *arg = a->close_arg;

    proto_store_out_done(&a->queued);
    proto_store_parser_done(&a->parser);
    store_auth_session_done(&a->session);
    OPENSSL_cleanse(a->node_key, sizeof(a->node_key));
    free(a->secret);
    free(a);
    if (cb)
        cb(arg);
}

void store_client_async_close(struct store_client_async *a, void (*close_cb)(void *arg), void *arg)
{
    GPT_ASSERT(a->state != ASYNC_CLOSING);
    a->state = ASYNC_CLOSING;
    a->close_cb = close_cb;
    a->close_arg = arg;
    async_fail_pending(a, -ECANCELED);
    async_fail_watches(a, -ECANCELED);
    uv_close((uv_handle_t *)&a->tcp, async_closed);
}

/* Queues the request just encoded into a->queued after `mark` (enc_rc: the
 * encoder's result) with its callback, and writes it when the handshake is done. */
static int async_submit(struct store_client_async *a, size_t mark, int enc_rc, int expect,
                        void (*cb)(void *arg, const struct store_reply *r), void *arg)
{
    struct async_pending *p;
    int rc;

    if (enc_rc < 0)
        return enc_rc;
    p = calloc(1, sizeof(*p));
    if (!p) {
        a->queued.len = mark; /* drop the frame that has no callback */
        return -ENOMEM;
    }
    p->expect = expect;
    p->cb = cb;
    p->arg = arg;
    if (a->tail)
        a->tail->next = p;
    else
        a->head = p;
    a->tail = p;
    if (a->state == ASYNC_READY && ((rc = store_auth_seal(&a->session, &a->queued, mark)) < 0 ||
                                    (rc = async_write(a, &a->queued)) < 0)) {
        async_fail(a, rc);
        return 0; /* the callback reports the failure */
    }
    return 0;
}

/* Requests on a failed or closing client are refused before encoding. */
static int async_usable(const struct store_client_async *a)
{
    if (a->state == ASYNC_FAILED)
        return -EPIPE;
    if (a->state == ASYNC_CLOSING)
        return -ECANCELED;
    return 0;
}

int store_client_async_set(struct store_client_async *a, const char *key, const void *val,
                           size_t len, void (*cb)(void *arg, const struct store_reply *r),
                           void *arg)
{
    size_t mark = a->queued.len;
    int rc = async_usable(a);

    if (rc == 0)
        rc = proto_store_put_key_value(&a->queued, PROTO_STORE_SET, key, strlen(key), val, len);
    return rc < 0 ? rc : async_submit(a, mark, rc, PROTO_STORE_OK, cb, arg);
}

int store_client_async_append(struct store_client_async *a, const char *key, const void *val,
                              size_t len, void (*cb)(void *arg, const struct store_reply *r),
                              void *arg)
{
    size_t mark = a->queued.len;
    int rc = async_usable(a);

    if (rc == 0)
        rc = proto_store_put_key_value(&a->queued, PROTO_STORE_APPEND, key, strlen(key), val, len);
    return rc < 0 ? rc : async_submit(a, mark, rc, PROTO_STORE_OK, cb, arg);
}

int store_client_async_get(struct store_client_async *a, const char *key,
                           void (*cb)(void *arg, const struct store_reply *r), void *arg)
{
    size_t mark = a->queued.len;
    int rc = async_usable(a);

    if (rc == 0)
        rc = proto_store_put_key(&a->queued, PROTO_STORE_GET, key, strlen(key));
    return rc < 0 ? rc : async_submit(a, mark, rc, PROTO_STORE_VALUE, cb, arg);
}

int store_client_async_add(struct store_client_async *a, const char *key, int64_t delta,
                           void (*cb)(void *arg, const struct store_reply *r), void *arg)
{
    size_t mark = a->queued.len;
    int rc = async_usable(a);

    if (rc == 0)
        rc = proto_store_put_add(&a->queued, key, strlen(key), delta);
    return rc < 0 ? rc : async_submit(a, mark, rc, PROTO_STORE_INT, cb, arg);
}

int store_client_async_compare_set(struct store_client_async *a, const char *key,
                                   const void *expected, size_t expected_len, const void *desired,
                                   size_t desired_len,
                                   void (*cb)(void *arg, const struct store_reply *r), void *arg)
{
    size_t mark = a->queued.len;
    int rc = async_usable(a);

    if (rc == 0)
        rc = proto_store_put_compare_set(&a->queued, key, strlen(key), expected, expected_len,
                                         desired, desired_len);
    return rc < 0 ? rc : async_submit(a, mark, rc, PROTO_STORE_VALUE, cb, arg);
}

int store_client_async_wait(struct store_client_async *a, const char *const *keys, size_t nkeys,
                            uint32_t timeout_ms, void (*cb)(void *arg, const struct store_reply *r),
                            void *arg)
{
    size_t mark = a->queued.len;
    int rc = async_usable(a);

    if (rc == 0)
        rc = proto_store_put_keys(&a->queued, PROTO_STORE_WAIT, timeout_ms, keys, nkeys);
    return rc < 0 ? rc : async_submit(a, mark, rc, PROTO_STORE_OK, cb, arg);
}

int store_client_async_check(struct store_client_async *a, const char *const *keys, size_t nkeys,
                             void (*cb)(void *arg, const struct store_reply *r), void *arg)
{
    size_t mark = a->queued.len;
    int rc = async_usable(a);

    if (rc == 0)
        rc = proto_store_put_keys(&a->queued, PROTO_STORE_CHECK, 0, keys, nkeys);
    return rc < 0 ? rc : async_submit(a, mark, rc, PROTO_STORE_INT, cb, arg);
}

int store_client_async_delete(struct store_client_async *a, const char *key,
                              void (*cb)(void *arg, const struct store_reply *r), void *arg)
{
    size_t mark = a->queued.len;
    int rc = async_usable(a);

    if (rc == 0)
        rc = proto_store_put_key(&a->queued, PROTO_STORE_DELETE, key, strlen(key));
    return rc < 0 ? rc : async_submit(a, mark, rc, PROTO_STORE_INT, cb, arg);
}

int store_client_async_num_keys(struct store_client_async *a,
                                void (*cb)(void *arg, const struct store_reply *r), void *arg)
{
    size_t mark = a->queued.len;
    int rc = async_usable(a);

    if (rc == 0)
        rc = proto_store_put_num_keys(&a->queued);
    return rc < 0 ? rc : async_submit(a, mark, rc, PROTO_STORE_INT, cb, arg);
}

int store_client_async_heartbeat(struct store_client_async *a, const char *key, const void *val,
                                 size_t len, void (*cb)(void *arg, const struct store_reply *r),
                                 void *arg)
{
    size_t mark = a->queued.len;
    int rc = async_usable(a);

    if (rc == 0)
        rc = proto_store_put_key_value(&a->queued, PROTO_STORE_HEARTBEAT, key, strlen(key), val,
                                       len);
    return rc < 0 ? rc : async_submit(a, mark, rc, PROTO_STORE_OK, cb, arg);
}

/* The WATCH's own reply: OK means registered (the NOTIFY follows); an
 * error (a limit, a lost connection) ends the watch with it. */
static void async_watch_acked(void *arg, const struct store_reply *r)
{
    struct async_watch *w = arg;
    struct store_client_async *a = w->a;
    struct async_watch *x = a->watches;

    if (r->status == 0)
        return;
    while (x && x != w)
        x = x->next;
    if (!x)
        return; /* already ended (and freed) by its NOTIFY or a failure */
    async_watch_unlink(a, w);
    w->cb(w->arg, r);
    free(w);
}

int store_client_async_watch(struct store_client_async *a, const char *key, uint64_t seen,
                             uint32_t timeout_ms,
                             void (*cb)(void *arg, const struct store_reply *r), void *arg)
{
    size_t mark = a->queued.len, len = strnlen(key, GPT_STORE_KEY_MAX + 1);
    struct async_watch *w;
    int rc = async_usable(a);

    if (rc < 0)
        return rc;
    for (w = a->watches; w; w = w->next)
        if (w->len == len && memcmp(w->key, key, len) == 0)
            return -EBUSY;
    if ((rc = proto_store_put_watch(&a->queued, key, len, seen, timeout_ms)) < 0)
        return rc;
    if (!(w = calloc(1, sizeof(*w) + len + 1))) {
        a->queued.len = mark;
        return -ENOMEM;
    }
    memcpy(w->key, key, len);
    w->len = len;
    w->a = a;
    w->cb = cb;
    w->arg = arg;
    w->next = a->watches;
    a->watches = w;
    if ((rc = async_submit(a, mark, 0, PROTO_STORE_OK, async_watch_acked, w)) < 0) {
        async_watch_unlink(a, w);
        free(w);
    }
    return rc;
}
