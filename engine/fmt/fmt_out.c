/* fmt_out: atomic output files and float conversions (see fmt_out.h). */
#include "fmt_out.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FMT_OUT_BUF_BYTES (4u << 20)

static int fmt_out_fail(struct gpt_fmt_out *o, int rc, const char *what, struct gpt_err *err)
{
    o->failed = 1;
    return gpt_err_set(err, rc, NULL, "%s: %s: %s", o->f.path, what, strerror(-rc));
}

int gpt_fmt_out_open(struct gpt_fmt_out *o, const char *path, mode_t mode, const char *tmp_prefix,
                     struct gpt_err *err)
{
    memset(o, 0, sizeof(*o));
    /* Replace a regular file only: a link or a folder there is a mistake */
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
        return gpt_err_set(err, -ELOOP, "output", "%s is a symbolic link; give the real path",
                           path);
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return gpt_err_set(err, -EEXIST, "output", "%s exists and is not a regular file", path);
    o->buf = malloc(FMT_OUT_BUF_BYTES);
    if (!o->buf)
        return gpt_err_set(err, -ENOMEM, NULL, "%s: out of memory", path);
    int rc = gpt_atomic_file_open(&o->f, path, tmp_prefix, mode ? mode : 0644, err);
    if (rc < 0) {
        free(o->buf);
        o->buf = NULL;
    }
    return rc;
}

static int fmt_out_flush(struct gpt_fmt_out *o)
{
    int rc = gpt_atomic_file_write(&o->f, o->buf, o->used, NULL);
    o->used = 0;
    return rc;
}

int gpt_fmt_out_write(struct gpt_fmt_out *o, const void *p, size_t n, struct gpt_err *err)
{
    const unsigned char *q = p;
    if (o->failed)
        return gpt_err_set(err, -EIO, NULL, "%s: an earlier write failed", o->f.path);
    o->written += n;
    while (n > 0) {
        size_t k = FMT_OUT_BUF_BYTES - o->used;
        if (k > n)
            k = n;
        memcpy(o->buf + o->used, q, k);
        o->used += k;
        q += k;
        n -= k;
        if (o->used == FMT_OUT_BUF_BYTES) {
            int rc = fmt_out_flush(o);
            if (rc < 0)
                return fmt_out_fail(o, rc, "write", err);
        }
    }
    return 0;
}

int gpt_fmt_out_pad(struct gpt_fmt_out *o, size_t align, struct gpt_err *err)
{
    static const unsigned char zeros[64];
    GPT_ASSERT(align > 0 && align <= sizeof(zeros));
    size_t k = (size_t)((align - o->written % align) % align);
    return gpt_fmt_out_write(o, zeros, k, err);
}

void gpt_fmt_out_abort(struct gpt_fmt_out *o)
{
    gpt_atomic_file_abort(&o->f);
    free(o->buf);
    o->buf = NULL;
}

int gpt_fmt_out_commit(struct gpt_fmt_out *o, struct gpt_err *err)
{
    int rc;
    if (o->failed) {
        rc = gpt_err_set(err, -EIO, NULL, "%s: an earlier write failed", o->f.path);
        goto out;
    }
    if ((rc = fmt_out_flush(o)) < 0) {
        fmt_out_fail(o, rc, "write", err);
        goto out;
    }
    rc = gpt_atomic_file_commit(&o->f, err);
out:
    gpt_fmt_out_abort(o);
    return rc;
}

uint16_t gpt_fmt_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet, keep the top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* 65520 and above round to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: a subnormal half (or zero) */
        float a;
        memcpy(&a, &ax, 4);
        /* a * 2^24 is exact; rounding to an integer is the half's rounding */
        return (uint16_t)(sign | (uint32_t)lrintf(a * 16777216.0f));
    }
    uint32_t e = ax - 0x38000000u; /* rebias the exponent from 127 to 15 */
    return (uint16_t)(sign | ((e + 0x0fffu + ((e >> 13) & 1u)) >> 13));
}

uint16_t gpt_fmt_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float gpt_fmt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0x1f) {
        x = sign | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        x = sign | ((e + 112u) << 23) | (m << 13);
    } else { /* zero or subnormal: m * 2^-24, exact in float */
        float v = (float)m * (1.0f / 16777216.0f);
        memcpy(&x, &v, 4);
        x |= sign;
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

float gpt_fmt_bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}
