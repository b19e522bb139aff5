/*
 * cluster_keys: the node keys of the store's handshake (proto/store.h,
 * "Node keys"), so that holding the cluster secret is not enough to speak
 * for a node id another node holds. The coordinator keeps the key it issued
 * to each node id (STATE_DIR/node.keys, one "HEX NODE" line per issue,
 * appended and synced; `gptctl nodes --forget` rewrites it without the
 * node); every node keeps its own key (STATE_DIR/node.key, mode 0600) and
 * proves it on each connection. Without a state directory (bench_rdzv,
 * tests) the keys live in memory only. Loop thread; blocks on small file
 * writes, as the job database does.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "cluster_impl.h"
#include "gpt_atomic_file.h"
#include "log.h"
#include "monotime.h"
#include "store_auth.h"

#define KEY_HEX (2 * GPT_STORE_MAC_BYTES)

static void key_hex(const uint8_t key[GPT_STORE_MAC_BYTES], char out[KEY_HEX + 1])
{
    for (int i = 0; i < GPT_STORE_MAC_BYTES; i++)
        snprintf(out + 2 * i, 3, "%02x", key[i]);
}

/* 0, or -EINVAL when hex is not KEY_HEX hex digits. */
static int key_parse(const char *hex, uint8_t ret[GPT_STORE_MAC_BYTES])
{
    for (int i = 0; i < GPT_STORE_MAC_BYTES; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1 || !strchr("0123456789abcdef", hex[2 * i]) ||
            !strchr("0123456789abcdef", hex[2 * i + 1]))
            return -EINVAL;
        ret[i] = (uint8_t)v;
    }
    return 0;
}

static struct cluster_key *keys_find(struct cluster *c, const char *node)
{
    for (size_t i = 0; i < c->nkeys; i++)
        if (strcmp(c->keys[i].node, node) == 0)
            return &c->keys[i];
    return NULL;
}

/* Sets node's key in the table (replacing one it had). 0 or -ENOMEM. */
static int keys_put(struct cluster *c, const char *node, const uint8_t key[GPT_STORE_MAC_BYTES])
{
    struct cluster_key *k = keys_find(c, node);

    if (!k) {
        if (c->nkeys == c->keys_cap) {
            size_t cap = c->keys_cap ? 2 * c->keys_cap : 16;
            struct cluster_key *nk = realloc(c->keys, cap * sizeof(*nk));
            if (!nk)
                return -ENOMEM;
            c->keys = nk;
            c->keys_cap = cap;
        }
        k = &c->keys[c->nkeys++];
        snprintf(k->node, sizeof(k->node), "%s", node);
    }
    memcpy(k->key, key, GPT_STORE_MAC_BYTES);
    return 0;
}

static int state_path(const struct cluster *c, const char *name, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "%s/%s", c->state_dir, name);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* Reads STATE_DIR/node.keys into the table. A last line without its
 * newline is an append a crash cut short: that key was never sent (the
 * issue waits for the sync), so it is dropped. */
static int keys_load(struct cluster *c, struct gpt_err *err)
{
    char path[PATH_MAX], line[KEY_HEX + GPT_STORE_NODE_MAX + 8];
    uint8_t key[GPT_STORE_MAC_BYTES];
    int rc = 0;
    FILE *f;

    if (state_path(c, CLUSTER_KEYS_FILE, path, sizeof(path)) < 0)
        return gpt_err_set(err, -ENAMETOOLONG, "state_dir", "state directory too long");
    if (!(f = fopen(path, "re")))
        return errno == ENOENT ? 0
                               : gpt_err_set(err, -errno, NULL, "%s: %s", path, strerror(errno));
    while (fgets(line, sizeof(line), f)) {
        size_t n = strlen(line);
        if (n == 0 || line[n - 1] != '\n')
            break;
        line[n - 1] = '\0';
        if (n < KEY_HEX + 3 || line[KEY_HEX] != ' ' || key_parse(line, key) < 0 ||
            n - 2 - KEY_HEX > GPT_STORE_NODE_MAX) {
            rc = gpt_err_set(err, -EINVAL, NULL,
                             "%s: a line is not \"KEY NODE\"; restore it or remove the line", path);
            break;
        }
        if ((rc = keys_put(c, line + KEY_HEX + 1, key)) < 0) {
            rc = gpt_err_set(err, rc, NULL, "out of memory");
            break;
        }
    }
    fclose(f);
    OPENSSL_cleanse(key, sizeof(key));
    OPENSSL_cleanse(line, sizeof(line));
    return rc;
}

