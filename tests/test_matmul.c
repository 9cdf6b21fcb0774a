/* Check suite "matmul": cg_k_matmul / cg_k_matmul_into / cg_sgemm against
 * naive double-precision loops, on every kind of view, plus path agreement
 * (skx / haswell / default), thread-count bit identity and error cases. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/gemm.h"
#include "core/gemm_internal.h"
#include "core/gemm_skx.h"
#include "core/shares.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------- helpers */

/* Naive reference for PyTorch matmul semantics, reading elements with
 * cg_get (so it shares no stride logic with the code under test). Returns a
 * malloc'd row-major array; *out_ndim / out_shape get the result shape. */
static float *ref_matmul(const cg_tensor *a, const cg_tensor *b, int *out_ndim, int64_t *out_shape)
{
    int a1 = a->ndim == 1, b1 = b->ndim == 1;
    int64_t m = a1 ? 1 : a->shape[a->ndim - 2];
    int64_t k = a->shape[a->ndim - 1];
    int64_t n = b1 ? 1 : b->shape[b->ndim - 1];
    int na = a1 ? 0 : a->ndim - 2, nb = b1 ? 0 : b->ndim - 2;
    int nbd = na > nb ? na : nb;
    int64_t bsh[CG_MAX_DIMS];
    for (int i = 0; i < nbd; i++) {
        int ia = i - (nbd - na), ib = i - (nbd - nb);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        bsh[i] = da > db ? da : db;
    }
    int nd = 0;
    for (int i = 0; i < nbd; i++)
        out_shape[nd++] = bsh[i];
    if (!a1)
        out_shape[nd++] = m;
    if (!b1)
        out_shape[nd++] = n;
    *out_ndim = nd;
    int64_t nbatch = 1;
    for (int i = 0; i < nbd; i++)
        nbatch *= bsh[i];
    float *r = malloc((size_t)(nbatch * m * n + 1) * sizeof(float));
    for (int64_t t = 0; t < nbatch; t++) {
        int64_t bi[CG_MAX_DIMS], rem = t;
        for (int i = nbd - 1; i >= 0; i--) {
            bi[i] = rem % bsh[i];
            rem /= bsh[i];
        }
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t p = 0; p < k; p++) {
                    int64_t ia[CG_MAX_DIMS], ib[CG_MAX_DIMS];
                    for (int d = 0; d < na; d++) {
                        int64_t v = bi[d + (nbd - na)];
                        ia[d] = a->shape[d] == 1 ? 0 : v;
                    }
                    for (int d = 0; d < nb; d++) {
                        int64_t v = bi[d + (nbd - nb)];
                        ib[d] = b->shape[d] == 1 ? 0 : v;
                    }
                    if (a1) {
                        ia[0] = p;
                    } else {
                        ia[na] = i;
                        ia[na + 1] = p;
                    }
                    if (b1) {
                        ib[0] = p;
                    } else {
                        ib[nb] = p;
                        ib[nb + 1] = j;
                    }
                    s += (double)cg_get(a, ia) * (double)cg_get(b, ib);
                }
                r[(t * m + i) * n + j] = (float)s;
            }
    }
    return r;
}

/* Checks c = matmul(a, b) against the reference: shape and values. */
static void check_matmul(const cg_tensor *a, const cg_tensor *b)
{
    cg_clear_error();
    cg_tensor *c = cg_k_matmul(a, b);
    char sa[128], sb[128];
    ck_assert_msg(c != NULL, "matmul %s @ %s failed: %s", cg_shape_str(a, sa, sizeof sa),
                  cg_shape_str(b, sb, sizeof sb), cg_last_error());
    int nd;
    int64_t shape[CG_MAX_DIMS];
    float *r = ref_matmul(a, b, &nd, shape);
    ck_assert_int_eq(c->ndim, nd);
    for (int i = 0; i < nd; i++)
        ck_assert_int_eq(c->shape[i], shape[i]);
    int64_t k = a->shape[a->ndim - 1];
    CG_ASSERT_TENSOR(c, r, 1e-5 * (double)(k + 1), 1e-4);
    free(r);
    cg_release(c);
}

static cg_tensor *randn(cg_rng *rng, int nd, const int64_t *shape)
{
    return cg_randn(rng, nd, shape);
}

/* ------------------------------------------------------------- 2-D */

START_TEST(test_2d_sizes)
{
    cg_rng rng = cg_rng_new(1);
    const int64_t sz[] = {1, 7, 33, 129};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 4; l++) {
                cg_tensor *a = randn(&rng, CG_SHAPE(sz[i], sz[l]));
                cg_tensor *b = randn(&rng, CG_SHAPE(sz[l], sz[j]));
                check_matmul(a, b);
                cg_release_all(2, a, b);
            }
}
END_TEST

START_TEST(test_2d_known_values)
{
    /* [[1,2,3],[4,5,6]] @ [[7,8],[9,10],[11,12]] = [[58,64],[139,154]] */
    float av[] = {1, 2, 3, 4, 5, 6}, bv[] = {7, 8, 9, 10, 11, 12};
    float expect[] = {58, 64, 139, 154};
    cg_tensor *a = cg_from_data(CG_SHAPE(2, 3), av);
    cg_tensor *b = cg_from_data(CG_SHAPE(3, 2), bv);
    cg_tensor *c = cg_k_matmul(a, b);
    CG_ASSERT_TENSOR(c, expect, 0, 0);
    cg_release_all(3, a, b, c);
}
END_TEST

START_TEST(test_empty_dims)
{
    cg_rng rng = cg_rng_new(2);
    /* k == 0: zeros of [m, n] */
    cg_tensor *a = randn(&rng, CG_SHAPE(3, 0));
    cg_tensor *b = randn(&rng, CG_SHAPE(0, 4));
    cg_tensor *c = cg_k_matmul(a, b);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(c->ndim, 2);
    ck_assert_int_eq(c->shape[0], 3);
    ck_assert_int_eq(c->shape[1], 4);
    float z[12] = {0};
    CG_ASSERT_TENSOR(c, z, 0, 0);
    cg_release_all(3, a, b, c);
    /* m == 0 and a zero batch */
    a = randn(&rng, CG_SHAPE(0, 5));
    b = randn(&rng, CG_SHAPE(5, 4));
    c = cg_k_matmul(a, b);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(c->shape[0], 0);
    ck_assert_int_eq(c->shape[1], 4);
    cg_release_all(3, a, b, c);
    a = randn(&rng, CG_SHAPE(0, 2, 5));
    b = randn(&rng, CG_SHAPE(5, 4));
    c = cg_k_matmul(a, b);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(c->ndim, 3);
    ck_assert_int_eq(cg_numel(c), 0);
    cg_release_all(3, a, b, c);
}
END_TEST

/* ------------------------------------------------------------- 1-D */

START_TEST(test_1d_operands)
{
    cg_rng rng = cg_rng_new(3);
    cg_tensor *v = randn(&rng, CG_SHAPE(33));
    cg_tensor *w = randn(&rng, CG_SHAPE(33));
    cg_tensor *m = randn(&rng, CG_SHAPE(7, 33));
    cg_tensor *mt = randn(&rng, CG_SHAPE(33, 7));
    cg_tensor *b3 = randn(&rng, CG_SHAPE(4, 7, 33));
    cg_tensor *b3t = randn(&rng, CG_SHAPE(4, 33, 7));
    check_matmul(v, w);   /* dot -> 0-d */
    check_matmul(m, v);   /* [7] */
    check_matmul(v, mt);  /* [7] */
    check_matmul(b3, v);  /* [4, 7] */
    check_matmul(v, b3t); /* [4, 7] */

    /* the dot product is a 0-d tensor with the right value */
    cg_tensor *d = cg_k_matmul(v, w);
    ck_assert_int_eq(d->ndim, 0);
    double s = 0;
    for (int64_t i = 0; i < 33; i++)
        s += (double)cg_get(v, (int64_t[]){i}) * cg_get(w, (int64_t[]){i});
    ck_assert_float_eq_tol(cg_item(d), (float)s, 1e-4);
    cg_release(d);

    /* strided and stride-0 (expanded) vectors */
    cg_tensor *big = randn(&rng, CG_SHAPE(66));
    cg_tensor *vs = cg_view_slice(big, 0, 0, 66, 2);
    cg_tensor *one = randn(&rng, CG_SHAPE(1));
    cg_tensor *ve = cg_view_expand(one, CG_SHAPE(33));
    check_matmul(vs, w);
    check_matmul(m, vs);
    check_matmul(vs, mt);
    check_matmul(ve, w);
    check_matmul(m, ve);
    check_matmul(ve, b3t);
    cg_release_all(10, v, w, m, mt, b3, b3t, big, vs, one, ve);
}
END_TEST

/* ------------------------------------------------------------- batched */

START_TEST(test_batched_broadcast)
{
    cg_rng rng = cg_rng_new(4);
    struct {
        int na, nb;
        int64_t sa[4], sb[4];
    } cases[] = {
        {3, 3, {5, 7, 9}, {5, 9, 33}},      /* same batch */
        {4, 3, {2, 3, 7, 9}, {3, 9, 6}},    /* b broadcast over dim 0 */
        {4, 4, {2, 1, 7, 9}, {1, 4, 9, 6}}, /* both broadcast -> [2, 4] */
        {3, 2, {6, 7, 33}, {33, 129}},      /* shared b: one tall gemm */
        {4, 2, {2, 3, 1, 33}, {33, 7}},     /* shared b, m == 1 */
        {2, 3, {7, 9}, {6, 9, 5}},          /* shared a */
        {4, 3, {3, 1, 7, 9}, {1, 9, 6}},    /* size-1 batch dims */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cg_tensor *a = randn(&rng, cases[c].na, cases[c].sa);
        cg_tensor *b = randn(&rng, cases[c].nb, cases[c].sb);
        check_matmul(a, b);
        cg_release_all(2, a, b);
    }
}
END_TEST

/* ------------------------------------------------------------- views */

