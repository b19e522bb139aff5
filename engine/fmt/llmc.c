/*
 * llmc: llm.c checkpoints in and out (see llmc.h for the format). The
 * reader checks the whole header and the file size first, then reads the
 * tensors one (kind, layer) span at a time into gptd's layer-major layout.
 * Blocking I/O on the calling thread.
 */
#include "llmc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fmt.h"
#include "fmt_out.h"
#include "model.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "llmc.c reads and writes float arrays as they are in memory: add byte swapping"
#endif

#define LLMC_BLOCK_KINDS 12 /* tensors per transformer block, in llm.c's and gptd's order */
#define LLMC_BF16_CHUNK  65536

/* Where the bytes come from: a file (fd) or memory. */
struct llmc_src {
    const unsigned char *mem;
    int fd;
    const char *name;
};

static int llmc_src_read(const struct llmc_src *s, uint64_t off, void *dst, size_t n,
                         struct gpt_err *err)
{
    if (s->mem) { /* bounds were checked against the length with the header */
        memcpy(dst, s->mem + off, n);
        return 0;
    }
    unsigned char *q = dst;
    while (n > 0) {
        ssize_t r = pread(s->fd, q, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int rc = -errno;
            return gpt_err_set(err, rc, NULL, "%s: read: %s", s->name, strerror(-rc));
        }
        if (r == 0)
            return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: the file shrank while being read",
                               s->name);
        q += r;
        off += (uint64_t)r;
        n -= (size_t)r;
    }
    return 0;
}

/* count parameters at file offset off (float32 or bfloat16) into dst. */
static int llmc_read_floats(const struct llmc_src *s, int version, uint64_t off, float *dst,
                            size_t count, struct gpt_err *err)
{
    if (version == GPT_LLMC_VERSION_FP32)
        return llmc_src_read(s, off, dst, count * sizeof(float), err);
    uint16_t chunk[LLMC_BF16_CHUNK];
    for (size_t done = 0; done < count;) {
        size_t k = count - done < LLMC_BF16_CHUNK ? count - done : LLMC_BF16_CHUNK;
        int rc = llmc_src_read(s, off + done * 2, chunk, k * 2, err);
        if (rc < 0)
            return rc;
        for (size_t i = 0; i < k; i++) {
            uint32_t x = (uint32_t)chunk[i] << 16;
            memcpy(&dst[done + i], &x, 4);
        }
        done += k;
    }
    return 0;
}

static int32_t llmc_get_i32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

