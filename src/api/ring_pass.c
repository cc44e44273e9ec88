/*
 * One pass of the ring: the head runs its own windows through its executor
 * and sends the hidden states around the ring between them, under the plan in
 * force. The head's forward (ring_head.c) and a plan switch that re-runs lost
 * layers (ring_switch.c) both drive it, so it stands apart from either. A
 * pass of a batch's sequences (KV slots other than 0, issue 20) carries their
 * slots in a run table and runs the head's windows on the sequences' caches.
 */
#include "api/ring.h"

lares_status ring_pass_runs(lares_session *s, const cluster_run *runs, int32_t n_runs, int32_t end,
                            lares_error *err) {
    api_ring *r = s->ring;
    const cluster_plan *p = cluster_head_plan(r->head);
    const bool own = n_runs == 1 && runs[0].slot == 0; /* the session's: no run table */
    model_seq one; /* a pass of one run (every token of a conversation) allocates nothing */
    model_seq *seqs = n_runs == 1 ? &one : lares_alloc_array((size_t)n_runs, sizeof *seqs);
    if (seqs == NULL) {
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    int32_t nb = 0;
    for (int32_t i = 0; i < n_runs; i++) {
        seqs[i] = (model_seq){
            .kv = r->slots[runs[i].slot].kv, .row0 = nb, .n_rows = (int32_t)runs[i].rows};
        nb += (int32_t)runs[i].rows;
    }
    lares_status st = LARES_OK;
    int32_t layer = 0;
    while (layer < end && st == LARES_OK) {
        int32_t dev, round, l0, l1;
        if (cluster_plan_owner(p, layer, &dev, &round) && dev == 0) {
            cluster_plan_window(p, 0, round, &l0, &l1);
            /* layers the head gained in a re-plan run outside its executor's
             * cycle: unmanaged (plain mmap) when it streams, see docs/ring.md */
            exec_counters c0, c1;
            exec_local_counters(s->exec, &c0);
            const uint64_t t0 = lares_now_ns();
            st =
                own ? exec_local_forward(s->exec, l0, l1, s->pos, nb, s->x, err)
                    : exec_local_forward_seqs(s->exec, seqs, n_runs, l0, l1, s->pos, nb, s->x, err);
            const uint64_t t1 = lares_now_ns();
            exec_local_counters(s->exec, &c1);
            cluster_head_add_local(r->head, l1 - l0, nb, (t1 - t0) / 1000u,
                                   (c1.wait_ns - c0.wait_ns) / 1000u);
            if (st != LARES_OK) {
                break;
            }
            for (int32_t l = l0; l < l1; l++) {
                for (int32_t i = 0; i < n_runs; i++) { /* the head's own rows are its copy */
                    ring_mirror_note(r, runs[i].slot, l, s->pos[seqs[i].row0], seqs[i].n_rows);
                }
            }
            layer = l1;
            if (layer >= end) {
                break;
            }
        }
        uint64_t seq_no;
        st = own ? cluster_head_send(r->head, layer, end, s->pos, nb, s->x, &seq_no, err)
                 : cluster_head_send_runs(r->head, layer, end, runs, n_runs, s->pos, nb, s->x,
                                          &seq_no, err);
        if (st == LARES_OK) {
            st = cluster_head_recv(r->head, seq_no, nb, s->x, &layer, &s->cancel, err);
        }
    }
    if (seqs != &one) {
        lares_free(seqs);
    }
    return st;
}

lares_status ring_pass_slot(lares_session *s, uint32_t slot, int32_t nb, int32_t end,
                            lares_error *err) {
    const cluster_run run = {.slot = slot, .rows = (uint32_t)nb};
    return ring_pass_runs(s, &run, 1, end, err);
}

lares_status ring_pass(lares_session *s, int32_t nb, int32_t end, lares_error *err) {
    return ring_pass_slot(s, 0, nb, end, err);
}
