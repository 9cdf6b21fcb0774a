/* Distances (autograd/ops.h): torch.cdist, torch.pdist and
 * F.pairwise_distance. cdist's Euclidean matrix form (p = 2 past 25 rows,
 * PyTorch's use_mm_for_euclid_dist_if_necessary) is made of the graph's
 * ops; every other distance is one cdist node over core/distance.c's
 * direct kernel, whose backward is PyTorch's (0 at a zero distance, where
 * a composition of sqrt and pow would give NaN or inf). An op given NULL
 * returns NULL and keeps the first message. */
#include <math.h>
#include <string.h>

#include "autograd/ops.h"
#include "autograd/ops_impl.h"
#include "core/ops.h"

#define NEEDS(i) cg_node_needs_grad(n, (i))

/* p.f: [0] p, [1] 1 when an inf norm's ties share the gradient */
static bool cdist_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    return cg_k_cdist_backward(n->inputs[0], n->inputs[1], n->saved[0], g, n->p.f[0],
                               n->p.f[1] != 0.0f, NEEDS(0) ? &gin[0] : NULL,
                               NEEDS(1) ? &gin[1] : NULL);
}

/* The direct kernel as a node: x1 [B, P, M], x2 [B, R, M] -> [B, P, R] */
static cg_tensor *cdist_node(cg_tensor *x1, cg_tensor *x2, float p, bool split_ties)
{
    cg_node *n;
    cg_tensor *in[2] = {x1, x2};
    cg_tensor *out =
        cg_recorded(x1 && x2 ? cg_k_cdist(x1, x2, p) : NULL, CG_OP_CDIST, 2, in, cdist_bw, &n);
    if (n) {
        n->p.f[0] = p;
        n->p.f[1] = split_ties ? 1.0f : 0.0f;
        if (!cg_op_save_output(n, out)) {
            cg_release(out);
            return NULL;
        }
    }
    return out;
}

/* sqrt(max(d2, 0)) with a gradient of 0 where d2 <= 0 (PyTorch's
 * _euclidean_dist_backward: 0 at a zero distance): the square root is
 * taken of d2 where positive, of 1 elsewhere, and 0 put there */
static cg_tensor *sqrt_pos(cg_tensor *d2)
{
    cg_tensor *mask = d2 ? cg_gt_scalar(d2, 0.0) : NULL, *one = mask ? cg_scalar(1.0f) : NULL;
    cg_tensor *zero = one ? cg_scalar(0.0f) : NULL;
    cg_tensor *safe = zero ? cg_where(mask, d2, one) : NULL, *r = safe ? cg_sqrt(safe) : NULL;
    cg_tensor *out = r ? cg_where(mask, r, zero) : NULL;
    cg_release_all(5, mask, one, zero, safe, r);
    return out;
}

/* PyTorch's _euclidean_dist: [-2 x1, |x1|^2, 1] @ [x2, 1, |x2|^2]^T,
 * clamped at 0, its square root */
static cg_tensor *euclid_mm(cg_tensor *x1, cg_tensor *x2)
{
    int last = -1;
    cg_tensor *s1 = cg_pow(x1, 2.0f), *n1 = s1 ? cg_sum(s1, 1, &last, true) : NULL;
    cg_tensor *s2 = n1 ? cg_pow(x2, 2.0f) : NULL, *n2 = s2 ? cg_sum(s2, 1, &last, true) : NULL;
    cg_tensor *o1 = n2 ? cg_full_dtype(x1->dtype, n1->ndim, n1->shape, 1.0) : NULL;
    cg_tensor *o2 = o1 ? cg_full_dtype(x2->dtype, n2->ndim, n2->shape, 1.0) : NULL;
    cg_tensor *m1 = o2 ? cg_muls(x1, -2.0f) : NULL;
    cg_tensor *a = m1 ? cg_concat((cg_tensor *[]){m1, n1, o1}, 3, -1) : NULL;
    cg_tensor *b = a ? cg_concat((cg_tensor *[]){x2, o2, n2}, 3, -1) : NULL;
    cg_tensor *bt = b ? cg_transpose(b, -1, -2) : NULL, *d2 = bt ? cg_matmul(a, bt) : NULL;
    cg_tensor *out = sqrt_pos(d2);
    cg_release_all(11, s1, n1, s2, n2, o1, o2, m1, a, b, bt, d2);
    return out;
}

/* x expanded to shape (nd dims: the batch, then 2), as [B, rows, cols];
 * no node where it is that already */
static cg_tensor *as_shape(cg_tensor *x, int nd, const int64_t *shape, int64_t B)
{
    if (nd == 3 && x->ndim == 3 && !memcmp(x->shape, shape, 3 * sizeof *shape))
        return cg_retain(x);
    cg_tensor *e = cg_expand(x, nd, shape);
    cg_tensor *out = e ? cg_reshape(e, 3, (int64_t[]){B, shape[nd - 2], shape[nd - 1]}) : NULL;
    cg_release(e);
    return out;
}

