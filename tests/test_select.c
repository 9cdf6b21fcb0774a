/* Masks, searching, counting, uniques and integer sorts (since
 * 2026-12-08): masked_select and masked_scatter (autograd/ops_select.c,
 * core/select.c), searchsorted, bucketize, bincount, histc, unique and
 * unique_consecutive (core/search.c), sort, argsort, topk, cummax, cummin
 * and msort of integers and bool (core/scan.c). Values worked out by hand
 * from PyTorch 1.13's rules (NaN, -0, inf, ties, empty dims, broadcast and
 * transposed inputs), the gradients of the masked ops by hand and by
 * gradcheck, and every refusal by message. PyTorch's answers on random
 * cases: tests/interop/make_op_cases.py gen_misc (torch_ops). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "tests/testutil.h"

/* t's values are want's (NaN where NaN, the sign of zero too); t released */
static void expect_f(cg_tensor *t, int64_t n, const float *want, const char *what)
{
    ck_assert_msg(t != NULL, "%s: %s", what, cg_last_error());
    ck_assert_msg(cg_numel(t) == n, "%s: %lld elements, expected %lld", what,
                  (long long)cg_numel(t), (long long)n);
    float *v = cg_test_values(t);
    for (int64_t i = 0; i < n; i++) {
        const bool same =
            isnan(want[i]) ? isnan(v[i]) : v[i] == want[i] && signbit(v[i]) == signbit(want[i]);
        ck_assert_msg(same, "%s: element %lld is %.9g, expected %.9g", what, (long long)i,
                      (double)v[i], (double)want[i]);
    }
    free(v);
    cg_release(t);
}

/* t (int64, or int32 / bool read as such) holds want; t released */
static void expect_i(cg_tensor *t, int64_t n, const int64_t *want, const char *what)
{
    ck_assert_msg(t != NULL, "%s: %s", what, cg_last_error());
    ck_assert_msg(cg_numel(t) == n, "%s: %lld elements, expected %lld", what,
                  (long long)cg_numel(t), (long long)n);
    cg_tensor *c = cg_k_to(t, CG_I64), *d = cg_k_contiguous(c);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(cg_data_i64(d)[i] == want[i], "%s: element %lld is %lld, expected %lld", what,
                      (long long)i, (long long)cg_data_i64(d)[i], (long long)want[i]);
    cg_release_all(3, c, d, t);
}

/* x's gradient of sum(y * w) (y released) */
static float *grad_of(cg_tensor *x, cg_tensor *y, const float *w)
{
    ck_assert_msg(y != NULL, "%s", cg_last_error());
    cg_tensor *wt = cg_from_data(y->ndim, y->shape, w), *p = cg_mul(y, wt), *l = cg_sum_all(p);
    cg_zero_grad(x);
    ck_assert_msg(cg_backward(l, NULL, false), "%s", cg_last_error());
    float *g = cg_test_values(x->grad);
    cg_release_all(4, wt, p, l, y);
    return g;
}

static void expect_grad(float *g, int n, const float *want, const char *what)
{
    for (int i = 0; i < n; i++)
        ck_assert_msg(g[i] == want[i], "%s: gradient %d is %.9g, expected %.9g", what, i,
                      (double)g[i], (double)want[i]);
    free(g);
}

/* ------------------------------------------------------- masked ops */
START_TEST(test_masked_select)
{
    cg_tensor *x =
        cg_requires_grad(cg_from_data(CG_SHAPE(2, 3), (const float[]){1, 2, 3, 4, 5, 6}), true);
    cg_tensor *m = cg_test_mask(CG_SHAPE(3), (const uint8_t[]){1, 0, 1});
    expect_f(cg_masked_select(x, m), 4, (const float[]){1, 3, 4, 6}, "mask broadcast over rows");
    expect_grad(grad_of(x, cg_masked_select(x, m), (const float[]){1, 2, 3, 4}), 6,
                (const float[]){1, 0, 2, 3, 0, 4}, "masked_select gradient");
    /* a 0-d x broadcast to the mask: its gradient the sum of the picks */
    cg_tensor *s = cg_requires_grad(cg_full(0, NULL, 3.0f), true);
    expect_f(cg_masked_select(s, m), 2, (const float[]){3, 3}, "0-d x");
    expect_grad(grad_of(s, cg_masked_select(s, m), (const float[]){2, 5}), 1, (const float[]){7},
                "0-d x gradient");
    /* a transposed x and a [2, 1] mask: rows of the view */
    cg_tensor *t = cg_transpose(x, 0, 1); /* [[1, 4], [2, 5], [3, 6]] */
    cg_tensor *m2 = cg_test_mask(CG_SHAPE(3, 1), (const uint8_t[]){0, 1, 1});
    expect_f(cg_masked_select(t, m2), 4, (const float[]){2, 5, 3, 6}, "transposed x");
    /* every dtype: the values exactly, in x's dtype */
    cg_tensor *xi = cg_from_i64(CG_SHAPE(3), (const int64_t[]){-7, 1LL << 60, 9});
    cg_tensor *pi = cg_masked_select(xi, m);
    ck_assert(pi && pi->dtype == CG_I64 && cg_data_i64(pi)[1] == 9);
    expect_i(pi, 2, (const int64_t[]){-7, 9}, "int64");
    cg_tensor *xb = cg_k_to(x, CG_BF16), *pb = cg_masked_select(xb, m);
    ck_assert(pb && pb->dtype == CG_BF16);
    expect_f(pb, 4, (const float[]){1, 3, 4, 6}, "bfloat16");
    cg_tensor *none = cg_test_mask(CG_SHAPE(3), NULL);
    expect_f(cg_masked_select(x, none), 0, NULL, "nothing selected");
    /* refusals */
    cg_tensor *mi = cg_k_to(m, CG_I64), *m4 = cg_test_mask(CG_SHAPE(4), NULL);
    CG_ASSERT_REFUSED_LINE(cg_masked_select(x, mi),
                           "masked_select: the mask is int64, expected bool");
    CG_ASSERT_REFUSED_LINE(cg_masked_select(x, m4), "cannot be broadcast");
    CG_ASSERT_REFUSED_LINE(cg_masked_select(NULL, m), "masked_select");
    cg_release_all(6, x, s, t, xi, xb, mi); /* the masks: the runner's */
}
END_TEST

