/*
 * paths: the directories a job may touch, checked twice. At submit (loop
 * thread) a job's data paths must lie under the configured data roots and
 * its snapshot directory under the snapshot roots (or the state
 * directory), with symbolic links and ".." resolved first: a quick check
 * that opens nothing and expands no glob, so it cannot block the loop. At
 * the time of use (the worker thread, with the job owner's file-system
 * identity, see fsid.h) each file really opened is checked again through
 * its descriptor, so a path swapped for a symbolic link after submit
 * cannot lead gptd out of the roots.
 */
#ifndef GPTD_PATHS_H
#define GPTD_PATHS_H

#include <stddef.h>
#include <sys/types.h>

#include "gpt_err.h"
#include "jobspec.h"

/* 0 when every path of `job` is allowed; otherwise -EACCES with err->path
 * naming the job key ("data.path") and err->msg the file and the roots. A
 * shard glob is not expanded: the directory before its first wildcard must
 * be under the roots, and ".." is refused in it. Loop thread; one
 * realpath(3) per path. */
int paths_check_job(const struct gpt_job *job, const char *data_roots, const char *snapshot_roots,
                    const char *state_dir, struct gpt_err *err);

/* Submit time, loop thread: with `uid`'s file-system identity for the
 * moment of the check, each data path can be opened as that user (a plain
 * file is opened without blocking and must be regular; for a glob the
 * folder before the first wildcard is opened, nothing is expanded). The
 * errors are the ones the user would get, naming the key. A few open(2)
 * calls and one user-database lookup. */
int paths_check_access(const struct gpt_job *job, uid_t uid, struct gpt_err *err);

/* 0 when `path` (resolved) lies under one of the ':'-separated `roots`
 * (each resolved too), -EACCES otherwise. A path that does not exist yet
 * is resolved through its nearest existing parent. */
int paths_under(const char *path, const char *roots);

/* Time of use: 0 when the file open as `fd` (named `file` by the job key
 * `key`) lies under `roots`, judged by the path the kernel holds for the
 * descriptor; -EACCES naming the key otherwise. Any thread. */
int paths_check_fd(int fd, const char *file, const char *key, const char *roots,
                   struct gpt_err *err);

/* gpt_data_policy.check for the data roots: ctx is the roots string. */
int paths_data_check(void *roots, int fd, const char *file, const char *json_path,
                     struct gpt_err *err);

/* Time of use, on the thread that will write the snapshots, with the job
 * owner's file-system identity: creates `dir` (0700, as that identity: a
 * folder the owner could not create is refused), opens it, checks that it
 * is a directory under the state directory or `snapshot_roots` that the
 * owner may write, and writes its resolved path (no symbolic links) to
 * ret_real. Errors name snapshot.dir. Blocks on file I/O. */
int paths_snapshot_dir_open(const char *dir, const char *snapshot_roots, const char *state_dir,
                            char *ret_real, size_t cap, struct gpt_err *err);

/* The default snapshot folder STATE/jobs/N/snapshots of a job owned by
 * `owner`: gptd (not the owner, who cannot write the state directory)
 * creates it 0700 and gives it to the owner, and lets the owner traverse
 * STATE and STATE/jobs (o+x, not o+r: nothing there can be listed). Other
 * folders are left alone: the job creates them with its owner's rights.
 * Loop thread; a few mkdir/chown calls on the local state directory. */
int paths_snapshot_dir_prepare(const char *state_dir, const char *dir, uid_t owner,
                               struct gpt_err *err);

#endif
