/* text: tokenizers against the reference vectors and real models, pieces and
 * the UTF-8 stream assembler, special tokens, and bad vocabularies. */
#include "check.h"
#include "vocab_fixture.h"
#include "text/text.h"
#include "text/text_impl.h" /* to switch the per-word SPM shortcut off */

#include <jansson.h>
#include <stdint.h>
#include <unistd.h>

/* ---- helpers ---- */

static bool ids_eq(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static void print_ids(const char *tag, const int32_t *a, size_t n) {
    fprintf(stderr, "  %s:", tag);
    for (size_t i = 0; i < n; i++) {
        fprintf(stderr, " %d", a[i]);
    }
    fputc('\n', stderr);
}

/* Tokenizes a C string; returns the count, ids in *out (caller frees). */
static size_t tok(const text_vocab *v, const char *s, size_t len, bool add_special,
                  bool parse_special, int32_t **out) {
    lares_error err = {0};
    size_t n = 0;
    *out = NULL;
    CHECK_OK(text_tokenize(v, s, len, add_special, parse_special, out, &n, &err), &err);
    return n;
}

/* Concatenates the pieces of ids into a malloc'd buffer (length in *len). */
static char *pieces(const text_vocab *v, const int32_t *ids, size_t n, bool special, size_t *len) {
    size_t cap = 64, used = 0;
    char *s = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        char buf[256];
        int32_t k = text_token_piece(v, ids[i], special, buf, sizeof buf);
        CHECK(k >= 0 && (size_t)k <= sizeof buf);
        if (k < 0 || (size_t)k > sizeof buf) {
            continue;
        }
        while (used + (size_t)k + 1 > cap) {
            cap *= 2;
            s = realloc(s, cap);
        }
        memcpy(s + used, buf, (size_t)k);
        used += (size_t)k;
    }
    s[used] = '\0';
    *len = used;
    return s;
}

/* ---- the reference vectors: <vocab>.inp / <vocab>.out ---- */

#define SEP "\n__ggml_vocab_test__\n"

typedef struct vec_result {
    int pass, total;
} vec_result;

/* Every test string of the file pair, tokenized without BOS/EOS and without
 * parsing specials (as llama.cpp's tests/test-tokenizer-0 reads them: strings
 * split at SEP, one line of ids per string). `space_prefixed`: the pieces
 * give back " " + text (SPM) instead of the text. */
static vec_result vector_file(const char *rel, bool space_prefixed, bool lossless) {
    vec_result r = {0, 0};
    vocab_fx x;
    if (!vocab_open(rel, &x)) {
        return r;
    }
    char inp_rel[512], out_rel[512];
    snprintf(inp_rel, sizeof inp_rel, "%s.inp", rel);
    snprintf(out_rel, sizeof out_rel, "%s.out", rel);
    size_t inp_len = 0, out_len = 0;
    char *inp = slurp(fixture(inp_rel), &inp_len);
    char *outs = slurp(fixture(out_rel), &out_len);
    CHECK(inp != NULL && outs != NULL);
    if (inp == NULL || outs == NULL) {
        free(inp);
        free(outs);
        vocab_close(&x);
        return r;
    }
    char *line = outs;
    size_t pos = 0;
    int index = 0, mismatched_round_trips = 0;
    while (pos < inp_len) {
        const char *next = strstr(inp + pos, SEP);
        size_t slen = next ? (size_t)(next - (inp + pos)) : inp_len - pos;
        const char *s = inp + pos;
        pos = next ? (size_t)(next - inp) + strlen(SEP) : inp_len;

        /* the expected ids: one line */
        CHECKF(line != NULL && *line != '\0', "%s: .out has fewer lines than .inp", rel);
        if (line == NULL || *line == '\0') {
            break;
        }
        char *eol = strchr(line, '\n');
        if (eol != NULL) {
            *eol = '\0';
        }
        int32_t want[4096];
        size_t nw = 0;
        for (char *p = line; *p;) {
            char *end;
            long id = strtol(p, &end, 10);
            if (end == p) {
                p++;
                continue;
            }
            if (nw < 4096) {
                want[nw++] = (int32_t)id;
            }
            p = end;
        }
        line = eol ? eol + 1 : NULL;

        int32_t *got = NULL;
        size_t ng = tok(x.v, s, slen, false, false, &got);
        r.total++;
        if (ids_eq(got, ng, want, nw)) {
            r.pass++;
        } else {
            fprintf(stderr, "%s: string %d ('%.*s') differs\n", rel, index, (int)slen, s);
            print_ids("want", want, nw);
            print_ids("got ", got, ng);
        }
        if (lossless) {
            /* pieces of the expected ids give the text back */
            size_t plen;
            char *back = pieces(x.v, want, nw, false, &plen);
            bool ok;
            if (space_prefixed && slen > 0) {
                ok = plen == slen + 1 && back[0] == ' ' && memcmp(back + 1, s, slen) == 0;
            } else {
                ok = plen == slen && memcmp(back, s, slen) == 0;
            }
            if (!ok) {
                mismatched_round_trips++;
                fprintf(stderr, "%s: string %d: pieces give '%s'\n", rel, index, back);
            }
            free(back);
        }
        lares_free(got);
        index++;
    }
    CHECKF(line == NULL || *line == '\0', "%s: .out has more lines than .inp", rel);
    CHECKF(r.pass == r.total && r.total > 0, "%s: %d of %d strings match", rel, r.pass, r.total);
    CHECKF(mismatched_round_trips == 0, "%s: %d strings do not round-trip through pieces", rel,
           mismatched_round_trips);
    printf("  %-60s %2d/%2d strings\n", rel, r.pass, r.total);
    free(inp);
    free(outs);
    vocab_close(&x);
    return r;
}

