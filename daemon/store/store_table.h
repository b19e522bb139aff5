/*
 * store_table: the rendezvous store's key table, a chained hash table of
 * keys and byte values with limits on the key count, a value's size and the
 * bytes held in all. Owned by one store_server and used on its loop thread
 * only (the server copies the counts into its shared counters).
 */
#ifndef GPTD_STORE_TABLE_H
#define GPTD_STORE_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct store_entry {
    struct store_entry *next; /* hash chain */
    uint64_t hash;
    uint64_t version; /* the server's revision of the last change (proto/store.h) */
    uint8_t *val;
    size_t val_len;
    size_t val_cap; /* bytes allocated at val: APPEND grows it geometrically */
    size_t key_len;
    char key[]; /* NUL-terminated */
};

struct store_table {
    struct store_entry **buckets;
    size_t nbuckets;        /* a power of two */
    size_t keys;            /* entries held */
    size_t data_bytes;      /* key and value bytes held */
    size_t max_keys;        /* creating a key past it: -GPT_E_LIMIT */
    size_t max_value_bytes; /* a value (also APPEND's result) */
    size_t max_data_bytes;  /* data_bytes */
};

/* An empty table with those limits. Returns 0 or -ENOMEM. */
int store_table_init(struct store_table *t, size_t max_keys, size_t max_value_bytes,
                     size_t max_data_bytes);
/* Frees every entry and the buckets; safe on a zeroed or done table. */
void store_table_done(struct store_table *t);
/* The hash every other call takes (FNV-1a). */
uint64_t store_table_hash(const char *key, size_t len);
/* The entry of key (borrowed, valid until removed), or NULL. */
struct store_entry *store_table_find(const struct store_table *t, const char *key, size_t len,
                                     uint64_t hash);
/* Adds an empty entry for a key known to be absent. Returns 0 with the
 * entry in *ret, -GPT_E_LIMIT (keys or bytes) or -ENOMEM. */
int store_table_create(struct store_table *t, const char *key, size_t len, uint64_t hash,
                       struct store_entry **ret);
/* Removes and frees e. */
void store_table_remove(struct store_table *t, struct store_entry *e);
/* Replaces (append false) or extends e's value. Appending grows the buffer
 * geometrically, so appending n small lines costs O(n) copies, not O(n^2).
 * Returns 0, -GPT_E_LIMIT or -ENOMEM; a failed call leaves e unchanged. */
int store_table_store(struct store_table *t, struct store_entry *e, const void *val, size_t len,
                      bool append);

#endif
