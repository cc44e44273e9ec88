/*
 * lares: run large language models on the devices people already own.
 *
 * This is the whole public interface of the library. The command-line program
 * (app/) and the end-to-end tests use only this header; unit tests may reach
 * module headers under src/ for internals.
 *
 * Conventions
 *   - A function that can fail returns lares_status and fills a caller-owned
 *     lares_error (which may be NULL). Nothing is allocated to report an error.
 *   - Constructors set *out only on success; x_free(NULL) / x_close(NULL) are
 *     no-ops.
 *   - The library never exits, never aborts on input, and never writes to
 *     stdout. Diagnostics go through lares_set_log (default: warnings and errors
 *     to stderr).
 *   - A model handle is read-only once opened and may be shared by several
 *     sessions on one thread at a time each; a session is used by one thread.
 */
#ifndef LARES_H
#define LARES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(LARES_BUILD_LIBRARY) && defined(__GNUC__)
#define LARES_API __attribute__((visibility("default")))
#else
#define LARES_API
#endif

/* ---- status and errors ------------------------------------------------ */

typedef enum lares_status {
    LARES_OK = 0,
    LARES_EINVAL,      /* a bad argument or option */
    LARES_EIO,         /* the operating system refused a read, write, map */
    LARES_EFORMAT,     /* a file or frame is malformed, truncated or hostile */
    LARES_ENOMEM,      /* an allocation failed or a limit was reached */
    LARES_EUNSUPPORTED,/* well-formed but not supported (architecture, type) */
    LARES_ENOTFOUND,   /* a required key, tensor or file is missing */
    LARES_ERANGE,      /* a value is out of its allowed range (context full) */
    LARES_ECANCELED,   /* the caller asked to stop */
    LARES_ENET,        /* a network peer failed or timed out */
    LARES_EAUTH,       /* a peer's key or credential was refused */
    LARES_EPROTO,      /* a peer spoke a different protocol or version */
    LARES_EBUSY,       /* a bounded resource is full; try later */
    LARES_STATUS_COUNT
} lares_status;

#define LARES_ERROR_MSG_MAX 256

typedef struct lares_error {
    lares_status code;
    char msg[LARES_ERROR_MSG_MAX]; /* lower case, names the object, no newline */
} lares_error;

/* A short constant name for a status ("format error"). Never NULL. */
LARES_API const char *lares_status_name(lares_status s);

/* ---- logging ---------------------------------------------------------- */

typedef enum lares_log_level {
    LARES_LOG_ERROR = 0,
    LARES_LOG_WARN,
    LARES_LOG_INFO,
    LARES_LOG_DEBUG
} lares_log_level;

/* fn receives one line without a trailing newline, starting with the module
 * ("gguf: ..."). Passing fn == NULL restores the default sink, which writes
 * messages at or above `min_level` to stderr. Not thread-safe against
 * concurrent logging; set it once at start-up. */
typedef void (*lares_log_fn)(lares_log_level level, const char *line, void *user);
LARES_API void lares_set_log(lares_log_fn fn, void *user, lares_log_level min_level);

/* ---- models ------------------------------------------------------------ */

typedef struct lares_model lares_model;

typedef struct lares_model_info {
    const char *arch;      /* "llama", ... (borrowed from the model) */
    const char *name;      /* general.name or "" */
    int32_t n_layer;
    int32_t n_embd;
    int32_t n_ff;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;
    int32_t n_vocab;
    int32_t n_ctx_train;
    uint64_t file_bytes;   /* size of the GGUF file */
    uint64_t weight_bytes; /* bytes of all tensor data */
    const char *file_type; /* dominant weight type name, e.g. "q4_0" */
    int32_t n_expert;      /* MoE: experts per layer; 0: dense */
    int32_t n_expert_used; /* MoE: experts each token uses */
    bool in_memory;        /* read into memory (lares_model_opts.no_mmap), not mapped */
} lares_model_info;

typedef struct lares_model_opts {
    bool vocab_only; /* load only the tokenizer (a vocab GGUF without tensors) */
    /* Read the whole file into memory (on 2 MiB pages where the OS offers
     * them) instead of mapping it: fewer pages to translate on every pass,
     * but the weights cannot stream under a memory budget below the model's
     * size, and the OS cannot drop and re-read them under pressure */
    bool no_mmap;
} lares_model_opts;

LARES_API lares_model_opts lares_model_opts_default(void);
LARES_API lares_status lares_model_open(const char *path, const lares_model_opts *opts,
                                        lares_model **out, lares_error *err);
LARES_API void lares_model_close(lares_model *m);
LARES_API void lares_model_get_info(const lares_model *m, lares_model_info *out);

/* ---- tokens and text --------------------------------------------------- */

typedef struct lares_tokenize_opts {
    bool add_bos;       /* prepend BOS when the vocabulary asks for it */
    bool parse_special; /* recognise control tokens written in the text */
} lares_tokenize_opts;

LARES_API lares_tokenize_opts lares_tokenize_opts_default(void);

/* Tokenizes `len` bytes of `text`. On success *out is an array allocated with
 * lares_alloc that the caller releases with lares_free; *n_out its length. */
LARES_API lares_status lares_tokenize(const lares_model *m, const char *text, size_t len,
                                      const lares_tokenize_opts *opts, int32_t **out,
                                      size_t *n_out, lares_error *err);

/* The bytes a token stands for (control tokens: empty unless `special`).
 * Writes at most cap bytes; returns the piece length (which may exceed cap, in
 * which case nothing usable was written) or -1 for an id out of range. */
LARES_API int32_t lares_token_piece(const lares_model *m, int32_t token, bool special, char *buf,
                                    size_t cap);
LARES_API int32_t lares_token_bos(const lares_model *m);
LARES_API int32_t lares_token_eos(const lares_model *m);
LARES_API bool lares_token_is_eog(const lares_model *m, int32_t token);

/* ---- sessions and generation ------------------------------------------ */

typedef struct lares_session lares_session;

/* KV cache precision. AUTO keeps F32 while the F32 cache stays small (64 MiB)
 * and uses F16 beyond: F16 rounding of keys is enough to flip near-ties in
 * greedy decoding, and precision costs nothing on a small cache. */
typedef enum lares_kv_type { LARES_KV_AUTO = 0, LARES_KV_F16 = 1, LARES_KV_F32 = 2 } lares_kv_type;

/* What an MoE expert cache evicts first while the weights stream
 * (docs/memory.md, "MoE experts"). */
typedef enum lares_expert_cache {
    LARES_EXPERT_CACHE_LRU = 0, /* the least recently used (measured best) */
    LARES_EXPERT_CACHE_HEAT = 1 /* the coldest per byte: uses decayed over recent tokens */
} lares_expert_cache;

