/*
 * fdlimit: see fdlimit.h. getrlimit/setrlimit only.
 */
#include "fdlimit.h"

#include <errno.h>
#include <sys/resource.h>

int fdlimit_get(uint64_t *ret_soft, uint64_t *ret_hard)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return -errno;
    *ret_soft = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
    *ret_hard = rl.rlim_max == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_max;
    return 0;
}

int fdlimit_raise(uint64_t *ret_soft, uint64_t *ret_hard)
{
    struct rlimit rl;
    int rc = 0;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return -errno;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit up = {rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &up) < 0)
            rc = -errno;
    }
    if (fdlimit_get(ret_soft, ret_hard) < 0)
        return -errno;
    return rc;
}

uint64_t fdlimit_nodes(uint64_t soft, uint64_t cap)
{
    uint64_t n = soft > FDLIMIT_RESERVE ? (soft - FDLIMIT_RESERVE) / 2 : 0;
    return n > cap ? cap : n;
}
