/* Activation recomputation (autograd/checkpoint.h) and gradient-ready
 * hooks (autograd/autograd.h cg_grad_ready_hook_add).
 *
 * Recomputation: two transformer LM blocks (nn, dropout 0.2, train mode)
 * run with and without cg_checkpoint from the same generator state must give
 * the same loss and every parameter's and the input's gradient byte for
 * byte (memcmp), leave the dropout generator where the plain run leaves it,
 * and leave no tensor alive (cg_live_tensors) with or without a scope;
 * also nested, under gradcheck, under no-grad, and its errors.
 * Hooks: called once per leaf, when its gradient is final, in backward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/checkpoint.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "nn/nn.h"
#include "tests/testutil.h"

#define B 2
#define T 8
#define D 16

typedef struct {
    cg_lm_block *blk[2];
    cg_rng rng; /* the blocks' shared dropout generator */
    cg_attn_mask mask;
    int mode; /* 0 plain, 1 each block checkpointed, 2 nested: both in one, each inside */
} model;

static void model_init(model *m)
{
    memset(m, 0, sizeof *m);
    m->rng = cg_rng_new(42);
    cg_tf_config c = {.d = D,
                      .H = 2,
                      .d_ff = 32,
                      .norm = CG_NORM_LAYERNORM,
                      .act = CG_ACT_GELU,
                      .norm_first = true,
                      .dropout = 0.2f,
                      .dropout_rng = &m->rng};
    cg_rng init = cg_rng_new(7);
    for (int i = 0; i < 2; i++) {
        m->blk[i] = cg_lm_block_new(&c, &init);
        ck_assert_msg(m->blk[i] != NULL, "%s", cg_last_error());
        cg_module_train(CG_MODULE(m->blk[i]), true);
    }
    m->mask.causal = true;
}

static void model_free(model *m)
{
    for (int i = 0; i < 2; i++)
        cg_module_free(CG_MODULE(m->blk[i]));
}

typedef struct {
    model *m;
    int i;
} block_ctx;

static cg_tensor *run_block(void *ctx, cg_tensor *const *in)
{
    block_ctx *b = ctx;
    return cg_lm_block_forward(b->m->blk[b->i], in[0], &b->m->mask);
}

static cg_tensor *checkpointed(model *m, int i, cg_tensor *x, block_ctx *ctx)
{
    cg_param_list l = {0};
    ck_assert(cg_module_params(CG_MODULE(m->blk[i]), &l));
    cg_tensor **ps = malloc(sizeof *ps * (size_t)l.n);
    for (int k = 0; k < l.n; k++)
        ps[k] = l.items[k].tensor;
    *ctx = (block_ctx){m, i};
    cg_rng *r = &m->rng;
    cg_checkpoint_block cb = {.fn = run_block,
                              .ctx = ctx,
                              .n_inputs = 1,
                              .inputs = &x,
                              .n_params = l.n,
                              .params = ps,
                              .n_rngs = 1,
                              .rngs = &r};
    cg_tensor *y = cg_checkpoint(&cb);
    free(ps);
    cg_param_list_free(&l);
    return y;
}

/* Both blocks in one outer checkpoint, each inside its own. */
static block_ctx g_inner[2];
static cg_tensor *run_both_nested(void *ctx, cg_tensor *const *in)
{
    model *m = ctx;
    cg_tensor *h = checkpointed(m, 0, in[0], &g_inner[0]);
    cg_tensor *y = h ? checkpointed(m, 1, h, &g_inner[1]) : NULL;
    cg_release(h);
    return y;
}

static cg_tensor *forward(model *m, cg_tensor *x)
{
    static block_ctx ctx[2];
    if (m->mode == 2) {
        cg_param_list l = {0};
        ck_assert(cg_module_params(CG_MODULE(m->blk[0]), &l));
        cg_tensor *p0 = l.items[0].tensor; /* any parameter: the block needs grad */
        cg_rng *r = &m->rng;
        cg_checkpoint_block cb = {.fn = run_both_nested,
                                  .ctx = m,
                                  .n_inputs = 1,
                                  .inputs = &x,
                                  .n_params = 1,
                                  .params = &p0,
                                  .n_rngs = 1,
                                  .rngs = &r};
        cg_tensor *y = cg_checkpoint(&cb);
        cg_param_list_free(&l);
        return y;
    }
    cg_tensor *h = cg_retain(x);
    for (int i = 0; i < 2 && h; i++) {
        cg_tensor *n =
            m->mode ? checkpointed(m, i, h, &ctx[i]) : cg_lm_block_forward(m->blk[i], h, &m->mask);
        cg_release(h);
        h = n;
    }
    return h;
}

