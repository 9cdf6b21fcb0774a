/* Sorting, products and scans: sort, argsort, prod, cumprod,
 * logcumsumexp, cummax, cummin, var_mean, std_mean, one_hot. Forward and
 * backward side by side, as in ops.c. sort, cummax and cummin pick
 * elements (cg_pick_values: a gather, whose backward scatters back); the
 * others are nodes of their own (core/scan.c's kernels). */
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "autograd/ops_impl.h"
#include "core/ops.h"

#define IN(i) (n->inputs[(i)])

/* ------------------------------------------------------ sort, argsort */
/* The values a picks at idx (owned by the caller), and idx into *indices
 * or released. */
static cg_tensor *picked(cg_tensor *a, int dim, cg_tensor *idx, cg_tensor **indices)
{
    cg_tensor *out = idx ? cg_pick_values(a, dim, idx) : NULL;
    if (out && indices)
        *indices = idx;
    else
        cg_release(idx);
    return out;
}

cg_tensor *cg_sort(cg_tensor *a, int dim, bool descending, bool stable, cg_tensor **indices)
{
    if (indices)
        *indices = NULL;
    return picked(a, dim, cg_argsort(a, dim, descending, stable), indices);
}

cg_tensor *cg_argsort(const cg_tensor *a, int dim, bool descending, bool stable)
{
    (void)stable; /* always stable: a valid order for stable = false too */
    return cg_k_sort_indices(a, dim, descending);
}

/* --------------------------------------------------- cummax, cummin */
cg_tensor *cg_cummax(cg_tensor *a, int dim, cg_tensor **indices)
{
    if (indices)
        *indices = NULL;
    return picked(a, dim, cg_k_cum_extreme_indices(a, dim, false), indices);
}

cg_tensor *cg_cummin(cg_tensor *a, int dim, cg_tensor **indices)
{
    if (indices)
        *indices = NULL;
    return picked(a, dim, cg_k_cum_extreme_indices(a, dim, true), indices);
}

/* -------------------------------------------------------------- prod */
static bool prod_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    /* g seen with the dim kept (p.i[0]: the dim, p.i[1]: keepdim) */
    const cg_tensor *x = IN(0);
    const int d = (int)n->p.i[0];
    int64_t shape[CG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    if (x->ndim)
        shape[d] = 1;
    cg_tensor *gk = cg_k_reshape(g, x->ndim, shape);
    gin[0] = gk ? cg_k_prod_backward(x, gk, d) : NULL;
    cg_release(gk);
    return gin[0] != NULL;
}
cg_tensor *cg_prod(cg_tensor *a, int dim, bool keepdim)
{
    cg_node *n;
    cg_tensor *out = cg_recorded(cg_k_prod(a, dim, keepdim), CG_OP_PROD, 1, &a, prod_bw, &n);
    if (n) {
        n->p.i[0] = cg_norm_dim("prod", dim, a->ndim > 0 ? a->ndim : 1);
        n->p.i[1] = keepdim;
    }
    return out;
}

cg_tensor *cg_prod_all(cg_tensor *a)
{
    if (!a) {
        cg_error_null_input("cg_prod_all");
        return NULL;
    }
    cg_tensor *flat = cg_reshape(a, 1, (int64_t[]){cg_numel(a)});
    cg_tensor *out = flat ? cg_prod(flat, 0, false) : NULL;
    cg_release(flat);
    return out;
}

/* ------------------------------------------------ cumprod, logcumsumexp */
static bool cumprod_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return (gin[0] = cg_k_cumprod_backward(IN(0), g, (int)n->p.i[0])) != NULL;
}
cg_tensor *cg_cumprod(cg_tensor *a, int dim)
{
    cg_node *n;
    cg_tensor *out = cg_recorded(cg_k_cumprod(a, dim), CG_OP_CUMPROD, 1, &a, cumprod_bw, &n);
    if (n)
        n->p.i[0] = cg_norm_dim("cumprod", dim, a->ndim > 0 ? a->ndim : 1);
    return out;
}

static bool logcumsumexp_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    if (IN(0)->ndim == 0) /* a 0-d a is its own logcumsumexp (PyTorch's g, even at -inf) */
        return (gin[0] = cg_retain((cg_tensor *)g)) != NULL;
    gin[0] = cg_k_logcumsumexp_backward(IN(0), n->saved[0], g, (int)n->p.i[0]);
    return gin[0] != NULL;
}
cg_tensor *cg_logcumsumexp(cg_tensor *a, int dim)
{
    cg_node *n;
    cg_tensor *out =
        cg_recorded(cg_k_logcumsumexp(a, dim), CG_OP_LOGCUMSUMEXP, 1, &a, logcumsumexp_bw, &n);
    if (!n)
        return out;
    n->p.i[0] = cg_norm_dim("logcumsumexp", dim, a->ndim > 0 ? a->ndim : 1);
    if (!cg_op_save_output(n, out)) { /* the output, saved */
        cg_release(out);
        return NULL;
    }
    return out;
}

/* ---------------------------------------------- var_mean, std_mean */
static cg_tensor *with_mean(cg_tensor *v, cg_tensor *a, int ndims, const int *dims, bool keepdim,
                            cg_tensor **mean)
{
    cg_tensor *m = v ? cg_mean(a, ndims, dims, keepdim) : NULL;
    if (v && !m) {
        cg_release(v);
        v = NULL;
    }
    if (mean)
        *mean = m;
    else
        cg_release(m);
    return v;
}
cg_tensor *cg_var_mean(cg_tensor *a, int ndims, const int *dims, int correction, bool keepdim,
                       cg_tensor **mean)
{
    if (mean)
        *mean = NULL;
    return with_mean(cg_var(a, ndims, dims, correction, keepdim), a, ndims, dims, keepdim, mean);
}
cg_tensor *cg_std_mean(cg_tensor *a, int ndims, const int *dims, int correction, bool keepdim,
                       cg_tensor **mean)
{
    if (mean)
        *mean = NULL;
    return with_mean(cg_std(a, ndims, dims, correction, keepdim), a, ndims, dims, keepdim, mean);
}

/* ----------------------------------------------------------- one_hot */
cg_tensor *cg_one_hot(const cg_tensor *ids, int64_t num_classes)
{
    return cg_k_one_hot(ids, num_classes);
}
