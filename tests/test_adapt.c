/* Adapting a model without editing it: forward hooks, freezing, LoRA and
 * its PEFT-named adapter files; and the library's sampler, randperm, token
 * batches and a KV cache for a block of the user's own. */
#include <math.h>
#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/gradcheck.h"
#include "cgrad.h"
#include "testutil.h"

/* ------------------------------------------------------------- helpers */
static cg_tensor *randn_leaf(cg_rng *r, int ndim, const int64_t *shape)
{
    cg_tensor *t = cg_randn(r, ndim, shape);
    cg_requires_grad(t, true);
    return t;
}

static float max_abs_diff(const cg_tensor *a, const cg_tensor *b)
{
    ck_assert_int_eq(cg_numel(a), cg_numel(b));
    float *x = cg_test_values(a), *y = cg_test_values(b), m = 0;
    for (int64_t i = 0; i < cg_numel(a); i++)
        m = fmaxf(m, fabsf(x[i] - y[i]));
    free(x);
    free(y);
    return m;
}

static bool bit_equal(const cg_tensor *a, const cg_tensor *b)
{
    float *x = cg_test_values(a), *y = cg_test_values(b);
    bool eq = cg_numel(a) == cg_numel(b) && !memcmp(x, y, (size_t)cg_numel(a) * sizeof(float));
    free(x);
    free(y);
    return eq;
}

static void randomize(cg_module *m, uint64_t seed, float std)
{
    cg_rng r = cg_rng_new(seed);
    cg_param_list l = {0};
    ck_assert(cg_module_params(m, &l));
    for (int i = 0; i < l.n; i++)
        ck_assert(cg_init_normal_(l.items[i].tensor, &r, 0.0f, std));
    cg_param_list_free(&l);
}

/* ---------------------------------------------------------------- hooks */
static bool double_output(void *ctx, cg_module *m, int n_in, cg_tensor *const *in, cg_tensor **out)
{
    (void)ctx, (void)m, (void)n_in, (void)in;
    cg_tensor *y = cg_muls(*out, 2.0f);
    cg_release(*out);
    *out = y;
    return y != NULL;
}

static bool negate_input(void *ctx, cg_module *m, int n_in, cg_tensor **in)
{
    (void)ctx, (void)m, (void)n_in;
    cg_tensor *x = cg_neg(in[0]);
    cg_release(in[0]);
    in[0] = x;
    return x != NULL;
}

static bool refuse(void *ctx, cg_module *m, int n_in, cg_tensor **in)
{
    (void)ctx, (void)n_in, (void)in;
    cg_set_error("hook refused %s", m->type);
    return false;
}

/* hooks that fail and say nothing */
static bool refuse_quietly(void *ctx, cg_module *m, int n_in, cg_tensor **in)
{
    (void)ctx, (void)m, (void)n_in, (void)in;
    return false;
}
static bool refuse_output_quietly(void *ctx, cg_module *m, int n_in, cg_tensor *const *in,
                                  cg_tensor **out)
{
    (void)ctx, (void)m, (void)n_in, (void)in, (void)out;
    return false;
}

/* A forward hook that drops the output (gives its reference back) and
 * returns true. */
static bool drop_output(void *ctx, cg_module *m, int n_in, cg_tensor *const *in, cg_tensor **out)
{
    (void)ctx, (void)m, (void)n_in, (void)in;
    cg_release(*out);
    *out = NULL;
    return true;
}

static int freed;
static void count_free(void *ctx)
{
    (void)ctx;
    freed++;
}

/* What a hook on a norm saw as its input (a new reference). */
static bool keep_input(void *ctx, cg_module *m, int n_in, cg_tensor *const *in, cg_tensor **out)
{
    (void)m, (void)out;
    cg_tensor **seen = ctx;
    ck_assert_int_eq(n_in, 1);
    cg_release(*seen);
    *seen = cg_clone(in[0]);
    return *seen != NULL;
}

/* cg_norm_add_forward on a norm with hooks computes norm(x + y) through
 * cg_norm_forward, so that the hooks see x + y: the same values as the
 * fused form (within rounding), the hook's output taken, and gradients to
 * both inputs, for both norms. */
START_TEST(test_norm_add_forward_hooked)
{
    cg_rng r = cg_rng_new(7);
    for (int kind = 0; kind < 2; kind++) {
        cg_norm *n = kind ? cg_rmsnorm_new(6) : cg_layernorm_new(6);
        randomize(CG_MODULE(n), 11 + kind, 0.5f);
        cg_tensor *x = cg_randn(&r, CG_SHAPE(3, 6)), *y = cg_randn(&r, CG_SHAPE(3, 6));
        cg_requires_grad(x, true);
        cg_requires_grad(y, true);
        cg_tensor *fused = cg_norm_add_forward(n, x, y), *seen = NULL;
        cg_hook_handle h = cg_module_register_forward_hook(CG_MODULE(n), keep_input, &seen, NULL);
        cg_hook_handle d = cg_module_register_forward_hook(CG_MODULE(n), double_output, NULL, NULL);
        ck_assert(h.id != 0 && d.id != 0);
        cg_tensor *hooked = cg_norm_add_forward(n, x, y), *sum = cg_add(x, y);
        ck_assert_ptr_nonnull(hooked);
        ck_assert_ptr_nonnull(seen);
        ck_assert(bit_equal(seen, sum)); /* the hook saw x + y */
        cg_tensor *twice = cg_muls(fused, 2.0f);
        float *want = cg_test_values(twice);
        CG_ASSERT_TENSOR(hooked, want, 1e-6, 1e-5);
        free(want);
        /* gradients: d/dx = d/dy = 2 d norm(s)/ds */
        cg_tensor *sq = cg_mul(hooked, hooked), *l = cg_sum_all(sq);
        ck_assert(cg_backward(l, NULL, false));
        ck_assert_ptr_nonnull(cg_grad(x));
        ck_assert(bit_equal(cg_grad(x), cg_grad(y)));
        ck_assert(cg_hook_remove(&h) && cg_hook_remove(&d));
        cg_release_all(9, x, y, fused, seen, hooked, sum, twice, sq, l);
        cg_module_free(CG_MODULE(n));
    }
}
END_TEST

START_TEST(test_hook_post_pre_remove)
{
    cg_rng r = cg_rng_new(1);
    cg_linear *l = cg_linear_new(3, 4, true, &r);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 3));
    cg_tensor *y0 = cg_linear_forward(l, x);
    freed = 0;
    cg_hook_handle h =
        cg_module_register_forward_hook(CG_MODULE(l), double_output, NULL, count_free);
    ck_assert_int_ne(h.id, 0);
    cg_tensor *y1 = cg_linear_forward(l, x), *y0x2 = cg_muls(y0, 2.0f);
    ck_assert(bit_equal(y1, y0x2));
    /* a pre hook runs first: l(-x) * 2 */
    cg_tensor *nx = cg_neg(x), *ln = cg_linear_forward(l, nx), *ln2 = cg_muls(y0, -2.0f);
    cg_hook_handle p = cg_module_register_forward_pre_hook(CG_MODULE(l), negate_input, NULL, NULL);
    cg_tensor *y2 = cg_linear_forward(l, x);
    ck_assert(bit_equal(y2, ln)); /* post hook of l(-x) */
    /* removal: the plain layer again; a second removal is refused */
    ck_assert(cg_hook_remove(&h));
    ck_assert_int_eq(freed, 1);
    ck_assert(cg_hook_remove(&p));
    ck_assert(!cg_hook_remove(&p));
    cg_tensor *y3 = cg_linear_forward(l, x);
    ck_assert(bit_equal(y3, y0));
    /* a failing hook fails the forward with its message */
    cg_hook_handle f = cg_module_register_forward_pre_hook(CG_MODULE(l), refuse, NULL, NULL);
    CG_ASSERT_FAILS(cg_linear_forward(l, x), "hook refused Linear");
    ck_assert(cg_hook_remove(&f));
    /* one that records no message gets one (never an empty or stale one) */
    f = cg_module_register_forward_pre_hook(CG_MODULE(l), refuse_quietly, NULL, NULL);
    CG_ASSERT_FAILS(cg_linear_forward(l, x),
                    "Linear: forward pre-hook 1 returned false without recording a reason");
    ck_assert(cg_hook_remove(&f));
    f = cg_module_register_forward_hook(CG_MODULE(l), refuse_output_quietly, NULL, NULL);
    CG_ASSERT_FAILS(cg_linear_forward(l, x),
                    "Linear: forward hook 1 returned false without recording a reason");
    ck_assert(cg_hook_remove(&f));
    /* one that leaves no output but returns true: named too */
    f = cg_module_register_forward_hook(CG_MODULE(l), drop_output, NULL, NULL);
    CG_ASSERT_FAILS(cg_linear_forward(l, x), "Linear: forward hook 1 left no output");
    ck_assert(cg_hook_remove(&f));
    /* hooks still registered are freed with the module */
    cg_module_register_forward_hook(CG_MODULE(l), double_output, NULL, count_free);
    cg_release_all(9, x, y0, y1, y0x2, nx, ln, ln2, y2, y3);
    cg_module_free(CG_MODULE(l));
    ck_assert_int_eq(freed, 2);
}
END_TEST

/* Counts the calls of every module it is registered on (ctx: an int). */
static bool count_call(void *ctx, cg_module *m, int n_in, cg_tensor *const *in, cg_tensor **out)
{
    (void)m, (void)n_in, (void)in, (void)out;
    (*(int *)ctx)++;
    return true;
}

typedef struct {
    cg_module *m[64];
    int calls[64];
    char path[64][96];
    int n;
} counters;

static void hook_all(cg_module *m, const char *path, counters *c)
{
    ck_assert_int_lt(c->n, 64);
    c->m[c->n] = m;
    c->calls[c->n] = 0;
    snprintf(c->path[c->n], sizeof c->path[0], "%s", path);
    ck_assert_int_ne(cg_module_register_forward_hook(m, count_call, &c->calls[c->n], NULL).id, 0);
    c->n++;
    for (int i = 0; i < m->n_children; i++) {
        char p[96];
        snprintf(p, sizeof p, "%s.%s", path, m->children[i].name);
        hook_all(m->children[i].module, p, c);
    }
}

static void assert_all_called(const counters *c)
{
    for (int i = 0; i < c->n; i++) /* containers have no forward (PyTorch's ModuleList) */
        if (strcmp(c->m[i]->type, "Model") && strcmp(c->m[i]->type, "ModuleList"))
            ck_assert_msg(c->calls[i] > 0, "the hook of %s (%s) never ran", c->path[i],
                          c->m[i]->type);
}

/* A hook that removes itself during the call (a one-shot hook, which
 * PyTorch allows): the call's next hook still runs, and the removed hook's
 * ctx lives until the call ends (the next hook was skipped: the output came
 * back without it). */
static cg_hook_handle one_shot;
static int n_freed;

static void one_shot_free(void *ctx)
{
    (void)ctx;
    n_freed++;
}

static bool remove_self(void *ctx, cg_module *m, int n_in, cg_tensor *const *in, cg_tensor **out)
{
    (void)m, (void)n_in, (void)in, (void)out;
    ck_assert(cg_hook_remove(&one_shot));
    ck_assert_int_eq(n_freed, 0); /* ctx still ours */
    (*(int *)ctx)++;
    return true;
}

static bool times_two(void *ctx, cg_module *m, int n_in, cg_tensor *const *in, cg_tensor **out)
{
    (void)ctx, (void)m, (void)n_in, (void)in;
    cg_tensor *y = cg_muls(*out, 2.0f);
    cg_release(*out);
    *out = y;
    return y != NULL;
}

START_TEST(test_hook_removed_during_call)
{
    cg_rng r = cg_rng_new(2);
    cg_linear *l = cg_linear_new(4, 3, true, &r);
    int runs = 0;
    n_freed = 0;
    one_shot = cg_module_register_forward_hook(&l->base, remove_self, &runs, one_shot_free);
    cg_hook_handle h2 = cg_module_register_forward_hook(&l->base, times_two, NULL, NULL);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 4));
    cg_tensor *y1 = cg_linear_forward(l, x), *y2 = cg_linear_forward(l, x);
    ck_assert_int_eq(runs, 1);
    ck_assert_int_eq(n_freed, 1);
    ck_assert(bit_equal(y1, y2)); /* both doubled */
    ck_assert(cg_hook_remove(&h2));
    cg_tensor *y3 = cg_linear_forward(l, x), *y6 = cg_muls(y3, 2.0f);
    ck_assert(bit_equal(y1, y6));
    cg_release_all(5, x, y1, y2, y3, y6);
    cg_module_free(CG_MODULE(l));
}
END_TEST

/* Hooks run in the order they were registered, as PyTorch's do: pre-hooks
 * x + 1 then 2 x, post-hooks 2 y then y + 1. On an identity (ReLU of a
 * positive input) 1 gives 9; the pre-hooks reversed give 7, the post-hooks 10. */
static cg_tensor *affine(cg_tensor *t, const float *ab) /* t * ab[0] + ab[1] */
{
    cg_tensor *m = cg_muls(t, ab[0]), *y = m ? cg_adds(m, ab[1]) : NULL;
    cg_release(m);
    return y;
}
static bool affine_input(void *ctx, cg_module *m, int n_in, cg_tensor **in)
{
    (void)m, (void)n_in;
    cg_tensor *x = affine(in[0], ctx);
    cg_release(in[0]);
    in[0] = x;
    return x != NULL;
}
static bool affine_output(void *ctx, cg_module *m, int n_in, cg_tensor *const *in, cg_tensor **out)
{
    (void)m, (void)n_in, (void)in;
    cg_tensor *y = affine(*out, ctx);
    cg_release(*out);
    *out = y;
    return y != NULL;
}

static cg_hook_handle g_victim[2]; /* one hook's handle, twice */
static bool remove_victim(void *ctx, cg_module *m, int n_in, cg_tensor *const *in, cg_tensor **out)
{
    (void)ctx, (void)n_in, (void)in, (void)out;
    if (!g_victim[0].module)
        return true; /* removed in an earlier call */
    ck_assert(cg_hook_remove(&g_victim[0]));
    ck_assert(!cg_hook_remove(&g_victim[1]));
    ck_assert_ptr_null(cg_module_find_hook(m, (const void *)affine_output));
    return true;
}

