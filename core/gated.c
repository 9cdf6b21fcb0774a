/* The gated activation of a gated feed-forward (SwiGLU, GEGLU):
 * out = act(a) * b, elementwise, and its backward, each as one pass over
 * the elements (no act(a) tensor is made). act is SiLU (x sigmoid(x)) or
 * GELU's tanh form (core/elementwise_impl.h's f_gelu, the zoo's GELU), or
 * the sigmoid (F.glu's gate, sigmoid(b) * a: a and b swapped).
 *
 * The elements are cut into runs of EW_RUN_G, each run computed by one
 * thread from its own elements only: the same bits for any team. A
 * contiguous bf16 operand is read as it is, each run of up to GATE_RUN
 * elements widened as it is read (exact: the bits of its float32 copy,
 * without the copy); the gate is computed in float32 and each output
 * rounded once. */
#include <stdlib.h>
#include <string.h>

#include "core/elementwise_impl.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/shares.h"
#include "core/tensor_impl.h"
#include "core/upcast.h"

#define EW_RUN_G 16384
enum { GATE_RUN = 512 };

/* An operand as the kernels read it: float32 (f), or bfloat16 (h) */
typedef struct {
    const float *f;
    const uint16_t *h;
} gate_src;

/* t as the kernels read it: a contiguous float32 or bfloat16 tensor (a new
 * reference: t itself when it is one already; a float32 copy otherwise) */
static cg_tensor *gate_dense(const cg_tensor *t) { return cg_upcast_dense(t, true); }
static gate_src src_of(const cg_tensor *t)
{
    return t->dtype == CG_F32 ? (gate_src){cg_data(t), NULL} : (gate_src){NULL, cg_data_bf16(t)};
}
/* len (<= GATE_RUN) elements of s from off: in place, or widened into buf */
static inline __attribute__((always_inline)) const float *src_run(gate_src s, int64_t off,
                                                                  int64_t len, float *buf)
{
    if (s.f)
        return s.f + off;
    bf16_widen(len, s.h + off, buf);
    return buf;
}

typedef struct {
    gate_src a, b, g; /* g.f and g.h NULL: the forward */
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
    if (act == CG_K_GATE_SIGMOID) { /* F.glu's gate */
        float s, m;
        ew_sigmoid2(x, &s, &m);
        if (d)
            *d = s * m;
        return s;
    }
    if (d)
        *d = f_gelu_grad(x);
    return f_gelu(x);
}

/* len elements of one act (a constant where it is inlined): without g,
 * out = act(a) * b; with g, the backward's da = g b act'(a) (into out) and
 * db = g act(a). */
static inline __attribute__((always_inline)) void gate_apply_as(
    cg_k_gate act, int64_t len, const float *restrict a, const float *restrict b,
    const float *restrict g, float *restrict out, float *restrict db)
{
    if (!g) {
        for (int64_t i = 0; i < len; i++)
            out[i] = gate_of(act, a[i], NULL) * b[i];
        return;
    }
    for (int64_t i = 0; i < len; i++) {
        float d;
        const float s = gate_of(act, a[i], &d);
        out[i] = g[i] * b[i] * d;
        db[i] = g[i] * s;
    }
}
/* gate_apply_as with act made a constant: one loop per act and direction,
 * each of which vectorises */
static inline __attribute__((always_inline)) void gate_apply(
    cg_k_gate act, int64_t len, const float *restrict a, const float *restrict b,
    const float *restrict g, float *restrict out, float *restrict db)
{
    if (act == CG_K_GATE_SILU)
        gate_apply_as(CG_K_GATE_SILU, len, a, b, g, out, db);
    else if (act == CG_K_GATE_GELU)
        gate_apply_as(CG_K_GATE_GELU, len, a, b, g, out, db);
    else
        gate_apply_as(CG_K_GATE_SIGMOID, len, a, b, g, out, db);
}

/* Elements [i0, i1): forward without g, backward with it (a gradient not
 * wanted into scratch: one loop, which vectorises) */
EW_CLONES static void gated_run(int64_t i0, int64_t i1, int thread, const void *ctx)
{
    (void)thread;
    const gated_job *j = ctx;
    const bool bwd = j->g.f || j->g.h;
    float wa[GATE_RUN], wb[GATE_RUN], wg[GATE_RUN], sa[GATE_RUN], sb[GATE_RUN];
    for (int64_t c0 = i0; c0 < i1; c0 += GATE_RUN) {
        const int64_t len = i1 - c0 < GATE_RUN ? i1 - c0 : GATE_RUN;
        const float *a = src_run(j->a, c0, len, wa), *b = src_run(j->b, c0, len, wb);
        if (!bwd)
            gate_apply(j->act, len, a, b, NULL, j->out + c0, NULL);
        else
            gate_apply(j->act, len, a, b, src_run(j->g, c0, len, wg), j->da ? j->da + c0 : sa,
                       j->db ? j->db + c0 : sb);
    }
}

