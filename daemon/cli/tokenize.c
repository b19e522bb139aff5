/*
 * tokenize: `gptd tokenize --tokenizer gpt2 --vocab DIR [--val-fraction F]
 * [--shard-tokens N] [--threads N] -o PREFIX FILE...`, text files to llm.c
 * token shards that a `data.kind: shards` job trains on.
 *
 * Documents: each input FILE is one document, and every document starts
 * with <|endoftext|> (llm.c's fineweb.py convention), so documents are
 * separated by it. The text "<|endoftext|>" inside a file is ordinary text.
 *
 * Output: PREFIX_val_NNNNNN.bin then PREFIX_train_NNNNNN.bin, each at most
 * --shard-tokens tokens: llm.c's format (256 little-endian int32 header
 * words: magic 20240520, version 1, token count; then uint16 tokens). The
 * validation shards hold the tokens of the first F of the input bytes (cut
 * at the first place at or after that point where the text can be split
 * without changing its tokens); F = 0 writes no validation shard. Each
 * shard is written to a temporary name and renamed when complete, so a
 * shard glob never sees a partial file.
 *
 * Threads: the main thread cuts the files into chunks of about 1 MiB at
 * gpt_tok_safe_cut points, encoding threads (one gpt_tok_enc each) take
 * the chunks of one round from an atomic counter, and the main thread
 * writes the round's tokens in chunk order, so the output does not depend
 * on the thread count.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <glob.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data.h"
#include "gpt_atomic_file.h"
#include "monotime.h"
#include "tok.h"
#include "tokenize.h"

#define TZ_CHUNK_BYTES      (1u << 20)
#define TZ_THREADS_MAX      256
#define TZ_FILES_MAX        100000
#define TZ_SHARDS_MAX       1000000 /* six-digit shard numbers */
#define TZ_SHARD_TOKENS_DEF 100000000
#define TZ_VAL_FRACTION_DEF 0.1

struct tz_file {
    const char *path;
    const unsigned char *base; /* mmap'd, NULL for an empty file */
    size_t len;
};

struct tz_chunk {
    const unsigned char *text;
    size_t len;
    int doc_start; /* emit <|endoftext|> first */
    int val;
    struct gpt_tok_ids ids; /* filled by a worker */
    int rc;
    struct gpt_err err;
};

/* One round: workers claim chunks [0, n) with `next`. */
struct tz_round {
    const struct gpt_tok *tok;
    struct tz_chunk *chunks;
    size_t n;
    atomic_size_t next;
};

/* The shards of one split being written. */
struct tz_writer {
    const char *prefix, *split;
    uint64_t cap;   /* tokens per shard */
    int index;      /* of the shard being written */
    uint64_t count; /* tokens in the open shard */
    uint64_t total;
    struct gpt_atomic_file f; /* f.fd is -1 when no shard is open */
    uint16_t buf[32768];
    size_t nbuf;
};

/* The writers' temporary names, for the SIGINT/SIGTERM handler to unlink
 * before the default action ends the process (a best effort: a name is
 * written before its file exists and cleared after the rename). */
static char *volatile tz_tmp_names[2];

static void tz_on_signal(int sig)
{
    for (int i = 0; i < 2; i++)
        if (tz_tmp_names[i] && tz_tmp_names[i][0])
            unlink(tz_tmp_names[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gptd tokenize --tokenizer gpt2 --vocab DIR [options] -o PREFIX FILE...\n"
            "\n"
            "Encodes text files with GPT-2's tokenizer into llm.c token shards\n"
            "PREFIX_val_NNNNNN.bin and PREFIX_train_NNNNNN.bin. Each FILE is one document;\n"
            "every document starts with <|endoftext|>.\n"
            "\n"
            "options:\n"
            "  --tokenizer NAME       gpt2 (the only one)\n"
            "  --vocab DIR            encoder.json + vocab.bpe (or vocab.json + merges.txt)\n"
            "  --val-fraction F       share of the input bytes for validation, 0 <= F < 1\n"
            "                         (default %.1f; 0: no validation shard)\n"
            "  --shard-tokens N       tokens per shard (default %d)\n"
            "  --threads N            encoding threads (default: every online CPU)\n"
            "  -o, --output PREFIX    output name prefix (may include a directory)\n",
            TZ_VAL_FRACTION_DEF, TZ_SHARD_TOKENS_DEF);
}

static int tz_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *ret)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi)
        return -1;
    *ret = v;
    return 0;
}