static void test_spm_vectors(void) {
    vector_file("vocab/ggml-vocab-llama-spm.gguf", true, true);
    vector_file("vocab/ggml-vocab-phi-3.gguf", true, true);
}

static void test_bpe_vectors(void) {
    static const char *const files[] = {
        "vocab/ggml-vocab-gpt-2.gguf",
        "vocab/ggml-vocab-deepseek-coder.gguf",
        "vocab/ggml-vocab-deepseek-llm.gguf",
        "vocab/ggml-vocab-falcon.gguf",
        "vocab/ggml-vocab-mpt.gguf",
        "vocab/ggml-vocab-refact.gguf",
        "vocab/ggml-vocab-starcoder.gguf",
        "derived/ggml-vocab-llama-bpe.from-npm-llama3.gguf",
        "derived/ggml-vocab-qwen2.from-npm-qwen3.gguf",
    };
    for (size_t i = 0; i < LARES_ARRAY_LEN(files); i++) {
        vector_file(files[i], false, true);
    }
}

static void test_wpm_vectors(void) {
    /* WordPiece lowercases and strips accents: no round trip */
    vector_file("vocab/ggml-vocab-bert-bge.gguf", false, false);
}

/* ---- real models: the prompt ids and the greedy continuation's text ---- */

static bool fixture_exists(const char *rel) {
    const char *dir = getenv("LARES_MODELS_DIR");
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir != NULL && dir[0] ? dir : LARES_MODELS_DIR, rel);
    return access(p, R_OK) == 0;
}

