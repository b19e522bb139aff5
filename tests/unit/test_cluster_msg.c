/*
 * Unit tests of proto/cluster_msg: every message type round-trips through
 * encode and decode; every declared limit is refused, by decode and by
 * encode, with an error whose path and message name the field; replies,
 * reply keys, feed chunks and the feed head.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cluster_msg.h"
#include "ctl.h"

static struct cluster_msg roundtrip(const struct cluster_msg *m)
{
    char *line = NULL;
    size_t n = 0;
    struct gpt_err err;
    gpt_err_clear(&err);
    int rc = cluster_msg_encode(m, &line, &n, &err);
    if (rc != 0)
        fail_msg("encode: %s", err.msg);
    assert_int_equal(strlen(line), n);
    struct cluster_msg d;
    rc = cluster_msg_decode(line, n, &d, &err);
    if (rc != 0)
        fail_msg("decode %s: %s", line, err.msg);
    free(line);
    return d;
}

static void base(struct cluster_msg *m, int type)
{
    cluster_msg_init(m, type);
    snprintf(m->node, sizeof(m->node), "node-a");
    m->inc = 0x1234abcd5678ef00ull;
}

static void test_roundtrip_hb(void **state)
{
    (void)state;
    struct cluster_msg m;
    base(&m, CLUSTER_MSG_HB);
    m.gen = UINT64_MAX;
    m.round = 12;
    m.job = 3;
    m.snap_step = 40;
    m.workers = CLUSTER_MSG_WORKERS_MAX;
    snprintf(m.addr, sizeof(m.addr), "10.0.0.1:29500");
    snprintf(m.version, sizeof(m.version), "1.2.3");
    snprintf(m.devices, sizeof(m.devices), "cpu");
    snprintf(m.state, sizeof(m.state), "joined");
    m.exit_round = 11;
    m.exit_rc = -110;
    m.exit_step = 39;
    snprintf(m.exit_msg, sizeof(m.exit_msg), "worker 1: timed out");
    m.present = ~0u;
    struct cluster_msg d = roundtrip(&m);
    assert_int_equal(d.type, CLUSTER_MSG_HB);
    assert_string_equal(d.node, "node-a");
    assert_true(d.inc == m.inc);
    assert_true(d.gen == UINT64_MAX);
    assert_int_equal(d.round, 12);
    assert_int_equal(d.job, 3);
    assert_int_equal(d.snap_step, 40);
    assert_int_equal(d.workers, CLUSTER_MSG_WORKERS_MAX);
    assert_string_equal(d.addr, "10.0.0.1:29500");
    assert_string_equal(d.version, "1.2.3");
    assert_string_equal(d.devices, "cpu");
    assert_string_equal(d.state, "joined");
    assert_int_equal(d.exit_round, 11);
    assert_int_equal(d.exit_rc, -110);
    assert_int_equal(d.exit_step, 39);
    assert_string_equal(d.exit_msg, "worker 1: timed out");
    /* Fields of other types are not written even when marked. */
    assert_false(d.present & CLUSTER_MSG_BIT(SPEC));
    assert_false(d.present & CLUSTER_MSG_BIT(REQ));

    /* Only the required fields: the rest decode to their defaults. */
    base(&m, CLUSTER_MSG_JOIN);
    d = roundtrip(&m);
    assert_int_equal(d.type, CLUSTER_MSG_JOIN);
    assert_int_equal(d.present, CLUSTER_MSG_BIT(NODE) | CLUSTER_MSG_BIT(INC));
    assert_int_equal(d.round, -1);
    assert_int_equal(d.snap_step, -1);
    assert_int_equal(d.workers, 1);
    assert_int_equal(d.exit_round, -1);

    base(&m, CLUSTER_MSG_LEAVE);
    d = roundtrip(&m);
    assert_int_equal(d.type, CLUSTER_MSG_LEAVE);
    assert_string_equal(d.node, "node-a");
}

