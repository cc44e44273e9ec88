/* Opening and closing models, and what the public API tells about them. */
#include "api/api.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>

lares_model_opts lares_model_opts_default(void) {
    lares_model_opts o = {.vocab_only = false};
    return o;
}

void lares_model_close(lares_model *lm) {
    if (lm == NULL) {
        return;
    }
    model_free(lm->m);
    text_vocab_free(lm->vocab);
    gguf_close(lm->file);
    if (lm->copy != NULL) {
        mem_buffer_unmap(lm->copy, (size_t)lm->copy_bytes);
    }
    lares_free(lm->path);
    lares_free(lm);
}

/* The file read into anonymous memory (huge pages where offered) rather
 * than mapped: in the paravirtualised VM of 2026-12-02 a pass over 607 MB
 * of mapped 4 KiB pages took 20 ms warm and 54-162 ms after another process
 * ran or after 300 ms idle, the same bytes on 2 MiB pages 20-24 ms every
 * time (docs/memory.md, "Weights read into memory") */
static lares_status open_copy(lares_model *lm, const char *path, lares_error *err) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        return lares_fail(err, errno == ENOENT ? LARES_ENOTFOUND : LARES_EIO, "%s: %s", path,
                          strerror(errno));
    }
    if (sb.st_size <= 0 || (uint64_t)sb.st_size > SIZE_MAX) {
        return gguf_open(path, NULL, &lm->file, err); /* its own message */
    }
    lm->copy_bytes = (uint64_t)sb.st_size;
    lm->copy = mem_buffer_map((size_t)lm->copy_bytes);
    if (lm->copy == NULL) {
        return lares_fail(err, LARES_ENOMEM, "%s: no memory to read its %" PRIu64 " bytes into",
                          path, lm->copy_bytes);
    }
    const gguf_open_opts go = {.into = lm->copy, .into_bytes = lm->copy_bytes};
    return gguf_open(path, &go, &lm->file, err);
}

lares_status lares_model_open(const char *path, const lares_model_opts *opts, lares_model **out,
                              lares_error *err) {
    lares_model_opts o = opts ? *opts : lares_model_opts_default();
    uint64_t t0 = lares_now_ns();
    lares_model *lm = lares_calloc(1, sizeof *lm);
    if (lm == NULL || (lm->path = lares_strdup(path)) == NULL) {
        lares_free(lm);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    lares_status st = o.no_mmap ? open_copy(lm, path, err) : gguf_open(path, NULL, &lm->file, err);
    if (st == LARES_OK) {
        st = text_vocab_load(lm->file, &lm->vocab, err);
    }
    if (st == LARES_OK && !o.vocab_only) {
        st = model_load(lm->file, &lm->m, err);
        if (st == LARES_OK && lm->m->hp.n_vocab != text_vocab_n(lm->vocab)) {
            st = lares_fail(err, LARES_EFORMAT, "%s: the model has %d token rows, the vocabulary %d",
                            path, lm->m->hp.n_vocab, text_vocab_n(lm->vocab));
        }
    }
    if (st != LARES_OK) {
        lares_model_close(lm);
        return st;
    }
    gguf_str name;
    if (gguf_get_str(lm->file, "general.name", &name, NULL) == LARES_OK) {
        snprintf(lm->name, sizeof lm->name, "%.*s", (int)LARES_MIN(name.len, sizeof lm->name - 1),
                 name.ptr);
    }
    lm->open_ms = lares_ns_to_ms(lares_now_ns() - t0);
    lares_log(LARES_LOG_INFO, "api: opened %s in %.1f ms", path, lm->open_ms);
    *out = lm;
    return LARES_OK;
}

/* The file's type as its writer named it (general.file_type: "q4_k_m"), else
 * the weight type holding the most bytes. */
static const char *file_type_name(const gguf_file *f) {
    uint32_t ft;
    if (gguf_get_u32(f, "general.file_type", &ft, NULL) == LARES_OK) {
        const int mix = model_mix_by_file_type(ft);
        if (mix >= 0) {
            return model_mix_name(mix);
        }
    }
    uint64_t bytes[GGUF_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        bytes[t->type] += t->nbytes;
    }
    int best = 0;
    for (int t = 1; t < GGUF_TYPE_COUNT; t++) {
        if (bytes[t] > bytes[best]) {
            best = t;
        }
    }
    const gguf_type_info *ti = gguf_type_info_of((uint32_t)best);
    return ti ? ti->name : "?";
}

void lares_model_get_info(const lares_model *lm, lares_model_info *out) {
    memset(out, 0, sizeof *out);
    out->file_bytes = gguf_file_bytes(lm->file);
    out->n_vocab = text_vocab_n(lm->vocab);
    out->file_type = file_type_name(lm->file);
    out->name = lm->name;
    out->arch = "";
    for (uint64_t i = 0; i < gguf_n_tensors(lm->file); i++) {
        out->weight_bytes += gguf_tensor_at(lm->file, i)->nbytes;
    }
    out->in_memory = gguf_in_memory(lm->file);
    if (lm->m != NULL) {
        const model_hparams *hp = &lm->m->hp;
        out->arch = hp->arch_name;
        out->n_layer = hp->n_layer;
        out->n_embd = hp->n_embd;
        out->n_ff = hp->n_ff;
        out->n_head = hp->n_head;
        out->n_head_kv = hp->n_head_kv;
        out->head_dim = hp->head_dim;
        out->n_ctx_train = hp->n_ctx_train;
        out->n_expert = hp->n_expert;
        out->n_expert_used = hp->n_expert_used;
    }
}

lares_status lares_force_isa(const char *name, lares_error *err) {
    static const struct {
        const char *name;
        quant_isa isa;
    } isas[] = {{"auto", QUANT_ISA_AUTO},
                {"scalar", QUANT_ISA_SCALAR},
                {"avx2", QUANT_ISA_AVX2},
                {"avxvnni", QUANT_ISA_AVXVNNI},
                {"avx512", QUANT_ISA_AVX512},
                {"neon", QUANT_ISA_NEON},
                {"neon-nodot", QUANT_ISA_NEON_NODOT},
                {"neon-i8mm", QUANT_ISA_NEON_I8MM}};
    for (size_t i = 0; i < LARES_ARRAY_LEN(isas); i++) {
        if (strcmp(name, isas[i].name) == 0) {
            return quant_force_isa(isas[i].isa, err);
        }
    }
    return lares_fail(err, LARES_EINVAL, "unknown instruction set '%s' (auto, scalar, avx2, avxvnni, avx512, "
                      "neon, neon-nodot, neon-i8mm)",
                      name);
}

const char *lares_isa(void) {
    return quant_isa_name();
}

const char *lares_cpu_flags(void) {
    return quant_cpu_flags();
}

const char *lares_version(void) {
    return "0.1.0";
}
