/*
 * metric_text: one metric as the one-line text that `gptd run` and
 * `gptctl logs` both print ("step 30/300 | epoch 1 | loss 2.0959 | val
 * 2.0738 | acc 12.5% | lr 1.02e-04 | 26.9k tok/s | 3.6 ms/step | mfu 1.2% |
 * eta 0:05"): values that are unknown (no eval at this step, no MFU on a
 * host without a known peak) are left out. Pure.
 */
#ifndef GPT_METRIC_TEXT_H
#define GPT_METRIC_TEXT_H

#include <stddef.h>

#include "metric.h"

#define GPT_METRIC_LINE_MAX 256

/* Writes the line (no newline) into buf; returns buf. */
const char *gpt_metric_line(const struct gpt_metric *m, char *buf, size_t cap);

#endif