static void test_roundtrip_records(void **state)
{
    (void)state;
    struct cluster_msg m;
    base(&m, CLUSTER_MSG_METRIC);
    m.job = 5;
    m.metric.step = 17;
    m.metric.loss = 2.5;
    m.metric.val_loss = 0.0 / 0.0;
    m.metric.accuracy = 0.0 / 0.0;
    m.metric.world_size = 4;
    struct cluster_msg d = roundtrip(&m);
    assert_int_equal(d.type, CLUSTER_MSG_METRIC);
    assert_int_equal(d.job, 5);
    assert_int_equal(d.metric.step, 17);
    assert_true(d.metric.loss == 2.5);
    assert_int_equal(d.metric.world_size, 4);
    assert_false(d.present & CLUSTER_MSG_BIT(INC)); /* metric does not take inc */

    base(&m, CLUSTER_MSG_EVENT);
    m.job = 5;
    snprintf(m.event.kind, sizeof(m.event.kind), "snapshot");
    snprintf(m.event.message, sizeof(m.event.message), "step 20");
    m.event.step = 20;
    d = roundtrip(&m);
    assert_int_equal(d.type, CLUSTER_MSG_EVENT);
    assert_string_equal(d.event.kind, "snapshot");
    assert_string_equal(d.event.message, "step 20");
    assert_int_equal(d.event.step, 20);
}

static void test_roundtrip_requests(void **state)
{
    (void)state;
    struct cluster_msg m;
    base(&m, CLUSTER_MSG_SUBMIT);
    m.req = 9;
    m.uid = 1000;
    m.priority = -CLUSTER_MSG_PRIO_MAX;
    m.present |= CLUSTER_MSG_BIT(PRIO);
    json_t *spec = json_pack("{s:{s:i}}", "model", "n_layer", 2);
    m.spec = spec;
    struct cluster_msg d = roundtrip(&m);
    assert_int_equal(d.type, CLUSTER_MSG_SUBMIT);
    assert_int_equal(d.req, 9);
    assert_int_equal(d.uid, 1000);
    assert_int_equal(d.priority, -CLUSTER_MSG_PRIO_MAX);
    assert_true(json_equal(d.spec, spec));
    cluster_msg_done(&d);
    assert_null(d.spec);
    json_decref(spec);

    /* Every forwarded read carries its control op. */
    static const int ops[] = {GPT_CTL_OP_LIST,   GPT_CTL_OP_STATUS, GPT_CTL_OP_SNAPSHOTS,
                              GPT_CTL_OP_LOGS,   GPT_CTL_OP_CANCEL, GPT_CTL_OP_RESUME,
                              GPT_CTL_OP_SAMPLE, GPT_CTL_OP_SAMPLES};
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        base(&m, CLUSTER_MSG_READ);
        m.req = 1;
        m.op = ops[i];
        m.args.job = 4;
        m.args.uid = 0; /* root: present, not the default */
        m.args.snapshot = 2;
        m.args.since = 10;
        m.args.after = -1;
        m.args.limit = CLUSTER_MSG_READ_LIMIT;
        m.present |= CLUSTER_MSG_BIT(ARGS);
        d = roundtrip(&m);
        assert_int_equal(d.op, ops[i]);
        assert_int_equal(cluster_msg_read_op(cluster_msg_read_name(ops[i])), ops[i]);
        assert_int_equal(d.args.job, 4);
        assert_int_equal(d.args.uid, 0);
        assert_int_equal(d.args.snapshot, 2);
        assert_int_equal(d.args.since, 10);
        assert_int_equal(d.args.after, -1);
        assert_int_equal(d.args.limit, CLUSTER_MSG_READ_LIMIT);
    }
    assert_string_equal(cluster_msg_read_name(GPT_CTL_OP_LOGS), "history");
    assert_string_equal(cluster_msg_read_name(GPT_CTL_OP_SAMPLE), "locate");
    assert_string_equal(cluster_msg_read_name(GPT_CTL_OP_SAMPLES), "samples");
    assert_null(cluster_msg_read_name(GPT_CTL_OP_SUBMIT));
    assert_null(cluster_msg_read_name(GPT_CTL_OP_PING));

    /* Arguments left at their defaults stay off the wire and decode back. */
    base(&m, CLUSTER_MSG_READ);
    m.req = 2;
    m.op = GPT_CTL_OP_LIST;
    m.present |= CLUSTER_MSG_BIT(ARGS);
    d = roundtrip(&m);
    assert_int_equal(d.args.uid, -1);
    struct gpt_err e;
    char *line = NULL;
    size_t n = 0;
    assert_int_equal(cluster_msg_encode(&m, &line, &n, &e), 0);
    assert_non_null(strstr(line, "\"args\":{}"));
    free(line);

    /* A member's sample reply travels as an object; one without it, or
     * with a string there, is refused naming "s". */
    base(&m, CLUSTER_MSG_SAMPLE);
    m.job = 7;
    json_t *rec = json_pack("{s:s, s:i}", "prompt", "<b>", "step", 20);
    m.sample = rec;
    d = roundtrip(&m);
    assert_int_equal(d.type, CLUSTER_MSG_SAMPLE);
    assert_int_equal(d.job, 7);
    assert_true(json_equal(d.sample, rec));
    cluster_msg_done(&d);
    assert_null(d.sample);
    json_decref(rec);
    static const char none[] = "{\"t\":\"sample\",\"job\":7,\"node\":\"a\"}";
    assert_int_equal(cluster_msg_decode(none, sizeof(none) - 1, &d, &e), -EINVAL);
    assert_string_equal(e.path, "s");
    cluster_msg_done(&d);
    static const char bad[] = "{\"t\":\"sample\",\"job\":7,\"node\":\"a\",\"s\":\"x\"}";
    assert_int_equal(cluster_msg_decode(bad, sizeof(bad) - 1, &d, &e), -EINVAL);
    assert_string_equal(e.path, "s");
    cluster_msg_done(&d);
}

