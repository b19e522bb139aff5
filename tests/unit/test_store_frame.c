/*
 * test_store_frame: the store's frame codec (proto/store.h). Round trips of
 * every frame type, every truncation point of valid frames, malformed and
 * oversized frames rejected at their header or field, and the incremental
 * parser's buffering and sticky errors; and the sealed-frame layer
 * (store_auth.h): proofs, per-direction session keys, per-frame tags with
 * sequence numbers, and every way a forged, injected, replayed, reordered
 * or cross-session frame is refused. Single-threaded, no I/O.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store.h"
#include "store_auth.h"

static const char *const two_keys[] = {"alpha", "rank/1/addr"};

/* One valid frame of every type, appended to o; returns how many. */
static int encode_all(struct proto_store_out *o)
{
    uint8_t nonce[GPT_STORE_CHALLENGE_BYTES];
    int n = 0;

    for (size_t i = 0; i < sizeof(nonce); i++)
        nonce[i] = (uint8_t)(i * 7 + 1);
    assert_int_equal(proto_store_put_hello(o, GPT_STORE_PROTO_VERSION, nonce, NULL), 0), n++;
    assert_int_equal(proto_store_put_hello(o, GPT_STORE_PROTO_VERSION, nonce, "node-7"), 0), n++;
    assert_int_equal(proto_store_put_challenge(o, nonce), 0), n++;
    assert_int_equal(proto_store_put_auth(o, nonce, NULL), 0), n++;
    assert_int_equal(proto_store_put_proof(o, nonce, NULL), 0), n++;
    assert_int_equal(proto_store_put_auth(o, nonce, nonce), 0), n++;
    assert_int_equal(proto_store_put_proof(o, nonce, nonce), 0), n++;
    assert_int_equal(proto_store_put_key_value(o, PROTO_STORE_SET, "k", 1, "value", 5), 0), n++;
    assert_int_equal(proto_store_put_key(o, PROTO_STORE_GET, "key", 3), 0), n++;
    assert_int_equal(proto_store_put_add(o, "ctr", 3, -42), 0), n++;
    assert_int_equal(proto_store_put_compare_set(o, "cas", 3, "old", 3, "newer", 5), 0), n++;
    assert_int_equal(proto_store_put_keys(o, PROTO_STORE_WAIT, 1500, two_keys, 2), 0), n++;
    assert_int_equal(proto_store_put_keys(o, PROTO_STORE_CHECK, 0, two_keys, 2), 0), n++;
    assert_int_equal(proto_store_put_key(o, PROTO_STORE_DELETE, "gone", 4), 0), n++;
    assert_int_equal(proto_store_put_num_keys(o), 0), n++;
    assert_int_equal(proto_store_put_key_value(o, PROTO_STORE_APPEND, "log", 3, "", 0), 0), n++;
    assert_int_equal(proto_store_put_ok(o), 0), n++;
    assert_int_equal(proto_store_put_value(o, "\0bin\xff", 5), 0), n++;
    assert_int_equal(proto_store_put_int(o, INT64_MIN), 0), n++;
    assert_int_equal(proto_store_put_error(o, PROTO_STORE_STATUS_TIMEOUT, "late"), 0), n++;
    assert_int_equal(proto_store_put_watch(o, "rdzv/cur", 8, UINT64_MAX - 1, 30000), 0), n++;
    assert_int_equal(proto_store_put_key_value(o, PROTO_STORE_HEARTBEAT, "node-1", 6, "{}", 2), 0),
        n++;
    assert_int_equal(proto_store_put_notify(o, 0, 77, "rdzv/cur", 8, "v7", 2), 0), n++;
    return n;
}

static void check_keys(const struct proto_store_msg *m)
{
    size_t cursor = 0, len;
    const char *k;

    assert_int_equal(m->nkeys, 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(proto_store_keys_next(m, &cursor, &k, &len), 1);
        assert_int_equal(len, strlen(two_keys[i]));
        assert_memory_equal(k, two_keys[i], len);
    }
    assert_int_equal(proto_store_keys_next(m, &cursor, &k, &len), 0);
}

static void test_round_trip(void **state)
{
    struct proto_store_out o;
    struct proto_store_msg m;
    size_t off = 0, used;
    int n, i;

    (void)state;
    proto_store_out_init(&o);
    n = encode_all(&o);
    for (i = 0; i < n; i++) {
        assert_int_equal(
            proto_store_decode(o.data + off, o.len - off, GPT_STORE_FRAME_MAX, &m, &used, NULL), 1);
        off += used;
        switch (m.type) {
        case PROTO_STORE_HELLO:
            assert_int_equal(m.version, GPT_STORE_PROTO_VERSION);
            assert_int_equal(m.nonce[0], 1);
            assert_int_equal(m.nonce[31], (uint8_t)(31 * 7 + 1));
            break;
        case PROTO_STORE_CHALLENGE:
        case PROTO_STORE_AUTH:
        case PROTO_STORE_PROOF:
            assert_int_equal(m.nonce[0], 1);
            assert_int_equal(m.nonce[31], (uint8_t)(31 * 7 + 1));
            break;
        case PROTO_STORE_SET:
            assert_int_equal(m.key_len, 1);
            assert_memory_equal(m.key, "k", 1);
            assert_int_equal(m.val_len, 5);
            assert_memory_equal(m.val, "value", 5);
            break;
        case PROTO_STORE_GET:
            assert_memory_equal(m.key, "key", 3);
            break;
        case PROTO_STORE_ADD:
            assert_memory_equal(m.key, "ctr", 3);
            assert_int_equal(m.num, -42);
            break;
        case PROTO_STORE_COMPARE_SET:
            assert_memory_equal(m.val, "old", 3);
            assert_int_equal(m.val2_len, 5);
            assert_memory_equal(m.val2, "newer", 5);
            break;
        case PROTO_STORE_WAIT:
            assert_int_equal(m.timeout_ms, 1500);
            check_keys(&m);
            break;
        case PROTO_STORE_CHECK:
            check_keys(&m);
            break;
        case PROTO_STORE_DELETE:
            assert_int_equal(m.key_len, 4);
            break;
        case PROTO_STORE_APPEND:
            assert_int_equal(m.val_len, 0);
            break;
        case PROTO_STORE_VALUE:
            assert_int_equal(m.val_len, 5);
            assert_memory_equal(m.val, "\0bin\xff", 5);
            break;
        case PROTO_STORE_INT:
            assert_true(m.num == INT64_MIN);
            break;
        case PROTO_STORE_ERROR:
            assert_int_equal(m.status, PROTO_STORE_STATUS_TIMEOUT);
            assert_int_equal(m.val_len, 4);
            assert_int_equal(proto_store_status_to_errno(m.status), -ETIMEDOUT);
            break;
        case PROTO_STORE_WATCH:
            assert_memory_equal(m.key, "rdzv/cur", 8);
            assert_true(m.key_version == UINT64_MAX - 1);
            assert_int_equal(m.timeout_ms, 30000);
            assert_true(proto_store_type_is_request(m.type));
            break;
        case PROTO_STORE_HEARTBEAT:
            assert_memory_equal(m.key, "node-1", 6);
            assert_int_equal(m.val_len, 2);
            assert_true(proto_store_type_is_request(m.type));
            break;
        case PROTO_STORE_NOTIFY:
            assert_int_equal(m.status, 0);
            assert_true(m.key_version == 77);
            assert_memory_equal(m.key, "rdzv/cur", 8);
            assert_memory_equal(m.val, "v7", 2);
            assert_false(proto_store_type_is_request(m.type));
            break;
        case PROTO_STORE_NUM_KEYS:
        case PROTO_STORE_OK:
            break;
        }
        assert_string_not_equal(proto_store_type_name(m.type), "?");
    }
    assert_int_equal(off, o.len);
    proto_store_out_done(&o);
}

