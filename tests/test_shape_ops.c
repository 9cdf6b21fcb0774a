/* Suite "shape_ops": concat, stack, split, index_select / index_add_,
 * gather / scatter_add_ (core/shape_ops.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "tests/testutil.h"

/* ---------------------------------------------------------- helpers */
static void unravel(int64_t lin, int ndim, const int64_t *shape, int64_t *idx)
{
    for (int k = ndim - 1; k >= 0; k--) {
        idx[k] = lin % shape[k];
        lin /= shape[k];
    }
}

static bool bit_equal(const cg_tensor *a, const cg_tensor *b)
{
    if (!a || !b || !cg_same_shape(a, b))
        return false;
    float *x = cg_test_values(a), *y = cg_test_values(b);
    bool eq = memcmp(x, y, (size_t)cg_numel(a) * sizeof(float)) == 0;
    free(x);
    free(y);
    return eq;
}

/* A non-contiguous [s0, s1, s2] tensor: layouts cycle through transposed,
 * step-2 strided and permuted. */
static cg_tensor *nc3(cg_rng *r, int64_t s0, int64_t s1, int64_t s2, int kind)
{
    if (kind == 2) {
        cg_tensor *base = cg_randn(r, CG_SHAPE(s2, s0, s1));
        cg_tensor *v = cg_view_permute(base, (const int[]){1, 2, 0});
        cg_release(base);
        return v;
    }
    return cg_test_randn_layout(r, CG_SHAPE(s0, s1, s2), kind == 0 ? 1 : 2);
}

/* ------------------------------------------------------------- concat */
START_TEST(test_concat_dims)
{
    cg_rng r = cg_rng_new(1);
    int dims[] = {0, 1, 2, -1, -3};
    for (int k = 0; k < 5; k++) {
        int d = dims[k] < 0 ? dims[k] + 3 : dims[k];
        int64_t sizes[3] = {2, 1, 3};
        cg_tensor *ts[3];
        for (int i = 0; i < 3; i++) {
            int64_t s[3] = {3, 4, 2};
            s[d] = sizes[i];
            ts[i] = nc3(&r, s[0], s[1], s[2], i);
            ck_assert(!cg_is_contiguous(ts[i]));
        }
        cg_tensor *out = cg_k_concat(ts, 3, dims[k]);
        ck_assert_msg(out != NULL, "%s", cg_last_error());
        int64_t es[3] = {3, 4, 2};
        es[d] = 6;
        ck_assert_int_eq(out->ndim, 3);
        for (int i = 0; i < 3; i++)
            ck_assert_int_eq(out->shape[i], es[i]);
        for (int64_t lin = 0; lin < cg_numel(out); lin++) {
            int64_t idx[3];
            unravel(lin, 3, es, idx);
            int piece = 0;
            while (idx[d] >= sizes[piece])
                idx[d] -= sizes[piece++];
            int64_t oidx[3];
            unravel(lin, 3, es, oidx);
            ck_assert(cg_get(out, oidx) == cg_get(ts[piece], idx));
        }
        cg_release(out);
        for (int i = 0; i < 3; i++)
            cg_release(ts[i]);
    }
}
END_TEST

START_TEST(test_concat_edge)
{
    /* single tensor (a copy), an empty piece, a broadcast piece */
    cg_tensor *a = cg_from_data(CG_SHAPE(2, 2), (float[]){1, 2, 3, 4});
    cg_tensor *e = cg_zeros(CG_SHAPE(0, 2));
    cg_tensor *row = cg_from_data(CG_SHAPE(1, 2), (float[]){7, 8});
    cg_tensor *bc = cg_view_expand(row, CG_SHAPE(2, 2));
    cg_tensor *one = cg_k_concat(&a, 1, 0);
    CG_ASSERT_TENSOR(one, ((const float[]){1, 2, 3, 4}), 0, 0);
    ck_assert(one->storage != a->storage);
    cg_tensor *ts[3] = {e, a, bc};
    cg_tensor *out = cg_k_concat(ts, 3, 0);
    CG_ASSERT_TENSOR(out, ((const float[]){1, 2, 3, 4, 7, 8, 7, 8}), 0, 0);
    ck_assert_int_eq(out->shape[0], 4);
    cg_release_all(7, a, e, row, bc, one, out, NULL);
}
END_TEST

