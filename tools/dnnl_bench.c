/* oneDNN (Debian libdnnl 2.6, C API) matrix products in bf16 and fp32, for
 * issue 12's "oneDNN against our own vdpbf16ps kernel" measurement.
 *
 *   dnnl_bench [--runs R] [--filter TEXT] [--threads LIST] [--no-check]
 *
 * For C[m,n] = A[m,k] @ B[k,n] (fp32 C, row-major) on 1 and 2 threads:
 *   bf16      bf16 A and B already converted (the kernel's peak)
 *   cvt+bf16  fp32 A and B: two reorder primitives to bf16 (same strides),
 *             then the bf16 matmul, all three timed (what fp32 weights and
 *             activations would pay each call)
 *   bf16_pkB  bf16 A; B converted once into the layout oneDNN asks for
 *             (format "any": blocked, VNNI pairs), not packed per call
 *   cvt+bf16_pkB  fp32 A and B: A reordered to bf16, B reordered straight
 *             into that blocked bf16 layout (rounding while packing), then
 *             the matmul, all timed
 *   f32       oneDNN's fp32 matmul
 *   f32+fpmath_bf16  fp32 matmul with dnnl_fpmath_mode_bf16 (implicit
 *             down-conversion allowed; "impl" says whether it was taken)
 *   ours_f32  our cg_sgemm_path (CG_GEMM_AUTO) on the same operands
 *   ours_bf16 our bf16 product (CG_GEMM_BF16: rounding while packing the fp32
 *             operands, AVX512_BF16 micro-kernel) on the same operands
 * Shapes: 1024^3, and the three products of every Linear of both models'
 * tiny and base presets (tools/bench.c): forward Y = X W^T (m = B*T,
 * k = in, n = out, B transposed), dX = dY W (m = B*T, k = out, n = in) and
 * dW = dY^T X (m = out, k = B*T, n = in, A transposed); and attention's two
 * forward products as core/attention.c calls them, one (batch, head) per
 * thread: S = Q K^T and O = P V for a block of up to 64 query rows.
 * Threads: omp_set_num_threads(t) before a primitive is created and run
 * (this oneDNN uses OpenMP); a primitive is created for each thread count.
 * Timing: two warm-up runs, then the median (and min, max) of R runs (default 9),
 * the configurations interleaved run by run. On a loaded machine the wall
 * time counts time spent descheduled; gflops_cputime divides by the median
 * CPU time instead (this thread's on 1 thread; on t threads the process's
 * divided by t, barrier spinning included): an estimate of the idle speed.
 * Creation: desc init + primitive_desc + primitive, median of R, once with
 * the primitive cache at capacity 0 (every creation a miss) and once at the
 * default capacity after a first creation (a hit; the primitive_desc is
 * still built each time). For the _pkB configurations creation includes the
 * B reorder's creation and the packed buffer's allocation.
 * Checks: the bf16 product against a float64 reference of the fp32 inputs
 * and of the bf16-rounded inputs, as max |C - R| / ||(a_ip b_pj)_p||_2 (the
 * error relative to sqrt(k) times the rms term); the reorder's fp32 -> bf16
 * rounding compared bit by bit with round-to-nearest-even, and whether the
 * fpmath matmul rounds its inputs, and how.
 * Output: one JSON line per configuration (nulls where not available). Run
 * with ONEDNN_VERBOSE=1 to see oneDNN's own dispatch lines (on stdout). */
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "core/dtype.h"
#include "core/gemm.h"
#include "core/tensor.h"

