/*
 * cluster_msg: the messages cluster members and the coordinator exchange
 * through the rendezvous store (daemon/cluster/cluster*.c). JSON, one object per
 * line for the inbox, one object per key for the rest.
 *
 *   inbox line  member -> coordinator, appended to "c/inbox":
 *     {"t": "hb"|"join", "node", "inc", "iid"?, "gen"?, "round"?, "job"?, "snap"?,
 *      "workers"?, "addr"?, "ver"?, "dev"?, "gpu"?, "state"?, "exit_round"?,
 *      "exit_rc"?, "exit_step"?, "exit_msg"?}       a heartbeat (join: the same)
 *     {"t": "leave", "node", "inc"}                 stopping on purpose
 *     {"t": "metric", "job", "node", "m": METRIC}   global rank 0's record
 *     {"t": "event", "job", "node", "e": EVENT}
 *     {"t": "submit", "node", "inc", "req", "uid", "prio", "spec": {...}}
 *     {"t": "read", "node", "inc", "req", "op": NAME, "args": {...}}
 *     {"t": "sample", "job", "node", "s": {...}}  a `sample` reply made on
 *                                                 the member, to keep
 *   reply       coordinator -> member at c/reply/<node>/<inc>/<req>:
 *     {"ok": true, "job"?: ID, "r"?: {...}} or
 *     {"ok": false, "code": RC, "message": TEXT, "path": TEXT}
 *   feed chunk  coordinator -> members at c/feed/<n>:
 *     {"recs": [{"s": SEQ, "j": JOB, "r": {...}}, ...]}
 *   feed head   "GEN:N" at c/feed/head (hex generation, newest chunk)
 *
 * "inc", "iid" and "gen" are 64-bit numbers in lowercase hex. "inc" changes
 * with every start of a node's process, "iid" (its instance) is kept in its
 * state directory: a node id reported with another "iid" while its holder
 * is alive is another node, refused. A forwarded read's
 * "op" is one of the names of cluster_msg_read_name() and decodes to the
 * control op (enum gpt_ctl_op) whose answer it computes. Every field is
 * declared in one const table with its type and limits; unknown fields,
 * missing required ones, wrong types and values out of range are refused
 * with an error whose path names the field.
 *
 * Pure: bytes in, structs out. No sockets, threads, clocks or globals other
 * than the const tables. Safe from any thread.
 */
#ifndef GPT_CLUSTER_MSG_H
#define GPT_CLUSTER_MSG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpt_err.h"
#include "metric.h"

#define CLUSTER_MSG_LINE_MAX     (2u << 20) /* one message, '\n' excluded */
#define CLUSTER_MSG_NODE_MAX     64         /* node id bytes, NUL included */
#define CLUSTER_MSG_ADDR_MAX     64         /* advertised worker address, NUL included */
#define CLUSTER_MSG_VERSION_MAX  32
#define CLUSTER_MSG_DEVICES_MAX  128
#define CLUSTER_MSG_GPUS_MAX     512 /* "gpu": the node's GPU readings (daemon/node/include/nvml.h) */
#define CLUSTER_MSG_STATE_MAX    16
#define CLUSTER_MSG_EXIT_MSG_MAX 256
#define CLUSTER_MSG_WORKERS_MAX  1024
#define CLUSTER_MSG_PRIO_MAX     1000000 /* |priority|, as the control protocol allows */
#define CLUSTER_MSG_READ_LIMIT   100000  /* records one history read may ask for */
#define CLUSTER_MSG_FEED_RECS    256     /* records in one feed chunk */
#define CLUSTER_MSG_KEY_MAX      160     /* a reply key, NUL included */

enum cluster_msg_type {
    CLUSTER_MSG_HB,
    CLUSTER_MSG_JOIN,
    CLUSTER_MSG_LEAVE,
    CLUSTER_MSG_METRIC,
    CLUSTER_MSG_EVENT,
    CLUSTER_MSG_SUBMIT,
    CLUSTER_MSG_READ,
    CLUSTER_MSG_SAMPLE,
    CLUSTER_MSG_TYPE_COUNT
};