/* How weights that stream from disk are read (docs/memory.md, "Direct reads"). */
typedef enum lares_stream_io {
    LARES_STREAM_IO_AUTO = 0,  /* direct reads where the file system allows them and a probe
                                  of the file does not find the page cache 1.25x faster, else
                                  mmap */
    LARES_STREAM_IO_MMAP = 1,  /* through the page cache into the file mapping */
    LARES_STREAM_IO_DIRECT = 2 /* direct reads (O_DIRECT, large requests, several in flight)
                                  into buffers lares owns; mmap, with a warning, where the
                                  file system refuses them */
} lares_stream_io; /* (a session with GPU offload streams through mmap) */

typedef struct lares_session_opts {
    int32_t n_ctx;     /* context length in tokens; 0 = the model's trained length */
    int32_t n_threads; /* 0 = number of online cores */
    int32_t n_batch;   /* prompt tokens per forward pass; 0 = default */
    lares_kv_type kv_type;
    /* Memory for models larger than memory (weights, KV cache and buffers
     * together). 0: automatic, the smaller of the cgroup memory limit and 80 %
     * of MemAvailable. When the weights fit, nothing changes; when they do not,
     * layers stream from disk (read ahead, released after use) and the rest
     * stays resident. A budget below the least that can work (KV cache,
     * buffers and the largest streamed unit: a part of a layer or the output
     * matrix) is LARES_ERANGE naming that minimum. */
    uint64_t mem_budget;
    int32_t mem_window; /* streamed units (parts of layers) in memory at once; 0: as the budget
                           allows */
    bool mem_lock;      /* lock resident weights in memory (mlock); a refusal is a warning */
    /* MoE while streaming: which cached experts make room for new ones */
    lares_expert_cache expert_cache;
    /* MoE while streaming: while a layer computes, read the experts the next
     * layer's router is likely to pick, learned from the choices of
     * consecutive layers (docs/memory.md, "Guessing the next layer's
     * experts"). 0 (the default): while at least half the guesses are
     * picked by the router; > 0 always; < 0 never. Output never changes. */
    int expert_guess;
    lares_stream_io stream_io; /* how streamed weights are read */
    /* Run as the head of a ring of devices (see "rings" below): NULL for this
     * device alone, else the path of a ring.json naming the workers in ring
     * order and the layers each runs. */
    const char *ring;
    bool ring_insecure; /* no encryption and no keys (warns): trusted test networks only */
    /* Where the head keeps its ring's live picture (lares_session_ring_json)
     * for other processes (lares ring status): rewritten at most once a
     * second and at every plan change while the ring runs, removed when the
     * session ends; NULL: nowhere. */
    const char *ring_state_path;
    /* GPU offload (issue 10, docs/gpu.md; builds with -DLARES_CUDA=ON): "layers"
     * or "affinity" places weight matrices on the first CUDA device, NULL or
     * "none" keeps everything on the CPU. gpu_mem caps the device memory used
     * (0: 90 % of its free memory); gpu_layers > 0: the layers method takes
     * exactly that many (0: as many as fit). A build without CUDA, or no
     * device, fails session creation with LARES_EUNSUPPORTED / LARES_ENOTFOUND. */
    const char *offload;
    uint64_t gpu_mem;
    int32_t gpu_layers;
    /* Re-balancing (issue 9, docs/ring.md): move layers between devices when
     * one slows down or speeds up. > 0 on, < 0 off, 0: ring.json's
     * "rebalance", else on. */
    int ring_rebalance;
    /* Failover: a worker that stops answering is dropped and the generation
     * goes on over the others (a warning). > 0 on, < 0 off (the request fails
     * naming the device), 0: ring.json's "failover", else on. */
    int ring_failover;
    /* The planner's placement for a ring without windows (issue 7): "halda",
     * "memory", "single" or "even"; NULL: ring.json's "placement", else halda. */
    const char *ring_placement;
    /* "even" through the planner too (profiles gathered, the planner's even
     * split and its predictions), as lares plan --check compares it; false:
     * the plain split, no profiles needed. */
    bool ring_plan_even;
    /* Where the head of an automatic ring caches its own profile (per
     * hardware fingerprint, as lares profile); NULL: measured every time. */
    const char *ring_profile_cache;
} lares_session_opts;

LARES_API lares_session_opts lares_session_opts_default(void);
LARES_API lares_status lares_session_create(lares_model *m, const lares_session_opts *opts,
                                            lares_session **out, lares_error *err);
LARES_API void lares_session_free(lares_session *s);
LARES_API int32_t lares_session_n_ctx(const lares_session *s);
/* The threads that compute (n_threads as asked, or as chosen for 0: every
 * core, one fewer while weights stream through the page cache). */
LARES_API int32_t lares_session_n_threads(const lares_session *s);

/* What a session offloads to a GPU (docs/gpu.md): false, *out untouched, for a
 * session without one. */
typedef struct lares_gpu_info {
    const char *backend; /* "cuda", or "emulated" (LARES_GPU_BACKEND=emulated) */
    char device[96];
    const char *method;  /* "layers", "affinity" */
    uint64_t budget_bytes, weight_bytes, model_weight_bytes;
    int32_t n_matrices, n_matrices_gpu;
    int32_t n_layers_device;  /* layers run whole on the device */
    double predicted_ms, cpu_predicted_ms; /* per token, by the placement's model */
    uint64_t n_products;      /* products run on the device one by one so far */
    uint64_t n_layer_runs;    /* layers run whole on the device so far */
} lares_gpu_info;
LARES_API bool lares_session_gpu_info(const lares_session *s, lares_gpu_info *out);
/* Gives the session a draft model for speculative decoding
 * (lares_generate_opts.draft_n, docs/speculative.md): a smaller model with the
 * same vocabulary (size, every token's text, BOS, EOS and the tokens that end
 * generation: LARES_EINVAL naming both files otherwise). The draft gets a KV
 * cache of its own with the session's context length and batch, within its
 * own memory budget (automatic), runs on this device (the head of a ring) on
 * the session's threads, and follows the session's context at every generate
 * call. The model must stay open while the session has it; NULL removes the
 * draft. Replaces a draft set before. */
LARES_API lares_status lares_session_set_draft(lares_session *s, lares_model *draft,
                                               lares_error *err);

typedef struct lares_sampler_opts {
    float temperature;        /* <= 0: greedy (argmax) */
    int32_t top_k;            /* <= 0: off */
    float top_p;              /* >= 1: off */
    float min_p;              /* <= 0: off */
    float repeat_penalty;     /* 1: off */
    int32_t repeat_last_n;    /* tokens looked back by the penalty */
    float presence_penalty;   /* 0: off */
    float frequency_penalty;  /* 0: off */
    uint64_t seed;
} lares_sampler_opts;

