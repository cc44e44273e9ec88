/*
 * The server's request parsing and stop strings, without sockets: request
 * bodies as the OpenAI API reference documents them parse to the values
 * they state, OpenAI's defaults apply where a field is absent, and each bad
 * body is a 400 naming the field at fault.
 */
#include "check.h"
#include "core/core.h"
#include "server/server_impl.h"

static bool parse(server_kind k, const char *body, server_request *r, server_error *e) {
    memset(e, 0, sizeof *e);
    return server_request_parse(k, body, strlen(body), r, e);
}

static void test_chat_ok(void) {
    server_request r;
    server_error e;
    const char *body =
        "{\"model\":\"lares\",\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi \"},"
        "{\"type\":\"text\",\"text\":\"there\"}]},{\"role\":\"assistant\",\"content\":null},"
        "{\"role\":\"user\",\"content\":\"Go on\"}],"
        "\"max_tokens\":42,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":7,\"min_p\":0.1,"
        "\"seed\":-3,\"stop\":[\"\\n\\n\",\"END\"],\"presence_penalty\":0.5,"
        "\"frequency_penalty\":-0.25,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"logprobs\":true,\"top_logprobs\":3,\"user\":\"someone\",\"n\":1}";
    CHECKF(parse(SERVER_CHAT, body, &r, &e), "%s", e.msg);
    CHECK(r.kind == SERVER_CHAT && strcmp(r.model, "lares") == 0);
    CHECK(r.n_msgs == 4);
    if (r.n_msgs == 4) {
        CHECK(strcmp(r.msgs[0].role, "system") == 0 && strcmp(r.msgs[0].content, "Be brief.") == 0);
        CHECK(strcmp(r.msgs[1].role, "user") == 0 && strcmp(r.msgs[1].content, "Hi there") == 0);
        CHECK(strcmp(r.msgs[2].role, "assistant") == 0 && strcmp(r.msgs[2].content, "") == 0);
        CHECK(strcmp(r.msgs[3].content, "Go on") == 0);
    }
    CHECK(r.max_tokens == 42);
    CHECK(r.sampler.temperature == 0.5f && r.sampler.top_p == 0.9f && r.sampler.top_k == 7);
    CHECK(r.sampler.min_p == 0.1f && r.sampler.presence_penalty == 0.5f);
    CHECK(r.sampler.frequency_penalty == -0.25f);
    CHECK(r.seed_given && r.sampler.seed == (uint64_t)-3);
    CHECK(r.n_stop == 2 && strcmp(r.stop[0], "\n\n") == 0 && r.stop_len[1] == 3);
    CHECK(r.stream && r.include_usage && r.logprobs && r.top_logprobs == 3);
    server_request_free(&r);
    CHECK(r.model == NULL && r.n_msgs == 0);

    /* the defaults are OpenAI's: temperature 1, top_p 1, no top_k/min_p, no
     * length limit for chat */
    CHECK(parse(SERVER_CHAT,
                "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r, &e));
    CHECK(r.sampler.temperature == 1.0f && r.sampler.top_p == 1.0f && r.sampler.top_k == 0);
    CHECK(r.sampler.min_p == 0.0f && r.sampler.repeat_penalty == 1.0f);
    CHECK(r.max_tokens == -1 && !r.stream && !r.seed_given && r.n_stop == 0 && !r.logprobs);
    server_request_free(&r);
    /* max_completion_tokens is the newer name; a stop string alone */
    CHECK(parse(SERVER_CHAT,
                "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                "\"max_completion_tokens\":5,\"stop\":\"###\"}",
                &r, &e));
    CHECK(r.max_tokens == 5 && r.n_stop == 1 && strcmp(r.stop[0], "###") == 0);
    server_request_free(&r);
}

static void test_completion_ok(void) {
    server_request r;
    server_error e;
    CHECK(parse(SERVER_COMPLETION, "{\"model\":\"m\",\"prompt\":\"Once upon\",\"logprobs\":2}", &r,
                &e));
    CHECK(r.prompt && strcmp(r.prompt, "Once upon") == 0 && r.prompt_len == 9);
    CHECK(r.max_tokens == 16); /* OpenAI's default for completions */
    CHECK(r.logprobs && r.top_logprobs == 2);
    server_request_free(&r);
    CHECK(
        parse(SERVER_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"one\"],\"logprobs\":0}", &r, &e));
    CHECK(r.prompt && strcmp(r.prompt, "one") == 0 && r.logprobs && r.top_logprobs == 0);
    server_request_free(&r);
    CHECK(parse(SERVER_COMPLETION, "{\"model\":\"m\",\"prompt\":[1,403,407]}", &r, &e));
    CHECK(r.prompt == NULL && r.n_prompt_ids == 3 && r.prompt_ids[2] == 407);
    server_request_free(&r);
}

typedef struct bad_case {
    server_kind kind;
    const char *body;
    const char *param; /* expected e.param */
    const char *words; /* expected in e.msg */
} bad_case;

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"

static const bad_case bad_cases[] = {
    {SERVER_CHAT, "{\"model\":\"m\",", "", "not valid JSON"},
    {SERVER_CHAT, "", "", "not valid JSON"},
    {SERVER_CHAT, "[1,2]", "", "must be a JSON object"},
    {SERVER_CHAT, "{\"model\":\"m\",\"model\":\"n\"," MSG "}", "", "duplicate"},
    {SERVER_CHAT, "{" MSG "}", "model", "model is required"},
    {SERVER_CHAT, "{\"model\":7," MSG "}", "model", "must be a string"},
    {SERVER_CHAT, "{\"model\":\"m\"}", "messages", "messages is required"},
    {SERVER_EMBEDDING, "{\"model\":\"m\"}", "input", "input is required"},
    {SERVER_EMBEDDING, "{\"input\":\"a\"}", "model", "model is required"},
    {SERVER_EMBEDDING, "{\"model\":\"m\",\"input\":[]}", "input", "empty list"},
    {SERVER_EMBEDDING, "{\"model\":\"m\",\"input\":\"\"}", "input", "empty string"},
    {SERVER_EMBEDDING, "{\"model\":\"m\",\"input\":{}}", "input", "a string or a list"},
    {SERVER_EMBEDDING, "{\"model\":\"m\",\"input\":[\"a\",3]}", "input", "input[1] must be"},
    {SERVER_EMBEDDING, "{\"model\":\"m\",\"input\":[[1,-2]]}", "input",
     "input[0][1] is not a token id"},
    {SERVER_EMBEDDING, "{\"model\":\"m\",\"input\":[1,\"a\"]}", "input",
     "input[1] is not a token id"},
    {SERVER_EMBEDDING, "{\"model\":\"m\",\"input\":\"a\",\"encoding_format\":\"hex\"}",
     "encoding_format", "float"},
    {SERVER_EMBEDDING, "{\"model\":\"m\",\"input\":\"a\",\"dimensions\":0}", "dimensions",
     "from 1"},
    {SERVER_CHAT, "{\"model\":\"m\",\"messages\":[]}", "messages", "empty"},
    {SERVER_CHAT, "{\"model\":\"m\",\"messages\":{}}", "messages", "must be a list"},
    {SERVER_CHAT, "{\"model\":\"m\",\"messages\":[3]}", "messages",
     "messages[0] must be an object"},
    {SERVER_CHAT, "{\"model\":\"m\",\"messages\":[{\"content\":\"x\"}]}", "messages[0].role",
     "must be a string"},
    {SERVER_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}",
     "messages[0].role", "system, developer, user, assistant and tool"},
    {SERVER_CHAT,
     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[{"
     "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]}",
     "messages", "not the assistant's"},
    {SERVER_CHAT,
     "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{"
     "\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]}",
     "messages[0].tool_calls", "function.arguments"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"tool_choice\":\"required\"}", "tool_choice",
     "no tools"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"tool_choice\":\"always\"}", "tool_choice",
     "must be none"},
    {SERVER_CHAT,
     "{\"model\":\"m\"," MSG
     ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}",
     "tools[0]", "letters, digits"},
    {SERVER_CHAT,
     "{\"model\":\"m\"," MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
     "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
     "tools", "repeats"},
    {SERVER_CHAT,
     "{\"model\":\"m\"," MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
     "\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}}",
     "response_format", "cannot be combined"},
    {SERVER_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"tools\":[{}]}", "tools",
     "for chat completions"},
    {SERVER_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}]}", "messages[0].content",
     "missing"},
    {SERVER_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":5}]}",
     "messages[0].content", "must be a string or a list"},
    {SERVER_CHAT,
     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
     "messages[0].content", "only text parts"},
    {SERVER_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}",
     "", "not valid JSON"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"temperature\":\"hot\"}", "temperature",
     "must be a number"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"temperature\":3}", "temperature", "from 0 to 2"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"top_p\":1.5}", "top_p", "from 0 to 1"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"max_tokens\":-1}", "max_tokens", "from 0"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"max_tokens\":1.5}", "max_tokens",
     "must be an integer"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"top_k\":-2}", "top_k", "from 0"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"seed\":\"x\"}", "seed", "must be an integer"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"stream\":1}", "stream", "must be a boolean"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"stream_options\":true}", "stream_options",
     "must be an object"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"stop\":5}", "stop", "string or a list"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop",
     "at most 4"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"stop\":[\"a\",1]}", "stop", "stop[1] must be"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"stop\":\"\"}", "stop", "1 to 256"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"n\":17}", "n", "from 1 to 16"},
    {SERVER_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"n\":0}", "n", "from 1 to 16"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"tools\":[{\"type\":\"function\"}]}", "tools[0]",
     "must be {"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"logit_bias\":{\"1\":5}}", "logit_bias",
     "not supported"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"response_format\":{\"type\":\"xml\"}}",
     "response_format.type", "json_object or json_schema"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"response_format\":\"json\"}", "response_format",
     "must be an object"},
    {SERVER_CHAT,
     "{\"model\":\"m\"," MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
     "{\"name\":\"n\",\"schema\":{\"$ref\":\"#/x\"}}}}",
     "response_format.json_schema.schema", "\"$ref\" is not supported"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"top_logprobs\":3}", "top_logprobs", "needs logprobs"},
    {SERVER_CHAT, "{\"model\":\"m\"," MSG ",\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs",
     "from 0 to 20"},
    {SERVER_COMPLETION, "{\"model\":\"m\"}", "prompt", "prompt is required"},
    {SERVER_COMPLETION, "{\"model\":\"m\",\"prompt\":[]}", "prompt", "empty list"},
    {SERVER_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"a\",\"b\"]}", "prompt", "one per request"},
    {SERVER_COMPLETION, "{\"model\":\"m\",\"prompt\":[1,-5]}", "prompt", "prompt[1]"},
    {SERVER_COMPLETION, "{\"model\":\"m\",\"prompt\":{}}", "prompt", "string or a list"},
    {SERVER_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"echo\":true}", "echo",
     "not supported"},
    {SERVER_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"suffix\":\"y\"}", "suffix",
     "not supported"},
    {SERVER_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"logprobs\":true}", "logprobs",
     "must be an integer"},
};

