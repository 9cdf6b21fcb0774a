/* cgrad core: transposed convolution, PyTorch's F.conv_transpose1d /
 * F.conv_transpose2d / F.conv_transpose3d (declared in core/ops.h), and
 * its backward, made of the convolution's passes (core/conv.c).
 *
 * A transposed convolution is the data gradient of the convolution
 * (stride, padding, dilation, groups) whose input has its output's shape
 * and whose output has x's: its forward is that convolution's backward
 * pass for dx with x as the gradient (W^T x folded back by col2im), then
 * the bias; its data gradient is that convolution's forward of g; its
 * weight gradient that convolution's dW with g as the input and x as the
 * gradient. output_padding only lengthens the output (the positions no
 * tap reaches hold the bias). The passes give the same bits for any
 * thread count, so do these. */
#include <string.h>

#include "core/conv_impl.h"
#include "core/shares.h"
#include "core/upcast.h"

typedef cg_conv_geom geom;

static const char *op_name(int nd)
{
    return nd == 1 ? "conv_transpose1d" : nd == 2 ? "conv_transpose2d" : "conv_transpose3d";
}

/* the output length of spatial dim i; 0 + error when below 1 */
static int64_t out_len(const char *op, int i, int64_t n, int64_t k, const cg_conv_cfg *c)
{
    const int64_t o = (n - 1) * c->stride[i] - 2 * c->padding[i] + c->dilation[i] * (k - 1) +
                      c->output_padding[i] + 1;
    if (n < 1 || o < 1) {
        cg_set_error("%s: input length %lld in spatial dim %d gives the output length %lld, "
                     "too small",
                     op, (long long)n, i, (long long)o);
        return 0;
    }
    return o;
}

/* The geometry of the convolution whose data gradient this is: its input
 * the output [N, O, ...], its output x [N, C, ...]; false + error */
static bool geometry(int nd, const cg_tensor *x, const cg_tensor *w, const cg_tensor *b,
                     const cg_conv_cfg *cfg, geom *g)
{
    const char *op = nd >= 1 && nd <= 3 ? op_name(nd) : "conv_transpose";
    const cg_conv_cfg c = cfg ? *cfg : CG_CONV_DEFAULT;
    char s1[96], s2[96];
    if (!cg_conv_transpose_cfg_check(op, nd, &c) ||
        !cg_conv_check_args(op, nd, x, w, b, "in, out / groups", w->shape[1] * c.groups))
        return false;
    const int s0 = x->ndim == nd + 2 ? 1 : 0; /* x's channel dim */
    const int64_t C = x->shape[s0];
    if (C % c.groups || w->shape[0] != C || C == 0) {
        cg_set_error("%s: input %s has %lld channels, weight %s with groups %lld: the weight "
                     "must be [%lld, out / groups, ...] and groups divide the channels",
                     op, cg_shape_str(x, s1, sizeof s1), (long long)C,
                     cg_shape_str(w, s2, sizeof s2), (long long)c.groups, (long long)C);
        return false;
    }
    *g = (geom){.op = op, .batched = s0 == 1, .N = s0 ? x->shape[0] : 1, .G = c.groups};
    g->O = C, g->Og = C / c.groups, g->Cg = w->shape[1], g->C = g->Cg * c.groups;
    int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1};
    int64_t p[3] = {0, 0, 0}, o[3] = {1, 1, 1};
    for (int i = 0; i < nd; i++) {
        const int j = 3 - nd + i; /* nd 1: the width, nd 2: the height and width */
        in[j] = x->shape[s0 + 1 + i];
        k[j] = w->shape[2 + i];
        s[j] = c.stride[i], d[j] = c.dilation[i], p[j] = c.padding[i];
        if (!(o[j] = out_len(op, i, in[j], k[j], &c)))
            return false;
    }
    cg_conv_geom_dims(g, o, in, k, s, d, p); /* its input is the convolution's output */
    return true;
}

/* the output's shape (x's batchedness) and its contiguous strides */
static int out_shape(int nd, const geom *g, int64_t *shape, int64_t os[5])
{
    int k = 0;
    if (g->batched)
        shape[k++] = g->N;
    shape[k++] = g->C;
    if (nd == 3)
        shape[k++] = g->D;
    if (nd >= 2)
        shape[k++] = g->H;
    shape[k++] = g->W;
    os[4] = 1, os[3] = g->W, os[2] = g->H * g->W, os[1] = g->D * os[2], os[0] = g->C * os[1];
    return k;
}

typedef struct {
    float *out;
    const cg_tensor *b;
    int64_t C, HW;
} bias_job;

/* planes r0..r1 (sample, channel) of the output: the channel's bias added */
static void add_bias(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    const bias_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        const float v = cg_data(j->b)[r % j->C * j->b->strides[0]];
        float *plane = j->out + r * j->HW;
        for (int64_t i = 0; i < j->HW; i++)
            plane[i] += v;
    }
}

cg_tensor *cg_k_conv_transpose(int nd, const cg_tensor *x, const cg_tensor *w, const cg_tensor *b,
                               const cg_conv_cfg *cfg)
{
    if (!x || !w)
        return cg_error_null_input("cg_k_conv_transpose"), NULL;
    geom g;
    if (!geometry(nd, x, w, b, cfg, &g))
        return NULL;
    int64_t shape[5], os[5];
    cg_tensor *out = cg_empty(out_shape(nd, &g, shape, os), shape);
    if (!out || g.N == 0)
        return out;
    cg_tensor *xf = cg_upcast_dense(x, false), *wc = xf ? cg_k_contiguous(w) : NULL;
    bool ok = wc && cg_conv_pass_backward(&g, NULL, os, cg_data(wc), cg_data(xf), cg_data(out),
                                          NULL, NULL);
    cg_release_all(2, xf, wc);
    if (ok && b) {
        const bias_job j = {cg_data(out), b, g.C, g.D * g.H * g.W};
        cg_shares_run(g.N * g.C, cg_shares_rows(j.HW), cg_shares_team(cg_numel(out) > 32768),
                      add_bias, &j);
    }
    if (!ok) {
        cg_release(out);
        return NULL;
    }
    return out;
}

