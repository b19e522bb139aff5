/*
 * gpu_ops_common: what test_gpu_ops.c, gpu_ops_common.c and gpu_ops_attn.c
 * share: the backends under test, the report of a check, pairs of buffers
 * on both backends and their comparison, the shape of a check, the op
 * table's runner, and the attention checks (gpu_ops_attn.c) that main
 * runs. Private to the
 * test_gpu_ops program; single-threaded.
 */
#ifndef GPT_TEST_GPU_OPS_COMMON_H
#define GPT_TEST_GPU_OPS_COMMON_H

#include <stddef.h>

#include "backend.h"
#include "cuda/cuda_backend.h"
#include "rng.h"

extern struct gpt_backend *cpu, *gpu;
extern struct gpt_rng rng; /* seeded by main */
extern int failures, checks;
extern const char *prec; /* the GPU backend's precision now: "fp32" or "bf16" */

/* A buffer that exists on both backends with the same contents. */
struct pair {
    float *c, *g;
    size_t n;
};

struct shape {
    size_t B, T, C, NH, V, Vp;
};

/* One line for a check of `op` (its tolerance in this precision) with
 * error e; counts it, and the failure. */
void report(const char *op, const char *what, double e);
/* report with the bound given (the op table's rows carry their own). */
void report_tol(const char *op, const char *what, double e, double tol);
/* n uniform floats in [lo, hi); aborts when out of memory. */
float *host_rand(size_t n, float lo, float hi);
/* Ends the program (exit 1) when rc < 0, saying what failed. */
void check_rc(int rc, const char *what);
struct pair pair_new(size_t n, float lo, float hi);
void pair_free(struct pair *p);
void ints_new(const int *h, size_t n, int **ret_c, int **ret_g);
double pair_err_floor(const struct pair *p, int (*mask)(size_t i, const void *ctx), const void *ctx,
                      double floor);
double pair_err(const struct pair *p, int (*mask)(size_t i, const void *ctx), const void *ctx);
/* report of pair_err over all of p. */
void check(const char *op, const char *what, const struct pair *p);

/* One case of the op table (unit/op_cases.h) on both backends, its
 * outputs and gradients compared within its bound in this precision;
 * `path` (may be NULL) names the GPU's attention path in the report
 * ("gemm" also compares the probabilities in att). */
struct opc_case;
void run_op_case(const struct opc_case *c, const char *path);
/* Every case of the table in this precision (OPC_FP32 or OPC_BF16);
 * attention on each GPU path its row asks for. */
void test_op_cases(unsigned dtype);

/* gpu_ops_attn.c. bwd_spec: the backward variant the GPU backend was made
 * with (trainer.attention_backward's value, 0 auto). */
void test_attention_bf16(int with_wg, int bwd_spec);
void test_attention_cudnn(void);

#endif