START_TEST(test_layouts)
{
    /* every combination of contiguous / transposed / strided / broadcast */
    cg_rng rng = cg_rng_new(5);
    for (int ka = 0; ka < 4; ka++)
        for (int kb = 0; kb < 4; kb++) {
            cg_tensor *a = cg_test_randn_layout(&rng, CG_SHAPE(3, 7, 33), ka);
            cg_tensor *b = cg_test_randn_layout(&rng, CG_SHAPE(3, 33, 9), kb);
            check_matmul(a, b);
            cg_tensor *a2 = cg_test_randn_layout(&rng, CG_SHAPE(129, 7), ka);
            cg_tensor *b2 = cg_test_randn_layout(&rng, CG_SHAPE(7, 33), kb);
            check_matmul(a2, b2);
            /* batched a with a shared 2-D b (the tall-gemm path when a allows) */
            cg_tensor *b3 = cg_test_randn_layout(&rng, CG_SHAPE(33, 9), kb);
            check_matmul(a, b3);
            cg_release_all(5, a, b, a2, b2, b3);
        }
}
END_TEST

START_TEST(test_views)
{
    cg_rng rng = cg_rng_new(6);
    /* transposed operands: x^T @ y and x @ y^T */
    cg_tensor *x = randn(&rng, CG_SHAPE(33, 7));
    cg_tensor *y = randn(&rng, CG_SHAPE(33, 129));
    cg_tensor *xt = cg_view_transpose(x, 0, 1);
    check_matmul(xt, y);
    cg_tensor *z = randn(&rng, CG_SHAPE(9, 129));
    cg_tensor *zt = cg_view_transpose(z, 0, 1);
    check_matmul(y, zt);

    /* permuted 4-D: [B, T, H, D] -> [B, H, T, D] @ [B, H, D, T] */
    cg_tensor *q = randn(&rng, CG_SHAPE(2, 7, 3, 5));
    cg_tensor *kk = randn(&rng, CG_SHAPE(2, 7, 3, 5));
    cg_tensor *qp = cg_view_permute(q, (int[]){0, 2, 1, 3});
    cg_tensor *kp = cg_view_permute(kk, (int[]){0, 2, 3, 1});
    check_matmul(qp, kp);

    /* sliced with steps in both dims (general strides, no unit stride) */
    cg_tensor *big = randn(&rng, CG_SHAPE(40, 70));
    cg_tensor *s1 = cg_view_slice(big, 0, 1, 40, 3); /* 13 rows, stride 210 */
    cg_tensor *s2 = cg_view_slice(s1, 1, 2, 68, 2);  /* 33 cols, stride 2 */
    cg_tensor *w = randn(&rng, CG_SHAPE(33, 7));
    check_matmul(s2, w);
    cg_tensor *s2t = cg_view_transpose(s2, 0, 1); /* [33, 13] */
    cg_tensor *u = randn(&rng, CG_SHAPE(7, 33));
    check_matmul(u, s2t);
    check_matmul(s2t, s2); /* [33, 13] @ [13, 33], both general strides */

    /* stride-0 expanded matrix dims and batch dims */
    cg_tensor *row = randn(&rng, CG_SHAPE(1, 33));
    cg_tensor *rexp = cg_view_expand(row, CG_SHAPE(7, 33)); /* rows stride 0 */
    check_matmul(rexp, w);
    cg_tensor *col = randn(&rng, CG_SHAPE(33, 1));
    cg_tensor *cexp = cg_view_expand(col, CG_SHAPE(33, 9)); /* cols stride 0 */
    check_matmul(u, cexp);
    cg_tensor *m3 = randn(&rng, CG_SHAPE(1, 7, 33));
    cg_tensor *m3e = cg_view_expand(m3, CG_SHAPE(5, 7, 33)); /* batch stride 0 */
    cg_tensor *b3 = randn(&rng, CG_SHAPE(5, 33, 6));
    check_matmul(m3e, b3);
    check_matmul(m3e, w); /* broadcast a with shared b: must not fold rows */

    cg_release_all(10, x, y, xt, z, zt, q, kk, qp, kp, big);
    cg_release_all(12, s1, s2, w, s2t, u, row, rexp, col, cexp, m3, m3e, b3);
}
END_TEST

/* ------------------------------------------------------------- into */

START_TEST(test_matmul_into)
{
    cg_rng rng = cg_rng_new(7);
    /* c = 0.5 a@b + 2 c */
    cg_tensor *a = randn(&rng, CG_SHAPE(33, 7));
    cg_tensor *b = randn(&rng, CG_SHAPE(7, 129));
    cg_tensor *c = randn(&rng, CG_SHAPE(33, 129));
    float *c0 = cg_test_values(c);
    int nd;
    int64_t sh[CG_MAX_DIMS];
    float *r = ref_matmul(a, b, &nd, sh);
    for (int i = 0; i < 33 * 129; i++)
        r[i] = 0.5f * r[i] + 2.0f * c0[i];
    ck_assert(cg_k_matmul_into(c, a, b, 0.5f, 2.0f));
    CG_ASSERT_TENSOR(c, r, 1e-4, 1e-4);

    /* a write: c's version moves on, and a form derived from c (its packed
     * copy as a weight, where this CPU keeps one) is dropped, so a product
     * reading c as a weight after it reads the new values */
    cg_tensor *x = randn(&rng, CG_SHAPE(40, 129));
    cg_tensor *y0 = cg_k_linear_packed(x, c, NULL);
    ck_assert(y0);
    ck_assert(!cg_f32_packed_usable() || c->storage->derived);
    const uint64_t v0 = cg_version(c);
    ck_assert(cg_k_matmul_into(c, a, b, 1.0f, 1.0f));
    ck_assert_uint_gt(cg_version(c), v0);
    ck_assert_ptr_null(c->storage->derived);
    cg_tensor *yw = cg_k_linear(x, c, NULL), *y1 = cg_k_linear_packed(x, c, NULL);
    ck_assert(yw && y1 && !memcmp(cg_data(y1), cg_data(yw), sizeof(float) * 40 * 33));
    cg_release_all(4, x, y0, yw, y1);

    /* beta = 0: c is not read, NaN in c does not leak */
    cg_fill_(c, NAN);
    float *r2 = ref_matmul(a, b, &nd, sh);
    ck_assert(cg_k_matmul_into(c, a, b, 1.0f, 0.0f));
    CG_ASSERT_TENSOR(c, r2, 1e-4, 1e-4);

    /* output as a transposed view (column-major writes) */
    cg_tensor *ct_base = cg_zeros(CG_SHAPE(129, 33));
    cg_tensor *ct = cg_view_transpose(ct_base, 0, 1);
    ck_assert(cg_k_matmul_into(ct, a, b, 1.0f, 1.0f));
    CG_ASSERT_TENSOR(ct, r2, 1e-4, 1e-4);

    /* output a slice of a larger buffer: elements outside stay untouched */
    cg_tensor *buf = cg_full(CG_SHAPE(40, 140), 7.0f);
    cg_tensor *win0 = cg_view_slice(buf, 0, 3, 36, 1);
    cg_tensor *win = cg_view_slice(win0, 1, 5, 134, 1);
    ck_assert(cg_k_matmul_into(win, a, b, 1.0f, 0.0f));
    CG_ASSERT_TENSOR(win, r2, 1e-4, 1e-4);
    float *bv = cg_test_values(buf);
    for (int i = 0; i < 40; i++)
        for (int j = 0; j < 140; j++)
            if (i < 3 || i >= 36 || j < 5 || j >= 134)
                ck_assert_float_eq(bv[i * 140 + j], 7.0f);
    free(bv);

    /* batched with a broadcast b, accumulating twice */
    cg_tensor *ab = randn(&rng, CG_SHAPE(4, 9, 33));
    cg_tensor *bb = randn(&rng, CG_SHAPE(1, 33, 7));
    cg_tensor *cb = cg_zeros(CG_SHAPE(4, 9, 7));
    float *rb = ref_matmul(ab, bb, &nd, sh);
    ck_assert(cg_k_matmul_into(cb, ab, bb, 1.0f, 1.0f));
    ck_assert(cg_k_matmul_into(cb, ab, bb, 1.0f, 1.0f));
    for (int i = 0; i < 4 * 9 * 7; i++)
        rb[i] *= 2.0f;
    CG_ASSERT_TENSOR(cb, rb, 1e-4, 1e-4);

    /* k == 0 scales c by beta */
    cg_tensor *a0 = randn(&rng, CG_SHAPE(3, 0));
    cg_tensor *b0 = randn(&rng, CG_SHAPE(0, 2));
    cg_tensor *c0t = cg_full(CG_SHAPE(3, 2), 1.5f);
    ck_assert(cg_k_matmul_into(c0t, a0, b0, 1.0f, 2.0f));
    float three[6] = {3, 3, 3, 3, 3, 3};
    CG_ASSERT_TENSOR(c0t, three, 0, 0);

    free(c0);
    free(r);
    free(r2);
    free(rb);
    cg_release_all(10, a, b, c, ct_base, ct, buf, win0, win, ab, bb);
    cg_release_all(4, cb, a0, b0, c0t);
}
END_TEST

/* matmul_into whose output shares an input's memory: the product of the
 * inputs as they were before the call (as NumPy's out= does), bit for bit
 * the product into a fresh tensor. The products write C while they still
 * read A or B (k past one block, or B packed a panel at a time), so
 * without a copy c = c @ b went wrong from k = 300 on, silently. */
