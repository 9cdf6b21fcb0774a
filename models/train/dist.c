/* Data-parallel training, the part that is the same with and without MPI:
 * shares and seeds per rank, the module wrappers and ZeRO-1's global checks.
 * meson builds one backend beside it (the `mpi` option): dist_mpi.c and
 * dist_reducer.c with MPI, dist_single.c without. See dist.h. */
#include "models/train/dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/parse.h"

bool cg_dist_is_root(void) { return cg_dist_rank() == 0; }

bool cg_dist_share(int64_t n, int64_t *lo, int64_t *hi)
{
    *lo = n * cg_dist_rank() / cg_dist_size();
    *hi = n * (cg_dist_rank() + 1) / cg_dist_size();
    return n >= cg_dist_size();
}

uint64_t cg_dist_seed_for_rank(uint64_t seed, int rank)
{
    return seed ^ ((uint64_t)rank * 0x9E3779B97F4A7C15ULL);
}

uint64_t cg_dist_rank_seed(uint64_t seed) { return cg_dist_seed_for_rank(seed, cg_dist_rank()); }

/* Parameter tensors of a module, in cg_module_params() order (malloc'd). */
static cg_tensor **module_tensors(cg_module *m, int *n)
{
    *n = 0;
    if (!m) {
        cg_set_error("dist: module is NULL");
        return NULL;
    }
    cg_param_list l = {0};
    if (!cg_module_params(m, &l))
        return NULL;
    cg_tensor **ts = malloc((size_t)(l.n > 0 ? l.n : 1) * sizeof *ts);
    if (!ts) {
        cg_param_list_free(&l);
        cg_set_error("dist: out of memory");
        return NULL;
    }
    for (int i = 0; i < l.n; i++)
        ts[i] = l.items[i].tensor;
    *n = l.n;
    cg_param_list_free(&l);
    return ts;
}

/* ------------------------------------------------ module wrappers */
bool cg_dist_broadcast_module(cg_module *m)
{
    int n = 0;
    cg_tensor **ts = module_tensors(m, &n);
    if (!ts)
        return false;
    bool ok = cg_dist_broadcast_tensors(n, ts);
    free(ts);
    return ok;
}

bool cg_dist_average_grads(cg_module *m, double weight)
{
    int n = 0;
    cg_tensor **ts = module_tensors(m, &n);
    if (!ts)
        return false;
    bool ok = cg_dist_average_grads_tensors(n, ts, weight);
    free(ts);
    return ok;
}

/* ------------------------------------------------ ZeRO-1: global checks */
double cg_dist_clip_grad_norm(cg_optim *shard, double max_norm)
{
    if (!shard || !(max_norm >= 0)) {
        cg_set_error("dist: clip_grad_norm: %s",
                     !shard ? "optimizer is NULL" : "max_norm must be >= 0");
        return -1;
    }
    double ss = cg_optim_grad_sqsum(shard);
    /* the sum of squares and whether some rank failed, on every rank */
    double v[2] = {ss >= 0 ? ss : 0, ss < 0 ? 1 : 0};
    if (!cg_dist_allreduce_sum(v, 2))
        return -1;
    if (v[1] > 0) {
        if (ss >= 0)
            cg_set_error("dist: clip_grad_norm: another rank could not read its gradients");
        return -1;
    }
    double total = sqrt(v[0]);
    if (max_norm > 0 && !cg_optim_clip_grads_by(shard, total, max_norm))
        return -1;
    return total;
}

bool cg_dist_grads_finite(const cg_optim *shard)
{
    int n = cg_optim_count(shard), bad = -1;
    bool fine = cg_optim_grads_finite(shard, &bad);
    char mine[512] = "";
    if (!fine)
        snprintf(mine, sizeof mine, "%s", cg_last_error());
    /* the first culprit in optimizer order over all ranks: the largest n - bad */
    double first = fine ? 0 : (double)(n - bad);
    if (!cg_dist_allreduce_max(&first, 1))
        return false;
    if (first == 0)
        return true;
    int culprit = n - (int)first;
    if (!fine && bad == culprit)
        cg_set_error("%s (on rank %d)", mine, cg_dist_rank());
    else
        cg_set_error("non-finite gradient: '%s' has a NaN or Inf in another rank's shard",
                     cg_optim_param_name(shard, culprit));
    return false;
}
