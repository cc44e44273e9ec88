/*
 * The packed-activation GEMM of prompt processing (quant.h: quant_panel_fmt),
 * written once for the three x86 families that include this file:
 *   gemm_avx512.c   16 lanes, AVX-512 VNNI VPDPBUSD
 *   gemm_avxvnni.c   8 lanes, AVX-VNNI VPDPBUSD (VEX)
 *   gemm_avx2.c      8 lanes, VPMADDUBSW pairs summed in int16 (GEMM_I16;
 *                    codes up to 255 split in nibbles, apply32_u8; not Q8_0)
 * each defining GEMM_LANES (16 or 8) and GEMM_NAME(x) (a suffix for the
 * file's symbols) before including it.
 *
 * Shape of the work (docs/kernels.md): a weight row is decoded a group of 32
 * quants at a time into unsigned bytes u on the stack, and each 4-quant run is
 * broadcast from there; VPDPBUSD multiplies it with the same 4-quant run of
 * every activation row in a panel and adds to one int32 lane per row. After each group of 32 (or
 * 16) elements the int32 sums become floats:
 *   acc += sw * (d_a * isum) - mw * (d_a * sum(q_a))
 * where the weight's value is sw * u - mw. Work is blocked so that the
 * activation slice in use (GEMM_NP panels x 128 elements) stays in L1 while
 * the 16 weight rows of a chunk pass over it, with the running sums of each
 * (weight row, panel) kept in a small tile.
 */
#include "quant/kquant_impl.h"
#include "quant/q8_avx2.h"

#include <immintrin.h>
#include <string.h>

#define LANES       GEMM_LANES
#define GROUP_BYTES (48 * LANES) /* one group of 32 in a panel */
#define QUAD_BYTES  (4 * LANES)  /* one 4-quant run of every lane */
#define KB_GROUPS   4            /* groups per K block: 128 elements */
#define ROW_BLOCK   16           /* weight rows per tile */

#if GEMM_LANES == 16
#define GEMM_NP 8 /* panels per pass: 128 activation rows */
typedef __m512i vi;
typedef __m512 vf;
#define VI_SET1(x)           _mm512_set1_epi32((int)(x))
#define VI_LOAD(p)           _mm512_load_si512((const void *)(p))
#define VI_ZERO()            _mm512_setzero_si512()
#define VI_DPBUSD(acc, u, s) _mm512_dpbusd_epi32(acc, u, s)
#define VF_LOAD(p)           _mm512_load_ps(p)
#define VF_STORE(p, v)       _mm512_store_ps(p, v)
#define VF_SET1(x)           _mm512_set1_ps(x)
#define VF_CVT(x)            _mm512_cvtepi32_ps(x)
#define VF_MUL(a, b)         _mm512_mul_ps(a, b)
#define VF_FMA(a, b, c)      _mm512_fmadd_ps(a, b, c)
#define VF_FNMA(a, b, c)     _mm512_fnmadd_ps(a, b, c)
#else
#define GEMM_NP    4 /* panels per pass: 32 activation rows (16 ymm registers) */
typedef __m256i vi;
typedef __m256 vf;
#define VI_SET1(x) _mm256_set1_epi32((int)(x))
#define VI_LOAD(p) _mm256_load_si256((const __m256i *)(p))
#define VI_ZERO()  _mm256_setzero_si256()
#if !defined(GEMM_I16)
#define VI_DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#endif
#define VF_LOAD(p)       _mm256_load_ps(p)
#define VF_STORE(p, v)   _mm256_store_ps(p, v)
#define VF_SET1(x)       _mm256_set1_ps(x)
#define VF_CVT(x)        _mm256_cvtepi32_ps(x)
#define VF_MUL(a, b)     _mm256_mul_ps(a, b)
#define VF_FMA(a, b, c)  _mm256_fmadd_ps(a, b, c)
#define VF_FNMA(a, b, c) _mm256_fnmadd_ps(a, b, c)
#endif

#define FORCE_INLINE static inline __attribute__((always_inline))

/* ---- activations into panels ---- */

