/*
 * factory: see factory.h. The one translation unit outside engine/ops/cuda
 * with #ifdef GPTD_HAVE_CUDA (defined for this target only, by linking
 * gptcuda PRIVATE).
 */
#include "factory.h"

#include <errno.h>
#include <stdio.h>

#ifdef GPTD_HAVE_CUDA
#include "cuda/comm_nccl.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_probe.h"
#endif

int gpt_factory_has_cuda(void)
{
#ifdef GPTD_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

int gpt_device_count(void)
{
#ifdef GPTD_HAVE_CUDA
    return gpt_cuda_device_count();
#else
    return 0;
#endif
}

int gpt_nccl_version(void)
{
#ifdef GPTD_HAVE_CUDA
    return gpt_comm_nccl_version();
#else
    return 0;
#endif
}

int gpt_cudnn_version(void)
{
#ifdef GPTD_HAVE_CUDA
    return gpt_cuda_cudnn_version();
#else
    return 0;
#endif
}

int gpt_device_info(int i, char *name, size_t cap, size_t *ret_mem_bytes)
{
#ifdef GPTD_HAVE_CUDA
    if (gpt_cuda_device_info(i, name, cap, ret_mem_bytes) == 0)
        return 0;
#else
    (void)i;
    (void)name;
    (void)cap;
    (void)ret_mem_bytes;
#endif
    return -GPT_E_NODEVICE;
}

int gpt_backend_new(enum gpt_backend_kind kind, int device, const struct gpt_backend_opts *o,
                    struct gpt_backend **ret, struct gpt_err *err)
{
    static const struct gpt_backend_opts defaults;
    if (!o)
        o = &defaults;
    if (kind == GPT_BACKEND_AUTO)
        kind = gpt_device_count() > 0 ? GPT_BACKEND_CUDA : GPT_BACKEND_CPU;
    switch (kind) {
    case GPT_BACKEND_AUTO:
        break;
    case GPT_BACKEND_CPU:
        (void)device;
        return gpt_backend_cpu_new(o->threads > 0 ? o->threads : 1, ret, err);
    case GPT_BACKEND_CUDA:
#ifdef GPTD_HAVE_CUDA
        return gpt_backend_cuda_new(device, o, ret, err);
#else
        return gpt_err_set(err, -GPT_E_NODEVICE, NULL,
                           "GPU %d requested but this build has no CUDA backend", device);
#endif
    }
    return gpt_err_set(err, -EINVAL, NULL, "unknown backend kind %d", (int)kind);
}

static int comm_nccl_new(const struct gpt_comm_opts *o, const struct gpt_kv *kv, int device,
                         struct gpt_backend *be, struct gpt_comm **ret, struct gpt_err *err)
{
#ifdef GPTD_HAVE_CUDA
    struct gpt_comm *c = NULL;
    int rc = gpt_comm_nccl_new(o, kv, device, &c, err);
    if (rc < 0)
        return rc;
    if (be && (rc = gpt_comm_nccl_bind_backend(c, be)) < 0) {
        gpt_comm_free(c);
        return gpt_err_set(err, rc, NULL, "cannot order NCCL after the backend of GPU %d", device);
    }
    *ret = c;
    return 0;
#else
    (void)o;
    (void)kv;
    (void)be;
    (void)ret;
    return gpt_err_set(err, -GPT_E_NODEVICE, "distributed.backend",
                       "NCCL on GPU %d requested but this build has no CUDA backend", device);
#endif
}

/* The host-staged communicator's way into `be` (NULL: a CPU backend, whose
 * memory the host reads as it is). */
static const struct gpt_comm_stager *comm_stager(struct gpt_backend *be, struct gpt_comm_stager *st)
{
#ifdef GPTD_HAVE_CUDA
    if (be && gpt_backend_is_cuda(be)) {
        gpt_cuda_stager(be, st);
        return st;
    }
#else
    (void)be;
    (void)st;
#endif
    return NULL;
}

static int comm_staged_new(const struct gpt_comm_opts *o, const struct gpt_kv *kv,
                           struct gpt_backend *be, struct gpt_comm **ret, struct gpt_err *err)
{
    struct gpt_comm *inner = NULL;
    struct gpt_comm_stager st;
    int rc = gpt_comm_tcp_new(o, kv, &inner, err);
    if (rc < 0)
        return rc;
    return gpt_comm_staged_new(inner, comm_stager(be, &st), "distributed.backend is staged", ret,
                               err);
}

struct comm_nccl_try {
    const struct gpt_kv *kv;
    int device;
    struct gpt_backend *be;
};

/* gpt_comm_fallback_new's first try: NCCL bound to the backend. */
static int comm_nccl_try(void *ctx, const struct gpt_comm_opts *o, struct gpt_comm **ret,
                         struct gpt_err *err)
{
    struct comm_nccl_try *t = ctx;
    return comm_nccl_new(o, t->kv, t->device, t->be, ret, err);
}

int gpt_comm_new(enum gpt_comm_kind kind, const struct gpt_comm_opts *o, const struct gpt_kv *kv,
                 int device, struct gpt_backend *be, struct gpt_comm **ret, struct gpt_err *err)
{
    int world = o ? o->world : 1;
    if (kind == GPT_COMM_AUTO) {
        int cuda = 0;
#ifdef GPTD_HAVE_CUDA
        cuda = be && gpt_backend_is_cuda(be);
#endif
        if (world > 1 && cuda) {
            if (!o || !kv)
                return gpt_err_set(err, -EINVAL, NULL, "a device world needs options and a store");
            struct comm_nccl_try t = {kv, device, be};
            struct gpt_comm_stager st;
            return gpt_comm_fallback_new(o, kv, comm_nccl_try, &t, comm_stager(be, &st), ret, err);
        }
        kind = world == 1 ? GPT_COMM_LOCAL : GPT_COMM_TCP;
    }
    switch (kind) {
    case GPT_COMM_LOCAL:
        if (world != 1)
            return gpt_err_set(err, -EINVAL, "distributed.backend",
                               "a local communicator is for a world of one, not %d", world);
        return gpt_comm_local_new(ret, err);
    case GPT_COMM_TCP:
        if (!o || !kv)
            return gpt_err_set(err, -EINVAL, NULL, "a tcp communicator needs options and a store");
        return gpt_comm_tcp_new(o, kv, ret, err);
    case GPT_COMM_NCCL:
        if (!o || !kv)
            return gpt_err_set(err, -EINVAL, NULL,
                               "an nccl communicator needs options and a store");
        return comm_nccl_new(o, kv, device, be, ret, err);
    case GPT_COMM_STAGED:
        if (!o || !kv)
            return gpt_err_set(err, -EINVAL, NULL,
                               "a staged communicator needs options and a store");
        return comm_staged_new(o, kv, be, ret, err);
    case GPT_COMM_AUTO:
        break;
    }
    return gpt_err_set(err, -EINVAL, NULL, "unknown communicator kind %d", (int)kind);
}
