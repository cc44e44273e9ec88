/*
 * The wire format of the ring (docs/protocol.md): a 20-byte header, then the
 * payload of one frame type. Every integer is little-endian and goes through
 * the byte cursors below; nothing is cast or copied into a struct. The
 * decoder distrusts its input: each length is bounded by the bytes left and
 * by a named limit before it is used, enum values are range-checked, and a
 * payload must be consumed exactly.
 */
#include "cluster/cluster.h"
#include "quant/half.h"

static const char *const type_names[CLUSTER_FRAME_TYPE_END] = {
    [CLUSTER_HELLO] = "hello",
    [CLUSTER_WELCOME] = "welcome",
    [CLUSTER_PLAN] = "plan",
    [CLUSTER_READY] = "ready",
    [CLUSTER_ACT] = "act",
    [CLUSTER_KV] = "kv",
    [CLUSTER_KV_DONE] = "kv-done",
    [CLUSTER_HEARTBEAT] = "heartbeat",
    [CLUSTER_STOP] = "stop",
    [CLUSTER_ERROR] = "error",
    [CLUSTER_LINK] = "link",
    [CLUSTER_LINK_OK] = "link-ok",
    [CLUSTER_PING] = "ping",
    [CLUSTER_PONG] = "pong",
    [CLUSTER_KV_GET] = "kv-get",
    [CLUSTER_KV_DATA] = "kv-data",
    [CLUSTER_PEER_LOST] = "peer-lost",
    [CLUSTER_KV_MIRROR] = "kv-mirror",
    [CLUSTER_TENSOR_GET] = "tensor-get",
    [CLUSTER_TENSOR_DATA] = "tensor-data",
    [CLUSTER_PREPARE] = "prepare",
    [CLUSTER_PREPARED] = "prepared",
};

const char *cluster_frame_type_name(uint32_t type) {
    if (type == 0 || type >= CLUSTER_FRAME_TYPE_END) {
        return "?";
    }
    return type_names[type];
}

/* ---- the writing cursor: stops at the first write that does not fit ---- */

typedef struct wcur {
    uint8_t *p;
    size_t cap;
    size_t len;
    bool ok;
} wcur;

static bool w_room(wcur *w, size_t n) {
    if (!w->ok || w->cap - w->len < n) {
        w->ok = false;
        return false;
    }
    return true;
}
static void w_u8(wcur *w, uint8_t v) {
    if (w_room(w, 1)) {
        w->p[w->len++] = v;
    }
}
static void w_u16(wcur *w, uint16_t v) {
    if (w_room(w, 2)) {
        wr_u16le(w->p + w->len, v);
        w->len += 2;
    }
}
static void w_u32(wcur *w, uint32_t v) {
    if (w_room(w, 4)) {
        wr_u32le(w->p + w->len, v);
        w->len += 4;
    }
}
static void w_u64(wcur *w, uint64_t v) {
    if (w_room(w, 8)) {
        wr_u64le(w->p + w->len, v);
        w->len += 8;
    }
}
static void w_bytes(wcur *w, const void *b, size_t n) {
    if (w_room(w, n) && n > 0) {
        memcpy(w->p + w->len, b, n);
        w->len += n;
    }
}
/* strings: u16 length, then the bytes (no NUL); `max` is the field's limit */
static void w_str(wcur *w, const char *s, size_t max) {
    size_t n = strlen(s);
    if (n > max) {
        w->ok = false;
        return;
    }
    w_u16(w, (uint16_t)n);
    w_bytes(w, s, n);
}

static wcur begin(uint8_t *buf, size_t cap, uint16_t version, uint16_t type, uint64_t session) {
    wcur w = {.p = buf, .cap = cap, .len = 0, .ok = buf != NULL};
    w_u32(&w, CLUSTER_MAGIC);
    w_u16(&w, version);
    w_u16(&w, type);
    w_u64(&w, session);
    w_u32(&w, 0); /* payload bytes, filled by finish */
    return w;
}

static size_t finish(wcur *w) {
    if (!w->ok || w->len > CLUSTER_MAX_FRAME) {
        return 0;
    }
    wr_u32le(w->p + 16, (uint32_t)(w->len - CLUSTER_HEADER_BYTES));
    return w->len;
}

/* ---- the reading cursor ---- */

typedef struct rcur {
    const uint8_t *p;
    size_t len;
    size_t off;
    const char *what; /* the frame type, for messages */
    lares_error *err;
    bool ok;
} rcur;

static bool r_need(rcur *r, size_t n, const char *field) {
    if (!r->ok) {
        return false;
    }
    if (r->len - r->off < n) {
        lares_fail(r->err, LARES_EFORMAT,
                   "malformed %s frame: %s needs %zu bytes at offset %zu, %zu left", r->what, field,
                   n, r->off, r->len - r->off);
        r->ok = false;
        return false;
    }
    return true;
}
static uint8_t r_u8(rcur *r, const char *field) {
    if (!r_need(r, 1, field)) {
        return 0;
    }
    return r->p[r->off++];
}
static uint16_t r_u16(rcur *r, const char *field) {
    if (!r_need(r, 2, field)) {
        return 0;
    }
    uint16_t v = rd_u16le(r->p + r->off);
    r->off += 2;
    return v;
}
static uint32_t r_u32(rcur *r, const char *field) {
    if (!r_need(r, 4, field)) {
        return 0;
    }
    uint32_t v = rd_u32le(r->p + r->off);
    r->off += 4;
    return v;
}
static uint64_t r_u64(rcur *r, const char *field) {
    if (!r_need(r, 8, field)) {
        return 0;
    }
    uint64_t v = rd_u64le(r->p + r->off);
    r->off += 8;
    return v;
}
static const uint8_t *r_bytes(rcur *r, size_t n, const char *field) {
    if (!r_need(r, n, field)) {
        return NULL;
    }
    const uint8_t *p = r->p + r->off;
    r->off += n;
    return p;
}
/* a string into out (capacity max + 1), NUL-terminated */
static void r_str(rcur *r, char *out, size_t max, const char *field) {
    out[0] = '\0';
    uint16_t n = r_u16(r, field);
    if (!r->ok) {
        return;
    }
    if (n > max) {
        lares_fail(r->err, LARES_EFORMAT, "malformed %s frame: %s of %u bytes (at most %zu)",
                   r->what, field, n, max);
        r->ok = false;
        return;
    }
    const uint8_t *b = r_bytes(r, n, field);
    if (b == NULL) {
        return;
    }
    if (memchr(b, 0, n) != NULL) {
        lares_fail(r->err, LARES_EFORMAT, "malformed %s frame: %s contains a NUL byte", r->what,
                   field);
        r->ok = false;
        return;
    }
    memcpy(out, b, n);
    out[n] = '\0';
}
/* a semantic check on a decoded value */
static void r_check(rcur *r, bool cond, const char *fmt, ...) LARES_PRINTF(3, 4);
static void r_check(rcur *r, bool cond, const char *fmt, ...) {
    if (!r->ok || cond) {
        return;
    }
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    lares_fail(r->err, LARES_EFORMAT, "malformed %s frame: %s", r->what, what);
    r->ok = false;
}