static void panel_from_float(const float *restrict x, size_t ldx, int n_rows, int64_t k,
                             void *restrict panel) {
    uint8_t *pb = panel;
    const int64_t ng = k / QUANT_PANEL_GROUP;
    for (int i = 0; i < LANES; i++) {
        const float *xr = i < n_rows ? x + (size_t)i * ldx : x; /* no row past the last */
        for (int64_t g = 0; g < ng; g++) {
            uint8_t *grp = pb + (size_t)g * GROUP_BYTES;
            float *f = (float *)(void *)(grp + 32 * LANES);
            if (i >= n_rows) {
                for (int q = 0; q < 8; q++) {
                    memset(grp + (size_t)(q * LANES + i) * 4, 0, 4);
                }
                f[i] = f[LANES + i] = f[2 * LANES + i] = f[3 * LANES + i] = 0;
                continue;
            }
            __m256i q[4];
            /* the codes and the fp16-rounded scale of the Q8_0 activations, so
             * that a batch multiplied here and a token multiplied by vec_dot
             * see the same activations */
            const float d = _cvtsh_ss(_cvtss_sh(q8_codes_avx2(xr + g * QUANT_PANEL_GROUP, q), 0));
            /* the two half sums, from the int32 codes */
            __m256i h0 = _mm256_add_epi32(q[0], q[1]), h1 = _mm256_add_epi32(q[2], q[3]);
            __m256i hs = _mm256_hadd_epi32(h0, h1); /* h0 pairs | h1 pairs, per 128-bit lane */
            hs = _mm256_hadd_epi32(hs, hs);
            const int s0 = _mm256_extract_epi32(hs, 0) + _mm256_extract_epi32(hs, 4);
            const int s1 = _mm256_extract_epi32(hs, 1) + _mm256_extract_epi32(hs, 5);
            const __m256i c = q8_pack_avx2(q);
            uint32_t dw[8];
            _mm256_storeu_si256((__m256i *)(void *)dw, c);
            for (int j = 0; j < 8; j++) {
                memcpy(grp + (size_t)(j * LANES + i) * 4, &dw[j], 4);
            }
            f[i] = d;
            f[LANES + i] = d * (float)(s0 + s1);
            f[2 * LANES + i] = d * (float)s0;
            f[3 * LANES + i] = d * (float)s1;
        }
    }
}

static const quant_panel_fmt GEMM_NAME(panel_fmt) = {
    .lanes = LANES, .run = 4, .from_float = panel_from_float};

/* ---- the inner step: one group of weights against np panels ---- */

/* A group's weights are decoded with vector instructions into 32 unsigned
 * bytes on the stack; each 4-byte run is then broadcast straight from there
 * (a load, no shuffle), once for all np panels. */
static inline vi bcast_run(const uint8_t *u) {
    uint32_t v;
    memcpy(&v, u, 4);
    return VI_SET1(v);
}

/* The int32 sums of np panels with `nq` 4-quant runs of decoded weights u
 * (nq = 8: a group of 32; 4: half of one, from run q0 of the panel).
 * VNNI: one VPDPBUSD per run and panel, interleaved so that consecutive
 * VPDPBUSD never wait on each other. AVX2 (GEMM_I16): VPMADDUBSW pairs are
 * added in int16 for `chain` runs (as many as cannot overflow for the type's
 * largest code: 8 for 4-bit codes, 4 for 5-bit, 2 for 6-bit), then widened
 * with one VPMADDWD: 1.25 to 1.5 instructions a run against the 2 of
 * VPMADDUBSW + VPMADDWD each. */
