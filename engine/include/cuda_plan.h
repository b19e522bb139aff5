/*
 * cuda_plan: the host-side arithmetic of the CUDA backend and the NCCL
 * communicator, kept in plain C with no CUDA headers so that it builds into
 * the CPU engine and is unit-tested on machines without a GPU: launch
 * shapes for grid-stride kernels, the split of deterministic two-pass
 * reductions (sum of squares, column sums), the padding plan that maps the
 * uneven slices of gpt_comm_slice onto NCCL's equal-count reduce-scatter and
 * all-gather, gradient bucket boundaries, and the choice and tiling of the
 * fused (flash) attention kernels.
 *
 * Everything here is pure (no allocation, no globals) and callable from any
 * thread.
 */
#ifndef GPT_CUDA_PLAN_H
#define GPT_CUDA_PLAN_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* Threads per block of the element-wise kernels. */
#define GPT_CUDA_BLOCK 256
/* Most blocks one grid-stride launch uses (each thread then loops). */
#define GPT_CUDA_MAX_GRID 65535u
/* Blocks of the first sumsq pass: a fixed cap keeps the result independent
 * of the device (the reduction tree depends only on n). */
#define GPT_CUDA_SUMSQ_MAX_BLOCKS 1024u
/* Row splits of the two-pass column sums (LayerNorm and bias gradients). */
#define GPT_CUDA_COLSUM_MAX_SPLITS 32u
/* Columns one column-sum block covers (one warp wide). */
#define GPT_CUDA_COLSUM_COLS 32u

/* Blocks for a grid-stride kernel over n items with `block` threads each:
 * ceil(n / block) capped at max_grid, at least 1. */
unsigned gpt_cuda_plan_grid(size_t n, unsigned block, unsigned max_grid);

/* Blocks of a row kernel that gives each row one warp and packs
 * `warps_per_block` warps per block: ceil(rows / warps_per_block), capped
 * like gpt_cuda_plan_grid (the kernel then loops over rows). */
unsigned gpt_cuda_plan_row_grid(size_t rows, unsigned warps_per_block);

/* Blocks of the first pass of the deterministic sum of squares over n
 * elements: ceil(n / (block * 8)) capped at GPT_CUDA_SUMSQ_MAX_BLOCKS, at
 * least 1. The partial-sum buffer holds that many doubles. */
unsigned gpt_cuda_plan_sumsq_blocks(size_t n, unsigned block);

/* Row splits of a two-pass column sum of an (N, C) matrix when the
 * scratch holds `scratch_floats` floats: each split sums a fixed range of
 * rows into scratch[split * C + c], then a second pass adds the splits in
 * order. Aims at ~256 rows per split, at most GPT_CUDA_COLSUM_MAX_SPLITS
 * and at most scratch_floats / C; 1 means a single pass straight into the
 * destination. */
unsigned gpt_cuda_plan_colsum_splits(size_t N, size_t C, size_t scratch_floats);

/* Floats of the CUDA backend's scratch (8 MiB, one per backend): the
 * two-pass column sums' and the single-pass LayerNorm backward's partial
 * sums, the encoder backward's order of the positions by token and their
 * counts (4 B*T ints). Here so that the plan's tests and the step
 * recorder (bench/) size their plans as the backend does. Sized for the
 * LayerNorm backward: its 2 * blocks * C partials at GPT-2's shape (1024
 * blocks at N = 16384, C = 768) take 1.5 M floats; 1 << 20 capped it at
 * 682 blocks. */
#define GPT_CUDA_SCRATCH_FLOATS ((size_t)2 << 20)

/* Warps per block of the single-pass LayerNorm backward, rows one block
 * aims at, blocks one SM is to hold at once (the kernel's
 * __launch_bounds__: at most 64 registers a thread), and the most shared
 * memory it uses without an opt-in.
 *
 * 16 rows (4 per warp): the kernel is bound by memory latency (each warp
 * walks its rows one at a time), so it wants every SM full of warps. At
 * C = 768 a block takes 4 * 2 * C floats of shared memory (24 KiB, plus
 * 1 KiB the driver reserves), so an H200 SM (228 KiB) holds 8 of them:
 * 1056 blocks on 132 SMs in one wave. GPT-2's N = 16384 gives 1024
 * blocks, ~7.8 per SM; 64 rows gave 256 blocks, under 2 per SM (12%
 * occupancy, ~2x the memory time). Fewer rows would take a second wave
 * and more partials (each block writes 2 * C floats that pass 2 reads
 * back: 12.6 MB at 1024 blocks against ~100 MB of rows). */