#define CK(call)                                                                         \
    do {                                                                                 \
        dnnl_status_t st_ = (call);                                                      \
        if (st_ != dnnl_success) {                                                       \
            fprintf(stderr, "dnnl_bench: %s failed: %s\n", #call, dnnl_status2str(st_)); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

static dnnl_engine_t g_eng;
static dnnl_stream_t g_strm;
static int g_runs = 9;

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static void *xalloc(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "dnnl_bench: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* One product: C[m,n] = A[m,k] @ B[k,n], A and B with element strides, C
 * row-major. */
typedef struct {
    char name[48];
    int64_t m, n, k;
    int64_t rsa, csa, rsb, csb;
} shape;

typedef struct {
    float *a, *b, *c;
    uint16_t *a16, *b16;
} bufs;

/* Elements spanned by an [r,c] operand with strides rs, cs. */
static size_t span(int64_t r, int64_t c, int64_t rs, int64_t cs)
{
    return (size_t)((r - 1) * rs + (c - 1) * cs + 1);
}

/* fp32 A, B, C and bf16 A, B for s, A and B uniform in [-1, 1) (normal with
 * normal = true), the unused elements between strided rows included. */
static bufs make_bufs(const shape *s, bool normal, uint64_t seed)
{
    size_t na = span(s->m, s->k, s->rsa, s->csa), nb = span(s->k, s->n, s->rsb, s->csb);
    size_t nc = (size_t)(s->m * s->n);
    bufs bf = {xalloc(na * 4), xalloc(nb * 4), xalloc(nc * 4), xalloc(na * 2), xalloc(nb * 2)};
    cg_rng rng = cg_rng_new(seed);
    for (size_t i = 0; i < na; i++)
        bf.a[i] = normal ? cg_rng_normal(&rng) : 2.0f * cg_rng_uniform(&rng) - 1.0f;
    for (size_t i = 0; i < nb; i++)
        bf.b[i] = normal ? cg_rng_normal(&rng) : 2.0f * cg_rng_uniform(&rng) - 1.0f;
    return bf;
}

static void free_bufs(bufs *bf)
{
    free(bf->a), free(bf->b), free(bf->c), free(bf->a16), free(bf->b16);
}

static void md2d(dnnl_memory_desc_t *md, int64_t r, int64_t c, int64_t rs, int64_t cs,
                 dnnl_data_type_t dt)
{
    dnnl_dims_t dims = {r, c}, strides = {rs, cs};
    CK(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides));
}

static dnnl_memory_t mem(const dnnl_memory_desc_t *md, void *p)
{
    dnnl_memory_t m;
    CK(dnnl_memory_create(&m, md, g_eng, p));
    return m;
}

static const char *impl_of(const_dnnl_primitive_t p)
{
    const_dnnl_primitive_desc_t pd;
    const char *s = NULL;
    CK(dnnl_primitive_get_primitive_desc(p, &pd));
    CK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s));
    return s ? s : "?";
}

/* The matmul primitive for s with the given input type; fpmath selects
 * dnnl_fpmath_mode_bf16. Returns NULL if oneDNN has no implementation. */
static dnnl_primitive_t make_matmul(const shape *s, dnnl_data_type_t in_dt, bool fpmath, bool b_any)
{
    dnnl_memory_desc_t amd, bmd, cmd;
    md2d(&amd, s->m, s->k, s->rsa, s->csa, in_dt);
    if (b_any) {
        dnnl_dims_t dims = {s->k, s->n};
        CK(dnnl_memory_desc_init_by_tag(&bmd, 2, dims, in_dt, dnnl_format_tag_any));
    } else {
        md2d(&bmd, s->k, s->n, s->rsb, s->csb, in_dt);
    }
    md2d(&cmd, s->m, s->n, s->n, 1, dnnl_f32);
    dnnl_matmul_desc_t d;
    CK(dnnl_matmul_desc_init(&d, &amd, &bmd, NULL, &cmd));
    dnnl_primitive_attr_t attr = NULL;
    if (fpmath) {
        CK(dnnl_primitive_attr_create(&attr));
        CK(dnnl_primitive_attr_set_fpmath_mode(attr, dnnl_fpmath_mode_bf16));
    }
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &d, attr, g_eng, NULL);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (st == dnnl_unimplemented)
        return NULL;
    CK(st);
    dnnl_primitive_t p;
    CK(dnnl_primitive_create(&p, pd));
    CK(dnnl_primitive_desc_destroy(pd));
    return p;
}

/* fp32 [r,c] -> bf16 [r,c], same strides, or into the layout dst if given. */
static dnnl_primitive_t make_reorder(int64_t r, int64_t c, int64_t rs, int64_t cs,
                                     const dnnl_memory_desc_t *dst)
{
    dnnl_memory_desc_t smd, dmd;
    md2d(&smd, r, c, rs, cs, dnnl_f32);
    md2d(&dmd, r, c, rs, cs, dnnl_bf16);
    dnnl_primitive_desc_t pd;
    CK(dnnl_reorder_primitive_desc_create(&pd, &smd, g_eng, dst ? dst : &dmd, g_eng, NULL));
    dnnl_primitive_t p;
    CK(dnnl_primitive_create(&p, pd));
    CK(dnnl_primitive_desc_destroy(pd));
    return p;
}

