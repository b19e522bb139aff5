/*
 * fuzz_snapshot_manifest: libFuzzer target for the manifest of a sharded
 * snapshot (gpt_snapshot_manifest_parse). The input is a whole manifest
 * file. For inputs of odd length both checksums (the header's and the
 * trailer's) are recomputed first, so the fuzzer reaches the slice table
 * checks behind them. Whatever parses must be self-consistent: the slices'
 * pieces stay inside n_params and add up to it, and each slice's size is
 * its header, arrays and trailer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "snapshot.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void put_crc(uint8_t *p, uint32_t crc)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(crc >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    if ((size & 1) && size >= 520) {
        uint32_t hlen = (uint32_t)buf[12] | (uint32_t)buf[13] << 8 | (uint32_t)buf[14] << 16 |
                        (uint32_t)buf[15] << 24;
        if (hlen >= 16 && (uint64_t)hlen + 4 <= size) {
            put_crc(buf + hlen - 4, (uint32_t)crc32(0L, buf, hlen - 4));
            put_crc(buf + size - 4, (uint32_t)crc32(0L, buf, (uInt)(size - 4)));
        }
    }
    struct gpt_snapshot_meta meta;
    struct gpt_snapshot_manifest *man = NULL;
    struct gpt_err err;
    int rc = gpt_snapshot_manifest_parse(buf, size, "fuzz", &meta, &man, &err);
    if (rc == 0) {
        uint64_t covered = 0, total = size, arrays = meta.has_moments ? 3 : 1;
        if (!meta.sliced || man->n_slices == 0)
            abort();
        for (uint32_t s = 0; s < man->n_slices; s++) {
            const struct gpt_snapshot_slice *sl = &man->slices[s];
            uint64_t sum = 0;
            for (uint32_t i = 0; i < sl->n_pieces; i++) {
                const struct gpt_snapshot_piece *p = &sl->pieces[i];
                if (p->len == 0 || p->off + p->len > meta.n_params)
                    abort();
                sum += p->len;
            }
            if (sum != sl->floats || sl->bytes != 64 + sum * 4 * arrays + 4)
                abort();
            covered += sum;
            total += sl->bytes;
        }
        if (covered != meta.n_params || total != man->total_bytes)
            abort();
        gpt_snapshot_manifest_free(man);
    } else if (err.msg[0] == '\0' || man) {
        abort(); /* every failure names what was wrong and returns nothing */
    }
    free(buf);
    return 0;
}
