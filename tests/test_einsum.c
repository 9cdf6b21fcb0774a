/* torch.einsum and its family, distances and nn.Bilinear (round sixty):
 *   - einsum's values against a reference einsum computed here in double
 *     (every subscript's sum spelled out: repeated subscripts, implicit
 *     outputs, three operands, size-1 broadcasting; ellipses against the
 *     same equation with the ellipsis spelled out), strided operands;
 *   - diagonal a view of its input; trace, diag, outer, kron, tensordot
 *     against einsum's reference; bfloat16 operands within a bound of the
 *     float64 reference;
 *   - cdist (p 0, 1, 2, 3, 0.5, inf; the direct kernel and the matrix
 *     form past 25 rows), pdist, pairwise_distance against distances in
 *     double; their gradients 0 at a zero distance (finite, as PyTorch's);
 *   - gradchecks of every op (cdist's both paths, the batch broadcast);
 *   - refusals in one line, asserted by message;
 *   - Bilinear: its init bounds, the function's value, a gradcheck, its
 *     parameters saved and loaded under PyTorch's names.
 * PyTorch's values and gradients: tests/interop/make_op_cases.py
 * (gen_einsum, gen_distances) and check_ops (torch_ops). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "tests/testutil.h"

/* ------------------------------------------------- reference einsum */
/* An explicit equation of letters only ("ij,jk->ik"), in double: every
 * subscript's index runs over its size (the largest seen: a size of 1
 * broadcasts), each product summed into its output element. */
static double *ref_einsum(const char *eq, int n, cg_tensor *const *ops, int64_t *out_numel)
{
    char in[8][16] = {{0}}, out[16] = {0};
    int k = 0, j = 0;
    const char *p = eq;
    for (; *p && *p != '-'; p++) {
        if (*p == ',') {
            k++;
            j = 0;
        } else
            in[k][j++] = *p;
    }
    if (*p)
        strcpy(out, p + 2);
    ck_assert_int_eq(k + 1, n);
    int64_t size[128] = {0};
    double *v[8];
    for (k = 0; k < n; k++) {
        for (j = 0; in[k][j]; j++) {
            const int64_t s = ops[k]->shape[j];
            size[(int)in[k][j]] = s > size[(int)in[k][j]] ? s : size[(int)in[k][j]];
        }
        float *f = cg_test_values(ops[k]);
        const int64_t m = cg_numel(ops[k]);
        v[k] = malloc(sizeof(double) * (size_t)(m ? m : 1));
        for (int64_t i = 0; i < m; i++)
            v[k][i] = f[i];
        free(f);
    }
    char labels[64];
    int nl = 0;
    for (int c = 0; c < 128; c++)
        if (size[c])
            labels[nl++] = (char)c;
    int64_t on = 1;
    for (j = 0; out[j]; j++)
        on *= size[(int)out[j]];
    double *res = calloc((size_t)(on ? on : 1), sizeof *res);
    int64_t idx[128] = {0}, total = 1;
    for (int l = 0; l < nl; l++)
        total *= size[(int)labels[l]];
    for (int64_t t = 0; t < total; t++) {
        int64_t r = t;
        for (int l = nl - 1; l >= 0; l--) {
            idx[(int)labels[l]] = r % size[(int)labels[l]];
            r /= size[(int)labels[l]];
        }
        double prod = 1.0;
        for (k = 0; k < n; k++) {
            int64_t off = 0;
            for (j = 0; in[k][j]; j++)
                off = off * ops[k]->shape[j] + (ops[k]->shape[j] == 1 ? 0 : idx[(int)in[k][j]]);
            prod *= v[k][off];
        }
        int64_t o = 0;
        for (j = 0; out[j]; j++)
            o = o * size[(int)out[j]] + idx[(int)out[j]];
        res[o] += prod;
    }
    for (k = 0; k < n; k++)
        free(v[k]);
    *out_numel = on;
    return res;
}

/* got (float32) within atol + rtol |want| of want, element by element */
static void assert_near(const cg_tensor *got, const double *want, int64_t n, double atol,
                        double rtol, const char *what)
{
    ck_assert_msg(got != NULL, "%s: %s", what, cg_last_error());
    ck_assert_msg(cg_numel(got) == n, "%s: %lld elements, expected %lld", what,
                  (long long)cg_numel(got), (long long)n);
    float *g = cg_test_values(got);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabs(g[i] - want[i]) <= atol + rtol * fabs(want[i]),
                      "%s: element %lld is %.9g, expected %.9g", what, (long long)i, g[i], want[i]);
    free(g);
}

typedef struct {
    const char *eq;  /* for cg_einsum */
    const char *ref; /* the same spelled out for ref_einsum (NULL: eq) */
    int n;
    int nd[3];
    int64_t shape[3][4];
} eq_case;

