/* Transformer encoder/decoder layers, the CharLM block, the encoder and
 * decoder stacks (one constructor), recomputation in backward
 * (cg_checkpoint) and the decoders' incremental decoding (the cache itself:
 * kv_cache.c). */
#include "nn/transformer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/checkpoint.h"
#include "autograd/ops.h"
#include "nn/kv_cache_impl.h"

bool cg_tf_config_check(const cg_tf_config *c)
{
    if (!c) {
        cg_set_error("transformer config is NULL");
        return false;
    }
    if (c->d <= 0 || c->H <= 0 || c->d % c->H) {
        cg_set_error("transformer config: d=%lld must be positive and divisible by H=%lld",
                     (long long)c->d, (long long)c->H);
        return false;
    }
    if (c->d_ff <= 0) {
        cg_set_error("transformer config: d_ff must be positive (got %lld)", (long long)c->d_ff);
        return false;
    }
    if (!cg_norm_info_of(c->norm, "transformer config") ||
        !cg_act_info_of(c->act, "transformer config"))
        return false;
    if (!(c->dropout >= 0.0f && c->dropout <= 1.0f)) { /* nn.Dropout's range, as cg_dropout's */
        cg_set_error("transformer config: dropout must be in [0, 1] (got %g)", (double)c->dropout);
        return false;
    }
    if (c->kv_heads < 0 || (c->kv_heads > 0 && c->H > 0 && c->H % c->kv_heads != 0)) {
        cg_set_error("transformer config: kv_heads=%lld must divide H=%lld (0: H)",
                     (long long)c->kv_heads, (long long)c->H);
        return false;
    }
    if (c->rope_theta != 0.0 && !(c->rope_theta > 1.0 && isfinite(c->rope_theta))) {
        cg_set_error("transformer config: rope_theta must be 0 (none) or a finite number above 1 "
                     "(got %g)",
                     c->rope_theta);
        return false;
    }
    if (!(c->attn_dropout >= 0.0f && c->attn_dropout <= 1.0f)) {
        cg_set_error("transformer config: attn_dropout must be in [0, 1] (got %g)",
                     (double)c->attn_dropout);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------ helpers */
/* Add a child and return it, or NULL (the child is freed on failure). */
#define ADD(parent, name, child) cg_module_add_child((parent), (name), (child))

typedef enum { SUB_SELF_ATTN, SUB_CROSS_ATTN, SUB_FF, SUB_SELF_CACHED, SUB_CROSS_CACHED } sub_kind;

typedef struct {
    sub_kind kind;
    cg_mha *attn;
    cg_ff *ff;
    cg_tensor *memory;
    const cg_attn_mask *mask;
    cg_mha_kv *kv;              /* cached kinds */
    const cg_tensor *cross_pad; /* SUB_CROSS_CACHED */
} sublayer;

/* The sublayer's output for h, and r (or NULL) made by its last product
 * (the cached kinds, decoding without a graph: after it) */
static cg_tensor *apply_sub(const sublayer *s, cg_tensor *h, const cg_residual *r)
{
    cg_tensor *y = NULL;
    switch (s->kind) {
    case SUB_SELF_ATTN: return cg_mha_forward_residual(s->attn, h, h, s->mask, NULL, r);
    case SUB_CROSS_ATTN: return cg_mha_forward_residual(s->attn, h, s->memory, s->mask, NULL, r);
    case SUB_FF: return cg_ff_forward_residual(s->ff, h, r);
    case SUB_SELF_CACHED: y = cg_mha_forward_cached(s->attn, h, h, true, NULL, s->kv); break;
    case SUB_CROSS_CACHED: /* the memory's keys once, then the cache */
        y = cg_mha_forward_cached(s->attn, h, s->kv->len ? NULL : s->memory, false, s->cross_pad,
                                  s->kv);
        break;
    }
    cg_tensor *out = cg_residual_apply(r, y);
    cg_release(y);
    return out;
}

/* models.py Residual: pre-norm x + drop(sub(norm(x))), post-norm
 * norm(x + drop(sub(x))), the add inside the norm (cg_norm_add_forward).
 * The dropout, and pre-norm's add, are made as the sublayer's last
 * product writes its output (cg_residual). */
static cg_tensor *residual(const cg_module *owner, const cg_tf_config *c, cg_rng *rng,
                           cg_norm *norm, const sublayer *s, cg_tensor *x)
{
    if (!x)
        return NULL;
    const bool pre = c->norm_first;
    const cg_residual r = {pre ? x : NULL, c->dropout, rng, owner->training};
    /* post-norm without a dropout: nothing follows the sublayer */
    const cg_residual *rp = pre || (r.training && r.p > 0.0f) ? &r : NULL;
    cg_tensor *h = pre ? cg_norm_forward(norm, x) : cg_retain(x);
    cg_tensor *y = h ? apply_sub(s, h, rp) : NULL;
    cg_release(h);
    if (pre || !y)
        return y;
    cg_tensor *out = cg_norm_add_forward(norm, x, y);
    cg_release(y);
    return out;
}

/* x through n sublayers in turn, sublayer i in its residual with norms[i]
 * (each sublayer's input released once the next has it). */
static cg_tensor *residuals(const cg_module *owner, const cg_tf_config *c, cg_rng *rng, int n,
                            cg_norm *const *norms, const sublayer *subs, cg_tensor *x)
{
    cg_tensor *h = residual(owner, c, rng, norms[0], &subs[0], x);
    for (int i = 1; i < n; i++) {
        cg_tensor *next = residual(owner, c, rng, norms[i], &subs[i], h);
        cg_release(h);
        h = next;
    }
    return h;
}

static bool check_input(const char *what, const cg_tf_config *c, const cg_tensor *x)
{
    if (x->ndim != 3 || x->shape[2] != c->d) {
        char a[96];
        cg_set_error("%s: input %s must be [B, T, %lld]", what, cg_shape_str(x, a, sizeof a),
                     (long long)c->d);
        return false;
    }
    return true;
}

/* The non-tensor arguments of a layer's or stack's forward (cg_module_call). */
typedef struct {
    const cg_attn_mask *mask, *cross_mask;
    cg_mha_kv *kv_self, *kv_cross; /* cached layer steps */
    const cg_tensor *cross_pad;
    const cg_tensor *mem_pad; /* cached stack */
    cg_kv_cache *cache;
} fwd_args;

/* Common start of a layer constructor; LAYER_SETUP then fills config and rng. */
static cg_module *layer_alloc(size_t size, const char *type, const cg_tf_config *cfg)
{
    if (!cg_tf_config_check(cfg))
        return NULL;
    return cg_module_alloc(size, type, NULL);
}

/* A layer's or stack's norm: cfg's kind, with a bias unless cfg->no_bias. */
static cg_norm *tf_norm(const cg_tf_config *cfg)
{
    cg_norm_opts o = cg_norm_opts_default();
    o.bias = !cfg->no_bias;
    return cg_norm_new_opts(cfg->norm, cfg->d, &o);
}

#define LAYER_SETUP(l, cfgp)                                                  \
    do {                                                                      \
        (l)->cfg = *(cfgp);                                                   \
        (l)->own_rng = cg_rng_new(0);                                         \
        (l)->rng = (cfgp)->dropout_rng ? (cfgp)->dropout_rng : &(l)->own_rng; \
    } while (0)

/* A layer's attention: weights drawn from init, its attention dropout
 * (cfg's) drawn from the layer's generator drop, cfg's rotary embeddings
 * when it is a self-attention; or NULL (freed). */
static cg_mha *tf_mha(const cg_tf_config *cfg, cg_rng *init, cg_rng *drop, bool self)
{
    cg_mha *a =
        cg_mha_new_gqa(cfg->d, cfg->H, cfg->kv_heads ? cfg->kv_heads : cfg->H, !cfg->no_bias, init);
    if (a && (!cg_mha_set_attn_dropout(a, cfg->attn_dropout, drop) ||
              !cg_mha_set_rope(a, self ? cfg->rope_theta : 0.0))) {
        cg_module_free(&a->base);
        return NULL;
    }
    return a;
}

/* ------------------------------------------------ recomputation (flag) */
/* A layer with recompute set runs under cg_checkpoint: its ctx owns copies
 * of the masks (the caller's may be gone when backward recomputes), but
 * for a float mask that requires grad (a learnable bias): that one is an
 * input of the block, kept and version-checked by its node, and its
 * gradient comes back through it, as any input's. */
typedef enum { RC_ENC, RC_DEC, RC_LM } rc_kind;
typedef struct {
    rc_kind kind;
    cg_module *layer;
    bool has[2];
    cg_attn_mask m[2];
    cg_tensor *own[2][2]; /* the masks' copies: key_pad, mask */
    int mask_in[2];       /* the block input that is mask i's float mask, or -1 */
} rc_ctx;

static void rc_ctx_free(void *p)
{
    rc_ctx *c = p;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            cg_release_held(c->own[i][j]);
        }
    free(c);
}

/* Keep copies of the masks for the recomputation (the caller's may change
 * or die before the backward). */
static bool rc_mask(rc_ctx *c, int i, const cg_attn_mask *m)
{
    if (!m)
        return true;
    c->has[i] = true;
    c->m[i] = *m;
    const cg_tensor *src[2] = {m->key_pad, m->mask};
    for (int j = 0; j < 2; j++) /* one that requires grad: a block input (rc_forward) */
        if (src[j] && !src[j]->requires_grad && !(c->own[i][j] = cg_hold(cg_k_clone(src[j]))))
            return false;
    c->m[i].key_pad = c->own[i][0];
    c->m[i].mask = c->own[i][1];
    return true;
}

static cg_tensor *enc_layer_impl(cg_module *m, cg_tensor *const *in, void *args);
static cg_tensor *dec_layer_impl(cg_module *m, cg_tensor *const *in, void *args);
static cg_tensor *lm_block_impl(cg_module *m, cg_tensor *const *in, void *args);

/* The layer's own body with its flag off for the call. The body, not the
 * public forward: the layer's hooks already ran around the checkpointed
 * call and must not run again inside it (its sublayers' hooks do run, as
 * they did in the forward). */
static cg_tensor *rc_run(void *ctx, cg_tensor *const *in)
{
    rc_ctx *c = ctx;
    fwd_args a = {.mask = c->has[0] ? &c->m[0] : NULL, .cross_mask = c->has[1] ? &c->m[1] : NULL};
    static cg_tensor *(*const impl[])(cg_module *, cg_tensor *const *, void *) = {
        [RC_ENC] = enc_layer_impl, [RC_DEC] = dec_layer_impl, [RC_LM] = lm_block_impl};
    for (int i = 0; i < 2; i++) /* the input itself in the forward, its detached copy after */
        if (c->mask_in[i] >= 0)
            c->m[i].mask = in[c->mask_in[i]];
    bool *flag = c->kind == RC_ENC   ? &((cg_enc_layer *)c->layer)->recompute
                 : c->kind == RC_DEC ? &((cg_dec_layer *)c->layer)->recompute
                                     : &((cg_lm_block *)c->layer)->recompute;
    *flag = false;
    cg_tensor *y = impl[c->kind](c->layer, in, &a);
    *flag = true;
    return y;
}

/* x [B,T,d], memory [B,S,d] or NULL; m0 self-attention (key_pad B*T bytes),
 * m1 cross-attention (B*S). */
static cg_tensor *rc_forward(rc_kind kind, cg_module *layer, cg_rng *rng, cg_tensor *x,
                             cg_tensor *memory, const cg_attn_mask *m0, const cg_attn_mask *m1)
{
    rc_ctx *c = calloc(1, sizeof *c);
    cg_param_list pl = {0};
    cg_tensor **ps = NULL;
    bool ok = c && rc_mask(c, 0, m0) && rc_mask(c, 1, m1) && cg_module_params(layer, &pl);
    if (ok && pl.n) {
        ps = malloc(sizeof *ps * (size_t)pl.n);
        ok = ps != NULL;
        for (int i = 0; ok && i < pl.n; i++)
            ps[i] = pl.items[i].tensor;
    }
    if (!ok) {
        if (c)
            rc_ctx_free(c);
        cg_param_list_free(&pl);
        free(ps);
        cg_set_error("%s: out of memory setting up recomputation", layer->type);
        return NULL;
    }
    c->kind = kind;
    c->layer = layer;
    cg_tensor *ins[4] = {x, memory};
    int nin = memory ? 2 : 1;
    for (int i = 0; i < 2; i++) {
        const cg_attn_mask *m = i ? m1 : m0;
        c->mask_in[i] = m && m->mask && m->mask->requires_grad ? nin : -1;
        if (c->mask_in[i] >= 0)
            ins[nin++] = (cg_tensor *)m->mask; /* read, never written */
    }
    cg_checkpoint_block blk = {.fn = rc_run,
                               .ctx = c,
                               .ctx_free = rc_ctx_free,
                               .n_inputs = nin,
                               .inputs = ins,
                               .n_params = pl.n,
                               .params = ps,
                               .n_rngs = 1,
                               .rngs = &rng};
    cg_tensor *y = cg_checkpoint(&blk);
    cg_param_list_free(&pl);
    free(ps);
    return y;
}

/* -------------------------------------------------------------- encoder */
cg_enc_layer *cg_enc_layer_new(const cg_tf_config *cfg, cg_rng *init_rng)
{
    cg_enc_layer *l = (cg_enc_layer *)layer_alloc(sizeof *l, "TransformerEncoderLayer", cfg);
    if (!l)
        return NULL;
    LAYER_SETUP(l, cfg);
    cg_rng local = cg_rng_new(0);
    cg_rng *r = init_rng ? init_rng : &local;
    cg_module *m = &l->base;
    bool ok =
        (l->self_attn = ADD(m, "self_attn", tf_mha(cfg, r, l->rng, true))) &&
        (l->ln1 = ADD(m, "ln1", tf_norm(cfg))) &&
        (l->ff = ADD(m, "ff", cg_ff_new_bias(cfg->d, cfg->d_ff, cfg->act, !cfg->no_bias, r))) &&
        (l->ln2 = ADD(m, "ln2", tf_norm(cfg)));
    if (!ok) {
        cg_module_free(m);
        return NULL;
    }
    return l;
}

static cg_tensor *enc_layer_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    cg_enc_layer *l = (cg_enc_layer *)m;
    cg_tensor *x = in[0];
    const cg_attn_mask *mask = ((const fwd_args *)args)->mask;
    if (!x || !check_input("TransformerEncoderLayer", &l->cfg, x))
        return NULL;
    if (l->recompute && cg_grad_enabled())
        return rc_forward(RC_ENC, &l->base, l->rng, x, NULL, mask, NULL);
    const sublayer subs[] = {{.kind = SUB_SELF_ATTN, .attn = l->self_attn, .mask = mask},
                             {.kind = SUB_FF, .ff = l->ff}};
    return residuals(&l->base, &l->cfg, l->rng, 2, (cg_norm *const[]){l->ln1, l->ln2}, subs, x);
}