#define GPT_CUDA_LNB_WARPS      4u
#define GPT_CUDA_LNB_ROWS       16u
#define GPT_CUDA_LNB_SM_BLOCKS  8u
#define GPT_CUDA_LNB_SMEM_BYTES ((size_t)48 * 1024)

/* Blocks of the single-pass LayerNorm backward over N rows of C, whose
 * per-block partial parameter sums take 2 * blocks * C floats of a scratch
 * of `scratch_floats`: ceil(N / GPT_CUDA_LNB_ROWS) capped by the scratch
 * and by GPT_CUDA_MAX_GRID, then trimmed so that no block is empty (the
 * kernel gives each block ceil(N / blocks) rows; trimming leaves that
 * unchanged), at least 1. Depends only on its arguments (the sums' order
 * with it). 0 when the kernel does not apply: its shared memory
 * (GPT_CUDA_LNB_WARPS * 2 * C floats) exceeds GPT_CUDA_LNB_SMEM_BYTES or
 * not even one block's partials fit; the backend then runs the row kernel
 * and the two-pass column sums. */
unsigned gpt_cuda_plan_lnb_blocks(size_t N, size_t C, size_t scratch_floats);

/* Chunks of a LayerNorm row that one warp holds in registers in the bf16
 * forms of the LayerNorm kernels: lane l owns columns [8 l + 256 k, + 8)
 * for k < chunks, and every chunk's 16-byte loads are issued before the
 * first is used (the streaming loops they replace read a chunk, used it,
 * and read the next: one DRAM latency per chunk and pass, ~55% of the
 * memory rate on the H200 runs). ceil(C / 256) for C a multiple of 8 up
 * to GPT_CUDA_LN_HELD_CHUNKS * 256 (GPT-2's 768: 3; 1024: 4), else 0 (the
 * streaming loops: wider rows, or C % 8). A held chunk of bf16 takes 4
 * registers: the single-pass backward holds dout, inp and its bf16-only
 * dinp, 12 per chunk, inside its 64. */
#define GPT_CUDA_LN_HELD_CHUNKS 4u
unsigned gpt_cuda_plan_ln_chunks(size_t C);

/* Whether a product's bias gradient (cuBLASLt's BGRADB epilogue, which
 * writes its sums, not adds them) goes straight into dbias: only when the
 * step stores gradients (grad_assign) and dbias is 16-byte aligned (what
 * the epilogue's vector needs); else it goes to scratch, and a copy or an
 * add follows (a launch each, ~48 a GPT-2 step). */
int gpt_cuda_plan_bgrad_direct(const void *dbias, int assign);

/* GEMM autotune (trainer.gemm_autotune; off by default): the first
 * product of each cuBLASLt shape asks the heuristic for up to
 * GPT_CUDA_LT_TUNE_MAX algorithms and times each on the real operands;
 * the shape keeps the winner for the rest of the process. `time` runs
 * candidate i once and returns its milliseconds, or a negative value when
 * it failed (then it is not run again). Each candidate is run once to
 * warm up, then GPT_CUDA_LT_TUNE_REPS times, in rounds (every candidate
 * once per round, so that clock drift touches all alike); its figure is
 * the median of those. The lowest median wins; a tie goes to the lower
 * index (the heuristic's order), so equal timings choose what the
 * untuned backend runs. ret_ms (n entries, may be NULL): each median, -1
 * for a failed candidate. Returns the winner's index, or -1 when n < 1 or
 * every candidate failed (the caller keeps the heuristic's first). */
#define GPT_CUDA_LT_TUNE_MAX  8
#define GPT_CUDA_LT_TUNE_REPS 5
int gpt_cuda_plan_lt_tune(int n, double (*time)(void *ctx, int i), void *ctx, double *ret_ms);

/* Shared memory the classifier's softmax + cross-entropy kernel keeps
 * for its own reductions (bytes, a bound), and the dynamic shared memory
 * of its one-read form: a call that writes dlogits without a previous
 * loss call (write_dlogits 1) keeps each row of Vp logits, as read
 * (elem_bytes 2 for the bf16 copy, 4 for fp32), in shared memory, so the
 * write pass reads no logit from DRAM again. Returns Vp * elem_bytes, or
 * 0 when that and the reductions' share exceed smem_limit (the opt-in
 * limit per block): the backend then reads the row twice. */
