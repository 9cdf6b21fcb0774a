/* Masks, grids and the ops without a gradient that guard against one:
 * masked_select, masked_scatter (nodes, forward and backward side by
 * side); msort, meshgrid, cartesian_prod and rot90 (made of the graph's
 * views and ops, gradients theirs); unique and bincount (core/search.c,
 * refusing an input that requires grad). */
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "autograd/ops_impl.h"
#include "core/ops.h"

#define NEEDS(i) cg_node_needs_grad(n, (i))
#define IN(i) (n->inputs[(i)])

/* ---------------------------------------------------- masked_select */
/* g ([count]) scattered into zeros of a and mask's broadcast shape where
 * mask holds (PyTorch's masked_select_backward); the engine sums it to a */
static bool masked_select_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    int64_t shape[CG_MAX_DIMS];
    const int nd = cg_broadcast_shapes("masked_select backward", IN(0)->ndim, IN(0)->shape,
                                       IN(1)->ndim, IN(1)->shape, shape);
    cg_tensor *z = nd >= 0 ? cg_zeros_dtype(g->dtype, nd, shape) : NULL;
    gin[0] = z ? cg_k_masked_scatter(z, IN(1), g) : NULL;
    cg_release(z);
    return gin[0] != NULL;
}
cg_tensor *cg_masked_select(cg_tensor *a, cg_tensor *mask)
{
    cg_tensor *out = cg_k_masked_select(a, mask);
    return cg_op_finish(out, CG_OP_MASKED_SELECT, 2, (cg_tensor *[]){a, mask}, masked_select_bw,
                        NULL);
}

/* --------------------------------------------------- masked_scatter */
/* a: g with zeros where mask holds; source: g there, then zeros
 * (PyTorch's masked_scatter_backward) */
static bool masked_scatter_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    if (NEEDS(0) && !(gin[0] = cg_k_masked_fill(g, IN(1), 0.0f)))
        return false;
    if (NEEDS(2) &&
        !(gin[2] = cg_k_masked_scatter_source_backward(g, IN(1), IN(2)->ndim, IN(2)->shape)))
        return false;
    return true;
}
cg_tensor *cg_masked_scatter(cg_tensor *a, cg_tensor *mask, cg_tensor *source)
{
    cg_tensor *out = cg_k_masked_scatter(a, mask, source);
    return cg_op_finish(out, CG_OP_MASKED_SCATTER, 3, (cg_tensor *[]){a, mask, source},
                        masked_scatter_bw, NULL);
}

/* ------------------------------------------------------------ msort */
cg_tensor *cg_msort(cg_tensor *a) { return cg_sort(a, 0, false, true, NULL); }

/* ---------------------------------------------------------- meshgrid */
/* false + error unless ts holds n (1 to CG_MAX_DIMS) tensors of one dtype,
 * each 0-d or 1-d */
static bool grid_args(const char *op, cg_tensor *const *ts, int n)
{
    if (n < 1 || !ts) {
        cg_set_error("%s: expects a non-empty list of tensors", op);
        return false;
    }
    if (n > CG_MAX_DIMS) {
        cg_set_error("%s: %d tensors, at most %d", op, n, CG_MAX_DIMS);
        return false;
    }
    for (int i = 0; i < n; i++) {
        if (!ts[i]) {
            cg_error_null_input(op);
            return false;
        }
        if (ts[i]->dtype != ts[0]->dtype) {
            cg_set_error("%s: expects all tensors to have the same dtype (%s and %s)", op,
                         cg_dtype_name(ts[0]->dtype), cg_dtype_name(ts[i]->dtype));
            return false;
        }
        if (ts[i]->ndim > 1) {
            char b[96];
            cg_set_error("%s: expected a 0-d or 1-d tensor, but tensor %d is %s", op, i,
                         cg_shape_str(ts[i], b, sizeof b));
            return false;
        }
    }
    return true;
}

bool cg_meshgrid(cg_tensor *const *ts, int n, cg_meshgrid_indexing indexing, cg_tensor **out)
{
    if (!out)
        return cg_error_null_arg("meshgrid", "out");
    for (int i = 0; i < n && i < CG_MAX_DIMS; i++)
        out[i] = NULL;
    if (indexing != CG_MESHGRID_IJ && indexing != CG_MESHGRID_XY) {
        cg_set_error("meshgrid: indexing must be CG_MESHGRID_IJ or CG_MESHGRID_XY (got %d)",
                     (int)indexing);
        return false;
    }
    if (!grid_args("meshgrid", ts, n))
        return false;
    /* tensor i runs along dim pos(i): 'xy' swaps the first two */
    int pos[CG_MAX_DIMS];
    int64_t shape[CG_MAX_DIMS];
    for (int i = 0; i < n; i++)
        pos[i] = indexing == CG_MESHGRID_XY && n >= 2 && i < 2 ? 1 - i : i;
    for (int i = 0; i < n; i++)
        shape[pos[i]] = cg_numel(ts[i]);
    for (int i = 0; i < n; i++) {
        int64_t one[CG_MAX_DIMS];
        for (int d = 0; d < n; d++)
            one[d] = d == pos[i] ? shape[d] : 1;
        cg_tensor *r = cg_reshape(ts[i], n, one);
        out[i] = r ? cg_expand(r, n, shape) : NULL; /* views, as PyTorch's */
        cg_release(r);
        if (!out[i]) {
            for (int k = 0; k < i; k++) {
                cg_release(out[k]);
                out[k] = NULL;
            }
            return false;
        }
    }
    return true;
}

