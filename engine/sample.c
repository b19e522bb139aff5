/*
 * sample: text from a snapshot (gpt_sample_snapshot, declared in
 * trainer.h): the model is rebuilt on a CPU backend from the snapshot's
 * configuration, and tokens are drawn one at a time with temperature and
 * top-k. Runs on the caller's thread; owns everything it allocates.
 */
#include "trainer.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "data.h"
#include "model.h"
#include "rng.h"
#include "snapshot.h"

/* Index of the sampled token from logits[0, V) with temperature and top-k. */
static int sample_token(const float *logits, size_t V, double temperature, int top_k,
                        struct gpt_rng *rng, float *probs)
{
    float maxv = logits[0];
    for (size_t v = 1; v < V; v++)
        if (logits[v] > maxv)
            maxv = logits[v];
    float kth = -INFINITY;
    if (top_k > 0 && (size_t)top_k < V) {
        /* The k-th largest value: partial selection on a copy. */
        for (size_t v = 0; v < V; v++)
            probs[v] = logits[v];
        for (int k = 0; k < top_k; k++) {
            size_t best = 0;
            for (size_t v = 1; v < V; v++)
                if (probs[v] > probs[best])
                    best = v;
            kth = probs[best];
            probs[best] = -INFINITY;
        }
    }
    double sum = 0;
    for (size_t v = 0; v < V; v++) {
        double p = logits[v] < kth ? 0.0 : exp((logits[v] - maxv) / temperature);
        probs[v] = (float)p;
        sum += p;
    }
    double u = gpt_rng_uniform(rng) * sum, acc = 0;
    for (size_t v = 0; v < V; v++) {
        acc += probs[v];
        if (u < acc)
            return (int)v;
    }
    return (int)(V - 1);
}

int gpt_sample_snapshot(const char *snapshot_path, const struct gpt_sample_opts *o, char **ret_text,
                        struct gpt_err *err)
{
    struct gpt_snapshot_meta meta;
    struct gpt_backend *be = NULL;
    struct gpt_model model;
    bool model_ready = false;
    int *tokens = NULL;
    float *logits = NULL, *probs = NULL;
    char *text = NULL;
    int rc;

    memset(&model, 0, sizeof(model));
    if (o->tokens < 0 || !(o->temperature > 0))
        return gpt_err_set(err, -EINVAL, NULL, "tokens must be >= 0 and temperature > 0");
    if ((rc = gpt_snapshot_read_meta(snapshot_path, &meta, err)) < 0)
        return rc;
    if ((rc = gpt_backend_cpu_new(o->threads > 0 ? o->threads : 1, &be, err)) < 0)
        return rc;
    if ((rc = gpt_model_init(&model, &meta.cfg, be, 1, err)) < 0)
        goto out;
    model_ready = true;
    if ((rc = gpt_snapshot_read(snapshot_path, &meta, model.params, NULL, NULL, err)) < 0)
        goto out;

    size_t prompt_len = o->prompt ? strlen(o->prompt) : 0;
    size_t cap = prompt_len + (size_t)o->tokens + 1;
    size_t n = 0, V = (size_t)meta.cfg.vocab_size, T = (size_t)meta.cfg.block_size;
    tokens = calloc(cap, sizeof(int));
    logits = calloc(T * model.Vp, sizeof(float));
    probs = calloc(model.Vp, sizeof(float));
    if (!tokens || !logits || !probs) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory for sampling");
        goto out;
    }
    if (prompt_len > 0) {
        if ((rc = gpt_vocab_encode(&meta.vocab, o->prompt, tokens, cap, &n, err)) < 0)
            goto out;
    } else {
        /* No prompt: start from a newline when the vocabulary has one. */
        int start = 0;
        for (int v = 0; meta.vocab.kind >= 0 && v < meta.vocab.size; v++)
            if (meta.vocab.chars[v] == '\n')
                start = v;
        tokens[n++] = start;
    }
    size_t n_prompt = n;
    struct gpt_rng rng;
    gpt_rng_seed(&rng, o->seed);
    for (int i = 0; i < o->tokens; i++) {
        size_t ctx = n < T ? n : T;
        if ((rc = gpt_model_forward(&model, tokens + n - ctx, NULL, 1, ctx, NULL)) < 0)
            goto out;
        if ((rc = gpt_backend_download(be, logits, gpt_model_logits(&model),
                                       ctx * model.Vp * sizeof(float))) < 0)
            goto out;
        tokens[n++] =
            sample_token(logits + (ctx - 1) * model.Vp, V, o->temperature, o->top_k, &rng, probs);
    }
    size_t text_cap = (n + 1) * 8 + prompt_len + 1;
    text = malloc(text_cap);
    if (!text) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory for sampled text");
        goto out;
    }
    size_t off = 0;
    if (prompt_len > 0) {
        memcpy(text, o->prompt, prompt_len);
        off = prompt_len;
    }
    gpt_vocab_decode(&meta.vocab, tokens + n_prompt, n - n_prompt, text + off, text_cap - off);
    *ret_text = text;
    text = NULL;
    rc = 0;
out:
    free(text);
    free(tokens);
    free(logits);
    free(probs);
    if (model_ready)
        gpt_model_done(&model);
    gpt_backend_free(be);
    return rc;
}
