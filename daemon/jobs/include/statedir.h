/*
 * statedir: what guards gptd's state directory: one gptd per directory (a
 * lock held for the process lifetime), a database that is expected but
 * missing refused at start, dead writers' temporary snapshot files removed
 * at start, and the owner marker of each job's snapshot folder (checked at
 * submit, claimed when the job starts).
 *
 * Loop thread (or main before the loop); each call blocks on a few small
 * file operations and, where it takes a user's identity, on one user
 * lookup (NSS).
 */
#ifndef GPTD_STATEDIR_H
#define GPTD_STATEDIR_H

#include <stdbool.h>

#include "db.h"
#include "gpt_err.h"

#define STATEDIR_LOCK_FILE "gptd.lock"

/* Takes an exclusive flock on STATE_DIR/gptd.lock and writes this pid into
 * it. The descriptor stays open (close-on-exec) until the process exits,
 * which releases the lock, kill -9 included. -EBUSY naming the holder's pid
 * when another gptd has it. */
int statedir_lock(const char *state_dir, struct gpt_err *err);

/* Before db_open: a database that does not exist while STATE_DIR/jobs
 * holds job folders is refused (the jobs would be forgotten and their ids,
 * with their folders, used again). -ENOENT naming the file and what to do. */
int statedir_check_db(const char *state_dir, const char *db_path, struct gpt_err *err);

/* Removes stale temporary snapshot files (gpt_snapshot_clean_tmp) from
 * the snapshot folder of every job in the database, each with its owner's
 * file-system identity (fsid.h): the folders are the owners' (0700), and
 * gptd under its unit has no CAP_DAC_OVERRIDE. Returns how many were
 * removed; what cannot be cleaned is logged. After db_open, before the
 * loop (the user lookups block on NSS). */
int statedir_clean_tmp(struct db *db);

/* At submit: the folder a new job names must be free: no owner marker and
 * no snapshots. -EEXIST naming snapshot.dir and the owning job; own_folder:
 * dir is the job's default folder in the state directory (whose id an old
 * job had), which changes the advice. A folder the user named is read with
 * the submitting user's (`uid`) file-system identity (fsid.h), so gptd's
 * own rights reveal nothing about a folder the user cannot read; the
 * default folder, which the user cannot reach, is gptd's to check. */
int statedir_snapdir_free(const char *dir, bool own_folder, uid_t uid, struct gpt_err *err);

/* When a job starts: claims its snapshot folder (creates it and the owner
 * marker at first use; a resume adopts a folder without a marker), with the
 * owner's file-system identity: the folder is the owner's (0700), and gptd
 * writes nothing into a path a user named with its own rights. -EEXIST
 * naming snapshot.dir and the owning job when the folder is another's. */
int statedir_snapdir_claim(const struct db_job *j, struct gpt_err *err);

#endif
