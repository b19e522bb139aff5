/*
 * store_auth: the cryptography of the store's handshake and of its sealed
 * frames (wire format and the reasoning in proto/store.h): the proofs each
 * side sends, the per-direction session keys, and the per-frame tags with
 * their sequence numbers. Used by store_server.c and store_client.c; holds
 * no sockets. A session belongs to one connection and is used by whichever
 * thread runs that connection (the loop thread, or the blocking client's
 * caller under its lock).
 */
#ifndef GPTD_STORE_AUTH_H
#define GPTD_STORE_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpt_err.h"
#include "store.h"

/* A cluster secret shorter than this is refused everywhere: by
 * store_secret_load(), by the server, and by every proof. */
#define STORE_SECRET_MIN 16

/* ret_mac = HMAC-SHA256(secret, label || nc || ns || node), label one of
 * the GPT_STORE_LABEL_* strings, node the node id of the handshake's HELLO
 * (NULL or "": none). Any thread. Returns 0, or -GPT_E_AUTH when the secret
 * is shorter than STORE_SECRET_MIN (no empty or short key is ever used),
 * the node id is longer than GPT_STORE_NODE_MAX or libcrypto fails. */
int store_auth_proof(const void *secret, size_t secret_len, const char *label,
                     const uint8_t nc[GPT_STORE_NONCE_BYTES],
                     const uint8_t ns[GPT_STORE_NONCE_BYTES], const char *node,
                     uint8_t ret_mac[GPT_STORE_MAC_BYTES]);

/* The node key's wrapping for this handshake: ret = key XOR
 * HMAC-SHA256(secret, GPT_STORE_LABEL_WRAP || nc || ns || node); the same
 * call unwraps. Any thread. 0 or -GPT_E_AUTH (as store_auth_proof). */
int store_auth_wrap(const void *secret, size_t secret_len, const uint8_t nc[GPT_STORE_NONCE_BYTES],
                    const uint8_t ns[GPT_STORE_NONCE_BYTES], const char *node,
                    const uint8_t key[GPT_STORE_MAC_BYTES], uint8_t ret[GPT_STORE_MAC_BYTES]);

/* Fills buf with n random bytes from the kernel/libcrypto. 0 or -GPT_E_AUTH. */
int store_auth_random(uint8_t *buf, size_t n);

/* One connection's sealing state after a completed handshake: a keyed
 * HMAC context per direction (keyed once; re-initialised per frame from the
 * precomputed pads, so a frame costs one pass over its bytes) and the
 * sequence number of the next frame each way. */
struct store_auth_session {
    void *tx; /* EVP_MAC_CTX keyed with this side's sending key */
    void *rx; /* ... with the peer's sending key */
    uint64_t tx_seq;
    uint64_t rx_seq;
};

/* Derives both directions' keys from the secret and the two nonces (the
 * labels in proto/store.h) and keys the contexts. is_server picks which key
 * is tx. Returns 0, -GPT_E_AUTH (short secret, libcrypto failure) or -ENOMEM;
 * on failure the session is left done (store_auth_session_done is safe). */
int store_auth_session_init(struct store_auth_session *s, bool is_server, const void *secret,
                            size_t secret_len, const uint8_t nc[GPT_STORE_NONCE_BYTES],
                            const uint8_t ns[GPT_STORE_NONCE_BYTES]);
/* Frees the contexts; safe on a zeroed or already-done session. */
void store_auth_session_done(struct store_auth_session *s);
/* 1 once store_auth_session_init succeeded (and until done). */
bool store_auth_session_ready(const struct store_auth_session *s);

/* Fills the tag of every frame in o->data[from..o->len), which must have
 * been written with o->tag_bytes == GPT_STORE_TAG_BYTES, in order, each
 * with the next tx sequence number. Returns 0 or -GPT_E_AUTH (libcrypto, or
 * the bytes are not sealed frames: a programming error upstream). */
int store_auth_seal(struct store_auth_session *s, struct proto_store_out *o, size_t from);

/* A proto_store_verify_fn (arg: the session): accepts the frame only if its
 * tag is the MAC of the next rx sequence number and the frame, then
 * advances that number. Returns 0 or -GPT_E_AUTH. */
int store_auth_verify(void *session, const uint8_t *frame, size_t len, const uint8_t *tag);

#endif
