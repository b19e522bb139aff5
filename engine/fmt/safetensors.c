/*
 * safetensors: the reader (header checks, dtype conversion) and the F32
 * writer (see safetensors.h). Owns nothing between calls but what an index
 * or an open file holds. Any thread; blocking I/O.
 */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fmt.h"

#define ST_DIM_MAX ((uint64_t)1 << 40) /* one dimension; products are checked too */

static const char *const st_dtype_names[] = {
    [GPT_ST_F32] = "F32",
    [GPT_ST_F16] = "F16",
    [GPT_ST_BF16] = "BF16",
};
static const uint64_t st_dtype_bytes[] = {[GPT_ST_F32] = 4, [GPT_ST_F16] = 2, [GPT_ST_BF16] = 2};

float gpt_st_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13); /* inf, nan */
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal: normalise */
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while (!(man & 0x400u));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

float gpt_st_bf16_to_f32(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

static uint64_t st_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

void gpt_st_index_done(struct gpt_st_index *ix)
{
    if (!ix)
        return;
    free(ix->t);
    ix->t = NULL;
    ix->n = 0;
}

const struct gpt_st_tensor *gpt_st_find(const struct gpt_st_index *ix, const char *name)
{
    for (size_t i = 0; i < ix->n; i++)
        if (strcmp(ix->t[i].name, name) == 0)
            return &ix->t[i];
    return NULL;
}

static int st_cmp_begin(const void *a, const void *b)
{
    const struct gpt_st_tensor *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* A non-negative JSON integer no larger than max, into *ret. */
static int st_uint(const json_t *v, uint64_t max, uint64_t *ret)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max)
        return -1;
    *ret = (uint64_t)json_integer_value(v);
    return 0;
}

/* One tensor entry `key` -> `v` into *t; data_size bounds its offsets. */
static int st_parse_tensor(const char *key, const json_t *v, uint64_t data_size, const char *name,
                           struct gpt_st_tensor *t, struct gpt_err *err)
{
    const json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
                 *offs = json_object_get(v, "data_offsets");
    size_t klen = strlen(key);
    if (klen == 0 || klen >= sizeof(t->name))
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "%s: a tensor name is empty or longer than %d bytes", name,
                           GPT_ST_NAME_MAX - 1);
    memcpy(t->name, key, klen + 1);
    if (!json_is_object(v))
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: tensor %s is not a JSON object", name,
                           key);
    if (!json_is_string(dt))
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: tensor %s has no dtype string", name,
                           key);
    size_t k;
    for (k = 0; k < sizeof(st_dtype_names) / sizeof(st_dtype_names[0]); k++)
        if (strcmp(json_string_value(dt), st_dtype_names[k]) == 0)
            break;
    if (k == sizeof(st_dtype_names) / sizeof(st_dtype_names[0]))
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "%s: tensor %s has dtype %.32s; only F32, F16 and BF16 are read", name,
                           key, json_string_value(dt));
    t->dtype = (enum gpt_st_dtype)k;
    if (!json_is_array(shape) || json_array_size(shape) > GPT_ST_NDIM_MAX)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "%s: tensor %s: shape must be an array of at most %d dimensions", name,
                           key, GPT_ST_NDIM_MAX);
    t->ndim = (int)json_array_size(shape);
    t->count = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (st_uint(json_array_get(shape, (size_t)d), ST_DIM_MAX, &t->shape[d]) < 0)
            return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                               "%s: tensor %s: dimension %d is not an integer in 0..2^40", name,
                               key, d);
        if (t->shape[d] != 0 && t->count > ST_DIM_MAX / t->shape[d])
            return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: tensor %s: shape too large", name,
                               key);
        t->count *= t->shape[d];
    }
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        st_uint(json_array_get(offs, 0), data_size, &t->begin) < 0 ||
        st_uint(json_array_get(offs, 1), data_size, &t->end) < 0 || t->begin > t->end)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "%s: tensor %s: data_offsets must be [begin, end] with begin <= end "
                           "<= %llu (the data's size)",
                           name, key, (unsigned long long)data_size);
    if (t->end - t->begin != t->count * st_dtype_bytes[t->dtype])
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "%s: tensor %s: %llu bytes of data for %llu elements of %s", name, key,
                           (unsigned long long)(t->end - t->begin), (unsigned long long)t->count,
                           st_dtype_names[t->dtype]);
    return 0;
}

