/* nn.EmbeddingBag as a module (nn/layers.h): its weight and options
 * around autograd's cg_embedding_bag, which checks them (the mode) and the
 * inputs; the constructor checks padding_idx, the row it zeroes. */
#include <stdio.h>

#include "autograd/ops.h"
#include "nn/init.h"
#include "nn/layers.h"

cg_embed_bag *cg_embed_bag_new(int64_t num, int64_t dim, const cg_bag_opts *o, cg_rng *rng)
{
    const cg_bag_opts dflt = {0};
    o = o ? o : &dflt;
    if (num <= 0 || dim <= 0 || o->offsets || o->per_sample_weights) {
        cg_set_error("cg_embed_bag_new: %s (num %lld, dim %lld)",
                     num <= 0 || dim <= 0 ? "num and dim must be positive"
                                          : "offsets and per_sample_weights are the forward's",
                     (long long)num, (long long)dim);
        return NULL;
    }
    if (o->has_padding_idx && (o->padding_idx < -num || o->padding_idx >= num)) {
        cg_set_error("cg_embed_bag_new: padding_idx %lld must be within [-num, num) (num %lld)",
                     (long long)o->padding_idx, (long long)num);
        return NULL;
    }
    cg_rng local = cg_rng_new(0);
    rng = rng ? rng : &local;
    cg_embed_bag *b = (cg_embed_bag *)cg_module_alloc(sizeof *b, "EmbeddingBag", NULL);
    cg_tensor *w = b ? cg_empty(2, (int64_t[]){num, dim}) : NULL;
    bool ok = w && cg_init_normal_(w, rng, 0.0f, 1.0f) &&
              cg_module_add_param_at(&b->base, "weight", w, &b->weight);
    cg_release(w);
    if (!ok) {
        cg_module_free(&b->base);
        return NULL;
    }
    b->num = num;
    b->dim = dim;
    b->opts = *o;
    if (o->has_padding_idx) { /* PyTorch's _fill_padding_idx_with_zero */
        const int64_t p = o->padding_idx < 0 ? o->padding_idx + num : o->padding_idx;
        for (int64_t d = 0; d < dim; d++)
            cg_data(b->weight)[p * dim + d] = 0.0f;
    }
    return b;
}

static cg_tensor *bag_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    (void)args;
    const cg_embed_bag *b = (const cg_embed_bag *)m;
    cg_bag_opts o = b->opts;
    o.offsets = in[1];
    o.per_sample_weights = in[2];
    return cg_embedding_bag(b->weight, in[0], &o);
}

cg_tensor *cg_embed_bag_forward(cg_embed_bag *b, const cg_tensor *ids, const cg_tensor *offsets,
                                cg_tensor *per_sample_weights)
{
    if (!b)
        return cg_error_null_input("cg_embed_bag_forward"), NULL;
    cg_tensor *in[3] = {(cg_tensor *)ids, (cg_tensor *)offsets, per_sample_weights};
    return cg_module_call(&b->base, bag_impl, 3, in, NULL);
}