/* Decodes `line` and expects -EINVAL with `path` as err.path and `path`
 * inside the message. */
static void refused(const char *line, const char *path)
{
    struct cluster_msg d;
    struct gpt_err err;
    gpt_err_clear(&err);
    int rc = cluster_msg_decode(line, strlen(line), &d, &err);
    if (rc != -EINVAL)
        fail_msg("%s: rc %d, not -EINVAL", line, rc);
    if (strcmp(err.path, path) != 0)
        fail_msg("%s: path \"%s\", not \"%s\" (%s)", line, err.path, path, err.msg);
    if (!strstr(err.msg, path))
        fail_msg("%s: message \"%s\" does not name %s", line, err.msg, path);
    cluster_msg_done(&d);
}

static char *repeat(char ch, size_t n)
{
    char *s = malloc(n + 1);
    assert_non_null(s);
    memset(s, ch, n);
    s[n] = '\0';
    return s;
}

static void test_limits_decode(void **state)
{
    (void)state;
    char line[4096];
    const char *hb = "{\"t\":\"hb\",\"node\":\"a\",\"inc\":\"1\"";
    struct {
        const char *field;
        size_t max;
    } strs[] = {{"node", CLUSTER_MSG_NODE_MAX - 1},   {"addr", CLUSTER_MSG_ADDR_MAX - 1},
                {"ver", CLUSTER_MSG_VERSION_MAX - 1}, {"dev", CLUSTER_MSG_DEVICES_MAX - 1},
                {"state", CLUSTER_MSG_STATE_MAX - 1}, {"exit_msg", CLUSTER_MSG_EXIT_MSG_MAX - 1},
                {"gpu", CLUSTER_MSG_GPUS_MAX - 1}};
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        char *ok = repeat('x', strs[i].max), *big = repeat('x', strs[i].max + 1);
        struct cluster_msg d;
        snprintf(line, sizeof(line), "{\"t\":\"hb\",\"inc\":\"1\",\"node\":\"n\",\"%s\":\"%s\"}",
                 strs[i].field, ok);
        if (strcmp(strs[i].field, "node") == 0)
            snprintf(line, sizeof(line), "{\"t\":\"hb\",\"inc\":\"1\",\"node\":\"%s\"}", ok);
        assert_int_equal(cluster_msg_decode(line, strlen(line), &d, NULL), 0);
        snprintf(line, sizeof(line), "{\"t\":\"hb\",\"inc\":\"1\",\"node\":\"n\",\"%s\":\"%s\"}",
                 strs[i].field, big);
        if (strcmp(strs[i].field, "node") == 0)
            snprintf(line, sizeof(line), "{\"t\":\"hb\",\"inc\":\"1\",\"node\":\"%s\"}", big);
        refused(line, strs[i].field);
        free(ok);
        free(big);
    }
    refused("{\"t\":\"hb\",\"inc\":\"1\",\"node\":\"\"}", "node");
    /* A NUL inside a string never gets as far as a field. */
    const char *nul = "{\"t\":\"hb\",\"inc\":\"1\",\"node\":\"a\\u0000b\"}";
    struct cluster_msg dn;
    assert_int_equal(cluster_msg_decode(nul, strlen(nul), &dn, NULL), -EBADMSG);
    refused("{\"t\":\"hb\",\"inc\":\"1\"}", "node");
    refused("{\"t\":\"hb\",\"node\":\"a\"}", "inc");
    refused("{\"t\":\"hb\",\"node\":\"a\",\"inc\":\"\"}", "inc");
    refused("{\"t\":\"hb\",\"node\":\"a\",\"inc\":\"12345678901234567\"}", "inc");
    refused("{\"t\":\"hb\",\"node\":\"a\",\"inc\":\"xyz\"}", "inc");
    refused("{\"t\":\"hb\",\"node\":\"a\",\"inc\":7}", "inc");

    /* Integer ranges: the bound is taken, one past it refused. */
    struct {
        const char *field;
        long long ok, bad;
    } ints[] = {{"round", -1, -2},       {"job", 0, -1},
                {"snap", -1, -2},        {"workers", 1, 0},
                {"workers", 1024, 1025}, {"exit_round", -1, -2},
                {"exit_step", -1, -2},   {"exit_rc", INT32_MIN, (long long)INT32_MIN - 1}};
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        struct cluster_msg d;
        snprintf(line, sizeof(line), "%s,\"%s\":%lld}", hb, ints[i].field, ints[i].ok);
        assert_int_equal(cluster_msg_decode(line, strlen(line), &d, NULL), 0);
        snprintf(line, sizeof(line), "%s,\"%s\":%lld}", hb, ints[i].field, ints[i].bad);
        refused(line, ints[i].field);
        snprintf(line, sizeof(line), "%s,\"%s\":\"1\"}", hb, ints[i].field);
        refused(line, ints[i].field);
    }
    refused("{\"t\":\"hb\",\"node\":\"a\",\"inc\":\"1\",\"exit_rc\":2147483648}", "exit_rc");

    /* Fields of another type, and unknown ones. */
    refused("{\"t\":\"hb\",\"node\":\"a\",\"inc\":\"1\",\"spec\":{}}", "spec");
    refused("{\"t\":\"leave\",\"node\":\"a\",\"inc\":\"1\",\"round\":1}", "round");
    refused("{\"t\":\"hb\",\"node\":\"a\",\"inc\":\"1\",\"bogus\":1}", "bogus");
    refused("{\"t\":\"nope\",\"node\":\"a\"}", "t");
    refused("{\"node\":\"a\"}", "t");

    /* metric and event carry valid records. */
    refused("{\"t\":\"metric\",\"node\":\"a\",\"m\":{\"step\":1}}", "job");
    refused("{\"t\":\"metric\",\"node\":\"a\",\"job\":1}", "m");
    refused("{\"t\":\"metric\",\"node\":\"a\",\"job\":1,\"m\":[]}", "m");
    refused("{\"t\":\"event\",\"node\":\"a\",\"job\":1}", "e");
    refused("{\"t\":\"event\",\"node\":\"a\",\"job\":1,\"e\":7}", "e");

    /* submit */
    const char *sub = "{\"t\":\"submit\",\"node\":\"a\",\"inc\":\"1\"";
    snprintf(line, sizeof(line), "%s,\"req\":1,\"uid\":0,\"spec\":{}}", sub);
    struct cluster_msg d;
    assert_int_equal(cluster_msg_decode(line, strlen(line), &d, NULL), 0);
    cluster_msg_done(&d);
    snprintf(line, sizeof(line), "%s,\"uid\":0,\"spec\":{}}", sub);
    refused(line, "req");
    snprintf(line, sizeof(line), "%s,\"req\":0,\"uid\":0,\"spec\":{}}", sub);
    refused(line, "req");
    snprintf(line, sizeof(line), "%s,\"req\":1,\"spec\":{}}", sub);
    refused(line, "uid");
    snprintf(line, sizeof(line), "%s,\"req\":1,\"uid\":-1,\"spec\":{}}", sub);
    refused(line, "uid");
    snprintf(line, sizeof(line), "%s,\"req\":1,\"uid\":4294967295,\"spec\":{}}", sub);
    refused(line, "uid");
    snprintf(line, sizeof(line), "%s,\"req\":1,\"uid\":0}", sub);
    refused(line, "spec");
    snprintf(line, sizeof(line), "%s,\"req\":1,\"uid\":0,\"spec\":[]}", sub);
    refused(line, "spec");
    snprintf(line, sizeof(line), "%s,\"req\":1,\"uid\":0,\"spec\":{},\"prio\":1000001}", sub);
    refused(line, "prio");
    snprintf(line, sizeof(line), "%s,\"req\":1,\"uid\":0,\"spec\":{},\"prio\":-1000001}", sub);
    refused(line, "prio");

    /* read */
    const char *rd = "{\"t\":\"read\",\"node\":\"a\",\"inc\":\"1\",\"req\":1";
    snprintf(line, sizeof(line), "%s}", rd);
    refused(line, "op");
    snprintf(line, sizeof(line), "%s,\"op\":\"submit\"}", rd);
    refused(line, "op");
    snprintf(line, sizeof(line), "%s,\"op\":\"logs\"}", rd); /* the wire name is "history" */
    refused(line, "op");
    snprintf(line, sizeof(line), "%s,\"op\":\"list\",\"args\":[]}", rd);
    refused(line, "args");
    snprintf(line, sizeof(line), "%s,\"op\":\"list\",\"args\":{\"x\":1}}", rd);
    refused(line, "args");
    const char *args[] = {"job", "uid", "snapshot", "since", "after", "limit"};
    for (size_t i = 0; i < sizeof(args) / sizeof(args[0]); i++) {
        char path[32];
        snprintf(path, sizeof(path), "args.%s", args[i]);
        snprintf(line, sizeof(line), "%s,\"op\":\"history\",\"args\":{\"%s\":%d}}", rd, args[i],
                 strcmp(args[i], "after") == 0 ? -2 : -1); /* after: -1 is "from the start" */
        refused(line, path);
        snprintf(line, sizeof(line), "%s,\"op\":\"history\",\"args\":{\"%s\":true}}", rd, args[i]);
        refused(line, path);
    }
    snprintf(line, sizeof(line), "%s,\"op\":\"history\",\"args\":{\"limit\":%d}}", rd,
             CLUSTER_MSG_READ_LIMIT + 1);
    refused(line, "args.limit");
}

