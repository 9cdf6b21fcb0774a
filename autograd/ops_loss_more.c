/* The rest of torch.nn's losses (autograd/ops.h): poisson_nll_loss,
 * gaussian_nll_loss, soft_margin_loss, margin_ranking_loss,
 * hinge_embedding_loss, cosine_embedding_loss, triplet_margin_loss and
 * multilabel_soft_margin_loss made of the graph's ops as PyTorch 1.13
 * makes them (so their values and gradients are those ops'); and
 * multi_margin_loss and multilabel_margin_loss, a fused node each over
 * core/loss_margin.c's kernels. An op given NULL returns NULL and keeps
 * the first message, so each composition is one chain, checked once. */
#include <math.h>
#include <string.h>

#include "autograd/ops.h"
#include "autograd/ops_impl.h"
#include "core/ops.h"

#define PI_D 3.14159265358979323846

/* Every input given, else false + "<op>: input is NULL" */
static bool inputs_ok(const char *op, int n, cg_tensor *const *t)
{
    for (int i = 0; i < n; i++)
        if (!t[i]) {
            cg_error_null_input(op);
            return false;
        }
    return true;
}

/* r one of mean, sum, none; the inputs non-NULL and their shapes
 * broadcast together (the first nb of them), else an error naming op */
static bool args_ok(const char *op, int n, cg_tensor *const *t, int nb, cg_reduction r)
{
    if (!inputs_ok(op, n, t) || !cg_loss_reduction_ok(op, r, false))
        return false;
    int64_t shape[CG_MAX_DIMS], next[CG_MAX_DIMS];
    int nd = nb ? t[0]->ndim : 0;
    memcpy(shape, t[0]->shape, (size_t)nd * sizeof *shape);
    for (int i = 1; i < nb && nd >= 0; i++) {
        nd = cg_broadcast_shapes(op, nd, shape, t[i]->ndim, t[i]->shape, next);
        memcpy(shape, next, (size_t)(nd > 0 ? nd : 0) * sizeof *shape);
    }
    return nd >= 0;
}

/* l reduced by r, l released (NULL: NULL) */
static cg_tensor *reduced(cg_tensor *l, cg_reduction r)
{
    cg_tensor *out = l ? cg_loss_reduce(l, r) : NULL;
    cg_release(l);
    return out;
}

/* cond ? a : 0, the 0 of a's dtype (zeros_like's) */
static cg_tensor *where_or_zero(cg_tensor *cond, cg_tensor *a)
{
    cg_tensor *z = a ? cg_scalar(0.0f) : NULL;
    cg_tensor *zd = z && a->dtype != z->dtype ? cg_to(z, a->dtype) : cg_retain(z);
    cg_tensor *out = zd ? cg_where(cond, a, zd) : NULL;
    cg_release_all(2, z, zd);
    return out;
}

/* max(a, 0) with clamp_min's gradient (1 at 0), released a */
static cg_tensor *clamp_min0(cg_tensor *a)
{
    cg_tensor *out = a ? cg_clamp(a, 0.0f, INFINITY) : NULL;
    cg_release(a);
    return out;
}

/* The inputs of one number of dims, else PyTorch's refusal */
static bool same_dims(const char *op, const char *what, int n, cg_tensor *const *t)
{
    for (int i = 1; i < n; i++)
        if (t[i]->ndim != t[0]->ndim) {
            char s[3][96];
            for (int k = 0; k < n; k++)
                cg_shape_str(t[k], s[k], sizeof s[k]);
            cg_set_error("%s: all inputs should have the same number of dims (%s), got %s, %s "
                         "and %s (as PyTorch)",
                         op, what, s[0], s[1], s[2]);
            return false;
        }
    return true;
}

/* ------------------------------------------------------------ poisson */
cg_tensor *cg_poisson_nll_loss(cg_tensor *input, cg_tensor *target, bool log_input, bool full,
                               float eps, cg_reduction r)
{
    cg_tensor *in[2] = {input, target};
    if (!args_ok("poisson_nll_loss", 2, in, 2, r))
        return NULL;
    cg_tensor *a, *b, *l;
    if (log_input) { /* exp(input) - target input */
        a = cg_exp(input);
        b = cg_mul(target, input);
    } else { /* input - target log(input + eps) */
        cg_tensor *e = cg_adds(input, eps), *lg = cg_log(e);
        a = cg_retain(input);
        b = cg_mul(target, lg);
        cg_release_all(2, e, lg);
    }
    l = cg_sub(a, b);
    cg_release_all(2, a, b);
    if (full && l) { /* + (t log t - t + 0.5 log(2 pi t)), 0 where t <= 1 */
        cg_tensor *lt = cg_log(target), *tl = cg_mul(target, lt), *u = cg_sub(tl, target);
        cg_tensor *t2 = cg_muls(target, (float)(2.0 * PI_D)), *l2 = cg_log(t2);
        cg_tensor *h = cg_muls(l2, 0.5f), *st = cg_add(u, h);
        cg_tensor *m = cg_le_scalar(target, 1.0), *sm = m ? cg_masked_fill(st, m, 0.0f) : NULL;
        cg_tensor *lf = sm ? cg_add(l, sm) : NULL;
        cg_release_all(10, lt, tl, u, t2, l2, h, st, m, sm, l);
        l = lf;
    }
    return reduced(l, r);
}

