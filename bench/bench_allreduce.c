/*
 * bench_allreduce: algorithm bandwidth (bytes / time) of the tcp backend's
 * allreduce on one host, ranks as forked processes that rendezvous through a
 * directory kv. One JSON line per (world, size) on stdout, from rank 0:
 *   {"bench":"allreduce","backend":"gptd-shm","world":W,"bytes":N,
 *    "time_ms":T,"algbw_gbps":N/T}
 * "gptd-shm" when the communicator chose shared memory (all ranks on this
 * host, the default), "gptd-tcp" for the socket ring. Compare with
 * bench_allreduce_gloo.py (same sizes and iteration counts).
 *
 * Usage: bench_allreduce [--worlds 2,4] [--min-bytes 4096]
 *                        [--max-bytes 268435456] [--chunk-bytes N]
 *                        [--shm on|off|both]
 * --shm off (or --no-shm) measures the ring alone; both: shm, then the
 * ring, for each world.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"

#define BENCH_WORLD_MAX 16

struct bench_opts {
    int worlds[8];
    int n_worlds;
    size_t min_bytes, max_bytes, chunk_bytes;
    bool shm, ring; /* which transports to measure */
};

static double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Enough iterations for ~0.5 GB moved per size, within [5, 1000]; the gloo
 * script uses the same rule. */
static int bench_iters(size_t bytes)
{
    size_t it = (512u << 20) / bytes;
    return it < 5 ? 5 : it > 1000 ? 1000 : (int)it;
}

/* One rank: every size in turn. Returns 0 or a negative error. */
static int bench_rank(const struct bench_opts *o, const char *dir, int rank, int world, bool shm)
{
    struct gpt_kv kv = {0};
    struct gpt_comm *c = NULL;
    struct gpt_err err = {0};
    float *buf = NULL, *times = NULL;
    int rc = gpt_kv_dir_new(&kv, dir, &err);
    if (rc)
        goto out;
    struct gpt_comm_opts co = {
        .rank = rank,
        .world = world,
        .prefix = "bench/",
        .timeout_ms = 60000,
        .chunk_bytes = o->chunk_bytes,
        .shm = shm ? 0 : -1,
    };
    rc = gpt_comm_tcp_new(&co, &kv, &c, &err);
    if (rc)
        goto out;
    const char *backend = strcmp(c->ops->name, "shm") == 0 ? "gptd-shm" : "gptd-tcp";
    buf = calloc(o->max_bytes / sizeof(float) + 1, sizeof(float));
    times = calloc((size_t)world, sizeof(float));
    if (!buf || !times) {
        rc = -ENOMEM;
        goto out;
    }
    memset(buf, 0, o->max_bytes); /* fault the pages in before timing */
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes; bytes *= 4) {
        size_t n = bytes / sizeof(float);
        int iters = bench_iters(bytes);
        for (int w = 0; w < 2 && rc == 0; w++)
            rc = gpt_comm_allreduce(c, buf, n, GPT_REDUCE_SUM);
        if (rc == 0)
            rc = gpt_comm_barrier(c);
        double t0 = bench_now_s();
        for (int i = 0; i < iters && rc == 0; i++)
            rc = gpt_comm_allreduce(c, buf, n, GPT_REDUCE_SUM);
        double dt = (bench_now_s() - t0) / iters;
        /* The slowest rank's time: everyone posts its own, rank 0 takes the max. */
        memset(times, 0, (size_t)world * sizeof(float));
        times[rank] = (float)dt;
        if (rc == 0)
            rc = gpt_comm_allreduce(c, times, (size_t)world, GPT_REDUCE_SUM);
        if (rc)
            goto out;
        if (rank == 0) {
            double worst = 0;
            for (int r = 0; r < world; r++)
                worst = times[r] > worst ? times[r] : worst;
            printf("{\"bench\":\"allreduce\",\"backend\":\"%s\",\"world\":%d,"
                   "\"bytes\":%zu,\"time_ms\":%.4f,\"algbw_gbps\":%.4f}\n",
                   backend, world, bytes, worst * 1e3, (double)bytes / worst * 1e-9);
            fflush(stdout);
        }
    }
out:
    if (rc)
        fprintf(stderr, "bench_allreduce: rank %d: %s (%s)\n", rank, gpt_strerror(rc), err.msg);
    gpt_comm_free(c);
    gpt_kv_dir_free(&kv);
    free(buf);
    free(times);
    return rc;
}

static int bench_world(const struct bench_opts *o, int world, bool shm)
{
    char dir[] = "/tmp/gptd-bench-XXXXXX", cmd[64];
    pid_t pid[BENCH_WORLD_MAX];
    int failed = 0;
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    fflush(NULL);
    for (int r = 0; r < world; r++) {
        pid[r] = fork();
        if (pid[r] == 0)
            _exit(bench_rank(o, dir, r, world, shm) ? 1 : 0);
        if (pid[r] < 0) {
            perror("fork");
            return 1;
        }
    }
    for (int r = 0; r < world; r++) {
        int st = 0;
        waitpid(pid[r], &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_allreduce: could not remove %s\n", dir);
    return failed;
}

static int bench_parse(int argc, char **argv, struct bench_opts *o)
{
    *o = (struct bench_opts){
        .worlds = {2, 4},
        .n_worlds = 2,
        .min_bytes = 4096,
        .max_bytes = 256u << 20,
        .shm = true,
    };
    for (int i = 1; i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(k, "--no-shm") == 0) {
            o->shm = false;
            o->ring = true;
            i--; /* no value */
            continue;
        }
        if (!v)
            return -1;
        if (strcmp(k, "--shm") == 0) {
            o->shm = strcmp(v, "off") != 0;
            o->ring = strcmp(v, "on") != 0;
            if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0 && strcmp(v, "both") != 0)
                return -1;
        } else if (strcmp(k, "--worlds") == 0) {
            o->n_worlds = 0;
            for (char *end; *v && o->n_worlds < 8; v = *end ? end + 1 : end) {
                long w = strtol(v, &end, 10);
                if (w < 1 || w > BENCH_WORLD_MAX || end == v)
                    return -1;
                o->worlds[o->n_worlds++] = (int)w;
            }
        } else if (strcmp(k, "--min-bytes") == 0) {
            o->min_bytes = strtoull(v, NULL, 10);
        } else if (strcmp(k, "--max-bytes") == 0) {
            o->max_bytes = strtoull(v, NULL, 10);
        } else if (strcmp(k, "--chunk-bytes") == 0) {
            o->chunk_bytes = strtoull(v, NULL, 10);
        } else {
            return -1;
        }
    }
    return o->min_bytes >= sizeof(float) && o->min_bytes <= o->max_bytes ? 0 : -1;
}

int main(int argc, char **argv)
{
    struct bench_opts o;
    if (bench_parse(argc, argv, &o) != 0) {
        fprintf(stderr,
                "usage: %s [--worlds 2,4] [--min-bytes N] [--max-bytes N] "
                "[--chunk-bytes N] [--shm on|off|both] [--no-shm]\n",
                argv[0]);
        return 2;
    }
    int failed = 0;
    for (int i = 0; i < o.n_worlds; i++) {
        if (o.shm)
            failed |= bench_world(&o, o.worlds[i], true);
        if (o.ring)
            failed |= bench_world(&o, o.worlds[i], false);
    }
    return failed ? 1 : 0;
}
