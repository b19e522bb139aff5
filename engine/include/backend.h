/*
 * backend: the compute interface the model and the optimizer call, as a
 * vtable in the ggml style. A backend (cpu/, cuda/) fills a const struct
 * gpt_backend_ops and embeds a struct gpt_backend head as the first member
 * of its own state; callers only ever use the gpt_backend_* wrappers below,
 * which check their arguments with always-on asserts and then dispatch.
 *
 * Memory: every float/int pointer passed to an op is BACKEND memory, i.e.
 * obtained from gpt_backend_alloc() (host memory for cpu, device memory for
 * cuda). Host data crosses only through upload/download. Ops are enqueued
 * in call order on the backend's one compute stream; gpt_backend_sync()
 * waits for all of them. download() and the ops returning a value (sumsq)
 * synchronise implicitly; nothing else does.
 *
 * Synchronisations per training step: each one idles a GPU until the host
 * enqueues again, so a backend with the optional step-on-device ops
 * (loss_accum, sumsq_dev, adamw_multi_clip: gpt_backend_step_on_device)
 * keeps the step's loss, its gradient norm and the clip factor in device
 * memory, and the trainer reads them back with one download after the
 * update: one synchronisation per optimizer step (a DDP step also syncs
 * at the backward's end, for its compute time: see trainer.c). Without
 * those ops (cpu, which is synchronous anyway) the losses are downloaded
 * after each forward and sumsq returns the norm.
 *
 * Threads: a backend belongs to one worker thread; it is not shared.
 * Errors: only construction, alloc and transfers can fail; ops on valid
 * arguments cannot (a GPU backend records a sticky error that sync reports).
 *
 * Shape letters as in llm.c: B batch, T time, C channels, NH heads,
 * hs = C / NH, N = B*T rows, OC output channels, V vocab, Vp padded vocab.
 * Conventions for backward ops: PARAMETER gradients (dweight, dbias, dwte,
 * dwpe) are ACCUMULATED (+=), except while be->grad_assign is set (see
 * grads_assign below); activation gradients are overwritten unless the op
 * says "accumulates".
 */
#ifndef GPT_BACKEND_H
#define GPT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "gpt_err.h"

struct gpt_backend;

/* One piece of the flat parameter buffer for adamw_multi: elements
 * [off, off + n), decayed when `decay` is non-zero. */
struct gpt_adamw_span {
    size_t off, n;
    int decay;
};

/* The vtable: one member per row of backend_ops.def (documented there),
 * in its order; a backend fills it with designated initializers (the CUDA
 * backend, C++, generates its from the same list). */
struct gpt_backend_ops {
    const char *name;
#define GPT_OP(wrap, group, ret, name, params, args, pre) ret(*name) params;
#include "backend_ops.def"

    /* Non-zero when the ops honour be->grad_assign: while it is set,
     * matmul_backward's and matmul_backward_dgelu's dweight and dbias and
     * layernorm_backward's dweight and dbias are OVERWRITTEN with this
     * call's gradient instead of accumulated (the first backward of a
     * step need not zero them first). encoder_backward always
     * accumulates. */
    int grads_assign;
    /* Non-zero when buffers live in device memory that host code cannot
     * address (cuda): host code reaches them only through upload and
     * download (gpt_backend_device_memory). */
    int device_memory;
};

/* The ops on a backend's stream (group OP of backend_ops.def), by name:
 * GPT_BACKEND_OP_encoder_forward, ... for profilers and recorders. */
enum gpt_backend_op {
#define GPT_OP_ENUM_OP(name) GPT_BACKEND_OP_##name,
#define GPT_OP_ENUM_CTL(name)
#define GPT_OP(wrap, group, ret, name, params, args, pre) GPT_OP_ENUM_##group(name)
#include "backend_ops.def"
#undef GPT_OP_ENUM_OP
#undef GPT_OP_ENUM_CTL
    GPT_BACKEND_OP_COUNT
};

/* The slot name of op `op` ("encoder_forward"), static storage; "?" out
 * of range. Inline: only profilers and tests ask. */
static inline const char *gpt_backend_op_name(enum gpt_backend_op op)
{
#define GPT_OP_NAME_OP(name) #name,
#define GPT_OP_NAME_CTL(name)
#define GPT_OP(wrap, group, ret, name, params, args, pre) GPT_OP_NAME_##group(name)
    static const char *const names[GPT_BACKEND_OP_COUNT] = {
#include "backend_ops.def"
    };
#undef GPT_OP_NAME_OP
#undef GPT_OP_NAME_CTL
    return (unsigned)op < GPT_BACKEND_OP_COUNT ? names[op] : "?";
}

