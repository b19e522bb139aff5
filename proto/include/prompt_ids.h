/*
 * prompt_ids: a sampling prompt given as token ids, "15496,11" (gptctl
 * sample --prompt-ids, gptd run --prompt-ids, the `prompt_ids` field of
 * the sample op). Decimal ids separated by commas, spaces allowed around
 * them. Whether each id is inside the model's vocabulary is checked where
 * the vocabulary is known (engine/sample.c).
 *
 * Pure; any thread.
 */
#ifndef GPT_PROMPT_IDS_H
#define GPT_PROMPT_IDS_H

#include <stddef.h>
#include <stdint.h>

#include "gpt_err.h"

#define GPT_PROMPT_IDS_MAX      4096     /* ids in one prompt */
#define GPT_PROMPT_IDS_TEXT_MAX 65536    /* bytes of the text form */
#define GPT_PROMPT_ID_MAX       16777215 /* larger than any vocabulary gptd trains */

/* Parses text[0, len) into out[0, cap) (cap <= GPT_PROMPT_IDS_MAX is
 * enough for any valid text) and writes the count to *ret_n. Errors
 * (-EINVAL, err->path = "prompt_ids") name the offending id or
 * character and its position: an empty list, an empty id, a character
 * that is not a digit, a comma or a space, an id above GPT_PROMPT_ID_MAX,
 * more than `cap` ids or a text longer than GPT_PROMPT_IDS_TEXT_MAX.
 * *ret_n and out are written only on success. */
int gpt_prompt_ids_parse(const char *text, size_t len, int32_t *out, size_t cap, size_t *ret_n,
                         struct gpt_err *err);

#endif
