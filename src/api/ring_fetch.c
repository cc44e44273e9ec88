/*
 * The worker's side of shipping the model (ring_fetch.h): it asks, the head
 * answers. Every item (the header, each tensor) is fetched in order in
 * chunks of CLUSTER_MAX_CHUNK, FETCH_WINDOW chunks in flight, written to the
 * cache as they come, and verified whole against the head's SHA-256 before
 * it is used; a mismatch drops it and fetches it again (at most
 * FETCH_TRIES times). A transfer cut off leaves the bytes received in the
 * cache; the next one starts where they end.
 */
#include "api/ring_fetch.h"

#include <stdlib.h>
#include <time.h>

#define FETCH_WINDOW    8     /* chunks in flight: 32 MiB covers 1 Gbit/s x 250 ms */
#define FETCH_TRIES     3     /* fetches of one item before giving up */
#define FETCH_WAIT_MS   60000 /* no answer for this long: the head is gone */
#define FETCH_REPORT_NS 1000000000u

static void say(api_fetch *f, const char *fmt, ...) LARES_PRINTF(2, 3);
static void say(api_fetch *f, const char *fmt, ...) {
    if (f->progress == NULL) {
        return;
    }
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    f->progress(f->user, text);
}

static double mib(uint64_t b) {
    return (double)b / 1048576.0;
}

/* one answer, checked against what was asked */
static lares_status recv_answer(api_fetch *f, uint32_t item, uint64_t off, uint32_t len,
                                cluster_tensor_data *d, lares_error *err) {
    lares_status st;
    /* answers to an earlier transfer cut short come first: dropped */
    while ((st = cluster_ship_recv(f->link, FETCH_WAIT_MS, d, err)) == LARES_OK &&
           (d->status == 0 ? (d->item != item || d->offset != off || d->length != len)
                           : d->item != item)) {
        lares_log(LARES_LOG_DEBUG, "ring: dropped an answer for item %u bytes %" PRIu64 "+%u",
                  d->item, d->offset, d->length);
    }
    if (st != LARES_OK) {
        return st;
    }
    if (d->status != 0) {
        return lares_fail(err, (lares_status)d->status,
                          "the head cannot ship item %u of its model (status %u: %s)", d->item,
                          d->status,
                          d->status == LARES_EUNSUPPORTED ? "it has no model file to ship"
                                                          : "no such item or range");
    }
    return LARES_OK;
}

/* the item's size and the head's hash */
static lares_status ask_hash(api_fetch *f, uint32_t item, cluster_tensor_data *d,
                             lares_error *err) {
    const cluster_tensor_get g = {.item = item};
    lares_status st = cluster_ship_send(f->link, &g, err);
    return st == LARES_OK ? recv_answer(f, item, 0, 0, d, err) : st;
}

/* ---- the transfer of a set of items ---- */

typedef struct xfer {
    api_fetch *f;
    const char *what; /* "weights", "the model's header" */
    const bool *need;
    uint32_t cur;      /* item being requested */
    uint64_t cur_off;  /* its next offset to request */
    uint32_t *redo;    /* items to fetch again from 0 (hash mismatch) */
    uint32_t n_redo;
    bool redoing;      /* cur is an item fetched again: after it, the next to redo */
    uint8_t *tries;    /* per item */
    /* chunks in flight, in request order */
    uint32_t q_item[FETCH_WINDOW];
    uint64_t q_off[FETCH_WINDOW];
    uint32_t q_len[FETCH_WINDOW];
    uint32_t q_head, q_n;
    uint64_t total, done, t0, last_report, last_sync;
    /* the item being received, hashed as its chunks come (they come in
     * order), so a finished item need not be read back; an item resumed in
     * the middle (bytes from an earlier transfer) is read back instead */
    wcache_sha256 *h;
    uint32_t h_item;
    uint64_t h_off;
} xfer;

/* the cache holds some of item i (so the head's hash checks it before use) */
static bool held_some(const api_fetch *f, uint32_t i) {
    return wcache_have(f->cache, i) > 0 || wcache_done(f->cache, i, NULL);
}

static bool wanted(const xfer *x, uint32_t i) {
    return x->need[i] && wcache_have(x->f->cache, i) < wcache_item_bytes(x->f->cache, i);
}

