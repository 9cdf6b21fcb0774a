/* cgrad nn: nn.BatchNorm1d/2d, nn.InstanceNorm1d/2d and nn.GroupNorm
 * (nn/batchnorm.h). */
#include <math.h>

#include "autograd/ops.h"
#include "nn/batchnorm.h"

cg_batchnorm_opts cg_batchnorm_opts_default(void)
{
    return (cg_batchnorm_opts){
        .eps = 1e-5f, .momentum = 0.1f, .affine = true, .track_running_stats = true};
}

/* A tensor made by mk registered as parameter or buffer `name` into
 * *field; false on failure */
static bool add(cg_module *m, const char *name, cg_tensor *t, bool param, cg_tensor **field)
{
    if (!t)
        return false;
    *field =
        param ? cg_module_add_param_at(m, name, t, field) : cg_module_add_buffer(m, name, t, true);
    cg_release(t);
    return *field != NULL;
}

static cg_tensor *bn_impl(cg_module *m, cg_tensor *const *in, void *args);
static cg_tensor *in_impl(cg_module *m, cg_tensor *const *in, void *args);

/* A BatchNorm (instance false) or InstanceNorm module */
static cg_batchnorm *bn_new(int spatial, bool instance, int64_t C, const cg_batchnorm_opts *o)
{
    static const char *const TYPE[2][2] = {{"BatchNorm1d", "BatchNorm2d"},
                                           {"InstanceNorm1d", "InstanceNorm2d"}};
    const char *type = TYPE[instance][spatial - 1];
    if (instance && o->cumulative_average) {
        cg_set_error("%s: momentum None (cumulative_average) is BatchNorm's only", type);
        return NULL;
    }
    if (C <= 0 || !(o->eps >= 0.0f) || !isfinite(o->eps) || !isfinite(o->momentum)) {
        cg_set_error("%s: num_features %lld, eps %g, momentum %g: expected num_features > 0, "
                     "a finite eps >= 0 and a finite momentum",
                     type, (long long)C, (double)o->eps, (double)o->momentum);
        return NULL;
    }
    cg_batchnorm *bn = (cg_batchnorm *)cg_module_alloc(sizeof *bn, type, NULL);
    if (!bn)
        return NULL;
    bn->base.forward = instance ? in_impl : bn_impl;
    bn->num_features = C;
    bn->spatial = spatial;
    bn->eps = o->eps;
    bn->momentum = o->momentum;
    bn->cumulative_average = o->cumulative_average;
    bn->affine = o->affine;
    bn->track_running_stats = o->track_running_stats;
    const int64_t shape[1] = {C};
    bool ok = true;
    if (o->affine)
        ok = add(&bn->base, "weight", cg_full(1, shape, 1.0f), true, &bn->weight) &&
             add(&bn->base, "bias", cg_zeros(1, shape), true, &bn->bias);
    if (ok && o->track_running_stats)
        ok = add(&bn->base, "running_mean", cg_zeros(1, shape), false, &bn->running_mean) &&
             add(&bn->base, "running_var", cg_full(1, shape, 1.0f), false, &bn->running_var) &&
             add(&bn->base, "num_batches_tracked", cg_zeros_dtype(CG_I64, 0, NULL), false,
                 &bn->num_batches_tracked);
    if (!ok) {
        cg_module_free(&bn->base);
        return NULL;
    }
    return bn;
}

cg_batchnorm *cg_batchnorm1d_new(int64_t num_features, const cg_batchnorm_opts *opts)
{
    const cg_batchnorm_opts o = opts ? *opts : cg_batchnorm_opts_default();
    return bn_new(1, false, num_features, &o);
}
cg_batchnorm *cg_batchnorm2d_new(int64_t num_features, const cg_batchnorm_opts *opts)
{
    const cg_batchnorm_opts o = opts ? *opts : cg_batchnorm_opts_default();
    return bn_new(2, false, num_features, &o);
}

cg_batchnorm_opts cg_instancenorm_opts_default(void)
{
    return (cg_batchnorm_opts){.eps = 1e-5f, .momentum = 0.1f};
}
cg_instancenorm *cg_instancenorm1d_new(int64_t num_features, const cg_batchnorm_opts *opts)
{
    const cg_batchnorm_opts o = opts ? *opts : cg_instancenorm_opts_default();
    return bn_new(1, true, num_features, &o);
}
cg_instancenorm *cg_instancenorm2d_new(int64_t num_features, const cg_batchnorm_opts *opts)
{
    const cg_batchnorm_opts o = opts ? *opts : cg_instancenorm_opts_default();
    return bn_new(2, true, num_features, &o);
}

/* x's rank and channels are the module's; false + error */
static bool bn_input_ok(const cg_batchnorm *bn, const cg_tensor *x)
{
    const bool rank = bn->spatial == 1 ? x->ndim == 2 || x->ndim == 3 : x->ndim == 4;
    if (!rank || x->shape[1] != bn->num_features) {
        char a[96];
        cg_set_error("%s: input %s, expected %s with C = num_features = %lld", bn->base.type,
                     cg_shape_str(x, a, sizeof a),
                     bn->spatial == 1 ? "[N, C] or [N, C, L]" : "[N, C, H, W]",
                     (long long)bn->num_features);
        return false;
    }
    return true;
}

