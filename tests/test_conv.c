/* Convolution: autograd's cg_conv1d / cg_conv2d / cg_conv3d (core/conv.c),
 * the transposed ones (core/conv_transpose.c) and the modules nn.Conv1d /
 * nn.Conv2d / nn.Conv3d and nn.ConvTranspose1d / 2d / 3d (nn/conv.c). The
 * 3-d ones' refusals, modules and files: tests/test_conv3d.c. Values and
 * gradients against
 * a direct sum in double (every configuration below), gradchecks over
 * stride, padding ('same', 'valid'), dilation, groups, depthwise, no
 * bias, 1x1 kernels, unbatched and non-contiguous inputs; the same bits at
 * 1 and 2 threads; bf16 precision bounded against double, bfloat16
 * inputs; refusals in one line. PyTorch's values and gradients:
 * tests/interop/check_conv.c (the test torch_conv). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/gemm.h"
#include "core/ops.h"
#include "nn/nn.h"
#include "tests/testutil.h"

/* A case: nd spatial dims, N (0: unbatched), C, O, input and kernel sizes
 * (entries 0 to nd - 1), the config, bias, and x's layout
 * (cg_test_randn_layout's kind). */
typedef struct {
    const char *name;
    int nd;
    int64_t N, C, O, in[3], k[3];
    cg_conv_cfg cfg;
    bool bias;
    int layout;
    bool transposed; /* conv_transpose1d / 2d / 3d: w [C, O / groups, ...] */
} conv_case;

#define CFG(s0, s1, p0, p1, d0, d1, g, mode) \
    ((cg_conv_cfg){{s0, s1, 1}, {p0, p1, 0}, {d0, d1, 1}, g, mode, {0, 0, 0}, CG_PAD_CONSTANT})
/* a transposed convolution's, output padding (q0, q1) */
#define TCFG(s0, s1, p0, p1, d0, d1, g, q0, q1) \
    ((cg_conv_cfg){{s0, s1, 1},                 \
                   {p0, p1, 0},                 \
                   {d0, d1, 1},                 \
                   g,                           \
                   CG_CONV_PAD_NUMBERS,         \
                   {q0, q1, 0},                 \
                   CG_PAD_CONSTANT})
#define PLAIN CFG(1, 1, 0, 0, 1, 1, 1, CG_CONV_PAD_NUMBERS)
/* a 3-d one's: stride, padding, dilation as {d, h, w} */
#define CFG3(s, p, d, g, mode) \
    ((cg_conv_cfg){I3 s, I3 p, I3 d, g, mode, {0, 0, 0}, CG_PAD_CONSTANT})
#define TCFG3(s, p, d, g, q) \
    ((cg_conv_cfg){I3 s, I3 p, I3 d, g, CG_CONV_PAD_NUMBERS, I3 q, CG_PAD_CONSTANT})
#define I3(a, b, c) \
    {               \
        a, b, c     \
    }
#define NUM CG_CONV_PAD_NUMBERS