/* The new frames' limits: a heartbeat report over GPT_STORE_HB_VALUE_MAX
 * and a NOTIFY with a status it cannot carry are refused both ways. */
static void test_watch_heartbeat_limits(void **state)
{
    struct proto_store_out o;
    struct proto_store_msg m;
    size_t used;
    char *big = calloc(1, GPT_STORE_HB_VALUE_MAX + 64);
    struct gpt_err err;

    (void)state;
    proto_store_out_init(&o);
    assert_int_equal(proto_store_put_key_value(&o, PROTO_STORE_HEARTBEAT, "n", 1, big,
                                               GPT_STORE_HB_VALUE_MAX + 1),
                     -GPT_E_LIMIT);
    assert_int_equal(proto_store_put_notify(&o, PROTO_STORE_STATUS_LIMIT, 1, "k", 1, NULL, 0),
                     -EINVAL);
    assert_int_equal(proto_store_put_watch(&o, "", 0, 0, 0), -EINVAL);
    assert_int_equal(o.len, 0);
    /* A hand-made HEARTBEAT whose report is one byte too long is refused
     * at its value's length, before the bytes are looked at. */
    assert_int_equal(proto_store_put_key_value(&o, PROTO_STORE_HEARTBEAT, "n", 1, big,
                                               GPT_STORE_HB_VALUE_MAX - 1),
                     0);
    assert_int_equal(proto_store_decode(o.data, o.len, GPT_STORE_FRAME_MAX, &m, &used, &err), 1);
    uint32_t over = GPT_STORE_HB_VALUE_MAX + 1;
    o.data[0] += 2; /* body length + 2 (bytes the decoder never reaches) */
    memcpy(o.data + 10, &over, 4);
    memset(big, 0, 16);
    memcpy(big, o.data, 14); /* header, key, the length; the rest zeros */
    assert_int_equal(
        proto_store_decode((const uint8_t *)big, o.len + 2, GPT_STORE_FRAME_MAX, &m, &used, &err),
        -GPT_E_LIMIT);
    o.len = 0;
    /* A NOTIFY whose status is not one of the three is malformed. */
    assert_int_equal(proto_store_put_notify(&o, PROTO_STORE_STATUS_TIMEOUT, 5, "k", 1, NULL, 0), 0);
    o.data[5] = PROTO_STORE_STATUS_LIMIT;
    assert_int_equal(proto_store_decode(o.data, o.len, GPT_STORE_FRAME_MAX, &m, &used, &err),
                     -GPT_E_PROTO);
    proto_store_out_done(&o);
    free(big);
}

/* Every proper prefix of every valid frame is "need more", never a decode or
 * an error, and once the header is in the total size is reported. */
static void test_every_truncation_needs_more(void **state)
{
    struct proto_store_out o;
    struct proto_store_msg m;
    size_t off = 0, used, full, cut;
    int n, i;

    (void)state;
    proto_store_out_init(&o);
    n = encode_all(&o);
    for (i = 0; i < n; i++) {
        assert_int_equal(
            proto_store_decode(o.data + off, o.len - off, GPT_STORE_FRAME_MAX, &m, &full, NULL), 1);
        for (cut = 0; cut < full; cut++) {
            /* A copy of exactly `cut` bytes, so ASan sees any over-read. */
            uint8_t *copy = malloc(cut ? cut : 1);
            memcpy(copy, o.data + off, cut);
            assert_int_equal(proto_store_decode(copy, cut, GPT_STORE_FRAME_MAX, &m, &used, NULL),
                             0);
            assert_int_equal(used, cut >= GPT_STORE_HEADER_BYTES ? full : 0);
            free(copy);
        }
        off += full;
    }
    proto_store_out_done(&o);
}

