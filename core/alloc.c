/* cg_alloc / cg_free: a caching allocator for tensor buffers.
 *
 * A training step allocates and frees the same large buffers every step.
 * glibc's heap served them before, and its layout decided the peak: blocks
 * freed below the heap top could not always be reused for the next step's
 * sizes, so the resident set grew with the layout, not with the live bytes.
 *
 * Here a block of MAP_MIN (32 KB) or more is its own anonymous mapping,
 * outside the heap. Sizes are rounded up to size classes, eight per power of
 * two (at most 12.5% rounding; from 32 KB on every class is a whole number
 * of pages), and a freed block goes to its class's free list with its pages
 * still resident, so the next step reuses them without faulting. A request
 * takes, in order:
 *   1. a block of its own class;
 *   2. the nearest larger cached block less than 2x larger (at most
 *      SLACK_CLASSES classes), as is;
 *   3. a fresh mapping, if the mapped total (live + cached) stays at most
 *      1/16 over the peak of live bytes;
 *   4. the nearest larger cached block: as is when less than 2x larger,
 *      else split: its front becomes the request's block and the rest a
 *      cached block of its own; or else the nearest smaller whole block
 *      (not a piece of a split one), grown with mremap (its pages move with
 *      it, only the new tail is faulted in);
 *   5. a fresh mapping (the cache is empty, or holds only pieces smaller
 *      than the request).
 * A freed piece of a split block is merged with the pieces beside it that
 * are cached, so the block is whole again once all of it is free.
 * A block is never shrunk in place. Batches whose shapes change every step (the
 * translator's length-sorted batches) then reach a steady state with no
 * system call and no page fault: each request finds a resident block of
 * its class or a larger one. Shrinking a larger block to the request and
 * growing it again at the next larger one cost the translator 12,600 page
 * faults a step (issue 37); the price is a larger resident set there
 * (277 -> 453 MB on seq2seq tiny with BPE 4000), the blocks that served
 * smaller requests staying resident, while fixed shapes (the bench) reuse
 * their own classes as before.
 *
 * The cache is bounded: a freed block is unmapped instead when the mapped
 * total (live + cached) would pass twice the peak of live bytes or, when
 * CG_ALLOC_CACHE_MB is set, the cached bytes would pass it. (The bound was the cached bytes under the
 * peak of live bytes. An inference pass maps more than its peak (blocks of
 * classes that its other requests cannot take), and between passes its live
 * bytes fall to the weights: the cache then unmapped at the end of every
 * pass what the next one mapped again, 1,700 page faults a pass of charlm
 * eval and a third of its time. The worst case of both bounds is the same
 * twice the peak.) cg_alloc_trim() unmaps every cached block.
 * Small blocks come from malloc. CG_MALLOC_DEFAULT=1 sends every block to
 * malloc with glibc's default tuning. One mutex guards the lists; system
 * calls run outside it.
 *
 * Every block starts with a 64-byte header (the mapping's size, or 0 for a
 * malloc'd block), so the memory returned is 64-byte aligned. Under
 * AddressSanitizer a cached block and the unused tail of a block are
 * poisoned, so use after free and overruns are still reported. */
#include "core/parse.h"
#include "core/tensor.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define HEADER 64
#define MAP_MIN ((size_t)32 << 10) /* smaller blocks come from malloc */
#define CLASS_MIN_LOG 15           /* the smallest class: 32 KB */
#define NCLASS (8 * 40)            /* up to 2^55 bytes */
/* Step 2's reach: under 2x. It was 32x (five powers of two); then the
 * bf16 copies of activations that bf16 training keeps for backward (half
 * the bytes) and ReLU's bool masks (a quarter) took the fp32 blocks the
 * activations had freed, as they were, and saved nothing (issue 32: bf16
 * peak RSS of charlm base 1,099 -> 1,001 MB with this change, of fp32
 * 1,048 -> 1,005; the translator's real recipe faults no more pages: 58k
 * in 45 steps either way). */
