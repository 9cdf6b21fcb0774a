/* silu, sin, cos, tril, triu, cumsum, topk, argmax, mse_loss,
 * binary_cross_entropy_with_logits, nll_loss, index_add, scatter_add: forward values from PyTorch
 * 1.13 (computed once with /usr/bin/python3, float32, and stored here), and
 * a gradcheck of topk, mse_loss, bce and nll_loss on contiguous and
 * transposed inputs (the others' gradchecks are in tests/test_grad_ops.c's
 * table, op_checks, on every layout). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "tests/testutil.h"

static const float X[12] = {-2.0f, -0.5f, 0.0f, 0.25f,  1.0f, 3.0f,
                            -1.5f, 0.75f, 0.5f, -0.25f, 2.0f, -3.0f};

static cg_tensor *xin(void) { return cg_from_data(CG_SHAPE(3, 4), X); }

static void expect(cg_tensor *t, const float *want, const char *what)
{
    ck_assert_msg(t != NULL, "%s: %s", what, cg_last_error());
    CG_ASSERT_TENSOR(t, want, 1e-6, 1e-6);
    cg_release(t);
}

START_TEST(test_forward_vs_torch)
{
    cg_tensor *x = xin();
    expect(cg_silu(x),
           (const float[]){-0.23840584f, -0.18877034f, 0.0f, 0.14054413f, 0.7310586f, 2.8577225f,
                           -0.27363828f, 0.50938404f, 0.31122968f, -0.10945588f, 1.7615941f,
                           -0.14227761f},
           "silu");
    expect(cg_sin(x),
           (const float[]){-0.90929741f, -0.47942555f, 0.0f, 0.24740396f, 0.84147096f, 0.14112f,
                           -0.997495f, 0.68163878f, 0.47942555f, -0.24740396f, 0.90929741f,
                           -0.14112f},
           "sin");
    expect(cg_cos(x),
           (const float[]){-0.41614684f, 0.87758255f, 1.0f, 0.96891242f, 0.54030234f, -0.9899925f,
                           0.070737198f, 0.73168886f, 0.87758255f, 0.96891242f, -0.41614684f,
                           -0.9899925f},
           "cos");
    expect(cg_tril(x, 0), (const float[]){-2, 0, 0, 0, 1, 3, 0, 0, 0.5f, -0.25f, 2, 0}, "tril");
    expect(cg_triu(x, 1), (const float[]){0, -0.5f, 0, 0.25f, 0, 0, -1.5f, 0.75f, 0, 0, 0, -3},
           "triu 1");
    expect(cg_tril(x, -1), (const float[]){0, 0, 0, 0, 1, 0, 0, 0, 0.5f, -0.25f, 0, 0}, "tril -1");
    expect(cg_cumsum(x, 1),
           (const float[]){-2, -2.5f, -2.5f, -2.25f, 1, 4, 2.5f, 3.25f, 0.5f, 0.25f, 2.25f, -0.75f},
           "cumsum 1");
    expect(cg_cumsum(x, -2),
           (const float[]){-2, -0.5f, 0, 0.25f, -1, 2.5f, -1.5f, 1, -0.5f, 2.25f, 0.5f, -2},
           "cumsum 0");
    /* summed in double, as torch's CPU cumsum (its acc_type): 1e8 + 1 - 1e8
     * is 1 there, 0 in float32 */
    cg_tensor *far = cg_from_data(CG_SHAPE(3), (float[]){1e8f, 1, -1e8f});
    expect(cg_cumsum(far, 0), (const float[]){1e8f, 1e8f, 1}, "cumsum in double");
    cg_release(far);
    cg_tensor *ids = NULL;
    expect(cg_topk(x, 2, 1, true, &ids), (const float[]){0.25f, 0, 3, 1, 2, 0.5f}, "topk");
    ck_assert_int_eq(ids->dtype, CG_I64);
    ck_assert(!memcmp(cg_data_i64(ids), (int64_t[]){3, 2, 1, 0, 2, 0}, 6 * sizeof(int64_t)));
    cg_release(ids);
    expect(cg_topk(x, 2, 0, false, &ids),
           (const float[]){-2, -0.5f, -1.5f, -3, 0.5f, -0.25f, 0, 0.25f}, "topk smallest");
    ck_assert(!memcmp(cg_data_i64(ids), (int64_t[]){0, 0, 1, 2, 2, 2, 0, 0}, 8 * sizeof(int64_t)));
    ck_assert_int_eq(ids->shape[0], 2);
    cg_release(ids);
    ids = cg_argmax(x, 1, false);
    ck_assert(ids->dtype == CG_I64 && ids->ndim == 1);
    ck_assert(!memcmp(cg_data_i64(ids), (int64_t[]){3, 1, 2}, 3 * sizeof(int64_t)));
    cg_release(ids);
    ids = cg_argmax(x, 0, true);
    ck_assert(ids->ndim == 2 && ids->shape[0] == 1);
    ck_assert(!memcmp(cg_data_i64(ids), (int64_t[]){1, 1, 2, 1}, 4 * sizeof(int64_t)));
    cg_release(ids);
    cg_tensor *y = cg_from_data(CG_SHAPE(3, 4),
                                (const float[]){0.5f, 1, -1, 2, 0, 2.5f, -1, 1, 1, 0, 1.5f, -2});
    expect(cg_mse_loss(x, y, CG_REDUCTION_MEAN), (const float[]){1.3072916269302368f}, "mse_loss");
    cg_tensor *t =
        cg_from_data(CG_SHAPE(3, 4), (const float[]){0, 1, 1, 0, 1, 1, 0, 0.5f, 0, 0, 1, 1});
    expect(cg_binary_cross_entropy_with_logits(x, t, CG_REDUCTION_MEAN),
           (const float[]){0.72256303f}, "bce");
    cg_tensor *lp = cg_log_softmax(x, 1);
    expect(cg_nll_loss(lp, cg_test_ids(3, (const int64_t[]){3, 1, -100}), -100, CG_REDUCTION_MEAN),
           (const float[]){0.5409115f}, "nll");
    expect(cg_nll_loss(x, cg_test_ids(3, (const int64_t[]){3, 1, 0}), -100, CG_REDUCTION_MEAN),
           (const float[]){-1.25f}, "nll raw");
    /* errors: counts are checked, names in messages */
    CG_ASSERT_FAILS(cg_topk(x, 5, 1, true, NULL), "k=5 is out of range");
    CG_ASSERT_FAILS(cg_argmax(x, 2, false), "dim 2");
    CG_ASSERT_FAILS(
        cg_nll_loss(lp, cg_test_ids(2, (const int64_t[]){3, 1}), -100, CG_REDUCTION_MEAN),
        "argument 'targets' has shape [2], expected the input's [3, 4]");
    cg_tensor *yt = cg_view_transpose(y, 0, 1), *row = cg_view_select(x, 0, 0);
    CG_ASSERT_FAILS(cg_mse_loss(x, yt, CG_REDUCTION_MEAN), "differ in shape");
    CG_ASSERT_FAILS(cg_tril(row, 0), "tril: needs at least 2 dims");
    cg_release_all(6, x, y, t, lp, yt, row);
}
END_TEST