/* Inbox fields; a bit each in struct cluster_msg.present. */
enum cluster_msg_field {
    CLUSTER_MSG_F_NODE,
    CLUSTER_MSG_F_INC,
    CLUSTER_MSG_F_GEN,
    CLUSTER_MSG_F_ROUND,
    CLUSTER_MSG_F_JOB,
    CLUSTER_MSG_F_SNAP,
    CLUSTER_MSG_F_WORKERS,
    CLUSTER_MSG_F_ADDR,
    CLUSTER_MSG_F_VER,
    CLUSTER_MSG_F_DEV,
    CLUSTER_MSG_F_STATE,
    CLUSTER_MSG_F_EXIT_ROUND,
    CLUSTER_MSG_F_EXIT_RC,
    CLUSTER_MSG_F_EXIT_STEP,
    CLUSTER_MSG_F_EXIT_MSG,
    CLUSTER_MSG_F_METRIC,
    CLUSTER_MSG_F_EVENT,
    CLUSTER_MSG_F_REQ,
    CLUSTER_MSG_F_UID,
    CLUSTER_MSG_F_PRIO,
    CLUSTER_MSG_F_SPEC,
    CLUSTER_MSG_F_OP,
    CLUSTER_MSG_F_ARGS,
    CLUSTER_MSG_F_GPU,
    CLUSTER_MSG_F_IID,
    CLUSTER_MSG_F_SAMPLE,
    CLUSTER_MSG_F_COUNT
};

#define CLUSTER_MSG_BIT(f) (1u << CLUSTER_MSG_F_##f)

/* The arguments of a forwarded read; each optional (absent: the default
 * cluster_msg_init sets). */
struct cluster_msg_read_args {
    int64_t job;      /* >= 0; 0: none */
    int64_t uid;      /* the asking client's uid; -1: not given */
    int64_t snapshot; /* >= 0; 0: none */
    int64_t since;    /* history: from this step on */
    int64_t after;    /* history: the position after which (db_history_page; -1: start) */
    int64_t limit;    /* history: records at most, 0..CLUSTER_MSG_READ_LIMIT (0: the default) */
};

/* One inbox message, decoded. Which fields a type takes, and which it
 * requires, is in the table in cluster_msg.c; `present` says which were
 * given (decode) or are to be written (encode: required fields always are). */
struct cluster_msg {
    int type; /* enum cluster_msg_type */
    uint32_t present;
    char node[CLUSTER_MSG_NODE_MAX]; /* the sender, non-empty */
    uint64_t inc;                    /* the sender's incarnation (changes on restart) */
    uint64_t iid; /* hb, join: the sender's instance (its state directory's), 0 none */
    /* hb, join */
    uint64_t gen;      /* the coordinator generation the node saw */
    int64_t round;     /* -1: none */
    int64_t job;       /* also metric, event (>= 1 there); 0: none */
    int64_t snap_step; /* "snap": newest valid snapshot step held, -1 none */
    int workers;       /* 1..CLUSTER_MSG_WORKERS_MAX */
    char addr[CLUSTER_MSG_ADDR_MAX];
    char version[CLUSTER_MSG_VERSION_MAX];
    char devices[CLUSTER_MSG_DEVICES_MAX];
    char gpus[CLUSTER_MSG_GPUS_MAX]; /* "gpu": IDX:UTIL:USED:TOTAL,... ("": none) */
    char state[CLUSTER_MSG_STATE_MAX];
    int64_t exit_round; /* the last local worker exit, -1 none */
    int exit_rc;
    int64_t exit_step;
    char exit_msg[CLUSTER_MSG_EXIT_MSG_MAX];
    /* metric, event */
    struct gpt_metric metric;
    struct gpt_event event;
    /* submit, read */
    int64_t req; /* >= 1: the sender's request number */
    /* submit */
    int64_t uid; /* 0..UINT32_MAX - 1 */
    int64_t priority;
    json_t *spec; /* an object; owned (decode: a reference; encode: borrowed) */
    /* read */
    int op; /* enum gpt_ctl_op */
    struct cluster_msg_read_args args;
    /* sample: the record (daemon/jobs' db_sample_json); owned as spec */
    json_t *sample;
};

/* Sets *m to an empty message of `type` with every field at its default. */
void cluster_msg_init(struct cluster_msg *m, int type);
/* Releases what decode took (the spec and sample references). NULL is fine. */
void cluster_msg_done(struct cluster_msg *m);

/* The type's name on the wire ("hb"), NULL if out of range; and back (-1). */
const char *cluster_msg_type_name(int type);
int cluster_msg_type_lookup(const char *name);
/* A field's name on the wire ("exit_msg"), NULL if out of range. */
const char *cluster_msg_field_name(int field);
/* The uint64 that s (n bytes: 1 to 16 lowercase hex digits, the form of
 * "inc", "gen" and tokens in the cluster's JSON) spells; -EINVAL for
 * anything else. */