/* ---- the header ---- */

lares_status cluster_frame_header(const uint8_t *buf, size_t len, uint16_t *version, uint16_t *type,
                                  uint64_t *session, lares_error *err) {
    if (len < CLUSTER_HEADER_BYTES) {
        return lares_fail(err, LARES_EFORMAT, "malformed frame: %zu bytes, the header alone is %d",
                          len, CLUSTER_HEADER_BYTES);
    }
    const uint32_t magic = rd_u32le(buf);
    if (magic != CLUSTER_MAGIC) {
        return lares_fail(err, LARES_EFORMAT,
                          "malformed frame: magic 0x%08x, expected 0x%08x (\"LRNG\"): not a lares "
                          "ring peer",
                          magic, CLUSTER_MAGIC);
    }
    *version = rd_u16le(buf + 4);
    *type = rd_u16le(buf + 6);
    *session = rd_u64le(buf + 8);
    const uint32_t payload = rd_u32le(buf + 16);
    if (len > CLUSTER_MAX_FRAME) {
        return lares_fail(err, LARES_EFORMAT, "malformed frame: %zu bytes (at most %u)", len,
                          CLUSTER_MAX_FRAME);
    }
    if ((size_t)payload != len - CLUSTER_HEADER_BYTES) {
        return lares_fail(err, LARES_EFORMAT,
                          "malformed frame: header says %u payload bytes, %zu arrived", payload,
                          len - CLUSTER_HEADER_BYTES);
    }
    if (*type == 0 || *type >= CLUSTER_FRAME_TYPE_END) {
        return lares_fail(err, LARES_EFORMAT, "malformed frame: unknown frame type %u", *type);
    }
    if (*version != CLUSTER_PROTO_VERSION && *type != CLUSTER_ERROR) {
        return lares_fail(err, LARES_EPROTO,
                          "peer speaks ring protocol version %u, this side speaks version %d",
                          *version, CLUSTER_PROTO_VERSION);
    }
    return LARES_OK;
}

/* ---- per-type payloads ---- */

static void dec_hello(rcur *r, cluster_hello *h) {
    h->model.file_bytes = r_u64(r, "model size");
    h->model.header_hash = r_u64(r, "model hash");
    h->device = r_u32(r, "device index");
    h->n_devices = r_u32(r, "device count");
    h->heartbeat_ms = r_u32(r, "heartbeat");
    h->timeout_ms = r_u32(r, "timeout");
    h->flags = r_u32(r, "flags");
    h->profile_ms = r_u32(r, "profile time");
    r_str(r, h->model_path, CLUSTER_MAX_PATH, "model path");
    r_str(r, h->head_name, CLUSTER_MAX_NAME, "head name");
    r_check(r, h->n_devices >= 2 && h->n_devices <= CLUSTER_MAX_DEVICES, "%u devices (2 to %d)",
            h->n_devices, CLUSTER_MAX_DEVICES);
    r_check(r, h->device >= 1 && h->device < h->n_devices, "device index %u of %u", h->device,
            h->n_devices);
    r_check(r, h->heartbeat_ms >= 10 && h->heartbeat_ms <= 60000, "heartbeat of %u ms",
            h->heartbeat_ms);
    r_check(r, h->timeout_ms > h->heartbeat_ms && h->timeout_ms <= 600000,
            "timeout of %u ms (heartbeat %u ms)", h->timeout_ms, h->heartbeat_ms);
    r_check(r, (h->flags & ~(CLUSTER_HELLO_PROFILE | CLUSTER_HELLO_SURVEY)) == 0,
            "unknown flags 0x%x", h->flags);
    r_check(r, h->profile_ms <= CLUSTER_MAX_PROFILE_MS, "profile time of %u ms (at most %d)",
            h->profile_ms, CLUSTER_MAX_PROFILE_MS);
}

static void dec_welcome(rcur *r, cluster_welcome *w) {
    w->model.file_bytes = r_u64(r, "model size");
    w->model.header_hash = r_u64(r, "model hash");
    w->n_layer = r_u32(r, "layer count");
    w->n_embd = r_u32(r, "embedding width");
    w->n_cpu = r_u32(r, "cpu count");
    w->mem_available_bytes = r_u64(r, "available memory");
    r_str(r, w->name, CLUSTER_MAX_NAME, "name");
    r_str(r, w->profile, CLUSTER_MAX_PROFILE, "profile");
    r_check(r,
            w->n_layer >= 1 && w->n_layer <= INT32_MAX && w->n_embd >= 1 && w->n_embd <= INT32_MAX,
            "model of %u layers, width %u", w->n_layer, w->n_embd);
}

