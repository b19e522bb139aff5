/*
 * paths: see paths.h. The submit check runs on the loop and touches the
 * file system only through realpath(3); the time-of-use checks run on the
 * worker thread that opens the job's files, with its owner's identity.
 */
#define _GNU_SOURCE
#include "paths.h"

#include "fsid.h"
#include "snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Resolves `path` like realpath(3); for a path that does not exist yet the
 * nearest existing parent is resolved and the rest appended, refusing any
 * ".." in that rest. */
static int paths_resolve(const char *path, char *out)
{
    char buf[PATH_MAX];
    if (realpath(path, out))
        return 0;
    if (errno != ENOENT || strlen(path) >= sizeof(buf))
        return -errno;
    snprintf(buf, sizeof(buf), "%s", path);
    char *slash = strrchr(buf, '/');
    const char *rest = slash ? path + (slash - buf) + 1 : path;
    if (strcmp(rest, "..") == 0 || strcmp(rest, ".") == 0)
        return -EACCES;
    const char *parent = ".";
    if (slash) {
        *slash = '\0';
        parent = buf[0] ? buf : "/";
    }
    int rc = paths_resolve(parent, out);
    if (rc < 0)
        return rc;
    size_t n = strlen(out);
    if (n + strlen(rest) + 2 >= PATH_MAX)
        return -ENAMETOOLONG;
    if (n > 1 || out[0] != '/')
        out[n++] = '/';
    strcpy(out + n, rest);
    return 0;
}

/* 0 when the already resolved `real` lies under one of `roots`. */
static int paths_real_under(const char *real, const char *roots)
{
    char root[PATH_MAX], one[PATH_MAX];
    for (const char *r = roots; *r;) {
        const char *end = strchr(r, ':');
        size_t len = end ? (size_t)(end - r) : strlen(r);
        if (len > 0 && len < sizeof(one)) {
            memcpy(one, r, len);
            one[len] = '\0';
            if (paths_resolve(one, root) == 0) {
                size_t n = strlen(root);
                if (strcmp(root, "/") == 0 ||
                    (strncmp(real, root, n) == 0 && (real[n] == '/' || real[n] == '\0')))
                    return 0;
            }
        }
        r += len + (end ? 1 : 0);
    }
    return -EACCES;
}

int paths_under(const char *path, const char *roots)
{
    char real[PATH_MAX];
    if (paths_resolve(path, real) < 0)
        return -EACCES;
    return paths_real_under(real, roots);
}

/* True when `path` has a ".." component. */
static bool paths_has_dotdot(const char *path)
{
    for (const char *p = path; (p = strstr(p, "..")); p += 2)
        if ((p == path || p[-1] == '/') && (p[2] == '/' || p[2] == '\0'))
            return true;
    return false;
}

/* The submit check of data.path / data.val_path: a plain path must be
 * under `roots`; a glob is not expanded here (that would walk directories
 * on the loop, with gptd's rights): the directory before its first
 * wildcard must be under `roots`, and the files it matches are checked one
 * by one when the job opens them. */
static int paths_check_data(const char *key, const char *pattern, const char *roots,
                            struct gpt_err *err)
{
    char fixed[PATH_MAX];
    size_t wild = strcspn(pattern, "*?[");
    if (strlen(pattern) >= sizeof(fixed))
        return gpt_err_set(err, -ENAMETOOLONG, key, "%s: path too long", key);
    snprintf(fixed, sizeof(fixed), "%s", pattern);
    if (pattern[wild]) {
        if (paths_has_dotdot(pattern))
            return gpt_err_set(err, -EACCES, key, "%s: the glob '%s' may not contain '..'", key,
                               pattern);
        fixed[wild] = '\0';
        char *slash = strrchr(fixed, '/');
        if (!slash)
            snprintf(fixed, sizeof(fixed), ".");
        else if (slash == fixed)
            slash[1] = '\0';
        else
            *slash = '\0';
    }
    if (paths_under(fixed, roots) < 0)
        return gpt_err_set(err, -EACCES, key,
                           "%s: %s is outside the data roots of this gptd (data_roots = %s)", key,
                           pattern, roots);
    return 0;
}

