/*
 * store: encode and decode the rendezvous store's frames, and the incremental
 * parser a connection feeds. Pure; the caller owns every object and may use
 * it from any one thread at a time.
 */
#include "store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- little-endian helpers ---- */

static void le32_put(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t le32_get(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void le64_put(uint8_t *p, uint64_t v)
{
    le32_put(p, (uint32_t)v);
    le32_put(p + 4, (uint32_t)(v >> 32));
}

static uint64_t le64_get(const uint8_t *p)
{
    return (uint64_t)le32_get(p) | (uint64_t)le32_get(p + 4) << 32;
}

/* ---- per-type limits ---- */

/* Largest body (type byte and fields, i.e. what the length field counts) a
 * frame of `type` may declare; 0 for an unknown type. */
static size_t body_max(int type)
{
    const size_t key = 4 + GPT_STORE_KEY_MAX, val = 4 + (size_t)GPT_STORE_VALUE_MAX;

    switch (type) {
    case PROTO_STORE_HELLO:
        return 1 + 4 + GPT_STORE_NONCE_BYTES + 4 + GPT_STORE_NODE_MAX;
    case PROTO_STORE_CHALLENGE:
        return 1 + GPT_STORE_NONCE_BYTES;
    case PROTO_STORE_AUTH:
    case PROTO_STORE_PROOF:
        return 1 + 2 * GPT_STORE_MAC_BYTES;
    case PROTO_STORE_SET:
    case PROTO_STORE_APPEND:
        return 1 + key + val;
    case PROTO_STORE_GET:
    case PROTO_STORE_DELETE:
        return 1 + key;
    case PROTO_STORE_ADD:
        return 1 + key + 8;
    case PROTO_STORE_WATCH:
        return 1 + key + 8 + 4;
    case PROTO_STORE_HEARTBEAT:
        return 1 + key + 4 + GPT_STORE_HB_VALUE_MAX;
    case PROTO_STORE_NOTIFY:
        return 1 + 4 + 8 + key + val;
    case PROTO_STORE_COMPARE_SET:
        return 1 + key + 2 * val;
    case PROTO_STORE_WAIT:
        return 1 + 4 + 4 + (size_t)GPT_STORE_WAIT_KEYS_MAX * key;
    case PROTO_STORE_CHECK:
        return 1 + 4 + (size_t)GPT_STORE_WAIT_KEYS_MAX * key;
    case PROTO_STORE_NUM_KEYS:
    case PROTO_STORE_OK:
        return 1;
    case PROTO_STORE_VALUE:
        return 1 + val;
    case PROTO_STORE_INT:
        return 1 + 8;
    case PROTO_STORE_ERROR:
        return 1 + 4 + 4 + GPT_STORE_ERRMSG_MAX;
    default:
        return 0;
    }
}

int proto_store_type_is_request(int type)
{
    return type >= PROTO_STORE_SET && type <= PROTO_STORE_HEARTBEAT;
}

const char *proto_store_type_name(int type)
{
    switch (type) {
    case PROTO_STORE_HELLO:
        return "HELLO";
    case PROTO_STORE_CHALLENGE:
        return "CHALLENGE";
    case PROTO_STORE_AUTH:
        return "AUTH";
    case PROTO_STORE_PROOF:
        return "PROOF";
    case PROTO_STORE_SET:
        return "SET";
    case PROTO_STORE_GET:
        return "GET";
    case PROTO_STORE_ADD:
        return "ADD";
    case PROTO_STORE_COMPARE_SET:
        return "COMPARE_SET";
    case PROTO_STORE_WAIT:
        return "WAIT";
    case PROTO_STORE_CHECK:
        return "CHECK";
    case PROTO_STORE_DELETE:
        return "DELETE";
    case PROTO_STORE_NUM_KEYS:
        return "NUM_KEYS";
    case PROTO_STORE_APPEND:
        return "APPEND";
    case PROTO_STORE_WATCH:
        return "WATCH";
    case PROTO_STORE_HEARTBEAT:
        return "HEARTBEAT";
    case PROTO_STORE_NOTIFY:
        return "NOTIFY";
    case PROTO_STORE_OK:
        return "OK";
    case PROTO_STORE_VALUE:
        return "VALUE";
    case PROTO_STORE_INT:
        return "INT";
    case PROTO_STORE_ERROR:
        return "ERROR";
    default:
        return "?";
    }
}

int proto_store_status_to_errno(uint32_t status)
{
    switch (status) {
    case PROTO_STORE_STATUS_NOT_FOUND:
        return -ENOENT;
    case PROTO_STORE_STATUS_TIMEOUT:
        return -ETIMEDOUT;
    case PROTO_STORE_STATUS_LIMIT:
        return -GPT_E_LIMIT;
    case PROTO_STORE_STATUS_INVALID:
        return -EINVAL;
    case PROTO_STORE_STATUS_EXISTS:
        return -EEXIST;
    case PROTO_STORE_STATUS_DENIED:
        return -EACCES;
    default:
        return -EIO;
    }
}

uint32_t proto_store_status_from_errno(int code)
{
    switch (code) {
    case -ENOENT:
        return PROTO_STORE_STATUS_NOT_FOUND;
    case -ETIMEDOUT:
        return PROTO_STORE_STATUS_TIMEOUT;
    case -GPT_E_LIMIT:
        return PROTO_STORE_STATUS_LIMIT;
    case -EINVAL:
        return PROTO_STORE_STATUS_INVALID;
    case -EEXIST:
        return PROTO_STORE_STATUS_EXISTS;
    case -EACCES:
        return PROTO_STORE_STATUS_DENIED;
    default:
        return PROTO_STORE_STATUS_INTERNAL;
    }
}

/* ---- decoding ---- */

/* A bounded cursor over one frame's fields. */
struct reader {
    const uint8_t *p;
    const uint8_t *end;
};

static size_t rd_left(const struct reader *r)
{
    return (size_t)(r->end - r->p);
}

static int rd_u32(struct reader *r, uint32_t *ret, struct gpt_err *err)
{
    if (rd_left(r) < 4)
        return gpt_err_set(err, -GPT_E_PROTO, NULL, "store frame: truncated u32 field");
    *ret = le32_get(r->p);
    r->p += 4;
    return 0;
}

static int rd_u64(struct reader *r, uint64_t *ret, struct gpt_err *err)
{
    if (rd_left(r) < 8)
        return gpt_err_set(err, -GPT_E_PROTO, NULL, "store frame: truncated u64 field");
    *ret = le64_get(r->p);
    r->p += 8;
    return 0;
}

/* A u32 length (checked against `max` first) and that many bytes. */
static int rd_bytes(struct reader *r, size_t max, const char *what, const uint8_t **ret,
                    size_t *ret_len, struct gpt_err *err)
{
    uint32_t n = 0;
    int rc = rd_u32(r, &n, err);

    if (rc < 0)
        return rc;
    if (n > max)
        return gpt_err_set(err, -GPT_E_LIMIT, NULL, "store frame: %s of %u bytes over limit %zu",
                           what, n, max);
    if (n > rd_left(r))
        return gpt_err_set(err, -GPT_E_PROTO, NULL, "store frame: %s overruns the frame", what);
    *ret = r->p;
    *ret_len = n;
    r->p += n;
    return 0;
}

static int key_valid(const void *key, size_t len)
{
    return len >= 1 && len <= GPT_STORE_KEY_MAX && !memchr(key, 0, len);
}

static int rd_key(struct reader *r, const char **ret, size_t *ret_len, struct gpt_err *err)
{
    const uint8_t *k;
    size_t n;
    int rc = rd_bytes(r, GPT_STORE_KEY_MAX, "key", &k, &n, err);

    if (rc < 0)
        return rc;
    if (!key_valid(k, n))
        return gpt_err_set(err, -GPT_E_PROTO, NULL, "store frame: empty key or key with NUL");
    *ret = (const char *)k;
    *ret_len = n;
    return 0;
}

static int rd_keys(struct reader *r, struct proto_store_msg *m, struct gpt_err *err)
{
    const uint8_t *start;
    uint32_t n, i;
    int rc = rd_u32(r, &n, err);

    if (rc < 0)
        return rc;
    if (n == 0 || n > GPT_STORE_WAIT_KEYS_MAX)
        return gpt_err_set(err, n ? -GPT_E_LIMIT : -GPT_E_PROTO, NULL,
                           "store frame: %u keys (1..%u allowed)", n, GPT_STORE_WAIT_KEYS_MAX);
    start = r->p;
    for (i = 0; i < n; i++) {
        const char *k;
        size_t klen;
        rc = rd_key(r, &k, &klen, err);
        if (rc < 0)
            return rc;
    }
    m->nkeys = n;
    m->keys_raw = start;
    m->keys_raw_len = (size_t)(r->p - start);
    return 0;
}

static int rd_nonce(struct reader *r, struct proto_store_msg *m, struct gpt_err *err)
{
    if (rd_left(r) < GPT_STORE_NONCE_BYTES)
        return gpt_err_set(err, -GPT_E_PROTO, NULL, "store frame: short %s",
                           proto_store_type_name(m->type));
    memcpy(m->nonce, r->p, GPT_STORE_NONCE_BYTES);
    r->p += GPT_STORE_NONCE_BYTES;
    return 0;
}

/* HELLO's optional node id: 1..GPT_STORE_NODE_MAX bytes without NUL. */
static int rd_node(struct reader *r, struct proto_store_msg *m, struct gpt_err *err)
{
    const uint8_t *k;
    size_t n;
    int rc = rd_bytes(r, GPT_STORE_NODE_MAX, "node id", &k, &n, err);

    if (rc < 0)
        return rc;
    if (n == 0 || memchr(k, 0, n))
        return gpt_err_set(err, -GPT_E_PROTO, NULL, "store frame: empty node id or one with NUL");
    m->key = (const char *)k;
    m->key_len = n;
    return 0;
}

/* AUTH's node proof or PROOF's wrapped node key: exactly
 * GPT_STORE_MAC_BYTES more bytes, viewed as val. */
static int rd_mac2(struct reader *r, struct proto_store_msg *m, struct gpt_err *err)
{
    if (rd_left(r) != GPT_STORE_MAC_BYTES)
        return gpt_err_set(err, -GPT_E_PROTO, NULL, "store frame: %s's second MAC is not %d bytes",
                           proto_store_type_name(m->type), GPT_STORE_MAC_BYTES);
    m->val = r->p;
    m->val_len = GPT_STORE_MAC_BYTES;
    r->p += GPT_STORE_MAC_BYTES;
    return 0;
}

static int decode_fields(struct reader *r, struct proto_store_msg *m, struct gpt_err *err)
{
    uint64_t u64 = 0;
    uint32_t n = 0;
    int rc = 0;

    switch (m->type) {
    case PROTO_STORE_HELLO:
        rc = rd_u32(r, &m->version, err);
        if (rc == 0)
            rc = rd_nonce(r, m, err);
        if (rc == 0 && rd_left(r) > 0)
            rc = rd_node(r, m, err);
        break;
    case PROTO_STORE_CHALLENGE:
        rc = rd_nonce(r, m, err);
        break;
    case PROTO_STORE_AUTH:
    case PROTO_STORE_PROOF:
        rc = rd_nonce(r, m, err);
        if (rc == 0 && rd_left(r) > 0)
            rc = rd_mac2(r, m, err);
        break;
    case PROTO_STORE_SET:
    case PROTO_STORE_APPEND:
        rc = rd_key(r, &m->key, &m->key_len, err);
        if (rc == 0)
            rc = rd_bytes(r, GPT_STORE_VALUE_MAX, "value", &m->val, &m->val_len, err);
        break;
    case PROTO_STORE_GET:
    case PROTO_STORE_DELETE:
        rc = rd_key(r, &m->key, &m->key_len, err);
        break;
    case PROTO_STORE_WATCH:
        rc = rd_key(r, &m->key, &m->key_len, err);
        if (rc == 0)
            rc = rd_u64(r, &m->key_version, err);
        if (rc == 0)
            rc = rd_u32(r, &m->timeout_ms, err);
        break;
    case PROTO_STORE_HEARTBEAT:
        rc = rd_key(r, &m->key, &m->key_len, err);
        if (rc == 0)
            rc = rd_bytes(r, GPT_STORE_HB_VALUE_MAX, "heartbeat value", &m->val, &m->val_len, err);
        break;
    case PROTO_STORE_NOTIFY:
        rc = rd_u32(r, &n, err);
        m->status = n;
        if (rc == 0)
            rc = rd_u64(r, &m->key_version, err);
        if (rc == 0)
            rc = rd_key(r, &m->key, &m->key_len, err);
        if (rc == 0)
            rc = rd_bytes(r, GPT_STORE_VALUE_MAX, "value", &m->val, &m->val_len, err);
        if (rc == 0 && m->status != 0 && m->status != PROTO_STORE_STATUS_NOT_FOUND &&
            m->status != PROTO_STORE_STATUS_TIMEOUT)
            rc = gpt_err_set(err, -GPT_E_PROTO, NULL, "store frame: NOTIFY status %u", m->status);
        break;
    case PROTO_STORE_ADD:
        rc = rd_key(r, &m->key, &m->key_len, err);
        if (rc == 0 && (rc = rd_u64(r, &u64, err)) == 0)
            m->num = (int64_t)u64;
        break;
    case PROTO_STORE_COMPARE_SET:
        rc = rd_key(r, &m->key, &m->key_len, err);
        if (rc == 0)
            rc = rd_bytes(r, GPT_STORE_VALUE_MAX, "expected value", &m->val, &m->val_len, err);
        if (rc == 0)
            rc = rd_bytes(r, GPT_STORE_VALUE_MAX, "desired value", &m->val2, &m->val2_len, err);
        break;
    case PROTO_STORE_WAIT:
        rc = rd_u32(r, &m->timeout_ms, err);
        if (rc == 0)
            rc = rd_keys(r, m, err);
        break;
    case PROTO_STORE_CHECK:
        rc = rd_keys(r, m, err);
        break;
    case PROTO_STORE_NUM_KEYS:
    case PROTO_STORE_OK:
        break;
    case PROTO_STORE_VALUE:
        rc = rd_bytes(r, GPT_STORE_VALUE_MAX, "value", &m->val, &m->val_len, err);
        break;
    case PROTO_STORE_INT:
        if ((rc = rd_u64(r, &u64, err)) == 0)
            m->num = (int64_t)u64;
        break;
    case PROTO_STORE_ERROR:
        rc = rd_u32(r, &n, err);
        m->status = n;
        if (rc == 0)
            rc = rd_bytes(r, GPT_STORE_ERRMSG_MAX, "error message", &m->val, &m->val_len, err);
        break;
    }
    if (rc == 0 && rd_left(r) != 0)
        rc = gpt_err_set(err, -GPT_E_PROTO, NULL, "store frame: %zu trailing bytes after %s",
                         rd_left(r), proto_store_type_name(m->type));
    return rc;
}

/* Checks a frame's 5-byte header (len >= GPT_STORE_HEADER_BYTES): returns
 * 0 with the whole frame's size in *ret_size, or a negative error. */
static int decode_header(const uint8_t *buf, size_t frame_max, size_t *ret_size,
                         struct gpt_err *err)
{
    uint32_t body = le32_get(buf);
    int type = buf[4];
    size_t max = body_max(type);

    if (max == 0)
        return gpt_err_set(err, -GPT_E_PROTO, NULL, "store frame: unknown type 0x%02x", type);
    if (body < 1)
        return gpt_err_set(err, -GPT_E_PROTO, NULL, "store frame: empty body");
    if (body > max || (size_t)body + 4 > frame_max)
        return gpt_err_set(err, -GPT_E_LIMIT, NULL, "store frame: %s of %u bytes over limit %zu",
                           proto_store_type_name(type), body, max < frame_max ? max : frame_max);
    *ret_size = (size_t)body + 4;
    return 0;
}

/* Decodes the fields of a whole frame buf[0..size) whose header was checked. */
static int decode_body(const uint8_t *buf, size_t size, struct proto_store_msg *ret_msg,
                       struct gpt_err *err)
{
    struct proto_store_msg m;
    struct reader r;
    int rc;

    memset(&m, 0, sizeof(m));
    m.type = (enum proto_store_type)buf[4];
    r.p = buf + GPT_STORE_HEADER_BYTES;
    r.end = buf + size;
    rc = decode_fields(&r, &m, err);
    if (rc < 0)
        return rc;
    *ret_msg = m;
    return 1;
}

int proto_store_decode(const uint8_t *buf, size_t len, size_t frame_max,
                       struct proto_store_msg *ret_msg, size_t *ret_used, struct gpt_err *err)
{
    size_t size;
    int rc;

    *ret_used = 0;
    if (len < GPT_STORE_HEADER_BYTES)
        return 0;
    if ((rc = decode_header(buf, frame_max, &size, err)) < 0)
        return rc;
    *ret_used = size;
    if (len < size)
        return 0;
    return decode_body(buf, size, ret_msg, err);
}

int proto_store_keys_next(const struct proto_store_msg *m, size_t *cursor, const char **ret_key,
                          size_t *ret_len)
{
    uint32_t n;

    /* The keys were validated by decode, so only the end needs checking. */
    if (*cursor + 4 > m->keys_raw_len)
        return 0;
    n = le32_get(m->keys_raw + *cursor);
    *ret_key = (const char *)m->keys_raw + *cursor + 4;
    *ret_len = n;
    *cursor += 4 + (size_t)n;
    return 1;
}

/* ---- parser ---- */

void proto_store_parser_init(struct proto_store_parser *p, size_t frame_max)
{
    memset(p, 0, sizeof(*p));
    p->frame_max = frame_max;
}

void proto_store_parser_done(struct proto_store_parser *p)
{
    free(p->buf);
    p->buf = NULL;
    p->len = p->off = p->cap = 0;
}

size_t proto_store_parser_pending(const struct proto_store_parser *p)
{
    return p->len - p->off;
}

void proto_store_parser_seal(struct proto_store_parser *p, size_t tag_bytes,
                             proto_store_verify_fn verify, void *arg)
{
    GPT_ASSERT(tag_bytes >= 1 && tag_bytes <= GPT_STORE_MAC_BYTES && verify);
    p->tag_bytes = tag_bytes;
    p->verify = verify;
    p->verify_arg = arg;
}

int proto_store_parser_feed(struct proto_store_parser *p, const void *data, size_t n,
                            struct gpt_err *err)
{
    size_t need, limit = p->frame_max + p->tag_bytes + GPT_STORE_FEED_MAX;

    if (p->error)
        return gpt_err_set(err, p->error, NULL, "store parser: stream already failed");
    if (n > GPT_STORE_FEED_MAX)
        return gpt_err_set(err, -GPT_E_LIMIT, NULL, "store parser: feed of %zu bytes", n);
    if (p->off > 0) {
        memmove(p->buf, p->buf + p->off, p->len - p->off);
        p->len -= p->off;
        p->off = 0;
    }
    need = p->len + n;
    if (need > limit)
        return gpt_err_set(err, -GPT_E_LIMIT, NULL,
                           "store parser: %zu bytes buffered (frames not drained?)", need);
    if (need > p->cap) {
        size_t cap = p->cap ? p->cap : 4096;
        uint8_t *nb;
        while (cap < need)
            cap *= 2;
        if (cap > limit)
            cap = limit;
        nb = realloc(p->buf, cap);
        if (!nb)
            return gpt_err_set(err, -ENOMEM, NULL, "store parser: out of memory");
        p->buf = nb;
        p->cap = cap;
    }
    if (n)
        memcpy(p->buf + p->len, data, n);
    p->len += n;
    return 0;
}

int proto_store_parser_next(struct proto_store_parser *p, struct proto_store_msg *ret_msg,
                            struct gpt_err *err)
{
    const uint8_t *frame = p->buf + p->off;
    size_t have = p->len - p->off, size;
    int rc;

    if (p->error)
        return gpt_err_set(err, p->error, NULL, "store parser: stream already failed");
    if (have < GPT_STORE_HEADER_BYTES)
        return 0;
    if ((rc = decode_header(frame, p->frame_max, &size, err)) < 0)
        goto fail;
    if (have < size + p->tag_bytes)
        return 0;
    /* A sealed frame is authenticated before any of its fields is read. */
    if (p->tag_bytes && (rc = p->verify(p->verify_arg, frame, size, frame + size)) < 0) {
        gpt_err_set(err, rc, NULL, "store frame: %s with a bad tag (forged, replayed or reordered)",
                    proto_store_type_name(frame[4]));
        goto fail;
    }
    if ((rc = decode_body(frame, size, ret_msg, err)) < 0)
        goto fail;
    p->off += size + p->tag_bytes;
    return 1;
fail:
    p->error = rc;
    return rc;
}

/* ---- encoding ---- */

void proto_store_out_init(struct proto_store_out *o)
{
    memset(o, 0, sizeof(*o));
}

void proto_store_out_done(struct proto_store_out *o)
{
    free(o->data);
    memset(o, 0, sizeof(*o));
}

int proto_store_sealed_next(uint8_t *buf, size_t len, size_t tag_bytes, size_t *off,
                            uint8_t **ret_frame, size_t *ret_len, uint8_t **ret_tag)
{
    size_t size;

    if (*off >= len)
        return 0;
    if (len - *off < GPT_STORE_HEADER_BYTES)
        return -GPT_E_PROTO;
    size = 4 + (size_t)le32_get(buf + *off);
    if (size < GPT_STORE_HEADER_BYTES || len - *off < size || len - *off - size < tag_bytes)
        return -GPT_E_PROTO;
    *ret_frame = buf + *off;
    *ret_len = size;
    *ret_tag = buf + *off + size;
    *off += size + tag_bytes;
    return 1;
}

/* Reserves a frame of `body` bytes (type included) and writes its header;
 * returns where the fields go, or NULL on -ENOMEM. */
static uint8_t *out_frame(struct proto_store_out *o, int type, size_t body)
{
    size_t need = o->len + 4 + body + o->tag_bytes;
    uint8_t *p;

    GPT_ASSERT(body >= 1 && body <= body_max(type));
    if (need > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        uint8_t *nd;
        while (cap < need)
            cap *= 2;
        nd = realloc(o->data, cap);
        if (!nd)
            return NULL;
        o->data = nd;
        o->cap = cap;
    }
    p = o->data + o->len;
    le32_put(p, (uint32_t)body);
    p[4] = (uint8_t)type;
    if (o->tag_bytes)
        memset(p + 4 + body, 0, o->tag_bytes);
    o->len = need;
    return p + GPT_STORE_HEADER_BYTES;
}

static uint8_t *wr_bytes(uint8_t *p, const void *data, size_t n)
{
    le32_put(p, (uint32_t)n);
    if (n)
        memcpy(p + 4, data, n);
    return p + 4 + n;
}

int proto_store_put_hello(struct proto_store_out *o, uint32_t version,
                          const uint8_t nonce[GPT_STORE_NONCE_BYTES], const char *node)
{
    size_t n = node ? strlen(node) : 0;
    uint8_t *p;

    if (n > GPT_STORE_NODE_MAX)
        return -EINVAL;
    p = out_frame(o, PROTO_STORE_HELLO, 1 + 4 + GPT_STORE_NONCE_BYTES + (n ? 4 + n : 0));
    if (!p)
        return -ENOMEM;
    le32_put(p, version);
    memcpy(p + 4, nonce, GPT_STORE_NONCE_BYTES);
    if (n)
        wr_bytes(p + 4 + GPT_STORE_NONCE_BYTES, node, n);
    return 0;
}

static int put_nonce(struct proto_store_out *o, int type, const uint8_t *nonce)
{
    uint8_t *p = out_frame(o, type, 1 + GPT_STORE_NONCE_BYTES);

    if (!p)
        return -ENOMEM;
    memcpy(p, nonce, GPT_STORE_NONCE_BYTES);
    return 0;
}

int proto_store_put_challenge(struct proto_store_out *o, const uint8_t nonce[GPT_STORE_NONCE_BYTES])
{
    return put_nonce(o, PROTO_STORE_CHALLENGE, nonce);
}

/* AUTH or PROOF: a MAC and, when mac2 is not NULL, a second one. */
static int put_macs(struct proto_store_out *o, int type, const uint8_t *mac, const uint8_t *mac2)
{
    uint8_t *p = out_frame(o, type, 1 + GPT_STORE_MAC_BYTES + (mac2 ? GPT_STORE_MAC_BYTES : 0));

    if (!p)
        return -ENOMEM;
    memcpy(p, mac, GPT_STORE_MAC_BYTES);
    if (mac2)
        memcpy(p + GPT_STORE_MAC_BYTES, mac2, GPT_STORE_MAC_BYTES);
    return 0;
}

int proto_store_put_auth(struct proto_store_out *o, const uint8_t mac[GPT_STORE_MAC_BYTES],
                         const uint8_t *node_mac)
{
    return put_macs(o, PROTO_STORE_AUTH, mac, node_mac);
}

int proto_store_put_proof(struct proto_store_out *o, const uint8_t mac[GPT_STORE_MAC_BYTES],
                          const uint8_t *wrapped_key)
{
    return put_macs(o, PROTO_STORE_PROOF, mac, wrapped_key);
}

int proto_store_put_key_value(struct proto_store_out *o, enum proto_store_type type,
                              const char *key, size_t key_len, const void *val, size_t val_len)
{
    uint8_t *p;

    if ((type != PROTO_STORE_SET && type != PROTO_STORE_APPEND && type != PROTO_STORE_HEARTBEAT) ||
        !key_valid(key, key_len))
        return -EINVAL;
    if (val_len > (type == PROTO_STORE_HEARTBEAT ? GPT_STORE_HB_VALUE_MAX : GPT_STORE_VALUE_MAX))
        return -GPT_E_LIMIT;
    p = out_frame(o, type, 1 + 4 + key_len + 4 + val_len);
    if (!p)
        return -ENOMEM;
    p = wr_bytes(p, key, key_len);
    wr_bytes(p, val, val_len);
    return 0;
}

int proto_store_put_key(struct proto_store_out *o, enum proto_store_type type, const char *key,
                        size_t key_len)
{
    uint8_t *p;

    if ((type != PROTO_STORE_GET && type != PROTO_STORE_DELETE) || !key_valid(key, key_len))
        return -EINVAL;
    p = out_frame(o, type, 1 + 4 + key_len);
    if (!p)
        return -ENOMEM;
    wr_bytes(p, key, key_len);
    return 0;
}

int proto_store_put_add(struct proto_store_out *o, const char *key, size_t key_len, int64_t delta)
{
    uint8_t *p;

    if (!key_valid(key, key_len))
        return -EINVAL;
    p = out_frame(o, PROTO_STORE_ADD, 1 + 4 + key_len + 8);
    if (!p)
        return -ENOMEM;
    p = wr_bytes(p, key, key_len);
    le64_put(p, (uint64_t)delta);
    return 0;
}

int proto_store_put_compare_set(struct proto_store_out *o, const char *key, size_t key_len,
                                const void *expected, size_t expected_len, const void *desired,
                                size_t desired_len)
{
    uint8_t *p;

    if (!key_valid(key, key_len))
        return -EINVAL;
    if (expected_len > GPT_STORE_VALUE_MAX || desired_len > GPT_STORE_VALUE_MAX)
        return -GPT_E_LIMIT;
    p = out_frame(o, PROTO_STORE_COMPARE_SET, 1 + 4 + key_len + 4 + expected_len + 4 + desired_len);
    if (!p)
        return -ENOMEM;
    p = wr_bytes(p, key, key_len);
    p = wr_bytes(p, expected, expected_len);
    wr_bytes(p, desired, desired_len);
    return 0;
}

int proto_store_put_keys(struct proto_store_out *o, enum proto_store_type type, uint32_t timeout_ms,
                         const char *const *keys, size_t nkeys)
{
    size_t i, body;
    uint8_t *p;

    if (type != PROTO_STORE_WAIT && type != PROTO_STORE_CHECK)
        return -EINVAL;
    if (nkeys == 0)
        return -EINVAL;
    if (nkeys > GPT_STORE_WAIT_KEYS_MAX)
        return -GPT_E_LIMIT;
    body = 1 + 4 + (type == PROTO_STORE_WAIT ? 4 : 0);
    for (i = 0; i < nkeys; i++) {
        size_t n = strnlen(keys[i], GPT_STORE_KEY_MAX + 1);
        if (!key_valid(keys[i], n))
            return -EINVAL;
        body += 4 + n;
    }
    p = out_frame(o, type, body);
    if (!p)
        return -ENOMEM;
    if (type == PROTO_STORE_WAIT) {
        le32_put(p, timeout_ms);
        p += 4;
    }
    le32_put(p, (uint32_t)nkeys);
    p += 4;
    for (i = 0; i < nkeys; i++)
        p = wr_bytes(p, keys[i], strlen(keys[i]));
    return 0;
}

int proto_store_put_num_keys(struct proto_store_out *o)
{
    return out_frame(o, PROTO_STORE_NUM_KEYS, 1) ? 0 : -ENOMEM;
}

int proto_store_put_watch(struct proto_store_out *o, const char *key, size_t key_len, uint64_t seen,
                          uint32_t timeout_ms)
{
    uint8_t *p;

    if (!key_valid(key, key_len))
        return -EINVAL;
    p = out_frame(o, PROTO_STORE_WATCH, 1 + 4 + key_len + 8 + 4);
    if (!p)
        return -ENOMEM;
    p = wr_bytes(p, key, key_len);
    le64_put(p, seen);
    le32_put(p + 8, timeout_ms);
    return 0;
}

int proto_store_put_notify(struct proto_store_out *o, uint32_t status, uint64_t version,
                           const char *key, size_t key_len, const void *val, size_t val_len)
{
    uint8_t *p;

    if (!key_valid(key, key_len) || (status != 0 && status != PROTO_STORE_STATUS_NOT_FOUND &&
                                     status != PROTO_STORE_STATUS_TIMEOUT))
        return -EINVAL;
    if (val_len > GPT_STORE_VALUE_MAX)
        return -GPT_E_LIMIT;
    p = out_frame(o, PROTO_STORE_NOTIFY, 1 + 4 + 8 + 4 + key_len + 4 + val_len);
    if (!p)
        return -ENOMEM;
    le32_put(p, status);
    le64_put(p + 4, version);
    p = wr_bytes(p + 12, key, key_len);
    wr_bytes(p, val, val_len);
    return 0;
}

int proto_store_put_ok(struct proto_store_out *o)
{
    return out_frame(o, PROTO_STORE_OK, 1) ? 0 : -ENOMEM;
}

int proto_store_put_value(struct proto_store_out *o, const void *val, size_t val_len)
{
    uint8_t *p;

    if (val_len > GPT_STORE_VALUE_MAX)
        return -GPT_E_LIMIT;
    p = out_frame(o, PROTO_STORE_VALUE, 1 + 4 + val_len);
    if (!p)
        return -ENOMEM;
    wr_bytes(p, val, val_len);
    return 0;
}

int proto_store_put_int(struct proto_store_out *o, int64_t num)
{
    uint8_t *p = out_frame(o, PROTO_STORE_INT, 1 + 8);

    if (!p)
        return -ENOMEM;
    le64_put(p, (uint64_t)num);
    return 0;
}

int proto_store_put_error(struct proto_store_out *o, uint32_t status, const char *msg)
{
    size_t n = msg ? strnlen(msg, GPT_STORE_ERRMSG_MAX) : 0;
    uint8_t *p = out_frame(o, PROTO_STORE_ERROR, 1 + 4 + 4 + n);

    if (!p)
        return -ENOMEM;
    le32_put(p, status);
    wr_bytes(p + 4, msg, n);
    return 0;
}
