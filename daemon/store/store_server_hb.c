/*
 * store_server_hb: the store server's heartbeat table (HEARTBEAT in
 * proto/store.h). One entry per node key, its report overwritten in place
 * and the time noted, so a heartbeat costs O(1) whatever the cluster's
 * size; entries touched since the owner last looked wait on a dirty list
 * that store_server_hb_drain() empties. Entries are never removed (a node
 * that went away keeps its last report, and its silence is what the owner
 * sees). Bounded by max_heartbeats entries and, with the key table,
 * max_data_bytes. Loop thread.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_server_impl.h"

#define HB_BUCKETS_MIN 64

static struct hb_entry *hb_find(const struct store_server *s, const char *key, size_t len,
                                uint64_t hash)
{
    struct hb_entry *e;

    if (!s->hb_buckets)
        return NULL;
    for (e = s->hb_buckets[hash & (s->hb_nbuckets - 1)]; e; e = e->next)
        if (e->hash == hash && e->len == len && memcmp(e->key, key, len) == 0)
            return e;
    return NULL;
}

static int hb_grow(struct store_server *s)
{
    size_t n = s->hb_nbuckets ? s->hb_nbuckets * 2 : HB_BUCKETS_MIN;
    struct hb_entry **nb = calloc(n, sizeof(*nb));

    if (!nb)
        return -ENOMEM;
    for (size_t i = 0; i < s->hb_nbuckets; i++) {
        struct hb_entry *e = s->hb_buckets[i], *next;
        for (; e; e = next) {
            next = e->next;
            e->next = nb[e->hash & (n - 1)];
            nb[e->hash & (n - 1)] = e;
        }
    }
    free(s->hb_buckets);
    s->hb_buckets = nb;
    s->hb_nbuckets = n;
    return 0;
}

int store_server_hb_put(struct store_server *s, const char *key, size_t len, const void *val,
                        size_t val_len, const char *peer, char *why, size_t cap)
{
    uint64_t h = store_table_hash(key, len);
    struct hb_entry *e = hb_find(s, key, len, h);
    bool same = e && e->val_len == val_len && (!val_len || memcmp(e->val, val, val_len) == 0);

    /* An unchanged report comes from the node already admitted. */
    if (!same && s->opts.hb_admit) {
        char k[GPT_STORE_KEY_MAX + 1];
        snprintf(k, sizeof(k), "%.*s", (int)len, key);
        int rc =
            s->opts.hb_admit(s->opts.hb_arg, k, val, val_len, peer, e ? e->peer : "", why, cap);
        if (rc < 0)
            return rc;
    }
    if (!e) {
        if (s->hb_count >= s->opts.max_heartbeats ||
            s->table.data_bytes + s->hb_bytes + len > s->opts.max_data_bytes)
            return -GPT_E_LIMIT;
        if (s->hb_count >= s->hb_nbuckets && hb_grow(s) < 0)
            return -ENOMEM;
        if (!(e = calloc(1, sizeof(*e) + len + 1)))
            return -ENOMEM;
        memcpy(e->key, key, len);
        e->len = len;
        e->hash = h;
        link_init(&e->dirty_link);
        e->next = s->hb_buckets[h & (s->hb_nbuckets - 1)];
        s->hb_buckets[h & (s->hb_nbuckets - 1)] = e;
        s->hb_count++;
        s->hb_bytes += len;
        ST_ADD(s, heartbeats, 1);
    }
    if (e->val_len != val_len || (val_len && memcmp(e->val, val, val_len) != 0)) {
        if (val_len > e->val_cap) {
            if (s->table.data_bytes + s->hb_bytes - e->val_cap + val_len > s->opts.max_data_bytes)
                return -GPT_E_LIMIT;
            uint8_t *nv = realloc(e->val, val_len);
            if (!nv)
                return -ENOMEM;
            s->hb_bytes = s->hb_bytes - e->val_cap + val_len;
            e->val = nv;
            e->val_cap = val_len;
        }
        if (val_len)
            memcpy(e->val, val, val_len);
        e->val_len = val_len;
        e->changed = true;
    }
    snprintf(e->peer, sizeof(e->peer), "%s", peer);
    e->touched_ms = uv_now(s->loop);
    if (!link_linked(&e->dirty_link))
        link_insert_tail(&s->hb_dirty, &e->dirty_link);
    return 0;
}

size_t store_server_hb_drain(struct store_server *s, store_server_hb_fn fn, void *arg)
{
    uint64_t now = uv_now(s->loop);
    size_t n = 0;

    while (link_linked(&s->hb_dirty)) {
        struct hb_entry *e = container_of(s->hb_dirty.next, struct hb_entry, dirty_link);
        struct store_server_hb hb = {.key = e->key,
                                     .key_len = e->len,
                                     .val = e->val,
                                     .len = e->val_len,
                                     .changed = e->changed,
                                     .age_ms = now - e->touched_ms};
        link_remove(&e->dirty_link);
        e->changed = false;
        fn(arg, &hb);
        n++;
    }
    return n;
}

void store_server_hb_done(struct store_server *s)
{
    for (size_t i = 0; s->hb_buckets && i < s->hb_nbuckets; i++) {
        struct hb_entry *e = s->hb_buckets[i], *next;
        for (; e; e = next) {
            next = e->next;
            free(e->val);
            free(e);
        }
    }
    free(s->hb_buckets);
    s->hb_buckets = NULL;
    s->hb_nbuckets = s->hb_count = s->hb_bytes = 0;
}
