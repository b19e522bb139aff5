/*
 * store_server: the rendezvous key-value store served over TCP on a libuv
 * loop (the role of torchrun's c10d TCPStore). The server object is attached
 * to a loop the caller owns and runs; every function here must be called on
 * that loop's thread, except store_server_stats(), which any thread may call.
 *
 * Wire format and semantics: proto/store.h. A server always has a secret
 * (at least STORE_SECRET_MIN bytes). Every connection must complete the
 * mutual HELLO / CHALLENGE / AUTH / PROOF handshake before any command runs;
 * a peer that fails it, speaks a wrong version or sends anything else first
 * is dropped. After it, every frame both ways carries a tag over the
 * direction's session key and sequence number: a frame that fails it
 * (injected by a relay, replayed, reordered) is not run, the connection is
 * closed and the drop logged naming the peer (at most every 10 s). So a
 * request that runs here was sent, in this order, by a process holding the
 * cluster secret: a member daemon (or a rank of `gptd run`).
 *
 * WATCHes park on a key without pausing their connection and are answered
 * by NOTIFY frames (proto/store.h); HEARTBEATs land in a table the server's
 * owner reads in-process with store_server_hb_drain().
 *
 * Replies go out in request order, so while a client's WAIT is pending its
 * later requests are buffered, not run (one pending wait per client by
 * construction); the same holds while a client's unsent replies exceed
 * out_high_bytes. A client that buffers more than one maximal frame
 * (GPT_STORE_FRAME_MAX) plus one read that way is disconnected.
 */
#ifndef GPTD_STORE_SERVER_H
#define GPTD_STORE_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "gpt_err.h"
#include "store_auth.h"

/* Limits; a zero field takes the default shown. */
struct store_server_opts {
    const void *secret; /* copied; required, at least STORE_SECRET_MIN bytes */
    size_t secret_len;
    /* The secret's file as members must name it (copied; NULL or ""
     * unknown): the refusal of a wrong secret says so in the log. */
    const char *secret_hint;
    size_t max_keys;               /* 65536; over it, creating a key gets ERROR(LIMIT) */
    size_t max_value_bytes;        /* GPT_STORE_VALUE_MAX (also caps APPEND's result) */
    size_t max_data_bytes;         /* 1 GiB of keys and values in total */
    size_t max_clients;            /* 1024; further connections are closed at once */
    size_t max_waits;              /* 1024 pending WAITs in total; over it ERROR(LIMIT) */
    size_t max_watches;            /* 262144 parked WATCHes in total; over it ERROR(LIMIT) */
    size_t max_client_watches;     /* 16 parked WATCHes per connection */
    size_t max_heartbeats;         /* 65536 heartbeat entries (nodes); over it ERROR(LIMIT) */
    size_t out_high_bytes;         /* 8 MiB of unsent replies before a client is paused */
    uint32_t handshake_timeout_ms; /* 10000; a slower handshake is dropped */
    /* Asked before a HEARTBEAT whose report differs from the entry's is
     * stored (NULL: every one is): `peer` is the sending connection's
     * address, `holder` that of the connection that wrote the entry last
     * ("" none). A negative return (-EEXIST) refuses it: the sender gets
     * ERROR with the text left in why[0..cap). Loop thread; must not call
     * into the server. */
    int (*hb_admit)(void *arg, const char *key, const void *val, size_t len, const char *peer,
                    const char *holder, char *why, size_t cap);
    void *hb_arg;
    /* Asked before every write a connection sends (SET, APPEND, ADD,
     * COMPARE_SET, DELETE, HEARTBEAT; NULL: every one is allowed): `node`
     * is the node id the connection's handshake proved ("" none), `m` the
     * request. A negative return (-EACCES) refuses it: nothing changes, the
     * sender gets ERROR(DENIED) naming the key, its node and the text left
     * in why[0..cap); the refusal is counted (refused_writes) and the first
     * one of each connection logged. Loop thread; must not call into the
     * server. */
    int (*write_admit)(void *arg, const char *node, const struct proto_store_msg *m, char *why,
                       size_t cap);
    void *write_arg;
    /* Node keys (proto/store.h; NULL: none are kept, and whoever holds the
     * secret may name any node id). node_key: 1 with the key the owner
     * holds for `node` in ret_key, 0 when it holds none; a handshake that
     * names a node with a key must prove it, or gets ERROR(DENIED) naming
     * the node and is closed. node_key_issued: a fresh key the server is
     * about to send to the first connection naming `node`; the owner keeps
     * it (a negative return drops that connection: no key is sent that is
     * not kept). Loop thread; must not call into the server. */
    int (*node_key)(void *arg, const char *node, uint8_t ret_key[GPT_STORE_MAC_BYTES]);
    int (*node_key_issued)(void *arg, const char *node, const uint8_t key[GPT_STORE_MAC_BYTES]);
    /* Optional: who holds `node` now, for the refusal of `peer` (an
     * address) that did not prove its key: a sentence left in why[0..cap). */
    void (*node_refused)(void *arg, const char *node, const char *peer, char *why, size_t cap);
    void *node_key_arg;
};