cg_tensor *cg_enc_layer_forward(cg_enc_layer *l, cg_tensor *x, const cg_attn_mask *mask)
{
    if (!l || !x) {
        cg_error_null_input("cg_enc_layer_forward");
        return NULL;
    }
    fwd_args a = {.mask = mask};
    return cg_module_call(&l->base, enc_layer_impl, 1, &x, &a);
}

/* -------------------------------------------------------------- decoder */
cg_dec_layer *cg_dec_layer_new(const cg_tf_config *cfg, cg_rng *init_rng)
{
    cg_dec_layer *l = (cg_dec_layer *)layer_alloc(sizeof *l, "TransformerDecoderLayer", cfg);
    if (!l)
        return NULL;
    LAYER_SETUP(l, cfg);
    cg_rng local = cg_rng_new(0);
    cg_rng *r = init_rng ? init_rng : &local;
    cg_module *m = &l->base;
    bool ok =
        (l->self_attn = ADD(m, "self_attn", tf_mha(cfg, r, l->rng, true))) &&
        (l->ln1 = ADD(m, "ln1", tf_norm(cfg))) &&
        (l->cross_attn = ADD(m, "cross_attn", tf_mha(cfg, r, l->rng, false))) &&
        (l->ln2 = ADD(m, "ln2", tf_norm(cfg))) &&
        (l->ff = ADD(m, "ff", cg_ff_new_bias(cfg->d, cfg->d_ff, cfg->act, !cfg->no_bias, r))) &&
        (l->ln3 = ADD(m, "ln3", tf_norm(cfg)));
    if (!ok) {
        cg_module_free(m);
        return NULL;
    }
    return l;
}

