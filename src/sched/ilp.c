/*
 * One integer linear program of Halda (scheduling.md): for a fixed number of
 * rounds k, a fixed set of devices in ring order and a fixed memory case per
 * device, choose w_m (layers per window) and n_m (of which on the GPU) to
 * minimise the token latency
 *
 *   T = k * sum_m [ a_m w_m + c_m n_m + hop_m ] + const + kappa
 *
 * with, per layer and with b' the mean bytes of a layer (weights + KV):
 *   a_m = t_cpu_m                 (+ b' / s_m when m overflows: each CPU layer
 *                                   beyond what RAM holds is read from disk)
 *   c_m = t_gpu_m - t_cpu_m       (- b' / s_m when m overflows and its GPU is
 *                                   discrete: a GPU layer leaves the RAM share)
 *   const = - sum over overflowing m of RAM_m / s_m
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
 * w_m - n_m (or w_m), which keeps GLPK's numbers small and exact.
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

lares_status sched_ilp_solve(sched_ilp *p, lares_error *err) {
    const sched_costs *c = p->c;
    const int32_t k = p->k, W = c->L / k;
    const size_t n = p->n;
    const double bp = c->avg_bp;
    if (W < (int32_t)n) {
        return lares_fail(err, LARES_ERANGE, "%zu devices cannot share %d layers per round", n, W);
    }
    /* columns: w_i = 2i+1, n_i = 2i+2; rows: sum w, then per device n - w and case */
    int *ia = lares_calloc(1 + 6 * n, sizeof *ia);
    int *ja = lares_calloc(1 + 6 * n, sizeof *ja);
    double *ar = lares_calloc(1 + 6 * n, sizeof *ar);
    if (ia == NULL || ja == NULL || ar == NULL) {
        lares_free(ia);
        lares_free(ja);
        lares_free(ar);
        return lares_fail(err, LARES_ENOMEM, "out of memory");
    }
    volatile lares_status st = LARES_OK;
    glp_prob *volatile lp = NULL;
    glpk_guard guard;
    if (setjmp(guard.jb) != 0) {
        glp_error_hook(NULL, NULL);
        glp_free_env();
        lares_free(ia);
        lares_free(ja);
        lares_free(ar);
        return lares_fail(err, LARES_EUNSUPPORTED, "glpk failed on a %zu-device problem", n);
    }
    glp_error_hook(on_glpk_error, &guard);
    glp_term_out(GLP_OFF);
    lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MIN);
    glp_add_cols(lp, (int)(2 * n));
    glp_add_rows(lp, (int)(1 + 2 * n));
    glp_set_row_bnds(lp, 1, GLP_FX, W, W);
    int ne = 0;
    double constant = c->t_head[p->head] + (double)k * p->hops_s;
    for (size_t i = 0; i < n; i++) {
        const size_t d = p->d[i].device;
        const sched_device *dv = &c->devs[d];
        const bool ov = p->d[i].overflow;
        const bool uni = sched_unified(dv);
        const int cw = (int)(2 * i + 1), cn = (int)(2 * i + 2);
        const int rlink = (int)(2 + 2 * i), rcase = (int)(3 + 2 * i);
        sched_wrange r = sched_range_of(c, d, p->head, k, ov);
        if (r.lo > r.hi) {
            st = lares_fail(err, LARES_ERANGE, "device '%s' has no feasible window at k=%d",
                            dv->name, k);
            goto done;
        }
        const double ram = (double)sched_ram_of(c, d, p->head);
        const double s = c->disk_Bps[d];
        double aw = c->avg_tc[d], an = c->avg_tg[d] - c->avg_tc[d];
        if (ov) {
            aw += bp / s;
            if (!uni) {
                an -= bp / s;
            }
            constant -= ram / s;
        }
        glp_set_col_kind(lp, cw, GLP_IV);
        glp_set_col_kind(lp, cn, GLP_IV);
        if (r.lo == r.hi) {
            glp_set_col_bnds(lp, cw, GLP_FX, r.lo, r.lo);
        } else {
            glp_set_col_bnds(lp, cw, GLP_DB, r.lo, r.hi);
        }
        if (r.nmax > 0) {
            glp_set_col_bnds(lp, cn, GLP_DB, 0, r.nmax);
        } else {
            glp_set_col_bnds(lp, cn, GLP_FX, 0, 0);
        }
        glp_set_obj_coef(lp, cw, (double)k * aw);
        glp_set_obj_coef(lp, cn, (double)k * an);
        /* n - w <= 0 */
        glp_set_row_bnds(lp, rlink, GLP_UP, 0, 0);
        ne++, ia[ne] = rlink, ja[ne] = cn, ar[ne] = 1;
        ne++, ia[ne] = rlink, ja[ne] = cw, ar[ne] = -1;
        /* the case and the KV cache: bounds on the RAM share w - n (w for Metal,
         * whose column bounds already carry them) */
        if (uni) {
            glp_set_row_bnds(lp, rcase, GLP_FR, 0, 0);
        } else if (!ov) {
            glp_set_row_bnds(lp, rcase, GLP_UP, 0, LARES_MIN(r.F, r.kvcap));
        } else if (r.F + 1 == r.kvcap) {
            glp_set_row_bnds(lp, rcase, GLP_FX, r.kvcap, r.kvcap);
        } else {
            glp_set_row_bnds(lp, rcase, GLP_DB, r.F + 1, r.kvcap);
        }
        ne++, ia[ne] = rcase, ja[ne] = cw, ar[ne] = 1;
        ne++, ia[ne] = rcase, ja[ne] = cn, ar[ne] = -1;
        ne++, ia[ne] = 1, ja[ne] = cw, ar[ne] = 1;
    }
    glp_set_obj_coef(lp, 0, constant);
    glp_load_matrix(lp, ne, ia, ja, ar);
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
        p->d[i].w = (int32_t)lround(glp_mip_col_val(lp, (int)(2 * i + 1)));
        p->d[i].n = (int32_t)lround(glp_mip_col_val(lp, (int)(2 * i + 2)));
    }
    p->objective = glp_mip_obj_val(lp);
done:
    glp_delete_prob(lp);
    glp_error_hook(NULL, NULL);
    lares_free(ia);
    lares_free(ja);
    lares_free(ar);
    return st;
}