int cluster_msg_hex_parse(const char *s, size_t n, uint64_t *ret);

/* The wire name of a forwarded read of control op `op` ("list", "status",
 * "snapshots", "history" for logs, "cancel", "resume", "locate" for
 * sample, "samples"); NULL for an op that is not forwarded. And back: the control op
 * of a name, -1 if none. */
const char *cluster_msg_read_name(int op);
int cluster_msg_read_op(const char *name);

/* Decodes one line (`len` bytes, no '\n', need not be NUL terminated).
 * Always initialises *ret; release with cluster_msg_done. 0, or -EMSGSIZE
 * (longer than CLUSTER_MSG_LINE_MAX), -EBADMSG (not a JSON object),
 * -EINVAL (a field is missing, unknown, mistyped or out of range; err's
 * path names it) or -ENOMEM. */
int cluster_msg_decode(const char *line, size_t len, struct cluster_msg *ret, struct gpt_err *err);

/* Encodes `m` (fields of its type present in m->present, required ones
 * always) as one line without '\n': *ret_line is new (malloc), *ret_len its
 * length. The same checks as decode: a value decode would refuse is
 * -EINVAL naming the field. */
int cluster_msg_encode(const struct cluster_msg *m, char **ret_line, size_t *ret_len,
                       struct gpt_err *err);

/* The coordinator's answer to a submit or read. */
struct cluster_msg_reply {
    bool ok;
    int64_t job;    /* ok (submit): the new job's id, 0 none */
    json_t *result; /* ok (read): an object; owned (decode: a reference; encode: borrowed) */
    int code;       /* !ok: a negative error code */
    char message[GPT_ERR_MSG_MAX];
    char path[GPT_ERR_PATH_MAX];
};

/* Decode always initialises *ret (release with cluster_msg_reply_done):
 * 0, -EMSGSIZE, -EBADMSG or -EINVAL naming the field. Encode: a new line. */
int cluster_msg_reply_decode(const char *text, size_t len, struct cluster_msg_reply *ret,
                             struct gpt_err *err);
int cluster_msg_reply_encode(const struct cluster_msg_reply *r, char **ret_text, size_t *ret_len,
                             struct gpt_err *err);
void cluster_msg_reply_done(struct cluster_msg_reply *r);

/* The store key of the answer to request `req` of node `node` incarnation
 * `inc`: "c/reply/<node>/<inc hex>/<req>". -EINVAL (node empty or too long)
 * or -ENAMETOOLONG when it does not fit `cap`. */
int cluster_msg_reply_key(char *buf, size_t cap, const char *node, uint64_t inc, int64_t req);

/* One feed record. */
struct cluster_msg_feed_rec {
    uint64_t seq;      /* >= 1 */
    int64_t job;       /* >= 0 */
    const json_t *rec; /* an object; borrowed from the chunk */
};

/* A decoded feed chunk: n records (<= CLUSTER_MSG_FEED_RECS), in order. */
struct cluster_msg_feed {
    json_t *root; /* owned */
    size_t n;
    struct cluster_msg_feed_rec recs[CLUSTER_MSG_FEED_RECS];
};

/* A new record object for a chunk ({"s", "j", "r"}; takes `rec`), NULL on
 * ENOMEM or a bad argument. */
json_t *cluster_msg_feed_rec_new(uint64_t seq, int64_t job, json_t *rec);
/* Encodes a chunk of the records in `recs` (an array of
 * cluster_msg_feed_rec_new objects, borrowed; at most CLUSTER_MSG_FEED_RECS). */
int cluster_msg_feed_encode(const json_t *recs, char **ret_text, size_t *ret_len,
                            struct gpt_err *err);
/* Decode always initialises *ret; release with cluster_msg_feed_done. */
int cluster_msg_feed_decode(const char *text, size_t len, struct cluster_msg_feed *ret,
                            struct gpt_err *err);
void cluster_msg_feed_done(struct cluster_msg_feed *f);

/* The feed head "GEN:N": encode into buf (-ENAMETOOLONG when it does not
 * fit), decode (-EINVAL when malformed: GEN 1..16 hex digits, N >= 0). */
int cluster_msg_feed_head_encode(char *buf, size_t cap, uint64_t gen, int64_t head);
int cluster_msg_feed_head_decode(const char *text, size_t len, uint64_t *ret_gen, int64_t *ret_head,
                                 struct gpt_err *err);

#endif