START_TEST(test_masked_scatter)
{
    cg_tensor *x =
        cg_requires_grad(cg_from_data(CG_SHAPE(2, 3), (const float[]){1, 2, 3, 4, 5, 6}), true);
    cg_tensor *src =
        cg_requires_grad(cg_from_data(CG_SHAPE(2, 3), (const float[]){9, 8, 7, 6, 5, 4}), true);
    cg_tensor *m = cg_test_mask(CG_SHAPE(3), (const uint8_t[]){1, 0, 1});
    expect_f(cg_masked_scatter(x, m, src), 6, (const float[]){9, 2, 8, 7, 5, 6}, "scatter");
    const float w[6] = {1, 2, 3, 4, 5, 6};
    expect_grad(grad_of(x, cg_masked_scatter(x, m, src), w), 6, (const float[]){0, 2, 0, 0, 5, 0},
                "x's gradient: zeros where the mask holds");
    expect_grad(grad_of(src, cg_masked_scatter(x, m, src), w), 6, (const float[]){1, 3, 4, 6, 0, 0},
                "source's: the picks in order, then zeros");
    /* x [2, 1] broadcast with a [3] mask: the output [2, 3], x's gradient summed */
    cg_tensor *c = cg_requires_grad(cg_from_data(CG_SHAPE(2, 1), (const float[]){1, 2}), true);
    expect_f(cg_masked_scatter(c, m, src), 6, (const float[]){9, 1, 8, 7, 2, 6}, "broadcast x");
    expect_grad(grad_of(c, cg_masked_scatter(c, m, src), w), 2, (const float[]){2, 5},
                "broadcast x's gradient");
    /* the source exactly as large as needed; none needed; an int64 copy */
    cg_tensor *s4 = cg_from_data(CG_SHAPE(4), (const float[]){-1, -2, -3, -4});
    expect_f(cg_masked_scatter(x, m, s4), 6, (const float[]){-1, 2, -2, -3, 5, -4}, "exact size");
    cg_tensor *e = cg_zeros(CG_SHAPE(0)), *none = cg_test_mask(CG_SHAPE(3), NULL);
    expect_f(cg_masked_scatter(x, none, e), 6, (const float[]){1, 2, 3, 4, 5, 6}, "no pick");
    cg_tensor *xi = cg_from_i64(CG_SHAPE(3), (const int64_t[]){1, 2, 3});
    cg_tensor *si = cg_from_i64(CG_SHAPE(2), (const int64_t[]){1LL << 62, 5});
    expect_i(cg_masked_scatter(xi, m, si), 3, (const int64_t[]){1LL << 62, 2, 5}, "int64");
    ck_assert_int_eq(cg_data_i64(xi)[0], 1); /* x itself untouched */
    /* refusals */
    cg_tensor *s1 = cg_from_data(CG_SHAPE(1), (const float[]){9});
    CG_ASSERT_REFUSED_LINE(cg_masked_scatter(x, m, s1),
                           "masked_scatter: the source has 1 elements, fewer than the mask's 4");
    CG_ASSERT_REFUSED_LINE(cg_masked_scatter(x, m, si), "the source is int64, expected the "
                                                        "input's dtype float32");
    cg_tensor *mi = cg_k_to(m, CG_I64);
    CG_ASSERT_REFUSED_LINE(cg_masked_scatter(x, mi, src), "the mask is int64, expected bool");
    cg_release_all(9, x, src, c, s4, e, xi, si, s1, mi);
}
END_TEST

/* gradchecks: masked_select on a transposed x and a broadcast x,
 * masked_scatter in x and the source (a broadcast x, a longer source) */
enum { GM_SELECT, GM_SELECT_BCAST, GM_SCATTER, GM_SCATTER_BCAST };
typedef struct {
    int c;
    cg_tensor *mask;
} masked_case;
static cg_tensor *masked_fn(void *ctx, cg_tensor *const *in)
{
    const masked_case *k = ctx;
    if (k->c == GM_SELECT || k->c == GM_SELECT_BCAST)
        return cg_masked_select(in[0], k->mask);
    return cg_masked_scatter(in[0], k->mask, in[1]);
}

