/*
 * cluster without sockets: the wire format against bytes written out by hand
 * from docs/protocol.md, every frame type through encode and decode, every
 * truncation and a list of hostile frames refused with a message naming the
 * fault; the plan's windows against the formula of scheduling.md worked by
 * hand; ring.json parsing and its errors; key files and allow-lists.
 */
#include "check.h"
#include "cluster/cluster.h"
#include "quant/half.h"

#include <sys/stat.h>
#include <unistd.h>

static bool has(const char *hay, const char *needle) {
    return strstr(hay, needle) != NULL;
}

/* ---- the wire format, byte by byte ---- */

static void check_golden(void) {
    uint8_t buf[256];
    /* HEARTBEAT, session 0x0102030405060708, counter 9 */
    static const uint8_t hb[] = {
        'L',  'R',  'N',  'G',                          /* magic */
        2,    0,                                        /* version 2 */
        8,    0,                                        /* type 8: heartbeat */
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* session */
        8,    0,    0,    0,                            /* payload bytes */
        9,    0,    0,    0,    0,    0,    0,    0,    /* counter */
    };
    size_t n = cluster_encode_heartbeat(buf, sizeof buf, 0x0102030405060708u, 9);
    CHECK(n == sizeof hb && memcmp(buf, hb, n) == 0);

    /* ACT: 2 tokens at positions 5, 6 of width 2, f32, layer 3 (back to the head
     * once a window ends at 5 or later), sequence 7, one trace entry */
    static const uint8_t act[] = {
        'L',  'R', 'N',  'G',  2,    0,    5, 0, /* magic, version 2, type 5 */
        0x2a, 0,   0,    0,    0,    0,    0, 0, /* session 42 */
        72,   0,   0,    0, /* payload: 28 fixed + 8 pos + 20 trace + 16 data */
        7,    0,   0,    0,    0,    0,    0, 0, /* sequence */
        3,    0,   0,    0,                      /* next layer */
        5,    0,   0,    0,                      /* end layer */
        2,    0,   0,    0,                      /* tokens */
        2,    0,   0,    0,                      /* width */
        0,                                       /* f32 */
        0,                                       /* reserved */
        1,    0,                                 /* trace entries */
        5,    0,   0,    0,    6,    0,    0, 0, /* positions */
        2,    0,   1,    0,    0x10, 0x27, 0, 0, /* device 2, round 1, 10000 us */
        0xf4, 1,   0,    0,                      /* of which 500 us waiting for disk */
        3,    0,   0,    0,                      /* 3 major faults */
        0,    4,   0,    0,                      /* 1024 MiB free */
        0,    0,   0x80, 0x3f,                   /* 1.0f */
        0,    0,   0,    0xc0,                   /* -2.0f */
        0,    0,   0,    0x3f,                   /* 0.5f */
        0,    0,   0,    0,                      /* 0.0f */
    };
    const int32_t pos[] = {5, 6};
    const float x[] = {1.0f, -2.0f, 0.5f, 0.0f};
    const cluster_trace tr = {.device = 2,
                              .round = 1,
                              .compute_us = 10000,
                              .wait_us = 500,
                              .major_faults = 3,
                              .mem_free_mib = 1024};
    const cluster_act a = {.seq = 7, .layer = 3, .end = 5, .n_tok = 2, .n_embd = 2, .n_trace = 1};
    n = cluster_encode_act(buf, sizeof buf, 42, &a, pos, &tr, x);
    CHECKF(n == sizeof act && memcmp(buf, act, n) == 0, "act: %zu bytes, want %zu", n, sizeof act);

    cluster_frame *f = calloc(1, sizeof *f);
    lares_error err = {0};
    CHECK_OK(cluster_frame_decode(act, sizeof act, f, &err), &err);
    CHECK(f->type == CLUSTER_ACT && f->session == 42 && f->u.act.seq == 7 && f->u.act.layer == 3 &&
          f->u.act.end == 5);
    float y[4];
    cluster_act_read(&f->u.act, y);
    CHECK(memcmp(x, y, sizeof x) == 0);
    CHECK(cluster_act_pos(&f->u.act, 1) == 6);
    cluster_trace t;
    cluster_act_trace_at(&f->u.act, 0, &t);
    CHECK(t.device == 2 && t.round == 1 && t.compute_us == 10000 && t.wait_us == 500 &&
          t.major_faults == 3 && t.mem_free_mib == 1024);

    /* f16 hidden states round to nearest even, as quant/half.h */
    const float xs[] = {1.0f / 3.0f, 65504.0f, -0.0001f, 3.14159f};
    const cluster_act h = {
        .seq = 1, .layer = 0, .end = 5, .n_tok = 1, .n_embd = 4, .dtype = CLUSTER_DTYPE_F16};
    const int32_t p0 = 0;
    n = cluster_encode_act(buf, sizeof buf, 1, &h, &p0, NULL, xs);
    CHECK(n == cluster_act_bytes(1, 4, CLUSTER_DTYPE_F16, 0));
    CHECK_OK(cluster_frame_decode(buf, n, f, &err), &err);
    cluster_act_read(&f->u.act, y);
    for (int i = 0; i < 4; i++) {
        CHECKF(y[i] == f16_to_f32(f32_to_f16(xs[i])), "f16 value %d: %g", i, (double)y[i]);
    }
    free(f);
}

/* ---- every type round-trips; every truncation is refused ---- */

