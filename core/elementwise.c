/* cgrad core: elementwise kernels (declared in core/ops.h, "elementwise").
 *
 * Every op runs through core/iter.h: the operands are broadcast together,
 * their strides aligned to the output (0 where broadcast), contiguous dims
 * merged, and a segment function applies the scalar expression along runs of
 * the innermost dim. Each segment function has a unit-stride fast path that
 * the compiler vectorises where it can (no -ffast-math: libm calls stay
 * scalar) and a general strided loop. Outputs are fresh and contiguous; the
 * in-place ops (add_, muls_) accept any destination strides except internal
 * overlap (stride 0 on a dim of size > 1). Each element is written by one
 * thread, so results are identical for any thread count. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/gemm.h"
#include "core/iter.h"
#include "core/upcast.h"
#include "core/ops.h"

typedef struct ew_params {
    float a, b;
} ew_params;

#include "core/elementwise_impl.h"

/* ------------------------------------------------- segment functions */
/* In the expressions: X, Y, Z are the operands' elements, P the params.
 * The _WITH forms run DECL first (the named parameters of a row of
 * CG_UNARY_PARAM_OPS, read from P). */
#define EW_UNARY(fname, EXPR) EW_UNARY_WITH(fname, (void)0, EXPR)
#define EW_UNARY_WITH(fname, DECL, EXPR)                                                 \
    EW_CLONES static void fname(float *const *p, const int64_t *s, int64_t n, void *ctx) \
    {                                                                                    \
        const ew_params *P = ctx;                                                        \
        (void)P;                                                                         \
        DECL;                                                                            \
        float *o = p[0];                                                                 \
        const float *x = p[1];                                                           \
        if (s[0] == 1 && s[1] == 1) {                                                    \
            for (int64_t i = 0; i < n; i++) {                                            \
                const float X = x[i];                                                    \
                o[i] = (EXPR);                                                           \
            }                                                                            \
        } else {                                                                         \
            const int64_t os = s[0], xs = s[1];                                          \
            for (int64_t i = 0; i < n; i++) {                                            \
                const float X = x[i * xs];                                               \
                o[i * os] = (EXPR);                                                      \
            }                                                                            \
        }                                                                                \
    }

#define EW_BINARY(fname, EXPR) EW_BINARY_WITH(fname, (void)0, EXPR)
#define EW_BINARY_WITH(fname, DECL, EXPR)                                                \
    EW_CLONES static void fname(float *const *p, const int64_t *s, int64_t n, void *ctx) \
    {                                                                                    \
        const ew_params *P = ctx;                                                        \
        (void)P;                                                                         \
        DECL;                                                                            \
        float *o = p[0];                                                                 \
        const float *x = p[1], *y = p[2];                                                \
        if (s[0] == 1 && s[1] == 1 && s[2] == 1) {                                       \
            for (int64_t i = 0; i < n; i++) {                                            \
                const float X = x[i], Y = y[i];                                          \
                o[i] = (EXPR);                                                           \
            }                                                                            \
        } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {                                \
            const float Y = y[0];                                                        \
            for (int64_t i = 0; i < n; i++) {                                            \
                const float X = x[i];                                                    \
                o[i] = (EXPR);                                                           \
            }                                                                            \
        } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {                                \
            const float X = x[0];                                                        \
            for (int64_t i = 0; i < n; i++) {                                            \
                const float Y = y[i];                                                    \
                o[i] = (EXPR);                                                           \
            }                                                                            \
        } else {                                                                         \
            const int64_t os = s[0], xs = s[1], ys = s[2];                               \
            for (int64_t i = 0; i < n; i++) {                                            \
                const float X = x[i * xs], Y = y[i * ys];                                \
                o[i * os] = (EXPR);                                                      \
            }                                                                            \
        }                                                                                \
    }

#define EW_TERNARY(fname, EXPR)                                                          \
    EW_CLONES static void fname(float *const *p, const int64_t *s, int64_t n, void *ctx) \
    {                                                                                    \
        const ew_params *P = ctx;                                                        \
        (void)P;                                                                         \
        float *o = p[0];                                                                 \
        const float *x = p[1], *y = p[2], *z = p[3];                                     \
        if (s[0] == 1 && s[1] == 1 && s[2] == 1 && s[3] == 1) {                          \
            for (int64_t i = 0; i < n; i++) {                                            \
                const float X = x[i], Y = y[i], Z = z[i];                                \
                o[i] = (EXPR);                                                           \
            }                                                                            \
        } else {                                                                         \
            const int64_t os = s[0], xs = s[1], ys = s[2], zs = s[3];                    \
            for (int64_t i = 0; i < n; i++) {                                            \
                const float X = x[i * xs], Y = y[i * ys], Z = z[i * zs];                 \
                o[i * os] = (EXPR);                                                      \
            }                                                                            \
        }                                                                                \
    }

