/*
 * model: the forward pass against outside truth. For every model in the
 * expected-output files under ../shared/models/expected that lares runs,
 * greedy decoding from the listed prompt ids must reproduce the reference
 * token ids (computed by an independent F32 reference); the first logits of
 * the BOS-only run must match the reference values; and a batched prompt must
 * give the same result as the same prompt fed token by token.
 */
#include "check.h"
#include "gguf/gguf.h"
#include "greedy_cases.h"
#include "model/model.h"
#include "ops/ops.h"
#include "quant/half.h"

#include <jansson.h>
#include <unistd.h>

typedef struct runner {
    gguf_file *f;
    model *m;
    ops_pool *pool;
    model_kv *kv;
    model_ctx *cx;
    float *x, *logits;
} runner;

static bool runner_open(runner *r, const char *rel, int n_threads, uint32_t kv_type, int n_batch) {
    lares_error err = {0};
    memset(r, 0, sizeof *r);
    CHECK_OK(gguf_open(rel[0] == '/' ? rel : fixture(rel), NULL, &r->f, &err), &err);
    if (r->f == NULL) {
        return false;
    }
    CHECK_OK(model_load(r->f, &r->m, &err), &err);
    if (r->m == NULL) {
        return false;
    }
    CHECK_OK(ops_pool_create(n_threads, &r->pool, &err), &err);
    CHECK_OK(model_kv_create(r->m, 0, r->m->hp.n_layer, 256, kv_type, &r->kv, &err), &err);
    CHECK_OK(model_ctx_create(r->m, r->pool, n_batch, 256, &r->cx, &err), &err);
    r->x = calloc((size_t)n_batch * (size_t)r->m->hp.n_embd, sizeof(float));
    r->logits = calloc((size_t)r->m->hp.n_vocab, sizeof(float));
    return r->kv != NULL && r->cx != NULL;
}

static void runner_close(runner *r) {
    free(r->x);
    free(r->logits);
    model_ctx_free(r->cx);
    model_kv_free(r->kv);
    ops_pool_free(r->pool);
    model_free(r->m);
    gguf_close(r->f);
}

static int32_t argmax(const float *v, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++) {
        if (v[i] > v[b]) {
            b = i;
        }
    }
    return b;
}

/* feeds tokens[0..n) starting at position p0 in batches of up to nb; logits of the last */
static bool feed(runner *r, const int32_t *tokens, int n, int p0, int nb) {
    lares_error err = {0};
    int32_t pos[256];
    for (int done = 0; done < n;) {
        int k = n - done < nb ? n - done : nb;
        for (int i = 0; i < k; i++) {
            pos[i] = p0 + done + i;
        }
        if (model_embed(r->m, tokens + done, k, r->x, &err) != LARES_OK ||
            model_forward(r->m, r->kv, r->cx, 0, r->m->hp.n_layer, pos, k, r->x, &err) !=
                LARES_OK) {
            fprintf(stderr, "forward: %s\n", err.msg);
            return false;
        }
        done += k;
        if (done == n) {
            model_output(r->m, r->cx, r->x + (size_t)(k - 1) * (size_t)r->m->hp.n_embd, 1,
                         r->logits);
        }
    }
    return true;
}

/* greedy continuation; returns how many of the expected ids matched in a row */
static int greedy_agree(runner *r, const int32_t *prompt, int n_prompt, const int32_t *want,
                        int n_want, int nb) {
    if (!feed(r, prompt, n_prompt, 0, nb)) {
        return -1;
    }
    int pos = n_prompt;
    for (int i = 0; i < n_want; i++) {
        int32_t t = argmax(r->logits, r->m->hp.n_vocab);
        if (t != want[i]) {
            return i;
        }
        if (i + 1 < n_want && !feed(r, &t, 1, pos++, nb)) {
            return -1;
        }
    }
    return n_want;
}

/* With an F16 KV cache the Q4_K_M file meets a near-tie at its 6th token
 * (logits 17.39 vs 17.37 in F32), which F16 keys flip: there it is held to the
 * first 5, every other model to its full bar. */
static int min_agree(size_t c, uint32_t kv_type) {
    if (kv_type == GGUF_TYPE_F16 && strstr(greedy_cases[c].file, "Q4_K_M") != NULL) {
        return 5;
    }
    return greedy_cases[c].min_agree;
}

