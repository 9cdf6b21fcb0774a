/* cgrad dist: data-parallel training of any cg_module over MPI (PyTorch's
 * DistributedDataParallel as a library): libcgrad-dist, linked with
 * `pkg-config --cflags --libs cgrad-dist`; launched with `mpirun -np N`.
 * docs/scaling.md, "Data parallelism for your own model"; examples/ddp.c.
 *
 * Every rank holds a full copy of the model. Each step, every rank runs the
 * forward and backward on its own share of the global batch; then
 * cg_dist_average_grads() replaces every gradient by the (weighted) average
 * over ranks, so that every rank takes the same optimizer step and the
 * parameters stay identical. Parameters and buffers are sent from rank 0
 * to the others once at start (and after a resume) with
 * cg_dist_broadcast_module().
 *
 * Built without MPI (meson -Dmpi=disabled, or no MPI found) the same API
 * runs as one process: rank 0, size 1, collectives are no-ops. Callers need
 * no #ifdef. Built with MPI but started without a launcher (no mpirun,
 * mpiexec or srun variables in the environment), MPI is not started at all
 * and the process is size 1 as well (CG_DIST_MPI=1 forces MPI_Init,
 * CG_DIST_MPI=0 keeps MPI off even under mpirun).
 *
 * Gradient averaging: gradients are packed, in cg_module_params() order,
 * into flat float32 buckets of CG_DIST_BUCKET_MB megabytes (default 4),
 * each bucket is summed with MPI_Allreduce (in place) and scaled by
 * 1/size, then unpacked. The order of every operation is fixed, so runs are
 * deterministic. With per-rank weights (e.g. the number of non-PAD target
 * tokens of each rank's loss, when every rank's loss is a mean over its own
 * tokens), the result is sum_r w_r g_r / sum_r w_r, which is the gradient
 * of the mean over all ranks' tokens.
 *
 * Failures: MPI calls use MPI_ERRORS_RETURN; a failing call gives false and
 * a message (core/error.h) naming the call and MPI's reason. A program that
 * cannot go on calls cg_dist_abort() so that the other ranks stop too
 * instead of waiting forever. A watchdog thread ends the whole job with a
 * clear message if one collective takes longer than CG_DIST_TIMEOUT seconds
 * (environment; default 300; 0 turns the watchdog off), e.g. when a peer
 * died or took a different code path; cg_dist_wait_for_root alone is not
 * watched.
 *
 * Per-rank randomness: cg_dist_rank_seed(seed) gives
 *     seed XOR (rank * 0x9E3779B97F4A7C15)   (mod 2^64)
 * so rank 0 uses seed itself (a 1-rank run equals a non-distributed run)
 * and every rank of an N-rank run with a given seed draws the same stream
 * each time the run is repeated.
 *
 * Threads: MPI is initialised with MPI_THREAD_FUNNELED: call these
 * functions from the main thread only (OpenMP regions never call MPI). */
#ifndef CG_DIST_DIST_H
#define CG_DIST_DIST_H

#include <stdbool.h>
#include <stdint.h>

#include "../nn/module.h"
#include "../optim/ema.h"
#include "../optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True if the library was built with MPI. */
bool cg_dist_compiled_with_mpi(void);

/* Initialise MPI (if built with it) and start the watchdog. argc/argv may
 * be NULL. Calling it again is a no-op. False + error if MPI fails to start. */
bool cg_dist_init(int *argc, char ***argv);
/* Stop the watchdog and finalise MPI (no-op if not initialised). */
void cg_dist_finalize(void);

/* Rank and number of processes (0 and 1 before init or without MPI). */
int cg_dist_rank(void);
int cg_dist_size(void);
bool cg_dist_is_root(void);
/* This rank's share [*lo, *hi) of n rows (n * rank / size up to
 * n * (rank + 1) / size). False on every rank alike when n is smaller than
 * the number of ranks (some share would be empty). */
bool cg_dist_share(int64_t n, int64_t *lo, int64_t *hi);

/* Per-rank seed (see above). */
uint64_t cg_dist_rank_seed(uint64_t seed);
uint64_t cg_dist_seed_for_rank(uint64_t seed, int rank);

/* Copy rank 0's value of every parameter and every buffer of m to the
 * other ranks (PyTorch's DDP at construction): the parameters as float32,
 * the buffers (cg_module_buffers: persistent or not, of any dtype, each
 * numel times its dtype's size in bytes) packed into one broadcast. Every
 * rank must hold a module with the same parameters and buffers: names,
 * dtypes and shapes are compared with rank 0's first, so a mismatch fails
 * on every rank alike, before anything is sent, with one line naming the
 * rank and the first entry that differs ("rank 1's module differs from
 * rank 0's: buffer 'bn.running_mean' float32 [4] here, buffer
 * 'bn.running_mean' float32 [3] on rank 0"), instead of garbage. */