int gpt_llmc_parse_header(const void *buf, size_t len, uint64_t file_size, const char *name,
                          struct gpt_llmc_header *ret, struct gpt_err *err)
{
    const unsigned char *p = buf;
    if (len < GPT_LLMC_HEADER_BYTES || file_size < GPT_LLMC_HEADER_BYTES)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "%s: %" PRIu64 " bytes, shorter than llm.c's %d-byte header", name,
                           file_size < len ? file_size : (uint64_t)len, GPT_LLMC_HEADER_BYTES);
    int32_t h[8];
    for (int i = 0; i < 8; i++)
        h[i] = llmc_get_i32(p + 4 * i);
    if (h[0] != GPT_LLMC_MAGIC)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "%s: magic %" PRId32 " is not an llm.c checkpoint's (%d)", name, h[0],
                           GPT_LLMC_MAGIC);
    if (h[1] != GPT_LLMC_VERSION_FP32 && h[1] != GPT_LLMC_VERSION_BF16)
        return gpt_err_set(err, -GPT_E_VERSION, NULL,
                           "%s: llm.c checkpoint version %" PRId32
                           " (gptd reads 3, float32, and 5, bfloat16)",
                           name, h[1]);
    static const struct {
        const char *field;
        int64_t max;
    } dims[6] = {{"maxT (block_size)", 65536},
                 {"V (vocab_size)", 1 << 24},
                 {"L (n_layer)", GPT_JOB_N_LAYER_MAX},
                 {"NH (n_head)", 65536},
                 {"C (n_embd)", 65536},
                 {"Vp (padded vocab_size)", GPT_LLMC_VP_MAX}};
    for (int i = 0; i < 6; i++)
        if (h[2 + i] < 1 || h[2 + i] > dims[i].max)
            return gpt_err_set(err, -EINVAL, NULL,
                               "%s: header field %d, %s, is %" PRId32 " (gptd takes 1..%" PRId64
                               ")",
                               name, 2 + i, dims[i].field, h[2 + i], dims[i].max);
    struct gpt_llmc_header r = {.version = h[1],
                                .maxT = (size_t)h[2],
                                .V = (size_t)h[3],
                                .L = (size_t)h[4],
                                .NH = (size_t)h[5],
                                .C = (size_t)h[6],
                                .Vp = (size_t)h[7]};
    if (r.C % r.NH != 0)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "%s: C (n_embd) %zu is not a multiple of NH (n_head) %zu", name, r.C,
                           r.NH);
    if (r.Vp < r.V)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "%s: padded vocabulary Vp %zu is smaller than the vocabulary V %zu",
                           name, r.Vp, r.V);
    /* Each term is below 2^42 under the limits above: no overflow. */
    uint64_t C = r.C, L = r.L;
    r.n_params = (uint64_t)r.Vp * C + (uint64_t)r.maxT * C + L * (12 * C * C + 13 * C) + 2 * C;
    r.file_bytes =
        GPT_LLMC_HEADER_BYTES + r.n_params * (r.version == GPT_LLMC_VERSION_FP32 ? 4 : 2);
    if (file_size != r.file_bytes)
        return gpt_err_set(
            err, -GPT_E_CORRUPT, NULL,
            "%s: %" PRIu64 " bytes, but its header (version %d, maxT %zu, V %zu, "
            "L %zu, NH %zu, C %zu, Vp %zu) makes %" PRIu64 " parameters: %" PRIu64 " bytes%s",
            name, file_size, r.version, r.maxT, r.V, r.L, r.NH, r.C, r.Vp, r.n_params, r.file_bytes,
            file_size < r.file_bytes ? " (truncated?)" : "");
    *ret = r;
    return 0;
}

static struct gpt_model_config llmc_config(const struct gpt_llmc_header *h)
{
    return (struct gpt_model_config){.n_layer = (int)h->L,
                                     .n_head = (int)h->NH,
                                     .n_embd = (int)h->C,
                                     .block_size = (int)h->maxT,
                                     .vocab_size = (int)h->V};
}

/* The file's parameters (its size checked with the header) into params,
 * gptd's layout m of the file's config (zeroed by the caller). */
static int llmc_fill(const struct llmc_src *s, const struct gpt_llmc_header *h,
                     const struct gpt_model *m, float *params, struct gpt_err *err)
{
    size_t esz = h->version == GPT_LLMC_VERSION_FP32 ? 4 : 2, C = h->C;
    uint64_t off = GPT_LLMC_HEADER_BYTES;
    int rc;
    /* wte: all of it when the paddings agree, else the V real rows (gptd's
     * padding rows stay zero) */
    size_t rows = h->Vp == m->Vp ? h->Vp : h->V;
    if ((rc = llmc_read_floats(s, h->version, off, params + m->tensors[0].offset, rows * C, err)) <
        0)
        return rc;
    off += (uint64_t)h->Vp * C * esz;
    if ((rc = llmc_read_floats(s, h->version, off, params + m->tensors[1].offset,
                               m->tensors[1].count, err)) < 0)
        return rc;
    off += (uint64_t)m->tensors[1].count * esz;
    /* llm.c keeps each kind's L layers together; gptd keeps each layer's kinds */
    for (size_t k = 0; k < LLMC_BLOCK_KINDS; k++)
        for (size_t l = 0; l < h->L; l++) {
            const struct gpt_tensor_info *t = &m->tensors[2 + l * LLMC_BLOCK_KINDS + k];
            if ((rc = llmc_read_floats(s, h->version, off, params + t->offset, t->count, err)) < 0)
                return rc;
            off += (uint64_t)t->count * esz;
        }
    for (size_t i = 2 + h->L * LLMC_BLOCK_KINDS; i < m->n_tensors; i++) {
        if ((rc = llmc_read_floats(s, h->version, off, params + m->tensors[i].offset,
                                   m->tensors[i].count, err)) < 0)
            return rc;
        off += (uint64_t)m->tensors[i].count * esz;
    }
    GPT_ASSERT(off == h->file_bytes);
    return 0;
}