FORCE_INLINE void run_sums(int chain, const uint8_t *u, int nq, const uint8_t *a, size_t pstride,
                           int np, vi *acc) {
#if defined(GEMM_I16)
    vi s16[GEMM_NP];
    const vi ones = _mm256_set1_epi16(1);
#pragma GCC unroll 8
    for (int q = 0; q < nq; q++) {
        const vi w = bcast_run(u + 4 * q);
#pragma GCC unroll 8
        for (int p = 0; p < np; p++) {
            const vi m = _mm256_maddubs_epi16(w, VI_LOAD(a + (size_t)p * pstride + q * QUAD_BYTES));
            if (q % chain == 0) {
                if (q > 0) {
                    acc[p] = _mm256_add_epi32(acc[p], _mm256_madd_epi16(s16[p], ones));
                } else {
                    acc[p] = VI_ZERO();
                }
                s16[p] = m;
            } else {
                s16[p] = _mm256_add_epi16(s16[p], m);
            }
        }
    }
#pragma GCC unroll 8
    for (int p = 0; p < np; p++) {
        acc[p] = _mm256_add_epi32(acc[p], _mm256_madd_epi16(s16[p], ones));
    }
#else
    (void)chain;
    const vi w0 = bcast_run(u);
#pragma GCC unroll 8
    for (int p = 0; p < np; p++) {
        acc[p] = VI_DPBUSD(VI_ZERO(), w0, VI_LOAD(a + (size_t)p * pstride));
    }
#pragma GCC unroll 8
    for (int q = 1; q < nq; q++) {
        const vi w = bcast_run(u + 4 * q);
#pragma GCC unroll 8
        for (int p = 0; p < np; p++) {
            acc[p] = VI_DPBUSD(acc[p], w, VI_LOAD(a + (size_t)p * pstride + q * QUAD_BYTES));
        }
    }
#endif
}

/* a group of 32 decoded in u[0..31] (chain: run_sums) */
FORCE_INLINE void apply32(int chain, const uint8_t *u, float sw, float mw, const uint8_t *act,
                          size_t pstride, int np, vf *facc) {
    const vf vsw = VF_SET1(sw), vmw = VF_SET1(mw);
    vi acc[GEMM_NP];
    run_sums(chain, u, 8, act, pstride, np, acc);
#pragma GCC unroll 8
    for (int p = 0; p < np; p++) {
        const float *f = (const float *)(const void *)(act + (size_t)p * pstride + 32 * LANES);
        const vf t = VF_MUL(VF_CVT(acc[p]), VF_LOAD(f));
        facc[p] = VF_FNMA(VF_LOAD(f + LANES), vmw, VF_FMA(t, vsw, facc[p]));
    }
}

/* half h (0, 1) of a group: u[0..15] are its 16 decoded weights */
FORCE_INLINE void apply16(int chain, const uint8_t *u, int h, float sw, float mw,
                          const uint8_t *act, size_t pstride, int np, vf *facc) {
    const vf vsw = VF_SET1(sw), vmw = VF_SET1(mw);
    vi acc[GEMM_NP];
    run_sums(chain, u, 4, act + 4 * h * QUAD_BYTES, pstride, np, acc);
#pragma GCC unroll 8
    for (int p = 0; p < np; p++) {
        const float *f = (const float *)(const void *)(act + (size_t)p * pstride + 32 * LANES);
        const vf t = VF_MUL(VF_CVT(acc[p]), VF_LOAD(f));
        facc[p] = VF_FNMA(VF_LOAD(f + (2 + h) * LANES), vmw, VF_FMA(t, vsw, facc[p]));
    }
}

/* A group of 32 codes that may reach 255, in a vector: with VNNI as apply32.
 * VPMADDUBSW pairs of such codes could saturate int16 (2 * 255 * 127), so
 * AVX2 splits each code into nibbles, u = 16 hi + lo, and sums both halves in
 * int16 over the group's 8 runs (each at most 8 * 2 * 15 * 127 = 30480), one
 * activation load serving both: two VPMADDUBSW and two adds a run, widened
 * once as lo + 16 hi by VPMADDWD. */
