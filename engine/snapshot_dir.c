/*
 * snapshot_dir: a snapshot folder (see snapshot.h): listing its
 * snapshots newest first, finding the newest valid one, quarantining
 * corrupt files, pruning, removing dead writers' temporary files, and the
 * folder's owner marker. The file format itself (encode, decode, write,
 * read) is snapshot.c's; this file uses it only through snapshot.h and
 * snapshot_impl.h.
 *
 * Ownership: a folder carries a marker (.gptd-owner) naming the job that
 * owns it; each snapshot records its owner too. Scans and pruning skip
 * other owners' files; corrupt files are renamed NAME.corrupt
 * (quarantined) so that nothing counts them again.
 *
 * Blocking I/O on the calling thread; no state shared between calls.
 */
#define _GNU_SOURCE /* mkostemp, O_NOFOLLOW, renameat2 */
#include "snapshot.h"
#include "snapshot_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SNAP_LIST_MAX    100000 /* snapshot files considered in one directory */
#define SNAP_OWNER_MAGIC "gptd-snapshot-owner 1"

/* ---- directory -------------------------------------------------------------- */

/* Step of a snapshot file name ("snap-<digits>.gpts"), or -1. */
static int64_t snap_name_step(const char *name)
{
    size_t pre = strlen(SNAP_PREFIX), suf = strlen(GPT_SNAPSHOT_SUFFIX), n = strlen(name);
    if (n <= pre + suf || n - pre - suf > 18 || strncmp(name, SNAP_PREFIX, pre) != 0 ||
        strcmp(name + n - suf, GPT_SNAPSHOT_SUFFIX) != 0)
        return -1;
    int64_t step = 0;
    for (size_t i = pre; i < n - suf; i++) {
        if (name[i] < '0' || name[i] > '9')
            return -1;
        step = step * 10 + (name[i] - '0');
    }
    return step;
}

struct snap_entry {
    int64_t step;
    char *path;
};

static int snap_entry_cmp(const void *a, const void *b)
{
    const struct snap_entry *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? 1 : -1; /* newest first */
    return -strcmp(x->path, y->path);
}

void gpt_snapshot_list_free(char **paths, size_t n)
{
    if (!paths)
        return;
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
}

int gpt_snapshot_list(const char *dir, char ***ret_paths, size_t *ret_n, struct gpt_err *err)
{
    GPT_ASSERT(dir && ret_paths && ret_n);
    struct snap_entry *e = NULL;
    size_t n = 0, cap = 0;
    char **paths = NULL;
    int rc = 0;
    DIR *d = opendir(dir);
    if (!d) {
        rc = -errno;
        return gpt_err_set(err, rc, "snapshot.dir", "snapshot directory %s: %s", dir,
                           strerror(-rc));
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        int64_t step = snap_name_step(de->d_name);
        if (step < 0)
            continue;
        if (n == SNAP_LIST_MAX) {
            rc = gpt_err_set(err, -GPT_E_LIMIT, NULL, "%s: more than %d snapshots", dir,
                             SNAP_LIST_MAX);
            goto out;
        }
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 16;
            struct snap_entry *ne = realloc(e, ncap * sizeof(*e));
            if (!ne)
                goto nomem;
            e = ne;
            cap = ncap;
        }
        size_t len = strlen(dir) + strlen(de->d_name) + 2;
        if (!(e[n].path = malloc(len)))
            goto nomem;
        snprintf(e[n].path, len, "%s/%s", dir, de->d_name);
        e[n++].step = step;
    }
    qsort(e, n, sizeof(*e), snap_entry_cmp);
    if (!(paths = calloc(n ? n : 1, sizeof(*paths))))
        goto nomem;
    for (size_t i = 0; i < n; i++) {
        paths[i] = e[i].path;
        e[i].path = NULL;
    }
    *ret_paths = paths;
    *ret_n = n;
    goto out;
nomem:
    rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory listing %s", dir);
out:
    for (size_t i = 0; i < n; i++)
        free(e[i].path);
    free(e);
    closedir(d);
    return rc;
}

/* Whether a snapshot counts as `owner`'s: no filter, no owner recorded in
 * the file (version 1: the folder's marker decides), or the same token. */
static bool snap_owned(const struct gpt_snapshot_meta *m, const struct gpt_snapshot_owner *owner)
{
    return !owner || owner->token == 0 || m->owner.token == 0 || m->owner.token == owner->token;
}

