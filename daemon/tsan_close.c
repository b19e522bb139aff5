/*
 * tsan_close: ThreadSanitizer builds only (daemon/CMakeLists.txt adds this
 * file to gptd when GPTD_SANITIZE has "thread"). libuv closes its
 * descriptors with syscall(SYS_close) (uv__close_nocancel), which TSan does
 * not intercept, so TSan still holds the loop's last read or accept4 on a
 * number the kernel has freed. When a worker then gets that number from a
 * call TSan does not see either (mkostemp, opendir and shm_open open inside
 * glibc) and closes it, TSan reports a race on the descriptor that is not
 * there. This definition of syscall() takes the place of libc's for the
 * libraries gptd loads: SYS_close goes through close(), which TSan sees
 * (it forgets the number's history there), and everything else to libc's
 * syscall(). A real use of a closed and reused number is then still
 * reported. Any thread, as libc's.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

long syscall(long number, ...)
{
    typedef long (*syscall_fn)(long, ...);
    static _Atomic(syscall_fn) libc_syscall; /* found once; any thread may race to find it */
    long a[6];
    va_list ap;
    /* Six argument registers, as libc's syscall() passes them on. */
    va_start(ap, number);
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (number == SYS_close)
        return close((int)a[0]);
    syscall_fn fn = atomic_load(&libc_syscall);
    if (!fn) {
        fn = (syscall_fn)dlsym(RTLD_NEXT, "syscall");
        atomic_store(&libc_syscall, fn);
    }
    return fn(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
