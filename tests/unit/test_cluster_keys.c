/*
 * test_cluster_keys: the node keys on disk (daemon/cluster/cluster_keys.c).
 * A real coordinator and a member, each with a state directory, on one
 * loop: the member's first connection is issued a key, which it keeps in
 * node.key and the coordinator in node.keys (both 0600, the same key); a
 * coordinator restarted from its directory holds the keys again (a torn
 * last line, a crash's append, is dropped), forgets one on request (the
 * file rewritten without it) and refuses to forget an unknown id, its own
 * or on a member; a damaged node.keys or node.key stops cluster_new with
 * an error naming the file. Bounded by deadlines.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "cluster.h"

#define SECRET "test-cluster-keys-secret-0123456789"

static uv_loop_t loop;
static char dir_c[64], dir_m[64];

static struct cluster_opts opts(const char *node, const char *state_dir, bool coordinator, int port)
{
    struct cluster_opts o = {.node_id = node,
                             .host = "127.0.0.1",
                             .port = port,
                             .coordinator = coordinator,
                             .secret = SECRET,
                             .secret_len = strlen(SECRET),
                             .state_dir = state_dir,
                             .heartbeat_s = 0.25,
                             .dead_after_s = 5,
                             .last_call_s = 5,
                             .addr = "127.0.0.1",
                             .workers = 1,
                             .version = "test"};
    return o;
}

/* The whole of a small file, NUL-terminated, in buf ("" when absent). */
static void slurp(const char *dir, const char *name, char *buf, size_t cap)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
}

static mode_t file_mode(const char *dir, const char *name)
{
    char path[128];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    assert_int_equal(stat(path, &st), 0);
    return st.st_mode & 07777;
}

static void put(const char *dir, const char *name, const char *text, const char *how)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, how);
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void on_closed(void *arg)
{
    (*(int *)arg)++;
}

static void close_all(struct cluster *a, struct cluster *b)
{
    int closed = 0, want = 0;
    if (a)
        cluster_close(a, on_closed, &closed), want++;
    if (b)
        cluster_close(b, on_closed, &closed), want++;
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(closed, want);
}

/* The first join: a key issued, kept on both sides, the same bytes. */
static void first_join(char *ret_key_hex)
{
    struct gpt_err err;
    struct cluster *coord = NULL, *member = NULL;
    struct cluster_opts co = opts("coordinator", dir_c, true, 0);
    char keys[1024], key[128];

    assert_int_equal(cluster_new(&loop, &co, &coord, &err), 0);
    struct cluster_opts mo = opts("member", dir_m, false, cluster_port(coord));
    assert_int_equal(cluster_new(&loop, &mo, &member, &err), 0);
    uint64_t end = uv_hrtime() + 10ull * 1000000000ull;
    key[0] = '\0';
    while (!key[0] && uv_hrtime() < end) {
        uv_run(&loop, UV_RUN_ONCE);
        slurp(dir_m, "node.key", key, sizeof(key));
    }
    assert_int_equal(strlen(key), 65); /* 64 hex digits and a newline */
    slurp(dir_c, "node.keys", keys, sizeof(keys));
    snprintf(ret_key_hex, 65, "%s", key);
    char line[128];
    snprintf(line, sizeof(line), "%s member\n", ret_key_hex);
    assert_non_null(strstr(keys, line));
    assert_non_null(strstr(keys, " coordinator\n"));
    assert_int_equal(file_mode(dir_m, "node.key"), 0600);
    assert_int_equal(file_mode(dir_c, "node.keys"), 0600);
    assert_int_equal(file_mode(dir_c, "node.key"), 0600);
    /* A member forgets nothing: only the coordinator holds the keys. */
    assert_int_equal(cluster_forget_node(member, "coordinator", &err), -EINVAL);
    close_all(member, coord);
}

static void test_cluster_keys(void **state)
{
    struct gpt_err err;
    struct cluster *coord = NULL, *member = NULL;
    char key_hex[65], keys[1024];

    (void)state;
    snprintf(dir_c, sizeof(dir_c), "/tmp/test_cluster_keys_c_XXXXXX");
    snprintf(dir_m, sizeof(dir_m), "/tmp/test_cluster_keys_m_XXXXXX");
    assert_non_null(mkdtemp(dir_c));
    assert_non_null(mkdtemp(dir_m));
    assert_int_equal(uv_loop_init(&loop), 0);
    first_join(key_hex);

    /* Restarted, with a torn last line: the keys are back, the torn line
     * dropped; forgetting rewrites the file without the node. */
    put(dir_c, "node.keys", "0123", "a");
    struct cluster_opts co = opts("coordinator", dir_c, true, 0);
    assert_int_equal(cluster_new(&loop, &co, &coord, &err), 0);
    assert_int_equal(cluster_forget_node(coord, "nobody", &err), -ENOENT);
    assert_non_null(strstr(err.msg, "no node key is kept for node \"nobody\""));
    assert_int_equal(cluster_forget_node(coord, "coordinator", &err), -EINVAL);
    assert_int_equal(cluster_forget_node(coord, "member", &err), 0);
    slurp(dir_c, "node.keys", keys, sizeof(keys));
    assert_null(strstr(keys, "member"));
    assert_null(strstr(keys, key_hex));
    assert_non_null(strstr(keys, " coordinator\n"));
    assert_int_equal(file_mode(dir_c, "node.keys"), 0600);
    assert_int_equal(cluster_forget_node(coord, "member", &err), -ENOENT);
    close_all(coord, NULL);

    /* Damaged files stop the start, naming them. */
    put(dir_c, "node.keys", "zz member\n", "a");
    assert_int_equal(cluster_new(&loop, &co, &coord, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "node.keys: a line is not"));
    put(dir_m, "node.key", "not a key\n", "w");
    struct cluster_opts mo = opts("member", dir_m, false, 1);
    assert_int_equal(cluster_new(&loop, &mo, &member, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "gptctl nodes --forget member"));

    assert_int_equal(uv_loop_close(&loop), 0);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s %s", dir_c, dir_m);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_keys),
    };
    alarm(60);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
