/*
 * tokenize: `gptd tokenize --tokenizer gpt2 --vocab DIR [--val-fraction F]
 * [--val-split head|random [--seed N]] [--shard-tokens N] [--threads N]
 * -o PREFIX FILE...`, text files to llm.c
 * token shards that a `data.kind: shards` job trains on.
 *
 * Documents: each input FILE is one document, and every document starts
 * with <|endoftext|> (llm.c's fineweb.py convention), so documents are
 * separated by it. The text "<|endoftext|>" inside a file is ordinary text.
 *
 * Output: PREFIX_val_NNNNNN.bin then PREFIX_train_NNNNNN.bin, each at most
 * --shard-tokens tokens: llm.c's format (256 little-endian int32 header
 * words: magic 20240520, version 1, token count; then uint16 tokens). The
 * validation shards hold, with --val-split head (the default), the tokens
 * of the first F of the input bytes (cut at the first place at or after
 * that point where the text can be split without changing its tokens);
 * with --val-split random, whole documents drawn in an order shuffled by
 * --seed until they hold F of the input bytes (never every document).
 * F = 0 writes no validation shard. Each
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
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli_opt.h"
#include "data.h"
#include "gpt_atomic_file.h"
#include "monotime.h"
#include "tok.h"
#include "snapshot.h"
#include "tokenize.h"

#define TZ_CHUNK_BYTES      (1u << 20)
#define TZ_THREADS_MAX      256
#define TZ_FILES_MAX        100000
#define TZ_SHARDS_MAX       1000000 /* six-digit shard numbers */
#define TZ_SHARD_TOKENS_DEF 100000000
#define TZ_VAL_FRACTION_DEF 0.1
#define TZ_SEED_DEF         1

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
    /* Errors name the shard being written, not its temporary. */
    int rc = gpt_atomic_file_open(&w->f, final, prefix, 0644, &err);
    if (rc < 0) {
        fprintf(stderr, "gptd tokenize: cannot write %s: %s\n", final, strerror(-rc));
        return rc;
    }
    if (lseek(w->f.fd, GPT_SHARD_HEADER_BYTES, SEEK_SET) < 0) {
        rc = -errno;
        fprintf(stderr, "gptd tokenize: %s: %s\n", final, strerror(errno));
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

/* splitmix64: a seeded sequence that is the same on every machine, so a
 * --seed names one split everywhere (rand() differs between libcs). */
static uint64_t tz_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Marks val[f] for the documents of the random split: the files in an
 * order shuffled by `seed` (Fisher-Yates), taken while the taken bytes are
 * below the validation share, skipping any that would leave no training
 * document. */
static int tz_pick_val(const struct tz_file *files, int nf, double val_fraction, uint64_t seed,
                       unsigned char *val)
{
    int *order = malloc((size_t)nf * sizeof(*order));
    if (!order)
        return -ENOMEM;
    uint64_t total = 0, taken = 0, state = seed;
    for (int i = 0; i < nf; i++) {
        order[i] = i;
        total += files[i].len;
    }
    for (int i = nf - 1; i > 0; i--) {
        int j = (int)(tz_rand(&state) % (uint64_t)(i + 1));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    uint64_t want = (uint64_t)(val_fraction * (double)total);
    int left = nf; /* documents not yet taken */
    for (int i = 0; i < nf && taken < want; i++) {
        if (left == 1)
            break;
        val[order[i]] = 1;
        taken += files[order[i]].len;
        left--;
    }
    free(order);
    return 0;
}

/* The random split's plan: the validation documents, then the training
 * ones, each in input order and cut into chunks of about TZ_CHUNK_BYTES at
 * safe cuts (returns a new array in *ret). */
static int tz_plan_random(const struct tz_file *files, int nf, double val_fraction, uint64_t seed,
                          struct tz_chunk **ret, size_t *ret_n)
{
    struct tz_chunk *ch = NULL;
    size_t n = 0, cap = 0;
    unsigned char *val = calloc((size_t)nf, 1);
    int rc = val ? tz_pick_val(files, nf, val_fraction, seed, val) : -ENOMEM;
    for (int pass = 1; rc == 0 && pass >= 0; pass--) {
        for (int f = 0; rc == 0 && f < nf; f++) {
            if (val[f] != pass)
                continue;
            size_t pos = 0, len = files[f].len;
            for (int first = 1; rc == 0 && (first || pos < len); first = 0) {
                size_t want = pos + TZ_CHUNK_BYTES;
                size_t end = want >= len ? len : gpt_tok_safe_cut(files[f].base, len, want);
                struct tz_chunk c = {.text = files[f].base ? files[f].base + pos : NULL,
                                     .len = end - pos,
                                     .doc_start = pos == 0,
                                     .val = pass};
                rc = tz_chunk_add(&ch, &n, &cap, c);
                pos = end;
            }
        }
    }
    free(val);
    if (rc < 0) {
        free(ch);
        return rc;
    }
    *ret = ch;
    *ret_n = n;
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

/* What `gptd tokenize`'s command line says. */
struct tz_args {
    const char *tokenizer, *vocab, *prefix;
    double val_fraction;
    int val_random; /* --val-split random */
    int seed_set;   /* --seed given */
    uint64_t seed;
    uint64_t shard_tokens, threads;
    char **paths; /* the input files */
    int nf;
};

#define TZ_STR(x)  #x
#define TZ_XSTR(x) TZ_STR(x)
#define TZ_ARG(f)  offsetof(struct tz_args, f)
static const char *const tz_splits[] = {"head", "random", NULL};
static const struct cli_opt tz_opts[] = {
    {"tokenizer", 0, "NAME", CLI_OPT_STR, TZ_ARG(tokenizer), .required = 1,
     .help = "gpt2 (the only one)"},
    {"vocab", 0, "DIR", CLI_OPT_STR, TZ_ARG(vocab), .required = 1,
     .help = "encoder.json + vocab.bpe (or vocab.json + merges.txt)"},
    {"val-fraction", 0, "F", CLI_OPT_FRACTION, TZ_ARG(val_fraction),
     .help = "share of the input bytes for validation, 0 <= F < 1\n"
             "(default " TZ_XSTR(TZ_VAL_FRACTION_DEF) "; 0: no validation shard)"},
    {"val-split", 0, "head|random", CLI_OPT_CHOICE, TZ_ARG(val_random), .choices = tz_splits,
     .help = "which bytes: head (the default) takes the first F\n"
             "of the input, cut inside a document if need be, so\n"
             "a single FILE still gets a validation set; but the\n"
             "first FILEs in order may not be typical of the rest.\n"
             "random takes whole documents (FILEs) drawn by --seed\n"
             "until they hold F of the bytes, at least one left for\n"
             "training: an unbiased set when there are many FILEs"},
    {"seed", 0, "N", CLI_OPT_U64, TZ_ARG(seed), 0, UINT64_MAX,
     .help =
         "the random split's seed (default " TZ_XSTR(TZ_SEED_DEF) "); the same seed\n"
                                                                  "and FILEs give the same split"},
    {"shard-tokens", 0, "N", CLI_OPT_U64, TZ_ARG(shard_tokens), 1, INT32_MAX,
     .help = "tokens per shard (default " TZ_XSTR(TZ_SHARD_TOKENS_DEF) ")"},
    {"threads", 0, "N", CLI_OPT_U64, TZ_ARG(threads), 1, TZ_THREADS_MAX,
     .help = "encoding threads (default: every online CPU)"},
    {"output", 'o', "PREFIX", CLI_OPT_STR, TZ_ARG(prefix), .required = 1,
     .help = "output name prefix (may include a directory)"},
    {"help", 'h', NULL, CLI_OPT_HELP, .help = "this help"},
};

static const struct cli_cmd tz_cmd = {
    .prog = "gptd tokenize",
    .intro = "usage: gptd tokenize --tokenizer gpt2 --vocab DIR [options] -o PREFIX FILE...\n"
             "\n"
             "Encodes text files with GPT-2's tokenizer into llm.c token shards\n"
             "PREFIX_val_NNNNNN.bin and PREFIX_train_NNNNNN.bin. Each FILE is one document;\n"
             "every document starts with <|endoftext|>.\n",
    .opts = tz_opts,
    .n_opts = sizeof(tz_opts) / sizeof(tz_opts[0]),
};

/* Parses argv through tz_opts. -1 to go on, else the exit status. */
static int tz_parse_args(int argc, char **argv, struct tz_args *a)
{
    uint64_t given;
    int rc = cli_cmd_parse(&tz_cmd, argc, argv, a, &given);
    if (rc >= 0)
        return rc;
    a->seed_set = (given & cli_cmd_bit(&tz_cmd, "seed")) != 0;
    a->paths = argv + optind;
    a->nf = argc - optind;
    return -1;
}

/* The checks between options (all required, a known tokenizer, the file
 * count) and the default thread count. -1 to go on, else the exit status. */
static int tz_check_args(struct tz_args *a)
{
    if (a->nf < 1) {
        fprintf(stderr, "gptd tokenize: no input FILE\n");
        cli_cmd_help(&tz_cmd, stderr);
        return 2;
    }
    if (strcmp(a->tokenizer, "gpt2") != 0) {
        fprintf(stderr, "gptd tokenize: unknown --tokenizer '%s' (known: gpt2)\n", a->tokenizer);
        return 2;
    }
    if (a->seed_set && !a->val_random) {
        fprintf(stderr, "gptd tokenize: --seed chooses the --val-split random split; the head "
                        "split has nothing random\n");
        return 2;
    }
    if (a->nf > TZ_FILES_MAX) {
        fprintf(stderr, "gptd tokenize: %d input files (at most %d)\n", a->nf, TZ_FILES_MAX);
        return 2;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (a->threads == 0)
        a->threads = ncpu < 1 ? 1 : ncpu > TZ_THREADS_MAX ? TZ_THREADS_MAX : (uint64_t)ncpu;
    /* -o data/shards/d: the folder is made, as a user expects of an output. */
    const char *slash = strrchr(a->prefix, '/');
    if (slash && slash != a->prefix) {
        char dir[PATH_MAX];
        int rc = snprintf(dir, sizeof(dir), "%.*s", (int)(slash - a->prefix), a->prefix);
        if (rc > 0 && (size_t)rc < sizeof(dir) && (rc = gpt_mkdirs(dir, 0755)) < 0) {
            fprintf(stderr, "gptd tokenize: cannot create the output folder %s: %s\n", dir,
                    strerror(-rc));
            return 1;
        }
    }
    return -1;
}

/* One tokenize: what it holds from start to end (freed by tz_run_done). */
struct tz_run {
    const struct tz_args *a;
    struct gpt_tok *tok;
    struct tz_file *files;
    struct tz_chunk *chunks;
    size_t n_chunks;
    struct tz_writer wv, wt; /* the val and train shards */
    pthread_t *tids;
    uint64_t total_bytes;
};

/* Maps every input file read-only (regular files only). 0, or -1 after
 * printing why. */
static int tz_map_files(struct tz_run *r)
{
    for (int i = 0; i < r->a->nf; i++) {
        struct tz_file *f = &r->files[i];
        f->path = r->a->paths[i];
        int fd = open(f->path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0) {
            fprintf(stderr, "gptd tokenize: %s: %s\n", f->path, strerror(errno));
            if (fd >= 0)
                close(fd);
            return -1;
        }
        if (!S_ISREG(st.st_mode)) {
            fprintf(stderr, "gptd tokenize: %s: not a regular file\n", f->path);
            close(fd);
            return -1;
        }
        f->len = (size_t)st.st_size;
        if (f->len > 0) {
            void *m = mmap(NULL, f->len, PROT_READ, MAP_PRIVATE, fd, 0);
            if (m == MAP_FAILED) {
                fprintf(stderr, "gptd tokenize: %s: %s\n", f->path, strerror(errno));
                close(fd);
                return -1;
            }
            madvise(m, f->len, MADV_SEQUENTIAL);
            f->base = m;
        }
        close(fd);
        r->total_bytes += f->len;
    }
    return 0;
}

/* Encodes one round of chunks on up to `threads` threads (here when none
 * starts), then writes them in order. 0, or -1 after printing why. */
static int tz_round_run(struct tz_run *r, struct tz_chunk *chunks, size_t n, uint64_t *done)
{
    struct tz_round rd = {.tok = r->tok, .chunks = chunks, .n = n};
    atomic_init(&rd.next, 0);
    size_t nt = r->a->threads < n ? r->a->threads : n, started = 0;
    for (; started < nt; started++)
        if (pthread_create(&r->tids[started], NULL, tz_worker, &rd) != 0)
            break;
    if (started == 0)
        tz_worker(&rd); /* no thread could start: encode here */
    for (size_t i = 0; i < started; i++)
        pthread_join(r->tids[i], NULL);
    for (size_t i = 0; i < n; i++) {
        struct tz_chunk *ch = &chunks[i];
        if (ch->rc < 0) {
            fprintf(stderr, "gptd tokenize: %s\n", ch->err.msg);
            return -1;
        }
        struct tz_writer *w = ch->val ? &r->wv : &r->wt;
        if (!ch->val && r->wv.f.fd >= 0 && tz_writer_close(&r->wv) < 0)
            return -1;
        if (tz_writer_put(w, ch->ids.v, ch->ids.n) < 0)
            return -1;
        *done += ch->len;
        gpt_tok_ids_done(&ch->ids);
    }
    return 0;
}

/* Encodes every chunk, rounds of 4 per thread, with a progress line on a
 * TTY. 0, or -1 after printing why. */
static int tz_encode_all(struct tz_run *r, double t0)
{
    int tty = isatty(STDERR_FILENO);
    double last_print = 0;
    uint64_t bytes_done = 0;
    size_t per_round = 4 * (size_t)r->a->threads;
    for (size_t first = 0; first < r->n_chunks; first += per_round) {
        size_t n = r->n_chunks - first < per_round ? r->n_chunks - first : per_round;
        if (tz_round_run(r, r->chunks + first, n, &bytes_done) < 0)
            return -1;
        double now = monotime_s();
        if (tty && (now - last_print > 0.2 || first + per_round >= r->n_chunks)) {
            last_print = now;
            fprintf(stderr, "\rtokenize: %.1f / %.1f MB (%3.0f%%), %llu tokens, %.1f MB/s  ",
                    (double)bytes_done / 1e6, (double)r->total_bytes / 1e6,
                    r->total_bytes ? 100.0 * (double)bytes_done / (double)r->total_bytes : 100.0,
                    (unsigned long long)(r->wv.total + r->wt.total),
                    (double)bytes_done / 1e6 / (now - t0 > 1e-9 ? now - t0 : 1e-9));
        }
    }
    if (tty)
        fputc('\n', stderr);
    return 0;
}

/* The summary line of a finished tokenize. */
static void tz_report(const struct tz_run *r, double t0)
{
    const struct tz_writer *wv = &r->wv, *wt = &r->wt;
    int nf = r->a->nf;
    printf("tokenize: %d file%s, %llu bytes -> %llu tokens: %s_train_*.bin (%d shard%s, %llu "
           "tokens)",
           nf, nf == 1 ? "" : "s", (unsigned long long)r->total_bytes,
           (unsigned long long)(wv->total + wt->total), r->a->prefix, wt->index,
           wt->index == 1 ? "" : "s", (unsigned long long)wt->total);
    if (wv->index > 0)
        printf(", %s_val_*.bin (%d shard%s, %llu tokens)", r->a->prefix, wv->index,
               wv->index == 1 ? "" : "s", (unsigned long long)wv->total);
    printf(", %.2f s\n", monotime_s() - t0);
}

/* Loads the vocabulary, maps and plans the files, encodes and writes the
 * shards. 0, or -1 after printing why. */
static int tz_run_all(struct tz_run *r)
{
    struct gpt_err err = {0};
    const struct tz_args *a = r->a;
    if (!r->files || !r->tids) {
        fprintf(stderr, "gptd tokenize: out of memory\n");
        return -1;
    }
    if (gpt_tok_load(a->vocab, &r->tok, &err) < 0) {
        fprintf(stderr, "gptd tokenize: --vocab: %s\n", err.msg);
        return -1;
    }
    if (gpt_tok_vocab_size(r->tok) > GPT_SHARD_VOCAB) {
        fprintf(stderr,
                "gptd tokenize: --vocab: %d tokens; llm.c shards hold ids below %d (uint16)\n",
                gpt_tok_vocab_size(r->tok), GPT_SHARD_VOCAB);
        return -1;
    }
    if (tz_map_files(r) < 0)
        return -1;
    if ((a->val_random
             ? tz_plan_random(r->files, a->nf, a->val_fraction, a->seed, &r->chunks, &r->n_chunks)
             : tz_plan(r->files, a->nf, a->val_fraction, &r->chunks, &r->n_chunks)) < 0) {
        fprintf(stderr, "gptd tokenize: out of memory\n");
        return -1;
    }
    tz_tmp_names[0] = r->wv.f.tmp;
    tz_tmp_names[1] = r->wt.f.tmp;
    signal(SIGINT, tz_on_signal);
    signal(SIGTERM, tz_on_signal);
    double t0 = monotime_s();
    if (tz_encode_all(r, t0) < 0 || tz_writer_close(&r->wv) < 0 || tz_writer_close(&r->wt) < 0)
        return -1;
    if (r->wt.total == 0) {
        fprintf(stderr, "gptd tokenize: every token went to validation; lower --val-fraction\n");
        return -1;
    }
    tz_warn_stale(&r->wv);
    tz_warn_stale(&r->wt);
    tz_report(r, t0);
    return 0;
}

static void tz_run_done(struct tz_run *r)
{
    gpt_atomic_file_abort(&r->wv.f);
    gpt_atomic_file_abort(&r->wt.f);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    tz_tmp_names[0] = tz_tmp_names[1] = NULL;
    for (size_t i = 0; i < r->n_chunks; i++)
        gpt_tok_ids_done(&r->chunks[i].ids);
    free(r->chunks);
    for (int i = 0; r->files && i < r->a->nf; i++)
        if (r->files[i].base)
            munmap((void *)r->files[i].base, r->files[i].len);
    free(r->files);
    free(r->tids);
    gpt_tok_free(r->tok);
}

int gptd_tokenize_main(int argc, char **argv)
{
    struct tz_args a = {.val_fraction = TZ_VAL_FRACTION_DEF,
                        .seed = TZ_SEED_DEF,
                        .shard_tokens = TZ_SHARD_TOKENS_DEF};
    int rc = tz_parse_args(argc, argv, &a);
    if (rc < 0)
        rc = tz_check_args(&a);
    if (rc >= 0)
        return rc;
    struct tz_run r = {
        .a = &a,
        .files = calloc((size_t)a.nf, sizeof(*r.files)),
        .wv = {.prefix = a.prefix, .split = "val", .cap = a.shard_tokens, .f.fd = -1},
        .wt = {.prefix = a.prefix, .split = "train", .cap = a.shard_tokens, .f.fd = -1},
        .tids = calloc(a.threads, sizeof(*r.tids)),
    };
    rc = tz_run_all(&r) < 0 ? 1 : 0;
    tz_run_done(&r);
    return rc;
}
