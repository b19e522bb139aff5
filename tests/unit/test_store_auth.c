/*
 * test_store_auth: attacks on the store's authentication, against a real
 * store_server over loopback (issue 14): a client forging the handshake with
 * an empty key, short secrets and secret files, a man in the middle that
 * relays a member's genuine handshake and then injects its own frames (both
 * ways), and replays of a captured frame in the same and in a new session.
 * The server runs on its own loop thread; the relay is a thread with two
 * sockets and poll(); every wait is bounded (deadlines, alarm()).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <uv.h>

#include "secret.h"
#include "store.h"
#include "store_auth.h"
#include "store_client.h"
#include "store_server.h"
#include "store_harness.h"

#define TIMEOUT_MS 10000
#define SECRET     STORE_HARNESS_SECRET

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct store_server_stats stats(struct harness *h)
{
    struct store_server_stats st;

    store_server_stats(h->srv, &st);
    return st;
}

/* Polls until the server counted `want` dropped frames (bounded). */
static void await_tag_failures(struct harness *h, uint64_t want)
{
    int64_t deadline = now_ms() + TIMEOUT_MS;

    while (stats(h).tag_failures < want && now_ms() < deadline)
        usleep(2000);
    assert_int_equal(stats(h).tag_failures, want);
}

static struct store_client *connect_port(int port)
{
    struct store_client_opts o = {.host = "127.0.0.1",
                                  .port = port,
                                  .secret = SECRET,
                                  .secret_len = strlen(SECRET),
                                  .timeout_ms = TIMEOUT_MS};
    struct store_client *c = NULL;
    struct gpt_err err;

    if (store_client_connect(&o, &c, &err) < 0)
        fail_msg("connect: %s", err.msg);
    return c;
}

/* The value at key as a string ("" with -ENOENT when absent), through a
 * fresh genuine client straight to the server. */
static int peek(struct harness *h, const char *key, char *buf, size_t cap)
{
    struct store_client *c = connect_port(h->port);
    void *v = NULL;
    size_t len = 0;
    int rc = store_client_get(c, key, &v, &len, NULL);

    snprintf(buf, cap, "%.*s", rc == 0 ? (int)len : 0, rc == 0 ? (const char *)v : "");
    free(v);
    store_client_free(c);
    return rc;
}

/* ---- raw sockets ---- */

static int raw_connect(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
    assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Reads frames into p until one is whole (1), the peer closed (0) or the
 * deadline passed (fails the test). */
static int raw_next(int fd, struct proto_store_parser *p, struct proto_store_msg *m)
{
    int64_t deadline = now_ms() + TIMEOUT_MS;
    uint8_t buf[4096];

    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int rc = proto_store_parser_next(p, m, NULL);
        ssize_t n;

        if (rc != 0)
            return rc;
        assert_true(now_ms() < deadline);
        if (poll(&pf, 1, 50) <= 0)
            continue;
        n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0)
            return 0;
        assert_int_equal(proto_store_parser_feed(p, buf, (size_t)n, NULL), 0);
    }
}

/* ---- the forged empty-key client ---- */

/* HMAC-SHA256 with the empty key, computed here as an attacker would: the
 * old coordinator without a secret accepted exactly this. */
static void empty_key_proof(const uint8_t *nc, const uint8_t *ns, uint8_t *mac)
{
    uint8_t msg[64 + 2 * GPT_STORE_NONCE_BYTES];
    size_t l = strlen(GPT_STORE_LABEL_CLIENT);
    static const uint8_t empty[1];
    unsigned int len = 0;

    memcpy(msg, GPT_STORE_LABEL_CLIENT, l);
    memcpy(msg + l, nc, GPT_STORE_NONCE_BYTES);
    memcpy(msg + l + GPT_STORE_NONCE_BYTES, ns, GPT_STORE_NONCE_BYTES);
    assert_non_null(HMAC(EVP_sha256(), empty, 0, msg, l + 2 * GPT_STORE_NONCE_BYTES, mac, &len));
}

/* One forged session: HELLO, then AUTH built by `forge` (0: empty-key HMAC,
 * 1: all zeros), with a cluster message pipelined behind it both unsealed
 * and sealed as an empty-key peer would seal it. The server must close the
 * connection without ever sending its PROOF. */
