/*
 * AVX2/FMA/F16C kernels of the legacy 32-element block formats: dot products
 * of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 weights with Q8_0/Q8_1 activations (single
 * rows and tiles of up to 4x4), dequantization, and the activation quantizers.
 * The reference of each kernel is named beside it (legacy.c); layouts are in
 * quant/blocks.h. Built with -mavx2 -mfma -mf16c; installed by dispatch.c only
 * on CPUs that have all three.
 *
 * Integer products use VPMADDUBSW (unsigned bytes times signed bytes, adjacent
 * pairs added into int16) and VPMADDWD against ones (adjacent int16 into
 * int32). One operand must be unsigned, and every int16 must provably fit:
 *   - a signed x against y: |x| times y carrying x's sign (VPSIGNB);
 *     |x| <= 128 and |y| <= 127 make a pair at most 32512 (Q8_0);
 *   - unsigned codes q (0..31) against y: a pair is at most 7874; Q4_0 and
 *     Q5_0 single dots take k * sum(y) off (k = 8, 16) with a second
 *     VPMADDUBSW, cheaper on Zen 3 than |x| and VPSIGNB, which share its ports;
 *   - tiles: see tile_legacy.
 * Precondition of every dot: activation codes in [-127, 127]. The Q8_0 and Q8_1
 * quantizers guarantee it (|x| / (amax / 127) rounds to at most 127); -128
 * would break the sign trick. Weight codes may be anything the format holds.
 *
 * Float work per block is the reference's: d_x * d_y times the exact integer
 * sum, added in float lanes instead of double (the tests bound the difference).
 * Dequantization and quantization perform the reference's float operations in
 * the same order and are bit-exact.
 *
 * Every loop over rows, columns or groups is written out: GCC at -O2 leaves
 * short loops with large bodies rolled, and the accumulators must stay in
 * registers (rolled, the tiles ran at half speed).
 */
#include "quant/kernels.h"
#include "quant/q8_avx2.h"

#include <immintrin.h>

#define ALWAYS_INLINE inline __attribute__((always_inline))

#include "quant/legacy_fmt.h"

/* ---- small helpers ---- */

static ALWAYS_INLINE float hsum_ps(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

static ALWAYS_INLINE uint64_t ld_u64(const void *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static ALWAYS_INLINE uint16_t ld_u16(const void *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* four fp16 values packed in a uint64 (first in the low bits) as floats */
static ALWAYS_INLINE __m128 f16x4(uint64_t h) {
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)h));
}

/* a 128-bit vector in both halves; lanes then go to all eight by VPERMILPS.
 * (Storing scales and broadcasting them back from memory stalls on Zen 3:
 * store-to-load forwarding into narrower loads at an offset fails.) */
static ALWAYS_INLINE __m256 dup128(__m128 v) {
    return _mm256_set_m128(v, v);
}

static ALWAYS_INLINE uint64_t pack4(uint16_t a, uint16_t b, uint16_t c, uint16_t d) {
    return (uint64_t)a | (uint64_t)b << 16 | (uint64_t)c << 32 | (uint64_t)d << 48;
}

/* 16 bytes of nibbles as 32 codes 0..15 in element order: low nibbles are
 * elements 0..15, high nibbles 16..31 (blocks.h). The bytes are broadcast to
 * both halves by the load and the upper half shifted by 4: cheaper on Zen 3
 * than shifting a copy and inserting it (VINSERTI128 issues once a cycle). */
static ALWAYS_INLINE __m256i q4_codes(const uint8_t *qs) {
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    v = _mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4));
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* bit j of the little-endian 32-bit qh as 0xff (set) or 0x00 in byte j */
static ALWAYS_INLINE __m256i q5_high_mask(const uint8_t *qh) {
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                            2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    /* byte k of each qword: every bit but bit k */
    const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfeLL);
    int32_t h; /* little-endian on every x86 */
    memcpy(&h, qh, sizeof h);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(h), spread);
    return _mm256_cmpeq_epi8(_mm256_or_si256(v, others), _mm256_set1_epi8(-1));
}