static const conv_case cases[] = {
    {"1d plain", 1, 2, 3, 4, {9}, {3}, PLAIN, true, 0, false},
    {"1d stride 2 pad 1", 1, 2, 3, 4, {9}, {3}, CFG(2, 1, 1, 0, 1, 1, 1, 0), true, 0, false},
    {"1d dilation 2 pad 2", 1, 2, 3, 2, {10}, {3}, CFG(1, 1, 2, 0, 2, 1, 1, 0), true, 0, false},
    {"1d groups 2", 1, 2, 4, 6, {8}, {3}, CFG(1, 1, 1, 0, 1, 1, 2, 0), true, 0, false},
    {"1d depthwise", 1, 2, 4, 8, {7}, {3}, CFG(1, 1, 1, 0, 1, 1, 4, 0), true, 0, false},
    {"1d no bias", 1, 2, 3, 4, {8}, {2}, PLAIN, false, 0, false},
    {"1d 1x1", 1, 2, 5, 3, {6}, {1}, PLAIN, true, 0, false},
    {"1d unbatched", 1, 0, 3, 4, {9}, {3}, CFG(2, 1, 1, 0, 1, 1, 1, 0), true, 0, false},
    {"1d same even kernel",
     1,
     2,
     3,
     2,
     {7},
     {4},
     CFG(1, 1, 0, 0, 1, 1, 1, CG_CONV_SAME),
     true,
     0,
     false},
    {"1d same dilated",
     1,
     1,
     2,
     3,
     {8},
     {3},
     CFG(1, 1, 0, 0, 2, 1, 1, CG_CONV_SAME),
     true,
     0,
     false},
    {"1d valid", 1, 2, 3, 2, {6}, {3}, CFG(1, 1, 0, 0, 1, 1, 1, CG_CONV_VALID), true, 0, false},
    {"1d transposed x", 1, 3, 4, 2, {5}, {3}, CFG(1, 1, 1, 0, 1, 1, 1, 0), true, 1, false},
    {"1d strided x", 1, 2, 3, 2, {7}, {2}, CFG(3, 1, 2, 0, 1, 1, 1, 0), true, 2, false},
    {"1d broadcast x", 1, 2, 3, 2, {6}, {3}, PLAIN, true, 3, false},
    {"2d plain", 2, 2, 3, 4, {6, 5}, {3, 2}, PLAIN, true, 0, false},
    {"2d stride 2 pad 1", 2, 2, 3, 2, {7, 6}, {3, 3}, CFG(2, 2, 1, 1, 1, 1, 1, 0), true, 0, false},
    {"2d stride (2,1) pad (0,2)",
     2,
     1,
     2,
     3,
     {6, 5},
     {2, 3},
     CFG(2, 1, 0, 2, 1, 1, 1, 0),
     true,
     0,
     false},
    {"2d dilation 2", 2, 2, 2, 3, {7, 7}, {3, 3}, CFG(1, 1, 1, 1, 2, 2, 1, 0), true, 0, false},
    {"2d groups 2", 2, 2, 4, 4, {5, 5}, {3, 3}, CFG(1, 1, 1, 1, 1, 1, 2, 0), false, 0, false},
    {"2d depthwise", 2, 2, 3, 6, {5, 6}, {3, 3}, CFG(1, 1, 1, 1, 1, 1, 3, 0), true, 0, false},
    {"2d 1x1", 2, 2, 4, 3, {4, 5}, {1, 1}, PLAIN, true, 0, false},
    {"2d unbatched", 2, 0, 2, 3, {5, 4}, {2, 2}, CFG(1, 1, 1, 0, 1, 1, 1, 0), true, 0, false},
    {"2d same", 2, 1, 2, 2, {5, 6}, {2, 3}, CFG(1, 1, 0, 0, 1, 2, 1, CG_CONV_SAME), true, 0, false},
    {"2d valid",
     2,
     1,
     2,
     2,
     {5, 4},
     {3, 2},
     CFG(1, 1, 0, 0, 1, 1, 1, CG_CONV_VALID),
     true,
     0,
     false},
    {"2d transposed x", 2, 2, 3, 2, {5, 5}, {3, 3}, CFG(1, 1, 1, 1, 1, 1, 1, 0), true, 1, false},
    {"2d strided x", 2, 2, 2, 2, {6, 4}, {2, 2}, CFG(2, 1, 0, 1, 1, 1, 1, 0), true, 2, false},
    {"t1d plain", 1, 2, 3, 4, {5}, {3}, PLAIN, true, 0, true},
    {"t1d stride 2 pad 1 outpad 1",
     1,
     2,
     3,
     2,
     {5},
     {4},
     TCFG(2, 1, 1, 0, 1, 1, 1, 1, 0),
     true,
     0,
     true},
    {"t1d stride 3 dilation 2",
     1,
     2,
     2,
     3,
     {4},
     {3},
     TCFG(3, 1, 2, 0, 2, 1, 1, 2, 0),
     true,
     0,
     true},
    {"t1d groups 2", 1, 2, 4, 6, {5}, {3}, TCFG(2, 1, 1, 0, 1, 1, 2, 0, 0), false, 0, true},
    {"t1d unbatched", 1, 0, 3, 2, {6}, {2}, TCFG(2, 1, 0, 0, 1, 1, 1, 1, 0), true, 0, true},
    {"t1d strided x", 1, 2, 3, 2, {4}, {3}, TCFG(2, 1, 1, 0, 1, 1, 1, 0, 0), true, 2, true},
    {"t1d 1x1", 1, 2, 5, 3, {6}, {1}, PLAIN, true, 0, true},
    {"t2d plain", 2, 2, 3, 2, {4, 3}, {3, 2}, PLAIN, true, 0, true},
    {"t2d k4 s2 p1", 2, 2, 3, 4, {4, 4}, {4, 4}, TCFG(2, 2, 1, 1, 1, 1, 1, 0, 0), true, 0, true},
    {"t2d stride (2,3) outpad (1,2)",
     2,
     1,
     2,
     3,
     {3, 4},
     {3, 2},
     TCFG(2, 3, 1, 0, 1, 1, 1, 1, 2),
     true,
     0,
     true},
    {"t2d dilation 2 outpad by dilation",
     2,
     2,
     2,
     2,
     {4, 4},
     {3, 3},
     TCFG(1, 1, 2, 1, 2, 2, 1, 1, 1),
     true,
     0,
     true},
    {"t2d depthwise", 2, 2, 3, 6, {4, 5}, {3, 3}, TCFG(2, 2, 1, 1, 1, 1, 3, 1, 1), false, 0, true},
    {"t2d unbatched", 2, 0, 2, 3, {3, 4}, {2, 2}, TCFG(2, 1, 0, 1, 1, 1, 1, 0, 0), true, 0, true},
    {"t2d transposed x",
     2,
     2,
     3,
     2,
     {4, 4},
     {3, 3},
     TCFG(2, 2, 1, 1, 1, 1, 1, 1, 0),
     true,
     1,
     true},
    /* 3-d: [N, C, D, H, W], w [O, C / groups, KD, KH, KW] */
    {"3d plain",
     3,
     2,
     3,
     4,
     {4, 5, 4},
     {2, 3, 2},
     CFG3((1, 1, 1), (0, 0, 0), (1, 1, 1), 1, NUM),
     true,
     0,
     false},
    {"3d stride (2,1,2) pad (1,0,1)",
     3,
     2,
     2,
     3,
     {5, 4, 6},
     {3, 2, 3},
     CFG3((2, 1, 2), (1, 0, 1), (1, 1, 1), 1, NUM),
     true,
     0,
     false},
    {"3d dilation (1,2,1) pad (0,2,1)",
     3,
     1,
     2,
     2,
     {4, 6, 5},
     {2, 3, 2},
     CFG3((1, 1, 1), (0, 2, 1), (1, 2, 1), 1, NUM),
     true,
     0,
     false},
    {"3d groups 2 no bias",
     3,
     2,
     4,
     6,
     {3, 4, 4},
     {2, 2, 3},
     CFG3((1, 1, 1), (1, 1, 1), (1, 1, 1), 2, NUM),
     false,
     0,
     false},
    {"3d depthwise",
     3,
     1,
     3,
     6,
     {4, 4, 3},
     {3, 1, 2},
     CFG3((1, 2, 1), (1, 0, 0), (1, 1, 1), 3, NUM),
     true,
     0,
     false},
    {"3d same",
     3,
     2,
     2,
     3,
     {4, 5, 4},
     {2, 3, 4},
     CFG3((1, 1, 1), (0, 0, 0), (2, 1, 1), 1, CG_CONV_SAME),
     true,
     0,
     false},
    {"3d valid",
     3,
     1,
     2,
     2,
     {4, 4, 5},
     {3, 2, 2},
     CFG3((1, 1, 1), (0, 0, 0), (1, 1, 1), 1, CG_CONV_VALID),
     true,
     0,
     false},
    {"3d 1x1x1",
     3,
     2,
     4,
     3,
     {3, 4, 5},
     {1, 1, 1},
     CFG3((1, 1, 1), (0, 0, 0), (1, 1, 1), 1, NUM),
     true,
     0,
     false},
    {"3d unbatched",
     3,
     0,
     2,
     3,
     {4, 3, 5},
     {2, 2, 3},
     CFG3((2, 1, 1), (1, 1, 0), (1, 1, 1), 1, NUM),
     true,
     0,
     false},
    {"3d transposed x",
     3,
     2,
     3,
     2,
     {4, 4, 3},
     {3, 2, 2},
     CFG3((1, 1, 1), (1, 1, 0), (1, 1, 1), 1, NUM),
     true,
     1,
     false},
    {"3d strided x",
     3,
     2,
     2,
     2,
     {5, 4, 4},
     {2, 2, 2},
     CFG3((2, 1, 2), (0, 1, 0), (1, 1, 1), 1, NUM),
     true,
     2,
     false},
    {"t3d plain",
     3,
     2,
     3,
     2,
     {3, 4, 3},
     {2, 3, 2},
     TCFG3((1, 1, 1), (0, 0, 0), (1, 1, 1), 1, (0, 0, 0)),
     true,
     0,
     true},
    {"t3d stride (2,1,3) pad (1,0,1) outpad (1,0,2)",
     3,
     2,
     2,
     3,
     {3, 3, 3},
     {3, 2, 3},
     TCFG3((2, 1, 3), (1, 0, 1), (1, 1, 1), 1, (1, 0, 2)),
     true,
     0,
     true},
    {"t3d dilation 2 outpad by dilation",
     3,
     1,
     2,
     2,
     {3, 3, 4},
     {2, 3, 2},
     TCFG3((1, 1, 1), (1, 2, 0), (2, 2, 2), 1, (1, 1, 0)),
     true,
     0,
     true},
    {"t3d groups 2 no bias",
     3,
     2,
     4,
     6,
     {3, 3, 2},
     {2, 2, 2},
     TCFG3((2, 2, 1), (1, 0, 0), (1, 1, 1), 2, (0, 1, 0)),
     false,
     0,
     true},
    {"t3d unbatched",
     3,
     0,
     3,
     2,
     {2, 3, 4},
     {2, 2, 3},
     TCFG3((2, 1, 2), (0, 1, 1), (1, 1, 1), 1, (1, 0, 1)),
     true,
     0,
     true},
    {"t3d transposed x",
     3,
     2,
     3,
     2,
     {3, 3, 3},
     {3, 3, 2},
     TCFG3((2, 2, 1), (1, 1, 0), (1, 1, 1), 1, (1, 0, 0)),
     true,
     1,
     true},
};
enum { N_CASES = sizeof cases / sizeof *cases };

