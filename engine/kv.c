/*
 * kv: two small struct gpt_kv stores that need no daemon, for in-process
 * worlds, tests and benches (see comm.h). mem: threads of one process share
 * a list under a mutex, and get waits on a condition variable. dir: processes
 * that share a directory, one file per key.
 * Owns: the entries (mem) and nothing but the directory name (dir).
 * Threads: any; get blocks up to its timeout.
 */
#define _GNU_SOURCE
#include "comm.h"
#include "gpt_atomic_file.h"
#include "monotime.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct kv_mem_entry {
    struct kv_mem_entry *next;
    char *key;
    size_t len;
    unsigned char val[];
};

struct kv_mem {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    struct kv_mem_entry *head;
};

static struct kv_mem_entry *kv_mem_find(struct kv_mem *m, const char *key)
{
    for (struct kv_mem_entry *e = m->head; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

static int kv_mem_set(void *ctx, const char *key, const void *val, size_t len)
{
    struct kv_mem *m = ctx;
    struct kv_mem_entry *e = malloc(sizeof(*e) + len);
    char *k = strdup(key);
    if (!e || !k) {
        free(e);
        free(k);
        return -ENOMEM;
    }
    e->key = k;
    e->len = len;
    if (len)
        memcpy(e->val, val, len);
    pthread_mutex_lock(&m->lock);
    /* Newest first, so a later set of the same key wins on lookup. */
    e->next = m->head;
    m->head = e;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    return 0;
}

static int kv_mem_get(void *ctx, const char *key, void *buf, size_t cap, size_t *ret_len,
                      int timeout_ms)
{
    struct kv_mem *m = ctx;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    int rc = 0;
    pthread_mutex_lock(&m->lock);
    struct kv_mem_entry *e;
    while (!(e = kv_mem_find(m, key)) && rc == 0)
        rc = pthread_cond_timedwait(&m->cond, &m->lock, &until) == ETIMEDOUT ? -ETIMEDOUT : 0;
    if (e) {
        size_t n = e->len < cap ? e->len : cap;
        memcpy(buf, e->val, n);
        *ret_len = n;
        rc = 0;
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
}

int gpt_kv_mem_new(struct gpt_kv *ret, struct gpt_err *err)
{
    struct kv_mem *m = calloc(1, sizeof(*m));
    pthread_condattr_t ca;
    if (!m)
        return gpt_err_set(err, -ENOMEM, NULL, "kv mem: out of memory");
    pthread_mutex_init(&m->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cond, &ca);
    pthread_condattr_destroy(&ca);
    *ret = (struct gpt_kv){.ctx = m, .set = kv_mem_set, .get = kv_mem_get};
    return 0;
}

void gpt_kv_mem_free(struct gpt_kv *kv)
{
    if (!kv || !kv->ctx)
        return;
    struct kv_mem *m = kv->ctx;
    while (m->head) {
        struct kv_mem_entry *e = m->head;
        m->head = e->next;
        free(e->key);
        free(e);
    }
    pthread_cond_destroy(&m->cond);
    pthread_mutex_destroy(&m->lock);
    free(m);
    kv->ctx = NULL;
}

/* dir: one file per key (key bytes other than [A-Za-z0-9._-] escaped as
 * %XX), written to a temporary name and renamed, so readers never see half
 * a value; get polls. */
#define KV_DIR_PATH_MAX 1024

static int kv_dir_path(const char *dir, const char *key, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "%s/", dir);
    for (; *key && n + 4 < cap; key++) {
        unsigned char ch = (unsigned char)*key;
        bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                     (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
        n += plain ? (size_t)snprintf(out + n, cap - n, "%c", ch)
                   : (size_t)snprintf(out + n, cap - n, "%%%02X", ch);
    }
    return *key || n >= cap ? -EINVAL : 0;
}

static int kv_dir_set(void *ctx, const char *key, const void *val, size_t len)
{
    char final[KV_DIR_PATH_MAX];
    struct gpt_atomic_file f;
    if (kv_dir_path(ctx, key, final, sizeof(final)))
        return -EINVAL;
    int rc = gpt_atomic_file_open(&f, final, ".tmp.", 0600, NULL);
    if (rc == 0 && (rc = gpt_atomic_file_write(&f, val, len, NULL)) == 0)
        return gpt_atomic_file_commit(&f, NULL);
    gpt_atomic_file_abort(&f);
    return rc;
}

static int kv_dir_get(void *ctx, const char *key, void *buf, size_t cap, size_t *ret_len,
                      int timeout_ms)
{
    char path[KV_DIR_PATH_MAX];
    if (kv_dir_path(ctx, key, path, sizeof(path)))
        return -EINVAL;
    int64_t deadline = monotime_ms() + timeout_ms;
    long sleep_ms = 1;
    for (;;) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t k = read(fd, buf, cap);
            int rc = k < 0 ? -errno : 0;
            close(fd);
            if (rc == 0)
                *ret_len = (size_t)k;
            return rc;
        }
        if (errno != ENOENT)
            return -errno;
        if (monotime_ms() >= deadline)
            return -ETIMEDOUT;
        nanosleep(&(struct timespec){.tv_nsec = sleep_ms * 1000000}, NULL);
        sleep_ms = sleep_ms < 20 ? sleep_ms * 2 : 20;
    }
}

int gpt_kv_dir_new(struct gpt_kv *ret, const char *dir, struct gpt_err *err)
{
    struct stat st;
    if (!dir || stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
        return gpt_err_set(err, -ENOENT, NULL, "kv dir: '%s' is not a directory",
                           dir ? dir : "(null)");
    char *d = strdup(dir);
    if (!d)
        return gpt_err_set(err, -ENOMEM, NULL, "kv dir: out of memory");
    *ret = (struct gpt_kv){.ctx = d, .set = kv_dir_set, .get = kv_dir_get};
    return 0;
}

void gpt_kv_dir_free(struct gpt_kv *kv)
{
    if (!kv)
        return;
    free(kv->ctx);
    kv->ctx = NULL;
}
