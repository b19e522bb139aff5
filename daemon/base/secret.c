/*
 * secret: see secret.h. Owns nothing beyond the files it makes; no state.
 */
#define _GNU_SOURCE /* mkostemp */
#include "secret.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define SECRET_RAW_BYTES 32

/* Writes 32 random bytes as hex and a newline to fd. */
static int secret_write(int fd, const char *path, struct gpt_err *err)
{
    uint8_t raw[SECRET_RAW_BYTES];
    char hex[2 * SECRET_RAW_BYTES + 1];
    size_t done = 0;

    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        return gpt_err_set(err, -EIO, NULL, "%s: getrandom: %s", path, strerror(errno));
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    hex[sizeof(hex) - 1] = '\n';
    memset(raw, 0, sizeof(raw));
    while (done < sizeof(hex)) {
        ssize_t n = write(fd, hex + done, sizeof(hex) - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return gpt_err_set(err, -EIO, NULL, "%s: cannot write it", path);
        done += (size_t)n;
    }
    if (fsync(fd) < 0)
        return gpt_err_set(err, -errno, NULL, "%s: fsync: %s", path, strerror(errno));
    return 0;
}

int secret_file_ensure(const char *path, struct gpt_err *err)
{
    char tmp[4096];
    int fd, rc = 0;

    if (access(path, F_OK) == 0)
        return 0;
    if (snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= (int)sizeof(tmp))
        return gpt_err_set(err, -ENAMETOOLONG, NULL, "%s: path too long", path);
    /* mkostemp: O_CREAT|O_EXCL, mode 0600, a name no other creator uses. */
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return gpt_err_set(err, -errno, NULL, "cannot create %s: %s", tmp, strerror(errno));
    rc = secret_write(fd, path, err);
    if (close(fd) < 0 && rc == 0)
        rc = gpt_err_set(err, -errno, NULL, "%s: %s", tmp, strerror(errno));
    /* link() fails with EEXIST if another process made the secret first:
     * then both use that one. */
    if (rc == 0 && link(tmp, path) < 0 && errno != EEXIST)
        rc = gpt_err_set(err, -errno, NULL, "cannot create %s: %s", path, strerror(errno));
    unlink(tmp);
    return rc;
}

/* mkdir that accepts an existing folder. */
static int mkdir_0700(const char *path, struct gpt_err *err)
{
    if (mkdir(path, 0700) < 0 && errno != EEXIST)
        return gpt_err_set(err, -errno, NULL, "mkdir %s: %s", path, strerror(errno));
    return 0;
}

int secret_user_path(char *buf, size_t cap, struct gpt_err *err)
{
    const char *home = getenv("HOME");
    char dir[4096];
    struct stat st;
    int rc;

    if (!home || home[0] != '/') {
        struct passwd *pw = getpwuid(geteuid());
        home = pw ? pw->pw_dir : NULL;
    }
    if (!home || home[0] != '/')
        return gpt_err_set(err, -ENOENT, NULL,
                           "no home folder for the per-user cluster secret; pass --secret-file");
    if (snprintf(dir, sizeof(dir), "%s/.cache", home) >= (int)sizeof(dir))
        return gpt_err_set(err, -ENAMETOOLONG, NULL, "%s: path too long", home);
    if ((rc = mkdir_0700(dir, err)) < 0)
        return rc;
    strncat(dir, "/gptd", sizeof(dir) - strlen(dir) - 1);
    if ((rc = mkdir_0700(dir, err)) < 0)
        return rc;
    if (lstat(dir, &st) < 0)
        return gpt_err_set(err, -errno, NULL, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))
        return gpt_err_set(err, -EPERM, NULL,
                           "%s must be a folder of this user that others cannot write "
                           "(it holds the per-user cluster secret)",
                           dir);
    if (snprintf(buf, cap, "%s/run.secret", dir) >= (int)cap)
        return gpt_err_set(err, -ENAMETOOLONG, NULL, "%s: path too long", dir);
    return 0;
}
