/*
 * db_history_page: a resumed job's history in the order it happened, and
 * pages that neither skip nor repeat a record when runs reuse steps. Run 1
 * trains steps 1-6 (snapshot at 3); run 2 resumes from step 3 and trains
 * 4-9, replacing run 1's records of 4-6; the cluster's "world" event of run
 * 2 carries the job's newest step (6), not the step it resumes from.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "db.h"
#include "unit/db_fixture.h"

#define REC_MAX 64

struct recs {
    int n;
    double time[REC_MAX];
    int64_t step[REC_MAX];
    char kind[REC_MAX][GPT_EVENT_KIND_MAX]; /* "m" for a metric */
};

static void on_metric(void *ctx, const struct gpt_metric *m)
{
    struct recs *r = ctx;
    assert_true(r->n < REC_MAX);
    r->time[r->n] = m->time;
    r->step[r->n] = m->step;
    snprintf(r->kind[r->n++], GPT_EVENT_KIND_MAX, "m");
}

static void on_event(void *ctx, const struct gpt_event *e)
{
    struct recs *r = ctx;
    assert_true(r->n < REC_MAX);
    r->time[r->n] = e->time;
    r->step[r->n] = e->step;
    snprintf(r->kind[r->n++], GPT_EVENT_KIND_MAX, "%s", e->kind);
}

static void event(struct db *db, int64_t job, int64_t run, int64_t step, double t, const char *kind)
{
    struct gpt_event e = {.step = step, .run_id = run, .time = t};
    struct gpt_err err;
    snprintf(e.kind, sizeof(e.kind), "%s", kind);
    snprintf(e.message, sizeof(e.message), "%s at %g", kind, t);
    assert_int_equal(db_event_insert(db, job, &e, &err), 0);
}

static void metric(struct db *db, int64_t job, int64_t run, int64_t step, double t)
{
    struct gpt_metric m = {.step = step,
                           .run_id = run,
                           .time = t,
                           .loss = 3.0 - 0.1 * (double)step,
                           .val_loss = NAN,
                           .accuracy = NAN,
                           .lr = 1e-3,
                           .max_steps = 9};
    struct gpt_err err;
    assert_int_equal(db_metric_insert(db, job, &m, &err), 0);
}

static int setup(void **state)
{
    struct db_fixture *f = db_fixture_new("test_dbhp");
    struct gpt_err err;
    if (!f)
        return -1;
    struct db_job j = {.owner_uid = 1000, .created = 1.0, .max_steps = 9};
    snprintf(j.name, sizeof(j.name), "resumed");
    j.spec_json = "{\"name\":\"resumed\"}";
    assert_int_equal(db_job_insert(f->db, &j, &f->job, &err), 0);
    struct db *db = f->db;
    int64_t job = f->job, r1, r2;
    event(db, job, 0, 0, 1, "queued");
    assert_int_equal(db_run_insert(db, job, 1, "", 10, &r1, &err), 0);
    event(db, job, r1, 0, 10, "world");
    event(db, job, r1, 0, 11, "start");
    for (int s = 1; s <= 6; s++) {
        metric(db, job, r1, s, 11 + s);
        if (s == 3)
            event(db, job, r1, 3, 14.5, "snapshot");
    }
    event(db, job, r1, 6, 18, "done");
    event(db, job, 0, 3, 20, "queued"); /* gptctl resume --snapshot (step 3) */
    assert_int_equal(db_run_insert(db, job, 1, "snap-3", 21, &r2, &err), 0);
    event(db, job, r2, 6, 21, "world"); /* the job's newest step, not run 2's */
    event(db, job, r2, 3, 22, "resume");
    for (int s = 4; s <= 9; s++)
        metric(db, job, r2, s, 19 + s); /* 4-6 replace run 1's */
    event(db, job, r2, 9, 29, "done");
    *state = f;
    return 0;
}

