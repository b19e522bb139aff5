/*
 * devices: what this host can train on, for `gptctl nodes`: the compute
 * backends built in and usable here, and each visible GPU's name and
 * memory. Any thread; asks the CUDA runtime only (never the driver
 * directly), so it is safe on hosts without a GPU.
 */
#ifndef GPTD_DEVICES_H
#define GPTD_DEVICES_H

#include <jansson.h>
#include <stddef.h>

/* {"backends": ["cpu", "cuda"?], "blas": {...}, "gpus": [{"name",
 * "memory_bytes"}]} ("blas": blas_select_json()); new reference, NULL on
 * ENOMEM. */
json_t *devices_json(void);

/* One line for tables and heartbeats: "cpu, OpenBLAS SkylakeX" (the
 * kernels blas_select_summary() names), or "2x NVIDIA H200 141GiB,
 * nccl 2.21.5 on eth0, cudnn 9.14.0" (the interface NCCL will use,
 * "NCCL's choice" when neither gptd nor the operator set
 * NCCL_SOCKET_IFNAME; "no cudnn" where libcudnn.so.9 does not load: the
 * hand-written attention kernels then run). */
void devices_summary(char *buf, size_t cap);

#endif