int gpt_st_parse_header(const void *buf, size_t len, uint64_t file_size, const char *name,
                        struct gpt_st_index *ret, struct gpt_err *err)
{
    const unsigned char *p = buf;
    struct gpt_st_index ix = {0};
    json_t *root = NULL;
    json_error_t jerr;
    int rc = 0;

    if (len < 8 || file_size < 8)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: shorter than the 8-byte header length",
                           name);
    uint64_t hlen = st_le64(p);
    if (hlen < 2 || hlen > GPT_ST_HEADER_MAX)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "%s: header length %llu is outside 2..%u bytes", name,
                           (unsigned long long)hlen, GPT_ST_HEADER_MAX);
    if (hlen > file_size - 8 || hlen > len - 8)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                           "%s: header length %llu runs past the end of the file (%llu bytes)",
                           name, (unsigned long long)hlen, (unsigned long long)file_size);
    if (p[8] != '{')
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: the header is not a JSON object", name);
    uint64_t data_size = file_size - 8 - hlen;
    root = json_loadb((const char *)p + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: header is not valid JSON: %s", name,
                         jerr.text);
        goto out;
    }
    if (!json_is_object(root)) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: the header is not a JSON object", name);
        goto out;
    }
    if (json_object_size(root) > GPT_ST_TENSORS_MAX + 1) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: more than %d tensors", name,
                         GPT_ST_TENSORS_MAX);
        goto out;
    }
    ix.t = calloc(json_object_size(root) + 1, sizeof(*ix.t));
    if (!ix.t) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "__metadata__") == 0) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(v)) {
                rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: __metadata__ is not an object",
                                 name);
                goto out;
            }
            json_object_foreach(v, mk, mv)
            {
                if (!json_is_string(mv)) {
                    rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                                     "%s: __metadata__ values must be strings", name);
                    goto out;
                }
            }
            continue;
        }
        if ((rc = st_parse_tensor(key, v, data_size, name, &ix.t[ix.n], err)) < 0)
            goto out;
        ix.n++;
    }
    /* The tensors must tile the byte buffer exactly: no holes (a polyglot
     * file) and no overlaps (two tensors sharing bytes). */
    qsort(ix.t, ix.n, sizeof(*ix.t), st_cmp_begin);
    uint64_t at = 0;
    for (size_t i = 0; i < ix.n; i++) {
        if (ix.t[i].begin != at) {
            rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                             "%s: tensor %s starts at byte %llu of the data, expected %llu "
                             "(tensors overlap or leave a hole)",
                             name, ix.t[i].name, (unsigned long long)ix.t[i].begin,
                             (unsigned long long)at);
            goto out;
        }
        at = ix.t[i].end;
    }
    if (at != data_size) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL,
                         "%s: the tensors cover %llu bytes, the file holds %llu after the header",
                         name, (unsigned long long)at, (unsigned long long)data_size);
        goto out;
    }
    ix.data_start = 8 + hlen;
    *ret = ix;
    ix.t = NULL;
out:
    json_decref(root);
    gpt_st_index_done(&ix);
    return rc;
}

