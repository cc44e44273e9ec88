/*
 * server/anthropic: Anthropic's Messages API, requests and replies
 * (anthropic.c); the route is in http.c, the generation in worker.c.
 */
#ifndef LARES_SERVER_ANTHROPIC_H
#define LARES_SERVER_ANTHROPIC_H

#include "server/server_impl.h"

/* POST /v1/messages: parsed and validated as the OpenAI chat request it
 * amounts to, with dialect SERVER_ANTHROPIC. */
bool server_anthropic_parse(const char *body, size_t len, server_request *out, server_error *e);
/* {"type": "error", "error": {"type", "message"}} */
json_t *server_anthropic_error_json(const server_error *e);
/* streamed: message_start and content_block_start */
void server_anthropic_start(server_job *j);
/* streamed: one content_block_delta (takes the reference to text) */
void server_anthropic_delta(server_job *j, json_t *text);
/* the end: streamed, the closing events (text is dropped); else the whole
 * message with text. reason: end_turn, max_tokens or stop_sequence. */
/* The end of the reply; calls (borrowed, may be NULL): tool_use blocks
 * after the text. Takes the reference to text. */
void server_anthropic_end(server_job *j, json_t *text, const char *reason, const char *stop_seq,
                          const json_t *calls, size_t out_tokens);
/* streamed: an "error" event */
void server_anthropic_error_event(server_job *j, const server_error *e);

#endif /* LARES_SERVER_ANTHROPIC_H */
