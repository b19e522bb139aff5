/*
 * jobspec_resume: the keys a resume may change (the tutorial's "raise max
 * epochs and continue"), and resume overrides as the parser takes them.
 * Pure.
 */
#ifndef GPT_JOBSPEC_RESUME_H
#define GPT_JOBSPEC_RESUME_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "gpt_err.h"

#define GPT_RESUME_OVERRIDES_MAX 64 /* keys in one resume */

/* Whether `key` ("trainer.max_steps") may change between two runs of one
 * job: training length, learning rate and schedule, eval, log, snapshot
 * cadence and the cluster range may; the model, the data, the batch
 * geometry, the seed, the precision and the snapshot folder may not. */
bool gpt_jobspec_resume_key_ok(const char *key);

/* Turns a resume's overrides object ("a.b" -> string, number or boolean)
 * into assignments "a.b=value" for gpt_jobspec_parse: *ret_list is one
 * malloc'd block holding the pointers and the strings (free() it), NULL
 * when there are none. A key that no job has, or one that may not change
 * on resume (the message names it and lists those that may), or a value of
 * another JSON type is -GPT_E_SPEC. */
int gpt_jobspec_resume_assignments(const json_t *overrides, char ***ret_list, size_t *ret_n,
                                   struct gpt_err *err);

/* The keys a resume may change, comma-separated, for messages and help. */
const char *gpt_jobspec_resume_keys(void);

#endif
