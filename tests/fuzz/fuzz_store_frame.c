/*
 * fuzz_store_frame: libFuzzer target for the store's frame decoder and
 * incremental parser (proto/store.h). The first input byte picks the feed
 * chunk size and the parser's frame limit; the rest is the byte stream. Every
 * decoded view is read end to end so the sanitizers see any out-of-bounds
 * view. Single-threaded.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "store.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct proto_store_parser p;
    struct proto_store_msg m;
    size_t chunk, used, off;
    int rc;

    if (size < 1)
        return 0;
    chunk = (size_t)(data[0] & 0x3f) + 1;
    proto_store_parser_init(&p,
                            (data[0] & 0x40) ? GPT_STORE_HANDSHAKE_FRAME_MAX : GPT_STORE_FRAME_MAX);
    data++;
    size--;

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