static void forge_once(struct harness *h, int forge)
{
    uint8_t nc[GPT_STORE_NONCE_BYTES] = {42}, mac[GPT_STORE_MAC_BYTES] = {0};
    const char *msg = "{\"op\":\"cancel\",\"job\":1,\"uid\":0}";
    struct proto_store_parser p;
    struct proto_store_out o;
    struct proto_store_msg m;
    int fd = raw_connect(h->port);

    proto_store_parser_init(&p, GPT_STORE_FRAME_MAX);
    proto_store_out_init(&o);
    assert_int_equal(proto_store_put_hello(&o, GPT_STORE_PROTO_VERSION, nc, NULL), 0);
    send_all(fd, o.data, o.len);
    o.len = 0;
    assert_int_equal(raw_next(fd, &p, &m), 1);
    assert_int_equal(m.type, PROTO_STORE_CHALLENGE);
    if (forge == 0)
        empty_key_proof(nc, m.nonce, mac);
    assert_int_equal(proto_store_put_auth(&o, mac, NULL), 0);
    assert_int_equal(
        proto_store_put_key_value(&o, PROTO_STORE_APPEND, "cluster/inbox", 13, msg, strlen(msg)),
        0);
    o.tag_bytes = GPT_STORE_TAG_BYTES;
    assert_int_equal(
        proto_store_put_key_value(&o, PROTO_STORE_APPEND, "cluster/inbox", 13, msg, strlen(msg)),
        0);
    send_all(fd, o.data, o.len);
    /* Nothing comes back but the close: no PROOF, no reply. */
    assert_int_equal(raw_next(fd, &p, &m), 0);
    close(fd);
    proto_store_parser_done(&p);
    proto_store_out_done(&o);
}

static void test_forged_empty_key_refused(void **state)
{
    struct store_server_opts so = {0};
    struct store_server *srv = NULL;
    struct harness *h;
    struct gpt_err err;
    char v[64];
    uv_loop_t loop;

    (void)state;
    /* No server runs without a secret, or with a short one. */
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(store_server_new(&loop, &so, &srv, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "at least 16 bytes"));
    assert_int_equal(store_server_new(&loop, NULL, &srv, &err), -EINVAL);
    so.secret = "";
    assert_int_equal(store_server_new(&loop, &so, &srv, &err), -EINVAL);
    so.secret = "0123456789abcde";
    so.secret_len = 15;
    assert_int_equal(store_server_new(&loop, &so, &srv, &err), -EINVAL);
    assert_null(srv);
    assert_int_equal(uv_loop_close(&loop), 0);

    h = harness_start(NULL);
    forge_once(h, 0);
    forge_once(h, 1);
    assert_int_equal(stats(h).auth_failures, 2);
    assert_int_equal(stats(h).requests, 0);
    assert_int_equal(peek(h, "cluster/inbox", v, sizeof(v)), -ENOENT);
    assert_int_equal(stats(h).keys, 0);
    harness_stop(h);
}

/* ---- short secret files ---- */

static void write_file(const char *path, const char *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, n), (ssize_t)n);
    close(fd);
    assert_int_equal(chmod(path, 0600), 0);
}

static void test_short_secret_file(void **state)
{
    char dir[] = "/tmp/test_store_auth_XXXXXX", path[256], buf[STORE_SECRET_MAX];
    struct gpt_err err;
    size_t len = 0;

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/secret", dir);
    /* One byte (the case the hostile test found accepted), then 15 bytes
     * plus the newline that is not counted. */
    write_file(path, "x", 1);
    assert_int_equal(store_secret_load(path, buf, sizeof(buf), &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "minimum of 16 bytes"));
    write_file(path, "0123456789abcde\n", 16);
    assert_int_equal(store_secret_load(path, buf, sizeof(buf), &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "15 bytes"));
    write_file(path, "", 0);
    assert_int_equal(store_secret_load(path, buf, sizeof(buf), &len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, path));
    write_file(path, "0123456789abcdef\n", 17);
    assert_int_equal(store_secret_load(path, buf, sizeof(buf), &len, &err), 0);
    assert_int_equal(len, 16);
    unlink(path);
    rmdir(dir);
}

/* A generated secret: 64 hex digits, mode 0600, kept on the next call, and
 * of several processes racing to make it, all end up with the same one. */
