/* Check suite "reduce": core/reduce.c against naive loops. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------ helpers */
static bool next_index(int nd, const int64_t *shape, int64_t *idx)
{
    for (int d = nd - 1; d >= 0; d--) {
        if (++idx[d] < shape[d])
            return true;
        idx[d] = 0;
    }
    return false;
}

/* mask from a dims list (empty = all) */
static void dims_mask(int nd, int ndims, const int *dims, bool *mask)
{
    for (int i = 0; i < nd; i++)
        mask[i] = ndims == 0;
    for (int i = 0; i < ndims; i++)
        mask[dims[i] < 0 ? dims[i] + nd : dims[i]] = true;
}

/* Flat output index (row-major over the kept dims) of input index idx. */
static int64_t out_index(const cg_tensor *a, const bool *mask, const int64_t *idx)
{
    int64_t o = 0;
    for (int i = 0; i < a->ndim; i++)
        if (!mask[i])
            o = o * a->shape[i] + idx[i];
    return o;
}

enum { SUM, MEAN, VAR };

/* Naive sum / mean / var (two-pass, double). */
static float *naive_reduce(const cg_tensor *a, const bool *mask, int kind, int correction,
                           int64_t *nout_p)
{
    int64_t nout = 1, nred = 1;
    for (int i = 0; i < a->ndim; i++) {
        if (mask[i])
            nred *= a->shape[i];
        else
            nout *= a->shape[i];
    }
    double *s = calloc((size_t)(nout ? nout : 1), sizeof(double));
    double *q = calloc((size_t)(nout ? nout : 1), sizeof(double));
    int64_t idx[CG_MAX_DIMS] = {0};
    int64_t n = cg_numel(a);
    for (int64_t k = 0; k < n; k++, next_index(a->ndim, a->shape, idx))
        s[out_index(a, mask, idx)] += cg_get(a, idx);
    memset(idx, 0, sizeof idx);
    for (int64_t k = 0; k < n; k++, next_index(a->ndim, a->shape, idx)) {
        int64_t o = out_index(a, mask, idx);
        double d = cg_get(a, idx) - s[o] / (double)nred;
        q[o] += d * d;
    }
    float *r = malloc((size_t)(nout ? nout : 1) * sizeof(float));
    for (int64_t o = 0; o < nout; o++) {
        double den = (double)nred - correction;
        r[o] = (float)(kind == SUM    ? s[o]
                       : kind == MEAN ? s[o] / (double)nred
                                      : q[o] / (den > 0 ? den : 0.0));
    }
    free(s);
    free(q);
    *nout_p = nout;
    return r;
}

static void check_out_shape(const cg_tensor *r, const cg_tensor *a, const bool *mask, bool keepdim)
{
    ck_assert_ptr_nonnull(r);
    int n = 0;
    for (int i = 0; i < a->ndim; i++) {
        if (!mask[i]) {
            ck_assert_int_eq(r->shape[n++], a->shape[i]);
        } else if (keepdim) {
            ck_assert_int_eq(r->shape[n++], 1);
        }
    }
    ck_assert_int_eq(r->ndim, n);
}

static const struct {
    int n;
    int d[3];
} DIMS[] = {
    {0, {0}},    {1, {0}},    {1, {1}},    {1, {2}},     {1, {-1}},      {2, {0, 2}},
    {2, {2, 0}}, {2, {1, 2}}, {2, {0, 1}}, {2, {-3, 1}}, {3, {0, 1, 2}},
};
#define N_DIMS (int)(sizeof DIMS / sizeof DIMS[0])