START_TEST(test_concat_errors)
{
    cg_tensor *a = cg_zeros(CG_SHAPE(2, 3)), *b = cg_zeros(CG_SHAPE(2, 4));
    cg_tensor *c = cg_zeros(CG_SHAPE(2, 3, 1)), *s = cg_scalar(1);
    cg_tensor *ab[2] = {a, b}, *ac[2] = {a, c}, *ss[2] = {s, s};
    CG_ASSERT_FAILS(cg_k_concat(ab, 2, 0), "[2, 4]");
    CG_ASSERT_FAILS(cg_k_concat(ac, 2, 1), "concat: tensor 1 does not match tensor 0 outside dim 1 "
                                           "(shapes [2, 3] and [2, 3, 1])");
    CG_ASSERT_FAILS(cg_k_concat(ab, 2, 2), "dim 2");
    CG_ASSERT_FAILS(cg_k_concat(ab, 0, 0), "concat");
    CG_ASSERT_FAILS(cg_k_concat(ss, 2, 0), "zero-dimensional");
    cg_tensor *ok = cg_k_concat(ab, 2, 1); /* fine along dim 1 */
    ck_assert_ptr_nonnull(ok);
    ck_assert_int_eq(ok->shape[1], 7);
    /* a NULL member: NULL without a new message */
    cg_set_error("earlier");
    cg_tensor *an[2] = {a, NULL};
    ck_assert_ptr_null(cg_k_concat(an, 2, 0));
    ck_assert_str_eq(cg_last_error(), "earlier");
    cg_release_all(5, a, b, c, s, ok);
}
END_TEST

/* -------------------------------------------------------------- stack */
START_TEST(test_stack_dims)
{
    cg_rng r = cg_rng_new(2);
    cg_tensor *ts[3];
    for (int i = 0; i < 3; i++)
        ts[i] = nc3(&r, 2, 3, 4, i);
    for (int dim = -4; dim < 4; dim++) {
        int d = dim < 0 ? dim + 4 : dim;
        cg_tensor *out = cg_k_stack(ts, 3, dim);
        ck_assert_msg(out != NULL, "%s", cg_last_error());
        ck_assert_int_eq(out->ndim, 4);
        ck_assert_int_eq(out->shape[d], 3);
        for (int64_t lin = 0; lin < cg_numel(out); lin++) {
            int64_t oidx[4], idx[3];
            unravel(lin, 4, out->shape, oidx);
            for (int k = 0, j = 0; k < 4; k++)
                if (k != d)
                    idx[j++] = oidx[k];
            ck_assert(cg_get(out, oidx) == cg_get(ts[oidx[d]], idx));
        }
        cg_release(out);
    }
    /* stack of scalars is a vector */
    cg_tensor *s[2] = {cg_scalar(1), cg_scalar(2)};
    cg_tensor *v = cg_k_stack(s, 2, 0);
    CG_ASSERT_TENSOR(v, ((const float[]){1, 2}), 0, 0);
    ck_assert_int_eq(v->ndim, 1);
    cg_release_all(6, ts[0], ts[1], ts[2], s[0], s[1], v);
}
END_TEST

START_TEST(test_stack_errors)
{
    cg_tensor *a = cg_zeros(CG_SHAPE(2, 3)), *b = cg_zeros(CG_SHAPE(3, 2));
    cg_tensor *ab[2] = {a, b};
    CG_ASSERT_FAILS(cg_k_stack(ab, 2, 0), "[3, 2]");
    cg_tensor *aa[2] = {a, a};
    CG_ASSERT_FAILS(cg_k_stack(aa, 2, 3), "dim 3");
    CG_ASSERT_FAILS(cg_k_stack(aa, 2, -4), "stack");
    cg_tensor *d8 = cg_zeros(CG_SHAPE(1, 1, 1, 1, 1, 1, 1, 2)), *dd[2] = {d8, d8};
    CG_ASSERT_FAILS(cg_k_stack(dd, 2, 0), "stack: tensors already have the maximum of 8 dims");
    cg_release_all(3, a, b, d8);
}
END_TEST

/* -------------------------------------------------------------- split */
START_TEST(test_split)
{
    cg_rng r = cg_rng_new(3);
    cg_tensor *x = nc3(&r, 3, 7, 2, 0);
    const int64_t sizes[] = {2, 0, 4, 1};
    cg_tensor *out[4];
    ck_assert(cg_k_split(x, -2, 4, sizes, out));
    int64_t at = 0;
    for (int i = 0; i < 4; i++) {
        ck_assert_ptr_nonnull(out[i]);
        ck_assert(out[i]->storage == x->storage); /* a view */
        ck_assert_int_eq(out[i]->shape[1], sizes[i]);
        ck_assert_int_eq(out[i]->shape[0], 3);
        for (int64_t lin = 0; lin < cg_numel(out[i]); lin++) {
            int64_t idx[3];
            unravel(lin, 3, out[i]->shape, idx);
            float v = cg_get(out[i], idx);
            idx[1] += at;
            ck_assert(v == cg_get(x, idx));
        }
        at += sizes[i];
    }
    /* split then concat gives x back */
    cg_tensor *back = cg_k_concat(out, 4, 1);
    ck_assert(bit_equal(back, x));
    for (int i = 0; i < 4; i++)
        cg_release(out[i]);
    cg_release_all(2, back, x);
}
END_TEST

