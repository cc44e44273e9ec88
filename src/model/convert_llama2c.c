/*
 * llama2.c checkpoints to GGUF (karpathy/llama2.c, run.c: Config, the order of
 * TransformerWeights, and the tokenizer file written by tokenizer.py).
 *
 * Checkpoint: 7 little-endian int32 (dim, hidden_dim, n_layers, n_heads,
 * n_kv_heads, vocab_size, seq_len; a negative vocab_size means the output
 * classifier is stored separately), then F32 arrays: token embedding, attention
 * norms, wq, wk, wv, wo, FFN norms, w1 (gate), w2 (down), w3 (up), final norm,
 * two RoPE tables of seq_len x head_size/2 (unused: lares computes RoPE), and
 * the classifier when not shared. Matrices are stored output-major, which is
 * GGUF's row order, and llama2.c rotates adjacent pairs as GGUF llama files
 * do, so no weight is permuted.
 *
 * Tokenizer: int32 max_token_length, then per token a float score, an int32
 * length and the bytes. llama2.c writes spaces as ' ' and BOS/EOS as
 * "\n<s>\n"/"\n</s>\n"; GGUF's llama vocabulary uses U+2581 and plain "<s>".
 */
#include "gguf/gguf.h"
#include "model/model.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct mapped {
    const uint8_t *p;
    size_t n;
    int fd;
} mapped;

