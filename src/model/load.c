/*
 * Binding a GGUF file to its layer plan (plan.c): every weight the plan found
 * gets its type checked and a view kept into the mapping (weights are never
 * copied; vectors stored as F16/BF16 are widened to F32 copies).
 */
#include "model/model.h"

#include <math.h>

void model_free(model *m) {
    if (m == NULL) {
        return;
    }
    for (size_t i = 0; i < m->n_owned; i++) {
        lares_free(m->owned[i]);
    }
    for (int32_t i = 0; m->layers != NULL && i < m->hp.n_layer; i++) {
        for (int r = 0; r < MODEL_ROLE_COUNT; r++) {
            lares_free(m->layers[i].exps[r]);
        }
    }
    model_plan_free(m->plan);
    lares_free(m->owned);
    lares_free(m->layers);
    lares_free(m->rope_inv_freq);
    lares_free(m);
}

/* ---- tensors ---- */

/* Views of the n_stack experts of a stacked tensor. */
static lares_status bind_experts(const model *m, const model_weight *w, ops_matrix **out,
                                 lares_error *err) {
    *out = lares_calloc((size_t)w->n_stack, sizeof **out);
    if (*out == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    for (int32_t e = 0; e < w->n_stack; e++) {
        lares_status st = ops_matrix_init(&(*out)[e], (const uint8_t *)w->t->data + e * w->bytes,
                                          w->t->type, w->n_in, w->n_out, w->t->name, err);
        if (st != LARES_OK) {
            lares_error_prefix(err, "%s: ", gguf_path(m->file));
            return st;
        }
    }
    return LARES_OK;
}

static lares_status bind_matrix(const model *m, const model_weight *w, ops_matrix *out,
                                lares_error *err) {
    lares_status st = ops_matrix_init(out, w->t->data, w->t->type, w->n_in, w->n_out, w->t->name,
                                      err);
    if (st != LARES_OK) {
        lares_error_prefix(err, "%s: ", gguf_path(m->file));
    }
    return st;
}

static lares_status keep_owned(model *m, void *p, size_t bytes, lares_error *err) {
    void **n = lares_realloc(m->owned, (m->n_owned + 1) * sizeof *n);
    if (n == NULL) {
        lares_free(p);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    m->owned = n;
    m->owned[m->n_owned++] = p;
    m->owned_bytes += bytes;
    return LARES_OK;
}

/* A vector: a view when stored as F32, else a counted F32 copy. */
static lares_status bind_vector(model *m, const model_weight *w, const float **out,
                                lares_error *err) {
    const gguf_tensor *t = w->t;
    const int64_t n = w->n_in;
    *out = NULL;
    if (t->type == GGUF_TYPE_F32) {
        *out = t->data;
        return LARES_OK;
    }
    const quant_traits *qt = quant_traits_of(t->type);
    if (qt == NULL || n % qt->blck_elems != 0) {
        const gguf_type_info *ti = gguf_type_info_of(t->type);
        return lares_fail(err, LARES_EUNSUPPORTED, "%s: tensor '%s' has unsupported type %s",
                          gguf_path(m->file), t->name, ti ? ti->name : "?");
    }
    float *v = lares_alloc_array((size_t)n, sizeof *v);
    if (v == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    qt->to_float(t->data, v, n);
    *out = v;
    return keep_owned(m, v, (size_t)n * sizeof *v, err);
}

/* Every weight the plan found for the layer, by role. */
static lares_status bind_layer(model *m, int il, lares_error *err) {
    const model_layer_plan *lp = &m->plan->layers[il];
    model_layer *l = &m->layers[il];
    for (int r = 0; r < MODEL_ROLE_COUNT; r++) {
        const model_weight *w = &lp->w[r];
        lares_status st = LARES_OK;
        if (w->t == NULL) {
            continue;
        }
        switch (w->form) {
        case MODEL_FORM_VECTOR:
            st = bind_vector(m, w, &l->vec[r], err);
            break;
        case MODEL_FORM_MATRIX:
            st = bind_matrix(m, w, &l->mat[r], err);
            break;
        case MODEL_FORM_EXPERTS:
            st = bind_experts(m, w, &l->exps[r], err);
            break;
        }
        if (st != LARES_OK) {
            return st;
        }
    }
    return LARES_OK;
}

lares_status model_load(gguf_file *f, model **out, lares_error *err) {
    model *m = lares_calloc(1, sizeof *m);
    if (m == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    m->file = f;
    lares_status st = model_plan_make(f, &m->plan, err);
    if (st != LARES_OK) {
        goto fail;
    }
    m->hp = m->plan->hp;
    const model_plan *p = m->plan;
    model_hparams *hp = &m->hp;
    const gguf_tensor *te = p->embd.t;
    if (quant_traits_of(te->type) == NULL) {
        const gguf_type_info *ti = gguf_type_info_of(te->type);
        st = lares_fail(err, LARES_EUNSUPPORTED,
                        "%s: tensor 'token_embd.weight' has type %s, which lares cannot read yet",
                        gguf_path(f), ti ? ti->name : "?");
        goto fail;
    }
    m->tok_embd = te;
    m->output_tied = p->output_tied;
    if ((st = bind_vector(m, &p->output_norm, &m->output_norm, err)) ||
        (st = bind_matrix(m, &p->output, &m->output, err))) {
        goto fail;
    }
    m->layers = lares_calloc((size_t)hp->n_layer, sizeof *m->layers);
    m->rope_inv_freq = lares_alloc_array((size_t)hp->n_rot / 2, sizeof *m->rope_inv_freq);
    if (m->layers == NULL || m->rope_inv_freq == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
        goto fail;
    }
    for (int il = 0; il < hp->n_layer; il++) {
        if ((st = bind_layer(m, il, err)) != LARES_OK) {
            goto fail;
        }
    }
    /* theta_i = base^(-2i / n_rot), scaled for linear RoPE scaling, and divided
     * by per-dimension factors when the file carries them (Llama-3.1's
     * rope_freqs tensor) */
    const float *factors = NULL;
    if (p->rope_freqs.t != NULL && (st = bind_vector(m, &p->rope_freqs, &factors, err))) {
        goto fail;
    }
    for (int i = 0; i < hp->n_rot / 2; i++) {
        double inv = hp->rope_freq_scale * pow((double)hp->rope_base, -2.0 * i / hp->n_rot);
        if (factors != NULL) {
            if (!(factors[i] > 0.0f)) {
                st = lares_fail(err, LARES_EFORMAT, "%s: rope_freqs.weight[%d] = %g", gguf_path(f),
                                i, factors[i]);
                goto fail;
            }
            inv /= factors[i];
        }
        m->rope_inv_freq[i] = (float)inv;
    }
    *out = m;
    return LARES_OK;
fail:
    model_free(m);
    return st;
}
