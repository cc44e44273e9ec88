/*
 * What the routers of MoE layers choose, measured on every pass (issue 18):
 * how many of a token's experts the previous token of the same layer also
 * chose (the overlap an expert cache lives on), and how often each expert is
 * chosen (its popularity). Only single-token passes count, the ones of
 * generation, where consecutive passes are consecutive tokens. The observer
 * also hands the choice to the expert cache while the weights stream (which
 * says which experts are still being read: exec_experts_wait waits for them).
 */
#include "exec/exec_impl.h"

lares_status exec_routes_build(exec_local *e, lares_error *err) {
    exec_routes *r = &e->r;
    const model_hparams *hp = &e->m->hp;
    if (hp->n_expert <= 0 || e->cx == NULL) {
        return LARES_OK;
    }
    const size_t n = (size_t)hp->n_layer * (size_t)hp->n_expert;
    r->prev = lares_calloc(n, sizeof *r->prev);
    r->prev_ok = lares_calloc((size_t)hp->n_layer, sizeof *r->prev_ok);
    r->counts = lares_calloc(n, sizeof *r->counts);
    if (r->prev == NULL || r->prev_ok == NULL || r->counts == NULL) {
        return lares_fail(err, LARES_ENOMEM, "exec: out of memory for %zu route counters", n);
    }
    model_ctx_on_route(e->cx, exec_routes_observe, exec_experts_wait, e);
    return LARES_OK;
}

void exec_routes_free(exec_local *e) {
    exec_routes *r = &e->r;
    if (e->cx != NULL && e->cx->route_user == e) {
        model_ctx_on_route(e->cx, NULL, NULL, NULL);
    }
    lares_free(r->prev);
    lares_free(r->prev_ok);
    lares_free(r->counts);
    memset(r, 0, sizeof *r);
}

int32_t exec_routes_observe(void *user, int32_t layer, const int32_t *experts, int32_t n,
                            bool *ready) {
    exec_local *e = user;
    exec_routes *r = &e->r;
    const int32_t ne = e->m->hp.n_expert;
    if (r->counts != NULL && layer >= 0 && layer < e->m->hp.n_layer) {
        bool *prev = r->prev + (size_t)layer * (size_t)ne;
        if (r->n_tok == 1) {
            uint64_t shared = 0;
            for (int32_t i = 0; i < n; i++) {
                if (experts[i] >= 0 && experts[i] < ne) {
                    shared += prev[experts[i]] ? 1 : 0;
                    r->counts[(size_t)layer * (size_t)ne + (size_t)experts[i]]++;
                }
            }
            if (r->prev_ok[layer]) {
                r->shared += shared;
                r->pairs++;
            }
        }
        memset(prev, 0, (size_t)ne * sizeof *prev);
        for (int32_t i = 0; i < n; i++) {
            if (experts[i] >= 0 && experts[i] < ne) {
                prev[experts[i]] = true;
            }
        }
        r->prev_ok[layer] = r->n_tok == 1; /* after a batch: which token's choice is unknown */
    }
    return r->to_cache ? exec_experts_on_route(e, layer, experts, n, ready) : 0;
}

void exec_local_route_counts(exec_local *e, uint64_t *out) {
    const size_t n = (size_t)e->m->hp.n_layer * (size_t)LARES_MAX(e->m->hp.n_expert, 0);
    if (e->r.counts != NULL) {
        memcpy(out, e->r.counts, n * sizeof *out);
    } else {
        memset(out, 0, n * sizeof *out);
    }
}