static lares_status map_file(const char *path, mapped *m, lares_error *err) {
    m->p = NULL;
    m->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (m->fd < 0) {
        return lares_fail(err, errno == ENOENT ? LARES_ENOTFOUND : LARES_EIO, "%s: %s", path,
                          strerror(errno));
    }
    struct stat sb;
    if (fstat(m->fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size <= 0) {
        close(m->fd);
        return lares_fail(err, LARES_EFORMAT, "%s: not a non-empty regular file", path);
    }
    m->n = (size_t)sb.st_size;
    void *p = mmap(NULL, m->n, PROT_READ, MAP_PRIVATE, m->fd, 0);
    if (p == MAP_FAILED) {
        close(m->fd);
        return lares_fail(err, LARES_EIO, "%s: cannot map: %s", path, strerror(errno));
    }
    m->p = p;
    return LARES_OK;
}

static void unmap_file(mapped *m) {
    if (m->p != NULL) {
        munmap((void *)m->p, m->n);
        close(m->fd);
        m->p = NULL;
    }
}

typedef struct l2c_config {
    int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
    bool shared_classifier;
} l2c_config;

static lares_status read_config(const char *path, const mapped *ck, l2c_config *c,
                                lares_error *err) {
    if (ck->n < 28) {
        return lares_fail(err, LARES_EFORMAT, "%s: truncated: %zu bytes, the header needs 28",
                          path, ck->n);
    }
    int32_t h[7];
    for (int i = 0; i < 7; i++) {
        h[i] = (int32_t)rd_u32le(ck->p + 4 * i);
    }
    c->dim = h[0];
    c->hidden_dim = h[1];
    c->n_layers = h[2];
    c->n_heads = h[3];
    c->n_kv_heads = h[4];
    c->shared_classifier = h[5] > 0;
    c->vocab_size = h[5] > 0 ? h[5] : (h[5] == INT32_MIN ? 0 : -h[5]);
    c->seq_len = h[6];
    if (c->dim < 1 || c->hidden_dim < 1 || c->n_layers < 1 || c->n_heads < 1 ||
        c->n_kv_heads < 1 || c->vocab_size < 1 || c->seq_len < 1 || c->dim > (1 << 20) ||
        c->hidden_dim > (1 << 22) || c->n_layers > 4096 || c->vocab_size > (1 << 24) ||
        c->seq_len > (1 << 24) || c->dim % c->n_heads != 0 || c->n_heads % c->n_kv_heads != 0 ||
        (c->dim / c->n_heads) % 2 != 0) {
        return lares_fail(err, LARES_EFORMAT,
                          "%s: not a llama2.c checkpoint (dim %d, hidden %d, layers %d, heads "
                          "%d/%d, vocab %d, seq_len %d)",
                          path, h[0], h[1], h[2], h[3], h[4], h[5], h[6]);
    }
    /* the exact size this shape needs, in floats */
    const uint64_t d = (uint64_t)c->dim, hd = (uint64_t)c->hidden_dim, L = (uint64_t)c->n_layers,
                   v = (uint64_t)c->vocab_size, head = d / (uint64_t)c->n_heads,
                   kvd = head * (uint64_t)c->n_kv_heads;
    uint64_t floats = v * d + L * d + L * d * d + 2 * L * d * kvd + L * d * d + L * d +
                      3 * L * d * hd + d + (uint64_t)c->seq_len * head;
    if (!c->shared_classifier) {
        floats += v * d;
    }
    if (28 + 4 * floats != ck->n) {
        return lares_fail(err, LARES_EFORMAT,
                          "%s: %zu bytes, but a checkpoint of this shape has %" PRIu64, path,
                          ck->n, 28 + 4 * floats);
    }
    return LARES_OK;
}

/* Parses the tokenizer into views plus GGUF-style rewritten strings. */
typedef struct l2c_vocab {
    gguf_str *tok;   /* owned; views into blob */
    float *score;    /* owned */
    int32_t *type;   /* owned */
    char *blob;      /* owned */
} l2c_vocab;

static void vocab_free(l2c_vocab *v) {
    lares_free(v->tok);
    lares_free(v->score);
    lares_free(v->type);
    lares_free(v->blob);
}

static bool is_byte_token(const uint8_t *s, uint32_t n) {
    return n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>';
}

static lares_status read_vocab(const char *path, const mapped *tk, int32_t n_vocab, l2c_vocab *v,
                               lares_error *err) {
    memset(v, 0, sizeof *v);
    if (tk->n < 4) {
        return lares_fail(err, LARES_EFORMAT, "%s: truncated tokenizer file", path);
    }
    const uint32_t max_len = rd_u32le(tk->p);
    v->tok = lares_calloc((size_t)n_vocab, sizeof *v->tok);
    v->score = lares_calloc((size_t)n_vocab, sizeof *v->score);
    v->type = lares_calloc((size_t)n_vocab, sizeof *v->type);
    /* U+2581 takes 3 bytes where ' ' took 1: at most 3x the file */
    v->blob = lares_alloc(tk->n * 3 + 1);
    if (!v->tok || !v->score || !v->type || !v->blob) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    size_t off = 4, out = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (tk->n - off < 8) {
            return lares_fail(err, LARES_EFORMAT,
                              "%s: truncated at token %d of %d (offset %zu)", path, i, n_vocab,
                              off);
        }
        v->score[i] = rd_f32le(tk->p + off);
        uint32_t len = rd_u32le(tk->p + off + 4);
        off += 8;
        if (len > max_len || len > tk->n - off) {
            return lares_fail(err, LARES_EFORMAT,
                              "%s: token %d claims %" PRIu32 " bytes (max %" PRIu32
                              ", %zu left)",
                              path, i, len, max_len, tk->n - off);
        }
        const uint8_t *s = tk->p + off;
        off += len;
        char *dst = v->blob + out;
        size_t n = 0;
        if (len >= 2 && s[0] == '\n' && s[len - 1] == '\n') {
            s++; /* "\n<s>\n" -> "<s>" */
            len -= 2;
        }
        for (uint32_t j = 0; j < len; j++) {
            if (s[j] == ' ') {
                memcpy(dst + n, "\xe2\x96\x81", 3);
                n += 3;
            } else {
                dst[n++] = (char)s[j];
            }
        }
        v->tok[i].ptr = dst;
        v->tok[i].len = n;
        out += n;
        v->type[i] = i == 0                 ? 2 /* unknown */
                     : (i == 1 || i == 2)   ? 3 /* control: BOS, EOS */
                     : is_byte_token(s, len) ? 6 /* byte */
                                            : 1; /* normal */
    }
    return LARES_OK;
}

