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
#include <stdint.h>
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

_Static_assert(sizeof(int) == sizeof(int32_t), "token arrays are shared with the codec");

/* The prompt's tokens into tokens[0, cap): ids checked against V, or text
 * through the job's tokenizer. */
static int sample_prompt(const struct gpt_snapshot_meta *meta, const struct gpt_sample_opts *o,
                         int *tokens, size_t cap, size_t *ret_n, struct gpt_err *err)
{
    const struct gpt_vocab *v = &meta->vocab;
    size_t V = (size_t)meta->cfg.vocab_size;
    if (o->prompt_ids) {
        if (o->n_prompt_ids < 1 || o->n_prompt_ids > GPT_SAMPLE_PROMPT_IDS_MAX)
            return gpt_err_set(err, -EINVAL, "prompt_ids", "%zu token ids (give 1 to %d)",
                               o->n_prompt_ids, GPT_SAMPLE_PROMPT_IDS_MAX);
        for (size_t i = 0; i < o->n_prompt_ids; i++) {
            if (o->prompt_ids[i] < 0 || (size_t)o->prompt_ids[i] >= V)
                return gpt_err_set(err, -EINVAL, "prompt_ids",
                                   "token id %d (number %zu of the prompt) is not below the "
                                   "model's vocabulary size %zu",
                                   o->prompt_ids[i], i + 1, V);
            tokens[i] = o->prompt_ids[i];
        }
        *ret_n = o->n_prompt_ids;
        return 0;
    }
    if (v->kind == GPT_TOK_GPT2) {
        if (!o->codec)
            return gpt_err_set(err, -EINVAL, "prompt",
                               "this job's tokenizer is gpt2 but no vocabulary is at hand (the "
                               "job's data.vocab); give the prompt as token ids (--prompt-ids "
                               "15496,11)");
        return o->codec->encode(o->codec->ctx, o->prompt, (int32_t *)tokens, cap, ret_n, err);
    }
    if (v->kind < 0)
        return gpt_err_set(err, -EINVAL, "prompt",
                           "this job has no tokenizer (its shards are token ids): give the prompt "
                           "as token ids (--prompt-ids 15496,11), or set data.vocab and "
                           "data.tokenizer gpt2 on the job");
    return gpt_vocab_encode(v, o->prompt, tokens, cap, ret_n, err);
}

/* tokens[0, n) as text: through the codec for a gpt2 job, the snapshot's
 * vocabulary otherwise ("<id>" for token ids). New malloc'd string. */
static int sample_decode(const struct gpt_snapshot_meta *meta, const struct gpt_sample_opts *o,
                         const int *tokens, size_t n, char **ret, struct gpt_err *err)
{
    if (meta->vocab.kind == GPT_TOK_GPT2 && o->codec)
        return o->codec->decode(o->codec->ctx, (const int32_t *)tokens, n, ret, err);
    size_t cap = n * 16 + 1;
    char *text = malloc(cap);
    if (!text)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory for sampled text");
    struct gpt_vocab ids = meta->vocab;
    if (ids.kind == GPT_TOK_GPT2)
        ids.kind = -1; /* no codec: ids */
    gpt_vocab_decode(&ids, tokens, n, text, cap);
    *ret = text;
    return 0;
}

static bool sample_cancelled(const struct gpt_sample_opts *o)
{
    return o->cancel && atomic_load_explicit(o->cancel, memory_order_relaxed);
}

static int sample_init_cancelled(void *ctx)
{
    return sample_cancelled(ctx);
}

/* The snapshot's header into *meta, checked against the file and the
 * codec before any weight is read. Returns 0 or a negative errno with err
 * set: -GPT_E_DATA for another vocabulary, -GPT_E_CORRUPT for a header
 * whose model is not the file's. */
static int sample_read_meta(const char *snapshot_path, const struct gpt_sample_opts *o,
                            struct gpt_snapshot_meta *meta, struct gpt_err *err)
{
    int rc;
    if ((rc = gpt_snapshot_read_meta(snapshot_path, meta, err)) < 0)
        return rc;
    if (meta->vocab.kind == GPT_TOK_GPT2 && o->codec &&
        o->codec->fingerprint != meta->vocab.bpe_fingerprint)
        return gpt_err_set(err, -GPT_E_DATA, "data.vocab",
                           "the vocabulary folder is not the one snapshot %s was trained with "
                           "(fingerprint %016llx, the snapshot's %016llx)",
                           snapshot_path, (unsigned long long)o->codec->fingerprint,
                           (unsigned long long)meta->vocab.bpe_fingerprint);
    /* The header's model must be the file's: a header crafted with valid
     * checksums whose configuration names a smaller model than the weights
     * it carries would have them read past the model's buffer, a larger
     * one would allocate more than the file holds. */
    struct gpt_model lay;
    if ((rc = gpt_model_layout(&lay, &meta->cfg, err)) < 0)
        return rc;
    if (lay.n_params != meta->n_params)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "snapshot %s: its header's model (n_layer %d, n_head %d, n_embd %d, "
                           "block_size %d, vocab_size %d) has %zu parameters, the file %llu",
                           snapshot_path, meta->cfg.n_layer, meta->cfg.n_head, meta->cfg.n_embd,
                           meta->cfg.block_size, meta->cfg.vocab_size, lay.n_params,
                           (unsigned long long)meta->n_params);
    return 0;
}