static void test_expected_json(void) {
    json_error_t jerr;
    json_t *root = json_load_file(fixture("expected/greedy_once_upon_a_time.json"), 0, &jerr);
    CHECKF(root != NULL, "greedy_once_upon_a_time.json: %s", jerr.text);
    if (root == NULL) {
        return;
    }
    json_t *results = json_object_get(root, "results");
    CHECK(json_is_array(results) && json_array_size(results) > 0);
    size_t i;
    json_t *r;
    int n_models = 0;
    json_array_foreach(results, i, r) {
        const char *model = json_string_value(json_object_get(r, "model"));
        const char *prompt = json_string_value(json_object_get(r, "prompt"));
        const char *text = json_string_value(json_object_get(r, "reference_text"));
        json_t *want = json_object_get(r, "prompt_token_ids_with_bos");
        json_t *gen = json_object_get(r, "reference_greedy_token_ids");
        CHECK(model != NULL && prompt != NULL && text != NULL && json_is_array(want) &&
              json_is_array(gen));
        if (model == NULL || prompt == NULL || text == NULL || !json_is_array(want) ||
            !json_is_array(gen)) {
            continue;
        }
        /* the list names derived files too, and one that is not shipped: the
         * two real models must be there (fixture() fails otherwise) */
        char rel[256];
        if (!fixture_exists(model)) {
            snprintf(rel, sizeof rel, "derived/%s", model);
            if (!fixture_exists(rel)) {
                CHECK(strcmp(model, "stories260K.gguf") != 0 &&
                      strcmp(model, "TinyStories-656K.f16.gguf") != 0);
                printf("  (%s is not among the fixtures: skipped)\n", model);
                continue;
            }
            model = rel;
        }
        vocab_fx x;
        if (!vocab_open(model, &x)) {
            continue;
        }
        n_models++;
        int32_t *ids = NULL;
        size_t n = tok(x.v, prompt, strlen(prompt), true, false, &ids);
        int32_t w[64];
        size_t nw = json_array_size(want);
        CHECK(nw <= 64);
        for (size_t k = 0; k < nw && k < 64; k++) {
            w[k] = (int32_t)json_integer_value(json_array_get(want, k));
        }
        CHECKF(ids_eq(ids, n, w, nw), "%s: '%s' tokenized differently", model, prompt);
        if (!ids_eq(ids, n, w, nw)) {
            print_ids("want", w, nw);
            print_ids("got ", ids, n);
        }
        lares_free(ids);

        /* the greedy continuation's pieces, through the stream, give the text */
        text_stream ts;
        text_stream_init(&ts);
        char out[4096];
        size_t used = 0;
        for (size_t k = 0; k < json_array_size(gen); k++) {
            char piece[256];
            int32_t id = (int32_t)json_integer_value(json_array_get(gen, k));
            int32_t pl = text_token_piece(x.v, id, false, piece, sizeof piece);
            CHECK(pl >= 0 && (size_t)pl <= sizeof piece);
            if (pl > 0 && used + TEXT_STREAM_OUT_MAX(pl) < sizeof out) {
                used += text_stream_push(&ts, piece, (size_t)pl, out + used, sizeof out - used);
            }
        }
        used += text_stream_flush(&ts, out + used, sizeof out - used);
        CHECKF(used == strlen(text) && memcmp(out, text, used) == 0,
               "%s: continuation detokenizes to '%.*s'", model, (int)used, out);
        vocab_close(&x);
    }
    CHECK(n_models >= 3);
    printf("  expected/greedy_once_upon_a_time.json: %d models\n", n_models);
    json_decref(root);
}

static void test_models(void) {
    vocab_fx x;
    if (vocab_open("stories260K.gguf", &x)) {
        int32_t *ids = NULL;
        const char *s = "Once upon a time";
        size_t n = tok(x.v, s, strlen(s), true, false, &ids);
        const int32_t want[] = {1, 403, 407, 261, 378};
        CHECK(ids_eq(ids, n, want, 5));
        lares_free(ids);
        CHECK(text_vocab_kind_of(x.v) == TEXT_VOCAB_SPM);
        CHECK(text_vocab_n(x.v) == 512);
        CHECK(text_vocab_bos(x.v) == 1 && text_vocab_eos(x.v) == 2);
        CHECK(text_vocab_add_bos(x.v) && !text_vocab_add_eos(x.v));
        CHECK(text_token_is_eog(x.v, 2) && !text_token_is_eog(x.v, 1));
        CHECK(!text_token_is_eog(x.v, -1) && !text_token_is_eog(x.v, 512));
        CHECK(text_token_type_of(x.v, 0) == TEXT_TOKEN_UNKNOWN);
        CHECK(text_token_type_of(x.v, 1) == TEXT_TOKEN_CONTROL);
        CHECK(text_token_type_of(x.v, 3) == TEXT_TOKEN_BYTE);
        gguf_str t = text_token_text(x.v, 1);
        CHECK(t.len == 3 && memcmp(t.ptr, "<s>", 3) == 0);

        /* empty text: [BOS] with specials, nothing without (SentencePiece's
         * encode('', add_special_tokens=True) == [1]) */
        n = tok(x.v, "", 0, true, false, &ids);
        CHECK(n == 1 && ids != NULL && ids[0] == 1);
        lares_free(ids);
        n = tok(x.v, NULL, 0, false, false, &ids);
        CHECK(n == 0 && ids == NULL);

        /* a character outside a 512-token vocabulary falls back to bytes */
        n = tok(x.v, "\xe2\x82\xac", 3, false, false, &ids); /* euro sign */
        size_t plen;
        char *back = pieces(x.v, ids, n, false, &plen);
        CHECK(plen == 4 && memcmp(back, " \xe2\x82\xac", 4) == 0);
        free(back);
        lares_free(ids);
        vocab_close(&x);
    }
    if (vocab_open("TinyStories-656K.f16.gguf", &x)) {
        int32_t *ids = NULL;
        const char *s = "Once upon a time";
        size_t n = tok(x.v, s, strlen(s), true, false, &ids);
        const int32_t want[] = {1, 80, 147, 201, 282, 57};
        CHECK(ids_eq(ids, n, want, 6));
        lares_free(ids);
        /* no <0xAB> tokens here: bytes fall back to one-byte tokens ("\n" is 3) */
        n = tok(x.v, "\n", 1, false, false, &ids);
        CHECK(n >= 1 && ids != NULL && ids[n - 1] == 3);
        lares_free(ids);
        vocab_close(&x);
    }
}

