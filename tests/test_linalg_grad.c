/* Gradchecks of torch.linalg (autograd/ops_linalg.c): every op on
 * contiguous, transposed and strided inputs, batched and broadcast, the
 * decompositions through quantities their sign choices leave alone
 * (eigenvalues, V diag(c) V^T, V * V; U diag(c) Vh, U * U), as PyTorch's
 * own gradchecks do. The op_checks entries of tests/test_grad_ops.c name
 * test_linalg_gradcheck. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "tests/testutil.h"

enum {
    SOLVE,
    INV,
    DET,
    SLOGDET,
    CHOL,
    CHOL_U,
    QR,
    QR_COMPLETE,
    EIGH,
    EIGH_U,
    EIGVALSH,
    SVD,
    SVD_FULL,
    SVDVALS,
    PINV,
    LSTSQ,
    VNORM,
    MNORM,
};

typedef struct {
    int op;
    double ord;
    const char *mord;
    int ndims, dims[2];
    bool keepdim;
} gcase;

/* x + s I (x [*, n, n]) */
static cg_tensor *shift(cg_tensor *x, float s)
{
    const int64_t n = x->shape[x->ndim - 1];
    cg_tensor *e = cg_zeros(CG_SHAPE(n, n));
    for (int64_t i = 0; i < n; i++)
        cg_data(e)[i * n + i] = s;
    cg_tensor *y = cg_add(x, e);
    cg_release(e);
    return y;
}

/* t flattened, or the concatenation of the flattened tensors */
static cg_tensor *flat_cat(int n, cg_tensor **t)
{
    cg_tensor *f[6];
    for (int i = 0; i < n; i++)
        f[i] = t[i] ? cg_reshape(t[i], 1, (int64_t[]){-1}) : NULL;
    cg_tensor *out = cg_concat(f, n, 0);
    for (int i = 0; i < n; i++)
        cg_release_all(2, f[i], t[i]);
    return out;
}

/* x diag(c) y, c = 1 .. k (x [*, m, k]), and x * x */
static cg_tensor *weighted(cg_tensor *x, cg_tensor *y)
{
    const int64_t k = x->shape[x->ndim - 1];
    cg_tensor *c = cg_arange(1, (double)k + 1, 1);
    cg_tensor *xc = cg_mul(x, c), *p = cg_matmul(xc, y);
    cg_release_all(2, c, xc);
    return p;
}

static cg_tensor *sym(cg_tensor *x)
{
    cg_tensor *t = cg_transpose(x, -1, -2), *s = cg_add(x, t);
    cg_release(t);
    return s;
}

static cg_tensor *decomposition(const gcase *c, cg_tensor *a)
{
    if (c->op == QR || c->op == QR_COMPLETE) {
        cg_tensor *r, *q = cg_linalg_qr(a, c->op == QR ? "reduced" : "complete", &r);
        return flat_cat(2, (cg_tensor *[]){q, r});
    }
    if (c->op == EIGH || c->op == EIGH_U) {
        cg_tensor *s = sym(a), *v, *l = cg_linalg_eigh(s, c->op == EIGH ? "L" : "U", &v);
        cg_tensor *vt = cg_transpose(v, -1, -2), *vv = cg_mul(v, v), *w = weighted(v, vt);
        cg_release_all(3, s, v, vt);
        return flat_cat(3, (cg_tensor *[]){l, vv, w});
    }
    /* SVD, SVD_FULL: the first k columns of U and rows of Vh */
    const int64_t k = a->shape[a->ndim - 1] < a->shape[a->ndim - 2] ? a->shape[a->ndim - 1]
                                                                    : a->shape[a->ndim - 2];
    cg_tensor *s, *vh, *u = cg_linalg_svd(a, c->op == SVD_FULL, &s, &vh);
    cg_tensor *uk = cg_narrow(u, -1, 0, k), *vk = cg_narrow(vh, -2, 0, k);
    cg_tensor *w = weighted(uk, vk), *uu = cg_mul(uk, uk), *vv = cg_mul(vk, vk);
    cg_release_all(4, u, vh, uk, vk);
    return flat_cat(4, (cg_tensor *[]){s, w, uu, vv});
}