START_TEST(test_masked_gradcheck)
{
    cg_rng r = cg_rng_new(31);
    cg_tensor *m =
        cg_test_mask(CG_SHAPE(3, 4), (const uint8_t[]){1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 1});
    for (int c = GM_SELECT; c <= GM_SCATTER_BCAST; c++) {
        const bool bcast = c == GM_SELECT_BCAST || c == GM_SCATTER_BCAST;
        masked_case k = {c, m};
        cg_tensor *in[2];
        in[0] = bcast ? cg_test_randn_layout(&r, CG_SHAPE(3, 1), 0)
                      : cg_test_randn_layout(&r, CG_SHAPE(3, 4), 1);
        in[1] = cg_test_randn_layout(&r, CG_SHAPE(2, 5), c == GM_SCATTER ? 1 : 0);
        cg_requires_grad(in[0], true);
        cg_requires_grad(in[1], true);
        const int n = c >= GM_SCATTER ? 2 : 1;
        cg_gradcheck_opts o = cg_gradcheck_defaults();
        cg_gradcheck_report rep;
        ck_assert_msg(cg_gradcheck(masked_fn, &k, n, in, &o, &rep), "case %d: %s", c, rep.message);
        ck_assert(rep.checked > 0);
        cg_test_check_unread(masked_fn, &k, n, in, "masked"); /* the reads masks */
        cg_release_all(2, in[0], in[1]);
    }
}
END_TEST