FORCE_INLINE void apply32_u8(__m256i v, uint8_t *u, float sw, float mw, const uint8_t *act,
                             size_t pstride, int np, vf *facc) {
#if defined(GEMM_I16)
    _Alignas(32) uint8_t hi[32];
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    _mm256_store_si256((__m256i *)(void *)u, _mm256_and_si256(v, m4));
    _mm256_store_si256((__m256i *)(void *)hi, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
    vi sl[GEMM_NP], sh[GEMM_NP];
#pragma GCC unroll 8
    for (int q = 0; q < 8; q++) {
        const vi wl = bcast_run(u + 4 * q), wh = bcast_run(hi + 4 * q);
#pragma GCC unroll 8
        for (int p = 0; p < np; p++) {
            const vi a = VI_LOAD(act + (size_t)p * pstride + q * QUAD_BYTES);
            const vi ml = _mm256_maddubs_epi16(wl, a), mh = _mm256_maddubs_epi16(wh, a);
            sl[p] = q == 0 ? ml : _mm256_add_epi16(sl[p], ml);
            sh[p] = q == 0 ? mh : _mm256_add_epi16(sh[p], mh);
        }
    }
    const vf vsw = VF_SET1(sw), vmw = VF_SET1(mw);
#pragma GCC unroll 8
    for (int p = 0; p < np; p++) {
        const vi acc = _mm256_add_epi32(_mm256_madd_epi16(sl[p], _mm256_set1_epi16(1)),
                                        _mm256_madd_epi16(sh[p], _mm256_set1_epi16(16)));
        const float *f = (const float *)(const void *)(act + (size_t)p * pstride + 32 * LANES);
        const vf t = VF_MUL(VF_CVT(acc), VF_LOAD(f));
        facc[p] = VF_FNMA(VF_LOAD(f + LANES), vmw, VF_FMA(t, vsw, facc[p]));
    }
#else
    _mm256_store_si256((__m256i *)(void *)u, v);
    apply32(0, u, sw, mw, act, pstride, np, facc);
#endif
}

#include "quant/gemm_drive.h"

#define KB_LOAD_TILE()                                                                             \
    vf facc[GEMM_NP];                                                                              \
    _Alignas(32) uint8_t u[32];                                                                    \
    _Pragma("GCC unroll 8") for (int p = 0; p < np; p++) facc[p] = VF_LOAD(tile + p * LANES)
#define KB_STORE_TILE()                                                                            \
    _Pragma("GCC unroll 8") for (int p = 0; p < np; p++) VF_STORE(tile + p * LANES, facc[p])

static inline float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* 16 bytes of nibbles: the low nibbles to u[0..15], the high ones to u[16..31] */
static inline __m256i nibbles(const uint8_t *qs) {
    const __m128i m = _mm_set1_epi8(0x0f);
    const __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)qs);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m), _mm_and_si128(raw, m));
}

/* bit i of the 32-bit qh as 0x10 in byte i */
static inline __m256i bits_to_16(uint32_t qh) {
    const __m256i rep =
        _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh),
                            _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                             2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i on = _mm256_cmpeq_epi8(_mm256_and_si256(rep, bit), bit);
    return _mm256_and_si256(on, _mm256_set1_epi8(0x10));
}

static inline void put32(uint8_t *u, __m256i v) {
    _mm256_store_si256((__m256i *)(void *)u, v);
}

/* Q4_0: u = nibble, value = d * (u - 8) */
FORCE_INLINE void kb_q4_0(KB_ARGS, int np) {
    KB_LOAD_TILE();
    for (int g = 0; g < ng; g++) {
        const uint8_t *b = w + (size_t)(g0 + g) * sizeof(block_q4_0);
        const float d = h2f(KQ_FIELD(b, block_q4_0, d));
        put32(u, nibbles(KQ_FIELD(b, block_q4_0, qs)));
        apply32(8, u, d, 8.0f * d, act + (size_t)g * GROUP_BYTES, pstride, np, facc);
    }
    KB_STORE_TILE();
}

/* Q4_1: u = nibble, value = d * u + m */
FORCE_INLINE void kb_q4_1(KB_ARGS, int np) {
    KB_LOAD_TILE();
    for (int g = 0; g < ng; g++) {
        const uint8_t *b = w + (size_t)(g0 + g) * sizeof(block_q4_1);
        const float d = h2f(KQ_FIELD(b, block_q4_1, d));
        const float m = h2f(KQ_FIELD(b, block_q4_1, m));
        put32(u, nibbles(KQ_FIELD(b, block_q4_1, qs)));
        apply32(8, u, d, -m, act + (size_t)g * GROUP_BYTES, pstride, np, facc);
    }
    KB_STORE_TILE();
}

