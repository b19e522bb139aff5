/*
 * fuzz_store_frame: libFuzzer target for the store's frame decoder, its
 * incremental parser and the sealed-frame layer (proto/store.h,
 * daemon/store/include/store_auth.h). The first input byte picks the feed chunk size (bits
 * 0-5), the parser's frame limit (bit 6) and the sealed mode (bit 7); the
 * rest is the byte stream. Every decoded view is read end to end so the
 * sanitizers see any out-of-bounds view.
 *
 * Sealed mode checks two properties with a real session pair (a fixed
 * secret and nonces): the whole frames at the start of the input, sealed by
 * the client session, all come out of the server's sealed parser; and after
 * one byte of that sealed stream is flipped (a position picked from the
 * input), no frame at or after the damaged one is accepted. Either failing
 * traps. Single-threaded.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "store_auth.h"

#define FUZZ_SECRET "fuzz-store-frame-secret-0123456789"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t sink;

static void touch(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint8_t x = 0;

    for (size_t i = 0; i < n; i++)
        x ^= b[i];
    sink = x;
}

static void touch_msg(const struct proto_store_msg *m)
{
    size_t cursor = 0, len;
    const char *k;

    touch(m->key, m->key_len);
    touch(m->val, m->val_len);
    touch(m->val2, m->val2_len);
    while (proto_store_keys_next(m, &cursor, &k, &len))
        touch(k, len);
}

/* Feeds buf in chunks to a parser sealed with `rx`; returns the frames that
 * came out before the end or the first error. */
static size_t feed_sealed(struct store_auth_session *rx, const uint8_t *buf, size_t len,
                          size_t chunk)
{
    struct proto_store_parser p;
    struct proto_store_msg m;
    size_t n = 0;
    int rc = 0;

    proto_store_parser_init(&p, GPT_STORE_FRAME_MAX);
    proto_store_parser_seal(&p, GPT_STORE_TAG_BYTES, store_auth_verify, rx);
    for (size_t off = 0; off < len && rc >= 0; off += chunk) {
        size_t k = len - off < chunk ? len - off : chunk;
        if (proto_store_parser_feed(&p, buf + off, k, NULL) < 0)
            break;
        while ((rc = proto_store_parser_next(&p, &m, NULL)) == 1) {
            touch_msg(&m);
            n++;
        }
    }
    proto_store_parser_done(&p);
    return n;
}

static void sessions(struct store_auth_session *cli, struct store_auth_session *srv)
{
    uint8_t nc[GPT_STORE_NONCE_BYTES], ns[GPT_STORE_NONCE_BYTES];

    memset(nc, 0x11, sizeof(nc));
    memset(ns, 0x22, sizeof(ns));
    if (store_auth_session_init(cli, false, FUZZ_SECRET, strlen(FUZZ_SECRET), nc, ns) < 0 ||
        store_auth_session_init(srv, true, FUZZ_SECRET, strlen(FUZZ_SECRET), nc, ns) < 0)
        __builtin_trap();
}

static void fuzz_sealed(const uint8_t *data, size_t size, size_t chunk)
{
    struct store_auth_session cli, srv;
    struct proto_store_out o;
    struct proto_store_msg m;
    size_t off = 0, used, nframes = 0, flip, damaged = 0;
    size_t starts[64];

    /* The whole valid frames at the start, each followed by a tag slot. */
    proto_store_out_init(&o);
    o.tag_bytes = GPT_STORE_TAG_BYTES;
    while (nframes < 64 &&
           proto_store_decode(data + off, size - off, GPT_STORE_FRAME_MAX, &m, &used, NULL) == 1) {
        uint8_t *grown = realloc(o.data, o.len + used + GPT_STORE_TAG_BYTES);
        if (!grown)
            break;
        o.data = grown;
        starts[nframes++] = o.len;
        memcpy(o.data + o.len, data + off, used);
        memset(o.data + o.len + used, 0, GPT_STORE_TAG_BYTES);
        o.len += used + GPT_STORE_TAG_BYTES;
        off += used;
    }
    if (nframes == 0)
        goto out;
    sessions(&cli, &srv);
    if (store_auth_seal(&cli, &o, 0) < 0 || feed_sealed(&srv, o.data, o.len, chunk) != nframes)
        __builtin_trap();
    store_auth_session_done(&cli);
    store_auth_session_done(&srv);

    /* One flipped byte: nothing from the damaged frame on is accepted. */
    flip = (size_t)data[size - 1] * 257u % o.len;
    while (damaged + 1 < nframes && starts[damaged + 1] <= flip)
        damaged++;
    o.data[flip] ^= (uint8_t)(data[0] | 1);
    sessions(&cli, &srv);
    if (feed_sealed(&srv, o.data, o.len, chunk) > damaged)
        __builtin_trap();
    store_auth_session_done(&cli);
    store_auth_session_done(&srv);
out:
    proto_store_out_done(&o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct proto_store_parser p;
    struct proto_store_msg m;
    size_t chunk, used, off;
    int sealed, rc;

    if (size < 1)
        return 0;
    chunk = (size_t)(data[0] & 0x3f) + 1;
    sealed = data[0] & 0x80;
    proto_store_parser_init(&p,
                            (data[0] & 0x40) ? GPT_STORE_HANDSHAKE_FRAME_MAX : GPT_STORE_FRAME_MAX);
    data++;
    size--;
    if (sealed && size > 0) {
        fuzz_sealed(data, size, chunk);
        proto_store_parser_done(&p);
        return 0;
    }

    /* Stateless decoder over the whole input. */
    for (off = 0; off < size;) {
        rc = proto_store_decode(data + off, size - off, GPT_STORE_FRAME_MAX, &m, &used, NULL);
        if (rc != 1)
            break;
        touch_msg(&m);
        off += used;
    }

    /* Parser fed in chunks, drained after every feed. */
    for (off = 0; off < size; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        if (proto_store_parser_feed(&p, data + off, n, NULL) < 0)
            break;
        while ((rc = proto_store_parser_next(&p, &m, NULL)) == 1)
            touch_msg(&m);
        if (rc < 0)
            break;
    }
    proto_store_parser_done(&p);
    return 0;
}