static void test_greedy_once_upon_a_time(uint32_t kv_type, int n_threads, int nb) {
    json_error_t je;
    json_t *root = json_load_file(fixture("expected/greedy_once_upon_a_time.json"), 0, &je);
    CHECK(root != NULL);
    if (root == NULL) {
        return;
    }
    for (size_t c = 0; c < LARES_ARRAY_LEN(greedy_cases); c++) {
        json_t *r = find_result(root, greedy_cases[c].file);
        CHECKF(r != NULL, "%s not in the expected file", greedy_cases[c].file);
        if (r == NULL) {
            continue;
        }
        int32_t prompt[64], want[64];
        int np = ids_from(json_object_get(r, "prompt_token_ids_with_bos"), prompt, 64);
        int nw = ids_from(json_object_get(r, "reference_greedy_token_ids"), want, 64);
        runner run;
        if (!runner_open(&run, greedy_cases[c].file, n_threads, kv_type, nb)) {
            runner_close(&run);
            continue;
        }
        int agree = greedy_agree(&run, prompt, np, want, nw, nb);
        CHECKF(agree >= min_agree(c, kv_type),
               "%s (kv %s, %d threads, batch %d): %d of %d tokens agree", greedy_cases[c].file,
               kv_type == GGUF_TYPE_F16 ? "f16" : "f32", n_threads, nb, agree,
               min_agree(c, kv_type));
        runner_close(&run);
    }
    json_decref(root);
}

static void test_bos_only_logits(void) {
    json_error_t je;
    json_t *root = json_load_file(fixture("expected/greedy_bos_only_reference.json"), 0, &je);
    CHECK(root != NULL);
    if (root == NULL) {
        return;
    }
    const char *files[] = {"stories260K.gguf",
                           "TinyStories-656K.f16.gguf",
                           "derived/TinyStories-656K.f32.llama.gguf",
                           "derived/TinyStories-656K.f32.qwen2-arch.gguf",
                           "derived/stories260K-moe4top2-identical-experts.gguf",
                           "derived/stories260K-moe4top2-perturbed-experts.gguf",
                           "derived/TinyStories-656K-qwen2moe-4x2-shared.gguf",
                           "derived/TinyStories-656K-qwen3moe-4x2-qknorm1.gguf"};
    for (size_t c = 0; c < LARES_ARRAY_LEN(files); c++) {
        json_t *r = find_result(root, files[c]);
        CHECKF(r != NULL, "%s", files[c]);
        if (r == NULL) {
            continue;
        }
        runner run;
        if (!runner_open(&run, files[c], 2, GGUF_TYPE_F32, 8)) {
            runner_close(&run);
            continue;
        }
        int32_t prompt[4], want[64];
        int np = ids_from(json_object_get(r, "prompt_tokens"), prompt, 4);
        int nw = ids_from(json_object_get(r, "greedy_tokens"), want, 64);
        CHECK(feed(&run, prompt, np, 0, 8));
        size_t i;
        json_t *v;
        double worst = 0;
        json_array_foreach(json_object_get(r, "first_logits_head"), i, v) {
            double d = fabs(json_real_value(v) - run.logits[i]);
            worst = d > worst ? d : worst;
        }
        /* the reference prints 5 decimals */
        CHECKF(worst < 2e-4, "%s: first logits differ by %g", files[c], worst);
        int32_t top = argmax(run.logits, run.m->hp.n_vocab);
        CHECK(top ==
              json_integer_value(json_array_get(json_object_get(r, "first_logits_top5"), 0)));
        runner_close(&run);
        /* and the 60-token greedy continuation; the router's choices are
         * counted: one decision per token and MoE layer, k experts each */
        if (runner_open(&run, files[c], 2, GGUF_TYPE_F32, 8)) {
            int agree = greedy_agree(&run, prompt, np, want, nw, 8);
            CHECKF(agree == nw, "%s: BOS-only %d of %d agree", files[c], agree, nw);
            const model_hparams *hp = &run.m->hp;
            uint64_t chosen = 0;
            for (int32_t x = 0; hp->n_expert > 0 && x < hp->n_layer * hp->n_expert; x++) {
                chosen += run.cx->route_counts[x];
            }
            /* BOS and 59 of the 60 generated tokens were fed: 60 per layer */
            const int64_t decisions = json_integer_value(json_object_get(r, "n_routing_decisions"));
            CHECKF((int64_t)chosen == decisions * (hp->n_expert ? hp->n_expert_used : 0),
                   "%s: %" PRIu64 " expert choices for %" PRId64 " decisions", files[c], chosen,
                   decisions);
        }
        runner_close(&run);
    }
    json_decref(root);
}

/* A prompt in one batch and token by token must leave the same logits: up to
 * float rounding where both paths quantize activations alike (Q4_0: Q8_0
 * activations in the GEMM's panels and in the dot products); the K-quants'
 * dot products take Q8_K activations (one scale per 256) and the GEMM Q8_0-
 * style ones (per 32, half the error: test_gemm), so there the bound is the
 * activation rounding's. */