static const eq_case EQS[] = {
    {"ij,jk->ik", NULL, 2, {2, 2}, {{3, 4}, {4, 5}}},
    {"ij,jk", "ij,jk->ik", 2, {2, 2}, {{2, 3}, {3, 2}}},
    {"ii->i", NULL, 1, {2}, {{4, 4}}},
    {"ii", "ii->", 1, {2}, {{3, 3}}},
    {"iij->j", NULL, 1, {3}, {{3, 3, 2}}},
    {"ijj,kj->ik", NULL, 2, {3, 2}, {{2, 3, 3}, {4, 3}}},
    {"i,j->ij", NULL, 2, {1, 1}, {{3}, {4}}},
    {"i,i->", NULL, 2, {1, 1}, {{5}, {5}}},
    {"ij->ji", NULL, 1, {2}, {{3, 4}}},
    {"ij->", NULL, 1, {2}, {{3, 4}}},
    {"ba", "ba->ab", 1, {2}, {{2, 3}}},
    {"Ba,aB", "Ba,aB->", 2, {2, 2}, {{2, 3}, {3, 2}}},
    {"Bb,bc", "Bb,bc->Bc", 2, {2, 2}, {{2, 3}, {3, 2}}},
    {" i j , j k -> k i ", "ij,jk->ki", 2, {2, 2}, {{2, 3}, {3, 4}}},
    {"ij,jk,kl->il", NULL, 3, {2, 2, 2}, {{2, 3}, {3, 4}, {4, 2}}},
    {"bn,anm,bm->ba", NULL, 3, {2, 3, 2}, {{3, 4}, {2, 4, 5}, {3, 5}}},
    {"ij,j->ij", NULL, 2, {2, 1}, {{3, 1}, {4}}},
    {"ij,jk->ik", NULL, 2, {2, 2}, {{2, 1}, {3, 4}}},
    {"abc,cd,de->abe", NULL, 3, {3, 2, 2}, {{2, 2, 3}, {3, 4}, {4, 2}}},
    {"ij,ij->ij", NULL, 2, {2, 2}, {{3, 4}, {3, 4}}},
    {"i,i,i->i", NULL, 3, {1, 1, 1}, {{3}, {3}, {3}}},
    {"ijk,ikl->jl", NULL, 2, {3, 3}, {{2, 3, 4}, {2, 4, 3}}},
    {"ij,kl->ijkl", NULL, 2, {2, 2}, {{2, 2}, {1, 3}}},
    {"bij,bjk->bik", NULL, 2, {3, 3}, {{2, 3, 4}, {2, 4, 2}}},
    /* ellipses, aligned right and broadcast */
    {"...ij,...jk->...ik", "abij,bjk->abik", 2, {4, 3}, {{2, 1, 3, 4}, {3, 4, 5}}},
    {"...ij,...jk", "ij,ajk->aik", 2, {2, 3}, {{3, 4}, {2, 4, 3}}},
    {"...i,...i->...", "abi,bi->ab", 2, {3, 2}, {{2, 1, 4}, {3, 4}}},
    {"i...->...", "iab->ab", 1, {3}, {{3, 2, 2}}},
    {"...ii->...i", "aii->ai", 1, {3}, {{2, 3, 3}}},
    {"...ij->j", "abij->j", 1, {4}, {{2, 2, 3, 4}}},
    {"...,...->...", "ab,b->ab", 2, {2, 1}, {{2, 3}, {3}}},
};
#define N_EQS (int)(sizeof EQS / sizeof EQS[0])

static cg_tensor *einsum_fn(void *ctx, cg_tensor *const *in)
{
    const eq_case *c = ctx;
    return cg_einsum(c->eq, c->n, in);
}

START_TEST(test_einsum_values)
{
    cg_rng r = cg_rng_new(60);
    for (int i = 0; i < N_EQS; i++) {
        const eq_case *c = &EQS[i];
        for (int layout = 0; layout < 3; layout++) {
            cg_tensor *in[3] = {NULL};
            for (int k = 0; k < c->n; k++)
                in[k] = c->nd[k] >= 2 ? cg_test_randn_layout(&r, c->nd[k], c->shape[k], layout)
                                      : cg_randn(&r, c->nd[k], c->shape[k]);
            cg_tensor *y = cg_einsum(c->eq, c->n, in);
            int64_t n;
            double *want = ref_einsum(c->ref ? c->ref : c->eq, c->n, in, &n);
            char what[96];
            snprintf(what, sizeof what, "%s, layout %d", c->eq, layout);
            assert_near(y, want, n, 1e-5, 1e-5, what);
            free(want);
            cg_release(y);
            for (int k = 0; k < c->n; k++)
                cg_release(in[k]);
        }
    }
}
END_TEST

START_TEST(test_einsum_shapes)
{
    /* the implicit output's order (A-Z before a-z, the ellipsis first) and
     * the broadcast sizes */
    cg_rng r = cg_rng_new(61);
    cg_tensor *a = cg_randn(&r, CG_SHAPE(2, 3)), *b = cg_randn(&r, CG_SHAPE(4, 1, 3, 5));
    cg_tensor *y = cg_einsum("Ba", 1, &a);
    ck_assert_int_eq(y->ndim, 2);
    ck_assert(y->shape[0] == 2 && y->shape[1] == 3);
    cg_tensor *z = cg_einsum("ij,...jk", 2, (cg_tensor *[]){a, b});
    ck_assert_int_eq(z->ndim, 4);
    ck_assert(z->shape[0] == 4 && z->shape[1] == 1 && z->shape[2] == 2 && z->shape[3] == 5);
    /* an operand without elements: zeros of the output's shape */
    cg_tensor *e = cg_zeros(CG_SHAPE(2, 0)), *f = cg_randn(&r, CG_SHAPE(0, 3));
    cg_tensor *g = cg_einsum("ij,jk->ik", 2, (cg_tensor *[]){e, f});
    ck_assert(g && g->ndim == 2 && g->shape[0] == 2 && g->shape[1] == 3);
    for (int i = 0; i < 6; i++)
        ck_assert(cg_data(g)[i] == 0.0f);
    cg_release_all(7, a, b, y, z, e, f, g);
}
END_TEST

START_TEST(test_einsum_gradcheck)
{
    cg_rng r = cg_rng_new(62);
    for (int i = 0; i < N_EQS; i++) {
        const eq_case *c = &EQS[i];
        const int layout = i % 3;
        cg_tensor *in[3] = {NULL};
        for (int k = 0; k < c->n; k++)
            in[k] = cg_requires_grad(c->nd[k] >= 2
                                         ? cg_test_randn_layout(&r, c->nd[k], c->shape[k], layout)
                                         : cg_randn(&r, c->nd[k], c->shape[k]),
                                     true);
        cg_gradcheck_report rep;
        ck_assert_msg(cg_gradcheck(einsum_fn, (void *)c, c->n, in, NULL, &rep), "%s: %s", c->eq,
                      rep.message);
        ck_assert_int_gt(rep.checked, 0);
        for (int k = 0; k < c->n; k++)
            cg_release(in[k]);
    }
}
END_TEST

