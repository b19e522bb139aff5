/*
 * trainer: the step loop of one rank (see trainer.h).
 *
 * One optimizer step consumes exactly trainer.global_batch sequences of the
 * global data stream at any world size: rank r takes the r-th contiguous
 * share (whole sequences; shares differ by at most one), split into the
 * same number of micro-batches of at most trainer.micro_batch on every
 * rank (gradient accumulation; trainer_batch_plan). Each micro-batch's
 * gradient is weighted by its sequences over the global batch, so the
 * update and the logged loss are the mean over the global batch and the
 * optimisation is the same for any world size. On the last micro-batch the
 * model reports finished gradient spans (grads_ready) and a communication
 * thread all-reduces them while backward carries on with earlier layers.
 *
 * Everything here runs on the worker thread, except trainer_ddp.c's
 * communication thread, which owns the communicator while a backward is in
 * flight. The start state and snapshots are in trainer_state.c; sampling
 * from a snapshot is in sample.c.
 */
#include "trainer.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "blas_core.h"
#include "data.h"
#include "model.h"
#include "optim.h"
#include "peak.h"
#include "shard.h"
#include "trainer_ddp.h"
#include "trainer_impl.h"

/* ---- set-up ---- */

/* GPTD_TEST_STEP_DIVISOR=N (tests only, gptd(8)): every job trains
 * ceil(trainer.max_steps / N) steps, so a test can paste the README's
 * commands, step counts and all, and each still finishes in seconds;
 * extending a job (max_steps 600, then 1200) keeps its proportions. */
static int64_t test_step_divisor(void)
{
    const char *env = getenv("GPTD_TEST_STEP_DIVISOR");
    long long d = env ? strtoll(env, NULL, 10) : 1;
    return d > 1 ? d : 1;
}

static int64_t plan_max_steps(const struct trainer *t)
{
    const struct gpt_trainer_spec *ts = &t->job->trainer;
    int64_t div = test_step_divisor();
    int64_t steps = ts->max_steps > 0 ? (ts->max_steps + div - 1) / div : INT64_MAX;
    if (ts->max_epochs > 0) {
        uint64_t per_epoch = gpt_dataset_train_samples(t->ds);
        uint64_t total = per_epoch * (uint64_t)ts->max_epochs;
        int64_t by_epochs =
            (int64_t)((total + (uint64_t)ts->global_batch - 1) / (uint64_t)ts->global_batch);
        if (by_epochs < steps)
            steps = by_epochs;
    }
    return steps;
}

/* Peak FLOP/s of one rank for MFU: configured; on a device, the peak
 * table's for the math the job's precision runs (a device the table lacks
 * gets NAN, and an event that says so, not an MFU of 0); on the CPU,
 * measured once with sgemm on the model's largest matrix shape. */
static double measure_peak(struct trainer *t)
{
    const struct gpt_trainer_spec *ts = &t->job->trainer;
    if (ts->peak_gflops > 0)
        return ts->peak_gflops * 1e9;
    char name[256];
    int cc = 0;
    if (gpt_backend_device_info(t->be, name, sizeof(name), &cc) == 0) {
        enum gpt_peak_math math = t->bf16    ? GPT_PEAK_BF16
                                  : ts->tf32 ? GPT_PEAK_TF32
                                             : GPT_PEAK_FP32;
        const struct gpt_device_peak *p = gpt_peak_device_find(name, cc);
        if (!p) {
            emit_event(t, "peak",
                       "MFU unknown: no peak for %s (compute capability %d.%d) in the device "
                       "table; set trainer.peak_gflops",
                       name, cc / 10, cc % 10);
            return NAN;
        }
        emit_event(t, "peak", "MFU over %s (compute capability %d.%d): %s dense peak %.0f TFLOP/s",
                   name, cc / 10, cc % 10, gpt_peak_math_name(math), p->flops[math] / 1e12);
        return p->flops[math];
    }
    if (strcmp(t->be->name, "cpu") != 0)
        return NAN; /* a backend that names no device has no known peak */
    double peak = gpt_peak_sgemm_flops(t->B * t->T, (size_t)t->model.cfg.n_embd,
                                       4 * (size_t)t->model.cfg.n_embd, 0.1);
    /* The measured rate is the kernel's own: a generic OpenBLAS core reads
     * as a high MFU on a slow peak, so the event names the core. */
    emit_event(t, "peak", "MFU over this CPU's sgemm, %.1f GFLOP/s with OpenBLAS core %s",
               peak / 1e9, gpt_blas_core_name());
    return peak;
}

