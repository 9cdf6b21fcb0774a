/* nn.Bilinear and F.bilinear (nn/layers.h): y = x1^T A x2 + b, one
 * cg_einsum ("...i,oij,...j->...o": x1 with the weight, then with x2, two
 * batched products) and the bias added. */
#include <math.h>

#include "autograd/ops.h"
#include "nn/init.h"
#include "nn/layers.h"

cg_tensor *cg_bilinear(cg_tensor *x1, cg_tensor *x2, cg_tensor *w, cg_tensor *b)
{
    if (!x1 || !x2 || !w) {
        cg_error_null_input("bilinear");
        return NULL;
    }
    char s1[96], s2[96];
    if (x1->ndim != x2->ndim || x1->ndim < 1) {
        cg_set_error("bilinear: input dimensions do not match: got %d and %d (at least 1 each)",
                     x1->ndim, x2->ndim);
        return NULL;
    }
    for (int d = 0; d < x1->ndim - 1; d++)
        if (x1->shape[d] != x2->shape[d]) {
            cg_set_error("bilinear: input batch dimensions do not match: got %s and %s",
                         cg_shape_str(x1, s1, sizeof s1), cg_shape_str(x2, s2, sizeof s2));
            return NULL;
        }
    const int64_t in1 = x1->shape[x1->ndim - 1], in2 = x2->shape[x2->ndim - 1];
    if (w->ndim != 3 || w->shape[1] != in1 || w->shape[2] != in2) {
        cg_set_error("bilinear: weight %s, expected [out, %lld, %lld] for the inputs %s and %s",
                     cg_shape_str(w, s1, sizeof s1), (long long)in1, (long long)in2,
                     cg_shape_str(x1, s2, sizeof s2), cg_shape_str(x2, s2, sizeof s2));
        return NULL;
    }
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0])) {
        cg_set_error("bilinear: bias %s, expected [%lld] (the weight's out)",
                     cg_shape_str(b, s1, sizeof s1), (long long)w->shape[0]);
        return NULL;
    }
    cg_tensor *y = cg_einsum("...i,oij,...j->...o", 3, (cg_tensor *[]){x1, w, x2});
    if (!b || !y)
        return y;
    cg_tensor *out = cg_add(y, b);
    cg_release(y);
    return out;
}

/* nn.Bilinear: weight [out, in1, in2], bias [out] or none */
typedef struct {
    cg_module base;
    cg_tensor *weight, *bias;
} bilinear_module;

static cg_tensor *bilinear_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    (void)args;
    bilinear_module *l = (bilinear_module *)m;
    return cg_bilinear(in[0], in[1], l->weight, l->bias);
}

cg_module *cg_bilinear_new(int64_t in1_features, int64_t in2_features, int64_t out_features,
                           bool bias, cg_rng *rng)
{
    if (in1_features < 1 || in2_features < 1 || out_features < 1) {
        cg_set_error("Bilinear: in1_features, in2_features and out_features must be at least 1 "
                     "(got %lld, %lld and %lld)",
                     (long long)in1_features, (long long)in2_features, (long long)out_features);
        return NULL;
    }
    cg_rng local = cg_rng_new(0);
    bilinear_module *l = (bilinear_module *)cg_module_alloc(sizeof *l, "Bilinear", NULL);
    if (!l)
        return NULL;
    /* nn.Bilinear.reset_parameters: U(-1/sqrt(in1), 1/sqrt(in1)) each */
    const float bound = (float)(1.0 / sqrt((double)in1_features));
    cg_tensor *w = cg_empty(CG_SHAPE(out_features, in1_features, in2_features));
    bool ok = w && cg_init_uniform_(w, rng ? rng : &local, -bound, bound) &&
              cg_module_add_param_at(&l->base, "weight", w, &l->weight);
    cg_release(w);
    if (ok && bias) {
        cg_tensor *b = cg_empty(CG_SHAPE(out_features));
        ok = b && cg_init_uniform_(b, rng ? rng : &local, -bound, bound) &&
             cg_module_add_param_at(&l->base, "bias", b, &l->bias);
        cg_release(b);
    }
    if (!ok) {
        cg_module_free(&l->base);
        return NULL;
    }
    return &l->base;
}

cg_tensor *cg_bilinear_forward(cg_module *m, cg_tensor *x1, cg_tensor *x2)
{
    if (!m || !x1 || !x2) {
        cg_error_null_input("cg_bilinear_forward");
        return NULL;
    }
    return cg_module_call(m, bilinear_impl, 2, (cg_tensor *[]){x1, x2}, NULL);
}
