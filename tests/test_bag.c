/* F.embedding_bag and nn.EmbeddingBag, F.local_response_norm and
 * nn.LocalResponseNorm, F.channel_shuffle and nn.ChannelShuffle:
 *   - values and gradients against references computed here in double
 *     (every mode, 1-d ids with offsets (empty bags, include_last_offset),
 *     2-d ids, padding_idx, per_sample_weights);
 *   - gradchecks of the weight (contiguous and a transposed view) and of
 *     per_sample_weights, with the reads masks of CG_OP_TABLE checked;
 *   - refusals in one line, asserted by message;
 *   - the modules: names, padding row, save and load.
 * PyTorch's values and gradients: tests/interop/param.py + check_param.c
 * (torch_param). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "nn/layers.h"
#include "nn/spatial.h"
#include "tests/testutil.h"

/* ------------------------------------------------------ embedding_bag */
typedef struct {
    const char *name;
    cg_bag_mode mode;
    int n; /* ids (1-d), or B * N (2-d: B = n_off) */
    int64_t ids[12];
    int n_off; /* offsets (1-d); 0: 2-d ids [B, N] with B = rows */
    int64_t off[6];
    int rows; /* 2-d: B */
    bool last, psw, has_pad;
    int64_t pad;
} bag_case;

static const bag_case BAGS[] = {
    {"sum", CG_BAG_SUM, 7, {0, 2, 4, 5, 4, 3, 2}, 3, {0, 2, 2}, 0, false, false, false, 0},
    {"mean", CG_BAG_MEAN, 7, {0, 2, 4, 5, 4, 3, 2}, 4, {0, 3, 3, 5}, 0, false, false, false, 0},
    {"max", CG_BAG_MAX, 7, {0, 2, 4, 5, 4, 3, 2}, 3, {0, 1, 4}, 0, false, false, false, 0},
    {"sum psw last",
     CG_BAG_SUM,
     8,
     {1, 2, 4, 5, 4, 3, 2, 0},
     4,
     {0, 2, 5, 6},
     0,
     true,
     true,
     false,
     0},
    {"mean pad",
     CG_BAG_MEAN,
     8,
     {1, 2, 1, 5, 1, 1, 2, 0},
     4,
     {0, 2, 4, 6},
     0,
     false,
     false,
     true,
     1},
    {"max pad neg",
     CG_BAG_MAX,
     8,
     {1, 2, 1, 5, 1, 1, 2, 0},
     4,
     {0, 2, 4, 6},
     0,
     false,
     false,
     true,
     -5},
    {"sum 2d pad psw",
     CG_BAG_SUM,
     12,
     {0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 3, 3},
     0,
     {0},
     4,
     false,
     true,
     true,
     3},
    {"max 2d",
     CG_BAG_MAX,
     12,
     {0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0},
     0,
     {0},
     3,
     false,
     false,
     false,
     0},
};
#define N_BAGS (int)(sizeof BAGS / sizeof BAGS[0])
enum { V = 6, D = 5 };

static cg_bag_opts opts_of(const bag_case *c, cg_tensor *psw)
{
    return (cg_bag_opts){.mode = c->mode,
                         .offsets = c->n_off ? cg_test_ids(c->n_off, c->off) : NULL,
                         .include_last_offset = c->last,
                         .per_sample_weights = psw,
                         .has_padding_idx = c->has_pad,
                         .padding_idx = c->pad};
}

static cg_tensor *ids_of(const bag_case *c)
{
    return c->n_off ? cg_test_ids(c->n, c->ids)
                    : cg_test_ids_nd(CG_SHAPE(c->rows, c->n / c->rows), c->ids);
}

/* The bag bounds of case c: bag b is [lo[b], lo[b + 1]); returns B */
static int bounds_of(const bag_case *c, int64_t *lo)
{
    if (!c->n_off) {
        for (int b = 0; b <= c->rows; b++)
            lo[b] = b * (c->n / c->rows);
        return c->rows;
    }
    const int B = c->last ? c->n_off - 1 : c->n_off;
    for (int b = 0; b < B; b++)
        lo[b] = c->off[b];
    lo[B] = c->last ? c->off[c->n_off - 1] : c->n;
    return B;
}