START_TEST(test_hooks_run_in_order)
{
    cg_module *relu = cg_activation_new(CG_ACT_RELU);
    const float plus1[2] = {1, 1}, times2[2] = {2, 0};
    cg_module_register_forward_pre_hook(relu, affine_input, (void *)plus1, NULL);
    cg_module_register_forward_pre_hook(relu, affine_input, (void *)times2, NULL);
    cg_module_register_forward_hook(relu, affine_output, (void *)times2, NULL);
    cg_module_register_forward_hook(relu, affine_output, (void *)plus1, NULL);
    cg_tensor *x = cg_full(CG_SHAPE(1), 1.0f), *y = cg_module_forward(relu, x);
    ck_assert_msg(y != NULL, "%s", cg_last_error());
    CG_ASSERT_TENSOR(y, ((float[]){9}), 0, 0); /* (1 + 1) 2 = 4, then 4 2 + 1 */
    cg_release_all(2, x, y);
    cg_module_free(relu);
    /* handles stay apart: A and B, A removed, C added; C's handle removes C */
    relu = cg_activation_new(CG_ACT_RELU);
    const float times5[2] = {5, 0}, times3[2] = {3, 0};
    cg_hook_handle a = cg_module_register_forward_hook(relu, affine_output, (void *)times5, NULL);
    cg_module_register_forward_hook(relu, affine_output, (void *)times2, NULL);
    ck_assert(cg_hook_remove(&a));
    cg_hook_handle c = cg_module_register_forward_hook(relu, affine_output, (void *)times3, NULL);
    ck_assert(cg_hook_remove(&c));
    x = cg_full(CG_SHAPE(1), 1.0f);
    y = cg_module_forward(relu, x);
    CG_ASSERT_TENSOR(y, ((float[]){2}), 0, 0); /* B alone */
    cg_release_all(2, x, y);
    cg_module_free(relu);
    /* a hook removed by another during a call: it still runs in that call,
     * but is found no more and cannot be removed twice (a copy of its handle) */
    relu = cg_activation_new(CG_ACT_RELU);
    cg_module_register_forward_hook(relu, remove_victim, NULL, NULL);
    g_victim[0] = g_victim[1] =
        cg_module_register_forward_hook(relu, affine_output, (void *)times3, NULL);
    ck_assert_ptr_eq(cg_module_find_hook(relu, (const void *)affine_output), (void *)times3);
    x = cg_full(CG_SHAPE(1), 1.0f);
    for (int k = 0; k < 2; k++) {
        y = cg_module_forward(relu, x);
        CG_ASSERT_TENSOR(y, ((float[]){k ? 1.0f : 3.0f}), 0, 0);
        cg_release(y);
    }
    cg_release(x);
    cg_module_free(relu);
}
END_TEST

START_TEST(test_hooks_every_module)
{
    cg_rng r = cg_rng_new(2);
    cg_tf_config cfg = {.d = 8,
                        .H = 2,
                        .d_ff = 16,
                        .norm = CG_NORM_LAYERNORM,
                        .act = CG_ACT_RELU,
                        .norm_first = true,
                        .dropout = 0.1f};
    cg_module *root = cg_module_new("Model");
    cg_embed *emb = cg_module_add_child(root, "emb", cg_embed_new(5, 8, &r));
    cg_posenc *pe = cg_module_add_child(root, "pe", cg_posenc_new(16, 8));
    cg_drop *dr = cg_module_add_child(root, "drop", cg_drop_new(0.1f, NULL));
    cg_lm_block *blk = cg_module_add_child(root, "blk", cg_lm_block_new(&cfg, &r));
    cg_enc_stack *enc = cg_module_add_child(root, "enc", cg_enc_stack_new(1, &cfg, &r));
    cg_dec_stack *dec = cg_module_add_child(root, "dec", cg_dec_stack_new(1, &cfg, &r));
    ck_assert_ptr_nonnull(dec);
    counters c = {0};
    hook_all(root, "", &c);
    const int64_t ids[6] = {0, 1, 2, 3, 4, 0};
    cg_tensor *e = cg_embed_forward(emb, cg_test_ids_nd(CG_SHAPE(2, 3), ids));
    cg_tensor *p = cg_posenc_forward(pe, e), *d = cg_drop_forward(dr, p);
    cg_attn_mask causal = {.causal = true};
    cg_tensor *b = cg_lm_block_forward(blk, d, &causal);
    cg_tensor *m = cg_enc_stack_forward(enc, b, NULL);
    cg_tensor *y = cg_dec_stack_forward(dec, b, m, &causal, NULL);
    ck_assert_ptr_nonnull(y);
    assert_all_called(&c);
    /* the cached forms run the hooks too */
    for (int i = 0; i < c.n; i++)
        c.calls[i] = 0;
    cg_module_train(root, false);
    cg_kv_cache *kv = cg_kv_cache_new(1), *kd = cg_kv_cache_new(1);
    cg_lm_block *blocks[1] = {blk};
    cg_tensor *bc = cg_lm_blocks_forward_cached(blocks, 1, d, kv);
    cg_tensor *dc = cg_dec_stack_forward_cached(dec, d, m, NULL, kd);
    ck_assert_ptr_nonnull(bc);
    ck_assert_ptr_nonnull(dc);
    for (int i = 0; i < c.n; i++) {
        bool in_cached = strncmp(c.path[i], ".blk", 4) == 0 || strncmp(c.path[i], ".dec", 4) == 0;
        if (in_cached && strstr(c.path[i], "ln_f") == NULL && strcmp(c.m[i]->type, "ModuleList"))
            ck_assert_msg(c.calls[i] > 0, "cached: the hook of %s never ran", c.path[i]);
    }
    cg_kv_cache_free(kv);
    cg_kv_cache_free(kd);
    cg_release_all(8, e, p, d, b, m, y, bc, dc);
    cg_module_free(root);
}
END_TEST

/* --------------------------------------------------------------- freezing */
START_TEST(test_module_requires_grad_and_optim)
{
    cg_rng r = cg_rng_new(3);
    cg_ff *ff = cg_ff_new(4, 8, CG_ACT_GELU, &r);
    cg_module_requires_grad(CG_MODULE(ff->fc1), false);
    ck_assert(!ff->fc1->weight->requires_grad && !ff->fc1->bias->requires_grad);
    ck_assert(ff->fc2->weight->requires_grad);
    cg_optim *o = cg_adamw_from_module(CG_MODULE(ff), 1e-2);
    ck_assert_int_eq(cg_optim_count(o), 2);
    ck_assert_str_eq(cg_optim_param_name(o, 0), "fc2.weight");
    cg_tensor *x = cg_randn(&r, CG_SHAPE(3, 4));
    cg_tensor *y = cg_ff_forward(ff, x), *s = cg_sum_all(y);
    ck_assert(cg_backward(s, NULL, false));
    ck_assert_ptr_null(cg_grad(ff->fc1->weight));
    ck_assert_ptr_nonnull(cg_grad(ff->fc2->weight));
    float *before = cg_test_values(ff->fc1->weight);
    ck_assert(cg_optim_step(o));
    float *after = cg_test_values(ff->fc1->weight);
    ck_assert(!memcmp(before, after, 32 * sizeof(float)));
    /* unfrozen later: the old optimizer does not have it (as PyTorch's) */
    cg_module_requires_grad(CG_MODULE(ff), true);
    ck_assert_int_eq(cg_optim_count(o), 2);
    cg_optim *o2 = cg_sgd_from_module(CG_MODULE(ff), 1e-2);
    ck_assert_int_eq(cg_optim_count(o2), 4);
    free(before);
    free(after);
    cg_release_all(3, x, y, s);
    cg_optim_free(o);
    cg_optim_free(o2);
    cg_module_free(CG_MODULE(ff));
}
END_TEST

/* ------------------------------------------------------------------- LoRA */
START_TEST(test_lora_forward_merge)
{
    cg_rng r = cg_rng_new(4);
    cg_linear *l = cg_linear_new(6, 5, true, &r);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(3, 6));
    cg_tensor *base = cg_linear_forward(l, x);
    cg_lora *a = cg_lora_attach(l, 2, 8.0f, 0.0f, &r);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_eq(cg_lora_of(l), a);
    ck_assert(a->scale == 4.0f);
    ck_assert(!l->weight->requires_grad && !l->bias->requires_grad);
    /* PEFT's init: A in (-1/sqrt(in), 1/sqrt(in)), not all zero; B = 0 */
    float *av = cg_test_values(a->lora_A->weight), bound = 1.0f / sqrtf(6.0f), mx = 0;
    for (int i = 0; i < 12; i++)
        mx = fmaxf(mx, fabsf(av[i]));
    ck_assert(mx > 0 && mx <= bound);
    free(av);
    cg_tensor *y0 = cg_linear_forward(l, x);
    ck_assert(bit_equal(y0, base)); /* B = 0: nothing changes */
    ck_assert_ptr_nonnull(cg_module_get_param(CG_MODULE(l), "lora_A.weight"));
    ck_assert_ptr_nonnull(cg_module_get_param(CG_MODULE(l), "lora_B.weight"));
    CG_ASSERT_FAILS(cg_lora_attach(l, 2, 8.0f, 0.0f, &r), "already has an adapter");
    /* y = base + scale * x A^T B^T */
    ck_assert(cg_init_normal_(a->lora_B->weight, &r, 0.0f, 0.5f));
    cg_tensor *y = cg_linear_forward(l, x);
    cg_tensor *h = cg_linear_fn(x, a->lora_A->weight, NULL);
    cg_tensor *u = cg_linear_fn(h, a->lora_B->weight, NULL), *su = cg_muls(u, 4.0f);
    cg_tensor *expect = cg_add(base, su);
    ck_assert(max_abs_diff(y, expect) < 1e-5f);
    /* merge: the same output from the weight alone; unmerge restores it */
    float *w0 = cg_test_values(l->weight);
    ck_assert(cg_lora_merge(a));
    CG_ASSERT_FAILS((void *)(intptr_t)cg_lora_merge(a), "already merged");
    cg_tensor *ym = cg_linear_forward(l, x);
    ck_assert(max_abs_diff(ym, y) < 1e-5f);
    ck_assert(cg_lora_unmerge(a));
    CG_ASSERT_TENSOR(l->weight, w0, 1e-6, 1e-6);
    cg_tensor *yu = cg_linear_forward(l, x);
    ck_assert(max_abs_diff(yu, y) < 1e-5f);
    free(w0);
    cg_release_all(10, x, base, y0, y, h, u, su, expect, ym, yu);
    cg_module_free(CG_MODULE(l));
}
END_TEST

static cg_tensor *lora_fn(void *ctx, cg_tensor *const *in) { return cg_linear_forward(ctx, in[0]); }

/* LoRA with its dropout on: the mask drawn again from one generator state
 * every call (the gradcheck's function must be one function). */
typedef struct {
    cg_linear *l;
    cg_rng *rng, rng0;
} lora_drop_ctx;

static cg_tensor *lora_drop_fn(void *ctx, cg_tensor *const *in)
{
    lora_drop_ctx *c = ctx;
    *c->rng = c->rng0;
    return cg_linear_forward(c->l, in[0]);
}

START_TEST(test_lora_dropout_gradcheck)
{
    cg_rng r = cg_rng_new(7);
    cg_linear *l = cg_linear_new(4, 3, true, &r);
    randomize(CG_MODULE(l), 8, 0.5f);
    cg_lora *a = cg_lora_attach(l, 2, 3.0f, 0.4f, &r);
    ck_assert_msg(a, "%s", cg_last_error());
    ck_assert(cg_init_normal_(a->lora_B->weight, &r, 0.0f, 0.5f));
    cg_drop *d = a->dropout;
    lora_drop_ctx c = {l, d->rng ? d->rng : &d->own_rng, {0}};
    c.rng0 = *c.rng;
    cg_tensor *x = randn_leaf(&r, CG_SHAPE(2, 3, 4));
    cg_tensor *in[3] = {x, a->lora_A->weight, a->lora_B->weight};
    cg_gradcheck_report rep;
    ck_assert_msg(cg_gradcheck(lora_drop_fn, &c, 3, in, NULL, &rep), "%s", rep.message);
    ck_assert_int_ge(rep.checked, 24 + 8 + 6);
    /* the dropout ran: x's gradient is not the one without it */
    cg_tensor *y = lora_drop_fn(&c, in), *s = cg_sum_all(y);
    ck_assert(cg_backward(s, NULL, false));
    float gd[24], g0[24];
    cg_copy_to(cg_grad(x), gd);
    cg_zero_grad(x);
    cg_module_train(CG_MODULE(d), false);
    cg_tensor *y0 = lora_drop_fn(&c, in), *s0 = cg_sum_all(y0);
    ck_assert(cg_backward(s0, NULL, false));
    cg_copy_to(cg_grad(x), g0);
    ck_assert(memcmp(gd, g0, sizeof gd) != 0);
    cg_release_all(5, x, y, s, y0, s0);
    cg_module_free(CG_MODULE(l));
}
END_TEST

START_TEST(test_lora_gradcheck)
{
    cg_rng r = cg_rng_new(5);
    cg_linear *l = cg_linear_new(4, 3, true, &r);
    randomize(CG_MODULE(l), 6, 0.5f);
    cg_lora *a = cg_lora_attach(l, 2, 3.0f, 0.0f, &r);
    ck_assert(cg_init_normal_(a->lora_B->weight, &r, 0.0f, 0.5f));
    cg_tensor *x = randn_leaf(&r, CG_SHAPE(2, 3, 4));
    cg_tensor *in[3] = {x, a->lora_A->weight, a->lora_B->weight};
    cg_gradcheck_opts o = cg_gradcheck_defaults();
    cg_gradcheck_report rep;
    ck_assert_msg(cg_gradcheck(lora_fn, l, 3, in, &o, &rep), "%s", rep.message);
    ck_assert_int_ge(rep.checked, 24 + 8 + 6);
    /* the frozen base gets no gradient */
    cg_tensor *y = cg_linear_forward(l, x), *s = cg_sum_all(y);
    ck_assert(cg_backward(s, NULL, false));
    ck_assert_ptr_null(cg_grad(l->weight));
    ck_assert_ptr_nonnull(cg_grad(a->lora_A->weight));
    cg_release_all(3, x, y, s);
    cg_module_free(CG_MODULE(l));
}
END_TEST