LARES_API lares_sampler_opts lares_sampler_opts_default(void);

/* What the per-token callback receives. `piece` holds the token's text,
 * completed to whole UTF-8 characters (bytes of an unfinished character are
 * held back and delivered with the token that completes them). A last call
 * with token == -1 may deliver bytes of a character that never completed, as
 * U+FFFD. Log-probabilities are of the model's distribution (after penalties,
 * before temperature and truncation); they are filled only when n_logprobs > 0
 * was asked for (else logprob is 0 and n_top is 0). */
typedef struct lares_token_info {
    int32_t token;
    const char *piece;
    size_t piece_len;
    float logprob;
    int32_t n_top;             /* entries in top_ids / top_logprobs */
    const int32_t *top_ids;    /* most likely first */
    const float *top_logprobs;
} lares_token_info;

/* Called once per generated token, after it is sampled and before the next
 * forward pass. Return false to stop generating. */
typedef bool (*lares_token_fn)(const lares_token_info *t, void *user);

typedef enum lares_stop_reason {
    LARES_STOP_NONE = 0,
    LARES_STOP_EOS,    /* the model produced an end-of-generation token */
    LARES_STOP_LENGTH, /* n_predict tokens were generated */
    LARES_STOP_CALLER, /* the callback returned false */
    LARES_STOP_CANCELED /* lares_session_cancel was called */
} lares_stop_reason;

typedef struct lares_generate_opts {
    int32_t n_predict;         /* tokens to generate; < 0: until EOS or the context is full */
    lares_sampler_opts sampler;
    lares_token_fn on_token;   /* may be NULL */
    void *user;
    int32_t n_logprobs;        /* 0: none; else top alternatives per token (max 20) */
    /* Called before each token is drawn with the logits of the whole
     * vocabulary (and `user`), which it may change: a constraint sets the
     * tokens it forbids to -INFINITY and must leave at least one. The
     * log-probabilities reported are of the changed logits. May be NULL. */
    void (*on_logits)(float *logits, int32_t n_vocab, void *user);
    /* Speculative decoding by prompt lookup: up to this many tokens are
     * drafted from the context (the continuation of the last earlier
     * occurrence of its final tokens) and verified in one forward pass; every
     * token is still drawn from the model's own distribution, so greedy
     * output is unchanged and sampled output keeps its distribution. 0: off;
     * at most LARES_LOOKUP_MAX; needs a batch (n_batch) of lookup + 1. */
    int32_t lookup;
    /* Speculative decoding with the session's draft model
     * (lares_session_set_draft; in a batch the batch's, lares_batch_set_draft):
     * it proposes up to this many tokens one after
     * another, the model verifies them in one forward pass. Greedy output is
     * plain decoding's; with sampling the draft draws from its own
     * distribution (the same sampler settings, its own random stream) and
     * each draft is kept by the rule of speculative sampling (Leviathan et
     * al. 2023), so the output keeps the model's distribution. 0: off; at
     * most LARES_LOOKUP_MAX; needs a batch of draft_n + 1; not with lookup
     * (LARES_EINVAL). The number adapts between passes (docs/speculative.md). */
    int32_t draft_n;
    /* Greedy speculative decoding (lookup or draft_n, temperature 0) measures
     * the tokens a millisecond of its passes with drafts and of those without
     * and drafts where drafts are faster (a mixture of experts' verification
     * reads the union of the drafted tokens' experts; a tiny model computes
     * every row): the tokens are the same either way. true: every pass
     * drafts (acceptance figures, tests). Sampled decoding always drafts, its
     * draws depending on its drafts and not on timing. */
    bool spec_always;
} lares_generate_opts;

#define LARES_LOOKUP_MAX 32

LARES_API lares_generate_opts lares_generate_opts_default(void);

/* Figures measured during one generate call (and the process around it). */
typedef struct lares_stats {
    int32_t n_prompt;          /* prompt tokens evaluated (after any reused prefix) */
    int32_t n_generated;
    double load_ms;            /* model open + session creation */
    double prompt_ms;          /* prompt evaluation */
    double gen_ms;             /* generation after the first token */
    double ttft_ms;            /* start of the call to the first generated token */
    double prompt_tok_s;
    double gen_tok_s;
    uint64_t peak_rss_bytes;   /* process high-water mark */
    uint64_t major_faults;     /* during the call */
    uint64_t disk_read_bytes;  /* read from storage during the call; UINT64_MAX unknown */
    double mem_pressure;       /* largest drop of MemAvailable / MemTotal during the call */
    lares_stop_reason stop;
    /* weight residency (see lares_session_opts.mem_budget) */
    uint64_t mem_budget_bytes; /* the budget in force; UINT64_MAX: no limit known */
    bool streaming;            /* the weights did not fit: some stream from disk */
    uint64_t stream_bytes;     /* weight bytes read from disk per forward pass */
    uint64_t pinned_bytes;     /* weight bytes kept resident while streaming */
    uint64_t window_bytes;     /* most streamed weight bytes in memory at once */
    uint64_t locked_bytes;     /* weight bytes locked in memory */
    uint64_t prefetch_bytes;   /* bytes the prefetch thread read during the call */
    double prefetch_ms;        /* the time it spent reading them (its read rate's divisor) */
    double prompt_wait_ms;     /* of prompt_ms: waiting for weights from disk */
    double gen_wait_ms;        /* of gen_ms: waiting for weights from disk (the rest computes) */
    bool stream_direct;        /* streamed weights are read directly into owned buffers */
    /* stream_io auto's probe of the file (bytes a second; 0: no probe): direct
     * reads are kept unless the page cache read it more than 1.25x faster */
    double probe_direct_Bps, probe_mmap_Bps;
    bool expert_direct;        /* MoE expert slices are read directly into owned slots */
    /* stream_io auto's probe of expert reads (as above; 0: none): direct
     * reads of experts are kept when they are at least as fast */
    double expert_probe_direct_Bps, expert_probe_mmap_Bps;
    uint64_t direct_bytes;     /* of prefetch_bytes, read directly */
    uint64_t buffer_bytes;     /* the most those buffers held (about window_bytes) */
    /* speculative decoding (lares_generate_opts.lookup, .draft_n) */
    int32_t n_drafted;         /* tokens proposed */
    int32_t n_accepted;        /* of them, generated as proposed */
    double draft_ms;           /* of gen_ms: the draft model proposing (its passes) */
    /* MoE models, over generation (the prompt's batches excluded) */
    uint64_t expert_hits;      /* streaming: chosen experts found in the expert cache */
    uint64_t expert_misses;    /* streaming: chosen experts read from disk */
    uint64_t expert_guesses;   /* streaming: experts read ahead on a guess (expert_guess) */
    uint64_t expert_guess_hits; /* of them, picked by the router they were read for */
    uint64_t expert_guesses_made;   /* guesses made, read or not (auto reads them only */
    uint64_t expert_guesses_picked; /* while at least half are picked): of them, picked */
    double route_overlap;      /* share of a token's experts the previous token chose
                                * too, over layers; -1: not measured */
    double route_top_share;    /* share of the choices taken by each layer's
                                * n_expert_used most chosen experts; -1: not measured */
} lares_stats;