/* Reads the whole history in pages of `limit` metrics. */
static void read_all(struct db_fixture *f, int64_t since, int limit, struct recs *r)
{
    struct db_history_cb cb = {r, on_metric, on_event};
    int64_t after = -1, last;
    int more = 1, pages = 0;
    struct gpt_err err;
    memset(r, 0, sizeof(*r));
    while (more) {
        assert_int_equal(
            db_history_page(f->db, f->job, since, after, limit, &cb, &last, &more, &err), 0);
        assert_true(last >= after);
        after = last;
        assert_true(++pages < 20);
    }
}

static void test_order_and_pages(void **state)
{
    struct db_fixture *f = *state;
    /* What happened, in time order (run 1's metrics 4-6 were replaced). */
    static const double want[] = {1,  10, 11, 12, 13, 14, 14.5, 18, 20,
                                  21, 22, 23, 24, 25, 26, 27,   28, 29};
    const int n = (int)(sizeof(want) / sizeof(want[0]));
    for (int limit = 1; limit <= 8; limit++) {
        struct recs r;
        read_all(f, 0, limit, &r);
        if (r.n != n)
            fail_msg("limit %d: %d records, want %d", limit, r.n, n);
        for (int i = 0; i < n; i++)
            if (r.time[i] != want[i])
                fail_msg("limit %d: record %d (%s, step %lld) has time %g, want %g", limit, i,
                         r.kind[i], (long long)r.step[i], r.time[i], want[i]);
    }
}

/* The positions a follower resumes from (db_history_metric_pos) and where a
 * `logs` without follow stops (db_history_last_pos) are the keys the pages
 * use: reading from one metric's position minus one starts at that metric,
 * and the last page ends at the last position. */
static void test_positions(void **state)
{
    struct db_fixture *f = *state;
    struct gpt_err err;
    /* setup's second run: the first two runs of a new database */
    const int64_t r2 = 2;
    int64_t pos, last_pos, end;
    assert_int_equal(db_history_metric_pos(f->db, f->job, r2, 7, &pos, &err), 0);
    struct recs r;
    memset(&r, 0, sizeof(r));
    struct db_history_cb cb = {&r, on_metric, on_event};
    int more;
    assert_int_equal(db_history_page(f->db, f->job, 0, pos - 1, 1, &cb, &end, &more, &err), 0);
    assert_int_equal(end, pos);
    assert_true(r.n >= 1);
    assert_string_equal(r.kind[r.n - 1], "m");
    assert_int_equal(r.step[r.n - 1], 7);
    assert_true(r.time[r.n - 1] == 26); /* run 2's step 7 */
    /* the last position: the page that reaches it is the last */
    assert_int_equal(db_history_last_pos(f->db, f->job, &last_pos, &err), 0);
    assert_int_equal(db_history_metric_pos(f->db, f->job, r2, 9, &pos, &err), 0);
    assert_int_equal(last_pos, pos);
    memset(&r, 0, sizeof(r));
    assert_int_equal(db_history_page(f->db, f->job, 0, -1, 100, &cb, &end, &more, &err), 0);
    assert_int_equal(more, 0);
    assert_int_equal(end, last_pos);
    /* a job without metrics: -1, the whole (empty) history */
    struct db_job j = {.owner_uid = 1000, .created = 2.0, .max_steps = 1};
    snprintf(j.name, sizeof(j.name), "empty");
    j.spec_json = "{\"name\":\"empty\"}";
    int64_t empty;
    assert_int_equal(db_job_insert(f->db, &j, &empty, &err), 0);
    assert_int_equal(db_history_last_pos(f->db, empty, &last_pos, &err), 0);
    assert_int_equal(last_pos, -1);
}

static void test_since(void **state)
{
    struct db_fixture *f = *state;
    /* Step >= 5: run 1's end (6), run 2's world (6), metrics 5-9, end. */
    static const double want[] = {18, 21, 24, 25, 26, 27, 28, 29};
    const int n = (int)(sizeof(want) / sizeof(want[0]));
    for (int limit = 1; limit <= 3; limit++) {
        struct recs r;
        read_all(f, 5, limit, &r);
        assert_int_equal(r.n, n);
        for (int i = 0; i < n; i++)
            assert_true(r.time[i] == want[i] && r.step[i] >= 5);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_order_and_pages, setup, db_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_since, setup, db_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_positions, setup, db_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
