/*
 * cuda_dnn_attn: causal attention through cuDNN's graph API
 * (attention_forward cudnn, attention_backward cudnn), on the table cuda_dnn.c
 * loads, so it builds without cuDNN's headers or library. The forward
 * writes O (bf16) and the softmax statistics (the log-sum-exp of the
 * scaled scores, fp32, (B, NH, T): what the hand-written kernels keep,
 * so either backward reads either forward's); the backward writes dQ, dK
 * and dV (bf16) in qkv's layout. Both read q, k and v where the
 * hand-written kernels do: qkv (B, T, 3C) in bf16, head h's columns h hs
 * of each third.
 *
 * The graph is cuDNN's fused flash-attention pattern built of primitive
 * operations (matmul, pointwise, reduction, reshape), as cuDNN 9 fuses
 * it into one engine; the causal mask is a row-index >= column-index
 * select. One execution plan per (device, shape, direction), built at
 * first use from the heuristics' list (the backward skips engines that
 * declare a nondeterministic note) and kept for the process; a shape
 * cuDNN refuses, at build or at execution, is said once on stderr and
 * refused from then on without asking cuDNN again: the caller runs the
 * hand-written kernels. Plain C, no CUDA headers (tests drive it with a
 * fake table); any thread (one mutex), but an entry's workspace serves
 * one stream at a time: one backend per device, as gptd runs one worker
 * per GPU.
 */
#ifndef GPT_CUDA_DNN_ATTN_H
#define GPT_CUDA_DNN_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_dnn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The tensors a plan's variant pack names, by their cuDNN unique ids. */
enum gpt_cudnn_uid {
    GPT_CUDNN_Q = 1,
    GPT_CUDNN_K, /* as K^T: (B, NH, hs, T) */
    GPT_CUDNN_V, /* forward (B, NH, T, hs); backward as V^T */
    GPT_CUDNN_O,
    GPT_CUDNN_STATS, /* (B, NH, T, 1) fp32 */
    GPT_CUDNN_SCALE, /* by value: 1 / sqrt(hs) */
    GPT_CUDNN_NEG,   /* by value: what masked scores become */
    GPT_CUDNN_DO,
    GPT_CUDNN_DQ,
    GPT_CUDNN_DK,
    GPT_CUDNN_DV,
    GPT_CUDNN_DSUM, /* backward: D = rowsum(dO * O), fp32 (B, NH, T, 1), caller's memory */
    GPT_CUDNN_ONE,  /* by value: 1 */
    GPT_CUDNN_UIDS  /* one past the last */
};

struct gpt_cudnn_sdpa_shape {
    int64_t B, T, C, NH;
    int backward;
};

/* The dims and strides (elements, outermost first) of tensor `uid` for
 * shape s: 0, or -EINVAL for a uid the shape's graph does not have in
 * memory. Pure. */
int gpt_cudnn_sdpa_layout(const struct gpt_cudnn_sdpa_shape *s, int uid, int64_t dims[4],
                          int64_t strides[4]);

/* At most this many descriptors per plan (tensors, operations, graph,
 * heuristics and the engine configurations tried). */
#define GPT_CUDNN_SDPA_DESCS 128

struct gpt_cudnn_sdpa_plan {
    void *plan;
    void *descs[GPT_CUDNN_SDPA_DESCS]; /* everything made for it, destroyed with it */
    int ndescs;
    int64_t workspace_bytes; /* cuDNN's */
    int64_t uids[GPT_CUDNN_UIDS];
    int nuids;             /* the variant pack's tensors, in uids order */
    float scale, neg, one; /* the by-value tensors' values */
};

/* Builds the graph and the plan for shape s on `handle`: 0, or a negative
 * errno (-ENOTSUP where cuDNN refused; -EINVAL for a shape it cannot
 * take) with why saying which step and cuDNN's status; nothing is left
 * made on failure. Blocks (cuDNN may compile kernels). */
int gpt_cudnn_sdpa_build(const struct gpt_cudnn_api *api, void *handle,
                         const struct gpt_cudnn_sdpa_shape *s, struct gpt_cudnn_sdpa_plan *ret,
                         char *why, size_t why_cap);

/* Destroys what gpt_cudnn_sdpa_build made (a zeroed plan: nothing). */
void gpt_cudnn_sdpa_plan_done(const struct gpt_cudnn_api *api, struct gpt_cudnn_sdpa_plan *p);

/* The device pointers of one call, by uid (the by-value ones are the
 * plan's own). */
struct gpt_cudnn_sdpa_io {
    const void *ptr[GPT_CUDNN_UIDS];
};

/* One cached plan with its workspace: cuDNN's, then `extra_bytes` for
 * the caller (a bf16 output where it has no copy of its own). */
struct gpt_cudnn_sdpa_entry {
    struct gpt_cudnn_sdpa_shape key;
    int device;
    int rc; /* 0, or the refusal */
    struct gpt_cudnn_sdpa_plan plan;
    void *workspace;
    size_t extra_off, extra_bytes;
};

/* The entry for (device, s), its plan built at first use on this
 * process's handle for the device (made at first use too, on the
 * calling thread's current device); alloc gets its workspace. 0 with
 * *ret set; or the entry's refusal (negative errno), said once on stderr
 * when it happened. Entries live as long as the process. Blocks on the
 * mutex and on the first build. */
int gpt_cudnn_sdpa_get(const struct gpt_cudnn_api *api, int device,
                       const struct gpt_cudnn_sdpa_shape *s, int (*alloc)(size_t, void **),
                       struct gpt_cudnn_sdpa_entry **ret);

/* Enqueues entry e's plan on `stream` with io's pointers: 0, or a
 * negative errno, and then the entry refuses from now on (said once).
 * Holds the mutex while cuDNN enqueues. */
int gpt_cudnn_sdpa_exec(const struct gpt_cudnn_api *api, struct gpt_cudnn_sdpa_entry *e,
                        void *stream, const struct gpt_cudnn_sdpa_io *io);

#ifdef __cplusplus
}
#endif

#endif