/* Evaluates `prompt` (which should start with BOS when the model wants one)
 * after the tokens already in the session's context, then samples up to
 * n_predict tokens. Fails with LARES_ERANGE before any work when prompt plus
 * n_predict cannot fit in the context. Generated ids are appended to `out`
 * (capacity out_cap, may be NULL) and their count stored in *n_out. */
LARES_API lares_status lares_generate(lares_session *s, const int32_t *prompt, size_t n_prompt,
                                      const lares_generate_opts *opts, int32_t *out,
                                      size_t out_cap, size_t *n_out, lares_stats *stats,
                                      lares_error *err);

/* Forgets the context (KV cache) from position `pos` on; 0 clears it. */
LARES_API void lares_session_truncate(lares_session *s, int32_t pos);
/* The tokens in the context, in order (valid until the next generate/truncate). */
LARES_API const int32_t *lares_session_tokens(const lares_session *s, int32_t *n_past);
/* Asks a generate call running on another thread to stop at the next batch or
 * token (it returns LARES_OK with stop = LARES_STOP_CANCELED). Thread-safe;
 * the flag clears when the next generate call starts. */
LARES_API void lares_session_cancel(lares_session *s);
/* Prefix reuse: keeps the longest start of the context that equals the start
 * of tokens[0, n), at most n - 1 tokens (one is always left to evaluate, for
 * its logits), and forgets the rest. Returns the number kept: the caller then
 * generates from tokens + kept. Cannot fail. */
LARES_API size_t lares_session_reuse_prefix(lares_session *s, const int32_t *tokens, size_t n);

/* ---- several sequences at once: continuous batching (docs/batching.md) --- */

/* Up to n_seq sequences of one model decode together: every step is one
 * forward pass over the next token of each generating sequence plus a chunk of
 * the prompts still being read (shortest first; a few rows while others are
 * active, so a long prompt never stalls them), each sequence with its own
 * KV cache, sampler and callbacks. The weights are read once per step for all
 * of them: on a device where generation waits on memory, N sequences cost
 * little more than one. Sequences start between steps. Greedy output of a
 * sequence is the one lares_generate gives it alone (up to the summation-order
 * differences of a few block types, docs/batching.md). One thread uses a batch. */
typedef struct lares_batch lares_batch;

/* opts as for a session; n_ctx is each sequence's. n_batch is raised to n_seq
 * when smaller. The n_seq KV caches come out of the memory budget (mem_budget,
 * else the cgroup's or MemAvailable's): the weights get the rest and stream
 * from disk where it is short, each streamed layer read once a step for every
 * sequence; a budget the caches leave too little of is LARES_ERANGE. Over a
 * ring (opts.ring) every member keeps a KV cache per sequence, counted in
 * its budget, and the sequences go around in groups, pipelined
 * (lares_batch_set_ring_groups; docs/batching.md "Over a ring"); a worker
 * built before that is LARES_EUNSUPPORTED. */
LARES_API lares_status lares_batch_create(lares_model *m, const lares_session_opts *opts,
                                          int32_t n_seq, lares_batch **out, lares_error *err);
LARES_API void lares_batch_free(lares_batch *b);
LARES_API int32_t lares_batch_n_seq(const lares_batch *b);
/* The session underneath (threads, working memory, model): its own KV cache
 * is not a sequence's, so one-off work (lares_embed) may use it between steps
 * on the batch's thread. Freed with the batch. */
LARES_API lares_session *lares_batch_session(lares_batch *b);
/* Tokens of `prompt` that sequence seq's cache holds from its last run (what
 * lares_batch_start would keep): the slot that serves a conversation's next
 * turn best. */
LARES_API size_t lares_batch_cached(const lares_batch *b, int32_t seq, const int32_t *prompt,
                                    size_t n_prompt);

/* Gives the batch a draft model for speculative decoding (opts.draft_n of
 * lares_batch_start; the vocabulary checked as lares_session_set_draft
 * does): each sequence that asks for drafts gets a draft session of its own
 * (a KV cache of the draft model, kept with its slot for the next run's
 * prefix, on the batch's threads), and its drafts are verified in the step
 * with the others' rows. NULL removes it (sequences drafting are refused
 * then); not while a sequence is active (LARES_EBUSY). */
LARES_API lares_status lares_batch_set_draft(lares_batch *b, lares_model *draft,
                                             lares_error *err);
/* Starts sequence `seq` (free: never started, finished or released) on a
 * prompt with its own options; the part of the prompt its cache already holds
 * from its last use is kept. Drafts (opts.lookup: prompt lookup; opts.draft_n:
 * the batch's draft model, lares_batch_set_draft) go within the batch's rows:
 * each generating sequence's token and drafts in one step, verified as
 * lares_generate verifies them. The prompt is copied. */
LARES_API lares_status lares_batch_start(lares_batch *b, int32_t seq, const int32_t *prompt,
                                         size_t n_prompt, const lares_generate_opts *opts,
                                         lares_error *err);
/* One forward pass for every active sequence: the tokens drawn are delivered
 * to their on_token callbacks. *n_active: sequences still active after it
 * (0: nothing to do, and no pass was made). */
LARES_API lares_status lares_batch_step(lares_batch *b, int32_t *n_active, lares_error *err);
/* Prompt rows a step reads while another sequence is active (default
 * LARES_BATCH_SHARED_PROMPT_ROWS; 0: as many as the batch holds, and no
 * slices). Few rows keep every step about as short as one of generation, so
 * tokens keep coming and a new request's first token waits little. A prompt
 * read alone takes whole batches, each through the layers a slice per step,
 * so that a sequence started meanwhile waits for a slice, not the chunk.
 * Prompts are read shortest first, and those that fit whole in 8 x rows
 * rows (with the rest of a chunk in flight among them) in one step, so that
 * requests arriving together start together. */