static void dec_plan(rcur *r, cluster_plan_msg *p) {
    p->self = r_u32(r, "device index");
    p->n_ctx = r_u32(r, "context");
    p->n_batch = r_u32(r, "batch");
    p->n_embd = r_u32(r, "embedding width");
    p->n_threads = r_u32(r, "threads");
    p->act_dtype = r_u8(r, "activation type");
    p->kv_f16 = r_u8(r, "kv type");
    p->flags = r_u16(r, "flags");
    p->ping_bytes = r_u32(r, "ping bytes");
    const uint32_t n_layer = r_u32(r, "layer count");
    const uint32_t n_dev = r_u32(r, "device count");
    r_check(r, (p->flags & ~CLUSTER_PLAN_FLAGS) == 0, "unknown flags 0x%x", p->flags);
    r_check(r, p->ping_bytes <= CLUSTER_MAX_PING, "ping of %u bytes (at most %u)", p->ping_bytes,
            CLUSTER_MAX_PING);
    r_check(r, n_dev >= 2 && n_dev <= CLUSTER_MAX_DEVICES, "%u devices (2 to %d)", n_dev,
            CLUSTER_MAX_DEVICES);
    r_check(r, p->self >= 1 && p->self < n_dev, "device index %u of %u", p->self, n_dev);
    r_check(r, n_layer >= 1 && n_layer <= INT32_MAX, "%u layers", n_layer);
    r_check(r, p->n_ctx >= 1 && p->n_ctx <= INT32_MAX, "context of %u", p->n_ctx);
    r_check(r, p->n_batch >= 1 && p->n_batch <= p->n_ctx, "batch of %u (context %u)", p->n_batch,
            p->n_ctx);
    r_check(r, p->n_embd >= 1 && p->n_embd <= INT32_MAX, "embedding width %u", p->n_embd);
    r_check(r, p->n_threads <= 4096, "%u threads", p->n_threads);
    r_check(r, p->act_dtype <= CLUSTER_DTYPE_F16, "activation type %u", p->act_dtype);
    r_check(r, p->kv_f16 <= 1, "kv type %u", p->kv_f16);
    /* with slots, a row per run at most: a run table as long as the batch */
    const uint32_t max_runs = (p->flags & CLUSTER_PLAN_SLOTS) ? p->n_batch : 0;
    r_check(r,
            cluster_act_bytes_runs(p->n_batch, p->n_embd, p->act_dtype, CLUSTER_MAX_TRACE,
                                   max_runs) != 0,
            "a batch of %u x %u values exceeds the %u-byte frame limit", p->n_batch, p->n_embd,
            CLUSTER_MAX_FRAME);
    if (!r->ok) {
        return;
    }
    p->plan.n_layer = (int32_t)n_layer;
    p->plan.n_dev = (int32_t)n_dev;
    for (uint32_t d = 0; d < n_dev && r->ok; d++) {
        const uint32_t w = r_u32(r, "window");
        const uint32_t n = r_u32(r, "gpu layers");
        p->link_delay_ms[d] = r_u32(r, "link delay");
        const uint8_t *key = r_bytes(r, CLUSTER_KEY_BYTES, "public key");
        r_str(r, p->addr[d], CLUSTER_MAX_ADDR, "address");
        r_check(r, w <= n_layer && n <= w, "device %u: window of %u layers, %u on gpu", d, w, n);
        r_check(r, p->link_delay_ms[d] <= CLUSTER_MAX_LINK_DELAY_MS, "device %u: link delay %u ms",
                d, p->link_delay_ms[d]);
        r_check(r, d == 0 || p->addr[d][0] != '\0', "device %u has no address", d);
        if (r->ok) {
            p->plan.w[d] = (int32_t)w;
            p->plan.n[d] = (int32_t)n;
            memcpy(p->keys[d], key, CLUSTER_KEY_BYTES);
        }
    }
    p->n_slots = (p->flags & CLUSTER_PLAN_SLOTS) ? r_u32(r, "slot count") : 1;
    r_check(r, p->n_slots >= 1 && p->n_slots <= CLUSTER_MAX_SLOTS, "%u slots (1 to %d)", p->n_slots,
            CLUSTER_MAX_SLOTS);
    if (r->ok) {
        lares_error perr;
        if (cluster_plan_check(&p->plan, &perr) != LARES_OK) {
            r_check(r, false, "%s", perr.msg);
        }
    }
}

static void dec_act(rcur *r, cluster_act *a) {
    a->seq = r_u64(r, "sequence");
    a->layer = r_u32(r, "layer");
    a->end = r_u32(r, "end layer");
    a->n_tok = r_u32(r, "token count");
    a->n_embd = r_u32(r, "embedding width");
    a->dtype = r_u8(r, "element type");
    const uint8_t flags = r_u8(r, "flags");
    a->n_trace = r_u16(r, "trace count");
    a->n_runs = (flags & CLUSTER_ACT_RUNS) ? r_u32(r, "run count") : 0;
    a->runs = NULL;
    r_check(r, (flags & ~CLUSTER_ACT_RUNS) == 0, "unknown flags 0x%x", flags);
    r_check(r, !(flags & CLUSTER_ACT_RUNS) || (a->n_runs >= 1 && a->n_runs <= a->n_tok),
            "%u runs for %u tokens", a->n_runs, a->n_tok);
    r_check(r, a->dtype <= CLUSTER_DTYPE_F16, "element type %u (0 = f32, 1 = f16)", a->dtype);
    r_check(r, a->n_tok >= 1, "no tokens");
    r_check(r, a->n_embd >= 1, "embedding width 0");
    r_check(r, a->layer <= INT32_MAX, "layer %u", a->layer);
    r_check(r, a->end >= 1 && a->end <= INT32_MAX, "end layer %u", a->end);
    r_check(r, a->n_trace <= CLUSTER_MAX_TRACE, "%u trace entries (at most %d)", a->n_trace,
            CLUSTER_MAX_TRACE);
    if (!r->ok) {
        return;
    }
    /* the whole size first, from the counts, against the bytes present */
    const size_t need =
        cluster_act_bytes_runs(a->n_tok, a->n_embd, a->dtype, a->n_trace, a->n_runs);
    r_check(r, need != 0 && need == r->len,
            "%u tokens x %u values of %s with %u trace entries and %u runs need %zu bytes, the "
            "frame has %zu",
            a->n_tok, a->n_embd, a->dtype == CLUSTER_DTYPE_F16 ? "f16" : "f32", a->n_trace,
            a->n_runs, need, r->len);
    if (!r->ok) {
        return;
    }
    a->runs = a->n_runs > 0 ? r_bytes(r, (size_t)a->n_runs * CLUSTER_RUN_BYTES, "runs") : NULL;
    a->pos = r_bytes(r, (size_t)a->n_tok * 4, "positions");
    a->trace = r_bytes(r, (size_t)a->n_trace * CLUSTER_TRACE_BYTES, "trace");
    const size_t esize = a->dtype == CLUSTER_DTYPE_F16 ? 2 : 4;
    a->data = r_bytes(r, (size_t)a->n_tok * a->n_embd * esize, "hidden states");
    /* the rows of each run (one run without a table) follow each other */
    uint64_t rows = 0;
    uint32_t run = 0, run_end = a->n_runs > 0 ? 0 : a->n_tok;
    int32_t prev = 0;
    for (uint32_t i = 0; i < a->n_tok && r->ok; i++) {
        const bool first = i == run_end || i == 0;
        r_check(r, i < run_end || run < a->n_runs, "the %u runs end before row %u of %u", a->n_runs,
                i, a->n_tok);
        if (r->ok && i == run_end) {
            cluster_run cr;
            cluster_act_run_at(a, run, &cr);
            r_check(r, cr.slot < CLUSTER_MAX_SLOTS, "run %u names slot %u (at most %d)", run,
                    cr.slot, CLUSTER_MAX_SLOTS - 1);
            r_check(r, cr.rows >= 1 && cr.rows <= a->n_tok - i,
                    "run %u of %u rows from row %u of %u", run, cr.rows, i, a->n_tok);
            run_end = i + cr.rows;
            rows += cr.rows;
            run++;
        }
        const int32_t p = cluster_act_pos(a, i);
        r_check(r, p >= 0 && p < INT32_MAX, "position %d of token %u", p, i);
        r_check(r, first || p == prev + 1,
                "positions are not consecutive at token %u (%d after %d)", i, p, prev);
        prev = p;
    }
    r_check(r, a->n_runs == 0 || (run == a->n_runs && rows == a->n_tok),
            "%u runs for %u rows, the table has %u", run, a->n_tok, a->n_runs);
    for (uint32_t i = 0; i < a->n_trace && r->ok; i++) {
        cluster_trace t;
        cluster_act_trace_at(a, i, &t);
        r_check(r, t.device < CLUSTER_MAX_DEVICES, "trace entry %u names device %u", i, t.device);
    }
}

