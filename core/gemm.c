/* cgrad core: single-precision GEMM through BLIS, and the bf16 paths'
 * dispatch (see core/gemm.h and docs/api.md, "Libraries used, and why").
 *
 * Debian's BLIS 0.9 picks its generic kernels on CPUs it does not know (AMD
 * family 0x1A), which is 5x slower than its AVX-512 kernels. The static
 * libblis.a exports the per-architecture kernels and context initialisers,
 * so we choose from cpuid ourselves, once.
 *
 * Out of memory: BLIS aborts the process when its own malloc returns NULL
 * (bli_malloc_intl: "libblis: malloc() returned NULL ... Aborting"), and
 * bli_init (its kernel structure, its packing pools), the context
 * initialisers (bli_cntx_set_*'s temporary arrays) and bli_sgemm_ex (its
 * control tree, pool blocks created lazily per thread) all allocate. So
 * the paths a program takes by default never enter BLIS's allocating
 * code: the skx and haswell paths are our driver (gemm_blocked.c, its
 * buffers ours, a failure returned) around BLIS's micro-kernels, AVX-512's
 * 32 x 12 (gemm_skx.c) and AVX2's 6 x 16 (gemm_haswell.c), with our
 * packing; their block sizes gemm_init writes into a cntx_t itself
 * (blocks_skx, blocks_haswell: BLIS 0.9's values, test_matmul holds them
 * to bli_cntx_init_skx's and bli_cntx_init_haswell's), and a failure of
 * that driver is returned, never handed to BLIS's driver. BLIS's own
 * driver and contexts (CG_BLIS_DRIVER=1, CG_BLIS_DEFAULT=1 or a CPU
 * without AVX2) are made on their first use (blis_contexts) and may still
 * abort out of memory. The prepacked fp32 weights (cg_f32_packed) are the
 * skx kernel's panels only.
 *
 * Determinism: BLIS runs single-threaded; we split C among threads by rows
 * or columns (gemm_run), never k, and the k blocking (KC) comes from the
 * context, not the thread count, so each C element is reduced in the same
 * order for any number of threads (a bf16 product split at k's half,
 * cg_gemm_k_split, is split so by its shape alone). tests/test_matmul.c
 * checks 1 vs 2 threads bit for bit. */
#include "core/gemm.h"

#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <blis.h>

#include "core/amx_tiles.h"
#include "core/dtype.h"
#include "core/gemm_internal.h"
#include "core/shares.h"
#include "core/gemm_skx.h"
#include "core/gemm_blocked.h"
#include "core/parse.h"
#include "core/tensor.h"

/* Exported by the static libblis.a only (not declared in blis.h). */
void bli_cntx_init_skx(cntx_t *cntx);
void bli_cntx_init_haswell(cntx_t *cntx);

/* Automatic thread count: at least this many flops per thread. */
#define MIN_FLOPS_PER_THREAD 5e6

/* The threads for a product of `flops` (nthreads <= 0: from its size, as
 * many as have MIN_FLOPS_PER_THREAD each; waking a second thread costs
 * ~12 us here, so below that fewer threads are faster); one inside a
 * parallel region. */
static int threads_for(int nthreads, double flops)
{
    int nt = nthreads;
    if (nt <= 0) {
        const double per = flops / MIN_FLOPS_PER_THREAD;
        nt = cg_get_num_threads();
        if (per < nt)
            nt = per < 2.0 ? 1 : (int)per;
    }
    return nt < 1 || omp_in_parallel() ? 1 : nt;
}
/* Products with at most this many rows (or columns) of C whose operands
 * run along k contiguously go to skinny_product (Zen 3, 1 thread, x 1536
 * x 384: 65 / 122 / 177 / 234 us for 2 / 4 / 6 / 8 rows, BLIS's packed
 * driver 174 / 175 / 166 / 245). */
#define SKINNY CG_GEMM_SKINNY
/* Threading: blocks of C are a multiple of this many rows or columns. Any
 * cut gives the same bits (every element is one kernel's in-order sum over
 * k, a partial micro-tile is computed in full and copied out); 16 keeps the
 * halves of the tiny models' 128-wide products equal (96 made it 96 + 32). */
#define CHUNK_UNIT 16
/* A prepacked weight's product: chunks of at least DYN_ROWS rows of x, at
 * most DYN_CHUNKS a thread (gemm_run). A thread that finishes first waits
 * for the other's last chunk, half a chunk on average: with 128 and 8 (3072
 * rows in chunks of 192) the 2-thread seq2seq base bf16 step's forward
 * products waited 11-12 ms of thread time a step and its input gradients'
 * 7-8 (Zen 5); with 48 and 32, 2.6-3.8 and 1.7-3.0 ms, their work the same
 * (48 rows: four of the native kernel's tiles of 12). */
#define DYN_ROWS 48
#define DYN_CHUNKS 32

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* The block sizes of our drivers and of the k blocks (cg_gemm_k_block),
 * written by gemm_init without BLIS (blocks_skx, blocks_haswell); handed
 * to the kernels, which read nothing of them. */
static cntx_t g_cntx_skx;
static cntx_t g_cntx_haswell;
/* BLIS's own contexts for its driver (blis_contexts), made on first use:
 * they allocate, and BLIS aborts when that fails. */
static pthread_once_t g_blis_once = PTHREAD_ONCE_INIT;
static cntx_t g_blis_skx;
static cntx_t g_blis_haswell;
static bool g_have_skx;
static bool g_have_haswell;
static cg_gemm_path g_active = CG_GEMM_DEFAULT;
/* skx and haswell paths: our blocking and packing around BLIS's
 * micro-kernels (core/gemm_blocked.c) unless CG_BLIS_DRIVER=1 asks for
 * BLIS's own driver. */
static bool g_own_driver = true;
/* bf16: the CPU has AVX512_BF16 (and CG_BF16_EMULATE does not forbid it) */
static bool g_bf16_native;
/* bf16 on AMX tiles: the CPU and OS allow them (or CG_AMX_EMULATE=1
 * emulates them) and CG_BF16_AMX is not 0 */
static bool g_bf16_amx;
/* The calling thread's precision policy (cg_set_matmul_precision); a new
 * thread starts in fp32 */
static _Thread_local int tl_precision = CG_PRECISION_FP32;

/* the emulated bf16 kernel on AVX-512 (core/gemm_internal.h) */
bool cg_bf16_emulation_avx512;

/* The L1 data cache's bytes (cg_gemm_l1d_bytes) */
static int64_t g_l1d_bytes;

/* The float block sizes BLIS 0.9's skx context has (config/skx/
 * bli_cntx_init_skx.c: MR 32, NR 12, MC 480, KC 384 stretched to 480, NC
 * 3072), written without bli_cntx_init_skx, which allocates. */
static void blocks_skx(cntx_t *cx)
{
    memset(cx, 0, sizeof *cx);
    blksz_t b;
    bli_blksz_init_easy(&b, 32, 16, -1, -1);
    bli_cntx_set_blksz(BLIS_MR, &b, BLIS_MR, cx);
    bli_blksz_init_easy(&b, 12, 14, -1, -1);
    bli_cntx_set_blksz(BLIS_NR, &b, BLIS_NR, cx);
    bli_blksz_init_easy(&b, 480, 240, -1, -1);
    bli_cntx_set_blksz(BLIS_MC, &b, BLIS_MR, cx);
    bli_blksz_init(&b, 384, 256, -1, -1, 480, 320, -1, -1);
    bli_cntx_set_blksz(BLIS_KC, &b, BLIS_KR, cx);
    bli_blksz_init_easy(&b, 3072, 3752, -1, -1);
    bli_cntx_set_blksz(BLIS_NC, &b, BLIS_NR, cx);
}

