/* Inverted dropout (moved from core/norm.c): keep with probability 1 - p,
 * scale the kept elements by 1/(1 - p). The draws are counter-based
 * (core/rng.h), so the mask is the same for any number of threads. */
#include <stdint.h>
#include <string.h>

#include "core/ops.h"
#include "core/rng.h"
#include "core/shares.h"
#include "core/vmath.h"
#include "core/upcast.h"

#define PAR_THRESHOLD 32768

/* Elements [i0, i1): y = x * s, s = scale where draw (base + i) >= p, else 0
 * (and the mask m = 1 where kept, 0 where dropped, when m is not NULL). The draws inline (core/rng.h),
 * the same bits as cg_rng_uniform's, without a call per element; the loops
 * vectorise (the select by masks), with AVX512DQ's 64-bit products where the
 * CPU has them (x86-64-v4). Integer arithmetic and one float product: the
 * same bits in every clone. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(CG_NO_CLONES) && \
    !defined(__SANITIZE_THREAD__)
#define DROP_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx512f", "avx2", "default")))
#else
#define DROP_CLONES
#endif
DROP_CLONES static void dropout_span(int64_t i0, int64_t i1, uint64_t key, uint64_t base, float p,
                                     float scale, const float *xp, float *yp, uint8_t *mp)
{
    if (mp)
        for (int64_t i = i0; i < i1; i++) {
            float u = cg_rng_draw_unit(cg_rng_draw(key, base + (uint64_t)i));
            yp[i] = xp[i] * bsel(M(u >= p), scale, 0.0f);
            mp[i] = u >= p;
        }
    else
        for (int64_t i = i0; i < i1; i++) {
            float u = cg_rng_draw_unit(cg_rng_draw(key, base + (uint64_t)i));
            yp[i] = xp[i] * bsel(M(u >= p), scale, 0.0f);
        }
}

#define DROP_BLOCK 4096

/* The kept elements' factor 1/(1-p); p == 1 drops everything (PyTorch gives
 * zeros). */
static float dropout_scale(float p) { return p < 1.0f ? (float)(1.0 / (1.0 - (double)p)) : 0.0f; }

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
        drop_grad_job job = {(const uint8_t *)cg_data_bool(mc), cg_data(gc), dropout_scale(p),
                             cg_data(out)};
        cg_shares_run(n, DROP_BLOCK, cg_shares_team(n > PAR_THRESHOLD), drop_grad_block, &job);
    }
    cg_release_all(2, mc, gc);
    return out;
}

/* What the dropout's blocks read and write */
typedef struct {
    uint64_t key, base; /* the draws' key and counter */
    float p, scale;
    const float *x;
    float *y;
    uint8_t *m; /* NULL: no mask wanted */
} drop_job;

static void drop_block(int64_t i0, int64_t i1, int thread, const void *ctx)
{
    const drop_job *j = ctx;
    dropout_span(i0, i1, j->key, j->base, j->p, j->scale, j->x, j->y, j->m);
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
    const float scale = dropout_scale(p);
    if (p == 0.0f) {
        memcpy(yp, xp, (size_t)n * sizeof(float));
        if (mp)
            memset(mp, 1, (size_t)n);
    } else {
        drop_job job = {cg_rng_key(rng->seed), rng->counter, p, scale, xp, yp, mp};
        cg_shares_run(n, DROP_BLOCK, cg_shares_team(n > PAR_THRESHOLD / 4), drop_block, &job);
    }
    if (rng)
        rng->counter += (uint64_t)n;
    cg_release(x);
    if (mask)
        *mask = m;
    return y;
}
