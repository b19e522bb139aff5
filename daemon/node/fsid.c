/*
 * fsid: per-thread file-system identity (see fsid.h). Only raw system
 * calls and the calling thread's credentials; no state of its own.
 */
#define _GNU_SOURCE
#include "fsid.h"

#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <pwd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

int fsid_user_lookup(uid_t uid, struct fsid_user *ret, struct gpt_err *err)
{
    GPT_ASSERT(ret);
    if (uid == geteuid()) {
        /* gptd's own uid needs no switch (and may have no passwd entry). */
        ret->uid = uid;
        ret->gid = getegid();
        ret->n_groups = 0;
        return 0;
    }
    struct passwd pw, *found = NULL;
    char buf[4096];
    int e = getpwuid_r(uid, &pw, buf, sizeof(buf), &found);
    if (e != 0 || !found)
        return gpt_err_set(err, e ? -e : -ENOENT, NULL,
                           "uid %u has no entry in the user database, so gptd cannot tell its "
                           "groups and will not act as it",
                           (unsigned)uid);
    int n = FSID_GROUPS_MAX;
    gid_t groups[FSID_GROUPS_MAX];
    if (getgrouplist(pw.pw_name, pw.pw_gid, groups, &n) < 0)
        return gpt_err_set(err, -E2BIG, NULL, "uid %u is in more than %d groups", (unsigned)uid,
                           FSID_GROUPS_MAX);
    ret->uid = uid;
    ret->gid = pw.pw_gid;
    ret->n_groups = n;
    memcpy(ret->groups, groups, (size_t)n * sizeof(gid_t));
    return 0;
}

bool fsid_can_act_as(uid_t uid)
{
    if (uid == geteuid())
        return true;
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    memset(data, 0, sizeof(data));
    if (syscall(SYS_capget, &hdr, data) < 0)
        return false;
    uint32_t want = (1u << CAP_SETUID) | (1u << CAP_SETGID);
    return (data[0].effective & want) == want;
}

/* The raw system call: glibc's setgroups() changes every thread. */
static int fsid_setgroups(int n, const gid_t *groups)
{
    return syscall(SYS_setgroups, (size_t)n, groups) < 0 ? -errno : 0;
}

/* setfsuid/setfsgid report no error: they return the previous value, and
 * an impossible id (-1) changes nothing, so the result is read back. */
static uid_t fsid_current_uid(void)
{
    return (uid_t)setfsuid((uid_t)-1);
}

static gid_t fsid_current_gid(void)
{
    return (gid_t)setfsgid((gid_t)-1);
}

static int fsid_restore(const struct fsid_saved *s)
{
    (void)setfsuid(s->fsuid);
    (void)setfsgid(s->fsgid);
    int rc = fsid_setgroups(s->n_groups, s->groups);
    if (rc == 0 && (fsid_current_uid() != s->fsuid || fsid_current_gid() != s->fsgid))
        rc = -EPERM;
    return rc;
}

int fsid_enter(const struct fsid_user *u, struct fsid_saved *saved, struct gpt_err *err)
{
    GPT_ASSERT(u && saved);
    memset(saved, 0, sizeof(*saved));
    if (u->uid == geteuid())
        return 0;
    if (!fsid_can_act_as(u->uid))
        return gpt_err_set(err, -EPERM, NULL,
                           "gptd runs as uid %u without CAP_SETUID and CAP_SETGID, so it cannot "
                           "open files as uid %u (the job's owner); submit the job as uid %u or "
                           "give gptd those capabilities",
                           (unsigned)geteuid(), (unsigned)u->uid, (unsigned)geteuid());
    saved->fsuid = fsid_current_uid();
    saved->fsgid = fsid_current_gid();
    saved->n_groups = getgroups(FSID_GROUPS_MAX, saved->groups);
    if (saved->n_groups < 0)
        return gpt_err_set(err, -errno, NULL, "getgroups: %s", strerror(errno));
    saved->switched = true;
    int rc = fsid_setgroups(u->n_groups, u->groups);
    if (rc == 0) {
        (void)setfsgid(u->gid);
        (void)setfsuid(u->uid);
        if (fsid_current_gid() != u->gid || fsid_current_uid() != u->uid)
            rc = -EPERM;
    }
    if (rc < 0) {
        int back = fsid_restore(saved);
        GPT_ASSERT(back == 0);
        saved->switched = false;
        return gpt_err_set(err, rc, NULL, "cannot take the file-system identity of uid %u: %s",
                           (unsigned)u->uid, strerror(-rc));
    }
    return 0;
}

void fsid_leave(const struct fsid_saved *saved)
{
    GPT_ASSERT(saved);
    if (!saved->switched)
        return;
    int rc = fsid_restore(saved);
    GPT_ASSERT(rc == 0);
}
