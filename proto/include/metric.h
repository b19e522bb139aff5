/*
 * metric: the JSON form of the metric and event records a training run
 * produces (struct gpt_metric and struct gpt_event, the engine's types of
 * gpt_record.h). The same objects are printed by `gptd run --json`, stored
 * in SQLite by the daemon and streamed to `gptctl logs`. Pure.
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
#include "gpt_record.h"

/* New JSON object (caller owns the reference). NULL on ENOMEM. */
json_t *gpt_metric_to_json(const struct gpt_metric *m);
json_t *gpt_event_to_json(const struct gpt_event *e);
/* Decodes objects produced by the functions above; missing optional keys
 * become NAN/0. -EINVAL with err->path naming the bad key. */
int gpt_metric_from_json(const json_t *obj, struct gpt_metric *ret, struct gpt_err *err);
int gpt_event_from_json(const json_t *obj, struct gpt_event *ret, struct gpt_err *err);

#endif