/* The same frames fed one byte at a time through the parser. */
static void test_parser_byte_by_byte(void **state)
{
    struct proto_store_parser p;
    struct proto_store_out o;
    struct proto_store_msg m;
    int n, got = 0, rc;

    (void)state;
    proto_store_out_init(&o);
    n = encode_all(&o);
    proto_store_parser_init(&p, GPT_STORE_FRAME_MAX);
    for (size_t i = 0; i < o.len; i++) {
        assert_int_equal(proto_store_parser_feed(&p, o.data + i, 1, NULL), 0);
        while ((rc = proto_store_parser_next(&p, &m, NULL)) == 1)
            got++;
        assert_int_equal(rc, 0);
    }
    assert_int_equal(got, n);
    assert_int_equal(proto_store_parser_pending(&p), 0);

    /* And all at once: every frame comes out of one feed. */
    got = 0;
    assert_int_equal(proto_store_parser_feed(&p, o.data, o.len, NULL), 0);
    while ((rc = proto_store_parser_next(&p, &m, NULL)) == 1)
        got++;
    assert_int_equal(rc, 0);
    assert_int_equal(got, n);
    proto_store_parser_done(&p);
    proto_store_out_done(&o);
}

static void le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static int decode_raw(const uint8_t *buf, size_t len, size_t frame_max)
{
    struct proto_store_msg m;
    struct gpt_err err;
    size_t used;

    return proto_store_decode(buf, len, frame_max, &m, &used, &err);
}

/* HELLO's node id: absent, or 1..GPT_STORE_NODE_MAX bytes without NUL,
 * decoded as the message's key. */
static void test_hello_node(void **state)
{
    uint8_t nonce[GPT_STORE_NONCE_BYTES] = {9};
    char id[GPT_STORE_NODE_MAX + 2];
    struct proto_store_out o;
    struct proto_store_msg m;
    struct gpt_err err;
    size_t used;

    (void)state;
    proto_store_out_init(&o);
    memset(id, 'n', sizeof(id));
    id[GPT_STORE_NODE_MAX] = '\0';
    assert_int_equal(proto_store_put_hello(&o, GPT_STORE_PROTO_VERSION, nonce, id), 0);
    assert_int_equal(
        proto_store_decode(o.data, o.len, GPT_STORE_HANDSHAKE_FRAME_MAX, &m, &used, &err), 1);
    assert_int_equal(m.key_len, GPT_STORE_NODE_MAX);
    assert_memory_equal(m.key, id, GPT_STORE_NODE_MAX);
    id[GPT_STORE_NODE_MAX] = 'n';
    id[GPT_STORE_NODE_MAX + 1] = '\0';
    assert_int_equal(proto_store_put_hello(&o, GPT_STORE_PROTO_VERSION, nonce, id), -EINVAL);
    proto_store_out_done(&o);
    proto_store_out_init(&o);
    assert_int_equal(proto_store_put_hello(&o, GPT_STORE_PROTO_VERSION, nonce, NULL), 0);
    assert_int_equal(
        proto_store_decode(o.data, o.len, GPT_STORE_HANDSHAKE_FRAME_MAX, &m, &used, &err), 1);
    assert_null(m.key);
    /* A node id of zero bytes, or with a NUL, is malformed. */
    proto_store_out_done(&o);
    proto_store_out_init(&o);
    assert_int_equal(proto_store_put_hello(&o, GPT_STORE_PROTO_VERSION, nonce, "ab"), 0);
    o.data[o.len - 1] = '\0';
    assert_int_equal(
        proto_store_decode(o.data, o.len, GPT_STORE_HANDSHAKE_FRAME_MAX, &m, &used, &err),
        -GPT_E_PROTO);
    proto_store_out_done(&o);
}

/* AUTH may carry a node proof and PROOF a wrapped node key: exactly one
 * more MAC, seen as val; any other tail is malformed. */
static void test_auth_node_mac(void **state)
{
    uint8_t mac[GPT_STORE_MAC_BYTES], mac2[GPT_STORE_MAC_BYTES];
    struct proto_store_out o;
    struct proto_store_msg m;
    struct gpt_err err;
    size_t used;

    (void)state;
    memset(mac, 1, sizeof(mac));
    memset(mac2, 2, sizeof(mac2));
    for (int type = PROTO_STORE_AUTH; type <= PROTO_STORE_PROOF; type++) {
        proto_store_out_init(&o);
        assert_int_equal(type == PROTO_STORE_AUTH ? proto_store_put_auth(&o, mac, mac2)
                                                  : proto_store_put_proof(&o, mac, mac2),
                         0);
        assert_int_equal(
            proto_store_decode(o.data, o.len, GPT_STORE_HANDSHAKE_FRAME_MAX, &m, &used, &err), 1);
        assert_int_equal(m.type, type);
        assert_memory_equal(m.nonce, mac, sizeof(mac));
        assert_int_equal(m.val_len, GPT_STORE_MAC_BYTES);
        assert_memory_equal(m.val, mac2, sizeof(mac2));
        /* A tail one byte short of a MAC: malformed, never read as one. */
        o.data[0]--;
        assert_int_equal(
            proto_store_decode(o.data, o.len - 1, GPT_STORE_HANDSHAKE_FRAME_MAX, &m, &used, &err),
            -GPT_E_PROTO);
        proto_store_out_done(&o);
        proto_store_out_init(&o);
        assert_int_equal(type == PROTO_STORE_AUTH ? proto_store_put_auth(&o, mac, NULL)
                                                  : proto_store_put_proof(&o, mac, NULL),
                         0);
        assert_int_equal(
            proto_store_decode(o.data, o.len, GPT_STORE_HANDSHAKE_FRAME_MAX, &m, &used, &err), 1);
        assert_null(m.val);
        proto_store_out_done(&o);
    }
}

/* Headers that claim too much are refused from the 5 header bytes alone,
 * before the body arrives (so nothing is buffered or allocated for it). */
