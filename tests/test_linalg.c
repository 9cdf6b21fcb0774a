/* torch.linalg (autograd/ops_linalg.c over core/linalg*.c): values against
 * PyTorch 1.13's in float64, the refusals, empty matrices and batches,
 * NaN and inf, the gradient where PyTorch's is special (a singular det,
 * repeated eigenvalues with the vectors unused), the gradchecks of every
 * op (the op_checks entries of tests/test_grad_ops.c point here), 1 and 2
 * threads' bits, and nn.init.orthogonal_. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/init.h"
#include "tests/testutil.h"

static const float A3[9] = {4, 1, 2, 1, 5, 3, 2, 3, 6}; /* symmetric positive-definite */
static const float B32[6] = {1, 2, 3, 4, 5, 6};

static cg_tensor *mat(int64_t r, int64_t c, const float *v)
{
    return cg_from_data(CG_SHAPE(r, c), v);
}

/* max |t - want| over t's elements (any strides) */
static double maxdiff(const cg_tensor *t, const double *want)
{
    double *v = cg_test_doubles(t), d = 0;
    for (int64_t i = 0; i < cg_numel(t); i++)
        d = isnan(v[i]) != isnan(want[i]) ? INFINITY : fmax(d, fabs(v[i] - want[i]));
    free(v);
    return d;
}

