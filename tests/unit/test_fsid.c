/*
 * test_fsid: a thread's file-system identity (daemon/fsid) and the
 * time-of-use path checks (daemon/paths). The identity switch changes the
 * calling thread only: another thread keeps gptd's rights meanwhile, and
 * leaving restores the uid, gid and groups. The switch needs root (the
 * tests that switch are skipped otherwise); the path checks do not.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fsid.h"
#include "paths.h"
#include "unit/tmp_dir.h"

#define NOBODY 65534

static int setup(void **state)
{
    (void)state;
    if (tmp_dir_make("fsid") < 0 || chmod(tmpdir, 0755) < 0)
        return -1;
    return 0;
}

static void write_file(const char *name, mode_t mode)
{
    char path[512];
    tmp_dir_path(path, sizeof(path), name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "data\n", 5), 5);
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

static int open_in(const char *name)
{
    char path[512];
    tmp_dir_path(path, sizeof(path), name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0)
        close(fd);
    return fd >= 0 ? 0 : -errno;
}

/* A user as the kernel sees it; nobody need not be in the user database. */
static struct fsid_user nobody(void)
{
    struct fsid_user u = {.uid = NOBODY, .gid = NOBODY, .n_groups = 1, .groups = {NOBODY}};
    return u;
}

static void test_own_uid_needs_no_switch(void **state)
{
    (void)state;
    struct fsid_user u;
    struct fsid_saved saved;
    struct gpt_err err = {0};
    assert_true(fsid_can_act_as(geteuid()));
    assert_int_equal(fsid_user_lookup(geteuid(), &u, &err), 0);
    assert_int_equal(fsid_enter(&u, &saved, &err), 0);
    assert_false(saved.switched);
    fsid_leave(&saved);
}

/* A thread started before the switch (a thread inherits its creator's
 * credentials, so one started after would be switched too), which opens
 * `name` once told to. */
struct probe {
    const char *name;
    sem_t go, done;
    int rc;
};

static void *probe_main(void *arg)
{
    struct probe *p = arg;
    sem_wait(&p->go);
    p->rc = open_in(p->name);
    sem_post(&p->done);
    return NULL;
}

static void test_switch_is_per_thread(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    write_file("root-only", 0600);
    gid_t before[FSID_GROUPS_MAX];
    int n_before = getgroups(FSID_GROUPS_MAX, before);
    struct probe p = {.name = "root-only", .rc = 1};
    sem_init(&p.go, 0, 0);
    sem_init(&p.done, 0, 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, probe_main, &p), 0);
    struct fsid_user u = nobody();
    struct fsid_saved saved;
    struct gpt_err err = {0};
    int rc = fsid_enter(&u, &saved, &err);
    uid_t fsuid = (uid_t)setfsuid((uid_t)-1);
    int own = open_in("root-only");
    /* Another thread of the process keeps root's rights meanwhile. */
    sem_post(&p.go);
    sem_wait(&p.done);
    fsid_leave(&saved);
    pthread_join(t, NULL);
    assert_int_equal(rc, 0);
    assert_true(saved.switched);
    assert_int_equal(fsuid, NOBODY);
    assert_int_equal(own, -EACCES);
    assert_int_equal(p.rc, 0);
    assert_int_equal(setfsuid((uid_t)-1), 0);
    assert_int_equal(setfsgid((gid_t)-1), 0);
    gid_t after[FSID_GROUPS_MAX];
    assert_int_equal(getgroups(FSID_GROUPS_MAX, after), n_before);
    assert_memory_equal(after, before, (size_t)n_before * sizeof(gid_t));
    assert_int_equal(open_in("root-only"), 0);
}

/* Files and folders made while switched belong to the user. */
static void test_created_as_user(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    char dir[512], real[4096];
    tmp_dir_path(dir, sizeof(dir), "open");
    assert_int_equal(mkdir(dir, 0777), 0);
    assert_int_equal(chmod(dir, 0777), 0);
    tmp_dir_path(dir, sizeof(dir), "open/nobody/snaps");
    struct fsid_user u = nobody();
    struct fsid_saved saved;
    struct gpt_err err = {0};
    assert_int_equal(fsid_enter(&u, &saved, &err), 0);
    int rc = paths_snapshot_dir_open(dir, tmpdir, "/nonexistent", real, sizeof(real), &err);
    fsid_leave(&saved);
    assert_int_equal(rc, 0);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_uid, NOBODY);
    assert_int_equal(st.st_mode & 0777, 0700);
    /* A folder the user cannot create is refused, naming the key. */
    tmp_dir_path(dir, sizeof(dir), "closed/snaps");
    assert_int_equal(fsid_enter(&u, &saved, &err), 0);
    rc = paths_snapshot_dir_open(dir, tmpdir, "/nonexistent", real, sizeof(real), &err);
    fsid_leave(&saved);
    assert_int_equal(rc, -EACCES);
    assert_string_equal(err.path, "snapshot.dir");
    assert_int_equal(access(dir, F_OK), -1);
}