#define SLACK_CLASSES 7
/* Step 4 reaches every larger block. It reached under 4x while it took
 * blocks as is (unbounded then, the first bf16 step of charlm base served
 * seven 6.5 MiB requests with 26 MiB blocks, 136 MiB of its peak, issue
 * 32); once it split them, that bound only sent requests over the budget
 * to grow the smaller blocks that other requests of the step then missed,
 * every step: LLaMA base's bf16 peak RSS climbed from 647 MB after one
 * step to 706 after six (the mapped total from 729 to 791 MB, a dozen
 * blocks grown a step), where splitting the larger blocks that were
 * cached reached its steady state in the first step (632 MB; fp32 960
 * against 969; the six presets and the translator's real recipe level or
 * lower, 2026-12-06, docs/performance.md).
 * From 2x on step 4 splits. Taken as is, the block's rest stayed
 * resident and unused while the request lived: in bf16 training an
 * attention's weights (4.5 MiB on seq2seq base) took the 13 MiB blocks the
 * feed-forward's fp32 activations (read only through their bf16 copies)
 * had freed, and the next layer's feed-forward mapped a fresh one (issue
 * 32: bf16 peak RSS of seq2seq base 378 -> 361 MB, of charlm base 723 ->
 * 669; fp32 level; the translator's real recipe 139 -> 134 MB in bf16, 193
 * -> 172 in fp32, with fewer page faults). Splitting without merging made
 * the steady state drift instead: pieces grown or cached in other classes
 * every step (charlm tiny bf16 faulted twice the pages). */
#define BUDGET_SLACK 16 /* fresh mappings up to 1/16 over the peak of live bytes */
#define BITMAP_WORDS (NCLASS / 64)

typedef struct block {
    size_t bytes;                /* a class size (or a split piece's), 0 if malloc'd */
    struct block *next, *prev;   /* free list links while cached */
    struct block *anext, *aprev; /* g_all's links while listed */
    size_t left;                 /* bytes of the piece before it in its mapping, 0 if none */
    bool right;                  /* a piece follows it in its mapping */
    bool cached;                 /* on a free list */
    bool listed;                 /* on g_all */
} block;
_Static_assert(sizeof(block) <= HEADER, "a block's header holds its links");

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static block *g_free[NCLASS];
/* Every mapped block, live or cached, pieces included (for cg_fork_without_buffers):
 * a block leaves it before it is unmapped, moved (mremap) or merged into its
 * neighbour. */
static block *g_all;
static uint64_t g_nonempty[BITMAP_WORDS];
static cg_alloc_stats g_stats;
static size_t g_cache_limit = SIZE_MAX; /* SIZE_MAX: twice the peak of live bytes, mapped */
static bool g_malloc_only;

/* ------------------------------------------------------------ size classes */

static size_t class_bytes(int c) { return (size_t)(8 + c % 8) << (c / 8 + CLASS_MIN_LOG - 3); }

/* The smallest class of at least n bytes (n >= MAP_MIN). */
static int size_class(size_t n)
{
    int k = 63 - __builtin_clzll(n - 1); /* 2^k < n <= 2^(k+1) */
    int m = (int)((n - 1) >> (k - 3)) + 1;
    return (k - CLASS_MIN_LOG) * 8 + m - 8;
}

/* The largest class of at most n bytes (n >= MAP_MIN, a whole number of
 * pages): the list a block of n bytes is cached on, so that a block taken
 * from class c holds at least class_bytes(c). */
static int class_floor(size_t n)
{
    int c = size_class(n);
    return class_bytes(c) == n ? c : c - 1;
}

/* ------------------------------------------------------------ free lists */
/* Doubly linked, so that a piece can leave its list when its neighbour
 * merges with it. All under g_lock. */

static void list_push(block *b)
{
    int c = class_floor(b->bytes);
    b->prev = NULL;
    b->next = g_free[c];
    if (b->next)
        b->next->prev = b;
    g_free[c] = b;
    b->cached = true;
    g_nonempty[c / 64] |= (uint64_t)1 << (c % 64);
    g_stats.cached_bytes += b->bytes;
}

