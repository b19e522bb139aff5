/*
 * export_tmp: see export_tmp.h. A record is a small text file:
 *   uid N\n prefix P\n path OUT
 * with OUT running to the end of the file (a path may hold a newline; the
 * prefix never does). Owns nothing between calls.
 */
#define _GNU_SOURCE /* O_NOFOLLOW, fdopendir */
#include "export_tmp.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsid.h"
#include "gpt_atomic_file.h"
#include "log.h"

#define EXPORT_TMP_NAME_KEEP  64     /* bytes of the output's name in the prefix */
#define EXPORT_TMP_SCAN_MAX   100000 /* entries of the output's folder read at start */
#define EXPORT_TMP_DIR_MAX    1000   /* entries of a temporary folder removed */
#define EXPORT_TMP_RECORD_MAX (PATH_MAX + EXPORT_TMP_PREFIX_MAX + 64)

static int export_tmp_dir(const char *state_dir, char *dir, size_t cap, struct gpt_err *err)
{
    if (snprintf(dir, cap, "%s/" EXPORT_TMP_DIR, state_dir) >= (int)cap)
        return gpt_err_set(err, -ENAMETOOLONG, "state_dir", "state directory too long");
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return gpt_err_set(err, -errno, NULL, "mkdir %s: %s", dir, strerror(errno));
    return 0;
}

int export_tmp_begin(const char *state_dir, uid_t uid, const char *out, struct export_tmp *ret,
                     struct gpt_err *err)
{
    char dir[PATH_MAX], name[EXPORT_TMP_NAME_KEEP + 1], text[EXPORT_TMP_RECORD_MAX];
    uint64_t id = 0;
    memset(ret, 0, sizeof(*ret));
    int rc = export_tmp_dir(state_dir, dir, sizeof(dir), err);
    if (rc < 0)
        return rc;
    if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id))
        return gpt_err_set(err, -EIO, NULL, "getrandom: %s", strerror(errno));
    /* The output's own name, so a user sees what the file is for; only
     * characters that are safe in a name and in the record's lines. */
    const char *base = strrchr(out, '/') ? strrchr(out, '/') + 1 : out;
    size_t n = 0;
    for (; base[n] && n < EXPORT_TMP_NAME_KEEP; n++)
        name[n] = isalnum((unsigned char)base[n]) || strchr("._-", base[n]) ? base[n] : '_';
    name[n] = '\0';
    snprintf(ret->prefix, sizeof(ret->prefix), ".%s." EXPORT_TMP_MARK "-%016" PRIx64 "-", name, id);
    if (snprintf(ret->record, sizeof(ret->record), "%s/%016" PRIx64, dir, id) >=
        (int)sizeof(ret->record))
        return gpt_err_set(err, -ENAMETOOLONG, "state_dir", "state directory too long");
    int len =
        snprintf(text, sizeof(text), "uid %u\nprefix %s\npath %s", (unsigned)uid, ret->prefix, out);
    if (len < 0 || len >= (int)sizeof(text))
        return gpt_err_set(err, -ENAMETOOLONG, "output", "output path too long");
    struct gpt_atomic_file f;
    if ((rc = gpt_atomic_file_open(&f, ret->record, NULL, 0600, err)) == 0 &&
        (rc = gpt_atomic_file_write(&f, text, (size_t)len, err)) == 0)
        rc = gpt_atomic_file_commit(&f, err);
    gpt_atomic_file_abort(&f);
    if (rc < 0)
        ret->record[0] = '\0';
    return rc;
}

void export_tmp_end(struct export_tmp *t)
{
    if (t->record[0])
        (void)unlink(t->record);
    t->record[0] = '\0';
}

/* Removes a temporary folder of the hf writer: the files in it, then the
 * folder. `dfd` is the output's folder. Returns 0 or -errno. */