/* -------------------------------------------------------- gradchecks */
enum { GC_TOPK, GC_MSE, GC_BCE, GC_NLL };
typedef struct {
    int which;
    int64_t k;
    int dim;
    cg_reduction r;
} gc_case;

static const int64_t TGT[6] = {1, 0, 3, -100, 2, 4};

static cg_tensor *gc_fn(void *ctx, cg_tensor *const *in)
{
    const gc_case *c = ctx;
    switch (c->which) {
    case GC_TOPK: return cg_topk(in[0], c->k, c->dim, true, NULL);
    case GC_MSE: return cg_mse_loss(in[0], in[1], c->r);
    case GC_BCE: return cg_binary_cross_entropy_with_logits(in[0], in[1], c->r);
    case GC_NLL: {
        cg_tensor *lp = cg_log_softmax(in[0], -1);
        cg_tensor *l = cg_nll_loss(lp, cg_test_ids(6, TGT), -100, c->r);
        cg_release(lp);
        return l;
    }
    default: return NULL;
    }
}

/* copy_ with a source that requires grad used to cut dst from the graph
 * silently (issue 22): it is refused in grad mode, dst untouched; under
 * no-grad, or with a detached source, it copies. A destination that is an
 * op's output is refused. */
START_TEST(test_copy_refuses_grad_source)
{
    cg_tensor *w = cg_from_data(CG_SHAPE(3), (const float[]){1, 2, 3});
    cg_requires_grad(w, true);
    cg_tensor *y = cg_muls(w, 2.0f), *dst = cg_zeros(CG_SHAPE(3));
    uint64_t v0 = cg_version(dst);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_copy_(dst, w), "copy_: the source [3] requires grad");
    CG_ASSERT_FAILS((void *)(intptr_t)cg_copy_(dst, y), "cg_clone(src) for a differentiable copy");
    ck_assert_uint_eq(cg_version(dst), v0);
    CG_ASSERT_TENSOR(dst, ((float[]){0, 0, 0}), 0, 0);
    cg_tensor *d = cg_detach(y);
    ck_assert(cg_copy_(dst, d));
    CG_ASSERT_TENSOR(dst, ((float[]){2, 4, 6}), 0, 0);
    cg_no_grad_begin();
    ck_assert(cg_copy_(dst, w));
    cg_no_grad_end();
    CG_ASSERT_TENSOR(dst, ((float[]){1, 2, 3}), 0, 0);
    ck_assert(!dst->requires_grad && !dst->node);
    /* nor is an op's output written in place: its gradient would flow
     * through the op as if its values were the op's (y = 2w), refused and
     * left as it was; its detached view is written */
    CG_ASSERT_FAILS((void *)(intptr_t)cg_copy_(y, d),
                    "copy_: the tensor [3] is the output of an op");
    CG_ASSERT_TENSOR(y, ((float[]){2, 4, 6}), 0, 0);
    cg_tensor *yd = cg_detach(y), *ones = cg_ones(CG_SHAPE(3));
    ck_assert(cg_copy_(yd, ones));
    CG_ASSERT_TENSOR(yd, ((float[]){1, 1, 1}), 0, 0);
    cg_release_all(6, w, y, dst, d, yd, ones);
}
END_TEST