/* Without CAP_SETUID/CAP_SETGID (a child that dropped root, or a test run
 * by a user) acting as another uid is refused, saying why. */
static void test_unprivileged_refuses_other_uid(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (geteuid() == 0 && (setgroups(0, NULL) < 0 || setresgid(NOBODY, NOBODY, NOBODY) < 0 ||
                               setresuid(NOBODY, NOBODY, NOBODY) < 0))
            _exit(2);
        uid_t other = geteuid() == 0 ? 1 : 0;
        struct fsid_user u = {.uid = other, .gid = other};
        struct fsid_saved saved;
        struct gpt_err err = {0};
        if (fsid_can_act_as(other))
            _exit(3);
        if (fsid_enter(&u, &saved, &err) != -EPERM || !strstr(err.msg, "CAP_SETUID"))
            _exit(4);
        if ((uid_t)setfsuid((uid_t)-1) != geteuid())
            _exit(5);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_submit_check_expands_no_glob(void **state)
{
    (void)state;
    char roots[512], out[512];
    tmp_dir_path(roots, sizeof(roots), "data");
    assert_int_equal(mkdir(roots, 0755), 0);
    struct gpt_job job;
    memset(&job, 0, sizeof(job));
    struct gpt_err err = {0};
    /* Matches nothing yet: only the folder before the wildcard counts. */
    snprintf(job.data.path, sizeof(job.data.path), "%s/deep/*/*.bin", roots);
    assert_int_equal(paths_check_job(&job, roots, "/nonexistent", "/nonexistent", &err), 0);
    snprintf(job.data.path, sizeof(job.data.path), "%s/*/../../etc/*.bin", roots);
    assert_int_equal(paths_check_job(&job, roots, "/nonexistent", "/nonexistent", &err), -EACCES);
    assert_string_equal(err.path, "data.path");
    assert_non_null(strstr(err.msg, ".."));
    tmp_dir_path(out, sizeof(out), "elsewhere/*.bin");
    snprintf(job.data.path, sizeof(job.data.path), "%s", out);
    assert_int_equal(paths_check_job(&job, roots, "/nonexistent", "/nonexistent", &err), -EACCES);
    assert_non_null(strstr(err.msg, "outside the data roots"));
}

static void test_fd_check_sees_the_opened_file(void **state)
{
    (void)state;
    char roots[512], in[512], link[512], outside[512];
    tmp_dir_path(roots, sizeof(roots), "fdroot");
    assert_int_equal(mkdir(roots, 0755), 0);
    write_file("fdroot/in.txt", 0644);
    write_file("out.txt", 0644);
    tmp_dir_path(in, sizeof(in), "fdroot/in.txt");
    tmp_dir_path(outside, sizeof(outside), "out.txt");
    tmp_dir_path(link, sizeof(link), "fdroot/link.txt");
    assert_int_equal(symlink(outside, link), 0);
    struct gpt_err err = {0};
    int fd = open(in, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(paths_check_fd(fd, in, "data.path", roots, &err), 0);
    close(fd);
    /* The name is under the root, the file it leads to is not. */
    fd = open(link, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(paths_check_fd(fd, link, "data.path", roots, &err), -EACCES);
    assert_string_equal(err.path, "data.path");
    assert_non_null(strstr(err.msg, outside));
    close(fd);
    /* A snapshot folder swapped for a link out of the roots. */
    char snaps[512], dir[512], real[4096];
    tmp_dir_path(snaps, sizeof(snaps), "snaps");
    tmp_dir_path(dir, sizeof(dir), "snaps/run");
    assert_int_equal(mkdir(snaps, 0755), 0);
    assert_int_equal(symlink(tmpdir, dir), 0);
    assert_int_equal(paths_snapshot_dir_open(dir, snaps, "/nonexistent", real, sizeof(real), &err),
                     -EACCES);
    assert_non_null(strstr(err.msg, "outside the state directory"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_own_uid_needs_no_switch),
        cmocka_unit_test(test_switch_is_per_thread),
        cmocka_unit_test(test_created_as_user),
        cmocka_unit_test(test_unprivileged_refuses_other_uid),
        cmocka_unit_test(test_submit_check_expands_no_glob),
        cmocka_unit_test(test_fd_check_sees_the_opened_file),
    };
    return cmocka_run_group_tests(tests, setup, tmp_dir_teardown);
}
