/*
 * snapdiff: compares two snapshots for the integration tests.
 *
 *   snapdiff A.gpts B.gpts [rel_tol]
 *
 * Prints the step, data cursor and world size of each, and the largest
 * difference between their parameters as max|a-b| / max(max|a|, 1e-12).
 * Exit 0 when the steps and cursors match and the difference is within
 * rel_tol (default 0: bitwise identical parameters), 1 otherwise, 2 on a
 * read error.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot.h"

static float *load(const char *path, struct gpt_snapshot_meta *meta)
{
    struct gpt_err err;
    if (gpt_snapshot_read_meta(path, meta, &err) < 0) {
        fprintf(stderr, "snapdiff: %s\n", err.msg);
        return NULL;
    }
    float *p = malloc(meta->n_params * sizeof(float));
    if (!p || gpt_snapshot_read(path, meta, p, NULL, NULL, &err) < 0) {
        fprintf(stderr, "snapdiff: %s\n", p ? err.msg : "out of memory");
        free(p);
        return NULL;
    }
    return p;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: snapdiff A.gpts B.gpts [rel_tol]\n");
        return 2;
    }
    double tol = argc > 3 ? atof(argv[3]) : 0.0;
    struct gpt_snapshot_meta ma, mb;
    float *a = load(argv[1], &ma), *b = a ? load(argv[2], &mb) : NULL;
    if (!a || !b)
        return 2;
    printf("a: step %lld epoch %llu position %llu world %d\n", (long long)ma.step,
           (unsigned long long)ma.cursor.epoch, (unsigned long long)ma.cursor.position,
           ma.world_size);
    printf("b: step %lld epoch %llu position %llu world %d\n", (long long)mb.step,
           (unsigned long long)mb.cursor.epoch, (unsigned long long)mb.cursor.position,
           mb.world_size);
    if (ma.n_params != mb.n_params || ma.step != mb.step || ma.cursor.epoch != mb.cursor.epoch ||
        ma.cursor.position != mb.cursor.position) {
        printf("snapdiff: step, cursor or parameter count differ\n");
        return 1;
    }
    double maxdiff = 0, maxabs = 0;
    size_t differing = 0;
    for (size_t i = 0; i < ma.n_params; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (a[i] != b[i])
            differing++;
        if (d > maxdiff)
            maxdiff = d;
        if (fabs(a[i]) > maxabs)
            maxabs = fabs(a[i]);
    }
    double rel = maxdiff / (maxabs > 1e-12 ? maxabs : 1e-12);
    printf("params: %llu, differing %zu, max abs diff %.3g, relative %.3g (tolerance %.3g)\n",
           (unsigned long long)ma.n_params, differing, maxdiff, rel, tol);
    free(a);
    free(b);
    return (tol == 0 ? differing == 0 : rel <= tol) ? 0 : 1;
}
