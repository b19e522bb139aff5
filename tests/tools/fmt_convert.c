/*
 * fmt_convert: a test driver for the llm.c and GGUF formats (engine/fmt),
 * used by the integration tests until `gptd export` dispatches to them.
 *
 *   fmt_convert mksnap L NH C T V SEED DIR
 *       writes DIR/snap-000000000001.gpts: a model with GPT-2 initial
 *       weights plus seeded noise on every parameter (biases and LayerNorm
 *       too), and a few values at float16's edges in wpe's first row;
 *       prints the snapshot's path.
 *   fmt_convert export SNAPSHOT.gpts llmc|gguf OUT [--dtype f32|f16|bf16] [--vocab DIR]
 *   fmt_convert import llmc|gguf FILE RAW
 *       reads FILE into gptd's layout, writes the parameters to RAW as
 *       raw float32 and prints the config as one JSON line. Reads it the
 *       export table's way too (probe, gpt_model_layout, load), which must
 *       agree, and checks that load refuses a layout of another config.
 * Exit 0 on success, 1 with the library's message on stderr otherwise.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "llmc.h"
#include "model.h"
#include "snapshot.h"

static int fail(const char *what, const struct gpt_err *err)
{
    fprintf(stderr, "fmt_convert: %s: %s\n", what, err->msg);
    return 1;
}

static int mksnap(char **argv)
{
    struct gpt_model_config cfg = {.n_layer = atoi(argv[0]),
                                   .n_head = atoi(argv[1]),
                                   .n_embd = atoi(argv[2]),
                                   .block_size = atoi(argv[3]),
                                   .vocab_size = atoi(argv[4])};
    uint64_t seed = strtoull(argv[5], NULL, 10);
    struct gpt_err err;
    static struct gpt_model m;
    if (gpt_model_layout(&m, &cfg, &err) < 0)
        return fail("layout", &err);
    float *p = calloc(m.n_params, sizeof(float));
    if (!p)
        return 1;
    gpt_model_init_weights_host(&m, seed, p);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    size_t V = (size_t)cfg.vocab_size, C = (size_t)cfg.n_embd;
    for (size_t i = 0; i < m.n_params; i++) {
        if (i >= V * C && i < m.Vp * C) /* wte's padding rows stay zero, as in training */
            continue;
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] += ((float)(s >> 40) / (float)(1u << 24) - 0.5f) * 0.05f;
    }
    static const float edges[] = {1e-7f,    -3e-8f,   6.1e-5f,
                                  65504.0f, 65519.0f, 65520.0f,
                                  70000.0f, -0.0f,    1.0f + 1.0f / 2048.0f,
                                  3.0e38f,  1e-40f,   0.1f};
    size_t wpe = m.tensors[1].offset;
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]) && i < C; i++)
        p[wpe + i] = edges[i];
    struct gpt_snapshot_meta meta = {0};
    meta.cfg = cfg;
    meta.vocab.kind = -1;
    meta.vocab.size = cfg.vocab_size;
    meta.step = 1;
    meta.world_size = 1;
    meta.n_params = m.n_params;
    char path[2048];
    int rc = gpt_snapshot_write(argv[6], &meta, p, NULL, NULL, path, sizeof(path), &err);
    free(p);
    if (rc < 0)
        return fail("snapshot", &err);
    printf("%s\n", path);
    return 0;
}