static int x_shape(const conv_case *c, int64_t *s)
{
    int k = 0;
    if (c->N)
        s[k++] = c->N;
    s[k++] = c->C;
    for (int i = 0; i < c->nd; i++)
        s[k++] = c->in[i];
    return k;
}
static int w_shape(const conv_case *c, int64_t *s)
{
    s[0] = c->transposed ? c->C : c->O;
    s[1] = (c->transposed ? c->O : c->C) / c->cfg.groups;
    for (int i = 0; i < c->nd; i++)
        s[2 + i] = c->k[i];
    return c->nd + 2;
}

/* x, w, b (b NULL without bias), requiring grad */
static void make_inputs(const conv_case *c, cg_rng *r, cg_tensor **in)
{
    int64_t sx[5], sw[5];
    const int nx = x_shape(c, sx), nw = w_shape(c, sw);
    in[0] = cg_requires_grad(cg_test_randn_layout(r, nx, sx, c->layout), true);
    in[1] = cg_requires_grad(cg_randn(r, nw, sw), true);
    in[2] = c->bias ? cg_requires_grad(cg_randn(r, CG_SHAPE(c->O)), true) : NULL;
}

static cg_tensor *conv_fn(void *ctx, cg_tensor *const *in)
{
    const conv_case *c = ctx;
    static cg_tensor *(*const fns[2][3])(cg_tensor *, cg_tensor *, cg_tensor *,
                                         const cg_conv_cfg *) = {
        {cg_conv1d, cg_conv2d, cg_conv3d},
        {cg_conv_transpose1d, cg_conv_transpose2d, cg_conv_transpose3d}};
    return fns[c->transposed][c->nd - 1](in[0], in[1], in[2], &c->cfg);
}

/* ---------------------------------------------- the reference in double */
/* PyTorch's definition, term by term: out[n, o, od, oh, ow] = b[o] + sum
 * over c in o's group and the taps of x[n, c, od s - pl + kd d, ...] w[o,
 * c', kd, kh, kw], and its gradients g-weighted (a 2-d case of depth 1, a
 * 1-d one of depth and height 1). Transposed: x[n, c, id, ...] w[c, o',
 * kd, kh, kw] over the taps with id s - pl + kd d = od. Every array
 * contiguous in double; abs (if not NULL) gets sum |x| |w| per output (the
 * bf16 bound), dxa and dwa the gradients' sums of |g| |w| and |g| |x|. */
typedef struct {
    double *y, *dx, *dw, *db, *abs, *dxa, *dwa;
} ref_out;

static int64_t pad_lo(const conv_case *c, int i)
{
    if (c->cfg.pad == CG_CONV_SAME)
        return c->cfg.dilation[i] * (c->k[i] - 1) / 2;
    return c->cfg.pad == CG_CONV_VALID ? 0 : c->cfg.padding[i];
}
static int64_t out_len(const conv_case *c, int i)
{
    if (c->transposed)
        return (c->in[i] - 1) * c->cfg.stride[i] - 2 * c->cfg.padding[i] +
               c->cfg.dilation[i] * (c->k[i] - 1) + c->cfg.output_padding[i] + 1;
    const int64_t span = c->cfg.dilation[i] * (c->k[i] - 1) + 1;
    const int64_t tot = c->cfg.pad == CG_CONV_SAME    ? span - 1
                        : c->cfg.pad == CG_CONV_VALID ? 0
                                                      : 2 * c->cfg.padding[i];
    return (c->in[i] + tot - span) / c->cfg.stride[i] + 1;
}