/* Files named NAME.corrupt in dir (a missing dir has none). */
static size_t snap_count_quarantined(const char *dir)
{
    DIR *d = opendir(dir);
    size_t n = 0, suf = strlen(GPT_SNAPSHOT_SUFFIX GPT_SNAPSHOT_CORRUPT);
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name), csuf = strlen(GPT_SNAPSHOT_CORRUPT);
        if (len > suf && strncmp(de->d_name, SNAP_PREFIX, strlen(SNAP_PREFIX)) == 0 &&
            strstr(de->d_name, GPT_SNAPSHOT_SUFFIX ".") &&
            strcmp(de->d_name + len - csuf, GPT_SNAPSHOT_CORRUPT) == 0)
            n++;
    }
    closedir(d);
    return n;
}

int gpt_snapshot_quarantine(const char *path, char *ret_to, size_t to_cap, struct gpt_err *err)
{
    char to[GPT_JOB_PATH_MAX + 96];
    /* NAME.corrupt, or NAME.2.corrupt ... when an earlier one of the same
     * name is kept there: a quarantined file is evidence, never replaced. */
    for (int i = 1; i <= 9; i++) {
        int k = i == 1 ? snprintf(to, sizeof(to), "%s" GPT_SNAPSHOT_CORRUPT, path)
                       : snprintf(to, sizeof(to), "%s.%d" GPT_SNAPSHOT_CORRUPT, path, i);
        if (k < 0 || (size_t)k >= sizeof(to))
            return gpt_err_set(err, -ENAMETOOLONG, NULL, "%s: name too long to quarantine", path);
        if (renameat2(AT_FDCWD, path, AT_FDCWD, to, i < 9 ? RENAME_NOREPLACE : 0) == 0) {
            if (ret_to)
                snprintf(ret_to, to_cap, "%s", to);
            return 0;
        }
        if (errno != EEXIST) {
            int rc = -errno;
            return gpt_err_set(err, rc, NULL, "rename %s -> %s: %s", path, to, strerror(-rc));
        }
    }
    return gpt_err_set(err, -EEXIST, NULL, "%s: cannot quarantine", path);
}

/* Reports a skipped file; `why` gets the new name when it was quarantined. */
static void snap_skip(const struct gpt_snapshot_find_opts *o, const char *path,
                      const char *quarantined_as, const struct gpt_err *why)
{
    if (!o->skip)
        return;
    if (!quarantined_as) {
        o->skip(o->ctx, path, why);
        return;
    }
    struct gpt_err q;
    gpt_err_set(&q, why->code, NULL, "%s; quarantined as %s", why->msg, quarantined_as);
    o->skip(o->ctx, path, &q);
}

int gpt_snapshot_find(const char *dir, const struct gpt_snapshot_find_opts *o, char *ret_path,
                      size_t path_cap, struct gpt_snapshot_meta *ret_meta,
                      struct gpt_snapshot_find_stats *ret_stats, struct gpt_err *err)
{
    GPT_ASSERT(dir && o);
    struct gpt_snapshot_find_stats st = {0};
    char **paths;
    size_t n;
    int rc = gpt_snapshot_list(dir, &paths, &n, err);
    if (rc < 0) {
        if (rc == -ENOENT && ret_stats)
            *ret_stats = st;
        return rc;
    }
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        struct gpt_snapshot_meta meta;
        struct gpt_err why = {0};
        rc = gpt_snapshot_read(paths[i], &meta, NULL, NULL, NULL, &why);
        if (rc == 0 && !snap_owned(&meta, o->owner)) {
            st.foreign++;
            gpt_err_set(&why, -EEXIST, NULL,
                        "snapshot %s belongs to job %" PRId64 " (uid %" PRIu32 "), not to this one",
                        paths[i], meta.owner.job, meta.owner.uid);
            snap_skip(o, paths[i], NULL, &why);
            continue;
        }
        if (rc == 0) {
            if (ret_path && strlen(paths[i]) >= path_cap) {
                rc = gpt_err_set(err, -ENAMETOOLONG, NULL, "%s: longer than the caller's buffer",
                                 paths[i]);
                goto out;
            }
            if (ret_path)
                snprintf(ret_path, path_cap, "%s", paths[i]);
            if (ret_meta)
                *ret_meta = meta;
            found = true;
            break;
        }
        if (rc == -ENOMEM) { /* our failure, not the file's */
            if (err)
                *err = why;
            goto out;
        }
        st.invalid++;
        /* Only a file that is certainly damaged is moved: a newer format
         * or a file we may not read is skipped and left alone. */
        struct gpt_err qerr;
        char to[GPT_JOB_PATH_MAX + 96];
        int quarantined = o->quarantine && rc == -GPT_E_CORRUPT &&
                          gpt_snapshot_quarantine(paths[i], to, sizeof(to), &qerr) == 0;
        snap_skip(o, paths[i], quarantined ? to : NULL, &why);
    }
    st.quarantined = snap_count_quarantined(dir);
    if (ret_stats)
        *ret_stats = st;
    rc = found ? 0
               : gpt_err_set(err, -ENOENT, NULL,
                             "no valid snapshot in %s (%zu invalid, %zu of another job, %zu"
                             " quarantined)",
                             dir, st.invalid, st.foreign, st.quarantined);