static cg_tensor *dec_layer_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    cg_dec_layer *l = (cg_dec_layer *)m;
    cg_tensor *x = in[0], *memory = in[1];
    const fwd_args *a = args;
    const cg_attn_mask *self_mask = a->mask, *cross_mask = a->cross_mask;
    if (!x || !memory || !check_input("TransformerDecoderLayer", &l->cfg, x) ||
        !check_input("TransformerDecoderLayer memory", &l->cfg, memory))
        return NULL;
    if (l->recompute && cg_grad_enabled())
        return rc_forward(RC_DEC, &l->base, l->rng, x, memory, self_mask, cross_mask);
    const sublayer subs[] = {
        {.kind = SUB_SELF_ATTN, .attn = l->self_attn, .mask = self_mask},
        {.kind = SUB_CROSS_ATTN, .attn = l->cross_attn, .memory = memory, .mask = cross_mask},
        {.kind = SUB_FF, .ff = l->ff}};
    return residuals(&l->base, &l->cfg, l->rng, 3, (cg_norm *const[]){l->ln1, l->ln2, l->ln3}, subs,
                     x);
}

cg_tensor *cg_dec_layer_forward(cg_dec_layer *l, cg_tensor *x, cg_tensor *memory,
                                const cg_attn_mask *self_mask, const cg_attn_mask *cross_mask)
{
    if (!l || !x || !memory) {
        cg_error_null_input("cg_dec_layer_forward");
        return NULL;
    }
    fwd_args a = {.mask = self_mask, .cross_mask = cross_mask};
    return cg_module_call(&l->base, dec_layer_impl, 2, (cg_tensor *const[]){x, memory}, &a);
}

