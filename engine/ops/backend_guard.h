/*
 * backend_guard: the run-time check of a backend's first attention
 * backward against its reference variant (backend.h's attention_guard
 * and attention_fallback slots). Private to the backend front end.
 */
#ifndef GPT_BACKEND_GUARD_H
#define GPT_BACKEND_GUARD_H

#include <stddef.h>

struct gpt_backend;

/* After the backward that wrote dqkv (same arguments): has the backend
 * recompute batch 0, head 0 with the reference variant, compares, and
 * on a mismatch writes the note, says so on stderr, switches to the
 * reference (attention_fallback) and runs this backward again, so dqkv
 * holds the reference's gradient. Synchronises the backend (two
 * downloads); owner thread. */
void gpt_backend_guard_attention(struct gpt_backend *be, float *dqkv, float *scratch,
                                 const float *dout, const float *out, const float *qkv,
                                 const float *att, size_t B, size_t T, size_t C, size_t NH);

/* The comparison: head 0's dq, dk and dv columns of T rows of width 3C,
 * got against ref, each part on its own: 0 when every value is finite
 * and each part's largest difference is at most GPT_GUARD_TOL of that
 * part's largest magnitude in ref, else -1. *ret_ratio gets the worst
 * part's ratio (NAN where a value is not finite), *ret_part that part (0
 * dq, 1 dk, 2 dv). Pure. */
int gpt_backend_guard_compare(const float *got, const float *ref, size_t T, size_t C, size_t hs,
                              double *ret_ratio, int *ret_part);

/* test_gpu_ops' bound for variants that sum in another order than the
 * reference (an fp32 ordering difference is ~1e-6 of the largest value;
 * a wrong tile, mask or D is 1e-2 and up). */
#define GPT_GUARD_TOL 1e-3

#endif
