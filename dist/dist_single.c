/* Data-parallel training built without MPI (meson -Dmpi=disabled, or no MPI
 * found): one process, rank 0 of 1; the collectives check their arguments
 * as the MPI build does (dist_args.h) and do nothing. The common part is
 * dist.c. See dist.h. */
#include "dist/dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/parse.h"
#include "dist/dist_args.h"

bool cg_dist_compiled_with_mpi(void) { return false; }
int cg_dist_rank(void) { return 0; }
int cg_dist_size(void) { return 1; }
double cg_dist_comm_seconds(void) { return 0; }
int64_t cg_dist_comm_bytes(void) { return 0; }
void cg_dist_reset_stats(void) {}

/* ------------------------------------------------ single process */
bool cg_dist_init(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return true;
}
void cg_dist_finalize(void) {}
bool cg_dist_wait_for_root(void) { return true; }
bool cg_dist_broadcast_tensors(int n, cg_tensor *const *ts)
{
    return cg_dist_tensors_ok("broadcast", "tensor", n, ts, true);
}
bool cg_dist_broadcast_bytes(void *buf, size_t bytes)
{
    (void)buf;
    (void)bytes;
    return true;
}
bool cg_dist_average_grads_tensors(int n, cg_tensor *const *params, double weight)
{
    return cg_dist_tensors_ok("average_grads", "parameter", n, params, false) &&
           cg_dist_weight_ok("average_grads", weight);
}
bool cg_dist_allreduce_sum(double *v, int n)
{
    (void)v;
    (void)n;
    return true;
}
bool cg_dist_allreduce_max(double *v, int n)
{
    (void)v;
    (void)n;
    return true;
}
bool cg_dist_quiet_nonroot(void) { return true; }
/* exit: the one-process twin of dist_mpi.c's cg_dist_abort (its callers
 * reach it only with more than one rank). */
_Noreturn void cg_dist_abort(int code, const char *msg)
{
    fprintf(stderr, "cgrad dist: rank 0: %s\n", msg ? msg : "aborting");
    exit(code);
}

struct cg_dist_reducer {
    int n;
    int64_t *numel; /* of each parameter: a shard is all of it */
};
cg_dist_reducer *cg_dist_reducer_new(int n, cg_tensor *const *params, double bucket_mb)
{
    if (!cg_dist_reducer_args_ok(n, params, bucket_mb))
        return NULL;
    cg_dist_reducer *r = calloc(1, sizeof *r);
    int64_t *numel = malloc((size_t)(n ? n : 1) * sizeof *numel);
    if (!r || !numel) {
        free(r);
        free(numel);
        cg_set_error("dist: out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        numel[i] = cg_numel(params[i]);
    r->n = n;
    r->numel = numel;
    return r;
}
cg_dist_reducer *cg_dist_reducer_new_zero(int n, cg_tensor *const *params, double bucket_mb)
{
    return cg_dist_reducer_new(n, params, bucket_mb);
}
bool cg_dist_reducer_shards(const cg_dist_reducer *r, cg_optim_range *own)
{
    if (!r || !own) {
        cg_set_error("dist: reducer_shards: NULL argument");
        return false;
    }
    for (int i = 0; i < r->n; i++)
        own[i] = (cg_optim_range){0, r->numel[i]};
    return true;
}
bool cg_dist_reducer_gather_params(cg_dist_reducer *r) { return r != NULL; }
/* one process: nothing is sharded (stepper.c never streams) */
cg_dist_stream *cg_dist_stream_new(const cg_optim *shard, const cg_ema *ema)
{
    (void)shard;
    (void)ema;
    cg_set_error("dist: stream_new: one process holds its state whole: save it as it is");
    return NULL;
}
static bool no_gather(void *s, int i, int k, float *dst)
{
    (void)s;
    (void)i;
    (void)k;
    (void)dst;
    cg_set_error("dist: no stream with one process");
    return false;
}
cg_shard_gather cg_dist_stream_optim(cg_dist_stream *s) { return (cg_shard_gather){no_gather, s}; }
cg_shard_gather cg_dist_stream_ema(cg_dist_stream *s) { return (cg_shard_gather){no_gather, s}; }
bool cg_dist_stream_end(cg_dist_stream *s)
{
    (void)s;
    cg_set_error("dist: stream_end: NULL stream");
    return false;
}
void cg_dist_stream_free(cg_dist_stream *s) { (void)s; }
bool cg_dist_reducer_prepare(cg_dist_reducer *r, double weight)
{
    return r != NULL && cg_dist_weight_ok("reducer", weight);
}
bool cg_dist_reducer_finish(cg_dist_reducer *r) { return r != NULL; }
double cg_dist_reducer_exposed_seconds(const cg_dist_reducer *r)
{
    (void)r;
    return 0;
}
int cg_dist_reducer_buckets(const cg_dist_reducer *r)
{
    (void)r;
    return 0;
}
void cg_dist_reducer_free(cg_dist_reducer *r)
{
    if (r)
        free(r->numel);
    free(r);
}
