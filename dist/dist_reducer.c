/* Data-parallel training over MPI: the reduction during backward (buckets
 * reduced while backward runs, ZeRO-1's reduce-scatter and gathers). Built
 * with meson's `mpi` option, beside dist_mpi.c. See dist.h. */
#include "dist/dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/parse.h"

#include <mpi.h>

#include "dist/dist_args.h"
#include "dist/dist_mpi.h"

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
    bool progress_failed; /* an MPI_Testall failed this step (finish fails it) */
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
        /* a bucket that did not start is recorded in b->started, which
         * cg_dist_reducer_finish checks (its false fails the step): this
         * call only words the error */
        b->started = rc == MPI_SUCCESS;
        if (!b->started)
            (void)cg_dist_mpi_ok(rc, r->zero ? "MPI_Ireduce_scatter" : "MPI_Iallreduce");
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
        const int rc = MPI_Testall(k, reqs, &flag, MPI_STATUSES_IGNORE);
        for (int i = lo, j = 0; j < k; i++, j++)
            r->b[i].req = reqs[j];
        /* a request that completed in error may be freed here (its later
         * wait then succeeds on MPI_REQUEST_NULL): the failure is kept for
         * cg_dist_reducer_finish, which fails the step */
        if (rc != MPI_SUCCESS && !r->progress_failed)
            r->progress_failed = !cg_dist_mpi_ok(rc, "MPI_Testall (gradient buckets)");
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
        /* cannot fail: both pointers are set, and the debug check's freed
         * tensor cannot be a gradient p still holds */
        (void)cg_copy_to(g, dst);
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

/* The parameters (none NULL), in reverse order, laid out in buckets of
 * whole parameters: a new bucket when the next one would take a non-empty
 * bucket past cap floats. */
