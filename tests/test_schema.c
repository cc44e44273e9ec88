/*
 * Structured output (src/server/schema.h): the schema compiler takes the
 * supported keywords and refuses the rest with a 400 naming them; the JSON
 * automaton accepts exactly the compact texts of the schema; random walks
 * through it always complete to a text that parses and validates; the
 * shortest completion it reports is exact; the token mask works with
 * multi-byte tokens, allows the end only for a whole value and closes the
 * value within the token budget.
 */
#include "check.h"
#include "core/core.h"
#include "server/schema.h"

static server_schema *compile_text(const char *text, server_error *e) {
    json_t *j = json_loads(text, JSON_DECODE_ANY, NULL);
    if (j == NULL) {
        return NULL;
    }
    server_schema *s = server_schema_compile(j, "schema", e);
    json_decref(j);
    return s;
}

static const char *const PERSON =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8},"
    "\"age\":{\"type\":\"integer\"},"
    "\"score\":{\"type\":\"number\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"bc\",1,12]},\"maxItems\":3},"
    "\"ok\":{\"type\":[\"boolean\",\"null\"]},"
    "\"extra\":{\"type\":\"object\"}},"
    "\"required\":[\"name\",\"age\",\"tags\",\"ok\"],\"additionalProperties\":false}";

/* feeds the whole text; 1: taken and whole, 0: taken, not whole, -1: refused */
static int run_text(const server_schema *s, const char *text) {
    jm_state st;
    server_jm_init(s, &st);
    for (const char *p = text; *p; p++) {
        if (!server_jm_feed(s, &st, (uint8_t)*p)) {
            return -1;
        }
    }
    return server_jm_accepting(s, &st) ? 1 : 0;
}

