/* core/alloc: the caching allocator behind cg_alloc/cg_free. Run twice by
 * meson: with the cache, and with CG_MALLOC_DEFAULT=1 (plain malloc), where
 * the checks on what is cached are skipped. */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/tensor.h"
#include "models/charlm/charlm.h"
#include "nn/module.h"
#include "optim/optim.h"
#include "tests/testutil.h"

static bool caching(void)
{
    const char *e = getenv("CG_MALLOC_DEFAULT");
    return !(e && *e && *e != '0');
}

/* The bytes a caller may touch: the request rounded up to 64, plus 64. */
static size_t usable(size_t n) { return (n + 63) / 64 * 64 + 64; }

static const size_t sizes[] = {1, 100, 4096, 32704, 32768, 100000, (1 << 20) + 3, 5 << 20};
enum { NS = sizeof sizes / sizeof *sizes };

START_TEST(test_aligned_distinct)
{
    unsigned char *p[NS];
    for (int i = 0; i < NS; i++) {
        p[i] = cg_alloc(sizes[i]);
        ck_assert_ptr_nonnull(p[i]);
        ck_assert_uint_eq((uintptr_t)p[i] % 64, 0);
        memset(p[i], i + 1, usable(sizes[i]));
    }
    for (int i = 0; i < NS; i++) /* no block overlaps another */
        for (size_t j = 0; j < usable(sizes[i]); j += 997)
            ck_assert_uint_eq(p[i][j], (unsigned)(i + 1));
    for (int i = 0; i < NS; i++)
        ck_assert_uint_eq(p[i][usable(sizes[i]) - 1], (unsigned)(i + 1));
    for (int i = 0; i < NS; i++)
        cg_free(p[i]);
    cg_free(NULL);
    ck_assert_ptr_null(cg_alloc(SIZE_MAX - 10));
}
END_TEST

START_TEST(test_reuse)
{
    if (!caching())
        return;
    cg_alloc_trim();
    void *a = cg_alloc(1 << 20), *b = cg_alloc(1 << 20);
    ck_assert_ptr_ne(a, b);
    cg_alloc_stats s = cg_alloc_get_stats();
    ck_assert_uint_ge(s.live_bytes, 2 << 20);
    cg_free(a);
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, s.live_bytes / 2);
    void *c = cg_alloc((1 << 20) - 32); /* the same class: a's block again */
    ck_assert_ptr_eq(c, a);
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, 0);
    ck_assert_uint_eq(cg_alloc_get_stats().live_bytes, s.live_bytes);
    cg_free(b);
    cg_free(c);
    cg_alloc_trim();
}
END_TEST

/* Resident pages of [p, p + n) (mincore), the partial pages at the ends
 * counted whole */
static size_t resident_pages(const void *p, size_t n)
{
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p / pg * pg, e = ((uintptr_t)p + n + pg - 1) / pg * pg;
    size_t np = (e - a) / pg, in = 0;
    unsigned char *v = malloc(np);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(mincore((void *)a, e - a, v), 0);
    for (size_t i = 0; i < np; i++)
        in += v[i] & 1;
    free(v);
    return in;
}

static bool all_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return false;
    return true;
}

/* cg_alloc_zeroed: zeros of every size, fresh or reused; a fresh mapping
 * left untouched (its pages not resident until written: loading a model
 * into zeroed parameters faults each page once, in the read), a reused
 * block cleared; cg_zeros and cg_zeros_dtype the same through the tensor
 * API. */