/* True when set-up failure `rc` of a rank in a world larger than one is a
 * peer having left on a stop request this rank has been given too. */
static bool setup_failure_is_stop(struct trainer *t, int rc)
{
    bool comm_lost = rc == -ECANCELED || rc == -EPIPE || rc == -ECONNRESET || rc == -ETIMEDOUT ||
                     rc == -ECONNABORTED || rc == -GPT_E_NCCL || rc == -GPT_E_PROTO;
    return t->world > 1 && comm_lost && setup_stopped(t);
}

static int open_all(struct trainer *t, struct gpt_err *err)
{
    const struct gpt_job *job = t->job;
    int rc;

    if (t->opts->backend) {
        t->be = t->opts->backend;
    } else {
        /* trainer.threads 0 (the default) means one BLAS/OpenMP thread per
         * worker: workers already run in parallel, one per core. */
        rc = gpt_backend_cpu_new(job->trainer.threads > 0 ? job->trainer.threads : 1, &t->own_be,
                                 err);
        if (rc < 0)
            return rc;
        t->be = t->own_be;
    }
    /* bf16 is a GPU feature: a backend without it (cpu) computes in fp32,
     * as the job spec's help for trainer.precision says. */
    rc = gpt_backend_set_precision(
        t->be,
        job->trainer.precision | (job->trainer.tf32 ? 0 : GPT_BACKEND_PREC_NO_TF32) |
            (job->trainer.gemm_autotune ? GPT_BACKEND_PREC_GEMM_TUNE : 0),
        job->trainer.seed);
    if (rc < 0 && rc != -ENOTSUP)
        return gpt_err_set(err, rc, "trainer.precision", "backend %s: precision not supported",
                           t->be->name);
    t->bf16 = rc == 0 && job->trainer.precision != GPT_PREC_FP32;
    rc = gpt_dataset_open_checked(&job->data, (size_t)job->model.block_size, job->trainer.seed,
                                  t->opts->data_policy, &t->ds, err);
    if (rc < 0)
        return rc;
    if (gpt_dataset_note(t->ds)[0])
        emit_event(t, "tokenize", "%s", gpt_dataset_note(t->ds));
    if (setup_stopped(t))
        return GPT_TRAIN_STOPPED;

    struct gpt_model_config cfg = job->model;
    int data_vocab = gpt_dataset_vocab_size(t->ds);
    if (cfg.vocab_size == 0)
        cfg.vocab_size = data_vocab;
    if (cfg.vocab_size < data_vocab)
        return gpt_err_set(err, -GPT_E_SPEC, "model.vocab_size",
                           "model.vocab_size is %d but the data has %d tokens", cfg.vocab_size,
                           data_vocab);
    t->T = gpt_dataset_seq_len(t->ds);
    if (t->T > (size_t)cfg.block_size)
        return gpt_err_set(err, -GPT_E_SPEC, "model.block_size",
                           "model.block_size is %d but the task needs sequences of %zu tokens",
                           cfg.block_size, t->T);

    int micro = job->trainer.micro_batch, global = job->trainer.global_batch;
    if (trainer_batch_plan(global, micro, t->world, t->rank, &t->batch) < 0)
        return gpt_err_set(err, -GPT_E_SPEC, "trainer.global_batch",
                           "trainer.global_batch (%d) is smaller than the world size (%d): every "
                           "worker needs at least one sequence per step",
                           global, t->world);
    t->B = (size_t)micro;

    int sharding = job->distributed.sharding;
    if (sharding != GPT_SHARD_NONE && (rc = gpt_shard_new(sharding, job->distributed.shard_buffers,
                                                          t->comm, t->be, &t->shard, err)) < 0)
        return rc;
    rc = gpt_model_init_cancellable(&t->model, &cfg, t->be, t->B,
                                    sharding == GPT_SHARD_FULL ? gpt_shard_units(t->shard) : NULL,
                                    setup_stopped, t, err);
    if (rc == -ECANCELED)
        return GPT_TRAIN_STOPPED;
    if (rc < 0)
        return rc;
    t->model_ready = true;
    if (setup_stopped(t))
        return GPT_TRAIN_STOPPED;
    if (t->shard)
        rc = gpt_shard_attach(t->shard, &t->model, err);
    else
        rc = gpt_model_alloc_optim(&t->model, err);
    if (rc == -ECANCELED || (rc == 0 && setup_stopped(t)))
        return GPT_TRAIN_STOPPED;
    if (rc < 0)
        return rc;

    /* One extra token per row: evaluation of synthetic tasks lays out
     * prompt + generated answer (T + 1 tokens) in it. */
    t->inputs = calloc(t->B * (t->T + 1), sizeof(int));
    t->targets = calloc(t->B * t->T, sizeof(int));
    t->logits_host = calloc(t->B * t->T * t->model.Vp, sizeof(float));
    if (!t->inputs || !t->targets || !t->logits_host)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory for batch buffers");

    const char *dir = t->opts->snapshot_dir ? t->opts->snapshot_dir : job->snapshot.dir;
    snprintf(t->snapdir, sizeof(t->snapdir), "%s", dir ? dir : "");
    if ((rc = trainer_state_snapdir_prepare(t, err)) < 0)
        return rc;
    t->max_steps = plan_max_steps(t);
    t->peak_flops = measure_peak(t);
    return 0;
}