/* sum of x * y over 32 bytes in 8 int32 lanes; x any int8, y in [-127, 127] */
static ALWAYS_INLINE __m256i dot32_signed(__m256i x, __m256i y) {
    __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* ---- per-format access: one switch on a constant, folded at compile time ---- */

/* The 32 codes of a weight block in element order: signed values q - 8,
 * q - 16, q for the *_0 formats, unsigned q for the *_1 formats. */
static ALWAYS_INLINE __m256i fmt_codes(enum fmt f, const uint8_t *blk) {
    switch (f) {
    case F_Q4_0:
        return _mm256_sub_epi8(q4_codes(((const block_q4_0 *)blk)->qs), _mm256_set1_epi8(8));
    case F_Q4_1:
        return q4_codes(((const block_q4_1 *)blk)->qs);
    case F_Q5_0: {
        /* q | 16 when the bit is set; otherwise q | 0xf0, which is q - 16 as int8 */
        const block_q5_0 *b = (const block_q5_0 *)blk;
        __m256i hi = _mm256_andnot_si256(q5_high_mask(b->qh), _mm256_set1_epi8((char)0xf0));
        return _mm256_or_si256(q4_codes(b->qs), hi);
    }
    case F_Q5_1: {
        const block_q5_1 *b = (const block_q5_1 *)blk;
        __m256i hi = _mm256_and_si256(q5_high_mask(b->qh), _mm256_set1_epi8(0x10));
        return _mm256_or_si256(q4_codes(b->qs), hi);
    }
    default:
        return _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)blk)->qs);
    }
}

/* The unsigned codes of a weight block: q (0..15 or 0..31) before any offset. */
static ALWAYS_INLINE __m256i fmt_ucodes(enum fmt f, const uint8_t *blk) {
    switch (f) {
    case F_Q4_0:
        return q4_codes(((const block_q4_0 *)blk)->qs);
    case F_Q4_1:
        return q4_codes(((const block_q4_1 *)blk)->qs);
    case F_Q5_0: {
        const block_q5_0 *b = (const block_q5_0 *)blk;
        __m256i hi = _mm256_and_si256(q5_high_mask(b->qh), _mm256_set1_epi8(0x10));
        return _mm256_or_si256(q4_codes(b->qs), hi);
    }
    default: {
        const block_q5_1 *b = (const block_q5_1 *)blk;
        __m256i hi = _mm256_and_si256(q5_high_mask(b->qh), _mm256_set1_epi8(0x10));
        return _mm256_or_si256(q4_codes(b->qs), hi);
    }
    }
}

/* fp16 d of a weight block (first field of every legacy block) */
static ALWAYS_INLINE uint16_t fmt_d(const uint8_t *blk) {
    return ld_u16(blk);
}

/* fp16 m of a *_1 weight block (second field) */
static ALWAYS_INLINE uint16_t fmt_m(const uint8_t *blk) {
    return ld_u16(blk + 2);
}

/* activation blocks: Q8_0 {d, qs} or Q8_1 {d, s, qs} */
static ALWAYS_INLINE const uint8_t *act_qs(enum fmt f, const uint8_t *blk) {
    return blk + act_qs_offset(f);
}

/* ---- single dot products ---- */

