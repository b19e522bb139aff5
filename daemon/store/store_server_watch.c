/*
 * store_server_watch: the store server's WATCHes (see store_server_impl.h
 * and the WATCH section of proto/store.h). A watch is parked on its key's
 * list (one struct watch_key per watched key, in a hash table of their
 * own, so a change looks at the watches of its key only) and on its
 * client's list (at most max_client_watches). A change of the key stages a
 * NOTIFY in each watcher's reply buffer and queues the watcher to write it;
 * the watch is then finished (fires once). A timer per watch answers
 * TIMEOUT. A closing client ends its watches without a word. Loop thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_server_impl.h"

#define WATCH_BUCKETS_MIN 64

static struct watch_key *wk_find(const struct store_server *s, const char *key, size_t len,
                                 uint64_t hash)
{
    struct watch_key *k;

    if (!s->wk_buckets)
        return NULL;
    for (k = s->wk_buckets[hash & (s->wk_nbuckets - 1)]; k; k = k->next)
        if (k->hash == hash && k->len == len && memcmp(k->key, key, len) == 0)
            return k;
    return NULL;
}

static int wk_grow(struct store_server *s)
{
    size_t n = s->wk_nbuckets ? s->wk_nbuckets * 2 : WATCH_BUCKETS_MIN;
    struct watch_key **nb = calloc(n, sizeof(*nb));

    if (!nb)
        return -ENOMEM;
    for (size_t i = 0; i < s->wk_nbuckets; i++) {
        struct watch_key *k = s->wk_buckets[i], *next;
        for (; k; k = next) {
            next = k->next;
            k->next = nb[k->hash & (n - 1)];
            nb[k->hash & (n - 1)] = k;
        }
    }
    free(s->wk_buckets);
    s->wk_buckets = nb;
    s->wk_nbuckets = n;
    return 0;
}

static struct watch_key *wk_get(struct store_server *s, const char *key, size_t len, uint64_t hash)
{
    struct watch_key *k = wk_find(s, key, len, hash);

    if (k)
        return k;
    if (s->wk_count >= s->wk_nbuckets && wk_grow(s) < 0)
        return NULL;
    k = calloc(1, sizeof(*k) + len + 1);
    if (!k)
        return NULL;
    memcpy(k->key, key, len);
    k->len = len;
    k->hash = hash;
    link_init(&k->watches);
    k->next = s->wk_buckets[hash & (s->wk_nbuckets - 1)];
    s->wk_buckets[hash & (s->wk_nbuckets - 1)] = k;
    s->wk_count++;
    return k;
}

/* Frees k once no watch is parked on it. */
static void wk_release(struct store_server *s, struct watch_key *k)
{
    struct watch_key **pp;

    if (link_linked(&k->watches))
        return;
    pp = &s->wk_buckets[k->hash & (s->wk_nbuckets - 1)];
    while (*pp != k)
        pp = &(*pp)->next;
    *pp = k->next;
    s->wk_count--;
    free(k);
}

static void watch_timer_closed(uv_handle_t *h)
{
    struct watch *w = container_of((uv_timer_t *)h, struct watch, timer);
    struct store_server *s = w->srv;

    free(w);
    s->up.handle_closed(s);
}

/* Unlinks w from its key and client and closes its timer (w is freed in
 * the close callback). The key's entry stays for the caller to release. */
static void watch_finish(struct watch *w)
{
    struct store_server *s = w->srv;

    link_remove(&w->key_link);
    link_remove(&w->client_link);
    w->client->nwatches--;
    w->client = NULL;
    ST_ADD(s, watches, -1);
    uv_timer_stop(&w->timer);
    uv_close((uv_handle_t *)&w->timer, watch_timer_closed);
}

/* Stages a NOTIFY for w's client and queues it to write it; false when the
 * client had to be closed (out of memory). */
static bool watch_notify(struct client *c, uint32_t status, uint64_t version,
                         const struct watch_key *k, const struct store_entry *e)
{
    if (proto_store_put_notify(&c->out, status, version, k->key, k->len, e ? e->val : NULL,
                               e ? e->val_len : 0) < 0) {
        c->srv->up.client_close(c, "out of memory");
        return false;
    }
    ST_ADD(c->srv, notifies, 1);
    store_server_resume(c);
    return true;
}