/* the next chunk to ask for; false when nothing is left to ask */
static bool next_chunk(xfer *x, uint32_t *item, uint64_t *off, uint32_t *len) {
    for (;;) {
        if (x->cur < x->f->n_items) {
            const uint64_t bytes = wcache_item_bytes(x->f->cache, x->cur);
            if (x->cur_off < bytes) {
                *item = x->cur;
                *off = x->cur_off;
                *len = (uint32_t)LARES_MIN(bytes - x->cur_off, (uint64_t)CLUSTER_MAX_CHUNK);
                x->cur_off += *len;
                return true;
            }
            if (x->redoing) { /* the items after it were asked for already */
                x->cur = x->f->n_items;
            }
            /* the next item that lacks bytes, from where the cache stops */
            uint32_t i = x->cur + 1;
            while (i < x->f->n_items && !wanted(x, i)) {
                i++;
            }
            x->cur = i;
            x->cur_off = i < x->f->n_items ? wcache_have(x->f->cache, i) : 0;
            if (i < x->f->n_items) {
                continue;
            }
        }
        if (x->n_redo == 0) {
            return false;
        }
        x->cur = x->redo[--x->n_redo];
        x->cur_off = 0;
        x->redoing = true;
    }
}

static lares_status send_more(xfer *x, lares_error *err) {
    while (x->q_n < FETCH_WINDOW) {
        uint32_t item, len;
        uint64_t off;
        if (!next_chunk(x, &item, &off, &len)) {
            return LARES_OK;
        }
        const cluster_tensor_get g = {.item = item, .offset = off, .length = len};
        lares_status st = cluster_ship_send(x->f->link, &g, err);
        if (st != LARES_OK) {
            return st;
        }
        const uint32_t k = (x->q_head + x->q_n) % FETCH_WINDOW;
        x->q_item[k] = item;
        x->q_off[k] = off;
        x->q_len[k] = len;
        x->q_n++;
    }
    return LARES_OK;
}

static void report(xfer *x, uint64_t now, bool last) {
    api_fetch *f = x->f;
    const double s = (double)(now - x->t0) / 1e9;
    const double rate = s > 0 ? mib(x->done) / s : 0.0;
    if (last) {
        say(f, "fetched %.1f MiB of %s from the head in %.2f s (%.1f MiB/s); %.1f MiB from the cache",
            mib(x->done), x->what, s, rate, mib(f->cached_bytes));
    } else {
        say(f, "fetching %s from the head: %.1f of %.1f MiB (%.0f %%), %.1f MiB/s", x->what,
            mib(x->done), mib(x->total), x->total ? 100.0 * (double)x->done / (double)x->total : 100.0,
            rate);
    }
}

/* the bytes just written go into the running hash of their item when they
 * continue it (a chunk at offset 0 starts one) */
static void hash_chunk(xfer *x, const cluster_tensor_data *d) {
    if (d->offset == 0) {
        uint8_t junk[WCACHE_SHA256_BYTES];
        if (x->h != NULL) {
            wcache_sha256_end(x->h, junk);
        }
        x->h = wcache_sha256_begin(); /* NULL (no memory): the item is read back */
        x->h_item = d->item;
        x->h_off = 0;
    }
    if (x->h != NULL && x->h_item == d->item && x->h_off == d->offset) {
        wcache_sha256_add(x->h, d->data, d->length);
        x->h_off += d->length;
    }
}

/* true with the digest when item was hashed whole as it came */
static bool hashed_whole(xfer *x, uint32_t item, uint8_t out[WCACHE_SHA256_BYTES]) {
    if (x->h == NULL || x->h_item != item ||
        x->h_off != wcache_item_bytes(x->f->cache, item)) {
        return false;
    }
    wcache_sha256_end(x->h, out);
    x->h = NULL;
    return true;
}