#define LARES_BATCH_SHARED_PROMPT_ROWS 8
LARES_API void lares_batch_set_shared_prompt_rows(lares_batch *b, int32_t rows);
/* Over a ring: groups of sequences in the ring at once (pipelining: device 2
 * computes one group while device 1 computes the next); 0 (the default): one
 * per device of the plan in force at first, then as many as the measured
 * costs of a pass predict fastest (a device that streams its weights reads
 * them again for every group), at most the active sequences; 1: every
 * sequence in one pass, one device busy at a time. */
LARES_API void lares_batch_set_ring_groups(lares_batch *b, int32_t groups);
/* Stops a sequence at the next step (LARES_STOP_CANCELED); any thread. */
LARES_API void lares_batch_cancel(lares_batch *b, int32_t seq);
/* Whether the sequence is active (started and not finished). */
LARES_API bool lares_batch_active(const lares_batch *b, int32_t seq);
/* The figures of the sequence's current or last run (prompt_ms counts from
 * its start to its last prompt chunk, so it includes steps shared with others),
 * with the batch's weight residency (budget, streaming, bytes streamed per
 * pass); the read and wait counters are the batch's, not given per sequence. */
LARES_API void lares_batch_stats(const lares_batch *b, int32_t seq, lares_stats *out);

/* ---- scoring: perplexity and KL divergence (docs/perplexity.md) -------- */

/* The running figures after each chunk. */
typedef struct lares_score_chunk {
    int32_t chunk;    /* 1-based */
    int32_t n_chunks;
    double ppl;       /* over the chunks so far */
    double ppl_err;
    double kld_mean;  /* comparing with a base file; else 0 */
    double ms;        /* this chunk's time */
} lares_score_chunk;

typedef void (*lares_score_fn)(const lares_score_chunk *c, void *user);

typedef struct lares_score_opts {
    /* tokens per chunk, each evaluated from an empty KV cache; the first half
     * is context only, the tokens after it are scored. 0: the smaller of 512
     * and the session's context (with kld_base_in: the file's) */
    int32_t n_ctx;
    int32_t n_chunks;         /* at most this many chunks; <= 0: as many as the text holds */
    const char *kld_base_out; /* NULL, or write every scored row's log-probabilities here */
    const char *kld_base_in;  /* NULL, or compare with the base log-probabilities in this file */
    lares_score_fn on_chunk;  /* may be NULL */
    void *user;
} lares_score_opts;

LARES_API lares_score_opts lares_score_opts_default(void);

typedef struct lares_score_result {
    int32_t n_ctx;
    int32_t n_chunks;
    int64_t n_scored;     /* tokens scored over all chunks */
    double nll, nll_err;  /* mean negative log-likelihood (nats) and its standard error */
    double ppl, ppl_err;  /* exp(nll) and nll_err * ppl */
    /* comparing with kld_base_in: */
    bool kld;             /* the fields below are filled */
    double base_ppl, base_ppl_err;
    double ppl_ratio, ppl_ratio_err; /* ppl / base_ppl, from the per-token NLL differences */
    double kld_mean, kld_err;
    /* quantiles of the per-token KL divergence */
    double kld_max, kld_p99_9, kld_p99, kld_p95, kld_p90, kld_median, kld_p10, kld_p5, kld_p1,
        kld_p0_1, kld_min;
    double same_top, same_top_err; /* fraction of tokens whose most likely next token is the base's */
    double dp_mean, dp_err;        /* mean of p(token) - p_base(token) */
    double dp_rms;                 /* root mean square of it */
    double ms;                     /* evaluation time */
} lares_score_result;

/* Scores tokens[0, n) (tokenized with BOS as the model wants) in chunks of
 * n_ctx tokens: each chunk starts from an empty context (its first token
 * replaced by BOS when the vocabulary adds one), and the negative
 * log-likelihood of tokens n_ctx/2 + 1 .. n_ctx - 1 is taken from a
 * log-softmax in double. Needs at least 2 * n_ctx tokens (LARES_ERANGE saying
 * how many). With kld_base_in the chunks are the file's; tokens may then be
 * NULL (the file's tokens are used), else they must start with the file's
 * (LARES_EINVAL naming the first difference). The session's context is
 * cleared. */
LARES_API lares_status lares_score(lares_session *s, const int32_t *tokens, size_t n,
                                   const lares_score_opts *opts, lares_score_result *out,
                                   lares_error *err);

/* The chunking a KL-divergence base file holds (its header and tokens checked,
 * not its rows), to size a session for comparing with it. */
LARES_API lares_status lares_score_base_info(const char *path, int32_t *n_vocab, int32_t *n_ctx,
                                             int32_t *n_chunks, lares_error *err);

/* The embedding of a text given as tokens (tokenize it with BOS as for a
 * prompt): every token's final hidden state after the output norm, averaged
 * over the tokens (mean pooling) and scaled to unit length (L2), written to
 * out[0, n_embd) (out_len must be lares_model_info.n_embd). The context is
 * cleared first (a token's state depends on all before it) and holds these
 * tokens afterwards. LARES_ERANGE when they do not fit the context. */
LARES_API lares_status lares_embed(lares_session *s, const int32_t *tokens, size_t n, float *out,
                                   size_t out_len, lares_error *err);

/* ---- chat --------------------------------------------------------------- */

typedef struct lares_chat_msg {
    const char *role;    /* "system", "user", "assistant" */
    const char *content;
} lares_chat_msg;

/* Formats a conversation with the model's chat template (tokenizer.chat_template,
 * recognised by family: ChatML/Qwen, Llama-3, Llama-2/Mistral [INST], Gemma,
 * ...) or, when template_name is not NULL, with that family ("chatml",
 * "llama3", "llama2", "mistral", "gemma", "phi3", ...). An unknown template is
 * LARES_EUNSUPPORTED naming it. add_generation_prompt ends the text with the
 * opening of the assistant's turn. *out is NUL-terminated, freed with
 * lares_free. The text contains the template's special tokens written out:
 * tokenize it with parse_special. */
LARES_API lares_status lares_chat_format(const lares_model *m, const char *template_name,
                                         const lares_chat_msg *msgs, size_t n_msgs,
                                         bool add_generation_prompt, char **out,
                                         lares_error *err);
/* BOS: the text written by lares_chat_format holds the template's BOS only
 * when the vocabulary does not add one itself, so tokenizing it with the
 * default add_bos gives exactly one BOS either way. */

/* The template family that lares_chat_format would use (a constant name such
 * as "chatml"). A model without tokenizer.chat_template and no name given is
 * LARES_ENOTFOUND; the "plain" family ("role: text" lines) is the usual
 * fallback for such models. */
LARES_API lares_status lares_chat_template(const lares_model *m, const char *template_name,
                                           const char **family, lares_error *err);