/* haswell's k blocks are skx's (KC 384, haswell's own 256): each block's
 * sum is added to C, so with haswell's a product with k over 256 was
 * summed at other points on AVX2 CPUs (Zen 2, 3) than on AVX-512 ones, and
 * seq2seq tiny's fp32 final_loss differed in its last bits. */
static void haswell_kc(cntx_t *cx)
{
    cntx_t skx;
    blocks_skx(&skx);
    blksz_t *ks = bli_cntx_get_blksz(BLIS_KC, &skx);
    blksz_t *kh = bli_cntx_get_blksz(BLIS_KC, cx);
    bli_blksz_set_def(bli_blksz_get_def(BLIS_FLOAT, ks), BLIS_FLOAT, kh);
    bli_blksz_set_max(bli_blksz_get_max(BLIS_FLOAT, ks), BLIS_FLOAT, kh);
}

/* The float block sizes of BLIS 0.9's haswell context as we run it (MR 6,
 * NR 16, MC 168, NC 4080; KC skx's), written without BLIS. */
static void blocks_haswell(cntx_t *cx)
{
    memset(cx, 0, sizeof *cx);
    blksz_t b;
    bli_blksz_init_easy(&b, 6, 6, 3, 3);
    bli_cntx_set_blksz(BLIS_MR, &b, BLIS_MR, cx);
    bli_blksz_init_easy(&b, 16, 8, 8, 4);
    bli_cntx_set_blksz(BLIS_NR, &b, BLIS_NR, cx);
    bli_blksz_init_easy(&b, 168, 72, 75, 192);
    bli_cntx_set_blksz(BLIS_MC, &b, BLIS_MR, cx);
    bli_blksz_init_easy(&b, 256, 256, 256, 256);
    bli_cntx_set_blksz(BLIS_KC, &b, BLIS_KR, cx);
    bli_blksz_init_easy(&b, 4080, 4080, 4080, 4080);
    bli_cntx_set_blksz(BLIS_NC, &b, BLIS_NR, cx);
    haswell_kc(cx);
}

/* BLIS's own contexts, for its driver only (serial_gemm): bli_init and the
 * initialisers allocate, and abort the process when that fails. */
static void blis_contexts_init(void)
{
    bli_init();
    if (g_have_skx)
        bli_cntx_init_skx(&g_blis_skx);
    if (g_have_haswell) {
        bli_cntx_init_haswell(&g_blis_haswell);
        haswell_kc(&g_blis_haswell);
    }
}
static void blis_contexts(void) { pthread_once(&g_blis_once, blis_contexts_init); }

static void ensure_init(void);

cntx_t *cg_gemm_blocks(bool skx)
{
    ensure_init();
    return skx ? (g_have_skx ? &g_cntx_skx : NULL) : g_have_haswell ? &g_cntx_haswell : NULL;
}

static void gemm_init(void)
{
    const long l1d = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    g_l1d_bytes = l1d > 0 ? l1d : 32 << 10;
    __builtin_cpu_init();
    /* BLIS's own skx test asks for F, DQ, BW and VL; so do we. */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
        blocks_skx(&g_cntx_skx);
        g_have_skx = true;
        cg_bf16_emulation_avx512 = true;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        blocks_haswell(&g_cntx_haswell);
        g_have_haswell = true;
    }
    /* switches (core/parse.h); a malformed one keeps its default (the
     * programs refuse it at start: cg_env_check) */
    bool emu = false, amx = true, amx_emu = false, drv = false, force_default = false;
    cg_env_flag("CG_BF16_EMULATE", &emu);
    cg_env_flag("CG_BF16_AMX", &amx);
    cg_env_flag("CG_AMX_EMULATE", &amx_emu);
    cg_env_flag("CG_BLIS_DRIVER", &drv);
    cg_env_flag("CG_BLIS_DEFAULT", &force_default);
    g_bf16_native = cg_cpu_has_avx512_bf16() && !emu;
    /* CG_AMX_EMULATE=1: AMX's path with its tiles emulated (core/amx_tiles.h),
     * on any CPU with AVX512_BF16, this one's AMX or not */
    cg_amx_emulation = g_bf16_native && amx && amx_emu;
    g_bf16_amx = g_bf16_native && amx && (amx_emu || cg_amx_init());
    g_own_driver = !drv;
    if (force_default)
        g_active = CG_GEMM_DEFAULT;
    else if (g_have_skx)
        g_active = CG_GEMM_SKX;
    else if (g_have_haswell)
        g_active = CG_GEMM_HASWELL;
    else
        g_active = CG_GEMM_DEFAULT;
}

static void ensure_init(void) { pthread_once(&g_once, gemm_init); }

bool cg_gemm_use_own_driver(bool on)
{
    ensure_init();
    const bool was = g_own_driver;
    g_own_driver = on;
    return was;
}

bool cg_bf16_emulation_use_avx512(bool on)
{
    ensure_init();
    cg_bf16_emulation_avx512 = on && g_have_skx;
    return cg_bf16_emulation_avx512;
}

cg_gemm_path cg_gemm_active_path(void)
{
    ensure_init();
    return g_active;
}

const char *cg_gemm_path_name(cg_gemm_path p)
{
    switch (p) {
    case CG_GEMM_AUTO: return "auto";
    case CG_GEMM_DEFAULT: return "default";
    case CG_GEMM_SKX: return "skx";
    case CG_GEMM_HASWELL: return "haswell";
    case CG_GEMM_BF16: return "bf16";
    case CG_GEMM_BF16_EMULATED: return "bf16-emulated";
    case CG_GEMM_BF16_AMX: return cg_bf16_amx_emulated() ? "bf16-amx-emulated" : "bf16-amx";
    }
    return "unknown";
}

/* A value that is no precision (a C enum takes any int): false + one
 * line naming the caller, the policy left as it is. */
static bool precision_known(cg_precision p, const char *who)
{
    if (p == CG_PRECISION_FP32 || p == CG_PRECISION_BF16)
        return true;
    cg_set_error("%s: unknown precision %d (choices: fp32, bf16); the policy stays %s", who, (int)p,
                 cg_precision_name(cg_get_matmul_precision()));
    return false;
}

bool cg_bf16_usable(void)
{
    return cg_gemm_path_available(CG_GEMM_BF16) || cg_gemm_path_available(CG_GEMM_BF16_EMULATED);
}

/* This thread's policy p, when p is one (who: the caller, for the error).
 * bf16 on a CPU without a bf16 product is refused, the policy left as it
 * is (as PyTorch's CPU autocast turns itself off for a dtype it cannot
 * run): its products would run AVX2 code, a SIGILL. */
static void set_policy(cg_precision p, const char *who)
{
    if (!precision_known(p, who))
        return;
    if (p == CG_PRECISION_BF16 && !cg_bf16_usable()) {
        cg_set_error("%s: " CG_NO_BF16 "; the policy stays %s", who,
                     cg_precision_name(cg_get_matmul_precision()));
        return;
    }
    tl_precision = p == CG_PRECISION_BF16;
}

void cg_set_matmul_precision(cg_precision p) { set_policy(p, "set_matmul_precision"); }

cg_precision cg_get_matmul_precision(void)
{
    return tl_precision ? CG_PRECISION_BF16 : CG_PRECISION_FP32;
}

cg_precision cg_autocast_begin(cg_precision p)
{
    const cg_precision prev = cg_get_matmul_precision();
    set_policy(p, "autocast_begin");
    return prev;
}

void cg_autocast_end(cg_precision prev) { set_policy(prev, "autocast_end"); }