EW_UNARY(seg_neg, -X)
EW_UNARY(seg_exp, ew_expf(X))
EW_UNARY(seg_log, logf(X))
EW_UNARY(seg_sqrt, sqrtf(X))
EW_UNARY(seg_rsqrt, 1.0f / sqrtf(X))
EW_UNARY(seg_pow, powf(X, P->a))
EW_UNARY(seg_pow_sq, X *X)
EW_UNARY(seg_pow_cube, X *X *X)
EW_UNARY(seg_pow_recip, 1.0f / X)
EW_UNARY(seg_pow_rsq, 1.0f / (X * X))
EW_UNARY(seg_copy, X)
EW_UNARY(seg_one, ((void)X, 1.0f))
EW_UNARY(seg_tanh, ew_tanhf(X))
EW_UNARY(seg_sigmoid, f_sigmoid(X))
EW_UNARY(seg_clamp, f_clamp(X, P->a, P->b))
EW_UNARY(seg_adds, X + P->a)
EW_UNARY(seg_muls, X * P->a)

EW_BINARY(seg_add, X + Y)
EW_BINARY(seg_sub, X - Y)
EW_BINARY(seg_mul, X *Y)
EW_BINARY(seg_div, X / Y)
EW_BINARY(seg_axpby, X * P->a + Y * P->b)
EW_BINARY(seg_masked_fill, Y != 0.0f ? P->a : X)
/* backward helper: X is the forward input, Y the upstream gradient */
EW_BINARY(seg_clamp_bwd, (X >= P->a && X <= P->b) ? Y : 0.0f)

EW_TERNARY(seg_where, X != 0.0f ? Y : Z)
/* logsumexp's backward: X the input, Y the gradient and Z the result
 * (both broadcast from the reduced shape); 0 where the result is -inf
 * (every element -inf: PyTorch's exp(-inf - -inf) is NaN there) */
EW_TERNARY(seg_lse_bwd, Z == -INFINITY ? 0.0f : Y * ew_expf(X - Z))
/* The pointwise losses (core/ops.h cg_k_loss): X the input, Y the target,
 * P->a beta or delta; their backward for the input (_dx, Z the gradient)
 * and where it is not _dx with the two swapped, for the target (_dy):
 * PyTorch's expressions, NaN and the kinks as there (l1: sgn(NaN) is 0;
 * smooth_l1 with beta 0 at X == Y: -Z) */
#define EW_D (X - Y)
EW_BINARY(seg_l1, fabsf(X - Y))
EW_TERNARY(seg_l1_dx, EW_D > 0.0f ? Z : (EW_D < 0.0f ? -Z : 0.0f))
EW_TERNARY(seg_l1_dy, -(EW_D > 0.0f ? Z : (EW_D < 0.0f ? -Z : 0.0f)))
EW_BINARY(seg_smooth_l1, fabsf(X - Y) < P->a ? 0.5f * fabsf(X - Y) * fabsf(X - Y) / P->a
                                             : fabsf(X - Y) - 0.5f * P->a)
EW_TERNARY(seg_smooth_l1_dx, EW_D <= -P->a ? -Z : (EW_D >= P->a ? Z : EW_D * Z / P->a))
EW_BINARY(seg_huber, fabsf(X - Y) < P->a ? 0.5f * fabsf(X - Y) * fabsf(X - Y)
                                         : P->a * (fabsf(X - Y) - 0.5f * P->a))
EW_TERNARY(seg_huber_dx, EW_D <= -P->a ? -Z * P->a : (EW_D >= P->a ? Z * P->a : EW_D * Z))
EW_BINARY(seg_mse, EW_D *EW_D)
EW_TERNARY(seg_mse_dx, 2.0f * EW_D * Z)
EW_TERNARY(seg_mse_dy, -2.0f * EW_D * Z)
/* binary_cross_entropy_with_logits, in double, rounded once; at an
 * infinite x its limit c |x| (c = 1 - y or y; 0 where c is 0), where
 * max(x, 0) - x y would be inf - inf */