/* ---- evaluation ---- */

/* Greedy answers to held-out synthetic problems: returns correct/total
 * for this rank's share (problems i with i % world == rank). */
static int eval_accuracy(struct trainer *t, double *correct, double *total)
{
    size_t n_problems = (size_t)t->job->trainer.eval_batches * t->B;
    int prompt[GPT_VOCAB_MAX], answer[GPT_VOCAB_MAX];
    size_t plen = 0, alen = 0;
    size_t Vp = t->model.Vp, V = (size_t)t->model.cfg.vocab_size;
    size_t S = t->T + 1; /* row stride: prompt + answer is one token longer than T */
    int rc;

    /* Every rank runs the same number of chunks: under full sharding each
     * forward is a collective, so a rank without problems left runs a
     * dummy chunk and discards it. */
    size_t per_chunk = t->B < 64 ? t->B : 64;
    size_t stride = per_chunk * (size_t)t->world;
    size_t n_chunks = (n_problems + stride - 1) / stride;
    for (size_t c = 0; c < n_chunks; c++) {
        size_t b_n = 0, first = c * stride + (size_t)t->rank;
        int answers[64][GPT_VOCAB_MAX / 4];
        for (size_t k = first; k < n_problems && b_n < per_chunk; k += (size_t)t->world, b_n++) {
            rc = gpt_dataset_val_problem(t->ds, k, prompt, &plen, answer, &alen);
            if (rc < 0)
                return rc;
            GPT_ASSERT(plen + alen <= t->T + 1 && alen <= GPT_VOCAB_MAX / 4);
            memcpy(&t->inputs[b_n * S], prompt, plen * sizeof(int));
            memcpy(answers[b_n], answer, alen * sizeof(int));
        }
        bool dummy = b_n == 0;
        if (dummy && !t->shard)
            continue;
        if (dummy) {
            if ((rc = gpt_dataset_val_problem(t->ds, 0, prompt, &plen, answer, &alen)) < 0)
                return rc;
            memcpy(t->inputs, prompt, plen * sizeof(int));
            b_n = 1;
        }
        /* Generate alen tokens; the sequence for step j has plen + j tokens. */
        for (size_t j = 0; j < alen; j++) {
            size_t len = plen + j;
            /* The batch is laid out with row stride S; forward wants (B, len)
             * contiguous, so pack rows first. */
            int *packed = t->targets; /* free during eval */
            for (size_t b = 0; b < b_n; b++)
                memcpy(&packed[b * len], &t->inputs[b * S], len * sizeof(int));
            rc = gpt_model_forward(&t->model, packed, NULL, b_n, len, NULL);
            if (rc < 0)
                return rc;
            rc = gpt_backend_download(t->be, t->logits_host, gpt_model_logits(&t->model),
                                      b_n * len * Vp * sizeof(float));
            if (rc < 0)
                return rc;
            for (size_t b = 0; b < b_n; b++) {
                const float *row = &t->logits_host[(b * len + len - 1) * Vp];
                size_t best = 0;
                for (size_t v = 1; v < V; v++)
                    if (row[v] > row[best])
                        best = v;
                t->inputs[b * S + len] = (int)best;
            }
        }
        for (size_t b = 0; b < b_n && !dummy; b++) {
            *total += 1;
            if (memcmp(&t->inputs[b * S + plen], answers[b], alen * sizeof(int)) == 0)
                *correct += 1;
        }
    }
    return 0;
}