START_TEST(test_zeroed)
{
    for (int i = 0; i < NS; i++) {
        cg_alloc_trim(); /* an empty cache: a fresh mapping */
        unsigned char *a = cg_alloc_zeroed(sizes[i]);
        ck_assert_ptr_nonnull(a);
        if (caching() && sizes[i] >= (1 << 20)) /* the header's page only (before it is read) */
            ck_assert_uint_le(resident_pages(a, sizes[i]), 1);
        ck_assert(all_zero(a, sizes[i]));
        memset(a, 0xab, usable(sizes[i]));
        cg_free(a);
        unsigned char *b = cg_alloc_zeroed(sizes[i]); /* a's block again, when cached */
        ck_assert_ptr_nonnull(b);
        if (caching() && sizes[i] >= 32768)
            ck_assert_ptr_eq(b, a);
        ck_assert(all_zero(b, sizes[i]));
        cg_free(b);
    }
    const int64_t shape[2] = {512, 1024};
    for (int dt = 0; dt < CG_NDTYPES; dt++) {
        cg_tensor *t = cg_full_dtype((cg_dtype)dt, 2, shape, 1.0);
        ck_assert_ptr_nonnull(t);
        cg_release(t); /* its block, cached, holds ones */
        cg_tensor *z =
            (cg_dtype)dt == CG_F32 ? cg_zeros(2, shape) : cg_zeros_dtype((cg_dtype)dt, 2, shape);
        ck_assert_ptr_nonnull(z);
        ck_assert(all_zero(cg_data_ptr(z), (size_t)cg_numel(z) * cg_dtype_size((cg_dtype)dt)));
        cg_release(z);
    }
    cg_alloc_trim();
}
END_TEST

/* A request whose class is empty takes a cached block less than 2x larger
 * as is (a bf16 copy of an activation, half its bytes, does not take the
 * fp32 block the activation freed); failing that, when a fresh mapping would take the mapped total past
 * the budget (1/16 over the peak of live bytes), a larger cached block
 * (split from 2x on: test_over_budget_reach) or a smaller one grown.
 * A block is never shrunk in place (issue 37: shapes that change every step
 * then fault nothing). The blocks are mostly never
 * touched: virtual only. */
START_TEST(test_resize)
{
    if (!caching())
        return;
    cg_alloc_trim();
    size_t big = 2 * cg_alloc_get_stats().peak_live_bytes + (64 << 20);
    size_t live0 = cg_alloc_get_stats().live_bytes;
    char *a = cg_alloc(big);
    a[0] = a[big - 1] = 1;
    size_t a_block = cg_alloc_get_stats().live_bytes - live0;
    cg_free(a);
    /* 2.5x smaller: a fresh block, within the budget of a peak of 2 big */
    char *t = cg_alloc(2 * big);
    t[0] = 1;
    cg_free(t);
    cg_alloc_trim();
    a = cg_alloc(big);
    cg_free(a);
    char *h = cg_alloc(big / 5 * 2);
    ck_assert_ptr_ne(h, a);
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, a_block);
    cg_free(h);
    cg_alloc_trim();
    a = cg_alloc(big);
    a[0] = a[big - 1] = 1;
    cg_free(a);
    char *b = cg_alloc(big / 10 * 6); /* 1.7x smaller: a's block as is */
    cg_alloc_stats s = cg_alloc_get_stats();
    ck_assert_ptr_eq(b, a);
    ck_assert_uint_eq(s.cached_bytes, 0);
    ck_assert_uint_eq(s.live_bytes - live0, a_block);
    b[0] = b[usable(big / 10 * 6) - 1] = 2;
    cg_free(b);
    char *c = cg_alloc(big / 2 * 3); /* nothing larger, no budget: a's block grown */
    s = cg_alloc_get_stats();
    ck_assert_uint_eq(s.cached_bytes, 0);
    ck_assert_uint_gt(s.live_bytes - live0, big / 2 * 3);
    c[0] = c[usable(big / 2 * 3) - 1] = 3;
    cg_free(c);
    char *d = cg_alloc(big / 10 * 14); /* one class smaller: as is */
    ck_assert_uint_eq(cg_alloc_get_stats().live_bytes, s.live_bytes);
    d[usable(big / 10 * 14) - 1] = 4;
    cg_free(d);
    char *e = cg_alloc(big / 128); /* 2x smaller or more, within the budget: fresh */
    ck_assert_ptr_ne(e, d);
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, s.live_bytes - live0);
    cg_free(e);
    cg_alloc_trim();
}
END_TEST

/* Over the budget a request takes the nearest larger cached block, however
 * much larger (once bounded at 4x, which made requests grow the smaller
 * blocks other requests then missed, every step). From 2x on the block is
 * split: the request takes its front, the rest is cached as a block of its
 * own and serves the next request, so live bytes count what is used (issue
 * 32: bf16 training's smaller tensors took the blocks fp32 activations
 * freed, as they were). Freed, the pieces merge back into the whole block.
 * Every byte stays usable and apart. */