static cg_tensor *fn(void *ctx, cg_tensor *const *in)
{
    const gcase *c = ctx;
    cg_tensor *a = in[0], *t = NULL, *out = NULL;
    switch (c->op) {
    case SOLVE: t = shift(a, 4), out = cg_linalg_solve(t, in[1]); break;
    case INV: t = shift(a, 4), out = cg_linalg_inv(t); break;
    case DET: t = shift(a, 3), out = cg_linalg_det(t); break;
    case SLOGDET: {
        cg_tensor *lad, *sign = (t = shift(a, 3)) ? cg_linalg_slogdet(t, &lad) : NULL;
        out = sign ? cg_add(sign, lad) : NULL; /* the sign's gradient: 0 */
        cg_release_all(2, sign, sign ? lad : NULL);
        break;
    }
    case CHOL:
    case CHOL_U: {
        cg_tensor *at = cg_transpose(a, -1, -2), *aa = cg_matmul(a, at);
        t = shift(aa, 3), out = cg_linalg_cholesky(t, c->op == CHOL_U);
        cg_release_all(2, at, aa);
        break;
    }
    case EIGVALSH: t = sym(a), out = cg_linalg_eigvalsh(t, NULL); break;
    case SVDVALS: out = cg_linalg_svdvals(a); break;
    case PINV: out = cg_linalg_pinv(a, -1, -1); break;
    case LSTSQ: out = cg_linalg_lstsq(a, in[1], -1); break;
    case VNORM: out = cg_linalg_vector_norm(a, c->ord, c->ndims, c->dims, c->keepdim); break;
    case MNORM:
        out = cg_linalg_matrix_norm(a, c->mord, c->ndims ? c->dims : NULL, c->keepdim);
        break;
    default: out = decomposition(c, a); break;
    }
    cg_release(t);
    return out;
}

static cg_tensor *input(cg_rng *r, int nd, const int64_t *shape, int layout, float away)
{
    cg_tensor *t = cg_test_randn_layout(r, nd, shape, layout);
    ck_assert_ptr_nonnull(t);
    float *p = (float *)t->storage->data; /* |x| >= away: kinks (|x|, ties) out of reach */
    for (int64_t i = 0; away > 0 && i < (int64_t)(t->storage->nbytes / sizeof(float)); i++)
        p[i] += p[i] >= 0 ? away : -away;
    return cg_requires_grad(t, true);
}

static void check(const gcase *c, int n, cg_tensor **in, const char *what)
{
    cg_gradcheck_report rep;
    cg_gradcheck_opts o = cg_gradcheck_defaults();
    o.proj_rtol = 1e-4; /* test_grad_ops.c's */
    ck_assert_msg(cg_gradcheck(fn, (void *)c, n, in, &o, &rep), "%s: %s", what, rep.message);
    ck_assert_msg(rep.checked > 0, "%s: nothing checked", what);
}

/* the square ops over [3, 3], [2, 3, 3] (transposed, strided,
 * broadcast over the batch) and [2, 1, 4, 4] */
START_TEST(test_linalg_gradcheck_square)
{
    cg_rng r = cg_rng_new(61);
    const int ops[] = {INV, DET, SLOGDET, CHOL, CHOL_U, EIGH, EIGH_U, EIGVALSH};
    const char *names[] = {"inv",  "det",     "slogdet", "cholesky", "cholesky(upper)",
                           "eigh", "eigh(U)", "eigvalsh"};
    const int64_t shapes[3][4] = {{3, 3}, {2, 3, 3}, {2, 1, 4, 4}};
    const int nds[3] = {2, 3, 4};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        for (int s = 0; s < 3; s++)
            for (int layout = 0; layout < (s == 1 ? 4 : 2); layout++) {
                gcase c = {ops[i], 0, NULL, 0, {0, 0}, false};
                cg_tensor *a = input(&r, nds[s], shapes[s], layout, 0);
                char what[96];
                snprintf(what, sizeof what, "%s shape %d layout %d", names[i], s, layout);
                check(&c, 1, &a, what);
                if (s == 1 && layout == 0)
                    cg_test_check_unread(fn, &c, 1, &a, what);
                cg_release(a);
            }
}
END_TEST

/* det at a singular matrix: the adjugate through the SVD */
START_TEST(test_linalg_gradcheck_det_singular)
{
    gcase c = {DET, 0, NULL, 0, {0, 0}, false};
    cg_tensor *a = cg_requires_grad(
        cg_from_data(CG_SHAPE(3, 3), (const float[]){-2, 2, 3, 2, 1, 6, 1, 0, -2}), true);
    check(&c, 1, &a, "det (singular after the shift by 3)");
    cg_release(a);
}
END_TEST

