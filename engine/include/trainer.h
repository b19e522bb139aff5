/*
 * trainer: the step loop of one rank. Micro-batches with gradient
 * accumulation, gradient all-reduce in buckets overlapping backward (DDP),
 * clipping, AdamW, evaluation, snapshots, metrics through hooks, and stop
 * checks between steps.
 *
 * gpt_train() runs on a worker thread and blocks until the job completes,
 * is stopped, fails or is aborted. The caller owns the comm (one per rank)
 * and may call gpt_comm_abort() on it from another thread to abort.
 */
#ifndef GPT_TRAINER_H
#define GPT_TRAINER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "gpt_config.h"
#include "gpt_err.h"
#include "gpt_record.h"

/* What should_stop may answer between steps. */
enum gpt_stop {
    GPT_STOP_NO = 0,       /* keep training */
    GPT_STOP_SNAPSHOT = 1, /* write a snapshot, then return GPT_TRAIN_STOPPED */
    GPT_STOP_NOW = 2,      /* return GPT_TRAIN_STOPPED without a snapshot */
};

#define GPT_RESUME_START_OVER 2 /* gpt_trainer_opts.resume */

/* Positive results of gpt_train (negative values are errors). */
#define GPT_TRAIN_DONE    0
#define GPT_TRAIN_STOPPED 1

struct gpt_trainer_hooks {
    void *ctx;
    /* Rank 0 only, on the worker thread, every log_every steps and after
     * each evaluation. The record is borrowed for the call. */
    void (*metric)(void *ctx, const struct gpt_metric *m);
    /* Rank 0 only: start, resume, snapshot, eval, stop, done, ... */
    void (*event)(void *ctx, const struct gpt_event *e);
    /* Every rank, between steps and between stages of set-up. Between
     * steps the trainer takes rank 0's answer (broadcast) so a world stops
     * at the same step; during set-up each rank stops on its own answer,
     * and a rank whose peer left during set-up stops too when it has been
     * asked (gpt_train returns GPT_TRAIN_STOPPED before the first step). */
    int (*should_stop)(void *ctx);
};

struct gpt_data_policy;
struct gpt_model;

struct gpt_trainer_opts {
    const struct gpt_job *job;   /* borrowed, validated */
    struct gpt_comm *comm;       /* borrowed; NULL = world of one */
    const char *snapshot_dir;    /* overrides job->snapshot.dir when non-NULL */
    int resume;                  /* 1: continue from the newest valid snapshot of the folder's
                                  * owner (an empty folder starts at step 0; a folder with only
                                  * invalid snapshots fails); GPT_RESUME_START_OVER: the same,
                                  * but that last case starts at step 0 */
    const char *resume_path;     /* a specific snapshot file (implies resume) */
    int write_snapshots;         /* 0: this rank never writes (default: rank 0 writes) */
    int64_t run_id;              /* copied into metrics and events */
    struct gpt_backend *backend; /* borrowed; NULL = a CPU backend with trainer.threads */
    struct gpt_trainer_hooks hooks;
    const struct gpt_data_policy *data_policy; /* borrowed; NULL = none (see data.h) */
    /* Initial weights instead of GPT-2's random initialisation
     * (model.init_from): called on rank 0, on the worker thread, with
     * `host` holding m->n_params floats in m's layout; fills it or returns
     * a negative error (err filled). A resumed snapshot still wins. NULL:
     * random initialisation. */
    int (*init_weights)(void *ctx, const struct gpt_model *m, float *host, struct gpt_err *err);
    void *init_weights_ctx;
};

struct gpt_train_result {
    int64_t step; /* optimizer steps completed */
    double final_loss;
    double final_val_loss;    /* NAN if never evaluated */
    double final_accuracy;    /* NAN unless a synthetic task */
    char last_snapshot[1024]; /* path of the newest snapshot written or resumed from */
};

/* Trains. Returns GPT_TRAIN_DONE when max_steps/max_epochs is reached,
 * GPT_TRAIN_STOPPED when should_stop asked, or a negative error (err filled;
 * -ECANCELED when the comm was aborted). Blocks; worker thread. */
int gpt_train(const struct gpt_trainer_opts *opts, struct gpt_train_result *ret,
              struct gpt_err *err);

/* Text <-> ids for a snapshot of a gpt2 job (data.tokenizer gpt2), which
 * the caller supplies (the engine links no BPE tokenizer; see sample.c). */
struct gpt_sample_codec {
    void *ctx;
    uint64_t fingerprint; /* must equal the snapshot's vocabulary fingerprint */
    /* NUL-terminated text -> out[0, cap); -EMSGSIZE when it does not fit. */
    int (*encode)(void *ctx, const char *text, int32_t *out, size_t cap, size_t *ret_n,
                  struct gpt_err *err);
    /* ids -> *ret_text, new malloc'd NUL-terminated valid UTF-8. */
    int (*decode)(void *ctx, const int32_t *ids, size_t n, char **ret_text, struct gpt_err *err);
};

struct gpt_sample_opts {
    const char *prompt;        /* may be empty: starts from a newline, or <|endoftext|> */
    const int32_t *prompt_ids; /* non-NULL: the prompt as token ids instead of text */
    size_t n_prompt_ids;       /* 1 .. GPT_SAMPLE_PROMPT_IDS_MAX when prompt_ids is set */
    int tokens;                /* new tokens to generate */
    double temperature;        /* > 0 */
    int top_k;                 /* 0 = no limit */
    uint64_t seed;
    int threads;
    const struct gpt_sample_codec *codec; /* borrowed; NULL = none */
    /* borrowed; NULL = none. Another thread sets it to stop the sampling:
     * checked before the model is read and between tokens (-ECANCELED). */
    const atomic_int *cancel;
};

#define GPT_SAMPLE_PROMPT_IDS_MAX 4096

/* Loads the model of a snapshot and generates text. *ret_text is a new
 * malloc'd NUL-terminated string (prompt + generated). The prompt is
 * encoded and the output decoded with the job's tokenizer: the snapshot's
 * char or byte vocabulary, or for a gpt2 job o->codec (required for text;
 * its fingerprint must match). A job without a tokenizer (shards without
 * data.vocab) takes only prompt_ids and prints ids as "<id>". Every
 * prompt id must be below the model's vocabulary size (the error names
 * the id and its position). Blocks. */
int gpt_sample_snapshot(const char *snapshot_path, const struct gpt_sample_opts *o, char **ret_text,
                        struct gpt_err *err);

#endif
