/*
 * Jobs and the queue. A job carries one request from the HTTP thread that
 * received it to the worker and the reply back; both sides hold a reference.
 * The queue is bounded: a request that finds it full gets 503 at once.
 */
#include "core/core.h"
#include "server/server_impl.h"

server_job *server_job_create(void) {
    server_job *j = lares_calloc(1, sizeof *j);
    if (j == NULL) {
        return NULL;
    }
    if (pthread_mutex_init(&j->mu, NULL) != 0) {
        lares_free(j);
        return NULL;
    }
    if (pthread_cond_init(&j->cv, NULL) != 0) {
        pthread_mutex_destroy(&j->mu);
        lares_free(j);
        return NULL;
    }
    j->refs = 1;
    j->fd = -1;
    j->status = 200;
    atomic_init(&j->cancel, false);
    return j;
}

void server_job_release(server_job *j) {
    if (j == NULL) {
        return;
    }
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0) {
        return;
    }
    server_request_free(&j->req);
    lares_free(j->ids);
    lares_free(j->out);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    lares_free(j);
}

void server_job_write(server_job *j, const char *s, size_t n) {
    pthread_mutex_lock(&j->mu);
    if (!j->oom) {
        /* drop what the client already took before growing */
        if (j->out_pos > 0 && j->out_len + n > j->out_cap) {
            memmove(j->out, j->out + j->out_pos, j->out_len - j->out_pos);
            j->out_len -= j->out_pos;
            j->out_pos = 0;
        }
        if (j->out_len + n > j->out_cap) {
            size_t cap = j->out_cap ? j->out_cap : 4096;
            while (cap < j->out_len + n) {
                cap *= 2;
            }
            char *p = lares_realloc(j->out, cap);
            if (p == NULL) {
                j->oom = true;
            } else {
                j->out = p;
                j->out_cap = cap;
            }
        }
        if (!j->oom) {
            memcpy(j->out + j->out_len, s, n);
            j->out_len += n;
        }
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void server_job_finish(server_job *j, int status) {
    pthread_mutex_lock(&j->mu);
    j->done = true;
    j->status = status;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

bool server_enqueue(server *sv, server_job *j, server_error *e) {
    pthread_mutex_lock(&sv->mu);
    if (sv->stopping) {
        pthread_mutex_unlock(&sv->mu);
        return server_fail(e, 503, "server_error", "shutting_down", NULL,
                           "the server is shutting down");
    }
    const size_t cap = (size_t)sv->o.queue_capacity;
    if (sv->q_len == cap) {
        sv->mx.rejected_busy++;
        pthread_mutex_unlock(&sv->mu);
        return server_fail(e, 503, "server_error", "queue_full", NULL,
                           "the server is busy: %zu requests are waiting; retry later", cap);
    }
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    sv->queue[(sv->q_head + sv->q_len) % cap] = j;
    sv->q_len++;
    if (j->req.kind == SERVER_CHAT) {
        sv->mx.requests_chat++;
    } else if (j->req.kind == SERVER_COMPLETION) {
        sv->mx.requests_completion++;
    } else {
        sv->mx.requests_embedding++;
    }
    pthread_cond_signal(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    return true;
}

void server_cancel_job(server *sv, server_job *j) {
    if (atomic_exchange(&j->cancel, true)) {
        return;
    }
    pthread_mutex_lock(&sv->mu);
    if (sv->running == j) {
        /* the worker clears `running` under this lock after generate returns,
         * so this cannot reach the next job's generation */
        lares_session_cancel(sv->s);
    }
    pthread_mutex_unlock(&sv->mu);
}
