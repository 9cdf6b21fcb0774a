/* cgrad dist, INTERNAL: what the two halves of the MPI backend share
 * (dist_mpi.c: start, stop, watchdog, plain collectives; dist_reducer.c:
 * the reduction during backward). Compiled only with meson's `mpi` option.
 * Not installed. */
#ifndef CG_DIST_DIST_MPI_H
#define CG_DIST_DIST_MPI_H

#include <stdbool.h>
#include <stdint.h>

#include "core/clock.h" /* cg_now: the watchdog's and the counters' clock */
#include "core/tensor.h"

/* Add to the communication counters (cg_dist_comm_seconds, _bytes). */
void cg_dist_count(double seconds, int64_t bytes);
/* True if rc is MPI_SUCCESS; else false and an error naming what and MPI's reason. */
bool cg_dist_mpi_ok(int rc, const char *what);
/* The watchdog's marks around one collective. */
void cg_dist_wd_begin(const char *what);
void cg_dist_wd_end(void);
bool cg_dist_collective_done(const char *what, int rc);
/* Run one collective under the watchdog. */
#define COLLECTIVE(what, call) (cg_dist_wd_begin(what), cg_dist_collective_done((what), (call)))
/* False and an error if cg_dist_init has not run. */
bool cg_dist_check_inited(const char *what);
/* Copy n floats between a bucket b and a tensor t, times s. */
void cg_dist_seg_pack(float *b, float *t, int64_t n, float s);
void cg_dist_seg_unpack(float *b, float *t, int64_t n, float s);
/* p's gradient as a tensor this rank may overwrite with the average: made
 * (zeros) when p has none, copied when it is shared, a view or a graph's
 * output. p holds it (cg_hold), as the engine holds a leaf's .grad, so no
 * scope open around the call releases it. False + error when out of
 * memory. */
bool cg_dist_own_grad(cg_tensor *p);

#endif