static void rd_fill_buckets(cg_dist_reducer *r, cg_tensor *const *params, int64_t cap)
{
    for (int k = 0; k < r->n; k++) {
        int i = r->n - 1 - k;
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
    if (!cg_dist_reducer_args_ok(n, params, bucket_mb))
        return NULL;
    cg_dist_reducer *r = rd_alloc(n, zero);
    if (!r)
        return NULL;
    int64_t cap = (int64_t)(bucket_mb * 1024 * 1024 / sizeof(float));
    rd_fill_buckets(r, params, cap);
    if (!rd_alloc_buffers(r)) {
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
    if (!cg_dist_weight_ok("reducer", weight))
        return false;
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
    r->progress_failed = false;
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
    bool ok = !r->progress_failed;
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

/* ------------------------------------------------ ZeRO's state to rank 0 */
/* Rank 0 writes a checkpoint while the other ranks serve it the runs of
 * each state tensor its writer reaches (dist.h). Every rank's runs are
 * rank 0's from the start: for rank q, 2 int64 (lo, hi) per entry j, the
 * optimizer's parameters first, then the average's. Rank 0 announces each
 * gather by broadcasting (j, k), then gathers it (MPI_Gatherv); (-1, 0)
 * ends the serving. */
struct cg_dist_stream {
    const cg_optim *opt;
    const cg_ema *ema;
    int n_opt, n;  /* n: the optimizer's entries and the average's */
    int64_t *runs; /* rank 0's: size x (2n + 1) */
    int *counts, *displs;
};

static bool entry_run(const cg_dist_stream *s, int j, int64_t *lo, int64_t *hi)
{
    return j < s->n_opt ? cg_optim_shard_range(s->opt, j, lo, hi)
                        : cg_ema_shard_range(s->ema, j - s->n_opt, lo, hi);
}

/* This rank's run of buffer k of entry j (k as cg_shard_gather's), or
 * NULL + error. */
static cg_tensor *entry_buffer(const cg_dist_stream *s, int j, int k)
{
    if (j < 0 || j >= s->n || k < 0 || k >= CG_OPTIM_NBUFS || (j < s->n_opt) != (k > 0)) {
        cg_set_error("dist: stream: no state buffer %d of entry %d", k, j);
        return NULL;
    }
    return k ? cg_optim_state(s->opt, j, cg_optim_buffer_name(k))
             : cg_ema_state(s->ema, j - s->n_opt);
}

void cg_dist_stream_free(cg_dist_stream *s)
{
    if (!s)
        return;
    free(s->runs);
    free(s->counts);
    free(s->displs);
    free(s);
}

cg_dist_stream *cg_dist_stream_new(const cg_optim *opt, const cg_ema *ema)
{
    if (cg_dist_size() == 1) {
        cg_set_error("dist: stream_new: one process holds its state whole: save it as it is");
        return NULL;
    }
    if (!cg_dist_check_inited("stream_new"))
        return NULL;
    const int me = cg_dist_rank(), size = cg_dist_size();
    /* the same count on every rank: the same model */
    const int n_opt = opt ? cg_optim_count(opt) : 0, n = n_opt + (ema ? cg_ema_count(ema) : 0);
    cg_dist_stream *s = calloc(1, sizeof *s);
    int64_t *mine = malloc((size_t)(2 * n + 1) * sizeof *mine);
    if (s) {
        *s = (cg_dist_stream){.opt = opt, .ema = ema, .n_opt = n_opt, .n = n};
        if (me == 0) {
            s->runs = malloc((size_t)(2 * n + 1) * (size_t)size * sizeof *s->runs);
            s->counts = calloc((size_t)size, sizeof *s->counts);
            s->displs = calloc((size_t)size, sizeof *s->displs);
        }
    }
    bool ok = s && mine && (me != 0 || (s->runs && s->counts && s->displs));
    if (!ok)
        cg_set_error("out of memory");
    for (int j = 0; ok && j < n; j++)
        ok = entry_run(s, j, &mine[2 * j], &mine[2 * j + 1]);
    if (ok)
        mine[2 * n] = n; /* the runs, then their count (2n + 1: never 0 bytes) */
    /* every rank goes on, or none */
    double bad = ok ? 0 : 1;
    bool agreed = cg_dist_allreduce_max(&bad, 1);
    if (agreed && bad != 0 && ok)
        cg_set_error("dist: stream_new: another rank could not list its shards");
    ok = agreed && bad == 0 &&
         COLLECTIVE("MPI_Gather", MPI_Gather(mine, 2 * n + 1, MPI_INT64_T, s->runs, 2 * n + 1,
                                             MPI_INT64_T, 0, MPI_COMM_WORLD));
    free(mine);
    if (!ok) {
        cg_dist_stream_free(s);
        return NULL;
    }
    return s;
}

/* Rank 0's gather of buffer k of entry j, whole, into dst. */
static bool stream_gather(cg_dist_stream *s, int j, int k, float *dst)
{
    cg_tensor *src = entry_buffer(s, j, k);
    if (!src)
        return false;
    int msg[2] = {j, k}; /* the other ranks wait for it as long as the disk takes */
    if (!cg_dist_mpi_ok(MPI_Bcast(msg, 2, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast"))
        return false;
    const int size = cg_dist_size(), width = 2 * s->n + 1;
    for (int q = 0; q < size; q++) {
        const int64_t *r = &s->runs[(size_t)q * width + 2 * j];
        s->displs[q] = (int)r[0];
        s->counts[q] = (int)(r[1] - r[0]);
    }
    return COLLECTIVE("MPI_Gatherv",
                      MPI_Gatherv(cg_data(src), (int)cg_numel(src), MPI_FLOAT, dst, s->counts,
                                  s->displs, MPI_FLOAT, 0, MPI_COMM_WORLD));
}

static bool gather_optim(void *s, int i, int k, float *dst) { return stream_gather(s, i, k, dst); }
static bool gather_ema(void *ctx, int i, int k, float *dst)
{
    cg_dist_stream *s = ctx;
    return stream_gather(s, s->n_opt + i, k, dst);
}

cg_shard_gather cg_dist_stream_optim(cg_dist_stream *s)
{
    return (cg_shard_gather){gather_optim, s};
}
cg_shard_gather cg_dist_stream_ema(cg_dist_stream *s) { return (cg_shard_gather){gather_ema, s}; }

bool cg_dist_stream_end(cg_dist_stream *s)
{
    if (!s) {
        cg_set_error("dist: stream_end: NULL stream");
        return false;
    }
    int msg[2] = {-1, 0};
    bool ok = true;
    if (cg_dist_rank() == 0)
        ok = cg_dist_mpi_ok(MPI_Bcast(msg, 2, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
    while (ok && cg_dist_rank() != 0) {
        /* not under the watchdog: rank 0 takes what its disk takes */
        ok = cg_dist_mpi_ok(MPI_Bcast(msg, 2, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
        if (!ok || msg[0] < 0)
            break;
        cg_tensor *src = entry_buffer(s, msg[0], msg[1]);
        /* none (cannot be: every rank has the same optimizer) sends
         * nothing, and rank 0's gather ends the job by the watchdog */
        ok = src &&
             COLLECTIVE("MPI_Gatherv", MPI_Gatherv(cg_data(src), (int)cg_numel(src), MPI_FLOAT,
                                                   NULL, NULL, NULL, MPI_FLOAT, 0, MPI_COMM_WORLD));
    }
    cg_dist_stream_free(s);
    return ok;
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
