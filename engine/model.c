/*
 * model: the GPT-2 / minGPT model over the backend interface. Owns the
 * parameter, gradient and AdamW-moment buffers (one backend allocation
 * each, same layer-major layout, carved by the tensor table) and the
 * activations, which are allocated once in gpt_model_init for
 * (max_B, block_size) so that forward and backward never allocate.
 *
 * A struct gpt_model belongs to one worker thread. No logging, no exit.
 */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "rng.h"

/* Tensors of one transformer block, in layout order. */
enum model_blk {
    BLK_LN1W,
    BLK_LN1B,
    BLK_QKVW,
    BLK_QKVB,
    BLK_ATTPROJW,
    BLK_ATTPROJB,
    BLK_LN2W,
    BLK_LN2B,
    BLK_FCW,
    BLK_FCB,
    BLK_FCPROJW,
    BLK_FCPROJB,
    BLK_COUNT
};

/* Tensor-table indices outside the blocks. */
#define T_WTE            0
#define T_WPE            1
#define T_BLK(l, k)      (2 + (size_t)(l)*BLK_COUNT + (k))
#define T_LNFW(L)        (2 + (size_t)(L)*BLK_COUNT)
#define T_LNFB(L)        (3 + (size_t)(L)*BLK_COUNT)
#define MODEL_MAX_LAYERS ((GPT_MAX_TENSORS - 4) / BLK_COUNT) /* 42 */
_Static_assert(MODEL_MAX_LAYERS *GPT_BLOCK_UNITS + 2 <= GPT_MAX_UNITS,
               "every unit of the largest model fits GPT_MAX_UNITS");
_Static_assert(MODEL_MAX_LAYERS == GPT_JOB_N_LAYER_MAX,
               "gpt_config.h's layer limit is the model's");

/* Tensor names live in static storage, so the table is spelled out for every
 * layer the tensor table can hold. */
#define LAYER_NAMES(l)                                                                             \
    "h." #l ".ln1w", "h." #l ".ln1b", "h." #l ".attn.qkvw", "h." #l ".attn.qkvb",                  \
        "h." #l ".attn.projw", "h." #l ".attn.projb", "h." #l ".ln2w", "h." #l ".ln2b",            \
        "h." #l ".mlp.fcw", "h." #l ".mlp.fcb", "h." #l ".mlp.projw", "h." #l ".mlp.projb"
static const char *const model_layer_names[MODEL_MAX_LAYERS][BLK_COUNT] = {
    {LAYER_NAMES(0)},  {LAYER_NAMES(1)},  {LAYER_NAMES(2)},  {LAYER_NAMES(3)},  {LAYER_NAMES(4)},
    {LAYER_NAMES(5)},  {LAYER_NAMES(6)},  {LAYER_NAMES(7)},  {LAYER_NAMES(8)},  {LAYER_NAMES(9)},
    {LAYER_NAMES(10)}, {LAYER_NAMES(11)}, {LAYER_NAMES(12)}, {LAYER_NAMES(13)}, {LAYER_NAMES(14)},
    {LAYER_NAMES(15)}, {LAYER_NAMES(16)}, {LAYER_NAMES(17)}, {LAYER_NAMES(18)}, {LAYER_NAMES(19)},
    {LAYER_NAMES(20)}, {LAYER_NAMES(21)}, {LAYER_NAMES(22)}, {LAYER_NAMES(23)}, {LAYER_NAMES(24)},
    {LAYER_NAMES(25)}, {LAYER_NAMES(26)}, {LAYER_NAMES(27)}, {LAYER_NAMES(28)}, {LAYER_NAMES(29)},
    {LAYER_NAMES(30)}, {LAYER_NAMES(31)}, {LAYER_NAMES(32)}, {LAYER_NAMES(33)}, {LAYER_NAMES(34)},
    {LAYER_NAMES(35)}, {LAYER_NAMES(36)}, {LAYER_NAMES(37)}, {LAYER_NAMES(38)}, {LAYER_NAMES(39)},
    {LAYER_NAMES(40)}, {LAYER_NAMES(41)},
};

/* Activations. Per-layer buffers hold L slices, each packed for the batch
 * of the current forward (B*T rows), like llm.c. All backend memory except
 * the host copies at the end. */
struct gpt_model_acts {
    int *tokens;      /* (B,T) */
    int *targets;     /* (B,T) */
    float *encoded;   /* (B,T,C) */
    float *ln1;       /* (L,B,T,C) */
    float *ln1_mean;  /* (L,B,T) */
    float *ln1_rstd;  /* (L,B,T) */
    float *qkv;       /* (L,B,T,3C) */
    float *atty;      /* (L,B,T,C) */
    float *att;       /* (L,B,NH,T,T) softmax probabilities */
    float *residual2; /* (L,B,T,C) */
    float *ln2;       /* (L,B,T,C) */
    float *ln2_mean;  /* (L,B,T) */
    float *ln2_rstd;  /* (L,B,T) */
    float *fch;       /* (L,B,T,4C) */
    float *fch_gelu;  /* (L,B,T,4C) */
    float *residual3; /* (L,B,T,C) */
    float *lnf;       /* (B,T,C) */
    float *lnf_mean;  /* (B,T) */
    float *lnf_rstd;  /* (B,T) */
    float *logits;    /* (B,T,Vp); dlogits in place after backward */
    float *losses;    /* (B,T) */
    /* backward workspace */
    float *dres;        /* (B,T,C) gradient of the residual stream */
    float *dc;          /* (B,T,C) */
    float *d4c;         /* (B,T,4C), also dqkv (B,T,3C) */
    float *datt;        /* (B,NH,T,T) */
    float *slab;        /* the one float allocation everything above is carved from */
    size_t slab_floats; /* its size */
    float *host_losses; /* (B,T) host memory */
    /* state of the last forward */
    size_t B, T;
    size_t n_valid;
    int have_targets; /* a forward with targets ran and backward has not */
    /* That forward was gpt_model_forward_train: the logits buffer already
     * holds dlogits for backward's loss_scale of dlogits_scale. */
    int have_dlogits;
    float dlogits_scale;
    /* gpt_model_zero_grad_deferred: the next backward overwrites grads. */
    int grads_stale;
};

