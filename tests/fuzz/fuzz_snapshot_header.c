/*
 * fuzz_snapshot_header: libFuzzer target for the snapshot header reader
 * (gpt_snapshot_parse_header). The input is a whole snapshot file. For
 * inputs of odd length the header checksum is recomputed first, so the
 * fuzzer also reaches the field checks behind it instead of stopping at
 * the checksum every time. The same bytes also go to the parser of a
 * snapshot folder's owner marker (gpt_snapshot_owner_parse).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "snapshot.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    if ((size & 1) && size >= 16) {
        uint32_t hlen = (uint32_t)buf[12] | (uint32_t)buf[13] << 8 | (uint32_t)buf[14] << 16 |
                        (uint32_t)buf[15] << 24;
        if (hlen >= 16 && hlen <= size) {
            uint32_t crc = (uint32_t)crc32(0L, buf, hlen - 4);
            for (int i = 0; i < 4; i++)
                buf[hlen - 4 + (uint32_t)i] = (uint8_t)(crc >> (8 * i));
        }
    }
    struct gpt_snapshot_meta meta;
    struct gpt_err err = {0};
    size_t hlen;
    int rc = gpt_snapshot_parse_header(buf, size, size, "fuzz", &meta, &hlen, &err);
    if (rc == 0) {
        /* Whatever parses must describe exactly this many bytes (a
         * manifest's size is its table's: fuzz_snapshot_manifest). */
        uint64_t arrays = meta.has_moments ? 3 : 1;
        if (!meta.sliced && hlen + 4 + meta.n_params * 4 * arrays != size)
            abort();
    } else if (err.msg[0] == '\0') {
        abort(); /* every failure names what was wrong */
    }
    gpt_err_clear(&err);
    /* The owner marker: what parses names a real owner, and every
     * failure says what was wrong. */
    struct gpt_snapshot_owner owner;
    rc = gpt_snapshot_owner_parse((const char *)data, size, &owner, &err);
    if (rc == 0 && owner.token == 0)
        abort();
    if (rc < 0 && err.msg[0] == '\0')
        abort();
    free(buf);
    return 0;
}