/* the input position of output position o at tap k in one dim (s, d,
 * p: stride, dilation, padding before), -1 where there is none */
static int64_t in_pos(bool transposed, int64_t o, int64_t k, int64_t s, int64_t d, int64_t p,
                      int64_t n)
{
    int64_t i = o * s - p + k * d;
    if (transposed) {
        const int64_t t = o + p - k * d;
        i = t < 0 || t % s ? -1 : t / s;
    }
    return i < n ? i : -1;
}

static void reference(const conv_case *c, const double *x, const double *w, const double *b,
                      const double *g, ref_out *r)
{
    const int64_t N = c->N ? c->N : 1, G = c->cfg.groups, Cg = c->C / G, Og = c->O / G;
    int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, out[3] = {1, 1, 1}, s[3] = {1, 1, 1};
    int64_t d[3] = {1, 1, 1}, p[3] = {0, 0, 0};
    for (int i = 0; i < c->nd; i++) { /* the case's dims the last nd of depth, height, width */
        const int j = 3 - c->nd + i;
        in[j] = c->in[i], k[j] = c->k[i], out[j] = out_len(c, i), s[j] = c->cfg.stride[i];
        d[j] = c->cfg.dilation[i], p[j] = pad_lo(c, i);
    }
    const int64_t taps = k[0] * k[1] * k[2], P = out[0] * out[1] * out[2];
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < c->O; o++)
            for (int64_t q = 0; q < P; q++) {
                const int64_t yi = (n * c->O + o) * P + q;
                const int64_t op[3] = {q / (out[1] * out[2]), q / out[2] % out[1], q % out[2]};
                double acc = b ? b[o] : 0, a = 0;
                if (r->db && g)
                    r->db[o] += g[yi];
                for (int64_t ci = 0; ci < Cg; ci++)
                    for (int64_t t = 0; t < taps; t++) {
                        const int64_t kt[3] = {t / (k[1] * k[2]), t / k[2] % k[1], t % k[2]};
                        const int64_t ch = (o / Og) * Cg + ci;
                        int64_t ip[3], xi = n * c->C + ch;
                        bool inside = true;
                        for (int e = 0; e < 3; e++) {
                            ip[e] = in_pos(c->transposed, op[e], kt[e], s[e], d[e], p[e], in[e]);
                            inside &= ip[e] >= 0;
                            xi = xi * in[e] + ip[e];
                        }
                        if (!inside)
                            continue;
                        const int64_t wi =
                            (c->transposed ? ch * Og + o % Og : o * Cg + ci) * taps + t;
                        acc += x[xi] * w[wi];
                        a += fabs(x[xi] * w[wi]);
                        if (g && r->dx)
                            r->dx[xi] += g[yi] * w[wi];
                        if (g && r->dw)
                            r->dw[wi] += g[yi] * x[xi];
                        if (g && r->dxa)
                            r->dxa[xi] += fabs(g[yi] * w[wi]), r->dwa[wi] += fabs(g[yi] * x[xi]);
                    }
                if (r->y)
                    r->y[yi] = acc;
                if (r->abs)
                    r->abs[yi] = a + (b ? fabs(b[o]) : 0);
            }
}

/* |got - want| <= tol[i] (tol NULL: atol + rtol |want|) over n */
static double worst_ratio(const cg_tensor *got, const double *want, const double *tol, double atol,
                          double rtol)
{
    float *f = cg_test_values(got);
    double worst = 0;
    for (int64_t i = 0; i < cg_numel(got); i++) {
        const double t = tol ? tol[i] : atol + rtol * fabs(want[i]);
        const double q = fabs(f[i] - want[i]) / t;
        worst = q > worst || isnan(q) ? q : worst;
    }
    free(f);
    return worst;
}

/* the bf16 tolerances of n values: the larger of atol + rtol |want| and
 * each operand rounded (2^-9 relative each) over the sum a of the
 * products' magnitudes, with a factor 2 to spare */
static double *bf16_tol(int64_t n, const double *want, const double *a, double atol, double rtol)
{
    double *tol = calloc((size_t)n, sizeof(double));
    for (int64_t i = 0; i < n; i++)
        tol[i] = fmax(atol + rtol * fabs(want[i]), 1e-6 + a[i] * (2.0 / 256));
    return tol;
}

/* forward and backward of case c: out, and the three gradients against the
 * reference within atol/rtol (bound: the bf16 bound instead) */
static void check_case(const conv_case *c, uint64_t seed, bool bf16)
{
    cg_rng r = cg_rng_new(seed);
    cg_tensor *in[3];
    make_inputs(c, &r, in);
    cg_tensor *y = conv_fn((void *)c, in);
    ck_assert_msg(y, "%s: %s", c->name, cg_last_error());
    cg_tensor *g = cg_randn(&r, y->ndim, y->shape);
    ck_assert_msg(cg_backward(y, g, false), "%s: %s", c->name, cg_last_error());
    double *x = cg_test_doubles(in[0]), *w = cg_test_doubles(in[1]),
           *b = in[2] ? cg_test_doubles(in[2]) : NULL;
    double *gd = cg_test_doubles(g);
    const int64_t ny = cg_numel(y), nx = cg_numel(in[0]), nw = cg_numel(in[1]);
    ref_out ref = {calloc((size_t)ny, sizeof(double)), calloc((size_t)nx, sizeof(double)),
                   calloc((size_t)nw, sizeof(double)), calloc((size_t)c->O, sizeof(double)),
                   calloc((size_t)ny, sizeof(double)), calloc((size_t)nx, sizeof(double)),
                   calloc((size_t)nw, sizeof(double))};
    reference(c, x, w, b, gd, &ref);
    /* fp32: a few ulps of the sums; bf16: each operand rounded over sum
     * |x||w| (the gradients: their fixed tolerance, or their sums' bound
     * where larger: a 3-d kernel's many taps) */
    const double rel = bf16 ? 2e-2 : 1e-5, abs_ = bf16 ? 5e-2 : 1e-5;
    double *tol = bf16 ? bf16_tol(ny, ref.y, ref.abs, 0, 0) : NULL;
    double *tx = bf16 ? bf16_tol(nx, ref.dx, ref.dxa, abs_, rel) : NULL;
    double *tw = bf16 ? bf16_tol(nw, ref.dw, ref.dwa, abs_, rel) : NULL;
    const double ry = worst_ratio(y, ref.y, tol, 1e-5, 1e-5);
    const double rx = worst_ratio(cg_grad(in[0]), ref.dx, tx, abs_, rel);
    const double rw = worst_ratio(cg_grad(in[1]), ref.dw, tw, abs_, rel);
    const double rb = in[2] ? worst_ratio(cg_grad(in[2]), ref.db, NULL, 1e-5, 1e-5) : 0;
    ck_assert_msg(ry <= 1 && rx <= 1 && rw <= 1 && rb <= 1,
                  "%s%s: worst error / tolerance: out %g, dx %g, dw %g, db %g", c->name,
                  bf16 ? " (bf16)" : "", ry, rx, rw, rb);
    free(tol), free(tx), free(tw);
    free(x), free(w), free(b), free(gd);
    free(ref.y), free(ref.dx), free(ref.dw), free(ref.db), free(ref.abs), free(ref.dxa),
        free(ref.dwa);
    cg_release_all(5, in[0], in[1], in[2], y, g);
}

