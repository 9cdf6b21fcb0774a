/* cgrad core, INTERNAL: what the kernels that take every dtype share
 * (core/select.c, core/search.c, core/pointwise.c). Not installed.
 *
 * Those kernels work on dense copies: each operand broadcast to the
 * result's shape and converted to the dtype the op computes in (int64 for
 * integers and bool, float32 for the float dtypes: both exact), then one
 * loop over contiguous elements, the result converted once to its dtype. */
#ifndef CG_TYPED_IMPL_H
#define CG_TYPED_IMPL_H

#include <string.h>

#include "core/error.h"
#include "core/tensor.h"

/* t broadcast to (nd, shape) as a contiguous tensor of dtype dt (a new
 * reference), its values converted as cg_k_to converts them; NULL + error
 * when t does not broadcast or memory runs out. */
static inline cg_tensor *cg_dense_as(const cg_tensor *t, cg_dtype dt, int nd, const int64_t *shape)
{
    cg_tensor *e = cg_view_expand(t, nd, shape);
    cg_tensor *c = e ? cg_k_to(e, dt) : NULL;
    cg_tensor *d = c ? cg_k_contiguous(c) : NULL;
    cg_release_all(2, e, c);
    return d;
}

/* t converted to dtype dt first (an op's common dtype: rounding there as
 * PyTorch's inputs are), then as cg_dense_as to dt's compute dtype */
static inline cg_tensor *cg_dense_common(const cg_tensor *t, cg_dtype dt, int nd,
                                         const int64_t *shape)
{
    cg_tensor *c = cg_k_to(t, dt);
    cg_tensor *d = c ? cg_dense_as(c, cg_dtype_is_float(dt) ? CG_F32 : CG_I64, nd, shape) : NULL;
    cg_release(c);
    return d;
}

/* The broadcast shape of n tensors into shape (CG_MAX_DIMS entries): its
 * ndim, or -1 + error naming op. */
static inline int cg_broadcast_n(const char *op, int n, const cg_tensor *const *ts, int64_t *shape)
{
    int nd = ts[0]->ndim;
    memcpy(shape, ts[0]->shape, sizeof(int64_t) * (size_t)nd);
    for (int k = 1; k < n; k++) {
        int64_t out[CG_MAX_DIMS];
        nd = cg_broadcast_shapes(op, nd, shape, ts[k]->ndim, ts[k]->shape, out);
        if (nd < 0)
            return -1;
        memcpy(shape, out, sizeof(int64_t) * (size_t)nd);
    }
    return nd;
}

/* torch.result_type of n tensors (NULL ones skipped): the promoted dtype
 * of those with dims, unless the 0-d ones are of a higher category (bool <
 * integer < float), when the two are promoted together; the 0-d ones alone
 * when none has dims (ATen's combine_categories). */
static inline cg_dtype cg_result_type(int n, const cg_tensor *const *ts)
{
    bool has_dims = false, has_zero = false;
    cg_dtype dims = CG_BOOL, zero = CG_BOOL;
    for (int k = 0; k < n; k++) {
        const cg_tensor *t = ts[k];
        if (!t)
            continue;
        if (t->ndim) {
            dims = has_dims ? cg_promote_types(dims, t->dtype) : t->dtype;
            has_dims = true;
        } else {
            zero = has_zero ? cg_promote_types(zero, t->dtype) : t->dtype;
            has_zero = true;
        }
    }
    if (!has_dims || !has_zero)
        return has_dims ? dims : zero;
    if (cg_dtype_is_float(dims))
        return dims;
    if (dims == CG_BOOL || cg_dtype_is_float(zero))
        return cg_promote_types(dims, zero);
    return dims;
}

/* The dtype integers and bool compute in (int64) or floats (float32). */
static inline cg_dtype cg_compute_dtype(cg_dtype dt)
{
    return cg_dtype_is_float(dt) ? CG_F32 : CG_I64;
}

#endif
