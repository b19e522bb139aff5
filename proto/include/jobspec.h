/*
 * jobspec: the job description (job.json) as a C struct (struct gpt_job and
 * its parts, the engine's own config types of gpt_config.h), parsed and
 * validated from JSON through one table of entries (path, type, range,
 * default, help) that also drives defaults, Hydra-style overrides,
 * `--help-spec` output and the gptd-job(5) page.
 *
 * Pure: no I/O except that gpt_jobspec_check_paths() may stat() data paths.
 * Safe from any thread (no globals besides the const table).
 */
#ifndef GPT_JOBSPEC_H
#define GPT_JOBSPEC_H

#include <stddef.h>
#include <stdint.h>

#include "gpt_config.h"
#include "gpt_err.h"

#define GPT_JOB_JSON_MAX  (1u << 20) /* a job file larger than 1 MiB is refused */
#define GPT_JOB_DEPTH_MAX 16         /* deeper nesting of arrays/objects is refused */

/* Writes every default into `job`. */
void gpt_jobspec_defaults(struct gpt_job *job);

/* Parses a JSON text (`len` bytes, need not be NUL-terminated) over the
 * defaults, applies `n_over` overrides ("trainer.max_steps=200"), then
 * validates. On failure returns -GPT_E_SPEC (or -ENOMEM) and fills `err`
 * with the JSON path and what was expected; `ret_job` is untouched. */
int gpt_jobspec_parse(const char *json, size_t len, const char *const *overrides, size_t n_over,
                      struct gpt_job *ret_job, struct gpt_err *err);

/* As gpt_jobspec_parse, for a YAML text: the document becomes the same JSON
 * tree (plain scalars are read as the key's type wants), so errors carry the
 * same paths. Without YAML support built in, always -GPT_E_SPEC. */
int gpt_jobspec_parse_yaml(const char *yaml, size_t len, const char *const *overrides,
                           size_t n_over, struct gpt_job *ret_job, struct gpt_err *err);

/* Reads and parses a job file (JSON; YAML when the name ends in .yaml/.yml
 * and YAML support is built in). Errors name the file in `msg`. */
int gpt_jobspec_load(const char *file, const char *const *overrides, size_t n_over,
                     struct gpt_job *ret_job, struct gpt_err *err);

/* Applies one override "a.b=value" to an already parsed job (validation
 * is left to gpt_jobspec_validate). */
int gpt_jobspec_override(struct gpt_job *job, const char *assignment, struct gpt_err *err);

/* Cross-field validation (ranges are checked while parsing). */
int gpt_jobspec_validate(const struct gpt_job *job, struct gpt_err *err);

/* The batch geometry against the job's largest world: trainer.global_batch
 * must be at least distributed.nodes MAX x `workers_per_node` (0, "auto",
 * counts one), since every worker takes at least one sequence per step.
 * gpt_jobspec_validate checks it with the spec's own workers_per_node;
 * where the count "auto" resolves to is known (a daemon, `gptd run`), call
 * it with that count. */
int gpt_jobspec_check_world(const struct gpt_job *job, int workers_per_node, struct gpt_err *err);

/* Checks that data paths exist and are readable (stat/access). */
int gpt_jobspec_check_paths(const struct gpt_job *job, struct gpt_err *err);

/* Settings that are valid but probably not meant: a warmup that never
 * ends (optimizer.warmup_steps >= trainer.max_steps) and a periodic eval
 * that never comes (trainer.eval_every beyond trainer.max_steps: only the
 * final one runs). Writes one line per finding ("KEY: text\n") into buf
 * (truncated to cap, "" when none) and returns how many. Pure. */
int gpt_jobspec_warnings(const struct gpt_job *job, char *buf, size_t cap);

/* Serialises a job back to JSON (every key, canonical form). Returns a
 * malloc'd NUL-terminated string the caller frees, or NULL on ENOMEM. */
char *gpt_jobspec_to_json(const struct gpt_job *job);

/* Writes the reference of every key (path, type, range, default, help) as
 * text (`man` = 0) or as roff for gptd-job(5) (`man` = 1). Returns a
 * malloc'd string. */
char *gpt_jobspec_help(int man);

/* Names for enum values, for messages and JSON output. */
const char *gpt_data_kind_name(int kind);
const char *gpt_sharding_name(int sharding);
const char *gpt_comm_kind_name(int kind);

#endif