static cg_lm_block *make_block(uint64_t seed)
{
    cg_rng r = cg_rng_new(seed);
    cg_tf_config cfg = {.d = 8,
                        .H = 2,
                        .d_ff = 16,
                        .norm = CG_NORM_LAYERNORM,
                        .act = CG_ACT_GELU,
                        .norm_first = true};
    cg_lm_block *b = cg_lm_block_new(&cfg, &r);
    randomize(CG_MODULE(b), seed + 1, 0.3f);
    return b;
}

/* A writer holding a copy of every tensor of f (no metadata). */
static cg_st_writer *writer_with_tensors(cg_st_file *f)
{
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(w);
    for (int i = 0; i < cg_st_count(f); i++) {
        cg_tensor *t = cg_st_get(f, cg_st_name(f, i));
        ck_assert(cg_st_add(w, cg_st_name(f, i), t));
        cg_release(t);
    }
    return w;
}

/* path rewritten with its adapter config's `from` replaced by `to`. */
static void rewrite_config(const char *path, const char *from, const char *to)
{
    cg_st_file *f = cg_st_open(path);
    ck_assert(f);
    cg_st_writer *w = writer_with_tensors(f);
    char js[1024];
    const char *old = cg_st_metadata(f, "adapter_config"), *at = strstr(old, from);
    ck_assert_ptr_nonnull(at);
    snprintf(js, sizeof js, "%.*s%s%s", (int)(at - old), old, to, at + strlen(from));
    ck_assert(cg_st_set_metadata(w, "adapter_config", js));
    cg_st_close(f);
    ck_assert(cg_st_writer_save(w, path));
    cg_st_writer_free(w);
}

START_TEST(test_lora_targets_save_load)
{
    const char *targets[] = {"q_proj", "v_proj"};
    cg_lora_config lc = {
        .r = 2, .alpha = 4.0f, .dropout = 0.1f, .n_targets = 2, .targets = targets};
    cg_lm_block *b = make_block(7);
    cg_rng r = cg_rng_new(8);
    ck_assert_int_eq(cg_lora_attach_all(CG_MODULE(b), &lc, &r), 2);
    ck_assert_ptr_nonnull(cg_lora_of(b->attn->q_proj));
    ck_assert_ptr_nonnull(cg_lora_of(b->attn->v_proj));
    ck_assert_ptr_null(cg_lora_of(b->attn->k_proj));
    cg_optim *o = cg_adam_from_module(CG_MODULE(b), 1e-3);
    ck_assert_int_eq(cg_optim_count(o), 4); /* only A and B of the two adapters */
    ck_assert_str_eq(cg_optim_param_name(o, 0), "attn.q_proj.lora_A.weight");
    cg_optim_free(o);
    ck_assert(cg_init_normal_(cg_lora_of(b->attn->q_proj)->lora_B->weight, &r, 0, 0.5f));
    ck_assert(cg_init_normal_(cg_lora_of(b->attn->v_proj)->lora_B->weight, &r, 0, 0.5f));
    cg_module_train(CG_MODULE(b), false);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(1, 5, 8));
    cg_attn_mask causal = {.causal = true};
    cg_tensor *y = cg_lm_block_forward(b, x, &causal);
    /* the cached path goes through the hooked projections too */
    cg_kv_cache *c = cg_kv_cache_new(1);
    cg_lm_block *blocks[1] = {b};
    cg_tensor *yc = cg_lm_blocks_forward_cached(blocks, 1, x, c);
    ck_assert(max_abs_diff(yc, y) < 1e-5f);
    cg_kv_cache_free(c);

    char path[PATH_MAX];
    int fd = cg_test_mkstemp(path, sizeof path, "cg_test_lora_");
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_msg(cg_lora_save(CG_MODULE(b), path), "%s", cg_last_error());
    cg_st_file *f = cg_st_open(path);
    ck_assert_int_eq(cg_st_count(f), 4);
    ck_assert(cg_st_has(f, "base_model.model.attn.q_proj.lora_A.weight"));
    ck_assert(cg_st_has(f, "base_model.model.attn.v_proj.lora_B.weight"));
    const char *js = cg_st_metadata(f, "adapter_config");
    ck_assert_ptr_nonnull(js);
    ck_assert_ptr_nonnull(strstr(js, "\"r\":2"));
    ck_assert_ptr_nonnull(strstr(js, "\"lora_alpha\":4"));
    ck_assert_ptr_nonnull(strstr(js, "\"target_modules\":[\"q_proj\",\"v_proj\"]"));
    ck_assert_ptr_nonnull(strstr(js, "\"lora_dropout\":0.1"));
    cg_st_close(f);

    /* onto a freshly built base: the same outputs, bit for bit */
    cg_lm_block *b2 = make_block(7);
    ck_assert_msg(cg_lora_load(CG_MODULE(b2), path), "%s", cg_last_error());
    cg_module_train(CG_MODULE(b2), false);
    cg_tensor *y2 = cg_lm_block_forward(b2, x, &causal);
    ck_assert(bit_equal(y2, y));
    /* a second load onto a model that has adapters is refused */
    ck_assert(!cg_lora_load(CG_MODULE(b2), path));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "already has adapters"));
    /* merged: the same outputs; unmerge_all undoes it */
    ck_assert_int_eq(cg_lora_merge_all(CG_MODULE(b2)), 2);
    cg_tensor *ym = cg_lm_block_forward(b2, x, &causal);
    ck_assert(max_abs_diff(ym, y) < 1e-5f);
    ck_assert_int_eq(cg_lora_unmerge_all(CG_MODULE(b2)), 2);
    /* a model with none of the target names */
    cg_linear *other = cg_linear_new(8, 8, true, NULL);
    ck_assert(!cg_lora_load(CG_MODULE(other), path));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "matches the target modules"));
    /* issue 34, finding 8: r is checked against the tensors, before any
     * allocation, naming the config */
    const char *bad_r[3][2] = {
        {"\"r\":2", "\"r\":2.5"}, {"\"r\":2.5", "\"r\":1e300"}, {"\"r\":1e300", "\"r\":3"}};
    const char *says[3] = {"the adapter config's r is 2.5", "the adapter config's r is 1e+300",
                           "the adapter config's r is 3 but 'base_model.model.attn."};
    for (int k = 0; k < 3; k++) {
        rewrite_config(path, bad_r[k][0], bad_r[k][1]);
        cg_lm_block *bk = make_block(7);
        ck_assert(!cg_lora_load(CG_MODULE(bk), path));
        ck_assert_msg(strstr(cg_last_error(), says[k]), "%s", cg_last_error());
        ck_assert_ptr_null(cg_lora_of(bk->attn->q_proj)); /* nothing attached */
        cg_module_free(CG_MODULE(bk));
    }
    /* a config with more after its object is not JSON (cJSON_Parse took it) */
    rewrite_config(path, "\"r\":3", "\"r\":2");
    cg_lm_block *b4 = make_block(7);
    ck_assert_msg(cg_lora_load(CG_MODULE(b4), path), "%s", cg_last_error());
    cg_module_free(CG_MODULE(b4));
    rewrite_config(path, "]}", "]}p");
    b4 = make_block(7);
    ck_assert(!cg_lora_load(CG_MODULE(b4), path));
    ck_assert_msg(strstr(cg_last_error(), "the 'adapter_config' metadata is not JSON"), "%s",
                  cg_last_error());
    ck_assert_ptr_null(cg_lora_of(b4->attn->q_proj));
    cg_module_free(CG_MODULE(b4));
    /* a file that is not an adapter */
    ck_assert(cg_module_save(CG_MODULE(other), path, 0, NULL));
    cg_lm_block *b3 = make_block(7);
    ck_assert(!cg_lora_load(CG_MODULE(b3), path));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "not a LoRA adapter file"));
    unlink(path);
    cg_release_all(4, x, y, yc, y2);
    cg_release(ym);
    cg_module_free(CG_MODULE(b));
    cg_module_free(CG_MODULE(b2));
    cg_module_free(CG_MODULE(b3));
    cg_module_free(CG_MODULE(other));
}
END_TEST

/* A file of a few bytes with "r": 2^20 and no tensors attached adapters of
 * r rows to every target before finding them missing (gigabytes for the
 * zoo's default model: a crash or "out of memory" for a 216-byte file): a
 * load checks that the file holds every adapter, with its shape, before
 * it attaches any (found by fuzz/fuzz_lora.c). */
static void write_adapter(const char *path, const char *config, const char *tensor, int64_t rows,
                          int64_t cols)
{
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(w && cg_st_set_metadata(w, "adapter_config", config));
    if (tensor) {
        cg_tensor *t = cg_zeros(CG_SHAPE(rows, cols));
        ck_assert(cg_st_add_f32(w, tensor, t));
        cg_release(t);
    }
    ck_assert_msg(cg_st_writer_save(w, path), "%s", cg_last_error());
    cg_st_writer_free(w);
}

START_TEST(test_lora_load_checks_before_attaching)
{
    char path[PATH_MAX];
    int fd = cg_test_mkstemp(path, sizeof path, "cg_test_lora_");
    ck_assert_int_ge(fd, 0);
    close(fd);
    const char *big = "{\"r\":1048576,\"lora_alpha\":1,\"target_modules\":[\"q_proj\"]}";
    const char *two = "{\"r\":2,\"lora_alpha\":1,\"target_modules\":[\"q_proj\"]}";
    const char *key = "base_model.model.attn.q_proj.lora_A.weight";
    struct {
        const char *config, *tensor;
        int64_t rows, cols;
        const char *says;
    } cases[] = {
        {big, NULL, 0, 0, "missing 'base_model.model.attn.q_proj.lora_A.weight'"},
        {two, NULL, 0, 0,
         "missing 'base_model.model.attn.q_proj.lora_A.weight', "
         "'base_model.model.attn.q_proj.lora_B.weight'"},
        {big, key, 1048576, 0, "'base_model.model.attn.q_proj.lora_A.weight' is [1048576, 0]"},
        {two, key, 2, 3, "'base_model.model.attn.q_proj.lora_A.weight' is [2, 3], not the [2, 8]"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        write_adapter(path, cases[k].config, cases[k].tensor, cases[k].rows, cases[k].cols);
        cg_lm_block *b = make_block(7);
        ck_assert(!cg_lora_load(CG_MODULE(b), path));
        ck_assert_msg(strstr(cg_last_error(), cases[k].says), "%s", cg_last_error());
        ck_assert_ptr_null(cg_lora_of(b->attn->q_proj)); /* nothing attached */
        cg_module_free(CG_MODULE(b));
    }
    unlink(path);
}
END_TEST

/* An adapter file holds the adapters' A and B only: a tensor of the base
 * under "base_model.model." (which a load would copy over the base's
 * weight) or one outside it is refused, naming it, and nothing is attached.
 * The adapters' own lora_A and lora_B Linears are not targets. */
START_TEST(test_lora_load_refuses_other_tensors)
{
    const char *targets[] = {"q_proj"};
    cg_lora_config lc = {.r = 2, .alpha = 4.0f, .n_targets = 1, .targets = targets};
    cg_lm_block *b = make_block(7);
    cg_rng r = cg_rng_new(8);
    ck_assert_int_eq(cg_lora_attach_all(CG_MODULE(b), &lc, &r), 1);
    const char *inner[] = {"lora_A"}, *inner_path[] = {"attn.q_proj.lora_B"};
    cg_lora_config li = {.r = 1, .alpha = 1.0f, .n_targets = 1, .targets = inner};
    CG_ASSERT_REFUSED(cg_lora_attach_all(CG_MODULE(b), &li, &r) < 0, "matches the target modules");
    li.targets = inner_path;
    CG_ASSERT_REFUSED(cg_lora_attach_all(CG_MODULE(b), &li, &r) < 0, "matches the target modules");
    ck_assert_ptr_null(cg_lora_of(cg_lora_of(b->attn->q_proj)->lora_A));
    char path[PATH_MAX];
    int fd = cg_test_mkstemp(path, sizeof path, "cg_test_lora_");
    ck_assert_int_ge(fd, 0);
    close(fd);
    const char *extra[] = {"base_model.model.attn.k_proj.weight", "other"};
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(cg_lora_save(CG_MODULE(b), path), "%s", cg_last_error());
        cg_st_file *f = cg_st_open(path);
        ck_assert(f);
        cg_st_writer *w = writer_with_tensors(f);
        ck_assert(cg_st_set_metadata(w, "adapter_config", cg_st_metadata(f, "adapter_config")));
        cg_tensor *z = cg_zeros(CG_SHAPE(8, 8));
        ck_assert(cg_st_add(w, extra[k], z));
        cg_release(z);
        cg_st_close(f);
        ck_assert(cg_st_writer_save(w, path));
        cg_st_writer_free(w);
        cg_lm_block *b2 = make_block(7);
        const float k0 = cg_data(b2->attn->k_proj->weight)[0];
        CG_ASSERT_REFUSED(!cg_lora_load(CG_MODULE(b2), path), extra[k]);
        ck_assert_ptr_nonnull(strstr(cg_last_error(), "unexpected"));
        ck_assert_ptr_null(cg_lora_of(b2->attn->q_proj));
        ck_assert_float_eq(cg_data(b2->attn->k_proj->weight)[0], k0);
        cg_module_free(CG_MODULE(b2));
    }
    unlink(path);
    cg_module_free(CG_MODULE(b));
}
END_TEST

/* Adapters attached by full path to some of the Linears of a name: the
 * saved target_modules name those Linears, not every one of that local
 * name, so the file loads back onto them (it named "q_proj", and the load
 * attached an adapter to every q_proj and refused the file as missing the
 * others). */
static cg_enc_stack *make_stack(void)
{
    cg_rng r = cg_rng_new(3);
    cg_tf_config cfg = {.d = 8, .H = 2, .d_ff = 16, .norm_first = true};
    cg_enc_stack *s = cg_enc_stack_new(2, &cfg, &r);
    ck_assert_ptr_nonnull(s);
    cg_module_train(CG_MODULE(s), false);
    return s;
}