/* the integer sum of one weight block with one activation block, as floats */
static ALWAYS_INLINE __m256 dot_block(enum fmt f, const uint8_t *x, const uint8_t *y) {
    const __m256i yq = _mm256_loadu_si256((const __m256i *)act_qs(f, y));
    if (f == F_Q8_0) {
        return _mm256_cvtepi32_ps(dot32_signed(fmt_codes(f, x), yq));
    }
    /* unsigned codes u; Q4_0 and Q5_0 take k * sum(y) off in int16, where
     * u * y pairs are at most 2 * 31 * 127 = 7874 and k * y pairs 16 * 254 */
    __m256i p = _mm256_maddubs_epi16(fmt_ucodes(f, x), yq);
    if (f == F_Q4_0) {
        p = _mm256_sub_epi16(p, _mm256_maddubs_epi16(_mm256_set1_epi8(8), yq));
    } else if (f == F_Q5_0) {
        p = _mm256_sub_epi16(p, _mm256_maddubs_epi16(_mm256_set1_epi8(16), yq));
    }
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

/* How far ahead of the blocks being computed a single-row dot asks for the
 * weight row (prefetches never fault, so reaching past the row is harmless).
 * Mat-vec on one core is bound by how fast its rows stream in. Measured on
 * llama-1b tg32, 2 threads, alternating rounds (docs/performance.md): Q8_0
 * without 18.2-21.7 t/s, 1 KiB ahead 22.5-23.9, 2 KiB 21.4-24.6; Q4_0 with it
 * 34.4-36.4 t/s against 34.1-34.9 for a 4-row kernel sharing the activation
 * loads (removed again). On an Intel Xeon (family 6 model 207), Q8_0 tg16
 * --isa avx2, three rounds alternating builds: 1 KiB 16.7-17.7 t/s, 2 KiB
 * 18.7-19.6, 4 KiB 20.0-21.0; 2 KiB is taken, the best that the Zen 3
 * figures above also keep (4 KiB was not measured there, and the K-quants'
 * walks measured 4 KiB worse on Zen 3: rows_kquant_x86.h). */
#ifndef ROW_PREFETCH_BYTES
#define ROW_PREFETCH_BYTES 2048
#endif

/* One weight row with one activation row. Four blocks per step share one
 * conversion of their eight scales; two accumulators hide the FMA latency. */
static ALWAYS_INLINE void dot_legacy(enum fmt f, int64_t n, float *s, const void *vx,
                                     const void *vy) {
    const uint8_t *x = vx, *y = vy;
    const size_t xs = fmt_bytes(f), ys = act_bytes(f);
    const int64_t nb = n / QK8_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps(); /* sum of m * s, *_1 formats */
    float summ = 0;
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4, x += 4 * xs, y += 4 * ys) {
        /* the weight row streams from memory: ask for it ROW_PREFETCH_BYTES
         * ahead, three lines per step of four blocks (up to 136 bytes) */
        quant_prefetch(x + ROW_PREFETCH_BYTES, 3 * 64);
        __m128 dx = f16x4(pack4(fmt_d(x), fmt_d(x + xs), fmt_d(x + 2 * xs), fmt_d(x + 3 * xs)));
        __m128 dy = f16x4(pack4(ld_u16(y), ld_u16(y + ys), ld_u16(y + 2 * ys), ld_u16(y + 3 * ys)));
        const __m256 d = dup128(_mm_mul_ps(dx, dy));
        acc0 = _mm256_fmadd_ps(dot_block(f, x, y), _mm256_permute_ps(d, 0x00), acc0);
        acc1 = _mm256_fmadd_ps(dot_block(f, x + xs, y + ys), _mm256_permute_ps(d, 0x55), acc1);
        acc0 =
            _mm256_fmadd_ps(dot_block(f, x + 2 * xs, y + 2 * ys), _mm256_permute_ps(d, 0xaa), acc0);
        acc1 =
            _mm256_fmadd_ps(dot_block(f, x + 3 * xs, y + 3 * ys), _mm256_permute_ps(d, 0xff), acc1);
        if (fmt_has_min(f)) {
            __m128 m = f16x4(pack4(fmt_m(x), fmt_m(x + xs), fmt_m(x + 2 * xs), fmt_m(x + 3 * xs)));
            __m128 sy = f16x4(pack4(ld_u16(y + 2), ld_u16(y + ys + 2), ld_u16(y + 2 * ys + 2),
                                    ld_u16(y + 3 * ys + 2)));
            accm = _mm_fmadd_ps(m, sy, accm);
        }
    }
    for (; b < nb; b++, x += xs, y += ys) { /* fewer than four blocks left */
        float d = _cvtsh_ss(fmt_d(x)) * _cvtsh_ss(ld_u16(y));
        acc0 = _mm256_fmadd_ps(dot_block(f, x, y), _mm256_set1_ps(d), acc0);
        if (fmt_has_min(f)) {
            summ += _cvtsh_ss(fmt_m(x)) * _cvtsh_ss(ld_u16(y + 2));
        }
    }
    float sum = hsum_ps(_mm256_add_ps(acc0, acc1));
    if (fmt_has_min(f)) {
        accm = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
        accm = _mm_add_ss(accm, _mm_movehdup_ps(accm));
        sum += _mm_cvtss_f32(accm) + summ;
    }
    *s = sum;
}

/* reference: dot_q4_0_q8_0_ref */
static void dot_q4_0_q8_0_avx2(int64_t n, float *restrict s, const void *restrict x,
                               const void *restrict y) {
    dot_legacy(F_Q4_0, n, s, x, y);
}

/* reference: dot_q4_1_q8_1_ref */
static void dot_q4_1_q8_1_avx2(int64_t n, float *restrict s, const void *restrict x,
                               const void *restrict y) {
    dot_legacy(F_Q4_1, n, s, x, y);
}

/* reference: dot_q5_0_q8_0_ref */
static void dot_q5_0_q8_0_avx2(int64_t n, float *restrict s, const void *restrict x,
                               const void *restrict y) {
    dot_legacy(F_Q5_0, n, s, x, y);
}

/* reference: dot_q5_1_q8_1_ref */
static void dot_q5_1_q8_1_avx2(int64_t n, float *restrict s, const void *restrict x,
                               const void *restrict y) {
    dot_legacy(F_Q5_1, n, s, x, y);
}

/* reference: dot_q8_0_q8_0_ref */
static void dot_q8_0_q8_0_avx2(int64_t n, float *restrict s, const void *restrict x,
                               const void *restrict y) {
    dot_legacy(F_Q8_0, n, s, x, y);
}