/* One cached step of a decoder layer: in = {h, memory (may be NULL)}. */
static cg_tensor *dec_layer_cached_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    cg_dec_layer *l = (cg_dec_layer *)m;
    const fwd_args *a = args;
    const sublayer subs[] = {{.kind = SUB_SELF_CACHED, .attn = l->self_attn, .kv = a->kv_self},
                             {.kind = SUB_CROSS_CACHED,
                              .attn = l->cross_attn,
                              .memory = in[1],
                              .kv = a->kv_cross,
                              .cross_pad = a->cross_pad},
                             {.kind = SUB_FF, .ff = l->ff}};
    return residuals(&l->base, &l->cfg, l->rng, 3, (cg_norm *const[]){l->ln1, l->ln2, l->ln3}, subs,
                     in[0]);
}

/* ------------------------------------------------------------- LM block */
cg_lm_block *cg_lm_block_new(const cg_tf_config *cfg, cg_rng *init_rng)
{
    cg_lm_block *b = (cg_lm_block *)layer_alloc(sizeof *b, "LMBlock", cfg);
    if (!b)
        return NULL;
    LAYER_SETUP(b, cfg);
    cg_rng local = cg_rng_new(0);
    cg_rng *r = init_rng ? init_rng : &local;
    cg_module *m = &b->base;
    bool ok = (b->ln1 = ADD(m, "ln1", tf_norm(cfg))) &&
              (b->attn = ADD(m, "attn", tf_mha(cfg, r, b->rng, true))) &&
              (b->ln2 = ADD(m, "ln2", tf_norm(cfg))) &&
              (b->ff = ADD(m, "ff", cg_ff_new_bias(cfg->d, cfg->d_ff, cfg->act, !cfg->no_bias, r)));
    if (!ok) {
        cg_module_free(m);
        return NULL;
    }
    return b;
}

