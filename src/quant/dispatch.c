/*
 * Run-time choice of kernels: probe the CPU once, copy the reference table,
 * let the best installer this build carries replace what it implements.
 * This file and the *_avx2.c / *_neon.c files are the only places that know
 * about instruction sets.
 */
#include "quant/kernels.h"

#include <pthread.h>
#if defined(__linux__) && defined(LARES_HAVE_ARM64)
#include <sys/auxv.h>
#endif
#if defined(__APPLE__)
#include <sys/sysctl.h>
#endif

static quant_traits table[GGUF_TYPE_COUNT];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static quant_isa forced = QUANT_ISA_AUTO;
static const char *isa_name = "scalar";
static quant_cpu cpu;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static bool filled;

static void probe_cpu(void) {
#if defined(LARES_HAVE_X86) && defined(__GNUC__)
    __builtin_cpu_init();
    cpu.avx2 = __builtin_cpu_supports("avx2");
    cpu.fma = __builtin_cpu_supports("fma");
    cpu.avx512f = __builtin_cpu_supports("avx512f");
    /* F16C has no __builtin_cpu_supports name in older compilers: every
     * AVX2 CPU shipped has it (Haswell, Excavator onward). */
    cpu.f16c = cpu.avx2;
#elif defined(LARES_HAVE_ARM64)
    cpu.neon = true; /* mandatory in AArch64 */
#if defined(__linux__)
    unsigned long hw = getauxval(AT_HWCAP);
    cpu.dotprod = (hw & (1UL << 20)) != 0; /* HWCAP_ASIMDDP */
    cpu.fp16 = (hw & (1UL << 10)) != 0;    /* HWCAP_ASIMDHP */
#elif defined(__APPLE__)
    int v = 0;
    size_t len = sizeof v;
    if (sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &len, NULL, 0) == 0) {
        cpu.dotprod = v != 0;
    }
    cpu.fp16 = true;
#endif
#endif
}

const quant_cpu *quant_cpu_features(void) {
    pthread_once(&cpu_once, probe_cpu);
    return &cpu;
}

static bool isa_available(quant_isa isa) {
    const quant_cpu *c = quant_cpu_features();
    switch (isa) {
    case QUANT_ISA_AUTO:
    case QUANT_ISA_SCALAR:
        return true;
    case QUANT_ISA_AVX2:
#if defined(LARES_HAVE_X86)
        return c->avx2 && c->fma && c->f16c;
#else
        return false;
#endif
    case QUANT_ISA_NEON:
#if defined(LARES_HAVE_ARM64)
        return c->neon;
#else
        return false;
#endif
    }
    (void)c;
    return false;
}

static void fill(void) {
    memcpy(table, quant_ref_table, sizeof table);
    quant_isa want = forced;
    if (want == QUANT_ISA_AUTO) {
        want = isa_available(QUANT_ISA_AVX2)   ? QUANT_ISA_AVX2
               : isa_available(QUANT_ISA_NEON) ? QUANT_ISA_NEON
                                               : QUANT_ISA_SCALAR;
    }
#if defined(LARES_HAVE_X86)
    if (want == QUANT_ISA_AVX2) {
        quant_install_avx2(table);
        isa_name = "avx2";
    }
#endif
#if defined(LARES_HAVE_ARM64)
    if (want == QUANT_ISA_NEON) {
        quant_install_neon(table, quant_cpu_features()->dotprod);
        isa_name = quant_cpu_features()->dotprod ? "neon+dotprod" : "neon";
    }
#endif
    filled = true;
}

lares_status quant_force_isa(quant_isa isa, lares_error *err) {
    if (filled) {
        return lares_fail(err, LARES_EINVAL, "quant: kernels already chosen (%s)", isa_name);
    }
    if (!isa_available(isa)) {
        return lares_fail(err, LARES_EUNSUPPORTED,
                          "quant: the requested instruction set is not available on this CPU "
                          "or in this build");
    }
    forced = isa;
    return LARES_OK;
}

const quant_traits *quant_traits_of(uint32_t type) {
    pthread_once(&table_once, fill);
    if (type >= GGUF_TYPE_COUNT || table[type].name == NULL) {
        return NULL;
    }
    return &table[type];
}

const char *quant_isa_name(void) {
    pthread_once(&table_once, fill);
    return isa_name;
}