static size_t model_round_up(size_t x, size_t to)
{
    return (x + to - 1) / to * to;
}

/* The first tensor of each of a block's parameter units (GPT_BLOCK_UNITS):
 * attention, the MLP's first product, its second. */
static const int model_blk_unit_first[GPT_BLOCK_UNITS + 1] = {BLK_LN1W, BLK_LN2W, BLK_FCPROJW,
                                                              BLK_COUNT};

/* Unit of block l's part k. */
static int model_blk_unit(size_t l, int k)
{
    return 1 + (int)l * GPT_BLOCK_UNITS + k;
}

/* The unit holding tensor `idx`: 0 embeddings, then the blocks' parts,
 * the last the final LN. */
static int model_unit_of(const struct gpt_model *m, size_t idx)
{
    int layer = m->tensors[idx].layer;
    if (layer < 0)
        return 0;
    if (layer >= m->cfg.n_layer)
        return gpt_model_num_units(m) - 1;
    int k = (int)((idx - T_BLK(layer, 0)) % BLK_COUNT), part = 0;
    while (k >= model_blk_unit_first[part + 1])
        part++;
    return model_blk_unit((size_t)layer, part);
}

static size_t model_unit_first(const struct gpt_model *m, int unit)
{
    size_t L = (size_t)m->cfg.n_layer;
    if (unit == 0)
        return T_WTE;
    if (unit == gpt_model_num_units(m) - 1)
        return T_LNFW(L);
    return T_BLK((unit - 1) / GPT_BLOCK_UNITS, model_blk_unit_first[(unit - 1) % GPT_BLOCK_UNITS]);
}

static size_t model_unit_last(const struct gpt_model *m, int unit)
{
    size_t L = (size_t)m->cfg.n_layer;
    if (unit == 0)
        return T_WPE;
    if (unit == gpt_model_num_units(m) - 1)
        return T_LNFB(L);
    return T_BLK((unit - 1) / GPT_BLOCK_UNITS,
                 model_blk_unit_first[(unit - 1) % GPT_BLOCK_UNITS + 1] - 1);
}

/* Parameters of tensor idx: in the flat buffer, or in its unit's fetched
 * copy under sharding. */
static float *model_param(const struct gpt_model *m, size_t idx)
{
    if (!m->units)
        return m->params + m->tensors[idx].offset;
    int u = model_unit_of(m, idx);
    size_t base = m->tensors[model_unit_first(m, u)].offset;
    GPT_ASSERT(m->unit_p[u] != NULL);
    return (float *)m->unit_p[u] + (m->tensors[idx].offset - base);
}

static float *model_grad(const struct gpt_model *m, size_t idx)
{
    if (!m->units)
        return m->grads + m->tensors[idx].offset;
    int u = model_unit_of(m, idx);
    size_t base = m->tensors[model_unit_first(m, u)].offset;
    GPT_ASSERT(m->unit_g[u] != NULL);
    return m->unit_g[u] + (m->tensors[idx].offset - base);
}

/* Makes unit u's parameters (and in backward its gradients) available.
 * A no-op on flat buffers. */
static int model_unit_acquire(struct gpt_model *m, int u, int pass)
{
    if (!m->units)
        return 0;
    m->unit_p[u] = m->units->fetch(m->units->ctx, u, pass);
    if (!m->unit_p[u])
        return -EIO;
    if (pass == 1 && !m->unit_g[u]) {
        m->unit_g[u] = m->units->grads(m->units->ctx, u);
        if (!m->unit_g[u])
            return -EIO;
    }
    return 0;
}

static int model_unit_release(struct gpt_model *m, int u, int pass)
{
    if (!m->units)
        return 0;
    m->unit_p[u] = NULL;
    if (pass == 1)
        m->unit_g[u] = NULL;
    return m->units->release(m->units->ctx, u, pass);
}

static void model_add_tensor(struct gpt_model *m, const char *name, size_t count, int ndim,
                             int layer)
{
    GPT_ASSERT(m->n_tensors < GPT_MAX_TENSORS);
    struct gpt_tensor_info *t = &m->tensors[m->n_tensors++];
    t->name = name;
    t->offset = m->n_params;
    t->count = count;
    t->ndim = ndim;
    t->layer = layer;
    m->n_params += count;
}

static void model_layout(struct gpt_model *m)
{
    size_t C = (size_t)m->cfg.n_embd, L = (size_t)m->cfg.n_layer;
    m->n_params = 0;
    m->n_tensors = 0;
    model_add_tensor(m, "wte", m->Vp * C, 2, -1);
    model_add_tensor(m, "wpe", (size_t)m->cfg.block_size * C, 2, -1);
    for (size_t l = 0; l < L; l++) {
        const char *const *nm = model_layer_names[l];
        int li = (int)l;
        model_add_tensor(m, nm[BLK_LN1W], C, 1, li);
        model_add_tensor(m, nm[BLK_LN1B], C, 1, li);
        model_add_tensor(m, nm[BLK_QKVW], 3 * C * C, 2, li);
        model_add_tensor(m, nm[BLK_QKVB], 3 * C, 1, li);
        model_add_tensor(m, nm[BLK_ATTPROJW], C * C, 2, li);
        model_add_tensor(m, nm[BLK_ATTPROJB], C, 1, li);
        model_add_tensor(m, nm[BLK_LN2W], C, 1, li);
        model_add_tensor(m, nm[BLK_LN2B], C, 1, li);
        model_add_tensor(m, nm[BLK_FCW], 4 * C * C, 2, li);
        model_add_tensor(m, nm[BLK_FCB], 4 * C, 1, li);
        model_add_tensor(m, nm[BLK_FCPROJW], 4 * C * C, 2, li);
        model_add_tensor(m, nm[BLK_FCPROJB], C, 1, li);
    }
    model_add_tensor(m, "lnfw", C, 1, (int)L);
    model_add_tensor(m, "lnfb", C, 1, (int)L);
}