START_TEST(test_einsum_bf16)
{
    /* bfloat16 operands (products in float32, the result rounded): within
     * a bound of the float64 reference of the same rounded values */
    cg_rng r = cg_rng_new(63);
    const int pick[] = {0, 14, 15, 24};
    for (int q = 0; q < 4; q++) {
        const eq_case *c = &EQS[pick[q]];
        cg_tensor *in[3] = {NULL}, *inb[3] = {NULL};
        for (int k = 0; k < c->n; k++) {
            cg_tensor *x = cg_randn(&r, c->nd[k], c->shape[k]);
            inb[k] = cg_to(x, CG_BF16);
            in[k] = cg_to(inb[k], CG_F32); /* the rounded values, exactly */
            cg_release(x);
        }
        cg_tensor *y = cg_einsum(c->eq, c->n, inb);
        ck_assert_msg(y && y->dtype == CG_BF16, "%s: %s", c->eq, cg_last_error());
        cg_tensor *yf = cg_to(y, CG_F32);
        int64_t n;
        double *want = ref_einsum(c->ref ? c->ref : c->eq, c->n, in, &n);
        assert_near(yf, want, n, 0.05, 1.6e-2, c->eq); /* bf16 rounding of products and result */
        free(want);
        cg_release_all(2, y, yf);
        for (int k = 0; k < c->n; k++)
            cg_release_all(2, in[k], inb[k]);
    }
}
END_TEST

START_TEST(test_einsum_refusals)
{
    cg_rng r = cg_rng_new(64);
    cg_tensor *a = cg_randn(&r, CG_SHAPE(2, 3)), *b = cg_randn(&r, CG_SHAPE(4, 5));
    cg_tensor *sq = cg_randn(&r, CG_SHAPE(2, 2)), *ab[2] = {a, b};
    CG_ASSERT_REFUSED_LINE(cg_einsum("ij,jk", 2, ab),
                           "einsum: subscript j has size 4 for operand 1 which does not broadcast "
                           "with previously seen size 3");
    CG_ASSERT_REFUSED_LINE(cg_einsum("i$", 1, &a), "invalid subscript given at index 1");
    CG_ASSERT_REFUSED_LINE(cg_einsum("ij-k", 1, &a), "invalid subscript given at index 2");
    CG_ASSERT_REFUSED_LINE(cg_einsum("ij,jk->ik", 1, &a), "fewer operands were provided");
    CG_ASSERT_REFUSED_LINE(cg_einsum("ij", 2, ab), "more operands were provided (2)");
    CG_ASSERT_REFUSED_LINE(cg_einsum("ijk", 1, &a),
                           "the number of subscripts in the equation (3) does not match the "
                           "number of dimensions (2) for operand 0 and no ellipsis was given");
    CG_ASSERT_REFUSED_LINE(cg_einsum("ijk...", 1, &a),
                           "the number of subscripts in the equation (3) is more than the number "
                           "of dimensions (2) for operand 0");
    CG_ASSERT_REFUSED_LINE(cg_einsum("ijklm", 1, &a), "more subscripts than the 2 dims");
    CG_ASSERT_REFUSED_LINE(cg_einsum("ii", 1, &a),
                           "subscript i is repeated for operand 0 but the sizes don't match, 2 "
                           "!= 3");
    CG_ASSERT_REFUSED_LINE(cg_einsum("ij->ii", 1, &sq),
                           "output subscript i appears more than once");
    CG_ASSERT_REFUSED_LINE(cg_einsum("ij->k", 1, &sq),
                           "output subscript k does not appear in the equation for any input");
    CG_ASSERT_REFUSED_LINE(cg_einsum("i..j", 1, &sq), "found '.' for operand 0 that is not part");
    CG_ASSERT_REFUSED_LINE(cg_einsum("...i...", 1, &sq), "an ellipsis was already found");
    CG_ASSERT_REFUSED_LINE(cg_einsum("ij->i$", 1, &sq), "invalid subscript given at index 5");
    CG_ASSERT_REFUSED_LINE(cg_einsum("...ij,...jk", 2, (cg_tensor *[]){cg_test_ids(0, NULL), a}),
                           "einsum");
    cg_tensor *e1 = cg_randn(&r, CG_SHAPE(3, 2, 2)), *e2 = cg_randn(&r, CG_SHAPE(4, 2, 2));
    CG_ASSERT_REFUSED_LINE(cg_einsum("...ij,...jk", 2, (cg_tensor *[]){e1, e2}),
                           "the ellipsis dims of operand 1 do not broadcast");
    cg_tensor *many = cg_randn(&r, CG_SHAPE(2, 2, 2, 2, 2));
    CG_ASSERT_REFUSED_LINE(cg_einsum("abcde,fghij", 2, (cg_tensor *[]){many, many}),
                           "10 distinct dims, more than the 8");
    CG_ASSERT_REFUSED_LINE(cg_einsum(NULL, 1, &a), "einsum: expected an equation");
    CG_ASSERT_REFUSED_LINE(cg_einsum("ij", 0, &a), "at least one operand");
    CG_ASSERT_REFUSED_LINE(cg_einsum("ij,jk", 2, (cg_tensor *[]){a, NULL}), "einsum");
    cg_release_all(6, a, b, sq, e1, e2, many);
}
END_TEST

