/*
 * api/ring: a session as the head of a ring (ring_head.c), and the worker's
 * compute side (ring_worker.c). The cluster module does the networking; this
 * joins it with the model and the executor.
 */
#ifndef LARES_API_RING_H
#define LARES_API_RING_H

#include "api/api.h"
#include "cluster/cluster.h"

typedef struct api_ring api_ring;

/* Reads s->o.ring (ring.json), connects the workers, hands out the plan, and
 * points eo at the head's own windows (borrowed from the ring, which outlives
 * the executor). Sets s->ring. */
lares_status api_ring_open(lares_session *s, exec_opts *eo, lares_error *err);
void api_ring_free(api_ring *r);
/* Runs s->x (nb tokens at positions s->pos) through every layer: the head's
 * windows here, the others around the ring. */
lares_status api_ring_forward(lares_session *s, int32_t nb, lares_error *err);

#endif /* LARES_API_RING_H */