typedef struct {
    float loss;
    int n;
    float *grads[64];
    int64_t sizes[64];
    cg_rng rng_after;
} result;

/* One step: x (leaf) through the blocks, loss = mean(y * w), backward;
 * collects the gradients of x and of every parameter. */
static result step(int mode, bool scoped)
{
    int64_t live0 = cg_live_tensors();
    model m;
    model_init(&m);
    m.mode = mode;
    cg_rng data = cg_rng_new(3);
    int64_t shape[3] = {B, T, D};
    result r = {0};
    cg_scope *sc = scoped ? cg_scope_begin() : NULL;
    cg_tensor *x = cg_requires_grad(cg_randn(&data, 3, shape), true);
    cg_tensor *w = cg_randn(&data, 3, shape);
    cg_tensor *y = forward(&m, x);
    ck_assert_msg(y != NULL, "%s", cg_last_error());
    cg_tensor *yw = cg_mul(y, w);
    cg_tensor *loss = cg_mean_all(yw);
    ck_assert_msg(loss != NULL, "%s", cg_last_error());
    r.loss = cg_data(loss)[0];
    r.rng_after = m.rng;
    ck_assert_msg(cg_backward(loss, NULL, false), "%s", cg_last_error());
    cg_param_list l = {0};
    ck_assert(cg_module_params(CG_MODULE(m.blk[0]), &l));
    cg_param_list l1 = {0};
    ck_assert(cg_module_params(CG_MODULE(m.blk[1]), &l1));
    const cg_tensor *gs[64];
    gs[r.n++] = cg_grad(x);
    for (int i = 0; i < l.n; i++)
        gs[r.n++] = cg_grad(l.items[i].tensor);
    for (int i = 0; i < l1.n; i++)
        gs[r.n++] = cg_grad(l1.items[i].tensor);
    for (int i = 0; i < r.n; i++) {
        ck_assert_msg(gs[i] != NULL, "gradient %d missing (mode %d)", i, mode);
        r.sizes[i] = cg_numel(gs[i]);
        r.grads[i] = cg_test_values(gs[i]);
    }
    cg_param_list_free(&l);
    cg_param_list_free(&l1);
    if (sc)
        cg_scope_end(sc);
    else
        cg_release_all(5, x, w, y, yw, loss);
    model_free(&m);
    ck_assert_int_eq(cg_live_tensors(), live0);
    return r;
}

static void result_free(result *r)
{
    for (int i = 0; i < r->n; i++)
        free(r->grads[i]);
}

static void assert_identical(result *a, result *b, const char *what)
{
    ck_assert_msg(memcmp(&a->loss, &b->loss, sizeof a->loss) == 0, "%s: loss %.9g vs %.9g", what,
                  a->loss, b->loss);
    ck_assert_int_eq(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        ck_assert_int_eq(a->sizes[i], b->sizes[i]);
        ck_assert_msg(memcmp(a->grads[i], b->grads[i], sizeof(float) * (size_t)a->sizes[i]) == 0,
                      "%s: gradient %d differs", what, i);
    }
    ck_assert(a->rng_after.seed == b->rng_after.seed &&
              a->rng_after.counter == b->rng_after.counter);
}

START_TEST(test_recompute_bit_identical_with_dropout)
{
    result plain = step(0, false);
    result ck = step(1, false);
    assert_identical(&plain, &ck, "checkpointed blocks");
    result ck_scoped = step(1, true);
    assert_identical(&plain, &ck_scoped, "checkpointed blocks in a scope");
    result nested = step(2, true);
    assert_identical(&plain, &nested, "nested checkpoints");
    result_free(&plain);
    result_free(&ck);
    result_free(&ck_scoped);
    result_free(&nested);
}
END_TEST

/* Two training steps of the blocks (the parameters written in place
 * between them, as an optimizer step writes them) with recomputation `mode`:
 * the second step's loss and gradients. frozen: the norms' parameters do
 * not require grad (a LoRA fine-tune's base), so that the first norm
 * records no node and the second does (its input depends on trained
 * parameters). */
