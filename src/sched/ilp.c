/*
 * One integer linear program of Halda (scheduling.md): for a fixed number of
 * rounds k, a fixed set of devices in ring order and a fixed memory case per
 * device, choose w_m (layers per window) and n_m (of which on the GPU) to
 * minimise the token latency T of the latency model (eval.c), linearised
 * with the mean layer (a_m, g_m: seconds per CPU / GPU layer; b' the mean
 * bytes of a layer with its KV; x_m = w_m - n_m its RAM layers, w_m with
 * Metal):
 *
 *   T >= sum_m [ c_m + k g_m n_m + z_m ] + k hops + kappa       (the chain)
 *     c_m = k a_m x_m without a quota; with one (u_m of a core per period P):
 *     c_m >= k a_m x_m and c_m >= k (a_m x_m / u_m - P (1 - u_m)) (bursts)
 *   T >= (k a_m x_m + kappa + rc_m R_m) / u_m                  (a quota's share;
 *                                                   rc_m: read CPU per byte)
 *   overflowing m: R_m = k b' x_m - pin_m streamed bytes (pin_m = RAM - slack
 *     - window, what stays resident), read at s_m;
 *     z_m >= R_m / s_m - k a_m (x_m - 1) - k g_m n_m - k V_m / s_m
 *                                                  (the wait after overlap)
 *     T >= R_m / s_m + (c_m - k a_m x_m)              (its disk busy)
 * subject to
 *   sum_m w_m = W = L / k,  1 <= w_m,  0 <= n_m <= w_m,  k n_m b' <= VRAM_m (**),
 *   fits:     k (w_m - n_m) b' <= RAM_m    (Metal: k w_m b' <= RAM_m)
 *   overflow: k (w_m - n_m) b' >  RAM_m    (so the case is honest)
 *   KV:       k (w_m - n_m) kv <= RAM_m    (the cache cannot be re-read from disk)
 *   storage:  k w_m b <= RAM_m + disk_m    (*, when the device states its free disk)
 * (*) b there is that of the heaviest layers, so that whichever layers the
 *     windows get, the plan validates;
 * (**) with the mean b' first; when the real layers of the solution do not fit,
 *     the device's bound is lowered by one and the program solved again.
 * Because w and n are integers, every memory row is an integer bound on
 * w_m - n_m (or w_m), which keeps GLPK's numbers small and exact. Halda then
 * prices each solution with the layer-by-layer model and keeps the best.
 */
#include "sched/sched_impl.h"

#include <glpk.h>
#include <math.h>
#include <setjmp.h>

static int32_t floor_div(double num, double den, int32_t cap) {
    if (!(den > 0)) {
        return cap;
    }
    double q = floor(num / den);
    return q >= (double)cap ? cap : (int32_t)q;
}

sched_wrange sched_range_of(const sched_costs *c, size_t d, size_t head, int32_t k, bool overflow) {
    const sched_device *dv = &c->devs[d];
    const int32_t W = c->L / k;
    const double ram = (double)sched_ram_of(c, d, head);
    sched_wrange r;
    r.F = floor_div(ram, (double)k * c->avg_bp, W + 1);
    r.kvcap = c->kv_bytes > 0 ? floor_div(ram, (double)k * (double)c->kv_bytes, W) : W;
    /* GPU layers: by the mean layer, less what a solution's real (heavier)
     * layers showed to be too many (gpu_trim, halda.c) */
    r.nmax = 0;
    if (dv->gpu != SCHED_GPU_NONE) {
        r.nmax = floor_div((double)c->vram_limit[d], (double)k * c->avg_bp, W) - c->gpu_trim[d];
        r.nmax = r.nmax < 0 ? 0 : r.nmax;
    }
    /* stored weights, a hard limit too: counted with the heaviest layers, so
     * whichever k * w layers a device gets fit */
    int32_t wmax = W;
    if (dv->disk_free_bytes >= 0) {
        uint64_t room = sched_ram_of(c, d, head) + (uint64_t)dv->disk_free_bytes;
        wmax = LARES_MIN(W, sched_most_layers(c->b_heavy, c->L, room) / k);
    }
    if (sched_unified(dv)) {
        if (!overflow) {
            r.lo = 1;
            r.hi = LARES_MIN(wmax, LARES_MIN(r.F, r.kvcap));
        } else {
            r.lo = LARES_MAX(1, r.F + 1);
            r.hi = LARES_MIN(wmax, r.kvcap);
        }
        return r;
    }
    if (!overflow) {
        r.lo = 1;
        r.hi = LARES_MIN(wmax, LARES_MIN(r.F, r.kvcap) + r.nmax);
    } else if (r.F + 1 <= r.kvcap) {
        r.lo = LARES_MAX(1, r.F + 1);
        r.hi = LARES_MIN(wmax, r.kvcap + r.nmax);
    } else {
        r.lo = 1;
        r.hi = 0; /* its RAM holds every layer whose KV it can hold: never overflows */
    }
    return r;
}

