/*
 * store_kv: the abortable gpt_kv (engine/comm.h) the workers' rings use
 * to exchange addresses through the rendezvous store (see store_kv.h).
 * One blocking store client, connected on first use (or borrowed) and
 * shared by the threads of one world under a mutex; an abort from any thread fails the
 * call in progress (store_client_abort) and every later one.
 */
#include "store_kv.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "monotime.h"
#include "store_client.h"

#define STORE_KV_CONNECT_MS 10000 /* connect retries before giving up */
#define STORE_KV_POLL_MS    10    /* how often a get looks for its key */

struct store_kv {
    struct gpt_kv kv;
    pthread_mutex_t mu;
    struct store_client *client;
    bool owns_client; /* false for store_kv_over: the caller frees it */
    char host[256];   /* as CLUSTER_HOST_MAX */
    int port;
    uint8_t secret[STORE_SECRET_MAX];
    size_t secret_len;
    char node[GPT_STORE_NODE_MAX + 1]; /* the node id the connection speaks for */
    bool has_node_key;
    uint8_t node_key[GPT_STORE_MAC_BYTES]; /* that node's key, proved in the handshake */
    atomic_bool aborted;
};

/* Connects on first use; called with k->mu held. */
static int store_kv_client(struct store_kv *k)
{
    if (k->client)
        return 0;
    struct store_client_opts co = {.host = k->host,
                                   .port = k->port,
                                   .secret = k->secret,
                                   .secret_len = k->secret_len,
                                   .timeout_ms = 5000,
                                   .node = k->node,
                                   .node_key = k->has_node_key ? k->node_key : NULL};
    double deadline = monotime_s() + STORE_KV_CONNECT_MS / 1e3;
    for (;;) {
        struct gpt_err err;
        struct store_client *c = NULL;
        int rc = store_client_connect(&co, &c, &err);
        if (rc == 0) {
            __atomic_store_n(&k->client, c, __ATOMIC_RELEASE);
            return 0;
        }
        if (atomic_load(&k->aborted))
            return -ECANCELED;
        if (rc == -GPT_E_AUTH || rc == -EACCES || monotime_s() > deadline)
            return rc;
        monotime_sleep_ms(100);
    }
}

static int store_kv_set(void *ctx, const char *key, const void *val, size_t len)
{
    struct store_kv *k = ctx;
    if (atomic_load(&k->aborted))
        return -ECANCELED;
    pthread_mutex_lock(&k->mu);
    int rc = store_kv_client(k);
    if (rc == 0)
        rc = store_client_set(k->client, key, val, len, NULL);
    pthread_mutex_unlock(&k->mu);
    return rc;
}

/* Polls (CHECK, then GET) instead of a blocking WAIT so that an abort is
 * seen within one poll and the mutex is never held while waiting. */
static int store_kv_get(void *ctx, const char *key, void *buf, size_t cap, size_t *ret_len,
                        int timeout_ms)
{
    struct store_kv *k = ctx;
    double deadline = monotime_s() + timeout_ms / 1e3;
    const char *keys[1] = {key};
    for (;;) {
        if (atomic_load(&k->aborted))
            return -ECANCELED;
        int all = 0, rc;
        void *val = NULL;
        size_t len = 0;
        pthread_mutex_lock(&k->mu);
        rc = store_kv_client(k);
        if (rc == 0)
            rc = store_client_check(k->client, keys, 1, &all, NULL);
        if (rc == 0 && all)
            rc = store_client_get(k->client, key, &val, &len, NULL);
        pthread_mutex_unlock(&k->mu);
        if (rc < 0)
            return rc;
        if (all) {
            if (len > cap) {
                free(val);
                return -EMSGSIZE;
            }
            memcpy(buf, val, len);
            *ret_len = len;
            free(val);
            return 0;
        }
        if (monotime_s() > deadline)
            return -ETIMEDOUT;
        monotime_sleep_ms(STORE_KV_POLL_MS);
    }
}

static struct store_kv *store_kv_alloc(void)
{
    struct store_kv *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    pthread_mutex_init(&k->mu, NULL);
    atomic_init(&k->aborted, false);
    k->kv.ctx = k;
    k->kv.set = store_kv_set;
    k->kv.get = store_kv_get;
    return k;
}

void store_kv_set_node_key(struct store_kv *k, const uint8_t *key)
{
    k->has_node_key = key != NULL;
    if (key)
        memcpy(k->node_key, key, sizeof(k->node_key));
}

struct store_kv *store_kv_new(const char *host, int port, const void *secret, size_t secret_len,
                              const char *node)
{
    struct store_kv *k = store_kv_alloc();
    if (!k)
        return NULL;
    k->owns_client = true;
    snprintf(k->host, sizeof(k->host), "%s", host);
    k->port = port;
    snprintf(k->node, sizeof(k->node), "%s", node ? node : "");
    if (secret_len > sizeof(k->secret))
        secret_len = sizeof(k->secret);
    if (secret_len)
        memcpy(k->secret, secret, secret_len);
    k->secret_len = secret_len;
    return k;
}

struct store_kv *store_kv_over(struct store_client *client)
{
    struct store_kv *k = store_kv_alloc();
    if (k)
        k->client = client;
    return k;
}

void store_kv_abort(struct store_kv *k)
{
    atomic_store(&k->aborted, true);
    /* The client pointer is only written under the mutex by a worker; an
     * abort of a call in progress must not wait for that mutex. */
    struct store_client *c = __atomic_load_n(&k->client, __ATOMIC_ACQUIRE);
    if (c)
        store_client_abort(c);
}

void store_kv_free(struct store_kv *k)
{
    if (!k)
        return;
    if (k->owns_client)
        store_client_free(k->client);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

struct gpt_kv *store_kv_gpt(struct store_kv *k)
{
    return &k->kv;
}
