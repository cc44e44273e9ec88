/*
 * server/ollama: the Ollama API's requests and replies (ollama.c); the
 * routes are in http.c, the generation in worker.c.
 */
#ifndef LARES_SERVER_OLLAMA_H
#define LARES_SERVER_OLLAMA_H

#include "server/server_impl.h"

/* /api/generate (generate) or /api/chat: parsed and validated as the
 * OpenAI request it amounts to, with dialect SERVER_OLLAMA. */
bool server_ollama_parse(bool generate, const char *body, size_t len, server_request *out,
                         server_error *e);
/* {"error": "message"} */
json_t *server_ollama_error_json(const server_error *e);
/* GET /api/tags and POST /api/show */
json_t *server_ollama_tags(const server *sv);
json_t *server_ollama_show(const server *sv);

typedef struct server_ollama_counts {
    size_t prompt_tokens, generated;
    double total_s, prompt_s, gen_s;
} server_ollama_counts;

/* One line of a streamed reply: text (reference taken) with "done": false. */
void server_ollama_chunk(server_job *j, json_t *text);
/* The last line (or the whole reply when not streamed): "done": true. */
/* The last line; calls (borrowed, may be NULL): the answer's tool calls,
 * in the message (streamed: in a chunk before it). */
void server_ollama_final(server_job *j, json_t *text, const char *reason, const json_t *calls,
                         const server_ollama_counts *c);

#endif /* LARES_SERVER_OLLAMA_H */
