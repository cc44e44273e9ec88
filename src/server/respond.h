/*
 * server/respond: JSON pieces of the replies (respond.c), used by the worker.
 */
#ifndef LARES_SERVER_RESPOND_H
#define LARES_SERVER_RESPOND_H

#include "server/server_impl.h"

#define LARES_SERVER_VERSION "0.1.0"

/* one generated token with its log-probabilities */
typedef struct server_tok {
    int32_t id;
    float logprob;
    int32_t n_top;
    int32_t top_ids[SERVER_MAX_LOGPROBS];
    float top_lp[SERVER_MAX_LOGPROBS];
    size_t end; /* where its text ends in the text held back */
} server_tok;

json_t *server_lossy_string(const char *s, size_t n);
/* chat: {"token", "logprob", "bytes", "top_logprobs": [...]} */
json_t *server_chat_logprob(const lares_model *m, const server_tok *t, int32_t n_top);
/* completions: {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []} */
json_t *server_completion_logprobs_new(void);
void server_completion_logprobs_add(json_t *lp, const lares_model *m, const server_tok *t,
                                    int32_t n_top, size_t text_offset);
/* {"id", "object", "created", "model", "system_fingerprint", "choices": []} */
json_t *server_reply_base(const server_job *j, const char *model_id, bool chunk);
/* "data: <json>\n\n" to the client; takes the reference to o */
void server_write_event(server_job *j, json_t *o);

#endif /* LARES_SERVER_RESPOND_H */
