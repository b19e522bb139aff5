/*
 * workers: runs one job on K worker threads in this process, one rank each
 * (the thread-per-device shape the GPU path uses), each with its own model
 * replica and communicator (tcp ring over loopback between the threads, or
 * `local` for one worker). Used by `gptd run` and by the daemon's job
 * runner.
 *
 * The owner (one thread: main or the loop) starts and joins; callbacks run
 * on worker threads and must only hand data off (copy into a mailbox).
 */
#ifndef GPTD_WORKERS_H
#define GPTD_WORKERS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "comm.h"
#include "gpt_err.h"
#include "jobspec.h"
#include "metric.h"
#include "trainer.h"

/* Whose rights a daemon job's files are opened with and where they must
 * lie at the time of use (see fsid.h, paths.h). */
struct workers_access {
    uid_t uid;                  /* the job's owner */
    const char *data_roots;     /* ':'-separated; copied */
    const char *snapshot_roots; /* copied */
    const char *state_dir;      /* copied */
};

struct workers_opts {
    const struct gpt_job *job; /* copied at start */
    int n_workers;             /* local worker threads (ranks) */
    const char *snapshot_dir;  /* copied; NULL = job's */
    int resume;                /* continue from the newest valid snapshot if any */
    const char *resume_path;   /* a chosen snapshot (copied) */
    int64_t run_id;

    /* Multi-process/multi-node worlds: this process's ranks are
     * rank_base .. rank_base + n_workers - 1 of `world`, and addresses are
     * exchanged through `kv` under `kv_prefix`. world == 0 means a world of
     * exactly n_workers in this process (an in-process kv is used). */
    int world;
    int rank_base;
    const struct gpt_kv *kv; /* borrowed; must outlive the workers */
    const char *kv_prefix;   /* copied */
    int comm_timeout_ms;     /* 0 = default */
    const char *bind_host;   /* address the ring listens on (copied); NULL = loopback */
    /* The first local rank writes snapshots too (each node of an elastic
     * world keeps its own copy), not only global rank 0. */
    bool write_snapshots;
    /* NULL (gptd run, the Slurm launcher): the process's own rights and no
     * roots. Otherwise each worker thread takes access->uid's file-system
     * identity before it opens anything of the job, and checks the data
     * files and the snapshot folder it really opened against the roots. */
    const struct workers_access *access; /* copied */

    /* Worker-thread callbacks (global rank 0 only for metric/event). */
    void *ctx;
    void (*on_metric)(void *ctx, const struct gpt_metric *m);
    void (*on_event)(void *ctx, const struct gpt_event *e);
    /* Called once, on the last worker thread to finish, after every worker
     * returned: the owner may then call workers_join without blocking. */
    void (*on_exit)(void *ctx);
};

struct workers;

/* Local workers for a job: distributed.workers_per_node when set, else one
 * per visible GPU on a GPU host (when the job may use CUDA), else
 * `cpu_default`. */
int workers_default_count(const struct gpt_job *job, int cpu_default);

/* Starts the threads. Returns 0 and a new handle, or an error (no threads
 * left running). Does not block on training. */
int workers_start(const struct workers_opts *o, struct workers **ret, struct gpt_err *err);

/* Any thread: ask every worker to stop at the next step boundary, writing a
 * snapshot first when `how` is GPT_STOP_SNAPSHOT. */
void workers_request_stop(struct workers *w, int how);

/* Any thread: abort every collective now (a peer died); workers return
 * -ECANCELED without a snapshot. */
void workers_abort(struct workers *w);

/* Joins the threads (blocks until they return). Returns the job's outcome:
 * GPT_TRAIN_DONE, GPT_TRAIN_STOPPED or the first worker's error (err
 * filled). *ret gets global rank 0's result when this process has it. */
int workers_join(struct workers *w, struct gpt_train_result *ret, struct gpt_err *err);

/* NULL allowed; joins first if needed. */
void workers_free(struct workers *w);

#endif