/* ------------------------------------------------------------- tests */
START_TEST(test_sum_mean_var)
{
    cg_rng rng = cg_rng_new(21);
    for (int kind = 0; kind < 4; kind++) {
        cg_tensor *a = cg_test_randn_layout(&rng, CG_SHAPE(4, 5, 6), kind);
        for (int c = 0; c < N_DIMS; c++) {
            bool mask[CG_MAX_DIMS];
            dims_mask(3, DIMS[c].n, DIMS[c].d, mask);
            for (int keep = 0; keep < 2; keep++) {
                for (int op = 0; op < 5; op++) {
                    int which = op < 2 ? op : VAR, corr = op < 2 ? 0 : op - 2;
                    cg_tensor *r = op == SUM    ? cg_k_sum(a, DIMS[c].n, DIMS[c].d, keep)
                                   : op == MEAN ? cg_k_mean(a, DIMS[c].n, DIMS[c].d, keep)
                                                : cg_k_var(a, DIMS[c].n, DIMS[c].d, corr, keep);
                    ck_assert_msg(r != NULL, "%s", cg_last_error());
                    check_out_shape(r, a, mask, keep);
                    ck_assert(cg_is_contiguous(r));
                    int64_t nout;
                    float *e = naive_reduce(a, mask, which, corr, &nout);
                    ck_assert_int_eq(cg_numel(r), nout);
                    CG_ASSERT_TENSOR(r, e, 1e-6, 1e-6);
                    free(e);
                    cg_release(r);
                }
            }
        }
        cg_release(a);
    }
}
END_TEST

START_TEST(test_sliced_and_wide)
{
    /* a step-3 slice on a middle dim and a permuted 4-D tensor */
    cg_rng rng = cg_rng_new(22);
    cg_tensor *base = cg_randn(&rng, CG_SHAPE(3, 20, 7));
    cg_tensor *a = cg_view_slice(base, 1, 2, 20, 3); /* [3, 6, 7] */
    cg_tensor *b4 = cg_randn(&rng, CG_SHAPE(2, 3, 300, 5));
    int perm[] = {2, 0, 3, 1};
    cg_tensor *p = cg_view_permute(b4, perm); /* [300, 2, 5, 3] */
    const cg_tensor *ins[] = {a, p};
    for (int t = 0; t < 2; t++) {
        const cg_tensor *x = ins[t];
        int lists[][3] = {{0}, {1}, {2}, {0, 2}, {1, 2}};
        int ns[] = {1, 1, 1, 2, 2};
        for (int c = 0; c < 5; c++) {
            bool mask[CG_MAX_DIMS];
            dims_mask(x->ndim, ns[c], lists[c], mask);
            cg_tensor *r = cg_k_sum(x, ns[c], lists[c], false);
            int64_t nout;
            float *e = naive_reduce(x, mask, SUM, 0, &nout);
            CG_ASSERT_TENSOR(r, e, 1e-5, 1e-6);
            free(e);
            cg_tensor *v = cg_k_var(x, ns[c], lists[c], 1, true);
            e = naive_reduce(x, mask, VAR, 1, &nout);
            CG_ASSERT_TENSOR(v, e, 1e-6, 1e-5);
            free(e);
            cg_release_all(2, r, v);
        }
    }
    /* one long reduction (several 4096 blocks) along each layout */
    for (int kind = 0; kind < 4; kind++) {
        cg_tensor *w = cg_test_randn_layout(&rng, CG_SHAPE(3, 9000), kind);
        for (int d = 0; d < 2; d++) {
            bool mask[2] = {d == 0, d == 1};
            cg_tensor *r = cg_k_sum(w, 1, &d, false);
            int64_t nout;
            float *e = naive_reduce(w, mask, SUM, 0, &nout);
            CG_ASSERT_TENSOR(r, e, 1e-4, 1e-6);
            free(e);
            cg_release(r);
        }
        cg_tensor *wt = cg_view_transpose(w, 0, 1); /* [9000, 3] reduce dim 0: columns */
        int d0 = 0;
        bool mask[2] = {true, false};
        cg_tensor *r = cg_k_sum(wt, 1, &d0, true);
        int64_t nout;
        float *e = naive_reduce(wt, mask, SUM, 0, &nout);
        CG_ASSERT_TENSOR(r, e, 1e-4, 1e-6);
        free(e);
        cg_release_all(3, r, wt, w);
    }
    cg_release_all(4, base, a, b4, p);
}
END_TEST

