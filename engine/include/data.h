/*
 * data: datasets (char or byte text, llm.c token shards, synthetic tasks),
 * the tokenizer vocabulary, the deterministic train/val split and the
 * global data cursor that a distributed sampler reads from.
 *
 * A struct gpt_dataset is immutable after open and may be read by several
 * worker threads at once. Nothing here logs.
 *
 * The train stream: epoch e is a permutation, seeded by (seed, e), of the
 * train split's samples (windows of T+1 tokens for text and shards; for
 * synthetic tasks each (seed, e, i) names one generated problem). Global
 * sample g of the stream is sample (cursor.position + g) counted across
 * epochs. Any world size reads the same stream; rank r takes its share of
 * each optimizer step's global batch (gpt_data_rank_range).
 *
 * Samples. Text: the train split is the first floor(train_split * n)
 * tokens, val the rest (or, with data.val_path, the whole data.path file
 * and the whole val file, train_split unused; the char vocabulary then
 * covers both files); a train sample starts at every token offset
 * (minGPT's CharDataset: n_train - T samples). Shards: a train sample
 * starts every T tokens of each shard (llm.c's stride; samples never span
 * two shards). Validation samples start every T tokens in both cases.
 * Shard validation data comes from data.val_path when given (files that
 * also match data.path are dropped from training); otherwise the last
 * shard of data.path in sorted order is the val split (llm.c's
 * "*_val_*.bin" sorts after "*_train_*.bin"), and a single shard is split
 * by data.train_split like a text file. Synthetic addition: the problem
 * space is every (a, b) pair of `digits`-digit numbers; a fixed keyed
 * bijection of it puts min(P/5, 1000) problems in the held-out set (the
 * same for every seed) and the rest in the train split.
 *
 * The shuffle is a stateless bijection on [0, N) (a cycle-walking Feistel
 * network keyed by hash(seed, epoch)), so no per-epoch array exists and
 * any thread can compute any sample.
 */
#ifndef GPT_DATA_H
#define GPT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "gpt_config.h"
#include "gpt_err.h"

#define GPT_VOCAB_MAX 256 /* char/byte/synthetic vocabularies; shards use GPT-2's 50257 */

/* llm.c token shards: 256 int32 header words, then uint16 tokens. */
#define GPT_SHARD_MAGIC         20240520
#define GPT_SHARD_VERSION       1
#define GPT_SHARD_HEADER_BYTES  1024
#define GPT_SHARD_VOCAB         50257  /* GPT-2's vocabulary; larger tokens are corrupt */
#define GPT_SHARD_FILES_MAX     4096   /* files one glob may name */
#define GPT_ADDITION_DIGITS_MAX 9      /* 10^(2*9) problems still fit a uint64_t */
#define GPT_GLOB_ENTRIES_MAX    100000 /* directory entries one glob may read */
#define GPT_GLOB_SECONDS_MAX    10     /* wall time one glob may take */

/* The tokenizer of text and synthetic data: token i <-> byte chars[i].
 * Saved in snapshots so sampling works without the data file. */
struct gpt_vocab {
    int kind; /* enum gpt_tokenizer, or -1 for token ids (shards) */
    int size; /* number of tokens */
    unsigned char chars[GPT_VOCAB_MAX];
    uint64_t bpe_fingerprint; /* GPT_TOK_GPT2: gpt_tok_fingerprint of data.vocab; 0 otherwise */
};

/* Where the train stream stands: epoch, samples consumed in this epoch,
 * and the shuffle seed. Saved in snapshots. */
struct gpt_data_cursor {
    uint64_t epoch;
    uint64_t position;
    uint64_t seed;
};

struct gpt_dataset;

/* A caller's policy on each data file, run on the opened descriptor (a
 * regular file) before it is read: the daemon checks there that the file
 * it really opened lies under its data roots. Returns 0 or a negative
 * error with err filled (err->path = json_path). */
struct gpt_data_policy {
    void *ctx;
    int (*check)(void *ctx, int fd, const char *file, const char *json_path, struct gpt_err *err);
    const struct gpt_data_bpe *bpe; /* borrowed; NULL = none (a gpt2 job then fails) */
};

/*
 * The BPE tokenizer of data.tokenizer gpt2, supplied by the caller (the
 * engine links no tokenizer; the daemon's is engine/tok behind a cache).
 * A gpt2 text job's files are opened as usual (policy check included)
 * and read whole, then encode turns each file's text into token ids; a gpt2 shards job
 * only takes vocab_size and fingerprint (its tokens are already ids).
 */
struct gpt_data_bpe {
    void *ctx;
    int vocab_size;       /* at most 65536: tokens are kept as uint16 */
    uint64_t fingerprint; /* recorded in the vocabulary and so in snapshots */
    /* Encodes text[0, len) of `file` (job key json_path) into *ret (new,
     * malloc'd, free() it) of *ret_n ids, each < vocab_size, and may write
     * a line for the job's events to note[0, note_cap) (e.g. "from the
     * cache"). Returns 0 or a negative error with err filled. Blocks;
     * called on the thread that opens the dataset. */
    int (*encode)(void *ctx, const void *text, size_t len, const char *file, const char *json_path,
                  uint16_t **ret, size_t *ret_n, char *note, size_t note_cap, struct gpt_err *err);
};