cg_gemm_path cg_precision_path(cg_precision p)
{
    ensure_init();
    return p == CG_PRECISION_BF16 ? cg_bf16_auto_path() : g_active;
}

const char *cg_precision_name(cg_precision p)
{
    return p == CG_PRECISION_BF16 ? "bf16" : p == CG_PRECISION_FP32 ? "fp32" : "?";
}

bool cg_precision_parse(const char *s, cg_precision *out)
{
    if (!out) {
        cg_set_error("cg_precision_parse: argument 'out' is NULL");
        return false;
    }
    if (s && !strcmp(s, "fp32")) {
        *out = CG_PRECISION_FP32;
        return true;
    }
    if (s && !strcmp(s, "bf16")) {
        if (!cg_bf16_usable()) {
            cg_set_error("precision: " CG_NO_BF16 " (use fp32)");
            return false;
        }
        *out = CG_PRECISION_BF16;
        return true;
    }
    cg_set_error("precision: '%s' is not one of fp32, bf16", s ? s : "(null)");
    return false;
}

int64_t cg_gemm_l1d_bytes(void)
{
    ensure_init();
    return g_l1d_bytes;
}

bool cg_cpu_has_avx512_bf16(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512bf16");
}

bool cg_bf16_native(void)
{
    ensure_init();
    return g_bf16_native;
}

bool cg_bf16_amx_emulated(void)
{
    ensure_init();
    return cg_amx_emulation;
}

cg_gemm_path cg_bf16_auto_path(void)
{
    ensure_init();
    return g_bf16_amx ? CG_GEMM_BF16_AMX : g_bf16_native ? CG_GEMM_BF16 : CG_GEMM_BF16_EMULATED;
}

bool cg_gemm_path_available(cg_gemm_path p)
{
    ensure_init();
    switch (p) {
    case CG_GEMM_AUTO:
    case CG_GEMM_DEFAULT: return true;
    case CG_GEMM_SKX: return g_have_skx;
    case CG_GEMM_HASWELL: return g_have_haswell;
    case CG_GEMM_BF16: return g_bf16_native;
    case CG_GEMM_BF16_EMULATED: return g_have_haswell; /* AVX2 and FMA */
    case CG_GEMM_BF16_AMX: return g_bf16_amx;
    }
    return false;
}

/* ------------------------------------------------------------ packing buffers */

/* Each thread keeps its packing buffer between calls (grown as needed,
 * unmapped when the thread exits). Allocating a few MB per call made every
 * call fault fresh pages in from a worker thread's malloc arena; a buffer
 * kept in the malloc heap instead pinned the heap top at its peak, and the
 * memory freed below it was faulted in again every step. So the buffer is
 * mapped directly, outside the heap. */
typedef struct {
    void *p;
    size_t bytes;
} pack_buf;

static pthread_key_t buf_key;
static pthread_once_t buf_once = PTHREAD_ONCE_INIT;
static _Thread_local pack_buf tl;

static void buf_unmap(void *arg)
{
    pack_buf *b = arg;
    if (b && b->p)
        munmap(b->p, b->bytes);
}
static void buf_key_init(void) { (void)pthread_key_create(&buf_key, buf_unmap); }

void *cg_gemm_thread_buffer(size_t bytes)
{
    if (tl.bytes >= bytes)
        return tl.p;
    pthread_once(&buf_once, buf_key_init);
    bytes = (bytes + ((size_t)1 << 21) - 1) & ~(((size_t)1 << 21) - 1); /* 2 MB steps */
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (tl.p)
        munmap(tl.p, tl.bytes);
    tl.p = p;
    tl.bytes = bytes;
    (void)pthread_setspecific(buf_key, &tl);
    return tl.p;
}

/* ------------------------------------------------------------ strides */

/* Contiguous row-major copy of an m x n strided operand (any strides). */
static float *copy_rowmajor(int64_t m, int64_t n, const float *p, int64_t rs, int64_t cs)
{
    float *q = malloc((size_t)(m * n) * sizeof(float));
    if (!q)
        return NULL;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            q[i * n + j] = p[i * rs + j * cs];
    return q;
}

/* An m x n operand of bf16 elements (bit patterns) widened to floats
 * (exact) at the same strides (the span between them is left
 * uninitialised), so that the product takes the kernels its layout would
 * take with floats. */
static float *widen(int64_t m, int64_t n, const uint16_t *p, int64_t rs, int64_t cs)
{
    float *q = malloc((size_t)((m - 1) * rs + (n - 1) * cs + 1) * sizeof(float));
    if (!q)
        return NULL;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            q[i * rs + j * cs] = cg_bf16_to_f32(p[i * rs + j * cs]);
    return q;
}

/* Element i of an operand of floats, or of bf16 elements when bf. */
static inline const void *elem_at(const void *p, bool bf, int64_t i)
{
    return bf ? (const void *)((const uint16_t *)p + i) : (const void *)((const float *)p + i);
}

/* C that BLIS cannot address (stride 0, overlapping rows): plain loops, each
 * element written in order; only reachable through cg_sgemm's raw API. */
static void naive_sgemm(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa,
                        int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta, float *c,
                        int64_t rsc, int64_t csc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0.0f;
            for (int64_t p = 0; p < k; p++)
                s += a[i * rsa + p * csa] * b[p * rsb + j * csb];
            float *cij = &c[i * rsc + j * csc];
            *cij = beta == 0.0f ? alpha * s : alpha * s + beta * *cij;
        }
}

static void scale_c(int64_t m, int64_t n, float beta, float *c, int64_t rsc, int64_t csc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float *cij = &c[i * rsc + j * csc];
            *cij = beta == 0.0f ? 0.0f : beta * *cij;
        }
}

/* ------------------------------------------------------------ gemm */

/* What fill_bias's rows read and write */
typedef struct {
    int64_t n, bs, rsc, csc;
    const float *bias;
    float *c;
} bias_rows;

static void fill_bias_rows(int64_t i0, int64_t i1, int thread, const void *ctx)
{
    const bias_rows *f = ctx;
    for (int64_t i = i0; i < i1; i++) {
        float *ci = f->c + i * f->rsc;
        if (f->csc == 1 && f->bs == 1)
            memcpy(ci, f->bias, sizeof(float) * (size_t)f->n);
        else
            for (int64_t j = 0; j < f->n; j++)
                ci[j * f->csc] = f->bias[j * f->bs];
    }
}

/* C[i, j] = bias[j * bs]: the start of C = A B + bias on the fp32 paths
 * that cannot add the bias as they write C (then C = A B + 1 C). */
static void fill_bias(int64_t m, int64_t n, const float *bias, int64_t bs, float *c, int64_t rsc,
                      int64_t csc)
{
    bias_rows f = {n, bs, rsc, csc, bias, c};
    cg_shares_run(m, cg_shares_rows(n), cg_shares_team(m * n > 32768), fill_bias_rows, &f);
}

/* One single-threaded product on a context: ours around the skx or the
 * haswell kernel (on skx's with the weight's panels at pre, or packing
 * them; false when its buffer cannot be had), or BLIS's driver (BLIS's
 * default path, or CG_BLIS_DRIVER=1; BLIS's allocator, which aborts when
 * out of memory).
 *
 * Never BLIS 0.9's small-matrix ("sup") kernels: they read up to 256 bytes
 * past the end of an operand (1 x 19 x 37 read past 128 bytes of slack;
 * tests/test_matmul.c puts operands against an unmapped page), which
 * crashes when the operand ends a mapping, as a large malloc'd buffer of a
 * caller's does. They also chose from the sizes of a thread's share, so
 * halves of a product could be summed differently from the whole (300 x 311
 * x 257 is packed, its halves 300 x 160 and 300 x 151 were not). The packed
 * path reads only what it packs. (BLIS's default path, CG_BLIS_DEFAULT=1,
 * a diagnostic, keeps its own choice.) */
