/* Inverted dropout (moved from core/norm.c): keep with probability 1 - p,
 * scale the kept elements by 1/(1 - p). The draws are counter-based
 * (core/rng.h), so the mask is the same for any number of threads. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "core/rng.h"
#include "core/shares.h"
#include "core/vmath.h"
#include "core/upcast.h"

#define PAR_THRESHOLD 32768

/* The dropout's loops are compiled for x86-64-v4 (AVX512DQ's 64-bit
 * products for the draws), AVX-512, AVX2 and the baseline: integer
 * arithmetic and one float product (and sum), the same bits in every
 * clone (CG_HAVE_CLONES: core/vmath.h). */
#ifdef CG_HAVE_CLONES
#define DROP_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx512f", "avx2", "default")))
#else
#define DROP_CLONES
#endif
/* Eight draws as uniform floats (cg_rng_draw_unit's bits: the same
 * integer operations, lane by lane), given each lane's counter c already
 * as c K1 + K2 (h) */
typedef uint64_t drop_v8u64 __attribute__((vector_size(64)));
typedef int32_t drop_v8i32 __attribute__((vector_size(32)));
typedef uint8_t drop_v8u8 __attribute__((vector_size(8)));
typedef float drop_v8f __attribute__((vector_size(32)));
static inline __attribute__((always_inline)) drop_v8f draw_units8(uint64_t key, drop_v8u64 h)
{
    drop_v8u64 z = key ^ h;
    CG_RNG_MIX64(z);
    const drop_v8i32 t = __builtin_convertvector(z >> 40, drop_v8i32);
    return __builtin_convertvector(t, drop_v8f) * 0x1.0p-24f;
}

/* Elements [i, i + 8) of dropout_span, as vectors, h their draws' c K1 + K2 */
static inline __attribute__((always_inline)) void dropout8(int64_t i, uint64_t key, drop_v8u64 h,
                                                           float p, int32_t sbits, const float *xp,
                                                           const float *rp, float *yp, uint8_t *mp)
{
    const drop_v8i32 keep = draw_units8(key, h) >= p; /* -1 or 0 */
    const drop_v8f s = (drop_v8f)(keep & sbits);      /* bsel: scale where kept, +0 */
    drop_v8f x, r, y;
    memcpy(&x, xp + i, sizeof x);
    y = x * s;
    if (rp) {
        memcpy(&r, rp + i, sizeof r);
        y = r + y;
    }
    memcpy(yp + i, &y, sizeof y);
    if (mp) {
        const drop_v8u8 k8 = __builtin_convertvector(keep & 1, drop_v8u8);
        memcpy(mp + i, &k8, sizeof k8);
    }
}

/* Elements [i0, i1): y = (r +) x * s, s = scale where draw (base + i) >= p,
 * else 0, and m = 1 where kept (when m is not NULL). Eight at a time as
 * vectors of a known width (GCC's own loop took 64 elements a step, so
 * that a product's runs of 32 and 96 went mostly through its slow
 * remainder: 1.7-2.4x as long an element, Zen 5), then one by one; each
 * element read before its write at the same index (y may be x). */
static inline __attribute__((always_inline)) void dropout_span(int64_t i0, int64_t i1, uint64_t key,
                                                               uint64_t base, float p, float scale,
                                                               const float *xp, const float *rp,
                                                               float *yp, uint8_t *mp)
{
    int32_t sbits;
    memcpy(&sbits, &scale, sizeof sbits);
    int64_t i = i0;
    /* each lane's (base + i) K1 + K2, stepped by 8 K1 (wrapping: the same
     * values as the products) */
    drop_v8u64 h =
        (base + (uint64_t)i + (drop_v8u64){0, 1, 2, 3, 4, 5, 6, 7}) * CG_RNG_K1 + CG_RNG_K2;
    for (; i + 8 <= i1; i += 8, h += 8 * CG_RNG_K1)
        dropout8(i, key, h, p, sbits, xp, rp, yp, mp);
    for (; i < i1; i++) {
        const float u = cg_rng_draw_unit(cg_rng_draw(key, base + (uint64_t)i));
        const float y = xp[i] * bsel(M(u >= p), scale, 0.0f);
        yp[i] = rp ? rp[i] + y : y;
        if (mp)
            mp[i] = u >= p;
    }
}