START_TEST(test_linalg_gradcheck_solve)
{
    cg_rng r = cg_rng_new(62);
    const int64_t sa[][4] = {{3, 3}, {2, 3, 3}, {3, 3}, {2, 1, 3, 3}, {4, 4}};
    const int64_t sb[][4] = {{3, 2}, {3}, {2, 3, 1}, {4, 3, 2}, {4, 2}};
    const int na[] = {2, 3, 2, 4, 2}, nb[] = {2, 1, 3, 3, 2};
    for (int op = 0; op < 2; op++)
        for (int i = 0; i < 5; i++)
            for (int layout = 0; layout < 3; layout++) {
                gcase c = {op ? LSTSQ : SOLVE, 0, NULL, 0, {0, 0}, false};
                int64_t a[4], b[4];
                memcpy(a, sa[i], sizeof a), memcpy(b, sb[i], sizeof b);
                if (op) /* lstsq: A tall [.., 5, n], B [.., 5, k] or [5] */
                    a[na[i] - 2] = 5, b[nb[i] > 1 ? nb[i] - 2 : 0] = 5;
                cg_tensor *in[2] = {input(&r, na[i], a, layout, 0), input(&r, nb[i], b, layout, 0)};
                char what[64];
                snprintf(what, sizeof what, "%s case %d layout %d", op ? "lstsq" : "solve", i,
                         layout);
                check(&c, 2, in, what);
                if (layout == 0)
                    cg_test_check_unread(fn, &c, 2, in, what);
                cg_release_all(2, in[0], in[1]);
            }
}
END_TEST

/* the rectangular ops: tall, wide and square, batched, transposed */
START_TEST(test_linalg_gradcheck_rect)
{
    cg_rng r = cg_rng_new(63);
    const int ops[] = {QR, QR_COMPLETE, SVD, SVD_FULL, SVDVALS, PINV};
    const char *names[] = {"qr", "qr(complete)", "svd", "svd(full)", "svdvals", "pinv"};
    const int64_t shapes[][3] = {{4, 3}, {3, 4}, {3, 3}, {2, 4, 2}, {2, 2, 3}};
    const int nds[] = {2, 2, 2, 3, 3};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        for (int s = 0; s < 5; s++)
            for (int layout = 0; layout < 3; layout++) {
                const int64_t m = shapes[s][nds[s] - 2], n = shapes[s][nds[s] - 1];
                if (ops[i] == QR_COMPLETE && m > n)
                    continue; /* not differentiable (test_linalg.c: its refusal) */
                gcase c = {ops[i], 0, NULL, 0, {0, 0}, false};
                cg_tensor *a = input(&r, nds[s], shapes[s], layout, 0);
                char what[96];
                snprintf(what, sizeof what, "%s shape %d layout %d", names[i], s, layout);
                check(&c, 1, &a, what);
                if (layout == 0 && s == 3)
                    cg_test_check_unread(fn, &c, 1, &a, what);
                cg_release(a);
            }
}
END_TEST

START_TEST(test_linalg_gradcheck_norms)
{
    cg_rng r = cg_rng_new(64);
    const double ords[] = {2, 1, 3, 1.5, 0.5, -1, -2.5, INFINITY, -INFINITY, 0};
    for (size_t i = 0; i < sizeof ords / sizeof ords[0]; i++)
        for (int v = 0; v < 4; v++) {
            gcase c = {VNORM, ords[i], NULL, v == 0 ? 0 : v == 3 ? 2 : 1, {v == 2 ? 0 : -1, 0},
                       v == 2};
            cg_tensor *a = input(&r, 2, (int64_t[]){3, 4}, v % 3, 0.3f);
            char what[64];
            snprintf(what, sizeof what, "vector_norm ord %g variant %d", ords[i], v);
            check(&c, 1, &a, what);
            if (v == 1)
                cg_test_check_unread(fn, &c, 1, &a, what);
            cg_release(a);
        }
    const char *mords[] = {NULL, "fro", "nuc", "2", "-2", "1", "-1", "inf", "-inf"};
    for (size_t i = 0; i < sizeof mords / sizeof mords[0]; i++)
        for (int v = 0; v < 3; v++) {
            gcase c = {MNORM, 0, mords[i], v == 2 ? 2 : 0, {2, 0}, v > 0};
            cg_tensor *a = v < 2 ? input(&r, 2, (int64_t[]){3, 4}, v, 0.3f)
                                 : input(&r, 3, (int64_t[]){2, 3, 4}, 1, 0.3f);
            char what[64];
            snprintf(what, sizeof what, "matrix_norm %s variant %d", mords[i] ? mords[i] : "NULL",
                     v);
            check(&c, 1, &a, what);
            cg_release(a);
        }
}
END_TEST

