/*
 * itest_conns: control-socket clients that hold gptd's connections without
 * asking for anything, for the limits tests (issue 14).
 *
 *   itest_conns hold SOCKET N SECONDS
 *       opens N connections and sends nothing. Once refusals stop coming
 *       (1 s without one) prints "open=A refused=R" (refused: gptd
 *       answered or closed at once) and
 *       the first refusal line; then holds the rest for SECONDS and prints
 *       "closed=C" (closed by gptd meanwhile) and the first line it sent.
 *   itest_conns slow SOCKET SECONDS
 *       writes a request one byte every 100 ms without ever ending the
 *       line; prints "closed after S s" and exits 0 when gptd closes the
 *       connection, exits 1 when SECONDS pass first.
 *
 * Single-threaded; every wait has a deadline.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define CONNS_MAX 4096

static int conns_connect(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        fprintf(stderr, "itest_conns: connect %s: %s\n", path, strerror(errno));
        return -1;
    }
    return fd;
}

static double conns_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* 1 when gptd sent something or closed `fd` (copies the first line into
 * msg when it is still empty), 0 when the connection is quiet. */
static int conns_poked(int fd, char *msg, size_t cap)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 0) <= 0)
        return 0;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    if (n > 0 && msg[0] == '\0') {
        buf[n] = '\0';
        buf[strcspn(buf, "\n")] = '\0';
        snprintf(msg, cap, "%s", buf);
    }
    return 1;
}

static int conns_hold(const char *path, int n, double seconds)
{
    static int fds[CONNS_MAX];
    static char open_[CONNS_MAX];
    char msg[4096] = "";
    if (n < 1 || n > CONNS_MAX)
        return 2;
    for (int i = 0; i < n; i++)
        if ((fds[i] = conns_connect(path)) < 0)
            return 3;
    /* gptd accepts (and refuses) at its own pace: count until the number
     * of refusals has not changed for a second (at most 10 s). */
    int refused = 0, last = -1;
    memset(open_, 1, (size_t)n);
    double t0 = conns_now(), stable_since = t0;
    while (conns_now() - stable_since < 1.0 && conns_now() - t0 < 10.0) {
        usleep(100 * 1000);
        for (int i = 0; i < n; i++)
            if (open_[i] && conns_poked(fds[i], msg, sizeof(msg))) {
                open_[i] = 0;
                refused++;
            }
        if (refused != last) {
            last = refused;
            stable_since = conns_now();
        }
    }
    printf("open=%d refused=%d\n%s\n", n - refused, refused, msg);
    fflush(stdout);
    msg[0] = '\0';
    double end = conns_now() + seconds;
    while (conns_now() < end)
        usleep(50 * 1000);
    int closed = 0;
    for (int i = 0; i < n; i++)
        if (open_[i])
            closed += conns_poked(fds[i], msg, sizeof(msg));
    printf("closed=%d\n%s\n", closed, msg);
    return 0;
}

static int conns_slow(const char *path, double seconds)
{
    int fd = conns_connect(path);
    if (fd < 0)
        return 3;
    const char *req = "{\"id\": 1, \"op\": \"status\", \"args\": {\"padding\": \"";
    double t0 = conns_now();
    for (size_t i = 0; conns_now() - t0 < seconds; i++) {
        char c = i < strlen(req) ? req[i] : 'x';
        char msg[256] = "";
        if (send(fd, &c, 1, MSG_NOSIGNAL) != 1 || conns_poked(fd, msg, sizeof(msg))) {
            printf("closed after %.1f s\n%s\n", conns_now() - t0, msg);
            return 0;
        }
        usleep(100 * 1000);
    }
    printf("still open after %.1f s\n", seconds);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "hold") == 0)
        return conns_hold(argv[2], atoi(argv[3]), atof(argv[4]));
    if (argc == 4 && strcmp(argv[1], "slow") == 0)
        return conns_slow(argv[2], atof(argv[3]));
    fprintf(stderr, "usage: itest_conns hold SOCKET N SECONDS | slow SOCKET SECONDS\n");
    return 2;
}