#define GPT_CUDA_XENT_STATIC_SMEM ((size_t)1024)
size_t gpt_cuda_plan_xent_stage(size_t Vp, size_t elem_bytes, size_t smem_limit);

/* The NCCL communicator's waits poll (the abort flag and the timeout must
 * be seen too), napping GPT_NCCL_POLL_FIRST_NS first and doubling up to
 * GPT_NCCL_POLL_MAX_NS (monotime_nap_backoff): a back-off to 1 ms would
 * lose up to a millisecond per step at the final DDP wait, and a sleeping
 * poller still leaves the core to the backward. bench_poll_backoff
 * measures what each cap loses. */
#define GPT_NCCL_POLL_FIRST_NS 5000L
#define GPT_NCCL_POLL_MAX_NS   50000L

/* The uneven-slice convention of gpt_comm_slice mapped onto NCCL's equal
 * counts. Every rank's slice is placed at `r * chunk` of a padded buffer of
 * `padded` = chunk * world elements, chunk = ceil(n / world); the tail of a
 * short slice is padding (zero for reduce-scatter, ignored for
 * all-gather). When n % world == 0 the slices are already equal and
 * contiguous, `needs_pad` is 0 and the collective runs in place on the
 * caller's buffer. */
struct gpt_cuda_pad_plan {
    size_t n;
    int world;
    size_t chunk;  /* elements per rank in the padded layout */
    size_t padded; /* chunk * world */
    int needs_pad;
};

void gpt_cuda_pad_plan_init(struct gpt_cuda_pad_plan *p, size_t n, int world);
/* Where rank r's slice lives in the caller's buffer (off, len) and in the
 * padded buffer (r * chunk). */
void gpt_cuda_pad_plan_slice(const struct gpt_cuda_pad_plan *p, int rank, size_t *ret_off,
                             size_t *ret_len, size_t *ret_padded_off);

/* Boundaries of gradient buckets over n elements: bucket i is
 * [i * bucket, min(n, (i+1) * bucket)), where `bucket` is max_bucket_elems
 * rounded down to a multiple of 64 elements (256 bytes, NCCL's preferred
 * alignment), at least 64. Returns the number of buckets (0 for n == 0). */
size_t gpt_cuda_plan_buckets(size_t n, size_t max_bucket_elems, size_t *ret_bucket_elems);

/* ---- multi-tensor AdamW ------------------------------------------------- */

/* Host and device (the kernel calls the same code the unit test runs). */
#ifdef __CUDACC__
#define GPT_CUDA_HD __host__ __device__
#else
#define GPT_CUDA_HD
#endif

/* The span of element i (relative to the start of a run of contiguous
 * spans) when the spans' exclusive ends, relative to that start, are
 * ends[0..n), increasing: the first s with ends[s] > i, by binary search;
 * n when i >= ends[n - 1]. */
