/*
 * model: the GPT-2 / minGPT model: configuration, the one-buffer parameter
 * layout carved by a size table, activations allocated once, forward and
 * backward through the backend interface (engine/ops/backend.h).
 *
 * A struct gpt_model belongs to one worker thread. Nothing here logs or
 * exits; failures are returned.
 *
 * Parameter layout is layer-major so that each transformer block's
 * parameters (and gradients) are one contiguous span, which is what
 * gradient buckets (DDP) and per-block gathers (FSDP) need:
 *   wte (Vp, C), wpe (maxT, C),
 *   block 0: ln1w (C), ln1b (C), qkvw (3C, C), qkvb (3C), attprojw (C, C),
 *            attprojb (C), ln2w (C), ln2b (C), fcw (4C, C), fcb (4C),
 *            fcprojw (C, 4C), fcprojb (C),
 *   block 1 ... block L-1,
 *   lnfw (C), lnfb (C).
 * The LM head is tied to wte. Rows of wte past vocab_size (padding to Vp)
 * stay zero and never affect loss or sampling.
 */
#ifndef GPT_MODEL_H
#define GPT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "gpt_config.h"
#include "gpt_err.h"

struct gpt_backend;

/* One named parameter tensor inside the flat buffer. */
struct gpt_tensor_info {
    const char *name; /* "wte", "h.3.attn.qkvw", ... (static storage) */
    size_t offset;    /* in floats, into params/grads/m/v */
    size_t count;
    int ndim;  /* 2 for matrices (weight decay applies), 1 otherwise */
    int layer; /* block index, -1 for embeddings, L for the final LN */
};

#define GPT_MAX_TENSORS 512
/* Parameter units of a transformer block under full sharding: attention
 * (ln1, qkv, attention projection), the MLP's first product (ln2, fc) and
 * its second (fc projection), about 4 C^2 floats each, so the gathered
 * buffer is a third of a block. */
#define GPT_BLOCK_UNITS 3
#define GPT_MAX_UNITS   128 /* embeddings + 3 x up to 42 blocks + final LN, rounded up */

/* Sharded (FSDP-style) training: the model asks for each parameter unit
 * just before it reads it and says when it is done, instead of reading the
 * flat buffers. Units: 0 = embeddings (wte, wpe), then GPT_BLOCK_UNITS per
 * block (block l's part k is unit 1 + l * GPT_BLOCK_UNITS + k), and the
 * last, N-1 = final LayerNorm (N = gpt_model_num_units). A unit's buffers
 * are laid out like its span of the flat buffer (gpt_model_unit_span). All
 * callbacks run on the worker thread inside forward/backward. The order
 * is fixed: forward uses units 0, 1..N-1, 0 (the tied LM head); backward
 * uses 0 (LM head), N-1, N-2..1, then 0 again (embedding backward) before
 * releasing it. Besides unit 0, at most one unit is acquired at a time. */
struct gpt_model_units {
    void *ctx;
    /* Full parameters of `unit` for this pass (0 forward, 1 backward),
     * backend memory, valid until release. NULL = failure (forward or
     * backward then returns -EIO). */
    const float *(*fetch)(void *ctx, int unit, int pass);
    /* Zeroed gradient buffer of `unit` for this backward (called once per
     * unit per backward, before the first gradient is written). */
    float *(*grads)(void *ctx, int unit);
    /* The model is done with `unit` for this pass; in backward its
     * gradients are final. Returns 0 or a negative error. */
    int (*release)(void *ctx, int unit, int pass);
};

struct gpt_model {
    struct gpt_model_config cfg;
    size_t Vp;              /* vocab padded (multiple of 64 when vocab > 64) */
    size_t max_B;           /* activations are sized for (max_B, block_size) */
    struct gpt_backend *be; /* borrowed */