START_TEST(test_over_budget_reach)
{
    if (!caching())
        return;
    cg_alloc_trim();
    size_t big = 2 * cg_alloc_get_stats().peak_live_bytes + (64 << 20);
    size_t live0 = cg_alloc_get_stats().live_bytes;
    char *a = cg_alloc(big), *b = cg_alloc(big); /* the peak: about 2 big */
    a[0] = b[0] = 1;
    size_t a_block = (cg_alloc_get_stats().live_bytes - live0) / 2;
    cg_free(a);
    cg_alloc_stats s0 = cg_alloc_get_stats();
    char *c = cg_alloc(big / 5); /* over the budget; a is 5x larger: its front */
    ck_assert_ptr_eq(c, a);
    cg_alloc_stats s1 = cg_alloc_get_stats();
    size_t c_block = s1.live_bytes - s0.live_bytes;
    ck_assert_uint_ge(c_block, usable(big / 5));
    ck_assert_uint_le(c_block, usable(big / 5) / 8 * 9 + 4096);    /* c's class, not a's */
    ck_assert_uint_eq(s1.cached_bytes, s0.cached_bytes - c_block); /* the rest stays cached */
    char *d = cg_alloc(big / 3);                                   /* the rest's front */
    ck_assert_ptr_eq(d, c + c_block);
    size_t d_block = cg_alloc_get_stats().live_bytes - s1.live_bytes;
    char *e = cg_alloc(big / 3); /* the front of what is left */
    ck_assert_ptr_eq(e, d + d_block);
    memset(c, 3, usable(big / 5));
    memset(d, 4, usable(big / 3));
    memset(e, 5, usable(big / 3));
    ck_assert_uint_eq((unsigned char)c[usable(big / 5) - 1], 3);
    ck_assert_uint_eq((unsigned char)d[usable(big / 3) - 1], 4);
    ck_assert_uint_eq((unsigned char)e[0], 5);
    cg_free(d);
    cg_free(c);
    cg_free(e);
    /* c, d and e merged with what was left of a: a whole again, taken as is */
    s1 = cg_alloc_get_stats();
    ck_assert_uint_eq(s1.live_bytes, s0.live_bytes);
    ck_assert_uint_eq(s1.cached_bytes, s0.cached_bytes);
    char *f = cg_alloc(big);
    ck_assert_ptr_eq(f, a);
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, s0.cached_bytes - a_block);
    memset(f, 6, usable(big));
    cg_free(f);
    cg_free(b);
    ck_assert_uint_eq(cg_alloc_get_stats().live_bytes, live0);
    cg_alloc_trim();
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, 0);
}
END_TEST

/* bf16 training's pattern over its budget: a large transient freed, then a
 * smaller tensor that outlives it, then the large one again, every step.
 * The split block's pieces merge when freed, so the steps reach a steady
 * state: after the first, nothing is mapped, grown or unmapped, and the
 * mapped total stays put. A piece freed while its neighbours live, or
 * unmapped by a trim, leaves them whole and usable. */
START_TEST(test_split_steady)
{
    if (!caching())
        return;
    cg_alloc_trim();
    const size_t big = 2 * cg_alloc_get_stats().peak_live_bytes + (64 << 20);
    char *keep = cg_alloc(big);
    keep[0] = 1;
    size_t mapped1 = 0;
    for (int step = 0; step < 8; step++) {
        char *x = cg_alloc(big / 2 * 3); /* the fp32 transient */
        x[0] = 1;
        cg_free(x);
        char *y = cg_alloc(big / 2); /* a third of it: splits x's block */
        if (step == 0)
            ck_assert_ptr_eq(y, x);
        char *x2 = cg_alloc(big / 2 * 3); /* the transient of the next layer */
        memset(y, 2, usable(big / 2));
        x2[usable(big / 2 * 3) - 1] = 3;
        ck_assert_uint_eq((unsigned char)y[usable(big / 2) - 1], 2);
        cg_free(y);
        cg_free(x2);
        cg_alloc_stats s = cg_alloc_get_stats();
        if (step == 1)
            mapped1 = s.live_bytes + s.cached_bytes;
        if (step > 1)
            ck_assert_uint_eq(s.live_bytes + s.cached_bytes, mapped1);
    }
    /* a piece unmapped by a trim while its neighbour lives */
    char *x = cg_alloc(big / 2 * 3), *x2 = cg_alloc(big / 2 * 3);
    cg_free(x);
    char *y = cg_alloc(big / 2);
    ck_assert_ptr_eq(y, x);
    cg_alloc_trim(); /* unmaps the rest of x's block (and nothing live) */
    memset(y, 7, usable(big / 2));
    cg_free(y);
    char *z = cg_alloc(big / 2);
    memset(z, 8, usable(big / 2));
    cg_free(z);
    cg_free(x2);
    cg_free(keep);
    cg_alloc_trim();
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, 0);
}
END_TEST

