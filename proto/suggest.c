/*
 * suggest: edit distance and the closest known name (see suggest.h).
 */
#include <stdint.h>
#include <string.h>

#include "suggest.h"

size_t gpt_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), d[3][GPT_SUGGEST_LEN_MAX + 1];
    if (la > GPT_SUGGEST_LEN_MAX || lb > GPT_SUGGEST_LEN_MAX)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t *cur = d[i % 3], *up = d[(i - 1) % 3], *up2 = d[(i + 1) % 3];
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t best = up[j - 1] + (a[i - 1] != b[j - 1]);
            if (up[j] + 1 < best)
                best = up[j] + 1;
            if (cur[j - 1] + 1 < best)
                best = cur[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                up2[j - 2] + 1 < best)
                best = up2[j - 2] + 1;
            cur[j] = best;
        }
    }
    return d[la % 3][lb];
}

const char *gpt_suggest(const char *word, const char *const *names, size_t n)
{
    size_t limit = strlen(word) / 3, best = SIZE_MAX;
    const char *found = NULL;
    limit = limit < 1 ? 1 : limit > 3 ? 3 : limit;
    for (size_t i = 0; i < n; i++) {
        size_t d = names[i] ? gpt_edit_distance(word, names[i]) : SIZE_MAX;
        if (d < best) {
            best = d;
            found = names[i];
        }
    }
    return best <= limit ? found : NULL;
}