/* Every loss refuses another dtype in one line naming the argument and
 * both dtypes (binary_cross_entropy_with_logits read any tensor as floats
 * and dereferenced NULL: labels as int64 or bool, bf16 logits, f16
 * targets), as cross_entropy and nll_loss refuse theirs. */
START_TEST(test_losses_refuse_other_dtypes)
{
    cg_tensor *x = xin(), *y = cg_k_sigmoid(x);
    cg_tensor *yi = cg_k_to(y, CG_I64), *yb = cg_k_to(y, CG_BOOL), *yh = cg_k_to(y, CG_F16);
    cg_tensor *xb = cg_k_to(x, CG_BF16);
    CG_ASSERT_REFUSED(cg_binary_cross_entropy_with_logits(x, yi, CG_REDUCTION_MEAN) == NULL,
                      "binary_cross_entropy_with_logits: argument 2 is int64, expected a float");
    CG_ASSERT_REFUSED(cg_binary_cross_entropy_with_logits(x, yb, CG_REDUCTION_SUM) == NULL,
                      "binary_cross_entropy_with_logits: argument 2 is bool, expected a float");
    CG_ASSERT_REFUSED(cg_binary_cross_entropy_with_logits(yi, x, CG_REDUCTION_NONE) == NULL,
                      "binary_cross_entropy_with_logits: argument 1 is int64, expected a float");
    /* bf16 logits: a pointwise loss as the others, in float32, rounded once */
    cg_tensor *xf = cg_k_to(xb, CG_F32), *yb16 = cg_k_to(y, CG_BF16), *yf = cg_k_to(yb16, CG_F32);
    cg_tensor *lb = cg_binary_cross_entropy_with_logits(xb, yb16, CG_REDUCTION_NONE);
    cg_tensor *lf = cg_binary_cross_entropy_with_logits(xf, yf, CG_REDUCTION_NONE);
    ck_assert_msg(lb && lf && lb->dtype == CG_BF16, "%s", cg_last_error());
    cg_tensor *lfb = cg_k_to(lf, CG_BF16);
    ck_assert(memcmp(cg_data_bf16(lb), cg_data_bf16(lfb), 12 * sizeof(uint16_t)) == 0);
    /* the siblings: the class losses and the kernels behind them */
    cg_tensor *tg = cg_test_ids(3, (const int64_t[]){0, 1, 2});
    CG_ASSERT_REFUSED(cg_cross_entropy(xb, tg, -100, 0.0f, CG_REDUCTION_MEAN) == NULL,
                      "cross_entropy: argument 1 is bfloat16, expected float32");
    CG_ASSERT_REFUSED(cg_nll_loss(yi, tg, -100, CG_REDUCTION_MEAN) == NULL,
                      "nll_loss: argument 1 is int64, expected float32");
    CG_ASSERT_REFUSED(
        cg_k_nll_loss_backward(yh, tg, -100, CG_REDUCTION_MEAN, cg_test_scalar(1.0f)) == NULL,
        "nll_loss_backward: argument 1 is float16, expected float32");
    cg_tensor *lse = cg_zeros_dtype(CG_BF16, CG_SHAPE(3));
    CG_ASSERT_REFUSED(cg_k_cross_entropy_backward(x, tg, -100, 0.0f, CG_REDUCTION_MEAN, lse,
                                                  cg_test_scalar(1.0f)) == NULL,
                      "cross_entropy_backward: argument 'lse' is bfloat16, expected float32");
    CG_ASSERT_REFUSED(cg_mse_loss(x, yi, CG_REDUCTION_MEAN) == NULL,
                      "mse_loss: argument 2 is int64, expected a float");
    cg_release_all(13, x, y, yi, yb, yh, xb, lse, xf, yb16, yf, lb, lf, lfb);
}
END_TEST

/* topk takes any float dtype, as the table in docs/api.md says and
 * torch.topk does: bf16 and f16 values come back in their dtype, their
 * gradient through them; integers too (since 2026-12-08); a bool input is
 * refused under topk's name, as an integer argmax is under its own. */
