/*
 * tokcache: the GPT-2 tokenizer of a job (data.tokenizer gpt2): its
 * vocabulary folder (data.vocab) read as the job's owner, the engine's
 * data hook (struct gpt_data_bpe) that tokenizes a text file on all cores
 * and keeps the ids in a cache, and the sampling codec (struct
 * gpt_sample_codec).
 *
 * The cache: one file per (owner uid, vocabulary fingerprint, SHA-256 of
 * the text), named by a hash of the three, in a folder of gptd's
 * (STATE_DIR/tokcache for the daemon, ~/.cache/gptd/tokens for `gptd
 * run`), 0700, files 0600. A file holds a header (magic, version, the
 * fingerprint, the text's SHA-256, the id count) and the ids as uint16,
 * with a CRC-32 over all of it; one that does not validate is rebuilt.
 * The folder keeps at most TOKCACHE_FILES_MAX files (least recently used
 * go first). When the calling thread acts as a job's owner (fsid.h), the
 * cache is read and written as gptd itself, and the text and the
 * vocabulary as the owner.
 *
 * A struct tokcache is used by the thread that made it (a worker or a
 * sample work item); encoding is serialized process-wide so that the
 * workers of one job tokenize a file once and read it from the cache
 * after. Nothing here logs: what happened goes into the note of
 * gpt_data_bpe.encode (the job's "tokenize" event).
 */
#ifndef GPTD_TOKCACHE_H
#define GPTD_TOKCACHE_H

#include <stddef.h>
#include <sys/types.h>

#include "data.h"
#include "fsid.h"
#include "gpt_err.h"
#include "trainer.h"

#define TOKCACHE_FILES_MAX 64 /* cache files kept per folder */
#define TOKCACHE_DIR_NAME  "tokcache"

struct tokcache_opts {
    const char *vocab_dir;  /* data.vocab */
    const char *data_roots; /* NULL: no roots check on the opened folder */
    const char *cache_dir;  /* NULL or "": encode every time, cache nothing */
    uid_t uid;              /* the job's owner (part of the cache key) */
    /* Non-NULL when the calling thread has taken `user`'s identity with
     * fsid_enter(user, saved): the cache is then used as gptd. Borrowed;
     * must outlive the tokcache. */
    const struct fsid_user *user;
    struct fsid_saved *saved;
    int threads; /* encoding threads; 0 = one per core */
};

struct tokcache;

/* Opens data.vocab (a folder; with data_roots, checked under them through
 * the opened descriptor) with the calling thread's identity and loads the
 * vocabulary from it. Returns new. Errors name data.vocab. Blocks. */
int tokcache_new(const struct tokcache_opts *o, struct tokcache **ret, struct gpt_err *err);
/* NULL allowed. */
void tokcache_free(struct tokcache *tc);

/* Borrowed from tc, valid until tokcache_free. */
const struct gpt_data_bpe *tokcache_bpe(struct tokcache *tc);
const struct gpt_sample_codec *tokcache_codec(struct tokcache *tc);

/* Samples snapshot `path` (gpt_sample_snapshot) with the tokenizer of a
 * job whose data.vocab is `vocab` ("" or NULL: none, the snapshot's own
 * char/byte vocabulary or ids): the folder is read with the calling
 * thread's identity, under `data_roots` when non-NULL. `prompt_ids`
 * (non-NULL: the text form "15496,11", prompt_ids.h) replaces o->prompt.
 * *ret_text is new. Errors name prompt_ids, prompt or data.vocab. Blocks. */
int tokcache_sample(const char *path, const char *vocab, const char *data_roots,
                    const char *prompt_ids, const struct gpt_sample_opts *o, char **ret_text,
                    struct gpt_err *err);

/* `gptd run`'s cache folder: $XDG_CACHE_HOME/gptd/tokens, else
 * $HOME/.cache/gptd/tokens; "" when neither is set. */
void tokcache_user_dir(char *out, size_t cap);

#endif
