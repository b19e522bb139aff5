/*
 * Unit tests of proto/ctl: request decoding (every op, field type and range
 * checks with paths), reply encoding, the bounded line splitter, the op and
 * field tables (flags the daemon's dispatcher applies, offsetof slots), and
 * proto/str_escape (what gptctl and gptd's log print of user strings).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ctl.h"
#include "str_escape.h"

static int decode(const char *s, struct gpt_ctl_request *req, struct gpt_err *err)
{
    gpt_err_clear(err);
    return gpt_ctl_request_decode(s, strlen(s), req, err);
}

static void test_decode_ok(void **state)
{
    (void)state;
    struct gpt_ctl_request req;
    struct gpt_err err;
    assert_int_equal(
        decode("{\"id\":7,\"op\":\"logs\",\"job\":3,\"follow\":true,\"since\":40}", &req, &err), 0);
    assert_int_equal(req.op, GPT_CTL_OP_LOGS);
    assert_int_equal(json_integer_value(req.id), 7);
    assert_int_equal(req.job, 3);
    assert_true(req.follow);
    assert_int_equal(req.since, 40);
    assert_true(req.present & (1u << GPT_CTL_F_SINCE));
    assert_false(req.present & (1u << GPT_CTL_F_SNAPSHOT));
    gpt_ctl_request_done(&req);

    assert_int_equal(decode("{\"id\":\"a-1\",\"op\":\"sample\",\"job\":1,\"prompt\":\"12+34=\","
                            "\"tokens\":8,\"temperature\":0.5,\"top_k\":3}",
                            &req, &err),
                     0);
    assert_string_equal(json_string_value(req.id), "a-1");
    assert_string_equal(req.prompt, "12+34=");
    assert_true(req.temperature == 0.5);
    assert_int_equal(req.top_k, 3);
    gpt_ctl_request_done(&req);

    assert_int_equal(
        decode("{\"op\":\"submit\",\"id\":1,\"spec\":{\"name\":\"x\"},\"priority\":-5}", &req,
               &err),
        0);
    assert_non_null(req.spec);
    assert_int_equal(req.priority, -5);
    gpt_ctl_request_done(&req);

    /* submit --resume-from JOB:SNAPSHOT */
    assert_int_equal(decode("{\"op\":\"submit\",\"id\":2,\"spec\":{},\"resume_from\":4,"
                            "\"snapshot\":9}",
                            &req, &err),
                     0);
    assert_int_equal(req.resume_from, 4);
    assert_int_equal(req.snapshot, 9);
    assert_true(req.present & (1u << GPT_CTL_F_RESUME_FROM));
    gpt_ctl_request_done(&req);

    /* a sweep's first submit asks room for all of its jobs */
    assert_int_equal(decode("{\"op\":\"submit\",\"id\":2,\"spec\":{},\"sweep\":\"sw-1\","
                            "\"sweep_jobs\":256}",
                            &req, &err),
                     0);
    assert_int_equal(req.sweep_jobs, 256);
    assert_true(req.present & (1u << GPT_CTL_F_SWEEP_JOBS));
    gpt_ctl_request_done(&req);

    /* export carries the client's umask, 0 to 0777 */
    assert_int_equal(decode("{\"op\":\"export\",\"id\":3,\"job\":1,\"format\":\"gguf\","
                            "\"output\":\"/o\",\"umask\":63}",
                            &req, &err),
                     0);
    assert_int_equal(req.umask, 077);
    assert_true(req.present & (1u << GPT_CTL_F_UMASK));
    gpt_ctl_request_done(&req);
    assert_int_equal(decode("{\"op\":\"export\",\"id\":3,\"job\":1,\"format\":\"gguf\","
                            "\"output\":\"/o\",\"umask\":512}",
                            &req, &err),
                     GPT_CTL_E_BAD_FIELD);
    assert_string_equal(err.path, "umask");
    gpt_ctl_request_done(&req);

    /* Every op in the table decodes with its required fields. */
    for (int op = 0; op < GPT_CTL_OP_COUNT; op++) {
        char line[256];
        snprintf(line, sizeof(line),
                 "{\"id\":1,\"op\":\"%s\",\"job\":1,\"spec\":{},\"prompt\":\"\"}",
                 gpt_ctl_op_name(op));
        assert_int_equal(gpt_ctl_op_lookup(gpt_ctl_op_name(op)), op);
        int rc = decode(line, &req, &err);
        /* Extra fields are errors, so only check that the op was found. */
        assert_int_equal(req.op, op);
        assert_true(rc == 0 || rc == GPT_CTL_E_BAD_FIELD);
        gpt_ctl_request_done(&req);
    }
}