static void test_batch_equals_sequential(void) {
    const int32_t prompt[] = {1, 80, 147, 201, 282, 57, 313, 598, 303, 1049, 1468, 267};
    const int n = (int)LARES_ARRAY_LEN(prompt);
    static const struct {
        const char *file;
        double tol;
    } cases[] = {{"derived/TinyStories-656K.llamacpp-Q4_0.gguf", 1e-3},
                 {"derived/TinyStories-656K.llamacpp-Q4_K_M.gguf", 0.1}};
    for (size_t c = 0; c < LARES_ARRAY_LEN(cases); c++) {
        runner a, b;
        if (runner_open(&a, cases[c].file, 2, GGUF_TYPE_F32, 16) &&
            runner_open(&b, cases[c].file, 1, GGUF_TYPE_F32, 1)) {
            CHECK(feed(&a, prompt, n, 0, 16));
            CHECK(feed(&b, prompt, n, 0, 1));
            double worst = 0;
            for (int32_t i = 0; i < a.m->hp.n_vocab; i++) {
                double d = fabs((double)a.logits[i] - b.logits[i]);
                worst = d > worst ? d : worst;
            }
            CHECKF(worst < cases[c].tol, "%s: batched vs sequential logits differ by %g",
                   cases[c].file, worst);
            printf("  %s: batched vs sequential logits within %.2g\n", cases[c].file, worst);
            CHECK(argmax(a.logits, a.m->hp.n_vocab) == argmax(b.logits, b.m->hp.n_vocab));
        }
        runner_close(&a);
        runner_close(&b);
    }
}

/* A mixture of experts quantized (Q8_0, Q4_0): with a batch whose experts
 * average a panel's worth of rows, each expert's rows are panels of their own
 * and go through the packed GEMM (ops_act_group_panels); with fewer, the
 * few-row product, which is also what a token alone takes (one row an
 * expert), so that a token's logits do not depend on the tokens beside it
 * (a batch's other sequences, a speculative pass's drafts). */
static void test_moe_batch_equals_sequential(void) {
    /* the fixture re-encoded (its widths of 128 take the types of blocks of
     * 32), and a synthetic qwen3moe-tiny in Q4_K_M, whose experts are K-quants:
     * alone their dot takes Q8_K rows (a scale per 256), the few-row product
     * its own rows (a scale per 32), so before the experts' one row went to
     * the few-row product their logits differed in the batch */
    static const char *const types[] = {"q8_0", "q4_0", "q4_k_m"};
    for (size_t ti = 0; ti < LARES_ARRAY_LEN(types); ti++) {
        char path[64];
        snprintf(path, sizeof path, "/tmp/lares-test-moe-%s-%d.gguf", types[ti], (int)getpid());
        lares_error err = {0};
        if (strcmp(types[ti], "q4_k_m") == 0) {
            lares_synth_opts so = lares_synth_opts_default();
            so.preset = "qwen3moe-tiny";
            so.type = types[ti];
            so.vocab_path = fixture("vocab/ggml-vocab-llama-spm.gguf");
            so.n_threads = 2;
            CHECK_OK(lares_synth(&so, path, &err), &err);
        } else {
            lares_quantize_opts qo = lares_quantize_opts_default();
            qo.n_threads = 2;
            CHECK_OK(lares_quantize(fixture("derived/TinyStories-656K-qwen3moe-4x2-qknorm1.gguf"),
                                    path, types[ti], &qo, &err),
                     &err);
        }
        /* 4 experts, 2 a token: 22 tokens give each used expert at most 22
         * rows (the few-row product where the family has one), 100 at least
         * 50 (past OPS_ROWS_MAX: the packed GEMM where the family has one) */
        int32_t prompt[100] = {1,   80,  147, 201, 282, 57,  313, 598, 303,  1049, 1468,
                               267, 411, 29,  918, 77,  640, 351, 122, 1001, 87,   432};
        for (int i = 22; i < 100; i++) {
            prompt[i] = prompt[i - 22] + 7 * (i / 22);
        }
        const int lengths[] = {22, 100};
        /* 22 tokens: every product the few-row product's, in the batch and
         * alone, where the family has one (x86): the same logits to the bit
         * (without one, the dots alone and the tiles in the batch agree to
         * the float rounding). 100 tokens: the dense products and the experts
         * go through the GEMM, whose sums round otherwise, and over 100
         * positions that grew to 0.08 in the logits; an expert's rows handed
         * another expert's panels move them by whole units */
        const double tol[] = {quant_rows() != NULL ? 0.0 : 1e-3, 0.25};
        for (size_t li = 0; li < LARES_ARRAY_LEN(lengths); li++) {
            const int n = lengths[li];
            runner a, b;
            if (runner_open(&a, path, 2, GGUF_TYPE_F32, n) &&
                runner_open(&b, path, 1, GGUF_TYPE_F32, 1)) {
                CHECK(feed(&a, prompt, n, 0, n));
                CHECK(feed(&b, prompt, n, 0, 1));
                double worst = 0;
                for (int32_t i = 0; i < a.m->hp.n_vocab; i++) {
                    double d = fabs((double)a.logits[i] - b.logits[i]);
                    worst = d > worst ? d : worst;
                }
                CHECKF(worst <= tol[li], "MoE %s, %d tokens: batched vs sequential: %g", types[ti],
                       n, worst);
                CHECK(argmax(a.logits, a.m->hp.n_vocab) == argmax(b.logits, b.m->hp.n_vocab));
                printf("  MoE %s, %d tokens (experts by %s): batched vs sequential logits "
                       "within %.2g\n",
                       types[ti], n, n > 22 && quant_panels() != NULL ? "panels" : "rows", worst);
            }
            runner_close(&a);
            runner_close(&b);
        }
        unlink(path);
    }
}