/* ------------------------------------------------- searchsorted */
START_TEST(test_searchsorted)
{
    const float nan = NAN, inf = INFINITY;
    cg_tensor *s = cg_from_data(CG_SHAPE(5), (const float[]){1, 2, 2, 3, nan});
    cg_tensor *v = cg_from_data(CG_SHAPE(2, 4), (const float[]){0, 2, 2.5f, 3, 4, nan, inf, -inf});
    /* PyTorch's binary search: a NaN in the sequence counts as below the
     * value it meets, so 2.5 and 4 go past it */
    expect_i(cg_searchsorted(s, v, NULL), 8, (const int64_t[]){0, 1, 5, 5, 5, 5, 5, 0}, "left");
    expect_i(cg_searchsorted(s, v, &(cg_search_opts){.right = true}), 8,
             (const int64_t[]){0, 5, 5, 5, 5, 5, 5, 0}, "right");
    cg_tensor *t = cg_from_data(CG_SHAPE(4), (const float[]){1, 2, 2, 3});
    cg_tensor *two = cg_from_data(CG_SHAPE(1), (const float[]){2});
    expect_i(cg_searchsorted(t, two, &(cg_search_opts){.side = "right"}), 1, (const int64_t[]){3},
             "side right");
    expect_i(cg_searchsorted(t, two, &(cg_search_opts){.side = "left"}), 1, (const int64_t[]){1},
             "side left");
    cg_tensor *i32 = cg_searchsorted(t, two, &(cg_search_opts){.out_int32 = true});
    ck_assert(i32 && i32->dtype == CG_I32 && cg_data_i32(i32)[0] == 1);
    cg_release(i32);
    /* N-d: each row of values searched in its row of the sequence */
    cg_tensor *s2 = cg_from_data(CG_SHAPE(2, 3), (const float[]){1, 2, 3, 4, 5, 6});
    cg_tensor *v2 = cg_from_data(CG_SHAPE(2, 2), (const float[]){2.5f, 0, 4.5f, 7});
    expect_i(cg_searchsorted(s2, v2, NULL), 4, (const int64_t[]){2, 0, 1, 3}, "rows");
    /* a 1-d sequence, values of any shape, 0-d too */
    cg_tensor *v0 = cg_test_scalar(2.5f);
    cg_tensor *p0 = cg_searchsorted(t, v0, NULL);
    ck_assert(p0 && p0->ndim == 0);
    expect_i(p0, 1, (const int64_t[]){3}, "0-d value");
    /* sorter: the order of an unsorted sequence */
    cg_tensor *u = cg_from_data(CG_SHAPE(3), (const float[]){3, 1, 2});
    cg_tensor *so = cg_from_i64(CG_SHAPE(3), (const int64_t[]){1, 2, 0});
    cg_tensor *vu = cg_from_data(CG_SHAPE(3), (const float[]){2.5f, 0, 4});
    expect_i(cg_searchsorted(u, vu, &(cg_search_opts){.sorter = so}), 3, (const int64_t[]){2, 0, 3},
             "sorter");
    /* mixed dtypes meet in their promoted dtype; integers exactly */
    cg_tensor *si = cg_from_i64(CG_SHAPE(3), (const int64_t[]){1, 2, 3});
    cg_tensor *big =
        cg_from_i64(CG_SHAPE(3), (const int64_t[]){(1LL << 60), (1LL << 60) + 1, (1LL << 60) + 2});
    cg_tensor *bv = cg_from_i64(CG_SHAPE(1), (const int64_t[]){(1LL << 60) + 1});
    expect_i(cg_searchsorted(si, vu, NULL), 3, (const int64_t[]){2, 0, 3}, "int64 in float32");
    expect_i(cg_searchsorted(big, bv, NULL), 1, (const int64_t[]){1}, "int64 exactly");
    cg_tensor *e = cg_zeros(CG_SHAPE(0));
    expect_i(cg_searchsorted(e, vu, NULL), 3, (const int64_t[]){0, 0, 0}, "empty sequence");
    /* bucketize: searchsorted in 1-d boundaries */
    cg_tensor *in = cg_from_data(CG_SHAPE(2, 2), (const float[]){0, 2, 2.5f, nan});
    cg_tensor *bd = cg_from_data(CG_SHAPE(3), (const float[]){1, 2, 3});
    expect_i(cg_bucketize(in, bd, false, false), 4, (const int64_t[]){0, 1, 2, 3}, "bucketize");
    expect_i(cg_bucketize(in, bd, true, true), 4, (const int64_t[]){0, 2, 2, 3}, "right int32");
    /* refusals */
    cg_tensor *ba = cg_test_mask(CG_SHAPE(2), NULL), *so32 = cg_k_to(so, CG_I32);
    cg_tensor *so2 = cg_from_i64(CG_SHAPE(2), (const int64_t[]){0, 1});
    cg_tensor *sobad = cg_from_i64(CG_SHAPE(3), (const int64_t[]){1, 2, 5});
    cg_tensor *v3 = cg_zeros(CG_SHAPE(3, 2));
    CG_ASSERT_REFUSED_LINE(cg_searchsorted(t, two, &(cg_search_opts){.side = "x"}),
                           "side can only be 'left' or 'right' but got 'x'");
    CG_ASSERT_REFUSED_LINE(
        cg_searchsorted(t, two, &(cg_search_opts){.side = "left", .right = true}),
        "side and right can't be set to opposites");
    CG_ASSERT_REFUSED_LINE(cg_searchsorted(v0, two, NULL), "at least one dimension");
    CG_ASSERT_REFUSED_LINE(cg_searchsorted(s2, v3, NULL),
                           "must be 1-d or share all but its last dim");
    CG_ASSERT_REFUSED_LINE(cg_searchsorted(s2, two, NULL), "must be 1-d or share");
    CG_ASSERT_REFUSED_LINE(cg_searchsorted(ba, ba, NULL), "bool sequences and values");
    CG_ASSERT_REFUSED_LINE(cg_searchsorted(u, vu, &(cg_search_opts){.sorter = so32}),
                           "sorter must be a tensor of long dtype but got dtype int32");
    CG_ASSERT_REFUSED_LINE(cg_searchsorted(u, vu, &(cg_search_opts){.sorter = so2}),
                           "boundary and sorter must have the same size");
    CG_ASSERT_REFUSED_LINE(cg_searchsorted(u, vu, &(cg_search_opts){.sorter = sobad}),
                           "sorter holds 5 at 2, out of range [0, 3)");
    CG_ASSERT_REFUSED_LINE(cg_bucketize(in, s2, false, false),
                           "bucketize: boundaries tensor must be 1 dimension, but got dim(2)");
    CG_ASSERT_REFUSED_LINE(cg_bucketize(ba, ba, false, false), "bucketize: searchsorted: bool");
    cg_release_all(19, s, v, t, two, s2, v2, u, so, vu, si, big, bv, e, in, bd, so32, so2, sobad,
                   v3);
}
END_TEST

