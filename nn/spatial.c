/* Pools, max unpool, padding, Flatten, Unfold, Fold, the pixel and
 * channel shuffles and LocalResponseNorm as modules (nn/spatial.h): each holds its options and calls
 * the functional op, which checks them against the input. */
#include <string.h>

#include "autograd/ops.h"
#include "nn/spatial.h"

typedef enum {
    MAX_POOL,
    AVG_POOL,
    ADAPTIVE_MAX,
    ADAPTIVE_AVG,
    PADDING,
    FLATTEN,
    UNFOLD,
    FOLD,
    PIXEL_SHUFFLE,
    PIXEL_UNSHUFFLE,
    MAX_UNPOOL,
    CHANNEL_SHUFFLE,
    LOCAL_RESPONSE_NORM
} spatial_kind;

typedef struct {
    cg_module base;
    spatial_kind kind;
    int nd;
    cg_pool pool;        /* MAX_POOL, AVG_POOL, MAX_UNPOOL */
    bool return_indices; /* MAX_POOL: cg_maxpool_forward gives them */
    int64_t out_size[3]; /* the adaptive pools', FOLD's; the shuffles' factor */
    int64_t pad[6];      /* PADDING: 2 nd sizes */
    cg_pad_mode mode;
    float value;
    int start_dim, end_dim; /* FLATTEN */
    cg_fold_cfg fold;       /* UNFOLD, FOLD */
    float lrn[3];           /* LOCAL_RESPONSE_NORM: alpha, beta, k (size: out_size[0]) */
} spatial;

static cg_tensor *spatial_impl(cg_module *m, cg_tensor *const *in, void *args)
{
    const spatial *s = (const spatial *)m;
    cg_tensor *x = in[0];
    const int64_t *o = s->out_size;
    static cg_tensor *(*const max_pools[3])(cg_tensor *, cg_pool) = {cg_max_pool1d, cg_max_pool2d,
                                                                     cg_max_pool3d};
    static cg_tensor *(*const avg_pools[3])(cg_tensor *, cg_pool) = {cg_avg_pool1d, cg_avg_pool2d,
                                                                     cg_avg_pool3d};
    static cg_tensor *(*const unpools[3])(cg_tensor *, cg_tensor *, cg_pool, const int64_t *) = {
        cg_max_unpool1d, cg_max_unpool2d, cg_max_unpool3d};
    static cg_tensor *(*const with_indices[3])(cg_tensor *, cg_pool, cg_tensor **) = {
        cg_max_pool1d_with_indices, cg_max_pool2d_with_indices, cg_max_pool3d_with_indices};
    switch (s->kind) {
    case MAX_POOL:
        if (s->return_indices && !args) {
            cg_set_error("%s: return_indices is set, so it returns indices too: run it with "
                         "cg_maxpool_forward",
                         m->type);
            return NULL;
        }
        return args ? with_indices[s->nd - 1](x, s->pool, args) : max_pools[s->nd - 1](x, s->pool);
    case AVG_POOL: return avg_pools[s->nd - 1](x, s->pool);
    case ADAPTIVE_MAX:
        return s->nd == 1   ? cg_adaptive_max_pool1d(x, o[0], NULL)
               : s->nd == 2 ? cg_adaptive_max_pool2d(x, o[0], o[1], NULL)
                            : cg_adaptive_max_pool3d(x, o[0], o[1], o[2], NULL);
    case ADAPTIVE_AVG:
        return s->nd == 1   ? cg_adaptive_avg_pool1d(x, o[0])
               : s->nd == 2 ? cg_adaptive_avg_pool2d(x, o[0], o[1])
                            : cg_adaptive_avg_pool3d(x, o[0], o[1], o[2]);
    case MAX_UNPOOL: return unpools[s->nd - 1](x, in[1], s->pool, args);
    case PADDING: return cg_pad(x, 2 * s->nd, s->pad, s->mode, s->value);
    case FLATTEN: return cg_flatten(x, s->start_dim, s->end_dim);
    case UNFOLD: return cg_unfold(x, &s->fold);
    case FOLD: return cg_fold(x, s->out_size[0], s->out_size[1], &s->fold);
    case PIXEL_SHUFFLE: return cg_pixel_shuffle(x, s->out_size[0]);
    case PIXEL_UNSHUFFLE: return cg_pixel_unshuffle(x, s->out_size[0]);
    case CHANNEL_SHUFFLE: return cg_channel_shuffle(x, s->out_size[0]);
    case LOCAL_RESPONSE_NORM:
        return cg_local_response_norm(x, o[0], s->lrn[0], s->lrn[1], s->lrn[2]);
    }
    return NULL;
}