START_TEST(test_full_reductions)
{
    cg_rng rng = cg_rng_new(23);
    for (int kind = 0; kind < 4; kind++) {
        cg_tensor *a = cg_test_randn_layout(&rng, CG_SHAPE(70, 130), kind);
        float *v = cg_test_values(a);
        double s = 0;
        float m = -INFINITY;
        for (int i = 0; i < 70 * 130; i++) {
            s += v[i];
            m = v[i] > m ? v[i] : m;
        }
        cg_tensor *sa = cg_k_sum_all(a), *ma = cg_k_max_all(a), *s0 = cg_k_sum(a, 0, NULL, true);
        ck_assert_int_eq(sa->ndim, 0);
        ck_assert_int_eq(ma->ndim, 0);
        ck_assert_int_eq(s0->ndim, 2);
        ck_assert_float_eq_tol(cg_item(sa), (float)s, 1e-4);
        ck_assert_float_eq(cg_item(ma), m);
        /* the same order whichever entry point */
        ck_assert(cg_item(sa) == cg_item(s0));
        free(v);
        cg_release_all(4, a, sa, ma, s0);
    }
    /* double accumulation: a million 0.1f values */
    cg_tensor *f = cg_full(CG_SHAPE(1000, 1000), 0.1f);
    cg_tensor *fs = cg_k_sum_all(f), *fm = cg_k_mean(f, 0, NULL, false);
    ck_assert_float_eq(cg_item(fs), (float)(1e6 * (double)0.1f));
    ck_assert_float_eq(cg_item(fm), 0.1f);
    cg_release_all(3, f, fs, fm);
    /* NaN and inf in max_all */
    cg_tensor *x = cg_from_data(CG_SHAPE(4), (float[]){1, NAN, INFINITY, 2});
    cg_tensor *mx = cg_k_max_all(x);
    ck_assert(isnan(cg_item(mx)));
    cg_tensor *y = cg_from_data(CG_SHAPE(3), (float[]){-INFINITY, INFINITY, 2});
    cg_tensor *my = cg_k_max_all(y);
    ck_assert(isinf(cg_item(my)) && cg_item(my) > 0);
    cg_release_all(4, x, mx, y, my);
}
END_TEST

/* max and argmax, min and argmin (sm: the smallest), against a brute
 * force over every dim, layout and keepdim */