    size_t n_params;
    float *params; /* (n_params) each in backend memory, same layout */
    float *grads;
    float *m; /* AdamW first moment; NULL until gpt_model_alloc_optim */
    float *v; /* AdamW second moment */
    /* (2) doubles in backend memory, a step's results kept on the device
     * (gpt_backend_step_on_device; NULL without, or before
     * gpt_model_alloc_optim): [0] the weighted loss sum of
     * gpt_model_forward_train_acc, [1] the gradients' sum of squares of
     * gpt_grad_sumsq_dev, read together by gpt_model_step_fetch. */
    double *step_dev;
    /* Set by the owner: gpt_model_backward returns with its work enqueued
     * instead of synchronising the backend (a later download waits). */
    int backward_async;

    size_t n_tensors;
    struct gpt_tensor_info tensors[GPT_MAX_TENSORS];

    /* Called from backward (on the worker thread) as soon as the gradients
     * of the span [offset, offset+count) are final for this micro-batch.
     * Spans arrive in order: final LN, block L-1 ... block 0, embeddings. */
    void (*grads_ready)(void *ctx, size_t offset, size_t count);
    void *grads_ready_ctx;

    /* Optional (gpt_model_init_cancellable): polled between the set-up's
     * allocations and by gpt_model_init_weights_host between chunks of
     * values; nonzero stops them early (-ECANCELED; initial weights are
     * then incomplete and must be discarded). Worker thread. */
    int (*init_cancelled)(void *ctx);
    void *init_cancelled_ctx;

    struct gpt_model_acts *acts; /* private to model.c */
    size_t act_bytes;            /* activation memory, for metrics */

    /* NULL: parameters and gradients are the flat buffers above. Set by
     * the owner for sharded training (gpt_model_init_sharded). */
    const struct gpt_model_units *units;
    const float *unit_p[GPT_MAX_UNITS]; /* private: current unit bases */
    float *unit_g[GPT_MAX_UNITS];
};

/* Validates cfg (n_embd % n_head == 0, ...), computes the layout, allocates
 * params and grads (zeroed) and activations for batches up to max_B. */
int gpt_model_init(struct gpt_model *m, const struct gpt_model_config *cfg, struct gpt_backend *be,
                   size_t max_B, struct gpt_err *err);
/* Like gpt_model_init, but allocates no flat params/grads (they stay NULL):
 * parameters and gradients come through `units`, which must stay valid
 * while the model is used. For FSDP-style sharding. */
int gpt_model_init_sharded(struct gpt_model *m, const struct gpt_model_config *cfg,
                           struct gpt_backend *be, size_t max_B,
                           const struct gpt_model_units *units, struct gpt_err *err);

/* As gpt_model_init (units NULL) or gpt_model_init_sharded, polling
 * cancelled(ctx) between allocations (each is zeroed: seconds for a large
 * model) and later in gpt_model_init_weights_host; returns -ECANCELED, with
 * nothing left allocated, when it answers nonzero. */
int gpt_model_init_cancellable(struct gpt_model *m, const struct gpt_model_config *cfg,
                               struct gpt_backend *be, size_t max_B,
                               const struct gpt_model_units *units, int (*cancelled)(void *ctx),
                               void *ctx, struct gpt_err *err);

/* Fills only m's config, Vp, tensor table and n_params for cfg (checked
 * as gpt_model_init checks it), with no backend and no memory: the layout
 * that the file formats (engine/fmt) read and write parameters in. m needs
 * no gpt_model_done. */
int gpt_model_layout(struct gpt_model *m, const struct gpt_model_config *cfg, struct gpt_err *err);

/* Number of parameter units (GPT_BLOCK_UNITS x L + 2) and the flat span
 * of one. */
int gpt_model_num_units(const struct gpt_model *m);
void gpt_model_unit_span(const struct gpt_model *m, int unit, size_t *ret_off, size_t *ret_count);

/* GPT-2 initialisation into a host buffer of n_params floats (the flat
 * layout), for owners that keep parameters elsewhere. */
void gpt_model_init_weights_host(const struct gpt_model *m, uint64_t seed, float *host);

/* Frees everything; safe on a zeroed or half-initialised model. */
void gpt_model_done(struct gpt_model *m);
/* Allocates the AdamW moments (zeroed), and step_dev on a backend with
 * the step-on-device ops. */
