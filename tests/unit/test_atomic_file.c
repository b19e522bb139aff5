/*
 * Unit tests of base/gpt_atomic_file (the one crash-safe file replace).
 *
 * The test program defines the file system calls the helper makes
 * (mkostemp, fchmod, write, fsync, close, rename, open): an executable's
 * definition wins over libc's, so every call of the helper passes through
 * a counter here before reaching the kernel. A dry run counts the steps of
 * one replace; then a forked writer is killed with SIGKILL just before
 * each step in turn (and once after the last), and the target must hold
 * exactly the old bytes (or be absent, when there was none) or exactly the
 * new ones, never anything else. The same steps made to fail with EIO must
 * leave the old file, no temporary file and no open descriptor behind.
 */
#define _GNU_SOURCE /* RTLD_NEXT, mkostemp */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpt_atomic_file.h"

#define CHUNK_BYTES 1000
#define OLD_BYTES   2500

/* ---- the interposed calls ---------------------------------------------- */

static int armed;       /* count only while the writer under test runs */
static int step_now;    /* steps made so far */
static int kill_at;     /* SIGKILL before this step (0: never) */
static int fail_at;     /* fail this step with EIO (0: never) */
static int rename_step; /* the step that was the rename, in the last run */

/* Counts one step; nonzero when it is to fail. */
static int step(int is_rename)
{
    if (!armed)
        return 0;
    step_now++;
    if (is_rename)
        rename_step = step_now;
    if (step_now == kill_at)
        syscall(SYS_kill, syscall(SYS_getpid), SIGKILL);
    if (step_now == fail_at) {
        errno = EIO;
        return 1;
    }
    return 0;
}

int mkostemp(char *tmpl, int flags)
{
    static int (*real)(char *, int);
    if (!real)
        real = (int (*)(char *, int))dlsym(RTLD_NEXT, "mkostemp");
    return step(0) ? -1 : real(tmpl, flags);
}

int fchmod(int fd, mode_t mode)
{
    return step(0) ? -1 : (int)syscall(SYS_fchmod, fd, mode);
}

ssize_t write(int fd, const void *p, size_t n)
{
    return step(0) ? -1 : (ssize_t)syscall(SYS_write, fd, p, n);
}

int fsync(int fd)
{
    return step(0) ? -1 : (int)syscall(SYS_fsync, fd);
}

int close(int fd)
{
    /* A failed close still releases the descriptor (Linux). */
    int failed = step(0);
    int rc = (int)syscall(SYS_close, fd);
    return failed ? -1 : rc;
}

int rename(const char *from, const char *to)
{
    return step(1) ? -1 : (int)syscall(SYS_rename, from, to);
}

int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (flags & O_CREAT) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    return step(0) ? -1 : (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

/* ---- helpers ------------------------------------------------------------ */

static char dir[64], target[96];

static void fill(unsigned char *buf, size_t n, unsigned char c)
{
    memset(buf, c, n);
}

/* Replaces target with three chunks of 'N' through the helper. */
static int write_new(struct gpt_atomic_file *f, struct gpt_err *err)
{
    unsigned char chunk[CHUNK_BYTES];
    fill(chunk, sizeof(chunk), 'N');
    int rc = gpt_atomic_file_open(f, target, NULL, 0640, err);
    for (int i = 0; rc == 0 && i < 3; i++)
        rc = gpt_atomic_file_write(f, chunk, sizeof(chunk), err);
    if (rc == 0)
        return gpt_atomic_file_commit(f, err);
    gpt_atomic_file_abort(f);
    return rc;
}

static void put_old(int with_old)
{
    unlink(target);
    if (!with_old)
        return;
    unsigned char buf[OLD_BYTES];
    fill(buf, sizeof(buf), 'O');
    FILE *fp = fopen(target, "w");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, sizeof(buf), fp), sizeof(buf));
    assert_int_equal(fclose(fp), 0);
}

/* 'O' (old), 'N' (new), '-' (absent) or 'T' (torn: anything else). */
static char target_state(void)
{
    static unsigned char buf[4 * CHUNK_BYTES];
    FILE *fp = fopen(target, "r");
    if (!fp)
        return errno == ENOENT ? '-' : 'T';
    size_t n = fread(buf, 1, sizeof(buf), fp);
    fclose(fp);
    char c = n == OLD_BYTES ? 'O' : n == 3 * CHUNK_BYTES ? 'N' : 'T';
    for (size_t i = 0; c != 'T' && i < n; i++)
        if (buf[i] != (unsigned char)c)
            c = 'T';
    return c;
}

/* Entries of dir other than the target (temporary files); removes them
 * when `remove` is set. */
static int leftovers(int remove)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, "t.bin"))
            continue;
        /* A leftover carries the helper's name: ".t.bin.tmp-XXXXXX". */
        assert_int_equal(strncmp(e->d_name, ".t.bin.tmp-", 11), 0);
        n++;
        if (remove) {
            char p[384];
            snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
            unlink(p);
        }
    }
    closedir(d);
    return n;
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/gptd_atomic_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(target, sizeof(target), "%s/t.bin", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    leftovers(1);
    unlink(target);
    rmdir(dir);
    return 0;
}