static bool serial_gemm(cntx_t *cntx, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                        int64_t rsa, int64_t csa, const float *b, int64_t rsb, int64_t csb,
                        float beta, const float *bias, int64_t bs, float *c, int64_t rsc,
                        int64_t csc, const float *pre)
{
    if (cntx && g_own_driver) { /* out of memory: false, never BLIS's driver */
        if (pre && cntx != &g_cntx_skx)
            return false; /* prepacked panels are the skx kernel's */
        return cg_sgemm_blocked(cntx == &g_cntx_skx ? &cg_sgemm_skx : &cg_sgemm_haswell, cntx, m, n,
                                k, alpha, a, rsa, csa, b, rsb, csb, beta, bias, bs, c, rsc, csc,
                                pre);
    }
    if (pre) /* the weight is only in our driver's panels */
        return false;
    blis_contexts(); /* allocates: aborts out of memory (BLIS's) */
    if (cntx)
        cntx = cntx == &g_cntx_skx ? &g_blis_skx : &g_blis_haswell;
    if (bias) { /* BLIS cannot add it: C set to the bias first */
        bias_rows f = {n, bs, rsc, csc, bias, c};
        fill_bias_rows(0, m, 0, &f);
        beta = 1.0f;
    }
    rntm_t rntm = BLIS_RNTM_INITIALIZER;
    bli_rntm_set_num_threads(1, &rntm);
    if (cntx)
        bli_rntm_disable_l3_sup(&rntm);
    bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, (dim_t)m, (dim_t)n, (dim_t)k, &alpha,
                 (float *)a, (inc_t)rsa, (inc_t)csa, (float *)b, (inc_t)rsb, (inc_t)csb, &beta, c,
                 (inc_t)rsc, (inc_t)csc, cntx, &rntm);
    return true;
}

/* One thread's share of a product: fp32 on a BLIS context, or bf16. */
typedef struct {
    cntx_t *cntx; /* fp32: the context (NULL: BLIS's default) */
    int bf16;     /* 0: fp32, else the bf16 kernel (cg_bf16_kind) */
} gemm_kind;

/* With a bias, beta is 0 and C = alpha A B + bias: added as the bf16
 * kernels write C, set tile by tile before the fp32 kernel's first k block
 * (the bits of C set to the bias, then C = alpha A B + 1 C). */
static bool serial_product(gemm_kind g, int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                           int64_t rsa, int64_t csa, const void *b, int64_t rsb, int64_t csb,
                           unsigned bf, float beta, const float *bias, int64_t bs, float *c,
                           int64_t rsc, int64_t csc, const cg_prepacked *pre)
{
    if (g.bf16)
        return cg_bf16_gemm_serial(g.bf16, m, n, k, alpha, a, rsa, csa, b, rsb, csb, bf, beta, bias,
                                   bs, c, rsc, csc, pre);
    return serial_gemm(g.cntx, m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, bias, bs, c, rsc,
                       csc, pre ? pre->p : NULL);
}

/* The piece of C [o0, o0 + len) along its rows (split_m) or its columns,
 * as serial_product: the rows of A, or the columns of B, the bias and the
 * prepacked panels from o0 on. Any cut gives the same bits (each element
 * is one kernel's sum over k). */
static bool piece_product(gemm_kind g, bool split_m, int64_t o0, int64_t len, int64_t m, int64_t n,
                          int64_t k, float alpha, const void *a, int64_t rsa, int64_t csa,
                          const void *b, int64_t rsb, int64_t csb, unsigned bf, float beta,
                          const float *bias, int64_t bs, float *c, int64_t rsc, int64_t csc,
                          const cg_prepacked *pre)
{
    if (split_m)
        return serial_product(g, len, n, k, alpha, elem_at(a, bf & CG_GEMM_A_BF16, o0 * rsa), rsa,
                              csa, b, rsb, csb, bf, beta, bias, bs, c + o0 * rsc, rsc, csc, pre);
    const cg_prepacked part = {
        pre ? (const uint32_t *)pre->p + o0 / CG_BF16_MR * pre->kp * CG_BF16_MR : NULL,
        pre ? pre->kp : 0, pre ? pre->epi : NULL};
    return serial_product(g, m, len, k, alpha, a, rsa, csa,
                          b ? elem_at(b, bf & CG_GEMM_B_BF16, o0 * csb) : NULL, rsb, csb, bf, beta,
                          bias ? bias + o0 * bs : NULL, bs, c + o0 * csc, rsc, csc,
                          pre ? &part : NULL);
}

/* ------------------------------------------------------------ skinny */

#define SKINNY_TARGET __attribute__((target("avx2,fma")))

/* The 8 lanes of v summed in a fixed order. */
SKINNY_TARGET static inline float sum8(__m256 v)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* out[i * ros + j * cos] = alpha x_i . y_j (+ beta out) for nx vectors x
 * (stride sx) and ny <= 4 vectors y (stride sy), all contiguous along k:
 * 16 values of k at a time in two sums per output, added, their lanes
 * summed, then the last k % 8 in order. */
SKINNY_TARGET static inline __attribute__((always_inline)) void dots(
    const int ny, int64_t nx, int64_t k, const float *x, int64_t sx, const float *y, int64_t sy,
    float alpha, float beta, float *out, int64_t ros, int64_t cos)
{
    for (int64_t i = 0; i < nx; i++) {
        const float *xi = x + i * sx;
        __m256 acc[4][2];
        for (int j = 0; j < ny; j++)
            acc[j][0] = acc[j][1] = _mm256_setzero_ps();
        int64_t p = 0;
        for (; p + 16 <= k; p += 16) {
            const __m256 x0 = _mm256_loadu_ps(xi + p), x1 = _mm256_loadu_ps(xi + p + 8);
            for (int j = 0; j < ny; j++) {
                acc[j][0] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y + j * sy + p), acc[j][0]);
                acc[j][1] = _mm256_fmadd_ps(x1, _mm256_loadu_ps(y + j * sy + p + 8), acc[j][1]);
            }
        }
        for (; p + 8 <= k; p += 8) {
            const __m256 x0 = _mm256_loadu_ps(xi + p);
            for (int j = 0; j < ny; j++)
                acc[j][0] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(y + j * sy + p), acc[j][0]);
        }
        for (int j = 0; j < ny; j++) {
            float t = sum8(_mm256_add_ps(acc[j][0], acc[j][1]));
            for (int64_t q = p; q < k; q++)
                t = fmaf(xi[q], y[j * sy + q], t);
            float *o = out + i * ros + j * cos;
            *o = beta == 0.0f ? alpha * t : alpha * t + beta * *o;
        }
    }
}

SKINNY_TARGET static void dots_n(int ny, int64_t nx, int64_t k, const float *x, int64_t sx,
                                 const float *y, int64_t sy, float alpha, float beta, float *out,
                                 int64_t ros, int64_t cos)
{
    switch (ny) {
    case 1: dots(1, nx, k, x, sx, y, sy, alpha, beta, out, ros, cos); break;
    case 2: dots(2, nx, k, x, sx, y, sy, alpha, beta, out, ros, cos); break;
    case 3: dots(3, nx, k, x, sx, y, sy, alpha, beta, out, ros, cos); break;
    default: dots(4, nx, k, x, sx, y, sy, alpha, beta, out, ros, cos); break;
    }
}

/* A skinny product: nx vectors x against ny vectors y */
typedef struct {
    int64_t ny, nx, k, sx, sy, ros, cos;
    const float *x, *y;
    float alpha, beta;
    float *c;
} skinny;