/* lares_chat_format, then tokenized: the template's markup with special tokens
 * parsed, the messages' contents as plain text (a user who writes
 * "<|im_start|>" gets those characters, not the control token), BOS as the
 * vocabulary asks, no EOS. *out is freed with lares_free. */
LARES_API lares_status lares_chat_tokenize(const lares_model *m, const char *template_name,
                                           const lares_chat_msg *msgs, size_t n_msgs,
                                           bool add_generation_prompt, int32_t **out,
                                           size_t *n_out, lares_error *err);

/* ---- making model files ------------------------------------------------- */

/* Progress of long work: `done` of `total` units (bytes) of `what`. */
typedef void (*lares_progress_fn)(const char *what, uint64_t done, uint64_t total, void *user);

/* How a synthetic MoE model's routers pick experts. REALISTIC: the routers
 * read a slowly drifting summary of the recent tokens plus a per-expert bias,
 * built so that popularity follows a Zipf law of exponent route_skew and
 * consecutive tokens share about route_overlap of their experts (a real
 * working set for expert caches); RANDOM: plain random router rows, whose
 * choices depend on the token alone (the files before issue 18). */
typedef enum lares_synth_routing {
    LARES_SYNTH_ROUTING_REALISTIC = 0,
    LARES_SYNTH_ROUTING_RANDOM = 1
} lares_synth_routing;

typedef struct lares_synth_opts {
    const char *preset;     /* see lares_synth_presets() */
    const char *type;       /* a quantization mix: "q4_k_m", "q8_0", "f16", ... */
    const char *vocab_path; /* a GGUF whose tokenizer.* metadata is copied */
    int32_t n_layers;       /* 0: the preset's count */
    uint64_t seed;
    int32_t n_threads;      /* 0: all cores */
    lares_progress_fn progress;
    void *user;
    /* MoE presets: how the routers choose (docs/memory.md, "Synthetic routing") */
    lares_synth_routing routing;
    double route_skew;      /* Zipf exponent of expert popularity (0: all alike) */
    double route_overlap;   /* share of a token's experts the next token keeps, (0, 1) */
    /* dense presets: weights with an induction circuit, so the model continues
     * a text by repeating what followed the current token earlier (speculative
     * decoding has drafts to accept; docs/speculative.md) instead of random ones */
    bool copy;
} lares_synth_opts;

LARES_API lares_synth_opts lares_synth_opts_default(void);
/* Writes a GGUF with a named model shape and deterministic pseudo-random
 * weights (bell-shaped, std 0.02; norms 1) in the given mix, loadable by any GGUF
 * engine. Used for speed and memory benchmarks: speed does not depend on the
 * weight values. */
LARES_API lares_status lares_synth(const lares_synth_opts *o, const char *out_path,
                                   lares_error *err);
LARES_API const char *lares_synth_presets(void);

typedef struct lares_quantize_opts {
    int32_t n_threads;      /* 0: all cores */
    lares_progress_fn progress;
    void *user;
} lares_quantize_opts;

LARES_API lares_quantize_opts lares_quantize_opts_default(void);
/* Re-encodes every weight matrix of in_path in the named mix (see
 * lares_quantize_types()), keeping all metadata; norms stay F32. */
LARES_API lares_status lares_quantize(const char *in_path, const char *out_path, const char *type,
                                      const lares_quantize_opts *o, lares_error *err);
LARES_API const char *lares_quantize_types(void);

/* ---- conversion --------------------------------------------------------- */

/* Converts a llama2.c checkpoint and its tokenizer file to a GGUF file. */
LARES_API lares_status lares_convert_llama2c(const char *ckpt_path, const char *tokenizer_path,
                                             const char *out_path, lares_error *err);

/* ---- kernels ------------------------------------------------------------ */

/* Forces the kernel family ("scalar", "avx2", "avxvnni", "avx512", "neon",
 * "neon-nodot") before the first model is used; an instruction set this CPU or
 * build lacks is an error. */
LARES_API lares_status lares_force_isa(const char *name, lares_error *err);
/* The kernel family in use ("avx512vnni", "avxvnni", "avx2", "neon+dotprod",
 * "scalar"). */
LARES_API const char *lares_isa(void);
/* The CPU's features that matter to the kernels, one line of lower-case names
 * ("avx2 fma f16c avx512f avx512bw avx512vl avx512vnni ... avxvnni"). */
LARES_API const char *lares_cpu_flags(void);
LARES_API const char *lares_version(void);

/* ---- rings: several devices running one model (docs/ring.md) ------------ */

#define LARES_KEY_Z85_LEN 40

/* Writes a new CURVE key pair to `path` (created with mode 0600; an existing
 * file is never overwritten) and its public half to `path`.pub. The public key
 * (40 Z85 characters and a NUL) goes to public_key. */
LARES_API lares_status lares_keygen(const char *path, char public_key[LARES_KEY_Z85_LEN + 1],
                                    lares_error *err);

/* One device of ring.json, as the head saw it. */
typedef struct lares_ring_device {
    const char *name;       /* borrowed from the session */
    const char *address;    /* "" for the head */
    bool in_ring;           /* a member of the plan in force */
    bool alive;             /* answering (a member, or idle and reachable) */
    const char *state;      /* "serving", "left out", "joining", "suspect", "lost",
                               "rejoining" (docs/ring.md "Device states"); static */
    int32_t w, n;           /* layers per window, of which on a GPU (0: not in the ring) */
    int32_t n_layers;       /* layers held over all rounds */
    uint64_t windows_run;   /* windows computed since the session started */
    double compute_ms;      /* their compute time, as the device measured it */
    double disk_wait_ms;    /* of which waiting for weights from disk */
    uint64_t major_faults;  /* page faults that read the disk during those windows */
    uint32_t mem_free_mib;  /* the memory it could still give, last reported; UINT32_MAX unknown */
    double measured_ms;     /* per layer per generated token, the head's moving estimate
                               under the plan in force; < 0 not measured yet */
    double predicted_ms;    /* the planner's figure beside it (compute per layer); < 0 when
                               the plan in force did not come from the planner */
    double predicted_token_ms; /* the planner's time of this device's share of a token
                                  (compute, disk, its hop out); < 0 as above */
    uint64_t shipped_bytes; /* model bytes the head sent it (a worker without the model
                               file, issue 19); 0 for the head */
} lares_ring_device;

