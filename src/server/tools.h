/*
 * Tool calling (tools.c): the request's tools and tool_choice, the
 * conversation with tool calls and tool results written the way each chat
 * family's models were trained to read them, and the calls found in a
 * generated answer.
 *
 * Three styles, by chat family:
 * - hermes (chatml: Qwen 2.5/3, Hermes; and every family without a tool
 *   format of its own, plain included): the tools as JSON lines in <tools>
 *   in the system prompt, calls as <tool_call>{"name":..,"arguments":..}
 *   </tool_call>, results as <tool_response> in a user turn;
 * - llama3 (Llama 3.1+ JSON tool calling): the tools as JSON in the system
 *   prompt, a call is the answer {"name":..,"parameters":..};
 * - mistral: [AVAILABLE_TOOLS][...][/AVAILABLE_TOOLS] before the last user
 *   message, calls as [TOOL_CALLS][{"name":..,"arguments":..}], results as
 *   [TOOL_RESULTS]{"content":..}[/TOOL_RESULTS].
 */
#ifndef LARES_SERVER_TOOLS_H
#define LARES_SERVER_TOOLS_H

#include "server/server_impl.h"

#define SERVER_MAX_TOOLS 64

typedef enum server_tool_style {
    SERVER_TOOLS_HERMES = 0,
    SERVER_TOOLS_LLAMA3,
    SERVER_TOOLS_MISTRAL,
} server_tool_style;

/* By chat family name (the server's template). */
server_tool_style server_tool_style_of(const char *family);

/* tools and tool_choice of an OpenAI request into r (r->tools: a list of
 * {"name","description","parameters"}); false with a 400. */
bool server_parse_tools(const json_t *tools, const json_t *choice, server_request *r,
                        server_error *e);
/* One message's tool_calls (OpenAI's [{"id","type","function":{"name",
 * "arguments": a JSON text}}]) as a list of {"name","arguments"} in *out. */
bool server_parse_message_calls(const json_t *calls, size_t i, json_t **out, server_error *e);

/* The conversation to render: tools and calls written into messages of the
 * roles the templates know (system, user, assistant). *texts holds the
 * contents written here (owned, freed with server_tools_render_free). */
typedef struct server_tools_render {
    lares_chat_msg *msgs;
    size_t n_msgs;
    char **texts;
    size_t n_texts;
} server_tools_render;

bool server_tools_render_messages(server_tool_style style, const server_request *r,
                                  server_tools_render *out, server_error *e);
void server_tools_render_free(server_tools_render *t);

/* The text the answer starts with when a call is forced (tool_choice
 * required or a named function): written after the generation prompt. */
const char *server_tools_forced_prefix(server_tool_style style);
/* The schema a forced call is generated under. */
struct server_schema *server_tools_call_schema(server_tool_style style, const server_request *r,
                                               server_error *e);

/* The calls in an answer: a list of {"name","arguments": object} (NULL:
 * none; then the whole text is the content) and the text outside them
 * (*content, owned, NULL when empty). Calls must name a tool of r. */
json_t *server_tools_parse_output(server_tool_style style, const json_t *tools, const char *text,
                                  size_t len, char **content);

/* The calls as OpenAI's tool_calls (ids call_<id_base>_<choice>_<k>, the
 * arguments as JSON text); chunk: with their index, for a streamed delta. */
json_t *server_tools_openai_calls(const json_t *calls, const char *id_base, int32_t choice,
                                  bool chunk);

#endif /* LARES_SERVER_TOOLS_H */
