/*
 * prompt_ids: see prompt_ids.h. One pass over the text, no allocation.
 */
#include "prompt_ids.h"

#include <errno.h>

#define PATH "prompt_ids"

int gpt_prompt_ids_parse(const char *text, size_t len, int32_t *out, size_t cap, size_t *ret_n,
                         struct gpt_err *err)
{
    GPT_ASSERT((text || len == 0) && (out || cap == 0) && ret_n);
    if (len > GPT_PROMPT_IDS_TEXT_MAX)
        return gpt_err_set(err, -EINVAL, PATH, "%zu bytes of token ids (at most %d)", len,
                           GPT_PROMPT_IDS_TEXT_MAX);
    size_t n = 0, i = 0;
    for (;;) {
        while (i < len && text[i] == ' ')
            i++;
        if (i == len && n == 0)
            return gpt_err_set(err, -EINVAL, PATH, "no token ids given (expected e.g. 15496,11)");
        if (i == len || text[i] < '0' || text[i] > '9') {
            if (i < len && text[i] != ',')
                break;
            return gpt_err_set(err, -EINVAL, PATH, "token id %zu is empty (at byte %zu)", n + 1, i);
        }
        int64_t v = 0;
        size_t start = i;
        while (i < len && text[i] >= '0' && text[i] <= '9') {
            v = v * 10 + (text[i++] - '0');
            if (v > GPT_PROMPT_ID_MAX)
                return gpt_err_set(err, -EINVAL, PATH,
                                   "token id %zu (at byte %zu) is larger than %d", n + 1, start,
                                   GPT_PROMPT_ID_MAX);
        }
        if (n == cap)
            return gpt_err_set(err, -EINVAL, PATH, "more than %zu token ids", cap);
        out[n++] = (int32_t)v;
        while (i < len && text[i] == ' ')
            i++;
        if (i == len) {
            *ret_n = n;
            return 0;
        }
        if (text[i] != ',')
            break;
        i++;
    }
    unsigned char c = (unsigned char)text[i];
    if (c >= 0x20 && c < 0x7f)
        return gpt_err_set(err, -EINVAL, PATH,
                           "unexpected '%c' at byte %zu (token ids are decimal numbers separated "
                           "by commas, e.g. 15496,11)",
                           c, i);
    return gpt_err_set(err, -EINVAL, PATH,
                       "unexpected byte 0x%02x at byte %zu (token ids are decimal numbers "
                       "separated by commas, e.g. 15496,11)",
                       c, i);
}
