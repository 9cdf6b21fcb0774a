/* Differentiable nn building blocks with fused kernels: softmax,
 * log-softmax, cross-entropy, layer/RMS norm, dropout, concat and stack,
 * index select (embeddings), gather, and index_add / scatter_add (their
 * backwards). Forward and backward side by side. */
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "autograd/ops_impl.h"
#include "core/ops.h"

#define NEEDS(i) cg_node_needs_grad(n, (i))
#define IN(i) (n->inputs[(i)])

static bool save_alias(cg_node *n, cg_tensor *t)
{
    cg_tensor *al = cg_alias(t);
    bool ok = al && cg_node_save(n, al) >= 0;
    cg_release(al);
    return ok;
}

/* ----------------------------------------------------------- softmax */
static bool softmax_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_k_softmax_backward(n->saved[0], g, (int)n->p.i[0])) != NULL;
}
static bool log_softmax_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_k_log_softmax_backward(n->saved[0], g, (int)n->p.i[0])) != NULL;
}
static cg_tensor *softmax_like(cg_tensor *a, int dim, bool log)
{
    cg_tensor *out = log ? cg_k_log_softmax(a, dim) : cg_k_softmax(a, dim);
    if (!out)
        return NULL;
    cg_node *n = cg_record(out, log ? CG_OP_LOG_SOFTMAX : CG_OP_SOFTMAX, 1, &a,
                           log ? log_softmax_bw : softmax_bw);
    if (cg_record_failed(n, 1, &a)) {
        cg_release(out);
        return NULL;
    }
    if (n) {
        n->p.i[0] = dim;
        if (!save_alias(n, out)) {
            cg_release(out);
            return NULL;
        }
    }
    return out;
}
cg_tensor *cg_softmax(cg_tensor *a, int dim) { return softmax_like(a, dim, false); }
cg_tensor *cg_log_softmax(cg_tensor *a, int dim) { return softmax_like(a, dim, true); }

/* ------------------------------------------ cross-entropy, nll_loss */
/* The class losses' inputs as the kernels take them: x [..., C] viewed as
 * [N, C] and targets (int64, x's shape without the class dim) as [N]. */
static bool class_loss_args(const char *op, cg_tensor *x, const cg_tensor *targets, cg_tensor **x2,
                            cg_tensor **t1)
{
    *x2 = *t1 = NULL;
    if (!x) {
        cg_error_null_input(op);
        return false;
    }
    if (!cg_check_dtype(op, "targets", targets, CG_I64))
        return false;
    if (x->ndim < 1) {
        cg_set_error("%s: need inputs [..., C] with a class dim (got a scalar)", op);
        return false;
    }
    bool ok = targets->ndim == x->ndim - 1;
    for (int i = 0; ok && i < targets->ndim; i++)
        ok = targets->shape[i] == x->shape[i];
    if (!ok) {
        /* the shape wanted, and PyTorch's layout named: F.cross_entropy
         * and F.nll_loss take the class dim at 1 ([B, C, T] against
         * targets [B, T]), here it is the last */
        bool torch_layout = x->ndim >= 3 && targets->ndim == x->ndim - 1;
        for (int i = 0; torch_layout && i < targets->ndim; i++)
            torch_layout = targets->shape[i] == x->shape[i < 1 ? i : i + 1];
        char a[96], b[96], c[96];
        cg_set_error("%s: argument 'targets' has shape %s, expected the input's %s without its "
                     "class dim (the last): %s%s",
                     op, cg_shape_str(targets, a, sizeof a), cg_shape_str(x, b, sizeof b),
                     cg_shape_str_n(x->ndim - 1, x->shape, c, sizeof c),
                     torch_layout ? "; the targets fit a class dim at 1, PyTorch's layout "
                                    "([B, C, T]): here it goes last (cg_transpose(x, 1, 2) for "
                                    "3 dims, else cg_permute)"
                                  : "");
        return false;
    }
    int64_t C = x->shape[x->ndim - 1];
    int64_t N = cg_numel(targets);
    *x2 = cg_k_reshape(x, 2, (int64_t[]){N, C});
    *t1 = *x2 ? cg_k_reshape(targets, 1, &N) : NULL;
    if (!*t1) {
        cg_release(*x2);
        *x2 = NULL;
        return false;
    }
    return true;
}