typedef struct {
    const bag_case *c;
} bag_ctx;

static cg_tensor *bag_fn(void *ctx, cg_tensor *const *in)
{
    const bag_case *c = ((const bag_ctx *)ctx)->c;
    cg_bag_opts o = opts_of(c, c->psw ? in[1] : NULL);
    return cg_embedding_bag(in[0], ids_of(c), &o);
}

/* y and the gradients of sum(y * u) against double */
START_TEST(test_bag_values)
{
    cg_rng r = cg_rng_new(3);
    for (int k = 0; k < N_BAGS; k++) {
        const bag_case *c = &BAGS[k];
        cg_tensor *W = cg_requires_grad(cg_randn(&r, CG_SHAPE(V, D)), true);
        cg_tensor *psw = NULL;
        if (c->psw)
            psw = cg_requires_grad(c->n_off ? cg_randn(&r, CG_SHAPE(c->n))
                                            : cg_randn(&r, CG_SHAPE(c->rows, c->n / c->rows)),
                                   true);
        cg_bag_opts o = opts_of(c, psw);
        cg_tensor *y = cg_embedding_bag(W, ids_of(c), &o);
        ck_assert_msg(y, "%s: %s", c->name, cg_last_error());
        int64_t lo[8];
        const int B = bounds_of(c, lo);
        ck_assert_int_eq(y->shape[0], B);
        ck_assert_int_eq(y->shape[1], D);
        cg_tensor *u = cg_randn(&r, CG_SHAPE(B, D)), *yu = cg_mul(y, u), *l = cg_sum_all(yu);
        ck_assert(cg_backward(l, NULL, false));
        double *w = cg_test_doubles(W), *uv = cg_test_doubles(u);
        double *pv = psw ? cg_test_doubles(psw) : NULL;
        float *yv = cg_test_values(y), *gw = cg_test_values(W->grad);
        float *gp = psw ? cg_test_values(psw->grad) : NULL;
        double want_gw[V * D] = {0}, want_gp[12] = {0};
        const int64_t pad = !c->has_pad ? -1 : c->pad < 0 ? c->pad + V : c->pad;
        for (int b = 0; b < B; b++) {
            int cnt = 0;
            for (int64_t i = lo[b]; i < lo[b + 1]; i++)
                cnt += c->ids[i] != pad;
            for (int d = 0; d < D; d++) {
                double want = 0;
                int64_t arg = -1;
                for (int64_t i = lo[b]; i < lo[b + 1]; i++) {
                    if (c->ids[i] == pad)
                        continue;
                    const double x = w[c->ids[i] * D + d];
                    if (c->mode == CG_BAG_MAX) {
                        if (arg < 0 || x > want)
                            want = x, arg = c->ids[i];
                    } else {
                        want += pv ? pv[i] * x : x;
                        want_gw[c->ids[i] * D + d] +=
                            uv[b * D + d] * (pv                       ? pv[i]
                                             : c->mode == CG_BAG_MEAN ? 1.0 / cnt
                                                                      : 1);
                        if (pv)
                            want_gp[i] += uv[b * D + d] * x;
                    }
                }
                if (c->mode == CG_BAG_MEAN && cnt)
                    want /= cnt;
                if (arg >= 0)
                    want_gw[arg * D + d] += uv[b * D + d];
                ck_assert_msg(fabs(yv[b * D + d] - want) <= 1e-6 * (1 + fabs(want)),
                              "%s y[%d, %d] %g, want %g", c->name, b, d, (double)yv[b * D + d],
                              want);
            }
        }
        for (int j = 0; j < V * D; j++)
            ck_assert_msg(fabs(gw[j] - want_gw[j]) <= 1e-6 * (1 + fabs(want_gw[j])),
                          "%s dW[%d] %g, want %g", c->name, j, (double)gw[j], want_gw[j]);
        for (int i = 0; gp && i < c->n; i++)
            ck_assert_msg(fabs(gp[i] - want_gp[i]) <= 1e-5 * (1 + fabs(want_gp[i])),
                          "%s dpsw[%d] %g, want %g", c->name, i, (double)gp[i], want_gp[i]);
        free(w), free(uv), free(pv), free(yv), free(gw), free(gp);
        cg_release_all(6, W, psw, y, u, yu, l);
    }
}
END_TEST