static void test_bad(void) {
    for (size_t i = 0; i < LARES_ARRAY_LEN(bad_cases); i++) {
        const bad_case *c = &bad_cases[i];
        server_request r;
        server_error e;
        bool ok = parse(c->kind, c->body, &r, &e);
        CHECKF(!ok, "case %zu (%s) parsed", i, c->body);
        if (ok) {
            server_request_free(&r);
            continue;
        }
        CHECKF(e.status == 400 && strcmp(e.type, "invalid_request_error") == 0, "case %zu: %d %s",
               i, e.status, e.type);
        CHECKF(strcmp(e.param, c->param) == 0, "case %zu: param '%s', want '%s'", i, e.param,
               c->param);
        CHECKF(strstr(e.msg, c->words) != NULL, "case %zu: message '%s' lacks '%s'", i, e.msg,
               c->words);
        CHECK(r.model == NULL && r.msgs == NULL && r.n_stop == 0); /* nothing left behind */
    }
    /* the error object OpenAI clients read */
    server_error e;
    server_fail(&e, 404, "invalid_request_error", "model_not_found", "model", "no '%s'", "x");
    json_t *o = server_error_json(&e);
    json_t *eo = json_object_get(o, "error");
    CHECK(json_is_object(eo));
    CHECK(strcmp(json_string_value(json_object_get(eo, "message")), "no 'x'") == 0);
    CHECK(strcmp(json_string_value(json_object_get(eo, "code")), "model_not_found") == 0);
    CHECK(strcmp(json_string_value(json_object_get(eo, "param")), "model") == 0);
    CHECK(strcmp(json_string_value(json_object_get(eo, "type")), "invalid_request_error") == 0);
    json_decref(o);
    /* a body cut anywhere is refused, never read past its length */
    const char *full = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}";
    for (size_t n = 0; n < strlen(full); n++) {
        char *cut = malloc(n ? n : 1); /* exact size: ASan sees any over-read */
        memcpy(cut, full, n);
        server_request r;
        CHECKF(!server_request_parse(SERVER_CHAT, cut, n, &r, &e), "cut at %zu parsed", n);
        free(cut);
    }
    /* allocation failures are errors, and free what was built */
    for (long k = 1; k < 30; k++) {
        server_request r;
        lares_alloc_fail_after(k);
        bool ok = parse(SERVER_CHAT,
                        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
                        "\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"}],"
                        "\"stop\":[\"x\",\"y\"]}",
                        &r, &e);
        lares_alloc_fail_after(0);
        if (ok) {
            server_request_free(&r);
            break;
        }
        CHECKF(e.status == 500, "allocation %ld: %d %s", k, e.status, e.msg);
    }
}

