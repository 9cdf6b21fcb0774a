/* The gated activation of a gated feed-forward (SwiGLU, GEGLU):
 * out = act(a) * b, elementwise, and its backward, each as one pass over
 * the elements (no act(a) tensor is made). act is SiLU (x sigmoid(x)) or
 * GELU's tanh form (core/elementwise_impl.h's f_gelu, the zoo's GELU).
 *
 * The elements are cut into runs of EW_RUN_G, each run computed by one
 * thread from its own elements only: the same bits for any team. bf16
 * inputs are widened, computed in float32 and each output rounded once. */
#include <stdlib.h>

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

EW_CLONES static void gated_fwd_run(int64_t i0, int64_t i1, int thread, const void *ctx)
{
    (void)thread;
    const gated_job *j = ctx;
    if (j->act == CG_K_GATE_SILU)
        for (int64_t i = i0; i < i1; i++)
            j->out[i] = gate_of(CG_K_GATE_SILU, j->a[i], NULL) * j->b[i];
    else
        for (int64_t i = i0; i < i1; i++)
            j->out[i] = gate_of(CG_K_GATE_GELU, j->a[i], NULL) * j->b[i];
}

EW_CLONES static void gated_bwd_run(int64_t i0, int64_t i1, int thread, const void *ctx)
{
    (void)thread;
    const gated_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) {
        float d;
        const float s = gate_of(j->act, j->a[i], &d);
        const float g = j->g[i];
        if (j->da)
            j->da[i] = g * j->b[i] * d;
        if (j->db)
            j->db[i] = g * s;
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