/* Q5_0: u = nibble | bit << 4, value = d * (u - 16) */
FORCE_INLINE void kb_q5_0(KB_ARGS, int np) {
    KB_LOAD_TILE();
    for (int g = 0; g < ng; g++) {
        const uint8_t *b = w + (size_t)(g0 + g) * sizeof(block_q5_0);
        const float d = h2f(KQ_FIELD(b, block_q5_0, d));
        const uint32_t qh = rd_u32le(KQ_FIELD(b, block_q5_0, qh));
        put32(u, _mm256_or_si256(nibbles(KQ_FIELD(b, block_q5_0, qs)), bits_to_16(qh)));
        apply32(4, u, d, 16.0f * d, act + (size_t)g * GROUP_BYTES, pstride, np, facc);
    }
    KB_STORE_TILE();
}

/* Q5_1: u = nibble | bit << 4, value = d * u + m */
FORCE_INLINE void kb_q5_1(KB_ARGS, int np) {
    KB_LOAD_TILE();
    for (int g = 0; g < ng; g++) {
        const uint8_t *b = w + (size_t)(g0 + g) * sizeof(block_q5_1);
        const float d = h2f(KQ_FIELD(b, block_q5_1, d));
        const float m = h2f(KQ_FIELD(b, block_q5_1, m));
        const uint32_t qh = rd_u32le(KQ_FIELD(b, block_q5_1, qh));
        put32(u, _mm256_or_si256(nibbles(KQ_FIELD(b, block_q5_1, qs)), bits_to_16(qh)));
        apply32(4, u, d, -m, act + (size_t)g * GROUP_BYTES, pstride, np, facc);
    }
    KB_STORE_TILE();
}

/* Q8_0: u = q + 128, value = d * (u - 128) */
FORCE_INLINE void kb_q8_0(KB_ARGS, int np) {
    KB_LOAD_TILE();
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int g = 0; g < ng; g++) {
        const uint8_t *b = w + (size_t)(g0 + g) * sizeof(block_q8_0);
        const float d = h2f(KQ_FIELD(b, block_q8_0, d));
        const __m256i q =
            _mm256_loadu_si256((const __m256i *)(const void *)KQ_FIELD(b, block_q8_0, qs));
        apply32_u8(_mm256_xor_si256(q, flip), u, d, 128.0f * d, act + (size_t)g * GROUP_BYTES,
                   pstride, np, facc);
    }
    KB_STORE_TILE();
}

/* the codebook of IQ4_NL / IQ4_XS plus 128, as unsigned bytes */
static const uint8_t iq4_u8[16] = {1,   24,  45,  63,  79,  93,  106, 118,
                                   129, 141, 153, 166, 181, 197, 217, 241};

static inline __m256i iq4_decode(const uint8_t *qs) {
    const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)iq4_u8));
    return _mm256_shuffle_epi8(tbl, nibbles(qs));
}

/* IQ4_NL: u = codebook[nibble] + 128, value = d * (u - 128) */
FORCE_INLINE void kb_iq4_nl(KB_ARGS, int np) {
    KB_LOAD_TILE();
    for (int g = 0; g < ng; g++) {
        const uint8_t *b = w + (size_t)(g0 + g) * sizeof(block_iq4_nl);
        const float d = h2f(KQ_FIELD(b, block_iq4_nl, d));
        apply32_u8(iq4_decode(KQ_FIELD(b, block_iq4_nl, qs)), u, d, 128.0f * d,
                   act + (size_t)g * GROUP_BYTES, pstride, np, facc);
    }
    KB_STORE_TILE();
}

/* IQ4_XS: half a super-block; sub-block j: u = codebook[nibble] + 128,
 * value = d * (scale_j - 32) * (u - 128) */
FORCE_INLINE void kb_iq4_xs(KB_ARGS, int np) {
    const uint8_t *b = w + (size_t)(g0 / 8) * sizeof(block_iq4_xs);
    const int j0 = (int)(g0 % 8);
    const float d = h2f(KQ_FIELD(b, block_iq4_xs, d));
    KB_LOAD_TILE();
    for (int g = 0; g < ng; g++) {
        const int j = j0 + g;
        const float sw = d * (float)kq_iq4xs_scale(b, j);
        apply32_u8(iq4_decode(KQ_FIELD(b, block_iq4_xs, qs) + 16 * j), u, sw, 128.0f * sw,
                   act + (size_t)g * GROUP_BYTES, pstride, np, facc);
    }
    KB_STORE_TILE();
}