static result two_steps(int mode, bool frozen)
{
    model m;
    model_init(&m);
    m.mode = mode;
    for (int i = 0; frozen && i < 2; i++) {
        cg_param_list pl = {0};
        ck_assert(cg_module_params(CG_MODULE(m.blk[i]), &pl));
        for (int k = 0; k < pl.n; k++)
            if (!strncmp(pl.items[k].name, "ln", 2))
                cg_requires_grad(pl.items[k].tensor, false);
        cg_param_list_free(&pl);
    }
    cg_rng data = cg_rng_new(3);
    int64_t shape[3] = {B, T, D};
    cg_param_list l[2] = {{0}, {0}};
    for (int i = 0; i < 2; i++)
        ck_assert(cg_module_params(CG_MODULE(m.blk[i]), &l[i]));
    result r = {0};
    for (int s = 0; s < 2; s++) {
        cg_scope *sc = cg_scope_begin();
        cg_tensor *x = cg_randn(&data, 3, shape), *w = cg_randn(&data, 3, shape);
        cg_tensor *loss = cg_mean_all(cg_mul(forward(&m, x), w));
        ck_assert_msg(loss != NULL && cg_backward(loss, NULL, false), "%s", cg_last_error());
        r.loss = cg_data(loss)[0];
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < l[i].n; k++) {
                cg_tensor *p = l[i].items[k].tensor;
                const cg_tensor *g = cg_grad(p);
                if (!p->requires_grad)
                    continue;
                if (s == 1) {
                    r.sizes[r.n] = cg_numel(g);
                    r.grads[r.n++] = cg_test_values(g);
                }
                for (int64_t e = 0; e < cg_numel(p); e++) /* p -= 0.05 g (both contiguous) */
                    cg_data(p)[e] -= 0.05f * cg_data(g)[e];
                cg_tensor_modified(p);
                cg_zero_grad(p);
            }
        cg_scope_end(sc);
    }
    r.rng_after = m.rng;
    for (int i = 0; i < 2; i++)
        cg_param_list_free(&l[i]);
    model_free(&m);
    return r;
}

/* The same in bf16 precision (charlm/seq2seq train --recompute under
 * --precision bf16), also after the parameters were written (a second
 * training step: a weight's cached bf16 copy is made anew): the block's
 * forward without a graph must give the bits the recorded forward gives,
 * or the recomputed run trains apart from the plain one. */
START_TEST(test_recompute_bit_identical_bf16)
{
    cg_precision prev = cg_autocast_begin(CG_PRECISION_BF16);
    result plain = step(0, false);
    result ck = step(1, false);
    assert_identical(&plain, &ck, "checkpointed blocks in bf16");
    result nested = step(2, true);
    assert_identical(&plain, &nested, "nested checkpoints in bf16");
    result plain2 = two_steps(0, false), ck2 = two_steps(1, false);
    assert_identical(&plain2, &ck2, "the second step of checkpointed blocks in bf16");
    result plain3 = two_steps(0, true), ck3 = two_steps(1, true);
    assert_identical(&plain3, &ck3, "the second step of checkpointed blocks, norms frozen");
    cg_autocast_end(prev);
    result_free(&plain);
    result_free(&ck);
    result_free(&nested);
    result_free(&plain2);
    result_free(&ck2);
    result_free(&plain3);
    result_free(&ck3);
}
END_TEST

/* The recomputed graph replaces the block's intermediates: after the
 * forward, only the output's one node is alive beyond the input. */
START_TEST(test_recompute_keeps_only_inputs)
{
    model m;
    model_init(&m);
    cg_rng data = cg_rng_new(3);
    int64_t shape[3] = {B, T, D};
    cg_tensor *x = cg_requires_grad(cg_randn(&data, 3, shape), true);
    m.mode = 0;
    cg_tensor *y0 = forward(&m, x);
    int64_t plain_nodes = cg_graph_size(y0);
    m.mode = 1;
    cg_tensor *y1 = forward(&m, x);
    ck_assert_int_eq(cg_graph_size(y1), 2); /* one node per block */
    ck_assert(plain_nodes > 20);
    ck_assert_str_eq(cg_node_name(y1->node), "checkpoint");
    cg_release_all(3, x, y0, y1);
    model_free(&m);
}
END_TEST

/* The nn flag: an encoder and a decoder stack (dropout, padded keys) with
 * recompute on give the gradients of recompute off byte for byte, though
 * the caller's padding buffer is gone before backward. */
