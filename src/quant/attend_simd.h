/*
 * Attention over a KV cache at one vector width, included by attend_avx2.c
 * (ATT_LANES 8, __m256), attend_avx512.c (ATT_LANES 16, __m512) and
 * attend_neon.c (ATT_LANES 4, float32x4_t) after they define the vector
 * operations below. Reference: attend.c.
 *
 * Scores go ATT_LANES keys at a time: one accumulator per key, so the inner
 * loop is independent fused multiply-adds, and a transposing reduction turns
 * the ATT_LANES accumulators into one vector of ATT_LANES scores (about three
 * instructions per key instead of a horizontal sum each). An F16 block of keys
 * is converted once into a tile that every head of the group reads. The
 * softmax uses a polynomial exp (relative error about 2e-7) over whole
 * vectors; the weighted sum of values keeps up to eight heads' outputs in
 * registers while each value row is read once per ATT_LANES columns.
 *
 * Wanted from the includer:
 *   vf                 the vector type
 *   V_LOAD(p) V_STORE(p, x) V_ZERO() V_SET1(f) V_ADD V_MUL V_MAX V_FMA(a, b, c)
 *   V_FNMA(a, b, c)    c - a * b
 *   V_ROUND(x)         to the nearest integer, as floats
 *   V_POW2I(n)         2^n for integral float n in [-126, 127]
 *   V_HSUM(x) V_HMAX(x)
 *   V_LOAD_F16(p)      ATT_LANES halves to floats
 *   reduce_keys(acc)   lane r of the result = the sum of acc[r]'s lanes
 */
#define ATT_MAX_HD 256 /* wider heads take the reference */

/* e^x for x <= 0 (scores minus their maximum): x = n ln2 + r, |r| <= ln2/2,
 * e^r by its Taylor polynomial to r^7 (truncation below 3e-8 relative) */
static inline vf v_exp(vf x) {
    x = V_MAX(x, V_SET1(-87.0f));
    const vf n = V_ROUND(V_MUL(x, V_SET1(1.44269504088896341f)));
    vf r = V_FNMA(n, V_SET1(0.693145751953125f), x);
    r = V_FNMA(n, V_SET1(1.42860682030941723e-6f), r);
    vf p = V_SET1(1.0f / 5040);
    p = V_FMA(p, r, V_SET1(1.0f / 720));
    p = V_FMA(p, r, V_SET1(1.0f / 120));
    p = V_FMA(p, r, V_SET1(1.0f / 24));
    p = V_FMA(p, r, V_SET1(1.0f / 6));
    p = V_FMA(p, r, V_SET1(0.5f));
    p = V_FMA(p, r, V_SET1(1.0f));
    p = V_FMA(p, r, V_SET1(1.0f));
    return V_MUL(p, V_POW2I(n));
}

/* s[j] = scale * q . key j for j < ATT_LANES, keys at rows[j] (hd floats) */
static inline __attribute__((always_inline)) vf score_block(const float *restrict q, int64_t hd,
                                                            const float *const rows[ATT_LANES]) {
    vf acc[ATT_LANES];
#pragma GCC unroll 16
    for (int r = 0; r < ATT_LANES; r++) {
        acc[r] = V_ZERO();
    }
    for (int64_t c = 0; c < hd; c += ATT_LANES) {
        const vf qv = V_LOAD(q + c);
#pragma GCC unroll 16
        for (int r = 0; r < ATT_LANES; r++) {
            acc[r] = V_FMA(qv, V_LOAD(rows[r] + c), acc[r]);
        }
    }
    return reduce_keys(acc);
}

/* the scores of every head against keys j0 .. j0 + nb - 1 (nb <= ATT_LANES) */
static void score_keys(const float *restrict q, int64_t nq, int64_t hd, const uint8_t *k,
                       size_t row_bytes, int is_f16, int64_t j0, int nb, int64_t n, float scale,
                       float *restrict s, float *restrict tile) {
    const float *rows[ATT_LANES];
    if (!is_f16 && nb == ATT_LANES) {
        for (int r = 0; r < ATT_LANES; r++) {
            rows[r] = (const float *)(const void *)(k + (size_t)(j0 + r) * row_bytes);
        }
    } else {
        for (int r = 0; r < ATT_LANES; r++) {
            float *t = tile + (int64_t)r * hd;
            rows[r] = t;
            if (r >= nb) {
                memset(t, 0, (size_t)hd * sizeof *t);
                continue;
            }
            const uint8_t *src = k + (size_t)(j0 + r) * row_bytes;
            for (int64_t c = 0; c < hd; c += ATT_LANES) {
                V_STORE(t + c, is_f16 ? V_LOAD_F16((const lares_f16 *)(const void *)src + c)
                                      : V_LOAD((const float *)(const void *)src + c));
            }
        }
    }
    const vf vs = V_SET1(scale);
    for (int64_t i = 0; i < nq; i++) {
        const vf sc = V_MUL(score_block(q + i * hd, hd, rows), vs);
        if (nb == ATT_LANES) {
            V_STORE(s + i * n + j0, sc);
        } else {
            float part[ATT_LANES];
            V_STORE(part, sc);
            memcpy(s + i * n + j0, part, (size_t)nb * sizeof *part);
        }
    }
}

