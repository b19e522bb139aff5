/* gpt_atomic_file: crash-safe file replacement (see gpt_atomic_file.h). */
#define _GNU_SOURCE /* mkostemp */
#include "gpt_atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The folder part of path ("." for a bare name) into out. */
static int atomic_dir_of(const char *path, char *out, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return snprintf(out, cap, ".") < (int)cap ? 0 : -ENAMETOOLONG;
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    if (n >= cap)
        return -ENAMETOOLONG;
    memcpy(out, path, n);
    out[n] = '\0';
    return 0;
}

int gpt_atomic_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

int gpt_atomic_file_open(struct gpt_atomic_file *f, const char *path, const char *tmp_prefix,
                         mode_t mode, struct gpt_err *err)
{
    char dir[PATH_MAX];
    memset(f, 0, sizeof(*f));
    f->fd = -1;
    if (tmp_prefix && strchr(tmp_prefix, '/'))
        return gpt_err_set(err, -EINVAL, NULL, "temporary prefix %s names a folder", tmp_prefix);
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    int n = snprintf(f->path, sizeof(f->path), "%s", path);
    if (*name == '\0' || n < 0 || (size_t)n >= sizeof(f->path) ||
        atomic_dir_of(path, dir, sizeof(dir)) < 0)
        return gpt_err_set(err, -ENAMETOOLONG, NULL, "%s: path empty or too long", path);
    if (tmp_prefix)
        n = snprintf(f->tmp, sizeof(f->tmp), "%s/%sXXXXXX", dir, tmp_prefix);
    else
        n = snprintf(f->tmp, sizeof(f->tmp), "%s/.%s.tmp-XXXXXX", dir, name);
    if (n < 0 || (size_t)n >= sizeof(f->tmp)) {
        f->tmp[0] = '\0';
        return gpt_err_set(err, -ENAMETOOLONG, NULL, "%s: path too long", path);
    }
    f->fd = mkostemp(f->tmp, O_CLOEXEC);
    if (f->fd < 0) {
        int rc = -errno;
        f->tmp[0] = '\0';
        return gpt_err_set(err, rc, NULL, "cannot create a file beside %s: %s", path,
                           strerror(-rc));
    }
    if (fchmod(f->fd, mode) < 0) {
        int rc = gpt_err_set(err, -errno, NULL, "chmod %s: %s", f->tmp, strerror(errno));
        gpt_atomic_file_abort(f);
        return rc;
    }
    return 0;
}

int gpt_atomic_file_write(struct gpt_atomic_file *f, const void *p, size_t n, struct gpt_err *err)
{
    const char *q = p;
    while (n > 0) {
        ssize_t k = write(f->fd, q, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            int rc = k < 0 ? -errno : -EIO;
            return gpt_err_set(err, rc, NULL, "%s: write: %s", f->tmp, strerror(-rc));
        }
        q += k;
        n -= (size_t)k;
    }
    return 0;
}

int gpt_atomic_file_commit(struct gpt_atomic_file *f, struct gpt_err *err)
{
    char dir[PATH_MAX];
    int rc;
    if (fsync(f->fd) < 0) {
        rc = gpt_err_set(err, -errno, NULL, "%s: fsync: %s", f->tmp, strerror(errno));
        goto fail;
    }
    rc = close(f->fd) < 0 ? -errno : 0;
    f->fd = -1;
    if (rc < 0) {
        gpt_err_set(err, rc, NULL, "%s: close: %s", f->tmp, strerror(-rc));
        goto fail;
    }
    if (rename(f->tmp, f->path) < 0) {
        rc =
            gpt_err_set(err, -errno, NULL, "rename %s -> %s: %s", f->tmp, f->path, strerror(errno));
        goto fail;
    }
    f->tmp[0] = '\0';
    f->renamed = true;
    (void)atomic_dir_of(f->path, dir, sizeof(dir)); /* fit at open */
    if ((rc = gpt_atomic_fsync_dir(dir)) < 0)
        return gpt_err_set(err, rc, NULL, "%s: fsync of the folder: %s", dir, strerror(-rc));
    return 0;
fail:
    gpt_atomic_file_abort(f);
    return rc;
}

void gpt_atomic_file_abort(struct gpt_atomic_file *f)
{
    if (!f->tmp[0])
        return;
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    unlink(f->tmp);
    f->tmp[0] = '\0';
}
