/*
 * op_cases: the one table of backend op cases, and how to run each op.
 * test_ops_gradcheck checks every row on the CPU backend (the outputs
 * against a plain host reference, the gradients by finite differences);
 * test_gpu_ops runs every row on the CUDA backend and the CPU backend on
 * the same inputs and compares them. A row names an op of
 * engine/include/backend_ops.def, its shape (several rows per op: odd
 * sizes, sizes past the kernels' blocks), the GPU precisions it runs in,
 * its error bound and whether it gets an element-wise gradient check.
 * Every stream op (group OP) of the list has a descriptor here (a missing
 * one fails the link: opc_ops is generated from the list) and at least one
 * row (test_ops_gradcheck's test_every_op_has_cases). Adding an op: its
 * row in backend_ops.def, its kernels, and here its descriptor and rows.
 * Test code; single-threaded.
 */
#ifndef GPT_TEST_OP_CASES_H
#define GPT_TEST_OP_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "rng.h"

/* The GPU precisions a row runs in (the CPU computes fp32 only). */
#define OPC_FP32 1u
#define OPC_BF16 2u

/* Per-op flags of a row (the descriptor says which it reads). */
#define OPC_BIAS       1u  /* matmul*: with a bias (else NULL) */
#define OPC_DINP       2u  /* matmul_backward: with dinp (else NULL) */
#define OPC_FLASH_ONLY 4u  /* attention*: the GPU's flash path only, not also the GEMM path */
#define OPC_IN_PLACE   8u  /* residual_forward: out aliases a */
#define OPC_XENT_DL    16u /* softmax_xent: dlogits with the losses in one call */
#define OPC_XENT_AFTER 32u /* softmax_xent: a loss call, then GPT_XENT_AFTER_LOSS */
#define OPC_GAP        64u /* adamw_multi*: a hole between two spans */

/* One case: op, shape, flags, precisions, error bounds, gradient check. */
struct opc_case {
    enum gpt_backend_op op;
    size_t d[4];     /* the shape, named by the descriptor's dims */
    unsigned flags;  /* OPC_BIAS ... */
    unsigned dtypes; /* OPC_FP32 | OPC_BF16: the GPU's precisions */
    double tol; /* normalised error bound in fp32 (GPU against CPU, CPU against the reference) */
    double tol_bf16; /* ... of the GPU in bf16 against the fp32 CPU */
    int grad;        /* 1: every input element's gradient by finite differences (else one
                        random direction's: shapes too large for the element-wise check) */
};

enum opc_role {
    OPC_IN,    /* read by the op */
    OPC_OUT,   /* written (it may be read first: in place); compared */
    OPC_STATE, /* the backend's own (a forward's saved statistics, att): not compared */
    OPC_GRAD,  /* d loss / d tensor `of`: compared on the GPU, checked by finite differences */
};

enum opc_type { OPC_F32, OPC_I32, OPC_F64 };

/* One buffer of a case, in backend memory; n 0 passes NULL. Initial
 * contents: uniform in [lo, hi) (lo == hi: that constant); I32 uniform
 * integers in [lo, hi), a negative one being an ignored target. */
struct opc_tensor {
    const char *name;
    size_t n;
    enum opc_type type;
    enum opc_role role;
    double lo, hi;
    int of;    /* OPC_GRAD: the index of the input it is the gradient of */
    int acc;   /* OPC_GRAD: the op adds to it (checks subtract the initial contents) */
    int exact; /* bit for bit on every backend and precision (bound 0) */
    /* Floor of the error's normaliser, where the largest value may be
     * small and a last-bit difference would be magnified by it: GELU's
     * outputs near 0 for negative inputs, a loss near 0 (in nats, an
     * absolute error is what matters). */
    double floor;
};

#define OPC_MAX_TENSORS 12

/* How to run one op. b[] and h[] are in the order tensors() gives. */
struct opc_op {
    const char *dims; /* the names of d[0..3] for reports, e.g. "N C OC" */
    /* The case's tensors into t; returns their count. `be` (may be NULL)
     * sizes state the backend owns (attention's att and scratch). */
    int (*tensors)(const struct opc_case *c, struct gpt_backend *be, struct opc_tensor *t);
    /* The op on be, buffers in backend memory. A backward op runs its
     * forward first where it reads saved state, so that each backend
     * reads its own. Returns 0 or a negative error (a transfer failed). */
    int (*run)(struct gpt_backend *be, void *const *b, const struct opc_case *c);
    /* The plain reference (double arithmetic): from the initial contents
     * in h (host memory), writes every OPC_OUT tensor's expected value
     * into h. NULL when the op writes only gradients. */
    void (*ref)(void *const *h, const struct opc_case *c);
    /* The scalar whose gradient the OPC_GRAD tensors are, from the
     * forward alone, on a backend whose buffers host code can address.
     * NULL when the op has no OPC_GRAD tensor. */
    double (*loss)(struct gpt_backend *be, void *const *b, const struct opc_case *c);
};

/* The table and its length. */
extern const struct opc_case opc_cases[];
extern const size_t opc_n_cases;

/* The descriptor of a stream op; NULL for a control slot (group CTL). */
const struct opc_op *opc_op_of(enum gpt_backend_op op);

/* "B2 T5 C12 NH3 bias" for reports, into buf (cap bytes); returns buf. */
const char *opc_tag(const struct opc_case *c, char *buf, size_t cap);

/* A seed from the case's op, shape and flags: a case draws the same
 * inputs wherever it stands in the table and whatever runs before it. */
uint64_t opc_seed(const struct opc_case *c);

/* Element size of a tensor type, in bytes. */
size_t opc_type_size(enum opc_type type);

/* t's initial contents into host (t->n elements of its type). */
void opc_fill(const struct opc_tensor *t, struct gpt_rng *rng, void *host);

/* Normalised error of got against want over n elements of type: the
 * largest difference over the largest |want| (or `floor` where larger);
 * NaN on one side only counts as infinite. ret_at (may be NULL) gets
 * where the largest difference is. */
double opc_err(enum opc_type type, const void *want, const void *got, size_t n, double floor,
               size_t *ret_at);

#endif