START_TEST(test_topk_dtypes)
{
    cg_tensor *x = xin();
    cg_tensor *ids32 = NULL, *v32 = cg_topk(x, 2, 1, true, &ids32);
    ck_assert_msg(v32 != NULL, "%s", cg_last_error());
    const cg_dtype dts[] = {CG_BF16, CG_F16};
    for (int d = 0; d < 2; d++) {
        cg_tensor *h = cg_k_to(x, dts[d]); /* X is exact in both */
        cg_requires_grad(h, true);
        cg_tensor *ids = NULL, *v = cg_topk(h, 2, 1, true, &ids);
        ck_assert_msg(v != NULL, "%s: %s", cg_dtype_name(dts[d]), cg_last_error());
        ck_assert_int_eq(v->dtype, dts[d]);
        ck_assert(!memcmp(cg_data_i64(ids), cg_data_i64(ids32), 6 * sizeof(int64_t)));
        cg_tensor *vf = cg_k_to(v, CG_F32);
        CG_ASSERT_TENSOR(vf, cg_data(v32), 0, 0);
        cg_tensor *s = cg_sum_all(v);
        ck_assert_msg(s && cg_backward(s, NULL, false), "%s", cg_last_error());
        cg_tensor *g = cg_k_to(cg_grad(h), CG_F32); /* 1 where chosen */
        ck_assert_int_eq(cg_grad(h)->dtype, dts[d]);
        CG_ASSERT_TENSOR(g, ((const float[]){0, 0, 1, 1, 1, 1, 0, 0, 1, 0, 1, 0}), 0, 0);
        cg_release_all(6, h, ids, v, vf, s, g);
    }
    /* integers (since 2026-12-08): their values exactly, in their dtype and
     * without gradient, ties in index order; bool refused, as PyTorch */
    cg_tensor *xi = cg_k_to(x, CG_I64), *xb = cg_k_to(x, CG_BOOL), *ii = NULL;
    cg_tensor *wi = cg_from_i64(CG_SHAPE(2, 3), (const int64_t[]){4, -2, 4, 7, 0, 7});
    cg_tensor *vi = cg_topk(wi, 2, 1, true, &ii);
    ck_assert_msg(vi && vi->dtype == CG_I64 && !vi->requires_grad, "%s", cg_last_error());
    const int64_t want_v[4] = {4, 4, 7, 7}, want_i[4] = {0, 2, 0, 2};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(cg_data_i64(vi)[i], want_v[i]);
        ck_assert_int_eq(cg_data_i64(ii)[i], want_i[i]);
    }
    cg_release_all(3, wi, vi, ii);
    CG_ASSERT_REFUSED(cg_topk(xb, 2, 1, true, NULL) == NULL,
                      "topk: bool tensors are not supported");
    CG_ASSERT_REFUSED(cg_argmax(xi, 1, false) == NULL,
                      "argmax: argument 1 is int64, expected a float tensor");
    cg_release_all(5, x, ids32, v32, xi, xb);
}
END_TEST

/* The reference order of topk: a full sort of (value, index) pairs, NaN
 * the largest, -0 equal to 0, ties by the lower index. */
static bool ref_largest;
static const float *ref_row;

static int ref_cmp(const void *pa, const void *pb)
{
    const int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    const float x = ref_row[a], y = ref_row[b];
    const bool xn = isnan(x), yn = isnan(y);
    if (xn != yn)
        return (ref_largest ? xn : yn) ? -1 : 1;
    if (!xn && x != y)
        return (ref_largest ? x > y : x < y) ? -1 : 1;
    return (a > b) - (a < b);
}

/* topk's indices against that sort, over rows with many ties, NaNs, -0
 * and 0, +-inf, for every k from 0 to n, largest and smallest, along the
 * last dim and along a strided first dim (a transposed view). */
START_TEST(test_topk_against_sort)
{
    const float vals[] = {1.0f, -1.0f, 0.0f, -0.0f, 2.5f, NAN, INFINITY, -INFINITY, 0.5f};
    enum { R = 3, N = 37 };
    float x[R * N];
    uint64_t s = 12345;
    for (int i = 0; i < R * N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = vals[(s >> 33) % (sizeof vals / sizeof *vals)];
    }
    cg_tensor *t = cg_from_data(CG_SHAPE(R, N), x);
    cg_tensor *tt = cg_view_transpose(t, 0, 1); /* [N, R], topk along dim 0: stride R */
    int64_t want[N];
    for (int largest = 0; largest < 2; largest++)
        for (int64_t k = 0; k <= N; k++) {
            cg_tensor *a = cg_k_topk_indices(t, k, 1, largest);
            cg_tensor *b = cg_k_topk_indices(tt, k, 0, largest);
            ck_assert_msg(a && b, "%s", cg_last_error());
            for (int r = 0; r < R; r++) {
                for (int64_t i = 0; i < N; i++)
                    want[i] = i;
                ref_row = x + r * N;
                ref_largest = largest;
                qsort(want, N, sizeof *want, ref_cmp);
                for (int64_t j = 0; j < k; j++) {
                    ck_assert_msg(cg_data_i64(a)[r * k + j] == want[j],
                                  "row %d k %lld largest %d: place %lld is %lld, want %lld", r,
                                  (long long)k, largest, (long long)j,
                                  (long long)cg_data_i64(a)[r * k + j], (long long)want[j]);
                    ck_assert_int_eq(cg_data_i64(b)[j * R + r], want[j]);
                }
            }
            cg_release_all(2, a, b);
        }
    cg_release_all(2, t, tt);
}
END_TEST

/* torch.topk of a 0-d tensor (dim 0 or -1, k 1) is 0-d, values and
 * indices, as torch.max's: cgrad gave shape [1] (tests/interop/check_ops.c). */
START_TEST(test_topk_scalar)
{
    cg_tensor *s = cg_requires_grad(cg_scalar(2.5f), true), *ids = NULL;
    cg_tensor *v = cg_topk(s, 1, -1, true, &ids);
    ck_assert_msg(v && ids, "%s", cg_last_error());
    ck_assert_int_eq(v->ndim, 0);
    ck_assert_int_eq(ids->ndim, 0);
    ck_assert_float_eq(cg_item(v), 2.5f);
    ck_assert_int_eq(cg_item_i64(ids), 0);
    ck_assert_msg(cg_backward(v, NULL, false), "%s", cg_last_error());
    ck_assert_float_eq(cg_item(cg_grad(s)), 1.0f);
    /* k = 0 of a 0-d tensor: empty indices of shape [0], as torch.topk */
    cg_tensor *e = cg_k_topk_indices(s, 0, 0, true);
    ck_assert_msg(e, "%s", cg_last_error());
    ck_assert_int_eq(e->ndim, 1);
    ck_assert_int_eq(e->shape[0], 0);
    /* topk of NULL: refused, and *indices holds NULL, not what it held */
    cg_tensor *held = s;
    CG_ASSERT_FAILS(cg_topk(NULL, 1, 0, true, &held), "cg_topk");
    ck_assert_ptr_null(held);
    cg_release_all(4, s, v, ids, e);
}
END_TEST