/* 32 nibbles of qs: the low ones (shift 0) or the high ones (shift 4) */
static inline __m256i nibbles32(const uint8_t *qs, int shift) {
    const __m256i raw = _mm256_loadu_si256((const __m256i *)(const void *)qs);
    return _mm256_and_si256(_mm256_srl_epi16(raw, _mm_cvtsi32_si128(shift)),
                            _mm256_set1_epi8(0x0f));
}

/* Q4_K: half a super-block (sub-blocks j0 .. j0 + 3); sub-block j is the low
 * (j even) or high nibbles of qs[32 (j / 2) ...]; value = d sc_j u - dmin m_j */
FORCE_INLINE void kb_q4_K(KB_ARGS, int np) {
    const uint8_t *b = w + (size_t)(g0 / 8) * sizeof(block_q4_K);
    const int j0 = (int)(g0 % 8);
    const float d = h2f(KQ_FIELD(b, block_q4_K, d));
    const float dmin = h2f(KQ_FIELD(b, block_q4_K, dmin));
    uint8_t sc[8], mn[8];
    kq_scale_min_k4(KQ_FIELD(b, block_q4_K, scales), sc, mn);
    KB_LOAD_TILE();
    for (int g = 0; g < ng; g++) {
        const int j = j0 + g;
        put32(u, nibbles32(KQ_FIELD(b, block_q4_K, qs) + 32 * (j / 2), 4 * (j % 2)));
        apply32(8, u, d * sc[j], dmin * mn[j], act + (size_t)g * GROUP_BYTES, pstride, np, facc);
    }
    KB_STORE_TILE();
}

/* Q5_K: Q4_K's nibbles plus bit j of qh[e] as bit 4 */
FORCE_INLINE void kb_q5_K(KB_ARGS, int np) {
    const uint8_t *b = w + (size_t)(g0 / 8) * sizeof(block_q5_K);
    const int j0 = (int)(g0 % 8);
    const float d = h2f(KQ_FIELD(b, block_q5_K, d));
    const float dmin = h2f(KQ_FIELD(b, block_q5_K, dmin));
    uint8_t sc[8], mn[8];
    kq_scale_min_k4(KQ_FIELD(b, block_q5_K, scales), sc, mn);
    const __m256i qh =
        _mm256_loadu_si256((const __m256i *)(const void *)KQ_FIELD(b, block_q5_K, qh));
    KB_LOAD_TILE();
    for (int g = 0; g < ng; g++) {
        const int j = j0 + g;
        const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j - 4)),
                                            _mm256_set1_epi8(0x10));
        const __m256i hi_lo = _mm256_and_si256(_mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - j)),
                                               _mm256_set1_epi8(0x10));
        put32(u, _mm256_or_si256(nibbles32(KQ_FIELD(b, block_q5_K, qs) + 32 * (j / 2), 4 * (j % 2)),
                                 j >= 4 ? hi : hi_lo));
        apply32(4, u, d * sc[j], dmin * mn[j], act + (size_t)g * GROUP_BYTES, pstride, np, facc);
    }
    KB_STORE_TILE();
}

/* Q6_K: half h of a super-block is 128 elements, 4 groups of 32 (parts p =
 * 0..3), each two sub-blocks of 16 with their own scale; u = 6 bits,
 * value = d * scale * (u - 32). Part p of lane l: nibble p / 2 of
 * ql[64 h + 32 (p % 2) + l], bits 2p, 2p + 1 of qh[32 h + l]. */
FORCE_INLINE void kb_q6_K(KB_ARGS, int np) {
    const uint8_t *b = w + (size_t)(g0 / 8) * sizeof(block_q6_K);
    const int h = (int)(g0 % 8) / 4;
    const float d = h2f(KQ_FIELD(b, block_q6_K, d));
    const int8_t *scales = (const int8_t *)KQ_FIELD(b, block_q6_K, scales) + 8 * h;
    const uint8_t *ql = KQ_FIELD(b, block_q6_K, ql) + 64 * h;
    const __m256i qh =
        _mm256_loadu_si256((const __m256i *)(const void *)(KQ_FIELD(b, block_q6_K, qh) + 32 * h));
    KB_LOAD_TILE();
    for (int p = 0; p < ng; p++) {
        /* bits 2p, 2p + 1 to bits 4, 5 */
        const __m256i hb = 2 * p <= 4 ? _mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - 2 * p))
                                      : _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * p - 4));
        put32(u, _mm256_or_si256(nibbles32(ql + 32 * (p % 2), 4 * (p / 2)),
                                 _mm256_and_si256(hb, _mm256_set1_epi8(0x30))));
        const float sw0 = d * (float)scales[2 * p], sw1 = d * (float)scales[2 * p + 1];
        apply16(2, u, 0, sw0, 32.0f * sw0, act + (size_t)p * GROUP_BYTES, pstride, np, facc);
        apply16(2, u + 16, 1, sw1, 32.0f * sw1, act + (size_t)p * GROUP_BYTES, pstride, np, facc);
    }
    KB_STORE_TILE();
}

