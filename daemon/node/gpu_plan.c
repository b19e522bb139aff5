/*
 * gpu_plan: see gpu_plan.h.
 */
#include "gpu_plan.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gpu_plan_check_workers(int workers, int gpus, const char *key, struct gpt_err *err)
{
    if (gpus <= 0 || workers <= gpus)
        return 0;
    return gpt_err_set(err, -GPT_E_SPEC, key,
                       "%s asks for %d workers but this node has %d GPU%s: each worker is one "
                       "NCCL rank on its own GPU (two ranks on one GPU fail with \"Duplicate "
                       "GPU\"); use at most %d",
                       key, workers, gpus, gpus == 1 ? "" : "s", gpus);
}

int gpu_plan_ifname(const char *addr, const struct ifaddrs *list, char *ret, size_t cap)
{
    if (!addr || !*addr)
        return -ENOENT;
    struct in_addr a4;
    struct in6_addr a6;
    int family;
    if (inet_pton(AF_INET, addr, &a4) == 1) {
        family = AF_INET;
        if (a4.s_addr == htonl(INADDR_ANY))
            return -ENOENT;
    } else if (inet_pton(AF_INET6, addr, &a6) == 1) {
        family = AF_INET6;
        if (memcmp(&a6, &in6addr_any, sizeof(a6)) == 0)
            return -ENOENT;
    } else {
        return -EINVAL;
    }
    for (const struct ifaddrs *i = list; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != family || !i->ifa_name)
            continue;
        int match = family == AF_INET
                        ? ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == a4.s_addr
                        : memcmp(&((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, &a6,
                                 sizeof(a6)) == 0;
        if (match) {
            if (strlen(i->ifa_name) >= cap)
                return -ENAMETOOLONG;
            snprintf(ret, cap, "%s", i->ifa_name);
            return 0;
        }
    }
    return -ENOENT;
}

/* The one name of the variable, read here and written by gpu_plan_nccl_env. */
#define GPU_PLAN_NCCL_IFNAME_VAR "NCCL_SOCKET_IFNAME"

const char *gpu_plan_nccl_ifname_env(void)
{
    const char *set = getenv(GPU_PLAN_NCCL_IFNAME_VAR);
    return set && *set ? set : NULL;
}

int gpu_plan_nccl_env(const char *addr, char *ret, size_t cap, int *ret_derived)
{
    *ret_derived = 0;
    ret[0] = '\0';
    const char *set = gpu_plan_nccl_ifname_env();
    if (set) {
        snprintf(ret, cap, "%s", set);
        return 0;
    }
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) < 0)
        return -errno;
    char name[IF_NAMESIZE + 1];
    int rc = gpu_plan_ifname(addr, list, name, sizeof(name));
    freeifaddrs(list);
    if (rc < 0)
        return rc;
    char val[IF_NAMESIZE + 2];
    snprintf(val, sizeof(val), "=%s", name);
    if (setenv(GPU_PLAN_NCCL_IFNAME_VAR, val, 1) < 0)
        return -errno;
    snprintf(ret, cap, "%s", name);
    *ret_derived = 1;
    return 0;
}