/* ------------------------------------------------ diagonal and family */
START_TEST(test_diagonal_view)
{
    cg_rng r = cg_rng_new(65);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(3, 4, 5));
    const struct {
        int64_t off;
        int d1, d2, len;
    } cs[] = {{0, 0, 2, 3},  {2, 0, 2, 3}, {-3, 2, 0, 2},
              {-1, 0, 2, 2}, {7, 1, 2, 0}, {-4, 1, 2, 0}};
    float *v = cg_test_values(x);
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        cg_tensor *d = cg_diagonal(x, cs[i].off, cs[i].d1, cs[i].d2);
        ck_assert_msg(d && d->storage == x->storage, "a view: %s", cg_last_error());
        ck_assert_int_eq(d->ndim, 2);
        ck_assert_int_eq(d->shape[1], cs[i].len);
        float *dv = cg_test_values(d);
        const int a = cs[i].d1, b = cs[i].d2, o = 3 - a - b; /* the dim left */
        for (int64_t k = 0; k < d->shape[0]; k++)
            for (int64_t t = 0; t < cs[i].len; t++) {
                int64_t at[3];
                at[o] = k;
                at[a] = cs[i].off >= 0 ? t : t - cs[i].off;
                at[b] = cs[i].off >= 0 ? t + cs[i].off : t;
                ck_assert(dv[k * cs[i].len + t] == v[(at[0] * 4 + at[1]) * 5 + at[2]]);
            }
        free(dv);
        cg_release(d);
    }
    free(v);
    CG_ASSERT_REFUSED_LINE(cg_diagonal(x, 0, 1, -2),
                           "diagonal: diagonal dimensions cannot be identical 1, -2");
    CG_ASSERT_REFUSED_LINE(cg_diagonal(x, 0, 0, 3), "diagonal");
    CG_ASSERT_REFUSED_LINE(cg_diagonal(NULL, 0, 0, 1), "cg_view_diagonal");
    cg_release(x);
}
END_TEST

static cg_tensor *family_fn(void *ctx, cg_tensor *const *in)
{
    switch (*(const int *)ctx) {
    case 0: return cg_trace(in[0]);
    case 1: return cg_diag(in[0], 1);
    case 2: return cg_diag(in[0], -2);
    case 3: return cg_outer(in[0], in[1]);
    case 4: return cg_kron(in[0], in[1]);
    case 5: return cg_tensordot(in[0], in[1], 2, (int[]){1, 0}, (int[]){0, 1});
    case 6: return cg_tensordot(in[0], in[1], 1, NULL, NULL);
    case 7: return cg_diag(in[0], 0);
    default: return cg_diagonal(in[0], -1, 0, 1);
    }
}

START_TEST(test_family_values)
{
    cg_rng r = cg_rng_new(66);
    cg_tensor *m = cg_test_randn_layout(&r, CG_SHAPE(3, 4), 1), *v = cg_randn(&r, CG_SHAPE(3));
    cg_tensor *w = cg_randn(&r, CG_SHAPE(2)), *t3 = cg_randn(&r, CG_SHAPE(3, 4, 2));
    cg_tensor *u3 = cg_randn(&r, CG_SHAPE(4, 3, 5));
    int64_t n;
    double *want;
    cg_tensor *y = cg_trace(m), *m3 = cg_narrow(m, 1, 0, 3); /* min(3, 4) diagonal elements */
    want = ref_einsum("ii->", 1, &m3, &n);
    assert_near(y, want, n, 1e-6, 1e-6, "trace");
    free(want);
    cg_release_all(2, y, m3);
    y = cg_outer(v, w);
    want = ref_einsum("i,j->ij", 2, (cg_tensor *[]){v, w}, &n);
    assert_near(y, want, n, 0, 1e-7, "outer");
    free(want);
    cg_release(y);
    y = cg_tensordot(t3, u3, 2, (int[]){1, 0}, (int[]){0, 1});
    want = ref_einsum("abc,bad->cd", 2, (cg_tensor *[]){t3, u3}, &n);
    assert_near(y, want, n, 1e-5, 1e-5, "tensordot([1, 0], [0, 1])");
    free(want);
    cg_release(y);
    /* diag: v on the diagonal offset 1 of a [4, 4], and below at -2 */
    float *vv = cg_test_values(v);
    for (int off = -2; off <= 1; off += 3) {
        y = cg_diag(v, off);
        ck_assert(y && y->ndim == 2 && y->shape[0] == 3 + abs(off) && y->shape[1] == y->shape[0]);
        float *yv = cg_test_values(y);
        for (int64_t i = 0; i < y->shape[0]; i++)
            for (int64_t j = 0; j < y->shape[1]; j++) {
                const int64_t k = off >= 0 ? i : j;
                ck_assert(yv[i * y->shape[1] + j] == (j - i == off ? vv[k] : 0.0f));
            }
        free(yv);
        cg_release(y);
    }
    free(vv);
    /* kron of [2, 3] and [2]: [2, 6], a_ij b_l at (i, 3 l... ) */
    cg_tensor *ka = cg_randn(&r, CG_SHAPE(2, 3));
    y = cg_kron(ka, w);
    ck_assert(y && y->ndim == 2 && y->shape[0] == 2 && y->shape[1] == 6);
    float *kv = cg_test_values(ka), *wv = cg_test_values(w), *yv = cg_test_values(y);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 6; j++)
            ck_assert(yv[i * 6 + j] == kv[i * 3 + j / 2] * wv[j % 2]);
    free(kv);
    free(wv);
    free(yv);
    CG_ASSERT_REFUSED_LINE(cg_trace(v), "trace: expected a matrix, got [3]");
    CG_ASSERT_REFUSED_LINE(cg_diag(t3, 0), "diag: expected a 1-d or 2-d tensor, got [3, 4, 2]");
    CG_ASSERT_REFUSED_LINE(cg_outer(m, v), "outer: expected two 1-d tensors, got [3, 4] and [3]");
    CG_ASSERT_REFUSED_LINE(cg_tensordot(t3, u3, 1, (int[]){0}, (int[]){0}),
                           "contracted dimensions need to match, but first has size 3 in dim 0 "
                           "and second has size 4 in dim 0");
    CG_ASSERT_REFUSED_LINE(cg_tensordot(t3, u3, 4, NULL, NULL), "tensordot: 4 dims to contract");
    CG_ASSERT_REFUSED_LINE(cg_tensordot(t3, u3, 2, (int[]){0, 0}, (int[]){1, 0}), "appears twice");
    cg_tensor *k5 = cg_randn(&r, CG_SHAPE(1, 1, 1, 1, 2));
    CG_ASSERT_REFUSED_LINE(cg_kron(k5, w), "kron: 5 dims each, more than the 4");
    cg_release_all(8, m, v, w, t3, u3, y, ka, k5);
}
END_TEST