static void list_unlink(block *b)
{
    int c = class_floor(b->bytes);
    if (b->prev)
        b->prev->next = b->next;
    else
        g_free[c] = b->next;
    if (b->next)
        b->next->prev = b->prev;
    if (!g_free[c])
        g_nonempty[c / 64] &= ~((uint64_t)1 << (c % 64));
    b->cached = false;
    g_stats.cached_bytes -= b->bytes;
}

static block *list_pop(int c)
{
    block *b = g_free[c];
    list_unlink(b);
    return b;
}

static void all_add(block *b)
{
    b->aprev = NULL;
    b->anext = g_all;
    if (g_all)
        g_all->aprev = b;
    g_all = b;
    b->listed = true;
}

static void all_del(block *b)
{
    if (!b->listed)
        return;
    if (b->aprev)
        b->aprev->anext = b->anext;
    else
        g_all = b->anext;
    if (b->anext)
        b->anext->aprev = b->aprev;
    b->listed = false;
}

/* The pieces beside b in its mapping (NULL: none). */
static block *left_of(const block *b) { return b->left ? (block *)((char *)b - b->left) : NULL; }
static block *right_of(const block *b) { return b->right ? (block *)((char *)b + b->bytes) : NULL; }

/* b's first `keep` bytes stay b; the rest becomes a cached piece. */
static void split(block *b, size_t keep)
{
    block *rest = (block *)((char *)b + keep);
    UNPOISON(rest, HEADER);
    rest->bytes = b->bytes - keep;
    rest->left = keep;
    rest->right = b->right;
    block *r = right_of(rest);
    if (r)
        r->left = rest->bytes;
    b->bytes = keep;
    b->right = true;
    all_add(rest);
    list_push(rest);
}

/* b (not cached) merged with the cached pieces beside it: the block that
 * now starts where the first of them does. */
static block *merge(block *b)
{
    block *r = right_of(b), *l = left_of(b);
    if (r && r->cached) {
        list_unlink(r);
        all_del(r);
        b->bytes += r->bytes;
        b->right = r->right;
    }
    if (l && l->cached) {
        list_unlink(l);
        all_del(b);
        l->bytes += b->bytes;
        l->right = b->right;
        b = l;
    }
    if ((r = right_of(b)))
        r->left = b->bytes;
    return b;
}

/* b leaves its mapping's pieces (to be unmapped): its neighbours no longer
 * point at it. */
static void detach(block *b)
{
    block *r = right_of(b), *l = left_of(b);
    if (r)
        r->left = 0;
    if (l)
        l->right = false;
    b->left = 0;
    b->right = false;
}

/* The nearest non-empty class above c (dir 1) or below it (dir -1), or -1. */
static int nearest_class(int c, int dir)
{
    for (int w = c / 64; w >= 0 && w < BITMAP_WORDS; w += dir) {
        uint64_t bits = g_nonempty[w];
        int bit = c % 64;
        if (w == c / 64) /* only the classes strictly beyond c */
            bits &=
                dir > 0 ? (bit == 63 ? 0 : ~(uint64_t)0 << (bit + 1)) : (((uint64_t)1 << bit) - 1);
        if (bits)
            return w * 64 + (dir > 0 ? __builtin_ctzll(bits) : 63 - __builtin_clzll(bits));
    }
    return -1;
}

/* A cached block to make into class c (steps 1 to 4 above), or NULL for
 * a fresh mapping. */
static block *cache_take(int c)
{
    if (g_free[c])
        return list_pop(c);
    int from = nearest_class(c, 1);
    if (from >= 0 && from - c <= SLACK_CLASSES)
        return list_pop(from);
    size_t mapped = g_stats.live_bytes + g_stats.cached_bytes + class_bytes(c);
    if (mapped <= g_stats.peak_live_bytes + g_stats.peak_live_bytes / BUDGET_SLACK)
        return NULL;
    if (from >= 0) {
        block *b = list_pop(from);
        if (b->bytes >= 2 * class_bytes(c))
            split(b, class_bytes(c));
        return b;
    }
    from = nearest_class(c, -1);
    if (from < 0)
        return NULL;
    block *b = g_free[from];
    if (b->left || b->right) /* a piece is never moved away from its neighbours */
        return NULL;
    list_unlink(b);
    return b;
}