/* Mean validation loss (and accuracy for synthetic tasks) over the world. */
static int evaluate(struct trainer *t, double *ret_loss, double *ret_acc)
{
    float sums[4] = {0, 0, 0, 0}; /* loss sum, batches, correct, total */
    int rc;
    int n = t->job->trainer.eval_batches, rounds = (n + t->world - 1) / t->world;
    for (int k = 0; k < rounds; k++) {
        /* Batch i of this rank; past the end only full sharding runs one
         * (discarded), to keep its collectives in step. */
        int i = k * t->world + t->rank;
        bool real = i < n;
        if (!real && !t->shard)
            continue;
        float loss;
        rc = gpt_dataset_val_batch(t->ds, (uint64_t)(real ? i : 0), t->B, t->inputs, t->targets,
                                   &t->data_err);
        if (rc < 0)
            return rc;
        rc = gpt_model_forward(&t->model, t->inputs, t->targets, t->B, t->T, &loss);
        if (rc < 0)
            return rc;
        if (real) {
            sums[0] += loss;
            sums[1] += 1;
        }
    }
    if (gpt_dataset_is_synthetic(t->ds)) {
        double correct = 0, total = 0;
        rc = eval_accuracy(t, &correct, &total);
        if (rc < 0)
            return rc;
        sums[2] = (float)correct;
        sums[3] = (float)total;
    }
    if (t->shard && (rc = gpt_shard_sync(t->shard)) < 0)
        return rc;
    if (t->world > 1 && (rc = gpt_comm_allreduce(t->comm, sums, 4, GPT_REDUCE_SUM)) < 0)
        return rc;
    *ret_loss = sums[1] > 0 ? sums[0] / sums[1] : NAN;
    *ret_acc = sums[3] > 0 ? sums[2] / sums[3] : NAN;
    return 0;
}

/* ---- the step ---- */

/* One optimizer step. Writes the loss (mean over the global batch) and the
 * global grad norm.
 *
 * Without sharding, on a backend with the step-on-device ops
 * (model.step_dev), the micro-batches' losses are summed on the device,
 * the norm and the clip factor stay there for the update, and both come
 * back in one download after it: the step's only synchronisation in a
 * world of one. DDP keeps one more, at the end of the last backward: the
 * rank's compute time is measured up to it, before the wait for the
 * gradients' all-reduce; without it that wait would absorb the rank's
 * own device time, which trainer_ddp_wait cannot tell from a slow peer's,
 * and rank_step_ms would hide a straggler. As on the host
 * path, the update runs before run_loop sees a non-finite loss (and
 * gpt_clip_scale's factor for a NaN norm is 1 on both), and run_loop
 * then fails the job without writing a snapshot. */
