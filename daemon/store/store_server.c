/*
 * store_server: see store_server.h. Owns the key table, the connections,
 * their parsers and reply buffers; the pending WAITs with their timers and
 * the resume queue are in store_server_waits.c (objects shared through
 * store_server_impl.h). Everything runs on the loop thread; only the counters in `st` are shared,
 * under `st_lock`.
 *
 * Flow of one connection: accept -> HELLO(Nc) -> CHALLENGE(Ns) -> AUTH
 * (client proof) -> PROOF (server proof) -> sealed requests and replies
 * (store_auth.h). Replies are staged in the client's `out` buffer, sealed
 * and written once per batch of frames. A client whose
 * WAIT is pending, or whose unsent replies pass out_high_bytes, is paused:
 * its frames are buffered but not run (and past the parser's cap it is
 * dropped). Waits that complete because of
 * another client's command put their client on the resume queue, drained
 * iteratively at the end of each callback, so one client never runs inside
 * another's command.
 */
#include "store_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "log.h"
#include "store_server_impl.h"

static void store_server_handle_closed(struct store_server *s);
static void store_server_client_close(struct client *c, const char *why);
static void store_server_client_process(struct client *c);

/* listen(2)'s backlog: thousands of nodes connect at once when a cluster
 * starts (the kernel caps it at net.core.somaxconn). */
#define STORE_SERVER_BACKLOG 65535

struct write_req {
    uv_write_t req;
    struct client *client;
    struct proto_store_out buf;
};

/* ---- counters ---- */

void store_server_stats(struct store_server *s, struct store_server_stats *ret)
{
    pthread_mutex_lock(&s->st_lock);
    *ret = s->st;
    pthread_mutex_unlock(&s->st_lock);
}

/* The table's counts, for other threads to read: after every command. */
static void server_sync_counts(struct store_server *s)
{
    pthread_mutex_lock(&s->st_lock);
    s->st.keys = s->table.keys;
    s->st.data_bytes = s->table.data_bytes;
    pthread_mutex_unlock(&s->st_lock);
}

/* ---- server lifetime ---- */

static void server_maybe_finish(struct store_server *s)
{
    void (*cb)(void *) = s->close_cb;
    void *arg = s->close_arg;

    if (!s->closing || s->open_handles > 0)
        return;
    store_table_done(&s->table);
    store_server_watches_done(s);
    store_server_hb_done(s);
    OPENSSL_cleanse(s->secret, s->opts.secret_len);
    free(s->secret);
    pthread_mutex_destroy(&s->st_lock);
    free(s);
    if (cb)
        cb(arg);
}

static void store_server_handle_closed(struct store_server *s)
{
    s->open_handles--;
    server_maybe_finish(s);
}

/* ---- commands ---- */

/* ADD: the value is decimal text; anything else is not a counter. */
static int parse_counter(const uint8_t *v, size_t len, int64_t *ret)
{
    char buf[24];
    char *end;
    long long x;

    if (len == 0 || len >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, v, len);
    buf[len] = 0;
    errno = 0;
    x = strtoll(buf, &end, 10);
    if (errno || *end || !(buf[0] == '-' || (buf[0] >= '0' && buf[0] <= '9')))
        return -EINVAL;
    *ret = x;
    return 0;
}

static int keys_all_exist(struct store_server *s, const struct proto_store_msg *m)
{
    size_t cursor = 0, klen;
    const char *k;

    while (proto_store_keys_next(m, &cursor, &k, &klen))
        if (!store_table_find(&s->table, k, klen, store_table_hash(k, klen)))
            return 0;
    return 1;
}

/* One request on its way through command_run: the key's entry and what
 * the request did to it, for the bookkeeping after it (command_settle). */
struct command {
    struct store_server *s;
    struct client *c;
    const struct proto_store_msg *m;
    uint64_t h;            /* the key's hash */
    struct store_entry *e; /* the key's entry; NULL: none (or deleted) */
    bool created, changed, deleted;
    const char **why; /* the error's detail for ERROR */
};

/* The key's entry, created empty when there is none. 0 or an error. */
static int command_entry(struct command *x)
{
    if (x->e)
        return 0;
    int rc = store_table_create(&x->s->table, x->m->key, x->m->key_len, x->h, &x->e);
    x->created = rc == 0;
    return rc;
}