/* cumsum of a 0-d tensor (dim 0 or -1, as torch.cumsum takes): the value,
 * its gradient 1, and no error left behind by a successful op. */
START_TEST(test_cumsum_scalar)
{
    for (int dim = -1; dim <= 0; dim++) {
        cg_tensor *s = cg_requires_grad(cg_scalar(1.5f), true);
        cg_clear_error();
        cg_tensor *c = cg_cumsum(s, dim);
        ck_assert_msg(c, "%s", cg_last_error());
        ck_assert_msg(!cg_has_error(), "dim %d: a successful cumsum left '%s'", dim,
                      cg_last_error());
        ck_assert_int_eq(c->ndim, 0);
        ck_assert_float_eq(cg_item(c), 1.5f);
        ck_assert_msg(cg_backward(c, NULL, false), "%s", cg_last_error());
        ck_assert_float_eq(cg_item(cg_grad(s)), 1.0f);
        cg_release_all(2, s, c);
    }
}
END_TEST

/* index_add and scatter_add, out of place: PyTorch 1.13's values (repeated
 * ids accumulate), the input left as it was, refusals in one line naming
 * the op and argument, and the same bits forward and backward on 1 and 2
 * threads at a size that splits the work. */
START_TEST(test_index_add_scatter_add)
{
    cg_tensor *x = xin();
    const float half[8] = {0, 0.5f, 1, 1.5f, 2, 2.5f, 3, 3.5f}, six[6] = {0, 1, 2, 3, 4, 5};
    cg_tensor *s2 = cg_from_data(CG_SHAPE(2, 4), half), *s3 = cg_from_data(CG_SHAPE(3, 2), six);
    cg_tensor *i20 = cg_from_i64(CG_SHAPE(2), (int64_t[]){2, 0});
    cg_tensor *i33 = cg_from_i64(CG_SHAPE(2), (int64_t[]){3, 3});
    cg_tensor *sid = cg_from_i64(CG_SHAPE(3, 2), (int64_t[]){1, 1, 0, 3, 2, 2});
    expect(cg_index_add(x, 0, i20, s2),
           (const float[]){0, 2, 3, 3.75f, 1, 3, -1.5f, 0.75f, 0.5f, 0.25f, 3, -1.5f},
           "index_add dim 0");
    expect(cg_index_add(x, -1, i33, s3),
           (const float[]){-2, -0.5f, 0, 1.25f, 1, 3, -1.5f, 5.75f, 0.5f, -0.25f, 2, 6},
           "index_add dim 1, repeated");
    expect(cg_scatter_add(x, 1, sid, s3),
           (const float[]){-2, 0.5f, 0, 0.25f, 3, 3, -1.5f, 3.75f, 0.5f, -0.25f, 11, -3},
           "scatter_add dim 1");
    CG_ASSERT_TENSOR(x, X, 0, 0); /* not written */
    ck_assert_int_eq(cg_version(x), 0);

    cg_tensor *xb = cg_to(x, CG_BF16), *i32 = cg_to(i20, CG_I32);
    CG_ASSERT_FAILS(cg_index_add(xb, 0, i20, s2), "index_add: argument 'input' is bfloat16");
    CG_ASSERT_FAILS(cg_index_add(x, 0, i20, xb), "index_add: argument 'source' is bfloat16");
    cg_tensor *a32 = cg_index_add(x, 0, i32, s2), *a64 = cg_index_add(x, 0, i20, s2);
    ck_assert(a32 && a64 &&
              !memcmp(cg_data(a32), cg_data(a64), 12 * sizeof(float))); /* int32 too */
    cg_release_all(2, a32, a64);
    CG_ASSERT_FAILS(cg_index_add(x, 0, i20, s3),
                    "index_add: source must have the destination's "
                    "shape with 2 at dim 0 (shapes [3, 4] and [3, 2])");
    CG_ASSERT_FAILS(cg_index_add(x, 0, i33, s2), "index_add: id 3 at position 0 is out of range");
    CG_ASSERT_FAILS(cg_index_add(x, 0, sid, s2), "index_add: index must be 0-d or 1-d");
    CG_ASSERT_FAILS(cg_index_add(x, 2, i20, s2), "dim 2");
    CG_ASSERT_REFUSED(!cg_index_add(NULL, 0, i20, s2), "cg_k_index_add: input is NULL");
    CG_ASSERT_FAILS(cg_scatter_add(xb, 1, sid, s3), "scatter_add: argument 'input' is bfloat16");
    CG_ASSERT_FAILS(cg_scatter_add(x, 1, i20, s3), "scatter_add: index shape [2] differs from "
                                                   "source shape [3, 2]");
    CG_ASSERT_FAILS(cg_scatter_add(x, 0, sid, s3),
                    "scatter_add: id 3 at position 3 is out of range");
    cg_release_all(8, x, s2, s3, i20, i33, sid, xb, i32);

    /* 1 and 2 threads: the same bits, forward and both gradients */
    enum { ROWS = 512, D = 96, NSRC = 1500 };
    cg_rng r = cg_rng_new(3);
    int64_t *ids = malloc(NSRC * sizeof *ids);
    for (int i = 0; i < NSRC; i++)
        ids[i] = (int64_t)cg_rng_below(&r, ROWS / 4); /* many repeats a row */
    cg_tensor *idx = cg_from_i64(CG_SHAPE(NSRC), ids);
    float *got[2][3];
    for (int nt = 1; nt <= 2; nt++) {
        cg_set_num_threads(nt);
        cg_rng rr = cg_rng_new(5);
        cg_tensor *a = cg_requires_grad(cg_randn(&rr, CG_SHAPE(ROWS, D)), true);
        cg_tensor *src = cg_requires_grad(cg_randn(&rr, CG_SHAPE(NSRC, D)), true);
        cg_tensor *w = cg_randn(&rr, CG_SHAPE(ROWS, D));
        cg_tensor *y = cg_index_add(a, 0, idx, src), *yw = cg_mul(y, w), *l = cg_sum_all(yw);
        ck_assert_msg(l && cg_backward(l, NULL, false), "%s", cg_last_error());
        got[nt - 1][0] = cg_test_values(y);
        got[nt - 1][1] = cg_test_values(cg_grad(a));
        got[nt - 1][2] = cg_test_values(cg_grad(src));
        cg_release_all(6, a, src, w, y, yw, l);
    }
    cg_set_num_threads(0);
    const int64_t n[3] = {ROWS * D, ROWS * D, NSRC * D};
    for (int k = 0; k < 3; k++) {
        ck_assert_msg(!memcmp(got[0][k], got[1][k], (size_t)n[k] * sizeof(float)),
                      "index_add: output %d differs between 1 and 2 threads", k);
        free(got[0][k]);
        free(got[1][k]);
    }
    free(ids);
    cg_release(idx);
}
END_TEST

