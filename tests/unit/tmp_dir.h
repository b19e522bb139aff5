/*
 * tmp_dir: the one temporary folder of a unit test program, tmpdir: made
 * by the program's group set-up with tmp_dir_make, removed with all it
 * holds by tmp_dir_teardown. Header-only, for test programs of one file;
 * the program defines _GNU_SOURCE before its first include (nftw).
 */
#ifndef GPT_TEST_TMP_DIR_H
#define GPT_TEST_TMP_DIR_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static char tmpdir[256];

/* Makes tmpdir as /tmp/gptd-test-NAME-XXXXXX; 0, or -1 (a group set-up's
 * failure) when mkdtemp fails. */
static inline int tmp_dir_make(const char *name)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/gptd-test-%s-XXXXXX", name);
    return mkdtemp(tmpdir) ? 0 : -1;
}

static inline int tmp_dir_remove_entry(const char *path, const struct stat *st, int flag,
                                       struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* The group tear-down: tmpdir and everything below it, links not followed. */
static inline int tmp_dir_teardown(void **state)
{
    (void)state;
    return nftw(tmpdir, tmp_dir_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* tmpdir/NAME into out. */
static inline void tmp_dir_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", tmpdir, name);
}

#endif
