/*
 * Re-encoding a GGUF file in another mix of block types. Every tensor is
 * dequantized row by row to F32 and quantized with the reference quantizer of
 * its new type (quant/), in parallel over rows, and streamed out in directory
 * order, so the output is never held in memory whole. Metadata is copied;
 * general.file_type says the new mix.
 */
#include "gguf/gguf.h"
#include "model/model.h"
#include "ops/ops.h"

lares_quantize_opts lares_quantize_opts_default(void) {
    lares_quantize_opts o = {0};
    return o;
}

const char *lares_quantize_types(void) {
    return model_mix_names();
}

typedef struct requant_task {
    const uint8_t *src;
    size_t src_row_bytes;
    const quant_traits *from; /* source type */
    const quant_traits *to;   /* target type */
    uint8_t *dst;
    size_t dst_row_bytes;
    int64_t n, rows;
    float *scratch; /* nth x n */
} requant_task;

static void requant_rows(void *vctx, int ith, int nth) {
    const requant_task *t = vctx;
    float *row = t->scratch + (size_t)ith * (size_t)t->n;
    int64_t lo, hi;
    ops_split(t->rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        t->from->to_float(t->src + (size_t)r * t->src_row_bytes, row, t->n);
        t->to->from_float_ref(row, t->dst + (size_t)r * t->dst_row_bytes, t->n);
    }
}

lares_status lares_quantize(const char *in_path, const char *out_path, const char *type,
                            const lares_quantize_opts *opts, lares_error *err) {
    const lares_quantize_opts o = opts ? *opts : lares_quantize_opts_default();
    const int mix = type ? model_mix_find(type) : -1;
    if (mix < 0) {
        return lares_fail(err, LARES_EINVAL, "quantize: unknown type '%s' (types: %s)",
                          type ? type : "", model_mix_names());
    }
    gguf_file *in = NULL;
    gguf_writer *w = NULL;
    ops_pool *pool = NULL;
    uint8_t *buf = NULL;
    float *scratch = NULL;
    uint32_t *types = NULL;
    lares_status st = gguf_open(in_path, NULL, &in, err);
    if (st != LARES_OK) {
        return st;
    }
    if ((st = gguf_writer_create(&w, err)) != LARES_OK ||
        (st = ops_pool_create(o.n_threads > 0 ? o.n_threads : lares_cpu_count(), &pool, err))) {
        goto done;
    }
    gguf_str arch = {0};
    (void)gguf_get_str(in, "general.architecture", &arch, NULL);
    char key[96];
    snprintf(key, sizeof key, "%.*s.block_count", (int)LARES_MIN(arch.len, 64), arch.ptr);
    uint32_t n_layer = 0;
    (void)gguf_get_u32(in, key, &n_layer, NULL);
    for (uint64_t i = 0; i < gguf_n_kv(in); i++) {
        if (strcmp(gguf_kv_key(in, i), "general.alignment") == 0) {
            continue; /* the writer decides the layout */
        }
        if ((st = gguf_writer_copy_kv(w, in, i, err)) != LARES_OK) {
            goto done;
        }
    }
    if ((st = gguf_writer_set_u32(w, "general.file_type", model_mix_file_type(mix), err)) ||
        (st = gguf_writer_set_u32(w, "general.quantization_version", 2, err))) {
        goto done;
    }
    const bool tied = gguf_find_tensor(in, "output.weight") == NULL;
    const uint64_t n_t = gguf_n_tensors(in);
    types = lares_alloc_array((size_t)(n_t ? n_t : 1), sizeof *types);
    if (types == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory");
        goto done;
    }
    uint64_t largest = 0, widest = 0, total = 0;
    for (uint64_t i = 0; i < n_t; i++) {
        const gguf_tensor *t = gguf_tensor_at(in, i);
        const quant_traits *from = quant_traits_ref(t->type);
        if (from == NULL || from->to_float == NULL) {
            st = lares_fail(err, LARES_EUNSUPPORTED, "quantize: %s: tensor '%s' has type %s, "
                            "which lares cannot read yet", in_path, t->name,
                            gguf_type_info_of(t->type)->name);
            goto done;
        }
        types[i] = model_mix_type(mix, t->name, t->n_dims, t->ne[0], tied, (int32_t)n_layer);
        if (quant_traits_ref(types[i]) == NULL) {
            st = lares_fail(err, LARES_EUNSUPPORTED, "quantize: lares cannot write type %s yet",
                            gguf_type_info_of(types[i])->name);
            goto done;
        }
        if ((st = gguf_writer_add_tensor(w, t->name, types[i], t->n_dims, t->ne, NULL, err))) {
            goto done;
        }
        uint64_t b = gguf_writer_tensor_bytes(w, i);
        largest = b > largest ? b : largest;
        widest = (uint64_t)t->ne[0] > widest ? (uint64_t)t->ne[0] : widest;
        total += b;
    }
    buf = lares_alloc((size_t)(largest ? largest : 1));
    scratch = lares_alloc_array((size_t)ops_pool_size(pool) * (size_t)(widest ? widest : 1),
                                sizeof *scratch);
    if (buf == NULL || scratch == NULL) {
        st = lares_fail(err, LARES_ENOMEM, "quantize: out of memory for a %" PRIu64 "-byte tensor",
                        largest);
        goto done;
    }
    if ((st = gguf_writer_begin(w, out_path, err)) != LARES_OK) {
        goto done;
    }
    uint64_t written = 0;
    for (uint64_t i = 0; i < n_t; i++) {
        const gguf_tensor *t = gguf_tensor_at(in, i);
        const uint64_t nb = gguf_writer_tensor_bytes(w, i);
        const uint8_t *out = t->data;
        if (types[i] != t->type) {
            requant_task rt = {.src = t->data,
                               .src_row_bytes = quant_row_bytes(t->type, t->ne[0]),
                               .from = quant_traits_ref(t->type),
                               .to = quant_traits_ref(types[i]),
                               .dst = buf,
                               .dst_row_bytes = quant_row_bytes(types[i], t->ne[0]),
                               .n = t->ne[0],
                               .rows = t->ne[1] * t->ne[2] * t->ne[3],
                               .scratch = scratch};
            ops_pool_run(pool, requant_rows, &rt);
            out = buf;
        }
        if ((st = gguf_writer_write_data(w, out, nb, err)) != LARES_OK) {
            goto done;
        }
        written += nb;
        if (o.progress != NULL) {
            o.progress("quantize", written, total, o.user);
        }
    }
    st = gguf_writer_finish(w, err);
done:
    lares_free(buf);
    lares_free(scratch);
    lares_free(types);
    ops_pool_free(pool);
    gguf_writer_free(w);
    gguf_close(in);
    return st;
}
