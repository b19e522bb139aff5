/*
 * notify: systemd service notifications (see notify.h). One function sends
 * one message; the libsystemd and the self-contained paths differ only in
 * notify_send() and notify_watchdog_interval_ms().
 */
#include "notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "monotime.h"

#ifdef GPTD_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#else
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#endif

#ifdef GPTD_HAVE_SYSTEMD

/* Sends one message; 0 when sent or when NOTIFY_SOCKET is unset. */
static int notify_send(const char *msg)
{
    int rc = sd_notify(0, msg);
    return rc < 0 ? rc : 0;
}

uint64_t notify_watchdog_interval_ms(void)
{
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
        return 0;
    return usec / 2000 ? usec / 2000 : 1;
}

#else /* !GPTD_HAVE_SYSTEMD: the protocol itself, as sd_notify(3) describes it */

static int notify_send(const char *msg)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !path[0])
        return 0;
    /* A filesystem path, or '@' for the abstract namespace. Other kinds
     * (vsock:) are for virtual machines and not spoken here. */
    if (path[0] != '/' && path[0] != '@')
        return -EAFNOSUPPORT;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@')
        sa.sun_path[0] = '\0';
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);

    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int rc = 0;
    if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa, len) < 0)
        rc = -errno;
    close(fd);
    return rc;
}

uint64_t notify_watchdog_interval_ms(void)
{
    const char *us = getenv("WATCHDOG_USEC");
    const char *pid = getenv("WATCHDOG_PID");
    if (!us || !us[0])
        return 0;
    if (pid && pid[0] && strtol(pid, NULL, 10) != (long)getpid())
        return 0;
    char *end;
    errno = 0;
    unsigned long long usec = strtoull(us, &end, 10);
    if (errno || *end || usec == 0)
        return 0;
    return usec / 2000 ? usec / 2000 : 1;
}

#endif

int notify_ready(void)
{
    return notify_send("READY=1");
}

int notify_stopping(void)
{
    return notify_send("STOPPING=1");
}

int notify_watchdog(void)
{
    return notify_send("WATCHDOG=1");
}

int notify_reloading(void)
{
    char msg[64];
    snprintf(msg, sizeof(msg), "RELOADING=1\nMONOTONIC_USEC=%lld", (long long)monotime_us());
    return notify_send(msg);
}

int notify_status(const char *fmt, ...)
{
    char msg[sizeof("STATUS=") + NOTIFY_STATUS_MAX];
    size_t k = sizeof("STATUS=") - 1;
    memcpy(msg, "STATUS=", k);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg + k, sizeof(msg) - k, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    /* One line: a newline would start a new (and unknown) assignment. */
    for (char *p = msg + k; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return notify_send(msg);
}