/* x[0..n) = softmax(x[0..n)) */
static void softmax_row(float *x, int64_t n) {
    const int64_t nv = n / ATT_LANES * ATT_LANES;
    vf mv = V_SET1(-INFINITY);
    for (int64_t j = 0; j < nv; j += ATT_LANES) {
        mv = V_MAX(mv, V_LOAD(x + j));
    }
    float mx = V_HMAX(mv);
    for (int64_t j = nv; j < n; j++) {
        mx = x[j] > mx ? x[j] : mx;
    }
    const vf negm = V_SET1(-mx);
    vf sv = V_ZERO();
    for (int64_t j = 0; j < nv; j += ATT_LANES) {
        const vf e = v_exp(V_ADD(V_LOAD(x + j), negm));
        V_STORE(x + j, e);
        sv = V_ADD(sv, e);
    }
    float sum = V_HSUM(sv);
    if (nv < n) {
        float part[ATT_LANES];
        for (int r = 0; r < ATT_LANES; r++) {
            part[r] = nv + r < n ? x[nv + r] - mx : -87.0f;
        }
        V_STORE(part, v_exp(V_LOAD(part)));
        for (int64_t j = nv; j < n; j++) {
            x[j] = part[j - nv];
            sum += x[j];
        }
    }
    const vf inv = V_SET1(1.0f / sum);
    for (int64_t j = 0; j < nv; j += ATT_LANES) {
        V_STORE(x + j, V_MUL(V_LOAD(x + j), inv));
    }
    for (int64_t j = nv; j < n; j++) {
        x[j] *= 1.0f / sum;
    }
}

