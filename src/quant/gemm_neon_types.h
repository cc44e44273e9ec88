/*
 * The per-type entry points of an AArch64 GEMM (gemm_neon.c, gemm_neon_i8mm.c):
 * one K-block function per panel count calling the includer's inline kernel
 * kb_<FAMILY>_<type>(KB_ARGS..., np), the type's gemm over gemm_drive, and the
 * installer of every type. The includer defines GEMM_FAMILY (dotprod, i8mm),
 * KB_CALL_ARGS (its KB_ARGS as call arguments), GEMM_PANEL_FMT and
 * GEMM_INSTALL (the installer's name) before including it.
 */
#define GEMM_CAT3(a, b, c)  a##b##c
#define GEMM_XCAT3(a, b, c) GEMM_CAT3(a, b, c)
#define KB_OF(T)            GEMM_XCAT3(kb_, GEMM_FAMILY, _##T)
#define GEMM_OF(T)          GEMM_XCAT3(gemm_, GEMM_FAMILY, _##T)

#define KB_VARIANT(T, n)                                                                           \
    static void KB_OF(T##_##n)(KB_ARGS) {                                                          \
        KB_OF(T)(KB_CALL_ARGS, n);                                                                 \
    }
#define GEMM_TYPE(T)                                                                               \
    KB_VARIANT(T, 1)                                                                               \
    KB_VARIANT(T, 2)                                                                               \
    KB_VARIANT(T, 3)                                                                               \
    KB_VARIANT(T, 4)                                                                               \
    KB_VARIANT(T, 5)                                                                               \
    KB_VARIANT(T, 6)                                                                               \
    KB_VARIANT(T, 7)                                                                               \
    KB_VARIANT(T, 8)                                                                               \
    static const kb_fn kb_##T##_np[GEMM_NP + 1] = {                                                \
        NULL,          KB_OF(T##_1), KB_OF(T##_2), KB_OF(T##_3), KB_OF(T##_4),                     \
        KB_OF(T##_5),  KB_OF(T##_6), KB_OF(T##_7), KB_OF(T##_8)};                                  \
    static void GEMM_OF(T)(int64_t k, const void *restrict x, size_t bx, int64_t n_w,              \
                           const void *restrict panels, int64_t n_c, float *restrict y,            \
                           size_t ldy) {                                                           \
        gemm_drive(k, x, bx, n_w, panels, n_c, y, ldy, kb_##T##_np);                               \
    }

GEMM_TYPE(q4_0)
GEMM_TYPE(q4_1)
GEMM_TYPE(q5_0)
GEMM_TYPE(q5_1)
GEMM_TYPE(q8_0)
GEMM_TYPE(iq4_nl)
GEMM_TYPE(iq4_xs)
GEMM_TYPE(q2_K)
GEMM_TYPE(q3_K)
GEMM_TYPE(q4_K)
GEMM_TYPE(q5_K)
GEMM_TYPE(q6_K)

void GEMM_INSTALL(quant_traits *t) {
#define SET(id, T)                                                                                 \
    t[id].gemm = GEMM_OF(T);                                                                       \
    t[id].panel = &GEMM_PANEL_FMT
    SET(GGUF_TYPE_Q4_0, q4_0);
    SET(GGUF_TYPE_Q4_1, q4_1);
    SET(GGUF_TYPE_Q5_0, q5_0);
    SET(GGUF_TYPE_Q5_1, q5_1);
    SET(GGUF_TYPE_Q8_0, q8_0);
    SET(GGUF_TYPE_IQ4_NL, iq4_nl);
    SET(GGUF_TYPE_IQ4_XS, iq4_xs);
    SET(GGUF_TYPE_Q2_K, q2_K);
    SET(GGUF_TYPE_Q3_K, q3_K);
    SET(GGUF_TYPE_Q4_K, q4_K);
    SET(GGUF_TYPE_Q5_K, q5_K);
    SET(GGUF_TYPE_Q6_K, q6_K);
#undef SET
}
