/* Data-parallel training over MPI: the reduction during backward (buckets
 * reduced while backward runs, ZeRO-1's reduce-scatter and gathers). Built
 * with meson's `mpi` option, beside dist_mpi.c. See dist.h. */
#include "models/train/dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/parse.h"

#include <mpi.h>

#include "models/train/dist_mpi.h"
#include "models/util/clock.h"

/* ------------------------------------------ reduction during backward */
/* PyTorch DDP's reducer (torch/csrc/distributed/c10d/reducer.cpp) in
 * small: parameters in reverse order (the order backward finishes them)
 * fill buckets of about bucket_mb; a bucket holds whole parameters and,
 * after them, one float per parameter saying whether this rank had a
 * gradient for it. A parameter's gradient-ready hook (autograd.h) packs it,
 * scaled by `pre`, into its bucket; a bucket whose parameters are all
 * packed starts its MPI_Iallreduce, buckets strictly in index order (the
 * same order on every rank). Every hook also calls MPI_Testall, so the
 * reductions progress while backward goes on. finish() packs what no hook
 * packed (no gradient here: zeros), starts the rest, waits, and unpacks
 * scaled by `post`: the arithmetic of cg_dist_average_grads_tensors (pre,
 * post and the sums over ranks per element are the same). */
typedef struct {
    int first, count; /* parameters r->order[first .. first+count) */
    int64_t floats;   /* their elements + count flags */
    float *buf;
    int packed;
    MPI_Request req;
    bool started;
} rd_bucket;

struct cg_dist_reducer {
    int n;
    bool zero;            /* ZeRO-1: reduce-scatter, every rank owns a run of each bucket */
    int *counts, *displs; /* zero: bucket j's run of rank r at [j * size + r] */
    float *flags;         /* zero: has-gradient flags (by parameter index) */
    cg_optim_range *own;  /* zero: this rank's range of each parameter */
    cg_tensor **params;   /* as given */
    int *order;           /* parameter indices, reverse order */
    int *bucket_of;       /* by parameter index */
    int64_t *offset;      /* element offset of each parameter in its bucket */
    bool *done;           /* packed this step */
    int nb, next;         /* buckets; the next one to start */
    rd_bucket *b;
    bool armed;
    float pre, post;
    double exposed; /* seconds in finish (waiting for what backward did not hide) */
};

static int rd_find(const cg_dist_reducer *r, const cg_tensor *t)
{
    for (int i = 0; i < r->n; i++)
        if (r->params[i] == t)
            return i;
    return -1;
}

static void rd_start_ready(cg_dist_reducer *r)
{
    while (r->next < r->nb && r->b[r->next].packed == r->b[r->next].count) {
        int j = r->next++;
        rd_bucket *b = &r->b[j];
        /* zero: in place, this rank's run of sums lands at the buffer's start */
        int rc = r->zero ? MPI_Ireduce_scatter(MPI_IN_PLACE, b->buf, r->counts + j * cg_dist_size(),
                                               MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &b->req)
                         : MPI_Iallreduce(MPI_IN_PLACE, b->buf, (int)b->floats, MPI_FLOAT, MPI_SUM,
                                          MPI_COMM_WORLD, &b->req);
        b->started = rc == MPI_SUCCESS;
        if (!b->started)
            cg_dist_mpi_ok(rc, r->zero ? "MPI_Ireduce_scatter" : "MPI_Iallreduce");
        cg_dist_count(0, b->floats * (int64_t)sizeof(float));
    }
}

static void rd_progress(cg_dist_reducer *r)
{
    MPI_Request reqs[64];
    for (int lo = 0; lo < r->next; lo += 64) {
        int k = 0;
        for (int i = lo; i < r->next && k < 64; i++)
            reqs[k++] = r->b[i].req;
        int flag = 0;
        MPI_Testall(k, reqs, &flag, MPI_STATUSES_IGNORE);
        for (int i = lo, j = 0; j < k; i++, j++)
            r->b[i].req = reqs[j];
    }
}