#define KV_DATA_FIXED_BYTES (4 + 4 + 4 + 4 + 1 + 1 + 2)

static void dec_kv_data(rcur *r, cluster_kv_data *d) {
    d->layer = r_u32(r, "layer");
    d->pos0 = (int32_t)r_u32(r, "first position");
    d->n_pos = r_u32(r, "position count");
    d->row_bytes = r_u32(r, "row bytes");
    d->kv_f16 = r_u8(r, "kv type");
    d->last = r_u8(r, "last");
    d->slot = r_u16(r, "slot");
    r_check(r, d->slot < CLUSTER_MAX_SLOTS, "slot %u (at most %d)", d->slot, CLUSTER_MAX_SLOTS - 1);
    r_check(r, d->layer <= INT32_MAX, "layer %u", d->layer);
    r_check(r, d->pos0 >= 0 && d->n_pos >= 1 && (uint64_t)d->pos0 + d->n_pos <= INT32_MAX,
            "%u positions from %d", d->n_pos, d->pos0);
    r_check(r, d->row_bytes >= 1, "rows of 0 bytes");
    r_check(r, d->kv_f16 <= 1 && d->last <= 1, "kv type %u, last %u", d->kv_f16, d->last);
    if (!r->ok) {
        return;
    }
    const size_t need = cluster_kv_data_bytes(d->n_pos, d->row_bytes);
    r_check(r, need != 0 && need == r->len,
            "%u positions of %u-byte K and V rows need %zu bytes, the frame has %zu", d->n_pos,
            d->row_bytes, need, r->len);
    if (!r->ok) {
        return;
    }
    const size_t rows = (size_t)d->n_pos * d->row_bytes;
    d->k = r_bytes(r, rows, "K rows");
    d->v = r_bytes(r, rows, "V rows");
}

#define TENSOR_DATA_FIXED_BYTES (4 + 4 + 8 + 8 + CLUSTER_SHA256_BYTES + 4)

static void dec_tensor_data(rcur *r, cluster_tensor_data *d) {
    d->item = r_u32(r, "item");
    d->status = r_u32(r, "status");
    d->item_bytes = r_u64(r, "item bytes");
    d->offset = r_u64(r, "offset");
    const uint8_t *h = r_bytes(r, CLUSTER_SHA256_BYTES, "sha-256");
    if (h != NULL) {
        memcpy(d->sha256, h, CLUSTER_SHA256_BYTES);
    }
    d->length = r_u32(r, "length");
    d->data = NULL;
    r_check(r, d->status < 1000, "status %u", d->status);
    r_check(r, d->length <= CLUSTER_MAX_CHUNK, "a chunk of %u bytes (at most %u)", d->length,
            CLUSTER_MAX_CHUNK);
    r_check(r, d->status == 0 || d->length == 0, "a refusal (status %u) with %u bytes", d->status,
            d->length);
    r_check(r, d->offset <= d->item_bytes && d->item_bytes - d->offset >= d->length,
            "bytes %" PRIu64 " + %u past the item's %" PRIu64, d->offset, d->length,
            d->item_bytes);
    if (r->ok) {
        d->data = r_bytes(r, d->length, "data");
    }
}

