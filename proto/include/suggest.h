/*
 * suggest: "did you mean" for a mistyped name: the edit distance of two
 * short strings, and the closest of a list of known names.
 *
 * Pure: no allocation, no globals; any thread.
 */
#ifndef GPT_SUGGEST_H
#define GPT_SUGGEST_H

#include <stddef.h>

#define GPT_SUGGEST_LEN_MAX 64 /* longer strings are never close */

/* Edit distance of a and b, counting a swap of two neighbours as one edit
 * (optimal string alignment); SIZE_MAX when either is longer than
 * GPT_SUGGEST_LEN_MAX bytes. */
size_t gpt_edit_distance(const char *a, const char *b);

/* The name closest to `word` among names[0..n) (NULL entries skipped), or
 * NULL when none is within a few edits (a third of word's length, 1 to 3).
 * Returns one of names (borrowed). */
const char *gpt_suggest(const char *word, const char *const *names, size_t n);

#endif