static int tz_writer_flush(struct tz_writer *w)
{
    int rc = gpt_atomic_file_write(&w->f, w->buf, w->nbuf * sizeof(uint16_t), NULL);
    w->nbuf = 0;
    return rc;
}

/* -ENAMETOOLONG when the name does not fit cap. */
static int tz_final_name(const struct tz_writer *w, int index, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s_%s_%06d.bin", w->prefix, w->split, index);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* Writes the header, syncs and renames the open shard into place. */
static int tz_writer_close(struct tz_writer *w)
{
    if (w->f.fd < 0)
        return 0;
    struct gpt_err err;
    int rc = tz_writer_flush(w);
    int32_t hdr[256] = {0};
    hdr[0] = (int32_t)htole32(GPT_SHARD_MAGIC);
    hdr[1] = (int32_t)htole32(GPT_SHARD_VERSION);
    hdr[2] = (int32_t)htole32((uint32_t)w->count);
    if (rc == 0 && pwrite(w->f.fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr))
        rc = errno ? -errno : -EIO;
    if (rc == 0 && (rc = gpt_atomic_file_commit(&w->f, &err)) < 0)
        fprintf(stderr, "gptd tokenize: %s\n", err.msg);
    else if (rc < 0)
        fprintf(stderr, "gptd tokenize: %s: %s\n", w->f.path, strerror(-rc));
    gpt_atomic_file_abort(&w->f);
    w->index++;
    w->count = 0;
    return rc;
}

static int tz_writer_open(struct tz_writer *w)
{
    char final[PATH_MAX], prefix[NAME_MAX];
    struct gpt_err err;
    if (w->index >= TZ_SHARDS_MAX) {
        fprintf(stderr, "gptd tokenize: more than %d %s shards; raise --shard-tokens\n",
                TZ_SHARDS_MAX, w->split);
        return -EFBIG;
    }
    const char *slash;
    if (tz_final_name(w, w->index, final, sizeof(final)) < 0 ||
        snprintf(prefix, sizeof(prefix), "%s.tmp",
                 (slash = strrchr(final, '/')) ? slash + 1 : final) >= (int)sizeof(prefix)) {
        fprintf(stderr, "gptd tokenize: output prefix too long\n");
        return -ENAMETOOLONG;
    }
    int rc = gpt_atomic_file_open(&w->f, final, prefix, 0644, &err);
    if (rc < 0) {
        fprintf(stderr, "gptd tokenize: %s\n", err.msg);
        return rc;
    }
    if (lseek(w->f.fd, GPT_SHARD_HEADER_BYTES, SEEK_SET) < 0) {
        rc = -errno;
        fprintf(stderr, "gptd tokenize: %s: %s\n", w->f.tmp, strerror(errno));
        gpt_atomic_file_abort(&w->f);
        return rc;
    }
    return 0;
}

static int tz_writer_put(struct tz_writer *w, const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (w->f.fd < 0) {
            int rc = tz_writer_open(w);
            if (rc < 0)
                return rc;
        }
        w->buf[w->nbuf++] = htole16((uint16_t)ids[i]);
        w->count++;
        w->total++;
        if (w->nbuf == sizeof(w->buf) / sizeof(w->buf[0])) {
            int rc = tz_writer_flush(w);
            if (rc < 0) {
                fprintf(stderr, "gptd tokenize: %s: %s\n", w->f.tmp, strerror(-rc));
                return rc;
            }
        }
        if (w->count == w->cap) {
            int rc = tz_writer_close(w);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* Warns about shards of an earlier run that the new ones did not replace
 * (they would match the same glob). */
static void tz_warn_stale(const struct tz_writer *w)
{
    char pat[PATH_MAX + 32];
    snprintf(pat, sizeof(pat), "%s_%s_*.bin", w->prefix, w->split);
    glob_t g;
    if (glob(pat, 0, NULL, &g) != 0)
        return;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *u = strrchr(g.gl_pathv[i], '_');
        int idx = u ? atoi(u + 1) : -1;
        if (idx >= w->index)
            fprintf(stderr,
                    "gptd tokenize: warning: %s is from an earlier run and matches the same "
                    "glob; remove it\n",
                    g.gl_pathv[i]);
    }
    globfree(&g);
}

static void *tz_worker(void *arg)
{
    struct tz_round *r = arg;
    struct gpt_tok_enc *e = NULL;
    struct gpt_err err = {0};
    int rc = gpt_tok_enc_new(r->tok, &e, &err);
    for (;;) {
        size_t i = atomic_fetch_add(&r->next, 1);
        if (i >= r->n)
            break;
        struct tz_chunk *c = &r->chunks[i];
        if (rc < 0) {
            c->rc = rc;
            c->err = err;
            continue;
        }
        c->ids.n = 0;
        if (c->doc_start) {
            int32_t eot = gpt_tok_eot(r->tok);
            c->rc = gpt_tok_encode(e, GPT_TOK_EOT_TEXT, strlen(GPT_TOK_EOT_TEXT),
                                   GPT_TOK_ALLOW_SPECIAL, &c->ids, &c->err);
            if (c->rc == 0 && (c->ids.n != 1 || c->ids.v[0] != eot))
                c->rc = gpt_err_set(&c->err, -EINVAL, NULL, "<|endoftext|> does not encode");
        }
        if (c->rc == 0)
            c->rc = gpt_tok_encode(e, c->text, c->len, 0, &c->ids, &c->err);
    }
    gpt_tok_enc_free(e);
    return NULL;
}

/* Appends one chunk to *ch (capacity *cap). */
static int tz_chunk_add(struct tz_chunk **ch, size_t *n, size_t *cap, struct tz_chunk c)
{
    if (*n == *cap) {
        size_t nc = *cap ? 2 * *cap : 64;
        struct tz_chunk *c2 = realloc(*ch, nc * sizeof(*c2));
        if (!c2)
            return -ENOMEM;
        *ch = c2;
        *cap = nc;
    }
    (*ch)[(*n)++] = c;
    return 0;
}

/* Cuts every file into chunks of about TZ_CHUNK_BYTES at safe cuts, and
 * once at the first safe cut at or after the validation share of the
 * input bytes (returns a new array in *ret). */
static int tz_plan(const struct tz_file *files, int nf, double val_fraction, struct tz_chunk **ret,
                   size_t *ret_n)
{
    uint64_t total = 0;
    for (int i = 0; i < nf; i++)
        total += files[i].len;
    uint64_t val_bytes = (uint64_t)(val_fraction * (double)total);
    struct tz_chunk *ch = NULL;
    size_t n = 0, cap = 0;
    uint64_t done = 0; /* input bytes of the files before this one */
    int in_val = val_fraction > 0;
    for (int f = 0; f < nf; f++) {
        size_t pos = 0, len = files[f].len;
        for (int first = 1; first || pos < len;) {
            size_t want = pos + TZ_CHUNK_BYTES;
            int cut_val = 0;
            if (in_val) {
                uint64_t at = val_bytes > done ? val_bytes - done : 0;
                if (at <= want) {
                    want = at < pos ? pos : (size_t)at;
                    cut_val = 1;
                }
            }
            if (cut_val && want == pos) { /* pos is a cut already */
                in_val = 0;
                continue;
            }
            size_t end = want >= len ? len : gpt_tok_safe_cut(files[f].base, len, want);
            struct tz_chunk c = {.text = files[f].base ? files[f].base + pos : NULL,
                                 .len = end - pos,
                                 .doc_start = pos == 0,
                                 .val = in_val};
            if (tz_chunk_add(&ch, &n, &cap, c) < 0) {
                free(ch);
                return -ENOMEM;
            }
            if (cut_val)
                in_val = 0;
            pos = end;
            first = 0;
        }
        done += len;
    }
    *ret = ch;
    *ret_n = n;
    return 0;
}

int gptd_tokenize_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"tokenizer", required_argument, NULL, 't'},
        {"vocab", required_argument, NULL, 'v'},
        {"val-fraction", required_argument, NULL, 'f'},
        {"shard-tokens", required_argument, NULL, 's'},
        {"threads", required_argument, NULL, 'j'},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *tokenizer = NULL, *vocab = NULL, *prefix = NULL;
    double val_fraction = TZ_VAL_FRACTION_DEF;
    uint64_t shard_tokens = TZ_SHARD_TOKENS_DEF, threads = 0;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 't':
            tokenizer = optarg;
            break;
        case 'v':
            vocab = optarg;
            break;
        case 'o':
            prefix = optarg;
            break;
        case 'f':
            errno = 0;
            val_fraction = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(val_fraction >= 0 && val_fraction < 1)) {
                fprintf(stderr, "gptd tokenize: --val-fraction must be in [0, 1), got '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case 's':
            if (tz_parse_u64(optarg, 1, INT32_MAX, &shard_tokens) < 0) {
                fprintf(stderr, "gptd tokenize: --shard-tokens must be in [1, %d], got '%s'\n",
                        INT32_MAX, optarg);
                return 2;
            }
            break;
        case 'j':
            if (tz_parse_u64(optarg, 1, TZ_THREADS_MAX, &threads) < 0) {
                fprintf(stderr, "gptd tokenize: --threads must be in [1, %d], got '%s'\n",
                        TZ_THREADS_MAX, optarg);
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    int nf = argc - optind;
    if (!tokenizer || !vocab || !prefix || nf < 1) {
        fprintf(stderr, "gptd tokenize: %s\n",
                !tokenizer ? "--tokenizer is required"
                : !vocab   ? "--vocab is required"
                : !prefix  ? "-o PREFIX is required"
                           : "no input FILE");
        usage(stderr);
        return 2;
    }
    if (strcmp(tokenizer, "gpt2") != 0) {
        fprintf(stderr, "gptd tokenize: unknown --tokenizer '%s' (known: gpt2)\n", tokenizer);
        return 2;
    }
    if (nf > TZ_FILES_MAX) {
        fprintf(stderr, "gptd tokenize: %d input files (at most %d)\n", nf, TZ_FILES_MAX);
        return 2;
    }
    if (threads == 0)
        threads = ncpu < 1 ? 1 : ncpu > TZ_THREADS_MAX ? TZ_THREADS_MAX : (uint64_t)ncpu;

    struct gpt_err err = {0};
    struct gpt_tok *tok = NULL;
    struct tz_file *files = calloc((size_t)nf, sizeof(*files));
    struct tz_chunk *chunks = NULL;
    size_t n_chunks = 0;
    struct tz_writer wv = {.prefix = prefix, .split = "val", .cap = shard_tokens, .f.fd = -1};
    struct tz_writer wt = {.prefix = prefix, .split = "train", .cap = shard_tokens, .f.fd = -1};
    pthread_t *tids = calloc(threads, sizeof(*tids));
    int status = 1;
    if (!files || !tids) {
        fprintf(stderr, "gptd tokenize: out of memory\n");
        goto out;
    }
    if (gpt_tok_load(vocab, &tok, &err) < 0) {
        fprintf(stderr, "gptd tokenize: --vocab: %s\n", err.msg);
        goto out;
    }
    if (gpt_tok_vocab_size(tok) > GPT_SHARD_VOCAB) {
        fprintf(stderr,
                "gptd tokenize: --vocab: %d tokens; llm.c shards hold ids below %d (uint16)\n",
                gpt_tok_vocab_size(tok), GPT_SHARD_VOCAB);
        goto out;
    }
    uint64_t total_bytes = 0;
    for (int i = 0; i < nf; i++) {
        struct tz_file *f = &files[i];
        f->path = argv[optind + i];
        int fd = open(f->path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0) {
            fprintf(stderr, "gptd tokenize: %s: %s\n", f->path, strerror(errno));
            if (fd >= 0)
                close(fd);
            goto out;
        }
        if (!S_ISREG(st.st_mode)) {
            fprintf(stderr, "gptd tokenize: %s: not a regular file\n", f->path);
            close(fd);
            goto out;
        }
        f->len = (size_t)st.st_size;
        if (f->len > 0) {
            void *m = mmap(NULL, f->len, PROT_READ, MAP_PRIVATE, fd, 0);
            if (m == MAP_FAILED) {
                fprintf(stderr, "gptd tokenize: %s: %s\n", f->path, strerror(errno));
                close(fd);
                goto out;
            }
            madvise(m, f->len, MADV_SEQUENTIAL);
            f->base = m;
        }
        close(fd);
        total_bytes += f->len;
    }
    if (tz_plan(files, nf, val_fraction, &chunks, &n_chunks) < 0) {
        fprintf(stderr, "gptd tokenize: out of memory\n");
        goto out;
    }

    tz_tmp_names[0] = wv.f.tmp;
    tz_tmp_names[1] = wt.f.tmp;
    signal(SIGINT, tz_on_signal);
    signal(SIGTERM, tz_on_signal);
    int tty = isatty(STDERR_FILENO);
    double t0 = monotime_s(), last_print = 0;
    uint64_t bytes_done = 0;
    size_t per_round = 4 * (size_t)threads;
    for (size_t first = 0; first < n_chunks; first += per_round) {
        struct tz_round r = {.tok = tok, .chunks = chunks + first};
        r.n = n_chunks - first < per_round ? n_chunks - first : per_round;
        atomic_init(&r.next, 0);
        size_t nt = threads < r.n ? threads : r.n, started = 0;
        for (; started < nt; started++)
            if (pthread_create(&tids[started], NULL, tz_worker, &r) != 0)
                break;
        if (started == 0)
            tz_worker(&r); /* no thread could start: encode here */
        for (size_t i = 0; i < started; i++)
            pthread_join(tids[i], NULL);
        for (size_t i = 0; i < r.n; i++) {
            struct tz_chunk *ch = &r.chunks[i];
            if (ch->rc < 0) {
                fprintf(stderr, "gptd tokenize: %s\n", ch->err.msg);
                goto out;
            }
            struct tz_writer *w = ch->val ? &wv : &wt;
            if (!ch->val && wv.f.fd >= 0 && tz_writer_close(&wv) < 0)
                goto out;
            if (tz_writer_put(w, ch->ids.v, ch->ids.n) < 0)
                goto out;
            bytes_done += ch->len;
            gpt_tok_ids_done(&ch->ids);
        }
        double now = monotime_s();
        if (tty && (now - last_print > 0.2 || first + per_round >= n_chunks)) {
            last_print = now;
            fprintf(stderr, "\rtokenize: %.1f / %.1f MB (%3.0f%%), %llu tokens, %.1f MB/s  ",
                    (double)bytes_done / 1e6, (double)total_bytes / 1e6,
                    total_bytes ? 100.0 * (double)bytes_done / (double)total_bytes : 100.0,
                    (unsigned long long)(wv.total + wt.total),
                    (double)bytes_done / 1e6 / (now - t0 > 1e-9 ? now - t0 : 1e-9));
        }
    }
    if (tty)
        fputc('\n', stderr);
    if (tz_writer_close(&wv) < 0 || tz_writer_close(&wt) < 0)
        goto out;
    if (wt.total == 0) {
        fprintf(stderr, "gptd tokenize: every token went to validation; lower --val-fraction\n");
        goto out;
    }
    tz_warn_stale(&wv);
    tz_warn_stale(&wt);
    printf("tokenize: %d file%s, %llu bytes -> %llu tokens: %s_train_*.bin (%d shard%s, %llu "
           "tokens)",
           nf, nf == 1 ? "" : "s", (unsigned long long)total_bytes,
           (unsigned long long)(wv.total + wt.total), prefix, wt.index, wt.index == 1 ? "" : "s",
           (unsigned long long)wt.total);
    if (wv.index > 0)
        printf(", %s_val_*.bin (%d shard%s, %llu tokens)", prefix, wv.index,
               wv.index == 1 ? "" : "s", (unsigned long long)wv.total);
    printf(", %.2f s\n", monotime_s() - t0);
    status = 0;
out:
    gpt_atomic_file_abort(&wv.f);
    gpt_atomic_file_abort(&wt.f);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    tz_tmp_names[0] = tz_tmp_names[1] = NULL;
    for (size_t i = 0; i < n_chunks; i++)
        gpt_tok_ids_done(&chunks[i].ids);
    free(chunks);
    for (int i = 0; files && i < nf; i++)
        if (files[i].base)
            munmap((void *)files[i].base, files[i].len);
    free(files);
    free(tids);
    gpt_tok_free(tok);
    return status;
}
