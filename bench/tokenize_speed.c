/*
 * tokenize_speed: how long the tokenizers take on 1 MiB of text.
 *
 * The text is generated from a fixed seed: English-like words and sentences
 * with digits, punctuation, newlines and a sprinkling of accented, CJK and
 * emoji characters, so every pre-tokenizer branch and the byte fallback run.
 * Each vocabulary tokenizes the whole MiB in one call (the worst case for the
 * merge heaps: one fragment) three times; the best time is printed.
 *
 * Build (the library first: ninja -C build lares):
 *   cc -O2 -std=c11 -Isrc -Iinclude bench/tokenize_speed.c build/liblares.a \
 *      -lpcre2-8 -lm -lpthread -o build/tokenize_speed
 * Run from the repository root:
 *   build/tokenize_speed [MODELS_DIR] [VOCAB.gguf ...]
 */
#define _POSIX_C_SOURCE 200809L
#include "text/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const default_vocabs[] = {
    "vocab/ggml-vocab-llama-spm.gguf",
    "vocab/ggml-vocab-gpt-2.gguf",
    "vocab/ggml-vocab-deepseek-llm.gguf",
    "derived/ggml-vocab-llama-bpe.from-npm-llama3.gguf",
    "derived/ggml-vocab-qwen2.from-npm-qwen3.gguf",
    "vocab/ggml-vocab-bert-bge.gguf",
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

static size_t make_text(char *buf, size_t n) {
    static const char *const words[] = {
        "the",
        "of",
        "and",
        "a",
        "to",
        "in",
        "is",
        "you",
        "that",
        "it",
        "he",
        "was",
        "for",
        "on",
        "are",
        "as",
        "with",
        "his",
        "they",
        "I",
        "at",
        "be",
        "this",
        "have",
        "from",
        "once",
        "upon",
        "time",
        "little",
        "girl",
        "named",
        "Lily",
        "tokenizer",
        "inference",
        "distributed",
        "memory",
        "laptop",
        "phone",
        "model",
        "weights",
        "don't",
        "we'll",
        "caf\xc3\xa9",
        "na\xc3\xafve",
        "\xc3\x9c"
        "bergr\xc3\xb6\xc3\x9f"
        "e",
        "\xe6\x9d\xb1\xe4\xba\xac",
        "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
        "\xf0\x9f\xa6\x99",
        "\xf0\x9f\x9a\x80",
        "1234567",
        "3.14",
        "2026",
        "x += 1;",
        "(a, b)",
        "--",
        "\"quoted\"",
        "http://x.y/z",
    };
    static const char *const seps[] = {" ",   " ",    " ",  " ",  " ",  ", ", ". ",
                                       ".\n", "\n\n", "  ", "\t", "! ", "? "};
    size_t used = 0;
    for (;;) {
        const char *w = words[next() % (sizeof words / sizeof words[0])];
        const char *s = seps[next() % (sizeof seps / sizeof seps[0])];
        size_t lw = strlen(w), ls = strlen(s);
        if (used + lw + ls > n) {
            break;
        }
        memcpy(buf + used, w, lw);
        used += lw;
        memcpy(buf + used, s, ls);
        used += ls;
    }
    while (used < n) {
        buf[used++] = ' ';
    }
    return used;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "../shared/models";
    const char *const *vocabs = default_vocabs;
    size_t n_vocabs = sizeof default_vocabs / sizeof default_vocabs[0];
    if (argc > 2) {
        vocabs = (const char *const *)(argv + 2);
        n_vocabs = (size_t)(argc - 2);
    }
    size_t len = 1u << 20;
    char *text = malloc(len);
    if (text == NULL) {
        return 1;
    }
    make_text(text, len);
    printf("%-52s %10s %10s %10s\n", "vocabulary (1 MiB of text, one call)", "ms", "MiB/s",
           "tokens");
    int rc = 0;
    for (size_t i = 0; i < n_vocabs; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, vocabs[i]);
        lares_error err = {0};
        gguf_file *f = NULL;
        text_vocab *v = NULL;
        if (gguf_open(path, NULL, &f, &err) != LARES_OK ||
            text_vocab_load(f, &v, &err) != LARES_OK) {
            fprintf(stderr, "tokenize_speed: %s\n", err.msg);
            gguf_close(f);
            rc = 1;
            continue;
        }
        double best = 1e30;
        size_t n_tok = 0;
        for (int rep = 0; rep < 3; rep++) {
            int32_t *ids = NULL;
            uint64_t t0 = lares_now_ns();
            if (text_tokenize(v, text, len, false, false, &ids, &n_tok, &err) != LARES_OK) {
                fprintf(stderr, "tokenize_speed: %s: %s\n", vocabs[i], err.msg);
                rc = 1;
                break;
            }
            double ms = lares_ns_to_ms(lares_now_ns() - t0);
            best = ms < best ? ms : best;
            lares_free(ids);
        }
        printf("%-52s %10.1f %10.1f %10zu\n", vocabs[i], best, 1000.0 / best, n_tok);
        text_vocab_free(v);
        gguf_close(f);
    }
    free(text);
    return rc;
}
