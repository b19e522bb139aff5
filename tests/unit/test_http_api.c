/*
 * Unit tests of daemon/http_api (the dashboard's JSON documents and the
 * routing of /api/ URLs) and daemon/http_db (the HTTP thread's read-only
 * database reader, over a database written by daemon/db).
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "db.h"
#include "http_api.h"
#include "http_db.h"
#include "http_web.h"

static void test_parse_count(void **state)
{
    (void)state;
    int64_t v = -1;
    assert_int_equal(http_api_parse_count("0", &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(http_api_parse_count("42", &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(http_api_parse_count("999999999999999999", &v), 0);
    assert_int_equal(v, INT64_C(999999999999999999));
    static const char *const bad[] = {"",     "-1",  "+1", " 1", "1 ", "01",
                                      "0x10", "1e3", "1.", "a",  "1a", "9999999999999999999",
                                      "00"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = 7;
        assert_int_equal(http_api_parse_count(bad[i], &v), -EINVAL);
        assert_int_equal(v, 7); /* untouched on failure */
    }
    assert_int_equal(http_api_parse_count(NULL, &v), -EINVAL);
}

static void test_route(void **state)
{
    (void)state;
    struct http_api_route r;
    struct gpt_err err;
    assert_int_equal(http_api_route("/api/jobs", NULL, &r, &err), 0);
    assert_int_equal(r.what, HTTP_API_JOBS);
    assert_int_equal(http_api_route("/api/nodes", NULL, &r, &err), 0);
    assert_int_equal(r.what, HTTP_API_NODES);
    assert_int_equal(http_api_route("/api/jobs/12/metrics", NULL, &r, &err), 0);
    assert_int_equal(r.what, HTTP_API_METRICS);
    assert_int_equal(r.job, 12);
    assert_int_equal(r.since, 0);
    assert_int_equal(http_api_route("/api/jobs/12/metrics", "340", &r, &err), 0);
    assert_int_equal(r.since, 340);
    assert_int_equal(http_api_route("/api/jobs/3/events", NULL, &r, &err), 0);
    assert_int_equal(r.what, HTTP_API_EVENTS);
    assert_int_equal(r.job, 3);
    assert_int_equal(http_api_route("/api/jobs/3/snapshots", NULL, &r, &err), 0);
    assert_int_equal(r.what, HTTP_API_SNAPSHOTS);
    assert_int_equal(http_api_route("/api/jobs/4/config", NULL, &r, &err), 0);
    assert_int_equal(r.what, HTTP_API_CONFIG);
    assert_int_equal(r.job, 4);
    assert_int_equal(http_api_route("/api/jobs/5/samples", NULL, &r, &err), 0);
    assert_int_equal(r.what, HTTP_API_SAMPLES);
    assert_int_equal(r.job, 5);

    /* Not ours: 404 further on. */
    static const char *const other[] = {"/",
                                        "/api",
                                        "/api/jobsx",
                                        "/api/jobs/",
                                        "/api/jobs/1",
                                        "/api/jobs/1/",
                                        "/api/jobs/1/metricsx",
                                        "/api/jobs/1/metrics/",
                                        "/api/jobs/1/configx",
                                        "/api/jobs/1/sample",
                                        "/api/nodes/",
                                        "/API/jobs",
                                        "/metrics",
                                        "/api/jobs/1/2/events"};
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
        if (http_api_route(other[i], NULL, &r, &err) != 0)
            fail_msg("%s: %s", other[i], err.msg);
        assert_int_equal(r.what, HTTP_API_NONE);
    }
    /* Ours, with a bad id or since: 400, naming which. */
    static const char *const bad_id[] = {
        "/api/jobs/0/events", "/api/jobs/01/events", "/api/jobs/-1/events",
        "/api/jobs/x/events", "/api/jobs//events",   "/api/jobs/1234567890123456789/events"};
    for (size_t i = 0; i < sizeof(bad_id) / sizeof(bad_id[0]); i++) {
        gpt_err_clear(&err);
        assert_int_equal(http_api_route(bad_id[i], NULL, &r, &err), -EINVAL);
        assert_string_equal(err.path, "job");
    }
    assert_int_equal(http_api_route("/api/jobs/1/metrics", "-1", &r, &err), -EINVAL);
    assert_string_equal(err.path, "since");
    assert_int_equal(http_api_route("/api/jobs/1/metrics", "", &r, &err), -EINVAL);
    assert_int_equal(http_api_route("/api/jobs/1/events", "3", &r, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "metrics only"));
    assert_int_equal(http_api_route("/api/jobs/1/config", "3", &r, &err), -EINVAL);
    gpt_err_clear(&err);
    assert_int_equal(http_api_route("/api/jobs/01/config", NULL, &r, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "/api/jobs/ID/config"));
    gpt_err_clear(&err);
    assert_int_equal(http_api_route("/api/jobs/01/samples", NULL, &r, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "/api/jobs/ID/samples"));
    assert_int_equal(http_api_route("/api/jobs/1/samples", "3", &r, &err), -EINVAL);
    /* A URL past the bound is not ours. */
    char big[HTTP_API_URL_MAX + 32];
    memset(big, '1', sizeof(big));
    memcpy(big, "/api/jobs/", 10);
    snprintf(big + sizeof(big) - 9, 9, "/events");
    assert_int_equal(http_api_route(big, NULL, &r, &err), 0);
    assert_int_equal(r.what, HTTP_API_NONE);
}

