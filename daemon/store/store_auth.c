/*
 * store_auth: see store_auth.h. HMAC-SHA256 through OpenSSL 3's EVP_MAC:
 * each session owns two keyed contexts; EVP_MAC_init() with a NULL key
 * restarts a context from its precomputed inner and outer pads, so sealing
 * or checking a frame is one hash pass over it plus two block compressions.
 * No state outside the session objects; any thread, one per session.
 */
#include "store_auth.h"

#include <errno.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <openssl/rand.h>

int store_auth_random(uint8_t *buf, size_t n)
{
    return RAND_bytes(buf, (int)n) == 1 ? 0 : -GPT_E_AUTH;
}

int store_auth_proof(const void *secret, size_t secret_len, const char *label,
                     const uint8_t nc[GPT_STORE_NONCE_BYTES],
                     const uint8_t ns[GPT_STORE_NONCE_BYTES], const char *node,
                     uint8_t ret_mac[GPT_STORE_MAC_BYTES])
{
    uint8_t msg[64 + 2 * GPT_STORE_NONCE_BYTES + GPT_STORE_NODE_MAX];
    size_t label_len = strlen(label), node_len = node ? strlen(node) : 0, n;
    unsigned int len = 0;

    GPT_ASSERT(label_len <= 64);
    if (!secret || secret_len < STORE_SECRET_MIN || node_len > GPT_STORE_NODE_MAX)
        return -GPT_E_AUTH;
    memcpy(msg, label, label_len);
    memcpy(msg + label_len, nc, GPT_STORE_NONCE_BYTES);
    memcpy(msg + label_len + GPT_STORE_NONCE_BYTES, ns, GPT_STORE_NONCE_BYTES);
    n = label_len + 2 * GPT_STORE_NONCE_BYTES;
    if (node_len)
        memcpy(msg + n, node, node_len);
    n += node_len;
    if (!HMAC(EVP_sha256(), secret, (int)secret_len, msg, n, ret_mac, &len) ||
        len != GPT_STORE_MAC_BYTES)
        return -GPT_E_AUTH;
    return 0;
}

int store_auth_wrap(const void *secret, size_t secret_len, const uint8_t nc[GPT_STORE_NONCE_BYTES],
                    const uint8_t ns[GPT_STORE_NONCE_BYTES], const char *node,
                    const uint8_t key[GPT_STORE_MAC_BYTES], uint8_t ret[GPT_STORE_MAC_BYTES])
{
    uint8_t pad[GPT_STORE_MAC_BYTES];
    int rc = store_auth_proof(secret, secret_len, GPT_STORE_LABEL_WRAP, nc, ns, node, pad);

    if (rc == 0)
        for (size_t i = 0; i < GPT_STORE_MAC_BYTES; i++)
            ret[i] = key[i] ^ pad[i];
    OPENSSL_cleanse(pad, sizeof(pad));
    return rc;
}

/* A new HMAC-SHA256 context keyed with key[0..GPT_STORE_MAC_BYTES). */
static EVP_MAC_CTX *keyed_ctx(EVP_MAC *mac, const uint8_t *key)
{
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(mac);

    if (ctx && EVP_MAC_init(ctx, key, GPT_STORE_MAC_BYTES, params) != 1) {
        EVP_MAC_CTX_free(ctx);
        ctx = NULL;
    }
    return ctx;
}

int store_auth_session_init(struct store_auth_session *s, bool is_server, const void *secret,
                            size_t secret_len, const uint8_t nc[GPT_STORE_NONCE_BYTES],
                            const uint8_t ns[GPT_STORE_NONCE_BYTES])
{
    uint8_t c2s[GPT_STORE_MAC_BYTES], s2c[GPT_STORE_MAC_BYTES];
    EVP_MAC *mac = NULL;
    int rc;

    memset(s, 0, sizeof(*s));
    if ((rc = store_auth_proof(secret, secret_len, GPT_STORE_LABEL_KEY_C2S, nc, ns, NULL, c2s)) <
            0 ||
        (rc = store_auth_proof(secret, secret_len, GPT_STORE_LABEL_KEY_S2C, nc, ns, NULL, s2c)) < 0)
        goto out;
    rc = -GPT_E_AUTH;
    if (!(mac = EVP_MAC_fetch(NULL, "HMAC", NULL)))
        goto out;
    s->tx = keyed_ctx(mac, is_server ? s2c : c2s);
    s->rx = keyed_ctx(mac, is_server ? c2s : s2c);
    if (s->tx && s->rx)
        rc = 0;
out:
    EVP_MAC_free(mac);
    OPENSSL_cleanse(c2s, sizeof(c2s));
    OPENSSL_cleanse(s2c, sizeof(s2c));
    if (rc < 0)
        store_auth_session_done(s);
    return rc;
}

void store_auth_session_done(struct store_auth_session *s)
{
    EVP_MAC_CTX_free(s->tx);
    EVP_MAC_CTX_free(s->rx);
    memset(s, 0, sizeof(*s));
}

bool store_auth_session_ready(const struct store_auth_session *s)
{
    return s->tx && s->rx;
}

/* ret = HMAC(ctx's key, u64le seq || frame), all 32 bytes. */
static int frame_mac(EVP_MAC_CTX *ctx, uint64_t seq, const uint8_t *frame, size_t len,
                     uint8_t ret[GPT_STORE_MAC_BYTES])
{
    uint8_t seq_le[8];
    size_t out = 0;

    for (int i = 0; i < 8; i++)
        seq_le[i] = (uint8_t)(seq >> (8 * i));
    if (EVP_MAC_init(ctx, NULL, 0, NULL) != 1 || EVP_MAC_update(ctx, seq_le, 8) != 1 ||
        EVP_MAC_update(ctx, frame, len) != 1 ||
        EVP_MAC_final(ctx, ret, &out, GPT_STORE_MAC_BYTES) != 1 || out != GPT_STORE_MAC_BYTES)
        return -GPT_E_AUTH;
    return 0;
}

int store_auth_seal(struct store_auth_session *s, struct proto_store_out *o, size_t from)
{
    uint8_t mac[GPT_STORE_MAC_BYTES], *frame, *tag;
    size_t off = from, len;
    int rc;

    GPT_ASSERT(s->tx && o->tag_bytes == GPT_STORE_TAG_BYTES);
    while ((rc = proto_store_sealed_next(o->data, o->len, o->tag_bytes, &off, &frame, &len,
                                         &tag)) == 1) {
        if (frame_mac(s->tx, s->tx_seq, frame, len, mac) < 0)
            return -GPT_E_AUTH;
        memcpy(tag, mac, GPT_STORE_TAG_BYTES);
        s->tx_seq++;
    }
    return rc < 0 ? -GPT_E_AUTH : 0;
}

int store_auth_verify(void *session, const uint8_t *frame, size_t len, const uint8_t *tag)
{
    struct store_auth_session *s = session;
    uint8_t mac[GPT_STORE_MAC_BYTES];

    if (!s->rx || frame_mac(s->rx, s->rx_seq, frame, len, mac) < 0 ||
        CRYPTO_memcmp(mac, tag, GPT_STORE_TAG_BYTES) != 0)
        return -GPT_E_AUTH;
    s->rx_seq++;
    return 0;
}
