/* Check suite "rope": rotary position embeddings (core/rope.c cg_k_rope,
 * autograd cg_rope, cg_mha_set_rope; the transformer config's rope_theta).
 *
 * The kernel against float64 values computed here from the formula
 * (rotate-half pairs, positions from start), contiguous and on a
 * transposed view (split heads), fp32 and bf16 (within bf16's rounding of
 * the float64 value); the inverse undoes it; the gradcheck (on a view,
 * from a start); the bits at 1 and 2 threads; a MultiHeadAttention with
 * rotary embeddings computes what the same rotation as a q/k hook gives,
 * bit for bit, and its gradcheck; cached decoding matches the full
 * forward; a layer rotates its self-attention and not its
 * cross-attention; the table of angles kept between calls serves only
 * its own; positions from 10^5 and 2^20 as close to float64 as near
 * ones; inputs copied first (a last stride not 1, bf16 split heads) read
 * by the copy's strides; empty inputs; bad inputs refused. PyTorch's
 * (Hugging Face LLaMA's) is matched in tests/interop/rope.py
 * (torch_rope). */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/attention.h"
#include "nn/transformer.h"
#include "tests/testutil.h"

static bool same_bits(const cg_tensor *a, const cg_tensor *b)
{
    return a && b && cg_numel(a) == cg_numel(b) && a->dtype == b->dtype &&
           !memcmp(cg_data_ptr(a), cg_data_ptr(b), (size_t)cg_numel(a) * cg_dtype_size(a->dtype));
}

/* The rotation of contiguous x [rows, T, D] (float values) in float64 */
static void rope64(const float *x, double *y, int64_t rows, int64_t T, int64_t D, int64_t start,
                   double theta, double sign)
{
    const int64_t h = D / 2;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < h; i++) {
                const double a = sign * (double)(start + t) * pow(theta, -2.0 * i / (double)D);
                const float *p = x + (r * T + t) * D;
                double *q = y + (r * T + t) * D;
                q[i] = p[i] * cos(a) - p[i + h] * sin(a);
                q[i + h] = p[i + h] * cos(a) + p[i] * sin(a);
            }
}

START_TEST(test_rope_forward_f64)
{
    enum { B = 2, H = 3, T = 5, D = 8, N = B * H * T * D };
    cg_rng r = cg_rng_new(1);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(B, H, T, D));
    float *xv = cg_test_values(x), want[N];
    double ref[N];
    const int64_t starts[2] = {0, 37};
    for (int s = 0; s < 2; s++) {
        rope64(xv, ref, B * H, T, D, starts[s], 10000.0, 1.0);
        for (int i = 0; i < N; i++)
            want[i] = (float)ref[i];
        cg_tensor *y = cg_k_rope(x, starts[s], 10000.0, false);
        CG_ASSERT_TENSOR(y, want, 2e-6, 1e-5);
        /* the inverse rotation undoes it */
        cg_tensor *back = cg_k_rope(y, starts[s], 10000.0, true);
        CG_ASSERT_TENSOR(back, xv, 2e-6, 1e-5);
        cg_release_all(2, y, back);
    }
    /* split heads: [B,T,H,D] storage read as [B,H,T,D] (a transposed view) */
    cg_tensor *bthd = cg_randn(&r, CG_SHAPE(B, T, H, D));
    cg_tensor *view = cg_transpose(bthd, 1, 2), *dense = cg_contiguous(view);
    cg_tensor *yv = cg_k_rope(view, 3, 500000.0, false), *yd = cg_k_rope(dense, 3, 500000.0, false);
    ck_assert(same_bits(yv, yd));
    float *dv = cg_test_values(dense);
    rope64(dv, ref, B * H, T, D, 3, 500000.0, 1.0);
    for (int i = 0; i < N; i++)
        want[i] = (float)ref[i];
    CG_ASSERT_TENSOR(yv, want, 2e-6, 1e-5);
    /* bf16: the float64 value of the bf16 input, rounded once */
    cg_tensor *xb = cg_k_to(x, CG_BF16), *yb = cg_k_rope(xb, 5, 10000.0, false);
    ck_assert_int_eq(yb->dtype, CG_BF16);
    float *xbv = cg_test_values(xb), *ybv = cg_test_values(yb);
    rope64(xbv, ref, B * H, T, D, 5, 10000.0, 1.0);
    for (int i = 0; i < N; i++)
        ck_assert_msg(fabs(ybv[i] - ref[i]) <= fabs(ref[i]) * 0x1p-8 + 1e-6, "%d: %g vs %g", i,
                      (double)ybv[i], ref[i]);
    free(xv);
    free(dv);
    free(xbv);
    free(ybv);
    cg_release_all(8, x, bthd, view, dense, yv, yd, xb, yb);
}
END_TEST

