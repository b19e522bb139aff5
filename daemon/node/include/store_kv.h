/*
 * store_kv: the daemon's one gpt_kv (engine/comm.h) over the rendezvous
 * store (daemon/store_client.h), for the workers of one world: set is a
 * SET, get polls (CHECK, then GET) until the key exists, so an abort is
 * seen within one poll and no lock is held while waiting. Two ways in:
 * store_kv_new names the store and connects on the first call, retrying
 * for up to 10 s (not after -GPT_E_AUTH) — the agent's workers;
 * store_kv_over borrows a client that is already connected — `gptd run
 * --rdzv` (static_rdzv.c), which connects at start to fail early.
 *
 * Any thread may call set/get and store_kv_abort; new and free belong to
 * the owner (the agent, on the loop thread), free only once no thread
 * uses the kv.
 */
#ifndef GPTD_STORE_KV_H
#define GPTD_STORE_KV_H

#include <stddef.h>

#include "comm.h"

struct store_client;
struct store_kv;

/* A kv on the store at host:port with `secret` (copied; at most
 * STORE_SECRET_MAX bytes are kept), speaking for node id `node` (copied;
 * NULL: none), which bounds the keys the coordinator lets it write. NULL
 * on ENOMEM. Does not connect. */
struct store_kv *store_kv_new(const char *host, int port, const void *secret, size_t secret_len,
                              const char *node);
/* The node key of that node (GPT_STORE_MAC_BYTES, copied; NULL: none),
 * proved when the kv connects. Before the first call. */
void store_kv_set_node_key(struct store_kv *k, const uint8_t *key);
/* A kv over `client`, which stays the caller's: it must outlive the kv
 * and is not freed by store_kv_free. NULL on ENOMEM. */
struct store_kv *store_kv_over(struct store_client *client);
/* The gpt_kv to hand to gpt_comm (borrowed; valid until store_kv_free). */
struct gpt_kv *store_kv_gpt(struct store_kv *k);
/* Any thread: the call in progress and every later one fail with
 * -ECANCELED (or the aborted client's error). A borrowed client is
 * aborted too (store_client_abort): its owner only frees it after. */
void store_kv_abort(struct store_kv *k);
/* NULL allowed. */
void store_kv_free(struct store_kv *k);

#endif
