/*
 * store: the rendezvous store's binary wire format (see DESIGN.md,
 * "Rendezvous store"). Pure: bytes in, a decoded message or an error out;
 * no sockets, threads, clocks, logging or globals. Any thread may call these
 * functions on objects it owns.
 *
 * Frame: u32 little-endian length of the rest, u8 type, then the fields of
 * that type. Integers are little-endian; keys and byte strings are a u32
 * length followed by the bytes. Every length is checked against a named limit
 * below before anything is allocated, and a frame whose declared length is
 * over the limit of its type is rejected as soon as its 5-byte header is in.
 *
 * Handshake (mutual; version 4). Nc, Ns: 32 random bytes each, chosen
 * afresh per connection by the client and the server. K: the cluster secret
 * (at least 16 bytes; an empty or short key is refused on both sides). N:
 * the node id the client speaks for (1..GPT_STORE_NODE_MAX bytes, no NUL),
 * or nothing (a client of no node: a rank of `gptd run`, a tool). KN: the
 * node key the server issued for N (32 bytes), when the client holds one.
 *   client -> HELLO(u32 version, Nc [, N as a byte string])
 *   server -> CHALLENGE(Ns)
 *   client -> AUTH(HMAC-SHA256(K, GPT_STORE_LABEL_CLIENT || Nc || Ns || N)
 *                  [, HMAC-SHA256(KN, GPT_STORE_LABEL_NODE || Nc || Ns || N)])
 *   server -> PROOF(HMAC-SHA256(K, GPT_STORE_LABEL_SERVER || Nc || Ns || N)
 *                   [, KN' XOR HMAC-SHA256(K, GPT_STORE_LABEL_WRAP || Nc || Ns || N)])
 * (N empty when absent). Both proofs cover N, so a relay cannot move a
 * connection to another node id; the server binds the connection to N and
 * its owner may limit what each node writes (ERROR(DENIED)).
 * Node keys: a server whose owner keeps them requires the node proof
 * (AUTH's second MAC) of a client naming an N it holds a key for, and
 * answers ERROR(DENIED) naming N instead of PROOF when it is missing or
 * wrong; for an N it holds no key for it issues a fresh random KN' and
 * sends it wrapped as PROOF's second MAC, which the client keeps and proves
 * from then on. A server without node keys ignores the node proof and
 * sends no key. The server drops a client whose AUTH is wrong; the client
 * drops a server whose PROOF is wrong. Each side then derives one key per
 * direction,
 *   Kc2s = HMAC-SHA256(K, GPT_STORE_LABEL_KEY_C2S || Nc || Ns)
 *   Ks2c = HMAC-SHA256(K, GPT_STORE_LABEL_KEY_S2C || Nc || Ns)
 * (labels distinct, so no proof or key is ever another's value).
 *
 * Sealed frames. Every frame after PROOF, in both directions, is followed by
 * a GPT_STORE_TAG_BYTES tag:
 *   frame || HMAC-SHA256(Kdir, u64le seq || frame)[0..16)
 * where `frame` is the whole frame (length, type, fields) and seq counts the
 * sealed frames sent in that direction on this connection, from 0. seq is
 * not on the wire: a replayed, dropped, reordered or injected frame, or one
 * from another connection (other nonces, other keys), fails its tag, and the
 * receiver closes the connection. The frame's length field does not count
 * the tag. This module only frames and finds tags (parser: tag_bytes and a
 * verify callback; encoders: tag_bytes reserved after each frame); the MACs
 * are computed by the caller (daemon/store/store_auth.c).
 * Limits: frames are authenticated, not encrypted (a peer on the path reads
 * keys and values, and can cut the connection, but not change, add, replay
 * or reorder a frame); whoever holds K may claim any node id N the server
 * holds no node key for (what a node may write is the server owner's
 * policy: gptd(8), "Security"), and one that also reads the handshake of
 * N's first connection can unwrap KN from it.
 *
 * After the handshake: requests, each answered by exactly one reply, in
 * order (a WAIT holds back the replies to later requests).
 *
 *   request                       fields                        reply
 *   SET          key, value                                     OK
 *   GET          key                                            VALUE | ERROR(NOT_FOUND)
 *   ADD          key, i64 delta (missing key counts as 0)       INT (new value)
 *                (the value is kept as decimal text, as in c10d)
 *   COMPARE_SET  key, expected, desired                         VALUE (value now held) |
 *                (absent key: set if expected is empty)         ERROR(NOT_FOUND)
 *   WAIT         u32 timeout_ms (0 = none), u32 n, n keys       OK | ERROR(TIMEOUT)
 *   CHECK        u32 n, n keys                                  INT (1 all exist, else 0)
 *   DELETE       key                                            INT (1 deleted, 0 absent)
 *   NUM_KEYS     -                                              INT
 *   APPEND       key, value (missing key starts empty)          OK
 *   WATCH        key, u64 seen, u32 timeout_ms (0 = none)       OK, later one NOTIFY
 *   HEARTBEAT    key (the node), value (its report)             OK | ERROR(EXISTS)
 * Any request may instead get ERROR(status, message); a write the server's
 * owner does not allow the connection's node gets ERROR(DENIED).
 *
 * Versions. The server counts its changes (a revision, from 1); every SET,
 * APPEND, ADD, successful COMPARE_SET and DELETE takes the next one, and a
 * key holds the revision of its last change as its version. Versions only
 * grow, across deletes and re-creations too.
 *
 * WATCH parks on a key until it changes past `seen` (the version the client
 * last saw; 0: none, so any value fires). It is answered by OK at once
 * (registered) or ERROR(LIMIT) (too many watches on this connection or in
 * the server), and then by exactly one NOTIFY, unsolicited, between later
 * replies (a NOTIFY is never a reply, so it never takes a request's place):
 *   NOTIFY       u32 status, u64 version, key, value
 *     status 0:         the key holds `version` > seen, value is its value
 *     status NOT_FOUND: the key was deleted (or is absent while seen > 0);
 *                       version 0, no value: watch again with seen 0
 *     status TIMEOUT:   timeout_ms passed without a change; version = seen
 * A key already past `seen` notifies right after the OK. One watch per key
 * per connection: a second WATCH of the same key replaces the first (which
 * then never notifies). Watches end with their connection. A parked watch
 * holds back nothing: the connection's other requests run meanwhile.
 *
 * HEARTBEAT stores the node's report in the server's heartbeat table, in
 * place (one entry per key, overwritten; not a key of the key-value table)
 * and notes the time. The server's owner reads the table in-process
 * (daemon/store/include/store_server.h); the value is opaque here (gptd: a cluster_msg
 * "hb" object, proto/cluster_msg.h), at most GPT_STORE_HB_VALUE_MAX bytes.
 * The owner may refuse a report (ERROR(EXISTS) with its reason: gptd, a
 * node id another live node holds); a refused report is not stored.
 */