typedef struct lares_ring_stats {
    int32_t n_devices;      /* in the plan in force, the head included */
    int32_t n_config;       /* in ring.json */
    int32_t rounds;         /* k */
    int32_t width;          /* layers per round, W */
    uint64_t hops;          /* hidden-state transfers between devices */
    double wait_ms;         /* time hidden states spent in the ring, from send to return */
    double remote_ms;       /* of which the workers computed (the rest: network and queues) */
    uint64_t replans;       /* re-balancing plan changes */
    uint64_t failovers;     /* devices lost and survived */
    double switch_ms;       /* time spent changing plans (the KV re-runs included) */
    double last_switch_ms;  /* of which the last plan change */
    uint64_t rebuilt_tokens; /* positions re-run to rebuild the KV cache after plan changes */
    uint64_t kv_moved_bytes; /* KV entries copied from old to new owners by plan changes */
    const char *last_switch; /* the last plan change in words ("" none) */
    const char *placement;   /* what made the plan in force: "explicit" (ring.json's
                                windows), "even", or the planner's "halda", "memory", "single" */
    double predicted_token_ms; /* the planner's token latency for it; < 0 none */
    /* workers without the model file given new layers (issue 19): plan
     * changes whose weights were fetched in the background while the ring
     * generated, those that waited for a fetch, background fetches that
     * failed (the plan in force stayed), and the tokens generated while
     * background fetches ran */
    uint64_t prepared_switches;
    uint64_t waited_switches;
    uint64_t prepare_failures;
    uint64_t fetch_tokens;
    /* several sequences at once (lares_batch over a ring, issue 20): KV
     * slots every member keeps (1: the session's own only; a batch of n, n +
     * 1), and the most batches that were in the ring at once (> 1: its
     * groups were pipelined) */
    int32_t kv_slots;
    int32_t max_in_flight;
    uint64_t rebuild_passes; /* ring passes the re-runs of rebuilt_tokens took (a batch's
                                sequences re-run together share passes) */
} lares_ring_stats;

/* Figures of a ring session: LARES_EINVAL for a session on one device.
 * devices (capacity cap, may be NULL) receives up to cap devices of ring.json
 * in its order (n_config of them). Call it from the thread that generates. */
LARES_API lares_status lares_session_ring_stats(const lares_session *s, lares_ring_stats *out,
                                                lares_ring_device *devices, int32_t cap,
                                                lares_error *err);

/* Re-plans and failovers so far; safe from any thread (a /metrics handler
 * while the session generates). false for a session on one device. */
LARES_API bool lares_session_ring_events(const lares_session *s, uint64_t *replans,
                                         uint64_t *failovers);
/* The devices of the plan in force (bit d: ring.json device d, the head is
 * bit 0) and ring.json's device count; safe from any thread (a /health
 * handler while the session generates). false for a session on one device. */
LARES_API bool lares_session_ring_serving(const lares_session *s, uint64_t *mask,
                                          int32_t *n_config);
/* The ring.json name of device d, valid while the session lives; NULL when
 * there is no such device. Safe from any thread. */
LARES_API const char *lares_session_ring_device_name(const lares_session *s, int32_t d);
/* The ring's state as JSON (docs/ring.md "Watching a ring"): the plan, each
 * device's state, windows and figures, the re-plans and failovers; a picture
 * the session's thread refreshes after every batch. Safe from any thread (lares serve's /v1/ring);
 * NULL for a session on one device. Freed with lares_free. */
LARES_API char *lares_session_ring_json(const lares_session *s);

/* One device of ring.json as a survey found it (lares ring status). */
typedef struct lares_ring_probe {
    char name[64];
    char address[256];   /* "" for the head */
    bool ready;          /* it welcomed this head: reachable, the same model file, idle */
    char why[256];       /* why not: silent, unreachable, busy with another head, refused */
    uint32_t n_cpu;      /* what it said of itself (0 unknown) */
    uint64_t mem_available_bytes; /* its memory budget (0 unknown) */
    double rtt_ms;       /* the least of 3 round trips of an empty PING from the head; < 0 unknown */
    int32_t w;           /* ring.json's window ("w"); -1 with automatic placement */
    int32_t layers;      /* layers it holds under ring.json's windows, every device present
                            (all rounds); -1 with automatic placement */
    int32_t rounds;      /* k under ring.json's windows; -1 with automatic placement */
} lares_ring_probe;

/* Asks every worker of ring.json (`ring`) whether it would serve model m
 * now, as a head would (HELLO, within the ring's connect_timeout_ms), and
 * lets them go. Busy workers keep serving their head (they refuse this one).
 * out: up to cap devices in ring.json order (the head first), *n of them. */
LARES_API lares_status lares_ring_survey(lares_model *m, const char *ring, bool insecure,
                                         lares_ring_probe *out, int32_t cap, int32_t *n,
                                         lares_error *err);

typedef struct lares_worker lares_worker;

typedef enum lares_worker_event_kind {
    LARES_WORKER_LISTENING = 0, /* bound; text has the address */
    LARES_WORKER_REFUSED,       /* a peer was refused: key, version, model, malformed frame */
    LARES_WORKER_HEAD,          /* a head connected */
    LARES_WORKER_PLAN,          /* the head's plan is in force: this worker's layers */
    LARES_WORKER_ROUND,         /* one window ran (round, layers, times) */
    LARES_WORKER_HEAD_LOST,     /* the head went silent; waiting for the next */
    LARES_WORKER_STOPPED,       /* the head ended its session; waiting for the next */
    LARES_WORKER_ERROR,         /* something failed; the head was told */
    LARES_WORKER_FETCH          /* weights fetched from the head: progress (issue 19) */
} lares_worker_event_kind;

typedef struct lares_worker_event {
    lares_worker_event_kind kind;
    const char *text;       /* one line saying what happened */
    int32_t round, l0, l1, n_tok; /* LARES_WORKER_ROUND: the window [l0, l1) of round `round` */
    double compute_ms;      /* LARES_WORKER_ROUND */
    double wait_ms;         /* LARES_WORKER_ROUND: from arrival to the start of compute */
} lares_worker_event;

/* Called from the worker's threads (network and compute), one call at a time. */
typedef void (*lares_worker_event_fn)(const lares_worker_event *ev, void *user);

typedef struct lares_worker_opts {
    const char *listen;       /* "host:port"; port 0 picks a free one (lares_worker_address) */
    const char *key_path;     /* this worker's key pair (lares keygen) */
    const char *const *allow; /* heads allowed: public keys (40 Z85) or files of them */
    size_t n_allow;
    const char *model_path;   /* NULL: open the file the head names */
    int32_t n_threads;        /* 0: the head's ring.json, else all cores */
    uint64_t mem_budget;      /* as lares_session_opts.mem_budget; 0: automatic */
    bool no_stream;           /* plain mmap, no read-ahead or release (to compare) */
    lares_stream_io stream_io; /* how streamed layers are read (as lares_session_opts) */
    bool insecure;            /* no encryption, no keys (warns) */
    const char *profile_cache_dir; /* where this device's profile is cached (automatic
                                      rings); NULL: measured at every head that asks */
    /* Without model_path and without a path from the head: the head ships the
     * tensors of this worker's windows into this weight cache (issue 19,
     * docs/ring.md "Workers without the model file"); NULL: no shipping */
    const char *cache_dir;
    uint64_t cache_size; /* the most bytes the weight cache may hold; 0: no limit */
    bool pairable;            /* may start with no allowed head: heads paired later are
                                 added with lares_worker_allow (issue 19) */
    lares_worker_event_fn on_event;
    void *user;
} lares_worker_opts;