static void test_oversized_headers(void **state)
{
    uint8_t h[GPT_STORE_HEADER_BYTES];
    const int types[] = {
        PROTO_STORE_HELLO, PROTO_STORE_CHALLENGE, PROTO_STORE_AUTH,        PROTO_STORE_SET,
        PROTO_STORE_GET,   PROTO_STORE_ADD,       PROTO_STORE_COMPARE_SET, PROTO_STORE_WAIT,
        PROTO_STORE_CHECK, PROTO_STORE_DELETE,    PROTO_STORE_NUM_KEYS,    PROTO_STORE_APPEND,
        PROTO_STORE_OK,    PROTO_STORE_VALUE,     PROTO_STORE_INT,         PROTO_STORE_ERROR};

    (void)state;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        h[4] = (uint8_t)types[i];
        le32(h, UINT32_MAX);
        assert_int_equal(decode_raw(h, sizeof(h), GPT_STORE_FRAME_MAX), -GPT_E_LIMIT);
        le32(h, GPT_STORE_BODY_MAX + 1);
        assert_int_equal(decode_raw(h, sizeof(h), GPT_STORE_FRAME_MAX), -GPT_E_LIMIT);
    }
    /* Fixed-size frames may not claim a byte more than their size. */
    h[4] = PROTO_STORE_HELLO;
    le32(h, 1 + 4 + GPT_STORE_NONCE_BYTES + 4 + GPT_STORE_NODE_MAX + 1);
    assert_int_equal(decode_raw(h, sizeof(h), GPT_STORE_FRAME_MAX), -GPT_E_LIMIT);
    h[4] = PROTO_STORE_INT;
    le32(h, 10);
    assert_int_equal(decode_raw(h, sizeof(h), GPT_STORE_FRAME_MAX), -GPT_E_LIMIT);
    /* Before authentication a SET of modest size is already too large. */
    h[4] = PROTO_STORE_SET;
    le32(h, GPT_STORE_HANDSHAKE_FRAME_MAX);
    assert_int_equal(decode_raw(h, sizeof(h), GPT_STORE_HANDSHAKE_FRAME_MAX), -GPT_E_LIMIT);
    assert_int_equal(decode_raw(h, sizeof(h), GPT_STORE_FRAME_MAX), 0);
    /* Unknown type and empty body. */
    h[4] = 0x7f;
    le32(h, 1);
    assert_int_equal(decode_raw(h, sizeof(h), GPT_STORE_FRAME_MAX), -GPT_E_PROTO);
    h[4] = PROTO_STORE_OK;
    le32(h, 0);
    assert_int_equal(decode_raw(h, sizeof(h), GPT_STORE_FRAME_MAX), -GPT_E_PROTO);
}

/* Builds a frame of `type` from raw field bytes. */
static size_t frame(uint8_t *out, int type, const uint8_t *fields, size_t n)
{
    le32(out, (uint32_t)(n + 1));
    out[4] = (uint8_t)type;
    memcpy(out + 5, fields, n);
    return n + 5;
}

static void test_malformed_fields(void **state)
{
    uint8_t f[128], buf[192];
    size_t n;

    (void)state;
    /* GET whose key length is over GPT_STORE_KEY_MAX. */
    le32(f, GPT_STORE_KEY_MAX + 1);
    n = frame(buf, PROTO_STORE_GET, f, 4);
    assert_int_equal(decode_raw(buf, n, GPT_STORE_FRAME_MAX), -GPT_E_LIMIT);
    /* GET whose key length overruns the frame. */
    le32(f, 10);
    memcpy(f + 4, "abc", 3);
    n = frame(buf, PROTO_STORE_GET, f, 7);
    assert_int_equal(decode_raw(buf, n, GPT_STORE_FRAME_MAX), -GPT_E_PROTO);
    /* Empty key, key with a NUL. */
    le32(f, 0);
    n = frame(buf, PROTO_STORE_GET, f, 4);
    assert_int_equal(decode_raw(buf, n, GPT_STORE_FRAME_MAX), -GPT_E_PROTO);
    le32(f, 3);
    memcpy(f + 4, "a\0b", 3);
    n = frame(buf, PROTO_STORE_GET, f, 7);
    assert_int_equal(decode_raw(buf, n, GPT_STORE_FRAME_MAX), -GPT_E_PROTO);
    /* SET whose value length is over GPT_STORE_VALUE_MAX. */
    le32(f, 1);
    f[4] = 'k';
    le32(f + 5, GPT_STORE_VALUE_MAX + 1);
    n = frame(buf, PROTO_STORE_SET, f, 9);
    assert_int_equal(decode_raw(buf, n, GPT_STORE_FRAME_MAX), -GPT_E_LIMIT);
    /* WAIT with zero keys and with too many. */
    le32(f, 100);
    le32(f + 4, 0);
    n = frame(buf, PROTO_STORE_WAIT, f, 8);
    assert_int_equal(decode_raw(buf, n, GPT_STORE_FRAME_MAX), -GPT_E_PROTO);
    le32(f + 4, GPT_STORE_WAIT_KEYS_MAX + 1);
    n = frame(buf, PROTO_STORE_WAIT, f, 8);
    assert_int_equal(decode_raw(buf, n, GPT_STORE_FRAME_MAX), -GPT_E_LIMIT);
    /* CHECK claiming more keys than the frame holds. */
    le32(f, 3);
    le32(f + 4, 1);
    f[8] = 'a';
    n = frame(buf, PROTO_STORE_CHECK, f, 9);
    assert_int_equal(decode_raw(buf, n, GPT_STORE_FRAME_MAX), -GPT_E_PROTO);
    /* A version-1 HELLO (no nonce) is short; one byte past a HELLO without
     * a node id is a truncated one; one byte past the longest node id is
     * over its type's limit. */
    n = frame(buf, PROTO_STORE_HELLO, (const uint8_t *)"\1\0\0\0", 4);
    assert_int_equal(decode_raw(buf, n, GPT_STORE_FRAME_MAX), -GPT_E_PROTO);
    memset(f, 0, sizeof(f));
    n = frame(buf, PROTO_STORE_HELLO, f, 4 + GPT_STORE_NONCE_BYTES + 1);
    assert_int_equal(decode_raw(buf, n, GPT_STORE_FRAME_MAX), -GPT_E_PROTO);
    n = frame(buf, PROTO_STORE_HELLO, f, 4 + GPT_STORE_NONCE_BYTES + 4 + GPT_STORE_NODE_MAX + 1);
    assert_int_equal(decode_raw(buf, n, GPT_STORE_FRAME_MAX), -GPT_E_LIMIT);
    le32(f, 1);
    f[4] = 'k';
    f[5] = 'x';
    n = frame(buf, PROTO_STORE_GET, f, 6);
    assert_int_equal(decode_raw(buf, n, GPT_STORE_FRAME_MAX), -GPT_E_PROTO);
    /* ERROR whose message is over GPT_STORE_ERRMSG_MAX. */
    le32(f, 1);
    le32(f + 4, GPT_STORE_ERRMSG_MAX + 1);
    n = frame(buf, PROTO_STORE_ERROR, f, 8);
    assert_int_equal(decode_raw(buf, n, GPT_STORE_FRAME_MAX), -GPT_E_LIMIT);
}