static int export(int argc, char **argv)
{
    const char *snap = argv[0], *fmt = argv[1], *out = argv[2], *vocab = NULL, *dtype = "f32";
    for (int i = 3; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--vocab") == 0)
            vocab = argv[i + 1];
        else if (strcmp(argv[i], "--dtype") == 0)
            dtype = argv[i + 1];
    }
    struct gpt_err err;
    struct gpt_snapshot_meta meta;
    if (gpt_snapshot_read_meta(snap, &meta, &err) < 0)
        return fail("snapshot", &err);
    float *p = malloc(meta.n_params * sizeof(float));
    if (!p || gpt_snapshot_read(snap, &meta, p, NULL, NULL, &err) < 0)
        return p ? fail("snapshot", &err) : 1;
    int rc;
    if (strcmp(fmt, "llmc") == 0) {
        rc = gpt_llmc_write_opts(out, &meta.cfg, p, vocab, NULL, &err);
    } else {
        struct gpt_gguf_write_opts o = {.dtype = GPT_GGUF_F32, .name = "fmt_convert"};
        rc = gpt_gguf_dtype_parse(dtype, &o.dtype, &err);
        if (rc == 0)
            rc = gpt_gguf_write_opts(out, &meta.cfg, p, vocab, &o, &err);
    }
    free(p);
    return rc < 0 ? fail("export", &err) : 0;
}

static int import(char **argv)
{
    struct gpt_model_config cfg;
    struct gpt_err err;
    float *p;
    size_t n;
    int rc = strcmp(argv[0], "llmc") == 0 ? gpt_llmc_read(argv[1], &cfg, &p, &n, &err)
                                          : gpt_gguf_read(argv[1], &cfg, &p, &n, &err);
    if (rc < 0)
        return fail("import", &err);
    /* The export table's way (probe, layout, load) must read the same
     * values, and refuse a layout of another config. */
    int llmc = strcmp(argv[0], "llmc") == 0;
    struct gpt_model_config pcfg;
    static struct gpt_model m;
    rc = llmc ? gpt_llmc_probe(argv[1], &pcfg, &err) : gpt_gguf_probe(argv[1], &pcfg, &err);
    if (rc < 0)
        return fail("probe", &err);
    if (memcmp(&pcfg, &cfg, sizeof(cfg)) != 0 || gpt_model_layout(&m, &pcfg, &err) < 0 ||
        m.n_params != n) {
        fprintf(stderr, "fmt_convert: probe disagrees with read\n");
        return 1;
    }
    float *q = malloc(n * sizeof(float));
    if (!q)
        return 1;
    rc = llmc ? gpt_llmc_load(argv[1], &m, q, &err) : gpt_gguf_load(argv[1], &m, q, &err);
    if (rc < 0)
        return fail("load", &err);
    if (memcmp(p, q, n * sizeof(float)) != 0) {
        fprintf(stderr, "fmt_convert: load disagrees with read\n");
        return 1;
    }
    pcfg.block_size++;
    if (gpt_model_layout(&m, &pcfg, &err) < 0)
        return fail("layout", &err);
    float *big = malloc(m.n_params * sizeof(float));
    rc = !big   ? -1
         : llmc ? gpt_llmc_load(argv[1], &m, big, &err)
                : gpt_gguf_load(argv[1], &m, big, &err);
    free(big);
    free(q);
    if (rc != -EINVAL || !strstr(err.msg, "is not the one asked for")) {
        fprintf(stderr, "fmt_convert: load into another config gave %d: %s\n", rc, err.msg);
        return 1;
    }
    FILE *f = fopen(argv[2], "wb");
    if (!f || fwrite(p, sizeof(float), n, f) != n || fclose(f) != 0) {
        perror(argv[2]);
        return 1;
    }
    free(p);
    printf("{\"n_layer\": %d, \"n_head\": %d, \"n_embd\": %d, \"block_size\": %d, "
           "\"vocab_size\": %d, \"n_params\": %zu}\n",
           cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size, cfg.vocab_size, n);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 9 && strcmp(argv[1], "mksnap") == 0)
        return mksnap(argv + 2);
    if (argc >= 5 && strcmp(argv[1], "export") == 0)
        return export(argc - 2, argv + 2);
    if (argc == 5 && strcmp(argv[1], "import") == 0)
        return import(argv + 2);
    fprintf(stderr,
            "usage: fmt_convert mksnap L NH C T V SEED DIR\n"
            "       fmt_convert export SNAPSHOT.gpts llmc|gguf OUT [--dtype T] [--vocab DIR]\n"
            "       fmt_convert import llmc|gguf FILE RAW\n");
    return 2;
}
