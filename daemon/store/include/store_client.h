/*
 * store_client: clients of the rendezvous store (daemon/store_server.h,
 * wire format in proto/store.h), plus the shared secret helpers.
 *
 * Two clients:
 *  - store_client_*: blocking, for worker threads. Plain socket and poll();
 *    every call is bounded by the client's timeout (WAIT by its own timeout
 *    plus that) and returns -ECANCELED within ~100 ms of store_client_abort()
 *    from any thread. A call that failed mid-request (timeout, abort, I/O
 *    error) leaves the connection unusable: later calls return -EPIPE.
 *    Calls are serialised by a mutex, so threads may share one client.
 *  - store_client_async_*: on a libuv loop, for the daemon. Every request
 *    takes a callback; requests are pipelined and answered in order. All
 *    calls on the loop thread.
 * Keys are NUL-terminated strings of 1..GPT_STORE_KEY_MAX bytes.
 */
#ifndef GPTD_STORE_CLIENT_H
#define GPTD_STORE_CLIENT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "gpt_err.h"
#include "store.h"
#include "store_auth.h"

#define STORE_SECRET_MAX 4096

/* ---- secret ---- */

/* Reads the cluster secret from `path` into buf (cap bytes): a regular file
 * of STORE_SECRET_MIN..cap bytes once one trailing newline is dropped (a
 * shorter one is refused with -EINVAL and an error naming the file and the
 * minimum). Refuses a file that its group or others may read or write
 * (-EPERM), as ssh does for keys. Any thread, blocks on file I/O. Returns 0
 * with *ret_len set, or a negative errno. */
int store_secret_load(const char *path, void *buf, size_t cap, size_t *ret_len,
                      struct gpt_err *err);

/* ---- blocking client ---- */

struct store_client_opts {
    const char *host; /* numeric IPv4/IPv6 address or name */
    int port;
    const void *secret; /* borrowed during connect; at least STORE_SECRET_MIN bytes */
    size_t secret_len;
    int timeout_ms;   /* per request and for connect+handshake; 0 = 30000 */
    const char *node; /* the node id this connection speaks for (NULL: none; see
                       * proto/store.h); the server may limit its writes to it */
    /* The node key the server issued for `node` (GPT_STORE_MAC_BYTES,
     * borrowed during connect; NULL: none held): proved in the handshake. */
    const uint8_t *node_key;
    /* Called during the handshake, on the connecting thread, when the
     * server issues a new key for `node` (NULL: the key is not kept). */
    void (*node_key_issued)(void *arg, const char *node, const uint8_t key[GPT_STORE_MAC_BYTES]);
    void *node_key_arg;
};

struct store_client;

/* Connects and authenticates (mutually: a server that cannot prove it holds
 * the secret is refused too). Blocks up to opts->timeout_ms. Returns 0 with
 * a new client in *ret, -EINVAL (no secret, or one shorter than
 * STORE_SECRET_MIN), -ETIMEDOUT, -ECONNREFUSED, -GPT_E_AUTH (dropped in the
 * handshake, or the server's proof is wrong), -EACCES (the node key of
 * opts->node is missing or wrong; the message is the server's), -GPT_E_PROTO or another
 * negative errno. After the handshake every frame is sealed; a reply with a
 * bad tag fails the call with -GPT_E_AUTH and breaks the connection. */
int store_client_connect(const struct store_client_opts *opts, struct store_client **ret,
                         struct gpt_err *err);
/* Closes and frees; NULL allowed. No call may be in progress. */
void store_client_free(struct store_client *c);
/* Any thread: the running and every later call return -ECANCELED. */
void store_client_abort(struct store_client *c);

int store_client_set(struct store_client *c, const char *key, const void *val, size_t len,
                     struct gpt_err *err);
/* On success *ret_val is a new malloc'd buffer (caller frees; NUL-terminated
 * one byte past *ret_len for convenience). -ENOENT if the key is absent. */
int store_client_get(struct store_client *c, const char *key, void **ret_val, size_t *ret_len,
                     struct gpt_err *err);
/* Adds delta to the int64 counter at key (created at 0); *ret_value (may be
 * NULL) gets the new value. -EINVAL if the key holds a non-counter. */
int store_client_add(struct store_client *c, const char *key, int64_t delta, int64_t *ret_value,
                     struct gpt_err *err);
/* Sets key to desired if it holds expected (or is absent and expected is
 * empty). *ret_val (new buffer, may be NULL) gets the value held after. */
int store_client_compare_set(struct store_client *c, const char *key, const void *expected,
                             size_t expected_len, const void *desired, size_t desired_len,
                             void **ret_val, size_t *ret_len, struct gpt_err *err);
/* Blocks until all keys exist: 0, -ETIMEDOUT (timeout_ms, 0 = none, the
 * client's timeout still bounds it then), -ECANCELED. */
int store_client_wait(struct store_client *c, const char *const *keys, size_t nkeys, int timeout_ms,
                      struct gpt_err *err);
/* *ret_all = 1 if all keys exist now, else 0. */
int store_client_check(struct store_client *c, const char *const *keys, size_t nkeys, int *ret_all,
                       struct gpt_err *err);
/* *ret_deleted (may be NULL) = 1 if the key existed. */
int store_client_delete(struct store_client *c, const char *key, int *ret_deleted,
                        struct gpt_err *err);
