/* Check suite "attn_dropout": dropout on the attention weights
 * (cg_scaled_dot_product_attention_ex, cg_mha_set_attn_dropout, the
 * transformer config's attn_dropout; fairseq's --attention-dropout,
 * nanoGPT's attn_dropout, the Annotated Transformer's p_attn dropout).
 *
 * The MultiHeadAttention's output in training mode against float64 values
 * computed here from the formula, softmax(q k^T / sqrt(dh) + masks) times
 * the dropout's scale (its mask drawn again from the generator's state,
 * as cg_dropout draws over a [B,H,Tq,Tk] tensor), then @ v and o_proj; the
 * weights returned are the distribution before the dropout; eval mode and
 * p 0 take the fused kernel, the same bits as without; p 1 leaves o_proj's
 * bias; the gradcheck with the generator reset at every call (a fixed
 * mask); an LM block with recomputation gives the same loss and gradients
 * bit for bit as without; bad values refused. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/attention.h"
#include "nn/init.h"
#include "nn/transformer.h"
#include "tests/testutil.h"

enum { B = 2, T = 4, D = 6, H = 2, DH = 3 };

static bool same_bits(const cg_tensor *a, const cg_tensor *b)
{
    return a && b && cg_numel(a) == cg_numel(b) && a->dtype == b->dtype &&
           !memcmp(cg_data_ptr(a), cg_data_ptr(b), (size_t)cg_numel(a) * cg_dtype_size(a->dtype));
}

/* x [n, D] (floats) through l in float64: out [n, D]. */
static void linear64(const cg_linear *l, const float *x, int64_t n, double *out)
{
    float *w = cg_test_values(l->weight), *b = l->bias ? cg_test_values(l->bias) : NULL;
    for (int64_t i = 0; i < n; i++)
        for (int o = 0; o < D; o++) {
            double acc = b ? b[o] : 0.0;
            for (int c = 0; c < D; c++)
                acc += (double)x[i * D + c] * w[o * D + c];
            out[i * D + o] = acc;
        }
    free(w);
    free(b);
}

/* Causal self-attention of x [B,T,D] with key padding pad [B,T] in
 * float64, each weight times scale [B,H,T,T] (the dropout's 0 or
 * 1/(1-p); NULL: 1) before @ v: out [B,T,D], w [B,H,T,T] before it. */
static void mha64(const cg_mha *m, const float *x, const uint8_t *pad, const float *scale,
                  double *out, double *w)
{
    double q[B * T * D], k[B * T * D], v[B * T * D], cat[B * T * D];
    linear64(m->q_proj, x, B * T, q);
    linear64(m->k_proj, x, B * T, k);
    linear64(m->v_proj, x, B * T, v);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                double s[T], mx = -INFINITY, z = 0;
                for (int j = 0; j < T; j++) {
                    double acc = 0;
                    for (int c = 0; c < DH; c++)
                        acc += q[(b * T + i) * D + h * DH + c] * k[(b * T + j) * D + h * DH + c];
                    s[j] = j > i || pad[b * T + j] ? -INFINITY : acc / sqrt((double)DH);
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int j = 0; j < T; j++)
                    z += (s[j] = exp(s[j] - mx));
                const int64_t row = ((int64_t)(b * H + h) * T + i) * T;
                for (int j = 0; j < T; j++) {
                    s[j] /= z;
                    w[row + j] = s[j];
                    s[j] *= scale ? scale[row + j] : 1.0;
                }
                for (int c = 0; c < DH; c++) {
                    double acc = 0;
                    for (int j = 0; j < T; j++)
                        acc += s[j] * v[(b * T + j) * D + h * DH + c];
                    cat[(b * T + i) * D + h * DH + c] = acc;
                }
            }
    float catf[B * T * D];
    for (int i = 0; i < B * T * D; i++)
        catf[i] = (float)cat[i];
    linear64(m->o_proj, catf, B * T, out);
}

static const uint8_t PAD[B * T] = {0, 0, 0, 0, 0, 0, 0, 1};

static cg_mha *new_mha(uint64_t seed)
{
    cg_rng r = cg_rng_new(seed);
    cg_mha *m = cg_mha_new(D, H, &r);
    ck_assert_ptr_nonnull(m);
    /* biases away from 0, so that p 1's output (the bias alone) is seen */
    cg_init_normal_(m->o_proj->bias, &r, 0.0f, 0.5f);
    cg_init_normal_(m->v_proj->bias, &r, 0.0f, 0.5f);
    return m;
}

static void to_float(const double *a, float *b, int n)
{
    for (int i = 0; i < n; i++)
        b[i] = (float)a[i];
}