/* The block's forward (kv_self NULL) or one cached step. */
static cg_tensor *lm_block_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    cg_lm_block *b = (cg_lm_block *)m;
    cg_tensor *x = in[0];
    const fwd_args *a = args;
    if (!x || !check_input(a->kv_self ? "LMBlock cached" : "LMBlock", &b->cfg, x))
        return NULL;
    if (b->recompute && !a->kv_self && cg_grad_enabled())
        return rc_forward(RC_LM, &b->base, b->rng, x, NULL, a->mask, NULL);
    sublayer subs[] = {{.kind = SUB_SELF_ATTN, .attn = b->attn, .mask = a->mask},
                       {.kind = SUB_FF, .ff = b->ff}};
    if (a->kv_self)
        subs[0] = (sublayer){.kind = SUB_SELF_CACHED, .attn = b->attn, .kv = a->kv_self};
    return residuals(&b->base, &b->cfg, b->rng, 2, (cg_norm *const[]){b->ln1, b->ln2}, subs, x);
}

cg_tensor *cg_lm_block_forward(cg_lm_block *b, cg_tensor *x, const cg_attn_mask *mask)
{
    if (!b || !x) {
        cg_error_null_input("cg_lm_block_forward");
        return NULL;
    }
    fwd_args a = {.mask = mask};
    return cg_module_call(&b->base, lm_block_impl, 1, &x, &a);
}