START_TEST(test_split_errors)
{
    cg_tensor *x = cg_zeros(CG_SHAPE(4, 5));
    cg_tensor *out[2] = {(cg_tensor *)1, (cg_tensor *)1};
    ck_assert(!cg_k_split(x, 1, 2, (const int64_t[]){2, 2}, out));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "sum to 4"));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "[4, 5]"));
    ck_assert(out[0] == NULL && out[1] == NULL);
    ck_assert(!cg_k_split(x, 0, 2, (const int64_t[]){5, -1}, out));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "negative"));
    ck_assert(!cg_k_split(x, 2, 2, (const int64_t[]){2, 2}, out));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "dim 2"));
    cg_release(x);
}
END_TEST

/* ------------------------------------------------------ index_select */
START_TEST(test_index_select)
{
    cg_rng r = cg_rng_new(4);
    cg_tensor *x = nc3(&r, 4, 5, 3, 2);
    const int64_t ids[] = {2, 0, 2, 2, 1, 0};
    for (int dim = -3; dim < 3; dim++) {
        int d = dim < 0 ? dim + 3 : dim;
        cg_tensor *out = cg_k_index_select(x, dim, cg_test_ids(6, ids));
        ck_assert_msg(out != NULL, "%s", cg_last_error());
        ck_assert_int_eq(out->shape[d], 6);
        for (int64_t lin = 0; lin < cg_numel(out); lin++) {
            int64_t idx[3];
            unravel(lin, 3, out->shape, idx);
            float v = cg_data(out)[lin];
            idx[d] = ids[idx[d]];
            ck_assert(v == cg_get(x, idx));
        }
        cg_release(out);
    }
    /* no ids: an empty result */
    cg_tensor *e = cg_k_index_select(x, 0, cg_test_ids(0, NULL));
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(cg_numel(e), 0);
    ck_assert_int_eq(e->shape[0], 0);
    cg_release_all(2, x, e);
}
END_TEST

/* index_select of a strided view (transposed, every other slice, expanded)
 * gives the bits of index_select of its contiguous copy, for every dim,
 * dtype and count of ids: few (each slice copied from a view of it), many
 * (a contiguous copy of the whole first), none; with 1 and 2 threads (the
 * last view's slices are 50,000 elements: two threads copy each). */
static void select_same_bits(const cg_tensor *v, int dim, int64_t n, const int64_t *ids)
{
    cg_tensor *c = cg_k_contiguous(v), *idx = cg_test_ids(n, ids);
    cg_tensor *want = cg_k_index_select(c, dim, idx);
    ck_assert_msg(want != NULL, "%s", cg_last_error());
    for (int threads = 1; threads <= 2; threads++) {
        cg_set_num_threads(threads);
        cg_tensor *got = cg_k_index_select(v, dim, idx);
        ck_assert_msg(got && cg_same_shape(got, want) && got->dtype == want->dtype &&
                          cg_is_contiguous(got),
                      "dim %d, %lld ids: %s", dim, (long long)n, cg_last_error());
        ck_assert_msg(memcmp(cg_data_ptr(got), cg_data_ptr(want),
                             (size_t)cg_numel(got) * cg_dtype_size(got->dtype)) == 0,
                      "dim %d, %lld ids, %d threads", dim, (long long)n, threads);
        cg_release(got);
    }
    cg_release_all(2, c, want); /* idx: held by cg_test_ids until the run ends */
}

