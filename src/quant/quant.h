/*
 * quant: block formats of weights and activations.
 *
 * Owns: one trait row per supported tensor type (numbers are GGUF's type ids):
 * block geometry, dequantize, the reference quantizer, the dot product of a
 * weight row with an activation row, and the format activations must be in for
 * that dot product. A scalar reference of every kernel is the definition of
 * correct; SIMD kernels (AVX2/FMA/F16C on x86-64, NEON on aarch64) are chosen
 * once at run time by quant/dispatch.c and tested against the reference.
 *
 * Knows nothing about what a tensor means.
 *
 * Thread safety: the trait tables are immutable after the first call to
 * quant_traits_of (filled once under pthread_once); kernels are re-entrant.
 */
#ifndef LARES_QUANT_H
#define LARES_QUANT_H

#include "core/core.h"
#include "gguf/gguf.h"

/* Dequantizes n elements (a multiple of the block) from src to dst. */
typedef void (*quant_to_float_fn)(const void *restrict src, float *restrict dst, int64_t n);
/* Quantizes n elements (a multiple of the block) from src to dst. */
typedef void (*quant_from_float_fn)(const float *restrict src, void *restrict dst, int64_t n);
/* *s = dot(x, y) over n elements: x a row of the weight type, y a row of the
 * trait's vec_dot_type. */
typedef void (*quant_vec_dot_fn)(int64_t n, float *restrict s, const void *restrict x,
                                 const void *restrict y);

typedef struct quant_traits {
    const char *name;
    uint32_t type;          /* GGUF type id */
    int64_t blck_elems;
    size_t blck_bytes;
    bool is_quantized;
    quant_to_float_fn to_float;
    quant_from_float_fn from_float_ref; /* the reference quantizer (files, tests) */
    quant_from_float_fn from_float;     /* the fast quantizer (activations) */
    quant_vec_dot_fn vec_dot;           /* NULL: this type cannot be a weight */
    uint32_t vec_dot_type;              /* the activation format vec_dot expects */
} quant_traits;

/* The dispatched traits (fastest kernels for this CPU), or NULL when lares
 * cannot compute with this type. */
const quant_traits *quant_traits_of(uint32_t type);
/* The scalar reference traits (the oracle of the tests), or NULL. */
const quant_traits *quant_traits_ref(uint32_t type);

/* Which kernel family dispatch chose ("avx2", "neon", "neon+dotprod", "scalar"). */
const char *quant_isa_name(void);

typedef enum quant_isa {
    QUANT_ISA_AUTO = 0,
    QUANT_ISA_SCALAR,
    QUANT_ISA_AVX2,
    QUANT_ISA_NEON,
} quant_isa;

/* Forces a kernel family before first use (the --isa option, tests). Fails with
 * LARES_EUNSUPPORTED when this CPU or build lacks it, and with LARES_EINVAL
 * after the tables were filled. */
lares_status quant_force_isa(quant_isa isa, lares_error *err);

/* Row bytes of n elements of type (n must be a block multiple). */
size_t quant_row_bytes(uint32_t type, int64_t n);

/* ---- CPU features ---- */
typedef struct quant_cpu {
    bool avx2, fma, f16c, avx512f;
    bool neon, dotprod, fp16;
} quant_cpu;
const quant_cpu *quant_cpu_features(void);

#endif /* LARES_QUANT_H */
