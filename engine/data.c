/*
 * data: opening text files, llm.c token shards and synthetic tasks, the
 * stateless epoch shuffle and the batch readers.
 *
 * A dataset owns its open files and segment tables; after
 * gpt_dataset_open returns it is never written again, so the batch
 * readers may run on any number of worker threads at once. Token files are
 * read with pread, window by window, never mapped: the files belong to
 * users, who may truncate, grow or replace them while a job trains, and a
 * mapped page past a file's new end raises SIGBUS, which would kill the
 * daemon and every job in it. A read that comes up short fails that batch
 * with the file's name instead. Text tokens go through a byte -> token
 * table, shard tokens are read as little-endian uint16. The tokenizer
 * lives in data_vocab.c.
 */
#include "data.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "monotime.h"
#include "rng.h"

#define DATA_FEISTEL_ROUNDS 6
#define DATA_SHUFFLE_SALT   0x73687566666c6531ull /* keys the epoch shuffle */
#define DATA_HOLDOUT_KEY    0x6164646974696f6eull /* keys the synthetic val/train split */
#define DATA_HOLDOUT_MAX    1000                  /* held-out problems at most */

/* One token file, kept open for the job's reads; or, for BPE-encoded
 * text, the ids in memory. */
struct data_file {
    int fd;                   /* -1 when the tokens are in mem */
    const unsigned char *mem; /* BPE ids (owned by ds->bpe_ids), or NULL */
    uint64_t len;             /* bytes when opened (ids * 2 for mem) */
    dev_t dev;
    ino_t ino;
    char *name;            /* the file's name as the spec gave it (owned) */
    const char *json_path; /* "data.path" or "data.val_path" */
};

/* A run of consecutive tokens, cut into windows of T+1 every `stride`. */
struct data_seg {
    const struct data_file *file;
    uint64_t offset; /* byte offset of the first token in file */
    uint64_t n_tokens;
    uint64_t first_sample; /* samples in the segments before this one */
    uint64_t n_samples;
};

struct data_split {
    struct data_seg *segs;
    size_t n_segs;
    uint64_t stride;
    uint64_t n_samples;
};

struct gpt_dataset {
    int kind; /* enum gpt_data_kind */
    struct gpt_vocab vocab;
    size_t T;
    uint64_t seed;
    int width;              /* bytes per token in the files: 1 text, 2 shards */
    unsigned char lut[256]; /* text: byte -> token */
    struct data_file *files;
    size_t n_files;
    struct data_split train, val;
    /* synthetic addition */
    int digits;
    uint64_t pow10; /* 10^digits */
    uint64_t n_problems, n_holdout;
    const struct gpt_data_policy *policy; /* borrowed during open only */
    uint16_t *bpe_ids[2]; /* gpt2 text: the ids of data.path and data.val_path (owned) */
    char note[512];       /* what the BPE encoder said (gpt_dataset_note) */
};

/* ---- the stateless shuffle ---------------------------------------------- */

/*
 * A bijection on [0, n) keyed by `key`: a balanced Feistel network on the
 * smallest even number of bits that covers n, with cycle walking to stay
 * inside [0, n). Walking ends because x's cycle in the larger domain
 * returns to x < n; the domain is under 4n, so few steps are expected.
 */
static uint64_t data_perm(uint64_t key, uint64_t n, uint64_t x)
{
    if (n <= 1)
        return 0;
    int bits = 64 - __builtin_clzll(n - 1);
    int h = (bits + 1) / 2;
    uint64_t mask = h >= 32 ? 0xffffffffull : (1ull << h) - 1;
    do {
        uint64_t l = x >> h, r = x & mask;
        for (int i = 0; i < DATA_FEISTEL_ROUNDS; i++) {
            uint64_t t = l ^ (gpt_hash3(key, (uint64_t)i, r) & mask);
            l = r;
            r = t;
        }
        x = (l << h) | r;
    } while (x >= n);
    return x;
}

/* Sample id of global sample `g` after the cursor. */
static uint64_t data_train_index(const struct gpt_dataset *ds, const struct gpt_data_cursor *cur,
                                 uint64_t g)
{
    uint64_t n = ds->train.n_samples;
    uint64_t a = cur->position % n + g % n;
    uint64_t epoch = cur->epoch + cur->position / n + g / n + a / n;
    uint64_t key = gpt_hash3(cur->seed, epoch, DATA_SHUFFLE_SALT);
    return data_perm(key, n, a % n);
}

void gpt_data_cursor_init(const struct gpt_dataset *ds, struct gpt_data_cursor *ret_cur)
{
    GPT_ASSERT(ds && ret_cur);
    ret_cur->epoch = 0;
    ret_cur->position = 0;
    ret_cur->seed = ds->seed;
}