START_TEST(test_family_gradcheck)
{
    cg_rng r = cg_rng_new(67);
    const int64_t shapes[9][2][3] = {{{4, 4}},
                                     {{3}},
                                     {{2}},
                                     {{3}, {4}},
                                     {{2, 3}, {3, 1, 2}},
                                     {{3, 4, 2}, {4, 3, 2}},
                                     {{2, 3}, {3, 2}},
                                     {{3, 3}},
                                     {{3, 4}}};
    const int nds[9][2] = {{2, 0}, {1, 0}, {1, 0}, {1, 1}, {2, 3}, {3, 3}, {2, 2}, {2, 0}, {2, 0}};
    for (int i = 0; i < 9; i++) {
        cg_tensor *in[2] = {NULL};
        const int n = nds[i][1] ? 2 : 1;
        for (int k = 0; k < n; k++)
            in[k] = cg_requires_grad(nds[i][k] >= 2
                                         ? cg_test_randn_layout(&r, nds[i][k], shapes[i][k], i % 3)
                                         : cg_randn(&r, nds[i][k], shapes[i][k]),
                                     true);
        cg_gradcheck_report rep;
        ck_assert_msg(cg_gradcheck(family_fn, &i, n, in, NULL, &rep), "case %d: %s", i,
                      rep.message);
        cg_release_all(2, in[0], in[1]);
    }
}
END_TEST

/* ---------------------------------------------------------- distances */
static double ref_dist(const float *u, const float *v, int64_t m, double p)
{
    double s = 0;
    for (int64_t k = 0; k < m; k++) {
        const double d = fabs((double)u[k] - (double)v[k]);
        s = p == 0 ? s + (d != 0) : isinf(p) ? fmax(s, d) : s + pow(d, p);
    }
    return p == 0 || isinf(p) ? s : pow(s, 1.0 / p);
}

static const float PS[] = {0.0f, 1.0f, 2.0f, 3.0f, 0.5f, INFINITY};

START_TEST(test_cdist_values)
{
    cg_rng r = cg_rng_new(68);
    const int64_t rows[3][2] = {{3, 4}, {30, 5}, {2, 27}}; /* the direct kernel, the matrix form */
    for (int q = 0; q < 3; q++)
        for (int i = 0; i < 6; i++) {
            const int64_t P = rows[q][0], R = rows[q][1], M = 3;
            cg_tensor *x1 = cg_test_randn_layout(&r, 3, (int64_t[]){2, P, M}, q % 2);
            cg_tensor *x2 = cg_randn(&r, 2, (int64_t[]){R, M}); /* broadcast over the batch */
            cg_tensor *d = cg_cdist(x1, x2, PS[i]);
            float *a = cg_test_values(x1), *b = cg_test_values(x2);
            double *want = malloc(sizeof(double) * (size_t)(2 * P * R));
            for (int64_t e = 0; e < 2 * P * R; e++)
                want[e] = ref_dist(a + (e / R) * M, b + (e % R) * M, M, PS[i]);
            char what[64];
            snprintf(what, sizeof what, "cdist p %g, [%lld] x [%lld]", (double)PS[i], (long long)P,
                     (long long)R);
            assert_near(d, want, 2 * P * R, 1e-5, 1e-5, what);
            ck_assert(d->ndim == 3 && d->shape[0] == 2 && d->shape[1] == P && d->shape[2] == R);
            free(a);
            free(b);
            free(want);
            cg_release_all(3, x1, x2, d);
        }
}
END_TEST

START_TEST(test_pdist_pairwise_values)
{
    cg_rng r = cg_rng_new(69);
    cg_tensor *x = cg_test_randn_layout(&r, CG_SHAPE(5, 3), 1);
    cg_tensor *y = cg_randn(&r, CG_SHAPE(4, 3)), *z = cg_randn(&r, CG_SHAPE(3));
    float *xv = cg_test_values(x), *yv = cg_test_values(y), *zv = cg_test_values(z);
    for (int i = 0; i < 6; i++) {
        double want[10];
        int k = 0;
        for (int a = 0; a < 5; a++)
            for (int b = a + 1; b < 5; b++)
                want[k++] = ref_dist(xv + a * 3, xv + b * 3, 3, PS[i]);
        cg_tensor *d = cg_pdist(x, PS[i]);
        assert_near(d, want, 10, 1e-5, 1e-5, "pdist");
        /* pairwise: the rows of y against z (broadcast), eps added to each
         * difference */
        float shifted[3];
        for (int m = 0; m < 3; m++)
            shifted[m] = zv[m] - 0.25f;
        for (int a = 0; a < 4; a++)
            want[a] = ref_dist(yv + a * 3, shifted, 3, PS[i]);
        cg_tensor *pw = cg_pairwise_distance(y, z, PS[i], 0.25f, i % 2);
        assert_near(pw, want, 4, 1e-5, 1e-5, "pairwise_distance");
        ck_assert_int_eq(pw->ndim, i % 2 ? 2 : 1);
        cg_release_all(2, d, pw);
    }
    free(xv);
    free(yv);
    free(zv);
    /* 0-d: one row of one element (torch.norm over the last dim of a 0-d) */
    cg_tensor *s1 = cg_scalar(1.0f), *s2 = cg_scalar(-0.5f);
    cg_tensor *d0 = cg_pairwise_distance(s1, s2, 3.0f, 0.0f, false);
    ck_assert(d0 && d0->ndim == 0 && fabsf(cg_data(d0)[0] - 1.5f) < 1e-6f);
    cg_release_all(3, s1, s2, d0);
    cg_tensor *one = cg_randn(&r, CG_SHAPE(1, 3)), *e = cg_pdist(one, 2.0f);
    ck_assert(e && e->ndim == 1 && e->shape[0] == 0);
    cg_release_all(5, x, y, z, one, e);
}
END_TEST

