/*
 * tokcache: see tokcache.h. The cache file format:
 *   0   magic "GPTDTOKC"                       8 bytes
 *   8   u32 version (1), u32 header bytes (64)
 *   16  u64 vocabulary fingerprint
 *   24  SHA-256 of the text                    32 bytes
 *   56  u64 id count n
 *   64  n uint16 ids
 *   end u32 CRC-32 of every byte before it
 * Integers little-endian (the hosts gptd supports; snapshot.c refuses
 * others).
 */
#define _GNU_SOURCE /* mkostemp */
#include "tokcache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <zlib.h>

#include "gpt_atomic_file.h"
#include "gpt_file.h"
#include "monotime.h"
#include "paths.h"
#include "prompt_ids.h"
#include "snapshot.h" /* gpt_mkdirs */
#include "tok.h"

#define TOKC_MAGIC        "GPTDTOKC"
#define TOKC_VERSION      1u
#define TOKC_HEADER_BYTES 64u
#define TOKC_THREADS_MAX  256
#define TOKC_IDS_MAX      ((size_t)1 << 40) /* ids one file may hold */

struct tokcache {
    struct tokcache_opts o;
    char vocab_dir[PATH_MAX];
    char cache_dir[PATH_MAX];
    struct gpt_tok *tok;
    struct gpt_data_bpe bpe;
    struct gpt_sample_codec codec;
};

/* One encode at a time in this process: a job's workers tokenize a file
 * once, then find it in the cache. */
static pthread_mutex_t tokc_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the vocabulary folder --------------------------------------------- */

/* Reads dir/name (opened relative to the folder's descriptor, without
 * blocking, a regular file of at most GPT_TOK_FILE_BYTES_MAX bytes).
 * -ENOENT quietly when it is missing. */
static int tokc_read_at(int dfd, const char *dir, const char *name, char **ret, size_t *ret_len,
                        struct gpt_err *err)
{
    int fd = openat(dfd, name, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            return -ENOENT;
        return gpt_err_set(err, -e, "data.vocab", "%s/%s: %s", dir, name, strerror(e));
    }
    char what[PATH_MAX + 64];
    snprintf(what, sizeof(what), "%s/%s", dir, name);
    int rc = gpt_file_read_fd(fd, what, GPT_TOK_FILE_BYTES_MAX, "data.vocab", ret, ret_len, err);
    close(fd);
    return rc;
}

/* GPT-2's names, else Hugging Face's. */
static int tokc_load_vocab(struct tokcache *tc, struct gpt_err *err)
{
    static const char *const names[2][2] = {{"encoder.json", "vocab.bpe"},
                                            {"vocab.json", "merges.txt"}};
    const char *dir = tc->vocab_dir;
    char *json = NULL, *merges = NULL;
    size_t json_len = 0, merges_len = 0;
    int rc;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
    if (dfd < 0) {
        int e = errno;
        return gpt_err_set(err, -e, "data.vocab", "data.vocab: %s: %s", dir,
                           e == ENOTDIR ? "not a folder (give the folder holding encoder.json "
                                          "and vocab.bpe)"
                                        : strerror(e));
    }
    if (tc->o.data_roots &&
        (rc = paths_check_fd(dfd, dir, "data.vocab", tc->o.data_roots, err)) < 0)
        goto out;
    for (int k = 0; k < 2; k++) {
        rc = tokc_read_at(dfd, dir, names[k][0], &json, &json_len, err);
        if (rc == 0)
            rc = tokc_read_at(dfd, dir, names[k][1], &merges, &merges_len, err);
        if (rc != -ENOENT)
            break;
        free(json);
        json = NULL;
    }
    if (rc == -ENOENT)
        rc = gpt_err_set(err, -ENOENT, "data.vocab",
                         "data.vocab: %s holds neither encoder.json + vocab.bpe nor vocab.json + "
                         "merges.txt",
                         dir);
    if (rc == 0 && (rc = gpt_tok_load_mem(json, json_len, merges, merges_len, &tc->tok, err)) < 0) {
        char msg[sizeof(err->msg)];
        snprintf(msg, sizeof(msg), "%s", err->msg);
        gpt_err_set(err, rc, "data.vocab", "data.vocab: %s: %s", dir, msg);
    }
out:
    free(json);
    free(merges);
    close(dfd);
    return rc;
}

/* ---- the cache file ------------------------------------------------------ */