void gpt_data_cursor_advance(const struct gpt_dataset *ds, struct gpt_data_cursor *cur, uint64_t n)
{
    GPT_ASSERT(ds && cur);
    uint64_t N = ds->train.n_samples;
    uint64_t a = cur->position % N + n % N;
    cur->epoch += cur->position / N + n / N + a / N;
    cur->position = a % N;
}

void gpt_data_rank_range(uint64_t global, int world, int rank, uint64_t *ret_first,
                         uint64_t *ret_count)
{
    GPT_ASSERT(world > 0 && rank >= 0 && rank < world && ret_first && ret_count);
    uint64_t w = (uint64_t)world, r = (uint64_t)rank;
    uint64_t q = global / w, rem = global % w;
    *ret_first = r * q + (r < rem ? r : rem);
    *ret_count = q + (r < rem ? 1 : 0);
}

/* ---- token windows -------------------------------------------------------- */

static void data_split_finish(struct data_split *sp, size_t T)
{
    uint64_t total = 0;
    for (size_t i = 0; i < sp->n_segs; i++) {
        struct data_seg *s = &sp->segs[i];
        s->first_sample = total;
        s->n_samples = s->n_tokens >= T + 1 ? (s->n_tokens - T - 1) / sp->stride + 1 : 0;
        total += s->n_samples;
    }
    sp->n_samples = total;
}

/* Reads n bytes at byte `off` of f into dst. A file that ends early was
 * truncated (or replaced in place) after the job opened it: that is the
 * job's data error, named, never a fault. */
