/*
 * db_samples: each job's newest `sample` replies in the database (see
 * db.h): recorded with the job's older ones beyond the kept number
 * dropped in the same transaction, and listed newest first. Uses db.c's
 * connection and statements (db_int.h). Loop thread only, except
 * db_sample_read (any thread that owns the statement), db_sample_json and
 * db_sample_from_json (any thread).
 */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "db.h"
#include "db_int.h"
#include "str_escape.h"

/* The bytes of `s` kept: all of it, or at most DB_SAMPLE_TEXT_MAX cut
 * before a UTF-8 continuation byte, so that the kept text stays valid. */
static size_t db_sample_cut(const char *s, bool *ret_cut)
{
    size_t n = strlen(s);
    *ret_cut = n > DB_SAMPLE_TEXT_MAX;
    if (!*ret_cut)
        return n;
    n = DB_SAMPLE_TEXT_MAX;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

static int db_sample_insert_row(struct db *db, const struct db_sample *r, int keep,
                                struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_SAMPLE_INSERT, err, &rc);
    if (!s)
        return rc;
    bool cut;
    const char *completion = r->completion ? r->completion : "";
    size_t n = db_sample_cut(completion, &cut);
    int i = 1;
    sqlite3_bind_int64(s, i++, r->job_id);
    sqlite3_bind_double(s, i++, r->time);
    sqlite3_bind_int64(s, i++, r->uid);
    sqlite3_bind_int64(s, i++, r->snapshot_id);
    sqlite3_bind_int64(s, i++, r->step);
    sqlite3_bind_text(s, i++, r->snapshot ? r->snapshot : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(s, i++, r->prompt ? r->prompt : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(s, i++, r->prompt_ids ? r->prompt_ids : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(s, i++, completion, (int)n, SQLITE_STATIC);
    sqlite3_bind_int(s, i++, cut || r->truncated);
    sqlite3_bind_int64(s, i++, r->tokens);
    sqlite3_bind_double(s, i++, r->temperature);
    sqlite3_bind_int64(s, i++, r->top_k);
    sqlite3_bind_int64(s, i++, (int64_t)r->seed);
    if ((rc = db_exec_stmt(db, s, err, "insert sample")) < 0)
        return rc;
    if (!(s = db_stmt(db, DB_ST_SAMPLE_TRIM, err, &rc)))
        return rc;
    sqlite3_bind_int64(s, 1, r->job_id);
    sqlite3_bind_int(s, 2, keep);
    return db_exec_stmt(db, s, err, "drop old samples");
}

int db_sample_insert(struct db *db, const struct db_sample *r, int keep, struct gpt_err *err)
{
    if (keep <= 0)
        return 0;
    if (keep > DB_SAMPLES_MAX)
        keep = DB_SAMPLES_MAX;
    if (db->in_tx)
        return db_sample_insert_row(db, r, keep, err);
    int rc = db_begin(db, err);
    if (rc < 0)
        return rc;
    if ((rc = db_sample_insert_row(db, r, keep, err)) < 0) {
        db_rollback(db);
        return rc;
    }
    return db_commit(db, err);
}

static const char *db_sample_text(sqlite3_stmt *s, int i)
{
    const unsigned char *t = sqlite3_column_text(s, i);
    return t ? (const char *)t : "";
}

void db_sample_read(sqlite3_stmt *s, struct db_sample *ret)
{
    memset(ret, 0, sizeof(*ret));
    ret->id = sqlite3_column_int64(s, 0);
    ret->job_id = sqlite3_column_int64(s, 1);
    ret->time = sqlite3_column_double(s, 2);
    ret->uid = sqlite3_column_int64(s, 3);
    ret->snapshot_id = sqlite3_column_int64(s, 4);
    ret->step = sqlite3_column_int64(s, 5);
    ret->snapshot = db_sample_text(s, 6);
    ret->prompt = db_sample_text(s, 7);
    ret->prompt_ids = db_sample_text(s, 8);
    ret->completion = db_sample_text(s, 9);
    ret->truncated = sqlite3_column_int(s, 10) != 0;
    ret->tokens = sqlite3_column_int64(s, 11);
    ret->temperature = sqlite3_column_double(s, 12);
    ret->top_k = sqlite3_column_int64(s, 13);
    ret->seed = (uint64_t)sqlite3_column_int64(s, 14);
}

int db_sample_list(struct db *db, int64_t job_id, int limit,
                   void (*fn)(void *ctx, const struct db_sample *s), void *ctx, struct gpt_err *err)
{
    int rc = 0;
    sqlite3_stmt *s = db_stmt(db, DB_ST_SAMPLE_LIST, err, &rc);
    if (!s)
        return rc;
    sqlite3_bind_int64(s, 1, job_id);
    sqlite3_bind_int(s, 2, limit);
    int src;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        struct db_sample r;
        db_sample_read(s, &r);
        fn(ctx, &r);
    }
    rc = src == SQLITE_DONE ? 0 : db_fail(db, err, src, "list samples");
    sqlite3_reset(s);
    return rc;
}

json_t *db_sample_json(const struct db_sample *r)
{
    json_t *o = json_pack("{s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:f, s:I, s:I, s:b}", "id",
                          (json_int_t)r->id, "job", (json_int_t)r->job_id, "time", r->time, "uid",
                          (json_int_t)r->uid, "snapshot_id", (json_int_t)r->snapshot_id, "step",
                          (json_int_t)r->step, "tokens", (json_int_t)r->tokens, "temperature",
                          r->temperature, "top_k", (json_int_t)r->top_k, "seed",
                          (json_int_t)r->seed, "truncated", r->truncated);
    if (!o)
        return NULL;
    json_object_set_new(o, "snapshot", gpt_str_json(r->snapshot));
    json_object_set_new(o, "prompt", gpt_str_json(r->prompt));
    if (r->prompt_ids[0])
        json_object_set_new(o, "prompt_ids", gpt_str_json(r->prompt_ids));
    json_object_set_new(o, "completion", gpt_str_json(r->completion));
    return o;
}

/* A string member of `o` into *ret (at most `max` bytes; absent with
 * `optional`: ""). */
static int db_sample_str(const json_t *o, const char *key, size_t max, bool optional,
                         const char **ret, struct gpt_err *err)
{
    const json_t *v = json_object_get(o, key);
    if (!v && optional) {
        *ret = "";
        return 0;
    }
    if (!json_is_string(v) || json_string_length(v) > max)
        return gpt_err_set(err, -EINVAL, key, "%s must be a string of at most %zu bytes", key, max);
    *ret = json_string_value(v);
    return 0;
}

int db_sample_from_json(const json_t *o, struct db_sample *ret, struct gpt_err *err)
{
    static const char *const ints[] = {"uid", "snapshot_id", "step", "tokens", "top_k", "seed"};
    memset(ret, 0, sizeof(*ret));
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
        if (!json_is_integer(json_object_get(o, ints[i])))
            return gpt_err_set(err, -EINVAL, ints[i], "%s must be an integer", ints[i]);
    if (!json_is_number(json_object_get(o, "time")) ||
        !json_is_number(json_object_get(o, "temperature")))
        return gpt_err_set(err, -EINVAL, "time", "time and temperature must be numbers");
    int rc = db_sample_str(o, "snapshot", DB_PATH_MAX - 1, false, &ret->snapshot, err);
    if (rc == 0)
        rc = db_sample_str(o, "prompt", DB_SAMPLE_FIELD_MAX, false, &ret->prompt, err);
    if (rc == 0)
        rc = db_sample_str(o, "prompt_ids", DB_SAMPLE_FIELD_MAX, true, &ret->prompt_ids, err);
    if (rc == 0) /* cut to DB_SAMPLE_TEXT_MAX when kept */
        rc = db_sample_str(o, "completion", SIZE_MAX, false, &ret->completion, err);
    if (rc < 0)
        return rc;
    ret->time = json_number_value(json_object_get(o, "time"));
    ret->uid = json_integer_value(json_object_get(o, "uid"));
    ret->snapshot_id = json_integer_value(json_object_get(o, "snapshot_id"));
    ret->step = json_integer_value(json_object_get(o, "step"));
    ret->tokens = json_integer_value(json_object_get(o, "tokens"));
    ret->temperature = json_number_value(json_object_get(o, "temperature"));
    ret->top_k = json_integer_value(json_object_get(o, "top_k"));
    ret->seed = (uint64_t)json_integer_value(json_object_get(o, "seed"));
    ret->truncated = json_is_true(json_object_get(o, "truncated"));
    return 0;
}
