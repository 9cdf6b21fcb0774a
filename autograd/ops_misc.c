/* The unary ops of core/ops.h's CG_UNARY_OPS (relu, gelu, silu, sin, ...),
 * and more of the ops a PyTorch user reaches for first: maximum, minimum,
 * tril, triu, cumsum, topk, argmax, argmin, pad, flip, roll, repeat. Forward and
 * backward side by side, as in ops.c. */
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "autograd/ops_impl.h"
#include "core/ops.h"

#define IN(i) (n->inputs[(i)])
#define NEEDS(i) cg_node_needs_grad(n, (i))

/* Record a node with the given inputs on out (released on failure). */
static cg_tensor *record(cg_tensor *out, cg_op op, int nin, cg_tensor *const *in, cg_backward_fn bw,
                         cg_node **node)
{
    cg_node *n = cg_record(out, op, nin, in, bw);
    if (node)
        *node = n;
    if (out && !n && cg_grad_enabled()) {
        for (int i = 0; i < nin; i++) {
            if (in[i] && in[i]->requires_grad) { /* it should have recorded */
                cg_release(out);
                return NULL;
            }
        }
    }
    return out;
}

/* --------------------------------------- the rows of CG_UNARY_OPS */
/* In bf16 precision a node whose backward reads only its float32 input's
 * values keeps that input rounded to bf16 (cg_k_bf16_operand, in saved[0])
 * instead of the input itself, as autocast keeps the feed-forward's
 * activations in bf16: half the bytes, and the backward takes the
 * derivative at the rounded input (other bits than fp32's input gave:
 * docs/autograd.md). GELU (the feed-forward's activation, both forms) and
 * the gated feed-forward's gate do. n is out's node (NULL: none recorded). */
static cg_tensor *keep_input_bf16(cg_tensor *out, cg_node *n, const cg_tensor *a)
{
    if (!n || a->dtype != CG_F32 || cg_get_matmul_precision() != CG_PRECISION_BF16)
        return out;
    cg_tensor *ab = cg_k_bf16_operand(a);
    const bool ok = ab && cg_node_save(n, ab) >= 0;
    cg_release(ab);
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    cg_node_set_reads(n, 0, false);
    return out;
}
static cg_tensor *unary_record(cg_tensor *out, cg_op op, cg_tensor *a, cg_backward_fn bw)
{
    cg_node *n;
    out = record(out, op, 1, &a, bw, &n);
    return op == CG_OP_GELU || op == CG_OP_GELU_ERF ? keep_input_bf16(out, n, a) : out;
}
/* Each row's backward (its kernel of x, or of x's bf16 copy, and g: the
 * kernel widens a bf16 x a run at a time, so no float copy of the whole
 * input is made while backward peaks) and its forward. */
