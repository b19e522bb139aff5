/*
 * hf: Hugging Face GPT2LMHeadModel folders in and out (see hf.h). The name
 * table below maps gptd's tensor names to GPT-2's; Conv1D weights are
 * transposed on the way (gptd keeps matrices (out, in), Conv1D (in, out)).
 * Any thread; blocking I/O.
 */
#include "hf.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpt_atomic_file.h"
#include "gpt_file.h"
#include "safetensors.h"

/* A block tensor: gptd's name suffix, GPT-2's, and for Conv1D weights the
 * input width as a multiple of C (the matrix is stored transposed). */
struct hf_name {
    const char *gptd, *hf;
    int transpose;
    int in_mult;
};
static const struct hf_name hf_block_names[] = {
    {"ln1w", "ln_1.weight", 0, 0},
    {"ln1b", "ln_1.bias", 0, 0},
    {"attn.qkvw", "attn.c_attn.weight", 1, 1},
    {"attn.qkvb", "attn.c_attn.bias", 0, 0},
    {"attn.projw", "attn.c_proj.weight", 1, 1},
    {"attn.projb", "attn.c_proj.bias", 0, 0},
    {"ln2w", "ln_2.weight", 0, 0},
    {"ln2b", "ln_2.bias", 0, 0},
    {"mlp.fcw", "mlp.c_fc.weight", 1, 1},
    {"mlp.fcb", "mlp.c_fc.bias", 0, 0},
    {"mlp.projw", "mlp.c_proj.weight", 1, 4},
    {"mlp.projb", "mlp.c_proj.bias", 0, 0},
};
#define HF_NAME_MAX 96

/* One gptd tensor as the file sees it: GPT-2's name (without the
 * "transformer." prefix), the rows x cols of gptd's storage (rows of wte:
 * vocab_size, not Vp) and whether the file holds the transpose. */
struct hf_map {
    char name[HF_NAME_MAX];
    uint64_t rows, cols;
    int ndim, transpose;
};

static int hf_map_tensor(const struct gpt_model *m, const struct gpt_tensor_info *t,
                         struct hf_map *ret)
{
    uint64_t C = (uint64_t)m->cfg.n_embd;
    int layer;
    int n = 0;
    memset(ret, 0, sizeof(*ret));
    ret->ndim = t->ndim;
    ret->cols = t->ndim == 2 ? C : 1;
    ret->rows = t->count / ret->cols;
    if (strcmp(t->name, "wte") == 0) {
        snprintf(ret->name, sizeof(ret->name), "wte.weight");
        ret->rows = (uint64_t)m->cfg.vocab_size;
        return 0;
    }
    if (strcmp(t->name, "wpe") == 0)
        return snprintf(ret->name, sizeof(ret->name), "wpe.weight"), 0;
    if (strcmp(t->name, "lnfw") == 0)
        return snprintf(ret->name, sizeof(ret->name), "ln_f.weight"), 0;
    if (strcmp(t->name, "lnfb") == 0)
        return snprintf(ret->name, sizeof(ret->name), "ln_f.bias"), 0;
    if (sscanf(t->name, "h.%d.%n", &layer, &n) != 1 || n == 0)
        return -EINVAL;
    for (size_t k = 0; k < sizeof(hf_block_names) / sizeof(hf_block_names[0]); k++) {
        const struct hf_name *h = &hf_block_names[k];
        if (strcmp(t->name + n, h->gptd) != 0)
            continue;
        snprintf(ret->name, sizeof(ret->name), "h.%d.%s", layer, h->hf);
        if (h->transpose) {
            ret->transpose = 1;
            ret->cols = C * (uint64_t)h->in_mult;
            ret->rows = t->count / ret->cols;
        }
        return 0;
    }
    return -EINVAL;
}

/* ---- config.json ---- */

static int hf_read_file(const char *path, size_t max, char **ret, size_t *ret_len,
                        struct gpt_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return gpt_err_set(err, -errno, NULL, "cannot open %s: %s", path, strerror(errno));
    int rc = gpt_file_read_fd(fd, path, max, NULL, ret, ret_len, err);
    close(fd);
    return rc;
}

/* An integer field of config.json in lo..hi into *ret. */
static int hf_cfg_int(const json_t *root, const char *key, const char *path, int lo, int hi,
                      int *ret, struct gpt_err *err)
{
    const json_t *v = json_object_get(root, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: \"%s\" must be an integer in %d..%d",
                           path, key, lo, hi);
    *ret = (int)json_integer_value(v);
    return 0;
}

