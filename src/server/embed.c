/*
 * /v1/embeddings on the worker: one vector per input from lares_embed
 * (final hidden states, mean-pooled, unit length), as OpenAI's Embeddings
 * API shapes it: {"object": "list", "data": [{"object": "embedding",
 * "index", "embedding"}], "model", "usage"}. An embedding is a list of
 * numbers, or with encoding_format "base64" the base64 of its float32
 * values in little-endian byte order (what the openai clients ask for by
 * default and decode themselves).
 */
#include "core/core.h"
#include "server/server_impl.h"

#include <string.h>

/* RFC 4648 section 4, with padding */
static char *base64_floats(const float *v, size_t n) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t bytes = n * 4;
    char *out = lares_alloc_array((bytes + 2) / 3 * 4 + 1, 1);
    if (out == NULL) {
        return NULL;
    }
    size_t o = 0;
    uint32_t acc = 0;
    int have = 0;
    for (size_t i = 0; i < bytes; i++) {
        uint32_t u;
        memcpy(&u, &v[i / 4], sizeof u);
        acc = (acc << 8) | ((u >> (8 * (i % 4))) & 0xffu); /* little-endian bytes */
        if (++have == 3) {
            out[o++] = abc[(acc >> 18) & 63];
            out[o++] = abc[(acc >> 12) & 63];
            out[o++] = abc[(acc >> 6) & 63];
            out[o++] = abc[acc & 63];
            acc = 0;
            have = 0;
        }
    }
    if (have > 0) {
        acc <<= 8 * (3 - have);
        out[o++] = abc[(acc >> 18) & 63];
        out[o++] = abc[(acc >> 12) & 63];
        out[o++] = have == 2 ? abc[(acc >> 6) & 63] : '=';
        out[o++] = '=';
    }
    out[o] = '\0';
    return out;
}

static json_t *vector_json(const float *v, size_t n, bool base64) {
    if (base64) {
        char *s = base64_floats(v, n);
        json_t *j = s != NULL ? json_string(s) : NULL;
        lares_free(s);
        return j;
    }
    json_t *a = json_array();
    for (size_t i = 0; i < n && a != NULL; i++) {
        json_array_append_new(a, json_real((double)v[i]));
    }
    return a;
}

static void fail(server_job *j, const char *msg) {
    server_error e;
    server_fail(&e, 500, "server_error", NULL, NULL, "%s", msg);
    server_job_write_json(j, server_error_json(&e));
    server_job_finish(j, 500);
}

void server_run_embedding(server *sv, server_job *j) {
    const server_request *r = &j->req;
    lares_model_info info;
    lares_model_get_info(sv->m, &info);
    const size_t e = (size_t)info.n_embd;
    float *vec = lares_alloc_array(e, sizeof *vec);
    json_t *data = json_array();
    if (vec == NULL || data == NULL) {
        lares_free(vec);
        json_decref(data);
        fail(j, "out of memory for an embedding");
        return;
    }
    const uint64_t t0 = lares_now_ns();
    for (size_t i = 0; i < r->n_inputs; i++) {
        lares_error err = {0};
        if (atomic_load(&j->cancel)) {
            server_job_finish(j, 499); /* the client left: nobody to answer */
            break;
        }
        if (lares_embed(sv->s, r->inputs[i].ids, r->inputs[i].n_ids, vec, e, &err) != LARES_OK) {
            fail(j, err.msg);
            break;
        }
        json_t *item = json_object();
        json_object_set_new(item, "object", json_string("embedding"));
        json_object_set_new(item, "index", json_integer((json_int_t)i));
        json_object_set_new(item, "embedding", vector_json(vec, e, r->base64));
        json_array_append_new(data, item);
    }
    const double secs = (double)(lares_now_ns() - t0) / 1e9;
    lares_free(vec);
    pthread_mutex_lock(&j->mu);
    const bool done = j->done;
    pthread_mutex_unlock(&j->mu);
    if (!done) {
        json_t *o = json_object();
        json_object_set_new(o, "object", json_string("list"));
        json_object_set_new(o, "data", data);
        data = NULL;
        json_object_set_new(o, "model", json_string(sv->model_id));
        json_t *usage = json_object();
        json_object_set_new(usage, "prompt_tokens", json_integer((json_int_t)j->n_ids));
        json_object_set_new(usage, "total_tokens", json_integer((json_int_t)j->n_ids));
        json_object_set_new(o, "usage", usage);
        /* 9 significant digits give a float32 back exactly */
        char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
        json_decref(o);
        if (s != NULL) {
            server_job_write(j, s, strlen(s));
            free(s);
            server_job_finish(j, 200);
        } else {
            fail(j, "out of memory writing the reply");
        }
    }
    json_decref(data);
    int32_t n_past = 0;
    lares_session_tokens(sv->s, &n_past);
    pthread_mutex_lock(&sv->mu);
    sv->mx.prompt_tokens += j->n_ids;
    sv->mx.prompt_seconds += secs;
    sv->mx.kv_tokens = n_past;
    pthread_mutex_unlock(&sv->mu);
}