static void tokc_put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t tokc_get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint32_t tokc_crc(uint32_t crc, const void *p, size_t n)
{
    const unsigned char *q = p;
    while (n > 0) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, q, k);
        q += k;
        n -= k;
    }
    return crc;
}

static void tokc_header(const struct tokcache *tc, const unsigned char sha[32], uint64_t n,
                        unsigned char h[TOKC_HEADER_BYTES])
{
    memset(h, 0, TOKC_HEADER_BYTES);
    memcpy(h, TOKC_MAGIC, 8);
    h[8] = TOKC_VERSION;
    h[12] = TOKC_HEADER_BYTES;
    tokc_put64(h + 16, tc->bpe.fingerprint);
    memcpy(h + 24, sha, 32);
    tokc_put64(h + 56, n);
}

/* The cache file's path: a hash of the owner, the vocabulary and the text. */
static int tokc_path(const struct tokcache *tc, const unsigned char sha[32], char *out, size_t cap)
{
    unsigned char key[4 + 8 + 32 + 16], md[32];
    memcpy(key, "gptd-tokcache-v1", 16);
    uint32_t uid = (uint32_t)tc->o.uid;
    memcpy(key + 16, &uid, 4);
    tokc_put64(key + 20, tc->bpe.fingerprint);
    memcpy(key + 28, sha, 32);
    unsigned int mdlen = 0;
    if (EVP_Digest(key, sizeof(key), md, &mdlen, EVP_sha256(), NULL) != 1)
        return -EIO;
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    int k = snprintf(out, cap, "%s/%s.tok", tc->cache_dir, hex);
    return k > 0 && (size_t)k < cap ? 0 : -ENAMETOOLONG;
}

/* Reads a cache file; 0 with the ids, -ENOENT when absent, -GPT_E_CORRUPT
 * (with the reason in why) when it does not validate. */
static int tokc_load(const struct tokcache *tc, const char *path, const unsigned char sha[32],
                     uint16_t **ret, size_t *ret_n, char *why, size_t why_cap)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? -ENOENT : -GPT_E_CORRUPT;
    struct stat st;
    unsigned char h[TOKC_HEADER_BYTES], want[TOKC_HEADER_BYTES];
    uint16_t *ids = NULL;
    int rc = -GPT_E_CORRUPT;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size < TOKC_HEADER_BYTES + 4) {
        snprintf(why, why_cap, "not a cache file");
        goto out;
    }
    if (pread(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
        snprintf(why, why_cap, "unreadable header");
        goto out;
    }
    uint64_t n = tokc_get64(h + 56);
    tokc_header(tc, sha, n, want);
    if (memcmp(h, want, sizeof(h)) != 0 || n > TOKC_IDS_MAX ||
        (uint64_t)st.st_size != TOKC_HEADER_BYTES + 2 * n + 4) {
        snprintf(why, why_cap, "header or size does not match");
        goto out;
    }
    size_t body = (size_t)(2 * n + 4);
    if (!(ids = malloc(body > 0 ? body : 1))) {
        rc = -ENOMEM;
        goto out;
    }
    size_t off = 0;
    while (off < body) {
        ssize_t k = pread(fd, (char *)ids + off, body - off, (off_t)(TOKC_HEADER_BYTES + off));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            snprintf(why, why_cap, "short read");
            goto out;
        }
        off += (size_t)k;
    }
    const unsigned char *tail = (const unsigned char *)ids + 2 * n;
    uint32_t crc = (uint32_t)tail[0] | (uint32_t)tail[1] << 8 | (uint32_t)tail[2] << 16 |
                   (uint32_t)tail[3] << 24;
    if (crc != tokc_crc(tokc_crc(0, h, sizeof(h)), ids, (size_t)(2 * n))) {
        snprintf(why, why_cap, "checksum mismatch");
        goto out;
    }
    for (uint64_t i = 0; i < n; i++)
        if (ids[i] >= tc->bpe.vocab_size) {
            snprintf(why, why_cap, "token %u out of the vocabulary", ids[i]);
            goto out;
        }
    (void)futimens(fd, NULL); /* most recently used */
    *ret = ids;
    *ret_n = (size_t)n;
    ids = NULL;
    rc = 0;
out:
    free(ids);
    close(fd);
    return rc;
}

/* Keeps the TOKCACHE_FILES_MAX most recently used files of the folder
 * (looks at TOKC_SCAN_MAX entries at most). */