static int hf_probe_weights(const char *dir, const struct gpt_model_config *cfg,
                            struct gpt_err *err);

int gpt_hf_probe(const char *dir, struct gpt_model_config *ret_cfg, struct gpt_err *err)
{
    char path[PATH_MAX];
    char *text = NULL;
    size_t len = 0;
    json_t *root = NULL;
    json_error_t jerr;
    struct gpt_model_config cfg;
    int rc;

    memset(&cfg, 0, sizeof(cfg));
    if (snprintf(path, sizeof(path), "%s/config.json", dir) >= (int)sizeof(path))
        return gpt_err_set(err, -ENAMETOOLONG, NULL, "path too long: %s", dir);
    if ((rc = hf_read_file(path, GPT_HF_CONFIG_MAX, &text, &len, err)) < 0)
        return rc;
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(root)) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: not a JSON object (%s)", path,
                         root ? "other JSON" : jerr.text);
        goto out;
    }
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    if (mt && strcmp(mt, "gpt2") != 0) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                         "%s: model_type is \"%.40s\"; only gpt2 is read", path, mt);
        goto out;
    }
    if ((rc = hf_cfg_int(root, "n_layer", path, 1, GPT_JOB_N_LAYER_MAX, &cfg.n_layer, err)) < 0 ||
        (rc = hf_cfg_int(root, "n_head", path, 1, 256, &cfg.n_head, err)) < 0 ||
        (rc = hf_cfg_int(root, "n_embd", path, 1, 16384, &cfg.n_embd, err)) < 0 ||
        (rc = hf_cfg_int(root, "n_positions", path, 1, 65536, &cfg.block_size, err)) < 0 ||
        (rc = hf_cfg_int(root, "vocab_size", path, 2, 1 << 20, &cfg.vocab_size, err)) < 0)
        goto out;
    if (cfg.n_embd % cfg.n_head != 0) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: n_embd %d is not a multiple of n_head %d",
                         path, cfg.n_embd, cfg.n_head);
        goto out;
    }
    const char *act = json_string_value(json_object_get(root, "activation_function"));
    if (act && strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                         "%s: activation_function is \"%.40s\"; gptd's model has gelu_new", path,
                         act);
        goto out;
    }
    const json_t *eps = json_object_get(root, "layer_norm_epsilon");
    if (eps && (!json_is_number(eps) || fabs(json_number_value(eps) - 1e-5) > 1e-12)) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                         "%s: layer_norm_epsilon must be 1e-05 (gptd's LayerNorm)", path);
        goto out;
    }
    const json_t *inner = json_object_get(root, "n_inner");
    if (inner && !json_is_null(inner) &&
        (!json_is_integer(inner) || json_integer_value(inner) != 4 * (json_int_t)cfg.n_embd)) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                         "%s: n_inner must be null or 4 n_embd (%d) for gptd's MLP", path,
                         4 * cfg.n_embd);
        goto out;
    }
    const json_t *tie = json_object_get(root, "tie_word_embeddings");
    if (tie && json_is_false(tie)) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                         "%s: tie_word_embeddings is false; gptd's LM head is tied to wte", path);
        goto out;
    }
    if ((rc = hf_probe_weights(dir, &cfg, err)) < 0)
        goto out;
    *ret_cfg = cfg;
out:
    json_decref(root);
    free(text);
    return rc;
}

/* ---- weights in ---- */

/* The file's tensor for GPT-2 name `name`: with or without "transformer.". */
static const struct gpt_st_tensor *hf_find(const struct gpt_st_index *ix, const char *name)
{
    char full[HF_NAME_MAX + 16];
    snprintf(full, sizeof(full), "transformer.%s", name);
    const struct gpt_st_tensor *t = gpt_st_find(ix, full);
    return t ? t : gpt_st_find(ix, name);
}

/* The file's tensor for gptd's tensor ti of layout m (its name in *hm),
 * checked to have the shape the config gives it: 0 and *ret, or
 * -GPT_E_CORRUPT naming the file and the tensor. */
