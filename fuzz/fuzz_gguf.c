/*
 * libFuzzer target: the GGUF reader on arbitrary bytes. Whatever parses must
 * also survive every accessor the rest of lares uses on it, the layer plan
 * and the model's binding of its weights.
 */
#include "gguf/gguf.h"
#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = NULL;
    lares_error err;
    if (gguf_open_memory(data, size, "fuzz.gguf", &f, &err) != LARES_OK) {
        return 0;
    }
    volatile uint64_t sink = 0;
    for (uint64_t i = 0; i < gguf_n_kv(f); i++) {
        const char *key = gguf_kv_key(f, i);
        sink += (uint64_t)gguf_find_kv(f, key);
        uint64_t u;
        int64_t s;
        double d;
        gguf_str str;
        gguf_arr arr;
        if (gguf_kv_u64(f, i, &u, &err) == LARES_OK) {
            sink += u;
        }
        if (gguf_kv_i64(f, i, &s, &err) == LARES_OK) {
            sink += (uint64_t)s;
        }
        if (gguf_kv_f64(f, i, &d, &err) == LARES_OK) {
            sink += (uint64_t)(d == d);
        }
        if (gguf_kv_str(f, i, &str, &err) == LARES_OK && str.len > 0) {
            sink += (uint8_t)str.ptr[str.len - 1];
        }
        if (gguf_kv_arr(f, i, &arr, &err) == LARES_OK && arr.n > 0) {
            if (arr.type == GGUF_VT_STRING) {
                gguf_str e = gguf_arr_str(&arr, arr.n - 1);
                sink += e.len;
            } else {
                sink += (uint64_t)gguf_arr_i64(&arr, arr.n - 1);
                sink += gguf_arr_f64(&arr, 0) != 0; /* casting an out-of-range double is UB */
            }
        }
    }
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        sink += gguf_find_tensor(f, t->name) == t;
        if (t->nbytes > 0) {
            sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
        }
    }
    sink += gguf_header_hash(f);
    model_plan *p = NULL;
    if (model_plan_make(f, &p, &err) == LARES_OK) {
        for (int32_t l = 0; l < p->hp.n_layer; l++) {
            sink += (uint64_t)p->layers[l].n_ops + p->layers[l].bytes;
        }
        model_plan_free(p);
    }
    model *m = NULL;
    if (model_load(f, &m, &err) == LARES_OK) {
        sink += (uint64_t)m->hp.n_layer;
        model_free(m);
    }
    (void)sink;
    gguf_close(f);
    return 0;
}