int gpt_model_alloc_optim(struct gpt_model *m, struct gpt_err *err);

/* GPT-2 initialisation: N(0, 0.02), residual projections (attprojw,
 * fcprojw) N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1. */
void gpt_model_init_weights(struct gpt_model *m, uint64_t seed);

/* Forward on tokens (B, T), B <= max_B, T <= block_size. With targets
 * (B, T) (entries < 0 are ignored), computes the mean cross-entropy over
 * non-ignored positions into *ret_loss and keeps what backward needs;
 * without targets, only logits are computed (see gpt_model_logits). */
int gpt_model_forward(struct gpt_model *m, const int *inputs, const int *targets, size_t B,
                      size_t T, float *ret_loss);

/* gpt_model_forward with targets for a training step: the classifier
 * computes the loss and the dlogits for `loss_scale` in one pass over the
 * vocabulary, so the backward that must follow (gpt_model_backward with
 * the same loss_scale, else it returns -EINVAL) starts from them. The
 * logits are not kept (gpt_model_logits then reads dlogits). Loss and
 * gradients are those of gpt_model_forward then gpt_model_backward. */
int gpt_model_forward_train(struct gpt_model *m, const int *inputs, const int *targets, size_t B,
                            size_t T, float loss_scale, float *ret_loss);

/* gpt_model_forward_train whose loss stays on the device (m->step_dev
 * set): loss_weight times this batch's mean loss (over targets >= 0; 0
 * when there are none) is added to step_dev[0], or stored there when
 * `first` (the step's first micro-batch). The trainer passes the
 * micro-batch's sequences as weight, so step_dev[0] becomes the sum it
 * formed on the host before. Does not synchronise. */
int gpt_model_forward_train_acc(struct gpt_model *m, const int *inputs, const int *targets,
                                size_t B, size_t T, float loss_scale, double loss_weight,
                                int first);

/* The step's results (m->step_dev set) in one download, which waits for
 * every op enqueued: the loss sum of gpt_model_forward_train_acc and the
 * sum of squares of gpt_grad_sumsq_dev. 0, or the backend's error (a
 * sticky device failure surfaces here). Worker thread; blocks. */
int gpt_model_step_fetch(struct gpt_model *m, double *ret_loss_sum, double *ret_sumsq);

/* Logits of the last forward, (B, T, Vp), backend memory. */
const float *gpt_model_logits(const struct gpt_model *m);

/* Backward of the last forward with targets. Parameter gradients are
 * ACCUMULATED into m->grads, scaled by `loss_scale` (use 1/accum_steps
 * for gradient accumulation). Calls grads_ready per span. Synchronises
 * the backend at the end unless m->backward_async. */
int gpt_model_backward(struct gpt_model *m, float loss_scale);

void gpt_model_zero_grad(struct gpt_model *m);
/* gpt_model_zero_grad for a step whose next gradient write is a
 * backward: nothing is zeroed now; that backward overwrites the gradients
 * instead of accumulating into them (no pass over the whole buffer; a
 * backend that cannot overwrite zeroes them then), and later backwards
 * accumulate as usual. Until that backward the buffer holds stale values:
 * read nothing from it. Not for sharded models (units). */
void gpt_model_zero_grad_deferred(struct gpt_model *m);

/* Span of block `layer` (0..L-1) in the flat layout. */
void gpt_model_block_span(const struct gpt_model *m, int layer, size_t *ret_off, size_t *ret_count);

/* Model FLOPs of one token, forward plus backward, as llm.c counts them:
 * 6 N + 6 L C T, N every trained parameter (wpe and the padded vocabulary
 * rows included): 803,478,528 for GPT-2 124M at T 1024. The one count
 * behind every FLOPs and MFU figure: the trainer's mfu metric (and so
 * /metrics and the dashboard), bench_gpu_train and its cost model. Works
 * on a gpt_model_layout model. Pure. */
double gpt_model_flops_per_token(const struct gpt_model *m, size_t T);

#endif
