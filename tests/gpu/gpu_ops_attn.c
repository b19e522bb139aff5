/*
 * gpu_ops_attn: test_gpu_ops's tensor-core attention checks (bf16): the
 * flash kernels at the shapes that matter to them, against the CPU through
 * the op table's runner (taken for certain and bit-reproducible), and each
 * attention variant on the same inputs against the fused pass. Both GPU
 * paths at the table's shapes are the table's (gpu_ops_common.c).
 * Single-threaded.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_probe.h"
#include "flash_tc.h"
#include "gpu/gpu_ops_common.h"
#include "unit/op_cases.h"

/* Shapes for the tensor-core flash kernels (bf16 mode; head sizes 32, 64,
 * 96 and 128): T against the forward's 128-row query blocks and the
 * backward's 64-key blocks and 64- or 32-row query tiles: a multiple of
 * 128 (128, 256, 1024, 2048, 4096), of 64 only (64, 192), neither (40,
 * 65, 77, 95, 127, 129, 200, 300, 333, 1000), under one forward block
 * (40 .. 127: most of its warps past T), odd B*NH*T (the logsumexp of
 * the next head starts at an odd float), several heads and batches (the
 * (b, h) indexing), and long rows (T 2048 and 4096). Each must run the
 * tensor-core path: the launch count grows (so T is above the head size:
 * at T <= hs the plan takes the GEMM attention). */
static const struct shape tc_shapes[] = {
    {1, 65, 64, 1, 0, 0},     {2, 64, 128, 4, 0, 0},   {3, 95, 192, 3, 0, 0},
    {1, 200, 256, 2, 0, 0},   {2, 1000, 512, 4, 0, 0}, {1, 129, 128, 1, 0, 0},
    {2, 1024, 768, 12, 0, 0}, {1, 2048, 128, 2, 0, 0}, {1, 4096, 128, 1, 0, 0},
    {3, 333, 384, 3, 0, 0},   {2, 77, 128, 4, 0, 0},   {1, 300, 384, 4, 0, 0},
    {3, 40, 64, 2, 0, 0},     {1, 128, 256, 4, 0, 0},  {2, 192, 128, 2, 0, 0},
    {1, 127, 96, 1, 0, 0},    {2, 256, 256, 2, 0, 0},  {1, 130, 96, 3, 0, 0},
};

/* Forward and backward of one tc_shapes entry in bf16, against the CPU,
 * and twice: the backward (no atomics) must give the same bits again.
 * via names the path in the rows' tags. */
static void test_attention_tc(const struct shape *s, const char *via)
{
    size_t B = s->B, T = s->T, C = s->C, NH = s->NH;
    char tag[80];
    snprintf(tag, sizeof(tag), "%s B%zu T%zu hs%zu NH%zu", via, B, T, C / NH, NH);
    uint64_t before = gpt_cuda_flash_tc_launches();
    /* The table's way (op_cases.h): the forward's case, then the
     * backward's (its own forward first), against the CPU. */
    struct opc_case fwd = {
        GPT_BACKEND_OP_attention_forward, {B, T, C, NH}, OPC_FLASH_ONLY, OPC_BF16, 1e-4, 3e-2, 0};
    struct opc_case bwd = fwd;
    bwd.op = GPT_BACKEND_OP_attention_backward;
    bwd.tol = 2e-4;
    bwd.tol_bf16 = 5e-2;
    gpt_cuda_backend_set_attention(gpu, GPT_CUDA_ATTN_FLASH);
    run_op_case(&fwd, via);
    run_op_case(&bwd, via);
    /* Two forwards and one backward went through the tensor-core path. */
    report("flash_tc_path", tag, (double)(gpt_cuda_flash_tc_launches() - before != 3));
    struct pair qkv = pair_new(B * T * 3 * C, -2, 2), out = pair_new(B * T * C, 0, 0);
    struct pair att = pair_new(gpt_backend_att_floats(gpu, B, T, C, NH, 0), 0, 0);
    struct pair dout = pair_new(B * T * C, -1, 1), dqkv = pair_new(B * T * 3 * C, 0, 0);
    struct pair scratch = pair_new(gpt_backend_att_floats(gpu, B, T, C, NH, 1), 0, 0);
    float *first = malloc(B * T * 3 * C * sizeof(float)),
          *again = malloc(B * T * 3 * C * sizeof(float));
    if (!first || !again)
        abort();
    for (int r = 0; r < 2; r++) {
        gpt_backend_attention_forward(gpu, out.g, att.g, qkv.g, B, T, C, NH);
        gpt_backend_attention_backward(gpu, dqkv.g, scratch.g, dout.g, out.g, qkv.g, att.g, B, T, C,
                                       NH);
        check_rc(
            gpt_backend_download(gpu, r ? again : first, dqkv.g, B * T * 3 * C * sizeof(float)),
            "download");
    }
    report("flash_tc_deterministic", tag,
           (double)(memcmp(first, again, B * T * 3 * C * sizeof(float)) != 0));
    free(first);
    free(again);
    struct pair *all[] = {&qkv, &out, &att, &dout, &dqkv, &scratch};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pair_free(all[i]);
}

