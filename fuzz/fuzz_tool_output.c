/*
 * libFuzzer target: the tool calls read from a generated answer
 * (server/tools.c, server_tools_parse_output) in each style: Hermes
 * <tool_call> blocks, Llama-3 JSON, Mistral [TOOL_CALLS] lists. Any text
 * must give either no calls or calls that each name one of the tools and
 * carry an object of arguments, which the OpenAI shape writes as JSON text
 * that parses back; never a crash, a leak or a read past the text.
 */
#include "core/core.h"
#include "server/tools.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static json_t *tools(void) {
    static const char *const text =
        "[{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}},{\"name\":\"now\"}]";
    return json_loads(text, 0, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *t = tools();
    for (int style = 0; style < 3; style++) {
        char *content = NULL;
        json_t *calls = server_tools_parse_output((server_tool_style)style, t, (const char *)data,
                                                  size, &content);
        if (calls != NULL) {
            if (json_array_size(calls) == 0) {
                __builtin_trap();
            }
            json_t *oa = server_tools_openai_calls(calls, "f", 0, true);
            for (size_t k = 0; k < json_array_size(calls); k++) {
                const json_t *c = json_array_get(calls, k);
                const char *name = json_string_value(json_object_get(c, "name"));
                if (name == NULL ||
                    (strcmp(name, "get_weather") != 0 && strcmp(name, "now") != 0) ||
                    !json_is_object(json_object_get(c, "arguments"))) {
                    __builtin_trap();
                }
                const json_t *fn = json_object_get(json_array_get(oa, k), "function");
                json_t *back =
                    json_loads(json_string_value(json_object_get(fn, "arguments")), 0, NULL);
                if (!json_equal(back, json_object_get(c, "arguments"))) {
                    __builtin_trap();
                }
                json_decref(back);
            }
            json_decref(oa);
        } else if (content != NULL) {
            __builtin_trap(); /* no calls: the caller keeps the text as it is */
        }
        json_decref(calls);
        lares_free(content);
    }
    json_decref(t);
    return 0;
}