LARES_API lares_worker_opts lares_worker_opts_default(void);
/* Reads the key and the allow-list and binds the listening socket. */
LARES_API lares_status lares_worker_create(const lares_worker_opts *o, lares_worker **out,
                                           lares_error *err);
/* The address actually listened on ("127.0.0.1:40123"). */
LARES_API const char *lares_worker_address(const lares_worker *w);
/* This worker's public key (Z85); "" when insecure. */
LARES_API const char *lares_worker_public_key(const lares_worker *w);
/* Serves heads, one after another, until lares_worker_stop. */
LARES_API lares_status lares_worker_run(lares_worker *w, lares_error *err);
/* Makes lares_worker_run return soon; safe from another thread or a signal handler. */
LARES_API void lares_worker_stop(lares_worker *w);
/* Allows one more head (its Z85 public key) from now on, e.g. one just paired;
 * safe from any thread. */
LARES_API lares_status lares_worker_allow(lares_worker *w, const char *head_key_z85,
                                          lares_error *err);
/* Tests and benchmarks only: from now on every window takes `factor` times as
 * long (the worker sleeps factor - 1 times the window's compute time after
 * it), as if the device's CPU were cut to 1/factor. 1 (or less): off. Safe
 * from any thread. */
LARES_API void lares_worker_set_slowdown(lares_worker *w, double factor);
/* Tests only: the next n chunks of weights received are damaged (a byte
 * flipped) before they are written, as if changed on their way. */
LARES_API void lares_worker_set_tamper(lares_worker *w, int n);
/* Tests only: a pause of `ms` (at most 10 s) after each chunk of weights
 * received, as if over a slow link (a fetch long enough to watch the ring
 * generate meanwhile). 0: off. */
LARES_API void lares_worker_set_fetch_delay(lares_worker *w, unsigned ms);
LARES_API void lares_worker_free(lares_worker *w);

/* One model in a worker's weight cache (issue 19). */
typedef struct lares_cache_model {
    char hash[65];       /* SHA-256 of the model file's header, hex: the cache's key */
    char name[64];       /* general.name; "" unknown, "(damaged)" unreadable */
    uint64_t file_bytes; /* the whole model file */
    uint64_t bytes;      /* held in the cache */
    int64_t last_use;    /* seconds since the epoch */
    uint32_t tensors, tensors_held; /* in the model, held and verified */
} lares_cache_model;

/* The models of the weight cache in dir, most recently used first; *out is
 * freed with lares_cache_list_free. A missing dir is an empty list. */
LARES_API lares_status lares_cache_list(const char *dir, lares_cache_model **out, size_t *n,
                                        lares_error *err);
LARES_API void lares_cache_list_free(lares_cache_model *list);

/* ---- devices and plans (docs/scheduling-impl.md) ------------------------ */

typedef struct lares_profile_opts {
    const char *model_path; /* time the disk holding this file; NULL: a temporary
                               file in cache_dir (or /tmp) */
    const char *cache_dir;  /* profiles are cached here per hardware fingerprint;
                               NULL or "": no cache */
    const char *name;       /* the device's name; NULL: the host name */
    bool refresh;           /* measure again even when the cache has this device */
    int32_t n_threads;      /* 0: every core */
    uint32_t budget_ms;     /* measuring time (0: 2000 ms) */
    bool no_calibrate;      /* with model_path: keep the kernels' micro-benchmark rates
                               instead of fitting them to real windows of the model */
} lares_profile_opts;

LARES_API lares_profile_opts lares_profile_opts_default(void);
/* Profiles this device: FLOP/s per weight type with lares' kernels, memory
 * bandwidth, free memory (cgroup limits honoured), disk throughput, OS, GPU.
 * With model_path, the CPU rates are then fitted to a few real layer windows
 * of that model run here by the wall clock (within this process's threads,
 * CPU quota and memory budget), and the profile is that model's.
 * *json_out: one JSON object (a device entry of a devices file), released with
 * lares_free. */
LARES_API lares_status lares_profile(const lares_profile_opts *o, char **json_out,
                                     lares_error *err);

typedef struct lares_plan_opts {
    const char *model_path;   /* a GGUF file, or */
    const char *shape;        /* a public shape and mix, "llama3-70b:q4_k_m" */
    const char *placement;    /* "halda" (default), "even", "memory", "single" */
    int32_t n_ctx;            /* context held in the KV caches; 0: min(model's, 4096) */
    double net_latency_ms;    /* a default hop for devices without figures; < 0: none */
    const char *net_bandwidth; /* with it: "300Mbit/s", "1GB/s" */
} lares_plan_opts;

LARES_API lares_plan_opts lares_plan_opts_default(void);
/* Plans the model over the devices of devices_json (a devices file or a list of
 * profiles; `what` names it in messages) with the chosen placement, and prices
 * the other placements with the same latency model. *json_out: the plan, the
 * predicted times per device and the baselines, released with lares_free. */
LARES_API lares_status lares_plan(const lares_plan_opts *o, const char *devices_json, size_t len,
                                  const char *what, char **json_out, lares_error *err);

/* ---- memory ------------------------------------------------------------- */

LARES_API void *lares_alloc(size_t n);
LARES_API void lares_free(void *p);

/* What offloading the model at model_path to a GPU with gpu_mem bytes for
 * weights would do, by both methods (docs/gpu.md), as one JSON object in
 * *json_out (release with lares_free). Needs no GPU: times are estimates from
 * desktop-class rates. method: "layers" or "affinity" (marked "chosen");
 * gpu_mem 0: 90 % of the free memory of this machine's CUDA device
 * (LARES_ENOTFOUND / LARES_EUNSUPPORTED when there is none); n_tok: tokens per
 * pass (1: generation, more: a prompt batch). */
LARES_API lares_status lares_gpu_plan(const char *model_path, const char *method,
                                      uint64_t gpu_mem, int32_t n_tok, char **json_out,
                                      lares_error *err);

#ifdef __cplusplus
}
#endif

#endif /* LARES_H */