lares_status cluster_frame_decode(const uint8_t *buf, size_t len, cluster_frame *out,
                                  lares_error *err) {
    lares_status st = cluster_frame_header(buf, len, &out->version, &out->type, &out->session, err);
    if (st != LARES_OK) {
        return st;
    }
    rcur r = {.p = buf,
              .len = len,
              .off = CLUSTER_HEADER_BYTES,
              .what = cluster_frame_type_name(out->type),
              .err = err,
              .ok = true};
    switch ((cluster_frame_type)out->type) {
    case CLUSTER_HELLO:
        dec_hello(&r, &out->u.hello);
        break;
    case CLUSTER_WELCOME:
        dec_welcome(&r, &out->u.welcome);
        break;
    case CLUSTER_PLAN:
        dec_plan(&r, &out->u.plan);
        break;
    case CLUSTER_PREPARE:
        dec_plan(&r, &out->u.prepare);
        r_check(&r, (out->u.prepare.flags & CLUSTER_PLAN_PROBE) == 0,
                "a probe plan has no windows to prepare");
        break;
    case CLUSTER_PREPARED:
        out->u.prepared.status = r_u32(&r, "status");
        out->u.prepared.fetched_bytes = r_u64(&r, "fetched bytes");
        r_str(&r, out->u.prepared.msg, CLUSTER_MAX_MSG, "message");
        r_check(&r, out->u.prepared.status < LARES_STATUS_COUNT, "status %u",
                out->u.prepared.status);
        break;
    case CLUSTER_READY:
        out->u.ready.kv_bytes = r_u64(&r, "kv bytes");
        out->u.ready.n_windows = r_u32(&r, "window count");
        out->u.ready.rtt_us = r_u32(&r, "round trip");
        out->u.ready.rtt_big_us = r_u32(&r, "round trip with filler");
        break;
    case CLUSTER_ACT:
        dec_act(&r, &out->u.act);
        break;
    case CLUSTER_KV:
    case CLUSTER_KV_DONE:
        out->u.kv.op = r_u32(&r, "operation");
        out->u.kv.pos = (int32_t)r_u32(&r, "position");
        out->u.kv.slot = (out->u.kv.op & CLUSTER_KV_OP_SLOT) ? r_u32(&r, "slot") : 0;
        out->u.kv.op &= ~CLUSTER_KV_OP_SLOT;
        r_check(&r,
                out->u.kv.op == CLUSTER_KV_CLEAR || out->u.kv.op == CLUSTER_KV_TRUNCATE ||
                    (out->u.kv.op == CLUSTER_KV_PUT && out->type == CLUSTER_KV_DONE),
                "kv operation %u", out->u.kv.op);
        r_check(&r, out->u.kv.pos >= 0, "kv position %d", out->u.kv.pos);
        r_check(&r, out->u.kv.slot < CLUSTER_MAX_SLOTS, "slot %u (at most %d)", out->u.kv.slot,
                CLUSTER_MAX_SLOTS - 1);
        break;
    case CLUSTER_HEARTBEAT:
        out->u.heartbeat = r_u64(&r, "counter");
        break;
    case CLUSTER_STOP:
        out->u.stop_reason = r_u32(&r, "reason");
        break;
    case CLUSTER_ERROR:
        out->u.error.code = r_u32(&r, "code");
        r_str(&r, out->u.error.msg, CLUSTER_MAX_MSG, "message");
        break;
    case CLUSTER_LINK:
    case CLUSTER_LINK_OK:
        out->u.link_from = r_u32(&r, "device index");
        r_check(&r, out->u.link_from < CLUSTER_MAX_DEVICES, "device index %u", out->u.link_from);
        break;
    case CLUSTER_PING:
    case CLUSTER_PONG:
        out->u.ping.nonce = r_u64(&r, "nonce");
        out->u.ping.filler_bytes = 0;
        if (r.ok && out->type == CLUSTER_PING) {
            /* the filler is any bytes; only its length is looked at */
            out->u.ping.filler_bytes = (uint32_t)LARES_MIN(len - r.off, (size_t)UINT32_MAX);
            r_check(&r, out->u.ping.filler_bytes <= CLUSTER_MAX_PING,
                    "%u bytes of filler (at most %u)", out->u.ping.filler_bytes, CLUSTER_MAX_PING);
            r.off = r.ok ? len : r.off;
        }
        break;
    case CLUSTER_KV_GET:
        out->u.kv_get.layer = r_u32(&r, "layer");
        out->u.kv_get.pos0 = (int32_t)r_u32(&r, "first position");
        out->u.kv_get.pos1 = (int32_t)r_u32(&r, "end position");
        out->u.kv_get.slot = (out->u.kv_get.layer & CLUSTER_KV_LAYER_SLOT) ? r_u32(&r, "slot") : 0;
        out->u.kv_get.layer &= ~CLUSTER_KV_LAYER_SLOT;
        r_check(&r, out->u.kv_get.layer <= INT32_MAX, "layer %u", out->u.kv_get.layer);
        r_check(&r, out->u.kv_get.pos0 >= 0 && out->u.kv_get.pos1 > out->u.kv_get.pos0,
                "positions %d to %d", out->u.kv_get.pos0, out->u.kv_get.pos1);
        r_check(&r, out->u.kv_get.slot < CLUSTER_MAX_SLOTS, "slot %u (at most %d)",
                out->u.kv_get.slot, CLUSTER_MAX_SLOTS - 1);
        break;
    case CLUSTER_KV_DATA:
    case CLUSTER_KV_MIRROR:
        dec_kv_data(&r, &out->u.kv_data);
        break;
    case CLUSTER_PEER_LOST:
        out->u.peer_lost.device = r_u32(&r, "device index");
        r_str(&r, out->u.peer_lost.msg, CLUSTER_MAX_MSG, "message");
        r_check(&r, out->u.peer_lost.device < CLUSTER_MAX_DEVICES, "device index %u",
                out->u.peer_lost.device);
        break;
    case CLUSTER_TENSOR_GET:
        out->u.tensor_get.item = r_u32(&r, "item");
        out->u.tensor_get.offset = r_u64(&r, "offset");
        out->u.tensor_get.length = r_u32(&r, "length");
        r_check(&r, out->u.tensor_get.length <= CLUSTER_MAX_CHUNK, "a chunk of %u bytes (at most %u)",
                out->u.tensor_get.length, CLUSTER_MAX_CHUNK);
        r_check(&r, out->u.tensor_get.offset <= UINT64_MAX - out->u.tensor_get.length,
                "offset %" PRIu64 " + %u bytes overflows", out->u.tensor_get.offset,
                out->u.tensor_get.length);
        break;
    case CLUSTER_TENSOR_DATA:
        dec_tensor_data(&r, &out->u.tensor_data);
        break;
    case CLUSTER_FRAME_TYPE_END:
        break;
    }
    if (r.ok && r.off != len) {
        r_check(&r, false, "%zu bytes left over after the payload", len - r.off);
    }
    return r.ok ? LARES_OK : (err != NULL ? err->code : LARES_EFORMAT);
}