/* The class losses' upstream gradient as the kernels take it: a scalar,
 * or reduction none's of the targets' shape as [N] */
static cg_tensor *class_grad(const cg_tensor *g, cg_reduction r)
{
    int64_t N = cg_numel(g);
    return r == CG_REDUCTION_NONE ? cg_k_reshape(g, 1, &N) : cg_retain((cg_tensor *)g);
}

/* A class loss of reduction none ([N]) in the targets' shape (out is
 * released); a scalar as it is */
static cg_tensor *rows_shaped(cg_tensor *out, const cg_tensor *targets)
{
    if (!out || out->ndim == 0)
        return out;
    cg_tensor *v = cg_k_reshape(out, targets->ndim, targets->shape);
    cg_release(out);
    return v;
}

/* The class weights a class loss saved (p.i[slot]: their saved slot, -1
 * without), or NULL */
static const cg_tensor *saved_weight(const cg_node *n, int slot)
{
    return n->p.i[slot] >= 0 ? n->saved[n->p.i[slot]] : NULL;
}

/* Save the class weights w (NULL: none) into p.i[slot]; false when saving
 * failed */
static bool save_weight(cg_node *n, const cg_tensor *w, int slot)
{
    n->p.i[slot] = w ? cg_node_save(n, (cg_tensor *)w) : -1;
    return !w || n->p.i[slot] >= 0;
}

/* saved[0]: the targets [N] (the backward is refused if they were written
 * in place since, as PyTorch refuses it); saved[1]: each row's lse;
 * saved[2]: the gradient for g = 1 (mean and sum), computed by the forward
 * while each row was in cache. The first backward with g = 1 (the loss as
 * the graph's end) takes it over, so that it dies once used; any other g,
 * or a second backward through a retained graph, computes the rows again
 * (the same bits: one expression, core/loss.c). p.i[2]: the reduction;
 * p.i[3]: the saved slot of the class weights (-1: none). */
static bool ce_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    cg_tensor *logits = IN(0);
    cg_tensor *d = NULL;
    const cg_reduction r = (cg_reduction)n->p.i[2];
    if (n->saved[2] && cg_item(g) == 1.0f) {
        d = cg_retain(n->saved[2]);
        cg_release_held(n->saved[2]);
        n->saved[2] = NULL;
    } else {
        int64_t C = logits->shape[logits->ndim - 1];
        int64_t N = C ? cg_numel(logits) / C : 0;
        cg_tensor *l2 = cg_k_reshape(logits, 2, (int64_t[]){N, C}), *g1 = class_grad(g, r);
        d = l2 && g1
                ? cg_k_cross_entropy_backward_weighted(l2, n->saved[0], saved_weight(n, 3),
                                                       n->p.i[0], n->p.f[2], r, n->saved[1], g1)
                : NULL;
        cg_release_all(2, l2, g1);
    }
    if (!d)
        return false;
    gin[0] = cg_k_reshape(d, logits->ndim, logits->shape);
    cg_release(d);
    return gin[0] != NULL;
}

cg_tensor *cg_cross_entropy(cg_tensor *logits, const cg_tensor *targets, int64_t ignore_index,
                            float label_smoothing, cg_reduction r)
{
    return cg_cross_entropy_weighted(logits, targets, NULL, ignore_index, label_smoothing, r);
}

cg_tensor *cg_cross_entropy_weighted(cg_tensor *logits, const cg_tensor *targets,
                                     const cg_tensor *weight, int64_t ignore_index,
                                     float label_smoothing, cg_reduction r)
{
    cg_tensor *l2, *t1;
    if (!class_loss_args("cross_entropy", logits, targets, &l2, &t1))
        return NULL;
    cg_tensor *lse = NULL, *d = NULL;
    /* none: the gradient waits for its upstream rows */
    bool grad = cg_grad_enabled() && logits->requires_grad && r != CG_REDUCTION_NONE;
    cg_tensor *out =
        rows_shaped(cg_k_cross_entropy_weighted(l2, t1, weight, ignore_index, label_smoothing, r,
                                                &lse, grad ? &d : NULL),
                    targets);
    cg_release(l2);
    cg_node *n = out ? cg_record(out, CG_OP_CROSS_ENTROPY, 1, &logits, ce_bw) : NULL;
    if (out && (cg_record_failed(n, 1, &logits) ||
                (n && (cg_node_save(n, t1) < 0 || cg_node_save(n, lse) < 0 ||
                       (d && cg_node_save(n, d) < 0) || !save_weight(n, weight, 3))))) {
        cg_release(out);
        out = NULL;
    }
    if (n) { /* p is a union: f[2] lies beside i[0], in i[1]'s low half */
        n->p.i[0] = ignore_index;
        n->p.f[2] = label_smoothing;
        n->p.i[2] = r;
    }
    cg_release_all(3, lse, t1, d);
    return out;
}