START_TEST(test_matmul_into_aliased)
{
    cg_rng rng = cg_rng_new(11);
    for (int prec = 0; prec < 2; prec++) {
        if (prec && !cg_gemm_path_available(CG_GEMM_BF16_EMULATED))
            continue;
        cg_set_matmul_precision(prec ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        cg_tensor *a = randn(&rng, CG_SHAPE(5, 520)), *b = randn(&rng, CG_SHAPE(520, 520));
        cg_tensor *ab = cg_k_matmul(a, b), *aa = cg_k_matmul(b, b);
        /* c = c @ b, c = b @ c (b [520, 520] @ c [520, 5]) and c = c @ c */
        cg_tensor *c1 = cg_k_clone(a);
        ck_assert(cg_k_matmul_into(c1, c1, b, 1.0f, 0.0f));
        cg_tensor *tv = cg_view_transpose(a, 0, 1), *at = cg_k_contiguous(tv);
        cg_tensor *bat = cg_k_matmul(b, at), *c2 = cg_k_clone(at);
        ck_assert(cg_k_matmul_into(c2, b, c2, 1.0f, 0.0f));
        cg_tensor *c3 = cg_k_clone(b);
        ck_assert(cg_k_matmul_into(c3, c3, c3, 1.0f, 0.0f));
        ck_assert(!memcmp(cg_data(c1), cg_data(ab), sizeof(float) * 5 * 520));
        ck_assert(!memcmp(cg_data(c2), cg_data(bat), sizeof(float) * 5 * 520));
        ck_assert(!memcmp(cg_data(c3), cg_data(aa), sizeof(float) * 520 * 520));
        /* an output one row past its input in the same buffer (rows 1-5 of
         * c are rows 1-5 of a's bytes) */
        cg_tensor *buf = randn(&rng, CG_SHAPE(6, 520));
        cg_tensor *lo = cg_view_slice(buf, 0, 0, 5, 1), *hi = cg_view_slice(buf, 0, 1, 6, 1);
        cg_tensor *l0 = cg_k_clone(lo), *r = cg_k_matmul(l0, b);
        ck_assert(cg_k_matmul_into(hi, lo, b, 1.0f, 0.0f));
        cg_tensor *hc = cg_k_contiguous(hi);
        ck_assert(!memcmp(cg_data(hc), cg_data(r), sizeof(float) * 5 * 520));
        cg_release_all(10, a, b, ab, aa, c1, tv, at, bat, c2, c3);
        cg_release_all(6, buf, lo, hi, l0, r, hc);
    }
    cg_set_matmul_precision(CG_PRECISION_FP32);
}
END_TEST

/* ------------------------------------------------------------- paths */

START_TEST(test_paths_agree)
{
    cg_rng rng = cg_rng_new(8);
    const int64_t m = 200, n = 150, k = 300;
    cg_tensor *a = randn(&rng, CG_SHAPE(m, k));
    cg_tensor *b = randn(&rng, CG_SHAPE(k, n));
    int nd;
    int64_t sh[CG_MAX_DIMS];
    float *r = ref_matmul(a, b, &nd, sh);
    float *c = malloc((size_t)(m * n) * sizeof(float));
    ck_assert(cg_gemm_path_available(CG_GEMM_DEFAULT));
    const cg_gemm_path paths[] = {CG_GEMM_DEFAULT, CG_GEMM_SKX, CG_GEMM_HASWELL, CG_GEMM_AUTO};
    for (int p = 0; p < 4; p++) {
        if (!cg_gemm_path_available(paths[p])) {
            ck_assert(!cg_sgemm_path(paths[p], 1, m, n, k, 1.0f, cg_data(a), k, 1, cg_data(b), n, 1,
                                     0.0f, c, n, 1));
            continue;
        }
        for (int64_t i = 0; i < m * n; i++)
            c[i] = NAN;
        ck_assert(cg_sgemm_path(paths[p], 2, m, n, k, 1.0f, cg_data(a), k, 1, cg_data(b), n, 1,
                                0.0f, c, n, 1));
        CG_ASSERT_CLOSE(c, r, m * n, 2e-4, 1e-4);
    }
    /* the chosen path's name matches the active path */
    ck_assert_str_ne(cg_gemm_path_name(cg_gemm_active_path()), "unknown");
    if (!getenv("CG_BLIS_DEFAULT") && cg_gemm_path_available(CG_GEMM_SKX))
        ck_assert_int_eq(cg_gemm_active_path(), CG_GEMM_SKX);
    free(r);
    free(c);
    cg_release_all(2, a, b);
}
END_TEST

/* Our blocked driver around the skx micro-kernel against BLIS's own driver
 * with the same context: bit-identical (same kernel, same k blocking) for
 * sizes on both sides of the tile (32 x 12) and block (MC, KC, NC) edges,
 * for every operand layout (unit stride along the panel, along k, or
 * neither), beta 0 over NaN, beta 1 and a bias (beta 0, as C set to the
 * bias and then beta 1), and against double loops. */
void bli_cntx_init_skx(cntx_t *cntx);

void bli_cntx_init_haswell(cntx_t *cntx);

/* The block sizes core/gemm.c writes itself (BLIS's context initialisers
 * allocate, and abort out of memory) are BLIS 0.9's: skx's, and haswell's
 * with skx's k blocks. */
START_TEST(test_block_sizes_blis)
{
    static cntx_t skx, hsw;
    bli_init();
    bli_cntx_init_skx(&skx);
    bli_cntx_init_haswell(&hsw);
    const bszid_t ids[] = {BLIS_MR, BLIS_NR, BLIS_MC, BLIS_KC, BLIS_NC};
    for (int s = 1; s >= 0; s--) {
        cntx_t *ours = cg_gemm_blocks(s);
        if (!ours)
            continue; /* no AVX-512 (s) or AVX2 here */
        for (int i = 0; i < 5; i++) {
            cntx_t *blis = s || ids[i] == BLIS_KC ? &skx : &hsw;
            ck_assert_int_eq(bli_cntx_get_blksz_def_dt(BLIS_FLOAT, ids[i], ours),
                             bli_cntx_get_blksz_def_dt(BLIS_FLOAT, ids[i], blis));
            ck_assert_int_eq(bli_cntx_get_blksz_max_dt(BLIS_FLOAT, ids[i], ours),
                             bli_cntx_get_blksz_max_dt(BLIS_FLOAT, ids[i], blis));
        }
    }
}
END_TEST

static void fill_strided(cg_rng *rng, float *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = cg_rng_uniform(rng) - 0.5f;
}

START_TEST(test_skx_driver)
{
    if (!cg_gemm_path_available(CG_GEMM_SKX))
        return; /* no AVX-512 here */
    static cntx_t cx;
    bli_init();
    bli_cntx_init_skx(&cx);
    const int64_t KC = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_KC, &cx);
    const int64_t MC = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MC, &cx);
    const int64_t NC = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_NC, &cx);
    cg_rng rng = cg_rng_new(21);
    const int64_t sizes[][3] = {{1, 1, 1},           {31, 11, 15},     {32, 12, 16},
                                {33, 13, 17},        {64, 24, 100},    {70, 50, KC + 5},
                                {MC + 40, 30, 40},   {20, NC + 7, 20}, {128, 512, 128},
                                {3, 200, 2 * KC + 1}};
    const int ns = (int)(sizeof sizes / sizeof sizes[0]);
    float one = 1.0f;
    for (int si = 0; si < ns; si++) {
        const int64_t m = sizes[si][0], n = sizes[si][1], k = sizes[si][2];
        /* layouts: 0 row-major, 1 column-major, 2 general (both strides > 1) */
        for (int la = 0; la < 3; la++)
            for (int lb = 0; lb < 3; lb++)
                for (int lc = 0; lc < 2; lc++) {
                    int64_t rsa = la == 0   ? k
                                  : la == 1 ? 1
                                            : 2 * k,
                            csa = la == 1   ? m
                                  : la == 0 ? 1
                                            : 2;
                    int64_t rsb = lb == 0   ? n
                                  : lb == 1 ? 1
                                            : 2 * n,
                            csb = lb == 1   ? k
                                  : lb == 0 ? 1
                                            : 2;
                    int64_t rsc = lc == 0 ? n : 1, csc = lc == 0 ? 1 : m;
                    size_t na = (size_t)(2 * m * k + 2), nb = (size_t)(2 * k * n + 2);
                    float *a = malloc(na * sizeof(float)), *b = malloc(nb * sizeof(float));
                    float *c1 = cg_alloc((size_t)(m * n) * sizeof(float));
                    float *c2 = cg_alloc((size_t)(m * n) * sizeof(float));
                    fill_strided(&rng, a, (int64_t)na);
                    fill_strided(&rng, b, (int64_t)nb);
                    /* beta 0, beta 1, and a bias (of stride 1 or 2) with beta 0: the bits
                     * of C set to the bias, then BLIS's C = A B + 1 C; modes 3 and 4:
                     * 0 and 2 with the operand the driver calls A (B^T when C is
                     * row-stored and turned over) packed beforehand, that operand
                     * then NULL */
                    const int64_t bs = 1 + si % 2;
                    float *bias = malloc((size_t)(n * bs) * sizeof(float));
                    fill_strided(&rng, bias, n * bs);
                    const bool turned = csc == 1 && rsc != 1;
                    const int64_t pn = turned ? n : m;
                    float *pre = cg_alloc(cg_skx_pack_floats(pn, k) * sizeof(float));
                    if (turned)
                        cg_skx_pack_rows(n, k, b, csb, rsb, pre);
                    else
                        cg_skx_pack_rows(m, k, a, rsa, csa, pre);
                    for (int run = 0; run < 5; run++) {
                        const int mode = run == 3 ? 0 : run == 4 ? 2 : run;
                        const bool packed = run >= 3;
                        const float beta = mode == 1 ? 1.0f : 0.0f, bl_beta = mode ? 1.0f : 0.0f;
                        for (int64_t i = 0; i < m; i++)
                            for (int64_t j = 0; j < n; j++) {
                                const int64_t e = i * rsc + j * csc;
                                c1[e] = mode == 1 ? (float)(e % 7) - 3.0f : NAN;
                                c2[e] = mode == 2 ? bias[j * bs] : c1[e];
                            }
                        ck_assert(cg_skx_gemm(&cx, m, n, k, 1.0f, packed && !turned ? NULL : a, rsa,
                                              csa, packed && turned ? NULL : b, rsb, csb, beta,
                                              mode == 2 ? bias : NULL, bs, c1, rsc, csc,
                                              packed ? pre : NULL));
                        rntm_t r = BLIS_RNTM_INITIALIZER;
                        bli_rntm_set_num_threads(1, &r);
                        bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, a, rsa,
                                     csa, b, rsb, csb, (float *)&bl_beta, c2, rsc, csc, &cx, &r);
                        if (memcmp(c1, c2, (size_t)(m * n) * sizeof(float)) != 0)
                            ck_abort_msg("skx driver differs from BLIS: %lldx%lldx%lld layouts "
                                         "%d%d%d mode %d%s",
                                         (long long)m, (long long)n, (long long)k, la, lb, lc, mode,
                                         packed ? " prepacked" : "");
                        /* and is right: spot-check elements against double loops */
                        for (int t = 0; t < 16; t++) {
                            int64_t i = (int64_t)cg_rng_below(&rng, (uint64_t)m);
                            int64_t j = (int64_t)cg_rng_below(&rng, (uint64_t)n);
                            double acc = mode == 1   ? (double)((i * rsc + j * csc) % 7) - 3.0
                                         : mode == 2 ? (double)bias[j * bs]
                                                     : 0.0;
                            for (int64_t p = 0; p < k; p++)
                                acc += (double)a[i * rsa + p * csa] * b[p * rsb + j * csb];
                            ck_assert_double_eq_tol(c1[i * rsc + j * csc], acc,
                                                    1e-4 * (1.0 + sqrt((double)k)));
                        }
                    }
                    cg_free(pre);
                    free(bias);
                    free(a);
                    free(b);
                    cg_free(c1);
                    cg_free(c2);
                }
    }
}
END_TEST