static int train_step(struct trainer *t, double *ret_loss, double *ret_norm, double *ret_lr)
{
    const struct trainer_batch *plan = &t->batch;
    int global = t->job->trainer.global_batch;
    bool dev = !t->shard && t->model.step_dev;
    double loss_sum = 0; /* sum over this rank's sequences of their mean loss */
    double t_step = monotime_s(), compute_s = 0;
    int rc;

    if (t->shard)
        gpt_shard_zero_grad(t->shard);
    else /* the first micro-batch's backward overwrites them */
        gpt_model_zero_grad_deferred(&t->model);
    for (int micro = 0; micro < plan->accum; micro++) {
        uint64_t first;
        size_t n = trainer_batch_micro(plan, micro, &first);
        /* An empty micro-batch (micro_batch 1, a rank one sequence short)
         * still runs one sequence with weight 0: full sharding's and the
         * all-reduce's collectives stay in step on every rank. */
        size_t b = n > 0 ? n : 1;
        float loss = 0;
        rc = gpt_dataset_train_batch(t->ds, &t->st.cursor, n > 0 ? first : plan->first, b,
                                     t->inputs, t->targets, &t->data_err);
        if (rc < 0)
            return rc;
        double tc = monotime_s();
        /* Loss and dlogits in one pass over the vocabulary. */
        float scale = trainer_batch_scale(n, t->world, global);
        rc = dev ? gpt_model_forward_train_acc(&t->model, t->inputs, t->targets, b, t->T, scale,
                                               (double)n, micro == 0)
                 : gpt_model_forward_train(&t->model, t->inputs, t->targets, b, t->T, scale, &loss);
        if (rc < 0)
            return rc;
        if (t->ddp.started && micro == plan->accum - 1)
            trainer_ddp_arm(&t->ddp);
        t->model.backward_async = dev && !(t->ddp.started && micro == plan->accum - 1);
        rc = gpt_model_backward(&t->model, scale);
        compute_s += monotime_s() - tc; /* before the wait for the gradients */
        if (t->ddp.started && micro == plan->accum - 1) {
            int wrc = trainer_ddp_wait(&t->ddp);
            if (rc >= 0)
                rc = wrc;
        }
        if (rc < 0)
            return rc;
        if (!dev)
            loss_sum += (double)loss * (double)n;
    }

    /* Sharded gradients first: until they are reduced the shard's thread
     * owns the communicator. */
    if (t->shard && (rc = gpt_shard_reduce_grads(t->shard)) < 0)
        return rc;
    float loss_mean = (float)(loss_sum / global);
    if (!dev && t->world > 1 &&
        (rc = gpt_comm_allreduce(t->comm, &loss_mean, 1, GPT_REDUCE_SUM)) < 0)
        return rc;

    double norm, lr = gpt_lr_at(&t->job->optimizer, t->st.step, t->max_steps);
    if (t->shard) {
        if ((rc = gpt_shard_grad_norm(t->shard, &norm)) < 0 ||
            (rc = gpt_shard_update(t->shard, &t->job->optimizer, (float)lr, t->st.step + 1,
                                   gpt_clip_scale(norm, t->job->trainer.grad_clip))) < 0)
            return rc;
    } else if (dev) {
        double sumsq;
        gpt_grad_sumsq_dev(&t->model, 0, t->model.n_params);
        gpt_adamw_update_clip_dev(&t->model, &t->job->optimizer, (float)lr, t->st.step + 1,
                                  t->job->trainer.grad_clip, 0, t->model.n_params);
        /* The step's one synchronisation: it waits for the update too. */
        if ((rc = gpt_model_step_fetch(&t->model, &loss_sum, &sumsq)) < 0)
            return rc;
        norm = sqrt(sumsq);
        /* In a world of one no backward synced, so the forward and
         * backward timed above were only enqueued: the step's wall time
         * up to here (its device work has ended) is its compute time,
         * there being no communication to leave out. */
        if (!t->ddp.started)
            compute_s = monotime_s() - t_step;
        loss_mean = (float)(loss_sum / global);
        /* The loss is not part of the update: reduced after it, as a host
         * value (NCCL stages it on the communicator's stream, not the
         * compute stream). */
        if (t->world > 1 && (rc = gpt_comm_allreduce(t->comm, &loss_mean, 1, GPT_REDUCE_SUM)) < 0)
            return rc;
    } else {
        norm = sqrt(gpt_grad_sumsq(&t->model, 0, t->model.n_params));
        gpt_adamw_update(&t->model, &t->job->optimizer, (float)lr, t->st.step + 1,
                         gpt_clip_scale(norm, t->job->trainer.grad_clip), 0, t->model.n_params);
    }
    t->compute_s += compute_s;

    gpt_data_cursor_advance(t->ds, &t->st.cursor, (uint64_t)t->job->trainer.global_batch);
    t->st.step++;
    t->st.tokens += (uint64_t)t->job->trainer.global_batch * t->T;
    *ret_loss = loss_mean;
    *ret_norm = norm;
    *ret_lr = lr;
    return 0;
}

/* On a device backend (bf16 copies of device floats: cuda_backend.cu), two
 * forwards and backwards of the next step's first micro-batch before the
 * process's first step, their results discarded. That backend settles
 * during a process's first passes: bf16 copies are made at their
 * allocations' first reads (the first pass reads some values as fp32
 * that later passes read as bf16), and producers learn in the second
 * which outputs an fp32 reader needs. Without this a resumed process's
 * first step would differ in the last bits from the same step of a run
 * that went straight through (tests/gpu/acceptance.sh, resume). The
 * gradients are overwritten by the step's first backward; the data
 * cursor is not moved; the all-reduce hooks are not armed; sharding
 * (whose passes are collectives) is left out. */
static int trainer_settle(struct trainer *t)
{
    if (t->shard || !gpt_backend_device_memory(t->model.be))
        return 0;
    uint64_t first;
    size_t n = trainer_batch_micro(&t->batch, 0, &first), b = n > 0 ? n : 1;
    int rc = gpt_dataset_train_batch(t->ds, &t->st.cursor, n > 0 ? first : t->batch.first, b,
                                     t->inputs, t->targets, &t->data_err);
    for (int pass = 0; pass < 2 && rc >= 0; pass++) {
        float loss;
        rc = gpt_model_forward_train(&t->model, t->inputs, t->targets, b, t->T, 1.0f, &loss);
        t->model.backward_async = 0;
        if (rc >= 0)
            rc = gpt_model_backward(&t->model, 1.0f);
    }
    return rc;
}