/* ----------------------------------- linear + cross-entropy, fused */
/* inputs: h [..., d], w [V, d], b [V] (may be absent); saved[0]: the
 * targets [N]; p: i[0] ignore_index, f[2] and f[3] (in i[1]) the label
 * smoothing and the g the forward computed the gradients for, i[2] the
 * chunk, i[3 + k] the saved slot of input k's gradient (-1: none), i[6]
 * the reduction. Reduction none's upstream gradient is a tensor, one g a
 * row: its forward computes no gradient, and its backward computes the
 * chunks with each row's g (exact or not: nothing to scale after). The
 * first backward takes the forward's gradients over, so that they die
 * once used; a second backward through a retained graph computes them
 * again. With CG_LCE_EXACT the forward computed them for g = grad_scale,
 * and a backward bringing another g computes them again with the logits'
 * gradient scaled by that g, as the unfused loss scales it (its bits).
 * With fixed chunks the forward computed them for g = 1, and a backward
 * scales them by its g. */
static bool lce_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    int ni = n->n_inputs;
    const cg_reduction r = (cg_reduction)n->p.i[6];
    const bool none = r == CG_REDUCTION_NONE;
    float gv = none ? 1.0f : cg_item(g);
    bool exact = n->p.i[2] == CG_LCE_EXACT;
    /* recompute with g unless g has the bits of the forward's (-0 is not 0) */
    bool again = exact && memcmp(&gv, &n->p.f[3], sizeof gv) != 0;
    cg_tensor *gr[3] = {NULL, NULL, NULL};
    bool have = !again;
    for (int k = 0; k < ni; k++)
        have = have && (!NEEDS(k) || (n->p.i[3 + k] >= 0 && n->saved[n->p.i[3 + k]]));
    for (int k = 0; k < ni; k++) {
        int64_t slot = n->p.i[3 + k];
        if (slot < 0 || !n->saved[slot])
            continue;
        if (have && NEEDS(k))
            gr[k] = cg_retain(n->saved[slot]);
        cg_release_held(n->saved[slot]); /* used, or not of use */
        n->saved[slot] = NULL;
    }
    if (!have) {
        cg_tensor *h = IN(0);
        int64_t d = h->shape[h->ndim - 1], N = d ? cg_numel(h) / d : 0;
        cg_tensor *h2 = cg_k_reshape(h, 2, (int64_t[]){N, d});
        cg_tensor *g1 = none ? class_grad(g, r) : NULL;
        cg_tensor *l =
            h2 && (g1 || !none)
                ? cg_k_linear_cross_entropy(h2, IN(1), ni > 2 ? IN(2) : NULL, n->saved[0],
                                            n->p.i[0], n->p.f[2], r, n->p.i[2], exact ? gv : 1.0f,
                                            g1, NEEDS(0) ? &gr[0] : NULL, NEEDS(1) ? &gr[1] : NULL,
                                            ni > 2 && NEEDS(2) ? &gr[2] : NULL)
                : NULL;
        cg_release_all(2, h2, g1);
        if (!l)
            return false;
        cg_release(l);
    }
    bool ok = true;
    for (int k = 0; k < ni; k++) {
        if (!gr[k])
            continue;
        cg_tensor *t = exact || none || gv == 1.0f ? cg_retain(gr[k]) : cg_k_muls(gr[k], gv);
        gin[k] = t && k == 0 ? cg_k_reshape(t, IN(0)->ndim, IN(0)->shape) : t;
        if (k == 0)
            cg_release(t);
        ok = ok && gin[k];
        cg_release(gr[k]);
    }
    return ok;
}

