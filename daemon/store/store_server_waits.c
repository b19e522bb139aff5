/*
 * store_server_waits: the store server's pending WAITs (see
 * store_server_impl.h): one per paused client, a timer each, completed by
 * the command that creates their missing key or by the timeout; and the
 * resume queue of clients whose frames may run again, drained iteratively
 * so that one client never runs inside another's command. Loop thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_server_impl.h"

static void wait_timer_closed(uv_handle_t *h)
{
    struct wait *w = container_of((uv_timer_t *)h, struct wait, timer);
    struct store_server *s = w->srv;

    free(w);
    s->up.handle_closed(s);
}

/* Unlinks w from its client and the server and closes its timer (the wait
 * is freed in the close callback). */
void store_server_wait_finish(struct wait *w)
{
    struct store_server *s = w->srv;

    link_remove(&w->link);
    w->client->wait = NULL;
    w->client = NULL;
    ST_ADD(s, waits, -1);
    uv_timer_stop(&w->timer);
    uv_close((uv_handle_t *)&w->timer, wait_timer_closed);
}

/* Advances w->cur past keys that exist; true when all exist. */
static bool wait_advance(struct store_server *s, struct wait *w)
{
    while (w->cur < w->nkeys) {
        const struct wait_key *k = &w->keys[w->cur];
        if (!store_table_find(&s->table, k->key, k->len, k->hash))
            return false;
        w->cur++;
    }
    /* A key passed earlier may have been deleted since: check them all. */
    for (w->cur = 0; w->cur < w->nkeys; w->cur++) {
        const struct wait_key *k = &w->keys[w->cur];
        if (!store_table_find(&s->table, k->key, k->len, k->hash))
            return false;
    }
    return true;
}

void store_server_resume(struct client *c)
{
    if (!c->closing && !link_linked(&c->resume_link))
        link_insert_tail(&c->srv->resume, &c->resume_link);
}

/* Runs queued clients until none is left. Re-entrant calls return at once:
 * the outermost one picks up what they queued. */
void store_server_drain(struct store_server *s)
{
    if (s->draining)
        return;
    s->draining = true;
    while (link_linked(&s->resume)) {
        struct client *c = container_of(s->resume.next, struct client, resume_link);
        link_remove(&c->resume_link);
        s->up.client_process(c);
    }
    s->draining = false;
}

/* A key was created: complete the waits it was the missing key of. */
void store_server_key_created(struct store_server *s, const char *key, size_t len, uint64_t hash)
{
    struct link *l, *next;

    for (l = s->waits.next; l != &s->waits; l = next) {
        struct wait *w = container_of(l, struct wait, link);
        const struct wait_key *k = &w->keys[w->cur];
        next = l->next;
        if (k->hash != hash || k->len != len || memcmp(k->key, key, len) != 0)
            continue;
        if (!wait_advance(s, w))
            continue;
        /* The reply is staged now; the client runs its next frames later. */
        struct client *c = w->client;
        proto_store_put_ok(&c->out);
        store_server_resume(c);
        store_server_wait_finish(w);
    }
}

static void wait_timeout(uv_timer_t *t)
{
    struct wait *w = container_of(t, struct wait, timer);
    struct client *c = w->client;
    struct store_server *s = c->srv;

    if (proto_store_put_error(&c->out, PROTO_STORE_STATUS_TIMEOUT, "wait timed out") < 0) {
        s->up.client_close(c, "out of memory");
        return;
    }
    store_server_wait_finish(w);
    store_server_resume(c);
    store_server_drain(s);
}

/* Starts a WAIT for the keys of m that are not all present. */
int store_server_wait_start(struct client *c, const struct proto_store_msg *m)
{
    struct store_server *s = c->srv;
    size_t cursor = 0, i = 0, klen;
    const char *k;
    struct wait *w;
    char *copy;

    if (s->st.waits >= s->opts.max_waits)
        return -GPT_E_LIMIT;
    w = calloc(1, sizeof(*w) + m->nkeys * sizeof(w->keys[0]) + m->keys_raw_len);
    if (!w)
        return -ENOMEM;
    copy = (char *)&w->keys[m->nkeys];
    memcpy(copy, m->keys_raw, m->keys_raw_len);
    while (proto_store_keys_next(m, &cursor, &k, &klen)) {
        w->keys[i].key = copy + (k - (const char *)m->keys_raw);
        w->keys[i].len = klen;
        w->keys[i].hash = store_table_hash(k, klen);
        i++;
    }
    w->nkeys = m->nkeys;
    w->client = c;
    w->srv = s;
    GPT_ASSERT(uv_timer_init(s->loop, &w->timer) == 0);
    s->open_handles++;
    link_insert_tail(&s->waits, &w->link);
    c->wait = w;
    ST_ADD(s, waits, 1);
    wait_advance(s, w); /* positions cur on a missing key */
    if (m->timeout_ms > 0)
        uv_timer_start(&w->timer, wait_timeout, m->timeout_ms, 0);
    return 0;
}