/* ----------------------------------------------------------- gaussian */
/* var as PyTorch takes it: of input's shape, or input's without its last
 * dim (unsqueezed), or that with a last dim of 1; a new reference */
static cg_tensor *gaussian_var(const char *op, cg_tensor *input, cg_tensor *var)
{
    if (cg_same_shape(input, var))
        return cg_retain(var);
    const int ni = input->ndim, nv = var->ndim;
    const int pre = ni > 0 ? ni - 1 : 0; /* input.size()[:-1] */
    if (nv == pre && memcmp(input->shape, var->shape, (size_t)pre * sizeof(int64_t)) == 0)
        return cg_unsqueeze(var, nv);
    if (nv >= 1 && nv - 1 == pre && var->shape[nv - 1] == 1 &&
        memcmp(input->shape, var->shape, (size_t)pre * sizeof(int64_t)) == 0)
        return cg_retain(var);
    char a[96], b[96];
    cg_set_error("%s: var is of incorrect size: %s for input %s (expected the input's shape, "
                 "or it without its last dim or with a last dim of 1, as PyTorch)",
                 op, cg_shape_str(var, a, sizeof a), cg_shape_str(input, b, sizeof b));
    return NULL;
}

cg_tensor *cg_gaussian_nll_loss(cg_tensor *input, cg_tensor *target, cg_tensor *var, bool full,
                                float eps, cg_reduction r)
{
    const char *op = "gaussian_nll_loss";
    cg_tensor *in[3] = {input, target, var};
    if (!inputs_ok(op, 3, in) || !args_ok(op, 2, in, 2, CG_REDUCTION_MEAN))
        return NULL;
    cg_tensor *v = gaussian_var(op, input, var);
    if (!v || !cg_loss_reduction_ok(op, r, false) ||
        !cg_k_values_within(op, var, 0.0, INFINITY, true, "var has negative entry/entries")) {
        cg_release(v);
        return NULL;
    }
    /* max(var, eps), the gradient passed through: var + (clamp - var) detached */
    cg_tensor *vd = cg_detach(v), *vc = vd ? cg_clamp(vd, eps, INFINITY) : NULL;
    cg_tensor *dv = vc ? cg_sub(vc, vd) : NULL, *v2 = dv ? cg_add(v, dv) : NULL;
    cg_release_all(4, v, vd, vc, dv);
    cg_tensor *lv = cg_log(v2), *d = cg_sub(input, target), *d2 = d ? cg_pow(d, 2.0f) : NULL;
    cg_tensor *q = d2 ? cg_div(d2, v2) : NULL, *s = q && lv ? cg_add(lv, q) : NULL;
    cg_tensor *l = s ? cg_muls(s, 0.5f) : NULL;
    cg_release_all(6, v2, lv, d, d2, q, s);
    if (full && l) {
        cg_tensor *lf = cg_adds(l, (float)(0.5 * log(2.0 * PI_D)));
        cg_release(l);
        l = lf;
    }
    return reduced(l, r);
}

/* -------------------------------------------------------- soft margin */
cg_tensor *cg_soft_margin_loss(cg_tensor *x, cg_tensor *y, cg_reduction r)
{
    const char *op = "soft_margin_loss";
    cg_tensor *in[2] = {x, y};
    if (!args_ok(op, 2, in, 0, r) || !cg_loss_weight_arg(op, "target", y, x))
        return NULL;
    cg_tensor *nx = cg_neg(x), *z = nx ? cg_mul(nx, y) : NULL;
    cg_tensor *l = z ? cg_softplus(z, 1.0f, 20.0f) : NULL;
    cg_release_all(2, nx, z);
    return reduced(l, r);
}