static void test_compile(void) {
    server_error e;
    server_schema *s = compile_text(PERSON, &e);
    CHECKF(s != NULL, "%s", s ? "" : e.msg);
    server_schema_free(s);
    static const char *const ok[] = {
        "true",
        "{}",
        "{\"type\":\"string\",\"title\":\"t\",\"description\":\"d\"}",
        "{\"const\":{\"a\":[1,2]}}",
        "{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"},{\"type\":\"array\"}]}",
        "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"x\":{}}}}",
        "{\"properties\":{\"a\":{\"type\":\"integer\"}}}",
    };
    for (size_t i = 0; i < LARES_ARRAY_LEN(ok); i++) {
        s = compile_text(ok[i], &e);
        CHECKF(s != NULL, "%s: %s", ok[i], s ? "" : e.msg);
        server_schema_free(s);
    }
    /* refused, with the word the message must name */
    static const char *const bad[][2] = {
        {"{\"type\":\"string\",\"pattern\":\"^a\"}", "pattern"},
        {"{\"type\":\"string\",\"format\":\"date\"}", "format"},
        {"{\"$ref\":\"#/$defs/x\"}", "$ref"},
        {"{\"type\":\"integer\",\"minimum\":3}", "minimum"},
        {"{\"allOf\":[{}]}", "allOf"},
        {"false", "false"},
        {"{\"type\":\"array\",\"items\":[{}]}", "tuples"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "\"b\""},
        {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", "start differently"},
        {"{\"type\":[\"string\",\"string\"]}", "start differently"},
        {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "below"},
        {"{\"type\":\"date\"}", "unknown type"},
        {"{\"enum\":[]}", "empty"},
        {"[1]", "must be an object"},
        {"{\"type\":\"array\",\"minItems\":-1}", "minItems"},
    };
    for (size_t i = 0; i < LARES_ARRAY_LEN(bad); i++) {
        memset(&e, 0, sizeof e);
        s = compile_text(bad[i][0], &e);
        CHECKF(s == NULL, "%s compiled", bad[i][0]);
        CHECKF(e.status == 400 && strstr(e.msg, bad[i][1]) != NULL &&
                   strcmp(e.param, "schema") == 0,
               "%s: %d %s", bad[i][0], e.status, e.msg);
        server_schema_free(s);
    }
    /* too deep */
    char deep[2048] = "";
    for (int i = 0; i < 40; i++) {
        strcat(deep, "{\"type\":\"array\",\"items\":");
    }
    strcat(deep, "{}");
    for (int i = 0; i < 40; i++) {
        strcat(deep, "}");
    }
    s = compile_text(deep, &e);
    CHECK(s == NULL && strstr(e.msg, "deeper") != NULL);
}

static void test_machine(void) {
    server_error e;
    server_schema *s = compile_text(PERSON, &e);
    if (s == NULL) {
        CHECK(s != NULL);
        return;
    }
    struct {
        const char *text;
        int want;
    } cases[] = {
        {"{\"name\":\"Al\",\"age\":3,\"tags\":[\"a\"],\"ok\":null}", 1},
        {"{\"name\":\"Al\",\"age\":-30,\"score\":-0.5e+12,\"tags\":[1,12,\"bc\"],\"ok\":true,"
         "\"extra\":{\"k\":[{},[],\"s\",false,0.25]}}",
         1},
        {"{\"name\":\"\\n\\\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\",\"age\":0,\"tags\":[],\"ok\":"
         "false}",
         1},
        {"{\"name\":\"Al\",\"age\":3,\"tags\":[\"a\"]", 0}, /* ok is required */
        {"{\"name\":\"Al\",\"age\":3,\"tags\":[\"a\"],\"ok\":null", 0},
        {"{\"name\":\"Al\",\"age\":3,\"tags\":[\"a\"]}", -1}, /* closed without ok */
        {"{\"age\":3", -1},                                   /* order: name first */
        {"{\"name\":\"\",", -1},                              /* minLength 1 */
        {"{\"name\":\"123456789\"", -1},                      /* maxLength 8 */
        {"{ \"name\"", -1},                                   /* no whitespace */
        {"{\"name\":\"a\",\"age\":1.5", -1},                  /* integer */
        {"{\"name\":\"a\",\"age\":01", -1},
        {"{\"name\":\"a\",\"age\":1,\"tags\":[\"b\"", -1},   /* not in the enum */
        {"{\"name\":\"a\",\"age\":1,\"tags\":[1,1,1,1", -1}, /* maxItems 3 */
        {"{\"name\":\"a\",\"age\":1,\"tags\":[123", -1},
        {"{\"name\":\"\\u0041", -1},      /* no \u escapes */
        {"{\"name\":\"\xc0\xaf", -1},     /* overlong */
        {"{\"name\":\"\xed\xa0\x80", -1}, /* a surrogate */
        {"{\"name\":\"\x01", -1},         /* a control character */
        {"{\"name\":\"a\",\"nick\"", -1}, /* not a property */
        {"{\"name\":\"a\",\"age\":1,\"tags\":[],\"ok\":nul}", -1},
        {"{\"name\":\"a\",\"age\":1,\"tags\":[],\"ok\":null}x", -1}, /* after the end */
    };
    for (size_t i = 0; i < LARES_ARRAY_LEN(cases); i++) {
        int got = run_text(s, cases[i].text);
        CHECKF(got == cases[i].want, "case %zu (%s): %d, want %d", i, cases[i].text, got,
               cases[i].want);
    }
    server_schema_free(s);
    /* a number at the top may go on, and is whole at each digit */
    s = compile_text("{\"type\":\"number\"}", &e);
    CHECK(s != NULL && run_text(s, "-12.5e-3") == 1 && run_text(s, "-") == 0 &&
          run_text(s, "1e") == 0 && run_text(s, "1e999") == -1);
    server_schema_free(s);
    s = compile_text("{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}", &e);
    CHECK(s != NULL && run_text(s, "{}") == 1 && run_text(s, "{\"") == -1);
    server_schema_free(s);
    s = server_schema_any_object(&e);
    CHECK(s != NULL && run_text(s, "{\"a\":{\"b\":[1,{}]},\"a\":\"x\"}") == 1 &&
          run_text(s, "[]") == -1 && run_text(s, "\"s\"") == -1);
    server_schema_free(s);
}

/* xorshift for the walks */
static uint64_t rnd(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* random walks: a random allowed byte at each step, then the shortest
 * completion; the text must parse and validate, and the completion must
 * take exactly the bytes min_finish said */
static void walk(server_schema *s, const char *text, int walks) {
    uint64_t seed = 0x9e3779b97f4a7c15u;
    int bad_parse = 0, bad_finish = 0;
    for (int w = 0; w < walks; w++) {
        jm_state st;
        server_jm_init(s, &st);
        char out[8192];
        size_t n = 0;
        const size_t steps = rnd(&seed) % 200;
        for (size_t k = 0; k < steps && !st.done; k++) {
            uint8_t allowed[256];
            const int na = server_jm_allowed(s, &st, allowed);
            if (na == 0) {
                break;
            }
            uint8_t b = allowed[rnd(&seed) % (uint64_t)na];
            server_jm_feed(s, &st, b);
            out[n++] = (char)b;
        }
        size_t need = server_jm_min_finish(s, &st), took = 0;
        int b;
        while ((b = server_jm_closing_byte(s, &st)) >= 0 && n < sizeof out - 1) {
            server_jm_feed(s, &st, (uint8_t)b);
            out[n++] = (char)b;
            took++;
        }
        out[n] = '\0';
        if (took != need || !server_jm_accepting(s, &st)) {
            if (bad_finish++ == 0) {
                fprintf(stderr, "walk %d: needed %zu, took %zu: %s\n", w, need, took, out);
            }
            continue;
        }
        json_t *v = json_loadb(out, n, JSON_DECODE_ANY, NULL);
        if (v == NULL || !server_schema_check(s, v)) {
            if (bad_parse++ == 0) {
                fprintf(stderr, "walk %d: %s: %s\n", w, v ? "does not validate" : "no JSON", out);
            }
        }
        json_decref(v);
    }
    CHECKF(bad_finish == 0 && bad_parse == 0, "%s: %d walks did not finish, %d not valid",
           text ? text : "any object", bad_finish, bad_parse);
    server_schema_free(s);
}

static void walk_schema(const char *text, int walks) {
    server_error e;
    server_schema *s = text ? compile_text(text, &e) : server_schema_any_object(&e);
    if (s == NULL) {
        CHECKF(s != NULL, "%s", e.msg);
        return;
    }
    walk(s, text, walks);
}

/* function calls: the arguments follow the name's own schema */
static void test_calls(void) {
    const char *names[] = {"get_weather", "get_time", "noop"};
    json_t *p0 = json_loads("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\","
                            "\"maxLength\":6},\"unit\":{\"enum\":[\"C\",\"F\"]}},\"required\":"
                            "[\"city\",\"unit\"]}",
                            0, NULL);
    json_t *p1 = json_loads("{\"type\":\"object\",\"properties\":{\"zone\":{\"type\":\"integer\"}},"
                            "\"required\":[\"zone\"]}",
                            0, NULL);
    const json_t *params[] = {p0, p1, NULL};
    server_error e;
    for (int list = 0; list < 2; list++) {
        server_schema *s =
            server_schema_calls(names, params, 3, list ? "arguments" : "parameters", list, &e);
        CHECKF(s != NULL, "%s", s ? "" : e.msg);
        if (s == NULL) {
            continue;
        }
        const char *one = "{\"name\":\"get_time\",\"parameters\":{\"zone\":-2}}";
        const char *many = "[{\"name\":\"noop\",\"arguments\":{}},{\"name\":\"get_weather\","
                           "\"arguments\":{\"city\":\"Oslo\",\"unit\":\"C\"}}]";
        CHECK(run_text(s, list ? many : one) == 1);
        CHECK(run_text(s, list ? "[{\"name\":\"get_time\",\"arguments\":{\"city\""
                               : "{\"name\":\"get_weather\",\"parameters\":{\"zone\"") == -1);
        CHECK(run_text(s, list ? "[{\"name\":\"nope\"" : "{\"name\":\"get_x") == -1);
        walk(s, list ? "calls as a list" : "one call", 300);
    }
    json_decref(p0);
    json_decref(p1);
}

static void test_walks(void) {
    walk_schema(PERSON, 400);
    walk_schema(NULL, 400);
    walk_schema(
        "{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},"
        "\"minItems\":2},\"minItems\":1,\"maxItems\":4}",
        300);
    walk_schema("{\"anyOf\":[{\"type\":\"string\",\"minLength\":3},{\"type\":\"null\"},"
                "{\"type\":\"object\",\"properties\":{\"a\":{\"const\":[1,\"x\"]},\"b\":"
                "{\"type\":\"number\"}},\"required\":[\"b\"]}]}",
                300);
    walk_schema("{\"type\":\"object\",\"properties\":{\"o1\":{\"type\":\"string\"},\"o2\":"
                "{\"type\":\"integer\"},\"r\":{\"enum\":[1,12,123]},\"o3\":{}}, "
                "\"required\":[\"r\"]}",
                300);
}

/* a small made-up vocabulary: multi-byte tokens, a space, an end token */
static const char *const VOCAB[] = {"{", "}", "\"", "a", "\":", "},{",   "0",     "12",
                                    " ", ",", ":",  "[", "]",   "\"a\"", "<eos>", "n"};
enum { EOS = 14 };

static void make_vocab(server_vocab_bytes *vb) {
    const int32_t n = (int32_t)LARES_ARRAY_LEN(VOCAB);
    vb->n_vocab = n;
    vb->offset = lares_alloc_array((size_t)n + 1, sizeof *vb->offset);
    vb->eog = lares_calloc((size_t)n, sizeof *vb->eog);
    vb->bytes = lares_alloc(256);
    size_t len = 0;
    for (int32_t t = 0; t < n; t++) {
        vb->offset[t] = len;
        if (t == EOS) {
            vb->eog[t] = true;
            continue;
        }
        memcpy(vb->bytes + len, VOCAB[t], strlen(VOCAB[t]));
        len += strlen(VOCAB[t]);
    }
    vb->offset[n] = len;
}

static void test_mask(void) {
    server_vocab_bytes vb;
    make_vocab(&vb);
    server_error e;
    server_schema *s =
        compile_text("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":"
                     "{\"type\":\"integer\"}}},\"required\":[\"a\"]}",
                     &e);
    if (s == NULL) {
        CHECK(s != NULL);
        server_vocab_bytes_free(&vb);
        return;
    }
    server_constraint c;
    CHECK(server_constraint_init(&c, s, &vb, -1));
    float logits[LARES_ARRAY_LEN(VOCAB)];
    for (size_t i = 0; i < LARES_ARRAY_LEN(VOCAB); i++) {
        logits[i] = 0;
    }
    server_constraint_mask(&c, logits, vb.n_vocab);
    for (int32_t t = 0; t < vb.n_vocab; t++) { /* only "{" starts it */
        CHECKF((isinf(logits[t]) != 0) == (t != 0), "token %d (%s)", t, VOCAB[t]);
    }
    server_constraint_advance(&c, 0);
    for (size_t i = 0; i < LARES_ARRAY_LEN(VOCAB); i++) {
        logits[i] = 0;
    }
    server_constraint_mask(&c, logits, vb.n_vocab);
    /* after "{": the quote, or the whole key "a" */
    CHECK(!isinf(logits[2]) && !isinf(logits[13]) && isinf(logits[1]) && isinf(logits[EOS]));
    server_constraint_free(&c);

    /* greedy draws from random logits within a budget of 12 tokens end
     * with a whole value every time */
    uint64_t seed = 12345;
    int whole = 0;
    for (int run = 0; run < 200; run++) {
        CHECK(server_constraint_init(&c, s, &vb, 12));
        char out[256];
        size_t n = 0;
        for (int k = 0; k < 12; k++) {
            int32_t best = -1;
            for (int32_t t = 0; t < vb.n_vocab; t++) {
                logits[t] = (float)(rnd(&seed) % 1000);
            }
            server_constraint_mask(&c, logits, vb.n_vocab);
            for (int32_t t = 0; t < vb.n_vocab; t++) {
                if (!isinf(logits[t]) && (best < 0 || logits[t] > logits[best])) {
                    best = t;
                }
            }
            if (best < 0 || best == EOS) {
                break;
            }
            server_constraint_advance(&c, best);
            memcpy(out + n, VOCAB[best], strlen(VOCAB[best]));
            n += strlen(VOCAB[best]);
        }
        out[n] = '\0';
        json_t *v = json_loadb(out, n, 0, NULL);
        whole += v != NULL && server_schema_check(s, v) && !c.broken;
        if (v == NULL) {
            fprintf(stderr, "not whole within the budget: %s\n", out);
        }
        json_decref(v);
        server_constraint_free(&c);
    }
    CHECKF(whole == 200, "%d of 200 whole", whole);
    server_schema_free(s);
    server_vocab_bytes_free(&vb);
}

/* a real byte-level BPE vocabulary (Qwen's, 151k tokens, most of them
 * several bytes): random logits under the mask give valid JSON within the
 * budget; the time of one mask is printed (not checked) */
static void test_real_vocab(const char *rel) {
    lares_model *m = NULL;
    lares_error err = {0};
    lares_model_opts mo = lares_model_opts_default();
    mo.vocab_only = true;
    CHECK_OK(lares_model_open(fixture(rel), &mo, &m, &err), &err);
    if (m == NULL) {
        return;
    }
    lares_model_info info;
    lares_model_get_info(m, &info);
    server_vocab_bytes vb;
    CHECK_OK(server_vocab_bytes_read(m, info.n_vocab, &vb, &err), &err);
    server_error e;
    server_schema *s = compile_text(PERSON, &e);
    float *logits = lares_alloc_array((size_t)info.n_vocab, sizeof *logits);
    uint64_t seed = 777;
    int valid = 0, multi = 0;
    double ms = 0;
    size_t masks = 0;
    for (int run = 0; run < 4 && s != NULL && logits != NULL; run++) {
        server_constraint c;
        CHECK(server_constraint_init(&c, s, &vb, 60));
        char out[4096];
        size_t n = 0;
        for (int k = 0; k < 60; k++) {
            for (int32_t t = 0; t < info.n_vocab; t++) {
                logits[t] = (float)(rnd(&seed) % 100000) / 1000.0f;
            }
            const uint64_t t0 = lares_now_ns();
            server_constraint_mask(&c, logits, info.n_vocab);
            ms += (double)(lares_now_ns() - t0) / 1e6;
            masks++;
            int32_t best = 0;
            for (int32_t t = 1; t < info.n_vocab; t++) {
                best = logits[t] > logits[best] ? t : best;
            }
            if (vb.eog[best]) {
                break;
            }
            server_constraint_advance(&c, best);
            const size_t len = vb.offset[best + 1] - vb.offset[best];
            multi += len > 1;
            memcpy(out + n, vb.bytes + vb.offset[best], len);
            n += len;
        }
        json_t *v = json_loadb(out, n, 0, NULL);
        valid += v != NULL && server_schema_check(s, v) && !c.broken;
        if (v == NULL) {
            fprintf(stderr, "%s: not valid: %.*s\n", rel, (int)n, out);
        }
        json_decref(v);
        server_constraint_free(&c);
    }
    CHECKF(valid == 4, "%s: %d of 4 valid", rel, valid);
    CHECKF(multi > 0, "%s: no multi-byte token chosen", rel);
    printf("%s: %d tokens, %.2f ms a mask\n", rel, info.n_vocab, masks ? ms / (double)masks : 0);
    lares_free(logits);
    server_schema_free(s);
    server_vocab_bytes_free(&vb);
    lares_model_close(m);
}

static void test_formats(void) {
    /* response_format and Ollama's format, through the request parsers */
    server_request r;
    server_error e;
    const char *body =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
        "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\","
        "\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
        "\"string\"}},\"required\":[\"a\"],\"additionalProperties\":false}}}}";
    CHECK(server_request_parse(SERVER_CHAT, body, strlen(body), &r, &e) && r.format != NULL);
    server_request_free(&r);
    body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
           "\"response_format\":{\"type\":\"json_object\"}}";
    CHECK(server_request_parse(SERVER_CHAT, body, strlen(body), &r, &e) && r.format != NULL);
    server_request_free(&r);
    body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
           "\"response_format\":{\"type\":\"text\"}}";
    CHECK(server_request_parse(SERVER_CHAT, body, strlen(body), &r, &e) && r.format == NULL);
    server_request_free(&r);
    body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
           "\"response_format\":{\"type\":\"yaml\"}}";
    CHECK(!server_request_parse(SERVER_CHAT, body, strlen(body), &r, &e) && e.status == 400 &&
          strcmp(e.param, "response_format.type") == 0);
    body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
           "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\","
           "\"schema\":{\"type\":\"string\",\"format\":\"email\"}}}}";
    CHECK(!server_request_parse(SERVER_CHAT, body, strlen(body), &r, &e) && e.status == 400 &&
          strstr(e.msg, "format") != NULL);
}

int main(void) {
    test_compile();
    test_machine();
    test_walks();
    test_calls();
    test_mask();
    test_real_vocab("derived/ggml-vocab-qwen2.from-npm-qwen3.gguf");
    test_real_vocab("stories260K.gguf");
    test_formats();
    return check_finish("test_schema");
}