/* A module of type (static) and kind, its nd checked against 1..max_nd */
static spatial *spatial_new(const char *fn, const char *type, spatial_kind kind, int nd, int max_nd)
{
    if (nd < 1 || nd > max_nd) {
        if (kind == PADDING)
            cg_set_error("%s: %s padding sizes, expected 2, 4 or 6 (pairs, the last dim's first)",
                         fn,
                         nd < 0 ? "an odd or negative number of"
                         : nd   ? "more than 6"
                                : "no");
        else
            cg_set_error("%s: nd %d, expected 1%s%d (the spatial dims)", fn, nd,
                         max_nd == 2 ? " or " : " to ", max_nd);
        return NULL;
    }
    spatial *s = (spatial *)cg_module_alloc(sizeof *s, type, NULL);
    if (!s)
        return NULL;
    s->kind = kind;
    s->nd = nd;
    s->base.forward = spatial_impl;
    return s;
}

/* A pool of options o: max, average or max unpool */
static cg_module *pool_new(const char *fn, spatial_kind kind, int nd, cg_pool o)
{
    static const char *const types[3][3] = {{"MaxPool1d", "MaxPool2d", "MaxPool3d"},
                                            {"AvgPool1d", "AvgPool2d", "AvgPool3d"},
                                            {"MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d"}};
    const int t = kind == MAX_POOL ? 0 : kind == AVG_POOL ? 1 : 2;
    spatial *s = spatial_new(fn, types[t][nd >= 1 && nd <= 3 ? nd - 1 : 0], kind, nd, 3);
    if (s)
        s->pool = o;
    if (s && kind == MAX_UNPOOL)
        s->base.forward = NULL; /* two inputs: cg_maxunpool_forward */
    return s ? &s->base : NULL;
}

cg_module *cg_maxpool_new(int nd, cg_pool o) { return pool_new("cg_maxpool_new", MAX_POOL, nd, o); }
cg_module *cg_avgpool_new(int nd, cg_pool o) { return pool_new("cg_avgpool_new", AVG_POOL, nd, o); }

/* m as a max pool module (NULL + error naming fn otherwise) */
static spatial *as_maxpool(const char *fn, cg_module *m)
{
    if (!m)
        return cg_error_null_arg(fn, "m"), NULL;
    if (strncmp(m->type, "MaxPool", 7) != 0) {
        cg_set_error("%s: module %s, expected a MaxPool1d/2d/3d", fn, m->type);
        return NULL;
    }
    return (spatial *)m;
}

bool cg_maxpool_set_return_indices(cg_module *m, bool on)
{
    spatial *s = as_maxpool("cg_maxpool_set_return_indices", m);
    if (s)
        s->return_indices = on;
    return s != NULL;
}

cg_tensor *cg_maxpool_forward(cg_module *m, cg_tensor *x, cg_tensor **indices)
{
    const char *fn = "cg_maxpool_forward";
    spatial *s = as_maxpool(fn, m);
    if (indices)
        *indices = NULL;
    if (!s)
        return NULL;
    if (s->return_indices != (indices != NULL)) {
        cg_set_error(indices ? "%s: %s has return_indices off (cg_maxpool_set_return_indices)"
                             : "%s: %s has return_indices set: give it somewhere for them",
                     fn, m->type);
        return NULL;
    }
    cg_tensor *y = cg_module_call(m, spatial_impl, 1, &x, indices);
    if (!y && indices) {
        cg_release(*indices);
        *indices = NULL;
    }
    return y;
}
cg_module *cg_maxunpool_new(int nd, cg_pool o)
{
    return pool_new("cg_maxunpool_new", MAX_UNPOOL, nd, o);
}

cg_tensor *cg_maxunpool_forward(cg_module *m, cg_tensor *x, cg_tensor *indices,
                                const int64_t *output_size)
{
    if (!m)
        return cg_error_null_arg("cg_maxunpool_forward", "m"), NULL;
    if (strncmp(m->type, "MaxUnpool", 9) != 0) {
        cg_set_error("cg_maxunpool_forward: module %s, expected a MaxUnpool1d/2d/3d", m->type);
        return NULL;
    }
    return cg_module_call(m, spatial_impl, 2, (cg_tensor *const[]){x, indices},
                          (void *)output_size);
}

/* An adaptive pool of the nd sizes size */
static cg_module *adaptive_new(const char *fn, int nd, int max_nd, bool max, const int64_t *size)
{
    static const char *const types[2][3] = {
        {"AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d"},
        {"AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d"}};
    spatial *s = spatial_new(fn, types[max][nd >= 1 && nd <= 3 ? nd - 1 : 0],
                             max ? ADAPTIVE_MAX : ADAPTIVE_AVG, nd, max_nd);
    if (s)
        memcpy(s->out_size, size, sizeof s->out_size);
    return s ? &s->base : NULL;
}