/* Appends node's key to STATE_DIR/node.keys and syncs it. 0 or -errno. */
static int keys_append(struct cluster *c, const char *node, const uint8_t key[GPT_STORE_MAC_BYTES])
{
    char path[PATH_MAX], line[KEY_HEX + GPT_STORE_NODE_MAX + 8], hex[KEY_HEX + 1];
    int fd, rc = 0, n;

    if (!c->state_dir[0])
        return 0;
    if (state_path(c, CLUSTER_KEYS_FILE, path, sizeof(path)) < 0)
        return -ENAMETOOLONG;
    key_hex(key, hex);
    n = snprintf(line, sizeof(line), "%s %s\n", hex, node);
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        rc = -errno;
    else if (write(fd, line, (size_t)n) != n || fdatasync(fd) < 0)
        rc = errno ? -errno : -EIO;
    if (fd >= 0)
        close(fd);
    OPENSSL_cleanse(line, sizeof(line));
    OPENSSL_cleanse(hex, sizeof(hex));
    return rc;
}

/* Writes the whole table over STATE_DIR/node.keys. 0 or -errno. */
static int keys_rewrite(struct cluster *c, struct gpt_err *err)
{
    char path[PATH_MAX], hex[KEY_HEX + 1];
    struct gpt_atomic_file f;
    int rc;

    if (!c->state_dir[0])
        return 0;
    if (state_path(c, CLUSTER_KEYS_FILE, path, sizeof(path)) < 0)
        return gpt_err_set(err, -ENAMETOOLONG, "state_dir", "state directory too long");
    if ((rc = gpt_atomic_file_open(&f, path, NULL, 0600, err)) < 0)
        return rc;
    for (size_t i = 0; i < c->nkeys && rc == 0; i++) {
        key_hex(c->keys[i].key, hex);
        if ((rc = gpt_atomic_file_write(&f, hex, KEY_HEX, err)) == 0 &&
            (rc = gpt_atomic_file_write(&f, " ", 1, err)) == 0 &&
            (rc = gpt_atomic_file_write(&f, c->keys[i].node, strlen(c->keys[i].node), err)) == 0)
            rc = gpt_atomic_file_write(&f, "\n", 1, err);
    }
    OPENSSL_cleanse(hex, sizeof(hex));
    if (rc < 0) {
        gpt_atomic_file_abort(&f);
        return rc;
    }
    return gpt_atomic_file_commit(&f, err);
}

/* Writes this node's own key to STATE_DIR/node.key (mode 0600). */
static int own_key_save(struct cluster *c, struct gpt_err *err)
{
    char path[PATH_MAX], hex[KEY_HEX + 2];
    struct gpt_atomic_file f;
    int rc;

    if (!c->state_dir[0])
        return 0;
    if (state_path(c, CLUSTER_KEY_FILE, path, sizeof(path)) < 0)
        return gpt_err_set(err, -ENAMETOOLONG, "state_dir", "state directory too long");
    key_hex(c->node_key, hex);
    hex[KEY_HEX] = '\n';
    hex[KEY_HEX + 1] = '\0';
    if ((rc = gpt_atomic_file_open(&f, path, NULL, 0600, err)) == 0 &&
        (rc = gpt_atomic_file_write(&f, hex, KEY_HEX + 1, err)) < 0)
        gpt_atomic_file_abort(&f);
    else if (rc == 0)
        rc = gpt_atomic_file_commit(&f, err);
    OPENSSL_cleanse(hex, sizeof(hex));
    return rc;
}

/* Reads STATE_DIR/node.key, if there is one, into c->node_key. */
static int own_key_load(struct cluster *c, struct gpt_err *err)
{
    char path[PATH_MAX], hex[KEY_HEX + 2] = "";
    int fd, rc = 0;
    ssize_t n;

    if (state_path(c, CLUSTER_KEY_FILE, path, sizeof(path)) < 0)
        return gpt_err_set(err, -ENAMETOOLONG, "state_dir", "state directory too long");
    if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
        return errno == ENOENT ? 0
                               : gpt_err_set(err, -errno, NULL, "%s: %s", path, strerror(errno));
    n = read(fd, hex, KEY_HEX + 1);
    close(fd);
    if (n != KEY_HEX + 1 || hex[KEY_HEX] != '\n' || key_parse(hex, c->node_key) < 0)
        rc = gpt_err_set(err, -EINVAL, NULL,
                         "%s: not a node key (%d hex digits); remove it and release this node's "
                         "id with `gptctl nodes --forget %s` on the coordinator",
                         path, KEY_HEX, c->node_id);
    else
        c->has_node_key = true;
    OPENSSL_cleanse(hex, sizeof(hex));
    return rc;
}

