/* Check suite "rnn": the recurrent modules (nn/rnn.h: cg_rnn, cg_gru,
 * cg_lstm), their one-step modules (cg_rnn_cell_new, ...) and the fused
 * cells (cg_gru_cell, cg_lstm_cell; core/rnn_cell.c).
 *
 * The cells' forward has the bits of the same cell made of ops (add,
 * sigmoid, tanh, mul), and their gradients those ops' within rounding;
 * gradchecks of each cell (strided rows too) and of each module (2
 * layers, a few steps, h0 given and not, batch_first both ways, one and
 * two directions, unbatched), the parameters included; the bits at 1 and
 * 2 threads; dropout between layers in training only; the parameters'
 * names and shapes; bad inputs refused with one line naming the shapes.
 * With lengths (cg_gru_forward_lengths, PyTorch's packed sequences):
 * gradchecks, each sequence as if run alone, NaN in the padding never
 * read, the bits at 1 and 2 threads, bad lengths refused. nn.RNN (tanh,
 * relu) and the cell modules: gradchecks, names, bad inputs.
 * The PyTorch reference is tests/interop/rnn.py (torch_rnn). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/init.h"
#include "nn/rnn.h"
#include "tests/testutil.h"

static bool same_bits(const cg_tensor *a, const cg_tensor *b)
{
    if (!a || !b || cg_numel(a) != cg_numel(b))
        return false;
    float *x = cg_test_values(a), *y = cg_test_values(b);
    const bool same = !memcmp(x, y, (size_t)cg_numel(a) * sizeof(float));
    free(x);
    free(y);
    return same;
}

static cg_tensor *leaf(cg_rng *r, int ndim, const int64_t *shape)
{
    cg_tensor *t = cg_randn(r, ndim, shape);
    t->requires_grad = true;
    return t;
}

/* ------------------------------------------------------------- cells */
/* The GRU cell made of ops (examples/gru.c's before the fused op) */
static cg_tensor *gru_ops(cg_tensor *gi, cg_tensor *gh, cg_tensor *h)
{
    cg_scope *s = cg_scope_begin();
    const int64_t H = h->shape[1];
    cg_tensor *rz = cg_sigmoid(cg_add(cg_narrow(gi, -1, 0, 2 * H), cg_narrow(gh, -1, 0, 2 * H)));
    cg_tensor *r = cg_narrow(rz, -1, 0, H), *z = cg_narrow(rz, -1, H, H);
    cg_tensor *n =
        cg_tanh(cg_add(cg_narrow(gi, -1, 2 * H, H), cg_mul(r, cg_narrow(gh, -1, 2 * H, H))));
    cg_tensor *out = cg_keep(cg_add(n, cg_mul(z, cg_sub(h, n))));
    cg_scope_end(s);
    return out;
}

/* The LSTM cell made of ops: [h' | c'] */
static cg_tensor *lstm_ops(cg_tensor *a, cg_tensor *c)
{
    cg_scope *s = cg_scope_begin();
    const int64_t H = c->shape[1];
    cg_tensor *i = cg_sigmoid(cg_narrow(a, -1, 0, H)), *f = cg_sigmoid(cg_narrow(a, -1, H, H));
    cg_tensor *g = cg_tanh(cg_narrow(a, -1, 2 * H, H)), *o = cg_sigmoid(cg_narrow(a, -1, 3 * H, H));
    cg_tensor *c1 = cg_add(cg_mul(f, c), cg_mul(i, g));
    cg_tensor *out = cg_keep(cg_concat((cg_tensor *[]){cg_mul(o, cg_tanh(c1)), c1}, 2, -1));
    cg_scope_end(s);
    return out;
}

static cg_tensor *gru_cell_fn(void *ctx, cg_tensor *const *in)
{
    return ctx ? gru_ops(in[0], in[1], in[2]) : cg_gru_cell(in[0], in[1], in[2]);
}
static cg_tensor *lstm_cell_fn(void *ctx, cg_tensor *const *in)
{
    return ctx ? lstm_ops(in[0], in[1]) : cg_lstm_cell(in[0], in[1]);
}

/* fused against ops: the forward's bits, the gradients within rounding */
static void cells_against_ops(cg_gradcheck_fn fn, int n, cg_tensor **in)
{
    cg_tensor *out[2], *gr[2][3] = {{0}};
    for (int k = 0; k < 2; k++) {
        cg_rng r = cg_rng_new(3); /* the same weights w for both */
        out[k] = fn(k ? &r : NULL, in);
        ck_assert_msg(out[k], "%s", cg_last_error());
        cg_tensor *w = cg_randn(&r, out[k]->ndim, out[k]->shape), *p = cg_mul(out[k], w);
        cg_tensor *l = cg_sum_all(p);
        cg_release(p);
        ck_assert_msg(l && cg_backward(l, NULL, false), "%s", cg_last_error());
        for (int i = 0; i < n; i++) {
            gr[k][i] = cg_detach(cg_grad(in[i]));
            cg_zero_grad(in[i]);
        }
        cg_release_all(2, w, l);
    }
    ck_assert_msg(same_bits(out[0], out[1]), "fused cell's forward differs from the ops'");
    for (int i = 0; i < n; i++) {
        float *e = cg_test_values(gr[1][i]);
        CG_ASSERT_TENSOR(gr[0][i], e, 1e-6, 1e-5);
        free(e);
        cg_release_all(2, gr[0][i], gr[1][i]);
    }
    cg_release_all(2, out[0], out[1]);
}

START_TEST(test_cells_match_ops)
{
    cg_rng r = cg_rng_new(1);
    const int64_t B = 5, H = 7;
    cg_tensor *g[3] = {leaf(&r, CG_SHAPE(B, 3 * H)), leaf(&r, CG_SHAPE(B, 3 * H)),
                       leaf(&r, CG_SHAPE(B, H))};
    cells_against_ops(gru_cell_fn, 3, g);
    cg_tensor *l[2] = {leaf(&r, CG_SHAPE(B, 4 * H)), leaf(&r, CG_SHAPE(B, H))};
    cells_against_ops(lstm_cell_fn, 2, l);
    cg_release_all(5, g[0], g[1], g[2], l[0], l[1]);
}
END_TEST

/* The cells' gradchecks: contiguous, then on strided rows (views of wider
 * tensors, a transposed layout copied) and with one input constant */
