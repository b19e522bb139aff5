/*
 * bench_poll_backoff: what a polling wait that backs off loses between the
 * moment the awaited work ends and the moment the waiter sees it (issue
 * 34: the NCCL communicator's waits, the final DDP wait of every step
 * among them). The waiter is the production loop's shape: check, then
 * monotime_nap_backoff from GPT_NCCL_POLL_FIRST_NS doubling up to a cap;
 * the work is another thread that finishes at a set time (it sleeps, then
 * spins for the last 200 us so that its end is exact) and stamps it. The
 * check is an atomic load here where the NCCL path calls
 * ncclCommGetAsyncError and cudaStreamQuery (a few microseconds each on a
 * GPU host; --check-ns spins that long per check to model it). So this
 * measures the host side of the wait, which is all the back-off changes;
 * the GPU's own completion time is not part of it.
 *
 * One JSON line per (cap, work) on stdout:
 *   {"bench":"poll_backoff","cap_us":50,"work_us":1000,"waits":N,
 *    "lag_us_mean":..,"lag_us_p50":..,"lag_us_p99":..,"lag_us_max":..,
 *    "checks_per_wait":..,"waiter_cpu_us_per_wait":..}
 * cap 0 is a waiter that never sleeps (the floor: it burns its core), 50
 * the production cap (GPT_NCCL_POLL_MAX_NS), 1000 the old 1 ms back-off.
 * First, one line about this host's short sleeps:
 *   {"bench":"poll_backoff","probe":"nanosleep","asked_us":5,
 *    "slept_us_p50":..,"slept_us_p99":..,"timerslack_ns":..,"load1":..}
 *
 * --slack-ns N sets the waiter thread's timer slack first (PR_SET_TIMERSLACK;
 * gptd leaves the default, 50 us), to see what the slack costs a wait.
 *
 * Usage: bench_poll_backoff [--waits N] [--work-us 20,100,1000,5000]
 *                           [--caps-us 0,50,1000] [--check-ns N] [--slack-ns N]
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "cuda_plan.h"
#include "monotime.h"

#define BENCH_LIST_MAX 16
#define BENCH_SPIN_NS  200000 /* the worker spins this long before its end */

struct bench_opts {
    int waits;
    long work_us[BENCH_LIST_MAX], caps_us[BENCH_LIST_MAX];
    int n_work, n_caps;
    long check_ns;
    long slack_ns; /* the waiter's timer slack; -1 = leave it */
};

/* The worker thread: for each request, ends at `end_ns` and stamps it. */
struct bench_work {
    pthread_t th;
    atomic_llong end_ns;  /* requested end, 0 = none pending, -1 = quit */
    atomic_llong done_ns; /* stamped end, 0 until done */
};

static void *work_main(void *arg)
{
    struct bench_work *w = arg;
    for (;;) {
        long long end;
        while ((end = atomic_load(&w->end_ns)) == 0)
            nanosleep(&(struct timespec){0, 20000}, NULL);
        if (end < 0)
            return NULL;
        long long left = end - monotime_ns() - BENCH_SPIN_NS;
        if (left > 0)
            nanosleep(&(struct timespec){left / 1000000000LL, left % 1000000000LL}, NULL);
        long long now;
        while ((now = monotime_ns()) < end)
            ;
        atomic_store(&w->end_ns, 0);
        atomic_store(&w->done_ns, now);
    }
}

/* The check: the atomic load, plus check_ns of spinning (a modelled
 * cudaStreamQuery). */