/* Stores v as the entry's value (appended to it with append). */
static int command_store(struct command *x, const void *v, size_t len, bool append)
{
    int rc = store_table_store(&x->s->table, x->e, v, len, append);
    x->changed = rc == 0;
    return rc;
}

/* SET and APPEND. */
static int command_set(struct command *x)
{
    const struct proto_store_msg *m = x->m;
    if (m->val_len > x->s->opts.max_value_bytes) {
        *x->why = "value over the size limit";
        return -GPT_E_LIMIT;
    }
    int rc = command_entry(x);
    if (rc == 0)
        rc = command_store(x, m->val, m->val_len, m->type == PROTO_STORE_APPEND);
    return rc < 0 ? rc : proto_store_put_ok(&x->c->out);
}

/* ADD: the counter (0 when the key is new) plus m->num, as decimal text. */
static int command_add(struct command *x)
{
    int64_t num = 0;
    char text[24];
    if (x->e && parse_counter(x->e->val, x->e->val_len, &num) < 0) {
        *x->why = "value is not a counter";
        return -EINVAL;
    }
    if (__builtin_add_overflow(num, x->m->num, &num)) {
        *x->why = "counter overflow";
        return -EINVAL;
    }
    int rc = command_entry(x);
    snprintf(text, sizeof(text), "%" PRId64, num);
    if (rc == 0)
        rc = command_store(x, text, strlen(text), false);
    return rc < 0 ? rc : proto_store_put_int(&x->c->out, num);
}

/* COMPARE_SET: val2 when the value is val (or the key is new and val
 * empty); the value after it either way. */
static int command_compare_set(struct command *x)
{
    const struct proto_store_msg *m = x->m;
    if (!x->e && m->val_len > 0)
        return -ENOENT;
    if (m->val2_len > x->s->opts.max_value_bytes) {
        *x->why = "value over the size limit";
        return -GPT_E_LIMIT;
    }
    int rc = 0;
    if (!x->e) {
        if ((rc = command_entry(x)) == 0)
            rc = command_store(x, m->val2, m->val2_len, false);
    } else if (x->e->val_len == m->val_len && memcmp(x->e->val, m->val, m->val_len) == 0) {
        rc = command_store(x, m->val2, m->val2_len, false);
    }
    return rc < 0 ? rc : proto_store_put_value(&x->c->out, x->e->val, x->e->val_len);
}

/* HEARTBEAT: the node's row in the heartbeat table. */
static int command_heartbeat(struct command *x)
{
    struct store_server *s = x->s;
    s->hb_why[0] = '\0';
    int rc = store_server_hb_put(s, x->m->key, x->m->key_len, x->m->val, x->m->val_len, x->c->peer,
                                 s->hb_why, sizeof(s->hb_why));
    if (rc == 0)
        return proto_store_put_ok(&x->c->out);
    if (rc == -GPT_E_LIMIT)
        *x->why = "heartbeat table full (nodes or bytes)";
    else if (rc == -EEXIST)
        *x->why = s->hb_why;
    return rc;
}

/* DELETE: 1 when the key was there, else 0. */
static int command_delete(struct command *x)
{
    if (x->e) {
        store_table_remove(&x->s->table, x->e);
        x->s->rev++;
        x->deleted = true;
        x->e = NULL;
    }
    return proto_store_put_int(&x->c->out, x->deleted ? 1 : 0);
}

/* After a request: a key created for a request that failed is not kept;
 * a new, changed or deleted key wakes its watches and waits. */
static void command_settle(struct command *x, int rc)
{
    struct store_server *s = x->s;
    const struct proto_store_msg *m = x->m;
    if (rc < 0 && x->created) {
        store_table_remove(&s->table, x->e);
        x->e = NULL;
        x->changed = false;
    } else if (x->created) {
        store_server_key_created(s, m->key, m->key_len, x->h);
    }
    if (x->changed) {
        x->e->version = ++s->rev;
        store_server_key_changed(s, m->key, m->key_len, x->h, x->e);
    } else if (x->deleted) {
        store_server_key_changed(s, m->key, m->key_len, x->h, NULL);
    }
}

/* Runs one request and stages its reply (unless it is a WAIT that must
 * wait). Returns 0, or a negative error to report as ERROR. */
