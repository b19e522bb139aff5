/*
 * rename_kill: an LD_PRELOAD library for tests that must kill a process
 * at an exact point of its work: right after it has renamed a file into
 * place. Once rename(2) succeeds onto a path that ends with the text
 * GPTD_TEST_KILL_AFTER_RENAME holds, the process sends itself SIGKILL,
 * as kill -9 from outside would, but before anything else it does after
 * that rename (the records a gptd sends once a snapshot is in place).
 * GPTD_TEST_KILL_BEFORE_RENAME does the same just before such a rename:
 * the finished temporary is left where a kill -9 at that moment leaves it
 * (an export's, tests/integration/export_private.sh).
 * Every other rename goes straight to the C library.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int rename(const char *from, const char *to);

typedef int (*rename_fn)(const char *, const char *);
static rename_fn real_rename;

__attribute__((constructor)) static void kill_init(void)
{
    real_rename = (rename_fn)dlsym(RTLD_NEXT, "rename");
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return k > 0 && n >= k && strcmp(s + n - k, tail) == 0;
}

int rename(const char *from, const char *to)
{
    const char *before = getenv("GPTD_TEST_KILL_BEFORE_RENAME");
    if (before && ends_with(to, before))
        kill(getpid(), SIGKILL);
    int rc = real_rename(from, to);
    const char *tail = getenv("GPTD_TEST_KILL_AFTER_RENAME");
    if (rc == 0 && tail && ends_with(to, tail))
        kill(getpid(), SIGKILL);
    return rc;
}
