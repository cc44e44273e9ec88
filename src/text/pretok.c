/*
 * Pre-tokenizers of byte-level BPE vocabularies: the regular expressions that
 * cut text into words before merging, selected by tokenizer.ggml.pre.
 *
 * The regex lists are those of the Hugging Face tokenizer.json files, as the
 * reference engine collects them (llama-vocab.cpp, llm_tokenizer_bpe). Each
 * expression of a list splits every piece the previous one left, keeping both
 * the matches and the text between them (HF's Split with "Isolated"
 * behaviour); the search of one piece never sees past its end. Matching is
 * PCRE2 in UTF mode with Unicode properties (PCRE2_UCP), so \p{L}, \p{N} and
 * \s have their Unicode meaning as in HF's engines. Two choices follow the
 * reference engine rather than HF: case-insensitive contractions are spelled
 * '[sS] ('s, 'S; not U+017F), and `$` matches only at the very end.
 *
 * A compiled pre-tokenizer is read-only and shared; the match data of one call
 * lives in the call's text_work.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/text_impl.h"

#include <pcre2.h>

#define MAX_REGEX 8

/* ---- the expressions (facts from the tokenizers' tokenizer.json) ---- */

#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

/* openai/gpt-2 encoder.py */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* Llama 3 (tiktoken cl100k_base) */
#define RE_LLAMA3                                                                                  \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"      \
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Qwen2: like Llama 3 with single digits */
#define RE_QWEN2                                                                                   \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"           \
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* GPT-4o (tiktoken o200k_base) */
#define RE_GPT4O                                                                                   \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"     \
    "+" CONTRACTIONS "?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"               \
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" CONTRACTIONS "?|\\p{N}{1,3}|"                                 \
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Mistral tekken */
#define RE_TEKKEN                                                                                  \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"   \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"   \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* CJK runs of DeepSeek LLM/Coder: U+4E00-U+9FA5, U+0800-U+4E00, U+AC00-U+D7FF */
#define RE_DEEPSEEK_CJK "[\\x{4e00}-\\x{9fa5}\\x{800}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+"
#define RE_BLOOM        " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{ff0c}\\x{3001}\\x{964}\\x{6d4}\\x{60c})]+"