/* Elements [i0, i1) of a whole tensor */
DROP_CLONES static void dropout_block(int64_t i0, int64_t i1, uint64_t key, uint64_t base, float p,
                                      float scale, const float *xp, float *yp, uint8_t *mp)
{
    dropout_span(i0, i1, key, base, p, scale, xp, NULL, yp, mp);
}

/* The clone's body is here, over all the runs: one call a block of a
 * product's epilogue, not one a run (runs of 32-96 elements there). */
DROP_CLONES static void k_dropout_add_run(const cg_k_drop *d, int64_t n, int64_t runs, int64_t ld,
                                          int64_t off, float *y, const float *res, uint8_t *m)
{
    const bool drop = d && d->p > 0.0f;
    for (int64_t r = 0; r < runs; r++) {
        float *restrict yr = y + r * ld;
        const float *restrict rr = res ? res + r * ld : NULL;
        if (drop) /* draw (base + off + r ld + i) for element i of run r */
            dropout_span(0, n, d->key, d->base + (uint64_t)(off + r * ld), d->p, d->scale, yr, rr,
                         yr, m ? m + r * ld : NULL);
        else if (rr) /* cg_k_add's bits: one rounding, either order */
            for (int64_t i = 0; i < n; i++)
                yr[i] = rr[i] + yr[i];
    }
}

void cg_k_dropout_add_run(const cg_k_drop *d, int64_t n, int64_t runs, int64_t ld, int64_t off,
                          float *y, const float *res, uint8_t *m)
{
    k_dropout_add_run(d, n, runs, ld, off, y, res, m); /* the clones: EW_CLONES, core/vmath.h */
}

#define DROP_BLOCK 4096

/* The kept elements' factor 1/(1-p); p == 1 drops everything (PyTorch gives
 * zeros). */
float cg_k_dropout_scale(float p) { return p < 1.0f ? (float)(1.0 / (1.0 - (double)p)) : 0.0f; }

cg_k_drop cg_k_drop_take(cg_rng *rng, float p, int64_t n)
{
    return (cg_k_drop){cg_rng_key(rng->seed), cg_rng_take(rng, (uint64_t)n), p,
                       cg_k_dropout_scale(p)};
}

/* g times each element's factor: scale where kept, 0 where dropped (a
 * NaN or infinite g gives NaN there, as g * 0 does). */
EW_CLONES static void dropout_grad_run(int64_t n, const uint8_t *m, const float *g, float scale,
                                       float *out)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = g[i] * (m[i] ? scale : 0.0f);
}

/* What the dropout backward's blocks read and write */
typedef struct {
    const uint8_t *m;
    const float *g;
    float scale, *out;
} drop_grad_job;

static void drop_grad_block(int64_t i0, int64_t i1, int thread, const void *ctx)
{
    const drop_grad_job *j = ctx;
    dropout_grad_run(i1 - i0, j->m + i0, j->g + i0, j->scale, j->out + i0);
}

cg_tensor *cg_k_dropout_backward(const cg_tensor *mask, const cg_tensor *g, float p)
{
    if (!mask || !g)
        return cg_error_null_input("cg_k_dropout_backward"), NULL;
    if (!cg_check_f32("dropout_backward", "g", g))
        return NULL;
    if (mask->dtype != CG_BOOL || !cg_same_shape(mask, g) || !(p >= 0.0f && p <= 1.0f)) {
        char b1[96], b2[96];
        cg_set_error("dropout_backward: need a bool mask of the gradient's shape and p in [0, "
                     "1], got %s %s, %s and p %g",
                     cg_dtype_name(mask->dtype), cg_shape_str(mask, b1, sizeof b1),
                     cg_shape_str(g, b2, sizeof b2), (double)p);
        return NULL;
    }
    cg_tensor *mc = cg_k_contiguous(mask), *gc = cg_k_contiguous(g);
    cg_tensor *out = mc && gc ? cg_empty(g->ndim, g->shape) : NULL;
    if (out) {
        const int64_t n = cg_numel(g);
        drop_grad_job job = {(const uint8_t *)cg_data_bool(mc), cg_data(gc), cg_k_dropout_scale(p),
                             cg_data(out)};
        cg_shares_run(n, DROP_BLOCK, cg_shares_team(n > PAR_THRESHOLD), drop_grad_block, &job);
    }
    cg_release_all(2, mc, gc);
    return out;
}