static void test_format(void **state)
{
    (void)state;
    struct gpt_err err;
    bool csv = true;
    assert_int_equal(http_api_format(NULL, HTTP_API_METRICS, &csv, &err), 0);
    assert_false(csv);
    assert_int_equal(http_api_format("json", HTTP_API_EVENTS, &csv, &err), 0);
    assert_false(csv);
    assert_int_equal(http_api_format("csv", HTTP_API_METRICS, &csv, &err), 0);
    assert_true(csv);
    assert_int_equal(http_api_format("csv", HTTP_API_EVENTS, &csv, &err), -EINVAL);
    assert_int_equal(http_api_format("csv", HTTP_API_JOBS, &csv, &err), -EINVAL);
    assert_int_equal(http_api_format("CSV", HTTP_API_METRICS, &csv, &err), -EINVAL);
    assert_string_equal(err.path, "format");
    assert_int_equal(http_api_format("", HTTP_API_METRICS, &csv, &err), -EINVAL);
}

static void test_jobs_doc(void **state)
{
    (void)state;
    struct metrics_job jobs[2];
    memset(jobs, 0, sizeof(jobs));
    jobs[0].id = 7;
    snprintf(jobs[0].name, sizeof(jobs[0].name), "<img src=x onerror=alert(1)></script>");
    jobs[0].state = "running";
    jobs[0].has_metric = true;
    jobs[0].step = 40;
    jobs[0].max_steps = 100;
    jobs[0].loss = 1.5;
    jobs[0].lr = NAN; /* not finite: null, never an invalid document */
    jobs[0].eta_s = 12.5;
    jobs[0].has_val_loss = true;
    jobs[0].val_loss = 1.75;
    jobs[1].id = 8;
    snprintf(jobs[1].name, sizeof(jobs[1].name), "bad \xff\xfe utf8");
    jobs[1].state = "queued";
    snprintf(jobs[1].sweep, sizeof(jobs[1].sweep), "s-3");
    struct metrics_view v = {.now = 1000, .role = "coordinator", .jobs = jobs, .n_jobs = 2};
    snprintf(v.node, sizeof(v.node), "n1");
    char *s = http_api_dump(http_api_jobs_doc(&v));
    assert_non_null(s);
    assert_null(strstr(s, "</")); /* JSON_ESCAPE_SLASH */
    json_error_t je;
    json_t *doc = json_loads(s, 0, &je);
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "node")), "n1");
    json_t *j0 = json_array_get(json_object_get(doc, "jobs"), 0);
    assert_string_equal(json_string_value(json_object_get(j0, "name")),
                        "<img src=x onerror=alert(1)></script>");
    assert_int_equal(json_integer_value(json_object_get(j0, "step")), 40);
    assert_int_equal(json_integer_value(json_object_get(j0, "max_steps")), 100);
    assert_true(json_is_null(json_object_get(j0, "lr")));
    assert_true(json_real_value(json_object_get(j0, "eta_s")) == 12.5);
    assert_true(json_real_value(json_object_get(j0, "val_loss")) == 1.75);
    json_t *j1 = json_array_get(json_object_get(doc, "jobs"), 1);
    /* Invalid UTF-8 is escaped, the job is not dropped. */
    assert_string_equal(json_string_value(json_object_get(j1, "name")), "bad \\xff\\xfe utf8");
    assert_true(json_is_null(json_object_get(j1, "step")));
    assert_true(json_is_null(json_object_get(j1, "val_loss")));
    /* The sweep a job belongs to (the dashboard selects a whole sweep). */
    assert_null(json_object_get(j0, "sweep"));
    assert_string_equal(json_string_value(json_object_get(j1, "sweep")), "s-3");
    json_decref(doc);
    free(s);
}