/* Rank 0's should_stop answer, agreed by the world. */
static int agree_stop(struct trainer *t, int *ret_how)
{
    int32_t how = 0;
    if (t->rank == 0 && t->opts->hooks.should_stop)
        how = t->opts->hooks.should_stop(t->opts->hooks.ctx);
    if (t->world > 1) {
        int rc = gpt_comm_broadcast(t->comm, &how, sizeof(how), 0);
        if (rc < 0)
            return rc;
    }
    *ret_how = how;
    return 0;
}

static void fill_metric(struct trainer *t, struct gpt_metric *m, double loss, double norm,
                        double lr, double dt_s, int64_t steps_in_dt)
{
    memset(m, 0, sizeof(*m));
    m->step = t->st.step;
    m->max_steps = t->max_steps == INT64_MAX ? 0 : t->max_steps;
    m->epoch = t->st.cursor.epoch;
    m->loss = loss;
    m->val_loss = NAN;
    m->accuracy = NAN;
    m->lr = lr;
    m->grad_norm = norm;
    double tokens = (double)steps_in_dt * t->job->trainer.global_batch * (double)t->T;
    m->tokens_per_s = dt_s > 0 ? tokens / dt_s : 0;
    m->ms_per_step = steps_in_dt > 0 ? dt_s * 1e3 / (double)steps_in_dt : 0;
    double flops = gpt_model_flops_per_token(&t->model, t->T) * m->tokens_per_s;
    /* NAN (left out of the record) where the peak is unknown */
    m->mfu = t->peak_flops > 0 ? flops / (t->peak_flops * t->world) : NAN;
    m->eta_s = m->max_steps > 0 ? (double)(m->max_steps - m->step) * m->ms_per_step / 1e3 : 0;
    m->tokens = t->st.tokens;
    m->world_size = t->world;
    m->run_id = t->opts->run_id;
    if (t->shard) {
        struct gpt_shard_mem sm;
        gpt_shard_mem(t->shard, &sm);
        m->mem_params_bytes = sm.params;
        m->mem_grads_bytes = sm.grads;
        m->mem_optim_bytes = sm.optim;
        m->mem_work_bytes = sm.work;
    } else {
        m->mem_params_bytes = t->model.n_params * sizeof(float);
        m->mem_grads_bytes = t->model.n_params * sizeof(float);
        m->mem_optim_bytes = 2 * t->model.n_params * sizeof(float);
    }
    m->mem_acts_bytes = t->model.act_bytes;
    m->time = wall_s();
}

/* Every rank's compute time per step since the last record, gathered with
 * one small allreduce (each rank fills its own slot), so that rank 0's
 * record shows a straggler. Every rank calls it at the same steps. */
static int rank_step_times(struct trainer *t, struct gpt_metric *m, int64_t steps)
{
    float ms[GPT_METRIC_RANKS_MAX] = {0};
    int n = t->world < GPT_METRIC_RANKS_MAX ? t->world : GPT_METRIC_RANKS_MAX, rc;
    if (t->rank < n)
        ms[t->rank] = steps > 0 ? (float)(t->compute_s * 1e3 / (double)steps) : 0;
    t->compute_s = 0;
    if (t->world > 1) {
        if (t->shard && (rc = gpt_shard_sync(t->shard)) < 0)
            return rc;
        if ((rc = gpt_comm_allreduce(t->comm, ms, (size_t)n, GPT_REDUCE_SUM)) < 0)
            return rc;
    }
    memcpy(m->rank_step_ms, ms, (size_t)n * sizeof(ms[0]));
    m->n_rank_step_ms = n;
    return 0;
}

static void emit_metric(struct trainer *t, const struct gpt_metric *m)
{
    if (t->rank == 0 && t->opts->hooks.metric)
        t->opts->hooks.metric(t->opts->hooks.ctx, m);
}

/* What failed with rc: a batch read's detail (it names the file) when
 * that was the failure, else the code's description; and its job key. */
static bool trainer_data_failed(const struct trainer *t, int rc)
{
    return t->data_err.code == rc && t->data_err.msg[0];
}