static inline float bce_logits(float x, float y)
{
    double v = x, c = v > 0 ? 1.0 - (double)y : (double)y;
    if (isinf(v))
        return c == 0.0 ? 0.0f : (float)(c * INFINITY);
    return (float)((v > 0 ? v : 0.0) - v * (double)y + log1p(exp(-fabs(v))));
}
EW_BINARY(seg_bce_logits, bce_logits(X, Y))
EW_TERNARY(seg_bce_logits_dx, (f_sigmoid(X) - Y) * Z)
EW_TERNARY(seg_bce_logits_dy, ((void)Y, -X *Z))
/* kl_div: xlogy(y, y) - y x (NaN for a NaN y, 0 for y = 0), or with a log
 * target e^y (y - x) */
EW_BINARY(seg_kl, (Y != Y ? Y : (Y == 0.0f ? 0.0f : Y * logf(Y))) - Y * X)
EW_TERNARY(seg_kl_dx, ((void)X, -Y *Z))
EW_TERNARY(seg_kl_dy, Z *(Y != 0.0f ? logf(Y) : (Y != Y ? Y : 0.0f)) + Z * Y / Y - Z * X)
EW_BINARY(seg_kl_log, expf(Y) * (Y - X))
EW_TERNARY(seg_kl_log_dx, ((void)X, -(Z *expf(Y))))
EW_TERNARY(seg_kl_log_dy, Z *expf(Y) * (Y - X) + Z * expf(Y))
/* binary_cross_entropy on probabilities X (checked by the caller), each
 * log clamped at -100, its gradients PyTorch 1.13's (EPSILON 1e-12) */
EW_BINARY(seg_bce, (Y - 1.0f) * fmaxf(log1pf(-X), -100.0f) - Y * fmaxf(logf(X), -100.0f))
EW_TERNARY(seg_bce_dx, Z *(X - Y) / fmaxf((1.0f - X) * X, 1e-12f))
EW_TERNARY(seg_bce_dy, ((void)Y, Z *(log1pf(-X) - logf(X))))
#undef EW_D
/* torch.maximum / torch.minimum: NaN where either is NaN, a tie gives X
 * (std::max's and std::min's choice, so the sign of a tied zero is X's) */
EW_BINARY(seg_maximum, X != X ? X : (Y != Y ? Y : (X < Y ? Y : X)))
EW_BINARY(seg_minimum, X != X ? X : (Y != Y ? Y : (Y < X ? Y : X)))
/* their backward for the operand X against the other Y, Z the gradient:
 * Z where X wins (or either is NaN), half of it at a tie, 0 where Y wins */
EW_TERNARY(seg_maximum_bwd, X == Y ? Z * 0.5f : (X < Y ? 0.0f : Z))
EW_TERNARY(seg_minimum_bwd, X == Y ? Z * 0.5f : (X > Y ? 0.0f : Z))

/* ---------------------------------------------------------- drivers */
static bool shape_is(int nd, const int64_t *shape, const cg_tensor *t)
{
    if (nd != t->ndim)
        return false;
    for (int i = 0; i < nd; i++)
        if (shape[i] != t->shape[i])
            return false;
    return true;
}

/* bfloat16 inputs beside a float32 one, every input contiguous and of the
 * output's shape (a backward from a saved bf16 copy: GELU's): the result is
 * float32, and each thread widens its run of the bf16 inputs EW_WIDE
 * elements at a time into buffers on its stack and applies fn there, so no
 * float copy of a whole input is made and the output is written once. An
 * element's value is fn's on the same floats as cg_upcast's copies give. */
#define EW_RUN 16384
#define EW_WIDE 2048
EW_CLONES static void widen_run(int64_t n, const uint16_t *h, float *f) { bf16_widen(n, h, f); }
static bool ew_widens(int nin, const cg_tensor *const *in, int nd, const int64_t *shape)
{
    bool bf = false, f32 = false;
    for (int k = 0; k < nin; k++) {
        if (!shape_is(nd, shape, in[k]) || !cg_is_contiguous(in[k]))
            return false;
        bf |= in[k]->dtype == CG_BF16;
        f32 |= in[k]->dtype == CG_F32;
        if (in[k]->dtype != CG_BF16 && in[k]->dtype != CG_F32)
            return false;
    }
    return bf && f32;
}

/* What ew_widening's runs read and write */
typedef struct {
    int nin;
    const cg_tensor *const *in;
    float *out;
    cg_iter_seg_fn fn;
    ew_params *P;
} ew_wide_job;