/* binary_cross_entropy_with_logits at an infinite logit is the loss's
 * limit, as PyTorch's (1 - y) x + max(-x, 0) + log1p(exp(-|x|)) gives for
 * x = +inf, y < 1: +inf. max(x, 0) - x y made inf - inf = NaN there (and
 * at x = -inf, y = 0). Where PyTorch's formula makes NaN of a finite limit
 * (x = +inf with y = 1, x = -inf) the limit is taken too: 0 or +inf. */
START_TEST(test_bce_infinite_logits)
{
    const float inf = INFINITY;
    const float xs[6] = {inf, inf, inf, -inf, -inf, -inf}, ys[6] = {0, 0.3f, 1, 0, 0.3f, 1};
    const float want[6] = {inf, inf, 0, 0, inf, inf};
    for (int i = 0; i < 6; i++) {
        cg_tensor *x = cg_from_data(CG_SHAPE(1), &xs[i]), *y = cg_from_data(CG_SHAPE(1), &ys[i]);
        cg_tensor *l = cg_binary_cross_entropy_with_logits(x, y, CG_REDUCTION_MEAN);
        ck_assert_msg(l && cg_item(l) == want[i], "x %g y %g: got %g, want %g", xs[i], ys[i],
                      l ? cg_item(l) : -1.0, want[i]);
        cg_release_all(3, x, y, l);
    }
}
END_TEST

/* tril and triu copy elements: every dtype, as torch.tril takes them
 * (they refused all but float32); cumsum is a sum: bf16 and f16 summed
 * in float32 and rounded back, as the reductions (it refused them). */
START_TEST(test_tril_cumsum_dtypes)
{
    cg_scope *sc = cg_scope_begin();
    const int64_t v[6] = {1, 2, 3, 4, 5, 6};
    cg_tensor *i = cg_from_i64(CG_SHAPE(2, 3), v), *t = cg_tril(i, 0), *u = cg_triu(i, 1);
    ck_assert_msg(t && u && t->dtype == CG_I64, "%s", cg_last_error());
    const int64_t wt[6] = {1, 0, 0, 4, 5, 0}, wu[6] = {0, 2, 3, 0, 0, 6};
    for (int k = 0; k < 6; k++) {
        ck_assert_int_eq(cg_data_i64(t)[k], wt[k]);
        ck_assert_int_eq(cg_data_i64(u)[k], wu[k]);
    }
    /* a batch of matrices: each one masked */
    cg_tensor *i3 = cg_from_i64(CG_SHAPE(2, 2, 2), (int64_t[]){1, 2, 3, 4, 5, 6, 7, 8});
    cg_tensor *t3 = cg_tril(i3, 0), *u3 = cg_triu(i3, 0);
    ck_assert_msg(t3 && u3, "%s", cg_last_error());
    const int64_t wt3[8] = {1, 0, 3, 4, 5, 0, 7, 8}, wu3[8] = {1, 2, 0, 4, 5, 6, 0, 8};
    for (int k = 0; k < 8; k++) {
        ck_assert_int_eq(cg_data_i64(t3)[k], wt3[k]);
        ck_assert_int_eq(cg_data_i64(u3)[k], wu3[k]);
    }
    cg_tensor *b = cg_requires_grad(
        cg_k_to(cg_from_data(CG_SHAPE(4), (float[]){1, 2, 3, 0.5f}), CG_BF16), true);
    cg_tensor *c = cg_cumsum(b, 0), *tb = cg_tril(cg_view_unsqueeze(b, 0), 0);
    ck_assert_msg(c && tb && c->dtype == CG_BF16 && tb->dtype == CG_BF16, "%s", cg_last_error());
    ck_assert_float_eq(cg_get(c, (int64_t[]){3}), 6.5f);
    ck_assert_msg(cg_backward(c, cg_full_dtype(CG_BF16, 1, (int64_t[]){4}, 1), false), "%s",
                  cg_last_error());
    ck_assert(cg_grad(b)->dtype == CG_BF16 && cg_get(cg_grad(b), (int64_t[]){0}) == 4.0f);
    cg_scope_end(sc);
}
END_TEST

