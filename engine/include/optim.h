/*
 * optim: learning-rate schedule, global gradient norm and clipping, AdamW.
 * Called by the trainer on the worker thread; pure computation.
 */
#ifndef GPT_OPTIM_H
#define GPT_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "gpt_config.h"

struct gpt_model;

/* Learning rate of optimizer step `step` (0-based): linear warmup from
 * lr/warmup to lr over warmup_steps, then cosine from lr to min_lr ending at
 * max_steps (or constant lr). */
double gpt_lr_at(const struct gpt_optim_spec *o, int64_t step, int64_t max_steps);

/* Sum of squares of grads[off, off+len) (double accumulation). The global
 * norm is sqrt of the sum over all slices/ranks. */
double gpt_grad_sumsq(const struct gpt_model *m, size_t off, size_t len);

/* gpt_grad_sumsq left on the device in m->step_dev[1] (a backend with
 * the step-on-device ops): no synchronisation; gpt_model_step_fetch
 * reads it. */
void gpt_grad_sumsq_dev(const struct gpt_model *m, size_t off, size_t len);

/* Clip factor for a global norm: min(1, clip / (norm + 1e-6)); 1 when
 * clip <= 0 or the norm is NaN (0 when it is infinite). */
float gpt_clip_scale(double norm, double clip);

/* AdamW on params[off, off+len): grads are multiplied by grad_scale first;
 * weight decay only on 2-D tensors; `t` is the 1-based step for bias
 * correction. */
void gpt_adamw_update(struct gpt_model *m, const struct gpt_optim_spec *o, float lr, int64_t t,
                      float grad_scale, size_t off, size_t len);

/* gpt_adamw_update with grad_scale = gpt_clip_scale(sqrt(step_dev[1]),
 * clip), computed on the device when the update runs (after
 * gpt_grad_sumsq_dev): the same bits, no synchronisation. */
void gpt_adamw_update_clip_dev(struct gpt_model *m, const struct gpt_optim_spec *o, float lr,
                               int64_t t, double clip, size_t off, size_t len);

#endif