/* Elements [b, e) of ew_widening, EW_WIDE at a time */
static void ew_wide_run(int64_t b, int64_t e, int thread, const void *job)
{
    const ew_wide_job *j = job;
    float buf[CG_ITER_MAX_OPS - 1][EW_WIDE];
    for (int64_t i = b; i < e; i += EW_WIDE) {
        const int64_t len = e - i < EW_WIDE ? e - i : EW_WIDE;
        float *p[CG_ITER_MAX_OPS] = {j->out + i};
        int64_t s[CG_ITER_MAX_OPS] = {1, 1, 1, 1};
        for (int k = 0; k < j->nin; k++) {
            if (j->in[k]->dtype == CG_BF16) {
                widen_run(len, (const uint16_t *)cg_data_ptr(j->in[k]) + i, buf[k]);
                p[k + 1] = buf[k];
            } else {
                p[k + 1] = cg_data((cg_tensor *)j->in[k]) + i;
            }
        }
        j->fn(p, s, len, j->P);
    }
}

static cg_tensor *ew_widening(int nin, const cg_tensor *const *in, int nd, const int64_t *shape,
                              cg_iter_seg_fn fn, ew_params *P)
{
    cg_tensor *out = cg_empty(nd, shape);
    if (!out)
        return NULL;
    const int64_t n = cg_numel(out);
    ew_wide_job job = {nin, in, cg_data(out), fn, P};
    cg_shares_run(n, EW_RUN, cg_shares_team(n > EW_RUN), ew_wide_run, &job);
    return out;
}

/* Broadcast nin inputs, allocate the output, apply fn. */
static cg_tensor *ew_apply(const char *op, int nin, const cg_tensor *const *in, cg_iter_seg_fn fn,
                           ew_params *P)
{
    for (int k = 0; k < nin; k++) {
        if (!in[k]) {
            cg_error_null_input(op);
            return NULL;
        }
        if (cg_debug_enabled() && !cg_lifetime_use_ok(in[k], op))
            return NULL;
    }
    int64_t shape[CG_MAX_DIMS] = {0};
    int nd = cg_iter_broadcast(op, nin, in, shape);
    if (nd < 0)
        return NULL;
    if (ew_widens(nin, in, nd, shape))
        return ew_widening(nin, in, nd, shape, fn, P);
    const cg_tensor *ops[CG_ITER_MAX_OPS] = {NULL};
    const cg_tensor **slots[CG_ITER_MAX_OPS];
    for (int k = 0; k < nin; k++) {
        ops[k + 1] = in[k];
        slots[k] = &ops[k + 1];
    }
    cg_upcast u;
    if (!cg_upcast_begin(&u, op, nin, slots))
        return NULL;
    cg_tensor *out = cg_empty(nd, shape);
    if (out) {
        ops[0] = out;
        cg_iter it;
        cg_iter_init(&it, nd, shape, nin + 1, ops);
        cg_iter_run(&it, fn, P);
    }
    return cg_upcast_end(&u, out);
}

static cg_tensor *unary(const char *op, const cg_tensor *a, cg_iter_seg_fn fn, float pa, float pb)
{
    ew_params P = {pa, pb};
    return ew_apply(op, 1, (const cg_tensor *[]){a}, fn, &P);
}

static cg_tensor *binary(const char *op, const cg_tensor *a, const cg_tensor *b, cg_iter_seg_fn fn,
                         float pa, float pb)
{
    ew_params P = {pa, pb};
    return ew_apply(op, 2, (const cg_tensor *[]){a, b}, fn, &P);
}

/* ------------------------------------------ the rows of CG_UNARY_OPS */
/* Each row of core/ops.h's table: its forward and backward segment
 * kernels (seg_<name>, seg_<name>_bwd, its expressions' loops) and the two
 * kernels over tensors, which run the segments by row_seg: GELU's
 * contiguous ones by gelu_run instead (the same bits, the fast exp where
 * it allows). */
#define EW_ROW_(A, E, name, fwd, bwd) EW_ROW_##E,
enum { CG_UNARY_OPS(EW_ROW_, ~) };
#undef EW_ROW_
/* A strided segment (a transposed, sliced or permuted operand) is gathered
 * EW_GATHER elements at a time into buffers on the stack and run by
 * gelu_run too: each element's bits are those of f_gelu and f_gelu_grad
 * whatever the layout, and the strided segments no longer take the scalar
 * exp (4.6 times the contiguous forward's instructions, 3.2 times the
 * backward's, on a transposed [512, 512]). */