/* every case, the weight contiguous and a transposed view, per_sample_weights
 * too; and what the nodes keep (the cross reads of sum with weights) */
START_TEST(test_bag_gradcheck)
{
    cg_rng r = cg_rng_new(5);
    for (int k = 0; k < N_BAGS; k++) {
        const bag_case *c = &BAGS[k];
        for (int layout = 0; layout < 2; layout++) {
            cg_tensor *W = cg_requires_grad(cg_test_randn_layout(&r, CG_SHAPE(V, D), layout), true);
            cg_tensor *psw = NULL;
            if (c->psw)
                psw = cg_requires_grad(c->n_off ? cg_randn(&r, CG_SHAPE(c->n))
                                                : cg_randn(&r, CG_SHAPE(c->rows, c->n / c->rows)),
                                       true);
            if (c->mode == CG_BAG_MAX) { /* distinct values: a unique maximum */
                float *v = cg_test_values(W);
                for (int j = 0; j < V * D; j++)
                    v[j] = 0.1f * (float)((j * 7) % (V * D)) - 1.0f;
                cg_tensor *t = cg_from_data(CG_SHAPE(V, D), v);
                ck_assert(cg_copy_(W, t));
                cg_release(t);
                free(v);
            }
            bag_ctx ctx = {c};
            cg_tensor *in[2] = {W, psw};
            cg_gradcheck_report rep;
            ck_assert_msg(cg_gradcheck(bag_fn, &ctx, psw ? 2 : 1, in, NULL, &rep),
                          "%s layout %d: %s", c->name, layout, rep.message);
            cg_test_check_unread(bag_fn, &ctx, psw ? 2 : 1, in, c->name);
            cg_release_all(2, W, psw);
        }
    }
}
END_TEST