static int command_run(struct client *c, const struct proto_store_msg *m, const char **ret_why)
{
    struct store_server *s = c->srv;
    struct command x = {.s = s, .c = c, .m = m, .why = ret_why};
    x.h = m->key ? store_table_hash(m->key, m->key_len) : 0;
    x.e = m->key ? store_table_find(&s->table, m->key, m->key_len, x.h) : NULL;
    int rc = 0;

    *ret_why = NULL;
    switch (m->type) {
    case PROTO_STORE_SET:
    case PROTO_STORE_APPEND:
        rc = command_set(&x);
        break;
    case PROTO_STORE_GET:
        rc = x.e ? proto_store_put_value(&c->out, x.e->val, x.e->val_len) : -ENOENT;
        break;
    case PROTO_STORE_ADD:
        rc = command_add(&x);
        break;
    case PROTO_STORE_COMPARE_SET:
        rc = command_compare_set(&x);
        break;
    case PROTO_STORE_WAIT:
        if (keys_all_exist(s, m))
            rc = proto_store_put_ok(&c->out);
        else if ((rc = store_server_wait_start(c, m)) == -GPT_E_LIMIT)
            *ret_why = "too many pending waits";
        break;
    case PROTO_STORE_CHECK:
        rc = proto_store_put_int(&c->out, keys_all_exist(s, m));
        break;
    case PROTO_STORE_DELETE:
        rc = command_delete(&x);
        break;
    case PROTO_STORE_WATCH:
        rc = store_server_watch_start(c, m, ret_why);
        break;
    case PROTO_STORE_HEARTBEAT:
        rc = command_heartbeat(&x);
        break;
    case PROTO_STORE_NUM_KEYS:
        rc = proto_store_put_int(&c->out, (int64_t)s->table.keys);
        break;
    default:
        GPT_ASSERT(0);
    }
    command_settle(&x, rc);
    if (rc == -GPT_E_LIMIT && !*ret_why)
        *ret_why = "store limit reached (keys or bytes)";
    return rc;
}

/* ---- in-process writes (the server's owner) ---- */

int store_server_set(struct store_server *s, const char *key, const void *val, size_t len)
{
    size_t klen = strnlen(key, GPT_STORE_KEY_MAX + 1);
    uint64_t h = store_table_hash(key, klen);
    struct store_entry *e;
    bool created = false;
    int rc;

    if (klen == 0 || klen > GPT_STORE_KEY_MAX)
        return -EINVAL;
    if (len > s->opts.max_value_bytes)
        return -GPT_E_LIMIT;
    e = store_table_find(&s->table, key, klen, h);
    if (!e) {
        if ((rc = store_table_create(&s->table, key, klen, h, &e)) < 0)
            return rc;
        created = true;
    }
    if ((rc = store_table_store(&s->table, e, val, len, false)) < 0) {
        if (created)
            store_table_remove(&s->table, e);
        return rc;
    }
    if (created)
        store_server_key_created(s, key, klen, h);
    e->version = ++s->rev;
    store_server_key_changed(s, key, klen, h, e);
    server_sync_counts(s);
    store_server_drain(s);
    return 0;
}

int store_server_take(struct store_server *s, const char *key, void **ret_val, size_t *ret_len)
{
    size_t klen = strnlen(key, GPT_STORE_KEY_MAX + 1);
    uint64_t h = store_table_hash(key, klen);
    struct store_entry *e;

    if (klen == 0 || klen > GPT_STORE_KEY_MAX)
        return -EINVAL;
    e = store_table_find(&s->table, key, klen, h);
    if (!e || e->val_len == 0) {
        *ret_val = NULL;
        *ret_len = 0;
        return 0;
    }
    void *val = malloc(e->val_len);
    if (!val)
        return -ENOMEM;
    memcpy(val, e->val, e->val_len);
    size_t len = e->val_len;
    int rc = store_table_store(&s->table, e, "", 0, false);
    if (rc < 0) {
        free(val);
        return rc;
    }
    e->version = ++s->rev;
    store_server_key_changed(s, key, klen, h, e);
    server_sync_counts(s);
    store_server_drain(s);
    *ret_val = val;
    *ret_len = len;
    return 0;
}

