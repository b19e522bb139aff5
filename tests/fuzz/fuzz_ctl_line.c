/*
 * libFuzzer target: the control-line decoder and the bounded line splitter
 * (proto/ctl). Input bytes are pushed through gpt_ctl_linebuf in uneven
 * chunks, every complete line is decoded, and each decoded request (or its
 * error) is encoded back as a reply, which must be one valid JSON line.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

static void check_reply(char *line, size_t len)
{
    GPT_ASSERT(line);
    GPT_ASSERT(len > 0 && line[len - 1] == '\n');
    GPT_ASSERT(memchr(line, '\n', len - 1) == NULL);
    json_t *o = json_loadb(line, len, 0, NULL);
    GPT_ASSERT(json_is_object(o));
    json_decref(o);
    free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gpt_ctl_linebuf lb;
    /* A small bound so the too-long paths are reached with small inputs. */
    gpt_ctl_linebuf_init(&lb, 4096);
    size_t off = 0, chunk = 1;
    while (off < size) {
        size_t n = size - off < chunk ? size - off : chunk;
        int rc = gpt_ctl_linebuf_push(&lb, (const char *)data + off, n);
        off += n;
        chunk = chunk * 3 + 1;
        const char *line;
        size_t len;
        int k;
        while ((k = gpt_ctl_linebuf_next(&lb, &line, &len)) != 0) {
            if (k < 0)
                continue;
            GPT_ASSERT(len <= 4096);
            struct gpt_ctl_request req;
            struct gpt_err err;
            gpt_err_clear(&err);
            int drc = gpt_ctl_request_decode(line, len, &req, &err);
            size_t n_out = 0;
            char *out =
                drc < 0 ? gpt_ctl_reply_from_err(req.id, drc, &err, &n_out)
                        : gpt_ctl_reply_ok(
                              req.id, json_pack("{s:s}", "op", gpt_ctl_op_name(req.op)), &n_out);
            if (drc == 0)
                GPT_ASSERT(req.op >= 0 && req.op < GPT_CTL_OP_COUNT);
            check_reply(out, n_out);
            gpt_ctl_request_done(&req);
        }
        if (rc < 0)
            break; /* too long: the server closes the connection here */
    }
    gpt_ctl_linebuf_done(&lb);
    return 0;
}