static bool gated_args(const char *op, const cg_tensor *a, const cg_tensor *b, const cg_tensor *g,
                       cg_k_gate act)
{
    if (!a || !b) {
        cg_error_null_input(op);
        return false;
    }
    if ((int)act < 0 || act > CG_K_GATE_SIGMOID) {
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

cg_tensor *cg_k_gated(const cg_tensor *a, const cg_tensor *b, cg_k_gate act)
{
    if (!gated_args("cg_k_gated", a, b, NULL, act))
        return NULL;
    cg_tensor *ad = gate_dense(a), *bd = ad ? gate_dense(b) : NULL;
    cg_tensor *out = bd ? cg_empty(a->ndim, a->shape) : NULL;
    if (out) {
        const int64_t n = cg_numel(out);
        const gated_job j = {.a = src_of(ad), .b = src_of(bd), .out = cg_data(out), .act = act};
        cg_shares_run(n, EW_RUN_G, cg_shares_team(n > EW_RUN_G), gated_run, &j);
    }
    cg_release_all(2, ad, bd);
    return cg_upcast_round(out, a->dtype);
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
    cg_tensor *ad = gate_dense(a), *bd = ad ? gate_dense(b) : NULL;
    cg_tensor *gd = bd ? gate_dense(g) : NULL;
    cg_tensor *ra = gd && da ? cg_empty(a->ndim, a->shape) : NULL;
    cg_tensor *rb = gd && db ? cg_empty(a->ndim, a->shape) : NULL;
    bool ok = gd && (!da || ra) && (!db || rb);
    if (ok) {
        const int64_t n = cg_numel(a);
        const gated_job j = {src_of(ad),
                             src_of(bd),
                             src_of(gd),
                             NULL,
                             ra ? cg_data(ra) : NULL,
                             rb ? cg_data(rb) : NULL,
                             act};
        cg_shares_run(n, EW_RUN_G, cg_shares_team(n > EW_RUN_G), gated_run, &j);
        ra = ra ? cg_upcast_round(ra, a->dtype) : NULL;
        rb = rb ? cg_upcast_round(rb, b->dtype) : NULL;
        ok = (!da || ra) && (!db || rb);
    }
    cg_release_all(3, ad, bd, gd);
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
/* autograd keeps a bf16 h for the backward in bf16 precision: read as it
 * is, no float copy of all of h */
typedef struct {
    gate_src h, g; /* g.f and g.h NULL: the forward */
    float *out;
    int64_t n; /* the width of a half */
    cg_k_gate act;
} halves_job;

/* Rows [r0, r1): forward without g (out a row of n a row), backward with
 * it (out a row of 2 n a row, as h) */
EW_CLONES static void halves_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    (void)thread;
    const halves_job *j = ctx;
    const bool bwd = j->g.f || j->g.h;
    const int64_t n = j->n, out_w = bwd ? 2 * n : n;
    float wa[GATE_RUN], wb[GATE_RUN], wg[GATE_RUN];
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c0 = 0; c0 < n; c0 += GATE_RUN) {
            const int64_t len = n - c0 < GATE_RUN ? n - c0 : GATE_RUN, off = r * 2 * n + c0;
            const float *a = src_run(j->h, off, len, wa), *b = src_run(j->h, off + n, len, wb);
            float *o = j->out + r * out_w + c0;
            gate_apply(j->act, len, a, b, bwd ? src_run(j->g, r * n + c0, len, wg) : NULL, o,
                       bwd ? o + n : NULL);
        }
}

/* h's width, checked: the last dim, even and positive; 0 + error */
static int64_t halves_width(const char *op, const cg_tensor *h, cg_k_gate act)
{
    if (!h)
        return cg_error_null_input(op), 0;
    if ((int)act < 0 || act > CG_K_GATE_SIGMOID) {
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

cg_tensor *cg_k_gated_halves(const cg_tensor *h, cg_k_gate act)
{
    const int64_t n = halves_width("cg_k_gated_halves", h, act);
    if (!n)
        return NULL;
    int64_t shape[CG_MAX_DIMS];
    memcpy(shape, h->shape, sizeof(int64_t) * (size_t)h->ndim);
    shape[h->ndim - 1] = n;
    cg_tensor *hd = gate_dense(h), *out = hd ? cg_empty(h->ndim, shape) : NULL;
    if (out) {
        const int64_t rows = cg_numel(out) / n;
        const halves_job j = {.h = src_of(hd), .out = cg_data(out), .n = n, .act = act};
        cg_shares_run(rows, halves_grain(n), cg_shares_team(rows * n > EW_RUN_G), halves_rows, &j);
    }
    cg_release(hd);
    return cg_upcast_round(out, h->dtype);
}

cg_tensor *cg_k_gated_halves_backward(const cg_tensor *h, const cg_tensor *g, cg_k_gate act)
{
    const int64_t n = halves_width("cg_k_gated_halves_backward", h, act);
    if (!n)
        return NULL;
    bool same = g && g->ndim == h->ndim && g->shape[g->ndim - 1] == n;
    for (int d = 0; same && d < h->ndim - 1; d++)
        same = g->shape[d] == h->shape[d];
    if (!same || (g->dtype != CG_F32 && g->dtype != CG_BF16)) {
        char a[96], b[96];
        cg_set_error("cg_k_gated_halves_backward: gradient %s for input %s (float32 or bfloat16, "
                     "the input's shape with the last dim halved)",
                     g ? cg_shape_str(g, a, sizeof a) : "NULL", cg_shape_str(h, b, sizeof b));
        return NULL;
    }
    cg_tensor *hd = gate_dense(h), *gd = hd ? gate_dense(g) : NULL;
    cg_tensor *dh = gd ? cg_empty(h->ndim, h->shape) : NULL;
    if (dh) {
        const int64_t rows = cg_numel(g) / n;
        const halves_job j = {src_of(hd), src_of(gd), cg_data(dh), n, act};
        cg_shares_run(rows, halves_grain(n), cg_shares_team(rows * n > EW_RUN_G), halves_rows, &j);
    }
    cg_release_all(2, hd, gd);
    /* bfloat16 only from two bfloat16 operands (PyTorch's promotion) */
    return cg_upcast_round(dh, h->dtype == CG_BF16 && g->dtype == CG_BF16 ? CG_BF16 : CG_F32);
}