static cg_tensor *bn_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    (void)args;
    cg_batchnorm *bn = (cg_batchnorm *)m;
    cg_tensor *x = in[0];
    if (!x || !bn_input_ok(bn, x))
        return NULL;
    const bool track = bn->track_running_stats && bn->running_mean;
    const bool update = m->training && track;
    float factor = bn->momentum;
    int64_t *count = track ? cg_data_i64(bn->num_batches_tracked) : NULL;
    if (update && bn->cumulative_average)
        factor = 1.0f / (float)(*count + 1);
    /* eval without running statistics: the batch's, as PyTorch's */
    cg_tensor *y = cg_batch_norm(x, track ? bn->running_mean : NULL, track ? bn->running_var : NULL,
                                 bn->weight, bn->bias, m->training || !track, factor, bn->eps);
    if (y && update) {
        (*count)++;
        cg_tensor_modified(bn->num_batches_tracked);
    }
    return y;
}

cg_tensor *cg_batchnorm_forward(cg_batchnorm *bn, cg_tensor *x)
{
    if (!bn || !x) {
        cg_error_null_input("cg_batchnorm_forward");
        return NULL;
    }
    return cg_module_call(&bn->base, bn_impl, 1, &x, NULL);
}

/* ------------------------------------------------ InstanceNorm1d/2d */
static cg_tensor *in_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    (void)args;
    cg_instancenorm *bn = (cg_instancenorm *)m;
    cg_tensor *x = in[0];
    if (!x)
        return NULL;
    const int batched = bn->spatial + 2;
    if (x->ndim != batched && x->ndim != batched - 1) {
        char a[96];
        cg_set_error("%s: input %s, expected %s (unbatched: without N)", m->type,
                     cg_shape_str(x, a, sizeof a),
                     bn->spatial == 1 ? "[N, C, L] or [C, L]" : "[N, C, H, W] or [C, H, W]");
        return NULL;
    }
    const bool track = bn->track_running_stats && bn->running_mean;
    const bool unbatched = x->ndim < batched;
    cg_tensor *xb = unbatched ? cg_unsqueeze(x, 0) : x;
    cg_tensor *y =
        cg_instance_norm(xb, track ? bn->running_mean : NULL, track ? bn->running_var : NULL,
                         bn->weight, bn->bias, m->training || !track, bn->momentum, bn->eps);
    if (unbatched) {
        cg_tensor *y1 = y ? cg_squeeze(y, 0) : NULL;
        cg_release_all(2, xb, y);
        y = y1;
    }
    return y;
}

cg_tensor *cg_instancenorm_forward(cg_instancenorm *in, cg_tensor *x)
{
    if (!in || !x) {
        cg_error_null_input("cg_instancenorm_forward");
        return NULL;
    }
    return cg_module_call(&in->base, in_impl, 1, &x, NULL);
}

/* ------------------------------------------------ GroupNorm */
static cg_tensor *gn_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    (void)args;
    cg_groupnorm *gn = (cg_groupnorm *)m;
    return cg_group_norm(in[0], gn->num_groups, gn->weight, gn->bias, gn->eps);
}

cg_groupnorm *cg_groupnorm_new(int64_t num_groups, int64_t num_channels, float eps, bool affine)
{
    if (num_groups <= 0 || num_channels <= 0 || num_channels % num_groups || !(eps >= 0.0f) ||
        !isfinite(eps)) {
        cg_set_error("GroupNorm: num_groups %lld, num_channels %lld, eps %g: expected num_groups > "
                     "0 dividing num_channels and a finite eps >= 0",
                     (long long)num_groups, (long long)num_channels, (double)eps);
        return NULL;
    }
    cg_groupnorm *gn = (cg_groupnorm *)cg_module_alloc(sizeof *gn, "GroupNorm", NULL);
    if (!gn)
        return NULL;
    gn->base.forward = gn_impl;
    gn->num_groups = num_groups;
    gn->num_channels = num_channels;
    gn->eps = eps;
    gn->affine = affine;
    const int64_t shape[1] = {num_channels};
    if (affine && !(add(&gn->base, "weight", cg_full(1, shape, 1.0f), true, &gn->weight) &&
                    add(&gn->base, "bias", cg_zeros(1, shape), true, &gn->bias))) {
        cg_module_free(&gn->base);
        return NULL;
    }
    return gn;
}

cg_tensor *cg_groupnorm_forward(cg_groupnorm *gn, cg_tensor *x)
{
    if (!gn || !x) {
        cg_error_null_input("cg_groupnorm_forward");
        return NULL;
    }
    return cg_module_call(&gn->base, gn_impl, 1, &x, NULL);
}