bool cg_dist_broadcast_module(cg_module *m);
/* The same for m's buffers alone, parameters untouched: DDP's
 * broadcast_buffers=True, for a module whose forward updates buffers
 * (running statistics), called before each step's forward so that every
 * rank starts it from rank 0's values. Costs the same check (a broadcast
 * of the names and an all-reduce) and one broadcast of the buffers' bytes;
 * no-op for size 1. The zoo's models keep no state in buffers and do not
 * call it. */
bool cg_dist_broadcast_buffers(cg_module *m);
/* The same for n tensors (each contiguous float32, the same shapes on every
 * rank). */
bool cg_dist_broadcast_tensors(int n, cg_tensor *const *ts);
/* Broadcast raw bytes from rank 0. */
bool cg_dist_broadcast_bytes(void *buf, size_t bytes);

/* Replace the gradient of every parameter of m by its average over ranks,
 * weighted by weight (>= 0; use 1 on every rank for a plain mean). A
 * parameter without a gradient on some ranks counts as zero there; one
 * without a gradient on every rank keeps none. No-op for size 1. */
bool cg_dist_average_grads(cg_module *m, double weight);
/* The same over n tensors. */
bool cg_dist_average_grads_tensors(int n, cg_tensor *const *params, double weight);

/* Gradients averaged during backward (PyTorch DDP's reducer): the result of
 * cg_dist_average_grads_tensors(n, params, weight), with the reductions of
 * most gradients started while backward still runs.
 *   - new: params (in cg_module_params order) go, in reverse order, into
 *     buckets of about bucket_mb megabytes of whole parameters (fixed
 *     contents and order); a gradient-ready hook (autograd/autograd.h) is
 *     set on each parameter (on this thread).
 *   - prepare(weight): before the (last) backward of a step: the weights of
 *     every rank are combined (two small blocking all-reduces), the hooks
 *     armed. During backward, a parameter whose gradient is final is packed
 *     into its bucket; a full bucket starts its MPI_Iallreduce, buckets in
 *     index order on every rank; each hook also lets MPI progress.
 *   - finish(): after backward: packs what no hook did (zeros where this
 *     rank has no gradient), waits for every bucket (under the watchdog)
 *     and writes the averages into the gradients.
 * Values: each element is pre-scaled, summed over ranks by MPI and
 * post-scaled exactly as by cg_dist_average_grads_tensors; with 2 ranks the
 * sum of two floats does not depend on the reduction's algorithm, so the
 * results are bit-identical to it; with more ranks MPI's non-blocking
 * algorithm may add in another order (test_dist holds both within its
 * bounds). No-op for size 1 (and without MPI). */
typedef struct cg_dist_reducer cg_dist_reducer;
cg_dist_reducer *cg_dist_reducer_new(int n, cg_tensor *const *params, double bucket_mb);
bool cg_dist_reducer_prepare(cg_dist_reducer *r, double weight);
bool cg_dist_reducer_finish(cg_dist_reducer *r);
/* Seconds of the last step spent in prepare and finish: the communication
 * backward did not hide. */
double cg_dist_reducer_exposed_seconds(const cg_dist_reducer *r);
int cg_dist_reducer_buckets(const cg_dist_reducer *r);
/* Waits for anything started, removes the hooks. NULL is a no-op. */
void cg_dist_reducer_free(cg_dist_reducer *r);

/* ZeRO-1 (the optimizer state sharded over ranks; DeepSpeed's stage 1,
 * PyTorch's ZeroRedundancyOptimizer, llm.c's zero_stage 1). The reducer's
 * buckets (same fixed contents and order as above, without the has-gradient
 * flags, which go through one small all-reduce in finish) are each cut into
 * equal runs, rank r owning floats [F*r/N, F*(r+1)/N) of a bucket of F;
 * since a bucket holds whole parameters, each parameter's owned part is one
 * run of its elements (possibly empty).
 *   - new_zero: as new, but each full bucket starts an MPI_Ireduce_scatter
 *     during backward (this rank receives the sums of its runs only).
 *   - shards(own): own[i] = this rank's range of parameter i, for
 *     cg_optim_new_sharded (optim/optim.h): the optimizer of each rank keeps
 *     1/N of the state.
 *   - finish(): the gradient's owned elements hold the average over ranks
 *     (the same pre/post scaling, so the same values as an all-reduce: with
 *     2 ranks bit-identical); the other elements keep this rank's own
 *     gradient and must not be used (the sharded optimizer does not).
 *   - gather_params(): after the optimizer step, every rank's updated runs
 *     go to every rank (MPI_Iallgatherv per bucket, in place), so that all
 *     ranks hold the same parameters again.
 * Clipping and the NaN/Inf check on a sharded optimizer: the global norm is
 * the square root of the sum over ranks of cg_optim_grad_sqsum (below). For
 * size 1 (or without MPI) the shard of every parameter is all of it and
 * everything is the plain optimizer's. */