cg_tensor *cg_cartesian_prod(cg_tensor *const *ts, int n)
{
    for (int i = 0; ts && i < n; i++)
        if (ts[i] && ts[i]->ndim != 1) {
            char b[96];
            cg_set_error("cartesian_prod: expects 1-d tensors, but tensor %d is %s", i,
                         cg_shape_str(ts[i], b, sizeof b));
            return NULL;
        }
    if (!grid_args("cartesian_prod", ts, n))
        return NULL;
    if (n == 1)
        return cg_retain(ts[0]); /* the tensor itself, as PyTorch */
    cg_tensor *grid[CG_MAX_DIMS], *flat[CG_MAX_DIMS] = {NULL}, *out = NULL;
    if (!cg_meshgrid(ts, n, CG_MESHGRID_IJ, grid))
        return NULL;
    bool ok = true;
    for (int i = 0; i < n; i++)
        ok = ok && (flat[i] = cg_reshape(grid[i], 1, (int64_t[]){-1})) != NULL;
    if (ok)
        out = cg_stack(flat, n, 1);
    for (int i = 0; i < n; i++)
        cg_release_all(2, grid[i], flat[i]);
    return out;
}

/* ------------------------------------------------------------- rot90 */
cg_tensor *cg_rot90(cg_tensor *a, int64_t k, int dim0, int dim1)
{
    if (!a) {
        cg_error_null_input("rot90");
        return NULL;
    }
    if (a->ndim < 2) {
        cg_set_error("rot90: expected total dims >= 2, but got total dims = %d", a->ndim);
        return NULL;
    }
    const int d0 = cg_norm_dim("rot90", dim0, a->ndim),
              d1 = d0 < 0 ? -1 : cg_norm_dim("rot90", dim1, a->ndim);
    if (d1 < 0)
        return NULL;
    if (d0 == d1) {
        cg_set_error("rot90: expected rotation dims to be different, but got dim0 = %d and dim1 "
                     "= %d",
                     dim0, dim1);
        return NULL;
    }
    k = ((k % 4) + 4) % 4;
    if (k == 0)
        return cg_clone(a);
    if (k == 2)
        return cg_flip(a, 2, (int[]){d0, d1});
    cg_tensor *f = cg_flip(a, 1, (int[]){k == 1 ? d1 : d0});
    cg_tensor *out = f ? cg_transpose(f, d0, d1) : NULL;
    cg_release(f);
    return out;
}

/* ------------------------------------- unique, bincount: no gradient */
/* false + error when t requires grad while grad mode is on: these have no
 * gradient (PyTorch's backward fails on them), and a detached result
 * would cut the graph silently */
static bool no_grad_arg(const char *op, const char *arg, const cg_tensor *t)
{
    if (!t || !t->requires_grad || !cg_grad_enabled())
        return true;
    cg_set_error("%s: %s requires grad, and %s has no gradient (PyTorch's backward fails "
                 "there): pass cg_detach(%s), or call it under cg_no_grad_begin()",
                 op, arg, op, arg);
    return false;
}

/* unique's check, its outputs NULL when it fails */
static bool unique_ok(const char *op, const cg_tensor *x, cg_tensor **inverse, cg_tensor **counts)
{
    if (no_grad_arg(op, "x", x))
        return true;
    if (inverse)
        *inverse = NULL;
    if (counts)
        *counts = NULL;
    return false;
}

cg_tensor *cg_unique(const cg_tensor *x, bool sorted, cg_tensor **inverse, cg_tensor **counts)
{
    return unique_ok("unique", x, inverse, counts) ? cg_k_unique(x, sorted, inverse, counts) : NULL;
}

cg_tensor *cg_unique_dim(const cg_tensor *x, int dim, bool sorted, cg_tensor **inverse,
                         cg_tensor **counts)
{
    return unique_ok("unique", x, inverse, counts)
               ? cg_k_unique_dim(x, dim, sorted, inverse, counts)
               : NULL;
}

cg_tensor *cg_unique_consecutive(const cg_tensor *x, cg_tensor **inverse, cg_tensor **counts)
{
    return unique_ok("unique_consecutive", x, inverse, counts)
               ? cg_k_unique_consecutive(x, inverse, counts)
               : NULL;
}

cg_tensor *cg_unique_consecutive_dim(const cg_tensor *x, int dim, cg_tensor **inverse,
                                     cg_tensor **counts)
{
    return unique_ok("unique_consecutive", x, inverse, counts)
               ? cg_k_unique_consecutive_dim(x, dim, inverse, counts)
               : NULL;
}

cg_tensor *cg_bincount(const cg_tensor *x, const cg_tensor *weights, int64_t minlength)
{
    if (!no_grad_arg("bincount", "weights", weights))
        return NULL;
    return cg_k_bincount(x, weights, minlength);
}