START_TEST(test_lora_full_path_save_load)
{
    const char *targets[] = {"layers.1.self_attn.q_proj"};
    cg_lora_config lc = {.r = 2, .alpha = 4.0f, .n_targets = 1, .targets = targets};
    cg_enc_stack *s = make_stack();
    cg_rng r = cg_rng_new(4);
    ck_assert_int_eq(cg_lora_attach_all(CG_MODULE(s), &lc, &r), 1);
    cg_lora *a = cg_lora_of(s->layers[1]->self_attn->q_proj);
    ck_assert(cg_init_normal_(a->lora_B->weight, &r, 0, 0.5f));
    char path[PATH_MAX];
    int fd = cg_test_mkstemp(path, sizeof path, "cg_test_lora_");
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_msg(cg_lora_save(CG_MODULE(s), path), "%s", cg_last_error());
    cg_enc_stack *s2 = make_stack();
    ck_assert_msg(cg_lora_load(CG_MODULE(s2), path), "%s", cg_last_error());
    unlink(path);
    ck_assert_ptr_null(cg_lora_of(s2->layers[0]->self_attn->q_proj));
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 5, 8));
    cg_tensor *y = cg_enc_stack_forward(s, x, NULL), *y2 = cg_enc_stack_forward(s2, x, NULL);
    ck_assert(bit_equal(y2, y));
    cg_release_all(3, x, y, y2);
    cg_module_free(CG_MODULE(s));
    cg_module_free(CG_MODULE(s2));
}
END_TEST

/* target_modules as PEFT matches a list: the whole path, or its end after
 * a dot ("self_attn.q_proj" names every layer's, never an "xq_proj" or a
 * "self_attn.q_proj.x"); the adapters land on exactly those Linears, and a
 * save whose targets would name more is refused. */
START_TEST(test_lora_target_suffix)
{
    const char *p = "layers.1.self_attn.q_proj";
    const struct {
        const char *target;
        bool matches;
    } cases[] = {{"q_proj", true},
                 {"self_attn.q_proj", true},
                 {"1.self_attn.q_proj", true},
                 {"layers.1.self_attn.q_proj", true},
                 {"_proj", false},
                 {"elf_attn.q_proj", false},
                 {"layers.1.self_attn", false},
                 {"x.layers.1.self_attn.q_proj", false},
                 {".q_proj", false},
                 {"", false}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(cg_lora_target_matches(cases[i].target, p) == cases[i].matches, "'%s'",
                      cases[i].target);
    ck_assert(!cg_lora_target_matches(NULL, p) && !cg_lora_target_matches("q_proj", NULL));
    const char *targets[] = {"self_attn.q_proj", "1.ff.fc2"};
    cg_lora_config lc = {.r = 2, .alpha = 4.0f, .n_targets = 2, .targets = targets};
    cg_enc_stack *s = make_stack();
    cg_rng r = cg_rng_new(4);
    ck_assert_int_eq(cg_lora_attach_all(CG_MODULE(s), &lc, &r), 3);
    for (int l = 0; l < 2; l++) {
        ck_assert_ptr_nonnull(cg_lora_of(s->layers[l]->self_attn->q_proj));
        ck_assert_ptr_null(cg_lora_of(s->layers[l]->self_attn->k_proj));
        ck_assert_ptr_null(cg_lora_of(s->layers[l]->ff->fc1));
    }
    ck_assert_ptr_null(cg_lora_of(s->layers[0]->ff->fc2));
    ck_assert_ptr_nonnull(cg_lora_of(s->layers[1]->ff->fc2));
    cg_module_free(CG_MODULE(s));
    /* an adapter on "block.fc" alone, beside a plain "sub.block.fc": no
     * list of target_modules names it alone, so a save is refused (a load
     * would attach to both) */
    cg_module *root = cg_module_alloc(sizeof(cg_module), "Root", NULL);
    cg_module *blk = cg_module_alloc(sizeof(cg_module), "Block", NULL);
    cg_module *sub = cg_module_alloc(sizeof(cg_module), "Sub", NULL);
    cg_module *inner = cg_module_alloc(sizeof(cg_module), "Block", NULL);
    cg_linear *fc = cg_linear_new(4, 3, true, &r), *fc2 = cg_linear_new(4, 3, true, &r);
    ck_assert(root && blk && sub && inner && fc && fc2);
    ck_assert(cg_module_add_child(blk, "fc", fc) && cg_module_add_child(root, "block", blk));
    ck_assert(cg_module_add_child(inner, "fc", fc2) && cg_module_add_child(sub, "block", inner) &&
              cg_module_add_child(root, "sub", sub));
    ck_assert_ptr_nonnull(cg_lora_attach(fc, 2, 4.0f, 0.0f, &r));
    char path[PATH_MAX];
    int fd = cg_test_mkstemp(path, sizeof path, "cg_test_lora_");
    ck_assert_int_ge(fd, 0);
    close(fd);
    CG_ASSERT_REFUSED(!cg_lora_save(root, path), "cannot name the adapted Linears alone");
    ck_assert_ptr_nonnull(cg_lora_attach(fc2, 2, 4.0f, 0.0f, &r)); /* both: "fc" names them */
    ck_assert_msg(cg_lora_save(root, path), "%s", cg_last_error());
    unlink(path);
    cg_module_free(root);
}
END_TEST

/* PEFT's merge_and_unload (and unload): the adapters leave the block, whose
 * parameters and state dict are a plain block's again; merged, it gives
 * the adapted output (up to float rounding); unloaded without a merge, the
 * base's bits. A shared child survives its removal from one parent. */
START_TEST(test_lora_unload)
{
    const char *targets[] = {"q_proj", "fc2"};
    cg_lora_config lc = {.r = 2, .alpha = 4.0f, .n_targets = 2, .targets = targets};
    cg_rng r = cg_rng_new(5);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 4, 8));
    cg_attn_mask causal = {.causal = true};
    for (int merge = 0; merge < 2; merge++) {
        cg_lm_block *b = make_block(7);
        cg_module_train(CG_MODULE(b), false);
        cg_tensor *y0 = cg_lm_block_forward(b, x, &causal);
        ck_assert_int_eq(cg_lora_attach_all(CG_MODULE(b), &lc, &r), 2);
        ck_assert(cg_init_normal_(cg_lora_of(b->attn->q_proj)->lora_B->weight, &r, 0, 0.5f) &&
                  cg_init_normal_(cg_lora_of(b->ff->fc2)->lora_B->weight, &r, 0, 0.5f));
        cg_tensor *ya = cg_lm_block_forward(b, x, &causal);
        ck_assert(max_abs_diff(ya, y0) > 1e-3f); /* the adapters change it */
        if (!merge) /* merged, then unloaded without: the merge is taken back out */
            ck_assert_int_eq(cg_lora_merge_all(CG_MODULE(b)), 2);
        ck_assert_int_eq(cg_lora_unload_all(CG_MODULE(b), merge), 2);
        ck_assert_ptr_null(cg_lora_of(b->attn->q_proj));
        ck_assert_ptr_null(cg_lora_of(b->ff->fc2));
        ck_assert_int_eq(b->attn->q_proj->base.n_children, 0);
        cg_param_list l = {0};
        ck_assert(cg_module_state_dict(CG_MODULE(b), &l));
        for (int i = 0; i < l.n; i++)
            ck_assert_msg(!strstr(l.items[i].name, "lora"), "%s", l.items[i].name);
        cg_param_list_free(&l);
        cg_tensor *yu = cg_lm_block_forward(b, x, &causal);
        ck_assert(max_abs_diff(yu, merge ? ya : y0) < 1e-5f);
        ck_assert_int_eq(cg_lora_unload_all(CG_MODULE(b), true), 0); /* none left */
        cg_release_all(3, y0, ya, yu);
        cg_module_free(CG_MODULE(b));
    }
    cg_release(x);
    CG_ASSERT_REFUSED(!cg_lora_unload(NULL, true), "the adapter is NULL");
    cg_module *p1 = cg_module_alloc(sizeof(cg_module), "P", NULL);
    cg_module *p2 = cg_module_alloc(sizeof(cg_module), "P", NULL);
    cg_linear *shared = cg_linear_new(3, 2, true, &r);
    ck_assert(cg_module_add_child(p1, "fc", shared) && cg_module_add_child(p2, "fc", shared));
    ck_assert(cg_module_remove_child(p1, "fc") && p1->n_children == 0);
    CG_ASSERT_REFUSED(!cg_module_remove_child(p1, "fc"), "module P has no child 'fc'");
    ck_assert_int_eq(cg_module_num_params(p2), 8); /* still p2's */
    cg_module_free(p1);
    cg_module_free(p2);
}
END_TEST

/* Dropout p = 1 where the library's dropout takes it (8c47267, PyTorch's
 * nn.Dropout(1.0)): a transformer config and a LoRA adapter accept it
 * (they refused [1, ...) as out of [0, 1)), its adapter config is saved and
 * loaded back; above 1, below 0 and NaN are still refused. With p = 1 in
 * training the adapter's input is all zeros, so its output is the base's. */
START_TEST(test_dropout_one)
{
    cg_tf_config cfg = {.d = 8, .H = 2, .d_ff = 16, .norm = CG_NORM_LAYERNORM, .act = CG_ACT_RELU};
    cfg.dropout = 1.0f;
    ck_assert_msg(cg_tf_config_check(&cfg), "%s", cg_last_error());
    const float bad[] = {1.5f, -0.1f, NAN};
    for (int i = 0; i < 3; i++) {
        cfg.dropout = bad[i];
        CG_ASSERT_REFUSED(!cg_tf_config_check(&cfg), "dropout must be in [0, 1]");
    }
    cg_rng r = cg_rng_new(3);
    for (int i = 0; i < 3; i++) {
        cg_linear *lb = cg_linear_new(6, 5, true, &r);
        CG_ASSERT_REFUSED(cg_lora_attach(lb, 2, 4.0f, bad[i], &r) == NULL, "dropout in [0, 1]");
        cg_module_free(CG_MODULE(lb));
    }
    cg_linear *l = cg_linear_new(6, 5, true, &r);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(3, 6));
    cg_tensor *base = cg_linear_forward(l, x);
    cg_lora *a = cg_lora_attach(l, 2, 4.0f, 1.0f, &r);
    ck_assert_msg(a != NULL, "%s", cg_last_error());
    ck_assert(cg_init_normal_(a->lora_B->weight, &r, 0.0f, 0.5f));
    cg_module_train(CG_MODULE(l), true);
    cg_tensor *y = cg_linear_forward(l, x);
    ck_assert(bit_equal(y, base));
    cg_module_train(CG_MODULE(l), false); /* in eval the adapter counts */
    cg_tensor *ye = cg_linear_forward(l, x);
    ck_assert(max_abs_diff(ye, base) > 1e-3f);
    cg_release_all(4, x, base, y, ye);
    cg_module_free(CG_MODULE(l));
    /* saved with lora_dropout 1 and loaded back */
    const char *targets[] = {"q_proj"};
    cg_lora_config lc = {
        .r = 2, .alpha = 4.0f, .dropout = 1.0f, .n_targets = 1, .targets = targets};
    cg_lm_block *b = make_block(7), *b2 = make_block(7);
    ck_assert_int_eq(cg_lora_attach_all(CG_MODULE(b), &lc, &r), 1);
    char path[PATH_MAX];
    int fd = cg_test_mkstemp(path, sizeof path, "cg_test_lora1_");
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_msg(cg_lora_save(CG_MODULE(b), path), "%s", cg_last_error());
    ck_assert_msg(cg_lora_load(CG_MODULE(b2), path), "%s", cg_last_error());
    ck_assert(cg_lora_of(b2->attn->q_proj)->dropout->p == 1.0f);
    unlink(path);
    cg_module_free(CG_MODULE(b));
    cg_module_free(CG_MODULE(b2));
}
END_TEST

/* --------------------------------------------------------------- sampling */
/* The reference draw: every logit / temperature sorted (descending, lower
 * id first among equals), top-k keeping every value >= the k-th, then
 * softmax, top-p and the draw over that order, as the reference's generate
 * and cg_sample before it selected the k largest first. */
typedef struct {
    double p;
    int64_t id;
} ref_pid;
static int ref_cmp(const void *a, const void *b)
{
    const ref_pid *x = a, *y = b;
    if (x->p != y->p)
        return x->p < y->p ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}
static int64_t ref_sample(const float *logits, int64_t V, const cg_sample_config *o, cg_rng *rng)
{
    ref_pid *pi = malloc((size_t)V * sizeof *pi);
    for (int64_t i = 0; i < V; i++)
        pi[i] = (ref_pid){(double)(logits[i] / (float)o->temperature), i};
    qsort(pi, (size_t)V, sizeof *pi, ref_cmp);
    int64_t keep = V;
    if (o->top_k > 0 && o->top_k < V) {
        keep = o->top_k;
        while (keep < V && pi[keep].p >= pi[o->top_k - 1].p)
            keep++;
    }
    double mx = pi[0].p, sum = 0;
    for (int64_t i = 0; i < keep; i++)
        sum += (pi[i].p = exp(pi[i].p - mx));
    for (int64_t i = 0; i < keep; i++)
        pi[i].p /= sum;
    if (o->top_p < 1) {
        double cum = 0;
        int64_t k = 0;
        while (k < keep && !((cum += pi[k++].p) >= o->top_p))
            ;
        keep = k, sum = 0;
        for (int64_t i = 0; i < keep; i++)
            sum += pi[i].p;
        for (int64_t i = 0; i < keep; i++)
            pi[i].p /= sum;
    }
    double u = cg_rng_uniform_double(rng), cum = 0;
    int64_t id = pi[keep - 1].id;
    for (int64_t i = 0; i < keep; i++)
        if (u < (cum += pi[i].p)) {
            id = pi[i].id;
            break;
        }
    free(pi);
    return id;
}

/* cg_sample's draws are the reference's, draw for draw under one seed, on
 * rows of 301 logits with many ties (values on a grid of 1/4, 0 and -0
 * among them) and masked ones (-inf), for k from 1 to V (the k-th value tied with others, or
 * -inf), temperatures and top-p. */
