/*
 * notify_listen: stands in for systemd's end of the sd_notify(3) protocol
 * in tests. Binds an AF_UNIX datagram socket at SOCKET (the NOTIFY_SOCKET a
 * test gives gptd) and prints every message it receives, one assignment a
 * line, each message followed by a "--" line, flushing after each.
 *
 *   notify_listen SOCKET [CONTROL_SOCKET]
 *
 * With CONTROL_SOCKET, each message holding READY=1 is followed by
 * "CONNECT=ok" when a connect(2) to that stream socket succeeds at the
 * moment READY=1 is read, else "CONNECT=<error>": the check that READY=1
 * comes only after gptd accepts connections, free of timing races.
 *
 * Runs until SIGTERM or SIGINT; removes SOCKET on exit. Single-threaded.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static volatile sig_atomic_t listen_stop;

static void listen_on_signal(int sig)
{
    (void)sig;
    listen_stop = 1;
}

static int listen_fill(struct sockaddr_un *sa, const char *path)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa->sun_path)) {
        fprintf(stderr, "notify_listen: path too long: %s\n", path);
        return -1;
    }
    memcpy(sa->sun_path, path, strlen(path) + 1);
    return 0;
}

/* Tries one connection to the control socket; returns "ok" or the error. */
static const char *listen_try_connect(const char *path)
{
    struct sockaddr_un sa;
    if (listen_fill(&sa, path) < 0)
        return "path_too_long";
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return strerror(errno);
    const char *res = "ok";
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        res = strerror(errno);
    close(fd);
    return res;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: notify_listen SOCKET [CONTROL_SOCKET]\n");
        return 2;
    }
    const char *path = argv[1], *ctl = argc == 3 ? argv[2] : NULL;
    struct sockaddr_un sa;
    if (listen_fill(&sa, path) < 0)
        return 2;

    /* No SA_RESTART: a signal must interrupt the blocking recv. */
    struct sigaction act = {.sa_handler = listen_on_signal};
    sigaction(SIGTERM, &act, NULL);
    sigaction(SIGINT, &act, NULL);

    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        fprintf(stderr, "notify_listen: bind %s: %s\n", path, strerror(errno));
        return 1;
    }
    int status = 0;
    char buf[4096];
    while (!listen_stop) {
        ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "notify_listen: recv: %s\n", strerror(errno));
            status = 1;
            break;
        }
        buf[n] = '\0';
        /* The connect check first, so it sees gptd's state when READY=1 arrived. */
        const char *conn = NULL;
        if (ctl && (strncmp(buf, "READY=1", 7) == 0 || strstr(buf, "\nREADY=1")))
            conn = listen_try_connect(ctl);
        fputs(buf, stdout);
        if (n == 0 || buf[n - 1] != '\n')
            fputc('\n', stdout);
        if (conn)
            printf("CONNECT=%s\n", conn);
        fputs("--\n", stdout);
        fflush(stdout);
    }
    close(fd);
    unlink(path);
    return status;
}
