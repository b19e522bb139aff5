/*
 * test_gpu_plan: the node's GPU planning without a GPU (daemon/node/
 * gpu_plan.c, issue 34).
 *  - more workers than GPUs is refused, naming the key and both counts;
 *    as many as the GPUs, or any count on a CPU host, is not;
 *  - NCCL's interface is the one holding the registered address: IPv4
 *    and IPv6 on a fake interface list, loopback, an address no
 *    interface holds, wildcards and names that are not addresses;
 *  - the environment: an operator's NCCL_SOCKET_IFNAME is kept; without
 *    one, 127.0.0.1 exports "=lo" (this host's loopback interface).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpu_plan.h"

static void test_workers(void **state)
{
    (void)state;
    struct gpt_err err;
    assert_int_equal(gpu_plan_check_workers(8, 8, "workers", &err), 0);
    assert_int_equal(gpu_plan_check_workers(1, 8, "workers", &err), 0);
    assert_int_equal(gpu_plan_check_workers(64, 0, "workers", &err), 0); /* CPU host */
    memset(&err, 0, sizeof(err));
    assert_int_equal(gpu_plan_check_workers(3, 2, "distributed.workers_per_node", &err),
                     -GPT_E_SPEC);
    assert_string_equal(err.path, "distributed.workers_per_node");
    assert_non_null(strstr(err.msg, "3 workers"));
    assert_non_null(strstr(err.msg, "2 GPUs"));
    assert_int_equal(gpu_plan_check_workers(2, 1, "workers", &err), -GPT_E_SPEC);
    assert_non_null(strstr(err.msg, "1 GPU:"));
}

/* A fake getifaddrs list: lo 127.0.0.1, eth0 10.1.2.3, ib0 192.168.7.9
 * and fe80::1, eth1 without an address. */
struct fake_ifs {
    struct ifaddrs e[5];
    struct sockaddr_in a4[3];
    struct sockaddr_in6 a6;
};

static void fake_ifs_init(struct fake_ifs *f)
{
    memset(f, 0, sizeof(*f));
    static char *names[] = {"lo", "eth0", "ib0", "ib0", "eth1"};
    const char *v4[] = {"127.0.0.1", "10.1.2.3", "192.168.7.9"};
    for (int i = 0; i < 3; i++) {
        f->a4[i].sin_family = AF_INET;
        assert_int_equal(inet_pton(AF_INET, v4[i], &f->a4[i].sin_addr), 1);
        f->e[i].ifa_addr = (struct sockaddr *)&f->a4[i];
    }
    f->a6.sin6_family = AF_INET6;
    assert_int_equal(inet_pton(AF_INET6, "fe80::1", &f->a6.sin6_addr), 1);
    f->e[3].ifa_addr = (struct sockaddr *)&f->a6;
    for (int i = 0; i < 5; i++) {
        f->e[i].ifa_name = names[i];
        f->e[i].ifa_next = i < 4 ? &f->e[i + 1] : NULL;
    }
}

static void test_ifname(void **state)
{
    (void)state;
    struct fake_ifs f;
    fake_ifs_init(&f);
    char name[16];
    assert_int_equal(gpu_plan_ifname("10.1.2.3", f.e, name, sizeof(name)), 0);
    assert_string_equal(name, "eth0");
    assert_int_equal(gpu_plan_ifname("192.168.7.9", f.e, name, sizeof(name)), 0);
    assert_string_equal(name, "ib0");
    assert_int_equal(gpu_plan_ifname("fe80::1", f.e, name, sizeof(name)), 0);
    assert_string_equal(name, "ib0");
    assert_int_equal(gpu_plan_ifname("127.0.0.1", f.e, name, sizeof(name)), 0);
    assert_string_equal(name, "lo");
    assert_int_equal(gpu_plan_ifname("10.9.9.9", f.e, name, sizeof(name)), -ENOENT);
    assert_int_equal(gpu_plan_ifname("0.0.0.0", f.e, name, sizeof(name)), -ENOENT);
    assert_int_equal(gpu_plan_ifname("::", f.e, name, sizeof(name)), -ENOENT);
    assert_int_equal(gpu_plan_ifname("", f.e, name, sizeof(name)), -ENOENT);
    assert_int_equal(gpu_plan_ifname("node7.example", f.e, name, sizeof(name)), -EINVAL);
    assert_int_equal(gpu_plan_ifname("10.1.2.3", f.e, name, 3), -ENAMETOOLONG);
}

static void test_env(void **state)
{
    (void)state;
    char name[64];
    int derived = -1;
    assert_int_equal(setenv("NCCL_SOCKET_IFNAME", "^docker", 1), 0);
    assert_int_equal(gpu_plan_nccl_env("127.0.0.1", name, sizeof(name), &derived), 0);
    assert_int_equal(derived, 0);
    assert_string_equal(name, "^docker");
    assert_string_equal(getenv("NCCL_SOCKET_IFNAME"), "^docker");
    assert_string_equal(gpu_plan_nccl_ifname_env(), "^docker");

    assert_int_equal(unsetenv("NCCL_SOCKET_IFNAME"), 0);
    assert_int_equal(gpu_plan_nccl_env("127.0.0.1", name, sizeof(name), &derived), 0);
    assert_int_equal(derived, 1);
    assert_string_equal(name, "lo");
    assert_string_equal(getenv("NCCL_SOCKET_IFNAME"), "=lo");
    assert_string_equal(gpu_plan_nccl_ifname_env(), "=lo");

    assert_int_equal(unsetenv("NCCL_SOCKET_IFNAME"), 0);
    assert_int_equal(gpu_plan_nccl_env("203.0.113.77", name, sizeof(name), &derived), -ENOENT);
    assert_null(getenv("NCCL_SOCKET_IFNAME"));
    assert_null(gpu_plan_nccl_ifname_env());
    assert_int_equal(setenv("NCCL_SOCKET_IFNAME", "", 1), 0);
    assert_null(gpu_plan_nccl_ifname_env());
    assert_int_equal(unsetenv("NCCL_SOCKET_IFNAME"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_workers),
        cmocka_unit_test(test_ifname),
        cmocka_unit_test(test_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