/* SPM merges each word alone when no token has U+2581 inside (spm.c); the
 * result must equal merging the whole text as one sequence. */
static void test_spm_word_shortcut(void) {
    static const struct {
        const char *file;
        bool shortcut; /* TinyStories-656K has tokens like "a\u2581b" */
    } files[] = {{"vocab/ggml-vocab-llama-spm.gguf", true},
                 {"vocab/ggml-vocab-phi-3.gguf", true},
                 {"stories260K.gguf", true},
                 {"TinyStories-656K.f16.gguf", false}};
    static const char *const words[] = {
        "the",
        "a",
        " ",
        "  ",
        "   ",
        "Hello",
        "world",
        "\n",
        "\t",
        "don't",
        "12345",
        ",",
        ".",
        "caf\xc3\xa9",
        "\xe6\x9d\xb1\xe4\xba\xac",
        "\xf0\x9f\xa6\x99",
        "\xff",
        "<s>",
        "\xe2\x96\x81",
        "__init__",
        "x\xe2\x96\x81y",
    };
    size_t cap = 200000;
    char *text = malloc(cap);
    uint64_t seed = 0x853c49e6748fea9bull;
    size_t n = 0;
    while (n + 16 < cap) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const char *w = words[(seed >> 33) % LARES_ARRAY_LEN(words)];
        memcpy(text + n, w, strlen(w));
        n += strlen(w);
    }
    for (size_t i = 0; i < LARES_ARRAY_LEN(files); i++) {
        vocab_fx x;
        if (!vocab_open(files[i].file, &x)) {
            continue;
        }
        CHECKF(x.v->spm_words_independent == files[i].shortcut, "%s: shortcut %d", files[i].file,
               x.v->spm_words_independent);
        int32_t *a = NULL, *b = NULL;
        size_t na = tok(x.v, text, n, true, true, &a);
        x.v->spm_words_independent = false;
        size_t nb = tok(x.v, text, n, true, true, &b);
        CHECKF(na > 1000 && ids_eq(a, na, b, nb), "%s: %zu tokens by word, %zu whole",
               files[i].file, na, nb);
        lares_free(a);
        lares_free(b);
        vocab_close(&x);
    }
    free(text);
}

/* ---- pieces ---- */

static void test_pieces(void) {
    vocab_fx x;
    if (!vocab_open("vocab/ggml-vocab-llama-spm.gguf", &x)) {
        return;
    }
    const text_vocab *v = x.v;
    char buf[64];
    CHECK(text_token_piece(v, 1, false, buf, sizeof buf) == 0); /* <s>: control */
    CHECK(text_token_piece(v, 1, true, buf, sizeof buf) == 3 && memcmp(buf, "<s>", 3) == 0);
    CHECK(text_token_piece(v, 0, false, buf, sizeof buf) == 0); /* <unk>: unknown */
    CHECK(text_token_piece(v, 0, true, buf, sizeof buf) == 5 && memcmp(buf, "<unk>", 5) == 0);
    CHECK(text_token_piece(v, 3 + 0x41, false, buf, sizeof buf) == 1 && buf[0] == 'A');
    CHECK(text_token_piece(v, 3 + 0xe2, false, buf, sizeof buf) == 1 && buf[0] == '\xe2');
    CHECK(text_token_piece(v, -1, false, buf, sizeof buf) == -1);
    CHECK(text_token_piece(v, text_vocab_n(v), false, buf, sizeof buf) == -1);
    int32_t *ids = NULL;
    size_t n = tok(v, "Hello", 5, false, false, &ids);
    CHECK(n >= 1);
    if (n >= 1) {
        /* "▁Hello" is one token: its piece has the space */
        CHECK(n == 1 && text_token_piece(v, ids[0], false, buf, sizeof buf) == 6 &&
              memcmp(buf, " Hello", 6) == 0);
        /* too small a buffer: the full length comes back, cap bytes are written */
        memset(buf, '#', sizeof buf);
        CHECK(text_token_piece(v, ids[0], false, buf, 3) == 6);
        CHECK(memcmp(buf, " He#", 4) == 0);
        CHECK(text_token_piece(v, ids[0], false, NULL, 0) == 6);
    }
    lares_free(ids);

    /* every normal and byte token: piece == text with U+2581 as a space */
    int bad = 0;
    for (int32_t id = 0; id < text_vocab_n(v); id++) {
        gguf_str t = text_token_text(v, id);
        int32_t k = text_token_piece(v, id, true, buf, sizeof buf);
        if (text_token_type_of(v, id) == TEXT_TOKEN_NORMAL) {
            char want[128];
            size_t w = 0;
            for (size_t i = 0; i < t.len && w < sizeof want; i++) {
                if (i + 3 <= t.len && memcmp(t.ptr + i, "\xe2\x96\x81", 3) == 0) {
                    want[w++] = ' ';
                    i += 2;
                } else {
                    want[w++] = t.ptr[i];
                }
            }
            bad += !(k == (int32_t)w && memcmp(buf, want, w) == 0);
        } else if (text_token_type_of(v, id) == TEXT_TOKEN_BYTE) {
            bad += !(k == 1 && (unsigned char)buf[0] == (unsigned)(id - 3));
        }
    }
    CHECKF(bad == 0, "%d tokens give the wrong piece", bad);
    vocab_close(&x);
}