static int model_check_config(const struct gpt_model_config *cfg, size_t max_B, struct gpt_err *err)
{
    if (cfg->n_layer < 1 || cfg->n_layer > MODEL_MAX_LAYERS)
        return gpt_err_set(err, -EINVAL, "model.n_layer", "must be 1..%d, got %d", MODEL_MAX_LAYERS,
                           cfg->n_layer);
    if (cfg->n_head < 1 || cfg->n_embd < 1 || cfg->n_embd > 65536)
        return gpt_err_set(err, -EINVAL, "model.n_embd",
                           "n_embd (%d) and n_head (%d) must be positive", cfg->n_embd,
                           cfg->n_head);
    if (cfg->n_embd % cfg->n_head != 0)
        return gpt_err_set(err, -EINVAL, "model.n_head",
                           "n_embd (%d) must be a multiple of n_head (%d)", cfg->n_embd,
                           cfg->n_head);
    if (cfg->block_size < 1 || cfg->block_size > 65536)
        return gpt_err_set(err, -EINVAL, "model.block_size", "must be 1..65536, got %d",
                           cfg->block_size);
    if (cfg->vocab_size < 1 || cfg->vocab_size > (1 << 24))
        return gpt_err_set(err, -EINVAL, "model.vocab_size", "must be 1..%d, got %d", 1 << 24,
                           cfg->vocab_size);
    /* sgemm takes int dimensions: rows = B*T and the widest output, 4C or Vp. */
    size_t rows = max_B * (size_t)cfg->block_size;
    if (max_B < 1 || max_B > (1u << 20) || rows * 4 * (size_t)cfg->n_embd > ((size_t)1 << 40))
        return gpt_err_set(err, -EINVAL, "trainer.micro_batch", "batch %zu is out of range", max_B);
    return 0;
}

/* The config, the padded vocabulary and the tensor table of m. */
static void model_set_layout(struct gpt_model *m, const struct gpt_model_config *cfg)
{
    size_t V = (size_t)cfg->vocab_size;
    m->cfg = *cfg;
    /* Padding makes the LM-head matmul well shaped; small vocabularies pad
     * to 16 so that the padding is exercised by small test models too. */
    m->Vp = V > 64 ? model_round_up(V, 64) : model_round_up(V, 16);
    model_layout(m);
}

int gpt_model_layout(struct gpt_model *m, const struct gpt_model_config *cfg, struct gpt_err *err)
{
    memset(m, 0, sizeof(*m));
    int rc = model_check_config(cfg, 1, err);
    if (rc < 0)
        return rc;
    model_set_layout(m, cfg);
    return 0;
}

/* Carves the activation slab; with `base` NULL only counts floats. */
static size_t model_carve(struct gpt_model_acts *a, float *base, struct gpt_backend *be, size_t B,
                          size_t T, size_t C, size_t L, size_t NH, size_t Vp)
{
    size_t off = 0;
    size_t BT = B * T;
#define CARVE(field, n)                                                                            \
    do {                                                                                           \
        a->field = base ? base + off : NULL;                                                       \
        off += model_round_up((n), 16);                                                            \
    } while (0)
    CARVE(encoded, BT * C);
    CARVE(ln1, L * BT * C);
    CARVE(ln1_mean, L * BT);
    CARVE(ln1_rstd, L * BT);
    CARVE(qkv, L * BT * 3 * C);
    CARVE(atty, L * BT * C);
    CARVE(att, L * gpt_backend_att_floats(be, B, T, C, NH, 0)); /* backend-owned */
    CARVE(residual2, L * BT * C);
    CARVE(ln2, L * BT * C);
    CARVE(ln2_mean, L * BT);
    CARVE(ln2_rstd, L * BT);
    CARVE(fch, L * BT * 4 * C);
    CARVE(fch_gelu, L * BT * 4 * C);
    CARVE(residual3, L * BT * C);
    CARVE(lnf, BT * C);
    CARVE(lnf_mean, BT);
    CARVE(lnf_rstd, BT);
    CARVE(logits, BT * Vp);
    CARVE(losses, BT);
    CARVE(dres, BT * C);
    CARVE(dc, BT * C);
    CARVE(d4c, BT * 4 * C);
    CARVE(datt, gpt_backend_att_floats(be, B, T, C, NH, 1));
#undef CARVE
    return off;
}

/* A set-up stage may take seconds for a large model (each allocation is
 * zeroed): the owner's cancel hook is polled between them. */
static int model_cancelled(const struct gpt_model *m)
{
    return m->init_cancelled && m->init_cancelled(m->init_cancelled_ctx);
}