/* Shapes that change every step reach a steady state: after the first
 * rounds every request is served from the cache (no fresh mapping, no
 * growth), whatever the order of the sizes. */
START_TEST(test_changing_shapes_steady)
{
    if (!caching())
        return;
    cg_alloc_trim();
    const size_t mb = 1 << 20;
    size_t sizes[3][3] = {{40 * mb, 6 * mb, 2 * mb},
                          {25 * mb, 4 * mb, 3 * mb},
                          {48 * mb, 5 * mb, 1 * mb}}; /* three "batches" */
    size_t mapped_after_warmup = 0;
    for (int round = 0; round < 20; round++) {
        for (int k = 0; k < 3; k++) {
            void *p[3];
            for (int i = 0; i < 3; i++)
                p[i] = cg_alloc(sizes[(k + round) % 3][i]);
            for (int i = 0; i < 3; i++)
                cg_free(p[i]);
        }
        cg_alloc_stats s = cg_alloc_get_stats();
        if (round == 2)
            mapped_after_warmup = s.live_bytes + s.cached_bytes;
        if (round > 2) /* nothing mapped since: the same blocks */
            ck_assert_uint_eq(s.live_bytes + s.cached_bytes, mapped_after_warmup);
    }
    cg_alloc_trim();
}
END_TEST

/* An inference pass's pattern: a large block freed, then smaller requests
 * over the budget, which take its pieces; at the end of the pass the live
 * bytes fall to nothing and the pieces merge back. Nothing but the large
 * block is mapped, every block stays cached and the next passes map
 * nothing. (Capped at the peak of live bytes, the cache unmapped the
 * requests' blocks, then mapped fresh, at the end of every pass and the
 * next one mapped them again: a third of charlm eval's time.) It runs
 * first, while the peak of live bytes is small: the other tests' blocks
 * raise it to gigabytes, and five times that would not map. */
START_TEST(test_passes_steady)
{
    if (!caching())
        return;
    cg_alloc_trim();
    const size_t u = cg_alloc_get_stats().peak_live_bytes + (1 << 20);
    const size_t live0 = cg_alloc_get_stats().live_bytes;
    size_t mapped0 = 0, big_block = 0;
    for (int pass = 0; pass < 4; pass++) {
        char *big = cg_alloc(5 * u);
        big[0] = 1;
        big_block = cg_alloc_get_stats().live_bytes - live0;
        cg_free(big);
        char *a[3];
        for (int i = 0; i < 3; i++) {
            a[i] = cg_alloc(u);
            a[i][0] = a[i][usable(u) - 1] = (char)i;
        }
        ck_assert_ptr_eq(a[0], big); /* its front, the others after it */
        cg_alloc_stats s = cg_alloc_get_stats();
        if (pass == 0)
            mapped0 = s.live_bytes + s.cached_bytes;
        ck_assert_uint_eq(mapped0, live0 + big_block); /* nothing mapped but the large block */
        ck_assert_uint_eq(s.live_bytes + s.cached_bytes, mapped0);
        for (int i = 0; i < 3; i++)
            cg_free(a[i]);
        s = cg_alloc_get_stats();
        ck_assert_uint_eq(s.live_bytes, live0);
        ck_assert_uint_eq(s.live_bytes + s.cached_bytes, mapped0);
    }
    cg_alloc_trim();
}
END_TEST

