/*
 * failure_class: the retry-or-fail rule of job failures (see
 * failure_class.h). Pure; any thread.
 */
#include "failure_class.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gpt_err.h"

/* key is `section` or one of its keys ("data", "data.path"). */
static bool key_in(const char *key, const char *section)
{
    size_t n = strlen(section);
    return key && strncmp(key, section, n) == 0 && (key[n] == '\0' || key[n] == '.');
}

/* errno values that say what a file or a value is (missing, of the wrong kind, too
 * many, malformed), not what happened on the way to it. */
static bool file_is_wrong(int rc)
{
    switch (rc) {
    case -ENOENT:
    case -ENOTDIR:
    case -EISDIR:
    case -ELOOP:
    case -ENAMETOOLONG:
    case -EINVAL:
    case -GPT_E_LIMIT:
        return true;
    default:
        return false;
    }
}

enum failure_class failure_class_of(int rc, const char *key)
{
    if (rc >= 0)
        return FAILURE_RETRY;
    switch (rc) {
    case -GPT_E_NODE_FAULT:
        return FAILURE_NODE;
    case -GPT_E_SPEC:
        /* The node's own worker count (more than its GPUs): not the job's. */
        return key && strcmp(key, "workers") == 0 ? FAILURE_NODE : FAILURE_SPEC;
    case -GPT_E_MODEL:
        return FAILURE_MODEL;
    case -GPT_E_DATA:
        return FAILURE_DATA;
    case -GPT_E_PERM:
        return FAILURE_PERMISSION;
    case -GPT_E_CORRUPT:
    case -GPT_E_VERSION:
        /* Damaged or unreadable files: a dataset or vocabulary when the
         * error names data.*, otherwise a snapshot, its folder's owner
         * marker or a model.init_from file. */
        return key_in(key, "data") ? FAILURE_DATA : FAILURE_MODEL;
    case -EACCES:
    case -EPERM:
        return key && key[0] ? FAILURE_PERMISSION : FAILURE_RETRY;
    case -EEXIST:
        /* The snapshot folder belongs to another job (its owner marker). */
        return key_in(key, "snapshot") ? FAILURE_MODEL : FAILURE_RETRY;
    default:
        break;
    }
    /* A snapshot folder that is missing now is made again by the next
     * round; a data or model file is not, and a value of the spec the
     * engine or this host cannot run (no GPU for distributed.backend nccl)
     * stays as it is. */
    if (!file_is_wrong(rc) && rc != -ENOTSUP && rc != -GPT_E_NODEVICE)
        return FAILURE_RETRY;
    if (key_in(key, "data"))
        return FAILURE_DATA;
    if (key_in(key, "model.init_from"))
        return FAILURE_MODEL;
    if (key_in(key, "model") || key_in(key, "trainer") || key_in(key, "optimizer") ||
        key_in(key, "distributed"))
        return FAILURE_SPEC;
    return FAILURE_RETRY;
}

int failure_class_code(enum failure_class k, int rc)
{
    switch (k) {
    case FAILURE_SPEC:
        return -GPT_E_SPEC;
    case FAILURE_MODEL:
        return -GPT_E_MODEL;
    case FAILURE_DATA:
        return -GPT_E_DATA;
    case FAILURE_PERMISSION:
        return -GPT_E_PERM;
    case FAILURE_NODE:
        return -GPT_E_NODE_FAULT;
    case FAILURE_RETRY:
        break;
    }
    return rc;
}

const char *failure_class_text(enum failure_class k)
{
    switch (k) {
    case FAILURE_SPEC:
        return "spec error";
    case FAILURE_MODEL:
        return "snapshot or model mismatch";
    case FAILURE_DATA:
        return "data error";
    case FAILURE_PERMISSION:
        return "permission error";
    case FAILURE_NODE:
        return "node fault";
    case FAILURE_RETRY:
        break;
    }
    return "retryable error";
}

bool failure_class_final(enum failure_class k)
{
    return k != FAILURE_RETRY && k != FAILURE_NODE;
}

int failure_quarantine_s(int strikes)
{
    int s = FAILURE_QUARANTINE_BASE_S;
    for (int i = 1; i < strikes && s < FAILURE_QUARANTINE_MAX_S; i++)
        s *= 2;
    return s < FAILURE_QUARANTINE_MAX_S ? s : FAILURE_QUARANTINE_MAX_S;
}

/* Which recorded failure a later one replaces: final > node > retry. */
static int failure_rank(enum failure_class k)
{
    return failure_class_final(k) ? 2 : k == FAILURE_NODE ? 1 : 0;
}

bool failure_note(bool *failure, enum failure_class *cls, char *why, size_t cap, const char *node,
                  int rc, const char *msg)
{
    if (rc >= 0)
        return false;
    enum failure_class k = failure_class_of(rc, NULL);
    if (*failure && failure_rank(k) <= failure_rank(*cls))
        return false;
    *failure = true;
    *cls = k;
    const char *text = msg && msg[0] ? msg : gpt_strerror(rc);
    if (k != FAILURE_RETRY)
        snprintf(why, cap, "node %.60s failed (%s): %s", node, failure_class_text(k), text);
    else
        snprintf(why, cap, "node %.60s failed: %s", node, text);
    return true;
}