/* ---------------------------------------------------------------- tests */
START_TEST(test_conv_reference)
{
    for (int i = 0; i < N_CASES; i++)
        check_case(&cases[i], 100 + (uint64_t)i, false);
}
END_TEST

START_TEST(test_conv_gradcheck)
{
    for (int i = 0; i < N_CASES; i++) {
        const conv_case *c = &cases[i];
        cg_rng r = cg_rng_new(200 + (uint64_t)i);
        cg_tensor *in[3];
        make_inputs(c, &r, in);
        cg_gradcheck_report rep;
        ck_assert_msg(cg_gradcheck(conv_fn, (void *)c, c->bias ? 3 : 2, in, NULL, &rep), "%s: %s",
                      c->name, rep.message);
        /* the inputs CONV's row says its backward reads (autograd/autograd.h) */
        cg_test_check_unread(conv_fn, (void *)c, 3, in, c->name); /* in[2] NULL: no bias */
        /* only the weight, then only x, needs a gradient */
        in[0]->requires_grad = false;
        ck_assert_msg(cg_gradcheck(conv_fn, (void *)c, 2, in, NULL, &rep), "%s (w): %s", c->name,
                      rep.message);
        in[0]->requires_grad = true;
        in[1]->requires_grad = false;
        ck_assert_msg(cg_gradcheck(conv_fn, (void *)c, 2, in, NULL, &rep), "%s (x): %s", c->name,
                      rep.message);
        cg_release_all(3, in[0], in[1], in[2]);
    }
}
END_TEST

/* forward and gradients at 1 and 2 threads: the same bits */
START_TEST(test_conv_threads)
{
    static const conv_case big[] = {
        {"1d", 1, 4, 32, 24, {200}, {5}, CFG(1, 1, 2, 0, 1, 1, 1, 0), true, 1, false},
        {"2d groups", 2, 3, 16, 16, {24, 20}, {3, 3}, CFG(1, 1, 1, 1, 2, 1, 2, 0), true, 0, false},
        {"t1d", 1, 4, 32, 24, {100}, {4}, TCFG(2, 1, 1, 0, 1, 1, 1, 1, 0), true, 1, true},
        {"t2d groups",
         2,
         3,
         16,
         16,
         {12, 10},
         {4, 4},
         TCFG(2, 2, 1, 1, 1, 1, 2, 0, 1),
         true,
         0,
         true},
        {"t2d batch of one",
         2,
         1,
         16,
         16,
         {12, 10},
         {3, 3},
         TCFG(2, 2, 1, 1, 1, 1, 1, 1, 1),
         true,
         0,
         true},
        {"3d groups",
         3,
         3,
         8,
         8,
         {6, 10, 9},
         {3, 3, 2},
         CFG3((1, 2, 1), (1, 1, 0), (2, 1, 1), 2, NUM),
         true,
         1,
         false},
        {"3d batch of one",
         3,
         1,
         8,
         8,
         {8, 10, 12},
         {3, 3, 3},
         CFG3((1, 1, 1), (1, 1, 1), (1, 1, 1), 1, NUM),
         true,
         0,
         false},
        {"t3d groups",
         3,
         3,
         8,
         8,
         {4, 6, 5},
         {3, 2, 3},
         TCFG3((2, 1, 2), (1, 0, 1), (1, 1, 1), 2, (1, 0, 0)),
         true,
         0,
         true},
        {"t3d batch of one",
         3,
         1,
         8,
         8,
         {5, 6, 5},
         {3, 3, 3},
         TCFG3((2, 2, 2), (1, 1, 1), (1, 1, 1), 1, (0, 1, 1)),
         true,
         0,
         true},
    };
    for (int k = 0; k < (int)(sizeof big / sizeof *big); k++) {
        float *got[2][4];
        int64_t n[4];
        for (int nt = 1; nt <= 2; nt++) {
            cg_set_num_threads(nt);
            cg_rng r = cg_rng_new(7);
            cg_tensor *in[3];
            make_inputs(&big[k], &r, in);
            cg_tensor *y = conv_fn((void *)&big[k], in), *g = cg_randn(&r, y->ndim, y->shape);
            ck_assert_msg(cg_backward(y, g, false), "%s", cg_last_error());
            const cg_tensor *t[4] = {y, cg_grad(in[0]), cg_grad(in[1]), cg_grad(in[2])};
            for (int j = 0; j < 4; j++) {
                got[nt - 1][j] = cg_test_values(t[j]);
                n[j] = cg_numel(t[j]);
            }
            cg_release_all(5, in[0], in[1], in[2], y, g);
        }
        cg_set_num_threads(0);
        for (int j = 0; j < 4; j++) {
            ck_assert_msg(!memcmp(got[0][j], got[1][j], (size_t)n[j] * sizeof(float)),
                          "%s: result %d differs between 1 and 2 threads", big[k].name, j);
            free(got[0][j]);
            free(got[1][j]);
        }
    }
}
END_TEST