static void seq2seq_grads(bool recompute, float **out, int64_t *n_out)
{
    int64_t live0 = cg_live_tensors();
    cg_rng drop = cg_rng_new(11);
    cg_tf_config c = {.d = D,
                      .H = 2,
                      .d_ff = 32,
                      .norm = CG_NORM_LAYERNORM,
                      .act = CG_ACT_RELU,
                      .norm_first = false,
                      .dropout = 0.25f,
                      .dropout_rng = &drop};
    cg_rng init = cg_rng_new(1);
    cg_enc_stack *enc = cg_enc_stack_new(2, &c, &init);
    cg_dec_stack *dec = cg_dec_stack_new(2, &c, &init);
    ck_assert(enc && dec);
    cg_enc_stack_set_recompute(enc, recompute);
    cg_dec_stack_set_recompute(dec, recompute);
    ck_assert(enc->layers[1]->recompute == recompute && dec->layers[0]->recompute == recompute);
    cg_scope *sc = cg_scope_begin();
    cg_rng data = cg_rng_new(2);
    int64_t sx[3] = {B, 6, D}, sy[3] = {B, T, D};
    cg_tensor *src = cg_requires_grad(cg_randn(&data, 3, sx), true);
    cg_tensor *tgt = cg_requires_grad(cg_randn(&data, 3, sy), true);
    uint8_t *bytes = calloc(B * 6, 1);
    bytes[5] = bytes[10] = bytes[11] = 1;
    cg_tensor *pad = cg_from_array(CG_BOOL, CG_SHAPE(B, 6), bytes);
    free(bytes);
    cg_attn_mask em = {.key_pad = pad}, sm = {.causal = true}, cm = {.key_pad = pad};
    cg_tensor *mem = cg_enc_stack_forward(enc, src, &em);
    cg_tensor *h = cg_dec_stack_forward(dec, tgt, mem, &sm, &cm);
    ck_assert_msg(h != NULL, "%s", cg_last_error());
    cg_fill_(pad, 0); /* the caller's mask changes, then goes */
    cg_release(pad);
    cg_tensor *sq = cg_mul(h, h);
    cg_tensor *loss = cg_mean_all(sq);
    ck_assert_msg(cg_backward(loss, NULL, false), "%s", cg_last_error());
    cg_param_list le = {0}, ld = {0};
    ck_assert(cg_module_params(CG_MODULE(enc), &le) && cg_module_params(CG_MODULE(dec), &ld));
    const cg_tensor *gs[128];
    int n = 0;
    gs[n++] = cg_grad(src);
    gs[n++] = cg_grad(tgt);
    for (int i = 0; i < le.n; i++)
        gs[n++] = cg_grad(le.items[i].tensor);
    for (int i = 0; i < ld.n; i++)
        gs[n++] = cg_grad(ld.items[i].tensor);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        ck_assert_msg(gs[i] != NULL, "gradient %d missing", i);
        total += cg_numel(gs[i]);
    }
    float *v = malloc(sizeof *v * (size_t)total), *p = v;
    for (int i = 0; i < n; i++) {
        ck_assert(cg_copy_to(gs[i], p));
        p += cg_numel(gs[i]);
    }
    *out = v;
    *n_out = total;
    cg_param_list_free(&le);
    cg_param_list_free(&ld);
    cg_scope_end(sc);
    cg_module_free(CG_MODULE(enc));
    cg_module_free(CG_MODULE(dec));
    ck_assert_int_eq(cg_live_tensors(), live0);
}

/* A post hook on a recomputed block (nn's recompute flag) runs once per
 * forward, as without the flag: the recomputation replays the block's
 * body, not its hooks (they ran around the checkpointed call). The hook
 * doubles the output; gradients equal the plain run's byte for byte. */
static bool double_out(void *ctx, cg_module *m, int n_in, cg_tensor *const *in, cg_tensor **out)
{
    (void)m, (void)n_in, (void)in;
    ++*(int *)ctx;
    cg_tensor *y = cg_muls(*out, 2.0f);
    cg_release(*out);
    *out = y;
    return y != NULL;
}

static float *hooked_block_grad(bool recompute, int *calls)
{
    model m;
    model_init(&m);
    m.blk[0]->recompute = recompute;
    cg_hook_handle h =
        cg_module_register_forward_hook(CG_MODULE(m.blk[0]), double_out, calls, NULL);
    ck_assert_msg(h.id != 0, "%s", cg_last_error());
    cg_rng data = cg_rng_new(5);
    cg_tensor *x = cg_requires_grad(cg_randn(&data, CG_SHAPE(B, T, D)), true);
    cg_tensor *y = cg_lm_block_forward(m.blk[0], x, &m.mask);
    cg_tensor *yy = cg_mul(y, y);
    cg_tensor *loss = cg_sum_all(yy);
    ck_assert_msg(loss && cg_backward(loss, NULL, false), "%s", cg_last_error());
    float *g = cg_test_values(cg_grad(x));
    cg_release_all(4, x, y, yy, loss);
    model_free(&m);
    return g;
}