/* Copies a model adding metadata or a rope_freqs tensor (all `factor`). */
static bool variant(const char *src_rel, const char *out, float factor, bool linear_key) {
    lares_error err = {0};
    gguf_file *src = NULL;
    gguf_writer *w = NULL;
    bool ok = gguf_open(fixture(src_rel), NULL, &src, &err) == LARES_OK &&
              gguf_writer_create(&w, &err) == LARES_OK;
    for (uint64_t i = 0; ok && i < gguf_n_kv(src); i++) {
        ok = gguf_writer_copy_kv(w, src, i, &err) == LARES_OK;
    }
    float freqs[64];
    if (ok && linear_key) {
        ok = gguf_writer_set_str(w, "llama.rope.scaling.type", "linear", &err) == LARES_OK &&
             gguf_writer_set_f32(w, "llama.rope.scaling.factor", factor, &err) == LARES_OK;
    } else if (ok) {
        uint32_t n_rot = 0;
        ok = gguf_get_u32(src, "llama.rope.dimension_count", &n_rot, &err) == LARES_OK &&
             n_rot / 2 <= 64;
        for (uint32_t i = 0; i < n_rot / 2; i++) {
            freqs[i] = factor;
        }
        int64_t ne[1] = {n_rot / 2};
        ok = ok && gguf_writer_add_tensor(w, "rope_freqs.weight", GGUF_TYPE_F32, 1, ne, freqs,
                                          &err) == LARES_OK;
    }
    for (uint64_t i = 0; ok && i < gguf_n_tensors(src); i++) {
        const gguf_tensor *t = gguf_tensor_at(src, i);
        ok = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &err) ==
             LARES_OK;
    }
    ok = ok && gguf_writer_write_file(w, out, &err) == LARES_OK;
    CHECKF(ok, "variant: %s", err.msg);
    gguf_writer_free(w);
    gguf_close(src);
    return ok;
}

/* Llama-3.1-style rope_freqs factors and linear RoPE scaling are two ways of
 * stretching positions: a uniform factor of 2 must match linear factor 2, a
 * factor of 1 must match the plain file, and 2 must differ from it. */