cg_tensor *cg_linear_cross_entropy(cg_tensor *h, cg_tensor *w, cg_tensor *b,
                                   const cg_tensor *targets, int64_t ignore_index,
                                   float label_smoothing, cg_reduction r, int64_t chunk,
                                   float grad_scale)
{
    if (!w) {
        cg_error_null_input("linear_cross_entropy");
        return NULL;
    }
    cg_tensor *h2, *t1;
    if (!class_loss_args("linear_cross_entropy", h, targets, &h2, &t1))
        return NULL;
    /* none: the gradients wait for their upstream rows */
    bool gm = cg_grad_enabled() && r != CG_REDUCTION_NONE;
    float g = chunk == CG_LCE_EXACT ? grad_scale : 1.0f; /* what the gradients are for */
    cg_tensor *gr[3] = {NULL, NULL, NULL};
    cg_tensor *out =
        rows_shaped(cg_k_linear_cross_entropy(h2, w, b, t1, ignore_index, label_smoothing, r, chunk,
                                              g, NULL, gm && h->requires_grad ? &gr[0] : NULL,
                                              gm && w->requires_grad ? &gr[1] : NULL,
                                              b && gm && b->requires_grad ? &gr[2] : NULL),
                    targets);
    cg_release(h2);
    cg_tensor *in[3] = {h, w, b};
    int ni = b ? 3 : 2;
    cg_node *n = out ? cg_record(out, CG_OP_LINEAR_CROSS_ENTROPY, ni, in, lce_bw) : NULL;
    bool ok = out && !cg_record_failed(n, ni, in) && (!n || cg_node_save(n, t1) >= 0);
    if (ok && n) {
        n->p.i[0] = ignore_index;
        n->p.f[2] = label_smoothing; /* p is a union: f[2] and f[3] lie in i[1] */
        n->p.f[3] = g;
        n->p.i[2] = chunk;
        n->p.i[6] = r;
        for (int k = 0; k < 3; k++) {
            n->p.i[3 + k] = gr[k] ? cg_node_save(n, gr[k]) : -1;
            ok = ok && (!gr[k] || n->p.i[3 + k] >= 0);
        }
    }
    if (!ok) {
        cg_release(out);
        out = NULL;
    }
    cg_release_all(4, t1, gr[0], gr[1], gr[2]);
    return out;
}

/* saved[0]: the log-probabilities as [N, C]; saved[1]: the targets [N];
 * p.i[2]: the saved slot of the class weights (-1: none). */
static bool nll_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    cg_tensor *lp = IN(0);
    const cg_reduction r = (cg_reduction)n->p.i[1];
    cg_tensor *g1 = class_grad(g, r);
    cg_tensor *d = g1 ? cg_k_nll_loss_backward_weighted(n->saved[0], n->saved[1],
                                                        saved_weight(n, 2), n->p.i[0], r, g1)
                      : NULL;
    gin[0] = d ? cg_k_reshape(d, lp->ndim, lp->shape) : NULL;
    cg_release_all(2, g1, d);
    return gin[0] != NULL;
}

cg_tensor *cg_nll_loss(cg_tensor *logp, const cg_tensor *targets, int64_t ignore_index,
                       cg_reduction r)
{
    return cg_nll_loss_weighted(logp, targets, NULL, ignore_index, r);
}

cg_tensor *cg_nll_loss_weighted(cg_tensor *logp, const cg_tensor *targets, const cg_tensor *weight,
                                int64_t ignore_index, cg_reduction r)
{
    cg_tensor *l2, *t1;
    if (!class_loss_args("nll_loss", logp, targets, &l2, &t1))
        return NULL;
    cg_tensor *out = rows_shaped(cg_k_nll_loss_weighted(l2, t1, weight, ignore_index, r), targets);
    cg_node *n = out ? cg_record(out, CG_OP_NLL_LOSS, 1, &logp, nll_bw) : NULL;
    if (out && (cg_record_failed(n, 1, &logp) ||
                (n && (cg_node_save(n, l2) < 0 || cg_node_save(n, t1) < 0 ||
                       !save_weight(n, weight, 2))))) {
        cg_release(out);
        out = NULL;
    }
    if (n) {
        n->p.i[0] = ignore_index;
        n->p.i[1] = r;
    }
    cg_release_all(2, l2, t1);
    return out;
}

/* -------------------------------------------------------------- norms */
/* Whether an op of these inputs records a node (cg_record's test). */
static bool records(int n, cg_tensor *const *in)
{
    bool any = false;
    for (int i = 0; i < n; i++)
        any |= in[i] && in[i]->requires_grad;
    return any && cg_grad_enabled();
}

