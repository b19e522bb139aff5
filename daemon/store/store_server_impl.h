/*
 * store_server_impl: the store server's objects, shared by its two files
 * (private to daemon/store_server*.c): store_server.c (the server, the
 * connections, the handshake and the commands), store_server_waits.c
 * (pending WAITs, their timers and the resume queue), store_server_watch.c
 * (WATCHes: parked per key, fired by changes, NOTIFY frames) and
 * store_server_hb.c (the heartbeat table). Loop thread only, except the
 * counters in `st`, under `st_lock`.
 */
#ifndef GPTD_STORE_SERVER_IMPL_H
#define GPTD_STORE_SERVER_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "store.h"
#include "store_auth.h"
#include "store_server.h"
#include "store_table.h"

#define READ_CHUNK_BYTES 65536

/* ---- intrusive circular lists ---- */

struct link {
    struct link *prev, *next;
};

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

static inline void link_init(struct link *l)
{
    l->prev = l->next = l;
}

static inline bool link_linked(const struct link *l)
{
    return l->next != l;
}

static inline void link_insert_tail(struct link *head, struct link *l)
{
    l->prev = head->prev;
    l->next = head;
    head->prev->next = l;
    head->prev = l;
}

static inline void link_remove(struct link *l)
{
    l->prev->next = l->next;
    l->next->prev = l->prev;
    link_init(l);
}

/* ---- objects ---- */

struct wait_key {
    const char *key; /* into the wait's own copy */
    size_t len;
    uint64_t hash;
};

struct wait {
    uv_timer_t timer; /* always initialised; the wait is freed in its close callback */
    struct link link; /* in server->waits */
    struct store_server *srv;
    struct client *client; /* NULL once finished (the client may be freed first) */
    uint32_t nkeys;
    uint32_t cur; /* first key not yet known to exist */
    struct wait_key keys[];
};

/* The watches of one key (store_server_watch.c): exists while it has any. */
struct watch_key {
    struct watch_key *next; /* hash chain */
    uint64_t hash;
    struct link watches; /* struct watch.key_link */
    size_t len;
    char key[]; /* NUL-terminated */
};

/* One parked WATCH: on its key's list and its client's list until it
 * fires, times out, is replaced or its client goes. */
struct watch {
    uv_timer_t timer; /* always initialised; the watch is freed in its close callback */
    struct link key_link;
    struct link client_link;
    struct store_server *srv;
    struct client *client; /* NULL once finished */
    struct watch_key *wk;
    uint64_t seen;
};

/* One node's heartbeat report (store_server_hb.c), overwritten in place. */
struct hb_entry {
    struct hb_entry *next;  /* hash chain */
    struct link dirty_link; /* in server->hb_dirty until the owner reads it */
    uint64_t hash;
    uint64_t touched_ms; /* uv_now of the last HEARTBEAT */
    bool changed;        /* the report differs from the one last read */
    uint8_t *val;
    size_t val_len, val_cap;
    size_t len;
    char peer[64]; /* the connection that wrote the report */
    char key[];    /* NUL-terminated */
};

/* CLIENT_REFUSED: its node proof failed; the ERROR saying so is being
 * written, then the connection closes. */
enum client_state { CLIENT_HELLO, CLIENT_AUTH, CLIENT_READY, CLIENT_REFUSED };

struct client {
    uv_tcp_t tcp;
    uv_timer_t hs_timer; /* handshake deadline */
    struct store_server *srv;
    struct link link;        /* in server->clients */
    struct link resume_link; /* in server->resume when queued */
    enum client_state state;
    bool closing;
    int open_handles;
    uint8_t nc[GPT_STORE_NONCE_BYTES]; /* the client's handshake nonce */
    uint8_t ns[GPT_STORE_NONCE_BYTES]; /* ours */
    struct store_auth_session session; /* ready in CLIENT_READY */
    struct proto_store_parser parser;
    struct proto_store_out out; /* replies not yet handed to uv_write */
    size_t seal_from;           /* out's bytes before this are sealed or handshake */
    struct wait *wait;
    struct link watches; /* struct watch.client_link */
    size_t nwatches;
    bool refusal_logged;               /* write_admit refused a write of it (logged once) */
    char node[GPT_STORE_NODE_MAX + 1]; /* the node id its handshake proved ("": none) */
    char peer[64];
};

