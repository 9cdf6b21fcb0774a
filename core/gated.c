/* The gated activation of a gated feed-forward (SwiGLU, GEGLU):
 * out = act(a) * b, elementwise, and its backward, each as one pass over
 * the elements (no act(a) tensor is made). act is SiLU (x sigmoid(x)) or
 * GELU's tanh form (core/elementwise_impl.h's f_gelu, the zoo's GELU).
 *
 * The elements are cut into runs of EW_RUN_G, each run computed by one
 * thread from its own elements only: the same bits for any team. bf16
 * inputs are widened, computed in float32 and each output rounded once. */
#include <stdlib.h>
#include <string.h>

#include "core/elementwise_impl.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/shares.h"
#include "core/tensor_impl.h"

#define EW_RUN_G 16384

typedef struct {
    const float *a, *b, *g;
    float *out, *da, *db;
    cg_k_gate act;
} gated_job;

/* act(x) and, when d is not NULL, act'(x) */
EW_INLINE float gate_of(cg_k_gate act, float x, float *d)
{
    if (act == CG_K_GATE_SILU) {
        float s, m;
        ew_sigmoid2(x, &s, &m);
        if (d)
            *d = s * (1.0f + x * m);
        return x * s;
    }
    if (d)
        *d = f_gelu_grad(x);
    return f_gelu(x);
}

/* len elements: without g, out = act(a) * b; with g, the backward's
 * da = g b act'(a) (into out) and db = g act(a). One loop per act and
 * direction: each vectorises. */
static inline __attribute__((always_inline)) void gate_apply(
    cg_k_gate act, int64_t len, const float *restrict a, const float *restrict b,
    const float *restrict g, float *restrict out, float *restrict db)
{
    if (!g) {
        if (act == CG_K_GATE_SILU)
            for (int64_t i = 0; i < len; i++)
                out[i] = gate_of(CG_K_GATE_SILU, a[i], NULL) * b[i];
        else
            for (int64_t i = 0; i < len; i++)
                out[i] = gate_of(CG_K_GATE_GELU, a[i], NULL) * b[i];
        return;
    }
    if (act == CG_K_GATE_SILU)
        for (int64_t i = 0; i < len; i++) {
            float d;
            const float s = gate_of(CG_K_GATE_SILU, a[i], &d);
            out[i] = g[i] * b[i] * d;
            db[i] = g[i] * s;
        }
    else
        for (int64_t i = 0; i < len; i++) {
            float d;
            const float s = gate_of(CG_K_GATE_GELU, a[i], &d);
            out[i] = g[i] * b[i] * d;
            db[i] = g[i] * s;
        }
}

EW_CLONES static void gated_fwd_run(int64_t i0, int64_t i1, int thread, const void *ctx)
{
    (void)thread;
    const gated_job *j = ctx;
    gate_apply(j->act, i1 - i0, j->a + i0, j->b + i0, NULL, j->out + i0, NULL);
}

EW_CLONES static void gated_bwd_run(int64_t i0, int64_t i1, int thread, const void *ctx)
{
    (void)thread;
    const gated_job *j = ctx;
    /* into scratch when a gradient is not wanted: one loop, which vectorises */
    float sa[EW_RUN_G / 16], sb[EW_RUN_G / 16];
    for (int64_t c0 = i0; c0 < i1; c0 += EW_RUN_G / 16) {
        const int64_t c1 = i1 - c0 < EW_RUN_G / 16 ? i1 : c0 + EW_RUN_G / 16;
        gate_apply(j->act, c1 - c0, j->a + c0, j->b + c0, j->g + c0, j->da ? j->da + c0 : sa,
                   j->db ? j->db + c0 : sb);
    }
}

/* t as a contiguous float32 tensor (a new reference: t itself when it is
 * one already) */
static cg_tensor *f32_dense(const cg_tensor *t)
{
    if (t->dtype == CG_F32 && cg_is_contiguous(t))
        return cg_retain((cg_tensor *)t);
    if (t->dtype == CG_F32)
        return cg_k_contiguous(t);
    cg_tensor *c = cg_k_to(t, CG_F32);
    if (c && !cg_is_contiguous(c)) {
        cg_tensor *d = cg_k_contiguous(c);
        cg_release(c);
        return d;
    }
    return c;
}