/* max |x - ref| / max |ref| over n floats (infinite where x has a NaN). */
static double rel_err(const float *x, const float *ref, size_t n)
{
    double maxref = 0.0, maxdiff = 0.0;
    for (size_t i = 0; i < n; i++) {
        maxref = fmax(maxref, fabs((double)ref[i]));
        maxdiff = isnan(x[i]) ? INFINITY : fmax(maxdiff, fabs((double)x[i] - (double)ref[i]));
    }
    return maxref > 0.0 ? maxdiff / maxref : maxdiff;
}

/* One output of a variant against its reference: the same bits (SAME) or
 * within flash_tc_variant_close's bound (CLOSE). */
enum { SAME, CLOSE };

static void variant_check(const char *tag, int how, const float *x, const float *ref, size_t n)
{
    if (how == SAME)
        report("flash_tc_variant_same", tag, (double)(memcmp(x, ref, n * sizeof(float)) != 0));
    else
        report("flash_tc_variant_close", tag, rel_err(x, ref, n));
}

/* The attention kernels' variants on one tc_shapes entry's inputs, each
 * against the fused backward and the m16 forward. The 32-row forward
 * (attention_forward m32), the split backward and the dS backward (the
 * default: the fused pass's dk, dv and dS^T tiles, its dQ shares summed
 * in a second pass in the same order with the same roundings; again over
 * chunks of 3 (b, h) pairs, as past its 1 GiB of tiles) give their bits; the two-pass backward sums
 * dq over key tiles in another order and takes D = dO . O in its dQ pass, and the k32 forward takes
 * each 64-key tile in two online-softmax steps: within 1e-3 of the largest value (an fp32 ordering
 * difference is ~1e-6; a wrong tile, mask or D is 1e-2 and up; the H200 measured 1.0e-5 at most for
 * the two-pass backward); twopass4 gives twopass's bits. The wg forward and the wg backward's two
 * passes (wgmma, head size 64; other sizes run m16 and twopass) sum each product's k steps in the
 * tensor cores' own order: within the same bound; with_wg 0 leaves them out (a fault in kernels
 * never yet run on a GPU must not cost the checks after them: only the
 * acceptance run's wg rows take them). The environment's choice is
 * restored after. */