/* The file into a new gptd-layout array. */
static int llmc_load(const struct llmc_src *s, const struct gpt_llmc_header *h,
                     struct gpt_model_config *ret_cfg, float **ret_params, size_t *ret_n,
                     struct gpt_err *err)
{
    struct gpt_model_config cfg = llmc_config(h);
    struct gpt_model *m = malloc(sizeof(*m));
    float *params = NULL;
    int rc;
    if (!m) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "%s: out of memory", s->name);
        goto out;
    }
    if ((rc = gpt_model_layout(m, &cfg, err)) < 0)
        goto out;
    params = calloc(m->n_params, sizeof(float));
    if (!params) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "%s: out of memory for %zu parameters", s->name,
                         m->n_params);
        goto out;
    }
    if ((rc = llmc_fill(s, h, m, params, err)) < 0)
        goto out;
    *ret_cfg = cfg;
    *ret_params = params;
    *ret_n = m->n_params;
    params = NULL;
out:
    free(params);
    free(m);
    return rc;
}

int gpt_llmc_read_mem(const void *buf, size_t len, const char *name,
                      struct gpt_model_config *ret_cfg, float **ret_params, size_t *ret_n,
                      struct gpt_err *err)
{
    struct gpt_llmc_header h;
    int rc = gpt_llmc_parse_header(buf, len, len, name, &h, err);
    if (rc < 0)
        return rc;
    struct llmc_src s = {.mem = buf, .fd = -1, .name = name};
    return llmc_load(&s, &h, ret_cfg, ret_params, ret_n, err);
}

/* Opens path and checks its header against its size; *ret_fd is the open file. */
static int llmc_open(const char *path, struct gpt_llmc_header *ret_h, int *ret_fd,
                     struct gpt_err *err)
{
    unsigned char hbuf[GPT_LLMC_HEADER_BYTES];
    struct stat st;
    int rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        return gpt_err_set(err, rc, NULL, "%s: %s", path, strerror(-rc));
    }
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        gpt_err_set(err, rc, NULL, "%s: %s", path, strerror(-rc));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = gpt_err_set(err, -EINVAL, NULL, "%s: not a regular file", path);
        goto fail;
    }
    struct llmc_src s = {.mem = NULL, .fd = fd, .name = path};
    size_t hlen = (uint64_t)st.st_size < sizeof(hbuf) ? (size_t)st.st_size : sizeof(hbuf);
    if ((rc = llmc_src_read(&s, 0, hbuf, hlen, err)) < 0)
        goto fail;
    if ((rc = gpt_llmc_parse_header(hbuf, hlen, (uint64_t)st.st_size, path, ret_h, err)) < 0)
        goto fail;
    *ret_fd = fd;
    return 0;
fail:
    close(fd);
    return rc;
}

int gpt_llmc_read(const char *path, struct gpt_model_config *ret_cfg, float **ret_params,
                  size_t *ret_n, struct gpt_err *err)
{
    struct gpt_llmc_header h;
    int fd, rc = llmc_open(path, &h, &fd, err);
    if (rc < 0)
        return rc;
    struct llmc_src s = {.mem = NULL, .fd = fd, .name = path};
    rc = llmc_load(&s, &h, ret_cfg, ret_params, ret_n, err);
    close(fd);
    return rc;
}

int gpt_llmc_probe(const char *path, struct gpt_model_config *ret_cfg, struct gpt_err *err)
{
    struct gpt_llmc_header h;
    int fd, rc = llmc_open(path, &h, &fd, err);
    if (rc < 0)
        return rc;
    close(fd);
    *ret_cfg = llmc_config(&h);
    return 0;
}