/* ---- the UTF-8 stream ---- */

/* Strict UTF-8 check written from Unicode table 3-7, independently of the
 * library's scanner. */
static bool valid_utf8(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k;
        unsigned lo = 0x80, hi = 0xbf;
        if (c <= 0x7f) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            k = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            k = 2;
            lo = c == 0xe0 ? 0xa0 : 0x80;
            hi = c == 0xed ? 0x9f : 0xbf;
        } else if (c >= 0xf0 && c <= 0xf4) {
            k = 3;
            lo = c == 0xf0 ? 0x90 : 0x80;
            hi = c == 0xf4 ? 0x8f : 0xbf;
        } else {
            return false;
        }
        if (i + k >= n) {
            return false;
        }
        for (size_t j = 1; j <= k; j++) {
            unsigned b = s[i + j];
            if (b < lo || b > hi) {
                return false;
            }
            lo = 0x80;
            hi = 0xbf;
        }
        i += k + 1;
    }
    return true;
}

/* Streams s cut at the given points (sorted, inside (0, n)) and returns the
 * output in out (cap 1024). */
static size_t stream_cuts(const char *s, size_t n, const size_t *cuts, size_t n_cuts, char *out) {
    text_stream ts;
    text_stream_init(&ts);
    size_t used = 0, from = 0;
    for (size_t c = 0; c <= n_cuts; c++) {
        size_t to = c < n_cuts ? cuts[c] : n;
        size_t k = to - from;
        CHECK(used + TEXT_STREAM_OUT_MAX(k) <= 1024);
        used += text_stream_push(&ts, s + from, k, out + used, 1024 - used);
        from = to;
    }
    used += text_stream_flush(&ts, out + used, 1024 - used);
    return used;
}