/* Q2_K: half h of a super-block, parts p = 0..3 of 32, each two sub-blocks
 * of 16 whose scale byte holds the scale (low nibble) and the min's multiplier
 * (high); u = bits 2p, 2p + 1 of qs[32 h + l], value = d sc u - dmin m */
FORCE_INLINE void kb_q2_K(KB_ARGS, int np) {
    const uint8_t *b = w + (size_t)(g0 / 8) * sizeof(block_q2_K);
    const int h = (int)(g0 % 8) / 4;
    const float d = h2f(KQ_FIELD(b, block_q2_K, d));
    const float dmin = h2f(KQ_FIELD(b, block_q2_K, dmin));
    const uint8_t *sc = KQ_FIELD(b, block_q2_K, scales) + 8 * h;
    const __m256i q =
        _mm256_loadu_si256((const __m256i *)(const void *)(KQ_FIELD(b, block_q2_K, qs) + 32 * h));
    KB_LOAD_TILE();
    for (int p = 0; p < ng; p++) {
        put32(u,
              _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * p)), _mm256_set1_epi8(3)));
        const uint8_t s0 = sc[2 * p], s1 = sc[2 * p + 1];
        apply16(8, u, 0, d * (float)(s0 & 0xf), dmin * (float)(s0 >> 4),
                act + (size_t)p * GROUP_BYTES, pstride, np, facc);
        apply16(8, u + 16, 1, d * (float)(s1 & 0xf), dmin * (float)(s1 >> 4),
                act + (size_t)p * GROUP_BYTES, pstride, np, facc);
    }
    KB_STORE_TILE();
}

/* Q3_K: as Q2_K's levels plus bit 4 h + p of hmask[l] as bit 2 (u = 0..7),
 * value = d scale (u - 4) with 16 signed 6-bit scales */
FORCE_INLINE void kb_q3_K(KB_ARGS, int np) {
    const uint8_t *b = w + (size_t)(g0 / 8) * sizeof(block_q3_K);
    const int h = (int)(g0 % 8) / 4;
    const float d = h2f(KQ_FIELD(b, block_q3_K, d));
    int scale[16];
    kq_scales_q3(KQ_FIELD(b, block_q3_K, scales), scale);
    const __m256i q =
        _mm256_loadu_si256((const __m256i *)(const void *)(KQ_FIELD(b, block_q3_K, qs) + 32 * h));
    const __m256i hm =
        _mm256_loadu_si256((const __m256i *)(const void *)KQ_FIELD(b, block_q3_K, hmask));
    KB_LOAD_TILE();
    for (int p = 0; p < ng; p++) {
        const int hb = 4 * h + p; /* the hmask bit of this part, to bit 2 */
        const __m256i hi = hb <= 2 ? _mm256_sll_epi16(hm, _mm_cvtsi32_si128(2 - hb))
                                   : _mm256_srl_epi16(hm, _mm_cvtsi32_si128(hb - 2));
        put32(u, _mm256_or_si256(_mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * p)),
                                                  _mm256_set1_epi8(3)),
                                 _mm256_and_si256(hi, _mm256_set1_epi8(4))));
        const float sw0 = d * (float)scale[8 * h + 2 * p],
                    sw1 = d * (float)scale[8 * h + 2 * p + 1];
        apply16(8, u, 0, sw0, 4.0f * sw0, act + (size_t)p * GROUP_BYTES, pstride, np, facc);
        apply16(8, u + 16, 1, sw1, 4.0f * sw1, act + (size_t)p * GROUP_BYTES, pstride, np, facc);
    }
    KB_STORE_TILE();
}