/* bf16 precision (autocast): within the bf16 bound of the double sums */
START_TEST(test_conv_bf16_precision)
{
    const cg_precision prev = cg_autocast_begin(CG_PRECISION_BF16);
    for (int i = 0; i < N_CASES; i++)
        check_case(&cases[i], 300 + (uint64_t)i, true);
    cg_autocast_end(prev);
}
END_TEST

/* a bfloat16 x: the result float32, conv of its float32 value bit for bit;
 * its gradient bfloat16, the float32 gradient rounded */
START_TEST(test_conv_bf16_input)
{
    /* 2d stride 2 pad 1; t2d k4 s2 p1; 3d stride (2,1,2) pad (1,0,1); t3d stride (2,1,3) */
    static const int pick[4] = {15, 34, 41, 52};
    const conv_case *c = &cases[pick[_i]];
    cg_rng r = cg_rng_new(11);
    cg_tensor *in[3];
    make_inputs(c, &r, in);
    cg_tensor *xb = cg_requires_grad(cg_k_to(in[0], CG_BF16), true);
    cg_tensor *xf = cg_requires_grad(cg_k_to(xb, CG_F32), true);
    cg_tensor *a[3] = {xb, in[1], in[2]}, *f[3] = {xf, in[1], in[2]};
    cg_tensor *yb = conv_fn((void *)c, a), *yf = conv_fn((void *)c, f);
    cg_test_bf16_input_same(yb, yf, xb, xf, NULL);
    cg_release_all(7, in[0], in[1], in[2], xb, xf, yb, yf);
}
END_TEST

/* every refusal one line, NULL returned */
#define REFUSED CG_ASSERT_REFUSED_LINE

START_TEST(test_conv_refusals)
{
    cg_rng r = cg_rng_new(3);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 4, 6)), *w = cg_randn(&r, CG_SHAPE(3, 4, 3));
    cg_tensor *b = cg_randn(&r, CG_SHAPE(3)), *x2 = cg_randn(&r, CG_SHAPE(1, 4, 5, 5));
    cg_tensor *w2 = cg_randn(&r, CG_SHAPE(4, 2, 3, 3)),
              *xi = cg_zeros_dtype(CG_I64, CG_SHAPE(2, 4, 6));
    cg_tensor *wb = cg_k_to(w, CG_BF16), *b4 = cg_randn(&r, CG_SHAPE(4));
    cg_conv_cfg c = CG_CONV_DEFAULT;
    REFUSED(cg_conv1d(NULL, w, b, NULL), "input is NULL");
    REFUSED(cg_conv1d(xi, w, b, NULL), "conv1d: input is int64, expected float32 or bfloat16");
    REFUSED(cg_conv1d(x, wb, b, NULL), "conv1d: weight is bfloat16, expected float32");
    REFUSED(cg_conv1d(x2, w, b, NULL), "conv1d: input [1, 4, 5, 5] has 4 dims");
    cg_tensor *xs = cg_randn(&r, CG_SHAPE(4, 6));
    REFUSED(cg_conv2d(xs, w2, NULL, NULL), "conv2d: input [4, 6] has 2 dims, expected 3 "
                                           "(unbatched) or 4 (batched)");
    cg_release(xs);
    REFUSED(cg_conv1d(x, w2, b, NULL), "conv1d: weight [4, 2, 3, 3] must be [out, in / groups, K]");
    REFUSED(cg_conv1d(x, w, b4, NULL), "conv1d: bias [4], weight [3, 4, 3]: the bias must be [3]");
    REFUSED(cg_conv2d(x2, w2, NULL, NULL), "conv2d: input [1, 4, 5, 5] has 4 channels, weight "
                                           "[4, 2, 3, 3] with groups 1 expects 2");
    c.groups = 2;
    REFUSED(cg_conv1d(x, w, b, &c), "conv1d: groups 2 must divide");
    c = CG_CONV_DEFAULT, c.stride[0] = 0;
    REFUSED(cg_conv1d(x, w, b, &c), "conv1d: stride must be positive (got 0 in spatial dim 0)");
    c = CG_CONV_DEFAULT, c.dilation[1] = -1;
    REFUSED(cg_conv2d(x2, w2, NULL, &c),
            "conv2d: dilation must be positive (got -1 in spatial dim 1)");
    c = CG_CONV_DEFAULT, c.padding[0] = -1;
    REFUSED(cg_conv1d(x, w, b, &c), "conv1d: padding must be non-negative");
    c = CG_CONV_DEFAULT, c.pad = CG_CONV_SAME, c.stride[0] = 2;
    REFUSED(cg_conv1d(x, w, b, &c), "conv1d: padding='same' needs stride 1");
    c = CG_CONV_DEFAULT, c.pad = (cg_conv_pad)7;
    REFUSED(cg_conv1d(x, w, b, &c), "conv1d: padding mode 7");
    c = CG_CONV_DEFAULT, c.groups = 0;
    REFUSED(cg_conv1d(x, w, b, &c), "conv1d: groups must be positive (got 0)");
    c = CG_CONV_DEFAULT, c.dilation[0] = 3;
    REFUSED(cg_conv1d(x, w, b, &c), "conv1d: kernel 3 (dilated 7) is larger than the padded "
                                    "input 6 in spatial dim 0");
    REFUSED(cg_k_conv(4, x, w, b, NULL), "conv: 4 spatial dims, expected 1, 2 or 3");
    /* the modules */
    c = CG_CONV_DEFAULT, c.groups = 3;
    REFUSED(cg_conv2d_new(4, 6, 3, 3, &c, true, &r),
            "Conv2d: in_channels 4 and out_channels 6 must be divisible by groups 3");
    c = CG_CONV_DEFAULT, c.stride[0] = -2;
    REFUSED(cg_conv1d_new(4, 6, 3, &c, true, &r), "Conv1d: stride must be positive");
    REFUSED(cg_conv2d_new(4, 6, 0, 3, NULL, true, &r), "Conv2d: channels and kernel size must be");
    cg_conv *m = cg_conv1d_new(3, 2, 3, NULL, true, &r);
    REFUSED(cg_conv_forward(m, x), "conv1d: input [2, 4, 6] has 4 channels, weight [2, 3, 3]");
    cg_module_free(CG_MODULE(m));
    cg_release_all(8, x, w, b, x2, w2, xi, wb, b4);
}
END_TEST