int store_server_delete(struct store_server *s, const char *key)
{
    size_t klen = strnlen(key, GPT_STORE_KEY_MAX + 1);
    uint64_t h = store_table_hash(key, klen);
    struct store_entry *e;

    if (klen == 0 || klen > GPT_STORE_KEY_MAX)
        return -EINVAL;
    if (!(e = store_table_find(&s->table, key, klen, h)))
        return 0;
    store_table_remove(&s->table, e);
    s->rev++;
    store_server_key_changed(s, key, klen, h, NULL);
    server_sync_counts(s);
    store_server_drain(s);
    return 1;
}

/* ---- handshake ---- */

/* The node-key half of AUTH, for a client that proved the secret: 0 when
 * the connection may speak for c->node, with *ret_issue set when a fresh key
 * was issued and kept (wrapped in ret_wrapped for PROOF); 1 when its node
 * proof is missing or wrong (the ERROR naming the node is staged and the
 * connection is refused); negative when the owner failed. */
static int handshake_node_key(struct client *c, const struct proto_store_msg *m,
                              uint8_t ret_wrapped[GPT_STORE_MAC_BYTES], bool *ret_issue)
{
    struct store_server *s = c->srv;
    uint8_t key[GPT_STORE_MAC_BYTES], mac[GPT_STORE_MAC_BYTES];
    char msg[2 * GPT_STORE_ERRMSG_MAX]; /* cut to GPT_STORE_ERRMSG_MAX on the wire */
    char holder[GPT_STORE_ERRMSG_MAX];
    int rc;

    *ret_issue = false;
    if (!c->node[0] || !s->opts.node_key)
        return 0;
    if ((rc = s->opts.node_key(s->opts.node_key_arg, c->node, key)) < 0)
        goto out;
    if (rc == 0) {
        if ((rc = store_auth_random(key, sizeof(key))) < 0 ||
            (rc = s->opts.node_key_issued(s->opts.node_key_arg, c->node, key)) < 0 ||
            (rc = store_auth_wrap(s->secret, s->opts.secret_len, c->nc, c->ns, c->node, key,
                                  ret_wrapped)) < 0)
            goto out;
        *ret_issue = true;
        goto out;
    }
    rc = 0;
    if (m->val &&
        store_auth_proof(key, sizeof(key), GPT_STORE_LABEL_NODE, c->nc, c->ns, c->node, mac) == 0 &&
        CRYPTO_memcmp(mac, m->val, sizeof(mac)) == 0)
        goto out;
    if (s->opts.node_refused)
        s->opts.node_refused(s->opts.node_key_arg, c->node, c->peer, holder, sizeof(holder));
    else
        snprintf(holder, sizeof(holder),
                 "another node holds that id (`gptctl nodes --forget %s` on the coordinator "
                 "releases it)",
                 c->node);
    snprintf(msg, sizeof(msg), "node \"%s\" %s: %s", c->node,
             m->val ? "proved a wrong node key" : "did not prove its node key", holder);
    log_notice("store: refused %s speaking for node \"%s\": %s", c->peer, c->node, msg);
    rc = proto_store_put_error(&c->out, PROTO_STORE_STATUS_DENIED, msg) < 0 ? -ENOMEM : 1;
out:
    OPENSSL_cleanse(key, sizeof(key));
    return rc;
}

/* HELLO(Nc) -> CHALLENGE(Ns); AUTH(client proof [, node proof]) ->
 * PROOF(server proof [, wrapped new node key]), then both directions are
 * sealed with the session's keys. The server only proves itself to a
 * client that proved itself first, so a stranger learns nothing keyed by
 * the secret. Returns 0, 1 when the node proof was refused (an ERROR is
 * staged), or a negative error. */