/* Far positions (a long context, a cache well along): the angles and
 * frequencies are computed in double and rounded once, so the rotation at
 * positions from 10^5 and from 2^20 is as close to float64's as at 0 (an
 * angle or a frequency rounded to float is off by some 10^-3 there) */
START_TEST(test_rope_far_positions)
{
    enum { T = 3, D = 64, N = 2 * T * D };
    cg_rng r = cg_rng_new(7);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, T, D));
    float *xv = cg_test_values(x), want[N];
    double ref[N];
    const int64_t starts[2] = {100000, 1 << 20};
    const double thetas[2] = {10000.0, 500000.0};
    for (int s = 0; s < 2; s++) {
        rope64(xv, ref, 2, T, D, starts[s], thetas[s], 1.0);
        for (int i = 0; i < N; i++)
            want[i] = (float)ref[i];
        cg_tensor *y = cg_k_rope(x, starts[s], thetas[s], false);
        CG_ASSERT_TENSOR(y, want, 2e-6, 1e-5);
        cg_release(y);
    }
    free(xv);
    cg_release(x);
}
END_TEST

/* Inputs copied before the rotation are read through the copy's strides:
 * a float32 view whose last dim is not unit-stride, and bfloat16 split
 * heads (a transposed view), give the bits of their contiguous copies. */
START_TEST(test_rope_strided_copies)
{
    cg_rng r = cg_rng_new(8);
    cg_tensor *base = cg_randn(&r, CG_SHAPE(2, 3, 8, 5)); /* [2, 3, 5, 8] with last stride 5 */
    cg_tensor *bthd = cg_randn(&r, CG_SHAPE(2, 5, 3, 8)); /* split heads */
    cg_tensor *b16 = cg_k_to(bthd, CG_BF16);
    cg_tensor *v[2] = {cg_transpose(base, 2, 3), cg_transpose(b16, 1, 2)};
    for (int k = 0; k < 2; k++) {
        ck_assert(v[k]->shape[2] == 5 && v[k]->shape[3] == 8 && !cg_is_contiguous(v[k]));
        cg_tensor *d = cg_k_contiguous(v[k]);
        cg_tensor *yv = cg_k_rope(v[k], 2, 10000.0, false), *yd = cg_k_rope(d, 2, 10000.0, false);
        ck_assert_msg(same_bits(yv, yd), "%s", k ? "bfloat16 split heads" : "last stride 5");
        cg_release_all(4, v[k], d, yv, yd);
    }
    cg_release_all(3, base, bthd, b16);
}
END_TEST

/* No elements: no positions ([2, 0, 4]) or a head of width 0 ([2, 3, 0],
 * by the inverse too) give an empty tensor of x's shape and dtype,
 * float32 and bfloat16 */
START_TEST(test_rope_empty)
{
    const int64_t shapes[2][3] = {{2, 0, 4}, {2, 3, 0}};
    for (int k = 0; k < 4; k++) {
        cg_tensor *x = cg_zeros_dtype(k & 1 ? CG_BF16 : CG_F32, 3, shapes[k / 2]);
        cg_tensor *y = cg_k_rope(x, 5, 10000.0, k & 2), *y16 = cg_k_rope_keep_bf16(x, 5, 10000.0);
        ck_assert_msg(y && y16, "%s", cg_last_error());
        ck_assert(cg_same_shape(x, y) && y->dtype == x->dtype && cg_numel(y) == 0);
        ck_assert(cg_same_shape(x, y16) && y16->dtype == x->dtype);
        cg_release_all(3, x, y, y16);
    }
}
END_TEST

