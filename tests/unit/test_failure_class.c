/*
 * Unit tests of daemon/failure_class: which failures a restart can heal.
 * Codes that say it all are final whatever the key; a plain errno is final
 * only with a key of the job's files (a collective fails with the same
 * numbers); a class survives its trip through a heartbeat's exit_rc; the
 * coordinator's record keeps the first failure and lets a final one
 * replace a retryable one, never the other way.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "failure_class.h"
#include "gpt_err.h"

static void test_codes_that_say_it_all(void **state)
{
    (void)state;
    assert_int_equal(failure_class_of(-GPT_E_SPEC, NULL), FAILURE_SPEC);
    assert_int_equal(failure_class_of(-GPT_E_SPEC, "trainer.global_batch"), FAILURE_SPEC);
    assert_int_equal(failure_class_of(-GPT_E_MODEL, "model"), FAILURE_MODEL);
    assert_int_equal(failure_class_of(-GPT_E_MODEL, NULL), FAILURE_MODEL);
    assert_int_equal(failure_class_of(-GPT_E_DATA, ""), FAILURE_DATA);
    assert_int_equal(failure_class_of(-GPT_E_PERM, NULL), FAILURE_PERMISSION);
    /* A damaged file: a snapshot's or a model's unless it names data.* */
    assert_int_equal(failure_class_of(-GPT_E_CORRUPT, NULL), FAILURE_MODEL);
    assert_int_equal(failure_class_of(-GPT_E_CORRUPT, "snapshot.dir"), FAILURE_MODEL);
    assert_int_equal(failure_class_of(-GPT_E_VERSION, NULL), FAILURE_MODEL);
    assert_int_equal(failure_class_of(-GPT_E_CORRUPT, "data.vocab"), FAILURE_DATA);
    assert_int_equal(failure_class_of(-GPT_E_VERSION, "data.path"), FAILURE_DATA);
    assert_int_equal(failure_class_of(-GPT_E_CORRUPT, "data"), FAILURE_DATA);
    /* "database" is not the data section */
    assert_int_equal(failure_class_of(-GPT_E_CORRUPT, "database"), FAILURE_MODEL);
    assert_int_equal(failure_class_of(0, NULL), FAILURE_RETRY);
    assert_int_equal(failure_class_of(1, "data.path"), FAILURE_RETRY);
}

static void test_errno_needs_a_key(void **state)
{
    (void)state;
    /* Permission: of a job file, not of a socket. */
    assert_int_equal(failure_class_of(-EACCES, "data.path"), FAILURE_PERMISSION);
    assert_int_equal(failure_class_of(-EACCES, "snapshot.dir"), FAILURE_PERMISSION);
    assert_int_equal(failure_class_of(-EPERM, "model.init_from"), FAILURE_PERMISSION);
    assert_int_equal(failure_class_of(-EACCES, NULL), FAILURE_RETRY);
    assert_int_equal(failure_class_of(-EPERM, ""), FAILURE_RETRY);
    /* Missing or wrong files of the data and the model; a snapshot
     * folder is made again by the next round. */
    assert_int_equal(failure_class_of(-ENOENT, "data.path"), FAILURE_DATA);
    assert_int_equal(failure_class_of(-ENOENT, "data.vocab"), FAILURE_DATA);
    assert_int_equal(failure_class_of(-EISDIR, "data.val_path"), FAILURE_DATA);
    assert_int_equal(failure_class_of(-GPT_E_LIMIT, "data.path"), FAILURE_DATA);
    assert_int_equal(failure_class_of(-ENOENT, "model.init_from"), FAILURE_MODEL);
    assert_int_equal(failure_class_of(-EINVAL, "model.init_from"), FAILURE_MODEL);
    /* Spec values the engine or this host cannot run. */
    assert_int_equal(failure_class_of(-GPT_E_NODEVICE, "distributed.backend"), FAILURE_SPEC);
    assert_int_equal(failure_class_of(-EINVAL, "trainer.micro_batch"), FAILURE_SPEC);
    assert_int_equal(failure_class_of(-ENOTSUP, "trainer.precision"), FAILURE_SPEC);
    assert_int_equal(failure_class_of(-EINVAL, "model.n_head"), FAILURE_SPEC);
    assert_int_equal(failure_class_of(-EINVAL, "optimizer.lr"), FAILURE_SPEC);
    assert_int_equal(failure_class_of(-GPT_E_NODEVICE, NULL), FAILURE_RETRY);
    assert_int_equal(failure_class_of(-ETIMEDOUT, "distributed.backend"), FAILURE_RETRY);
    assert_int_equal(failure_class_of(-ENOENT, "snapshot.dir"), FAILURE_RETRY);
    assert_int_equal(failure_class_of(-ENOENT, NULL), FAILURE_RETRY);
    assert_int_equal(failure_class_of(-EINVAL, ""), FAILURE_RETRY);
    assert_int_equal(failure_class_of(-ENOENT, "snapshotting"), FAILURE_RETRY);
    /* Another job's folder. */
    assert_int_equal(failure_class_of(-EEXIST, "snapshot.dir"), FAILURE_MODEL);
    assert_int_equal(failure_class_of(-EEXIST, NULL), FAILURE_RETRY);
    /* What a restart heals, whatever key came with it. */
    const int retry[] = {-ETIMEDOUT,  -ECONNRESET, -ECONNREFUSED, -EPIPE,        -ECANCELED,
                         -EIO,        -ENOMEM,     -ENOSPC,       -EHOSTUNREACH, -GPT_E_PROTO,
                         -GPT_E_AUTH, -GPT_E_NCCL, -GPT_E_CUDA,   -GPT_E_LIMIT};
    for (size_t i = 0; i < sizeof(retry) / sizeof(retry[0]); i++) {
        assert_int_equal(failure_class_of(retry[i], NULL), FAILURE_RETRY);
        if (retry[i] != -GPT_E_LIMIT)
            assert_int_equal(failure_class_of(retry[i], "data.path"), FAILURE_RETRY);
    }
}