static int hf_tensor(const struct gpt_st_file *f, const struct gpt_model *m,
                     const struct gpt_tensor_info *ti, struct hf_map *hm,
                     const struct gpt_st_tensor **ret, struct gpt_err *err)
{
    GPT_ASSERT(hf_map_tensor(m, ti, hm) == 0);
    const struct gpt_st_tensor *t = hf_find(&f->ix, hm->name);
    if (!t)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: no tensor %s (or transformer.%s)",
                           f->path, hm->name, hm->name);
    uint64_t want0 = hm->ndim == 1 ? hm->rows : hm->transpose ? hm->cols : hm->rows;
    uint64_t want1 = hm->transpose ? hm->rows : hm->cols;
    if (t->ndim != hm->ndim || t->shape[0] != want0 || (hm->ndim == 2 && t->shape[1] != want1))
        return gpt_err_set(
            err, -GPT_E_CORRUPT, NULL,
            "%s: tensor %s has shape [%llu%s%llu], config.json says [%llu, "
            "%llu]",
            f->path, t->name, (unsigned long long)t->shape[0], t->ndim > 1 ? ", " : " ndim ",
            (unsigned long long)(t->ndim > 1 ? t->shape[1] : (uint64_t)t->ndim),
            (unsigned long long)want0, (unsigned long long)(hm->ndim == 2 ? want1 : 1));
    *ret = t;
    return 0;
}

/* Opens dir's model.safetensors (its header checked against its size) and
 * checks that it holds config.json's model `m`: enough tensor data for it
 * at 2 bytes a parameter, then every tensor by name and shape. */
static int hf_open_weights(const char *dir, const struct gpt_model *m, struct gpt_st_file *ret,
                           struct gpt_err *err)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/model.safetensors", dir) >= (int)sizeof(path))
        return gpt_err_set(err, -ENAMETOOLONG, NULL, "path too long: %s", dir);
    int rc = gpt_st_open(path, ret, err);
    if (rc < 0)
        return rc;
    rc = gpt_fmt_check_data_size(path, "config.json", m, 2, ret->size - ret->ix.data_start, err);
    for (size_t i = 0; rc == 0 && i < m->n_tensors; i++) {
        struct hf_map hm;
        const struct gpt_st_tensor *t;
        rc = hf_tensor(ret, m, &m->tensors[i], &hm, &t, err);
    }
    if (rc < 0)
        gpt_st_close(ret);
    return rc;
}

/* config.json's model against the weights file, before a caller allocates
 * it (gpt_fmt_load allocates what the probe returns). */
static int hf_probe_weights(const char *dir, const struct gpt_model_config *cfg,
                            struct gpt_err *err)
{
    struct gpt_model *m = malloc(sizeof(*m));
    struct gpt_st_file f = {.fd = -1};
    if (!m)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    int rc = gpt_model_layout(m, cfg, err);
    if (rc == 0 && (rc = hf_open_weights(dir, m, &f, err)) == 0)
        gpt_st_close(&f);
    free(m);
    return rc;
}

int gpt_hf_load(const char *dir, const struct gpt_model *m, float *params, struct gpt_err *err)
{
    struct gpt_st_file f = {.fd = -1};
    float *tmp = NULL;
    int rc;

    if ((rc = hf_open_weights(dir, m, &f, err)) < 0)
        return rc;
    memset(params, 0, m->n_params * sizeof(float)); /* wte's padding rows stay zero */
    for (size_t i = 0; i < m->n_tensors; i++) {
        const struct gpt_tensor_info *ti = &m->tensors[i];
        struct hf_map hm;
        const struct gpt_st_tensor *t;
        if ((rc = hf_tensor(&f, m, ti, &hm, &t, err)) < 0)
            goto out;
        float *dst = params + ti->offset;
        if (!hm.transpose) {
            rc = gpt_st_read_f32(&f, t, dst, err);
        } else {
            free(tmp);
            tmp = malloc(t->count * sizeof(float));
            if (!tmp) {
                rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory reading %s", t->name);
                goto out;
            }
            rc = gpt_st_read_f32(&f, t, tmp, err);
            /* file (cols, rows) -> gptd (rows, cols) */
            for (uint64_t r = 0; rc == 0 && r < hm.rows; r++)
                for (uint64_t c = 0; c < hm.cols; c++)
                    dst[r * hm.cols + c] = tmp[c * hm.rows + r];
        }
        if (rc < 0)
            goto out;
    }
out:
    free(tmp);
    gpt_st_close(&f);
    return rc;
}

/* ---- folder out ---- */

