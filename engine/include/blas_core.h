/*
 * blas_core: which OpenBLAS kernel set ("core") runs the CPU's matrix
 * products, and whether this CPU could run a faster one. A DYNAMIC_ARCH
 * OpenBLAS picks its core when it loads; a release that does not know the
 * CPU model falls back to a generic SSE3 core (Prescott) even on a CPU with
 * AVX-512, about 3.5x slower on GPT-2's matrices. The pick can only be
 * changed before the library loads (OPENBLAS_CORETYPE), so the daemon
 * decides here and re-executes itself (daemon/node/blas_select.c).
 * Pure apart from the probes; any thread.
 */
#ifndef GPT_BLAS_CORE_H
#define GPT_BLAS_CORE_H

#include <stdbool.h>

/* The widest vector instruction set a core's kernels use, or a CPU runs
 * (with the operating system saving its registers). */
enum gpt_blas_isa {
    GPT_BLAS_ISA_UNKNOWN, /* a core name the table lacks */
    GPT_BLAS_ISA_SSE,
    GPT_BLAS_ISA_AVX,
    GPT_BLAS_ISA_AVX2,   /* with FMA */
    GPT_BLAS_ISA_AVX512, /* F, CD, BW, DQ and VL: SkylakeX's kernels */
};

/* What a CPU offers, as far as the choice of core goes. */
struct gpt_blas_cpu {
    enum gpt_blas_isa isa;
    bool amd; /* AMD's AVX2 parts run OpenBLAS's Zen kernels */
};

/* This CPU, from cpuid (GCC's __builtin_cpu_supports, which checks that
 * the OS enabled the wide registers). GPT_BLAS_ISA_UNKNOWN off x86-64. */
struct gpt_blas_cpu gpt_blas_cpu_probe(void);

/* The core OpenBLAS runs now (openblas_get_corename(), e.g. "Prescott",
 * "SkylakeX"); static storage. */
const char *gpt_blas_core_name(void);

/* True when the OpenBLAS loaded is a DYNAMIC_ARCH build (its config string
 * says so), the only kind OPENBLAS_CORETYPE changes. */
bool gpt_blas_core_dynamic(void);

/* The instruction set core `name` uses (case-insensitive); UNKNOWN for a
 * name the table lacks. */
enum gpt_blas_isa gpt_blas_core_isa(const char *name);

/* The static short name of `isa` ("AVX-512", "AVX2", "AVX", "SSE", "unknown"). */
const char *gpt_blas_isa_name(enum gpt_blas_isa isa);

/* The OPENBLAS_CORETYPE value to ask for when `core` is a generic fallback
 * below what `cpu` runs: "SkylakeX" for AVX-512, "Zen" or "Haswell" for
 * AVX2, "Sandybridge" for AVX. NULL when the core already fits the CPU, or
 * either is unknown (gptd then keeps OpenBLAS's own choice). Static
 * storage; pure. */
const char *gpt_blas_core_better(const char *core, struct gpt_blas_cpu cpu);

#endif