/* ---- tiles: up to 4 weight rows x NC activation rows ----
 *
 * The weight block of four rows is held transposed by 8-byte groups: W[g]
 * holds elements 8g..8g+7 of rows 0..3, one 64-bit lane per row, and each
 * group of an activation row is broadcast to all four lanes (VPBROADCASTQ
 * from memory: a load, no shuffle). After VPMADDWD, int32 lane 2r holds row
 * r's products of elements 8g..8g+3 and lane 2r+1 those of 8g+4..8g+7, summed
 * over g; both lanes get the row's scale and are added once at the end. Per
 * block and column that is four VPMADDUBSW, three int16 adds, one VPMADDWD, a
 * conversion and two float operations for 4 x 32 products; the weights are
 * unpacked once for all NC columns.
 *
 * Four groups add in int16 before VPMADDWD when they fit:
 *   Q4_0/Q5_0: |x| <= 16 times y carrying x's sign: 4 * 2 * 16 * 127 = 16256;
 *   Q4_1/Q5_1: unsigned codes <= 31 times y: 4 * 2 * 31 * 127 = 31496;
 *   Q8_0: one pair may reach 2 * 128 * 127 = 32512, so each group goes to
 *   int32 on its own.
 * Measured on Zen 3 and not kept: y + 128 as the unsigned operand with
 * 128 * sum(x) taken off (the same speed, or 10% slower when y + 128 goes
 * through memory), and unsigned codes with k * sum(y) taken off as in the
 * single dots (4% slower: the correction costs a lane-crossing shuffle).
 */

static ALWAYS_INLINE __m256i bcast_group(const uint8_t *p) {
    return _mm256_set1_epi64x((long long)ld_u64(p));
}

/* a block of zeros for the rows of a tile past nr (d = 0: they add nothing) */
static const uint8_t zero_block[sizeof(block_q8_1)] = {0};

/* The nibbles of rows 0..3, transposed without unpacking first: packed byte j
 * holds elements j and j + 16, so the 8-byte half h of each row's qs, gathered
 * into one register, yields group h (low nibbles) and group h + 2 (high). */
static ALWAYS_INLINE void q4_tile_codes(const uint8_t *const qs[4], __m256i *W0, __m256i *W1,
                                        __m256i *W2, __m256i *W3) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i r02 =
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)qs[0])),
                                _mm_loadu_si128((const __m128i *)qs[2]), 1);
    __m256i r13 =
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)qs[1])),
                                _mm_loadu_si128((const __m128i *)qs[3]), 1);
    __m256i p0 = _mm256_unpacklo_epi64(r02, r13); /* bytes 0..7 of rows 0, 1 | 2, 3 */
    __m256i p1 = _mm256_unpackhi_epi64(r02, r13); /* bytes 8..15 */
    *W0 = _mm256_and_si256(p0, m4);
    *W1 = _mm256_and_si256(p1, m4);
    *W2 = _mm256_and_si256(_mm256_srli_epi16(p0, 4), m4);
    *W3 = _mm256_and_si256(_mm256_srli_epi16(p1, 4), m4);
}

/* Q5 high bits in the transposed layout: 0xff in byte k of lane r of group g
 * when bit 8g + k of row r's qh is set. qh4: the four rows' qh in both
 * 128-bit halves. */
static ALWAYS_INLINE __m256i q5_tile_high(__m256i qh4, int g) {
    const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfeLL);
    /* lane r (qword) takes byte g of dword r; rows 0, 1 low half, 2, 3 high */
    const char a = (char)g, b = (char)(4 + g), c = (char)(8 + g), d = (char)(12 + g);
    const __m256i pick = _mm256_setr_epi8(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b, c, c, c,
                                          c, c, c, c, c, d, d, d, d, d, d, d, d);
    __m256i v = _mm256_or_si256(_mm256_shuffle_epi8(qh4, pick), others);
    return _mm256_cmpeq_epi8(v, _mm256_set1_epi8(-1));
}

/* Codes of the tile's weight block, transposed (W0..W3), as in fmt_codes:
 * signed for the *_0 formats, unsigned for the *_1 formats. */
