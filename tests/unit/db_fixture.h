/*
 * db_fixture: a fresh gptd database in its own temporary folder, per test
 * (cmocka's per-test set-up and tear-down). Header-only.
 */
#ifndef GPT_TEST_DB_FIXTURE_H
#define GPT_TEST_DB_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "db.h"

struct db_fixture {
    char dir[64];
    char path[128]; /* dir/gptd.db */
    struct db *db;
    int64_t job; /* a job the test's set-up inserted, if any */
};

/* A new fixture with an open database in /tmp/NAME.XXXXXX; NULL when the
 * folder or the database cannot be made. */
static inline struct db_fixture *db_fixture_new(const char *name)
{
    struct db_fixture *f = calloc(1, sizeof(*f));
    struct gpt_err err;
    if (!f)
        return NULL;
    snprintf(f->dir, sizeof(f->dir), "/tmp/%s.XXXXXX", name);
    if (!mkdtemp(f->dir)) {
        free(f);
        return NULL;
    }
    snprintf(f->path, sizeof(f->path), "%s/gptd.db", f->dir);
    if (db_open(f->path, &f->db, &err) < 0) {
        free(f);
        return NULL;
    }
    return f;
}

/* The per-test tear-down: closes the database, removes the folder. */
static inline int db_fixture_teardown(void **state)
{
    struct db_fixture *f = *state;
    char cmd[160];
    db_close(f->db);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    (void)!system(cmd);
    free(f);
    return 0;
}

#endif