static void test_stream(void) {
    static const struct {
        const char *in;
        const char *out;
    } cases[] = {
        {"plain ascii", "plain ascii"},
        {"\xc3\xa4pfel", "\xc3\xa4pfel"},                            /* 2-byte */
        {"\xe2\x82\xac 5", "\xe2\x82\xac 5"},                        /* 3-byte */
        {"\xf0\x9f\xa6\x99.cpp", "\xf0\x9f\xa6\x99.cpp"},            /* 4-byte emoji */
        {"\xf0\x9f\x98\xb6\xe2\x80\x8d\xf0\x9f\x8c\xab\xef\xb8\x8f", /* ZWJ sequence */
         "\xf0\x9f\x98\xb6\xe2\x80\x8d\xf0\x9f\x8c\xab\xef\xb8\x8f"},
        {"a\x80z", "a\xef\xbf\xbdz"},             /* lone continuation */
        {"\xe2\x82z", "\xef\xbf\xbdz"},           /* truncated 3-byte: one subpart */
        {"\xf0\x9f\x98", "\xef\xbf\xbd"},         /* unfinished at the end: flushed */
        {"\xc0\x80", "\xef\xbf\xbd\xef\xbf\xbd"}, /* overlong NUL: two subparts */
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},                 /* surrogate */
        {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* > U+10FFFF */
        {"\xfe\xff", "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xe0\x9f\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* overlong 3-byte */
        {"\xf0\x9f\xa6\xf0\x9f\xa6\x99", "\xef\xbf\xbd\xf0\x9f\xa6\x99"},
    };
    for (size_t c = 0; c < LARES_ARRAY_LEN(cases); c++) {
        const char *s = cases[c].in;
        size_t n = strlen(s), want = strlen(cases[c].out);
        char out[1024];
        /* whole, every single cut, every pair of cuts, and byte by byte */
        size_t got = stream_cuts(s, n, NULL, 0, out);
        CHECKF(got == want && memcmp(out, cases[c].out, want) == 0, "case %zu whole", c);
        for (size_t a = 1; a < n; a++) {
            size_t cuts[1] = {a};
            got = stream_cuts(s, n, cuts, 1, out);
            CHECKF(got == want && memcmp(out, cases[c].out, want) == 0, "case %zu cut %zu", c, a);
            for (size_t b = a + 1; b < n; b++) {
                size_t cuts2[2] = {a, b};
                got = stream_cuts(s, n, cuts2, 2, out);
                CHECKF(got == want && memcmp(out, cases[c].out, want) == 0, "case %zu cuts %zu %zu",
                       c, a, b);
            }
        }
        size_t every[64];
        for (size_t a = 1; a < n; a++) {
            every[a - 1] = a;
        }
        got = stream_cuts(s, n, every, n ? n - 1 : 0, out);
        CHECKF(got == want && memcmp(out, cases[c].out, want) == 0, "case %zu bytewise", c);
    }

    /* random bytes, random cuts: always valid UTF-8, and the same whatever the cuts */
    uint64_t seed = 0x2545f4914f6cdd1dull;
    int n_invalid_inputs = 0;
    for (int iter = 0; iter < 3000; iter++) {
        unsigned char s[48];
        size_t n = 1 + iter % 47;
        for (size_t i = 0; i < n; i++) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            /* mostly UTF-8-ish bytes so that sequences sometimes complete */
            unsigned r = (unsigned)(seed >> 32);
            static const unsigned char pool[] = {'a',  ' ',  0xc3, 0xa4, 0xe2, 0x82, 0xac,
                                                 0xf0, 0x9f, 0xa6, 0x99, 0x80, 0xbf, 0xed,
                                                 0xa0, 0xf4, 0x90, 0xc0, 0xff, 0xe0};
            s[i] = (r & 0x100) ? pool[r % sizeof pool] : (unsigned char)r;
        }
        n_invalid_inputs += !valid_utf8(s, n);
        char whole[1024], cut[1024];
        size_t nw = stream_cuts((const char *)s, n, NULL, 0, whole);
        CHECK(valid_utf8((const unsigned char *)whole, nw));
        if (valid_utf8(s, n)) {
            CHECK(nw == n && memcmp(whole, s, n) == 0);
        }
        size_t cuts[8], nc = 0;
        for (size_t i = 1; i < n && nc < 8; i++) {
            if ((seed >> (i % 60)) & 1) {
                cuts[nc++] = i;
            }
        }
        size_t ncut = stream_cuts((const char *)s, n, cuts, nc, cut);
        CHECK(ncut == nw && memcmp(cut, whole, nw) == 0);
    }
    CHECK(n_invalid_inputs > 1000 && n_invalid_inputs < 3000); /* the inputs have spread */

    /* a buffer too small drops output, never overruns */
    text_stream ts;
    text_stream_init(&ts);
    char small[8];
    memset(small, '#', sizeof small);
    size_t k = text_stream_push(&ts, "\x80\x80\x80", 3, small, 4);
    CHECK(k == 3 && small[4] == '#');
}

/* ---- special tokens ---- */