/* The agent sends failure_class_code; the coordinator sees no key. */
static void test_code_round_trip(void **state)
{
    (void)state;
    struct {
        int rc;
        const char *key;
    } cases[] = {
        {-ENOENT, "data.path"},   {-EACCES, "data.path"},         {-EEXIST, "snapshot.dir"},
        {-GPT_E_CORRUPT, NULL},   {-GPT_E_CORRUPT, "data.vocab"}, {-GPT_E_SPEC, "x"},
        {-GPT_E_SPEC, "workers"}, {-ETIMEDOUT, "data.path"},      {-EACCES, NULL},
        {-ECONNRESET, NULL}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        enum failure_class k = failure_class_of(cases[i].rc, cases[i].key);
        int code = failure_class_code(k, cases[i].rc);
        assert_int_equal(failure_class_of(code, NULL), k);
        if (k == FAILURE_RETRY)
            assert_int_equal(code, cases[i].rc);
        assert_true(code < 0);
    }
    assert_int_equal(failure_class_code(FAILURE_PERMISSION, -EACCES), -GPT_E_PERM);
    assert_int_equal(failure_class_code(FAILURE_DATA, -ENOENT), -GPT_E_DATA);
    assert_int_equal(failure_class_code(FAILURE_MODEL, -EEXIST), -GPT_E_MODEL);
    assert_string_equal(gpt_errname(-GPT_E_PERM), "permission_denied");
    assert_string_equal(gpt_errname(-GPT_E_MODEL), "model_mismatch");
}

static void test_note(void **state)
{
    (void)state;
    bool failure = false;
    enum failure_class cls = FAILURE_RETRY;
    char why[256] = "";
    /* A peer's lost connection first, then rank 0's own data error: final. */
    failure_note(&failure, &cls, why, sizeof(why), "n2", -ECONNRESET, "collective failed");
    assert_true(failure);
    assert_int_equal(cls, FAILURE_RETRY);
    assert_string_equal(why, "node n2 failed: collective failed");
    failure_note(&failure, &cls, why, sizeof(why), "n3", -ETIMEDOUT, "timed out");
    assert_string_equal(why, "node n2 failed: collective failed"); /* the first one stays */
    failure_note(&failure, &cls, why, sizeof(why), "n1", -GPT_E_DATA, "data.path: x: gone");
    assert_true(failure_class_final(cls));
    assert_string_equal(why, "node n1 failed (data error): data.path: x: gone");
    /* Nothing replaces a final failure. */
    failure_note(&failure, &cls, why, sizeof(why), "n2", -GPT_E_PERM, "other");
    failure_note(&failure, &cls, why, sizeof(why), "n2", -ECONNRESET, "other");
    assert_string_equal(why, "node n1 failed (data error): data.path: x: gone");
    /* Successful exits are no failures; an empty message gets the code's. */
    failure = false;
    cls = FAILURE_RETRY;
    failure_note(&failure, &cls, why, sizeof(why), "n1", 0, "");
    assert_false(failure);
    failure_note(&failure, &cls, why, sizeof(why), "n1", -GPT_E_PERM, "");
    assert_true(failure_class_final(cls));
    assert_non_null(strstr(why, "(permission error): the job's owner may not open"));
    /* A long message is cut at the buffer. */
    char msg[600];
    memset(msg, 'x', sizeof(msg) - 1);
    msg[sizeof(msg) - 1] = '\0';
    failure = false;
    cls = FAILURE_RETRY;
    failure_note(&failure, &cls, why, 64, "n1", -GPT_E_MODEL, msg);
    assert_int_equal(strlen(why), 63);
    assert_string_equal(failure_class_text(FAILURE_MODEL), "snapshot or model mismatch");
    assert_string_equal(failure_class_text(FAILURE_SPEC), "spec error");
}

