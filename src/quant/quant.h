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

/* A tile of dot products for matrix-matrix work (prompt processing): for
 * r < nr and c < nc (both 1..QUANT_TILE_MAX),
 *   s[c * ldc + r] = dot(x + r * bx bytes, y + c * by bytes)
 * so that each weight block loaded is used against several activation rows. */
#define QUANT_TILE_MAX 4
typedef void (*quant_vec_dot_tile_fn)(int64_t n, float *restrict s, size_t ldc,
                                      const void *restrict x, size_t bx, const void *restrict y,
                                      size_t by, int nr, int nc);

/* Attention of nq query heads sharing one KV head over n rows of a KV cache
 * of this type (F32, F16): for each head i < nq,
 *   out_i = sum_j softmax_j(scale * q_i . K_j) V_j   over j < n,
 * q and out holding nq rows of hd floats, K and V rows row_bytes apart. s has
 * room for nq * n scores (head i's at s + i * n), tmp for hd floats. */
typedef void (*quant_kv_attend_fn)(const float *restrict q, int64_t nq, int64_t hd,
                                   const void *k, const void *v, size_t row_bytes, int64_t n,
                                   float scale, float *restrict s, float *restrict tmp,
                                   float *restrict out);

/* Attention of nr query rows sharing one KV head, row r over the first len[r]
 * rows of the cache (its own causal window), the rows in vector lanes: each
 * key is converted once and multiplied by a vector of rows, and no sum goes
 * across lanes (kv_attend's rows, one head per accumulator, end in a
 * transposing reduction). For passes of many rows (a prompt's): on a Zen 5
 * 2 tokens x 8 heads over 300-2000 keys ran 1.7x kv_attend's rate. A row's
 * result depends on its own data only, not on the rows beside it. scratch:
 * QUANT_ATTEND_ROWS_SCRATCH(hd, longest len) floats. */
typedef void (*quant_kv_attend_rows_fn)(int64_t nr, int64_t hd, const float *const *q,
                                        const int32_t *len, const void *k, const void *v,
                                        size_t row_bytes, float scale, float *restrict scratch,
                                        float *const *out);
#define QUANT_ATTEND_ROWS_MAX 16 /* the most lanes of any family */
#define QUANT_ATTEND_ROWS_SCRATCH(hd, n)                                                           \
    ((size_t)QUANT_ATTEND_ROWS_MAX * ((size_t)(hd) + (size_t)(n) + 16) + 16 * (size_t)(hd) + 16)

/* g[i] = silu(g[i]) * u[i] = g[i] / (1 + e^-g[i]) * u[i] for i < n (SwiGLU) */
typedef void (*quant_silu_fn)(float *restrict g, const float *restrict u, int64_t n);

/* ---- packed-activation GEMM (prompt processing) ----
 * With several activation rows, the activations are quantized once into
 * panels of `lanes` rows. For each group of 32 elements a panel holds 32 /
 * run runs of `run` int8 per lane (run q of lane i at byte run * (q * lanes +
 * i): quads for the x86 VPDPBUSD and AArch64 SDOT kernels, runs of 8 for
 * SMMLA's 2 x 8 blocks), then four floats per lane: d (the scale), s = d * sum of the 32 quants, and s0, s1 =
 * d * sum of each half. A weight row is read straight from the file mapping:
 * each 4-byte run of its quants is decoded to unsigned bytes u (value =
 * sw * u - mw, sw and mw per group of 16 or 32) and broadcast against a quad
 * of every lane (VPDPBUSD), so each weight byte loaded meets `lanes`
 * activation rows in one instruction and nothing is repacked or copied. */
#define QUANT_PANEL_GROUP 32
typedef struct quant_panel_fmt {
    int lanes; /* activation rows per panel */
    int run;   /* consecutive codes of one row (4 or 8) */
    /* Quantizes rows x, x + ldx, ... (n_rows <= lanes; the other lanes are
     * zero) of k elements (a multiple of QUANT_PANEL_GROUP) into one panel. */
    void (*from_float)(const float *restrict x, size_t ldx, int n_rows, int64_t k,
                       void *restrict panel);
} quant_panel_fmt;

/* bytes of one panel of k elements */
static inline size_t quant_panel_bytes(const quant_panel_fmt *f, int64_t k) {
    return (size_t)(k / QUANT_PANEL_GROUP) * (size_t)f->lanes * 48;
}

/* y[c * ldy + r] = dot(weight row r, activation row c) for r < n_w (rows at x,
 * bx bytes apart) and c < n_c (activation rows in consecutive panels of k). */
typedef void (*quant_gemm_fn)(int64_t k, const void *restrict x, size_t bx, int64_t n_w,
                              const void *restrict panels, int64_t n_c, float *restrict y,
                              size_t ldy);

/* ---- a few activation rows (several sequences decoding together) ----
 * With 1 to QUANT_ROWS_MAX activation rows, where panels would mostly hold
 * zeros, each row is quantized as vec_dot's Q8_0 activations are (the same
 * codes and fp16-rounded scales) and stored in the order the family's
 * few-row product reads (rows_avx512.c, rows_avxvnni.c, rows_avx2.c,
 * rows_neon.c), taking quant_rows_bytes(k); k is a multiple of
 * QUANT_ROWS_GROUP. */