struct store_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    bool listening;
    bool closing;
    int open_handles; /* listener + every client and wait handle not yet closed */
    void (*close_cb)(void *arg);
    void *close_arg;
    /* store_server.c's, set by store_server_new: the waits and watches
     * (store_server_waits.c, store_server_watch.c), which it calls, call
     * these back instead of naming it. */
    struct store_server_up {
        /* Drops a connection (why: logged when not NULL); its wait ends. */
        void (*client_close)(struct client *c, const char *why);
        /* Runs the client's buffered frames while it is not paused. */
        void (*client_process)(struct client *c);
        /* One of the server's handles finished closing; frees the server
         * after the last once store_server_close was called. */
        void (*handle_closed)(struct store_server *s);
    } up;
    struct store_server_opts opts;
    uint8_t *secret;
    char secret_hint[1024];
    uint64_t auth_logged_ms; /* when a refused secret was last logged (uv_now) */
    uint64_t tag_logged_ms;  /* when a bad frame tag was last logged (uv_now) */
    uint64_t tag_unlogged;   /* bad tags since then not logged */
    struct store_table table;
    struct link clients;
    struct link waits;
    struct link resume;
    bool draining;
    uint64_t rev; /* the last revision given to a change (proto/store.h) */
    struct watch_key **wk_buckets;
    size_t wk_nbuckets, wk_count; /* a power of two; keys watched */
    struct hb_entry **hb_buckets;
    size_t hb_nbuckets, hb_count, hb_bytes;
    struct link hb_dirty;
    char hb_why[256]; /* a refused HEARTBEAT's reason, until its ERROR is written */
    char acl_why[GPT_STORE_ERRMSG_MAX]; /* a refused write's reason, likewise */
    pthread_mutex_t st_lock;
    struct store_server_stats st;
    /* One read buffer for every connection: a read is fed to the client's
     * parser (which copies it) before the loop reads anything else. */
    uint8_t rbuf[READ_CHUNK_BYTES];
};

/* ---- counters ---- */

#define ST_ADD(s, field, delta)                                                                    \
    do {                                                                                           \
        pthread_mutex_lock(&(s)->st_lock);                                                         \
        (s)->st.field += (delta);                                                                  \
        pthread_mutex_unlock(&(s)->st_lock);                                                       \
    } while (0)

/* ---- store_server_waits.c ---- */

/* Starts a WAIT for the keys of m that are not all present: 0, or
 * -GPT_E_LIMIT (max_waits) or -ENOMEM. */
int store_server_wait_start(struct client *c, const struct proto_store_msg *m);
/* Unlinks w from its client and the server and closes its timer (the wait
 * is freed in the close callback). */
void store_server_wait_finish(struct wait *w);
/* A key was created: completes the waits it was the missing key of (their
 * replies are staged, their clients queued to resume). */
void store_server_key_created(struct store_server *s, const char *key, size_t len, uint64_t hash);
/* Queues c to run its buffered frames at the next drain. */
void store_server_resume(struct client *c);
/* Runs queued clients until none is left. Re-entrant calls return at
 * once: the outermost one picks up what they queued. */
void store_server_drain(struct store_server *s);

/* ---- store_server_watch.c ---- */

/* Runs a WATCH: stages OK (and a NOTIFY at once when the key is already
 * past `seen`) and parks the watch otherwise. Returns 0, -GPT_E_LIMIT (with
 * *ret_why) or -ENOMEM. */
int store_server_watch_start(struct client *c, const struct proto_store_msg *m,
                             const char **ret_why);
/* A key changed (e: its entry) or was deleted (e NULL): fires its watches. */
void store_server_key_changed(struct store_server *s, const char *key, size_t len, uint64_t hash,
                              const struct store_entry *e);
/* Ends every watch of a closing client, silently. */
void store_server_client_watches_end(struct client *c);
/* Frees the (empty) watch-key table; at server teardown. */
void store_server_watches_done(struct store_server *s);

/* ---- store_server_hb.c ---- */

/* HEARTBEAT from `peer`: stores the report in place unless the owner's
 * hb_admit refuses it. Returns 0, -EEXIST (why[0..cap) says why),
 * -GPT_E_LIMIT or -ENOMEM. */
int store_server_hb_put(struct store_server *s, const char *key, size_t len, const void *val,
                        size_t val_len, const char *peer, char *why, size_t cap);
/* Frees the heartbeat table; at server teardown. */
void store_server_hb_done(struct store_server *s);

#endif
