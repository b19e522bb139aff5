/*
 * pread_pause: an LD_PRELOAD library for tests that must change a file at
 * a known point of gptd's reading it. The first pread of the file that
 * GPTD_TEST_PAUSE_FILE names at an offset of GPTD_TEST_PAUSE_AT bytes or
 * more creates GPTD_TEST_PAUSE_DIR/paused and holds that thread until
 * GPTD_TEST_PAUSE_DIR/go exists (at most 120 s), then reads on. The test
 * waits for "paused", changes the file, and creates "go": the read after
 * the change is the one gptd makes next, whatever the machine's load.
 * Every other read, and every read after the first pause, goes straight
 * to the C library.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define PAUSE_LIMIT_MS 120000

ssize_t pread(int fd, void *buf, size_t n, off_t at);
ssize_t pread64(int fd, void *buf, size_t n, off_t at);

static atomic_bool paused_once;

/* Whether fd is the named file. */
static bool pause_is_file(int fd, const char *want)
{
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, path, sizeof(path) - 1);
    if (k <= 0)
        return false;
    path[k] = '\0';
    return strcmp(path, want) == 0;
}

static void pause_here(const char *dir)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/paused", dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0)
        close(fd);
    snprintf(p, sizeof(p), "%s/go", dir);
    struct timespec tick = {0, 10 * 1000 * 1000};
    for (int ms = 0; ms < PAUSE_LIMIT_MS && access(p, F_OK) != 0; ms += 10)
        nanosleep(&tick, NULL);
}

typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);

static ssize_t pause_pread(int fd, void *buf, size_t n, off_t at, pread_fn real)
{
    const char *file = getenv("GPTD_TEST_PAUSE_FILE");
    const char *dir = getenv("GPTD_TEST_PAUSE_DIR");
    const char *from = getenv("GPTD_TEST_PAUSE_AT");
    if (file && dir && from && !atomic_load(&paused_once) && at >= (off_t)atoll(from) &&
        pause_is_file(fd, file) && !atomic_exchange(&paused_once, true))
        pause_here(dir);
    return real(fd, buf, n, at);
}

/* The C library's functions, looked up once before any thread reads. */
static pread_fn real_pread, real_pread64;

__attribute__((constructor)) static void pause_init(void)
{
    real_pread = (pread_fn)dlsym(RTLD_NEXT, "pread");
    real_pread64 = (pread_fn)dlsym(RTLD_NEXT, "pread64");
}

ssize_t pread(int fd, void *buf, size_t n, off_t at)
{
    return pause_pread(fd, buf, n, at, real_pread);
}

ssize_t pread64(int fd, void *buf, size_t n, off_t at)
{
    return pause_pread(fd, buf, n, at, real_pread64);
}