/* ---- encoders ---- */

size_t cluster_encode_raw_header(uint8_t *buf, size_t cap, uint16_t version, uint16_t type,
                                 uint64_t session, uint32_t payload_bytes) {
    wcur w = begin(buf, cap, version, type, session);
    if (!w.ok) {
        return 0;
    }
    wr_u32le(w.p + 16, payload_bytes);
    return w.len;
}

size_t cluster_encode_hello(uint8_t *buf, size_t cap, const cluster_hello *h) {
    wcur w = begin(buf, cap, CLUSTER_PROTO_VERSION, CLUSTER_HELLO, 0);
    w_u64(&w, h->model.file_bytes);
    w_u64(&w, h->model.header_hash);
    w_u32(&w, h->device);
    w_u32(&w, h->n_devices);
    w_u32(&w, h->heartbeat_ms);
    w_u32(&w, h->timeout_ms);
    w_u32(&w, h->flags);
    w_u32(&w, h->profile_ms);
    w_str(&w, h->model_path, CLUSTER_MAX_PATH);
    w_str(&w, h->head_name, CLUSTER_MAX_NAME);
    return finish(&w);
}

size_t cluster_encode_welcome(uint8_t *buf, size_t cap, const cluster_welcome *x) {
    wcur w = begin(buf, cap, CLUSTER_PROTO_VERSION, CLUSTER_WELCOME, 0);
    w_u64(&w, x->model.file_bytes);
    w_u64(&w, x->model.header_hash);
    w_u32(&w, x->n_layer);
    w_u32(&w, x->n_embd);
    w_u32(&w, x->n_cpu);
    w_u64(&w, x->mem_available_bytes);
    w_str(&w, x->name, CLUSTER_MAX_NAME);
    w_str(&w, x->profile, CLUSTER_MAX_PROFILE);
    return finish(&w);
}

static size_t encode_plan_body(uint8_t *buf, size_t cap, uint16_t type, uint64_t session,
                               const cluster_plan_msg *p) {
    wcur w = begin(buf, cap, CLUSTER_PROTO_VERSION, type, session);
    w_u32(&w, p->self);
    w_u32(&w, p->n_ctx);
    w_u32(&w, p->n_batch);
    w_u32(&w, p->n_embd);
    w_u32(&w, p->n_threads);
    w_u8(&w, p->act_dtype);
    w_u8(&w, p->kv_f16);
    w_u16(&w, p->flags);
    w_u32(&w, p->ping_bytes);
    w_u32(&w, (uint32_t)p->plan.n_layer);
    w_u32(&w, (uint32_t)p->plan.n_dev);
    for (int32_t d = 0; d < p->plan.n_dev && d < CLUSTER_MAX_DEVICES; d++) {
        w_u32(&w, (uint32_t)p->plan.w[d]);
        w_u32(&w, (uint32_t)p->plan.n[d]);
        w_u32(&w, p->link_delay_ms[d]);
        w_bytes(&w, p->keys[d], CLUSTER_KEY_BYTES);
        w_str(&w, p->addr[d], CLUSTER_MAX_ADDR);
    }
    if (p->flags & CLUSTER_PLAN_SLOTS) { /* after the devices: a plan without it is unchanged */
        w_u32(&w, p->n_slots);
    }
    return finish(&w);
}

size_t cluster_encode_plan(uint8_t *buf, size_t cap, uint64_t session, const cluster_plan_msg *p) {
    return encode_plan_body(buf, cap, CLUSTER_PLAN, session, p);
}

size_t cluster_encode_prepare(uint8_t *buf, size_t cap, uint64_t session,
                              const cluster_plan_msg *p) {
    if (p->flags & CLUSTER_PLAN_PROBE) {
        return 0;
    }
    return encode_plan_body(buf, cap, CLUSTER_PREPARE, session, p);
}

size_t cluster_encode_prepared(uint8_t *buf, size_t cap, uint64_t session,
                               const cluster_prepared *p) {
    char cut[CLUSTER_MAX_MSG + 1];
    snprintf(cut, sizeof cut, "%s", p->msg);
    wcur w = begin(buf, cap, CLUSTER_PROTO_VERSION, CLUSTER_PREPARED, session);
    w_u32(&w, p->status);
    w_u64(&w, p->fetched_bytes);
    w_str(&w, cut, CLUSTER_MAX_MSG);
    return finish(&w);
}

size_t cluster_encode_ready(uint8_t *buf, size_t cap, uint64_t session, const cluster_ready *r) {
    wcur w = begin(buf, cap, CLUSTER_PROTO_VERSION, CLUSTER_READY, session);
    w_u64(&w, r->kv_bytes);
    w_u32(&w, r->n_windows);
    w_u32(&w, r->rtt_us);
    w_u32(&w, r->rtt_big_us);
    return finish(&w);
}

size_t cluster_encode_kv(uint8_t *buf, size_t cap, uint64_t session, uint16_t type,
                         const cluster_kv *kv) {
    wcur w = begin(buf, cap, CLUSTER_PROTO_VERSION, type, session);
    /* slot 0: the frame before slots, byte for byte */
    w_u32(&w, kv->op | (kv->slot != 0 ? CLUSTER_KV_OP_SLOT : 0));
    w_u32(&w, (uint32_t)kv->pos);
    if (kv->slot != 0) {
        w_u32(&w, kv->slot);
    }
    return finish(&w);
}

size_t cluster_encode_heartbeat(uint8_t *buf, size_t cap, uint64_t session, uint64_t counter) {
    wcur w = begin(buf, cap, CLUSTER_PROTO_VERSION, CLUSTER_HEARTBEAT, session);
    w_u64(&w, counter);
    return finish(&w);
}

size_t cluster_encode_stop(uint8_t *buf, size_t cap, uint64_t session, uint32_t reason) {
    wcur w = begin(buf, cap, CLUSTER_PROTO_VERSION, CLUSTER_STOP, session);
    w_u32(&w, reason);
    return finish(&w);
}