#define UNARY_OP_(A, E, name, fwd, bwd)                                                    \
    static bool name##_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)                 \
    {                                                                                      \
        gin[0] = cg_k_##name##_backward(n->saved[0] ? n->saved[0] : IN(0), g);             \
        return gin[0] != NULL;                                                             \
    }                                                                                      \
    cg_tensor *cg_##name(cg_tensor *a)                                                     \
    {                                                                                      \
        return a ? unary_record(cg_k_##name(a), CG_OP_##E, a, name##_bw) : cg_k_##name(a); \
    }
CG_UNARY_OPS(UNARY_OP_, ~)
#undef UNARY_OP_

/* ---------------------------------- the rows of CG_UNARY_PARAM_OPS */
/* As above, the node keeping the parameters (p.f[0], p.f[1]) */
#define UNARY_PARAM_OP_(A, E, name, fwd, bwd, rule, ...)                                         \
    static bool name##_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)                       \
    {                                                                                            \
        gin[0] = cg_k_##name##_backward(IN(0), g, CG_PARAMS_AT(n->p.f, __VA_ARGS__));            \
        return gin[0] != NULL;                                                                   \
    }                                                                                            \
    cg_tensor *cg_##name(cg_tensor *a, CG_PARAMS_DECL(__VA_ARGS__))                              \
    {                                                                                            \
        const float pv[2] = {CG_PARAMS_PAIR(__VA_ARGS__)};                                       \
        if (!a)                                                                                  \
            return cg_k_##name(a, CG_PARAMS_AT(pv, __VA_ARGS__));                                \
        cg_node *n;                                                                              \
        cg_tensor *out = record(cg_k_##name(a, CG_PARAMS_AT(pv, __VA_ARGS__)), CG_OP_##E, 1, &a, \
                                name##_bw, &n);                                                  \
        if (n)                                                                                   \
            memcpy(n->p.f, pv, sizeof pv);                                                       \
        return out;                                                                              \
    }
CG_UNARY_PARAM_OPS(UNARY_PARAM_OP_, ~)
#undef UNARY_PARAM_OP_

/* ------------------------------------------------ maximum, minimum */
static bool extremum_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    for (int i = 0; i < 2; i++)
        if (NEEDS(i) &&
            !(gin[i] = cg_k_maximum_backward(IN(i), IN(1 - i), g, n->op == CG_OP_MINIMUM)))
            return false;
    return true;
}
cg_tensor *cg_maximum(cg_tensor *a, cg_tensor *b)
{
    cg_tensor *in[2] = {a, b};
    return record(cg_k_maximum(a, b), CG_OP_MAXIMUM, 2, in, extremum_bw, NULL);
}
cg_tensor *cg_minimum(cg_tensor *a, cg_tensor *b)
{
    cg_tensor *in[2] = {a, b};
    return record(cg_k_minimum(a, b), CG_OP_MINIMUM, 2, in, extremum_bw, NULL);
}

/* ------------------------------------------------- gated activation */
static bool gated_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return cg_k_gated_backward(IN(0), IN(1), g, (cg_k_gate)n->p.i[0], NEEDS(0) ? &gin[0] : NULL,
                               NEEDS(1) ? &gin[1] : NULL);
}
static cg_tensor *gated(cg_tensor *a, cg_tensor *b, cg_k_gate act)
{
    cg_node *n;
    cg_tensor *in[2] = {a, b};
    cg_tensor *out = record(cg_k_gated(a, b, act), CG_OP_GATED, 2, in, gated_bw, &n);
    if (n)
        n->p.i[0] = act;
    return out;
}
cg_tensor *cg_swiglu(cg_tensor *a, cg_tensor *b) { return gated(a, b, CG_K_GATE_SILU); }
cg_tensor *cg_geglu(cg_tensor *a, cg_tensor *b) { return gated(a, b, CG_K_GATE_GELU); }
cg_tensor *cg_glu(cg_tensor *x, int dim)
{
    if (!x)
        return cg_error_null_input("glu"), NULL;
    if (x->ndim == 0) {
        cg_set_error("glu: a 0-d input has no dim to halve");
        return NULL;
    }
    const int d = cg_norm_dim("glu", dim, x->ndim);
    if (d < 0)
        return NULL;
    const int64_t h = x->shape[d] / 2;
    if (x->shape[d] % 2) {
        char s[96];
        cg_set_error("glu: the halved dim must be even, but dim %d of %s is %lld", dim,
                     cg_shape_str(x, s, sizeof s), (long long)x->shape[d]);
        return NULL;
    }
    cg_tensor *a = cg_narrow(x, d, 0, h), *b = a ? cg_narrow(x, d, h, h) : NULL;
    cg_tensor *y = b ? gated(b, a, CG_K_GATE_SIGMOID) : NULL; /* sigmoid(b) * a */
    cg_release_all(2, a, b);
    return y;
}
/* In bf16 precision the gate keeps h rounded to bf16 (keep_input_bf16,
 * above; the product that made h keeps that rounding as it writes h,
 * cg_affine_keep_bf16): half the bytes of a gated feed-forward's widest
 * activation, and the backward takes the derivatives at the rounded
 * values, widened a run at a time. */
static bool halves_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const cg_tensor *h = n->saved[0] ? n->saved[0] : IN(0);
    return (gin[0] = cg_k_gated_halves_backward(h, g, (cg_k_gate)n->p.i[0])) != NULL;
}
static cg_tensor *gated_halves(cg_tensor *h, cg_k_gate act)
{
    cg_node *n;
    cg_tensor *out = record(cg_k_gated_halves(h, act), CG_OP_GATED_HALVES, 1, &h, halves_bw, &n);
    if (n)
        n->p.i[0] = act;
    return keep_input_bf16(out, n, h);
}
cg_tensor *cg_swiglu_halves(cg_tensor *h) { return gated_halves(h, CG_K_GATE_SILU); }
cg_tensor *cg_geglu_halves(cg_tensor *h) { return gated_halves(h, CG_K_GATE_GELU); }

/* ------------------------------------------------------ rotary positions */
static bool rope_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    double theta;
    memcpy(&theta, &n->p.i[1], sizeof theta);
    return (gin[0] = cg_k_rope(g, n->p.i[0], theta, true)) != NULL;
}
cg_tensor *cg_rope(cg_tensor *x, int64_t start, double theta)
{
    cg_node *n;
    /* recorded: attention's node will keep the bf16 copy, made here */
    const bool rec = x && x->requires_grad && cg_grad_enabled();
    cg_tensor *out =
        record(rec ? cg_k_rope_keep_bf16(x, start, theta) : cg_k_rope(x, start, theta, false),
               CG_OP_ROPE, 1, &x, rope_bw, &n);
    if (n) { /* i[1] holds the double's bits (p.f shares i[0] and i[1]'s bytes) */
        n->p.i[0] = start;
        memcpy(&n->p.i[1], &theta, sizeof theta);
    }
    return out;
}