typedef struct {
    int64_t start;
    double theta;
    bool view; /* rotate the input's transposed view (split heads' strides) */
} rctx;

static cg_tensor *rope_fn(void *ctx, cg_tensor *const *in)
{
    const rctx *c = ctx;
    cg_tensor *v = c->view ? cg_transpose(in[0], 1, 2) : cg_retain(in[0]);
    cg_tensor *y = v ? cg_rope(v, c->start, c->theta) : NULL;
    cg_release(v);
    return y;
}

START_TEST(test_rope_gradcheck)
{
    cg_rng r = cg_rng_new(2);
    rctx c = {11, 10000.0, false};
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 3, 4, 6));
    x->requires_grad = true;
    cg_gradcheck_report rep;
    ck_assert_msg(cg_gradcheck(rope_fn, &c, 1, &x, NULL, &rep), "%s", rep.message);
    cg_tensor *base = cg_randn(&r, CG_SHAPE(2, 4, 3, 6));
    base->requires_grad = true;
    c = (rctx){0, 100.0, true};
    ck_assert_msg(cg_gradcheck(rope_fn, &c, 1, &base, NULL, &rep), "%s", rep.message);
    cg_release_all(2, x, base);
}
END_TEST

START_TEST(test_rope_threads)
{
    cg_rng r = cg_rng_new(3);
    const int saved = cg_get_num_threads();
    cg_tensor *x = cg_randn(&r, CG_SHAPE(8, 12, 96, 64)), *xb = cg_k_to(x, CG_BF16);
    cg_tensor *y[2][2];
    for (int t = 0; t < 2; t++) {
        cg_set_num_threads(t + 1);
        y[t][0] = cg_k_rope(x, 9, 10000.0, false);
        y[t][1] = cg_k_rope(xb, 9, 10000.0, true);
    }
    cg_set_num_threads(saved);
    ck_assert(same_bits(y[0][0], y[1][0]) && same_bits(y[0][1], y[1][1]));
    cg_release_all(6, x, xb, y[0][0], y[0][1], y[1][0], y[1][1]);
}
END_TEST

/* the rotation as a user's q/k hook: what the built-in computes */
static cg_tensor *hook(void *ctx, cg_tensor *x, bool is_key)
{
    (void)is_key;
    return cg_rope(x, 0, *(const double *)ctx);
}

typedef struct {
    cg_mha *m;
} mctx;

static cg_tensor *mha_fn(void *ctx, cg_tensor *const *in)
{
    const mctx *c = ctx;
    return cg_mha_forward(c->m, in[0], in[0], true, NULL, NULL, NULL);
}

START_TEST(test_rope_mha)
{
    enum { D = 8, H = 2, B = 2, T = 6 };
    cg_rng r = cg_rng_new(4);
    cg_mha *m = cg_mha_new(D, H, &r);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(B, T, D));
    ck_assert(cg_mha_set_rope(m, 10000.0));
    cg_tensor *y = cg_mha_forward(m, x, x, true, NULL, NULL, NULL);
    double theta = 10000.0;
    ck_assert(cg_mha_set_rope(m, 0.0));
    m->qk_hook = hook;
    m->qk_hook_ctx = &theta;
    cg_tensor *yh = cg_mha_forward(m, x, x, true, NULL, NULL, NULL);
    ck_assert(same_bits(y, yh));
    cg_tensor *plain = (m->qk_hook = NULL, cg_mha_forward(m, x, x, true, NULL, NULL, NULL));
    ck_assert(!same_bits(y, plain)); /* the rotation changes the output */
    /* cached: one position at a time, the full forward's rows */
    ck_assert(cg_mha_set_rope(m, 10000.0));
    cg_mha_kv kv = {0};
    float *yv = cg_test_values(y);
    for (int64_t t = 0; t < T; t++) {
        cg_tensor *xt = cg_view_narrow(x, 1, t, 1);
        cg_tensor *yt = cg_mha_forward_cached(m, xt, xt, true, NULL, &kv);
        ck_assert_msg(yt, "%s", cg_last_error());
        float *ytv = cg_test_values(yt);
        for (int b = 0; b < B; b++)
            for (int k = 0; k < D; k++)
                ck_assert_msg(fabsf(ytv[b * D + k] - yv[(b * T + t) * D + k]) < 1e-5f,
                              "t %lld b %d k %d", (long long)t, b, k);
        free(ytv);
        cg_release_all(2, xt, yt);
    }
    ck_assert_int_eq(kv.len, T);
    cg_mha_kv_free(&kv);
    /* gradcheck through the module */
    mctx c = {m};
    x->requires_grad = true;
    cg_gradcheck_report rep;
    ck_assert_msg(cg_gradcheck(mha_fn, &c, 1, &x, NULL, &rep), "%s", rep.message);
    free(yv);
    cg_release_all(4, x, y, yh, plain);
    cg_module_free(CG_MODULE(m));
}
END_TEST