cg_module *cg_adaptive_pool_new(int nd, bool max, int64_t oh, int64_t ow)
{
    return adaptive_new("cg_adaptive_pool_new", nd, 2, max, (int64_t[3]){oh, ow, 0});
}
cg_module *cg_adaptive_pool3d_new(bool max, int64_t od, int64_t oh, int64_t ow)
{
    return adaptive_new("cg_adaptive_pool3d_new", 3, 3, max, (int64_t[3]){od, oh, ow});
}

cg_module *cg_padding_new(int n_pad, const int64_t *pad, cg_pad_mode mode, float value)
{
    const int nd = n_pad % 2 ? -1 : n_pad / 2; /* odd: refused as nd -1 */
    static const char *const types[4][3] = {
        {"ConstantPad1d", "ConstantPad2d", "ConstantPad3d"},
        {"ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d"},
        {"ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d"},
        {"CircularPad1d", "CircularPad2d", "CircularPad3d"},
    };
    if (!pad) {
        cg_error_null_input("cg_padding_new");
        return NULL;
    }
    if ((unsigned)mode > CG_PAD_CIRCULAR) {
        cg_set_error("cg_padding_new: mode %d, expected constant, reflect, replicate or circular "
                     "(0 to 3)",
                     (int)mode);
        return NULL;
    }
    const bool zero = mode == CG_PAD_CONSTANT && nd == 2 && value == 0.0f;
    spatial *s = spatial_new("cg_padding_new",
                             zero ? "ZeroPad2d" : types[mode][nd >= 1 && nd <= 3 ? nd - 1 : 0],
                             PADDING, nd, 3);
    if (!s)
        return NULL;
    memcpy(s->pad, pad, sizeof *pad * (size_t)(2 * nd));
    s->mode = mode;
    s->value = value;
    return &s->base;
}

cg_module *cg_flatten_new(int start_dim, int end_dim)
{
    spatial *s = spatial_new("cg_flatten_new", "Flatten", FLATTEN, 1, 1);
    if (s) {
        s->start_dim = start_dim;
        s->end_dim = end_dim;
    }
    return s ? &s->base : NULL;
}

/* nn.Unfold / nn.Fold (fold: output_size oh, ow) of options cfg */
static cg_module *fold_new(const char *fn, spatial_kind kind, int64_t oh, int64_t ow,
                           const cg_fold_cfg *cfg)
{
    if (!cfg) {
        cg_error_null_arg(fn, "cfg");
        return NULL;
    }
    spatial *s = spatial_new(fn, kind == FOLD ? "Fold" : "Unfold", kind, 2, 2);
    if (s) {
        s->fold = *cfg;
        s->out_size[0] = oh;
        s->out_size[1] = ow;
    }
    return s ? &s->base : NULL;
}

cg_module *cg_unfold_new(const cg_fold_cfg *cfg)
{
    return fold_new("cg_unfold_new", UNFOLD, 0, 0, cfg);
}
cg_module *cg_fold_new(int64_t oh, int64_t ow, const cg_fold_cfg *cfg)
{
    return fold_new("cg_fold_new", FOLD, oh, ow, cfg);
}

/* nn.PixelShuffle(r) / nn.PixelUnshuffle(r) */
static cg_module *shuffle_new(const char *fn, spatial_kind kind, int64_t r)
{
    spatial *s =
        spatial_new(fn, kind == PIXEL_SHUFFLE ? "PixelShuffle" : "PixelUnshuffle", kind, 2, 2);
    if (s)
        s->out_size[0] = r;
    return s ? &s->base : NULL;
}

cg_module *cg_pixel_shuffle_new(int64_t upscale_factor)
{
    return shuffle_new("cg_pixel_shuffle_new", PIXEL_SHUFFLE, upscale_factor);
}
cg_module *cg_pixel_unshuffle_new(int64_t downscale_factor)
{
    return shuffle_new("cg_pixel_unshuffle_new", PIXEL_UNSHUFFLE, downscale_factor);
}

/* nn.ChannelShuffle(groups), nn.LocalResponseNorm(size, alpha, beta, k) */
cg_module *cg_channel_shuffle_new(int64_t groups)
{
    spatial *s = spatial_new("cg_channel_shuffle_new", "ChannelShuffle", CHANNEL_SHUFFLE, 1, 1);
    if (s)
        s->out_size[0] = groups;
    return s ? &s->base : NULL;
}
cg_module *cg_local_response_norm_new(int64_t size, float alpha, float beta, float k)
{
    spatial *s =
        spatial_new("cg_local_response_norm_new", "LocalResponseNorm", LOCAL_RESPONSE_NORM, 1, 1);
    if (s) {
        s->out_size[0] = size;
        s->lrn[0] = alpha, s->lrn[1] = beta, s->lrn[2] = k;
    }
    return s ? &s->base : NULL;
}
