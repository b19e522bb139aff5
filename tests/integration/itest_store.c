/*
 * itest_store: a store client for the integration tests that speaks for a
 * node id of its choosing, as a member that holds the cluster secret and
 * lies would (elastic_liar.sh). It runs its operations in order on one
 * connection and prints one line per operation:
 *
 *   itest_store HOST:PORT SECRET_FILE NODE OP...
 *     get:KEY               VALUE <value> | ERROR <errno> <message>
 *     set:KEY=VALUE         OK | DENIED <message> | ERROR <errno> <message>
 *     append:KEY=VALUE      (VALUE gets a trailing newline: one inbox line)
 *     delete:KEY
 *     heartbeat:KEY=VALUE
 *
 * ITEST_STORE_NODE_KEY names a node key file (STATE_DIR/node.key) to
 * prove NODE's key with; without it none is proved. A handshake refused
 * for NODE's key prints "REFUSED <the server's message>" and exits 4.
 *
 * Exit 0 once every operation was answered (whatever the answers), 2 on
 * bad arguments, 3 when the connection fails otherwise. Single-threaded; the
 * connection and every request have a deadline (10 s in all).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "gpt_err.h"
#include "store_client.h"

#define ITEST_STORE_DEADLINE_MS 10000

struct itest_store {
    uv_loop_t loop;
    uv_timer_t deadline;
    struct store_client_async *a;
    char **ops;
    int nops, next;
    int rc;
};

static void itest_store_next(struct itest_store *t);

static void itest_store_stop(struct itest_store *t, int rc)
{
    t->rc = rc;
    if (t->a) {
        store_client_async_close(t->a, NULL, NULL);
        t->a = NULL;
    }
    uv_close((uv_handle_t *)&t->deadline, NULL);
}

static void itest_store_reply(void *arg, const struct store_reply *r)
{
    struct itest_store *t = arg;
    if (r->status == -EACCES)
        printf("DENIED %.*s\n", (int)r->len, (const char *)r->data);
    else if (r->status < 0)
        printf("ERROR %d %.*s\n", r->status, (int)r->len, r->data ? (const char *)r->data : "");
    else if (r->data)
        printf("VALUE %.*s\n", (int)r->len, (const char *)r->data);
    else
        printf("OK\n");
    fflush(stdout);
    itest_store_next(t);
}

/* Issues operation t->next ("verb:key[=value]"). */
static int itest_store_issue(struct itest_store *t, char *op)
{
    char *key = strchr(op, ':');
    if (!key)
        return -EINVAL;
    *key++ = '\0';
    char *val = strchr(key, '=');
    if (val)
        *val++ = '\0';
    if (strcmp(op, "get") == 0)
        return store_client_async_get(t->a, key, itest_store_reply, t);
    if (strcmp(op, "delete") == 0)
        return store_client_async_delete(t->a, key, itest_store_reply, t);
    if (!val)
        return -EINVAL;
    if (strcmp(op, "set") == 0)
        return store_client_async_set(t->a, key, val, strlen(val), itest_store_reply, t);
    if (strcmp(op, "heartbeat") == 0)
        return store_client_async_heartbeat(t->a, key, val, strlen(val), itest_store_reply, t);
    if (strcmp(op, "append") == 0) {
        size_t n = strlen(val);
        char *line = malloc(n + 2);
        if (!line)
            return -ENOMEM;
        memcpy(line, val, n);
        line[n] = '\n';
        line[n + 1] = '\0';
        int rc = store_client_async_append(t->a, key, line, n + 1, itest_store_reply, t);
        free(line); /* the request is encoded when queued */
        return rc;
    }
    return -EINVAL;
}

static void itest_store_next(struct itest_store *t)
{
    if (t->next == t->nops) {
        itest_store_stop(t, 0);
        return;
    }
    char *op = t->ops[t->next++];
    int rc = itest_store_issue(t, op);
    if (rc < 0) {
        fprintf(stderr, "itest_store: operation '%s': %s\n", op, strerror(-rc));
        itest_store_stop(t, rc == -EINVAL ? 2 : 3);
    }
}

static void itest_store_connected(void *arg, int status)
{
    struct itest_store *t = arg;
    if (status == -EACCES) {
        printf("REFUSED %s\n", store_client_async_refusal(t->a));
        itest_store_stop(t, 4);
        return;
    }
    if (status < 0) {
        fprintf(stderr, "itest_store: connect: %s\n", gpt_strerror(status));
        itest_store_stop(t, 3);
        return;
    }
    itest_store_next(t);
}

static void itest_store_timeout(uv_timer_t *h)
{
    struct itest_store *t = h->data;
    fprintf(stderr, "itest_store: no answer within %d ms\n", ITEST_STORE_DEADLINE_MS);
    itest_store_stop(t, 3);
}

/* Reads a node key file (STATE_DIR/node.key: 64 hex digits). */
static int itest_store_node_key(const char *path, uint8_t ret[GPT_STORE_MAC_BYTES])
{
    FILE *f = fopen(path, "r");
    int rc = f ? 0 : -errno;
    for (int i = 0; rc == 0 && i < GPT_STORE_MAC_BYTES; i++) {
        unsigned v;
        if (fscanf(f, "%2x", &v) != 1)
            rc = -EINVAL;
        ret[i] = (uint8_t)v;
    }
    if (f)
        fclose(f);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: itest_store HOST:PORT SECRET_FILE NODE OP...\n");
        return 2;
    }
    char host[256];
    snprintf(host, sizeof(host), "%s", argv[1]);
    char *colon = strrchr(host, ':');
    if (!colon)
        return 2;
    *colon = '\0';
    uint8_t secret[STORE_SECRET_MAX];
    size_t secret_len = 0;
    struct gpt_err err;
    if (store_secret_load(argv[2], secret, sizeof(secret), &secret_len, &err) < 0) {
        fprintf(stderr, "itest_store: %s\n", err.msg);
        return 2;
    }
    uint8_t node_key[GPT_STORE_MAC_BYTES];
    const char *key_file = getenv("ITEST_STORE_NODE_KEY");
    if (key_file && !key_file[0])
        key_file = NULL;
    if (key_file && itest_store_node_key(key_file, node_key) < 0) {
        fprintf(stderr, "itest_store: %s: not a node key\n", key_file);
        return 2;
    }
    struct itest_store t = {.ops = argv + 4, .nops = argc - 4, .rc = 3};
    uv_loop_init(&t.loop);
    uv_timer_init(&t.loop, &t.deadline);
    t.deadline.data = &t;
    uv_timer_start(&t.deadline, itest_store_timeout, ITEST_STORE_DEADLINE_MS, 0);
    struct store_client_async_opts o = {.host = host,
                                        .port = atoi(colon + 1),
                                        .secret = secret,
                                        .secret_len = secret_len,
                                        .node = argv[3],
                                        .node_key = key_file ? node_key : NULL};
    if (store_client_async_new(&t.loop, &o, itest_store_connected, &t, &t.a, &err) < 0) {
        fprintf(stderr, "itest_store: %s\n", err.msg);
        return 3;
    }
    uv_run(&t.loop, UV_RUN_DEFAULT);
    uv_loop_close(&t.loop);
    return t.rc;
}