static void test_limits_size_and_json(void **state)
{
    (void)state;
    struct cluster_msg d;
    struct gpt_err err;
    /* The length is checked before anything is parsed or allocated. */
    assert_int_equal(cluster_msg_decode("{}", CLUSTER_MSG_LINE_MAX + 1, &d, &err), -EMSGSIZE);
    assert_non_null(strstr(err.msg, "longer than"));
    assert_int_equal(cluster_msg_decode("not json", 8, &d, &err), -EBADMSG);
    assert_int_equal(cluster_msg_decode("[1]", 3, &d, &err), -EBADMSG);
    /* Duplicate keys are refused, not resolved silently. */
    const char *dup = "{\"t\":\"leave\",\"node\":\"a\",\"node\":\"b\",\"inc\":\"1\"}";
    assert_int_equal(cluster_msg_decode(dup, strlen(dup), &d, &err), -EBADMSG);
}

/* Encode refuses what decode would refuse, naming the field. */
static void test_limits_encode(void **state)
{
    (void)state;
    struct cluster_msg m;
    char *line = NULL;
    size_t n;
    struct gpt_err err;

    base(&m, CLUSTER_MSG_HB);
    m.workers = 0;
    m.present |= CLUSTER_MSG_BIT(WORKERS);
    assert_int_equal(cluster_msg_encode(&m, &line, &n, &err), -EINVAL);
    assert_string_equal(err.path, "workers");

    base(&m, CLUSTER_MSG_HB);
    m.node[0] = '\0';
    assert_int_equal(cluster_msg_encode(&m, &line, &n, &err), -EINVAL);
    assert_string_equal(err.path, "node");

    base(&m, CLUSTER_MSG_SUBMIT);
    m.req = 1;
    assert_int_equal(cluster_msg_encode(&m, &line, &n, &err), -EINVAL);
    assert_string_equal(err.path, "spec");

    base(&m, CLUSTER_MSG_READ);
    m.req = 1;
    m.op = GPT_CTL_OP_SUBMIT;
    assert_int_equal(cluster_msg_encode(&m, &line, &n, &err), -EINVAL);
    assert_string_equal(err.path, "op");

    base(&m, CLUSTER_MSG_READ);
    m.req = 1;
    m.op = GPT_CTL_OP_LOGS;
    m.args.limit = CLUSTER_MSG_READ_LIMIT + 1;
    m.present |= CLUSTER_MSG_BIT(ARGS);
    assert_int_equal(cluster_msg_encode(&m, &line, &n, &err), -EINVAL);
    assert_string_equal(err.path, "args.limit");

    m.type = CLUSTER_MSG_TYPE_COUNT;
    assert_int_equal(cluster_msg_encode(&m, &line, &n, &err), -EINVAL);
    assert_string_equal(err.path, "t");
    assert_null(line);
}