#define EW_GATHER 256
EW_CLONES static void seg_gelu_runs(float *const *p, const int64_t *s, int64_t n, void *ctx)
{
    (void)ctx;
    if (s[0] == 1 && s[1] == 1) {
        gelu_run(n, p[1], NULL, p[0]);
        return;
    }
    const int64_t os = s[0], xs = s[1];
    float buf[EW_GATHER];
    for (int64_t i0 = 0; i0 < n; i0 += EW_GATHER) {
        const int64_t m = n - i0 < EW_GATHER ? n - i0 : EW_GATHER;
        const float *x = p[1] + i0 * xs;
        float *o = p[0] + i0 * os;
        for (int64_t i = 0; i < m; i++)
            buf[i] = x[i * xs];
        gelu_run(m, buf, NULL, buf);
        for (int64_t i = 0; i < m; i++)
            o[i * os] = buf[i];
    }
}
EW_CLONES static void seg_gelu_bwd_runs(float *const *p, const int64_t *s, int64_t n, void *ctx)
{
    (void)ctx;
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
        gelu_run(n, p[1], p[2], p[0]);
        return;
    }
    const int64_t os = s[0], xs = s[1], gs = s[2];
    float xb[EW_GATHER], gb[EW_GATHER];
    for (int64_t i0 = 0; i0 < n; i0 += EW_GATHER) {
        const int64_t m = n - i0 < EW_GATHER ? n - i0 : EW_GATHER;
        const float *x = p[1] + i0 * xs, *g = p[2] + i0 * gs;
        float *o = p[0] + i0 * os;
        for (int64_t i = 0; i < m; i++) {
            xb[i] = x[i * xs];
            gb[i] = g[i * gs];
        }
        gelu_run(m, xb, gb, xb);
        for (int64_t i = 0; i < m; i++)
            o[i * os] = xb[i];
    }
}
static cg_iter_seg_fn row_seg(int row, bool bwd, cg_iter_seg_fn seg)
{
    if (row == EW_ROW_GELU)
        return bwd ? seg_gelu_bwd_runs : seg_gelu_runs;
    return seg;
}

