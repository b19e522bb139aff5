/*
 * fsid: a thread's file-system identity. A job's files are opened by a
 * thread that has taken the submitting user's file-system uid, gid and
 * supplementary groups, so the kernel checks every open, mkdir and glob
 * against that user's rights (never gptd's) at the time of use.
 *
 * Linux keeps fsuid, fsgid and the group list per thread; setfsuid(2) and
 * setfsgid(2) change only the calling thread, and so does the raw
 * setgroups system call (glibc's setgroups() would broadcast the change to
 * every thread of gptd, the loop included). Switching needs CAP_SETUID and
 * CAP_SETGID; without them (gptd run, the Slurm launcher, a gptd started
 * by a user) a job of gptd's own uid needs no switch and any other is
 * refused.
 *
 * Any thread; a switched thread must switch back (fsid_leave) before it
 * does anything for gptd itself.
 */
#ifndef GPTD_FSID_H
#define GPTD_FSID_H

#include <stdbool.h>
#include <sys/types.h>

#include "gpt_err.h"

#define FSID_GROUPS_MAX 256 /* supplementary groups carried per user */

/* Who a job acts as: uid, primary gid and supplementary groups. */
struct fsid_user {
    uid_t uid;
    gid_t gid;
    int n_groups;
    gid_t groups[FSID_GROUPS_MAX];
};

/* What fsid_enter replaced, for fsid_leave. */
struct fsid_saved {
    bool switched;
    uid_t fsuid;
    gid_t fsgid;
    int n_groups;
    gid_t groups[FSID_GROUPS_MAX];
};

/* Fills *ret with `uid`'s primary group and supplementary groups from the
 * user database. -ENOENT (err names the uid) when the uid has no passwd
 * entry. Any thread; blocks on NSS (do not call it on the loop). */
int fsid_user_lookup(uid_t uid, struct fsid_user *ret, struct gpt_err *err);

/* True when this process may act as `uid`: it is gptd's own effective uid,
 * or gptd holds CAP_SETUID and CAP_SETGID. Any thread; does not block. */
bool fsid_can_act_as(uid_t uid);

/* Makes the calling thread's file-system identity `u`'s. No switch (and
 * saved->switched false) when u->uid is already the process's effective
 * uid. -EPERM with a message naming both uids when gptd lacks the
 * privilege. On failure nothing is changed. Calling thread only. */
int fsid_enter(const struct fsid_user *u, struct fsid_saved *saved, struct gpt_err *err);

/* Restores what fsid_enter saved. Asserts that it worked (switching back
 * to gptd's own identity cannot fail). Calling thread only. */
void fsid_leave(const struct fsid_saved *saved);

#endif