static ALWAYS_INLINE void tile_codes(enum fmt f, const uint8_t *const blk[4], __m256i *W0,
                                     __m256i *W1, __m256i *W2, __m256i *W3) {
    if (f == F_Q8_0) {
        __m256i a = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)blk[0])->qs);
        __m256i b = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)blk[1])->qs);
        __m256i c = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)blk[2])->qs);
        __m256i d = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)blk[3])->qs);
        __m256i t0 = _mm256_unpacklo_epi64(a, b); /* a.0 b.0 | a.2 b.2 */
        __m256i t1 = _mm256_unpackhi_epi64(a, b); /* a.1 b.1 | a.3 b.3 */
        __m256i t2 = _mm256_unpacklo_epi64(c, d);
        __m256i t3 = _mm256_unpackhi_epi64(c, d);
        *W0 = _mm256_permute2x128_si256(t0, t2, 0x20);
        *W1 = _mm256_permute2x128_si256(t1, t3, 0x20);
        *W2 = _mm256_permute2x128_si256(t0, t2, 0x31);
        *W3 = _mm256_permute2x128_si256(t1, t3, 0x31);
        return;
    }
    size_t qs_off = f == F_Q4_0   ? offsetof(block_q4_0, qs)
                    : f == F_Q4_1 ? offsetof(block_q4_1, qs)
                    : f == F_Q5_0 ? offsetof(block_q5_0, qs)
                                  : offsetof(block_q5_1, qs);
    const uint8_t *const qs[4] = {blk[0] + qs_off, blk[1] + qs_off, blk[2] + qs_off,
                                  blk[3] + qs_off};
    q4_tile_codes(qs, W0, W1, W2, W3);
    if (f == F_Q4_0) {
        const __m256i k8 = _mm256_set1_epi8(8);
        *W0 = _mm256_sub_epi8(*W0, k8);
        *W1 = _mm256_sub_epi8(*W1, k8);
        *W2 = _mm256_sub_epi8(*W2, k8);
        *W3 = _mm256_sub_epi8(*W3, k8);
    } else if (f == F_Q5_0 || f == F_Q5_1) {
        size_t qh_off = f == F_Q5_0 ? offsetof(block_q5_0, qh) : offsetof(block_q5_1, qh);
        __m128i q = _mm_unpacklo_epi64(
            _mm_cvtsi64_si128((long long)((uint64_t)rd_u32le(blk[0] + qh_off) |
                                          (uint64_t)rd_u32le(blk[1] + qh_off) << 32)),
            _mm_cvtsi64_si128((long long)((uint64_t)rd_u32le(blk[2] + qh_off) |
                                          (uint64_t)rd_u32le(blk[3] + qh_off) << 32)));
        __m256i qh4 = _mm256_broadcastsi128_si256(q);
        if (f == F_Q5_0) { /* q | 16 when the bit is set, else q | 0xf0 = q - 16 */
            const __m256i kf0 = _mm256_set1_epi8((char)0xf0);
            *W0 = _mm256_or_si256(*W0, _mm256_andnot_si256(q5_tile_high(qh4, 0), kf0));
            *W1 = _mm256_or_si256(*W1, _mm256_andnot_si256(q5_tile_high(qh4, 1), kf0));
            *W2 = _mm256_or_si256(*W2, _mm256_andnot_si256(q5_tile_high(qh4, 2), kf0));
            *W3 = _mm256_or_si256(*W3, _mm256_andnot_si256(q5_tile_high(qh4, 3), kf0));
        } else {
            const __m256i k10 = _mm256_set1_epi8(0x10);
            *W0 = _mm256_or_si256(*W0, _mm256_and_si256(q5_tile_high(qh4, 0), k10));
            *W1 = _mm256_or_si256(*W1, _mm256_and_si256(q5_tile_high(qh4, 1), k10));
            *W2 = _mm256_or_si256(*W2, _mm256_and_si256(q5_tile_high(qh4, 2), k10));
            *W3 = _mm256_or_si256(*W3, _mm256_and_si256(q5_tile_high(qh4, 3), k10));
        }
    }
}

/* One activation column against the transposed weight groups W0..W3 (A0..A3:
 * |W| for the signed formats): int32 lanes as described above. */
static ALWAYS_INLINE __m256i tile_column(enum fmt f, __m256i W0, __m256i W1, __m256i W2, __m256i W3,
                                         __m256i A0, __m256i A1, __m256i A2, __m256i A3,
                                         const uint8_t *yq) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i y0 = bcast_group(yq), y1 = bcast_group(yq + 8);
    const __m256i y2 = bcast_group(yq + 16), y3 = bcast_group(yq + 24);
    if (f == F_Q8_0) {
        __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(A0, _mm256_sign_epi8(y0, W0)), ones);
        __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(A1, _mm256_sign_epi8(y1, W1)), ones);
        __m256i p2 = _mm256_madd_epi16(_mm256_maddubs_epi16(A2, _mm256_sign_epi8(y2, W2)), ones);
        __m256i p3 = _mm256_madd_epi16(_mm256_maddubs_epi16(A3, _mm256_sign_epi8(y3, W3)), ones);
        return _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3));
    }
    __m256i p0, p1, p2, p3;
    if (fmt_has_min(f)) {
        p0 = _mm256_maddubs_epi16(W0, y0);
        p1 = _mm256_maddubs_epi16(W1, y1);
        p2 = _mm256_maddubs_epi16(W2, y2);
        p3 = _mm256_maddubs_epi16(W3, y3);
    } else {
        p0 = _mm256_maddubs_epi16(A0, _mm256_sign_epi8(y0, W0));
        p1 = _mm256_maddubs_epi16(A1, _mm256_sign_epi8(y1, W1));
        p2 = _mm256_maddubs_epi16(A2, _mm256_sign_epi8(y2, W2));
        p3 = _mm256_maddubs_epi16(A3, _mm256_sign_epi8(y3, W3));
    }
    __m256i sum16 = _mm256_add_epi16(_mm256_add_epi16(p0, p1), _mm256_add_epi16(p2, p3));
    return _mm256_madd_epi16(sum16, ones);
}