START_TEST(test_max_argmax)
{
    cg_rng rng = cg_rng_new(24);
    for (int k = 0; k < 8; k++) {
        const int kind = k % 4, sm = k / 4;
        cg_tensor *src = cg_test_randn_layout(&rng, CG_SHAPE(4, 5, 6), kind);
        /* round the storage to a few integers so ties are frequent (the
         * first index must win); the view keeps its layout */
        for (int64_t i = 0; i < (int64_t)(src->storage->nbytes / sizeof(float)); i++) {
            float x = roundf(1.5f * ((float *)src->storage->data)[i]);
            ((float *)src->storage->data)[i] = x < -2.0f ? -2.0f : (x > 2.0f ? 2.0f : x);
        }
        for (int dim = -3; dim < 3; dim++) {
            int d = dim < 0 ? dim + 3 : dim;
            for (int keep = 0; keep < 2; keep++) {
                cg_tensor *idx = NULL;
                cg_tensor *mv =
                    sm ? cg_k_min(src, dim, keep, &idx) : cg_k_max(src, dim, keep, &idx);
                cg_tensor *am = sm ? cg_k_argmin(src, dim, keep) : cg_k_argmax(src, dim, keep);
                ck_assert_msg(mv && idx && am, "%s", cg_last_error());
                ck_assert_int_eq(mv->ndim, keep ? 3 : 2);
                ck_assert(cg_same_shape(mv, idx) && cg_same_shape(mv, am));
                int64_t nout = 120 / src->shape[d];
                float *ev = malloc((size_t)nout * sizeof(float)),
                      *ei = malloc((size_t)nout * sizeof(float));
                int64_t o = 0, id[3];
                for (id[0] = 0; id[0] < 4; id[0]++)
                    for (id[1] = 0; id[1] < 5; id[1]++)
                        for (id[2] = 0; id[2] < 6; id[2]++) {
                            if (id[d] != 0)
                                continue;
                            int64_t j[3] = {id[0], id[1], id[2]};
                            float best = cg_get(src, j);
                            int64_t bi = 0;
                            for (j[d] = 1; j[d] < src->shape[d]; j[d]++)
                                if (sm ? cg_get(src, j) < best : cg_get(src, j) > best) {
                                    best = cg_get(src, j);
                                    bi = j[d];
                                }
                            ev[o] = best;
                            ei[o++] = (float)bi;
                        }
                ck_assert_int_eq(o, nout);
                CG_ASSERT_TENSOR(mv, ev, 0, 0);
                CG_ASSERT_TENSOR(idx, ei, 0, 0);
                CG_ASSERT_TENSOR(am, ei, 0, 0);
                free(ev);
                free(ei);
                cg_release_all(3, mv, idx, am);
            }
        }
        cg_release(src);
    }
    /* min: NaN is the minimum too (torch.min), the first NaN wins, on a
     * contiguous row and the columns path; -0 and 0 tie, the first wins */
    cg_tensor *m = cg_from_data(CG_SHAPE(2, 4), (float[]){1, NAN, -5, NAN, 0, -0.0f, 9, -0.0f});
    cg_tensor *mi = NULL, *mv = cg_k_min(m, 1, false, &mi);
    ck_assert(isnan(cg_data(mv)[0]) && cg_data(mv)[1] == 0 && !signbit(cg_data(mv)[1]));
    CG_ASSERT_TENSOR(mi, ((float[]){1, 0}), 0, 0);
    cg_tensor *mt = cg_view_transpose(m, 0, 1), *mti = cg_k_argmin(mt, 0, false);
    CG_ASSERT_TENSOR(mti, ((float[]){1, 0}), 0, 0);
    cg_release_all(5, m, mi, mv, mt, mti);
    /* broadcast (stride 0) input: every index ties, index 0 wins */
    cg_tensor *row = cg_randn(&rng, CG_SHAPE(1, 7));
    cg_tensor *ex = cg_view_expand(row, CG_SHAPE(9, 7));
    cg_tensor *ei = cg_k_argmax(ex, 0, false);
    float zeros[7] = {0};
    CG_ASSERT_TENSOR(ei, zeros, 0, 0);
    cg_release_all(3, row, ex, ei);
    /* NaN is the maximum; the first NaN wins */
    cg_tensor *n = cg_from_data(CG_SHAPE(2, 4), (float[]){1, NAN, 5, NAN, 3, 2, 9, 1});
    cg_tensor *ni = NULL;
    cg_tensor *nv = cg_k_max(n, 1, false, &ni);
    CG_ASSERT_TENSOR(nv, ((float[]){NAN, 9}), 0, 0);
    CG_ASSERT_TENSOR(ni, ((float[]){1, 2}), 0, 0);
    cg_tensor *nt = cg_view_transpose(n, 0, 1); /* [4, 2], reduce dim 0: columns path */
    cg_tensor *nti = NULL;
    cg_tensor *ntv = cg_k_max(nt, 0, true, &nti);
    CG_ASSERT_TENSOR(ntv, ((float[]){NAN, 9}), 0, 0);
    CG_ASSERT_TENSOR(nti, ((float[]){1, 2}), 0, 0);
    /* two NaNs along a reduced dim of stride 2: the first still wins, on
     * the columns path ([4, 2] over dim 0) and a strided row (its column 0) */
    cg_tensor *n2 = cg_from_data(CG_SHAPE(4, 2), (float[]){1, 2, NAN, 3, 5, NAN, NAN, NAN});
    cg_tensor *n2c = cg_view_narrow(n2, 1, 0, 1);
    cg_tensor *n2i = cg_k_argmax(n2, 0, false), *n2ci = cg_k_argmax(n2c, 0, false);
    CG_ASSERT_TENSOR(n2i, ((float[]){1, 2}), 0, 0);
    CG_ASSERT_TENSOR(n2ci, ((float[]){1}), 0, 0);
    cg_release_all(4, n2, n2c, n2i, n2ci);
    /* NULL indices pointer is allowed */
    cg_tensor *nv2 = cg_k_max(n, -1, false, NULL);
    ck_assert_ptr_nonnull(nv2);
    cg_release_all(7, n, ni, nv, nt, nti, ntv, nv2);
    /* a scalar reduces over dim 0 to itself */
    cg_tensor *s = cg_scalar(3.5f);
    cg_tensor *si = NULL;
    cg_tensor *sv = cg_k_max(s, 0, false, &si);
    ck_assert_int_eq(sv->ndim, 0);
    ck_assert_float_eq(cg_item(sv), 3.5f);
    ck_assert_float_eq(cg_item(si), 0.0f);
    cg_release_all(3, s, si, sv);
}
END_TEST