typedef struct glpk_guard {
    jmp_buf jb;
} glpk_guard;

/* GLPK reports its own internal errors by calling this and then abort():
 * jumping out keeps the process alive; the environment is freed after. */
static void on_glpk_error(void *info) {
    glpk_guard *g = info;
    longjmp(g->jb, 1);
}

/* Column numbers of device i: w, n, z (disk wait), c (throttled compute); T last. */
#define COL_W(i) ((int)(4 * (i) + 1))
#define COL_N(i) ((int)(4 * (i) + 2))
#define COL_Z(i) ((int)(4 * (i) + 3))
#define COL_C(i) ((int)(4 * (i) + 4))

/* tie-break: among plans of equal T (a bound binds), the one with the least
 * chain time, so that a slack bound does not hide waiting */
#define CHAIN_WEIGHT 1e-3

/* The constraint matrix in GLPK's triplet form (1-based). It lives on the
 * heap: the solve runs under setjmp, and a local changed after it would be
 * indeterminate after GLPK's error hook jumps back. */
typedef struct rows {
    int *ia, *ja;
    double *ar;
    int ne, cap;
    bool oom; /* a coefficient could not be stored: the solve fails */
} rows;

static bool rows_reserve(rows *r, int cap) {
    int *ia = lares_realloc(r->ia, ((size_t)cap + 1) * sizeof *ia);
    if (ia != NULL) {
        r->ia = ia;
    }
    int *ja = lares_realloc(r->ja, ((size_t)cap + 1) * sizeof *ja);
    if (ja != NULL) {
        r->ja = ja;
    }
    double *ar = lares_realloc(r->ar, ((size_t)cap + 1) * sizeof *ar);
    if (ar != NULL) {
        r->ar = ar;
    }
    if (ia == NULL || ja == NULL || ar == NULL) {
        return false;
    }
    r->cap = cap;
    return true;
}

static void rows_free(rows *r) {
    lares_free(r->ia);
    lares_free(r->ja);
    lares_free(r->ar);
    lares_free(r);
}

/* Adds v to the coefficient at (row, col): GLPK refuses duplicate entries.
 * The arrays grow when full; a coefficient is never dropped silently (when
 * they cannot grow, r->oom fails the solve). */
static void put(rows *r, int row, int col, double v) {
    for (int e = 1; e <= r->ne; e++) {
        if (r->ia[e] == row && r->ja[e] == col) {
            r->ar[e] += v;
            return;
        }
    }
    if (v == 0) {
        return;
    }
    if (r->ne == r->cap && (r->cap > INT32_MAX / 2 || !rows_reserve(r, r->cap * 2))) {
        r->oom = true;
        return;
    }
    r->ne++;
    r->ia[r->ne] = row;
    r->ja[r->ne] = col;
    r->ar[r->ne] = v;
}

