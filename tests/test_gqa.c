/* Check suite "gqa": grouped-query and multi-query attention (k and v
 * with H_kv heads, a divisor of q's H: core/attention*.c, cg_mha_new_gqa,
 * the transformer config's kv_heads).
 *
 * The fused kernel on k and v of H_kv heads gives the bits of the kernel
 * on the same heads repeated (each H/H_kv times, as PyTorch's
 * repeat_interleave), forward and backward (dk and dv: the repeated
 * heads' gradients summed over each group in head order), fp32 and bf16,
 * causal, key padding, short (weights kept) and long (recomputed) rows;
 * the same bits at 1 and 2 threads; gradchecks of the op and of a
 * MultiHeadAttention (the masked graph path too); cached decoding keeps
 * H_kv heads and matches the full forward; bad shapes refused, and
 * saving under nn.MultiheadAttention's names. PyTorch's
 * is matched in tests/interop/rope.py (torch_rope, cases gqa*). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/gemm.h"
#include "core/ops.h"
#include "nn/attention.h"
#include "nn/torch_names.h"
#include "nn/transformer.h"
#include "tests/testutil.h"

static bool same_bits(const cg_tensor *a, const cg_tensor *b)
{
    if (!a || !b || !cg_same_shape(a, b) || a->dtype != b->dtype)
        return false;
    cg_tensor *ac = cg_k_contiguous(a), *bc = cg_k_contiguous(b);
    bool same =
        ac && bc &&
        !memcmp(cg_data_ptr(ac), cg_data_ptr(bc), (size_t)cg_numel(a) * cg_dtype_size(a->dtype));
    cg_release_all(2, ac, bc);
    return same;
}

/* k [B,Hk,T,dh] with each head repeated G times in a row: [B,Hk G,T,dh] */
static cg_tensor *repeated(const cg_tensor *k, int64_t G)
{
    const int64_t B = k->shape[0], Hk = k->shape[1], T = k->shape[2], dh = k->shape[3];
    cg_tensor *kc = cg_k_contiguous(k), *r = cg_empty_dtype(k->dtype, CG_SHAPE(B, Hk * G, T, dh));
    const size_t es = cg_dtype_size(k->dtype), head = (size_t)(T * dh) * es;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hk * G; h++)
            memcpy((char *)cg_data_ptr(r) + (size_t)(b * Hk * G + h) * head,
                   (const char *)cg_data_ptr(kc) + (size_t)(b * Hk + h / G) * head, head);
    cg_release(kc);
    return r;
}

/* g [B,H,T,dh] summed over groups of G heads in head order: [B,H/G,T,dh] */
static cg_tensor *summed(const cg_tensor *g, int64_t G)
{
    const int64_t B = g->shape[0], H = g->shape[1], T = g->shape[2], dh = g->shape[3];
    cg_tensor *gc = cg_k_contiguous(g), *r = cg_empty(CG_SHAPE(B, H / G, T, dh));
    const float *s = cg_data(gc);
    float *d = cg_data(r);
    for (int64_t b = 0; b < B; b++)
        for (int64_t hk = 0; hk < H / G; hk++)
            for (int64_t i = 0; i < T * dh; i++) {
                float acc = s[((b * H + hk * G) * T) * dh + i];
                for (int64_t j = 1; j < G; j++)
                    acc += s[((b * H + hk * G + j) * T) * dh + i];
                d[((b * (H / G) + hk) * T) * dh + i] = acc;
            }
    cg_release(gc);
    return r;
}

/* The kernel on (q, k, v) against the kernel on (q, repeated k and v):
 * output, weights and gradients, bit for bit */