static void test_generated_secret(void **state)
{
    char dir[] = "/tmp/test_store_auth_XXXXXX", path[256], buf[STORE_SECRET_MAX];
    char first[STORE_SECRET_MAX], got[8][64];
    struct gpt_err err;
    struct stat st;
    size_t len = 0, flen;
    int pfd[2];

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/cluster.secret", dir);
    assert_int_equal(secret_file_ensure(path, &err), 0);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(store_secret_load(path, first, sizeof(first), &flen, &err), 0);
    assert_int_equal(flen, 64);
    assert_int_equal(secret_file_ensure(path, &err), 0);
    assert_int_equal(store_secret_load(path, buf, sizeof(buf), &len, &err), 0);
    assert_memory_equal(buf, first, flen);
    unlink(path);

    assert_int_equal(pipe(pfd), 0);
    for (int i = 0; i < 8; i++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            char mine[STORE_SECRET_MAX];
            size_t n = 0;
            if (secret_file_ensure(path, NULL) < 0 ||
                store_secret_load(path, mine, sizeof(mine), &n, NULL) < 0 || n != 64)
                _exit(1);
            _exit(write(pfd[1], mine, 64) == 64 ? 0 : 1);
        }
    }
    for (int i = 0; i < 8; i++) {
        int status = 0;
        assert_true(wait(&status) > 0);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    for (int i = 0; i < 8; i++)
        assert_int_equal(read(pfd[0], got[i], 64), 64);
    close(pfd[0]);
    close(pfd[1]);
    assert_int_equal(store_secret_load(path, buf, sizeof(buf), &len, &err), 0);
    for (int i = 0; i < 8; i++)
        assert_memory_equal(got[i], buf, 64);
    unlink(path);
    /* No temporary file is left behind. */
    assert_int_equal(rmdir(dir), 0);
}

/* ---- a man in the middle ---- */

/* Relays one connection between a client and the server, records what the
 * client sent, and on request injects bytes of its own either way. */
struct relay {
    int lfd;
    int port;
    int server_port;
    pthread_t thread;
    pthread_mutex_t mu;
    uint8_t c2s[1 << 16]; /* everything the client sent, in order */
    size_t c2s_len;
    uint8_t inject[2][1024]; /* [0]: to the server, [1]: to the client */
    size_t inject_len[2];
    atomic_int handshake_done; /* the server's PROOF went through */
    atomic_int closed;         /* one side closed; both are closed */
};