START_TEST(test_sample_top_k_draws)
{
    cg_rng data = cg_rng_new(41);
    const int64_t V = 301, ks[] = {0, 1, 2, 5, 17, 150, 299, 300, 301};
    float logits[301];
    int64_t draws = 0;
    for (int row = 0; row < 24; row++) {
        for (int64_t i = 0; i < V; i++) {
            const double u = cg_rng_uniform_double(&data), m = cg_rng_uniform_double(&data);
            const float v = (float)(floor(u * 24.0) - 12.0) / 4.0f;
            logits[i] = m < 0.1 ? -INFINITY : v == 0.0f && m < 0.5 ? -0.0f : v;
        }
        for (size_t k = 0; k < sizeof ks / sizeof *ks; k++) {
            const cg_sample_config c = {
                .temperature = row % 3 ? 0.7 : 1.0, .top_k = ks[k], .top_p = row % 2 ? 0.9 : 1.0};
            cg_rng r1 = cg_rng_new((uint64_t)row), r2 = cg_rng_new((uint64_t)row);
            for (int d = 0; d < 20; d++, draws++)
                ck_assert_int_eq(cg_sample(logits, V, &c, &r1), ref_sample(logits, V, &c, &r2));
        }
    }
    ck_assert_int_eq(draws, 24 * 9 * 20);
}
END_TEST

/* A temperature below FLT_MIN is greedy (sample.h), also where logits /
 * temperature do not overflow: logits that tie, or differ by less than a
 * normal float, at temperatures whose float is subnormal (1e-40) or 0
 * (1e-46). Only there does the rule decide: logits apart by more give the
 * argmax either way (every other probability underflows to 0), and at a
 * temperature whose float is 0 the quotients are inf or NaN, which the loop
 * takes as greedy too; at 1e-40, 0 / 1e-40 is 0 and the three ids drew
 * uniformly when the rule was dropped. */
START_TEST(test_sample_subnormal_temperature_greedy)
{
    const float zeros[3] = {0, 0, 0}, close[3] = {0, 1e-45f, 0}, apart[3] = {0.01f, 0.02f, 0};
    const float *rows[3] = {zeros, close, apart};
    const int64_t first_largest[3] = {0, 1, 1};
    const double temps[2] = {1e-40, 1e-46};
    ck_assert((float)temps[0] > 0 && (float)temps[1] == 0); /* subnormal, and 0 */
    cg_rng r = cg_rng_new(4);
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 3; k++) {
            const cg_sample_config c = {.temperature = temps[t], .top_p = 1};
            for (int i = 0; i < 100; i++) {
                const int64_t a = cg_sample(rows[k], 3, &c, &r);
                ck_assert_msg(a == first_largest[k], "temperature %g, row %d: drew %lld", temps[t],
                              k, (long long)a);
            }
        }
}
END_TEST

START_TEST(test_sample)
{
    const float logits[5] = {0.1f, 2.0f, -1.0f, 1.9f, 0.5f};
    cg_sample_config c = cg_sample_default();
    cg_rng r1 = cg_rng_new(9), r2 = cg_rng_new(9);
    int counts[5] = {0};
    for (int i = 0; i < 2000; i++) {
        int64_t a = cg_sample(logits, 5, &c, &r1), b = cg_sample(logits, 5, &c, &r2);
        ck_assert_int_eq(a, b); /* deterministic under the seed */
        ck_assert(a >= 0 && a < 5);
        counts[a]++;
    }
    /* softmax: p(1) ~ 0.39, p(2) ~ 0.02 */
    ck_assert(counts[1] > 650 && counts[1] < 900);
    ck_assert(counts[2] > 10 && counts[2] < 90);
    c.top_k = 2; /* only ids 1 and 3 */
    for (int i = 0; i < 200; i++) {
        int64_t a = cg_sample(logits, 5, &c, &r1);
        ck_assert(a == 1 || a == 3);
    }
    c.top_k = 6; /* more than V: refused, as torch.topk refuses k > size */
    CG_ASSERT_REFUSED(cg_sample(logits, 5, &c, &r1) == -1, "top_k 6");
    c.top_k = 5; /* all of them: fine */
    ck_assert(cg_sample(logits, 5, &c, &r1) >= 0);
    c.top_k = 4; /* all but the least likely (id 2, p ~ 0.02) */
    for (int i = 0; i < 1000; i++)
        ck_assert_int_ne(cg_sample(logits, 5, &c, &r1), 2);
    c = (cg_sample_config){.temperature = 1, .top_k = 0, .top_p = 0.3}; /* the top id alone */
    for (int i = 0; i < 50; i++)
        ck_assert_int_eq(cg_sample(logits, 5, &c, &r1), 1);
    c.temperature = 0; /* greedy */
    ck_assert_int_eq(cg_sample(logits, 5, &c, &r1), 1);
    /* ties: greedy takes the first of the largest (torch.argmax); top-p
     * stops at the first id whose sum reaches p (two ids of exactly 1/2:
     * top_p 0.5 keeps the lower id alone, a little more keeps both) */
    const float tied[4] = {-1.0f, 3.0f, 3.0f, 3.0f}, halves[3] = {0.5f, 0.5f, -INFINITY};
    ck_assert_int_eq(cg_sample(tied, 4, &c, &r1), 1);
    c = (cg_sample_config){.temperature = 1, .top_p = 0.5};
    for (int i = 0; i < 200; i++)
        ck_assert_int_eq(cg_sample(halves, 3, &c, &r1), 0);
    c.top_p = 0.5 + 1e-9;
    int ones = 0;
    for (int i = 0; i < 200; i++) {
        int64_t a = cg_sample(halves, 3, &c, &r1);
        ck_assert(a == 0 || a == 1);
        ones += a == 1;
    }
    ck_assert_msg(ones > 50 && ones < 150, "id 1 drawn %d times of 200", ones);
    c.temperature = 0;
    c = (cg_sample_config){.temperature = -1, .top_p = 1};
    ck_assert_int_eq(cg_sample(logits, 5, &c, &r1), -1);
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "temperature"));
    /* each bad field named with its value: a config written with its
     * temperature alone has top_p 0, not off (1 is); a negative top_k */
    c = (cg_sample_config){.temperature = 0.8};
    CG_ASSERT_REFUSED(cg_sample(logits, 5, &c, &r1) == -1, "top_p 0 is not in (0, 1]");
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "cg_sample_default()"));
    c = (cg_sample_config){.temperature = 1, .top_k = -2, .top_p = 1};
    CG_ASSERT_REFUSED(cg_sample(logits, 5, &c, &r1) == -1, "top_k -2 is negative");
    c = (cg_sample_config){.temperature = NAN, .top_p = 1};
    CG_ASSERT_REFUSED(cg_sample(logits, 5, &c, &r1) == -1, "temperature nan is not >= 0");
    /* a diverged model's logits are refused, greedy or not (PyTorch:
     * "probability tensor contains either inf, nan or element < 0");
     * -inf is a masked logit, unless every logit is */
    const float nasty[3][3] = {{0, NAN, 1}, {0, INFINITY, 1}, {-INFINITY, -INFINITY, -INFINITY}};
    for (int b = 0; b < 3; b++)
        for (int greedy = 0; greedy < 2; greedy++) {
            c = (cg_sample_config){.temperature = greedy ? 0 : 1, .top_p = 1};
            cg_clear_error();
            ck_assert_int_eq(cg_sample(nasty[b], 3, &c, &r1), -1);
            ck_assert_ptr_nonnull(strstr(cg_last_error(), b == 2 ? "-inf" : "logit 1"));
        }
    const float masked[3] = {-INFINITY, 2, -INFINITY};
    c = (cg_sample_config){.temperature = 1, .top_p = 1};
    ck_assert_int_eq(cg_sample(masked, 3, &c, &r1), 1);
    /* a temperature past float's range (inf, 1e300): the limit, uniform over
     * the logits that are not masked; a masked one is never drawn (-inf /
     * inf was NaN, and every draw took a masked id) */
    const float masked4[4] = {1, 2, -INFINITY, 0.5f};
    for (int h = 0; h < 2; h++) {
        c = (cg_sample_config){.temperature = h ? INFINITY : 1e300, .top_p = 1};
        int hot[4] = {0};
        for (int i = 0; i < 300; i++) {
            int64_t a = cg_sample(masked4, 4, &c, &r1);
            ck_assert_msg(a >= 0 && a < 4 && a != 2, "temperature %g drew %lld", c.temperature,
                          (long long)a);
            hot[a]++;
        }
        ck_assert_msg(hot[0] > 60 && hot[1] > 60 && hot[3] > 60, "%d %d %d", hot[0], hot[1],
                      hot[3]);
    }
    /* the check alone (decoding's too), on its bit test: every NaN (either
     * sign, any payload) and +inf fail at the first one, in a row long
     * enough for the vector pass and its tail; -inf, FLT_MAX, subnormals
     * and -0 pass */
    float row[37];
    for (int i = 0; i < 37; i++)
        row[i] = (float)(i % 5) - 2.0f;
    row[3] = -INFINITY, row[7] = FLT_MAX, row[8] = -FLT_MAX, row[9] = 1e-45f, row[10] = -0.0f;
    ck_assert(cg_logits_usable(row, 37, "t"));
    const uint32_t bad_bits[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,
                                 0x7fffffffu, 0xffffffffu, 0x7f800000u};
    for (size_t b = 0; b < sizeof bad_bits / sizeof *bad_bits; b++)
        for (int at = 0; at < 37; at += 12) {
            float r2[37], v;
            memcpy(r2, row, sizeof row);
            memcpy(&v, &bad_bits[b], sizeof v);
            r2[at] = v;
            r2[36] = b % 2 ? v : r2[36]; /* a later one too: the first is named */
            cg_clear_error();
            ck_assert_msg(!cg_logits_usable(r2, 37, "t"), "0x%08x at %d passed", bad_bits[b], at);
            char want[64];
            snprintf(want, sizeof want, "t: logit %d of 37 is %s", at,
                     bad_bits[b] == 0x7f800000u ? "+inf" : "NaN");
            ck_assert_msg(strstr(cg_last_error(), want), "%s", cg_last_error());
        }
    /* rows of a tensor */
    cg_tensor *t = cg_from_data(CG_SHAPE(1, 5), logits);
    c = (cg_sample_config){.temperature = 0, .top_p = 1};
    cg_tensor *id = cg_sample_rows(t, &c, &r1);
    ck_assert(id && id->dtype == CG_I64 && id->ndim == 1 && id->shape[0] == 1);
    ck_assert_int_eq(cg_item_i64(id), 1);
    cg_release(id);
    cg_tensor *tb = cg_k_to(t, CG_BF16); /* bf16 logits: the same greedy pick */
    id = cg_sample_rows(tb, &c, &r1);
    ck_assert_int_eq(cg_item_i64(id), 1);
    cg_release_all(3, id, tb, t);
    CG_ASSERT_FAILS(
        cg_sample_rows(cg_test_ids(2, (const int64_t[]){0, 1}), &c, &r1),
        "cg_sample_rows: logits must be a float tensor [..., V] with V >= 1 (got int64 [2])");
    /* multinomial: proportional to the weights, zero weight never drawn */
    const float w[3] = {1.0f, 0.0f, 3.0f};
    int mc[3] = {0};
    for (int i = 0; i < 4000; i++)
        mc[cg_multinomial(w, 3, &r1)]++;
    ck_assert_int_eq(mc[1], 0);
    ck_assert(mc[2] > 2800 && mc[2] < 3200);
    const float bad[2] = {0.0f, 0.0f};
    ck_assert_int_eq(cg_multinomial(bad, 2, &r1), -1);
}
END_TEST

START_TEST(test_randperm_batches)
{
    cg_rng r = cg_rng_new(10), r2 = cg_rng_new(10), r3 = cg_rng_new(11);
    int64_t *p = cg_randperm(&r, 50), *q = cg_randperm(&r2, 50), *s = cg_randperm(&r3, 50);
    int seen[50] = {0};
    for (int i = 0; i < 50; i++)
        seen[p[i]]++;
    for (int i = 0; i < 50; i++)
        ck_assert_int_eq(seen[i], 1);
    ck_assert(!memcmp(p, q, sizeof seen * 2));
    ck_assert(memcmp(p, s, 50 * sizeof *p));
    free(p);
    free(q);
    free(s);
    ck_assert_ptr_null(cg_randperm(&r, -1));
    /* 2^61 + 1 ids: their bytes wrapped to 8 in size_t, malloc gave 8 and
     * the fill ran off the heap (SIGSEGV); refused as too large now */
    CG_ASSERT_REFUSED(cg_randperm(&r, ((int64_t)1 << 61) + 1) == NULL,
                      "randperm: 2305843009213693953 ids are too many");

    cg_tensor *tok = cg_arange_dtype(CG_I64, 100, 141, 1), *x, *y;
    ck_assert(cg_random_batch(tok, 3, 4, &r, &x, &y));
    ck_assert(x->dtype == CG_I64 && x->ndim == 2 && x->shape[0] == 3 && x->shape[1] == 4);
    const int64_t *xs = cg_data_i64(x), *ys = cg_data_i64(y);
    for (int b = 0; b < 3; b++)
        for (int t = 0; t < 4; t++) {
            ck_assert_int_eq(ys[b * 4 + t], xs[b * 4 + t] + 1); /* next tokens */
            ck_assert(xs[b * 4 + t] >= 100 && ys[b * 4 + t] <= 140);
        }
    cg_release_all(2, x, y);
    cg_tensor *few = cg_view_narrow(tok, 0, 0, 4);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_random_batch(few, 3, 4, &r, &x, &y),
                    "cg_random_batch: need tokens of shape [n] with n >= T + 1");
    ck_assert_ptr_null(x);
    /* an epoch: 10 windows of 4+1 starting every 4, 3 per batch, 3 batches */
    cg_batch_iter *it = cg_batch_iter_new(tok, 3, 4, &r);
    int starts[10] = {0}, batches = 0, k;
    while ((k = cg_batch_iter_next(it, &x, &y)) == 1) {
        batches++;
        xs = cg_data_i64(x), ys = cg_data_i64(y);
        for (int b = 0; b < 3; b++) {
            ck_assert_int_eq((xs[b * 4] - 100) % 4, 0);
            starts[(xs[b * 4] - 100) / 4]++;
            ck_assert_int_eq(ys[b * 4 + 3], xs[b * 4] + 4);
        }
        cg_release_all(2, x, y);
    }
    ck_assert_int_eq(k, 0);
    ck_assert_ptr_null(x);
    ck_assert_int_eq(batches, 3);
    for (int i = 0; i < 10; i++)
        ck_assert_int_le(starts[i], 1);                  /* no window twice in an epoch */
    ck_assert_int_eq(cg_batch_iter_next(it, &x, &y), 1); /* the next epoch */
    ck_assert_int_eq(cg_batch_iter_epoch(it), 2);
    cg_release_all(2, x, y);
    cg_batch_iter_free(it);
    few = (cg_release(few), cg_view_narrow(tok, 0, 0, 12));
    CG_ASSERT_FAILS(cg_batch_iter_new(few, 3, 4, &r), "n >= B*T + 1");
    cg_release_all(2, few, tok);
}
END_TEST

