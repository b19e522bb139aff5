/*
 * metric: the metric and event records a training run produces, and their
 * JSON form. The same objects are printed by `gptd run --json`, stored in
 * SQLite by the daemon and streamed to `gptctl logs`. Pure.
 *
 * JSON keys (stable; users and tools depend on them): metric objects are
 *   {"type":"metric","step","max_steps","epoch","loss","val_loss","accuracy",
 *    "lr","grad_norm","tokens_per_s","ms_per_step","mfu","eta_s","tokens",
 *    "world_size","run_id","mem_params_bytes","mem_grads_bytes",
 *    "mem_optim_bytes","mem_acts_bytes","mem_work_bytes","time","rank_step_ms"}
 * where val_loss/accuracy are present only when evaluated at that step and
 * rank_step_ms (each rank's compute time per step, ranks 0.. in order, at
 * most GPT_METRIC_RANKS_MAX) only when the trainer measured it;
 * events are {"type":"event","kind","message","step","time", "run_id"}.
 */
#ifndef GPT_METRIC_H
#define GPT_METRIC_H

#include <jansson.h>
#include <stdint.h>

#include "gpt_err.h"

#define GPT_METRIC_RANKS_MAX 64 /* ranks whose step time a record carries */

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

/* New JSON object (caller owns the reference). NULL on ENOMEM. */
json_t *gpt_metric_to_json(const struct gpt_metric *m);
json_t *gpt_event_to_json(const struct gpt_event *e);
/* Decodes objects produced by the functions above; missing optional keys
 * become NAN/0. -EINVAL with err->path naming the bad key. */
int gpt_metric_from_json(const json_t *obj, struct gpt_metric *ret, struct gpt_err *err);
int gpt_event_from_json(const json_t *obj, struct gpt_event *ret, struct gpt_err *err);

#endif