START_TEST(test_index_select_strided)
{
    cg_rng r = cg_rng_new(8);
    const cg_dtype dts[] = {CG_F32, CG_BF16, CG_I64};
    int64_t many[64];
    for (int i = 0; i < 64; i++)
        many[i] = (i * 7) % 12;
    const int64_t few[] = {3, 1, 3};
    for (int k = 0; k < 3; k++) {
        cg_tensor *f = cg_randn(&r, CG_SHAPE(12, 24, 16)), *base = cg_k_to(f, dts[k]);
        cg_tensor *perm = cg_view_permute(base, (int[]){2, 0, 1});   /* [16, 12, 24] */
        cg_tensor *half = cg_view_slice(perm, 2, 1, 24, 2);          /* [16, 12, 12] */
        cg_tensor *one = cg_view_slice(base, 1, 5, 6, 1);            /* [12, 1, 16] */
        cg_tensor *wide = cg_view_expand(one, CG_SHAPE(12, 24, 16)); /* stride 0 */
        const cg_tensor *views[] = {perm, half, wide};
        for (int v = 0; v < 3; v++) {
            for (int dim = -1; dim < 3; dim++) {
                select_same_bits(views[v], dim, 3, few);
                select_same_bits(views[v], dim, 1, few + 1);
                select_same_bits(views[v], dim, 64, many);
                select_same_bits(views[v], dim, 0, NULL);
            }
        }
        cg_release_all(6, f, base, perm, half, one, wide);
    }
    cg_tensor *big = cg_randn(&r, CG_SHAPE(8, 50000));
    cg_tensor *bt = cg_view_transpose(big, 0, 1); /* [50000, 8] */
    select_same_bits(bt, 1, 3, few);
    select_same_bits(bt, 0, 3, few);
    cg_release_all(2, big, bt);
}
END_TEST

START_TEST(test_index_select_errors)
{
    cg_tensor *x = cg_zeros(CG_SHAPE(5, 3));
    CG_ASSERT_FAILS(cg_k_index_select(x, 0, cg_test_ids(3, (const int64_t[]){1, 4, 5})), "id 5");
    CG_ASSERT_FAILS(cg_k_index_select(x, 0, cg_test_ids(1, (const int64_t[]){-1})), "id -1");
    CG_ASSERT_FAILS(cg_k_index_select(x, 1, cg_test_ids(2, (const int64_t[]){0, 3})), "[5, 3]");
    CG_ASSERT_FAILS(cg_k_index_select(x, 2, cg_test_ids(1, (const int64_t[]){0})), "dim 2");
    ck_assert_ptr_null(cg_k_index_select(NULL, 0, cg_test_ids(1, (const int64_t[]){0})));
    cg_tensor *ids2 = cg_from_i64(CG_SHAPE(2, 2), (const int64_t[]){0, 1, 2, 3}); /* as torch */
    CG_ASSERT_FAILS(cg_k_index_select(x, 0, ids2), "index must be 0-d or 1-d, got shape [2, 2]");
    cg_release_all(2, x, ids2);
}
END_TEST

/* --------------------------------------------------------- index_add_ */
/* Serial reference: dst[..., ids[i], ...] += src[..., i, ...] in order i,
 * or (sums) each destination row adding once the sum of its source rows
 * in order i (cg_k_index_add_sums_). */
static void ref_index_add(float *dst, const int64_t *dshape, int dim, const int64_t *ids, int64_t n,
                          const float *src, bool sums)
{
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < dim; k++)
        outer *= dshape[k];
    for (int k = dim + 1; k < 3; k++)
        inner *= dshape[k];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t row = 0; row < dshape[dim]; row++)
            for (int64_t j = 0; j < inner; j++) {
                float *d = &dst[(o * dshape[dim] + row) * inner + j], sum = 0;
                bool any = false;
                for (int64_t i = 0; i < n; i++) {
                    const float v = src[(o * n + i) * inner + j];
                    if (ids[i] == row && !sums)
                        *d += v;
                    else if (ids[i] == row)
                        sum = any ? sum + v : v;
                    any |= ids[i] == row;
                }
                if (sums && any)
                    *d += sum;
            }
}

START_TEST(test_index_add)
{
    cg_rng r = cg_rng_new(5);
    const int64_t ids[] = {1, 3, 1, 0, 1, 3, 3};
    for (int dim = 0; dim < 3; dim++) {
        for (int layout = 0; layout < 2; layout++) {
            int64_t ds[3] = {4, 4, 4}, ss[3] = {4, 4, 4};
            ss[dim] = 7;
            cg_tensor *dst = layout ? nc3(&r, ds[0], ds[1], ds[2], dim) : cg_randn(&r, 3, ds);
            cg_tensor *src = nc3(&r, ss[0], ss[1], ss[2], dim + 1);
            float *expect = cg_test_values(dst), *sv = cg_test_values(src);
            ref_index_add(expect, ds, dim, ids, 7, sv, false);
            bool was_contig = cg_is_contiguous(dst);
            ck_assert_msg(cg_k_index_add_(dst, dim, cg_test_ids(7, ids), src), "%s",
                          cg_last_error());
            ck_assert(cg_is_contiguous(dst) == was_contig); /* in place, layout kept */
            CG_ASSERT_TENSOR(dst, expect, 0, 0);            /* same order of additions: exact */
            free(expect);
            free(sv);
            cg_release_all(2, dst, src);
        }
    }
}
END_TEST