/* one K-block function per panel count, and the type's gemm */
#define KB_VARIANT(T, n)                                                                           \
    static void kb_##T##_##n(KB_ARGS) {                                                            \
        kb_##T(w, g0, ng, act, pstride, tile, n);                                                  \
    }
#if GEMM_NP == 8
#define GEMM_TYPE(T)                                                                               \
    KB_VARIANT(T, 1)                                                                               \
    KB_VARIANT(T, 2)                                                                               \
    KB_VARIANT(T, 3)                                                                               \
    KB_VARIANT(T, 4)                                                                               \
    KB_VARIANT(T, 5)                                                                               \
    KB_VARIANT(T, 6)                                                                               \
    KB_VARIANT(T, 7)                                                                               \
    KB_VARIANT(T, 8)                                                                               \
    static const kb_fn kb_##T##_np[GEMM_NP + 1] = {NULL,       kb_##T##_1, kb_##T##_2,             \
                                                   kb_##T##_3, kb_##T##_4, kb_##T##_5,             \
                                                   kb_##T##_6, kb_##T##_7, kb_##T##_8};            \
    static void gemm_##T(int64_t k, const void *restrict x, size_t bx, int64_t n_w,                \
                         const void *restrict panels, int64_t n_c, float *restrict y,              \
                         size_t ldy) {                                                             \
        gemm_drive(k, x, bx, n_w, panels, n_c, y, ldy, kb_##T##_np);                               \
    }
#else
#define GEMM_TYPE(T)                                                                               \
    KB_VARIANT(T, 1)                                                                               \
    KB_VARIANT(T, 2)                                                                               \
    KB_VARIANT(T, 3)                                                                               \
    KB_VARIANT(T, 4)                                                                               \
    static const kb_fn kb_##T##_np[GEMM_NP + 1] = {NULL, kb_##T##_1, kb_##T##_2, kb_##T##_3,       \
                                                   kb_##T##_4};                                    \
    static void gemm_##T(int64_t k, const void *restrict x, size_t bx, int64_t n_w,                \
                         const void *restrict panels, int64_t n_c, float *restrict y,              \
                         size_t ldy) {                                                             \
        gemm_drive(k, x, bx, n_w, panels, n_c, y, ldy, kb_##T##_np);                               \
    }
#endif

GEMM_TYPE(q4_0)
GEMM_TYPE(q4_1)
GEMM_TYPE(q5_0)
GEMM_TYPE(q5_1)
GEMM_TYPE(q2_K)
GEMM_TYPE(q3_K)
GEMM_TYPE(q4_K)
GEMM_TYPE(q5_K)
GEMM_TYPE(q6_K)
#if !defined(GEMM_I16) /* AVX2: Q8_0's 4x4 row tiles are faster (split nibbles 42 G MAC/s, tiles 59) */
GEMM_TYPE(q8_0)
#endif
GEMM_TYPE(iq4_nl)
GEMM_TYPE(iq4_xs)

static void install_gemm(quant_traits *t) {
#define SET(id, T)                                                                                 \
    t[id].gemm = gemm_##T;                                                                         \
    t[id].panel = &GEMM_NAME(panel_fmt)
    SET(GGUF_TYPE_Q4_0, q4_0);
    SET(GGUF_TYPE_Q4_1, q4_1);
    SET(GGUF_TYPE_Q5_0, q5_0);
    SET(GGUF_TYPE_Q5_1, q5_1);
    SET(GGUF_TYPE_Q2_K, q2_K);
    SET(GGUF_TYPE_Q3_K, q3_K);
    SET(GGUF_TYPE_Q4_K, q4_K);
    SET(GGUF_TYPE_Q5_K, q5_K);
    SET(GGUF_TYPE_Q6_K, q6_K);
#if !defined(GEMM_I16)
    SET(GGUF_TYPE_Q8_0, q8_0);
#endif
    SET(GGUF_TYPE_IQ4_NL, iq4_nl);
    SET(GGUF_TYPE_IQ4_XS, iq4_xs);
#undef SET
}