int gpt_st_open(const char *path, struct gpt_st_file *ret, struct gpt_err *err)
{
    struct gpt_st_file f = {.fd = -1};
    unsigned char *hdr = NULL;
    struct stat st;
    unsigned char lenb[8];
    int rc = 0;

    snprintf(f.path, sizeof(f.path), "%s", path);
    f.fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (f.fd < 0) {
        rc = gpt_err_set(err, -errno, NULL, "cannot open %s: %s", path, strerror(errno));
        goto out;
    }
    if (fstat(f.fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s is not a regular file", path);
        goto out;
    }
    f.size = (uint64_t)st.st_size;
    ssize_t k = pread(f.fd, lenb, 8, 0);
    if (k != 8) {
        rc = gpt_err_set(err, -GPT_E_CORRUPT, NULL, "%s: shorter than the 8-byte header length",
                         path);
        goto out;
    }
    uint64_t hlen = st_le64(lenb);
    if (hlen > GPT_ST_HEADER_MAX || hlen > f.size - 8) {
        /* parse names the reason without reading the header */
        rc = gpt_st_parse_header(lenb, 8, f.size, path, &f.ix, err);
        goto out;
    }
    hdr = malloc(8 + hlen);
    if (!hdr) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory for the header of %s", path);
        goto out;
    }
    memcpy(hdr, lenb, 8);
    size_t got = 0;
    while (got < hlen) {
        k = pread(f.fd, hdr + 8 + got, hlen - got, (off_t)(8 + got));
        if (k <= 0) {
            rc = gpt_err_set(err, k < 0 ? -errno : -GPT_E_CORRUPT, NULL,
                             "%s: cannot read the header", path);
            goto out;
        }
        got += (size_t)k;
    }
    if ((rc = gpt_st_parse_header(hdr, 8 + hlen, f.size, path, &f.ix, err)) < 0)
        goto out;
    *ret = f;
    f.fd = -1;
    f.ix.t = NULL;
out:
    free(hdr);
    if (f.fd >= 0)
        close(f.fd);
    gpt_st_index_done(&f.ix);
    return rc;
}

int gpt_st_read_f32(const struct gpt_st_file *f, const struct gpt_st_tensor *t, float *out,
                    struct gpt_err *err)
{
    uint64_t esz = st_dtype_bytes[t->dtype], done = 0;
    unsigned char buf[1 << 16];
    while (done < t->count) {
        uint64_t n = t->count - done;
        if (n > sizeof(buf) / esz)
            n = sizeof(buf) / esz;
        size_t want = (size_t)(n * esz), got = 0;
        off_t at = (off_t)(f->ix.data_start + t->begin + done * esz);
        while (got < want) {
            ssize_t k = pread(f->fd, buf + got, want - got, at + (off_t)got);
            if (k <= 0)
                return gpt_err_set(err, k < 0 ? -errno : -GPT_E_CORRUPT, NULL,
                                   "%s: cannot read tensor %s (file shrank?)", f->path, t->name);
            got += (size_t)k;
        }
        for (uint64_t i = 0; i < n; i++) {
            const unsigned char *b = buf + i * esz;
            if (t->dtype == GPT_ST_F32) {
                uint32_t bits = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                                (uint32_t)b[3] << 24;
                memcpy(&out[done + i], &bits, 4);
            } else {
                uint16_t h = (uint16_t)(b[0] | b[1] << 8);
                out[done + i] =
                    t->dtype == GPT_ST_F16 ? gpt_st_f16_to_f32(h) : gpt_st_bf16_to_f32(h);
            }
        }
        done += n;
    }
    return 0;
}

void gpt_st_close(struct gpt_st_file *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    gpt_st_index_done(&f->ix);
}

/* ---- writer ---- */

struct st_wbuf {
    int fd;
    size_t n;
    unsigned char b[1 << 16];
};