/* One dry run: the number of steps of a replace, rename_step set. */
static int count_steps(void)
{
    struct gpt_atomic_file f;
    struct gpt_err err;
    put_old(1);
    step_now = kill_at = fail_at = rename_step = 0;
    armed = 1;
    int rc = write_new(&f, &err);
    armed = 0;
    assert_int_equal(rc, 0);
    assert_int_equal(target_state(), 'N');
    assert_int_equal(leftovers(0), 0);
    /* create, chmod, 3 writes, fsync, close, rename, folder open, fsync, close */
    assert_int_equal(step_now, 11);
    assert_int_equal(rename_step, 8);
    return step_now;
}

/* ---- tests -------------------------------------------------------------- */

static void test_atomic_killed_at_every_step(void **state)
{
    (void)state;
    int steps = count_steps();
    for (int with_old = 0; with_old < 2; with_old++) {
        for (int k = 1; k <= steps + 1; k++) {
            put_old(with_old);
            pid_t pid = fork();
            assert_true(pid >= 0);
            if (pid == 0) {
                struct gpt_atomic_file f;
                step_now = fail_at = 0;
                kill_at = k;
                armed = 1;
                _exit(write_new(&f, NULL) == 0 ? 0 : 1);
            }
            int status;
            assert_int_equal(waitpid(pid, &status, 0), pid);
            if (k <= steps)
                assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
            else
                assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            char got = target_state();
            char want = k <= rename_step ? (with_old ? 'O' : '-') : 'N';
            if (got != want)
                fail_msg("killed before step %d of %d (old file: %d): target is '%c', want '%c'", k,
                         steps, with_old, got, want);
            /* Killed before the create or after the rename: nothing beside it. */
            if (k == 1 || k > rename_step)
                assert_int_equal(leftovers(0), 0);
            leftovers(1);
        }
    }
}

static void test_atomic_fails_at_every_step(void **state)
{
    (void)state;
    int steps = count_steps();
    for (int k = 1; k <= steps; k++) {
        struct gpt_atomic_file f;
        struct gpt_err err = {0};
        put_old(1);
        int fds = open_fds();
        step_now = kill_at = 0;
        fail_at = k;
        armed = 1;
        int rc = write_new(&f, &err);
        armed = 0;
        assert_int_equal(open_fds(), fds);
        assert_int_equal(leftovers(0), 0);
        if (k == steps) {
            /* Closing the folder's descriptor cannot lose the rename. */
            assert_int_equal(rc, 0);
            assert_int_equal(target_state(), 'N');
        } else if (k > rename_step) {
            /* The fsync of the folder: in place, but not promised durable. */
            assert_int_equal(rc, -EIO);
            assert_true(f.renamed);
            assert_int_equal(target_state(), 'N');
            assert_non_null(strstr(err.msg, "fsync of the folder"));
        } else {
            assert_int_equal(rc, -EIO);
            assert_int_equal(err.code, -EIO);
            assert_false(f.renamed);
            assert_int_equal(target_state(), 'O');
        }
        /* abort after commit, or twice, is a no-op */
        gpt_atomic_file_abort(&f);
        gpt_atomic_file_abort(&f);
    }
}

static void test_atomic_names_and_mode(void **state)
{
    (void)state;
    struct gpt_atomic_file f;
    struct gpt_err err;
    mode_t old_mask = umask(077);
    /* The mode is the caller's, not narrowed by the umask. */
    assert_int_equal(gpt_atomic_file_open(&f, target, NULL, 0644, &err), 0);
    char want[160];
    snprintf(want, sizeof(want), "%s/.t.bin.tmp-", dir);
    assert_int_equal(strncmp(f.tmp, want, strlen(want)), 0);
    assert_int_equal(gpt_atomic_file_commit(&f, &err), 0);
    struct stat st;
    assert_int_equal(stat(target, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    umask(old_mask);
    /* A caller's prefix, in the target's folder. */
    assert_int_equal(gpt_atomic_file_open(&f, target, "keep.", 0600, &err), 0);
    snprintf(want, sizeof(want), "%s/keep.", dir);
    assert_int_equal(strncmp(f.tmp, want, strlen(want)), 0);
    assert_int_equal(strlen(f.tmp), strlen(want) + 6);
    gpt_atomic_file_abort(&f);
    assert_int_equal(access(want, F_OK), -1);
    /* Refused: a prefix that names a folder, a missing folder. */
    assert_int_equal(gpt_atomic_file_open(&f, target, "a/b", 0600, &err), -EINVAL);
    gpt_atomic_file_abort(&f);
    char missing[160];
    snprintf(missing, sizeof(missing), "%s/no/such", dir);
    assert_int_equal(gpt_atomic_file_open(&f, missing, NULL, 0600, &err), -ENOENT);
    assert_non_null(strstr(err.msg, missing));
    gpt_atomic_file_abort(&f);
    /* A zeroed struct aborts to nothing. */
    struct gpt_atomic_file z = {.fd = -1};
    gpt_atomic_file_abort(&z);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_atomic_killed_at_every_step, setup, teardown),
        cmocka_unit_test_setup_teardown(test_atomic_fails_at_every_step, setup, teardown),
        cmocka_unit_test_setup_teardown(test_atomic_names_and_mode, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
