/*
 * Run-time choice of kernels: probe the CPU once, copy the reference table,
 * let the best installer this build carries replace what it implements.
 * Every family the CPU has gets its own table (quant_traits_isa, for tests
 * and benchmarks); the dispatched one is the best of them, or the forced one.
 * This file and the *_avx2.c / *_neon.c files are the only places that know
 * about instruction sets.
 */
#include "quant/kernels.h"

#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#if defined(LARES_HAVE_X86) && defined(__GNUC__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(LARES_HAVE_ARM64)
#include <sys/auxv.h>
#endif
#if defined(__APPLE__)
#include <sys/sysctl.h>
#endif

static quant_isa forced = QUANT_ISA_AUTO;
static const char *isa_name = "scalar";
static quant_cpu cpu;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static bool filled;

#if defined(LARES_HAVE_X86) && defined(__GNUC__)
/* XCR0: which register states the OS saves on a context switch */
static uint64_t xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

/* The level-1 data cache, as the OS tells it (glibc and bionic from CPUID or
 * sysfs, macOS from sysctl); 32 KiB, the smallest of the CPUs lares tunes
 * for, where it does not or says something implausible */
static uint32_t probe_l1d(void) {
    long bytes = 0;
#if defined(_SC_LEVEL1_DCACHE_SIZE)
    bytes = sysconf(_SC_LEVEL1_DCACHE_SIZE);
#elif defined(__APPLE__)
    int64_t v = 0;
    size_t len = sizeof v;
    if (sysctlbyname("hw.l1dcachesize", &v, &len, NULL, 0) == 0) {
        bytes = (long)v;
    }
#endif
    return bytes >= 8 * 1024 && bytes <= 4 * 1024 * 1024 ? (uint32_t)bytes : 32 * 1024;
}

static void probe_isa(void) {
#if defined(LARES_HAVE_X86) && defined(__GNUC__)
    __builtin_cpu_init();
    cpu.avx2 = __builtin_cpu_supports("avx2");
    cpu.fma = __builtin_cpu_supports("fma");
    /* F16C has no __builtin_cpu_supports name in older compilers: every
     * AVX2 CPU shipped has it (Haswell, Excavator onward). */
    cpu.f16c = cpu.avx2;
    /* The AVX-512 and VNNI bits straight from CPUID (older compilers lack their
     * names), and only where the OS saves the registers they use. */
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) { /* OSXSAVE */
        return;
    }
    const uint64_t x = xcr0();
    const bool ymm_ok = (x & 0x6) == 0x6, zmm_ok = (x & 0xe6) == 0xe6;
    if (!ymm_ok) {
        cpu.avx2 = cpu.fma = cpu.f16c = false;
        return;
    }
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        cpu.avx512f = zmm_ok && (b & (1u << 16));
        cpu.avx512bw = zmm_ok && (b & (1u << 30));
        cpu.avx512vl = zmm_ok && (b & (1u << 31));
        cpu.avx512vbmi = zmm_ok && (c & (1u << 1));
        cpu.avx512vnni = zmm_ok && (c & (1u << 11));
        if (a >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) {
            cpu.avxvnni = (a & (1u << 4)) != 0;
            cpu.avx512bf16 = zmm_ok && (a & (1u << 5));
        }
    }
#elif defined(LARES_HAVE_ARM64)
    cpu.neon = true; /* mandatory in AArch64 */
#if defined(__linux__)
    unsigned long hw = getauxval(AT_HWCAP);
    cpu.dotprod = (hw & (1UL << 20)) != 0; /* HWCAP_ASIMDDP */
    cpu.fp16 = (hw & (1UL << 10)) != 0;    /* HWCAP_ASIMDHP */
    cpu.i8mm = (getauxval(AT_HWCAP2) & (1UL << 13)) != 0; /* HWCAP2_I8MM */
#elif defined(__APPLE__)
    int v = 0;
    size_t len = sizeof v;
    if (sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &len, NULL, 0) == 0) {
        cpu.dotprod = v != 0;
    }
    v = 0;
    len = sizeof v;
    if (sysctlbyname("hw.optional.arm.FEAT_I8MM", &v, &len, NULL, 0) == 0) {
        cpu.i8mm = v != 0;
    }
    cpu.fp16 = true;
#endif
#endif
}

static void probe_cpu(void) {
    cpu.l1d_bytes = probe_l1d();
    probe_isa();
}

const quant_cpu *quant_cpu_features(void) {
    pthread_once(&cpu_once, probe_cpu);
    return &cpu;
}

static char flags_line[160];
static pthread_once_t flags_once = PTHREAD_ONCE_INIT;