#define TOKC_SCAN_MAX 4096

struct tokc_ent {
    char name[40];
    struct timespec t;
};

static int tokc_ent_newer(const void *a, const void *b)
{
    const struct tokc_ent *x = a, *y = b;
    if (x->t.tv_sec != y->t.tv_sec)
        return x->t.tv_sec > y->t.tv_sec ? -1 : 1;
    return x->t.tv_nsec > y->t.tv_nsec ? -1 : x->t.tv_nsec < y->t.tv_nsec;
}

static void tokc_prune(const char *dir)
{
    struct tokc_ent *ents = calloc(TOKC_SCAN_MAX, sizeof(*ents));
    DIR *d = ents ? opendir(dir) : NULL;
    size_t n = 0;
    if (!d) {
        free(ents);
        return;
    }
    struct dirent *de;
    for (size_t seen = 0; n < TOKC_SCAN_MAX && seen < TOKC_SCAN_MAX && (de = readdir(d)); seen++) {
        size_t len = strlen(de->d_name);
        struct stat st;
        if (len < 5 || len >= sizeof(ents[0].name) || strcmp(de->d_name + len - 4, ".tok") != 0 ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        memcpy(ents[n].name, de->d_name, len + 1);
        ents[n++].t = st.st_mtim;
    }
    qsort(ents, n, sizeof(*ents), tokc_ent_newer);
    for (size_t i = TOKCACHE_FILES_MAX; i < n; i++)
        (void)unlinkat(dirfd(d), ents[i].name, 0);
    closedir(d);
    free(ents);
}

/* Writes a cache file (a gpt_atomic_file: temporary name, fsync, rename). */
static int tokc_store(const struct tokcache *tc, const char *path, const unsigned char sha[32],
                      const uint16_t *ids, size_t n)
{
    int rc = gpt_mkdirs(tc->cache_dir, 0700);
    if (rc < 0)
        return rc;
    unsigned char h[TOKC_HEADER_BYTES], t[4];
    tokc_header(tc, sha, n, h);
    uint32_t crc = tokc_crc(tokc_crc(0, h, sizeof(h)), ids, 2 * n);
    for (int i = 0; i < 4; i++)
        t[i] = (unsigned char)(crc >> (8 * i));
    struct gpt_atomic_file f;
    if ((rc = gpt_atomic_file_open(&f, path, ".tmp-", 0600, NULL)) < 0)
        return rc;
    if ((rc = gpt_atomic_file_write(&f, h, sizeof(h), NULL)) < 0 ||
        (rc = gpt_atomic_file_write(&f, ids, 2 * n, NULL)) < 0 ||
        (rc = gpt_atomic_file_write(&f, t, sizeof(t), NULL)) < 0) {
        gpt_atomic_file_abort(&f);
        return rc;
    }
    if ((rc = gpt_atomic_file_commit(&f, NULL)) == 0)
        tokc_prune(tc->cache_dir);
    return rc;
}

/* ---- the engine's data hook ------------------------------------------------ */

static int tokc_threads(const struct tokcache *tc)
{
    if (tc->o.threads > 0)
        return tc->o.threads < TOKC_THREADS_MAX ? tc->o.threads : TOKC_THREADS_MAX;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > TOKC_THREADS_MAX ? TOKC_THREADS_MAX : (int)n;
}

static int tokc_encode_now(struct tokcache *tc, const void *text, size_t len, const char *file,
                           const char *json_path, uint16_t **ret, size_t *ret_n,
                           struct gpt_err *err)
{
    struct gpt_tok_ids ids = {0};
    int rc = gpt_tok_encode_parallel(tc->tok, text, len, 0, tokc_threads(tc), &ids, err);
    if (rc < 0) {
        gpt_tok_ids_done(&ids);
        char msg[sizeof(err->msg)];
        snprintf(msg, sizeof(msg), "%s", err->msg);
        return gpt_err_set(err, rc, json_path, "%s: tokenizing: %s", file, msg);
    }
    uint16_t *out = malloc(ids.n ? ids.n * sizeof(uint16_t) : 1);
    if (!out) {
        gpt_tok_ids_done(&ids);
        return gpt_err_set(err, -ENOMEM, json_path, "out of memory for the ids of %s", file);
    }
    for (size_t i = 0; i < ids.n; i++) {
        if (ids.v[i] < 0 || ids.v[i] > 65535) {
            free(out);
            gpt_tok_ids_done(&ids);
            return gpt_err_set(err, -GPT_E_DATA, "data.vocab",
                               "token %d does not fit the uint16 ids gptd keeps", ids.v[i]);
        }
        out[i] = (uint16_t)ids.v[i];
    }
    *ret = out;
    *ret_n = ids.n;
    gpt_tok_ids_done(&ids);
    return 0;
}

/* gpt_data_bpe.encode: the cache as gptd, the encoder under the lock. */
static int tokc_encode(void *ctx, const void *text, size_t len, const char *file,
                       const char *json_path, uint16_t **ret, size_t *ret_n, char *note,
                       size_t note_cap, struct gpt_err *err)
{
    struct tokcache *tc = ctx;
    unsigned char sha[32];
    unsigned int shalen = 0;
    char path[PATH_MAX] = "", why[96] = "";
    bool cached = tc->cache_dir[0] != '\0';
    if (EVP_Digest(text, len, sha, &shalen, EVP_sha256(), NULL) != 1)
        return gpt_err_set(err, -EIO, json_path, "%s: SHA-256 failed", file);
    if (cached && tokc_path(tc, sha, path, sizeof(path)) < 0)
        cached = false;

    pthread_mutex_lock(&tokc_lock);
    bool switched = tc->o.user && tc->o.saved && tc->o.saved->switched;
    int rc = -ENOENT, src = 0;
    if (cached) {
        if (switched)
            fsid_leave(tc->o.saved);
        rc = tokc_load(tc, path, sha, ret, ret_n, why, sizeof(why));
        if (switched && (src = fsid_enter(tc->o.user, tc->o.saved, err)) < 0) {
            if (rc == 0)
                free(*ret);
            pthread_mutex_unlock(&tokc_lock);
            return src;
        }
    }
    if (rc == 0) {
        pthread_mutex_unlock(&tokc_lock);
        snprintf(note, note_cap, "%s: %zu tokens from the cache (%s)", json_path, *ret_n, path);
        return 0;
    }
    double t0 = monotime_s();
    if ((rc = tokc_encode_now(tc, text, len, file, json_path, ret, ret_n, err)) < 0) {
        pthread_mutex_unlock(&tokc_lock);
        return rc;
    }
    double dt = monotime_s() - t0;
    int wrc = 0;
    if (cached) {
        if (switched)
            fsid_leave(tc->o.saved);
        wrc = tokc_store(tc, path, sha, *ret, *ret_n);
        if (switched && (src = fsid_enter(tc->o.user, tc->o.saved, err)) < 0) {
            free(*ret);
            pthread_mutex_unlock(&tokc_lock);
            return src;
        }
    }
    pthread_mutex_unlock(&tokc_lock);
    int k =
        snprintf(note, note_cap, "%s: tokenized %zu bytes into %zu tokens in %.2f s on %d threads",
                 json_path, len, *ret_n, dt, tokc_threads(tc));
    if (k < 0 || (size_t)k >= note_cap)
        return 0;
    if (why[0])
        snprintf(note + k, note_cap - (size_t)k, "; the cache file was invalid (%s), rebuilt", why);
    else if (!cached)
        snprintf(note + k, note_cap - (size_t)k, "; no cache");
    else if (wrc < 0)
        snprintf(note + k, note_cap - (size_t)k, "; not cached: %s", strerror(-wrc));
    else
        snprintf(note + k, note_cap - (size_t)k, "; cached as %s", path);
    return 0;
}

/* ---- the sampling codec ------------------------------------------------------ */

static int tokc_codec_encode(void *ctx, const char *text, int32_t *out, size_t cap, size_t *ret_n,
                             struct gpt_err *err)
{
    struct tokcache *tc = ctx;
    return gpt_tok_encode_str(tc->tok, text, 0, out, cap, ret_n, err);
}

/* Length of the valid UTF-8 sequence at s[0, n), or 0 when it is not one. */
static size_t tokc_utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4
                                          : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) || (c == 0xf0 && s[1] < 0x90) ||
        (c == 0xf4 && s[1] > 0x8f))
        return 0;
    return len;
}