static int data_read(const struct data_file *f, uint64_t off, void *dst, size_t n,
                     struct gpt_err *err)
{
    GPT_ASSERT(off <= f->len && n <= f->len - off);
    if (f->mem) {
        memcpy(dst, f->mem + off, n);
        return 0;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(f->fd, (unsigned char *)dst + done, n - done, (off_t)(off + done));
        if (r > 0) {
            done += (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            return gpt_err_set(err, -e, f->json_path, "%s: %s: read: %s", f->json_path, f->name,
                               strerror(e));
        }
        struct stat st;
        long long now = fstat(f->fd, &st) == 0 ? (long long)st.st_size : -1;
        return gpt_err_set(err, -GPT_E_DATA, f->json_path,
                           "%s: %s shrank to %lld bytes while the job read it (it held %llu when "
                           "the job started); a job's data files must not change until it ends",
                           f->json_path, f->name, now, (unsigned long long)f->len);
    }
    return 0;
}

/* Copies window k of a split into (T) inputs and targets. The window's
 * (T + 1) raw tokens are read into `targets` first, as scratch: they take
 * at most 2 (T + 1) bytes of its 4 T. */
static int data_window(const struct gpt_dataset *ds, const struct data_split *sp, uint64_t k,
                       int *inputs, int *targets, struct gpt_err *err)
{
    size_t lo = 0, hi = sp->n_segs;
    while (hi - lo > 1) { /* last segment with first_sample <= k */
        size_t mid = lo + (hi - lo) / 2;
        if (sp->segs[mid].first_sample <= k)
            lo = mid;
        else
            hi = mid;
    }
    const struct data_seg *s = &sp->segs[lo];
    GPT_ASSERT(k >= s->first_sample && k - s->first_sample < s->n_samples);
    uint64_t start = (k - s->first_sample) * sp->stride;
    size_t T = ds->T, w = (size_t)ds->width;
    unsigned char *raw = (unsigned char *)targets;
    GPT_ASSERT((T + 1) * w <= T * sizeof(*targets));
    int rc = data_read(s->file, s->offset + start * w, raw, (T + 1) * w, err);
    if (rc < 0)
        return rc;
    int last = 0;
    if (w == 1) {
        for (size_t t = 0; t < T; t++)
            inputs[t] = ds->lut[raw[t]];
        last = ds->lut[raw[T]];
    } else {
        for (size_t t = 0; t <= T; t++) {
            int tok = raw[2 * t] | raw[2 * t + 1] << 8;
            if (tok >= ds->vocab.size)
                return gpt_err_set(err, -GPT_E_DATA, s->file->json_path,
                                   "%s: %s: token %d at byte %llu is outside the vocabulary of "
                                   "%d",
                                   s->file->json_path, s->file->name, tok,
                                   (unsigned long long)(s->offset + (start + t) * 2),
                                   ds->vocab.size);
            if (t < T)
                inputs[t] = tok;
            else
                last = tok;
        }
    }
    /* raw is consumed: the targets are the inputs shifted by one. */
    for (size_t t = 0; t + 1 < T; t++)
        targets[t] = inputs[t + 1];
    targets[T - 1] = last;
    return 0;
}

/* ---- synthetic addition ------------------------------------------------- */

/* Digits of a (n), b (n), then c = a + b reversed (n + 1): 3n + 1 tokens. */
static void data_addition_seq(const struct gpt_dataset *ds, uint64_t problem, int *seq)
{
    int n = ds->digits;
    uint64_t a = problem / ds->pow10, b = problem % ds->pow10, c = a + b;
    for (int i = n - 1; i >= 0; i--, a /= 10)
        seq[i] = (int)(a % 10);
    for (int i = 2 * n - 1; i >= n; i--, b /= 10)
        seq[i] = (int)(b % 10);
    for (int i = 2 * n; i <= 3 * n; i++, c /= 10)
        seq[i] = (int)(c % 10);
}

static void data_addition_sample(const struct gpt_dataset *ds, uint64_t problem, int *inputs,
                                 int *targets)
{
    int seq[3 * GPT_ADDITION_DIGITS_MAX + 1];
    int n = ds->digits;
    data_addition_seq(ds, problem, seq);
    for (int t = 0; t < 3 * n; t++) {
        inputs[t] = seq[t];
        targets[t] = t < 2 * n - 1 ? -1 : seq[t + 1];
    }
}

/* Held-out problem i and train problem j are disjoint slices of one fixed
 * bijection of the problem space. */
static uint64_t data_holdout_problem(const struct gpt_dataset *ds, uint64_t i)
{
    return data_perm(DATA_HOLDOUT_KEY, ds->n_problems, i % ds->n_holdout);
}

static uint64_t data_train_problem(const struct gpt_dataset *ds, uint64_t j)
{
    return data_perm(DATA_HOLDOUT_KEY, ds->n_problems, ds->n_holdout + j);
}

int gpt_dataset_val_problem(const struct gpt_dataset *ds, uint64_t index, int *prompt,
                            size_t *ret_prompt_len, int *answer, size_t *ret_answer_len)
{
    GPT_ASSERT(ds);
    if (ds->kind != GPT_DATA_SYNTHETIC)
        return -ENOTSUP;
    GPT_ASSERT(prompt && answer && ret_prompt_len && ret_answer_len);
    int seq[3 * GPT_ADDITION_DIGITS_MAX + 1];
    size_t n = (size_t)ds->digits;
    data_addition_seq(ds, data_holdout_problem(ds, index), seq);
    memcpy(prompt, seq, 2 * n * sizeof(int));
    memcpy(answer, seq + 2 * n, (n + 1) * sizeof(int));
    *ret_prompt_len = 2 * n;
    *ret_answer_len = n + 1;
    return 0;
}

/* ---- batches -------------------------------------------------------------- */

int gpt_dataset_train_batch(const struct gpt_dataset *ds, const struct gpt_data_cursor *cur,
                            uint64_t first, size_t B, int *inputs, int *targets,
                            struct gpt_err *err)
{
    GPT_ASSERT(ds && cur && (B == 0 || (inputs && targets)));
    size_t T = ds->T;
    for (size_t b = 0; b < B; b++) {
        uint64_t k = data_train_index(ds, cur, first + b);
        if (ds->kind == GPT_DATA_SYNTHETIC) {
            data_addition_sample(ds, data_train_problem(ds, k), inputs + b * T, targets + b * T);
            continue;
        }
        int rc = data_window(ds, &ds->train, k, inputs + b * T, targets + b * T, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int gpt_dataset_val_batch(const struct gpt_dataset *ds, uint64_t index, size_t B, int *inputs,
                          int *targets, struct gpt_err *err)
{
    GPT_ASSERT(ds && (B == 0 || (inputs && targets)));
    size_t T = ds->T;
    uint64_t n = gpt_dataset_val_samples(ds);
    uint64_t k = (uint64_t)(((unsigned __int128)index * B) % n);
    for (size_t b = 0; b < B; b++, k = (k + 1) % n) {
        if (ds->kind == GPT_DATA_SYNTHETIC) {
            data_addition_sample(ds, data_holdout_problem(ds, k), inputs + b * T, targets + b * T);
            continue;
        }
        int rc = data_window(ds, &ds->val, k, inputs + b * T, targets + b * T, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- accessors -------------------------------------------------------------- */

const struct gpt_vocab *gpt_dataset_vocab(const struct gpt_dataset *ds)
{
    GPT_ASSERT(ds);
    return &ds->vocab;
}

const char *gpt_dataset_note(const struct gpt_dataset *ds)
{
    GPT_ASSERT(ds);
    return ds->note;
}

int gpt_dataset_vocab_size(const struct gpt_dataset *ds)
{
    GPT_ASSERT(ds);
    return ds->vocab.size;
}

size_t gpt_dataset_seq_len(const struct gpt_dataset *ds)
{
    GPT_ASSERT(ds);
    return ds->T;
}

uint64_t gpt_dataset_train_samples(const struct gpt_dataset *ds)
{
    GPT_ASSERT(ds);
    return ds->train.n_samples;
}

uint64_t gpt_dataset_val_samples(const struct gpt_dataset *ds)
{
    GPT_ASSERT(ds);
    return ds->kind == GPT_DATA_SYNTHETIC ? ds->n_holdout : ds->val.n_samples;
}

int gpt_dataset_is_synthetic(const struct gpt_dataset *ds)
{
    GPT_ASSERT(ds);
    return ds->kind == GPT_DATA_SYNTHETIC;
}

/* ---- open and free ---------------------------------------------------------- */

void gpt_dataset_free(struct gpt_dataset *ds)
{
    if (!ds)
        return;
    for (size_t i = 0; i < ds->n_files; i++) {
        if (ds->files[i].fd >= 0)
            close(ds->files[i].fd);
        free(ds->files[i].name);
    }
    free(ds->files);
    free(ds->bpe_ids[0]);
    free(ds->bpe_ids[1]);
    free(ds->train.segs);
    free(ds->val.segs);
    free(ds);
}

/* What a file that is not a regular file is, for the error. */
static const char *data_file_kind(mode_t mode)
{
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a plain file";
}

/* Opens a file for reading into ds->files[ds->n_files++] (the array has
 * room). An empty file is an error: it holds no token. The open never
 * blocks (O_NONBLOCK: a FIFO with no writer would wait forever) and never
 * takes a terminal; only a regular file gets past fstat. */
static int data_open_file(struct gpt_dataset *ds, const char *file, const char *json_path,
                          struct data_file **ret, struct gpt_err *err)
{
    int fd = open(file, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return gpt_err_set(err, -e, json_path, "%s: %s: %s", json_path, file, strerror(e));
    }
    struct data_file *f = &ds->files[ds->n_files++];
    *f = (struct data_file){.fd = fd, .json_path = json_path};
    if (!(f->name = strdup(file)))
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    struct stat st;
    int rc;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        return gpt_err_set(err, rc, json_path, "%s: %s", file, strerror(-rc));
    }
    if (!S_ISREG(st.st_mode))
        return gpt_err_set(err, -GPT_E_DATA, json_path, "%s: %s is %s, not a regular file",
                           json_path, file, data_file_kind(st.st_mode));
    if (ds->policy && ds->policy->check &&
        (rc = ds->policy->check(ds->policy->ctx, fd, file, json_path, err)) < 0)
        return rc;
    if (st.st_size == 0)
        return gpt_err_set(err, -GPT_E_DATA, json_path, "%s: file is empty", file);
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM); /* shuffled reads */
    f->len = (uint64_t)st.st_size;
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    *ret = f;
    return 0;
}

static int data_alloc_segs(struct data_split *sp, size_t n, uint64_t stride)
{
    sp->segs = calloc(n ? n : 1, sizeof(*sp->segs));
    if (!sp->segs)
        return -ENOMEM;
    sp->n_segs = 0;
    sp->stride = stride;
    return 0;
}

static void data_add_seg(struct data_split *sp, const struct data_file *file, uint64_t offset,
                         uint64_t n_tokens)
{
    struct data_seg *s = &sp->segs[sp->n_segs++];
    s->file = file;
    s->offset = offset;
    s->n_tokens = n_tokens;
}

/* Cuts the n tokens at byte `offset` of f at train_split into a train and
 * a val segment. */
static int data_split_run(struct gpt_dataset *ds, const struct gpt_data_spec *spec,
                          const struct data_file *f, uint64_t offset, uint64_t n,
                          struct gpt_err *err)
{
    const char *file = f->name;
    if (!(spec->train_split > 0.0 && spec->train_split < 1.0))
        return gpt_err_set(err, -GPT_E_SPEC, "data.train_split",
                           "must be in (0, 1) to split %s into train and val", file);
    uint64_t n_train = (uint64_t)((double)n * spec->train_split);
    if (n_train > n)
        n_train = n;
    uint64_t n_val = n - n_train;
    if (n_train < ds->T + 1)
        return gpt_err_set(err, -GPT_E_DATA, "data.path",
                           "%s: the train split holds %llu tokens, fewer than block_size + 1 = %zu",
                           file, (unsigned long long)n_train, ds->T + 1);
    if (n_val < ds->T + 1)
        return gpt_err_set(err, -GPT_E_DATA, "data.train_split",
                           "%s: the val split holds %llu tokens, fewer than block_size + 1 = %zu "
                           "(lower data.train_split or use a larger file)",
                           file, (unsigned long long)n_val, ds->T + 1);
    int rc = data_alloc_segs(&ds->train, 1, ds->kind == GPT_DATA_TEXT ? 1 : ds->T);
    if (rc == 0)
        rc = data_alloc_segs(&ds->val, 1, ds->T);
    if (rc < 0)
        return gpt_err_set(err, rc, NULL, "out of memory");
    data_add_seg(&ds->train, f, offset, n_train);
    data_add_seg(&ds->val, f, offset + (uint64_t)ds->width * n_train, n_val);
    return 0;
}

/* Checks that a whole file holds one window. */
static int data_check_run(const struct gpt_dataset *ds, const char *file, const char *json_path,
                          uint64_t n, struct gpt_err *err)
{
    if (n >= ds->T + 1)
        return 0;
    return gpt_err_set(err, -GPT_E_DATA, json_path,
                       "%s holds %llu tokens, fewer than block_size + 1 = %zu", file,
                       (unsigned long long)n, ds->T + 1);
}

/* data.tokenizer gpt2: the vocabulary comes from the caller's encoder. */
static int data_bpe_vocab(struct gpt_dataset *ds, struct gpt_err *err)
{
    const struct gpt_data_bpe *bpe = ds->policy ? ds->policy->bpe : NULL;
    if (!bpe)
        return gpt_err_set(err, -GPT_E_SPEC, "data.tokenizer",
                           "gpt2 needs a BPE tokenizer, and this program supplies none");
    if (bpe->vocab_size < 2 || bpe->vocab_size > 65536)
        return gpt_err_set(err, -GPT_E_SPEC, "data.vocab",
                           "the vocabulary has %d tokens (token files hold at most 65536)",
                           bpe->vocab_size);
    ds->vocab.kind = GPT_TOK_GPT2;
    ds->vocab.size = bpe->vocab_size;
    ds->vocab.bpe_fingerprint = bpe->fingerprint;
    return 0;
}

/* Encodes text file `i` with the caller's BPE encoder, which takes the
 * whole text in memory. Afterwards the file is closed, and its entry
 * describes the ids instead: mem the ids (owned by ds->bpe_ids[i]), len
 * their bytes; the dataset's width is 2 (uint16 tokens in host order,
 * little-endian here as data_window reads them; snapshot.c refuses
 * big-endian hosts too). */
static int data_bpe_encode(struct gpt_dataset *ds, size_t i, struct gpt_err *err)
{
    const struct gpt_data_bpe *bpe = ds->policy->bpe;
    struct data_file *f = &ds->files[i];
    char note[256] = "";
    size_t n = 0;
    if (f->len > SIZE_MAX)
        return gpt_err_set(err, -EFBIG, f->json_path, "%s: too large to encode", f->name);
    unsigned char *text = malloc((size_t)f->len);
    if (!text)
        return gpt_err_set(err, -ENOMEM, f->json_path, "%s: no memory for its %llu bytes", f->name,
                           (unsigned long long)f->len);
    int rc = data_read(f, 0, text, (size_t)f->len, err);
    if (rc == 0)
        rc = bpe->encode(bpe->ctx, text, (size_t)f->len, f->name, f->json_path, &ds->bpe_ids[i], &n,
                         note, sizeof(note), err);
    free(text);
    if (rc < 0)
        return rc;
    for (size_t k = 0; k < n; k++)
        if (ds->bpe_ids[i][k] >= bpe->vocab_size)
            return gpt_err_set(err, -GPT_E_CORRUPT, f->json_path,
                               "%s: the encoder gave token %u, outside its vocabulary of %d",
                               f->name, ds->bpe_ids[i][k], bpe->vocab_size);
    close(f->fd);
    f->fd = -1;
    f->mem = (const unsigned char *)ds->bpe_ids[i];
    f->len = 2 * (uint64_t)n;
    ds->width = 2;
    if (note[0]) {
        size_t used = strlen(ds->note);
        snprintf(ds->note + used, sizeof(ds->note) - used, "%s%s", used ? "; " : "", note);
    }
    return 0;
}

/* The char vocabulary: every byte value file f holds, marked in seen. */
static int data_scan_bytes(const struct data_file *f, unsigned char seen[256], struct gpt_err *err)
{
    unsigned char buf[1 << 14];
    for (uint64_t off = 0; off < f->len;) {
        size_t n = f->len - off < sizeof(buf) ? (size_t)(f->len - off) : sizeof(buf);
        int rc = data_read(f, off, buf, n, err);
        if (rc < 0)
            return rc;
        for (size_t i = 0; i < n; i++)
            seen[buf[i]] = 1;
        off += n;
    }
    return 0;
}

/* A text file, cut by train_split, or a train and a val file (data.val_path).
 * The char vocabulary is every byte either file holds, sorted. */
static int data_open_text(struct gpt_dataset *ds, const struct gpt_data_spec *spec,
                          struct gpt_err *err)
{
    struct data_file *m, *vm = NULL;
    int have_val = spec->val_path[0] != '\0';
    ds->files = calloc(2, sizeof(*ds->files));
    if (!ds->files)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    int rc = data_open_file(ds, spec->path, "data.path", &m, err);
    if (rc == 0 && have_val)
        rc = data_open_file(ds, spec->val_path, "data.val_path", &vm, err);
    if (rc < 0)
        return rc;
    ds->width = 1;
    if (spec->tokenizer == GPT_TOK_GPT2) {
        if ((rc = data_bpe_vocab(ds, err)) < 0 || (rc = data_bpe_encode(ds, 0, err)) < 0 ||
            (have_val && (rc = data_bpe_encode(ds, 1, err)) < 0))
            return rc;
    } else if (spec->tokenizer == GPT_TOK_BYTE) {
        ds->vocab.kind = GPT_TOK_BYTE;
        ds->vocab.size = 256;
        for (int i = 0; i < 256; i++)
            ds->vocab.chars[i] = ds->lut[i] = (unsigned char)i;
    } else if (spec->tokenizer == GPT_TOK_CHAR) {
        unsigned char seen[256] = {0};
        for (size_t f = 0; f < ds->n_files; f++)
            if ((rc = data_scan_bytes(&ds->files[f], seen, err)) < 0)
                return rc;
        ds->vocab.kind = GPT_TOK_CHAR;
        ds->vocab.size = 0;
        for (int c = 0; c < 256; c++) {
            if (!seen[c])
                continue;
            ds->lut[c] = (unsigned char)ds->vocab.size;
            ds->vocab.chars[ds->vocab.size++] = (unsigned char)c;
        }
    } else {
        return gpt_err_set(err, -GPT_E_SPEC, "data.tokenizer", "unknown tokenizer %d",
                           spec->tokenizer);
    }
    /* Tokens: the file's bytes, or the BPE ids (data_bpe_encode). */
    uint64_t n = m->len / (uint64_t)ds->width, vn = vm ? vm->len / (uint64_t)ds->width : 0;
    if (!have_val)
        return data_split_run(ds, spec, m, 0, n, err);
    if ((rc = data_check_run(ds, spec->path, "data.path", n, err)) < 0 ||
        (rc = data_check_run(ds, spec->val_path, "data.val_path", vn, err)) < 0)
        return rc;
    if ((rc = data_alloc_segs(&ds->train, 1, 1)) < 0 ||
        (rc = data_alloc_segs(&ds->val, 1, ds->T)) < 0)
        return gpt_err_set(err, rc, NULL, "out of memory");
    data_add_seg(&ds->train, m, 0, n);
    data_add_seg(&ds->val, vm, 0, vn);
    return 0;
}

/* Opens and checks one llm.c shard; its tokens are ret_n at byte
 * GPT_SHARD_HEADER_BYTES of *ret_file. */
static int data_open_shard(struct gpt_dataset *ds, const char *file, const char *json_path,
                           const struct data_file **ret_file, uint64_t *ret_n, struct gpt_err *err)
{
    struct data_file *m;
    int rc = data_open_file(ds, file, json_path, &m, err);
    if (rc < 0)
        return rc;
    if (m->len < GPT_SHARD_HEADER_BYTES)
        return gpt_err_set(err, -GPT_E_CORRUPT, json_path,
                           "%s: truncated token shard (%llu bytes, the header alone is %d)", file,
                           (unsigned long long)m->len, GPT_SHARD_HEADER_BYTES);
    unsigned char h[12];
    if ((rc = data_read(m, 0, h, sizeof(h), err)) < 0)
        return rc;
    int32_t word[3];
    for (int i = 0; i < 3; i++)
        word[i] = (int32_t)((uint32_t)h[4 * i] | (uint32_t)h[4 * i + 1] << 8 |
                            (uint32_t)h[4 * i + 2] << 16 | (uint32_t)h[4 * i + 3] << 24);
    if (word[0] != GPT_SHARD_MAGIC)
        return gpt_err_set(err, -GPT_E_CORRUPT, json_path,
                           "%s: bad magic %d, not an llm.c token shard (magic %d)", file, word[0],
                           GPT_SHARD_MAGIC);
    if (word[1] != GPT_SHARD_VERSION)
        return gpt_err_set(err, -GPT_E_VERSION, json_path,
                           "%s: token shard version %d is not supported (version %d: uint16 "
                           "tokens)",
                           file, word[1], GPT_SHARD_VERSION);
    if (word[2] < 0)
        return gpt_err_set(err, -GPT_E_CORRUPT, json_path, "%s: negative token count %d", file,
                           word[2]);
    uint64_t want = GPT_SHARD_HEADER_BYTES + 2 * (uint64_t)word[2];
    if (m->len != want)
        return gpt_err_set(err, -GPT_E_CORRUPT, json_path,
                           "%s: %s token shard: %llu bytes, but its header counts %d tokens "
                           "(%llu bytes)",
                           file, m->len < want ? "truncated" : "oversized",
                           (unsigned long long)m->len, word[2], (unsigned long long)want);
    *ret_file = m;
    *ret_n = (uint64_t)word[2];
    return 0;
}

/* The bounds of the glob running on this thread: glob(3) takes no
 * context, so its directory callbacks find theirs here. */
struct data_glob_limit {
    long entries;
    int64_t deadline_ms; /* monotime_ms() */
    int hit;             /* 1: too many entries, 2: too slow */
};

static _Thread_local struct data_glob_limit *data_glob_cur;

static void *data_glob_opendir(const char *name)
{
    return opendir(name);
}

static void data_glob_closedir(void *dir)
{
    closedir(dir);
}

/* Reads one entry; pretends the directory ended (and records why) once
 * the glob has read too many entries or run too long. */
static int data_glob_lstat(const char *restrict path, void *restrict st)
{
    return lstat(path, st);
}

static int data_glob_stat(const char *restrict path, void *restrict st)
{
    return stat(path, st);
}

static void *data_glob_readdir(void *dir)
{
    struct data_glob_limit *l = data_glob_cur;
    if (l->hit)
        return NULL;
    if (++l->entries > GPT_GLOB_ENTRIES_MAX) {
        l->hit = 1;
        return NULL;
    }
    if ((l->entries & 255) == 0 && monotime_ms() >= l->deadline_ms) {
        l->hit = 2;
        return NULL;
    }
    return readdir(dir);
}

/* Expands `pattern` with the calling thread's file-system identity. Errors
 * name the pattern only: a file of a directory the caller cannot read is
 * never named (GLOB_ERR stops at the first such directory). */
static int data_glob(const char *pattern, const char *json_path, glob_t *g, struct gpt_err *err)
{
    struct data_glob_limit limit = {0};
    limit.deadline_ms = monotime_ms() + GPT_GLOB_SECONDS_MAX * 1000;
    memset(g, 0, sizeof(*g));
    g->gl_opendir = data_glob_opendir;
    g->gl_readdir = data_glob_readdir;
    g->gl_closedir = data_glob_closedir;
    g->gl_lstat = data_glob_lstat;
    g->gl_stat = data_glob_stat;
    data_glob_cur = &limit;
    int rc = glob(pattern, GLOB_ERR | GLOB_ALTDIRFUNC, NULL, g);
    data_glob_cur = NULL;
    if (limit.hit == 1)
        return gpt_err_set(err, -GPT_E_LIMIT, json_path,
                           "%s: expanding '%s' reads more than %d directory entries; name the "
                           "shards with a narrower glob",
                           json_path, pattern, GPT_GLOB_ENTRIES_MAX);
    if (limit.hit == 2)
        return gpt_err_set(err, -GPT_E_LIMIT, json_path,
                           "%s: expanding '%s' took more than %d s; name the shards with a "
                           "narrower glob",
                           json_path, pattern, GPT_GLOB_SECONDS_MAX);
    if (rc == GLOB_NOMATCH)
        return gpt_err_set(err, -ENOENT, json_path, "no file matches '%s'", pattern);
    if (rc == GLOB_NOSPACE)
        return gpt_err_set(err, -ENOMEM, json_path, "out of memory expanding '%s'", pattern);
    if (rc != 0)
        return gpt_err_set(err, -EACCES, json_path,
                           "%s: cannot read a directory '%s' passes through (no permission, or "
                           "not a directory)",
                           json_path, pattern);
    if (g->gl_pathc > GPT_SHARD_FILES_MAX)
        return gpt_err_set(err, -GPT_E_LIMIT, json_path, "'%s' matches %zu files (at most %d)",
                           pattern, (size_t)g->gl_pathc, GPT_SHARD_FILES_MAX);
    return 0;
}

static int data_open_shards(struct gpt_dataset *ds, const struct gpt_data_spec *spec,
                            struct gpt_err *err)
{
    glob_t tg = {0}, vg = {0};
    int have_val = spec->val_path[0] != '\0', rc;
    ds->width = 2;
    ds->vocab.kind = -1;
    ds->vocab.size = GPT_SHARD_VOCAB;
    if (spec->tokenizer == GPT_TOK_GPT2 && (rc = data_bpe_vocab(ds, err)) < 0)
        return rc;
    rc = data_glob(spec->path, "data.path", &tg, err);
    if (rc == 0 && have_val)
        rc = data_glob(spec->val_path, "data.val_path", &vg, err);
    if (rc < 0)
        goto out;
    size_t nt = tg.gl_pathc, nv = have_val ? vg.gl_pathc : 0;
    ds->files = calloc(nt + nv, sizeof(*ds->files));
    if (!ds->files) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        goto out;
    }
    const struct data_file *f;
    uint64_t n;
    if (!have_val && nt == 1) {
        rc = data_open_shard(ds, tg.gl_pathv[0], "data.path", &f, &n, err);
        if (rc == 0)
            rc = data_split_run(ds, spec, f, GPT_SHARD_HEADER_BYTES, n, err);
        goto out;
    }
    if ((rc = data_alloc_segs(&ds->train, nt, ds->T)) < 0 ||
        (rc = data_alloc_segs(&ds->val, have_val ? nv : 1, ds->T)) < 0) {
        gpt_err_set(err, rc, NULL, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < nv; i++) {
        rc = data_open_shard(ds, vg.gl_pathv[i], "data.val_path", &f, &n, err);
        if (rc < 0)
            goto out;
        data_add_seg(&ds->val, f, GPT_SHARD_HEADER_BYTES, n);
    }
    for (size_t i = 0; i < nt; i++) {
        rc = data_open_shard(ds, tg.gl_pathv[i], "data.path", &f, &n, err);
        if (rc < 0)
            goto out;
        int dup = 0; /* a file named by both globs is validation data */
        for (size_t j = 0; j < nv; j++)
            dup |= ds->files[j].dev == f->dev && ds->files[j].ino == f->ino;
        if (dup)
            continue;
        if (!have_val && i == nt - 1)
            data_add_seg(&ds->val, f, GPT_SHARD_HEADER_BYTES, n);
        else
            data_add_seg(&ds->train, f, GPT_SHARD_HEADER_BYTES, n);
    }
    if (ds->train.n_segs == 0) {
        rc = gpt_err_set(err, -GPT_E_DATA, "data.path",
                         "'%s' names no training shard (every match is validation data)",
                         spec->path);
        goto out;
    }
out:
    globfree(&tg);
    if (have_val)
        globfree(&vg);
    return rc;
}

static int data_open_synthetic(struct gpt_dataset *ds, const struct gpt_data_spec *spec, size_t T,
                               struct gpt_err *err)
{
    if (strcmp(spec->task, "addition") != 0)
        return gpt_err_set(err, -GPT_E_SPEC, "data.task",
                           "unknown synthetic task '%s' (known: addition)", spec->task);
    int n = spec->digits;
    if (n < 1 || n > GPT_ADDITION_DIGITS_MAX)
        return gpt_err_set(err, -GPT_E_SPEC, "data.digits", "must be in [1, %d], got %d",
                           GPT_ADDITION_DIGITS_MAX, n);
    if (T != 0 && T < (size_t)(3 * n))
        return gpt_err_set(err, -GPT_E_SPEC, "model.block_size",
                           "addition with %d digits needs block_size >= %d, got %zu", n, 3 * n, T);
    ds->digits = n;
    ds->T = (size_t)(3 * n);
    ds->pow10 = 1;
    for (int i = 0; i < n; i++)
        ds->pow10 *= 10;
    ds->n_problems = ds->pow10 * ds->pow10;
    ds->n_holdout = ds->n_problems / 5 < DATA_HOLDOUT_MAX ? ds->n_problems / 5 : DATA_HOLDOUT_MAX;
    ds->train.n_samples = ds->n_problems - ds->n_holdout;
    ds->vocab.kind = GPT_TOK_CHAR;
    ds->vocab.size = 10;
    for (int i = 0; i < 10; i++)
        ds->vocab.chars[i] = (unsigned char)('0' + i);
    return 0;
}

int gpt_dataset_open(const struct gpt_data_spec *spec, size_t T, uint64_t seed,
                     struct gpt_dataset **ret, struct gpt_err *err)
{
    return gpt_dataset_open_checked(spec, T, seed, NULL, ret, err);
}

int gpt_dataset_open_checked(const struct gpt_data_spec *spec, size_t T, uint64_t seed,
                             const struct gpt_data_policy *policy, struct gpt_dataset **ret,
                             struct gpt_err *err)
{
    GPT_ASSERT(spec && ret);
    struct gpt_dataset *ds = calloc(1, sizeof(*ds));
    if (!ds)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    ds->policy = policy;
    ds->kind = spec->kind;
    ds->T = T;
    ds->seed = seed;
    int rc;
    if (spec->kind != GPT_DATA_SYNTHETIC && T == 0) {
        rc = gpt_err_set(err, -GPT_E_SPEC, "model.block_size", "must be at least 1");
        goto fail;
    }
    switch (spec->kind) {
    case GPT_DATA_TEXT:
        rc = data_open_text(ds, spec, err);
        break;
    case GPT_DATA_SHARDS:
        rc = data_open_shards(ds, spec, err);
        break;
    case GPT_DATA_SYNTHETIC:
        rc = data_open_synthetic(ds, spec, T, err);
        break;
    default:
        rc = gpt_err_set(err, -GPT_E_SPEC, "data.kind", "unknown data kind %d", spec->kind);
        break;
    }
    if (rc < 0)
        goto fail;
    if (ds->kind != GPT_DATA_SYNTHETIC) {
        data_split_finish(&ds->train, ds->T);
        data_split_finish(&ds->val, ds->T);
        if (ds->train.n_samples == 0 || ds->val.n_samples == 0) {
            rc = gpt_err_set(err, -GPT_E_DATA, ds->train.n_samples ? "data.val_path" : "data.path",
                             "the %s shards hold no window of block_size + 1 = %zu tokens",
                             ds->train.n_samples ? "validation" : "training", ds->T + 1);
            goto fail;
        }
    }
    ds->policy = NULL;
    *ret = ds;
    return 0;
fail:
    gpt_dataset_free(ds);
    return rc;
}
