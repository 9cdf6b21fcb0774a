/* 3-d max pooling at ties and NaN against expectations worked by hand
 * (PyTorch 1.13's CPU rule: a window keeps its first maximum, and a NaN
 * replaces it, the last NaN of the window in D, H, W order winning), the
 * gradient going to the index picked (overlapping windows adding at a
 * shared maximum); max unpool refusing an empty non-batch dim as PyTorch
 * 1.13 does; and the max pool modules' return_indices
 * (cg_maxpool_set_return_indices, cg_maxpool_forward) paired with
 * MaxUnpool. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "autograd/ops.h"
#include "nn/spatial.h"
#include "tests/testutil.h"

/* x [1, 1, 2, 2, 4] (D H W), kernel 2: the first window (w 0-1) all 2.0,
 * a tie; the second (w 2-3) 5.0 at (0, 0, 2), NaN at (0, 1, 3) (flat 7)
 * and at (1, 0, 2) (flat 10), 1.0 elsewhere */
static cg_tensor *ties_input(void)
{
    cg_tensor *x = cg_full(CG_SHAPE(1, 1, 2, 2, 4), 2.0f);
    float *d = cg_data(x);
    for (int i = 0; i < 16; i++)
        if (i % 4 >= 2)
            d[i] = 1.0f;
    d[2] = 5.0f;
    d[7] = NAN;
    d[10] = NAN;
    return x;
}

START_TEST(test_pool3d_ties_nan)
{
    cg_tensor *x = cg_requires_grad(ties_input(), true), *idx = NULL;
    cg_tensor *y = cg_max_pool3d_with_indices(x, (cg_pool){.kernel_size = {2, 2, 2}}, &idx);
    ck_assert_msg(y && idx, "%s", cg_last_error());
    ck_assert(y->ndim == 5 && y->shape[4] == 2);
    /* the tie: the first 2.0 (flat 0); then the last NaN (flat 10) */
    ck_assert(cg_data(y)[0] == 2.0f && isnan(cg_data(y)[1]));
    ck_assert(cg_data_i64(idx)[0] == 0 && cg_data_i64(idx)[1] == 10);
    cg_tensor *g = cg_from_data(CG_SHAPE(1, 1, 1, 1, 2), (const float[]){1.0f, 3.0f});
    cg_tensor *p = cg_mul(y, g), *s = cg_sum_all(p);
    ck_assert_msg(s && cg_backward(s, NULL, false), "%s", cg_last_error());
    for (int i = 0; i < 16; i++) { /* NaN * 0 stays out: g is 1 and 3 */
        const float want = i == 0 ? 1.0f : i == 10 ? 3.0f : 0.0f;
        ck_assert_msg(cg_data(x->grad)[i] == want, "grad[%d] %g, expected %g", i,
                      (double)cg_data(x->grad)[i], (double)want);
    }
    /* adaptive to 1x1x1 over the second window's 8 values: the last NaN,
     * (1, 0, 0) of [2, 2, 2] (flat 4) */
    cg_tensor *w = cg_slice(x, 4, 2, 4, 1), *aidx = NULL;
    cg_tensor *a = cg_adaptive_max_pool3d(w, 1, 1, 1, &aidx);
    ck_assert_msg(a && aidx, "%s", cg_last_error());
    ck_assert(isnan(cg_data(a)[0]) && cg_data_i64(aidx)[0] == 4);
    cg_release_all(9, x, idx, y, g, p, s, w, aidx, a);
}
END_TEST

/* Unbatched [1, 2, 2, 3], kernel 2, stride 1: both windows share the
 * first 3.0 at (0, 0, 1) (flat 1), the later 3.0s tie and lose, so flat 1
 * gets both windows' gradients */
START_TEST(test_pool3d_overlap_ties)
{
    cg_tensor *x = cg_zeros(CG_SHAPE(1, 2, 2, 3));
    cg_data(x)[1] = cg_data(x)[9] = cg_data(x)[11] = 3.0f;
    cg_requires_grad(x, true);
    cg_tensor *idx = NULL;
    cg_tensor *y = cg_max_pool3d_with_indices(
        x, (cg_pool){.kernel_size = {2, 2, 2}, .stride = {1, 1, 1}}, &idx);
    ck_assert_msg(y && y->ndim == 4 && y->shape[3] == 2, "%s", cg_last_error());
    ck_assert(cg_data(y)[0] == 3.0f && cg_data(y)[1] == 3.0f);
    ck_assert(cg_data_i64(idx)[0] == 1 && cg_data_i64(idx)[1] == 1);
    cg_tensor *g = cg_from_data(CG_SHAPE(1, 1, 1, 2), (const float[]){0.5f, 0.25f});
    cg_tensor *p = cg_mul(y, g), *s = cg_sum_all(p);
    ck_assert_msg(s && cg_backward(s, NULL, false), "%s", cg_last_error());
    for (int i = 0; i < 12; i++)
        ck_assert(cg_data(x->grad)[i] == (i == 1 ? 0.75f : 0.0f));
    cg_release_all(6, x, idx, y, g, p, s);
}
END_TEST

/* PyTorch 1.13: "Expected input to have non-zero size for non-batch
 * dimensions" for an empty C or spatial dim (every dim unbatched); an
 * empty batch is taken */
