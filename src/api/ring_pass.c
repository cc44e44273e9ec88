/*
 * One pass of the ring: the head runs its own windows through its executor
 * and sends the hidden states around the ring between them, under the plan in
 * force. The head's forward (ring_head.c) and a plan switch that re-runs lost
 * layers (ring_switch.c) both drive it, so it stands apart from either.
 */
#include "api/ring.h"

lares_status ring_pass(lares_session *s, int32_t nb, int32_t end, lares_error *err) {
    api_ring *r = s->ring;
    const cluster_plan *p = cluster_head_plan(r->head);
    lares_status st = LARES_OK;
    int32_t layer = 0;
    while (layer < end) {
        int32_t dev, round, l0, l1;
        if (cluster_plan_owner(p, layer, &dev, &round) && dev == 0) {
            cluster_plan_window(p, 0, round, &l0, &l1);
            /* layers the head gained in a re-plan run outside its executor's
             * cycle: unmanaged (plain mmap) when it streams, see docs/ring.md */
            exec_counters c0, c1;
            exec_local_counters(s->exec, &c0);
            const uint64_t t0 = lares_now_ns();
            st = exec_local_forward(s->exec, l0, l1, s->pos, nb, s->x, err);
            const uint64_t t1 = lares_now_ns();
            exec_local_counters(s->exec, &c1);
            cluster_head_add_local(r->head, l1 - l0, nb, (t1 - t0) / 1000u,
                                   (c1.wait_ns - c0.wait_ns) / 1000u);
            if (st != LARES_OK) {
                return st;
            }
            for (int32_t l = l0; l < l1; l++) {
                ring_mirror_note(r, l, s->pos[0], nb); /* the head's own rows are its copy */
            }
            layer = l1;
            if (layer >= end) {
                break;
            }
        }
        uint64_t seq;
        st = cluster_head_send(r->head, layer, end, s->pos, nb, s->x, &seq, err);
        if (st == LARES_OK) {
            st = cluster_head_recv(r->head, seq, nb, s->x, &layer, &s->cancel, err);
        }
        if (st != LARES_OK) {
            return st;
        }
    }
    return LARES_OK;
}