/* The haswell path's driver (ours around BLIS's AVX2 6 x 16 micro-kernel,
 * core/gemm_haswell.c) against BLIS's own driver with the haswell context
 * (cg_gemm_use_own_driver(false), as CG_BLIS_DRIVER=1): bit-identical on
 * shapes on both sides of the tile (6 x 16), of MC (168) and NC (4080) and
 * of KC (384, the last block stretched to 480), A, B and C row- or
 * column-stored or strided both ways, alpha 1 and not, beta 0 (C NaN,
 * unread), 1 and 0.7, a bias (of stride 1 or 2), 1 and 2 threads. */
static float *hsw_operand(cg_rng *rng, int64_t rows, int64_t cols, int lay, int64_t *rs,
                          int64_t *cs)
{
    /* 0 row-major, 1 column-major, 2 strided both ways (rows apart) */
    *rs = lay == 0 ? cols : lay == 1 ? 1 : 2 * cols;
    *cs = lay == 0 ? 1 : lay == 1 ? rows : 2;
    const int64_t n = lay == 2 ? 2 * rows * cols : rows * cols;
    float *p = malloc((size_t)n * sizeof(float));
    fill_strided(rng, p, n);
    return p;
}

START_TEST(test_haswell_driver)
{
    if (!cg_gemm_path_available(CG_GEMM_HASWELL))
        return; /* no AVX2 and FMA here */
    cg_rng rng = cg_rng_new(23);
    const int64_t sizes[][3] = {{5, 15, 7},      {6, 16, 8},     {7, 17, 9},     {13, 33, 100},
                                {37, 29, 383},   {50, 40, 384},  {30, 20, 385},  {40, 30, 480},
                                {20, 21, 481},   {170, 40, 50},  {12, 4090, 20}, {9, 200, 769},
                                {128, 512, 128}, {100, 70, 1000}};
    const int ns = (int)(sizeof sizes / sizeof sizes[0]);
    /* alpha, beta, bias stride (0: none; with a bias alpha 1 and beta 0) */
    const float runs[][3] = {{1, 0, 0}, {1, 1, 0}, {1.3f, 0.7f, 0}, {1, 0, 1}, {1, 0, 2}};
    for (int si = 0; si < ns; si++) {
        const int64_t m = sizes[si][0], n = sizes[si][1], k = sizes[si][2];
        for (int la = 0; la < 3; la++)
            for (int lb = 0; lb < 3; lb++)
                for (int lc = 0; lc < 3; lc++) {
                    int64_t rsa, csa, rsb, csb;
                    float *a = hsw_operand(&rng, m, k, la, &rsa, &csa);
                    float *b = hsw_operand(&rng, k, n, lb, &rsb, &csb);
                    const int64_t rsc = lc == 0 ? n : lc == 1 ? 1 : 2;
                    const int64_t csc = lc == 0 ? 1 : lc == 1 ? m : 2 * m;
                    const size_t nc = (size_t)(lc == 2 ? 2 * m * n : m * n);
                    float *c[2] = {cg_alloc(nc * sizeof(float)), cg_alloc(nc * sizeof(float))};
                    float *bias = malloc((size_t)(2 * n) * sizeof(float));
                    fill_strided(&rng, bias, 2 * n);
                    for (int r = 0; r < 5; r++)
                        for (int nt = 1; nt <= 2; nt++) {
                            const float alpha = runs[r][0], beta = runs[r][1];
                            const int64_t bs = (int64_t)runs[r][2];
                            for (int d = 0; d < 2; d++) { /* d 0: ours, 1: BLIS's */
                                for (size_t e = 0; e < nc; e++)
                                    c[d][e] = beta != 0.0f ? (float)(e % 7) - 3.0f : NAN;
                                const bool was = cg_gemm_use_own_driver(d == 0);
                                const bool ok =
                                    bs ? cg_sgemm_bias_path(CG_GEMM_HASWELL, nt, m, n, k, a, rsa,
                                                            csa, b, rsb, csb, bias, bs, c[d], rsc,
                                                            csc)
                                       : cg_sgemm_path(CG_GEMM_HASWELL, nt, m, n, k, alpha, a, rsa,
                                                       csa, b, rsb, csb, beta, c[d], rsc, csc);
                                cg_gemm_use_own_driver(was);
                                ck_assert(ok);
                            }
                            if (memcmp(c[0], c[1], nc * sizeof(float)) != 0)
                                ck_abort_msg("haswell driver differs from BLIS's: %lldx%lldx%lld "
                                             "layouts %d%d%d run %d, %d threads",
                                             (long long)m, (long long)n, (long long)k, la, lb, lc,
                                             r, nt);
                            /* and is right: spot-check elements against double loops */
                            for (int t = 0; t < 8; t++) {
                                int64_t i = (int64_t)cg_rng_below(&rng, (uint64_t)m);
                                int64_t j = (int64_t)cg_rng_below(&rng, (uint64_t)n);
                                const int64_t e = i * rsc + j * csc;
                                double acc = 0.0;
                                for (int64_t p = 0; p < k; p++)
                                    acc += (double)a[i * rsa + p * csa] * b[p * rsb + j * csb];
                                acc = alpha * acc +
                                      (bs ? (double)bias[j * bs] : beta * (double)((e % 7) - 3));
                                ck_assert_double_eq_tol(c[0][e], acc,
                                                        1e-4 * (1.0 + sqrt((double)k)));
                            }
                        }
                    free(bias);
                    free(a);
                    free(b);
                    cg_free(c[0]);
                    cg_free(c[1]);
                }
    }
}
END_TEST

/* cg_gemm_k_block (issue 37): a product over k equals, bit for bit, its
 * k blocks' products added one after another with beta 1, on every path
 * this CPU has, for C row- or column-stored, A stored as its transpose
 * (the fused loss's dL^T) or not, 1 and 2 threads; the blocks cover k;
 * BLIS's default path promises none. A product split in two
 * (cg_gemm_k_split) is its first half's blocks so added, plus its second
 * half's added on their own. */
START_TEST(test_k_blocks)
{
    const cg_gemm_path paths[] = {CG_GEMM_SKX, CG_GEMM_HASWELL, CG_GEMM_BF16, CG_GEMM_BF16_EMULATED,
                                  CG_GEMM_BF16_AMX};
    const int64_t ks[] = {1,   2,   5,   255, 256, 257, 383, 384,  385,  389,  479,  480, 481,
                          511, 512, 513, 767, 768, 769, 865, 1000, 1157, 1421, 1536, 3072};
    const int64_t m = 45, n = 37;
    cg_rng rng = cg_rng_new(37);
    ck_assert_int_eq(cg_gemm_k_block(CG_GEMM_DEFAULT, 100, 0), 0);
    ck_assert_int_eq(cg_gemm_k_block(CG_GEMM_SKX, 100, 100), 0);
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
        if (!cg_gemm_path_available(paths[pi]))
            continue;
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            const int64_t k = ks[ki];
            float *a = malloc((size_t)(m * k) * sizeof(float));
            float *b = malloc((size_t)(k * n) * sizeof(float));
            float *c1 = malloc((size_t)(m * n) * sizeof(float));
            float *c2 = malloc((size_t)(m * n) * sizeof(float));
            float *c3 = malloc((size_t)(m * n) * sizeof(float));
            fill_strided(&rng, a, m * k);
            fill_strided(&rng, b, k * n);
            int64_t sum = 0;
            for (int64_t i = 0, kb; i < k; i += kb) {
                kb = cg_gemm_k_block(paths[pi], k, i);
                ck_assert_int_gt(kb, 0);
                sum += kb;
            }
            ck_assert_int_eq(sum, k);
            for (int lay = 0; lay < 4; lay++) {
                /* A row-major [m, k] or stored as [k, m]; C row- or column-stored */
                const int64_t rsa = lay & 1 ? 1 : k, csa = lay & 1 ? m : 1;
                const int64_t rsc = lay & 2 ? 1 : n, csc = lay & 2 ? m : 1;
                const int64_t h = cg_gemm_k_split(paths[pi], m, n, k);
                for (int nt = 1; nt <= 2; nt++) {
                    ck_assert(cg_sgemm_path(paths[pi], nt, m, n, k, 1.0f, a, rsa, csa, b, n, 1,
                                            0.0f, c1, rsc, csc));
                    for (int half = 0; half < (h ? 2 : 1); half++) {
                        /* the second half into c3, then added to c2 */
                        const int64_t k0 = half ? h : 0, kh = h ? (half ? k - h : h) : k;
                        float *c = half ? c3 : c2;
                        for (int64_t i = 0, kb; i < kh; i += kb) {
                            kb = cg_gemm_k_block(paths[pi], kh, i);
                            ck_assert(cg_sgemm_path(paths[pi], nt, m, n, kb, 1.0f,
                                                    a + (k0 + i) * csa, rsa, csa, b + (k0 + i) * n,
                                                    n, 1, i ? 1.0f : 0.0f, c, rsc, csc));
                        }
                    }
                    for (int64_t e = 0; h && e < m * n; e++)
                        c2[e] += c3[e];
                    if (memcmp(c1, c2, (size_t)(m * n) * sizeof(float)) != 0)
                        ck_abort_msg("%s: k = %lld in blocks differs (layout %d, %d threads)",
                                     cg_gemm_path_name(paths[pi]), (long long)k, lay, nt);
                }
            }
            free(a);
            free(b);
            free(c1);
            free(c2);
            free(c3);
        }
    }
    /* the split's rule: bf16 off AMX, k >= 768 and k >= 2 max(m, n), at
     * about k / 2 and even; never in fp32 or on AMX */
    if (cg_gemm_path_available(CG_GEMM_BF16_EMULATED)) {
        ck_assert_int_eq(cg_gemm_k_split(CG_GEMM_BF16_EMULATED, m, n, 767), 0);
        ck_assert_int_eq(cg_gemm_k_split(CG_GEMM_BF16_EMULATED, m, n, 768), 384);
        ck_assert_int_eq(cg_gemm_k_split(CG_GEMM_BF16_EMULATED, m, n, 769), 386);
        ck_assert_int_eq(cg_gemm_k_split(CG_GEMM_BF16_EMULATED, 256, 1024, 3072), 1536);
        ck_assert_int_eq(cg_gemm_k_split(CG_GEMM_BF16_EMULATED, 256, 1025, 2049), 0);
        ck_assert_int_eq(cg_gemm_k_split(CG_GEMM_BF16_EMULATED, 1025, 256, 2050), 1026);
        ck_assert_int_eq(cg_gemm_k_split(CG_GEMM_BF16_EMULATED, 0, n, 3072), 0);
    }
    ck_assert_int_eq(cg_gemm_k_split(CG_GEMM_SKX, m, n, 3072), 0);
    ck_assert_int_eq(cg_gemm_k_split(CG_GEMM_HASWELL, m, n, 3072), 0);
    ck_assert_int_eq(cg_gemm_k_split(CG_GEMM_BF16_AMX, m, n, 3072), 0);
}
END_TEST