START_TEST(test_cells_gradcheck)
{
    cg_rng r = cg_rng_new(2);
    cg_gradcheck_report rep;
    for (int layout = 0; layout < 3; layout++) {
        cg_tensor *gi = cg_test_randn_layout(&r, CG_SHAPE(4, 9), layout);
        cg_tensor *gh = cg_test_randn_layout(&r, CG_SHAPE(4, 9), layout == 1 ? 0 : layout);
        cg_tensor *h = cg_test_randn_layout(&r, CG_SHAPE(4, 3), layout);
        cg_tensor *in[3] = {gi, gh, h};
        for (int i = 0; i < 3; i++)
            in[i]->requires_grad = true;
        ck_assert_msg(cg_gradcheck(gru_cell_fn, NULL, 3, in, NULL, &rep), "gru %d: %s", layout,
                      rep.message);
        gh->requires_grad = false;
        ck_assert_msg(cg_gradcheck(gru_cell_fn, NULL, 3, in, NULL, &rep), "gru %d: %s", layout,
                      rep.message);
        cg_tensor *a = cg_test_randn_layout(&r, CG_SHAPE(4, 12), layout);
        cg_tensor *c = cg_test_randn_layout(&r, CG_SHAPE(4, 3), layout);
        cg_tensor *li[2] = {a, c};
        a->requires_grad = c->requires_grad = true;
        ck_assert_msg(cg_gradcheck(lstm_cell_fn, NULL, 2, li, NULL, &rep), "lstm %d: %s", layout,
                      rep.message);
        cg_release_all(5, gi, gh, h, a, c);
    }
}
END_TEST

/* ----------------------------------------------------------- modules */
typedef struct {
    cg_rnn *m;
    bool h0;              /* inputs[1] (and [2], LSTM) are the states */
    const cg_tensor *len; /* lengths, or NULL */
} mod_ctx;

/* output and h_n (and c_n) flattened into one tensor */
static cg_tensor *module_fn(void *vctx, cg_tensor *const *in)
{
    const mod_ctx *c = vctx;
    cg_scope *s = cg_scope_begin();
    cg_tensor *hn = NULL, *cn = NULL, *y;
    cg_tensor *h0 = c->h0 ? in[1] : NULL, *c0 = c->h0 && c->m->mode == CG_RNN_LSTM ? in[2] : NULL;
    if (c->m->mode == CG_RNN_LSTM)
        y = c->len ? cg_lstm_forward_lengths(c->m, in[0], c->len, h0, c0, &hn, &cn)
                   : cg_lstm_forward(c->m, in[0], h0, c0, &hn, &cn);
    else if (c->m->mode == CG_RNN_GRU)
        y = c->len ? cg_gru_forward_lengths(c->m, in[0], c->len, h0, &hn)
                   : cg_gru_forward(c->m, in[0], h0, &hn);
    else
        y = c->len ? cg_rnn_forward_lengths(c->m, in[0], c->len, h0, &hn)
                   : cg_rnn_forward(c->m, in[0], h0, &hn);
    cg_tensor *parts[3] = {cg_reshape(y, CG_SHAPE(-1)), cg_reshape(hn, CG_SHAPE(-1)),
                           cn ? cg_reshape(cn, CG_SHAPE(-1)) : NULL};
    cg_tensor *out = y && hn ? cg_keep(cg_concat(parts, cn ? 3 : 2, 0)) : NULL;
    cg_scope_end(s); /* y, hn, cn and the parts too */
    return out;
}

/* gradcheck of a module of cfg over x (and the states when h0), its
 * parameters among the inputs; with len, over a padded batch of len's
 * lengths (4 steps) */
/* relu's kink: a pre-activation within a step of 0 gives the numeric
 * gradient half the slope; smaller steps keep the few near 0 (one at
 * -0.0016 in test_cell_modules_gradcheck) on their side, the projections'
 * too (autograd/gradcheck.h: proj_eps 1e-3 for relu) */
static cg_gradcheck_opts relu_opts(void)
{
    cg_gradcheck_opts o = cg_gradcheck_defaults();
    o.eps = 1e-4;
    o.proj_eps = 1e-3;
    return o;
}

static cg_rnn *module_new(const cg_rnn_config *cfg, cg_rnn_mode mode, cg_rng *r)
{
    return mode == CG_RNN_LSTM  ? cg_lstm_new(cfg, r)
           : mode == CG_RNN_GRU ? cg_gru_new(cfg, r)
                                : cg_rnn_new(cfg, r);
}

static void module_gradcheck_len(const cg_rnn_config *cfg, cg_rnn_mode mode, bool h0,
                                 bool unbatched, const cg_tensor *len)
{
    cg_rng r = cg_rng_new(7);
    cg_rnn *m = module_new(cfg, mode, &r);
    const bool lstm = mode == CG_RNN_LSTM;
    ck_assert_msg(m, "%s", cg_last_error());
    const int64_t T = len ? 4 : 3, B = len ? len->shape[0] : 2, D = cfg->bidirectional ? 2 : 1;
    const int64_t LD = cfg->num_layers * D;
    cg_tensor *in[40] = {0};
    int n = 0;
    if (unbatched)
        in[n++] = leaf(&r, CG_SHAPE(T, cfg->input_size));
    else if (cfg->batch_first)
        in[n++] = leaf(&r, CG_SHAPE(B, T, cfg->input_size));
    else
        in[n++] = leaf(&r, CG_SHAPE(T, B, cfg->input_size));
    const int first_param = h0 ? (lstm ? 3 : 2) : 1;
    for (int k = 1; k < first_param; k++)
        in[n++] = unbatched ? leaf(&r, CG_SHAPE(LD, cfg->hidden_size))
                            : leaf(&r, CG_SHAPE(LD, B, cfg->hidden_size));
    for (int i = 0; i < m->base.n_params && n < 40; i++)
        in[n++] = cg_retain(m->base.params[i].tensor);
    mod_ctx c = {m, h0, len};
    cg_gradcheck_report rep;
    const cg_gradcheck_opts o = relu_opts();
    ck_assert_msg(cg_gradcheck(module_fn, &c, n, in, cfg->relu ? &o : NULL, &rep),
                  "%s %d layers %d bf %d bi %d h0 %d len %d: %s", m->base.type, cfg->relu,
                  cfg->num_layers, cfg->batch_first, cfg->bidirectional, h0, len != NULL,
                  rep.message);
    for (int i = 0; i < n; i++)
        cg_release(in[i]);
    cg_module_free(CG_MODULE(m));
}

static void module_gradcheck(const cg_rnn_config *cfg, cg_rnn_mode mode, bool h0, bool unbatched)
{
    module_gradcheck_len(cfg, mode, h0, unbatched, NULL);
}

