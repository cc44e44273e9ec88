/*
 * Which block type each tensor gets in a quantized file. The mixes follow the
 * conventions GGUF files in the wild use (the reference engine's quantizer):
 *
 *   - 1-D tensors (norms, biases), MoE routers and q/k norms stay F32;
 *   - the output matrix (or the embedding when it doubles as the output) gets
 *     Q6_K in the K-quant mixes, since it is the most sensitive matrix;
 *   - in *_K_M mixes, attn_v and ffn_down get Q6_K in the first and last
 *     eighth of the layers and every third layer between ("more bits");
 *   - a row length that is not a multiple of the 256-element K super-block
 *     falls back to a 32-element format of similar size (Q4_K -> Q5_0,
 *     Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> IQ4_NL, IQ4_XS -> IQ4_NL).
 */
#include "model/model.h"

#include <ctype.h>
#include <pthread.h>

/* A mix is named after its base type's trait name, lower case, with "_m"
 * where attn_v / ffn_down get more bits (q4_k_m): the names are not written
 * a second time here. */
typedef struct mix_desc {
    uint32_t base;      /* type of most weight matrices */
    uint32_t output;    /* type of the output matrix */
    bool more_bits;     /* attn_v / ffn_down promoted in chosen layers */
    uint32_t file_type; /* general.file_type (the reference engine's ftype numbers) */
} mix_desc;

static const mix_desc mixes[] = {
    {GGUF_TYPE_F32, GGUF_TYPE_F32, false, 0},     {GGUF_TYPE_F16, GGUF_TYPE_F16, false, 1},
    {GGUF_TYPE_BF16, GGUF_TYPE_BF16, false, 32},  {GGUF_TYPE_Q8_0, GGUF_TYPE_Q8_0, false, 7},
    {GGUF_TYPE_Q4_0, GGUF_TYPE_Q6_K, false, 2},   {GGUF_TYPE_Q4_1, GGUF_TYPE_Q6_K, false, 3},
    {GGUF_TYPE_Q5_0, GGUF_TYPE_Q6_K, false, 8},   {GGUF_TYPE_Q5_1, GGUF_TYPE_Q6_K, false, 9},
    {GGUF_TYPE_Q2_K, GGUF_TYPE_Q6_K, false, 10},  {GGUF_TYPE_Q3_K, GGUF_TYPE_Q6_K, false, 11},
    {GGUF_TYPE_Q4_K, GGUF_TYPE_Q6_K, false, 14},  {GGUF_TYPE_Q4_K, GGUF_TYPE_Q6_K, true, 15},
    {GGUF_TYPE_Q5_K, GGUF_TYPE_Q6_K, false, 16},  {GGUF_TYPE_Q5_K, GGUF_TYPE_Q6_K, true, 17},
    {GGUF_TYPE_Q6_K, GGUF_TYPE_Q6_K, false, 18},  {GGUF_TYPE_IQ4_NL, GGUF_TYPE_Q6_K, false, 25},
    {GGUF_TYPE_IQ4_XS, GGUF_TYPE_Q6_K, false, 30},
};

#define MIX_COUNT    LARES_ARRAY_LEN(mixes)
#define MIX_NAME_MAX 16

static char mix_names[MIX_COUNT][MIX_NAME_MAX];
static char all_names[MIX_COUNT * MIX_NAME_MAX];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void make_names(void) {
    size_t at = 0;
    for (size_t i = 0; i < MIX_COUNT; i++) {
        const quant_traits *t = quant_traits_of(mixes[i].base);
        char *n = mix_names[i];
        snprintf(n, MIX_NAME_MAX, "%s%s", t != NULL ? t->name : "?",
                 mixes[i].more_bits ? "_m" : "");
        for (char *c = n; *c; c++) {
            *c = (char)tolower((unsigned char)*c);
        }
        at += (size_t)snprintf(all_names + at, sizeof all_names - at, "%s%s", i ? " " : "", n);
    }
}

const char *model_mix_names(void) {
    pthread_once(&names_once, make_names);
    return all_names;
}

int model_mix_find(const char *name) {
    pthread_once(&names_once, make_names);
    char low[16];
    size_t n = strlen(name);
    if (n == 0 || n >= sizeof low) {
        return -1;
    }
    for (size_t i = 0; i <= n; i++) {
        low[i] = (char)tolower((unsigned char)name[i]);
    }
    for (size_t i = 0; i < LARES_ARRAY_LEN(mixes); i++) {
        if (strcmp(mix_names[i], low) == 0) {
            return (int)i;
        }
    }
    return -1;
}

uint32_t model_mix_file_type(int mix) {
    return mixes[mix].file_type;
}

const char *model_mix_name(int mix) {
    pthread_once(&names_once, make_names);
    return mix_names[mix];
}

int model_mix_by_file_type(uint32_t file_type) {
    for (size_t i = 0; i < LARES_ARRAY_LEN(mixes); i++) {
        if (mixes[i].file_type == file_type) {
            return (int)i;
        }
    }
    return -1;
}

/* the reference engine's choice of layers that get more bits */
static bool more_bits(int32_t layer, int32_t n_layer) {
    return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

static uint32_t fallback(uint32_t type, int64_t row) {
    const gguf_type_info *ti = gguf_type_info_of(type);
    if (ti == NULL || row % ti->blck_elems == 0) {
        return type;
    }
    switch (type) {
    case GGUF_TYPE_Q4_K:
        return GGUF_TYPE_Q5_0;
    case GGUF_TYPE_Q5_K:
        return GGUF_TYPE_Q5_1;
    case GGUF_TYPE_Q6_K:
        return GGUF_TYPE_Q8_0;
    case GGUF_TYPE_Q2_K:
    case GGUF_TYPE_Q3_K:
    case GGUF_TYPE_IQ4_XS:
        return GGUF_TYPE_IQ4_NL;
    default:
        /* 32-element formats: rows that are not a multiple of 32 stay exact */
        return row % 32 == 0 ? type : GGUF_TYPE_F16;
    }
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

uint32_t model_mix_type(int mix, const char *name, uint32_t n_dims, int64_t row, bool tied,
                        int32_t n_layer) {
    const mix_desc *d = &mixes[mix];
    if (n_dims < 2 || strstr(name, "ffn_gate_inp") != NULL || strstr(name, "_norm") != NULL ||
        ends_with(name, ".bias")) {
        return GGUF_TYPE_F32;
    }
    uint32_t t = d->base;
    if (strcmp(name, "output.weight") == 0 || (tied && strcmp(name, "token_embd.weight") == 0)) {
        t = d->output;
    } else if (d->more_bits && (strstr(name, "attn_v.weight") != NULL ||
                                strstr(name, "ffn_down") != NULL)) {
        int32_t layer = -1;
        if (sscanf(name, "blk.%d.", &layer) == 1 && layer >= 0 && more_bits(layer, n_layer)) {
            t = GGUF_TYPE_Q6_K;
        }
    }
    return fallback(t, row);
}