static void test_rope_scaling(void) {
    const char *src = "stories260K.gguf";
    const char *a = "/tmp/lares-test-ropefreqs1.gguf", *b = "/tmp/lares-test-ropefreqs2.gguf",
               *c = "/tmp/lares-test-ropelinear2.gguf";
    if (!variant(src, a, 1.0f, false) || !variant(src, b, 2.0f, false) ||
        !variant(src, c, 2.0f, true)) {
        return;
    }
    const int32_t prompt[] = {1, 403, 407, 261, 378, 432, 383, 286};
    const int n = (int)LARES_ARRAY_LEN(prompt);
    float *logits[4] = {NULL};
    const char *paths[4] = {fixture(src), a, b, c};
    int32_t n_vocab = 0;
    for (int i = 0; i < 4; i++) {
        lares_error err = {0};
        runner r;
        memset(&r, 0, sizeof r);
        /* open by absolute path: runner_open expects a fixture name */
        CHECK_OK(gguf_open(paths[i], NULL, &r.f, &err), &err);
        if (r.f == NULL) {
            continue;
        }
        CHECK_OK(model_load(r.f, &r.m, &err), &err);
        if (r.m != NULL) {
            CHECK_OK(ops_pool_create(1, &r.pool, &err), &err);
            CHECK_OK(model_kv_create(r.m, 0, r.m->hp.n_layer, 64, GGUF_TYPE_F32, &r.kv, &err),
                     &err);
            CHECK_OK(model_ctx_create(r.m, r.pool, 8, 64, &r.cx, &err), &err);
            r.x = calloc(8 * (size_t)r.m->hp.n_embd, sizeof(float));
            r.logits = calloc((size_t)r.m->hp.n_vocab, sizeof(float));
            n_vocab = r.m->hp.n_vocab;
            if (feed(&r, prompt, n, 0, 8)) {
                logits[i] = r.logits;
                r.logits = NULL;
            }
        }
        runner_close(&r);
    }
    double d_a = 0, d_bc = 0, d_b = 0;
    for (int32_t v = 0; logits[0] && logits[1] && logits[2] && logits[3] && v < n_vocab; v++) {
        d_a = fmax(d_a, fabs((double)logits[0][v] - logits[1][v]));
        d_bc = fmax(d_bc, fabs((double)logits[2][v] - logits[3][v]));
        d_b = fmax(d_b, fabs((double)logits[0][v] - logits[2][v]));
    }
    CHECKF(logits[3] != NULL && d_a < 1e-5, "rope_freqs of 1 changed logits by %g", d_a);
    CHECKF(logits[3] != NULL && d_bc < 1e-4, "rope_freqs 2 vs linear 2 differ by %g", d_bc);
    CHECKF(logits[3] != NULL && d_b > 1e-2, "a rope factor of 2 changed nothing (%g)", d_b);
    for (int i = 0; i < 4; i++) {
        free(logits[i]);
    }
    unlink(a);
    unlink(b);
    unlink(c);
}

/* bad files get errors naming the fault */
/* The layer plan of every test model: its weights are exactly the file's
 * blk.N.* tensors (nothing the file holds for a layer is unknown to the
 * engine, nothing counted twice), its groups name present weights of one
 * input width, and its operations are the pre-norm block in order. */
static void test_plans(void) {
    for (size_t c = 0; c < LARES_ARRAY_LEN(greedy_cases); c++) {
        lares_error err = {0};
        gguf_file *f = NULL;
        model_plan *p = NULL;
        CHECK_OK(gguf_open(fixture(greedy_cases[c].file), NULL, &f, &err), &err);
        if (f == NULL) {
            continue;
        }
        CHECK_OK(model_plan_make(f, &p, &err), &err);
        if (p == NULL) {
            gguf_close(f);
            continue;
        }
        const model_hparams *hp = &p->hp;
        for (int32_t l = 0; l < hp->n_layer; l++) {
            const model_layer_plan *lp = &p->layers[l];
            char prefix[32];
            snprintf(prefix, sizeof prefix, "blk.%d.", (int)l);
            uint64_t file_bytes = 0, plan_bytes = 0;
            int file_tensors = 0, plan_tensors = 0;
            for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
                const gguf_tensor *t = gguf_tensor_at(f, i);
                if (strncmp(t->name, prefix, strlen(prefix)) == 0) {
                    file_bytes += t->nbytes;
                    file_tensors++;
                }
            }
            for (int r = 0; r < MODEL_ROLE_COUNT; r++) {
                const model_weight *w = &lp->w[r];
                if (w->t == NULL) {
                    continue;
                }
                plan_tensors++;
                plan_bytes += w->bytes * (uint64_t)w->n_stack;
                CHECKF(strcmp(w->t->name + strlen(prefix), model_role_name((model_role)r)) == 0,
                       "%s: role %s bound to %s", greedy_cases[c].file,
                       model_role_name((model_role)r), w->t->name);
            }
            CHECKF(plan_tensors == file_tensors && plan_bytes == file_bytes &&
                       lp->bytes == file_bytes,
                   "%s layer %d: plan %d tensors / %llu bytes, file %d / %llu",
                   greedy_cases[c].file, (int)l, plan_tensors, (unsigned long long)plan_bytes,
                   file_tensors, (unsigned long long)file_bytes);
            for (int g = 0; g < MODEL_GROUP_COUNT; g++) {
                for (int i = 0; i < lp->g[g].n; i++) {
                    const model_weight *w = &lp->w[lp->g[g].member[i]];
                    CHECK(w->t != NULL && w->n_in == lp->g[g].n_in);
                }
            }
            const bool moe = hp->n_expert > 0;
            CHECK(lp->g[MODEL_GROUP_QKV].n == 3 && lp->g[MODEL_GROUP_O].n == 1);
            CHECK(moe ? lp->g[MODEL_GROUP_EXP_GATE_UP].n == 2 && lp->g[MODEL_GROUP_GATE_UP].n == 0
                      : lp->g[MODEL_GROUP_GATE_UP].n == 2 && lp->g[MODEL_GROUP_ROUTER].n == 0);
            CHECK(lp->n_ops >= 10 && lp->ops[0].kind == MODEL_OP_NORM &&
                  lp->ops[0].arg == MODEL_ROLE_ATTN_NORM && lp->ops[1].kind == MODEL_OP_PRODUCTS &&
                  lp->ops[1].arg == MODEL_GROUP_QKV && lp->ops[3].kind == MODEL_OP_ATTEND &&
                  lp->ops[5].kind == MODEL_OP_RESIDUAL && lp->ops[6].kind == MODEL_OP_NORM &&
                  lp->ops[6].arg == MODEL_ROLE_FFN_NORM &&
                  lp->ops[lp->n_ops - 1].kind == MODEL_OP_RESIDUAL);
            bool shared = false;
            for (int32_t i = 0; i < lp->n_ops; i++) {
                shared |= lp->ops[i].kind == MODEL_OP_SHARED_EXPERT;
            }
            CHECK(shared == (lp->w[MODEL_ROLE_SH_GATE_INP].t != NULL));
        }
        model_plan_free(p);
        gguf_close(f);
    }
}

