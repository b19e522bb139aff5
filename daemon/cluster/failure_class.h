/*
 * failure_class: which failures of a job a restart can heal. A node lost,
 * a connection reset, a timeout may not happen again and are retried
 * (distributed.max_restarts); an error of the spec, a snapshot or model
 * file that does not fit the job, a data error or a file the job's owner
 * may not open happen again on every try, and fail the job at once.
 *
 * The node that sees the error knows the job key it names (struct
 * gpt_err's path) and sends the class as the heartbeat's exit_rc
 * (failure_class_code); the coordinator, which sees only that code,
 * classifies it with failure_class_of(code, NULL) (failure_note). Pure:
 * no I/O, no globals; any thread.
 *
 * A third kind is the node's, not the job's: a node that could not deliver
 * a resource it reported (more workers than its GPUs, a GPU it counted that
 * does not open). Retrying the job elsewhere heals it; retrying it on that
 * node does not. The coordinator quarantines the node (rdzv.c) and forms
 * the job again without it, spending none of its restarts.
 */
#ifndef GPTD_FAILURE_CLASS_H
#define GPTD_FAILURE_CLASS_H

#include <stdbool.h>
#include <stddef.h>

enum failure_class {
    FAILURE_RETRY = 0,  /* node loss, network, timeouts and anything not below */
    FAILURE_SPEC,       /* the job spec cannot run (-GPT_E_SPEC) */
    FAILURE_MODEL,      /* a snapshot or model file does not fit the job (-GPT_E_MODEL) */
    FAILURE_DATA,       /* data or tokenizer files missing or unusable (-GPT_E_DATA) */
    FAILURE_PERMISSION, /* the job's owner may not open its files (-GPT_E_PERM) */
    FAILURE_NODE,       /* the node failed what it claimed (-GPT_E_NODE_FAULT) */
};

/* The first quarantine of a node lasts this long; each further one while
 * its claim stays the same doubles it, up to FAILURE_QUARANTINE_MAX_S. */
#define FAILURE_QUARANTINE_BASE_S 300
#define FAILURE_QUARANTINE_MAX_S  21600
/* A node whose own retryable failure is the first of its world, before
 * that world's first step, on this many different jobs in a row is
 * quarantined too: a pattern across jobs is the node's. */
#define FAILURE_EARLY_JOBS 3

/* The class of a failure from its code (negative) and the job key its
 * error names (NULL or "": none). A code that says it all (-GPT_E_SPEC,
 * -GPT_E_DATA, -GPT_E_MODEL, -GPT_E_PERM; -GPT_E_CORRUPT and
 * -GPT_E_VERSION: a damaged or foreign file) needs no key; a plain errno
 * (-EACCES, -ENOENT, -EINVAL, ...) is final only when it names a job key
 * (data.* a data error, model.init_from a model mismatch, other model.*,
 * trainer.*, optimizer.*, distributed.* a spec error, snapshot.dir only
 * for -EACCES/-EPERM and another job's folder), since a collective or a
 * store connection fails with the same numbers. -GPT_E_NODE_FAULT, and
 * -GPT_E_SPEC naming "workers" (this node's own worker count, gptd.conf
 * `workers`, not a job key) are FAILURE_NODE. rc >= 0: FAILURE_RETRY. */
enum failure_class failure_class_of(int rc, const char *key);

/* The code a failure of class `k` travels as (a heartbeat's exit_rc), so
 * that failure_class_of(code, NULL) gives `k` back: -GPT_E_SPEC,
 * -GPT_E_MODEL, -GPT_E_DATA, -GPT_E_PERM, -GPT_E_NODE_FAULT, or rc itself
 * for FAILURE_RETRY. */
int failure_class_code(enum failure_class k, int rc);

/* What the class is in words, for messages: "spec error", "snapshot or
 * model mismatch", "data error", "permission error", "node fault",
 * "retryable error". */
const char *failure_class_text(enum failure_class k);

/* Whether a failure of class k fails the job at once: any class but
 * FAILURE_RETRY and FAILURE_NODE. */
bool failure_class_final(enum failure_class k);

/* Seconds of a node's quarantine after its `strikes`-th node fault with
 * the same claim (1: the first): FAILURE_QUARANTINE_BASE_S doubled per
 * strike before it, at most FAILURE_QUARANTINE_MAX_S. */
int failure_quarantine_s(int strikes);

/* The coordinator's record of the failures of a running world: `*failure`
 * (a member failed), `*cls` (the class of the recorded one) and `why`
 * (cap bytes, the message of the job's end and events). A failed exit
 * (rc < 0) of `node` with message `msg` is recorded when it is the world's
 * first failure, or when it outranks the recorded one: a final class
 * outranks a node fault, which outranks a retryable error (a rank's own
 * data error, or the node that could not start its ranks, may reach the
 * coordinator after its peers' lost connections). Returns true when it was
 * recorded. */
bool failure_note(bool *failure, enum failure_class *cls, char *why, size_t cap, const char *node,
                  int rc, const char *msg);

#endif