static int hf_write_text(const char *dir, const char *name, const char *text, mode_t mode,
                         struct gpt_err *err)
{
    char path[PATH_MAX];
    struct gpt_atomic_file f;
    if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
        return gpt_err_set(err, -ENAMETOOLONG, NULL, "path too long: %s", dir);
    int rc = gpt_atomic_file_open(&f, path, NULL, mode, err);
    if (rc == 0 && (rc = gpt_atomic_file_write(&f, text, strlen(text), err)) == 0)
        return gpt_atomic_file_commit(&f, err);
    gpt_atomic_file_abort(&f);
    return rc;
}

/* Copies the tokenizer file `from` (the first of two names present in
 * vocab_dir) to dir/`to`. */
static int hf_copy_vocab(const char *vocab_dir, const char *a, const char *b, const char *dir,
                         const char *to, mode_t mode, struct gpt_err *err)
{
    char path[PATH_MAX];
    char *text = NULL;
    size_t len;
    if (snprintf(path, sizeof(path), "%s/%s", vocab_dir, a) >= (int)sizeof(path))
        return gpt_err_set(err, -ENAMETOOLONG, NULL, "path too long: %s", vocab_dir);
    if (access(path, F_OK) != 0 &&
        snprintf(path, sizeof(path), "%s/%s", vocab_dir, b) >= (int)sizeof(path))
        return gpt_err_set(err, -ENAMETOOLONG, NULL, "path too long: %s", vocab_dir);
    int rc = hf_read_file(path, 64u << 20, &text, &len, err);
    if (rc < 0)
        return rc;
    if (strlen(text) != len)
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s holds a NUL byte", path);
    else
        rc = hf_write_text(dir, to, text, mode, err);
    free(text);
    return rc;
}

static char *hf_config_json(const struct gpt_model_config *c, int gpt2_vocab)
{
    json_t *eos = gpt2_vocab ? json_integer(50256) : json_null();
    json_t *root = json_pack(
        "{s:s, s:[s], s:f, s:o, s:f, s:o, s:f, s:f, s:s, s:i, s:i, s:i, s:n, s:i, s:i, s:f, "
        "s:b, s:b, s:b, s:s, s:i, s:b}",
        "activation_function", "gelu_new", "architectures", "GPT2LMHeadModel", "attn_pdrop", 0.0,
        "bos_token_id", json_copy(eos), "embd_pdrop", 0.0, "eos_token_id", eos, "initializer_range",
        0.02, "layer_norm_epsilon", 1e-5, "model_type", "gpt2", "n_ctx", c->block_size, "n_embd",
        c->n_embd, "n_head", c->n_head, "n_inner", "n_layer", c->n_layer, "n_positions",
        c->block_size, "resid_pdrop", 0.0, "scale_attn_weights", 1, "tie_word_embeddings", 1,
        "use_cache", 1, "torch_dtype", "float32", "vocab_size", c->vocab_size,
        "reorder_and_upcast_attn", 0);
    if (!root)
        return NULL;
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    return text;
}

/* Writes model.safetensors into the (temporary) folder dir. */
static int hf_write_weights(const char *dir, const struct gpt_model *m, const float *params,
                            mode_t mode, const atomic_int *cancel, struct gpt_err *err)
{
    char path[PATH_MAX];
    struct gpt_st_out *outs = calloc(m->n_tensors, sizeof(*outs));
    struct hf_map *maps = calloc(m->n_tensors, sizeof(*maps));
    struct gpt_atomic_file f = {.fd = -1};
    int rc = 0;
    if (!outs || !maps) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        const struct gpt_tensor_info *ti = &m->tensors[i];
        GPT_ASSERT(hf_map_tensor(m, ti, &maps[i]) == 0);
        char full[HF_NAME_MAX + 16];
        snprintf(full, sizeof(full), "transformer.%s", maps[i].name);
        memcpy(maps[i].name, full, sizeof(maps[i].name) - 1);
        maps[i].name[sizeof(maps[i].name) - 1] = '\0';
        outs[i] = (struct gpt_st_out){.name = maps[i].name,
                                      .data = params + ti->offset,
                                      .rows = maps[i].rows,
                                      .cols = maps[i].cols,
                                      .ndim = maps[i].ndim,
                                      .transpose = maps[i].transpose};
    }
    if (snprintf(path, sizeof(path), "%s/model.safetensors", dir) >= (int)sizeof(path)) {
        rc = gpt_err_set(err, -ENAMETOOLONG, NULL, "path too long: %s", dir);
        goto out;
    }
    if ((rc = gpt_atomic_file_open(&f, path, NULL, mode, err)) < 0)
        goto out;
    static const char *const meta[] = {"format", "pt", NULL};
    if ((rc = gpt_st_write_fd(f.fd, outs, m->n_tensors, meta, cancel, err)) == 0)
        rc = gpt_atomic_file_commit(&f, err);
