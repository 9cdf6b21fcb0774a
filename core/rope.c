/* Rotary position embeddings (RoFormer, Su et al. 2021) in the rotate-half
 * pairing of GPT-NeoX and LLaMA as Hugging Face's transformers computes
 * them: along the last dim of x [..., T, D] (D even, h = D/2), the row at
 * position p = start + t (t its index along dim -2) becomes
 *     y[i]     = x[i] cos(p w_i) - x[i + h] sin(p w_i)
 *     y[i + h] = x[i + h] cos(p w_i) + x[i] sin(p w_i),   w_i = theta^(-2i/D),
 * for i < h. The angles and their cosines and sines are computed in double
 * and rounded to float once (transformers computes them in float32, so
 * its values differ from these in the last bits). The inverse rotation
 * (the angle's sign flipped) is the backward.
 *
 * One table of cos/sin for the T positions (kept for the next call at the
 * same positions), then rows in chunks over the threads, each row from its
 * own elements only: the same bits for any team. cg_k_rope_keep_bf16
 * also rounds each row as it writes it (bf16 precision) and keeps the
 * rounding as the output's operand: what attention's bf16 products read
 * in training, instead of a pass of attention's own. */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/gemm.h"
#include "core/ops.h"
#include "core/shares.h"
#include "core/tensor_impl.h"
#include "core/vmath.h"

typedef struct {
    const float *x;
    float *out;
    uint16_t *out16; /* the output's bf16 rounding, or NULL */
    const float *cs; /* [T, h] cosines, then [T, h] sines */
    int64_t T, h, ndim;
    const int64_t *shape, *strides; /* x's, in elements (the last stride 1) */
    float sign;
} rope_job;

/* One row: the same float operations in every clone (-ffp-contract=off) */
EW_CLONES static void rope_row(int64_t h, const float *restrict x, const float *restrict c,
                               const float *restrict s, float sg, float *restrict y)
{
    for (int64_t i = 0; i < h; i++) {
        y[i] = x[i] * c[i] - sg * x[i + h] * s[i];
        y[i + h] = x[i + h] * c[i] + sg * x[i] * s[i];
    }
}

static void rope_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    (void)thread;
    const rope_job *j = ctx;
    const int64_t h = j->h, D = 2 * h;
    for (int64_t r = r0; r < r1; r++) {
        /* row r's offset in x: its index over the dims before the last */
        int64_t off = 0, rest = r;
        for (int64_t k = j->ndim - 2; k >= 0; k--) {
            off += rest % j->shape[k] * j->strides[k];
            rest /= j->shape[k];
        }
        const int64_t t = r % j->T;
        const float *restrict x = j->x + off, *restrict c = j->cs + t * h,
                              *restrict s = j->cs + (j->T + t) * h;
        float *y = j->out + r * D;
        rope_row(h, x, c, s, j->sign, y);
        if (j->out16)
            cg_bf16_round_run(D, y, j->out16 + r * D);
    }
}

/* The cos/sin of (start + t) theta^(-2i/D) for t < T, i < h: [2, T, h],
 * with the count of its users. The last table made is kept for the next
 * call (g_angles, under g_angles_lock): a training step rotates q and k of
 * every layer, forward and backward, at the same positions (a LLaMA base
 * step made the same table 24 times: 1% of its time in sincos). A table
 * over ANGLES_KEEP_MAX bytes is made for its call only. */
typedef struct {
    int64_t T, h, start;
    double theta;
    int users;
    float cs[];
} angles;

enum { ANGLES_KEEP_MAX = 8 << 20 };
static pthread_mutex_t g_angles_lock = PTHREAD_MUTEX_INITIALIZER;
static angles *g_angles; /* the last table made (one user: this pointer), or NULL */

static void angles_put(angles *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&g_angles_lock);
    const bool unused = --a->users == 0;
    pthread_mutex_unlock(&g_angles_lock);
    if (unused)
        free(a);
}