static int handshake_step(struct client *c, const struct proto_store_msg *m)
{
    struct store_server *s = c->srv;
    uint8_t mac[GPT_STORE_MAC_BYTES], wrapped[GPT_STORE_MAC_BYTES];
    bool issue;
    int rc;

    if (c->state == CLIENT_HELLO) {
        if (m->type != PROTO_STORE_HELLO || m->version != GPT_STORE_PROTO_VERSION)
            return -GPT_E_AUTH;
        memcpy(c->nc, m->nonce, sizeof(c->nc));
        if (m->key) /* the decoder bounds it by GPT_STORE_NODE_MAX */
            snprintf(c->node, sizeof(c->node), "%.*s", (int)m->key_len, m->key);
        if (store_auth_random(c->ns, sizeof(c->ns)) < 0)
            return -GPT_E_AUTH;
        if (proto_store_put_challenge(&c->out, c->ns) < 0)
            return -ENOMEM;
        c->state = CLIENT_AUTH;
        return 0;
    }
    if (m->type != PROTO_STORE_AUTH)
        return -GPT_E_AUTH;
    if (store_auth_proof(s->secret, s->opts.secret_len, GPT_STORE_LABEL_CLIENT, c->nc, c->ns,
                         c->node, mac) < 0 ||
        CRYPTO_memcmp(mac, m->nonce, sizeof(mac)) != 0)
        return -GPT_E_AUTH;
    if ((rc = handshake_node_key(c, m, wrapped, &issue)) != 0) {
        if (rc == 1)
            c->state = CLIENT_REFUSED;
        return rc;
    }
    if ((rc = store_auth_proof(s->secret, s->opts.secret_len, GPT_STORE_LABEL_SERVER, c->nc, c->ns,
                               c->node, mac)) < 0 ||
        (rc = store_auth_session_init(&c->session, true, s->secret, s->opts.secret_len, c->nc,
                                      c->ns)) < 0)
        return rc;
    if (proto_store_put_proof(&c->out, mac, issue ? wrapped : NULL) < 0)
        return -ENOMEM;
    if (issue)
        log_info("store: issued a node key to node \"%s\" (%s)", c->node, c->peer);
    /* Everything after PROOF is sealed, both ways: bytes the client already
     * pipelined behind its AUTH are read as sealed frames too. */
    c->seal_from = c->out.len;
    c->out.tag_bytes = GPT_STORE_TAG_BYTES;
    proto_store_parser_seal(&c->parser, GPT_STORE_TAG_BYTES, store_auth_verify, &c->session);
    c->state = CLIENT_READY;
    c->parser.frame_max = GPT_STORE_FRAME_MAX;
    uv_timer_stop(&c->hs_timer);
    return 0;
}

/* ---- connections ---- */

static void client_handle_closed(uv_handle_t *h)
{
    struct client *c = h->data;
    struct store_server *s = c->srv;

    if (--c->open_handles == 0) {
        proto_store_parser_done(&c->parser);
        proto_store_out_done(&c->out);
        store_auth_session_done(&c->session);
        free(c);
    }
    store_server_handle_closed(s);
}

static void store_server_client_close(struct client *c, const char *why)
{
    struct store_server *s = c->srv;

    if (c->closing)
        return;
    c->closing = true;
    if (why)
        log_debug("store: closing %s: %s", c->peer, why);
    if (c->state != CLIENT_READY && why)
        ST_ADD(s, auth_failures, 1);
    if (c->wait)
        store_server_wait_finish(c->wait);
    store_server_client_watches_end(c);
    if (link_linked(&c->resume_link))
        link_remove(&c->resume_link);
    link_remove(&c->link);
    ST_ADD(s, clients, -1);
    uv_close((uv_handle_t *)&c->tcp, client_handle_closed);
    uv_close((uv_handle_t *)&c->hs_timer, client_handle_closed);
}

static void write_done(uv_write_t *req, int status)
{
    struct write_req *w = container_of(req, struct write_req, req);
    struct client *c = w->client;

    proto_store_out_done(&w->buf);
    free(w);
    if (c->closing)
        return;
    if (c->state == CLIENT_REFUSED) {
        store_server_client_close(c, "node key refused");
        return;
    }
    if (status < 0) {
        store_server_client_close(c, uv_strerror(status));
        return;
    }
    store_server_resume(c);
    store_server_drain(c->srv);
}

/* Hands the staged replies to libuv. */
static int client_flush(struct client *c)
{
    struct write_req *w;
    uv_buf_t b;
    int rc;

    if (c->out.len == 0 || c->closing)
        return 0;
    if (c->state == CLIENT_READY && store_auth_seal(&c->session, &c->out, c->seal_from) < 0)
        return UV_EPROTO;
    w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->client = c;
    w->buf = c->out;
    proto_store_out_init(&c->out);
    c->out.tag_bytes = w->buf.tag_bytes;
    c->seal_from = 0;
    b = uv_buf_init((char *)w->buf.data, (unsigned)w->buf.len);
    rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, write_done);
    if (rc < 0) {
        proto_store_out_done(&w->buf);
        free(w);
    }
    return rc;
}