/* ids -> text, every invalid UTF-8 byte shown as U+FFFD (a model's bytes
 * need not form characters; replies are JSON strings). */
static int tokc_codec_decode(void *ctx, const int32_t *ids, size_t n, char **ret,
                             struct gpt_err *err)
{
    struct tokcache *tc = ctx;
    size_t len = 0;
    int rc = gpt_tok_decode(tc->tok, ids, n, NULL, 0, &len, err);
    if (rc < 0 && rc != -ENOSPC)
        return rc;
    unsigned char *raw = malloc(len + 1);
    char *out = malloc(3 * len + 1);
    if (!raw || !out) {
        free(raw);
        free(out);
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory for sampled text");
    }
    if ((rc = gpt_tok_decode(tc->tok, ids, n, (char *)raw, len + 1, &len, err)) < 0) {
        free(raw);
        free(out);
        return rc;
    }
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t k = tokc_utf8_len(raw + i, len - i);
        if (k == 0) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
            continue;
        }
        memcpy(out + o, raw + i, k);
        o += k;
        i += k;
    }
    out[o] = '\0';
    free(raw);
    *ret = out;
    return 0;
}

/* ---- life ---------------------------------------------------------------------- */

int tokcache_new(const struct tokcache_opts *o, struct tokcache **ret, struct gpt_err *err)
{
    GPT_ASSERT(o && o->vocab_dir && ret);
    struct tokcache *tc = calloc(1, sizeof(*tc));
    if (!tc)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    tc->o = *o;
    snprintf(tc->vocab_dir, sizeof(tc->vocab_dir), "%s", o->vocab_dir);
    snprintf(tc->cache_dir, sizeof(tc->cache_dir), "%s", o->cache_dir ? o->cache_dir : "");
    tc->o.vocab_dir = tc->vocab_dir;
    tc->o.cache_dir = tc->cache_dir;
    int rc = tokc_load_vocab(tc, err);
    if (rc < 0) {
        tokcache_free(tc);
        return rc;
    }
    tc->bpe = (struct gpt_data_bpe){.ctx = tc,
                                    .vocab_size = gpt_tok_vocab_size(tc->tok),
                                    .fingerprint = gpt_tok_fingerprint(tc->tok),
                                    .encode = tokc_encode};
    tc->codec = (struct gpt_sample_codec){.ctx = tc,
                                          .fingerprint = tc->bpe.fingerprint,
                                          .encode = tokc_codec_encode,
                                          .decode = tokc_codec_decode};
    *ret = tc;
    return 0;
}