static void check_against_repeated(int64_t B, int64_t H, int64_t Hk, int64_t Tq, int64_t Tk,
                                   int64_t dh, bool causal, bool pad, cg_dtype dt, uint64_t seed)
{
    cg_rng r = cg_rng_new(seed);
    cg_tensor *q0 = cg_randn(&r, CG_SHAPE(B, H, Tq, dh)),
              *k0 = cg_randn(&r, CG_SHAPE(B, Hk, Tk, dh));
    cg_tensor *v0 = cg_randn(&r, CG_SHAPE(B, Hk, Tk, dh)),
              *g = cg_randn(&r, CG_SHAPE(B, H, Tq, dh));
    cg_tensor *q = cg_k_to(q0, dt), *k = cg_k_to(k0, dt), *v = cg_k_to(v0, dt);
    const int64_t G = H / Hk;
    cg_tensor *kr = repeated(k, G), *vr = repeated(v, G);
    uint8_t kp[64] = {0};
    for (int64_t b = 0; pad && b < B; b++)
        kp[b * Tk + Tk - 1 - b] = 1; /* one padded key a row, not the first */
    cg_tensor *key_pad = pad ? cg_test_mask(CG_SHAPE(B, Tk), kp) : NULL;
    cg_tensor *s1 = NULL, *s2 = NULL, *w1 = NULL, *w2 = NULL;
    cg_tensor *o1 = cg_k_attention(q, k, v, causal, key_pad, &s1, &w1);
    cg_tensor *o2 = cg_k_attention(q, kr, vr, causal, key_pad, &s2, &w2);
    ck_assert_msg(o1 && o2, "%s", cg_last_error());
    ck_assert(same_bits(o1, o2) && same_bits(s1, s2) && same_bits(w1, w2));
    cg_tensor *dq1, *dk1, *dv1, *dq2, *dk2, *dv2;
    ck_assert_msg(cg_k_attention_backward(q, k, v, o1, s1, g, causal, key_pad, &dq1, &dk1, &dv1),
                  "%s", cg_last_error());
    ck_assert(cg_k_attention_backward(q, kr, vr, o2, s2, g, causal, key_pad, &dq2, &dk2, &dv2));
    ck_assert(cg_same_shape(dk1, k) && cg_same_shape(dv1, v));
    cg_tensor *dks = summed(dk2, G), *dvs = summed(dv2, G);
    ck_assert_msg(same_bits(dq1, dq2), "dq: H %lld Hk %lld Tk %lld", (long long)H, (long long)Hk,
                  (long long)Tk);
    ck_assert_msg(same_bits(dk1, dks) && same_bits(dv1, dvs), "dk/dv: H %lld Hk %lld Tk %lld",
                  (long long)H, (long long)Hk, (long long)Tk);
    cg_release_all(12, q0, k0, v0, g, q, k, v, kr, vr, s1, s2, w1);
    cg_release_all(13, w2, o1, o2, dq1, dk1, dv1, dq2, dk2, dv2, dks, dvs, NULL, NULL);
}

