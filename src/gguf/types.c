/*
 * Block geometry of every tensor type a GGUF file may hold (GGML's type
 * numbers; see ggml.h and ggml-common.h of the ggml project for the layouts).
 * The reader needs it to size tensor data even for types lares cannot compute.
 */
#include "gguf/gguf.h"

#include <ctype.h>

static const gguf_type_info type_infos[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_F32] = {"f32", 1, 4},
    [GGUF_TYPE_F16] = {"f16", 1, 2},
    [GGUF_TYPE_Q4_0] = {"q4_0", 32, 18},
    [GGUF_TYPE_Q4_1] = {"q4_1", 32, 20},
    [GGUF_TYPE_Q5_0] = {"q5_0", 32, 22},
    [GGUF_TYPE_Q5_1] = {"q5_1", 32, 24},
    [GGUF_TYPE_Q8_0] = {"q8_0", 32, 34},
    [GGUF_TYPE_Q8_1] = {"q8_1", 32, 36},
    [GGUF_TYPE_Q2_K] = {"q2_k", 256, 84},
    [GGUF_TYPE_Q3_K] = {"q3_k", 256, 110},
    [GGUF_TYPE_Q4_K] = {"q4_k", 256, 144},
    [GGUF_TYPE_Q5_K] = {"q5_k", 256, 176},
    [GGUF_TYPE_Q6_K] = {"q6_k", 256, 210},
    [GGUF_TYPE_Q8_K] = {"q8_k", 256, 292},
    [GGUF_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66},
    [GGUF_TYPE_IQ2_XS] = {"iq2_xs", 256, 74},
    [GGUF_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98},
    [GGUF_TYPE_IQ1_S] = {"iq1_s", 256, 50},
    [GGUF_TYPE_IQ4_NL] = {"iq4_nl", 32, 18},
    [GGUF_TYPE_IQ3_S] = {"iq3_s", 256, 110},
    [GGUF_TYPE_IQ2_S] = {"iq2_s", 256, 82},
    [GGUF_TYPE_IQ4_XS] = {"iq4_xs", 256, 136},
    [GGUF_TYPE_I8] = {"i8", 1, 1},
    [GGUF_TYPE_I16] = {"i16", 1, 2},
    [GGUF_TYPE_I32] = {"i32", 1, 4},
    [GGUF_TYPE_I64] = {"i64", 1, 8},
    [GGUF_TYPE_F64] = {"f64", 1, 8},
    [GGUF_TYPE_IQ1_M] = {"iq1_m", 256, 56},
    [GGUF_TYPE_BF16] = {"bf16", 1, 2},
    [GGUF_TYPE_TQ1_0] = {"tq1_0", 256, 54},
    [GGUF_TYPE_TQ2_0] = {"tq2_0", 256, 66},
    [GGUF_TYPE_MXFP4] = {"mxfp4", 32, 17},
    [GGUF_TYPE_NVFP4] = {"nvfp4", 64, 36},
    [GGUF_TYPE_Q1_0] = {"q1_0", 128, 18},
};

const gguf_type_info *gguf_type_info_of(uint32_t type) {
    if (type >= GGUF_TYPE_COUNT || type_infos[type].name == NULL) {
        return NULL;
    }
    return &type_infos[type];
}

int gguf_type_from_name(const char *name) {
    char low[16];
    size_t n = strlen(name);
    if (n == 0 || n >= sizeof low) {
        return -1;
    }
    for (size_t i = 0; i <= n; i++) {
        low[i] = (char)tolower((unsigned char)name[i]);
    }
    for (int t = 0; t < GGUF_TYPE_COUNT; t++) {
        if (type_infos[t].name != NULL && strcmp(type_infos[t].name, low) == 0) {
            return t;
        }
    }
    return -1;
}

bool gguf_row_bytes(uint32_t type, int64_t n, uint64_t *out) {
    const gguf_type_info *ti = gguf_type_info_of(type);
    if (ti == NULL || n < 0 || (uint64_t)n % ti->blck_elems != 0) {
        return false;
    }
    return lares_mul_u64((uint64_t)n / ti->blck_elems, ti->blck_bytes, out);
}

static const char *const vtype_names[GGUF_VT_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

const char *gguf_vtype_name(uint32_t vt) {
    return vt < GGUF_VT_COUNT ? vtype_names[vt] : "?";
}

uint32_t gguf_vtype_bytes(uint32_t vt) {
    static const uint8_t bytes[GGUF_VT_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return vt < GGUF_VT_COUNT ? bytes[vt] : 0;
}