static void test_bad_models(void) {
    lares_error err = {0};
    gguf_file *f = NULL;
    model *m = NULL;
    CHECK_OK(gguf_open(fixture("vocab/ggml-vocab-phi-3.gguf"), NULL, &f, &err), &err);
    if (f != NULL) {
        CHECK(model_load(f, &m, &err) == LARES_EUNSUPPORTED);
        CHECKF(strstr(err.msg, "unknown architecture 'phi3'") != NULL, "%s", err.msg);
        model_plan *p = NULL;
        CHECK(model_plan_make(f, &p, &err) == LARES_EUNSUPPORTED && p == NULL);
        gguf_close(f);
    }
    f = NULL;
    CHECK_OK(gguf_open(fixture("vocab/ggml-vocab-llama-spm.gguf"), NULL, &f, &err), &err);
    if (f != NULL) {
        CHECK(model_load(f, &m, &err) == LARES_ENOTFOUND);
        CHECKF(strstr(err.msg, "missing tensor 'token_embd.weight'") != NULL, "%s", err.msg);
        gguf_close(f);
    }
}

/* what the part observer saw */
typedef struct part_log {
    int32_t n;
    int32_t layer[64];
    int part[64];
} part_log;

static void log_part(void *user, int32_t layer, model_part part) {
    part_log *g = user;
    if (g->n < 64) {
        g->layer[g->n] = layer;
        g->part[g->n++] = (int)part;
    }
}

/* The forward pass announces each part of a layer that holds weights, in
 * order, before any operation reads it: dense layers and a qwen2moe layer
 * (its shared expert is the FFN's output) four, a qwen3moe layer three (its
 * experts are read per choice). Outputs do not change with an observer. */
static void test_part_observer(void) {
    static const struct {
        const char *file;
        int parts;
    } cases[] = {{"stories260K.gguf", 4},
                 {"derived/TinyStories-656K-qwen2moe-4x2-shared.gguf", 4},
                 {"derived/TinyStories-656K-qwen3moe-4x2-qknorm1.gguf", 3}};
    for (size_t c = 0; c < LARES_ARRAY_LEN(cases); c++) {
        runner r;
        if (!runner_open(&r, cases[c].file, 2, GGUF_TYPE_F32, 4)) {
            runner_close(&r);
            continue;
        }
        const int32_t toks[] = {1, 30, 40};
        CHECK(feed(&r, toks, 3, 0, 4));
        const int32_t n_vocab = r.m->hp.n_vocab;
        float *plain = malloc((size_t)n_vocab * sizeof(float));
        memcpy(plain, r.logits, (size_t)n_vocab * sizeof(float));
        part_log g = {0};
        model_ctx_on_part(r.cx, log_part, &g);
        CHECK(feed(&r, toks, 3, 0, 4));
        model_ctx_on_part(r.cx, NULL, NULL);
        CHECKF(memcmp(plain, r.logits, (size_t)n_vocab * sizeof(float)) == 0,
               "%s: logits change with an observer", cases[c].file);
        const int32_t n_layer = r.m->hp.n_layer;
        CHECKF(g.n == n_layer * cases[c].parts, "%s: %d parts announced", cases[c].file, g.n);
        for (int32_t i = 0; i < g.n && i < n_layer * cases[c].parts; i++) {
            const int want = i % cases[c].parts;
            CHECKF(g.layer[i] == i / cases[c].parts && g.part[i] == want,
                   "%s: announcement %d is layer %d part %d", cases[c].file, i, g.layer[i],
                   g.part[i]);
        }
        free(plain);
        runner_close(&r);
    }
}