typedef enum {
    CFG_BF16,
    CFG_CVT_BF16,
    CFG_BF16_PKB,
    CFG_CVT_BF16_PKB,
    CFG_F32,
    CFG_F32_FPMATH,
    CFG_OURS,
    CFG_OURS_BF16,
    NCFG
} config;
static const char *cfg_name[NCFG] = {"bf16", "cvt+bf16",        "bf16_pkB", "cvt+bf16_pkB",
                                     "f32",  "f32+fpmath_bf16", "ours_f32", "ours_bf16"};

/* The primitives of one configuration (NULL where unused), and for the _pkB
 * configurations the bf16 B in oneDNN's chosen layout (library-allocated). */
typedef struct {
    dnnl_primitive_t mm, ra, rb;
    dnnl_memory_t bpk;
} prims;

static prims make_prims(const shape *s, config c)
{
    prims p = {0};
    switch (c) {
    case CFG_CVT_BF16:
        p.ra = make_reorder(s->m, s->k, s->rsa, s->csa, NULL);
        p.rb = make_reorder(s->k, s->n, s->rsb, s->csb, NULL);
        /* fall through */
    case CFG_BF16: p.mm = make_matmul(s, dnnl_bf16, false, false); break;
    case CFG_CVT_BF16_PKB: p.ra = make_reorder(s->m, s->k, s->rsa, s->csa, NULL); /* fall through */
    case CFG_BF16_PKB: {
        p.mm = make_matmul(s, dnnl_bf16, false, true);
        if (!p.mm)
            break;
        const_dnnl_primitive_desc_t pd;
        CK(dnnl_primitive_get_primitive_desc(p.mm, &pd));
        const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        CK(dnnl_memory_create(&p.bpk, wmd, g_eng, DNNL_MEMORY_ALLOCATE));
        p.rb = make_reorder(s->k, s->n, s->rsb, s->csb, wmd);
        break;
    }
    case CFG_F32: p.mm = make_matmul(s, dnnl_f32, false, false); break;
    case CFG_F32_FPMATH: p.mm = make_matmul(s, dnnl_f32, true, false); break;
    default: break;
    }
    return p;
}

static void destroy_prims(prims *p)
{
    if (p->mm)
        dnnl_primitive_destroy(p->mm);
    if (p->ra)
        dnnl_primitive_destroy(p->ra);
    if (p->rb)
        dnnl_primitive_destroy(p->rb);
    if (p->bpk)
        dnnl_memory_destroy(p->bpk);
    *p = (prims){0};
}

/* Memory objects of one shape over the buffers. */
typedef struct {
    dnnl_memory_t a, b, c, a16, b16;
} mems;

static mems make_mems(const shape *s, bufs *bf)
{
    dnnl_memory_desc_t md;
    mems m;
    md2d(&md, s->m, s->k, s->rsa, s->csa, dnnl_f32);
    m.a = mem(&md, bf->a);
    md2d(&md, s->k, s->n, s->rsb, s->csb, dnnl_f32);
    m.b = mem(&md, bf->b);
    md2d(&md, s->m, s->n, s->n, 1, dnnl_f32);
    m.c = mem(&md, bf->c);
    md2d(&md, s->m, s->k, s->rsa, s->csa, dnnl_bf16);
    m.a16 = mem(&md, bf->a16);
    md2d(&md, s->k, s->n, s->rsb, s->csb, dnnl_bf16);
    m.b16 = mem(&md, bf->b16);
    return m;
}

static void destroy_mems(mems *m)
{
    dnnl_memory_destroy(m->a);
    dnnl_memory_destroy(m->b);
    dnnl_memory_destroy(m->c);
    dnnl_memory_destroy(m->a16);
    dnnl_memory_destroy(m->b16);
}

static void reorder(dnnl_primitive_t r, dnnl_memory_t from, dnnl_memory_t to)
{
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    CK(dnnl_primitive_execute(r, g_strm, 2, args));
}

static void matmul(dnnl_primitive_t p, dnnl_memory_t a, dnnl_memory_t b, dnnl_memory_t c)
{
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
    CK(dnnl_primitive_execute(p, g_strm, 3, args));
}