/* ----------------------------------------------------- bincount, histc */
START_TEST(test_bincount)
{
    cg_tensor *x = cg_from_i64(CG_SHAPE(4), (const int64_t[]){0, 1, 1, 3});
    cg_tensor *c = cg_bincount(x, NULL, 0);
    ck_assert(c && c->dtype == CG_I64);
    expect_i(c, 4, (const int64_t[]){1, 2, 0, 1}, "counts");
    expect_i(cg_bincount(x, NULL, 6), 6, (const int64_t[]){1, 2, 0, 1, 0, 0}, "minlength");
    cg_tensor *x32 = cg_k_to(x, CG_I32);
    expect_i(cg_bincount(x32, NULL, 2), 4, (const int64_t[]){1, 2, 0, 1}, "int32 ids");
    cg_tensor *w = cg_from_data(CG_SHAPE(4), (const float[]){0.5f, 1, 2, -3});
    expect_f(cg_bincount(x, w, 0), 4, (const float[]){0.5f, 3, 0, -3}, "weights");
    /* the weights added in index order in float32 (PyTorch's bits: 0 here) */
    cg_tensor *z = cg_from_i64(CG_SHAPE(3), (const int64_t[]){0, 0, 0});
    cg_tensor *wz = cg_from_data(CG_SHAPE(3), (const float[]){1e8f, 1, -1e8f});
    expect_f(cg_bincount(z, wz, 0), 1, (const float[]){0}, "float32 sums in order");
    /* no ids: int64 zeros of minlength, with weights too (PyTorch's) */
    cg_tensor *e = cg_test_ids(0, NULL), *ew = cg_zeros(CG_SHAPE(0));
    cg_tensor *ce = cg_bincount(e, ew, 3);
    ck_assert(ce && ce->dtype == CG_I64);
    expect_i(ce, 3, (const int64_t[]){0, 0, 0}, "empty");
    /* refusals */
    cg_tensor *neg = cg_from_i64(CG_SHAPE(2), (const int64_t[]){0, -1});
    cg_tensor *xf = cg_k_to(x, CG_F32), *x2 = cg_from_i64(CG_SHAPE(1, 2), (const int64_t[]){0, 1});
    cg_tensor *wb = cg_k_to(w, CG_BF16), *w3 = cg_zeros(CG_SHAPE(3));
    CG_ASSERT_REFUSED_LINE(cg_bincount(neg, NULL, 0), "non-negative integral inputs");
    CG_ASSERT_REFUSED_LINE(cg_bincount(xf, NULL, 0), "the input is float32, expected int64");
    CG_ASSERT_REFUSED_LINE(cg_bincount(x2, NULL, 0), "only supports 1-d");
    CG_ASSERT_REFUSED_LINE(cg_bincount(x, NULL, -1), "minlength should be >= 0");
    CG_ASSERT_REFUSED_LINE(cg_bincount(x, w3, 0), "weights should be 1-d and have the same "
                                                  "length as input");
    CG_ASSERT_REFUSED_LINE(cg_bincount(x, wb, 0), "weights are bfloat16; PyTorch counts");
    /* weights that require grad: refused in grad mode, counted without it */
    cg_requires_grad(w, true);
    CG_ASSERT_REFUSED_LINE(cg_bincount(x, w, 0), "bincount: weights requires grad");
    cg_no_grad_begin();
    expect_f(cg_bincount(x, w, 0), 4, (const float[]){0.5f, 3, 0, -3}, "no grad");
    cg_no_grad_end();
    cg_release_all(12, x, x32, w, z, wz, ew, neg, xf, x2, wb, w3, NULL);
}
END_TEST

START_TEST(test_histc)
{
    const float nan = NAN, inf = INFINITY;
    /* PyTorch's interpolation in float32: 0.3 and 0.7 land on 3 and 7 */
    cg_tensor *x =
        cg_from_data(CG_SHAPE(7), (const float[]){0, 0.1f, 0.2f, 0.3f, 0.7f, 1, 0.9999999f});
    expect_f(cg_histc(x, 10, 0, 1), 10, (const float[]){1, 1, 1, 1, 0, 0, 0, 1, 0, 2}, "edges");
    cg_tensor *y = cg_from_data(CG_SHAPE(2, 2), (const float[]){1, 2, 1, 4});
    expect_f(cg_histc(y, 4, 0, 3), 4, (const float[]){0, 2, 1, 0}, "4 outside");
    expect_f(cg_histc(y, 4, 0, 0), 4, (const float[]){2, 1, 0, 1}, "the data's range");
    cg_tensor *c = cg_from_data(CG_SHAPE(2), (const float[]){1, 1});
    expect_f(cg_histc(c, 4, 0, 0), 4, (const float[]){0, 0, 2, 0}, "one value: widened by 1");
    cg_tensor *n = cg_from_data(CG_SHAPE(3), (const float[]){1, nan, 2});
    cg_tensor *i = cg_from_data(CG_SHAPE(3), (const float[]){1, inf, 2});
    /* NaN left out (PyTorch 1.13 counts it in the first bin, its index
     * arithmetic's accident; later PyTorch leaves it out) */
    expect_f(cg_histc(n, 4, 0, 3), 4, (const float[]){0, 1, 1, 0}, "NaN left out");
    expect_f(cg_histc(i, 4, 0, 3), 4, (const float[]){0, 1, 1, 0}, "inf left out");
    cg_tensor *e = cg_zeros(CG_SHAPE(0));
    expect_f(cg_histc(e, 3, 0, 0), 3, (const float[]){0, 0, 0}, "empty: [-1, 1]");
    cg_tensor *xb = cg_k_to(y, CG_BF16), *hb = cg_histc(xb, 4, 0, 0);
    ck_assert(hb && hb->dtype == CG_BF16);
    expect_f(hb, 4, (const float[]){2, 1, 0, 1}, "bfloat16");
    /* a count beyond bfloat16's 256 steps, rounded once (PyTorch's: 256) */
    cg_tensor *many = cg_zeros_dtype(CG_BF16, CG_SHAPE(300));
    expect_f(cg_histc(many, 1, -1, 1), 1, (const float[]){300}, "300 in one bin");
    /* refusals */
    cg_tensor *yi = cg_k_to(y, CG_I64), *yh = cg_k_to(y, CG_F16);
    CG_ASSERT_REFUSED_LINE(cg_histc(n, 4, 0, 0), "histc: range of [nan, nan] is not finite");
    CG_ASSERT_REFUSED_LINE(cg_histc(i, 4, 0, 0), "range of [1, inf] is not finite");
    CG_ASSERT_REFUSED_LINE(cg_histc(y, 4, -INFINITY, 1), "is not finite");
    CG_ASSERT_REFUSED_LINE(cg_histc(y, 4, 3, 1), "max must be larger than min");
    CG_ASSERT_REFUSED_LINE(cg_histc(y, 0, 0, 1), "bins must be > 0, but got 0");
    CG_ASSERT_REFUSED_LINE(cg_histc(yi, 4, 0, 1), "the input is int64, expected a float");
    expect_f(cg_histc(yh, 4, 0, 0), 4, (const float[]){2, 1, 0, 1}, "float16"); /* float32 */
    /* no gradient, as PyTorch's: a result outside the graph */
    cg_requires_grad(y, true);
    cg_tensor *h = cg_histc(y, 2, 0, 0);
    ck_assert(h && !h->requires_grad && !h->node);
    cg_release_all(10, x, y, c, n, i, e, xb, many, yi, yh);
    cg_release(h);
}
END_TEST