/* A decoder's first cached step with a mem_pad that is not bool [B, S] of
 * the memory is refused before the cache changes: a retry with the right
 * mask decodes position 0 as a fresh cache does (the first layer's
 * cross-attention refused it after its self-attention had stored position
 * 0 and the bad copy was kept: every retry was refused). */
START_TEST(test_kv_cache_bad_mem_pad)
{
    cg_rng r = cg_rng_new(5);
    cg_tf_config cfg = {.d = 8, .H = 2, .d_ff = 16, .norm_first = true};
    cg_dec_stack *dec = cg_dec_stack_new(2, &cfg, &r);
    cg_module_train(CG_MODULE(dec), false);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 1, 8)), *mem = cg_randn(&r, CG_SHAPE(2, 4, 8));
    cg_tensor *bad = cg_zeros_dtype(CG_BOOL, CG_SHAPE(2, 5));
    cg_tensor *good = cg_zeros_dtype(CG_BOOL, CG_SHAPE(2, 4));
    cg_kv_cache *c = cg_kv_cache_new(2), *fresh = cg_kv_cache_new(2);
    CG_ASSERT_FAILS(cg_dec_stack_forward_cached(dec, x, mem, bad, c), "[2, 5]");
    ck_assert_int_eq(cg_kv_cache_len(c), 0);
    cg_tensor *y = cg_dec_stack_forward_cached(dec, x, mem, good, c);
    ck_assert_msg(y, "%s", cg_last_error());
    cg_tensor *y0 = cg_dec_stack_forward_cached(dec, x, mem, good, fresh);
    ck_assert(bit_equal(y, y0));
    ck_assert_int_eq(cg_kv_cache_len(c), 1);
    cg_release_all(6, x, mem, bad, good, y, y0);
    cg_kv_cache_free(c);
    cg_kv_cache_free(fresh);
    cg_module_free(CG_MODULE(dec));
}
END_TEST

/* After the first cached step the decoder keeps the memory's keys and
 * values: a later step given another memory (a new sentence's, the cache
 * not reset), the same memory written since, or another mem_pad is refused
 * with the cache unchanged (they were ignored: the old sentence's keys
 * answered silently). The same tensors, a view of the same elements, or
 * NULL go on; after cg_kv_cache_reset a new memory starts again. */
START_TEST(test_kv_cache_memory_kept)
{
    cg_rng r = cg_rng_new(7);
    cg_tf_config cfg = {.d = 8, .H = 2, .d_ff = 16, .norm_first = true};
    cg_dec_stack *dec = cg_dec_stack_new(2, &cfg, &r);
    cg_module_train(CG_MODULE(dec), false);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 1, 8)), *mem = cg_randn(&r, CG_SHAPE(2, 4, 8));
    cg_tensor *other = cg_randn(&r, CG_SHAPE(2, 4, 8)), *same = cg_view_narrow(mem, 0, 0, 2);
    cg_tensor *pad = cg_zeros_dtype(CG_BOOL, CG_SHAPE(2, 4));
    cg_tensor *pad2 = cg_zeros_dtype(CG_BOOL, CG_SHAPE(2, 4));
    cg_kv_cache *c = cg_kv_cache_new(2);
    cg_tensor *y = cg_dec_stack_forward_cached(dec, x, mem, pad, c);
    ck_assert_msg(y, "%s", cg_last_error());
    cg_release(y);
    CG_ASSERT_FAILS(cg_dec_stack_forward_cached(dec, x, other, pad, c), "cg_kv_cache_reset");
    CG_ASSERT_FAILS(cg_dec_stack_forward_cached(dec, x, other, NULL, c), "the memory is not");
    CG_ASSERT_FAILS(cg_dec_stack_forward_cached(dec, x, mem, pad2, c), "mem_pad");
    CG_ASSERT_FAILS(cg_dec_stack_forward_cached(dec, x, NULL, pad2, c), "mem_pad");
    ck_assert_int_eq(cg_kv_cache_len(c), 1);
    const cg_tensor *ok_mem[3] = {mem, same, NULL};
    for (int i = 0; i < 3; i++) {
        y = cg_dec_stack_forward_cached(dec, x, (cg_tensor *)ok_mem[i], i == 2 ? NULL : pad, c);
        ck_assert_msg(y, "%d: %s", i, cg_last_error());
        cg_release(y);
    }
    ck_assert_int_eq(cg_kv_cache_len(c), 4);
    ck_assert(cg_fill_(mem, 0.5));
    CG_ASSERT_FAILS(cg_dec_stack_forward_cached(dec, x, mem, NULL, c), "written");
    cg_kv_cache_reset(c);
    y = cg_dec_stack_forward_cached(dec, x, other, NULL, c);
    ck_assert_msg(y, "%s", cg_last_error());
    ck_assert_int_eq(cg_kv_cache_len(c), 1);
    cg_release_all(7, x, mem, other, same, pad, pad2, y);
    cg_kv_cache_free(c);
    cg_module_free(CG_MODULE(dec));
}
END_TEST

static cg_dec_stack *small_decoder(cg_rng *r)
{
    cg_tf_config cfg = {.d = 8, .H = 2, .d_ff = 16, .norm_first = true};
    cg_dec_stack *dec = cg_dec_stack_new(2, &cfg, r);
    cg_module_train(CG_MODULE(dec), false);
    return dec;
}

/* Live tensors an open cache keeps after one step over a memory computed
 * from a leaf, with or without a graph (every caller's reference gone). */
static int64_t kept_by_cache(bool grad)
{
    cg_rng r = cg_rng_new(3);
    cg_dec_stack *dec = small_decoder(&r);
    int64_t live0 = cg_live_tensors();
    cg_tensor *src = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 4, 8)), true);
    if (!grad)
        cg_no_grad_begin();
    cg_tensor *a = cg_muls(src, 2.0f), *b = cg_gelu(a), *mem = cg_mul(b, a);
    if (!grad)
        cg_no_grad_end();
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 1, 8));
    cg_kv_cache *c = cg_kv_cache_new(2);
    cg_tensor *y = cg_dec_stack_forward_cached(dec, x, mem, NULL, c);
    ck_assert_msg(y, "%s", cg_last_error());
    cg_release_all(6, src, a, b, mem, x, y);
    int64_t kept = cg_live_tensors() - live0;
    cg_kv_cache_free(c);
    ck_assert_int_eq(cg_live_tensors(), live0);
    cg_module_free(CG_MODULE(dec));
    return kept;
}

/* A pre-hook on the decoder stack that maps its memory input. */
static bool scale_memory(void *ctx, cg_module *m, int n_in, cg_tensor **in)
{
    if (n_in > 1 && in[1]) {
        cg_tensor *t = cg_muls(in[1], 1.0f);
        cg_release(in[1]);
        in[1] = t;
    }
    return true;
}

/* Fails its module's first call (an allocation failing in layer 1). */
static bool fail_once(void *ctx, cg_module *m, int n_in, cg_tensor **in)
{
    int *calls = ctx;
    if ((*calls)++ == 0) {
        cg_set_error("planted failure");
        return false;
    }
    return true;
}

/* One cached step of dec in the cache c and in its twin d (memory m and
 * the masks pc and pd; NULL: the first step's): the same bits. */
static void twin_step(cg_dec_stack *dec, cg_tensor *x, cg_tensor *m, cg_tensor *pc, cg_tensor *pd,
                      cg_kv_cache *c, cg_kv_cache *d, int step)
{
    cg_tensor *yc = cg_dec_stack_forward_cached(dec, x, m, pc, c);
    cg_tensor *yd = cg_dec_stack_forward_cached(dec, x, m, pd, d);
    ck_assert_msg(yc && yd, "step %d: %s", step, cg_last_error());
    ck_assert_msg(bit_equal(yc, yd), "step %d", step);
    cg_release_all(2, yc, yd);
}

/* What the cache keeps of the first step's memory (a review's findings):
 * no graph (it held the memory itself, so every encoder activation of a
 * memory that requires grad lived as long as the cache); the caller's
 * memory, not what the stack's pre-hook makes of it (the same memory
 * every step was refused from step 2); after a reorder the rows' own
 * memory is refused (the cache reorders the first one's keys itself),
 * NULL goes on. A first step that fails in layer 1 leaves every layer as
 * it was (layer 0's keys stayed: the retry ran at position 1, 1.2e-3 off,
 * and a retry giving the memory at position 0 only failed for good). */
START_TEST(test_kv_cache_memory_review)
{
    ck_assert_int_eq(kept_by_cache(true), kept_by_cache(false));
    cg_rng r = cg_rng_new(5);
    cg_dec_stack *dec = small_decoder(&r);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 1, 8)), *mem = cg_randn(&r, CG_SHAPE(2, 4, 8));
    cg_hook_handle h =
        cg_module_register_forward_pre_hook(CG_MODULE(dec), scale_memory, NULL, NULL);
    cg_kv_cache *c = cg_kv_cache_new(2), *good = cg_kv_cache_new(2);
    cg_tensor *y[3];
    for (int step = 0; step < 3; step++) {
        y[step] = cg_dec_stack_forward_cached(dec, x, mem, NULL, c);
        ck_assert_msg(y[step], "step %d: %s", step, cg_last_error());
    }
    cg_hook_remove(&h);
    cg_tensor *rows = cg_test_ids(3, (const int64_t[]){1, 1, 0});
    ck_assert(cg_kv_cache_reorder(c, rows));
    cg_tensor *x3 = cg_randn(&r, CG_SHAPE(3, 1, 8)), *mem3 = cg_index_select(mem, 0, rows);
    CG_ASSERT_FAILS(cg_dec_stack_forward_cached(dec, x3, mem3, NULL, c), "reordered");
    cg_tensor *y3 = cg_dec_stack_forward_cached(dec, x3, NULL, NULL, c);
    ck_assert_msg(y3, "%s", cg_last_error());
    cg_kv_cache_reset(c);
    int calls = 0;
    h = cg_module_register_forward_pre_hook(CG_MODULE(dec->layers[1]), fail_once, &calls, NULL);
    CG_ASSERT_FAILS(cg_dec_stack_forward_cached(dec, x, mem, NULL, c), "planted");
    cg_hook_remove(&h);
    ck_assert_int_eq(cg_kv_cache_len(c), 0);
    for (int step = 0; step < 3; step++) /* the zoo's retry: the memory at position 0 only */
        twin_step(dec, x, cg_kv_cache_len(c) ? NULL : mem, NULL, NULL, c, good, step);
    ck_assert_int_eq(cg_kv_cache_len(c), 3);
    cg_release_all(8, x, mem, x3, mem3, y3, y[0], y[1], y[2]);
    cg_kv_cache_free(c);
    cg_kv_cache_free(good);
    cg_module_free(CG_MODULE(dec));
}
END_TEST

/* A reset forgets the memory as well as the positions: the first step's
 * memory, its mask and the mask's copy are let go (the buffers alone are
 * kept, for reuse), and the stacks' count starts again from 0 (c->len
 * kept the old sentence's positions). */
START_TEST(test_kv_cache_reset_forgets)
{
    cg_rng r = cg_rng_new(21);
    cg_dec_stack *dec = small_decoder(&r);
    cg_kv_cache *c = cg_kv_cache_new(2);
    int64_t live0 = cg_live_tensors();
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 1, 8)), *mem = cg_randn(&r, CG_SHAPE(2, 4, 8));
    cg_tensor *pad = cg_zeros_dtype(CG_BOOL, CG_SHAPE(2, 4));
    cg_data_bool(pad)[3] = true;
    for (int step = 0; step < 2; step++) {
        cg_tensor *y = cg_dec_stack_forward_cached(dec, x, mem, pad, c);
        ck_assert_msg(y, "step %d: %s", step, cg_last_error());
        cg_release(y);
    }
    ck_assert_int_eq(c->len, 2);
    cg_release_all(3, x, mem, pad);
    cg_kv_cache_reset(c);
    ck_assert_int_eq(c->len, 0);
    ck_assert_int_eq(cg_kv_cache_len(c), 0);
    ck_assert(!c->memory && !c->mem_pad && !c->cross_pad);
    int64_t buffers = 0; /* what a reset keeps */
    for (int i = 0; i < 2; i++)
        buffers += (c->self[i].k != NULL) + (c->self[i].v != NULL) + (c->cross[i].k != NULL) +
                   (c->cross[i].v != NULL);
    ck_assert_int_eq(buffers, 8);
    ck_assert_int_eq(cg_live_tensors(), live0 + buffers);
    x = cg_randn(&r, CG_SHAPE(2, 1, 8));
    mem = cg_randn(&r, CG_SHAPE(2, 4, 8));
    cg_tensor *y = cg_dec_stack_forward_cached(dec, x, mem, NULL, c);
    ck_assert_msg(y, "%s", cg_last_error());
    ck_assert_int_eq(c->len, 1);
    ck_assert_int_eq(cg_kv_cache_len(c), 1);
    cg_release_all(3, x, mem, y);
    cg_kv_cache_free(c);
    cg_module_free(CG_MODULE(dec));
}
END_TEST

/* A later step's memory or mask is the first step's only if it is the
 * same elements: a view of the same storage at another offset, or of the
 * same shape with other strides (a transpose), is another memory, refused;
 * a new view of the same elements goes on. */