static void rd_pack(cg_dist_reducer *r, int i)
{
    rd_bucket *b = &r->b[r->bucket_of[i]];
    cg_tensor *p = r->params[i];
    int64_t n = cg_numel(p);
    float *dst = b->buf + r->offset[i];
    int slot = 0;
    while (!r->zero && r->order[b->first + slot] != i)
        slot++;
    const cg_tensor *g = p->grad;
    if (g && cg_numel(g) == n && cg_is_contiguous(g)) {
        cg_dist_seg_pack(dst, cg_data((cg_tensor *)g), n, r->pre);
    } else if (g && cg_numel(g) == n) {
        cg_copy_to(g, dst);
        if (r->pre != 1.0f)
            for (int64_t k = 0; k < n; k++)
                dst[k] *= r->pre;
    } else {
        memset(dst, 0, (size_t)n * sizeof *dst);
    }
    if (r->zero)
        r->flags[i] = g ? 1.0f : 0.0f;
    else
        b->buf[b->floats - b->count + slot] = g ? 1.0f : 0.0f;
    r->done[i] = true;
    b->packed++;
}

static void rd_hook(void *ctx, cg_tensor *t)
{
    cg_dist_reducer *r = ctx;
    if (!r->armed)
        return;
    int i = rd_find(r, t);
    if (i < 0 || r->done[i])
        return;
    rd_pack(r, i);
    rd_start_ready(r);
    rd_progress(r);
}

/* A reducer of n parameters with its tables allocated (with zero, ZeRO's
 * too) and no bucket yet; NULL + error when memory runs out. */
static cg_dist_reducer *rd_alloc(int n, bool zero)
{
    cg_dist_reducer *r = calloc(1, sizeof *r);
    size_t m = (size_t)(n ? n : 1);
    if (r) {
        r->n = n;
        r->params = calloc(m, sizeof *r->params);
        r->order = malloc(m * sizeof *r->order);
        r->bucket_of = malloc(m * sizeof *r->bucket_of);
        r->offset = malloc(m * sizeof *r->offset);
        r->done = calloc(m, sizeof *r->done);
        r->b = calloc(m, sizeof *r->b);
        r->zero = zero;
        if (zero) {
            r->counts = malloc(m * (size_t)cg_dist_size() * sizeof *r->counts);
            r->displs = malloc(m * (size_t)cg_dist_size() * sizeof *r->displs);
            r->flags = calloc(m, sizeof *r->flags);
            r->own = calloc(m, sizeof *r->own);
        }
    }
    if (!r || !r->params || !r->order || !r->bucket_of || !r->offset || !r->done || !r->b ||
        (zero && (!r->counts || !r->displs || !r->flags || !r->own))) {
        cg_dist_reducer_free(r);
        cg_set_error("dist: out of memory");
        return NULL;
    }
    return r;
}

/* The parameters, in reverse order, laid out in buckets of whole
 * parameters: a new bucket when the next one would take a non-empty bucket
 * past cap floats. False + error on a NULL parameter. */
static bool rd_fill_buckets(cg_dist_reducer *r, cg_tensor *const *params, int64_t cap)
{
    for (int k = 0; k < r->n; k++) {
        int i = r->n - 1 - k;
        if (!params[i]) {
            cg_set_error("dist: reducer: parameter %d is NULL", i);
            return false;
        }
        r->params[i] = params[i];
        r->order[k] = i;
        int64_t len = cg_numel(params[i]);
        rd_bucket *b = r->nb ? &r->b[r->nb - 1] : NULL;
        if (!b || (b->floats > 0 && b->floats + len > cap)) {
            b = &r->b[r->nb++];
            b->first = k;
        }
        r->bucket_of[i] = (int)(b - r->b);
        r->offset[i] = b->floats;
        b->floats += len;
        b->count++;
    }
    return true;
}

/* Every bucket's buffer: its parameters and, without zero, their
 * has-gradient flags after them (zero keeps the flags apart, and its
 * reduce-scatter counts a bucket in an int). False + error. */