/* Counters, for tests and metrics. */
struct store_server_stats {
    size_t clients; /* connected, authenticated or not */
    size_t keys;
    size_t data_bytes;
    size_t waits;            /* WAITs pending now */
    size_t watches;          /* WATCHes parked now */
    size_t heartbeats;       /* entries of the heartbeat table */
    uint64_t notifies;       /* NOTIFY frames sent */
    uint64_t requests;       /* commands run */
    uint64_t auth_failures;  /* peers dropped in or before the handshake */
    uint64_t tag_failures;   /* authenticated connections dropped for a bad frame tag */
    uint64_t refused_writes; /* writes write_admit refused */
    uint64_t refused_nodes;  /* handshakes refused for a missing or wrong node proof */
};

struct store_server;

/* Returns a new server attached to `loop` (not yet listening) in *ret.
 * Loop thread. Returns 0, -EINVAL (no secret, or one shorter than
 * STORE_SECRET_MIN) or -ENOMEM. */
int store_server_new(uv_loop_t *loop, const struct store_server_opts *opts,
                     struct store_server **ret, struct gpt_err *err);

/* Binds host:port (port 0 = ephemeral; the port bound is in *ret_port, which
 * may be NULL) and starts accepting. Loop thread, does not block. Returns 0
 * or a negative errno (-EADDRINUSE, ...). */
int store_server_start(struct store_server *s, const char *host, int port, int *ret_port,
                       struct gpt_err *err);

/* Closes the listener and every connection, cancels pending waits, and frees
 * the server once all handles are closed; then calls close_cb(arg) (which
 * may be NULL) from the loop. `s` must not be used after this call. */
void store_server_close(struct store_server *s, void (*close_cb)(void *arg), void *arg);

/* Copies the counters. Any thread (they are read under a lock). */
void store_server_stats(struct store_server *s, struct store_server_stats *ret);

/* SET and DELETE for the server's owner, in-process: the same effects as
 * the frames (a revision, watches and WAITs answered, their replies
 * written) without a connection to itself. Loop thread, not from inside
 * the server's own callbacks. set: 0, -EINVAL (key), -GPT_E_LIMIT or
 * -ENOMEM; delete: 1 deleted, 0 absent, -EINVAL. */
int store_server_set(struct store_server *s, const char *key, const void *val, size_t len);
int store_server_delete(struct store_server *s, const char *key);

/* GET and a SET to empty in one step, in-process (what a GET then a
 * COMPARE_SET of exactly the value read does over a connection, with
 * nothing in between): a queue key's whole content, taken. Loop thread, as
 * store_server_set. Returns 0 with the value (new, NULL when the key is
 * absent or empty) in *ret_val and its length in *ret_len, -EINVAL (key)
 * or -ENOMEM (the key is then unchanged). */
int store_server_take(struct store_server *s, const char *key, void **ret_val, size_t *ret_len);

/* One heartbeat report as store_server_hb_drain() hands it over; every
 * pointer borrowed for the callback only. */
struct store_server_hb {
    const char *key; /* the node, NUL-terminated */
    size_t key_len;
    const void *val; /* its latest report */
    size_t len;
    bool changed;    /* the report differs from the one the last drain gave */
    uint64_t age_ms; /* since that HEARTBEAT arrived (loop time) */
};
typedef void (*store_server_hb_fn)(void *arg, const struct store_server_hb *hb);

/* Calls fn once for every heartbeat entry touched since the last drain
 * (however many HEARTBEATs it got meanwhile; the latest report), and
 * returns how many. fn must not call into the server. Loop thread. */
size_t store_server_hb_drain(struct store_server *s, store_server_hb_fn fn, void *arg);

#endif
