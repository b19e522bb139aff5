/*
 * metric_csv: metric records (struct gpt_metric) as CSV rows, for
 * spreadsheets and pandas: `gptctl logs --csv` and the HTTP API's
 * /api/jobs/ID/metrics?format=csv print the same columns from here.
 * Pure.
 *
 * Columns (stable, the metric JSON keys of metric.h that the database
 * keeps): run_id,step,max_steps,epoch,loss,val_loss,accuracy,lr,grad_norm,
 * tokens_per_s,ms_per_step,mfu,eta_s,tokens,world_size,mem_params_bytes,
 * mem_grads_bytes,mem_optim_bytes,mem_acts_bytes,time. A value that is not
 * known (no eval at that step: val_loss, accuracy; no MFU) is an empty
 * field; numbers are the shortest text that reads back as the same double.
 * No field needs quoting: every one is a number.
 */
#ifndef GPT_METRIC_CSV_H
#define GPT_METRIC_CSV_H

#include <stddef.h>

#include "gpt_record.h"

#define GPT_METRIC_CSV_LINE_MAX 512 /* a row, newline and NUL included */

/* The header line, with its newline; static storage. */
const char *gpt_metric_csv_header(void);

/* Writes m's row, newline-terminated, into buf (cap bytes, at least
 * GPT_METRIC_CSV_LINE_MAX always suffices). Returns its length, or
 * -ENOSPC when cap is too small (buf then holds a truncated row). */
int gpt_metric_csv_row(const struct gpt_metric *m, char *buf, size_t cap);

#endif