/* The four norms: layer norm (inputs x, w, b) and RMS norm (x, w), and the
 * same of x + y (x, y, w[, b]); w and b may be NULL. saved[0] is rstd;
 * then, in fp32, the mean (layer norms) and the sum x + y (the kernel's,
 * as the norm read it: one tensor kept where x and y were two, the same
 * bits); the norm of x reads x itself. The gradient of x + y goes to both
 * x and y, one tensor, as add's backward.
 *
 * In bf16 precision a recorded norm keeps instead x-hat rounded to bf16
 * (saved[1], cg_k_norm's xhat) and reads nothing else of its input: half
 * the bytes, and the backward's terms taken at the rounded x-hat
 * (docs/bf16.md, "Saved in bf16"). Its output is computed from that
 * rounded x-hat, and the output's bf16 copy is made as the rows are
 * written: the next products read it. The linear layers among them do
 * not keep it for their weight gradients: they ask the norm's node for it
 * again (cg_norm_out_bf16), which makes it from x-hat, w and b (saved[2]
 * when there is a bias, p.i[0] its slot + 1), keeps it for the rest of
 * its users (p.i[1]: its slot + 1) and lets it go in its own backward.
 * p.i[2]: the output's version as the norm left it (a later write makes
 * the copy another one). */
static bool norm_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin);
/* Whether a norm op adds its two inputs first (add_layer_norm,
 * add_rms_norm), and whether it is an RMS norm */