static long long bench_check(struct bench_work *w, long check_ns)
{
    if (check_ns > 0) {
        int64_t until = monotime_ns() + check_ns;
        while (monotime_ns() < until)
            ;
    }
    return atomic_load(&w->done_ns);
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The production wait loop with its cap; returns the lag in ns. */
static double bench_wait(struct bench_work *w, long work_us, long cap_ns, long check_ns,
                         long *ret_checks)
{
    atomic_store(&w->done_ns, 0);
    atomic_store(&w->end_ns, (long long)monotime_ns() + (long long)work_us * 1000);
    long ns = GPT_NCCL_POLL_FIRST_NS, checks = 0;
    long long done;
    for (;;) {
        checks++;
        if ((done = bench_check(w, check_ns)) != 0)
            break;
        if (cap_ns > 0)
            monotime_nap_backoff(&ns, cap_ns);
    }
    *ret_checks = checks;
    return (double)(monotime_ns() - done);
}

static void bench_case(struct bench_work *w, const struct bench_opts *o, long cap_us, long work_us)
{
    double *lag = calloc((size_t)o->waits, sizeof(double));
    if (!lag)
        return;
    double sum = 0, cpu0 = thread_cpu_s();
    long checks = 0;
    for (int i = 0; i < o->waits; i++) {
        long c;
        lag[i] = bench_wait(w, work_us, cap_us * 1000, o->check_ns, &c) / 1e3;
        sum += lag[i];
        checks += c;
    }
    double cpu = thread_cpu_s() - cpu0;
    qsort(lag, (size_t)o->waits, sizeof(double), cmp_double);
    int n = o->waits;
    printf("{\"bench\":\"poll_backoff\",\"cap_us\":%ld,\"work_us\":%ld,\"check_ns\":%ld,"
           "\"slack_ns\":%ld,"
           "\"waits\":%d,\"lag_us_mean\":%.1f,\"lag_us_p50\":%.1f,\"lag_us_p99\":%.1f,"
           "\"lag_us_max\":%.1f,\"checks_per_wait\":%.1f,\"waiter_cpu_us_per_wait\":%.1f}\n",
           cap_us, work_us, o->check_ns, o->slack_ns, n, sum / n, lag[n / 2], lag[(n * 99) / 100],
           lag[n - 1], (double)checks / n, cpu * 1e6 / n);
    fflush(stdout);
    free(lag);
}

/* How long a 5 us nanosleep really takes here, and the timer slack. */
static void bench_probe(int n)
{
    double *t = calloc((size_t)n, sizeof(double));
    if (!t)
        return;
    for (int i = 0; i < n; i++) {
        int64_t t0 = monotime_ns();
        nanosleep(&(struct timespec){0, 5000}, NULL);
        t[i] = (double)(monotime_ns() - t0) / 1e3;
    }
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    long slack = -1;
    double load = -1;
    FILE *f = fopen("/proc/self/timerslack_ns", "r");
    if (f) {
        if (fscanf(f, "%ld", &slack) != 1)
            slack = -1;
        fclose(f);
    }
    if ((f = fopen("/proc/loadavg", "r"))) {
        if (fscanf(f, "%lf", &load) != 1)
            load = -1;
        fclose(f);
    }
    printf("{\"bench\":\"poll_backoff\",\"probe\":\"nanosleep\",\"asked_us\":5,"
           "\"slept_us_p50\":%.1f,\"slept_us_p99\":%.1f,\"timerslack_ns\":%ld,\"load1\":%.2f}\n",
           t[n / 2], t[(n * 99) / 100], slack, load);
    free(t);
}

static int parse_list(const char *s, long *out, int *ret_n)
{
    int n = 0;
    while (*s && n < BENCH_LIST_MAX) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || v < 0 || (*end && *end != ','))
            return -EINVAL;
        out[n++] = v;
        s = *end ? end + 1 : end;
    }
    *ret_n = n;
    return n > 0 ? 0 : -EINVAL;
}

static int parse_args(int argc, char **argv, struct bench_opts *o)
{
    *o = (struct bench_opts){.waits = 200,
                             .work_us = {20, 100, 1000, 5000},
                             .n_work = 4,
                             .caps_us = {0, GPT_NCCL_POLL_MAX_NS / 1000, 1000},
                             .n_caps = 3,
                             .slack_ns = -1};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
        if (strcmp(argv[i], "--waits") == 0 && v)
            rc = (o->waits = atoi(v)) > 0 ? 0 : -EINVAL;
        else if (strcmp(argv[i], "--work-us") == 0 && v)
            rc = parse_list(v, o->work_us, &o->n_work);
        else if (strcmp(argv[i], "--caps-us") == 0 && v)
            rc = parse_list(v, o->caps_us, &o->n_caps);
        else if (strcmp(argv[i], "--check-ns") == 0 && v)
            rc = (o->check_ns = atol(v)) >= 0 ? 0 : -EINVAL;
        else if (strcmp(argv[i], "--slack-ns") == 0 && v)
            rc = (o->slack_ns = atol(v)) >= 1 ? 0 : -EINVAL;
        else
            rc = -EINVAL;
        if (rc < 0) {
            fprintf(stderr, "usage: bench_poll_backoff [--waits N] [--work-us A,B,...] "
                            "[--caps-us A,B,...] [--check-ns N] [--slack-ns N]\n");
            return rc;
        }
        i++;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct bench_opts o;
    if (parse_args(argc, argv, &o) < 0)
        return 2;
    if (o.slack_ns > 0 && prctl(PR_SET_TIMERSLACK, (unsigned long)o.slack_ns, 0, 0, 0) != 0) {
        fprintf(stderr, "bench_poll_backoff: PR_SET_TIMERSLACK: %s\n", strerror(errno));
        return 1;
    }
    struct bench_work w;
    atomic_init(&w.end_ns, 0);
    atomic_init(&w.done_ns, 0);
    if (pthread_create(&w.th, NULL, work_main, &w) != 0) {
        fprintf(stderr, "bench_poll_backoff: cannot start the worker thread\n");
        return 1;
    }
    bench_probe(o.waits);
    for (int c = 0; c < o.n_caps; c++)
        for (int k = 0; k < o.n_work; k++)
            bench_case(&w, &o, o.caps_us[c], o.work_us[k]);
    atomic_store(&w.end_ns, -1);
    pthread_join(w.th, NULL);
    return 0;
}