START_TEST(test_kv_cache_memory_views)
{
    cg_rng r = cg_rng_new(22);
    cg_dec_stack *dec = small_decoder(&r);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 1, 8)), *base = cg_randn(&r, CG_SHAPE(4, 8, 8));
    cg_tensor *pads = cg_zeros_dtype(CG_BOOL, CG_SHAPE(4, 8));
    cg_tensor *mem = cg_view_narrow(base, 0, 0, 2), *pad = cg_view_narrow(pads, 0, 0, 2);
    cg_tensor *shifted = cg_view_narrow(base, 0, 2, 2), *turned = cg_view_transpose(mem, 1, 2);
    cg_tensor *pad_shifted = cg_view_narrow(pads, 0, 2, 2);
    cg_tensor *again = cg_view_narrow(base, 0, 0, 2), *pad_again = cg_view_narrow(pads, 0, 0, 2);
    cg_kv_cache *c = cg_kv_cache_new(2);
    cg_tensor *y = cg_dec_stack_forward_cached(dec, x, mem, pad, c);
    ck_assert_msg(y, "%s", cg_last_error());
    cg_release(y);
    CG_ASSERT_FAILS(cg_dec_stack_forward_cached(dec, x, shifted, NULL, c), "the memory is not");
    CG_ASSERT_FAILS(cg_dec_stack_forward_cached(dec, x, turned, NULL, c), "the memory is not");
    CG_ASSERT_FAILS(cg_dec_stack_forward_cached(dec, x, mem, pad_shifted, c), "the mem_pad is not");
    ck_assert_int_eq(cg_kv_cache_len(c), 1);
    y = cg_dec_stack_forward_cached(dec, x, again, pad_again, c);
    ck_assert_msg(y, "%s", cg_last_error());
    ck_assert_int_eq(cg_kv_cache_len(c), 2);
    cg_release_all(11, x, base, pads, mem, pad, shifted, turned, pad_shifted, again, pad_again, y);
    cg_kv_cache_free(c);
    cg_module_free(CG_MODULE(dec));
}
END_TEST

/* The cache keeps a copy of the first step's mask: written by the caller
 * after it, with the later steps given NULL, the decoding goes on over the
 * mask as it was (a twin cache over an untouched mask: the same bits). */
START_TEST(test_kv_cache_pad_copied)
{
    cg_rng r = cg_rng_new(23);
    cg_dec_stack *dec = small_decoder(&r);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 1, 8)), *mem = cg_randn(&r, CG_SHAPE(2, 4, 8));
    cg_tensor *pad = cg_zeros_dtype(CG_BOOL, CG_SHAPE(2, 4));
    cg_tensor *twin = cg_zeros_dtype(CG_BOOL, CG_SHAPE(2, 4));
    cg_kv_cache *c = cg_kv_cache_new(2), *d = cg_kv_cache_new(2);
    for (int step = 0; step < 3; step++) {
        twin_step(dec, x, step ? NULL : mem, step ? NULL : pad, step ? NULL : twin, c, d, step);
        cg_data_bool(pad)[1 + step] = true; /* the caller's mask, written */
        cg_tensor_modified(pad);
    }
    cg_release_all(4, x, mem, pad, twin);
    cg_kv_cache_free(c);
    cg_kv_cache_free(d);
    cg_module_free(CG_MODULE(dec));
}
END_TEST

/* A later step that fails partway (in layer 1, after layer 0 took its
 * keys) leaves every layer's positions as they were: the retry decodes
 * what a cache that never failed does, bit for bit, at position 2. */
START_TEST(test_kv_cache_failed_later_step)
{
    cg_rng r = cg_rng_new(24);
    cg_dec_stack *dec = small_decoder(&r);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 1, 8)), *mem = cg_randn(&r, CG_SHAPE(2, 4, 8));
    cg_kv_cache *c = cg_kv_cache_new(2), *good = cg_kv_cache_new(2);
    for (int step = 0; step < 4; step++) {
        int calls = 0;
        cg_hook_handle h = {0};
        if (step == 2) {
            h = cg_module_register_forward_pre_hook(CG_MODULE(dec->layers[1]), fail_once, &calls,
                                                    NULL);
            CG_ASSERT_FAILS(cg_dec_stack_forward_cached(dec, x, mem, NULL, c), "planted");
            cg_hook_remove(&h);
            ck_assert_int_eq(cg_kv_cache_len(c), 2);
            ck_assert_int_eq(c->len, 2);
            for (int i = 0; i < 2; i++)
                ck_assert(c->self[i].len == 2 && c->cross[i].len == 4);
        }
        twin_step(dec, x, mem, NULL, NULL, c, good, step);
    }
    ck_assert_int_eq(cg_kv_cache_len(c), 4);
    cg_release_all(2, x, mem);
    cg_kv_cache_free(c);
    cg_kv_cache_free(good);
    cg_module_free(CG_MODULE(dec));
}
END_TEST

/* A decoder stack's cached steps, the memory given at every step (as a
 * loop that always has it does) and its padding: the memory's keys are
 * taken once (each layer's cross cache holds S positions, not S per
 * step), a prefill of two positions counts two (the cache's len), and the
 * steps give the full forward's rows (causal self-attention, the memory's
 * padding on its keys) to float rounding. */
START_TEST(test_kv_cache_decoder_steps)
{
    cg_rng r = cg_rng_new(6);
    cg_tf_config cfg = {.d = 8, .H = 2, .d_ff = 16, .norm_first = true};
    cg_dec_stack *dec = cg_dec_stack_new(2, &cfg, &r);
    cg_module_train(CG_MODULE(dec), false);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 3, 8)), *mem = cg_randn(&r, CG_SHAPE(2, 4, 8));
    cg_tensor *pad = cg_test_mask(CG_SHAPE(2, 4), (const uint8_t[]){0, 0, 0, 0, 0, 0, 1, 1});
    cg_no_grad_begin();
    const cg_attn_mask self = {.causal = true}, cross = {.key_pad = pad};
    cg_tensor *full = cg_dec_stack_forward(dec, x, mem, &self, &cross);
    cg_kv_cache *c = cg_kv_cache_new(2);
    const int64_t from[2] = {0, 2}, n[2] = {2, 1};
    for (int s = 0; s < 2; s++) {
        cg_tensor *xs = cg_view_narrow(x, 1, from[s], n[s]);
        cg_tensor *y = cg_dec_stack_forward_cached(dec, xs, mem, pad, c);
        ck_assert_msg(full && y, "step %d: %s", s, cg_last_error());
        ck_assert_int_eq(c->len, from[s] + n[s]);
        ck_assert_int_eq(cg_kv_cache_len(c), from[s] + n[s]);
        for (int i = 0; i < 2; i++)
            ck_assert_int_eq(c->cross[i].len, 4);
        cg_tensor *want = cg_view_narrow(full, 1, from[s], n[s]);
        float *wv = cg_test_values(want);
        CG_ASSERT_TENSOR(y, wv, 1e-5, 1e-5);
        free(wv);
        cg_release_all(3, xs, y, want);
    }
    cg_no_grad_end();
    cg_release_all(3, x, mem, full);
    cg_kv_cache_free(c);
    cg_module_free(CG_MODULE(dec));
}
END_TEST

/* -------------------------------------- a KV cache for the user's block */
typedef struct {
    cg_module base;
    cg_norm *ln1, *ln2;
    cg_mha *attn;
    cg_linear *fc;
} my_block;

static my_block *my_block_new(cg_rng *r)
{
    my_block *b = (my_block *)cg_module_alloc(sizeof *b, "MyBlock", NULL);
    b->ln1 = cg_module_add_child(&b->base, "ln1", cg_layernorm_new(8));
    b->attn = cg_module_add_child(&b->base, "attn", cg_mha_new(8, 2, r));
    b->ln2 = cg_module_add_child(&b->base, "ln2", cg_layernorm_new(8));
    b->fc = cg_module_add_child(&b->base, "fc", cg_linear_new(8, 8, true, r));
    return b;
}

/* x + attn(ln1(x)), then + tanh(fc(ln2(.))); kv NULL: the full forward. */
static cg_tensor *my_block_forward(my_block *b, cg_tensor *x, cg_mha_kv *kv)
{
    cg_tensor *h = cg_norm_forward(b->ln1, x), *a = cg_mha_self(b->attn, h, true, kv);
    cg_tensor *x1 = cg_add(x, a), *h2 = cg_norm_forward(b->ln2, x1);
    cg_tensor *f = cg_linear_forward(b->fc, h2), *t = cg_tanh(f), *y = cg_add(x1, t);
    cg_release_all(6, h, a, x1, h2, f, t);
    return y;
}

START_TEST(test_kv_cache_user_block)
{
    cg_rng r = cg_rng_new(12);
    my_block *blk[2] = {my_block_new(&r), my_block_new(&r)};
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 6, 8));
    cg_tensor *full = cg_retain(x);
    for (int i = 0; i < 2; i++) {
        cg_tensor *n = my_block_forward(blk[i], full, cg_kv_cache_layer(NULL, i));
        cg_release(full);
        full = n;
    }
    /* decoding: 2 positions, then one at a time, through cg_kv_cache_layer */
    cg_kv_cache *c = cg_kv_cache_new(0);
    const int64_t steps[4][2] = {{0, 2}, {2, 1}, {3, 1}, {4, 2}};
    ck_assert_int_eq(cg_kv_cache_len(NULL), 0); /* the training forward's position 0 */
    ck_assert_int_eq(cg_kv_cache_len(c), 0);
    for (int s = 0; s < 4; s++) {
        /* the cache counts its positions itself: nothing to add after a step */
        ck_assert_int_eq(cg_kv_cache_len(c), steps[s][0]);
        /* each step in a scope, as a decoding loop writes it: the cache's
         * buffers must outlive it (they were freed with it before) */
        cg_scope *sc = cg_scope_begin();
        cg_tensor *h = cg_view_narrow(x, 1, steps[s][0], steps[s][1]);
        for (int i = 0; i < 2; i++) {
            cg_tensor *n = my_block_forward(blk[i], h, cg_kv_cache_layer(c, i));
            cg_release(h);
            h = n;
        }
        cg_tensor *ref = cg_view_narrow(full, 1, steps[s][0], steps[s][1]);
        ck_assert_msg(max_abs_diff(h, ref) < 1e-5f, "step %d", s);
        cg_scope_end(sc);
    }
    ck_assert_int_eq(c->n_layers, 2);
    ck_assert_int_eq(c->self[1].len, 6);
    ck_assert_int_eq(cg_kv_cache_len(c), 6);
    cg_kv_cache_reset(c);
    ck_assert_int_eq(cg_kv_cache_len(c), 0);
    ck_assert_ptr_null(cg_kv_cache_layer(c, -1));
    cg_kv_cache_free(c);
    cg_release_all(2, x, full);
    cg_module_free(CG_MODULE(blk[0]));
    cg_module_free(CG_MODULE(blk[1]));
}
END_TEST

/* ------------------------------------------------------------ containers */
/* What classifier.c needed (issue 22): cg_mlp, cg_loader, cg_train_step,
 * cg_accuracy / cg_module_accuracy. */
START_TEST(test_mlp_loader_train_step_accuracy)
{
    /* cg_mlp is the Sequential of Linears and activations, drawn in order */
    cg_rng r1 = cg_rng_new(5), r2 = cg_rng_new(5);
    cg_module *mlp = cg_mlp(4, (int64_t[]){2, 8, 8, 3}, CG_ACT_RELU, &r1);
    cg_linear *a = cg_linear_new(2, 8, true, &r2), *b = cg_linear_new(8, 8, true, &r2),
              *c = cg_linear_new(8, 3, true, &r2);
    cg_module *seq =
        cg_sequential(5, a, cg_activation_new(CG_ACT_RELU), b, cg_activation_new(CG_ACT_RELU), c);
    ck_assert_str_eq(mlp->type, "MLP");
    ck_assert_int_eq(mlp->n_children, 5);
    ck_assert_ptr_nonnull(cg_module_get_param(mlp, "4.bias"));
    ck_assert_int_eq(cg_module_num_params(mlp), 2 * 8 + 8 + 8 * 8 + 8 + 8 * 3 + 3);
    cg_rng rx = cg_rng_new(6);
    cg_tensor *x = cg_randn(&rx, CG_SHAPE(10, 2));
    cg_tensor *ym = cg_module_forward(mlp, x), *ys = cg_module_forward(seq, x);
    float *want = cg_test_values(ys);
    CG_ASSERT_TENSOR(ym, want, 0, 0);
    free(want);
    cg_release_all(2, ym, ys);
    CG_ASSERT_FAILS(cg_mlp(1, (int64_t[]){2}, CG_ACT_RELU, NULL), "at least 2 sizes");

    /* the loader: every row once per epoch, in randperm's order, labels
     * along, the last batch smaller, each batch's tensors gone at the next */
    int64_t y[10];
    for (int i = 0; i < 10; i++)
        y[i] = i % 3;
    cg_tensor *yt = cg_from_i64(1, (int64_t[]){10}, y);
    cg_rng rl = cg_rng_new(7), rp = cg_rng_new(7);
    cg_loader *ld = cg_loader_new(x, yt, 4, &rl);
    ck_assert_ptr_nonnull(ld);
    cg_clear_error();
    for (int epoch = 1; epoch <= 2; epoch++) {
        int64_t *perm = cg_randperm(&rp, 10), seen = 0, sizes[3] = {0}, nb = 0;
        int64_t live = cg_live_tensors();
        while (cg_loader_next(ld)) {
            ck_assert_int_eq(ld->epoch, epoch);
            ck_assert_int_le(cg_live_tensors(), live + 2); /* the last batch died */
            ck_assert(ld->y->dtype == CG_I64 && ld->y->shape[0] == ld->n && !ld->mask);
            sizes[nb++] = ld->n;
            for (int64_t j = 0; j < ld->n; j++, seen++) {
                ck_assert_int_eq(cg_data_i64(ld->y)[j], y[perm[seen]]);
                ck_assert_float_eq(cg_data(ld->x)[2 * j + 1], cg_data(x)[2 * perm[seen] + 1]);
            }
            cg_tensor *junk = cg_muls(ld->x, 2.0f); /* dies with the batch's scope */
            ck_assert_ptr_nonnull(junk);
        }
        ck_assert(!cg_has_error());
        ck_assert_int_eq(cg_live_tensors(), live);
        ck_assert_int_eq(seen, 10);
        ck_assert_int_eq(nb, 3);
        ck_assert(sizes[0] == 4 && sizes[1] == 4 && sizes[2] == 2);
        free(perm);
    }
    ck_assert(cg_loader_next(ld)); /* break out of an epoch: free ends the scope */
    cg_loader_free(ld);
    CG_ASSERT_FAILS(cg_loader_new(NULL, yt, 4, NULL), "cg_loader_new: input is NULL");
    cg_tensor *short_y = cg_view_narrow(yt, 0, 0, 9);
    CG_ASSERT_FAILS(cg_loader_new(x, short_y, 4, NULL), "need 10 labels y [N, ...]");
    cg_release(short_y);

    /* cg_train_step = backward, step, zero_grad; the loss goes down */
    cg_optim *opt = cg_adam_from_module(mlp, 1e-2);
    float first = 0, last = 0;
    for (int i = 0; i < 30; i++) {
        cg_scope *s = cg_scope_begin();
        cg_tensor *loss = cg_cross_entropy(cg_module_forward(mlp, x), cg_test_ids(10, y), -100, 0,
                                           CG_REDUCTION_MEAN);
        last = cg_item(loss);
        if (i == 0)
            first = last;
        ck_assert(cg_train_step(opt, loss));
        ck_assert_ptr_null(cg_module_get_param(mlp, "0.weight")->grad);
        cg_scope_end(s);
    }
    ck_assert_float_lt(last, first);
    cg_clear_error();
    CG_ASSERT_FAILS((void *)(intptr_t)cg_train_step(opt, NULL), "train_step: loss is NULL");
    cg_optim_free(opt);

    /* accuracy: argmax against the labels; the module form, without a graph */
    cg_tensor *logits =
        cg_from_data(CG_SHAPE(4, 3), (const float[]){0, 1, 0, 2, 0, 0, 0, 0, 3, 1, 0, 0});
    ck_assert(cg_accuracy(logits, cg_test_ids(4, (const int64_t[]){1, 0, 2, 2})) == 0.75);
    ck_assert(isnan(cg_accuracy(logits, yt)));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "cg_accuracy: logits [4, 3] and y [10]"));
    ck_assert(isnan(cg_accuracy(logits, cg_test_mask(1, (int64_t[]){4}, (const uint8_t[4]){0}))));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "cg_accuracy"));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "bool"));
    cg_tensor *out = cg_module_forward(mlp, x);
    cg_tensor *pt = cg_argmax(out, 1, false);
    const int64_t *pred = cg_data_i64(pt);
    int64_t hits = 0;
    for (int i = 0; i < 10; i++)
        hits += pred[i] == y[i];
    cg_release(pt);
    int64_t live = cg_live_tensors();
    ck_assert(cg_module_accuracy(mlp, x, yt) == (double)hits / 10);
    ck_assert_int_eq(cg_live_tensors(), live);
    ck_assert(cg_grad_enabled());
    cg_release_all(4, logits, out, x, yt);
    cg_module_free(mlp);
    cg_module_free(seq);
}
END_TEST

