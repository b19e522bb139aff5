/*
 * paths: see paths.h.
 */
#include "paths.h"

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Resolves `path` like realpath(3); for a path that does not exist yet the
 * nearest existing parent is resolved and the rest appended, refusing any
 * ".." in that rest. */
static int paths_resolve(const char *path, char *out)
{
    char buf[PATH_MAX];
    if (realpath(path, out))
        return 0;
    if (errno != ENOENT || strlen(path) >= sizeof(buf))
        return -errno;
    snprintf(buf, sizeof(buf), "%s", path);
    char *slash = strrchr(buf, '/');
    const char *rest = slash ? path + (slash - buf) + 1 : path;
    if (strcmp(rest, "..") == 0 || strcmp(rest, ".") == 0)
        return -EACCES;
    const char *parent = ".";
    if (slash) {
        *slash = '\0';
        parent = buf[0] ? buf : "/";
    }
    int rc = paths_resolve(parent, out);
    if (rc < 0)
        return rc;
    size_t n = strlen(out);
    if (n + strlen(rest) + 2 >= PATH_MAX)
        return -ENAMETOOLONG;
    if (n > 1 || out[0] != '/')
        out[n++] = '/';
    strcpy(out + n, rest);
    return 0;
}

int paths_under(const char *path, const char *roots)
{
    char real[PATH_MAX], root[PATH_MAX], one[PATH_MAX];
    if (paths_resolve(path, real) < 0)
        return -EACCES;
    for (const char *r = roots; *r;) {
        const char *end = strchr(r, ':');
        size_t len = end ? (size_t)(end - r) : strlen(r);
        if (len > 0 && len < sizeof(one)) {
            memcpy(one, r, len);
            one[len] = '\0';
            if (paths_resolve(one, root) == 0) {
                size_t n = strlen(root);
                if (strcmp(root, "/") == 0 ||
                    (strncmp(real, root, n) == 0 && (real[n] == '/' || real[n] == '\0')))
                    return 0;
            }
        }
        r += len + (end ? 1 : 0);
    }
    return -EACCES;
}

/* Every file `pattern` names (a glob for shards) must be under `roots`. */
static int paths_check_data(const char *key, const char *pattern, const char *roots,
                            struct gpt_err *err)
{
    glob_t g;
    int rc = 0;
    if (glob(pattern, GLOB_NOSORT, NULL, &g) != 0) {
        /* Nothing matches: the path itself must still be allowed. */
        if (paths_under(pattern, roots) < 0)
            rc = gpt_err_set(err, -EACCES, key,
                             "%s: %s is outside the data roots of this gptd (data_roots = %s)", key,
                             pattern, roots);
        return rc;
    }
    for (size_t i = 0; i < g.gl_pathc && rc == 0; i++)
        if (paths_under(g.gl_pathv[i], roots) < 0)
            rc = gpt_err_set(err, -EACCES, key,
                             "%s: %s is outside the data roots of this gptd (data_roots = %s)", key,
                             g.gl_pathv[i], roots);
    globfree(&g);
    return rc;
}

int paths_check_job(const struct gpt_job *job, const char *data_roots, const char *snapshot_roots,
                    const char *state_dir, struct gpt_err *err)
{
    int rc;
    if (job->data.path[0] &&
        (rc = paths_check_data("data.path", job->data.path, data_roots, err)) < 0)
        return rc;
    if (job->data.val_path[0] &&
        (rc = paths_check_data("data.val_path", job->data.val_path, data_roots, err)) < 0)
        return rc;
    if (job->snapshot.dir[0] && paths_under(job->snapshot.dir, state_dir) < 0 &&
        paths_under(job->snapshot.dir, snapshot_roots) < 0)
        return gpt_err_set(err, -EACCES, "snapshot.dir",
                           "snapshot.dir: %s is outside the state directory and the snapshot "
                           "roots of this gptd (snapshot_roots = %s)",
                           job->snapshot.dir, snapshot_roots);
    return 0;
}