/* max and argmax (and min and argmin, of the values negated) over
 * contiguous rows (16 lanes at a time, then the first
 * NaN or the first element equal to the largest) against the same values
 * in a strided row (every element in turn): the same index and bits, for
 * rows around the lanes' width and long ones, with the largest repeated,
 * a NaN after it, -0 before 0 as the largest, and every value -inf. */
START_TEST(test_max_contiguous_rows)
{
    cg_rng rng = cg_rng_new(25);
    const int64_t lens[] = {1, 15, 16, 17, 33, 100, 4005};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
        for (int c = 0; c < 5; c++) {
            const int64_t n = lens[li];
            cg_tensor *row = cg_randn(&rng, CG_SHAPE(1, n));
            float *x = cg_data(row);
            if (c == 1 && n > 3) /* the largest twice */
                x[n / 3] = x[n - 1] = 9.0f;
            if (c == 2 && n > 3) /* a NaN after the largest */
                x[1] = 9.0f, x[n - 2] = NAN;
            if (c == 3) { /* -0 before 0, both the largest */
                for (int64_t i = 0; i < n; i++)
                    x[i] = -1.0f - (float)i;
                x[n / 2] = -0.0f, x[n - 1] = 0.0f;
            }
            if (c == 4)
                for (int64_t i = 0; i < n; i++)
                    x[i] = -INFINITY;
            /* the same values every other float: [1, n] with stride 2 */
            cg_tensor *pairs = cg_zeros(CG_SHAPE(n, 2));
            for (int64_t i = 0; i < n; i++)
                cg_data(pairs)[2 * i] = x[i];
            cg_tensor *col = cg_view_narrow(pairs, 1, 0, 1),
                      *strided = cg_view_transpose(col, 0, 1);
            ck_assert_int_eq(strided->strides[1], 2);
            /* the max, then the min of the negated values: the same index */
            for (int sm = 0; sm < 2; sm++) {
                if (sm)
                    for (int64_t i = 0; i < n; i++)
                        cg_data(pairs)[2 * i] = x[i] = -x[i];
                cg_tensor *i1 = NULL, *i2 = NULL;
                cg_tensor *v1 = sm ? cg_k_min(row, 1, false, &i1) : cg_k_max(row, 1, false, &i1);
                cg_tensor *v2 =
                    sm ? cg_k_min(strided, 1, false, &i2) : cg_k_max(strided, 1, false, &i2);
                ck_assert(v1 && v2 && i1 && i2);
                ck_assert_msg(cg_data_i64(i1)[0] == cg_data_i64(i2)[0],
                              "n %lld case %d min %d: %lld, %lld", (long long)n, c, sm,
                              (long long)cg_data_i64(i1)[0], (long long)cg_data_i64(i2)[0]);
                ck_assert(!memcmp(cg_data(v1), cg_data(v2), sizeof(float)));
                if (c == 2 && n > 3)
                    ck_assert_int_eq(cg_data_i64(i1)[0], n - 2);
                if (c == 3)
                    ck_assert_int_eq(cg_data_i64(i1)[0], n / 2);
                cg_release_all(4, i1, i2, v1, v2);
            }
            cg_release_all(4, row, pairs, col, strided);
        }
}
END_TEST