START_TEST(test_sgemm_strides)
{
    /* raw cg_sgemm with column-major C, transposed A, general-stride B and
     * an overlapping (rs = 0) A row that must be copied */
    cg_rng rng = cg_rng_new(9);
    const int64_t m = 37, n = 21, k = 45;
    float *a = malloc((size_t)(m * k) * sizeof(float)); /* stored k x m (A^T) */
    float *b = malloc((size_t)(3 * k * n * 2) * sizeof(float));
    float *c = malloc((size_t)(m * n) * sizeof(float));
    for (int64_t i = 0; i < m * k; i++)
        a[i] = cg_rng_normal(&rng);
    for (int64_t i = 0; i < 3 * k * n * 2; i++)
        b[i] = cg_rng_normal(&rng);
    /* A[i][p] = a[p*m + i]; B[p][j] = b[p*3n*2 + j*3]... use rs=6n, cs=3 */
    cg_sgemm(m, n, k, 1.0f, a, 1, m, b, 6 * n, 3, 0.0f, c, 1, m);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += (double)a[p * m + i] * b[p * 6 * n + j * 3];
            ck_assert_float_eq_tol(c[j * m + i], (float)s, 1e-4);
        }
    /* rs = 0: every row of A is row 0 */
    cg_sgemm(m, n, k, 1.0f, a, 0, m, b, 6 * n, 3, 0.0f, c, n, 1);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += (double)a[p * m] * b[p * 6 * n + j * 3];
            ck_assert_float_eq_tol(c[i * n + j], (float)s, 1e-4);
        }
    free(a);
    free(b);
    free(c);
}
END_TEST

/* C laid out so that its elements do not overlap but BLIS refuses its
 * strides (rs 3 and cs 7 for 5 rows: m rs > cs): fp32 then takes the plain
 * loop, bf16 its one-thread product (split over k when k is long), with
 * beta 0 and 0.5 and a bias, on every path this CPU has (C NaN before
 * beta 0 and the bias: neither reads it). Each against a
 * double reference (of the operands rounded to bf16 on a bf16 path), and
 * the buffer's elements outside C left as they were. */
START_TEST(test_sgemm_c_strides_blis_refuses)
{
    cg_rng rng = cg_rng_new(21);
    const int64_t m = 5, n = 7, rsc = 3, csc = 7, cn = 3 * (m - 1) + 7 * (n - 1) + 1;
    const cg_gemm_path paths[] = {CG_GEMM_DEFAULT, CG_GEMM_SKX,           CG_GEMM_HASWELL,
                                  CG_GEMM_BF16,    CG_GEMM_BF16_EMULATED, CG_GEMM_BF16_AMX};
    const int64_t ks[] = {45, 800}; /* 800: a bf16 product split over k */
    float *a = malloc(sizeof(float) * (size_t)(m * 800)),
          *b = malloc(sizeof(float) * (size_t)(800 * n));
    float bias[7], c[64], c0[64];
    bool in_c[64] = {false};
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            in_c[i * rsc + j * csc] = true;
    for (int64_t i = 0; i < m * 800; i++)
        a[i] = cg_rng_normal(&rng);
    for (int64_t i = 0; i < 800 * n; i++)
        b[i] = cg_rng_normal(&rng);
    for (int j = 0; j < n; j++)
        bias[j] = cg_rng_normal(&rng);
    for (int64_t i = 0; i < cn; i++)
        c0[i] = cg_rng_normal(&rng);
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
        if (!cg_gemm_path_available(paths[pi]))
            continue;
        const bool bf = paths[pi] >= CG_GEMM_BF16;
        for (int ki = 0; ki < 2; ki++) {
            const int64_t k = ks[ki];
            for (int mode = 0; mode < 3; mode++) { /* beta 0, beta 0.5, bias */
                const float beta = mode == 1 ? 0.5f : 0.0f;
                memcpy(c, c0, sizeof c);
                for (int64_t e = 0; mode != 1 && e < cn; e++)
                    if (in_c[e]) /* beta 0 and the bias form: C is not read */
                        c[e] = NAN;
                bool ok = mode == 2 ? cg_sgemm_bias_path(paths[pi], 1, m, n, k, a, k, 1, b, n, 1,
                                                         bias, 1, c, rsc, csc)
                                    : cg_sgemm_path(paths[pi], 1, m, n, k, 1.5f, a, k, 1, b, n, 1,
                                                    beta, c, rsc, csc);
                ck_assert_msg(ok, "%s: %s", cg_gemm_path_name(paths[pi]), cg_last_error());
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n; j++) {
                        double s = 0.0, mag = 0.0;
                        for (int64_t p = 0; p < k; p++) {
                            double x = bf ? cg_bf16_round(a[i * k + p]) : a[i * k + p];
                            double y = bf ? cg_bf16_round(b[p * n + j]) : b[p * n + j];
                            s += x * y;
                            mag += fabs(x * y);
                        }
                        const double alpha = mode == 2 ? 1.0 : 1.5;
                        double want = alpha * s + (mode == 2   ? bias[j]
                                                   : mode == 1 ? 0.5 * c0[i * rsc + j * csc]
                                                               : 0.0);
                        double got = c[i * rsc + j * csc];
                        ck_assert_msg(fabs(got - want) <= 1e-5 * (mag + 1.0),
                                      "%s k %lld mode %d C[%lld][%lld] = %.9g, want %.9g",
                                      cg_gemm_path_name(paths[pi]), (long long)k, mode,
                                      (long long)i, (long long)j, got, want);
                    }
                for (int64_t e = 0; e < cn; e++)
                    ck_assert_msg(in_c[e] || !memcmp(&c[e], &c0[e], sizeof(float)),
                                  "%s: element %lld outside C written",
                                  cg_gemm_path_name(paths[pi]), (long long)e);
            }
        }
    }
    free(a);
    free(b);
}
END_TEST

/* beta 0 does not read C (NaN there stays out of the result), and another
 * beta scales it, on every path this CPU has and each way a product goes:
 * k 0 and alpha 0 (C scaled or set to the bias, A and B unread as BLAS
 * leaves them: NaN in A), a few rows against contiguous k (the skinny dot
 * products), one row against a row-stored B (one_row_product: beta 0 and
 * 1 only, 0.5 the packed path), several k blocks (800) and the packed
 * driver; against double loops on the operands rounded as the path rounds
 * them. */
START_TEST(test_beta_and_c_unread)
{
    const cg_gemm_path paths[] = {CG_GEMM_DEFAULT, CG_GEMM_SKX,           CG_GEMM_HASWELL,
                                  CG_GEMM_BF16,    CG_GEMM_BF16_EMULATED, CG_GEMM_BF16_AMX};
    /* m, n, k, alpha, beta, B column-stored (rsb 1), a bias (alpha 1, beta 0 then) */
    const struct {
        int64_t m, n, k;
        float alpha, beta;
        bool bcol, bias;
    } cases[] = {{5, 6, 0, 1.5f, 0.0f, false, false},    {5, 6, 0, 1.5f, 0.5f, false, false},
                 {5, 6, 0, 1.0f, 0.0f, false, true},     {5, 6, 7, 0.0f, 0.0f, false, false},
                 {5, 6, 7, 0.0f, 0.5f, false, false},    {3, 40, 20, 1.5f, 0.0f, true, false},
                 {40, 2, 33, 1.5f, 0.0f, true, false},   {1, 40, 20, 1.5f, 0.0f, false, false},
                 {1, 40, 20, 1.5f, 0.5f, false, false},  {1, 40, 800, 1.5f, 0.5f, false, false},
                 {9, 20, 800, 1.5f, 0.0f, false, false}, {40, 37, 50, 1.5f, 0.0f, false, false},
                 {40, 37, 50, 1.5f, 0.5f, false, false}, {40, 37, 50, 1.0f, 0.0f, false, true}};
    cg_rng rng = cg_rng_new(23);
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
        if (!cg_gemm_path_available(paths[pi]))
            continue;
        const bool bf = paths[pi] >= CG_GEMM_BF16;
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            const int64_t m = cases[ci].m, n = cases[ci].n, k = cases[ci].k;
            const float alpha = cases[ci].alpha, beta = cases[ci].beta;
            const int64_t rsb = cases[ci].bcol ? 1 : n, csb = cases[ci].bcol ? k : 1;
            float *a = malloc(sizeof(float) * (size_t)(m * k + 1));
            float *b = malloc(sizeof(float) * (size_t)(k * n + 1));
            float *c = malloc(sizeof(float) * (size_t)(m * n));
            float *c0 = malloc(sizeof(float) * (size_t)(m * n));
            float *bias = malloc(sizeof(float) * (size_t)n);
            for (int64_t i = 0; i < m * k; i++)
                a[i] = alpha == 0.0f ? NAN : cg_rng_normal(&rng);
            for (int64_t i = 0; i < k * n; i++)
                b[i] = cg_rng_normal(&rng);
            for (int64_t j = 0; j < n; j++)
                bias[j] = cg_rng_normal(&rng);
            for (int64_t i = 0; i < m * n; i++)
                c[i] = c0[i] = beta == 0.0f ? NAN : cg_rng_normal(&rng);
            const bool ok = cases[ci].bias ? cg_sgemm_bias_path(paths[pi], 0, m, n, k, a, k, 1, b,
                                                                rsb, csb, bias, 1, c, n, 1)
                                           : cg_sgemm_path(paths[pi], 0, m, n, k, alpha, a, k, 1, b,
                                                           rsb, csb, beta, c, n, 1);
            ck_assert_msg(ok, "%s: %s", cg_gemm_path_name(paths[pi]), cg_last_error());
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double s = 0.0, mag = 0.0;
                    for (int64_t p = 0; p < k && alpha != 0.0f; p++) {
                        const double x = bf ? cg_bf16_round(a[i * k + p]) : a[i * k + p];
                        const double y =
                            bf ? cg_bf16_round(b[p * rsb + j * csb]) : b[p * rsb + j * csb];
                        s += x * y;
                        mag += fabs(x * y);
                    }
                    const double want = alpha * s + (cases[ci].bias ? bias[j]
                                                     : beta != 0.0f ? beta * (double)c0[i * n + j]
                                                                    : 0.0);
                    const double got = c[i * n + j];
                    ck_assert_msg(fabs(got - want) <= 1e-5 * (mag + 1.0),
                                  "%s %lldx%lldx%lld alpha %g beta %g%s: C[%lld][%lld] = %g, "
                                  "want %g",
                                  cg_gemm_path_name(paths[pi]), (long long)m, (long long)n,
                                  (long long)k, (double)alpha, (double)beta,
                                  cases[ci].bias ? " bias" : "", (long long)i, (long long)j, got,
                                  want);
                }
            free(a);
            free(b);
            free(c);
            free(c0);
            free(bias);
        }
    }
}
END_TEST

