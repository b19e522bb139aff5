/*
 * round_doc: the documents the coordinator publishes in the store for the
 * other hosts (daemon/rdzv.h, "Store keys"), declared as field tables like
 * the cluster messages (cluster_msg.h):
 *
 *   rdzv/n/<id>    a node's round: struct round_doc, with "me" (the node's
 *                  assignment) while it is a member of a running world
 *   rdzv/<r>/world the closed round r: struct round_doc with "nodes"
 *   c/nodes        the node table: an array of struct round_node
 *
 * Decoding checks every declared field's type and limits; a required field
 * that is missing, or any field of the wrong type, is an error whose
 * gpt_err.path names it ("me.workers", "nodes[2].inc", "[5].state").
 * Fields no table declares are ignored, so a newer coordinator may add
 * some. Pure: no I/O, no globals; any thread.
 */
#ifndef GPTD_ROUND_DOC_H
#define GPTD_ROUND_DOC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster_msg.h"
#include "gpt_err.h"

#define ROUND_DOC_TEXT_MAX       (16u << 20) /* a document's bytes (the store's value limit) */
#define ROUND_DOC_PHASE_MAX      16          /* NUL included */
#define ROUND_DOC_PREFIX_MAX     128
#define ROUND_DOC_CLOSED_MAX     160
#define ROUND_DOC_SPEC_MAX       (1u << 20) /* the job spec's JSON text */
#define ROUND_DOC_MEMBERS_MAX    65536      /* nodes of a world or of the table */
#define ROUND_DOC_RANKS_MAX      48
#define ROUND_DOC_QUARANTINE_MAX 256 /* why a node is quarantined, NUL included */

/* One member's assignment in a world ("me", and each of "nodes"). */
struct round_member {
    char id[CLUSTER_MSG_NODE_MAX];
    uint64_t inc; /* the member's incarnation (hex in JSON) */
    int rank_base;
    int workers;
    char addr[CLUSTER_MSG_ADDR_MAX];
};

struct round_members {
    struct round_member *v; /* n entries, owned */
    size_t n;
    bool present;
};

/* A job's round as published (job 0: the idle round). */
struct round_doc {
    uint64_t gen;                    /* the coordinator's generation (hex) */
    int64_t round;                   /* the round's number */
    char phase[ROUND_DOC_PHASE_MAX]; /* "idle", "forming", "running", "waiting", "stopping" */
    int64_t job;                     /* 0: no job */
    bool stop_snapshot;              /* "stop": "snapshot" (true) or "abort" */
    int64_t run_id;
    int world; /* ranks in the world */
    char prefix[ROUND_DOC_PREFIX_MAX];
    /* optional */
    char *spec;                        /* the job spec's JSON text (owned); NULL: absent */
    int64_t uid;                       /* the job's owner; -1: absent */
    uint64_t token;                    /* the job's snapshot-owner token (hex); 0: absent */
    int64_t resume_step;               /* -1: absent */
    char closed[ROUND_DOC_CLOSED_MAX]; /* why the round closed; "": absent */
    bool has_me;                       /* "me" present */
    struct round_member me;            /* this node's assignment */
    struct round_members nodes;        /* every member (the world document) */
};

/* One row of the node table (c/nodes). */
struct round_node {
    char node[CLUSTER_MSG_NODE_MAX];
    char state[CLUSTER_MSG_STATE_MAX];
    double heartbeat_age_s;
    int workers;
    char version[CLUSTER_MSG_VERSION_MAX];
    char addr[CLUSTER_MSG_ADDR_MAX];
    bool member;
    char devices[CLUSTER_MSG_DEVICES_MAX];
    json_t *gpus;                    /* an array of readings, or NULL for JSON null (owned ref) */
    int64_t job;                     /* 0: null, on no job */
    char ranks[ROUND_DOC_RANKS_MAX]; /* "first-last"; "": null */
    char role[16];                   /* "coordinator" or "member"; "": absent */
    /* A node the coordinator keeps off placement (it failed what it
     * claimed, rdzv.c): why, and until when (UTC, ISO 8601); "": absent. */
    char quarantine[ROUND_DOC_QUARANTINE_MAX];
    char quarantined_until[32];
};

/* An empty round: every optional field absent. */
void round_doc_init(struct round_doc *d);
/* Frees what d owns and leaves it as round_doc_init does; NULL allowed. */
void round_doc_done(struct round_doc *d);

/* A new JSON object of d (the caller decrefs), NULL on ENOMEM. */
json_t *round_doc_to_json(const struct round_doc *d);
/* A new JSON object of one member, NULL on ENOMEM. */
json_t *round_member_to_json(const struct round_member *m);
/* Decodes a round document (text of len bytes) into *ret, which the
 * caller frees with round_doc_done on success (on failure it is left
 * empty). Returns 0, -EMSGSIZE, -EBADMSG (not a JSON object), -EINVAL
 * (a field; err->path names it), -GPT_E_LIMIT or -ENOMEM. */
int round_doc_decode(const char *text, size_t len, struct round_doc *ret, struct gpt_err *err);

/* A new JSON array of n rows, NULL on ENOMEM. */
json_t *round_nodes_to_json(const struct round_node *rows, size_t n);
/* Decodes a node table into *ret (new, n rows: free with
 * round_nodes_free). Returns as round_doc_decode. */
int round_nodes_decode(const char *text, size_t len, struct round_node **ret, size_t *ret_n,
                       struct gpt_err *err);
void round_nodes_free(struct round_node *rows, size_t n);

#endif