cg_tensor *cg_cdist(cg_tensor *x1, cg_tensor *x2, float p)
{
    const char *op = "cdist";
    if (!x1 || !x2) {
        cg_error_null_input(op);
        return NULL;
    }
    if (!cg_check_f32(op, "x1", x1) || !cg_check_f32(op, "x2", x2))
        return NULL;
    if (x1->ndim < 2 || x2->ndim < 2) {
        cg_set_error("cdist: only supports at least 2D tensors, X1 got: %dD, X2 got: %dD", x1->ndim,
                     x2->ndim);
        return NULL;
    }
    const int64_t P = x1->shape[x1->ndim - 2], R = x2->shape[x2->ndim - 2];
    const int64_t M = x1->shape[x1->ndim - 1];
    if (M != x2->shape[x2->ndim - 1]) {
        cg_set_error("cdist: X1 and X2 must have the same number of columns. X1: %lld X2: %lld",
                     (long long)M, (long long)x2->shape[x2->ndim - 1]);
        return NULL;
    }
    if (!(p >= 0.0f)) {
        cg_set_error("cdist: only supports non-negative p values, got %g", (double)p);
        return NULL;
    }
    int64_t batch[CG_MAX_DIMS], s1[CG_MAX_DIMS], s2[CG_MAX_DIMS];
    const int nb = cg_broadcast_shapes(op, x1->ndim - 2, x1->shape, x2->ndim - 2, x2->shape, batch);
    if (nb < 0)
        return NULL;
    const int64_t B = cg_numel_shape(nb, batch);
    memcpy(s1, batch, sizeof(int64_t) * (size_t)nb);
    memcpy(s2, batch, sizeof(int64_t) * (size_t)nb);
    s1[nb] = P;
    s2[nb] = R;
    s1[nb + 1] = s2[nb + 1] = M;
    cg_tensor *a = as_shape(x1, nb + 2, s1, B), *b = a ? as_shape(x2, nb + 2, s2, B) : NULL;
    cg_tensor *d = NULL;
    if (b)
        d = p == 2.0f && (P > 25 || R > 25) ? euclid_mm(a, b) : cdist_node(a, b, p, false);
    s1[nb + 1] = R;
    cg_tensor *out = d && nb == 1 ? cg_retain(d) : d ? cg_reshape(d, nb + 2, s1) : NULL;
    cg_release_all(3, a, b, d);
    return out;
}

cg_tensor *cg_pdist(cg_tensor *x, float p)
{
    if (!x) {
        cg_error_null_input("pdist");
        return NULL;
    }
    if (!cg_check_f32("pdist", "x", x))
        return NULL;
    if (x->ndim != 2) {
        cg_set_error("pdist: only supports 2D tensors, got: %dD", x->ndim);
        return NULL;
    }
    if (!(p >= 0.0f)) {
        cg_set_error("pdist: only supports non-negative p values, got %g", (double)p);
        return NULL;
    }
    /* the pairs i < j of the direct cdist of x with itself, row by row */
    const int64_t N = x->shape[0], K = N * (N - 1) / 2;
    cg_tensor *x3 = cg_unsqueeze(x, 0), *d = x3 ? cdist_node(x3, x3, p, false) : NULL;
    cg_tensor *flat = d ? cg_reshape(d, 1, (int64_t[]){N * N}) : NULL;
    cg_tensor *idx = flat ? cg_empty_dtype(CG_I64, CG_SHAPE(K)) : NULL;
    int64_t k = 0;
    for (int64_t i = 0; idx && i < N; i++)
        for (int64_t j = i + 1; j < N; j++)
            cg_data_i64(idx)[k++] = i * N + j;
    cg_tensor *out = idx ? cg_index_select(flat, 0, idx) : NULL;
    cg_release_all(4, x3, d, flat, idx);
    return out;
}

cg_tensor *cg_pairwise_distance(cg_tensor *x1, cg_tensor *x2, float p, float eps, bool keepdim)
{
    const char *op = "pairwise_distance";
    if (!x1 || !x2) {
        cg_error_null_input(op);
        return NULL;
    }
    for (int k = 0; k < 2; k++)
        if (!cg_dtype_is_float((k ? x2 : x1)->dtype)) {
            cg_set_error("%s: argument 'x%d' is %s, expected a float tensor", op, k + 1,
                         cg_dtype_name((k ? x2 : x1)->dtype));
            return NULL;
        }
    if (!(p >= 0.0f)) {
        cg_set_error("%s: p is %g, expected a non-negative p (inf allowed)", op, (double)p);
        return NULL;
    }
    int64_t shape[CG_MAX_DIMS];
    if (cg_broadcast_shapes(op, x1->ndim, x1->shape, x2->ndim, x2->shape, shape) < 0)
        return NULL;
    /* ||x1 - x2 + eps||_p over the last dim: each row a batch of one pair,
     * the difference against 0 (torch.norm's backward: an inf norm's ties
     * share the gradient) */
    cg_tensor *d = cg_sub(x1, x2), *de = d ? cg_adds(d, eps) : NULL;
    const int nd = de ? de->ndim : 0;
    const int64_t M = nd ? de->shape[nd - 1] : 1, N = nd ? cg_numel_shape(nd - 1, de->shape) : 1;
    cg_tensor *df = de ? cg_to(de, CG_F32) : NULL; /* bfloat16: the norm in float32 */
    cg_tensor *r = df ? cg_reshape(df, 3, (int64_t[]){N, 1, M}) : NULL;
    cg_tensor *z = r ? cg_zeros(3, r->shape) : NULL, *d32 = z ? cdist_node(r, z, p, true) : NULL;
    cg_tensor *dist = d32 ? cg_to(d32, de->dtype) : NULL;
    if (de)
        memcpy(shape, de->shape, sizeof(int64_t) * (size_t)nd);
    if (nd)
        shape[nd - 1] = 1;
    cg_tensor *out = dist ? cg_reshape(dist, keepdim || !nd ? nd : nd - 1, shape) : NULL;
    cg_release_all(7, d, de, df, r, z, d32, dist);
    return out;
}
