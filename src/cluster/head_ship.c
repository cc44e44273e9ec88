/*
 * The head ships the model to workers without the file (issue 19,
 * docs/ring.md "Workers without the model file"): its network thread answers
 * each TENSOR_GET with one TENSOR_DATA of at most CLUSTER_MAX_CHUNK bytes,
 * read from the mapped model file, with the item's SHA-256 (computed the
 * first time an item is asked for, then kept). The worker drives: it asks for
 * what it lacks, a few chunks in flight, so a broken transfer resumes where
 * the worker's cache stopped.
 *
 * While a device is being shipped, the session is told now and then (the
 * TENSOR_GET itself on the pipe), so its waits for READY or WELCOME count
 * from the last chunk, not from the start: a transfer of minutes is no
 * silence. Progress is logged at info level once a second per device.
 */
#include "cluster/head_impl.h"
#include "wcache/wcache.h"

#define SHIP_LOG_NS  1000000000u
#define SHIP_NOTE_NS 200000000u

lares_status head_ship_init(head_io *io, const cluster_ship_source *src, lares_error *err) {
    if (src == NULL || src->base == NULL || src->n_items == 0) {
        return LARES_OK;
    }
    const uint32_t n = src->n_items;
    io->ship_off = lares_alloc_array(n, sizeof *io->ship_off);
    io->ship_bytes = lares_alloc_array(n, sizeof *io->ship_bytes);
    io->ship_sha = lares_alloc_array(n, sizeof *io->ship_sha);
    io->ship_hashed = lares_calloc(n, sizeof *io->ship_hashed);
    io->ship_buf = lares_alloc(cluster_tensor_data_bytes(CLUSTER_MAX_CHUNK));
    io->ship_frame = lares_calloc(1, sizeof *io->ship_frame);
    if (io->ship_off == NULL || io->ship_bytes == NULL || io->ship_sha == NULL ||
        io->ship_hashed == NULL || io->ship_buf == NULL || io->ship_frame == NULL) {
        head_ship_free(io);
        return lares_fail(err, LARES_ENOMEM, "out of memory for the shipping tables");
    }
    for (uint32_t i = 0; i < n; i++) {
        if (src->off[i] > src->file_bytes || src->bytes[i] > src->file_bytes - src->off[i]) {
            head_ship_free(io);
            return lares_fail(err, LARES_EINVAL, "ring: item %u lies past the model file", i);
        }
        io->ship_off[i] = src->off[i];
        io->ship_bytes[i] = src->bytes[i];
    }
    io->ship_n = n;
    io->ship_base = src->base;
    return LARES_OK;
}

void head_ship_free(head_io *io) {
    lares_free(io->ship_off);
    lares_free(io->ship_bytes);
    lares_free(io->ship_sha);
    lares_free(io->ship_hashed);
    lares_free(io->ship_buf);
    lares_free(io->ship_frame);
    io->ship_off = io->ship_bytes = NULL;
    io->ship_sha = NULL;
    io->ship_hashed = NULL;
    io->ship_buf = NULL;
    io->ship_frame = NULL;
    io->ship_base = NULL;
    io->ship_n = 0;
}

static void ship_progress(head_io *io, int32_t dev, uint64_t now, uint32_t sent) {
    const uint64_t total = atomic_fetch_add(&io->shipped[dev], sent) + sent;
    if (io->ship_t0[dev] == 0 || now - io->ship_last_ns[dev] > 5 * SHIP_LOG_NS) {
        io->ship_t0[dev] = now; /* a new transfer (or one resumed after a pause) */
        io->ship_base_bytes[dev] = total - sent;
        io->ship_log_ns[dev] = now;
    }
    io->ship_last_ns[dev] = now;
    if (now - io->ship_log_ns[dev] >= SHIP_LOG_NS) {
        io->ship_log_ns[dev] = now;
        const double s = (double)(now - io->ship_t0[dev]) / 1e9;
        const double mib = (double)(total - io->ship_base_bytes[dev]) / 1048576.0;
        lares_log(LARES_LOG_INFO,
                  "cluster: shipping weights to device %d: %.1f MiB in %.1f s (%.1f MiB/s), "
                  "%.1f MiB in all",
                  dev, mib, s, s > 0 ? mib / s : 0.0, (double)total / 1048576.0);
    }
}

void head_ship_serve(head_io *io, int32_t dev, const uint8_t *f, size_t len, uint64_t now) {
    lares_error err = {0};
    cluster_tensor_data d = {0};
    bool decoded = false;
    if (io->ship_frame == NULL) {
        d.status = LARES_EUNSUPPORTED; /* this head ships nothing */
    } else if (cluster_frame_decode(f, len, io->ship_frame, &err) != LARES_OK) {
        d.status = (uint32_t)err.code;
    } else {
        decoded = true;
        const cluster_tensor_get *g = &io->ship_frame->u.tensor_get;
        d.item = g->item;
        if (g->item >= io->ship_n) {
            d.status = LARES_ENOTFOUND;
        } else if (g->offset > io->ship_bytes[g->item] ||
                   g->length > io->ship_bytes[g->item] - g->offset) {
            d.status = LARES_ERANGE;
        } else {
            const uint8_t *p = io->ship_base + io->ship_off[g->item];
            if (!io->ship_hashed[g->item]) {
                io->ship_hashed[g->item] =
                    wcache_sha256_of(p, (size_t)io->ship_bytes[g->item], io->ship_sha[g->item]);
            }
            if (!io->ship_hashed[g->item]) {
                d.status = LARES_ENOMEM;
            } else {
                d.item_bytes = io->ship_bytes[g->item];
                d.offset = g->offset;
                d.length = g->length;
                d.data = p + g->offset;
                memcpy(d.sha256, io->ship_sha[g->item], CLUSTER_SHA256_BYTES);
            }
        }
    }
    uint8_t small[256];
    uint8_t *buf = io->ship_buf != NULL ? io->ship_buf : small;
    const size_t cap = io->ship_buf != NULL ? cluster_tensor_data_bytes(CLUSTER_MAX_CHUNK)
                                            : sizeof small;
    const size_t n = cluster_encode_tensor_data(buf, cap, &d);
    if (n == 0 || net_outbox_send(&io->out, io->delay_ms, io->dealer[dev], NULL, 0, buf, n) != 0) {
        lares_log(LARES_LOG_WARN, "cluster: cannot ship a chunk to device %d: %s", dev,
                  n == 0 ? "it does not encode" : zmq_strerror(zmq_errno()));
        return;
    }
    if (d.status == 0 && d.length > 0) {
        ship_progress(io, dev, now, d.length);
    }
    /* the session's waits count from the last chunk (head_impl.h) */
    if (decoded && now - io->ship_note_ns[dev] >= SHIP_NOTE_NS) {
        io->ship_note_ns[dev] = now;
        uint8_t dd[4];
        wr_u32le(dd, (uint32_t)dev);
        net_pipe_send(io->pipe, dd, 4, ZMQ_SNDMORE);
        net_pipe_send(io->pipe, f, len, 0);
    }
}