#define EW_UNARY_OP_(A, E, name, fwd, bwd)                                                         \
    EW_UNARY(seg_##name, fwd)                                                                      \
    EW_BINARY(seg_##name##_bwd, bwd)                                                               \
    cg_tensor *cg_k_##name(const cg_tensor *a)                                                     \
    {                                                                                              \
        return unary(#name, a, row_seg(EW_ROW_##E, false, seg_##name), 0, 0);                      \
    }                                                                                              \
    cg_tensor *cg_k_##name##_backward(const cg_tensor *x, const cg_tensor *g)                      \
    {                                                                                              \
        return binary(#name "_backward", x, g, row_seg(EW_ROW_##E, true, seg_##name##_bwd), 0, 0); \
    }
CG_UNARY_OPS(EW_UNARY_OP_, ~)
#undef EW_UNARY_OP_

/* ------------------------------------ the rows of CG_UNARY_PARAM_OPS */
/* A row's parameters outside its rule: "celu: alpha cannot be 0 (got alpha
 * 0)"; names is the row's parameter list as written ("min_val, max_val"). */
static void params_refused(const char *op, const char *text, const char *names, const float *v)
{
    const char *comma = strchr(names, ',');
    if (comma)
        cg_set_error("%s: %s (got %.*s %g,%s %g)", op, text, (int)(comma - names), names,
                     (double)v[0], comma + 1, (double)v[1]);
    else
        cg_set_error("%s: %s (got %s %g)", op, text, names, (double)v[0]);
}

/* As CG_UNARY_OPS's, the parameters carried in ew_params (a, b) and read
 * back under their names */
#define EW_PARAM_OP_(A, E, name, fwd, bwd, rule, ...)                                          \
    EW_UNARY_WITH(seg_##name, CG_PARAMS_LOCALS(P->a, P->b, __VA_ARGS__), fwd)                  \
    EW_BINARY_WITH(seg_##name##_bwd, CG_PARAMS_LOCALS(P->a, P->b, __VA_ARGS__), bwd)           \
    static bool name##_params_ok(CG_PARAMS_DECL(__VA_ARGS__))                                  \
    {                                                                                          \
        if (CG_PARAM_RULE_COND_ rule)                                                          \
            return true;                                                                       \
        params_refused(#name, CG_PARAM_RULE_TEXT_ rule, #__VA_ARGS__,                          \
                       (const float[]){CG_PARAMS_PAIR(__VA_ARGS__)});                          \
        return false;                                                                          \
    }                                                                                          \
    cg_tensor *cg_k_##name(const cg_tensor *a, CG_PARAMS_DECL(__VA_ARGS__))                    \
    {                                                                                          \
        if (!name##_params_ok(__VA_ARGS__))                                                    \
            return NULL;                                                                       \
        return unary(#name, a, seg_##name, CG_PARAMS_PAIR(__VA_ARGS__));                       \
    }                                                                                          \
    cg_tensor *cg_k_##name##_backward(const cg_tensor *x, const cg_tensor *g,                  \
                                      CG_PARAMS_DECL(__VA_ARGS__))                             \
    {                                                                                          \
        if (!name##_params_ok(__VA_ARGS__))                                                    \
            return NULL;                                                                       \
        return binary(#name "_backward", x, g, seg_##name##_bwd, CG_PARAMS_PAIR(__VA_ARGS__)); \
    }
CG_UNARY_PARAM_OPS(EW_PARAM_OP_, ~)
#undef EW_PARAM_OP_

/* ----------------------------------------------------------- binary */
cg_tensor *cg_k_add(const cg_tensor *a, const cg_tensor *b)
{
    return binary("add", a, b, seg_add, 0, 0);
}
cg_tensor *cg_k_sub(const cg_tensor *a, const cg_tensor *b)
{
    return binary("sub", a, b, seg_sub, 0, 0);
}
cg_tensor *cg_k_mul(const cg_tensor *a, const cg_tensor *b)
{
    return binary("mul", a, b, seg_mul, 0, 0);
}
cg_tensor *cg_k_div(const cg_tensor *a, const cg_tensor *b)
{
    return binary("div", a, b, seg_div, 0, 0);
}

cg_tensor *cg_k_maximum(const cg_tensor *a, const cg_tensor *b)
{
    return binary("maximum", a, b, seg_maximum, 0, 0);
}
cg_tensor *cg_k_minimum(const cg_tensor *a, const cg_tensor *b)
{
    return binary("minimum", a, b, seg_minimum, 0, 0);
}
cg_tensor *cg_k_maximum_backward(const cg_tensor *x, const cg_tensor *y, const cg_tensor *g,
                                 bool minimum)
{
    ew_params P = {0, 0};
    return ew_apply(minimum ? "minimum_backward" : "maximum_backward", 3,
                    (const cg_tensor *[]){x, y, g}, minimum ? seg_minimum_bwd : seg_maximum_bwd,
                    &P);
}

cg_tensor *cg_k_logsumexp_backward(const cg_tensor *x, const cg_tensor *g, const cg_tensor *lse)
{
    ew_params P = {0, 0};
    return ew_apply("logsumexp_backward", 3, (const cg_tensor *[]){x, g, lse}, seg_lse_bwd, &P);
}

/* ------------------------------------------------------------ losses */
static const struct {
    const char *name;
    cg_iter_seg_fn fwd, dx, dy; /* dy NULL: dx with input and target swapped */
} LOSSES[] = {
    [CG_K_LOSS_L1] = {"l1_loss", seg_l1, seg_l1_dx, seg_l1_dy},
    [CG_K_LOSS_SMOOTH_L1] = {"smooth_l1_loss", seg_smooth_l1, seg_smooth_l1_dx, NULL},
    [CG_K_LOSS_HUBER] = {"huber_loss", seg_huber, seg_huber_dx, NULL},
    [CG_K_LOSS_MSE] = {"mse_loss", seg_mse, seg_mse_dx, seg_mse_dy},
    [CG_K_LOSS_BCE_LOGITS] = {"binary_cross_entropy_with_logits", seg_bce_logits, seg_bce_logits_dx,
                              seg_bce_logits_dy},
    [CG_K_LOSS_KL_DIV] = {"kl_div", seg_kl, seg_kl_dx, seg_kl_dy},
    [CG_K_LOSS_KL_DIV_LOG] = {"kl_div", seg_kl_log, seg_kl_log_dx, seg_kl_log_dy},
    [CG_K_LOSS_BCE] = {"binary_cross_entropy", seg_bce, seg_bce_dx, seg_bce_dy},
};

static bool loss_kind(cg_k_loss_kind kind)
{
    if ((unsigned)kind < sizeof LOSSES / sizeof LOSSES[0])
        return true;
    cg_set_error("loss: no pointwise loss %d", (int)kind);
    return false;
}

cg_tensor *cg_k_loss(cg_k_loss_kind kind, const cg_tensor *x, const cg_tensor *y, float p)
{
    return loss_kind(kind) ? binary(LOSSES[kind].name, x, y, LOSSES[kind].fwd, p, 0) : NULL;
}

cg_tensor *cg_k_loss_backward(cg_k_loss_kind kind, const cg_tensor *x, const cg_tensor *y,
                              const cg_tensor *g, float p, bool target)
{
    if (!loss_kind(kind))
        return NULL;
    ew_params P = {p, 0};
    const bool swap = target && !LOSSES[kind].dy;
    char op[64];
    snprintf(op, sizeof op, "%s_backward", LOSSES[kind].name);
    return ew_apply(op, 3, (const cg_tensor *[]){swap ? y : x, swap ? x : y, g},
                    target && !swap ? LOSSES[kind].dy : LOSSES[kind].dx, &P);
}

cg_tensor *cg_k_axpby(const cg_tensor *a, float alpha, const cg_tensor *b, float beta)
{
    return binary("axpby", a, b, seg_axpby, alpha, beta);
}

cg_tensor *cg_k_adds(const cg_tensor *a, float s) { return unary("adds", a, seg_adds, s, 0); }
cg_tensor *cg_k_muls(const cg_tensor *a, float s) { return unary("muls", a, seg_muls, s, 0); }

/* ------------------------------------------------------------ unary */
cg_tensor *cg_k_neg(const cg_tensor *a) { return unary("neg", a, seg_neg, 0, 0); }
cg_tensor *cg_k_exp(const cg_tensor *a) { return unary("exp", a, seg_exp, 0, 0); }
cg_tensor *cg_k_log(const cg_tensor *a) { return unary("log", a, seg_log, 0, 0); }
cg_tensor *cg_k_sqrt(const cg_tensor *a) { return unary("sqrt", a, seg_sqrt, 0, 0); }
cg_tensor *cg_k_rsqrt(const cg_tensor *a) { return unary("rsqrt", a, seg_rsqrt, 0, 0); }
cg_tensor *cg_k_tanh(const cg_tensor *a) { return unary("tanh", a, seg_tanh, 0, 0); }
cg_tensor *cg_k_sigmoid(const cg_tensor *a) { return unary("sigmoid", a, seg_sigmoid, 0, 0); }

cg_tensor *cg_k_pow(const cg_tensor *a, float p)
{
    /* small integer exponents by multiplication (exact, as PyTorch does);
     * everything else by powf */
    if (p == 2.0f)
        return unary("pow", a, seg_pow_sq, p, 0);
    if (p == 3.0f)
        return unary("pow", a, seg_pow_cube, p, 0);
    if (p == 1.0f)
        return unary("pow", a, seg_copy, p, 0);
    if (p == 0.0f)
        return unary("pow", a, seg_one, p, 0); /* pow(x, 0) = 1, even for NaN */
    if (p == 0.5f)
        return unary("pow", a, seg_sqrt, p, 0);
    if (p == -1.0f)
        return unary("pow", a, seg_pow_recip, p, 0);
    if (p == -2.0f)
        return unary("pow", a, seg_pow_rsq, p, 0);
    if (p == -0.5f)
        return unary("pow", a, seg_rsqrt, p, 0);
    return unary("pow", a, seg_pow, p, 0);
}

cg_tensor *cg_k_clamp(const cg_tensor *a, float lo, float hi)
{
    return unary("clamp", a, seg_clamp, lo, hi);
}

/* ---------------------------------------------------- select / fill */
/* where's condition and masked_fill's mask: bool, as PyTorch has them (a
 * float mask meant to be added would otherwise select wherever it is not
 * zero); false + error naming op and the dtype otherwise. The float
 * kernels read it as float32 0/1 (cg_k_to), the typed ones as it is. */
static bool check_condition(const char *op, const char *what, const cg_tensor *m)
{
    if (m->dtype == CG_BOOL)
        return true;
    cg_set_error("%s: the %s is %s, expected bool (cg_to(%s, CG_BOOL): true where not zero)", op,
                 what, cg_dtype_name(m->dtype), what);
    return false;
}

cg_tensor *cg_k_where(const cg_tensor *cond, const cg_tensor *a, const cg_tensor *b)
{
    if (!cond || !a || !b) {
        cg_error_null_input("where");
        return NULL;
    }
    if (!check_condition("where", "condition", cond))
        return NULL;
    if (!cg_dtype_is_float(a->dtype) || !cg_dtype_is_float(b->dtype))
        return cg_typed_where(cond, a, b);
    cg_upcast u; /* the values' dtypes decide the result's, not the condition's */
    if (!cg_upcast_begin(&u, "where", 2, (const cg_tensor **[]){&a, &b}))
        return NULL;
    cg_tensor *c = cg_k_to(cond, CG_F32), *out = NULL;
    if (c) {
        ew_params P = {0, 0};
        out = ew_apply("where", 3, (const cg_tensor *[]){c, a, b}, seg_where, &P);
        cg_release(c);
    }
    return cg_upcast_end(&u, out);
}

cg_tensor *cg_k_masked_fill(const cg_tensor *a, const cg_tensor *mask, float value)
{
    if (!a || !mask) {
        cg_error_null_input("cg_k_masked_fill");
        return NULL;
    }
    int64_t shape[CG_MAX_DIMS] = {0};
    int nd = cg_iter_broadcast("masked_fill", 2, (const cg_tensor *[]){a, mask}, shape);
    if (nd < 0)
        return NULL;
    if (!shape_is(nd, shape, a)) {
        char b1[96], b2[96];
        cg_set_error("masked_fill: mask shape %s does not broadcast to the tensor shape %s",
                     cg_shape_str(mask, b1, sizeof b1), cg_shape_str(a, b2, sizeof b2));
        return NULL;
    }
    if (!check_condition("masked_fill", "mask", mask))
        return NULL;
    if (!cg_dtype_is_float(a->dtype))
        return cg_typed_masked_fill(a, mask, value);
    cg_upcast u;
    if (!cg_upcast_begin(&u, "masked_fill", 1, (const cg_tensor **[]){&a}))
        return NULL;
    cg_tensor *m = cg_k_to(mask, CG_F32), *out = NULL;
    if (m) {
        out = binary("masked_fill", a, m, seg_masked_fill, value, 0);
        cg_release(m);
    }
    return cg_upcast_end(&u, out);
}

/* ---------------------------------------------------------- backward */
cg_tensor *cg_k_clamp_backward(const cg_tensor *x, const cg_tensor *g, float lo, float hi)
{
    /* PyTorch's mask: (x >= lo) & (x <= hi): the gradient passes at the bounds */
    return binary("clamp_backward", x, g, seg_clamp_bwd, lo, hi);
}

/* ---------------------------------------------------------- in place */
bool cg_k_add_(cg_tensor *dst, const cg_tensor *src)
{
    if (!dst || !src)
        return cg_error_null_input("cg_k_add_");
    const cg_tensor *args[2] = {dst, src};
    for (int k = 0; k < 2; k++)
        if (!cg_dtype_is_float(args[k]->dtype))
            return cg_upcast_refuse("add_", k, args[k]);
    int64_t shape[CG_MAX_DIMS] = {0};
    int nd = cg_iter_broadcast("add_", 2, (const cg_tensor *[]){dst, src}, shape);
    if (nd < 0)
        return false;
    if (!shape_is(nd, shape, dst)) {
        char b1[96], b2[96];
        cg_set_error("add_: source shape %s does not broadcast to the destination shape %s",
                     cg_shape_str(src, b1, sizeof b1), cg_shape_str(dst, b2, sizeof b2));
        return false;
    }
    if (!cg_check_writable("add_", dst))
        return false;
    if (dst->dtype != CG_F32 || src->dtype != CG_F32) { /* in float32, rounded into dst */
        cg_tensor *sum = cg_k_add(dst, src);
        bool ok = sum && cg_k_copy_(dst, sum);
        cg_release(sum);
        return ok;
    }
    cg_tensor *copy;
    src = cg_k_unaliased(dst, src, true, &copy);
    if (!src)
        return false;
    ew_params P = {0, 0};
    cg_iter it;
    cg_iter_init(&it, dst->ndim, dst->shape, 3, (const cg_tensor *[]){dst, dst, src});
    cg_iter_run(&it, seg_add, &P);
    cg_tensor_modified(dst); /* once written: see cg_tensor_modified */
    cg_release(copy);
    return true;
}

bool cg_k_muls_(cg_tensor *dst, float s)
{
    if (!dst)
        return cg_error_null_input("cg_k_muls_");
    if (!cg_check_f32("muls_", "dst", dst))
        return false;
    if (!cg_check_writable("muls_", dst))
        return false;
    ew_params P = {s, 0};
    cg_iter it;
    cg_iter_init(&it, dst->ndim, dst->shape, 2, (const cg_tensor *[]){dst, dst});
    cg_iter_run(&it, seg_muls, &P);
    cg_tensor_modified(dst);
    return true;
}

bool cg_k_relu_(cg_tensor *dst)
{
    if (!dst)
        return cg_error_null_input("cg_k_relu_");
    if (!cg_check_f32("relu_", "dst", dst))
        return false;
    if (!cg_check_writable("relu_", dst))
        return false;
    ew_params P = {0, 0};
    cg_iter it;
    cg_iter_init(&it, dst->ndim, dst->shape, 2, (const cg_tensor *[]){dst, dst});
    cg_iter_run(&it, seg_relu, &P);
    cg_tensor_modified(dst);
    return true;
}