#ifndef GPT_PROTO_STORE_H
#define GPT_PROTO_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "gpt_err.h"

#define GPT_STORE_PROTO_VERSION   4u
#define GPT_STORE_NONCE_BYTES     32
#define GPT_STORE_CHALLENGE_BYTES GPT_STORE_NONCE_BYTES
#define GPT_STORE_MAC_BYTES       32 /* HMAC-SHA256: proofs and derived keys */
#define GPT_STORE_TAG_BYTES       16 /* per-frame tag: HMAC-SHA256 cut to 128 bits */
/* Labels of the handshake's HMACs (see above); the NUL is not hashed. */
#define GPT_STORE_LABEL_CLIENT  "gptd-store-v2 client proof"
#define GPT_STORE_LABEL_SERVER  "gptd-store-v2 server proof"
#define GPT_STORE_LABEL_KEY_C2S "gptd-store-v2 key client->server"
#define GPT_STORE_LABEL_KEY_S2C "gptd-store-v2 key server->client"
#define GPT_STORE_LABEL_NODE    "gptd-store-v4 node proof"
#define GPT_STORE_LABEL_WRAP    "gptd-store-v4 node key wrap"

/* Wire limits. A key is 1..GPT_STORE_KEY_MAX bytes with no NUL byte. */
#define GPT_STORE_KEY_MAX       512u
#define GPT_STORE_NODE_MAX      63u /* HELLO's node id (a cluster node id without its NUL) */
#define GPT_STORE_VALUE_MAX     (16u << 20)
#define GPT_STORE_WAIT_KEYS_MAX 1024u
#define GPT_STORE_HB_VALUE_MAX  (64u << 10) /* one HEARTBEAT report */
#define GPT_STORE_ERRMSG_MAX    256u
#define GPT_STORE_HEADER_BYTES  5u /* u32 length + u8 type */
/* The largest body of any type: COMPARE_SET with two full values. */
#define GPT_STORE_BODY_MAX (1u + 4u + GPT_STORE_KEY_MAX + 2u * (4u + GPT_STORE_VALUE_MAX))
/* Largest whole frame, header included. */
#define GPT_STORE_FRAME_MAX (4u + GPT_STORE_BODY_MAX)
/* Largest frame before authentication (HELLO, AUTH and their answers,
 * an ERROR in place of PROOF included). */