int cluster_keys_init(struct cluster *c, struct gpt_err *err)
{
    int rc;

    if (c->state_dir[0] &&
        ((rc = own_key_load(c, err)) < 0 || (c->o.coordinator && (rc = keys_load(c, err)) < 0)))
        return rc;
    if (!c->o.coordinator)
        return 0;
    /* The coordinator is a node of its own store: its key is the one its
     * table holds, made here so that its two connections never race for
     * the first issue. */
    struct cluster_key *k = keys_find(c, c->node_id);
    if (k) {
        memcpy(c->node_key, k->key, GPT_STORE_MAC_BYTES);
    } else {
        if (!c->has_node_key && store_auth_random(c->node_key, GPT_STORE_MAC_BYTES) < 0)
            return gpt_err_set(err, -GPT_E_AUTH, NULL, "no random bytes for a node key");
        if ((rc = keys_put(c, c->node_id, c->node_key)) < 0)
            return gpt_err_set(err, rc, NULL, "out of memory");
        if ((rc = keys_append(c, c->node_id, c->node_key)) < 0)
            return gpt_err_set(err, rc, NULL, "%s/%s: %s", c->state_dir, CLUSTER_KEYS_FILE,
                               strerror(-rc));
    }
    c->has_node_key = true;
    return own_key_save(c, err);
}

void cluster_keys_done(struct cluster *c)
{
    if (c->keys)
        OPENSSL_cleanse(c->keys, c->keys_cap * sizeof(*c->keys));
    free(c->keys);
    c->keys = NULL;
    c->nkeys = c->keys_cap = 0;
    OPENSSL_cleanse(c->node_key, sizeof(c->node_key));
}

int cluster_node_key(void *arg, const char *node, uint8_t ret_key[GPT_STORE_MAC_BYTES])
{
    struct cluster_key *k = keys_find(arg, node);

    if (!k)
        return 0;
    memcpy(ret_key, k->key, GPT_STORE_MAC_BYTES);
    return 1;
}

int cluster_node_key_issued(void *arg, const char *node, const uint8_t key[GPT_STORE_MAC_BYTES])
{
    struct cluster *c = arg;
    int rc;

    /* A holder of the secret may invent ids: each costs a line of
     * node.keys, so no more are issued than the coordinator tracks nodes. */
    if (c->nkeys >= RDZV_NODES_MAX) {
        log_warn("cluster: refused a node key to \"%s\": %d node ids hold keys (release gone "
                 "ones with gptctl nodes --forget)",
                 node, RDZV_NODES_MAX);
        return -GPT_E_LIMIT;
    }
    if ((rc = keys_append(c, node, key)) < 0) {
        log_error("cluster: cannot keep the node key of \"%s\" in %s/%s: %s; its join is refused",
                  node, c->state_dir, CLUSTER_KEYS_FILE, strerror(-rc));
        return rc;
    }
    return keys_put(c, node, key);
}

void cluster_own_key_issued(void *arg, const char *node, const uint8_t key[GPT_STORE_MAC_BYTES])
{
    struct cluster *c = arg;
    struct gpt_err err;

    (void)node;
    memcpy(c->node_key, key, GPT_STORE_MAC_BYTES);
    c->has_node_key = true;
    if (own_key_save(c, &err) < 0)
        log_error("cluster: cannot keep this node's key (%s): after a restart the coordinator "
                  "refuses this node until `gptctl nodes --forget %s` there",
                  err.msg, c->node_id);
    else
        log_info("cluster: the coordinator issued this node's key (kept in %s/%s)", c->state_dir,
                 CLUSTER_KEY_FILE);
}

void cluster_node_refused(void *arg, const char *node, const char *peer, char *why, size_t cap)
{
    struct cluster *c = arg;
    const char *addr = "";
    bool alive = c->coord && rdzv_coord_node_alive(c->coord, monotime_s(), node, &addr);

    if (alive)
        snprintf(why, cap,
                 "node id \"%s\" is taken: node %s at %s is alive, and the gptd at %s is "
                 "another node; start it with its own --node-name",
                 node, node, addr[0] ? addr : "?", peer);
    else
        snprintf(why, cap,
                 "node %s (last at %s) is gone; if its state directory was wiped, root runs "
                 "`gptctl nodes --forget %s` on the coordinator",
                 node, addr[0] ? addr : "?", node);
}

const uint8_t *cluster_node_key_own(const struct cluster *c)
{
    return c->has_node_key ? c->node_key : NULL;
}

int cluster_forget_node(struct cluster *c, const char *node, struct gpt_err *err)
{
    struct cluster_key *k;

    if (!c->o.coordinator)
        return gpt_err_set(err, -EINVAL, NULL,
                           "this gptd is not the coordinator: run `gptctl nodes --forget %s` on "
                           "the coordinator",
                           node);
    if (strcmp(node, c->node_id) == 0)
        return gpt_err_set(err, -EINVAL, NULL, "\"%s\" is the coordinator itself", node);
    if (!(k = keys_find(c, node)))
        return gpt_err_set(err, -ENOENT, NULL, "no node key is kept for node \"%s\"", node);
    OPENSSL_cleanse(k->key, sizeof(k->key));
    *k = c->keys[--c->nkeys];
    log_notice("cluster: forgot the node key of \"%s\": the next gptd to join as it takes the id",
               node);
    return keys_rewrite(c, err);
}