/* one chunk came: into the cache; a finished item is verified */
static lares_status take_chunk(xfer *x, const cluster_tensor_data *d, lares_error *err) {
    api_fetch *f = x->f;
    const uint32_t item = d->item;
    if (f->tamper > 0 && d->length > 0) { /* tests: a chunk damaged on its way */
        f->tamper--;
        uint8_t *p = (uint8_t *)d->data;
        p[d->length / 2] ^= 0x5a;
    }
    /* (the header's one-item transfer knows its hash: no table yet) */
    bool known = f->head_known == NULL || f->head_known[item];
    if (!known && d->offset == 0 && d->item_bytes == wcache_item_bytes(f->cache, item)) {
        memcpy(f->head_sha[item], d->sha256, WCACHE_SHA256_BYTES); /* not asked ahead */
        f->head_known[item] = known = true;
    }
    if (!known || d->item_bytes != wcache_item_bytes(f->cache, item) ||
        memcmp(d->sha256, f->head_sha[item], WCACHE_SHA256_BYTES) != 0) {
        return lares_fail(err, LARES_EPROTO,
                          "item %u changed on the head during the transfer (size or hash)", item);
    }
    lares_status st = wcache_write(f->cache, item, d->offset, d->data, d->length, err);
    if (st != LARES_OK) {
        return st;
    }
    if (f->delay_ms > 0) { /* tests: a slow link */
        struct timespec ts = {.tv_sec = f->delay_ms / 1000, .tv_nsec = (long)(f->delay_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
    x->done += d->length;
    hash_chunk(x, d);
    if (wcache_have(f->cache, item) < wcache_item_bytes(f->cache, item)) {
        return LARES_OK;
    }
    lares_error verr = {0};
    uint8_t got[WCACHE_SHA256_BYTES];
    const bool hashed = hashed_whole(x, item, got);
    if ((hashed ? wcache_accept(f->cache, item, got, f->head_sha[item], &verr)
                : wcache_verify(f->cache, item, f->head_sha[item], &verr)) == LARES_OK) {
        f->verified[item] = true;
        return LARES_OK;
    }
    if (verr.code != LARES_EFORMAT) {
        return lares_fail(err, verr.code, "%s", verr.msg);
    }
    if (++x->tries[item] >= FETCH_TRIES) {
        return lares_fail(err, LARES_EFORMAT, "%s; %d fetches failed, giving up", verr.msg,
                          FETCH_TRIES);
    }
    lares_log(LARES_LOG_WARN, "ring: %s; fetching it again", verr.msg);
    say(f, "item %u: hash mismatch, the chunks received are dropped and fetched again", item);
    x->total += wcache_item_bytes(f->cache, item);
    x->redo[x->n_redo++] = item;
    return LARES_OK;
}

/* the transfer's clock starts at t0: the hashes asked before it count */
static lares_status transfer(api_fetch *f, const char *what, const bool *need, uint64_t missing,
                             uint64_t t0, lares_error *err) {
    xfer x = {.f = f, .what = what, .need = need, .cur = UINT32_MAX - 1, .total = missing};
    x.redo = lares_calloc(f->n_items, sizeof *x.redo);
    x.tries = lares_calloc(f->n_items, sizeof *x.tries);
    if (x.redo == NULL || x.tries == NULL) {
        lares_free(x.redo);
        lares_free(x.tries);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    /* start at the first item that lacks bytes */
    x.cur = 0;
    while (x.cur < f->n_items && !wanted(&x, x.cur)) {
        x.cur++;
    }
    x.cur_off = x.cur < f->n_items ? wcache_have(f->cache, x.cur) : 0;
    x.t0 = t0;
    x.last_report = x.last_sync = lares_now_ns();
    lares_status st = send_more(&x, err);
    while (st == LARES_OK && x.q_n > 0) {
        const uint32_t k = x.q_head;
        cluster_tensor_data d;
        st = recv_answer(f, x.q_item[k], x.q_off[k], x.q_len[k], &d, err);
        if (st != LARES_OK) {
            break;
        }
        x.q_head = (x.q_head + 1) % FETCH_WINDOW;
        x.q_n--;
        st = take_chunk(&x, &d, err);
        if (st == LARES_OK) {
            st = send_more(&x, err);
        }
        const uint64_t now = lares_now_ns();
        if (now - x.last_sync >= FETCH_REPORT_NS) { /* a kill loses at most a second's bytes */
            x.last_sync = now;
            lares_error serr = {0};
            if (wcache_sync(f->cache, &serr) != LARES_OK) {
                lares_log(LARES_LOG_WARN, "ring: %s", serr.msg);
            }
        }
        if (now - x.last_report >= FETCH_REPORT_NS) {
            x.last_report = now;
            report(&x, now, false);
        }
    }
    /* answers still in flight after a failure are dropped by the next transfer's checks */
    const uint64_t end = lares_now_ns();
    f->fetched_bytes = x.done;
    f->fetch_ms = (double)(end - x.t0) / 1e6;
    lares_error serr = {0};
    if (wcache_sync(f->cache, &serr) != LARES_OK && st == LARES_OK) {
        st = lares_fail(err, serr.code, "%s", serr.msg);
    }
    if (st == LARES_OK) { /* after the sync: the cache's listing now holds what came */
        report(&x, end, true);
    }
    if (x.h != NULL) {
        uint8_t junk[WCACHE_SHA256_BYTES];
        wcache_sha256_end(x.h, junk);
    }
    lares_free(x.redo);
    lares_free(x.tries);
    return st;
}

/* ---- the model's header ---- */

/* The items of a model file: item 0 its header, item i tensor i - 1. */
static lares_status item_table(const gguf_file *g, uint64_t **off, uint64_t **bytes, uint32_t *n,
                               lares_error *err) {
    const uint64_t nt = gguf_n_tensors(g);
    *off = *bytes = NULL;
    *n = 0;
    if (nt + 1 > WCACHE_MAX_ITEMS) {
        return lares_fail(err, LARES_EFORMAT, "%s: %" PRIu64 " tensors (at most %u)", gguf_path(g),
                          nt, WCACHE_MAX_ITEMS - 1);
    }
    uint64_t *o = lares_alloc_array((size_t)nt + 1, sizeof *o);
    uint64_t *b = lares_alloc_array((size_t)nt + 1, sizeof *b);
    if (o == NULL || b == NULL) {
        lares_free(o);
        lares_free(b);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    o[0] = 0;
    b[0] = gguf_header_bytes(g);
    for (uint64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        o[i + 1] = gguf_data_offset(g) + t->offset;
        b[i + 1] = t->nbytes;
    }
    *off = o;
    *bytes = b;
    *n = (uint32_t)nt + 1;
    return LARES_OK;
}

/* drops what the fetcher knew of the items (another model, or a header fetched anew) */
static void forget_items(api_fetch *f) {
    lares_free(f->verified);
    lares_free(f->head_sha);
    lares_free(f->head_known);
    f->verified = NULL;
    f->head_sha = NULL;
    f->head_known = NULL;
    f->n_items = 0;
}

static lares_status set_items(api_fetch *f, const char *path, lares_error *err) {
    gguf_file *g = NULL;
    lares_status st = gguf_open(path, NULL, &g, err);
    if (st != LARES_OK) {
        return st;
    }
    uint64_t *off = NULL, *bytes = NULL;
    uint32_t n = 0;
    st = item_table(g, &off, &bytes, &n, err);
    if (st == LARES_OK) {
        st = wcache_set_items(f->cache, n, off, bytes, err);
    }
    gguf_str name;
    if (st == LARES_OK && gguf_get_str(g, "general.name", &name, NULL) == LARES_OK) {
        char nm[64];
        snprintf(nm, sizeof nm, "%.*s", (int)LARES_MIN(name.len, sizeof nm - 1), name.ptr);
        wcache_set_name(f->cache, nm);
    }
    if (st == LARES_OK && n != f->n_items) {
        forget_items(f);
        f->verified = lares_calloc(n, sizeof *f->verified);
        f->head_sha = lares_calloc(n, sizeof *f->head_sha);
        f->head_known = lares_calloc(n, sizeof *f->head_known);
        f->n_items = n;
        if (f->verified == NULL || f->head_sha == NULL || f->head_known == NULL) {
            forget_items(f);
            st = lares_fail(err, LARES_ENOMEM, "out of memory");
        }
    }
    lares_free(off);
    lares_free(bytes);
    gguf_close(g);
    return st;
}

static lares_status open_entry(api_fetch *f, const uint8_t sha[WCACHE_SHA256_BYTES],
                               uint64_t file_bytes, lares_error *err) {
    lares_status st = wcache_open(f->cache_dir, sha, file_bytes, f->cache_limit, &f->cache, err);
    if (st == LARES_EFORMAT) {
        /* a damaged entry is fetched again, never used */
        lares_log(LARES_LOG_WARN, "ring: %s: the entry is dropped and fetched again",
                  err != NULL ? err->msg : "damaged weight cache entry");
        say(f, "the cache entry of this model is damaged: dropped, fetching again");
        st = wcache_remove_model(f->cache_dir, sha, err);
        if (st == LARES_OK) {
            st = wcache_open(f->cache_dir, sha, file_bytes, f->cache_limit, &f->cache, err);
        }
    }
    return st;
}

lares_status api_fetch_model(api_fetch *f, uint64_t file_bytes, char *path, size_t cap,
                             lares_error *err) {
    if (f->link == NULL || f->cache_dir == NULL) {
        return lares_fail(err, LARES_EINVAL, "no weight cache to fetch the model into");
    }
    cluster_tensor_data d;
    lares_status st = ask_hash(f, 0, &d, err);
    if (st != LARES_OK) {
        return st;
    }
    if (d.item_bytes == 0 || d.item_bytes > file_bytes) {
        return lares_fail(err, LARES_EPROTO, "the head's model header is %" PRIu64
                          " bytes of a %" PRIu64 "-byte file", d.item_bytes, file_bytes);
    }
    if (f->cache == NULL || memcmp(d.sha256, f->model_sha, WCACHE_SHA256_BYTES) != 0) {
        wcache_close(f->cache);
        f->cache = NULL;
        forget_items(f);
        memcpy(f->model_sha, d.sha256, WCACHE_SHA256_BYTES);
        st = open_entry(f, d.sha256, file_bytes, err);
        if (st != LARES_OK) {
            return st;
        }
    }
    if (wcache_n_items(f->cache) == 0) {
        const uint64_t off = 0, bytes = d.item_bytes;
        st = wcache_set_items(f->cache, 1, &off, &bytes, err);
    }
    if (st == LARES_OK && wcache_item_bytes(f->cache, 0) != d.item_bytes) {
        st = lares_fail(err, LARES_EFORMAT, "weight cache: the header's size changed");
    }
    uint8_t have_sha[WCACHE_SHA256_BYTES];
    const bool done = st == LARES_OK && wcache_done(f->cache, 0, have_sha) &&
                      memcmp(have_sha, d.sha256, WCACHE_SHA256_BYTES) == 0;
    lares_error verr = {0};
    if (st == LARES_OK && done && (f->n_items > 0 ||
                                   wcache_verify(f->cache, 0, d.sha256, &verr) == LARES_OK)) {
        /* the header is here (checked against the file once per process) */
    } else if (st == LARES_OK) {
        if (wcache_done(f->cache, 0, NULL) && !done) {
            wcache_forget(f->cache, 0); /* not the head's header */
        }
        if (verr.msg[0] != '\0') {
            lares_log(LARES_LOG_WARN, "ring: %s; fetching it again", verr.msg);
        }
        /* the header alone, as a one-item transfer */
        bool one = true;
        f->n_items = 1;
        bool v = false;
        uint8_t hs[1][WCACHE_SHA256_BYTES];
        memcpy(hs[0], d.sha256, WCACHE_SHA256_BYTES);
        bool *sv = f->verified;
        uint8_t(*sh)[WCACHE_SHA256_BYTES] = f->head_sha;
        f->verified = &v;
        f->head_sha = hs;
        f->cached_bytes = 0;
        st = transfer(f, "the model's header", &one, d.item_bytes - wcache_have(f->cache, 0),
                      lares_now_ns(), err);
        f->verified = sv;
        f->head_sha = sh;
        forget_items(f);
    }
    if (st == LARES_OK && f->n_items == 0) {
        st = set_items(f, wcache_file(f->cache), err);
    }
    if (st == LARES_OK) {
        wcache_touch(f->cache, 0);
        snprintf(path, cap, "%s", wcache_file(f->cache));
    }
    return st;
}

/* ---- what a device's windows read ---- */

static bool outside_layers_needed(const char *name) {
    return strcmp(name, "token_embd.weight") != 0 && strcmp(name, "output.weight") != 0 &&
           strcmp(name, "output_norm.weight") != 0 && strcmp(name, "output_norm.bias") != 0;
}

lares_status api_fetch_need(const gguf_file *g, const exec_window *w, int32_t n_windows,
                            bool **need, uint32_t *n_items, lares_error *err) {
    const uint64_t nt = gguf_n_tensors(g);
    bool *v = lares_calloc((size_t)nt + 1, sizeof *v);
    if (v == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    for (uint64_t i = 0; i < nt; i++) {
        const char *name = gguf_tensor_at(g, i)->name;
        if (strncmp(name, "blk.", 4) != 0) {
            v[i + 1] = outside_layers_needed(name);
            continue;
        }
        const long layer = strtol(name + 4, NULL, 10);
        for (int32_t j = 0; j < n_windows; j++) {
            v[i + 1] = v[i + 1] || (layer >= w[j].l0 && layer < w[j].l1);
        }
    }
    *need = v;
    *n_items = (uint32_t)nt + 1;
    return LARES_OK;
}

lares_status api_fetch_items(api_fetch *f, const bool *need, uint64_t *fetched, lares_error *err) {
    *fetched = 0;
    f->fetched_bytes = f->cached_bytes = 0;
    if (f->cache == NULL || f->n_items == 0) {
        return lares_fail(err, LARES_EINVAL, "no model in the weight cache");
    }
    /* The head's hashes of what the cache holds some of, all asked at once,
     * to check it; an item not held at all gets its hash with its first
     * chunk, so the head hashes it as the transfer reaches it (while the
     * chunks already asked for travel) rather than all before the first. */
    const uint64_t t0 = lares_now_ns();
    lares_status st = LARES_OK;
    for (uint32_t i = 1; i < f->n_items && st == LARES_OK; i++) {
        if (need[i] && !f->head_known[i] && held_some(f, i)) {
            const cluster_tensor_get g = {.item = i};
            st = cluster_ship_send(f->link, &g, err);
        }
    }
    for (uint32_t i = 1; i < f->n_items && st == LARES_OK; i++) {
        if (need[i] && !f->head_known[i] && held_some(f, i)) {
            cluster_tensor_data d;
            st = recv_answer(f, i, 0, 0, &d, err);
            if (st == LARES_OK && d.item_bytes != wcache_item_bytes(f->cache, i)) {
                st = lares_fail(err, LARES_EPROTO,
                                "item %u is %" PRIu64 " bytes on the head, %" PRIu64
                                " in its header",
                                i, d.item_bytes, wcache_item_bytes(f->cache, i));
            }
            if (st == LARES_OK) {
                memcpy(f->head_sha[i], d.sha256, WCACHE_SHA256_BYTES);
                f->head_known[i] = true;
            }
        }
    }
    /* what the cache holds: the same hash, read back once per process */
    uint64_t missing = 0;
    for (uint32_t i = 1; i < f->n_items && st == LARES_OK; i++) {
        if (!need[i]) {
            continue;
        }
        uint8_t sha[WCACHE_SHA256_BYTES];
        if (f->head_known[i] && wcache_done(f->cache, i, sha)) {
            if (memcmp(sha, f->head_sha[i], WCACHE_SHA256_BYTES) != 0) {
                wcache_forget(f->cache, i); /* the head's file changed */
                f->verified[i] = false;
            } else if (!f->verified[i]) {
                lares_error verr = {0};
                if (wcache_verify(f->cache, i, f->head_sha[i], &verr) == LARES_OK) {
                    f->verified[i] = true;
                } else if (verr.code == LARES_EFORMAT) {
                    lares_log(LARES_LOG_WARN, "ring: %s; fetching it again", verr.msg);
                    say(f, "a cached tensor was damaged (hash mismatch): fetching it again");
                } else {
                    st = lares_fail(err, verr.code, "%s", verr.msg);
                }
            }
        }
        if (st == LARES_OK) {
            wcache_touch(f->cache, i);
            const uint64_t have = wcache_have(f->cache, i);
            missing += wcache_item_bytes(f->cache, i) - have;
            f->cached_bytes += wcache_done(f->cache, i, NULL) ? have : 0;
        }
    }
    if (st == LARES_OK && missing > 0) {
        st = wcache_reserve(f->cache, missing, need, err);
        if (st == LARES_OK) {
            say(f, "fetching %.1f MiB of weights from the head (%.1f MiB in the cache)",
                mib(missing), mib(f->cached_bytes));
            st = transfer(f, "weights", need, missing, t0, err);
            *fetched = f->fetched_bytes;
        }
    } else if (st == LARES_OK) {
        lares_error serr = {0};
        if (wcache_sync(f->cache, &serr) != LARES_OK) {
            lares_log(LARES_LOG_WARN, "ring: %s", serr.msg);
        }
    }
    return st;
}

void api_fetch_close(api_fetch *f) {
    if (f == NULL) {
        return;
    }
    wcache_close(f->cache);
    f->cache = NULL;
    forget_items(f);
}

lares_status ring_ship_source(const gguf_file *g, cluster_ship_source *out, uint64_t **off,
                              uint64_t **bytes, lares_error *err) {
    *out = (cluster_ship_source){0};
    *off = *bytes = NULL;
    uint32_t n = 0;
    lares_status st = gguf_base(g) != NULL ? item_table(g, off, bytes, &n, err) : LARES_OK;
    if (st == LARES_OK && n > 0) {
        *out = (cluster_ship_source){.base = gguf_base(g),
                                     .file_bytes = gguf_file_bytes(g),
                                     .n_items = n,
                                     .off = *off,
                                     .bytes = *bytes};
    }
    return st;
}