out:
    gpt_snapshot_list_free(paths, n);
    return rc;
}

int gpt_snapshot_newest(const char *dir, char *ret_path, size_t path_cap,
                        struct gpt_snapshot_meta *ret_meta, gpt_snapshot_skip_fn skip, void *ctx,
                        struct gpt_err *err)
{
    struct gpt_snapshot_find_opts o = {.skip = skip, .ctx = ctx};
    return gpt_snapshot_find(dir, &o, ret_path, path_cap, ret_meta, NULL, err);
}

int gpt_snapshot_prune(const char *dir, int keep, const struct gpt_snapshot_owner *owner,
                       struct gpt_err *err)
{
    GPT_ASSERT(dir);
    if (keep <= 0)
        return 0;
    char **paths;
    size_t n;
    int rc = gpt_snapshot_list(dir, &paths, &n, err);
    if (rc < 0)
        return rc;
    size_t kept = 0, removed = 0;
    for (size_t i = 0; i < n; i++) {
        struct gpt_snapshot_meta meta;
        struct gpt_err why;
        int mrc = gpt_snapshot_read_meta(paths[i], &meta, &why);
        if (mrc == -GPT_E_CORRUPT) {
            (void)gpt_snapshot_quarantine(paths[i], NULL, 0, &why);
            continue;
        }
        if (mrc < 0 || !snap_owned(&meta, owner))
            continue; /* unreadable here, or another job's: neither counted nor deleted */
        if (kept < (size_t)keep) {
            kept++;
            continue;
        }
        struct gpt_snapshot_manifest *man = NULL;
        if (meta.sliced && snap_manifest_load(paths[i], &meta, &man, &why) < 0)
            man = NULL; /* its slices go as orphans below */
        int urc = unlink(paths[i]) < 0 && errno != ENOENT ? -errno : 0;
        for (uint32_t s = 0; man && urc == 0 && s < man->n_slices; s++) {
            char sp[GPT_JOB_PATH_MAX + 96];
            if (gpt_snapshot_slice_path(dir, meta.step, man->id, man->slices[s].rank, sp,
                                        sizeof(sp)) == 0)
                (void)unlink(sp);
        }
        gpt_snapshot_manifest_free(man);
        errno = -urc;
        if (urc < 0 && rc == 0) {
            rc = -errno;
            gpt_err_set(err, rc, NULL, "%s: unlink: %s", paths[i], strerror(-rc));
        } else {
            removed++;
        }
    }
    gpt_snapshot_list_free(paths, n);
    struct gpt_err serr;
    int orphans = 0;
    (void)gpt_snapshot_clean_slices(dir, owner, &orphans, &serr);
    removed += (size_t)orphans;
    if (rc == 0 && removed > 0 && (rc = gpt_atomic_fsync_dir(dir)) < 0)
        gpt_err_set(err, rc, NULL, "%s: fsync directory: %s", dir, strerror(-rc));
    return rc;
}

/* ".snap-<digits>.gpts.XXXXXX": mkostemp's six letters and digits. */
static bool snap_tmp_name(const char *name)
{
    size_t pre = strlen(SNAP_TMP_PREFIX), n = strlen(name), i = pre;
    if (strncmp(name, SNAP_TMP_PREFIX, pre) != 0)
        return false;
    while (i < n && name[i] >= '0' && name[i] <= '9')
        i++;
    if (i == pre || i - pre > 18 || strncmp(name + i, GPT_SNAPSHOT_SUFFIX ".", 6) != 0)
        return false;
    i += 6;
    if (n - i != 6)
        return false;
    for (; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
            return false;
    }
    return true;
}