#define QUANT_ROWS_MAX   8
#define QUANT_ROWS_GROUP 64
typedef struct quant_rows_fmt {
    void (*from_float)(const float *restrict x, int64_t k, void *restrict row);
    /* the row back as Q8_0 blocks (tests: it must be the reference's) */
    void (*to_q8_0)(const void *restrict row, int64_t k, void *restrict blocks);
    /* d * (sum of the codes) of each block of 32 in the row's whole 256s,
     * which the K-quants' minimums are taken with (tests); NULL where the
     * family's format has none (no K-quant product) */
    void (*to_sums)(const void *restrict row, int64_t k, float *restrict sums);
} quant_rows_fmt;

/* k codes and room for three floats per 32 of them, padded to 64 bytes */
static inline size_t quant_rows_bytes(int64_t k) {
    const size_t b = (size_t)k + 12 * (size_t)(k / 32);
    return (b + 63) & ~(size_t)63;
}

/* y[c * ldy + r] = dot(weight row r, activation row c) for r < n_w (rows at x,
 * bx bytes apart) and c < n_c <= QUANT_ROWS_MAX (rows at act, ab bytes apart,
 * in the rows format). Each row's result is the same whatever n_c is. */
typedef void (*quant_rows_fn)(int64_t k, const void *restrict x, size_t bx, int64_t n_w,
                              const void *restrict act, size_t ab, int64_t n_c,
                              float *restrict y, size_t ldy);

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
    quant_vec_dot_tile_fn vec_dot_tile; /* NULL: callers loop over vec_dot */
    quant_gemm_fn gemm;                 /* NULL: no packed-activation GEMM for this type */
    const quant_panel_fmt *panel;       /* the panels gemm reads (with gemm) */
    quant_rows_fn rows;                 /* NULL: no few-row product for this type */
    const quant_rows_fmt *rows_fmt;     /* the activation rows `rows` reads */
    quant_kv_attend_fn kv_attend;       /* NULL: this type cannot hold a KV cache */
    quant_kv_attend_rows_fn kv_attend_rows; /* NULL: kv_attend a token at a time */
    quant_silu_fn silu_mul;             /* F32's only; NULL: ops_swiglu's scalar loop */
} quant_traits;

/* The dispatched traits (fastest kernels for this CPU), or NULL when lares
 * cannot compute with this type. */
const quant_traits *quant_traits_of(uint32_t type);
/* The scalar reference traits (the oracle of the tests), or NULL. */
const quant_traits *quant_traits_ref(uint32_t type);

/* The rows format of the dispatched family's few-row product, or NULL. */
const quant_rows_fmt *quant_rows(void);
/* The panel format of the dispatched family's GEMM, or NULL when it has none. */
const quant_panel_fmt *quant_panels(void);

/* Which kernel family dispatch chose ("avx512vnni", "avxvnni", "avx2", "neon",
 * "neon+dotprod", "scalar"). */
const char *quant_isa_name(void);

typedef enum quant_isa {
    QUANT_ISA_AUTO = 0,
    QUANT_ISA_SCALAR,
    QUANT_ISA_AVX2,
    QUANT_ISA_AVXVNNI, /* AVX2 + 256-bit VPDPBUSD (Intel 12th gen on, AMD Zen 4 on) */
    QUANT_ISA_AVX512,  /* AVX-512 F/BW/VL + VNNI (AMD Zen 4/5, Intel server parts) */
    QUANT_ISA_NEON,       /* with the dot-product extension where the CPU has it */
    QUANT_ISA_NEON_NODOT, /* plain NEON even where dotprod exists (tests, comparisons) */
    QUANT_ISA_NEON_I8MM,  /* NEON with dotprod, and SMMLA for the prompt GEMM (ARMv8.6 i8mm) */
    QUANT_ISA_COUNT
} quant_isa;

/* The traits of one kernel family without touching the dispatched choice
 * (tests and benchmarks compare families side by side). NULL when this CPU or
 * build lacks the family (QUANT_ISA_AUTO: the dispatched table) or lares
 * cannot compute with the type. Each family's table is filled once, lazily,
 * under pthread_once; the pointers stay valid for the life of the process. */
const quant_traits *quant_traits_isa(uint32_t type, quant_isa isa);
/* The name quant_isa_name would give for a family ("neon+dotprod"), or NULL. */
const char *quant_isa_family_name(quant_isa isa);

/* Forces a kernel family before first use (the --isa option, tests). Fails with
 * LARES_EUNSUPPORTED when this CPU or build lacks it, and with LARES_EINVAL
 * after the tables were filled. */
lares_status quant_force_isa(quant_isa isa, lares_error *err);

/* Row bytes of n elements of type (n must be a block multiple). */
size_t quant_row_bytes(uint32_t type, int64_t n);

/* ---- CPU features ---- */
typedef struct quant_cpu {
    bool avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512vnni, avx512bf16, avx512vbmi,
        avxvnni;
    bool neon, dotprod, fp16, i8mm;
    uint32_t l1d_bytes; /* one core's level-1 data cache; 32 KiB where the OS does not say */
} quant_cpu;
const quant_cpu *quant_cpu_features(void);
/* The features above that this CPU has, as one line of lower-case names
 * ("avx2 fma f16c avx512f ... avxvnni"; "neon dotprod fp16"); "none" on others.
 * Benchmarks print it beside every figure. */
const char *quant_cpu_flags(void);

#endif /* LARES_QUANT_H */