START_TEST(test_sum_to_shape)
{
    cg_rng rng = cg_rng_new(25);
    const int64_t targets[][4] = {{3, 1, 5},    {5},          {0},    {1, 4, 1},
                                  {2, 3, 4, 5}, {2, 1, 1, 1}, {4, 5}, {1, 1, 1, 1}};
    const int tnd[] = {3, 1, 0, 3, 4, 4, 2, 4};
    for (int kind = 0; kind < 4; kind++) {
        cg_tensor *a = cg_test_randn_layout(&rng, CG_SHAPE(2, 3, 4, 5), kind);
        for (int t = 0; t < 8; t++) {
            int nd = tnd[t];
            cg_tensor *r = cg_k_sum_to_shape(a, nd, targets[t]);
            ck_assert_msg(r != NULL, "%s", cg_last_error());
            ck_assert_int_eq(r->ndim, nd);
            for (int i = 0; i < nd; i++)
                ck_assert_int_eq(r->shape[i], targets[t][i]);
            /* naive: each element of a goes to its broadcast target index */
            int64_t n = cg_numel_shape(nd, targets[t]);
            double *acc = calloc((size_t)n, sizeof(double));
            int64_t idx[4] = {0};
            for (int64_t k = 0; k < 120; k++, next_index(4, a->shape, idx)) {
                int64_t o = 0;
                for (int i = 0; i < nd; i++) {
                    int64_t ii = targets[t][i] == 1 ? 0 : idx[i + 4 - nd];
                    o = o * targets[t][i] + ii;
                }
                acc[o] += cg_get(a, idx);
            }
            float *e = malloc((size_t)n * sizeof(float));
            for (int64_t o = 0; o < n; o++)
                e[o] = (float)acc[o];
            CG_ASSERT_TENSOR(r, e, 1e-6, 1e-6);
            free(acc);
            free(e);
            /* a fresh tensor, never a view of the input */
            ck_assert_ptr_ne(r->storage, a->storage);
            cg_release(r);
        }
        cg_release(a);
    }
    cg_tensor *a = cg_ones(CG_SHAPE(2, 3, 4));
    CG_ASSERT_FAILS(cg_k_sum_to_shape(a, CG_SHAPE(2, 4)), "[2, 4]");
    ck_assert(strstr(cg_last_error(), "[2, 3, 4]") != NULL);
    CG_ASSERT_FAILS(cg_k_sum_to_shape(a, CG_SHAPE(1, 2, 3, 4)), "sum_to_shape");
    /* a size-1 dim of a does not sum to a larger one of the target */
    cg_tensor *a1 = cg_ones(CG_SHAPE(2, 1, 4));
    CG_ASSERT_FAILS(
        cg_k_sum_to_shape(a1, CG_SHAPE(2, 3, 4)),
        "sum_to_shape: shape [2, 3, 4] does not broadcast to [2, 1, 4] (dim 1: 3 vs 1)");
    cg_release(a1);
    cg_clear_error();
    ck_assert_ptr_null(cg_k_sum_to_shape(NULL, CG_SHAPE(1)));
    ck_assert_str_eq(cg_last_error(), "cg_k_sum_to_shape: input is NULL");
    cg_release(a);
}
END_TEST