/* The parser refuses a huge frame at its header and keeps its buffer small;
 * the error is sticky. */
static void test_parser_rejects_without_buffering(void **state)
{
    struct proto_store_parser p;
    struct proto_store_msg m;
    uint8_t h[GPT_STORE_HEADER_BYTES];
    uint8_t junk[1024] = {0};
    struct gpt_err err;

    (void)state;
    proto_store_parser_init(&p, GPT_STORE_FRAME_MAX);
    le32(h, GPT_STORE_BODY_MAX);
    h[4] = PROTO_STORE_SET; /* SET's own limit is below the compare-set maximum */
    assert_int_equal(proto_store_parser_feed(&p, h, sizeof(h), &err), 0);
    assert_int_equal(proto_store_parser_next(&p, &m, &err), -GPT_E_LIMIT);
    assert_true(p.cap <= 4096);
    assert_int_equal(proto_store_parser_feed(&p, junk, sizeof(junk), &err), -GPT_E_LIMIT);
    assert_int_equal(proto_store_parser_next(&p, &m, &err), -GPT_E_LIMIT);
    proto_store_parser_done(&p);

    /* Before authentication the buffer is bounded by the handshake limit. */
    proto_store_parser_init(&p, GPT_STORE_HANDSHAKE_FRAME_MAX);
    le32(h, 1000);
    h[4] = PROTO_STORE_SET;
    assert_int_equal(proto_store_parser_feed(&p, h, sizeof(h), &err), 0);
    assert_int_equal(proto_store_parser_next(&p, &m, &err), -GPT_E_LIMIT);
    proto_store_parser_done(&p);

    /* A single feed over GPT_STORE_FEED_MAX is refused outright. */
    proto_store_parser_init(&p, GPT_STORE_FRAME_MAX);
    assert_int_equal(proto_store_parser_feed(&p, junk, (size_t)GPT_STORE_FEED_MAX + 1, &err),
                     -GPT_E_LIMIT);
    proto_store_parser_done(&p);
    proto_store_parser_done(&p); /* twice is harmless */
}

static void test_encoder_limits(void **state)
{
    struct proto_store_out o;
    char key[GPT_STORE_KEY_MAX + 2];
    const char *keys[1] = {key};
    static const char *many[GPT_STORE_WAIT_KEYS_MAX + 1];

    (void)state;
    proto_store_out_init(&o);
    memset(key, 'k', sizeof(key));
    key[GPT_STORE_KEY_MAX + 1] = 0;
    assert_int_equal(proto_store_put_key(&o, PROTO_STORE_GET, key, GPT_STORE_KEY_MAX + 1), -EINVAL);
    assert_int_equal(proto_store_put_key(&o, PROTO_STORE_GET, key, 0), -EINVAL);
    assert_int_equal(proto_store_put_key(&o, PROTO_STORE_SET, key, 1), -EINVAL);
    assert_int_equal(proto_store_put_keys(&o, PROTO_STORE_WAIT, 0, keys, 1), -EINVAL);
    key[GPT_STORE_KEY_MAX] = 0;
    assert_int_equal(proto_store_put_keys(&o, PROTO_STORE_WAIT, 0, keys, 1), 0);
    /* The value is never read when its length is over the limit. */
    assert_int_equal(
        proto_store_put_key_value(&o, PROTO_STORE_SET, "k", 1, "", GPT_STORE_VALUE_MAX + 1),
        -GPT_E_LIMIT);
    assert_int_equal(proto_store_put_value(&o, "", GPT_STORE_VALUE_MAX + 1), -GPT_E_LIMIT);
    for (size_t i = 0; i <= GPT_STORE_WAIT_KEYS_MAX; i++)
        many[i] = "x";
    assert_int_equal(
        proto_store_put_keys(&o, PROTO_STORE_CHECK, 0, many, GPT_STORE_WAIT_KEYS_MAX + 1),
        -GPT_E_LIMIT);
    assert_int_equal(proto_store_put_keys(&o, PROTO_STORE_CHECK, 0, many, 0), -EINVAL);
    assert_int_equal(proto_store_put_keys(&o, PROTO_STORE_CHECK, 0, many, GPT_STORE_WAIT_KEYS_MAX),
                     0);
    proto_store_out_done(&o);
}

/* A maximal frame (COMPARE_SET with two full values) round-trips. */
static void test_max_frame(void **state)
{
    struct proto_store_out o;
    struct proto_store_msg m;
    char key[GPT_STORE_KEY_MAX + 1];
    uint8_t *v = calloc(1, GPT_STORE_VALUE_MAX);
    size_t used;

    (void)state;
    assert_non_null(v);
    memset(key, 'q', GPT_STORE_KEY_MAX);
    key[GPT_STORE_KEY_MAX] = 0;
    proto_store_out_init(&o);
    assert_int_equal(proto_store_put_compare_set(&o, key, GPT_STORE_KEY_MAX, v, GPT_STORE_VALUE_MAX,
                                                 v, GPT_STORE_VALUE_MAX),
                     0);
    assert_int_equal(o.len, GPT_STORE_FRAME_MAX);
    assert_int_equal(proto_store_decode(o.data, o.len, GPT_STORE_FRAME_MAX, &m, &used, NULL), 1);
    assert_int_equal(m.val2_len, GPT_STORE_VALUE_MAX);
    assert_int_equal(proto_store_decode(o.data, o.len, GPT_STORE_FRAME_MAX - 1, &m, &used, NULL),
                     -GPT_E_LIMIT);
    proto_store_out_done(&o);
    free(v);
}