START_TEST(test_index_add_embedding_grad)
{
    /* The embedding backward: a [V, D] table gradient from [n, D] rows, many
     * repeats, above the parallel threshold; 1 and 2 threads identical and
     * equal to the serial loop bit for bit. */
    cg_rng r = cg_rng_new(6);
    const int64_t V = 50, D = 96, n = 2000;
    int64_t *ids = malloc((size_t)n * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int64_t)cg_rng_below(&r, 7) * 7; /* only 7 distinct rows */
    cg_tensor *src = cg_randn(&r, CG_SHAPE(2000, 96));
    float *sv = cg_test_values(src);
    float *expect = calloc((size_t)(V * D), sizeof(float));
    ref_index_add(expect, (const int64_t[]){V, D, 1}, 0, ids, n, sv, false);
    cg_tensor *g[2];
    for (int k = 0; k < 2; k++) {
        cg_set_num_threads(k + 1);
        g[k] = cg_zeros(CG_SHAPE(50, 96));
        ck_assert(cg_k_index_add_(g[k], 0, cg_test_ids(n, ids), src));
    }
    cg_set_num_threads(0);
    CG_ASSERT_TENSOR(g[0], expect, 0, 0);
    ck_assert(bit_equal(g[0], g[1]));
    /* index_select back: rows of the table */
    cg_tensor *sel = cg_k_index_select(g[0], 0, cg_test_ids(3, ids));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < D; j++)
            ck_assert(cg_data(sel)[i * D + j] == expect[ids[i] * D + j]);
    free(ids);
    free(sv);
    free(expect);
    cg_release_all(4, src, g[0], g[1], sel);
}
END_TEST

/* cg_k_index_add_sums_: each destination row adds once the sum of its
 * source rows, in order, in every dim and layout, with
 * rows longer than the kernel's 64-column blocks; the bits of adding
 * index_add(zeros, ...), which differ from index_add_'s one by one. */
START_TEST(test_index_add_sums)
{
    cg_rng r = cg_rng_new(9);
    const int64_t ids[] = {1, 3, 1, 0, 1, 3, 3};
    for (int dim = 0; dim < 3; dim++) {
        for (int layout = 0; layout < 2; layout++) {
            int64_t ds[3] = {4, 4, dim == 2 ? 4 : 150}, ss[3] = {ds[0], ds[1], ds[2]};
            ss[dim] = 7;
            cg_tensor *dst = layout ? nc3(&r, ds[0], ds[1], ds[2], dim) : cg_randn(&r, 3, ds);
            cg_tensor *src = cg_randn(&r, 3, ss);
            float *expect = cg_test_values(dst), *sv = cg_test_values(src);
            ref_index_add(expect, ds, dim, ids, 7, sv, true);
            bool was_contig = cg_is_contiguous(dst);
            ck_assert_msg(cg_k_index_add_sums_(dst, dim, cg_test_ids(7, ids), src), "%s",
                          cg_last_error());
            ck_assert(cg_is_contiguous(dst) == was_contig);
            CG_ASSERT_TENSOR(dst, expect, 0, 0);
            /* = dst + index_add(zeros, ...) */
            cg_tensor *z = cg_zeros(3, ds), *d0 = layout ? nc3(&r, ds[0], ds[1], ds[2], dim) : NULL;
            ck_assert(cg_k_index_add_(z, dim, cg_test_ids(7, ids), src));
            if (d0) {
                cg_tensor *viaz = cg_k_add(d0, z);
                ck_assert(cg_k_index_add_sums_(d0, dim, cg_test_ids(7, ids), src));
                ck_assert(bit_equal(d0, viaz));
                cg_release(viaz);
            }
            free(expect);
            free(sv);
            cg_release_all(4, dst, src, z, d0);
        }
    }
    /* 1 + 0.3 ulp + 0.3 ulp: 1 one by one, 1 + 1 ulp summed first; a row
     * no id names keeps its -0 */
    const float u = 0.3f * 0x1p-23f;
    cg_tensor *a = cg_from_data(CG_SHAPE(2, 1), (float[]){1, -0.0f});
    cg_tensor *b = cg_from_data(CG_SHAPE(2, 1), (float[]){1, -0.0f});
    cg_tensor *src = cg_from_data(CG_SHAPE(2, 1), (float[]){u, u});
    ck_assert(cg_k_index_add_(a, 0, cg_test_ids(2, (const int64_t[]){0, 0}), src));
    ck_assert(cg_k_index_add_sums_(b, 0, cg_test_ids(2, (const int64_t[]){0, 0}), src));
    ck_assert(cg_data(a)[0] == 1.0f && cg_data(b)[0] == 1.0f + 0x1p-23f);
    ck_assert(signbit(cg_data(b)[1]));
    cg_release_all(3, a, b, src);
    /* above the parallel threshold: 1 and 2 threads the same bits */
    const int64_t n = 3000;
    int64_t *many = malloc((size_t)n * sizeof *many);
    for (int64_t i = 0; i < n; i++)
        many[i] = (int64_t)cg_rng_below(&r, 40);
    cg_tensor *rows = cg_randn(&r, CG_SHAPE(3000, 96)), *g[2];
    for (int k = 0; k < 2; k++) {
        cg_set_num_threads(k + 1);
        g[k] = cg_ones(CG_SHAPE(40, 96));
        ck_assert(cg_k_index_add_sums_(g[k], 0, cg_test_ids(n, many), rows));
    }
    cg_set_num_threads(0);
    ck_assert(bit_equal(g[0], g[1]));
    /* errors: named, dst untouched */
    cg_tensor *h = cg_zeros_dtype(CG_BF16, CG_SHAPE(40, 96));
    CG_ASSERT_REFUSED(!cg_k_index_add_sums_(h, 0, cg_test_ids(n, many), rows), "index_add_sums_");
    CG_ASSERT_REFUSED(
        !cg_k_index_add_sums_(g[0], 0, cg_test_ids(2, (const int64_t[]){1, 39}), rows),
        "[3000, 96]");
    CG_ASSERT_REFUSED(!cg_k_index_add_sums_(g[0], 0, cg_test_ids(n, many), h), "index_add_sums_");
    ck_assert(bit_equal(g[0], g[1]));
    ck_assert(!cg_k_index_add_sums_(NULL, 0, cg_test_ids(1, many), rows));
    free(many);
    cg_release_all(4, rows, g[0], g[1], h);
}
END_TEST