static bool gated_args(const char *op, const cg_tensor *a, const cg_tensor *b, const cg_tensor *g,
                       cg_k_gate act)
{
    if (!a || !b) {
        cg_error_null_input(op);
        return false;
    }
    if ((int)act < 0 || act > CG_K_GATE_GELU) {
        cg_set_error("%s: unknown gate activation %d", op, (int)act);
        return false;
    }
    const cg_tensor *t[3] = {a, b, g};
    for (int k = 0; k < 3; k++) {
        if (!t[k])
            continue;
        if (t[k]->dtype != CG_F32 && t[k]->dtype != CG_BF16) {
            cg_set_error("%s: float32 or bfloat16 tensors only (got %s)", op,
                         cg_dtype_name(t[k]->dtype));
            return false;
        }
        if (!cg_same_shape(a, t[k])) {
            char x[96], y[96];
            cg_set_error("%s: shapes %s and %s differ", op, cg_shape_str(a, x, sizeof x),
                         cg_shape_str(t[k], y, sizeof y));
            return false;
        }
    }
    if (a->dtype != b->dtype) {
        cg_set_error("%s: a is %s and b is %s (one dtype)", op, cg_dtype_name(a->dtype),
                     cg_dtype_name(b->dtype));
        return false;
    }
    return true;
}

/* out (float32, contiguous) in dt: itself, or rounded once into a new tensor */
static cg_tensor *as_dtype(cg_tensor *out, cg_dtype dt)
{
    if (!out || dt == CG_F32)
        return out;
    cg_tensor *r = cg_k_to(out, dt);
    cg_release(out);
    return r;
}

cg_tensor *cg_k_gated(const cg_tensor *a, const cg_tensor *b, cg_k_gate act)
{
    if (!gated_args("cg_k_gated", a, b, NULL, act))
        return NULL;
    cg_tensor *a32 = f32_dense(a), *b32 = a32 ? f32_dense(b) : NULL;
    cg_tensor *out = b32 ? cg_empty(a->ndim, a->shape) : NULL;
    if (out) {
        const int64_t n = cg_numel(out);
        const gated_job j = {cg_data(a32), cg_data(b32), NULL, cg_data(out), NULL, NULL, act};
        cg_shares_run(n, EW_RUN_G, cg_shares_team(n > EW_RUN_G), gated_fwd_run, &j);
    }
    cg_release_all(2, a32, b32);
    return as_dtype(out, a->dtype);
}

bool cg_k_gated_backward(const cg_tensor *a, const cg_tensor *b, const cg_tensor *g, cg_k_gate act,
                         cg_tensor **da, cg_tensor **db)
{
    if (da)
        *da = NULL;
    if (db)
        *db = NULL;
    if (!g)
        return cg_error_null_input("cg_k_gated_backward"), false;
    if (!gated_args("cg_k_gated_backward", a, b, g, act))
        return false;
    cg_tensor *a32 = f32_dense(a), *b32 = a32 ? f32_dense(b) : NULL;
    cg_tensor *g32 = b32 ? f32_dense(g) : NULL;
    cg_tensor *ra = g32 && da ? cg_empty(a->ndim, a->shape) : NULL;
    cg_tensor *rb = g32 && db ? cg_empty(a->ndim, a->shape) : NULL;
    bool ok = g32 && (!da || ra) && (!db || rb);
    if (ok) {
        const int64_t n = cg_numel(a);
        const gated_job j = {cg_data(a32),
                             cg_data(b32),
                             cg_data(g32),
                             NULL,
                             ra ? cg_data(ra) : NULL,
                             rb ? cg_data(rb) : NULL,
                             act};
        cg_shares_run(n, EW_RUN_G, cg_shares_team(n > EW_RUN_G), gated_bwd_run, &j);
        ra = ra ? as_dtype(ra, a->dtype) : NULL;
        rb = rb ? as_dtype(rb, b->dtype) : NULL;
        ok = (!da || ra) && (!db || rb);
    }
    cg_release_all(3, a32, b32, g32);
    if (!ok) {
        cg_release_all(2, ra, rb);
        return false;
    }
    if (da)
        *da = ra;
    if (db)
        *db = rb;
    return true;
}

/* ------------------------------------------- the halves of one tensor */
/* h float32, or h16 a bfloat16 h (contiguous), whose runs of up to
 * HALVES_RUN elements are widened as they are read (exact: the bits of
 * its float32 copy, without the copy of all of h: autograd keeps a bf16
 * h for the backward in bf16 precision) */
enum { HALVES_RUN = 512 };
typedef struct {
    const float *h, *g;
    const uint16_t *h16;
    float *out;
    int64_t n; /* the width of a half */
    cg_k_gate act;
} halves_job;

/* The run [c0, c0 + len) of row r's two halves: pointers into h, or h16's
 * run widened into wa and wb */
static inline __attribute__((always_inline)) void halves_run(const halves_job *j, int64_t r,
                                                             int64_t c0, int64_t len, float *wa,
                                                             float *wb, const float **a,
                                                             const float **b)
{
    const int64_t off = r * 2 * j->n + c0;
    if (!j->h16) {
        *a = j->h + off;
        *b = *a + j->n;
        return;
    }
    bf16_widen(len, j->h16 + off, wa);
    bf16_widen(len, j->h16 + off + j->n, wb);
    *a = wa;
    *b = wb;
}

/* Rows [r0, r1): forward without j->g (out a row of n a row), backward
 * with it (out a row of 2 n a row, as h) */
