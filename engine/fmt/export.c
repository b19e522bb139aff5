/*
 * export: the format table (one row per format), detection, whole loads and
 * the output-path check (see export.h). Any thread; blocking I/O.
 */
#include "export.h"
#include "gguf.h"
#include "llmc.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hf.h"
#include "snapshot.h"

/* ---- gptd's own snapshots (weights only) ---- */

static int fmt_gpts_probe(const char *path, struct gpt_model_config *ret_cfg, struct gpt_err *err)
{
    struct gpt_snapshot_meta meta;
    int rc = gpt_snapshot_read_meta(path, &meta, err);
    if (rc < 0)
        return rc;
    memset(ret_cfg, 0, sizeof(*ret_cfg));
    ret_cfg->n_layer = meta.cfg.n_layer;
    ret_cfg->n_head = meta.cfg.n_head;
    ret_cfg->n_embd = meta.cfg.n_embd;
    ret_cfg->block_size = meta.cfg.block_size;
    ret_cfg->vocab_size = meta.cfg.vocab_size;
    /* The header's model and its parameter count are separate fields, and
     * only the count is bounded by the file: a model that does not have
     * exactly that many parameters is refused here, before a reader
     * allocates a buffer the model's size (a sliced snapshot's manifest
     * carries the same count). */
    struct gpt_model m;
    if ((rc = gpt_model_layout(&m, ret_cfg, err)) < 0)
        return rc;
    if (m.n_params != meta.n_params)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "%s: its header's model has %zu parameters but the header counts %llu",
                           path, m.n_params, (unsigned long long)meta.n_params);
    return 0;
}

static int fmt_gpts_load(const char *path, const struct gpt_model *layout, float *params,
                         struct gpt_err *err)
{
    struct gpt_snapshot_meta meta;
    int rc = gpt_snapshot_read_meta(path, &meta, err);
    if (rc < 0)
        return rc;
    if (meta.n_params != layout->n_params)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s holds %llu parameters, expected %zu",
                           path, (unsigned long long)meta.n_params, layout->n_params);
    return gpt_snapshot_read(path, &meta, params, NULL, NULL, err);
}

/* The one table. llm.c and GGUF rows come with their readers and writers. */
/* Float32 unless the source asks for a narrower type (hf and llm.c
 * checkpoints are written as float32 only). */
static int fmt_f32_only(const struct gpt_fmt_src *s, const char *what, struct gpt_err *e)
{
    if (s->dtype && strcmp(s->dtype, "f32") != 0)
        return gpt_err_set(e, -EINVAL, "dtype",
                           "%s is written as f32 only (--dtype %s is for gguf)", what, s->dtype);
    return 0;
}

static int fmt_llmc_write(const char *p, const struct gpt_fmt_src *s, struct gpt_err *e)
{
    int rc = fmt_f32_only(s, "an llm.c checkpoint", e);
    const struct gpt_llmc_write_opts o = {s->file_mode, s->tmp_prefix, s->cancel};
    return rc < 0 ? rc : gpt_llmc_write_opts(p, &s->cfg, s->params, s->vocab_dir, &o, e);
}

static int fmt_gguf_write(const char *p, const struct gpt_fmt_src *s, struct gpt_err *e)
{
    struct gpt_gguf_write_opts o = {.dtype = GPT_GGUF_F32,
                                    .cancel = s->cancel,
                                    .mode = s->file_mode,
                                    .tmp_prefix = s->tmp_prefix,
                                    .name = s->name};
    if (s->dtype) {
        int rc = gpt_gguf_dtype_parse(s->dtype, &o.dtype, e);
        if (rc < 0)
            return rc;
    }
    return gpt_gguf_write_opts(p, &s->cfg, s->params, s->vocab_dir, &o, e);
}

static int fmt_hf_write(const char *p, const struct gpt_fmt_src *s, struct gpt_err *e)
{
    int rc = fmt_f32_only(s, "a Hugging Face folder", e);
    return rc < 0 ? rc : gpt_hf_write(p, s, e);
}

static const struct gpt_fmt_ops fmt_table[] = {
    {.kind = GPT_FMT_GPTS, .probe = fmt_gpts_probe, .load = fmt_gpts_load, .write = NULL},
    {.kind = GPT_FMT_HF, .probe = gpt_hf_probe, .load = gpt_hf_load, .write = fmt_hf_write},
    {.kind = GPT_FMT_LLMC, .probe = gpt_llmc_probe, .load = gpt_llmc_load, .write = fmt_llmc_write},
    {.kind = GPT_FMT_GGUF, .probe = gpt_gguf_probe, .load = gpt_gguf_load, .write = fmt_gguf_write},
};