/* ---- sealed frames (store_auth.h) ---- */

#define SEAL_SECRET "sealed-frame-secret-0123456789"

/* A client and a server session over one handshake's nonces. */
struct pair {
    struct store_auth_session cli, srv;
    uint8_t nc[GPT_STORE_NONCE_BYTES], ns[GPT_STORE_NONCE_BYTES];
};

static void pair_init(struct pair *p, uint8_t seed, const char *cli_secret)
{
    for (size_t i = 0; i < GPT_STORE_NONCE_BYTES; i++) {
        p->nc[i] = (uint8_t)(seed + i);
        p->ns[i] = (uint8_t)(seed * 3 + i * 5);
    }
    assert_int_equal(
        store_auth_session_init(&p->cli, false, cli_secret, strlen(cli_secret), p->nc, p->ns), 0);
    assert_int_equal(
        store_auth_session_init(&p->srv, true, SEAL_SECRET, strlen(SEAL_SECRET), p->nc, p->ns), 0);
}

static void pair_done(struct pair *p)
{
    store_auth_session_done(&p->cli);
    store_auth_session_done(&p->srv);
}

/* Requests as a client writes them: SET a=1, ADD ctr 5, NUM_KEYS, sealed. */
static void sealed_requests(struct store_auth_session *tx, struct proto_store_out *o)
{
    proto_store_out_init(o);
    o->tag_bytes = GPT_STORE_TAG_BYTES;
    assert_int_equal(proto_store_put_key_value(o, PROTO_STORE_SET, "a", 1, "1", 1), 0);
    assert_int_equal(proto_store_put_add(o, "ctr", 3, 5), 0);
    assert_int_equal(proto_store_put_num_keys(o), 0);
    assert_int_equal(store_auth_seal(tx, o, 0), 0);
}

/* Feeds buf to a fresh parser sealed with `rx`; returns how many frames came
 * out before the first error (in *ret_rc) or the end. */
static int feed_sealed(struct store_auth_session *rx, const uint8_t *buf, size_t len, int *ret_rc)
{
    struct proto_store_parser p;
    struct proto_store_msg m;
    struct gpt_err err;
    int n = 0, rc;

    proto_store_parser_init(&p, GPT_STORE_FRAME_MAX);
    proto_store_parser_seal(&p, GPT_STORE_TAG_BYTES, store_auth_verify, rx);
    assert_int_equal(proto_store_parser_feed(&p, buf, len, &err), 0);
    while ((rc = proto_store_parser_next(&p, &m, &err)) == 1)
        n++;
    if (rc < 0) {
        assert_non_null(strstr(err.msg, "bad tag"));
        /* Sticky: the stream is lost. */
        assert_int_equal(proto_store_parser_next(&p, &m, NULL), rc);
    }
    *ret_rc = rc;
    proto_store_parser_done(&p);
    return n;
}

/* Proofs: no key shorter than STORE_SECRET_MIN (the empty key included) is
 * ever used, and the four labels give four unrelated values. */
static void test_proof_and_keys(void **state)
{
    uint8_t nc[GPT_STORE_NONCE_BYTES] = {1}, ns[GPT_STORE_NONCE_BYTES] = {2};
    uint8_t a[GPT_STORE_MAC_BYTES], b[GPT_STORE_MAC_BYTES], c[GPT_STORE_MAC_BYTES];
    struct store_auth_session sess;

    (void)state;
    assert_int_equal(store_auth_proof(NULL, 0, GPT_STORE_LABEL_CLIENT, nc, ns, NULL, a),
                     -GPT_E_AUTH);
    assert_int_equal(store_auth_proof("", 0, GPT_STORE_LABEL_CLIENT, nc, ns, NULL, a), -GPT_E_AUTH);
    assert_int_equal(
        store_auth_proof("0123456789abcde", 15, GPT_STORE_LABEL_CLIENT, nc, ns, NULL, a),
        -GPT_E_AUTH);
    assert_int_equal(store_auth_session_init(&sess, true, "short", 5, nc, ns), -GPT_E_AUTH);
    assert_false(store_auth_session_ready(&sess));
    store_auth_session_done(&sess);
    assert_int_equal(
        store_auth_proof("0123456789abcdef", 16, GPT_STORE_LABEL_CLIENT, nc, ns, NULL, a), 0);
    assert_int_equal(
        store_auth_proof("0123456789abcdef", 16, GPT_STORE_LABEL_SERVER, nc, ns, NULL, b), 0);
    assert_memory_not_equal(a, b, sizeof(a)); /* a client proof is no server proof */
    /* Swapping the nonces (a reflected handshake) changes the proof. */
    assert_int_equal(
        store_auth_proof("0123456789abcdef", 16, GPT_STORE_LABEL_CLIENT, ns, nc, NULL, c), 0);
    assert_memory_not_equal(a, c, sizeof(a));
    /* Deterministic: both sides compute the same value. */
    assert_int_equal(
        store_auth_proof("0123456789abcdef", 16, GPT_STORE_LABEL_CLIENT, nc, ns, NULL, c), 0);
    assert_memory_equal(a, c, sizeof(a));
    /* The node id of the HELLO is proved too: another id, another proof. */
    assert_int_equal(
        store_auth_proof("0123456789abcdef", 16, GPT_STORE_LABEL_CLIENT, nc, ns, "n1", b), 0);
    assert_memory_not_equal(a, b, sizeof(a));
    assert_int_equal(
        store_auth_proof("0123456789abcdef", 16, GPT_STORE_LABEL_CLIENT, nc, ns, "n2", c), 0);
    assert_memory_not_equal(b, c, sizeof(b));
}

/* The node key's wrapping: unwrapping with the same handshake gives the
 * key back; another connection's nonces, another node id or another
 * secret give something else; the node proof depends on the key. */