EW_CLONES static void halves_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    (void)thread;
    const halves_job *j = ctx;
    const int64_t n = j->n, step = j->h16 ? HALVES_RUN : n, out_w = j->g ? 2 * n : n;
    float wa[HALVES_RUN], wb[HALVES_RUN];
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c0 = 0; c0 < n; c0 += step) {
            const int64_t len = n - c0 < step ? n - c0 : step;
            const float *a, *b;
            halves_run(j, r, c0, len, wa, wb, &a, &b);
            float *o = j->out + r * out_w + c0;
            gate_apply(j->act, len, a, b, j->g ? j->g + r * n + c0 : NULL, o, j->g ? o + n : NULL);
        }
}

/* h's width, checked: the last dim, even and positive; 0 + error */
static int64_t halves_width(const char *op, const cg_tensor *h, cg_k_gate act)
{
    if (!h)
        return cg_error_null_input(op), 0;
    if ((int)act < 0 || act > CG_K_GATE_GELU) {
        cg_set_error("%s: unknown gate activation %d", op, (int)act);
        return 0;
    }
    if (h->dtype != CG_F32 && h->dtype != CG_BF16) {
        cg_set_error("%s: float32 or bfloat16 tensors only (got %s)", op, cg_dtype_name(h->dtype));
        return 0;
    }
    const int64_t w = h->ndim ? h->shape[h->ndim - 1] : 0;
    if (w <= 0 || w % 2) {
        char s[96];
        cg_set_error("%s: the last dim of %s must be even, two halves (got %lld)", op,
                     cg_shape_str(h, s, sizeof s), (long long)w);
        return 0;
    }
    return w / 2;
}

static int64_t halves_grain(int64_t n) { return n >= EW_RUN_G ? 1 : EW_RUN_G / n; }

/* h as the halves' kernels read it: a contiguous bfloat16 h itself (its
 * runs widened as they are read), else f32_dense's (a new reference) */
static cg_tensor *h_dense(const cg_tensor *h)
{
    return h->dtype == CG_BF16 && cg_is_contiguous(h) ? cg_retain((cg_tensor *)h) : f32_dense(h);
}
static const float *h_f32(const cg_tensor *h) { return h->dtype == CG_F32 ? cg_data(h) : NULL; }
static const uint16_t *h_bf16(const cg_tensor *h)
{
    return h->dtype == CG_BF16 ? cg_data_bf16(h) : NULL;
}

cg_tensor *cg_k_gated_halves(const cg_tensor *h, cg_k_gate act)
{
    const int64_t n = halves_width("cg_k_gated_halves", h, act);
    if (!n)
        return NULL;
    int64_t shape[CG_MAX_DIMS];
    memcpy(shape, h->shape, sizeof(int64_t) * (size_t)h->ndim);
    shape[h->ndim - 1] = n;
    cg_tensor *h32 = h_dense(h), *out = h32 ? cg_empty(h->ndim, shape) : NULL;
    if (out) {
        const int64_t rows = cg_numel(out) / n;
        const halves_job j = {h_f32(h32), NULL, h_bf16(h32), cg_data(out), n, act};
        cg_shares_run(rows, halves_grain(n), cg_shares_team(rows * n > EW_RUN_G), halves_rows, &j);
    }
    cg_release(h32);
    return as_dtype(out, h->dtype);
}

cg_tensor *cg_k_gated_halves_backward(const cg_tensor *h, const cg_tensor *g, cg_k_gate act)
{
    const int64_t n = halves_width("cg_k_gated_halves_backward", h, act);
    if (!n)
        return NULL;
    if (!g || (g->dtype != CG_F32 && g->dtype != CG_BF16) || g->ndim != h->ndim ||
        cg_numel(g) * 2 != cg_numel(h) || g->shape[g->ndim - 1] != n) {
        char a[96], b[96];
        cg_set_error("cg_k_gated_halves_backward: gradient %s for input %s (float32 or bfloat16, "
                     "the input's shape with the last dim halved)",
                     g ? cg_shape_str(g, a, sizeof a) : "NULL", cg_shape_str(h, b, sizeof b));
        return NULL;
    }
    cg_tensor *h32 = h_dense(h), *g32 = h32 ? f32_dense(g) : NULL;
    cg_tensor *dh = g32 ? cg_empty(h->ndim, h->shape) : NULL;
    if (dh) {
        const int64_t rows = cg_numel(g) / n;
        const halves_job j = {h_f32(h32), cg_data(g32), h_bf16(h32), cg_data(dh), n, act};
        cg_shares_run(rows, halves_grain(n), cg_shares_team(rows * n > EW_RUN_G), halves_rows, &j);
    }
    cg_release_all(2, h32, g32);
    /* bfloat16 only from two bfloat16 operands (PyTorch's promotion) */
    return as_dtype(dh, h->dtype == CG_BF16 && g->dtype == CG_BF16 ? CG_BF16 : CG_F32);
}