lares_status sched_ilp_solve(sched_ilp *p, lares_error *err) {
    const sched_costs *c = p->c;
    const int32_t k = p->k, W = c->L / k;
    const size_t n = p->n;
    const double bp = c->avg_bp;
    if (W < (int32_t)n) {
        return lares_fail(err, LARES_ERANGE, "%zu devices cannot share %d layers per round", n, W);
    }
    rows *const r = lares_calloc(1, sizeof *r);
    /* a small start on purpose: every solve grows the arrays, so the solver
     * tests exercise the growth that keeps each coefficient */
    if (r == NULL || !rows_reserve(r, (int)(4 * n + 8))) {
        if (r != NULL) {
            rows_free(r);
        }
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    volatile lares_status st = LARES_OK;
    glp_prob *volatile lp = NULL;
    glpk_guard guard;
    if (setjmp(guard.jb) != 0) {
        glp_error_hook(NULL, NULL);
        glp_free_env();
        rows_free(r);
        return lares_fail(err, LARES_EUNSUPPORTED, "glpk failed on a %zu-device problem", n);
    }
    glp_error_hook(on_glpk_error, &guard);
    glp_term_out(GLP_OFF);
    lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MIN);
    const int colT = (int)(4 * n + 1);
    glp_add_cols(lp, colT);
    glp_set_col_bnds(lp, colT, GLP_LO, 0, 0);
    glp_set_obj_coef(lp, colT, 1.0);
    /* row 1: sum w = W; row 2: the chain T >= sum (compute + GPU + wait) + hops + kappa */
    int row = glp_add_rows(lp, 2);
    const int rsum = row, rchain = row + 1;
    glp_set_row_bnds(lp, rsum, GLP_FX, W, W);
    const size_t head = p->head;
    const double kappa = c->t_head[head];
    glp_set_row_bnds(lp, rchain, GLP_LO, (double)k * p->hops_s + sched_quota_wall(c, head, kappa),
                     0);
    put(r, rchain, colT, 1);
    for (size_t i = 0; i < n; i++) {
        const size_t d = p->d[i].device;
        const sched_device *dv = &c->devs[d];
        const bool ov = p->d[i].overflow;
        const bool uni = sched_unified(dv);
        const int cw = COL_W(i), cn = COL_N(i), cz = COL_Z(i), cc = COL_C(i);
        sched_wrange wr = sched_range_of(c, d, head, k, ov);
        if (wr.lo > wr.hi) {
            st = lares_fail(err, LARES_ERANGE, "device '%s' has no feasible window at k=%d",
                            dv->name, k);
            goto done;
        }
        const double a = c->avg_tc[d], g = c->avg_tg[d];
        const double u = c->quota_u[d], P = c->quota_P[d];
        const bool quota = u < 1;
        int share_row = -1;
        glp_set_col_kind(lp, cw, GLP_IV);
        glp_set_col_kind(lp, cn, GLP_IV);
        if (wr.lo == wr.hi) {
            glp_set_col_bnds(lp, cw, GLP_FX, wr.lo, wr.lo);
        } else {
            glp_set_col_bnds(lp, cw, GLP_DB, wr.lo, wr.hi);
        }
        if (wr.nmax > 0) {
            glp_set_col_bnds(lp, cn, GLP_DB, 0, wr.nmax);
        } else {
            glp_set_col_bnds(lp, cn, GLP_FX, 0, 0);
        }
        glp_set_col_bnds(lp, cz, ov ? GLP_LO : GLP_FX, 0, 0);
        glp_set_col_bnds(lp, cc, quota ? GLP_LO : GLP_FX, 0, 0);
        put(r, rsum, cw, 1);
        /* chain: compute (throttled: c; else k a (w - n)), GPU k g n, wait z */
        if (quota) {
            put(r, rchain, cc, -1);
            glp_set_obj_coef(lp, cc, CHAIN_WEIGHT);
        } else {
            put(r, rchain, cw, -(double)k * a);
            put(r, rchain, cn, (double)k * a);
            glp_set_obj_coef(lp, cw, CHAIN_WEIGHT * k * a);
            glp_set_obj_coef(lp, cn, CHAIN_WEIGHT * k * (g - a));
        }
        put(r, rchain, cn, -(double)k * g);
        put(r, rchain, cz, -1);
        if (quota) {
            glp_set_obj_coef(lp, cn, CHAIN_WEIGHT * k * g);
        }
        glp_set_obj_coef(lp, cz, CHAIN_WEIGHT);
        /* n - w <= 0 */
        row = glp_add_rows(lp, 1);
        glp_set_row_bnds(lp, row, GLP_UP, 0, 0);
        put(r, row, cn, 1);
        put(r, row, cw, -1);
        /* the case and the KV cache: bounds on the RAM share w - n (w for Metal,
         * whose column bounds already carry them) */
        row = glp_add_rows(lp, 1);
        if (uni) {
            glp_set_row_bnds(lp, row, GLP_FR, 0, 0);
        } else if (!ov) {
            glp_set_row_bnds(lp, row, GLP_UP, 0, LARES_MIN(wr.F, wr.kvcap));
        } else if (wr.F + 1 == wr.kvcap) {
            glp_set_row_bnds(lp, row, GLP_FX, wr.kvcap, wr.kvcap);
        } else {
            glp_set_row_bnds(lp, row, GLP_DB, wr.F + 1, wr.kvcap);
        }
        put(r, row, cw, 1);
        put(r, row, cn, -1);
        if (quota) {
            /* bursts of b = (w - n) a per window: c >= k b, c >= k (b/u - P(1-u)) */
            row = glp_add_rows(lp, 2);
            glp_set_row_bnds(lp, row, GLP_LO, 0, 0);
            put(r, row, cc, 1);
            put(r, row, cw, -(double)k * a);
            put(r, row, cn, (double)k * a);
            glp_set_row_bnds(lp, row + 1, GLP_LO, -(double)k * P * (1 - u), 0);
            put(r, row + 1, cc, 1);
            put(r, row + 1, cw, -(double)k * a / u);
            put(r, row + 1, cn, (double)k * a / u);
            /* its long-run share: T >= (k a (w - n) + kappa [+ R rc]) / u, rc the
             * prefetch thread's CPU per byte (added below when m streams) */
            row = glp_add_rows(lp, 1);
            share_row = row;
            glp_set_row_bnds(lp, row, GLP_LO, d == head ? kappa / u : 0, 0);
            put(r, row, colT, 1);
            put(r, row, cw, -(double)k * a / u);
            put(r, row, cn, (double)k * a / u);
        }
        if (ov) {
            /* streamed bytes R = k b' x - (RAM - S - V), x = w - n (w with Metal):
             * z >= R/s - own - k V/s, own = k a (w - n - 1) + k g n;
             * T >= R/s + (c - k a (w - n)) (its disk busy, not while throttled) */
            const double s = c->disk_Bps[d];
            const double ram = (double)sched_ram_of(c, d, head);
            const double per = c->o->stream_window_units > 0 ? c->o->stream_window_units : 2;
            const double V = per * (double)c->part_max; /* the executor's units: parts */
            const double S = (double)c->o->stream_slack_bytes;
            const double keep = ram - S - V; /* what stays pinned (may be < 0: then 0) */
            const double pin = keep > 0 ? keep : 0;
            const double rb = (double)k * bp / s;
            row = glp_add_rows(lp, 2);
            glp_set_row_bnds(lp, row, GLP_LO, (double)k * a - (double)k * V / s - pin / s, 0);
            put(r, row, cz, 1);
            put(r, row, cw, (double)k * a - rb);
            put(r, row, cn, uni ? -(double)k * a + (double)k * g : -(double)k * a + rb + k * g);
            glp_set_row_bnds(lp, row + 1, GLP_LO, -pin / s, 0);
            put(r, row + 1, colT, 1);
            put(r, row + 1, cw, -rb);
            if (!uni) {
                put(r, row + 1, cn, rb);
            }
            if (quota) {
                put(r, row + 1, cc, -1);
                put(r, row + 1, cw, (double)k * a);
                put(r, row + 1, cn, -(double)k * a);
            }
            const double rc = c->read_cpu[d];
            if (share_row > 0 && rc > 0) {
                glp_set_row_bnds(lp, share_row, GLP_LO, (d == head ? kappa / u : 0) - rc * pin / u,
                                 0);
                put(r, share_row, cw, -rc * (double)k * bp / u);
                if (!uni) {
                    put(r, share_row, cn, rc * (double)k * bp / u);
                }
            }
        }
    }
    if (r->oom) {
        st = lares_fail(err, LARES_ENOMEM, "out of memory for the %zu-device problem", n);
        goto done;
    }
    glp_load_matrix(lp, r->ne, r->ia, r->ja, r->ar);
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.presolve = GLP_ON;
    parm.msg_lev = GLP_MSG_OFF;
    parm.tm_lim = 10000; /* ms; these problems take well under one */
    int ret = glp_intopt(lp, &parm);
    int status = glp_mip_status(lp);
    if (ret == GLP_ENOPFS || ret == GLP_ENODFS || status == GLP_NOFEAS) {
        st = lares_fail(err, LARES_ERANGE, "no feasible assignment at k=%d", k);
        goto done;
    }
    if (ret != 0 || (status != GLP_OPT && status != GLP_FEAS)) {
        st = lares_fail(err, LARES_EUNSUPPORTED, "glpk: intopt returned %d (status %d) at k=%d",
                        ret, status, k);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        p->d[i].w = (int32_t)lround(glp_mip_col_val(lp, COL_W(i)));
        p->d[i].n = (int32_t)lround(glp_mip_col_val(lp, COL_N(i)));
    }
    p->objective = glp_mip_col_val(lp, colT);
done:
    glp_delete_prob(lp);
    glp_error_hook(NULL, NULL);
    rows_free(r);
    return st;
}