static void *relay_main(void *arg)
{
    struct relay *r = arg;
    struct proto_store_parser sp; /* the server's handshake frames */
    struct proto_store_msg m;
    uint8_t buf[65536];
    int cfd = accept(r->lfd, NULL, NULL), sfd;

    proto_store_parser_init(&sp, GPT_STORE_HANDSHAKE_FRAME_MAX);
    sfd = raw_connect(r->server_port);
    while (cfd >= 0) {
        struct pollfd pf[2] = {{.fd = cfd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
        ssize_t n;

        if (poll(pf, 2, 10) > 0) {
            if (pf[0].revents) {
                if ((n = recv(cfd, buf, sizeof(buf), 0)) <= 0)
                    break;
                pthread_mutex_lock(&r->mu);
                if (r->c2s_len + (size_t)n <= sizeof(r->c2s)) {
                    memcpy(r->c2s + r->c2s_len, buf, (size_t)n);
                    r->c2s_len += (size_t)n;
                }
                pthread_mutex_unlock(&r->mu);
                if (send(sfd, buf, (size_t)n, MSG_NOSIGNAL) != n)
                    break;
            }
            if (pf[1].revents) {
                if ((n = recv(sfd, buf, sizeof(buf), 0)) <= 0)
                    break;
                if (!atomic_load(&r->handshake_done)) {
                    proto_store_parser_feed(&sp, buf, (size_t)n, NULL);
                    while (proto_store_parser_next(&sp, &m, NULL) == 1)
                        if (m.type == PROTO_STORE_PROOF)
                            atomic_store(&r->handshake_done, 1);
                }
                if (send(cfd, buf, (size_t)n, MSG_NOSIGNAL) != n)
                    break;
            }
        }
        pthread_mutex_lock(&r->mu);
        for (int d = 0; d < 2; d++) {
            if (r->inject_len[d])
                (void)send(d == 0 ? sfd : cfd, r->inject[d], r->inject_len[d], MSG_NOSIGNAL);
            r->inject_len[d] = 0;
        }
        pthread_mutex_unlock(&r->mu);
    }
    if (cfd >= 0)
        close(cfd);
    close(sfd);
    proto_store_parser_done(&sp);
    atomic_store(&r->closed, 1);
    return NULL;
}

static struct relay *relay_start(int server_port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    struct relay *r = calloc(1, sizeof(*r));

    assert_non_null(r);
    r->server_port = server_port;
    pthread_mutex_init(&r->mu, NULL);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(r->lfd >= 0);
    assert_int_equal(bind(r->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(r->lfd, 4), 0);
    assert_int_equal(getsockname(r->lfd, (struct sockaddr *)&sa, &len), 0);
    r->port = ntohs(sa.sin_port);
    assert_int_equal(pthread_create(&r->thread, NULL, relay_main, r), 0);
    return r;
}

/* Hands bytes to the relay and returns once it has sent them. */
static void relay_inject(struct relay *r, int dir, const void *p, size_t n)
{
    int64_t deadline = now_ms() + TIMEOUT_MS;
    size_t left;

    assert_true(n > 0 && n <= sizeof(r->inject[dir]));
    pthread_mutex_lock(&r->mu);
    memcpy(r->inject[dir], p, n);
    r->inject_len[dir] = n;
    pthread_mutex_unlock(&r->mu);
    do {
        usleep(1000);
        pthread_mutex_lock(&r->mu);
        left = r->inject_len[dir];
        pthread_mutex_unlock(&r->mu);
    } while (left && now_ms() < deadline);
    assert_int_equal(left, 0);
}

/* Copies the client's first sealed frame (with its tag) into buf. */
static size_t relay_first_sealed(struct relay *r, uint8_t *buf, size_t cap)
{
    /* HELLO and AUTH, then the sealed frames. */
    const size_t hs = (4 + 1 + 4 + GPT_STORE_NONCE_BYTES) + (4 + 1 + GPT_STORE_MAC_BYTES);
    size_t n;

    pthread_mutex_lock(&r->mu);
    assert_true(r->c2s_len > hs + 4);
    n = 4 +
        (size_t)(r->c2s[hs] | r->c2s[hs + 1] << 8 | r->c2s[hs + 2] << 16 |
                 (uint32_t)r->c2s[hs + 3] << 24) +
        GPT_STORE_TAG_BYTES;
    assert_true(n <= cap && r->c2s_len >= hs + n);
    memcpy(buf, r->c2s + hs, n);
    pthread_mutex_unlock(&r->mu);
    return n;
}

static void relay_stop(struct relay *r)
{
    int64_t deadline = now_ms() + TIMEOUT_MS;

    while (!atomic_load(&r->closed) && now_ms() < deadline)
        usleep(2000);
    assert_true(atomic_load(&r->closed));
    pthread_join(r->thread, NULL);
    close(r->lfd);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* The relay passes a member's genuine handshake (so the member's session is
 * up through it) and then sends its own frame to the server: unsealed, with
 * a zero tag, and with the tag of the member's last genuine frame. Each is
 * dropped, the connection closed, nothing of it runs, and the member's next
 * request fails rather than being answered by someone else. */
static void test_relay_injection(void **state)
{
    struct harness *h = harness_start(NULL);
    struct proto_store_out o;
    struct gpt_err err;
    uint8_t captured[256];
    char v[64];

    (void)state;
    proto_store_out_init(&o);
    for (int variant = 0; variant < 3; variant++) {
        struct relay *r = relay_start(h->port);
        struct store_client *c = connect_port(r->port);
        int64_t n = 0;

        size_t cn;

        assert_true(atomic_load(&r->handshake_done));
        assert_int_equal(store_client_set(c, "genuine", "1", 1, &err), 0);
        cn = relay_first_sealed(r, captured, sizeof(captured));
        o.len = 0;
        o.tag_bytes = variant == 0 ? 0 : GPT_STORE_TAG_BYTES;
        assert_int_equal(proto_store_put_key_value(&o, PROTO_STORE_APPEND, "cluster/inbox", 13,
                                                   "{\"uid\":0}", 9),
                         0);
        if (variant == 2) /* the tag of the member's genuine SET */
            memcpy(o.data + o.len - GPT_STORE_TAG_BYTES, captured + cn - GPT_STORE_TAG_BYTES,
                   GPT_STORE_TAG_BYTES);
        relay_inject(r, 0, o.data, o.len);
        if (variant == 0) {
            /* An unsealed frame's "tag" is whatever follows it: the
             * member's next frame completes it, and it fails then. */
            assert_true(store_client_num_keys(c, &n, &err) < 0);
        }
        await_tag_failures(h, (uint64_t)variant + 1);
        assert_true(store_client_num_keys(c, &n, &err) < 0);
        store_client_free(c);
        relay_stop(r);
    }
    assert_int_equal(peek(h, "cluster/inbox", v, sizeof(v)), -ENOENT);
    assert_int_equal(peek(h, "genuine", v, sizeof(v)), 0);
    assert_string_equal(v, "1");
    proto_store_out_done(&o);
    harness_stop(h);
}

/* The other way: the relay answers the member itself, with a reply of its
 * own (a zero tag, and an unsealed one). The member's client refuses it,
 * and the request fails instead of returning the forged value. */
static void test_relay_forged_reply(void **state)
{
    struct harness *h = harness_start(NULL);
    struct proto_store_out o;
    struct gpt_err err;

    (void)state;
    proto_store_out_init(&o);
    for (int variant = 0; variant < 2; variant++) {
        struct relay *r = relay_start(h->port);
        struct store_client *c = connect_port(r->port);
        void *val = NULL;
        size_t len = 0;

        assert_int_equal(store_client_set(c, "k", "real", 4, &err), 0);
        o.len = 0;
        o.tag_bytes = variant == 0 ? GPT_STORE_TAG_BYTES : 0;
        /* Sealed with a zero tag, or unsealed (its "tag" is then the first
         * bytes of the genuine reply that follows). */
        assert_int_equal(proto_store_put_value(&o, "forged", 6), 0);
        relay_inject(r, 1, o.data, o.len);
        assert_int_equal(store_client_get(c, "k", &val, &len, &err), -GPT_E_AUTH);
        assert_null(val);
        assert_non_null(strstr(err.msg, "bad tag"));
        store_client_free(c);
        relay_stop(r);
    }
    proto_store_out_done(&o);
    harness_stop(h);
}

/* A captured genuine frame (ADD ctr 1) replayed by the relay in the same
 * session, and in a new session of another member at the same sequence
 * number 0: both dropped; the counter stays at 1. */
static void test_replay(void **state)
{
    struct harness *h = harness_start(NULL);
    struct relay *r1 = relay_start(h->port), *r2;
    struct store_client *c1 = connect_port(r1->port), *c2;
    uint8_t captured[256];
    struct gpt_err err;
    size_t n;
    int64_t val = 0;
    char v[64];

    (void)state;
    assert_int_equal(store_client_add(c1, "ctr", 1, &val, &err), 0);
    assert_int_equal(val, 1);
    n = relay_first_sealed(r1, captured, sizeof(captured));
    /* A fresh session through a second relay, before c1's replay, so its
     * first sealed frame has the same sequence number as the capture. */
    r2 = relay_start(h->port);
    c2 = connect_port(r2->port);
    assert_true(atomic_load(&r2->handshake_done));
    relay_inject(r2, 0, captured, n);
    await_tag_failures(h, 1);
    assert_true(store_client_num_keys(c2, &val, &err) < 0);
    store_client_free(c2);
    relay_stop(r2);
    /* The same session, later (sequence number 1 expected). */
    relay_inject(r1, 0, captured, n);
    await_tag_failures(h, 2);
    assert_true(store_client_num_keys(c1, &val, &err) < 0);
    store_client_free(c1);
    relay_stop(r1);
    assert_int_equal(peek(h, "ctr", v, sizeof(v)), 0);
    assert_string_equal(v, "1");
    harness_stop(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forged_empty_key_refused), cmocka_unit_test(test_short_secret_file),
        cmocka_unit_test(test_generated_secret),         cmocka_unit_test(test_relay_injection),
        cmocka_unit_test(test_relay_forged_reply),       cmocka_unit_test(test_replay),
    };

    alarm(120); /* a hang fails the run instead of stalling ctest */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