int store_client_num_keys(struct store_client *c, int64_t *ret_n, struct gpt_err *err);
int store_client_append(struct store_client *c, const char *key, const void *val, size_t len,
                        struct gpt_err *err);

/* ---- asynchronous client ---- */

/* What a request's callback receives. status: 0, or a negative error (the
 * reply's ERROR mapped by proto_store_status_to_errno(), -ECANCELED when the
 * client closed first, -ECONNRESET / -GPT_E_AUTH / ... when the connection
 * failed; -GPT_E_PROTO when a reply failed its tag, logged, as a lost
 * connection). num: ADD's new value, CHECK's 0/1, DELETE's 0/1, NUM_KEYS's count.
 * data/len: GET's or COMPARE_SET's value, or an ERROR's message, borrowed for
 * the callback only. */
struct store_reply {
    int status;
    int64_t num;
    uint64_t version; /* a watch's NOTIFY: the key's version (seen, on a timeout) */
    const void *data;
    size_t len;
};

struct store_client_async_opts {
    const char *host; /* numeric IPv4 or IPv6 address */
    int port;
    const void *secret; /* copied; shorter than STORE_SECRET_MIN (or NULL): the
                         * server refuses the handshake (-GPT_E_AUTH) */
    size_t secret_len;
    const char *node;        /* copied; as store_client_opts.node */
    const uint8_t *node_key; /* copied; as store_client_opts.node_key */
    /* As store_client_opts.node_key_issued; called on the loop thread. */
    void (*node_key_issued)(void *arg, const char *node, const uint8_t key[GPT_STORE_MAC_BYTES]);
    void *node_key_arg;
};

struct store_client_async;

/* Starts connecting and authenticating; connect_cb(arg, status) runs once
 * when that is done or failed. Requests may be issued at once: they are
 * queued and sent after the handshake. Loop thread. Returns 0 with a new
 * client in *ret or a negative errno (then nothing is called back). */
int store_client_async_new(uv_loop_t *loop, const struct store_client_async_opts *opts,
                           void (*connect_cb)(void *arg, int status), void *arg,
                           struct store_client_async **ret, struct gpt_err *err);
/* The server's message when it refused the handshake's node key (the
 * connect_cb status is then -EACCES); "" otherwise. Loop thread; valid
 * until the client is closed. */
const char *store_client_async_refusal(const struct store_client_async *a);
/* Fails every outstanding request with -ECANCELED, closes the connection and
 * frees the client once its handles are closed; then close_cb(arg) (may be
 * NULL). Loop thread. */
void store_client_async_close(struct store_client_async *a, void (*close_cb)(void *arg), void *arg);

/* Requests: each returns 0 when queued (cb will run exactly once, from the
 * loop, never from inside this call) or a negative error (-EINVAL bad key,
 * -GPT_E_LIMIT, -ENOMEM, -EPIPE after the connection failed); cb gets the
 * reply as described at struct store_reply. */
int store_client_async_set(struct store_client_async *a, const char *key, const void *val,
                           size_t len, void (*cb)(void *arg, const struct store_reply *r),
                           void *arg);
int store_client_async_get(struct store_client_async *a, const char *key,
                           void (*cb)(void *arg, const struct store_reply *r), void *arg);
int store_client_async_add(struct store_client_async *a, const char *key, int64_t delta,
                           void (*cb)(void *arg, const struct store_reply *r), void *arg);
int store_client_async_compare_set(struct store_client_async *a, const char *key,
                                   const void *expected, size_t expected_len, const void *desired,
                                   size_t desired_len,
                                   void (*cb)(void *arg, const struct store_reply *r), void *arg);
int store_client_async_wait(struct store_client_async *a, const char *const *keys, size_t nkeys,
                            uint32_t timeout_ms, void (*cb)(void *arg, const struct store_reply *r),
                            void *arg);
int store_client_async_check(struct store_client_async *a, const char *const *keys, size_t nkeys,
                             void (*cb)(void *arg, const struct store_reply *r), void *arg);
int store_client_async_delete(struct store_client_async *a, const char *key,
                              void (*cb)(void *arg, const struct store_reply *r), void *arg);
int store_client_async_num_keys(struct store_client_async *a,
                                void (*cb)(void *arg, const struct store_reply *r), void *arg);
int store_client_async_append(struct store_client_async *a, const char *key, const void *val,
                              size_t len, void (*cb)(void *arg, const struct store_reply *r),
                              void *arg);

/* HEARTBEAT: stores this node's report (at most GPT_STORE_HB_VALUE_MAX
 * bytes) in the server's heartbeat table under key; cb gets OK. */
int store_client_async_heartbeat(struct store_client_async *a, const char *key, const void *val,
                                 size_t len, void (*cb)(void *arg, const struct store_reply *r),
                                 void *arg);
/* WATCH: cb runs once, when key's version passes `seen` (0: any value) with
 * status 0, version and the value; -ENOENT (deleted, or absent while seen
 * > 0: watch again with seen 0); -ETIMEDOUT after timeout_ms (0: none;
 * version = seen); -GPT_E_LIMIT when the server refuses more watches; or
 * the connection's failure / -ECANCELED. Other requests go on meanwhile.
 * cb may watch again. Returns 0, -EBUSY (this client already watches key),
 * or as the other requests. */
int store_client_async_watch(struct store_client_async *a, const char *key, uint64_t seen,
                             uint32_t timeout_ms,
                             void (*cb)(void *arg, const struct store_reply *r), void *arg);

#endif