START_TEST(test_recompute_runs_block_hooks_once)
{
    int plain_calls = 0, rc_calls = 0;
    float *plain = hooked_block_grad(false, &plain_calls);
    float *rc = hooked_block_grad(true, &rc_calls);
    ck_assert_int_eq(plain_calls, 1);
    ck_assert_int_eq(rc_calls, 1);
    ck_assert(memcmp(plain, rc, sizeof(float) * B * T * D) == 0);
    free(plain);
    free(rc);
}
END_TEST

START_TEST(test_stack_recompute_flag)
{
    float *a, *b;
    int64_t na, nb;
    seq2seq_grads(false, &a, &na);
    seq2seq_grads(true, &b, &nb);
    ck_assert_int_eq(na, nb);
    int64_t first = -1;
    for (int64_t i = 0; i < na && first < 0; i++)
        if (memcmp(&a[i], &b[i], sizeof *a))
            first = i;
    ck_assert_msg(first < 0, "gradients differ from element %lld of %lld", (long long)first,
                  (long long)na);
    free(a);
    free(b);
}
END_TEST

/* ------------------------------------------- gradcheck, no-grad, errors */
static cg_tensor *tanh_mul(void *ctx, cg_tensor *const *in)
{
    (void)ctx;
    cg_tensor *p = cg_mul(in[0], in[1]);
    cg_tensor *y = cg_tanh(p);
    cg_release(p);
    return y;
}

static cg_tensor *ck_tanh_mul(void *ctx, cg_tensor *const *in)
{
    cg_checkpoint_block cb = {.fn = tanh_mul, .ctx = ctx, .n_inputs = 2, .inputs = in};
    return cg_checkpoint(&cb);
}

START_TEST(test_checkpoint_gradcheck)
{
    cg_rng r = cg_rng_new(5);
    int64_t s[2] = {3, 4};
    cg_tensor *in[2] = {cg_requires_grad(cg_randn(&r, 2, s), true),
                        cg_requires_grad(cg_randn(&r, 2, s), true)};
    cg_gradcheck_report rep;
    ck_assert_msg(cg_gradcheck(ck_tanh_mul, NULL, 2, in, NULL, &rep), "%s", rep.message);
    cg_release_all(2, in[0], in[1]);
}
END_TEST

static int g_freed;
static void count_free(void *p)
{
    (void)p;
    g_freed++;
}

START_TEST(test_checkpoint_no_grad_and_errors)
{
    cg_rng r = cg_rng_new(5);
    int64_t s[2] = {3, 4};
    cg_tensor *in[2] = {cg_requires_grad(cg_randn(&r, 2, s), true), cg_randn(&r, 2, s)};
    int64_t live0 = cg_live_tensors();
    /* no-grad: just the block's result, no node; ctx freed at once */
    g_freed = 0;
    cg_no_grad_begin();
    cg_checkpoint_block cb = {
        .fn = tanh_mul, .ctx = &g_freed, .ctx_free = count_free, .n_inputs = 2, .inputs = in};
    cg_tensor *y = cg_checkpoint(&cb);
    cg_no_grad_end();
    ck_assert_ptr_nonnull(y);
    ck_assert_ptr_null(y->node);
    ck_assert_int_eq(g_freed, 1);
    cg_release(y);
    /* with grad: the node owns ctx until it is freed */
    g_freed = 0;
    y = cg_checkpoint(&cb);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(g_freed, 0);
    cg_tensor *l = cg_sum_all(y);
    /* backward under no-grad cannot recompute */
    cg_no_grad_begin();
    ck_assert(!cg_backward(l, NULL, true));
    cg_no_grad_end();
    ck_assert_msg(strstr(cg_last_error(), "checkpoint: backward under no-grad"), "%s",
                  cg_last_error());
    cg_zero_grad(in[0]);
    ck_assert_msg(cg_backward(l, NULL, false), "%s", cg_last_error());
    ck_assert_ptr_nonnull(cg_grad(in[0]));
    ck_assert_ptr_null(cg_grad(in[1]));
    cg_release_all(2, y, l);
    ck_assert_int_eq(g_freed, 1);
    cg_zero_grad(in[0]);
    ck_assert_int_eq(cg_live_tensors(), live0);
    /* bad blocks */
    cg_checkpoint_block bad = {.fn = NULL, .n_inputs = 1, .inputs = in};
    CG_ASSERT_FAILS(cg_checkpoint(&bad), "checkpoint: a block needs fn");
    cg_tensor *none = NULL;
    cg_checkpoint_block nullp = {
        .fn = tanh_mul, .n_inputs = 1, .inputs = in, .n_params = 1, .params = &none};
    CG_ASSERT_FAILS(cg_checkpoint(&nullp), "no NULL among its inputs, parameters and generators");
    ck_assert_ptr_null(cg_checkpoint(NULL));
    cg_release_all(2, in[0], in[1]);
}
END_TEST