static void run_once(const shape *s, config c, const prims *p, const mems *m, const bufs *bf,
                     int threads)
{
    switch (c) {
    case CFG_CVT_BF16:
        reorder(p->ra, m->a, m->a16);
        reorder(p->rb, m->b, m->b16);
        /* fall through */
    case CFG_BF16: matmul(p->mm, m->a16, m->b16, m->c); break;
    case CFG_CVT_BF16_PKB:
        reorder(p->ra, m->a, m->a16);
        reorder(p->rb, m->b, p->bpk);
        /* fall through */
    case CFG_BF16_PKB: matmul(p->mm, m->a16, p->bpk, m->c); break;
    case CFG_F32:
    case CFG_F32_FPMATH: matmul(p->mm, m->a, m->b, m->c); break;
    case CFG_OURS_BF16:
        cg_sgemm_path(CG_GEMM_BF16, threads, s->m, s->n, s->k, 1.0f, bf->a, s->rsa, s->csa, bf->b,
                      s->rsb, s->csb, 0.0f, bf->c, s->n, 1);
        break;
    case CFG_OURS:
        cg_sgemm_path(CG_GEMM_AUTO, threads, s->m, s->n, s->k, 1.0f, bf->a, s->rsa, s->csa, bf->b,
                      s->rsb, s->csb, 0.0f, bf->c, s->n, 1);
        break;
    default: break;
    }
    CK(dnnl_stream_wait(g_strm));
}

/* Median, min and max of timings (seconds); sorts t. */
typedef struct {
    double med, min, max;
} stats;

static stats summarise(double *t, int n)
{
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    return (stats){t[n / 2], t[0], t[n - 1]};
}

/* Creation time (s) of config c's primitives, median of g_runs; with the
 * primitive cache at capacity 0 (cached = false) or at its default capacity
 * after one creation (cached = true). */
static double creation_time(const shape *s, config c, bool cached, int default_capacity)
{
    double *t = xalloc((size_t)g_runs * sizeof(double));
    CK(dnnl_set_primitive_cache_capacity(cached ? default_capacity : 0));
    prims p = make_prims(s, c);
    destroy_prims(&p);
    for (int r = 0; r < g_runs; r++) {
        double t0 = now_s();
        p = make_prims(s, c);
        t[r] = now_s() - t0;
        destroy_prims(&p);
    }
    double med = summarise(t, g_runs).med;
    free(t);
    CK(dnnl_set_primitive_cache_capacity(default_capacity));
    return med;
}

/* Times every configuration on s, the configurations interleaved run by run
 * (so that a change in the machine's load hits all of them alike). */
static void bench_shape(const shape *s, int threads, int default_capacity)
{
    bufs bf = make_bufs(s, false, 1);
    mems m = make_mems(s, &bf);
    double flop = 2.0 * (double)s->m * (double)s->n * (double)s->k;
    double *t = xalloc((size_t)(NCFG * g_runs) * sizeof(double));
    double *tc = xalloc((size_t)(NCFG * g_runs) * sizeof(double));
    /* CPU time: of this thread on 1 thread (all the work runs on it), of
     * the process on more (spinning in barriers included) */
    clockid_t cpu_clock = threads == 1 ? CLOCK_THREAD_CPUTIME_ID : CLOCK_PROCESS_CPUTIME_ID;
    prims p[NCFG];
    char impl[NCFG][64]; /* copies: the strings die with the primitives */
    bool ok[NCFG];
    omp_set_num_threads(threads);
    for (int c = 0; c < NCFG; c++) {
        p[c] = make_prims(s, (config)c);
        bool ours = c == CFG_OURS || c == CFG_OURS_BF16;
        ok[c] = ours ? c == CFG_OURS || cg_gemm_path_available(CG_GEMM_BF16) : p[c].mm != NULL;
        snprintf(impl[c], sizeof impl[c], "%s",
                 c == CFG_OURS        ? "cg_sgemm"
                 : c == CFG_OURS_BF16 ? "cg_sgemm bf16"
                 : ok[c]              ? impl_of(p[c].mm)
                                      : "");
    }
    /* bf16 inputs for CFG_BF16(_PKB) come from a conversion done once */
    prims cv = make_prims(s, CFG_CVT_BF16);
    reorder(cv.ra, m.a, m.a16);
    reorder(cv.rb, m.b, m.b16);
    if (ok[CFG_BF16_PKB])
        reorder(p[CFG_BF16_PKB].rb, m.b, p[CFG_BF16_PKB].bpk);
    CK(dnnl_stream_wait(g_strm));
    destroy_prims(&cv);
    for (int w = 0; w < 2; w++)
        for (int c = 0; c < NCFG; c++)
            if (ok[c])
                run_once(s, (config)c, &p[c], &m, &bf, threads);
    for (int r = 0; r < g_runs; r++)
        for (int c = 0; c < NCFG; c++) {
            if (!ok[c])
                continue;
            double t0 = now_s(), c0 = clock_s(cpu_clock);
            run_once(s, (config)c, &p[c], &m, &bf, threads);
            t[c * g_runs + r] = now_s() - t0;
            tc[c * g_runs + r] = clock_s(cpu_clock) - c0;
        }
    for (int c = 0; c < NCFG; c++)
        destroy_prims(&p[c]);

    for (int c = 0; c < NCFG; c++) {
        if (!ok[c]) {
            printf("{\"bench\": \"dnnl\", \"shape\": \"%s\", \"m\": %lld, \"n\": %lld, "
                   "\"k\": %lld, \"threads\": %d, \"config\": \"%s\", \"impl\": null, "
                   "\"gflops\": null}\n",
                   s->name, (long long)s->m, (long long)s->n, (long long)s->k, threads,
                   cfg_name[c]);
            continue;
        }
        stats st = summarise(t + c * g_runs, g_runs);
        double cpu = summarise(tc + c * g_runs, g_runs).med / threads;
        char create[160] = "\"create_us_nocache\": null, \"create_us_cached\": null";
        if (c != CFG_OURS && c != CFG_OURS_BF16)
            snprintf(create, sizeof create,
                     "\"create_us_nocache\": %.1f, \"create_us_cached\": %.1f",
                     1e6 * creation_time(s, (config)c, false, default_capacity),
                     1e6 * creation_time(s, (config)c, true, default_capacity));
        printf("{\"bench\": \"dnnl\", \"shape\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, "
               "\"threads\": %d, \"config\": \"%s\", \"impl\": \"%s\", \"runs\": %d, "
               "\"us_median\": %.1f, \"gflops\": %.1f, \"gflops_min\": %.1f, \"gflops_max\": %.1f, "
               "\"gflops_cputime\": %.1f, %s}\n",
               s->name, (long long)s->m, (long long)s->n, (long long)s->k, threads, cfg_name[c],
               impl[c], g_runs, 1e6 * st.med, flop / st.med * 1e-9, flop / st.max * 1e-9,
               flop / st.min * 1e-9, flop / cpu * 1e-9, create);
        fflush(stdout);
    }
    free(t);
    free(tc);
    destroy_mems(&m);
    free_bufs(&bf);
}