START_TEST(test_empty_and_scalar)
{
    cg_tensor *z = cg_zeros(CG_SHAPE(0, 3));
    int d0 = 0, d1 = 1;
    cg_tensor *s = cg_k_sum(z, 1, &d0, false), *m = cg_k_mean(z, 1, &d0, false);
    cg_tensor *v = cg_k_var(z, 1, &d0, 1, false), *sa = cg_k_sum_all(z);
    CG_ASSERT_TENSOR(s, ((float[]){0, 0, 0}), 0, 0);
    CG_ASSERT_TENSOR(m, ((float[]){NAN, NAN, NAN}), 0, 0);
    CG_ASSERT_TENSOR(v, ((float[]){NAN, NAN, NAN}), 0, 0);
    ck_assert_float_eq(cg_item(sa), 0.0f);
    cg_tensor *ma = cg_k_mean(z, 0, NULL, false);
    ck_assert(isnan(cg_item(ma)));
    /* reducing the non-empty dim of an empty tensor gives an empty result */
    cg_tensor *s1 = cg_k_sum(z, 1, &d1, false), *mx1 = cg_k_max(z, 1, false, NULL);
    ck_assert_int_eq(s1->ndim, 1);
    ck_assert_int_eq(s1->shape[0], 0);
    ck_assert_int_eq(mx1->shape[0], 0);
    CG_ASSERT_FAILS(cg_k_max(z, 0, false, NULL), "size 0");
    CG_ASSERT_FAILS(cg_k_max_all(z), "empty");
    cg_release_all(7, z, s, m, v, sa, ma, s1);
    cg_release(mx1);
    /* var of one element: 0 biased, NaN unbiased (as PyTorch) */
    cg_tensor *one = cg_full(CG_SHAPE(1, 4), 2.0f);
    cg_tensor *v0 = cg_k_var(one, 1, &d0, 0, false), *v1 = cg_k_var(one, 1, &d0, 1, false);
    CG_ASSERT_TENSOR(v0, ((float[]){0, 0, 0, 0}), 0, 0);
    CG_ASSERT_TENSOR(v1, ((float[]){NAN, NAN, NAN, NAN}), 0, 0);
    cg_release_all(3, one, v0, v1);
    /* scalars: dims 0 / -1 allowed, result stays 0-d */
    cg_tensor *sc = cg_scalar(4.0f);
    int dm1 = -1;
    cg_tensor *r1 = cg_k_sum(sc, 1, &d0, true), *r2 = cg_k_mean(sc, 1, &dm1, false);
    cg_tensor *r3 = cg_k_sum(sc, 0, NULL, false);
    ck_assert_int_eq(r1->ndim, 0);
    ck_assert_float_eq(cg_item(r1), 4.0f);
    ck_assert_float_eq(cg_item(r2), 4.0f);
    ck_assert_float_eq(cg_item(r3), 4.0f);
    CG_ASSERT_FAILS(cg_k_sum(sc, 1, &d1, false), "out of range");
    cg_release_all(4, sc, r1, r2, r3);
    /* size-1 dims: reducing them changes nothing but the shape */
    cg_rng rng = cg_rng_new(26);
    cg_tensor *a = cg_test_randn_layout(&rng, CG_SHAPE(1, 5, 1), 2);
    int ds[] = {0, 2};
    cg_tensor *r = cg_k_sum(a, 2, ds, false);
    float *av = cg_test_values(a);
    CG_ASSERT_TENSOR(r, av, 0, 0);
    free(av);
    cg_release_all(2, a, r);
}
END_TEST

START_TEST(test_errors)
{
    cg_tensor *a = cg_ones(CG_SHAPE(2, 3, 4));
    int dup[] = {1, -2}, oor[] = {3}, neg[] = {-4};
    CG_ASSERT_FAILS(cg_k_sum(a, 2, dup, false), "more than once");
    CG_ASSERT_FAILS(cg_k_mean(a, 1, oor, false), "dim 3 out of range");
    ck_assert(strstr(cg_last_error(), "[2, 3, 4]") != NULL);
    CG_ASSERT_FAILS(cg_k_var(a, 1, neg, 1, false), "dim -4");
    CG_ASSERT_FAILS(cg_k_max(a, 3, false, NULL), "out of range");
    CG_ASSERT_FAILS(cg_k_argmax(a, -4, false), "argmax: dim -4");
    /* argmax's messages name argmax, not the max it is made with */
    cg_tensor *e = cg_zeros(CG_SHAPE(0, 3));
    CG_ASSERT_FAILS(cg_k_argmax(e, 0, false),
                    "argmax: cannot take the argmax over dim 0 of size 0 (shape [0, 3])");
    CG_ASSERT_FAILS(cg_k_max(e, 0, false, NULL), "max: cannot take the max over dim 0 of size 0");
    cg_release(e);
    cg_clear_error();
    ck_assert_ptr_null(cg_k_argmax(NULL, 0, false));
    ck_assert_str_eq(cg_last_error(), "cg_k_argmax: input is NULL");
    CG_ASSERT_FAILS(cg_k_var(a, 0, NULL, -1, false), "correction");
    cg_tensor *idx = (cg_tensor *)0x1;
    ck_assert_ptr_null(cg_k_max(a, 5, false, &idx));
    ck_assert_ptr_null(idx);
    cg_clear_error();
    ck_assert_ptr_null(cg_k_sum(NULL, 0, NULL, false));
    ck_assert_ptr_null(cg_k_max(NULL, 0, false, NULL));
    ck_assert_ptr_null(cg_k_sum_all(NULL));
    ck_assert_ptr_null(cg_k_max_all(NULL));
    ck_assert_str_eq(cg_last_error(), "sum: input is NULL"); /* the first one's; never empty */
    cg_release(a);
}
END_TEST