START_TEST(test_bag_refusals)
{
    cg_rng r = cg_rng_new(6);
    cg_tensor *W = cg_randn(&r, CG_SHAPE(V, D)), *ids = cg_test_ids(4, (int64_t[]){0, 1, 2, 3});
    cg_tensor *ids2 = cg_test_ids_nd(CG_SHAPE(2, 2), (int64_t[]){0, 1, 2, 3});
    cg_bag_opts o = {.mode = CG_BAG_SUM, .offsets = cg_test_ids(2, (int64_t[]){0, 2})};
    cg_tensor *y = cg_embedding_bag(W, ids, &o);
    ck_assert_msg(y, "%s", cg_last_error());
    cg_release(y);
    cg_bag_opts bad = o;
    bad.mode = (cg_bag_mode)7;
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, ids, &bad), "mode 7, expected CG_BAG_MEAN");
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, ids2, &o), "offsets and include_last_offset");
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, ids, NULL), "1-d ids need offsets");
    bad = o;
    bad.offsets = cg_test_ids(2, (int64_t[]){1, 2});
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, ids, &bad), "offsets[0] must be 0");
    bad.offsets = cg_test_ids(3, (int64_t[]){0, 3, 2});
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, ids, &bad), "offsets must not decrease");
    bad.offsets = cg_test_ids(2, (int64_t[]){0, 5});
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, ids, &bad), "past the end of ids");
    bad.offsets = cg_test_ids(0, NULL);
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, ids, &bad), "at least one entry");
    bad.offsets = cg_test_ids_nd(CG_SHAPE(1, 2), (int64_t[]){0, 2});
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, ids, &bad), "offsets must be 1-d");
    bad = o;
    bad.offsets = ids2;
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, ids, &bad), "offsets must be 1-d");
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, cg_test_ids(4, (int64_t[]){0, 6, 2, 3}), &o),
                           "id 6 at position 1 is out of range [0, 6)");
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, cg_test_ids(4, (int64_t[]){0, -1, 2, 3}), &o),
                           "id -1 at position 1");
    cg_tensor *i32 = cg_to(ids, CG_I32), *f = cg_randn(&r, CG_SHAPE(4));
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, i32, &o),
                           "embedding_bag: offsets are int64 and ids int32: give both one dtype");
    bad = o;
    bad.offsets = i32;
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, ids, &bad), "offsets are int32 and ids int64");
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, f, &o), "'ids' is float32, expected int64 or int32");
    /* int32 ids and offsets: the bits of int64's (PyTorch takes both) */
    cg_bag_opts o32 = o;
    o32.offsets = cg_to(o.offsets, CG_I32);
    cg_tensor *y64 = cg_embedding_bag(W, ids, &o), *y32 = cg_embedding_bag(W, i32, &o32);
    ck_assert_msg(y64 && y32, "%s", cg_last_error());
    ck_assert(cg_same_shape(y64, y32) &&
              memcmp(cg_data(y64), cg_data(y32), (size_t)cg_numel(y64) * sizeof(float)) == 0);
    cg_release_all(3, o32.offsets, y64, y32);
    bad = o;
    bad.mode = CG_BAG_MEAN;
    bad.per_sample_weights = f;
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, ids, &bad),
                           "per_sample_weights is only supported for mode sum (got mode mean)");
    bad.mode = CG_BAG_MAX;
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, ids, &bad), "(got mode max)");
    bad.mode = CG_BAG_SUM;
    bad.per_sample_weights = cg_randn(&r, CG_SHAPE(3));
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, ids, &bad), "must have ids' shape [4]");
    cg_release(bad.per_sample_weights);
    bad.per_sample_weights = ids;
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, ids, &bad), "'per_sample_weights' is int64");
    bad = o;
    bad.has_padding_idx = true;
    bad.padding_idx = 6;
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, ids, &bad), "padding_idx 6 must be within [-6, 6)");
    bad.padding_idx = -7;
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, ids, &bad), "padding_idx -7");
    cg_tensor *w3 = cg_randn(&r, CG_SHAPE(2, 3, 4)), *x3 = cg_test_ids_nd(CG_SHAPE(1, 1, 1), NULL);
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(w3, ids, &o), "weight must be [V, D]");
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, x3, NULL), "ids must be 1-d (with offsets) or 2-d");
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(NULL, ids, &o), "cg_embedding_bag");
    cg_bag_opts two = {.include_last_offset = true};
    CG_ASSERT_REFUSED_LINE(cg_embedding_bag(W, ids2, &two), "for 1-d ids");
    CG_ASSERT_REFUSED_LINE(cg_embed_bag_new(0, 3, NULL, NULL), "num and dim must be positive");
    CG_ASSERT_REFUSED_LINE(cg_embed_bag_new(4, 3, &o, NULL), "are the forward's");
    cg_bag_opts p = {.has_padding_idx = true, .padding_idx = 4};
    CG_ASSERT_REFUSED_LINE(cg_embed_bag_new(4, 3, &p, NULL), "padding_idx 4 must be within");
    cg_release_all(4, W, i32, f, w3);
}
END_TEST

