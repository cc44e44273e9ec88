/*
 * From a parsed request to a job that can run: the model name, the prompt's
 * tokens (chat: the template with contents never parsed for special tokens;
 * completions: the text as text, or token ids as given), and whether prompt
 * plus max_tokens fit the context. Runs on the HTTP thread: the model is
 * read-only and the session is not touched.
 */
#include "core/core.h"
#include "server/schema.h"
#include "server/tools.h"

#include <time.h>

static bool fail_from(server_error *e, const lares_error *err, const char *param) {
    int status = err->code == LARES_ENOMEM ? 500 : 400;
    return server_fail(e, status, status == 500 ? "server_error" : "invalid_request_error", NULL,
                       param, "%s", err->msg);
}

/* embeddings: every input as tokens (text with BOS, as a prompt), each
 * within the vocabulary and the context */
static bool prepare_inputs(server *sv, server_job *j, server_error *e) {
    server_request *r = &j->req;
    lares_model_info info;
    lares_model_get_info(sv->m, &info);
    if (r->dimensions != 0 && r->dimensions != info.n_embd) {
        return server_fail(e, 400, "invalid_request_error", NULL, "dimensions",
                           "dimensions is %d; this model's embeddings have %d", r->dimensions,
                           info.n_embd);
    }
    const int32_t n_ctx = lares_session_n_ctx(sv->s);
    lares_error err = {0};
    j->n_ids = 0;
    for (size_t i = 0; i < r->n_inputs; i++) {
        server_input *in = &r->inputs[i];
        if (in->text != NULL) {
            lares_tokenize_opts to = {.add_bos = true, .parse_special = false};
            if (lares_tokenize(sv->m, in->text, in->len, &to, &in->ids, &in->n_ids, &err) !=
                LARES_OK) {
                return fail_from(e, &err, "input");
            }
        }
        for (size_t k = 0; k < in->n_ids; k++) {
            if (in->ids[k] >= sv->n_vocab) {
                return server_fail(e, 400, "invalid_request_error", NULL, "input",
                                   "input %zu: token %d at %zu is outside the vocabulary of %d", i,
                                   in->ids[k], k, sv->n_vocab);
            }
        }
        if (in->n_ids == 0) {
            return server_fail(e, 400, "invalid_request_error", NULL, "input",
                               "input %zu gives no tokens", i);
        }
        if (in->n_ids > (size_t)n_ctx) {
            return server_fail(e, 400, "invalid_request_error", "context_length_exceeded", "input",
                               "this model's maximum context length is %d tokens; input %zu has "
                               "%zu",
                               n_ctx, i, in->n_ids);
        }
        j->n_ids += in->n_ids;
    }
    j->created = (int64_t)time(NULL);
    return true;
}

/* The conversation (with tools, calls and results written in the family's
 * style) into tokens; a forced call's prefix after them, its schema on the
 * request. */
