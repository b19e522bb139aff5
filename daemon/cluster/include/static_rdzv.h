/*
 * static_rdzv: the static rendezvous of `gptd run --world N --rank R
 * --rdzv HOST:PORT` (torchrun's static c10d rendezvous): the process with
 * rank 0 serves the store, every process reaches it through a client.
 * Owned by the main thread; the kv it hands out may be used by any thread.
 */
#ifndef GPTD_STATIC_RDZV_H
#define GPTD_STATIC_RDZV_H

#include <stddef.h>

#include "comm.h"
#include "gpt_err.h"

struct static_rdzv;

/* Serves the store at HOST:PORT when host_store is set, then connects to
 * it, retrying for up to timeout_ms while it is not up yet. The secret (at
 * least STORE_SECRET_MIN bytes; every rank the same) authenticates the
 * ranks and the store to each other and keys the MAC of every frame; a
 * missing or short one fails with -EINVAL, a different one with
 * -GPT_E_AUTH at once (not retried). Blocks. */
int static_rdzv_open(const char *hostport, int host_store, const void *secret, size_t secret_len,
                     int timeout_ms, struct static_rdzv **ret, struct gpt_err *err);

/* The key-value view the workers use; valid until static_rdzv_close. */
const struct gpt_kv *static_rdzv_kv(struct static_rdzv *r);

/* Disconnects and stops the store (if served here). NULL allowed. */
void static_rdzv_close(struct static_rdzv *r);

#endif