START_TEST(test_index_add_errors)
{
    cg_tensor *dst = cg_zeros(CG_SHAPE(4, 3)), *src = cg_ones(CG_SHAPE(2, 3));
    ck_assert(!cg_k_index_add_(dst, 0, cg_test_ids(2, (const int64_t[]){1, 9}), src));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "id 9"));
    float zeros[12] = {0};
    CG_ASSERT_TENSOR(dst, zeros, 0, 0); /* untouched */
    ck_assert(!cg_k_index_add_(dst, 0, cg_test_ids(3, (const int64_t[]){1, 2, 3}), src));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "[2, 3]"));
    ck_assert(!cg_k_index_add_(dst, 1, cg_test_ids(2, (const int64_t[]){0, 1}), src));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "index_add_"));
    cg_tensor *row = cg_zeros(CG_SHAPE(1, 3));
    cg_tensor *bc = cg_view_expand(row, CG_SHAPE(4, 3));
    ck_assert(!cg_k_index_add_(bc, 0, cg_test_ids(2, (const int64_t[]){1, 2}), src));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "broadcast"));
    cg_release_all(4, dst, src, row, bc);
}
END_TEST

/* ------------------------------------------------ gather / scatter_add */
START_TEST(test_gather)
{
    /* torch.gather(a, 1, [[0, 0], [1, 0]]) on [[1, 2], [3, 4]] = [[1, 1], [4, 3]] */
    cg_tensor *a = cg_from_data(CG_SHAPE(2, 2), (float[]){1, 2, 3, 4});
    cg_tensor *o = cg_k_gather(a, 1, cg_test_ids_nd(CG_SHAPE(2, 2), (const int64_t[]){0, 0, 1, 0}));
    CG_ASSERT_TENSOR(o, ((const float[]){1, 1, 4, 3}), 0, 0);
    /* dim 0, index smaller than a outside dim */
    cg_tensor *o0 = cg_k_gather(a, 0, cg_test_ids_nd(CG_SHAPE(3, 1), (const int64_t[]){1, 1, 0}));
    CG_ASSERT_TENSOR(o0, ((const float[]){3, 3, 1}), 0, 0);
    cg_release_all(3, a, o, o0);

    /* random 3-D non-contiguous inputs, each dim, vs the definition */
    cg_rng r = cg_rng_new(7);
    cg_tensor *x = nc3(&r, 4, 5, 3, 2);
    for (int dim = 0; dim < 3; dim++) {
        int64_t is[3] = {3, 4, 2};
        is[dim] = 6;
        int64_t n = is[0] * is[1] * is[2];
        int64_t *ids = malloc((size_t)n * sizeof(int64_t));
        for (int64_t i = 0; i < n; i++)
            ids[i] = (int64_t)cg_rng_below(&r, (uint64_t)x->shape[dim]);
        cg_tensor *out = cg_k_gather(x, dim - 3, cg_test_ids_nd(3, is, ids));
        ck_assert_msg(out != NULL, "%s", cg_last_error());
        for (int64_t lin = 0; lin < n; lin++) {
            int64_t idx[3];
            unravel(lin, 3, is, idx);
            idx[dim] = ids[lin];
            ck_assert(cg_data(out)[lin] == cg_get(x, idx));
        }
        free(ids);
        cg_release(out);
    }
    cg_release(x);
}
END_TEST