/* the rotation as a hook whose output is a fresh tensor (times 1: the
 * same floats), without the rounding the rotation keeps */
static cg_tensor *hook_fresh(void *ctx, cg_tensor *x, bool is_key)
{
    cg_tensor *y = hook(ctx, x, is_key), *z = y ? cg_muls(y, 1.0f) : NULL;
    cg_release(y);
    return z;
}

/* bf16 precision: the rotation keeps its output's rounding as it writes
 * it (core/rope.c), which attention's products read; the same bits as
 * the rotation as a hook whose output attention rounds itself, forward
 * and every gradient; the kept rounding is a fresh rounding's bits. */
START_TEST(test_rope_mha_bf16)
{
    enum { D = 32, H = 2, B = 2, T = 40 };
    const cg_precision prev = cg_get_matmul_precision();
    cg_set_matmul_precision(CG_PRECISION_BF16);
    cg_rng r = cg_rng_new(5);
    cg_tensor *xr = cg_randn(&r, CG_SHAPE(B, T, D));
    /* fp32 precision: nothing kept (attention reads the floats) */
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_tensor *q32 = cg_k_rope_keep_bf16(xr, 3, 500000.0);
    ck_assert(q32 && !q32->storage->derived);
    cg_release(q32);
    cg_set_matmul_precision(CG_PRECISION_BF16);
    cg_tensor *q = cg_k_rope_keep_bf16(xr, 3, 500000.0), *qc = cg_empty(3, q->shape);
    ck_assert(q->storage->derived);     /* kept as written, before anything asks for it */
    ck_assert(qc && cg_k_copy_(qc, q)); /* a storage of its own: nothing kept */
    cg_tensor *k16 = cg_k_bf16_operand(q), *f16 = cg_k_bf16_operand(qc);
    ck_assert(k16 && f16 && k16->dtype == CG_BF16 && same_bits(k16, f16));
    /* cg_k_rope keeps nothing (no graph: attention reads the floats) */
    cg_tensor *p = cg_k_rope(xr, 3, 500000.0, false);
    ck_assert(!p->storage->derived && q->storage->derived && same_bits(p, q));
    cg_release_all(5, q, qc, k16, f16, p);

    cg_mha *m = cg_mha_new(D, H, &r);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(B, T, D));
    x->requires_grad = true;
    cg_param_list l = {0};
    ck_assert(cg_module_params(CG_MODULE(m), &l));
    ck_assert_int_eq(l.n, 8);
    cg_tensor *y[2];
    float *gx[2], *gw[2][8];
    double theta = 10000.0;
    for (int v = 0; v < 2; v++) { /* 0: built-in, 1: hook */
        ck_assert(cg_mha_set_rope(m, v ? 0.0 : theta));
        m->qk_hook = v ? hook_fresh : NULL;
        m->qk_hook_ctx = &theta;
        y[v] = cg_mha_forward(m, x, x, true, NULL, NULL, NULL);
        cg_tensor *yw = cg_mul(y[v], xr), *s = cg_sum_all(yw);
        ck_assert_msg(s && cg_backward(s, NULL, false), "%s", cg_last_error());
        gx[v] = cg_test_values(cg_grad(x));
        for (int i = 0; i < l.n; i++)
            gw[v][i] = cg_test_values(cg_grad(l.items[i].tensor));
        cg_zero_grad(x);
        for (int i = 0; i < l.n; i++)
            cg_zero_grad(l.items[i].tensor);
        cg_release_all(2, yw, s);
    }
    ck_assert(same_bits(y[0], y[1]));
    ck_assert(!memcmp(gx[0], gx[1], sizeof(float) * B * T * D));
    for (int i = 0; i < l.n; i++)
        ck_assert_msg(
            !memcmp(gw[0][i], gw[1][i], sizeof(float) * (size_t)cg_numel(l.items[i].tensor)), "%s",
            l.items[i].name);
    for (int v = 0; v < 2; v++) {
        cg_release(y[v]);
        free(gx[v]);
        for (int i = 0; i < l.n; i++)
            free(gw[v][i]);
    }
    cg_param_list_free(&l);
    cg_set_matmul_precision(prev);
    cg_release_all(2, x, xr);
    cg_module_free(CG_MODULE(m));
}
END_TEST