/* ------------------------------------------------------------- threads */

static cg_tensor *matmul_with_threads(int nt, const cg_tensor *a, const cg_tensor *b)
{
    cg_set_num_threads(nt);
    cg_tensor *c = cg_k_matmul(a, b);
    ck_assert_ptr_nonnull(c);
    return c;
}

static void assert_bit_identical(const cg_tensor *x, const cg_tensor *y)
{
    ck_assert_int_eq(cg_numel(x), cg_numel(y));
    ck_assert(cg_is_contiguous(x) && cg_is_contiguous(y));
    ck_assert_msg(memcmp(cg_data(x), cg_data(y), (size_t)cg_numel(x) * sizeof(float)) == 0,
                  "1-thread and 2-thread results differ");
}

START_TEST(test_threads_bit_identical)
{
    int saved = cg_get_num_threads();
    cg_rng rng = cg_rng_new(10);
    struct {
        int na, nb;
        int64_t sa[4], sb[4];
    } cases[] = {
        {2, 2, {517, 389}, {389, 701}},       /* big: threaded gemm */
        {3, 3, {48, 64, 32}, {48, 32, 64}},   /* many small: spread over threads */
        {3, 3, {3, 300, 257}, {3, 257, 311}}, /* few large: sequential, threaded */
        {3, 2, {12, 64, 128}, {128, 512}},    /* shared b: one tall gemm */
        {2, 2, {1000, 1}, {1, 1000}},         /* k = 1 outer product */
        {2, 1, {700, 900}, {900, 0}},         /* matrix @ vector */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cg_tensor *a = randn(&rng, cases[i].na, cases[i].sa);
        cg_tensor *b = randn(&rng, cases[i].nb, cases[i].sb);
        cg_tensor *c1 = matmul_with_threads(1, a, b);
        cg_tensor *c2 = matmul_with_threads(2, a, b);
        assert_bit_identical(c1, c2);
        cg_release_all(4, a, b, c1, c2);
    }
    /* transposed operands on a size where 2 threads really split the work */
    cg_tensor *x = randn(&rng, CG_SHAPE(600, 500));
    cg_tensor *y = randn(&rng, CG_SHAPE(400, 600));
    cg_tensor *xt = cg_view_transpose(x, 0, 1), *yt = cg_view_transpose(y, 0, 1);
    cg_tensor *c1 = matmul_with_threads(1, xt, yt);
    cg_tensor *c2 = matmul_with_threads(2, xt, yt);
    assert_bit_identical(c1, c2);
    cg_release_all(6, x, y, xt, yt, c1, c2);

    /* every path, explicit 1 vs 2 BLIS threads, on a size for the packed
     * kernels and one for BLIS's small-matrix (sup) kernels */
    const int64_t dims[2][3] = {{513, 479, 611}, {150, 90, 120}};
    const cg_gemm_path paths[] = {CG_GEMM_DEFAULT, CG_GEMM_SKX, CG_GEMM_HASWELL, CG_GEMM_AUTO};
    for (int d = 0; d < 2; d++) {
        const int64_t m = dims[d][0], n = dims[d][1], k = dims[d][2];
        cg_tensor *a = randn(&rng, CG_SHAPE(m, k)), *b = randn(&rng, CG_SHAPE(k, n));
        float *o1 = malloc((size_t)(m * n) * sizeof(float));
        float *o2 = malloc((size_t)(m * n) * sizeof(float));
        for (int p = 0; p < 4; p++) {
            if (!cg_gemm_path_available(paths[p]))
                continue;
            ck_assert(cg_sgemm_path(paths[p], 1, m, n, k, 1.0f, cg_data(a), k, 1, cg_data(b), n, 1,
                                    0.0f, o1, n, 1));
            ck_assert(cg_sgemm_path(paths[p], 2, m, n, k, 1.0f, cg_data(a), k, 1, cg_data(b), n, 1,
                                    0.0f, o2, n, 1));
            ck_assert_msg(memcmp(o1, o2, (size_t)(m * n) * sizeof(float)) == 0,
                          "path %s, %lldx%lldx%lld: 1 vs 2 threads differ",
                          cg_gemm_path_name(paths[p]), (long long)m, (long long)n, (long long)k);
        }
        free(o1);
        free(o2);
        cg_release_all(2, a, b);
    }
    cg_set_num_threads(saved);
}
END_TEST

/* cg_shares (core/shares.h) gives every chunk exactly once, whatever the
 * team: as many threads as shares, fewer (the others' shares are taken
 * from their backs), more (the extra threads only take from others), one;
 * no chunks, fewer chunks than shares, many. */
START_TEST(test_shares_each_chunk_once)
{
    const int64_t counts[] = {0, 1, 3, 7, 64, 1001};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (int nt = 1; nt <= 5; nt++)
            for (int team = 1; team <= 5; team++) {
                const int64_t n = counts[c];
                int *seen = calloc((size_t)(n ? n : 1), sizeof(int));
                int64_t bad = 0;
                cg_shares sh;
                cg_shares_init(&sh, n, nt);
#pragma omp parallel num_threads(team) reduction(+ : bad)
                for (int64_t ch; (ch = cg_shares_next(&sh, omp_get_thread_num())) >= 0;) {
                    if (ch >= n)
                        bad++;
                    else
                        __atomic_fetch_add(&seen[ch], 1, __ATOMIC_RELAXED);
                }
                cg_shares_free(&sh);
                ck_assert_int_eq(bad, 0);
                for (int64_t i = 0; i < n; i++)
                    ck_assert_msg(seen[i] == 1,
                                  "%lld chunks, %d shares, team of %d: chunk %lld "
                                  "taken %d times",
                                  (long long)n, nt, team, (long long)i, seen[i]);
                free(seen);
            }
}
END_TEST

/* What a chunk of test_shares_run saw */
typedef struct {
    int64_t n, grain;
    int nt;
    int *seen;       /* each item's count */
    int64_t *bad;    /* chunks that broke a rule */
    int64_t *next;   /* a team of one: the begin expected next */
    int level;       /* the caller's omp_get_level() */
    bool *in_region; /* a chunk ran in a region of the runner's */
} run_probe;

static void probe_chunk(int64_t begin, int64_t end, int thread, const void *ctx)
{
    const run_probe *p = ctx;
    const bool edges = begin % p->grain == 0 && begin < end &&
                       end == (begin + p->grain < p->n ? begin + p->grain : p->n);
    const bool slot = thread >= 0 && thread < (p->nt > 1 ? p->nt : 1);
    if (!edges || !slot)
        __atomic_fetch_add(p->bad, 1, __ATOMIC_RELAXED);
    if (p->nt <= 1) { /* in order, on the calling thread, no region */
        if (begin != *p->next || thread != 0 || omp_get_level() != p->level)
            ++*p->bad;
        *p->next = end;
    }
    if (omp_get_level() > p->level)
        *p->in_region = true;
    for (int64_t i = begin; i < end && i < p->n; i++)
        __atomic_fetch_add(&p->seen[i], 1, __ATOMIC_RELAXED);
}

/* cg_shares_run hands every item to fn once, in chunks of grain items
 * whose edges depend on n and grain only, with a thread slot below the
 * team; a team of one runs them in order on the calling thread without a
 * region (slot 0), also inside someone else's region. */
START_TEST(test_shares_run)
{
    const int64_t counts[] = {0, 1, 5, 64, 1001};
    const int64_t grains[] = {1, 3, 64, 5000};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++)
            for (int nt = 1; nt <= 4; nt++) {
                const int64_t n = counts[c];
                int *seen = calloc((size_t)(n ? n : 1), sizeof(int));
                int64_t bad = 0, next = 0;
                bool in_region = false;
                const run_probe p = {.n = n,
                                     .grain = grains[g],
                                     .nt = nt,
                                     .seen = seen,
                                     .bad = &bad,
                                     .next = &next,
                                     .level = omp_get_level(),
                                     .in_region = &in_region};
                cg_shares_run(n, grains[g], nt, probe_chunk, &p);
                ck_assert_msg(bad == 0, "%lld items, grain %lld, team of %d: %lld bad chunks",
                              (long long)n, (long long)grains[g], nt, (long long)bad);
                for (int64_t i = 0; i < n; i++)
                    ck_assert_int_eq(seen[i], 1);
                const int64_t nchunks = (n + grains[g] - 1) / grains[g];
                ck_assert(in_region == (nt > 1 && nchunks > 1));
                free(seen);
            }
    /* inside a region of two: a team of one, slot 0 on each thread */
    int64_t bad = 0;
#pragma omp parallel num_threads(2) reduction(+ : bad)
    {
        int seen[10] = {0};
        int64_t b = 0, next = 0;
        bool in_region = false;
        const run_probe p = {.n = 10,
                             .grain = 3,
                             .nt = cg_shares_team(true),
                             .seen = seen,
                             .bad = &b,
                             .next = &next,
                             .level = omp_get_level(),
                             .in_region = &in_region};
        cg_shares_run(10, 3, p.nt, probe_chunk, &p);
        for (int i = 0; i < 10; i++)
            b += seen[i] != 1;
        bad += b;
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* n floats ending exactly where an unmapped page begins (the page is
 * mapped PROT_NONE): a read past the operand faults. */
typedef struct {
    char *map;
    size_t len;
    float *p;
} guarded;

static guarded guarded_new(size_t n, cg_rng *rng)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = n * sizeof(float);
    const size_t len = (bytes + page - 1) / page * page + page;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(m != MAP_FAILED);
    ck_assert_int_eq(mprotect(m + len - page, page, PROT_NONE), 0);
    guarded g = {m, len, (float *)(m + len - page - bytes)};
    for (size_t i = 0; i < n; i++)
        g.p[i] = cg_rng_normal(rng);
    return g;
}