/* acc += a column's block sums times its scales (and m * s for the *_1
 * formats); dy, sy: the column's d and s in every lane */
static ALWAYS_INLINE __m256 tile_accumulate(enum fmt f, __m256 acc, __m256i i32, __m256 dx2,
                                            __m256 mx2, __m256 dy, __m256 sy) {
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), _mm256_mul_ps(dx2, dy), acc);
    if (fmt_has_min(f)) {
        acc = _mm256_fmadd_ps(mx2, sy, acc);
    }
    return acc;
}

static ALWAYS_INLINE void tile_store(float *s, size_t ldc, int c, int nr, __m256 acc) {
    float t[8];
    _mm256_storeu_ps(t, acc);
    for (int r = 0; r < nr; r++) {
        s[(size_t)c * ldc + r] = t[2 * r] + t[2 * r + 1];
    }
}

/* One tile: rows past nr read a block of zeros (scale 0) and are not stored. */
static ALWAYS_INLINE void tile_legacy(enum fmt f, const int NC, int64_t n, float *restrict s,
                                      size_t ldc, const uint8_t *restrict x, size_t bx,
                                      const uint8_t *restrict y, size_t by, int nr) {
    const size_t xs = fmt_bytes(f), ys = act_bytes(f);
    const int64_t nb = n / QK8_0;
    /* rows past nr read a zero block that stays put */
    const uint8_t *row0 = x, *row1 = zero_block, *row2 = zero_block, *row3 = zero_block;
    size_t step1 = 0, step2 = 0, step3 = 0;
    if (nr > 1) {
        row1 = x + bx;
        step1 = xs;
    }
    if (nr > 2) {
        row2 = x + 2 * bx;
        step2 = xs;
    }
    if (nr > 3) {
        row3 = x + 3 * bx;
        step3 = xs;
    }
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    for (int64_t b = 0; b < nb; b++) {
        /* weights: codes of the four rows, transposed; scales and mins */
        const uint8_t *const blk[4] = {row0, row1, row2, row3};
        __m256i W0, W1, W2, W3;
        tile_codes(f, blk, &W0, &W1, &W2, &W3);
        /* [d0 d0 d1 d1 d2 d2 d3 d3]: both lanes of a row get its scale */
        __m128i h =
            _mm_cvtsi64_si128((long long)pack4(fmt_d(row0), fmt_d(row1), fmt_d(row2), fmt_d(row3)));
        const __m256 dx2 = _mm256_cvtph_ps(_mm_unpacklo_epi16(h, h));
        __m256 mx2 = _mm256_setzero_ps(); /* [m0 0 m1 0 ...]: m * s once per row */
        if (fmt_has_min(f)) {
            __m128i hm = _mm_cvtsi64_si128(
                (long long)pack4(fmt_m(row0), fmt_m(row1), fmt_m(row2), fmt_m(row3)));
            mx2 = _mm256_cvtph_ps(_mm_unpacklo_epi16(hm, _mm_setzero_si128()));
        }
        __m256i A0 = W0, A1 = W1, A2 = W2, A3 = W3; /* |W|, signed formats */
        if (!fmt_has_min(f)) {
            A0 = _mm256_abs_epi8(W0);
            A1 = _mm256_abs_epi8(W1);
            A2 = _mm256_abs_epi8(W2);
            A3 = _mm256_abs_epi8(W3);
        }
        row0 += xs;
        row1 += step1;
        row2 += step2;
        row3 += step3;

        /* activations: scales (and sums) of the NC columns; d first, s second */
        const uint8_t *yb = y + (size_t)b * ys;
        const __m256 dy = dup128(
            f16x4(pack4(ld_u16(yb), NC > 1 ? ld_u16(yb + by) : 0, NC > 2 ? ld_u16(yb + 2 * by) : 0,
                        NC > 3 ? ld_u16(yb + 3 * by) : 0)));
        __m256 sy = _mm256_setzero_ps();
        if (fmt_has_min(f)) {
            sy = dup128(f16x4(pack4(ld_u16(yb + 2), NC > 1 ? ld_u16(yb + by + 2) : 0,
                                    NC > 2 ? ld_u16(yb + 2 * by + 2) : 0,
                                    NC > 3 ? ld_u16(yb + 3 * by + 2) : 0)));
        }

        acc0 =
            tile_accumulate(f, acc0, tile_column(f, W0, W1, W2, W3, A0, A1, A2, A3, act_qs(f, yb)),
                            dx2, mx2, _mm256_permute_ps(dy, 0x00), _mm256_permute_ps(sy, 0x00));
        if (NC > 1) {
            acc1 = tile_accumulate(
                f, acc1, tile_column(f, W0, W1, W2, W3, A0, A1, A2, A3, act_qs(f, yb + by)), dx2,
                mx2, _mm256_permute_ps(dy, 0x55), _mm256_permute_ps(sy, 0x55));
        }
        if (NC > 2) {
            acc2 = tile_accumulate(
                f, acc2, tile_column(f, W0, W1, W2, W3, A0, A1, A2, A3, act_qs(f, yb + 2 * by)),
                dx2, mx2, _mm256_permute_ps(dy, 0xaa), _mm256_permute_ps(sy, 0xaa));
        }
        if (NC > 3) {
            acc3 = tile_accumulate(
                f, acc3, tile_column(f, W0, W1, W2, W3, A0, A1, A2, A3, act_qs(f, yb + 3 * by)),
                dx2, mx2, _mm256_permute_ps(dy, 0xff), _mm256_permute_ps(sy, 0xff));
        }
    }
    tile_store(s, ldc, 0, nr, acc0);
    if (NC > 1) {
        tile_store(s, ldc, 1, nr, acc1);
    }
    if (NC > 2) {
        tile_store(s, ldc, 2, nr, acc2);
    }
    if (NC > 3) {
        tile_store(s, ldc, 3, nr, acc3);
    }
}