/* The class losses' reductions: none gives each target's loss (the bits
 * of that row alone under mean, 0 where ignored) in the targets' shape,
 * sum their sum and mean their mean over the kept ones; none's backward
 * scales each row by its own upstream gradient (a row alone, scaled);
 * nll_loss none is -logp at each target. 1 and 2 threads give the same
 * bits (rows past the kernel's parallel threshold). */
START_TEST(test_class_loss_reductions)
{
    enum { B = 4, T = 3, V = 7, N = B * T };
    cg_rng r = cg_rng_new(5);
    int64_t tg[N];
    for (int i = 0; i < N; i++)
        tg[i] = i % 5 == 2 ? -100 : (i * 3) % V;
    cg_tensor *t = cg_test_ids_nd(CG_SHAPE(B, T), tg);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(B, T, V)), true);
    cg_tensor *w = cg_randn(&r, CG_SHAPE(B, T));
    cg_tensor *none = cg_cross_entropy(x, t, -100, 0.1f, CG_REDUCTION_NONE);
    cg_tensor *sum = cg_cross_entropy(x, t, -100, 0.1f, CG_REDUCTION_SUM);
    cg_tensor *mean = cg_cross_entropy(x, t, -100, 0.1f, CG_REDUCTION_MEAN);
    ck_assert_msg(none && sum && mean, "%s", cg_last_error());
    ck_assert(none->ndim == 2 && none->shape[0] == B && none->shape[1] == T);
    ck_assert(sum->ndim == 0 && mean->ndim == 0);
    cg_tensor *nw = cg_mul(none, w), *weighted = cg_sum_all(nw);
    ck_assert(cg_backward(weighted, NULL, false));
    double total = 0.0;
    int kept = 0;
    for (int i = 0; i < N; i++) {
        cg_tensor *xr = cg_requires_grad(cg_from_data(CG_SHAPE(1, V), cg_data(x) + i * V), true);
        cg_tensor *ti = cg_test_ids(1, &tg[i]);
        cg_tensor *one = cg_cross_entropy(xr, ti, -100, 0.1f, CG_REDUCTION_MEAN);
        float got = cg_data(none)[i], wi = cg_data(w)[i];
        if (tg[i] == -100) {
            ck_assert_msg(got == 0.0f, "row %d is ignored: loss %g, want 0", i, got);
        } else {
            ck_assert_msg(got == cg_item(one), "row %d: %.9g alone %.9g", i, got, cg_item(one));
            total += got;
            kept++;
        }
        cg_tensor *scaled = cg_muls(one, wi);
        ck_assert(cg_backward(scaled, NULL, false) || tg[i] == -100);
        for (int j = 0; j < V; j++) {
            float want = tg[i] == -100 ? 0.0f : cg_data(xr->grad)[j];
            ck_assert_msg(fabsf(cg_data(x->grad)[i * V + j] - want) <= 1e-6f * (1 + fabsf(want)),
                          "row %d class %d: grad %g, the row alone %g", i, j,
                          cg_data(x->grad)[i * V + j], want);
        }
        cg_release_all(3, xr, one, scaled);
    }
    ck_assert_msg(fabs(cg_item(sum) - total) <= 1e-6 * fabs(total), "sum %g vs %g", cg_item(sum),
                  total);
    ck_assert(fabs(cg_item(mean) - total / kept) <= 1e-6 * fabs(total / kept));
    cg_release_all(5, none, sum, mean, nw, weighted);

    /* nll_loss none: -logp at the target, 0 where ignored */
    cg_tensor *lp = cg_log_softmax(x, -1), *nl = cg_nll_loss(lp, t, -100, CG_REDUCTION_NONE);
    ck_assert_msg(nl && nl->ndim == 2, "%s", cg_last_error());
    for (int i = 0; i < N; i++)
        ck_assert(cg_data(nl)[i] == (tg[i] == -100 ? 0.0f : -cg_data(lp)[i * V + tg[i]]));
    cg_release_all(2, lp, nl);

    /* thread bits: [512, 100] rows, none's forward and backward */
    cg_tensor *xb = cg_randn(&r, CG_SHAPE(512, 100)), *wb = cg_randn(&r, CG_SHAPE(512));
    int64_t *tb = malloc(512 * sizeof *tb);
    for (int i = 0; i < 512; i++)
        tb[i] = i % 9 == 0 ? -100 : (i * 7) % 100;
    cg_tensor *tt = cg_test_ids(512, tb);
    float *bits[2][2];
    for (int nt = 1; nt <= 2; nt++) {
        cg_set_num_threads(nt);
        cg_tensor *xg = cg_requires_grad(cg_k_clone(xb), true);
        cg_tensor *l = cg_cross_entropy(xg, tt, -100, 0.2f, CG_REDUCTION_NONE);
        cg_tensor *lw = cg_mul(l, wb), *s = cg_sum_all(lw);
        ck_assert(s && cg_backward(s, NULL, false));
        bits[nt - 1][0] = cg_test_values(l);
        bits[nt - 1][1] = cg_test_values(xg->grad);
        cg_release_all(4, xg, l, lw, s);
    }
    cg_set_num_threads(0);
    ck_assert(memcmp(bits[0][0], bits[1][0], 512 * sizeof(float)) == 0);
    ck_assert(memcmp(bits[0][1], bits[1][1], 512 * 100 * sizeof(float)) == 0);
    for (int k = 0; k < 4; k++)
        free(bits[k / 2][k % 2]);
    free(tb);
    cg_release_all(4, x, w, xb, wb);
}
END_TEST