/* A block that is not deterministic, its recomputation unlike its forward
 * (another shape; an output that no longer requires grad), is refused by a
 * message that names the block, not by one from the inner backward. */
typedef struct {
    int calls, kind;
} changing;
static cg_tensor *changing_block(void *ctx, cg_tensor *const *in)
{
    changing *c = ctx;
    if (c->calls++ == 0)
        return cg_tanh(in[0]);
    return c->kind ? cg_zeros(CG_SHAPE(3, 4)) : cg_sum_all(in[0]);
}

START_TEST(test_checkpoint_block_not_deterministic)
{
    cg_rng r = cg_rng_new(6);
    int64_t s[2] = {3, 4};
    cg_tensor *x = cg_requires_grad(cg_randn(&r, 2, s), true);
    const char *want[2] = {
        "checkpoint: the recomputed block's output has another shape than in the forward",
        "checkpoint: the recomputed block's output does not require grad"};
    for (int kind = 0; kind < 2; kind++) {
        changing c = {0, kind};
        cg_checkpoint_block cb = {.fn = changing_block, .ctx = &c, .n_inputs = 1, .inputs = &x};
        cg_tensor *y = cg_checkpoint(&cb), *l = cg_sum_all(y);
        CG_ASSERT_REFUSED(!cg_backward(l, NULL, false), want[kind]);
        ck_assert_int_eq(c.calls, 2);
        ck_assert_ptr_null(cg_grad(x));
        cg_release_all(2, y, l);
    }
    cg_release(x);
}
END_TEST

/* ------------------------------------------------- gradient-ready hooks */
typedef struct {
    int calls;
    cg_tensor *order[8];
    float value[8]; /* the gradient's first element when the hook ran */
} hook_log;

static void on_ready(void *ctx, cg_tensor *t)
{
    hook_log *h = ctx;
    h->value[h->calls] = cg_data(t->grad)[0];
    h->order[h->calls++] = t;
}

START_TEST(test_grad_ready_hook)
{
    int64_t s[1] = {1};
    float one = 2.0f, two = 3.0f;
    cg_tensor *a = cg_requires_grad(cg_from_data(1, s, &one), true);
    cg_tensor *b = cg_requires_grad(cg_from_data(1, s, &two), true);
    cg_tensor *c = cg_requires_grad(cg_from_data(1, s, &two), true); /* reached by no gradient */
    hook_log log = {0};
    ck_assert(cg_grad_ready_hook_add(a, on_ready, &log));
    ck_assert(cg_grad_ready_hook_add(b, on_ready, &log));
    ck_assert(cg_grad_ready_hook_add(c, on_ready, &log));
    /* loss = (a*b) + a*a*a: a's gradient has three parts, b's one: b is
     * final after a*b (the last op to run), a after a*a and its second use */
    cg_tensor *ab = cg_mul(a, b);
    cg_tensor *aa = cg_mul(a, a);
    cg_tensor *aaa = cg_mul(aa, a);
    cg_tensor *loss = cg_add(aaa, ab);
    cg_tensor *cd = cg_detach(c);
    ck_assert_msg(cg_backward(loss, NULL, false), "%s", cg_last_error());
    ck_assert_int_eq(log.calls, 2);
    /* each exactly once, with its final value */
    for (int i = 0; i < 2; i++) {
        ck_assert(log.order[i] == a || log.order[i] == b);
        ck_assert_msg(log.value[i] == cg_data(log.order[i]->grad)[0],
                      "hook %d ran with %g, final %g", i, log.value[i],
                      cg_data(log.order[i]->grad)[0]);
    }
    ck_assert(log.order[0] != log.order[1]);
    ck_assert_float_eq(cg_data(a->grad)[0], 3.0f * 4.0f + 3.0f);
    /* removed: not called */
    cg_grad_ready_hook_remove(a);
    cg_grad_ready_hook_remove(a);
    cg_zero_grad(a);
    cg_zero_grad(b);
    log.calls = 0;
    cg_tensor *l2 = cg_mul(a, b);
    ck_assert(cg_backward(l2, NULL, false));
    ck_assert_int_eq(log.calls, 1);
    ck_assert(log.order[0] == b);
    /* a leaf as the root */
    log.calls = 0;
    cg_zero_grad(b);
    ck_assert(cg_backward(b, NULL, false));
    ck_assert_int_eq(log.calls, 1);
    /* errors */
    ck_assert(!cg_grad_ready_hook_add(NULL, on_ready, &log));
    ck_assert(!cg_grad_ready_hook_add(a, NULL, &log));
    cg_grad_ready_hook_remove(b);
    cg_grad_ready_hook_remove(c);
    cg_release_all(9, a, b, c, ab, aa, aaa, loss, cd, l2);
}
END_TEST