/* dots_n over the groups [g0, g1) of 4 of the vectors y */
static void dots_groups(int64_t g0, int64_t g1, int thread, const void *ctx)
{
    const skinny *p = ctx;
    for (int64_t g = g0; g < g1; g++) {
        const int64_t j = 4 * g, w = p->ny - j < 4 ? p->ny - j : 4;
        dots_n((int)w, p->nx, p->k, p->x, p->sx, p->y + j * p->sy, p->sy, p->alpha, p->beta,
               p->c + j * p->cos, p->ros, p->cos);
    }
}

/* C = alpha A B + beta C with at most SKINNY rows (or columns) of C, A's
 * rows and B's columns contiguous along k (csa == rsb == 1): a row of x
 * times a weight in decoding. BLIS's packed driver packs the whole weight
 * for one row (1 x 1152 x 384: 174 us, here 33; its small-matrix kernels,
 * 42 us, read past operands). Each element is a dot product in a fixed order,
 * and threads split the long side only, so the bits do not depend on the
 * thread count. */
static void skinny_product(int nthreads, int64_t m, int64_t n, int64_t k, float alpha,
                           const float *a, int64_t rsa, const float *b, int64_t csb, float beta,
                           float *c, int64_t rsc, int64_t csc)
{
    /* x: the short side's vectors, y: the long side's */
    const bool rows = m <= SKINNY;
    skinny p = {.ny = rows ? n : m,
                .nx = rows ? m : n,
                .k = k,
                .sx = rows ? rsa : csb,
                .sy = rows ? csb : rsa,
                .ros = rows ? rsc : csc,
                .cos = rows ? csc : rsc,
                .x = rows ? a : b,
                .y = rows ? b : a,
                .alpha = alpha,
                .beta = beta,
                .c = c};
    const int nt = threads_for(nthreads, 2.0 * (double)m * (double)n * (double)k);
    cg_shares_run((p.ny + 3) / 4, 1, nt, dots_groups, &p);
}

/* ------------------------------------------------------------ one row */

/* C = alpha a B + beta C for one row a (stride csa) and B's rows contiguous
 * (csb == 1), beta 0 or 1: attention's P v in decoding (1 x Tk x dh, one
 * query), which BLIS's driver and ours packed into a whole tile of A (6 or
 * 32 rows) and a panel of B, at 20 times the product's own work. Each
 * element is computed as the micro-kernels compute it (haswell's and skx's,
 * through BLIS's driver or gemm_skx.c): over each KC block of k in order,
 * one fused multiply-add a k from zero, times alpha, then stored (beta 0,
 * first block) or added to C (beta 1 and every later block: C + 1 ab is
 * one rounding whether or not the kernel fuses it). So the bits are the
 * packed path's, for any thread count (test_matmul
 * test_one_row_product_bits); another beta (C + beta ab is rounded
 * differently by a partial tile's copy-out) keeps the packed path. */
typedef struct {
    int64_t n, k, kc, kcx, csa, rsb, csc;
    float alpha, beta;
    const float *a, *b;
    float *c;
} one_row;

/* the groups [g0, g1) of 8 columns of one_row's C, the last one cut at n */
SKINNY_TARGET static void one_row_groups(int64_t g0, int64_t g1, int thread, const void *ctx)
{
    (void)thread;
    const one_row *p = ctx;
    const int64_t n = p->n;
    for (int64_t j = 8 * g0; j < 8 * g1 && j < n; j += 8) {
        const int w = n - j < 8 ? (int)(n - j) : 8;
        const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(w), lanes);
        float out[8];
        int64_t kc;
        for (int64_t pc = 0; pc < p->k; pc += kc) {
            kc = cg_gemm_block_at(p->k, pc, p->kc, p->kcx);
            __m256 acc = _mm256_setzero_ps();
            for (int64_t q = pc; q < pc + kc; q++)
                acc = _mm256_fmadd_ps(_mm256_set1_ps(p->a[q * p->csa]),
                                      _mm256_maskload_ps(p->b + q * p->rsb + j, mask), acc);
            acc = _mm256_mul_ps(acc, _mm256_set1_ps(p->alpha));
            _mm256_storeu_ps(out, acc);
            const bool add = pc > 0 || p->beta != 0.0f;
            for (int i = 0; i < w; i++) {
                float *o = p->c + (j + i) * p->csc;
                *o = add ? *o + out[i] : out[i];
            }
        }
    }
}

static void one_row_product(cntx_t *cntx, int nthreads, int64_t n, int64_t k, float alpha,
                            const float *a, int64_t csa, const float *b, int64_t rsb, float beta,
                            float *c, int64_t csc)
{
    const one_row r = {.n = n,
                       .k = k,
                       .kc = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_KC, cntx),
                       .kcx = bli_cntx_get_blksz_max_dt(BLIS_FLOAT, BLIS_KC, cntx),
                       .csa = csa,
                       .rsb = rsb,
                       .csc = csc,
                       .alpha = alpha,
                       .beta = beta,
                       .a = a,
                       .b = b,
                       .c = c};
    const int nt = threads_for(nthreads, 2.0 * (double)n * (double)k);
    cg_shares_run((n + 7) / 8, 1, nt, one_row_groups, &r);
}

/* ------------------------------------------------------------ split k */

/* A bf16 product whose k is long against both sides of C (a weight's
 * gradient dW [out, in] = g^T x over N tokens) is summed as two products,
 * over k's halves [0, h) and [h, k), the second added to the first
 * (cg_gemm_k_split). Split over C's rows, each of two threads packed its
 * half of A and all of B (N x in): twice B's packing, and half of the rows
 * of g and x read from the other core's cache, as the ops before split
 * them by tokens. Over k, each thread packs half of each operand, the
 * tokens it wrote itself, and the sum of the two halves costs a pass over
 * C (m x n, at most k / 2 x k / 2). The rule depends on the shape only, so
 * one thread sums the same halves: the bits do not depend on the thread
 * count. A seq2seq base bf16 step at 2 threads: 2.5% faster (Zen 5,
 * docs/performance.md). Not on AMX, whose threads pack a shared operand
 * once together (measured on the Intel Xeon before this rule; not
 * measured with it). */
#define SPLIT_K_MIN (2 * CG_BF16_KC)

static int64_t split_point(gemm_kind g, int64_t m, int64_t n, int64_t k, const cg_prepacked *pre)
{
    if (!g.bf16 || g.bf16 == CG_BF16_AMX || pre || k < SPLIT_K_MIN || k < 2 * (m > n ? m : n))
        return 0;
    return ((k + 1) / 2 + 1) / 2 * 2; /* about half, and even: whole k-pairs */
}

/* A product split at h: the halves' pieces (C cut into q pieces along its
 * longer side, as gemm_run cuts it) and then C += P, the second half's
 * sums. */
typedef struct {
    gemm_kind g;
    int64_t m, n, k, h, rsa, csa, rsb, csb, bs, rsc, csc, rsp, csp;
    const void *a, *b;
    unsigned bf;
    float alpha, beta;
    const float *bias;
    float *c, *p;
    bool split_m;
    int64_t dim, csz, q;
} split_k;