lares_status lares_convert_llama2c(const char *ckpt_path, const char *tok_path,
                                   const char *out_path, lares_error *err) {
    mapped ck = {0}, tk = {0};
    l2c_vocab voc = {0};
    gguf_writer *w = NULL;
    l2c_config c = {0};
    lares_status st = map_file(ckpt_path, &ck, err);
    if (st == LARES_OK) {
        st = read_config(ckpt_path, &ck, &c, err);
    }
    if (st == LARES_OK) {
        st = map_file(tok_path, &tk, err);
    }
    if (st == LARES_OK) {
        st = read_vocab(tok_path, &tk, c.vocab_size, &voc, err);
    }
    if (st == LARES_OK) {
        st = gguf_writer_create(&w, err);
    }
    if (st != LARES_OK) {
        goto done;
    }
    const int32_t head = c.dim / c.n_heads, kvd = head * c.n_kv_heads;
#define TRY(x)                                                                                     \
    if ((st = (x)) != LARES_OK)                                                                    \
    goto done
    TRY(gguf_writer_set_str(w, "general.architecture", "llama", err));
    TRY(gguf_writer_set_str(w, "general.name", "llama2.c checkpoint", err));
    TRY(gguf_writer_set_u32(w, "llama.context_length", (uint32_t)c.seq_len, err));
    TRY(gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)c.dim, err));
    TRY(gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)c.hidden_dim, err));
    TRY(gguf_writer_set_u32(w, "llama.block_count", (uint32_t)c.n_layers, err));
    TRY(gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)c.n_heads, err));
    TRY(gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)c.n_kv_heads, err));
    TRY(gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)head, err));
    /* run.c normalises with 1e-5 and rotates with base 10000 */
    TRY(gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f, err));
    TRY(gguf_writer_set_f32(w, "llama.rope.freq_base", 10000.0f, err));
    TRY(gguf_writer_set_u32(w, "general.file_type", 0, err));
    TRY(gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", err));
    TRY(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", voc.tok, (uint64_t)c.vocab_size, err));
    TRY(gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VT_F32, voc.score,
                            (uint64_t)c.vocab_size, err));
    TRY(gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_I32, voc.type,
                            (uint64_t)c.vocab_size, err));
    TRY(gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0, err));
    TRY(gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1, err));
    TRY(gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2, err));
    TRY(gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true, err));

    /* walk the checkpoint's arrays in run.c's order */
    const float *p = (const float *)(ck.p + 28);
    const size_t d = (size_t)c.dim, hd = (size_t)c.hidden_dim, L = (size_t)c.n_layers,
                 v = (size_t)c.vocab_size;
    const float *emb = p, *att_norm = emb + v * d, *wq = att_norm + L * d, *wk = wq + L * d * d,
                *wv = wk + L * d * (size_t)kvd, *wo = wv + L * d * (size_t)kvd,
                *ffn_norm = wo + L * d * d, *w1 = ffn_norm + L * d, *w2 = w1 + L * d * hd,
                *w3 = w2 + L * hd * d, *final_norm = w3 + L * d * hd,
                *wcls = final_norm + d + (size_t)c.seq_len * (size_t)head;
    int64_t ne[2];
#define ADD(name, ptr, n0, n1)                                                                     \
    ne[0] = (int64_t)(n0);                                                                         \
    ne[1] = (int64_t)(n1);                                                                         \
    TRY(gguf_writer_add_tensor(w, name, GGUF_TYPE_F32, (n1) == 1 ? 1 : 2, ne, ptr, err))
    ADD("token_embd.weight", emb, d, v);
    ADD("output_norm.weight", final_norm, d, 1);
    if (!c.shared_classifier) {
        ADD("output.weight", wcls, d, v);
    }
    char name[64];
    for (size_t l = 0; l < L; l++) {
#define LNAME(s) (snprintf(name, sizeof name, "blk.%zu." s, l), name)
        ADD(LNAME("attn_norm.weight"), att_norm + l * d, d, 1);
        ADD(LNAME("attn_q.weight"), wq + l * d * d, d, d);
        ADD(LNAME("attn_k.weight"), wk + l * d * (size_t)kvd, d, kvd);
        ADD(LNAME("attn_v.weight"), wv + l * d * (size_t)kvd, d, kvd);
        ADD(LNAME("attn_output.weight"), wo + l * d * d, d, d);
        ADD(LNAME("ffn_norm.weight"), ffn_norm + l * d, d, 1);
        ADD(LNAME("ffn_gate.weight"), w1 + l * d * hd, d, hd);
        ADD(LNAME("ffn_down.weight"), w2 + l * hd * d, hd, d);
        ADD(LNAME("ffn_up.weight"), w3 + l * d * hd, d, hd);
#undef LNAME
    }
#undef ADD
#undef TRY
    st = gguf_writer_write_file(w, out_path, err);
done:
    gguf_writer_free(w);
    vocab_free(&voc);
    unmap_file(&tk);
    unmap_file(&ck);
    return st;
}
