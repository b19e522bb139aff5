/*
 * tok_ids: encodes each FILE with the GPT-2 tokenizer of VOCAB_DIR and
 * writes its ids to FILE.ids in OUTDIR (a JSON array), after checking
 * that decoding them gives back the file's bytes exactly (exit 1 if not).
 * With --special, "<|endoftext|>" in the text is the special token.
 * Used by the tokenizer's reference test.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok.h"

static char *slurp(const char *path, size_t *ret_len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t k;
    while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                buf = NULL;
            }
            buf = b;
        }
    }
    fclose(f);
    *ret_len = n;
    return buf;
}

int main(int argc, char **argv)
{
    int special = 0, a = 1;
    if (argc > 1 && strcmp(argv[1], "--special") == 0)
        special = 1, a++;
    if (argc - a < 3) {
        fprintf(stderr, "usage: tok_ids [--special] VOCAB_DIR OUTDIR FILE...\n");
        return 2;
    }
    struct gpt_err err = {0};
    struct gpt_tok *t;
    struct gpt_tok_enc *e;
    if (gpt_tok_load(argv[a], &t, &err) < 0 || gpt_tok_enc_new(t, &e, &err) < 0) {
        fprintf(stderr, "tok_ids: %s\n", err.msg);
        return 1;
    }
    int status = 0;
    for (int i = a + 2; i < argc; i++) {
        size_t len;
        char *text = slurp(argv[i], &len);
        if (!text) {
            fprintf(stderr, "tok_ids: cannot read %s\n", argv[i]);
            return 1;
        }
        struct gpt_tok_ids ids = {0};
        if (gpt_tok_encode(e, text, len, special ? GPT_TOK_ALLOW_SPECIAL : 0, &ids, &err) < 0) {
            fprintf(stderr, "tok_ids: %s: %s\n", argv[i], err.msg);
            return 1;
        }
        char *back = malloc(len + 1);
        size_t blen;
        if (gpt_tok_decode(t, ids.v, ids.n, back, len + 1, &blen, &err) < 0 || blen != len ||
            memcmp(back, text, len) != 0) {
            size_t at = 0;
            while (at < len && at < blen && back[at] == text[at])
                at++;
            fprintf(stderr,
                    "tok_ids: %s: decode(encode(text)) differs at byte %zu (%zu bytes "
                    "back, %zu in)\n",
                    argv[i], at, blen, len);
            status = 1;
        }
        const char *base = strrchr(argv[i], '/');
        base = base ? base + 1 : argv[i];
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s.ids", argv[a + 1], base);
        FILE *f = fopen(path, "w");
        if (!f) {
            fprintf(stderr, "tok_ids: cannot write %s\n", path);
            return 1;
        }
        fputc('[', f);
        for (size_t j = 0; j < ids.n; j++)
            fprintf(f, j ? ",%d" : "%d", ids.v[j]);
        fputs("]\n", f);
        fclose(f);
        free(back);
        free(text);
        gpt_tok_ids_done(&ids);
    }
    gpt_tok_enc_free(e);
    gpt_tok_free(t);
    return status;
}