void tokcache_free(struct tokcache *tc)
{
    if (!tc)
        return;
    gpt_tok_free(tc->tok);
    free(tc);
}

const struct gpt_data_bpe *tokcache_bpe(struct tokcache *tc)
{
    GPT_ASSERT(tc);
    return &tc->bpe;
}

const struct gpt_sample_codec *tokcache_codec(struct tokcache *tc)
{
    GPT_ASSERT(tc);
    return &tc->codec;
}

int tokcache_sample(const char *path, const char *vocab, const char *data_roots,
                    const char *prompt_ids, const struct gpt_sample_opts *o, char **ret_text,
                    struct gpt_err *err)
{
    struct gpt_sample_opts so = *o;
    struct tokcache *tc = NULL;
    int32_t *ids = NULL;
    int rc = 0;
    if (prompt_ids) {
        size_t n = 0;
        if (!(ids = calloc(GPT_PROMPT_IDS_MAX, sizeof(*ids))))
            return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        if ((rc = gpt_prompt_ids_parse(prompt_ids, strlen(prompt_ids), ids, GPT_PROMPT_IDS_MAX, &n,
                                       err)) < 0)
            goto out;
        so.prompt = NULL;
        so.prompt_ids = ids;
        so.n_prompt_ids = n;
    }
    if (vocab && vocab[0]) {
        struct tokcache_opts to = {.vocab_dir = vocab, .data_roots = data_roots, .threads = 1};
        if ((rc = tokcache_new(&to, &tc, err)) < 0)
            goto out;
        so.codec = tokcache_codec(tc);
    }
    rc = gpt_sample_snapshot(path, &so, ret_text, err);
out:
    tokcache_free(tc);
    free(ids);
    return rc;
}

void tokcache_user_dir(char *out, size_t cap)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int k;
    if (xdg && xdg[0] == '/')
        k = snprintf(out, cap, "%s/gptd/tokens", xdg);
    else if (home && home[0] == '/')
        k = snprintf(out, cap, "%s/.cache/gptd/tokens", home);
    else
        k = -1;
    if (k < 0 || (size_t)k >= cap)
        out[0] = '\0';
}