static angles *angles_get(int64_t T, int64_t h, int64_t start, double theta)
{
    pthread_mutex_lock(&g_angles_lock);
    angles *a = g_angles;
    const bool hit = a && a->T == T && a->h == h && a->start == start && a->theta == theta;
    if (hit)
        a->users++;
    pthread_mutex_unlock(&g_angles_lock);
    if (hit)
        return a;
    const size_t bytes = (size_t)(2 * T * h) * sizeof(float);
    a = malloc(sizeof *a + bytes);
    if (!a)
        return NULL;
    *a = (angles){T, h, start, theta, 1};
    float *cs = a->cs;
    for (int64_t i = 0; i < h; i++) {
        const double w = pow(theta, -2.0 * (double)i / (double)(2 * h));
        for (int64_t t = 0; t < T; t++) {
            const double v = (double)(start + t) * w;
            cs[t * h + i] = (float)cos(v);
            cs[(T + t) * h + i] = (float)sin(v);
        }
    }
    if (bytes <= ANGLES_KEEP_MAX) {
        pthread_mutex_lock(&g_angles_lock);
        angles *old = g_angles;
        g_angles = a;
        a->users++;
        const bool unused = old && --old->users == 0;
        pthread_mutex_unlock(&g_angles_lock);
        if (unused)
            free(old);
    }
    return a;
}

static cg_tensor *rope(const cg_tensor *x, int64_t start, double theta, bool inverse, bool keep16)
{
    if (!x) {
        cg_error_null_input("cg_k_rope");
        return NULL;
    }
    char b[96];
    if (x->ndim < 2 || x->shape[x->ndim - 1] % 2 != 0) {
        cg_set_error("rope: x %s needs at least 2 dims and an even last dim",
                     cg_shape_str(x, b, sizeof b));
        return NULL;
    }
    if (x->dtype != CG_F32 && x->dtype != CG_BF16) {
        cg_set_error("rope: float32 or bfloat16 only (got %s)", cg_dtype_name(x->dtype));
        return NULL;
    }
    if (start < 0 || !(theta > 1.0) || !isfinite(theta)) {
        cg_set_error("rope: start %lld must be >= 0 and theta %g a finite number above 1",
                     (long long)start, theta);
        return NULL;
    }
    /* float32 with unit last stride, read in place; otherwise a copy */
    cg_tensor *xs = x->dtype == CG_F32 && (x->strides[x->ndim - 1] == 1 || cg_numel(x) == 0)
                        ? cg_retain((cg_tensor *)x)
                    : x->dtype == CG_F32 ? cg_k_contiguous(x)
                                         : cg_k_to(x, CG_F32);
    if (xs && xs->ndim && xs->strides[xs->ndim - 1] != 1 && cg_numel(xs) > 0) {
        cg_tensor *c = cg_k_contiguous(xs);
        cg_release(xs);
        xs = c;
    }
    const int64_t T = x->shape[x->ndim - 2], h = x->shape[x->ndim - 1] / 2;
    const int64_t rows = h ? cg_numel(x) / (2 * h) : 0;
    angles *tab = xs && rows ? angles_get(T, h, start, theta) : NULL;
    /* keep16, a float32 x, bf16 precision: the rounding kept (an
     * allocation failure only skips it: attention rounds it then) */
    cg_tensor *o16 =
        xs && rows && keep16 && x->dtype == CG_F32 && cg_get_matmul_precision() == CG_PRECISION_BF16
            ? cg_empty_dtype(CG_BF16, x->ndim, x->shape)
            : NULL;
    cg_tensor *out = xs && (tab || !rows) ? cg_empty(x->ndim, x->shape) : NULL;
    if (xs && rows && !tab)
        cg_set_error("out of memory");
    if (out && rows) {
        const rope_job j = {
            cg_data(xs), cg_data(out), o16 ? cg_data_bf16(o16) : NULL, tab->cs, T, h, xs->ndim,
            xs->shape,   xs->strides,  inverse ? -1.0f : 1.0f};
        cg_shares_run(rows, cg_shares_rows(2 * h), cg_shares_team(rows * h > 8192), rope_rows, &j);
        if (o16)
            cg_k_bf16_operand_keep(out, o16);
    }
    cg_release(o16);
    angles_put(tab);
    cg_release(xs);
    if (!out || x->dtype == CG_F32)
        return out;
    cg_tensor *r = cg_k_to(out, x->dtype); /* bf16: rounded once */
    cg_release(out);
    return r;
}

cg_tensor *cg_k_rope(const cg_tensor *x, int64_t start, double theta, bool inverse)
{
    return rope(x, start, theta, inverse, false);
}

cg_tensor *cg_k_rope_keep_bf16(const cg_tensor *x, int64_t start, double theta)
{
    return rope(x, start, theta, false, true);
}
