/*
 * fuzz_snapshot_file: a snapshot crafted with valid checksums and lying
 * sizes, through the readers that act on a whole file (issue 36). The
 * input is a snapshot file; after mutating, its header checksum (at the
 * header length the input names) and its trailer checksum are made
 * right, so every input reaches the checks behind them. The file is then
 * read as gptd's consumers read it: the header alone, in full into
 * buffers of the header's parameter count, through a range reader, as the
 * newest of its folder, as an export loads it (gpt_fmt_load) and as
 * `gptctl sample` runs it (gpt_sample_snapshot: the model of the header's
 * configuration, then its weights). Built with AddressSanitizer: a read of
 * more floats than a buffer sized from the header holds is a report, and
 * so is any failure without a message.
 *
 * The file lives in a folder of its own under $TMPDIR (one per process,
 * removed at exit).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "export.h"
#include "model.h"
#include "snapshot.h"
#include "trainer.h"

#define FUZZ_SAMPLE_PARAMS_MAX (1u << 20) /* larger models are not sampled (time, memory) */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_dir[256];
static char fuzz_path[320];

static void fuzz_cleanup(void)
{
    unlink(fuzz_path);
    rmdir(fuzz_dir);
}

static int fuzz_setup(void)
{
    if (fuzz_dir[0])
        return 0;
    const char *tmp = getenv("TMPDIR");
    snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/fuzz-snapfile-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(fuzz_dir))
        return -1;
    snprintf(fuzz_path, sizeof(fuzz_path), "%s/snap-000000000001" GPT_SNAPSHOT_SUFFIX, fuzz_dir);
    atexit(fuzz_cleanup);
    return 0;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Both checksums made right: the header's over its first hlen - 4 bytes,
 * then the trailer's over everything before it. */
static void fix_checksums(uint8_t *buf, size_t size)
{
    if (size >= 16) {
        uint32_t hlen = (uint32_t)buf[12] | (uint32_t)buf[13] << 8 | (uint32_t)buf[14] << 16 |
                        (uint32_t)buf[15] << 24;
        if (hlen >= 16 && hlen <= size)
            put_u32(buf + hlen - 4, (uint32_t)crc32(0L, buf, hlen - 4));
    }
    if (size >= 8)
        put_u32(buf + size - 4, (uint32_t)crc32(0L, buf, (uInt)(size - 4)));
}

static int write_file(const uint8_t *buf, size_t size)
{
    FILE *f = fopen(fuzz_path, "wb");
    if (!f)
        return -1;
    size_t k = fwrite(buf, 1, size, f);
    return fclose(f) == 0 && k == size ? 0 : -1;
}

/* A failure must say what was wrong. */
static void check_failure(int rc, const struct gpt_err *err)
{
    if (rc < 0 && err->msg[0] == '\0')
        abort();
}

/* As `gptctl sample` runs it: the model of the header's configuration,
 * then the file's weights read into it. */
static void fuzz_sample(void)
{
    struct gpt_snapshot_meta meta;
    struct gpt_model lay;
    struct gpt_err err = {0};
    if (gpt_snapshot_read_meta(fuzz_path, &meta, &err) < 0 ||
        gpt_model_layout(&lay, &meta.cfg, &err) < 0 || lay.n_params > FUZZ_SAMPLE_PARAMS_MAX ||
        meta.cfg.block_size > 64)
        return;
    struct gpt_sample_opts o = {.prompt_ids = (const int32_t[]){0},
                                .n_prompt_ids = 1,
                                .tokens = 1,
                                .temperature = 1.0,
                                .seed = 1,
                                .threads = 1};
    char *text = NULL;
    gpt_err_clear(&err);
    int rc = gpt_sample_snapshot(fuzz_path, &o, &text, &err);
    check_failure(rc, &err);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fuzz_setup() < 0)
        return 0;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    fix_checksums(buf, size);
    if (write_file(buf, size) < 0) {
        free(buf);
        return 0;
    }
    free(buf);

    struct gpt_snapshot_meta meta, full;
    struct gpt_err err = {0};
    int rc = gpt_snapshot_read_meta(fuzz_path, &meta, &err);
    check_failure(rc, &err);
    if (rc < 0)
        return 0;
    /* A plain file that parses holds exactly its arrays: buffers of the
     * header's count are bounded by the input. */
    uint64_t arrays = meta.has_moments ? 3 : 1;
    if (!meta.sliced && meta.n_params * 4 * arrays > size)
        abort();
    if (!meta.sliced) {
        float *p = malloc(meta.n_params * 4 + 4);
        float *m = meta.has_moments ? malloc(meta.n_params * 4 + 4) : NULL;
        float *v = meta.has_moments ? malloc(meta.n_params * 4 + 4) : NULL;
        if (p && (!meta.has_moments || (m && v))) {
            gpt_err_clear(&err);
            rc = gpt_snapshot_read(fuzz_path, &full, p, m, v, &err);
            /* Both checksums are right and the header parsed: it reads. */
            if (rc < 0 || full.n_params != meta.n_params)
                abort();
            gpt_err_clear(&err);
            rc = gpt_snapshot_read_sized(fuzz_path, meta.n_params + 1, &full, p, m, v, &err);
            if (rc >= 0)
                abort(); /* another count is refused before anything is read */
            check_failure(rc, &err);
        }
        free(p);
        free(m);
        free(v);
    }
    /* A range reader: the last float of each array, and one past it. */
    struct gpt_snapshot_reader *r = NULL;
    gpt_err_clear(&err);
    rc = gpt_snapshot_reader_open(fuzz_path, &full, &r, &err);
    check_failure(rc, &err);
    if (rc == 0) {
        float x[2];
        for (int which = 0; which < (int)arrays; which++) {
            gpt_err_clear(&err);
            rc = gpt_snapshot_reader_read(r, which, full.n_params - 1, 1, x, &err);
            check_failure(rc, &err);
            gpt_err_clear(&err);
            if (gpt_snapshot_reader_read(r, which, full.n_params, 1, x, &err) >= 0)
                abort(); /* past the array */
        }
        gpt_snapshot_reader_close(r);
    }
    gpt_err_clear(&err);
    rc = gpt_snapshot_newest(fuzz_dir, NULL, 0, &full, NULL, NULL, &err);
    check_failure(rc, &err);
    struct gpt_fmt_loaded l;
    gpt_err_clear(&err);
    rc = gpt_fmt_load(fuzz_path, &l, &err);
    check_failure(rc, &err);
    if (rc == 0) {
        if (l.n_params != meta.n_params)
            abort();
        gpt_fmt_loaded_done(&l);
    }
    fuzz_sample();
    return 0;
}