static size_t make_frames(uint8_t bufs[][2048], size_t *lens) {
    size_t k = 0;
    cluster_hello h = {.model = {123456789, 0xdeadbeefcafef00du},
                       .device = 2,
                       .n_devices = 3,
                       .heartbeat_ms = 250,
                       .timeout_ms = 3000};
    snprintf(h.model_path, sizeof h.model_path, "/models/x.gguf");
    snprintf(h.head_name, sizeof h.head_name, "laptop");
    lens[k] = cluster_encode_hello(bufs[k], 2048, &h);
    k++;
    cluster_welcome w = {.model = h.model,
                         .n_layer = 32,
                         .n_embd = 4096,
                         .n_cpu = 8,
                         .mem_available_bytes = 1u << 30};
    snprintf(w.name, sizeof w.name, "phone");
    lens[k] = cluster_encode_welcome(bufs[k], 2048, &w);
    k++;
    static cluster_plan_msg p;
    memset(&p, 0, sizeof p);
    p.self = 1;
    p.n_ctx = 512;
    p.n_batch = 32;
    p.n_embd = 4096;
    p.act_dtype = CLUSTER_DTYPE_F16;
    p.kv_f16 = 1;
    p.plan = (cluster_plan){.n_layer = 32, .n_dev = 3, .w = {2, 3, 3}, .n = {0, 1, 0}};
    for (int d = 0; d < 3; d++) {
        memset(p.keys[d], d + 1, CLUSTER_KEY_BYTES);
        if (d > 0) {
            snprintf(p.addr[d], sizeof p.addr[d], "10.0.0.%d:9100", d);
        }
        p.link_delay_ms[d] = (uint32_t)d;
    }
    lens[k] = cluster_encode_plan(bufs[k], 2048, 77, &p);
    k++;
    /* the coming plan of a background fetch (issue 19): a PLAN's body */
    p.flags = CLUSTER_PLAN_KEEP_KV | CLUSTER_PLAN_MIRROR_KV;
    lens[k] = cluster_encode_prepare(bufs[k], 2048, 78, &p);
    k++;
    /* a plan whose members keep 9 KV slots (issue 20) */
    p.flags = CLUSTER_PLAN_SLOTS;
    p.n_slots = 9;
    lens[k] = cluster_encode_plan(bufs[k], 2048, 79, &p);
    k++;
    p.flags = 0;
    cluster_prepared pd = {.status = LARES_ERANGE, .fetched_bytes = 0x0102030405u};
    snprintf(pd.msg, sizeof pd.msg, "weight cache: 196608 more bytes do not fit");
    lens[k] = cluster_encode_prepared(bufs[k], 2048, 78, &pd);
    k++;
    const cluster_ready r = {.kv_bytes = 1 << 20, .n_windows = 4};
    lens[k] = cluster_encode_ready(bufs[k], 2048, 77, &r);
    k++;
    const cluster_kv kv = {.op = CLUSTER_KV_TRUNCATE, .pos = 17};
    lens[k] = cluster_encode_kv(bufs[k], 2048, 77, CLUSTER_KV, &kv);
    k++;
    lens[k] = cluster_encode_kv(bufs[k], 2048, 77, CLUSTER_KV_DONE, &kv);
    k++;
    const cluster_kv kv_slot = {.op = CLUSTER_KV_CLEAR, .pos = 0, .slot = 3};
    lens[k] = cluster_encode_kv(bufs[k], 2048, 77, CLUSTER_KV, &kv_slot);
    k++;
    const cluster_kv_get kg = {.layer = 5, .pos0 = 1, .pos1 = 30, .slot = 6};
    lens[k] = cluster_encode_kv_get(bufs[k], 2048, 77, &kg);
    k++;
    lens[k] = cluster_encode_heartbeat(bufs[k], 2048, 77, 5);
    k++;
    lens[k] = cluster_encode_stop(bufs[k], 2048, 77, 0);
    k++;
    lens[k] = cluster_encode_error(bufs[k], 2048, 77, LARES_EBUSY, "busy: serving head x");
    k++;
    lens[k] = cluster_encode_link(bufs[k], 2048, 77, CLUSTER_LINK, 1);
    k++;
    lens[k] = cluster_encode_link(bufs[k], 2048, 77, CLUSTER_LINK_OK, 2);
    k++;
    const int32_t pos[3] = {10, 11, 12};
    float x[3 * 8];
    for (int i = 0; i < 24; i++) {
        x[i] = (float)i * 0.25f - 3.0f;
    }
    const cluster_act a = {.seq = 3, .layer = 5, .end = 8, .n_tok = 3, .n_embd = 8};
    lens[k] = cluster_encode_act(bufs[k], 2048, 77, &a, pos, NULL, x);
    k++;
    /* the same rows as two sequences' (issue 20): slot 1 at 10, 11, slot 3 at 0 */
    const cluster_run runs[2] = {{.slot = 1, .rows = 2}, {.slot = 3, .rows = 1}};
    const int32_t pos_runs[3] = {10, 11, 0};
    cluster_act ar = a;
    ar.n_runs = 2;
    lens[k] = cluster_encode_act_runs(bufs[k], 2048, 77, &ar, runs, pos_runs, NULL, x);
    k++;
    /* KV rows: a transfer (KV_DATA) and a worker's copy for the head (KV_MIRROR) */
    uint8_t rows[2][3 * 16];
    for (int i = 0; i < 3 * 16; i++) {
        rows[0][i] = (uint8_t)i;
        rows[1][i] = (uint8_t)(255 - i);
    }
    const cluster_kv_data d = {.layer = 4,
                               .pos0 = 20,
                               .n_pos = 3,
                               .row_bytes = 16,
                               .kv_f16 = 1,
                               .last = 1,
                               .k = rows[0],
                               .v = rows[1]};
    lens[k] = cluster_encode_kv_data(bufs[k], 2048, 77, &d);
    k++;
    const cluster_kv_data dm = {
        .layer = 2, .pos0 = 7, .n_pos = 2, .row_bytes = 16, .slot = 2, .k = rows[1], .v = rows[0]};
    lens[k] = cluster_encode_kv_mirror(bufs[k], 2048, 77, &dm);
    k++;
    return k;
}