/* fp32 products give the same bits on AVX2 (haswell) and AVX-512 (skx)
 * CPUs, k over BLIS's k blocks included: haswell's context blocked k at
 * 256 and skx's at 384, so from k = 257 the sums were added to C at other
 * points and seq2seq tiny's fp32 pin differed on Zen 2 and 3. Every layout
 * of A and B; a CPU without AVX-512 has one path and skips. */
START_TEST(test_haswell_skx_same_bits)
{
    if (!cg_gemm_path_available(CG_GEMM_SKX) || !cg_gemm_path_available(CG_GEMM_HASWELL))
        return;
    cg_rng rng = cg_rng_new(31);
    const int64_t ks[] = {255, 256, 257, 300, 384, 385, 700, 1100}, m = 37, n = 29;
    for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
        for (int lay = 0; lay < 4; lay++) {
            const int64_t k = ks[ki];
            const int64_t rsa = lay & 1 ? 1 : k, csa = lay & 1 ? m : 1;
            const int64_t rsb = lay & 2 ? 1 : n, csb = lay & 2 ? k : 1;
            float *a = malloc((size_t)(m * k) * sizeof(float));
            float *b = malloc((size_t)(k * n) * sizeof(float));
            float c[2][37 * 29];
            for (int64_t i = 0; i < m * k; i++)
                a[i] = cg_rng_normal(&rng);
            for (int64_t i = 0; i < k * n; i++)
                b[i] = cg_rng_normal(&rng);
            const cg_gemm_path paths[2] = {CG_GEMM_SKX, CG_GEMM_HASWELL};
            for (int p = 0; p < 2; p++)
                ck_assert(cg_sgemm_path(paths[p], 1, m, n, k, 1.0f, a, rsa, csa, b, rsb, csb, 0.0f,
                                        c[p], n, 1));
            ck_assert_msg(memcmp(c[0], c[1], sizeof c[0]) == 0,
                          "k %lld layout %d: haswell's bits differ from skx's", (long long)k, lay);
            free(a);
            free(b);
        }
}
END_TEST

/* A product of one row of C with B's rows contiguous (attention's P v in
 * decoding, which gemm.c computes without packing) gives the bits of that
 * row in a product of two rows (the packed kernels'): every k block of
 * each path, beta 0 and 1, alpha 1 and not, a bias, strided a and c, 1 and
 * 2 threads. */
START_TEST(test_one_row_product_bits)
{
    const cg_gemm_path paths[] = {CG_GEMM_SKX, CG_GEMM_HASWELL};
    const int64_t ns[] = {1, 7, 8, 9, 16, 17, 33, 64};
    const int64_t ks[] = {1, 2, 15, 100, 383, 384, 385, 480, 481, 700, 1000};
    cg_rng rng = cg_rng_new(41);
    int checked = 0;
    for (size_t pi = 0; pi < sizeof paths / sizeof *paths; pi++) {
        if (!cg_gemm_path_available(paths[pi]))
            continue;
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
                const int64_t n = ns[ni], k = ks[ki];
                float *a = malloc((size_t)(2 * 3 * k) * sizeof(float)); /* 2 rows, csa 1 or 3 */
                float *b = malloc((size_t)(k * n) * sizeof(float));
                float *bias = malloc((size_t)n * sizeof(float));
                float *c0 = malloc((size_t)(2 * n) * sizeof(float));
                float *c1 = malloc((size_t)(2 * 2 * n) * sizeof(float)); /* csc 1 or 2 */
                float *c2 = malloc((size_t)(2 * n) * sizeof(float));
                fill_strided(&rng, a, 2 * 3 * k);
                fill_strided(&rng, b, k * n);
                fill_strided(&rng, bias, n);
                fill_strided(&rng, c0, 2 * n);
                for (int v = 0; v < 16; v++) {
                    const float beta = v & 1 ? 1.0f : 0.0f, alpha = v & 2 ? 0.37f : 1.0f;
                    const int64_t csa = v & 4 ? 3 : 1, csc = v & 8 ? 2 : 1;
                    for (int nt = 1; nt <= 2; nt++)
                        for (int bi = 0; bi < (alpha == 1.0f && beta == 0.0f ? 2 : 1); bi++) {
                            memcpy(c2, c0, (size_t)(2 * n) * sizeof(float));
                            for (int64_t j = 0; j < n; j++)
                                c1[j * csc] = c0[j];
                            if (bi) {
                                ck_assert(cg_sgemm_bias_path(paths[pi], nt, 1, n, k, a, 3 * k, csa,
                                                             b, n, 1, bias, 1, c1, n * csc, csc));
                                ck_assert(cg_sgemm_bias_path(paths[pi], nt, 2, n, k, a, 3 * k, csa,
                                                             b, n, 1, bias, 1, c2, n, 1));
                            } else {
                                ck_assert(cg_sgemm_path(paths[pi], nt, 1, n, k, alpha, a, 3 * k,
                                                        csa, b, n, 1, beta, c1, n * csc, csc));
                                ck_assert(cg_sgemm_path(paths[pi], nt, 2, n, k, alpha, a, 3 * k,
                                                        csa, b, n, 1, beta, c2, n, 1));
                            }
                            for (int64_t j = 0; j < n; j++)
                                if (memcmp(&c1[j * csc], &c2[j], sizeof(float)) != 0)
                                    ck_abort_msg("%s: 1 x %lld x %lld (alpha %g, beta %g, csa "
                                                 "%lld, csc %lld, bias %d, %d threads): column "
                                                 "%lld is %.9g, the packed row's %.9g",
                                                 cg_gemm_path_name(paths[pi]), (long long)n,
                                                 (long long)k, alpha, beta, (long long)csa,
                                                 (long long)csc, bi, nt, (long long)j, c1[j * csc],
                                                 c2[j]);
                            checked++;
                        }
                }
                free(a);
                free(b);
                free(bias);
                free(c0);
                free(c1);
                free(c2);
            }
    }
    if (cg_gemm_path_available(CG_GEMM_HASWELL))
        ck_assert_int_gt(checked, 0);
}
END_TEST

/* Whether a scalar fused multiply-add reads only its 4 bytes from memory:
 * vfmadd231ss on the last float before an unmapped page, in a child (which
 * runs no OpenMP). QEMU 7.2's TCG loads 16 bytes there and faults, where
 * every x86 CPU reads 4 (the skinny products' tails are such FMAs). Only
 * on a CPU with FMA. */
static bool scalar_fma_reads_4_bytes(void)
{
    cg_rng rng = cg_rng_new(1);
    guarded g = guarded_new(1, &rng);
    const pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        float t = 0.0f;
        __asm__ volatile("vfmadd231ss %1, %2, %0" : "+x"(t) : "m"(*g.p), "x"(1.0f));
        _exit(t == g.p[0] ? 0 : 1);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    munmap(g.map, g.len);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* No path reads past its operands: A, B and C each end against an
 * unmapped page, for small and skinny sizes on every operand and C layout
 * (BLIS's small-matrix kernels read up to 256 bytes past an operand; a
 * fault here is a crash in a caller's program). */
START_TEST(test_no_read_past_operands)
{
    if (cg_gemm_path_available(CG_GEMM_HASWELL) && !scalar_fma_reads_4_bytes()) {
        fprintf(stderr, "test_no_read_past_operands: skipped (this CPU's scalar FMA reads 16 "
                        "bytes from memory: QEMU)\n");
        return;
    }
    cg_rng rng = cg_rng_new(13);
    const cg_gemm_path paths[] = {CG_GEMM_AUTO,    CG_GEMM_SKX,  CG_GEMM_HASWELL,
                                  CG_GEMM_DEFAULT, CG_GEMM_BF16, CG_GEMM_BF16_EMULATED};
    const int64_t dims[][3] = {{1, 16, 10}, {1, 19, 37}, {1, 384, 130}, {7, 7, 7},  {3, 40, 33},
                               {40, 1, 29}, {16, 16, 1}, {33, 17, 64},  {70, 9, 31}};
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
        /* BLIS's own choice (a diagnostic, CG_BLIS_DEFAULT=1, where it is
         * also AUTO's) keeps its sup kernels */
        const bool blis_own =
            paths[pi] == CG_GEMM_DEFAULT ||
            (paths[pi] == CG_GEMM_AUTO && cg_gemm_active_path() == CG_GEMM_DEFAULT);
        if (blis_own || !cg_gemm_path_available(paths[pi]))
            continue;
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
            for (int lay = 0; lay < 8; lay++) {
                const int64_t m = dims[d][0], n = dims[d][1], k = dims[d][2];
                const int64_t rsa = lay & 1 ? 1 : k, csa = lay & 1 ? m : 1;
                const int64_t rsb = lay & 2 ? 1 : n, csb = lay & 2 ? k : 1;
                const int64_t rsc = lay & 4 ? 1 : n, csc = lay & 4 ? m : 1;
                guarded a = guarded_new((size_t)(m * k), &rng);
                guarded b = guarded_new((size_t)(k * n), &rng);
                guarded c = guarded_new((size_t)(m * n), &rng);
                ck_assert(cg_sgemm_path(paths[pi], 1, m, n, k, 1.0f, a.p, rsa, csa, b.p, rsb, csb,
                                        0.5f, c.p, rsc, csc));
                munmap(a.map, a.len);
                munmap(b.map, b.len);
                munmap(c.map, c.len);
            }
    }
}
END_TEST

START_TEST(test_num_threads)
{
    int saved = cg_get_num_threads();
    ck_assert_int_ge(saved, 1);
    cg_set_num_threads(3);
    ck_assert_int_eq(cg_get_num_threads(), 3);
    cg_set_num_threads(0); /* back to the default */
    ck_assert_int_ge(cg_get_num_threads(), 1);
    cg_set_num_threads(saved);
    ck_assert_int_eq(cg_get_num_threads(), saved);
}
END_TEST

/* The kernels' team in a thread the caller made (Hogwild training, a
 * server's workers) is cg_get_num_threads(), as the products': it was
 * OpenMP's default of a new thread, OMP_NUM_THREADS or the cores, so that
 * cg_set_num_threads(1) left every elementwise, norm and loss kernel of
 * such a thread on all the cores (and OMP_NUM_THREADS=9 on 9 threads). */
static void *team_in_thread(void *out)
{
    ((int *)out)[0] = cg_get_num_threads();
    ((int *)out)[1] = cg_shares_team(true);
    return NULL;
}

START_TEST(test_shares_team_in_own_thread)
{
    int saved = cg_get_num_threads();
    for (int n = 1; n <= 3; n++) {
        cg_set_num_threads(n);
        ck_assert_int_eq(cg_shares_team(true), n);
        int got[2] = {0, 0};
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, team_in_thread, got), 0);
        ck_assert_int_eq(pthread_join(t, NULL), 0);
        ck_assert_int_eq(got[0], n);
        ck_assert_int_eq(got[1], n);
    }
    cg_set_num_threads(saved);
}
END_TEST