static bool norm_adds(cg_op op) { return op == CG_OP_ADD_LAYER_NORM || op == CG_OP_ADD_RMS_NORM; }
static bool norm_rms(cg_op op) { return op == CG_OP_RMS_NORM || op == CG_OP_ADD_RMS_NORM; }
/* The norm's weight input; the bias follows it */
static int norm_wi(const cg_node *n) { return norm_adds(n->op) ? 2 : 1; }
static bool remakes(const cg_node *n)
{
    return n && !n->freed && n->backward == norm_bw && n->saved[1] && n->saved[1]->dtype == CG_BF16;
}
bool cg_norm_remakes_bf16(const cg_tensor *x)
{
    return x && remakes(x->node) && cg_version(x) == (uint64_t)x->node->p.i[2];
}
const cg_tensor *cg_norm_out_bf16(cg_node *n)
{
    if (!remakes(n)) {
        cg_set_error("%s: no bf16 x-hat to make the output's bf16 copy from",
                     n ? cg_node_name(n) : "norm");
        return NULL;
    }
    if (n->p.i[1])
        return n->saved[n->p.i[1] - 1];
    const cg_tensor *b = n->p.i[0] ? n->saved[n->p.i[0] - 1] : NULL;
    cg_tensor *y16 = cg_k_norm_out_bf16(n->saved[1], IN(norm_wi(n)), b);
    const int slot = y16 ? cg_node_save(n, y16) : -1;
    cg_release(y16);
    if (slot < 0)
        return NULL;
    n->p.i[1] = slot + 1;
    return n->saved[slot];
}
static bool norm_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const bool add = norm_adds(n->op), rms = norm_rms(n->op);
    const int wi = norm_wi(n);
    const cg_tensor *rstd = n->saved[0], *s1 = n->saved[1];
    cg_tensor *dx = NULL, *dw = NULL, *db = NULL;
    cg_tensor **pdx = NEEDS(0) || (add && NEEDS(1)) ? &dx : NULL;
    cg_tensor **pdw = NEEDS(wi) ? &dw : NULL, **pdb = !rms && NEEDS(wi + 1) ? &db : NULL;
    /* dx added into the gradient x already has (not with add: one dx
     * goes to both inputs) */
    cg_tensor *acc = add ? NULL : cg_grad_acc_f32(n, 0);
    bool ok;
    if (s1 && s1->dtype == CG_BF16)
        ok = cg_k_norm_backward_xhat(rms, s1, IN(wi), rstd, g, acc, pdx, pdw, pdb);
    else {
        const cg_tensor *x = add ? n->saved[rms ? 1 : 2] : IN(0);
        ok = rms ? cg_k_rms_norm_backward(x, IN(wi), rstd, g, acc, pdx, pdw)
                 : cg_k_layer_norm_backward(x, IN(wi), s1, rstd, g, acc, pdx, pdw, pdb);
    }
    gin[0] = NEEDS(0) ? cg_retain(dx) : NULL;
    if (add)
        gin[1] = NEEDS(1) ? cg_retain(dx) : NULL;
    cg_release(dx);
    gin[wi] = dw;
    if (!rms)
        gin[wi + 1] = db;
    if (n->p.i[1]) { /* the output's copy made again: its users are done */
        cg_release_held(n->saved[n->p.i[1] - 1]);
        n->saved[n->p.i[1] - 1] = NULL;
        n->p.i[1] = 0;
    }
    return ok;
}
static cg_tensor *norm_op(cg_op op, cg_tensor *x, cg_tensor *y, cg_tensor *w, cg_tensor *b,
                          float eps)
{
    const bool add = norm_adds(op), rms = norm_rms(op);
    cg_tensor *in[4];
    int nin = 0;
    in[nin++] = x;
    if (add)
        in[nin++] = y;
    in[nin++] = w;
    if (!rms)
        in[nin++] = b;
    const bool rec = records(nin, in);
    /* x-hat kept in bf16 for a float32 input; a reduced-precision one is
     * kept as it is (its output is the products' rounded operand already) */
    const bool bf16 = rec && cg_get_matmul_precision() == CG_PRECISION_BF16 && x &&
                      x->dtype == CG_F32 && (!y || y->dtype == CG_F32);
    cg_tensor *mean = NULL, *rstd = NULL, *sum = NULL, *xhat = NULL;
    cg_tensor *out = cg_k_norm(rms, x, y, w, b, eps, bf16, rec && !bf16 && !rms ? &mean : NULL,
                               &rstd, rec && !bf16 && add ? &sum : NULL, bf16 ? &xhat : NULL);
    if (out) {
        cg_node *n = cg_record(out, op, nin, in, norm_bw);
        bool ok = !cg_record_failed(n, nin, in);
        if (ok && n) {
            ok = cg_node_save(n, rstd) >= 0;
            if (bf16)
                ok = ok && cg_node_save(n, xhat) >= 0;
            if (bf16 && b) { /* for the output's copy (cg_norm_out_bf16) */
                const int s = ok ? cg_node_save(n, b) : -1;
                ok = s >= 0;
                n->p.i[0] = s + 1;
            }
            if (bf16)
                n->p.i[2] = (int64_t)cg_version(out);
            if (!bf16 && !rms)
                ok = ok && cg_node_save(n, mean) >= 0;
            if (!bf16 && add)
                ok = ok && cg_node_save(n, sum) >= 0;
            if (ok && bf16 && !add)
                cg_node_set_reads(n, 0, false);
            memcpy(&n->p.i[3], &eps, sizeof eps); /* for a backward with create_graph */
        }
        if (!ok) {
            cg_release(out);
            out = NULL;
        }
    }
    cg_release_all(4, mean, rstd, sum, xhat);
    return out;
}
cg_tensor *cg_layer_norm(cg_tensor *x, cg_tensor *w, cg_tensor *b, float eps)
{
    return norm_op(CG_OP_LAYER_NORM, x, NULL, w, b, eps);
}
cg_tensor *cg_rms_norm(cg_tensor *x, cg_tensor *w, float eps)
{
    return norm_op(CG_OP_RMS_NORM, x, NULL, w, NULL, eps);
}
cg_tensor *cg_add_layer_norm(cg_tensor *x, cg_tensor *y, cg_tensor *w, cg_tensor *b, float eps)
{
    if (!y)
        return cg_error_null_input("cg_add_layer_norm"), NULL;
    return norm_op(CG_OP_ADD_LAYER_NORM, x, y, w, b, eps);
}
cg_tensor *cg_add_rms_norm(cg_tensor *x, cg_tensor *y, cg_tensor *w, float eps)
{
    if (!y)
        return cg_error_null_input("cg_add_rms_norm"), NULL;
    return norm_op(CG_OP_ADD_RMS_NORM, x, y, w, NULL, eps);
}