const struct gpt_fmt_ops *gpt_fmt_ops_of(enum gpt_fmt_kind kind)
{
    for (size_t i = 0; i < sizeof(fmt_table) / sizeof(fmt_table[0]); i++)
        if (fmt_table[i].kind == kind)
            return &fmt_table[i];
    return NULL;
}

int gpt_fmt_export(enum gpt_fmt_kind kind, const char *path, const struct gpt_fmt_src *src,
                   struct gpt_err *err)
{
    const struct gpt_fmt_ops *o = gpt_fmt_ops_of(kind);
    if (!o || !o->write)
        return gpt_err_set(err, -ENOSYS, "format",
                           "writing the %s format is not built into this gptd",
                           gpt_fmt_kind_name(kind));
    return o->write(path, src, err);
}

int gpt_fmt_detect(const char *path, enum gpt_fmt_kind *ret_kind, struct gpt_err *err)
{
    struct stat st;
    unsigned char magic[8] = {0};
    if (stat(path, &st) < 0)
        return gpt_err_set(err, -errno, NULL, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        *ret_kind = GPT_FMT_HF;
        return 0;
    }
    if (!S_ISREG(st.st_mode))
        return gpt_err_set(err, -EINVAL, NULL, "%s is neither a file nor a folder", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return gpt_err_set(err, -errno, NULL, "cannot open %s: %s", path, strerror(errno));
    ssize_t k = read(fd, magic, sizeof(magic));
    close(fd);
    uint32_t m32 = (uint32_t)magic[0] | (uint32_t)magic[1] << 8 | (uint32_t)magic[2] << 16 |
                   (uint32_t)magic[3] << 24;
    if (k == 8 && memcmp(magic, "GPTDSNAP", 8) == 0)
        *ret_kind = GPT_FMT_GPTS;
    else if (k >= 4 && m32 == 20240326u)
        *ret_kind = GPT_FMT_LLMC;
    else if (k >= 4 && memcmp(magic, "GGUF", 4) == 0)
        *ret_kind = GPT_FMT_GGUF;
    else
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "%s is not a model gptd reads (a gptd snapshot, an llm.c checkpoint "
                           "or a Hugging Face folder)",
                           path);
    return 0;
}

int gpt_fmt_probe(const char *path, enum gpt_fmt_kind *ret_kind, struct gpt_model_config *ret_cfg,
                  struct gpt_err *err)
{
    enum gpt_fmt_kind kind;
    int rc = gpt_fmt_detect(path, &kind, err);
    if (rc < 0)
        return rc;
    const struct gpt_fmt_ops *o = gpt_fmt_ops_of(kind);
    if (!o || !o->probe || !o->load)
        return gpt_err_set(err, -ENOSYS, NULL,
                           "%s is a %s file; reading it is not built into "
                           "this gptd",
                           path, gpt_fmt_kind_name(kind));
    if ((rc = o->probe(path, ret_cfg, err)) < 0)
        return rc;
    *ret_kind = kind;
    return 0;
}

void gpt_fmt_loaded_done(struct gpt_fmt_loaded *l)
{
    if (!l)
        return;
    free(l->params);
    l->params = NULL;
}

int gpt_fmt_load(const char *path, struct gpt_fmt_loaded *ret, struct gpt_err *err)
{
    struct gpt_fmt_loaded l = {0};
    struct gpt_model m;
    int rc = gpt_fmt_probe(path, &l.kind, &l.cfg, err);
    if (rc < 0)
        return rc;
    if ((rc = gpt_model_layout(&m, &l.cfg, err)) < 0)
        return rc;
    l.n_params = m.n_params;
    l.params = malloc(m.n_params * sizeof(float));
    if (!l.params)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory for %zu parameters", m.n_params);
    if ((rc = gpt_fmt_ops_of(l.kind)->load(path, &m, l.params, err)) < 0) {
        gpt_fmt_loaded_done(&l);
        return rc;
    }
    *ret = l;
    return 0;
}

/* ---- atomic writes ---- */

int gpt_fmt_check_target(const char *path, int dir, struct gpt_err *err)
{
    struct stat st;
    if (!path[0])
        return gpt_err_set(err, -EINVAL, "output", "no output path given");
    if (lstat(path, &st) < 0) {
        if (errno == ENOENT)
            return 0;
        return gpt_err_set(err, -errno, "output", "%s: %s", path, strerror(errno));
    }
    if (S_ISLNK(st.st_mode))
        return gpt_err_set(err, -ELOOP, "output", "%s is a symbolic link; give the real path",
                           path);
    if (dir)
        return gpt_err_set(err, -EEXIST, "output", "%s exists; remove it or choose a new name",
                           path);
    if (!S_ISREG(st.st_mode))
        return gpt_err_set(err, -EEXIST, "output", "%s exists and is not a regular file", path);
    return 0;
}