/* The smallest power of two of at least n: a size class (eight a power
 * of two, from 32 KB), whose 64ths from A / 2 down are classes too. */
static size_t pow2_at_least(size_t n)
{
    size_t a = 1;
    while (a < n)
        a *= 2;
    return a;
}

/* The pieces of a split block stay where they are, beside each other:
 * freed, a piece merges with the cached pieces beside it, and the piece
 * after a merge points at the merged block, so that the whole block comes
 * back when every piece is free; a piece is never grown (mremap would move
 * it away from its neighbours), whether it sits on a free list of a class
 * above its size or is the front of its block; a piece unmapped by a trim
 * leaves its live neighbour whole. The sizes are exact classes: A (a power
 * of two), its pieces 18/64, 15/64 and 31/64 of A, the last no class (the
 * classes there are even 64ths). */
START_TEST(test_pieces_stay_put)
{
    if (!caching())
        return;
    cg_alloc_trim();
    /* a and b (2 A) pass the peak of live bytes: the budget is theirs */
    const size_t A = pow2_at_least(cg_alloc_get_stats().peak_live_bytes / 2 + (16 << 20));
    const size_t d_block = A / 64 * 18, e_block = A / 64 * 15, r_block = A / 64 * 31;
    char *a = cg_alloc(A - 128), *b = cg_alloc(A - 128);
    cg_free(a);
    char *d = cg_alloc(d_block - 128); /* over the budget: a's front */
    char *e = cg_alloc(e_block - 128); /* the rest's front */
    ck_assert_ptr_eq(d, a);
    ck_assert_ptr_eq(e, d + d_block);
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, r_block);
    char *g = cg_alloc(A / 64 * 30 - 128); /* the class below the rest's size: the rest */
    ck_assert_ptr_eq(g, e + e_block);
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, 0);
    /* e, then d merged with it: g's left neighbour is d + e, so freeing g
     * makes a whole again */
    cg_free(e);
    cg_free(d);
    cg_free(g);
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, A);
    char *f = cg_alloc(A - 128);
    ck_assert_ptr_eq(f, a);
    cg_free(f);
    /* split again; d freed while e lives: a request one class above d's,
     * over the budget, maps a fresh block and leaves d where it is */
    d = cg_alloc(d_block - 128);
    e = cg_alloc(e_block - 128);
    g = cg_alloc(A / 64 * 30 - 128);
    ck_assert_ptr_eq(g, e + e_block);
    cg_free(d);
    char *x = cg_alloc(A / 64 * 20 - 128);
    ck_assert_ptr_ne(x, d);
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, d_block);
    cg_free(x);
    /* d unmapped by a trim: e, its right neighbour, then freed alone */
    cg_alloc_trim();
    e[0] = e[usable(e_block - 128) - 1] = 5;
    cg_free(e);
    cg_free(g);
    cg_alloc_trim();
    /* the rest (31/64: no class) cached, a request of the class above it
     * (32/64) maps a fresh block: the rest is not grown */
    a = cg_alloc(A - 128);
    cg_free(a);
    d = cg_alloc(d_block - 128);
    e = cg_alloc(e_block - 128);
    ck_assert_ptr_eq(e, d + d_block);
    char *h = cg_alloc(r_block - 192);
    ck_assert_ptr_ne(h, e + e_block);
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, r_block);
    h[0] = h[usable(r_block - 192) - 1] = 6;
    e[0] = e[usable(e_block - 128) - 1] = 7;
    cg_free(h);
    cg_free(d);
    cg_free(e);
    cg_alloc_trim();
    /* over the budget, a block exactly twice the request's class (8
     * classes above) is split (from 2x on): the request takes its front */
    a = cg_alloc(A - 128);
    cg_free(a);
    d = cg_alloc(A / 2 - 128);
    ck_assert_ptr_eq(d, a);
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, A / 2);
    cg_free(d);
    cg_free(b);
    cg_alloc_trim();
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, 0);
}
END_TEST

