/*
 * gpt_atomic_file: the one crash-safe way to replace a file. The bytes go
 * to a new temporary file in the target's folder (so the rename stays on
 * one file system), which commit syncs, closes, renames over the target and
 * follows with an fsync of the folder. A reader, or a process that starts
 * after a crash at any step, finds either the old file or the complete new
 * one, never a torn file; a failure at any step removes the temporary file.
 *
 * The struct is the caller's (embedded or on the stack); one thread uses
 * it at a time. Every call blocks on file I/O.
 */
#ifndef GPT_ATOMIC_FILE_H
#define GPT_ATOMIC_FILE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "gpt_err.h"

struct gpt_atomic_file {
    int fd;              /* the temporary file, open for writing; a caller may
                            pwrite or lseek it (a header filled in last) */
    bool renamed;        /* commit renamed the file into place (see commit) */
    char path[PATH_MAX]; /* the target */
    char tmp[PATH_MAX];  /* the temporary file; "" once removed or renamed */
};

/* Creates the temporary file for replacing `path`, with permission bits
 * `mode` (set with fchmod, so the umask does not narrow them). The
 * temporary name is `tmp_prefix` followed by six random characters, in the
 * folder of `path`; NULL gives ".NAME.tmp-" for a target named NAME (a
 * caller whose cleanup recognises its own leftovers names the prefix; it
 * must not contain '/'). The folder must exist. Returns 0, -ENAMETOOLONG,
 * -EINVAL for a prefix with '/', or -errno of the create; on failure
 * nothing is left on disk and abort is a no-op. */
int gpt_atomic_file_open(struct gpt_atomic_file *f, const char *path, const char *tmp_prefix,
                         mode_t mode, struct gpt_err *err);

/* Appends n bytes (short writes and EINTR retried). Returns 0 or -errno;
 * the file stays open (the caller aborts). */
int gpt_atomic_file_write(struct gpt_atomic_file *f, const void *p, size_t n, struct gpt_err *err);

/* fsync, close, rename over the target, fsync of the folder. Returns 0, or
 * -errno of the step that failed, with the temporary file removed. A failed
 * fsync of the folder is the one failure after the rename: the new file is
 * in place but may not survive a power loss; f->renamed tells a caller that
 * must take it back (a snapshot manifest). Either way the struct is done. */
int gpt_atomic_file_commit(struct gpt_atomic_file *f, struct gpt_err *err);

/* Closes and removes the temporary file; the target is untouched. A no-op
 * on a zeroed struct, after a failed open and after commit. */
void gpt_atomic_file_abort(struct gpt_atomic_file *f);

/* fsync of the folder `dir`: makes a rename or an unlink in it durable.
 * Returns 0 or -errno. */
int gpt_atomic_fsync_dir(const char *dir);

#endif