/* ------------------------------------------------------------- numerics */

static bool is_subnormal(float f) { return f != 0.0f && fabsf(f) < 1.17549435e-38f; }

/* fp32 -> bf16 by oneDNN's reorder, n values. */
static void dnnl_to_bf16(const float *x, uint16_t *y, int64_t n)
{
    dnnl_memory_desc_t smd, dmd;
    md2d(&smd, 1, n, n, 1, dnnl_f32);
    md2d(&dmd, 1, n, n, 1, dnnl_bf16);
    dnnl_memory_t a = mem(&smd, (void *)x), b = mem(&dmd, y);
    dnnl_primitive_t r = make_reorder(1, n, n, 1, NULL);
    reorder(r, a, b);
    CK(dnnl_stream_wait(g_strm));
    dnnl_primitive_destroy(r);
    dnnl_memory_destroy(a);
    dnnl_memory_destroy(b);
}

/* Special and tie values, then random ones. */
static int64_t rounding_inputs(float *x, int64_t cap)
{
    static const uint32_t bits[] = {
        0x3f808000u,                           /* 1 + 2^-8: tie, even below -> 1.0 */
        0x3f818000u,                           /* 1 + 3*2^-8: tie, even above */
        0x3f808001u,                           /* just above a tie -> up */
        0x3f807fffu,                           /* just below a tie -> down */
        0xbf818000u,                           /* negative tie */
        0x7f7fffffu,                           /* FLT_MAX -> inf under RNE */
        0x7f7f7fffu,                           /* rounds to the largest bf16 */
        0x7f800000u, 0xff800000u,              /* +-inf */
        0x7fc00000u, 0x7f800001u, 0xffc00001u, /* NaNs (one signalling) */
        0x00000001u, 0x00400000u, 0x807fffffu, /* subnormals */
        0x00800000u,                           /* smallest normal */
        0x00000000u, 0x80000000u,
    };
    int64_t n = 0;
    for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++)
        memcpy(&x[n++], &bits[i], 4);
    cg_rng rng = cg_rng_new(7);
    while (n < cap) {
        uint32_t u = (uint32_t)cg_rng_below(&rng, 1ull << 32);
        float f;
        memcpy(&f, &u, 4);
        x[n++] = f; /* all bit patterns: every exponent, NaNs and subnormals included */
    }
    return n;
}