static void check_roundtrip_and_truncation(void) {
    static uint8_t bufs[32][2048];
    size_t lens[32];
    const size_t k = make_frames(bufs, lens);
    cluster_frame *f = calloc(1, sizeof *f);
    lares_error err = {0};
    for (size_t i = 0; i < k; i++) {
        CHECKF(lens[i] >= CLUSTER_HEADER_BYTES, "frame %zu did not encode", i);
        CHECK_OK(cluster_frame_decode(bufs[i], lens[i], f, &err), &err);
        /* re-encoding what was decoded gives the same bytes */
        uint8_t again[2048];
        size_t n = 0;
        switch (f->type) {
        case CLUSTER_HELLO:
            n = cluster_encode_hello(again, sizeof again, &f->u.hello);
            break;
        case CLUSTER_WELCOME:
            n = cluster_encode_welcome(again, sizeof again, &f->u.welcome);
            break;
        case CLUSTER_PLAN:
            n = cluster_encode_plan(again, sizeof again, f->session, &f->u.plan);
            break;
        case CLUSTER_PREPARE:
            CHECK(f->session == 78 && f->u.prepare.plan.w[2] == 3 &&
                  f->u.prepare.flags == (CLUSTER_PLAN_KEEP_KV | CLUSTER_PLAN_MIRROR_KV));
            n = cluster_encode_prepare(again, sizeof again, f->session, &f->u.prepare);
            break;
        case CLUSTER_PREPARED:
            CHECK(f->u.prepared.status == LARES_ERANGE &&
                  f->u.prepared.fetched_bytes == 0x0102030405u &&
                  has(f->u.prepared.msg, "do not fit"));
            n = cluster_encode_prepared(again, sizeof again, f->session, &f->u.prepared);
            break;
        case CLUSTER_READY:
            n = cluster_encode_ready(again, sizeof again, f->session, &f->u.ready);
            break;
        case CLUSTER_KV:
        case CLUSTER_KV_DONE:
            n = cluster_encode_kv(again, sizeof again, f->session, f->type, &f->u.kv);
            break;
        case CLUSTER_HEARTBEAT:
            n = cluster_encode_heartbeat(again, sizeof again, f->session, f->u.heartbeat);
            break;
        case CLUSTER_STOP:
            n = cluster_encode_stop(again, sizeof again, f->session, f->u.stop_reason);
            break;
        case CLUSTER_ERROR:
            n = cluster_encode_error(again, sizeof again, f->session, f->u.error.code,
                                     f->u.error.msg);
            break;
        case CLUSTER_LINK:
        case CLUSTER_LINK_OK:
            n = cluster_encode_link(again, sizeof again, f->session, f->type, f->u.link_from);
            break;
        case CLUSTER_KV_GET:
            CHECK(f->u.kv_get.slot == 6 && f->u.kv_get.pos1 == 30);
            n = cluster_encode_kv_get(again, sizeof again, f->session, &f->u.kv_get);
            break;
        case CLUSTER_KV_DATA:
            n = cluster_encode_kv_data(again, sizeof again, f->session, &f->u.kv_data);
            break;
        case CLUSTER_KV_MIRROR:
            CHECK(f->u.kv_data.layer == 2 && f->u.kv_data.pos0 == 7 && f->u.kv_data.n_pos == 2 &&
                  f->u.kv_data.slot == 2 && f->u.kv_data.k[0] == 255 && f->u.kv_data.v[31] == 31);
            n = cluster_encode_kv_mirror(again, sizeof again, f->session, &f->u.kv_data);
            break;
        case CLUSTER_ACT: {
            float x[64];
            int32_t pos[8];
            cluster_run runs[8];
            cluster_act_read(&f->u.act, x);
            for (uint32_t t = 0; t < f->u.act.n_tok; t++) {
                pos[t] = cluster_act_pos(&f->u.act, t);
            }
            for (uint32_t r = 0; r < f->u.act.n_runs; r++) {
                cluster_act_run_at(&f->u.act, r, &runs[r]);
            }
            n = cluster_encode_act_runs(again, sizeof again, f->session, &f->u.act, runs, pos, NULL,
                                        x);
            break;
        }
        default:
            break;
        }
        CHECKF(n == lens[i] && memcmp(again, bufs[i], n) == 0, "%s frame does not round-trip",
               cluster_frame_type_name(f->type));
        /* every prefix is refused, with and without a header that matches its length */
        for (size_t cut = 0; cut < lens[i]; cut++) {
            uint8_t t[2048];
            memcpy(t, bufs[i], cut);
            CHECKF(cluster_frame_decode(t, cut, f, &err) == LARES_EFORMAT,
                   "%zu of %zu bytes of frame %zu accepted", cut, lens[i], i);
            if (cut >= CLUSTER_HEADER_BYTES) {
                wr_u32le(t + 16, (uint32_t)(cut - CLUSTER_HEADER_BYTES));
                lares_status st = cluster_frame_decode(t, cut, f, &err);
                CHECKF(st == LARES_EFORMAT,
                       "frame %zu cut to %zu bytes with a matching header: "
                       "%d",
                       i, cut, st);
            }
        }
    }
    free(f);
}

/* ---- hostile frames, each refused with its reason ---- */

static void expect_refused(const uint8_t *b, size_t n, lares_status want, const char *needle,
                           const char *what) {
    cluster_frame *f = calloc(1, sizeof *f);
    lares_error err = {0};
    lares_status st = cluster_frame_decode(b, n, f, &err);
    CHECKF(st == want && has(err.msg, needle), "%s: status %d (want %d), message '%s' (want '%s')",
           what, st, want, err.msg, needle);
    free(f);
}