/* The reach of a request within the budget (a peak of live bytes of 64
 * MiB at least, far above these blocks), at its edge: a cached block 7
 * classes above the request's (15/8 of it) is taken as is, one 8 classes
 * above (2x) is not: a fresh mapping; of two blocks above within reach,
 * the nearer is taken. */
START_TEST(test_reach_edges)
{
    if (!caching())
        return;
    cg_free(cg_alloc(64 << 20)); /* the peak, in a process of its own too */
    cg_alloc_trim();
    char *p = cg_alloc((15 << 16) - 128);
    cg_free(p);
    char *q = cg_alloc((8 << 16) - 128); /* 7 classes below p's: p's block */
    ck_assert_ptr_eq(q, p);
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, 0);
    cg_free(q);
    cg_alloc_trim();
    p = cg_alloc((16 << 16) - 128);
    cg_free(p);
    q = cg_alloc((8 << 16) - 128); /* 8 classes below: fresh */
    ck_assert_ptr_ne(q, p);
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, 16 << 16);
    cg_free(q);
    cg_alloc_trim();
    /* of two cached blocks above, the nearer */
    char *p1 = cg_alloc((9 << 16) - 128), *p5 = cg_alloc((13 << 16) - 128);
    cg_free(p5);
    cg_free(p1);
    q = cg_alloc((8 << 16) - 128);
    ck_assert_ptr_eq(q, p1);
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, 13 << 16);
    cg_free(q);
    cg_alloc_trim();
}
END_TEST

/* CG_ALLOC_CACHE_MB=1 (meson's test_alloc_capped runs this case alone with
 * it): a freed block is cached while the cached bytes stay within 1 MiB,
 * else unmapped, whatever the peak of live bytes. */
START_TEST(test_cache_cap)
{
    const char *cap = getenv("CG_ALLOC_CACHE_MB");
    if (!caching() || !cap || strcmp(cap, "1") != 0)
        return;
    cg_alloc_trim();
    const size_t live0 = cg_alloc_get_stats().live_bytes;
    char *p = cg_alloc((1 << 19) - 128), *q = cg_alloc((2 << 20) - 128);
    ck_assert_uint_eq(cg_alloc_get_stats().live_bytes - live0, (1 << 19) + (2 << 20));
    cg_free(p); /* 512 KiB: cached */
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, 1 << 19);
    cg_free(q); /* 2 MiB more would pass 1 MiB: unmapped */
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, 1 << 19);
    ck_assert_uint_eq(cg_alloc_trim(), 1 << 19);
}
END_TEST

START_TEST(test_trim)
{
    cg_alloc_trim();
    size_t live0 = cg_alloc_get_stats().live_bytes;
    void *p[NS];
    for (int i = 0; i < NS; i++)
        p[i] = cg_alloc(sizes[i]);
    size_t live = cg_alloc_get_stats().live_bytes - live0;
    for (int i = 0; i < NS; i++)
        cg_free(p[i]);
    cg_alloc_stats s = cg_alloc_get_stats();
    ck_assert_uint_eq(s.cached_bytes, caching() ? live : 0);
    ck_assert_uint_eq(cg_alloc_trim(), s.cached_bytes);
    s = cg_alloc_get_stats();
    ck_assert_uint_eq(s.cached_bytes, 0);
    ck_assert_uint_eq(s.live_bytes, live0);
    ck_assert_uint_eq(cg_alloc_trim(), 0);
}
END_TEST

START_TEST(test_malloc_default)
{
    if (caching())
        return;
    void *p = cg_alloc(4 << 20);
    ck_assert_uint_eq((uintptr_t)p % 64, 0);
    cg_alloc_stats s = cg_alloc_get_stats();
    ck_assert_uint_eq(s.live_bytes + s.cached_bytes + s.peak_live_bytes, 0);
    cg_free(p);
}
END_TEST

