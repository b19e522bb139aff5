/*
 * nvml_text: a node's GPU readings as the short text its heartbeat carries,
 * and back (see nvml.h). Pure; any thread.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "nvml.h"

#define NVML_MIB          (UINT64_C(1) << 20)
#define NVML_TEXT_MIB_MAX (UINT64_C(1) << 40) /* an exabyte: nothing real is larger */

size_t nvml_gpus_format(const struct nvml_gpu *g, size_t n, char *buf, size_t cap)
{
    size_t len = 0;
    if (cap)
        buf[0] = '\0';
    for (size_t i = 0; i < n && i < NVML_GPUS_WIRE_MAX; i++) {
        char util[8] = "-", used[24] = "-", total[24] = "-", e[80];
        if (g[i].has_util) {
            double pct = g[i].util_ratio * 100.0 + 0.5;
            snprintf(util, sizeof(util), "%u", pct < 0 ? 0u : pct > 100 ? 100u : (unsigned)pct);
        }
        if (g[i].has_mem && g[i].mem_used_bytes <= g[i].mem_total_bytes &&
            g[i].mem_total_bytes / NVML_MIB <= NVML_TEXT_MIB_MAX) {
            snprintf(used, sizeof(used), "%" PRIu64, g[i].mem_used_bytes / NVML_MIB);
            snprintf(total, sizeof(total), "%" PRIu64, g[i].mem_total_bytes / NVML_MIB);
        }
        int k = snprintf(e, sizeof(e), "%s%u:%s:%s:%s", i ? "," : "", g[i].index % NVML_GPUS_MAX,
                         util, used, total);
        if (k < 0 || len + (size_t)k + 1 > cap)
            break;
        memcpy(buf + len, e, (size_t)k + 1);
        len += (size_t)k;
    }
    return len;
}

/* A decimal in [0, max] or "-" (*ret_has false), ending at `end`. */
static int nvml_text_num(const char *p, const char *end, uint64_t max, uint64_t *ret, bool *ret_has)
{
    size_t n = (size_t)(end - p);
    if (n == 1 && *p == '-') {
        *ret_has = false;
        *ret = 0;
        return 0;
    }
    if (n == 0 || n > 15 || (n > 1 && *p == '0'))
        return -EINVAL;
    uint64_t v = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return -EINVAL;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v > max)
        return -EINVAL;
    *ret = v;
    *ret_has = true;
    return 0;
}

int nvml_gpus_parse(const char *s, struct nvml_gpu *out, size_t cap, size_t *ret_n,
                    struct gpt_err *err)
{
    size_t n = 0;
    if (strlen(s) >= NVML_GPUS_TEXT_MAX)
        return gpt_err_set(err, -EINVAL, "gpu", "gpu: longer than %d bytes",
                           NVML_GPUS_TEXT_MAX - 1);
    const char *p = s;
    while (*p) {
        if (n == cap || n == NVML_GPUS_WIRE_MAX)
            return gpt_err_set(err, -EINVAL, "gpu", "gpu: more than %zu entries",
                               cap < NVML_GPUS_WIRE_MAX ? cap : (size_t)NVML_GPUS_WIRE_MAX);
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        uint64_t v[4];
        bool has[4];
        const char *q = p;
        for (int f = 0; f < 4; f++) {
            const char *c = f < 3 ? memchr(q, ':', (size_t)(end - q)) : end;
            static const uint64_t max[4] = {NVML_GPUS_MAX - 1, 100, NVML_TEXT_MIB_MAX,
                                            NVML_TEXT_MIB_MAX};
            if (!c || nvml_text_num(q, c, max[f], &v[f], &has[f]) < 0 || (f == 0 && !has[0]))
                return gpt_err_set(err, -EINVAL, "gpu",
                                   "gpu entry %zu: \"%.*s\" is not INDEX:UTIL%%:USED_MIB:TOTAL_MIB",
                                   n, (int)(end - p > 64 ? 64 : end - p), p);
            q = c + 1;
        }
        if (has[2] != has[3] || (has[2] && v[2] > v[3]))
            return gpt_err_set(err, -EINVAL, "gpu", "gpu entry %zu: used memory above total", n);
        struct nvml_gpu *g = &out[n++];
        memset(g, 0, sizeof(*g));
        g->index = (unsigned)v[0];
        g->has_util = has[1];
        g->util_ratio = (double)v[1] / 100.0;
        g->has_mem = has[2];
        g->mem_used_bytes = v[2] * NVML_MIB;
        g->mem_total_bytes = v[3] * NVML_MIB;
        if (!*end)
            break;
        p = end + 1;
        if (!*p)
            return gpt_err_set(err, -EINVAL, "gpu", "gpu: a trailing \",\"");
    }
    *ret_n = n;
    return 0;
}

json_t *nvml_gpus_json(const char *s)
{
    struct nvml_gpu g[NVML_GPUS_WIRE_MAX];
    size_t n = 0;
    struct gpt_err err;
    if (nvml_gpus_parse(s ? s : "", g, NVML_GPUS_WIRE_MAX, &n, &err) < 0)
        return json_null();
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        json_t *o = json_pack("{s:i}", "index", (int)g[i].index);
        if (!o)
            break;
        if (g[i].has_util)
            json_object_set_new(o, "util_ratio", json_real(g[i].util_ratio));
        if (g[i].has_mem) {
            json_object_set_new(o, "mem_used_bytes", json_integer((json_int_t)g[i].mem_used_bytes));
            json_object_set_new(o, "mem_total_bytes",
                                json_integer((json_int_t)g[i].mem_total_bytes));
        }
        json_array_append_new(arr, o);
    }
    return arr;
}