static bool client_paused(const struct client *c)
{
    return c->wait || uv_stream_get_write_queue_size((const uv_stream_t *)&c->tcp) + c->out.len >
                          c->srv->opts.out_high_bytes;
}

static void client_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct client *c = h->data;

    (void)suggested;
    *buf = uv_buf_init((char *)c->srv->rbuf, sizeof(c->srv->rbuf));
}

static void client_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct client *c = stream->data;
    struct gpt_err err;

    if (nread < 0) {
        store_server_client_close(c, nread == UV_EOF ? NULL : uv_strerror((int)nread));
        store_server_drain(c->srv);
        return;
    }
    if (nread == 0)
        return;
    if (proto_store_parser_feed(&c->parser, buf->base, (size_t)nread, &err) < 0) {
        store_server_client_close(c, err.msg);
        return;
    }
    store_server_client_process(c);
    store_server_drain(c->srv);
}

/* A frame of an authenticated connection failed its tag: forged, injected
 * by a relay, replayed or reordered. Nothing of it ran. Logged naming the
 * peer, at most once every 10 s (with the count of those not logged). */
static void server_log_bad_tag(struct store_server *s, struct client *c)
{
    uint64_t now_ms = uv_now(s->loop);

    ST_ADD(s, tag_failures, 1);
    if (s->tag_logged_ms && now_ms - s->tag_logged_ms < 10000) {
        s->tag_unlogged++;
        return;
    }
    log_warn("store: dropped a frame from %s with a bad tag (forged, injected, replayed or "
             "reordered); connection closed (%" PRIu64 " more such drops not logged before)",
             c->peer, s->tag_unlogged);
    s->tag_logged_ms = now_ms;
    s->tag_unlogged = 0;
}

static bool type_writes(int type)
{
    switch (type) {
    case PROTO_STORE_SET:
    case PROTO_STORE_APPEND:
    case PROTO_STORE_ADD:
    case PROTO_STORE_COMPARE_SET:
    case PROTO_STORE_DELETE:
    case PROTO_STORE_HEARTBEAT:
        return true;
    default:
        return false;
    }
}

/* Asks the owner whether the connection's node may make write m. A refusal
 * is counted, logged once per connection (a lying member repeats itself)
 * and answered with ERROR(DENIED) naming the key and the node. */
static int write_admit(struct client *c, const struct proto_store_msg *m, const char **ret_why)
{
    struct store_server *s = c->srv;
    char why[192] = "";
    int rc;

    if (!s->opts.write_admit || !type_writes(m->type))
        return 0;
    rc = s->opts.write_admit(s->opts.write_arg, c->node, m, why, sizeof(why));
    if (rc >= 0)
        return 0;
    ST_ADD(s, refused_writes, 1);
    snprintf(s->acl_why, sizeof(s->acl_why), "node \"%s\" may not %s \"%.*s\": %s",
             c->node[0] ? c->node : "(none)", proto_store_type_name(m->type),
             (int)(m->key_len > 128 ? 128 : m->key_len), m->key, why[0] ? why : "not its key");
    if (!c->refusal_logged) {
        c->refusal_logged = true;
        log_warn("store: refused a write from %s: %s (further refusals on this connection are "
                 "only counted)",
                 c->peer, s->acl_why);
    }
    *ret_why = s->acl_why;
    return -EACCES;
}

/* Runs the client's buffered frames until it needs more bytes or is paused,
 * and writes the replies. A paused client is still read (so a disconnect is
 * seen at once); its frames pile up in the parser, whose cap of one maximal
 * frame plus one read then disconnects a client that keeps sending. */