/* n <= 0 gives back the default to the products and to the kernels that
 * take OpenMP's default team (core/shares.h): it kept the last count chosen
 * (1 stayed 1 everywhere; 7 on 2 CPUs left 7 threads to the elementwise
 * kernels, 2 to the products), and every suite that ended a thread sweep
 * with cg_set_num_threads(0) ran its later tests on that count. */
START_TEST(test_num_threads_default_restored)
{
    int saved = cg_get_num_threads();
    cg_set_num_threads(0);
    const int def = cg_get_num_threads(), omp_def = omp_get_max_threads();
    cg_set_num_threads(1);
    cg_set_num_threads(0);
    ck_assert_int_eq(cg_get_num_threads(), def);
    ck_assert_int_eq(omp_get_max_threads(), omp_def);
    cg_set_num_threads(def + 5);
    cg_set_num_threads(0);
    ck_assert_int_eq(cg_get_num_threads(), def);
    ck_assert_int_eq(omp_get_max_threads(), omp_def);
    cg_set_num_threads(saved);
}
END_TEST

/* OMP_NUM_THREADS above the CPUs (issue 25: 64 ran 3.3x slower, 100000
 * overflowed a stack): the default is capped, a chosen count is kept. */
START_TEST(test_default_threads_capped)
{
    int saved = cg_get_num_threads(), cpus = cg_num_cpus();
    ck_assert_int_ge(cpus, 1);
    cg_set_num_threads(0);
    omp_set_num_threads(cpus + 100); /* as OMP_NUM_THREADS=cpus+100 would */
    ck_assert_int_eq(cg_get_num_threads(), cpus);
    ck_assert_int_eq(cg_cap_default_threads(), cpus + 100);
    ck_assert_int_eq(omp_get_max_threads(), cpus);
    ck_assert_int_eq(cg_cap_default_threads(), 0); /* nothing left to lower */
    cg_set_num_threads(cpus + 1);                  /* chosen: kept, never capped */
    ck_assert_int_eq(cg_cap_default_threads(), 0);
    ck_assert_int_eq(cg_get_num_threads(), cpus + 1);
    cg_set_num_threads(saved);
}
END_TEST

/* ------------------------------------------------------------- errors */

START_TEST(test_errors)
{
    cg_rng rng = cg_rng_new(11);
    cg_tensor *a = randn(&rng, CG_SHAPE(2, 3));
    cg_tensor *b = randn(&rng, CG_SHAPE(4, 5));
    cg_clear_error();
    CG_ASSERT_FAILS(cg_k_matmul(a, b), "[2, 3]");
    CG_ASSERT_FAILS(NULL, "[4, 5]");
    CG_ASSERT_FAILS(NULL, "matmul");

    cg_tensor *x = randn(&rng, CG_SHAPE(2, 3, 4));
    cg_tensor *y = randn(&rng, CG_SHAPE(5, 4, 6));
    cg_clear_error();
    CG_ASSERT_FAILS(cg_k_matmul(x, y), "[2, 3, 4]");
    CG_ASSERT_FAILS(NULL, "[5, 4, 6]");
    CG_ASSERT_FAILS(NULL, "broadcast");

    cg_tensor *s = cg_scalar(2.0f);
    cg_clear_error();
    CG_ASSERT_FAILS(cg_k_matmul(s, a), "[]");
    CG_ASSERT_FAILS(NULL, "[2, 3]");
    cg_clear_error();
    CG_ASSERT_FAILS(cg_k_matmul(a, s), "dimension");

    /* 1-D mismatch */
    cg_tensor *v = randn(&rng, CG_SHAPE(4));
    cg_clear_error();
    CG_ASSERT_FAILS(cg_k_matmul(a, v), "[4]");

    /* NULL input: NULL, no new message */
    cg_clear_error();
    ck_assert_ptr_null(cg_k_matmul(NULL, a));
    ck_assert_ptr_null(cg_k_matmul(a, NULL));
    ck_assert(!cg_has_error());

    /* matmul_into: mismatched output, 1-D operand, stride-0 output */
    cg_tensor *w = randn(&rng, CG_SHAPE(3, 5));
    cg_tensor *bad = cg_zeros(CG_SHAPE(2, 4));
    cg_clear_error();
    ck_assert(!cg_k_matmul_into(bad, a, w, 1.0f, 0.0f));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "[2, 4]"));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "[3, 5]"));
    cg_tensor *good = cg_zeros(CG_SHAPE(2, 5));
    cg_tensor *v3 = randn(&rng, CG_SHAPE(3));
    cg_clear_error();
    ck_assert(!cg_k_matmul_into(good, a, v3, 1.0f, 0.0f));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "[3]"));
    cg_tensor *r1 = cg_zeros(CG_SHAPE(1, 5));
    cg_tensor *rexp = cg_view_expand(r1, CG_SHAPE(2, 5));
    cg_clear_error();
    ck_assert(!cg_k_matmul_into(rexp, a, w, 1.0f, 0.0f));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "[2, 5]"));
    cg_tensor *c3 = cg_zeros(CG_SHAPE(1, 2, 5));
    cg_tensor *c3e = cg_view_expand(c3, CG_SHAPE(3, 2, 5));
    cg_clear_error();
    ck_assert(!cg_k_matmul_into(c3e, a, w, 1.0f, 0.0f));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "[3, 2, 5]"));
    cg_tensor *a4 = randn(&rng, CG_SHAPE(4, 2, 3));
    cg_clear_error();
    ck_assert(!cg_k_matmul_into(c3, a4, w, 1.0f, 0.0f)); /* batch 4 into 1 */
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "[4, 2, 3]"));
    cg_clear_error();
    ck_assert(!cg_k_matmul_into(NULL, a, w, 1.0f, 0.0f));
    ck_assert(!cg_has_error());

    cg_release_all(10, a, b, x, y, s, v, w, bad, good, v3);
    cg_release_all(5, r1, rexp, c3, c3e, a4);
}
END_TEST

/* A product on an explicit path as a program's first call into the
 * library: it runs wherever the path is available (cg_gemm_path_available),
 * with the same result as later calls. The first call once found every
 * path but BLIS's default unavailable, the CPU not yet looked at, and
 * returned false with C untouched. Each path in a child forked before
 * anything else ran in this process (Check forks each test from a runner
 * that has made no product). */
START_TEST(test_explicit_path_first_call)
{
    const cg_gemm_path paths[] = {CG_GEMM_SKX, CG_GEMM_HASWELL, CG_GEMM_BF16, CG_GEMM_BF16_EMULATED,
                                  CG_GEMM_BF16_AMX};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        /* the verdict through a pipe, not the exit status (valgrind's
         * --error-exitcode sets a child's on its leak report) */
        int fd[2];
        ck_assert_int_eq(pipe(fd), 0);
        fflush(NULL);
        const pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            const float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1};
            float c[4] = {0};
            const bool ok =
                cg_sgemm_path(paths[i], 1, 2, 2, 2, 1.0f, a, 2, 1, b, 2, 1, 0.0f, c, 2, 1);
            const bool avail = cg_gemm_path_available(paths[i]);
            const char v =
                ok == avail && (!ok || (c[0] == 1 && c[1] == 2 && c[2] == 3 && c[3] == 4)) ? 'y'
                                                                                           : 'n';
            _exit(write(fd[1], &v, 1) == 1 ? 0 : 1);
        }
        close(fd[1]);
        char v = 0;
        const ssize_t got = read(fd[0], &v, 1);
        close(fd[0]);
        ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
        ck_assert_msg(got == 1 && v == 'y',
                      "path %d: the first product disagrees with the path's availability",
                      (int)paths[i]);
    }
}
END_TEST

static Suite *matmul_suite(void)
{
    Suite *s = suite_create("matmul");
    TCase *tc = tcase_create("matmul");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_2d_sizes);
    tcase_add_test(tc, test_2d_known_values);
    tcase_add_test(tc, test_empty_dims);
    tcase_add_test(tc, test_1d_operands);
    tcase_add_test(tc, test_batched_broadcast);
    tcase_add_test(tc, test_layouts);
    tcase_add_test(tc, test_views);
    suite_add_tcase(s, tc);
    TCase *ti = tcase_create("matmul_into");
    tcase_add_test(ti, test_matmul_into);
    tcase_add_test(ti, test_matmul_into_aliased);
    suite_add_tcase(s, ti);
    TCase *tg = tcase_create("gemm");
    tcase_set_timeout(tg, 120);
    tcase_add_test(tg, test_explicit_path_first_call);
    tcase_add_test(tg, test_paths_agree);
    tcase_add_test(tg, test_sgemm_strides);
    tcase_add_test(tg, test_sgemm_c_strides_blis_refuses);
    tcase_add_test(tg, test_block_sizes_blis);
    tcase_add_test(tg, test_beta_and_c_unread);
    tcase_add_test(tg, test_skx_driver);
    tcase_add_test(tg, test_haswell_driver);
    tcase_add_test(tg, test_k_blocks);
    tcase_add_test(tg, test_threads_bit_identical);
    tcase_add_test(tg, test_shares_each_chunk_once);
    tcase_add_test(tg, test_shares_run);
    tcase_add_test(tg, test_num_threads);
    tcase_add_test(tg, test_shares_team_in_own_thread);
    tcase_add_test(tg, test_num_threads_default_restored);
    tcase_add_test(tg, test_default_threads_capped);
    tcase_add_test(tg, test_no_read_past_operands);
    tcase_add_test(tg, test_haswell_skx_same_bits);
    tcase_add_test(tg, test_one_row_product_bits);
    suite_add_tcase(s, tg);
    TCase *te = tcase_create("errors");
    tcase_add_test(te, test_errors);
    suite_add_tcase(s, te);
    return s;
}

int main(void)
{
    Suite *s = matmul_suite();
    return cg_test_run(&s, 1);
}