size_t cluster_encode_error(uint8_t *buf, size_t cap, uint64_t session, uint32_t code,
                            const char *msg) {
    char cut[CLUSTER_MAX_MSG + 1];
    snprintf(cut, sizeof cut, "%s", msg);
    wcur w = begin(buf, cap, CLUSTER_PROTO_VERSION, CLUSTER_ERROR, session);
    w_u32(&w, code);
    w_str(&w, cut, CLUSTER_MAX_MSG);
    return finish(&w);
}

size_t cluster_encode_link(uint8_t *buf, size_t cap, uint64_t session, uint16_t type,
                           uint32_t from) {
    wcur w = begin(buf, cap, CLUSTER_PROTO_VERSION, type, session);
    w_u32(&w, from);
    return finish(&w);
}

size_t cluster_encode_ping(uint8_t *buf, size_t cap, uint64_t session, uint16_t type,
                           uint64_t nonce, uint32_t filler_bytes) {
    if (type != CLUSTER_PING && type != CLUSTER_PONG) {
        return 0;
    }
    wcur w = begin(buf, cap, CLUSTER_PROTO_VERSION, type, session);
    w_u64(&w, nonce);
    if (type == CLUSTER_PING && filler_bytes > 0) {
        if (filler_bytes > CLUSTER_MAX_PING || !w_room(&w, filler_bytes)) {
            return 0;
        }
        memset(w.p + w.len, 0, filler_bytes);
        w.len += filler_bytes;
    }
    return finish(&w);
}

size_t cluster_encode_peer_lost(uint8_t *buf, size_t cap, uint64_t session, uint32_t device,
                                const char *msg) {
    char cut[CLUSTER_MAX_MSG + 1];
    snprintf(cut, sizeof cut, "%s", msg);
    wcur w = begin(buf, cap, CLUSTER_PROTO_VERSION, CLUSTER_PEER_LOST, session);
    w_u32(&w, device);
    w_str(&w, cut, CLUSTER_MAX_MSG);
    return finish(&w);
}

size_t cluster_encode_kv_get(uint8_t *buf, size_t cap, uint64_t session, const cluster_kv_get *g) {
    wcur w = begin(buf, cap, CLUSTER_PROTO_VERSION, CLUSTER_KV_GET, session);
    if (g->layer & CLUSTER_KV_LAYER_SLOT) {
        return 0;
    }
    w_u32(&w, g->layer | (g->slot != 0 ? CLUSTER_KV_LAYER_SLOT : 0));
    w_u32(&w, (uint32_t)g->pos0);
    w_u32(&w, (uint32_t)g->pos1);
    if (g->slot != 0) {
        w_u32(&w, g->slot);
    }
    return finish(&w);
}

size_t cluster_kv_data_bytes(uint32_t n_pos, uint32_t row_bytes) {
    size_t rows, total;
    if (!lares_mul_size(n_pos, row_bytes, &rows) || !lares_mul_size(rows, 2, &rows) ||
        !lares_add_size(CLUSTER_HEADER_BYTES + KV_DATA_FIXED_BYTES, rows, &total) ||
        total > CLUSTER_MAX_FRAME) {
        return 0;
    }
    return total;
}

uint32_t cluster_kv_data_fit(size_t cap, uint32_t row_bytes) {
    const size_t fixed = CLUSTER_HEADER_BYTES + KV_DATA_FIXED_BYTES;
    cap = LARES_MIN(cap, (size_t)CLUSTER_MAX_FRAME);
    if (row_bytes == 0 || cap <= fixed) {
        return 0;
    }
    return (uint32_t)LARES_MIN((cap - fixed) / (2 * (size_t)row_bytes), (size_t)INT32_MAX);
}

static size_t encode_kv_rows(uint8_t *buf, size_t cap, uint16_t type, uint64_t session,
                             const cluster_kv_data *d) {
    const size_t need = cluster_kv_data_bytes(d->n_pos, d->row_bytes);
    if (need == 0 || need > cap || d->slot >= CLUSTER_MAX_SLOTS) {
        return 0;
    }
    wcur w = begin(buf, cap, CLUSTER_PROTO_VERSION, type, session);
    w_u32(&w, d->layer);
    w_u32(&w, (uint32_t)d->pos0);
    w_u32(&w, d->n_pos);
    w_u32(&w, d->row_bytes);
    w_u8(&w, d->kv_f16);
    w_u8(&w, d->last);
    w_u16(&w, (uint16_t)d->slot);
    const size_t rows = (size_t)d->n_pos * d->row_bytes;
    w_bytes(&w, d->k, rows);
    w_bytes(&w, d->v, rows);
    return finish(&w);
}

size_t cluster_encode_kv_data(uint8_t *buf, size_t cap, uint64_t session,
                              const cluster_kv_data *d) {
    return encode_kv_rows(buf, cap, CLUSTER_KV_DATA, session, d);
}

size_t cluster_encode_kv_mirror(uint8_t *buf, size_t cap, uint64_t session,
                                const cluster_kv_data *d) {
    return encode_kv_rows(buf, cap, CLUSTER_KV_MIRROR, session, d);
}

/* ---- hidden states ---- */

#define ACT_FIXED_BYTES (8 + 4 + 4 + 4 + 4 + 1 + 1 + 2)

size_t cluster_act_bytes_runs(uint32_t n_tok, uint32_t n_embd, uint8_t dtype, uint32_t n_trace,
                              uint32_t n_runs) {
    size_t vals, data, pos, tr, runs = 0, total;
    const size_t esize = dtype == CLUSTER_DTYPE_F16 ? 2 : 4;
    if (n_runs > 0 && (!lares_mul_size(n_runs, CLUSTER_RUN_BYTES, &runs) ||
                       !lares_add_size(runs, 4, &runs))) { /* the count, then the runs */
        return 0;
    }
    if (!lares_mul_size(n_tok, n_embd, &vals) || !lares_mul_size(vals, esize, &data) ||
        !lares_mul_size(n_tok, 4, &pos) || !lares_mul_size(n_trace, CLUSTER_TRACE_BYTES, &tr) ||
        !lares_add_size(CLUSTER_HEADER_BYTES + ACT_FIXED_BYTES, pos, &total) ||
        !lares_add_size(total, tr, &total) || !lares_add_size(total, data, &total) ||
        !lares_add_size(total, runs, &total) || total > CLUSTER_MAX_FRAME) {
        return 0;
    }
    return total;
}