START_TEST(test_modules_gradcheck)
{
    for (int mode = CG_RNN_GRU; mode <= CG_RNN_LSTM; mode++)
        for (int v = 0; v < 8; v++) {
            cg_rnn_config cfg = CG_RNN_CONFIG(3, 4);
            cfg.num_layers = 2;
            cfg.batch_first = v & 1;
            cfg.bidirectional = (v >> 2) & 1;
            cfg.bias = v != 6;
            module_gradcheck(&cfg, (cg_rnn_mode)mode, (v >> 1) & 1, false);
        }
    cg_rnn_config cfg = CG_RNN_CONFIG(3, 4);
    cfg.bidirectional = true;
    module_gradcheck(&cfg, CG_RNN_GRU, true, true);
    module_gradcheck(&cfg, CG_RNN_LSTM, false, true);
    cfg.batch_first = true; /* which an unbatched x ignores, as in PyTorch */
    module_gradcheck(&cfg, CG_RNN_GRU, false, true);
    module_gradcheck(&cfg, CG_RNN_LSTM, true, true);
}
END_TEST

/* nn.RNN, tanh and relu: every layout, with and without lengths */
START_TEST(test_elman_gradcheck)
{
    cg_tensor *len = cg_from_i64(CG_SHAPE(3), (const int64_t[]){2, 4, 1});
    for (int v = 0; v < 8; v++) {
        cg_rnn_config cfg = CG_RNN_CONFIG(3, 4);
        cfg.num_layers = 2;
        cfg.relu = v & 1;
        cfg.batch_first = (v >> 1) & 1;
        cfg.bidirectional = (v >> 2) & 1;
        cfg.bias = v != 5;
        module_gradcheck_len(&cfg, CG_RNN_TANH, v & 2, false, v & 4 ? len : NULL);
    }
    cg_rnn_config cfg = CG_RNN_CONFIG(3, 4);
    cfg.relu = true;
    module_gradcheck(&cfg, CG_RNN_TANH, true, true);
    cg_release(len);
}
END_TEST

/* The one-step modules: h' (and c') of x and the states given */
typedef struct {
    cg_rnn_cell *m;
    bool states;
} cell_ctx;

static cg_tensor *cell_module_fn(void *vctx, cg_tensor *const *in)
{
    const cell_ctx *c = vctx;
    cg_tensor *h = c->states ? in[1] : NULL, *cc = c->states ? in[2] : NULL, *c1 = NULL, *out;
    if (c->m->mode == CG_RNN_LSTM) {
        cg_tensor *h1 = cg_lstm_cell_forward(c->m, in[0], h, cc, &c1);
        out = h1 && c1 ? cg_concat((cg_tensor *[]){h1, c1}, 2, -1) : NULL;
        cg_release_all(2, h1, c1);
        return out;
    }
    return c->m->mode == CG_RNN_GRU ? cg_gru_cell_forward(c->m, in[0], h)
                                    : cg_rnn_cell_forward(c->m, in[0], h);
}

START_TEST(test_cell_modules_gradcheck)
{
    for (int v = 0; v < 16; v++) {
        const cg_rnn_mode mode = (cg_rnn_mode)(v & 3);
        const bool states = v & 4, unb = v & 8, bias = v != 13;
        cg_rng r = cg_rng_new(5);
        cg_rnn_cell *m = mode == CG_RNN_LSTM ? cg_lstm_cell_new(3, 4, bias, &r)
                         : mode == CG_RNN_GRU
                             ? cg_gru_cell_new(3, 4, bias, &r)
                             : cg_rnn_cell_new(3, 4, bias, mode == CG_RNN_RELU, &r);
        ck_assert_msg(m, "%s", cg_last_error());
        cg_tensor *in[8] = {unb ? leaf(&r, CG_SHAPE(3)) : leaf(&r, CG_SHAPE(2, 3))};
        int n = 1;
        if (states)
            for (int k = 0; k < 2; k++)
                in[n++] = unb ? leaf(&r, CG_SHAPE(4)) : leaf(&r, CG_SHAPE(2, 4));
        for (int i = 0; i < m->base.n_params; i++)
            in[n++] = cg_retain(m->base.params[i].tensor);
        cell_ctx c = {m, states};
        cg_gradcheck_report rep;
        const cg_gradcheck_opts o = relu_opts();
        ck_assert_msg(
            cg_gradcheck(cell_module_fn, &c, n, in, mode == CG_RNN_RELU ? &o : NULL, &rep),
            "%s mode %d states %d unbatched %d: %s", m->base.type, (int)mode, states, unb,
            rep.message);
        for (int i = 0; i < n; i++)
            cg_release(in[i]);
        cg_module_free(CG_MODULE(m));
    }
}
END_TEST

/* Over a padded batch: sequences ending at different steps (unsorted, a
 * tie, the longest shorter than x), every layout */
START_TEST(test_lengths_gradcheck)
{
    cg_tensor *len[2] = {cg_from_i64(CG_SHAPE(3), (const int64_t[]){2, 4, 1}),
                         cg_from_i64(CG_SHAPE(4), (const int64_t[]){3, 1, 3, 2})};
    for (int mode = CG_RNN_GRU; mode <= CG_RNN_LSTM; mode++)
        for (int v = 0; v < 8; v++) {
            cg_rnn_config cfg = CG_RNN_CONFIG(3, 4);
            cfg.num_layers = 1 + (v & 1);
            cfg.batch_first = (v >> 1) & 1;
            cfg.bidirectional = v != 0 && v != 5;
            module_gradcheck_len(&cfg, (cg_rnn_mode)mode, (v >> 2) & 1, false, len[v & 1]);
        }
    cg_release_all(2, len[0], len[1]);
}
END_TEST

/* The padded batch of a 2-layer bidirectional module (batch_first) with
 * NaN in every padded step: out[0] the output, out[1] h_n, out[2] x's
 * gradient of sum(output * w) + sum(h_n) (out[3], out[4]: c_n and the
 * gradient of h0 for the LSTM, h0 given) */
static const int64_t LEN[4] = {3, 5, 1, 5}, LT = 6;

static cg_rnn *len_module(bool lstm)
{
    cg_rnn_config cfg = CG_RNN_CONFIG(3, 4);
    cfg.num_layers = 2;
    cfg.bidirectional = cfg.batch_first = true;
    cg_rng r = cg_rng_new(11);
    return lstm ? cg_lstm_new(&cfg, &r) : cg_gru_new(&cfg, &r);
}