static bool rd_alloc_buffers(cg_dist_reducer *r)
{
    for (int j = 0; j < r->nb; j++) {
        if (!r->zero)
            r->b[j].floats += r->b[j].count; /* the has-gradient flags */
        else if (r->b[j].floats > INT32_MAX) {
            cg_set_error("dist: reducer: a bucket of %lld floats is too large for MPI",
                         (long long)r->b[j].floats);
            return false;
        }
        r->b[j].buf = cg_alloc((size_t)r->b[j].floats * sizeof(float));
        r->b[j].req = MPI_REQUEST_NULL;
        if (!r->b[j].buf) {
            cg_set_error("dist: out of memory for the gradient buckets");
            return false;
        }
    }
    return true;
}

/* zero: each bucket cut into equal runs, one per rank (counts, displs),
 * and this rank's range of each parameter: the part its run covers. */
static void rd_split_runs(cg_dist_reducer *r)
{
    const int size = cg_dist_size(), rank = cg_dist_rank();
    for (int j = 0; j < r->nb; j++) {
        int64_t f = r->b[j].floats;
        for (int q = 0; q < size; q++) {
            r->displs[j * size + q] = (int)(f * q / size);
            r->counts[j * size + q] = (int)(f * (q + 1) / size - f * q / size);
        }
        int64_t a = f * rank / size, z = f * (rank + 1) / size;
        for (int s = 0; s < r->b[j].count; s++) {
            int i = r->order[r->b[j].first + s];
            int64_t o = r->offset[i], len = cg_numel(r->params[i]);
            int64_t lo = a > o ? a - o : 0, hi = z < o + len ? z - o : len;
            if (lo > len)
                lo = len;
            r->own[i] = (cg_optim_range){lo, hi > lo ? hi : lo};
        }
    }
}

static cg_dist_reducer *reducer_new(int n, cg_tensor *const *params, double bucket_mb, bool zero)
{
    if (n < 0 || (n && !params) || !(bucket_mb > 0)) {
        cg_set_error("dist: reducer: bad parameter list or bucket size %g MB", bucket_mb);
        return NULL;
    }
    cg_dist_reducer *r = rd_alloc(n, zero);
    if (!r)
        return NULL;
    int64_t cap = (int64_t)(bucket_mb * 1024 * 1024 / sizeof(float));
    if (!rd_fill_buckets(r, params, cap) || !rd_alloc_buffers(r)) {
        cg_dist_reducer_free(r);
        return NULL;
    }
    if (zero)
        rd_split_runs(r);
    for (int i = 0; i < n; i++)
        if (!cg_grad_ready_hook_add(params[i], rd_hook, r)) {
            cg_dist_reducer_free(r);
            return NULL;
        }
    return r;
}

cg_dist_reducer *cg_dist_reducer_new(int n, cg_tensor *const *params, double bucket_mb)
{
    return reducer_new(n, params, bucket_mb, false);
}

cg_dist_reducer *cg_dist_reducer_new_zero(int n, cg_tensor *const *params, double bucket_mb)
{
    return reducer_new(n, params, bucket_mb, true);
}

bool cg_dist_reducer_shards(const cg_dist_reducer *r, cg_optim_range *own)
{
    if (!r || !own || !r->zero) {
        cg_set_error("dist: reducer_shards: %s",
                     !r || !own ? "NULL argument" : "not a ZeRO reducer (new_zero)");
        return false;
    }
    memcpy(own, r->own, (size_t)r->n * sizeof *own);
    return true;
}

