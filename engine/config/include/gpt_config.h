/*
 * gpt_config: the engine's configuration of one training job, as plain
 * structs: the model, data, trainer, optimizer, distributed and snapshot
 * parts of a job and the enums and limits they use.
 *
 * The engine owns these types; proto's job spec (proto/jobspec.h) parses,
 * validates and prints them through its table, writing straight into
 * struct gpt_job, so there is one definition and no conversion. This
 * header is a library of its own (gptconfig, header only) below both proto
 * and the engine: it includes nothing but <stdint.h>.
 */
#ifndef GPT_CONFIG_H
#define GPT_CONFIG_H

#include <stdint.h>

#define GPT_JOB_PATH_MAX 1024
#define GPT_JOB_NAME_MAX 128
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
/* STAGED: device buffers through host memory over the tcp/shm
 * communicator (comm.h's gpt_comm_staged_new), what AUTO falls back to when
 * NCCL does not form. */
enum gpt_comm_kind { GPT_COMM_AUTO, GPT_COMM_LOCAL, GPT_COMM_TCP, GPT_COMM_NCCL, GPT_COMM_STAGED };
enum gpt_sharding { GPT_SHARD_NONE, GPT_SHARD_OPTIMIZER, GPT_SHARD_FULL };
/* distributed.grad_reduce; AUTO (the default): bf16 on the CUDA backend,
 * fp32 on the CPU backend. */
enum gpt_grad_reduce { GPT_GRAD_REDUCE_FP32, GPT_GRAD_REDUCE_BF16, GPT_GRAD_REDUCE_AUTO };
/* distributed.comm_shm: the shared-memory transport between ranks of one
 * host. AUTO (the default): on. */
enum gpt_comm_shm { GPT_COMM_SHM_AUTO, GPT_COMM_SHM_ON, GPT_COMM_SHM_OFF };
/* trainer.attention_forward and trainer.attention_backward: the CUDA
 * backend's tensor-core attention kernels (engine/include/flash_tc.h).
 * AUTO (0, the default) runs the validated default; every other value is
 * the variant of that name. A forward value is its enum gpt_flash_fwd; a
 * backward value is its enum gpt_flash_bwd + 1 (flash_tc.h's
 * gpt_flash_tc_bwd_of_spec). The spec's name lists are in that order
 * (test_jobspec checks them against flash_tc.h's parsers). */
enum gpt_attn_fwd {
    GPT_ATTN_FWD_AUTO,
    GPT_ATTN_FWD_M16,
    GPT_ATTN_FWD_M32,
    GPT_ATTN_FWD_K32,
    GPT_ATTN_FWD_WG,
    GPT_ATTN_FWD_CUDNN
};
enum gpt_attn_bwd {
    GPT_ATTN_BWD_AUTO,
    GPT_ATTN_BWD_FUSED,
    GPT_ATTN_BWD_SPLIT,
    GPT_ATTN_BWD_TWOPASS,
    GPT_ATTN_BWD_TWOPASS4,
    GPT_ATTN_BWD_WG,
    GPT_ATTN_BWD_DS,
    GPT_ATTN_BWD_CUDNN
};

struct gpt_model_config {
    int n_layer;
    int n_head;
    int n_embd;
    int block_size;
    int vocab_size;                   /* 0 in a spec = take it from the dataset */
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
    int precision;          /* enum gpt_precision */
    int tf32;               /* fp32 matmuls on CUDA may use TF32 tensor cores (default 1) */
    int gemm_autotune;      /* CUDA: time cuBLASLt's candidate algorithms per shape (default 0) */
    int attention_forward;  /* enum gpt_attn_fwd (CUDA only) */
    int attention_backward; /* enum gpt_attn_bwd (CUDA only) */
    int threads;            /* BLAS/OpenMP threads per worker */
    double peak_gflops;     /* 0 = measure at start-up (for MFU) */
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
    int grad_reduce;          /* enum gpt_grad_reduce */
    int comm_shm;             /* enum gpt_comm_shm */
    int shard_buffers;        /* full sharding's gathered unit buffers: 1, 2; 0 = auto */
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

#endif