/* ----------------------------------------------------- margin ranking */
cg_tensor *cg_margin_ranking_loss(cg_tensor *x1, cg_tensor *x2, cg_tensor *y, float margin,
                                  cg_reduction r)
{
    const char *op = "margin_ranking_loss";
    cg_tensor *in[3] = {x1, x2, y};
    if (!args_ok(op, 3, in, 0, r) || !same_dims(op, "input1, input2, target", 3, in) ||
        !args_ok(op, 3, in, 3, r))
        return NULL;
    cg_tensor *d = cg_sub(x1, x2), *ny = d ? cg_neg(y) : NULL, *t = ny ? cg_mul(ny, d) : NULL;
    cg_tensor *u = t ? cg_adds(t, margin) : NULL;
    cg_release_all(3, d, ny, t);
    return reduced(clamp_min0(u), r);
}

/* ---------------------------------------------------- hinge embedding */
cg_tensor *cg_hinge_embedding_loss(cg_tensor *x, cg_tensor *y, float margin, cg_reduction r)
{
    cg_tensor *in[2] = {x, y};
    if (!args_ok("hinge_embedding_loss", 2, in, 2, r))
        return NULL;
    cg_tensor *nx = cg_neg(x), *mx = nx ? cg_adds(nx, margin) : NULL, *mc = clamp_min0(mx);
    cg_tensor *c1 = mc ? cg_ne_scalar(y, 1.0) : NULL, *om = c1 ? where_or_zero(c1, mc) : NULL;
    cg_tensor *c2 = om ? cg_ne_scalar(y, -1.0) : NULL, *os = c2 ? where_or_zero(c2, x) : NULL;
    cg_tensor *l = os ? cg_add(om, os) : NULL;
    cg_release_all(6, nx, mc, c1, om, c2, os);
    return reduced(l, r);
}

/* --------------------------------------------------- cosine embedding */
/* sum over dim of a b (a, b) plus eps (eps < 0: none) */
static cg_tensor *dot_sum(cg_tensor *a, cg_tensor *b, int dim, float eps)
{
    cg_tensor *p = cg_mul(a, b), *s = p ? cg_sum(p, 1, &dim, false) : NULL;
    cg_tensor *out = s && eps >= 0.0f ? cg_adds(s, eps) : cg_retain(s);
    cg_release_all(2, p, s);
    return out;
}

cg_tensor *cg_cosine_embedding_loss(cg_tensor *x1, cg_tensor *x2, cg_tensor *y, float margin,
                                    cg_reduction r)
{
    const char *op = "cosine_embedding_loss";
    cg_tensor *in[3] = {x1, x2, y};
    if (!args_ok(op, 3, in, 0, r))
        return NULL;
    char a[96], b[96];
    const int td = y->ndim;
    if (td > 1 || x1->ndim != td + 1 || x2->ndim != td + 1) {
        if (td > 1)
            cg_set_error("%s: 0D or 1D target tensor expected, multi-target not supported (target "
                         "%s)",
                         op, cg_shape_str(y, a, sizeof a));
        else
            cg_set_error("%s: %dD target tensor expects %dD input tensors, but found inputs with "
                         "sizes %s and %s (as PyTorch)",
                         op, td, td + 1, cg_shape_str(x1, a, sizeof a),
                         cg_shape_str(x2, b, sizeof b));
        return NULL;
    }
    /* the rows of x1 and x2 broadcast, and then with y's */
    int64_t rows = td == 1 ? (x1->shape[0] == 1 ? x2->shape[0] : x1->shape[0]) : 1;
    if (!args_ok(op, 2, in, 2, r) || cg_broadcast_shapes(op, td, &rows, td, y->shape, &rows) < 0)
        return NULL;
    cg_tensor *ps = dot_sum(x1, x2, td, -1.0f), *m1 = dot_sum(x1, x1, td, 1e-12f);
    cg_tensor *m2 = dot_sum(x2, x2, td, 1e-12f), *mm = m1 && m2 ? cg_mul(m1, m2) : NULL;
    cg_tensor *den = mm ? cg_sqrt(mm) : NULL, *cs = den && ps ? cg_div(ps, den) : NULL;
    cg_release_all(5, ps, m1, m2, mm, den);
    cg_tensor *nc = cs ? cg_neg(cs) : NULL, *pos = nc ? cg_adds(nc, 1.0f) : NULL;
    cg_tensor *neg = clamp_min0(cs ? cg_adds(cs, -margin) : NULL);
    cg_tensor *e1 = neg ? cg_eq_scalar(y, 1.0) : NULL, *op1 = e1 ? where_or_zero(e1, pos) : NULL;
    cg_tensor *e2 = op1 ? cg_eq_scalar(y, -1.0) : NULL, *op2 = e2 ? where_or_zero(e2, neg) : NULL;
    cg_tensor *l = op2 ? cg_add(op1, op2) : NULL;
    cg_release_all(8, cs, nc, pos, neg, e1, op1, e2, op2);
    return reduced(l, r);
}