typedef struct {
    int64_t n, mismatch, mismatch_nan, mismatch_subnormal, subnormal, subnormal_to_zero;
} rounding_report;

static rounding_report compare_rne(const float *x, const uint16_t *y, int64_t n)
{
    rounding_report r = {.n = n};
    for (int64_t i = 0; i < n; i++) {
        uint16_t want = cg_f32_to_bf16(x[i]);
        bool nan = isnan(x[i]);
        if (is_subnormal(x[i])) {
            r.subnormal++;
            if ((y[i] & 0x7fffu) == 0 && (y[i] >> 15) == (want >> 15))
                r.subnormal_to_zero++;
        }
        if (nan ? !isnan(cg_bf16_to_f32(y[i])) : y[i] != want) {
            r.mismatch++;
            if (is_subnormal(x[i]))
                r.mismatch_subnormal++;
        } else if (nan && y[i] != want) {
            r.mismatch_nan++; /* a NaN, but another payload */
        }
    }
    return r;
}

/* float64 references of A @ B with A and B as given (fp32) or after
 * rounding to bf16 (round = true): r = the sum, q = the sum of squared terms. */
static void reference(const shape *s, const float *a, const float *b, bool round, double *r,
                      double *q)
{
    memset(r, 0, (size_t)(s->m * s->n) * sizeof(double));
    memset(q, 0, (size_t)(s->m * s->n) * sizeof(double));
    for (int64_t i = 0; i < s->m; i++)
        for (int64_t p = 0; p < s->k; p++) {
            float af = a[i * s->rsa + p * s->csa];
            double av = round ? cg_bf16_to_f32(cg_f32_to_bf16(af)) : af;
            double *ri = r + i * s->n, *qi = q + i * s->n;
            for (int64_t j = 0; j < s->n; j++) {
                float bv = b[p * s->rsb + j * s->csb];
                double t = av * (round ? cg_bf16_to_f32(cg_f32_to_bf16(bv)) : bv);
                ri[j] += t;
                qi[j] += t * t;
            }
        }
}

/* max over (i,j) of |C - R| / ||(a_ip b_pj)_p||_2 */
static double product_error(int64_t n, const float *c, const double *r, const double *q)
{
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)c[i] - r[i]) / sqrt(q[i]);
        if (d > e)
            e = d;
    }
    return e;
}

static void check_product(const shape *s)
{
    size_t nc = (size_t)(s->m * s->n);
    bufs bf = make_bufs(s, true, 3);
    mems m = make_mems(s, &bf);
    double *ref = xalloc(4 * nc * sizeof(double));
    reference(s, bf.a, bf.b, false, ref, ref + nc);
    reference(s, bf.a, bf.b, true, ref + 2 * nc, ref + 3 * nc);
    omp_set_num_threads(2);
    for (int c = CFG_CVT_BF16; c <= CFG_F32_FPMATH; c++) {
        if (c == CFG_BF16_PKB)
            continue;
        prims p = make_prims(s, (config)c);
        if (!p.mm)
            continue;
        run_once(s, (config)c, &p, &m, &bf, 2);
        printf("{\"bench\": \"dnnl_check\", \"shape\": \"%s\", \"m\": %lld, \"n\": %lld, "
               "\"k\": %lld, \"config\": \"%s\", \"impl\": \"%s\", \"err_vs_fp64\": %.3g, "
               "\"err_vs_fp64_of_bf16_inputs\": %.3g}\n",
               s->name, (long long)s->m, (long long)s->n, (long long)s->k, cfg_name[c],
               impl_of(p.mm), product_error((int64_t)nc, bf.c, ref, ref + nc),
               product_error((int64_t)nc, bf.c, ref + 2 * nc, ref + 3 * nc));
        destroy_prims(&p);
    }
    destroy_mems(&m);
    free(ref);
    free_bufs(&bf);
}

/* Rounding of oneDNN's reorder, and of the fpmath matmul: A [rows, 32] of
 * the rounding inputs (finite, normal ones for the matmul) times the 32x32
 * identity gives back A as the matmul rounded it. */