int paths_check_job(const struct gpt_job *job, const char *data_roots, const char *snapshot_roots,
                    const char *state_dir, struct gpt_err *err)
{
    int rc;
    if (job->data.path[0] &&
        (rc = paths_check_data("data.path", job->data.path, data_roots, err)) < 0)
        return rc;
    if (job->data.val_path[0] &&
        (rc = paths_check_data("data.val_path", job->data.val_path, data_roots, err)) < 0)
        return rc;
    if (job->data.vocab[0] && paths_under(job->data.vocab, data_roots) < 0)
        return gpt_err_set(err, -EACCES, "data.vocab",
                           "data.vocab: %s is outside the data roots of this gptd (data_roots = "
                           "%s)",
                           job->data.vocab, data_roots);
    if (job->snapshot.dir[0] && paths_under(job->snapshot.dir, state_dir) < 0 &&
        paths_under(job->snapshot.dir, snapshot_roots) < 0)
        return gpt_err_set(err, -EACCES, "snapshot.dir",
                           "snapshot.dir: %s is outside the state directory and the snapshot "
                           "roots of this gptd (snapshot_roots = %s)",
                           job->snapshot.dir, snapshot_roots);
    return 0;
}

/* The path the kernel holds for `fd` (symbolic links already followed at
 * open, so a later swap changes nothing). */
static int paths_fd_real(int fd, char *out, size_t cap)
{
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, cap - 1);
    if (n < 0)
        return -errno;
    if ((size_t)n >= cap - 1 || out[0] != '/')
        return -ENAMETOOLONG;
    out[n] = '\0';
    return 0;
}

int paths_check_fd(int fd, const char *file, const char *key, const char *roots,
                   struct gpt_err *err)
{
    char real[PATH_MAX];
    int rc = paths_fd_real(fd, real, sizeof(real));
    if (rc < 0)
        return gpt_err_set(err, -EACCES, key,
                           "%s: %s: cannot tell where the opened file lies (%s; is /proc "
                           "mounted?)",
                           key, file, strerror(-rc));
    if (paths_real_under(real, roots) < 0)
        return gpt_err_set(err, -EACCES, key,
                           "%s: %s is %s when the job opens it, outside the allowed roots (%s)",
                           key, file, real, roots);
    return 0;
}

int paths_data_check(void *roots, int fd, const char *file, const char *json_path,
                     struct gpt_err *err)
{
    return paths_check_fd(fd, file, json_path, roots, err);
}

/* May the calling thread's file-system identity write and search the
 * directory `fd`? faccessat2 with AT_EACCESS checks the fsuid and groups
 * (access(2) would check the real uid); kernels before 5.8 lack it, and
 * then the first snapshot write finds out. */
static int paths_dir_writable(int fd)
{
#ifdef SYS_faccessat2
    if (syscall(SYS_faccessat2, fd, "", W_OK | X_OK, AT_EACCESS | AT_EMPTY_PATH) < 0 &&
        errno != ENOSYS)
        return -errno;
#else
    (void)fd;
#endif
    return 0;
}

int paths_snapshot_dir_open(const char *dir, const char *snapshot_roots, const char *state_dir,
                            char *ret_real, size_t cap, struct gpt_err *err)
{
    char real[PATH_MAX];
    int fd = -1, rc = gpt_mkdirs(dir, 0700);
    if (rc < 0)
        return gpt_err_set(err, rc, "snapshot.dir", "snapshot.dir: cannot create %s: %s", dir,
                           strerror(-rc));
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        return gpt_err_set(err, rc, "snapshot.dir", "snapshot.dir: %s: %s", dir, strerror(-rc));
    }
    rc = paths_fd_real(fd, real, sizeof(real));
    if (rc < 0) {
        gpt_err_set(err, -EACCES, "snapshot.dir",
                    "snapshot.dir: %s: cannot tell where the folder lies (%s; is /proc mounted?)",
                    dir, strerror(-rc));
        rc = -EACCES;
        goto out;
    }
    if (paths_real_under(real, state_dir) < 0 && paths_real_under(real, snapshot_roots) < 0) {
        rc = gpt_err_set(err, -EACCES, "snapshot.dir",
                         "snapshot.dir: %s is %s when the job opens it, outside the state "
                         "directory and the snapshot roots of this gptd (snapshot_roots = %s)",
                         dir, real, snapshot_roots);
        goto out;
    }
    if ((rc = paths_dir_writable(fd)) < 0) {
        gpt_err_set(err, rc, "snapshot.dir",
                    "snapshot.dir: %s: the job's owner cannot write it: %s", dir, strerror(-rc));
        goto out;
    }
    if (strlen(real) >= cap) {
        rc = gpt_err_set(err, -ENAMETOOLONG, "snapshot.dir", "snapshot.dir: %s: path too long",
                         real);
        goto out;
    }
    memcpy(ret_real, real, strlen(real) + 1);
out:
    close(fd);
    return rc;
}

/* Makes `path` (a directory gptd owns) searchable by others, no more. */
static int paths_allow_search(const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return -errno;
    if ((st.st_mode & S_IXOTH) || chmod(path, (st.st_mode & 07777) | S_IXOTH) == 0)
        return 0;
    return -errno;
}