static void test_node_key_wrap(void **state)
{
    const char *k16 = "0123456789abcdef";
    uint8_t nc[GPT_STORE_NONCE_BYTES] = {1}, ns[GPT_STORE_NONCE_BYTES] = {2};
    uint8_t key[GPT_STORE_MAC_BYTES], w[GPT_STORE_MAC_BYTES], u[GPT_STORE_MAC_BYTES];
    uint8_t a[GPT_STORE_MAC_BYTES], b[GPT_STORE_MAC_BYTES];

    (void)state;
    for (size_t i = 0; i < sizeof(key); i++)
        key[i] = (uint8_t)(i * 13 + 5);
    assert_int_equal(store_auth_wrap(k16, 16, nc, ns, "n1", key, w), 0);
    assert_memory_not_equal(w, key, sizeof(key));
    assert_int_equal(store_auth_wrap(k16, 16, nc, ns, "n1", w, u), 0);
    assert_memory_equal(u, key, sizeof(key));
    assert_int_equal(store_auth_wrap(k16, 16, ns, nc, "n1", w, u), 0);
    assert_memory_not_equal(u, key, sizeof(key));
    assert_int_equal(store_auth_wrap(k16, 16, nc, ns, "n2", w, u), 0);
    assert_memory_not_equal(u, key, sizeof(key));
    assert_int_equal(store_auth_wrap("fedcba9876543210", 16, nc, ns, "n1", w, u), 0);
    assert_memory_not_equal(u, key, sizeof(key));
    assert_int_equal(store_auth_wrap("short", 5, nc, ns, "n1", key, u), -GPT_E_AUTH);
    assert_int_equal(store_auth_proof(key, sizeof(key), GPT_STORE_LABEL_NODE, nc, ns, "n1", a), 0);
    key[0] ^= 1;
    assert_int_equal(store_auth_proof(key, sizeof(key), GPT_STORE_LABEL_NODE, nc, ns, "n1", b), 0);
    assert_memory_not_equal(a, b, sizeof(a));
}

/* Sealed frames both ways between two sessions of one handshake decode to
 * the same messages; each tag is the HMAC of the sequence number and the
 * frame, so the same frame sent twice has two tags. */
static void test_sealed_round_trip(void **state)
{
    struct proto_store_out o, r;
    struct pair p;
    uint8_t *frame, *tag, *tag0 = NULL;
    size_t off = 0, len;
    int rc;

    (void)state;
    pair_init(&p, 9, SEAL_SECRET);
    sealed_requests(&p.cli, &o);
    assert_int_equal(p.cli.tx_seq, 3);
    assert_int_equal(feed_sealed(&p.srv, o.data, o.len, &rc), 3);
    assert_int_equal(rc, 0);
    assert_int_equal(p.srv.rx_seq, 3);
    /* The frame layout: each frame then its 16-byte tag. */
    assert_int_equal(
        proto_store_sealed_next(o.data, o.len, GPT_STORE_TAG_BYTES, &off, &frame, &len, &tag), 1);
    assert_true(frame == o.data && tag == o.data + len);
    /* Server to client: two identical OK frames get different tags. */
    proto_store_out_init(&r);
    r.tag_bytes = GPT_STORE_TAG_BYTES;
    assert_int_equal(proto_store_put_ok(&r), 0);
    assert_int_equal(proto_store_put_ok(&r), 0);
    assert_int_equal(store_auth_seal(&p.srv, &r, 0), 0);
    off = 0;
    while (proto_store_sealed_next(r.data, r.len, GPT_STORE_TAG_BYTES, &off, &frame, &len, &tag) ==
           1) {
        if (tag0)
            assert_memory_not_equal(tag0, tag, GPT_STORE_TAG_BYTES);
        tag0 = tag;
    }
    assert_int_equal(feed_sealed(&p.cli, r.data, r.len, &rc), 2);
    assert_int_equal(rc, 0);
    /* A client's frame is not valid server to client (one key per way). */
    {
        struct pair q;
        pair_init(&q, 9, SEAL_SECRET);
        assert_int_equal(feed_sealed(&q.cli, o.data, o.len, &rc), 0);
        assert_int_equal(rc, -GPT_E_AUTH);
        pair_done(&q);
    }
    /* Not whole sealed frames: a programming error reported, not a crash. */
    off = 0;
    assert_int_equal(
        proto_store_sealed_next(o.data, o.len - 1, GPT_STORE_TAG_BYTES, &off, &frame, &len, &tag),
        1);
    off = 0;
    assert_int_equal(
        proto_store_sealed_next(o.data, 10, GPT_STORE_TAG_BYTES, &off, &frame, &len, &tag),
        -GPT_E_PROTO);
    proto_store_out_done(&o);
    proto_store_out_done(&r);
    pair_done(&p);
}

/* Every tampering is refused at the frame it hits, before that frame's
 * fields are decoded, and the frames before it are kept. */