static void test_reply(void **state)
{
    (void)state;
    char *text;
    size_t n;
    struct gpt_err err;
    struct cluster_msg_reply r = {.ok = true, .job = 42};
    assert_int_equal(cluster_msg_reply_encode(&r, &text, &n, &err), 0);
    struct cluster_msg_reply d;
    assert_int_equal(cluster_msg_reply_decode(text, n, &d, &err), 0);
    assert_true(d.ok);
    assert_int_equal(d.job, 42);
    assert_null(d.result);
    free(text);

    json_t *res = json_pack("{s:[]}", "jobs");
    r = (struct cluster_msg_reply){.ok = true, .result = res};
    assert_int_equal(cluster_msg_reply_encode(&r, &text, &n, &err), 0);
    assert_int_equal(cluster_msg_reply_decode(text, n, &d, &err), 0);
    assert_true(json_equal(d.result, res));
    cluster_msg_reply_done(&d);
    json_decref(res);
    free(text);

    r = (struct cluster_msg_reply){.ok = false, .code = -EPERM};
    snprintf(r.message, sizeof(r.message), "job 3 belongs to uid 1000");
    snprintf(r.path, sizeof(r.path), "job");
    assert_int_equal(cluster_msg_reply_encode(&r, &text, &n, &err), 0);
    assert_int_equal(cluster_msg_reply_decode(text, n, &d, &err), 0);
    assert_false(d.ok);
    assert_int_equal(d.code, -EPERM);
    assert_string_equal(d.message, "job 3 belongs to uid 1000");
    assert_string_equal(d.path, "job");
    free(text);

    r.code = 0;
    assert_int_equal(cluster_msg_reply_encode(&r, &text, &n, &err), -EINVAL);
    assert_string_equal(err.path, "code");

    struct {
        const char *text, *path;
    } bad[] = {
        {"{}", "ok"},
        {"{\"ok\":1}", "ok"},
        {"{\"ok\":true,\"job\":-1}", "job"},
        {"{\"ok\":true,\"r\":[]}", "r"},
        {"{\"ok\":true,\"code\":-1}", "code"},
        {"{\"ok\":false}", "code"},
        {"{\"ok\":false,\"code\":1}", "code"},
        {"{\"ok\":false,\"code\":-1,\"message\":5}", "message"},
        {"{\"ok\":false,\"code\":-1,\"path\":5}", "path"},
        {"{\"ok\":false,\"code\":-1,\"x\":5}", "x"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        gpt_err_clear(&err);
        assert_int_equal(cluster_msg_reply_decode(bad[i].text, strlen(bad[i].text), &d, &err),
                         -EINVAL);
        if (strcmp(err.path, bad[i].path) != 0 || !strstr(err.msg, bad[i].path))
            fail_msg("%s: path \"%s\" message \"%s\"", bad[i].text, err.path, err.msg);
    }
    char *big = repeat('m', GPT_ERR_MSG_MAX);
    char line[GPT_ERR_MSG_MAX + 64];
    snprintf(line, sizeof(line), "{\"ok\":false,\"code\":-1,\"message\":\"%s\"}", big);
    free(big);
    assert_int_equal(cluster_msg_reply_decode(line, strlen(line), &d, &err), -EINVAL);
    assert_string_equal(err.path, "message");
    assert_int_equal(cluster_msg_reply_decode("{}", CLUSTER_MSG_LINE_MAX + 1, &d, &err), -EMSGSIZE);

    char key[CLUSTER_MSG_KEY_MAX];
    assert_int_equal(cluster_msg_reply_key(key, sizeof(key), "node-a", 0xab, 7), 0);
    assert_string_equal(key, "c/reply/node-a/ab/7");
    assert_int_equal(cluster_msg_reply_key(key, sizeof(key), "", 1, 1), -EINVAL);
    assert_int_equal(cluster_msg_reply_key(key, sizeof(key), "a/b", 1, 1), -EINVAL);
    assert_int_equal(cluster_msg_reply_key(key, 10, "node-a", 1, 1), -ENAMETOOLONG);
}

static void test_feed(void **state)
{
    (void)state;
    json_t *recs = json_array();
    for (int i = 1; i <= CLUSTER_MSG_FEED_RECS; i++)
        json_array_append_new(recs,
                              cluster_msg_feed_rec_new((uint64_t)i, 3, json_pack("{s:i}", "x", i)));
    assert_null(cluster_msg_feed_rec_new(0, 3, json_object())); /* seq starts at 1 */
    assert_null(cluster_msg_feed_rec_new(1, 3, json_array()));
    char *text;
    size_t n;
    struct gpt_err err;
    assert_int_equal(cluster_msg_feed_encode(recs, &text, &n, &err), 0);
    struct cluster_msg_feed *f = malloc(sizeof(*f));
    assert_non_null(f);
    assert_int_equal(cluster_msg_feed_decode(text, n, f, &err), 0);
    assert_int_equal(f->n, CLUSTER_MSG_FEED_RECS);
    assert_int_equal(f->recs[0].seq, 1);
    assert_int_equal(f->recs[0].job, 3);
    assert_int_equal(json_integer_value(json_object_get(f->recs[255].rec, "x")), 256);
    cluster_msg_feed_done(f);
    free(text);

    /* One record more than a chunk holds. */
    json_array_append_new(recs, cluster_msg_feed_rec_new(257, 3, json_object()));
    assert_int_equal(cluster_msg_feed_encode(recs, &text, &n, &err), -EINVAL);
    assert_string_equal(err.path, "recs");
    json_t *o = json_pack("{s:O}", "recs", recs);
    text = json_dumps(o, JSON_COMPACT);
    assert_int_equal(cluster_msg_feed_decode(text, strlen(text), f, &err), -EINVAL);
    assert_string_equal(err.path, "recs");
    assert_null(f->root);
    free(text);
    json_decref(o);
    json_decref(recs);

    struct {
        const char *text, *path;
    } bad[] = {
        {"{}", "recs"},
        {"{\"recs\":{}}", "recs"},
        {"{\"recs\":[],\"x\":1}", "recs"},
        {"{\"recs\":[1]}", "recs[0]"},
        {"{\"recs\":[{\"s\":0,\"j\":1,\"r\":{}}]}", "recs[0]"},
        {"{\"recs\":[{\"s\":1,\"j\":1,\"r\":{}},{\"s\":2,\"j\":-1,\"r\":{}}]}", "recs[1]"},
        {"{\"recs\":[{\"s\":1,\"j\":1,\"r\":[]}]}", "recs[0]"},
        {"{\"recs\":[{\"s\":1,\"j\":1,\"r\":{},\"q\":1}]}", "recs[0]"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        gpt_err_clear(&err);
        assert_int_equal(cluster_msg_feed_decode(bad[i].text, strlen(bad[i].text), f, &err),
                         -EINVAL);
        if (strcmp(err.path, bad[i].path) != 0 || !strstr(err.msg, bad[i].path))
            fail_msg("%s: path \"%s\" message \"%s\"", bad[i].text, err.path, err.msg);
    }
    free(f);

    char head[64];
    uint64_t gen;
    int64_t h;
    assert_int_equal(cluster_msg_feed_head_encode(head, sizeof(head), 0xdeadbeef, 12), 0);
    assert_string_equal(head, "deadbeef:12");
    assert_int_equal(cluster_msg_feed_head_decode(head, strlen(head), &gen, &h, &err), 0);
    assert_true(gen == 0xdeadbeef);
    assert_int_equal(h, 12);
    assert_int_equal(cluster_msg_feed_head_encode(head, 5, 0xdeadbeef, 12), -ENAMETOOLONG);
    const char *heads[] = {
        "", ":1", "abc", "abc:", "abc:x", "xyz:1", "12345678901234567:1", "a:1234567890123456789"};
    for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
        gpt_err_clear(&err);
        assert_int_equal(cluster_msg_feed_head_decode(heads[i], strlen(heads[i]), &gen, &h, &err),
                         -EINVAL);
        assert_string_equal(err.path, "head");
    }
}

static void test_names(void **state)
{
    (void)state;
    for (int t = 0; t < CLUSTER_MSG_TYPE_COUNT; t++)
        assert_int_equal(cluster_msg_type_lookup(cluster_msg_type_name(t)), t);
    assert_int_equal(cluster_msg_type_lookup("submitx"), -1);
    assert_null(cluster_msg_type_name(CLUSTER_MSG_TYPE_COUNT));
    assert_string_equal(cluster_msg_field_name(CLUSTER_MSG_F_SNAP), "snap");
    assert_null(cluster_msg_field_name(CLUSTER_MSG_F_COUNT));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_hb),
        cmocka_unit_test(test_roundtrip_records),
        cmocka_unit_test(test_roundtrip_requests),
        cmocka_unit_test(test_limits_decode),
        cmocka_unit_test(test_limits_size_and_json),
        cmocka_unit_test(test_limits_encode),
        cmocka_unit_test(test_reply),
        cmocka_unit_test(test_feed),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