/* Threads allocate, fill, check and free blocks of every size at once. */
START_TEST(test_threads)
{
    size_t live0 = cg_alloc_get_stats().live_bytes;
    int bad = 0;
#pragma omp parallel num_threads(4) reduction(+ : bad)
    {
        unsigned tid = (unsigned)omp_get_thread_num() + 1, x = tid * 2654435761u;
        unsigned char *held[8] = {0};
        size_t held_n[8] = {0};
        for (int it = 0; it < 500; it++) {
            int slot = it % 8;
            if (held[slot]) {
                bad += held[slot][0] != tid || held[slot][held_n[slot] - 1] != tid;
                cg_free(held[slot]);
            }
            x = x * 1664525u + 1013904223u;
            size_t n = (size_t)1 << ((x >> 28) + 6); /* 64 B .. 2 MB, and up to twice that */
            n += (x >> 8) % n;
            held[slot] = cg_alloc(n);
            held_n[slot] = n;
            memset(held[slot], (int)tid, n);
        }
        for (int s = 0; s < 8; s++)
            cg_free(held[s]);
    }
    ck_assert_int_eq(bad, 0);
    ck_assert_uint_eq(cg_alloc_get_stats().live_bytes, live0);
}
END_TEST

/* A small char LM trained on batches of four lengths in turn: once every
 * length has been seen, the mapped bytes (live + cached) after a step depend
 * only on the step's length, and the peak of live bytes stays put. */
static void train_steps(cg_charlm *m, cg_optim *opt, int from, int to, const int64_t *ids)
{
    static const int64_t lens[] = {32, 17, 29, 8};
    for (int s = from; s < to; s++) {
        int64_t T = lens[s % 4], B = 8;
        cg_module_zero_grad(CG_MODULE(m));
        cg_tensor *logits = cg_charlm_forward(m, ids, B, T);
        cg_tensor *loss = cg_charlm_loss(m, logits, ids + 1);
        ck_assert_ptr_nonnull(loss);
        ck_assert(cg_backward(loss, NULL, false));
        ck_assert(cg_optim_step(opt));
        cg_release(logits);
        cg_release(loss);
    }
}

START_TEST(test_training_flat)
{
    if (!caching())
        return;
    cg_charlm_config c = cg_charlm_config_default();
    c.vocab = 40, c.d = 64, c.H = 2, c.layers = 2, c.d_ff = 256, c.max_len = 32;
    cg_charlm *m = cg_charlm_new(&c, 7);
    ck_assert_ptr_nonnull(m);
    cg_optim *opt = cg_adamw_from_module(CG_MODULE(m), 1e-3);
    int64_t ids[8 * 32 + 1];
    for (int i = 0; i < 8 * 32 + 1; i++)
        ids[i] = (i * 7 + 3) % 40;
    cg_alloc_trim();
    train_steps(m, opt, 0, 12, ids);
    cg_alloc_stats s12 = cg_alloc_get_stats();
    train_steps(m, opt, 12, 48, ids);
    cg_alloc_stats s48 = cg_alloc_get_stats();
    ck_assert_uint_eq(s48.live_bytes + s48.cached_bytes, s12.live_bytes + s12.cached_bytes);
    ck_assert_uint_eq(s48.peak_live_bytes, s12.peak_live_bytes);
    cg_optim_free(opt);
    cg_charlm_free(m);
}
END_TEST

/* Whether the page of p is mapped in this process (mincore: ENOMEM if not). */
static bool mapped(const void *p)
{
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    unsigned char v;
    return mincore((void *)((uintptr_t)p & ~(pg - 1)), 1, &v) == 0;
}

/* The minor page faults of writing n bytes at p. */
static long faults_writing(char *p, size_t n, char v)
{
    struct rusage a, b;
    getrusage(RUSAGE_SELF, &a);
    memset(p, v, n);
    getrusage(RUSAGE_SELF, &b);
    return b.ru_minflt - a.ru_minflt;
}