/* N(0, 0.3^2) values plus 0.8 times each element's index, in the layout
 * (cg_test_randn_layout's): the differences of any two rows far from 0
 * (the kinks of |d|^p) and from each other (inf's ties) */
static cg_tensor *spread(cg_rng *r, int nd, const int64_t *shape, int layout)
{
    cg_tensor *x = cg_test_randn_layout(r, nd, shape, layout);
    float *v = cg_test_values(x);
    for (int64_t i = 0; i < cg_numel(x); i++)
        v[i] = 0.3f * v[i] + 0.8f * (float)i;
    cg_tensor *c = cg_from_data(nd, shape, v);
    free(v);
    ck_assert(cg_copy_(x, c));
    cg_release(c);
    return x;
}

typedef struct {
    int kind; /* 0 cdist, 1 pdist, 2 pairwise_distance */
    float p;
} dist_case;

static cg_tensor *dist_fn(void *ctx, cg_tensor *const *in)
{
    const dist_case *c = ctx;
    return c->kind == 0   ? cg_cdist(in[0], in[1], c->p)
           : c->kind == 1 ? cg_pdist(in[0], c->p)
                          : cg_pairwise_distance(in[0], in[1], c->p, 1e-6f, false);
}

START_TEST(test_distance_gradcheck)
{
    cg_rng r = cg_rng_new(70);
    const float ps[] = {1.0f, 2.0f, 3.0f, 1.5f, 0.5f, INFINITY, 0.0f};
    for (int kind = 0; kind < 3; kind++)
        for (int i = 0; i < 7; i++) /* p = 2 past 25 rows too: the matrix form */
            for (int big = 0; big < (kind == 0 && ps[i] == 2.0f ? 2 : 1); big++) {
                dist_case c = {kind, ps[i]};
                const int64_t P = big ? 27 : 3;
                cg_tensor *in[2] = {
                    cg_requires_grad(kind == 0 ? spread(&r, 3, (int64_t[]){2, P, 3}, i % 3)
                                               : spread(&r, CG_SHAPE(4, 3), i % 3),
                                     true),
                    cg_requires_grad(
                        kind == 0 ? spread(&r, CG_SHAPE(1, 2, 3), 0)
                                  : cg_from_data(CG_SHAPE(3), (const float[]){-5.1f, -7.3f, -6.2f}),
                        true)};
                cg_gradcheck_report rep;
                ck_assert_msg(cg_gradcheck(dist_fn, &c, kind == 1 ? 1 : 2, in, NULL, &rep),
                              "kind %d p %g rows %lld: %s", kind, (double)ps[i], (long long)P,
                              rep.message);
                if (kind == 0 && !big)
                    cg_test_check_unread(dist_fn, &c, 2, in, "cdist"); /* CDIST's reads */
                cg_release_all(2, in[0], in[1]);
            }
}
END_TEST

/* A zero distance: the gradient 0 there (PyTorch's), finite, for every
 * p and each path; the other pairs' gradients still flow */
START_TEST(test_distance_zero_grad)
{
    const float v[] = {1, 2, -1, 0.5f, 3, 1};
    for (int i = 0; i < 6; i++)
        for (int path = 0; path < 4; path++) {
            cg_tensor *x = cg_requires_grad(cg_from_data(CG_SHAPE(2, 3), v), true);
            cg_tensor *row = cg_narrow(x, 0, 0, 1), *tmp = NULL, *y = NULL;
            if (path == 0) /* x's row 0 against itself: a zero distance */
                y = cg_cdist(x, row, PS[i]);
            else if (path == 1) { /* the matrix form: 26 copies of row 0 */
                tmp = cg_expand(row, 2, (int64_t[]){26, 3});
                y = cg_cdist(tmp, x, PS[i]);
            } else if (path == 2) {
                tmp = cg_concat((cg_tensor *[]){x, row}, 2, 0);
                y = cg_pdist(tmp, PS[i]);
            } else
                y = cg_pairwise_distance(x, x, PS[i], 0.0f, false);
            cg_release_all(2, row, tmp);
            if (path == 1 && PS[i] != 2.0f) {
                cg_release(y);
                cg_release(x);
                continue; /* the matrix form is p = 2's */
            }
            ck_assert_msg(y != NULL, "%s", cg_last_error());
            cg_tensor *s = cg_sum_all(y);
            ck_assert(cg_backward(s, NULL, false));
            float *g = cg_test_values(x->grad);
            for (int k = 0; k < 6; k++)
                ck_assert_msg(isfinite(g[k]), "p %g path %d: gradient %g", (double)PS[i], path,
                              g[k]);
            if (path == 3) /* every distance 0: no gradient at all */
                for (int k = 0; k < 6; k++)
                    ck_assert(g[k] == 0.0f);
            free(g);
            cg_release_all(3, s, y, x);
        }
}
END_TEST

/* p = 0 counts the differences that are not 0; an inf norm's tied maxima
 * each get g in cdist (PyTorch's _cdist_backward) and share it in
 * pairwise_distance (torch.norm's backward) */