/* out_i[c .. c + ATT_LANES) for heads i < NI (a constant after inlining) */
static inline __attribute__((always_inline)) void
mix_columns(int NI, const float *restrict p, int64_t n, const uint8_t *v, size_t row_bytes,
            int is_f16, int64_t c, float *restrict out, int64_t hd) {
    vf acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < NI; i++) {
        acc[i] = V_ZERO();
    }
    if (is_f16) {
        for (int64_t j = 0; j < n; j++) {
            const vf x =
                V_LOAD_F16((const lares_f16 *)(const void *)(v + (size_t)j * row_bytes) + c);
#pragma GCC unroll 8
            for (int i = 0; i < NI; i++) {
                acc[i] = V_FMA(V_SET1(p[i * n + j]), x, acc[i]);
            }
        }
    } else {
        for (int64_t j = 0; j < n; j++) {
            const vf x = V_LOAD((const float *)(const void *)(v + (size_t)j * row_bytes) + c);
#pragma GCC unroll 8
            for (int i = 0; i < NI; i++) {
                acc[i] = V_FMA(V_SET1(p[i * n + j]), x, acc[i]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NI; i++) {
        V_STORE(out + i * hd + c, acc[i]);
    }
}

static void mix_heads(int ni, const float *restrict p, int64_t n, const uint8_t *v,
                      size_t row_bytes, int is_f16, int64_t hd, float *restrict out) {
    for (int64_t c = 0; c < hd; c += ATT_LANES) {
        switch (ni) {
#define MIX_CASE(N)                                                                                \
    case N:                                                                                        \
        mix_columns(N, p, n, v, row_bytes, is_f16, c, out, hd);                                    \
        break;
            MIX_CASE(1)
            MIX_CASE(2)
            MIX_CASE(3)
            MIX_CASE(4)
            MIX_CASE(5)
            MIX_CASE(6)
            MIX_CASE(7)
            MIX_CASE(8)
#undef MIX_CASE
        default:
            break;
        }
    }
}

/* the kernel: the reference's contract (quant_kv_attend_fn), head widths that
 * are a multiple of ATT_LANES up to ATT_MAX_HD; others go to the reference */
static void attend_simd(int is_f16, const float *restrict q, int64_t nq, int64_t hd, const void *k,
                        const void *v, size_t row_bytes, int64_t n, float scale, float *restrict s,
                        float *restrict tmp, float *restrict out) {
    if (hd % ATT_LANES != 0 || hd > ATT_MAX_HD) {
        (is_f16 ? attend_f16_ref : attend_f32_ref)(q, nq, hd, k, v, row_bytes, n, scale, s, tmp,
                                                   out);
        return;
    }
    float tile[ATT_LANES * ATT_MAX_HD] __attribute__((aligned(64)));
    for (int64_t j0 = 0; j0 < n; j0 += ATT_LANES) {
        const int nb = (int)(n - j0 < ATT_LANES ? n - j0 : ATT_LANES);
        score_keys(q, nq, hd, k, row_bytes, is_f16, j0, nb, n, scale, s, tile);
    }
    for (int64_t i = 0; i < nq; i++) {
        softmax_row(s + i * n, n);
    }
    for (int64_t i0 = 0; i0 < nq; i0 += 8) {
        const int ni = (int)(nq - i0 < 8 ? nq - i0 : 8);
        mix_heads(ni, s + i0 * n, n, v, row_bytes, is_f16, hd, out + i0 * hd);
    }
}

/* ---- rows in lanes (quant_kv_attend_rows_fn) ---- */

#ifndef ATT_DB
#define ATT_DB 16 /* query dimensions held in registers while the keys go by */
#endif
#ifndef ATT_KB
#define ATT_KB 8 /* keys in flight, an accumulator each */
#endif
#ifndef ATT_MR
#define ATT_MR 4 /* rows of a tile of the weighted sum (x 4 vectors of columns) */
#endif

/* out[r] for rows r < nr <= ATT_LANES, every lane's sums in the order of
 * one row alone: the scores over dimensions 0, 1, ..., the softmax and the
 * weighted sum over keys 0, 1, ... */
static void rows_block(int is_f16, int nr, int64_t hd, const float *const *q, const int32_t *len,
                       const uint8_t *k, const uint8_t *v, size_t row_bytes, float scale,
                       float *restrict scratch, float *const *out) {
    const int L = ATT_LANES;
    int64_t n = 0;
    for (int r = 0; r < nr; r++) {
        n = len[r] > n ? len[r] : n;
    }
    float *qt = scratch;                  /* hd x L: the rows, scaled, dimension-major */
    float *kf = qt + (size_t)hd * L;      /* ATT_KB x ATT_DB: keys as floats */
    float *sc = kf + ATT_KB * ATT_DB;     /* (n + ATT_KB) x L: scores, then weights */
    float inv[ATT_LANES];
    for (int64_t d = 0; d < hd; d++) {
        for (int r = 0; r < L; r++) {
            qt[d * L + r] = r < nr ? q[r][d] * scale : 0.0f;
        }
    }
    for (int64_t d0 = 0; d0 < hd; d0 += ATT_DB) {
        vf qv[ATT_DB];
#pragma GCC unroll 16
        for (int d = 0; d < ATT_DB; d++) {
            qv[d] = V_LOAD(qt + (d0 + d) * L);
        }
        for (int64_t j0 = 0; j0 < n; j0 += ATT_KB) {
            const int nb = (int)(n - j0 < ATT_KB ? n - j0 : ATT_KB);
            for (int b = 0; b < ATT_KB; b++) {
                const uint8_t *src = k + (size_t)(j0 + b) * row_bytes;
                for (int d = 0; d < ATT_DB; d += ATT_LANES) {
                    const vf x = b >= nb  ? V_ZERO()
                                 : is_f16 ? V_LOAD_F16((const lares_f16 *)(const void *)src + d0 + d)
                                          : V_LOAD((const float *)(const void *)src + d0 + d);
                    V_STORE(kf + b * ATT_DB + d, x);
                }
            }
            vf acc[ATT_KB];
#pragma GCC unroll 8
            for (int b = 0; b < ATT_KB; b++) {
                acc[b] = d0 > 0 ? V_LOAD(sc + (j0 + b) * L) : V_ZERO();
            }
#pragma GCC unroll 16
            for (int d = 0; d < ATT_DB; d++) {
#pragma GCC unroll 8
                for (int b = 0; b < ATT_KB; b++) {
                    acc[b] = V_FMA(V_SET1(kf[b * ATT_DB + d]), qv[d], acc[b]);
                }
            }
#pragma GCC unroll 8
            for (int b = 0; b < ATT_KB; b++) {
                V_STORE(sc + (j0 + b) * L, acc[b]);
            }
        }
    }
    /* each lane's softmax over its own keys: those past its window out */
    for (int r = 0; r < nr; r++) {
        for (int64_t j = len[r]; j < n; j++) {
            sc[j * L + r] = -INFINITY;
        }
    }
    vf mx = V_SET1(-INFINITY);
    for (int64_t j = 0; j < n; j++) {
        mx = V_MAX(mx, V_LOAD(sc + j * L));
    }
    for (int64_t j = 0; j < n; j++) {
        V_STORE(sc + j * L, v_exp(V_SUB(V_LOAD(sc + j * L), mx)));
    }
    for (int r = 0; r < nr; r++) {
        for (int64_t j = len[r]; j < n; j++) {
            sc[j * L + r] = 0.0f;
        }
    }
    vf sum = V_ZERO();
    for (int64_t j = 0; j < n; j++) {
        sum = V_ADD(sum, V_LOAD(sc + j * L));
    }
    V_STORE(inv, V_DIV(V_SET1(1.0f), sum));
    /* the weighted sum of the values, ATT_MR rows x 4 vectors of columns a tile */
    for (int r0 = 0; r0 < nr; r0 += ATT_MR) {
        for (int64_t c0 = 0; c0 < hd; c0 += 4 * ATT_LANES) {
            vf acc[ATT_MR][4];
#pragma GCC unroll 4
            for (int a = 0; a < ATT_MR; a++) {
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    acc[a][c] = V_ZERO();
                }
            }
            for (int64_t j = 0; j < n; j++) {
                const uint8_t *src = v + (size_t)j * row_bytes;
                vf x[4];
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    x[c] = is_f16 ? V_LOAD_F16((const lares_f16 *)(const void *)src + c0 +
                                               c * ATT_LANES)
                                  : V_LOAD((const float *)(const void *)src + c0 + c * ATT_LANES);
                }
#pragma GCC unroll 4
                for (int a = 0; a < ATT_MR; a++) {
                    const vf p = V_SET1(sc[j * L + r0 + a]);
#pragma GCC unroll 4
                    for (int c = 0; c < 4; c++) {
                        acc[a][c] = V_FMA(p, x[c], acc[a][c]);
                    }
                }
            }
            for (int a = 0; a < ATT_MR && r0 + a < nr; a++) {
                const vf w = V_SET1(inv[r0 + a]);
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    V_STORE(out[r0 + a] + c0 + c * ATT_LANES, V_MUL(acc[a][c], w));
                }
            }
        }
    }
}