/* What the dropout's blocks read and write */
typedef struct {
    cg_k_drop d;
    const float *x;
    float *y;
    uint8_t *m; /* NULL: no mask wanted */
} drop_job;

static void drop_block(int64_t i0, int64_t i1, int thread, const void *ctx)
{
    const drop_job *j = ctx;
    dropout_block(i0, i1, j->d.key, j->d.base, j->d.p, j->d.scale, j->x, j->y, j->m);
}

/* Element i (row-major) is kept iff draw (counter + i) >= p; the counter then
 * advances by numel, so the mask does not depend on the thread count. */
cg_tensor *cg_k_dropout(const cg_tensor *a, float p, cg_rng *rng, cg_tensor **mask)
{
    if (mask)
        *mask = NULL;
    if (!a) {
        cg_error_null_input("cg_k_dropout");
        return NULL;
    }
    if (!cg_f32_args("dropout", 1, &a))
        return NULL;
    if (!(p >= 0.0f && p <= 1.0f)) {
        char b[96];
        cg_set_error("dropout: p must be in [0, 1] (got %g, input shape %s)", (double)p,
                     cg_shape_str(a, b, sizeof b));
        return NULL;
    }
    if (!rng && p > 0.0f) {
        cg_set_error("dropout: NULL rng");
        return NULL;
    }
    int64_t n = cg_numel(a);
    cg_tensor *x = cg_k_contiguous(a);
    cg_tensor *y = x ? cg_empty(a->ndim, a->shape) : NULL;
    cg_tensor *m = (y && mask) ? cg_empty_dtype(CG_BOOL, a->ndim, a->shape) : NULL;
    if (!y || (mask && !m)) {
        cg_release_all(3, x, y, m);
        return NULL;
    }
    const float *xp = cg_data(x);
    float *yp = cg_data(y);
    uint8_t *mp = m ? (uint8_t *)cg_data_bool(m) : NULL;
    if (p == 0.0f) {
        memcpy(yp, xp, (size_t)n * sizeof(float));
        if (mp)
            memset(mp, 1, (size_t)n);
        if (rng) /* p = 0 takes its draws too */
            cg_rng_take(rng, (uint64_t)n);
    } else {
        const drop_job job = {cg_k_drop_take(rng, p, n), xp, yp, mp};
        cg_shares_run(n, DROP_BLOCK, cg_shares_team(n > PAR_THRESHOLD / 4), drop_block, &job);
    }
    cg_release(x);
    if (mask)
        *mask = m;
    return y;
}

/* ---------------------------------------------- dropouts with a noise */
/* SELU's alpha times its scale: the value alpha dropout gives a dropped
 * element before its affine map (PyTorch's alpha, 1.7580993408473766) */
#define ALPHA_SELU 1.7580993408473766

/* What the noise dropout's blocks read and write: noise element j covers
 * the x elements [j inner, (j + 1) inner) */
typedef struct {
    const float *x, *noise, *shift; /* shift NULL: none */
    float *y;
    int64_t inner;
} noise_job;