static void fill_flags(void) {
    const quant_cpu *c = quant_cpu_features();
    const struct {
        bool on;
        const char *name;
    } f[] = {{c->avx2, "avx2"},
             {c->fma, "fma"},
             {c->f16c, "f16c"},
             {c->avx512f, "avx512f"},
             {c->avx512bw, "avx512bw"},
             {c->avx512vl, "avx512vl"},
             {c->avx512vnni, "avx512vnni"},
             {c->avx512bf16, "avx512bf16"},
             {c->avx512vbmi, "avx512vbmi"},
             {c->avxvnni, "avxvnni"},
             {c->neon, "neon"},
             {c->dotprod, "dotprod"},
             {c->fp16, "fp16"},
             {c->i8mm, "i8mm"}};
    size_t used = 0;
    for (size_t i = 0; i < LARES_ARRAY_LEN(f); i++) {
        if (f[i].on && used + strlen(f[i].name) + 2 < sizeof flags_line) {
            used += (size_t)snprintf(flags_line + used, sizeof flags_line - used, "%s%s",
                                     used ? " " : "", f[i].name);
        }
    }
    if (used == 0) {
        snprintf(flags_line, sizeof flags_line, "none");
    }
}

const char *quant_cpu_flags(void) {
    pthread_once(&flags_once, fill_flags);
    return flags_line;
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
    case QUANT_ISA_AVXVNNI:
#if defined(LARES_HAVE_X86)
        return c->avx2 && c->fma && c->f16c && c->avxvnni;
#else
        return false;
#endif
    case QUANT_ISA_AVX512:
#if defined(LARES_HAVE_X86)
        return c->avx2 && c->fma && c->f16c && c->avx512f && c->avx512bw && c->avx512vl &&
               c->avx512vnni;
#else
        return false;
#endif
    case QUANT_ISA_NEON:
    case QUANT_ISA_NEON_NODOT:
#if defined(LARES_HAVE_ARM64)
        return c->neon;
#else
        return false;
#endif
    case QUANT_ISA_NEON_I8MM:
#if defined(LARES_HAVE_ARM64)
        return c->neon && c->dotprod && c->i8mm;
#else
        return false;
#endif
    case QUANT_ISA_COUNT:
        break;
    }
    (void)c;
    return false;
}

/* ---- one table per kernel family, each filled once ---- */

static quant_traits tables[QUANT_ISA_COUNT][GGUF_TYPE_COUNT];
static pthread_once_t tables_once[QUANT_ISA_COUNT] = {
    PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
    PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};
static_assert(QUANT_ISA_COUNT == 8, "one PTHREAD_ONCE_INIT per kernel family");

const char *quant_isa_family_name(quant_isa isa) {
    if (isa == QUANT_ISA_AUTO) {
        return quant_isa_name();
    }
    if ((unsigned)isa >= QUANT_ISA_COUNT || !isa_available(isa)) {
        return NULL;
    }
    switch (isa) {
    case QUANT_ISA_AVX2:
        return "avx2";
    case QUANT_ISA_AVXVNNI:
        return "avxvnni";
    case QUANT_ISA_AVX512:
        return "avx512vnni";
    case QUANT_ISA_NEON:
        return quant_cpu_features()->dotprod ? "neon+dotprod" : "neon";
    case QUANT_ISA_NEON_NODOT:
        return "neon";
    case QUANT_ISA_NEON_I8MM:
        return "neon+i8mm";
    default:
        return "scalar";
    }
}

/* Copies the reference table and lets the family's installer replace what it
 * implements. Called only for families isa_available() accepted. */
static void install(quant_traits *t, quant_isa isa) {
    memcpy(t, quant_ref_table, sizeof tables[0]);
#if defined(LARES_HAVE_X86)
    if (isa == QUANT_ISA_AVX2 || isa == QUANT_ISA_AVXVNNI || isa == QUANT_ISA_AVX512) {
        quant_install_avx2(t);
    }
    if (isa == QUANT_ISA_AVX2 || isa == QUANT_ISA_AVXVNNI) {
        quant_install_avx2_attend(t);
    } else if (isa == QUANT_ISA_AVX512) {
        quant_install_avx512_attend(t);
    }
    /* the packed-activation GEMM over the AVX2 table: VPDPBUSD in the VNNI
     * families; with AVX2 alone int16 sums of VPMADDUBSW for the types whose
     * codes allow them (docs/kernels.md) */
    if (isa == QUANT_ISA_AVX2) {
        quant_install_gemm_avx2(t);
        quant_install_rows_avx2(t);
    } else if (isa == QUANT_ISA_AVXVNNI) {
        quant_install_avxvnni_kquants(t);
        quant_install_gemm_avxvnni(t);
        quant_install_rows_avxvnni(t);
    } else if (isa == QUANT_ISA_AVX512) {
        quant_install_avx512_kquants(t);
        quant_install_gemm_avx512(t);
        quant_install_rows_avx512(t);
    }
#endif
#if defined(LARES_HAVE_ARM64)
    if (isa == QUANT_ISA_NEON) {
        quant_install_neon(t, quant_cpu_features()->dotprod);
        if (quant_cpu_features()->dotprod) {
            quant_install_gemm_neon_dotprod(t);
        }
        quant_install_rows_neon(t, quant_cpu_features()->dotprod);
    } else if (isa == QUANT_ISA_NEON_I8MM) {
        quant_install_neon(t, true);
        quant_install_gemm_neon_i8mm(t);
        quant_install_rows_neon(t, true);
    } else if (isa == QUANT_ISA_NEON_NODOT) {
        quant_install_neon(t, false);
        quant_install_rows_neon(t, false);
    }
    if (isa == QUANT_ISA_NEON || isa == QUANT_ISA_NEON_NODOT || isa == QUANT_ISA_NEON_I8MM) {
        quant_install_neon_attend(t);
    }
#endif
    (void)isa;
}