static void store_server_client_process(struct client *c)
{
    struct store_server *s = c->srv;
    struct proto_store_msg m;
    struct gpt_err err;
    const char *why;
    int rc;

    while (!c->closing && !client_paused(c)) {
        rc = proto_store_parser_next(&c->parser, &m, &err);
        if (rc == 0)
            break;
        if (rc == -GPT_E_AUTH && c->state == CLIENT_READY) {
            server_log_bad_tag(s, c);
            store_server_client_close(c, err.msg);
            return;
        }
        if (rc < 0) {
            store_server_client_close(c, err.msg);
            return;
        }
        if (c->state != CLIENT_READY) {
            if ((rc = handshake_step(c, &m)) == 1) {
                ST_ADD(s, refused_nodes, 1);
                uv_read_stop((uv_stream_t *)&c->tcp);
                break;
            }
            if (rc < 0) {
                /* A node retrying with a wrong or missing secret would
                 * fill the log: say how to fix it once a minute. */
                uint64_t now_ms = uv_now(s->loop);
                if (rc == -GPT_E_AUTH && m.type == PROTO_STORE_AUTH && s->secret_hint[0] &&
                    (!s->auth_logged_ms || now_ms - s->auth_logged_ms >= 60000)) {
                    s->auth_logged_ms = now_ms;
                    log_notice("store: refused %s: wrong or missing cluster secret (a member "
                               "joins with --secret-file naming a copy of %s)",
                               c->peer, s->secret_hint);
                } else if (rc == -GPT_E_AUTH && m.type == PROTO_STORE_AUTH && s->secret_hint[0]) {
                    log_debug("store: refused %s: wrong or missing cluster secret", c->peer);
                } else {
                    log_notice("store: dropped %s in the handshake (%s, got %s)", c->peer,
                               gpt_strerror(rc), proto_store_type_name(m.type));
                }
                store_server_client_close(c, "handshake failed");
                return;
            }
            continue;
        }
        if (!proto_store_type_is_request(m.type)) {
            store_server_client_close(c, "not a request");
            return;
        }
        ST_ADD(s, requests, 1);
        rc = write_admit(c, &m, &why);
        if (rc == 0)
            rc = command_run(c, &m, &why);
        server_sync_counts(s);
        if (rc == -ENOMEM) {
            store_server_client_close(c, "out of memory");
            return;
        }
        if (rc < 0 && proto_store_put_error(&c->out, proto_store_status_from_errno(rc),
                                            why ? why : gpt_strerror(rc)) < 0) {
            store_server_client_close(c, "out of memory");
            return;
        }
    }
    if (c->closing)
        return;
    if ((rc = client_flush(c)) < 0)
        store_server_client_close(c, uv_strerror(rc));
}

static void handshake_timeout(uv_timer_t *t)
{
    struct client *c = t->data;

    store_server_client_close(c, "handshake timed out");
}

static void peer_name(const struct sockaddr_storage *ss, char *buf, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;

    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        uv_ip4_name(in, host, sizeof(host));
        port = ntohs(in->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
        uv_ip6_name(in6, host, sizeof(host));
        port = ntohs(in6->sin6_port);
    }
    snprintf(buf, cap, "%s:%d", host, port);
}

static void server_accept(uv_stream_t *listener, int status)
{
    struct store_server *s = listener->data;
    struct sockaddr_storage ss;
    int len = sizeof(ss), rc;
    struct client *c;

    if (status < 0) {
        log_warn("store: accept failed: %s", uv_strerror(status));
        return;
    }
    c = calloc(1, sizeof(*c));
    if (!c) {
        log_warn("store: out of memory accepting a connection");
        return;
    }
    c->srv = s;
    link_init(&c->link);
    link_init(&c->resume_link);
    link_init(&c->watches);
    proto_store_parser_init(&c->parser, GPT_STORE_HANDSHAKE_FRAME_MAX);
    proto_store_out_init(&c->out);
    GPT_ASSERT(uv_tcp_init(s->loop, &c->tcp) == 0);
    GPT_ASSERT(uv_timer_init(s->loop, &c->hs_timer) == 0);
    c->tcp.data = c->hs_timer.data = c;
    c->open_handles = 2;
    s->open_handles += 2;
    link_insert_tail(&s->clients, &c->link);
    ST_ADD(s, clients, 1);
    snprintf(c->peer, sizeof(c->peer), "?");
    if ((rc = uv_accept(listener, (uv_stream_t *)&c->tcp)) < 0) {
        store_server_client_close(c, uv_strerror(rc));
        return;
    }
    memset(&ss, 0, sizeof(ss));
    uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len);
    peer_name(&ss, c->peer, sizeof(c->peer));
    if (s->st.clients > s->opts.max_clients) {
        log_warn("store: refused %s: %zu clients connected", c->peer, s->opts.max_clients);
        store_server_client_close(c, NULL);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_timer_start(&c->hs_timer, handshake_timeout, s->opts.handshake_timeout_ms, 0);
    if ((rc = uv_read_start((uv_stream_t *)&c->tcp, client_alloc, client_read)) < 0)
        store_server_client_close(c, uv_strerror(rc));
}

/* ---- public ---- */

