/*
 * fuzz_round_doc: libFuzzer target for the round documents (proto/
 * round_doc.h). The first input byte picks the decoder (a round or world
 * document, or the node table); the rest is the text. Whatever decodes is
 * encoded again and must decode to the same thing: the codec refuses
 * nothing it produced. Single-threaded.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "round_doc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_members_equal(const struct round_member *a, const struct round_member *b)
{
    GPT_ASSERT(strcmp(a->id, b->id) == 0 && a->inc == b->inc && a->rank_base == b->rank_base);
    GPT_ASSERT(a->workers == b->workers && strcmp(a->addr, b->addr) == 0);
}

static void fuzz_round(const char *text, size_t len)
{
    struct round_doc d, again;
    struct gpt_err err;
    if (round_doc_decode(text, len, &d, &err) != 0) {
        GPT_ASSERT(err.msg[0] && !d.spec && !d.nodes.v);
        return;
    }
    json_t *o = round_doc_to_json(&d);
    GPT_ASSERT(o);
    char *out = json_dumps(o, JSON_COMPACT);
    GPT_ASSERT(out);
    GPT_ASSERT(round_doc_decode(out, strlen(out), &again, &err) == 0);
    GPT_ASSERT(again.gen == d.gen && again.round == d.round && again.job == d.job);
    GPT_ASSERT(strcmp(again.phase, d.phase) == 0 && again.stop_snapshot == d.stop_snapshot);
    GPT_ASSERT(again.run_id == d.run_id && again.world == d.world);
    GPT_ASSERT(strcmp(again.prefix, d.prefix) == 0 && strcmp(again.closed, d.closed) == 0);
    GPT_ASSERT(!again.spec == !d.spec && (!d.spec || strcmp(again.spec, d.spec) == 0));
    GPT_ASSERT(again.uid == d.uid && again.token == d.token);
    GPT_ASSERT(again.resume_step == d.resume_step && again.has_me == d.has_me);
    if (d.has_me)
        fuzz_members_equal(&again.me, &d.me);
    GPT_ASSERT(again.nodes.present == d.nodes.present && again.nodes.n == d.nodes.n);
    for (size_t i = 0; i < d.nodes.n; i++)
        fuzz_members_equal(&again.nodes.v[i], &d.nodes.v[i]);
    free(out);
    json_decref(o);
    round_doc_done(&again);
    round_doc_done(&d);
}

static void fuzz_nodes(const char *text, size_t len)
{
    struct round_node *rows, *again;
    size_t n, n2;
    struct gpt_err err;
    if (round_nodes_decode(text, len, &rows, &n, &err) != 0) {
        GPT_ASSERT(err.msg[0]);
        return;
    }
    json_t *a = round_nodes_to_json(rows, n);
    GPT_ASSERT(a);
    char *out = json_dumps(a, JSON_COMPACT);
    GPT_ASSERT(out);
    GPT_ASSERT(round_nodes_decode(out, strlen(out), &again, &n2, &err) == 0 && n2 == n);
    for (size_t i = 0; i < n; i++) {
        const struct round_node *x = &rows[i], *y = &again[i];
        GPT_ASSERT(strcmp(x->node, y->node) == 0 && strcmp(x->state, y->state) == 0);
        GPT_ASSERT(x->workers == y->workers && x->member == y->member && x->job == y->job);
        GPT_ASSERT(strcmp(x->version, y->version) == 0 && strcmp(x->addr, y->addr) == 0);
        GPT_ASSERT(strcmp(x->devices, y->devices) == 0 && strcmp(x->ranks, y->ranks) == 0);
        GPT_ASSERT(strcmp(x->role, y->role) == 0 && !x->gpus == !y->gpus);
        GPT_ASSERT(!x->gpus || json_equal(x->gpus, y->gpus));
    }
    free(out);
    json_decref(a);
    round_nodes_free(again, n2);
    round_nodes_free(rows, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *text = (const char *)data + 1;
    if (data[0] & 1)
        fuzz_nodes(text, size - 1);
    else
        fuzz_round(text, size - 1);
    return 0;
}
