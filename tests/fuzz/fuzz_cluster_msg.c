/*
 * fuzz_cluster_msg: libFuzzer target for the cluster messages (proto/
 * cluster_msg.h). The first input byte picks the decoder (inbox message,
 * reply, feed chunk, feed head); the rest is the text. Whatever decodes is
 * encoded again and must decode to the same thing: the codec refuses
 * nothing it produced. Single-threaded.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_msg(const char *text, size_t len)
{
    struct cluster_msg m, again;
    struct gpt_err err;
    if (cluster_msg_decode(text, len, &m, &err) != 0) {
        GPT_ASSERT(err.msg[0]);
        cluster_msg_done(&m);
        return;
    }
    GPT_ASSERT(m.type >= 0 && m.type < CLUSTER_MSG_TYPE_COUNT);
    GPT_ASSERT(m.node[0] && strlen(m.node) < CLUSTER_MSG_NODE_MAX);
    char *line = NULL;
    size_t n = 0;
    int rc = cluster_msg_encode(&m, &line, &n, &err);
    /* A metric or event may hold numbers its JSON form writes differently
     * (NaN as null): its round trip is checked for the envelope only. */
    GPT_ASSERT(rc == 0);
    GPT_ASSERT(cluster_msg_decode(line, n, &again, &err) == 0);
    GPT_ASSERT(again.type == m.type && again.present == m.present);
    GPT_ASSERT(strcmp(again.node, m.node) == 0 && again.inc == m.inc && again.req == m.req);
    GPT_ASSERT(again.op == m.op && again.uid == m.uid && again.workers == m.workers);
    GPT_ASSERT(memcmp(&again.args, &m.args, sizeof(m.args)) == 0);
    GPT_ASSERT(strcmp(again.exit_msg, m.exit_msg) == 0);
    if (m.spec)
        GPT_ASSERT(json_equal(m.spec, again.spec));
    free(line);
    cluster_msg_done(&again);
    cluster_msg_done(&m);
}

static void fuzz_reply(const char *text, size_t len)
{
    struct cluster_msg_reply r, again;
    struct gpt_err err;
    if (cluster_msg_reply_decode(text, len, &r, &err) != 0) {
        GPT_ASSERT(!r.result);
        return;
    }
    char *out = NULL;
    size_t n = 0;
    GPT_ASSERT(cluster_msg_reply_encode(&r, &out, &n, &err) == 0);
    GPT_ASSERT(cluster_msg_reply_decode(out, n, &again, &err) == 0);
    GPT_ASSERT(again.ok == r.ok && again.job == r.job && again.code == r.code);
    GPT_ASSERT(strcmp(again.message, r.message) == 0 && strcmp(again.path, r.path) == 0);
    free(out);
    cluster_msg_reply_done(&again);
    cluster_msg_reply_done(&r);
}

static void fuzz_feed(const char *text, size_t len)
{
    static struct cluster_msg_feed f;
    struct gpt_err err;
    if (cluster_msg_feed_decode(text, len, &f, &err) != 0) {
        GPT_ASSERT(!f.root && f.n == 0);
        return;
    }
    GPT_ASSERT(f.n <= CLUSTER_MSG_FEED_RECS);
    for (size_t i = 0; i < f.n; i++)
        GPT_ASSERT(f.recs[i].seq >= 1 && f.recs[i].job >= 0 && json_is_object(f.recs[i].rec));
    cluster_msg_feed_done(&f);
}

static void fuzz_head(const char *text, size_t len)
{
    uint64_t gen;
    int64_t head;
    if (cluster_msg_feed_head_decode(text, len, &gen, &head, NULL) != 0)
        return;
    GPT_ASSERT(head >= 0);
    char buf[64];
    GPT_ASSERT(cluster_msg_feed_head_encode(buf, sizeof(buf), gen, head) == 0);
    uint64_t g2;
    int64_t h2;
    GPT_ASSERT(cluster_msg_feed_head_decode(buf, strlen(buf), &g2, &h2, NULL) == 0);
    GPT_ASSERT(g2 == gen && h2 == head);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    switch (data[0] & 3) {
    case 0:
        fuzz_msg(text, len);
        break;
    case 1:
        fuzz_reply(text, len);
        break;
    case 2:
        fuzz_feed(text, len);
        break;
    default:
        fuzz_head(text, len);
        break;
    }
    return 0;
}