/* -------------------------------------------------------- triangles */
static bool triangle_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_k_triangle(g, n->p.i[0], n->op == CG_OP_TRIU)) != NULL;
}
static cg_tensor *triangle(cg_tensor *a, int64_t diagonal, bool upper)
{
    cg_node *n;
    cg_tensor *out = record(cg_k_triangle(a, diagonal, upper), upper ? CG_OP_TRIU : CG_OP_TRIL, 1,
                            &a, triangle_bw, &n);
    if (n)
        n->p.i[0] = diagonal;
    return out;
}
cg_tensor *cg_tril(cg_tensor *a, int64_t diagonal) { return triangle(a, diagonal, false); }
cg_tensor *cg_triu(cg_tensor *a, int64_t diagonal) { return triangle(a, diagonal, true); }

/* ----------------------------------------------------------- cumsum */
static bool cumsum_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_k_cumsum(g, (int)n->p.i[0], true)) != NULL; /* sum from the end */
}
cg_tensor *cg_cumsum(cg_tensor *a, int dim)
{
    cg_node *n;
    cg_tensor *out = record(cg_k_cumsum(a, dim, false), CG_OP_CUMSUM, 1, &a, cumsum_bw, &n);
    if (n)
        n->p.i[0] = cg_norm_dim("cumsum", dim, a->ndim > 0 ? a->ndim : 1);
    return out;
}

/* ------------------------------------------------------ topk, argmax */
cg_tensor *cg_pick_values(cg_tensor *a, int dim, const cg_tensor *idx)
{
    /* the values are a gather: its backward scatters the gradient back.
     * gather reads float32, so a bf16 or f16 input is gathered from its
     * float32 copy and the values rounded back to its dtype, both exact and
     * both differentiable (cg_to of a float32 input is the input itself) */
    if (!cg_dtype_is_float(a->dtype)) /* integers and bool: copied, exact (no gradient) */
        return a->ndim == 0 && idx->ndim == 1 ? cg_empty_dtype(a->dtype, 1, idx->shape)
                                              : cg_k_take_along_dim(a, dim, idx);
    int64_t m = cg_numel(idx);
    cg_tensor *src = a->ndim == 0 ? cg_reshape(a, 1, (int64_t[]){1}) : cg_retain(a);
    cg_tensor *gi = a->ndim == 0 ? cg_k_reshape(idx, 1, &m) : cg_retain((cg_tensor *)idx);
    cg_tensor *src32 = src && gi ? cg_to(src, CG_F32) : NULL;
    cg_tensor *v = src32 ? cg_gather(src32, a->ndim ? dim : 0, gi) : NULL;
    cg_tensor *v0 = v && a->ndim == 0 ? cg_reshape(v, idx->ndim, idx->shape) : cg_retain(v);
    cg_tensor *out = v0 ? cg_to(v0, a->dtype) : NULL;
    cg_release_all(5, src, gi, src32, v, v0);
    return out;
}

cg_tensor *cg_topk(cg_tensor *a, int64_t k, int dim, bool largest, cg_tensor **indices)
{
    if (indices)
        *indices = NULL;
    if (!a) {
        cg_error_null_input("cg_topk");
        return NULL;
    }
    cg_tensor *idx = cg_k_topk_indices(a, k, dim, largest);
    if (!idx)
        return NULL;
    cg_tensor *out = cg_pick_values(a, dim, idx); /* a 0-d a: 0-d values (k = 1) */
    if (out && indices)
        *indices = idx;
    else
        cg_release(idx);
    return out;
}

cg_tensor *cg_argmax(const cg_tensor *a, int dim, bool keepdim)
{
    return cg_k_argmax(a, dim, keepdim);
}
cg_tensor *cg_argmin(const cg_tensor *a, int dim, bool keepdim)
{
    return cg_k_argmin(a, dim, keepdim);
}

/* ------------------------------------------------------------ flatten */
cg_tensor *cg_flatten(cg_tensor *a, int start_dim, int end_dim)
{
    if (!a) {
        cg_error_null_input("cg_flatten");
        return NULL;
    }
    if (a->ndim == 0) { /* as torch.flatten: a 0-d tensor's dims are 0 and -1 */
        if ((start_dim != 0 && start_dim != -1) || (end_dim != 0 && end_dim != -1)) {
            cg_set_error("flatten: dims (%d, %d) of a 0-d tensor, expected 0 or -1", start_dim,
                         end_dim);
            return NULL;
        }
        return cg_reshape(a, CG_SHAPE(1));
    }
    const int s = cg_norm_dim("flatten", start_dim, a->ndim),
              e = s < 0 ? -1 : cg_norm_dim("flatten", end_dim, a->ndim);
    if (e < 0)
        return NULL;
    if (s > e) {
        cg_set_error("flatten: start_dim %d comes after end_dim %d (shape of %d dims)", start_dim,
                     end_dim, a->ndim);
        return NULL;
    }
    int64_t shape[CG_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < a->ndim; d++) {
        if (d > s && d <= e)
            shape[n - 1] *= a->shape[d];
        else
            shape[n++] = a->shape[d];
    }
    return cg_reshape(a, n, shape);
}