bool cg_dist_reducer_prepare(cg_dist_reducer *r, double weight)
{
    if (!r)
        return false;
    if (!(weight >= 0) || !isfinite(weight)) {
        cg_set_error("dist: reducer: weight %g must be finite and >= 0", weight);
        return false;
    }
    r->armed = false;
    if (cg_dist_size() == 1)
        return true;
    if (!cg_dist_check_inited("reducer"))
        return false;
    double mx[2] = {weight, -weight}, wsum = weight, t0 = cg_now();
    bool ok = COLLECTIVE("MPI_Allreduce",
                         MPI_Allreduce(MPI_IN_PLACE, mx, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD)) &&
              COLLECTIVE("MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, &wsum, 1, MPI_DOUBLE, MPI_SUM,
                                                        MPI_COMM_WORLD));
    r->exposed = cg_now() - t0;
    cg_dist_count(r->exposed, 0);
    if (ok && !(wsum > 0)) {
        cg_set_error("dist: average_grads: the weights of all ranks sum to 0");
        ok = false;
    }
    if (!ok)
        return false;
    bool equal = mx[0] == -mx[1];
    r->pre = equal ? 1.0f : (float)weight;
    r->post = equal ? (float)(1.0 / cg_dist_size()) : (float)(1.0 / wsum);
    memset(r->done, 0, (size_t)r->n * sizeof *r->done);
    for (int j = 0; j < r->nb; j++) {
        r->b[j].packed = 0;
        r->b[j].started = false;
        r->b[j].req = MPI_REQUEST_NULL;
    }
    r->next = 0;
    r->armed = true;
    return true;
}

bool cg_dist_reducer_finish(cg_dist_reducer *r)
{
    if (!r)
        return false;
    if (cg_dist_size() == 1)
        return true;
    if (!r->armed) {
        cg_set_error("dist: reducer: finish without prepare");
        return false;
    }
    double t0 = cg_now();
    r->armed = false;
    for (int k = 0; k < r->n; k++)
        if (!r->done[r->order[k]])
            rd_pack(r, r->order[k]);
    rd_start_ready(r);
    bool ok = true;
    for (int j = 0; j < r->nb; j++)
        ok &= r->b[j].started;
    if (r->zero && r->n > 0) /* which parameters have a gradient on some rank */
        ok = COLLECTIVE("MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, r->flags, r->n, MPI_FLOAT,
                                                       MPI_MAX, MPI_COMM_WORLD)) &&
             ok;
    cg_dist_wd_begin("MPI_Waitall");
    for (int j = 0; j < r->nb; j++) {
        int rc = MPI_Wait(&r->b[j].req, MPI_STATUS_IGNORE);
        if (ok && rc != MPI_SUCCESS)
            ok = cg_dist_mpi_ok(rc, "MPI_Wait (gradient bucket)");
    }
    cg_dist_wd_end();
    for (int j = 0; ok && j < r->nb; j++) {
        rd_bucket *b = &r->b[j];
        for (int s = 0; ok && s < b->count; s++) {
            int i = r->order[b->first + s];
            cg_tensor *p = r->params[i];
            if ((r->zero ? r->flags[i] : b->buf[b->floats - b->count + s]) == 0)
                continue; /* no gradient on any rank: stays NULL */
            if (!cg_dist_own_grad(p)) {
                ok = false;
                break;
            }
            if (r->zero) /* the owned run: its sums sit at the buffer's start */
                cg_dist_seg_unpack(b->buf + r->offset[i] + r->own[i].lo -
                                       r->displs[j * cg_dist_size() + cg_dist_rank()],
                                   cg_data(p->grad) + r->own[i].lo, r->own[i].hi - r->own[i].lo,
                                   r->post);
            else
                cg_dist_seg_unpack(b->buf + r->offset[i], cg_data(p->grad), cg_numel(p), r->post);
            cg_tensor_modified(p->grad);
        }
    }
    double dt = cg_now() - t0;
    r->exposed += dt;
    cg_dist_count(dt, 0);
    return ok;
}

