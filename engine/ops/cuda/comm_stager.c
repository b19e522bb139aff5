/*
 * comm_stager: how the host-staged communicator (engine/comm_staged.c)
 * reaches the CUDA backend's memory (see comm_nccl.h). It holds no state
 * but the backend: every copy runs on the backend's communication stream,
 * which the staged communicator has to itself (the NCCL communicator that
 * would share it was not formed), after a wait for the compute stream, so
 * it touches no per-op state of the backend and any thread may call it.
 */
#include "comm_nccl.h"

#include <cuda_runtime_api.h>

#include "cuda_backend.h"
#include "gpt_err.h"

static int stager_cuda(cudaError_t e)
{
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    return -GPT_E_CUDA;
}

static int stager_is_device(void *ctx, const void *p)
{
    (void)ctx;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* After every compute op enqueued so far (a full wait: the staged path has
 * no per-bucket ready marks), then on the communication stream. */
static int stager_to_host(void *ctx, void *host, const void *dev, size_t bytes)
{
    struct gpt_backend *be = ctx;
    cudaStream_t comm = (cudaStream_t)gpt_cuda_backend_comm_stream(be);
    int rc = stager_cuda(cudaSetDevice(gpt_cuda_backend_device(be)));
    if (rc == 0)
        rc = stager_cuda(cudaStreamSynchronize((cudaStream_t)gpt_cuda_backend_compute_stream(be)));
    if (rc == 0)
        rc = stager_cuda(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, comm));
    if (rc == 0)
        rc = stager_cuda(cudaStreamSynchronize(comm));
    return rc;
}

/* Done before it returns, so compute work enqueued later reads it; the
 * bf16 shadows of the range are stale from here on, as after NCCL. */
static int stager_to_device(void *ctx, void *dev, const void *host, size_t bytes)
{
    struct gpt_backend *be = ctx;
    cudaStream_t comm = (cudaStream_t)gpt_cuda_backend_comm_stream(be);
    int rc = stager_cuda(cudaSetDevice(gpt_cuda_backend_device(be)));
    if (rc == 0)
        rc = stager_cuda(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, comm));
    if (rc == 0)
        rc = stager_cuda(cudaStreamSynchronize(comm));
    if (rc == 0)
        gpt_cuda_backend_note_write(be, dev, bytes);
    return rc;
}

void gpt_cuda_stager(struct gpt_backend *be, struct gpt_comm_stager *ret)
{
    GPT_ASSERT(be && gpt_backend_is_cuda(be) && ret);
    *ret = (struct gpt_comm_stager){.ctx = be,
                                    .is_device = stager_is_device,
                                    .to_host = stager_to_host,
                                    .to_device = stager_to_device};
}