static void test_parse_special(void) {
    vocab_fx x;
    if (vocab_open("vocab/ggml-vocab-llama-spm.gguf", &x)) {
        int32_t *a = NULL, *b = NULL, *c = NULL;
        size_t na = tok(x.v, "<s>Hello", 8, false, true, &a);
        size_t nb = tok(x.v, "Hello", 5, false, false, &b);
        size_t nc = tok(x.v, "<s>Hello", 8, false, false, &c);
        /* parsed: <s>, then "Hello" with its space prefix (it follows a special) */
        CHECK(na == nb + 1 && a[0] == 1 && ids_eq(a + 1, na - 1, b, nb));
        /* not parsed: the text "<s>" is ordinary text and never the control token */
        bool has_bos = false;
        for (size_t i = 0; i < nc; i++) {
            has_bos |= c[i] == 1;
        }
        CHECK(nc > nb && !has_bos);
        lares_free(a);
        lares_free(b);
        lares_free(c);
        /* add_special and parse_special together: BOS, then a parsed </s> */
        size_t nd = tok(x.v, "</s>", 4, true, true, &a);
        CHECK(nd == 2 && a[0] == 1 && a[1] == 2);
        lares_free(a);
        vocab_close(&x);
    }
    if (vocab_open("vocab/ggml-vocab-phi-3.gguf", &x)) {
        /* phi-3 control tokens strip the whitespace after them (rstrip) */
        int32_t *a = NULL, *b = NULL;
        const char *s = "<|user|>\n  Hi<|end|>";
        size_t na = tok(x.v, s, strlen(s), false, true, &a);
        size_t nb = tok(x.v, "Hi", 2, false, false, &b);
        CHECK(na == nb + 2 && a[0] == 32010 && ids_eq(a + 1, nb, b, nb) && a[na - 1] == 32007);
        CHECK(text_token_is_eog(x.v, 32007)); /* <|end|> */
        /* </s> is user-defined in the file, but as an end-of-generation text
         * the reference engine makes it control: not matched unless parsed */
        CHECK(text_token_type_of(x.v, 2) == TEXT_TOKEN_USER_DEFINED && text_token_is_eog(x.v, 2));
        int32_t *c = NULL;
        size_t nc = tok(x.v, "a</s>", 5, false, false, &c);
        bool has_eos = false;
        for (size_t i = 0; i < nc; i++) {
            has_eos |= c[i] == 2;
        }
        CHECK(nc > 2 && !has_eos);
        lares_free(c);
        char buf[8];
        CHECK(text_token_piece(x.v, 2, false, buf, sizeof buf) == 0);
        CHECK(text_token_is_eog(x.v, 32000)); /* eos <|endoftext|> */
        lares_free(a);
        lares_free(b);
        vocab_close(&x);
    }
}

/* ---- bad vocabularies ---- */

typedef struct kv_spec {
    const char *model;
    int n_tokens;    /* tokens "t0", "t1", ... */
    int n_scores;    /* -1: none */
    int n_types;     /* -1: none */
    int bad_type;    /* written into types[1] when >= 0 */
    int64_t bos;     /* -2: none */
    bool dup;        /* token 2 repeats token 1 */
    bool tokens_u32; /* tokens stored as numbers */
    const char *pre; /* NULL: none */
} kv_spec;

static lares_status load_spec(const kv_spec *k, lares_error *err) {
    gguf_writer *w = NULL;
    lares_error e2 = {0};
    CHECK_OK(gguf_writer_create(&w, &e2), &e2);
    if (w == NULL) {
        return LARES_ENOMEM;
    }
    if (k->model != NULL) {
        gguf_writer_set_str(w, "tokenizer.ggml.model", k->model, &e2);
    }
    if (k->pre != NULL) {
        gguf_writer_set_str(w, "tokenizer.ggml.pre", k->pre, &e2);
    }
    char names[64][8];
    gguf_str strs[64];
    uint32_t nums[64];
    float scores[64];
    int32_t types[64];
    for (int i = 0; i < 64; i++) {
        snprintf(names[i], sizeof names[i], "t%d", (k->dup && i == 2) ? 1 : i);
        strs[i] = (gguf_str){names[i], strlen(names[i])};
        nums[i] = (uint32_t)i;
        scores[i] = (float)-i;
        types[i] = 1;
    }
    if (k->bad_type >= 0) {
        types[1] = k->bad_type;
    }
    if (k->tokens_u32) {
        gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_VT_U32, nums, (uint64_t)k->n_tokens,
                            &e2);
    } else {
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, (uint64_t)k->n_tokens, &e2);
    }
    if (k->n_scores >= 0) {
        gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VT_F32, scores, (uint64_t)k->n_scores,
                            &e2);
    }
    if (k->n_types >= 0) {
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_I32, types,
                            (uint64_t)k->n_types, &e2);
    }
    if (k->bos != -2) {
        gguf_writer_set_i32(w, "tokenizer.ggml.bos_token_id", (int32_t)k->bos, &e2);
    }
    if (k->model != NULL && strcmp(k->model, "gpt2") == 0) {
        gguf_str m[1] = {{"t1 t2", 5}};
        gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", m, 1, &e2);
    }
    char path[] = "/tmp/lares-test-text-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK_OK(gguf_writer_write_file(w, path, &e2), &e2);
    gguf_writer_free(w);
    gguf_file *f = NULL;
    lares_status st = gguf_open(path, NULL, &f, &e2);
    CHECK_OK(st, &e2);
    text_vocab *v = NULL;
    if (st == LARES_OK) {
        st = text_vocab_load(f, &v, err);
        CHECK((st == LARES_OK) == (v != NULL));
        text_vocab_free(v);
        gguf_close(f);
    }
    unlink(path);
    return st;
}

