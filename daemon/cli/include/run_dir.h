/*
 * run_dir: the folder a foreground run (`gptd run`) keeps its records in,
 * as Hydra gives every run an output folder: its snapshots, metrics.jsonl
 * (every metric and event, one JSON object a line, as `gptd run --json`
 * prints them), spec.json (the resolved job) and overrides.json (the
 * command line's a.b=value overrides). By default each run gets a new
 * folder run-YYYYmmdd-HHMMSS under the job's snapshot folder, so running
 * the same command twice keeps both runs.
 *
 * Called from gptd run's main thread, except run_dir_record_line (any
 * thread, under the caller's lock). Blocks (file I/O).
 */
#ifndef GPTD_RUN_DIR_H
#define GPTD_RUN_DIR_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gpt_err.h"
#include "jobspec.h"

#define RUN_DIR_METRICS   "metrics.jsonl"
#define RUN_DIR_SPEC      "spec.json"
#define RUN_DIR_OVERRIDES "overrides.json"

/* Makes a new run folder under `root` (created if missing):
 * root/run-YYYYmmdd-HHMMSS, or with -2, -3 ... when that exists. Its path
 * in ret. 0 or a negative errno (err says which folder). */
int run_dir_make(const char *root, char *ret, size_t cap, struct gpt_err *err);

/* The newest run folder under root (the last run-* by name that has an
 * owner marker, i.e. a run's own folder) into ret: 0, or -ENOENT when
 * there is none. */
int run_dir_newest(const char *root, char *ret, size_t cap);

/* --overwrite: removes what an earlier run left in dir (its snapshots,
 * owner marker and records; nothing else), so a fresh run may take it.
 * 0, or a negative errno (err names the file). */
int run_dir_clear(const char *dir, struct gpt_err *err);

/* Writes spec.json and overrides.json into dir and opens metrics.jsonl
 * (appended to on a resume, `append`) into *ret (the caller fcloses it).
 * 0 or a negative errno (err names the file). */
int run_dir_record(const char *dir, const struct gpt_job *job, const char *const *over,
                   size_t n_over, bool append, FILE **ret, struct gpt_err *err);

/* Appends one record (taken) to metrics.jsonl; NULL f or o: nothing. */
void run_dir_record_line(FILE *f, json_t *o);

/* What a run folder's metrics.jsonl adds up to. */
struct run_dir_sum {
    double best_val_loss, final_loss; /* NAN: none */
    int64_t steps, tokens;
};

/* Reads dir's metrics.jsonl. 0, or a negative errno when it cannot be read. */
int run_dir_summary(const char *dir, struct run_dir_sum *ret);

#endif