void store_server_key_changed(struct store_server *s, const char *key, size_t len, uint64_t hash,
                              const struct store_entry *e)
{
    struct watch_key *k = wk_find(s, key, len, hash);
    struct link *l, *next;

    if (!k)
        return;
    for (l = k->watches.next; l != &k->watches; l = next) {
        struct watch *w = container_of(l, struct watch, key_link);
        struct client *c = w->client;
        next = l->next;
        if (e && e->version <= w->seen)
            continue; /* a client that claims to have seen the future */
        watch_finish(w);
        /* A client closed for want of memory ends its other watches, which
         * may include `next`'s: start over then (each pass removes one). */
        if (!watch_notify(c, e ? 0 : PROTO_STORE_STATUS_NOT_FOUND, e ? e->version : 0, k, e))
            next = k->watches.next;
    }
    wk_release(s, k);
}

static void watch_timeout(uv_timer_t *t)
{
    struct watch *w = container_of(t, struct watch, timer);
    struct client *c = w->client;
    struct store_server *s = w->srv;
    struct watch_key *k = w->wk;
    uint64_t seen = w->seen;

    watch_finish(w);
    if (watch_notify(c, PROTO_STORE_STATUS_TIMEOUT, seen, k, NULL))
        store_server_drain(s);
    wk_release(s, k);
}

void store_server_client_watches_end(struct client *c)
{
    struct store_server *s = c->srv;

    while (link_linked(&c->watches)) {
        struct watch *w = container_of(c->watches.next, struct watch, client_link);
        struct watch_key *k = w->wk;
        watch_finish(w);
        wk_release(s, k);
    }
}

int store_server_watch_start(struct client *c, const struct proto_store_msg *m,
                             const char **ret_why)
{
    struct store_server *s = c->srv;
    uint64_t h = store_table_hash(m->key, m->key_len);
    const struct store_entry *e = store_table_find(&s->table, m->key, m->key_len, h);
    struct watch_key *k;
    struct watch *w;
    struct link *l;

    /* One watch per key per connection: a new one replaces the old. */
    for (l = c->watches.next; l != &c->watches; l = l->next) {
        w = container_of(l, struct watch, client_link);
        if (w->wk->hash == h && w->wk->len == m->key_len &&
            memcmp(w->wk->key, m->key, m->key_len) == 0) {
            k = w->wk;
            watch_finish(w);
            wk_release(s, k);
            break;
        }
    }
    /* Already past what the client saw: answered at once, nothing parks. */
    if ((e && e->version > m->key_version) || (!e && m->key_version > 0)) {
        if (proto_store_put_ok(&c->out) < 0 ||
            proto_store_put_notify(&c->out, e ? 0 : PROTO_STORE_STATUS_NOT_FOUND,
                                   e ? e->version : 0, m->key, m->key_len, e ? e->val : NULL,
                                   e ? e->val_len : 0) < 0)
            return -ENOMEM;
        ST_ADD(s, notifies, 1);
        return 0;
    }
    if (c->nwatches >= s->opts.max_client_watches) {
        *ret_why = "too many watches on this connection";
        return -GPT_E_LIMIT;
    }
    if (s->st.watches >= s->opts.max_watches) {
        *ret_why = "too many watches";
        return -GPT_E_LIMIT;
    }
    if (!(k = wk_get(s, m->key, m->key_len, h)))
        return -ENOMEM;
    if (!(w = calloc(1, sizeof(*w)))) {
        wk_release(s, k);
        return -ENOMEM;
    }
    if (proto_store_put_ok(&c->out) < 0) {
        free(w);
        wk_release(s, k);
        return -ENOMEM;
    }
    w->srv = s;
    w->client = c;
    w->wk = k;
    w->seen = m->key_version;
    GPT_ASSERT(uv_timer_init(s->loop, &w->timer) == 0);
    s->open_handles++;
    link_insert_tail(&k->watches, &w->key_link);
    link_insert_tail(&c->watches, &w->client_link);
    c->nwatches++;
    ST_ADD(s, watches, 1);
    if (m->timeout_ms > 0)
        uv_timer_start(&w->timer, watch_timeout, m->timeout_ms, 0);
    return 0;
}

void store_server_watches_done(struct store_server *s)
{
    /* Every watch ended with its client; only the bucket array is left. */
    GPT_ASSERT(s->wk_count == 0);
    free(s->wk_buckets);
    s->wk_buckets = NULL;
    s->wk_nbuckets = 0;
}