static bool prepare_chat(server *sv, server_job *j, server_error *e) {
    server_request *r = &j->req;
    lares_error err = {0};
    const server_tool_style style = server_tool_style_of(sv->tmpl);
    j->tool_style = (int)style;
    bool has_tool_msgs = r->calls != NULL;
    for (size_t i = 0; i < r->n_msgs && !has_tool_msgs; i++) {
        has_tool_msgs = strcmp(r->msgs[i].role, "tool") == 0;
    }
    if (r->tools == NULL && !has_tool_msgs) {
        if (lares_chat_tokenize(sv->m, sv->tmpl, r->msgs, r->n_msgs, true, &j->ids, &j->n_ids,
                                &err) != LARES_OK) {
            return fail_from(e, &err, "messages");
        }
        return true;
    }
    server_tools_render rm;
    if (!server_tools_render_messages(style, r, &rm, e)) {
        return false;
    }
    lares_status st =
        lares_chat_tokenize(sv->m, sv->tmpl, rm.msgs, rm.n_msgs, true, &j->ids, &j->n_ids, &err);
    server_tools_render_free(&rm);
    if (st != LARES_OK) {
        return fail_from(e, &err, "messages");
    }
    j->tool_calls = r->tools != NULL && r->tool_choice != SERVER_TOOL_NONE;
    j->tool_forced = r->tool_choice == SERVER_TOOL_REQUIRED || r->tool_choice == SERVER_TOOL_NAMED;
    if (!j->tool_forced) {
        return true;
    }
    if ((r->format = server_tools_call_schema(style, r, e)) == NULL) {
        return false;
    }
    const char *prefix = server_tools_forced_prefix(style);
    if (prefix[0] == '\0') {
        return true;
    }
    lares_tokenize_opts to = {.add_bos = false, .parse_special = true};
    int32_t *extra = NULL;
    size_t n_extra = 0;
    if (lares_tokenize(sv->m, prefix, strlen(prefix), &to, &extra, &n_extra, &err) != LARES_OK) {
        return fail_from(e, &err, "tool_choice");
    }
    int32_t *all = lares_realloc(j->ids, (j->n_ids + n_extra) * sizeof *all);
    if (all == NULL) {
        lares_free(extra);
        return server_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    memcpy(all + j->n_ids, extra, n_extra * sizeof *all);
    j->ids = all;
    j->n_ids += n_extra;
    lares_free(extra);
    return true;
}

bool server_prepare(server *sv, server_job *j, server_error *e) {
    server_request *r = &j->req;
    /* Ollama's clients name models "name:tag"; /api/tags lists this one as ":latest" */
    const size_t idn = strlen(sv->model_id);
    const bool tagged =
        strncmp(r->model, sv->model_id, idn) == 0 && strcmp(r->model + idn, ":latest") == 0;
    if (strcmp(r->model, sv->model_id) != 0 && strcmp(r->model, "lares") != 0 && !tagged) {
        return server_fail(e, 404, "invalid_request_error", "model_not_found", "model",
                           "the model '%.64s' does not exist; this server has '%s'", r->model,
                           sv->model_id);
    }
    if (r->kind == SERVER_EMBEDDING) {
        return prepare_inputs(sv, j, e);
    }
    lares_error err = {0};
    if (r->kind == SERVER_CHAT) {
        if (!prepare_chat(sv, j, e)) {
            return false;
        }
    } else if (r->prompt != NULL) {
        lares_tokenize_opts to = {.add_bos = true, .parse_special = false};
        if (lares_tokenize(sv->m, r->prompt, r->prompt_len, &to, &j->ids, &j->n_ids, &err) !=
            LARES_OK) {
            return fail_from(e, &err, "prompt");
        }
    } else {
        for (size_t i = 0; i < r->n_prompt_ids; i++) {
            if (r->prompt_ids[i] >= sv->n_vocab) {
                return server_fail(e, 400, "invalid_request_error", NULL, "prompt",
                                   "prompt[%zu] is token %d, outside the vocabulary of %d", i,
                                   r->prompt_ids[i], sv->n_vocab);
            }
        }
        j->ids = r->prompt_ids; /* moved */
        j->n_ids = r->n_prompt_ids;
        r->prompt_ids = NULL;
        r->n_prompt_ids = 0;
    }
    if (j->n_ids == 0) {
        return server_fail(e, 400, "invalid_request_error", NULL,
                           r->kind == SERVER_CHAT ? "messages" : "prompt",
                           "the prompt gives no tokens");
    }
    const int32_t n_ctx = lares_session_n_ctx(sv->s);
    const int64_t want = r->max_tokens > 0 ? r->max_tokens : 1;
    if ((int64_t)j->n_ids + want > n_ctx) {
        return server_fail(e, 400, "invalid_request_error", "context_length_exceeded",
                           r->kind == SERVER_CHAT ? "messages" : "prompt",
                           "this model's maximum context length is %d tokens; the request has "
                           "%zu prompt tokens and asks for %" PRId64 " more",
                           n_ctx, j->n_ids, r->max_tokens > 0 ? want : (int64_t)1);
    }
    snprintf(j->id, sizeof j->id, "%s-lares%" PRIx64 "x%" PRIu64,
             r->kind == SERVER_CHAT ? "chatcmpl" : "cmpl", (uint64_t)sv->started_at,
             (uint64_t)atomic_fetch_add(&sv->next_id, 1));
    j->created = (int64_t)time(NULL);
    return true;
}