static inline GPT_CUDA_HD size_t gpt_cuda_span_of(const uint64_t *ends, size_t n, uint64_t i)
{
    size_t lo = 0, hi = n; /* answer in [lo, hi] */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ends[mid] > i)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* The clip factor of a global gradient norm given as its square, on the
 * device (adamw_multi_clip reads the sum the step's sumsq_dev wrote):
 * optim.c's gpt_clip_scale(sqrt(sumsq), clip) in the same double
 * arithmetic, so the same bits on both sides (sqrt and division are
 * correctly rounded in IEEE double on the host and the device). 1 when
 * clip <= 0 or the norm is NaN; min(1, clip / (norm + 1e-6)) otherwise,
 * so an infinite norm gives 0. */
static inline GPT_CUDA_HD float gpt_cuda_clip_scale(double sumsq, double clip)
{
    double norm = sqrt(sumsq);
    if (clip <= 0.0 || !(norm == norm))
        return 1.0f;
    double s = clip / (norm + 1e-6);
    return s < 1.0 ? (float)s : 1.0f;
}

struct gpt_adamw_span;

/* The one-launch AdamW's table for n (>= 1) spans of the flat buffer
 * (backend.h): they must be contiguous (each starts where the last ended)
 * and non-empty; then ret_ends[s] = end of span s relative to spans[0].off,
 * ret_decay[s] = 1 or 0, *ret_total the run's length, and 0 is returned.
 * -EINVAL (nothing written past what was checked) for a gap, overlap or
 * an empty span: the caller then runs one launch per span. */
int gpt_cuda_adamw_table(const struct gpt_adamw_span *spans, size_t n, uint64_t *ret_ends,
                         uint32_t *ret_decay, size_t *ret_total);

/* ---- fused causal attention (flash) ------------------------------------ */

/* Warps per block of the flash kernels, rows each warp owns, and the rows
 * of one inner tile (one per lane). A block owns BR = WARPS * ROWS rows of
 * one (b, h) pair (queries in the forward and dq kernels, keys in the dk/dv
 * kernel) and streams the other side through shared memory BC rows at a
 * time. */
#define GPT_CUDA_FLASH_WARPS  8u
#define GPT_CUDA_FLASH_ROWS   8u
#define GPT_CUDA_FLASH_BR     (GPT_CUDA_FLASH_WARPS * GPT_CUDA_FLASH_ROWS)
#define GPT_CUDA_FLASH_BC     32u
#define GPT_CUDA_FLASH_MAX_HS 128u

enum gpt_cuda_attn_kind {
    GPT_CUDA_ATTN_GEMM = 0,  /* batched GEMMs around a fused softmax (T x T) */
    GPT_CUDA_ATTN_FLASH = 1, /* fused kernels, nothing of size T x T */
};

/* How one attention call runs. With flash, the forward keeps in `att`
 * (B*NH*T*T floats) the per-row logsumexp (B*NH*T floats); the backward
 * reads the forward's output (the caller passes it back) and keeps in
 * `scratch` the rows' dout . out (CUDA-core kernels) or a bf16 copy of
 * dout and the dQ turns (tensor cores), which fits when T > hs. */
struct gpt_cuda_attn_plan {
    enum gpt_cuda_attn_kind kind;
    const char *why;  /* static text: why the GEMM path was chosen, or "" */
    size_t hs;        /* head size C / NH */
    size_t ld;        /* floats per shared-memory row: hs + pad, ld / 4 odd */
    unsigned q_tiles; /* BR-row tiles over T (grid x of forward and dq) */
    unsigned k_tiles; /* BR-row key tiles over T (grid x of dk/dv) */
    unsigned bh;      /* B * NH (grid y) */
    size_t smem_fwd;  /* dynamic shared memory of each kernel, bytes */
    size_t smem_dq;
    size_t smem_dkv;
    size_t lse_floats; /* B*NH*T: logsumexp at att[0], D at scratch[0] */
    /* 1 (gpt_cuda_plan_attention's default): the tensor-core backward may
     * run, so the backward's scratch holds its state too; the backend
     * clears it in fp32 mode, where only the CUDA-core kernels run. */
    int tc;
    /* The tensor-core variants the backend was made with (enum gpt_attn_fwd
     * and enum gpt_attn_bwd of gpt_config.h: trainer.attention_forward and
     * _backward); 0 (gpt_cuda_plan_attention's): auto, the default. A
     * test's gpt_cuda_flash_tc_set_variants wins over them. */
    int attn_fwd;
    int attn_bwd;
};

/* Plans attention for (B, T, C, NH) on a device whose blocks may use up
 * to smem_limit bytes of shared memory (the opt-in limit). `want` is the
 * caller's preference: GPT_CUDA_ATTN_GEMM forces the GEMM path; FLASH
 * takes the fused kernels when they apply, i.e. when hs is a multiple of 4
 * and at most GPT_CUDA_FLASH_MAX_HS, T > hs (a (B,NH,T,T) scratch holds
 * the backward's state), B*NH fits a grid dimension and every kernel's shared
 * memory fits. Fills *p either way. */
void gpt_cuda_plan_attention(struct gpt_cuda_attn_plan *p, size_t B, size_t T, size_t C, size_t NH,
                             size_t smem_limit, enum gpt_cuda_attn_kind want);

/* Floats the attention buffers need under plan p (from
 * gpt_cuda_plan_attention for the same shape): the forward's `att`
 * (scratch 0) and the backward's scratch (scratch 1). GEMM: B*NH*T*T for
 * both. FLASH: the logsumexp (lse_floats) and the rows' dout . out
 * (lse_floats); where p->tc and the head size is one the tensor-core
 * kernels take, that is followed at gpt_flash_tc_dob_off by a bf16 copy
 * of dout, ceil(B*T*C / 2) floats, at gpt_flash_tc_sem_off by the fused
 * backward's dQ turn counters, B*NH*gpt_flash_tc_q_tiles ints, and its
 * block ticket, one int, and at gpt_flash_tc_ds_off by the dS
 * backward's tiles, gpt_flash_tc_ds_reserve bytes (at most 1 GiB: about
 * T * T bytes a head, in whole 64-key tiles). Each part grows with B and
 * with T, so a larger shape's buffers hold a smaller one's. */
size_t gpt_cuda_plan_att_floats(const struct gpt_cuda_attn_plan *p, size_t B, size_t T, size_t C,
                                size_t NH, int scratch);

/* Inner tiles (BC rows each) one block visits under the causal mask:
 * [*ret_first, *ret_end). A query block owning rows [own0, own0 + BR)
 * needs keys 0 .. min(T, own0 + BR) - 1; a key block owning keys
 * [own0, own0 + BR) needs queries own0 .. T - 1. Tiles wholly above the
 * diagonal are skipped; every visited tile holds at least one unmasked
 * (query, key) pair. */
void gpt_cuda_plan_flash_span(int own_is_query, size_t own0, size_t T, unsigned *ret_first,
                              unsigned *ret_end);

/* ---- bf16 shadows: one per allocation, indexed by offset ---------------- */

/* The bf16 shadow of a device allocation covers the whole allocation
 * (bytes / 4 elements) and is created once, at its first reader, so a
 * product at another batch shape reads a sub-range of the same shadow and
 * nothing is allocated after the first step. Which elements of it are
 * current is a set of disjoint spans [lo, hi) in element offsets, sorted,
 * never touching (adjacent spans are merged). Dropping a span is always
 * safe (a reader converts again), so when the set is full the smallest
 * span is dropped; a span is never widened past what was written. */
#define GPT_CUDA_SPANS_MAX 256u

struct gpt_cuda_spans {
    size_t n;
    size_t lo[GPT_CUDA_SPANS_MAX];
    size_t hi[GPT_CUDA_SPANS_MAX];
};

/* Element offset of the floats [p, p + n) in an allocation at `base` of
 * `bytes` bytes: returns 1 and sets *ret_off when they lie wholly inside
 * it at a float boundary (n may be 0 only when p is inside), else 0. */
int gpt_cuda_shadow_index(uintptr_t base, size_t bytes, uintptr_t p, size_t n, size_t *ret_off);

void gpt_cuda_spans_clear(struct gpt_cuda_spans *s);
/* 1 when [lo, hi) lies wholly inside one current span (empty ranges: 1). */
int gpt_cuda_spans_covers(const struct gpt_cuda_spans *s, size_t lo, size_t hi);
/* Marks [lo, hi) current (union with the set). */
void gpt_cuda_spans_add(struct gpt_cuda_spans *s, size_t lo, size_t hi);
/* Marks [lo, hi) stale (difference). */
void gpt_cuda_spans_cut(struct gpt_cuda_spans *s, size_t lo, size_t hi);

/* 1 when some current span meets [lo, hi) (empty ranges: 0). */
int gpt_cuda_spans_meets(const struct gpt_cuda_spans *s, size_t lo, size_t hi);

/* ---- bf16-only activations: the state of one shadow --------------------- */

/* What one allocation's shadow holds, in element offsets:
 *  - cur: where the bf16 copy is current;
 *  - own: where ONLY the bf16 copy is (a producer wrote bf16 and no fp32:
 *    matrix products with a bf16 D, LayerNorm's normalised output, the
 *    classifier's dlogits); the fp32 floats there are stale until an fp32
 *    reader converts them back. Always inside cur;
 *  - want: learned: ranges an fp32 reader (an op, not a download) had to
 *    convert back once; a producer writes fp32 (with a bf16 copy where it
 *    can) there from then on, so the steady state converts nothing.
 * Forgetting a span of `own` would lose data, so no transition may drop
 * one: gpt_cuda_shd_crowded says when the caller must first convert every
 * owned span back (then clear `own`) before the next transition. Forgetting
 * a span of `cur` or `want` only costs a conversion. */
struct gpt_cuda_shd_state {
    struct gpt_cuda_spans cur;
    struct gpt_cuda_spans own;
    struct gpt_cuda_spans want;
    /* Foreign writes (gpt_cuda_shd_wrote_foreign) the owner has still to
     * record, as one hull [pend_lo, pend_hi); empty when lo >= hi. */
    size_t pend_lo, pend_hi;
};

void gpt_cuda_shd_clear(struct gpt_cuda_shd_state *s);
/* 1 when own is not empty and one more transition could overflow cur or
 * own: convert every span of own to fp32 and gpt_cuda_shd_flushed first. */
int gpt_cuda_shd_crowded(const struct gpt_cuda_shd_state *s);
/* The caller converted every span of own back to fp32: own becomes empty
 * (and those spans are learned in want). */
void gpt_cuda_shd_flushed(struct gpt_cuda_shd_state *s);
/* An fp32 write of [lo, hi) without a bf16 copy. */
void gpt_cuda_shd_wrote_f32(struct gpt_cuda_shd_state *s, size_t lo, size_t hi);
/* An fp32 write of [lo, hi) by another thread than the backend's owner
 * (the communication thread's collective), which must launch nothing:
 * recorded at once as gpt_cuda_shd_wrote_f32 when that needs no flush
 * (returns 1); when the sets are crowded (a flush would convert on the
 * compute stream) the range joins the pending hull instead (returns 0),
 * and the owner settles it before its next transition. Forgetting part
 * of cur over the hull only costs a conversion, and the flush first
 * empties own, so the hull's extra elements lose nothing. */
int gpt_cuda_shd_wrote_foreign(struct gpt_cuda_shd_state *s, size_t lo, size_t hi);
/* Owner: 1 when foreign writes wait. The owner then converts every span
 * of own back to fp32 and calls gpt_cuda_shd_settle. */
int gpt_cuda_shd_pending(const struct gpt_cuda_shd_state *s);
/* Owner, after converting own: own is flushed (gpt_cuda_shd_flushed) and
 * the pending hull recorded as an fp32 write. */
void gpt_cuda_shd_settle(struct gpt_cuda_shd_state *s);
/* A write of [lo, hi) in fp32 and bf16 both. */
void gpt_cuda_shd_wrote_both(struct gpt_cuda_shd_state *s, size_t lo, size_t hi);
/* 1 when a producer may write [lo, hi) as bf16 only: nothing of it is in
 * want and the sets have room (not crowded after the write). */
int gpt_cuda_shd_may_own(const struct gpt_cuda_shd_state *s, size_t lo, size_t hi);
/* A producer wrote [lo, hi) as bf16 only (after gpt_cuda_shd_may_own). */
void gpt_cuda_shd_wrote_bf16(struct gpt_cuda_shd_state *s, size_t lo, size_t hi);
/* An fp32 reader of [lo, hi): stores in ret_lo/ret_hi (room for
 * GPT_CUDA_SPANS_MAX) the owned sub-ranges the caller must convert from
 * bf16 to fp32 before the read, in order, and returns their count; they
 * leave own (the bf16 copy stays current) and, with `learn`, join want.
 * Ops learn (they run every step); a download does not (a trainer that
 * samples from the logits now and then must not make the head's output
 * fp32 for good). */
size_t gpt_cuda_shd_read_f32(struct gpt_cuda_shd_state *s, size_t lo, size_t hi, int learn,
                             size_t *ret_lo, size_t *ret_hi);
/* A bf16 reader of [lo, hi): 0 when the bf16 copy is current there;
 * else 1 and the caller converts [lo, hi) from fp32 to bf16 (after the
 * owned parts were converted back by gpt_cuda_shd_read_f32 on the same
 * range, which the caller runs first), and the range becomes current. */
int gpt_cuda_shd_read_bf16(struct gpt_cuda_shd_state *s, size_t lo, size_t hi);
/* For a reader that takes either copy (LayerNorm, the encoder's backward
 * and the skip connection's product reading the residual stream or its
 * gradient): 1 when it reads the bf16 copy, i.e. that copy is current over
 * [lo, hi) and some of the range is owned (its fp32 floats stale), so
 * nothing is converted; 0 when the fp32 floats are read: current there
 * wherever nothing is owned (more exact than the bf16 copy), else made so
 * by gpt_cuda_shd_read_f32 (learned) as for any fp32 reader. Changes
 * nothing. */
int gpt_cuda_shd_held(const struct gpt_cuda_shd_state *s, size_t lo, size_t hi);

/* ---- step cost model (bench_gpu_train --plan) ---------------------------- */

/* The roofline of one H200 SXM, the only place these numbers live. A
 * kernel takes max(flops / rate, bytes / GPT_H200_MEM_BPS), rate by where
 * it runs. Achievable rates, not datasheet peaks, except GPT_H200_PEAK:
 *  - GEMMs on tensor cores, bf16 inputs, fp32 accumulate: 700 TFLOP/s
 *    (~70% of the 989 dense peak, what cuBLASLt reaches at GPT-2 shapes);
 *  - GEMMs on tensor cores, TF32 inputs: 350 TFLOP/s (half of bf16, as in
 *    the datasheet's 494 vs 989);
 *  - CUDA-core fp32 arithmetic (flash attention, element-wise): 60 TFLOP/s;
 *  - HBM3e: 4.0 TB/s (of 4.8 peak);
 *  - the tensor-core flash attention kernels (engine/include/flash_tc.h),
 *    counted on the FLOPs they execute (the live 16 x 16 groups, masked
 *    pairs inside them included: at T 1024, 1.016 times the causal half
 *    that FlashAttention's own figures count) and on DRAM bytes only
 *    (their per-tile re-reads are L2 hits, bench_gpu_train says why).
 *    Forward 220 TFLOP/s (22% of the dense peak). Public reference: the
 *    FlashAttention-3 paper (Shah et al. 2024, arXiv 2407.08608, forward
 *    speed charts, H100 SXM5, bf16, causal, head dim 64) measures
 *    FlashAttention-2 (the same algorithm on mma.sync, no wgmma) at 229
 *    TFLOP/s at T 1k (~233 on our executed count). FA2's block for head
 *    dim 64 is 128 query rows by 128 keys on 4 warps of 32 rows. Ours
 *    has the same 128 query rows (so each K/V tile is staged once per
 *    128 rows, as in FA2), on 8 warps of 16 rows, streaming 64-key tiles:
 *    a warp reads each K and V fragment (ldmatrix) for 16 rows where
 *    FA2's reads it for 32, so twice the ldmatrix traffic per mma, and a
 *    128 x 64 tile costs one more barrier and softmax rescale per 64 keys
 *    than FA2's 128 x 128. Both are issue slots and shared-memory
 *    bandwidth beside the mma, not more tensor-core work; taken as ~5%
 *    under FA2's 233: 220. (The 64-row blocks of 4 warps this replaced
 *    staged each K/V tile for half as many rows and were held at 200.)
 *    The rate is head dim 64's (GPT-2's); at hs 128 the 8-warp block
 *    takes ~174 registers a thread, one block (8 warps) per SM.
 *    Backward (one fused pass, 10 hs FLOPs per pair: S, dP, dV, dK, dQ;
 *    plus the rows' D = dO . O, 2 hs per row of each visited query tile,
 *    ~0.3% more, counted at the same rate) 170 TFLOP/s (17%). Same paper,
 *    backward chart (head dim 64, no mask): FA2's backward 238 TFLOP/s at
 *    T 1k; causal costs FA2's forward 229/306 = 0.75 of that at the same
 *    shape, so ~178 causal (~181 executed), less ~5% for our 64-key blocks
 *    of 4 warps and the ordered (deterministic) dQ adds in place of FA2's
 *    atomics. FA2 takes D in a separate pass; ours takes it inside the
 *    fused pass from the bf16 dO and O tiles (no pass, no DRAM re-read).
 *    Our own limits: one exponential per pair and pass on the SFUs, and
 *    4 warps per 64-key block (2 blocks per SM, by registers) hide little
 *    latency in the backward. wgmma kernels (FlashAttention-3: 265
 *    forward causal, 363 backward non-causal at the same shape) would be
 *    the next step. The acceptance run's per-kernel times calibrate both.
 * Launch overheads are not modelled (steps are tens of ms, launches a few
 * microseconds, a few hundred per step). */
#define GPT_H200_TC_BF16_FLOPS 700e12
#define GPT_H200_TC_TF32_FLOPS 350e12
#define GPT_H200_FP32_FLOPS    60e12
#define GPT_H200_MEM_BPS       4.0e12
#define GPT_H200_PEAK_FLOPS    989e12 /* dense bf16, the MFU denominator */

#define GPT_H200_FLASH_FWD_FLOPS 220e12
#define GPT_H200_FLASH_BWD_FLOPS 170e12

enum gpt_cuda_kclass {
    GPT_KC_GEMM,    /* cuBLAS(Lt) matrix products */
    GPT_KC_ATTN,    /* attention kernels (flash, or softmax of the GEMM path) */
    GPT_KC_NORM,    /* LayerNorm forward and backward */
    GPT_KC_ELT,     /* GELU, residual, scale, bias column sums */
    GPT_KC_XENT,    /* fused softmax + cross-entropy */
    GPT_KC_EMBED,   /* token/position embedding forward and backward */
    GPT_KC_OPTIM,   /* AdamW, gradient norm */
    GPT_KC_CONVERT, /* fp32 <-> bf16 operand conversions */
    GPT_KC_MEM,     /* memset / copies on the device */
    GPT_KC_COUNT
};

enum gpt_cuda_kunit {
    GPT_KU_TC_BF16, /* tensor cores, bf16 */
    GPT_KU_TC_TF32, /* tensor cores, tf32 */
    GPT_KU_FP32,    /* CUDA cores, fp32 */

    /* tensor cores, bf16: the flash attention forward, and backward */
    GPT_KU_TC_FLASH_FWD,
    GPT_KU_TC_FLASH_BWD,
};

/* One kernel or GEMM launch as the cost model sees it. */
struct gpt_cuda_kernel {
    const char *name; /* static: the kernel or GEMM's name in the backend */
    enum gpt_cuda_kclass cls;
    enum gpt_cuda_kunit unit;
    const char *dtype; /* static: "bf16", "tf32", "fp32" */
    char shape[48];    /* e.g. "M=2304 N=16384 K=768" */
    double flops;
    double bytes; /* read + written */
};

/* Static name of a class ("gemm", "attn", ...). */
const char *gpt_cuda_kclass_name(enum gpt_cuda_kclass c);
/* Predicted seconds of k on the H200 roofline above. */
double gpt_cuda_kernel_seconds(const struct gpt_cuda_kernel *k);
/* Query-key pairs one causal flash pass computes for T and tile
 * sizes as planned (visited tiles times BR * BC, per (b, h)): what the
 * flash kernels do, including the masked half of the diagonal tiles.
 * own_is_query as in gpt_cuda_plan_flash_span. */
double gpt_cuda_plan_flash_pairs(size_t T, int own_is_query);

/* ---- DDP all-reduce model (bench_gpu_train --plan --world N --link L) ---- */

/* The links a data-parallel world's gradient all-reduce can run over, per
 * GPU and direction: NVLink 4 (900 GB/s both ways, an H100's), one 400
 * Gb/s InfiniBand NIC per GPU (a DGX H100's), 100 GbE per GPU. The table
 * in cuda_plan.c is the only place these numbers live. */
enum gpt_link { GPT_LINK_NVLINK, GPT_LINK_IB400, GPT_LINK_ETH100, GPT_LINK_COUNT };

struct gpt_link_spec {
    const char *name;   /* "nvlink", "ib400", "eth100" */
    double bytes_per_s; /* one direction, wire rate */
    double hop_s;       /* one ring step's latency */
};

/* Fraction of the wire rate NCCL's ring reaches on large messages (its
 * busbw over the link rate). */
#define GPT_LINK_EFFICIENCY 0.8

/* The spec of `l`, or of the link named `name` (NULL when unknown). */
const struct gpt_link_spec *gpt_link_get(enum gpt_link l);
const struct gpt_link_spec *gpt_link_find(const char *name);

/* Seconds of one ring all-reduce of `bytes` per rank among `world` ranks:
 * 2 (world - 1) steps, each a hop's latency, moving 2 (world - 1) / world
 * of the bytes over the link at GPT_LINK_EFFICIENCY of its rate. 0 for a
 * world of one. Pure. */
double gpt_ddp_allreduce_seconds(const struct gpt_link_spec *l, int world, double bytes);

/* One gradient bucket of a step: when the backward has produced it (from
 * the start of the step) and its bytes on the wire. */
struct gpt_ddp_bucket {
    double ready_s;
    double bytes;
};

/* When the last of the buckets' all-reduces ends: run back to back in
 * order on one stream, none before it is ready. Pure. */
double gpt_ddp_comm_end_s(const struct gpt_ddp_bucket *b, size_t n, const struct gpt_link_spec *l,
                          int world);

#endif