/* empty bags give zeros in every mode; a bag of padding only too */
START_TEST(test_bag_empty)
{
    cg_rng r = cg_rng_new(8);
    cg_tensor *W = cg_randn(&r, CG_SHAPE(V, D));
    cg_tensor *ids = cg_test_ids(3, (int64_t[]){2, 2, 4});
    for (int mode = 0; mode < 3; mode++) {
        cg_bag_opts o = {.mode = (cg_bag_mode)mode,
                         .offsets = cg_test_ids(4, (int64_t[]){0, 0, 2, 3}),
                         .has_padding_idx = true,
                         .padding_idx = 2};
        cg_tensor *y = cg_embedding_bag(W, ids, &o);
        ck_assert_msg(y, "%s", cg_last_error());
        float *v = cg_test_values(y);
        for (int j = 0; j < 4 * D; j++) /* bags 0 (empty), 1 (padding only), 3 (empty) */
            ck_assert_msg(j / D == 2 || v[j] == 0.0f, "mode %d: y[%d] %g", mode, j, (double)v[j]);
        for (int d = 0; d < D; d++)
            ck_assert(v[2 * D + d] == cg_data(W)[4 * D + d]);
        free(v);
        cg_release(y);
    }
    cg_release(W);
}
END_TEST

/* max keeps the first maximum of a column (PyTorch's CPU kernel): rows 1
 * and 3 tie in column 0 (bag 0), rows 0 and 2 in both (bag 1); the
 * gradient goes to the row seen first */
START_TEST(test_bag_max_ties)
{
    cg_tensor *W = cg_requires_grad(
        cg_from_data(CG_SHAPE(4, 2), (const float[]){0, 0, 2, 1, 0, 0, 2, 3}), true);
    cg_bag_opts o = {.mode = CG_BAG_MAX, .offsets = cg_test_ids(2, (int64_t[]){0, 2})};
    cg_tensor *y = cg_embedding_bag(W, cg_test_ids(4, (int64_t[]){1, 3, 0, 2}), &o);
    ck_assert_msg(y, "%s", cg_last_error());
    CG_ASSERT_TENSOR(y, ((const float[]){2, 3, 0, 0}), 0, 0);
    cg_tensor *s = cg_sum_all(y);
    ck_assert(cg_backward(s, NULL, false));
    CG_ASSERT_TENSOR(W->grad, ((const float[]){1, 1, 1, 0, 0, 0, 0, 1}), 0, 0);
    cg_release_all(3, W, y, s);
}
END_TEST

START_TEST(test_bag_module)
{
    cg_rng r = cg_rng_new(9);
    cg_bag_opts o = {.mode = CG_BAG_SUM, .has_padding_idx = true, .padding_idx = -2};
    cg_embed_bag *b = cg_embed_bag_new(7, 4, &o, &r);
    ck_assert_msg(b, "%s", cg_last_error());
    ck_assert_str_eq(b->base.type, "EmbeddingBag");
    ck_assert_int_eq(b->base.n_params, 1);
    ck_assert_str_eq(b->base.params[0].name, "weight");
    for (int d = 0; d < 4; d++)
        ck_assert(cg_data(b->weight)[5 * 4 + d] == 0.0f);
    double ss = 0; /* N(0, 1): not the 0.02 of CG_INIT_STD */
    for (int j = 0; j < 28; j++)
        ss += (double)cg_data(b->weight)[j] * cg_data(b->weight)[j];
    ck_assert_msg(ss / 24 > 0.3 && ss / 24 < 3, "variance %g", ss / 24);
    cg_tensor *ids = cg_test_ids(5, (int64_t[]){1, 5, 0, 6, 5});
    cg_tensor *off = cg_test_ids(2, (int64_t[]){0, 3});
    cg_tensor *psw = cg_requires_grad(cg_randn(&r, CG_SHAPE(5)), true);
    cg_tensor *y = cg_embed_bag_forward(b, ids, off, psw);
    o.offsets = off;
    o.per_sample_weights = psw;
    cg_tensor *want = cg_embedding_bag(b->weight, ids, &o);
    ck_assert_msg(y && want, "%s", cg_last_error());
    CG_ASSERT_TENSOR(y, cg_data(want), 0, 0);
    cg_tensor *s = cg_sum_all(y);
    ck_assert(cg_backward(s, NULL, false));
    for (int d = 0; d < 4; d++) /* the padding row gets no gradient */
        ck_assert(cg_data(b->weight->grad)[5 * 4 + d] == 0.0f);
    ck_assert(cg_data(psw->grad)[1] == 0.0f && cg_data(psw->grad)[0] != 0.0f);
    char dir[256], path[300];
    cg_test_mkdtemp(dir, sizeof dir, "bag");
    snprintf(path, sizeof path, "%s/bag.safetensors", dir);
    ck_assert_msg(cg_module_save(&b->base, path, 0, NULL), "%s", cg_last_error());
    cg_embed_bag *c = cg_embed_bag_new(7, 4, NULL, NULL);
    ck_assert(cg_module_load_file(&c->base, path));
    CG_ASSERT_TENSOR(c->weight, cg_data(b->weight), 0, 0);
    cg_test_rm_tree(dir);
    cg_release_all(4, psw, y, want, s);
    cg_module_free(&b->base);
    cg_module_free(&c->base);
}
END_TEST