size_t cluster_act_bytes(uint32_t n_tok, uint32_t n_embd, uint8_t dtype, uint32_t n_trace) {
    return cluster_act_bytes_runs(n_tok, n_embd, dtype, n_trace, 0);
}

size_t cluster_encode_act(uint8_t *buf, size_t cap, uint64_t session, const cluster_act *a,
                          const int32_t *pos, const cluster_trace *trace, const float *x) {
    return a->n_runs == 0 ? cluster_encode_act_runs(buf, cap, session, a, NULL, pos, trace, x) : 0;
}

size_t cluster_encode_act_runs(uint8_t *buf, size_t cap, uint64_t session, const cluster_act *a,
                               const cluster_run *runs, const int32_t *pos,
                               const cluster_trace *trace, const float *x) {
    const size_t need =
        cluster_act_bytes_runs(a->n_tok, a->n_embd, a->dtype, a->n_trace, a->n_runs);
    if (need == 0 || need > cap || a->n_trace > CLUSTER_MAX_TRACE || a->n_runs > a->n_tok ||
        (a->n_runs > 0 && runs == NULL)) {
        return 0;
    }
    uint64_t rows = 0;
    for (uint32_t i = 0; i < a->n_runs; i++) {
        if (runs[i].slot >= CLUSTER_MAX_SLOTS || runs[i].rows < 1) {
            return 0;
        }
        rows += runs[i].rows;
    }
    if (a->n_runs > 0 && rows != a->n_tok) {
        return 0;
    }
    wcur w = begin(buf, cap, CLUSTER_PROTO_VERSION, CLUSTER_ACT, session);
    w_u64(&w, a->seq);
    w_u32(&w, a->layer);
    w_u32(&w, a->end);
    w_u32(&w, a->n_tok);
    w_u32(&w, a->n_embd);
    w_u8(&w, a->dtype);
    w_u8(&w, a->n_runs > 0 ? CLUSTER_ACT_RUNS : 0);
    w_u16(&w, (uint16_t)a->n_trace);
    if (a->n_runs > 0) {
        w_u32(&w, a->n_runs);
        for (uint32_t i = 0; i < a->n_runs; i++) {
            w_u32(&w, runs[i].slot);
            w_u32(&w, runs[i].rows);
        }
    }
    for (uint32_t i = 0; i < a->n_tok; i++) {
        w_u32(&w, (uint32_t)pos[i]);
    }
    for (uint32_t i = 0; i < a->n_trace; i++) {
        w_u16(&w, trace[i].device);
        w_u16(&w, trace[i].round);
        w_u32(&w, trace[i].compute_us);
        w_u32(&w, trace[i].wait_us);
        w_u32(&w, trace[i].major_faults);
        w_u32(&w, trace[i].mem_free_mib);
    }
    if (!w.ok) {
        return 0;
    }
    const size_t n = (size_t)a->n_tok * a->n_embd;
    uint8_t *d = w.p + w.len;
    if (a->dtype == CLUSTER_DTYPE_F16) {
        for (size_t i = 0; i < n; i++) {
            wr_u16le(d + 2 * i, f32_to_f16(x[i]));
        }
        w.len += 2 * n;
    } else {
        for (size_t i = 0; i < n; i++) {
            wr_f32le(d + 4 * i, x[i]);
        }
        w.len += 4 * n;
    }
    return finish(&w);
}

int32_t cluster_act_pos(const cluster_act *a, uint32_t i) {
    return (int32_t)rd_u32le(a->pos + 4 * (size_t)i);
}

void cluster_act_run_at(const cluster_act *a, uint32_t i, cluster_run *out) {
    const uint8_t *p = a->runs + (size_t)i * CLUSTER_RUN_BYTES;
    out->slot = rd_u32le(p);
    out->rows = rd_u32le(p + 4);
}

void cluster_act_trace_at(const cluster_act *a, uint32_t i, cluster_trace *out) {
    const uint8_t *p = a->trace + (size_t)i * CLUSTER_TRACE_BYTES;
    out->device = rd_u16le(p);
    out->round = rd_u16le(p + 2);
    out->compute_us = rd_u32le(p + 4);
    out->wait_us = rd_u32le(p + 8);
    out->major_faults = rd_u32le(p + 12);
    out->mem_free_mib = rd_u32le(p + 16);
}

void cluster_act_read(const cluster_act *a, float *x) {
    const size_t n = (size_t)a->n_tok * a->n_embd;
    if (a->dtype == CLUSTER_DTYPE_F16) {
        for (size_t i = 0; i < n; i++) {
            x[i] = f16_to_f32(rd_u16le(a->data + 2 * i));
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            x[i] = rd_f32le(a->data + 4 * i);
        }
    }
}

size_t cluster_encode_tensor_get(uint8_t *buf, size_t cap, const cluster_tensor_get *g) {
    wcur w = begin(buf, cap, CLUSTER_PROTO_VERSION, CLUSTER_TENSOR_GET, 0);
    w_u32(&w, g->item);
    w_u64(&w, g->offset);
    w_u32(&w, g->length);
    return finish(&w);
}

size_t cluster_tensor_data_bytes(uint32_t length) {
    return (size_t)CLUSTER_HEADER_BYTES + TENSOR_DATA_FIXED_BYTES + length;
}

size_t cluster_encode_tensor_data(uint8_t *buf, size_t cap, const cluster_tensor_data *d) {
    const uint32_t n = d->status == 0 ? d->length : 0;
    if (n > CLUSTER_MAX_CHUNK || cluster_tensor_data_bytes(n) > cap) {
        return 0;
    }
    wcur w = begin(buf, cap, CLUSTER_PROTO_VERSION, CLUSTER_TENSOR_DATA, 0);
    w_u32(&w, d->item);
    w_u32(&w, d->status);
    w_u64(&w, d->item_bytes);
    w_u64(&w, d->offset);
    w_bytes(&w, d->sha256, CLUSTER_SHA256_BYTES);
    w_u32(&w, n);
    w_bytes(&w, d->data, n);
    return finish(&w);
}