int gpt_snapshot_clean_tmp(const char *dir, int *ret_removed, struct gpt_err *err)
{
    GPT_ASSERT(dir);
    int removed = 0, rc = 0;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        rc = errno == ENOENT ? 0 : -errno;
        if (rc < 0)
            gpt_err_set(err, rc, NULL, "snapshot directory %s: %s", dir, strerror(-rc));
        goto out;
    }
    DIR *d = fdopendir(dfd);
    if (!d) {
        rc = -errno;
        close(dfd);
        gpt_err_set(err, rc, NULL, "snapshot directory %s: %s", dir, strerror(-rc));
        goto out;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        struct stat st;
        if (!snap_tmp_name(de->d_name) || fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !S_ISREG(st.st_mode))
            continue;
        if (unlinkat(dfd, de->d_name, 0) == 0)
            removed++;
        else if (errno != ENOENT && rc == 0)
            rc = gpt_err_set(err, -errno, NULL, "%s/%s: unlink: %s", dir, de->d_name,
                             strerror(errno));
    }
    closedir(d);
out:
    if (ret_removed)
        *ret_removed = removed;
    return rc;
}

/* ---- owner marker ------------------------------------------------------- */

int gpt_snapshot_owner_parse(const char *buf, size_t len, struct gpt_snapshot_owner *ret,
                             struct gpt_err *err)
{
    char text[GPT_SNAPSHOT_OWNER_MAX + 1];
    struct gpt_snapshot_owner o = {0};
    unsigned seen = 0;
    if (len > GPT_SNAPSHOT_OWNER_MAX)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "owner marker: longer than %d bytes",
                           GPT_SNAPSHOT_OWNER_MAX);
    memcpy(text, buf, len);
    text[len] = '\0';
    if (strlen(text) != len)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "owner marker: NUL byte");
    char *save = NULL, *line = strtok_r(text, "\n", &save);
    if (!line || strcmp(line, SNAP_OWNER_MAGIC) != 0)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "owner marker: first line is not \"%s\"",
                           SNAP_OWNER_MAGIC);
    while ((line = strtok_r(NULL, "\n", &save))) {
        char key[16], *end;
        const char *sp = strchr(line, ' ');
        if (!sp || (size_t)(sp - line) >= sizeof(key) || !sp[1])
            return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "owner marker: bad line");
        memcpy(key, line, (size_t)(sp - line));
        key[sp - line] = '\0';
        errno = 0;
        unsigned long long v = strtoull(sp + 1, &end, strcmp(key, "token") == 0 ? 16 : 10);
        if (errno || *end || sp[1] == '-')
            return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "owner marker: bad value of %s", key);
        if (strcmp(key, "token") == 0 && v != 0) {
            o.token = v;
            seen |= 1;
        } else if (strcmp(key, "job") == 0 && v <= INT64_MAX) {
            o.job = (int64_t)v;
            seen |= 2;
        } else if (strcmp(key, "uid") == 0 && v <= UINT32_MAX) {
            o.uid = (uint32_t)v;
            seen |= 4;
        } else {
            return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "owner marker: bad key or value %s", key);
        }
    }
    if (seen != 7)
        return gpt_err_set(err, -GPT_E_CORRUPT, NULL, "owner marker: token, job or uid missing");
    *ret = o;
    return 0;
}

int gpt_snapshot_owner_load(const char *dir, struct gpt_snapshot_owner *ret, struct gpt_err *err)
{
    char path[GPT_JOB_PATH_MAX + 32], buf[GPT_SNAPSHOT_OWNER_MAX + 1];
    int k = snprintf(path, sizeof(path), "%s/" GPT_SNAPSHOT_OWNER_FILE, dir);
    if (k < 0 || (size_t)k >= sizeof(path))
        return gpt_err_set(err, -ENAMETOOLONG, NULL, "snapshot directory name too long");
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC), rc;
    if (fd < 0) {
        rc = -errno;
        return gpt_err_set(err, rc, NULL, "%s: %s", path, strerror(-rc));
    }
    struct stat st;
    ssize_t n = -1;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (n = read(fd, buf, sizeof(buf))) < 0) {
        rc = gpt_err_set(err, n < 0 && errno ? -errno : -GPT_E_CORRUPT, NULL,
                         "%s: not a readable regular file", path);
        close(fd);
        return rc;
    }
    close(fd);
    struct gpt_err why;
    if ((rc = gpt_snapshot_owner_parse(buf, (size_t)n, ret, &why)) < 0)
        gpt_err_set(err, rc, NULL, "%s: %s", path, why.msg);
    return rc;
}

int gpt_snapshot_owner_recorded(const char *dir, struct gpt_snapshot_owner *ret,
                                struct gpt_err *err)
{
    char **paths;
    size_t n;
    int rc = gpt_snapshot_list(dir, &paths, &n, err);
    if (rc < 0)
        return rc;
    rc = gpt_err_set(err, -ENOENT, NULL, "no snapshot in %s records its owner", dir);
    for (size_t i = 0; i < n; i++) {
        struct gpt_snapshot_meta m;
        struct gpt_err ignored;
        if (gpt_snapshot_read_meta(paths[i], &m, &ignored) == 0 && m.owner.token != 0) {
            *ret = m.owner;
            gpt_err_clear(err);
            rc = 0;
            break;
        }
    }
    gpt_snapshot_list_free(paths, n);
    return rc;
}