int store_server_new(uv_loop_t *loop, const struct store_server_opts *opts,
                     struct store_server **ret, struct gpt_err *err)
{
    struct store_server *s;

    if (!opts || !opts->secret || opts->secret_len < STORE_SECRET_MIN)
        return gpt_err_set(err, -EINVAL, NULL,
                           "store server: a cluster secret of at least %d bytes is required",
                           STORE_SECRET_MIN);
    if (!(s = calloc(1, sizeof(*s))))
        return gpt_err_set(err, -ENOMEM, NULL, "store server: out of memory");
    s->loop = loop;
    s->up.client_close = store_server_client_close;
    s->up.client_process = store_server_client_process;
    s->up.handle_closed = store_server_handle_closed;
    s->opts = *opts;
    snprintf(s->secret_hint, sizeof(s->secret_hint), "%s",
             s->opts.secret_hint ? s->opts.secret_hint : "");
    s->opts.secret_hint = s->secret_hint;
    if (!s->opts.max_keys)
        s->opts.max_keys = 65536;
    if (!s->opts.max_value_bytes || s->opts.max_value_bytes > GPT_STORE_VALUE_MAX)
        s->opts.max_value_bytes = GPT_STORE_VALUE_MAX;
    if (!s->opts.max_data_bytes)
        s->opts.max_data_bytes = (size_t)1 << 30;
    if (!s->opts.max_clients)
        s->opts.max_clients = 1024;
    if (!s->opts.max_waits)
        s->opts.max_waits = 1024;
    if (!s->opts.max_watches)
        s->opts.max_watches = 262144;
    if (!s->opts.max_client_watches)
        s->opts.max_client_watches = 16;
    if (!s->opts.max_heartbeats)
        s->opts.max_heartbeats = 65536;
    if (!s->opts.out_high_bytes)
        s->opts.out_high_bytes = 8u << 20;
    if (!s->opts.handshake_timeout_ms)
        s->opts.handshake_timeout_ms = 10000;
    s->opts.secret = NULL;
    s->secret = malloc(opts->secret_len);
    if (!s->secret) {
        free(s);
        return gpt_err_set(err, -ENOMEM, NULL, "store server: out of memory");
    }
    memcpy(s->secret, opts->secret, opts->secret_len);
    if (store_table_init(&s->table, s->opts.max_keys, s->opts.max_value_bytes,
                         s->opts.max_data_bytes) < 0) {
        free(s->secret);
        free(s);
        return gpt_err_set(err, -ENOMEM, NULL, "store server: out of memory");
    }
    link_init(&s->clients);
    link_init(&s->waits);
    link_init(&s->resume);
    link_init(&s->hb_dirty);
    pthread_mutex_init(&s->st_lock, NULL);
    GPT_ASSERT(uv_tcp_init(loop, &s->listener) == 0);
    s->listener.data = s;
    s->open_handles = 1;
    *ret = s;
    return 0;
}

int store_server_start(struct store_server *s, const char *host, int port, int *ret_port,
                       struct gpt_err *err)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss), rc;

    GPT_ASSERT(!s->listening && !s->closing);
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0)
        return gpt_err_set(err, -EINVAL, NULL, "store: '%s' is not a numeric address", host);
    if ((rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&ss, 0)) < 0 ||
        (rc = uv_listen((uv_stream_t *)&s->listener, STORE_SERVER_BACKLOG, server_accept)) < 0)
        return gpt_err_set(err, rc, NULL, "store: cannot listen on %s:%d: %s", host, port,
                           uv_strerror(rc));
    s->listening = true;
    memset(&ss, 0, sizeof(ss));
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len);
    port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                          : ((struct sockaddr_in *)&ss)->sin_port);
    if (ret_port)
        *ret_port = port;
    log_info("store: listening on %s:%d", host, port);
    return 0;
}

static void listener_closed(uv_handle_t *h)
{
    store_server_handle_closed(h->data);
}

void store_server_close(struct store_server *s, void (*close_cb)(void *arg), void *arg)
{
    GPT_ASSERT(!s->closing);
    s->closing = true;
    s->close_cb = close_cb;
    s->close_arg = arg;
    while (link_linked(&s->clients))
        store_server_client_close(container_of(s->clients.next, struct client, link), NULL);
    uv_close((uv_handle_t *)&s->listener, listener_closed);
}