START_TEST(test_distance_counts_and_ties)
{
    cg_tensor *x1 = cg_from_data(CG_SHAPE(1, 3), (const float[]){1, 2, 3});
    cg_tensor *x2 = cg_from_data(CG_SHAPE(3, 3), (const float[]){1, 5, 3, 0, 2, 4, 1, 2, 3});
    cg_tensor *c = cg_cdist(x1, x2, 0.0f);
    const double counts[3] = {1, 2, 0};
    assert_near(c, counts, 3, 0, 0, "cdist p 0");
    cg_tensor *pw = cg_pairwise_distance(x2, x1, 0.0f, 0.0f, false);
    assert_near(pw, counts, 3, 0, 0, "pairwise_distance p 0");
    cg_release_all(4, x1, x2, c, pw);
    for (int pair = 0; pair < 2; pair++) {
        cg_tensor *t =
            cg_requires_grad(cg_from_data(CG_SHAPE(1, 3), (const float[]){2, -2, 1}), true);
        cg_tensor *z = cg_zeros(CG_SHAPE(1, 3));
        cg_tensor *d =
            pair ? cg_pairwise_distance(t, z, INFINITY, 0.0f, false) : cg_cdist(t, z, INFINITY);
        cg_tensor *s = cg_sum_all(d);
        ck_assert(s && cg_backward(s, NULL, false));
        const double want[3] = {pair ? 0.5 : 1.0, pair ? -0.5 : -1.0, 0.0};
        assert_near(t->grad, want, 3, 0, 0, pair ? "pairwise inf ties" : "cdist inf ties");
        cg_release_all(4, t, z, d, s);
    }
}
END_TEST

/* triplet_margin_loss's distances are pairwise_distance's: a positive
 * equal to the anchor (eps 0) gives a zero distance and a finite gradient */
START_TEST(test_triplet_zero_distance)
{
    cg_rng r = cg_rng_new(73);
    cg_tensor *a = cg_requires_grad(cg_randn(&r, CG_SHAPE(3, 4)), true);
    cg_tensor *n = cg_randn(&r, CG_SHAPE(3, 4));
    cg_tensor *l = cg_triplet_margin_loss(a, a, n, 100.0f, 2.0f, 0.0f, false, CG_REDUCTION_SUM);
    ck_assert_msg(l && cg_backward(l, NULL, false), "%s", cg_last_error());
    float *g = cg_test_values(a->grad);
    for (int k = 0; k < 12; k++)
        ck_assert_msg(isfinite(g[k]) && g[k] != 0.0f, "gradient %g", g[k]); /* d(a, neg)'s */
    free(g);
    cg_release_all(3, a, n, l);
}
END_TEST

START_TEST(test_distance_refusals)
{
    cg_rng r = cg_rng_new(71);
    cg_tensor *a = cg_randn(&r, CG_SHAPE(2, 3)), *b = cg_randn(&r, CG_SHAPE(2, 4));
    cg_tensor *v = cg_randn(&r, CG_SHAPE(3)), *ab = cg_to(a, CG_BF16);
    cg_tensor *b3 = cg_randn(&r, CG_SHAPE(2, 2, 3)), *c3 = cg_randn(&r, CG_SHAPE(3, 2, 3));
    CG_ASSERT_REFUSED_LINE(cg_cdist(v, a, 2.0f), "cdist: only supports at least 2D tensors");
    CG_ASSERT_REFUSED_LINE(cg_cdist(a, b, 2.0f),
                           "X1 and X2 must have the same number of columns. X1: 3 X2: 4");
    CG_ASSERT_REFUSED_LINE(cg_cdist(a, a, -1.0f), "only supports non-negative p values, got -1");
    CG_ASSERT_REFUSED_LINE(cg_cdist(a, a, NAN), "only supports non-negative p values");
    CG_ASSERT_REFUSED_LINE(cg_cdist(b3, c3, 2.0f), "cdist");
    CG_ASSERT_REFUSED_LINE(cg_cdist(ab, a, 2.0f), "cdist: argument 'x1' is bfloat16");
    CG_ASSERT_REFUSED_LINE(cg_cdist(NULL, a, 2.0f), "cdist");
    CG_ASSERT_REFUSED_LINE(cg_pdist(b3, 2.0f), "pdist: only supports 2D tensors, got: 3D");
    CG_ASSERT_REFUSED_LINE(cg_pdist(a, -2.0f), "pdist: only supports non-negative p values");
    CG_ASSERT_REFUSED_LINE(cg_pairwise_distance(a, b, 2.0f, 1e-6f, false),
                           "pairwise_distance: shapes [2, 3] and [2, 4] cannot be broadcast");
    CG_ASSERT_REFUSED_LINE(cg_pairwise_distance(a, a, -1.0f, 1e-6f, false),
                           "pairwise_distance: p is -1");
    cg_tensor *s = cg_scalar(1.0f), *ids = cg_test_ids(3, NULL);
    CG_ASSERT_REFUSED_LINE(cg_pairwise_distance(ids, a, 2.0f, 1e-6f, false),
                           "pairwise_distance: argument 'x1' is int64, expected a float tensor");
    cg_tensor *d = cg_k_cdist(b3, b3, 1.0f), *dx;
    ck_assert_ptr_nonnull(d);
    CG_ASSERT_REFUSED(!cg_k_cdist_backward(b3, b3, a, a, 1.0f, false, &dx, NULL),
                      "cdist_backward: distances [2, 3] and gradient [2, 3], expected [2, 2, 2]");
    CG_ASSERT_REFUSED_LINE(cg_k_cdist(a, a, 1.0f), "cdist: expected x1 [B, P, M] and x2 [B, R, M]");
    cg_release_all(9, a, b, v, ab, b3, c3, s, d, NULL);
}
END_TEST

/* ----------------------------------------------------------- bilinear */
static cg_tensor *bilinear_fn(void *ctx, cg_tensor *const *in)
{
    return cg_bilinear(in[0], in[1], in[2], ctx ? in[3] : NULL);
}