cg_dist_reducer *cg_dist_reducer_new_zero(int n, cg_tensor *const *params, double bucket_mb);
bool cg_dist_reducer_shards(const cg_dist_reducer *r, cg_optim_range *own);
bool cg_dist_reducer_gather_params(cg_dist_reducer *r);

/* The global gradient norm of a sharded optimizer (each rank passes its
 * shard; every rank must call it): sqrt of the sum over ranks of
 * cg_optim_grad_sqsum, accumulated in double; if max_norm > 0, each rank's
 * owned elements are clipped by it as cg_clip_grad_norm clips (factor
 * max_norm / (total + 1e-6) in float32). Returns the norm (not finite: left
 * unscaled), or -1 + error (on every rank alike). */
double cg_dist_clip_grad_norm(cg_optim *shard, double max_norm);
/* cg_optim_grads_finite over every rank's shard: true on every rank, or
 * false on every rank with an error naming the first parameter (in
 * optimizer order) with a NaN or Inf in some rank's owned elements. */
bool cg_dist_grads_finite(const cg_optim *shard);
/* ZeRO's checkpoint without a whole copy of the state (as
 * DeepSpeed's and fairseq's consolidate on rank 0, but one tensor at a
 * time): rank 0 writes the file an unsharded run writes while every other
 * rank sends it its runs of each tensor of the optimizer state and of the
 * weights' average as the writer reaches them.
 *   cg_dist_stream_new (every rank): every rank's runs of shard's and
 *     ema's (NULL: none) parameters to rank 0. NULL + error on every rank
 *     alike when one cannot; with one process, always (nothing is sharded).
 *   cg_dist_stream_optim / _ema (rank 0): the gathers to save them with
 *     (optim.h cg_optim_save_gathered, ema.h cg_ema_save_gathered) and save
 *     (each tensor gathered when the writer writes it: any number of
 *     saves, each whole or failed).
 *   cg_dist_stream_end (every rank, after rank 0's saves however they
 *     went; frees s): rank 0 says it is done; the other ranks serve its
 *     gathers until then, waiting as cg_dist_wait_for_root waits. */
typedef struct cg_dist_stream cg_dist_stream;
cg_dist_stream *cg_dist_stream_new(const cg_optim *shard, const cg_ema *ema);
cg_shard_gather cg_dist_stream_optim(cg_dist_stream *s);
cg_shard_gather cg_dist_stream_ema(cg_dist_stream *s);
bool cg_dist_stream_end(cg_dist_stream *s);
void cg_dist_stream_free(cg_dist_stream *s); /* a stream not ended, on every rank */

/* Every rank but 0 waits here until rank 0 calls it too (a broadcast):
 * for rank 0's work alone, such as writing a checkpoint, that may take
 * what the disk takes. The wait is not bounded by CG_DIST_TIMEOUT (a rank
 * 0 that dies meanwhile ends the job through mpirun). No-op for size 1. */
bool cg_dist_wait_for_root(void);

/* In-place sum over ranks of n doubles (e.g. losses and token counts for
 * the log line). */
bool cg_dist_allreduce_sum(double *v, int n);
/* In-place maximum over ranks. */
bool cg_dist_allreduce_max(double *v, int n);

/* Seconds spent in gradient averaging (packing, MPI_Allreduce and
 * unpacking) and in broadcasts since start or the last reset, and the
 * number of gradient bytes sent through MPI_Allreduce. */
double cg_dist_comm_seconds(void);
int64_t cg_dist_comm_bytes(void);
void cg_dist_reset_stats(void);

/* For programs: on ranks other than 0, send stdout and stderr to /dev/null
 * so that rank 0 alone logs (set CG_DIST_VERBOSE=1 to keep every rank's
 * output). The watchdog, MPI failures and cg_dist_abort still print on the
 * rank's original stderr. No-op on rank 0 and for size 1. */
bool cg_dist_quiet_nonroot(void);

/* Print "cgrad dist: rank R: <msg>" on stderr and end every rank of the job
 * (MPI_Abort; exit(code) without MPI). For programs, not library code. */
#ifdef __cplusplus
[[noreturn]] void cg_dist_abort(int code, const char *msg);
#else
_Noreturn void cg_dist_abort(int code, const char *msg);
#endif

#ifdef __cplusplus
}
#endif
#endif