static void run_padded(cg_rnn *m, cg_tensor *x, cg_tensor *h0, const cg_tensor *len,
                       cg_tensor **out)
{
    cg_tensor *hn = NULL, *cn = NULL;
    cg_tensor *y = m->mode == CG_RNN_LSTM ? cg_lstm_forward_lengths(m, x, len, h0, h0, &hn, &cn)
                                          : cg_gru_forward_lengths(m, x, len, h0, &hn);
    ck_assert_msg(y, "%s", cg_last_error());
    cg_rng r = cg_rng_new(2);
    cg_tensor *w = cg_randn(&r, y->ndim, y->shape), *p = cg_mul(y, w), *a = cg_sum_all(p);
    cg_tensor *b = cg_sum_all(hn), *l = cg_add(a, b);
    ck_assert_msg(l && cg_backward(l, NULL, false), "%s", cg_last_error());
    out[0] = y, out[1] = hn, out[2] = cg_detach(cg_grad(x)), out[3] = cn;
    out[4] = cg_detach(cg_grad(h0));
    cg_zero_grad(x), cg_zero_grad(h0);
    for (int i = 0; i < m->base.n_params; i++)
        cg_zero_grad(m->base.params[i].tensor);
    cg_release_all(6, w, p, a, b, l, NULL);
}

/* Each sequence of the padded batch as if run alone (x[b, :len] through
 * cg_gru_forward): its output steps, zeros after them, its h_n and c_n;
 * NaN in the padding never read (the output and x's gradient finite, the
 * padding's gradient 0); the same bits at 1 and 2 threads */
START_TEST(test_lengths_each_alone)
{
    const int saved = cg_get_num_threads();
    const int64_t B = 4;
    for (int lstm = 0; lstm < 2; lstm++) {
        cg_rnn *m = len_module(lstm);
        cg_rng r = cg_rng_new(4);
        cg_tensor *x = leaf(&r, CG_SHAPE(B, LT, 3)), *h0 = leaf(&r, CG_SHAPE(4, B, 4));
        cg_tensor *len = cg_from_i64(CG_SHAPE(B), LEN);
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = LEN[b]; t < LT; t++)
                ck_assert(cg_set(x, (const int64_t[]){b, t, 1}, NAN));
        cg_tensor *o1[5], *o2[5];
        cg_set_num_threads(1);
        run_padded(m, x, h0, len, o1);
        cg_set_num_threads(2);
        run_padded(m, x, h0, len, o2);
        for (int i = 0; i < 5; i++)
            ck_assert_msg(!o1[i] || same_bits(o1[i], o2[i]),
                          "%s: result %d differs at 1 and 2 "
                          "threads",
                          lstm ? "LSTM" : "GRU", i);
        for (int64_t b = 0; b < B; b++) {
            cg_tensor *row = cg_select(x, 0, b), *xb = cg_narrow(row, 0, 0, LEN[b]); /* [len, 3] */
            cg_tensor *hb = cg_select(h0, 1, b), *hn = NULL, *cn = NULL;
            cg_tensor *yb =
                lstm ? cg_lstm_forward(m, xb, hb, hb, &hn, &cn) : cg_gru_forward(m, xb, hb, &hn);
            ck_assert_msg(yb, "%s", cg_last_error());
            for (int64_t t = 0; t < LT; t++)
                for (int64_t k = 0; k < 8; k++) {
                    const float got = cg_get(o1[0], (const int64_t[]){b, t, k});
                    const float want = t < LEN[b] ? cg_get(yb, (const int64_t[]){t, k}) : 0.0f;
                    ck_assert_msg(fabsf(got - want) <= 1e-6f,
                                  "%s: output[%lld, %lld, %lld] %g, "
                                  "alone %g",
                                  lstm ? "LSTM" : "GRU", (long long)b, (long long)t, (long long)k,
                                  got, want);
                }
            for (int64_t s = 0; s < 4; s++)
                for (int64_t k = 0; k < 4; k++) {
                    const int64_t i[3] = {s, b, k}, j[2] = {s, k};
                    ck_assert(fabsf(cg_get(o1[1], i) - cg_get(hn, j)) <= 1e-6f);
                    ck_assert(!cn || fabsf(cg_get(o1[3], i) - cg_get(cn, j)) <= 1e-6f);
                }
            for (int64_t t = 0; t < LT; t++)
                for (int64_t k = 0; k < 3; k++) {
                    const float g = cg_get(o1[2], (const int64_t[]){b, t, k});
                    ck_assert_msg(t < LEN[b] ? isfinite(g) && g != 0.0f : g == 0.0f,
                                  "x's gradient at [%lld, %lld, %lld] is %g (length %lld)",
                                  (long long)b, (long long)t, (long long)k, g, (long long)LEN[b]);
                }
            cg_release_all(6, row, xb, hb, hn, cn, yb);
        }
        for (int i = 0; i < 5; i++)
            cg_release_all(2, o1[i], o2[i]);
        cg_release_all(3, x, h0, len);
        cg_module_free(CG_MODULE(m));
    }
    cg_set_num_threads(saved);
}
END_TEST

/* A cell stepped over x gives the bits of the one-layer module of the same
 * weights, every mode; the RNN's step is act(x W_ih^T + b_ih + h W_hh^T +
 * b_hh) as ops compute it */