START_TEST(test_gqa_kernel_bits)
{
    for (int dt = 0; dt < 2; dt++) {
        const cg_dtype t = dt ? CG_BF16 : CG_F32;
        const cg_precision prev = cg_get_matmul_precision();
        cg_set_matmul_precision(dt ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        check_against_repeated(2, 4, 2, 5, 5, 8, true, false, t, 1);
        check_against_repeated(2, 4, 1, 6, 9, 8, false, true, t, 2);
        check_against_repeated(1, 6, 3, 7, 7, 16, true, true, t, 3);
        check_against_repeated(2, 4, 2, 40, 600, 8, false, false, t, 4); /* lse, two key blocks */
        check_against_repeated(1, 4, 1, 70, 300, 16, true, false, t, 5); /* recomputed rows */
        cg_set_matmul_precision(prev);
    }
}
END_TEST

START_TEST(test_gqa_threads)
{
    cg_rng r = cg_rng_new(6);
    const int saved = cg_get_num_threads();
    cg_tensor *q = cg_randn(&r, CG_SHAPE(4, 8, 64, 32)), *k = cg_randn(&r, CG_SHAPE(4, 2, 64, 32));
    cg_tensor *v = cg_randn(&r, CG_SHAPE(4, 2, 64, 32)), *g = cg_randn(&r, CG_SHAPE(4, 8, 64, 32));
    cg_tensor *o[2], *s[2], *dq[2], *dk[2], *dv[2];
    for (int t = 0; t < 2; t++) {
        cg_set_num_threads(t + 1);
        o[t] = cg_k_attention(q, k, v, true, NULL, &s[t], NULL);
        ck_assert(
            cg_k_attention_backward(q, k, v, o[t], s[t], g, true, NULL, &dq[t], &dk[t], &dv[t]));
    }
    cg_set_num_threads(saved);
    ck_assert(same_bits(o[0], o[1]) && same_bits(dq[0], dq[1]) && same_bits(dk[0], dk[1]) &&
              same_bits(dv[0], dv[1]));
    cg_release_all(4, q, k, v, g);
    for (int t = 0; t < 2; t++)
        cg_release_all(5, o[t], s[t], dq[t], dk[t], dv[t]);
}
END_TEST

typedef struct {
    bool causal;
    cg_tensor *key_pad;
} actx;

static cg_tensor *attn_fn(void *ctx, cg_tensor *const *in)
{
    const actx *c = ctx;
    return cg_attention(in[0], in[1], in[2], c->causal, c->key_pad, NULL);
}

typedef struct {
    cg_mha *m;
    const cg_tensor *mask;
} mctx;

static cg_tensor *mha_fn(void *ctx, cg_tensor *const *in)
{
    const mctx *c = ctx;
    return cg_mha_forward(c->m, in[0], in[0], true, NULL, c->mask, NULL);
}

START_TEST(test_gqa_gradcheck)
{
    cg_rng r = cg_rng_new(7);
    const uint8_t kp[10] = {0, 0, 0, 0, 1, 0, 0, 0, 1, 1};
    actx c = {true, NULL};
    for (int i = 0; i < 2; i++) {
        const int64_t Hk = i ? 1 : 2;
        cg_tensor *in[3] = {cg_randn(&r, CG_SHAPE(2, 4, 5, 6)), cg_randn(&r, CG_SHAPE(2, Hk, 5, 6)),
                            cg_randn(&r, CG_SHAPE(2, Hk, 5, 6))};
        for (int j = 0; j < 3; j++)
            in[j]->requires_grad = true;
        c.causal = i == 0;
        c.key_pad = i ? cg_test_mask(CG_SHAPE(2, 5), kp) : NULL;
        cg_gradcheck_report rep;
        ck_assert_msg(cg_gradcheck(attn_fn, &c, 3, in, NULL, &rep), "Hk %lld: %s", (long long)Hk,
                      rep.message);
        cg_release_all(3, in[0], in[1], in[2]);
    }
    /* the module: fused, and with a general mask (the graph path repeats
     * the heads) */
    cg_mha *m = cg_mha_new_gqa(8, 4, 2, true, &r);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(m->k_proj->weight->shape[0], 4);
    ck_assert_int_eq(m->v_proj->weight->shape[0], 4);
    const uint8_t mb[16] = {0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0};
    cg_tensor *mask = cg_test_mask(CG_SHAPE(4, 4), mb);
    for (int i = 0; i < 2; i++) {
        mctx mc = {m, i ? mask : NULL};
        cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 4, 8));
        x->requires_grad = true;
        cg_gradcheck_report rep;
        ck_assert_msg(cg_gradcheck(mha_fn, &mc, 1, &x, NULL, &rep), "%s", rep.message);
        cg_release(x);
    }
    /* the graph path computes what the fused kernel does (a mask that
     * masks nothing) */
    cg_tensor *none = cg_test_mask(CG_SHAPE(4, 4), NULL), *x = cg_randn(&r, CG_SHAPE(2, 4, 8));
    cg_tensor *yf = cg_mha_forward(m, x, x, false, NULL, NULL, NULL);
    cg_tensor *yg = cg_mha_forward(m, x, x, false, NULL, none, NULL);
    float *fv = cg_test_values(yf);
    CG_ASSERT_TENSOR(yg, fv, 1e-6, 1e-5);
    free(fv);
    cg_release_all(3, x, yf, yg);
    cg_module_free(CG_MODULE(m));
}
END_TEST

START_TEST(test_gqa_cached)
{
    enum { D = 16, H = 4, B = 2, T = 9 };
    cg_rng r = cg_rng_new(8);
    for (int64_t Hk = 1; Hk <= 2; Hk++) {
        cg_mha *m = cg_mha_new_gqa(D, H, Hk, true, &r);
        cg_tensor *x = cg_randn(&r, CG_SHAPE(B, T, D));
        cg_tensor *y = cg_mha_forward(m, x, x, true, NULL, NULL, NULL);
        float *yv = cg_test_values(y);
        cg_mha_kv kv = {0};
        for (int64_t t0 = 0; t0 < T; t0 += 3) { /* three positions a step */
            cg_tensor *xt = cg_view_narrow(x, 1, t0, 3);
            cg_tensor *yt = cg_mha_forward_cached(m, xt, xt, true, NULL, &kv);
            ck_assert_msg(yt, "%s", cg_last_error());
            float *ytv = cg_test_values(yt);
            for (int b = 0; b < B; b++)
                for (int t = 0; t < 3; t++)
                    for (int k = 0; k < D; k++)
                        ck_assert(fabsf(ytv[(b * 3 + t) * D + k] - yv[(b * T + t0 + t) * D + k]) <
                                  1e-5f);
            free(ytv);
            cg_release_all(2, xt, yt);
        }
        ck_assert_int_eq(kv.k->shape[1], Hk); /* the cache keeps H_kv heads */
        /* a beam's reorder keeps them too */
        cg_tensor *rows = cg_from_i64(1, (const int64_t[]){2}, (const int64_t[]){1, 0});
        ck_assert(cg_mha_kv_reorder(&kv, rows));
        ck_assert_int_eq(kv.k->shape[1], Hk);
        cg_mha_kv_free(&kv);
        free(yv);
        cg_release_all(3, x, y, rows);
        cg_module_free(CG_MODULE(m));
    }
}
END_TEST