/* Hooks and recomputation: a parameter of a checkpointed block is final
 * only after the block's recomputed backward, and the nested backward
 * fires nothing itself: each hook runs once, with the final gradient. */
static cg_tensor *tanh_mul_param(void *ctx, cg_tensor *const *in)
{
    cg_tensor *p = cg_mul(in[0], ctx);
    cg_tensor *y = cg_tanh(p);
    cg_release(p);
    return y;
}

static hook_log g_ck_log;
static void on_ready_ck(void *ctx, cg_tensor *t)
{
    (void)ctx;
    on_ready(&g_ck_log, t);
}

START_TEST(test_grad_ready_hook_with_checkpoint)
{
    cg_rng r = cg_rng_new(9);
    int64_t s[2] = {3, 4};
    cg_tensor *x = cg_requires_grad(cg_randn(&r, 2, s), true);
    cg_tensor *w = cg_requires_grad(cg_randn(&r, 2, s), true);
    memset(&g_ck_log, 0, sizeof g_ck_log);
    ck_assert(cg_grad_ready_hook_add(w, on_ready_ck, NULL));
    /* w, a parameter, used by two checkpointed blocks in a row */
    cg_checkpoint_block cb = {
        .fn = tanh_mul_param, .ctx = w, .n_inputs = 1, .inputs = &x, .n_params = 1, .params = &w};
    cg_tensor *h = cg_checkpoint(&cb);
    cb.inputs = &h;
    cg_tensor *y = cg_checkpoint(&cb);
    cg_tensor *l = cg_sum_all(y);
    ck_assert_msg(cg_backward(l, NULL, false), "%s", cg_last_error());
    ck_assert_int_eq(g_ck_log.calls, 1);
    ck_assert(g_ck_log.order[0] == w);
    ck_assert(g_ck_log.value[0] == cg_data(w->grad)[0]);
    cg_grad_ready_hook_remove(w);
    cg_release_all(5, x, w, h, y, l);
}
END_TEST

/* A block whose inputs need no gradient but whose parameter does (a
 * frozen embedding's output into a trained block) is recomputed all the
 * same: one checkpoint node, not the block's graph; its parameter gets
 * the gradient of the block run plainly, bit for bit. */
START_TEST(test_checkpoint_frozen_input_trained_param)
{
    cg_rng r = cg_rng_new(8);
    int64_t s[2] = {3, 4};
    cg_tensor *x = cg_randn(&r, 2, s);
    cg_tensor *w = cg_requires_grad(cg_randn(&r, 2, s), true);
    cg_tensor *plain = tanh_mul_param(w, &x), *lp = cg_sum_all(plain);
    ck_assert(cg_backward(lp, NULL, false));
    float *want = cg_test_values(cg_grad(w));
    cg_zero_grad(w);
    cg_checkpoint_block cb = {
        .fn = tanh_mul_param, .ctx = w, .n_inputs = 1, .inputs = &x, .n_params = 1, .params = &w};
    cg_tensor *y = cg_checkpoint(&cb);
    ck_assert_msg(y && y->node, "%s", cg_last_error());
    ck_assert_str_eq(cg_node_name(y->node), cg_op_name(CG_OP_CHECKPOINT));
    ck_assert_int_eq(cg_graph_size(y), 1);
    cg_tensor *l = cg_sum_all(y);
    ck_assert_msg(cg_backward(l, NULL, false), "%s", cg_last_error());
    ck_assert(memcmp(cg_data(cg_grad(w)), want, sizeof(float[12])) == 0);
    free(want);
    cg_release_all(6, x, w, plain, lp, y, l);
}
END_TEST

/* A block that ignores one of its inputs passes it no gradient, so the
 * node that made that input (hw = 2 w) is reached by none; w, hooked and
 * used also in w * x, is final once that use has run: its hook runs once,
 * with the final gradient (x). */
static cg_tensor *tanh_first(void *ctx, cg_tensor *const *in)
{
    (void)ctx;
    return cg_tanh(in[0]);
}