START_TEST(test_cells_step_as_modules)
{
    for (int mode = CG_RNN_TANH; mode <= CG_RNN_LSTM; mode++) {
        cg_rng r = cg_rng_new(8);
        cg_rnn_config cfg = CG_RNN_CONFIG(3, 5);
        cfg.relu = mode == CG_RNN_RELU;
        cg_rnn *m = module_new(&cfg, (cg_rnn_mode)mode, &r);
        cg_rnn_cell *c = mode == CG_RNN_LSTM ? cg_lstm_cell_new(3, 5, true, cg_init_skip())
                         : mode == CG_RNN_GRU
                             ? cg_gru_cell_new(3, 5, true, cg_init_skip())
                             : cg_rnn_cell_new(3, 5, true, cfg.relu, cg_init_skip());
        ck_assert(m && c && c->base.n_params == 4);
        cg_no_grad_begin();
        for (int i = 0; i < 4; i++)
            ck_assert_msg(cg_copy_(c->w[i], m->w[i]), "%s", cg_last_error());
        cg_no_grad_end();
        cg_tensor *x = cg_randn(&r, CG_SHAPE(4, 2, 3)), *h0 = cg_randn(&r, CG_SHAPE(1, 2, 5));
        cg_tensor *hn = NULL, *cn = NULL;
        cg_tensor *y = mode == CG_RNN_LSTM ? cg_lstm_forward(m, x, h0, h0, &hn, &cn)
                                           : cg_rnn_forward(m, x, h0, &hn);
        if (mode == CG_RNN_GRU)
            cg_release(y), cg_release(hn), y = cg_gru_forward(m, x, h0, &hn);
        ck_assert_msg(y, "%s", cg_last_error());
        cg_tensor *h = cg_select(h0, 0, 0), *cc = cg_retain(h);
        for (int64_t t = 0; t < 4; t++) {
            cg_tensor *xt = cg_select(x, 0, t), *c1 = NULL, *h1;
            if (mode == CG_RNN_LSTM) {
                h1 = cg_lstm_cell_forward(c, xt, h, cc, &c1);
            } else if (mode == CG_RNN_GRU) {
                h1 = cg_gru_cell_forward(c, xt, h);
            } else {
                h1 = cg_rnn_cell_forward(c, xt, h);
                cg_scope *sc = cg_scope_begin();
                cg_tensor *a =
                    cg_add(cg_affine(xt, c->w[0], c->w[2]), cg_affine(h, c->w[1], c->w[3]));
                cg_tensor *want = mode == CG_RNN_RELU ? cg_relu(a) : cg_tanh(a);
                float *e = cg_test_values(want);
                CG_ASSERT_TENSOR(h1, e, 1e-6, 1e-6);
                free(e);
                cg_scope_end(sc);
            }
            cg_tensor *yt = cg_select(y, 0, t);
            ck_assert_msg(same_bits(yt, h1), "%s step %lld: not the module's bits", c->base.type,
                          (long long)t);
            cg_release_all(4, xt, yt, h, cc);
            h = h1, cc = c1;
        }
        ck_assert(!cn || same_bits(cn, cc));
        cg_release_all(8, x, h0, hn, cn, y, h, cc, NULL);
        cg_module_free(CG_MODULE(m));
        cg_module_free(CG_MODULE(c));
    }
}
END_TEST

/* The one-step modules' names and bad inputs */
START_TEST(test_cell_modules_refused)
{
    CG_ASSERT_REFUSED(cg_gru_cell_new(0, 4, true, NULL) == NULL,
                      "GRUCell: input_size must be >= 1 (got 0)");
    CG_ASSERT_REFUSED(cg_rnn_cell_new(3, -2, true, false, NULL) == NULL,
                      "RNNCell: hidden_size must be >= 1 (got -2)");
    cg_rnn_cell *g = cg_gru_cell_new(3, 4, true, NULL), *l = cg_lstm_cell_new(3, 4, false, NULL);
    ck_assert(g && l && g->base.n_params == 4 && l->base.n_params == 2);
    static const char *names[] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
    for (int i = 0; i < 4; i++)
        ck_assert_str_eq(g->base.params[i].name, names[i]);
    ck_assert_int_eq(g->w[0]->shape[0], 12);
    ck_assert_int_eq(l->w[1]->shape[0], 16);
    ck_assert_ptr_null(l->w[2]);
    cg_rng r = cg_rng_new(1);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 3)), *x4 = cg_randn(&r, CG_SHAPE(2, 4));
    cg_tensor *h = cg_zeros(CG_SHAPE(2, 4)), *h3 = cg_zeros(CG_SHAPE(3, 4));
    cg_tensor *hu = cg_zeros(CG_SHAPE(4)), *c1 = NULL;
    CG_ASSERT_REFUSED(cg_gru_cell_forward(g, x4, NULL) == NULL,
                      "GRUCell: input [2, 4], expected [batch, 3] or [3] unbatched");
    CG_ASSERT_REFUSED(cg_gru_cell_forward(g, x, h3) == NULL,
                      "GRUCell: h is [3, 4], expected [2, 4] (batch, hidden_size)");
    CG_ASSERT_REFUSED(cg_gru_cell_forward(g, x, hu) == NULL, "GRUCell: h is [4], expected [2, 4]");
    CG_ASSERT_REFUSED(cg_lstm_cell_forward(l, x, h, NULL, &c1) == NULL && !c1,
                      "cg_lstm_cell_forward: h and c are both given or both NULL");
    CG_ASSERT_REFUSED(cg_lstm_cell_forward(l, x, NULL, NULL, NULL) == NULL,
                      "cg_lstm_cell_forward: c_out is NULL");
    CG_ASSERT_REFUSED(cg_lstm_cell_forward(l, x, h, h3, &c1) == NULL,
                      "LSTMCell: c is [3, 4], expected [2, 4]");
    CG_ASSERT_REFUSED(cg_rnn_cell_forward(g, x, NULL) == NULL,
                      "cg_rnn_cell_forward: the module is a GRUCell");
    CG_ASSERT_REFUSED(cg_gru_cell_forward(l, x, NULL) == NULL,
                      "cg_gru_cell_forward: the module is an LSTMCell");
    CG_ASSERT_REFUSED(cg_gru_cell_forward(g, NULL, NULL) == NULL, "");
    cg_release_all(5, x, x4, h, h3, hu);
    cg_module_free(CG_MODULE(g));
    cg_module_free(CG_MODULE(l));
}
END_TEST

/* names and shapes as PyTorch's, in its order */
START_TEST(test_modules_params)
{
    cg_rnn_config cfg = CG_RNN_CONFIG(3, 5);
    cfg.num_layers = 2;
    cfg.bidirectional = true;
    cg_lstm *m = cg_lstm_new(&cfg, NULL);
    ck_assert_msg(m, "%s", cg_last_error());
    static const char *names[] = {
        "weight_ih_l0",         "weight_hh_l0",         "bias_ih_l0",         "bias_hh_l0",
        "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse",
        "weight_ih_l1",         "weight_hh_l1",         "bias_ih_l1",         "bias_hh_l1",
        "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"};
    ck_assert_int_eq(m->base.n_params, 16);
    for (int i = 0; i < 16; i++) {
        ck_assert_str_eq(m->base.params[i].name, names[i]);
        const cg_tensor *t = m->base.params[i].tensor;
        ck_assert_int_eq(t->shape[0], 20);
        if (i % 4 == 0)
            ck_assert_int_eq(t->shape[1], i < 8 ? 3 : 10);
        /* U(-1/sqrt(5), 1/sqrt(5)) */
        float *v = cg_test_values(t);
        for (int64_t k = 0; k < cg_numel(t); k++)
            ck_assert(fabsf(v[k]) <= 1.0f / sqrtf(5.0f));
        free(v);
    }
    cg_module_free(CG_MODULE(m));
    cfg.bias = false;
    cfg.bidirectional = false;
    cg_gru *g = cg_gru_new(&cfg, NULL);
    ck_assert_int_eq(g->base.n_params, 4);
    ck_assert_str_eq(g->base.params[1].name, "weight_hh_l0");
    ck_assert_int_eq(g->base.params[2].tensor->shape[1], 5);
    cg_module_free(CG_MODULE(g));
    /* cg_module_reset_parameters: every parameter U(-1/sqrt(H), 1/sqrt(H)),
     * none left zero (made with cg_init_skip: zeros) */
    cfg = CG_RNN_CONFIG(3, 16);
    cfg.bidirectional = true;
    cg_lstm *z = cg_lstm_new(&cfg, cg_init_skip());
    cg_rng r = cg_rng_new(9);
    ck_assert_msg(z && cg_module_reset_parameters(CG_MODULE(z), &r), "%s", cg_last_error());
    for (int i = 0; i < z->base.n_params; i++) {
        float *v = cg_test_values(z->base.params[i].tensor), lo = 0, hi = 0;
        for (int64_t k = 0; k < cg_numel(z->base.params[i].tensor); k++)
            lo = fminf(lo, v[k]), hi = fmaxf(hi, v[k]);
        ck_assert_msg(lo < -0.2f && lo >= -0.25f && hi > 0.2f && hi <= 0.25f, "%s: [%g, %g]",
                      z->base.params[i].name, (double)lo, (double)hi);
        free(v);
    }
    cg_module_free(CG_MODULE(z));
}
END_TEST