static void fill_scalar(void) {
    install(tables[QUANT_ISA_SCALAR], QUANT_ISA_SCALAR);
}
static void fill_avx2(void) {
    install(tables[QUANT_ISA_AVX2], QUANT_ISA_AVX2);
}
static void fill_avxvnni(void) {
    install(tables[QUANT_ISA_AVXVNNI], QUANT_ISA_AVXVNNI);
}
static void fill_avx512(void) {
    install(tables[QUANT_ISA_AVX512], QUANT_ISA_AVX512);
}
static void fill_neon(void) {
    install(tables[QUANT_ISA_NEON], QUANT_ISA_NEON);
}
static void fill_neon_nodot(void) {
    install(tables[QUANT_ISA_NEON_NODOT], QUANT_ISA_NEON_NODOT);
}
static void fill_neon_i8mm(void) {
    install(tables[QUANT_ISA_NEON_I8MM], QUANT_ISA_NEON_I8MM);
}

/* the filled table of an available family other than AUTO */
static const quant_traits *family_table(quant_isa isa) {
    static void (*const fillers[QUANT_ISA_COUNT])(void) = {
        [QUANT_ISA_SCALAR] = fill_scalar,
        [QUANT_ISA_AVX2] = fill_avx2,
        [QUANT_ISA_AVXVNNI] = fill_avxvnni,
        [QUANT_ISA_AVX512] = fill_avx512,
        [QUANT_ISA_NEON] = fill_neon,
        [QUANT_ISA_NEON_NODOT] = fill_neon_nodot,
        [QUANT_ISA_NEON_I8MM] = fill_neon_i8mm,
    };
    pthread_once(&tables_once[isa], fillers[isa]);
    return tables[isa];
}

/* ---- the dispatched choice ---- */

static const quant_traits *table;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void fill(void) {
    quant_isa want = forced;
    if (want == QUANT_ISA_AUTO) {
        want = isa_available(QUANT_ISA_AVX512)    ? QUANT_ISA_AVX512
               : isa_available(QUANT_ISA_AVXVNNI) ? QUANT_ISA_AVXVNNI
               : isa_available(QUANT_ISA_AVX2)    ? QUANT_ISA_AVX2
               : isa_available(QUANT_ISA_NEON_I8MM) ? QUANT_ISA_NEON_I8MM
               : isa_available(QUANT_ISA_NEON)    ? QUANT_ISA_NEON
                                                  : QUANT_ISA_SCALAR;
    }
    table = family_table(want);
    isa_name = quant_isa_family_name(want);
    filled = true;
}

lares_status quant_force_isa(quant_isa isa, lares_error *err) {
    if (filled) {
        return lares_fail(err, LARES_EINVAL, "quant: kernels already chosen (%s)", isa_name);
    }
    if ((unsigned)isa >= QUANT_ISA_COUNT || !isa_available(isa)) {
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

const quant_traits *quant_traits_isa(uint32_t type, quant_isa isa) {
    if (isa == QUANT_ISA_AUTO) {
        return quant_traits_of(type);
    }
    if ((unsigned)isa >= QUANT_ISA_COUNT || !isa_available(isa)) {
        return NULL;
    }
    const quant_traits *t = family_table(isa);
    if (type >= GGUF_TYPE_COUNT || t[type].name == NULL) {
        return NULL;
    }
    return &t[type];
}

const quant_rows_fmt *quant_rows(void) {
    pthread_once(&table_once, fill);
    for (uint32_t i = 0; i < GGUF_TYPE_COUNT; i++) {
        if (table[i].rows != NULL) {
            return table[i].rows_fmt;
        }
    }
    return NULL;
}

const quant_panel_fmt *quant_panels(void) {
    pthread_once(&table_once, fill);
    for (uint32_t i = 0; i < GGUF_TYPE_COUNT; i++) {
        if (table[i].gemm != NULL) {
            return table[i].panel;
        }
    }
    return NULL;
}

const char *quant_isa_name(void) {
    pthread_once(&table_once, fill);
    return isa_name;
}
