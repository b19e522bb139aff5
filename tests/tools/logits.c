/*
 * logits: gptd's logits for the reference tests.
 *
 *   logits SNAPSHOT.gpts OUT.bin ID,ID,...
 *
 * Loads the snapshot's weights into the CPU model, runs one forward over
 * the token ids (one sequence, at most block_size of them) and writes the
 * logits, T x vocab_size float32 little-endian (the padding columns
 * dropped), to OUT.bin. Exit 0, or 1 with the reason on stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "factory.h"
#include "model.h"
#include "snapshot.h"

int main(int argc, char **argv)
{
    struct gpt_err err;
    struct gpt_snapshot_meta meta;
    struct gpt_backend *be = NULL;
    struct gpt_model m;
    int toks[4096];
    size_t T = 0;
    if (argc != 4) {
        fprintf(stderr, "usage: logits SNAPSHOT OUT.bin ID,ID,...\n");
        return 1;
    }
    for (char *s = argv[3], *end; *s && T < 4096; s = *end ? end + 1 : end)
        toks[T++] = (int)strtol(s, &end, 10);
    if (gpt_snapshot_read_meta(argv[1], &meta, &err) < 0 ||
        gpt_backend_new(GPT_BACKEND_CPU, -1, NULL, &be, &err) < 0 ||
        gpt_model_init(&m, &meta.cfg, be, 1, &err) < 0) {
        fprintf(stderr, "logits: %s\n", err.msg);
        return 1;
    }
    float *host = malloc(m.n_params * sizeof(float));
    if (!host || gpt_snapshot_read(argv[1], &meta, host, NULL, NULL, &err) < 0) {
        fprintf(stderr, "logits: %s\n", host ? err.msg : "out of memory");
        return 1;
    }
    if (T > (size_t)meta.cfg.block_size ||
        gpt_backend_upload(be, m.params, host, m.n_params * sizeof(float)) < 0 ||
        gpt_model_forward(&m, toks, NULL, 1, T, NULL) < 0) {
        fprintf(stderr, "logits: forward failed\n");
        return 1;
    }
    size_t V = (size_t)meta.cfg.vocab_size;
    float *lg = malloc(T * m.Vp * sizeof(float));
    gpt_backend_download(be, lg, gpt_model_logits(&m), T * m.Vp * sizeof(float));
    FILE *f = fopen(argv[2], "wb");
    for (size_t t = 0; f && t < T; t++)
        fwrite(lg + t * m.Vp, sizeof(float), V, f);
    if (!f || fclose(f) != 0) {
        fprintf(stderr, "logits: cannot write %s\n", argv[2]);
        return 1;
    }
    free(lg);
    free(host);
    gpt_model_done(&m);
    gpt_backend_free(be);
    return 0;
}