static const char *trainer_why(const struct trainer *t, int rc)
{
    return trainer_data_failed(t, rc) ? t->data_err.msg : gpt_strerror(rc);
}

static const char *trainer_why_key(const struct trainer *t, int rc)
{
    return trainer_data_failed(t, rc) ? t->data_err.path : NULL;
}

/* The start (or continue) event: the model, the world, the batch,
 * where the gradients travel and (CUDA) the attention kernels
 * (trainer.attention_*), so a log tells fp32 from bf16 and the
 * transport (shm, tcp, nccl, staged/...) the world ended up with, and for
 * a host-staged one why (NCCL's refusal). */
static void run_announce(struct trainer *t)
{
    const struct gpt_trainer_spec *ts = &t->job->trainer;
    char comm_note[384] = "";
    const char *why = gpt_comm_staged_why(t->comm);
    if (t->world > 1)
        snprintf(comm_note, sizeof(comm_note), ", gradients in %s over comm %s%s%s%s",
                 t->ddp.started && t->ddp.dtype == GPT_COMM_BF16 ? "bf16" : "fp32",
                 t->comm->ops->name, why && why[0] ? " (" : "", why ? why : "",
                 why && why[0] ? ")" : "");
    const char *attn = t->be->attn_variants;
    emit_event(t, t->st.resumed ? "continue" : "start",
               "%s: %zu parameters, world size %d, %d micro-batch(es) of up to %zu x %zu per "
               "rank, global batch %d, %lld steps%s%s%s",
               t->job->name[0] ? t->job->name : "job", t->model.n_params, t->world, t->batch.accum,
               t->B, t->T, ts->global_batch, (long long)t->max_steps, comm_note,
               attn[0] ? ", attention " : "", attn);
}

/* Once, after the first step of a backend that guards attention
 * (backend.h: attention_guard): what its check found, as an event. */
static void run_attention_note(struct trainer *t)
{
    if (t->guard_said || !t->be->attn_guarded)
        return;
    int bad = 0;
    const char *note = gpt_backend_attention_guard_note(t->be, &bad);
    t->guard_said = 1;
    if (note[0])
        emit_event(t, bad ? "attention_fallback" : "attention_check", "%s", note);
}

/* Where the current record's time and steps are counted from. */
struct run_mark {
    double t;
    int64_t step;
};

/* A step's record: the metric (every rank's step time gathered; with
 * eval, the validation loss and accuracy), then the mark moves past it
 * (evaluation time is not training time). 0, or an error (err set). */
static int run_record(struct trainer *t, double loss, double norm, double lr, bool eval,
                      struct run_mark *mark, struct gpt_err *err)
{
    struct gpt_metric m;
    int rc;
    fill_metric(t, &m, loss, norm, lr, monotime_s() - mark->t, t->st.step - mark->step);
    if ((rc = rank_step_times(t, &m, t->st.step - mark->step)) < 0)
        return gpt_err_set(err, rc, NULL, "collective failed at step %lld: %s",
                           (long long)t->st.step, gpt_strerror(rc));
    if (eval) {
        double vl, acc;
        if ((rc = evaluate(t, &vl, &acc)) < 0)
            return gpt_err_set(err, rc, trainer_why_key(t, rc), "evaluation failed: %s",
                               trainer_why(t, rc));
        m.val_loss = vl;
        m.accuracy = acc;
        t->result->final_val_loss = vl;
        t->result->final_accuracy = acc;
    }
    emit_metric(t, &m);
    mark->t = monotime_s();
    mark->step = t->st.step;
    return 0;
}

