/*
 * gpu_plan: what a node must check and set before it runs ranks on GPUs.
 *  - One rank per GPU: NCCL refuses two ranks of one communicator on one
 *    device ("Duplicate GPU"), and only after every rank has set up, so a
 *    worker count above the GPUs is refused up front, naming both counts.
 *  - The network NCCL uses: the interface that carries the address this
 *    node registered with the cluster (the one its peers already reach),
 *    unless the operator set NCCL_SOCKET_IFNAME; without it NCCL picks an
 *    interface by its own rules and may take another network on a
 *    multi-homed host.
 * Pure functions, except gpu_plan_nccl_env (the process environment).
 */
#ifndef GPTD_GPU_PLAN_H
#define GPTD_GPU_PLAN_H

#include <ifaddrs.h>
#include <stddef.h>

#include "gpt_err.h"

/* 0 when `workers` ranks fit on `gpus` GPUs (any count when gpus is 0: a
 * CPU host's workers are threads), else -GPT_E_SPEC with err naming `key`
 * (the setting that asked for them) and both counts. Pure. */
int gpu_plan_check_workers(int workers, int gpus, const char *key, struct gpt_err *err);

/* The name of the interface in `list` (getifaddrs) holding the numeric
 * address `addr` (IPv4 or IPv6). 0 and the name in ret (at most cap - 1
 * bytes); -ENOENT when no interface holds it, or addr is empty or a
 * wildcard (0.0.0.0, ::): then NCCL's own choice stands; -EINVAL when
 * addr is not numeric. Pure. */
int gpu_plan_ifname(const char *addr, const struct ifaddrs *list, char *ret, size_t cap);

/* NCCL_SOCKET_IFNAME as this process's environment holds it (the
 * operator's value, or the "=NAME" gpu_plan_nccl_env exported), NULL when
 * unset or empty. Borrows the environment's string: valid until the next
 * setenv. Any thread, once gpu_plan_nccl_env has run. */
const char *gpu_plan_nccl_ifname_env(void);

/* Once, at start, before any thread that may create an NCCL communicator:
 * an operator's NCCL_SOCKET_IFNAME stays (copied to ret, *ret_derived 0);
 * otherwise the interface of `addr` is derived (gpu_plan_ifname over this
 * host's interfaces) and exported as NCCL_SOCKET_IFNAME="=NAME" (an exact
 * match), ret gets NAME and *ret_derived 1. ret is "" when neither applies.
 * Returns 0, or a negative errno when the derivation failed (the
 * environment is then left alone). Main thread; not thread-safe (setenv). */
int gpu_plan_nccl_env(const char *addr, char *ret, size_t cap, int *ret_derived);

#endif