static void test_attention_tc_variants(const struct shape *s, int with_wg)
{
    size_t B = s->B, T = s->T, C = s->C, NH = s->NH, nq = B * T * 3 * C, no = B * T * C;
    char tag[96];
    struct pair qkv = pair_new(nq, -2, 2), out = pair_new(no, 0, 0);
    struct pair att = pair_new(gpt_backend_att_floats(gpu, B, T, C, NH, 0), 0, 0);
    struct pair dout = pair_new(no, -1, 1), dqkv = pair_new(nq, 0, 0);
    struct pair scratch = pair_new(gpt_backend_att_floats(gpu, B, T, C, NH, 1), 0, 0);
    float *ro = malloc(no * sizeof(float)), *rd = malloc(nq * sizeof(float));
    float *o = malloc(no * sizeof(float)), *d = malloc(nq * sizeof(float));
    float *d2 = malloc(nq * sizeof(float)); /* twopass's, for twopass4 */
    if (!ro || !rd || !o || !d || !d2)
        abort();
    /* fwd_how, bwd_how: against the reference (entry 0); bwd_how 2:
     * against twopass's gradient. */
    static const struct {
        int bwd, fwd, fwd_how, bwd_how;
        const char *name;
        size_t ds_chunk; /* the dS backward's heads per chunk (0: all) */
    } vs[] = {{GPT_FLASH_BWD_FUSED, GPT_FLASH_FWD_M16, SAME, SAME, "fused, m16", 0},
              {GPT_FLASH_BWD_SPLIT, GPT_FLASH_FWD_M16, SAME, SAME, "split", 0},
              {GPT_FLASH_BWD_FUSED, GPT_FLASH_FWD_M32, SAME, SAME, "m32 forward", 0},
              {GPT_FLASH_BWD_FUSED, GPT_FLASH_FWD_K32, CLOSE, CLOSE, "k32 forward", 0},
              {GPT_FLASH_BWD_FUSED, GPT_FLASH_FWD_WG, CLOSE, CLOSE, "wg forward", 0},
              {GPT_FLASH_BWD_TWOPASS, GPT_FLASH_FWD_M16, SAME, CLOSE, "twopass", 0},
              {GPT_FLASH_BWD_TWOPASS4, GPT_FLASH_FWD_M16, SAME, 2, "twopass4", 0},
              {GPT_FLASH_BWD_WG, GPT_FLASH_FWD_M16, SAME, CLOSE, "wg backward", 0},
              {GPT_FLASH_BWD_DS, GPT_FLASH_FWD_M16, SAME, SAME, "ds", 0},
              {GPT_FLASH_BWD_DS, GPT_FLASH_FWD_M16, SAME, SAME, "ds in chunks of 3 heads", 3}};
    /* k -1: a pass that settles out's state (its first backward makes its
     * bf16 copy; from then on the forward writes it bf16 only, so every
     * download below converts the same way). */
    for (int k = -1; k < (int)(sizeof(vs) / sizeof(vs[0])); k++) {
        if (k > 0 && !with_wg && (vs[k].bwd == GPT_FLASH_BWD_WG || vs[k].fwd == GPT_FLASH_FWD_WG))
            continue;
        gpt_cuda_flash_tc_set_variants(vs[k < 0 ? 0 : k].bwd, vs[k < 0 ? 0 : k].fwd);
        gpt_cuda_flash_tc_set_ds_chunk(k < 0 ? 0 : vs[k].ds_chunk);
        gpt_backend_memzero(gpu, dqkv.g, nq * sizeof(float));
        gpt_backend_attention_forward(gpu, out.g, att.g, qkv.g, B, T, C, NH);
        gpt_backend_attention_backward(gpu, dqkv.g, scratch.g, dout.g, out.g, qkv.g, att.g, B, T, C,
                                       NH);
        check_rc(gpt_backend_download(gpu, k ? o : ro, out.g, no * sizeof(float)), "download");
        check_rc(gpt_backend_download(gpu, k ? d : rd, dqkv.g, nq * sizeof(float)), "download");
        if (k <= 0)
            continue;
        snprintf(tag, sizeof(tag), "B%zu T%zu hs%zu NH%zu %s: forward", B, T, C / NH, NH,
                 vs[k].name);
        variant_check(tag, vs[k].fwd_how, o, ro, no);
        snprintf(tag, sizeof(tag), "B%zu T%zu hs%zu NH%zu %s: backward", B, T, C / NH, NH,
                 vs[k].name);
        if (vs[k].bwd_how == 2)
            variant_check(tag, SAME, d, d2, nq);
        else
            variant_check(tag, vs[k].bwd_how, d, rd, nq);
        if (vs[k].bwd == GPT_FLASH_BWD_TWOPASS)
            memcpy(d2, d, nq * sizeof(float));
    }
    gpt_cuda_flash_tc_set_variants(-1, -1);
    gpt_cuda_flash_tc_set_ds_chunk(0);
    free(ro);
    free(rd);
    free(o);
    free(d);
    free(d2);
    struct pair *all[] = {&qkv, &out, &att, &dout, &dqkv, &scratch};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pair_free(all[i]);
}