/* Piece ch of 2q: the first half's q pieces into C, then the second's into P */
static bool split_k_piece(const split_k *s, int64_t ch)
{
    const bool second = ch >= s->q;
    const int64_t o0 = (ch % s->q) * s->csz;
    const int64_t len = s->dim - o0 < s->csz ? s->dim - o0 : s->csz;
    if (len <= 0)
        return true;
    const int64_t k0 = second ? s->h : 0, kk = second ? s->k - s->h : s->h;
    const void *a = elem_at(s->a, s->bf & CG_GEMM_A_BF16, k0 * s->csa);
    const void *b = elem_at(s->b, s->bf & CG_GEMM_B_BF16, k0 * s->rsb);
    float *c = second ? s->p : s->c;
    const int64_t rsc = second ? s->rsp : s->rsc, csc = second ? s->csp : s->csc;
    const float beta = second ? 0.0f : s->beta;
    const float *bias = second ? NULL : s->bias;
    return piece_product(s->g, s->split_m, o0, len, s->m, s->n, kk, s->alpha, a, s->rsa, s->csa, b,
                         s->rsb, s->csb, s->bf, beta, bias, s->bs, c, rsc, csc, NULL);
}

/* C += P over the lines [l0, l1) of C as it is stored (rows when row-
 * stored), element by element: the same bits for any cut. */
static void split_k_add(const split_k *s, int64_t l0, int64_t l1)
{
    const bool rows = s->csp == 1; /* P is stored as C is */
    const int64_t len = rows ? s->n : s->m;
    const int64_t lc = rows ? s->rsc : s->csc, ec = rows ? s->csc : s->rsc;
    for (int64_t l = l0; l < l1; l++) {
        float *c = s->c + l * lc;
        const float *p = s->p + l * len;
        if (ec == 1)
            for (int64_t e = 0; e < len; e++)
                c[e] += p[e];
        else
            for (int64_t e = 0; e < len; e++)
                c[e * ec] += p[e];
    }
}

/* C = alpha A B + beta C (+ bias) as the two halves of k at h
 * (split_point) on nt threads; nt 1 runs the pieces in order. */
static bool split_k_product(gemm_kind g, int nt, int64_t m, int64_t n, int64_t k, int64_t h,
                            float alpha, const void *a, int64_t rsa, int64_t csa, const void *b,
                            int64_t rsb, int64_t csb, unsigned bf, float beta, const float *bias,
                            int64_t bs, float *c, int64_t rsc, int64_t csc)
{
    float *p = cg_alloc((size_t)(m * n) * sizeof(float));
    if (!p)
        return false;
    const bool rows = !(rsc == 1 && csc != 1); /* P laid out as C: by rows unless by columns */
    const bool split_m = m >= n;
    const int64_t dim = split_m ? m : n, q = nt / 2 > 1 ? nt / 2 : 1;
    int64_t csz = (dim + q - 1) / q;
    csz = (csz + CHUNK_UNIT - 1) / CHUNK_UNIT * CHUNK_UNIT;
    const split_k s = {.g = g,
                       .m = m,
                       .n = n,
                       .k = k,
                       .h = h,
                       .rsa = rsa,
                       .csa = csa,
                       .rsb = rsb,
                       .csb = csb,
                       .bs = bs,
                       .rsc = rsc,
                       .csc = csc,
                       .rsp = rows ? n : 1,
                       .csp = rows ? 1 : m,
                       .a = a,
                       .b = b,
                       .bf = bf,
                       .alpha = alpha,
                       .beta = beta,
                       .bias = bias,
                       .c = c,
                       .p = p,
                       .split_m = split_m,
                       .dim = dim,
                       .csz = csz,
                       .q = q};
    const int64_t lines = rows ? m : n, nch = 2 * q;
    bool ok = true;
    if (nt < 2) {
        for (int64_t ch = 0; ch < nch; ch++)
            ok = split_k_piece(&s, ch) && ok;
        split_k_add(&s, 0, lines);
    } else {
        cg_shares sh;
        cg_shares_init(&sh, nch, nt);
#pragma omp parallel num_threads(nt) reduction(&& : ok)
        {
            const int t = omp_get_thread_num(), T = omp_get_num_threads();
            for (int64_t ch; (ch = cg_shares_next(&sh, t)) >= 0;)
                ok = split_k_piece(&s, ch) && ok;
#pragma omp barrier
            split_k_add(&s, lines * t / T, lines * (t + 1) / T);
        }
        cg_shares_free(&sh);
    }
    cg_free(p);
    return ok;
}

/* The kernel of a path (not AUTO): false when this CPU lacks it. The CPU
 * is looked at first (a program's first product may name its path). */
static bool gemm_kind_of(cg_gemm_path path, gemm_kind *g)
{
    ensure_init();
    switch (path) {
    case CG_GEMM_SKX: g->cntx = &g_cntx_skx; return g_have_skx;
    case CG_GEMM_HASWELL: g->cntx = &g_cntx_haswell; return g_have_haswell;
    case CG_GEMM_DEFAULT: return true;
    case CG_GEMM_BF16: g->bf16 = CG_BF16_NATIVE; return g_bf16_native;
    case CG_GEMM_BF16_EMULATED: g->bf16 = CG_BF16_EMULATED; return g_have_haswell;
    case CG_GEMM_BF16_AMX: g->bf16 = CG_BF16_AMX; return g_bf16_amx;
    default: return false;
    }
}

int64_t cg_gemm_k_block(cg_gemm_path path, int64_t k, int64_t i)
{
    ensure_init();
    if (path == CG_GEMM_AUTO)
        path = cg_precision_path(cg_get_matmul_precision());
    gemm_kind g = {NULL, 0};
    if (i < 0 || i >= k || path == CG_GEMM_DEFAULT || !gemm_kind_of(path, &g))
        return 0;
    if (g.bf16)
        return k - i < CG_BF16_KC ? k - i : CG_BF16_KC;
    /* skx and haswell (our driver or BLIS's packed one): the context's KC, the last block stretched to its maximum as
     * BLIS's bli_determine_blocksize_f_sub and gemm_skx.c stretch it */
    return cg_gemm_block_at(k, i, bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_KC, g.cntx),
                            bli_cntx_get_blksz_max_dt(BLIS_FLOAT, BLIS_KC, g.cntx));
}

bool cg_gemm_adds_c_once(cg_gemm_path path)
{
    if (path == CG_GEMM_AUTO)
        path = cg_precision_path(cg_get_matmul_precision());
    return path != CG_GEMM_BF16_AMX;
}

int64_t cg_gemm_k_split(cg_gemm_path path, int64_t m, int64_t n, int64_t k)
{
    ensure_init();
    if (path == CG_GEMM_AUTO)
        path = cg_precision_path(cg_get_matmul_precision());
    gemm_kind g = {NULL, 0};
    if (m < 1 || n < 1 || path == CG_GEMM_DEFAULT || !gemm_kind_of(path, &g))
        return 0;
    return split_point(g, m, n, k, NULL);
}

/* gemm_run's failures, each with its message (false) */
static bool operand_oom(int64_t rows, int64_t cols)
{
    cg_set_error("gemm: out of memory for a %lld x %lld operand's float copy", (long long)rows,
                 (long long)cols);
    return false;
}
static bool buffers_oom(int64_t m, int64_t n, int64_t k)
{
    cg_set_error("gemm: out of memory for the packing buffers of a %lld x %lld x %lld product",
                 (long long)m, (long long)n, (long long)k);
    return false;
}

/* cg_sgemm_path and cg_sgemm_bias_path: beta 0 when there is a bias.
 * pre (bf16 only, C row-stored): B's transpose already packed, B unread.
 * size: the product's checks and dispatch, one decision after another. */