bool cg_dist_reducer_gather_params(cg_dist_reducer *r)
{
    if (!r || !r->zero) {
        cg_set_error("dist: gather_params: %s", !r ? "reducer is NULL" : "not a ZeRO reducer");
        return false;
    }
    if (cg_dist_size() == 1)
        return true;
    double t0 = cg_now();
    bool ok = true;
    for (int j = 0; j < r->nb; j++) { /* every bucket's own run, in the bucket layout */
        rd_bucket *b = &r->b[j];
        for (int s = 0; s < b->count; s++) {
            int i = r->order[b->first + s];
            int64_t lo = r->own[i].lo, hi = r->own[i].hi;
            if (hi > lo)
                memcpy(b->buf + r->offset[i] + lo, cg_data(r->params[i]) + lo,
                       (size_t)(hi - lo) * sizeof(float));
        }
        int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b->buf,
                                 r->counts + j * cg_dist_size(), r->displs + j * cg_dist_size(),
                                 MPI_FLOAT, MPI_COMM_WORLD, &b->req);
        b->started = rc == MPI_SUCCESS;
        if (!b->started)
            ok = cg_dist_mpi_ok(rc, "MPI_Iallgatherv");
        cg_dist_count(0, b->floats * (int64_t)sizeof(float));
    }
    cg_dist_wd_begin("MPI_Waitall (parameter all-gather)");
    for (int j = 0; j < r->nb; j++) {
        if (!r->b[j].started)
            continue;
        int rc = MPI_Wait(&r->b[j].req, MPI_STATUS_IGNORE);
        r->b[j].started = false;
        if (ok && rc != MPI_SUCCESS)
            ok = cg_dist_mpi_ok(rc, "MPI_Wait (parameter all-gather)");
    }
    cg_dist_wd_end();
    for (int j = 0; ok && j < r->nb; j++) {
        rd_bucket *b = &r->b[j];
        for (int s = 0; s < b->count; s++) {
            int i = r->order[b->first + s];
            cg_tensor *p = r->params[i];
            memcpy(cg_data(p), b->buf + r->offset[i], (size_t)cg_numel(p) * sizeof(float));
            cg_tensor_modified(p);
        }
    }
    double dt = cg_now() - t0;
    r->exposed += dt;
    cg_dist_count(dt, 0);
    return ok;
}

/* A gather of shards into rank 0's whole copy: n parameters, each with up
 * to `bufs` float buffers of this rank's run [lo, hi) (ZeRO's: the
 * optimizer's moments, the weights' average). */
typedef struct {
    const char *fn, *what; /* "gather_optim", "the optimizer state" */
    const void *shard;
    void *full; /* rank 0's; NULL elsewhere */
    int n, bufs;
    bool (*range)(const void *shard, int i, int64_t *lo, int64_t *hi);
    cg_tensor *(*buf)(const void *x, int i, int k); /* NULL: none (the same on every rank) */
    bool (*copy)(void *full, const void *shard);    /* rank 0's own runs and the scalars */
} shard_gather;

static bool gather_shards(const shard_gather *g)
{
    if (!g->shard) {
        cg_set_error("dist: %s: the shard is NULL", g->fn);
        return false;
    }
    if (cg_dist_size() == 1)
        return g->copy(g->full, g->shard);
    if (!cg_dist_check_inited(g->fn))
        return false;
    /* rank 0 without a whole copy (out of memory) still takes part in the
     * first gather, so that every rank learns of the failure */
    const int n = g->n, me = cg_dist_rank(), size = cg_dist_size();
    int64_t *mine = malloc((size_t)(2 * n + 1) * sizeof *mine);
    int64_t *all = me == 0 ? malloc((size_t)(2 * n + 1) * (size_t)size * sizeof *all) : NULL;
    int *counts = calloc((size_t)size, sizeof *counts); /* zeros until set */
    int *displs = calloc((size_t)size, sizeof *displs);
    bool ok = mine && counts && displs && (me != 0 || all);
    for (int i = 0; ok && i < n; i++)
        ok = g->range(g->shard, i, &mine[2 * i], &mine[2 * i + 1]);
    if (mine)
        mine[2 * n] = ok ? 1 : 0;
    /* every rank's ranges (and whether it is fine) on rank 0 */
    bool sent =
        mine && COLLECTIVE("MPI_Gather", MPI_Gather(mine, 2 * n + 1, MPI_INT64_T, all, 2 * n + 1,
                                                    MPI_INT64_T, 0, MPI_COMM_WORLD));
    if (me == 0 && sent) {
        if (ok && !g->full) {
            cg_set_error("dist: %s: rank 0 has nothing to gather into", g->fn);
            ok = false;
        }
        ok = ok && g->copy(g->full, g->shard);
        for (int q = 1; ok && q < size; q++)
            if (all[q * (2 * n + 1) + 2 * n] != 1) {
                cg_set_error("dist: %s: rank %d could not read its shard", g->fn, q);
                ok = false;
            }
    }
    /* rank 0's verdict: every rank goes on with the gathers, or none */
    double v = me == 0 && sent && ok ? 1 : 0;
    bool go = sent && cg_dist_broadcast_bytes(&v, sizeof v) && v == 1;
    if (sent && v != 1 && me != 0 && ok)
        cg_set_error("dist: %s: rank 0 could not gather %s", g->fn, g->what);
    for (int i = 0; go && i < n; i++) {
        for (int k = 0; k < g->bufs; k++) {
            cg_tensor *src = g->buf(g->shard, i, k);
            if (!src) {
                cg_clear_error(); /* no such buffer (the same on every rank) */
                continue;
            }
            float *dst = NULL;
            if (me == 0) {
                cg_tensor *d = g->buf(g->full, i, k);
                ok = d != NULL;
                dst = ok ? cg_data(d) : NULL;
                for (int q = 0; ok && q < size; q++) {
                    int64_t lo = all[q * (2 * n + 1) + 2 * i],
                            hi = all[q * (2 * n + 1) + 2 * i + 1];
                    displs[q] = (int)lo;
                    counts[q] = (int)(hi - lo);
                }
                if (d)
                    cg_tensor_modified(d);
            }
            ok = COLLECTIVE("MPI_Gatherv",
                            MPI_Gatherv(cg_data(src), (int)cg_numel(src), MPI_FLOAT, dst, counts,
                                        displs, MPI_FLOAT, 0, MPI_COMM_WORLD)) &&
                 ok;
        }
    }
    free(mine);
    free(all);
    free(counts);
    free(displs);
    return go && ok;
}