/* ----------------------------------------------------- triplet margin */
/* F.pairwise_distance(u, v, p, eps) over the last dim (autograd/ops_dist.c) */
static cg_tensor *pairwise(cg_tensor *u, cg_tensor *v, float p, float eps)
{
    return cg_pairwise_distance(u, v, p, eps, false);
}

cg_tensor *cg_triplet_margin_loss(cg_tensor *a, cg_tensor *pos, cg_tensor *neg, float margin,
                                  float p, float eps, bool swap, cg_reduction r)
{
    const char *op = "triplet_margin_loss";
    cg_tensor *in[3] = {a, pos, neg};
    if (!args_ok(op, 3, in, 0, r) || !same_dims(op, "anchor, positive, negative", 3, in) ||
        !args_ok(op, 3, in, 3, r))
        return NULL;
    if (!(p > 0.0f) || isinf(p)) {
        cg_set_error("%s: p is %g, expected a finite norm > 0", op, (double)p);
        return NULL;
    }
    cg_tensor *dp = pairwise(a, pos, p, eps), *dn = dp ? pairwise(a, neg, p, eps) : NULL;
    if (swap && dn) {
        cg_tensor *ds = pairwise(pos, neg, p, eps), *m = ds ? cg_minimum(dn, ds) : NULL;
        cg_release_all(2, dn, ds);
        dn = m;
    }
    cg_tensor *u = dp && dn ? cg_adds(dp, margin) : NULL, *d = u ? cg_sub(u, dn) : NULL;
    cg_release_all(3, dp, dn, u);
    return reduced(clamp_min0(d), r);
}

/* ---------------------------------------------- multilabel soft margin */
cg_tensor *cg_multilabel_soft_margin_loss(cg_tensor *x, cg_tensor *y, cg_tensor *weight,
                                          cg_reduction r)
{
    const char *op = "multilabel_soft_margin_loss";
    cg_tensor *in[3] = {x, y, weight};
    if (!args_ok(op, 2, in, weight ? 3 : 2, r))
        return NULL;
    if (x->ndim == 0) {
        cg_set_error("%s: input is 0-d, expected a class dim (as PyTorch)", op);
        return NULL;
    }
    cg_tensor *ls = cg_logsigmoid(x), *a = ls ? cg_mul(y, ls) : NULL;
    cg_tensor *ny = a ? cg_neg(y) : NULL, *y1 = ny ? cg_adds(ny, 1.0f) : NULL;
    cg_tensor *nx = y1 ? cg_neg(x) : NULL, *ln = nx ? cg_logsigmoid(nx) : NULL;
    cg_tensor *b = ln ? cg_mul(y1, ln) : NULL, *s = b ? cg_add(a, b) : NULL;
    cg_tensor *l = s ? cg_neg(s) : NULL;
    cg_release_all(8, ls, a, ny, y1, nx, ln, b, s);
    if (weight && l) {
        cg_tensor *lw = cg_mul(l, weight);
        cg_release(l);
        l = lw;
    }
    /* summed over the class dim (kept, so that the division by a float32
     * 0-d keeps l's dtype) and divided by its size */
    int dim = x->ndim - 1;
    cg_tensor *c = l ? cg_scalar((float)x->shape[dim]) : NULL;
    cg_tensor *sm = c ? cg_sum(l, 1, &dim, true) : NULL, *q = sm ? cg_div(sm, c) : NULL;
    cg_tensor *rows = q ? cg_squeeze(q, -1) : NULL;
    cg_release_all(4, l, c, sm, q);
    return reduced(rows, r);
}

/* ------------------------------------------ multi_margin, multilabel */
/* saved[0] the target, saved[1] the weight (when p.i[3]); p.f[0] margin,
 * p.i[1] r, p.i[2] p */
static bool multi_margin_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    gin[0] =
        cg_k_multi_margin_loss_backward(n->inputs[0], n->saved[0], (int)n->p.i[2], n->p.f[0],
                                        n->p.i[3] ? n->saved[1] : NULL, (cg_reduction)n->p.i[1], g);
    return gin[0] != NULL;
}