static int model_init(struct gpt_model *m, const struct gpt_model_config *cfg,
                      struct gpt_backend *be, size_t max_B, const struct gpt_model_units *units,
                      int (*cancelled)(void *ctx), void *cancel_ctx, struct gpt_err *err)
{
    GPT_ASSERT(m && cfg && be);
    memset(m, 0, sizeof(*m));
    m->units = units;
    m->init_cancelled = cancelled;
    m->init_cancelled_ctx = cancel_ctx;
    int rc = model_check_config(cfg, max_B, err);
    if (rc < 0)
        return rc;
    m->be = be;
    m->max_B = max_B;
    model_set_layout(m, cfg);

    size_t L = (size_t)cfg->n_layer, C = (size_t)cfg->n_embd, NH = (size_t)cfg->n_head;
    size_t T = (size_t)cfg->block_size;
    struct gpt_model_acts *a = calloc(1, sizeof(*a));
    if (!a) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "model: out of memory");
        goto fail;
    }
    m->acts = a;
    size_t pbytes = m->n_params * sizeof(float);
    if (!units) {
        rc = gpt_backend_alloc(be, pbytes, (void **)&m->params);
        if (rc == 0 && !(rc = model_cancelled(m) ? -ECANCELED : 0))
            rc = gpt_backend_alloc(be, pbytes, (void **)&m->grads);
    }
    /* Sized for the largest shape a forward may take. Every part grows
     * with B and with T, but for the attention buffers at T up to the head
     * size, where the backends take the batched-GEMM path and its
     * (B, NH, T, T) scores: those peak at T = min(block_size, hs). */
    size_t nact = model_carve(a, NULL, be, max_B, T, C, L, NH, m->Vp);
    size_t hs = C / NH,
           nact_gemm = model_carve(a, NULL, be, max_B, T < hs ? T : hs, C, L, NH, m->Vp);
    nact = nact > nact_gemm ? nact : nact_gemm;
    float *slab = NULL;
    if (rc == 0 && !(rc = model_cancelled(m) ? -ECANCELED : 0))
        rc = gpt_backend_alloc(be, nact * sizeof(float), (void **)&slab);
    if (rc == 0)
        rc = gpt_backend_alloc(be, max_B * T * sizeof(int), (void **)&a->tokens);
    if (rc == 0)
        rc = gpt_backend_alloc(be, max_B * T * sizeof(int), (void **)&a->targets);
    if (rc < 0) {
        gpt_backend_mem_free(be, slab);
        if (rc == -ECANCELED)
            gpt_err_set(err, rc, NULL, "model: set-up cancelled");
        else
            gpt_err_set(err, rc, NULL,
                        "model: cannot allocate %zu parameters and %zu activation floats",
                        m->n_params, nact);
        goto fail;
    }
    a->slab = slab;
    a->slab_floats = nact;
    a->host_losses = malloc(max_B * T * sizeof(float));
    if (!a->host_losses) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "model: out of memory");
        goto fail;
    }
    m->act_bytes = nact * sizeof(float) + 2 * max_B * T * sizeof(int);
    return 0;
fail:
    gpt_model_done(m);
    return rc;
}

int gpt_model_init(struct gpt_model *m, const struct gpt_model_config *cfg, struct gpt_backend *be,
                   size_t max_B, struct gpt_err *err)
{
    return model_init(m, cfg, be, max_B, NULL, NULL, NULL, err);
}

int gpt_model_init_sharded(struct gpt_model *m, const struct gpt_model_config *cfg,
                           struct gpt_backend *be, size_t max_B,
                           const struct gpt_model_units *units, struct gpt_err *err)
{
    GPT_ASSERT(units && units->fetch && units->grads && units->release);
    return model_init(m, cfg, be, max_B, units, NULL, NULL, err);
}

int gpt_model_init_cancellable(struct gpt_model *m, const struct gpt_model_config *cfg,
                               struct gpt_backend *be, size_t max_B,
                               const struct gpt_model_units *units, int (*cancelled)(void *ctx),
                               void *ctx, struct gpt_err *err)
{
    GPT_ASSERT(!units || (units->fetch && units->grads && units->release));
    return model_init(m, cfg, be, max_B, units, cancelled, ctx, err);
}

int gpt_model_num_units(const struct gpt_model *m)
{
    return m->cfg.n_layer * GPT_BLOCK_UNITS + 2;
}

void gpt_model_unit_span(const struct gpt_model *m, int unit, size_t *ret_off, size_t *ret_count)
{
    GPT_ASSERT(m && unit >= 0 && unit < gpt_model_num_units(m));
    const struct gpt_tensor_info *first = &m->tensors[model_unit_first(m, unit)];
    const struct gpt_tensor_info *last = &m->tensors[model_unit_last(m, unit)];
    *ret_off = first->offset;
    *ret_count = last->offset + last->count - first->offset;
}

void gpt_model_done(struct gpt_model *m)
{
    if (!m)
        return;
    struct gpt_backend *be = m->be;
    if (be) {
        gpt_backend_mem_free(be, m->params);
        gpt_backend_mem_free(be, m->grads);
        gpt_backend_mem_free(be, m->m);
        gpt_backend_mem_free(be, m->v);
        gpt_backend_mem_free(be, m->step_dev);
        if (m->acts) {
            gpt_backend_mem_free(be, m->acts->slab);
            gpt_backend_mem_free(be, m->acts->tokens);
            gpt_backend_mem_free(be, m->acts->targets);
        }
    }
    if (m->acts)
        free(m->acts->host_losses);
    free(m->acts);
    m->acts = NULL;
    m->params = m->grads = m->m = m->v = NULL;
    m->step_dev = NULL;
}

int gpt_model_alloc_optim(struct gpt_model *m, struct gpt_err *err)
{
    GPT_ASSERT(m && m->params);
    if (m->m && m->v && (m->step_dev || !gpt_backend_step_on_device(m->be)))
        return 0;
    size_t bytes = m->n_params * sizeof(float);
    int rc = 0;
    if (!m->m)
        rc = gpt_backend_alloc(m->be, bytes, (void **)&m->m);
    if (rc == 0 && model_cancelled(m))
        return gpt_err_set(err, -ECANCELED, NULL, "model: set-up cancelled");
    if (rc == 0 && !m->v)
        rc = gpt_backend_alloc(m->be, bytes, (void **)&m->v);
    if (rc < 0)
        return gpt_err_set(err, rc, NULL, "model: cannot allocate AdamW moments (%zu floats)",
                           2 * m->n_params);
    if (!m->step_dev && gpt_backend_step_on_device(m->be) &&
        (rc = gpt_backend_alloc(m->be, 2 * sizeof(double), (void **)&m->step_dev)) < 0)
        return gpt_err_set(err, rc, NULL, "model: cannot allocate the step's results");
    return 0;
}

void gpt_model_init_weights(struct gpt_model *m, uint64_t seed)
{
    GPT_ASSERT(m && m->params);
    float *host = calloc(m->n_params, sizeof(float));
    GPT_ASSERT(host != NULL); /* a few MB; failing here means the host is out of memory */
    gpt_model_init_weights_host(m, seed, host);
    gpt_backend_upload(m->be, m->params, host, m->n_params * sizeof(float));
    free(host);
}