#define ASSERT_NEAR(t, ...)                                                 \
    do {                                                                    \
        const double w_[] = {__VA_ARGS__};                                  \
        ck_assert_msg((t) != NULL, "%s", cg_last_error());                  \
        ck_assert_int_eq(cg_numel(t), (int64_t)(sizeof w_ / sizeof w_[0])); \
        const double d_ = maxdiff((t), w_);                                 \
        ck_assert_msg(d_ < 2e-6, "%s: off by %g", #t, d_);                  \
    } while (0)

/* ------------------------------------------------------------- values */
START_TEST(test_values)
{
    cg_tensor *A = mat(3, 3, A3), *B = mat(3, 2, B32), *b = cg_from_data(CG_SHAPE(3), B32);
    cg_tensor *x = cg_linalg_solve(A, B), *inv = cg_linalg_inv(A), *det = cg_linalg_det(A);
    ASSERT_NEAR(x, -0.2, 0, 0.142857143, 0.285714286, 0.828571429, 0.857142857);
    ASSERT_NEAR(inv, 0.3, 0, -0.1, 0, 0.285714286, -0.142857143, -0.1, -0.142857143, 0.271428571);
    ck_assert_int_eq(det->ndim, 0);
    ASSERT_NEAR(det, 70);
    cg_tensor *lad, *sign = cg_linalg_slogdet(A, &lad);
    ASSERT_NEAR(sign, 1);
    ASSERT_NEAR(lad, 4.24849524);
    cg_tensor *l = cg_linalg_cholesky(A, false), *u = cg_linalg_cholesky(A, true);
    ASSERT_NEAR(l, 2, 0, 0, 0.5, 2.17944947, 0, 1, 1.14707867, 1.91942974);
    ASSERT_NEAR(u, 2, 0.5, 1, 0, 2.17944947, 1.14707867, 0, 0, 1.91942974);
    cg_tensor *r, *q = cg_linalg_qr(B, NULL, &r);
    ASSERT_NEAR(q, -0.169030851, 0.897085227, -0.507092553, 0.276026224, -0.845154255, -0.34503278);
    ASSERT_NEAR(r, -5.91607978, -7.43735744, 0, 0.828078671);
    cg_tensor *v, *ev = cg_linalg_eigh(A, NULL, &v), *evh = cg_linalg_eigvalsh(A, "U");
    ASSERT_NEAR(ev, 2.19439717, 3.38677016, 9.41883268);
    ASSERT_NEAR(evh, 2.19439717, 3.38677016, 9.41883268);
    /* V diag(L) V^T = A, V^T V = I */
    cg_tensor *vl = cg_mul(v, ev), *vt = cg_transpose(v, 0, 1), *rec = cg_matmul(vl, vt);
    cg_tensor *vtv = cg_matmul(vt, v);
    ASSERT_NEAR(rec, 4, 1, 2, 1, 5, 3, 2, 3, 6);
    ASSERT_NEAR(vtv, 1, 0, 0, 0, 1, 0, 0, 0, 1);
    cg_tensor *s, *vh, *uu = cg_linalg_svd(B, false, &s, &vh), *sv = cg_linalg_svdvals(B);
    ASSERT_NEAR(s, 9.52551809, 0.514300581);
    ASSERT_NEAR(sv, 9.52551809, 0.514300581);
    cg_tensor *us = cg_mul(uu, s), *usv = cg_matmul(us, vh);
    ASSERT_NEAR(usv, 1, 2, 3, 4, 5, 6);
    cg_tensor *pi = cg_linalg_pinv(B, -1, -1), *ls = cg_linalg_lstsq(B, b, -1);
    ASSERT_NEAR(pi, -1.33333333, -0.333333333, 0.666666667, 1.08333333, 0.333333333, -0.416666667);
    ck_assert_int_eq(ls->ndim, 1);
    ASSERT_NEAR(ls, 0, 0.5);
    const char *ords[] = {"fro", "nuc", "1", "-1", "2", "-2", "inf", "-inf", NULL};
    const double want[] = {9.53939201,  10.0398187, 12, 9,         9.52551809,
                           0.514300581, 11,         3,  9.53939201};
    for (int i = 0; i < 9; i++) {
        cg_tensor *n = cg_linalg_matrix_norm(B, ords[i], NULL, false);
        ck_assert_msg(n && fabs(cg_item(n) - want[i]) < 2e-6, "%s: %g", ords[i] ? ords[i] : "NULL",
                      n ? cg_item(n) : NAN);
        cg_release(n);
    }
    cg_release_all(22, A, B, b, x, inv, det, lad, sign, l, u, q, r, v, ev, evh, vl, vt, rec, vtv, s,
                   vh, uu);
    cg_release_all(5, sv, us, usv, pi, ls);
}
END_TEST

START_TEST(test_vector_norm_values)
{
    cg_tensor *x = mat(2, 3, (const float[]){1, -2, 3, 0, 0.5f, -4});
    const double ord[] = {2, 1, 3, 0.5, -1, 0, INFINITY, -INFINITY};
    const double want[][2] = {{3.74165739, 4.03112887},
                              {6, 4.5},
                              {3.30192725, 4.00260247},
                              {17.1915082, 7.32842712},
                              {0.545454545, 0},
                              {3, 2},
                              {3, 4},
                              {1, 0}};
    for (int i = 0; i < 8; i++) {
        cg_tensor *n = cg_linalg_vector_norm(x, ord[i], 1, (int[]){1}, false);
        ck_assert_msg(n && n->ndim == 1 && maxdiff(n, want[i]) < 2e-6, "ord %g", ord[i]);
        cg_tensor *k = cg_linalg_vector_norm(x, ord[i], 1, (int[]){-1}, true);
        ck_assert(k && k->ndim == 2 && k->shape[1] == 1 && maxdiff(k, want[i]) < 2e-6);
        cg_release_all(2, n, k);
    }
    /* all dims; a 0-d x; bfloat16 in, bfloat16 out (the sum in double) */
    cg_tensor *all = cg_linalg_vector_norm(x, 2, 0, NULL, false), *s = cg_scalar(-3.0f);
    ck_assert(all && all->ndim == 0 && cg_item(all) == 5.5f);
    cg_tensor *n0 = cg_linalg_vector_norm(s, 1, 0, NULL, false);
    ck_assert(n0 && n0->ndim == 0 && cg_item(n0) == 3.0f);
    cg_tensor *xb = cg_k_to(x, CG_BF16), *nb = cg_linalg_vector_norm(xb, 2, 1, (int[]){1}, false);
    ck_assert(nb && nb->dtype == CG_BF16);
    cg_tensor *nf = cg_k_to(nb, CG_F32);
    ck_assert(maxdiff(nf, (const double[]){3.734375, 4.03125}) == 0);
    /* a large ord and large values: no overflow in double where float32's
     * sums would (PyTorch's norm of [1e30, 2e30] is inf) */
    cg_tensor *big = cg_from_data(CG_SHAPE(2), (const float[]){1e30f, 2e30f});
    cg_tensor *nbig = cg_linalg_vector_norm(big, 2, 0, NULL, false);
    ck_assert(fabs(cg_item(nbig) / 2.2360680e30 - 1) < 1e-6);
    cg_release_all(10, x, all, s, n0, xb, nb, nf, big, nbig, NULL);
}
END_TEST

/* ----------------------------------------------------------- refusals */
START_TEST(test_refusals)
{
    cg_tensor *A = mat(3, 3, A3), *B = mat(3, 2, B32), *v3 = cg_from_data(CG_SHAPE(3), B32);
    cg_tensor *ai = cg_k_to(A, CG_I64), *ab = cg_k_to(A, CG_BF16), *ah = cg_k_to(A, CG_F16);
    cg_tensor *sing = mat(2, 2, (const float[]){1, 2, 2, 4}), *v2 = cg_from_data(CG_SHAPE(2), B32);
    cg_tensor *notpd = mat(2, 2, (const float[]){1, 2, 2, 1});
    cg_tensor *batch = cg_stack((cg_tensor *[]){notpd, notpd}, 2, 0);
    cg_tensor *two = cg_stack((cg_tensor *[]){sing, sing, sing}, 3, 0);
    cg_data(batch)[0] = 5;                    /* element 0 positive-definite: element 1 refused */
    cg_data(two)[1] = 0, cg_data(two)[9] = 0; /* elements 0 and 2 regular: 1 refused */
    CG_ASSERT_REFUSED_LINE(cg_linalg_inv(ai),
                           "Expected a floating point tensor as input. Got int64");
    CG_ASSERT_REFUSED_LINE(cg_linalg_det(ab), "bfloat16");
    CG_ASSERT_REFUSED_LINE(cg_linalg_svd(ah, false, NULL, NULL), "float16");
    CG_ASSERT_REFUSED_LINE(cg_linalg_inv(v3), "must have at least 2 dimensions");
    CG_ASSERT_REFUSED_LINE(cg_linalg_det(B),
                           "must be batches of square matrices, but they are 3 by 2");
    CG_ASSERT_REFUSED_LINE(cg_linalg_cholesky(B, false), "square");
    CG_ASSERT_REFUSED_LINE(cg_linalg_eigh(B, NULL, NULL), "square");
    CG_ASSERT_REFUSED_LINE(cg_linalg_inv(NULL), "input is NULL");
    CG_ASSERT_REFUSED_LINE(cg_linalg_solve(sing, v2),
                           "The solver failed because the input matrix is singular");
    CG_ASSERT_REFUSED_LINE(cg_linalg_inv(sing),
                           "The diagonal element 2 is zero, the inversion could not be completed "
                           "because the input matrix is singular");
    CG_ASSERT_REFUSED_LINE(cg_linalg_inv(two),
                           "linalg.inv: (Batch element 1): The diagonal element 2 is zero");
    CG_ASSERT_REFUSED_LINE(
        cg_linalg_cholesky(notpd, false),
        "not positive-definite (the leading minor of order 2 is not positive-definite)");
    CG_ASSERT_REFUSED_LINE(cg_linalg_cholesky(batch, true),
                           "(Batch element 1): The factorization could not be completed");
    CG_ASSERT_REFUSED_LINE(cg_linalg_solve(A, v2),
                           "Incompatible shapes of A and B for the equation AX = B (3x3 and 2x1)");
    CG_ASSERT_REFUSED_LINE(cg_linalg_solve(A, ai), "Expected A and B to have the same dtype");
    cg_tensor *b43 = cg_zeros(CG_SHAPE(4, 3, 2)), *a23 = cg_zeros(CG_SHAPE(2, 3, 3));
    CG_ASSERT_REFUSED_LINE(cg_linalg_solve(a23, b43), ""); /* batch dims 2 and 4 */
    CG_ASSERT_REFUSED_LINE(cg_linalg_lstsq(B, v2, -1),
                           "input.size(-2) should match other.size(-1)");
    CG_ASSERT_REFUSED_LINE(cg_linalg_qr(B, "x", NULL), "qr received unrecognized mode 'x'");
    CG_ASSERT_REFUSED_LINE(cg_linalg_eigh(A, "X", NULL),
                           "Expected UPLO argument to be 'L' or 'U', but got X");
    CG_ASSERT_REFUSED_LINE(cg_linalg_eigvalsh(A, "LU"), "UPLO");
    CG_ASSERT_REFUSED_LINE(cg_linalg_matrix_norm(B, "3", NULL, false),
                           "linalg.matrix_norm: Order 3 not supported.");
    CG_ASSERT_REFUSED_LINE(cg_linalg_matrix_norm(B, "fro", (int[]){0, -2}, false),
                           "dims must be different. Got (0, -2)");
    CG_ASSERT_REFUSED_LINE(cg_linalg_matrix_norm(v3, NULL, NULL, false), "at least 2 dimensions");
    CG_ASSERT_REFUSED_LINE(cg_linalg_matrix_norm(ai, NULL, NULL, false), "Got int64");
    CG_ASSERT_REFUSED_LINE(cg_linalg_matrix_norm(ab, "2", NULL, false), "bfloat16");
    CG_ASSERT_REFUSED_LINE(cg_linalg_vector_norm(ai, 2, 0, NULL, false), "Got int64");
    CG_ASSERT_REFUSED_LINE(cg_linalg_vector_norm(B, 2, 2, (int[]){0, 0}, false), "");
    cg_tensor *e = cg_zeros(CG_SHAPE(2, 0));
    CG_ASSERT_REFUSED_LINE(cg_linalg_vector_norm(e, INFINITY, 0, NULL, false),
                           "cannot compute the inf norm on an empty tensor");
    CG_ASSERT_REFUSED_LINE(cg_linalg_vector_norm(e, -1, 1, (int[]){1}, false),
                           "cannot compute the -1 norm on the dimension 1");
    cg_tensor *ok =
        cg_linalg_vector_norm(e, INFINITY, 1, (int[]){0}, false); /* dim 0 is not empty */
    ck_assert(ok && ok->ndim == 1 && ok->shape[0] == 0);
    cg_tensor *nan = mat(2, 2, (const float[]){1, NAN, 0, 1});
    CG_ASSERT_REFUSED_LINE(
        cg_linalg_svd(nan, false, NULL, NULL),
        "The algorithm failed to converge because the input matrix contained non-finite values.");
    CG_ASSERT_REFUSED_LINE(cg_linalg_svdvals(nan), "non-finite values");
    CG_ASSERT_REFUSED_LINE(cg_linalg_pinv(nan, -1, -1), "non-finite values");
    CG_ASSERT_REFUSED_LINE(cg_linalg_matrix_norm(nan, "nuc", NULL, false), "non-finite values");
    cg_release_all(16, A, B, v3, ai, ab, ah, sing, v2, notpd, batch, two, b43, a23, e, ok, nan);
}
END_TEST

/* The backward refuses QR's modes that PyTorch's does, in one line */
START_TEST(test_qr_backward_refusals)
{
    cg_rng r = cg_rng_new(3);
    cg_tensor *A = cg_requires_grad(cg_randn(&r, CG_SHAPE(4, 3)), true);
    const char *modes[] = {"r", "complete"};
    const char *why[] = {"which is not computed when mode='r'",
                         "not differentiable when mode='complete' and nrows > ncols"};
    for (int i = 0; i < 2; i++) {
        cg_tensor *R, *Q = cg_linalg_qr(A, modes[i], &R), *s = cg_sum_all(R);
        ck_assert_msg(Q && R, "%s", cg_last_error());
        CG_ASSERT_REFUSED(!cg_backward(s, NULL, false), why[i]);
        ck_assert_ptr_null(cg_grad(A));
        cg_release_all(3, Q, R, s);
    }
    cg_release(A);
}
END_TEST

/* ------------------------------------------------- empty and special */
static void assert_shape(const cg_tensor *t, int nd, const int64_t *shape)
{
    ck_assert_msg(t != NULL, "%s", cg_last_error());
    ck_assert_int_eq(t->ndim, nd);
    for (int d = 0; d < nd; d++)
        ck_assert_int_eq(t->shape[d], shape[d]);
}

START_TEST(test_empty)
{
    cg_tensor *z = cg_requires_grad(cg_zeros(CG_SHAPE(0, 0)), true);
    cg_tensor *zb = cg_requires_grad(cg_zeros(CG_SHAPE(2, 0, 0)), true);
    cg_tensor *eb = cg_requires_grad(cg_zeros(CG_SHAPE(0, 3, 3)), true);
    cg_tensor *t30 = cg_requires_grad(cg_zeros(CG_SHAPE(3, 0)), true);
    cg_tensor *v0 = cg_zeros(CG_SHAPE(0));
    cg_tensor *det = cg_linalg_det(z), *detb = cg_linalg_det(zb), *dete = cg_linalg_det(eb);
    ck_assert(det && cg_item(det) == 1.0f);
    assert_shape(detb, 1, (int64_t[]){2});
    ck_assert(cg_data(detb)[0] == 1 && cg_data(detb)[1] == 1);
    assert_shape(dete, 1, (int64_t[]){0});
    cg_tensor *lad, *sign = cg_linalg_slogdet(z, &lad);
    ck_assert(sign && cg_item(sign) == 1 && cg_item(lad) == 0);
    cg_tensor *x = cg_linalg_solve(z, v0), *inv = cg_linalg_inv(eb);
    assert_shape(x, 1, (int64_t[]){0});
    assert_shape(inv, 3, (int64_t[]){0, 3, 3});
    cg_tensor *r, *q = cg_linalg_qr(t30, "complete", &r);
    assert_shape(q, 2, (int64_t[]){3, 3});
    assert_shape(r, 2, (int64_t[]){3, 0});
    ASSERT_NEAR(q, 1, 0, 0, 0, 1, 0, 0, 0, 1);
    cg_tensor *s, *vh, *u = cg_linalg_svd(t30, true, &s, &vh),
                       *u2 = cg_linalg_svd(t30, false, NULL, NULL);
    assert_shape(u, 2, (int64_t[]){3, 3});
    ASSERT_NEAR(u, 1, 0, 0, 0, 1, 0, 0, 0, 1);
    assert_shape(s, 1, (int64_t[]){0});
    assert_shape(vh, 2, (int64_t[]){0, 0});
    assert_shape(u2, 2, (int64_t[]){3, 0});
    cg_tensor *v, *l = cg_linalg_eigh(z, NULL, &v), *ch = cg_linalg_cholesky(eb, false);
    assert_shape(l, 1, (int64_t[]){0});
    assert_shape(v, 2, (int64_t[]){0, 0});
    assert_shape(ch, 3, (int64_t[]){0, 3, 3});
    cg_tensor *t03 = cg_zeros(CG_SHAPE(0, 3)), *pi = cg_linalg_pinv(t30, -1, -1);
    cg_tensor *mn = cg_linalg_matrix_norm(t03, "1", NULL, false); /* the max of 3 sums of 0 */
    CG_ASSERT_REFUSED_LINE(cg_linalg_matrix_norm(t30, "1", NULL, false), ""); /* of none */
    assert_shape(pi, 2, (int64_t[]){0, 3});
    ck_assert(mn && cg_item(mn) == 0);
    /* the backwards run through them; the gradients have the inputs' shapes */
    cg_tensor *sum = cg_sum_all(detb), *sum2 = cg_sum_all(lad);
    ck_assert(cg_backward(sum, NULL, false) && cg_backward(sum2, NULL, false));
    assert_shape(cg_grad(zb), 3, (int64_t[]){2, 0, 0});
    cg_tensor *su = cg_sum_all(u), *sinv = cg_sum_all(inv);
    ck_assert_msg(cg_backward(su, NULL, false) && cg_backward(sinv, NULL, false), "%s",
                  cg_last_error());
    assert_shape(cg_grad(t30), 2, (int64_t[]){3, 0});
    assert_shape(cg_grad(eb), 3, (int64_t[]){0, 3, 3});
    cg_release_all(20, z, zb, eb, t30, v0, det, detb, dete, lad, sign, x, inv, r, q, s, vh, u, u2,
                   l, v);
    cg_release_all(8, ch, pi, mn, sum, sum2, su, sinv, t03);
}
END_TEST

START_TEST(test_nan_inf)
{
    cg_tensor *n = mat(2, 2, (const float[]){1, NAN, 0, 1});
    cg_tensor *b = cg_from_data(CG_SHAPE(2), (const float[]){1, 1});
    cg_tensor *x = cg_linalg_solve(n, b), *inv = cg_linalg_inv(n), *det = cg_linalg_det(n);
    ck_assert(x && isnan(cg_data(x)[0]) && isnan(cg_data(x)[1]));
    ck_assert(inv && isnan(cg_data(inv)[0]) && det && isnan(cg_item(det)));
    cg_tensor *lad, *sign = cg_linalg_slogdet(n, &lad);
    ck_assert(sign && cg_item(sign) == 0 && isnan(cg_item(lad))); /* PyTorch's: sign 0 */
    /* cholesky: a NaN in the triangle read spreads over it, no refusal */
    cg_tensor *cn = mat(2, 2, (const float[]){NAN, 0, 0, 1}), *l = cg_linalg_cholesky(cn, false);
    ck_assert_msg(l != NULL, "%s", cg_last_error());
    ck_assert(isnan(cg_data(l)[0]) && cg_data(l)[1] == 0 && isnan(cg_data(l)[3]));
    cg_tensor *lnan = mat(2, 2, (const float[]){4, 0, NAN, 1}),
              *upper_ok = cg_linalg_cholesky(lnan, true);
    ck_assert(upper_ok && cg_data(upper_ok)[0] == 2); /* the NaN is in the triangle not read */
    /* eigh: NaN or inf in the triangle read, every output NaN */
    const float bad[2] = {NAN, INFINITY};
    for (int i = 0; i < 2; i++) {
        cg_tensor *a = mat(2, 2, (const float[]){1, 0, bad[i], 1}), *v,
                  *e = cg_linalg_eigh(a, NULL, &v);
        ck_assert(e && v);
        for (int k = 0; k < 4; k++)
            ck_assert(isnan(cg_data(v)[k]) && (k >= 2 || isnan(cg_data(e)[k])));
        cg_tensor *eu = cg_linalg_eigvalsh(a, "U"); /* the upper triangle is fine */
        ck_assert(eu && cg_data(eu)[0] == 1 && cg_data(eu)[1] == 1);
        cg_release_all(4, a, v, e, eu);
    }
    /* svd: inf gives NaN (a NaN is refused: test_refusals) */
    cg_tensor *inf = mat(2, 2, (const float[]){1, INFINITY, 0, 1}), *s, *vh;
    cg_tensor *u = cg_linalg_svd(inf, false, &s, &vh);
    ck_assert(u && isnan(cg_data(u)[0]) && isnan(cg_data(s)[1]) && isnan(cg_data(vh)[3]));
    cg_tensor *r,
        *q = cg_linalg_qr(n, NULL, &r); /* Householder's: no iteration, NaN where it goes */
    ck_assert(q && r && isnan(cg_data(r)[1]));
    cg_tensor *vn = cg_linalg_vector_norm(n, INFINITY, 0, NULL, false);
    cg_tensor *v0 = cg_linalg_vector_norm(n, 0, 0, NULL, false);
    ck_assert(isnan(cg_item(vn)) && cg_item(v0) == 3); /* NaN counts as nonzero */
    cg_release_all(19, n, b, x, inv, det, lad, sign, cn, l, upper_ok, inf, s, vh, u, r, q, vn, v0,
                   lnan);
}
END_TEST

/* PyTorch's gradients where they are special */
START_TEST(test_special_gradients)
{
    /* det at a singular matrix: the adjugate's transpose (the cofactors),
     * not PyTorch 1.13's first-order 0 */
    cg_tensor *a = cg_requires_grad(mat(2, 2, (const float[]){1, 2, 2, 4}), true);
    cg_tensor *d = cg_linalg_det(a);
    ck_assert(d && cg_item(d) == 0 && cg_backward(d, NULL, false));
    ASSERT_NEAR(a->grad, 4, -2, -2, 1);
    cg_tensor *a3 = cg_requires_grad(mat(3, 3, (const float[]){1, 2, 3, 2, 4, 6, 1, 0, 1}), true);
    cg_tensor *d3 = cg_linalg_det(a3), *d3s = cg_muls(d3, 2);
    ck_assert(cg_backward(d3s, NULL, false));
    ASSERT_NEAR(a3->grad, 8, 8, -8, -4, -4, 4, 0, 0, 0);
    /* and the non-singular gradient, g det A^-T */
    cg_tensor *an = cg_requires_grad(mat(3, 3, A3), true), *dn = cg_linalg_det(an);
    ck_assert(cg_backward(dn, NULL, false));
    ASSERT_NEAR(an->grad, 21, 0, -7, 0, 20, -10, -7, -10, 19);
    /* repeated eigenvalues: the eigenvalues' gradient is defined (the
     * vectors unused); the vectors' is not (NaN or inf, as PyTorch's) */
    cg_tensor *I = cg_requires_grad(mat(3, 3, (const float[]){1, 0, 0, 0, 1, 0, 0, 0, 1}), true),
              *v, *l = cg_linalg_eigh(I, NULL, &v);
    cg_tensor *w = cg_from_data(CG_SHAPE(3), (const float[]){1, 2, 3}), *lw = cg_mul(l, w);
    cg_tensor *sl = cg_sum_all(lw);
    ck_assert(cg_backward(sl, NULL, false));
    float *g = cg_test_values(I->grad);
    for (int i = 0; i < 9; i++)
        ck_assert(isfinite(g[i]));
    free(g);
    ck_assert(fabs(cg_data(I->grad)[0] + cg_data(I->grad)[4] + cg_data(I->grad)[8] - 6) < 1e-5);
    cg_zero_grad(I);
    cg_tensor *v2, *l2 = cg_linalg_eigh(I, NULL, &v2), *sv = cg_sum_all(v2);
    ck_assert(cg_backward(sv, NULL, false));
    bool nonfinite = false;
    for (int i = 0; i < 9; i++)
        nonfinite = nonfinite || !isfinite(cg_data(I->grad)[i]);
    ck_assert(nonfinite);
    /* the singular values' alone at the identity: the identity */
    cg_tensor *J = cg_requires_grad(mat(2, 2, (const float[]){1, 0, 0, 1}), true), *s,
              *u = cg_linalg_svd(J, false, &s, NULL);
    cg_tensor *ss = cg_sum_all(s);
    ck_assert(cg_backward(ss, NULL, false));
    ASSERT_NEAR(J->grad, 1, 0, 0, 1);
    /* slogdet at a singular matrix: not finite (PyTorch's +-inf) */
    cg_tensor *sg = cg_requires_grad(mat(2, 2, (const float[]){1, 2, 2, 4}), true), *lad;
    cg_tensor *sign = cg_linalg_slogdet(sg, &lad);
    ck_assert(cg_item(lad) == -INFINITY && cg_backward(lad, NULL, false));
    ck_assert(!isfinite(cg_data(sg->grad)[0]));
    cg_release_all(20, a, d, a3, d3, d3s, an, dn, I, v, l, w, lw, sl, l2, sv, J, s, u, ss, sg);
    cg_release_all(3, lad, sign, v2);
}
END_TEST

/* The gradients of a few ops against PyTorch's in float64 (the twin
 * torch_linalg compares the rest) */
START_TEST(test_gradient_values)
{
    cg_tensor *A = cg_requires_grad(mat(3, 3, A3), true),
              *B = cg_requires_grad(mat(3, 2, B32), true);
    cg_tensor *W = mat(3, 2, (const float[]){1, -1, 0.5f, 2, 3, -2});
    cg_tensor *x = cg_linalg_solve(A, B), *xw = cg_mul(x, W), *s = cg_sum_all(xw);
    ck_assert(cg_backward(s, NULL, false));
    ASSERT_NEAR(A->grad, 0, 0.0285714286, 0.0857142857, -0.0571428571, -0.204081633, -0.497959184,
                0.128571429, 0.116326531, 0.0918367347);
    ASSERT_NEAR(B->grad, 0, -0.1, -0.285714286, 0.857142857, 0.642857143, -0.728571429);
    cg_zero_grad(A), cg_zero_grad(B);
    cg_tensor *Ac = mat(3, 3, A3), *l = cg_linalg_cholesky(A, false), *la = cg_mul(l, Ac);
    cg_tensor *sl = cg_sum_all(la);
    ck_assert(cg_backward(sl, NULL, false));
    ASSERT_NEAR(A->grad, 1.120762, 0.0127334278, -0.247890722, 0.0127334278, 1.21779738,
                -0.134365544, -0.247890722, -0.134365544, 1.56296422);
    cg_zero_grad(A);
    cg_tensor *ev = cg_linalg_eigh(A, NULL, NULL),
              *w = cg_from_data(CG_SHAPE(3), (const float[]){1, 2, 3});
    cg_tensor *evw = cg_mul(ev, w), *se = cg_sum_all(evw);
    ck_assert(cg_backward(se, NULL, false));
    ASSERT_NEAR(A->grad, 1.94546522, -0.0386050884, 0.574768902, -0.0386050884, 2, 0.815583419,
                0.574768902, 0.815583419, 2.05453478);
    cg_tensor *R, *Q = cg_linalg_qr(B, NULL, &R), *Bc = mat(3, 2, B32);
    cg_tensor *Rw = mat(2, 2, (const float[]){1, 2, 0, 3}), *qb = cg_mul(Q, Bc),
              *rr = cg_mul(R, Rw);
    cg_tensor *s1 = cg_sum_all(qb), *s2 = cg_sum_all(rr), *sq = cg_add(s1, s2);
    ck_assert(cg_backward(sq, NULL, false));
    ASSERT_NEAR(B->grad, -4.93121954, 2.35319398, -1.97238138, -0.186106434, 0.986456781,
                -2.72540685);
    cg_release_all(22, A, B, W, x, xw, s, Ac, l, la, sl, ev, w, evw, se, R, Q, Bc, Rw, qb, rr, s1,
                   s2);
    cg_release(sq);
}
END_TEST

/* The norms' gradients at zeros and ties, and rank-deficient pinv and
 * lstsq, against PyTorch's in float64 */
START_TEST(test_norm_kinks_and_rank)
{
    const struct {
        float x[3];
        double ord, want[3];
    } c[] = {{{1, 0, -2}, 0.5, {2.414213562, 0, -1.707106781}}, /* 0 at a zero, p < 1 */
             {{1, 0, -2}, -1, {0, 0, 0}},                       /* the norm 0 */
             {{1, -3, 3}, INFINITY, {0, -0.5, 0.5}},            /* ties share g */
             {{1, -1, 3}, -INFINITY, {0.5, -0.5, 0}},
             {{0, 0, 0}, 2, {0, 0, 0}},
             {{0, 0, 0}, 1.5, {0, 0, 0}}};
    for (int i = 0; i < 6; i++) {
        cg_tensor *x = cg_requires_grad(cg_from_data(CG_SHAPE(3), c[i].x), true);
        cg_tensor *n = cg_linalg_vector_norm(x, c[i].ord, 0, NULL, false);
        ck_assert(n && cg_backward(n, NULL, false));
        ck_assert_msg(maxdiff(x->grad, c[i].want) < 1e-6, "case %d (ord %g)", i, c[i].ord);
        cg_release_all(2, x, n);
    }
    /* pinv of a rank-1 matrix: its second singular value cut off */
    cg_tensor *a = cg_requires_grad(mat(2, 2, (const float[]){1, 2, 2, 4}), true);
    cg_tensor *w = mat(2, 2, (const float[]){1, -1, 2, 0.5f}), *p = cg_linalg_pinv(a, -1, -1);
    ASSERT_NEAR(p, 0.04, 0.08, 0.08, 0.16);
    cg_tensor *pw = cg_mul(p, w), *s = cg_sum_all(pw);
    ck_assert(cg_backward(s, NULL, false));
    ASSERT_NEAR(a->grad, 0.008, 0.056, -0.064, -0.048);
    /* lstsq of a rank-1 A: the minimum-norm solution */
    cg_tensor *A = mat(3, 2, (const float[]){1, 2, 2, 4, 3, 6});
    cg_tensor *B = mat(3, 1, (const float[]){1, 2, 3}), *x = cg_linalg_lstsq(A, B, -1);
    ASSERT_NEAR(x, 0.2, 0.4);
    cg_release_all(8, a, w, p, pw, s, A, B, x);
}
END_TEST

/* nn.init.orthogonal_: orthonormal rows (rows <= cols) or columns,
 * times gain; any strides; the refusals */
START_TEST(test_init_orthogonal)
{
    const int64_t shapes[][3] = {{3, 5, 1}, {5, 3, 1}, {4, 2, 3}, {6, 6, 1}};
    const float gains[] = {1.0f, 2.0f, 0.5f, 1.0f};
    cg_rng r = cg_rng_new(5);
    for (int i = 0; i < 4; i++) {
        const int64_t rows = shapes[i][0], cols = shapes[i][1] * shapes[i][2];
        cg_tensor *t = cg_empty(3, shapes[i]);
        ck_assert_msg(cg_init_orthogonal_(t, gains[i], &r), "%s", cg_last_error());
        cg_tensor *w = cg_reshape(t, 2, (int64_t[]){rows, cols}), *wt = cg_transpose(w, 0, 1);
        cg_tensor *g = rows <= cols ? cg_matmul(w, wt) : cg_matmul(wt, w);
        const int64_t k = rows < cols ? rows : cols;
        for (int64_t a = 0; a < k; a++)
            for (int64_t b = 0; b < k; b++)
                ck_assert_msg(fabs(cg_data(g)[a * k + b] - (a == b) * gains[i] * gains[i]) < 1e-5,
                              "shape %d: (%lld, %lld) %g", i, (long long)a, (long long)b,
                              cg_data(g)[a * k + b]);
        cg_release_all(4, t, w, wt, g);
    }
    /* a transposed view is filled in its own (logical) order: the same
     * values as a contiguous tensor from the same draws */
    cg_rng r1 = cg_rng_new(9), r2 = cg_rng_new(9);
    cg_tensor *c = cg_empty(CG_SHAPE(4, 3)), *base = cg_zeros(CG_SHAPE(3, 4));
    cg_tensor *v = cg_transpose(base, 0, 1);
    ck_assert(cg_init_orthogonal_(c, 1.0f, &r1) && cg_init_orthogonal_(v, 1.0f, &r2));
    float *cv = cg_test_values(c), *vv = cg_test_values(v);
    ck_assert(!memcmp(cv, vv, sizeof(float) * 12));
    free(cv), free(vv);
    /* bfloat16: rounded once; empty: untouched; the refusals */
    cg_tensor *b = cg_zeros_dtype(CG_BF16, CG_SHAPE(2, 2)), *e = cg_empty(CG_SHAPE(0, 3));
    ck_assert(cg_init_orthogonal_(b, 1.0f, &r) && cg_init_orthogonal_(e, 1.0f, &r));
    cg_tensor *bf = cg_k_to(b, CG_F32);
    ck_assert(fabs(fabs(cg_data(bf)[0]) - fabs(cg_data(bf)[3])) < 1e-2);
    cg_tensor *one = cg_zeros(CG_SHAPE(3)), *ids = cg_zeros_dtype(CG_I64, CG_SHAPE(2, 2));
    CG_ASSERT_REFUSED(!cg_init_orthogonal_(one, 1.0f, &r),
                      "Only tensors with 2 or more dimensions");
    CG_ASSERT_REFUSED(!cg_init_orthogonal_(ids, 1.0f, &r), "int64");
    CG_ASSERT_REFUSED(!cg_init_orthogonal_(c, NAN, &r), "finite gain");
    CG_ASSERT_REFUSED(!cg_init_orthogonal_(c, 1.0f, NULL), "rng is NULL");
    CG_ASSERT_REFUSED(!cg_init_orthogonal_torch_(c, 1.0f, NULL), "'g' is NULL");
    ck_assert(cg_init_orthogonal_(one, 1.0f, cg_init_skip()) == false); /* checks first */
    cg_tensor *kept = cg_full(CG_SHAPE(2, 2), 7.0f);
    ck_assert(cg_init_orthogonal_(kept, 1.0f, cg_init_skip()) && cg_data(kept)[0] == 7.0f);
    cg_release_all(10, c, base, v, b, e, bf, one, ids, kept, NULL);
}
END_TEST

static Suite *linalg_suite(void)
{
    Suite *s = suite_create("linalg");
    TCase *tc = tcase_create("values");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_values);
    tcase_add_test(tc, test_vector_norm_values);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_qr_backward_refusals);
    tcase_add_test(tc, test_empty);
    tcase_add_test(tc, test_nan_inf);
    tcase_add_test(tc, test_special_gradients);
    tcase_add_test(tc, test_gradient_values);
    tcase_add_test(tc, test_norm_kinks_and_rank);
    tcase_add_test(tc, test_init_orthogonal);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {linalg_suite()};
    return cg_test_run(s, 1);
}