/* ------------------------------------------------------------ mappings */

static block *map_block(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    block *b = p;
    *b = (block){.bytes = bytes};
    return b;
}

static void unmap_block(block *b)
{
    UNPOISON(b, b->bytes);
    munmap(b, b->bytes);
}

/* b (cached, of any class) as is when it is large enough, else grown to
 * `bytes`; a fresh mapping when b is NULL (*fresh set: the kernel's zero
 * pages, none touched but the header's). */
static block *fit_block(block *b, size_t bytes, bool *fresh)
{
    *fresh = !b;
    if (!b)
        return map_block(bytes);
    size_t have = b->bytes;
    if (have >= bytes)
        return b;
    UNPOISON(b, have);
    void *p = mremap(b, have, bytes, MREMAP_MAYMOVE);
    if (p == MAP_FAILED) {
        munmap(b, have);
        return map_block(bytes);
    }
    b = p;
    b->bytes = bytes;
    return b;
}

/* ------------------------------------------------------------ the API */

static void alloc_init(void)
{
    /* a malformed value keeps the default (the programs refuse it at start:
     * cg_env_check) */
    bool malloc_only = false;
    double mb = -1;
    if (cg_env_flag("CG_MALLOC_DEFAULT", &malloc_only))
        g_malloc_only = malloc_only;
    if (cg_env_number("CG_ALLOC_CACHE_MB", &mb) && mb >= 0)
        g_cache_limit = (size_t)mb << 20;
    if (g_malloc_only)
        return;
    /* The other mallocs (autograd's nodes, copies of strided operands): keep
     * them in the heap, untrimmed, so that they reuse its pages every step. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20); /* glibc's maximum on 64-bit */
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

/* cg_alloc; *fresh: the memory is a fresh mapping's, all zero */
static void *alloc_block(size_t bytes, bool *fresh)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, alloc_init);
    /* 64-byte aligned, rounded up to 64 bytes, plus 64 bytes of slack (a
     * margin for vector code reading a whole vector at a buffer's end; BLIS's
     * small-matrix kernels, which read up to 256 bytes past an operand, are
     * no longer called: core/gemm.c). */
    if (bytes > SIZE_MAX / 2)
        return NULL;
    size_t rounded = (bytes + 63) / 64 * 64 + 64;
    *fresh = false;
    if (g_malloc_only)
        return aligned_alloc(64, rounded);
    block *b = NULL;
    int c = rounded + HEADER < MAP_MIN ? -1 : size_class(rounded + HEADER);
    if (c >= NCLASS)
        return NULL;
    if (c >= 0) {
        pthread_mutex_lock(&g_lock);
        b = cache_take(c);
        if (b && b->bytes < class_bytes(c))
            all_del(b); /* to be grown, maybe moved */
        pthread_mutex_unlock(&g_lock);
        b = fit_block(b, class_bytes(c), fresh); /* NULL: out of mappings (vm.max_map_count) */
    }
    if (!b) {
        *fresh = false;
        b = aligned_alloc(64, rounded + HEADER);
        if (!b)
            return NULL;
        b->bytes = 0;
    } else {
        pthread_mutex_lock(&g_lock);
        if (!b->listed)
            all_add(b);
        g_stats.live_bytes += b->bytes;
        if (g_stats.live_bytes > g_stats.peak_live_bytes)
            g_stats.peak_live_bytes = g_stats.live_bytes;
        pthread_mutex_unlock(&g_lock);
        /* the class's tail past the slack; never the header, which other
         * threads relink under the lock (g_all) while this one runs here */
        POISON((char *)b + HEADER, b->bytes - HEADER);
        UNPOISON((char *)b + HEADER, rounded);
    }
    return (char *)b + HEADER;
}