static bool optim_range(const void *o, int i, int64_t *lo, int64_t *hi)
{
    return cg_optim_shard_range(o, i, lo, hi);
}
static cg_tensor *optim_buf(const void *o, int i, int k)
{
    static const char *const what[3] = {"exp_avg", "exp_avg_sq", "momentum_buffer"};
    return cg_optim_state(o, i, what[k]);
}
static bool optim_copy(void *full, const void *shard) { return cg_optim_copy_state(full, shard); }

bool cg_dist_gather_optim(const cg_optim *shard, cg_optim *full)
{
    return gather_shards(&(shard_gather){"gather_optim", "the optimizer state", shard, full,
                                         shard ? cg_optim_count(shard) : 0, 3, optim_range,
                                         optim_buf, optim_copy});
}

static bool ema_range(const void *e, int i, int64_t *lo, int64_t *hi)
{
    return cg_ema_shard_range(e, i, lo, hi);
}
static cg_tensor *ema_buf(const void *e, int i, int k)
{
    (void)k;
    return cg_ema_state(e, i);
}
static bool ema_copy(void *full, const void *shard) { return cg_ema_copy(full, shard); }

bool cg_dist_gather_ema(const cg_ema *shard, cg_ema *full)
{
    return gather_shards(&(shard_gather){"gather_ema", "the weights' average", shard, full,
                                         shard ? cg_ema_count(shard) : 0, 1, ema_range, ema_buf,
                                         ema_copy});
}

double cg_dist_reducer_exposed_seconds(const cg_dist_reducer *r) { return r ? r->exposed : 0; }
int cg_dist_reducer_buckets(const cg_dist_reducer *r) { return r ? r->nb : 0; }

void cg_dist_reducer_free(cg_dist_reducer *r)
{
    if (!r)
        return;
    for (int j = 0; r->b && j < r->nb; j++) {
        if (r->b[j].started && r->b[j].req != MPI_REQUEST_NULL)
            MPI_Wait(&r->b[j].req, MPI_STATUS_IGNORE);
        cg_free(r->b[j].buf);
    }
    for (int i = 0; r->params && i < r->n; i++)
        if (r->params[i])
            cg_grad_ready_hook_remove(r->params[i]);
    free(r->counts);
    free(r->displs);
    free(r->flags);
    free(r->own);
    free(r->params);
    free(r->order);
    free(r->bucket_of);
    free(r->offset);
    free(r->done);
    free(r->b);
    free(r);
}
