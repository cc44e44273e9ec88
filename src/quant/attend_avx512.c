/*
 * Attention over a KV cache with AVX-512 F (16 floats a vector): the kernels
 * of attend_simd.h at this width. Reference: attend.c.
 */
#include "quant/half.h"
#include "quant/kernels.h"

#include <immintrin.h>
#include <math.h>

#define ATT_LANES 16
typedef __m512 vf;
#define V_LOAD(p)       _mm512_loadu_ps(p)
#define V_STORE(p, x)   _mm512_storeu_ps(p, x)
#define V_ZERO()        _mm512_setzero_ps()
#define V_SET1(f)       _mm512_set1_ps(f)
#define V_ADD(a, b)     _mm512_add_ps(a, b)
#define V_MUL(a, b)     _mm512_mul_ps(a, b)
#define V_SUB(a, b)     _mm512_sub_ps(a, b)
#define V_DIV(a, b)     _mm512_div_ps(a, b)
#define V_MIN(a, b)     _mm512_min_ps(a, b)
#define V_MAX(a, b)     _mm512_max_ps(a, b)
#define V_FMA(a, b, c)  _mm512_fmadd_ps(a, b, c)
#define V_FNMA(a, b, c) _mm512_fnmadd_ps(a, b, c)
#define V_ROUND(x)      _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_HSUM(x)       _mm512_reduce_add_ps(x)
#define V_HMAX(x)       _mm512_reduce_max_ps(x)
#define V_LOAD_F16(p)   _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))

static inline vf V_POW2I(vf n) {
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}

/* lane r = the sum of a[r]'s lanes: pairs interleaved (unpack), then quads
 * (shuffle within 128-bit lanes), then the four 128-bit lanes (shuffle_f32x4) */
static inline vf reduce_keys(const vf a[16]) {
    vf t[4];
    for (int g = 0; g < 4; g++) {
        const vf *v = a + 4 * g;
        const vf s01 =
            _mm512_add_ps(_mm512_unpacklo_ps(v[0], v[1]), _mm512_unpackhi_ps(v[0], v[1]));
        const vf s23 =
            _mm512_add_ps(_mm512_unpacklo_ps(v[2], v[3]), _mm512_unpackhi_ps(v[2], v[3]));
        t[g] = _mm512_add_ps(_mm512_shuffle_ps(s01, s23, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(s01, s23, _MM_SHUFFLE(3, 2, 3, 2)));
    }
    const vf x = _mm512_add_ps(_mm512_shuffle_f32x4(t[0], t[1], 0x44),
                               _mm512_shuffle_f32x4(t[0], t[1], 0xEE));
    const vf y = _mm512_add_ps(_mm512_shuffle_f32x4(t[2], t[3], 0x44),
                               _mm512_shuffle_f32x4(t[2], t[3], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
}

#include "quant/attend_simd.h"
#include "quant/silu_simd.h"

void quant_install_avx512_attend(quant_traits *t) {
    t[GGUF_TYPE_F32].kv_attend = attend_f32_simd;
    t[GGUF_TYPE_F16].kv_attend = attend_f16_simd;
    t[GGUF_TYPE_F32].kv_attend_rows = attend_rows_f32_simd;
    t[GGUF_TYPE_F16].kv_attend_rows = attend_rows_f16_simd;
    t[GGUF_TYPE_F32].silu_mul = silu_mul_simd; /* SwiGLU, with the softmax's exp */
}
