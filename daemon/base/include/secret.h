/*
 * secret: where a cluster secret comes from when none is named. A
 * coordinator without --secret-file uses STATE_DIR/cluster.secret, and
 * `gptd run --world N --rdzv ...` without --secret-file uses a per-user
 * file, ~/.cache/gptd/run.secret, that every rank of that user on the host
 * finds. Either file is made once (32 random bytes as 64 hex digits, mode
 * 0600) and reused. Reading and checking a secret is store_secret_load()
 * (store_client.h). Any thread; every function blocks on file I/O.
 */
#ifndef GPTD_SECRET_H
#define GPTD_SECRET_H

#include <stddef.h>

#include "gpt_err.h"

/* Makes `path` a new secret unless it exists: the content is written to a
 * private temporary file (mkostemp: O_CREAT|O_EXCL, 0600) in the same folder and
 * linked to `path` in one step, so a concurrent reader (another rank
 * starting at the same moment) sees either no file or the whole secret, and
 * of two racing creators exactly one wins. Returns 0 (created or already
 * there; store_secret_load() then checks it) or a negative errno. */
int secret_file_ensure(const char *path, struct gpt_err *err);

/* The per-user secret for `gptd run`: $HOME/.cache/gptd/run.secret (HOME
 * from the environment, else the password database). Creates the folders
 * (mode 0700) and refuses a gptd folder that is not this user's or that
 * others may write. Writes the path to buf. Returns 0 or a negative errno. */
int secret_user_path(char *buf, size_t cap, struct gpt_err *err);

#endif