/* The token a sample without a prompt starts from: a newline when the
 * vocabulary has one, <|endoftext|> (GPT-2's last token) for gpt2, else 0. */
static int sample_start_token(const struct gpt_vocab *vocab)
{
    int start = vocab->kind == GPT_TOK_GPT2 ? vocab->size - 1 : 0;
    for (int v = 0;
         vocab->kind >= 0 && vocab->kind != GPT_TOK_GPT2 && v < vocab->size && v < GPT_VOCAB_MAX;
         v++)
        if (vocab->chars[v] == '\n')
            start = v;
    return start;
}

/* The snapshot's weights into the model made from *meta. The file may
 * have been replaced since its header was read: the one read now must
 * describe the same model, whose shapes size the sampling buffers; *meta
 * becomes its header. Returns 0 or a negative errno with err set. */
static int sample_read_weights(const char *snapshot_path, struct gpt_model *model,
                               struct gpt_snapshot_meta *meta, struct gpt_err *err)
{
    struct gpt_snapshot_meta now;
    int rc = gpt_snapshot_read_sized(snapshot_path, model->n_params, &now, model->params, NULL,
                                     NULL, err);
    if (rc < 0)
        return rc;
    if (memcmp(&now.cfg, &meta->cfg, sizeof(meta->cfg)) != 0)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "snapshot %s was replaced by another model's while it was read",
                           snapshot_path);
    *meta = now;
    return 0;
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
    char *text = NULL, *gen = NULL;
    int rc;

    memset(&model, 0, sizeof(model));
    if (o->tokens < 0 || !(o->temperature > 0))
        return gpt_err_set(err, -EINVAL, NULL, "tokens must be >= 0 and temperature > 0");
    if ((rc = sample_read_meta(snapshot_path, o, &meta, err)) < 0)
        return rc;
    if (sample_cancelled(o))
        return gpt_err_set(err, -ECANCELED, NULL, "sampling cancelled before the model was read");
    if ((rc = gpt_backend_cpu_new(o->threads > 0 ? o->threads : 1, &be, err)) < 0)
        return rc;
    /* A large model takes seconds to allocate and zero: a cancel is seen
     * between its allocations too. */
    if ((rc = gpt_model_init_cancellable(&model, &meta.cfg, be, 1, NULL, sample_init_cancelled,
                                         (void *)o, err)) < 0)
        goto out;
    model_ready = true;
    if ((rc = sample_read_weights(snapshot_path, &model, &meta, err)) < 0)
        goto out;

    size_t prompt_len = o->prompt ? strlen(o->prompt) : 0;
    size_t prompt_cap = o->prompt_ids ? o->n_prompt_ids : prompt_len;
    size_t cap = prompt_cap + (size_t)o->tokens + 1;
    size_t n = 0, V = (size_t)meta.cfg.vocab_size, T = (size_t)meta.cfg.block_size;
    tokens = calloc(cap, sizeof(int));
    logits = calloc(T * model.Vp, sizeof(float));
    probs = calloc(model.Vp, sizeof(float));
    if (!tokens || !logits || !probs) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory for sampling");
        goto out;
    }
    if (o->prompt_ids || prompt_len > 0) {
        if ((rc = sample_prompt(&meta, o, tokens, prompt_cap, &n, err)) < 0)
            goto out;
    }
    if (n == 0)
        tokens[n++] = sample_start_token(&meta.vocab);
    size_t n_prompt = n;
    struct gpt_rng rng;
    gpt_rng_seed(&rng, o->seed);
    for (int i = 0; i < o->tokens; i++) {
        if (sample_cancelled(o)) {
            rc = gpt_err_set(err, -ECANCELED, NULL, "sampling cancelled after %d of %d tokens", i,
                             o->tokens);
            goto out;
        }
        size_t ctx = n < T ? n : T;
        if ((rc = gpt_model_forward(&model, tokens + n - ctx, NULL, 1, ctx, NULL)) < 0)
            goto out;
        if ((rc = gpt_backend_download(be, logits, gpt_model_logits(&model),
                                       ctx * model.Vp * sizeof(float))) < 0)
            goto out;
        tokens[n++] =
            sample_token(logits + (ctx - 1) * model.Vp, V, o->temperature, o->top_k, &rng, probs);
    }
    /* A text prompt is given back as written; ids are decoded with the rest. */
    size_t first = o->prompt_ids ? 0 : n_prompt;
    if ((rc = sample_decode(&meta, o, tokens + first, n - first, &gen, err)) < 0)
        goto out;
    size_t head = o->prompt_ids ? 0 : prompt_len, gen_len = strlen(gen);
    text = malloc(head + gen_len + 1);
    if (!text) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory for sampled text");
        goto out;
    }
    if (head)
        memcpy(text, o->prompt, head);
    memcpy(text + head, gen, gen_len + 1);
    *ret_text = text;
    text = NULL;
    rc = 0;
out:
    free(text);
    free(gen);
    free(tokens);
    free(logits);
    free(probs);
    if (model_ready)
        gpt_model_done(&model);
    gpt_backend_free(be);
    return rc;
}
