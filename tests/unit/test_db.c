/*
 * Unit tests of daemon/db: schema creation and version, reopening, the job
 * queue order, state transitions, re-queue at start-up, metric upserts,
 * chunked history with events merged in, snapshots, and a job's count of
 * restarts (kept across a reopen, and a version 1 file migrated to it);
 * job tokens, a cancel recorded before its acknowledgement and honoured by
 * the re-queue at start-up, and files refused at open (empty, not a
 * database, damaged in the middle) with the file named.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#include <math.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "db.h"
#include "unit/db_fixture.h"

static int setup(void **state)
{
    struct db_fixture *f = db_fixture_new("test_db");
    *state = f;
    return f ? 0 : -1;
}

static int64_t add_job(struct db *db, const char *name, int64_t prio)
{
    struct db_job j = {.owner_uid = 1000, .priority = prio, .created = 1.0, .max_steps = 100};
    snprintf(j.name, sizeof(j.name), "%s", name);
    j.spec_json = "{\"name\":\"x\"}";
    int64_t id = 0;
    struct gpt_err err;
    assert_int_equal(db_job_insert(db, &j, &id, &err), 0);
    assert_true(id > 0);
    return id;
}

static void test_schema(void **state)
{
    struct db_fixture *f = *state;
    assert_int_equal(db_schema_version(f->db), DB_SCHEMA_VERSION);
    int64_t id = add_job(f->db, "persist", 0);
    db_close(f->db);
    /* Reopening an up-to-date file migrates nothing and keeps the data. */
    struct gpt_err err;
    assert_int_equal(db_open(f->path, &f->db, &err), 0);
    struct db_job j;
    assert_int_equal(db_job_get(f->db, id, &j, &err), 0);
    assert_string_equal(j.name, "persist");
    assert_string_equal(j.spec_json, "{\"name\":\"x\"}");
    assert_int_equal(j.state, DB_JOB_QUEUED);
    assert_int_equal(j.owner_uid, 1000);
    db_job_done(&j);
    assert_int_equal(db_job_get(f->db, id + 100, &j, &err), -ENOENT);
}