/* one forward and backward of a module big enough for a team (a cell's
 * rows split among threads, the products too): outputs and gradients */
static void run_threads(bool lstm, int threads, cg_tensor **res)
{
    cg_set_num_threads(threads);
    cg_rng r = cg_rng_new(11);
    cg_rnn_config cfg = CG_RNN_CONFIG(32, 160);
    cfg.num_layers = 2;
    cg_rnn *m = lstm ? cg_lstm_new(&cfg, &r) : cg_gru_new(&cfg, &r);
    cg_tensor *x = leaf(&r, CG_SHAPE(3, 64, 32)), *hn = NULL, *cn = NULL;
    cg_tensor *y =
        lstm ? cg_lstm_forward(m, x, NULL, NULL, &hn, &cn) : cg_gru_forward(m, x, NULL, &hn);
    ck_assert_msg(y && hn, "%s", cg_last_error());
    cg_tensor *yy = cg_mul(y, y), *a = cg_sum_all(yy), *b = cg_sum_all(hn), *l = cg_add(a, b);
    cg_release_all(3, yy, a, b);
    ck_assert_msg(cg_backward(l, NULL, false), "%s", cg_last_error());
    res[0] = y;
    res[1] = cg_detach(cg_grad(x));
    res[2] = cg_detach(cg_grad(m->w[1]));
    res[3] = cg_detach(cg_grad(m->w[4]));
    cg_release_all(4, x, hn, cn, l);
    cg_module_free(CG_MODULE(m));
}

START_TEST(test_modules_threads)
{
    const int saved = cg_get_num_threads();
    for (int lstm = 0; lstm < 2; lstm++) {
        cg_tensor *a[4], *b[4];
        run_threads(lstm, 1, a);
        run_threads(lstm, 2, b);
        for (int i = 0; i < 4; i++) {
            ck_assert_msg(same_bits(a[i], b[i]), "%s: result %d differs at 1 and 2 threads",
                          lstm ? "LSTM" : "GRU", i);
            cg_release_all(2, a[i], b[i]);
        }
    }
    cg_set_num_threads(saved);
}
END_TEST

/* dropout between layers: in training only, never after the last layer */
START_TEST(test_modules_dropout)
{
    cg_rng r = cg_rng_new(4);
    cg_rnn_config cfg = CG_RNN_CONFIG(3, 6);
    cfg.num_layers = 2;
    cfg.dropout = 0.5f;
    cg_gru *m = cg_gru_new(&cfg, &r);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(4, 2, 3));
    cg_tensor *y_train = cg_gru_forward(m, x, NULL, NULL);
    cg_module_train(CG_MODULE(m), false);
    cg_tensor *y_eval = cg_gru_forward(m, x, NULL, NULL),
              *y_eval2 = cg_gru_forward(m, x, NULL, NULL);
    ck_assert(y_train && y_eval && y_eval2);
    ck_assert(!same_bits(y_train, y_eval));
    ck_assert(same_bits(y_eval, y_eval2));
    cfg.num_layers = 1; /* nothing to drop between */
    cg_gru *one = cg_gru_new(&cfg, NULL);
    cg_tensor *a = cg_gru_forward(one, x, NULL, NULL);
    cg_module_train(CG_MODULE(one), false);
    cg_tensor *b = cg_gru_forward(one, x, NULL, NULL);
    ck_assert(same_bits(a, b));
    cg_release_all(6, x, y_train, y_eval, y_eval2, a, b);
    cg_module_free(CG_MODULE(m));
    cg_module_free(CG_MODULE(one));
}
END_TEST

/* the graph of T steps of one layer: the input's product, then per step
 * the step's view, the hidden product, the cell (GRU; the LSTM's two views
 * of [h' | c'] more), then the output's stack (one node) */
START_TEST(test_modules_graph_nodes)
{
    cg_rng r = cg_rng_new(12);
    cg_rnn_config cfg = CG_RNN_CONFIG(3, 6);
    cg_tensor *x = leaf(&r, CG_SHAPE(10, 2, 3));
    for (int lstm = 0; lstm < 2; lstm++) {
        cg_rnn *m = lstm ? cg_lstm_new(&cfg, &r) : cg_gru_new(&cfg, &r);
        cg_tensor *y =
            lstm ? cg_lstm_forward(m, x, NULL, NULL, NULL, NULL) : cg_gru_forward(m, x, NULL, NULL);
        ck_assert_msg(y, "%s", cg_last_error());
        /* (the last step's view of c is c_n's, not y's) */
        ck_assert_int_eq(cg_graph_size(y), lstm ? 5 * 10 + 1 : 3 * 10 + 2);
        cg_release(y);
        cg_module_free(CG_MODULE(m));
    }
    /* the RNN as the GRU; a padded batch (lengths 10 and 4) the same three
     * nodes a step and five more: the packing (x's rows viewed, gathered),
     * the state's rows cut once where the short sequence ends, the
     * output's unpacking (a scatter and a reshape; the steps' outputs
     * joined by one concat, as the stack) */
    cg_rnn *e = cg_rnn_new(&cfg, &r);
    cg_gru *g = cg_gru_new(&cfg, &r);
    cg_tensor *len = cg_from_i64(CG_SHAPE(2), (const int64_t[]){10, 4});
    cg_tensor *y = cg_rnn_forward(e, x, NULL, NULL),
              *yl = cg_gru_forward_lengths(g, x, len, NULL, NULL);
    ck_assert_msg(y && yl, "%s", cg_last_error());
    ck_assert_int_eq(cg_graph_size(y), 3 * 10 + 2);
    ck_assert_int_eq(cg_graph_size(yl), 3 * 10 + 2 + 5);
    cg_release_all(4, y, yl, len, x);
    cg_module_free(CG_MODULE(e));
    cg_module_free(CG_MODULE(g));
}
END_TEST

