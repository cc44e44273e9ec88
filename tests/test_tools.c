/*
 * Tool calling (src/server/tools.c): requests with tools, the conversation
 * written in each family's style, calls read back from answers in each
 * style (and what is not a call stays text), a forced call's schema.
 */
#include "check.h"
#include "core/core.h"
#include "server/schema.h"
#include "server/tools.h"

static const char *const TOOLS =
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"
    "\"Weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
    "\"string\"}},\"required\":[\"city\"]}}},{\"type\":\"function\",\"function\":{\"name\":"
    "\"now\"}}]";

static bool parse(const char *extra, server_request *r) {
    char body[4096];
    snprintf(body, sizeof body,
             "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
             "{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\",\"content\":"
             "null,\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":"
             "\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}}]},{\"role\":"
             "\"tool\",\"content\":\"12 C\"},{\"role\":\"tool\",\"content\":\"windy\"},"
             "{\"role\":\"user\",\"content\":\"And now?\"}],%s%s}",
             TOOLS, extra);
    server_error e;
    bool ok = server_request_parse(SERVER_CHAT, body, strlen(body), r, &e);
    if (!ok) {
        fprintf(stderr, "parse: %s\n", e.msg);
    }
    return ok;
}

static void test_render(void) {
    server_request r;
    if (!parse("", &r)) {
        CHECK(false);
        return;
    }
    CHECK(r.tool_choice == SERVER_TOOL_AUTO && json_array_size(r.tools) == 2);
    struct {
        server_tool_style style;
        const char *want[4]; /* in the rendered text, in order */
    } cases[] = {
        {SERVER_TOOLS_HERMES,
         {"Be brief.\n\n# Tools",
          "<tools>\n{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"",
          "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}\n</tool_call>",
          "<tool_response>\n12 C\n</tool_response>\n<tool_response>\nwindy\n</tool_response>"}},
        {SERVER_TOOLS_LLAMA3,
         {"Be brief.\n\nYou have access", "\"parameters\": dictionary",
          "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Oslo\"}}", "12 C\nwindy"}},
        {SERVER_TOOLS_MISTRAL,
         {"[TOOL_CALLS][{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}]",
          "[TOOL_RESULTS]{\"content\":\"12 C\"}[/TOOL_RESULTS]",
          "[AVAILABLE_TOOLS][{\"type\":\"function\"", "[/AVAILABLE_TOOLS]And now?"}},
    };
    for (size_t c = 0; c < LARES_ARRAY_LEN(cases); c++) {
        server_tools_render rm;
        server_error e;
        CHECK(server_tools_render_messages(cases[c].style, &r, &rm, &e));
        char all[8192] = "";
        for (size_t i = 0; i < rm.n_msgs; i++) {
            CHECK(strcmp(rm.msgs[i].role, "tool") != 0); /* the templates know no tool role */
            strncat(all, rm.msgs[i].content, sizeof all - strlen(all) - 2);
            strcat(all, "|");
        }
        const char *at = all;
        for (size_t k = 0; k < 4; k++) {
            const char *f = strstr(at, cases[c].want[k]);
            CHECKF(f != NULL, "style %zu: '%s' missing (in order) in %s", c, cases[c].want[k], all);
            at = f ? f : at;
        }
        /* the two results are one user turn; the system prompt is not repeated */
        CHECKF(rm.n_msgs == 5, "style %zu: %zu messages", c, rm.n_msgs);
        server_tools_render_free(&rm);
    }
    server_request_free(&r);
    /* tool_choice none: the tools are not shown */
    if (parse(",\"tool_choice\":\"none\"", &r)) {
        server_tools_render rm;
        server_error e;
        CHECK(server_tools_render_messages(SERVER_TOOLS_HERMES, &r, &rm, &e));
        CHECK(strcmp(rm.msgs[0].content, "Be brief.") == 0);
        server_tools_render_free(&rm);
        server_request_free(&r);
    }
}