/* --------------------------------------------------------------- stacks */
static void enc_stack_destroy(cg_module *m) { free(((cg_enc_stack *)m)->layers); }

static void dec_stack_destroy(cg_module *m) { free(((cg_dec_stack *)m)->layers); }

/* The fields of either stack (the two structs differ only in their layers'
 * type). */
typedef struct {
    cg_tf_config *cfg;
    cg_rng *own_rng;
    int *n_layers;
    void ***layers;
    cg_norm **ln_f;
} stack_parts;

/* The one constructor of both stacks: n layers (decoder or encoder) in a
 * child "layers" ("0".."n-1"), then "ln_f" when pre-norm; the layers draw
 * their initial values from init_rng in that order. */
static cg_module *stack_new(bool decoder, int n, const cg_tf_config *cfg, cg_rng *init_rng)
{
    const char *type = decoder ? "TransformerDecoder" : "TransformerEncoder";
    if (!cg_tf_config_check(cfg))
        return NULL;
    if (n < 0) {
        cg_set_error("%s: n_layers must be >= 0 (got %d)", type, n);
        return NULL;
    }
    cg_module *s = decoder ? cg_module_alloc(sizeof(cg_dec_stack), type, dec_stack_destroy)
                           : cg_module_alloc(sizeof(cg_enc_stack), type, enc_stack_destroy);
    if (!s)
        return NULL;
    cg_dec_stack *d = (cg_dec_stack *)s;
    cg_enc_stack *e = (cg_enc_stack *)s;
    stack_parts p =
        decoder ? (stack_parts){&d->cfg, &d->own_rng, &d->n_layers, (void ***)&d->layers, &d->ln_f}
                : (stack_parts){&e->cfg, &e->own_rng, &e->n_layers, (void ***)&e->layers, &e->ln_f};
    *p.cfg = *cfg;
    *p.own_rng = cg_rng_new(0);
    if (!p.cfg->dropout_rng)
        p.cfg->dropout_rng = p.own_rng;
    cg_rng local = cg_rng_new(0);
    cg_rng *r = init_rng ? init_rng : &local;
    *p.layers = calloc((size_t)(n ? n : 1), sizeof(void *));
    cg_module *list = *p.layers ? ADD(s, "layers", cg_module_new("ModuleList")) : NULL;
    if (!*p.layers)
        cg_set_error("%s: out of memory", type);
    *p.n_layers = n;
    bool ok = list != NULL;
    for (int i = 0; ok && i < n; i++) {
        char name[24];
        snprintf(name, sizeof name, "%d", i);
        cg_module *l =
            decoder ? CG_MODULE(cg_dec_layer_new(p.cfg, r)) : CG_MODULE(cg_enc_layer_new(p.cfg, r));
        ok = ((*p.layers)[i] = ADD(list, name, l)) != NULL;
    }
    if (ok && cfg->norm_first)
        ok = (*p.ln_f = ADD(s, "ln_f", tf_norm(cfg))) != NULL;
    if (!ok) {
        cg_module_free(s);
        return NULL;
    }
    return s;
}

cg_enc_stack *cg_enc_stack_new(int n_layers, const cg_tf_config *cfg, cg_rng *init_rng)
{
    return (cg_enc_stack *)stack_new(false, n_layers, cfg, init_rng);
}

cg_dec_stack *cg_dec_stack_new(int n_layers, const cg_tf_config *cfg, cg_rng *init_rng)
{
    return (cg_dec_stack *)stack_new(true, n_layers, cfg, init_rng);
}