START_TEST(test_rope_layers)
{
    const cg_tf_config cfg = {
        .d = 8, .H = 2, .d_ff = 16, .act = CG_ACT_RELU, .norm_first = true, .rope_theta = 10000.0};
    cg_dec_layer *l = cg_dec_layer_new(&cfg, NULL);
    cg_lm_block *b = cg_lm_block_new(&cfg, NULL);
    ck_assert(l && b);
    ck_assert(l->self_attn->rope_theta == 10000.0 && l->cross_attn->rope_theta == 0.0);
    ck_assert(b->attn->rope_theta == 10000.0);
    cg_module_free(CG_MODULE(l));
    cg_module_free(CG_MODULE(b));
    cg_tf_config bad = cfg;
    bad.rope_theta = 0.5;
    CG_ASSERT_FAILS(cg_lm_block_new(&bad, NULL), "rope_theta must be 0 (none) or a finite number");
}
END_TEST

/* One rotation the table kept from the last call could serve wrongly: x,
 * start and theta, its float64 value and its first result's bits */
typedef struct {
    cg_tensor *x;
    int64_t start;
    double theta;
    cg_tensor *first;
    bool ok;
} rkey;

/* a and b, contiguous float32 of one size, within 2e-6 + 1e-5 |b| */
static bool close_to(const cg_tensor *a, const cg_tensor *b)
{
    if (!a || !b || cg_numel(a) != cg_numel(b))
        return false;
    const float *p = cg_data(a), *q = cg_data(b);
    for (int64_t i = 0; i < cg_numel(a); i++)
        if (!(fabsf(p[i] - q[i]) <= 2e-6f + 1e-5f * fabsf(q[i])))
            return false;
    return true;
}

/* 40 rotations of k[0..n) in turn (each call after another key's) */
static void rotate_keys(rkey *k, int n)
{
    for (int i = 0; i < 40; i++) {
        rkey *c = &k[i % n];
        cg_tensor *y = cg_k_rope(c->x, c->start, c->theta, i % 3 == 2);
        cg_tensor *back = i % 3 == 2 ? cg_k_rope(y, c->start, c->theta, false) : NULL;
        /* the inverse after the rotation: x again (the tables are its) */
        c->ok = c->ok && y && (back ? close_to(back, c->x) : same_bits(y, c->first));
        cg_release_all(2, y, back);
    }
}

static void *rotate_thread(void *p)
{
    rotate_keys(p, 1);
    return NULL;
}

/* The cos/sin table kept for the next call (core/rope.c) serves only a call
 * at the same positions, width and theta: calls alternating between keys
 * that differ in each give each key's float64 values and first bits, in
 * one thread and from four threads at once. */
