/*
 * cluster_acl: what each node may write to the coordinator's store, and
 * which records it may send for a job (gptd(8), "Security"). Every store
 * connection is bound to the node id its handshake proved
 * (proto/store.h); a node holding the cluster secret may still claim any
 * id, but whatever id it claims, it writes as that node only:
 *
 *   HEARTBEAT <its id>                    its own report
 *   APPEND c/inbox                        whole lines, each in its own name;
 *                                         a record (metric, event) of a job
 *                                         running here only while it holds
 *                                         that job's global rank 0
 *   DELETE c/reply/<its id>/...           the answers to its own requests
 *   SET j<job>/<gen>/r<round>/KEY         its workers' keys in the job's
 *                                         current world, for its ranks only:
 *                                         addr/<rank>, shm/host/<rank>, and
 *                                         shm/name, nccl_id for rank 0
 *
 * Everything else is refused (ERROR(DENIED) from the store, counted in
 * gptd_store_refused_writes_total). The world's ranks come from the round
 * protocol at the moment of the write (rdzv_coord_node_ranks), and records
 * are checked again when the inbox is read, since a round may have closed
 * in between. Two cases take records without known ranks: a job that does
 * not run here (its records are dropped when read, as always), and a job
 * whose first world under this coordinator still forms (after a
 * coordinator's start, records of the world before it from a node placed
 * on the job). The coordinator's own records never pass through here.
 *
 * Loop thread only (the store server's callback and the inbox drain).
 */
#include "cluster_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "monotime.h"

#define ACL_LOG_EVERY_S 60.0 /* a refused record is logged at most this often */

int cluster_acl_record(struct cluster *c, const char *node, int64_t job, char *why, size_t cap)
{
    struct rdzv_ranks r;
    int rc = c->coord ? rdzv_coord_node_ranks(c->coord, node, job, &r) : -ESRCH;
    if (rc == -ESRCH || rc == -EAGAIN)
        return rc == -ESRCH ? -ESRCH : 0;
    if (rc < 0) {
        snprintf(why, cap, "it holds no rank of job %" PRId64 "'s world", job);
        return -EACCES;
    }
    if (r.base != 0) {
        snprintf(why, cap, "job %" PRId64 "'s records come from global rank 0; its ranks are %d-%d",
                 job, r.base, r.base + r.count - 1);
        return -EACCES;
    }
    return 0;
}

void cluster_acl_record_refused(struct cluster *c, const struct cluster_msg *m, const char *why)
{
    double now = monotime_s();
    c->records_refused++;
    if (c->records_logged_at > 0 && now - c->records_logged_at < ACL_LOG_EVERY_S) {
        c->records_unlogged++;
        return;
    }
    log_warn("cluster: refused a %s of job %" PRId64 " from node %s: %s (%" PRIu64
             " more refused since the last such message)",
             cluster_msg_type_name(m->type), m->job, m->node, why, c->records_unlogged);
    c->records_logged_at = now;
    c->records_unlogged = 0;
}

uint64_t cluster_records_refused(const struct cluster *c)
{
    return c->records_refused;
}

/* An APPEND to the inbox: whole lines, each in the node's own name, and
 * records only of a job whose rank 0 it holds. */
static int acl_inbox(struct cluster *c, const char *node, const uint8_t *val, size_t len, char *why,
                     size_t cap)
{
    if (len > 0 && val[len - 1] != '\n') {
        snprintf(why, cap, "an inbox message must end its line");
        return -EACCES;
    }
    const char *text = (const char *)val;
    size_t start = 0;
    int rc = 0;
    for (size_t i = 0; i < len && rc == 0; i++) {
        if (text[i] != '\n')
            continue;
        if (i > start) {
            struct cluster_msg m;
            struct gpt_err err;
            if (cluster_msg_decode(text + start, i - start, &m, &err) < 0) {
                snprintf(why, cap, "a malformed inbox message: %s", err.msg);
                rc = -EACCES;
            } else if (strcmp(m.node, node) != 0) {
                snprintf(why, cap, "a %s message in the name of node \"%s\"",
                         cluster_msg_type_name(m.type), m.node);
                rc = -EACCES;
            } else if (m.type == CLUSTER_MSG_METRIC || m.type == CLUSTER_MSG_EVENT) {
                /* A job that does not run here takes no record anyway: a
                 * late one of a job just ended is no lie, and refusing it
                 * would drop the lines sent with it. */
                rc = cluster_acl_record(c, node, m.job, why, cap);
                if (rc == -ESRCH)
                    rc = 0;
            }
            cluster_msg_done(&m);
        }
        start = i + 1;
    }
    return rc;
}