static void check_hostile(void) {
    uint8_t b[4096];
    size_t n = cluster_encode_heartbeat(b, sizeof b, 1, 1);
    b[0] = 'X';
    expect_refused(b, n, LARES_EFORMAT, "magic", "bad magic");
    n = cluster_encode_heartbeat(b, sizeof b, 1, 1);
    wr_u16le(b + 4, 3);
    expect_refused(b, n, LARES_EPROTO, "version 3", "another version");
    n = cluster_encode_heartbeat(b, sizeof b, 1, 1);
    wr_u16le(b + 6, 99);
    expect_refused(b, n, LARES_EFORMAT, "unknown frame type 99", "unknown type");
    wr_u16le(b + 6, 0);
    expect_refused(b, n, LARES_EFORMAT, "unknown frame type 0", "type 0");
    n = cluster_encode_heartbeat(b, sizeof b, 1, 1);
    wr_u32le(b + 16, 0xffffffffu);
    expect_refused(b, n, LARES_EFORMAT, "payload", "payload length lies");
    /* trailing bytes after a complete payload */
    n = cluster_encode_stop(b, sizeof b, 1, 0);
    b[n] = 0;
    wr_u32le(b + 16, (uint32_t)(n + 1 - CLUSTER_HEADER_BYTES));
    expect_refused(b, n + 1, LARES_EFORMAT, "left over", "trailing byte");
    /* an error frame of another version still decodes (its layout is fixed) */
    n = cluster_encode_error(b, sizeof b, 0, LARES_EPROTO, "speak version 9");
    wr_u16le(b + 4, 9);
    cluster_frame *f = calloc(1, sizeof *f);
    lares_error err = {0};
    CHECK_OK(cluster_frame_decode(b, n, f, &err), &err);
    CHECK(f->version == 9 && has(f->u.error.msg, "version 9"));
    free(f);
    /* strings: a NUL inside, a length beyond the limit */
    n = cluster_encode_error(b, sizeof b, 0, 1, "abcdef");
    b[CLUSTER_HEADER_BYTES + 4 + 2 + 2] = 0;
    expect_refused(b, n, LARES_EFORMAT, "NUL", "NUL in a string");
    n = cluster_encode_error(b, sizeof b, 0, 1, "abcdef");
    wr_u16le(b + CLUSTER_HEADER_BYTES + 4, 300);
    expect_refused(b, n, LARES_EFORMAT, "at most", "string over its limit");

    /* ACT: counts whose product overflows, mismatched sizes, bad positions */
    const int32_t pos[2] = {4, 5};
    const float x[4] = {0};
    const cluster_act a = {.seq = 1, .layer = 1, .end = 2, .n_tok = 2, .n_embd = 2};
    n = cluster_encode_act(b, sizeof b, 1, &a, pos, NULL, x);
    uint8_t t[4096];
    memcpy(t, b, n);
    wr_u32le(t + 36, 0xffffffffu);
    wr_u32le(t + 40, 0xffffffffu);
    expect_refused(t, n, LARES_EFORMAT, "need", "act counts overflowing");
    memcpy(t, b, n);
    wr_u32le(t + 40, 3);
    expect_refused(t, n, LARES_EFORMAT, "need", "act width not matching the bytes");
    memcpy(t, b, n);
    t[44] = 7;
    expect_refused(t, n, LARES_EFORMAT, "element type 7", "act element type");
    memcpy(t, b, n);
    wr_u32le(t + 48 + 4, 9);
    expect_refused(t, n, LARES_EFORMAT, "consecutive", "act positions with a gap");
    memcpy(t, b, n);
    wr_u32le(t + 48, 0xfffffff0u);
    expect_refused(t, n, LARES_EFORMAT, "position", "act negative position");
    memcpy(t, b, n);
    wr_u32le(t + 36, 0);
    expect_refused(t, n, LARES_EFORMAT, "no tokens", "act without tokens");
    memcpy(t, b, n);
    wr_u32le(t + 32, 0);
    expect_refused(t, n, LARES_EFORMAT, "end layer 0", "act with no end layer");
    memcpy(t, b, n);
    wr_u16le(t + 46, 1000);
    expect_refused(t, n, LARES_EFORMAT, "trace", "act with too many trace entries");

    /* PLAN: windows that do not add up, a device index out of range */
    cluster_plan_msg *p = calloc(1, sizeof *p);
    p->self = 1;
    p->n_ctx = 64;
    p->n_batch = 8;
    p->n_embd = 64;
    p->plan = (cluster_plan){.n_layer = 5, .n_dev = 2, .w = {1, 0}};
    snprintf(p->addr[1], sizeof p->addr[1], "h:1");
    n = cluster_encode_plan(b, sizeof b, 5, p);
    expect_refused(b, n, LARES_EFORMAT, "window", "plan with an empty worker window");
    p->plan.w[1] = 5;
    n = cluster_encode_plan(b, sizeof b, 5, p);
    expect_refused(b, n, LARES_EFORMAT, "add up", "plan wider than the model");
    p->plan.w[1] = 2;
    p->self = 2;
    n = cluster_encode_plan(b, sizeof b, 5, p);
    expect_refused(b, n, LARES_EFORMAT, "device index 2 of 2", "plan for a device not in it");
    p->self = 1;
    p->n_batch = 128;
    n = cluster_encode_plan(b, sizeof b, 5, p);
    expect_refused(b, n, LARES_EFORMAT, "batch", "plan batch beyond the context");
    p->n_batch = 8;
    p->addr[1][0] = '\0';
    n = cluster_encode_plan(b, sizeof b, 5, p);
    expect_refused(b, n, LARES_EFORMAT, "no address", "plan without a worker address");
    snprintf(p->addr[1], sizeof p->addr[1], "h:1");
    p->n_embd = 1u << 30;
    n = cluster_encode_plan(b, sizeof b, 5, p);
    expect_refused(b, n, LARES_EFORMAT, "frame limit", "plan whose batches cannot fit a frame");
    /* PREPARE: the plan's checks, and no probe (it has no windows to fetch) */
    n = cluster_encode_prepare(b, sizeof b, 5, p);
    expect_refused(b, n, LARES_EFORMAT, "frame limit", "prepare whose batches cannot fit a frame");
    p->n_embd = 64;
    p->flags = CLUSTER_PLAN_PROBE;
    CHECK(cluster_encode_prepare(b, sizeof b, 5, p) == 0);
    p->flags = 0;
    n = cluster_encode_prepare(b, sizeof b, 5, p);
    CHECK(n > 0);
    wr_u16le(b + CLUSTER_HEADER_BYTES + 22, CLUSTER_PLAN_PROBE);
    expect_refused(b, n, LARES_EFORMAT, "probe", "prepare of a probe plan");
    p->plan.w[1] = 5;
    n = cluster_encode_prepare(b, sizeof b, 5, p);
    expect_refused(b, n, LARES_EFORMAT, "add up", "prepare of a plan wider than the model");
    free(p);
    /* PREPARED: a status beyond lares_status, a message over its limit, a lying length */
    cluster_prepared pd = {.status = LARES_STATUS_COUNT + 3};
    snprintf(pd.msg, sizeof pd.msg, "cache full");
    n = cluster_encode_prepared(b, sizeof b, 5, &pd);
    expect_refused(b, n, LARES_EFORMAT, "status", "prepared with an unknown status");
    pd.status = 0;
    n = cluster_encode_prepared(b, sizeof b, 5, &pd);
    wr_u16le(b + CLUSTER_HEADER_BYTES + 12, CLUSTER_MAX_MSG + 1);
    expect_refused(b, n, LARES_EFORMAT, "at most", "prepared message over its limit");
    n = cluster_encode_prepared(b, sizeof b, 5, &pd);
    wr_u16le(b + CLUSTER_HEADER_BYTES + 12, 200);
    expect_refused(b, n, LARES_EFORMAT, "", "prepared message longer than the frame");

    /* HELLO: device counts */
    cluster_hello h = {.device = 0, .n_devices = 2, .heartbeat_ms = 100, .timeout_ms = 1000};
    n = cluster_encode_hello(b, sizeof b, &h);
    expect_refused(b, n, LARES_EFORMAT, "device index 0", "hello to the head's index");
    h.device = 1;
    h.timeout_ms = 50;
    n = cluster_encode_hello(b, sizeof b, &h);
    expect_refused(b, n, LARES_EFORMAT, "timeout", "hello with a timeout under the heartbeat");
    /* HELLO flags: profile and survey are known, another bit is not */
    h.timeout_ms = 1000;
    h.flags = CLUSTER_HELLO_PROFILE | CLUSTER_HELLO_SURVEY;
    n = cluster_encode_hello(b, sizeof b, &h);
    {
        lares_error e = {0};
        static cluster_frame fr;
        CHECK_OK(cluster_frame_decode(b, n, &fr, &e), &e);
        CHECK(fr.u.hello.flags == (CLUSTER_HELLO_PROFILE | CLUSTER_HELLO_SURVEY));
    }
    h.flags = 4;
    n = cluster_encode_hello(b, sizeof b, &h);
    expect_refused(b, n, LARES_EFORMAT, "unknown flags 0x4", "hello with an unknown flag");
    /* KV op out of range */
    const cluster_kv kv = {.op = 9, .pos = 0};
    n = cluster_encode_kv(b, sizeof b, 1, CLUSTER_KV, &kv);
    expect_refused(b, n, LARES_EFORMAT, "kv operation 9", "unknown kv operation");
}