void gpt_model_init_weights_host(const struct gpt_model *m, uint64_t seed, float *host)
{
    memset(host, 0, m->n_params * sizeof(float));
    struct gpt_rng rng;
    gpt_rng_seed(&rng, seed);
    double resid_std = 0.02 / sqrt(2.0 * m->cfg.n_layer);
    size_t C = (size_t)m->cfg.n_embd;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const struct gpt_tensor_info *t = &m->tensors[i];
        float *p = host + t->offset;
        size_t count = t->count;
        if (i == T_WTE)
            count = (size_t)m->cfg.vocab_size * C; /* padded rows stay 0 */
        const char *dot = strrchr(t->name, '.');
        const char *leaf = dot ? dot + 1 : t->name;
        if (model_cancelled(m))
            return;
        if (t->ndim == 2) {
            double sd = strcmp(leaf, "projw") == 0 ? resid_std : 0.02;
            for (size_t j = 0; j < count; j++) {
                /* A large matrix takes seconds: a cancel is heard within one chunk. */
                if ((j & ((1u << 22) - 1)) == (1u << 22) - 1 && model_cancelled(m))
                    return;
                p[j] = (float)(sd * gpt_rng_normal(&rng));
            }
        } else if (strcmp(leaf, "ln1w") == 0 || strcmp(leaf, "ln2w") == 0 ||
                   strcmp(leaf, "lnfw") == 0) {
            for (size_t j = 0; j < count; j++)
                p[j] = 1.0f;
        }
    }
}

const float *gpt_model_logits(const struct gpt_model *m)
{
    GPT_ASSERT(m && m->acts);
    return m->acts->logits;
}

void gpt_model_zero_grad(struct gpt_model *m)
{
    GPT_ASSERT(m && m->grads);
    gpt_backend_memzero(m->be, m->grads, m->n_params * sizeof(float));
    m->acts->grads_stale = 0;
}

void gpt_model_zero_grad_deferred(struct gpt_model *m)
{
    GPT_ASSERT(m && m->grads && m->acts && !m->units);
    m->acts->grads_stale = 1;
}

void gpt_model_block_span(const struct gpt_model *m, int layer, size_t *ret_off, size_t *ret_count)
{
    GPT_ASSERT(m && layer >= 0 && layer < m->cfg.n_layer);
    const struct gpt_tensor_info *first = &m->tensors[T_BLK(layer, 0)];
    const struct gpt_tensor_info *last = &m->tensors[T_BLK(layer, BLK_COUNT - 1)];
    *ret_off = first->offset;
    *ret_count = last->offset + last->count - first->offset;
}

double gpt_model_flops_per_token(const struct gpt_model *m, size_t T)
{
    /* llm.c's count: 6 per parameter per token (forward 2, backward 4),
     * every trained parameter, and 6 L C T for attention's two products
     * over the causal half (forward 2 x 2 L C T / 2, backward twice
     * that). */
    return 6.0 * (double)m->n_params +
           6.0 * (double)m->cfg.n_layer * (double)m->cfg.n_embd * (double)T;
}

/* Where a forward with targets puts its loss: with `acc` NULL the row
 * losses are downloaded and their mean returned; else weight times the
 * mean goes to step_dev[0] on the device (reset: stored, not added). */
struct model_loss_acc {
    double weight;
    int reset;
};

/* The token ids of a forward: every input below V, every target below V
 * or negative (ignored). -EINVAL, else 0 and the count of targets that
 * count in *ret_n_valid. */
static int model_ids_check(const struct gpt_model *m, const int *inputs, const int *targets,
                           size_t N, size_t *ret_n_valid)
{
    size_t V = (size_t)m->cfg.vocab_size, n_valid = 0;
    for (size_t i = 0; i < N; i++) {
        if (inputs[i] < 0 || (size_t)inputs[i] >= V)
            return -EINVAL;
        if (targets) {
            if (targets[i] >= 0 && (size_t)targets[i] >= V)
                return -EINVAL;
            n_valid += targets[i] >= 0;
        }
    }
    *ret_n_valid = n_valid;
    return 0;
}

/* Layer l's slices of the activations, for the (B, T) of the last carve.
 * Shapes: ln1, atty, res2, ln2, res3 (B,T,C); the means and rstds (B,T);
 * qkv (B,T,3C); fch, fch_gelu (B,T,4C); att as the backend lays it out. */
struct model_layer {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att;
    float *res2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *res3;
};

static void model_layer_of(const struct gpt_model *m, size_t l, struct model_layer *ret)
{
    const struct gpt_model_acts *a = m->acts;
    size_t B = a->B, T = a->T, N = B * T;
    size_t C = (size_t)m->cfg.n_embd, NH = (size_t)m->cfg.n_head;
    *ret = (struct model_layer){
        .ln1 = a->ln1 + l * N * C,
        .ln1_mean = a->ln1_mean + l * N,
        .ln1_rstd = a->ln1_rstd + l * N,
        .qkv = a->qkv + l * N * 3 * C,
        .atty = a->atty + l * N * C,
        .att = a->att + l * gpt_backend_att_floats(m->be, B, T, C, NH, 0),
        .res2 = a->residual2 + l * N * C,
        .ln2 = a->ln2 + l * N * C,
        .ln2_mean = a->ln2_mean + l * N,
        .ln2_rstd = a->ln2_rstd + l * N,
        .fch = a->fch + l * N * 4 * C,
        .fch_gelu = a->fch_gelu + l * N * 4 * C,
        .res3 = a->residual3 + l * N * C,
    };
}

/* Block l's forward on residual (B,T,C): attention then MLP, each with its
 * skip connection; its output is the block's residual3 slice. Each of the
 * block's units is acquired for its ops and released after them. */