/* Past the cache's first 16 positions, in steps of 1, 14, 18 and 7 (a step
 * that more than doubles what it holds; the buffers regrown at 16 and 32,
 * every row and head moved to its new place) and of 33, 1, 5 and 1 (a first
 * step of more than twice 16): the full forward's rows, for H_kv 1, 2
 * and 4. */
START_TEST(test_gqa_cached_long)
{
    enum { D = 16, H = 4, B = 2, T = 40 };
    const int64_t steps[2][4] = {{1, 14, 18, 7}, {33, 1, 5, 1}};
    cg_rng r = cg_rng_new(10);
    for (int64_t Hk = 1; Hk <= H; Hk *= 2)
        for (int p = 0; p < 2; p++) {
            cg_mha *m = cg_mha_new_gqa(D, H, Hk, true, &r);
            cg_tensor *x = cg_randn(&r, CG_SHAPE(B, T, D));
            cg_tensor *y = cg_mha_forward(m, x, x, true, NULL, NULL, NULL);
            float *yv = cg_test_values(y);
            cg_mha_kv kv = {0};
            int64_t t0 = 0;
            for (int s = 0; s < 4; t0 += steps[p][s++]) {
                const int64_t n = steps[p][s];
                cg_tensor *xt = cg_view_narrow(x, 1, t0, n);
                cg_tensor *yt = cg_mha_forward_cached(m, xt, xt, true, NULL, &kv);
                ck_assert_msg(yt, "Hk %lld, steps %d, step %d: %s", (long long)Hk, p, s,
                              cg_last_error());
                ck_assert_int_eq(kv.len, t0 + n);
                float *ytv = cg_test_values(yt);
                for (int b = 0; b < B; b++)
                    for (int64_t t = 0; t < n; t++)
                        for (int k = 0; k < D; k++)
                            ck_assert_msg(fabsf(ytv[(b * n + t) * D + k] -
                                                yv[(b * T + t0 + t) * D + k]) < 1e-5f,
                                          "Hk %lld, steps %d, row %d, position %lld", (long long)Hk,
                                          p, b, (long long)(t0 + t));
                free(ytv);
                cg_release_all(2, xt, yt);
            }
            ck_assert_int_eq(t0, T);
            ck_assert_int_eq(kv.k->shape[1], Hk);
            cg_mha_kv_free(&kv);
            free(yv);
            cg_release_all(2, x, y);
            cg_module_free(CG_MODULE(m));
        }
}
END_TEST

START_TEST(test_gqa_refusals)
{
    cg_rng r = cg_rng_new(9);
    CG_ASSERT_FAILS(cg_mha_new_gqa(8, 4, 3, true, &r), "3 key/value heads do not divide H=4");
    CG_ASSERT_FAILS(cg_mha_new_gqa(8, 4, 0, true, &r), "0 key/value heads do not divide H=4");
    CG_ASSERT_FAILS(cg_mha_new_gqa(8, 4, 8, true, &r), "8 key/value heads do not divide H=4");
    cg_tensor *q = cg_randn(&r, CG_SHAPE(1, 4, 3, 8)), *k = cg_randn(&r, CG_SHAPE(1, 3, 3, 8));
    CG_ASSERT_FAILS(cg_attention(q, k, k, false, NULL, NULL), "with Hkv dividing H");
    /* PyTorch's nn.MultiheadAttention has no grouped-query form */
    cg_mha *m = cg_mha_new_gqa(8, 4, 2, true, &r);
    CG_ASSERT_FAILS(cg_torch_save(CG_MODULE(m), cg_test_path("gqa.safetensors")),
                    "grouped-query attention (2 key/value heads for 4)");
    cg_module_free(CG_MODULE(m));
    const cg_tf_config bad = {.d = 8, .H = 4, .kv_heads = 3, .d_ff = 8, .act = CG_ACT_RELU};
    CG_ASSERT_FAILS(cg_lm_block_new(&bad, NULL), "kv_heads=3 must divide H=4");
    cg_release_all(2, q, k);
}
END_TEST

static Suite *gqa_suite(void)
{
    Suite *s = suite_create("gqa");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_gqa_kernel_bits);
    tcase_add_test(tc, test_gqa_threads);
    tcase_add_test(tc, test_gqa_gradcheck);
    tcase_add_test(tc, test_gqa_cached);
    tcase_add_test(tc, test_gqa_cached_long);
    tcase_add_test(tc, test_gqa_refusals);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {gqa_suite()};
    return cg_test_run(s, 1);
}