/* A worker's key: j<job>/<gen>/r<round>/<what>, in the job's current world
 * and for one of the node's ranks. */
static int acl_worker_key(struct cluster *c, const char *node, const char *key, char *why,
                          size_t cap)
{
    int64_t job = 0, round = 0;
    uint64_t gen = 0;
    int off = 0, rank = -1, end = 0;
    if (sscanf(key, "j%" SCNd64 "/%" SCNx64 "/r%" SCNd64 "/%n", &job, &gen, &round, &off) != 3 ||
        off == 0) {
        snprintf(why, cap, "no node writes this key");
        return -EACCES;
    }
    const char *what = key + off;
    struct rdzv_ranks r;
    if (rdzv_coord_node_ranks(c->coord, node, job, &r) < 0) {
        snprintf(why, cap, "it holds no rank of job %" PRId64 "'s current world", job);
        return -EACCES;
    }
    if (gen != r.gen || round != r.round) {
        snprintf(why, cap, "job %" PRId64 "'s world is round %" PRId64 " of this coordinator", job,
                 r.round);
        return -EACCES;
    }
    if (strcmp(what, "shm/name") == 0 || strcmp(what, "nccl_id") == 0)
        rank = 0;
    else if ((sscanf(what, "addr/%d%n", &rank, &end) != 1 &&
              sscanf(what, "shm/host/%d%n", &rank, &end) != 1) ||
             what[end] != '\0')
        rank = -1;
    if (rank < 0) {
        snprintf(why, cap, "not a key of a worker");
        return -EACCES;
    }
    if (rank < r.base || rank >= r.base + r.count) {
        snprintf(why, cap, "rank %d of job %" PRId64 " is not one of its ranks %d-%d", rank, job,
                 r.base, r.base + r.count - 1);
        return -EACCES;
    }
    return 0;
}

int cluster_write_admit(void *arg, const char *node, const struct proto_store_msg *m, char *why,
                        size_t cap)
{
    struct cluster *c = arg;
    char key[GPT_STORE_KEY_MAX + 1];
    snprintf(key, sizeof(key), "%.*s", (int)m->key_len, m->key);
    if (!node[0]) {
        snprintf(why, cap, "the connection names no node");
        return -EACCES;
    }
    if (!c->coord) {
        snprintf(why, cap, "the coordinator is not running");
        return -EACCES;
    }
    char reply[CLUSTER_MSG_KEY_MAX];
    int n = snprintf(reply, sizeof(reply), "c/reply/%s/", node);
    switch (m->type) {
    case PROTO_STORE_HEARTBEAT:
        if (strcmp(key, node) == 0)
            return 0;
        snprintf(why, cap, "a node sends its own heartbeat only");
        return -EACCES;
    case PROTO_STORE_APPEND:
        if (strcmp(key, RDZV_KEY_INBOX) == 0)
            return acl_inbox(c, node, m->val, m->val_len, why, cap);
        break;
    case PROTO_STORE_DELETE:
        if (n > 0 && (size_t)n < sizeof(reply) && strncmp(key, reply, (size_t)n) == 0)
            return 0;
        break;
    case PROTO_STORE_SET:
        if (key[0] == 'j')
            return acl_worker_key(c, node, key, why, cap);
        break;
    default:
        break;
    }
    snprintf(why, cap, "not a key this node writes");
    return -EACCES;
}
