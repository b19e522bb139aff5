/*
 * init_from: model.init_from in a job. The model's shape comes from the
 * checkpoint (a gptd snapshot, an llm.c checkpoint or a Hugging Face
 * folder, read through gptfmt); rank 0's weights come from it through the
 * trainer's init_weights hook. The engine cannot read these formats itself
 * (gptfmt sits above it), so the worker layer does.
 *
 * Worker threads (and `gptd run`'s), with the job owner's file-system
 * identity already taken; blocking I/O.
 */
#ifndef GPTD_INIT_FROM_H
#define GPTD_INIT_FROM_H

#include <sys/types.h>

#include "gpt_err.h"
#include "jobspec.h"

struct gpt_model;

/* With job->model.init_from set: checks the opened path against `roots`
 * (':'-separated: the data roots, the snapshot roots and the state
 * directory, where other jobs' snapshots lie; NULL: no check), reads the checkpoint's model config
 * and writes it into job->model. A key of the job that contradicts the checkpoint is an error
 * naming both values (a key left at its default, and vocab_size 0, take the checkpoint's). Without
 * init_from: nothing. */
int init_from_resolve(struct gpt_job *job, const char *roots, struct gpt_err *err);

/* Submit time: init_from_resolve with `uid`'s file-system identity taken
 * for the moment (the files are the client's to read), against the data
 * roots, the snapshot roots and the state directory. Reads a config.json
 * or a checkpoint header; a user-database lookup. Loop thread (as
 * paths_check_access). */
int init_from_submit(struct gpt_job *job, uid_t uid, const char *data_roots,
                     const char *snapshot_roots, const char *state_dir, struct gpt_err *err);

/* gpt_trainer_opts.init_weights: ctx is the resolved job (borrowed). */
int init_from_weights(void *ctx, const struct gpt_model *m, float *host, struct gpt_err *err);

#endif
