/*
 * store_table: see store_table.h. Owns the entries and the bucket array;
 * the bucket count doubles when the keys reach it. Loop thread only.
 */
#include "store_table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_err.h"

#define STORE_TABLE_BUCKETS_MIN 64

int store_table_init(struct store_table *t, size_t max_keys, size_t max_value_bytes,
                     size_t max_data_bytes)
{
    memset(t, 0, sizeof(*t));
    t->max_keys = max_keys;
    t->max_value_bytes = max_value_bytes;
    t->max_data_bytes = max_data_bytes;
    t->nbuckets = STORE_TABLE_BUCKETS_MIN;
    t->buckets = calloc(t->nbuckets, sizeof(*t->buckets));
    return t->buckets ? 0 : -ENOMEM;
}

void store_table_done(struct store_table *t)
{
    for (size_t i = 0; t->buckets && i < t->nbuckets; i++) {
        struct store_entry *e = t->buckets[i], *next;
        for (; e; e = next) {
            next = e->next;
            free(e->val);
            free(e);
        }
    }
    free(t->buckets);
    memset(t, 0, sizeof(*t));
}

uint64_t store_table_hash(const char *key, size_t len)
{
    uint64_t h = 1469598103934665603ull;

    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)key[i];
        h *= 1099511628211ull;
    }
    return h;
}

struct store_entry *store_table_find(const struct store_table *t, const char *key, size_t len,
                                     uint64_t hash)
{
    struct store_entry *e;

    for (e = t->buckets[hash & (t->nbuckets - 1)]; e; e = e->next)
        if (e->hash == hash && e->key_len == len && memcmp(e->key, key, len) == 0)
            return e;
    return NULL;
}

static int table_grow(struct store_table *t)
{
    size_t n = t->nbuckets * 2;
    struct store_entry **nb = calloc(n, sizeof(*nb));

    if (!nb)
        return -ENOMEM;
    for (size_t i = 0; i < t->nbuckets; i++) {
        struct store_entry *e = t->buckets[i], *next;
        for (; e; e = next) {
            next = e->next;
            e->next = nb[e->hash & (n - 1)];
            nb[e->hash & (n - 1)] = e;
        }
    }
    free(t->buckets);
    t->buckets = nb;
    t->nbuckets = n;
    return 0;
}

int store_table_create(struct store_table *t, const char *key, size_t len, uint64_t hash,
                       struct store_entry **ret)
{
    struct store_entry *e;

    if (t->keys >= t->max_keys || t->data_bytes + len > t->max_data_bytes)
        return -GPT_E_LIMIT;
    if (t->keys >= t->nbuckets && table_grow(t) < 0)
        return -ENOMEM;
    e = calloc(1, sizeof(*e) + len + 1);
    if (!e)
        return -ENOMEM;
    memcpy(e->key, key, len);
    e->key_len = len;
    e->hash = hash;
    e->next = t->buckets[hash & (t->nbuckets - 1)];
    t->buckets[hash & (t->nbuckets - 1)] = e;
    t->keys++;
    t->data_bytes += len;
    *ret = e;
    return 0;
}

void store_table_remove(struct store_table *t, struct store_entry *e)
{
    struct store_entry **pp = &t->buckets[e->hash & (t->nbuckets - 1)];

    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    t->keys--;
    t->data_bytes -= e->key_len + e->val_len;
    free(e->val);
    free(e);
}

int store_table_store(struct store_table *t, struct store_entry *e, const void *val, size_t len,
                      bool append)
{
    size_t old = append ? e->val_len : 0, total = old + len;
    uint8_t *nv;

    if (total > t->max_value_bytes || t->data_bytes - e->val_len + total > t->max_data_bytes)
        return -GPT_E_LIMIT;
    if (append && e->val && total <= e->val_cap) {
        memcpy(e->val + old, val, len);
    } else if (append && e->val) {
        size_t cap = e->val_cap * 2 > total ? e->val_cap * 2 : total;
        if (cap > t->max_value_bytes)
            cap = total; /* never hold more than one maximal value */
        nv = realloc(e->val, cap);
        if (!nv)
            return -ENOMEM;
        memcpy(nv + old, val, len);
        e->val = nv;
        e->val_cap = cap;
    } else {
        nv = malloc(total ? total : 1);
        if (!nv)
            return -ENOMEM;
        if (len)
            memcpy(nv, val, len);
        free(e->val);
        e->val = nv;
        e->val_cap = total ? total : 1;
    }
    t->data_bytes = t->data_bytes - e->val_len + total;
    e->val_len = total;
    return 0;
}