/* 1 and 2 threads: the same bits, forward and backward, for a batch of 6
 * matrices of 24 x 24 (worth threads) */
static void threads_run(int nt, float **got)
{
    cg_set_num_threads(nt);
    cg_rng r = cg_rng_new(65);
    cg_tensor *a = cg_requires_grad(cg_randn(&r, CG_SHAPE(6, 24, 24)), true);
    cg_tensor *b = cg_requires_grad(cg_randn(&r, CG_SHAPE(6, 24, 5)), true);
    cg_tensor *o[8];
    gcase c[] = {{SOLVE, 0, NULL, 0, {0, 0}, false},   {INV, 0, NULL, 0, {0, 0}, false},
                 {SLOGDET, 0, NULL, 0, {0, 0}, false}, {CHOL, 0, NULL, 0, {0, 0}, false},
                 {QR, 0, NULL, 0, {0, 0}, false},      {EIGH, 0, NULL, 0, {0, 0}, false},
                 {SVD, 0, NULL, 0, {0, 0}, false},     {LSTSQ, 0, NULL, 0, {0, 0}, false}};
    for (int i = 0; i < 8; i++) {
        o[i] = fn(&c[i], (cg_tensor *[]){a, b});
        ck_assert_msg(o[i] != NULL, "%d: %s", i, cg_last_error());
    }
    cg_tensor *loss = cg_test_weighted_squares(8, o);
    cg_test_backward_values(loss, 2, (cg_tensor *[]){a, b}, got);
    cg_release_all(3, a, b, loss);
}

/* One matrix of 160 x 160: LAPACK's own threads (OpenBLAS splits an LU
 * of that size) held to one, at any count of ours */
static void one_matrix_run(int nt, float **got)
{
    cg_set_num_threads(nt);
    cg_rng r = cg_rng_new(66);
    cg_tensor *a = cg_requires_grad(cg_randn(&r, CG_SHAPE(160, 160)), true);
    cg_tensor *b = cg_requires_grad(cg_randn(&r, CG_SHAPE(160, 3)), true);
    cg_tensor *o[6];
    gcase c[] = {{SOLVE, 0, NULL, 0, {0, 0}, false}, {SLOGDET, 0, NULL, 0, {0, 0}, false},
                 {CHOL, 0, NULL, 0, {0, 0}, false},  {QR, 0, NULL, 0, {0, 0}, false},
                 {EIGH, 0, NULL, 0, {0, 0}, false},  {SVD, 0, NULL, 0, {0, 0}, false}};
    for (int i = 0; i < 6; i++) {
        o[i] = fn(&c[i], (cg_tensor *[]){a, b});
        ck_assert_msg(o[i] != NULL, "%d: %s", i, cg_last_error());
    }
    cg_tensor *loss = cg_test_weighted_squares(6, o);
    cg_test_backward_values(loss, 2, (cg_tensor *[]){a, b}, got);
    cg_release_all(3, a, b, loss);
}

START_TEST(test_linalg_threads)
{
    cg_test_same_bits_1_2_threads(threads_run, 3, (int64_t[]){1, 6 * 24 * 24, 6 * 24 * 5});
    cg_test_same_bits_1_2_threads(one_matrix_run, 3, (int64_t[]){1, 160 * 160, 160 * 3});
}
END_TEST

int main(void)
{
    Suite *s = suite_create("linalg_grad");
    TCase *tc = tcase_create("gradcheck");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_linalg_gradcheck_square);
    tcase_add_test(tc, test_linalg_gradcheck_det_singular);
    tcase_add_test(tc, test_linalg_gradcheck_solve);
    tcase_add_test(tc, test_linalg_gradcheck_rect);
    tcase_add_test(tc, test_linalg_gradcheck_norms);
    tcase_add_test(tc, test_linalg_threads);
    suite_add_tcase(s, tc);
    Suite *ss[] = {s};
    return cg_test_run(ss, 1);
}
