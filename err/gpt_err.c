/*
 * gpt_err: error codes, messages and the always-on assertion.
 */
#include "gpt_err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gpt_err_set(struct gpt_err *err, int code, const char *path, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->code = code;
        snprintf(err->path, sizeof(err->path), "%s", path ? path : "");
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return code;
}

void gpt_err_clear(struct gpt_err *err)
{
    if (err)
        memset(err, 0, sizeof(*err));
}

static const struct {
    int code;
    const char *name;
    const char *text;
} errtab[] = {
    {-GPT_E_SPEC, "invalid_spec", "invalid job spec"},
    {-GPT_E_CORRUPT, "corrupt", "corrupt data"},
    {-GPT_E_VERSION, "bad_version", "unsupported version"},
    {-GPT_E_PROTO, "protocol_error", "protocol error"},
    {-GPT_E_AUTH, "auth_failed", "authentication failed"},
    {-GPT_E_DATA, "bad_data", "dataset error"},
    {-GPT_E_BLAS, "blas_error", "BLAS error"},
    {-GPT_E_CUDA, "cuda_error", "CUDA error"},
    {-GPT_E_NCCL, "nccl_error", "NCCL error"},
    {-GPT_E_NODEVICE, "no_device", "no GPU present"},
    {-GPT_E_LIMIT, "limit", "limit exceeded"},
    {-GPT_E_MODEL, "model_mismatch", "snapshot or model does not fit the job"},
    {-GPT_E_PERM, "permission_denied", "the job's owner may not open a file of the job"},
    {-GPT_E_NODE_FAULT, "node_fault", "the node could not deliver a resource it reported"},
    {-EINVAL, "invalid_argument", "invalid argument"},
    {-ENOMEM, "no_memory", "out of memory"},
    {-ENOENT, "not_found", "not found"},
    {-EEXIST, "exists", "already exists"},
    {-ETIMEDOUT, "timed_out", "timed out"},
    {-ECANCELED, "cancelled", "cancelled"},
    {-EPERM, "permission_denied", "operation not permitted"},
    {-EACCES, "permission_denied", "permission denied"},
    {-EIO, "io_error", "input/output error"},
    {-EPIPE, "connection_lost", "connection lost"},
    {-ECONNRESET, "connection_lost", "connection reset by peer"},
    {-ECONNREFUSED, "connection_refused", "connection refused"},
    {-EMSGSIZE, "too_long", "message too long"},
    {-EBUSY, "busy", "busy"},
    {-EAGAIN, "try_again", "try again"},
};

const char *gpt_strerror(int code)
{
    for (size_t i = 0; i < sizeof(errtab) / sizeof(errtab[0]); i++)
        if (errtab[i].code == code)
            return errtab[i].text;
    if (code < 0 && -code < GPT_E_BASE)
        return strerror(-code);
    return code == 0 ? "success" : "unknown error";
}

const char *gpt_errname(int code)
{
    for (size_t i = 0; i < sizeof(errtab) / sizeof(errtab[0]); i++)
        if (errtab[i].code == code)
            return errtab[i].name;
    return code == 0 ? "ok" : "error";
}

void gpt_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "gptd: assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}