START_TEST(test_gradchecks)
{
    cg_rng r = cg_rng_new(21);
    /* the losses at each reduction: mean, sum, none */
    const char *names[] = {"topk",
                           "mse_loss",
                           "mse_loss sum",
                           "mse_loss none",
                           "bce_with_logits",
                           "bce_with_logits sum",
                           "bce_with_logits none",
                           "nll_loss",
                           "nll_loss sum",
                           "nll_loss none"};
    gc_case cases[] = {{GC_TOPK, 3, -1, 0},
                       {GC_MSE, 0, 0, CG_REDUCTION_MEAN},
                       {GC_MSE, 0, 0, CG_REDUCTION_SUM},
                       {GC_MSE, 0, 0, CG_REDUCTION_NONE},
                       {GC_BCE, 0, 0, CG_REDUCTION_MEAN},
                       {GC_BCE, 0, 0, CG_REDUCTION_SUM},
                       {GC_BCE, 0, 0, CG_REDUCTION_NONE},
                       {GC_NLL, 0, 0, CG_REDUCTION_MEAN},
                       {GC_NLL, 0, 0, CG_REDUCTION_SUM},
                       {GC_NLL, 0, 0, CG_REDUCTION_NONE}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int layout = 0; layout < 2; layout++) { /* contiguous, transposed */
            cg_tensor *in[2] = {cg_test_randn_layout(&r, CG_SHAPE(2, 6, 5), layout),
                                cg_test_randn_layout(&r, CG_SHAPE(2, 6, 5), 0)};
            if (cases[c].which == GC_TOPK) { /* topk: values 0.1 apart, far from ties (kinks) */
                float v[60];
                for (int i = 0; i < 60; i++)
                    v[i] = (float)((i * 37) % 60) * 0.1f - 3.0f;
                cg_tensor *t = cg_from_data(CG_SHAPE(2, 6, 5), v);
                cg_tensor *tt = layout ? cg_view_transpose(t, 1, 2) : cg_retain(t);
                cg_release(in[0]);
                in[0] = cg_detach(tt); /* [2, 6, 5] or a transposed [2, 5, 6] */
                cg_release_all(2, t, tt);
            }
            if (cases[c].which == GC_BCE) { /* targets in [0, 1] */
                cg_tensor *s = cg_k_sigmoid(in[1]);
                cg_release(in[1]);
                in[1] = s;
            }
            if (cases[c].which == GC_NLL) { /* [6, 5] logits for 6 targets */
                cg_tensor *v = cg_view_select(in[0], 0, 0);
                cg_tensor *d = cg_detach(v);
                cg_release_all(2, v, in[0]);
                in[0] = d;
            }
            cg_requires_grad(in[0], true);
            bool two = cases[c].which == GC_MSE || cases[c].which == GC_BCE;
            cg_requires_grad(in[1], two);
            cg_gradcheck_report rep;
            bool ok = cg_gradcheck(gc_fn, &cases[c], two ? 2 : 1, in, NULL, &rep);
            ck_assert_msg(ok, "%s (layout %d): %s", names[c], layout, rep.message);
            cg_test_check_unread(gc_fn, &cases[c], two ? 2 : 1, in, names[c]);
            cg_release_all(2, in[0], in[1]);
        }
    }
}
END_TEST

static Suite *misc_suite(void)
{
    Suite *s = suite_create("ops_misc");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_forward_vs_torch);
    tcase_add_test(tc, test_gradchecks);
    tcase_add_test(tc, test_class_loss_reductions);
    tcase_add_test(tc, test_copy_refuses_grad_source);
    tcase_add_test(tc, test_losses_refuse_other_dtypes);
    tcase_add_test(tc, test_topk_dtypes);
    tcase_add_test(tc, test_topk_against_sort);
    tcase_add_test(tc, test_topk_scalar);
    tcase_add_test(tc, test_cumsum_scalar);
    tcase_add_test(tc, test_bce_infinite_logits);
    tcase_add_test(tc, test_tril_cumsum_dtypes);
    tcase_add_test(tc, test_index_add_scatter_add);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {misc_suite()};
    return cg_test_run(s, 1);
}
