/*
 * blas_core: see blas_core.h. The table follows the core names OpenBLAS
 * 0.3.21's DYNAMIC_ARCH x86-64 build reports (driver/others/dynamic.c).
 */
#include "blas_core.h"

#include <cblas.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

static const struct {
    const char *name;
    enum gpt_blas_isa isa;
} blas_cores[] = {
    {"Katmai", GPT_BLAS_ISA_SSE},
    {"Coppermine", GPT_BLAS_ISA_SSE},
    {"Northwood", GPT_BLAS_ISA_SSE},
    {"Prescott", GPT_BLAS_ISA_SSE},
    {"Banias", GPT_BLAS_ISA_SSE},
    {"Atom", GPT_BLAS_ISA_SSE},
    {"Core2", GPT_BLAS_ISA_SSE},
    {"Penryn", GPT_BLAS_ISA_SSE},
    {"Dunnington", GPT_BLAS_ISA_SSE},
    {"Nehalem", GPT_BLAS_ISA_SSE},
    {"Athlon", GPT_BLAS_ISA_SSE},
    {"Opteron", GPT_BLAS_ISA_SSE},
    {"Opteron(SSE3)", GPT_BLAS_ISA_SSE},
    {"OpteronSSE3", GPT_BLAS_ISA_SSE},
    {"Barcelona", GPT_BLAS_ISA_SSE},
    {"Nano", GPT_BLAS_ISA_SSE},
    {"Bobcat", GPT_BLAS_ISA_SSE},
    {"Sandybridge", GPT_BLAS_ISA_AVX},
    {"Bulldozer", GPT_BLAS_ISA_AVX},
    {"Piledriver", GPT_BLAS_ISA_AVX},
    {"Steamroller", GPT_BLAS_ISA_AVX},
    {"Haswell", GPT_BLAS_ISA_AVX2},
    {"Excavator", GPT_BLAS_ISA_AVX2},
    {"Zen", GPT_BLAS_ISA_AVX2},
    {"SkylakeX", GPT_BLAS_ISA_AVX512},
    {"Cooperlake", GPT_BLAS_ISA_AVX512},
    {"Sapphirerapids", GPT_BLAS_ISA_AVX512},
};

struct gpt_blas_cpu gpt_blas_cpu_probe(void)
{
    struct gpt_blas_cpu cpu = {GPT_BLAS_ISA_UNKNOWN, false};
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    cpu.amd = __builtin_cpu_is("amd");
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        cpu.isa = GPT_BLAS_ISA_AVX512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        cpu.isa = GPT_BLAS_ISA_AVX2;
    else if (__builtin_cpu_supports("avx"))
        cpu.isa = GPT_BLAS_ISA_AVX;
    else
        cpu.isa = GPT_BLAS_ISA_SSE;
#endif
    return cpu;
}

const char *gpt_blas_core_name(void)
{
    const char *s = openblas_get_corename();
    return s ? s : "unknown";
}

bool gpt_blas_core_dynamic(void)
{
    const char *s = openblas_get_config();
    return s && strstr(s, "DYNAMIC_ARCH");
}

enum gpt_blas_isa gpt_blas_core_isa(const char *name)
{
    for (size_t i = 0; name && i < sizeof(blas_cores) / sizeof(blas_cores[0]); i++)
        if (strcasecmp(name, blas_cores[i].name) == 0)
            return blas_cores[i].isa;
    return GPT_BLAS_ISA_UNKNOWN;
}

const char *gpt_blas_isa_name(enum gpt_blas_isa isa)
{
    switch (isa) {
    case GPT_BLAS_ISA_SSE:
        return "SSE";
    case GPT_BLAS_ISA_AVX:
        return "AVX";
    case GPT_BLAS_ISA_AVX2:
        return "AVX2";
    case GPT_BLAS_ISA_AVX512:
        return "AVX-512";
    case GPT_BLAS_ISA_UNKNOWN:
        break;
    }
    return "unknown";
}

const char *gpt_blas_core_better(const char *core, struct gpt_blas_cpu cpu)
{
    enum gpt_blas_isa have = gpt_blas_core_isa(core);
    /* An unknown core may be newer than this table: OpenBLAS knows best. */
    if (have == GPT_BLAS_ISA_UNKNOWN || cpu.isa == GPT_BLAS_ISA_UNKNOWN || have >= cpu.isa)
        return NULL;
    switch (cpu.isa) {
    case GPT_BLAS_ISA_AVX512:
        return "SkylakeX";
    case GPT_BLAS_ISA_AVX2:
        return cpu.amd ? "Zen" : "Haswell";
    case GPT_BLAS_ISA_AVX:
        return "Sandybridge";
    default:
        return NULL;
    }
}