/* ------------------------------------------------------------ dropout */
/* saved: which elements were kept (bool); p.f[0]: p */
static bool dropout_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_k_dropout_backward(n->saved[0], g, n->p.f[0])) != NULL;
}
cg_tensor *cg_dropout(cg_tensor *a, float p, cg_rng *rng, bool training)
{
    if (!a) {
        cg_error_null_input("cg_dropout");
        return NULL;
    }
    if (!training || p == 0.0f)
        return cg_retain(a);
    cg_tensor *mask = NULL;
    cg_tensor *out = cg_k_dropout(a, p, rng, records(1, &a) ? &mask : NULL);
    if (out) {
        cg_node *n = cg_record(out, CG_OP_DROPOUT, 1, &a, dropout_bw);
        if (n)
            n->p.f[0] = p;
        if (cg_record_failed(n, 1, &a) || (n && (!mask || cg_node_save(n, mask) < 0))) {
            cg_release(out);
            out = NULL;
        }
    }
    cg_release(mask);
    return out;
}

/* ------------------------------------------------------ concat, stack */
/* p.i[0]: the dim, counted from 0 in the output. Each input of a concat is
 * a run of it, each input of a stack one index of it (the inputs lack it):
 * an input's gradient is its slice of the output's, as a view. */
static bool concat_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const int dim = (int)n->p.i[0];
    const bool stack = n->op == CG_OP_STACK;
    int64_t start = 0;
    for (int i = 0; i < n->n_inputs; i++) {
        const int64_t len = stack ? 1 : IN(i)->shape[dim];
        if (NEEDS(i) && !(gin[i] = stack ? cg_view_select(g, dim, start)
                                         : cg_view_slice(g, dim, start, start + len, 1)))
            return false;
        start += len;
    }
    return true;
}
/* out (NULL: the forward failed) recorded as op (CONCAT or STACK) over the n_in tensors ts */
static cg_tensor *record_concat(cg_tensor *out, cg_op op, cg_tensor *const *ts, int n_in, int dim)
{
    if (!out)
        return NULL;
    cg_node *n = cg_record(out, op, n_in, ts, concat_bw);
    if (cg_record_failed(n, n_in, ts)) {
        cg_release(out);
        return NULL;
    }
    if (n)
        n->p.i[0] = cg_norm_dim(cg_op_name(op), dim, out->ndim);
    return out;
}
cg_tensor *cg_concat(cg_tensor *const *ts, int n_in, int dim)
{
    return record_concat(cg_k_concat(ts, n_in, dim), CG_OP_CONCAT, ts, n_in, dim);
}
cg_tensor *cg_stack(cg_tensor *const *ts, int n, int dim)
{
    return record_concat(cg_k_stack(ts, n, dim), CG_OP_STACK, ts, n, dim);
}

bool cg_split(cg_tensor *a, int dim, int n, const int64_t *sizes, cg_tensor **out)
{
    if (!a)
        return cg_error_null_input("cg_split");
    if (!out) {
        cg_set_error("split: NULL output array");
        return false;
    }
    const int d = cg_k_split_dim(a, dim, n, sizes);
    if (d < 0)
        return false;
    int64_t start = 0;
    for (int i = 0; i < n; i++) {
        out[i] = cg_slice(a, d, start, start + sizes[i], 1);
        if (!out[i]) {
            for (int j = 0; j < i; j++)
                cg_release(out[j]);
            return false;
        }
        start += sizes[i];
    }
    return true;
}

/* ------------------------------------------------- index select, gather */
/* The node keeps the index tensor (cg_node_save: retained, and refused at
 * backward if it was written in place since) and dim, resolved against
 * the first of the n_in inputs. */
static cg_tensor *record_indexed(cg_tensor *out, cg_op op, int n_in, cg_tensor *const *in,
                                 cg_backward_fn bw, const char *name, int dim,
                                 const cg_tensor *index)
{
    if (!out)
        return NULL;
    cg_node *n = cg_record(out, op, n_in, in, bw);
    if (cg_record_failed(n, n_in, in)) {
        cg_release(out);
        return NULL;
    }
    if (n) {
        n->p.i[0] = in[0]->ndim ? cg_norm_dim(name, dim, in[0]->ndim) : 0;
        if (cg_node_save(n, (cg_tensor *)index) < 0) {
            cg_release(out);
            return NULL;
        }
    }
    return out;
}

cg_tensor *cg_pick_grad(const cg_tensor *in, int dim, const cg_tensor *index, const cg_tensor *g,
                        bool scatter)
{
    bool f32 = in->dtype == CG_F32;
    cg_tensor *g32 = f32 ? cg_retain((cg_tensor *)g) : cg_k_to(g, CG_F32);
    cg_tensor *z = g32 ? cg_zeros(in->ndim, in->shape) : NULL;
    bool ok = z && (scatter ? cg_k_scatter_add_(z, dim, index, g32)
                            : cg_k_index_add_(z, dim, index, g32));
    cg_tensor *out = !ok ? NULL : f32 ? cg_retain(z) : cg_k_to(z, in->dtype);
    cg_release_all(2, g32, z);
    return out;
}