static int model_block_forward(struct gpt_model *m, size_t l, const float *residual)
{
    struct gpt_backend *be = m->be;
    size_t B = m->acts->B, T = m->acts->T, N = B * T;
    size_t C = (size_t)m->cfg.n_embd, NH = (size_t)m->cfg.n_head;
    struct model_layer x;
    model_layer_of(m, l, &x);
    int rc;

    if ((rc = model_unit_acquire(m, model_blk_unit(l, 0), 0)) < 0)
        return rc;
    gpt_backend_layernorm_forward(be, x.ln1, x.ln1_mean, x.ln1_rstd, residual,
                                  model_param(m, T_BLK(l, BLK_LN1W)),
                                  model_param(m, T_BLK(l, BLK_LN1B)), N, C);
    gpt_backend_matmul_forward(be, x.qkv, x.ln1, model_param(m, T_BLK(l, BLK_QKVW)),
                               model_param(m, T_BLK(l, BLK_QKVB)), N, C, 3 * C);
    gpt_backend_attention_forward(be, x.atty, x.att, x.qkv, B, T, C, NH);
    /* The projections write the residual buffers, the skip connection
     * added by the product (a GEMM epilogue where the backend has one). */
    gpt_backend_matmul_residual_forward(be, x.res2, x.atty, model_param(m, T_BLK(l, BLK_ATTPROJW)),
                                        model_param(m, T_BLK(l, BLK_ATTPROJB)), residual, N, C, C);
    if ((rc = model_unit_release(m, model_blk_unit(l, 0), 0)) < 0 ||
        (rc = model_unit_acquire(m, model_blk_unit(l, 1), 0)) < 0)
        return rc;
    gpt_backend_layernorm_forward(be, x.ln2, x.ln2_mean, x.ln2_rstd, x.res2,
                                  model_param(m, T_BLK(l, BLK_LN2W)),
                                  model_param(m, T_BLK(l, BLK_LN2B)), N, C);
    gpt_backend_matmul_gelu_forward(be, x.fch_gelu, x.fch, x.ln2, model_param(m, T_BLK(l, BLK_FCW)),
                                    model_param(m, T_BLK(l, BLK_FCB)), N, C, 4 * C);
    if ((rc = model_unit_release(m, model_blk_unit(l, 1), 0)) < 0 ||
        (rc = model_unit_acquire(m, model_blk_unit(l, 2), 0)) < 0)
        return rc;
    gpt_backend_matmul_residual_forward(be, x.res3, x.fch_gelu,
                                        model_param(m, T_BLK(l, BLK_FCPROJW)),
                                        model_param(m, T_BLK(l, BLK_FCPROJB)), x.res2, N, 4 * C, C);
    return model_unit_release(m, model_blk_unit(l, 2), 0);
}

/* The embeddings, every block, the final layernorm and the tied LM head
 * (logits = lnf @ wte^T; padded rows of wte are 0), each under its unit. */
static int model_layers_forward(struct gpt_model *m)
{
    struct gpt_model_acts *a = m->acts;
    struct gpt_backend *be = m->be;
    size_t B = a->B, T = a->T, N = B * T, L = (size_t)m->cfg.n_layer;
    size_t C = (size_t)m->cfg.n_embd;
    int rc, lnf_unit = gpt_model_num_units(m) - 1;
    if ((rc = model_unit_acquire(m, 0, 0)) < 0)
        return rc;
    gpt_backend_encoder_forward(be, a->encoded, a->tokens, model_param(m, T_WTE),
                                model_param(m, T_WPE), B, T, C);
    if ((rc = model_unit_release(m, 0, 0)) < 0)
        return rc;
    const float *residual = a->encoded; /* (B,T,C) */
    for (size_t l = 0; l < L; l++) {
        if ((rc = model_block_forward(m, l, residual)) < 0)
            return rc;
        residual = a->residual3 + l * N * C;
    }
    if ((rc = model_unit_acquire(m, lnf_unit, 0)) < 0)
        return rc;
    gpt_backend_layernorm_forward(be, a->lnf, a->lnf_mean, a->lnf_rstd, residual,
                                  model_param(m, T_LNFW(L)), model_param(m, T_LNFB(L)), N, C);
    if ((rc = model_unit_release(m, lnf_unit, 0)) < 0 || (rc = model_unit_acquire(m, 0, 0)) < 0)
        return rc;
    gpt_backend_matmul_forward(be, a->logits, a->lnf, model_param(m, T_WTE), NULL, N, C, m->Vp);
    return model_unit_release(m, 0, 0);
}

/* The loss of a forward with targets: loss and dlogits in one pass over
 * the vocabulary, with backward's scale when training (the logits are not
 * needed again); then downloaded (acc NULL) or accumulated on the device. */
static int model_loss_forward(struct gpt_model *m, const int *targets, size_t n_valid, int train,
                              float loss_scale, float *ret_loss, const struct model_loss_acc *acc)
{
    struct gpt_model_acts *a = m->acts;
    struct gpt_backend *be = m->be;
    size_t N = a->B * a->T;
    int rc = gpt_backend_upload(be, a->targets, targets, N * sizeof(int));
    if (rc < 0)
        return rc;
    float dscale = train && n_valid ? loss_scale / (float)n_valid : 0.0f;
    gpt_backend_softmax_xent(be, a->logits, a->losses, a->targets, N, (size_t)m->cfg.vocab_size,
                             m->Vp, dscale, train);
    double sum = 0.0;
    if (acc) {
        /* Ignored rows' losses are 0: the sum over all rows, over n_valid. */
        double w = n_valid ? acc->weight / (double)n_valid : 0.0;
        gpt_backend_loss_accum(be, m->step_dev, a->losses, N, w, acc->reset);
    } else {
        rc = gpt_backend_download(be, a->host_losses, a->losses, N * sizeof(float));
        if (rc < 0)
            return rc;
        for (size_t i = 0; i < N; i++)
            sum += a->host_losses[i];
    }
    a->n_valid = n_valid;
    a->have_targets = 1;
    a->have_dlogits = train;
    a->dlogits_scale = loss_scale;
    if (ret_loss)
        *ret_loss = n_valid ? (float)(sum / (double)n_valid) : 0.0f;
    return 0;
}