/* -------------------------------------- pad, flip, roll, repeat */
/* What the backwards of pad and roll read: count sizes or shifts (roll's
 * negated: its backward rolls back), then roll's dims (w, or none), kept
 * in the node's ctx (p.i[0]: count); false + error when out of memory */
static bool keep_list(cg_node *n, int count, const int64_t *v, const int *w)
{
    const bool negate = n->op == CG_OP_ROLL;
    int64_t *l = malloc((size_t)count * (sizeof *l + sizeof *w) + 1);
    if (!l) {
        cg_set_error("%s: out of memory", cg_node_name(n));
        return false;
    }
    for (int i = 0; i < count; i++)
        l[i] = negate ? -v[i] : v[i];
    if (w)
        memcpy(l + count, w, (size_t)count * sizeof *w);
    n->ctx = l;
    n->ctx_free = free;
    n->p.i[0] = count;
    return true;
}
static cg_tensor *kept_or_null(cg_tensor *out, bool ok)
{
    if (!ok)
        cg_release(out);
    return ok ? out : NULL;
}

static bool pad_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_k_pad_backward(g, IN(0)->ndim, IN(0)->shape, (int)n->p.i[0], n->ctx,
                                       (cg_pad_mode)n->p.i[1])) != NULL;
}
cg_tensor *cg_pad(cg_tensor *a, int n_pad, const int64_t *pad, cg_pad_mode mode, float value)
{
    cg_node *n;
    cg_tensor *out = record(cg_k_pad(a, n_pad, pad, mode, value), CG_OP_PAD, 1, &a, pad_bw, &n);
    if (!n)
        return out;
    n->p.i[1] = mode;
    return kept_or_null(out, keep_list(n, n_pad, pad, NULL));
}

static bool flip_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    int dims[CG_MAX_DIMS];
    for (int i = 0; i < n->p.i[0]; i++)
        dims[i] = (int)n->p.i[1 + i];
    return (gin[0] = cg_k_flip(g, (int)n->p.i[0], dims)) != NULL;
}
cg_tensor *cg_flip(cg_tensor *a, int ndims, const int *dims)
{
    cg_node *n;
    cg_tensor *out = record(cg_k_flip(a, ndims, dims), CG_OP_FLIP, 1, &a, flip_bw, &n);
    if (n) { /* ndims <= the dims of a: each named once */
        n->p.i[0] = ndims;
        for (int i = 0; i < ndims; i++)
            n->p.i[1 + i] = dims[i];
    }
    return out;
}

static bool roll_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const int count = (int)n->p.i[0];
    const int64_t *l = n->ctx;
    const int *dims = n->p.i[1] ? (const int *)(l + count) : NULL;
    return (gin[0] = cg_k_roll(g, count, l, dims)) != NULL;
}
cg_tensor *cg_roll(cg_tensor *a, int n_shifts, const int64_t *shifts, const int *dims)
{
    cg_node *n;
    cg_tensor *out = record(cg_k_roll(a, n_shifts, shifts, dims), CG_OP_ROLL, 1, &a, roll_bw, &n);
    if (n)
        n->p.i[1] = dims != NULL;
    return n ? kept_or_null(out, keep_list(n, n_shifts, shifts, dims)) : out;
}

static bool repeat_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_k_repeat_backward(g, IN(0)->ndim, IN(0)->shape)) != NULL;
}
cg_tensor *cg_repeat(cg_tensor *a, int n, const int64_t *sizes)
{
    return record(cg_k_repeat(a, n, sizes), CG_OP_REPEAT, 1, &a, repeat_bw, NULL);
}

/* ------------------------------------------------------------- copy_ */
bool cg_copy_(cg_tensor *dst, const cg_tensor *src)
{
    if (src && src->requires_grad && cg_grad_enabled()) {
        char b[96];
        cg_set_error("copy_: the source %s requires grad, and copy_ passes no gradient (dst would "
                     "be silently cut from the graph): copy cg_detach(src), copy under "
                     "cg_no_grad_begin(), or use cg_clone(src) for a differentiable copy",
                     cg_shape_str(src, b, sizeof b));
        return false;
    }
    return cg_check_no_history("copy_", dst) && cg_k_copy_(dst, src);
}