static bool gemm_run(cg_gemm_path path, int nthreads, int64_t m, int64_t n, int64_t k, float alpha,
                     const void *a, int64_t rsa, int64_t csa, const void *b, int64_t rsb,
                     int64_t csb, unsigned bf, float beta, const float *bias, int64_t bs, float *c,
                     int64_t rsc, int64_t csc, const cg_prepacked *pre)
{
    if (path == CG_GEMM_AUTO) /* the calling thread's policy */
        path = cg_precision_path(cg_get_matmul_precision());
    gemm_kind g = {NULL, 0};
    if (!gemm_kind_of(path, &g)) {
        cg_set_error("gemm: the %s path needs what this CPU lacks (cg_gemm_path_available)",
                     cg_gemm_path_name(path));
        return false;
    }
    if (pre && !g.bf16 && !(g.cntx == &g_cntx_skx && g_own_driver)) {
        cg_set_error("gemm: fp32 prepacked panels are read only on the skx path with our driver");
        return false;
    }
    if (m < 0 || n < 0 || k < 0) {
        cg_set_error("gemm: negative size in m=%lld n=%lld k=%lld", (long long)m, (long long)n,
                     (long long)k);
        return false;
    }
    if (m == 0 || n == 0)
        return true;
    cg_gemm_normalise_strides(m, n, &rsc, &csc);
    if (k == 0 || alpha == 0.0f) {
        if (bias) /* alpha*0 terms: as BLAS, A/B unread */
            fill_bias(m, n, bias, bs, c, rsc, csc);
        else
            scale_c(m, n, beta, c, rsc, csc);
        return true;
    }
    float *acopy = NULL, *bcopy = NULL;                        /* bf16 packing reads any strides */
    if (!g.bf16 && (bf & (CG_GEMM_A_BF16 | CG_GEMM_B_BF16))) { /* fp32: bf16 operands' floats */
        if ((bf & CG_GEMM_A_BF16) && !(a = acopy = widen(m, k, a, rsa, csa)))
            return operand_oom(m, k);
        if ((bf & CG_GEMM_B_BF16) && !(b = bcopy = widen(k, n, b, rsb, csb))) {
            free(acopy);
            return operand_oom(k, n);
        }
        bf &= CG_GEMM_C_ONCE;
    }
    bool ok = true;
    const int64_t h = split_point(g, m, n, k, pre); /* 0: one sum over k */
    if (!cg_gemm_strides_ok(m, n, rsc, csc)) {
        if (g.bf16 && h) /* one thread: tiles are written in order */
            ok = split_k_product(g, 1, m, n, k, h, alpha, a, rsa, csa, b, rsb, csb, bf, beta, bias,
                                 bs, c, rsc, csc);
        else if (g.bf16)
            ok = serial_product(g, m, n, k, alpha, a, rsa, csa, b, rsb, csb, bf, beta, bias, bs, c,
                                rsc, csc, pre);
        else {
            if (bias) /* C set to the bias, then C = alpha A B + 1 C */
                fill_bias(m, n, bias, bs, c, rsc, csc);
            naive_sgemm(m, n, k, alpha, a, rsa, csa, b, rsb, csb, bias ? 1.0f : beta, c, rsc, csc);
        }
        free(acopy);
        free(bcopy);
        return ok || buffers_oom(m, n, k);
    }

    cg_gemm_normalise_strides(m, k, &rsa, &csa);
    cg_gemm_normalise_strides(k, n, &rsb, &csb);
    if (!g.bf16 && !pre && g.cntx && g_have_haswell && (m <= SKINNY || n <= SKINNY) && csa == 1 &&
        rsb == 1) {
        if (bias)
            fill_bias(m, n, bias, bs, c, rsc, csc);
        skinny_product(nthreads, m, n, k, alpha, a, rsa, b, csb, bias ? 1.0f : beta, c, rsc, csc);
        free(acopy);
        free(bcopy);
        return true;
    }
    if (!g.bf16 && !pre && g.cntx && g_have_haswell && m == 1 && csb == 1 &&
        (bias || beta == 0.0f || beta == 1.0f)) {
        if (bias)
            fill_bias(m, n, bias, bs, c, rsc, csc);
        one_row_product(g.cntx, nthreads, n, k, alpha, (const float *)a, csa, (const float *)b, rsb,
                        bias ? 1.0f : beta, c, csc);
        free(acopy);
        free(bcopy);
        return true;
    }
    if (!g.bf16 && !cg_gemm_strides_ok(m, k, rsa, csa)) {
        float *t = copy_rowmajor(m, k, a, rsa, csa);
        free(acopy);
        if (!(acopy = t)) {
            free(bcopy);
            return operand_oom(m, k);
        }
        a = acopy;
        rsa = k;
        csa = 1;
        cg_gemm_normalise_strides(m, k, &rsa, &csa);
    }
    if (!g.bf16 && !cg_gemm_strides_ok(k, n, rsb, csb)) {
        float *t = copy_rowmajor(k, n, b, rsb, csb);
        free(bcopy);
        if (!(bcopy = t)) {
            free(acopy);
            return operand_oom(k, n);
        }
        b = bcopy;
        rsb = n;
        csb = 1;
        cg_gemm_normalise_strides(k, n, &rsb, &csb);
    }

    /* Threading splits C ourselves into one block of rows (or of columns
     * when C is wide) per thread, each a call to the single-threaded
     * (serial) BLIS. BLIS's own thread barriers spin without yielding: on a
     * shared machine a descheduled partner made them burn most of a step;
     * libgomp's barrier sleeps. The serial build also opens no OpenMP region
     * of its own, so a call from inside one of ours costs no team set-up
     * (an OpenMP-threaded BLIS paid a futex round trip per call for its
     * nested one-thread team). Each element of C is still computed by the
     * same kernel with the same k blocking (the skx and haswell contexts fix
     * kc), so the
     * result does not depend on the split or the thread count. bf16
     * products run twice as fast: half the flops for the same time.
     * BLIS's own choice is not split: on a CPU it knows (it takes AMD Zen 4
     * for zen3) it chooses between its small-matrix and packed kernels from
     * the sizes it is given, so halves of C could be summed differently and
     * the bits would change with the thread count (seen on 513 x 479 x 611). */
    int nt = path == CG_GEMM_DEFAULT
                 ? 1
                 : threads_for(nthreads, (g.bf16 ? 1.0 : 2.0) * (double)m * (double)n * (double)k);
    const bool split_m = m >= n;
    const int64_t dim = split_m ? m : n;
    int64_t csz = (dim + nt - 1) / nt;
    /* a prepacked operand is cut at its panels (the same bits either way) */
    const int64_t unit = pre && !split_m ? CG_BF16_MR : CHUNK_UNIT;
    csz = (csz + unit - 1) / unit * unit;
    int64_t nch = (dim + csz - 1) / csz;
    if (nt > nch)
        nt = (int)nch;
    /* A prepacked weight's product split by rows of x costs nothing more in
     * smaller chunks (each reads its own rows and W's panels): several a
     * thread, taken as threads come free, so that a thread slowed down
     * (the other core's data, the host's other work) takes fewer. */
    const bool dyn = nt > 1 && pre && split_m && dim >= 2 * DYN_ROWS * nt;
    if (dyn) {
        const int64_t want = dim / DYN_ROWS < DYN_CHUNKS * nt ? dim / DYN_ROWS : DYN_CHUNKS * nt;
        csz = (dim + want - 1) / want;
        csz = (csz + unit - 1) / unit * unit;
        nch = (dim + csz - 1) / csz;
    }
    /* bf16 on AMX: the threads pack the shared operand once, together
     * (cg_bf16_gemm_parallel), except that a prepacked weight's product
     * split by rows of x shares nothing worth packing once (each thread
     * packs its own rows of x, a panel at a time, and reads W's panels;
     * sharing x's panels made a 3072 x 256 x 256 forward twice as slow on
     * 2 threads). On the native and emulated kernels never: each thread's
     * independent product, packing what it reads itself, was never slower
     * on Zen 5 and up to 1.4x as fast (native weight gradients: 256 x 256
     * x 3072 0.655 against 1.052 ms, 768 x 768 x 1024 1.83 against 2.36; a
     * forward reading x in place 0.449 against 0.508; emulated: 2.41
     * against 3.10 and 6.22 against 7.13): reading the other core's panels
     * cost more than packing twice. */
    const bool share = nt > 1 && g.bf16 == CG_BF16_AMX && !(pre && split_m) &&
                       cg_bf16_gemm_shares_packing(g.bf16, m, n, k, rsc, csc, nt);
    if (h) {
        ok = split_k_product(g, nt, m, n, k, h, alpha, a, rsa, csa, b, rsb, csb, bf, beta, bias, bs,
                             c, rsc, csc);
    } else if (share) {
        /* bf16: the threads pack the shared operand once, together */
        ok = cg_bf16_gemm_parallel(g.bf16, nt, m, n, k, alpha, a, rsa, csa, b, rsb, csb, bf, beta,
                                   bias, bs, c, rsc, csc, pre);
    } else if (nt == 1) {
        ok = serial_product(g, m, n, k, alpha, a, rsa, csa, b, rsb, csb, bf, beta, bias, bs, c, rsc,
                            csc, pre);
    } else {
        /* the chunks in shares (core/shares.h) */
        cg_shares sh;
        cg_shares_init(&sh, nch, nt);
#pragma omp parallel num_threads(nt) reduction(&& : ok)
        for (int64_t ch; (ch = cg_shares_next(&sh, omp_get_thread_num())) >= 0;) {
            int64_t o0 = ch * csz, len = dim - o0 < csz ? dim - o0 : csz;
            ok = piece_product(g, split_m, o0, len, m, n, k, alpha, a, rsa, csa, b, rsb, csb, bf,
                               beta, bias, bs, c, rsc, csc, pre) &&
                 ok;
        }
        cg_shares_free(&sh);
    }
    free(acopy);
    free(bcopy);
    return ok || buffers_oom(m, n, k);
}