/* the transposed convolution's refusals: its weight [in, out / groups,
 * ...], its output padding, its output length */
START_TEST(test_conv_transpose_refusals)
{
    cg_rng r = cg_rng_new(4);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 4, 6)), *w = cg_randn(&r, CG_SHAPE(4, 3, 3));
    cg_tensor *b = cg_randn(&r, CG_SHAPE(3)), *w3 = cg_randn(&r, CG_SHAPE(3, 4, 3));
    cg_tensor *b4 = cg_randn(&r, CG_SHAPE(4)), *g = cg_randn(&r, CG_SHAPE(2, 3, 7));
    cg_tensor *wb = cg_k_to(w, CG_BF16), *x1 = cg_randn(&r, CG_SHAPE(1, 4, 1));
    cg_conv_cfg c = CG_CONV_DEFAULT;
    REFUSED(cg_conv_transpose1d(NULL, w, b, NULL), "input is NULL");
    REFUSED(cg_conv_transpose1d(x, wb, b, NULL),
            "conv_transpose1d: weight is bfloat16, expected float32");
    REFUSED(cg_conv_transpose1d(x, w3, NULL, NULL),
            "conv_transpose1d: input [2, 4, 6] has 4 channels, weight [3, 4, 3] with groups 1: "
            "the weight must be [4, out / groups, ...]");
    REFUSED(cg_conv_transpose1d(x, w, b4, NULL),
            "conv_transpose1d: bias [4], weight [4, 3, 3]: the bias must be [3]");
    REFUSED(cg_conv_transpose2d(x, w, b, NULL), "conv_transpose2d: weight [4, 3, 3] must be [in, "
                                                "out / groups, KH, KW]");
    c.output_padding[0] = 1;
    REFUSED(cg_conv_transpose1d(x, w, b, &c),
            "conv_transpose1d: output padding must be smaller than either stride or dilation, "
            "but got output_padding 1, stride 1, dilation 1 in spatial dim 0");
    REFUSED(cg_conv1d(x, w3, b, &c), "conv1d: output_padding is the transposed convolution's "
                                     "(got 1 in spatial dim 0)");
    c.stride[0] = 2, c.output_padding[0] = -1;
    REFUSED(cg_conv_transpose1d(x, w, b, &c), "conv_transpose1d: negative output_padding");
    c = CG_CONV_DEFAULT, c.pad = CG_CONV_SAME;
    REFUSED(cg_conv_transpose1d(x, w, b, &c), "conv_transpose1d: padding must be numbers");
    c = CG_CONV_DEFAULT, c.groups = 3;
    REFUSED(cg_conv_transpose1d(x, w, NULL, &c),
            "conv_transpose1d: input [2, 4, 6] has 4 channels");
    c = CG_CONV_DEFAULT, c.padding[0] = 2;
    REFUSED(cg_conv_transpose1d(x1, w, b, &c), "conv_transpose1d: input length 1 in spatial dim "
                                               "0 gives the output length -1, too small");
    c = CG_CONV_DEFAULT, c.stride[0] = 0;
    REFUSED(cg_conv_transpose1d(x, w, b, &c), "conv_transpose1d: stride must be positive");
    REFUSED(cg_k_conv_transpose(4, x, w, b, NULL), "conv_transpose: 4 spatial dims");
    cg_tensor *dx = NULL;
    CG_ASSERT_REFUSED(!cg_k_conv_transpose_backward(1, x, w, NULL, x, &dx, NULL, NULL),
                      "conv_transpose1d backward: gradient float32 [2, 4, 6], expected float32 "
                      "[2, 3, 8]");
    ck_assert(!dx);
    /* the modules */
    c = CG_CONV_DEFAULT, c.output_padding[1] = 2, c.stride[1] = 2;
    REFUSED(cg_conv_transpose2d_new(4, 6, 3, 3, &c, true, &r),
            "ConvTranspose2d: output padding must be smaller than either stride or dilation");
    c = CG_CONV_DEFAULT, c.groups = 4;
    REFUSED(cg_conv_transpose1d_new(4, 6, 3, &c, true, &r),
            "ConvTranspose1d: in_channels 4 and out_channels 6 must be divisible by groups 4");
    cg_conv *m = cg_conv_transpose1d_new(3, 2, 3, NULL, true, &r);
    REFUSED(cg_conv_forward(m, x), "conv_transpose1d: input [2, 4, 6] has 4 channels");
    cg_module_free(CG_MODULE(m));
    cg_release_all(8, x, w, b, w3, b4, g, wb, x1);
}
END_TEST

/* the modules: PyTorch's names, shapes and init bounds; the forward is the
 * functional op's; reset_parameters draws within the same bounds. _i 1:
 * ConvTranspose1d / 2d, weight [in, out / groups, ...], fan_in out /
 * groups times the taps (PyTorch's) */