cg_tensor *cg_multi_margin_loss(cg_tensor *x, const cg_tensor *target, int p, float margin,
                                const cg_tensor *weight, cg_reduction r)
{
    cg_node *n;
    cg_tensor *out = cg_recorded(cg_k_multi_margin_loss(x, target, p, margin, weight, r),
                                 CG_OP_MULTI_MARGIN_LOSS, 1, &x, multi_margin_bw, &n);
    if (n && (cg_node_save(n, (cg_tensor *)target) < 0 ||
              (weight && cg_node_save(n, (cg_tensor *)weight) < 0))) {
        cg_release(out);
        return NULL;
    }
    if (n) { /* f[0] lies in i[0] */
        n->p.f[0] = margin;
        n->p.i[1] = r;
        n->p.i[2] = p;
        n->p.i[3] = weight != NULL;
    }
    return out;
}

static bool multilabel_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    gin[0] =
        cg_k_multilabel_margin_loss_backward(n->inputs[0], n->saved[0], (cg_reduction)n->p.i[1], g);
    return gin[0] != NULL;
}

cg_tensor *cg_multilabel_margin_loss(cg_tensor *x, const cg_tensor *target, cg_reduction r)
{
    cg_node *n;
    cg_tensor *out = cg_recorded(cg_k_multilabel_margin_loss(x, target, r),
                                 CG_OP_MULTILABEL_MARGIN_LOSS, 1, &x, multilabel_bw, &n);
    if (n && cg_node_save(n, (cg_tensor *)target) < 0) {
        cg_release(out);
        return NULL;
    }
    if (n)
        n->p.i[1] = r;
    return out;
}

/* ---------------------------------------------------------------- ctc */
/* saved: targets, input_lengths, target_lengths, the losses (an alias of
 * the output), log_alpha; p.i[0] blank, p.i[1] zero_infinity */
static bool ctc_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    gin[0] = cg_k_ctc_loss_backward(g, n->inputs[0], n->saved[0], n->saved[1], n->saved[2],
                                    n->p.i[0], n->saved[3], n->saved[4], n->p.i[1] != 0);
    return gin[0] != NULL;
}

/* The per-sample losses, a node recorded over log_probs */
static cg_tensor *ctc_node(cg_tensor *lp, const cg_tensor *targets, const cg_tensor *il,
                           const cg_tensor *tl, int64_t blank, bool zero_infinity)
{
    cg_node *n;
    cg_tensor *la = NULL;
    cg_tensor *out = cg_recorded(cg_k_ctc_loss(lp, targets, il, tl, blank, &la), CG_OP_CTC_LOSS, 1,
                                 &lp, ctc_bw, &n);
    if (n) { /* the parameters first: a failed save frees n with out */
        n->p.i[0] = blank;
        n->p.i[1] = zero_infinity;
        cg_tensor *al = cg_alias(out);
        const cg_tensor *keep[5] = {targets, il, tl, al, la};
        for (int k = 0; k < 5 && out; k++)
            if (!keep[k] || cg_node_save(n, (cg_tensor *)keep[k]) < 0) {
                cg_release(out);
                out = NULL;
            }
        cg_release(al);
    }
    cg_release(la);
    return out;
}

/* max(target_lengths, 1) as float32 of l's shape (the loss of each) */
static cg_tensor *ctc_divisor(const cg_tensor *l, const cg_tensor *tl)
{
    cg_tensor *tc = cg_k_contiguous(tl), *d = tc ? cg_empty(l->ndim, l->shape) : NULL;
    for (int64_t i = 0, n = d ? cg_numel(d) : 0; i < n; i++) {
        const int64_t v = cg_data_i64(tc)[i];
        cg_data(d)[i] = (float)(v > 1 ? v : 1);
    }
    cg_release(tc);
    return d;
}

cg_tensor *cg_ctc_loss(cg_tensor *log_probs, const cg_tensor *targets,
                       const cg_tensor *input_lengths, const cg_tensor *target_lengths,
                       int64_t blank, cg_reduction r, bool zero_infinity)
{
    if (!cg_loss_reduction_ok("ctc_loss", r, false))
        return NULL;
    cg_tensor *l =
        ctc_node(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity);
    if (zero_infinity && l) { /* PyTorch's where(l == inf, 0, l) */
        cg_tensor *inf = cg_eq_scalar(l, INFINITY), *z = inf ? cg_masked_fill(l, inf, 0.0f) : NULL;
        cg_release_all(2, l, inf);
        l = z;
    }
    if (r == CG_REDUCTION_MEAN && l) { /* each over its target length, then the mean */
        cg_tensor *d = ctc_divisor(l, target_lengths), *q = d ? cg_div(l, d) : NULL;
        cg_release_all(2, l, d);
        l = q;
    }
    return reduced(l, r);
}