START_TEST(test_grad_ready_hook_input_unused)
{
    cg_rng r = cg_rng_new(4);
    int64_t s[2] = {3, 4};
    cg_tensor *x = cg_requires_grad(cg_randn(&r, 2, s), true);
    cg_tensor *w = cg_requires_grad(cg_randn(&r, 2, s), true);
    memset(&g_ck_log, 0, sizeof g_ck_log);
    ck_assert(cg_grad_ready_hook_add(w, on_ready_ck, NULL));
    cg_tensor *hw = cg_muls(w, 2.0f), *ins[2] = {x, hw};
    cg_checkpoint_block cb = {.fn = tanh_first, .n_inputs = 2, .inputs = ins};
    cg_tensor *y = cg_checkpoint(&cb), *wx = cg_mul(w, x);
    cg_tensor *l1 = cg_sum_all(y), *l2 = cg_sum_all(wx), *l = cg_add(l1, l2);
    ck_assert_msg(l && cg_backward(l, NULL, false), "%s", cg_last_error());
    CG_ASSERT_TENSOR(cg_grad(w), cg_data(x), 0, 0);
    ck_assert_int_eq(g_ck_log.calls, 1);
    ck_assert(g_ck_log.order[0] == w && g_ck_log.value[0] == cg_data(x)[0]);
    cg_grad_ready_hook_remove(w);
    cg_release_all(8, x, w, hw, y, wx, l1, l2, l);
}
END_TEST

/* A checkpointed block whose input's graph an earlier backward freed (two
 * losses share h = x * x, one through the block): the second backward is
 * refused before anything runs: the block is not recomputed, no hook fires
 * and no gradient is written, with or without a hook on the parameter. */
static int g_block_runs;
static cg_tensor *counted_tanh_mul(void *ctx, cg_tensor *const *in)
{
    g_block_runs++;
    return tanh_mul_param(ctx, in);
}

START_TEST(test_checkpoint_input_freed_earlier)
{
    cg_rng r = cg_rng_new(5);
    int64_t s[2] = {3, 4};
    cg_tensor *x = cg_requires_grad(cg_randn(&r, 2, s), true);
    cg_tensor *w = cg_requires_grad(cg_randn(&r, 2, s), true);
    memset(&g_ck_log, 0, sizeof g_ck_log);
    ck_assert(cg_grad_ready_hook_add(w, on_ready_ck, NULL));
    cg_tensor *h = cg_mul(x, x);
    cg_checkpoint_block cb = {
        .fn = counted_tanh_mul, .ctx = w, .n_inputs = 1, .inputs = &h, .n_params = 1, .params = &w};
    g_block_runs = 0;
    cg_tensor *y = cg_checkpoint(&cb);
    cg_tensor *l1 = cg_sum_all(h), *l2 = cg_sum_all(y);
    ck_assert(cg_backward(l1, NULL, false));
    float *gx = cg_test_values(cg_grad(x));
    CG_ASSERT_REFUSED(!cg_backward(l2, NULL, false), "already freed by an earlier backward");
    ck_assert_int_eq(g_block_runs, 1); /* the forward's run only */
    ck_assert_int_eq(g_ck_log.calls, 0);
    ck_assert_ptr_null(cg_grad(w));
    float *gx2 = cg_test_values(cg_grad(x));
    ck_assert(memcmp(gx, gx2, sizeof(float[12])) == 0);
    free(gx);
    free(gx2);
    cg_grad_ready_hook_remove(w);
    cg_release_all(6, x, w, h, y, l1, l2);
}
END_TEST

static Suite *checkpoint_suite(void)
{
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("recompute");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_recompute_bit_identical_with_dropout);
    tcase_add_test(tc, test_recompute_bit_identical_bf16);
    tcase_add_test(tc, test_recompute_keeps_only_inputs);
    tcase_add_test(tc, test_stack_recompute_flag);
    tcase_add_test(tc, test_recompute_runs_block_hooks_once);
    tcase_add_test(tc, test_checkpoint_gradcheck);
    tcase_add_test(tc, test_checkpoint_no_grad_and_errors);
    tcase_add_test(tc, test_checkpoint_frozen_input_trained_param);
    tcase_add_test(tc, test_checkpoint_block_not_deterministic);
    suite_add_tcase(s, tc);
    tc = tcase_create("hooks");
    tcase_add_test(tc, test_grad_ready_hook);
    tcase_add_test(tc, test_grad_ready_hook_with_checkpoint);
    tcase_add_test(tc, test_grad_ready_hook_input_unused);
    tcase_add_test(tc, test_checkpoint_input_freed_earlier);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {checkpoint_suite()};
    return cg_test_run(s, 1);
}