/* ------------------------------------------------------------ unique */
START_TEST(test_unique)
{
    const float nan = NAN, inf = INFINITY;
    cg_tensor *x = cg_from_data(CG_SHAPE(2, 4), (const float[]){3, 1, nan, 1, -0.0f, 0, nan, inf});
    cg_tensor *inv, *cnt;
    /* ascending; -0 and 0 one (the first met); each NaN its own, last */
    expect_f(cg_unique(x, true, &inv, &cnt), 6, (const float[]){-0.0f, 1, 3, inf, nan, nan},
             "values");
    ck_assert(inv && inv->ndim == 2 && inv->shape[1] == 4);
    expect_i(inv, 8, (const int64_t[]){2, 1, 4, 1, 0, 0, 5, 3}, "inverse");
    expect_i(cnt, 6, (const int64_t[]){2, 2, 1, 1, 1, 1}, "counts");
    expect_f(cg_unique(x, false, NULL, NULL), 6, (const float[]){-0.0f, 1, 3, inf, nan, nan},
             "sorted = false sorts too");
    /* 0-d: [1], a 0-d inverse; empty; bool; int64 exactly */
    cg_tensor *s = cg_test_scalar(3.0f);
    expect_f(cg_unique(s, true, &inv, &cnt), 1, (const float[]){3}, "0-d");
    ck_assert(inv && inv->ndim == 0);
    expect_i(inv, 1, (const int64_t[]){0}, "0-d inverse");
    expect_i(cnt, 1, (const int64_t[]){1}, "0-d counts");
    cg_tensor *e = cg_zeros(CG_SHAPE(0));
    expect_f(cg_unique(e, true, &inv, &cnt), 0, NULL, "empty");
    expect_i(inv, 0, NULL, "empty inverse");
    expect_i(cnt, 0, NULL, "empty counts");
    cg_tensor *b = cg_test_mask(CG_SHAPE(3), (const uint8_t[]){1, 0, 1});
    cg_tensor *ub = cg_unique(b, true, &inv, NULL);
    ck_assert(ub && ub->dtype == CG_BOOL);
    expect_i(ub, 2, (const int64_t[]){0, 1}, "bool");
    expect_i(inv, 3, (const int64_t[]){1, 0, 1}, "bool inverse");
    cg_tensor *xi =
        cg_from_i64(CG_SHAPE(3), (const int64_t[]){(1LL << 60) + 1, 1LL << 60, (1LL << 60) + 1});
    expect_i(cg_unique(xi, true, NULL, &cnt), 2, (const int64_t[]){1LL << 60, (1LL << 60) + 1},
             "int64 exactly");
    expect_i(cnt, 2, (const int64_t[]){1, 2}, "int64 counts");
    /* along a dim: the distinct rows, sorted by their elements */
    cg_tensor *y = cg_from_i64(CG_SHAPE(4, 2), (const int64_t[]){1, 2, 0, 5, 1, 2, 0, 1});
    expect_i(cg_unique_dim(y, 0, true, &inv, &cnt), 6, (const int64_t[]){0, 1, 0, 5, 1, 2}, "rows");
    expect_i(inv, 4, (const int64_t[]){2, 1, 2, 0}, "rows' inverse");
    expect_i(cnt, 3, (const int64_t[]){1, 1, 2}, "rows' counts");
    cg_tensor *z = cg_from_i64(CG_SHAPE(2, 3), (const int64_t[]){1, 2, 1, 0, 5, 0});
    cg_tensor *uz = cg_unique_dim(z, -1, true, &inv, &cnt);
    ck_assert(uz && uz->shape[0] == 2 && uz->shape[1] == 2);
    expect_i(uz, 4, (const int64_t[]){1, 2, 0, 5}, "columns");
    expect_i(inv, 3, (const int64_t[]){0, 1, 0}, "columns' inverse");
    expect_i(cnt, 2, (const int64_t[]){2, 1}, "columns' counts");
    cg_tensor *r = cg_from_data(CG_SHAPE(3, 2), (const float[]){nan, 1, nan, 1, 0, 0});
    expect_f(cg_unique_dim(r, 0, true, &inv, &cnt), 6, (const float[]){0, 0, nan, 1, nan, 1},
             "NaN rows distinct, last");
    expect_i(inv, 3, (const int64_t[]){1, 2, 0}, "NaN rows' inverse");
    expect_i(cnt, 3, (const int64_t[]){1, 1, 1}, "NaN rows' counts");
    /* empty along the dim: empty results; empty elsewhere: refused */
    cg_tensor *e03 = cg_zeros(CG_SHAPE(0, 3)), *e30 = cg_zeros(CG_SHAPE(3, 0));
    cg_tensor *u03 = cg_unique_dim(e03, 0, true, &inv, &cnt);
    ck_assert(u03 && u03->shape[0] == 0 && u03->shape[1] == 3);
    expect_i(inv, 0, NULL, "empty rows' inverse");
    cg_release_all(2, u03, cnt);
    cg_tensor *u30 = cg_unique_dim(e30, 1, true, NULL, NULL);
    ck_assert(u30 && u30->shape[0] == 3 && u30->shape[1] == 0);
    cg_release(u30);
    /* unique_consecutive: runs of equal neighbours */
    cg_tensor *q = cg_from_data(CG_SHAPE(9), (const float[]){1, 1, nan, nan, 2, 2, 1, -0.0f, 0});
    expect_f(cg_unique_consecutive(q, &inv, &cnt), 6, (const float[]){1, nan, nan, 2, 1, -0.0f},
             "runs");
    expect_i(inv, 9, (const int64_t[]){0, 0, 1, 2, 3, 3, 4, 5, 5}, "runs' inverse");
    expect_i(cnt, 6, (const int64_t[]){2, 1, 1, 2, 1, 2}, "runs' counts");
    expect_i(cg_unique_consecutive_dim(y, 0, &inv, &cnt), 8,
             (const int64_t[]){1, 2, 0, 5, 1, 2, 0, 1}, "no two rows alike in a row");
    expect_i(inv, 4, (const int64_t[]){0, 1, 2, 3}, "consecutive rows' inverse");
    expect_i(cnt, 4, (const int64_t[]){1, 1, 1, 1}, "consecutive rows' counts");
    cg_tensor *yy = cg_from_i64(CG_SHAPE(3, 1), (const int64_t[]){4, 4, 2});
    expect_i(cg_unique_consecutive_dim(yy, 0, NULL, &cnt), 2, (const int64_t[]){4, 2},
             "equal rows in a row");
    expect_i(cnt, 2, (const int64_t[]){2, 1}, "their counts");
    /* refusals */
    cg_tensor *e00 = cg_zeros(CG_SHAPE(0, 0));
    CG_ASSERT_REFUSED_LINE(cg_unique_dim(s, 0, true, NULL, NULL), "the tensor has no dimensions");
    CG_ASSERT_REFUSED_LINE(cg_unique_dim(y, 2, true, NULL, NULL), "unique: dim 2 out of range");
    CG_ASSERT_REFUSED_LINE(cg_unique_dim(e30, 0, true, NULL, NULL),
                           "there are 0-sized dimensions, and they aren't selected");
    CG_ASSERT_REFUSED_LINE(cg_unique_consecutive_dim(e00, 0, NULL, NULL),
                           "more than one zero-sized dimension");
    cg_requires_grad(x, true);
    inv = cnt = (cg_tensor *)&cnt; /* set to NULL on a refusal */
    CG_ASSERT_REFUSED_LINE(cg_unique(x, true, &inv, &cnt), "unique: x requires grad");
    ck_assert(inv == NULL && cnt == NULL);
    CG_ASSERT_REFUSED_LINE(cg_unique_consecutive(x, NULL, NULL), "unique_consecutive: x requires");
    cg_tensor *dx = cg_detach(x);
    expect_f(cg_unique(dx, true, NULL, NULL), 6, (const float[]){-0.0f, 1, 3, inf, nan, nan},
             "detached");
    cg_release_all(12, x, e, xi, y, z, r, e03, e30, q, yy, e00, dx);
}
END_TEST