/* ------------------------------------------- local response norm */
/* x / (k + alpha / size * sum of x^2 over the window)^beta in double */
static double lrn_ref(const double *x, const int64_t *shape, int nd, int64_t at, int64_t size,
                      double alpha, double beta, double k)
{
    int64_t inner = 1;
    for (int d = 2; d < nd; d++)
        inner *= shape[d];
    const int64_t C = shape[1], c = (at / inner) % C;
    double s = 0;
    for (int64_t j = c - size / 2; j <= c + (size - 1) / 2; j++)
        if (j >= 0 && j < C) {
            const double v = x[at + (j - c) * inner];
            s += v * v;
        }
    return x[at] / pow(k + alpha * s / (double)size, beta);
}

typedef struct {
    int nd;
    int64_t shape[5];
    int64_t size;
    float alpha, beta, k;
} lrn_case;

static const lrn_case LRNS[] = {
    {3, {2, 5, 4}, 3, 1e-2f, 0.75f, 1.0f},
    {4, {2, 6, 3, 2}, 2, 0.5f, 0.6f, 2.0f},
    {5, {1, 4, 2, 2, 3}, 5, 0.3f, 0.75f, 1.0f},
    {4, {1, 3, 2, 2}, 1, 1e-4f, 0.75f, 1.0f},
};

static cg_tensor *lrn_fn(void *ctx, cg_tensor *const *in)
{
    const lrn_case *c = ctx;
    return cg_local_response_norm(in[0], c->size, c->alpha, c->beta, c->k);
}

START_TEST(test_lrn)
{
    cg_rng r = cg_rng_new(10);
    for (int i = 0; i < 4; i++) {
        const lrn_case *c = &LRNS[i];
        cg_tensor *x = cg_requires_grad(cg_randn(&r, c->nd, c->shape), true);
        cg_tensor *y = lrn_fn((void *)c, &x);
        ck_assert_msg(y, "%s", cg_last_error());
        double *xv = cg_test_doubles(x);
        float *yv = cg_test_values(y);
        for (int64_t j = 0; j < cg_numel(x); j++) {
            const double want = lrn_ref(xv, c->shape, c->nd, j, c->size, c->alpha, c->beta, c->k);
            ck_assert_msg(fabs(yv[j] - want) <= 2e-6 * (1 + fabs(want)), "case %d y[%lld]", i,
                          (long long)j);
        }
        free(xv), free(yv);
        cg_release(y);
        cg_gradcheck_report rep;
        ck_assert_msg(cg_gradcheck(lrn_fn, (void *)c, 1, &x, NULL, &rep), "case %d: %s", i,
                      rep.message);
        cg_module *m = cg_local_response_norm_new(c->size, c->alpha, c->beta, c->k);
        cg_tensor *ym = cg_module_forward(m, x), *yf = lrn_fn((void *)c, &x);
        ck_assert_str_eq(m->type, "LocalResponseNorm");
        CG_ASSERT_TENSOR(ym, cg_data(yf), 0, 0);
        cg_release_all(3, x, ym, yf);
        cg_module_free(m);
    }
    cg_tensor *x2 = cg_randn(&r, CG_SHAPE(2, 3)), *e = cg_zeros(CG_SHAPE(0, 3, 2));
    CG_ASSERT_REFUSED_LINE(cg_local_response_norm(x2, 2, 1e-4f, 0.75f, 1), "3 or more dims");
    CG_ASSERT_REFUSED_LINE(cg_local_response_norm(e, 0, 1e-4f, 0.75f, 1), "size must be positive");
    CG_ASSERT_REFUSED_LINE(cg_local_response_norm(NULL, 2, 1e-4f, 0.75f, 1), "local_response_norm");
    cg_tensor *ye = cg_local_response_norm(e, 2, 1e-4f, 0.75f, 1);
    ck_assert(ye == e); /* empty: the input itself, as PyTorch */
    cg_release_all(3, x2, e, ye);
}
END_TEST