START_TEST(test_sequential_forward_append)
{
    cg_rng r = cg_rng_new(13);
    cg_linear *l1 = cg_linear_new(3, 5, true, &r), *l2 = cg_linear_new(5, 2, true, &r);
    cg_module *seq = cg_sequential(3, l1, cg_activation_new(CG_ACT_GELU), l2);
    ck_assert_ptr_nonnull(seq);
    ck_assert_ptr_nonnull(cg_module_get_param(seq, "2.weight")); /* PyTorch's names */
    ck_assert_str_eq(cg_module_get_child(seq, "1")->type, "GELU");
    cg_tensor *x = cg_randn(&r, CG_SHAPE(4, 3));
    cg_tensor *h = cg_linear_forward(l1, x), *a = cg_gelu(h), *want = cg_linear_forward(l2, a);
    cg_tensor *y = cg_module_forward(seq, x);
    ck_assert(bit_equal(y, want));
    /* hooks of the container and of its members run */
    cg_hook_handle hk = cg_module_register_forward_hook(seq, double_output, NULL, NULL);
    cg_tensor *y2 = cg_module_forward(seq, x), *w2 = cg_muls(want, 2.0f);
    ck_assert(bit_equal(y2, w2));
    ck_assert(cg_hook_remove(&hk));
    /* a module without a one-tensor forward is named in the error */
    cg_mha *mha = cg_mha_new(4, 2, &r);
    CG_ASSERT_FAILS(cg_module_forward(CG_MODULE(mha), x),
                    "MultiHeadAttention: no one-tensor forward");
    CG_ASSERT_FAILS(cg_sequential(2, cg_activation_new(CG_ACT_RELU), mha),
                    "module 1 (MultiHeadAttention)");
    /* append names children by index */
    cg_module *list = cg_module_new("ModuleList");
    cg_linear *a0 = cg_module_append(list, cg_linear_new(2, 2, false, &r));
    cg_linear *a1 = cg_module_append(list, cg_linear_new(2, 2, false, &r));
    ck_assert_ptr_eq(cg_module_get_child(list, "1"), CG_MODULE(a1));
    ck_assert_ptr_eq(cg_module_get_child(list, "0"), CG_MODULE(a0));
    /* load_file: the same values back */
    char path[PATH_MAX];
    int fd = cg_test_mkstemp(path, sizeof path, "cg_test_seq_");
    close(fd);
    ck_assert(cg_module_save(seq, path, 0, NULL));
    cg_module *seq2 =
        cg_sequential(3, cg_linear_new(3, 5, true, NULL), cg_activation_new(CG_ACT_GELU),
                      cg_linear_new(5, 2, true, NULL));
    ck_assert(cg_module_load_file(seq2, path));
    cg_tensor *y3 = cg_module_forward(seq2, x);
    ck_assert(bit_equal(y3, want));
    ck_assert(!cg_module_load_file(seq2, "/nonexistent/x.safetensors"));
    /* a file the module does not fit: its load's failure, not true */
    cg_module *other = cg_sequential(1, cg_linear_new(3, 4, true, NULL));
    cg_clear_error();
    ck_assert(!cg_module_load_file(other, path));
    ck_assert_msg(strstr(cg_last_error(), "unexpected tensors"), "%s", cg_last_error());
    cg_module_free(other);
    unlink(path);
    cg_release_all(8, x, h, a, want, y, y2, w2, y3);
    cg_module_free(seq);
    cg_module_free(seq2);
    cg_module_free(list);
}
END_TEST

/* ---------------------------------------------------- NULL, never silent */
/* Issue 22: no error message is ever empty. A module, optimizer or data
 * call given NULL (a constructor's result nobody checked, a forgotten
 * initialisation) fails with a message naming the call; the ops already do
 * (test_names.c). Each case starts with no message recorded. */
#define NULL_PTR(expr) CG_ASSERT_REFUSED((expr) == NULL, "")
#define NULL_FALSE(expr) CG_ASSERT_REFUSED(!(expr), "")
START_TEST(test_null_arguments_say_so)
{
    cg_rng rng = cg_rng_new(1);
    cg_tensor *x = cg_ones(CG_SHAPE(2, 4)), *n = NULL;
    cg_linear *lin = cg_linear_new(4, 4, true, &rng);
    cg_norm *ln = cg_layernorm_new(4);
    cg_mha *mha = cg_mha_new(4, 2, &rng);
    cg_module *root = cg_module_new("Root"), *none = NULL;
    int64_t ids[2] = {0, 1};
    /* modules' forwards: NULL module, NULL input */
    NULL_PTR(cg_linear_forward(NULL, x));
    NULL_PTR(cg_linear_forward(lin, n));
    NULL_PTR(cg_linear_fn(n, lin->weight, NULL));
    NULL_PTR(cg_norm_forward(NULL, x));
    NULL_PTR(cg_norm_forward(ln, n));
    NULL_PTR(cg_norm_add_forward(ln, x, n));
    NULL_PTR(cg_embed_forward(NULL, cg_test_ids(2, NULL)));
    NULL_PTR(cg_drop_forward(NULL, x));
    NULL_PTR(cg_ff_forward(NULL, x));
    NULL_PTR(cg_posenc_forward(NULL, x));
    NULL_PTR(cg_posenc_rows(NULL, 0, 1));
    NULL_PTR(cg_activation(n, CG_ACT_GELU));
    NULL_PTR(cg_mha_forward(NULL, x, x, true, NULL, NULL, NULL));
    NULL_PTR(cg_mha_self(mha, n, true, NULL));
    NULL_PTR(cg_mha_self(NULL, x, true, NULL));
    NULL_PTR(cg_scaled_dot_product_attention(n, x, x, NULL, NULL));
    NULL_PTR(cg_module_forward(none, x));
    NULL_PTR(cg_module_forward(CG_MODULE(lin), n));
    NULL_PTR(cg_module_call(none, NULL, 0, NULL, NULL));
    NULL_PTR(cg_enc_layer_forward(NULL, x, NULL));
    NULL_PTR(cg_dec_stack_forward(NULL, x, x, NULL, NULL));
    NULL_PTR(cg_lm_block_forward(NULL, x, NULL));
    NULL_PTR(cg_enc_stack_new(2, NULL, &rng));
    /* building and loading */
    NULL_PTR(cg_module_add_child(root, "fc", NULL));
    NULL_PTR(cg_module_add_child(NULL, "fc", cg_linear_new(2, 2, true, &rng)));
    NULL_PTR(cg_module_append(root, NULL));
    NULL_PTR(cg_module_get_param(none, "fc.weight"));
    NULL_PTR(cg_module_get_child(none, "fc"));
    NULL_PTR(cg_sequential(2, cg_linear_new(2, 2, true, &rng), NULL));
    NULL_PTR(cg_st_get_f32(NULL, "a"));
    /* add_child takes any module pointer (void *): a tensor meant for
     * cg_module_add_param was accepted and crashed later */
    NULL_PTR(cg_module_add_child(root, "w", x));
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "not a module"));
    NULL_PTR(cg_module_append(root, x));
    ck_assert_int_eq(root->n_children, 0);
    /* a module struct the caller allocated zeroed, as older programs did */
    cg_module *own = calloc(1, sizeof *own);
    own->type = "Own";
    ck_assert_ptr_eq(cg_module_add_child(root, "own", own), own);
    ck_assert_int_eq(root->n_children, 1);
    NULL_PTR(cg_module_add_param(root, "w", n));
    NULL_FALSE(cg_module_load_file(none, "x.safetensors"));
    NULL_FALSE(cg_module_load_file(root, NULL));
    NULL_FALSE(cg_module_save(none, cg_test_path("never_written.safetensors"), 0, NULL));
    NULL_PTR(cg_lora_attach(NULL, 2, 4, 0, &rng));
    NULL_FALSE(cg_lora_merge(NULL));
    NULL_FALSE(cg_lora_unmerge(NULL));
    NULL_FALSE(cg_init_normal_(n, &rng, 0, 1));
    NULL_FALSE(cg_module_init_params(none, &rng, 0.02f));
    /* optimizers */
    NULL_PTR(cg_adamw_from_module(none, 1e-3));
    NULL_PTR(cg_adamw_from_module(root, 1e-3)); /* no parameters: PyTorch refuses too */
    cg_module_requires_grad(CG_MODULE(ln), false);
    NULL_PTR(cg_sgd_from_module(CG_MODULE(ln), 1e-3)); /* all frozen */
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "frozen"));
    NULL_FALSE(cg_optim_step(NULL));
    NULL_FALSE(cg_train_step(NULL, x));
    /* data and sampling */
    NULL_PTR(cg_loader_new(n, cg_test_ids(2, ids), 2, &rng));
    NULL_FALSE(cg_loader_next(NULL));
    NULL_PTR(cg_sample_rows(NULL, NULL, &rng));
    ck_assert(access(cg_test_path("never_written.safetensors"), F_OK) != 0);
    cg_clear_error();
    cg_module_free(CG_MODULE(lin));
    cg_module_free(CG_MODULE(ln));
    cg_module_free(CG_MODULE(mha));
    cg_module_free(root);
    cg_release(x);
}
END_TEST

static Suite *adapt_suite(void)
{
    Suite *s = suite_create("adapt");
    TCase *t = tcase_create("adapt");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_hook_post_pre_remove);
    tcase_add_test(t, test_norm_add_forward_hooked);
    tcase_add_test(t, test_hooks_every_module);
    tcase_add_test(t, test_hook_removed_during_call);
    tcase_add_test(t, test_hooks_run_in_order);
    tcase_add_test(t, test_module_requires_grad_and_optim);
    tcase_add_test(t, test_lora_forward_merge);
    tcase_add_test(t, test_lora_gradcheck);
    tcase_add_test(t, test_lora_dropout_gradcheck);
    tcase_add_test(t, test_lora_targets_save_load);
    tcase_add_test(t, test_lora_full_path_save_load);
    tcase_add_test(t, test_lora_target_suffix);
    tcase_add_test(t, test_lora_unload);
    tcase_add_test(t, test_lora_load_checks_before_attaching);
    tcase_add_test(t, test_lora_load_refuses_other_tensors);
    tcase_add_test(t, test_dropout_one);
    tcase_add_test(t, test_sample);
    tcase_add_test(t, test_sample_subnormal_temperature_greedy);
    tcase_add_test(t, test_sample_top_k_draws);
    tcase_add_test(t, test_randperm_batches);
    tcase_add_test(t, test_kv_cache_user_block);
    tcase_add_test(t, test_kv_cache_bad_mem_pad);
    tcase_add_test(t, test_kv_cache_decoder_steps);
    tcase_add_test(t, test_kv_cache_memory_kept);
    tcase_add_test(t, test_kv_cache_memory_review);
    tcase_add_test(t, test_kv_cache_reset_forgets);
    tcase_add_test(t, test_kv_cache_memory_views);
    tcase_add_test(t, test_kv_cache_pad_copied);
    tcase_add_test(t, test_kv_cache_failed_later_step);
    tcase_add_test(t, test_sequential_forward_append);
    tcase_add_test(t, test_mlp_loader_train_step_accuracy);
    tcase_add_test(t, test_null_arguments_say_so);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    Suite *s[] = {adapt_suite()};
    return cg_test_run(s, 1);
}
