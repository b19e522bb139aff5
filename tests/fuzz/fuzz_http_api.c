/*
 * libFuzzer target: daemon/http_api's URL routing and count parsing (the
 * dashboard's /api/jobs/ID/...?since=STEP). The input is split at the
 * first NUL into a path and a since value (absent when there is no NUL).
 * Whatever the bytes: no crash or out-of-bounds read; a route is either
 * not ours, refused with an error naming "job" or "since", or a job > 0
 * and a since >= 0 whose decimal forms appear in the input as given; and
 * the error document built from any message is valid JSON.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_err.h"
#include "http_api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *buf = malloc(size + 1);
    GPT_ASSERT(buf);
    memcpy(buf, data, size);
    buf[size] = '\0';
    const char *url = buf;
    size_t ulen = strlen(buf);
    const char *since = ulen < size ? buf + ulen + 1 : NULL;

    struct http_api_route r;
    struct gpt_err err;
    gpt_err_clear(&err);
    int rc = http_api_route(url, since, &r, &err);
    if (rc < 0) {
        GPT_ASSERT(rc == -EINVAL);
        GPT_ASSERT(strcmp(err.path, "job") == 0 || strcmp(err.path, "since") == 0);
        char *doc = http_api_dump(json_pack("{s:o}", "error", http_api_string(err.msg)));
        GPT_ASSERT(doc);
        json_t *e = json_loads(doc, 0, NULL);
        GPT_ASSERT(e);
        json_decref(e);
        free(doc);
    } else if (r.what >= HTTP_API_METRICS) {
        GPT_ASSERT(r.job > 0 && r.since >= 0);
        char id[32];
        snprintf(id, sizeof(id), "/%" PRId64 "/", r.job);
        GPT_ASSERT(strstr(url, id) != NULL);
        if (since) {
            char s[32];
            snprintf(s, sizeof(s), "%" PRId64, r.since);
            GPT_ASSERT(strcmp(s, since) == 0);
        }
    } else {
        GPT_ASSERT(r.job == 0);
    }
    int64_t v = -1;
    if (http_api_parse_count(url, &v) == 0) {
        char s[32];
        snprintf(s, sizeof(s), "%" PRId64, v);
        GPT_ASSERT(v >= 0 && strcmp(s, url) == 0);
    }
    /* Any bytes as a job name: the document is valid JSON. */
    struct metrics_job j;
    memset(&j, 0, sizeof(j));
    snprintf(j.name, sizeof(j.name), "%s", url);
    j.id = 1;
    j.state = "running";
    char *doc = http_api_dump(http_api_job_json(&j));
    GPT_ASSERT(doc);
    json_t *back = json_loads(doc, 0, NULL);
    GPT_ASSERT(back && !strstr(doc, "</"));
    json_decref(back);
    free(doc);
    free(buf);
    return 0;
}