/* Or'd into set_precision's argument: fp32 matrix products stay strict
 * fp32 (trainer.tf32 false); without it a backend may use TF32. */
/* softmax_xent's write_dlogits after a loss call over the same logits. */
#define GPT_XENT_AFTER_LOSS 2

#define GPT_BACKEND_PREC_NO_TF32 0x100
#define GPT_BACKEND_PREC_MASK    0xff
/* Also or'd into set_precision's argument, by backends that have them
 * (cuda; others ignore them): GEMM_TUNE times cuBLASLt's candidate
 * algorithms per shape and keeps the fastest (trainer.gemm_autotune);
 * GELU_UNFUSED runs the MLP's GELU as its own kernel instead of a GEMM
 * epilogue (bench_gpu_train's GPTD_GEMM_GELU=unfused: timing only). */
#define GPT_BACKEND_PREC_GEMM_TUNE    0x200
#define GPT_BACKEND_PREC_GELU_UNFUSED 0x400

/* The common head of every backend; the implementation's state follows. */
struct gpt_backend {
    const struct gpt_backend_ops *ops;
    const char *name;   /* "cpu", "cuda" (static storage) */
    int threads;        /* host threads the backend uses (cpu), 1 otherwise */
    int grad_assign;    /* parameter gradients overwritten: gpt_backend_set_grad_assign */
    int attn_guarded;   /* the first attention backward has been guarded */
    int attn_guard_bad; /* ... and its variant disagreed with the reference */
    /* what the guard found (empty until it ran and had something to
     * compare): gpt_backend_attention_guard_note */
    char attn_guard_note[256];
    /* the attention kernels it was made to run ("forward m16, backward
     * twopass" on cuda; empty where there is no choice): the start event
     * names them */
    char attn_variants[128];
};

/* Tuning choices fixed when a backend is made (gpt_backend_new), from the
 * job spec; a zeroed struct takes every default. A backend ignores what it
 * does not have: the CPU backend the attention variants, the CUDA backend
 * `threads`. */
struct gpt_backend_opts {
    int threads;       /* cpu: OpenMP and OpenBLAS threads (< 1: 1) */
    int attn_forward;  /* cuda: enum gpt_attn_fwd (trainer.attention_forward) */
    int attn_backward; /* cuda: enum gpt_attn_bwd (trainer.attention_backward) */
};

/* Creates the CPU backend using `threads` (>= 1) OpenMP threads for its own
 * loops and as many OpenBLAS threads. Returns new; the caller frees it with
 * gpt_backend_free. Any thread; does not block. */
int gpt_backend_cpu_new(int threads, struct gpt_backend **ret, struct gpt_err *err);

/* Frees a backend; NULL is a no-op. */
void gpt_backend_free(struct gpt_backend *be);

/* True when the backend's buffers are device memory: a host reader or
 * writer (the snapshot file's) needs host copies. */
static inline int gpt_backend_device_memory(const struct gpt_backend *be)
{
    return be->ops->device_memory;
}

/* --- front-end wrappers (assert arguments, then dispatch) ---------------
 * gpt_backend_<slot>(...) for each row of backend_ops.def with a wrapper
 * (GEN or HAND), with the slot's parameters; the row's comment says what
 * the wrapper adds (a fallback for an optional slot, a no-op on NULL). */
#define GPT_OP_DECL_GEN(ret, name, params)  ret gpt_backend_##name params;
#define GPT_OP_DECL_HAND(ret, name, params) ret gpt_backend_##name params;
#define GPT_OP_DECL_NONE(ret, name, params)
#define GPT_OP(wrap, group, ret, name, params, args, pre) GPT_OP_DECL_##wrap(ret, name, params)
#include "backend_ops.def"
#undef GPT_OP_DECL_GEN
#undef GPT_OP_DECL_HAND
#undef GPT_OP_DECL_NONE

/* True when the backend has the step-on-device ops (loss_accum, sumsq_dev,
 * adamw_multi_clip); their three wrappers may be called only then.
 * Any thread. */
int gpt_backend_step_on_device(const struct gpt_backend *be);
/* Sets be->grad_assign (ops->grads_assign above): 0, or -ENOTSUP (and
 * nothing set) for on != 0 on a backend whose ops always accumulate.
 * Owner thread, between ops. */
int gpt_backend_set_grad_assign(struct gpt_backend *be, int on);
/* The first attention backward's guard: "" until it compared (none on a
 * backend without attention_guard, or where the variant in use is the
 * reference); then one line: passed, with the largest difference, or
 * "MISMATCH ... fell back to the reference variant". *ret_bad (may be
 * NULL) is 1 on a mismatch. Borrowed; owner thread. */
const char *gpt_backend_attention_guard_note(const struct gpt_backend *be, int *ret_bad);

#endif