#define GPT_STORE_HANDSHAKE_FRAME_MAX (4u + 1u + 4u + 4u + GPT_STORE_ERRMSG_MAX)
/* Most bytes one proto_store_parser_feed() call may add. */
#define GPT_STORE_FEED_MAX (256u << 10)

enum proto_store_type {
    /* handshake */
    PROTO_STORE_HELLO = 0x01,
    PROTO_STORE_CHALLENGE = 0x02,
    PROTO_STORE_AUTH = 0x03,
    PROTO_STORE_PROOF = 0x04,
    /* requests */
    PROTO_STORE_SET = 0x10,
    PROTO_STORE_GET = 0x11,
    PROTO_STORE_ADD = 0x12,
    PROTO_STORE_COMPARE_SET = 0x13,
    PROTO_STORE_WAIT = 0x14,
    PROTO_STORE_CHECK = 0x15,
    PROTO_STORE_DELETE = 0x16,
    PROTO_STORE_NUM_KEYS = 0x17,
    PROTO_STORE_APPEND = 0x18,
    PROTO_STORE_WATCH = 0x19,
    PROTO_STORE_HEARTBEAT = 0x1a,
    /* replies */
    PROTO_STORE_OK = 0x80,
    PROTO_STORE_VALUE = 0x81,
    PROTO_STORE_INT = 0x82,
    PROTO_STORE_ERROR = 0x83,
    /* server -> client, unsolicited: a WATCH fired */
    PROTO_STORE_NOTIFY = 0x84,
};

/* Status carried by an ERROR reply; stable on the wire. */
enum proto_store_status {
    PROTO_STORE_STATUS_NOT_FOUND = 1,
    PROTO_STORE_STATUS_TIMEOUT = 2,
    PROTO_STORE_STATUS_LIMIT = 3,
    PROTO_STORE_STATUS_INVALID = 4,
    PROTO_STORE_STATUS_INTERNAL = 5,
    PROTO_STORE_STATUS_EXISTS = 6, /* HEARTBEAT: the key is another's */
    PROTO_STORE_STATUS_DENIED = 7, /* the connection's node may not write this */
};

/* One decoded frame. Pointers are views into the buffer it was decoded from
 * and live as long as that buffer does (for a parser: until the next feed).
 * Fields not used by `type` are zero. */
struct proto_store_msg {
    enum proto_store_type type;
    uint32_t version;                     /* HELLO */
    uint32_t timeout_ms;                  /* WAIT, WATCH */
    uint32_t status;                      /* ERROR, NOTIFY: enum proto_store_status (0: changed) */
    uint64_t key_version;                 /* WATCH: seen; NOTIFY: the key's version */
    int64_t num;                          /* ADD delta, INT value */
    uint8_t nonce[GPT_STORE_NONCE_BYTES]; /* HELLO, CHALLENGE nonce; AUTH, PROOF mac */
    const char *key; /* not NUL-terminated; also NOTIFY's; HELLO: the node id (NULL none) */
    size_t key_len;
    const uint8_t *val; /* SET/APPEND/HEARTBEAT value, COMPARE_SET expected, VALUE, NOTIFY
                         * value, ERROR message; AUTH's node proof, PROOF's wrapped node
                         * key (GPT_STORE_MAC_BYTES, or NULL when absent) */
    size_t val_len;
    const uint8_t *val2; /* COMPARE_SET desired */
    size_t val2_len;
    uint32_t nkeys; /* WAIT, CHECK: iterate with proto_store_keys_next() */
    const uint8_t *keys_raw;
    size_t keys_raw_len;
};