static void test_queue_order(void **state)
{
    struct db_fixture *f = *state;
    struct gpt_err err;
    int64_t a = add_job(f->db, "a", 0);
    int64_t b = add_job(f->db, "b", 0);
    int64_t c = add_job(f->db, "c", 5);
    int64_t next;
    assert_int_equal(db_job_next_queued(f->db, &next, &err), 0);
    assert_int_equal(next, c);
    assert_int_equal(db_job_set_state(f->db, c, DB_JOB_RUNNING, NULL, 2.0, &err), 0);
    assert_int_equal(db_job_next_queued(f->db, &next, &err), 0);
    assert_int_equal(next, a);
    assert_int_equal(db_job_set_state(f->db, a, DB_JOB_CANCELLED, NULL, 3.0, &err), 0);
    assert_int_equal(db_job_next_queued(f->db, &next, &err), 0);
    assert_int_equal(next, b);
    assert_int_equal(db_job_set_state(f->db, b, DB_JOB_FAILED, "boom", 4.0, &err), 0);
    assert_int_equal(db_job_next_queued(f->db, &next, &err), -ENOENT);

    struct db_job j;
    assert_int_equal(db_job_get(f->db, b, &j, &err), 0);
    assert_int_equal(j.state, DB_JOB_FAILED);
    assert_string_equal(j.error, "boom");
    assert_true(j.finished == 4.0);
    db_job_done(&j);

    int64_t n;
    assert_int_equal(db_job_count(f->db, DB_JOB_RUNNING, &n, &err), 0);
    assert_int_equal(n, 1);
    /* Per owner (max_queued_jobs_per_uid): only that uid's jobs in that state. */
    assert_int_equal(db_job_count_owned(f->db, DB_JOB_RUNNING, 1000, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(db_job_count_owned(f->db, DB_JOB_RUNNING, 1001, &n, &err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(db_job_count_owned(f->db, DB_JOB_QUEUED, 1000, &n, &err), 0);
    assert_int_equal(n, 0);
    int64_t d = add_job(f->db, "d", 0);
    assert_int_equal(db_job_count_owned(f->db, DB_JOB_QUEUED, 1000, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(db_job_set_state(f->db, d, DB_JOB_CANCELLED, NULL, 4.5, &err), 0);

    /* Start-up: the running job goes back to the queue, marked to resume. */
    assert_int_equal(db_jobs_requeue_running(f->db, 5.0, &err), 1);
    assert_int_equal(db_job_get(f->db, c, &j, &err), 0);
    assert_int_equal(j.state, DB_JOB_QUEUED);
    assert_int_equal(j.resume, 1);
    db_job_done(&j);
}

struct hist {
    int64_t steps[64];
    char kinds[64][GPT_EVENT_KIND_MAX];
    int n;
};

static void hist_metric(void *ctx, const struct gpt_metric *m)
{
    struct hist *h = ctx;
    h->steps[h->n] = m->step;
    snprintf(h->kinds[h->n++], GPT_EVENT_KIND_MAX, "m");
}

static void hist_event(void *ctx, const struct gpt_event *e)
{
    struct hist *h = ctx;
    h->steps[h->n] = e->step;
    snprintf(h->kinds[h->n++], GPT_EVENT_KIND_MAX, "%s", e->kind);
}

static struct gpt_metric metric_at(int64_t step, double loss)
{
    struct gpt_metric m = {.step = step,
                           .max_steps = 100,
                           .loss = loss,
                           .val_loss = NAN,
                           .accuracy = NAN,
                           .lr = 1e-3,
                           .run_id = 1,
                           .time = (double)step};
    return m;
}

static void test_metrics_history(void **state)
{
    struct db_fixture *f = *state;
    struct gpt_err err;
    int64_t job = add_job(f->db, "m", 0);
    assert_int_equal(db_begin(f->db, &err), 0);
    struct gpt_event start = {.kind = "start", .step = 0, .run_id = 1, .time = -1};
    assert_int_equal(db_event_insert(f->db, job, &start, &err), 0);
    for (int s = 5; s <= 50; s += 5) {
        struct gpt_metric m = metric_at(s, 3.0 - s * 0.01);
        assert_int_equal(db_metric_insert(f->db, job, &m, &err), 0);
    }
    struct gpt_event snap = {.kind = "snapshot", .step = 20, .run_id = 1, .time = 20.5};
    assert_int_equal(db_event_insert(f->db, job, &snap, &err), 0);
    /* An eval record for step 50 adds val_loss and keeps the train loss. */
    struct gpt_metric ev = metric_at(50, NAN);
    ev.val_loss = 2.5;
    assert_int_equal(db_metric_insert(f->db, job, &ev, &err), 0);
    assert_int_equal(db_commit(f->db, &err), 0);

    struct hist h = {0};
    struct db_history_cb cb = {&h, hist_metric, hist_event};
    int64_t last;
    int more;
    /* Chunks of 4 metrics: steps 5..20 (+ the events up to 20), then more. */
    assert_int_equal(db_history(f->db, job, 0, -1, 4, &cb, &last, &more, &err), 0);
    assert_int_equal(more, 1);
    assert_int_equal(last, 20);
    assert_int_equal(h.n, 6);
    assert_string_equal(h.kinds[0], "start");
    assert_string_equal(h.kinds[4], "m");
    assert_int_equal(h.steps[4], 20);
    assert_string_equal(h.kinds[5], "snapshot");
    assert_int_equal(db_history(f->db, job, 0, last, 4, &cb, &last, &more, &err), 0);
    assert_int_equal(last, 40);
    assert_int_equal(db_history(f->db, job, 0, last, 4, &cb, &last, &more, &err), 0);
    assert_int_equal(more, 0);
    assert_int_equal(last, 50);
    assert_int_equal(h.n, 12);
    for (int i = 1; i < h.n; i++)
        assert_true(h.steps[i] >= h.steps[i - 1]);

    /* --since skips older steps. */
    struct hist h2 = {0};
    cb.ctx = &h2;
    assert_int_equal(db_history(f->db, job, 45, -1, 100, &cb, &last, &more, &err), 0);
    assert_int_equal(h2.n, 2);
    assert_int_equal(h2.steps[0], 45);

    struct db_job j;
    assert_int_equal(db_job_get(f->db, job, &j, &err), 0);
    assert_int_equal(j.step, 50);
    assert_true(fabs(j.loss - 2.5) < 1e-9);
    db_job_done(&j);
}

static void snap_count(void *ctx, const struct db_snapshot *s)
{
    int *n = ctx;
    if (*n == 0)
        assert_int_equal(s->step, 40);
    (*n)++;
}

static void test_snapshots_runs(void **state)
{
    struct db_fixture *f = *state;
    struct gpt_err err;
    int64_t job = add_job(f->db, "s", 0);
    int64_t run;
    assert_int_equal(db_run_insert(f->db, job, 1, NULL, 1.0, &run, &err), 0);
    struct db_snapshot s = {.job_id = job, .run_id = run, .step = 20, .size = 100};
    snprintf(s.node, sizeof(s.node), "host");
    snprintf(s.path, sizeof(s.path), "/x/snap-20.gpts");
    int64_t id1, id2;
    assert_int_equal(db_snapshot_insert(f->db, &s, &id1, &err), 0);
    assert_true(id1 > 0);
    assert_int_equal(db_snapshot_insert(f->db, &s, &id2, &err), 0);
    assert_int_equal(id2, 0); /* duplicate ignored */
    s.step = 40;
    assert_int_equal(db_snapshot_insert(f->db, &s, &id2, &err), 0);
    int n = 0;
    assert_int_equal(db_snapshot_list(f->db, job, snap_count, &n, &err), 0);
    assert_int_equal(n, 2);
    struct db_snapshot g;
    assert_int_equal(db_snapshot_get(f->db, id1, &g, &err), 0);
    assert_int_equal(g.step, 20);
    assert_string_equal(g.path, "/x/snap-20.gpts");
    assert_int_equal(db_snapshot_get(f->db, 999, &g, &err), -ENOENT);
    assert_int_equal(db_run_end(f->db, run, "completed", 2.0, &err), 0);
    assert_int_equal(db_runs_close_open(f->db, 3.0, &err), 0);
}

/* distributed.max_restarts counts failures across coordinator restarts:
 * the count is stored with the job, survives a reopen, and a resume-less
 * re-queue keeps it. */
static void test_restarts_persist(void **state)
{
    struct db_fixture *f = *state;
    struct gpt_err err;
    int64_t id = add_job(f->db, "elastic", 0);
    struct db_job j;
    assert_int_equal(db_job_get(f->db, id, &j, &err), 0);
    assert_int_equal(j.restarts, 0);
    db_job_done(&j);
    assert_int_equal(db_job_set_state(f->db, id, DB_JOB_RUNNING, NULL, 2.0, &err), 0);
    assert_int_equal(db_job_set_restarts(f->db, id, 2, &err), 0);
    db_close(f->db);
    /* The coordinator dies while the job runs, and starts again. */
    assert_int_equal(db_open(f->path, &f->db, &err), 0);
    assert_int_equal(db_jobs_requeue_running(f->db, 3.0, &err), 1);
    assert_int_equal(db_job_get(f->db, id, &j, &err), 0);
    assert_int_equal(j.state, DB_JOB_QUEUED);
    assert_int_equal(j.restarts, 2);
    db_job_done(&j);
}

/* A database written by schema version 1 (before restarts were kept) opens,
 * migrates, and its jobs read with no restarts used. */
static void test_migrate_v1(void **state)
{
    struct db_fixture *f = *state;
    struct gpt_err err;
    db_close(f->db);
    f->db = NULL;
    char path[160];
    snprintf(path, sizeof(path), "%s/v1.db", f->dir);
    sqlite3 *conn = NULL;
    assert_int_equal(sqlite3_open(path, &conn), SQLITE_OK);
    const char *v1 = "CREATE TABLE jobs (id INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                     " owner_uid INTEGER NOT NULL, state TEXT NOT NULL,"
                     " priority INTEGER NOT NULL DEFAULT 0, spec_json TEXT NOT NULL,"
                     " created REAL NOT NULL, started REAL, finished REAL, error TEXT,"
                     " snapshot_dir TEXT NOT NULL DEFAULT '', resume INTEGER NOT NULL DEFAULT 0,"
                     " resume_snapshot INTEGER NOT NULL DEFAULT 0,"
                     " step INTEGER NOT NULL DEFAULT 0, max_steps INTEGER NOT NULL DEFAULT 0,"
                     " loss REAL);"
                     "CREATE TABLE runs (id INTEGER PRIMARY KEY,"
                     " job_id INTEGER NOT NULL REFERENCES jobs(id), started REAL NOT NULL,"
                     " ended REAL, world_size INTEGER NOT NULL, status TEXT NOT NULL,"
                     " resumed_from TEXT);"
                     "INSERT INTO jobs(name, owner_uid, state, spec_json, created)"
                     " VALUES('old', 7, 'completed', '{}', 1.0);"
                     "PRAGMA user_version = 1;";
    assert_int_equal(sqlite3_exec(conn, v1, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(conn);
    assert_int_equal(db_open(path, &f->db, &err), 0);
    assert_int_equal(db_schema_version(f->db), DB_SCHEMA_VERSION);
    struct db_job j;
    assert_int_equal(db_job_get(f->db, 1, &j, &err), 0);
    assert_string_equal(j.name, "old");
    assert_int_equal(j.state, DB_JOB_COMPLETED);
    assert_int_equal(j.restarts, 0);
    assert_true(j.token != 0); /* the migration gave old jobs a token */
    assert_int_equal(j.cancel_uid, -1);
    db_job_done(&j);
    assert_int_equal(db_job_set_restarts(f->db, 1, 1, &err), 0);
}

struct msgs {
    int n_events;
    char last_event[GPT_EVENT_MSG_MAX];
};

static void msgs_metric(void *ctx, const struct gpt_metric *m)
{
    (void)ctx;
    (void)m;
}

static void msgs_event(void *ctx, const struct gpt_event *e)
{
    struct msgs *h = ctx;
    h->n_events++;
    snprintf(h->last_event, sizeof(h->last_event), "%s", e->message);
}

/* Every job gets its own random token; a cancel recorded while the job ran
 * survives the daemon's death: the re-queue ends the job cancelled (with an
 * event) instead of resuming it. A resume clears the request. */
static void test_token_cancel(void **state)
{
    struct db_fixture *f = *state;
    struct gpt_err err;
    int64_t a = add_job(f->db, "a", 0), b = add_job(f->db, "b", 0);
    struct db_job ja, jb;
    assert_int_equal(db_job_get(f->db, a, &ja, &err), 0);
    assert_int_equal(db_job_get(f->db, b, &jb, &err), 0);
    assert_true(ja.token != 0 && jb.token != 0 && ja.token != jb.token);
    assert_int_equal(ja.cancel_uid, -1);
    uint64_t token_a = ja.token;
    db_job_done(&ja);
    db_job_done(&jb);
    assert_int_equal(db_job_set_state(f->db, a, DB_JOB_RUNNING, NULL, 2.0, &err), 0);
    assert_int_equal(db_job_set_state(f->db, b, DB_JOB_RUNNING, NULL, 2.0, &err), 0);
    assert_int_equal(db_job_request_cancel(f->db, a, 1000, &err), 0);
    /* gptd dies before the step boundary; the next one opens the file. */
    db_close(f->db);
    assert_int_equal(db_open(f->path, &f->db, &err), 0);
    assert_int_equal(db_jobs_requeue_running(f->db, 3.0, &err), 1);
    assert_int_equal(db_job_get(f->db, a, &ja, &err), 0);
    assert_int_equal(ja.state, DB_JOB_CANCELLED);
    assert_int_equal(ja.resume, 0);
    assert_int_equal(ja.cancel_uid, -1);
    assert_int_equal(ja.token, token_a); /* the token never changes */
    assert_true(ja.finished == 3.0);
    db_job_done(&ja);
    assert_int_equal(db_job_get(f->db, b, &jb, &err), 0);
    assert_int_equal(jb.state, DB_JOB_QUEUED);
    assert_int_equal(jb.resume, 1);
    db_job_done(&jb);
    struct msgs h = {0};
    struct db_history_cb cb = {&h, msgs_metric, msgs_event};
    int64_t last;
    int more;
    assert_int_equal(db_history(f->db, a, 0, -1, 10, &cb, &last, &more, &err), 0);
    assert_int_equal(h.n_events, 1);
    assert_non_null(strstr(h.last_event, "cancelled by uid 1000"));
    /* A resume clears a recorded cancel. */
    assert_int_equal(db_job_request_cancel(f->db, b, 0, &err), 0);
    assert_int_equal(db_job_set_resume(f->db, b, 1, 0, &err), 0);
    assert_int_equal(db_job_get(f->db, b, &jb, &err), 0);
    assert_int_equal(jb.cancel_uid, -1);
    db_job_done(&jb);
}

static void write_file(const char *path, const void *p, size_t n, long off)
{
    FILE *fp = fopen(path, off < 0 ? "wb" : "r+b");
    assert_non_null(fp);
    if (off >= 0)
        assert_int_equal(fseek(fp, off, SEEK_SET), 0);
    assert_int_equal(fwrite(p, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

/* An existing file that is empty, not a database or damaged is refused,
 * naming the file and what to do; nothing is created in its place. */
static void test_refuse_damaged(void **state)
{
    struct db_fixture *f = *state;
    struct gpt_err err;
    struct db *db = NULL;
    char path[160];

    snprintf(path, sizeof(path), "%s/empty.db", f->dir);
    write_file(path, "", 0, -1);
    assert_int_equal(db_open(path, &db, &err), -GPT_E_CORRUPT);
    assert_null(db);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "empty"));
    assert_non_null(strstr(err.msg, "move it away"));

    snprintf(path, sizeof(path), "%s/text.db", f->dir);
    write_file(path, "this is not a database, it is a text file long enough", 53, -1);
    assert_int_equal(db_open(path, &db, &err), -GPT_E_CORRUPT);
    assert_non_null(strstr(err.msg, path));

    /* Damaged in the middle: many pages, one of them overwritten. */
    for (int i = 0; i < 400; i++)
        add_job(f->db, "a job with a name long enough to fill the pages of the table", i % 7);
    db_close(f->db);
    f->db = NULL;
    unsigned char junk[4096];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (unsigned char)(i * 37 + 11);
    write_file(f->path, junk, sizeof(junk), 3 * 4096);
    assert_int_equal(db_open(f->path, &db, &err), -GPT_E_CORRUPT);
    assert_non_null(strstr(err.msg, f->path));
    assert_non_null(strstr(err.msg, "damaged"));

    /* A file that does not exist is a first start. */
    snprintf(path, sizeof(path), "%s/new.db", f->dir);
    assert_int_equal(db_open(path, &db, &err), 0);
    db_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_schema, setup, db_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_queue_order, setup, db_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_metrics_history, setup, db_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_snapshots_runs, setup, db_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_restarts_persist, setup, db_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_migrate_v1, setup, db_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_token_cancel, setup, db_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_refuse_damaged, setup, db_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