static void check_stop(const char *text, bool want_found, size_t want_at) {
    char *stops[] = {"</s>", "\n\nUser:", "ab"};
    size_t lens[] = {4, 7, 2};
    size_t cut = 99, safe = 99;
    bool found = server_stop_find(stops, lens, 3, text, strlen(text), &cut, &safe);
    CHECKF(found == want_found && (found ? cut : safe) == want_at,
           "[%s]: found %d cut %zu safe %zu, want %d at %zu", text, found, cut, safe, want_found,
           want_at);
}

static void test_stop(void) {
    check_stop("hello", false, 5);   /* nothing to hold */
    check_stop("hello <", false, 6); /* "<" may start </s> */
    check_stop("hello </", false, 6);
    check_stop("hello </s", false, 6);
    check_stop("hello </s>", true, 6); /* found: cut before it */
    check_stop("hello </s> more", true, 6);
    check_stop("x\n\nUs", false, 1); /* a prefix of the second stop */
    check_stop("x\n", false, 1);
    check_stop("a", false, 0); /* "a" may start "ab" */
    check_stop("ba", false, 1);
    check_stop("bab", true, 1);
    check_stop("ab </s>", true, 0); /* the earliest occurrence wins */
    check_stop("q </s> ab", true, 2);
    check_stop("</x", false, 3); /* not a prefix any more */
    check_stop("", false, 0);
    size_t cut, safe;
    CHECK(!server_stop_find(NULL, NULL, 0, "abc", 3, &cut, &safe) && safe == 3);
}

int main(void) {
    test_chat_ok();
    test_completion_ok();
    test_bad();
    test_stop();
    return check_finish("test_server");
}