#define DEFINE_TILE(name, fmt)                                                                     \
    static void name(int64_t n, float *restrict s, size_t ldc, const void *restrict x, size_t bx,  \
                     const void *restrict y, size_t by, int nr, int nc) {                          \
        switch (nc) {                                                                              \
        case 1:                                                                                    \
            tile_legacy(fmt, 1, n, s, ldc, x, bx, y, by, nr);                                      \
            break;                                                                                 \
        case 2:                                                                                    \
            tile_legacy(fmt, 2, n, s, ldc, x, bx, y, by, nr);                                      \
            break;                                                                                 \
        case 3:                                                                                    \
            tile_legacy(fmt, 3, n, s, ldc, x, bx, y, by, nr);                                      \
            break;                                                                                 \
        default:                                                                                   \
            tile_legacy(fmt, 4, n, s, ldc, x, bx, y, by, nr);                                      \
            break;                                                                                 \
        }                                                                                          \
    }

/* references: the vec_dot references above, once per (row, column) pair */
DEFINE_TILE(tile_q4_0_q8_0_avx2, F_Q4_0)
DEFINE_TILE(tile_q4_1_q8_1_avx2, F_Q4_1)
DEFINE_TILE(tile_q5_0_q8_0_avx2, F_Q5_0)
DEFINE_TILE(tile_q5_1_q8_1_avx2, F_Q5_1)
DEFINE_TILE(tile_q8_0_q8_0_avx2, F_Q8_0)

/* ---- dequantization ---- */

/* 32 int8 values times d, stored as floats (the reference: (float)q * d) */
static ALWAYS_INLINE void store_scaled(float *dst, __m256i q, __m256 d) {
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    _mm256_storeu_ps(dst, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d));
    _mm256_storeu_ps(
        dst + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d));
    _mm256_storeu_ps(dst + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d));
    _mm256_storeu_ps(
        dst + 24,
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d));
}

/* the same plus m, as the reference computes q * d + m (q * d is exact: a
 * 5-bit code times an 11-bit significand, so an FMA would round the same) */
static ALWAYS_INLINE void store_scaled_min(float *dst, __m256i q, __m256 d, __m256 m) {
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int k = 0; k < 4; k++) {
        __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part[k])), d);
        _mm256_storeu_ps(dst + 8 * k, _mm256_add_ps(v, m));
    }
}

static ALWAYS_INLINE void dequant_legacy(enum fmt f, const void *src, float *dst, int64_t n) {
    const uint8_t *x = src;
    const size_t xs = fmt_bytes(f);
    for (int64_t b = 0; b < n / QK8_0; b++, x += xs, dst += QK8_0) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(fmt_d(x)));
        if (fmt_has_min(f)) {
            store_scaled_min(dst, fmt_codes(f, x), d, _mm256_set1_ps(_cvtsh_ss(fmt_m(x))));
        } else {
            store_scaled(dst, fmt_codes(f, x), d);
        }
    }
}

/* reference: dequant_q4_0_ref */
static void dequant_q4_0_avx2(const void *restrict src, float *restrict dst, int64_t n) {
    dequant_legacy(F_Q4_0, src, dst, n);
}

/* reference: dequant_q4_1_ref */
static void dequant_q4_1_avx2(const void *restrict src, float *restrict dst, int64_t n) {
    dequant_legacy(F_Q4_1, src, dst, n);
}