/* Whether dir holds snapshot files (or quarantined ones). */
static bool snap_dir_has_snapshots(const char *dir)
{
    char **paths;
    size_t n;
    struct gpt_err ignored;
    if (snap_count_quarantined(dir) > 0)
        return true;
    if (gpt_snapshot_list(dir, &paths, &n, &ignored) < 0)
        return false;
    gpt_snapshot_list_free(paths, n);
    return n > 0;
}

static int snap_owner_foreign(const char *dir, const struct gpt_snapshot_owner *o,
                              struct gpt_snapshot_owner *ret_found, struct gpt_err *err)
{
    if (ret_found)
        *ret_found = *o;
    if (o->token == 0)
        return gpt_err_set(err, -EEXIST, "snapshot.dir",
                           "snapshot.dir %s already holds snapshots of another job or run (no"
                           " owner recorded)",
                           dir);
    if (o->job > 0)
        return gpt_err_set(err, -EEXIST, "snapshot.dir",
                           "snapshot.dir %s belongs to job %" PRId64 " (uid %" PRIu32 ")", dir,
                           o->job, o->uid);
    return gpt_err_set(err, -EEXIST, "snapshot.dir",
                       "snapshot.dir %s belongs to another `gptd run` (uid %" PRIu32 ")", dir,
                       o->uid);
}

int gpt_snapshot_owner_claim(const char *dir, const struct gpt_snapshot_owner *me, unsigned flags,
                             struct gpt_snapshot_owner *ret_found, struct gpt_err *err)
{
    GPT_ASSERT(dir && me && me->token != 0);
    char path[GPT_JOB_PATH_MAX + 32], tmp[GPT_JOB_PATH_MAX + 48], text[160];
    struct gpt_snapshot_owner found;
    struct gpt_err lerr;
    int rc;
    for (int attempt = 0; attempt < 2; attempt++) {
        rc = gpt_snapshot_owner_load(dir, &found, &lerr);
        if (rc == 0)
            return found.token == me->token ? 0 : snap_owner_foreign(dir, &found, ret_found, err);
        if (rc != -ENOENT && rc != -ENOTDIR)
            return gpt_err_set(err, rc, "snapshot.dir", "snapshot.dir: %s", lerr.msg);
        if (!(flags & GPT_OWNER_ADOPT) && snap_dir_has_snapshots(dir)) {
            struct gpt_snapshot_owner none = {0};
            return snap_owner_foreign(dir, &none, ret_found, err);
        }
        if (flags & GPT_OWNER_DRY_RUN)
            return 0;
        if ((rc = snap_mkdirs(dir)) < 0)
            return gpt_err_set(err, rc, "snapshot.dir", "snapshot.dir %s: %s", dir, strerror(-rc));
        snprintf(path, sizeof(path), "%s/" GPT_SNAPSHOT_OWNER_FILE, dir);
        snprintf(tmp, sizeof(tmp), "%s/" GPT_SNAPSHOT_OWNER_FILE ".XXXXXX", dir);
        int n =
            snprintf(text, sizeof(text),
                     SNAP_OWNER_MAGIC "\ntoken %016" PRIx64 "\njob %" PRId64 "\nuid %" PRIu32 "\n",
                     me->token, me->job, me->uid);
        int fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0) {
            rc = -errno;
            return gpt_err_set(err, rc, "snapshot.dir", "%s: %s", tmp, strerror(-rc));
        }
        /* The owner's alone, like the snapshots: the job's token is not
         * for other users to read, even in a folder they may list. */
        (void)fchmod(fd, 0600);
        rc = write(fd, text, (size_t)n) == n && fsync(fd) == 0 ? 0 : -EIO;
        close(fd);
        /* link() fails when the marker appeared meanwhile: then read it. */
        if (rc == 0 && link(tmp, path) < 0)
            rc = -errno;
        unlink(tmp);
        if (rc == 0) {
            (void)gpt_atomic_fsync_dir(dir); /* the marker is in place either way */
            return 0;
        }
        if (rc != -EEXIST)
            return gpt_err_set(err, rc, "snapshot.dir", "%s: %s", path, strerror(-rc));
    }
    return gpt_err_set(err, -EAGAIN, "snapshot.dir", "%s: owner marker keeps changing", dir);
}