/* ---- the plan against scheduling.md, worked by hand ---- */

/* ---- several sequences (issue 20): run tables, slots, PLAN flag 8 ---- */

static void check_slots(void) {
    uint8_t b[4096], t[4096];
    cluster_frame *f = calloc(1, sizeof *f);
    lares_error err = {0};
    /* ACT with a run table, by hand: 3 rows of width 1, slot 2 (rows at
     * positions 7, 8) then slot 5 (row at position 0) */
    static const uint8_t act[] = {
        'L', 'R', 'N',  'G',  2, 0, 5, 0, /* magic, version 2, type 5 */
        9,   0,   0,    0,    0, 0, 0, 0, /* session 9 */
        72,  0,   0,    0, /* payload: 28 fixed + 4 + 2 x 8 runs + 12 pos + 12 data */
        1,   0,   0,    0,    0, 0, 0, 0, /* sequence */
        0,   0,   0,    0,                /* next layer */
        4,   0,   0,    0,                /* end layer */
        3,   0,   0,    0,                /* tokens */
        1,   0,   0,    0,                /* width */
        0,                                /* f32 */
        1,                                /* flags: a run table */
        0,   0,                           /* trace entries */
        2,   0,   0,    0,                /* runs */
        2,   0,   0,    0,    2, 0, 0, 0, /* slot 2, 2 rows */
        5,   0,   0,    0,    1, 0, 0, 0, /* slot 5, 1 row */
        7,   0,   0,    0,    8, 0, 0, 0, /* positions */
        0,   0,   0,    0,                /* ... a new run starts anywhere */
        0,   0,   0x80, 0x3f,             /* 1.0f */
        0,   0,   0,    0x40,             /* 2.0f */
        0,   0,   0x40, 0x40,             /* 3.0f */
    };
    const cluster_run runs[] = {{.slot = 2, .rows = 2}, {.slot = 5, .rows = 1}};
    const int32_t pos[] = {7, 8, 0};
    const float x[] = {1.0f, 2.0f, 3.0f};
    cluster_act a = {.seq = 1, .layer = 0, .end = 4, .n_tok = 3, .n_embd = 1, .n_runs = 2};
    size_t n = cluster_encode_act_runs(b, sizeof b, 9, &a, runs, pos, NULL, x);
    CHECKF(n == sizeof act && memcmp(b, act, n) == 0, "act with runs: %zu bytes, want %zu", n,
           sizeof act);
    CHECK(n == cluster_act_bytes_runs(3, 1, CLUSTER_DTYPE_F32, 0, 2));
    CHECK(cluster_encode_act(b, sizeof b, 9, &a, pos, NULL, x) == 0); /* runs need the _runs call */
    CHECK_OK(cluster_frame_decode(act, sizeof act, f, &err), &err);
    cluster_run r1;
    cluster_act_run_at(&f->u.act, 1, &r1);
    CHECK(f->u.act.n_runs == 2 && r1.slot == 5 && r1.rows == 1 &&
          cluster_act_pos(&f->u.act, 2) == 0);
    /* encoders refuse runs that do not add up or name a slot out of range */
    const cluster_run short_runs[] = {{.slot = 2, .rows = 1}, {.slot = 5, .rows = 1}};
    CHECK(cluster_encode_act_runs(b, sizeof b, 9, &a, short_runs, pos, NULL, x) == 0);
    const cluster_run far[] = {{.slot = CLUSTER_MAX_SLOTS, .rows = 2}, {.slot = 5, .rows = 1}};
    CHECK(cluster_encode_act_runs(b, sizeof b, 9, &a, far, pos, NULL, x) == 0);
    /* hostile run tables */
    memcpy(t, act, sizeof act);
    t[45] = 3;
    expect_refused(t, sizeof act, LARES_EFORMAT, "unknown flags 0x3", "act flags");
    memcpy(t, act, sizeof act);
    wr_u32le(t + 48, 4);
    expect_refused(t, sizeof act, LARES_EFORMAT, "4 runs for 3 tokens", "more runs than rows");
    memcpy(t, act, sizeof act);
    wr_u32le(t + 48, 0);
    expect_refused(t, sizeof act, LARES_EFORMAT, "0 runs", "a table of no runs");
    memcpy(t, act, sizeof act);
    wr_u32le(t + 52, CLUSTER_MAX_SLOTS);
    expect_refused(t, sizeof act, LARES_EFORMAT, "names slot 4096", "slot out of range");
    memcpy(t, act, sizeof act);
    wr_u32le(t + 56, 3); /* slot 2 takes all 3 rows: the table's second run is left over */
    wr_u32le(t + 76, 9);
    expect_refused(t, sizeof act, LARES_EFORMAT, "the table has 2", "a run left over");
    memcpy(t, act, sizeof act);
    wr_u32le(t + 64, 2); /* slot 5's row past the end */
    expect_refused(t, sizeof act, LARES_EFORMAT, "run 1 of 2 rows from row 2", "rows past the end");
    memcpy(t, act, sizeof act);
    wr_u32le(t + 56, 1); /* 1 + 1 rows for 3 tokens */
    expect_refused(t, sizeof act, LARES_EFORMAT, "the 2 runs end before row 2", "rows short");
    memcpy(t, act, sizeof act);
    wr_u32le(t + 68, 9); /* slot 2's second row at 9 after 7 */
    expect_refused(t, sizeof act, LARES_EFORMAT, "consecutive", "a gap inside a run");

    /* KV and KV_GET: slot 0 is the frame before slots, byte for byte; another
     * slot adds a u32 */
    cluster_kv kv = {.op = CLUSTER_KV_TRUNCATE, .pos = 12};
    n = cluster_encode_kv(b, sizeof b, 3, CLUSTER_KV, &kv);
    CHECK(n == CLUSTER_HEADER_BYTES + 8);
    kv.slot = 7;
    n = cluster_encode_kv(b, sizeof b, 3, CLUSTER_KV, &kv);
    CHECK(n == CLUSTER_HEADER_BYTES + 12 && rd_u32le(b + CLUSTER_HEADER_BYTES + 8) == 7 &&
          rd_u32le(b + CLUSTER_HEADER_BYTES) == (CLUSTER_KV_TRUNCATE | CLUSTER_KV_OP_SLOT));
    CHECK_OK(cluster_frame_decode(b, n, f, &err), &err);
    CHECK(f->u.kv.slot == 7 && f->u.kv.pos == 12);
    wr_u32le(b + CLUSTER_HEADER_BYTES + 8, CLUSTER_MAX_SLOTS);
    expect_refused(b, n, LARES_EFORMAT, "slot 4096", "kv slot out of range");
    cluster_kv_get g = {.layer = 3, .pos0 = 0, .pos1 = 9};
    n = cluster_encode_kv_get(b, sizeof b, 3, &g);
    CHECK(n == CLUSTER_HEADER_BYTES + 12);
    g.slot = 4;
    n = cluster_encode_kv_get(b, sizeof b, 3, &g);
    CHECK_OK(cluster_frame_decode(b, n, f, &err), &err);
    CHECK(n == CLUSTER_HEADER_BYTES + 16 && f->u.kv_get.slot == 4 && f->u.kv_get.pos1 == 9 &&
          f->u.kv_get.layer == 3);
    /* the slot bit without a slot, a slot without the bit */
    wr_u32le(b + 16, 12);
    expect_refused(b, CLUSTER_HEADER_BYTES + 12, LARES_EFORMAT, "slot needs 4 bytes",
                   "kv-get slot bit without a slot");
    g.slot = 0;
    n = cluster_encode_kv_get(b, sizeof b, 3, &g);
    wr_u32le(b + n, 4);
    wr_u32le(b + 16, 16);
    expect_refused(b, n + 4, LARES_EFORMAT, "left over", "kv-get slot without the bit");
    /* KV_DATA and KV_MIRROR: the slot in the u16 once reserved */
    const uint8_t rows[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    cluster_kv_data d = {
        .layer = 1, .pos0 = 2, .n_pos = 1, .row_bytes = 4, .slot = 300, .k = rows, .v = rows + 4};
    n = cluster_encode_kv_mirror(b, sizeof b, 3, &d);
    CHECK(rd_u16le(b + CLUSTER_HEADER_BYTES + 18) == 300);
    CHECK_OK(cluster_frame_decode(b, n, f, &err), &err);
    CHECK(f->u.kv_data.slot == 300 && f->u.kv_data.v[0] == 5);
    wr_u16le(b + CLUSTER_HEADER_BYTES + 18, CLUSTER_MAX_SLOTS);
    expect_refused(b, n, LARES_EFORMAT, "slot 4096", "kv data slot out of range");
    d.slot = CLUSTER_MAX_SLOTS;
    CHECK(cluster_encode_kv_data(b, sizeof b, 3, &d) == 0);

    /* PLAN flag 8: the slot count after the devices; without the flag the
     * bytes are those of a plan before it */
    static cluster_plan_msg p;
    memset(&p, 0, sizeof p);
    p.self = 1;
    p.n_ctx = 64;
    p.n_batch = 8;
    p.n_embd = 16;
    p.n_slots = 5;
    p.plan = (cluster_plan){.n_layer = 4, .n_dev = 2, .w = {1, 3}};
    snprintf(p.addr[1], sizeof p.addr[1], "10.0.0.1:9100");
    const size_t plain = cluster_encode_plan(b, sizeof b, 1, &p);
    CHECK_OK(cluster_frame_decode(b, plain, f, &err), &err);
    CHECK(f->u.plan.n_slots == 1); /* no flag: one slot, whatever the struct said */
    p.flags = CLUSTER_PLAN_SLOTS;
    n = cluster_encode_plan(b, sizeof b, 1, &p);
    CHECK(n == plain + 4 && rd_u32le(b + n - 4) == 5);
    CHECK_OK(cluster_frame_decode(b, n, f, &err), &err);
    CHECK(f->u.plan.n_slots == 5 && (f->u.plan.flags & CLUSTER_PLAN_SLOTS));
    wr_u32le(b + n - 4, 0);
    expect_refused(b, n, LARES_EFORMAT, "0 slots", "a plan of no slots");
    wr_u32le(b + n - 4, CLUSTER_MAX_SLOTS + 1);
    expect_refused(b, n, LARES_EFORMAT, "4097 slots", "a plan of too many slots");
    wr_u32le(b + 16, (uint32_t)(n - 4 - CLUSTER_HEADER_BYTES));
    expect_refused(b, n - 4, LARES_EFORMAT, "slot count", "flag 8 without its count");
    free(f);
}

static void check_plan(void) {
    int32_t l0, l1, d, r;
    /* 32 layers, w = 2 3 3: W = 8, k = 4; device m's window in round r starts at
     * r*W + w[0] + ... + w[m-1] */
    cluster_plan p = {.n_layer = 32, .n_dev = 3, .w = {2, 3, 3}};
    CHECK(cluster_plan_check(&p, NULL) == LARES_OK);
    CHECK(cluster_plan_width(&p) == 8 && cluster_plan_rounds(&p) == 4);
    CHECK(cluster_plan_window(&p, 1, 2, &l0, &l1) && l0 == 18 && l1 == 21);
    CHECK(cluster_plan_window(&p, 0, 3, &l0, &l1) && l0 == 24 && l1 == 26);
    CHECK(cluster_plan_window(&p, 2, 3, &l0, &l1) && l0 == 29 && l1 == 32);
    CHECK(cluster_plan_layers_of(&p, 1) == 12 && cluster_plan_layers_of(&p, 0) == 8);
    CHECK(cluster_plan_owner(&p, 21, &d, &r) && d == 2 && r == 2);
    CHECK(!cluster_plan_owner(&p, 22, &d, &r)); /* inside a window, not its start */
    /* 5 layers, w = 0 1 1 1: W = 3, k = 2, the last round cut at layer 5 */
    cluster_plan q = {.n_layer = 5, .n_dev = 4, .w = {0, 1, 1, 1}};
    CHECK(cluster_plan_check(&q, NULL) == LARES_OK && cluster_plan_rounds(&q) == 2);
    CHECK(!cluster_plan_window(&q, 0, 0, &l0, &l1));
    CHECK(cluster_plan_window(&q, 2, 1, &l0, &l1) && l0 == 4 && l1 == 5);
    CHECK(!cluster_plan_window(&q, 3, 1, &l0, &l1));
    CHECK(cluster_plan_layers_of(&q, 3) == 1 && cluster_plan_layers_of(&q, 1) == 2);
    /* refusals */
    lares_error err = {0};
    cluster_plan bad = {.n_layer = 4, .n_dev = 2, .w = {1, 0}};
    CHECK(cluster_plan_check(&bad, &err) == LARES_EINVAL && has(err.msg, "device 1"));
    bad.w[1] = 4;
    CHECK(cluster_plan_check(&bad, &err) == LARES_EINVAL && has(err.msg, "add up"));
    bad.w[1] = 2;
    bad.n[1] = 3;
    CHECK(cluster_plan_check(&bad, &err) == LARES_EINVAL && has(err.msg, "gpu"));
    /* even splits */
    cluster_plan e;
    CHECK_OK(cluster_plan_even(4, 32, 2, &e, &err), &err);
    CHECK(e.w[0] == 4 && e.w[3] == 4 && cluster_plan_rounds(&e) == 2);
    CHECK_OK(cluster_plan_even(3, 5, 0, &e, &err), &err);
    CHECK(e.w[0] == 2 && e.w[1] == 2 && e.w[2] == 1 && cluster_plan_rounds(&e) == 1);
    CHECK(cluster_plan_even(4, 5, 2, &e, &err) == LARES_EINVAL && has(err.msg, "fewer"));
    CHECK(cluster_plan_even(2, 5, 9, &e, &err) == LARES_EINVAL);
    char desc[128];
    cluster_plan_describe(&p, desc, sizeof desc);
    CHECKF(strcmp(desc, "head 2 | dev1 3 | dev2 3 (8 layers per round, k = 4)") == 0, "%s", desc);
}

/* ---- ring.json ---- */

static char tmpdir[64];

static void check_ring_json(void) {
    static const char z[] = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"; /* a valid Z85 key */
    char json[2048];
    cluster_ring_config *c = calloc(1, sizeof *c);
    lares_error err = {0};
    snprintf(json, sizeof json,
             "{\"rounds\": 2, \"activations\": \"f16\", \"heartbeat_ms\": 100, \"timeout_ms\": 900,"
             " \"devices\": [{\"name\": \"laptop\", \"key\": \"head.key\", \"w\": 1},"
             " {\"address\": \"10.0.0.2:9100\", \"public_key\": \"%s\", \"model\": \"m.gguf\","
             " \"threads\": 3, \"w\": 2, \"n\": 1, \"link_delay_ms\": 5}]}",
             z);
    CHECK_OK(cluster_ring_parse(json, strlen(json), "r.json", "/etc/lares", c, &err), &err);
    CHECK(c->n_dev == 2 && c->rounds == 2 && c->act_dtype == CLUSTER_DTYPE_F16);
    CHECK(c->heartbeat_ms == 100 && c->timeout_ms == 900 && !c->auto_windows);
    CHECK(strcmp(c->head_key_path, "/etc/lares/head.key") == 0);
    CHECK(strcmp(c->dev[0].name, "laptop") == 0 && strcmp(c->dev[1].name, "worker1") == 0);
    CHECK(c->dev[1].has_key && c->dev[1].n_threads == 3 && c->dev[1].w == 2 && c->dev[1].n == 1);
    CHECK(strcmp(c->dev[1].model_path, "m.gguf") == 0 && c->dev[1].link_delay_ms == 5);
    uint8_t key[CLUSTER_KEY_BYTES];
    CHECK_OK(cluster_key_parse(z, key, &err), &err);
    CHECK(memcmp(key, c->dev[1].key, sizeof key) == 0);
    cluster_plan p;
    /* w = 1 2 over 6 layers: W = 3, k = 2 as asked */
    CHECK_OK(cluster_ring_plan(c, 6, &p, &err), &err);
    CHECK(cluster_plan_rounds(&p) == 2 && p.n[1] == 1);
    CHECK(cluster_ring_plan(c, 9, &p, &err) == LARES_EINVAL && has(err.msg, "rounds"));

    /* auto windows */
    snprintf(json, sizeof json,
             "{\"windows\": \"auto\", \"devices\": [{}, {\"address\": \"a:1\", \"public_key\": "
             "\"%s\"}, {\"address\": \"b:1\"}]}",
             z);
    CHECK_OK(cluster_ring_parse(json, strlen(json), "a.json", "", c, &err), &err);
    CHECK(c->auto_windows && c->n_dev == 3 && !c->dev[2].has_key);
    CHECK(c->kv_mirror == -1); /* not given: on with failover */
    CHECK_OK(cluster_ring_plan(c, 22, &p, &err), &err);
    CHECK(p.w[0] == 8 && p.w[1] == 7 && p.w[2] == 7);

    static const struct {
        const char *json;
        const char *needle;
    } bad[] = {
        {"{\"devices\": [{\"w\": 1}], \"speed\": 3}", "unknown key 'speed'"},
        {"{\"devices\": [{\"w\": 1, \"adress\": \"x\"}]}", "unknown key 'adress'"},
        {"{\"devices\": [{\"w\": 1}, {\"head\": true, \"address\": \"a:1\", \"w\": 1}]}",
         "first device"},
        {"{\"devices\": [{\"w\": 1}, {\"w\": 1}]}", "no \"address\""},
        {"{\"devices\": [{\"w\": 1}, {\"address\": \"a:1\", \"w\": 1}, {\"address\": \"a:1\", "
         "\"w\": 1}]}",
         "share the address"},
        {"{\"devices\": [{\"w\": 1}, {\"address\": \"a:1\"}]}", "every device"},
        {"{\"activations\": \"f8\", \"devices\": [{}]}", "activations"},
        {"{\"heartbeat_ms\": 500, \"timeout_ms\": 400, \"devices\": [{}]}", "must exceed"},
        {"{\"devices\": [{\"address\": \"a:1\"}]}", "takes no \"address\""},
        {"{\"devices\": [{}, {\"address\": \"a:1\", \"key\": \"w.key\"}]}", "stays on the worker"},
        {"{\"devices\": [{}, {\"address\": \"a:1\", \"public_key\": \"short\"}]}", "public_key"},
        {"{\"devices\": [{}, {\"address\": \"a:1\", \"threads\": 0}]}", "threads"},
        {"{\"devices\": []}", "devices"},
        {"{\"devices\": [{}], \"rounds\": \"many\"}", "rounds"},
        {"{\"devices\": [{}], \"kv_mirror\": \"yes\"}", "kv_mirror"},
        {"{\"devices\": [{},]}", "r.json:1:"},
        {"[1, 2]", "top level"},
    };
    for (size_t i = 0; i < LARES_ARRAY_LEN(bad); i++) {
        lares_status st =
            cluster_ring_parse(bad[i].json, strlen(bad[i].json), "r.json", "", c, &err);
        CHECKF(st == LARES_EFORMAT && has(err.msg, bad[i].needle) && has(err.msg, "r.json"),
               "ring.json case %zu: status %d, message '%s' (want '%s')", i, st, err.msg,
               bad[i].needle);
    }
    char missing[128];
    snprintf(missing, sizeof missing, "%s/none.json", tmpdir);
    CHECK(cluster_ring_load(missing, c, &err) == LARES_ENOTFOUND && has(err.msg, "none.json"));
    free(c);
}

/* ---- key files and allow-lists ---- */

static void write_text(const char *path, const char *text, mode_t mode) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

static void check_keys(void) {
    lares_error err = {0};
    char path[160], pub[170], other[160];
    snprintf(path, sizeof path, "%s/a.key", tmpdir);
    snprintf(pub, sizeof pub, "%s.pub", path);
    snprintf(other, sizeof other, "%s/b.key", tmpdir);
    char z[LARES_KEY_Z85_LEN + 1];
    CHECK_OK(lares_keygen(path, z, &err), &err);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600);
    CHECK(stat(pub, &sb) == 0 && (sb.st_mode & 0077) != 0077);
    /* never overwritten */
    CHECK(lares_keygen(path, z, &err) == LARES_EIO && has(err.msg, "never overwritten"));
    cluster_keypair k;
    CHECK_OK(cluster_key_read(path, &k, &err), &err);
    CHECK(strcmp(k.public_z85, z) == 0);
    /* the public file carries the same key */
    cluster_allow *a = calloc(1, sizeof *a);
    CHECK_OK(cluster_allow_add(a, pub, &err), &err);
    CHECK(a->n == 1 && memcmp(a->keys[0], k.public_key, CLUSTER_KEY_BYTES) == 0);
    /* the key as text, twice: kept once */
    CHECK_OK(cluster_allow_add(a, z, &err), &err);
    CHECK(a->n == 1 && cluster_allow_has(a, k.public_key));
    /* a pair file is refused as an allow-list: it holds a secret */
    CHECK(cluster_allow_add(a, path, &err) == LARES_EINVAL && has(err.msg, "secret"));
    CHECK(cluster_allow_add(a, "not-a-key", &err) == LARES_EINVAL && has(err.msg, "neither"));
    /* readable by others: refused */
    chmod(path, 0644);
    CHECK(cluster_key_read(path, &k, &err) == LARES_EAUTH && has(err.msg, "chmod 600"));
    chmod(path, 0600);
    CHECK_OK(cluster_key_read(path, &k, &err), &err); /* a failed read leaves k zeroed */
    /* a public key that does not belong to the secret */
    CHECK_OK(lares_keygen(other, z, &err), &err);
    cluster_keypair k2;
    CHECK_OK(cluster_key_read(other, &k2, &err), &err);
    char text[300];
    snprintf(text, sizeof text, "public-key = %s\nsecret-key = %s\n", k2.public_z85, k.secret_z85);
    char mixed[170];
    snprintf(mixed, sizeof mixed, "%s/mixed.key", tmpdir);
    write_text(mixed, text, 0600);
    cluster_keypair junk; /* failed reads zero it */
    CHECK(cluster_key_read(mixed, &junk, &err) == LARES_EFORMAT && has(err.msg, "belong"));
    write_text(mixed, "public-key = abc\n", 0600);
    CHECK(cluster_key_read(mixed, &junk, &err) == LARES_EFORMAT && has(err.msg, "characters"));
    write_text(mixed, "hello\n", 0600);
    CHECK(cluster_key_read(mixed, &junk, &err) == LARES_EFORMAT && has(err.msg, "expected"));
    /* a list of keys with comments; a bad line names its number */
    snprintf(text, sizeof text, "# heads\n%s\n\npublic-key = %s\n", k.public_z85, k2.public_z85);
    write_text(mixed, text, 0644);
    cluster_allow *b = calloc(1, sizeof *b);
    CHECK_OK(cluster_allow_add(b, mixed, &err), &err);
    CHECK(b->n == 2);
    write_text(mixed, "# nothing\n", 0644);
    CHECK(cluster_allow_add(b, mixed, &err) == LARES_EFORMAT && has(err.msg, "no public key"));
    snprintf(text, sizeof text, "%s\nxyz\n", k.public_z85);
    write_text(mixed, text, 0644);
    CHECK(cluster_allow_add(b, mixed, &err) == LARES_EINVAL && has(err.msg, ":2:"));
    free(a);
    free(b);
    unlink(path);
    unlink(pub);
    unlink(other);
    snprintf(text, sizeof text, "%s.pub", other);
    unlink(text);
    unlink(mixed);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lares-frame-test.XXXXXX");
    if (mkdtemp(tmpdir) == NULL) {
        return 1;
    }
    check_golden();
    check_roundtrip_and_truncation();
    check_hostile();
    check_slots();
    check_plan();
    check_ring_json();
    check_keys();
    rmdir(tmpdir);
    return check_finish("cluster_frame");
}
