/*
 * gpt_record: the metric and event records a training run produces (the
 * engine fills them and hands them to its hooks, engine/trainer.h). Plain
 * structs, part of the header-only gptconfig library below both proto and
 * the engine: proto/metric.h gives them their JSON form.
 */
#ifndef GPT_RECORD_H
#define GPT_RECORD_H

#define GPT_METRIC_RANKS_MAX 64 /* ranks whose step time a record carries */

#include <stdint.h>

struct gpt_metric {
    int64_t step;      /* optimizer steps completed */
    int64_t max_steps; /* total planned, 0 if unknown */
    uint64_t epoch;
    double loss;     /* mean train loss over the step's global batch */
    double val_loss; /* NAN when not evaluated at this step */
    double accuracy; /* NAN unless a synthetic task was evaluated */
    double lr;
    double grad_norm; /* global, before clipping */
    double tokens_per_s;
    double ms_per_step;
    double mfu; /* fraction of peak, 0..1 */
    double eta_s;
    uint64_t tokens; /* tokens consumed so far */
    int32_t world_size;
    int64_t run_id; /* set by the daemon; 0 in `gptd run` */
    uint64_t mem_params_bytes, mem_grads_bytes, mem_optim_bytes, mem_acts_bytes; /* per rank */
    uint64_t mem_work_bytes; /* per rank: gathered units of full sharding */
    double time;             /* unix seconds */
    /* Per rank: milliseconds of forward and backward per step since the
     * last record, without the wait in the gradient collectives (a slow
     * rank shows here while every rank's ms_per_step is the same).
     * n_rank_step_ms: 0 = not measured. */
    int32_t n_rank_step_ms;
    float rank_step_ms[GPT_METRIC_RANKS_MAX];
};

#define GPT_EVENT_KIND_MAX 32
#define GPT_EVENT_MSG_MAX  512

struct gpt_event {
    char kind[GPT_EVENT_KIND_MAX]; /* "start", "resume", "snapshot", "eval", "sample",
                                       "stop", "done", "error", "world", ... */
    char message[GPT_EVENT_MSG_MAX];
    int64_t step;
    int64_t run_id;
    double time;
};

#endif