/* Decodes one frame at the start of buf[0..len). Returns 1 and fills
 * *ret_msg and *ret_used (bytes of the frame) on success; 0 when the frame is
 * incomplete (then *ret_used is the total frame size if the header is in,
 * else 0); negative on a malformed frame: -GPT_E_PROTO (unknown type, bad
 * field, trailing bytes), -GPT_E_LIMIT (a length over its limit, or a frame
 * over `frame_max`). Allocates nothing. */
int proto_store_decode(const uint8_t *buf, size_t len, size_t frame_max,
                       struct proto_store_msg *ret_msg, size_t *ret_used, struct gpt_err *err);

/* Walks the keys of a decoded WAIT or CHECK: start with *cursor = 0; returns
 * 1 with the next key (not NUL-terminated), 0 after the last. */
int proto_store_keys_next(const struct proto_store_msg *m, size_t *cursor, const char **ret_key,
                          size_t *ret_len);

/* 1 if `type` is a request a client may send after the handshake. */
int proto_store_type_is_request(int type);
/* Short name of a type ("SET"), "?" if unknown. */
const char *proto_store_type_name(int type);
/* Maps an ERROR status to a negative error code (-ENOENT, -ETIMEDOUT,
 * -GPT_E_LIMIT, -EINVAL, -EEXIST, -EACCES, -EIO) and back (unknown codes map to INTERNAL). */
int proto_store_status_to_errno(uint32_t status);
uint32_t proto_store_status_from_errno(int code);

/* Checks the tag of one sealed frame: frame[0..len) is the whole frame,
 * tag its GPT_STORE_TAG_BYTES tag. Returns 0 if it is genuine, else a
 * negative error (the parser then fails, sticky). Called before the frame's
 * fields are decoded, in stream order, once per frame. */
typedef int (*proto_store_verify_fn)(void *arg, const uint8_t *frame, size_t len,
                                     const uint8_t *tag);

/* Incremental parser: owns a byte buffer the caller feeds with what it
 * reads. A caller that drains proto_store_parser_next() until it returns 0
 * after every feed holds at most one partial frame plus one feed; one that
 * holds frames back (a paused connection) gets -GPT_E_LIMIT from feed once
 * more than frame_max + tag_bytes + GPT_STORE_FEED_MAX bytes are buffered. */
struct proto_store_parser {
    uint8_t *buf;
    size_t len; /* bytes held */
    size_t off; /* bytes already returned as frames */
    size_t cap;
    size_t frame_max; /* frames over this are rejected at their header */
    int error;        /* sticky: once a frame was bad the stream is lost */
    size_t tag_bytes; /* sealed: each frame is followed by a tag (0: none) */
    proto_store_verify_fn verify;
    void *verify_arg;
};

/* frame_max: e.g. GPT_STORE_HANDSHAKE_FRAME_MAX before authentication,
 * GPT_STORE_FRAME_MAX after; may be changed between calls. */
void proto_store_parser_init(struct proto_store_parser *p, size_t frame_max);
/* Frees the buffer; safe on a zeroed or already-done parser. */
void proto_store_parser_done(struct proto_store_parser *p);
/* Appends n <= GPT_STORE_FEED_MAX bytes. Invalidates the views of messages
 * returned before. Returns 0, -ENOMEM, -GPT_E_LIMIT (n too large, or more
 * buffered than one frame and one feed) or the parser's sticky error. */
int proto_store_parser_feed(struct proto_store_parser *p, const void *data, size_t n,
                            struct gpt_err *err);
/* Returns 1 and the next whole frame (views valid until the next feed), 0
 * when more bytes are needed, or a negative error (then sticky). */
int proto_store_parser_next(struct proto_store_parser *p, struct proto_store_msg *ret_msg,
                            struct gpt_err *err);
/* Bytes fed but not yet returned as frames. */
size_t proto_store_parser_pending(const struct proto_store_parser *p);
/* From the next frame on, every frame is followed by a tag of tag_bytes
 * (1..GPT_STORE_MAC_BYTES) that verify(arg, ...) must accept before the
 * frame is decoded. Bytes already fed but not returned are read as sealed
 * too (a peer may pipeline its first sealed frames behind the handshake). */
void proto_store_parser_seal(struct proto_store_parser *p, size_t tag_bytes,
                             proto_store_verify_fn verify, void *arg);