bool cg_k_conv_transpose_backward(int nd, const cg_tensor *x, const cg_tensor *w,
                                  const cg_conv_cfg *cfg, const cg_tensor *g, cg_tensor **dx,
                                  cg_tensor **dw, cg_tensor **db)
{
    cg_tensor **outs[3] = {dx, dw, db};
    for (int i = 0; i < 3; i++)
        if (outs[i])
            *outs[i] = NULL;
    if (!x || !w || !g)
        return cg_error_null_input("cg_k_conv_transpose_backward");
    geom ge;
    if (!geometry(nd, x, w, NULL, cfg, &ge))
        return false;
    int64_t shape[5], gs[5];
    const int k = out_shape(nd, &ge, shape, gs);
    if (g->ndim != k || memcmp(g->shape, shape, sizeof(int64_t) * (size_t)k) ||
        g->dtype != CG_F32) {
        char s1[96], s2[96];
        cg_set_error("%s backward: gradient %s %s, expected float32 %s", ge.op,
                     cg_dtype_name(g->dtype), cg_shape_str(g, s1, sizeof s1),
                     cg_shape_str_n(k, shape, s2, sizeof s2));
        return false;
    }
    cg_tensor *t[3] = {dx ? cg_empty(x->ndim, x->shape) : NULL,
                       dw ? cg_zeros(w->ndim, w->shape) : NULL, db ? cg_zeros(1, &ge.C) : NULL};
    bool ok = (!dx || t[0]) && (!dw || t[1]) && (!db || t[2]);
    cg_tensor *xf = NULL, *gc = NULL, *wc = NULL;
    if (ok && ge.N > 0) {
        gc = cg_k_contiguous(g);
        wc = gc ? cg_k_contiguous(w) : NULL;
        xf = wc && dw ? cg_upcast_dense(x, false) : NULL;
        ok = wc && (!dw || xf);
        if (dx && dw) /* g unfolded once for both */
            ok = ok && cg_conv_pass_forward_dw(&ge, cg_data(gc), gs, cg_data(wc), cg_data(xf),
                                               cg_data(t[0]), cg_data(t[1]));
        else if (dx)
            ok = ok && cg_conv_pass_forward(&ge, cg_data(gc), gs, cg_data(wc), NULL, cg_data(t[0]));
        else if (dw)
            ok = ok && cg_conv_pass_backward(&ge, cg_data(gc), gs, cg_data(wc), cg_data(xf), NULL,
                                             cg_data(t[1]), NULL);
        geom gb = ge; /* g's rows: its channels over its positions */
        gb.O = ge.C, gb.P = ge.D * ge.H * ge.W;
        if (ok && db)
            cg_conv_pass_db(&gb, cg_data(gc), cg_data(t[2]));
    }
    cg_release_all(3, xf, gc, wc);
    for (int i = 0; i < 3; i++)
        if (outs[i])
            *outs[i] = ok ? t[i] : NULL;
    if (!ok)
        cg_release_all(3, t[0], t[1], t[2]);
    return ok;
}

bool cg_conv_transpose_output_padding(int nd, const cg_tensor *x, const cg_tensor *w, int n_size,
                                      const int64_t *size, cg_conv_cfg *cfg)
{
    const char *op = nd >= 1 && nd <= 3 ? op_name(nd) : "conv_transpose";
    if (!x || !w)
        return cg_error_null_input("cg_conv_transpose_output_padding");
    if (!size || !cfg)
        return cg_error_null_arg(op, size ? "cfg" : "output_size");
    cg_conv_cfg c = *cfg;
    c.output_padding[0] = c.output_padding[1] = c.output_padding[2] = 0;
    if (!cg_conv_transpose_cfg_check(op, nd, &c) ||
        !cg_conv_check_args(op, nd, x, w, NULL, "in, out / groups", 0))
        return false;
    if (n_size != nd && n_size != x->ndim) {
        cg_set_error("%s: for %d-d input, output_size must have %d or %d elements (got %d)", op,
                     x->ndim, nd, x->ndim, n_size);
        return false;
    }
    const int s = x->ndim - nd; /* x's first spatial dim */
    int64_t lo[3], hi[3];
    bool ok = true;
    for (int i = 0; i < nd; i++) {
        lo[i] = (x->shape[s + i] - 1) * c.stride[i] - 2 * c.padding[i] +
                c.dilation[i] * (w->shape[2 + i] - 1) + 1;
        hi[i] = lo[i] + c.stride[i] - 1;
        ok &= size[n_size - nd + i] >= lo[i] && size[n_size - nd + i] <= hi[i];
    }
    if (!ok) {
        char r[96], a[48], b[48], in[48];
        cg_set_error("%s: requested an output size of %s, but valid sizes range from %s to %s "
                     "for an input of %s",
                     op, cg_shape_str_n(nd, size + n_size - nd, r, sizeof r),
                     cg_shape_str_n(nd, lo, a, sizeof a), cg_shape_str_n(nd, hi, b, sizeof b),
                     cg_shape_str_n(nd, x->shape + s, in, sizeof in));
        return false;
    }
    for (int i = 0; i < nd; i++)
        cfg->output_padding[i] = size[n_size - nd + i] - lo[i];
    return true;
}