static void test_parse_output(void) {
    server_request r;
    if (!parse("", &r)) {
        CHECK(false);
        return;
    }
    struct {
        server_tool_style style;
        const char *text;
        int calls; /* -1: none (text) */
        const char *content;
    } cases[] = {
        {SERVER_TOOLS_HERMES,
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"X\"}}\n</tool_call>",
         1, NULL},
        {SERVER_TOOLS_HERMES,
         "Let me "
         "look.\n<tool_call>{\"name\":\"now\",\"arguments\":{}}</"
         "tool_call>\n<tool_call>{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Y\\\"}"
         "\"}</tool_call>",
         2, "Let me look."},
        {SERVER_TOOLS_HERMES, "<tool_call>{\"name\":\"now\",\"arguments\":{}}", 1,
         NULL}, /* unclosed at the end */
        {SERVER_TOOLS_HERMES, "<tool_call>{\"name\":\"rm_rf\",\"arguments\":{}}</tool_call>", -1,
         NULL},
        {SERVER_TOOLS_HERMES, "<tool_call>{\"name\":\"now\"}</tool_call>", -1, NULL},
        {SERVER_TOOLS_HERMES, "<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call> and more",
         -1, NULL},
        {SERVER_TOOLS_HERMES, "just text", -1, NULL},
        {SERVER_TOOLS_LLAMA3, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Z\"}} ", 1,
         NULL},
        {SERVER_TOOLS_LLAMA3, "<|python_tag|>{\"name\":\"now\",\"parameters\":{}}", 1, NULL},
        {SERVER_TOOLS_LLAMA3, "The weather is {\"name\":\"now\",\"parameters\":{}}", -1, NULL},
        {SERVER_TOOLS_MISTRAL,
         "[TOOL_CALLS][{\"name\":\"now\",\"arguments\":{}},{\"name\":\"get_weather\",\"arguments\":"
         "{\"city\":\"Q\"}}]",
         2, NULL},
        {SERVER_TOOLS_MISTRAL, "[{\"name\":\"now\",\"arguments\":{}}]", 1, NULL},
        {SERVER_TOOLS_MISTRAL, "[]", -1, NULL},
        {SERVER_TOOLS_MISTRAL, "[TOOL_CALLS]{\"name\":\"now\",\"arguments\":{}}", -1, NULL},
    };
    for (size_t c = 0; c < LARES_ARRAY_LEN(cases); c++) {
        char *content = NULL;
        json_t *calls = server_tools_parse_output(cases[c].style, r.tools, cases[c].text,
                                                  strlen(cases[c].text), &content);
        const int got = calls ? (int)json_array_size(calls) : -1;
        CHECKF(got == cases[c].calls, "case %zu: %d calls, want %d", c, got, cases[c].calls);
        for (size_t k = 0; calls != NULL && k < json_array_size(calls); k++) {
            const json_t *call = json_array_get(calls, k);
            CHECK(json_is_string(json_object_get(call, "name")) &&
                  json_is_object(json_object_get(call, "arguments")));
        }
        CHECKF((content == NULL) == (cases[c].content == NULL) &&
                   (content == NULL || strcmp(content, cases[c].content) == 0),
               "case %zu: content '%s'", c, content ? content : "(none)");
        json_decref(calls);
        lares_free(content);
    }
    /* the OpenAI shape: arguments as JSON text, ids, indices in chunks */
    char *content = NULL;
    json_t *calls = server_tools_parse_output(SERVER_TOOLS_MISTRAL, r.tools, cases[10].text,
                                              strlen(cases[10].text), &content);
    json_t *oa = server_tools_openai_calls(calls, "x", 1, true);
    CHECK(json_array_size(oa) == 2);
    const json_t *second = json_array_get(oa, 1);
    CHECK(
        json_integer_value(json_object_get(second, "index")) == 1 &&
        strcmp(json_string_value(json_object_get(second, "id")), "call_x_1_1") == 0 &&
        strcmp(json_string_value(json_object_get(json_object_get(second, "function"), "arguments")),
               "{\"city\":\"Q\"}") == 0);
    json_decref(oa);
    json_decref(calls);
    server_request_free(&r);
}

static void test_forced(void) {
    server_request r;
    if (!parse(",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}",
               &r)) {
        CHECK(false);
        return;
    }
    CHECK(r.tool_choice == SERVER_TOOL_NAMED && r.tool_named == 0);
    server_error e;
    for (int style = 0; style < 3; style++) {
        server_schema *s = server_tools_call_schema((server_tool_style)style, &r, &e);
        CHECK(s != NULL);
        if (s == NULL) {
            continue;
        }
        /* the shortest call, completed byte by byte, parses back as a call */
        jm_state st;
        server_jm_init(s, &st);
        char text[512];
        const char *prefix = server_tools_forced_prefix((server_tool_style)style);
        size_t n = strlen(prefix);
        memcpy(text, prefix, n);
        int b;
        while ((b = server_jm_closing_byte(s, &st)) >= 0 && n < sizeof text - 1) {
            server_jm_feed(s, &st, (uint8_t)b);
            text[n++] = (char)b;
        }
        char *content = NULL;
        json_t *calls =
            server_tools_parse_output((server_tool_style)style, r.tools, text, n, &content);
        CHECKF(calls != NULL && json_array_size(calls) == 1 &&
                   strcmp(json_string_value(json_object_get(json_array_get(calls, 0), "name")),
                          "get_weather") == 0,
               "style %d: %.*s", style, (int)n, text);
        json_decref(calls);
        lares_free(content);
        server_schema_free(s);
    }
    server_request_free(&r);
}

int main(void) {
    test_render();
    test_parse_output();
    test_forced();
    return check_finish("test_tools");
}
