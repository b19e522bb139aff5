/*
 * jobspec: the job description (job.json) as a C struct, parsed and
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

#include "gpt_err.h"

#define GPT_JOB_PATH_MAX  1024
#define GPT_JOB_NAME_MAX  128
#define GPT_JOB_JSON_MAX  (1u << 20) /* a job file larger than 1 MiB is refused */
#define GPT_JOB_DEPTH_MAX 16         /* deeper nesting of arrays/objects is refused */
/* Limits of the engine that a spec must meet; engine/model.c asserts that
 * they match its own (its tensor table holds 42 blocks; sgemm takes int
 * dimensions). Checked at validate/submit, so no job fails on them later. */
#define GPT_JOB_N_LAYER_MAX 42
#define GPT_JOB_GEMM_MAX    ((uint64_t)1 << 40) /* micro_batch x block_size x 4 n_embd */

enum gpt_data_kind { GPT_DATA_TEXT, GPT_DATA_SHARDS, GPT_DATA_SYNTHETIC };
enum gpt_tokenizer { GPT_TOK_CHAR, GPT_TOK_BYTE, GPT_TOK_GPT2 };
/* AUTO (the default): bf16 on the CUDA backend, fp32 on the CPU backend. */
enum gpt_precision { GPT_PREC_FP32, GPT_PREC_BF16, GPT_PREC_AUTO };
enum gpt_schedule { GPT_SCHED_COSINE, GPT_SCHED_CONSTANT };
enum gpt_backend_kind { GPT_BACKEND_AUTO, GPT_BACKEND_CPU, GPT_BACKEND_CUDA };
enum gpt_comm_kind { GPT_COMM_AUTO, GPT_COMM_LOCAL, GPT_COMM_TCP, GPT_COMM_NCCL };
enum gpt_sharding { GPT_SHARD_NONE, GPT_SHARD_OPTIMIZER, GPT_SHARD_FULL };

struct gpt_model_config {
    int n_layer;
    int n_head;
    int n_embd;
    int block_size;
    int vocab_size; /* 0 in a spec = take it from the dataset */
    char init_from[GPT_JOB_PATH_MAX]; /* start from these weights (gptd snapshot, llm.c, hf) */
};

struct gpt_data_spec {
    int kind;                        /* enum gpt_data_kind */
    char path[GPT_JOB_PATH_MAX];     /* text file, shard file or glob */
    char val_path[GPT_JOB_PATH_MAX]; /* shards: optional validation glob */
    int tokenizer;                   /* enum gpt_tokenizer (text only) */
    double train_split;              /* fraction of a text file used for training */
    char task[32];                   /* synthetic: "addition" */
    int digits;                      /* synthetic addition: digits per operand */
    char vocab[GPT_JOB_PATH_MAX];    /* gpt2: folder of encoder.json + vocab.bpe */
};

struct gpt_trainer_spec {
    int64_t max_steps; /* optimizer steps; 0 = bounded by max_epochs only */
    int max_epochs;    /* 0 = bounded by max_steps only */
    int micro_batch;   /* sequences per forward/backward per worker */
    int global_batch;  /* sequences per optimizer step, whole world */
    double grad_clip;  /* 0 = off */
    int log_every;
    int eval_every; /* 0 = no periodic eval (a final eval still runs) */
    int eval_batches;
    uint64_t seed;
    int precision;      /* enum gpt_precision */
    int tf32;           /* fp32 matmuls on CUDA may use TF32 tensor cores (default 1) */
    int threads;        /* BLAS/OpenMP threads per worker */
    double peak_gflops; /* 0 = measure at start-up (for MFU) */
};

struct gpt_optim_spec {
    double lr;
    double min_lr;
    int warmup_steps;
    int schedule; /* enum gpt_schedule */
    double weight_decay;
    double beta1, beta2; /* JSON: "betas": [b1, b2] */
    double eps;
};

struct gpt_dist_spec {
    int nodes_min, nodes_max; /* JSON: "nodes": "MIN:MAX" or an integer */
    int workers_per_node;     /* 0 = auto */
    int backend;              /* enum gpt_comm_kind */
    int sharding;             /* enum gpt_sharding */
    int max_restarts;
    int wait_timeout_s;
};

/* snapshot.on_invalid: what a resume does when the folder holds
 * snapshots but none is usable. */
enum gpt_snapshot_on_invalid {
    GPT_SNAPSHOT_ON_INVALID_FAIL = 0,    /* the resume fails, naming the folder */
    GPT_SNAPSHOT_ON_INVALID_RESTART = 1, /* start over from step 0 */
};

struct gpt_snapshot_spec {
    char dir[GPT_JOB_PATH_MAX]; /* empty = the daemon's or runner's default */
    int every;                  /* steps between snapshots; 0 = only at the end/stop */
    int keep;                   /* newest snapshots kept; 0 = keep all */
    int on_invalid;             /* enum gpt_snapshot_on_invalid */
};

struct gpt_job {
    char name[GPT_JOB_NAME_MAX];
    struct gpt_model_config model;
    struct gpt_data_spec data;
    struct gpt_trainer_spec trainer;
    struct gpt_optim_spec optimizer;
    struct gpt_dist_spec distributed;
    struct gpt_snapshot_spec snapshot;
};

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

/* Checks that data paths exist and are readable (stat/access). */
int gpt_jobspec_check_paths(const struct gpt_job *job, struct gpt_err *err);

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
