/*
 * run_dir: a foreground run's folder and records (see run_dir.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "run_dir.h"
#include "snapshot.h"

#define RUN_DIR_PREFIX   "run-"
#define RUN_DIR_TRIES    100   /* run-TS-2 .. run-TS-100 in one second */
#define RUN_DIR_LINE_MAX 65536 /* longest metrics.jsonl line read back */

int run_dir_make(const char *root, char *ret, size_t cap, struct gpt_err *err)
{
    int rc = gpt_mkdirs(root, 0755);
    if (rc < 0)
        return gpt_err_set(err, rc, "snapshot.dir", "cannot create %s: %s", root, strerror(-rc));
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
    for (int i = 1; i <= RUN_DIR_TRIES; i++) {
        int n = i == 1 ? snprintf(ret, cap, "%s/" RUN_DIR_PREFIX "%s", root, stamp)
                       : snprintf(ret, cap, "%s/" RUN_DIR_PREFIX "%s-%d", root, stamp, i);
        if (n < 0 || (size_t)n >= cap)
            return gpt_err_set(err, -ENAMETOOLONG, "snapshot.dir", "%s is too long", root);
        if (mkdir(ret, 0755) == 0)
            return 0;
        if (errno != EEXIST)
            return gpt_err_set(err, -errno, "snapshot.dir", "cannot create %s: %s", ret,
                               strerror(errno));
    }
    return gpt_err_set(err, -EEXIST, "snapshot.dir", "too many runs in %s this second", root);
}

int run_dir_newest(const char *root, char *ret, size_t cap)
{
    DIR *d = opendir(root);
    if (!d)
        return -ENOENT;
    char best[256] = "";
    struct dirent *e;
    struct stat st;
    char marker[300];
    while ((e = readdir(d))) {
        /* a run's folder has its owner marker (a sweep's parent folder has none) */
        snprintf(marker, sizeof(marker), "%.255s/" GPT_SNAPSHOT_OWNER_FILE, e->d_name);
        if (strncmp(e->d_name, RUN_DIR_PREFIX, strlen(RUN_DIR_PREFIX)) == 0 &&
            strlen(e->d_name) < sizeof(best) && strcmp(e->d_name, best) > 0 &&
            fstatat(dirfd(d), marker, &st, 0) == 0)
            snprintf(best, sizeof(best), "%s", e->d_name);
    }
    closedir(d);
    int n = best[0] ? snprintf(ret, cap, "%s/%s", root, best) : -1;
    return n > 0 && (size_t)n < cap ? 0 : -ENOENT;
}

/* What an earlier run leaves in its folder: its snapshots (whole, slices
 * and the temporary files of an interrupted write), marker and records. */
static bool run_dir_is_ours(const char *name)
{
    size_t n = strlen(name);
    return strcmp(name, GPT_SNAPSHOT_OWNER_FILE) == 0 || strcmp(name, RUN_DIR_METRICS) == 0 ||
           strcmp(name, RUN_DIR_SPEC) == 0 || strcmp(name, RUN_DIR_OVERRIDES) == 0 ||
           ((strncmp(name, "snap-", 5) == 0 || strncmp(name, ".snap-", 6) == 0) &&
            (strstr(name, GPT_SNAPSHOT_SUFFIX) || strstr(name, GPT_SNAPSHOT_SLICE_SUFFIX))) ||
           (n > 8 && strcmp(name + n - 8, ".corrupt") == 0 && strncmp(name, "snap-", 5) == 0);
}

int run_dir_clear(const char *dir, struct gpt_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0
                               : gpt_err_set(err, -errno, "snapshot.dir", "cannot read %s: %s", dir,
                                             strerror(errno));
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)))
        if (run_dir_is_ours(e->d_name) && unlinkat(dirfd(d), e->d_name, 0) < 0 && errno != ENOENT)
            rc = gpt_err_set(err, -errno, "snapshot.dir", "cannot remove %s/%s: %s", dir, e->d_name,
                             strerror(errno));
    closedir(d);
    return rc;
}

/* Writes `o` (taken) as dir/name, pretty-printed. */
static int run_dir_write_json(const char *dir, const char *name, json_t *o, struct gpt_err *err)
{
    char path[GPT_JOB_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int rc = o && json_dump_file(o, path, JSON_INDENT(2)) == 0
                 ? 0
                 : gpt_err_set(err, -EIO, "snapshot.dir", "cannot write %s", path);
    json_decref(o);
    return rc;
}

int run_dir_record(const char *dir, const struct gpt_job *job, const char *const *over,
                   size_t n_over, bool append, FILE **ret, struct gpt_err *err)
{
    char path[GPT_JOB_PATH_MAX + 32];
    char *text = gpt_jobspec_to_json(job); /* shortest round-trip numbers */
    snprintf(path, sizeof(path), "%s/" RUN_DIR_SPEC, dir);
    FILE *f = text ? fopen(path, "we") : NULL;
    bool ok = f && fprintf(f, "%s\n", text) > 0;
    ok = f && fclose(f) == 0 && ok;
    free(text);
    if (!ok)
        return gpt_err_set(err, -EIO, "snapshot.dir", "cannot write %s", path);
    json_t *list = json_array();
    for (size_t i = 0; list && i < n_over; i++)
        json_array_append_new(list, json_string(over[i]));
    int rc = run_dir_write_json(dir, RUN_DIR_OVERRIDES, list, err);
    if (rc < 0)
        return rc;
    snprintf(path, sizeof(path), "%s/" RUN_DIR_METRICS, dir);
    *ret = fopen(path, append ? "ae" : "we");
    if (!*ret)
        return gpt_err_set(err, -errno, "snapshot.dir", "cannot open %s: %s", path,
                           strerror(errno));
    return 0;
}

void run_dir_record_line(FILE *f, json_t *o)
{
    char *s = f && o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;
    if (s) {
        fprintf(f, "%s\n", s);
        fflush(f);
    }
    free(s);
    json_decref(o);
}

int run_dir_summary(const char *dir, struct run_dir_sum *ret)
{
    char path[GPT_JOB_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/" RUN_DIR_METRICS, dir);
    *ret = (struct run_dir_sum){.best_val_loss = NAN, .final_loss = NAN};
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    char *line = malloc(RUN_DIR_LINE_MAX);
    while (line && fgets(line, RUN_DIR_LINE_MAX, f)) {
        json_t *o = json_loads(line, 0, NULL);
        const char *type = json_string_value(json_object_get(o, "type"));
        if (type && strcmp(type, "metric") == 0) {
            const json_t *v = json_object_get(o, "val_loss"), *l = json_object_get(o, "loss");
            if (json_is_number(v) &&
                (isnan(ret->best_val_loss) || json_number_value(v) < ret->best_val_loss))
                ret->best_val_loss = json_number_value(v);
            if (json_is_number(l))
                ret->final_loss = json_number_value(l);
            ret->steps = json_integer_value(json_object_get(o, "step"));
            ret->tokens = json_integer_value(json_object_get(o, "tokens"));
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    return 0;
}