/* reference: dequant_q5_0_ref */
static void dequant_q5_0_avx2(const void *restrict src, float *restrict dst, int64_t n) {
    dequant_legacy(F_Q5_0, src, dst, n);
}

/* reference: dequant_q5_1_ref */
static void dequant_q5_1_avx2(const void *restrict src, float *restrict dst, int64_t n) {
    dequant_legacy(F_Q5_1, src, dst, n);
}

/* reference: dequant_q8_0_ref */
static void dequant_q8_0_avx2(const void *restrict src, float *restrict dst, int64_t n) {
    dequant_legacy(F_Q8_0, src, dst, n);
}

/* reference: dequant_q8_1_ref (s is not needed to dequantize) */
static void dequant_q8_1_avx2(const void *restrict src, float *restrict dst, int64_t n) {
    const block_q8_1 *x = src;
    for (int64_t b = 0; b < n / QK8_1; b++, dst += QK8_1) {
        store_scaled(dst, _mm256_loadu_si256((const __m256i *)x[b].qs),
                     _mm256_set1_ps(_cvtsh_ss(x[b].d)));
    }
}

/* ---- activation quantizers ---- */

/* roundf(v) for |v| < 2^23: truncate, then step away from zero when the
 * dropped fraction is at least one half. v - trunc(v) is exact there, so this
 * is roundf bit for bit, where VROUNDPS's nearest mode would round halves to
 * even. */
/* One block of 32 floats to int8 codes as the Q8 references do (q8_avx2.h).
 * Returns d; *sum gets the sum of the codes. */
static ALWAYS_INLINE float quant_q8_block(const float *x, int8_t *qs, int *sum) {
    __m256i q[4];
    const float d = q8_codes_avx2(x, q);
    __m256i s32 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
    s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
    *sum = _mm_cvtsi128_si32(s4);
    _mm256_storeu_si256((__m256i *)qs, q8_pack_avx2(q));
    return d;
}

/* reference: quant_q8_0_ref */
static void quant_q8_0_avx2(const float *restrict x, void *restrict dst, int64_t n) {
    block_q8_0 *y = dst;
    for (int64_t b = 0; b < n / QK8_0; b++, x += QK8_0) {
        int sum;
        y[b].d = _cvtss_sh(quant_q8_block(x, y[b].qs, &sum), 0);
    }
}

/* reference: quant_q8_1_ref */
static void quant_q8_1_avx2(const float *restrict x, void *restrict dst, int64_t n) {
    block_q8_1 *y = dst;
    for (int64_t b = 0; b < n / QK8_1; b++, x += QK8_1) {
        int sum;
        float d = quant_q8_block(x, y[b].qs, &sum);
        y[b].d = _cvtss_sh(d, 0);
        y[b].s = _cvtss_sh((float)sum * d, 0);
    }
}

void quant_install_avx2_legacy(quant_traits *t) {
    t[GGUF_TYPE_Q4_0].vec_dot = dot_q4_0_q8_0_avx2;
    t[GGUF_TYPE_Q4_0].vec_dot_tile = tile_q4_0_q8_0_avx2;
    t[GGUF_TYPE_Q4_0].to_float = dequant_q4_0_avx2;
    t[GGUF_TYPE_Q4_1].vec_dot = dot_q4_1_q8_1_avx2;
    t[GGUF_TYPE_Q4_1].vec_dot_tile = tile_q4_1_q8_1_avx2;
    t[GGUF_TYPE_Q4_1].to_float = dequant_q4_1_avx2;
    t[GGUF_TYPE_Q5_0].vec_dot = dot_q5_0_q8_0_avx2;
    t[GGUF_TYPE_Q5_0].vec_dot_tile = tile_q5_0_q8_0_avx2;
    t[GGUF_TYPE_Q5_0].to_float = dequant_q5_0_avx2;
    t[GGUF_TYPE_Q5_1].vec_dot = dot_q5_1_q8_1_avx2;
    t[GGUF_TYPE_Q5_1].vec_dot_tile = tile_q5_1_q8_1_avx2;
    t[GGUF_TYPE_Q5_1].to_float = dequant_q5_1_avx2;
    t[GGUF_TYPE_Q8_0].vec_dot = dot_q8_0_q8_0_avx2;
    t[GGUF_TYPE_Q8_0].vec_dot_tile = tile_q8_0_q8_0_avx2;
    t[GGUF_TYPE_Q8_0].to_float = dequant_q8_0_avx2;
    t[GGUF_TYPE_Q8_0].from_float = quant_q8_0_avx2;
    t[GGUF_TYPE_Q8_1].to_float = dequant_q8_1_avx2;
    t[GGUF_TYPE_Q8_1].from_float = quant_q8_1_avx2;
}
