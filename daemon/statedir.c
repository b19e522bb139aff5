/*
 * statedir: see statedir.h. The lock descriptor is the only state: a
 * process-lifetime static, written once on the main thread.
 */
#define _GNU_SOURCE /* O_NOFOLLOW */
#include "statedir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "snapshot.h"

static int statedir_lock_fd = -1; /* held until exit */

int statedir_lock(const char *state_dir, struct gpt_err *err)
{
    char path[DB_PATH_MAX + 32], buf[32] = "";
    int k = snprintf(path, sizeof(path), "%s/" STATEDIR_LOCK_FILE, state_dir);
    if (k < 0 || (size_t)k >= sizeof(path))
        return gpt_err_set(err, -ENAMETOOLONG, "state_dir", "state directory too long");
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return gpt_err_set(err, -errno, NULL, "%s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        buf[n > 0 ? n : 0] = '\0';
        buf[strcspn(buf, "\n")] = '\0';
        close(fd);
        if (rc != -EBUSY)
            return gpt_err_set(err, rc, NULL, "%s: flock: %s", path, strerror(-rc));
        return gpt_err_set(err, rc, "state_dir",
                           "state directory %s is in use by another gptd (pid %s holds %s); stop "
                           "it first, or give this gptd its own --state-dir",
                           state_dir, buf[0] ? buf : "unknown", path);
    }
    int n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) < 0 || pwrite(fd, buf, (size_t)n, 0) != n) {
        int rc = -errno;
        close(fd);
        return gpt_err_set(err, rc ? rc : -EIO, NULL, "%s: cannot write the pid", path);
    }
    statedir_lock_fd = fd;
    return 0;
}

/* Entries of dir other than . and .. (a missing dir has none). */
static int statedir_count(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    return n;
}

int statedir_check_db(const char *state_dir, const char *db_path, struct gpt_err *err)
{
    struct stat st;
    if (lstat(db_path, &st) == 0)
        return 0; /* db_open checks what is in it */
    if (errno != ENOENT)
        return gpt_err_set(err, -errno, NULL, "database %s: %s", db_path, strerror(errno));
    char jobs[DB_PATH_MAX + 16];
    snprintf(jobs, sizeof(jobs), "%s/jobs", state_dir);
    int n = statedir_count(jobs);
    if (n == 0)
        return 0; /* a first start */
    return gpt_err_set(err, -ENOENT, NULL,
                       "database %s is missing, but %s holds the folders of %d job%s: restore the "
                       "database from a backup, or move %s away to start with an empty database",
                       db_path, jobs, n, n == 1 ? "" : "s", jobs);
}

int statedir_clean_tmp(const char *state_dir)
{
    char jobs[DB_PATH_MAX + 16], dir[DB_PATH_MAX + 300];
    snprintf(jobs, sizeof(jobs), "%s/jobs", state_dir);
    DIR *d = opendir(jobs);
    int total = 0;
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        int removed = 0;
        struct gpt_err ignored;
        snprintf(dir, sizeof(dir), "%s/%s/snapshots", jobs, de->d_name);
        if (gpt_snapshot_clean_tmp(dir, &removed, &ignored) == 0)
            total += removed;
    }
    closedir(d);
    return total;
}

int statedir_snapdir_free(const char *dir, bool own_folder, struct gpt_err *err)
{
    /* A token no job has: any marker is another's. */
    struct gpt_snapshot_owner nobody = {UINT64_MAX, 0, 0};
    struct gpt_err why;
    int rc = gpt_snapshot_owner_claim(dir, &nobody, GPT_OWNER_DRY_RUN, NULL, &why);
    if (rc == -EEXIST && own_folder)
        return gpt_err_set(err, rc, "snapshot.dir",
                           "%s: this job id was used before the database was made; move that "
                           "folder away (or the whole jobs folder of the state directory)",
                           why.msg);
    if (rc == -EEXIST)
        return gpt_err_set(err, rc, "snapshot.dir",
                           "%s: a new job never shares another job's snapshot folder; choose "
                           "another snapshot.dir (or leave it empty for the job's own folder)",
                           why.msg);
    if (rc < 0)
        return gpt_err_set(err, rc, "snapshot.dir", "%s", why.msg);
    return 0;
}

int statedir_snapdir_claim(const struct db_job *j, struct gpt_err *err)
{
    struct gpt_snapshot_owner me = {j->token, j->id, (uint32_t)j->owner_uid};
    struct gpt_err why;
    if (me.token == 0)
        return gpt_err_set(err, -EINVAL, NULL, "job %" PRId64 " has no token", j->id);
    int rc =
        gpt_snapshot_owner_claim(j->snapshot_dir, &me, j->resume ? GPT_OWNER_ADOPT : 0, NULL, &why);
    if (rc == -EEXIST)
        return gpt_err_set(err, rc, "snapshot.dir",
                           "%s: job %" PRId64 " does not use another job's snapshots; submit it "
                           "again with another snapshot.dir",
                           why.msg, j->id);
    if (rc < 0)
        return gpt_err_set(err, rc, "snapshot.dir", "%s", why.msg);
    return 0;
}