static int st_flush(struct st_wbuf *w)
{
    size_t off = 0;
    while (off < w->n) {
        ssize_t k = write(w->fd, w->b + off, w->n - off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        off += (size_t)k;
    }
    w->n = 0;
    return 0;
}

static int st_put(struct st_wbuf *w, const void *p, size_t n)
{
    const unsigned char *s = p;
    while (n > 0) {
        if (w->n == sizeof(w->b)) {
            int rc = st_flush(w);
            if (rc < 0)
                return rc;
        }
        size_t k = sizeof(w->b) - w->n < n ? sizeof(w->b) - w->n : n;
        memcpy(w->b + w->n, s, k);
        w->n += k;
        s += k;
        n -= k;
    }
    return 0;
}

static int st_put_f32(struct st_wbuf *w, float f)
{
    uint32_t bits;
    memcpy(&bits, &f, 4);
    unsigned char b[4] = {(unsigned char)bits, (unsigned char)(bits >> 8),
                          (unsigned char)(bits >> 16), (unsigned char)(bits >> 24)};
    return st_put(w, b, 4);
}

/* The header's JSON text (new, malloc'd), or NULL when out of memory. */
static char *st_header_text(const struct gpt_st_out *t, size_t n, const char *const *metadata)
{
    json_t *root = json_object(), *meta = NULL;
    char *text = NULL;
    uint64_t at = 0;

    if (!root)
        return NULL;
    if (metadata && metadata[0]) {
        if (!(meta = json_object()) || json_object_set_new(root, "__metadata__", meta) < 0)
            goto out;
        for (size_t i = 0; metadata[i] && metadata[i + 1]; i += 2)
            if (json_object_set_new(meta, metadata[i], json_string(metadata[i + 1])) < 0)
                goto out;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t bytes = t[i].rows * t[i].cols * 4;
        json_t *e = t[i].ndim == 1
                        ? json_pack("{s:s, s:[I], s:[I,I]}", "dtype", "F32", "shape",
                                    (json_int_t)(t[i].rows * t[i].cols), "data_offsets",
                                    (json_int_t)at, (json_int_t)(at + bytes))
                        : json_pack("{s:s, s:[I,I], s:[I,I]}", "dtype", "F32", "shape",
                                    (json_int_t)(t[i].transpose ? t[i].cols : t[i].rows),
                                    (json_int_t)(t[i].transpose ? t[i].rows : t[i].cols),
                                    "data_offsets", (json_int_t)at, (json_int_t)(at + bytes));
        if (!e || json_object_set_new(root, t[i].name, e) < 0)
            goto out;
        at += bytes;
    }
    text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
out:
    json_decref(root);
    return text;
}

/* The length prefix, the header (padded with spaces to a multiple of 8,
 * as Hugging Face writes it, so that the data starts aligned) and every
 * tensor's data. 0 or a negative errno. */
static int st_write_all(struct st_wbuf *w, const char *text, const struct gpt_st_out *t, size_t n,
                        const atomic_int *cancel)
{
    size_t hlen = strlen(text), padded = (hlen + 7) / 8 * 8;
    unsigned char lenb[8];
    int rc;
    for (int i = 0; i < 8; i++)
        lenb[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    if ((rc = st_put(w, lenb, 8)) < 0 || (rc = st_put(w, text, hlen)) < 0 ||
        (rc = st_put(w, "       ", padded - hlen)) < 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        const float *d = t[i].data;
        uint64_t R = t[i].rows, C = t[i].cols;
        if (gpt_fmt_cancelled(cancel))
            return -ECANCELED;
        if (!t[i].transpose) {
            for (uint64_t j = 0; j < R * C; j++)
                if ((rc = st_put_f32(w, d[j])) < 0)
                    return rc;
        } else { /* the file holds (C, R) */
            for (uint64_t c = 0; c < C; c++)
                for (uint64_t r = 0; r < R; r++)
                    if ((rc = st_put_f32(w, d[r * C + c])) < 0)
                        return rc;
        }
    }
    return st_flush(w);
}

int gpt_st_write_fd(int fd, const struct gpt_st_out *t, size_t n, const char *const *metadata,
                    const atomic_int *cancel, struct gpt_err *err)
{
    char *text = st_header_text(t, n, metadata);
    struct st_wbuf *w = malloc(sizeof(*w));
    int rc;
    if (!text || !w) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    } else {
        w->fd = fd;
        w->n = 0;
        rc = st_write_all(w, text, t, n, cancel);
        if (rc == -ECANCELED)
            gpt_err_set(err, rc, NULL, "the export was cancelled");
        else if (rc < 0)
            rc = gpt_err_set(err, rc, NULL, "cannot write the safetensors file: %s", strerror(-rc));
    }
    free(w);
    free(text);
    return rc;
}