bool cg_sgemm_path(cg_gemm_path path, int nthreads, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t rsa, int64_t csa, const float *b, int64_t rsb,
                   int64_t csb, float beta, float *c, int64_t rsc, int64_t csc)
{
    return gemm_run(path, nthreads, m, n, k, alpha, a, rsa, csa, b, rsb, csb, 0, beta, NULL, 0, c,
                    rsc, csc, NULL);
}

bool cg_gemm_mixed_path(cg_gemm_path path, int nthreads, int64_t m, int64_t n, int64_t k,
                        float alpha, const void *a, int64_t rsa, int64_t csa, const void *b,
                        int64_t rsb, int64_t csb, unsigned bf, float beta, float *c, int64_t rsc,
                        int64_t csc)
{
    return gemm_run(path, nthreads, m, n, k, alpha, a, rsa, csa, b, rsb, csb,
                    bf & (CG_GEMM_A_BF16 | CG_GEMM_B_BF16 | CG_GEMM_C_ONCE), beta, NULL, 0, c, rsc,
                    csc, NULL);
}

bool cg_sgemm_bias_path(cg_gemm_path path, int nthreads, int64_t m, int64_t n, int64_t k,
                        const float *a, int64_t rsa, int64_t csa, const float *b, int64_t rsb,
                        int64_t csb, const float *bias, int64_t bs, float *c, int64_t rsc,
                        int64_t csc)
{
    return gemm_run(path, nthreads, m, n, k, 1.0f, a, rsa, csa, b, rsb, csb, 0, 0.0f, bias, bs, c,
                    rsc, csc, NULL);
}

bool cg_gemm_prepacked(int path, int nthreads, int64_t m, int64_t n, int64_t k, const void *x,
                       unsigned bf, int64_t rsx, int64_t csx, const cg_prepacked *w,
                       const float *bias, int64_t bs, float beta, float *c, int64_t rsc,
                       int64_t csc)
{
    if (!w || !w->p || m < 2 || n < 2 || csc != 1 || rsc < n)
        return false; /* C would not be turned over: A would not be W */
    return gemm_run(path, nthreads, m, n, k, 1.0f, x, rsx, csx, NULL, 1, k,
                    bf & (CG_GEMM_A_BF16 | CG_GEMM_C_ONCE), bias ? 0.0f : beta, bias, bs, c, rsc,
                    csc, w);
}

void cg_sgemm_bias(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa,
                   const float *b, int64_t rsb, int64_t csb, const float *bias, int64_t bs,
                   float *c, int64_t rsc, int64_t csc)
{
    /* a failure leaves its message (gemm_run's) */
    (void)cg_sgemm_bias_path(CG_GEMM_AUTO, 0, m, n, k, a, rsa, csa, b, rsb, csb, bias, bs, c, rsc,
                             csc);
}

void cg_sgemm(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa,
              int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta, float *c,
              int64_t rsc, int64_t csc)
{
    /* a failure leaves its message (gemm_run's) */
    (void)cg_sgemm_path(CG_GEMM_AUTO, 0, m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc,
                        csc);
}

/* ------------------------------------------------ prepacked fp32 weights */

_Static_assert(CG_SKX_MR == CG_BF16_MR, "one panel height for prepacked weights");

struct cg_f32_packed {
    int64_t n, k;
    float *p; /* cg_skx_pack_rows's panels, 64-byte aligned */
};

bool cg_f32_packed_usable(void)
{
    ensure_init();
    return g_have_skx && g_own_driver && cg_precision_path(CG_PRECISION_FP32) == CG_GEMM_SKX;
}

cg_f32_packed *cg_f32_packed_new(int64_t n, int64_t k, const float *w, int64_t rsw, int64_t csw)
{
    if (n < 1 || k < 1 || !w) {
        cg_set_error("fp32 packed weight: need a [n, k] matrix with n, k >= 1");
        return NULL;
    }
    if (!cg_f32_packed_usable()) {
        cg_set_error("fp32 packed weight: the fp32 path is not the AVX-512 (skx) driver");
        return NULL;
    }
    cg_f32_packed *m = malloc(sizeof *m);
    float *p = m ? cg_alloc(cg_skx_pack_floats(n, k) * sizeof(float)) : NULL;
    if (!p) {
        free(m);
        cg_set_error("fp32 packed weight: out of memory for %lld x %lld", (long long)n,
                     (long long)k);
        return NULL;
    }
    cg_skx_pack_rows(n, k, w, rsw, csw, p);
    *m = (cg_f32_packed){n, k, p};
    return m;
}

void cg_f32_packed_free(cg_f32_packed *m)
{
    if (m)
        cg_free(m->p);
    free(m);
}

size_t cg_f32_packed_size(int64_t n, int64_t k) { return cg_skx_pack_floats(n, k) * sizeof(float); }

size_t cg_f32_packed_bytes(const cg_f32_packed *m)
{
    return m ? cg_f32_packed_size(m->n, m->k) : 0;
}

bool cg_f32_packed_mul(const cg_f32_packed *w, int nthreads, int64_t m, const float *x, int64_t rsx,
                       int64_t csx, const float *bias, int64_t bs, float *y, int64_t rsy)
{
    if (!w || !x || !y || m <= CG_GEMM_SKINNY || w->n <= CG_GEMM_SKINNY || rsy < w->n) {
        cg_set_error("fp32 packed product: need more than %d rows of x and of W, and y [m, n] "
                     "row-stored",
                     CG_GEMM_SKINNY);
        return false;
    }
    const cg_prepacked pre = {w->p, w->k, NULL};
    if (cg_gemm_prepacked(CG_GEMM_SKX, nthreads, m, w->n, w->k, x, 0, rsx, csx, &pre, bias, bs,
                          0.0f, y, rsy, 1))
        return true;
    cg_set_error("fp32 packed product: out of memory");
    return false;
}
