/*
 * itest_client: a raw control-socket client for the daemon integration
 * tests, able to misbehave on purpose, plus a tiny SQLite query tool (the
 * sqlite3 shell is not a build dependency).
 *
 *   itest_client send SOCKET          stdin -> socket (as is), then print
 *                                     every reply line until EOF/timeout
 *   itest_client longline SOCKET N    N bytes without a newline, then read
 *   itest_client half SOCKET          half a request, then disconnect
 *   itest_client stall SOCKET JOB S   follow JOB's logs: read the first
 *                                     record (the replayed "queued" event),
 *                                     say "following" on stderr, then read
 *                                     nothing for S seconds and count what
 *                                     arrives
 *   itest_client sql DBFILE QUERY     print rows, columns joined by '|'
 *
 * Single-threaded; every wait has a deadline.
 */
#include <errno.h>
#include <poll.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int itest_connect(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        fprintf(stderr, "itest_client: connect %s: %s\n", path, strerror(errno));
        exit(3);
    }
    return fd;
}

static void itest_write_all(int fd, const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, buf, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return; /* the daemon may close on us: that is what some tests check */
        buf += k;
        n -= (size_t)k;
    }
}

/* Copies replies to stdout until EOF or `timeout_ms` of silence. Returns
 * the bytes read. */
static size_t itest_drain(int fd, int timeout_ms)
{
    char buf[65536];
    size_t total = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, timeout_ms);
        if (r <= 0)
            return total;
        ssize_t k = recv(fd, buf, sizeof(buf), 0);
        if (k <= 0)
            return total;
        fwrite(buf, 1, (size_t)k, stdout);
        total += (size_t)k;
    }
}

static int itest_sql(const char *file, const char *query)
{
    sqlite3 *db;
    sqlite3_stmt *s;
    if (sqlite3_open_v2(file, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, query, -1, &s, NULL) != SQLITE_OK) {
        fprintf(stderr, "itest_client: sql: %s\n", sqlite3_errmsg(db));
        return 1;
    }
    while (sqlite3_step(s) == SQLITE_ROW) {
        for (int i = 0; i < sqlite3_column_count(s); i++) {
            const unsigned char *t = sqlite3_column_text(s, i);
            printf("%s%s", i ? "|" : "", t ? (const char *)t : "");
        }
        printf("\n");
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "sql") == 0)
        return itest_sql(argv[2], argv[3]);
    if (argc < 3) {
        fprintf(stderr, "usage: see the comment at the top of itest_client.c\n");
        return 2;
    }
    const char *mode = argv[1];
    int fd = itest_connect(argv[2]);
    if (strcmp(mode, "send") == 0) {
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof(buf), stdin)) > 0)
            itest_write_all(fd, buf, n);
        shutdown(fd, SHUT_WR);
        itest_drain(fd, 10000);
    } else if (strcmp(mode, "longline") == 0 && argc >= 4) {
        size_t n = strtoull(argv[3], NULL, 10);
        char *buf = malloc(n);
        if (!buf)
            return 1;
        memset(buf, 'x', n);
        buf[0] = '{';
        itest_write_all(fd, buf, n);
        free(buf);
        itest_drain(fd, 10000);
    } else if (strcmp(mode, "half") == 0) {
        itest_write_all(fd, "{\"id\":1,\"op\":\"li", 16);
    } else if (strcmp(mode, "stall") == 0 && argc >= 5) {
        /* A small receive buffer so the daemon's bound, not the kernel's
         * buffers, decides. */
        int small = 4096;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
        char req[128];
        int n = snprintf(req, sizeof(req),
                         "{\"id\":1,\"op\":\"logs\",\"job\":%s,\"follow\":true}\n", argv[3]);
        itest_write_all(fd, req, (size_t)n);
        /* The first line proves the daemon read the request: a test waits
         * for "following" instead of sleeping. */
        char ch = 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        while (ch != '\n' && poll(&p, 1, 60000) == 1 && recv(fd, &ch, 1, 0) == 1)
            fputc(ch, stdout);
        fflush(stdout);
        if (ch != '\n') {
            fprintf(stderr, "itest_client: no record within 60 s\n");
            return 1;
        }
        fprintf(stderr, "itest_client: following\n");
        sleep((unsigned)atoi(argv[4]));
        size_t got = itest_drain(fd, 5000);
        fprintf(stderr, "itest_client: stalled follower read %zu bytes after the stall\n", got);
    } else {
        fprintf(stderr, "itest_client: bad arguments\n");
        return 2;
    }
    close(fd);
    return 0;
}