void *cg_alloc(size_t bytes)
{
    bool fresh;
    return alloc_block(bytes, &fresh);
}

void *cg_alloc_zeroed(size_t bytes)
{
    bool fresh;
    void *p = alloc_block(bytes, &fresh);
    if (p && !fresh) /* a fresh mapping is zero already, and stays untouched until written */
        memset(p, 0, bytes);
    return p;
}

void cg_free(void *p)
{
    if (!p)
        return;
    if (g_malloc_only) {
        free(p);
        return;
    }
    block *b = (block *)((char *)p - HEADER);
    if (!b->bytes) {
        free(b);
        return;
    }
    pthread_mutex_lock(&g_lock);
    g_stats.live_bytes -= b->bytes;
    b = merge(b);
    /* the cap on cached bytes, or on the mapped total (cached and live) */
    const size_t cached = g_stats.cached_bytes + b->bytes;
    bool keep = g_cache_limit != SIZE_MAX
                    ? cached <= g_cache_limit
                    : cached + g_stats.live_bytes <= 2 * g_stats.peak_live_bytes;
    if (keep) {
        POISON((char *)b + HEADER, b->bytes - HEADER);
        list_push(b);
    } else {
        detach(b);
        all_del(b);
    }
    pthread_mutex_unlock(&g_lock);
    if (!keep)
        unmap_block(b);
}

size_t cg_alloc_trim(void)
{
    pthread_mutex_lock(&g_lock);
    block *all = NULL;
    size_t released = g_stats.cached_bytes;
    for (int c = 0; c < NCLASS; c++)
        while (g_free[c]) {
            block *b = list_pop(c);
            detach(b);
            all_del(b);
            b->next = all;
            all = b;
        }
    pthread_mutex_unlock(&g_lock);
    while (all) {
        block *next = all->next;
        unmap_block(all);
        all = next;
    }
    return released;
}

/* madvise every listed block (under g_lock). A failure (ENOMEM: the
 * mappings split past vm.max_map_count) leaves that block as it was. */
static void advise_all(int advice)
{
    for (block *b = g_all; b; b = b->anext)
        (void)madvise(b, b->bytes, advice);
}

pid_t cg_fork_without_buffers(void)
{
    if (g_malloc_only)
        return fork();
    pthread_mutex_lock(&g_lock);
#if defined(__SANITIZE_ADDRESS__)
    /* The child's shadow memory keeps the blocks' poison, and the child's
     * own mappings may land where they were: it unpoisons their ranges,
     * listed here (their headers are not the child's to read). */
    size_t n = 0;
    for (block *b = g_all; b; b = b->anext)
        n++;
    block **ranges = malloc((n ? n : 1) * 2 * sizeof *ranges);
    n = 0;
    for (block *b = g_all; ranges && b; b = b->anext) {
        ranges[2 * n] = b;
        ranges[2 * n++ + 1] = (block *)((char *)b + b->bytes);
    }
    if (!ranges) { /* a plain fork */
        pthread_mutex_unlock(&g_lock);
        return fork();
    }
#endif
    advise_all(MADV_DONTFORK);
    pid_t pid = fork();
    int e = errno;
    if (pid != 0)
        advise_all(MADV_DOFORK);
    pthread_mutex_unlock(&g_lock); /* in the child too: its one thread is the locker's copy */
#if defined(__SANITIZE_ADDRESS__)
    for (size_t i = 0; pid == 0 && i < n; i++)
        UNPOISON(ranges[2 * i], (size_t)((char *)ranges[2 * i + 1] - (char *)ranges[2 * i]));
    free(ranges);
#endif
    errno = e;
    return pid;
}

cg_alloc_stats cg_alloc_get_stats(void)
{
    pthread_mutex_lock(&g_lock);
    cg_alloc_stats s = g_stats;
    pthread_mutex_unlock(&g_lock);
    return s;
}