/* no graph: the same output, nothing recorded */
START_TEST(test_modules_no_grad)
{
    cg_rng r = cg_rng_new(5);
    cg_rnn_config cfg = CG_RNN_CONFIG(3, 6);
    cg_lstm *m = cg_lstm_new(&cfg, &r);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(4, 2, 3)), *hn, *cn;
    cg_tensor *y = cg_lstm_forward(m, x, NULL, NULL, &hn, &cn);
    ck_assert(y && y->node && hn && cn);
    cg_no_grad_begin();
    cg_tensor *hn2, *cn2, *y2 = cg_lstm_forward(m, x, NULL, NULL, &hn2, &cn2);
    cg_no_grad_end();
    ck_assert(y2 && !y2->node && same_bits(y, y2) && same_bits(hn, hn2) && same_bits(cn, cn2));
    /* the last step's h is output's last row, c_n [1, 2, 6] */
    ck_assert_int_eq(cn->ndim, 3);
    ck_assert_int_eq(cn->shape[2], 6);
    cg_tensor *last = cg_select(y, 0, 3), *h = cg_select(hn, 0, 0);
    ck_assert(same_bits(last, h));
    cg_release_all(9, x, y, hn, cn, y2, hn2, cn2, last, h);
    cg_module_free(CG_MODULE(m));
}
END_TEST

/* an unbatched x [T, I] (batch_first ignored, as in PyTorch): the batch
 * of one's results, squeezed */
START_TEST(test_modules_unbatched)
{
    cg_rng r = cg_rng_new(8);
    cg_rnn_config cfg = CG_RNN_CONFIG(3, 4);
    cfg.num_layers = 2;
    cfg.bidirectional = cfg.batch_first = true;
    for (int lstm = 0; lstm < 2; lstm++) {
        cg_rnn *m = lstm ? cg_lstm_new(&cfg, &r) : cg_gru_new(&cfg, &r);
        cg_tensor *x = cg_randn(&r, CG_SHAPE(5, 3)), *xb = cg_unsqueeze(x, 0);
        cg_tensor *hn, *cn = NULL, *hb, *cb = NULL;
        cg_tensor *y =
            lstm ? cg_lstm_forward(m, x, NULL, NULL, &hn, &cn) : cg_gru_forward(m, x, NULL, &hn);
        cg_tensor *yb =
            lstm ? cg_lstm_forward(m, xb, NULL, NULL, &hb, &cb) : cg_gru_forward(m, xb, NULL, &hb);
        ck_assert_msg(y && yb, "%s", cg_last_error());
        ck_assert(y->ndim == 2 && y->shape[0] == 5 && y->shape[1] == 8);
        ck_assert(hn->ndim == 2 && hn->shape[0] == 4 && hn->shape[1] == 4);
        ck_assert(yb->ndim == 3 && yb->shape[0] == 1 && yb->shape[1] == 5);
        ck_assert(same_bits(y, yb) && same_bits(hn, hb) && (!lstm || same_bits(cn, cb)));
        cg_release_all(8, x, xb, hn, cn, hb, cb, y, yb);
        cg_module_free(CG_MODULE(m));
    }
}
END_TEST