static const char *const re_default[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]", NULL,
};
static const char *const re_gpt2[] = {RE_GPT2, NULL};
static const char *const re_llama3[] = {RE_LLAMA3, NULL};
static const char *const re_jais2[] = {
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                 "\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|"
                 "\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}",
    NULL,
};
static const char *const re_qwen2[] = {RE_QWEN2, NULL};
static const char *const re_qwen35[] = {
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+"
                 "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};
static const char *const re_deepseek_llm[] = {
    "[\\r\\n]",
    "\\s?[A-Za-z\\x{b5}\\x{c0}-\\x{d6}\\x{d8}-\\x{f6}\\x{f8}-\\x{1ba}\\x{1bc}-\\x{1bf}\\x{1c4}-"
    "\\x{293}\\x{295}-\\x{2af}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37b}-\\x{37d}\\x{37f}\\x{386}"
    "\\x{388}-\\x{38a}\\x{38c}\\x{38e}-\\x{3a1}\\x{3a3}-\\x{3f5}\\x{3f7}-\\x{481}\\x{48a}-\\x{52f}"
    "\\x{531}-\\x{556}\\x{10a0}-\\x{10c5}\\x{13a0}-\\x{13f5}\\x{13f8}-\\x{13fd}\\x{1c90}-\\x{1cba}"
    "\\x{1cbd}-\\x{1cbf}\\x{1d00}-\\x{1d2b}\\x{1d6b}-\\x{1d77}\\x{1d79}-\\x{1d9a}\\x{1e00}-"
    "\\x{1f15}\\x{1f18}-\\x{1f1d}\\x{1f20}-\\x{1f45}\\x{1f48}-\\x{1f4d}\\x{1f50}-\\x{1f57}\\x{1f59}"
    "\\x{1f5b}\\x{1f5d}\\x{1f5f}-\\x{1f7d}\\x{1f80}-\\x{1fb4}\\x{1fb6}-\\x{1fbc}\\x{1fbe}\\x{1fc2}-"
    "\\x{1fc4}\\x{1fc6}-\\x{1fcc}\\x{1fd0}-\\x{1fd3}\\x{1fd6}-\\x{1fdb}\\x{1fe0}-\\x{1fec}\\x{1ff2}"
    "-"
    "\\x{1ff4}\\x{1ff6}-\\x{1ffc}\\x{2102}\\x{2107}\\x{210a}-\\x{2113}\\x{2115}\\x{2119}-\\x{211d}"
    "\\x{2124}\\x{2126}\\x{2128}\\x{212a}-\\x{212d}\\x{212f}-\\x{2134}\\x{2139}\\x{213c}-\\x{213f}"
    "\\x{2145}-\\x{2149}\\x{214e}\\x{2183}\\x{2184}\\x{2c00}-\\x{2c7b}\\x{2c7e}-\\x{2ce4}\\x{2ceb}-"
    "\\x{2cee}\\x{2cf2}\\x{2cf3}\\x{a640}-\\x{a66d}\\x{a680}-\\x{a69b}\\x{a722}-\\x{a76f}\\x{a771}-"
    "\\x{a787}\\x{a78b}-\\x{a78e}\\x{ab70}-\\x{abbf}\\x{fb00}-\\x{fb06}\\x{fb13}-\\x{fb17}\\x{ff21}"
    "-"
    "\\x{ff3a}\\x{ff41}-\\x{ff5a}\\x{10400}-\\x{1044f}\\x{104b0}-\\x{104d3}\\x{104d8}-\\x{104fb}"
    "\\x{10c80}-\\x{10cb2}\\x{10cc0}-\\x{10cf2}\\x{118a0}-\\x{118df}\\x{1e900}-\\x{1e943}]+",
    "\\s?[!-/:-~\\x{ff01}-\\x{ff0f}\\x{ff1a}-\\x{ff5e}\\x{2018}-\\x{201f}\\x{3000}-\\x{3002}]+",
    "\\s+$",
    RE_DEEPSEEK_CJK,
    "\\p{N}+",
    NULL,
};
static const char *const re_deepseek_coder[] = {
    "[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_DEEPSEEK_CJK, "\\p{N}", NULL,
};
static const char *const re_deepseek_v3[] = {
    "\\p{N}{1,3}",
    "[\\x{4e00}-\\x{9fa5}\\x{3040}-\\x{309f}\\x{30a0}-\\x{30ff}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?"
    "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};
static const char *const re_falcon[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    RE_GPT2,
    "[0-9][0-9][0-9]",
    NULL,
};
static const char *const re_starcoder[] = {"\\p{N}", RE_GPT2, NULL};
static const char *const re_bloom[] = {RE_BLOOM, NULL};
static const char *const re_viking[] = {RE_BLOOM, "\\p{N}", NULL};
static const char *const re_gpt4o[] = {RE_GPT4O, NULL};
static const char *const re_granite_multi[] = {
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
    "+" CONTRACTIONS "?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" CONTRACTIONS "?|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};
static const char *const re_tiny_aya[] = {"\\d{1,3}(?=(?:\\d{3})*\\b)", RE_GPT4O, NULL};
static const char *const re_tekken[] = {RE_TEKKEN, NULL};
static const char *const re_chameleon[] = {
    "<sentinel:[0-9]+>",
    "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
    "([\\t\\n]|    |  )",
    "\\p{N}",
    "[\\p{P}!-/:-@\\[-`{-~]",
    RE_GPT2,
    NULL,
};
static const char *const re_seed_coder[] = {
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|"
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};
static const char *const re_bailing[] = {
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL,
};
static const char *const re_exaone_moe[] = {
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}|"
                 " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL,
};
static const char *const re_minicpm5[] = {
    "\\p{N}{1,3}",
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};

typedef struct family {
    const char *const *names; /* tokenizer.ggml.pre values */
    const char *const *regex;
    bool ignore_merges; /* a word that is a token is not merged */
    bool add_bos;       /* the reference engine's default */
} family;

#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})

static const family families[] = {
    {NAMES("default"), re_default, false, false},
    {NAMES("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
           "a.x-4.0", "mellum", "modern-bert", "exaone4", "mpt", "olmo", "jais", "trillion",
           "granite-docling", "jina-v1-en", "jina-v2-code", "roberta-bpe"),
     re_gpt2, false, false},
    {NAMES("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
           "jina-v5-nano"),
     re_llama3, true, true},
    {NAMES("dbrx", "smaug-bpe", "glm4", "chatglm-bpe"), re_llama3, false, false},
    {NAMES("jais-2"), re_jais2, false, false},
    {NAMES("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
           "solar-open", "grok-2"),
     re_qwen2, false, false},
    {NAMES("qwen35"), re_qwen35, false, false},
    {NAMES("deepseek-llm"), re_deepseek_llm, false, false},
    {NAMES("deepseek-coder"), re_deepseek_coder, false, false},
    {NAMES("deepseek-v3", "hunyuan-dense", "joyai-llm"), re_deepseek_v3, false, false},
    {NAMES("falcon"), re_falcon, false, false},
    {NAMES("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
           "mellum2"),
     re_starcoder, false, false},
    {NAMES("poro-chat", "bloom", "gpt3-finnish"), re_bloom, false, false},
    {NAMES("viking"), re_viking, false, false},
    {NAMES("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), re_gpt4o, false, false},
    {NAMES("granite-embed-multi-97m"), re_granite_multi, true, false},
    {NAMES("tiny_aya", "cohere2moe"), re_tiny_aya, false, false},
    {NAMES("tekken"), re_tekken, true, true},
    {NAMES("chameleon"), re_chameleon, false, true},
    {NAMES("seed-coder"), re_seed_coder, false, false},
    {NAMES("bailingmoe", "bailingmoe2", "llada-moe"), re_bailing, false, false},
    {NAMES("exaone-moe"), re_exaone_moe, false, false},
    {NAMES("minicpm5"), re_minicpm5, true, false},
};

struct text_pretok {
    const family *fam;
    const char *name; /* the family's spelling of the name */
    size_t n;
    pcre2_code *re[MAX_REGEX]; /* owned */
    pcre2_general_context *gctx;
};

struct text_regex_work {
    pcre2_general_context *gctx;
    pcre2_match_context *mctx;
    pcre2_match_data *md;
    pcre2_jit_stack *jit_stack;
};

/* PCRE2's own allocations go through the allocation gate too. */
static void *rx_alloc(PCRE2_SIZE n, void *user) {
    (void)user;
    return lares_alloc(n);
}

static void rx_free(void *p, void *user) {
    (void)user;
    lares_free(p);
}

static const family *find_family(const char *name, size_t n, const char **spelled) {
    for (size_t i = 0; i < LARES_ARRAY_LEN(families); i++) {
        for (const char *const *s = families[i].names; *s != NULL; s++) {
            if (strlen(*s) == n && memcmp(*s, name, n) == 0) {
                *spelled = *s;
                return &families[i];
            }
        }
    }
    return NULL;
}

lares_status text_pretok_create(const char *name, size_t name_len, text_pretok **out,
                                lares_error *err) {
    if (name == NULL || name_len == 0) {
        name = "default";
        name_len = strlen(name);
    }
    const char *spelled = NULL;
    const family *fam = find_family(name, name_len, &spelled);
    if (fam == NULL) {
        return lares_fail(err, LARES_EUNSUPPORTED,
                          "tokenizer.ggml.pre '%.*s' is not a pre-tokenizer lares knows",
                          (int)LARES_MIN(name_len, 64), name);
    }
    pcre2_general_context *gctx = pcre2_general_context_create(rx_alloc, rx_free, NULL);
    text_pretok *p = lares_calloc(1, sizeof *p);
    pcre2_compile_context *cctx = gctx ? pcre2_compile_context_create(gctx) : NULL;
    if (gctx == NULL || p == NULL || cctx == NULL) {
        pcre2_compile_context_free(cctx);
        pcre2_general_context_free(gctx);
        lares_free(p);
        return lares_fail(err, LARES_ENOMEM, "pre-tokenizer '%s': no memory", spelled);
    }
    p->fam = fam;
    p->name = spelled;
    p->gctx = gctx;
    lares_status st = LARES_OK;
    for (size_t i = 0; fam->regex[i] != NULL; i++) {
        int code;
        PCRE2_SIZE at;
        pcre2_code *re =
            pcre2_compile((PCRE2_SPTR)fam->regex[i], PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &code, &at, cctx);
        if (re == NULL) {
            PCRE2_UCHAR msg[120];
            pcre2_get_error_message(code, msg, sizeof msg);
            st = lares_fail(err, code == PCRE2_ERROR_NOMEMORY ? LARES_ENOMEM : LARES_EUNSUPPORTED,
                            "pre-tokenizer '%s': regex %zu does not compile at offset %zu: %s",
                            spelled, i, (size_t)at, (const char *)msg);
            break;
        }
        p->re[p->n++] = re;
        /* without JIT (a platform PCRE2 has none for) matching is interpreted */
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    }
    pcre2_compile_context_free(cctx);
    if (st != LARES_OK) {
        text_pretok_free(p);
        return st;
    }
    *out = p;
    return LARES_OK;
}

void text_pretok_free(text_pretok *p) {
    if (p == NULL) {
        return;
    }
    for (size_t i = 0; i < p->n; i++) {
        pcre2_code_free(p->re[i]);
    }
    pcre2_general_context_free(p->gctx);
    lares_free(p);
}

const char *text_pretok_name(const text_pretok *p) {
    return p->name;
}

bool text_pretok_ignore_merges(const text_pretok *p) {
    return p->fam->ignore_merges;
}

bool text_pretok_add_bos_default(const text_pretok *p) {
    return p->fam->add_bos;
}

void text_regex_work_free(struct text_regex_work *rx) {
    if (rx == NULL) {
        return;
    }
    pcre2_match_data_free(rx->md);
    pcre2_jit_stack_free(rx->jit_stack);
    pcre2_match_context_free(rx->mctx);
    pcre2_general_context_free(rx->gctx);
    lares_free(rx);
}

static lares_status regex_work(text_work *w, lares_error *err) {
    if (w->rx != NULL) {
        return LARES_OK;
    }
    struct text_regex_work *rx = lares_calloc(1, sizeof *rx);
    if (rx == NULL) {
        goto oom;
    }
    w->rx = rx;
    rx->gctx = pcre2_general_context_create(rx_alloc, rx_free, NULL);
    if (rx->gctx == NULL) {
        goto oom;
    }
    rx->mctx = pcre2_match_context_create(rx->gctx);
    rx->md = pcre2_match_data_create(1, rx->gctx);
    /* JIT matching of long words needs more than the default 32 KiB stack */
    rx->jit_stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, rx->gctx);
    if (rx->mctx == NULL || rx->md == NULL) {
        goto oom;
    }
    if (rx->jit_stack != NULL) {
        pcre2_jit_stack_assign(rx->mctx, NULL, rx->jit_stack);
    }
    return LARES_OK;
oom:
    return lares_fail(err, LARES_ENOMEM, "text: no memory for regex matching");
}

static bool push_span(text_work *w, size_t off, size_t len) {
    if (!lares_grow((void **)&w->spans2, &w->cap_spans2, w->n_spans2 + 1, sizeof *w->spans2)) {
        return false;
    }
    w->spans2[w->n_spans2++] = (text_span){off, len};
    return true;
}

/* Cuts one piece at the matches of re: matches and the gaps between them. */
static lares_status split_span(const text_pretok *p, size_t ri, const char *s, text_span sp,
                               text_work *w, lares_error *err) {
    const pcre2_code *re = p->re[ri];
    PCRE2_SPTR subject = (PCRE2_SPTR)(s + sp.off);
    size_t start = 0, prev = 0;
    while (start < sp.len) {
        int rc =
            pcre2_match(re, subject, sp.len, start, PCRE2_NO_UTF_CHECK, w->rx->md, w->rx->mctx);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
            rc = pcre2_match(re, subject, sp.len, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                             w->rx->md, w->rx->mctx);
        }
        if (rc == PCRE2_ERROR_NOMATCH) {
            break;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[120];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return lares_fail(err, rc == PCRE2_ERROR_NOMEMORY ? LARES_ENOMEM : LARES_ERANGE,
                              "pre-tokenizer '%s': regex %zu failed on a %zu-byte piece: %s",
                              p->name, ri, sp.len, (const char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->rx->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) {
            /* an empty match makes no piece; look again one character on */
            size_t step = LARES_MIN(text_utf8_lead_len(subject[ms]), sp.len - ms);
            start = ms + (step ? step : 1);
            continue;
        }
        if ((ms > prev && !push_span(w, sp.off + prev, ms - prev)) ||
            !push_span(w, sp.off + ms, me - ms)) {
            return lares_fail(err, LARES_ENOMEM, "text: no memory for pre-tokenized words");
        }
        prev = start = me;
    }
    if (prev < sp.len && !push_span(w, sp.off + prev, sp.len - prev)) {
        return lares_fail(err, LARES_ENOMEM, "text: no memory for pre-tokenized words");
    }
    return LARES_OK;
}

lares_status text_pretok_split(const text_pretok *p, const char *s, size_t len, text_work *w,
                               lares_error *err) {
    lares_status st = regex_work(w, err);
    if (st != LARES_OK) {
        return st;
    }
    w->n_spans = 0;
    if (len == 0) {
        return LARES_OK;
    }
    if (!lares_grow((void **)&w->spans, &w->cap_spans, 1, sizeof *w->spans)) {
        return lares_fail(err, LARES_ENOMEM, "text: no memory for pre-tokenized words");
    }
    w->spans[0] = (text_span){0, len};
    w->n_spans = 1;
    for (size_t ri = 0; ri < p->n; ri++) {
        w->n_spans2 = 0;
        for (size_t i = 0; i < w->n_spans; i++) {
            if ((st = split_span(p, ri, s, w->spans[i], w, err)) != LARES_OK) {
                return st;
            }
        }
        text_span *t = w->spans;
        size_t tc = w->cap_spans;
        w->spans = w->spans2;
        w->cap_spans = w->cap_spans2;
        w->n_spans = w->n_spans2;
        w->spans2 = t;
        w->cap_spans2 = tc;
    }
    return LARES_OK;
}