START_TEST(test_conv_modules)
{
    const bool t = _i;
    cg_rng r = cg_rng_new(21);
    cg_conv_cfg c = CG_CONV_DEFAULT;
    c.groups = 2, c.padding[0] = 1, c.padding[1] = 2;
    if (t)
        c.stride[0] = c.stride[1] = 2, c.output_padding[1] = 1;
    cg_conv *m2 = (t ? cg_conv_transpose2d_new : cg_conv2d_new)(4, 6, 3, 5, &c, true, &r);
    cg_conv *m1 = (t ? cg_conv_transpose1d_new : cg_conv1d_new)(3, 5, 4, NULL, false, &r);
    ck_assert_msg(m1 && m2, "%s", cg_last_error());
    ck_assert_str_eq(m2->base.type, t ? "ConvTranspose2d" : "Conv2d");
    ck_assert_str_eq(m1->base.type, t ? "ConvTranspose1d" : "Conv1d");
    cg_param_list l = {0};
    ck_assert(cg_module_params(CG_MODULE(m2), &l));
    ck_assert_int_eq(l.n, 2);
    ck_assert_str_eq(l.items[0].name, "weight");
    ck_assert_str_eq(l.items[1].name, "bias");
    ck_assert_int_eq(l.items[0].tensor->ndim, 4);
    const int64_t ws[2][4] = {{6, 2, 3, 5}, {4, 3, 3, 5}};
    ck_assert(!memcmp(l.items[0].tensor->shape, ws[t], sizeof ws[t]));
    ck_assert_int_eq(l.items[1].tensor->shape[0], 6);
    cg_param_list_free(&l);
    ck_assert(m1->bias == NULL && m1->weight->ndim == 3);
    ck_assert_int_eq(m1->weight->shape[0], t ? 3 : 5);
    for (int pass = 0; pass < 2; pass++) {
        const double bound2 = 1 / sqrt((t ? 3.0 : 2.0) * 15), bound1 = 1 / sqrt((t ? 5 : 3) * 4.0);
        const cg_tensor *p[3] = {m2->weight, m2->bias, m1->weight};
        const double bd[3] = {bound2, bound2, bound1};
        for (int k = 0; k < 3; k++) {
            float *v = cg_test_values(p[k]);
            double mx = 0;
            for (int64_t i = 0; i < cg_numel(p[k]); i++)
                mx = fmax(mx, fabs(v[i]));
            ck_assert_msg(mx <= bd[k] && (k == 1 || mx > 0.5 * bd[k]), "param %d: max %g, bound %g",
                          k, mx, bd[k]);
            free(v);
        }
        ck_assert(cg_module_reset_parameters(CG_MODULE(m2), &r) &&
                  cg_module_reset_parameters(CG_MODULE(m1), &r));
    }
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 4, 6, 7));
    cg_tensor *y = cg_conv_forward(m2, x);
    cg_tensor *z = (t ? cg_conv_transpose2d : cg_conv2d)(x, m2->weight, m2->bias, &c);
    ck_assert_msg(y && z, "%s", cg_last_error());
    /* transposed: 5 2 - 2 + 2 + 1, 6 2 - 4 + 4 + 1 + 1 */
    const int64_t ys[2][4] = {{2, 6, 6, 7}, {2, 6, 11, 14}};
    ck_assert(y->ndim == 4 && !memcmp(y->shape, ys[t], sizeof ys[t]));
    float *vy = cg_test_values(y), *vz = cg_test_values(z);
    ck_assert(!memcmp(vy, vz, sizeof(float) * (size_t)cg_numel(y)));
    free(vy);
    free(vz);
    cg_tensor *x1 = cg_randn(&r, CG_SHAPE(3, 9)), *y1 = cg_conv_forward(m1, x1);
    ck_assert(y1 && y1->ndim == 2 && y1->shape[0] == 5 && y1->shape[1] == (t ? 12 : 6));
    /* 2 -> 64 channels, kernel 3: the bias's bound 1 / sqrt(2 3), transposed
     * 1 / sqrt(64 3) (the weight's dim 1, not its dim 0) */
    cg_conv *mb = (t ? cg_conv_transpose1d_new : cg_conv1d_new)(2, 64, 3, NULL, true, &r);
    float *vb = cg_test_values(mb->bias);
    const double bb = 1 / sqrt(t ? 64.0 * 3 : 2.0 * 3);
    double mb_max = 0;
    for (int64_t i = 0; i < 64; i++)
        mb_max = fmax(mb_max, fabs(vb[i]));
    ck_assert_msg(mb_max <= bb && mb_max > 0.5 * bb, "bias max %g, bound %g", mb_max, bb);
    free(vb);
    cg_module_free(CG_MODULE(mb));
    cg_release_all(5, x, y, z, x1, y1);
    cg_module_free(CG_MODULE(m1));
    cg_module_free(CG_MODULE(m2));
}
END_TEST

/* an empty batch: an empty output, zero weight and bias gradients */
START_TEST(test_conv_empty_batch)
{
    cg_rng r = cg_rng_new(5);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(0, 2, 5)), true);
    cg_tensor *w = cg_requires_grad(cg_randn(&r, CG_SHAPE(3, 2, 2)), true);
    cg_tensor *b = cg_requires_grad(cg_randn(&r, CG_SHAPE(3)), true);
    cg_tensor *y = cg_conv1d(x, w, b, NULL);
    ck_assert_msg(y && y->shape[0] == 0 && y->shape[1] == 3 && y->shape[2] == 4, "%s",
                  cg_last_error());
    cg_tensor *s = cg_sum_all(y);
    ck_assert(cg_backward(s, NULL, false));
    for (int64_t i = 0; i < 6; i++)
        ck_assert(cg_data(cg_grad(w))[i] == 0.0f);
    ck_assert(cg_data(cg_grad(b))[0] == 0.0f);
    cg_release_all(5, x, w, b, y, s);
}
END_TEST

static Suite *conv_suite(void)
{
    Suite *s = suite_create("conv");
    TCase *tc = tcase_create("conv");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_conv_reference);
    tcase_add_test(tc, test_conv_gradcheck);
    tcase_add_test(tc, test_conv_threads);
    tcase_add_test(tc, test_conv_bf16_precision);
    tcase_add_loop_test(tc, test_conv_bf16_input, 0, 4);
    tcase_add_test(tc, test_conv_refusals);
    tcase_add_test(tc, test_conv_transpose_refusals);
    tcase_add_loop_test(tc, test_conv_modules, 0, 2);
    tcase_add_test(tc, test_conv_empty_batch);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {conv_suite()};
    return cg_test_run(s, 1);
}