static void check_rounding(void)
{
    enum { N = 1 << 20 };
    float *x = xalloc(N * 4);
    uint16_t *y = xalloc(N * 2);
    int64_t n = rounding_inputs(x, N);
    omp_set_num_threads(2);
    dnnl_to_bf16(x, y, n);
    rounding_report r = compare_rne(x, y, n);
    printf("{\"bench\": \"dnnl_rne\", \"what\": \"reorder f32->bf16\", \"values\": %lld, "
           "\"mismatches\": %lld, \"mismatches_subnormal\": %lld, \"subnormal_inputs\": %lld, "
           "\"subnormal_to_signed_zero\": %lld, \"nan_payload_differs\": %lld}\n",
           (long long)r.n, (long long)r.mismatch, (long long)r.mismatch_subnormal,
           (long long)r.subnormal, (long long)r.subnormal_to_zero, (long long)r.mismatch_nan);

    /* finite normal values only: inf/NaN/subnormal would poison the sums */
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(x[i]) && !is_subnormal(x[i]) && fabsf(x[i]) < 1e30f && fabsf(x[i]) > 1e-30f)
            x[m++] = x[i];
    m = m / 32 * 32;
    shape s = {"identity", m / 32, 32, 32, 32, 1, 32, 1};
    float *eye = xalloc(32 * 32 * 4), *c = xalloc((size_t)m * 4);
    for (int i = 0; i < 32 * 32; i++)
        eye[i] = (i / 32 == i % 32) ? 1.0f : 0.0f;
    bufs bf = {x, eye, c, xalloc((size_t)m * 2), xalloc(32 * 32 * 2)};
    mems mm = make_mems(&s, &bf);
    prims p = make_prims(&s, CFG_F32_FPMATH);
    if (p.mm) {
        run_once(&s, CFG_F32_FPMATH, &p, &mm, &bf, 2);
        int64_t unchanged = 0, rne = 0, trunc = 0;
        for (int64_t i = 0; i < m; i++) {
            uint32_t xb, cb;
            memcpy(&xb, &x[i], 4);
            memcpy(&cb, &c[i], 4);
            if (cb == xb)
                unchanged++;
            if (cb == (uint32_t)cg_f32_to_bf16(x[i]) << 16)
                rne++;
            if (cb == (xb & 0xffff0000u))
                trunc++;
        }
        printf("{\"bench\": \"dnnl_rne\", \"what\": \"matmul f32 fpmath_mode=bf16\", \"impl\": "
               "\"%s\", \"values\": %lld, \"exact_f32\": %lld, \"equal_rne_bf16\": %lld, "
               "\"equal_truncated_bf16\": %lld}\n",
               impl_of(p.mm), (long long)m, (long long)unchanged, (long long)rne, (long long)trunc);
        destroy_prims(&p);
    }
    destroy_mems(&mm);
    free(x), free(y), free(eye), free(c), free(bf.a16), free(bf.b16);
}

/* --------------------------------------------------------------- shapes */

typedef struct {
    const char *name;
    int64_t tokens, T, d, d_ff, heads, vocab;
} preset;

/* tools/bench.c's presets (tokens = B*T; seq2seq with S = T) */
static const preset presets[] = {
    {"charlm_tiny", 12 * 64, 64, 128, 512, 4, 65},
    {"charlm_base", 16 * 256, 256, 384, 1536, 6, 65},
    {"seq2seq_tiny", 32 * 48, 48, 128, 512, 4, 96},
    {"seq2seq_base", 32 * 96, 96, 256, 1024, 8, 96},
};

/* Y[N,out] = X[N,in] W[out,in]^T and its two backward products. */
static int linear_shapes(shape *out, const char *pname, const char *lname, int64_t N, int64_t in,
                         int64_t o)
{
    /* forward: A = X (row-major), B = W^T */
    out[0] = (shape){"", N, o, in, in, 1, 1, in};
    /* dX = dY W: A = dY [N,out] row-major, B = W [out,in] row-major */
    out[1] = (shape){"", N, in, o, o, 1, in, 1};
    /* dW = dY^T X: A = dY^T, B = X [N,in] row-major */
    out[2] = (shape){"", o, in, N, 1, o, in, 1};
    static const char *what[3] = {"fwd", "dx", "dw"};
    for (int i = 0; i < 3; i++)
        snprintf(out[i].name, sizeof out[i].name, "%s.%s.%s", pname, lname, what[i]);
    return 3;
}