/* xorshift64: a value uniform in [-0.5, 0.5) */
static float uniform_half(uint64_t *z) {
    *z ^= *z << 13, *z ^= *z >> 7, *z ^= *z << 17;
    return (float)((double)(*z >> 11) / 9007199254740992.0 - 0.5);
}

/* ops_attention_seqs: several sequences, each over its own cache, as one job
 * on several threads give bit for bit what each gives alone on one thread
 * (the batch's attention, and the work split by shares of query-key products) */
static void test_attention_seqs(void) {
    enum { HD = 64, NH = 8, NKV = 2, NCTX = 160, NSEQ = 4 };
    const int32_t n_tok[NSEQ] = {1, 7, 3, 1};
    const int32_t pos0[NSEQ] = {0, 90, 150, 37}; /* positions pos0 .. pos0 + n_tok - 1 */
    const uint32_t types[2] = {GGUF_TYPE_F32, GGUF_TYPE_F16};
    int32_t rows = 0;
    for (int s = 0; s < NSEQ; s++) {
        rows += n_tok[s];
    }
    const size_t qd = (size_t)NH * HD, kvd = (size_t)NKV * HD;
    const size_t stride = (size_t)(NH / NKV) * NCTX + HD;
    float *q = malloc(sizeof(float) * (size_t)rows * qd);
    float *one = malloc(sizeof(float) * (size_t)rows * qd);
    float *all = malloc(sizeof(float) * (size_t)rows * qd);
    float *scratch = malloc(sizeof(float) * 4 * stride);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)rows);
    uint8_t *cache = malloc((size_t)NSEQ * 2 * NCTX * kvd * sizeof(float));
    uint64_t z = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < (size_t)rows * qd; i++) {
        q[i] = uniform_half(&z);
    }
    lares_f16 *cache16 = malloc((size_t)NSEQ * 2 * NCTX * kvd * sizeof(lares_f16));
    for (size_t i = 0; i < (size_t)NSEQ * 2 * NCTX * kvd; i++) {
        const float f = uniform_half(&z);
        ((float *)(void *)cache)[i] = f;
        cache16[i] = f32_to_f16(f);
    }
    lares_error err = {0};
    for (int ti = 0; ti < 2; ti++) {
        const size_t esz = ops_kv_elem_bytes(types[ti]);
        ops_attn_args a[NSEQ];
        for (int s = 0, r0 = 0; s < NSEQ; r0 += n_tok[s], s++) {
            for (int t = 0; t < n_tok[s]; t++) {
                pos[r0 + t] = pos0[s] + t;
            }
            uint8_t *k = (ti ? (uint8_t *)cache16 : cache) + (size_t)s * 2 * NCTX * kvd * esz;
            a[s] = (ops_attn_args){
                .q = q + (size_t)r0 * qd,
                .out = one + (size_t)r0 * qd,
                .pos = pos + r0,
                .n_tok = n_tok[s],
                .n_head = NH,
                .n_head_kv = NKV,
                .head_dim = HD,
                .scale = 0.125f,
                .kv = {.k = k, .v = k + NCTX * kvd * esz, .type = types[ti], .row_elems = kvd},
                .scratch = scratch,
                .scratch_stride = stride};
            ops_attention(NULL, &a[s]);
        }
        for (int nth = 1; nth <= 4; nth++) {
            ops_pool *pool = NULL;
            CHECK_OK(ops_pool_create(nth, &pool, &err), &err);
            for (int s = 0; s < NSEQ; s++) {
                a[s].out = all + (a[s].out - one);
            }
            memset(all, 0, sizeof(float) * (size_t)rows * qd);
            ops_attention_seqs(pool, a, NSEQ);
            CHECKF(memcmp(all, one, sizeof(float) * (size_t)rows * qd) == 0,
                   "attention of %d sequences as one job on %d threads (%s cache) differs from "
                   "each alone",
                   NSEQ, nth, ti ? "F16" : "F32");
            for (int s = 0; s < NSEQ; s++) {
                a[s].out = one + (a[s].out - all);
            }
            ops_pool_free(pool);
        }
    }
    free(cache16);
    free(cache);
    free(pos);
    free(scratch);
    free(all);
    free(one);
    free(q);
}

/* model_forward_halves: a pass run half a layer at a time, with another
 * sequence's pass through the same working memory between the halves (as a
 * prompt chunk read a slice per step beside other requests), gives the
 * logits of the pass run whole, bit for bit: dense, experts with a shared
 * expert, per-head norms. Bad windows are refused. */