static void test_nodes_doc(void **state)
{
    (void)state;
    json_t *in = json_pack("[{s:s, s:s, s:f, s:i, s:s, s:s, s:b, s:s, s:s, s:[{s:i}]}, i]", "node",
                           "a\"b", "state", "idle", "heartbeat_age_s", 0.5, "workers", 2, "devices",
                           "cpu", "version", "0.1", "member", 0, "addr", "10.0.0.1", "secret", "x",
                           "gpus", "index", 0, 5);
    assert_non_null(in);
    char *s = http_api_dump(http_api_nodes_doc(in));
    json_decref(in);
    assert_non_null(s);
    json_t *doc = json_loads(s, 0, NULL);
    free(s);
    json_t *nodes = json_object_get(doc, "nodes");
    assert_int_equal(json_array_size(nodes), 1); /* the non-object entry is skipped */
    json_t *n = json_array_get(nodes, 0);
    assert_string_equal(json_string_value(json_object_get(n, "node")), "a\"b");
    assert_int_equal(json_integer_value(json_object_get(n, "workers")), 2);
    assert_non_null(json_object_get(n, "gpus"));
    /* Only the keys the page shows: no address, nothing unknown. */
    assert_null(json_object_get(n, "addr"));
    assert_null(json_object_get(n, "secret"));
    json_decref(doc);
}

static void test_records(void **state)
{
    (void)state;
    struct gpt_metric m;
    memset(&m, 0, sizeof(m));
    m.step = 5;
    m.loss = 2.0;
    m.val_loss = NAN;
    m.lr = 1e-3;
    m.time = 99;
    m.tokens = 4096;
    m.grad_norm = 0.5;
    m.tokens_per_s = 1e4;
    m.mfu = NAN;
    m.mem_params_bytes = 1;
    m.mem_grads_bytes = 2;
    m.mem_optim_bytes = 4;
    m.mem_acts_bytes = 8;
    json_t *o = http_api_metric_json(&m);
    assert_int_equal(json_integer_value(json_object_get(o, "step")), 5);
    /* The dashboard's panels: tokens (its x), grad norm, tokens/s, MFU
     * (null when not finite), memory (the four parts summed). */
    assert_int_equal(json_integer_value(json_object_get(o, "tokens")), 4096);
    assert_true(json_real_value(json_object_get(o, "grad_norm")) == 0.5);
    assert_true(json_real_value(json_object_get(o, "tokens_per_s")) == 1e4);
    assert_true(json_is_null(json_object_get(o, "mfu")));
    assert_int_equal(json_integer_value(json_object_get(o, "mem_bytes")), 15);
    assert_null(json_object_get(o, "val_loss")); /* not evaluated: absent */
    json_decref(o);
    m.val_loss = 1.5;
    o = http_api_metric_json(&m);
    assert_true(json_real_value(json_object_get(o, "val_loss")) == 1.5);
    json_decref(o);
    struct gpt_event e;
    memset(&e, 0, sizeof(e));
    snprintf(e.kind, sizeof(e.kind), "snapshot");
    snprintf(e.message, sizeof(e.message), "written to \x01<b>\xc3");
    e.step = 9;
    o = http_api_event_json(&e);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "kind")), "snapshot");
    assert_non_null(strstr(json_string_value(json_object_get(o, "message")), "<b>"));
    json_decref(o);
}