/* Into the gradient the table already has when the engine hands it over
 * (a tied embedding's, or the last micro-batch's): each row's sum added
 * once, the bits of adding the dense gradient cg_pick_grad makes, without
 * making it. */
static bool index_select_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    const int dim = (int)n->p.i[0];
    cg_tensor *acc = cg_grad_acc_f32(n, 0);
    if (!acc)
        return (gin[0] = cg_pick_grad(IN(0), dim, n->saved[0], g, false)) != NULL;
    cg_tensor *g32 = g->dtype == CG_F32 ? cg_retain((cg_tensor *)g) : cg_k_to(g, CG_F32);
    bool ok = g32 && cg_k_index_add_sums_(acc, dim, n->saved[0], g32);
    cg_release(g32);
    gin[0] = ok ? cg_retain(acc) : NULL;
    return ok;
}
cg_tensor *cg_index_select(cg_tensor *a, int dim, const cg_tensor *index)
{
    return record_indexed(cg_k_index_select(a, dim, index), CG_OP_INDEX_SELECT, 1, &a,
                          index_select_bw, "index_select", dim, index);
}

cg_tensor *cg_embedding(cg_tensor *table, const cg_tensor *ids)
{
    if (!table) {
        cg_error_null_input("cg_embedding");
        return NULL;
    }
    if (!cg_check_ids("embedding", "ids", ids))
        return NULL;
    if (table->ndim != 2) {
        char b[96];
        cg_set_error("embedding: table must be [V, D], got %s", cg_shape_str(table, b, sizeof b));
        return NULL;
    }
    if (ids->ndim >= CG_MAX_DIMS) {
        cg_set_error("embedding: ids must have 0..%d dims (got %d)", CG_MAX_DIMS - 1, ids->ndim);
        return NULL;
    }
    int64_t count = cg_numel(ids);
    cg_tensor *flat = cg_k_reshape(ids, 1, &count);
    cg_tensor *rows = flat ? cg_index_select(table, 0, flat) : NULL;
    cg_release(flat);
    if (!rows) {
        cg_prefix_error("embedding: ");
        return NULL;
    }
    int64_t s[CG_MAX_DIMS];
    memcpy(s, ids->shape, (size_t)ids->ndim * sizeof *s);
    s[ids->ndim] = table->shape[1];
    cg_tensor *out = cg_view(rows, ids->ndim + 1, s);
    cg_release(rows);
    return out;
}

static bool gather_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_pick_grad(IN(0), (int)n->p.i[0], n->saved[0], g, true)) != NULL;
}
cg_tensor *cg_gather(cg_tensor *a, int dim, const cg_tensor *index)
{
    return record_indexed(cg_k_gather(a, dim, index), CG_OP_GATHER, 1, &a, gather_bw, "gather", dim,
                          index);
}

/* ------------------------------------------------ index_add, scatter_add */
static bool index_add_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    if (NEEDS(0))
        gin[0] = cg_retain((cg_tensor *)g);
    return !NEEDS(1) || (gin[1] = cg_k_index_select(g, (int)n->p.i[0], n->saved[0])) != NULL;
}
cg_tensor *cg_index_add(cg_tensor *a, int dim, const cg_tensor *index, cg_tensor *src)
{
    return record_indexed(cg_k_index_add(a, dim, index, src), CG_OP_INDEX_ADD, 2,
                          (cg_tensor *[]){a, src}, index_add_bw, "index_add", dim, index);
}

static bool scatter_add_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    if (NEEDS(0))
        gin[0] = cg_retain((cg_tensor *)g);
    return !NEEDS(1) || (gin[1] = cg_k_gather(g, (int)n->p.i[0], n->saved[0])) != NULL;
}
cg_tensor *cg_scatter_add(cg_tensor *a, int dim, const cg_tensor *index, cg_tensor *src)
{
    return record_indexed(cg_k_scatter_add(a, dim, index, src), CG_OP_SCATTER_ADD, 2,
                          (cg_tensor *[]){a, src}, scatter_add_bw, "scatter_add", dim, index);
}