static void test_halves(void) {
    static const char *const files[] = {"stories260K.gguf",
                                        "derived/TinyStories-656K-qwen2moe-4x2-shared.gguf",
                                        "derived/TinyStories-656K-qwen3moe-4x2-qknorm1.gguf"};
    for (size_t c = 0; c < LARES_ARRAY_LEN(files); c++) {
        runner r;
        if (!runner_open(&r, files[c], 2, GGUF_TYPE_F32, 8)) {
            runner_close(&r);
            continue;
        }
        lares_error err = {0};
        const model *m = r.m;
        const int32_t n_layer = m->hp.n_layer, n_vocab = m->hp.n_vocab;
        const size_t e = (size_t)m->hp.n_embd;
        const int32_t toks[] = {1, 30, 40, 50, 60}, other[] = {1, 99, 7};
        const int32_t pos[] = {0, 1, 2, 3, 4};
        CHECK(feed(&r, toks, 5, 0, 8));
        float *whole = malloc((size_t)n_vocab * sizeof(float));
        float *xa = calloc(5 * e, sizeof(float));
        memcpy(whole, r.logits, (size_t)n_vocab * sizeof(float));
        model_kv *kva = NULL, *kvb = NULL;
        CHECK_OK(model_kv_create(m, 0, n_layer, 256, GGUF_TYPE_F32, &kva, &err), &err);
        CHECK_OK(model_kv_create(m, 0, n_layer, 256, GGUF_TYPE_F32, &kvb, &err), &err);
        const model_seq a = {.kv = kva, .row0 = 0, .n_rows = 5};
        const model_seq b = {.kv = kvb, .row0 = 0, .n_rows = 3};
        CHECK_OK(model_embed(m, toks, 5, xa, &err), &err);
        for (int32_t h = 0; h < 2 * n_layer; h++) {
            CHECK_OK(model_forward_halves(m, &a, 1, r.cx, h, h + 1, pos, 5, xa, &err), &err);
            /* the other sequence's whole pass between the halves */
            CHECK_OK(model_embed(m, other, 3, r.x, &err), &err);
            CHECK_OK(model_forward_seqs(m, &b, 1, r.cx, 0, n_layer, pos, 3, r.x, &err), &err);
        }
        model_output(m, r.cx, xa + 4 * e, 1, r.logits);
        CHECKF(memcmp(whole, r.logits, (size_t)n_vocab * sizeof(float)) == 0,
               "%s: logits by half layers differ from the whole pass", files[c]);
        /* an odd window of halves: [1, 2L - 1) then the ends, from scratch */
        CHECK_OK(model_embed(m, toks, 5, xa, &err), &err);
        CHECK_OK(model_forward_halves(m, &a, 1, r.cx, 0, 1, pos, 5, xa, &err), &err);
        CHECK_OK(model_forward_halves(m, &a, 1, r.cx, 1, 2 * n_layer - 1, pos, 5, xa, &err),
                 &err);
        CHECK_OK(model_forward_halves(m, &a, 1, r.cx, 2 * n_layer - 1, 2 * n_layer, pos, 5, xa,
                                      &err),
                 &err);
        model_output(m, r.cx, xa + 4 * e, 1, r.logits);
        CHECKF(memcmp(whole, r.logits, (size_t)n_vocab * sizeof(float)) == 0,
               "%s: logits by uneven windows of halves differ", files[c]);
        CHECK(model_forward_halves(m, &a, 1, r.cx, 3, 3, pos, 5, xa, &err) == LARES_EINVAL);
        CHECK(strstr(err.msg, "of half layers") != NULL);
        CHECK(model_forward_halves(m, &a, 1, r.cx, 0, 2 * n_layer + 1, pos, 5, xa, &err) ==
              LARES_EINVAL);
        CHECK(model_forward_seqs(m, &a, 1, r.cx, 2, 2, pos, 5, xa, &err) == LARES_EINVAL);
        CHECK(strstr(err.msg, "is empty") != NULL);
        model_kv_free(kva);
        model_kv_free(kvb);
        free(xa);
        free(whole);
        runner_close(&r);
    }
}

int main(void) {
    test_attention_seqs();
    test_part_observer();
    test_halves();
    test_greedy_once_upon_a_time(GGUF_TYPE_F32, 2, 16);
    test_greedy_once_upon_a_time(GGUF_TYPE_F16, 2, 16);
    test_greedy_once_upon_a_time(GGUF_TYPE_F16, 1, 3);
    test_bos_only_logits();
    test_batch_equals_sequential();
    test_moe_batch_equals_sequential();
    test_rope_scaling();
    test_plans();
    test_bad_models();
    return check_finish("test_model");
}