/* ------------------------------------------------ determinism */
static void assert_bits_equal(const cg_tensor *x, const cg_tensor *y)
{
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(y);
    ck_assert(cg_same_shape(x, y));
    float *a = cg_test_values(x), *b = cg_test_values(y);
    ck_assert(memcmp(a, b, (size_t)cg_numel(x) * sizeof(float)) == 0);
    free(a);
    free(b);
}

#define N_RUNS 14
static void run_all(const cg_tensor *a, cg_tensor **out)
{
    int d0 = 0, d1 = 1, both[] = {0, 1};
    cg_tensor *idx = NULL, *imin = NULL;
    out[0] = cg_k_sum(a, 1, &d0, false);
    out[1] = cg_k_sum(a, 1, &d1, false);
    out[2] = cg_k_sum(a, 2, both, true);
    out[3] = cg_k_var(a, 1, &d0, 1, false);
    out[4] = cg_k_mean(a, 1, &d1, true);
    out[5] = cg_k_max(a, 0, false, &idx);
    out[6] = idx;
    out[7] = cg_k_max_all(a);
    out[8] = cg_k_sum_all(a);
    out[9] = cg_k_sum_to_shape(a, CG_SHAPE(1, a->shape[1]));
    out[10] = cg_k_min(a, 1, true, &imin);
    out[11] = imin;
    out[12] = cg_k_logsumexp(a, 1, &d0, false);
    out[13] = cg_k_logsumexp(a, 2, both, true);
}

START_TEST(test_threads_identical)
{
    cg_rng rng = cg_rng_new(27);
    const int64_t shapes[][2] = {{600, 700}, {3, 100000}, {100000, 3}};
    for (int s = 0; s < 3; s++) {
        for (int kind = 0; kind < 4; kind++) {
            cg_tensor *a = cg_test_randn_layout(&rng, 2, shapes[s], kind);
            cg_tensor *r1[N_RUNS], *r2[N_RUNS];
            cg_set_num_threads(1);
            run_all(a, r1);
            cg_set_num_threads(2);
            run_all(a, r2);
            for (int i = 0; i < N_RUNS; i++) {
                assert_bits_equal(r1[i], r2[i]);
                cg_release_all(2, r1[i], r2[i]);
            }
            /* any layout sums in the same order as its contiguous copy */
            if (kind != 3) {
                cg_tensor *c = cg_k_clone(a);
                cg_tensor *rc[N_RUNS];
                run_all(c, rc);
                run_all(a, r1);
                for (int i = 0; i < N_RUNS; i++) {
                    assert_bits_equal(r1[i], rc[i]);
                    cg_release_all(2, r1[i], rc[i]);
                }
                cg_release(c);
            }
            cg_release(a);
        }
    }
}
END_TEST

static Suite *reduce_suite(void)
{
    Suite *s = suite_create("reduce");
    struct {
        const char *name;
        const TTest *fn;
    } cases[] = {
        {"sum_mean_var", test_sum_mean_var},
        {"sliced_wide", test_sliced_and_wide},
        {"full", test_full_reductions},
        {"max_argmax", test_max_argmax},
        {"max_contiguous_rows", test_max_contiguous_rows},
        {"sum_to_shape", test_sum_to_shape},
        {"empty_scalar", test_empty_and_scalar},
        {"errors", test_errors},
        {"threads", test_threads_identical},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_add_test(tc, cases[i].fn);
        tcase_set_timeout(tc, 120);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void)
{
    Suite *s[] = {reduce_suite()};
    return cg_test_run(s, 1);
}
