/*
 * gpt_err: the project's error codes and the detail struct that travels with
 * a failure. Shared by every layer (proto, engine, daemon, ctl); pure, no
 * globals, safe from any thread.
 *
 * Convention: a fallible function returns 0 or a negative code: either a
 * negative errno (-EINVAL, -ENOMEM, -ETIMEDOUT, -ECANCELED, ...) or one of
 * the -GPT_E_* codes below. Detail goes into a caller-owned struct gpt_err
 * passed last, written only on failure.
 */
#ifndef GPT_ERR_H
#define GPT_ERR_H

#include <stddef.h>

/* Project error codes, above the errno range. Functions return them negated. */
enum gpt_errcode {
    GPT_E_BASE = 10000,
    GPT_E_SPEC,     /* a job spec or override is invalid */
    GPT_E_CORRUPT,  /* a file or frame failed its checks (checksum, sizes, magic) */
    GPT_E_VERSION,  /* a format or protocol version we do not speak */
    GPT_E_PROTO,    /* a peer broke the wire protocol */
    GPT_E_AUTH,     /* a peer failed authentication */
    GPT_E_DATA,     /* a dataset could not be opened or is unusable */
    GPT_E_BLAS,     /* the BLAS library failed or is missing a feature */
    GPT_E_CUDA,     /* a CUDA runtime or cuBLAS call failed */
    GPT_E_NCCL,     /* an NCCL call failed */
    GPT_E_NODEVICE, /* no GPU is present */
    GPT_E_LIMIT,    /* a configured limit was hit */
    GPT_E_MODEL,    /* a snapshot or model file does not fit the job (another model or data) */
    GPT_E_PERM,     /* the job's owner may not open one of the job's files */
    /* this node could not deliver a resource it reported (GPUs, workers) */
    GPT_E_NODE_FAULT,
    GPT_E_MAX
};

#define GPT_ERR_PATH_MAX 160
#define GPT_ERR_MSG_MAX  480

/* Detail of one failure. `path` is the JSON path for job-spec errors
 * ("trainer.micro_batch"), empty otherwise. */
struct gpt_err {
    int code;
    char path[GPT_ERR_PATH_MAX];
    char msg[GPT_ERR_MSG_MAX];
};

/* Fills `err` (which may be NULL) and returns `code` (negative), so a caller
 * can write `return gpt_err_set(err, -EINVAL, "model.n_head", "must ...")`.
 * `path` may be NULL. */
int gpt_err_set(struct gpt_err *err, int code, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Clears `err` (NULL allowed). */
void gpt_err_clear(struct gpt_err *err);

/* Static description of a code (negative errno or -GPT_E_*). Never NULL. */
const char *gpt_strerror(int code);

/* Short stable name of a code for machine output ("invalid_argument",
 * "corrupt", "timed_out", ...). Never NULL. */
const char *gpt_errname(int code);

/* Always-on assertion for programmer errors (never for input). */
#define GPT_ASSERT(cond)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            gpt_assert_fail(#cond, __FILE__, __LINE__);                                            \
    } while (0)

_Noreturn void gpt_assert_fail(const char *expr, const char *file, int line);

#endif
