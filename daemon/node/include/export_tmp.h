/*
 * export_tmp: the temporaries of `export` ops in flight. An export writes
 * a temporary file (or, for hf, a folder) beside its output in the user's
 * folder and renames it into place; a failed export removes it, but a gptd
 * killed meanwhile cannot. So before it writes, each export records in
 * STATE_DIR/exports/ (gptd's own folder) the user, the output and the
 * temporary's name prefix, which carries a random id; at the next start
 * gptd removes, as that user, only entries of the output's folder named
 * with that prefix (a name no one else has), then the record. gptd never
 * scans a user's folder for names that merely look like its own, and never
 * removes with rights the user lacks, so a link or a swapped folder leads
 * nowhere the user could not go.
 *
 * Records are written and removed with gptd's identity (not the user's);
 * the cleaning at start takes the user's. Blocking file I/O.
 */
#ifndef GPTD_EXPORT_TMP_H
#define GPTD_EXPORT_TMP_H

#include <limits.h>
#include <sys/types.h>

#include "gpt_err.h"

#define EXPORT_TMP_DIR        "exports"     /* under the state directory */
#define EXPORT_TMP_MARK       "gptd-export" /* in every temporary's name */
#define EXPORT_TMP_PREFIX_MAX 128

/* One export's record. */
struct export_tmp {
    char record[PATH_MAX];              /* STATE_DIR/exports/ID; "" once removed */
    char prefix[EXPORT_TMP_PREFIX_MAX]; /* ".NAME.gptd-export-ID-": the temporary's name
                                           prefix (NAME: the output's, made safe, cut short) */
};

/* Makes a random id and the temporary's name prefix for `out`, and
 * records (uid, prefix, out) crash-safely in STATE_DIR/exports/ID (mode
 * 0600; the folder made 0700 if missing). Returns 0, or -errno with err
 * naming the file. Any thread, with gptd's own file-system identity. */
int export_tmp_begin(const char *state_dir, uid_t uid, const char *out, struct export_tmp *ret,
                     struct gpt_err *err);

/* The export ended, either way (a failed writer removed its temporary):
 * removes the record. A no-op when there is none. Any thread, with gptd's
 * own file-system identity. */
void export_tmp_end(struct export_tmp *t);

/* At start, before any export runs: for every record, removes the
 * temporaries it names from the output's folder as the record's user (a
 * file or link; a folder with the files in it), then the record; logs
 * each removal and each record it cannot act on. Returns how many
 * temporaries were removed. Main thread; switches its file-system
 * identity and back. */
int export_tmp_clean(const char *state_dir);

#endif
