/* The local executor: layer windows on this device (see exec.h). */
#include "exec/exec.h"

struct exec_local {
    const model *m;  /* borrowed */
    model_kv *kv;    /* borrowed */
    model_ctx *cx;   /* borrowed */
    exec_opts o;
};

lares_status exec_local_create(const model *m, model_kv *kv, model_ctx *cx, const exec_opts *o,
                               exec_local **out, lares_error *err) {
    exec_local *e = lares_calloc(1, sizeof *e);
    if (e == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    e->m = m;
    e->kv = kv;
    e->cx = cx;
    if (o != NULL) {
        e->o = *o;
    }
    *out = e;
    return LARES_OK;
}

void exec_local_free(exec_local *e) {
    lares_free(e);
}

lares_status exec_local_forward(exec_local *e, int32_t l0, int32_t l1, const int32_t *pos,
                                int32_t n_tok, float *x, lares_error *err) {
    return model_forward(e->m, e->kv, e->cx, l0, l1, pos, n_tok, x, err);
}