/* ---------------------------------------------- integer sorts, msort */
START_TEST(test_int_sorts)
{
    cg_tensor *x = cg_from_i64(CG_SHAPE(5), (const int64_t[]){3, 1, 2, 1, -5}), *ids;
    cg_tensor *v = cg_sort(x, 0, false, true, &ids);
    ck_assert(v && v->dtype == CG_I64 && !v->requires_grad);
    expect_i(v, 5, (const int64_t[]){-5, 1, 1, 2, 3}, "ascending");
    expect_i(ids, 5, (const int64_t[]){4, 1, 3, 2, 0}, "ties in order");
    expect_i(cg_sort(x, -1, true, false, &ids), 5, (const int64_t[]){3, 2, 1, 1, -5}, "descending");
    expect_i(ids, 5, (const int64_t[]){0, 2, 1, 3, 4}, "descending ids");
    expect_i(cg_argsort(x, 0, true, true), 5, (const int64_t[]){0, 2, 1, 3, 4}, "argsort");
    /* int64 beyond float's precision, exactly */
    cg_tensor *big =
        cg_from_i64(CG_SHAPE(3), (const int64_t[]){1LL << 62, (1LL << 62) + 1, (1LL << 62) - 1});
    expect_i(cg_sort(big, 0, false, true, &ids), 3,
             (const int64_t[]){(1LL << 62) - 1, 1LL << 62, (1LL << 62) + 1}, "big");
    expect_i(ids, 3, (const int64_t[]){2, 0, 1}, "big ids");
    /* int32 keeps its dtype; bool sorts; a transposed int matrix */
    cg_tensor *x32 = cg_k_to(x, CG_I32), *v32 = cg_sort(x32, 0, false, true, NULL);
    ck_assert(v32 && v32->dtype == CG_I32);
    expect_i(v32, 5, (const int64_t[]){-5, 1, 1, 2, 3}, "int32");
    cg_tensor *b = cg_test_mask(CG_SHAPE(3), (const uint8_t[]){1, 0, 1});
    cg_tensor *vb = cg_sort(b, 0, false, true, &ids);
    ck_assert(vb && vb->dtype == CG_BOOL);
    expect_i(vb, 3, (const int64_t[]){0, 1, 1}, "bool");
    expect_i(ids, 3, (const int64_t[]){1, 0, 2}, "bool ids");
    cg_tensor *m = cg_from_i64(CG_SHAPE(2, 3), (const int64_t[]){2, 0, -1, 1, 5, 1});
    cg_tensor *mt = cg_view_transpose(m, 0, 1);
    expect_i(cg_sort(mt, 0, false, true, &ids), 6, (const int64_t[]){-1, 1, 0, 1, 2, 5},
             "dim 0 of .T");
    expect_i(ids, 6, (const int64_t[]){2, 0, 1, 2, 0, 1}, "dim 0 of .T ids");
    /* topk of integers: the first k of the stable order; bool refused */
    expect_i(cg_topk(x, 2, 0, true, &ids), 2, (const int64_t[]){3, 2}, "topk");
    expect_i(ids, 2, (const int64_t[]){0, 2}, "topk ids");
    expect_i(cg_topk(x, 3, 0, false, &ids), 3, (const int64_t[]){-5, 1, 1}, "topk smallest");
    expect_i(ids, 3, (const int64_t[]){4, 1, 3}, "topk smallest ids");
    cg_tensor *s = cg_scalar_i64(7);
    cg_tensor *t0 = cg_topk(s, 0, 0, true, &ids);
    ck_assert(t0 && t0->ndim == 1 && t0->shape[0] == 0 && ids->shape[0] == 0);
    cg_release_all(2, t0, ids);
    CG_ASSERT_REFUSED_LINE(cg_topk(b, 1, 0, true, NULL), "topk: bool tensors are not supported");
    /* cummax and cummin: a tie takes the later index */
    expect_i(cg_cummax(x, 0, &ids), 5, (const int64_t[]){3, 3, 3, 3, 3}, "cummax");
    expect_i(ids, 5, (const int64_t[]){0, 0, 0, 0, 0}, "cummax ids");
    expect_i(cg_cummin(x, 0, &ids), 5, (const int64_t[]){3, 1, 1, 1, -5}, "cummin");
    expect_i(ids, 5, (const int64_t[]){0, 1, 1, 3, 4}, "cummin ids");
    cg_tensor *b4 = cg_test_mask(CG_SHAPE(4), (const uint8_t[]){0, 1, 0, 1});
    expect_i(cg_cummax(b4, 0, &ids), 4, (const int64_t[]){0, 1, 1, 1}, "bool cummax");
    expect_i(ids, 4, (const int64_t[]){0, 1, 1, 3}, "bool cummax ids");
    /* msort: sort along dim 0, the values, differentiable for floats */
    cg_tensor *f =
        cg_requires_grad(cg_from_data(CG_SHAPE(3, 2), (const float[]){3, 1, 1, 2, 2, 0}), true);
    expect_f(cg_msort(f), 6, (const float[]){1, 0, 2, 1, 3, 2}, "msort");
    expect_grad(grad_of(f, cg_msort(f), (const float[]){1, 2, 3, 4, 5, 6}), 6,
                (const float[]){5, 4, 1, 6, 3, 2}, "msort gradient");
    expect_i(cg_msort(m), 6, (const int64_t[]){1, 0, -1, 2, 5, 1}, "msort int64");
    cg_tensor *f0 = cg_test_scalar(3.0f);
    expect_f(cg_msort(f0), 1, (const float[]){3}, "msort 0-d");
    cg_release_all(7, x, big, x32, m, mt, s, f);
}
END_TEST

static Suite *select_suite(void)
{
    Suite *s = suite_create("select");
    TCase *tc = tcase_create("select");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_masked_select);
    tcase_add_test(tc, test_masked_scatter);
    tcase_add_test(tc, test_masked_gradcheck);
    tcase_add_test(tc, test_searchsorted);
    tcase_add_test(tc, test_bincount);
    tcase_add_test(tc, test_histc);
    tcase_add_test(tc, test_unique);
    tcase_add_test(tc, test_int_sorts);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {select_suite()};
    return cg_test_run(s, 1);
}
