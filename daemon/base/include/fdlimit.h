/*
 * fdlimit: the process's open-file limit, which bounds how many nodes a
 * coordinator can hold (each node keeps one store connection, and one more
 * while its workers exchange ring addresses). gptd raises its soft limit
 * to the hard one at start (the systemd unit sets both with LimitNOFILE=).
 * No state; any thread.
 */
#ifndef GPTD_FDLIMIT_H
#define GPTD_FDLIMIT_H

#include <stdint.h>

/* Descriptors kept for everything but the nodes' connections (database,
 * logs, control clients, workers' rings, snapshots). */
#define FDLIMIT_RESERVE 1024

/* Raises the soft RLIMIT_NOFILE to the hard limit. Returns 0 with the
 * limits now in force, or a negative errno (the limits then as they were:
 * a sandbox may forbid setrlimit). Does not block. */
int fdlimit_raise(uint64_t *ret_soft, uint64_t *ret_hard);
/* The limits in force: 0 or a negative errno. */
int fdlimit_get(uint64_t *ret_soft, uint64_t *ret_hard);
/* How many nodes a coordinator with a soft limit of `soft` descriptors can
 * hold (two descriptors each, FDLIMIT_RESERVE kept), at most `cap` (the
 * caller's RDZV_NODES_MAX). */
uint64_t fdlimit_nodes(uint64_t soft, uint64_t cap);

#endif