START_TEST(test_scatter_add)
{
    /* torch: zeros(2,3).scatter_add_(1, [[0, 2, 0], [1, 1, 1]], [[1,2,3],[4,5,6]])
     * = [[4, 0, 2], [0, 15, 0]] */
    cg_tensor *dst = cg_zeros(CG_SHAPE(2, 3));
    cg_tensor *src = cg_from_data(CG_SHAPE(2, 3), (float[]){1, 2, 3, 4, 5, 6});
    ck_assert(cg_k_scatter_add_(
        dst, 1, cg_test_ids_nd(src->ndim, src->shape, (const int64_t[]){0, 2, 0, 1, 1, 1}), src));
    CG_ASSERT_TENSOR(dst, ((const float[]){4, 0, 2, 0, 15, 0}), 0, 0);
    cg_release_all(2, dst, src);

    /* the adjoint of gather: <gather(a, ids), s> == <a, scatter_add(0, ids, s)>,
     * each dim, non-contiguous dst and src */
    cg_rng r = cg_rng_new(8);
    for (int dim = 0; dim < 3; dim++) {
        int64_t is[3] = {3, 4, 2};
        is[dim] = 7;
        int64_t n = is[0] * is[1] * is[2];
        int64_t *ids = malloc((size_t)n * sizeof(int64_t));
        cg_tensor *a = nc3(&r, 4, 5, 3, dim);
        for (int64_t i = 0; i < n; i++)
            ids[i] = (int64_t)cg_rng_below(&r, (uint64_t)a->shape[dim]);
        cg_tensor *s = nc3(&r, is[0], is[1], is[2], dim + 1);
        cg_tensor *ga = cg_k_gather(a, dim, cg_test_ids_nd(3, is, ids));
        cg_tensor *z = nc3(&r, 4, 5, 3, 0);
        cg_fill_(z, 0.0f);
        ck_assert_msg(cg_k_scatter_add_(z, dim, cg_test_ids_nd(s->ndim, s->shape, ids), s), "%s",
                      cg_last_error());
        float *gv = cg_test_values(ga), *sv = cg_test_values(s);
        float *av = cg_test_values(a), *zv = cg_test_values(z);
        double l = 0, rr = 0;
        for (int64_t i = 0; i < n; i++)
            l += (double)gv[i] * sv[i];
        for (int64_t i = 0; i < 60; i++)
            rr += (double)av[i] * zv[i];
        ck_assert_msg(fabs(l - rr) < 1e-4, "dim %d: %g vs %g", dim, l, rr);
        /* and element-wise against the serial definition */
        float ez[60] = {0};
        for (int64_t lin = 0; lin < n; lin++) {
            int64_t idx[3];
            unravel(lin, 3, is, idx);
            idx[dim] = ids[lin];
            ez[(idx[0] * 5 + idx[1]) * 3 + idx[2]] += sv[lin];
        }
        CG_ASSERT_TENSOR(z, ez, 0, 0);
        free(ids);
        free(gv);
        free(sv);
        free(av);
        free(zv);
        cg_release_all(4, a, s, ga, z);
    }
}
END_TEST

START_TEST(test_scatter_add_threads)
{
    /* the backward of gather on the last dim of [3000, 40] with repeats */
    cg_rng r = cg_rng_new(9);
    const int64_t N = 3000, C = 40, K = 30;
    int64_t *ids = malloc((size_t)(N * K) * sizeof(int64_t));
    for (int64_t i = 0; i < N * K; i++)
        ids[i] = (int64_t)cg_rng_below(&r, 5);
    cg_tensor *s = cg_randn(&r, CG_SHAPE(3000, 30));
    cg_tensor *d[2];
    for (int k = 0; k < 2; k++) {
        cg_set_num_threads(k + 1);
        d[k] = cg_zeros(CG_SHAPE(3000, 40));
        ck_assert(cg_k_scatter_add_(d[k], 1, cg_test_ids_nd(s->ndim, s->shape, ids), s));
    }
    cg_set_num_threads(0);
    ck_assert(bit_equal(d[0], d[1]));
    (void)C;
    free(ids);
    cg_release_all(3, s, d[0], d[1]);
}
END_TEST

/* torch.gather and scatter_add_ on 0-d tensors (dim 0 or -1, a 0-d
 * index holding 0): the element itself, and src added to it; any other
 * dim or id refused with nothing written. */