static cg_tensor *final_norm(cg_norm *ln_f, cg_tensor *h)
{
    if (!ln_f || !h)
        return h;
    cg_tensor *y = cg_norm_forward(ln_f, h);
    cg_release(h);
    return y;
}

static cg_tensor *enc_stack_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    cg_enc_stack *s = (cg_enc_stack *)m;
    cg_tensor *x = in[0];
    const cg_attn_mask *mask = ((const fwd_args *)args)->mask;
    if (!x || !check_input("TransformerEncoder", &s->cfg, x))
        return NULL;
    cg_tensor *h = cg_retain(x);
    for (int i = 0; i < s->n_layers && h; i++) {
        cg_tensor *n = cg_enc_layer_forward(s->layers[i], h, mask);
        cg_release(h);
        h = n;
    }
    return final_norm(s->ln_f, h);
}

void cg_enc_stack_set_recompute(cg_enc_stack *s, bool on)
{
    for (int i = 0; s && i < s->n_layers; i++)
        s->layers[i]->recompute = on;
}

void cg_dec_stack_set_recompute(cg_dec_stack *s, bool on)
{
    for (int i = 0; s && i < s->n_layers; i++)
        s->layers[i]->recompute = on;
}

cg_tensor *cg_enc_stack_forward(cg_enc_stack *s, cg_tensor *x, const cg_attn_mask *mask)
{
    if (!s || !x) {
        cg_error_null_input("cg_enc_stack_forward");
        return NULL;
    }
    fwd_args a = {.mask = mask};
    return cg_module_call(&s->base, enc_stack_impl, 1, &x, &a);
}

static cg_tensor *dec_stack_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    cg_dec_stack *s = (cg_dec_stack *)m;
    cg_tensor *x = in[0], *memory = in[1];
    const fwd_args *a = args;
    const cg_attn_mask *self_mask = a->mask, *cross_mask = a->cross_mask;
    if (!x || !memory || !check_input("TransformerDecoder", &s->cfg, x))
        return NULL;
    cg_tensor *h = cg_retain(x);
    for (int i = 0; i < s->n_layers && h; i++) {
        cg_tensor *n = cg_dec_layer_forward(s->layers[i], h, memory, self_mask, cross_mask);
        cg_release(h);
        h = n;
    }
    return final_norm(s->ln_f, h);
}

cg_tensor *cg_dec_stack_forward(cg_dec_stack *s, cg_tensor *x, cg_tensor *memory,
                                const cg_attn_mask *self_mask, const cg_attn_mask *cross_mask)
{
    if (!s || !x || !memory) {
        cg_error_null_input("cg_dec_stack_forward");
        return NULL;
    }
    fwd_args a = {.mask = self_mask, .cross_mask = cross_mask};
    return cg_module_call(&s->base, dec_stack_impl, 2, (cg_tensor *const[]){x, memory}, &a);
}

/* ------------------------------------------------ incremental decoding */
/* The first step's mem_pad is bool [B, S] of the memory [B, S, d]:
 * checked before the cache changes (a bad one refused by the first layer's
 * cross-attention left that layer's keys and the bad copy in the cache, so
 * that a retry with the right mask was refused again). */
static bool mem_pad_ok(const cg_tensor *mem_pad, const cg_tensor *memory)
{
    if (!cg_check_dtype("TransformerDecoder cached", "mem_pad", mem_pad, CG_BOOL))
        return false;
    if (mem_pad->ndim == 2 && mem_pad->shape[0] == memory->shape[0] &&
        mem_pad->shape[1] == memory->shape[1])
        return true;
    char a[96], b[96];
    cg_set_error("TransformerDecoder cached: mem_pad %s is not bool [B, S] = %s of the memory",
                 cg_shape_str(mem_pad, a, sizeof a), cg_shape_str_n(2, memory->shape, b, sizeof b));
    return false;
}