static int run_loop(struct trainer *t, struct gpt_err *err)
{
    const struct gpt_trainer_spec *ts = &t->job->trainer;
    double loss = NAN, norm = NAN, lr = 0;
    struct run_mark mark = {monotime_s(), t->st.step};
    int rc, how;

    /* A resume whose snapshot already reaches the end has nothing to train:
     * say so instead of finishing with no steps and no loss. */
    if (t->st.resumed && t->st.step >= t->max_steps)
        return gpt_err_set(err, -GPT_E_SPEC,
                           t->job->trainer.max_steps > 0 ? "trainer.max_steps"
                                                         : "trainer.max_epochs",
                           "the snapshot is at step %lld and this job ends at step %lld: nothing"
                           " left to train (raise trainer.max_steps or trainer.max_epochs)",
                           (long long)t->st.step, (long long)t->max_steps);
    run_announce(t);

    if (t->st.step < t->max_steps && (rc = trainer_settle(t)) < 0)
        return gpt_err_set(err, rc, trainer_why_key(t, rc),
                           "settling the backend before step %lld failed: %s",
                           (long long)t->st.step + 1, trainer_why(t, rc));
    while (t->st.step < t->max_steps) {
        if ((rc = agree_stop(t, &how)) < 0)
            return gpt_err_set(err, rc, NULL, "collective failed: %s", gpt_strerror(rc));
        if (how != GPT_STOP_NO) {
            if (how == GPT_STOP_SNAPSHOT && (rc = trainer_state_snapshot_write(t, err)) < 0)
                return rc;
            emit_event(t, "stop", "stopped at step %lld on request", (long long)t->st.step);
            t->result->step = t->st.step;
            t->result->final_loss = loss;
            return GPT_TRAIN_STOPPED;
        }
        if ((rc = train_step(t, &loss, &norm, &lr)) < 0)
            return rc == -ECANCELED || rc == -ETIMEDOUT || rc == -EPIPE || rc == -ECONNRESET
                       ? gpt_err_set(err, rc, NULL, "collective failed at step %lld: %s",
                                     (long long)t->st.step, gpt_strerror(rc))
                       : gpt_err_set(err, rc, trainer_why_key(t, rc),
                                     "training step %lld failed: %s", (long long)t->st.step,
                                     trainer_why(t, rc));
        if (!isfinite(loss))
            return gpt_err_set(err, -ERANGE, NULL,
                               "loss is not finite at step %lld (lower optimizer.lr?)",
                               (long long)t->st.step);
        run_attention_note(t);
        bool last = t->st.step >= t->max_steps;
        bool eval = last || (ts->eval_every > 0 && t->st.step % ts->eval_every == 0);
        bool log = eval || last || (ts->log_every > 0 && t->st.step % ts->log_every == 0);
        if (log && (rc = run_record(t, loss, norm, lr, eval, &mark, err)) < 0)
            return rc;
        int every = t->job->snapshot.every;
        if (!last && every > 0 && t->st.step % every == 0 &&
            (rc = trainer_state_snapshot_write(t, err)) < 0)
            return rc;
    }
    if ((rc = trainer_state_snapshot_write(t, err)) < 0)
        return rc;
    t->result->step = t->st.step;
    t->result->final_loss = loss;
    emit_event(t, "done", "completed %lld steps, final loss %.4f", (long long)t->st.step, loss);
    return GPT_TRAIN_DONE;
}

static void trainer_done(struct trainer *t)
{
    trainer_ddp_stop(&t->ddp);
    gpt_shard_free(t->shard);
    if (t->model_ready)
        gpt_model_done(&t->model);
    gpt_dataset_free(t->ds);
    gpt_backend_free(t->own_be);
    gpt_comm_free(t->own_comm);
    free(t->inputs);
    free(t->targets);
    free(t->logits_host);
}

int gpt_train(const struct gpt_trainer_opts *opts, struct gpt_train_result *ret,
              struct gpt_err *err)
{
    struct trainer t;
    struct gpt_train_result result;
    int rc;

    GPT_ASSERT(opts && opts->job);
    memset(&t, 0, sizeof(t));
    memset(&result, 0, sizeof(result));
    result.final_val_loss = NAN;
    result.final_accuracy = NAN;
    t.opts = opts;
    t.job = opts->job;
    t.result = &result;
    t.comm = opts->comm;
    if (!t.comm) {
        rc = gpt_comm_local_new(&t.own_comm, err);
        if (rc < 0)
            return rc;
        t.comm = t.own_comm;
    }
    t.rank = t.comm->rank;
    t.world = t.comm->world;

    rc = open_all(&t, err); /* or GPT_TRAIN_STOPPED during set-up */
    if (rc == 0)
        rc = trainer_state_init(&t, err);
    if (rc < 0 && setup_failure_is_stop(&t, rc))
        rc = GPT_TRAIN_STOPPED;
    if (rc != 0)
        goto out;
    enum gpt_comm_dtype dtype = trainer_ddp_dtype(t.job->distributed.grad_reduce, t.be->name);
    if (t.world > 1 && !t.shard && (rc = trainer_ddp_start(&t.ddp, t.comm, dtype, &t.model)) < 0) {
        rc = gpt_err_set(err, rc, NULL, "cannot start the communication thread");
        goto out;
    }
    rc = run_loop(&t, err);
out:
    trainer_done(&t);
    if (rc >= 0 && ret)
        *ret = result;
    return rc;
}