START_TEST(test_attn_dropout_forward)
{
    cg_mha *m = new_mha(3);
    cg_rng gen = cg_rng_new(11), xr = cg_rng_new(5);
    const float p = 0.3f;
    ck_assert(cg_mha_set_attn_dropout(m, p, &gen));
    cg_tensor *x = cg_randn(&xr, CG_SHAPE(B, T, D));
    cg_tensor *pad = cg_test_mask(CG_SHAPE(B, T), PAD);
    float *xv = cg_test_values(x);
    /* the mask the forward will draw: cg_dropout over [B,H,T,T] from the
     * generator's state now */
    cg_rng again = gen;
    cg_tensor *ones = cg_ones(CG_SHAPE(B, H, T, T));
    cg_tensor *scale = cg_dropout(ones, p, &again, true);
    float *sv = cg_test_values(scale);
    int dropped = 0;
    for (int i = 0; i < B * H * T * T; i++) {
        ck_assert(sv[i] == 0.0f || fabsf(sv[i] - 1.0f / (1.0f - p)) < 1e-6f);
        dropped += sv[i] == 0.0f;
    }
    ck_assert_int_gt(dropped, 0);
    cg_module_train(CG_MODULE(m), true);
    cg_tensor *w = NULL;
    cg_tensor *y = cg_mha_forward(m, x, x, true, pad, NULL, &w);
    ck_assert_msg(y && w, "%s", cg_last_error());
    double ref[B * T * D], wref[B * H * T * T];
    float reff[B * T * D], wf[B * H * T * T];
    mha64(m, xv, PAD, sv, ref, wref);
    to_float(ref, reff, B * T * D);
    to_float(wref, wf, B * H * T * T);
    CG_ASSERT_TENSOR(y, reff, 1e-5, 1e-4);
    CG_ASSERT_TENSOR(w, wf, 1e-6, 1e-4); /* before the dropout */
    /* the generator moved as one dropout of [B,H,T,T] moves it */
    ck_assert(!memcmp(&gen, &again, sizeof gen));
    /* eval mode: the fused kernel, the bits of no dropout at all */
    cg_module_train(CG_MODULE(m), false);
    cg_tensor *ye = cg_mha_forward(m, x, x, true, pad, NULL, NULL);
    ck_assert(cg_mha_set_attn_dropout(m, 0.0f, NULL));
    cg_tensor *y0 = cg_mha_forward(m, x, x, true, pad, NULL, NULL);
    ck_assert(same_bits(ye, y0));
    /* and p 0 in training mode too */
    cg_module_train(CG_MODULE(m), true);
    cg_tensor *yt = cg_mha_forward(m, x, x, true, pad, NULL, NULL);
    ck_assert(same_bits(yt, y0));
    /* p 1: every weight dropped, o_proj's bias alone */
    ck_assert(cg_mha_set_attn_dropout(m, 1.0f, &gen));
    cg_tensor *y1 = cg_mha_forward(m, x, x, true, pad, NULL, NULL);
    float *bias = cg_test_values(m->o_proj->bias), want[B * T * D];
    for (int i = 0; i < B * T * D; i++)
        want[i] = bias[i % D];
    CG_ASSERT_TENSOR(y1, want, 0, 0);
    free(bias);
    free(xv);
    free(sv);
    cg_release_all(9, x, ones, scale, w, y, ye, y0, yt, y1); /* pad: cg_test_mask's */
    cg_module_free(CG_MODULE(m));
}
END_TEST

/* A fixed mask for the gradcheck: the generator reset before each call */
typedef struct {
    cg_mha *m;
    cg_rng *gen, start;
    cg_tensor *pad;
} gctx;

static cg_tensor *mha_fn(void *ctx, cg_tensor *const *in)
{
    gctx *c = ctx;
    *c->gen = c->start;
    return cg_mha_forward(c->m, in[0], in[1], false, c->pad, NULL, NULL);
}

START_TEST(test_attn_dropout_gradcheck)
{
    cg_mha *m = new_mha(4);
    cg_rng gen = cg_rng_new(21), xr = cg_rng_new(6);
    ck_assert(cg_mha_set_attn_dropout(m, 0.4f, &gen));
    cg_module_train(CG_MODULE(m), true);
    cg_tensor *pad = cg_test_mask(CG_SHAPE(B, T), PAD);
    gctx c = {m, &gen, gen, pad};
    /* the inputs, and two parameters the function reads from the module */
    cg_tensor *in[4] = {cg_randn(&xr, CG_SHAPE(B, 3, D)), cg_randn(&xr, CG_SHAPE(B, T, D)),
                        m->v_proj->weight, m->q_proj->weight};
    in[0]->requires_grad = in[1]->requires_grad = true;
    cg_gradcheck_report rep;
    ck_assert_msg(cg_gradcheck(mha_fn, &c, 4, in, NULL, &rep), "%s", rep.message);
    ck_assert_int_gt(rep.checked, 2 * B * T * D);
    cg_release_all(2, in[0], in[1]);
    cg_module_free(CG_MODULE(m));
}
END_TEST

/* An LM block with recomputation: the same loss and gradients, bit for
 * bit, under attention dropout (the recomputed forward draws the same
 * masks) */
static cg_tensor *block_loss(cg_lm_block *b, cg_tensor *x, cg_rng *gen, cg_rng start)
{
    *gen = start;
    const cg_attn_mask mask = {.causal = true};
    cg_tensor *y = cg_lm_block_forward(b, x, &mask);
    cg_tensor *sq = y ? cg_mul(y, y) : NULL;
    cg_tensor *l = sq ? cg_sum_all(sq) : NULL;
    cg_release_all(2, y, sq);
    return l;
}