/* Growable output buffer the encoders append whole frames to. With
 * tag_bytes set, each encoder reserves that many zero bytes after its frame
 * for the caller to fill with the frame's tag (proto_store_sealed_next()
 * walks such a buffer). */
struct proto_store_out {
    uint8_t *data;
    size_t len;
    size_t cap;
    size_t tag_bytes;
};

void proto_store_out_init(struct proto_store_out *o);
/* Frees the buffer; safe on a zeroed or already-done buffer. */
void proto_store_out_done(struct proto_store_out *o);
/* Walks frames written with tag_bytes: given buf[*off..len) starting at a
 * frame, returns 1 with *ret_frame, *ret_len (the frame) and *ret_tag (its
 * tag_bytes slot) and advances *off past the tag; 0 at the end; -GPT_E_PROTO
 * if the bytes are not whole frames with their tags. */
int proto_store_sealed_next(uint8_t *buf, size_t len, size_t tag_bytes, size_t *off,
                            uint8_t **ret_frame, size_t *ret_len, uint8_t **ret_tag);

/* Encoders: each appends one frame, or nothing on error. Keys must be
 * 1..GPT_STORE_KEY_MAX bytes without NUL (-EINVAL otherwise), values at most
 * GPT_STORE_VALUE_MAX bytes (-GPT_E_LIMIT). Return 0, -EINVAL,
 * -GPT_E_LIMIT or -ENOMEM. */
/* HELLO: node is the node id the client speaks for (NULL or "": none; at
 * most GPT_STORE_NODE_MAX bytes, -EINVAL otherwise). */
int proto_store_put_hello(struct proto_store_out *o, uint32_t version,
                          const uint8_t nonce[GPT_STORE_NONCE_BYTES], const char *node);
int proto_store_put_challenge(struct proto_store_out *o,
                              const uint8_t nonce[GPT_STORE_NONCE_BYTES]);
/* AUTH: node_mac (NULL: none) is the node proof, GPT_STORE_MAC_BYTES. */
int proto_store_put_auth(struct proto_store_out *o, const uint8_t mac[GPT_STORE_MAC_BYTES],
                         const uint8_t *node_mac);
/* PROOF: wrapped_key (NULL: none) is a newly issued node key, wrapped,
 * GPT_STORE_MAC_BYTES. */
int proto_store_put_proof(struct proto_store_out *o, const uint8_t mac[GPT_STORE_MAC_BYTES],
                          const uint8_t *wrapped_key);
/* SET, APPEND or HEARTBEAT (whose value is at most GPT_STORE_HB_VALUE_MAX). */
int proto_store_put_key_value(struct proto_store_out *o, enum proto_store_type type,
                              const char *key, size_t key_len, const void *val, size_t val_len);
/* GET or DELETE. */
int proto_store_put_key(struct proto_store_out *o, enum proto_store_type type, const char *key,
                        size_t key_len);
int proto_store_put_add(struct proto_store_out *o, const char *key, size_t key_len, int64_t delta);
int proto_store_put_compare_set(struct proto_store_out *o, const char *key, size_t key_len,
                                const void *expected, size_t expected_len, const void *desired,
                                size_t desired_len);
/* WAIT (with timeout_ms) or CHECK (timeout_ms ignored); keys are
 * NUL-terminated, 1..GPT_STORE_WAIT_KEYS_MAX of them. */
int proto_store_put_keys(struct proto_store_out *o, enum proto_store_type type, uint32_t timeout_ms,
                         const char *const *keys, size_t nkeys);
int proto_store_put_num_keys(struct proto_store_out *o);
int proto_store_put_watch(struct proto_store_out *o, const char *key, size_t key_len, uint64_t seen,
                          uint32_t timeout_ms);
/* status: 0 (changed), PROTO_STORE_STATUS_NOT_FOUND or _TIMEOUT. */
int proto_store_put_notify(struct proto_store_out *o, uint32_t status, uint64_t version,
                           const char *key, size_t key_len, const void *val, size_t val_len);
int proto_store_put_ok(struct proto_store_out *o);
int proto_store_put_value(struct proto_store_out *o, const void *val, size_t val_len);
int proto_store_put_int(struct proto_store_out *o, int64_t num);
/* The message is cut at GPT_STORE_ERRMSG_MAX bytes. */
int proto_store_put_error(struct proto_store_out *o, uint32_t status, const char *msg);

#endif