static int export_tmp_rmdir(int dfd, const char *name)
{
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    struct dirent *de;
    for (int n = 0; n < EXPORT_TMP_DIR_MAX && (de = readdir(d)); n++)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            (void)unlinkat(fd, de->d_name, 0);
    closedir(d);
    return unlinkat(dfd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
}

/* As the record's user: removes the entries of `out`'s folder named
 * `prefix` and six more characters, that the user owns. Returns how many
 * were removed, or -errno when the folder cannot be read. */
static int export_tmp_remove(uid_t uid, const char *prefix, const char *out)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", out);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    int scan = dup(dfd);
    DIR *d = scan >= 0 ? fdopendir(scan) : NULL;
    if (!d) {
        int rc = -errno;
        if (scan >= 0)
            close(scan);
        close(dfd);
        return rc;
    }
    size_t plen = strlen(prefix);
    int removed = 0;
    struct dirent *de;
    for (int n = 0; n < EXPORT_TMP_SCAN_MAX && (de = readdir(d)); n++) {
        struct stat st;
        if (strncmp(de->d_name, prefix, plen) != 0 || strlen(de->d_name) != plen + 6 ||
            fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_uid != uid)
            continue;
        int rc = S_ISDIR(st.st_mode) ? export_tmp_rmdir(dfd, de->d_name)
                                     : (unlinkat(dfd, de->d_name, 0) < 0 ? -errno : 0);
        if (rc < 0) {
            log_warn("cannot remove %s/%s, the temporary of an export gptd was stopped in: %s", dir,
                     de->d_name, strerror(-rc));
            continue;
        }
        log_notice("removed %s/%s, the temporary of an export gptd was stopped in", dir,
                   de->d_name);
        removed++;
    }
    closedir(d);
    close(dfd);
    return removed;
}

/* Parses a record; 0 or -EINVAL. */
static int export_tmp_parse(char *text, uid_t *ret_uid, char **ret_prefix, char **ret_out)
{
    unsigned uid;
    char *p = strchr(text, '\n'), *q;
    if (!p || sscanf(text, "uid %u", &uid) != 1 || strncmp(p + 1, "prefix ", 7) != 0 ||
        !(q = strchr(p + 1, '\n')) || strncmp(q + 1, "path /", 6) != 0)
        return -EINVAL;
    *q = '\0';
    *ret_prefix = p + 8;
    *ret_out = q + 6;
    *ret_uid = (uid_t)uid;
    if (!**ret_prefix || strchr(*ret_prefix, '/') || strstr(*ret_prefix, EXPORT_TMP_MARK) == NULL)
        return -EINVAL;
    return 0;
}

/* One record: its temporaries, then itself. Returns temporaries removed. */
static int export_tmp_clean_one(int rfd, const char *dir, const char *name)
{
    char text[EXPORT_TMP_RECORD_MAX + 1];
    int fd = openat(rfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;
    if (fd >= 0)
        close(fd);
    uid_t uid;
    char *prefix, *out;
    int removed = 0;
    if (n < 0 || (text[n] = '\0', export_tmp_parse(text, &uid, &prefix, &out)) < 0) {
        log_warn("%s/%s is not an export record; removed", dir, name);
        goto out;
    }
    struct fsid_user u;
    struct fsid_saved saved = {0};
    struct gpt_err err;
    if (fsid_user_lookup(uid, &u, &err) < 0 || fsid_enter(&u, &saved, &err) < 0) {
        log_warn("the temporary of an export to %s is not removed: %s", out, err.msg);
        goto out;
    }
    removed = export_tmp_remove(uid, prefix, out);
    fsid_leave(&saved);
    if (removed < 0) {
        log_warn("the temporary of an export to %s is not removed: %s", out, strerror(-removed));
        removed = 0;
    }
out:
    (void)unlinkat(rfd, name, 0);
    return removed;
}

int export_tmp_clean(const char *state_dir)
{
    char dir[PATH_MAX];
    struct gpt_err err;
    if (export_tmp_dir(state_dir, dir, sizeof(dir), &err) < 0) {
        log_warn("the temporaries of stopped exports are not removed: %s", err.msg);
        return 0;
    }
    int rfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = rfd >= 0 ? opendir(dir) : NULL;
    if (!d) {
        log_warn("the temporaries of stopped exports are not removed: %s: %s", dir,
                 strerror(errno));
        if (rfd >= 0)
            close(rfd);
        return 0;
    }
    int removed = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (de->d_name[0] == '.')
            (void)unlinkat(rfd, de->d_name, 0); /* a record's own temporary */
        else
            removed += export_tmp_clean_one(rfd, dir, de->d_name);
    }
    closedir(d);
    close(rfd);
    return removed;
}