static void test_web_assets(void **state)
{
    (void)state;
    const struct http_web_asset *a = http_web_find("/");
    assert_non_null(a);
    assert_non_null(strstr(a->type, "text/html"));
    assert_true(a->len > 100 && memcmp(a->data, "<!DOCTYPE html>", 15) == 0);
    assert_ptr_equal(http_web_find("/index.html"), a);
    a = http_web_find("/app.js");
    assert_non_null(a);
    assert_non_null(strstr(a->type, "javascript"));
    /* The page takes text only: no innerHTML, no eval in the script. */
    char *js = strndup((const char *)a->data, a->len);
    assert_null(strstr(js, "innerHTML"));
    assert_null(strstr(js, "eval("));
    free(js);
    assert_non_null(http_web_find("/style.css"));
    assert_null(http_web_find("/../etc/passwd"));
    assert_null(http_web_find("/app.js/"));
}

/* The reader over a database the loop's db.c wrote. */
static void test_reader(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_http_api.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof(path), "%s/gptd.db", dir);
    struct db *db;
    struct gpt_err err;
    assert_int_equal(db_open(path, &db, &err), 0);
    struct db_job j;
    memset(&j, 0, sizeof(j));
    snprintf(j.name, sizeof(j.name), "j");
    j.spec_json = (char *)"{}";
    int64_t id;
    assert_int_equal(db_job_insert(db, &j, &id, &err), 0);
    assert_int_equal(db_begin(db, &err), 0); /* one fsync, not 1400 */
    for (int s = 1; s <= 1205; s++) {
        struct gpt_metric m;
        memset(&m, 0, sizeof(m));
        m.step = s;
        m.loss = 3.0 - s * 1e-3;
        m.val_loss = s % 100 == 0 ? 2.5 : NAN;
        m.accuracy = NAN;
        m.lr = 1e-3;
        m.time = 1000 + s;
        assert_int_equal(db_metric_insert(db, id, &m, &err), 0);
    }
    for (int k = 0; k < HTTP_API_EVENTS_MAX + 10; k++) {
        struct gpt_event e;
        memset(&e, 0, sizeof(e));
        snprintf(e.kind, sizeof(e.kind), "k");
        snprintf(e.message, sizeof(e.message), "event %d", k);
        e.step = k;
        e.time = 1000 + k;
        assert_int_equal(db_event_insert(db, id, &e, &err), 0);
    }
    struct db_snapshot sn;
    memset(&sn, 0, sizeof(sn));
    sn.job_id = id;
    sn.step = 100;
    snprintf(sn.node, sizeof(sn.node), "n1");
    snprintf(sn.path, sizeof(sn.path), "/x/snap");
    sn.size = 12;
    int64_t sid;
    assert_int_equal(db_snapshot_insert(db, &sn, &sid, &err), 0);
    assert_int_equal(db_commit(db, &err), 0);

    struct http_db *hd;
    assert_int_equal(http_db_open(path, &hd, &err), 0);
    json_t *doc;
    assert_int_equal(http_db_metrics(hd, id, 0, &doc, &err), 0);
    json_t *ms = json_object_get(doc, "metrics");
    assert_int_equal(json_array_size(ms), HTTP_API_METRICS_MAX);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(ms, 0), "step")), 1);
    assert_int_equal(json_integer_value(json_object_get(doc, "last")), 1000);
    assert_true(json_is_true(json_object_get(doc, "more")));
    assert_true(json_real_value(json_object_get(json_array_get(ms, 99), "val_loss")) == 2.5);
    assert_null(json_object_get(json_array_get(ms, 0), "val_loss"));
    json_decref(doc);
    /* The next page: since = last + 1. */
    assert_int_equal(http_db_metrics(hd, id, 1001, &doc, &err), 0);
    ms = json_object_get(doc, "metrics");
    assert_int_equal(json_array_size(ms), 205);
    assert_int_equal(json_integer_value(json_object_get(doc, "last")), 1205);
    assert_true(json_is_false(json_object_get(doc, "more")));
    json_decref(doc);
    /* Past the end: nothing, last = since - 1. */
    assert_int_equal(http_db_metrics(hd, id, 5000, &doc, &err), 0);
    assert_int_equal(json_array_size(json_object_get(doc, "metrics")), 0);
    assert_int_equal(json_integer_value(json_object_get(doc, "last")), 4999);
    json_decref(doc);

    assert_int_equal(http_db_events(hd, id, &doc, &err), 0);
    json_t *ev = json_object_get(doc, "events");
    assert_int_equal(json_array_size(ev), HTTP_API_EVENTS_MAX);
    /* The newest ones, oldest first. */
    assert_string_equal(json_string_value(json_object_get(json_array_get(ev, 0), "message")),
                        "event 10");
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(ev, HTTP_API_EVENTS_MAX - 1), "message")),
        "event 209");
    json_decref(doc);

    assert_int_equal(http_db_snapshots(hd, id, &doc, &err), 0);
    json_t *s0 = json_array_get(json_object_get(doc, "snapshots"), 0);
    assert_int_equal(json_integer_value(json_object_get(s0, "step")), 100);
    assert_string_equal(json_string_value(json_object_get(s0, "path")), "/x/snap");
    json_decref(doc);

    /* The CSV: a header, then every record from `since`, val_loss empty
     * where no eval ran; unknown jobs are -ENOENT. */
    struct metrics_buf csv = {0};
    int64_t next = -1;
    assert_int_equal(http_db_metrics_csv(hd, id, 1100, &csv, &next, &err), 0);
    assert_int_equal(next, 0);
    assert_int_equal(strncmp(csv.p, "run_id,step,max_steps,", 22), 0);
    size_t lines = 0;
    for (const char *p = csv.p; (p = strchr(p, '\n')); p++)
        lines++;
    assert_int_equal(lines, 1 + 106);
    assert_non_null(strstr(csv.p, "\n0,1100,0,0,1.9,2.5,,0.001,"));
    assert_non_null(strstr(csv.p, "\n0,1101,0,0,1.899,,,0.001,"));
    metrics_buf_done(&csv);
    assert_int_equal(http_db_metrics_csv(hd, id + 1, 0, &csv, &next, &err), -ENOENT);
    metrics_buf_done(&csv);

    assert_int_equal(http_db_metrics(hd, id + 1, 0, &doc, &err), -ENOENT);
    assert_int_equal(http_db_events(hd, id + 1, &doc, &err), -ENOENT);
    assert_int_equal(http_db_snapshots(hd, id + 1, &doc, &err), -ENOENT);
    http_db_close(hd);
    db_close(db);
    /* Read-only: a reader on a missing file fails, it does not create one. */
    char missing[300];
    snprintf(missing, sizeof(missing), "%s/none.db", dir);
    assert_int_equal(http_db_open(missing, &hd, &err), -EIO);
    assert_int_not_equal(access(missing, F_OK), 0);
    char cmd[320];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_count), cmocka_unit_test(test_route),
        cmocka_unit_test(test_jobs_doc),    cmocka_unit_test(test_nodes_doc),
        cmocka_unit_test(test_records),     cmocka_unit_test(test_web_assets),
        cmocka_unit_test(test_reader),      cmocka_unit_test(test_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