int gpt_llmc_load(const char *path, const struct gpt_model *layout, float *params,
                  struct gpt_err *err)
{
    struct gpt_llmc_header h;
    int fd, rc = llmc_open(path, &h, &fd, err);
    if (rc < 0)
        return rc;
    struct gpt_model_config c = llmc_config(&h);
    const struct gpt_model_config *w = &layout->cfg;
    if (c.n_layer != w->n_layer || c.n_head != w->n_head || c.n_embd != w->n_embd ||
        c.block_size != w->block_size || c.vocab_size != w->vocab_size) {
        rc = gpt_err_set(err, -EINVAL, NULL,
                         "%s: the checkpoint's model (n_layer %d, n_head %d, n_embd %d, "
                         "block_size %d, vocab_size %d) is not the one asked for (%d, %d, %d, %d, "
                         "%d)",
                         path, c.n_layer, c.n_head, c.n_embd, c.block_size, c.vocab_size,
                         w->n_layer, w->n_head, w->n_embd, w->block_size, w->vocab_size);
    } else {
        struct llmc_src s = {.mem = NULL, .fd = fd, .name = path};
        memset(params, 0, layout->n_params * sizeof(float));
        rc = llmc_fill(&s, &h, layout, params, err);
    }
    close(fd);
    return rc;
}

/* Between tensors: -ECANCELED when asked to stop. */
static int llmc_check_cancel(const atomic_int *cancel, const char *path, struct gpt_err *err)
{
    if (gpt_fmt_cancelled(cancel))
        return gpt_err_set(err, -ECANCELED, NULL, "the export to %s was cancelled", path);
    return 0;
}

int gpt_llmc_write_opts(const char *path, const struct gpt_model_config *cfg, const float *params,
                        const char *vocab_dir, const struct gpt_llmc_write_opts *opts,
                        struct gpt_err *err)
{
    (void)vocab_dir;
    const struct gpt_llmc_write_opts def = {0}, *op = opts ? opts : &def;
    const atomic_int *cancel = op->cancel;
    struct gpt_model *m = malloc(sizeof(*m));
    struct gpt_fmt_out o = {.f.fd = -1};
    int rc;
    if (!m)
        return gpt_err_set(err, -ENOMEM, NULL, "%s: out of memory", path);
    if ((rc = gpt_model_layout(m, cfg, err)) < 0)
        goto out;
    unsigned char hdr[GPT_LLMC_HEADER_BYTES] = {0};
    int32_t h[8] = {GPT_LLMC_MAGIC, GPT_LLMC_VERSION_FP32, cfg->block_size, cfg->vocab_size,
                    cfg->n_layer,   cfg->n_head,           cfg->n_embd,     (int32_t)m->Vp};
    for (int i = 0; i < 8; i++)
        for (int b = 0; b < 4; b++)
            hdr[4 * i + b] = (unsigned char)((uint32_t)h[i] >> (8 * b));
    if ((rc = gpt_fmt_out_open(&o, path, op->mode, op->tmp_prefix, err)) < 0)
        goto out;
    rc = gpt_fmt_out_write(&o, hdr, sizeof(hdr), err);
    for (size_t i = 0; rc == 0 && i < 2; i++) /* wte (with gptd's padding rows), wpe */
        if ((rc = llmc_check_cancel(cancel, path, err)) == 0)
            rc = gpt_fmt_out_write(&o, params + m->tensors[i].offset, m->tensors[i].count * 4, err);
    size_t L = (size_t)cfg->n_layer;
    for (size_t k = 0; rc == 0 && k < LLMC_BLOCK_KINDS; k++)
        for (size_t l = 0; rc == 0 && l < L; l++) {
            const struct gpt_tensor_info *t = &m->tensors[2 + l * LLMC_BLOCK_KINDS + k];
            if ((rc = llmc_check_cancel(cancel, path, err)) == 0)
                rc = gpt_fmt_out_write(&o, params + t->offset, t->count * 4, err);
        }
    for (size_t i = 2 + L * LLMC_BLOCK_KINDS; rc == 0 && i < m->n_tensors; i++)
        if ((rc = llmc_check_cancel(cancel, path, err)) == 0)
            rc = gpt_fmt_out_write(&o, params + m->tensors[i].offset, m->tensors[i].count * 4, err);
    if (rc == 0)
        rc = gpt_fmt_out_commit(&o, err);
out:
    gpt_fmt_out_abort(&o);
    free(m);
    return rc;
}
