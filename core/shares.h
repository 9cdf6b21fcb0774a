/* cgrad core, INTERNAL: a loop's chunks in shares with stealing, for loops
 * whose chunks give the same results whichever thread runs them.
 *
 * Each thread of the team starts on a share of its own, the contiguous
 * chunks a static schedule gives it, and takes them front to back; a
 * thread whose share is done takes chunks from the back of the share with
 * the most left. So each thread reads mostly what it would read under the
 * static schedule (what the ops before it wrote on the same core), and a
 * thread slowed down (by the host's other work, or by its chunks) hands
 * its last chunks to the other instead of keeping it waiting. Measured on
 * a 2-core VM whose cores ran up to 30% apart for minutes at a time
 * (docs/performance.md, Zen 5).
 *
 * A loop runs its chunks through cg_shares_run: items [0, n) in chunks of
 * `grain` items, chunk c being [c grain, min(n, (c + 1) grain)), each
 * handed once to fn(begin, end, thread, ctx), ctx shared (chunks read it):
 *
 *     typedef struct { const float *x; float *y; int64_t D; } rows_ctx;
 *     static void rows_chunk(int64_t r0, int64_t r1, int thread, const void *ctx)
 *     {
 *         const rows_ctx *c = ctx;
 *         for (int64_t r = r0; r < r1; r++)
 *             row(c->x + r * c->D, c->y + r * c->D, c->D);
 *     }
 *     ...
 *     const rows_ctx c = {x, y, D};
 *     cg_shares_run(rows, cg_shares_rows(D), cg_shares_team(rows * D > THRESHOLD), rows_chunk, &c);
 *
 * The chunk boundaries depend on n and grain only, never on the team: a
 * loop whose chunk function reads and writes only its chunk's items gives
 * the same bits for any team. `thread` numbers the thread that runs the
 * chunk, below nt (0 without a region, even inside someone else's): the
 * slot of its scratch, for a chunk function that needs some.
 *
 * A team of one (or a single chunk) runs the chunks in order on the
 * calling thread, without a region: entering one costs 1-2.5 us even with
 * a team of one (libgomp sets a team up), which ops on small tensors paid
 * on every call (a gradient check ran 6.9 million such regions, most of
 * its time). Loops the runner cannot express (a barrier or a reduction
 * across the team, a team managed by hand) test their team the same way
 * before entering a region. */
#ifndef CG_SHARES_H
#define CG_SHARES_H

#include <omp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/tensor.h"

/* A share: its next chunk from the front (high 32 bits) and its end
 * (low 32 bits), on a cache line of its own. */
typedef struct {
    _Alignas(64) _Atomic uint64_t fb;
} cg_share;

typedef struct {
    cg_share *s;
    int n; /* shares (threads) */
    cg_share one[2];
} cg_shares;

static inline uint64_t cg_share_pack(int64_t f, int64_t b)
{
    return (uint64_t)f << 32 | (uint64_t)b;
}

/* The team for a loop worth threads (parallel): cg_get_num_threads(), as
 * the products take, or 1 inside a parallel region (nested regions get one
 * thread anyway). Not OpenMP's own default: in a thread the caller made
 * (pthreads) that is OMP_NUM_THREADS or the cores, whatever
 * cg_set_num_threads chose and however few the CPUs. */
static inline int cg_shares_team(bool parallel)
{
    return parallel && !omp_in_parallel() ? cg_get_num_threads() : 1;
}

/* nchunks < 2^31, nt the team's size (a thread numbered nt or above only
 * takes from the others' shares). Short of memory for nt shares, one
 * share holds every chunk (the others take from its back): the same
 * chunks, each once. */
static inline void cg_shares_init(cg_shares *sh, int64_t nchunks, int nt)
{
    sh->n = nt > 0 ? nt : 1;
    sh->s = sh->n <= 2 ? sh->one : (cg_share *)aligned_alloc(64, (size_t)sh->n * sizeof(cg_share));
    if (!sh->s) {
        sh->s = sh->one;
        sh->n = 1;
    }
    for (int t = 0; t < sh->n; t++)
        atomic_init(&sh->s[t].fb, cg_share_pack(nchunks * t / sh->n, nchunks * (t + 1) / sh->n));
}

static inline void cg_shares_free(cg_shares *sh)
{
    if (sh->s != sh->one)
        free(sh->s);
    sh->s = NULL;
}

/* The next chunk for thread t (its own share first), or -1 when none is
 * left anywhere. */
static inline int64_t cg_shares_next(cg_shares *sh, int t)
{
    _Atomic uint64_t *own = &sh->s[t < sh->n ? t : 0].fb;
    for (uint64_t v = atomic_load(own); t < sh->n;) {
        const int64_t f = (int64_t)(v >> 32), b = (int64_t)(v & 0xffffffffu);
        if (f >= b)
            break;
        if (atomic_compare_exchange_weak(own, &v, cg_share_pack(f + 1, b)))
            return f;
    }
    for (;;) { /* the back of the share with the most left */
        int victim = -1;
        int64_t most = 0;
        uint64_t vv = 0;
        for (int u = 0; u < sh->n; u++) {
            const uint64_t v = atomic_load(&sh->s[u].fb);
            const int64_t left = (int64_t)(v & 0xffffffffu) - (int64_t)(v >> 32);
            if (left > most) {
                most = left;
                victim = u;
                vv = v;
            }
        }
        if (victim < 0)
            return -1;
        const int64_t f = (int64_t)(vv >> 32), b = (int64_t)(vv & 0xffffffffu);
        if (atomic_compare_exchange_weak(&sh->s[victim].fb, &vv, cg_share_pack(f, b - 1)))
            return b - 1;
    }
}

/* Rows of len elements a chunk: about CG_SHARES_ELEMS elements, at least
 * one row (the grain of a loop over rows of cheap elementwise work). */
#define CG_SHARES_ELEMS 8192
static inline int64_t cg_shares_rows(int64_t len)
{
    return len > 0 && len < CG_SHARES_ELEMS ? CG_SHARES_ELEMS / len : 1;
}

/* Items [begin, end) of a loop, run by thread `thread` of the team. */
typedef void (*cg_chunk_fn)(int64_t begin, int64_t end, int thread, const void *ctx);

/* fn on the chunks of grain items that cover [0, n): in order on this
 * thread for a team of one (or one chunk), else in shares among nt
 * threads (at most one per chunk) of one region. */
static inline void cg_shares_run(int64_t n, int64_t grain, int nt, cg_chunk_fn fn, const void *ctx)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    const int64_t nchunks = (n + grain - 1) / grain;
    if (nt > nchunks)
        nt = (int)nchunks;
    if (nt <= 1) {
        for (int64_t b = 0; b < n; b += grain)
            fn(b, n - b < grain ? n : b + grain, 0, ctx);
        return;
    }
    cg_shares sh;
    cg_shares_init(&sh, nchunks, nt);
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num();
        for (int64_t c; (c = cg_shares_next(&sh, t)) >= 0;) {
            const int64_t b = c * grain;
            fn(b, n - b < grain ? n : b + grain, t, ctx);
        }
    }
    cg_shares_free(&sh);
}

#endif