/* Opens and validates the data of a job spec for sequences of length T
 * (the model's block_size; synthetic tasks use their own fixed length,
 * see gpt_dataset_seq_len). Errors name the file and, for spec problems,
 * the JSON path ("data.path"). Files are opened without blocking (a FIFO
 * or a device is refused as "not a regular file", never waited on) with
 * the calling thread's file-system identity; a shard glob reads at most
 * GPT_GLOB_ENTRIES_MAX directory entries in GPT_GLOB_SECONDS_MAX seconds,
 * and its errors name the pattern, never a file of a directory it could
 * not read. The dataset keeps each token file open and reads windows from
 * it as the job trains (never mapped): a file truncated later fails the
 * batch that reaches past its new end, naming it; one replaced by rename
 * goes on being read as it was opened; bytes appended are not seen.
 * Blocks on file I/O; worker thread. */
int gpt_dataset_open(const struct gpt_data_spec *spec, size_t T, uint64_t seed,
                     struct gpt_dataset **ret, struct gpt_err *err);
/* The same, with `policy` (borrowed; NULL = none) run on every file. */
int gpt_dataset_open_checked(const struct gpt_data_spec *spec, size_t T, uint64_t seed,
                             const struct gpt_data_policy *policy, struct gpt_dataset **ret,
                             struct gpt_err *err);
void gpt_dataset_free(struct gpt_dataset *ds);

const struct gpt_vocab *gpt_dataset_vocab(const struct gpt_dataset *ds);
/* What the BPE encoder said while opening (gpt_data_bpe.encode's notes,
 * one line per file), or "" (borrowed from ds). */
const char *gpt_dataset_note(const struct gpt_dataset *ds);
int gpt_dataset_vocab_size(const struct gpt_dataset *ds);
/* Sequence length the trainer must use (T, or the task's length). */
size_t gpt_dataset_seq_len(const struct gpt_dataset *ds);
/* Samples in one epoch of the train split. */
uint64_t gpt_dataset_train_samples(const struct gpt_dataset *ds);
/* Distinct samples of the val split (synthetic: held-out problems);
 * gpt_dataset_val_batch and gpt_dataset_val_problem wrap around it. */
uint64_t gpt_dataset_val_samples(const struct gpt_dataset *ds);

/* A fresh cursor: epoch 0, position 0, the seed given to open. */
void gpt_data_cursor_init(const struct gpt_dataset *ds, struct gpt_data_cursor *ret_cur);

/* Rank `rank`'s share of a global batch of `global` samples in a world of
 * `world`: samples [*ret_first, *ret_first + *ret_count) of it. Shares are
 * contiguous, in rank order, and differ by at most one when `world` does
 * not divide `global` (lower ranks take the extra ones). */
void gpt_data_rank_range(uint64_t global, int world, int rank, uint64_t *ret_first,
                         uint64_t *ret_count);

/* Fills inputs/targets (B, T) with global samples first .. first+B-1 after
 * the cursor (wrapping into later epochs). Targets < 0 are ignored by the
 * loss (synthetic tasks mask their prompt). Does not move the cursor.
 * Reads the data files (pread; blocks on disk). Returns 0; -GPT_E_DATA
 * when a shard holds a token outside the vocabulary (shard tokens are
 * range-checked here, lazily, not at open) or a file shrank since open
 * (truncated while the job trains: never a fault); or a read's -errno.
 * `err` then names the file. Any thread. */
int gpt_dataset_train_batch(const struct gpt_dataset *ds, const struct gpt_data_cursor *cur,
                            uint64_t first, size_t B, int *inputs, int *targets,
                            struct gpt_err *err);
/* Moves the cursor n samples on, rolling epochs over. */
void gpt_data_cursor_advance(const struct gpt_dataset *ds, struct gpt_data_cursor *cur, uint64_t n);
/* Validation batch number `index` (deterministic; wraps around the val
 * split): samples index*B .. index*B+B-1 of it. Same errors as
 * gpt_dataset_train_batch. */
int gpt_dataset_val_batch(const struct gpt_dataset *ds, uint64_t index, size_t B, int *inputs,
                          int *targets, struct gpt_err *err);

/* Synthetic tasks: problem `index` of the held-out set (wrapping around
 * it). `prompt` gets the tokens the model is given, `answer` the tokens it
 * must generate (addition: 2*digits and digits+1 tokens; the answer is the
 * sum's digits least significant first). Returns -ENOTSUP for
 * non-synthetic data. */
int gpt_dataset_val_problem(const struct gpt_dataset *ds, uint64_t index, int *prompt,
                            size_t *ret_prompt_len, int *answer, size_t *ret_answer_len);
int gpt_dataset_is_synthetic(const struct gpt_dataset *ds);

/* Tokenizer. Encode fails with -EINVAL (message names the character) on a
 * character outside a char vocabulary, -EMSGSIZE when the text has more
 * than `cap` tokens and -ENOTSUP for token ids (no BPE encoder here).
 * Decode writes at most cap-1 bytes plus NUL and returns the length.
 * Token ids (shards) decode as "<id>"; a token outside a char or byte
 * vocabulary decodes as '?'. */
int gpt_vocab_encode(const struct gpt_vocab *v, const char *text, int *out, size_t cap,
                     size_t *ret_n, struct gpt_err *err);
size_t gpt_vocab_decode(const struct gpt_vocab *v, const int *tokens, size_t n, char *out,
                        size_t cap);

#endif