/* The first step: check the memory and its padding and take them. */
static bool take_memory(cg_kv_cache *c, const cg_tf_config *cfg, cg_tensor *memory,
                        const cg_tensor *mem_pad, int64_t B)
{
    if (!memory || !check_input("TransformerDecoder cached memory", cfg, memory) ||
        memory->shape[0] != B) {
        if (memory)
            cg_set_error("TransformerDecoder cached: the first step needs memory [B,S,d] "
                         "with the queries' B");
        else
            cg_set_error("TransformerDecoder cached: the first step needs the memory");
        return false;
    }
    return (!mem_pad || mem_pad_ok(mem_pad, memory)) &&
           cg_kv_cache_take_pad(c, mem_pad, memory->shape[1]);
}

static cg_tensor *dec_stack_cached_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    cg_dec_stack *s = (cg_dec_stack *)m;
    cg_tensor *x = in[0], *memory = in[1];
    const fwd_args *a = args;
    cg_kv_cache *c = a->cache;
    if (!x || !check_input("TransformerDecoder cached", &s->cfg, x))
        return NULL;
    if (s->n_layers > 0 && c->cross[0].len == 0 && /* the first step */
        !take_memory(c, &s->cfg, memory, a->mem_pad, x->shape[0]))
        return NULL;
    cg_tensor *h = cg_retain(x);
    for (int i = 0; i < s->n_layers && h; i++) {
        fwd_args la = {.kv_self = &c->self[i], .kv_cross = &c->cross[i], .cross_pad = c->cross_pad};
        cg_tensor *n = cg_module_call(&s->layers[i]->base, dec_layer_cached_impl, 2,
                                      (cg_tensor *const[]){h, memory}, &la);
        cg_release(h);
        h = n;
    }
    if (h)
        c->len += x->shape[1];
    return final_norm(s->ln_f, h);
}

/* The caller's memory and mem_pad are checked (a later step) or noted (the
 * first) here, before the stack's pre-hooks see them; a step that fails
 * partway leaves every layer's cache as it was. */
cg_tensor *cg_dec_stack_forward_cached(cg_dec_stack *s, cg_tensor *x, cg_tensor *memory,
                                       const cg_tensor *mem_pad, cg_kv_cache *c)
{
    if (!s || !x || !c) {
        cg_error_null_input("cg_dec_stack_forward_cached");
        return NULL;
    }
    if (c->n_layers != s->n_layers) {
        cg_set_error("TransformerDecoder cached: the cache has %d layers, the stack %d",
                     c->n_layers, s->n_layers);
        return NULL;
    }
    const bool first = s->n_layers > 0 && c->cross[0].len == 0;
    if (s->n_layers > 0 && !first && !cg_kv_cache_memory_ok(c, memory, mem_pad))
        return NULL;
    int64_t *lens = cg_kv_cache_lens(c);
    if (!lens)
        return NULL;
    fwd_args a = {.mem_pad = mem_pad, .cache = c};
    cg_tensor *y =
        cg_module_call(&s->base, dec_stack_cached_impl, 2, (cg_tensor *const[]){x, memory}, &a);
    if (y && first && !cg_kv_cache_note_memory(c, memory, mem_pad)) {
        cg_release(y);
        y = NULL;
    }
    if (y)
        free(lens);
    else
        cg_kv_cache_restore_lens(c, lens);
    return y;
}

cg_tensor *cg_lm_blocks_forward_cached(cg_lm_block *const *blocks, int n_blocks, cg_tensor *x,
                                       cg_kv_cache *c)
{
    if (!blocks || !x || !c || n_blocks < 0) {
        cg_error_null_input("cg_lm_blocks_forward_cached");
        return NULL;
    }
    if (c->n_layers != n_blocks) {
        cg_set_error("LMBlock cached: the cache has %d layers, the model %d", c->n_layers,
                     n_blocks);
        return NULL;
    }
    int64_t *lens = cg_kv_cache_lens(c);
    cg_tensor *h = lens ? cg_retain(x) : NULL;
    for (int i = 0; i < n_blocks && h; i++) {
        fwd_args a = {.kv_self = &c->self[i]};
        cg_tensor *n =
            blocks[i] ? cg_module_call(&blocks[i]->base, lm_block_impl, 1, &h, &a) : NULL;
        cg_release(h);
        h = n;
    }
    if (h) {
        c->len += x->shape[1];
        free(lens);
    } else if (lens) { /* a step that failed partway leaves the cache as it was */
        cg_kv_cache_restore_lens(c, lens);
    }
    return h;
}