/* quant_kv_attend_rows_fn: ATT_LANES rows at a time; head widths that are
 * not a multiple of both blockings take the reference a row at a time */
static void attend_rows_simd(int is_f16, int64_t nr, int64_t hd, const float *const *q,
                             const int32_t *len, const void *k, const void *v, size_t row_bytes,
                             float scale, float *restrict scratch, float *const *out) {
    if (hd % ATT_DB != 0 || hd % (4 * ATT_LANES) != 0) {
        for (int64_t r = 0; r < nr; r++) {
            (is_f16 ? attend_f16_ref : attend_f32_ref)(q[r], 1, hd, k, v, row_bytes, len[r], scale,
                                                       scratch, scratch + len[r], out[r]);
        }
        return;
    }
    for (int64_t r0 = 0; r0 < nr; r0 += ATT_LANES) {
        const int n = (int)(nr - r0 < ATT_LANES ? nr - r0 : ATT_LANES);
        rows_block(is_f16, n, hd, q + r0, len + r0, k, v, row_bytes, scale, scratch, out + r0);
    }
}

static void attend_rows_f32_simd(int64_t nr, int64_t hd, const float *const *q, const int32_t *len,
                                 const void *k, const void *v, size_t row_bytes, float scale,
                                 float *restrict scratch, float *const *out) {
    attend_rows_simd(0, nr, hd, q, len, k, v, row_bytes, scale, scratch, out);
}

static void attend_rows_f16_simd(int64_t nr, int64_t hd, const float *const *q, const int32_t *len,
                                 const void *k, const void *v, size_t row_bytes, float scale,
                                 float *restrict scratch, float *const *out) {
    attend_rows_simd(1, nr, hd, q, len, k, v, row_bytes, scale, scratch, out);
}

static void attend_f32_simd(const float *restrict q, int64_t nq, int64_t hd, const void *k,
                            const void *v, size_t row_bytes, int64_t n, float scale,
                            float *restrict s, float *restrict tmp, float *restrict out) {
    attend_simd(0, q, nq, hd, k, v, row_bytes, n, scale, s, tmp, out);
}

static void attend_f16_simd(const float *restrict q, int64_t nq, int64_t hd, const void *k,
                            const void *v, size_t row_bytes, int64_t n, float scale,
                            float *restrict s, float *restrict tmp, float *restrict out) {
    attend_simd(1, q, nq, hd, k, v, row_bytes, n, scale, s, tmp, out);
}