START_TEST(test_attn_dropout_recompute)
{
    cg_rng gen = cg_rng_new(8), init = cg_rng_new(9), xr = cg_rng_new(10);
    const cg_tf_config cfg = {.d = D,
                              .H = H,
                              .d_ff = 8,
                              .norm = CG_NORM_LAYERNORM,
                              .act = CG_ACT_GELU,
                              .norm_first = true,
                              .dropout = 0.1f,
                              .attn_dropout = 0.3f,
                              .dropout_rng = &gen};
    cg_lm_block *blk = cg_lm_block_new(&cfg, &init);
    ck_assert_ptr_nonnull(blk);
    ck_assert(blk->attn->attn_dropout == 0.3f && blk->attn->attn_dropout_rng == &gen);
    cg_module_train(CG_MODULE(blk), true);
    cg_tensor *x = cg_randn(&xr, CG_SHAPE(B, T, D));
    x->requires_grad = true;
    const cg_rng start = gen;
    cg_tensor *grads[2][20] = {{0}}, *loss[2], *gx[2];
    int np = 0;
    for (int rc = 0; rc < 2; rc++) {
        blk->recompute = rc == 1;
        cg_module_zero_grad(CG_MODULE(blk));
        cg_zero_grad(x);
        loss[rc] = block_loss(blk, x, &gen, start);
        ck_assert_msg(loss[rc] && cg_backward(loss[rc], NULL, false), "%s", cg_last_error());
        cg_param_list ps = {0};
        ck_assert(cg_module_params(CG_MODULE(blk), &ps));
        np = ps.n;
        ck_assert_int_le(np, 20);
        for (int i = 0; i < np; i++)
            grads[rc][i] = cg_contiguous(ps.items[i].tensor->grad);
        cg_param_list_free(&ps);
        gx[rc] = cg_contiguous(x->grad);
    }
    ck_assert(same_bits(loss[0], loss[1]) && same_bits(gx[0], gx[1]));
    for (int i = 0; i < np; i++)
        ck_assert_msg(same_bits(grads[0][i], grads[1][i]), "parameter %d", i);
    /* and the masks did drop: another generator state, another loss */
    cg_tensor *other = block_loss(blk, x, &gen, cg_rng_new(99));
    ck_assert(!same_bits(other, loss[0]));
    for (int rc = 0; rc < 2; rc++) {
        for (int i = 0; i < np; i++)
            cg_release(grads[rc][i]);
        cg_release_all(2, loss[rc], gx[rc]);
    }
    cg_release_all(2, other, x);
    cg_module_free(CG_MODULE(blk));
}
END_TEST

START_TEST(test_attn_dropout_refusals)
{
    cg_mha *m = new_mha(5);
    cg_rng gen = cg_rng_new(1);
    CG_ASSERT_FAILS(cg_mha_set_attn_dropout(m, -0.1f, &gen), "attention dropout -0.1 must be in");
    CG_ASSERT_FAILS(cg_mha_set_attn_dropout(m, 1.5f, &gen), "must be in [0, 1]");
    CG_ASSERT_FAILS(cg_mha_set_attn_dropout(m, NAN, &gen), "must be in [0, 1]");
    CG_ASSERT_FAILS(cg_mha_set_attn_dropout(m, 0.5f, NULL), "with a generator");
    ck_assert(m->attn_dropout == 0.0f); /* unchanged */
    cg_clear_error(); /* a NULL module after no error: named (after one: that error kept) */
    CG_ASSERT_FAILS(cg_mha_set_attn_dropout(NULL, 0.5f, &gen), "cg_mha_set_attn_dropout");
    cg_rng xr = cg_rng_new(2);
    cg_tensor *q = cg_randn(&xr, CG_SHAPE(1, 1, 2, 4));
    CG_ASSERT_FAILS(cg_scaled_dot_product_attention_ex(q, q, q, NULL, 2.0f, &gen, NULL),
                    "dropout_p 2 must be in [0, 1]");
    CG_ASSERT_FAILS(cg_scaled_dot_product_attention_ex(q, q, q, NULL, 0.5f, NULL, NULL),
                    "with a generator");
    cg_tf_config bad = {.d = D, .H = H, .d_ff = 8, .act = CG_ACT_RELU, .attn_dropout = 1.5f};
    CG_ASSERT_FAILS(cg_lm_block_new(&bad, NULL), "attn_dropout must be in [0, 1] (got 1.5)");
    cg_release(q);
    cg_module_free(CG_MODULE(m));
}
END_TEST

static Suite *attn_dropout_suite(void)
{
    Suite *s = suite_create("attn_dropout");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_attn_dropout_forward);
    tcase_add_test(tc, test_attn_dropout_gradcheck);
    tcase_add_test(tc, test_attn_dropout_recompute);
    tcase_add_test(tc, test_attn_dropout_refusals);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {attn_dropout_suite()};
    return cg_test_run(s, 1);
}