static void test_bad_vocab(void) {
    lares_error err = {0};
    kv_spec ok = {"llama", 8, 8, 8, -1, 1, false, false, NULL};
    CHECK_OK(load_spec(&ok, &err), &err);

    kv_spec k = ok;
    k.n_scores = 7;
    CHECK(load_spec(&k, &err) == LARES_EFORMAT && strstr(err.msg, "tokenizer.ggml.scores") &&
          strstr(err.msg, "7"));
    k = ok;
    k.n_types = 9;
    CHECK(load_spec(&k, &err) == LARES_EFORMAT && strstr(err.msg, "tokenizer.ggml.token_type"));
    k = ok;
    k.bad_type = 9;
    CHECK(load_spec(&k, &err) == LARES_EFORMAT && strstr(err.msg, "token_type[1]"));
    k = ok;
    k.bos = 8;
    CHECK(load_spec(&k, &err) == LARES_EFORMAT && strstr(err.msg, "bos_token_id") &&
          strstr(err.msg, "8"));
    k = ok;
    k.bos = -7;
    CHECK(load_spec(&k, &err) == LARES_EFORMAT && strstr(err.msg, "bos_token_id"));
    k = ok;
    k.bos = -1; /* "none", but llama wants BOS */
    CHECK(load_spec(&k, &err) == LARES_EFORMAT && strstr(err.msg, "add_bos_token"));
    k = ok;
    k.dup = true;
    CHECK(load_spec(&k, &err) == LARES_EFORMAT && strstr(err.msg, "repeats") &&
          strstr(err.msg, "t1"));
    k = ok;
    k.tokens_u32 = true;
    CHECK(load_spec(&k, &err) == LARES_EFORMAT && strstr(err.msg, "tokenizer.ggml.tokens"));
    k = ok;
    k.n_tokens = 0;
    CHECK(load_spec(&k, &err) != LARES_OK && strstr(err.msg, "tokenizer.ggml.tokens"));
    k = ok;
    k.model = "t5";
    CHECK(load_spec(&k, &err) == LARES_EUNSUPPORTED && strstr(err.msg, "'t5'"));
    k = ok;
    k.model = NULL;
    CHECK(load_spec(&k, &err) == LARES_ENOTFOUND && strstr(err.msg, "tokenizer.ggml.model"));
    /* types and scores absent: normal tokens, score 0 */
    k = ok;
    k.n_scores = -1;
    k.n_types = -1;
    CHECK_OK(load_spec(&k, &err), &err);
}

/* Every allocation of loading and tokenizing fails once in turn: the error is
 * LARES_ENOMEM and nothing leaks. */
static void test_alloc_failures(void) {
    gguf_file *f = NULL;
    lares_error err = {0};
    CHECK_OK(gguf_open(fixture("vocab/ggml-vocab-phi-3.gguf"), NULL, &f, &err), &err);
    if (f == NULL) {
        return;
    }
    const char *s = "<|user|> Hello w\xc3\xb6rld \xf0\x9f\xa6\x99<|end|>";
    int failures = 0;
    for (long nth = 1; nth < 200; nth++) {
        size_t before = lares_mem_in_use();
        text_vocab *v = NULL;
        lares_alloc_fail_after(nth);
        lares_status st = text_vocab_load(f, &v, &err);
        int32_t *ids = NULL;
        size_t n = 0;
        if (st == LARES_OK) {
            st = text_tokenize(v, s, strlen(s), true, true, &ids, &n, &err);
        }
        lares_alloc_fail_after(0);
        if (st != LARES_OK) {
            failures++;
            CHECKF(st == LARES_ENOMEM, "allocation %ld: %s", nth, err.msg);
        }
        lares_free(ids);
        text_vocab_free(v);
        CHECKF(lares_mem_in_use() == before, "allocation %ld: %zu bytes leaked", nth,
               lares_mem_in_use() - before);
        if (st == LARES_OK) {
            break; /* past the last allocation */
        }
    }
    CHECK(failures > 5);
    gguf_close(f);
}

int main(void) {
    test_spm_vectors();
    test_bpe_vectors();
    test_wpm_vectors();
    test_models();
    test_expected_json();
    test_spm_word_shortcut();
    test_pieces();
    test_stream();
    test_parse_special();
    test_bad_vocab();
    test_alloc_failures();
    return check_finish("test_text");
}
