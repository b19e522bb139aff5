/*
 * backend_guard: see backend_guard.h. A kernel variant that computes a
 * wrong dQ (or dK, dV) would train on silently: nothing else at run time
 * compares gradients. So a backend's first attention backward is
 * recomputed for one (batch, head) slice with the reference variant;
 * a mismatch falls back to the reference for the rest of the process.
 * Runs on the backend's owner thread, once per backend.
 */
#include "backend_guard.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"

int gpt_backend_guard_compare(const float *got, const float *ref, size_t T, size_t C, size_t hs,
                              double *ret_ratio, int *ret_part)
{
    double worst = 0;
    int worst_part = 0, bad_part = -1;     /* bad: the first part with a value not finite */
    for (int part = 0; part < 3; part++) { /* dq, dk, dv */
        double diff = 0, max = 0;
        for (size_t t = 0; t < T; t++)
            for (size_t j = 0; j < hs; j++) {
                size_t at = t * 3 * C + (size_t)part * C + j;
                double g = got[at], r = ref[at];
                if (!isfinite(g) || !isfinite(r)) {
                    bad_part = bad_part < 0 ? part : bad_part;
                    continue;
                }
                diff = fmax(diff, fabs(g - r));
                max = fmax(max, fabs(r));
            }
        double ratio = diff == 0 ? 0 : max > 0 ? diff / max : INFINITY;
        if (ratio > worst) {
            worst = ratio;
            worst_part = part;
        }
    }
    *ret_ratio = bad_part >= 0 ? NAN : worst;
    *ret_part = bad_part >= 0 ? bad_part : worst_part;
    return bad_part < 0 && worst <= GPT_GUARD_TOL ? 0 : -1;
}

void gpt_backend_guard_attention(struct gpt_backend *be, float *dqkv, float *scratch,
                                 const float *dout, const float *out, const float *qkv,
                                 const float *att, size_t B, size_t T, size_t C, size_t NH)
{
    size_t n = T * 3 * C, hs = C / NH;
    float *ref = NULL, *host = malloc(2 * n * sizeof(float));
    static const char *const parts[3] = {"dq", "dk", "dv"};
    double ratio = 0;
    int rc, part = 0;
    if (!host || gpt_backend_alloc(be, n * sizeof(float), (void **)&ref) < 0) {
        snprintf(be->attn_guard_note, sizeof(be->attn_guard_note),
                 "attention backward not checked: out of memory");
        goto out;
    }
    gpt_backend_memzero(be, ref, n * sizeof(float));
    /* batch 0 of the variant's dqkv, then the reference's */
    if ((rc = gpt_backend_download(be, host, dqkv, n * sizeof(float))) < 0 ||
        (rc = be->ops->attention_guard(be, ref, scratch, dout, out, qkv, att, B, T, C, NH)) < 0 ||
        (rc = gpt_backend_download(be, host + n, ref, n * sizeof(float))) < 0) {
        if (rc != -ENOTSUP)
            snprintf(be->attn_guard_note, sizeof(be->attn_guard_note),
                     "attention backward not checked: the reference failed (%d)", rc);
        goto out;
    }
    if (gpt_backend_guard_compare(host, host + n, T, C, hs, &ratio, &part) == 0) {
        snprintf(be->attn_guard_note, sizeof(be->attn_guard_note),
                 "attention backward checked against the reference variant (batch 0, head 0, "
                 "T %zu, hs %zu): largest difference %.2g of the largest value (%s)",
                 T, hs, ratio, parts[part]);
        goto out;
    }
    snprintf(be->attn_guard_note, sizeof(be->attn_guard_note),
             "attention backward MISMATCH against the reference variant (batch 0, head 0, T %zu, "
             "hs %zu): %s differs by %.2g of its largest value (bound %.0e; nan: a value not "
             "finite): fell back to the reference variant",
             T, hs, parts[part], ratio, GPT_GUARD_TOL);
    /* The engine logs nothing itself; this is the exception a silent
     * wrong gradient earns: the trainer's event may go nowhere (gptd
     * run without --json). */
    fprintf(stderr, "gptd: %s\n", be->attn_guard_note);
    be->attn_guard_bad = 1;
    be->ops->attention_fallback(be);
    be->ops->attention_backward(be, dqkv, scratch, dout, out, qkv, att, B, T, C, NH);
out:
    gpt_backend_mem_free(be, ref);
    free(host);
}

const char *gpt_backend_attention_guard_note(const struct gpt_backend *be, int *ret_bad)
{
    if (ret_bad)
        *ret_bad = be->attn_guard_bad;
    return be->attn_guard_note;
}