/* The exit status of a child, or -1. */
static int child_status(pid_t pid)
{
    int st = 0;
    ck_assert_int_gt(pid, 0);
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* cg_fork_without_buffers (core/tensor.h): the child has none of cg_alloc's
 * blocks, live or cached, whole, split or grown (mremap), and has the rest
 * (malloc's small blocks, other mappings); the parent's blocks stay as they
 * were and writable: writing 16 MiB after such a fork faults no page, where
 * after a plain fork() it faults every one (copy-on-write). Then a plain
 * fork()'s child has the blocks again. */
START_TEST(test_fork_without_buffers)
{
    if (!caching()) { /* a plain fork: the child has everything */
        char *a = cg_alloc(1 << 20);
        a[0] = 3;
        pid_t pid = cg_fork_without_buffers();
        if (pid == 0)
            _exit(a[0] == 3 ? 0 : 1);
        ck_assert_int_eq(child_status(pid), 0);
        cg_free(a);
        return;
    }
    cg_alloc_trim();
    /* over the budget (test_pieces_stay_put's blocks): a's front d, the
     * rest's front e, the rest r cached; then b cached and grown (mremap)
     * into g */
    const size_t A = pow2_at_least(cg_alloc_get_stats().peak_live_bytes / 2 + (16 << 20));
    const size_t d_block = A / 64 * 18, e_block = A / 64 * 15;
    char *a = cg_alloc(A - 128), *b = cg_alloc(A - 128);
    cg_free(a);
    char *d = cg_alloc(d_block - 128), *e = cg_alloc(e_block - 128);
    ck_assert(d == a && e == d + d_block);
    char *r = e + e_block;
    cg_free(b);
    char *g = cg_alloc(A + A / 2 - 128);
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, A / 64 * 31); /* r alone: b grown */
    char *small = malloc(64),
         *other = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(small && other != MAP_FAILED);
    const size_t W = 16 << 20; /* the bytes written (A is larger, untouched) */
    memset(d, 1, W);
    g[A + A / 2 - 129] = 2;
    /* each block's first and last bytes (a block's header is the 64 bytes
     * before the pointer) */
    const char *const left_out[] = {d, d + d_block - 65,  e, r, r + A / 64 * 31 - 65,
                                    g, g + A + A / 2 - 65};
    pid_t pid = cg_fork_without_buffers();
    if (pid == 0) {
        int bad = 0;
        for (int i = 0; i < 7; i++)
            bad |= mapped(left_out[i]) ? 1 << i : 0;
        bad |= !mapped(small) || !mapped(other) ? 1 << 7 : 0;
        _exit(bad);
    }
    ck_assert_int_eq(child_status(pid), 0);
    ck_assert(d[0] == 1 && d[W - 1] == 1 && g[A + A / 2 - 129] == 2);
    long after_ours = faults_writing(d, W, 4);
    pid = fork();
    if (pid == 0)
        _exit(d[W / 2] == 4 && g[A + A / 2 - 129] == 2 ? 0 : 1); /* a plain fork's child */
    ck_assert_int_eq(child_status(pid), 0);
    long after_plain = faults_writing(d, W, 5);
    ck_assert_msg(after_ours < 64 &&
                      after_plain > after_ours, /* 4096 4 KiB pages, or 8 huge ones */
                  "writing 16 MiB faulted %ld pages after cg_fork_without_buffers, %ld after fork",
                  after_ours, after_plain);
    munmap(other, 4096);
    free(small);
    cg_free(d);
    cg_free(e);
    cg_free(g);
    cg_alloc_trim();
    ck_assert_uint_eq(cg_alloc_get_stats().cached_bytes, 0);
}
END_TEST

static Suite *alloc_suite(void)
{
    Suite *s = suite_create("alloc");
    TCase *tc = tcase_create("alloc");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_passes_steady);
    tcase_add_test(tc, test_aligned_distinct);
    tcase_add_test(tc, test_reuse);
    tcase_add_test(tc, test_zeroed);
    tcase_add_test(tc, test_resize);
    tcase_add_test(tc, test_over_budget_reach);
    tcase_add_test(tc, test_split_steady);
    tcase_add_test(tc, test_changing_shapes_steady);
    tcase_add_test(tc, test_trim);
    tcase_add_test(tc, test_malloc_default);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_training_flat);
    tcase_add_test(tc, test_pieces_stay_put);
    tcase_add_test(tc, test_reach_edges);
    tcase_add_test(tc, test_fork_without_buffers);
    suite_add_tcase(s, tc);
    TCase *capped = tcase_create("capped"); /* alone under CG_ALLOC_CACHE_MB=1 */
    tcase_add_test(capped, test_cache_cap);
    suite_add_tcase(s, capped);
    return s;
}

int main(void)
{
    Suite *s = alloc_suite();
    return cg_test_run(&s, 1);
}