/* The forward; train: the classifier writes dlogits for loss_scale in
 * the pass that computes the loss (targets required). */
static int model_forward(struct gpt_model *m, const int *inputs, const int *targets, size_t B,
                         size_t T, int train, float loss_scale, float *ret_loss,
                         const struct model_loss_acc *acc)
{
    GPT_ASSERT(m && m->acts && inputs);
    struct gpt_model_acts *a = m->acts;
    struct gpt_backend *be = m->be;
    if (B < 1 || B > m->max_B || T < 1 || T > (size_t)m->cfg.block_size)
        return -EINVAL;
    size_t L = (size_t)m->cfg.n_layer, C = (size_t)m->cfg.n_embd, NH = (size_t)m->cfg.n_head;
    size_t Vp = m->Vp, N = B * T, n_valid = 0;
    int rc = model_ids_check(m, inputs, targets, N, &n_valid);
    if (rc < 0)
        return rc;
    a->have_targets = 0;
    a->have_dlogits = 0;
    /* Re-carve for this (B, T) so each layer's slice is packed; never past
     * the slab (the set-up sized it for the largest shape; a backend whose
     * buffers did not grow with B and T would be refused here, not
     * overrun). */
    if (model_carve(a, NULL, be, B, T, C, L, NH, Vp) > a->slab_floats)
        return -EOVERFLOW;
    model_carve(a, a->slab, be, B, T, C, L, NH, Vp);
    a->B = B;
    a->T = T;
    if ((rc = gpt_backend_upload(be, a->tokens, inputs, N * sizeof(int))) < 0 ||
        (rc = model_layers_forward(m)) < 0)
        return rc;
    if (!targets)
        return gpt_backend_sync(be);
    return model_loss_forward(m, targets, n_valid, train, loss_scale, ret_loss, acc);
}

int gpt_model_forward(struct gpt_model *m, const int *inputs, const int *targets, size_t B,
                      size_t T, float *ret_loss)
{
    return model_forward(m, inputs, targets, B, T, 0, 0.0f, ret_loss, NULL);
}

int gpt_model_forward_train(struct gpt_model *m, const int *inputs, const int *targets, size_t B,
                            size_t T, float loss_scale, float *ret_loss)
{
    GPT_ASSERT(targets);
    return model_forward(m, inputs, targets, B, T, 1, loss_scale, ret_loss, NULL);
}

int gpt_model_forward_train_acc(struct gpt_model *m, const int *inputs, const int *targets,
                                size_t B, size_t T, float loss_scale, double loss_weight, int first)
{
    GPT_ASSERT(m && targets && m->step_dev);
    struct model_loss_acc acc = {loss_weight, first};
    return model_forward(m, inputs, targets, B, T, 1, loss_scale, NULL, &acc);
}

int gpt_model_step_fetch(struct gpt_model *m, double *ret_loss_sum, double *ret_sumsq)
{
    GPT_ASSERT(m && m->step_dev);
    double r[2];
    int rc = gpt_backend_download(m->be, r, m->step_dev, sizeof(r));
    if (rc < 0)
        return rc;
    *ret_loss_sum = r[0];
    *ret_sumsq = r[1];
    return 0;
}

static void model_span_ready(struct gpt_model *m, size_t first, size_t last)
{
    if (!m->grads_ready)
        return;
    size_t off = m->tensors[first].offset;
    size_t end = m->tensors[last].offset + m->tensors[last].count;
    m->grads_ready(m->grads_ready_ctx, off, end - off);
}

static int model_backward(struct gpt_model *m, float loss_scale);

int gpt_model_backward(struct gpt_model *m, float loss_scale)
{
    GPT_ASSERT(m && m->acts);
    int rc = model_backward(m, loss_scale);
    if (m->be->grad_assign) /* an early return left the overwrite on */
        gpt_backend_set_grad_assign(m->be, 0);
    return rc;
}

/* After gpt_model_zero_grad_deferred, the first backward's parameter
 * gradients are overwritten by the ops that write them (products with
 * beta 0, column sums stored) instead of zeroed first; all but two
 * tensors have a single writer: wte's is written by the head's product
 * (all Vp rows) and then added to by the encoder, and wpe's is only added
 * to (rows below T), so it is zeroed here and the encoder adds with the
 * overwrite off. A backend without the overwrite zeroes everything.
 * Returns whether the overwrite is on. */
static int model_grads_begin(struct gpt_model *m)
{
    struct gpt_model_acts *a = m->acts;
    if (!a->grads_stale)
        return 0;
    a->grads_stale = 0;
    if (gpt_backend_set_grad_assign(m->be, 1) < 0) {
        gpt_model_zero_grad(m);
        return 0;
    }
    gpt_backend_memzero(m->be, model_grad(m, T_WPE), m->tensors[T_WPE].count * sizeof(float));
    return 1;
}

/* Block l's backward: a->dres holds d(residual3) on entry and d(the
 * block's input) on return; the block's gradients are written (or added)
 * and marked ready, each of its units acquired for its ops. */