START_TEST(test_bilinear)
{
    cg_rng r = cg_rng_new(72);
    cg_module *m = cg_bilinear_new(4, 3, 2, true, &r);
    ck_assert_ptr_nonnull(m);
    cg_tensor *w = cg_module_get_param(m, "weight"), *b = cg_module_get_param(m, "bias");
    ck_assert(w && w->ndim == 3 && w->shape[0] == 2 && w->shape[1] == 4 && w->shape[2] == 3);
    ck_assert(b && b->ndim == 1 && b->shape[0] == 2);
    float *wv = cg_test_values(w);
    float lo = 1, hi = -1;
    for (int i = 0; i < 24; i++) {
        ck_assert(fabsf(wv[i]) <= 0.5f); /* U(-1/sqrt(4), 1/sqrt(4)) */
        lo = fminf(lo, wv[i]);
        hi = fmaxf(hi, wv[i]);
    }
    ck_assert(lo < -0.1f && hi > 0.1f);
    free(wv);
    cg_tensor *x1 = cg_test_randn_layout(&r, CG_SHAPE(5, 4), 1), *x2 = cg_randn(&r, CG_SHAPE(5, 3));
    cg_tensor *y = cg_bilinear_forward(m, x1, x2);
    int64_t n;
    double *want = ref_einsum("bi,oij,bj->bo", 3, (cg_tensor *[]){x1, w, x2}, &n);
    float *bv = cg_test_values(b);
    for (int64_t e = 0; e < n; e++)
        want[e] += bv[e % 2];
    assert_near(y, want, n, 1e-5, 1e-5, "bilinear");
    free(want);
    free(bv);
    /* the gradcheck, with a bias and without */
    for (int withb = 0; withb < 2; withb++) {
        cg_tensor *in[4] = {cg_requires_grad(cg_test_randn_layout(&r, CG_SHAPE(2, 3, 4), 1), true),
                            cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 3, 2)), true),
                            cg_requires_grad(cg_randn(&r, CG_SHAPE(3, 4, 2)), true),
                            cg_requires_grad(cg_randn(&r, CG_SHAPE(3)), true)};
        cg_gradcheck_report rep;
        ck_assert_msg(cg_gradcheck(bilinear_fn, withb ? &r : NULL, 3 + withb, in, NULL, &rep), "%s",
                      rep.message);
        cg_release_all(4, in[0], in[1], in[2], in[3]);
    }
    /* saved and loaded under PyTorch's names */
    char dir[256], path[300];
    cg_test_mkdtemp(dir, sizeof dir, "bilinear");
    snprintf(path, sizeof path, "%s/b.safetensors", dir);
    ck_assert_msg(cg_module_save(m, path, 0, NULL), "%s", cg_last_error());
    cg_module *m2 = cg_bilinear_new(4, 3, 2, true, NULL);
    ck_assert_msg(cg_module_load_file(m2, path), "%s", cg_last_error());
    cg_tensor *y2 = cg_bilinear_forward(m2, x1, x2);
    ck_assert(!memcmp(cg_data(y), cg_data(y2), sizeof(float) * 10));
    cg_module *m3 = cg_bilinear_new(4, 3, 2, false, NULL);
    ck_assert_ptr_null(cg_module_get_param(m3, "bias"));
    CG_ASSERT_REFUSED(!cg_module_load_file(m3, path), "bias");
    cg_test_rm_tree(dir);
    /* refusals */
    cg_tensor *x3 = cg_randn(&r, CG_SHAPE(4, 3)), *x13 = cg_randn(&r, CG_SHAPE(5, 1, 4));
    CG_ASSERT_REFUSED_LINE(cg_bilinear(x1, x3, w, b), "input batch dimensions do not match");
    CG_ASSERT_REFUSED_LINE(cg_bilinear(x13, x2, w, b),
                           "input dimensions do not match: got 3 and 2");
    CG_ASSERT_REFUSED_LINE(cg_bilinear(x2, x2, w, b),
                           "bilinear: weight [2, 4, 3], expected [out, 3, 3]");
    CG_ASSERT_REFUSED_LINE(cg_bilinear(x1, x2, w, x1), "bilinear: bias [5, 4], expected [2]");
    CG_ASSERT_REFUSED_LINE(cg_bilinear(x1, x2, NULL, b), "bilinear");
    CG_ASSERT_REFUSED_LINE(cg_bilinear_new(0, 3, 2, true, NULL),
                           "Bilinear: in1_features, in2_features and out_features must be at "
                           "least 1 (got 0, 3 and 2)");
    cg_release_all(6, x1, x2, y, y2, x3, x13);
    cg_module_free(m);
    cg_module_free(m2);
    cg_module_free(m3);
}
END_TEST

static Suite *einsum_suite(void)
{
    Suite *s = suite_create("einsum");
    TCase *tc = tcase_create("einsum");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_einsum_values);
    tcase_add_test(tc, test_einsum_shapes);
    tcase_add_test(tc, test_einsum_gradcheck);
    tcase_add_test(tc, test_einsum_bf16);
    tcase_add_test(tc, test_einsum_refusals);
    tcase_add_test(tc, test_diagonal_view);
    tcase_add_test(tc, test_family_values);
    tcase_add_test(tc, test_family_gradcheck);
    tcase_add_test(tc, test_cdist_values);
    tcase_add_test(tc, test_pdist_pairwise_values);
    tcase_add_test(tc, test_distance_gradcheck);
    tcase_add_test(tc, test_distance_zero_grad);
    tcase_add_test(tc, test_distance_counts_and_ties);
    tcase_add_test(tc, test_triplet_zero_distance);
    tcase_add_test(tc, test_distance_refusals);
    tcase_add_test(tc, test_bilinear);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {einsum_suite()};
    return cg_test_run(s, 1);
}