static void noise_block(int64_t j0, int64_t j1, int thread, const void *ctx)
{
    const noise_job *job = ctx;
    for (int64_t j = j0; j < j1; j++) {
        const float f = job->noise[j], s = job->shift ? job->shift[j] : 0.0f;
        const float *x = job->x + j * job->inner;
        float *y = job->y + j * job->inner;
        if (job->shift) /* x noise, then + shift: two roundings, PyTorch's */
            for (int64_t i = 0; i < job->inner; i++)
                y[i] = x[i] * f + s;
        else
            for (int64_t i = 0; i < job->inner; i++)
                y[i] = x[i] * f;
    }
}

/* The noise (and alpha's shift) of n elements: draw (base + j) >= p keeps
 * element j. Plain: 1/(1-p) where kept (cg_k_dropout_scale), 0 where not;
 * alpha (PyTorch's _dropout_impl): a where kept, 0 where not, and a shift
 * of (keep - 1) (alpha a) + alpha a p in float, a = 1 / sqrt((alpha^2 p +
 * 1)(1 - p)) in double. p = 1: noise 0, no shift, no draws. */
static void noise_fill(cg_rng *rng, float p, bool alpha, int64_t n, float *noise, float *shift)
{
    if (p >= 1.0f) {
        memset(noise, 0, (size_t)n * sizeof *noise);
        if (shift)
            memset(shift, 0, (size_t)n * sizeof *shift);
        return;
    }
    const double a = 1.0 / sqrt((ALPHA_SELU * ALPHA_SELU * p + 1) * (1 - (double)p));
    const float keep_f = alpha ? (float)a : cg_k_dropout_scale(p);
    const float aa = (float)(ALPHA_SELU * a), c = (float)(ALPHA_SELU * a * p);
    const uint64_t key = cg_rng_key(rng->seed), base = cg_rng_take(rng, (uint64_t)n);
    for (int64_t j = 0; j < n; j++) {
        const float keep = cg_rng_draw_unit(cg_rng_draw(key, base + (uint64_t)j)) >= p;
        noise[j] = keep * keep_f;
        if (alpha)
            shift[j] = (keep - 1.0f) * aa + c;
    }
}

cg_tensor *cg_k_noise_dropout(const cg_tensor *x, float p, cg_rng *rng, int lead, bool alpha,
                              cg_tensor **noise)
{
    if (noise)
        *noise = NULL;
    if (!x || !rng)
        return cg_error_null_input("cg_k_noise_dropout"), NULL;
    if (!cg_f32_args("dropout", 1, &x))
        return NULL;
    if (!(p >= 0.0f && p <= 1.0f) || lead < 0 || lead > x->ndim) {
        cg_set_error("dropout: need p in [0, 1] and a noise of 0 to %d leading dims (got p %g, "
                     "%d dims)",
                     x->ndim, (double)p, lead);
        return NULL;
    }
    int64_t nshape[CG_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++)
        nshape[d] = d < lead ? x->shape[d] : 1;
    cg_tensor *xc = cg_k_contiguous(x), *y = xc ? cg_empty(x->ndim, x->shape) : NULL;
    cg_tensor *nz = y ? cg_empty(x->ndim, nshape) : NULL;
    const int64_t n = nz ? cg_numel(nz) : 0;
    float *shift = nz && alpha ? malloc((size_t)(n ? n : 1) * sizeof *shift) : NULL;
    if (!nz || (alpha && !shift)) {
        if (nz)
            cg_set_error("dropout: out of memory");
        free(shift);
        cg_release_all(3, xc, y, nz);
        return NULL;
    }
    noise_fill(rng, p, alpha && p < 1.0f, n, cg_data(nz), shift);
    const int64_t inner = n ? cg_numel(x) / n : 0;
    const noise_job job = {cg_data(xc), cg_data(nz), alpha && p < 1.0f ? shift : NULL, cg_data(y),
                           inner};
    cg_shares_run(n, inner >= DROP_BLOCK ? 1 : DROP_BLOCK / (inner ? inner : 1),
                  cg_shares_team(cg_numel(x) > PAR_THRESHOLD), noise_block, &job);
    free(shift);
    cg_release(xc);
    if (noise)
        *noise = nz;
    else
        cg_release(nz);
    return y;
}
