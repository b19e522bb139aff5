/*
 * safetensors: Hugging Face's tensor file, read and written.
 *   u64 LE   N, the header's length in bytes
 *   N bytes  a JSON object: name -> {"dtype", "shape": [...], "data_offsets":
 *            [begin, end]} (offsets relative to the byte buffer after the
 *            header), and an optional "__metadata__" object of strings
 *   bytes    the byte buffer: every tensor's data, little-endian, row-major,
 *            covering the buffer exactly (no holes, no overlaps)
 * The reader takes the file as hostile: the header length, every offset,
 * shape and dtype are checked against each other and the file size before a
 * byte of tensor data is read. F32, F16 and BF16 are read (converted to
 * float); F32 is written.
 *
 * Blocking file I/O on the calling thread; no globals; any thread.
 */
#ifndef GPT_SAFETENSORS_H
#define GPT_SAFETENSORS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "gpt_err.h"

#define GPT_ST_HEADER_MAX  (100u << 20) /* a longer header is refused (as the reference reader) */
#define GPT_ST_TENSORS_MAX 4096         /* tensors per file */
#define GPT_ST_NAME_MAX    256          /* bytes of a tensor name, NUL included */
#define GPT_ST_NDIM_MAX    4

enum gpt_st_dtype {
    GPT_ST_F32 = 0,
    GPT_ST_F16,
    GPT_ST_BF16,
};

struct gpt_st_tensor {
    char name[GPT_ST_NAME_MAX];
    enum gpt_st_dtype dtype;
    int ndim;
    uint64_t shape[GPT_ST_NDIM_MAX];
    uint64_t count;      /* elements: the shape's product */
    uint64_t begin, end; /* byte offsets in the data buffer */
};

/* A parsed header. Tensors sorted by begin offset. */
struct gpt_st_index {
    size_t n;
    struct gpt_st_tensor *t; /* owned (malloc'd) */
    uint64_t data_start;     /* file offset of the byte buffer: 8 + N */
};

/* Parses and checks a header held in memory: `buf` holds the file's first
 * `len` bytes (at least 8 + N of them), `file_size` is the whole file's size.
 * Fills *ret (free with gpt_st_index_done) only on success; -GPT_E_CORRUPT
 * with err naming `name` and what is wrong otherwise. Pure: the fuzz entry. */
int gpt_st_parse_header(const void *buf, size_t len, uint64_t file_size, const char *name,
                        struct gpt_st_index *ret, struct gpt_err *err);

/* Frees what parse filled; a zeroed index is fine. */
void gpt_st_index_done(struct gpt_st_index *ix);

/* The tensor called `name`, or NULL. */
const struct gpt_st_tensor *gpt_st_find(const struct gpt_st_index *ix, const char *name);

/* An open file: its index and descriptor. */
struct gpt_st_file {
    int fd;
    uint64_t size;
    char path[1024];
    struct gpt_st_index ix;
};

/* Opens `path` (O_NOFOLLOW is not used: the caller chose the file; a
 * non-regular file is refused), reads and checks its header. On failure
 * nothing stays open. */
int gpt_st_open(const char *path, struct gpt_st_file *ret, struct gpt_err *err);

/* Reads tensor t into `out` (t->count floats, converted from its dtype). */
int gpt_st_read_f32(const struct gpt_st_file *f, const struct gpt_st_tensor *t, float *out,
                    struct gpt_err *err);

/* Closes; a zeroed or failed file is fine (fd < 0 or 0 from calloc is
 * handled by the caller setting fd = -1 first; gpt_st_open does). */
void gpt_st_close(struct gpt_st_file *f);

/* One tensor to write: `data` holds rows x cols floats (cols = 1 for 1-D
 * tensors, shape then [rows]); with `transpose`, the file gets the
 * (cols, rows) transpose. */
struct gpt_st_out {
    const char *name;
    const float *data;
    uint64_t rows, cols;
    int ndim; /* 1 or 2 */
    int transpose;
};

/* Writes a safetensors file of F32 tensors, in the order given, to the
 * open descriptor `fd` (buffered; the caller syncs, renames and closes).
 * `metadata` (may be NULL) is a NULL-terminated list of key, value strings
 * for "__metadata__". cancel (may be NULL) is checked between tensors
 * (-ECANCELED). */
int gpt_st_write_fd(int fd, const struct gpt_st_out *t, size_t n, const char *const *metadata,
                    const atomic_int *cancel, struct gpt_err *err);

/* IEEE half and bfloat16 to float (exact). */
float gpt_st_f16_to_f32(uint16_t h);
float gpt_st_bf16_to_f32(uint16_t b);

#endif
