/*
 * op_cases_impl: what op_cases.c (the descriptors and the table) and
 * op_cases_ref.c (the plain references) share: the tensor layouts of the
 * ops whose reference reads them by index, the fixed arguments of the
 * optimizer and scale cases, and the references. Private to op_cases.
 */
#ifndef GPT_TEST_OP_CASES_IMPL_H
#define GPT_TEST_OP_CASES_IMPL_H

#include <stddef.h>

#include "backend.h"
#include "unit/op_cases.h"

/* Tensor layouts (indices into b[] and h[]); a forward's case stops where
 * its backward's own tensors start. */
enum { EN_OUT, EN_INP, EN_WTE, EN_WPE, EN_DOUT, EN_DWTE, EN_DWPE };
enum { LN_OUT, LN_MEAN, LN_RSTD, LN_INP, LN_W, LN_B, LN_DOUT, LN_DINP, LN_DW, LN_DB };
enum { RLN_RES, RLN_SKIP, RLN_W, RLN_B, RLN_OUT, RLN_MEAN, RLN_RSTD };
enum { MM_OUT, MM_INP, MM_W, MM_BIAS, MM_DOUT, MM_DINP, MM_DW, MM_DB };
enum { MMR_OUT, MMR_INP, MMR_W, MMR_BIAS, MMR_RES };
enum { MMG_OUT, MMG_PRE, MMG_INP, MMG_W, MMG_BIAS };
enum { DG_PRE, DG_INP, DG_W, DG_BIAS, DG_OUT, DG_DOUT, DG_DINP, DG_DW, DG_DB };
enum { AT_OUT, AT_ATT, AT_QKV, AT_DOUT, AT_SCRATCH, AT_DQKV };
enum { GE_INP, GE_OUT, GE_DOUT, GE_DINP };
enum { XE_LOGITS, XE_TARGETS, XE_LOSSES, XE_WORK };
enum { AW_P, AW_G, AW_M, AW_V, AW_SUMSQ };

/* The scale case's factor and the optimizer cases' arguments (three
 * steps, t = 1..3). */
#define OPC_SCALE         0.37f
#define OPC_AW_LR         1e-3f
#define OPC_AW_B1         0.9f
#define OPC_AW_B2         0.95f
#define OPC_AW_EPS        1e-8f
#define OPC_AW_WD         0.1f
#define OPC_AW_GRAD_SCALE 0.5f
#define OPC_AW_CLIP       1.0

/* sum a[i] * b[i] in double. */
double opc_dot(const float *a, const float *b, size_t n);
/* The spans of an adamw_multi* case (d: spans, start) into sp (NULL: only
 * counted); returns the end of the last. */
size_t opc_spans(const struct opc_case *c, struct gpt_adamw_span *sp);

/* op_cases_ref.c: each writes the OPC_OUT tensors of its op's cases into
 * h from the initial contents there (opc_op.ref). */
void opc_ref_zero(void *const *h, const struct opc_case *c);
void opc_ref_xfer(void *const *h, const struct opc_case *c);
void opc_ref_span(void *const *h, const struct opc_case *c);
void opc_ref_encoder(void *const *h, const struct opc_case *c);
void opc_ref_layernorm(void *const *h, const struct opc_case *c);
void opc_ref_residual_layernorm(void *const *h, const struct opc_case *c);
void opc_ref_matmul(void *const *h, const struct opc_case *c);
void opc_ref_matmul_residual(void *const *h, const struct opc_case *c);
void opc_ref_matmul_gelu(void *const *h, const struct opc_case *c);
void opc_ref_attention(void *const *h, const struct opc_case *c);
void opc_ref_gelu(void *const *h, const struct opc_case *c);
void opc_ref_residual(void *const *h, const struct opc_case *c);
void opc_ref_scale(void *const *h, const struct opc_case *c);
void opc_ref_sumsq(void *const *h, const struct opc_case *c);
void opc_ref_loss_accum(void *const *h, const struct opc_case *c);
void opc_ref_xent(void *const *h, const struct opc_case *c);
void opc_ref_adamw(void *const *h, const struct opc_case *c);

#endif