/* ------------------------------------------------ channel shuffle */
static cg_tensor *shuffle_fn(void *ctx, cg_tensor *const *in)
{
    return cg_channel_shuffle(in[0], *(const int64_t *)ctx);
}

START_TEST(test_channel_shuffle)
{
    cg_rng r = cg_rng_new(12);
    const int64_t shapes[3][4] = {{2, 6, 3, 1}, {1, 6, 5, 0}, {2, 4, 2, 2}};
    const int nds[3] = {4, 3, 4};
    const int64_t groups[3] = {3, 2, 4};
    for (int i = 0; i < 3; i++) {
        cg_tensor *x =
            cg_requires_grad(cg_test_randn_layout(&r, nds[i], shapes[i], i == 1 ? 1 : 0), true);
        cg_tensor *y = cg_channel_shuffle(x, groups[i]);
        ck_assert_msg(y, "%s", cg_last_error());
        float *xv = cg_test_values(x), *yv = cg_test_values(y);
        const int64_t C = shapes[i][1], g = groups[i], inner = cg_numel(x) / (shapes[i][0] * C);
        for (int64_t j = 0; j < cg_numel(x); j++) {
            const int64_t n = j / (C * inner), c = (j / inner) % C, s = j % inner;
            const int64_t src = (c % g) * (C / g) + c / g; /* out c = j g + i <- i C/g + j */
            ck_assert(yv[j] == xv[(n * C + src) * inner + s]);
        }
        free(xv), free(yv);
        cg_gradcheck_report rep;
        ck_assert_msg(cg_gradcheck(shuffle_fn, (void *)&groups[i], 1, &x, NULL, &rep), "%s",
                      rep.message);
        cg_module *m = cg_channel_shuffle_new(groups[i]);
        cg_tensor *ym = cg_module_forward(m, x);
        ck_assert_str_eq(m->type, "ChannelShuffle");
        CG_ASSERT_TENSOR(ym, cg_data(y), 0, 0);
        cg_module_free(m);
        cg_release_all(3, x, y, ym);
    }
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 6, 3)), *x2 = cg_randn(&r, CG_SHAPE(2, 6));
    CG_ASSERT_REFUSED_LINE(cg_channel_shuffle(x, 4), "groups 4 does not divide the 6 channels");
    CG_ASSERT_REFUSED_LINE(cg_channel_shuffle(x, 0), "groups must be positive");
    CG_ASSERT_REFUSED_LINE(cg_channel_shuffle(x2, 2), "must have 3 to 7 dims");
    cg_module *m = cg_channel_shuffle_new(5);
    CG_ASSERT_REFUSED_LINE(cg_module_forward(m, x), "groups 5 does not divide");
    cg_module_free(m);
    cg_release_all(2, x, x2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bag");
    TCase *tc = tcase_create("bag");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_bag_values);
    tcase_add_test(tc, test_bag_gradcheck);
    tcase_add_test(tc, test_bag_refusals);
    tcase_add_test(tc, test_bag_empty);
    tcase_add_test(tc, test_bag_max_ties);
    tcase_add_test(tc, test_bag_module);
    tcase_add_test(tc, test_lrn);
    tcase_add_test(tc, test_channel_shuffle);
    suite_add_tcase(s, tc);
    return cg_test_run(&s, 1);
}