/* A node that could not deliver what it claimed: its own worker count
 * over its GPUs, or the node-fault code; not a spec error, not final. */
static void test_node_fault(void **state)
{
    (void)state;
    assert_int_equal(failure_class_of(-GPT_E_NODE_FAULT, NULL), FAILURE_NODE);
    assert_int_equal(failure_class_of(-GPT_E_SPEC, "workers"), FAILURE_NODE);
    /* The spec's own worker count stays the spec's error. */
    assert_int_equal(failure_class_of(-GPT_E_SPEC, "distributed.workers_per_node"), FAILURE_SPEC);
    assert_int_equal(failure_class_of(-GPT_E_SPEC, "workers_x"), FAILURE_SPEC);
    assert_int_equal(failure_class_code(FAILURE_NODE, -GPT_E_SPEC), -GPT_E_NODE_FAULT);
    assert_false(failure_class_final(FAILURE_NODE));
    assert_false(failure_class_final(FAILURE_RETRY));
    assert_true(failure_class_final(FAILURE_SPEC));
    assert_string_equal(failure_class_text(FAILURE_NODE), "node fault");
    assert_string_equal(gpt_errname(-GPT_E_NODE_FAULT), "node_fault");

    /* A peer's lost connection first, then the node that could not start
     * its ranks: the node fault is recorded; a spec error outranks it. */
    bool failure = false;
    enum failure_class cls = FAILURE_RETRY;
    char why[256] = "";
    assert_true(failure_note(&failure, &cls, why, sizeof(why), "ok", -ECONNRESET, "lost"));
    assert_true(failure_note(&failure, &cls, why, sizeof(why), "zm", -GPT_E_NODE_FAULT,
                             "workers asks for 3 workers but this node has 1 GPU"));
    assert_int_equal(cls, FAILURE_NODE);
    assert_string_equal(why, "node zm failed (node fault): workers asks for 3 workers but this "
                             "node has 1 GPU");
    assert_false(failure_note(&failure, &cls, why, sizeof(why), "ok", -ETIMEDOUT, "late"));
    assert_false(failure_note(&failure, &cls, why, sizeof(why), "z2", -GPT_E_NODE_FAULT, "x"));
    assert_string_equal(why, "node zm failed (node fault): workers asks for 3 workers but this "
                             "node has 1 GPU");
    assert_true(failure_note(&failure, &cls, why, sizeof(why), "ok", -GPT_E_DATA, "data.path"));
    assert_int_equal(cls, FAILURE_DATA);
    assert_false(failure_note(&failure, &cls, why, sizeof(why), "zm", -GPT_E_NODE_FAULT, "x"));
    assert_int_equal(cls, FAILURE_DATA);
}

/* The quarantine doubles per strike and stops at its cap. */
static void test_quarantine_backoff(void **state)
{
    (void)state;
    assert_int_equal(failure_quarantine_s(0), FAILURE_QUARANTINE_BASE_S);
    assert_int_equal(failure_quarantine_s(1), FAILURE_QUARANTINE_BASE_S);
    assert_int_equal(failure_quarantine_s(2), 2 * FAILURE_QUARANTINE_BASE_S);
    assert_int_equal(failure_quarantine_s(3), 4 * FAILURE_QUARANTINE_BASE_S);
    assert_int_equal(failure_quarantine_s(40), FAILURE_QUARANTINE_MAX_S);
    assert_int_equal(failure_quarantine_s(1000000), FAILURE_QUARANTINE_MAX_S);
    for (int i = 1; i < 20; i++)
        assert_true(failure_quarantine_s(i + 1) >= failure_quarantine_s(i));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codes_that_say_it_all), cmocka_unit_test(test_errno_needs_a_key),
        cmocka_unit_test(test_code_round_trip),       cmocka_unit_test(test_node_fault),
        cmocka_unit_test(test_quarantine_backoff),    cmocka_unit_test(test_note),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