static int all_shapes(shape *s)
{
    int n = 0;
    s[n++] = (shape){"square1024", 1024, 1024, 1024, 1024, 1, 1024, 1};
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        const preset *p = &presets[i];
        n += linear_shapes(s + n, p->name, "proj", p->tokens, p->d, p->d);
        n += linear_shapes(s + n, p->name, "fc1", p->tokens, p->d, p->d_ff);
        n += linear_shapes(s + n, p->name, "fc2", p->tokens, p->d_ff, p->d);
        n += linear_shapes(s + n, p->name, "head", p->tokens, p->d, p->vocab);
        /* core/attention.c, one (batch, head) per thread: a block of up to
         * 64 query rows against all T keys (the last block of a causal
         * pass), q/k/v rows d apart (heads interleaved) */
        int64_t rb = p->T < 64 ? p->T : 64, dh = p->d / p->heads;
        s[n] = (shape){"", rb, p->T, dh, p->d, 1, 1, p->d}; /* S = Q K^T */
        snprintf(s[n].name, sizeof s[n].name, "%s.attn.qk", p->name);
        n++;
        s[n] = (shape){"", rb, dh, p->T, p->T, 1, p->d, 1}; /* O = P V */
        snprintf(s[n].name, sizeof s[n].name, "%s.attn.pv", p->name);
        n++;
    }
    return n;
}

static const char *isa_name(dnnl_cpu_isa_t isa)
{
    switch (isa) {
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_all: return "all";
    default: return "other";
    }
}

static int usage(int code)
{
    fprintf(code ? stderr : stdout,
            "usage: dnnl_bench [--runs R>=1] [--filter TEXT] [--threads 1,2] [--no-check]\n");
    return code;
}

int main(int argc, char **argv)
{
    const char *filter = NULL;
    int threads[8] = {1, 2}, nthreads = 2;
    bool check = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help"))
            return usage(0);
        if (!strcmp(a, "--no-check")) {
            check = false;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "dnnl_bench: unknown option or missing value: %s\n", a);
            return usage(2);
        }
        const char *v = argv[++i];
        char *end;
        if (!strcmp(a, "--runs")) {
            long r = strtol(v, &end, 10);
            if (*end || r < 1 || r > 1000) {
                fprintf(stderr, "dnnl_bench: --runs wants 1..1000, got '%s'\n", v);
                return 2;
            }
            g_runs = (int)r;
        } else if (!strcmp(a, "--filter")) {
            filter = v;
        } else if (!strcmp(a, "--threads")) {
            nthreads = 0;
            for (const char *p = v; *p; p = *end ? end + 1 : end) {
                long t = strtol(p, &end, 10);
                if (end == p || t < 1 || t > 256 || (*end && *end != ',') || nthreads == 8) {
                    fprintf(stderr, "dnnl_bench: --threads wants a list like 1,2, got '%s'\n", v);
                    return 2;
                }
                threads[nthreads++] = (int)t;
            }
        } else {
            fprintf(stderr, "dnnl_bench: unknown option %s\n", a);
            return usage(2);
        }
    }

    shape shapes[80];
    int ns = all_shapes(shapes), matched = 0;
    for (int i = 0; i < ns; i++)
        matched += !filter || strstr(shapes[i].name, filter);
    if (!matched) {
        fprintf(stderr,
                "dnnl_bench: no shape name contains '%s' (names look like "
                "charlm_base.fc1.dw, seq2seq_tiny.attn.qk, square1024)\n",
                filter);
        return 2;
    }

    CK(dnnl_engine_create(&g_eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&g_strm, g_eng, dnnl_stream_default_flags));
    int capacity = 0;
    CK(dnnl_get_primitive_cache_capacity(&capacity));
    const dnnl_version_t *ver = dnnl_version();
    double load[1] = {0};
    if (getloadavg(load, 1) != 1)
        load[0] = -1;
    printf("{\"bench\": \"dnnl_info\", \"version\": \"%d.%d.%d\", \"effective_isa\": \"%s\", "
           "\"primitive_cache_capacity\": %d, \"omp_max_threads\": %d, \"runs\": %d, "
           "\"loadavg_1min\": %.2f}\n",
           ver->major, ver->minor, ver->patch, isa_name(dnnl_get_effective_cpu_isa()), capacity,
           omp_get_max_threads(), g_runs, load[0]);

    if (check) {
        check_rounding();
        shape cs[2] = {{"check1024", 1024, 1024, 1024, 1024, 1, 1024, 1},
                       {"check_odd_bT", 301, 77, 2049, 2049, 1, 1, 2049}};
        for (int i = 0; i < 2; i++)
            check_product(&cs[i]);
    }

    for (int i = 0; i < ns; i++) {
        if (filter && !strstr(shapes[i].name, filter))
            continue;
        for (int t = 0; t < nthreads; t++)
            bench_shape(&shapes[i], threads[t], capacity);
    }
    dnnl_stream_destroy(g_strm);
    dnnl_engine_destroy(g_eng);
    return 0;
}
