/*
 * db_samples: each job keeps its newest `keep` samples and no other job's
 * are touched; keep 0 records nothing; a completion past
 * DB_SAMPLE_TEXT_MAX is cut before a UTF-8 continuation byte and marked;
 * db_sample_json escapes a completion that is not valid UTF-8 instead of
 * dropping it, and carries prompt_ids only when the prompt was ids;
 * db_sample_from_json reads it back and refuses bad keys by name.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "db.h"
#include "unit/db_fixture.h"

#define LIST_MAX 16

struct list {
    int n;
    int64_t id[LIST_MAX], job[LIST_MAX];
    char prompt[LIST_MAX][32];
    size_t completion_len[LIST_MAX];
    bool truncated[LIST_MAX];
};

static void on_sample(void *ctx, const struct db_sample *s)
{
    struct list *l = ctx;
    assert_true(l->n < LIST_MAX);
    l->id[l->n] = s->id;
    l->job[l->n] = s->job_id;
    snprintf(l->prompt[l->n], sizeof(l->prompt[0]), "%s", s->prompt);
    l->completion_len[l->n] = strlen(s->completion);
    l->truncated[l->n++] = s->truncated;
}

static int64_t job_new(struct db *db, const char *name)
{
    struct db_job j = {.owner_uid = 1000, .created = 1.0, .max_steps = 9};
    int64_t id;
    struct gpt_err err;
    snprintf(j.name, sizeof(j.name), "%s", name);
    j.spec_json = "{}";
    assert_int_equal(db_job_insert(db, &j, &id, &err), 0);
    return id;
}

static void sample(struct db *db, int64_t job, const char *prompt, const char *text, int keep)
{
    struct db_sample s = {.job_id = job,
                          .time = 2.0,
                          .uid = 1000,
                          .step = 5,
                          .snapshot = "/s/snap-5.gpts",
                          .prompt = prompt,
                          .prompt_ids = "",
                          .completion = text,
                          .tokens = 8,
                          .temperature = 0.8,
                          .seed = 7};
    struct gpt_err err;
    assert_int_equal(db_sample_insert(db, &s, keep, &err), 0);
}

static void list(struct db *db, int64_t job, struct list *l)
{
    struct gpt_err err;
    memset(l, 0, sizeof(*l));
    assert_int_equal(db_sample_list(db, job, LIST_MAX, on_sample, l, &err), 0);
}

static void test_cap_per_job(void **state)
{
    struct db_fixture *f = *state;
    int64_t a = job_new(f->db, "a"), b = job_new(f->db, "b");
    sample(f->db, b, "b1", "x", 3);
    for (int i = 1; i <= 5; i++) {
        char p[8];
        snprintf(p, sizeof(p), "a%d", i);
        sample(f->db, a, p, "y", 3);
    }
    struct list l;
    list(f->db, a, &l);
    assert_int_equal(l.n, 3); /* the newest three, newest first */
    assert_string_equal(l.prompt[0], "a5");
    assert_string_equal(l.prompt[2], "a3");
    assert_true(l.id[0] > l.id[1] && l.id[1] > l.id[2]);
    list(f->db, b, &l);
    assert_int_equal(l.n, 1); /* another job's samples stay */
    assert_string_equal(l.prompt[0], "b1");
    /* keep 0 records nothing; a smaller keep trims at the next insert */
    sample(f->db, b, "b2", "x", 0);
    list(f->db, b, &l);
    assert_int_equal(l.n, 1);
    sample(f->db, a, "a6", "y", 1);
    list(f->db, a, &l);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.prompt[0], "a6");
}

static void test_cut_and_json(void **state)
{
    struct db_fixture *f = *state;
    int64_t a = job_new(f->db, "a");
    /* 'e' then two-byte characters: byte DB_SAMPLE_TEXT_MAX falls inside
     * one, which is left out whole. */
    size_t n = DB_SAMPLE_TEXT_MAX + 64;
    char *text = malloc(n + 1);
    assert_non_null(text);
    text[0] = 'e';
    for (size_t i = 1; i + 1 < n; i += 2) {
        text[i] = (char)0xC3;
        text[i + 1] = (char)0xA9;
    }
    text[n - 1] = 'e';
    text[n] = '\0';
    sample(f->db, a, "p", text, 5);
    sample(f->db, a, "q", "\xff<b>", 5);
    free(text);
    struct list l;
    list(f->db, a, &l);
    assert_int_equal(l.n, 2);
    assert_false(l.truncated[0]);
    assert_true(l.truncated[1]);
    assert_int_equal(l.completion_len[1], DB_SAMPLE_TEXT_MAX - 1);

    struct db_sample s = {.id = 3,
                          .job_id = a,
                          .prompt = "",
                          .prompt_ids = "3,4",
                          .completion = "\xff<b>",
                          .snapshot = "/s"};
    json_t *o = db_sample_json(&s);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "completion")), "\\xff<b>");
    assert_string_equal(json_string_value(json_object_get(o, "prompt_ids")), "3,4");
    json_decref(o);
    s.prompt = "12";
    s.prompt_ids = "";
    o = db_sample_json(&s);
    assert_null(json_object_get(o, "prompt_ids"));
    assert_string_equal(json_string_value(json_object_get(o, "prompt")), "12");

    /* Back from JSON (a member's record): the same fields; a wrong type or
     * an overlong prompt is refused by name. */
    struct db_sample r;
    struct gpt_err err;
    s.step = 250;
    s.temperature = 0.5;
    s.top_k = 3;
    s.seed = 99;
    s.uid = 1000;
    json_decref(o);
    o = db_sample_json(&s);
    assert_int_equal(db_sample_from_json(o, &r, &err), 0);
    assert_int_equal(r.step, 250);
    assert_int_equal(r.top_k, 3);
    assert_int_equal(r.seed, 99);
    assert_int_equal(r.uid, 1000);
    assert_true(r.temperature == 0.5);
    assert_string_equal(r.prompt, "12");
    assert_string_equal(r.prompt_ids, "");
    assert_string_equal(r.completion, "\\xff<b>");
    json_object_set_new(o, "step", json_string("x"));
    assert_int_equal(db_sample_from_json(o, &r, &err), -EINVAL);
    assert_string_equal(err.path, "step");
    json_object_set_new(o, "step", json_integer(1));
    char *big = calloc(DB_SAMPLE_FIELD_MAX + 2, 1);
    assert_non_null(big);
    memset(big, 'a', DB_SAMPLE_FIELD_MAX + 1);
    json_object_set_new(o, "prompt", json_string(big));
    free(big);
    assert_int_equal(db_sample_from_json(o, &r, &err), -EINVAL);
    assert_string_equal(err.path, "prompt");
    json_decref(o);
}

static int setup(void **state)
{
    struct db_fixture *f = db_fixture_new("test_dbsa");
    if (!f)
        return -1;
    *state = f;
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cap_per_job, setup, db_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_cut_and_json, setup, db_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