out:
    gpt_atomic_file_abort(&f);
    free(outs);
    free(maps);
    return rc;
}

/* Removes the temporary folder and what this writer put in it. */
static void hf_remove_tmp(const char *tmp)
{
    static const char *const names[] = {"config.json", "model.safetensors", "vocab.json",
                                        "merges.txt", "tokenizer_config.json"};
    char path[PATH_MAX];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (snprintf(path, sizeof(path), "%s/%s", tmp, names[i]) < (int)sizeof(path))
            unlink(path);
    }
    rmdir(tmp);
}

int gpt_hf_write(const char *path, const struct gpt_fmt_src *src, struct gpt_err *err)
{
    struct gpt_model m;
    char tmp[PATH_MAX], parent[PATH_MAX];
    char *cfg_text = NULL;
    int rc, made = 0;
    mode_t fmode = src->file_mode ? src->file_mode : 0644;

    if ((rc = gpt_model_layout(&m, &src->cfg, err)) < 0)
        return rc;
    if (m.n_params != src->n_params)
        return gpt_err_set(err, -EINVAL, NULL, "%zu parameters for a model of %zu", src->n_params,
                           m.n_params);
    if ((rc = gpt_fmt_check_target(path, 1, err)) < 0)
        return rc;
    snprintf(parent, sizeof(parent), "%s", path);
    int k = src->tmp_prefix && !strchr(src->tmp_prefix, '/')
                ? snprintf(tmp, sizeof(tmp), "%s/%sXXXXXX", dirname(parent), src->tmp_prefix)
                : snprintf(tmp, sizeof(tmp), "%s.tmp-XXXXXX", path);
    if (strlen(path) > sizeof(tmp) - 32 || k < 0 || k >= (int)sizeof(tmp))
        return gpt_err_set(err, -ENAMETOOLONG, NULL, "path too long: %s", path);
    /* 0700 while it fills, whatever the final mode: a mode without the
     * owner's write bit would refuse the files. */
    if (!mkdtemp(tmp))
        return gpt_err_set(err, -errno, NULL, "cannot create a folder beside %s: %s", path,
                           strerror(errno));
    made = 1;
    cfg_text = hf_config_json(&src->cfg, src->vocab_dir != NULL);
    if (!cfg_text) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        goto out;
    }
    if ((rc = hf_write_text(tmp, "config.json", cfg_text, fmode, err)) < 0 ||
        (rc = hf_write_weights(tmp, &m, src->params, fmode, src->cancel, err)) < 0)
        goto out;
    if (src->vocab_dir) {
        char tc[256];
        snprintf(tc, sizeof(tc),
                 "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"model_max_length\": %d,\n"
                 "  \"bos_token\": \"<|endoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n"
                 "  \"unk_token\": \"<|endoftext|>\"\n}\n",
                 src->cfg.block_size);
        if ((rc = hf_copy_vocab(src->vocab_dir, "vocab.json", "encoder.json", tmp, "vocab.json",
                                fmode, err)) < 0 ||
            (rc = hf_copy_vocab(src->vocab_dir, "merges.txt", "vocab.bpe", tmp, "merges.txt", fmode,
                                err)) < 0 ||
            (rc = hf_write_text(tmp, "tokenizer_config.json", tc, fmode, err)) < 0)
            goto out;
    }
    if (chmod(tmp, src->dir_mode ? src->dir_mode : 0755) < 0) {
        rc = gpt_err_set(err, -errno, NULL, "chmod %s: %s", tmp, strerror(errno));
        goto out;
    }
    /* rename(2) of a folder never follows a symlink at the target and
     * fails when anything appeared there meanwhile. */
    if (rename(tmp, path) < 0) {
        rc = gpt_err_set(err, -errno, NULL, "cannot rename %s to %s: %s", tmp, path,
                         strerror(errno));
        goto out;
    }
    made = 0;
    /* The folder's new name must survive a crash too. */
    snprintf(parent, sizeof(parent), "%s", path);
    if ((rc = gpt_atomic_fsync_dir(dirname(parent))) < 0)
        rc = gpt_err_set(err, rc, NULL, "%s: fsync of the folder: %s", path, strerror(-rc));
out:
    if (made)
        hf_remove_tmp(tmp);
    free(cfg_text);
    return rc;
}
