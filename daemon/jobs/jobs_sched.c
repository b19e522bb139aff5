/*
 * jobs_sched: which queued job starts when (see jobs.h). A pass reads the
 * queue in the order it is served (priority, then FIFO) and starts each
 * job in turn on the cluster's free nodes (jobs_start) until one does not
 * fit: that one and every job behind it wait, and the pass records why
 * (`gptctl list`: "queued #2: needs 2 nodes, 1 free"). A job whose `min`
 * is more than the cluster's alive nodes is passed over instead ("needs 3
 * nodes, cluster has 2"): no job's end would make room for it, so it must
 * not hold up the jobs behind it. It stays queued; when nothing else runs
 * it starts on what there is and waits for more nodes, as a job alone
 * always has. The round protocol hears how many wait
 * (cluster_set_queued): running jobs grow into free nodes only while none
 * does. A pass runs after every submit, resume and job end, and every
 * second while jobs wait (nodes come and go). Owns jobs.waits. Loop
 * thread.
 */
#include "jobs.h"
#include "jobs_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "log.h"

#define JOBS_SCHED_RETRY_MS 1000

/* A waiting job's `min` nodes: from the last pass, or read from its spec
 * (1 when it cannot be read: its start says why). */
static int jobs_sched_min(struct jobs *js, int64_t id)
{
    for (int i = 0; i < js->nwaits; i++)
        if (js->waits[i].job == id)
            return js->waits[i].nodes_min;
    struct db_job j;
    struct gpt_err err;
    int nmin = 1;
    if (db_job_get(js->db, id, &j, &err) < 0)
        return nmin;
    struct gpt_job *spec = malloc(sizeof(*spec));
    if (spec && gpt_jobspec_parse(j.spec_json, strlen(j.spec_json), NULL, 0, spec, &err) == 0 &&
        spec->distributed.nodes_min > 0)
        nmin = spec->distributed.nodes_min;
    free(spec);
    db_job_done(&j);
    return nmin;
}

/* Job `id`, the first of the pass that the cluster is too small for, when
 * nothing else started: starts it on what there is, to wait for more (as a
 * job alone always has). Whether it started. */
static bool jobs_sched_start_short(struct jobs *js, int64_t id)
{
    if (!id || js->runs || js->shutting_down)
        return false;
    struct gpt_err err;
    gpt_err_clear(&err);
    int rc = jobs_start(js, id, true, &err);
    return rc != -EAGAIN && rc != -ENOSPC; /* or failed, and marked so */
}

static void jobs_on_sched(uv_timer_t *t)
{
    struct jobs *js = t->data;
    if (!js->cluster || js->shutting_down)
        return;
    struct gpt_err err;
    int n = 0;
    int64_t *ids = malloc(JOBS_QUEUE_SCAN * sizeof(*ids));
    if (!ids || db_job_queue(js->db, ids, JOBS_QUEUE_SCAN, &n, &err) < 0) {
        log_error("scheduler: %s", ids ? err.msg : "out of memory");
        free(ids);
        uv_timer_start(&js->sched, jobs_on_sched, JOBS_SCHED_RETRY_MS, 0);
        return;
    }
    struct jobs_wait *w = calloc(n > 0 ? (size_t)n : 1, sizeof(*w));
    if (!w) {
        free(ids);
        uv_timer_start(&js->sched, jobs_on_sched, JOBS_SCHED_RETRY_MS, 0);
        return;
    }
    int nw = 0;
    int64_t head = 0, big = 0;
    for (int i = 0; i < n && !js->shutting_down; i++) {
        struct jobs_wait *x = &w[nw];
        x->job = ids[i];
        gpt_err_clear(&err);
        int rc;
        if (!head) {
            rc = jobs_start(js, ids[i], false, &err);
            if (rc == -EAGAIN)
                head = ids[i];
            else if (rc != -ENOSPC)
                continue; /* started, or failed (marked so): the next one */
            x->nodes_min = jobs_sched_min(js, ids[i]);
            snprintf(x->why, sizeof(x->why), "%.95s", err.msg);
        } else {
            x->nodes_min = jobs_sched_min(js, ids[i]);
            rc = cluster_job_fits(js->cluster, x->nodes_min, false, &err);
            if (rc == -ENOSPC) /* it waits for the cluster to grow, not for the head */
                snprintf(x->why, sizeof(x->why), "%.95s", err.msg);
            else
                snprintf(x->why, sizeof(x->why), "needs %d node%s, %d free; job %lld starts first",
                         x->nodes_min, x->nodes_min == 1 ? "" : "s",
                         cluster_free_nodes(js->cluster), (long long)head);
        }
        if (rc == -ENOSPC && !big)
            big = ids[i];
        x->position = ++nw;
    }
    free(ids);
    if (jobs_sched_start_short(js, big)) {
        /* It left the queue: the ones behind it move up. */
        int k = 0;
        for (int i = 0; i < nw; i++) {
            if (w[i].job == big)
                continue;
            w[k] = w[i];
            w[k].position = k + 1;
            k++;
        }
        nw = k;
    }
    free(js->waits);
    js->waits = w;
    js->nwaits = nw;
    /* Jobs the cluster is too small for count too: a running job that grew
     * into the free nodes would keep them from such a job once nodes join
     * (no job shrinks for another). */
    cluster_set_queued(js->cluster, nw);
    if (nw > 0)
        uv_timer_start(&js->sched, jobs_on_sched, JOBS_SCHED_RETRY_MS, 0);
}

void jobs_schedule(struct jobs *js)
{
    /* Jobs run on the cluster's worlds, which only the coordinator forms:
     * a member (no cluster attached) starts none. Its own queue is empty
     * (its clients' submits go to the coordinator) unless it was once its
     * own coordinator; such jobs wait here until it is again. */
    if (js->cluster && !js->shutting_down)
        uv_timer_start(&js->sched, jobs_on_sched, 0, 0);
}

int jobs_queue_position(const struct jobs *js, int64_t job, const char **why)
{
    for (int i = 0; js && i < js->nwaits; i++) {
        if (js->waits[i].job == job) {
            *why = js->waits[i].why;
            return js->waits[i].position;
        }
    }
    return 0;
}