struct bad_case {
    const char *line;
    int rc;
    const char *path;
    int has_id;
};

static void test_decode_errors(void **state)
{
    (void)state;
    static const struct bad_case cases[] = {
        {"not json", GPT_CTL_E_BAD_JSON, "", 0},
        {"", GPT_CTL_E_BAD_JSON, "", 0},
        {"[1,2]", GPT_CTL_E_BAD_JSON, "", 0},
        {"{\"id\":1,\"op\":\"list\"", GPT_CTL_E_BAD_JSON, "", 0},
        {"{\"op\":\"list\"}", GPT_CTL_E_BAD_FIELD, "id", 0},
        {"{\"id\":-1,\"op\":\"list\"}", GPT_CTL_E_BAD_FIELD, "id", 0},
        {"{\"id\":1.5,\"op\":\"list\"}", GPT_CTL_E_BAD_FIELD, "id", 0},
        {"{\"id\":1}", GPT_CTL_E_BAD_FIELD, "op", 1},
        {"{\"id\":1,\"op\":7}", GPT_CTL_E_BAD_FIELD, "op", 1},
        {"{\"id\":1,\"op\":\"frobnicate\"}", GPT_CTL_E_UNKNOWN_OP, "op", 1},
        {"{\"id\":1,\"op\":\"cancel\"}", GPT_CTL_E_BAD_FIELD, "job", 1},
        {"{\"id\":1,\"op\":\"cancel\",\"job\":\"3\"}", GPT_CTL_E_BAD_FIELD, "job", 1},
        {"{\"id\":1,\"op\":\"cancel\",\"job\":0}", GPT_CTL_E_BAD_FIELD, "job", 1},
        {"{\"id\":1,\"op\":\"cancel\",\"job\":2,\"jbo\":1}", GPT_CTL_E_BAD_FIELD, "jbo", 1},
        {"{\"id\":1,\"op\":\"list\",\"job\":1}", GPT_CTL_E_BAD_FIELD, "job", 1},
        {"{\"id\":1,\"op\":\"logs\",\"job\":1,\"follow\":1}", GPT_CTL_E_BAD_FIELD, "follow", 1},
        {"{\"id\":1,\"op\":\"submit\",\"spec\":[]}", GPT_CTL_E_BAD_FIELD, "spec", 1},
        {"{\"id\":1,\"op\":\"submit\",\"spec\":{},\"resume_from\":0}", GPT_CTL_E_BAD_FIELD,
         "resume_from", 1},
        {"{\"id\":1,\"op\":\"list\",\"resume_from\":1}", GPT_CTL_E_BAD_FIELD, "resume_from", 1},
        {"{\"id\":1,\"op\":\"submit\",\"spec\":{},\"sweep_jobs\":0}", GPT_CTL_E_BAD_FIELD,
         "sweep_jobs", 1},
        {"{\"id\":1,\"op\":\"submit\",\"spec\":{},\"sweep_jobs\":257}", GPT_CTL_E_BAD_FIELD,
         "sweep_jobs", 1},
        {"{\"id\":1,\"op\":\"list\",\"sweep_jobs\":1}", GPT_CTL_E_BAD_FIELD, "sweep_jobs", 1},
        {"{\"id\":1,\"op\":\"sample\",\"job\":1,\"prompt\":\"a\",\"temperature\":0}",
         GPT_CTL_E_BAD_FIELD, "temperature", 1},
        /* jansson refuses \u0000 unless asked, so a NUL never reaches a field. */
        {"{\"id\":1,\"op\":\"sample\",\"job\":1,\"prompt\":\"a\\u0000b\"}", GPT_CTL_E_BAD_JSON, "",
         0},
        {"{\"id\":1,\"op\":\"list\",\"op\":\"list\"}", GPT_CTL_E_BAD_JSON, "", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct gpt_ctl_request req;
        struct gpt_err err;
        int rc = decode(cases[i].line, &req, &err);
        if (rc != cases[i].rc)
            fail_msg("case %zu (%s): rc %d, want %d", i, cases[i].line, rc, cases[i].rc);
        assert_string_equal(err.path, cases[i].path);
        assert_true(err.msg[0] != '\0');
        assert_int_equal(json_is_integer(req.id), cases[i].has_id);
        gpt_ctl_request_done(&req);
    }
}

static void test_decode_too_long(void **state)
{
    (void)state;
    size_t n = GPT_CTL_LINE_MAX + 1;
    char *big = malloc(n);
    assert_non_null(big);
    memset(big, ' ', n);
    struct gpt_ctl_request req;
    struct gpt_err err;
    assert_int_equal(gpt_ctl_request_decode(big, n, &req, &err), GPT_CTL_E_TOO_LONG);
    assert_string_equal(gpt_ctl_errname(GPT_CTL_E_TOO_LONG), "line_too_long");
    gpt_ctl_request_done(&req);
    free(big);
}

static void test_reply_encoding(void **state)
{
    (void)state;
    json_t *id = json_integer(42);
    json_t *res = json_pack("{s:I, s:s, s:b}", "job", (json_int_t)9, "id", "shadow", "ok", 0);
    size_t n;
    char *line = gpt_ctl_reply_ok(id, res, &n);
    assert_non_null(line);
    assert_int_equal(line[n - 1], '\n');
    assert_int_equal(strlen(line), n);
    json_t *o = json_loads(line, 0, NULL);
    assert_non_null(o);
    assert_int_equal(json_integer_value(json_object_get(o, "id")), 42);
    assert_true(json_is_true(json_object_get(o, "ok")));
    assert_int_equal(json_integer_value(json_object_get(o, "job")), 9);
    json_decref(o);
    free(line);

    struct gpt_err err;
    gpt_err_set(&err, -ENOENT, "job", "no job %d", 5);
    line = gpt_ctl_reply_from_err(NULL, -ENOENT, &err, &n);
    o = json_loads(line, 0, NULL);
    assert_non_null(o);
    assert_true(json_is_null(json_object_get(o, "id")));
    assert_true(json_is_false(json_object_get(o, "ok")));
    json_t *e = json_object_get(o, "error");
    assert_string_equal(json_string_value(json_object_get(e, "code")), "not_found");
    assert_string_equal(json_string_value(json_object_get(e, "message")), "no job 5");
    assert_string_equal(json_string_value(json_object_get(e, "path")), "job");
    json_decref(o);
    free(line);

    /* Invalid UTF-8 in a message still gives a valid line. */
    line = gpt_ctl_reply_error(id, "bad_json", "\xff\xfe", NULL, &n);
    assert_non_null(line);
    o = json_loads(line, 0, NULL);
    assert_non_null(o);
    assert_null(json_object_get(json_object_get(o, "error"), "path"));
    json_decref(o);
    free(line);
    json_decref(id);
}

static void test_linebuf(void **state)
{
    (void)state;
    struct gpt_ctl_linebuf lb;
    const char *line;
    size_t n;
    gpt_ctl_linebuf_init(&lb, 8);
    assert_int_equal(gpt_ctl_linebuf_push(&lb, "ab", 2), 0);
    assert_int_equal(gpt_ctl_linebuf_next(&lb, &line, &n), 0);
    assert_int_equal(gpt_ctl_linebuf_push(&lb, "c\nde\n\nfg", 8), 0);
    assert_int_equal(gpt_ctl_linebuf_next(&lb, &line, &n), 1);
    assert_int_equal(n, 3);
    assert_memory_equal(line, "abc", 3);
    assert_int_equal(gpt_ctl_linebuf_next(&lb, &line, &n), 1);
    assert_memory_equal(line, "de", 2);
    assert_int_equal(gpt_ctl_linebuf_next(&lb, &line, &n), 1);
    assert_int_equal(n, 0);
    assert_int_equal(gpt_ctl_linebuf_next(&lb, &line, &n), 0);
    assert_int_equal(gpt_ctl_linebuf_pending(&lb), 2);
    /* "fg" + 7 more bytes without a newline passes the bound of 8. */
    assert_int_equal(gpt_ctl_linebuf_push(&lb, "1234567", 7), GPT_CTL_E_TOO_LONG);
    /* A complete line over the bound inside one push is caught by next. */
    gpt_ctl_linebuf_done(&lb);
    gpt_ctl_linebuf_init(&lb, 4);
    assert_int_equal(gpt_ctl_linebuf_push(&lb, "123456\nok\n", 10), 0);
    assert_int_equal(gpt_ctl_linebuf_next(&lb, &line, &n), GPT_CTL_E_TOO_LONG);
    assert_int_equal(gpt_ctl_linebuf_next(&lb, &line, &n), 1);
    assert_memory_equal(line, "ok", 2);
    gpt_ctl_linebuf_done(&lb);
}

/* The op table: names round-trip, required fields are allowed ones, and the
 * flags the dispatcher relies on are where they must be. */
static void test_op_table(void **state)
{
    (void)state;
    for (int op = 0; op < GPT_CTL_OP_COUNT; op++) {
        const struct gpt_ctl_op_info *oi = gpt_ctl_op_info(op);
        assert_non_null(oi);
        assert_non_null(oi->name);
        assert_string_equal(gpt_ctl_op_name(op), oi->name);
        assert_int_equal(gpt_ctl_op_lookup(oi->name), op);
        assert_int_equal(oi->required & ~oi->allowed, 0);
        assert_int_equal(oi->allowed >> GPT_CTL_F_COUNT, 0);
        /* an op a member forwards with a job names it in a job field */
        if (oi->flags & (GPT_CTL_OPF_OWNER | GPT_CTL_OPF_FORWARD_JOB))
            assert_true(oi->allowed & (1u << GPT_CTL_F_JOB));
        if (oi->flags & GPT_CTL_OPF_OWNER)
            assert_true(oi->required & (1u << GPT_CTL_F_JOB));
    }
    assert_null(gpt_ctl_op_info(-1));
    assert_null(gpt_ctl_op_info(GPT_CTL_OP_COUNT));
    assert_null(gpt_ctl_op_name(GPT_CTL_OP_COUNT));
    assert_int_equal(gpt_ctl_op_lookup("nope"), -1);

    /* Only the owner (or root) changes a job; reads are anyone's. */
    assert_true(gpt_ctl_op_has(GPT_CTL_OP_CANCEL, GPT_CTL_OPF_OWNER | GPT_CTL_OPF_FORWARD));
    assert_true(gpt_ctl_op_has(GPT_CTL_OP_RESUME, GPT_CTL_OPF_OWNER | GPT_CTL_OPF_FORWARD));
    assert_false(gpt_ctl_op_has(GPT_CTL_OP_LIST, GPT_CTL_OPF_OWNER));
    assert_false(gpt_ctl_op_has(GPT_CTL_OP_SNAPSHOTS, GPT_CTL_OPF_OWNER));
    /* What starts work is refused while stopping. */
    assert_true(gpt_ctl_op_has(GPT_CTL_OP_SUBMIT, GPT_CTL_OPF_NOT_STOPPING));
    assert_true(gpt_ctl_op_has(GPT_CTL_OP_RESUME, GPT_CTL_OPF_NOT_STOPPING));
    assert_false(gpt_ctl_op_has(GPT_CTL_OP_CANCEL, GPT_CTL_OPF_NOT_STOPPING));
    assert_false(gpt_ctl_op_has(GPT_CTL_OP_STATUS, GPT_CTL_OPF_NOT_STOPPING));
    /* The queue of record answers list, snapshots; status only for a job. */
    assert_true(gpt_ctl_op_has(GPT_CTL_OP_LIST, GPT_CTL_OPF_FORWARD));
    assert_true(gpt_ctl_op_has(GPT_CTL_OP_SNAPSHOTS, GPT_CTL_OPF_FORWARD));
    assert_true(gpt_ctl_op_has(GPT_CTL_OP_STATUS, GPT_CTL_OPF_FORWARD_JOB));
    assert_false(gpt_ctl_op_has(GPT_CTL_OP_STATUS, GPT_CTL_OPF_FORWARD));
    assert_false(gpt_ctl_op_has(GPT_CTL_OP_PING, GPT_CTL_OPF_FORWARD));
    assert_true(gpt_ctl_op_has(GPT_CTL_OP_LOGS, GPT_CTL_OPF_STREAM));
    assert_false(gpt_ctl_op_has(GPT_CTL_OP_STATUS, GPT_CTL_OPF_STREAM));
    assert_false(gpt_ctl_op_has(-1, 0));
}

/* The field table: each row's offsetof names the slot decode writes. */
static void test_field_table(void **state)
{
    (void)state;
    size_t seen[GPT_CTL_F_COUNT];
    for (int f = 0; f < GPT_CTL_F_COUNT; f++) {
        const struct gpt_ctl_field_info *fi = gpt_ctl_field_info(f);
        assert_non_null(fi);
        assert_int_equal(gpt_ctl_field_lookup(fi->name), f);
        assert_true(fi->offset < sizeof(struct gpt_ctl_request));
        for (int g = 0; g < f; g++)
            assert_true(seen[g] != fi->offset); /* no two fields share a slot */
        seen[f] = fi->offset;

        /* Find an op that takes the field, then decode its largest legal
         * value (a typed value for the others) and read it back through
         * the offset. */
        int op = -1;
        for (int o = 0; o < GPT_CTL_OP_COUNT && op < 0; o++)
            if (gpt_ctl_op_info(o)->allowed & (1u << f))
                op = o;
        assert_true(op >= 0);
        char line[512], extra[128] = "";
        uint32_t req_f = gpt_ctl_op_info(op)->required & ~(1u << f);
        for (int g = 0; g < GPT_CTL_F_COUNT; g++) {
            if (!(req_f & (1u << g)))
                continue;
            const struct gpt_ctl_field_info *gi = gpt_ctl_field_info(g);
            size_t n = strlen(extra);
            snprintf(extra + n, sizeof(extra) - n, ",\"%s\":%s", gi->name,
                     gi->type == GPT_CTL_T_STRING   ? "\"p\""
                     : gi->type == GPT_CTL_T_OBJECT ? "{}"
                                                    : "1");
        }
        const char *val = "";
        char num[32];
        switch (fi->type) {
        case GPT_CTL_T_INT:
            snprintf(num, sizeof(num), "%lld", (long long)fi->max);
            val = num;
            break;
        case GPT_CTL_T_NUMBER:
            snprintf(num, sizeof(num), "%lld", (long long)fi->max);
            val = num;
            break;
        case GPT_CTL_T_BOOL:
            val = "true";
            break;
        case GPT_CTL_T_STRING:
            val = "\"slot\"";
            break;
        case GPT_CTL_T_OBJECT:
            val = "{\"k\":1}";
            break;
        default:
            fail_msg("field %s has no type", fi->name);
        }
        snprintf(line, sizeof(line), "{\"id\":1,\"op\":\"%s\",\"%s\":%s%s}", gpt_ctl_op_name(op),
                 fi->name, val, extra);
        struct gpt_ctl_request req;
        struct gpt_err err;
        if (decode(line, &req, &err) != 0)
            fail_msg("%s: %s: %s", line, err.path, err.msg);
        assert_true(req.present & (1u << f));
        const char *slot = (const char *)&req + fi->offset;
        switch (fi->type) {
        case GPT_CTL_T_INT:
            assert_int_equal(*(const int64_t *)(const void *)slot, fi->max);
            break;
        case GPT_CTL_T_NUMBER:
            assert_true(*(const double *)(const void *)slot == (double)fi->max);
            break;
        case GPT_CTL_T_BOOL:
            assert_true(*(const bool *)(const void *)slot);
            break;
        case GPT_CTL_T_STRING:
            assert_string_equal(*(const char *const *)(const void *)slot, "slot");
            break;
        case GPT_CTL_T_OBJECT:
            assert_int_equal(
                json_integer_value(json_object_get(*(json_t *const *)(const void *)slot, "k")), 1);
            break;
        }
        gpt_ctl_request_done(&req);

        /* One past the range is refused, naming the field. */
        if (fi->type == GPT_CTL_T_INT && fi->max < INT64_MAX) {
            snprintf(line, sizeof(line), "{\"id\":1,\"op\":\"%s\",\"%s\":%lld%s}",
                     gpt_ctl_op_name(op), fi->name, (long long)fi->max + 1, extra);
            assert_int_equal(decode(line, &req, &err), GPT_CTL_E_BAD_FIELD);
            assert_string_equal(err.path, fi->name);
            gpt_ctl_request_done(&req);
        }
    }
    assert_null(gpt_ctl_field_info(GPT_CTL_F_COUNT));
    assert_int_equal(gpt_ctl_field_lookup("nope"), -1);
    assert_int_equal(gpt_ctl_field_info(GPT_CTL_F_JOB)->offset,
                     offsetof(struct gpt_ctl_request, job));
}

static void esc_is(const char *in, size_t len, unsigned flags, const char *want)
{
    char out[256];
    size_t n = gpt_str_escape(out, sizeof(out), in, len, flags);
    if (strcmp(out, want) != 0 || n != strlen(want))
        fail_msg("escape of %zu bytes: got \"%s\" (%zu), want \"%s\"", len, out, n, want);
}

#define ESC(in, want) esc_is(in, sizeof(in) - 1, 0, want)

static void test_str_escape(void **state)
{
    (void)state;
    ESC("plain name-1.0", "plain name-1.0");
    ESC("", "");
    /* terminal escapes, CR, newline, tab, DEL, other C0 */
    ESC("\x1b[2J\x1b]0;title\a", "\\e[2J\\e]0;title\\x07");
    ESC("a\rb\nc\td", "a\\rb\\nc\\td");
    ESC("x\x7fy\x01", "x\\x7fy\\x01");
    /* a backslash is escaped, so "\\n" typed by a user is not a newline */
    ESC("a\\nb", "a\\\\nb");
    /* valid UTF-8 passes; C1 controls, line separators and bidi marks do not */
    ESC("caf\xc3\xa9 \xe6\x97\xa5", "caf\xc3\xa9 \xe6\x97\xa5");
    ESC("\xc2\x9b"
        "31m",
        "\\u009b31m"); /* CSI as a C1 control */
    ESC("\xc2\x85", "\\u0085");
    ESC("a\xe2\x80\xa8"
        "b",
        "a\\u2028b");
    ESC("\xe2\x80\xae"
        "cod",
        "\\u202ecod");
    ESC("\xe2\x81\xa6", "\\u2066");
    /* invalid UTF-8: stray continuation, overlong, surrogate, too big,
     * truncated, a lone lead byte */
    ESC("\x80", "\\x80");
    ESC("\xc0\xaf", "\\xc0\\xaf");
    ESC("\xed\xa0\x80", "\\xed\\xa0\\x80");
    ESC("\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80");
    ESC("\xe6\x97", "\\xe6\\x97");
    ESC("\xffok", "\\xffok");
    /* the KEEP_NEWLINE flag keeps newline and tab only */
    esc_is("l1\nl2\t\r\x1b", 8, GPT_STR_ESCAPE_KEEP_NEWLINE, "l1\nl2\t\\r\\e");

    /* A buffer too small: cut at an escape boundary, the full length returned. */
    char small[6];
    assert_int_equal(gpt_str_escape(small, sizeof(small), "ab\x1b[c", 5, 0), 6);
    assert_string_equal(small, "ab\\e[");
    assert_int_equal(gpt_str_escape(small, 5, "abc\x1b", 4, 0), 5);
    assert_string_equal(small, "abc"); /* "\e" would not fit whole */
    assert_int_equal(gpt_str_escape(NULL, 0, "\x01", 1, 0), 4);

    /* The worst case fits GPT_STR_ESCAPE_SIZE, and the output is clean. */
    char in[256], *out;
    for (int i = 0; i < 256; i++)
        in[i] = (char)(i == 0 ? 0xff : i);
    out = malloc(GPT_STR_ESCAPE_SIZE(sizeof(in)));
    assert_non_null(out);
    size_t n = gpt_str_escape(out, GPT_STR_ESCAPE_SIZE(sizeof(in)), in, sizeof(in), 0);
    assert_true(n < GPT_STR_ESCAPE_SIZE(sizeof(in)));
    for (size_t i = 0; i < n; i++)
        assert_true((unsigned char)out[i] >= 0x20 && (unsigned char)out[i] < 0x7f);
    free(out);

    char *d = gpt_str_escape_dup("job\nname", 0);
    assert_string_equal(d, "job\\nname");
    free(d);
    d = gpt_str_escape_dup(NULL, 0);
    assert_string_equal(d, "");
    free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_ok),       cmocka_unit_test(test_decode_errors),
        cmocka_unit_test(test_decode_too_long), cmocka_unit_test(test_reply_encoding),
        cmocka_unit_test(test_linebuf),         cmocka_unit_test(test_op_table),
        cmocka_unit_test(test_field_table),     cmocka_unit_test(test_str_escape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
