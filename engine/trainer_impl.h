/*
 * trainer_impl: what trainer.c (set-up, the step loop, metrics) and
 * trainer_state.c (the start state and snapshots) share: the trainer's
 * state, its clocks and its event report. Private to engine/trainer*.c;
 * everything here runs on the worker thread. Calls run one way: trainer.c
 * calls trainer_state.c's functions below, never the reverse.
 */
#ifndef GPT_TRAINER_IMPL_H
#define GPT_TRAINER_IMPL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "data.h"
#include "model.h"
#include "monotime.h"
#include "rng.h"
#include "shard.h"
#include "snapshot.h"
#include "trainer.h"
#include "trainer_ddp.h"

/* State a resume restores and rank 0 broadcasts to the others. */
struct train_state {
    int64_t step;
    struct gpt_data_cursor cursor;
    uint64_t rng[4];
    uint64_t tokens;
    int64_t resumed; /* 1 if restored from a snapshot */
};

struct trainer {
    const struct gpt_trainer_opts *opts;
    const struct gpt_job *job;
    struct gpt_comm *comm;
    struct gpt_comm *own_comm;
    int rank, world;
    struct gpt_backend *be;
    struct gpt_backend *own_be; /* created here when the caller gave none */
    struct gpt_dataset *ds;
    struct gpt_model model;
    bool model_ready;
    bool setup_stop_told; /* the "stop" event of a stop during set-up went out */
    size_t B, T;
    /* This rank's share of every step's global batch. */
    struct trainer_batch batch;
    int *inputs, *targets;   /* (B, T) host */
    struct gpt_err data_err; /* why a batch read failed: it names the file */
    float *logits_host;      /* (B, T, Vp) host, for evaluation and sampling */
    int64_t max_steps;
    struct train_state st;
    struct gpt_rng rng;
    char snapdir[GPT_JOB_PATH_MAX];
    struct gpt_snapshot_owner owner; /* from the folder's marker; token 0: none */
    double peak_flops;               /* per rank, FLOP/s; NAN: unknown */
    int bf16;                        /* the backend took bf16 or auto (set_precision) */
    int guard_said;                  /* the attention guard's note went out as an event */
    struct trainer_ddp ddp;
    double compute_s;        /* forward + backward time since the last metric record */
    struct gpt_shard *shard; /* sharding optimizer/full; NULL for none */
    struct gpt_train_result *result;
};

static inline double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void emit_event(struct trainer *t, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static inline void emit_event(struct trainer *t, const char *kind, const char *fmt, ...)
{
    if (t->rank != 0 || !t->opts->hooks.event)
        return;
    struct gpt_event e;
    memset(&e, 0, sizeof(e));
    snprintf(e.kind, sizeof(e.kind), "%s", kind);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof(e.message), fmt, ap);
    va_end(ap);
    e.step = t->st.step;
    e.run_id = t->opts->run_id;
    e.time = wall_s();
    t->opts->hooks.event(t->opts->hooks.ctx, &e);
}

/* Set-up of a large model takes long (every allocation is zeroed, the
 * initial weights are drawn one by one): a stop asked meanwhile (cancel,
 * gptd stopping) is honoured between its stages rather than after it, and
 * gpt_train returns GPT_TRAIN_STOPPED before the first step (nothing to
 * snapshot). In a larger world each rank stops on its own request: a rank
 * that leaves set-up early makes its peers' next collective (the start
 * broadcast, the shard attach) fail when its communicator goes, and a peer
 * that was asked to stop too reads that failure as the stop
 * (setup_failure_is_stop), so no rank waits for the first step boundary. */
static inline int setup_stopped(void *ctx)
{
    struct trainer *t = ctx;
    if (!t->opts->hooks.should_stop ||
        t->opts->hooks.should_stop(t->opts->hooks.ctx) == GPT_STOP_NO)
        return 0;
    if (!t->setup_stop_told) {
        t->setup_stop_told = true;
        emit_event(t, "stop", "stopped on request during set-up, before training");
    }
    return 1;
}

/* ---- trainer_state.c ---- */

/* Reads the snapshot folder's owner marker into t->owner (token 0: none)
 * and, on a snapshot writer, removes stale temporary files. Returns 0 or a
 * negative errno with err filled. */
int trainer_state_snapdir_prepare(struct trainer *t, struct gpt_err *err);

/* Rank 0 initialises or resumes; every rank receives the same start state
 * (t->st, the weights and moments, t->rng). Returns 0, GPT_TRAIN_STOPPED
 * (a stop during set-up), or a negative errno with err filled. Collective:
 * every rank calls it. */
int trainer_state_init(struct trainer *t, struct gpt_err *err);

/* Writes a snapshot of the current step (sharded runs: every rank takes
 * part). Returns 0 or a negative errno with err filled. Collective under
 * sharding. */
int trainer_state_snapshot_write(struct trainer *t, struct gpt_err *err);

#endif