int paths_snapshot_dir_prepare(const char *state_dir, const char *dir, uid_t owner,
                               struct gpt_err *err)
{
    char jobs[PATH_MAX], job[PATH_MAX];
    int k = snprintf(jobs, sizeof(jobs), "%s/jobs/", state_dir);
    if (k < 0 || (size_t)k >= sizeof(jobs) || strncmp(dir, jobs, (size_t)k) != 0)
        return 0; /* a folder the job names: created by the job, as its owner */
    const char *slash = strchr(dir + k, '/');
    if (!slash || strchr(slash + 1, '/') || (size_t)(slash - dir) >= sizeof(job))
        return 0;
    memcpy(job, dir, (size_t)(slash - dir));
    job[slash - dir] = '\0';
    jobs[k - 1] = '\0';
    bool other = owner != geteuid();
    int fd = -1, rc = 0;
    const char *at = jobs;
    if ((mkdir(jobs, 0711) < 0 && errno != EEXIST) || (mkdir(job, 0711) < 0 && errno != EEXIST) ||
        (at = dir, mkdir(dir, 0700) < 0 && errno != EEXIST)) {
        rc = -errno;
        return gpt_err_set(err, rc, "snapshot.dir", "cannot create %s: %s", at, strerror(-rc));
    }
    if (!other)
        return 0;
    if ((rc = paths_allow_search(at = state_dir)) < 0 || (rc = paths_allow_search(at = jobs)) < 0 ||
        (rc = paths_allow_search(at = job)) < 0)
        return gpt_err_set(err, rc, "snapshot.dir", "cannot let uid %u reach %s: %s",
                           (unsigned)owner, at, strerror(-rc));
    /* The mode first: once the owner's, gptd (without CAP_FOWNER) could
     * not change it. A folder already the owner's is left alone. */
    struct stat st;
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0 ||
        (st.st_uid != owner && (fchmod(fd, 0700) < 0 || fchown(fd, owner, (gid_t)-1) < 0))) {
        rc = -errno;
        gpt_err_set(err, rc, "snapshot.dir", "cannot give %s to uid %u: %s", dir, (unsigned)owner,
                    strerror(-rc));
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

/* One plain data file, opened and closed with the caller's identity. */
static int paths_open_probe(const char *key, const char *file, struct gpt_err *err)
{
    int fd = open(file, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return gpt_err_set(err, -GPT_E_SPEC, key, "%s: %s: %s", key, file, strerror(e));
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        rc = gpt_err_set(err, -GPT_E_SPEC, key, "%s: %s is %s, not a regular file", key, file,
                         S_ISFIFO(st.st_mode)  ? "a FIFO"
                         : S_ISDIR(st.st_mode) ? "a directory"
                                               : "not a plain file");
    close(fd);
    return rc;
}

/* data.path / data.val_path: the file, or for a glob the folder before its
 * first wildcard (nothing is expanded here). */
static int paths_probe_data(const char *key, const char *pattern, struct gpt_err *err)
{
    size_t wild = strcspn(pattern, "*?[");
    if (!pattern[wild])
        return paths_open_probe(key, pattern, err);
    char fixed[PATH_MAX];
    snprintf(fixed, sizeof(fixed), "%.*s", (int)wild, pattern);
    char *slash = strrchr(fixed, '/');
    if (!slash)
        snprintf(fixed, sizeof(fixed), ".");
    else if (slash == fixed)
        slash[1] = '\0';
    else
        *slash = '\0';
    int fd = open(fixed, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return gpt_err_set(err, -GPT_E_SPEC, key, "%s: '%s': cannot open %s: %s", key, pattern,
                           fixed, strerror(e));
    }
    close(fd);
    return 0;
}

int paths_check_access(const struct gpt_job *job, uid_t uid, struct gpt_err *err)
{
    if (job->data.kind == GPT_DATA_SYNTHETIC)
        return 0;
    if (job->data.path[0] == '\0')
        return gpt_err_set(err, -GPT_E_SPEC, "data.path", "is empty");
    struct fsid_user u;
    struct fsid_saved saved;
    int rc = fsid_user_lookup(uid, &u, err);
    if (rc == 0)
        rc = fsid_enter(&u, &saved, err);
    if (rc < 0)
        return rc;
    rc = paths_probe_data("data.path", job->data.path, err);
    if (rc == 0 && job->data.val_path[0])
        rc = paths_probe_data("data.val_path", job->data.val_path, err);
    if (rc == 0 && job->data.vocab[0]) {
        int fd = open(job->data.vocab, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
            rc = gpt_err_set(err, -GPT_E_SPEC, "data.vocab", "data.vocab: %s: %s", job->data.vocab,
                             strerror(errno));
        else
            close(fd);
    }
    fsid_leave(&saved);
    return rc;
}