/* ------------------------------------------------------------ refusals */
START_TEST(test_modules_bad_inputs)
{
    cg_rnn_config cfg = CG_RNN_CONFIG(3, 4);
    cfg.num_layers = 0;
    CG_ASSERT_REFUSED(cg_gru_new(&cfg, NULL) == NULL, "GRU: num_layers must be >= 1 (got 0)");
    cfg = CG_RNN_CONFIG(3, 0);
    CG_ASSERT_REFUSED(cg_lstm_new(&cfg, NULL) == NULL, "LSTM: hidden_size must be >= 1 (got 0)");
    cfg = CG_RNN_CONFIG(-1, 4);
    CG_ASSERT_REFUSED(cg_gru_new(&cfg, NULL) == NULL, "input_size must be >= 1 (got -1)");
    cfg = CG_RNN_CONFIG(3, 4);
    cfg.dropout = 1.5f;
    CG_ASSERT_REFUSED(cg_gru_new(&cfg, NULL) == NULL, "dropout must be in [0, 1] (got 1.5)");
    CG_ASSERT_REFUSED(cg_gru_new(NULL, NULL) == NULL, "GRU: config is NULL");

    cfg = CG_RNN_CONFIG(3, 4);
    cfg.num_layers = 2;
    cg_gru *g = cg_gru_new(&cfg, NULL);
    cg_lstm *l = cg_lstm_new(&cfg, NULL);
    cg_rng r = cg_rng_new(6);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(5, 2, 3)), *x7 = cg_randn(&r, CG_SHAPE(5, 2, 7));
    cg_tensor *x4 = cg_randn(&r, CG_SHAPE(1, 5, 2, 3)), *x0 = cg_zeros(CG_SHAPE(0, 2, 3));
    cg_tensor *h_bad = cg_zeros(CG_SHAPE(1, 2, 4)), *h_ok = cg_zeros(CG_SHAPE(2, 2, 4));
    cg_tensor *hn = NULL;
    CG_ASSERT_REFUSED(cg_gru_forward(g, x7, NULL, &hn) == NULL && !hn,
                      "GRU: input [5, 2, 7] has 7 features in its last dim, expected input_size 3");
    CG_ASSERT_REFUSED(cg_gru_forward(g, x, h_bad, &hn) == NULL && !hn,
                      "GRU: h0 is [1, 2, 4], expected [2, 2, 4] (num_layers * directions, batch, "
                      "hidden_size)");
    CG_ASSERT_REFUSED(cg_gru_forward(g, x4, NULL, NULL) == NULL,
                      "GRU: input [1, 5, 2, 3] must be [seq, batch, input_size]");
    CG_ASSERT_REFUSED(cg_gru_forward(g, x0, NULL, NULL) == NULL, "GRU: input [0, 2, 3] is empty");
    CG_ASSERT_REFUSED(cg_lstm_forward(l, x, h_ok, NULL, NULL, NULL) == NULL,
                      "LSTM: h0 and c0 are both given or both NULL (got c0 NULL)");
    CG_ASSERT_REFUSED(cg_lstm_forward(l, x, h_ok, h_bad, NULL, NULL) == NULL,
                      "LSTM: c0 is [1, 2, 4], expected [2, 2, 4]");
    CG_ASSERT_REFUSED(cg_gru_forward(l, x, NULL, NULL) == NULL,
                      "cg_gru_forward: the module is an LSTM");
    CG_ASSERT_REFUSED(cg_lstm_forward(g, x, NULL, NULL, NULL, NULL) == NULL,
                      "cg_lstm_forward: the module is a GRU");
    CG_ASSERT_REFUSED(cg_gru_forward(g, NULL, NULL, NULL) == NULL, "");
    CG_ASSERT_REFUSED(cg_gru_forward(NULL, x, NULL, NULL) == NULL, "");
    cg_tensor *hu = cg_zeros(CG_SHAPE(2, 2, 4)), *xu = cg_randn(&r, CG_SHAPE(5, 3));
    CG_ASSERT_REFUSED(cg_gru_forward(g, xu, hu, NULL) == NULL,
                      "GRU: h0 is [2, 2, 4], expected [2, 4] (num_layers * directions, "
                      "hidden_size) for an unbatched input");
    /* the cells */
    cg_tensor *gi = cg_zeros(CG_SHAPE(2, 9)), *gi8 = cg_zeros(CG_SHAPE(2, 8));
    cg_tensor *h3 = cg_zeros(CG_SHAPE(2, 3)), *h2 = cg_zeros(CG_SHAPE(3, 3));
    CG_ASSERT_REFUSED(cg_gru_cell(gi8, gi8, h3) == NULL,
                      "gru_cell: gi is [2, 8], whose last dim is not 3 hidden");
    CG_ASSERT_REFUSED(cg_gru_cell(gi, gi8, h3) == NULL, "gru_cell: gh is [2, 8], expected [2, 9]");
    CG_ASSERT_REFUSED(cg_gru_cell(gi, gi, h2) == NULL,
                      "gru_cell: h is [3, 3], expected [2, 3] (gi's batch, hidden)");
    CG_ASSERT_REFUSED(cg_lstm_cell(gi, h3) == NULL,
                      "lstm_cell: gates is [2, 9], whose last dim is not 4 hidden");
    CG_ASSERT_REFUSED(cg_lstm_cell(gi8, h2) == NULL, "lstm_cell: c is [3, 3], expected [2, 2]");
    cg_tensor *gb = cg_k_to(gi, CG_BF16);
    CG_ASSERT_REFUSED(cg_gru_cell(gb, gi, h3) == NULL, "gru_cell: gi is bfloat16, float32 only");
    /* lengths */
    cg_tensor *l2 = cg_from_i64(CG_SHAPE(2), (const int64_t[]){5, 0});
    cg_tensor *l6 = cg_from_i64(CG_SHAPE(2), (const int64_t[]){6, 5});
    cg_tensor *l3 = cg_from_i64(CG_SHAPE(3), (const int64_t[]){1, 2, 3});
    cg_tensor *lf = cg_full(CG_SHAPE(2), 3.0f);
    CG_ASSERT_REFUSED(cg_gru_forward_lengths(g, x, l2, NULL, &hn) == NULL && !hn,
                      "GRU: lengths[1] is 0, each must be in [1, 5] (the input's steps)");
    CG_ASSERT_REFUSED(cg_lstm_forward_lengths(l, x, l6, NULL, NULL, NULL, NULL) == NULL,
                      "LSTM: lengths[0] is 6, each must be in [1, 5]");
    CG_ASSERT_REFUSED(cg_gru_forward_lengths(g, x, l3, NULL, NULL) == NULL,
                      "GRU: lengths is [3], expected [2] (one length a sequence of the batch)");
    CG_ASSERT_REFUSED(cg_gru_forward_lengths(g, x, lf, NULL, NULL) == NULL,
                      "GRU: argument 'lengths' is float32, expected int64");
    CG_ASSERT_REFUSED(cg_gru_forward_lengths(g, xu, l2, NULL, NULL) == NULL,
                      "GRU: lengths need a batched input (x is [5, 3], unbatched)");
    /* nn.RNN's nonlinearity, the kinds */
    cfg = CG_RNN_CONFIG(3, 4);
    cfg.relu = true;
    CG_ASSERT_REFUSED(cg_gru_new(&cfg, NULL) == NULL,
                      "GRU: relu is nn.RNN's nonlinearity, not an option of the GRU");
    cg_rnn *e = cg_rnn_new(&cfg, NULL);
    ck_assert(e && e->mode == CG_RNN_RELU && !strcmp(e->base.type, "RNN"));
    CG_ASSERT_REFUSED(cg_gru_forward(e, x, NULL, NULL) == NULL,
                      "cg_gru_forward: the module is an RNN");
    CG_ASSERT_REFUSED(cg_rnn_forward(g, x, NULL, NULL) == NULL,
                      "cg_rnn_forward: the module is a GRU");
    cg_release_all(16, x, x7, x4, x0, h_bad, h_ok, hu, xu, gi, gi8, h3, h2, gb, l2, l6, l3);
    cg_release(lf);
    cg_module_free(CG_MODULE(e));
    cg_module_free(CG_MODULE(g));
    cg_module_free(CG_MODULE(l));
}
END_TEST

static Suite *rnn_suite(void)
{
    Suite *s = suite_create("rnn");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_cells_match_ops);
    tcase_add_test(tc, test_cells_gradcheck);
    tcase_add_test(tc, test_modules_gradcheck);
    tcase_add_test(tc, test_modules_params);
    tcase_add_test(tc, test_modules_threads);
    tcase_add_test(tc, test_modules_dropout);
    tcase_add_test(tc, test_modules_no_grad);
    tcase_add_test(tc, test_modules_unbatched);
    tcase_add_test(tc, test_modules_graph_nodes);
    tcase_add_test(tc, test_modules_bad_inputs);
    tcase_add_test(tc, test_lengths_gradcheck);
    tcase_add_test(tc, test_elman_gradcheck);
    tcase_add_test(tc, test_cell_modules_gradcheck);
    tcase_add_test(tc, test_cells_step_as_modules);
    tcase_add_test(tc, test_cell_modules_refused);
    tcase_add_test(tc, test_lengths_each_alone);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {rnn_suite()};
    return cg_test_run(s, 1);
}