START_TEST(test_gather_0d)
{
    cg_tensor *a = cg_scalar(3.5f), *z = cg_test_ids_nd(0, NULL, (const int64_t[]){0});
    for (int dim = -1; dim <= 0; dim++) {
        cg_tensor *o = cg_k_gather(a, dim, z);
        ck_assert_msg(o != NULL, "%s", cg_last_error());
        ck_assert_int_eq(o->ndim, 0);
        CG_ASSERT_TENSOR(o, ((const float[]){3.5f}), 0, 0);
        cg_release(o);
    }
    CG_ASSERT_FAILS(cg_k_gather(a, 1, z), "dim 1 out of range for a tensor with 0 dims");
    CG_ASSERT_FAILS(cg_k_gather(a, 0, cg_test_ids_nd(0, NULL, (const int64_t[]){1})), "id 1");
    cg_tensor *src = cg_scalar(-1.25f);
    ck_assert_msg(cg_k_scatter_add_(a, 0, z, src), "%s", cg_last_error());
    CG_ASSERT_TENSOR(a, ((const float[]){2.25f}), 0, 0);
    cg_tensor *b = cg_k_scatter_add(a, -1, z, src);
    ck_assert_msg(b != NULL, "%s", cg_last_error());
    CG_ASSERT_TENSOR(b, ((const float[]){1.0f}), 0, 0);
    CG_ASSERT_TENSOR(a, ((const float[]){2.25f}), 0, 0); /* out of place: a unchanged */
    ck_assert(!cg_k_scatter_add_(a, 0, cg_test_ids_nd(0, NULL, (const int64_t[]){-1}), src));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "id -1"));
    ck_assert(!cg_k_scatter_add_(a, 1, z, src));
    CG_ASSERT_TENSOR(a, ((const float[]){2.25f}), 0, 0);
    cg_release_all(3, a, src, b);
}
END_TEST

START_TEST(test_gather_errors)
{
    cg_tensor *a = cg_zeros(CG_SHAPE(2, 3));
    CG_ASSERT_FAILS(cg_k_gather(a, 1, cg_test_ids_nd(CG_SHAPE(1, 2), (const int64_t[]){0, 3})),
                    "id 3");
    CG_ASSERT_FAILS(cg_k_gather(a, 0, cg_test_ids_nd(CG_SHAPE(1, 2), (const int64_t[]){0, -2})),
                    "id -2");
    CG_ASSERT_FAILS(cg_k_gather(a, 1, cg_test_ids_nd(CG_SHAPE(3, 1), (const int64_t[]){0, 0, 0})),
                    "[3, 1]");
    CG_ASSERT_FAILS(cg_k_gather(a, 1, cg_test_ids_nd(CG_SHAPE(2), (const int64_t[]){0, 0})),
                    "gather");
    CG_ASSERT_FAILS(cg_k_gather(a, 2, cg_test_ids_nd(CG_SHAPE(1, 1), (const int64_t[]){0})),
                    "dim 2");
    cg_tensor *s = cg_ones(CG_SHAPE(1, 2));
    ck_assert(
        !cg_k_scatter_add_(a, 0, cg_test_ids_nd(s->ndim, s->shape, (const int64_t[]){0, 5}), s));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "id 5"));
    float zeros[6] = {0};
    CG_ASSERT_TENSOR(a, zeros, 0, 0);
    cg_release_all(2, a, s);
}
END_TEST

static Suite *shape_ops_suite(void)
{
    Suite *s = suite_create("shape_ops");
    TCase *tc = tcase_create("concat_stack_split");
    tcase_add_test(tc, test_concat_dims);
    tcase_add_test(tc, test_concat_edge);
    tcase_add_test(tc, test_concat_errors);
    tcase_add_test(tc, test_stack_dims);
    tcase_add_test(tc, test_stack_errors);
    tcase_add_test(tc, test_split);
    tcase_add_test(tc, test_split_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("index");
    tcase_add_test(tc, test_index_select);
    tcase_add_test(tc, test_index_select_strided);
    tcase_add_test(tc, test_index_select_errors);
    tcase_add_test(tc, test_index_add);
    tcase_add_test(tc, test_index_add_embedding_grad);
    tcase_add_test(tc, test_index_add_sums);
    tcase_add_test(tc, test_index_add_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("gather");
    tcase_add_test(tc, test_gather);
    tcase_add_test(tc, test_scatter_add);
    tcase_add_test(tc, test_scatter_add_threads);
    tcase_add_test(tc, test_gather_0d);
    tcase_add_test(tc, test_gather_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s = shape_ops_suite();
    return cg_test_run(&s, 1);
}