static void test_sealed_tampering(void **state)
{
    struct proto_store_out o, other;
    size_t off = 0, len0, len1;
    uint8_t *f0, *t0, *f1, *t1;
    uint8_t buf[1024];
    struct pair p, q;
    int rc;

    (void)state;
    pair_init(&p, 1, SEAL_SECRET);
    sealed_requests(&p.cli, &o);
    assert_int_equal(
        proto_store_sealed_next(o.data, o.len, GPT_STORE_TAG_BYTES, &off, &f0, &len0, &t0), 1);
    assert_int_equal(
        proto_store_sealed_next(o.data, o.len, GPT_STORE_TAG_BYTES, &off, &f1, &len1, &t1), 1);
    size_t s0 = len0 + GPT_STORE_TAG_BYTES, s1 = len1 + GPT_STORE_TAG_BYTES;

    /* A flipped bit in the value, in the length field's type, in the tag. */
    for (size_t at = 0; at < s0; at++) {
        struct pair fresh;
        if (at < GPT_STORE_HEADER_BYTES)
            continue; /* header damage is a framing error, checked elsewhere */
        memcpy(buf, o.data, o.len);
        buf[at] ^= 0x01;
        pair_init(&fresh, 1, SEAL_SECRET);
        assert_int_equal(feed_sealed(&fresh.srv, buf, o.len, &rc), 0);
        assert_int_equal(rc, -GPT_E_AUTH);
        pair_done(&fresh);
    }
    /* Replay: frame 0 again after frame 0 (same session). */
    memcpy(buf, o.data, s0);
    memcpy(buf + s0, o.data, s0);
    assert_int_equal(feed_sealed(&p.srv, buf, 2 * s0, &rc), 1);
    assert_int_equal(rc, -GPT_E_AUTH);
    /* Reorder: frame 1 before frame 0. */
    pair_done(&p);
    pair_init(&p, 1, SEAL_SECRET);
    memcpy(buf, o.data + s0, s1);
    memcpy(buf + s1, o.data, s0);
    assert_int_equal(feed_sealed(&p.srv, buf, s0 + s1, &rc), 0);
    assert_int_equal(rc, -GPT_E_AUTH);
    /* Drop: frame 1 alone (frame 0 lost on the way). */
    pair_done(&p);
    pair_init(&p, 1, SEAL_SECRET);
    assert_int_equal(feed_sealed(&p.srv, o.data + s0, s1, &rc), 0);
    assert_int_equal(rc, -GPT_E_AUTH);
    /* Injection: an unsealed frame of a peer without the keys, between two
     * genuine ones; its "tag" is the next frame's first bytes. */
    pair_done(&p);
    pair_init(&p, 1, SEAL_SECRET);
    proto_store_out_init(&other);
    assert_int_equal(proto_store_put_key_value(&other, PROTO_STORE_SET, "evil", 4, "0", 1), 0);
    memcpy(buf, o.data, s0);
    memcpy(buf + s0, other.data, other.len);
    memcpy(buf + s0 + other.len, o.data + s0, s1);
    assert_int_equal(feed_sealed(&p.srv, buf, s0 + other.len + s1, &rc), 1);
    assert_int_equal(rc, -GPT_E_AUTH);
    /* Injection with a made-up tag (all zeros, and the genuine frame 0's). */
    pair_done(&p);
    pair_init(&p, 1, SEAL_SECRET);
    other.len = 0;
    other.tag_bytes = GPT_STORE_TAG_BYTES;
    assert_int_equal(proto_store_put_key_value(&other, PROTO_STORE_SET, "evil", 4, "0", 1), 0);
    assert_int_equal(feed_sealed(&p.srv, other.data, other.len, &rc), 0);
    assert_int_equal(rc, -GPT_E_AUTH);
    memcpy(other.data + other.len - GPT_STORE_TAG_BYTES, t0, GPT_STORE_TAG_BYTES);
    assert_int_equal(feed_sealed(&p.srv, other.data, other.len, &rc), 0);
    assert_int_equal(rc, -GPT_E_AUTH);
    /* Cross-session replay: frame 0, sealed with sequence number 0, into
     * another connection (other nonces) at its sequence number 0. */
    pair_init(&q, 2, SEAL_SECRET);
    assert_int_equal(feed_sealed(&q.srv, o.data, s0, &rc), 0);
    assert_int_equal(rc, -GPT_E_AUTH);
    pair_done(&q);
    /* A client whose secret differs (same nonces) seals nothing the server
     * accepts. */
    pair_init(&q, 1, "another-secret-of-the-right-size");
    proto_store_out_done(&other);
    sealed_requests(&q.cli, &other);
    assert_int_equal(feed_sealed(&q.srv, other.data, other.len, &rc), 0);
    assert_int_equal(rc, -GPT_E_AUTH);
    pair_done(&q);
    /* The genuine stream still passes. */
    pair_done(&p);
    pair_init(&p, 1, SEAL_SECRET);
    assert_int_equal(feed_sealed(&p.srv, o.data, o.len, &rc), 3);
    assert_int_equal(rc, 0);
    pair_done(&p);
    proto_store_out_done(&other);
    proto_store_out_done(&o);
}

/* The parser waits for the tag: a sealed frame fed byte by byte comes out
 * only once its last tag byte is in. */
static void test_sealed_byte_by_byte(void **state)
{
    struct proto_store_parser p;
    struct proto_store_msg m;
    struct proto_store_out o;
    struct pair pr;
    int got = 0, rc;

    (void)state;
    pair_init(&pr, 5, SEAL_SECRET);
    sealed_requests(&pr.cli, &o);
    proto_store_parser_init(&p, GPT_STORE_FRAME_MAX);
    proto_store_parser_seal(&p, GPT_STORE_TAG_BYTES, store_auth_verify, &pr.srv);
    for (size_t i = 0; i < o.len; i++) {
        assert_int_equal(proto_store_parser_feed(&p, o.data + i, 1, NULL), 0);
        while ((rc = proto_store_parser_next(&p, &m, NULL)) == 1)
            got++;
        assert_int_equal(rc, 0);
        if (i == 0)
            assert_int_equal(got, 0);
    }
    assert_int_equal(got, 3);
    assert_int_equal(m.type, PROTO_STORE_NUM_KEYS);
    assert_int_equal(proto_store_parser_pending(&p), 0);
    proto_store_parser_done(&p);
    proto_store_out_done(&o);
    pair_done(&pr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_watch_heartbeat_limits),
        cmocka_unit_test(test_every_truncation_needs_more),
        cmocka_unit_test(test_parser_byte_by_byte),
        cmocka_unit_test(test_oversized_headers),
        cmocka_unit_test(test_hello_node),
        cmocka_unit_test(test_auth_node_mac),
        cmocka_unit_test(test_malformed_fields),
        cmocka_unit_test(test_parser_rejects_without_buffering),
        cmocka_unit_test(test_encoder_limits),
        cmocka_unit_test(test_max_frame),
        cmocka_unit_test(test_proof_and_keys),
        cmocka_unit_test(test_node_key_wrap),
        cmocka_unit_test(test_sealed_round_trip),
        cmocka_unit_test(test_sealed_tampering),
        cmocka_unit_test(test_sealed_byte_by_byte),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