/* The bf16 attention checks: the tensor-core shapes against the CPU and
 * the variants against the fused pass (what an attention variant chosen
 * by trainer.attention_backward or _forward changes); with_wg: the wg
 * variants too, and whether their sm_90a code ran. */
void test_attention_bf16(int with_wg, int bwd_spec)
{
    for (size_t i = 0; i < sizeof(tc_shapes) / sizeof(tc_shapes[0]); i++)
        test_attention_tc(&tc_shapes[i], "tensor cores");
    /* The first tensor-core backward above ran the guard (backend.h's
     * attention_guard): the variant in use against the fused pass on batch
     * 0, head 0; it passed, unless that variant is the fused pass. cuDNN's
     * backward (bf16 outputs) is not compared there: it passes when it
     * found nothing wrong (nothing compared, where cuDNN ran). */
    int bad = 0;
    const char *note = gpt_backend_attention_guard_note(gpu, &bad);
    enum gpt_flash_bwd bwd = gpt_flash_tc_bwd_of_spec(bwd_spec);
    int is_ref = bwd == GPT_FLASH_BWD_FUSED, is_dnn = bwd == GPT_FLASH_BWD_CUDNN;
    printf("     attention guard: %s\n", note[0] ? note : "nothing compared");
    report("attention_guard", "the first backward against the reference",
           is_ref   ? (note[0] != 0)
           : is_dnn ? bad
                    : (!note[0] || bad));
    for (size_t i = 0; i < sizeof(tc_shapes) / sizeof(tc_shapes[0]); i++)
        test_attention_tc_variants(&tc_shapes[i], with_wg);
    if (with_wg)
        report("flash_wg_live", "the wg kernels' sm_90a code ran",
               gpt_cuda_flash_wg_live() ? 0 : 1);
}

/* attention_forward cudnn and attention_backward cudnn (test_gpu_ops
 * --attention with --attn-fwd or --attn-bwd cudnn; a library that does not
 * load fails cudnn_attention_path): each tensor-core shape against the CPU
 * within the flash kernels' bf16 bounds, and the same bits twice (the
 * backward takes only engines without a nondeterministic note). A shape
 * cuDNN refuses runs the hand-written default (said on stderr, and here
 * as an info line); GPT-2's (T 1024, hs 64) must be taken by cuDNN, or
 * the acceptance run's cuDNN timing would time the default. */
void test_attention_cudnn(void)
{
    if (gpt_cuda_cudnn_version() == 0) { /* asked for, so a failure */
        report("cudnn_attention_path", "libcudnn.so.9 does not load here", 1.0);
        return;
    }
    printf("     cudnn attention: cuDNN %d\n", gpt_cuda_cudnn_version());
    gpt_cuda_flash_tc_set_variants(GPT_FLASH_BWD_CUDNN, GPT_FLASH_FWD_CUDNN);
    for (size_t i = 0; i < sizeof(tc_shapes) / sizeof(tc_shapes[0]); i++) {
        const struct shape *s = &tc_shapes[i];
        char tag[80];
        uint64_t before = gpt_cuda_flash_dnn_launches();
        test_attention_tc(s, "cudnn");
        /* the op table's three passes (a forward, then a forward and the
         * backward) and the repeat's four: 7 */
        uint64_t ran = gpt_cuda_flash_dnn_launches() - before;
        snprintf(tag, sizeof(tag), "B%zu T%zu hs%zu NH%zu: %llu of 7 passes on cuDNN", s->B, s->T,
                 s->C / s->NH, s->NH, (unsigned long long)ran);
        if (s->T == 1024 && s->C / s->NH == 64)
            report("cudnn_attention_path", tag, (double)(ran != 7));
        else
            printf("     cudnn attention %s\n", tag);
    }
    gpt_cuda_flash_tc_set_variants(-1, -1);
}