START_TEST(test_rope_tables_kept)
{
    cg_rng r = cg_rng_new(6);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 3, 5, 8)), *wide = cg_randn(&r, CG_SHAPE(2, 3, 5, 12));
    cg_tensor *longer = cg_randn(&r, CG_SHAPE(2, 3, 7, 12));
    /* each key after the one before it differs in one of theta, the
     * width, start and the positions' count */
    rkey k[5] = {{.x = x, .start = 0, .theta = 10000.0},
                 {.x = x, .start = 0, .theta = 500.0},
                 {.x = wide, .start = 0, .theta = 500.0},
                 {.x = wide, .start = 4, .theta = 500.0},
                 {.x = longer, .start = 4, .theta = 500.0}};
    for (int i = 0; i < 5; i++) {
        const int64_t T = k[i].x->shape[2], D = k[i].x->shape[3], n = cg_numel(k[i].x);
        float *xv = cg_test_values(k[i].x), *want = malloc((size_t)n * sizeof *want);
        double *ref = malloc((size_t)n * sizeof *ref);
        rope64(xv, ref, 6, T, D, k[i].start, k[i].theta, 1.0);
        for (int64_t e = 0; e < n; e++)
            want[e] = (float)ref[e];
        k[i].first = cg_k_rope(k[i].x, k[i].start, k[i].theta, false);
        CG_ASSERT_TENSOR(k[i].first, want, 2e-6, 1e-5);
        k[i].ok = true;
        free(xv);
        free(want);
        free(ref);
    }
    rotate_keys(k, 5);
    for (int i = 0; i < 5; i++)
        ck_assert_msg(k[i].ok, "key %d", i);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, rotate_thread, &k[i + 1]), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(k[i + 1].ok, "thread %d", i);
    }
    for (int i = 0; i < 5; i++)
        cg_release(k[i].first);
    cg_release_all(3, x, wide, longer);
}
END_TEST

START_TEST(test_rope_refusals)
{
    cg_rng r = cg_rng_new(5);
    cg_tensor *odd = cg_randn(&r, CG_SHAPE(2, 3, 5)), *one = cg_randn(&r, CG_SHAPE(4));
    cg_tensor *ok = cg_randn(&r, CG_SHAPE(2, 4));
    cg_tensor *ints = cg_zeros_dtype(CG_I64, CG_SHAPE(2, 4));
    CG_ASSERT_FAILS(cg_k_rope(odd, 0, 10000.0, false), "rope: x [2, 3, 5] needs at least 2 dims");
    CG_ASSERT_FAILS(cg_rope(one, 0, 10000.0), "an even last dim");
    CG_ASSERT_FAILS(cg_rope(ints, 0, 10000.0), "float32 or bfloat16 only (got int64)");
    CG_ASSERT_FAILS(cg_rope(ok, -1, 10000.0), "start -1 must be >= 0");
    CG_ASSERT_FAILS(cg_rope(ok, 0, 1.0), "theta 1 a finite number above 1");
    CG_ASSERT_FAILS(cg_rope(ok, 0, INFINITY), "a finite number above 1");
    cg_mha *m = cg_mha_new(4, 2, NULL);
    CG_ASSERT_FAILS(cg_mha_set_rope(m, 0.9), "rotary base theta 0.9 must be a finite number");
    CG_ASSERT_FAILS(cg_mha_set_rope(m, NAN), "must be a finite number above 1");
    ck_assert(m->rope_theta == 0.0);
    cg_release_all(4, odd, one, ok, ints);
    cg_module_free(CG_MODULE(m));
}
END_TEST

static Suite *rope_suite(void)
{
    Suite *s = suite_create("rope");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_rope_forward_f64);
    tcase_add_test(tc, test_rope_far_positions);
    tcase_add_test(tc, test_rope_strided_copies);
    tcase_add_test(tc, test_rope_empty);
    tcase_add_test(tc, test_rope_gradcheck);
    tcase_add_test(tc, test_rope_threads);
    tcase_add_test(tc, test_rope_mha);
    tcase_add_test(tc, test_rope_mha_bf16);
    tcase_add_test(tc, test_rope_layers);
    tcase_add_test(tc, test_rope_tables_kept);
    tcase_add_test(tc, test_rope_refusals);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {rope_suite()};
    return cg_test_run(s, 1);
}