START_TEST(test_unpool_empty_dims)
{
    for (int nd = 1; nd <= 3; nd++) {
        cg_tensor *(*const unpool[3])(cg_tensor *, cg_tensor *, cg_pool, const int64_t *) = {
            cg_max_unpool1d, cg_max_unpool2d, cg_max_unpool3d};
        const cg_pool o = {.kernel_size = {2, 2, 2}};
        for (int empty = 0; empty < nd + 2; empty++)
            for (int batched = 0; batched < 2; batched++) {
                if (!batched && empty == nd + 1)
                    continue;
                int64_t shape[5];
                const int n = nd + 1 + batched;
                for (int i = 0; i < n; i++)
                    shape[i] = i == empty ? 0 : 2;
                cg_tensor *x = cg_zeros(n, shape), *ix = cg_empty_dtype(CG_I64, n, shape);
                memset(cg_data_i64(ix), 0, (size_t)cg_numel(ix) * sizeof(int64_t));
                if (batched && empty == 0) { /* N 0: an empty output */
                    cg_tensor *y = unpool[nd - 1](x, ix, o, NULL);
                    ck_assert_msg(y && y->shape[0] == 0 && y->shape[n - 1] == 4, "%s",
                                  cg_last_error());
                    cg_release(y);
                } else {
                    char want[160];
                    snprintf(want, sizeof want,
                             "max_unpool%dd: expected input to have non-zero size for "
                             "non-batch dimensions, but got",
                             nd);
                    CG_ASSERT_REFUSED_LINE(unpool[nd - 1](x, ix, o, NULL), want);
                    snprintf(want, sizeof want, "with dimension %d being empty", empty);
                    ck_assert_msg(strstr(cg_last_error(), want), "%s", cg_last_error());
                }
                cg_release_all(2, x, ix);
            }
    }
}
END_TEST

/* MaxPool2d(return_indices=True) into MaxUnpool2d: the indices the
 * functional op gives, the maxima back in place and zeros elsewhere, the
 * gradient through both; the refusals of the other combinations */
START_TEST(test_maxpool_return_indices)
{
    cg_rng rng = cg_rng_new(4);
    const cg_pool o = {.kernel_size = {2, 2}};
    cg_module *mp = cg_maxpool_new(2, o), *up = cg_maxunpool_new(2, o);
    cg_module *ap = cg_avgpool_new(2, o);
    cg_tensor *x = cg_requires_grad(cg_randn(&rng, CG_SHAPE(2, 3, 4, 6)), true);
    cg_tensor *idx = NULL, *fidx = NULL;
    CG_ASSERT_REFUSED_LINE(cg_maxpool_forward(mp, x, &idx),
                           "cg_maxpool_forward: MaxPool2d has return_indices off");
    ck_assert(cg_maxpool_set_return_indices(mp, true));
    CG_ASSERT_REFUSED_LINE(cg_module_forward(mp, x),
                           "MaxPool2d: return_indices is set, so it returns indices too");
    CG_ASSERT_REFUSED_LINE(cg_maxpool_forward(mp, x, NULL),
                           "cg_maxpool_forward: MaxPool2d has return_indices set");
    CG_ASSERT_REFUSED(!cg_maxpool_set_return_indices(ap, true),
                      "cg_maxpool_set_return_indices: module AvgPool2d, expected a MaxPool");
    CG_ASSERT_REFUSED_LINE(cg_maxpool_forward(ap, x, &idx), "cg_maxpool_forward: module AvgPool2d");
    ck_assert(idx == NULL);
    cg_tensor *y = cg_maxpool_forward(mp, x, &idx);
    cg_tensor *fy = cg_max_pool2d_with_indices(x, o, &fidx);
    ck_assert_msg(y && idx && fy, "%s", cg_last_error());
    ck_assert(idx->dtype == CG_I64 && cg_same_shape(idx, y));
    ck_assert(!memcmp(cg_data_i64(idx), cg_data_i64(fidx), (size_t)cg_numel(idx) * 8));
    ck_assert(!memcmp(cg_data(y), cg_data(fy), (size_t)cg_numel(y) * 4));
    cg_tensor *u = cg_maxunpool_forward(up, y, idx, NULL);
    ck_assert_msg(u && cg_same_shape(u, x), "%s", cg_last_error());
    int64_t kept = 0;
    for (int64_t i = 0; i < cg_numel(x); i++) { /* x where it was a window's max, else 0 */
        const float v = cg_data(u)[i];
        ck_assert(v == 0.0f || v == cg_data(x)[i]);
        kept += v != 0.0f;
    }
    ck_assert(kept == cg_numel(y));
    cg_tensor *s = cg_sum_all(u);
    ck_assert_msg(s && cg_backward(s, NULL, false), "%s", cg_last_error());
    double gs = 0.0;
    for (int64_t i = 0; i < cg_numel(x); i++)
        gs += cg_data(x->grad)[i];
    ck_assert(gs == (double)cg_numel(y));
    ck_assert(cg_maxpool_set_return_indices(mp, false));
    cg_tensor *y2 = cg_module_forward(mp, x);
    ck_assert(y2 && !memcmp(cg_data(y2), cg_data(y), (size_t)cg_numel(y) * 4));
    cg_release_all(8, x, idx, fidx, y, fy, u, s, y2);
    cg_module_free(mp);
    cg_module_free(up);
    cg_module_free(ap);
}
END_TEST

static Suite *pool_ties_suite(void)
{
    Suite *s = suite_create("pool_ties");
    TCase *tc = tcase_create("ties");
    tcase_add_test(tc, test_pool3d_ties_nan);
    tcase_add_test(tc, test_pool3d_overlap_ties);
    tcase_add_test(tc, test_unpool_empty_dims);
    tcase_add_test(tc, test_maxpool_return_indices);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {pool_ties_suite()};
    return cg_test_run(s, 1);
}
