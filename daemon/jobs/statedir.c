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

#include "fsid.h"
#include "log.h"
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

/* One job's folder to clean, collected before any file is touched (no
 * file operation runs with a switched identity while SQLite reads). */
struct clean_item {
    uid_t owner;
    char dir[DB_PATH_MAX];
};

struct clean_list {
    struct clean_item *v;
    size_t n, cap;
    bool oom;
};

static void clean_collect(void *ctx, const struct db_job *j)
{
    struct clean_list *l = ctx;
    if (!j->snapshot_dir[0] || l->oom)
        return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        struct clean_item *v = realloc(l->v, cap * sizeof(*v));
        if (!v) {
            l->oom = true;
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n].owner = j->owner_uid;
    snprintf(l->v[l->n].dir, sizeof(l->v[l->n].dir), "%s", j->snapshot_dir);
    l->n++;
}

int statedir_clean_tmp(struct db *db)
{
    struct clean_list l = {0};
    struct gpt_err err;
    int total = 0;
    if (db_job_list(db, -1, clean_collect, &l, &err) < 0) {
        log_warn("stale temporary snapshot files are not removed: %s", err.msg);
        goto out;
    }
    if (l.oom)
        log_warn("stale temporary snapshot files are not removed from every job: out of memory");
    struct fsid_user u = {.uid = (uid_t)-1};
    for (size_t i = 0; i < l.n; i++) {
        /* The folder is its owner's (0700): listed and cleaned with the
         * owner's identity, so gptd needs no CAP_DAC_OVERRIDE and removes
         * nothing the owner could not. */
        struct fsid_saved saved = {0};
        int removed = 0;
        if (u.uid != l.v[i].owner && fsid_user_lookup(l.v[i].owner, &u, &err) < 0) {
            u.uid = (uid_t)-1;
            log_warn("%s: not cleaned: %s", l.v[i].dir, err.msg);
            continue;
        }
        if (fsid_enter(&u, &saved, &err) < 0) {
            log_warn("%s: not cleaned: %s", l.v[i].dir, err.msg);
            continue;
        }
        int rc = gpt_snapshot_clean_tmp(l.v[i].dir, &removed, &err);
        fsid_leave(&saved);
        if (rc < 0 && rc != -ENOENT && rc != -EACCES)
            log_warn("%s: stale temporary files not removed: %s", l.v[i].dir, err.msg);
        total += removed;
    }
out:
    free(l.v);
    return total;
}

static int snapdir_free(const char *dir, bool own_folder, struct gpt_err *err)
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

static int snapdir_claim(const struct db_job *j, struct gpt_err *err)
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

int statedir_snapdir_free(const char *dir, bool own_folder, uid_t uid, struct gpt_err *err)
{
    if (own_folder) /* in the state directory, which the user cannot reach */
        return snapdir_free(dir, true, err);
    struct fsid_user u;
    struct fsid_saved saved = {0};
    int rc = fsid_user_lookup(uid, &u, err);
    if (rc == 0 && (rc = fsid_enter(&u, &saved, err)) == 0) {
        rc = snapdir_free(dir, false, err);
        fsid_leave(&saved);
    }
    return rc;
}

int statedir_snapdir_claim(const struct db_job *j, struct gpt_err *err)
{
    struct fsid_user u;
    struct fsid_saved saved = {0};
    int rc = fsid_user_lookup(j->owner_uid, &u, err);
    if (rc == 0 && (rc = fsid_enter(&u, &saved, err)) == 0) {
        rc = snapdir_claim(j, err);
        fsid_leave(&saved);
    }
    return rc;
}