static int model_block_backward(struct gpt_model *m, size_t l)
{
    struct gpt_model_acts *a = m->acts;
    struct gpt_backend *be = m->be;
    size_t B = a->B, T = a->T, N = B * T;
    size_t C = (size_t)m->cfg.n_embd, NH = (size_t)m->cfg.n_head;
    const float *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * N * C;
    struct model_layer x;
    model_layer_of(m, l, &x);
    int rc;

    if ((rc = model_unit_acquire(m, model_blk_unit(l, 2), 1)) < 0)
        return rc;
    /* dres holds d(residual3); it passes unchanged to residual2. */
    gpt_backend_matmul_backward_dgelu(be, a->d4c, model_grad(m, T_BLK(l, BLK_FCPROJW)),
                                      model_grad(m, T_BLK(l, BLK_FCPROJB)), a->dres, x.fch_gelu,
                                      model_param(m, T_BLK(l, BLK_FCPROJW)), x.fch, N, 4 * C, C);
    if ((rc = model_unit_release(m, model_blk_unit(l, 2), 1)) < 0 ||
        (rc = model_unit_acquire(m, model_blk_unit(l, 1), 1)) < 0)
        return rc;
    gpt_backend_matmul_backward(be, a->dc, model_grad(m, T_BLK(l, BLK_FCW)),
                                model_grad(m, T_BLK(l, BLK_FCB)), a->d4c, x.ln2,
                                model_param(m, T_BLK(l, BLK_FCW)), N, C, 4 * C);
    gpt_backend_layernorm_backward(
        be, a->dres, model_grad(m, T_BLK(l, BLK_LN2W)), model_grad(m, T_BLK(l, BLK_LN2B)), a->dc,
        x.res2, model_param(m, T_BLK(l, BLK_LN2W)), x.ln2_mean, x.ln2_rstd, N, C);
    if ((rc = model_unit_release(m, model_blk_unit(l, 1), 1)) < 0 ||
        (rc = model_unit_acquire(m, model_blk_unit(l, 0), 1)) < 0)
        return rc;
    /* dres now holds d(residual2); it passes unchanged to the input. */
    gpt_backend_matmul_backward(be, a->dc, model_grad(m, T_BLK(l, BLK_ATTPROJW)),
                                model_grad(m, T_BLK(l, BLK_ATTPROJB)), a->dres, x.atty,
                                model_param(m, T_BLK(l, BLK_ATTPROJW)), N, C, C);
    float *dqkv = a->d4c; /* (B,T,3C) */
    gpt_backend_attention_backward(be, dqkv, a->datt, a->dc, x.atty, x.qkv, x.att, B, T, C, NH);
    gpt_backend_matmul_backward(be, a->dc, model_grad(m, T_BLK(l, BLK_QKVW)),
                                model_grad(m, T_BLK(l, BLK_QKVB)), dqkv, x.ln1,
                                model_param(m, T_BLK(l, BLK_QKVW)), N, C, 3 * C);
    gpt_backend_layernorm_backward(
        be, a->dres, model_grad(m, T_BLK(l, BLK_LN1W)), model_grad(m, T_BLK(l, BLK_LN1B)), a->dc,
        residual, model_param(m, T_BLK(l, BLK_LN1W)), x.ln1_mean, x.ln1_rstd, N, C);
    model_span_ready(m, T_BLK(l, 0), T_BLK(l, BLK_COUNT - 1));
    return model_unit_release(m, model_blk_unit(l, 0), 1);
}

static int model_backward(struct gpt_model *m, float loss_scale)
{
    struct gpt_model_acts *a = m->acts;
    struct gpt_backend *be = m->be;
    if (!a->have_targets)
        return -EINVAL;
    /* The dlogits of a training forward are for the scale it was given
     * (compared as bits: the caller passes the same value). */
    if (a->have_dlogits && memcmp(&a->dlogits_scale, &loss_scale, sizeof(float)) != 0)
        return -EINVAL;
    a->have_targets = 0; /* the logits buffer becomes dlogits */
    size_t L = (size_t)m->cfg.n_layer, C = (size_t)m->cfg.n_embd;
    size_t V = (size_t)m->cfg.vocab_size, Vp = m->Vp;
    size_t B = a->B, T = a->T, N = B * T;
    float dscale = a->n_valid ? loss_scale / (float)a->n_valid : 0.0f;

    int rc;
    /* After a training forward the dlogits are there; else the forward's
     * losses are: one pass (GPT_XENT_AFTER_LOSS). */
    if (!a->have_dlogits)
        gpt_backend_softmax_xent(be, a->logits, a->losses, a->targets, N, V, Vp, dscale,
                                 GPT_XENT_AFTER_LOSS);
    a->have_dlogits = 0;
    float *dlogits = a->logits; /* (B,T,Vp) */
    int assign = model_grads_begin(m);
    /* Unit 0 (the embeddings) stays acquired through the whole backward:
     * the tied head writes its gradient first, the encoder last. */
    if ((rc = model_unit_acquire(m, 0, 1)) < 0)
        return rc;
    gpt_backend_matmul_backward(be, a->dc, model_grad(m, T_WTE), NULL, dlogits, a->lnf,
                                model_param(m, T_WTE), N, C, Vp);
    const float *res_last = a->residual3 + (L - 1) * N * C;
    gpt_backend_memzero(be, a->dres, N * C * sizeof(float));
    int lnf_unit = gpt_model_num_units(m) - 1;
    if ((rc = model_unit_acquire(m, lnf_unit, 1)) < 0)
        return rc;
    gpt_backend_layernorm_backward(be, a->dres, model_grad(m, T_LNFW(L)), model_grad(m, T_LNFB(L)),
                                   a->dc, res_last, model_param(m, T_LNFW(L)), a->lnf_mean,
                                   a->lnf_rstd, N, C);
    model_span_ready(m, T_LNFW(L), T_LNFB(L));
    if ((rc = model_unit_release(m, lnf_unit, 1)) < 0)
        return rc;

    for (size_t l = L; l-- > 0;)
        if ((rc = model_block_backward(m, l)) < 0)
            return rc;
    if (assign) /* the encoder adds to wte's (the head's) and wpe's (zeroed) */
        gpt_backend_set_grad_assign(be, 0);
    gpt_backend_encoder_backward(be, model_grad(m, T_WTE), model_grad(m, T_WPE), a->dres, a->tokens,
                                 B, T, C);
    model_span_ready(m, T_WTE, T_WPE);
    if ((rc = model_unit_release(m, 0, 1)) < 0)
        return rc;
    return m->backward_async ? 0 : gpt_backend_sync(be);
}
